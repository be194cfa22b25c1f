//! The loss scaler's device path (`burn_mpric_scale::DeviceLossScaler`) under the decorator:
//! the scale's state machine on the device takes burn-mpric-core's decisions, an applied step
//! reads nothing on the host, a skipped step leaves parameters, optimizer state and scale
//! bit-identical (Flex and Wgpu over lavapipe), the outcomes equal the host-read path's, the
//! optimizers follow Burn's, and a run resumed from files equals the uninterrupted one.

use burn::backend::{Autodiff, Flex, Wgpu};
use burn::module::{AutodiffModule, Module, ModuleVisitor, Param};
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::optim::momentum::MomentumConfig;
use burn::optim::{
    AdamConfig, AdamWConfig, GradientsParams, MultiGradientsParams, Optimizer, SgdConfig,
};
use burn::prelude::DeviceOps;
use burn::record::{BinFileRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Bool, Tensor, TensorData};
use burn_mpric::instrument::{Instrumented, record};
use burn_mpric::{MixedPrecision, Policy};
use burn_mpric_scale::{
    DeviceAdamConfig, DeviceAdamWConfig, DeviceLossScaler, DeviceOptimizer, DeviceOptimizerRecord,
    DeviceRule, DeviceScale, DeviceSgdConfig, DynamicLossScale, LossScale, LossScaleConfig,
    LossScaler, LossScalerRecord, MAX_PENDING_STEPS, StepError, StepOutcome, UpdateRule,
};

#[derive(Module, Debug)]
struct Net<B: Backend> {
    first: Linear<B>,
    norm: LayerNorm<B>,
    last: Linear<B>,
}

impl<B: Backend> Net<B> {
    fn new(device: &B::Device) -> Self {
        let net = Self {
            first: LinearConfig::new(4, 8).init(device),
            norm: LayerNormConfig::new(8).init(device),
            last: LinearConfig::new(8, 2).init(device),
        };
        // Burn initializes parameters lazily, and each clone of an uninitialized one on its
        // own: initialize them once, so that clones start from the same values.
        params(&net);
        net
    }

    /// A loss over a fixed batch; `poison` multiplies it by infinity (every gradient then
    /// overflows, as an f16 overflow would make them).
    fn loss(&self, step: usize, poison: bool) -> Tensor<B, 1> {
        let device = self.first.weight.device();
        let values: Vec<f32> = (0..12)
            .map(|i| ((i * 7 + step * 3) % 11) as f32 * 0.2 - 1.0)
            .collect();
        let x = Tensor::<B, 2>::from_data(TensorData::new(values, [3, 4]), &device);
        let y = self
            .last
            .forward(self.norm.forward(self.first.forward(x).tanh()));
        let loss = y.square().mean();
        if poison {
            loss.mul_scalar(f32::INFINITY)
        } else {
            loss
        }
    }
}

/// Every float parameter's values, in visiting order.
fn params<B: Backend, M: Module<B>>(module: &M) -> Vec<TensorData> {
    struct Collect(Vec<TensorData>);
    impl<B: Backend> ModuleVisitor<B> for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0.push(param.val().into_data());
        }
    }
    let mut collect = Collect(Vec::new());
    module.visit(&mut collect);
    collect.0
}

fn optimizer_state<B: Backend>(record: DeviceOptimizerRecord<B>) -> Vec<(String, Vec<TensorData>)> {
    let mut state: Vec<_> = record
        .into_iter()
        .map(|(id, tensors)| {
            (
                id.to_string(),
                tensors.into_iter().map(|t| t.into_data()).collect(),
            )
        })
        .collect();
    state.sort_by(|a, b| a.0.cmp(&b.0));
    state
}

fn flag<B: Backend>(value: bool, device: &B::Device) -> Tensor<B, 1, Bool> {
    Tensor::from_bool(TensorData::from([value]), device)
}

/// The presets, and variants that reach every branch of the rules (clamps, hysteresis,
/// DeepSpeed's consecutive hysteresis, a growth past f32::MAX).
fn configs() -> Vec<LossScaleConfig> {
    let traced = |c: LossScaleConfig| {
        c.with_initial_scale(128.0)
            .with_growth_interval(2)
            .with_min_scale(1.0)
    };
    vec![
        traced(LossScaleConfig::new()),
        traced(LossScaleConfig::torch()),
        traced(LossScaleConfig::jmp()),
        traced(LossScaleConfig::eformer()),
        traced(LossScaleConfig::keras()),
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
        LossScaleConfig::flax().with_growth_interval(3),
    ]
}

/// The golden event list of docs/loss-scaling.md, then pseudo-random ones of several
/// overflow rates.
fn event_lists(random: usize, len: usize) -> Vec<Vec<bool>> {
    let mut lists = vec![vec![
        true, true, false, true, true, true, false, false, true, true,
    ]];
    let mut state = 0x2545_f491_u64;
    for i in 0..random {
        let rate = [5, 20, 50, 80][i % 4];
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
    lists
}

/// Runs each event list through the core and the device state machine side by side and
/// returns how many traces were compared.
fn compare_traces<B: Backend>(device: &B::Device, random: usize, len: usize) -> usize {
    let mut traces = 0;
    for config in configs() {
        for events in event_lists(random, len) {
            let mut host: DynamicLossScale = config.init().unwrap();
            let mut on_device = DeviceScale::<B>::new(&LossScale::Dynamic(host), device).unwrap();
            for (step, &finite) in events.iter().enumerate() {
                host = host.adjust(finite);
                on_device = on_device.adjust(flag::<B>(finite, device));
                let (counter, left) = on_device.counters();
                let got = (
                    on_device.scale().into_data().to_vec::<f32>().unwrap()[0].to_bits(),
                    counter.into_scalar().to_string(),
                    left.into_scalar().to_string(),
                );
                let want = (
                    host.loss_scale().to_bits(),
                    host.counter().to_string(),
                    host.hysteresis_left().to_string(),
                );
                assert_eq!(got, want, "{config:?}, step {step} of {events:?}");
            }
            traces += 1;
        }
    }
    traces
}

#[test]
fn the_device_state_machine_takes_the_core_decisions_bit_for_bit_on_flex() {
    let traces = compare_traces::<Flex>(&Default::default(), 24, 40);
    assert_eq!(traces, 13 * 25);
}

#[test]
fn the_device_state_machine_takes_the_core_decisions_on_wgpu() {
    let traces = compare_traces::<Wgpu>(&Default::default(), 1, 12);
    assert_eq!(traces, 13 * 2);
}

#[test]
fn factors_that_f32_cannot_hold_are_refused_with_the_reason() {
    let state = LossScale::dynamic(LossScaleConfig::new().with_backoff_factor(0.3)).unwrap();
    let err = DeviceScale::<Flex>::new(&state, &Default::default()).unwrap_err();
    assert!(matches!(err, StepError::NotOnDevice(_)));
    assert!(err.to_string().contains("backoff_factor 0.3"), "{err}");
}

type MpFlex = MixedPrecision<Flex>;

fn mixed_flex() -> burn::tensor::Device<MpFlex> {
    MpFlex::device(Default::default(), "mixed_f16".parse::<Policy>().unwrap()).unwrap()
}

/// One step of either path over `model`; the loss is poisoned at the `poisoned` steps.
fn losses(poisoned: &[usize], steps: usize) -> impl Iterator<Item = (usize, bool)> + '_ {
    (0..steps).map(move |step| (step, poisoned.contains(&step)))
}

#[test]
fn outcomes_and_parameters_equal_the_host_read_path_bit_for_bit() {
    type B = Autodiff<MpFlex>;
    let device = mixed_flex();
    let config = LossScaleConfig::new()
        .with_initial_scale(1024.0)
        .with_growth_interval(3);
    let poisoned = [2, 3, 7, 12];

    let mut host_model = Net::<B>::new(&device);
    let mut device_model = host_model.clone();
    let mut host = LossScaler::dynamic(config).unwrap();
    let mut burn_sgd = SgdConfig::new().init::<B, Net<B>>();
    let mut on_device = DeviceLossScaler::new(LossScaler::dynamic(config).unwrap(), &device)
        .unwrap()
        .with_overflow_names(true);
    let mut device_sgd = DeviceOptimizer::new(DeviceSgdConfig::new());

    let mut host_outcomes = Vec::new();
    for (step, poison) in losses(&poisoned, 16) {
        let scaled = host.scale_loss(host_model.loss(step, poison));
        let grads = GradientsParams::from_grads(scaled.backward(), &host_model);
        let (next, outcome) = host.step_with_loss(&mut burn_sgd, 0.05, host_model, grads, scaled);
        host_model = next;
        host_outcomes.push(outcome.unwrap());

        let scaled = on_device.scale_loss(device_model.loss(step, poison));
        let grads = GradientsParams::from_grads(scaled.backward(), &device_model);
        let (next, learned) =
            on_device.step(&mut device_sgd, 0.05, device_model, grads, Some(scaled));
        device_model = next;
        assert!(learned.unwrap().is_empty());
    }
    let device_outcomes = on_device.sync().unwrap();
    let decisions = |outcomes: &[StepOutcome]| -> Vec<_> {
        outcomes
            .iter()
            .map(|o| {
                (
                    o.action,
                    o.scale_used,
                    o.next_scale,
                    o.loss.map(f32::to_bits),
                    o.stats,
                    o.overflow.clone(),
                )
            })
            .collect()
    };
    // The overflowed parameters too, named at the read.
    assert_eq!(decisions(&device_outcomes), decisions(&host_outcomes));
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
    assert_eq!(params(&device_model), params(&host_model));
    assert_eq!(on_device.host().to_record(), host.to_record());
}

/// Takes `steps` steps on the device path, then one poisoned step, and checks that the
/// poisoned one changed nothing: parameters, optimizer state, the device's scale.
fn skipped_step_changes_nothing<B, R>(device: &burn::tensor::Device<B::InnerBackend>, rule: R)
where
    B: AutodiffBackend,
    R: DeviceRule,
{
    let mut model = Net::<B>::new(device);
    let mut optim = DeviceOptimizer::<R, B::InnerBackend>::new(rule);
    let config = LossScaleConfig::new().with_initial_scale(256.0);
    let mut scaler = DeviceLossScaler::new(LossScaler::dynamic(config).unwrap(), device).unwrap();
    let take = |model: Net<B>,
                step: usize,
                poison: bool,
                scaler: &mut DeviceLossScaler<_>,
                optim: &mut DeviceOptimizer<R, _>| {
        let scaled = scaler.scale_loss(model.loss(step, poison));
        let grads = GradientsParams::from_grads(scaled.backward(), &model);
        let (model, learned) = scaler.step(optim, 1e-2, model, grads, Some(scaled));
        learned.unwrap();
        model
    };
    for step in 0..3 {
        model = take(model, step, false, &mut scaler, &mut optim);
    }
    let before = (
        params(&model),
        optimizer_state(optim.to_record()),
        scaler.device_scale().scale().into_data(),
    );
    let (counter, _) = scaler.device_scale().counters();
    let counter_before = counter
        .into_data()
        .convert::<i64>()
        .to_vec::<i64>()
        .unwrap();

    let model = take(model, 3, true, &mut scaler, &mut optim);
    let after = (
        params(&model),
        optimizer_state(optim.to_record()),
        scaler.device_scale().scale().into_data(),
    );
    assert_eq!(after.0, before.0, "parameters");
    assert_eq!(after.1, before.1, "optimizer state");
    assert_ne!(after.2, before.2, "the skip backs the scale off");
    // The scale's own state moves by the core's rule: the growth counter starts again.
    let (counter, _) = scaler.device_scale().counters();
    assert_eq!(
        counter
            .into_data()
            .convert::<i64>()
            .to_vec::<i64>()
            .unwrap(),
        vec![0]
    );
    assert_ne!(counter_before, vec![0]);

    let outcomes = scaler.sync().unwrap();
    assert_eq!(outcomes.len(), 4);
    assert!(outcomes[..3].iter().all(StepOutcome::is_applied));
    assert!(outcomes[3].is_skipped());
    assert_eq!(outcomes[3].next_scale, 128.0);

    // The next healthy step trains again.
    let trained = take(model, 4, false, &mut scaler, &mut optim);
    assert_ne!(params(&trained), before.0);
}

#[test]
fn a_skipped_step_leaves_parameters_state_and_scale_bit_identical_on_flex() {
    let device = mixed_flex();
    skipped_step_changes_nothing::<Autodiff<MpFlex>, _>(&device, DeviceAdamConfig::new());
    skipped_step_changes_nothing::<Autodiff<MpFlex>, _>(&device, DeviceAdamWConfig::new());
    skipped_step_changes_nothing::<Autodiff<MpFlex>, _>(
        &device,
        DeviceSgdConfig::new().with_momentum(0.9, 0.1, true),
    );
}

#[test]
fn a_skipped_step_leaves_parameters_state_and_scale_bit_identical_on_wgpu() {
    type Mp = MixedPrecision<Wgpu>;
    let device = Mp::device(Default::default(), "mixed_f16".parse::<Policy>().unwrap())
        .expect("a Vulkan adapter with shaderFloat16 (install mesa-vulkan-drivers)");
    skipped_step_changes_nothing::<Autodiff<Mp>, _>(&device, DeviceAdamConfig::new());
    skipped_step_changes_nothing::<Autodiff<Mp>, _>(
        &device,
        DeviceSgdConfig::new().with_momentum(0.9, 0.0, false),
    );
}

/// Trains two copies of one model for `steps` steps, one with a Burn optimizer and one with
/// the device path's, and returns the largest difference between their parameters.
fn largest_gap<O, R>(mut burn_optim: O, rule: R, steps: usize) -> f32
where
    O: Optimizer<Net<Autodiff<Flex>>, Autodiff<Flex>>,
    R: DeviceRule,
{
    type B = Autodiff<Flex>;
    let device = Default::default();
    let mut ours = Net::<B>::new(&device);
    let mut theirs = ours.clone();
    let mut optim = DeviceOptimizer::<R, Flex>::new(rule);
    for step in 0..steps {
        let grads = GradientsParams::from_grads(theirs.loss(step, false).backward(), &theirs);
        theirs = burn_optim.step(1e-2, theirs, grads);
        let grads = GradientsParams::from_grads(ours.loss(step, false).backward(), &ours);
        ours = optim.step(1e-2, ours, grads, flag::<Flex>(true, &device));
    }
    params(&ours)
        .into_iter()
        .zip(params(&theirs))
        .flat_map(|(a, b)| {
            let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
            a.into_iter()
                .zip(b)
                .map(|(a, b)| (a - b).abs())
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
    // The betas' powers are multiplied step by step on the device and taken by `powi` on the
    // host: the last bits may differ, nothing more.
    for (name, gap) in [("adam", adam), ("adamw", adamw), ("sgd", sgd)] {
        assert!(gap < 1e-5, "{name}: parameters differ by {gap}");
    }
    // Plain SGD is the same arithmetic: bit for bit.
    assert_eq!(
        largest_gap(SgdConfig::new().init(), DeviceSgdConfig::new(), steps),
        0.0
    );
}

/// `grads` split in two shards that sum to it exactly (each gradient halved), the second
/// one made from `second` instead where given.
fn halves<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    mut grads: GradientsParams,
    second: Option<GradientsParams>,
) -> [GradientsParams; 2] {
    struct Split<'a> {
        grads: &'a mut GradientsParams,
        second: Option<&'a mut GradientsParams>,
        out: [GradientsParams; 2],
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Split<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let Some(grad) = self.grads.remove::<B::InnerBackend, D>(param.id) else {
                return;
            };
            let other = match &mut self.second {
                Some(second) => second.remove::<B::InnerBackend, D>(param.id).unwrap(),
                None => grad.clone(),
            };
            self.out[0].register(param.id, grad.mul_scalar(0.5));
            self.out[1].register(param.id, other.mul_scalar(0.5));
        }
    }
    let mut second = second;
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
    type B = Autodiff<MpFlex>;
    let device = mixed_flex();
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
    let mut whole_model = Net::<B>::new(&device);
    let mut sharded_model = whole_model.clone();
    let mut whole_optim = DeviceOptimizer::new(DeviceAdamConfig::new());
    let mut sharded_optim = DeviceOptimizer::new(DeviceAdamConfig::new());
    let id = device.to_id();
    // Step 2: every shard overflows; step 4: only the second one does.
    for step in 0..7 {
        let poison = step == 2 || step == 4;
        let scaled = whole_scaler.scale_loss(whole_model.loss(step, poison));
        let grads = GradientsParams::from_grads(scaled.backward(), &whole_model);
        let (next, learned) = whole_scaler.step(
            &mut whole_optim,
            1e-2,
            whole_model,
            grads,
            None::<Tensor<B, 1>>,
        );
        whole_model = next;
        learned.unwrap();

        let scaled = sharded_scaler.scale_loss(sharded_model.loss(step, step == 2));
        let grads = GradientsParams::from_grads(scaled.backward(), &sharded_model);
        let second = (step == 4).then(|| {
            let poisoned = sharded_scaler.scale_loss(sharded_model.loss(step, true));
            GradientsParams::from_grads(poisoned.backward(), &sharded_model)
        });
        let [a, b] = halves(&sharded_model, grads, second);
        let shards = MultiGradientsParams {
            grads: vec![(a, id), (b, id)],
        };
        let (next, learned) = sharded_scaler.step_multi(
            &mut sharded_optim,
            1e-2,
            sharded_model,
            shards,
            None::<Tensor<B, 1>>,
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
    assert_eq!(params(&sharded_model), params(&whole_model));
    assert_eq!(
        optimizer_state(sharded_optim.to_record()),
        optimizer_state(whole_optim.to_record())
    );
}

#[test]
fn an_applied_step_reads_nothing_on_the_host_and_a_sync_reads_once() {
    type Inner = MixedPrecision<Instrumented<Flex>>;
    type B = Autodiff<Inner>;
    let device = Inner::device(Default::default(), "mixed_f16".parse::<Policy>().unwrap()).unwrap();
    let mut model = Net::<B>::new(&device);
    let mut optim = DeviceOptimizer::new(DeviceAdamConfig::new());
    let mut scaler = DeviceLossScaler::new(LossScaler::default(), &device).unwrap();
    for step in 0..3 {
        let ((next, learned), ops) = record(|| {
            let scaled = scaler.scale_loss(model.loss(step, false));
            let grads = GradientsParams::from_grads(scaled.backward(), &model);
            scaler.step(&mut optim, 1e-3, model, grads, Some(scaled))
        });
        model = next;
        assert!(learned.unwrap().is_empty());
        let reads: Vec<_> = ops
            .iter()
            .filter(|op| op.op.ends_with("_into_data") || op.op == "tr_execute")
            .map(|op| op.op)
            .collect();
        assert_eq!(reads, Vec::<&str>::new(), "step {step} read the device");
        assert!(
            ops.len() > 50,
            "the step ran its ops through the logged backend"
        );
    }
    let (outcomes, ops) = record(|| scaler.sync());
    assert_eq!(outcomes.unwrap().len(), 3);
    let reads = ops
        .iter()
        .filter(|op| op.op.ends_with("_into_data") || op.op == "tr_execute")
        .count();
    assert_eq!(reads, 1, "one transaction for all pending steps");
}

#[test]
fn a_run_resumed_from_files_equals_the_uninterrupted_run_bit_for_bit() {
    type B = Autodiff<MpFlex>;
    let device = mixed_flex();
    let config = LossScaleConfig::new()
        .with_initial_scale(512.0)
        .with_growth_interval(2);
    let poisoned = [1, 5, 6];
    let fresh = || {
        (
            DeviceLossScaler::new(LossScaler::dynamic(config).unwrap(), &device).unwrap(),
            DeviceOptimizer::<_, MpFlex>::new(DeviceAdamConfig::new()),
        )
    };
    let run = |mut model: Net<B>,
               scaler: &mut DeviceLossScaler<MpFlex>,
               optim: &mut DeviceOptimizer<DeviceAdamConfig, MpFlex>,
               range: std::ops::Range<usize>| {
        for step in range {
            let scaled = scaler.scale_loss(model.loss(step, poisoned.contains(&step)));
            let grads = GradientsParams::from_grads(scaled.backward(), &model);
            let (next, learned) = scaler.step(optim, 1e-2, model, grads, Some(scaled));
            model = next;
            learned.unwrap();
        }
        model
    };
    let start = Net::<B>::new(&device);

    let (mut scaler, mut optim) = fresh();
    let whole = run(start.clone(), &mut scaler, &mut optim, 0..10);
    let whole_outcomes = scaler.sync().unwrap();

    // The first half, saved to files as a checkpoint would be (after a sync).
    let dir = std::env::temp_dir().join(format!("mpric-device-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let recorder = BinFileRecorder::<FullPrecisionSettings>::new();
    let (mut scaler, mut optim) = fresh();
    let half = run(start, &mut scaler, &mut optim, 0..4);
    let mut outcomes = scaler.sync().unwrap();
    recorder
        .record(half.clone().into_record(), dir.join("model"))
        .unwrap();
    recorder
        .record(optim.to_record(), dir.join("optim"))
        .unwrap();
    Recorder::<MpFlex>::record(&recorder, scaler.host().to_record(), dir.join("scaler")).unwrap();
    drop((half, scaler, optim));

    // A new process: everything from the files.
    let model =
        Net::<B>::new(&device).load_record(recorder.load(dir.join("model"), &device).unwrap());
    let optim_record: DeviceOptimizerRecord<MpFlex> =
        recorder.load(dir.join("optim"), &device).unwrap();
    let scaler_record: LossScalerRecord =
        Recorder::<MpFlex>::load(&recorder, dir.join("scaler"), &device).unwrap();
    let mut scaler =
        DeviceLossScaler::new(LossScaler::from_record(scaler_record).unwrap(), &device).unwrap();
    let mut optim = DeviceOptimizer::new(DeviceAdamConfig::new()).load_record(optim_record);
    let resumed = run(model, &mut scaler, &mut optim, 4..10);
    outcomes.extend(scaler.sync().unwrap());
    std::fs::remove_dir_all(&dir).ok();

    assert_eq!(params(&resumed), params(&whole));
    assert_eq!(outcomes, whole_outcomes);
    assert_eq!(outcomes.iter().filter(|o| o.is_skipped()).count(), 3);
}

#[test]
fn the_host_learns_one_step_behind_and_a_stall_stops_the_run_at_the_sync() {
    type B = Autodiff<Flex>;
    let device = Default::default();
    let mut model = Net::<B>::new(&device);
    let mut optim = DeviceOptimizer::new(DeviceSgdConfig::new());
    let host = LossScaler::default().with_max_consecutive_skips(3);
    let mut scaler = DeviceLossScaler::new(host, &device)
        .unwrap()
        .with_sync_every(2);
    let mut learned_per_step = Vec::new();
    for step in 0..8 {
        let poison = step >= 2;
        let scaled = scaler.scale_loss(model.loss(step, poison));
        let grads = GradientsParams::from_grads(scaled.backward(), &model);
        let (next, learned) = scaler.step(&mut optim, 1e-2, model, grads, Some(scaled));
        model = next;
        match learned {
            Ok(outcomes) => learned_per_step.push(outcomes.len()),
            Err(StepError::Stalled { max, outcome }) => {
                assert_eq!(max, 3);
                assert_eq!(outcome.stats.consecutive_skipped, 3);
                // Steps 2, 3 and 4 were skipped in a row; step 4 was read with step 5,
                // after step 6 was queued.
                assert_eq!(step, 6);
                assert_eq!(learned_per_step, vec![0, 0, 2, 0, 2, 0]);
                assert_eq!(scaler.pending(), 1, "the newest step stays on the device");
                return;
            }
            Err(other) => panic!("{other}"),
        }
    }
    panic!("the run did not stop: {learned_per_step:?}");
}

#[test]
fn steps_without_gradients_count_as_finite_on_the_device_as_on_the_host() {
    type B = Autodiff<Flex>;
    let device = Default::default();
    let mut model = Net::<B>::new(&device);
    let mut optim = DeviceOptimizer::new(DeviceSgdConfig::new());
    let config = LossScaleConfig::new()
        .with_initial_scale(4.0)
        .with_growth_interval(1);
    let mut scaler = DeviceLossScaler::new(LossScaler::dynamic(config).unwrap(), &device).unwrap();
    for _ in 0..3 {
        let (next, learned) =
            scaler.step::<B, _, _, 1>(&mut optim, 1e-2, model, GradientsParams::new(), None);
        model = next;
        assert!(learned.unwrap().is_empty());
    }
    // The sync checks the device's scale against the host's: both grew three times.
    let outcomes = scaler.sync().unwrap();
    assert!(outcomes.iter().all(StepOutcome::is_applied));
    assert_eq!(scaler.host().scale(), 32.0);
    assert_eq!(scaler.device_scale().scale().into_scalar(), 32.0);
    let _ = model;
}

#[test]
fn a_loop_that_never_syncs_keeps_a_bounded_number_of_steps_pending() {
    type B = Autodiff<Flex>;
    let device = Default::default();
    let mut model: Linear<B> = LinearConfig::new(1, 1).init(&device);
    let mut optim = DeviceOptimizer::new(DeviceSgdConfig::new());
    let mut scaler = DeviceLossScaler::new(LossScaler::default(), &device).unwrap();
    let mut learned = Vec::new();
    for _ in 0..=MAX_PENDING_STEPS {
        let loss = model.forward(Tensor::<B, 2>::ones([1, 1], &device)).sum();
        let scaled = scaler.scale_loss(loss);
        let grads = GradientsParams::from_grads(scaled.backward(), &model);
        let (next, outcomes) = scaler.step(&mut optim, 1e-6, model, grads, Some(scaled));
        model = next;
        learned.push(outcomes.unwrap().len());
    }
    // The step after the limit read all but itself, in one go.
    assert_eq!(learned.last(), Some(&MAX_PENDING_STEPS));
    assert!(learned[..MAX_PENDING_STEPS].iter().all(|n| *n == 0));
    assert_eq!(scaler.pending(), 1);
}

#[test]
fn half_parameters_keep_their_dtype_and_train_on_the_device_path() {
    type B = Autodiff<MpFlex>;
    let device = MpFlex::device(Default::default(), "pure_f16".parse::<Policy>().unwrap()).unwrap();
    let mut model = Net::<B>::new(&device);
    // The dtypes the parameters are stored at (what the host reads is the output dtype).
    let dtypes = |model: &Net<B>| {
        struct Dtypes(Vec<burn::tensor::DType>);
        impl ModuleVisitor<B> for Dtypes {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
                self.0.push(param.val().dtype());
            }
        }
        let mut seen = Dtypes(Vec::new());
        model.visit(&mut seen);
        seen.0
    };
    assert!(
        dtypes(&model)
            .iter()
            .all(|d| *d == burn::tensor::DType::F16)
    );
    let before = params(&model);
    let mut optim = DeviceOptimizer::new(DeviceAdamConfig::new());
    // A scale whose scaled gradients fit f16 whatever the random start (2^15 may not).
    let config = LossScaleConfig::new().with_initial_scale(64.0);
    let scaler = LossScaler::dynamic(config).unwrap();
    let mut scaler = DeviceLossScaler::new(scaler, &device).unwrap();
    for step in 0..3 {
        let scaled = scaler.scale_loss(model.loss(step, false));
        // The scaled loss is f32 whatever the parameters' dtype: 2^15 times a loss overflows f16.
        assert_eq!(scaled.dtype(), burn::tensor::DType::F32);
        let grads = GradientsParams::from_grads(scaled.backward(), &model);
        let (next, learned) = scaler.step(&mut optim, 1e-2, model, grads, Some(scaled));
        model = next;
        learned.unwrap();
    }
    let outcomes = scaler.sync().unwrap();
    assert!(outcomes.iter().all(StepOutcome::is_applied), "{outcomes:?}");
    assert!(
        dtypes(&model)
            .iter()
            .all(|d| *d == burn::tensor::DType::F16)
    );
    assert_ne!(params(&model), before);
    // The moments are kept at f32.
    let state = optimizer_state(optim.to_record());
    assert!(
        state
            .iter()
            .all(|(_, tensors)| tensors.iter().all(|t| t.dtype == burn::tensor::DType::F32))
    );
}

/// A stack of `layers` linear layers (two parameters each).
#[derive(Module, Debug)]
struct Stack<B: Backend> {
    layers: Vec<Linear<B>>,
}

impl<B: Backend> Stack<B> {
    fn new(layers: usize, device: &B::Device) -> Self {
        let layers = (0..layers)
            .map(|_| LinearConfig::new(8, 8).init(device))
            .collect();
        Self { layers }
    }

    fn loss(&self, device: &B::Device) -> Tensor<B, 1> {
        let x = Tensor::<B, 2>::ones([2, 8], device);
        self.layers
            .iter()
            .fold(x, |x, layer| layer.forward(x).tanh())
            .square()
            .mean()
    }
}

/// Flex with its ops recorded, for counting them.
type Counted = Instrumented<Flex>;

/// An applied step's flag on the counted backend.
fn applied_flag() -> Tensor<Counted, 1, Bool> {
    Tensor::from_bool(TensorData::from([true]), &Default::default())
}

/// A stack's gradients on the counted backend.
fn stack_grads(model: &Stack<Autodiff<Counted>>) -> GradientsParams {
    GradientsParams::from_grads(model.loss(&Default::default()).backward(), model)
}

/// The backend ops of the second optimizer step over a `layers`-layer stack: Burn's Adam,
/// and the device path's Adam with its flag.
fn optimizer_ops(layers: usize) -> (usize, usize) {
    type B = Autodiff<Counted>;
    let (device, flag, grads) = (Default::default(), applied_flag, stack_grads);

    let mut model = Stack::<B>::new(layers, &device);
    let mut burn_adam = AdamConfig::new().init::<B, Stack<B>>();
    let mut ours = model.clone();
    let mut device_adam = DeviceOptimizer::new(DeviceAdamConfig::new());
    let (mut burn_ops, mut our_ops) = (0, 0);
    for _ in 0..2 {
        let g = grads(&model);
        let (next, ops) = record(|| burn_adam.step(1e-3, model, g));
        (model, burn_ops) = (next, ops.len());
        let (g, applied) = (grads(&ours), flag());
        let (next, ops) = record(|| device_adam.step(1e-3, ours, g, applied));
        (ours, our_ops) = (next, ops.len());
    }
    (burn_ops, our_ops)
}

#[test]
fn the_device_path_runs_as_many_ops_per_parameter_as_burns_adam_plus_the_skip() {
    let (burn_small, ours_small) = optimizer_ops(2);
    let (burn_large, ours_large) = optimizer_ops(6);
    let added_params = 8;
    let burn_per_param = (burn_large - burn_small) as f64 / added_params as f64;
    let ours_per_param = (ours_large - ours_small) as f64 / added_params as f64;
    // Per parameter: Burn's elementwise update, and the gradient zeroed where the step is
    // skipped (a mask and its fill) with its reshapes; the step's coefficients (the skip,
    // the bias corrections) are computed once, whatever the parameter count.
    assert!(
        ours_per_param <= burn_per_param + 5.0,
        "{ours_per_param} ops per parameter against Burn's {burn_per_param}"
    );
    let fixed = ours_small as f64 - 4.0 * ours_per_param;
    assert!(
        fixed <= 25.0,
        "the step's coefficients cost {fixed} ops (measured on {ours_small})"
    );
}

/// Steps a 4-layer stack twice with `rule`, saves and loads the optimizer, and returns the
/// ops and parameters of one more step from the loaded optimizer and from the running one.
fn loaded_and_running<R: DeviceRule>(rule: R) -> [(usize, Vec<TensorData>); 2] {
    type B = Autodiff<Counted>;
    let (device, flag, grads) = (Default::default(), applied_flag, stack_grads);
    let mut model = Stack::<B>::new(4, &device);
    let mut optim = DeviceOptimizer::new(rule.clone());
    for _ in 0..2 {
        let g = grads(&model);
        model = optim.step(1e-3, model, g, flag());
    }
    let mut loaded = DeviceOptimizer::new(rule).load_record(optim.to_record());
    let (g, applied) = (grads(&model), flag());
    let (from_loaded, loaded_ops) = record(|| loaded.step(1e-3, model.clone(), g, applied));
    let (g, applied) = (grads(&model), flag());
    let (from_running, running_ops) = record(|| optim.step(1e-3, model, g, applied));
    [
        (loaded_ops.len(), params(&from_loaded)),
        (running_ops.len(), params(&from_running)),
    ]
}

#[test]
fn a_loaded_optimizer_computes_the_coefficients_once_as_before_the_save() {
    // Adam keeps a step count per parameter; plain SGD keeps nothing, and its parameters
    // still share one learning-rate coefficient after a load.
    let [loaded, running] = loaded_and_running(DeviceAdamConfig::new());
    assert_eq!(loaded, running);
    let [loaded, running] = loaded_and_running(DeviceSgdConfig::new());
    assert_eq!(loaded, running);
}

#[test]
fn the_coefficients_keep_f32_values_under_a_pure_bf16_policy() {
    // The decorator creates new float tensors at the policy's parameter dtype: a coefficient
    // created at bf16 would hold beta_2 = 0.999 as 1.0, and Adam's second moment would never
    // move.
    let device =
        MpFlex::device(Default::default(), "pure_bf16".parse::<Policy>().unwrap()).unwrap();
    let one = Tensor::<MpFlex, 1>::ones([1], &device).cast(burn::tensor::FloatDType::F32);
    let scalars = [one.clone(), one];
    let adam = DeviceAdamConfig::new();
    for applied in [true, false] {
        let flag = Tensor::<MpFlex, 1, Bool>::from_bool(TensorData::from([applied]), &device);
        let (c, next) = adam.coefficients(1e-3, &scalars, Some(&flag), &device);
        let values: Vec<f32> = c[..5]
            .iter()
            .map(|t| {
                assert_eq!(t.dtype(), burn::tensor::DType::F32);
                t.clone().into_scalar()
            })
            .collect();
        let expected = match applied {
            true => vec![1e-3, 0.9, 1.0 - 0.9, 0.999, 1.0 - 0.999],
            false => vec![0.0, 1.0, 0.0, 1.0, 0.0],
        };
        assert_eq!(values, expected);
        let powers: Vec<f32> = next.into_iter().map(Tensor::into_scalar).collect();
        let expected = match applied {
            true => vec![0.9, 0.999],
            false => vec![1.0, 1.0],
        };
        assert_eq!(powers, expected);
    }
}
