//! Both editions' device paths name overflowed parameters by one rule: a parameter whose
//! gradient is split across devices (Burn's `MultiGradientsParams`) is named once, however many
//! of its shards overflowed, in the module's order; and a sync with nothing pending reads
//! nothing and reports nothing. The expected names are the model's own parameters, written
//! out here, not read from either edition.
//!
//! The model is a 1x1 linear layer (`weight`, `bias`); each step hands two shards whose
//! gradients are planted: finite, NaN or infinite.

use burn::backend::{Autodiff, Flex};
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::optim::{GradientsParams, MultiGradientsParams};
use burn::prelude::DeviceOps;
use burn::tensor::Tensor;
use burn_mpric_scale::{
    DeviceLossScaler, DeviceOptimizer, DeviceSgdConfig, LossScaleConfig, LossScaler, StepOutcome,
};

type B = Autodiff<Flex>;

/// One step's two shards: per shard, the weight's and the bias's gradient.
type Shards = [[f32; 2]; 2];

/// Both shards overflow in the weight; then one shard overflows in both parameters (the other
/// is finite); then every gradient is finite.
const STEPS: [Shards; 3] = [
    [[f32::NAN, 1.0], [f32::NAN, 1.0]],
    [[1.0, 1.0], [f32::INFINITY, f32::NAN]],
    [[1.0, 1.0], [1.0, 1.0]],
];

/// What each step should report: the names of its overflowed parameters, `None` where applied.
fn expected() -> Vec<Option<Vec<String>>> {
    let names = |n: &[&str]| Some(n.iter().map(|s| s.to_string()).collect());
    vec![names(&["weight"]), names(&["weight", "bias"]), None]
}

fn scale() -> LossScaleConfig {
    LossScaleConfig::new().with_initial_scale(1024.0)
}

fn names(outcomes: &[StepOutcome]) -> Vec<Option<Vec<String>>> {
    outcomes
        .iter()
        .map(|o| {
            assert_eq!(o.is_skipped(), o.overflow.is_some(), "{o:?}");
            o.overflow.as_ref().map(|overflow| overflow.params.clone())
        })
        .collect()
}

fn run_021() -> Vec<Option<Vec<String>>> {
    let device = Default::default();
    let mut model: Linear<B> = LinearConfig::new(1, 1)
        .with_initializer(Initializer::Constant { value: 1.0 })
        .init(&device);
    let host = LossScaler::dynamic(scale()).unwrap();
    let mut scaler = DeviceLossScaler::<Flex>::new(host, &device)
        .unwrap()
        .with_overflow_names(true);
    assert!(scaler.sync().unwrap().is_empty());
    let mut optim = DeviceOptimizer::new(DeviceSgdConfig::new());
    for shards in STEPS {
        let grads = shards
            .map(|[w, b]| {
                let mut grads = GradientsParams::new();
                let weight = Tensor::<Flex, 2>::from_floats([[w]], &device);
                grads.register::<Flex, 2>(model.weight.id, weight);
                let bias = Tensor::<Flex, 1>::from_floats([b], &device);
                grads.register::<Flex, 1>(model.bias.as_ref().unwrap().id, bias);
                (grads, device.to_id())
            })
            .into_iter()
            .collect();
        let grads = MultiGradientsParams { grads };
        let (next, learned) =
            scaler.step_multi(&mut optim, 0.0, model, grads, None::<Tensor<B, 1>>);
        model = next;
        assert!(learned.unwrap().is_empty());
    }
    let outcomes = scaler.sync().unwrap();
    assert_eq!(scaler.pending(), 0);
    assert!(scaler.sync().unwrap().is_empty());
    names(&outcomes)
}

fn run_022() -> Vec<Option<Vec<String>>> {
    use burn_mpric_022::{DeviceLossScaler, DeviceOptimizer, LossScaler};
    use burn022::nn::{Initializer, Linear, LinearConfig};
    use burn022::optim::{GradientsParams, MultiGradientsParams};
    use burn022::tensor::{Device, Tensor};

    let device = Device::flex().autodiff();
    let inner = device.clone().without_autodiff();
    let mut model: Linear = LinearConfig::new(1, 1)
        .with_initializer(Initializer::Constant { value: 1.0 })
        .init(&device);
    let host = LossScaler::dynamic(scale()).unwrap();
    let mut scaler = DeviceLossScaler::new(host, &device)
        .unwrap()
        .with_overflow_names(true);
    assert!(scaler.sync().unwrap().is_empty());
    let mut optim = DeviceOptimizer::new(DeviceSgdConfig::new());
    for shards in STEPS {
        let grads = shards
            .map(|[w, b]| {
                let mut grads = GradientsParams::new();
                let weight = Tensor::<2>::from_floats([[w]], &inner);
                grads.register::<2>(model.weight.id, weight);
                let bias = Tensor::<1>::from_floats([b], &inner);
                grads.register::<1>(model.bias.as_ref().unwrap().id, bias);
                (grads, inner.clone())
            })
            .into_iter()
            .collect();
        let grads = MultiGradientsParams { grads };
        let (next, learned) = scaler.step_multi(&mut optim, 0.0, model, grads, None::<Tensor<1>>);
        model = next;
        assert!(learned.unwrap().is_empty());
    }
    let outcomes = scaler.sync().unwrap();
    assert_eq!(scaler.pending(), 0);
    assert!(scaler.sync().unwrap().is_empty());
    names(&outcomes)
}

#[test]
fn a_parameter_split_across_devices_is_named_once_in_both_editions() {
    assert_eq!(run_021(), expected(), "Burn 0.21 edition");
    assert_eq!(run_022(), expected(), "Burn 0.22 edition");
}
