//! Drop-in behaviour a Burn program relies on: what the host reads, tensors of two policies,
//! devices rebuilt from ids.

use burn::backend::Flex;
use burn::module::Module;
use burn::nn::attention::{MhaInput, MultiHeadAttentionConfig};
use burn::prelude::DeviceOps;
use burn::tensor::ops::FloatTensorOps;
use burn::tensor::{DType, FloatDType, Tensor, TensorData, TensorMetadata, Transaction};
use burn_mpric::{MixedPrecision, MpDevice, Policy};

type Mp = MixedPrecision<Flex>;

fn device(policy: &str) -> MpDevice<Flex> {
    Mp::device(Default::default(), policy.parse::<Policy>().unwrap()).unwrap()
}

fn data(shape: [usize; 3]) -> TensorData {
    let n = shape.iter().product::<usize>();
    TensorData::new(
        (0..n).map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.1).collect(),
        shape,
    )
}

#[test]
fn a_program_written_for_f32_reads_its_results_unchanged_under_o_f32() {
    // One set of weights (read once, so the lazy initialization is done before the move),
    // moved to each device.
    let f32_device = device("f32");
    let mha = MultiHeadAttentionConfig::new(8, 2).init::<Mp>(&f32_device);
    let input = |device| MhaInput::self_attn(Tensor::<Mp, 3>::from_data(data([2, 5, 8]), device));
    let reference = mha.forward(input(&f32_device)).context;
    let mixed_device = device("p=f32,c=bf16,o=f32");
    let mixed = mha
        .to_device(&mixed_device)
        .forward(input(&mixed_device))
        .context;
    assert_eq!(mixed.dtype(), DType::BF16);
    // As Burn's own attention tests read it: at the backend's float element, f32.
    let got = mixed.into_data().to_vec::<f32>().expect("read as f32");
    let want = reference.into_data().to_vec::<f32>().unwrap();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 0.02 + 0.02 * w.abs(), "{g} vs {w}");
    }
}

#[test]
fn host_reads_follow_the_output_dtype_for_values_at_the_compute_dtype_only() {
    let device = device("p=f32,c=bf16,o=f32");
    let a = Tensor::<Mp, 2>::from_data(
        TensorData::new(vec![1.5f32, -2.25, 3.0, 0.5], [2, 2]),
        &device,
    );
    let product = a.clone().matmul(a.clone());
    assert_eq!(product.dtype(), DType::BF16);
    assert_eq!(product.clone().into_data().dtype, DType::F32);
    // Transactions read the same way.
    let [read] = Transaction::default()
        .register(product.clone())
        .execute()
        .try_into()
        .unwrap();
    assert_eq!(read, product.into_data());
    // A dtype the user asked for stays what it is.
    let f16 = a.clone().cast(FloatDType::F16);
    assert_eq!(f16.into_data().dtype, DType::F16);
    // Parameters (the param dtype) are read as they are.
    assert_eq!(a.into_data().dtype, DType::F32);

    // o=bf16: the results arrive at bf16.
    let device = self::device("p=f32,c=bf16,o=bf16");
    let a = Tensor::<Mp, 2>::ones([2, 2], &device);
    assert_eq!(a.clone().matmul(a).into_data().dtype, DType::BF16);
}

/// Burn's tensor API refuses two devices in one op (two policies are two devices); below it,
/// in backend extensions and custom ops, primitives of two policies can meet.
#[test]
fn primitives_of_two_policies_meet_under_the_more_precise_one_whatever_the_order() {
    let (bf16, f16, f32) = (device("mixed_bf16"), device("mixed_f16"), device("f32"));
    let x = |device: &MpDevice<Flex>| {
        Tensor::<Mp, 2>::ones([2, 2], device)
            .into_primitive()
            .tensor()
    };
    let matmul = |a, b| Mp::float_matmul(a, b);
    // f32 compute beats bf16 compute: the matmul runs at f32, in either order.
    assert_eq!(matmul(x(&bf16), x(&f32)).dtype(), DType::F32);
    assert_eq!(matmul(x(&f32), x(&bf16)).dtype(), DType::F32);
    // f16 keeps more mantissa than bf16.
    assert_eq!(matmul(x(&bf16), x(&f16)).dtype(), DType::F16);
    assert_eq!(matmul(x(&f16), x(&bf16)).dtype(), DType::F16);
    // The result carries the chosen settings on: it lives on the f16 device.
    let mixed = matmul(x(&bf16), x(&f16));
    assert_eq!(Mp::float_device(&mixed), f16);
}

#[test]
fn a_device_rebuilt_from_its_id_keeps_its_policy() {
    for policy in ["mixed_f16", "mixed_bf16", "f32", "p=bf16,c=bf16,o=f32"] {
        let device = device(policy);
        let rebuilt = MpDevice::<Flex>::from_id(device.to_id());
        assert_eq!(rebuilt, device, "{policy}");
        assert_eq!(rebuilt.policy(), device.policy());
    }
    // Two policies on one inner device have two ids.
    assert_ne!(device("mixed_f16").to_id(), device("f32").to_id());
    // A plain inner id (no settings code) means the default device.
    let plain = burn::tensor::backend::DeviceId::new(0, 0);
    assert_eq!(
        MpDevice::<Flex>::from_id(plain),
        MpDevice::<Flex>::default()
    );
}
