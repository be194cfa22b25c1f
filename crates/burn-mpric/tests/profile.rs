//! `instrument::profile` on real backends: the ops of a mixed training step with their dtypes
//! in and out (the same ops `record` sees), each op's time where it was spent, on Flex and on
//! Wgpu (lavapipe), where the profile has to wait for the device at every boundary.

use std::rc::Rc;
use std::time::{Duration, Instant};

use burn::backend::{Autodiff, Flex, Wgpu};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor};
use burn_mpric::instrument::{Instrumented, Profile, profile, record};
use burn_mpric::{MixedPrecision, Policy};

type Mixed<B> = Autodiff<MixedPrecision<Instrumented<B>>>;

/// One forward and backward pass of a Linear layer.
fn mixed_step<B: Backend>(model: &Linear<Mixed<B>>, x: &Tensor<Mixed<B>, 2>) {
    let loss = model.forward(x.clone()).powf_scalar(2.0).mean();
    let _grads = loss.backward();
}

/// The model and its input at `p=f32,c=<half>,o=f32`.
fn mixed_setup<B: Backend>(
    device: &B::Device,
    half: &str,
) -> (Linear<Mixed<B>>, Tensor<Mixed<B>, 2>) {
    let policy: Policy = format!("p=f32,c={half},o=f32").parse().unwrap();
    let mp = MixedPrecision::<Instrumented<B>>::device(device.clone(), policy).unwrap();
    let model = LinearConfig::new(32, 16).init::<Mixed<B>>(&mp);
    let x = Tensor::<Mixed<B>, 2>::ones([8, 32], &mp);
    // Parameters are made lazily: once before profiling, so the profile holds the step alone.
    mixed_step(&model, &x);
    (model, x)
}

/// Waits for `device`.
fn sync_of<B: Backend>(device: &B::Device) -> Rc<dyn Fn()> {
    let device = device.clone();
    Rc::new(move || B::sync(&device).unwrap())
}

/// The profile lists the ops `record` lists for the same step, in the same order, each with
/// the dtypes it returned; and its times add up to no more than the wall time around it.
fn same_ops_as_record<B: Backend>(device: B::Device, half: &str, half_dtype: DType) {
    let (model, x) = mixed_setup::<B>(&device, half);
    let sync = sync_of::<B>(&device);
    let ((), recorded) = record(|| mixed_step(&model, &x));
    let started = Instant::now();
    let ((), profiled) = profile(sync, || mixed_step(&model, &x));
    let wall = started.elapsed();

    let names = |ops: &mut dyn Iterator<Item = &'static str>| ops.collect::<Vec<_>>();
    assert_eq!(
        names(&mut profiled.ops.iter().map(|op| op.record.op)),
        names(&mut recorded.iter().map(|op| op.op)),
    );
    assert!(
        profiled.total() <= wall,
        "{:?} > {wall:?}",
        profiled.total()
    );

    // The compute at the half dtype, and the casts back to f32 for the loss (o=f32): every
    // cast changes the dtype.
    let casts: Vec<_> = profiled
        .ops
        .iter()
        .filter(|op| op.record.op == "float_cast")
        .map(|op| {
            (
                op.record.float_inputs.clone(),
                op.record.float_outputs.clone(),
            )
        })
        .collect();
    assert!(
        casts.contains(&(vec![half_dtype], vec![DType::F32])),
        "{casts:?}"
    );
    assert!(casts.iter().all(|(i, o)| i != o), "{casts:?}");
    let linear = &profiled.ops[0].record;
    assert_eq!(linear.op, "linear");
    assert_eq!(linear.float_inputs, [half_dtype; 3], "input, weight, bias");
    assert_eq!(linear.float_outputs, [half_dtype]);

    // Every cast of the step is in the summary once per kind, with its calls counted.
    let summary = profiled.by_kind();
    let cast_calls: usize = summary
        .iter()
        .filter(|s| s.op == "float_cast")
        .map(|s| s.calls)
        .sum();
    assert_eq!(cast_calls, casts.len());
    let summed: Duration = summary.iter().map(|s| s.time).sum();
    assert_eq!(summed + profiled.between, profiled.total());
}

/// A large matmul between two tiny ops: the time lands on the matmul, not beside it.
fn time_lands_on_the_op<B: Backend>(device: B::Device) {
    type I<B> = Instrumented<B>;
    let big = Tensor::<I<B>, 2>::ones([384, 384], &device);
    let tiny = Tensor::<I<B>, 1>::ones([4], &device);
    let sync = sync_of::<B>(&device);
    let ops = || {
        let a = tiny.clone().exp();
        let m = big.clone().matmul(big.clone());
        let b = tiny.clone().abs();
        (a, m, b)
    };
    // Once unprofiled first: a GPU backend compiles each kernel at its first call.
    let _ = ops();
    // A 384^3 matmul (~57 MFLOP) against ops on 4 values. Timing on a shared machine can be
    // interrupted, so the best of a few profiles is judged; time charged to the wrong op
    // would fail every one of them.
    let charged_right = |profiled: &Profile| {
        let time = |name: &str| {
            let op = profiled.ops.iter().find(|op| op.record.op == name);
            op.map(|op| op.time).unwrap()
        };
        let matmul = time("float_matmul");
        matmul > time("float_exp") * 5 && matmul > time("float_abs") * 5
    };
    let profiles: Vec<Profile> = (0..5).map(|_| profile(sync.clone(), ops).1).collect();
    assert!(profiles.iter().any(charged_right), "{profiles:#?}");
    for profiled in &profiles {
        let names: Vec<_> = profiled.ops.iter().map(|op| op.record.op).collect();
        assert_eq!(names, ["float_exp", "float_matmul", "float_abs"]);
    }
}

#[test]
fn a_bf16_step_profile_lists_the_recorded_ops_with_their_dtypes_on_flex() {
    same_ops_as_record::<Flex>(Default::default(), "bf16", DType::BF16);
}

#[test]
fn an_f16_step_profile_lists_the_recorded_ops_with_their_dtypes_on_wgpu() {
    same_ops_as_record::<Wgpu>(Default::default(), "f16", DType::F16);
}

#[test]
fn an_ops_time_is_charged_to_that_op_on_flex() {
    time_lands_on_the_op::<Flex>(Default::default());
}

#[test]
fn an_ops_time_is_charged_to_that_op_on_wgpu() {
    time_lands_on_the_op::<Wgpu>(Default::default());
}
