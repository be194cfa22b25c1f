//! Both editions judge a skipped step alike: on the same model and batch, the Burn 0.21
//! probe (this crate's `LossScaler::step_with` and `probe_cause`) and the Burn 0.22 one
//! (`burn-mpric-022`) find the same [`SkipCause`], with the same text, and a run that stalls
//! stops with the same message. The expected causes and texts are worked out by hand from the
//! model below, not read from either edition.
//!
//! The model is a 1x1 linear layer with weight and bias 1 and the loss `(x + 1)^2` (the
//! weight's gradient `2 (x + 1) x S` at scale `S`), or a planted kernel bug:
//! `sqrt(0 * y)`, whose gradient is NaN whatever the scale.

use burn::backend::{Autodiff, Flex};
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::Tensor;
use burn_mpric_scale::{LossScaleConfig, LossScaler, SkipCause, StepError, StepOutcome};

/// 2 x^2 = 2.5e34: times 2^15 overflows f32 (8.2e38), times 2^-8 does not.
const LARGE: f32 = 1.118e17;

/// What each step's loss is.
#[derive(Debug, Clone, Copy)]
enum Loss {
    /// `(w x + b)^2` for the input `x`.
    Square(f32),
    /// `sqrt(0 * (w + b))`: NaN gradients at every scale, a finite loss of 0.
    Kernel,
}

fn config() -> LossScaleConfig {
    LossScaleConfig::new().with_initial_scale(32768.0)
}

type B = Autodiff<Flex>;

fn loss_021(model: &Linear<B>, loss: Loss) -> Tensor<B, 1> {
    let device = Default::default();
    match loss {
        Loss::Square(x) => model
            .forward(Tensor::<B, 2>::from_floats([[x]], &device))
            .powi_scalar(2)
            .mean(),
        Loss::Kernel => model
            .forward(Tensor::<B, 2>::ones([1, 1], &device))
            .mul_scalar(0.0)
            .sqrt()
            .sum(),
    }
}

/// The Burn 0.21 edition: each loss through `step_with`, then the last one again through
/// `step_with_loss` and `probe_cause`; the outcomes (or the stall's message) and that cause.
fn run_021(
    max_skips: u64,
    losses: &[Loss],
) -> (Vec<Result<StepOutcome, String>>, Option<SkipCause>) {
    let device = Default::default();
    let mut model: Linear<B> = LinearConfig::new(1, 1)
        .with_initializer(Initializer::Constant { value: 1.0 })
        .init(&device);
    let mut optim = SgdConfig::new().init();
    let mut scaler = LossScaler::dynamic(config())
        .unwrap()
        .with_max_consecutive_skips(max_skips);
    let mut outcomes = Vec::new();
    for &loss in losses {
        let (next, outcome) = scaler.step_with(&mut optim, 0.0, model, |m| loss_021(m, loss));
        model = next;
        outcomes.push(outcome.map_err(|e| match e {
            StepError::Stalled { .. } => e.to_string(),
            other => panic!("{other}"),
        }));
    }
    let last = *losses.last().unwrap();
    let mut probing = LossScaler::dynamic(config()).unwrap();
    let scaled = probing.scale_loss(loss_021(&model, last));
    let grads = GradientsParams::from_grads(scaled.backward(), &model);
    let (model, outcome) = probing.step_with_loss(&mut optim, 0.0, model, grads, scaled);
    let cause = probing
        .probe_cause(&model, &outcome.unwrap(), |m| loss_021(m, last))
        .unwrap();
    (outcomes, cause)
}

/// The Burn 0.22 edition, as [`run_021`].
fn run_022(
    max_skips: u64,
    losses: &[Loss],
) -> (Vec<Result<StepOutcome, String>>, Option<SkipCause>) {
    use burn_mpric_022::{LossScaler, StepError};
    use burn022::nn::{Initializer, Linear, LinearConfig};
    use burn022::optim::{GradientsParams, SgdConfig};
    use burn022::tensor::{Device, Tensor};

    let device = Device::flex().autodiff();
    let value = |model: &Linear, loss: Loss| -> Tensor<1> {
        match loss {
            Loss::Square(x) => model
                .forward(Tensor::<2>::from_floats([[x]], &device))
                .powi_scalar(2)
                .mean(),
            Loss::Kernel => model
                .forward(Tensor::<2>::ones([1, 1], &device))
                .mul_scalar(0.0)
                .sqrt()
                .sum(),
        }
    };
    let mut model: Linear = LinearConfig::new(1, 1)
        .with_initializer(Initializer::Constant { value: 1.0 })
        .init(&device);
    let mut optim = SgdConfig::new().init();
    let mut scaler = LossScaler::dynamic(config())
        .unwrap()
        .with_max_consecutive_skips(max_skips);
    let mut outcomes = Vec::new();
    for &loss in losses {
        let (next, outcome) = scaler.step_with(&mut optim, 0.0, model, |m| value(m, loss));
        model = next;
        outcomes.push(outcome.map_err(|e| match e {
            StepError::Stalled { .. } => e.to_string(),
            other => panic!("{other}"),
        }));
    }
    let last = *losses.last().unwrap();
    let mut probing = LossScaler::dynamic(config()).unwrap();
    let scaled = probing.scale_loss(value(&model, last));
    let grads = GradientsParams::from_grads(scaled.backward(), &model);
    let (model, outcome) = probing.step_with_loss(&mut optim, 0.0, model, grads, scaled);
    let cause = probing
        .probe_cause(&model, &outcome.unwrap(), |m| value(m, last))
        .unwrap();
    (outcomes, cause)
}

fn cause(outcome: &Result<StepOutcome, String>) -> Option<&SkipCause> {
    outcome.as_ref().unwrap().cause.as_ref()
}

#[test]
fn an_overflow_that_moves_with_the_scale_is_a_range_problem_in_both() {
    let losses = [Loss::Square(0.5), Loss::Square(LARGE)];
    let (old, old_probed) = run_021(0, &losses);
    let (new, new_probed) = run_022(0, &losses);
    for outcomes in [&old, &new] {
        assert_eq!(cause(&outcomes[0]), None, "a finite step is not probed");
    }
    // 2^15 overflows, the probe's 2^-8 (2^15 / 2^8 is above 2^-8) does not.
    let expected = SkipCause::Range {
        scale: 32768.0,
        probe_scale: 1.0 / 256.0,
        zero: false,
    };
    assert_eq!(cause(&old[1]), Some(&expected));
    assert_eq!(cause(&new[1]), Some(&expected));
    assert_eq!(
        expected.to_string(),
        "a range problem: the gradients overflow at a loss scale of 2^15 and are finite at 2^-8; a dynamic scale backs off to fit"
    );
    assert_eq!(old_probed.as_ref(), Some(&expected), "probe_cause, 0.21");
    assert_eq!(new_probed.as_ref(), Some(&expected), "probe_cause, 0.22");
}

#[test]
fn a_kernel_bug_is_not_a_range_problem_in_both() {
    let (old, old_probed) = run_021(0, &[Loss::Kernel]);
    let (new, new_probed) = run_022(0, &[Loss::Kernel]);
    let old_cause = cause(&old[0]).expect("probed, 0.21").clone();
    let new_cause = cause(&new[0]).expect("probed, 0.22").clone();
    assert_eq!(old_cause, new_cause);
    assert!(
        matches!(&old_cause, SkipCause::ScaleInvariant { scale, probe_scale, zero: false, .. }
            if *scale == 32768.0 && *probe_scale == 1.0 / 256.0),
        "{old_cause:?}"
    );
    let text = old_cause.to_string();
    assert!(
        text.starts_with(
            "not a range problem: the non-finite gradients do not depend on the loss scale (the same at 2^15 and 2^-8)"
        ),
        "{text}"
    );
    assert!(
        text.ends_with("keep those parameters at f32 or try another backend"),
        "{text}"
    );
    assert_eq!(old_probed, new_probed);
    assert!(matches!(old_probed, Some(SkipCause::ScaleInvariant { .. })));
}

#[test]
fn a_run_that_stalls_stops_with_one_message_in_both() {
    // NaN input: the loss is NaN at every scale. Two skips in a row stop the run: 2^15 at the
    // first, 2^14 at the second, 2^13 next.
    let losses = [Loss::Square(f32::NAN), Loss::Square(f32::NAN)];
    let (old, _) = run_021(2, &losses);
    let (new, _) = run_022(2, &losses);
    let first = SkipCause::LossNotFinite {
        scale: 32768.0,
        probe_scale: 1.0 / 256.0,
    };
    assert_eq!(cause(&old[0]), Some(&first));
    assert_eq!(cause(&new[0]), Some(&first));
    let expected = "2 steps in a row were skipped for non-finite gradients (max_consecutive_skips = 2; loss scale now 8.192e3): the loss itself is not finite (at loss scales 2^14 and 2^-8): the forward pass overflows the compute dtype or an op returns NaN, and no loss scale changes it; the precision audit tells which";
    assert_eq!(old[1].as_ref().unwrap_err(), expected);
    assert_eq!(new[1].as_ref().unwrap_err(), expected);
}
