//! The recipe's `loss_scale` field: a preset name or a table of [`LossScaleConfig`] fields.

use crate::recipe::help::{Help, help, one_of};
use std::fmt;

use burn_mpric::ResolvedPolicy;
use burn_mpric::scale::{LossScaleConfig, LossScaleError, LossScaler, UpdateRule};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::RecipeError;

/// A named loss-scale setting (the scale crate's presets; the CLI accepts the same names).
pub use burn_mpric::scale::LossScalePreset;

/// `loss_scale.rule` by its name (`standard`, `flax`, `deepspeed`, `deepspeed_consecutive`;
/// the names are the scale crate's [`UpdateRule::name`]).
mod rule_name {
    use burn_mpric::scale::UpdateRule;
    use serde::{Deserialize, Deserializer, Serializer, de};

    pub(super) fn serialize<S: Serializer>(
        rule: &Option<UpdateRule>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match rule {
            Some(rule) => serializer.serialize_str(rule.name()),
            None => serializer.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<UpdateRule>, D::Error> {
        Option::<String>::deserialize(deserializer)?
            .map(|name| UpdateRule::from_name(&name).map_err(de::Error::custom))
            .transpose()
    }
}

/// A dynamic loss scale written as a table: a dynamic preset to start from (default
/// `dynamic`) and any [`LossScaleConfig`] field to change.
///
/// ```toml
/// [loss_scale]
/// preset = "torch"
/// growth_interval = 100
/// ```
///
/// ```
/// use burn_mpric_train::recipe::loss_scale::LossScaleTable;
///
/// let table: LossScaleTable = serde_json::from_str(r#"{"preset": "torch", "growth_interval": 100}"#).unwrap();
/// let config = table.config().unwrap();
/// assert_eq!((config.initial_scale, config.growth_interval), (65536.0, 100));
/// let table: LossScaleTable = serde_json::from_str(r#"{"rule": "deepspeed"}"#).unwrap();
/// assert_eq!(table.config().unwrap().rule.name(), "deepspeed");
/// assert_eq!(serde_json::to_string(&table).unwrap(), r#"{"rule":"deepspeed"}"#);
/// assert!(serde_json::from_str::<LossScaleTable>(r#"{"rule": "pytorch"}"#).is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LossScaleTable {
    /// The dynamic preset the other fields change (default `dynamic`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<LossScalePreset>,
    /// The scale of the first step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_scale: Option<f32>,
    /// Consecutive finite steps before the scale grows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub growth_interval: Option<u32>,
    /// Factor applied on growth (> 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub growth_factor: Option<f64>,
    /// Factor applied on backoff (between 0 and 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_factor: Option<f64>,
    /// Lower bound of the scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_scale: Option<f32>,
    /// Upper bound of the scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_scale: Option<f32>,
    /// Overflows tolerated before backing off (1 turns hysteresis off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hysteresis: Option<u32>,
    /// The growth rule: `standard`, `flax`, `deepspeed` or `deepspeed_consecutive`.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "rule_name")]
    pub rule: Option<UpdateRule>,
}

impl LossScaleTable {
    /// The configuration this table describes, validated; errors name the `loss_scale.*`
    /// field.
    ///
    /// ```
    /// use burn_mpric_train::recipe::loss_scale::LossScaleTable;
    ///
    /// let table = LossScaleTable { growth_factor: Some(0.5), ..Default::default() };
    /// assert_eq!(table.config().unwrap_err().field, "loss_scale.growth_factor");
    /// ```
    pub fn config(&self) -> Result<LossScaleConfig, RecipeError> {
        let preset = self.preset.unwrap_or(LossScalePreset::Dynamic);
        let Some(mut config) = preset.dynamic_config() else {
            return Err(RecipeError::new(
                "loss_scale.preset",
                format!(
                    "a loss-scale table describes a dynamic scale, so its preset must be one of {}; got `{preset}` (write `loss_scale = \"{preset}\"` instead)",
                    LossScalePreset::dynamic_names()
                ),
            ));
        };
        if let Some(v) = self.initial_scale {
            config.initial_scale = v;
        }
        if let Some(v) = self.growth_interval {
            config.growth_interval = v;
        }
        if let Some(v) = self.growth_factor {
            config.growth_factor = v;
        }
        if let Some(v) = self.backoff_factor {
            config.backoff_factor = v;
        }
        if let Some(v) = self.min_scale {
            config.min_scale = v;
        }
        if self.max_scale.is_some() {
            config.max_scale = self.max_scale;
        }
        if let Some(v) = self.hysteresis {
            config.hysteresis = v;
        }
        if let Some(v) = self.rule {
            config.rule = v;
        }
        config.validate().map_err(field_of)?;
        Ok(config)
    }
}

/// Attributes a loss-scale configuration error to its field.
fn field_of(err: LossScaleError) -> RecipeError {
    let field = match &err {
        LossScaleError::InvalidScale { name, .. } => match *name {
            "min scale" => "loss_scale.min_scale",
            "max scale" => "loss_scale.max_scale",
            _ => "loss_scale.initial_scale",
        },
        LossScaleError::InvalidGrowthFactor(_) => "loss_scale.growth_factor",
        LossScaleError::InvalidBackoffFactor(_) => "loss_scale.backoff_factor",
        LossScaleError::ZeroGrowthInterval => "loss_scale.growth_interval",
        LossScaleError::ZeroHysteresis => "loss_scale.hysteresis",
        LossScaleError::MinAboveMax { .. } => "loss_scale.min_scale",
        LossScaleError::ScaleOutOfBounds { .. } => "loss_scale.initial_scale",
        LossScaleError::InvalidClipNorm(_) => "clip_grad_norm",
        _ => "loss_scale",
    };
    RecipeError::new(field, err.to_string())
}

/// The recipe's `loss_scale`: a preset name or a table.
///
/// ```
/// use burn_mpric_train::recipe::loss_scale::{LossScalePreset, LossScaleSpec};
///
/// let spec: LossScaleSpec = serde_json::from_str("\"torch\"").unwrap();
/// assert_eq!(spec, LossScaleSpec::Preset(LossScalePreset::Torch));
/// let spec: LossScaleSpec = serde_json::from_str(r#"{"initial_scale": 8.0}"#).unwrap();
/// assert!(matches!(spec, LossScaleSpec::Table(_)));
/// assert!(serde_json::from_str::<LossScaleSpec>("3").is_err());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum LossScaleSpec {
    /// A preset name.
    Preset(LossScalePreset),
    /// A dynamic configuration written out.
    Table(LossScaleTable),
}

impl Default for LossScaleSpec {
    fn default() -> Self {
        LossScaleSpec::Preset(LossScalePreset::Auto)
    }
}

impl fmt::Display for LossScaleSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossScaleSpec::Preset(preset) => write!(f, "{preset}"),
            LossScaleSpec::Table(table) => {
                write!(
                    f,
                    "{} with changes",
                    table.preset.unwrap_or(LossScalePreset::Dynamic)
                )
            }
        }
    }
}

impl LossScaleSpec {
    /// The same spec with a table's defaults spelled out (a preset name stays as it is).
    ///
    /// ```
    /// use burn_mpric_train::recipe::loss_scale::LossScaleSpec;
    ///
    /// let table: LossScaleSpec = serde_json::from_str(r#"{"preset": "torch"}"#).unwrap();
    /// let spelled: LossScaleSpec = serde_json::from_str(r#"{"preset": "torch", "initial_scale": 65536.0}"#).unwrap();
    /// assert_eq!(table.explicit().unwrap(), spelled.explicit().unwrap());
    /// ```
    pub fn explicit(&self) -> Result<LossScaleSpec, RecipeError> {
        let LossScaleSpec::Table(table) = self else {
            return Ok(self.clone());
        };
        let config = table.config()?;
        Ok(LossScaleSpec::Table(LossScaleTable {
            preset: Some(table.preset.unwrap_or(LossScalePreset::Dynamic)),
            initial_scale: Some(config.initial_scale),
            growth_interval: Some(config.growth_interval),
            growth_factor: Some(config.growth_factor),
            backoff_factor: Some(config.backoff_factor),
            min_scale: Some(config.min_scale),
            max_scale: config.max_scale,
            hysteresis: Some(config.hysteresis),
            rule: Some(config.rule),
        }))
    }

    /// Validates the setting without building a scaler.
    ///
    /// ```
    /// use burn_mpric_train::recipe::loss_scale::{LossScalePreset, LossScaleSpec};
    ///
    /// assert!(LossScaleSpec::Preset(LossScalePreset::Static(0.0)).validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), RecipeError> {
        match self {
            LossScaleSpec::Preset(LossScalePreset::Static(scale)) => LossScaler::fixed(*scale)
                .map(|_| ())
                .map_err(|err| RecipeError::new("loss_scale", err.to_string())),
            LossScaleSpec::Preset(_) => Ok(()),
            LossScaleSpec::Table(table) => table.config().map(|_| ()),
        }
    }

    /// The scaler for a run with `policy` (resolved against the device, so `half` is already
    /// f16 or bf16) and optional global-norm clipping.
    ///
    /// ```
    /// use burn_mpric::ResolvedPolicy;
    /// use burn_mpric_train::recipe::loss_scale::{LossScalePreset, LossScaleSpec};
    ///
    /// let auto = LossScaleSpec::Preset(LossScalePreset::Auto);
    /// let f16: ResolvedPolicy = "mixed_f16".parse().unwrap();
    /// assert_eq!(auto.scaler(f16, None).unwrap().scale(), 32768.0);
    /// assert_eq!(auto.scaler(ResolvedPolicy::F32, Some(1.0)).unwrap().scale(), 1.0);
    /// ```
    pub fn scaler(
        &self,
        policy: ResolvedPolicy,
        clip: Option<f32>,
    ) -> Result<LossScaler, RecipeError> {
        let scaler = match self {
            LossScaleSpec::Preset(preset) => {
                LossScaler::from_preset(*preset, policy.computes_in_f16()).map_err(|err| {
                    match preset {
                        LossScalePreset::Static(_) => {
                            RecipeError::new("loss_scale", err.to_string())
                        }
                        _ => field_of(err),
                    }
                })?
            }
            LossScaleSpec::Table(table) => {
                LossScaler::dynamic(table.config()?).map_err(field_of)?
            }
        };
        match clip {
            Some(norm) => scaler.with_clip_norm(norm).map_err(field_of),
            None => Ok(scaler),
        }
    }
}

impl Serialize for LossScaleSpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            LossScaleSpec::Preset(preset) => preset.serialize(serializer),
            LossScaleSpec::Table(table) => table.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for LossScaleSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SpecVisitor;

        impl<'de> Visitor<'de> for SpecVisitor {
            type Value = LossScaleSpec;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(
                    f,
                    "a loss-scale preset name or a table; accepted: {}, or a table of loss-scale fields",
                    LossScalePreset::names()
                )
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                v.parse().map(LossScaleSpec::Preset).map_err(E::custom)
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                LossScaleTable::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(LossScaleSpec::Table)
            }
        }

        deserializer.deserialize_any(SpecVisitor)
    }
}

/// What each field of `[loss_scale]` (or `loss_scale = "..."`) accepts and a line that sets
/// it, by its path below the table (`""`: the field itself).
pub(super) fn field_help(field: &str) -> Option<Help> {
    Some(match field {
        "" => help(
            format!(
                "a preset name in quotes ({}), or a table of loss-scale fields",
                LossScalePreset::names()
            ),
            "loss_scale = \"dynamic\"",
        ),
        "preset" => help(
            format!("one of {}", LossScalePreset::dynamic_names()),
            "preset = \"torch\" under [loss_scale]",
        ),
        "initial_scale" => help(
            "a number above 0",
            "initial_scale = 32768.0 under [loss_scale]",
        ),
        "growth_interval" => help(
            "a whole number from 1 to 4294967295",
            "growth_interval = 2000 under [loss_scale]",
        ),
        "growth_factor" => help("a number above 1", "growth_factor = 2.0 under [loss_scale]"),
        "backoff_factor" => help(
            "a number between 0 and 1",
            "backoff_factor = 0.5 under [loss_scale]",
        ),
        "min_scale" => help("a number above 0", "min_scale = 1.0 under [loss_scale]"),
        "max_scale" => help(
            "a number above 0",
            "max_scale = 16777216.0 under [loss_scale]",
        ),
        "hysteresis" => help(
            "a whole number from 1 to 4294967295",
            "hysteresis = 2 under [loss_scale]",
        ),
        "rule" => help(
            one_of(&UpdateRule::NAMED.map(|(_, name)| name)),
            "rule = \"deepspeed\" under [loss_scale]",
        ),
        _ => return None,
    })
}
