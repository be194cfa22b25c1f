//! The weight-cast cache: a value cast to the compute dtype is cast once, for every later use
//! in forward and backward; a new value never inherits the cast.

use burn::backend::{Autodiff, Flex};
use burn::module::{Module, Param};
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Linear, LinearConfig};
use burn::optim::GradientsParams;
use burn::tensor::activation::relu;
use burn::tensor::backend::Backend;
use burn::tensor::module::linear;
use burn::tensor::{DType, Tensor, TensorData};
use burn_mpric::instrument::{Instrumented, record};
use burn_mpric::{MixedPrecision, Policy, cast_grads_to_param_dtype};

type Inner = Instrumented<Flex>;
type Mp = MixedPrecision<Inner>;
type Ad = Autodiff<Mp>;

#[derive(Module, Debug)]
struct Mlp3<B: Backend> {
    layers: Vec<Linear<B>>,
}

const DIMS: [usize; 4] = [8, 16, 12, 4];

fn mlp(device: &burn_mpric::MpDevice<Inner>) -> Mlp3<Ad> {
    let layers = DIMS
        .windows(2)
        .enumerate()
        .map(|(i, d)| {
            let mut layer = LinearConfig::new(d[0], d[1]).init::<Ad>(device);
            let n = d[0] * d[1];
            let w: Vec<f32> = (0..n)
                .map(|k| ((k + i) as f32 * 0.37).sin() * 0.3)
                .collect();
            layer.weight =
                Param::from_tensor(Tensor::from_data(TensorData::new(w, [d[0], d[1]]), device));
            layer
        })
        .collect();
    Mlp3 { layers }
}

/// One training step (forward, backward, gradients at the param dtype) and the casts the
/// inner backend received during it, as (source dtype, shape).
fn step_casts(policy: &str) -> Vec<(DType, Vec<usize>)> {
    let device = Mp::device(Default::default(), policy.parse::<Policy>().unwrap()).unwrap();
    let model = mlp(&device);
    let x = Tensor::<Ad, 2>::from_data(
        TensorData::new((0..32).map(|i| i as f32 * 0.1 - 1.0).collect(), [4, 8]),
        &device,
    );
    let y = Tensor::<Ad, 2>::zeros([4, 4], &device);
    let (_, ops) = record(|| {
        let mut h = x;
        for (i, layer) in model.layers.iter().enumerate() {
            h = layer.forward(h);
            if i + 1 < model.layers.len() {
                h = relu(h);
            }
        }
        let loss = MseLoss::new().forward(h, y, Reduction::Mean);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        cast_grads_to_param_dtype(&model, grads)
    });
    ops.into_iter()
        .filter(|op| op.op == "float_cast")
        .map(|op| (op.float_inputs[0], op.float_shapes[0].clone()))
        .collect()
}

#[test]
fn a_training_step_casts_each_weight_once() {
    for policy in ["mixed_bf16", "mixed_f16"] {
        let casts = step_casts(policy);
        assert!(
            casts.len() <= 15,
            "{policy}: {} casts: {casts:?}",
            casts.len()
        );
        // Each f32 weight is cast down once, though forward and backward both use it.
        for d in DIMS.windows(2) {
            let weight = vec![d[0], d[1]];
            let count = casts
                .iter()
                .filter(|(dtype, shape)| *dtype == DType::F32 && *shape == weight)
                .count();
            assert_eq!(
                count, 1,
                "{policy}: weight {weight:?} cast {count} times: {casts:?}"
            );
        }
        // So is the input batch, though the first layer's forward and its weight gradient
        // both read it at the compute dtype.
        let input = casts
            .iter()
            .filter(|(dtype, shape)| *dtype == DType::F32 && *shape == vec![4, DIMS[0]])
            .count();
        assert_eq!(input, 1, "{policy}: input cast {input} times: {casts:?}");
    }
}

#[test]
fn a_new_value_never_inherits_a_cast_and_the_identity_policy_casts_nothing() {
    let device = Mp::device(Default::default(), "mixed_bf16".parse::<Policy>().unwrap()).unwrap();
    let w = Tensor::<Mp, 2>::from_data(
        TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]),
        &device,
    );
    let x = Tensor::<Mp, 2>::from_data(TensorData::new(vec![0.5f32, -1.0], [1, 2]), &device);
    let (w2, ops) = record(|| {
        let _ = linear(x.clone(), w.clone(), None); // casts x and w
        let _ = linear(x.clone(), w.clone(), None); // reuses both casts (an input, a weight)
        // A new f32 value (w + 1) is cast afresh.
        let w2 = w.clone().add_scalar(1.0);
        let _ = linear(x.clone(), w2.clone(), None); // casts w2
        w2
    });
    let casts = ops.iter().filter(|op| op.op == "float_cast").count();
    assert_eq!(casts, 3, "{ops:?}");
    // An activation (an op's f32 result) used as `x` is cast at every use: its half copy is
    // not kept beside it.
    let h = x.clone().add_scalar(0.5);
    let ((), ops) = record(|| {
        let _ = linear(h.clone(), w.clone(), None);
        let _ = linear(h.clone(), w.clone(), None);
    });
    let casts: Vec<_> = ops.iter().filter(|op| op.op == "float_cast").collect();
    assert_eq!(casts.len(), 2, "{ops:?}");
    assert!(
        casts.iter().all(|op| op.float_shapes[0] == vec![1, 2]),
        "{casts:?}"
    );
    // The product with the new value uses its values, not w's cached ones.
    let fresh = Tensor::<Mp, 2>::from_data(
        TensorData::new(vec![2.0f32, 3.0, 4.0, 5.0], [2, 2]),
        &device,
    );
    assert_eq!(
        linear(x.clone(), w2, None).into_data(),
        linear(x, fresh, None).into_data()
    );

    assert!(step_casts("f32").is_empty());
}
