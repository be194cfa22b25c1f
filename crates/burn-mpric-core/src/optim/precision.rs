//! The settings: the dtype the optimizer's state is stored at, and how parameters are kept.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The dtype an optimizer's per-element state (Adam's moments, SGD's velocity) is stored at
/// between steps. Each step computes at f32 inside and stores the result back.
///
/// f16 is refused: Adam's second moment is a squared gradient, and squares of the gradients
/// mixed precision produces (often below 2^-12) underflow f16's smallest normal, 2^-14, so
/// the update divides by a flushed or denormal root. bf16 has f32's exponent range.
///
/// # Example
///
/// ```
/// use burn_mpric_core::optim::StateDtype;
///
/// assert_eq!("bf16".parse::<StateDtype>().unwrap(), StateDtype::Bf16);
/// assert_eq!(StateDtype::Bf16.bytes(), 2);
/// let refused = "f16".parse::<StateDtype>().unwrap_err().to_string();
/// assert!(refused.contains("underflow"), "{refused}");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum StateDtype {
    /// f32, as Burn's optimizers keep it (the default).
    #[default]
    F32,
    /// bf16: half the bytes, f32's range, 8 significant bits.
    Bf16,
}

/// How the parameters are kept between steps.
///
/// # Example
///
/// ```
/// use burn_mpric_core::optim::MasterWeights;
///
/// assert_eq!("kahan".parse::<MasterWeights>().unwrap(), MasterWeights::Kahan);
/// assert_eq!(MasterWeights::Stochastic.to_string(), "stochastic");
/// assert_eq!(MasterWeights::Stochastic.param_bytes(), 2);
/// assert!("bf16".parse::<MasterWeights>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum MasterWeights {
    /// Parameters at f32, as today (the default): the master copy is the parameter.
    #[default]
    F32,
    /// Parameters at bf16, no f32 copy; each update computed at f32 and rounded to bf16
    /// stochastically (unbiased), from a seeded stream saved with the optimizer's state.
    Stochastic,
    /// Parameters at bf16 plus a bf16 compensation buffer holding what rounding dropped
    /// (a compensated, Kahan, update): the weight is parameter + compensation, about 16
    /// significant bits. The buffer is itself rounded stochastically (from the same seeded
    /// stream), so a small update repeated every step is not dropped by the same amount each
    /// time.
    Kahan,
}

/// Where stochastic rounding's uniforms are made.
///
/// # Example
///
/// ```
/// use burn_mpric_core::optim::DrawSource;
///
/// assert_eq!("device".parse::<DrawSource>(), Ok(DrawSource::Device));
/// assert_eq!(DrawSource::default(), DrawSource::Auto);
/// assert_eq!(DrawSource::Host.to_string(), "host");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DrawSource {
    /// On the device for the cube backends (Wgpu, CUDA: a GPU), on the host for the others
    /// (Flex, NdArray: their device is the host's memory).
    #[default]
    Auto,
    /// ChaCha8 on the host ([`RoundingStream`](super::RoundingStream)), copied into a tensor
    /// at every step: 4 bytes per element uploaded to a GPU.
    Host,
    /// The Feistel permutation on the device ([`DrawKeys`](super::DrawKeys)): nothing per
    /// element uploaded.
    Device,
}

impl DrawSource {
    /// Whether the numbers are made on the device, for a backend that runs on a GPU
    /// (`on_gpu`) or not.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::optim::DrawSource;
    ///
    /// assert!(DrawSource::Auto.on_device(true));
    /// assert!(!DrawSource::Auto.on_device(false));
    /// assert!(DrawSource::Device.on_device(false));
    /// ```
    pub fn on_device(self, on_gpu: bool) -> bool {
        match self {
            Self::Auto => on_gpu,
            Self::Host => false,
            Self::Device => true,
        }
    }
}

impl fmt::Display for DrawSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Host => "host",
            Self::Device => "device",
        })
    }
}

impl FromStr for DrawSource {
    type Err = PrecisionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "host" => Ok(Self::Host),
            "device" => Ok(Self::Device),
            _ => Err(PrecisionError::UnknownDraws(s.to_string())),
        }
    }
}

/// The optimizer's precision: the state's dtype, how parameters are kept, and the seed of
/// stochastic rounding. The default is Burn's: everything at f32.
///
/// # Example
///
/// ```
/// use burn_mpric_core::optim::{MasterWeights, OptimizerPrecision, StateDtype};
///
/// let precision: OptimizerPrecision = "state=bf16,master=kahan".parse().unwrap();
/// assert_eq!(precision, OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::Kahan));
/// assert_eq!(precision.to_string(), "state=bf16,master=kahan");
/// assert!(OptimizerPrecision::default().is_f32());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct OptimizerPrecision {
    /// The dtype of the per-element state.
    pub state: StateDtype,
    /// How parameters are kept.
    pub master: MasterWeights,
    /// The seed of stochastic rounding's stream (stochastic and Kahan master weights).
    pub seed: u64,
    /// Where stochastic rounding's uniforms are made: on the device for GPU backends, on the
    /// host for CPU ones, unless set ([`DrawSource`]). A parameter keeps the source its state
    /// was made with, so that a resumed run draws the numbers of the uninterrupted one.
    // Left out when automatic, so that the text and JSON of every precision written before
    // the choice existed stay as they were (checkpoints compare them).
    #[serde(default, skip_serializing_if = "is_auto")]
    pub draws: DrawSource,
}

fn is_auto(draws: &DrawSource) -> bool {
    *draws == DrawSource::Auto
}

/// Why a precision setting was refused. Each message is one line that names the setting and
/// what it accepts.
///
/// # Example
///
/// ```
/// use burn_mpric_core::optim::{OptimizerPrecision, PrecisionError, StateDtype, MasterWeights};
///
/// let sgd = OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::F32).check_for("sgd", 0);
/// assert!(matches!(sgd, Err(PrecisionError::NoState { .. })));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrecisionError {
    /// The state dtype is not one of f32, bf16.
    #[error("unknown optimizer state dtype {0:?}: expected f32 or bf16")]
    UnknownState(String),
    /// f16 state (see [`StateDtype`]).
    #[error(
        "optimizer state at f16 is refused: the second moment is a squared gradient, and the \
         squares of small gradients underflow f16 (smallest normal 2^-14) where bf16 keeps f32's \
         range; use state = \"bf16\""
    )]
    HalfState,
    /// The master-weight mode is not one of f32, stochastic, kahan.
    #[error("unknown master weights {0:?}: expected f32, stochastic or kahan")]
    UnknownMaster(String),
    /// Where stochastic rounding's uniforms are made is not one of auto, host, device.
    #[error("unknown draws {0:?}: expected auto, host or device")]
    UnknownDraws(String),
    /// A part of the text form that is not `state=...`, `master=...` or `draws=...`.
    #[error(
        "unknown optimizer precision field {0:?}: expected state=<f32|bf16>,master=<f32|stochastic|kahan>,draws=<auto|host|device>"
    )]
    UnknownField(String),
    /// A state dtype for an optimizer that keeps no state.
    #[error(
        "{optimizer} keeps no state, so state = \"{state}\" has nothing to store: leave state at \
         f32 or choose an optimizer with state (adam, adamw, sgd with momentum)"
    )]
    NoState {
        /// The optimizer's name.
        optimizer: String,
        /// The requested state dtype.
        state: StateDtype,
    },
}

/// What one parameter costs in bytes between steps: the parameter, its gradient (which takes
/// the parameter's dtype), the optimizer's per-element state and the compensation buffer.
///
/// # Example
///
/// ```
/// use burn_mpric_core::optim::{MasterWeights, OptimizerPrecision, StateDtype};
///
/// let kahan = OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::Kahan);
/// let bytes = kahan.bytes_per_parameter(2);
/// assert_eq!((bytes.param, bytes.grad, bytes.state, bytes.compensation), (2, 2, 4, 2));
/// assert_eq!(bytes.without_grad(), 8);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BytesPerParameter {
    /// The parameter itself.
    pub param: usize,
    /// Its gradient.
    pub grad: usize,
    /// The optimizer's per-element state.
    pub state: usize,
    /// The compensation buffer (Kahan).
    pub compensation: usize,
}

impl BytesPerParameter {
    /// All of it.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::optim::OptimizerPrecision;
    ///
    /// assert_eq!(OptimizerPrecision::default().bytes_per_parameter(2).total(), 16);
    /// ```
    pub fn total(&self) -> usize {
        self.param + self.grad + self.state + self.compensation
    }

    /// What stays between steps once the gradient is dropped: parameter, state and buffers.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::optim::OptimizerPrecision;
    ///
    /// assert_eq!(OptimizerPrecision::default().bytes_per_parameter(2).without_grad(), 12);
    /// ```
    pub fn without_grad(&self) -> usize {
        self.param + self.state + self.compensation
    }
}

/// The bytes a trained model holds between steps, read from its tensors' dtypes and sizes by
/// each edition's `held_bytes`: the parameters, and the optimizer's state (moments,
/// velocities, compensation buffers, and the scalars kept beside them).
///
/// # Example
///
/// ```
/// use burn_mpric_core::optim::HeldBytes;
///
/// let held = HeldBytes { params: 8, state: 16, elements: 2 };
/// assert_eq!(held.per_parameter(), 12.0);
/// assert_eq!(HeldBytes::default().per_parameter(), 0.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HeldBytes {
    /// The parameters' bytes.
    pub params: usize,
    /// The optimizer state's bytes.
    pub state: usize,
    /// The number of parameter elements.
    pub elements: usize,
}

impl HeldBytes {
    /// Parameters and state, per parameter element (0 without parameters).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::optim::HeldBytes;
    ///
    /// assert_eq!(HeldBytes { params: 4, state: 0, elements: 2 }.per_parameter(), 2.0);
    /// ```
    pub fn per_parameter(&self) -> f64 {
        if self.elements == 0 {
            return 0.0;
        }
        (self.params + self.state) as f64 / self.elements as f64
    }
}

impl StateDtype {
    /// Bytes per element.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::optim::StateDtype;
    ///
    /// assert_eq!(StateDtype::F32.bytes(), 4);
    /// ```
    pub fn bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::Bf16 => 2,
        }
    }

    /// The dtype as the core names it.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::FloatDType;
    /// use burn_mpric_core::optim::StateDtype;
    ///
    /// assert_eq!(StateDtype::Bf16.dtype(), FloatDType::BF16);
    /// ```
    pub fn dtype(self) -> crate::FloatDType {
        match self {
            Self::F32 => crate::FloatDType::F32,
            Self::Bf16 => crate::FloatDType::BF16,
        }
    }
}

impl MasterWeights {
    /// Bytes per element of the parameter (and so of its gradient).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::optim::MasterWeights;
    ///
    /// assert_eq!(MasterWeights::F32.param_bytes(), 4);
    /// ```
    pub fn param_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::Stochastic | Self::Kahan => 2,
        }
    }

    /// Whether parameters are stored at bf16 (stochastic or Kahan).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::optim::MasterWeights;
    ///
    /// assert!(MasterWeights::Kahan.is_bf16());
    /// assert!(!MasterWeights::F32.is_bf16());
    /// ```
    pub fn is_bf16(self) -> bool {
        self != Self::F32
    }
}

impl OptimizerPrecision {
    /// A precision with seed 0.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::optim::{MasterWeights, OptimizerPrecision, StateDtype};
    ///
    /// let precision = OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::F32);
    /// assert_eq!(precision.seed, 0);
    /// ```
    pub fn new(state: StateDtype, master: MasterWeights) -> Self {
        Self {
            state,
            master,
            seed: 0,
            draws: DrawSource::Auto,
        }
    }

    /// The same precision with its uniforms made at `draws`.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::optim::{DrawSource, OptimizerPrecision};
    ///
    /// let precision = OptimizerPrecision::default().with_draws(DrawSource::Device);
    /// assert_eq!(precision.to_string(), "state=f32,master=f32,draws=device");
    /// ```
    #[must_use]
    pub fn with_draws(mut self, draws: DrawSource) -> Self {
        self.draws = draws;
        self
    }

    /// The same precision with another stochastic-rounding seed.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::optim::OptimizerPrecision;
    ///
    /// assert_eq!(OptimizerPrecision::default().with_seed(7).seed, 7);
    /// ```
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Whether everything stays at f32 (Burn's own behaviour).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::optim::OptimizerPrecision;
    ///
    /// assert!(OptimizerPrecision::default().is_f32());
    /// ```
    pub fn is_f32(&self) -> bool {
        self.state == StateDtype::F32 && self.master == MasterWeights::F32
    }

    /// Refuses a state dtype for an optimizer (named `optimizer`) that keeps `state_slots`
    /// per-element state tensors, when that is none.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::optim::{MasterWeights, OptimizerPrecision, StateDtype};
    ///
    /// let sr = OptimizerPrecision::new(StateDtype::F32, MasterWeights::Stochastic);
    /// assert!(sr.check_for("sgd", 0).is_ok()); // plain SGD's weights can still be bf16
    /// let state = OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::F32);
    /// assert!(state.check_for("adam", 2).is_ok());
    /// ```
    pub fn check_for(&self, optimizer: &str, state_slots: usize) -> Result<(), PrecisionError> {
        if state_slots == 0 && self.state != StateDtype::F32 {
            return Err(PrecisionError::NoState {
                optimizer: optimizer.to_string(),
                state: self.state,
            });
        }
        Ok(())
    }

    /// The bytes a parameter costs under an optimizer with `state_slots` per-element state
    /// tensors (Adam 2, SGD with momentum 1, plain SGD 0).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::optim::{MasterWeights, OptimizerPrecision, StateDtype};
    ///
    /// let state_only = OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::F32);
    /// assert_eq!(state_only.bytes_per_parameter(2).total(), 12);
    /// ```
    pub fn bytes_per_parameter(&self, state_slots: usize) -> BytesPerParameter {
        let param = self.master.param_bytes();
        BytesPerParameter {
            param,
            grad: param,
            state: state_slots * self.state.bytes(),
            compensation: if self.master == MasterWeights::Kahan {
                2
            } else {
                0
            },
        }
    }
}

impl fmt::Display for StateDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
        })
    }
}

impl fmt::Display for MasterWeights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::Stochastic => "stochastic",
            Self::Kahan => "kahan",
        })
    }
}

impl fmt::Display for OptimizerPrecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "state={},master={}", self.state, self.master)?;
        match self.draws {
            DrawSource::Auto => Ok(()),
            draws => write!(f, ",draws={draws}"),
        }
    }
}

// Text in and out, so that a recipe's bad value gets the reason (f16 state) and the accepted
// names in the parser's own words.
impl TryFrom<String> for StateDtype {
    type Error = PrecisionError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

impl From<StateDtype> for String {
    fn from(value: StateDtype) -> Self {
        value.to_string()
    }
}

impl TryFrom<String> for MasterWeights {
    type Error = PrecisionError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

impl From<MasterWeights> for String {
    fn from(value: MasterWeights) -> Self {
        value.to_string()
    }
}

impl FromStr for StateDtype {
    type Err = PrecisionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "float32" => Ok(Self::F32),
            "bf16" | "bfloat16" => Ok(Self::Bf16),
            "f16" | "float16" | "half" => Err(PrecisionError::HalfState),
            _ => Err(PrecisionError::UnknownState(s.to_string())),
        }
    }
}

impl FromStr for MasterWeights {
    type Err = PrecisionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "float32" => Ok(Self::F32),
            "stochastic" => Ok(Self::Stochastic),
            "kahan" => Ok(Self::Kahan),
            _ => Err(PrecisionError::UnknownMaster(s.to_string())),
        }
    }
}

impl FromStr for OptimizerPrecision {
    type Err = PrecisionError;

    /// `state=<f32|bf16>,master=<f32|stochastic|kahan>,draws=<auto|host|device>`; any part may
    /// be left out.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut precision = Self::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.split_once('=').map(|(k, v)| (k.trim(), v)) {
                Some(("state", value)) => precision.state = value.parse()?,
                Some(("master", value)) => precision.master = value.parse()?,
                Some(("draws", value)) => precision.draws = value.parse()?,
                _ => return Err(PrecisionError::UnknownField(part.to_string())),
            }
        }
        Ok(precision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_targets_of_adam_hold() {
        let at = |state, master| OptimizerPrecision::new(state, master).bytes_per_parameter(2);
        assert_eq!(at(StateDtype::F32, MasterWeights::F32).without_grad(), 12);
        assert_eq!(
            at(StateDtype::Bf16, MasterWeights::Stochastic).without_grad(),
            6
        );
        assert_eq!(at(StateDtype::Bf16, MasterWeights::Stochastic).total(), 8);
        assert_eq!(at(StateDtype::Bf16, MasterWeights::Kahan).total(), 10);
    }

    #[test]
    fn text_forms_round_trip_and_bad_parts_are_named() {
        for state in [StateDtype::F32, StateDtype::Bf16] {
            for master in [
                MasterWeights::F32,
                MasterWeights::Stochastic,
                MasterWeights::Kahan,
            ] {
                let precision = OptimizerPrecision::new(state, master);
                assert_eq!(
                    precision.to_string().parse::<OptimizerPrecision>(),
                    Ok(precision)
                );
            }
        }
        let err = "state=bf16,mster=kahan"
            .parse::<OptimizerPrecision>()
            .unwrap_err();
        assert!(err.to_string().contains("\"mster=kahan\""), "{err}");
        assert_eq!(
            "state=f16".parse::<OptimizerPrecision>(),
            Err(PrecisionError::HalfState)
        );
        let err = "master=bf16"
            .parse::<OptimizerPrecision>()
            .unwrap_err()
            .to_string();
        assert!(err.contains("stochastic or kahan"), "{err}");
    }

    #[test]
    fn serde_speaks_the_text_form() {
        let precision = OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::Kahan);
        let json = serde_json::to_string(&precision).unwrap();
        assert_eq!(json, r#"{"state":"bf16","master":"kahan","seed":0}"#);
        assert_eq!(
            serde_json::from_str::<OptimizerPrecision>(&json).unwrap(),
            precision
        );
        let device = precision.with_draws(DrawSource::Device);
        let json = serde_json::to_string(&device).unwrap();
        assert_eq!(
            json,
            r#"{"state":"bf16","master":"kahan","seed":0,"draws":"device"}"#
        );
        assert_eq!(
            serde_json::from_str::<OptimizerPrecision>(&json).unwrap(),
            device
        );
        let err = serde_json::from_str::<StateDtype>(r#""f16""#).unwrap_err();
        assert!(err.to_string().contains("underflow"), "{err}");
    }

    #[test]
    fn draw_sources_round_trip_and_bad_ones_are_named() {
        for source in [DrawSource::Auto, DrawSource::Host, DrawSource::Device] {
            assert_eq!(source.to_string().parse::<DrawSource>(), Ok(source));
        }
        let err = "gpu".parse::<DrawSource>().unwrap_err().to_string();
        assert!(err.contains("\"gpu\"") && err.contains("device"), "{err}");
        let precision: OptimizerPrecision =
            "state=bf16,master=stochastic,draws=host".parse().unwrap();
        assert_eq!(precision.draws, DrawSource::Host);
        assert_eq!(
            precision.to_string(),
            "state=bf16,master=stochastic,draws=host"
        );
    }
}
