//! jmp's loss-scale tests (and eformer's period-two case) and construction checks.

use burn::backend::Flex;
use burn::tensor::Tensor;
use burn_mpric_scale::{
    DynamicLossScale, LossScale, LossScaleConfig, LossScaleError, LossScaling, MIN_SCALE,
    NoOpLossScale, StaticLossScale,
};

/// jmp's `DynamicLossScale(loss_scale, period, factor, min_loss_scale)`.
fn jmp(initial: f32, period: u32, factor: f64, min: f32) -> DynamicLossScale {
    LossScaleConfig::jmp()
        .with_initial_scale(initial)
        .with_growth_interval(period)
        .with_growth_factor(factor)
        .with_backoff_factor(1.0 / factor)
        .with_min_scale(min)
        .init()
        .unwrap()
}

#[test]
fn f4_grows_after_period_finite_steps() {
    for (period, factor) in [(20, 2.0), (30, 3.0)] {
        let mut s = jmp(10.0, period, factor, 1.0);
        for i in 0..period {
            assert_eq!(s.loss_scale(), 10.0);
            assert_eq!(s.counter(), i);
            s = s.adjust(true);
        }
        assert_eq!(s.loss_scale(), (10.0 * factor) as f32);
        assert_eq!(s.counter(), 0);
    }
}

#[test]
fn f5_backs_off_on_every_non_finite_step_down_to_min_one() {
    for (period, factor) in [(20, 2.0), (30, 3.0)] {
        let mut s = jmp(10.0, period, factor, 1.0);
        // jmp computes max(min, scale / factor) in f32.
        let mut reference = 10.0f32;
        for i in 0..100 {
            s = s.adjust(false);
            reference = (reference / factor as f32).max(1.0);
            let expected = (10.0 / factor.powi(i + 1)).max(1.0);
            assert!(
                ((f64::from(s.loss_scale()) - expected) / expected).abs() <= 1e-5,
                "step {i}: {} vs {expected}",
                s.loss_scale()
            );
            assert_eq!(s.loss_scale(), reference, "step {i}");
            assert_eq!(s.counter(), 0);
        }
    }
}

#[test]
fn f6_explicit_min_scale() {
    let s = jmp(10.0, 20, 2.0, 0.3125);
    let trace: Vec<f32> = (0..7)
        .scan(s, |s, _| {
            *s = s.adjust(false);
            Some(s.loss_scale())
        })
        .collect();
    assert_eq!(trace, [5.0, 2.5, 1.25, 0.625, 0.3125, 0.3125, 0.3125]);

    // (30, 3, 0.37) and jmp's (5, 2, 0.0): a min of 0 is rejected here, and the smallest allowed
    // floor gives jmp's trace for all 100 steps.
    assert!(matches!(
        LossScaleConfig::new().with_min_scale(0.0).validate(),
        Err(LossScaleError::InvalidScale { .. })
    ));
    for (period, factor, min) in [(30, 3.0, 0.37f32), (5, 2.0, MIN_SCALE)] {
        let mut s = jmp(10.0, period, factor, min);
        let mut reference = 10.0f32;
        for i in 0..100 {
            s = s.adjust(false);
            reference = (reference / factor as f32).max(min);
            let expected = (10.0 / factor.powi(i + 1)).max(f64::from(min));
            assert!(((f64::from(s.loss_scale()) - expected) / expected).abs() <= 1e-5);
            assert_eq!(s.loss_scale(), reference);
        }
    }
}

#[test]
fn f7_eformer_period_two() {
    let s = jmp(4.0, 2, 2.0, 1.0);
    let s = s.adjust(true);
    assert_eq!((s.loss_scale(), s.counter()), (4.0, 1));
    let s = s.adjust(true);
    assert_eq!((s.loss_scale(), s.counter()), (8.0, 0));
    let s = s.adjust(false);
    assert_eq!(s.loss_scale(), 4.0);
}

#[test]
fn f8_min_scale_survives_a_serialization_round_trip() {
    // jmp loses a configured min after a pytree round trip: 6 backoffs from 8 with min 0.125
    // end at 1.0 instead of 0.125.
    let config = LossScaleConfig::new()
        .with_initial_scale(8.0)
        .with_min_scale(0.125);
    let json = serde_json::to_string(&config).unwrap();
    let restored: LossScaleConfig = serde_json::from_str(&json).unwrap();
    let mut s = restored.init().unwrap();
    for _ in 0..6 {
        s = s.adjust(false);
    }
    assert_eq!(s.loss_scale(), 0.125);
}

#[test]
fn f9_construction_rejects_non_finite_zero_and_negative_scales() {
    for bad in [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        -1.0,
        1e-40,
    ] {
        assert!(StaticLossScale::new(bad).is_err(), "static {bad}");
        let config = LossScaleConfig::new()
            .with_initial_scale(bad)
            .with_min_scale(MIN_SCALE);
        assert!(
            matches!(config.init(), Err(LossScaleError::InvalidScale { .. })),
            "dynamic {bad}"
        );
    }
    let cases = [
        (
            LossScaleConfig::new().with_growth_factor(1.0),
            LossScaleError::InvalidGrowthFactor(1.0),
        ),
        (
            LossScaleConfig::new().with_growth_factor(f64::INFINITY),
            LossScaleError::InvalidGrowthFactor(f64::INFINITY),
        ),
        (
            LossScaleConfig::new().with_backoff_factor(1.0),
            LossScaleError::InvalidBackoffFactor(1.0),
        ),
        (
            LossScaleConfig::new().with_backoff_factor(0.0),
            LossScaleError::InvalidBackoffFactor(0.0),
        ),
        (
            LossScaleConfig::new().with_growth_interval(0),
            LossScaleError::ZeroGrowthInterval,
        ),
        (
            LossScaleConfig::new().with_hysteresis(0),
            LossScaleError::ZeroHysteresis,
        ),
    ];
    for (config, expected) in cases {
        assert_eq!(config.validate(), Err(expected));
    }
    assert!(matches!(
        LossScaleConfig::new().with_min_scale(65536.0).validate(),
        Err(LossScaleError::ScaleOutOfBounds { .. })
    ));
    assert!(matches!(
        LossScaleConfig::new()
            .with_max_scale(Some(1024.0))
            .validate(),
        Err(LossScaleError::ScaleOutOfBounds { .. })
    ));
    assert!(matches!(
        LossScaleConfig::new()
            .with_initial_scale(2.0)
            .with_min_scale(4.0)
            .with_max_scale(Some(3.0))
            .validate(),
        Err(LossScaleError::MinAboveMax { .. })
    ));
    assert!(matches!(
        LossScaleConfig::new()
            .with_backoff_factor(f64::NAN)
            .validate(),
        Err(LossScaleError::InvalidBackoffFactor(_))
    ));
}

#[test]
fn f11_static_scale_and_unscale() {
    let device = Default::default();
    for s in [2.0f32, 3.0, 4.0] {
        let scale = StaticLossScale::new(s).unwrap();
        let one = Tensor::<Flex, 1>::from_floats([1.0], &device);
        assert_eq!(scale.scale(one).into_scalar(), s);
        let back = scale.unscale(Tensor::<Flex, 1>::from_floats([s], &device));
        assert_eq!(back.into_scalar(), 1.0);
        assert_eq!(scale.adjust(false), scale);
        assert_eq!(scale.adjust(true), scale);
    }
}

#[test]
fn f12_noop_is_the_identity() {
    let device = Default::default();
    let s = NoOpLossScale;
    assert_eq!(s.loss_scale(), 1.0);
    let x = Tensor::<Flex, 1>::from_floats([1.5, -2.0, 1e30], &device);
    assert_eq!(s.scale(x.clone()).into_data(), x.clone().into_data());
    assert_eq!(s.unscale(x.clone()).into_data(), x.into_data());
    assert_eq!(s.adjust(true), s);
    assert_eq!(s.adjust(false), s);
    assert_eq!(LossScale::noop().adjust(false).loss_scale(), 1.0);
}

#[test]
fn default_configuration_does_not_fail_on_its_first_step() {
    // eformer's default (an int32 initial scale) crashes on the first adjust.
    let s = LossScaleConfig::default().init().unwrap();
    assert_eq!(s.adjust(true).loss_scale(), 32768.0);
    assert_eq!(s.adjust(false).loss_scale(), 16384.0);
}
