//! A trained model of the user's own (burn-nn's `TransformerEncoder` inside) written with
//! `burn_mpric_022::export` to a real safetensors file at f16 and bf16, and read back into a
//! fresh model by burn-store, gives the logits of the f32 model within half-precision
//! rounding; the PyTorch layout names and shapes its tensors as `torch.nn` does.

mod common;

use burn::tensor::FloatDType;
use burn_mpric_022::export::{Export, Layout, load_safetensors};
use common::{TinyTransformer, flex, reversal_batch};

fn header(bytes: &[u8]) -> serde_json::Value {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    serde_json::from_slice(&bytes[8..8 + n]).unwrap()
}

#[test]
fn half_precision_exports_read_back_predict_as_the_f32_model() {
    let device = flex();
    let model = TinyTransformer::new(11, 6, 16, 2, &device);
    let (tokens, _) = reversal_batch(3, 4, 6, 11, &device);
    let logits = |m: &TinyTransformer| -> Vec<f32> {
        m.forward(tokens.clone())
            .into_data()
            .convert::<f32>()
            .try_to_vec()
            .unwrap()
    };
    let reference = logits(&model);
    let dir = std::env::temp_dir().join(format!("mpric-022-export-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (dtype, bound, name) in [
        (FloatDType::F16, 5e-3, "F16"),
        (FloatDType::BF16, 4e-2, "BF16"),
    ] {
        let path = dir.join(format!("{name}.safetensors"));
        Export::new(dtype)
            .metadata("model", "tiny transformer")
            .save(&model, &path)
            .unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let head = header(&bytes);
        assert_eq!(head["__metadata__"]["layout"], "pytorch");
        assert_eq!(head["__metadata__"]["model"], "tiny transformer");
        // torch.nn's names and shapes: Linear [out, in], LayerNorm weight/bias.
        assert_eq!(head["head.weight"]["shape"], serde_json::json!([11, 16]));
        assert_eq!(head["head.weight"]["dtype"], name);
        assert!(
            head.get("encoder.layers.0.norm_1.weight").is_some(),
            "{head}"
        );
        assert!(head.get("encoder.layers.0.norm_1.gamma").is_none());

        let fresh = TinyTransformer::new(11, 6, 16, 2, &device);
        assert_ne!(logits(&fresh), reference);
        let back = load_safetensors(fresh, &bytes, Layout::PyTorch, FloatDType::F32).unwrap();
        let got = logits(&back);
        let worst = reference
            .iter()
            .zip(&got)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(worst > 0.0 && worst < bound, "{name}: {worst}");
    }
    // A file of another model is refused, naming what is missing.
    let small = Export::new(FloatDType::F32)
        .to_bytes(&TinyTransformer::new(11, 6, 16, 1, &device))
        .unwrap();
    let err = load_safetensors(
        TinyTransformer::new(11, 6, 16, 2, &device),
        &small,
        Layout::PyTorch,
        FloatDType::F32,
    )
    .unwrap_err();
    assert!(err.to_string().contains("encoder.layers.1"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
