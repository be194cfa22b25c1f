//! The training loop: `Autodiff<MixedPrecision<B>>`, loss scaling with step skipping,
//! metrics, plots and checkpoints, and exact resume.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::backend::Autodiff;
use burn::module::AutodiffModule;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamConfig, AdamWConfig, GradientsParams, Optimizer, SgdConfig};
use burn::tensor::ElementConversion;
use burn::tensor::backend::Backend;
use burn_mpric::scale::LossScaler;
use burn_mpric::{MixedPrecision, MpDevice, Policy};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

use crate::backend::{BackendTask, dispatch, mp_device};
use crate::checkpoint::{self, Checkpoint, STATE_FORMAT_VERSION, TrainState};
use crate::data::{Dataset, Sampler};
use crate::error::{Error, RecipeError};
use crate::metrics::{self, EvalRow, MetricsFile, StepRow};
use crate::models::Model;
use crate::plan::Plan;
use crate::plot;
use crate::recipe::{BackendName, OptimizerConfig, Recipe};

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
    pub policy: Policy,
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
    checkpoint::clean_temporaries(&output)?;
    let existing = checkpoint::latest(&output)?;
    let resume = if options.resume {
        let Some(found) = existing else {
            return Err(Error::Resume(format!(
                "no checkpoint in {}; start the run without --resume",
                checkpoint::checkpoints_dir(&output).display()
            )));
        };
        let state = found.read_state()?;
        compatible(&state.recipe, &plan.recipe)?;
        Some((found, state))
    } else {
        if let Some(found) = existing {
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
    let task = Run {
        plan,
        options,
        resume,
    };
    dispatch(&plan.recipe.backend, task).map_err(|e| e.in_file(&plan.label))?
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

/// Fields a resumed run may change: how long it runs and how often it checkpoints.
const RESUMABLE_CHANGES: [&str; 4] = ["steps", "epochs", "checkpoint_every", "output"];

/// Errors unless `current` is `saved` up to [`RESUMABLE_CHANGES`], naming the first field
/// that differs.
fn compatible(saved: &Recipe, current: &Recipe) -> Result<(), Error> {
    let strip = |recipe: &Recipe| -> Result<Value, Error> {
        let mut value = serde_json::to_value(recipe)
            .map_err(|e| Error::Internal(format!("recipe is not serializable: {e}")))?;
        if let Value::Object(map) = &mut value {
            for key in RESUMABLE_CHANGES {
                map.remove(key);
            }
        }
        Ok(value)
    };
    let (a, b) = (strip(saved)?, strip(current)?);
    match first_difference(&a, &b, String::new()) {
        None => Ok(()),
        Some((field, was, now)) => Err(Error::Resume(format!(
            "the recipe's `{field}` is {now} but the run was started with {was}; resume with the recipe the run started with (only steps, epochs and checkpoint_every may change)"
        ))),
    }
}

fn first_difference(a: &Value, b: &Value, path: String) -> Option<(String, String, String)> {
    let show = |v: Option<&Value>| v.map_or("(not set)".to_string(), Value::to_string);
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|key| {
                let sub = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match (x.get(key), y.get(key)) {
                    (Some(u), Some(v)) => first_difference(u, v, sub),
                    (u, v) => Some((sub, show(u), show(v))),
                }
            })
        }
        _ if a == b => None,
        _ => Some((path, show(Some(a)), show(Some(b)))),
    }
}

struct Run<'a> {
    plan: &'a Plan,
    options: &'a TrainOptions,
    resume: Option<(Checkpoint, TrainState)>,
}

impl BackendTask for Run<'_> {
    type Output = Result<Summary, Error>;

    fn run<B: Backend>(self, device: B::Device, backend: BackendName) -> Self::Output {
        let device = mp_device::<B>(device, self.plan.recipe.policy, backend)
            .map_err(|e| e.in_file(&self.plan.label))?;
        with_optimizer::<B, _>(self.plan.optimizer, Loop { run: self, device })
    }
}

/// The training backend: autodiff over the mixed-precision decorator.
pub(crate) type Ad<B> = Autodiff<MixedPrecision<B>>;

/// Work generic over the optimizer type.
pub(crate) trait OptimizerTask<B: Backend> {
    type Output;
    fn run<O: Optimizer<Model<Ad<B>>, Ad<B>>>(self, optim: O) -> Self::Output;
}

/// Builds the optimizer a config describes and runs `task` with it.
pub(crate) fn with_optimizer<B: Backend, T: OptimizerTask<B>>(
    config: OptimizerConfig,
    task: T,
) -> T::Output {
    match config {
        OptimizerConfig::Adam {
            beta1,
            beta2,
            epsilon,
            weight_decay,
        } => task.run(
            AdamConfig::new()
                .with_beta_1(beta1 as f32)
                .with_beta_2(beta2 as f32)
                .with_epsilon(epsilon as f32)
                .with_weight_decay(
                    (weight_decay > 0.0).then(|| WeightDecayConfig::new(weight_decay as f32)),
                )
                .init(),
        ),
        OptimizerConfig::AdamW {
            beta1,
            beta2,
            epsilon,
            weight_decay,
        } => task.run(
            AdamWConfig::new()
                .with_beta_1(beta1 as f32)
                .with_beta_2(beta2 as f32)
                .with_epsilon(epsilon as f32)
                .with_weight_decay(weight_decay as f32)
                .init(),
        ),
        OptimizerConfig::Sgd {
            momentum,
            nesterov,
            weight_decay,
        } => task.run(
            SgdConfig::new()
                .with_momentum((momentum > 0.0).then(|| {
                    MomentumConfig::new()
                        .with_momentum(momentum)
                        .with_dampening(0.0)
                        .with_nesterov(nesterov)
                }))
                .with_weight_decay(
                    (weight_decay > 0.0).then(|| WeightDecayConfig::new(weight_decay as f32)),
                )
                .init(),
        ),
    }
}

struct Loop<'a, B: Backend> {
    run: Run<'a>,
    device: MpDevice<B>,
}

impl<B: Backend> OptimizerTask<B> for Loop<'_, B> {
    type Output = Result<Summary, Error>;

    fn run<O: Optimizer<Model<Ad<B>>, Ad<B>>>(self, optim: O) -> Self::Output {
        train_loop(self.run, &self.device, optim)
    }
}

fn train_loop<B, O>(run: Run<'_>, device: &MpDevice<B>, mut optim: O) -> Result<Summary, Error>
where
    B: Backend,
    O: Optimizer<Model<Ad<B>>, Ad<B>>,
{
    let started = Instant::now();
    let Run {
        plan,
        options,
        resume,
    } = run;
    let recipe = &plan.recipe;
    let output = recipe.output.as_path();
    let policy = device.policy();
    let in_file = |err: RecipeError| err.in_file(&plan.label);

    std::fs::create_dir_all(output).map_err(|e| Error::io(output, e))?;
    let mut model = Model::<Ad<B>>::init_seeded(&plan.model, plan.data.dims(), recipe.seed, device);
    let (mut scaler, mut sampler, mut rows, mut evals, start) = match resume {
        Some((found, state)) => {
            model = found.load_model(model, device)?;
            optim = found.load_optimizer(optim, device)?;
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

    let total = plan.total_steps;
    let stop = options.until.map_or(total, |u| u.min(total)).max(start);
    let title = format!(
        "{} ({} on {}, {})",
        plan.label, recipe.model.kind, recipe.backend.name, policy
    );
    let bar = progress_bar(options, start, total);

    for step in start + 1..=stop {
        let t0 = Instant::now();
        let items = sampler.next_items();
        let batch = plan.data.batch::<Ad<B>>(false, &items, device);
        let predictions = batch.len;
        let out = model.forward(batch)?;
        let lr = recipe.schedule.lr(recipe.optimizer.lr, step, total);
        let scaled = scaler.scale_loss(out.loss);
        let grads = GradientsParams::from_grads(scaled.backward(), &model);
        let (next, outcome) = scaler.step_with_loss(&mut optim, lr, model, grads, scaled);
        model = next;
        let outcome = outcome.map_err(|source| Error::Step { step, source })?;
        let accuracy = out
            .correct
            .map(|c| c.into_scalar().elem::<i64>() as f32 / predictions as f32);
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
        };
        bar.set_message(progress_message(&row));
        bar.inc(1);
        rows.push(row);

        let checkpoint_now = step == stop
            || recipe
                .checkpoint_every
                .is_some_and(|every| step % every == 0);
        if checkpoint_now {
            let mut eval = evaluate(&model.valid(), &plan.data, recipe.batch_size, device)?;
            eval.step = step;
            evals.push(eval);
            let state = TrainState {
                format_version: STATE_FORMAT_VERSION,
                step,
                total_steps: total,
                data: sampler.position(),
                scaler: scaler.to_record(),
                recipe: recipe.clone(),
                steps: rows.clone(),
                eval: evals.clone(),
            };
            checkpoint::save(output, &model, &optim, &state)?;
            write_reports(plan, policy, &rows, &evals, &title)?;
            let line = checkpoint_line(step, total, &rows, evals.last());
            if !bar.is_hidden() {
                bar.println(line);
            } else if options.log {
                eprintln!("{line}");
            }
        }
    }
    bar.finish_and_clear();
    if stop == start {
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
        eval: evals.last().cloned(),
        skipped: scaler.stats().skipped,
        tail_loss: (!tail_losses.is_empty())
            .then(|| tail_losses.iter().sum::<f32>() / tail_losses.len() as f32),
        wall_s: started.elapsed().as_secs_f64(),
    })
}

fn write_reports(
    plan: &Plan,
    policy: Policy,
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
                "{} device {}",
                plan.recipe.backend.name, plan.recipe.backend.device
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
///
/// ```
/// use burn::backend::Flex;
/// use burn_mpric_train::{Recipe, data::Dataset, evaluate, models::Model};
///
/// let recipe = Recipe::example();
/// let config = recipe.model.resolve().unwrap();
/// let data = Dataset::load(&recipe.dataset, &config, 0).unwrap();
/// let device = Default::default();
/// let model = Model::<Flex>::init_seeded(&config, data.dims(), 0, &device);
/// let eval = evaluate(&model, &data, 16, &device)?;
/// assert_eq!(eval.predictions, 30);
/// assert!(eval.loss.unwrap() > 0.5); // untrained: about ln 3
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
pub fn evaluate<B: Backend>(
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
