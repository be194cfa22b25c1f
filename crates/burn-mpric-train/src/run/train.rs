//! The training run: its options ([`TrainOptions`]), what it did ([`Summary`]), and its loop:
//! `Autodiff<MixedPrecision<B>>`, loss scaling with step skipping, the held-out evaluation,
//! reports and checkpoints at their steps, and exact resume. A step's arithmetic is in
//! `step.rs`, what the run says while it runs in `progress.rs`, its reports in `report.rs`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, Transaction};
use burn_mpric::scale::{DeviceLossScaler, LossScaler, SkipCause, StepError, StepOutcome};
use burn_mpric::{BurnDType, FloatDType, MixedPrecision, MpDevice, Policy, ResolvedPolicy};
use indicatif::ProgressBar;

use crate::backend::dispatch;
use crate::checkpoint::{self, Checkpoint, STATE_FORMAT_VERSION, TrainState};
use crate::data::Sampler;
use crate::error::{Error, RecipeError};
use crate::models::Model;
use crate::models::evaluate::evaluate;
use crate::optim::{Ad, DeviceOptim, OptimizerTask, stored};
use crate::plan::Plan;
use crate::recipe::BackendConfig;
use crate::report::metrics::{EvalRow, StepRow};
use crate::run::grads::{StepGrads, read_count};
use crate::run::lock::RunLock;
use crate::run::processes::{self, Link, Listening, Processes};
use crate::run::progress::{
    checkpoint_line, progress_bar, progress_message, skip_line, start_line,
};
use crate::run::report::{plot_title, step_row, tail_loss, write_reports};
use crate::run::resume;
use crate::run::step::{Peers, forward_backward, skip_cause};

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
        train_loop(
            self.run,
            &self.replicas,
            self.peers,
            self.model,
            optim,
            None,
        )
    }

    fn run_device(self, optim: DeviceOptim<B>) -> Self::Output {
        let every = self.run.plan.recipe.sync_every.unwrap_or(1);
        let path = OnDevice {
            every: usize::try_from(every).unwrap_or(usize::MAX),
            step: |scaler, optim: &mut DeviceOptim<B>, lr, model, grads, loss| {
                scaler.step(&mut optim.0, lr, model, grads, Some(loss))
            },
        };
        train_loop(
            self.run,
            &self.replicas,
            self.peers,
            self.model,
            optim,
            Some(path),
        )
    }
}

/// The loss scaler's device path in the loop (a recipe with `sync_every`): `step` takes a
/// step with the skip decided on the device by the optimizer's device optimizer, and the
/// host reads the steps every `every` steps (one step behind) and at each checkpoint.
struct OnDevice<B: Backend, O> {
    every: usize,
    #[allow(clippy::type_complexity)]
    step: fn(
        &mut DeviceLossScaler<MixedPrecision<B>>,
        &mut O,
        f64,
        Model<Ad<B>>,
        GradientsParams,
        Tensor<Ad<B>, 1>,
    ) -> (Model<Ad<B>>, Result<Vec<StepOutcome>, StepError>),
}

/// What a step's metrics row says besides its outcome, known when the step is taken.
struct StepInfo {
    step: u64,
    epoch: u64,
    lr: f64,
    /// Predictions the step's accuracy counts over.
    predictions: usize,
    took: Duration,
}

/// A step taken on the device path and not read yet.
struct Unread<B: Backend> {
    info: StepInfo,
    correct: Option<Tensor<Ad<B>, 1, Int>>,
}

/// A step whose outcome the host knows: what its metrics row is made of.
struct Decided {
    info: StepInfo,
    outcome: StepOutcome,
    correct: Option<i64>,
    cause: Option<SkipCause>,
}

/// The unread steps the `outcomes` learned (oldest first) describe, with their counts read
/// in one transaction.
fn decide<B: Backend>(
    unread: &mut VecDeque<Unread<B>>,
    outcomes: Vec<StepOutcome>,
) -> Result<Vec<Decided>, Error> {
    let steps: Vec<Unread<B>> = unread.drain(..outcomes.len().min(unread.len())).collect();
    let mut transaction = Transaction::<MixedPrecision<B>>::default();
    let mut any = false;
    for count in steps.iter().filter_map(|s| s.correct.as_ref()) {
        transaction = transaction.register(count.clone().inner());
        any = true;
    }
    let read = match any {
        true => transaction
            .try_execute()
            .map_err(|e| Error::Internal(format!("reading the steps' counts: {e}")))?,
        false => Vec::new(),
    };
    let mut counts = read.into_iter().map(|data| {
        data.convert::<i64>()
            .to_vec::<i64>()
            .ok()
            .and_then(|v| v.first().copied())
    });
    steps
        .into_iter()
        .zip(outcomes)
        .map(|(s, outcome)| {
            let correct =
                match s.correct {
                    Some(_) => Some(counts.next().flatten().ok_or_else(|| {
                        Error::Internal("the device returned too few counts".into())
                    })?),
                    None => None,
                };
            Ok(Decided {
                info: s.info,
                outcome,
                correct,
                cause: None,
            })
        })
        .collect()
}

fn train_loop<B, O>(
    run: Run<'_>,
    replicas: &[MpDevice<B>],
    peers: Peers<'_>,
    model: Option<Model<Ad<B>>>,
    mut optim: O,
    on_device: Option<OnDevice<B, O>>,
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
    // bf16 master weights are bf16 from the first step, and again after a checkpoint
    // (which loads at f32), so a resumed run sees the dtypes the uninterrupted one saw.
    model = stored(recipe, model);
    // The run stops itself at the recipe's `max_consecutive_skips`, with its reports written
    // and its last checkpoint named.
    scaler = scaler.with_max_consecutive_skips(0);
    let mut device_scaler = match &on_device {
        Some(path) => Some(
            DeviceLossScaler::new(scaler, device)
                .map_err(|e| in_file(RecipeError::new("sync_every", e.to_string())))?
                .with_sync_every(path.every)
                // The rows and skip lines name a skipped step's parameters, as on the host.
                .with_overflow_names(true),
        ),
        None => None,
    };
    let mut unread: VecDeque<Unread<B>> = VecDeque::new();
    // The device path: the last step whose parameters were checked finite.
    let mut checked_through = start;

    let total = plan.total_steps;
    let stop = options.until.map_or(total, |u| u.min(total)).max(start);
    let title = plot_title(plan, policy);
    if is_main && options.log {
        eprintln!("{}", start_line(plan, policy));
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
        progress_bar(options.progress, start, total)
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
        let scale = |loss| match &device_scaler {
            Some(device) => device.scale_loss(loss),
            None => scaler.scale_loss(loss),
        };
        let own = forward_backward(plan, &model, &scale, &items, replicas, peers)?;
        let StepGrads {
            grads,
            scaled_loss,
            correct,
        } = match peers {
            Peers::Processes(link) => link.sum(step, &model, device, own)?,
            _ => own,
        };
        let scheduled = step == total
            || recipe
                .checkpoint_every
                .is_some_and(|every| step % every == 0);
        let info = || StepInfo {
            step,
            epoch: sampler.position().epoch,
            lr,
            predictions,
            took: t0.elapsed(),
        };
        let decided = match (&on_device, device_scaler.as_mut()) {
            (Some(path), Some(device)) => {
                let (next, learned) =
                    (path.step)(device, &mut optim, lr, model, grads, scaled_loss);
                model = next;
                unread.push_back(Unread {
                    info: info(),
                    correct,
                });
                let mut learned = learned.map_err(|source| Error::Step { step, source })?;
                // A checkpoint holds every step read, and the end of the run reads them all.
                if scheduled || step == stop {
                    learned.extend(
                        device
                            .sync()
                            .map_err(|source| Error::Step { step, source })?,
                    );
                }
                decide(&mut unread, learned)?
            }
            _ => {
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
                // One process: a skipped step's batch runs once more at the probe's scale, to
                // tell a range problem from one no scale fixes.
                let cause = match peers {
                    Peers::Local if outcome.is_skipped() => Some(skip_cause(
                        plan, &model, &items, replicas, peers, &outcome, step,
                    )?),
                    _ => None,
                };
                vec![Decided {
                    info: info(),
                    outcome,
                    correct: correct.map(read_count),
                    cause,
                }]
            }
        };
        bar.inc(1);
        let read = !decided.is_empty();
        let mut stop_reason = None;
        for d in decided {
            let StepInfo {
                step: at,
                epoch,
                lr,
                predictions,
                took,
            } = d.info;
            let row = step_row(
                (at, epoch, lr),
                &d.outcome,
                d.correct.map(|c| c as f32 / predictions as f32),
                d.cause.as_ref(),
                took,
            );
            if is_main && options.log && d.outcome.is_skipped() {
                bar.suspend(|| eprintln!("{}", skip_line(at, &d.outcome, d.cause.as_ref())));
            }
            bar.set_message(progress_message(&row));
            let skipped = row.skipped;
            rows.push(row);

            // Divergence: an applied step that leaves a non-finite parameter, or a run of
            // skipped steps. Either stops the run before a checkpoint could keep the damage.
            // On the device path the parameters are checked once per read, below.
            let skips_in_a_row = d.outcome.stats.consecutive_skipped;
            if on_device.is_none() && !skipped && !model.params_finite()? {
                stop_reason = Some((
                    at,
                    format!("the optimizer step (lr {lr:e}) left non-finite parameters"),
                ));
            } else if skips_in_a_row >= max_skips {
                stop_reason = Some((
                    at,
                    format!(
                        "{skips_in_a_row} steps in a row were skipped for non-finite gradients (max_consecutive_skips = {max_skips}; loss scale now {:e}){}",
                        d.outcome.next_scale,
                        d.cause
                            .as_ref()
                            .map(|c| format!(": {c}"))
                            .unwrap_or_default()
                    ),
                ));
            }
            if stop_reason.is_some() {
                break;
            }
        }
        // The device path: the parameters as of this step, once per read.
        if on_device.is_some() && read && stop_reason.is_none() {
            if !model.params_finite()? {
                stop_reason = Some((
                    step,
                    format!(
                        "an optimizer step of steps {}..={step} left non-finite parameters",
                        checked_through + 1
                    ),
                ));
            }
            checked_through = step;
        }
        // Every replica finds the same reason at the same step (they hold the same values).
        if let Some((at, reason)) = stop_reason {
            bar.finish_and_clear();
            if is_main {
                write_reports(plan, policy, &rows, &evals, &title)?;
            }
            return Err(diverged(at, reason, last_checkpoint));
        }

        // The first replica evaluates and writes; under `ddp` the others wait for it here.
        let written = if is_main {
            (|| -> Result<(), Error> {
                // Held-out rows are kept for the scheduled checkpoints only, so that a run stopped
                // with --until and resumed records what the uninterrupted run records.
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
                        scaler: match &device_scaler {
                            Some(device) => device.host().to_record(),
                            None => scaler.to_record(),
                        },
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

    Ok(Summary {
        output: output.to_path_buf(),
        policy,
        start_step: start,
        step: stop,
        total_steps: total,
        last: rows.last().cloned(),
        eval: until_eval.or_else(|| evals.last().cloned()),
        skipped: match &device_scaler {
            Some(device) => device.host().stats().skipped,
            None => scaler.stats().skipped,
        },
        tail_loss: tail_loss(&rows),
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
