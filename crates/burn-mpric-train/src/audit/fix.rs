//! A verdict as `--set` overrides of the recipe it was found for.

use burn_mpric::audit::Verdict;
use burn_mpric::{FloatDType, ResolvedPolicy};

use crate::recipe::Recipe;
use crate::recipe::loss_scale::{LossScalePreset, LossScaleSpec};

/// The `--set key=value` overrides that apply `verdict` to `recipe` (whose policy resolves to
/// `policy` on its backend); none for a verdict no setting acts on. Each is also the line to
/// write into the recipe (`key = value`, a dotted key under no table).
///
/// ```
/// use burn_mpric::audit::Verdict;
/// use burn_mpric_train::Recipe;
/// use burn_mpric_train::audit::set_lines;
///
/// let recipe = Recipe::example();
/// let policy = burn_mpric::ResolvedPolicy::F32;
/// let keep = Verdict::KeepFullPrecision { op: "linear".into(), largest: 1e5 };
/// assert_eq!(set_lines(&recipe, policy, &keep), ["ops.linear=full"]);
/// let f16 = Verdict::F16Safe { initial_scale: 1024.0, largest_exp: 0, flushed: 0.0, keeping_full: vec![] };
/// assert_eq!(
///     set_lines(&recipe, policy, &f16),
///     ["policy=mixed_f16", "loss_scale={ initial_scale = 1024.0 }"]
/// );
/// ```
pub fn set_lines(recipe: &Recipe, policy: ResolvedPolicy, verdict: &Verdict) -> Vec<String> {
    let (_, compute, _) = policy.dtypes();
    match verdict {
        Verdict::NotFinite { .. } | Verdict::ForwardOverflow { .. } => Vec::new(),
        Verdict::KeepFullPrecision { op, .. } => vec![format!("ops.{op}=full")],
        Verdict::F16Safe {
            initial_scale,
            keeping_full,
            ..
        } => {
            let mut lines = Vec::new();
            if compute != FloatDType::F16 {
                lines.push("policy=mixed_f16".to_string());
            }
            lines.push(initial_scale_line(&recipe.loss_scale, *initial_scale));
            lines.extend(keeping_full.iter().map(|op| format!("ops.{op}=full")));
            lines
        }
        Verdict::UseBf16 { .. } | Verdict::Bf16Safe { .. } => {
            let mut lines = Vec::new();
            if compute != FloatDType::BF16 {
                lines.push("policy=mixed_bf16".to_string());
            }
            if recipe.loss_scale != LossScaleSpec::Preset(LossScalePreset::None) {
                lines.push("loss_scale=none".to_string());
            }
            lines
        }
    }
}

/// The loss-scale override that starts a dynamic scale at `scale` and keeps the rest of the
/// recipe's dynamic setting.
fn initial_scale_line(spec: &LossScaleSpec, scale: f32) -> String {
    match spec {
        LossScaleSpec::Table(_) => format!("loss_scale.initial_scale={scale:?}"),
        LossScaleSpec::Preset(preset)
            if preset.dynamic_config().is_some() && *preset != LossScalePreset::Dynamic =>
        {
            format!("loss_scale={{ preset = \"{preset}\", initial_scale = {scale:?} }}")
        }
        LossScaleSpec::Preset(_) => format!("loss_scale={{ initial_scale = {scale:?} }}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_preset_is_kept_and_a_table_is_edited() {
        let torch = LossScaleSpec::Preset(LossScalePreset::Torch);
        assert_eq!(
            initial_scale_line(&torch, 256.0),
            "loss_scale={ preset = \"torch\", initial_scale = 256.0 }"
        );
        let table = LossScaleSpec::Table(Default::default());
        assert_eq!(
            initial_scale_line(&table, 256.0),
            "loss_scale.initial_scale=256.0"
        );
        let none = LossScaleSpec::Preset(LossScalePreset::None);
        assert_eq!(
            initial_scale_line(&none, 2.0),
            "loss_scale={ initial_scale = 2.0 }"
        );
    }
}
