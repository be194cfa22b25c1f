//! What a run keeps of its steps while it runs, [`History`]: the metrics rows and held-out
//! evaluations (what the reports and checkpoints hold), the progress bar and its lines, the
//! divergence rule applied to each step as its outcome arrives, and the scheduled save
//! ([`History::save`]: evaluate, the train state, the checkpoint, the reports).

use std::time::Instant;

use burn::module::AutodiffModule;
use burn::optim::Optimizer;
use burn::tensor::backend::Backend;
use burn_mpric::{BurnDType, MpDevice, ResolvedPolicy};
use indicatif::ProgressBar;

use crate::checkpoint::{self, STATE_FORMAT_VERSION, TrainState};
use crate::data::Sampler;
use crate::error::Error;
use crate::models::Model;
use crate::models::evaluate::evaluate;
use crate::optim::Ad;
use crate::plan::Plan;
use crate::report::metrics::{EvalRow, StepRow};
use crate::run::options::{Summary, TrainOptions};
use crate::run::progress::{
    checkpoint_line, progress_bar, progress_message, skip_line, start_line,
};
use crate::run::report::{plot_title, step_row, tail_loss, write_reports};
use crate::run::scaling::{Decided, Scaling, StepInfo};

/// The run's record so far, and where it shows.
pub(crate) struct History<'a> {
    plan: &'a Plan,
    options: &'a TrainOptions,
    policy: ResolvedPolicy,
    title: String,
    /// Whether this replica writes the run's files (the first one).
    writes: bool,
    rows: Vec<StepRow>,
    evals: Vec<EvalRow>,
    /// The held-out evaluation of a run stopped with `--until` between scheduled checkpoints
    /// (kept out of `evals`, so that the resumed run records what the uninterrupted one does).
    until_eval: Option<EvalRow>,
    last_checkpoint: Option<u64>,
    pub(crate) bar: ProgressBar,
}

impl<'a> History<'a> {
    /// The history of a run that starts after step `start` with the checkpoint's `rows` and
    /// `evals`: the start line said, the progress bar shown, and (resuming) the reports
    /// brought back to the checkpoint's rows.
    pub(crate) fn start(
        plan: &'a Plan,
        options: &'a TrainOptions,
        policy: ResolvedPolicy,
        (rows, evals): (Vec<StepRow>, Vec<EvalRow>),
        start: u64,
        writes: bool,
    ) -> Result<Self, Error> {
        let title = plot_title(plan, policy);
        if writes && options.log {
            eprintln!("{}", start_line(plan, policy));
        }
        if writes && start > 0 {
            // The metrics files first go back to the checkpoint's rows. A run that resumes
            // from an older checkpoint than the files describe repeats steps whose wall times
            // differ; the two files are replaced one after the other, so without this a kill
            // between the two renames could leave the earlier run's rows in one file and
            // this run's in the other. From here on both files only ever hold this run's rows
            // past the checkpoint.
            write_reports(plan, policy, &rows, &evals, &title)?;
        }
        let bar = match writes {
            true => progress_bar(options.progress, start, plan.total_steps),
            false => ProgressBar::hidden(),
        };
        Ok(Self {
            plan,
            options,
            policy,
            title,
            writes,
            rows,
            evals,
            until_eval: None,
            last_checkpoint: (start > 0).then_some(start),
            bar,
        })
    }

    /// Records the steps whose outcomes arrived, oldest first; the step and the reason the
    /// run stops at, if one of them diverged: an applied step that left a non-finite
    /// parameter (checked here where `scaling` checks each step), or a run of skipped steps.
    /// Either stops the run before a checkpoint could keep the damage.
    pub(crate) fn record<B: Backend, O: Optimizer<Model<Ad<B>>, Ad<B>>>(
        &mut self,
        decided: Vec<Decided>,
        model: &Model<Ad<B>>,
        scaling: &Scaling<B, O>,
    ) -> Result<Option<(u64, String)>, Error> {
        let max_skips = self.plan.recipe.max_consecutive_skips();
        for d in decided {
            let StepInfo {
                step: at,
                epoch,
                lr,
                predictions,
                took,
            } = d.info;
            let accuracy = d.correct.map(|c| c as f32 / predictions as f32);
            let row = step_row(
                (at, epoch, lr),
                &d.outcome,
                accuracy,
                d.cause.as_ref(),
                took,
            );
            if self.writes && self.options.log && d.outcome.is_skipped() {
                let line = skip_line(at, &d.outcome, d.cause.as_ref());
                self.bar.suspend(|| eprintln!("{line}"));
            }
            self.bar.set_message(progress_message(&row));
            let skipped = row.skipped;
            self.rows.push(row);

            let skips_in_a_row = d.outcome.stats.consecutive_skipped;
            if scaling.checks_each_step() && !skipped && !model.params_finite()? {
                let reason = format!("the optimizer step (lr {lr:e}) left non-finite parameters");
                return Ok(Some((at, reason)));
            }
            if skips_in_a_row >= max_skips {
                let cause = d.cause.as_ref().map(|c| format!(": {c}"));
                let reason = format!(
                    "{skips_in_a_row} steps in a row were skipped for non-finite gradients (max_consecutive_skips = {max_skips}; loss scale now {:e}){}",
                    d.outcome.next_scale,
                    cause.unwrap_or_default()
                );
                return Ok(Some((at, reason)));
            }
        }
        Ok(None)
    }

    /// The run stopped at step `at` for `reason`: the reports written (by the writer), and
    /// the error that names the last checkpoint.
    pub(crate) fn diverged(&self, at: u64, reason: String) -> Error {
        self.bar.finish_and_clear();
        if self.writes
            && let Err(e) = self.write_reports()
        {
            return e;
        }
        Error::Diverged {
            step: at,
            reason,
            last_checkpoint: self.last_checkpoint,
        }
    }

    fn write_reports(&self) -> Result<(), Error> {
        write_reports(self.plan, self.policy, &self.rows, &self.evals, &self.title)
    }

    /// The save after `step`, which is `scheduled` (a checkpoint step or the run's last) or
    /// the step a `--until` run stops at: the held-out evaluation (kept in the reports at a
    /// scheduled step only), the checkpoint (model, optimizer, train state) and the reports.
    /// The writer's alone.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn save<B: Backend, O: Optimizer<Model<Ad<B>>, Ad<B>>>(
        &mut self,
        step: u64,
        scheduled: bool,
        model: &Model<Ad<B>>,
        optim: &O,
        scaling: &Scaling<B, O>,
        sampler: &Sampler,
        replicas: &[MpDevice<B>],
    ) -> Result<(), Error> {
        let recipe = &self.plan.recipe;
        let device = &replicas[0];
        let mut eval = evaluate(&model.valid(), &self.plan.data, recipe.batch_size, device)?;
        eval.step = step;
        // Held-out rows are kept for the scheduled checkpoints only, so that a run stopped
        // with --until and resumed records what the uninterrupted run records.
        self.until_eval = (!scheduled).then(|| eval.clone());
        if scheduled {
            self.evals.push(eval);
        }
        let processes = self.options.processes.as_ref();
        let state = TrainState {
            format_version: STATE_FORMAT_VERSION,
            step,
            total_steps: self.plan.total_steps,
            data: sampler.position(),
            scaler: scaling.record(),
            recipe: recipe.clone(),
            steps: self.rows.clone(),
            eval: self.evals.clone(),
            processes: processes.map(|p| p.world),
            process_devices: processes.map(|_| replicas.len()),
            schema: Some(self.plan.data.schema()),
        };
        let dtype = self.policy.param().to_burn();
        let digest = self.plan.data.digest();
        match checkpoint::save(&recipe.output, model, optim, &state, dtype, digest) {
            Err(Error::Diverged { step, reason, .. }) => return Err(self.diverged(step, reason)),
            other => other?,
        };
        self.last_checkpoint = Some(step);
        self.write_reports()?;
        let eval = self.until_eval.as_ref().or(self.evals.last());
        let line = checkpoint_line(step, self.plan.total_steps, &self.rows, eval);
        if !self.bar.is_hidden() {
            self.bar.println(line);
        } else if self.options.log {
            eprintln!("{line}");
        }
        Ok(())
    }

    /// What the run did, from `start` to `stop`, with `skipped` steps in the whole run.
    pub(crate) fn summary(
        self,
        start: u64,
        stop: u64,
        skipped: u64,
        started: Instant,
    ) -> Result<Summary, Error> {
        self.bar.finish_and_clear();
        if stop == start && self.writes {
            // Nothing to do (the run was already at its end): refresh the reports.
            self.write_reports()?;
        }
        Ok(Summary {
            output: self.plan.recipe.output.clone(),
            policy: self.policy,
            start_step: start,
            step: stop,
            total_steps: self.plan.total_steps,
            last: self.rows.last().cloned(),
            eval: self.until_eval.or_else(|| self.evals.last().cloned()),
            skipped,
            tail_loss: tail_loss(&self.rows),
            wall_s: started.elapsed().as_secs_f64(),
        })
    }
}
