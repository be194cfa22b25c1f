//! Recipes: what to train, on what, how. Parsed strictly (unknown fields are errors), then
//! validated; every error names the field and what is accepted.
//!
//! A recipe is a TOML file (or JSON, by extension):
//!
//! ```toml
//! seed = 0
//! batch_size = 16
//! steps = 300
//! output = "runs/quickstart"
//! policy = "p=f32,c=bf16,o=f32"
//!
//! [model]
//! kind = "mlp"
//! hidden = [32, 32]
//!
//! [dataset]
//! name = "iris"
//!
//! [optimizer]
//! kind = "adam"
//! lr = 0.01
//! ```
//!
//! `[dataset]` names a bundled dataset, or reads the user's own CSV file, text or folder of
//! images: see [`DatasetConfig`].

mod dataset;
pub(crate) mod document;
mod errors;
mod help;
pub mod loss_scale;
mod model;
mod optimizer;
pub(crate) mod overrides;

pub use dataset::{
    Channels, CsvSource, DataKind, DataSource, DatasetConfig, DatasetName, ImageSource,
    MAX_IMAGE_SIZE, TaskKind,
};
pub use model::{ConvConfig, MlpConfig, ModelConfig, TransformerLmConfig};
pub use optimizer::{AdamSettings, OptimizerConfig, OptimizerMemory, SgdSettings};

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use burn_mpric::{FloatDType, MpSettings, Op, OpCategory, Policy, PolicyDType, SoftmaxPrecision};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, RecipeError};
use crate::recipe::loss_scale::LossScaleSpec;
use crate::recipe::overrides::apply_overrides;
use help::{Help, WHOLE_ABOVE_0, help, one_of};

/// A training recipe, as written in the file (after `--set` overrides).
///
/// ```
/// use burn_mpric_train::Recipe;
///
/// let text = r#"
/// batch_size = 8
/// steps = 10
/// output = "runs/doc"
/// [model]
/// kind = "mlp"
/// [dataset]
/// name = "iris"
/// [optimizer]
/// kind = "sgd"
/// lr = 0.1
/// "#;
/// let recipe = Recipe::from_toml_str(text, "doc.toml", &[])?;
/// assert_eq!(recipe.steps, Some(10));
/// assert_eq!(recipe.policy.to_string(), "p=f32,c=f32,o=f32");
///
/// let err = Recipe::from_toml_str(&text.replace("lr = 0.1", "lr = -0.1"), "doc.toml", &[]).unwrap_err();
/// assert_eq!(err.to_string(), "doc.toml: optimizer.lr: must be in (0, 10], got -0.1");
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// Seed of the model init and of the data split and order.
    #[serde(default)]
    pub seed: u64,
    /// Examples (tabular) or sequences (text) per step.
    pub batch_size: usize,
    /// Training steps; give this or `epochs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u64>,
    /// Passes over the training split; give this or `steps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epochs: Option<u64>,
    /// The output folder (metrics, plots, checkpoints), relative to the working directory.
    pub output: PathBuf,
    /// Write a checkpoint (and the metrics and plots) every this many steps; the end of the
    /// run always writes one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_every: Option<u64>,
    /// Clip the gradients to this global L2 norm (after unscaling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clip_grad_norm: Option<f32>,
    /// Decide each step's skip on the device and read the steps on the host every this many
    /// steps (and at each checkpoint), instead of once per step between backward and the
    /// optimizer: the loss scaler's device path. The metrics rows, the progress line, the
    /// skip lines and the divergence stop come at the reads. Not with `clip_grad_norm`,
    /// `strategy = "ddp"` or an `[optimizer]` state or master weights below f32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_every: Option<u64>,
    /// Stop the run (exit code 3) after this many skipped steps in a row (default
    /// [`DEFAULT_MAX_CONSECUTIVE_SKIPS`]), like optax's `max_consecutive_errors`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_consecutive_skips: Option<u64>,
    /// How several `backend.devices` train together (default `multi_device` when there are
    /// several).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    /// The precision policy (`f32`, `mixed_bf16`, `p=f32,c=f16,o=f32`, ...).
    #[serde(default)]
    pub policy: Policy,
    /// Per-op category overrides, as the policy's op table names ops (`mpric policy
    /// mixed_f16` lists them): `[ops]` with `linear = "full"` keeps every `linear` at f32
    /// (categories: `compute`, `full`, `promote`). `mpric audit` prints the lines to add.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ops: BTreeMap<String, String>,
    /// Where the softmax's pieces run under a mixed policy: `half` (the default: computed
    /// and stored at the compute dtype, the row sums accumulated at f32 inside the backend),
    /// `stored` (computed at f32, stored at the compute dtype) or `full` (f32, as PyTorch's
    /// autocast). See [`burn_mpric::SoftmaxPrecision`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub softmax: Option<SoftmaxPrecision>,
    /// The loss scaling: a preset name or a table.
    #[serde(default)]
    pub loss_scale: LossScaleSpec,
    /// The model.
    pub model: ModelConfig,
    /// The data.
    pub dataset: DatasetConfig,
    /// Where to run.
    #[serde(default)]
    pub backend: BackendConfig,
    /// The optimizer.
    pub optimizer: OptimizerConfig,
    /// The learning-rate schedule.
    #[serde(default)]
    pub schedule: ScheduleConfig,
}

/// Skipped steps in a row after which a run counts as diverged, when the recipe does not say.
/// A dynamic loss scale recovers from an overflow in one skipped step, and from a scale far
/// too high in about 16 (halving from 2^15 to 1); 50 in a row means the gradients stay
/// non-finite at any scale.
///
/// ```
/// use burn_mpric_train::Recipe;
/// use burn_mpric_train::recipe::DEFAULT_MAX_CONSECUTIVE_SKIPS;
///
/// assert_eq!(Recipe::example().max_consecutive_skips(), DEFAULT_MAX_CONSECUTIVE_SKIPS);
/// ```
pub use burn_mpric::scale::DEFAULT_MAX_CONSECUTIVE_SKIPS;

/// The largest learning rate a recipe accepts. Learning rates in practice lie below 1; a
/// larger one turns the parameters into infinities within a step or two.
///
/// ```
/// use burn_mpric_train::recipe::{MAX_LR, OptimizerConfig, SgdSettings};
///
/// assert!(OptimizerConfig::Sgd(SgdSettings::new(MAX_LR)).validate().is_ok());
/// let err = OptimizerConfig::Sgd(SgdSettings::new(1e308)).validate().unwrap_err();
/// assert_eq!(err.to_string(), "optimizer.lr: must be in (0, 10], got 1e308");
/// ```
pub const MAX_LR: f64 = 10.0;

/// Where to run.
///
/// ```
/// use burn_mpric_train::recipe::BackendName;
///
/// assert_eq!(BackendName::NdArray.to_string(), "ndarray");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum BackendName {
    /// Burn's CPU backend (f32, f16, bf16).
    Flex,
    /// The ndarray CPU backend (f32 and f64 only).
    #[serde(rename = "ndarray")]
    #[value(name = "ndarray")]
    NdArray,
    /// wgpu (Vulkan, Metal, DX12; f32 and f16 where the adapter has it), its kernels
    /// compiled to WGSL (to SPIR-V on Vulkan in a build with the `vulkan` feature).
    Wgpu,
    /// wgpu on Vulkan with kernels compiled to SPIR-V: Vulkan's cooperative matrices (tensor
    /// cores) and bf16 where the driver offers them (needs the crate's `vulkan` feature).
    Vulkan,
    /// wgpu on Metal with kernels compiled to MSL, Apple GPUs only (needs the crate's `metal`
    /// feature).
    Metal,
    /// CUDA (needs the crate's `cuda` feature).
    Cuda,
}

impl fmt::Display for BackendName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendName::Flex => "flex",
            BackendName::NdArray => "ndarray",
            BackendName::Wgpu => "wgpu",
            BackendName::Vulkan => "vulkan",
            BackendName::Metal => "metal",
            BackendName::Cuda => "cuda",
        })
    }
}

/// The `[backend]` table.
///
/// ```
/// use burn_mpric_train::recipe::{BackendName, BackendConfig};
///
/// assert_eq!(BackendConfig::default().name, BackendName::Flex);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// `flex` (default), `ndarray`, `wgpu`, `vulkan`, `metal` or `cuda`.
    #[serde(default = "default_backend")]
    pub name: BackendName,
    /// Device index: 0 for the CPU backends; for wgpu, vulkan and metal 0 is the default
    /// adapter and n ≥ 1 the n-th discrete GPU; for cuda the GPU index.
    #[serde(default)]
    pub device: usize,
    /// Several devices for data-parallel training (see [`Strategy`]), the first one the main
    /// device; indices as for `device`. A CPU backend's one device may be named more than once
    /// (replicas on one device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<Vec<usize>>,
}

fn default_backend() -> BackendName {
    BackendName::Flex
}

impl Default for BackendConfig {
    fn default() -> Self {
        Self {
            name: BackendName::Flex,
            device: 0,
            devices: None,
        }
    }
}

impl BackendConfig {
    /// The devices a run uses, the main one first.
    ///
    /// ```
    /// use burn_mpric_train::recipe::BackendConfig;
    ///
    /// assert_eq!(BackendConfig::default().device_list(), vec![0]);
    /// let two = BackendConfig { devices: Some(vec![1, 2]), ..BackendConfig::default() };
    /// assert_eq!(two.device_list(), vec![1, 2]);
    /// ```
    pub fn device_list(&self) -> Vec<usize> {
        self.devices.clone().unwrap_or_else(|| vec![self.device])
    }

    /// The devices, written as a person reads them (`device 0`, `devices [0, 1]`).
    ///
    /// ```
    /// use burn_mpric_train::recipe::BackendConfig;
    ///
    /// assert_eq!(BackendConfig::default().describe_devices(), "device 0");
    /// ```
    pub fn describe_devices(&self) -> String {
        match &self.devices {
            Some(devices) => format!("devices {devices:?}"),
            None => format!("device {}", self.device),
        }
    }
}

/// How a run uses several devices.
///
/// ```
/// use burn_mpric_train::recipe::Strategy;
///
/// let s: Strategy = serde_json::from_str("\"multi_device\"").unwrap();
/// assert_eq!(s, Strategy::MultiDevice);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Data parallel in one process, as burn-train's `MultiDevice` with `OptimMainDevice`:
    /// each step's batch is split into one contiguous shard per device, each device runs the
    /// model on its shard, the gradients are summed on the main device (each shard's loss
    /// weighted by its share of the batch, so the sum is the gradient of the whole batch's
    /// mean loss), and one loss-scaler decision and one optimizer step follow.
    MultiDevice,
    /// Distributed data parallel through burn-collective: one thread per device, each a
    /// whole replica (model, optimizer, loss scaler) training on its shard of every batch; the
    /// gradients (and the loss) are summed over the replicas with burn-collective's all-reduce,
    /// and every replica takes the same loss-scaler decision on the sum. Needs the `ddp`
    /// feature of burn-mpric-train (on by default).
    Ddp,
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Strategy::MultiDevice => "multi_device",
            Strategy::Ddp => "ddp",
        })
    }
}

/// The learning-rate schedules.
///
/// ```
/// use burn_mpric_train::recipe::ScheduleKind;
///
/// let kind: ScheduleKind = serde_json::from_str("\"cosine\"").unwrap();
/// assert_eq!(kind, ScheduleKind::Cosine);
/// assert_eq!(ScheduleKind::default(), ScheduleKind::Constant);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleKind {
    /// The peak learning rate throughout (after the warmup).
    #[default]
    Constant,
    /// Cosine decay from the peak to `min_lr` over the steps after the warmup.
    Cosine,
}

/// The `[schedule]` table: a linear warmup, then constant or cosine.
///
/// ```
/// use burn_mpric_train::recipe::{ScheduleKind, ScheduleConfig};
///
/// let s = ScheduleConfig { kind: ScheduleKind::Cosine, warmup_steps: 10, min_lr: None };
/// assert_eq!(s.lr(1.0, 5, 100), 0.5);
/// assert_eq!(s.lr(1.0, 11, 100), 1.0);
/// assert!(s.lr(1.0, 100, 100) < 0.01);
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleConfig {
    /// `constant` (default) or `cosine`.
    #[serde(default)]
    pub kind: ScheduleKind,
    /// Steps of linear warmup from 0 to the peak (default 0).
    #[serde(default)]
    pub warmup_steps: u64,
    /// The learning rate at the end of a cosine schedule (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_lr: Option<f64>,
}

impl ScheduleConfig {
    /// The learning rate of step `step` (1-based) of `total`, for peak `peak`.
    ///
    /// ```
    /// use burn_mpric_train::recipe::ScheduleConfig;
    ///
    /// let constant = ScheduleConfig::default();
    /// assert_eq!(constant.lr(0.1, 1, 100), 0.1);
    /// assert_eq!(constant.lr(0.1, 100, 100), 0.1);
    /// ```
    pub fn lr(&self, peak: f64, step: u64, total: u64) -> f64 {
        let warmup = self.warmup_steps;
        if step <= warmup {
            return peak * step as f64 / warmup as f64;
        }
        match self.kind {
            ScheduleKind::Constant => peak,
            ScheduleKind::Cosine => {
                let min = self.min_lr.unwrap_or(0.0);
                let span = total.saturating_sub(warmup).max(1) as f64;
                let progress = ((step - warmup - 1) as f64 / span).min(1.0);
                min + 0.5 * (peak - min) * (1.0 + (std::f64::consts::PI * progress).cos())
            }
        }
    }

    fn validate(&self, peak: f64) -> Result<(), RecipeError> {
        if let Some(min) = self.min_lr {
            if self.kind != ScheduleKind::Cosine {
                return Err(RecipeError::new(
                    "schedule.min_lr",
                    "only a setting of kind `cosine`",
                ));
            }
            non_negative("schedule.min_lr", min)?;
            if min > peak {
                return Err(RecipeError::new(
                    "schedule.min_lr",
                    format!("must be at most optimizer.lr ({peak}), got {min}"),
                ));
            }
        }
        Ok(())
    }
}

/// A number as a person would write it: `1e308`, not 309 digits.
pub(crate) fn show(value: f64) -> String {
    if value != 0.0 && !(1e-4..1e6).contains(&value.abs()) {
        format!("{value:e}")
    } else {
        value.to_string()
    }
}

fn positive(field: &str, value: f64) -> Result<f64, RecipeError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(RecipeError::new(field, format!("must be > 0, got {value}")))
    }
}

fn non_negative(field: &str, value: f64) -> Result<f64, RecipeError> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(RecipeError::new(
            field,
            format!("must be >= 0, got {value}"),
        ))
    }
}

pub(crate) fn unit(field: &str, value: f64) -> Result<f64, RecipeError> {
    if (0.0..1.0).contains(&value) {
        Ok(value)
    } else {
        Err(RecipeError::new(
            field,
            format!("must be in [0, 1), got {value}"),
        ))
    }
}

/// The file formats a recipe can be written in.
///
/// ```
/// use burn_mpric_train::recipe::Format;
///
/// assert_eq!(Format::of("recipes/quickstart.toml".as_ref()), Format::Toml);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// TOML (any extension but `.json`).
    Toml,
    /// JSON (`.json`).
    Json,
}

impl Format {
    /// The format of a recipe file, by extension.
    ///
    /// ```
    /// use burn_mpric_train::recipe::Format;
    ///
    /// assert_eq!(Format::of("a/b.json".as_ref()), Format::Json);
    /// assert_eq!(Format::of("a/b.toml".as_ref()), Format::Toml);
    /// ```
    pub fn of(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("json") => Format::Json,
            _ => Format::Toml,
        }
    }
}

/// The largest recipe file read (recipes are a few hundred bytes; `/dev/zero` is not one).
pub const MAX_RECIPE_BYTES: u64 = 1 << 20;

/// Reads a UTF-8 file of at most `limit` bytes; a larger one (or an endless stream) is an error
/// after `limit + 1` bytes, not an unbounded read.
///
/// ```
/// use burn_mpric_train::recipe::read_bounded;
///
/// let err = read_bounded("/dev/zero".as_ref(), 1024).unwrap_err();
/// assert!(err.to_string().contains("larger than 1024 bytes"));
/// ```
pub fn read_bounded(path: &Path, limit: u64) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(limit + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        return Err(std::io::Error::other(format!(
            "the file is larger than {limit} bytes; a recipe is a small TOML or JSON file"
        )));
    }
    Ok(text)
}

impl Recipe {
    /// Reads, parses, overrides (`key=value` strings, as `--set` takes them) and validates a
    /// recipe file.
    ///
    /// ```
    /// use burn_mpric_train::Recipe;
    ///
    /// let err = Recipe::from_file("no/such/recipe.toml".as_ref(), &[]).unwrap_err();
    /// assert!(err.to_string().starts_with("no/such/recipe.toml: cannot read the recipe"));
    /// assert_eq!(err.exit_code(), 2);
    /// ```
    pub fn from_file(path: &Path, overrides: &[String]) -> Result<Self, Error> {
        let text = read_bounded(path, MAX_RECIPE_BYTES).map_err(|source| Error::ReadRecipe {
            path: path.to_path_buf(),
            source,
        })?;
        let label = path.display().to_string();
        match Format::of(path) {
            Format::Toml => Self::from_toml_str(&text, &label, overrides),
            Format::Json => Self::from_json_str(&text, &label, overrides),
        }
    }

    /// Parses and validates TOML text; `label` names it in errors.
    ///
    /// ```
    /// use burn_mpric_train::Recipe;
    ///
    /// // A syntax error names the field of its line, and a line that works.
    /// let err = Recipe::from_toml_str("steps = [", "bad.toml", &[]).unwrap_err();
    /// assert!(err.to_string().starts_with("bad.toml: steps: TOML syntax error at line 1"), "{err}");
    /// assert!(err.to_string().ends_with("e.g. steps = 300"), "{err}");
    /// assert_eq!(err.exit_code(), 2);
    /// // A value of the wrong type: the field, what it accepts, an example.
    /// let err = Recipe::from_toml_str("model = \"x\"", "bad.toml", &[]).unwrap_err();
    /// assert_eq!(err.to_string(), "bad.toml: model: expected a [model] table with `kind` \
    ///     (`mlp`, `conv` or `transformer_lm`) and the model's sizes, got the text \"x\"; \
    ///     e.g. kind = \"mlp\" under [model]");
    /// ```
    pub fn from_toml_str(text: &str, label: &str, overrides: &[String]) -> Result<Self, Error> {
        let table: toml::Table = toml::from_str(text)
            .map_err(|err| errors::toml_syntax_error(text, &err).in_file(label))?;
        let value = crate::recipe::document::from_toml(toml::Value::Table(table), "")
            .map_err(|err| err.in_file(label))?;
        Self::from_value(value, label, overrides)
    }

    /// Parses and validates JSON text; `label` names it in errors.
    ///
    /// ```
    /// use burn_mpric_train::Recipe;
    ///
    /// let json = serde_json::to_string(&Recipe::example()).unwrap();
    /// assert_eq!(Recipe::from_json_str(&json, "r.json", &[]).unwrap(), Recipe::example());
    /// let err = Recipe::from_json_str(&json, "r.json", &["seed=-1".into()]).unwrap_err();
    /// assert_eq!(err.to_string(), "r.json: seed: expected a whole number, 0 or more, got `-1` (out of range); e.g. seed = 0");
    /// ```
    pub fn from_json_str(text: &str, label: &str, overrides: &[String]) -> Result<Self, Error> {
        let value: Value = serde_json::from_str(text).map_err(|err| {
            RecipeError::new("", format!("JSON syntax error: {err}")).in_file(label)
        })?;
        Self::from_value(value, label, overrides)
    }

    /// Applies the overrides to a parsed document, deserializes it strictly and validates
    /// it.
    ///
    /// ```
    /// use burn_mpric_train::Recipe;
    /// use burn_mpric_train::recipe::{MlpConfig, ModelConfig};
    ///
    /// let value = serde_json::to_value(Recipe::example()).unwrap();
    /// let recipe = Recipe::from_value(value.clone(), "r", &["model.hidden=[8, 8]".into()]).unwrap();
    /// assert_eq!(recipe.model, ModelConfig::Mlp(MlpConfig { hidden: vec![8, 8] }));
    /// // An error inside a tagged table names its field.
    /// let err = Recipe::from_value(value, "r", &["model.hidden=[8, -1]".into()]).unwrap_err();
    /// assert!(err.to_string().starts_with("r: model.hidden[1]: "), "{err}");
    /// ```
    pub fn from_value(mut value: Value, label: &str, overrides: &[String]) -> Result<Self, Error> {
        apply_overrides(&mut value, overrides)?;
        let recipe: Recipe = serde_path_to_error::deserialize(&value).map_err(|err| {
            tagged_table_error(&value, &err)
                .unwrap_or_else(|| errors::describe_error(&value, "", None, &err))
                .in_file(label)
        })?;
        recipe.validate().map_err(|err| err.in_file(label))?;
        Ok(recipe)
    }

    /// Checks every value that can be checked without the data or the backend.
    ///
    /// ```
    /// use burn_mpric_train::Recipe;
    ///
    /// let mut r = Recipe::example();
    /// r.batch_size = 0;
    /// assert_eq!(r.validate().unwrap_err().to_string(), "batch_size: must be > 0, got 0");
    /// ```
    pub fn validate(&self) -> Result<(), RecipeError> {
        if self.batch_size == 0 {
            return Err(RecipeError::new("batch_size", "must be > 0, got 0"));
        }
        match (self.steps, self.epochs) {
            (Some(_), Some(_)) => {
                return Err(RecipeError::new(
                    "steps",
                    "give either steps or epochs, not both",
                ));
            }
            (None, None) => {
                return Err(RecipeError::new(
                    "steps",
                    "missing; give steps (or epochs) to say how long to train",
                ));
            }
            (Some(0), _) => return Err(RecipeError::new("steps", "must be > 0, got 0")),
            (_, Some(0)) => return Err(RecipeError::new("epochs", "must be > 0, got 0")),
            _ => {}
        }
        if self.checkpoint_every == Some(0) {
            return Err(RecipeError::new(
                "checkpoint_every",
                "must be > 0, got 0 (leave it out to checkpoint only at the end)",
            ));
        }
        if self.policy.param() == PolicyDType::Float(FloatDType::F64) {
            return Err(RecipeError::new(
                "policy",
                format!(
                    "`{}` keeps parameters at f64, which a checkpoint cannot restore exactly (Burn 0.21's records load floats through the backend's f32 element); use f32 or half parameters",
                    self.policy
                ),
            ));
        }
        let devices = self.backend.device_list();
        if self.backend.devices.is_some() && self.backend.device != 0 {
            return Err(RecipeError::new(
                "backend.devices",
                "give backend.device or backend.devices, not both",
            ));
        }
        if devices.is_empty() || devices.len() > 64 {
            return Err(RecipeError::new(
                "backend.devices",
                format!("must list 1 to 64 devices, got {}", devices.len()),
            ));
        }
        if self.strategy == Some(Strategy::Ddp) && !cfg!(feature = "ddp") {
            return Err(RecipeError::new(
                "strategy",
                "`ddp` needs burn-mpric-train's `ddp` feature (burn-collective), which this build leaves out; build with it, or use `multi_device`",
            ));
        }
        if devices.len() > self.batch_size {
            return Err(RecipeError::new(
                "backend.devices",
                format!(
                    "{} devices need a batch of at least {} (one sample per device), got batch_size {}",
                    devices.len(),
                    devices.len(),
                    self.batch_size
                ),
            ));
        }
        if self.max_consecutive_skips == Some(0) {
            return Err(RecipeError::new(
                "max_consecutive_skips",
                "must be > 0, got 0 (leave it out for the default, 50)",
            ));
        }
        if let Some(norm) = self.clip_grad_norm {
            positive("clip_grad_norm", f64::from(norm))?;
        }
        if self.output.as_os_str().is_empty() {
            return Err(RecipeError::new(
                "output",
                "must be a folder path, got \"\"",
            ));
        }
        self.op_overrides()?;
        self.model.validate()?;
        self.dataset.source()?;
        let text_model = matches!(self.model, ModelConfig::TransformerLm(_));
        if text_model != self.dataset.is_text() {
            let (field, accepted) = match (text_model, self.dataset.kind) {
                (true, None) => ("dataset.name", "tiny_text, or kind `text`"),
                (true, Some(_)) => ("dataset.kind", "`text`, or the bundled tiny_text"),
                (false, None) => (
                    "dataset.name",
                    "iris, winequality, diabetes, or kind `csv` or `image_folder`",
                ),
                (false, Some(_)) => (
                    "dataset.kind",
                    "`csv` or `image_folder`, or the bundled iris, winequality, diabetes",
                ),
            };
            return Err(RecipeError::new(
                field,
                format!(
                    "model kind `{}` trains on {accepted}; got `{}`",
                    self.model.kind(),
                    self.dataset.label()
                ),
            ));
        }
        let fraction = self.dataset.eval_fraction();
        if !(fraction > 0.0 && fraction < 0.9) {
            return Err(RecipeError::new(
                "dataset.eval_fraction",
                format!("must be in (0, 0.9), got {fraction}"),
            ));
        }
        self.optimizer.validate()?;
        self.schedule.validate(self.optimizer.lr())?;
        if let Some(steps) = self.steps
            && self.schedule.warmup_steps >= steps
        {
            return Err(RecipeError::new(
                "schedule.warmup_steps",
                format!(
                    "must be less than steps ({steps}), got {}",
                    self.schedule.warmup_steps
                ),
            ));
        }
        self.loss_scale.validate()?;
        self.validate_sync_every()?;
        Ok(())
    }

    /// `sync_every`: a positive count, and only where the device path can take the step.
    fn validate_sync_every(&self) -> Result<(), RecipeError> {
        let Some(every) = self.sync_every else {
            return Ok(());
        };
        let refuse = |why: &str| Err(RecipeError::new("sync_every", why.to_string()));
        if every == 0 {
            return refuse("must be > 0, got 0 (leave it out to read every step on the host)");
        }
        if self.clip_grad_norm.is_some() {
            return refuse(
                "the device path cannot clip gradients (the global norm would be read on the \
                 host every step); remove clip_grad_norm or sync_every",
            );
        }
        if self.strategy == Some(Strategy::Ddp) {
            return refuse(
                "strategy \"ddp\" steps on the host; use multi_device (or processes, --world) with \
                 sync_every",
            );
        }
        if !self.optimizer.precision().is_f32() {
            return refuse(
                "the device path keeps the optimizer state and parameters at f32; remove \
                 state/master under [optimizer] or sync_every",
            );
        }
        Ok(())
    }

    /// A small valid recipe (iris, MLP, Adam, 20 steps), for examples and tests.
    ///
    /// ```
    /// use burn_mpric_train::Recipe;
    ///
    /// assert!(Recipe::example().validate().is_ok());
    /// ```
    pub fn example() -> Self {
        Self {
            seed: 0,
            batch_size: 16,
            steps: Some(20),
            epochs: None,
            output: PathBuf::from("runs/example"),
            checkpoint_every: None,
            clip_grad_norm: None,
            sync_every: None,
            max_consecutive_skips: None,
            strategy: None,
            policy: Policy::F32,
            ops: BTreeMap::new(),
            softmax: None,
            loss_scale: LossScaleSpec::default(),
            model: ModelConfig::Mlp(MlpConfig { hidden: vec![64] }),
            dataset: DatasetConfig::builtin(DatasetName::Iris),
            backend: BackendConfig::default(),
            optimizer: OptimizerConfig::Adam(AdamSettings::new(0.01)),
            schedule: ScheduleConfig::default(),
        }
    }

    /// Skipped steps in a row that stop the run (see [`DEFAULT_MAX_CONSECUTIVE_SKIPS`]).
    ///
    /// ```
    /// use burn_mpric_train::Recipe;
    ///
    /// let recipe = Recipe { max_consecutive_skips: Some(5), ..Recipe::example() };
    /// assert_eq!(recipe.max_consecutive_skips(), 5);
    /// ```
    pub fn max_consecutive_skips(&self) -> u64 {
        self.max_consecutive_skips
            .unwrap_or(DEFAULT_MAX_CONSECUTIVE_SKIPS)
    }

    /// The same recipe with every default spelled out (model sizes, optimizer settings, the
    /// held-out share, the cosine floor, loss-scale table fields), so that two recipes that
    /// train alike compare equal whether a default is written or left out.
    ///
    /// ```
    /// use burn_mpric_train::Recipe;
    /// use burn_mpric_train::recipe::{AdamSettings, OptimizerConfig};
    ///
    /// let mut spelled = Recipe::example();
    /// spelled.optimizer = OptimizerConfig::Adam(AdamSettings { weight_decay: Some(0.0), ..AdamSettings::new(0.01) });
    /// assert_ne!(spelled, Recipe::example());
    /// assert_eq!(spelled.explicit()?, Recipe::example().explicit()?);
    /// spelled.backend.devices = Some(vec![0]);
    /// assert_eq!(spelled.explicit()?, Recipe::example().explicit()?);
    /// # Ok::<(), burn_mpric_train::RecipeError>(())
    /// ```
    pub fn explicit(&self) -> Result<Recipe, RecipeError> {
        let mut recipe = self.clone();
        recipe.model = self.model.explicit();
        recipe.optimizer = self.optimizer.explicit();
        recipe.dataset = self.dataset.explicit()?;
        if self.schedule.kind == ScheduleKind::Cosine {
            recipe.schedule.min_lr = Some(self.schedule.min_lr.unwrap_or(0.0));
        }
        recipe.loss_scale = self.loss_scale.explicit()?;
        recipe.softmax = Some(self.softmax.unwrap_or_default());
        recipe.ops = self
            .op_overrides()?
            .into_iter()
            .map(|(op, category)| (op.name().to_string(), category.to_string()))
            .collect();
        // `devices = [3]` is `device = 3`; several devices train with `multi_device` unless
        // the recipe says otherwise, and one device has no strategy.
        let devices = self.backend.device_list();
        recipe.backend.device = devices.first().copied().unwrap_or(0);
        recipe.backend.devices = (devices.len() > 1).then_some(devices.clone());
        recipe.strategy =
            (devices.len() > 1).then(|| self.strategy.unwrap_or(Strategy::MultiDevice));
        Ok(recipe)
    }

    /// The `[ops]` overrides, parsed: each op of the table with its category.
    ///
    /// ```
    /// use burn_mpric_train::Recipe;
    /// use burn_mpric::{Op, OpCategory};
    ///
    /// let mut recipe = Recipe::example();
    /// recipe.ops.insert("float_matmul".into(), "full".into());
    /// assert_eq!(recipe.op_overrides().unwrap(), [(Op::Matmul, OpCategory::FullPrecision)]);
    /// recipe.ops.insert("matmool".into(), "full".into());
    /// assert!(recipe.op_overrides().unwrap_err().to_string().starts_with("ops.matmool: unknown op `matmool`"));
    /// ```
    pub fn op_overrides(&self) -> Result<Vec<(Op, OpCategory)>, RecipeError> {
        self.ops
            .iter()
            .map(|(op, category)| {
                let field = format!("ops.{op}");
                let op: Op = op.parse().map_err(|e: burn_mpric::UnknownName| {
                    RecipeError::new(&field, e.to_string())
                })?;
                let category: OpCategory =
                    category.parse().map_err(|e: burn_mpric::UnknownName| {
                        RecipeError::new(&field, e.to_string())
                    })?;
                Ok((op, category))
            })
            .collect()
    }

    /// The mixed-precision settings the recipe trains with: its policy, `softmax` and
    /// `[ops]` overrides.
    ///
    /// ```
    /// use burn_mpric_train::Recipe;
    /// use burn_mpric::{Op, OpCategory, SoftmaxPrecision};
    ///
    /// let mut recipe = Recipe::example();
    /// recipe.ops.insert("linear".into(), "full".into());
    /// recipe.softmax = Some(SoftmaxPrecision::Stored);
    /// let settings = recipe.settings().unwrap();
    /// assert_eq!(settings.policy(), recipe.policy);
    /// assert_eq!(settings.category(Op::Linear), OpCategory::FullPrecision);
    /// assert_eq!(settings.softmax(), SoftmaxPrecision::Stored);
    /// ```
    pub fn settings(&self) -> Result<MpSettings, RecipeError> {
        let settings =
            MpSettings::new(self.policy).softmax_precision(self.softmax.unwrap_or_default());
        Ok(self
            .op_overrides()?
            .into_iter()
            .fold(settings, |s, (op, category)| s.with_category(op, category)))
    }

    /// The number of steps of the run, given the steps per epoch of its data.
    ///
    /// ```
    /// use burn_mpric_train::Recipe;
    ///
    /// let mut r = Recipe::example();
    /// assert_eq!(r.total_steps(7), 20);
    /// r.steps = None;
    /// r.epochs = Some(3);
    /// assert_eq!(r.total_steps(7), 21);
    /// ```
    pub fn total_steps(&self, steps_per_epoch: u64) -> u64 {
        match (self.steps, self.epochs) {
            (Some(steps), _) => steps,
            (None, Some(epochs)) => epochs.saturating_mul(steps_per_epoch.max(1)),
            (None, None) => 0,
        }
    }
}

/// The error inside a tagged table (`[model]`, `[optimizer]`): serde reads such a table whole
/// before it knows the kind, so its own error stops at the table; reading the table again as
/// the kind's settings finds the field (`model.hidden[1]`, `optimizer.lr`).
fn tagged_table_error(
    value: &Value,
    err: &serde_path_to_error::Error<serde_json::Error>,
) -> Option<RecipeError> {
    let table = err.path().to_string();
    let mut fields = value.get(&table)?.as_object()?.clone();
    let kind = fields.remove("kind")?;
    let kind = kind.as_str()?;
    let fields = Value::Object(fields);
    fn settings<T: serde::de::DeserializeOwned>(
        table: &str,
        kind: &str,
        fields: Value,
    ) -> Option<RecipeError> {
        serde_path_to_error::deserialize::<_, T>(&fields)
            .err()
            .map(|err| errors::describe_error(&fields, table, Some(kind), &err))
    }
    match (table.as_str(), kind) {
        ("model", "mlp") => settings::<MlpConfig>(&table, kind, fields),
        ("model", "conv") => settings::<ConvConfig>(&table, kind, fields),
        ("model", "transformer_lm") => settings::<TransformerLmConfig>(&table, kind, fields),
        ("optimizer", "adam" | "adamw") => settings::<AdamSettings>(&table, kind, fields),
        ("optimizer", "sgd") => settings::<SgdSettings>(&table, kind, fields),
        _ => None,
    }
}

/// What each top-level field, `[ops]` entry (`ops.*`), `[backend]` and `[schedule]` field
/// accepts and a line that sets it, by its dotted path (`""`: the recipe itself).
pub(super) fn field_help(field: &str) -> Option<Help> {
    Some(match field {
        "" => help(
            "a recipe: top-level fields (batch_size, steps, output, ...) and the tables [model], [dataset], [optimizer]",
            "batch_size = 32",
        ),
        "seed" => help("a whole number, 0 or more", "seed = 0"),
        "batch_size" => help(
            format!("{WHOLE_ABOVE_0} (examples per step)"),
            "batch_size = 32",
        ),
        "steps" => help(WHOLE_ABOVE_0, "steps = 300"),
        "epochs" => help(WHOLE_ABOVE_0, "epochs = 10"),
        "output" => help("a folder path in quotes", "output = \"runs/quickstart\""),
        "checkpoint_every" => help(
            format!("{WHOLE_ABOVE_0} (steps between checkpoints)"),
            "checkpoint_every = 100",
        ),
        "clip_grad_norm" => help("a number above 0", "clip_grad_norm = 1.0"),
        "sync_every" => help(
            format!("{WHOLE_ABOVE_0} (steps between reads of the device-decided steps)"),
            "sync_every = 10",
        ),
        "max_consecutive_skips" => help(WHOLE_ABOVE_0, "max_consecutive_skips = 50"),
        "strategy" => help(one_of(&["multi_device", "ddp"]), "strategy = \"ddp\""),
        "policy" => help(
            "a policy name in quotes (`f32`, `mixed_f16`, `mixed_bf16`, ...) or `p=<dtype>,c=<dtype>,o=<dtype>`",
            "policy = \"mixed_bf16\"",
        ),
        "softmax" => help(one_of(&["half", "stored", "full"]), "softmax = \"stored\""),
        "ops" => help(
            "a table of op names, each set to `compute`, `full` or `promote`",
            "linear = \"full\" under [ops]",
        ),
        "ops.*" => help(
            one_of(&["compute", "full", "promote"]),
            "linear = \"full\" under [ops]",
        ),
        "backend" => help(
            "a [backend] table with `name` and `device` or `devices`",
            "name = \"flex\" under [backend]",
        ),
        "backend.name" => help(
            one_of(&["flex", "ndarray", "wgpu", "vulkan", "metal", "cuda"]),
            "name = \"wgpu\" under [backend]",
        ),
        "backend.device" => help(
            "a device index, a whole number, 0 or more",
            "device = 0 under [backend]",
        ),
        "backend.devices" => help(
            "an array of device indices, whole numbers, 0 or more",
            "devices = [0, 1] under [backend]",
        ),
        "backend.devices[]" => help(
            "a device index, a whole number, 0 or more",
            "devices = [0, 1] under [backend]",
        ),
        "schedule" => help(
            "a [schedule] table with `kind`, `warmup_steps` and `min_lr`",
            "kind = \"cosine\" under [schedule]",
        ),
        "schedule.kind" => help(
            one_of(&["constant", "cosine"]),
            "kind = \"cosine\" under [schedule]",
        ),
        "schedule.warmup_steps" => help(
            "a whole number of steps, 0 or more",
            "warmup_steps = 10 under [schedule]",
        ),
        "schedule.min_lr" => help(
            "a number, 0 or more, at most optimizer.lr",
            "min_lr = 0.0001 under [schedule]",
        ),
        _ => return None,
    })
}
