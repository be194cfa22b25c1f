//! The GPU path on Wgpu (on CI: Mesa's lavapipe, a software Vulkan driver running real
//! wgpu kernels). f16 compute matches an explicit cast -> op reference; bf16, which WGSL
//! lacks, is refused at configuration time.

use burn::backend::Wgpu;
use burn::tensor::{DType, FloatDType, Tensor, TensorData};
use burn_mpric::{MixedPrecision, Policy, PolicyError};

type Mp = MixedPrecision<Wgpu>;

#[test]
fn f16_compute_on_wgpu_matches_cast_then_matmul_and_mixed_adds_are_promoted() {
    let inner = Default::default();
    let device = Mp::device(inner, "mixed_f16".parse::<Policy>().unwrap())
        .expect("a Vulkan adapter with shaderFloat16 (install mesa-vulkan-drivers)");
    let a = TensorData::new((0..12).map(|i| i as f32 * 0.37 - 2.0).collect(), [3, 4]);
    let b = TensorData::new((0..8).map(|i| 1.5 - i as f32 * 0.21).collect(), [4, 2]);
    let got = Tensor::<Mp, 2>::from_data(a.clone(), &device)
        .matmul(Tensor::<Mp, 2>::from_data(b.clone(), &device));
    assert_eq!(got.dtype(), DType::F16);
    let bare = Default::default();
    let want = Tensor::<Wgpu, 2>::from_data(a, &bare)
        .cast(FloatDType::F16)
        .matmul(Tensor::<Wgpu, 2>::from_data(b, &bare).cast(FloatDType::F16));
    // Read back at the output dtype (f32): the f16 values, widened exactly.
    assert_eq!(got.clone().into_data(), want.into_data().convert::<f32>());

    // f16 + f32 on the same kernel path: without casting, wgpu would misread one operand.
    let bias = Tensor::<Mp, 2>::from_data(TensorData::new(vec![0.25f32; 6], [3, 2]), &device);
    let sum = got.clone() + bias;
    assert_eq!(sum.dtype(), DType::F32);
    let expected: Vec<f32> = got
        .cast(FloatDType::F32)
        .into_data()
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v + 0.25)
        .collect();
    assert_eq!(sum.into_data().to_vec::<f32>().unwrap(), expected);
}

#[test]
fn bf16_on_an_adapter_without_it_is_a_configuration_error() {
    let bf16 = burn_mpric::FloatDType::BF16;
    let supported = <Wgpu as burn::tensor::backend::Backend>::supports_dtype(
        &Default::default(),
        FloatDType::BF16.into(),
    );
    let result = Mp::device(Default::default(), "mixed_bf16".parse::<Policy>().unwrap());
    eprintln!("bf16 supported by this adapter: {supported}");
    if supported {
        assert!(result.is_ok());
    } else {
        match result {
            Err(PolicyError::UnsupportedByDevice {
                dtype, supported, ..
            }) => {
                assert_eq!(dtype, bf16);
                assert!(supported.contains(&burn_mpric::FloatDType::F32));
            }
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }
}

mod common;

#[test]
fn mlp_trained_200_steps_at_f16_on_wgpu_ends_within_two_percent_of_f32() {
    use burn::backend::Autodiff;
    use common::{params_dtypes, same_init, train};

    let bare = Default::default();
    let (f32_loss, _) = train::<Autodiff<Wgpu>>(&bare, &same_init(&bare), 200);
    let device = Mp::device(Default::default(), "mixed_f16".parse::<Policy>().unwrap()).unwrap();
    let (loss, model) = train::<Autodiff<Mp>>(&device, &same_init(&device), 200);
    let rel = (loss - f32_loss).abs() / f32_loss;
    assert!(
        rel < 0.02,
        "final loss {loss} vs f32 {f32_loss} ({:.2}%)",
        rel * 100.0
    );
    assert!(params_dtypes(&model).iter().all(|d| *d == DType::F32));
}

/// Parameters of the sizes a real model mixes: aligned ones that share a packed buffer, odd
/// lengths (a slice of a buffer that is not a view on the device), and one too large to pack.
#[derive(burn::module::Module, Debug)]
struct Sizes<B: burn::tensor::backend::Backend> {
    weight: burn::module::Param<Tensor<B, 2>>,
    bias: burn::module::Param<Tensor<B, 1>>,
    odd: burn::module::Param<Tensor<B, 1>>,
    other_odd: burn::module::Param<Tensor<B, 2>>,
    large: burn::module::Param<Tensor<B, 2>>,
}

#[test]
fn packed_gradients_on_wgpu_come_back_unscaled_and_a_single_infinity_anywhere_is_caught() {
    use burn::backend::Autodiff;
    use burn::module::Param;
    use burn::optim::GradientsParams;
    use burn_mpric_scale::unscale_grads;

    type Ad = Autodiff<Mp>;
    let device = Mp::device(Default::default(), "mixed_f16".parse::<Policy>().unwrap()).unwrap();
    let param = |dims: &[usize]| -> Vec<usize> { dims.to_vec() };
    let shapes = [
        param(&[16, 64]),
        param(&[64]),
        param(&[5]),
        param(&[3, 7]),
        param(&[256, 80]),
    ];
    let model = Sizes::<Ad> {
        weight: Param::from_tensor(Tensor::zeros([16, 64], &device)),
        bias: Param::from_tensor(Tensor::zeros([64], &device)),
        odd: Param::from_tensor(Tensor::zeros([5], &device)),
        other_odd: Param::from_tensor(Tensor::zeros([3, 7], &device)),
        large: Param::from_tensor(Tensor::zeros([256, 80], &device)),
    };
    let ids = [
        model.weight.id,
        model.bias.id,
        model.odd.id,
        model.other_odd.id,
        model.large.id,
    ];
    let scale = 512.0f32;
    // Gradient i holds (i * 0.25 + j / 64) * scale at position j: exact in f16 and f32.
    let values = |i: usize, len: usize| -> Vec<f32> {
        (0..len)
            .map(|j| i as f32 * 0.25 + j as f32 / 64.0)
            .collect()
    };
    let grads_with = |poison: Option<(usize, usize)>| {
        let mut grads = GradientsParams::new();
        for (i, shape) in shapes.iter().enumerate() {
            let len = shape.iter().product();
            let mut scaled: Vec<f32> = values(i, len).iter().map(|v| v * scale).collect();
            if let Some((at, j)) = poison
                && at == i
            {
                scaled[j] = f32::INFINITY;
            }
            let data = TensorData::new(scaled, shape.clone());
            // The weight's gradient arrives at f16, as the decorator's backward produces it.
            let dtype = if i == 0 {
                FloatDType::F16
            } else {
                FloatDType::F32
            };
            match shape.len() {
                1 => grads.register(
                    ids[i],
                    Tensor::<Mp, 1>::from_data(data, &device).cast(dtype),
                ),
                _ => grads.register(
                    ids[i],
                    Tensor::<Mp, 2>::from_data(data, &device).cast(dtype),
                ),
            }
        }
        grads
    };

    let unscaled = unscale_grads(&model, grads_with(None), scale).unwrap();
    assert!(unscaled.read_finite().unwrap());
    let grads = unscaled.into_grads();
    for (i, shape) in shapes.iter().enumerate() {
        let len = shape.iter().product();
        let got = match shape.len() {
            1 => grads.get::<Mp, 1>(ids[i]).unwrap().into_data(),
            _ => grads.get::<Mp, 2>(ids[i]).unwrap().into_data(),
        };
        assert_eq!(
            got.dtype,
            DType::F32,
            "gradient {i} at its parameter's dtype"
        );
        assert_eq!(got.shape.to_vec(), *shape, "gradient {i}'s shape");
        assert_eq!(got.to_vec::<f32>().unwrap(), values(i, len), "gradient {i}");
    }
    // One infinity in any gradient, at its first, a middle or its last element.
    for (i, shape) in shapes.iter().enumerate() {
        let len: usize = shape.iter().product();
        for j in [0, len / 2, len - 1] {
            let unscaled = unscale_grads(&model, grads_with(Some((i, j))), scale).unwrap();
            assert!(
                !unscaled.read_finite().unwrap(),
                "infinity at {j} of gradient {i}"
            );
        }
    }
}

/// The probe of `step_with` on Wgpu at f16 (the packed sums of magnitudes read once): a
/// gradient overflow moves with the scale, a planted op returning NaN whatever its input is
/// a loss that is not finite at any scale, a healthy step is not re-run.
#[test]
fn step_with_tells_an_overflow_from_a_nan_op_on_wgpu() {
    use burn::backend::Autodiff;
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::SgdConfig;
    use burn_mpric::scale::{LossScaler, SkipCause};

    type B = Autodiff<Mp>;
    let device = Mp::device(Default::default(), "mixed_f16".parse::<Policy>().unwrap())
        .expect("a Vulkan adapter with shaderFloat16 (install mesa-vulkan-drivers)");
    let x = Tensor::<B, 2>::from_data(
        TensorData::new(
            (0..32).map(|i| (i % 7) as f32 * 0.3 - 0.9).collect(),
            [8, 4],
        ),
        &device,
    );
    let cause = |gain: f32, nan_op: bool| {
        let model: Linear<B> = LinearConfig::new(4, 4).init(&device);
        let mut runs = 0;
        let (_, outcome) = LossScaler::default().step_with(
            &mut SgdConfig::new().init(),
            1e-3,
            model,
            |m: &Linear<B>| {
                runs += 1;
                let h = m.forward(x.clone());
                let h = if nan_op { h.mul_scalar(f32::NAN) } else { h };
                h.sum().mul_scalar(gain)
            },
        );
        (outcome.unwrap().cause, runs)
    };
    // Gradients of gain * 2^15 * (column sums of the batch, at most about 8).
    assert_eq!(cause(1.0 / 64.0, false), (None, 1));
    let (overflow, runs) = cause(64.0, false);
    assert!(
        matches!(overflow, Some(SkipCause::Range { .. })),
        "{overflow:?}"
    );
    assert_eq!(runs, 2);
    let (nan, _) = cause(1.0 / 64.0, true);
    assert!(
        matches!(nan, Some(SkipCause::LossNotFinite { .. })),
        "{nan:?}"
    );
}

/// `cargo xtask check` runs these tests once more with Burn's fusion and autotuning, as
/// `burn = { features = ["wgpu"] }` with default features builds Wgpu; this says that build
/// is the fused one.
#[cfg(feature = "fusion")]
#[test]
fn the_fusion_build_runs_wgpu_through_burns_fusion() {
    assert!(
        std::any::type_name::<Wgpu>().contains("Fusion"),
        "{}",
        std::any::type_name::<Wgpu>()
    );
}

/// The compiler these tests run on: SPIR-V with the `vulkan` feature (cubecl's Vulkan
/// compiler, `burn::backend::Vulkan`), WGSL without.
#[test]
fn wgpu_compiles_to_the_shading_language_the_build_chose() {
    let name = <Wgpu as burn::tensor::backend::Backend>::name(&Default::default());
    let language = if cfg!(feature = "vulkan") {
        "spirv"
    } else {
        "wgsl"
    };
    assert!(name.contains(language), "{name}");
}

/// Stochastic rounding's uniforms made on Wgpu, whose ints are i32: the same numbers the core
/// computes on the host in i64 (every product of the permutation stays below 2^31), under
/// the decorator and on the bare backend, at lengths that build the index in one to three
/// digits of 1024.
#[test]
fn device_draws_on_wgpu_are_the_cores_numbers() {
    use burn_mpric::optim::{DrawKeys, device_uniforms};

    let keys = DrawKeys::new(9, 2, 4);
    let values = |t: Tensor<Wgpu, 1>| t.into_data().to_vec::<f32>().unwrap();
    for len in [1, 1025, 40_000, 1_048_577] {
        let made = device_uniforms::<Wgpu>(&keys, len, &Default::default());
        assert_eq!(values(made), keys.uniforms(len), "{len} elements");
    }
    let device = Mp::device(Default::default(), "mixed_f16".parse::<Policy>().unwrap())
        .expect("a Vulkan adapter with shaderFloat16 (install mesa-vulkan-drivers)");
    let made = device_uniforms::<Mp>(&keys, 3000, &device);
    assert_eq!(made.dtype(), DType::F32);
    let made: Vec<f32> = made.into_data().to_vec().unwrap();
    assert_eq!(made, keys.uniforms(3000));
}
