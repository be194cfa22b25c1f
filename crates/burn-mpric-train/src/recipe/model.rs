//! The recipe's `[model]` table: [`ModelConfig`], tagged by `kind`.

use crate::recipe::help::{Help, help, one_of};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::RecipeError;

/// The `[model]` table: `kind` names the model and the other fields are its sizes, each left
/// out at its default. It deserializes straight into this enum; [`validate`](Self::validate)
/// checks the ranges.
///
/// ```
/// use burn_mpric_train::recipe::{MlpConfig, ModelConfig};
///
/// let model: ModelConfig = serde_json::from_str(r#"{"kind": "mlp", "hidden": [8]}"#).unwrap();
/// assert_eq!(model, ModelConfig::Mlp(MlpConfig { hidden: vec![8] }));
/// assert_eq!(model.kind(), "mlp");
/// let lm: ModelConfig = serde_json::from_str(r#"{"kind": "transformer_lm"}"#).unwrap();
/// assert!(matches!(lm, ModelConfig::TransformerLm(ref c) if c.d_model == 64 && c.d_ff() == 256));
/// assert!(serde_json::from_str::<ModelConfig>(r#"{"kind": "mlp", "d_model": 8}"#).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelConfig {
    /// Dense layers with ReLU.
    Mlp(MlpConfig),
    /// Conv1d layers with ReLU over the features, then dense layers.
    Conv(ConvConfig),
    /// Token + position embeddings, pre-norm transformer blocks with a causal mask, a head.
    TransformerLm(TransformerLmConfig),
}

/// [`ModelConfig::Mlp`]'s sizes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MlpConfig {
    /// Hidden layer widths (default `[64]`).
    #[serde(default = "MlpConfig::default_hidden")]
    pub hidden: Vec<usize>,
}

/// [`ModelConfig::Conv`]'s sizes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConvConfig {
    /// Output channels of each convolution (default `[16, 16]`).
    #[serde(default = "ConvConfig::default_channels")]
    pub channels: Vec<usize>,
    /// Convolution kernel size, odd ("same" padding; default 3).
    #[serde(default = "ConvConfig::default_kernel_size")]
    pub kernel_size: usize,
    /// Dense widths after flattening (default `[32]`).
    #[serde(default = "ConvConfig::default_hidden")]
    pub hidden: Vec<usize>,
}

/// [`ModelConfig::TransformerLm`]'s sizes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformerLmConfig {
    /// Embedding width (default 64).
    #[serde(default = "TransformerLmConfig::default_d_model")]
    pub d_model: usize,
    /// Attention heads; must divide `d_model` (default 4).
    #[serde(default = "TransformerLmConfig::default_heads")]
    pub heads: usize,
    /// Transformer blocks (default 2).
    #[serde(default = "TransformerLmConfig::default_layers")]
    pub layers: usize,
    /// Feed-forward width; [`d_ff`](Self::d_ff) is 4 × `d_model` when it is left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub d_ff: Option<usize>,
    /// Context length in characters (default 64).
    #[serde(default = "TransformerLmConfig::default_context")]
    pub context: usize,
}

impl MlpConfig {
    fn default_hidden() -> Vec<usize> {
        vec![64]
    }
}

impl ConvConfig {
    fn default_channels() -> Vec<usize> {
        vec![16, 16]
    }

    fn default_kernel_size() -> usize {
        3
    }

    fn default_hidden() -> Vec<usize> {
        vec![32]
    }
}

impl TransformerLmConfig {
    fn default_d_model() -> usize {
        64
    }

    fn default_heads() -> usize {
        4
    }

    fn default_layers() -> usize {
        2
    }

    fn default_context() -> usize {
        64
    }

    /// The feed-forward width: as given, or 4 × `d_model`.
    ///
    /// ```
    /// use burn_mpric_train::recipe::{ModelConfig, TransformerLmConfig};
    ///
    /// let ModelConfig::TransformerLm(c) = ModelConfig::default_of("transformer_lm").unwrap() else { unreachable!() };
    /// assert_eq!(c.d_ff(), 4 * c.d_model);
    /// assert_eq!(TransformerLmConfig { d_ff: Some(7), ..c }.d_ff(), 7);
    /// ```
    pub fn d_ff(&self) -> usize {
        self.d_ff.unwrap_or(4 * self.d_model)
    }
}

impl ModelConfig {
    /// Every kind's name, as recipes write it.
    pub const KINDS: [&'static str; 3] = ["mlp", "conv", "transformer_lm"];

    /// The model `kind` with every size at its default, or `None` for a name that is not one
    /// of [`KINDS`](Self::KINDS).
    ///
    /// ```
    /// use burn_mpric_train::recipe::ModelConfig;
    ///
    /// assert!(ModelConfig::default_of("conv").unwrap().validate().is_ok());
    /// assert!(ModelConfig::default_of("resnet").is_none());
    /// ```
    pub fn default_of(kind: &str) -> Option<Self> {
        serde_json::from_value(serde_json::json!({ "kind": kind })).ok()
    }

    /// The kind's name (`mlp`, `conv`, `transformer_lm`).
    ///
    /// ```
    /// use burn_mpric_train::recipe::ModelConfig;
    ///
    /// assert_eq!(ModelConfig::default_of("conv").unwrap().kind(), "conv");
    /// ```
    pub fn kind(&self) -> &'static str {
        match self {
            ModelConfig::Mlp(_) => Self::KINDS[0],
            ModelConfig::Conv(_) => Self::KINDS[1],
            ModelConfig::TransformerLm(_) => Self::KINDS[2],
        }
    }

    /// Checks the sizes: widths between 1 and 65536, an odd kernel, heads that divide
    /// `d_model`, ...; the error names the field.
    ///
    /// ```
    /// use burn_mpric_train::recipe::{ConvConfig, ModelConfig, TransformerLmConfig};
    ///
    /// let ModelConfig::TransformerLm(lm) = ModelConfig::default_of("transformer_lm").unwrap() else { unreachable!() };
    /// let bad = ModelConfig::TransformerLm(TransformerLmConfig { d_model: 30, heads: 4, ..lm });
    /// assert_eq!(bad.validate().unwrap_err().to_string(), "model.heads: must divide d_model (30), got 4");
    /// let ModelConfig::Conv(conv) = ModelConfig::default_of("conv").unwrap() else { unreachable!() };
    /// let bad = ModelConfig::Conv(ConvConfig { kernel_size: 4, ..conv });
    /// assert_eq!(bad.validate().unwrap_err().field, "model.kernel_size");
    /// ```
    pub fn validate(&self) -> Result<(), RecipeError> {
        let widths = |name: &str, values: &[usize]| -> Result<(), RecipeError> {
            match values.iter().position(|v| *v == 0 || *v > 65_536) {
                Some(i) => Err(RecipeError::new(
                    format!("model.{name}[{i}]"),
                    format!("must be between 1 and 65536, got {}", values[i]),
                )),
                None => Ok(()),
            }
        };
        let size = |name: &str, value: usize, max: usize| -> Result<(), RecipeError> {
            if value == 0 || value > max {
                Err(RecipeError::new(
                    format!("model.{name}"),
                    format!("must be between 1 and {max}, got {value}"),
                ))
            } else {
                Ok(())
            }
        };
        match self {
            ModelConfig::Mlp(c) => widths("hidden", &c.hidden),
            ModelConfig::Conv(c) => {
                if c.channels.is_empty() {
                    return Err(RecipeError::new(
                        "model.channels",
                        "needs at least one convolution, e.g. [16, 16]",
                    ));
                }
                widths("channels", &c.channels)?;
                size("kernel_size", c.kernel_size, 15)?;
                if c.kernel_size % 2 == 0 {
                    return Err(RecipeError::new(
                        "model.kernel_size",
                        format!("must be odd (same padding), got {}", c.kernel_size),
                    ));
                }
                widths("hidden", &c.hidden)
            }
            ModelConfig::TransformerLm(c) => {
                size("d_model", c.d_model, 4096)?;
                size("heads", c.heads, 64)?;
                if c.d_model % c.heads != 0 {
                    return Err(RecipeError::new(
                        "model.heads",
                        format!("must divide d_model ({}), got {}", c.d_model, c.heads),
                    ));
                }
                size("layers", c.layers, 48)?;
                size("d_ff", c.d_ff(), 16_384)?;
                size("context", c.context, 4096)
            }
        }
    }

    /// The same model with every size spelled out (`d_ff` included).
    ///
    /// ```
    /// use burn_mpric_train::recipe::ModelConfig;
    ///
    /// let ModelConfig::TransformerLm(c) = ModelConfig::default_of("transformer_lm").unwrap().explicit() else { unreachable!() };
    /// assert_eq!(c.d_ff, Some(256));
    /// ```
    pub fn explicit(&self) -> Self {
        match self {
            ModelConfig::TransformerLm(c) => ModelConfig::TransformerLm(TransformerLmConfig {
                d_ff: Some(c.d_ff()),
                ..c.clone()
            }),
            other => other.clone(),
        }
    }
}

impl fmt::Display for ModelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelConfig::Mlp(c) => write!(f, "mlp, hidden {:?}", c.hidden),
            ModelConfig::Conv(c) => write!(
                f,
                "conv, channels {:?}, kernel {}, hidden {:?}",
                c.channels, c.kernel_size, c.hidden
            ),
            ModelConfig::TransformerLm(c) => write!(
                f,
                "transformer_lm, d_model {}, {} heads, {} layers, d_ff {}, context {}",
                c.d_model,
                c.heads,
                c.layers,
                c.d_ff(),
                c.context
            ),
        }
    }
}

/// What each field of `[model]` accepts and a line that sets it, by its path below the table
/// (`""`: the table; `hidden[]`: an entry of `hidden`).
pub(super) fn field_help(field: &str) -> Option<Help> {
    Some(match field {
        "" => help(
            format!(
                "a [model] table with `kind` ({}) and the model's sizes",
                one_of(&ModelConfig::KINDS)
            ),
            "kind = \"mlp\" under [model]",
        ),
        "kind" => help(one_of(&ModelConfig::KINDS), "kind = \"mlp\" under [model]"),
        "hidden" => help(
            "an array of layer widths, whole numbers from 1 to 65536",
            "hidden = [64, 64] under [model]",
        ),
        "hidden[]" => help(
            "a layer width, a whole number from 1 to 65536",
            "hidden = [64, 64] under [model]",
        ),
        "channels" => help(
            "an array of channel counts, whole numbers from 1 to 65536",
            "channels = [16, 16] under [model]",
        ),
        "channels[]" => help(
            "a channel count, a whole number from 1 to 65536",
            "channels = [16, 16] under [model]",
        ),
        "kernel_size" => help(
            "an odd whole number from 1 to 15",
            "kernel_size = 3 under [model]",
        ),
        "d_model" => help(
            "a whole number from 1 to 4096",
            "d_model = 64 under [model]",
        ),
        "heads" => help(
            "a whole number from 1 to 64 that divides d_model",
            "heads = 4 under [model]",
        ),
        "layers" => help("a whole number from 1 to 48", "layers = 2 under [model]"),
        "d_ff" => help("a whole number from 1 to 16384", "d_ff = 256 under [model]"),
        "context" => help(
            "a whole number from 1 to 4096",
            "context = 64 under [model]",
        ),
        _ => return None,
    })
}
