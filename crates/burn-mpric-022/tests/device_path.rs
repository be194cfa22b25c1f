//! The loss scaler's device path for Burn 0.22 (`DeviceLossScaler`): the scale's state
//! machine on the device takes burn-mpric-core's decisions, a skipped step leaves parameters,
//! optimizer state and scale bit-identical (Flex and Wgpu over lavapipe), the outcomes and
//! parameters equal the host-read path's, the optimizers follow Burn 0.22's, and a run
//! continued from saved state equals the uninterrupted one.

mod common;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::momentum::MomentumConfig;
use burn::optim::{
    AdamConfig, AdamWConfig, GradientsParams, ModuleOptimizer, MultiGradientsParams, SgdConfig,
};
use burn::tensor::{Bool, Device, Tensor, TensorData};
use burn_mpric_022::{
    DeviceLossScaler, DeviceOptimizer, DeviceRule, DeviceScale, LossScaler, StepError, autocast,
};
use burn_mpric_core::ResolvedPolicy;
use burn_mpric_core::scale::{
    DeviceAdamConfig, DeviceAdamWConfig, DeviceSgdConfig, DynamicLossScale, LossScale,
    LossScaleConfig, StepOutcome, UpdateRule,
};
use common::{Mlp, flex, matrix, param_bits, wgpu};

fn flag(value: bool, device: &Device) -> Tensor<1, Bool> {
    Tensor::from_bool(
        TensorData::from([value]),
        &device.clone().without_autodiff(),
    )
}

/// The presets, and variants that reach every branch of the rule.
fn configs() -> Vec<LossScaleConfig> {
    let traced = |c: LossScaleConfig| {
        c.with_initial_scale(128.0)
            .with_growth_interval(2)
            .with_min_scale(1.0)
    };
    vec![
        traced(LossScaleConfig::new()),
        traced(LossScaleConfig::flax()),
        traced(LossScaleConfig::deepspeed()),
        traced(LossScaleConfig::megatron()),
        traced(LossScaleConfig::deepspeed())
            .with_hysteresis(3)
            .with_rule(UpdateRule::DeepSpeed {
                consecutive_hysteresis: true,
            }),
        traced(LossScaleConfig::new()).with_max_scale(Some(512.0)),
        traced(LossScaleConfig::new())
            .with_min_scale(0.25)
            .with_hysteresis(2),
        LossScaleConfig::new()
            .with_initial_scale(2f32.powi(126))
            .with_growth_interval(1),
    ]
}

fn compare_traces(device: &Device, random: usize, len: usize) -> usize {
    let mut state = 0x9e37_79b9_u64;
    let mut traces = 0;
    for config in configs() {
        let mut lists = vec![vec![
            true, true, false, true, true, true, false, false, true, true,
        ]];
        for i in 0..random {
            let rate = [10, 40, 70][i % 3];
            lists.push(
                (0..len)
                    .map(|_| {
                        state = state
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1_442_695_040_888_963_407);
                        (state >> 33) % 100 >= rate
                    })
                    .collect(),
            );
        }
        for events in lists {
            let mut host: DynamicLossScale = config.init().unwrap();
            let mut on_device = DeviceScale::new(&LossScale::Dynamic(host), device).unwrap();
            for (step, &finite) in events.iter().enumerate() {
                host = host.adjust(finite);
                on_device = on_device.adjust(flag(finite, device));
                let (counter, left) = on_device.counters();
                let got = (
                    on_device.scale().into_scalar::<f32>().to_bits(),
                    counter.into_scalar::<i64>(),
                    left.into_scalar::<i64>(),
                );
                let want = (
                    host.loss_scale().to_bits(),
                    i64::from(host.counter()),
                    i64::from(host.hysteresis_left()),
                );
                assert_eq!(got, want, "{config:?}, step {step} of {events:?}");
            }
            traces += 1;
        }
    }
    traces
}

#[test]
fn the_device_state_machine_takes_the_core_decisions_on_flex_and_wgpu() {
    assert_eq!(compare_traces(&Device::flex(), 12, 30), 8 * 13);
    if let Some(device) = wgpu("the_device_state_machine_takes_the_core_decisions_on_wgpu") {
        assert_eq!(compare_traces(&device.without_autodiff(), 1, 10), 8 * 2);
    }
}

/// `(model, scaler, optimizer)` for one step of `policy`; the batch is poisoned with a NaN
/// at the steps in `poisoned`.
fn batch(step: usize, poison: bool, device: &Device) -> (Tensor<2>, Tensor<2>) {
    let x = matrix(100 + step as u64, 8, 8, device);
    let x = if poison {
        let mut data = x.to_data().convert::<f32>().try_to_vec::<f32>().unwrap();
        data[5] = f32::NAN;
        Tensor::<2>::from_data(TensorData::new(data, [8, 8]), device)
    } else {
        x
    };
    (x, matrix(200 + step as u64, 8, 4, device))
}

#[test]
fn outcomes_and_parameters_equal_the_host_read_path_bit_for_bit() {
    let device = flex();
    let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    let config = LossScaleConfig::new()
        .with_initial_scale(1024.0)
        .with_growth_interval(3);
    let poisoned = [2, 3, 7];
    let mut host_model = autocast(Mlp::new(8, 16, 4, &device), policy).unwrap();
    let mut device_model = host_model.clone();
    let mut host = LossScaler::dynamic(config).unwrap();
    let mut burn_sgd: ModuleOptimizer = SgdConfig::new().init();
    let mut on_device = DeviceLossScaler::new(LossScaler::dynamic(config).unwrap(), &device)
        .unwrap()
        .with_overflow_names(true);
    let mut device_sgd = DeviceOptimizer::new(DeviceSgdConfig::new());
    let mut host_outcomes = Vec::new();
    for step in 0..12 {
        let (x, y) = batch(step, poisoned.contains(&step), &device);
        let scaled = host.scale_loss(host_model.loss(x.clone(), y.clone(), &policy));
        let grads = GradientsParams::from_grads(scaled.backward(), &host_model);
        let (next, outcome) = host.step_with_loss(&mut burn_sgd, 0.05, host_model, grads, scaled);
        host_model = next;
        host_outcomes.push(outcome.unwrap());

        let scaled = on_device.scale_loss(device_model.loss(x, y, &policy));
        let grads = GradientsParams::from_grads(scaled.backward(), &device_model);
        let (next, learned) =
            on_device.step(&mut device_sgd, 0.05, device_model, grads, Some(scaled));
        device_model = next;
        assert!(learned.unwrap().is_empty());
    }
    let device_outcomes = on_device.sync().unwrap();
    assert_eq!(decisions(&device_outcomes), decisions(&host_outcomes));
    // The overflowed parameters too, named at the read.
    let named = |outcomes: &[StepOutcome]| -> Vec<_> {
        outcomes.iter().map(|o| o.overflow.clone()).collect()
    };
    assert_eq!(named(&device_outcomes), named(&host_outcomes));
    assert!(
        device_outcomes
            .iter()
            .filter(|o| o.is_skipped())
            .all(|o| o.overflow.as_ref().is_some_and(|o| !o.params.is_empty()))
    );
    assert_eq!(
        device_outcomes.iter().filter(|o| o.is_skipped()).count(),
        poisoned.len()
    );
    assert_eq!(param_bits(&device_model), param_bits(&host_model));
    assert_eq!(on_device.host().to_record(), host.to_record());
}

/// `grads` split in two shards that sum to it exactly (each gradient halved), the second
/// one made from `second` instead where given.
fn halves<M: Module>(
    model: &M,
    mut grads: GradientsParams,
    mut second: Option<GradientsParams>,
) -> [GradientsParams; 2] {
    struct Split<'a> {
        grads: &'a mut GradientsParams,
        second: Option<&'a mut GradientsParams>,
        out: [GradientsParams; 2],
    }
    impl ModuleVisitor for Split<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let Some(grad) = self.grads.remove::<D>(param.id) else {
                return;
            };
            let other = match &mut self.second {
                Some(second) => second.remove::<D>(param.id).unwrap(),
                None => grad.clone(),
            };
            self.out[0].register::<D>(param.id, grad.mul_scalar(0.5));
            self.out[1].register::<D>(param.id, other.mul_scalar(0.5));
        }
    }
    let mut split = Split {
        grads: &mut grads,
        second: second.as_mut(),
        out: [GradientsParams::new(), GradientsParams::new()],
    };
    model.visit(&mut split);
    split.out
}

#[test]
fn sharded_steps_equal_steps_over_the_summed_gradients_and_skip_together() {
    let device = flex();
    let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    let config = LossScaleConfig::new()
        .with_initial_scale(1024.0)
        .with_growth_interval(2);
    // With the overflowed parameters named: a shard's names are its parameter's.
    let scaler = || {
        DeviceLossScaler::new(LossScaler::dynamic(config).unwrap(), &device)
            .unwrap()
            .with_overflow_names(true)
    };
    let (mut whole_scaler, mut sharded_scaler) = (scaler(), scaler());
    let mut whole_model = autocast(Mlp::new(8, 16, 4, &device), policy).unwrap();
    let mut sharded_model = whole_model.clone();
    let mut whole_optim = DeviceOptimizer::new(DeviceAdamConfig::new());
    let mut sharded_optim = DeviceOptimizer::new(DeviceAdamConfig::new());
    let inner = device.clone().without_autodiff();
    // Step 2: every shard overflows; step 4: only the second one does.
    for step in 0..7 {
        let poison = step == 2 || step == 4;
        let (x, y) = batch(step, poison, &device);
        let scaled = whole_scaler.scale_loss(whole_model.loss(x, y, &policy));
        let grads = GradientsParams::from_grads(scaled.backward(), &whole_model);
        let (next, learned) = whole_scaler.step(
            &mut whole_optim,
            1e-2,
            whole_model,
            grads,
            None::<Tensor<1>>,
        );
        whole_model = next;
        learned.unwrap();

        let (x, y) = batch(step, step == 2, &device);
        let scaled = sharded_scaler.scale_loss(sharded_model.loss(x, y, &policy));
        let grads = GradientsParams::from_grads(scaled.backward(), &sharded_model);
        let second = (step == 4).then(|| {
            let (x, y) = batch(step, true, &device);
            let poisoned = sharded_scaler.scale_loss(sharded_model.loss(x, y, &policy));
            GradientsParams::from_grads(poisoned.backward(), &sharded_model)
        });
        let [a, b] = halves(&sharded_model, grads, second);
        let shards = MultiGradientsParams {
            grads: vec![(a, inner.clone()), (b, inner.clone())],
        };
        let (next, learned) = sharded_scaler.step_multi(
            &mut sharded_optim,
            1e-2,
            sharded_model,
            shards,
            None::<Tensor<1>>,
        );
        sharded_model = next;
        learned.unwrap();
    }
    let (whole, sharded) = (whole_scaler.sync().unwrap(), sharded_scaler.sync().unwrap());
    assert_eq!(sharded, whole);
    let skipped: Vec<usize> = (0..7).filter(|&i| sharded[i].is_skipped()).collect();
    assert_eq!(skipped, vec![2, 4]);
    assert!(skipped.iter().all(|&i| {
        sharded[i]
            .overflow
            .as_ref()
            .is_some_and(|o| !o.params.is_empty())
    }));
    assert_eq!(param_bits(&sharded_model), param_bits(&whole_model));
    assert_eq!(state_bits(&sharded_optim), state_bits(&whole_optim));
}

/// What an outcome decided, with the loss as bits (a poisoned step's loss is NaN).
fn decisions(outcomes: &[StepOutcome]) -> Vec<impl PartialEq + std::fmt::Debug> {
    outcomes
        .iter()
        .map(|o| {
            (
                o.action,
                o.scale_used,
                o.next_scale,
                o.loss.map(f32::to_bits),
                o.stats,
            )
        })
        .collect()
}

fn state_bits<R: DeviceRule>(optim: &DeviceOptimizer<R>) -> Vec<(String, Vec<Vec<u32>>)> {
    let mut state: Vec<_> = optim
        .to_record()
        .into_iter()
        .map(|(id, tensors)| {
            let bits = tensors
                .into_iter()
                .map(|t| {
                    let values = t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap();
                    values.iter().map(|v| v.to_bits()).collect()
                })
                .collect();
            (id.to_string(), bits)
        })
        .collect();
    state.sort();
    state
}

fn skipped_step_changes_nothing<R: DeviceRule>(device: &Device, rule: R) {
    let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    let mut model = autocast(Mlp::new(8, 16, 4, device), policy).unwrap();
    let mut optim = DeviceOptimizer::new(rule);
    let config = LossScaleConfig::new().with_initial_scale(256.0);
    let mut scaler = DeviceLossScaler::new(LossScaler::dynamic(config).unwrap(), device).unwrap();
    let take = |model: Mlp,
                step: usize,
                poison: bool,
                scaler: &mut DeviceLossScaler,
                optim: &mut DeviceOptimizer<R>| {
        let (x, y) = batch(step, poison, device);
        let scaled = scaler.scale_loss(model.loss(x, y, &policy));
        let grads = GradientsParams::from_grads(scaled.backward(), &model);
        let (model, learned) = scaler.step(optim, 1e-2, model, grads, Some(scaled));
        learned.unwrap();
        model
    };
    for step in 0..3 {
        model = take(model, step, false, &mut scaler, &mut optim);
    }
    let before = (param_bits(&model), state_bits(&optim));
    let scale = scaler.device_scale().scale().into_scalar::<f32>();
    let model = take(model, 3, true, &mut scaler, &mut optim);
    assert_eq!(param_bits(&model), before.0, "parameters");
    assert_eq!(state_bits(&optim), before.1, "optimizer state");
    assert_eq!(
        scaler.device_scale().scale().into_scalar::<f32>(),
        scale / 2.0
    );
    let outcomes = scaler.sync().unwrap();
    assert_eq!(outcomes.len(), 4);
    assert!(outcomes[..3].iter().all(StepOutcome::is_applied));
    assert!(outcomes[3].is_skipped());
    let trained = take(model, 4, false, &mut scaler, &mut optim);
    assert_ne!(param_bits(&trained), before.0);
}

#[test]
fn a_skipped_step_leaves_parameters_state_and_scale_bit_identical_on_flex_and_wgpu() {
    let device = flex();
    skipped_step_changes_nothing(&device, DeviceAdamConfig::new());
    skipped_step_changes_nothing(&device, DeviceAdamWConfig::new());
    skipped_step_changes_nothing(
        &device,
        DeviceSgdConfig::new().with_momentum(0.9, 0.1, true),
    );
    if let Some(device) = wgpu("a_skipped_step_leaves_everything_bit_identical_on_wgpu") {
        skipped_step_changes_nothing(&device, DeviceAdamConfig::new());
    }
}

fn largest_gap<R: DeviceRule>(mut burn_optim: ModuleOptimizer, rule: R, steps: usize) -> f32 {
    let device = flex();
    let policy: ResolvedPolicy = "f32".parse().unwrap();
    let mut ours = Mlp::new(8, 16, 4, &device);
    let mut theirs = ours.clone();
    let mut optim = DeviceOptimizer::new(rule);
    for step in 0..steps {
        let (x, y) = batch(step, false, &device);
        let loss = theirs.loss(x.clone(), y.clone(), &policy);
        let grads = GradientsParams::from_grads(loss.backward(), &theirs);
        theirs = burn_optim.step(1e-2, theirs, grads);
        let loss = ours.loss(x, y, &policy);
        let grads = GradientsParams::from_grads(loss.backward(), &ours);
        ours = optim.step(1e-2, ours, grads, flag(true, &device));
    }
    param_bits(&ours)
        .into_iter()
        .zip(param_bits(&theirs))
        .flat_map(|(a, b)| {
            a.into_iter()
                .zip(b)
                .map(|(a, b)| (f32::from_bits(a) - f32::from_bits(b)).abs())
                .collect::<Vec<_>>()
        })
        .fold(0.0, f32::max)
}

#[test]
fn the_device_optimizers_follow_burns_adam_adamw_and_sgd() {
    let steps = 30;
    let adam = largest_gap(
        AdamConfig::new()
            .with_weight_decay(Some(burn::optim::decay::WeightDecayConfig::new(1e-3)))
            .init(),
        DeviceAdamConfig::new().with_weight_decay(1e-3),
        steps,
    );
    let adamw = largest_gap(
        AdamWConfig::new().with_weight_decay(1e-2).init(),
        DeviceAdamWConfig::new().with_weight_decay(1e-2),
        steps,
    );
    let sgd = largest_gap(
        SgdConfig::new()
            .with_momentum(Some(
                MomentumConfig::new()
                    .with_momentum(0.9)
                    .with_dampening(0.1)
                    .with_nesterov(true),
            ))
            .init(),
        DeviceSgdConfig::new().with_momentum(0.9, 0.1, true),
        steps,
    );
    for (name, gap) in [("adam", adam), ("adamw", adamw), ("sgd", sgd)] {
        assert!(gap < 1e-5, "{name}: parameters differ by {gap}");
    }
    assert_eq!(
        largest_gap(SgdConfig::new().init(), DeviceSgdConfig::new(), steps),
        0.0
    );
}

#[test]
fn a_run_continued_from_saved_state_equals_the_uninterrupted_run() {
    let device = flex();
    let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    let config = LossScaleConfig::new()
        .with_initial_scale(512.0)
        .with_growth_interval(2);
    let poisoned = [1, 5, 6];
    let run = |mut model: Mlp,
               scaler: &mut DeviceLossScaler,
               optim: &mut DeviceOptimizer<DeviceAdamConfig>,
               range: std::ops::Range<usize>| {
        for step in range {
            let (x, y) = batch(step, poisoned.contains(&step), &device);
            let scaled = scaler.scale_loss(model.loss(x, y, &policy));
            let grads = GradientsParams::from_grads(scaled.backward(), &model);
            let (next, learned) = scaler.step(optim, 1e-2, model, grads, Some(scaled));
            model = next;
            learned.unwrap();
        }
        model
    };
    let fresh = || {
        (
            DeviceLossScaler::new(LossScaler::dynamic(config).unwrap(), &device).unwrap(),
            DeviceOptimizer::new(DeviceAdamConfig::new()),
        )
    };
    let start = autocast(Mlp::new(8, 16, 4, &device), policy).unwrap();
    let (mut scaler, mut optim) = fresh();
    let whole = run(start.clone(), &mut scaler, &mut optim, 0..10);
    let whole_outcomes = scaler.sync().unwrap();

    let dir = std::env::temp_dir().join(format!("mpric-022-device-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (mut scaler, mut optim) = fresh();
    let half = run(start, &mut scaler, &mut optim, 0..4);
    let mut outcomes = scaler.sync().unwrap();
    scaler.host().save_file(dir.join("scaler.json")).unwrap();
    let record = optim.to_record();
    drop((scaler, optim));
    let mut scaler = DeviceLossScaler::new(
        LossScaler::load_file(dir.join("scaler.json")).unwrap(),
        &device,
    )
    .unwrap();
    let mut optim = DeviceOptimizer::new(DeviceAdamConfig::new()).load_record(record);
    let resumed = run(half, &mut scaler, &mut optim, 4..10);
    outcomes.extend(scaler.sync().unwrap());
    std::fs::remove_dir_all(&dir).ok();

    assert_eq!(param_bits(&resumed), param_bits(&whole));
    assert_eq!(decisions(&outcomes), decisions(&whole_outcomes));
    assert_eq!(outcomes.iter().filter(|o| o.is_skipped()).count(), 3);
}

#[test]
fn a_stall_stops_the_run_at_the_sync_that_reads_it() {
    let device = flex();
    let policy: ResolvedPolicy = "f32".parse().unwrap();
    let mut model = Mlp::new(8, 16, 4, &device);
    let mut optim = DeviceOptimizer::new(DeviceSgdConfig::new());
    let host = LossScaler::default().with_max_consecutive_skips(3);
    let mut scaler = DeviceLossScaler::new(host, &device).unwrap();
    for step in 0..5 {
        let (x, y) = batch(step, step >= 1, &device);
        let scaled = scaler.scale_loss(model.loss(x, y, &policy));
        let grads = GradientsParams::from_grads(scaled.backward(), &model);
        let (next, learned) = scaler.step(&mut optim, 1e-2, model, grads, Some(scaled));
        model = next;
        assert!(learned.unwrap().is_empty());
    }
    match scaler.sync() {
        Err(StepError::Stalled { max, outcome }) => {
            assert_eq!(max, 3);
            assert_eq!(outcome.stats.consecutive_skipped, 3);
            assert_eq!(outcome.stats.steps, 4, "the third skip in a row was step 4");
        }
        other => panic!("expected a stall, got {other:?}"),
    }
    assert_eq!(
        scaler.host().stats().steps,
        5,
        "every pending step is counted"
    );
}

#[test]
fn steps_without_gradients_count_as_finite_on_the_device_as_on_the_host() {
    let device = flex();
    let mut model = Mlp::new(8, 16, 4, &device);
    let mut optim = DeviceOptimizer::new(DeviceSgdConfig::new());
    let config = LossScaleConfig::new()
        .with_initial_scale(4.0)
        .with_growth_interval(1);
    let mut scaler = DeviceLossScaler::new(LossScaler::dynamic(config).unwrap(), &device).unwrap();
    for _ in 0..3 {
        let (next, learned) =
            scaler.step::<_, _, 1>(&mut optim, 1e-2, model, GradientsParams::new(), None);
        model = next;
        assert!(learned.unwrap().is_empty());
    }
    let outcomes = scaler.sync().unwrap();
    assert!(outcomes.iter().all(StepOutcome::is_applied));
    assert_eq!(scaler.host().scale(), 32.0);
    assert_eq!(scaler.device_scale().scale().into_scalar::<f32>(), 32.0);
    let _ = model;
}
