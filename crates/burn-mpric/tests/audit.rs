//! The precision audit on real burn-nn modules: a model with one deliberately large
//! activation gets the verdict to keep that op at full precision, and training it at f16
//! with the printed settings stops its skipped steps; bad input is an error.

use burn::backend::{Autodiff, Flex};
use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn_mpric::audit::{AuditConfig, AuditError, Verdict, audit, measurement_settings};
use burn_mpric::instrument::Instrumented;
use burn_mpric::scale::{LossScaleConfig, LossScaler};
use burn_mpric::{MixedPrecision, MpSettings, Op, OpCategory, Policy};

/// A first layer whose weights are scaled up so that its outputs reach about 10^5 (beyond
/// f16's 65504), scaled back down by 10^-5 before the ReLU and the head: harmless at f32,
/// inf at f16.
#[derive(Module, Debug)]
struct Loud<B: Backend> {
    big: Linear<B>,
    head: Linear<B>,
    act: Relu,
}

const GAIN: f32 = 3e5;

impl<B: Backend> Loud<B> {
    fn new(device: &B::Device) -> Self {
        let mut big = LinearConfig::new(4, 16).init(device);
        big.weight = big.weight.map(|w| {
            // Scaled on the host: the parameter stays a leaf of the graph.
            let shape = w.shape();
            let values: Vec<f32> = w.to_data().iter::<f32>().map(|v| v * GAIN).collect();
            Tensor::from_data(TensorData::new(values, shape), device).require_grad()
        });
        Self {
            big,
            head: LinearConfig::new(16, 2).init(device),
            act: Relu::new(),
        }
    }

    fn loss(&self, x: Tensor<B, 2>) -> Tensor<B, 1> {
        let h = self.act.forward(self.big.forward(x).mul_scalar(1.0 / GAIN));
        let out = self.head.forward(h);
        let target = out.zeros_like().add_scalar(0.5);
        (out - target).powi_scalar(2).mean()
    }
}

fn batch<B: Backend>(device: &B::Device) -> Tensor<B, 2> {
    Tensor::from_floats(
        [
            [0.5, -0.2, 0.1, 0.9],
            [0.3, 0.8, -0.6, 0.2],
            [-0.4, 0.1, 0.7, -0.9],
            [0.9, 0.6, -0.3, -0.5],
        ],
        device,
    )
}

fn f16() -> MpSettings {
    MpSettings::new("mixed_f16".parse::<Policy>().unwrap())
}

type Measured = Autodiff<MixedPrecision<Instrumented<Flex>>>;

fn audit_loud(
    audited: &MpSettings,
    steps: usize,
) -> Result<burn_mpric::audit::AuditReport, AuditError> {
    let device = MixedPrecision::<Instrumented<Flex>>::device(
        Default::default(),
        measurement_settings(audited, true),
    )
    .unwrap();
    let model = Loud::<Measured>::new(&device);
    let x = batch::<Measured>(&device);
    audit(
        model,
        SgdConfig::new().init(),
        audited,
        AuditConfig::new(steps)
            .with_lr(0.01)
            .with_loss_scale(32768.0),
        |m: &Loud<Measured>, _| m.loss(x.clone()),
    )
}

/// Trains `Loud` for `steps` steps at `settings` with a dynamic scale starting at
/// `initial_scale`; returns the skipped steps.
fn skipped_steps(settings: MpSettings, initial_scale: f32, steps: usize) -> u64 {
    type B = Autodiff<MixedPrecision<Flex>>;
    let device = MixedPrecision::<Flex>::device(Default::default(), settings).unwrap();
    let mut model = Loud::<B>::new(&device);
    let mut optim = SgdConfig::new().init();
    let mut scaler =
        LossScaler::dynamic(LossScaleConfig::new().with_initial_scale(initial_scale)).unwrap();
    for _ in 0..steps {
        let scaled = scaler.scale_loss(model.loss(batch::<B>(&device)));
        let grads = GradientsParams::from_grads(scaled.backward(), &model);
        let (next, outcome) = scaler.step(&mut optim, 0.01, model, grads);
        outcome.unwrap();
        model = next;
    }
    scaler.stats().skipped
}

#[test]
fn a_planted_large_activation_gets_the_override_and_the_override_removes_the_skips() {
    let report = audit_loud(&f16(), 2).unwrap();
    let linear = report
        .ops
        .iter()
        .find(|r| r.method == "linear" && r.phase == burn_mpric::audit::Phase::Forward)
        .unwrap();
    assert!(linear.low && linear.dtype == "f16", "{linear:?}");
    assert!(linear.values.max_abs > 65504.0, "{linear:?}");
    assert!(linear.values.headroom(65504.0).unwrap() < 0.0);

    let keep: Vec<_> = report
        .verdicts
        .iter()
        .filter_map(|v| match v {
            Verdict::KeepFullPrecision { op, .. } => Some(op.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(keep, ["linear"], "{:#?}", report.verdicts);
    let keeper = report
        .verdicts
        .iter()
        .find(|v| matches!(v, Verdict::KeepFullPrecision { .. }))
        .unwrap();
    assert_eq!(
        keeper.settings_lines(),
        ["settings.with_category(Op::Linear, OpCategory::FullPrecision)"]
    );
    let Some(Verdict::F16Safe {
        initial_scale,
        keeping_full,
        ..
    }) = report
        .verdicts
        .iter()
        .find(|v| matches!(v, Verdict::F16Safe { .. }))
        .cloned()
    else {
        panic!("no f16 verdict: {:#?}", report.verdicts);
    };
    assert_eq!(keeping_full, ["linear"]);

    // Without the override every step overflows; with it, at the proposed scale, none does.
    assert_eq!(skipped_steps(f16(), initial_scale, 6), 6);
    let fixed = f16().with_category(Op::Linear, OpCategory::FullPrecision);
    assert_eq!(skipped_steps(fixed.clone(), initial_scale, 30), 0);

    // Audited with the override, the model has nothing left to keep.
    let again = audit_loud(&fixed, 2).unwrap();
    assert!(
        !again
            .verdicts
            .iter()
            .any(|v| matches!(v, Verdict::KeepFullPrecision { .. })),
        "{:#?}",
        again.verdicts
    );
}

#[test]
fn every_parameter_gradient_is_measured_unscaled_by_module_path() {
    let report = audit_loud(&f16(), 3).unwrap();
    let paths: Vec<_> = report.params.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        ["big.weight", "big.bias", "head.weight", "head.bias"]
    );
    for p in &report.params {
        assert_eq!(p.grad.values % 3, 0, "three steps of {}", p.path);
        assert_eq!(p.grad.non_finite, 0);
    }
    // The big layer's gradients are scaled down by 1/GAIN on their way back.
    let max = |path: &str| {
        report
            .params
            .iter()
            .find(|p| p.path == path)
            .unwrap()
            .grad
            .max_abs
    };
    assert!(max("big.bias") < max("head.bias") * 1e-3);
}

#[test]
fn zero_steps_and_an_uninstrumented_model_are_errors() {
    assert_eq!(audit_loud(&f16(), 0).unwrap_err(), AuditError::NoSteps);

    type Plain = Autodiff<MixedPrecision<Flex>>;
    let device = MixedPrecision::<Flex>::device(Default::default(), Policy::F32).unwrap();
    let model = Loud::<Plain>::new(&device);
    let x = batch::<Plain>(&device);
    let err = audit(
        model,
        SgdConfig::new().init(),
        &f16(),
        AuditConfig::new(1),
        |m: &Loud<Plain>, _| m.loss(x.clone()),
    )
    .unwrap_err();
    assert_eq!(err, AuditError::NothingObserved);
    assert!(err.to_string().contains("Instrumented"));
}
