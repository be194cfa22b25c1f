//! A checkpoint (module record, optimizer record, scaler state) written to real files and
//! read back into a fresh autocast model continues the run exactly.

mod common;

use burn::module::Module;
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{DType, Tensor};
use burn_mpric_022::{LossScaler, autocast};
use burn_mpric_core::ResolvedPolicy;
use burn_mpric_core::scale::{LossScaleConfig, StepOutcome};
use common::{Mlp, dtypes, flex, matrix, param_bits};

fn train_step(
    model: Mlp,
    optim: &mut ModuleOptimizer,
    scaler: &mut LossScaler,
    x: &Tensor<2>,
    y: &Tensor<2>,
    policy: &ResolvedPolicy,
) -> (Mlp, StepOutcome) {
    let scaled = scaler.scale_loss(model.loss(x.clone(), y.clone(), policy));
    let grads = GradientsParams::from_grads(scaled.clone().backward(), &model);
    let (model, outcome) = scaler.step_with_loss(optim, 1e-2, model, grads, scaled);
    (model, outcome.unwrap())
}

#[test]
fn checkpoint_round_trip_keeps_params_f32_and_restores_the_scaler() {
    // Burn 0.22.1's `ModuleOptimizer::load_record` builds the state on `Device::default()`,
    // which prefers Wgpu in a build with the wgpu feature: it would start Vulkan (seconds),
    // or panic on a machine without a driver; the state moves to the parameters' device at
    // the next step anyway.
    // SAFETY: set before any Burn call, in the only test of this binary: no other thread
    // reads the environment yet.
    unsafe { std::env::set_var("BURN_DEVICE", "flex") };
    let dir = std::env::temp_dir().join(format!("mpric022-checkpoint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let device = flex();
    let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    let (x, y) = (matrix(21, 8, 6, &device), matrix(22, 8, 3, &device));

    let mut model = autocast(Mlp::new(6, 12, 3, &device), policy).unwrap();
    let mut optim = AdamConfig::new().init();
    let config = LossScaleConfig::new()
        .with_initial_scale(1024.0)
        .with_growth_interval(2);
    let mut scaler = LossScaler::dynamic(config).unwrap();
    for _ in 0..3 {
        let (next, outcome) = train_step(model, &mut optim, &mut scaler, &x, &y, &policy);
        model = next;
        assert!(outcome.is_applied());
    }
    assert_eq!(scaler.scale(), 2048.0);

    let (model_path, optim_path, scaler_path) = (
        dir.join("model.bpk"),
        dir.join("optim.bpk"),
        dir.join("scaler.json"),
    );
    model.clone().save_file(&model_path).unwrap();
    optim.save(&optim_path).unwrap();
    scaler.save_file(&scaler_path).unwrap();

    // A fresh model (other initial values), autocast the same way, loads the files.
    let fresh = autocast(Mlp::new(6, 12, 3, &device), policy).unwrap();
    assert_ne!(param_bits(&fresh), param_bits(&model));
    let mut restored = fresh.try_load_file(&model_path).unwrap();
    let mut restored_optim = AdamConfig::new().init().load(&optim_path).unwrap();
    let mut restored_scaler = LossScaler::load_file(&scaler_path).unwrap();

    assert_eq!(param_bits(&restored), param_bits(&model));
    assert!(
        dtypes(&restored)
            .iter()
            .all(|(stored, _)| *stored == DType::F32)
    );
    assert_eq!(
        restored.input.weight.val().dtype(),
        DType::F16,
        "the cast survives loading"
    );
    assert_eq!(restored_scaler, scaler);

    // Both continue identically: this step grows the scale again.
    for _ in 0..2 {
        let (next, expected) = train_step(model, &mut optim, &mut scaler, &x, &y, &policy);
        model = next;
        let (next, got) = train_step(
            restored,
            &mut restored_optim,
            &mut restored_scaler,
            &x,
            &y,
            &policy,
        );
        restored = next;
        assert_eq!(got, expected);
        assert_eq!(param_bits(&restored), param_bits(&model));
    }
    assert_eq!(restored_scaler.scale(), 4096.0);
    std::fs::remove_dir_all(&dir).unwrap();
}
