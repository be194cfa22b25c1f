//! Numerics of the decorator on Flex: compute ops equal an explicit cast -> op reference,
//! the identity policy is bit-identical to the bare backend, and mixed-precision training
//! ends close to f32 training with the parameters still at f32.

use burn::backend::{Autodiff, Flex, NdArray};
use burn::optim::{AdamConfig, GradientsParams, Optimizer, SgdConfig};
use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{DType, FloatDType, Tensor, TensorData};
use burn_mpric::{MixedPrecision, MpDevice, Policy, cast_grads_to_param_dtype};

mod common;
use common::{data, mse, params_dtypes, problem, same_init, train};

type Mp = MixedPrecision<Flex>;

fn device(policy: &str) -> MpDevice<Flex> {
    Mp::device(Default::default(), policy.parse::<Policy>().unwrap()).unwrap()
}

#[test]
fn compute_ops_equal_an_explicit_cast_then_op() {
    for (policy, half) in [
        ("mixed_bf16", FloatDType::BF16),
        ("mixed_f16", FloatDType::F16),
    ] {
        let device = device(policy);
        let (a, b) = (data([5, 7], 1), data([7, 3], 2));
        let got = Tensor::<Mp, 2>::from_data(a.clone(), &device)
            .matmul(Tensor::<Mp, 2>::from_data(b.clone(), &device));
        // Computed at the compute dtype, read back at the output dtype (f32): exactly the
        // half-precision values, widened.
        assert_eq!(got.dtype(), DType::from(half));
        let got = got.into_data();
        let bare = Default::default();
        let want = Tensor::<Flex, 2>::from_data(a, &bare)
            .cast(half)
            .matmul(Tensor::<Flex, 2>::from_data(b, &bare).cast(half))
            .into_data();
        assert_eq!(got.dtype, DType::F32);
        assert_eq!(got, want.convert::<f32>(), "{policy}: matmul");

        let x = data([2, 18], 3).convert::<f32>();
        let w = data([4, 9], 4).convert::<f32>();
        let x = TensorData::new(x.to_vec::<f32>().unwrap(), [1, 2, 3, 6]);
        let w = TensorData::new(w.to_vec::<f32>().unwrap(), [2, 2, 3, 3]);
        let options = ConvOptions::new([1, 1], [1, 1], [1, 1], 1);
        let got = conv2d(
            Tensor::<Mp, 4>::from_data(x.clone(), &device),
            Tensor::<Mp, 4>::from_data(w.clone(), &device),
            None,
            options.clone(),
        )
        .into_data();
        let want = conv2d(
            Tensor::<Flex, 4>::from_data(x, &bare).cast(half),
            Tensor::<Flex, 4>::from_data(w, &bare).cast(half),
            None,
            options,
        )
        .into_data();
        assert_eq!(got, want.convert::<f32>(), "{policy}: conv2d");
    }
}

#[test]
fn mixed_training_ends_within_two_percent_of_f32_with_f32_params() {
    let f32_device = Default::default();
    let (f32_loss, _) = train::<Autodiff<Flex>>(&f32_device, &same_init(&f32_device), 200);
    let (start_loss, _) = train::<Autodiff<Flex>>(&f32_device, &same_init(&f32_device), 0);
    assert!(
        f32_loss < start_loss / 4.0,
        "f32 training made progress: {start_loss} -> {f32_loss}"
    );
    for policy in ["mixed_bf16", "mixed_f16"] {
        let device = device(policy);
        let (loss, model) = train::<Autodiff<Mp>>(&device, &same_init(&device), 200);
        let rel = (loss - f32_loss).abs() / f32_loss;
        eprintln!(
            "{policy}: final loss {loss} vs f32 {f32_loss} ({:.3}%)",
            rel * 100.0
        );
        assert!(
            rel < 0.02,
            "{policy}: final loss {loss} vs f32 {f32_loss} ({:.2}%)",
            rel * 100.0
        );
        assert!(params_dtypes(&model).iter().all(|d| *d == DType::F32));
    }
}

#[test]
fn params_stay_at_the_param_dtype_through_100_adam_and_100_sgd_steps() {
    let device = device("mixed_f16");
    let (x, y) = problem::<Autodiff<Mp>>(&device);
    let mut model = same_init::<Autodiff<Mp>>(&device);
    let mut adam = AdamConfig::new().init();
    let mut sgd = SgdConfig::new().init();
    for step in 0..200 {
        let loss = mse(&model, x.clone(), y.clone());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let grads = cast_grads_to_param_dtype(&model, grads);
        model = if step < 100 {
            adam.step(1e-3, model, grads)
        } else {
            sgd.step(1e-3, model, grads)
        };
        assert!(
            params_dtypes(&model).iter().all(|d| *d == DType::F32),
            "step {step}"
        );
    }
}

#[test]
fn pure_half_params_stay_half_through_loss_scaled_adam_and_sgd_steps() {
    use burn_mpric::scale::LossScaler;
    for (policy, half) in [("pure_f16", DType::F16), ("pure_bf16", DType::BF16)] {
        let device = device(policy);
        let (x, y) = problem::<Autodiff<Mp>>(&device);
        let mut model = same_init::<Autodiff<Mp>>(&device);
        assert!(
            params_dtypes(&model).iter().all(|d| *d == half),
            "{policy}: init"
        );
        let mut scaler = LossScaler::dynamic(burn_mpric::scale::LossScaleConfig::new()).unwrap();
        let mut adam = AdamConfig::new().init();
        let mut sgd = SgdConfig::new().init();
        for step in 0..40 {
            let loss = scaler.scale_loss(mse(&model, x.clone(), y.clone()));
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            let outcome;
            (model, outcome) = if step < 20 {
                scaler.step(&mut adam, 1e-3, model, grads)
            } else {
                scaler.step(&mut sgd, 1e-3, model, grads)
            };
            outcome.unwrap();
            // Adam's square root and division run at f32 under the decorator; the step
            // casts the updated parameters back.
            assert!(
                params_dtypes(&model).iter().all(|d| *d == half),
                "{policy}: step {step}: {:?}",
                params_dtypes(&model)
            );
        }
        let stats = scaler.stats();
        assert!(stats.steps > stats.skipped, "{policy}: no step applied");
    }
}

#[test]
fn identity_policy_is_bit_identical_to_the_bare_backend() {
    let device = device("f32");
    let bare = Default::default();
    let mp_model = same_init::<Autodiff<Mp>>(&device);
    let bare_model = same_init::<Autodiff<Flex>>(&bare);
    let (x, y) = problem::<Autodiff<Mp>>(&device);
    let (bx, by) = problem::<Autodiff<Flex>>(&bare);
    let mp_loss = mse(&mp_model, x, y);
    let bare_loss = mse(&bare_model, bx, by);
    assert_eq!(mp_loss.to_data(), bare_loss.to_data());
    let g = mp_loss.backward();
    let bg = bare_loss.backward();
    assert_eq!(
        mp_model.l1.weight.grad(&g).unwrap().into_data(),
        bare_model.l1.weight.grad(&bg).unwrap().into_data()
    );
    assert_eq!(
        mp_model
            .l2
            .bias
            .as_ref()
            .unwrap()
            .grad(&g)
            .unwrap()
            .into_data(),
        bare_model
            .l2
            .bias
            .as_ref()
            .unwrap()
            .grad(&bg)
            .unwrap()
            .into_data()
    );
}

#[test]
fn a_policy_the_device_cannot_run_is_a_configuration_error() {
    let err = MixedPrecision::<NdArray>::device(
        Default::default(),
        "mixed_f16".parse::<Policy>().unwrap(),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("dtype f16") && msg.contains("supports f64, f32"),
        "{msg}"
    );
    // The identity policy runs anywhere, and bit-identically to the bare backend.
    let device = MixedPrecision::<NdArray>::device(Default::default(), Policy::F32).unwrap();
    let a = Tensor::<MixedPrecision<NdArray>, 1>::from_floats([0.1, 0.7], &device).exp();
    let b = Tensor::<NdArray, 1>::from_floats([0.1, 0.7], &Default::default()).exp();
    assert_eq!(a.into_data(), b.into_data());
    // NdArray has no half: the default device falls back to full precision.
    assert_eq!(
        MpDevice::<NdArray>::default().policy(),
        burn_mpric::ResolvedPolicy::F32
    );
}
