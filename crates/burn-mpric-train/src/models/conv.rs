//! Small convolutional nets: 1-d over tabular data (the feature vector read as a
//! one-channel sequence), 2-d over images.

use burn::module::Module;
use burn::nn::conv::{Conv1d, Conv1dConfig, Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig1d, PaddingConfig2d, Relu};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use crate::data::images::ImageShape;
use crate::models::Notation;
use crate::recipe::ConvConfig;

/// Conv1d layers ("same" padding, ReLU), flattened, then dense layers and an output layer.
#[derive(Module, Debug)]
pub struct ConvNet<B: Backend> {
    convs: Vec<Conv1d<B>>,
    dense: Vec<Linear<B>>,
    out: Linear<B>,
    act: Relu,
}

impl<B: Backend> ConvNet<B> {
    /// `inputs` features, conv `channels` with `kernel_size`, dense `hidden` widths,
    /// `outputs` outputs.
    pub fn new(
        inputs: usize,
        channels: &[usize],
        kernel_size: usize,
        hidden: &[usize],
        outputs: usize,
        device: &B::Device,
    ) -> Self {
        let pad = kernel_size / 2;
        let mut convs = Vec::with_capacity(channels.len());
        let mut c_in = 1;
        for &c in channels {
            convs.push(
                Conv1dConfig::new(c_in, c, kernel_size)
                    .with_padding(PaddingConfig1d::Explicit(pad, pad))
                    .init(device),
            );
            c_in = c;
        }
        let (dense, out) = dense_layers(c_in * inputs, hidden, outputs, device);
        Self {
            convs,
            dense,
            out,
            act: Relu::new(),
        }
    }

    /// `[batch, inputs]` to `[batch, outputs]`.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let [n, f] = x.dims();
        let x = x.reshape([n, 1, f]);
        let x = self
            .convs
            .iter()
            .fold(x, |x, conv| self.act.forward(conv.forward(x)));
        let [n, c, f] = x.dims();
        let x = x.reshape([n, c * f]);
        dense_forward(&self.dense, &self.out, &self.act, x)
    }
}

/// Conv2d layers ("same" padding, ReLU, then 2×2 max pooling while the image is at least
/// 2 pixels wide), flattened, then dense layers and an output layer: model kind `conv` on
/// image data.
#[derive(Module, Debug)]
pub struct ImageConvNet<B: Backend> {
    convs: Vec<Conv2d<B>>,
    /// How many of the convolutions (the first ones) are followed by pooling.
    pooled: usize,
    pool: MaxPool2d,
    dense: Vec<Linear<B>>,
    out: Linear<B>,
    act: Relu,
    /// Channels, height and width of the input.
    shape: [usize; 3],
}

impl<B: Backend> ImageConvNet<B> {
    /// Images of `shape`, conv `channels` with `kernel_size`, dense `hidden` widths,
    /// `outputs` classes.
    pub fn new(
        shape: ImageShape,
        channels: &[usize],
        kernel_size: usize,
        hidden: &[usize],
        outputs: usize,
        device: &B::Device,
    ) -> Self {
        let pad = kernel_size / 2;
        let mut convs = Vec::with_capacity(channels.len());
        let mut c_in = shape.channels;
        for &c in channels {
            convs.push(
                Conv2dConfig::new([c_in, c], [kernel_size, kernel_size])
                    .with_padding(PaddingConfig2d::Explicit(pad, pad, pad, pad))
                    .init(device),
            );
            c_in = c;
        }
        let (side, pooled) = pooling(shape.size, channels.len());
        let (dense, out) = dense_layers(c_in * side * side, hidden, outputs, device);
        Self {
            convs,
            pooled,
            pool: MaxPool2dConfig::new([2, 2]).init(),
            dense,
            out,
            act: Relu::new(),
            shape: [shape.channels, shape.size, shape.size],
        }
    }

    /// `[batch, channels × size × size]` (channel-major pixels) to `[batch, outputs]`.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let [n, _] = x.dims();
        let [c, h, w] = self.shape;
        let mut x = x.reshape([n, c, h, w]);
        for (i, conv) in self.convs.iter().enumerate() {
            x = self.act.forward(conv.forward(x));
            if i < self.pooled {
                x = self.pool.forward(x);
            }
        }
        let [n, c, h, w] = x.dims();
        let x = x.reshape([n, c * h * w]);
        dense_forward(&self.dense, &self.out, &self.act, x)
    }
}

/// [`ConvNet`]'s forward pass for an export, in `notation`.
pub(crate) fn describe_forward(config: &ConvConfig, notation: &Notation) -> String {
    format!(
        "conv on columns: {}; x as [1 channel, features]; for i in 0..{}: x = relu(conv1d(x, convs.i.weight [out, in, {k}], convs.i.bias, stride 1, zero padding {pad} on each side)); x = flatten(x) in [channel, feature] order; {}",
        notation.columns,
        config.channels.len(),
        describe_dense(config, notation),
        k = config.kernel_size,
        pad = config.kernel_size / 2,
    )
}

/// [`ImageConvNet`]'s forward pass for an export of images `size` pixels square, in
/// `notation`.
pub(crate) fn describe_image_forward(
    config: &ConvConfig,
    size: usize,
    notation: &Notation,
) -> String {
    let (_, pooled) = pooling(size, config.channels.len());
    format!(
        "conv on images: x = the image resized to {size}x{size}, its pixels / 255 as [channels, {size}, {size}] (channel-major; rgb or one gray channel), each channel standardized: (x - schema.scaling.mean[c]) / schema.scaling.std[c]; for i in 0..{}: x = relu(conv2d(x, convs.i.weight [out, in, {k}, {k}], convs.i.bias, stride 1, zero padding {pad} on every side)), and for i < {pooled}: x = max_pool(x, 2x2, stride 2); x = flatten(x) in [channel, row, column] order; {}",
        config.channels.len(),
        describe_dense(config, notation),
        k = config.kernel_size,
        pad = config.kernel_size / 2,
    )
}

/// The dense layers and the output layer of both conv models, and how to read the outputs,
/// for an export.
fn describe_dense(config: &ConvConfig, notation: &Notation) -> String {
    format!(
        "for i in 0..{}: x = relu(linear(dense.i, x)); out = linear(out, x); {}; {}",
        config.hidden.len(),
        notation.linear,
        notation.outputs
    )
}

/// The side of an image of `size` pixels after `convs` convolutions, and how many of them are
/// followed by pooling: each pooling halves it while it is at least 2 pixels wide.
fn pooling(size: usize, convs: usize) -> (usize, usize) {
    let (mut side, mut pooled) = (size, 0);
    for _ in 0..convs {
        if side >= 2 {
            side /= 2;
            pooled += 1;
        }
    }
    (side, pooled)
}

/// Dense layers of `hidden` widths from `width` inputs, and the output layer.
fn dense_layers<B: Backend>(
    mut width: usize,
    hidden: &[usize],
    outputs: usize,
    device: &B::Device,
) -> (Vec<Linear<B>>, Linear<B>) {
    let mut dense = Vec::with_capacity(hidden.len());
    for &h in hidden {
        dense.push(LinearConfig::new(width, h).init(device));
        width = h;
    }
    (dense, LinearConfig::new(width, outputs).init(device))
}

/// The dense layers (each followed by `act`), then the output layer.
fn dense_forward<B: Backend>(
    dense: &[Linear<B>],
    out: &Linear<B>,
    act: &Relu,
    x: Tensor<B, 2>,
) -> Tensor<B, 2> {
    let x = dense
        .iter()
        .fold(x, |x, layer| act.forward(layer.forward(x)));
    out.forward(x)
}

#[cfg(test)]
// Each test holds `rng_lock`: Burn's RNG is the process's, and a seeded init may run on
// another test thread.
mod tests {
    #[test]
    fn convnet() {
        let _rng = crate::models::rng_lock();
        use crate::models::conv::ConvNet;
        use burn::backend::Flex;
        use burn::tensor::Tensor;

        let device = Default::default();
        let net = ConvNet::<Flex>::new(11, &[4, 4], 3, &[16], 6, &device);
        assert_eq!(net.forward(Tensor::zeros([5, 11], &device)).dims(), [5, 6]);
    }

    #[test]
    fn new() {
        let _rng = crate::models::rng_lock();
        use crate::models::conv::ConvNet;
        use burn::backend::Flex;

        use burn::module::Module;

        let net = ConvNet::<Flex>::new(4, &[2], 3, &[], 3, &Default::default());
        // conv 1 -> 2 channels (kernel 3, with bias), then 2 x 4 flattened -> 3.
        assert_eq!(net.num_params(), 2 * 3 + 2 + 8 * 3 + 3);
    }

    #[test]
    fn forward() {
        let _rng = crate::models::rng_lock();
        use crate::models::conv::ConvNet;
        use burn::backend::Flex;
        use burn::tensor::Tensor;

        let device = Default::default();
        let net = ConvNet::<Flex>::new(4, &[2], 3, &[], 3, &device);
        assert_eq!(net.forward(Tensor::ones([5, 4], &device)).dims(), [5, 3]);
    }

    #[test]
    fn image_convnet() {
        let _rng = crate::models::rng_lock();
        use crate::data::images::ImageShape;
        use crate::models::conv::ImageConvNet;
        use burn::backend::Flex;
        use burn::module::Module;
        use burn::tensor::Tensor;

        let device = Default::default();
        let shape = ImageShape {
            channels: 3,
            size: 5,
        };
        // 5x5 -> conv, pool -> 2x2 -> conv, pool -> 1x1 -> conv (no pool): 4 channels x 1 x 1.
        let net = ImageConvNet::<Flex>::new(shape, &[2, 3, 4], 3, &[], 6, &device);
        assert_eq!(net.forward(Tensor::zeros([7, 75], &device)).dims(), [7, 6]);
        let convs = (3 * 2 * 9 + 2) + (2 * 3 * 9 + 3) + (3 * 4 * 9 + 4);
        assert_eq!(net.num_params(), convs + 4 * 6 + 6);
    }
}
