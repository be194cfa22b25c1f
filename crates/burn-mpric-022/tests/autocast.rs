//! Autocast on Flex with real burn-nn modules and optimizers.

mod common;

use std::sync::{Arc, Mutex};

use burn::module::Module;
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer, Optimizer, SgdConfig};
use burn::tensor::{DType, Device, Tensor};
use burn_mpric_022::{
    Autocast, AutocastError, ComputeCast, FullPrecision, KeptBecause, LossScaler, autocast,
    cast_for_compute,
};
use burn_mpric_core::scale::LossScalePreset;
use burn_mpric_core::{FloatDType, ResolvedPolicy};
use common::{Mlp, TinyTransformer, dtypes, flex, matrix, param_bits, reversal_batch};

fn policy(text: &str) -> ResolvedPolicy {
    text.parse().unwrap()
}

fn burn_dtype(dtype: FloatDType) -> DType {
    burn_mpric_022::to_burn_dtype(dtype).into()
}

/// Parameters are stored at f32 through many Adam and SGD steps while the forward pass runs
/// at f16 or bf16, and training makes progress.
#[test]
fn params_stay_f32_through_adam_and_sgd_while_forward_runs_half() {
    let device = flex();
    let (x, y) = (matrix(1, 16, 8, &device), matrix(2, 16, 4, &device));
    for text in ["mixed_f16", "mixed_bf16"] {
        let policy = policy(text);
        let compute = burn_dtype(policy.compute());
        for adam in [true, false] {
            let mut model = autocast(Mlp::new(8, 16, 4, &device), policy).unwrap();
            let mut optim: ModuleOptimizer = if adam {
                AdamConfig::new().init()
            } else {
                SgdConfig::new().init()
            };
            let lr = if adam { 1e-2 } else { 5e-2 };
            let mut scaler = LossScaler::for_policy(LossScalePreset::Auto, &policy).unwrap();
            let mut losses = Vec::new();
            for step in 0..30 {
                let out = model.forward(cast_for_compute(x.clone(), &policy));
                assert_eq!(out.dtype(), compute, "{text} step {step}: forward dtype");
                let loss = model.loss(x.clone(), y.clone(), &policy);
                let scaled = scaler.scale_loss(loss);
                let grads = GradientsParams::from_grads(scaled.backward(), &model);
                let (next, outcome) = scaler.step_with_loss(&mut optim, lr, model, grads, scaled);
                model = next;
                let outcome = outcome.unwrap();
                assert!(outcome.is_applied(), "{text} step {step}: {outcome:?}");
                losses.push(outcome.loss.unwrap());
                for (i, (stored, _)) in dtypes(&model).into_iter().enumerate() {
                    assert_eq!(stored, DType::F32, "{text} step {step}: param {i} stored");
                }
            }
            // Linears used at the compute dtype; the LayerNorm at f32 under f16 only.
            let used: Vec<DType> = dtypes(&model).into_iter().map(|(_, used)| used).collect();
            let norm = if policy.compute() == FloatDType::F16 {
                DType::F32
            } else {
                compute
            };
            assert_eq!(
                used,
                [compute, compute, norm, norm, compute, compute],
                "{text}"
            );
            let (first, last) = (losses[0], *losses.last().unwrap());
            assert!(
                last < 0.7 * first,
                "{text} adam={adam}: loss {first} -> {last}"
            );
        }
    }
}

/// A per-tensor optimizer that records the dtype of every gradient it receives.
#[derive(Clone)]
struct Recording(Arc<Mutex<Vec<DType>>>);

impl Optimizer for Recording {
    type State<const D: usize> = ();

    fn step<const D: usize>(
        &self,
        lr: f64,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        _state: Option<()>,
    ) -> (Tensor<D>, Option<()>) {
        self.0.lock().unwrap().push(grad.dtype());
        (tensor - grad.mul_scalar(lr), None)
    }

    fn to_device<const D: usize>(state: (), _device: &Device) {
        state
    }
}

/// Every gradient reaches the optimizer at f32, through the loss scaler, for a transformer
/// run at f16 and at bf16.
#[test]
fn gradients_reach_the_optimizer_at_f32() {
    let device = flex();
    let (tokens, targets) = reversal_batch(3, 4, 6, 10, &device);
    for text in ["mixed_f16", "mixed_bf16"] {
        let policy = policy(text);
        let model = autocast(TinyTransformer::new(10, 6, 16, 1, &device), policy).unwrap();
        let count = dtypes(&model).len();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut optim = ModuleOptimizer::from(Recording(seen.clone()));
        let mut scaler = LossScaler::for_policy(LossScalePreset::Auto, &policy).unwrap();

        let scaled = scaler.scale_loss(model.loss(tokens.clone(), targets.clone(), &policy));
        let grads = GradientsParams::from_grads(scaled.backward(), &model);
        let (model, outcome) = scaler.step(&mut optim, 1e-3, model, grads);
        assert!(outcome.unwrap().is_applied());
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), count, "{text}: every parameter got a gradient");
        assert!(seen.iter().all(|d| *d == DType::F32), "{text}: {seen:?}");
        assert!(
            dtypes(&model)
                .iter()
                .all(|(stored, _)| *stored == DType::F32)
        );
    }
}

/// The identity policy leaves the module untouched, and training through autocast and a
/// no-op scaler is bit-identical to bare Burn over several Adam steps.
#[test]
fn identity_policy_is_bit_identical_to_bare_burn() {
    let device = flex();
    let policy = policy("p=f32,c=f32");
    let base = Mlp::new(8, 16, 4, &device);
    let (x, y) = (matrix(4, 16, 8, &device), matrix(5, 16, 4, &device));

    let mut bare = base.clone();
    let mut optim = AdamConfig::new().init();
    for _ in 0..5 {
        let grads =
            GradientsParams::from_grads(bare.loss(x.clone(), y.clone(), &policy).backward(), &bare);
        bare = optim.step(1e-2, bare, grads);
    }

    let mut cast = autocast(base.clone(), policy).unwrap();
    assert!(
        cast.input
            .weight
            .reparameterization::<ComputeCast>()
            .is_none()
    );
    assert!(
        cast.norm
            .gamma
            .reparameterization::<ComputeCast>()
            .is_none()
    );
    let mut optim = AdamConfig::new().init();
    let mut scaler = LossScaler::for_policy(LossScalePreset::Auto, &policy).unwrap();
    assert_eq!(scaler.scale(), 1.0);
    for _ in 0..5 {
        let scaled = scaler.scale_loss(cast.loss(x.clone(), y.clone(), &policy));
        let grads = GradientsParams::from_grads(scaled.backward(), &cast);
        let (next, outcome) = scaler.step(&mut optim, 1e-2, cast, grads);
        cast = next;
        assert!(outcome.unwrap().is_applied());
    }
    assert_eq!(param_bits(&bare), param_bits(&cast));
    assert_ne!(
        param_bits(&bare),
        param_bits(&base),
        "training moved the parameters"
    );
}

/// The default full-precision rules follow what burn-nn 0.22.1 accepts: LayerNorm at f32
/// under f16 (burn-nn widens it), at the compute dtype under bf16.
#[test]
fn layer_norm_rule_follows_burn_nn() {
    let device = flex();
    let model = TinyTransformer::new(10, 6, 16, 2, &device);
    let f16 = Autocast::new(policy("mixed_f16")).plan(&model).unwrap();
    let norms: Vec<_> = f16.iter().filter(|p| p.path.contains("norm")).collect();
    assert_eq!(
        norms.len(),
        2 * 2 * 2,
        "two layers, two norms each, gamma and beta"
    );
    assert!(
        norms
            .iter()
            .all(|p| p.used == FloatDType::F32 && p.kept == Some(KeptBecause::LayerNorm))
    );
    assert!(
        f16.iter()
            .filter(|p| !p.path.contains("norm"))
            .all(|p| p.used == FloatDType::F16)
    );

    let bf16 = Autocast::new(policy("mixed_bf16")).plan(&model).unwrap();
    assert!(
        bf16.iter()
            .all(|p| p.used == FloatDType::BF16 && p.kept.is_none())
    );

    let off = Autocast::new(policy("mixed_f16"))
        .keep_layer_norms(false)
        .plan(&model)
        .unwrap();
    assert!(off.iter().all(|p| p.used == FloatDType::F16));

    // And both run forward and backward on real tensors.
    let (tokens, targets) = reversal_batch(9, 2, 6, 10, &device);
    for text in ["mixed_f16", "mixed_bf16"] {
        let policy = policy(text);
        let model = autocast(model.clone(), policy).unwrap();
        let loss = model.loss(tokens.clone(), targets.clone(), &policy);
        assert_eq!(loss.dtype(), DType::F32);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        assert_eq!(grads.len(), dtypes(&model).len(), "{text}");
    }
}

#[derive(Module, Debug)]
struct NormNet {
    input: Linear,
    norm: FullPrecision<BatchNorm>,
    output: Linear,
}

/// A training BatchNorm (running statistics at f32) works under bf16 wrapped in
/// `FullPrecision`; its parameters stay f32 in use, the rest runs at bf16.
#[test]
fn full_precision_wrapper_trains_batch_norm_under_bf16() {
    let device = flex();
    let policy = policy("mixed_bf16");
    let net = NormNet {
        input: LinearConfig::new(4, 6).init(&device),
        norm: FullPrecision::new(BatchNormConfig::new(6).init(&device)),
        output: LinearConfig::new(6, 1).init(&device),
    };
    let plan = Autocast::new(policy).plan(&net).unwrap();
    let kept: Vec<_> = plan
        .iter()
        .filter(|p| p.kept == Some(KeptBecause::FullPrecisionWrapper))
        .map(|p| p.path.as_str())
        .collect();
    // The running statistics are float state too (and stay f32 whatever the policy).
    assert_eq!(
        kept,
        [
            "norm.inner.gamma",
            "norm.inner.beta",
            "norm.inner.running_mean",
            "norm.inner.running_var"
        ]
    );
    assert!(
        plan.iter()
            .filter(|p| p.kept.is_none())
            .all(|p| p.used == FloatDType::BF16)
    );

    // Unwrapped, BatchNorm's running statistics stay f32 while gamma and beta follow bf16:
    // the plan says so (and such a layer would meet two dtypes; hence the wrapper).
    let bare = Autocast::new(policy)
        .plan(&BatchNormConfig::new(3).init(&device))
        .unwrap();
    let used: Vec<_> = bare
        .iter()
        .map(|p| (p.path.as_str(), p.used, p.kept.clone()))
        .collect();
    assert_eq!(
        used,
        [
            ("gamma", FloatDType::BF16, None),
            ("beta", FloatDType::BF16, None),
            ("running_mean", FloatDType::F32, Some(KeptBecause::Buffer)),
            ("running_var", FloatDType::F32, Some(KeptBecause::Buffer)),
        ]
    );

    let mut net = autocast(net, policy).unwrap();
    let mut optim = AdamConfig::new().init();
    let x = matrix(6, 8, 4, &device);
    for _ in 0..3 {
        let h = net.input.forward(cast_for_compute(x.clone(), &policy));
        let h = net.norm.forward_with(h, |norm, h| norm.forward(h));
        assert_eq!(h.dtype(), DType::BF16);
        let loss = net
            .output
            .forward(h)
            .cast(burn::tensor::FloatDType::F32)
            .square()
            .mean();
        let grads = GradientsParams::from_grads(loss.backward(), &net);
        net = optim.step(1e-2, net, grads);
    }
    assert_eq!(net.norm.inner.gamma.val().dtype(), DType::F32);
    assert_eq!(net.input.weight.val().dtype(), DType::BF16);
    assert!(dtypes(&net).iter().all(|(stored, _)| *stored == DType::F32));
}

/// Typos and double application are typed errors, and nothing is changed.
#[test]
fn full_precision_paths_and_errors() {
    let device = flex();
    let policy = policy("mixed_bf16");
    let model = Mlp::new(4, 8, 2, &device);

    let plan = Autocast::new(policy)
        .keep_full_precision_cast_by_caller("output")
        .plan(&model)
        .unwrap();
    let kept: Vec<_> = plan
        .iter()
        .filter(|p| p.used == FloatDType::F32)
        .map(|p| p.path.as_str())
        .collect();
    assert_eq!(kept, ["output.weight", "output.bias"]);
    // Mlp's forward feeds `output` the compute dtype: keeping it unchecked would end in a
    // Burn assertion at the first forward.
    let err = Autocast::new(policy)
        .keep_full_precision("output")
        .apply(model.clone())
        .unwrap_err();
    assert!(
        matches!(err, AutocastError::KeptPathFedHalf { ref field, .. } if field == "output"),
        "{err}"
    );
    // `out` is not a path prefix of `output.weight` (prefixes match whole path segments).
    let err = Autocast::new(policy)
        .keep_full_precision("out")
        .apply(model.clone())
        .unwrap_err();
    assert!(matches!(err, AutocastError::UnmatchedPath { ref path, .. } if path == "out"));
    assert!(err.to_string().contains("output.weight"), "{err}");

    let once = autocast(model, policy).unwrap();
    let err = autocast(once, policy).unwrap_err();
    assert!(
        matches!(err, AutocastError::AlreadyReparameterized { .. }),
        "{err}"
    );
}

/// `valid()` (the inference model) keeps the cast; a record of an autocast module holds
/// the f32 parameters under the bare module's paths.
#[test]
fn inference_model_and_record_keep_the_storage_dtype() {
    let device = flex();
    let policy = policy("mixed_f16");
    let model = autocast(Mlp::new(4, 8, 2, &device), policy).unwrap();
    let inference = model.valid();
    let out = inference.forward(cast_for_compute(matrix(7, 3, 4, &Device::flex()), &policy));
    assert_eq!(out.dtype(), DType::F16);

    let bare = Mlp::new(4, 8, 2, &device);
    let loaded = bare.load_record(model.clone().into_record());
    assert_eq!(param_bits(&loaded), param_bits(&model));
    assert!(
        dtypes(&loaded)
            .iter()
            .all(|d| *d == (DType::F32, DType::F32))
    );
}

/// A policy a device cannot run is an error naming the dtype and what the device runs.
#[test]
fn policy_the_device_cannot_run_is_an_error() {
    let device = Device::flex();
    let supported = burn_mpric_022::supported_float_dtypes(&device);
    let missing = FloatDType::ALL.into_iter().find(|d| !supported.contains(d));
    match missing {
        Some(dtype) => {
            let text = format!("p=f32,c={}", dtype.name());
            let err = Autocast::for_device(text.parse().unwrap(), &device).unwrap_err();
            assert!(err.to_string().contains(dtype.name()), "{err}");
            let err = Autocast::new(text.parse().unwrap())
                .apply(LinearConfig::new(2, 2).init(&device))
                .unwrap_err();
            assert!(matches!(err, AutocastError::Unsupported { .. }), "{err}");
            assert!(err.to_string().contains(dtype.name()), "{err}");
        }
        None => panic!("Flex runs every float dtype: {supported:?}"),
    }
}

/// A pure half policy stores the parameters at the half dtype (cast once, lazily, no cast on
/// use), and they stay there through SGD and Adam steps.
#[test]
fn pure_half_policy_stores_parameters_at_half() {
    let device = flex();
    let policy = policy("pure_bf16");
    let (x, y) = (matrix(41, 8, 4, &device), matrix(42, 8, 2, &device));
    for adam in [false, true] {
        let mut model = autocast(Mlp::new(4, 8, 2, &device), policy).unwrap();
        assert!(
            dtypes(&model)
                .iter()
                .all(|d| *d == (DType::BF16, DType::BF16))
        );
        assert!(
            model
                .input
                .weight
                .reparameterization::<ComputeCast>()
                .is_none()
        );
        let mut optim: ModuleOptimizer = if adam {
            AdamConfig::new().init()
        } else {
            SgdConfig::new().init()
        };
        let mut scaler = LossScaler::for_policy(LossScalePreset::Auto, &policy).unwrap();
        for _ in 0..3 {
            let prediction = model.forward(cast_for_compute(x.clone(), &policy));
            let error = prediction - cast_for_compute(y.clone(), &policy);
            let loss = error.square().mean();
            let scaled = scaler.scale_loss(loss);
            let grads = GradientsParams::from_grads(scaled.backward(), &model);
            let (next, outcome) = scaler.step(&mut optim, 1e-2, model, grads);
            model = next;
            assert!(outcome.unwrap().is_applied());
        }
        let stored: Vec<DType> = dtypes(&model).into_iter().map(|(s, _)| s).collect();
        assert!(
            stored.iter().all(|d| *d == DType::BF16),
            "adam={adam}: {stored:?}"
        );
    }
}

/// Keeping one layer inside burn-nn's `TransformerEncoder` at f32 is refused at `apply` with
/// the field to wrap instead, and the printed fix (the encoder in `FullPrecision`) trains at
/// f16 without a dtype mismatch.
#[test]
fn a_kept_layer_inside_a_library_module_is_a_clear_error() {
    let device = flex().autodiff();
    let policy = policy("mixed_f16");
    let model = TinyTransformer::new(8, 6, 16, 2, &device);
    let err = Autocast::new(policy)
        .keep_full_precision("encoder.layers.1.pwff")
        .apply(model.clone())
        .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, AutocastError::KeptPathFedHalf { ref field, ref path, .. }
            if field == "encoder" && path == "encoder.layers.1.pwff"),
        "{text}"
    );
    assert!(text.contains("encoder: FullPrecision<"), "{text}");
    // A LayerNorm path under f16 compute is fine: burn-nn widens it itself.
    assert!(
        Autocast::new(policy)
            .keep_full_precision("encoder.layers.1.norm_2")
            .apply(model.clone())
            .is_ok()
    );
    // Under f32 compute nothing is fed half.
    assert!(
        Autocast::new(ResolvedPolicy::F32)
            .keep_full_precision("encoder.layers.1.pwff")
            .apply(model)
            .is_ok()
    );

    #[derive(Module, Debug)]
    struct Wrapped {
        tokens: burn::nn::Embedding,
        encoder: FullPrecision<burn::nn::transformer::TransformerEncoder>,
        head: Linear,
    }
    let bare = TinyTransformer::new(8, 6, 16, 2, &device);
    let wrapped = Wrapped {
        tokens: bare.tokens,
        encoder: FullPrecision::new(bare.encoder),
        head: bare.head,
    };
    let mut wrapped = Autocast::new(policy).apply(wrapped).unwrap();
    let mut optim = AdamConfig::new().init();
    let mut scaler = LossScaler::for_policy(LossScalePreset::Auto, &policy).unwrap();
    let (tokens, targets) = reversal_batch(3, 4, 6, 8, &device);
    for _ in 0..3 {
        let (next, outcome) = scaler.step_with(&mut optim, 1e-3, wrapped, |m: &Wrapped| {
            let x = m.tokens.forward(tokens.clone());
            assert_eq!(x.dtype(), DType::F16);
            let x = m.encoder.forward_with(x, |e, x| {
                e.forward(burn::nn::transformer::TransformerEncoderInput::new(x))
            });
            let logits = m.head.forward(x).cast(burn::tensor::FloatDType::F32);
            let [b, s, v] = logits.dims();
            burn::nn::loss::CrossEntropyLossConfig::new()
                .init(&logits.device())
                .forward(logits.reshape([b * s, v]), targets.clone().reshape([b * s]))
        });
        wrapped = next;
        assert!(outcome.unwrap().loss.unwrap().is_finite());
    }
    assert_eq!(
        wrapped.encoder.inner.layers[1]
            .pwff
            .linear_inner
            .weight
            .val()
            .dtype(),
        DType::F32
    );
}
