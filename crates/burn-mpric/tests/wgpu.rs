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
    let bf16 = FloatDType::BF16;
    let supported =
        <Wgpu as burn::tensor::backend::Backend>::supports_dtype(&Default::default(), bf16.into());
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
                assert!(supported.contains(&FloatDType::F32));
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
