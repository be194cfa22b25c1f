//! `mpric audit`: a recipe's first steps measured op by op (burn-mpric's precision audit)
//! on the recipe's model, data, optimizer and backend, with the verdicts as recipe lines
//! (`fix.rs`), a table (`table.rs`) and an SVG histogram of the gradient exponents
//! (`histogram.rs`).

mod fix;
mod histogram;
mod hot_spot;
mod table;
mod trial;

pub use fix::set_lines;
pub use histogram::histogram_svg;
pub use hot_spot::OpHotSpot;
pub use table::table;
pub use trial::DEFAULT_TRIAL_STEPS;

use std::cell::RefCell;
use std::path::PathBuf;

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use burn_mpric::audit::{
    AuditConfig, AuditReport, GRACE_STEPS, Remedy, Trial, audit, measurement_settings,
    supports_bf16,
};
use burn_mpric::instrument::Instrumented;
use burn_mpric::{MpSettings, ResolvedPolicy};
use serde::Serialize;

use crate::atomic::write_atomic;
use crate::backend::{BackendTask, dispatch, mp_device};
use crate::data::Sampler;
use crate::error::Error;
use crate::models::Model;
use crate::optim::{Ad, OptimizerTask, stored, with_optimizer};
use crate::plan::Plan;
use crate::recipe::BackendName;
use crate::recipe::OptimizerMemory;

/// Steps `mpric audit` measures unless told otherwise.
pub const DEFAULT_AUDIT_STEPS: usize = 5;

/// What `mpric audit` found for a recipe: the report, the recipe's policy as its backend
/// resolves it, and each verdict's `--set` lines.
#[derive(Debug, Clone, Serialize)]
pub struct RecipeAudit {
    /// The recipe file.
    pub recipe: String,
    /// The backend it ran on.
    pub backend: String,
    /// The report (ops, gradients, verdicts).
    #[serde(flatten)]
    pub report: AuditReport,
    /// For each verdict, in order, the `--set key=value` overrides that apply it to the
    /// recipe (none for a verdict no setting acts on).
    pub fixes: Vec<Vec<String>>,
    /// The recipe as written, trained a few steps with each skipped step probed.
    pub trial: Trial,
    /// For each verdict, in order, what the trial shows against it (a verdict that calls a
    /// dtype safe for a run that skipped every step there), or `null`.
    pub contradictions: Vec<Option<String>>,
    /// The ops the verdicts keep at full precision, with their place in the step.
    pub hot_spots: Vec<OpHotSpot>,
    /// When the trial failed, each verdict's overrides tried as a trial of their own (their
    /// `lines` are `--set` overrides); empty when the recipe trains as written.
    pub remedies: Vec<Remedy>,
    /// What the recipe's optimizer keeps per parameter (state dtype, master weights, bytes).
    pub optimizer_memory: OptimizerMemory,
}

impl RecipeAudit {
    /// The audit as `audit.json` holds it (and `mpric audit --json` prints it).
    ///
    /// ```
    /// use burn_mpric_train::Plan;
    /// use burn_mpric_train::audit::audit_recipe;
    ///
    /// let output = std::env::temp_dir().join(format!("mpric-doc-json-{}", std::process::id()));
    /// let recipe = concat!(env!("CARGO_MANIFEST_DIR"), "/../../recipes/quickstart.toml");
    /// let plan = Plan::load(recipe.as_ref(), &[format!("output={}", output.display())])?;
    /// let (found, files) = audit_recipe(&plan, 1)?;
    /// assert_eq!(found.to_json()?, std::fs::read_to_string(&files.json).unwrap());
    /// # std::fs::remove_dir_all(&output).unwrap();
    /// # Ok::<(), burn_mpric_train::Error>(())
    /// ```
    pub fn to_json(&self) -> Result<String, Error> {
        serde_json::to_string_pretty(self)
            .map_err(|e| Error::Internal(format!("the audit is not serializable: {e}")))
    }
}

/// Where [`audit_recipe`] writes its files.
#[derive(Debug, Clone)]
pub struct AuditFiles {
    /// `audit.json`: the whole [`RecipeAudit`].
    pub json: PathBuf,
    /// `audit_gradients.svg`: the histogram.
    pub svg: PathBuf,
}

/// Audits the first `steps` steps of `plan` and writes `audit.json` and
/// `audit_gradients.svg` into its output folder.
///
/// ```
/// use burn_mpric_train::Plan;
/// use burn_mpric_train::audit::audit_recipe;
///
/// let output = std::env::temp_dir().join(format!("mpric-doc-audit-{}", std::process::id()));
/// let recipe = concat!(env!("CARGO_MANIFEST_DIR"), "/../../recipes/quickstart.toml");
/// let plan = Plan::load(recipe.as_ref(), &[format!("output={}", output.display())])?;
/// let (found, files) = audit_recipe(&plan, 2)?;
/// assert_eq!(found.report.steps, 2);
/// assert!(files.json.exists() && files.svg.exists());
/// assert!(audit_recipe(&plan, 0).is_err());
/// # std::fs::remove_dir_all(&output).unwrap();
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
pub fn audit_recipe(plan: &Plan, steps: usize) -> Result<(RecipeAudit, AuditFiles), Error> {
    audit_recipe_with_trials(plan, steps, DEFAULT_TRIAL_STEPS)
}

/// [`audit_recipe`] with trials of `trial_steps` steps (more than
/// [`GRACE_STEPS`](burn_mpric::audit::GRACE_STEPS)).
///
/// ```
/// use burn_mpric_train::Plan;
/// use burn_mpric_train::audit::audit_recipe_with_trials;
///
/// let recipe = concat!(env!("CARGO_MANIFEST_DIR"), "/../../recipes/quickstart.toml");
/// let plan = Plan::load(recipe.as_ref(), &[])?;
/// let err = audit_recipe_with_trials(&plan, 1, 2).unwrap_err();
/// assert!(err.to_string().contains("--trial-steps"), "{err}");
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
pub fn audit_recipe_with_trials(
    plan: &Plan,
    steps: usize,
    trial_steps: usize,
) -> Result<(RecipeAudit, AuditFiles), Error> {
    if steps == 0 {
        return Err(Error::Usage(
            "an audit measures at least one step; --steps must be at least 1".into(),
        ));
    }
    if trial_steps <= GRACE_STEPS {
        return Err(Error::Usage(format!(
            "a trial runs more than {GRACE_STEPS} steps (the first {GRACE_STEPS} may skip while the scale fits); --trial-steps was {trial_steps}"
        )));
    }
    let task = AuditTask { plan, steps };
    let (report, policy) =
        dispatch(&plan.recipe.backend, task).map_err(|e| e.in_file(&plan.label))??;
    let fixes: Vec<Vec<String>> = report
        .verdicts
        .iter()
        .map(|v| set_lines(&plan.recipe, policy, v))
        .collect();
    let trial = trial::run_trial(plan, trial_steps)?;
    let mut remedies = Vec::new();
    if !trial.trains() {
        let mut tried: Vec<&Vec<String>> = Vec::new();
        for (verdict, sets) in report.verdicts.iter().zip(&fixes) {
            if sets.is_empty() || tried.contains(&sets) {
                continue;
            }
            tried.push(sets);
            let remedied = trial::with_sets(plan, sets)?;
            remedies.push(Remedy {
                what: verdict.to_string(),
                lines: sets.clone(),
                tried: Some(trial::run_trial(&remedied, trial_steps)?),
            });
        }
    }
    let hot_spots = OpHotSpot::find(&report);
    let contradictions = report
        .verdicts
        .iter()
        .map(|verdict| verdict.contradiction(&trial))
        .collect();
    let found = RecipeAudit {
        recipe: plan.label.clone(),
        contradictions,
        backend: format!(
            "{} {}",
            plan.recipe.backend.name,
            plan.recipe.backend.describe_devices()
        ),
        report,
        fixes,
        trial,
        hot_spots,
        remedies,
        optimizer_memory: plan.recipe.optimizer.memory(),
    };
    let output = plan.recipe.output.as_path();
    std::fs::create_dir_all(output).map_err(|e| Error::io(output, e))?;
    let files = AuditFiles {
        json: output.join("audit.json"),
        svg: output.join("audit_gradients.svg"),
    };
    write_atomic(&files.json, found.to_json()?.as_bytes())?;
    let svg = histogram_svg(&found.report, &plan.label).map_err(|message| Error::Plot {
        path: files.svg.clone(),
        message,
    })?;
    write_atomic(&files.svg, svg.as_bytes())?;
    Ok((found, files))
}

struct AuditTask<'a> {
    plan: &'a Plan,
    steps: usize,
}

impl BackendTask for AuditTask<'_> {
    type Output = Result<(AuditReport, ResolvedPolicy), Error>;

    fn run<B: Backend>(self, device: B::Device, backend: BackendName) -> Self::Output {
        let plan = self.plan;
        let in_file = |e: crate::error::RecipeError| e.in_file(&plan.label);
        let audited = plan.recipe.settings().map_err(in_file)?;
        // The audited settings must run on this backend, as training would check.
        let policy = mp_device::<B>(device.clone(), audited.clone(), backend)
            .map_err(in_file)?
            .policy();
        let measured = measurement_settings(&audited, supports_bf16::<B>(&device));
        let device = mp_device::<Instrumented<B>>(device, measured, backend).map_err(in_file)?;
        let loss_scale = plan.scaler(policy).map_err(in_file)?.scale();
        let report = with_optimizer::<Instrumented<B>, _>(
            &plan.recipe,
            Steps {
                plan,
                steps: self.steps,
                audited,
                loss_scale,
                device,
            },
        )?;
        Ok((report, policy))
    }
}

/// The audited steps, generic over the recipe's optimizer.
struct Steps<'a, B: Backend> {
    plan: &'a Plan,
    steps: usize,
    audited: MpSettings,
    loss_scale: f32,
    device: burn_mpric::MpDevice<B>,
}

impl<B: Backend> OptimizerTask<B> for Steps<'_, B> {
    type Output = Result<AuditReport, Error>;

    fn run<O: burn::optim::Optimizer<Model<Ad<B>>, Ad<B>>>(self, optim: O) -> Self::Output {
        let Steps {
            plan,
            steps,
            audited,
            loss_scale,
            device,
        } = self;
        let recipe = &plan.recipe;
        let model =
            Model::<Ad<B>>::init_seeded(&recipe.model, plan.data.dims(), recipe.seed, &device);
        let model = stored(recipe, model);
        let mut sampler = Sampler::new(&plan.data, recipe.seed, recipe.batch_size);
        let failed = RefCell::new(None);
        let config = AuditConfig::new(steps)
            .with_lr(recipe.optimizer.lr())
            .with_loss_scale(loss_scale);
        let report = audit(model, optim, &audited, config, |model: &Model<Ad<B>>, _| {
            let items = sampler.next_items();
            match model.forward(plan.data.batch::<Ad<B>>(false, &items, &device)) {
                Ok(out) => out.loss,
                Err(e) => {
                    failed.borrow_mut().get_or_insert(e);
                    Tensor::zeros([1], &device)
                }
            }
        });
        if let Some(e) = failed.into_inner() {
            return Err(e);
        }
        report.map_err(|e| Error::Internal(e.to_string()))
    }
}
