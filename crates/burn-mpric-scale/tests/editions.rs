//! Both editions over one core: on the same sequence of finite and overflowing steps, the
//! Burn 0.21 scaler (this crate) and the Burn 0.22 one (`burn-mpric-022`) take the same
//! decisions and reach the same scale, each matches the core fed with the finiteness the host
//! expects, and a state saved by either edition continues in the other exactly as it would
//! have in its own.
//!
//! The model is a 1x1 linear layer with weight and bias 1, trained by SGD at learning rate 0,
//! so every step sees the same parameters: for input `a` the weight's scaled gradient is
//! `2 (a + 1) a S`, which overflows f32 for large `a` at large scales only. Whether a step
//! overflows is therefore decided by the scale the dynamic rule has reached, the way real
//! f16 overflows are.

use burn::backend::{Autodiff, Flex};
use burn::nn::{Initializer, LinearConfig};
use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::Tensor;
use burn_mpric_scale::{LossScaleConfig, LossScaler, ScalerState, StepAction, StepOutcome};

/// One step's input.
#[derive(Debug, Clone, Copy)]
enum Input {
    /// An ordinary value: finite at every scale.
    Small,
    /// A value whose scaled gradient overflows f32 at scales of 2^14 and above, and stays
    /// finite at 2^13 and below.
    Large,
    /// NaN: not finite at any scale.
    Nan,
    /// Infinity: not finite at any scale.
    Inf,
}

impl Input {
    fn value(self) -> f32 {
        match self {
            Input::Small => 0.5,
            // 2 a^2 = 2.5e34: times 2^13 is 2.0e38 (finite), times 2^14 is 4.1e38 (inf).
            Input::Large => 1.118e17,
            Input::Nan => f32::NAN,
            Input::Inf => f32::INFINITY,
        }
    }

    /// Whether the host expects the step's gradients to be finite at `scale`: the weight's
    /// gradient `2 (a + 1) a S`, and the loss `(a + 1)^2 S`, both in f32.
    fn finite_at(self, scale: f32) -> bool {
        let a = self.value();
        let grad = 2.0 * (a + 1.0) * a * scale;
        let loss = (a + 1.0) * (a + 1.0) * scale;
        grad.is_finite() && loss.is_finite()
    }
}

use Input::{Inf, Large, Nan, Small};

/// Growth, backoff through the large inputs' overflow band, NaN and infinity, regrowth.
const SEQUENCE: [Input; 24] = [
    Small, Small, Small, Large, Large, Large, Small, Large, Nan, Small, Small, Small, Inf, Large,
    Small, Small, Small, Large, Small, Small, Small, Large, Nan, Small,
];

fn config() -> LossScaleConfig {
    LossScaleConfig::new()
        .with_initial_scale(32768.0)
        .with_growth_interval(3)
}

/// What a step decided, as both editions report it.
type Decision = (StepAction, f32, f32, u64, u64);

fn decision(outcome: &StepOutcome) -> Decision {
    (
        outcome.action,
        outcome.scale_used,
        outcome.next_scale,
        outcome.stats.steps,
        outcome.stats.skipped,
    )
}

/// The Burn 0.21 edition: `steps` of the sequence from `scaler`.
fn run_021(mut scaler: LossScaler, steps: &[Input]) -> (LossScaler, Vec<Decision>) {
    type B = Autodiff<Flex>;
    let device = Default::default();
    let mut model = LinearConfig::new(1, 1)
        .with_initializer(Initializer::Constant { value: 1.0 })
        .init::<B>(&device);
    let mut optim = SgdConfig::new().init();
    let mut decisions = Vec::new();
    for input in steps {
        let x = Tensor::<B, 2>::from_floats([[input.value()]], &device);
        let loss = model.forward(x).powi_scalar(2).mean();
        let scaled = scaler.scale_loss(loss);
        let grads = GradientsParams::from_grads(scaled.backward(), &model);
        let (next, outcome) = scaler.step_with_loss(&mut optim, 0.0, model, grads, scaled);
        model = next;
        decisions.push(decision(&outcome.expect("a step of the 0.21 edition")));
    }
    (scaler, decisions)
}

/// The Burn 0.22 edition: `steps` of the sequence from `scaler`.
fn run_022(
    mut scaler: burn_mpric_022::LossScaler,
    steps: &[Input],
) -> (burn_mpric_022::LossScaler, Vec<Decision>) {
    use burn022::nn::{Initializer, LinearConfig};
    use burn022::optim::{GradientsParams, SgdConfig};
    use burn022::tensor::{Device, Tensor};

    let device = Device::flex().autodiff();
    let mut model = LinearConfig::new(1, 1)
        .with_initializer(Initializer::Constant { value: 1.0 })
        .init(&device);
    let mut optim = SgdConfig::new().init();
    let mut decisions = Vec::new();
    for input in steps {
        let x = Tensor::<2>::from_floats([[input.value()]], &device);
        let scaled = scaler.scale_loss(model.forward(x).powi_scalar(2).mean());
        let grads = GradientsParams::from_grads(scaled.backward(), &model);
        let (next, outcome) = scaler.step_with_loss(&mut optim, 0.0, model, grads, scaled);
        model = next;
        decisions.push(decision(&outcome.expect("a step of the 0.22 edition")));
    }
    (scaler, decisions)
}

/// The core alone, fed with the finiteness the host expects at each step's scale.
fn run_core(steps: &[Input]) -> Vec<Decision> {
    let mut state = ScalerState::dynamic(config()).unwrap();
    steps
        .iter()
        .map(|input| decision(&state.update(input.finite_at(state.scale()))))
        .collect()
}

#[test]
fn both_editions_take_the_core_decisions_on_one_sequence() {
    let expected = run_core(&SEQUENCE);
    // The sequence really exercises the rule: growth, backoff, overflow that a backoff cures.
    let scales: Vec<f32> = expected.iter().map(|d| d.2).collect();
    assert!(scales.contains(&65536.0), "{scales:?}");
    assert!(scales.contains(&8192.0), "{scales:?}");
    assert!(
        expected
            .iter()
            .any(|d| d.0 == StepAction::Applied && d.1 <= 8192.0)
            && SEQUENCE
                .iter()
                .zip(&expected)
                .any(|(i, d)| matches!(i, Large) && d.0 == StepAction::Applied),
        "a large input is applied once the scale has backed off: {expected:?}"
    );
    let skipped = expected.last().unwrap().4;
    assert!(
        (6..SEQUENCE.len() as u64).contains(&skipped),
        "{expected:?}"
    );

    let (old, decisions_021) = run_021(LossScaler::dynamic(config()).unwrap(), &SEQUENCE);
    let (new, decisions_022) = run_022(
        burn_mpric_022::LossScaler::dynamic(config()).unwrap(),
        &SEQUENCE,
    );
    assert_eq!(decisions_021, expected, "the 0.21 edition");
    assert_eq!(decisions_022, expected, "the 0.22 edition");
    assert_eq!(old.to_record().0, new.to_record());
    // The same accessors, of the same types, in both editions: the whole step state and
    // the loss scale alone.
    let (core_021, core_022): (&ScalerState, &ScalerState) = (old.core(), new.core());
    assert_eq!(core_021, core_022);
    assert_eq!(old.loss_scale(), new.loss_scale());
    assert_eq!(old.loss_scale(), core_021.loss_scale());
}

#[test]
fn a_state_saved_by_either_edition_continues_in_the_other() {
    let dir = std::env::temp_dir().join(format!("mpric-editions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (first, rest) = SEQUENCE.split_at(10);
    let whole = run_core(&SEQUENCE);

    // 0.21 -> file -> 0.22.
    let (old, before) = run_021(LossScaler::dynamic(config()).unwrap(), first);
    let path = dir.join("from-021.json");
    old.save_file(&path).unwrap();
    let loaded = burn_mpric_022::LossScaler::load_file(&path).unwrap();
    assert_eq!(loaded.stats(), old.stats());
    let (_, after) = run_022(loaded, rest);
    assert_eq!([before, after].concat(), whole, "0.21 then 0.22");

    // 0.22 -> file -> 0.21.
    let (new, before) = run_022(
        burn_mpric_022::LossScaler::dynamic(config()).unwrap(),
        first,
    );
    let path = dir.join("from-022.json");
    new.save_file(&path).unwrap();
    let loaded = LossScaler::load_file(&path).unwrap();
    assert_eq!(loaded.scale(), new.scale());
    let (_, after) = run_021(loaded, rest);
    assert_eq!([before, after].concat(), whole, "0.22 then 0.21");

    // The files are the one format: byte for byte the same for the same state.
    let (old, _) = run_021(LossScaler::dynamic(config()).unwrap(), first);
    old.save_file(dir.join("again-021.json")).unwrap();
    assert_eq!(
        std::fs::read(dir.join("again-021.json")).unwrap(),
        std::fs::read(dir.join("from-022.json")).unwrap()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
