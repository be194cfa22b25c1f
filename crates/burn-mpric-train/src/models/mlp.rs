//! A multi-layer perceptron for tabular data.

use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use crate::models::Notation;
use crate::recipe::MlpConfig;

/// Dense layers with ReLU between them, then a linear output layer.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    layers: Vec<Linear<B>>,
    out: Linear<B>,
    act: Relu,
}

impl<B: Backend> Mlp<B> {
    /// `inputs` features, hidden widths `hidden`, `outputs` outputs.
    pub fn new(inputs: usize, hidden: &[usize], outputs: usize, device: &B::Device) -> Self {
        let mut layers = Vec::with_capacity(hidden.len());
        let mut width = inputs;
        for &h in hidden {
            layers.push(LinearConfig::new(width, h).init(device));
            width = h;
        }
        Self {
            layers,
            out: LinearConfig::new(width, outputs).init(device),
            act: Relu::new(),
        }
    }

    /// `[batch, inputs]` to `[batch, outputs]`.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let x = self
            .layers
            .iter()
            .fold(x, |x, layer| self.act.forward(layer.forward(x)));
        self.out.forward(x)
    }
}

/// [`Mlp`]'s forward pass for an export, in `notation`.
pub(crate) fn describe_forward(config: &MlpConfig, notation: &Notation) -> String {
    format!(
        "mlp: {}; for i in 0..{}: x = relu(linear(layers.i, x)); out = linear(out, x); {}; {}",
        notation.columns,
        config.hidden.len(),
        notation.linear,
        notation.outputs
    )
}

#[cfg(test)]
// Each test holds `rng_lock`: Burn's RNG is the process's, and a seeded init may run on
// another test thread.
mod tests {
    #[test]
    fn mlp() {
        let _rng = crate::models::rng_lock();
        use crate::models::mlp::Mlp;
        use burn::backend::Flex;
        use burn::tensor::Tensor;

        let device = Default::default();
        let mlp = Mlp::<Flex>::new(4, &[8, 8], 3, &device);
        let y = mlp.forward(Tensor::zeros([2, 4], &device));
        assert_eq!(y.dims(), [2, 3]);
    }

    #[test]
    fn new() {
        let _rng = crate::models::rng_lock();
        use crate::models::mlp::Mlp;
        use burn::backend::Flex;

        use burn::module::Module;

        let mlp = Mlp::<Flex>::new(3, &[], 2, &Default::default());
        assert_eq!(mlp.num_params(), 3 * 2 + 2);
    }

    #[test]
    fn forward() {
        let _rng = crate::models::rng_lock();
        use crate::models::mlp::Mlp;
        use burn::backend::Flex;
        use burn::tensor::Tensor;

        let device = Default::default();
        let mlp = Mlp::<Flex>::new(3, &[5], 2, &device);
        assert_eq!(mlp.forward(Tensor::ones([7, 3], &device)).dims(), [7, 2]);
    }
}
