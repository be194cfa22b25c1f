//! What the loss scaler's check costs the backend: per packed buffer of gradients one
//! multiply and one reduction, and one host read per step, however many gradients there are.

mod common;

use std::collections::BTreeSet;

use burn::backend::{Autodiff, Flex};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use burn_mpric::instrument::{Instrumented, OpRecord, record};
use burn_mpric::{MixedPrecision, Policy};
use burn_mpric_scale::LossScaler;
use common::{mse, problem, same_init};

type Mp = MixedPrecision<Instrumented<Flex>>;
type Ad = Autodiff<Mp>;

fn count(ops: &[OpRecord], name: &str) -> usize {
    ops.iter().filter(|op| op.op == name).count()
}

#[test]
fn the_check_of_four_gradients_costs_one_multiply_one_reduction_and_one_read_per_dtype() {
    for policy in ["f32", "mixed_f16"] {
        let device = Mp::device(Default::default(), policy.parse::<Policy>().unwrap()).unwrap();
        let model = same_init::<Ad>(&device);
        let (x, y) = problem::<Ad>(&device);
        // A scale the f16 backward does not overflow at (2^16 would, on this first step).
        let scaler = LossScaler::fixed(1024.0).unwrap();
        let loss = scaler.scale_loss(mse(&model, x, y));
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        assert_eq!(grads.len(), 4);
        // Gradients of one dtype share one buffer (at mixed_f16 the gradients that come out
        // of a half matmul are f16, the output layer's bias's is f32).
        let dtypes: BTreeSet<String> = [
            grads.get::<Mp, 2>(model.l1.weight.id).map(|g| g.dtype()),
            grads
                .get::<Mp, 1>(model.l1.bias.as_ref().unwrap().id)
                .map(|g| g.dtype()),
            grads.get::<Mp, 2>(model.l2.weight.id).map(|g| g.dtype()),
            grads
                .get::<Mp, 1>(model.l2.bias.as_ref().unwrap().id)
                .map(|g| g.dtype()),
        ]
        .iter()
        .map(|dtype| format!("{:?}", dtype.expect("a gradient")))
        .collect();
        let buffers = dtypes.len();

        let (checked, ops) = record(|| scaler.check(&model, grads, None::<Tensor<Ad, 1>>));
        let checked = checked.unwrap();
        assert!(checked.finite);
        assert_eq!(checked.grads.len(), 4);
        assert_eq!(
            count(&ops, "float_mul_scalar"),
            buffers,
            "{policy}: {ops:?}"
        );
        assert_eq!(count(&ops, "float_sum"), buffers, "{policy}: {ops:?}");
        // One copy per packed gradient (a buffer of one gradient is not copied).
        assert!(count(&ops, "float_cat") <= buffers, "{policy}: {ops:?}");
        assert_eq!(count(&ops, "tr_execute"), 1, "{policy}: one host read");
        // The decision is taken on the host: nothing reduces to a flag on the device.
        let on_device_flag = ops
            .iter()
            .filter(|op| op.op.starts_with("bool_") || op.op.starts_with("int_"))
            .count();
        assert_eq!(on_device_flag, 0, "{policy}: {ops:?}");
        assert!(buffers < 4);
    }
}

#[test]
fn naming_the_overflowed_parameters_costs_one_more_read_on_skipped_steps_only() {
    let device = Mp::device(Default::default(), "mixed_f16".parse::<Policy>().unwrap()).unwrap();
    let model = same_init::<Ad>(&device);
    let step_ops = |scale: f32| {
        let (x, y) = problem::<Ad>(&device);
        let mut scaler = LossScaler::fixed(scale).unwrap();
        let loss = scaler.scale_loss(mse(&model, x, y));
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let mut optim = burn::optim::SgdConfig::new().init();
        let ((_, outcome), ops) =
            record(|| scaler.step_with_loss(&mut optim, 0.01, model.clone(), grads, loss));
        (outcome.unwrap(), ops)
    };
    // 1024 trains this first step at f16; 2^30 overflows it.
    let (applied, ops) = step_ops(1024.0);
    assert!(applied.is_applied() && applied.overflow.is_none());
    assert_eq!(count(&ops, "tr_execute"), 1, "one read: {ops:?}");
    let (skipped, ops) = step_ops(2f32.powi(30));
    assert!(skipped.is_skipped());
    assert!(!skipped.overflow.unwrap().params.is_empty());
    assert_eq!(
        count(&ops, "tr_execute"),
        2,
        "the check's read and the names' read"
    );
}
