//! The training loop: `Autodiff<MixedPrecision<B>>`, loss scaling with step skipping,
//! metrics, plots and checkpoints, and exact resume.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use burn::module::{AutodiffModule, Module};
use burn::optim::{GradientsAccumulator, GradientsParams, Optimizer};
use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Tensor};
use burn_mpric::scale::{LossScaler, ProbeRead, SkipCause, StepOutcome, cast_grads_to_param_dtype};
use burn_mpric::{BurnDType, FloatDType, MixedPrecision, MpDevice, Policy, ResolvedPolicy};
use indicatif::{ProgressBar, ProgressStyle};

use crate::backend::dispatch;
use crate::checkpoint::{self, Checkpoint, STATE_FORMAT_VERSION, TrainState};
use crate::data::{Dataset, Sampler};
use crate::error::{Error, RecipeError};
use crate::models::Model;
use crate::optim::{Ad, OptimizerTask};
use crate::plan::Plan;
use crate::recipe::BackendConfig;
use crate::report::metrics::{self, EvalRow, MetricsFile, StepRow};
use crate::report::plot;
use crate::run::grads::StepGrads;
use crate::run::lock::RunLock;
use crate::run::processes::{self, Link, Listening, Processes};
use crate::run::resume;

/// How to run a plan.
///
/// ```
/// use burn_mpric_train::TrainOptions;
///
/// let options = TrainOptions { until: Some(10), ..TrainOptions::default() };
/// assert!(!options.resume);
/// ```
#[derive(Debug, Clone, Default)]
pub struct TrainOptions {
    /// Continue from the latest checkpoint in the output folder.
    pub resume: bool,
    /// Start over in an output folder that already holds a run (its checkpoints and metrics
    /// are removed).
    pub overwrite: bool,
    /// Stop after this step (a checkpoint is written there); `--resume` continues later.
    pub until: Option<u64>,
    /// Show a progress bar when stderr is a terminal.
    pub progress: bool,
    /// Print a line to stderr at each checkpoint (when no progress bar is shown).
    pub log: bool,
    /// This process's place in a multi-process run; `None` for a run of one process.
    pub processes: Option<Processes>,
}

/// What a run did.
///
/// ```
/// use burn_mpric_train::{Plan, Recipe, train};
///
/// let mut recipe = Recipe::example();
/// recipe.output = std::env::temp_dir().join(format!("mpric-doc-summary-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&recipe.output);
/// let summary = train(&Plan::new(recipe.clone(), "r")?, &Default::default())?;
/// assert_eq!((summary.start_step, summary.step, summary.total_steps), (0, 20, 20));
/// assert_eq!(summary.skipped, 0);
/// # std::fs::remove_dir_all(&recipe.output).unwrap();
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Summary {
    /// The output folder.
    pub output: PathBuf,
    /// The policy as the device resolved it.
    pub policy: ResolvedPolicy,
    /// The step the run started from (0, or the checkpoint it resumed).
    pub start_step: u64,
    /// Steps done (the run's position now).
    pub step: u64,
    /// Steps of the whole run.
    pub total_steps: u64,
    /// The last step's metrics.
    pub last: Option<StepRow>,
    /// The last held-out evaluation.
    pub eval: Option<EvalRow>,
    /// Skipped steps in the whole run.
    pub skipped: u64,
    /// Mean training loss over the last 10% of the steps done (at least one step).
    pub tail_loss: Option<f32>,
    /// Wall time of this invocation, seconds.
    pub wall_s: f64,
}

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
    let resume = if options.resume {
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
        Some((resumed.checkpoint, resumed.state))
    } else {
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

/// Where the replicas of a collective run meet at the end of each step, after the first one
/// has written its reports: a failure there stops every replica at that step (a replica that
/// went on alone would wait in the next all-reduce forever).
#[cfg_attr(not(feature = "ddp"), allow(dead_code))]
pub(crate) struct StepTurn {
    barrier: Barrier,
    failed: AtomicBool,
}

impl StepTurn {
    /// A meeting point for `count` replicas.
    #[cfg_attr(not(feature = "ddp"), allow(dead_code))]
    pub(crate) fn new(count: usize) -> Self {
        Self {
            barrier: Barrier::new(count),
            failed: AtomicBool::new(false),
        }
    }

    /// Waits for every replica; `failed` says whether this one failed. Returns whether any
    /// replica failed.
    #[cfg_attr(not(feature = "ddp"), allow(dead_code))]
    pub(crate) fn end_step(&self, failed: bool) -> bool {
        if failed {
            self.failed.store(true, Ordering::SeqCst);
        }
        self.barrier.wait();
        self.failed.load(Ordering::SeqCst)
    }
}

/// How the replicas of a step combine their gradients.
#[derive(Clone, Copy)]
pub(crate) enum Peers<'a> {
    /// One thread: the model lives on the first device; with several devices, each runs one
    /// shard and the gradients are summed there (`multi_device`).
    Local,
    /// One thread per device (`ddp`): this thread is replica `peer` of `count`, and the
    /// gradients are summed through burn-collective.
    #[cfg(feature = "ddp")]
    Collective {
        peer: usize,
        count: usize,
        turn: &'a StepTurn,
    },
    /// One process of several (`--world`): this process's devices run its shards of each
    /// batch as under `Local`, and the sums span every process through `link`.
    Processes(&'a Link),
}

impl Peers<'_> {
    /// Whether this thread writes the run's metrics, evaluations and checkpoints.
    fn is_main(&self) -> bool {
        match self {
            Peers::Local => true,
            #[cfg(feature = "ddp")]
            Peers::Collective { peer, .. } => *peer == 0,
            Peers::Processes(link) => link.place().0 == 0,
        }
    }
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
        train_loop(self.run, &self.replicas, self.peers, self.model, optim)
    }
}

/// Forward and backward of one batch: on the main device alone, or split into one contiguous
/// shard per replica, each shard's loss weighted by its share of the batch (so the summed
/// gradients are those of the whole batch's mean loss) and the gradients summed on the main
/// device.
fn forward_backward<B: Backend>(
    plan: &Plan,
    model: &Model<Ad<B>>,
    scaler: &LossScaler,
    items: &[usize],
    replicas: &[MpDevice<B>],
    peers: Peers<'_>,
) -> Result<StepGrads<B>, Error> {
    let main = &replicas[0];
    let read_correct =
        |c: Option<Tensor<Ad<B>, 1, burn::tensor::Int>>| c.map(|c| c.into_scalar().elem::<i64>());
    #[cfg(feature = "ddp")]
    if let Peers::Collective { peer, count, .. } = peers {
        // This replica's shard; its loss weighted by its share of the batch, so that the sum
        // over the replicas is the gradient of the whole batch's mean loss.
        let own = shard(items, count)[peer];
        let out = model.forward(plan.data.batch::<Ad<B>>(false, own, main))?;
        let share = own.len() as f64 / items.len() as f64;
        let scaled = scaler.scale_loss(out.loss.mul_scalar(share));
        let grads = GradientsParams::from_grads(scaled.backward(), model);
        let correct = match out.correct {
            Some(c) => Some(sum_over_peers::<B>(peer, c)?),
            None => None,
        };
        return Ok(StepGrads {
            grads,
            scaled_loss: scaled,
            correct: read_correct(correct),
        });
    }
    if replicas.len() == 1 && !matches!(peers, Peers::Processes(_)) {
        let out = model.forward(plan.data.batch::<Ad<B>>(false, items, main))?;
        let scaled = scaler.scale_loss(out.loss);
        let grads = GradientsParams::from_grads(scaled.backward(), model);
        return Ok(StepGrads {
            grads,
            scaled_loss: scaled,
            correct: read_correct(out.correct),
        });
    }
    let shards = match peers {
        // This process's devices take their shards of the batch split over every device of
        // every process (the same shards as one process with all the devices).
        Peers::Processes(link) => {
            let (rank, world) = link.place();
            let all = shard(items, world * replicas.len());
            all[rank * replicas.len()..][..replicas.len()].to_vec()
        }
        _ => shard(items, replicas.len()),
    };
    let mut accumulator = GradientsAccumulator::<Model<Ad<B>>>::new();
    let mut losses = Vec::with_capacity(shards.len());
    let mut correct: Vec<Tensor<Ad<B>, 1, burn::tensor::Int>> = Vec::new();
    for (shard, device) in shards.into_iter().zip(replicas) {
        let replica = model.clone().fork(device);
        let out = replica.forward(plan.data.batch::<Ad<B>>(false, shard, device))?;
        let share = shard.len() as f64 / items.len() as f64;
        let scaled = scaler.scale_loss(out.loss.mul_scalar(share));
        let mut grads = GradientsParams::from_grads(scaled.backward(), &replica);
        if let Peers::Processes(_) = peers {
            // Summed at the parameters' dtype, as every other sum of the run is (and as
            // `ddp` sums its replicas): two f16 gradients may overflow where their f32 sum
            // does not.
            grads = cast_grads_to_param_dtype(&replica, grads);
        }
        accumulator.accumulate(model, grads.to_device(main, model));
        losses.push(scaled.detach().to_device(main));
        // Summed on the main device and read once, so that no replica waits for another.
        correct.extend(out.correct.map(|c| c.to_device(main)));
    }
    let correct = (!correct.is_empty()).then(|| Tensor::cat(correct, 0).sum());
    Ok(StepGrads {
        grads: accumulator.grads(),
        scaled_loss: Tensor::cat(losses, 0).sum(),
        correct: read_correct(correct),
    })
}

/// A count summed over all replicas (burn-collective), as every replica calls it.
#[cfg(feature = "ddp")]
fn sum_over_peers<B: Backend>(
    peer: usize,
    count: Tensor<Ad<B>, 1, burn::tensor::Int>,
) -> Result<Tensor<Ad<B>, 1, burn::tensor::Int>, Error> {
    let peer = burn::collective::PeerId::from(peer);
    let summed = burn_mpric::scale::sum_over_peers(peer, count.float().inner())
        .map_err(|e| Error::Internal(e.to_string()))?;
    Ok(Tensor::<Ad<B>, 1>::from_inner(summed).int())
}

/// `items` split into `n` contiguous shards whose sizes differ by at most one (`n` is at most
/// `items.len()`, checked with the recipe).
fn shard(items: &[usize], n: usize) -> Vec<&[usize]> {
    let (base, extra) = (items.len() / n, items.len() % n);
    let mut shards = Vec::with_capacity(n);
    let mut start = 0;
    for i in 0..n {
        let len = base + usize::from(i < extra);
        shards.push(&items[start..start + len]);
        start += len;
    }
    shards
}

fn train_loop<B, O>(
    run: Run<'_>,
    replicas: &[MpDevice<B>],
    peers: Peers<'_>,
    model: Option<Model<Ad<B>>>,
    mut optim: O,
) -> Result<Summary, Error>
where
    B: Backend,
    O: Optimizer<Model<Ad<B>>, Ad<B>>,
{
    let device = &replicas[0];
    let started = Instant::now();
    let Run {
        plan,
        options,
        resume,
        link: _,
    } = run;
    let recipe = &plan.recipe;
    let output = recipe.output.as_path();
    let policy = device.policy();
    let in_file = |err: RecipeError| err.in_file(&plan.label);

    let is_main = peers.is_main();
    if is_main {
        std::fs::create_dir_all(output).map_err(|e| Error::io(output, e))?;
    }
    let mut model = model.unwrap_or_else(|| {
        Model::<Ad<B>>::init_seeded(&plan.recipe.model, plan.data.dims(), recipe.seed, device)
    });
    let (mut scaler, mut sampler, mut rows, mut evals, start) = match resume {
        Some((found, state)) => {
            model = found.load_model(model, device)?;
            optim = found.load_optimizer(optim, &optimizer_state_device(device)?)?;
            let scaler = LossScaler::from_record(state.scaler)
                .map_err(|e| Error::checkpoint(&found.state_path(), e))?;
            if !Sampler::fits(&plan.data, state.data) {
                return Err(Error::checkpoint(
                    &found.state_path(),
                    "the data position lies outside the training split",
                ));
            }
            let sampler = Sampler::restore(&plan.data, state.data, recipe.batch_size);
            (scaler, sampler, state.steps, state.eval, state.step)
        }
        None => (
            plan.scaler(policy).map_err(in_file)?,
            Sampler::new(&plan.data, recipe.seed, recipe.batch_size),
            Vec::new(),
            Vec::new(),
            0,
        ),
    };
    // The run stops itself at the recipe's `max_consecutive_skips`, with its reports written
    // and its last checkpoint named.
    scaler = scaler.with_max_consecutive_skips(0);

    let total = plan.total_steps;
    let stop = options.until.map_or(total, |u| u.min(total)).max(start);
    let title = format!(
        "{} ({} on {}, {})",
        plan.label,
        recipe.model.kind(),
        recipe.backend.name,
        policy
    );
    if is_main && options.log {
        eprintln!(
            "training {}: {} steps of {} on {} {} ({policy}) -> {}",
            plan.label,
            plan.total_steps,
            recipe.model.kind(),
            recipe.backend.name,
            recipe.backend.describe_devices(),
            output.display()
        );
    }
    if is_main && start > 0 {
        // The metrics files first go back to the checkpoint's rows. A run that resumes from
        // an older checkpoint than the files describe repeats steps whose wall times differ;
        // the two files are replaced one after the other, so without this a kill between the
        // two renames could leave the earlier run's rows in one file and this run's in the
        // other. From here on both files only ever hold this run's rows past the checkpoint.
        write_reports(plan, policy, &rows, &evals, &title)?;
    }
    let bar = if is_main {
        progress_bar(options, start, total)
    } else {
        ProgressBar::hidden()
    };
    let max_skips = recipe.max_consecutive_skips();
    let mut until_eval: Option<EvalRow> = None;
    let mut last_checkpoint = (start > 0).then_some(start);
    let diverged = |step: u64, reason: String, last_checkpoint: Option<u64>| Error::Diverged {
        step,
        reason,
        last_checkpoint,
    };

    for step in start + 1..=stop {
        let t0 = Instant::now();
        let items = sampler.next_items();
        let predictions = plan.data.predictions(items.len());
        let lr = recipe.schedule.lr(recipe.optimizer.lr(), step, total);
        let own = forward_backward(plan, &model, &scaler, &items, replicas, peers)?;
        let StepGrads {
            grads,
            scaled_loss,
            correct,
        } = match peers {
            Peers::Processes(link) => link.sum(step, &model, device, own)?,
            _ => own,
        };
        let (next, outcome) = match peers {
            #[cfg(feature = "ddp")]
            Peers::Collective { peer, .. } => scaler.step_all_reduced(
                burn::collective::PeerId::from(peer),
                &mut optim,
                lr,
                model,
                grads,
                scaled_loss,
            ),
            _ => scaler.step_with_loss(&mut optim, lr, model, grads, scaled_loss),
        };
        model = next;
        let outcome = outcome.map_err(|source| Error::Step { step, source })?;
        // One process: a skipped step's batch runs once more at the probe's scale, to tell a
        // range problem from one no scale fixes.
        let cause = match peers {
            Peers::Local if outcome.is_skipped() => Some(skip_cause(
                plan, &model, &items, replicas, peers, &outcome, step,
            )?),
            _ => None,
        };
        let accuracy = correct.map(|c| c as f32 / predictions as f32);
        let row = StepRow {
            step,
            epoch: sampler.position().epoch,
            lr,
            loss: outcome.loss.filter(|l| l.is_finite()),
            accuracy,
            loss_scale: outcome.scale_used,
            skipped: outcome.is_skipped(),
            skipped_total: outcome.stats.skipped,
            grad_norm: outcome.grad_norm.filter(|n| n.is_finite()),
            step_ms: t0.elapsed().as_secs_f64() * 1e3,
            overflowed: outcome
                .overflow
                .as_ref()
                .map(|o| o.params.clone())
                .unwrap_or_default(),
            cause: cause.as_ref().map(|c| c.label().to_string()),
        };
        if is_main && options.log && outcome.is_skipped() {
            bar.suspend(|| eprintln!("{}", skip_line(step, &outcome, cause.as_ref())));
        }
        bar.set_message(progress_message(&row));
        bar.inc(1);
        let skipped = row.skipped;
        rows.push(row);

        // Divergence: an applied step that leaves a non-finite parameter, or a run of skipped
        // steps. Either stops the run before a checkpoint could keep the damage.
        let skips_in_a_row = outcome.stats.consecutive_skipped;
        let stop_reason = if !skipped && !model.params_finite()? {
            Some(format!(
                "the optimizer step (lr {lr:e}) left non-finite parameters"
            ))
        } else if skips_in_a_row >= max_skips {
            Some(format!(
                "{skips_in_a_row} steps in a row were skipped for non-finite gradients (max_consecutive_skips = {max_skips}; loss scale now {:e}){}",
                scaler.scale(),
                cause.as_ref().map(|c| format!(": {c}")).unwrap_or_default()
            ))
        } else {
            None
        };
        // Every replica finds the same reason at the same step (they hold the same values).
        if let Some(reason) = stop_reason {
            bar.finish_and_clear();
            if is_main {
                write_reports(plan, policy, &rows, &evals, &title)?;
            }
            return Err(diverged(step, reason, last_checkpoint));
        }

        // The first replica evaluates and writes; under `ddp` the others wait for it here.
        let written = if is_main {
            (|| -> Result<(), Error> {
                // Held-out rows are kept for the scheduled checkpoints only, so that a run stopped
                // with --until and resumed records what the uninterrupted run records.
                let scheduled = step == total
                    || recipe
                        .checkpoint_every
                        .is_some_and(|every| step % every == 0);
                if scheduled || step == stop {
                    let mut eval = evaluate(&model.valid(), &plan.data, recipe.batch_size, device)?;
                    eval.step = step;
                    until_eval = (!scheduled).then(|| eval.clone());
                    if scheduled {
                        evals.push(eval);
                    }
                    let state = TrainState {
                        format_version: STATE_FORMAT_VERSION,
                        step,
                        total_steps: total,
                        data: sampler.position(),
                        scaler: scaler.to_record(),
                        recipe: recipe.clone(),
                        steps: rows.clone(),
                        eval: evals.clone(),
                        processes: options.processes.as_ref().map(|p| p.world),
                        process_devices: options.processes.as_ref().map(|_| replicas.len()),
                        schema: Some(plan.data.schema()),
                    };
                    let dtype = policy.param().to_burn();
                    match checkpoint::save(
                        output,
                        &model,
                        &optim,
                        &state,
                        dtype,
                        plan.data.digest(),
                    ) {
                        Err(Error::Diverged { step, reason, .. }) => {
                            bar.finish_and_clear();
                            write_reports(plan, policy, &rows, &evals, &title)?;
                            return Err(diverged(step, reason, last_checkpoint));
                        }
                        other => other?,
                    };
                    last_checkpoint = Some(step);
                    write_reports(plan, policy, &rows, &evals, &title)?;
                    let line =
                        checkpoint_line(step, total, &rows, until_eval.as_ref().or(evals.last()));
                    if !bar.is_hidden() {
                        bar.println(line);
                    } else if options.log {
                        eprintln!("{line}");
                    }
                }
                Ok(())
            })()
        } else {
            Ok(())
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
    bar.finish_and_clear();
    if stop == start && is_main {
        // Nothing to do (the run was already at its end): refresh the reports.
        write_reports(plan, policy, &rows, &evals, &title)?;
    }

    let tail = (rows.len() / 10).max(1);
    let tail_losses: Vec<f32> = rows
        .iter()
        .rev()
        .take(tail)
        .filter_map(|r| r.loss)
        .collect();
    Ok(Summary {
        output: output.to_path_buf(),
        policy,
        start_step: start,
        step: stop,
        total_steps: total,
        last: rows.last().cloned(),
        eval: until_eval.or_else(|| evals.last().cloned()),
        skipped: scaler.stats().skipped,
        tail_loss: (!tail_losses.is_empty())
            .then(|| tail_losses.iter().sum::<f32>() / tail_losses.len() as f32),
        wall_s: started.elapsed().as_secs_f64(),
    })
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

/// The cause of a skipped step (one process): its batch once more at the probe's scale, the
/// two reads compared ([`SkipCause::judge`]).
fn skip_cause<B: Backend>(
    plan: &Plan,
    model: &Model<Ad<B>>,
    items: &[usize],
    replicas: &[MpDevice<B>],
    peers: Peers<'_>,
    outcome: &StepOutcome,
    step: u64,
) -> Result<SkipCause, Error> {
    let read = ProbeRead::of(outcome.loss, false, false);
    let probe_scale = read.probe_scale(outcome.scale_used);
    let prober = LossScaler::fixed(probe_scale)
        .map_err(|e| Error::Internal(format!("the probe's scale {probe_scale}: {e}")))?;
    let probed = forward_backward(plan, model, &prober, items, replicas, peers)?;
    let checked = prober
        .check(model, probed.grads, Some(probed.scaled_loss))
        .map_err(|source| Error::Step { step, source })?;
    let params = outcome
        .overflow
        .as_ref()
        .map(|o| o.params.clone())
        .unwrap_or_default();
    let still = checked.overflow.as_ref().map_or(&[][..], |o| &o.params[..]);
    Ok(SkipCause::judge(
        read,
        checked.probe_read(),
        outcome.scale_used,
        probe_scale,
        params,
        still,
    ))
}

/// The stderr line of a skipped step: the scale it used and the next one, which parameters'
/// gradients overflowed, and the probe's cause.
fn skip_line(step: u64, outcome: &StepOutcome, cause: Option<&SkipCause>) -> String {
    let which = match &outcome.overflow {
        Some(overflow) if overflow.params.is_empty() => {
            "the global gradient norm overflowed f32 (no single gradient held inf or NaN)"
                .to_string()
        }
        Some(overflow) => format!("inf/NaN gradients in {overflow}"),
        None => "inf/NaN gradients".to_string(),
    };
    let cause = cause.map(|c| format!("; {c}")).unwrap_or_default();
    format!(
        "step {step}: skipped: {which}; loss scale {} -> {}{cause}",
        outcome.scale_used, outcome.next_scale
    )
}

fn write_reports(
    plan: &Plan,
    policy: ResolvedPolicy,
    rows: &[StepRow],
    evals: &[EvalRow],
    title: &str,
) -> Result<(), Error> {
    let output = plan.recipe.output.as_path();
    metrics::write(
        output,
        &MetricsFile {
            recipe: plan.label.clone(),
            policy: policy.to_string(),
            backend: format!(
                "{} {}",
                plan.recipe.backend.name,
                plan.recipe.backend.describe_devices()
            ),
            total_steps: plan.total_steps,
            steps: rows.to_vec(),
            eval: evals.to_vec(),
        },
    )?;
    plot::write(output, rows, evals, title)
}

/// Mean loss and accuracy of `model` over the held-out split (`step` is left at 0 for the
/// caller to set).
pub(crate) fn evaluate<B: Backend>(
    model: &Model<B>,
    data: &Dataset,
    batch_size: usize,
    device: &B::Device,
) -> Result<EvalRow, Error> {
    let mut loss_sum = 0.0f64;
    let mut correct = 0i64;
    let mut predictions = 0usize;
    let mut finite = true;
    // Evaluation holds no graph, so larger batches are cheap.
    for items in data.eval_batches(batch_size.max(256)) {
        let batch = data.batch::<B>(true, &items, device);
        let n = batch.len;
        let out = model.forward(batch)?;
        let loss: f32 = out.loss.into_scalar().elem();
        finite &= loss.is_finite();
        loss_sum += f64::from(loss) * n as f64;
        if let Some(c) = out.correct {
            correct += c.into_scalar().elem::<i64>();
        }
        predictions += n;
    }
    Ok(EvalRow {
        step: 0,
        loss: (finite && predictions > 0).then(|| (loss_sum / predictions as f64) as f32),
        accuracy: (data.has_accuracy() && predictions > 0)
            .then(|| correct as f32 / predictions as f32),
        predictions,
    })
}

fn progress_bar(options: &TrainOptions, start: u64, total: u64) -> ProgressBar {
    if !options.progress || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total).with_position(start);
    if let Ok(style) = ProgressStyle::with_template(
        "[{elapsed_precise}] {wide_bar} {pos}/{len} ({eta} left) {msg}",
    ) {
        bar.set_style(style);
    }
    bar
}

fn fmt_opt(value: Option<f32>, digits: usize) -> String {
    value.map_or("-".to_string(), |v| format!("{v:.digits$}"))
}

fn progress_message(row: &StepRow) -> String {
    format!(
        "loss {} acc {} scale {} skipped {}",
        fmt_opt(row.loss, 4),
        fmt_opt(row.accuracy, 3),
        row.loss_scale,
        row.skipped_total
    )
}

fn checkpoint_line(step: u64, total: u64, rows: &[StepRow], eval: Option<&EvalRow>) -> String {
    let last = rows.last();
    format!(
        "step {step}/{total}: loss {}, held-out loss {}, held-out accuracy {}, loss scale {}, skipped {} (checkpoint written)",
        fmt_opt(last.and_then(|r| r.loss), 4),
        fmt_opt(eval.and_then(|e| e.loss), 4),
        fmt_opt(eval.and_then(|e| e.accuracy), 3),
        last.map_or(1.0, |r| r.loss_scale),
        last.map_or(0, |r| r.skipped_total),
    )
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use crate::Recipe;
    use crate::data::Dataset;
    use crate::models::Model;

    #[test]
    fn an_untrained_model_is_evaluated_on_the_held_out_split() -> Result<(), crate::Error> {
        let recipe = Recipe::example();
        let data =
            Dataset::load(&recipe.dataset, &recipe.model, 0, std::path::Path::new("")).unwrap();
        let device = Default::default();
        let model = Model::<Flex>::init_seeded(&recipe.model, data.dims(), 0, &device);
        let eval = super::evaluate(&model, &data, 16, &device)?;
        assert_eq!(eval.predictions, 30);
        assert!(eval.loss.unwrap() > 0.5); // untrained: about ln 3
        Ok(())
    }
}
