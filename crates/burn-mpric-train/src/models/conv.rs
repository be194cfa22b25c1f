//! A small 1-d convolutional net for tabular data: the feature vector is read as a
//! one-channel sequence.

use burn::module::Module;
use burn::nn::conv::{Conv1d, Conv1dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig1d, Relu};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

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
        let mut dense = Vec::with_capacity(hidden.len());
        let mut width = c_in * inputs;
        for &h in hidden {
            dense.push(LinearConfig::new(width, h).init(device));
            width = h;
        }
        Self {
            convs,
            dense,
            out: LinearConfig::new(width, outputs).init(device),
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
        let x = self
            .dense
            .iter()
            .fold(x, |x, layer| self.act.forward(layer.forward(x)));
        self.out.forward(x)
    }
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
}
