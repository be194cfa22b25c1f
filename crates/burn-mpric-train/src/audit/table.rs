//! The audit as a table for the terminal.

use std::fmt::Write;

use burn_mpric::audit::{
    BF16_MAX, F16_MAX, F16_MIN_NORMAL_EXP, F16_MIN_SUBNORMAL_EXP, Magnitudes, Phase, remedy_summary,
};

use super::RecipeAudit;

/// Headroom in powers of two, signed (`+12.3`, `-0.8`), or `-` without values.
fn room(m: &Magnitudes, limit: f32, shift: i32) -> String {
    m.headroom(limit)
        .map_or("-".into(), |h| format!("{:+.1}", h - shift as f32))
}

fn percent(share: f64) -> String {
    if share == 0.0 {
        "0".into()
    } else if share < 0.0001 {
        "<0.01%".into()
    } else {
        format!("{:.2}%", share * 100.0)
    }
}

/// The audit as text: the ops, the parameters' gradients, then the verdicts with their
/// `--set` lines and `MpSettings` lines.
///
/// Backward values are shown at the recipe's loss scale: the headroom to f16 of a gradient
/// is what is left at that scale, and the shares are of the gradient values that scale puts
/// below f16's smallest normal (2^-14: fewer bits) and below its smallest subnormal (2^-24:
/// they flush to zero).
///
/// ```
/// use burn_mpric_train::Plan;
/// use burn_mpric_train::audit::{audit_recipe, table};
///
/// let output = std::env::temp_dir().join(format!("mpric-doc-table-{}", std::process::id()));
/// let recipe = concat!(env!("CARGO_MANIFEST_DIR"), "/../../recipes/quickstart.toml");
/// let plan = Plan::load(recipe.as_ref(), &[format!("output={}", output.display())])?;
/// let (found, _) = audit_recipe(&plan, 1)?;
/// let text = table(&found);
/// assert!(text.contains("linear_weight_backward"));
/// assert!(text.contains("verdicts:"));
/// # std::fs::remove_dir_all(&output).unwrap();
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
pub fn table(found: &RecipeAudit) -> String {
    let r = &found.report;
    let shift = r.scale_exp();
    let mut o = String::new();
    let _ = writeln!(
        o,
        "audit of {} on {}: {} step{} of {}, measured at {}",
        found.recipe,
        found.backend,
        r.steps,
        if r.steps == 1 { "" } else { "s" },
        r.audited,
        r.measured_at
    );
    let _ = writeln!(o, "{}", found.optimizer_memory);
    let _ = writeln!(
        o,
        "room: powers of two between the largest magnitude and the dtype's largest value (negative: overflow); backward values at the loss scale 2^{shift}"
    );
    let _ = writeln!(o);
    let op_width = r
        .ops
        .iter()
        .map(|row| row.method.len())
        .chain([2])
        .max()
        .unwrap_or_default();
    let _ = writeln!(
        o,
        "{:<9} {:<op_width$} {:<7} {:>6} {:>10} {:>9} {:>9} {:>11} {:>9}",
        "pass",
        "op",
        "runs at",
        "calls",
        "max |x|",
        "f16 room",
        "bf16 room",
        "<f16 normal",
        "flushed"
    );
    for row in &r.ops {
        let (shift, shares) = match row.phase {
            Phase::Forward => (0, ("".to_string(), "".to_string())),
            Phase::Backward => (
                shift,
                (
                    percent(row.values.share_below(F16_MIN_NORMAL_EXP, shift)),
                    percent(row.values.share_below(F16_MIN_SUBNORMAL_EXP, shift)),
                ),
            ),
        };
        let max = row.values.max_abs * 2f32.powi(shift);
        let _ = writeln!(
            o,
            "{:<9} {:<op_width$} {:<7} {:>6} {:>10.3e} {:>9} {:>9} {:>11} {:>9}{}",
            row.phase.to_string(),
            row.method,
            row.dtype,
            row.calls,
            max,
            room(&row.values, F16_MAX, shift),
            room(&row.values, BF16_MAX, shift),
            shares.0,
            shares.1,
            if row.values.non_finite > 0 {
                format!("  {} inf/NaN", row.values.non_finite)
            } else {
                String::new()
            }
        );
    }
    let _ = writeln!(o);
    let heading = "parameter gradient (at the loss scale)";
    let width = r
        .params
        .iter()
        .map(|p| p.path.chars().count())
        .chain([heading.len()])
        .max()
        .unwrap_or_default();
    let _ = writeln!(
        o,
        "{heading:<width$} {:>10} {:>9} {:>11} {:>9}",
        "max |g|", "f16 room", "<f16 normal", "flushed"
    );
    for p in &r.params {
        let _ = writeln!(
            o,
            "{:<width$} {:>10.3e} {:>9} {:>11} {:>9}",
            p.path,
            p.grad.max_abs * 2f32.powi(shift),
            room(&p.grad, F16_MAX, shift),
            percent(p.grad.share_below(F16_MIN_NORMAL_EXP, shift)),
            percent(p.grad.share_below(F16_MIN_SUBNORMAL_EXP, shift)),
        );
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "verdicts:");
    for (i, (verdict, sets)) in r.verdicts.iter().zip(&found.fixes).enumerate() {
        // A verdict the trial below contradicts says so on its own line.
        let _ = writeln!(o, "  {}. {}", i + 1, verdict.line_with(&found.trial));
        if !sets.is_empty() {
            let args: Vec<String> = sets
                .iter()
                .map(|s| format!("--set {}", quoted(s)))
                .collect();
            let _ = writeln!(
                o,
                "     recipe: mpric train {} {}",
                found.recipe,
                args.join(" ")
            );
        }
        for line in verdict.settings_lines() {
            let _ = writeln!(o, "     code:   {line}");
        }
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "trial of the recipe as written: {}", found.trial);
    for spot in &found.hot_spots {
        let _ = writeln!(o, "hot spot: {spot}");
    }
    if let Some(summary) = remedy_summary(&found.trial, &found.remedies) {
        let _ = writeln!(o, "{summary}");
    }
    for remedy in &found.remedies {
        let args: Vec<String> = remedy
            .lines
            .iter()
            .map(|s| format!("--set {}", quoted(s)))
            .collect();
        let _ = writeln!(o, "remedy: {}", remedy.what);
        let _ = writeln!(
            o,
            "     recipe: mpric train {} {}",
            found.recipe,
            args.join(" ")
        );
        if let Some(line) = remedy.trial_line() {
            let _ = writeln!(o, "     {line}");
        }
    }
    o
}

/// An override as a shell word: quoted when it holds spaces, braces or quotes.
fn quoted(arg: &str) -> String {
    if arg.contains([' ', '{', '}', '"']) {
        format!("'{arg}'")
    } else {
        arg.to_string()
    }
}

#[cfg(test)]
mod tests {
    use burn_mpric::audit::{AuditReport, Trial, Verdict};

    use super::*;

    /// A report whose first verdict calls f16 safe at 2^18 above a trial at f16 that skipped
    /// every step (the loss itself not finite, as an overflow inside a library module shows).
    fn contradicted() -> RecipeAudit {
        let mut report = AuditReport::new(
            2,
            "p=f32,c=f16,o=f32",
            "p=f32,c=bf16,o=f32",
            262144.0,
            vec![],
            vec![],
        );
        report.verdicts = vec![Verdict::F16Safe {
            initial_scale: 262144.0,
            largest_exp: -20,
            flushed: 0.0,
            keeping_full: vec![],
        }];
        let mut trial = Trial::new("p=f32,c=f16,o=f32", 262144.0, 8);
        let cause = burn_mpric::scale::SkipCause::LossNotFinite {
            scale: 262144.0,
            probe_scale: 1.0 / 256.0,
        };
        for step in 0..8 {
            trial.record(step, true, None, Some(cause.clone()));
        }
        let contradictions = report
            .verdicts
            .iter()
            .map(|verdict| verdict.contradiction(&trial))
            .collect();
        RecipeAudit {
            recipe: "r.toml".into(),
            backend: "flex cpu".into(),
            report,
            fixes: vec![vec![]],
            contradictions,
            trial,
            hot_spots: vec![],
            remedies: vec![],
            optimizer_memory: crate::recipe::OptimizerConfig::Adam(
                crate::recipe::AdamSettings::new(1e-3),
            )
            .memory(),
        }
    }

    #[test]
    fn a_verdict_the_trial_contradicts_says_so() {
        let text = table(&contradicted());
        let line = text
            .lines()
            .find(|l| l.starts_with("  1. "))
            .expect("the verdict's line");
        assert_eq!(
            line,
            "  1. f16 is safe with an initial scale of 2^18: the largest gradient then reaches 2^-2 (f16 ends at 2^15) and 0.00% of the gradient values flush to zero — but the trial below did not train: 6 of its 8 steps skipped after the first 2 (the loss itself was not finite)"
        );
        assert!(
            text.contains("\nno remedy the audit could run trained without skips\n"),
            "{text}"
        );
        // audit.json carries the same note next to the verdict.
        let json: serde_json::Value =
            serde_json::from_str(&contradicted().to_json().unwrap()).unwrap();
        let note = json["contradictions"][0].as_str().unwrap();
        assert!(line.ends_with(note), "{note}");
    }

    #[test]
    fn a_verdict_the_trial_confirms_is_left_alone() {
        let mut found = contradicted();
        found.trial = Trial::new("p=f32,c=f16,o=f32", 262144.0, 8);
        let text = table(&found);
        assert!(!text.contains("but the trial below"), "{text}");
        assert!(text.contains("\nno remedy needed\n"), "{text}");
    }
}
