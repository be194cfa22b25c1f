//! The recipe's `[optimizer]` table: [`OptimizerConfig`], tagged by `kind`.

use crate::recipe::help::{Help, help, one_of};
use std::fmt;

use serde::{Deserialize, Serialize};

use burn_mpric_optim::{BytesPerParameter, MasterWeights, OptimizerPrecision, StateDtype};

use super::{MAX_LR, show, unit};
use crate::error::RecipeError;

/// The `[optimizer]` table: `kind` names the optimizer, `lr` is its peak learning rate (the
/// schedule takes it from there), and the other fields are its settings, each left out at its
/// default. It deserializes straight into this enum; [`validate`](Self::validate) checks the
/// ranges.
///
/// ```
/// use burn_mpric_train::recipe::OptimizerConfig;
///
/// let sgd: OptimizerConfig = serde_json::from_str(r#"{"kind": "sgd", "lr": 0.1, "momentum": 0.9}"#).unwrap();
/// assert!(matches!(sgd, OptimizerConfig::Sgd(ref s) if s.momentum == 0.9 && !s.nesterov));
/// assert_eq!((sgd.kind(), sgd.lr()), ("sgd", 0.1));
/// let adamw: OptimizerConfig = serde_json::from_str(r#"{"kind": "adamw", "lr": 1e-3}"#).unwrap();
/// assert_eq!(adamw.weight_decay(), 0.01);
/// // A setting of another kind is an unknown field.
/// assert!(serde_json::from_str::<OptimizerConfig>(r#"{"kind": "adam", "lr": 0.1, "momentum": 0.9}"#).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum OptimizerConfig {
    /// Adam (weight decay as L2 on the gradient, default 0).
    #[serde(rename = "adam")]
    Adam(AdamSettings),
    /// AdamW (decoupled weight decay, default 0.01).
    #[serde(rename = "adamw")]
    AdamW(AdamSettings),
    /// SGD with optional momentum.
    #[serde(rename = "sgd")]
    Sgd(SgdSettings),
}

/// The settings of [`OptimizerConfig::Adam`] and [`OptimizerConfig::AdamW`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdamSettings {
    /// Peak learning rate (> 0).
    pub lr: f64,
    /// Weight decay in [0, 1]: [`OptimizerConfig::weight_decay`] gives the kind's default
    /// when it is left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_decay: Option<f64>,
    /// β1 (default 0.9).
    #[serde(default = "AdamSettings::default_beta1")]
    pub beta1: f64,
    /// β2 (default 0.999).
    #[serde(default = "AdamSettings::default_beta2")]
    pub beta2: f64,
    /// ε (default 1e-8).
    #[serde(default = "AdamSettings::default_epsilon")]
    pub epsilon: f64,
    /// The dtype the optimizer's state (moments, velocity) is stored at between steps: `f32`
    /// (default) or `bf16`; each step computes at f32.
    #[serde(default, skip_serializing_if = "is_default")]
    pub state: StateDtype,
    /// How the parameters are kept: `f32` (default), or at bf16 with no f32 copy, updated by
    /// `stochastic` rounding or a `kahan` (compensated) update.
    #[serde(default, skip_serializing_if = "is_default")]
    pub master: MasterWeights,
}

/// The settings of [`OptimizerConfig::Sgd`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SgdSettings {
    /// Peak learning rate (> 0).
    pub lr: f64,
    /// L2 weight decay in [0, 1] (default 0).
    #[serde(default)]
    pub weight_decay: f64,
    /// Momentum in [0, 1) (default 0: none).
    #[serde(default)]
    pub momentum: f64,
    /// Nesterov momentum (default false; needs `momentum` > 0).
    #[serde(default)]
    pub nesterov: bool,
    /// The dtype the optimizer's state (moments, velocity) is stored at between steps: `f32`
    /// (default) or `bf16`; each step computes at f32.
    #[serde(default, skip_serializing_if = "is_default")]
    pub state: StateDtype,
    /// How the parameters are kept: `f32` (default), or at bf16 with no f32 copy, updated by
    /// `stochastic` rounding or a `kahan` (compensated) update.
    #[serde(default, skip_serializing_if = "is_default")]
    pub master: MasterWeights,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

impl AdamSettings {
    /// Settings at learning rate `lr`, every other one at its default.
    ///
    /// ```
    /// use burn_mpric_train::recipe::AdamSettings;
    ///
    /// assert_eq!(AdamSettings::new(1e-3).beta2, 0.999);
    /// ```
    pub fn new(lr: f64) -> Self {
        Self {
            lr,
            weight_decay: None,
            beta1: Self::default_beta1(),
            beta2: Self::default_beta2(),
            epsilon: Self::default_epsilon(),
            state: StateDtype::F32,
            master: MasterWeights::F32,
        }
    }

    fn default_beta1() -> f64 {
        0.9
    }

    fn default_beta2() -> f64 {
        0.999
    }

    fn default_epsilon() -> f64 {
        1e-8
    }
}

impl SgdSettings {
    /// Plain SGD at learning rate `lr`.
    ///
    /// ```
    /// use burn_mpric_train::recipe::SgdSettings;
    ///
    /// assert_eq!(SgdSettings::new(0.1).momentum, 0.0);
    /// ```
    pub fn new(lr: f64) -> Self {
        Self {
            lr,
            weight_decay: 0.0,
            momentum: 0.0,
            nesterov: false,
            state: StateDtype::F32,
            master: MasterWeights::F32,
        }
    }
}

impl OptimizerConfig {
    /// The kind's name (`adam`, `adamw`, `sgd`).
    ///
    /// ```
    /// use burn_mpric_train::recipe::{AdamSettings, OptimizerConfig};
    ///
    /// assert_eq!(OptimizerConfig::AdamW(AdamSettings::new(1e-3)).kind(), "adamw");
    /// ```
    pub fn kind(&self) -> &'static str {
        match self {
            OptimizerConfig::Adam(_) => "adam",
            OptimizerConfig::AdamW(_) => "adamw",
            OptimizerConfig::Sgd(_) => "sgd",
        }
    }

    /// The peak learning rate.
    ///
    /// ```
    /// use burn_mpric_train::recipe::{OptimizerConfig, SgdSettings};
    ///
    /// assert_eq!(OptimizerConfig::Sgd(SgdSettings::new(0.5)).lr(), 0.5);
    /// ```
    pub fn lr(&self) -> f64 {
        match self {
            OptimizerConfig::Adam(s) | OptimizerConfig::AdamW(s) => s.lr,
            OptimizerConfig::Sgd(s) => s.lr,
        }
    }

    /// The weight decay: as given, or the kind's default (AdamW 0.01, the others 0).
    ///
    /// ```
    /// use burn_mpric_train::recipe::{AdamSettings, OptimizerConfig};
    ///
    /// assert_eq!(OptimizerConfig::Adam(AdamSettings::new(1e-3)).weight_decay(), 0.0);
    /// ```
    pub fn weight_decay(&self) -> f64 {
        match self {
            OptimizerConfig::Adam(s) => s.weight_decay.unwrap_or(0.0),
            OptimizerConfig::AdamW(s) => s.weight_decay.unwrap_or(0.01),
            OptimizerConfig::Sgd(s) => s.weight_decay,
        }
    }

    /// The state dtype and master weights (seed 0; the run seeds them with the recipe's seed).
    ///
    /// ```
    /// use burn_mpric_train::recipe::OptimizerConfig;
    ///
    /// let adam: OptimizerConfig = serde_json::from_str(r#"{"kind": "adam", "lr": 1e-3, "state": "bf16", "master": "kahan"}"#).unwrap();
    /// assert_eq!(adam.precision().to_string(), "state=bf16,master=kahan");
    /// ```
    pub fn precision(&self) -> OptimizerPrecision {
        let (state, master) = match self {
            OptimizerConfig::Adam(s) | OptimizerConfig::AdamW(s) => (s.state, s.master),
            OptimizerConfig::Sgd(s) => (s.state, s.master),
        };
        OptimizerPrecision::new(state, master)
    }

    /// The number of per-element state tensors the optimizer keeps (Adam 2, SGD with momentum 1,
    /// plain SGD 0).
    ///
    /// ```
    /// use burn_mpric_train::recipe::{OptimizerConfig, SgdSettings};
    ///
    /// assert_eq!(OptimizerConfig::Sgd(SgdSettings::new(0.1)).state_slots(), 0);
    /// ```
    pub fn state_slots(&self) -> usize {
        match self {
            OptimizerConfig::Adam(_) | OptimizerConfig::AdamW(_) => 2,
            OptimizerConfig::Sgd(s) => usize::from(s.momentum > 0.0),
        }
    }

    /// What the optimizer keeps per parameter (see [`OptimizerMemory`]).
    ///
    /// ```
    /// use burn_mpric_train::recipe::{AdamSettings, OptimizerConfig};
    ///
    /// assert_eq!(OptimizerConfig::Adam(AdamSettings::new(1e-3)).memory().bytes_per_parameter.total(), 16);
    /// ```
    pub fn memory(&self) -> OptimizerMemory {
        let precision = self.precision();
        OptimizerMemory {
            optimizer: self.kind(),
            state: precision.state,
            master: precision.master,
            bytes_per_parameter: precision.bytes_per_parameter(self.state_slots()),
        }
    }

    /// Checks the settings' ranges; the error names the field.
    ///
    /// ```
    /// use burn_mpric_train::recipe::{AdamSettings, OptimizerConfig, SgdSettings};
    ///
    /// let bad = OptimizerConfig::Adam(AdamSettings { beta2: 1.0, ..AdamSettings::new(0.1) });
    /// assert_eq!(bad.validate().unwrap_err().to_string(), "optimizer.beta2: must be in [0, 1), got 1");
    /// let bad = OptimizerConfig::Sgd(SgdSettings::new(f64::NAN));
    /// assert_eq!(bad.validate().unwrap_err().field, "optimizer.lr");
    /// let bad = OptimizerConfig::Sgd(SgdSettings { nesterov: true, ..SgdSettings::new(0.1) });
    /// assert_eq!(bad.validate().unwrap_err().field, "optimizer.nesterov");
    /// let bad = OptimizerConfig::Sgd(SgdSettings { state: "bf16".parse().unwrap(), ..SgdSettings::new(0.1) });
    /// assert_eq!(bad.validate().unwrap_err().field, "optimizer.state");
    /// ```
    pub fn validate(&self) -> Result<(), RecipeError> {
        let name = match self {
            OptimizerConfig::Sgd(_) if self.state_slots() == 0 => "sgd without momentum",
            other => other.kind(),
        };
        self.precision()
            .check_for(name, self.state_slots())
            .map_err(|e| RecipeError::new("optimizer.state", e.to_string()))?;
        let lr = self.lr();
        if !(lr > 0.0 && lr <= MAX_LR) {
            return Err(RecipeError::new(
                "optimizer.lr",
                format!("must be in (0, {MAX_LR}], got {}", show(lr)),
            ));
        }
        let weight_decay = self.weight_decay();
        if !(0.0..=1.0).contains(&weight_decay) {
            return Err(RecipeError::new(
                "optimizer.weight_decay",
                format!("must be in [0, 1], got {}", show(weight_decay)),
            ));
        }
        match self {
            OptimizerConfig::Adam(s) | OptimizerConfig::AdamW(s) => {
                unit("optimizer.beta1", s.beta1)?;
                unit("optimizer.beta2", s.beta2)?;
                // The optimizers run at f32: an ε that rounds to 0 there would divide by zero.
                if !(s.epsilon <= 1.0 && s.epsilon as f32 > 0.0) {
                    return Err(RecipeError::new(
                        "optimizer.epsilon",
                        format!(
                            "must be in (0, 1] and nonzero at f32 (at least about 1e-45), got {}",
                            s.epsilon
                        ),
                    ));
                }
                Ok(())
            }
            OptimizerConfig::Sgd(s) => {
                unit("optimizer.momentum", s.momentum)?;
                if s.nesterov && s.momentum == 0.0 {
                    return Err(RecipeError::new(
                        "optimizer.nesterov",
                        "needs optimizer.momentum > 0",
                    ));
                }
                Ok(())
            }
        }
    }

    /// The same optimizer with its weight decay spelled out.
    ///
    /// ```
    /// use burn_mpric_train::recipe::{AdamSettings, OptimizerConfig};
    ///
    /// let OptimizerConfig::AdamW(s) = OptimizerConfig::AdamW(AdamSettings::new(1e-3)).explicit() else { unreachable!() };
    /// assert_eq!(s.weight_decay, Some(0.01));
    /// ```
    pub fn explicit(&self) -> Self {
        let weight_decay = Some(self.weight_decay());
        match *self {
            OptimizerConfig::Adam(s) => OptimizerConfig::Adam(AdamSettings { weight_decay, ..s }),
            OptimizerConfig::AdamW(s) => OptimizerConfig::AdamW(AdamSettings { weight_decay, ..s }),
            OptimizerConfig::Sgd(s) => OptimizerConfig::Sgd(s),
        }
    }
}

/// What the optimizer keeps per parameter between steps: its state's dtype, how parameters are
/// kept, and the bytes that makes per parameter, shown in the run summary and the audit.
///
/// ```
/// use burn_mpric_train::recipe::OptimizerConfig;
///
/// let adam: OptimizerConfig = serde_json::from_str(r#"{"kind": "adam", "lr": 1e-3, "state": "bf16", "master": "stochastic"}"#).unwrap();
/// let memory = adam.memory();
/// assert_eq!(memory.bytes_per_parameter.total(), 8);
/// assert_eq!(memory.to_string(), "optimizer adam, state bf16, master weights stochastic: 8 bytes per parameter (parameter 2, gradient 2, state 4)");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OptimizerMemory {
    /// The optimizer's kind.
    pub optimizer: &'static str,
    /// The dtype its state is stored at.
    pub state: StateDtype,
    /// How parameters are kept.
    pub master: MasterWeights,
    /// The bytes per parameter: parameter, gradient, state, compensation.
    pub bytes_per_parameter: BytesPerParameter,
}

impl fmt::Display for OptimizerMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.bytes_per_parameter;
        write!(
            f,
            "optimizer {}, state {}, master weights {}: {} bytes per parameter (parameter {}, gradient {}, state {}",
            self.optimizer,
            self.state,
            self.master,
            b.total(),
            b.param,
            b.grad,
            b.state
        )?;
        if b.compensation > 0 {
            write!(f, ", compensation {}", b.compensation)?;
        }
        f.write_str(")")
    }
}

impl fmt::Display for OptimizerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}

/// What each field of `[optimizer]` accepts and a line that sets it, by its path below the
/// table (`""`: the table).
pub(super) fn field_help(field: &str) -> Option<Help> {
    Some(match field {
        "" => help(
            "an [optimizer] table with `kind` (`adam`, `adamw` or `sgd`) and `lr`",
            "kind = \"adam\" under [optimizer]",
        ),
        "kind" => help(
            one_of(&["adam", "adamw", "sgd"]),
            "kind = \"adam\" under [optimizer]",
        ),
        "lr" => help(
            "a number above 0, at most 10",
            "lr = 0.001 under [optimizer]",
        ),
        "weight_decay" => help(
            "a number from 0 to 1",
            "weight_decay = 0.01 under [optimizer]",
        ),
        "beta1" => help(
            "a number from 0 up to (not including) 1",
            "beta1 = 0.9 under [optimizer]",
        ),
        "beta2" => help(
            "a number from 0 up to (not including) 1",
            "beta2 = 0.999 under [optimizer]",
        ),
        "epsilon" => help("a small number above 0", "epsilon = 1e-8 under [optimizer]"),
        "momentum" => help(
            "a number from 0 up to (not including) 1",
            "momentum = 0.9 under [optimizer]",
        ),
        "nesterov" => help("`true` or `false`", "nesterov = true under [optimizer]"),
        "state" => help(
            format!(
                "{} (the dtype the optimizer's state is stored at)",
                one_of(&["f32", "bf16"])
            ),
            "state = \"bf16\" under [optimizer]",
        ),
        "master" => help(
            format!(
                "{} (parameters at f32, or at bf16 updated by stochastic rounding or a compensated update)",
                one_of(&["f32", "stochastic", "kahan"])
            ),
            "master = \"stochastic\" under [optimizer]",
        ),
        _ => return None,
    })
}
