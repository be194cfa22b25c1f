//! A validated recipe with its data loaded: everything `mpric check` verifies and
//! `mpric train` runs.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn_mpric::ResolvedPolicy;
use burn_mpric::scale::LossScaler;

use crate::backend::{ResolvePolicy, dispatch};
use crate::data::Dataset;
use crate::error::{Error, RecipeError};
use crate::models::Model;
use crate::recipe::Recipe;

/// A recipe that passed every check that needs no backend, with its dataset loaded.
///
/// ```
/// use burn_mpric_train::{Plan, Recipe};
///
/// let plan = Plan::new(Recipe::example(), "example")?;
/// assert_eq!(plan.total_steps, 20);
/// assert_eq!(plan.check_backend()?.policy.to_string(), "p=f32,c=f32,o=f32");
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Plan {
    /// The recipe (after overrides).
    pub recipe: Recipe,
    /// How errors name the recipe (its path).
    pub label: String,
    /// Where the data's relative paths start: the recipe file's folder.
    pub base: PathBuf,
    /// The data.
    pub(crate) data: Dataset,
    /// Steps per epoch at the recipe's batch size.
    pub steps_per_epoch: u64,
    /// Steps of the whole run.
    pub total_steps: u64,
}

impl Plan {
    /// Reads a recipe file, applies `key=value` overrides, validates it and loads its data.
    ///
    /// ```
    /// use burn_mpric_train::{Plan, Recipe};
    ///
    /// let dir = std::env::temp_dir().join(format!("mpric-doc-plan-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let path = dir.join("r.json");
    /// std::fs::write(&path, serde_json::to_string(&Recipe::example()).unwrap()).unwrap();
    /// let plan = Plan::load(&path, &["steps=7".to_string()])?;
    /// assert_eq!(plan.total_steps, 7);
    /// assert!(Plan::load(&path, &["steps=0".to_string()]).is_err());
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), burn_mpric_train::Error>(())
    /// ```
    pub fn load(path: &Path, overrides: &[String]) -> Result<Self, Error> {
        let recipe = Recipe::from_file(path, overrides)?;
        let base = path.parent().unwrap_or(Path::new("")).to_path_buf();
        Self::in_folder(recipe, &path.display().to_string(), base)
    }

    /// Validates a recipe and loads its data; `label` names the recipe in errors.
    ///
    /// ```
    /// use burn_mpric_train::{Plan, Recipe};
    ///
    /// let mut recipe = Recipe::example();
    /// recipe.batch_size = 500; // iris has 120 training examples
    /// let err = Plan::new(recipe, "mine.toml").unwrap_err();
    /// assert!(err.to_string().starts_with("mine.toml: batch_size: must be at most"));
    /// ```
    pub fn new(recipe: Recipe, label: &str) -> Result<Self, Error> {
        Self::in_folder(recipe, label, PathBuf::new())
    }

    /// As [`new`](Self::new), with the data's relative paths read from `base` (the recipe
    /// file's folder) instead of the working directory.
    ///
    /// ```
    /// use burn_mpric_train::{Plan, Recipe};
    ///
    /// let recipe = Recipe::from_toml_str(
    ///     "batch_size = 8\nsteps = 5\noutput = \"runs/doc\"\n[model]\nkind = \"mlp\"\n[optimizer]\nkind = \"sgd\"\nlr = 0.1\n[dataset]\nkind = \"csv\"\npath = \"nope.csv\"\ntarget = \"y\"\ntask = \"regression\"",
    ///     "r.toml", &[])?;
    /// let err = Plan::in_folder(recipe, "r.toml", "/no/such/folder".into()).unwrap_err();
    /// assert!(err.to_string().starts_with("r.toml: dataset.path: /no/such/folder/nope.csv: cannot read it"), "{err}");
    /// assert_eq!(err.exit_code(), 2);
    /// # Ok::<(), burn_mpric_train::Error>(())
    /// ```
    pub fn in_folder(recipe: Recipe, label: &str, base: PathBuf) -> Result<Self, Error> {
        let in_file = |err: RecipeError| err.in_file(label);
        recipe.validate().map_err(in_file)?;
        // Before anything is read or written: a backend this build lacks cannot run the recipe.
        crate::backend::check_built(recipe.backend.name).map_err(in_file)?;
        let data =
            Dataset::load(&recipe.dataset, &recipe.model, recipe.seed, &base).map_err(in_file)?;
        data.check_batch_size(recipe.batch_size).map_err(in_file)?;
        let steps_per_epoch = data.steps_per_epoch(recipe.batch_size);
        let total_steps = recipe.total_steps(steps_per_epoch);
        if recipe.schedule.warmup_steps >= total_steps {
            return Err(RecipeError::new(
                "schedule.warmup_steps",
                format!(
                    "must be less than the run's {total_steps} steps, got {}",
                    recipe.schedule.warmup_steps
                ),
            )
            .in_file(label));
        }
        Ok(Self {
            recipe,
            label: label.to_string(),
            base,
            data,
            steps_per_epoch,
            total_steps,
        })
    }

    /// What the recipe's model reads and gives, with the training split's standardization
    /// (see [`Schema`](crate::schema::Schema)).
    pub fn schema(&self) -> crate::schema::Schema {
        self.data.schema()
    }

    /// Starts the recipe's backend device with its policy, once, and returns what it decided:
    /// the policy as the device resolves it (`half` becomes f16 or bf16) and the loss scaler a
    /// fresh run starts with. A policy the backend cannot run is a recipe error on the
    /// `policy` field.
    ///
    /// ```
    /// use burn_mpric_train::{Plan, Recipe};
    ///
    /// let mut recipe = Recipe::example();
    /// recipe.policy = "p=f32,c=half,o=f32".parse().unwrap();
    /// let plan = Plan::new(recipe.clone(), "r.toml")?;
    /// let check = plan.check_backend()?;
    /// assert_eq!(check.policy.to_string(), "p=f32,c=bf16,o=f32"); // Flex runs bf16
    /// assert_eq!(check.scaler.scale(), 1.0); // bf16: no scaling
    /// recipe.backend.name = burn_mpric_train::recipe::BackendName::NdArray;
    /// let err = Plan::new(recipe, "r.toml")?.check_backend().unwrap_err();
    /// assert!(err.to_string().starts_with("r.toml: policy: "), "{err}");
    /// # Ok::<(), burn_mpric_train::Error>(())
    /// ```
    pub fn check_backend(&self) -> Result<BackendCheck, Error> {
        let in_file = |err: RecipeError| err.in_file(&self.label);
        let (policy, backend) = dispatch(&self.recipe.backend, ResolvePolicy(self.recipe.policy))
            .and_then(|r| r)
            .map_err(in_file)?;
        let scaler = self.scaler(policy).map_err(in_file)?;
        Ok(BackendCheck {
            policy,
            scaler,
            backend,
        })
    }

    /// The loss scaler of a fresh run under the resolved `policy`.
    ///
    /// ```
    /// use burn_mpric_train::{Plan, Recipe};
    ///
    /// let plan = Plan::new(Recipe::example(), "r.toml")?;
    /// assert_eq!(plan.scaler("mixed_f16".parse().unwrap())?.scale(), 32768.0); // auto
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn scaler(&self, policy: ResolvedPolicy) -> Result<LossScaler, RecipeError> {
        self.recipe
            .loss_scale
            .scaler(policy, self.recipe.clip_grad_norm)
    }

    /// Parameters of the model.
    ///
    /// ```
    /// use burn_mpric_train::{Plan, Recipe};
    ///
    /// assert_eq!(Plan::new(Recipe::example(), "r")?.num_params(), 4 * 64 + 64 + 64 * 3 + 3);
    /// # Ok::<(), burn_mpric_train::Error>(())
    /// ```
    pub fn num_params(&self) -> usize {
        Model::<burn::backend::Flex>::init(
            &self.recipe.model,
            self.data.dims(),
            &Default::default(),
        )
        .num_params()
    }

    /// What the run will do, one line per item (for `mpric check`).
    ///
    /// ```
    /// use burn_mpric_train::{Plan, Recipe};
    ///
    /// let plan = Plan::new(Recipe::example(), "r")?;
    /// let lines = plan.describe(&plan.check_backend()?);
    /// assert!(lines[0].starts_with("model:      mlp"));
    /// # Ok::<(), burn_mpric_train::Error>(())
    /// ```
    pub fn describe(&self, check: &BackendCheck) -> Vec<String> {
        let r = &self.recipe;
        let policy = check.policy;
        let scaler = format!("{} (initial scale {})", r.loss_scale, check.scaler.scale());
        vec![
            format!(
                "model:      {} ({} parameters)",
                self.recipe.model,
                self.num_params()
            ),
            format!("dataset:    {}", self.data.describe()),
            format!(
                "backend:    {} {} ({}){}, policy {policy}{}",
                r.backend.name,
                r.backend.describe_devices(),
                check.backend,
                if r.backend.device_list().len() > 1 {
                    format!(
                        ", strategy {}",
                        r.strategy.unwrap_or(crate::recipe::Strategy::MultiDevice)
                    )
                } else {
                    String::new()
                },
                if r.ops.is_empty() {
                    String::new()
                } else {
                    let ops: Vec<String> =
                        r.ops.iter().map(|(op, c)| format!("{op} {c}")).collect();
                    format!(" (ops: {})", ops.join(", "))
                }
            ),
            format!(
                "loss scale: {scaler}{}",
                r.clip_grad_norm
                    .map(|n| format!(", gradients clipped to norm {n}"))
                    .unwrap_or_default()
            ),
            format!(
                "optimizer:  {} lr {} ({} schedule, {} warmup steps)",
                r.optimizer.kind(),
                r.optimizer.lr(),
                format!("{:?}", r.schedule.kind).to_lowercase(),
                r.schedule.warmup_steps
            ),
            format!(
                "steps:      {} (batch {}, {} steps per epoch), seed {}",
                self.total_steps, r.batch_size, self.steps_per_epoch, r.seed
            ),
            format!(
                "output:     {} (checkpoint {})",
                r.output.display(),
                r.checkpoint_every
                    .map(|n| format!("every {n} steps and at the end"))
                    .unwrap_or_else(|| "at the end".into())
            ),
        ]
    }
}

/// What starting the recipe's backend decided ([`Plan::check_backend`]).
#[derive(Debug, Clone)]
pub struct BackendCheck {
    /// The policy as the device resolves it.
    pub policy: ResolvedPolicy,
    /// The loss scaler a fresh run starts with.
    pub scaler: LossScaler,
    /// The backend's own name, which says what its kernels compile to
    /// (`cubecl<wgpu<wgsl>>`, `cubecl<wgpu<spirv>>`).
    pub backend: String,
}
