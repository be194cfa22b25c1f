//! The training run: its options ([`TrainOptions`]), what it did ([`Summary`]), and its loop:
//! `Autodiff<MixedPrecision<B>>`, loss scaling with step skipping, the held-out evaluation,
//! reports and checkpoints at their steps, and exact resume. A step's arithmetic is in
//! `step.rs`, the loss scaling whichever way it reads (host or device) in `scaling.rs`, the
//! rows, the divergence rule and the scheduled save in `history.rs`, what the run says while
//! it runs in `progress.rs`, its reports in `report.rs`.

use std::path::Path;
use std::time::Instant;

use burn::optim::Optimizer;
use burn::tensor::backend::Backend;
use burn_mpric::scale::{LossScaler, StepOutcome};
use burn_mpric::{FloatDType, MixedPrecision, MpDevice, Policy};

use crate::backend::dispatch;
use crate::checkpoint::{self, Checkpoint, TrainState};
use crate::data::Sampler;
use crate::error::Error;
use crate::models::Model;
use crate::optim::{Ad, DeviceOptim, OptimizerTask, stored};
use crate::plan::Plan;
use crate::recipe::BackendConfig;
use crate::report::metrics::{EvalRow, StepRow};
use crate::run::history::History;
use crate::run::lock::RunLock;
use crate::run::options::{Summary, TrainOptions};
use crate::run::processes::{self, Link, Listening, Processes};
use crate::run::resume;
use crate::run::scaling::{OnDevice, Scaling, StepInfo};
use crate::run::step::{Peers, forward_backward, skip_cause};

/// Trains a plan: a fresh run, or (with `resume`) the continuation of the run in the output
/// folder, which gives bit-identical results to an uninterrupted run.
///
/// ```
/// use burn_mpric_train::{Plan, TrainOptions, train};
///
/// let output = std::env::temp_dir().join(format!("mpric-doc-train-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&output);
/// let overrides = [format!("output={}", output.display()), "steps=40".into()];
/// let recipe = concat!(env!("CARGO_MANIFEST_DIR"), "/../../recipes/quickstart.toml");
/// let plan = Plan::load(recipe.as_ref(), &overrides)?;
///
/// // Stop half-way, then resume: the result is the 40-step run.
/// let half = train(&plan, &TrainOptions { until: Some(20), ..Default::default() })?;
/// assert_eq!((half.step, half.total_steps), (20, 40));
/// let rest = train(&plan, &TrainOptions { resume: true, ..Default::default() })?;
/// assert_eq!((rest.start_step, rest.step), (20, 40));
///
/// // A fresh run into a folder that holds a run needs `overwrite`.
/// assert!(train(&plan, &TrainOptions::default()).is_err());
/// # std::fs::remove_dir_all(&output).unwrap();
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
pub fn train(plan: &Plan, options: &TrainOptions) -> Result<Summary, Error> {
    let output = plan.recipe.output.clone();
    // This process's devices: in a multi-process run, its share of the recipe's.
    let backend = match &options.processes {
        Some(p) => {
            let own = p.own_devices(&plan.recipe.backend.device_list())?;
            p.fits(own.len(), plan.recipe.batch_size)?;
            BackendConfig {
                device: 0,
                devices: Some(own),
                ..plan.recipe.backend.clone()
            }
        }
        None => plan.recipe.backend.clone(),
    };
    // Rank 0 listens from here on, so that the others can connect while it gets ready.
    let listening = options
        .processes
        .as_ref()
        .map(Listening::bind)
        .transpose()?;
    // One writer per output folder: in a multi-process run, rank 0, which holds the lock
    // until the run returns; the other processes read a checkpoint at most.
    let writer = options.processes.as_ref().is_none_or(Processes::is_writer);
    let _lock = writer.then(|| RunLock::acquire(&output)).transpose()?;
    if writer {
        checkpoint::clean_temporaries(&output)?;
        checkpoint::preflight(&output)?;
    }
    let resume = match options.resume {
        true => Some(resumed_run(plan, options, writer, &backend)?),
        false => {
            if writer && let Some(found) = checkpoint::latest(&output)? {
                if !options.overwrite {
                    return Err(Error::OutputInUse {
                        path: output,
                        step: found.step,
                    });
                }
                clear_run(&output)?;
            }
            None
        }
    };
    let link = match (&options.processes, listening) {
        (Some(p), Some(listening)) => {
            let resumed = resume.as_ref().map(|(c, _)| c);
            let devices = backend.device_list().len();
            let identity =
                processes::identity(plan, resumed, options.until, devices, p.engine.reduction())?;
            Some(Link::join(p, listening, identity)?)
        }
        _ => None,
    };
    let task = Run {
        plan,
        options,
        resume,
        link: link.as_ref(),
    };
    let summary = dispatch(&backend, task).map_err(|e| e.in_file(&plan.label))??;
    // Only a process that finished says so; one that failed closes its connection, which
    // ends the others naming it.
    if let Some(link) = link {
        link.finish()?;
    }
    Ok(summary)
}

/// The checkpoint `--resume` continues from, refused when the run was trained by another
/// number of processes or devices per process than `backend` gives this one.
fn resumed_run(
    plan: &Plan,
    options: &TrainOptions,
    writer: bool,
    backend: &BackendConfig,
) -> Result<(Checkpoint, TrainState), Error> {
    let resumed = resume::choose(plan, writer)?;
    // Said even when quiet: the run continues from an older step than the newest folder.
    for aside in &resumed.set_aside {
        eprintln!(
            "warning: {}; set aside as {}; resuming from step {}",
            aside.reason,
            aside.moved_to.display(),
            resumed.checkpoint.step
        );
    }
    let state = &resumed.state;
    // A multi-process checkpoint without the devices per process comes from processes
    // that each drove all of the recipe's devices.
    let devices = state.process_devices.or_else(|| {
        state
            .processes
            .map(|_| state.recipe.backend.device_list().len())
    });
    let was = (state.processes.unwrap_or(1), devices);
    let now = (
        options.processes.as_ref().map_or(1, |p| p.world),
        options
            .processes
            .as_ref()
            .map(|_| backend.device_list().len()),
    );
    if was != now {
        let show = |(world, devices): (usize, Option<usize>)| match devices {
            Some(d) => format!("{world} process(es) of {d} device(s)"),
            None => format!("{world} process(es)"),
        };
        return Err(Error::Resume(format!(
            "{}: the run was trained by {}, this one has {}; resume with --world {} and as many devices per process (the shards of each batch, and so the sums' rounding, depend on them)",
            resumed.checkpoint.dir.display(),
            show(was),
            show(now),
            was.0
        )));
    }
    Ok((resumed.checkpoint, resumed.state))
}

/// Removes a previous run's checkpoints, metrics and plots.
fn clear_run(output: &Path) -> Result<(), Error> {
    let dir = checkpoint::checkpoints_dir(output);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    }
    for name in ["metrics.csv", "metrics.json", "loss.svg", "loss_scale.svg"] {
        let path = output.join(name);
        if path.exists() {
            std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
        }
    }
    Ok(())
}

#[derive(Clone)]
pub(crate) struct Run<'a> {
    pub(crate) plan: &'a Plan,
    options: &'a TrainOptions,
    resume: Option<(Checkpoint, TrainState)>,
    /// This process's connection to the other processes of a multi-process run.
    pub(crate) link: Option<&'a Link>,
}

pub(crate) struct Loop<'a, B: Backend> {
    pub(crate) run: Run<'a>,
    /// The devices, the main one (which holds the model and the optimizer) first; one device
    /// per thread under [`Peers::Collective`].
    pub(crate) replicas: Vec<MpDevice<B>>,
    pub(crate) peers: Peers<'a>,
    /// The model before training, when it is given (`ddp` replicas share one, so that their
    /// parameters have the same ids); otherwise it is made from the recipe's seed.
    pub(crate) model: Option<Model<Ad<B>>>,
}

impl<B: Backend> OptimizerTask<B> for Loop<'_, B> {
    type Output = Result<Summary, Error>;

    fn run<O: Optimizer<Model<Ad<B>>, Ad<B>>>(self, optim: O) -> Self::Output {
        train_loop(self, optim, None)
    }

    fn run_device(self, optim: DeviceOptim<B>) -> Self::Output {
        let every = self.run.plan.recipe.sync_every.unwrap_or(1);
        let path = OnDevice {
            every: usize::try_from(every).unwrap_or(usize::MAX),
            step: |scaler, optim: &mut DeviceOptim<B>, lr, model, grads, loss| {
                scaler.step(&mut optim.0, lr, model, grads, Some(loss))
            },
        };
        train_loop(self, optim, Some(path))
    }
}

/// Where a run starts: its model, optimizer and scaler, the data's position, and the rows
/// and evaluations so far (a checkpoint's, or none).
struct Begin<B: Backend, O> {
    model: Model<Ad<B>>,
    optim: O,
    scaler: LossScaler,
    sampler: Sampler,
    history: (Vec<StepRow>, Vec<EvalRow>),
    step: u64,
}

impl<B: Backend, O: Optimizer<Model<Ad<B>>, Ad<B>>> Begin<B, O> {
    /// A fresh run from `model` and `optim`, or the run `resume` holds, loaded into them.
    fn new(
        plan: &Plan,
        resume: Option<(Checkpoint, TrainState)>,
        model: Model<Ad<B>>,
        optim: O,
        device: &MpDevice<B>,
    ) -> Result<Self, Error> {
        let recipe = &plan.recipe;
        let Some((found, state)) = resume else {
            return Ok(Self {
                model,
                optim,
                scaler: plan
                    .scaler(device.policy())
                    .map_err(|e| e.in_file(&plan.label))?,
                sampler: Sampler::new(&plan.data, recipe.seed, recipe.batch_size),
                history: (Vec::new(), Vec::new()),
                step: 0,
            });
        };
        let model = found.load_model(model, device)?;
        let optim = found.load_optimizer(optim, &optimizer_state_device(device)?)?;
        let scaler = LossScaler::from_record(state.scaler)
            .map_err(|e| Error::checkpoint(&found.state_path(), e))?;
        if !Sampler::fits(&plan.data, state.data) {
            return Err(Error::checkpoint(
                &found.state_path(),
                "the data position lies outside the training split",
            ));
        }
        Ok(Self {
            model,
            optim,
            scaler,
            sampler: Sampler::restore(&plan.data, state.data, recipe.batch_size),
            history: (state.steps, state.eval),
            step: state.step,
        })
    }
}

fn train_loop<B, O>(
    task: Loop<'_, B>,
    optim: O,
    on_device: Option<OnDevice<B, O>>,
) -> Result<Summary, Error>
where
    B: Backend,
    O: Optimizer<Model<Ad<B>>, Ad<B>>,
{
    let started = Instant::now();
    let Loop {
        run,
        replicas,
        peers,
        model,
    } = task;
    let Run {
        plan,
        options,
        resume,
        link: _,
    } = run;
    let (device, replicas) = (&replicas[0], replicas.as_slice());
    let recipe = &plan.recipe;
    let policy = device.policy();
    let writes = peers.is_main();
    if writes {
        std::fs::create_dir_all(&recipe.output).map_err(|e| Error::io(&recipe.output, e))?;
    }
    let model = model.unwrap_or_else(|| {
        Model::<Ad<B>>::init_seeded(&recipe.model, plan.data.dims(), recipe.seed, device)
    });
    let begin = Begin::new(plan, resume, model, optim, device)?;
    let (mut optim, mut sampler, start) = (begin.optim, begin.sampler, begin.step);
    // bf16 master weights are bf16 from the first step, and again after a checkpoint
    // (which loads at f32), so a resumed run sees the dtypes the uninterrupted one saw.
    let mut model = stored(recipe, begin.model);
    // The run stops itself at the recipe's `max_consecutive_skips`, with its reports written
    // and its last checkpoint named.
    let scaler = begin.scaler.with_max_consecutive_skips(0);
    let mut scaling =
        Scaling::new(scaler, on_device, device, start).map_err(|e| e.in_file(&plan.label))?;
    let total = plan.total_steps;
    let stop = options.until.map_or(total, |u| u.min(total)).max(start);
    let mut history = History::start(plan, options, policy, begin.history, start, writes)?;

    for step in start + 1..=stop {
        let t0 = Instant::now();
        let items = sampler.next_items();
        let predictions = plan.data.predictions(items.len());
        let lr = recipe.schedule.lr(recipe.optimizer.lr(), step, total);
        let scale = |loss| scaling.scale_loss(loss);
        let own = forward_backward(plan, &model, &scale, &items, replicas, peers)?;
        let grads = match peers {
            Peers::Processes(link) => link.sum(step, &model, device, own)?,
            _ => own,
        };
        let scheduled = step == total
            || recipe
                .checkpoint_every
                .is_some_and(|every| step % every == 0);
        let epoch = sampler.position().epoch;
        let info = || StepInfo {
            step,
            epoch,
            lr,
            predictions,
            took: t0.elapsed(),
        };
        // One process: a skipped step's batch runs once more at the probe's scale, to tell a
        // range problem from one no scale fixes.
        let probe = |model: &Model<Ad<B>>, outcome: &StepOutcome| match peers {
            Peers::Local if outcome.is_skipped() => {
                skip_cause(plan, model, &items, replicas, peers, outcome, step).map(Some)
            }
            _ => Ok(None),
        };
        let read_all = scheduled || step == stop;
        let (next, decided) =
            scaling.step(&mut optim, lr, model, grads, &info, read_all, peers, &probe)?;
        model = next;
        history.bar.inc(1);
        let read = !decided.is_empty();
        let mut stop_reason = history.record(decided, &model, &scaling)?;
        // The device path: the parameters as of this step, once per read.
        if read && stop_reason.is_none() {
            stop_reason = scaling.check_read(step, &model)?;
        }
        // Every replica finds the same reason at the same step (they hold the same values).
        if let Some((at, reason)) = stop_reason {
            return Err(history.diverged(at, reason));
        }
        // The first replica evaluates and writes; under `ddp` the others wait for it here.
        let written = match writes && (scheduled || step == stop) {
            true => history.save(
                step, scheduled, &model, &optim, &scaling, &sampler, replicas,
            ),
            false => Ok(()),
        };
        #[cfg(feature = "ddp")]
        if let Peers::Collective { turn, .. } = peers
            && turn.end_step(written.is_err())
            && written.is_ok()
        {
            return Err(Error::Internal(
                "stopped: the first replica failed at this step".into(),
            ));
        }
        written?;
    }
    history.summary(start, stop, scaling.skipped(), started)
}

/// The device optimizer state is restored on. Burn's records restore every float at the
/// backend's default dtype, which the decorator creates at the param dtype. Under a pure half
/// policy part of Adam's state is f32 (its second moment is a square, computed at f32, whose
/// values f16 would flush to zero), so the state is restored at f32 there: exact values, but
/// the f16 part of it continues at f32, so a resumed pure-half run follows the uninterrupted
/// one to within f16 rounding rather than bit for bit. f32 params restore bit for bit.
fn optimizer_state_device<B: Backend>(device: &MpDevice<B>) -> Result<MpDevice<B>, Error> {
    let policy = device.policy();
    if policy.param() == FloatDType::F32 {
        return Ok(device.clone());
    }
    let wide = Policy::from(policy).with_param(FloatDType::F32);
    MixedPrecision::<B>::device(device.inner().clone(), wide)
        .map_err(|e| Error::Internal(format!("the optimizer-state device: {e}")))
}
