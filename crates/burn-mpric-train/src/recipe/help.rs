//! What a recipe field accepts and a line that sets it: each section's module says it of its
//! own fields (`help`), and recipe errors quote it.

use std::borrow::Cow;

/// What a field accepts and a line that sets it.
pub(crate) struct Help {
    pub(crate) accepted: Cow<'static, str>,
    pub(crate) example: &'static str,
}

pub(crate) fn help(accepted: impl Into<Cow<'static, str>>, example: &'static str) -> Help {
    Help {
        accepted: accepted.into(),
        example,
    }
}

/// `a`, `b` or `c`.
pub(crate) fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

pub(crate) const WHOLE_ABOVE_0: &str = "a whole number above 0";
