//! Overflow attribution: a model built to overflow at f16 in one known layer has exactly that
//! layer's parameters named on its skipped steps, through the scaler's step, its
//! `check` + `update_checked` and the `PrecisionHandler`; applied steps name nothing.

use burn::backend::{Autodiff, Flex};
use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use burn_mpric::scale::{LossScaleConfig, LossScaler};
use burn_mpric::{MixedPrecision, Policy, PrecisionHandler};

type Mp = MixedPrecision<Flex>;
type B = Autodiff<Mp>;

/// Two hidden layers and a head whose input carries a constant `offset`. The offset passes
/// backward unchanged (the gradient of `h + c` by `h` is 1), so it enlarges the head's weight
/// gradient (input × output gradient) and nothing else: at f16 with a large loss scale only
/// `head.weight` overflows.
#[derive(Module, Debug)]
struct Planted<B: Backend> {
    hidden: Vec<Linear<B>>,
    head: Linear<B>,
    act: Relu,
}

impl<B: Backend> Planted<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            hidden: vec![
                LinearConfig::new(4, 8).init(device),
                LinearConfig::new(8, 8).init(device),
            ],
            head: LinearConfig::new(8, 2).init(device),
            act: Relu::new(),
        }
    }

    fn loss(&self, x: Tensor<B, 2>, offset: f32) -> Tensor<B, 1> {
        let h = self
            .hidden
            .iter()
            .fold(x, |x, layer| self.act.forward(layer.forward(x)));
        self.head.forward(h.add_scalar(offset)).mean()
    }
}

fn device() -> burn_mpric::MpDevice<Flex> {
    Mp::device(Default::default(), "mixed_f16".parse::<Policy>().unwrap()).unwrap()
}

fn scaler() -> LossScaler {
    LossScaler::dynamic(LossScaleConfig::new().with_initial_scale(32768.0)).unwrap()
}

fn batch(device: &burn_mpric::MpDevice<Flex>) -> Tensor<B, 2> {
    Tensor::from_floats(
        [
            [0.5, -0.2, 0.1, 0.9],
            [0.3, 0.8, -0.6, 0.2],
            [-0.4, 0.1, 0.7, -0.9],
        ],
        device,
    )
}

#[test]
fn a_skipped_step_names_exactly_the_planted_layer() {
    let device = device();
    let model = Planted::<B>::new(&device);
    let mut optim = SgdConfig::new().init();
    let mut scaler = scaler();

    // The head's input is about 3000: its weight gradient exceeds f16's 65504 at 2^15.
    let scaled = scaler.scale_loss(model.loss(batch(&device), 3000.0));
    let grads = GradientsParams::from_grads(scaled.backward(), &model);
    let (model, outcome) = scaler.step(&mut optim, 0.1, model, grads);
    let outcome = outcome.unwrap();
    assert!(outcome.is_skipped());
    assert_eq!(outcome.overflow.unwrap().params, vec!["head.weight"]);

    // Without the offset the same model and scale train: nothing is named.
    let scaled = scaler.scale_loss(model.loss(batch(&device), 0.0));
    let grads = GradientsParams::from_grads(scaled.backward(), &model);
    let (model, outcome) = scaler.step(&mut optim, 0.1, model, grads);
    let outcome = outcome.unwrap();
    assert!(outcome.is_applied(), "{outcome:?}");
    assert_eq!(outcome.overflow, None);

    // A NaN in the batch: Burn's ReLU turns NaN into 0, so it reaches only the gradient
    // that multiplies the batch itself, the first layer's weight.
    let poisoned = batch(&device).mul_scalar(f32::NAN);
    let scaled = scaler.scale_loss(model.loss(poisoned, 0.0));
    let grads = GradientsParams::from_grads(scaled.backward(), &model);
    let (_, outcome) = scaler.step(&mut optim, 0.1, model, grads);
    let outcome = outcome.unwrap();
    assert!(outcome.is_skipped());
    assert_eq!(outcome.overflow.unwrap().params, vec!["hidden.0.weight"]);
}

#[test]
fn check_and_the_handler_report_the_same_names() {
    let device = device();
    let model = Planted::<B>::new(&device);
    let scaler_ = scaler();
    let scaled = scaler_.scale_loss(model.loss(batch(&device), 3000.0));
    let grads = GradientsParams::from_grads(scaled.backward(), &model);
    let checked = scaler_.check(&model, grads, Some(scaled)).unwrap();
    assert!(!checked.finite);
    assert_eq!(
        checked.overflow.as_ref().unwrap().params,
        vec!["head.weight"]
    );
    let outcome = scaler().update_checked(&checked);
    assert_eq!(outcome.overflow, checked.overflow);

    let mut handler = PrecisionHandler::from_text("mixed_f16")
        .unwrap()
        .with_scaler(scaler());
    let step = handler
        .train_step(&model, |m| m.loss(batch(&device), 3000.0))
        .unwrap();
    assert!(step.outcome.is_skipped());
    let overflow = step.outcome.overflow.unwrap();
    assert_eq!(overflow.params, vec!["head.weight"]);
    assert_eq!(overflow.to_string(), "1 parameter: head.weight");
    let step = handler
        .train_step(&model, |m| m.loss(batch(&device), 0.0))
        .unwrap();
    assert!(step.outcome.is_applied());
    assert_eq!(step.outcome.overflow, None);
}

/// A planted op whose backward is NaN whatever its input (its forward is the identity):
/// `h + sqrt(|h| * 0)`, whose gradient is `1 + inf * 0`.
struct NanBackward;

impl NanBackward {
    fn forward<B: Backend>(&self, h: Tensor<B, 2>) -> Tensor<B, 2> {
        h.clone() + h.abs().mul_scalar(0.0).sqrt()
    }
}

/// `step_with` re-runs a batch whose gradients are not finite at a scale 2^8 lower or more: the
/// planted overflow moves with the scale, the planted NaN kernel does not ("not a range
/// problem", naming the layers before it), a NaN loss is neither; applied steps are not
/// re-run; a run that skips every step stops at the limit.
#[test]
fn step_with_tells_a_kernel_bug_from_an_overflow() {
    use burn_mpric::scale::{SkipCause, StepError};
    let device = device();
    let step = |loss: &dyn Fn(&Planted<B>) -> Tensor<B, 1>| {
        let model = Planted::<B>::new(&device);
        let mut runs = 0;
        let (_, outcome) = scaler().step_with(
            &mut SgdConfig::new().init(),
            0.1,
            model,
            |m: &Planted<B>| {
                runs += 1;
                loss(m)
            },
        );
        (outcome.unwrap(), runs)
    };

    let (overflow, runs) = step(&|m| m.loss(batch(&device), 3000.0));
    assert!(overflow.is_skipped());
    assert!(
        matches!(overflow.cause, Some(SkipCause::Range { zero: false, scale, probe_scale }) if scale == 32768.0 && probe_scale == 1.0 / 256.0),
        "{overflow:?}"
    );
    assert_eq!(runs, 2, "the skipped step's batch ran once more");

    let kernel = |m: &Planted<B>| {
        let h = m
            .hidden
            .iter()
            .fold(batch(&device), |x, layer| m.act.forward(layer.forward(x)));
        m.head.forward(NanBackward.forward(h)).mean()
    };
    let (bug, _) = step(&kernel);
    assert!(bug.is_skipped());
    let text = bug.cause.as_ref().unwrap().to_string();
    match bug.cause.as_ref().unwrap() {
        SkipCause::ScaleInvariant {
            params,
            zero: false,
            ..
        } => {
            assert!(
                !params.is_empty() && params.iter().all(|p| p.starts_with("hidden.")),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        text.starts_with(
            "not a range problem: the non-finite gradients do not depend on the loss scale"
        ),
        "{text}"
    );

    let (nan_loss, _) = step(&|m| m.loss(batch(&device), f32::NAN));
    assert!(
        matches!(nan_loss.cause, Some(SkipCause::LossNotFinite { .. })),
        "{nan_loss:?}"
    );

    let (fine, runs) = step(&|m| m.loss(batch(&device), 0.0));
    assert!(fine.is_applied() && fine.cause.is_none());
    assert_eq!(runs, 1);

    // Every step skips: the third in a row stops the run, with the cause.
    let mut model = Planted::<B>::new(&device);
    let mut scaler = scaler().with_max_consecutive_skips(3);
    let mut optim = SgdConfig::new().init();
    let mut last = None;
    for _ in 0..3 {
        let (next, outcome) = scaler.step_with(&mut optim, 0.1, model, kernel);
        model = next;
        last = Some(outcome);
    }
    let err = last.unwrap().unwrap_err();
    assert!(matches!(err, StepError::Stalled { max: 3, .. }), "{err}");
    assert!(err.to_string().contains("not a range problem"), "{err}");
}
