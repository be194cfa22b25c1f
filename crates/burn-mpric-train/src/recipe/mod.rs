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

pub mod document;
pub mod loss_scale;
pub mod overrides;
pub mod plan;

use std::fmt;
use std::path::{Path, PathBuf};

use burn::tensor::FloatDType;
use burn_mpric::{Policy, PolicyDType};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, RecipeError};
use crate::recipe::loss_scale::LossScaleSpec;
use crate::recipe::overrides::apply_overrides;

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
    /// The loss scaling: a preset name or a table.
    #[serde(default)]
    pub loss_scale: LossScaleSpec,
    /// The model.
    pub model: ModelSpec,
    /// The data.
    pub dataset: DatasetSpec,
    /// Where to run.
    #[serde(default)]
    pub backend: BackendSpec,
    /// The optimizer.
    pub optimizer: OptimizerSpec,
    /// The learning-rate schedule.
    #[serde(default)]
    pub schedule: ScheduleSpec,
}

/// The built-in models.
///
/// ```
/// use burn_mpric_train::recipe::ModelKind;
///
/// assert_eq!(ModelKind::TransformerLm.to_string(), "transformer_lm");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    /// A multi-layer perceptron (tabular data).
    Mlp,
    /// A small 1-d convolutional net over the feature vector (tabular data).
    Conv,
    /// A small causal transformer language model (text).
    TransformerLm,
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ModelKind::Mlp => "mlp",
            ModelKind::Conv => "conv",
            ModelKind::TransformerLm => "transformer_lm",
        })
    }
}

/// The `[model]` table: a kind and its sizes (each kind accepts only its own fields).
///
/// ```
/// use burn_mpric_train::recipe::{ModelConfig, ModelKind, ModelSpec};
///
/// let spec = ModelSpec { kind: ModelKind::Mlp, hidden: Some(vec![8]), ..ModelSpec::new(ModelKind::Mlp) };
/// assert_eq!(spec.resolve().unwrap(), ModelConfig::Mlp { hidden: vec![8] });
/// let bad = ModelSpec { d_model: Some(8), ..ModelSpec::new(ModelKind::Mlp) };
/// assert_eq!(bad.resolve().unwrap_err().field, "model.d_model");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// `mlp`, `conv` or `transformer_lm`.
    pub kind: ModelKind,
    /// Hidden layer widths (mlp; conv: the dense layers after the convolutions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden: Option<Vec<usize>>,
    /// Output channels of each convolution (conv).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<Vec<usize>>,
    /// Convolution kernel size, odd (conv).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_size: Option<usize>,
    /// Embedding width (transformer_lm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub d_model: Option<usize>,
    /// Attention heads; must divide `d_model` (transformer_lm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heads: Option<usize>,
    /// Transformer blocks (transformer_lm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<usize>,
    /// Feed-forward width (transformer_lm; default 4 × d_model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub d_ff: Option<usize>,
    /// Context length in characters (transformer_lm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<usize>,
}

/// A model with all its sizes decided.
///
/// ```
/// use burn_mpric_train::recipe::{ModelKind, ModelSpec, ModelConfig};
///
/// let lm = ModelSpec::new(ModelKind::TransformerLm).resolve().unwrap();
/// assert!(matches!(lm, ModelConfig::TransformerLm { d_model: 64, heads: 4, .. }));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelConfig {
    /// Dense layers with ReLU.
    Mlp {
        /// Hidden widths.
        hidden: Vec<usize>,
    },
    /// Conv1d layers with ReLU over the features, then dense layers.
    Conv {
        /// Channels per convolution.
        channels: Vec<usize>,
        /// Kernel size (odd, "same" padding).
        kernel_size: usize,
        /// Dense widths after flattening.
        hidden: Vec<usize>,
    },
    /// Token + position embeddings, pre-norm transformer blocks with a causal mask, a head.
    TransformerLm {
        /// Embedding width.
        d_model: usize,
        /// Attention heads.
        heads: usize,
        /// Blocks.
        layers: usize,
        /// Feed-forward width.
        d_ff: usize,
        /// Context length.
        context: usize,
    },
}

impl ModelSpec {
    /// A spec of `kind` with every size at its default.
    ///
    /// ```
    /// use burn_mpric_train::recipe::{ModelKind, ModelSpec};
    ///
    /// assert!(ModelSpec::new(ModelKind::Conv).resolve().is_ok());
    /// ```
    pub fn new(kind: ModelKind) -> Self {
        Self {
            kind,
            hidden: None,
            channels: None,
            kernel_size: None,
            d_model: None,
            heads: None,
            layers: None,
            d_ff: None,
            context: None,
        }
    }

    /// Checks the fields against the kind and fills in defaults.
    ///
    /// ```
    /// use burn_mpric_train::recipe::{ModelConfig, ModelKind, ModelSpec};
    ///
    /// let spec = ModelSpec { d_model: Some(30), heads: Some(4), ..ModelSpec::new(ModelKind::TransformerLm) };
    /// assert_eq!(spec.resolve().unwrap_err().to_string(), "model.heads: must divide d_model (30), got 4");
    /// let spec = ModelSpec { kernel_size: Some(4), ..ModelSpec::new(ModelKind::Conv) };
    /// assert_eq!(spec.resolve().unwrap_err().field, "model.kernel_size");
    /// assert_eq!(ModelSpec::new(ModelKind::Mlp).resolve().unwrap(), ModelConfig::Mlp { hidden: vec![64] });
    /// ```
    pub fn resolve(&self) -> Result<ModelConfig, RecipeError> {
        let allowed: &[&str] = match self.kind {
            ModelKind::Mlp => &["hidden"],
            ModelKind::Conv => &["channels", "kernel_size", "hidden"],
            ModelKind::TransformerLm => &["d_model", "heads", "layers", "d_ff", "context"],
        };
        let given = [
            ("hidden", self.hidden.is_some()),
            ("channels", self.channels.is_some()),
            ("kernel_size", self.kernel_size.is_some()),
            ("d_model", self.d_model.is_some()),
            ("heads", self.heads.is_some()),
            ("layers", self.layers.is_some()),
            ("d_ff", self.d_ff.is_some()),
            ("context", self.context.is_some()),
        ];
        for (name, present) in given {
            if present && !allowed.contains(&name) {
                return Err(RecipeError::new(
                    format!("model.{name}"),
                    format!(
                        "not a setting of model kind `{}`; its settings are: {}",
                        self.kind,
                        allowed.join(", ")
                    ),
                ));
            }
        }
        let widths = |name: &str, values: &[usize]| -> Result<(), RecipeError> {
            match values.iter().position(|v| *v == 0 || *v > 65_536) {
                Some(i) => Err(RecipeError::new(
                    format!("model.{name}[{i}]"),
                    format!("must be between 1 and 65536, got {}", values[i]),
                )),
                None => Ok(()),
            }
        };
        let size = |name: &str, value: usize, max: usize| -> Result<usize, RecipeError> {
            if value == 0 || value > max {
                Err(RecipeError::new(
                    format!("model.{name}"),
                    format!("must be between 1 and {max}, got {value}"),
                ))
            } else {
                Ok(value)
            }
        };
        Ok(match self.kind {
            ModelKind::Mlp => {
                let hidden = self.hidden.clone().unwrap_or_else(|| vec![64]);
                widths("hidden", &hidden)?;
                ModelConfig::Mlp { hidden }
            }
            ModelKind::Conv => {
                let channels = self.channels.clone().unwrap_or_else(|| vec![16, 16]);
                if channels.is_empty() {
                    return Err(RecipeError::new(
                        "model.channels",
                        "needs at least one convolution, e.g. [16, 16]",
                    ));
                }
                widths("channels", &channels)?;
                let kernel_size = size("kernel_size", self.kernel_size.unwrap_or(3), 15)?;
                if kernel_size % 2 == 0 {
                    return Err(RecipeError::new(
                        "model.kernel_size",
                        format!("must be odd (same padding), got {kernel_size}"),
                    ));
                }
                let hidden = self.hidden.clone().unwrap_or_else(|| vec![32]);
                widths("hidden", &hidden)?;
                ModelConfig::Conv {
                    channels,
                    kernel_size,
                    hidden,
                }
            }
            ModelKind::TransformerLm => {
                let d_model = size("d_model", self.d_model.unwrap_or(64), 4096)?;
                let heads = size("heads", self.heads.unwrap_or(4), 64)?;
                if d_model % heads != 0 {
                    return Err(RecipeError::new(
                        "model.heads",
                        format!("must divide d_model ({d_model}), got {heads}"),
                    ));
                }
                let layers = size("layers", self.layers.unwrap_or(2), 48)?;
                let d_ff = size("d_ff", self.d_ff.unwrap_or(4 * d_model), 16_384)?;
                let context = size("context", self.context.unwrap_or(64), 4096)?;
                ModelConfig::TransformerLm {
                    d_model,
                    heads,
                    layers,
                    d_ff,
                    context,
                }
            }
        })
    }
}

impl fmt::Display for ModelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelConfig::Mlp { hidden } => write!(f, "mlp, hidden {hidden:?}"),
            ModelConfig::Conv {
                channels,
                kernel_size,
                hidden,
            } => write!(
                f,
                "conv, channels {channels:?}, kernel {kernel_size}, hidden {hidden:?}"
            ),
            ModelConfig::TransformerLm {
                d_model,
                heads,
                layers,
                d_ff,
                context,
            } => write!(
                f,
                "transformer_lm, d_model {d_model}, {heads} heads, {layers} layers, d_ff {d_ff}, context {context}"
            ),
        }
    }
}

/// The bundled datasets.
///
/// ```
/// use burn_mpric_train::recipe::DatasetName;
///
/// assert_eq!(DatasetName::TinyText.to_string(), "tiny_text");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DatasetName {
    /// Iris flowers: 150 examples, 4 features, 3 classes (`linfa-datasets`).
    Iris,
    /// Red wine quality: 1599 examples, 11 features, quality 3-8 as 6 classes
    /// (`linfa-datasets`).
    Winequality,
    /// Diabetes progression: 442 examples, 10 features, regression (`linfa-datasets`).
    Diabetes,
    /// The text shipped with this crate (`data/tiny_text.txt`), characters as tokens.
    TinyText,
}

impl fmt::Display for DatasetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DatasetName::Iris => "iris",
            DatasetName::Winequality => "winequality",
            DatasetName::Diabetes => "diabetes",
            DatasetName::TinyText => "tiny_text",
        })
    }
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
pub const DEFAULT_MAX_CONSECUTIVE_SKIPS: u64 = 50;

/// The largest learning rate a recipe accepts. Learning rates in practice lie below 1; a
/// larger one turns the parameters into infinities within a step or two.
///
/// ```
/// use burn_mpric_train::recipe::{MAX_LR, OptimizerKind, OptimizerSpec};
///
/// assert!(OptimizerSpec::new(OptimizerKind::Sgd, MAX_LR).resolve().is_ok());
/// let err = OptimizerSpec::new(OptimizerKind::Sgd, 1e308).resolve().unwrap_err();
/// assert_eq!(err.to_string(), "optimizer.lr: must be in (0, 10], got 1e308");
/// ```
pub const MAX_LR: f64 = 10.0;

/// The `[dataset]` table.
///
/// ```
/// use burn_mpric_train::recipe::{DatasetName, DatasetSpec};
///
/// let spec: DatasetSpec = serde_json::from_str(r#"{"name": "iris"}"#).unwrap();
/// assert_eq!(spec.eval_fraction(), 0.2);
/// assert_eq!(spec.name, DatasetName::Iris);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetSpec {
    /// `iris`, `winequality`, `diabetes` or `tiny_text`.
    pub name: DatasetName,
    /// The share held out for evaluation (default 0.2; 0.1 for text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_fraction: Option<f64>,
}

impl DatasetSpec {
    /// The evaluation share, with its default.
    ///
    /// ```
    /// use burn_mpric_train::recipe::{DatasetName, DatasetSpec};
    ///
    /// let text = DatasetSpec { name: DatasetName::TinyText, eval_fraction: None };
    /// assert_eq!(text.eval_fraction(), 0.1);
    /// ```
    pub fn eval_fraction(&self) -> f64 {
        self.eval_fraction.unwrap_or(match self.name {
            DatasetName::TinyText => 0.1,
            _ => 0.2,
        })
    }
}

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
    /// wgpu (Vulkan, Metal, DX12; f32 and f16 where the adapter has it).
    Wgpu,
    /// CUDA (needs the crate's `cuda` feature).
    Cuda,
}

impl fmt::Display for BackendName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendName::Flex => "flex",
            BackendName::NdArray => "ndarray",
            BackendName::Wgpu => "wgpu",
            BackendName::Cuda => "cuda",
        })
    }
}

/// The `[backend]` table.
///
/// ```
/// use burn_mpric_train::recipe::{BackendName, BackendSpec};
///
/// assert_eq!(BackendSpec::default().name, BackendName::Flex);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendSpec {
    /// `flex` (default), `ndarray`, `wgpu` or `cuda`.
    #[serde(default = "default_backend")]
    pub name: BackendName,
    /// Device index: 0 for the CPU backends; for wgpu 0 is the default adapter and n ≥ 1
    /// the n-th discrete GPU; for cuda the GPU index.
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

impl Default for BackendSpec {
    fn default() -> Self {
        Self {
            name: BackendName::Flex,
            device: 0,
            devices: None,
        }
    }
}

impl BackendSpec {
    /// The devices a run uses, the main one first.
    ///
    /// ```
    /// use burn_mpric_train::recipe::BackendSpec;
    ///
    /// assert_eq!(BackendSpec::default().device_list(), vec![0]);
    /// let two = BackendSpec { devices: Some(vec![1, 2]), ..BackendSpec::default() };
    /// assert_eq!(two.device_list(), vec![1, 2]);
    /// ```
    pub fn device_list(&self) -> Vec<usize> {
        self.devices.clone().unwrap_or_else(|| vec![self.device])
    }

    /// The devices, written as a person reads them (`device 0`, `devices [0, 1]`).
    ///
    /// ```
    /// use burn_mpric_train::recipe::BackendSpec;
    ///
    /// assert_eq!(BackendSpec::default().describe_devices(), "device 0");
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

/// The optimizers.
///
/// ```
/// use burn_mpric_train::recipe::OptimizerKind;
///
/// let k: OptimizerKind = serde_json::from_str("\"adamw\"").unwrap();
/// assert_eq!(k, OptimizerKind::AdamW);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerKind {
    /// Adam (weight decay as L2 on the gradient).
    Adam,
    /// AdamW (decoupled weight decay).
    #[serde(rename = "adamw")]
    AdamW,
    /// SGD with optional momentum.
    Sgd,
}

impl fmt::Display for OptimizerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OptimizerKind::Adam => "adam",
            OptimizerKind::AdamW => "adamw",
            OptimizerKind::Sgd => "sgd",
        })
    }
}

/// The `[optimizer]` table.
///
/// ```
/// use burn_mpric_train::recipe::{OptimizerConfig, OptimizerKind, OptimizerSpec};
///
/// let spec = OptimizerSpec { momentum: Some(0.9), ..OptimizerSpec::new(OptimizerKind::Sgd, 0.1) };
/// assert!(matches!(spec.resolve().unwrap(), OptimizerConfig::Sgd { momentum: 0.9, .. }));
/// let bad = OptimizerSpec { momentum: Some(0.9), ..OptimizerSpec::new(OptimizerKind::Adam, 0.1) };
/// assert_eq!(bad.resolve().unwrap_err().field, "optimizer.momentum");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimizerSpec {
    /// `adam`, `adamw` or `sgd`.
    pub kind: OptimizerKind,
    /// Peak learning rate (> 0).
    pub lr: f64,
    /// Weight decay (≥ 0; default 0, AdamW 0.01).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_decay: Option<f64>,
    /// Adam β1 (default 0.9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta1: Option<f64>,
    /// Adam β2 (default 0.999).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta2: Option<f64>,
    /// Adam ε (default 1e-8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epsilon: Option<f64>,
    /// SGD momentum (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub momentum: Option<f64>,
    /// SGD Nesterov momentum (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nesterov: Option<bool>,
}

/// An optimizer with every setting decided (the learning rate comes from the schedule).
///
/// ```
/// use burn_mpric_train::recipe::{OptimizerConfig, OptimizerKind, OptimizerSpec};
///
/// let adamw = OptimizerSpec::new(OptimizerKind::AdamW, 1e-3).resolve().unwrap();
/// assert_eq!(adamw, OptimizerConfig::AdamW { beta1: 0.9, beta2: 0.999, epsilon: 1e-8, weight_decay: 0.01 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OptimizerConfig {
    /// Adam.
    Adam {
        /// β1.
        beta1: f64,
        /// β2.
        beta2: f64,
        /// ε.
        epsilon: f64,
        /// L2 weight decay.
        weight_decay: f64,
    },
    /// AdamW.
    AdamW {
        /// β1.
        beta1: f64,
        /// β2.
        beta2: f64,
        /// ε.
        epsilon: f64,
        /// Decoupled weight decay.
        weight_decay: f64,
    },
    /// SGD.
    Sgd {
        /// Momentum (0 = none).
        momentum: f64,
        /// Nesterov.
        nesterov: bool,
        /// L2 weight decay.
        weight_decay: f64,
    },
}

impl OptimizerSpec {
    /// A spec of `kind` at learning rate `lr` with default settings.
    ///
    /// ```
    /// use burn_mpric_train::recipe::{OptimizerKind, OptimizerSpec};
    ///
    /// assert!(OptimizerSpec::new(OptimizerKind::AdamW, 1e-3).resolve().is_ok());
    /// ```
    pub fn new(kind: OptimizerKind, lr: f64) -> Self {
        Self {
            kind,
            lr,
            weight_decay: None,
            beta1: None,
            beta2: None,
            epsilon: None,
            momentum: None,
            nesterov: None,
        }
    }

    /// Checks the settings against the kind and fills in defaults.
    ///
    /// ```
    /// use burn_mpric_train::recipe::{OptimizerKind, OptimizerSpec};
    ///
    /// let bad = OptimizerSpec { beta2: Some(1.0), ..OptimizerSpec::new(OptimizerKind::Adam, 0.1) };
    /// assert_eq!(bad.resolve().unwrap_err().to_string(), "optimizer.beta2: must be in [0, 1), got 1");
    /// let bad = OptimizerSpec::new(OptimizerKind::Sgd, f64::NAN);
    /// assert_eq!(bad.resolve().unwrap_err().field, "optimizer.lr");
    /// ```
    pub fn resolve(&self) -> Result<OptimizerConfig, RecipeError> {
        if !(self.lr > 0.0 && self.lr <= MAX_LR) {
            return Err(RecipeError::new(
                "optimizer.lr",
                format!("must be in (0, {MAX_LR}], got {}", show(self.lr)),
            ));
        }
        let allowed: &[&str] = match self.kind {
            OptimizerKind::Adam | OptimizerKind::AdamW => {
                &["lr", "weight_decay", "beta1", "beta2", "epsilon"]
            }
            OptimizerKind::Sgd => &["lr", "weight_decay", "momentum", "nesterov"],
        };
        let given = [
            ("beta1", self.beta1.is_some()),
            ("beta2", self.beta2.is_some()),
            ("epsilon", self.epsilon.is_some()),
            ("momentum", self.momentum.is_some()),
            ("nesterov", self.nesterov.is_some()),
        ];
        for (name, present) in given {
            if present && !allowed.contains(&name) {
                return Err(RecipeError::new(
                    format!("optimizer.{name}"),
                    format!(
                        "not a setting of optimizer kind `{}`; its settings are: {}",
                        self.kind,
                        allowed.join(", ")
                    ),
                ));
            }
        }
        let default_decay = if self.kind == OptimizerKind::AdamW {
            0.01
        } else {
            0.0
        };
        let weight_decay = self.weight_decay.unwrap_or(default_decay);
        if !(0.0..=1.0).contains(&weight_decay) {
            return Err(RecipeError::new(
                "optimizer.weight_decay",
                format!("must be in [0, 1], got {}", show(weight_decay)),
            ));
        }
        let beta1 = unit("optimizer.beta1", self.beta1.unwrap_or(0.9))?;
        let beta2 = unit("optimizer.beta2", self.beta2.unwrap_or(0.999))?;
        let epsilon = self.epsilon.unwrap_or(1e-8);
        // The optimizers run at f32: an ε that rounds to 0 there would divide by zero.
        if !(epsilon <= 1.0 && epsilon as f32 > 0.0) {
            return Err(RecipeError::new(
                "optimizer.epsilon",
                format!(
                    "must be in (0, 1] and nonzero at f32 (at least about 1e-45), got {epsilon}"
                ),
            ));
        }
        let momentum = unit("optimizer.momentum", self.momentum.unwrap_or(0.0))?;
        let nesterov = self.nesterov.unwrap_or(false);
        if nesterov && momentum == 0.0 {
            return Err(RecipeError::new(
                "optimizer.nesterov",
                "needs optimizer.momentum > 0",
            ));
        }
        Ok(match self.kind {
            OptimizerKind::Adam => OptimizerConfig::Adam {
                beta1,
                beta2,
                epsilon,
                weight_decay,
            },
            OptimizerKind::AdamW => OptimizerConfig::AdamW {
                beta1,
                beta2,
                epsilon,
                weight_decay,
            },
            OptimizerKind::Sgd => OptimizerConfig::Sgd {
                momentum,
                nesterov,
                weight_decay,
            },
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
/// use burn_mpric_train::recipe::{ScheduleKind, ScheduleSpec};
///
/// let s = ScheduleSpec { kind: ScheduleKind::Cosine, warmup_steps: 10, min_lr: None };
/// assert_eq!(s.lr(1.0, 5, 100), 0.5);
/// assert_eq!(s.lr(1.0, 11, 100), 1.0);
/// assert!(s.lr(1.0, 100, 100) < 0.01);
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
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

impl ScheduleSpec {
    /// The learning rate of step `step` (1-based) of `total`, for peak `peak`.
    ///
    /// ```
    /// use burn_mpric_train::recipe::ScheduleSpec;
    ///
    /// let constant = ScheduleSpec::default();
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
fn show(value: f64) -> String {
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

fn unit(field: &str, value: f64) -> Result<f64, RecipeError> {
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
    /// let err = Recipe::from_toml_str("steps = [", "bad.toml", &[]).unwrap_err();
    /// assert!(err.to_string().starts_with("bad.toml: TOML syntax error at line 1"), "{err}");
    /// assert_eq!(err.exit_code(), 2);
    /// ```
    pub fn from_toml_str(text: &str, label: &str, overrides: &[String]) -> Result<Self, Error> {
        let table: toml::Table = toml::from_str(text).map_err(|err| {
            let message = err.message().replace('\n', " ");
            let position = err
                .span()
                .map(|span| {
                    let before = &text[..span.start.min(text.len())];
                    let line = before.matches('\n').count() + 1;
                    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                    format!("line {line}, column {column}: ")
                })
                .unwrap_or_default();
            RecipeError::new("", format!("TOML syntax error at {position}{message}")).in_file(label)
        })?;
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
    /// assert!(err.to_string().starts_with("r.json: seed: invalid value"), "{err}");
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
    ///
    /// let value = serde_json::to_value(Recipe::example()).unwrap();
    /// let recipe = Recipe::from_value(value, "r", &["model.hidden=[8, 8]".into()]).unwrap();
    /// assert_eq!(recipe.model.hidden, Some(vec![8, 8]));
    /// ```
    pub fn from_value(mut value: Value, label: &str, overrides: &[String]) -> Result<Self, Error> {
        apply_overrides(&mut value, overrides)?;
        let recipe: Recipe = serde_path_to_error::deserialize(value)
            .map_err(|err| serde_error(&err).in_file(label))?;
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
        let model = self.model.resolve()?;
        let text_model = matches!(model, ModelConfig::TransformerLm { .. });
        let text_data = self.dataset.name == DatasetName::TinyText;
        if text_model != text_data {
            let accepted = if text_model {
                "tiny_text"
            } else {
                "iris, winequality, diabetes"
            };
            return Err(RecipeError::new(
                "dataset.name",
                format!(
                    "model kind `{}` trains on {accepted}; got `{}`",
                    self.model.kind, self.dataset.name
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
        self.optimizer.resolve()?;
        self.schedule.validate(self.optimizer.lr)?;
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
            max_consecutive_skips: None,
            strategy: None,
            policy: Policy::F32,
            loss_scale: LossScaleSpec::default(),
            model: ModelSpec::new(ModelKind::Mlp),
            dataset: DatasetSpec {
                name: DatasetName::Iris,
                eval_fraction: None,
            },
            backend: BackendSpec::default(),
            optimizer: OptimizerSpec::new(OptimizerKind::Adam, 0.01),
            schedule: ScheduleSpec::default(),
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
    ///
    /// let mut spelled = Recipe::example();
    /// spelled.optimizer.beta1 = Some(0.9);
    /// assert_ne!(spelled, Recipe::example());
    /// assert_eq!(spelled.explicit()?, Recipe::example().explicit()?);
    /// spelled.backend.devices = Some(vec![0]);
    /// assert_eq!(spelled.explicit()?, Recipe::example().explicit()?);
    /// # Ok::<(), burn_mpric_train::RecipeError>(())
    /// ```
    pub fn explicit(&self) -> Result<Recipe, RecipeError> {
        let mut recipe = self.clone();
        recipe.model = match self.model.resolve()? {
            ModelConfig::Mlp { hidden } => ModelSpec {
                hidden: Some(hidden),
                ..ModelSpec::new(ModelKind::Mlp)
            },
            ModelConfig::Conv {
                channels,
                kernel_size,
                hidden,
            } => ModelSpec {
                channels: Some(channels),
                kernel_size: Some(kernel_size),
                hidden: Some(hidden),
                ..ModelSpec::new(ModelKind::Conv)
            },
            ModelConfig::TransformerLm {
                d_model,
                heads,
                layers,
                d_ff,
                context,
            } => ModelSpec {
                d_model: Some(d_model),
                heads: Some(heads),
                layers: Some(layers),
                d_ff: Some(d_ff),
                context: Some(context),
                ..ModelSpec::new(ModelKind::TransformerLm)
            },
        };
        let lr = self.optimizer.lr;
        recipe.optimizer = match self.optimizer.resolve()? {
            OptimizerConfig::Adam {
                beta1,
                beta2,
                epsilon,
                weight_decay,
            }
            | OptimizerConfig::AdamW {
                beta1,
                beta2,
                epsilon,
                weight_decay,
            } => OptimizerSpec {
                beta1: Some(beta1),
                beta2: Some(beta2),
                epsilon: Some(epsilon),
                weight_decay: Some(weight_decay),
                ..OptimizerSpec::new(self.optimizer.kind, lr)
            },
            OptimizerConfig::Sgd {
                momentum,
                nesterov,
                weight_decay,
            } => OptimizerSpec {
                momentum: Some(momentum),
                nesterov: Some(nesterov),
                weight_decay: Some(weight_decay),
                ..OptimizerSpec::new(self.optimizer.kind, lr)
            },
        };
        recipe.dataset.eval_fraction = Some(self.dataset.eval_fraction());
        if self.schedule.kind == ScheduleKind::Cosine {
            recipe.schedule.min_lr = Some(self.schedule.min_lr.unwrap_or(0.0));
        }
        recipe.loss_scale = self.loss_scale.explicit()?;
        // `devices = [3]` is `device = 3`; several devices train with `multi_device` unless
        // the recipe says otherwise, and one device has no strategy.
        let devices = self.backend.device_list();
        recipe.backend.device = devices.first().copied().unwrap_or(0);
        recipe.backend.devices = (devices.len() > 1).then_some(devices.clone());
        recipe.strategy =
            (devices.len() > 1).then(|| self.strategy.unwrap_or(Strategy::MultiDevice));
        Ok(recipe)
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

/// Turns a deserialization error into a field error with a readable message.
fn serde_error(err: &serde_path_to_error::Error<serde_json::Error>) -> RecipeError {
    let path = err.path().to_string();
    let path = if path == "." { String::new() } else { path };
    let message = err.inner().to_string();
    let join = |field: &str| {
        if path.is_empty() {
            field.to_string()
        } else {
            format!("{path}.{field}")
        }
    };
    if let Some(rest) = message.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or_default();
        return RecipeError::new(join(field), "missing; this field is required");
    }
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let field = rest.split('`').next().unwrap_or_default();
        let accepted = rest
            .split_once(", expected ")
            .map(|(_, expected)| expected.replace("one of ", ""))
            .unwrap_or_default();
        // The path may already end with the unknown key.
        let full = if path == field || path.ends_with(&format!(".{field}")) {
            path.clone()
        } else {
            join(field)
        };
        return RecipeError::new(full, format!("unknown field; accepted fields: {accepted}"));
    }
    let field = if path.is_empty() {
        "recipe".to_string()
    } else {
        path
    };
    RecipeError::new(field, message.replace('\n', " "))
}
