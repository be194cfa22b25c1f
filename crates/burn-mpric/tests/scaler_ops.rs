//! What the loss scaler's check costs the backend: per packed buffer of gradients one
//! multiply and one reduction, and one host read per step, however many gradients there are.

use std::collections::BTreeSet;

use burn::backend::{Autodiff, Flex};
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::GradientsParams;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn_mpric::instrument::{Instrumented, OpRecord, record};
use burn_mpric::{MixedPrecision, Policy};
use burn_mpric_scale::LossScaler;

type Inner = Instrumented<Flex>;
type Mp = MixedPrecision<Inner>;
type Ad = Autodiff<Mp>;

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    layers: Vec<Linear<B>>,
}

fn count(ops: &[OpRecord], name: &str) -> usize {
    ops.iter().filter(|op| op.op == name).count()
}

#[test]
fn the_check_of_six_gradients_costs_one_multiply_one_reduction_and_one_read_per_dtype() {
    for policy in ["f32", "mixed_f16"] {
        let device = Mp::device(Default::default(), policy.parse::<Policy>().unwrap()).unwrap();
        let dims = [8, 16, 12, 4];
        let model = Mlp::<Ad> {
            layers: dims
                .windows(2)
                .map(|d| LinearConfig::new(d[0], d[1]).init(&device))
                .collect(),
        };
        let x = Tensor::<Ad, 2>::from_data(
            TensorData::new((0..32).map(|i| i as f32 * 0.1 - 1.0).collect(), [4, 8]),
            &device,
        );
        // A scale the f16 backward does not overflow at (2^16 would, on this first step).
        let scaler = LossScaler::fixed(1024.0).unwrap();
        let loss = scaler.scale_loss(
            model
                .layers
                .iter()
                .fold(x, |h, layer| layer.forward(h))
                .sum(),
        );
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        assert_eq!(grads.len(), 6);
        // Gradients of one dtype share one buffer (at mixed_f16 the last bias's gradient is
        // f32, the others f16).
        let mut dtypes = BTreeSet::new();
        for layer in &model.layers {
            dtypes.insert(format!(
                "{:?}",
                grads.get::<Mp, 2>(layer.weight.id).unwrap().dtype()
            ));
            let bias = layer.bias.as_ref().unwrap().id;
            dtypes.insert(format!("{:?}", grads.get::<Mp, 1>(bias).unwrap().dtype()));
        }
        let buffers = dtypes.len();

        let (checked, ops) = record(|| scaler.check(&model, grads, None::<Tensor<Ad, 1>>));
        let checked = checked.unwrap();
        assert!(checked.finite);
        assert_eq!(checked.grads.len(), 6);
        assert_eq!(
            count(&ops, "float_mul_scalar"),
            buffers,
            "{policy}: {ops:?}"
        );
        assert_eq!(count(&ops, "float_sum"), buffers, "{policy}: {ops:?}");
        // One copy per packed gradient (a buffer of one gradient is not copied).
        assert!(count(&ops, "float_cat") <= buffers, "{policy}: {ops:?}");
        assert_eq!(count(&ops, "tr_execute"), 1, "{policy}: one host read");
        // The decision is taken on the host: nothing reduces on the device to a flag.
        let on_device_flag = ops
            .iter()
            .filter(|op| op.op.starts_with("bool_") || op.op.starts_with("int_"))
            .count();
        assert_eq!(on_device_flag, 0, "{policy}: {ops:?}");
        assert!(buffers < 6);
    }
}
