//! What a run writes for people to read: the metrics (CSV, JSON) and the plots (SVG).

pub mod metrics;
pub(crate) mod plot;
