//! The loss scale's rule as a device runs it (`DeviceScaleRule::adjust`, written once over
//! either edition's tensors) takes the core's host decisions (`ScalerState::update`), step for
//! step, on every preset's dynamic configuration: run here on the host's one-element lanes,
//! over random sequences of finite and overflowing steps.

use burn_mpric_core::lane::Host;
use burn_mpric_core::scale::{DeviceScaleState, LossScaleConfig, ScalerState};
use proptest::prelude::*;

fn presets() -> [(&'static str, LossScaleConfig); 7] {
    [
        ("torch", LossScaleConfig::torch()),
        ("jmp", LossScaleConfig::jmp()),
        ("eformer", LossScaleConfig::eformer()),
        ("keras", LossScaleConfig::keras()),
        ("flax", LossScaleConfig::flax()),
        ("deepspeed", LossScaleConfig::deepspeed()),
        ("megatron", LossScaleConfig::megatron()),
    ]
}

/// The state as the device holds it: the scale, the counter and the hysteresis left.
fn device_state(host: &ScalerState) -> (f32, i64, i64) {
    let state = DeviceScaleState::of(host.loss_scale()).unwrap();
    (
        state.scale,
        i64::from(state.counter),
        i64::from(state.hysteresis_left),
    )
}

proptest! {
    #[test]
    fn the_device_rule_takes_the_core_decisions_for_every_preset(
        steps in prop::collection::vec(prop::bool::weighted(0.8), 1..300),
        interval in 1u32..6,
        hysteresis in 1u32..4,
        bounded in any::<bool>(),
    ) {
        for (name, config) in presets() {
            let config = LossScaleConfig {
                growth_interval: interval,
                hysteresis: config.hysteresis.max(1).min(hysteresis),
                // A bound the run can reach: 16 doublings above where it starts.
                max_scale: bounded.then_some(config.initial_scale * 65536.0),
                ..config
            };
            let mut host = ScalerState::dynamic(config)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let rule = DeviceScaleState::of(host.loss_scale()).unwrap().rule.unwrap();
            let full = i64::from(rule.hysteresis);
            let mut device = device_state(&host);
            for (i, &finite) in steps.iter().enumerate() {
                host.update(finite);
                device = rule.adjust::<Host, f32, i64>(device, &full, finite);
                prop_assert_eq!(device, device_state(&host), "{} at step {}", name, i);
            }
        }
    }
}

#[test]
fn the_rule_grows_backs_off_and_holds_at_the_bounds() {
    // Checked by hand: grow after 2 finite steps, halve on an overflow, never below 1.
    let config = LossScaleConfig::torch()
        .with_initial_scale(2.0)
        .with_growth_interval(2)
        .with_min_scale(1.0);
    let host = ScalerState::dynamic(config).unwrap();
    let rule = DeviceScaleState::of(host.loss_scale())
        .unwrap()
        .rule
        .unwrap();
    let mut state = device_state(&host);
    let mut scales = Vec::new();
    for finite in [true, true, false, false, false, true] {
        state = rule.adjust::<Host, f32, i64>(state, &1, finite);
        scales.push(state.0);
    }
    assert_eq!(scales, vec![2.0, 4.0, 2.0, 1.0, 1.0, 1.0]);
}
