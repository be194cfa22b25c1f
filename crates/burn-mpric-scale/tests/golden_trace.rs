//! The cross-system trace of `docs/loss-scaling.md` (events T T F T T T F F T T, init 128,
//! factor 2, backoff 0.5, interval 2, min 1) for every preset, and the presets' own parameters.

use burn_mpric_scale::{DynamicLossScale, LossScaleConfig, MIN_SCALE, UpdateRule};

const EVENTS: [bool; 10] = [
    true, true, false, true, true, true, false, false, true, true,
];

/// The preset with the trace's parameters substituted.
fn traced(preset: LossScaleConfig) -> DynamicLossScale {
    preset
        .with_initial_scale(128.0)
        .with_growth_factor(2.0)
        .with_backoff_factor(0.5)
        .with_growth_interval(2)
        .with_min_scale(1.0)
        .init()
        .expect("trace parameters are valid")
}

/// `(scale, counter, hysteresis tracker)` after each event.
fn run(mut state: DynamicLossScale) -> Vec<(f32, u32, u32)> {
    EVENTS
        .iter()
        .map(|&finite| {
            state = state.adjust(finite);
            (state.loss_scale(), state.counter(), state.hysteresis_left())
        })
        .collect()
}

fn scale_counter(trace: &[(f32, u32, u32)]) -> Vec<(f32, u32)> {
    trace.iter().map(|&(s, c, _)| (s, c)).collect()
}

const TORCH_ROW: [(f32, u32); 10] = [
    (128.0, 1),
    (256.0, 0),
    (128.0, 0),
    (128.0, 1),
    (256.0, 0),
    (256.0, 1),
    (128.0, 0),
    (64.0, 0),
    (64.0, 1),
    (128.0, 0),
];

#[test]
fn default_rule_gives_the_pytorch_jmp_keras_row() {
    assert_eq!(
        scale_counter(&run(traced(LossScaleConfig::new()))),
        TORCH_ROW
    );
}

#[test]
fn torch_jmp_eformer_keras_presets_give_the_same_row() {
    for preset in [
        LossScaleConfig::torch(),
        LossScaleConfig::jmp(),
        LossScaleConfig::eformer(),
        LossScaleConfig::keras(),
    ] {
        assert_eq!(scale_counter(&run(traced(preset))), TORCH_ROW, "{preset:?}");
    }
}

#[test]
fn flax_preset_grows_one_step_later() {
    let expected = [
        (128.0, 1),
        (128.0, 2),
        (64.0, 0),
        (64.0, 1),
        (64.0, 2),
        (128.0, 0),
        (64.0, 0),
        (32.0, 0),
        (32.0, 1),
        (32.0, 2),
    ];
    assert_eq!(
        scale_counter(&run(traced(LossScaleConfig::flax()))),
        expected
    );
}

#[test]
fn deepspeed_preset_with_hysteresis_2() {
    // (scale, cur_hysteresis)
    let expected = [
        (128.0, 2),
        (256.0, 2),
        (256.0, 1),
        (256.0, 1),
        (512.0, 2),
        (512.0, 2),
        (512.0, 1),
        (256.0, 1),
        (256.0, 1),
        (512.0, 2),
    ];
    let trace = run(traced(LossScaleConfig::deepspeed()));
    let got: Vec<(f32, u32)> = trace.iter().map(|&(s, _, h)| (s, h)).collect();
    assert_eq!(got, expected);
}

#[test]
fn megatron_preset_with_hysteresis_2() {
    // (scale, growth tracker, hysteresis tracker)
    let expected = [
        (128.0, 1, 2),
        (256.0, 0, 2),
        (256.0, 0, 1),
        (256.0, 1, 1),
        (512.0, 0, 2),
        (512.0, 1, 2),
        (512.0, 0, 1),
        (256.0, 0, 0),
        (256.0, 1, 0),
        (512.0, 0, 2),
    ];
    assert_eq!(run(traced(LossScaleConfig::megatron())), expected);
}

#[test]
fn deepspeed_consecutive_hysteresis_restores_on_every_finite_step() {
    // DeepSpeed with consecutive_hysteresis: a finite step between two overflows restores the
    // tracker, so F T F never backs off with hysteresis 2; F F does.
    let config = LossScaleConfig::deepspeed().with_rule(UpdateRule::DeepSpeed {
        consecutive_hysteresis: true,
    });
    let mut s = traced(config);
    for finite in [false, true, false, true] {
        s = s.adjust(finite);
    }
    assert_eq!(s.loss_scale(), 128.0);
    assert_eq!(s.hysteresis_left(), 2);
    let s = s.adjust(false).adjust(false);
    assert_eq!(s.loss_scale(), 64.0);
}

#[test]
fn preset_parameters_match_the_reference_defaults() {
    let torch = LossScaleConfig::torch();
    assert_eq!(
        (
            torch.initial_scale,
            torch.growth_factor,
            torch.backoff_factor,
            torch.growth_interval
        ),
        (65536.0, 2.0, 0.5, 2000)
    );
    assert_eq!(
        (torch.min_scale, torch.max_scale, torch.hysteresis),
        (MIN_SCALE, None, 1)
    );

    for jmp_like in [LossScaleConfig::jmp(), LossScaleConfig::eformer()] {
        assert_eq!(
            (
                jmp_like.initial_scale,
                jmp_like.growth_interval,
                jmp_like.growth_factor,
                jmp_like.min_scale
            ),
            (32768.0, 2000, 2.0, 1.0)
        );
        assert_eq!(jmp_like.backoff_factor, 0.5);
    }

    let keras = LossScaleConfig::keras();
    assert_eq!(
        (keras.initial_scale, keras.growth_interval),
        (32768.0, 2000)
    );

    let flax = LossScaleConfig::flax();
    assert_eq!((flax.initial_scale, flax.growth_interval), (65536.0, 2000));
    assert_eq!(
        (flax.min_scale, flax.max_scale),
        (f32::MIN_POSITIVE, Some(f32::MAX))
    );
    assert_eq!(flax.rule, UpdateRule::Flax);

    let ds = LossScaleConfig::deepspeed();
    assert_eq!(
        (
            ds.initial_scale,
            ds.growth_interval,
            ds.hysteresis,
            ds.min_scale
        ),
        (65536.0, 1000, 2, 1.0)
    );

    let mg = LossScaleConfig::megatron();
    assert_eq!(
        (
            mg.initial_scale,
            mg.growth_interval,
            mg.hysteresis,
            mg.min_scale
        ),
        (2f32.powi(32), 1000, 2, 1.0)
    );

    for preset in [torch, keras, flax, ds, mg, LossScaleConfig::jmp()] {
        assert!(preset.validate().is_ok(), "{preset:?}");
    }
}

#[test]
fn flax_growth_clamps_at_f32_max_instead_of_overflowing() {
    // Flax: min(scale * growth, f32::MAX).
    let s = LossScaleConfig::flax()
        .with_initial_scale(2f32.powi(127))
        .with_growth_interval(1)
        .init()
        .unwrap();
    let s = s.adjust(true).adjust(true);
    assert_eq!(s.loss_scale(), f32::MAX);
    assert_eq!(s.adjust(true).adjust(true).loss_scale(), f32::MAX);
}
