//! [`LossScalePreset`]: loss-scale settings by name (`torch`, `static:1024`, `auto`, ...), and the
//! one "auto" rule: dynamic scaling when computation runs in f16, none otherwise.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

use super::config::LossScaleConfig;
use super::invalid::LossScaleError;
use super::loss_scale::LossScale;

/// A named loss-scale setting.
///
/// The default initial scale of `dynamic` (and `auto`) is 2^15, eformer's and jmp's;
/// `torch` starts at PyTorch's 2^16.
///
/// ```
/// use burn_mpric_core::scale::LossScalePreset;
///
/// let p: LossScalePreset = "static:1024".parse().unwrap();
/// assert_eq!(p, LossScalePreset::Static(1024.0));
/// assert_eq!(p.to_string(), "static:1024");
/// assert!("torchh".parse::<LossScalePreset>().unwrap_err().to_string().contains("accepted"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum LossScalePreset {
    /// Dynamic scaling with the default configuration when computation runs in f16, no
    /// scaling otherwise (the default).
    #[default]
    Auto,
    /// No scaling (scale 1); non-finite steps are still skipped.
    None,
    /// Dynamic scaling with the default configuration ([`LossScaleConfig::new`], initial 2^15).
    Dynamic,
    /// [`LossScaleConfig::torch`] (initial 2^16).
    Torch,
    /// [`LossScaleConfig::jmp`].
    Jmp,
    /// [`LossScaleConfig::eformer`].
    Eformer,
    /// [`LossScaleConfig::keras`].
    Keras,
    /// [`LossScaleConfig::flax`].
    Flax,
    /// [`LossScaleConfig::deepspeed`].
    DeepSpeed,
    /// [`LossScaleConfig::megatron`].
    Megatron,
    /// A fixed scale.
    Static(f32),
}

/// Each named preset with its canonical name (first) and the other spellings it accepts.
const NAMES: &[(LossScalePreset, &[&str])] = &[
    (LossScalePreset::Auto, &["auto"]),
    (LossScalePreset::None, &["none", "noop", "off"]),
    (LossScalePreset::Dynamic, &["dynamic"]),
    (LossScalePreset::Torch, &["torch", "pytorch"]),
    (LossScalePreset::Jmp, &["jmp"]),
    (LossScalePreset::Eformer, &["eformer"]),
    (LossScalePreset::Keras, &["keras"]),
    (LossScalePreset::Flax, &["flax"]),
    (LossScalePreset::DeepSpeed, &["deepspeed"]),
    (LossScalePreset::Megatron, &["megatron"]),
];

impl LossScalePreset {
    /// The presets that describe a dynamic scale, in the order messages list them.
    ///
    /// ```
    /// use burn_mpric_core::scale::LossScalePreset;
    ///
    /// assert!(LossScalePreset::DYNAMIC.iter().all(|p| p.dynamic_config().is_some()));
    /// assert_eq!(LossScalePreset::DYNAMIC.len(), 8);
    /// ```
    pub const DYNAMIC: &'static [LossScalePreset] = &[
        LossScalePreset::Dynamic,
        LossScalePreset::Torch,
        LossScalePreset::Jmp,
        LossScalePreset::Eformer,
        LossScalePreset::Keras,
        LossScalePreset::Flax,
        LossScalePreset::DeepSpeed,
        LossScalePreset::Megatron,
    ];

    /// Every name this type parses, as messages list them: the named presets, then the
    /// `static:<scale>` form.
    ///
    /// ```
    /// use burn_mpric_core::scale::LossScalePreset;
    ///
    /// let names = LossScalePreset::names();
    /// assert!(names.starts_with("auto, none, dynamic, torch"));
    /// assert!(names.ends_with("static:<scale> (e.g. static:1024)"));
    /// ```
    pub fn names() -> String {
        NAMES
            .iter()
            .map(|(_, names)| names[0])
            .chain(["static:<scale> (e.g. static:1024)"])
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The names of [`DYNAMIC`](Self::DYNAMIC), comma-separated.
    ///
    /// ```
    /// use burn_mpric_core::scale::LossScalePreset;
    ///
    /// assert!(LossScalePreset::dynamic_names().starts_with("dynamic, torch, jmp"));
    /// ```
    pub fn dynamic_names() -> String {
        Self::DYNAMIC
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The dynamic configuration of a dynamic preset (`None` for auto, none and static).
    ///
    /// ```
    /// use burn_mpric_core::scale::LossScalePreset;
    ///
    /// assert_eq!(LossScalePreset::Torch.dynamic_config().unwrap().initial_scale, 65536.0);
    /// assert!(LossScalePreset::None.dynamic_config().is_none());
    /// ```
    pub fn dynamic_config(&self) -> Option<LossScaleConfig> {
        Some(match self {
            LossScalePreset::Dynamic => LossScaleConfig::new(),
            LossScalePreset::Torch => LossScaleConfig::torch(),
            LossScalePreset::Jmp => LossScaleConfig::jmp(),
            LossScalePreset::Eformer => LossScaleConfig::eformer(),
            LossScalePreset::Keras => LossScaleConfig::keras(),
            LossScalePreset::Flax => LossScaleConfig::flax(),
            LossScalePreset::DeepSpeed => LossScaleConfig::deepspeed(),
            LossScalePreset::Megatron => LossScaleConfig::megatron(),
            LossScalePreset::Auto | LossScalePreset::None | LossScalePreset::Static(_) => {
                return None;
            }
        })
    }

    /// The loss scale this preset describes, for a run whose computation runs in f16
    /// (`f16_compute`) or not. `auto` is the one place the rule "dynamic scaling when
    /// computation runs in f16, none otherwise" is written.
    ///
    /// ```
    /// use burn_mpric_core::scale::LossScalePreset;
    ///
    /// assert_eq!(LossScalePreset::Auto.loss_scale(true).unwrap().loss_scale(), 32768.0);
    /// assert_eq!(LossScalePreset::Auto.loss_scale(false).unwrap().loss_scale(), 1.0);
    /// assert_eq!(LossScalePreset::Torch.loss_scale(false).unwrap().loss_scale(), 65536.0);
    /// assert!(LossScalePreset::Static(0.0).loss_scale(true).is_err());
    /// ```
    pub fn loss_scale(&self, f16_compute: bool) -> Result<LossScale, LossScaleError> {
        match self {
            LossScalePreset::Auto if f16_compute => LossScale::dynamic(LossScaleConfig::new()),
            LossScalePreset::Auto | LossScalePreset::None => Ok(LossScale::noop()),
            LossScalePreset::Static(scale) => LossScale::fixed(*scale),
            preset => LossScale::dynamic(preset.dynamic_config().unwrap_or_default()),
        }
    }
}

impl FromStr for LossScalePreset {
    type Err = LossScaleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim().to_ascii_lowercase();
        if let Some((preset, _)) = NAMES
            .iter()
            .find(|(_, names)| names.contains(&text.as_str()))
        {
            return Ok(*preset);
        }
        match text.strip_prefix("static:") {
            Some(value) => value
                .trim()
                .parse::<f32>()
                .map(LossScalePreset::Static)
                .map_err(|_| {
                    LossScaleError::UnknownPreset(format!(
                        "`{s}`: the static scale must be a number, e.g. static:1024"
                    ))
                }),
            None => Err(LossScaleError::UnknownPreset(format!(
                "unknown loss-scale preset `{s}`; accepted: {}",
                Self::names()
            ))),
        }
    }
}

impl fmt::Display for LossScalePreset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossScalePreset::Static(scale) => write!(f, "static:{scale}"),
            preset => {
                let (_, names) = NAMES
                    .iter()
                    .find(|(p, _)| p == preset)
                    .expect("every named preset is in the table");
                f.write_str(names[0])
            }
        }
    }
}

impl Serialize for LossScalePreset {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for LossScalePreset {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(de::Error::custom)
    }
}
