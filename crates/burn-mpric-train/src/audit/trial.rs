//! The audit's trials: the recipe, and the recipe with a verdict's `--set` lines, trained a
//! few steps on its backend with the probing scaler (`LossScaler::step_with`), so that each
//! printed remedy is one that was run.

use std::cell::RefCell;

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use burn_mpric::audit::Trial;
use burn_mpric::scale::LossScaler;

use crate::backend::{BackendTask, dispatch, mp_device};
use crate::data::Sampler;
use crate::error::Error;
use crate::models::Model;
use crate::optim::{Ad, OptimizerTask, stored, with_optimizer};
use crate::plan::Plan;
use crate::recipe::{BackendName, Recipe};

/// Steps of each trial unless told otherwise.
pub const DEFAULT_TRIAL_STEPS: usize = 8;

/// `plan` with `sets` (`key=value` overrides) applied on top of its recipe, its data read
/// from the same folder.
pub(crate) fn with_sets(plan: &Plan, sets: &[String]) -> Result<Plan, Error> {
    let value = serde_json::to_value(&plan.recipe)
        .map_err(|e| Error::Internal(format!("the recipe is not serializable: {e}")))?;
    let recipe = Recipe::from_value(value, &plan.label, sets)?;
    Plan::in_folder(recipe, &plan.label, plan.base.clone())
}

/// `steps` training steps of `plan` from its seed, on its backend, at its policy and loss
/// scale, each skipped step's batch probed once more.
pub(crate) fn run_trial(plan: &Plan, steps: usize) -> Result<Trial, Error> {
    dispatch(&plan.recipe.backend, TrialTask { plan, steps }).map_err(|e| e.in_file(&plan.label))?
}

struct TrialTask<'a> {
    plan: &'a Plan,
    steps: usize,
}

impl BackendTask for TrialTask<'_> {
    type Output = Result<Trial, Error>;

    fn run<B: Backend>(self, device: B::Device, backend: BackendName) -> Self::Output {
        let plan = self.plan;
        let in_file = |e: crate::error::RecipeError| e.in_file(&plan.label);
        let settings = plan.recipe.settings().map_err(in_file)?;
        let device = mp_device::<B>(device, settings, backend).map_err(in_file)?;
        let policy = device.policy();
        let scaler = plan
            .scaler(policy)
            .map_err(in_file)?
            .with_max_consecutive_skips(0);
        let trial = Trial::new(policy.to_string(), scaler.scale(), self.steps);
        with_optimizer::<B, _>(
            &plan.recipe,
            TrialSteps {
                plan,
                device,
                scaler,
                trial,
            },
        )
    }
}

struct TrialSteps<'a, B: Backend> {
    plan: &'a Plan,
    device: burn_mpric::MpDevice<B>,
    scaler: LossScaler,
    trial: Trial,
}

impl<B: Backend> OptimizerTask<B> for TrialSteps<'_, B> {
    type Output = Result<Trial, Error>;

    fn run<O: burn::optim::Optimizer<Model<Ad<B>>, Ad<B>>>(self, mut optim: O) -> Self::Output {
        let TrialSteps {
            plan,
            device,
            mut scaler,
            mut trial,
        } = self;
        let recipe = &plan.recipe;
        let model =
            Model::<Ad<B>>::init_seeded(&recipe.model, plan.data.dims(), recipe.seed, &device);
        let mut model = stored(recipe, model);
        let mut sampler = Sampler::new(&plan.data, recipe.seed, recipe.batch_size);
        let failed = RefCell::new(None);
        for step in 0..trial.steps {
            let items = sampler.next_items();
            let (next, outcome) = scaler.step_with(
                &mut optim,
                recipe.optimizer.lr(),
                model,
                |m: &Model<Ad<B>>| match m.forward(plan.data.batch::<Ad<B>>(false, &items, &device))
                {
                    Ok(out) => out.loss,
                    Err(e) => {
                        failed.borrow_mut().get_or_insert(e);
                        Tensor::zeros([1], &device)
                    }
                },
            );
            model = next;
            if let Some(e) = failed.borrow_mut().take() {
                return Err(e);
            }
            let outcome = outcome.map_err(|source| Error::Step {
                step: step as u64 + 1,
                source,
            })?;
            let skipped = outcome.is_skipped();
            trial.record(step, skipped, outcome.overflow.as_ref(), outcome.cause);
        }
        Ok(trial)
    }
}
