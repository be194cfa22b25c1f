//! burn-train metrics that show the loss scale and the skipped steps, each read from the
//! [`ScaleRecord`] its own step's item carries (never from the shared scaler).

use std::sync::Arc;

use burn::train::metric::state::{FormatOptions, NumericMetricState};
use burn::train::metric::{
    Metric, MetricAttributes, MetricMetadata, MetricName, Numeric, NumericAttributes, NumericEntry,
    SerializedEntry,
};

use burn_mpric_scale::SkipCause;

use crate::ScaleRecord;

macro_rules! record_metric {
    ($(#[$doc:meta])* $name:ident, $label:literal, $precision:literal, |$record:ident| $value:expr) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $name {
            name: MetricName,
            state: NumericMetricState,
        }

        impl $name {
            /// The metric; register it with `metric_train_numeric`.
            pub fn new() -> Self {
                Self {
                    name: Arc::new($label.to_string()),
                    state: NumericMetricState::new(),
                }
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl Metric for $name {
            type Input = ScaleRecord;

            fn update(&mut self, $record: &ScaleRecord, _: &MetricMetadata) -> SerializedEntry {
                let value: f64 = $value;
                self.state
                    .update(value, 1, FormatOptions::new(self.name()).precision($precision))
            }

            fn clear(&mut self) {
                self.state.reset()
            }

            fn name(&self) -> MetricName {
                self.name.clone()
            }

            fn attributes(&self) -> MetricAttributes {
                NumericAttributes {
                    unit: None,
                    higher_is_better: false,
                }
                .into()
            }
        }

        impl Numeric for $name {
            fn value(&self) -> NumericEntry {
                self.state.current_value()
            }

            fn running_value(&self) -> NumericEntry {
                self.state.running_value()
            }
        }
    };
}

record_metric!(
    /// The scale each step's loss was multiplied by: the scale *used* by the step, as
    /// PyTorch's `scaler.get_scale()` reads it before `scaler.update()`. A step that
    /// overflows logs the scale it overflowed at; the backed-off scale shows from the next
    /// step on.
    ///
    /// ```
    /// use burn::train::metric::Metric;
    /// use burn_mpric::learner::LossScaleMetric;
    ///
    /// assert_eq!(LossScaleMetric::new().name().as_str(), "Loss Scale");
    /// ```
    LossScaleMetric,
    "Loss Scale",
    1,
    |record| f64::from(record.scale_used)
);

record_metric!(
    /// The number of skipped (non-finite) steps so far, the logged step included.
    ///
    /// ```
    /// use burn::train::metric::Metric;
    /// use burn_mpric::learner::SkippedStepsMetric;
    ///
    /// assert_eq!(SkippedStepsMetric::new().name().as_str(), "Skipped Steps");
    /// ```
    SkippedStepsMetric,
    "Skipped Steps",
    0,
    |record| record.skipped_total() as f64
);

record_metric!(
    /// The probe's cause of each skipped step ([`SkipCause::metric_value`]): 0 for an
    /// applied or unprobed step, 1 for a range problem (a dynamic scale fixes it), 2 for a
    /// loss that is not finite (the forward pass overflows or an op returns NaN), 3 for "not a
    /// range problem" (an op computes the gradients wrongly whatever the scale). Steps are
    /// probed when the model's [`LossStep::probe_copy`](crate::LossStep::probe_copy) keeps a
    /// copy of the batch.
    ///
    /// ```
    /// use burn::train::metric::Metric;
    /// use burn_mpric::learner::SkipCauseMetric;
    ///
    /// assert_eq!(SkipCauseMetric::new().name().as_str(), "Skip Cause");
    /// ```
    SkipCauseMetric,
    "Skip Cause",
    0,
    |record| record
        .outcome
        .as_ref()
        .and_then(|o| o.cause.as_ref())
        .map_or(0.0, SkipCause::metric_value)
);

/// The parameters whose gradients held inf or NaN in the logged step, by their module path
/// in the model (`model.l2.weight`): the names a skipped step's outcome carries, `-` for an
/// applied step. Register it with `metric_train`; its log holds one line per step, the names
/// separated by `;`.
///
/// ```
/// use burn::train::metric::{Metric, MetricMetadata};
/// use burn::data::dataloader::Progress;
/// use burn_mpric::learner::{OverflowedParamsMetric, ScaleRecord};
///
/// let mut metric = OverflowedParamsMetric::new();
/// assert_eq!(metric.name().as_str(), "Overflowed Parameters");
/// let progress = Progress { items_processed: 1, items_total: 1 };
/// let meta = MetricMetadata { progress: progress.clone(), global_progress: progress, iteration: None, lr: None };
/// let entry = metric.update(&ScaleRecord::undecided(1024.0, 0), &meta);
/// assert_eq!(entry.serialized, "-");
/// ```
#[derive(Clone)]
pub struct OverflowedParamsMetric {
    name: MetricName,
}

impl OverflowedParamsMetric {
    /// The metric; register it with `metric_train`.
    pub fn new() -> Self {
        Self {
            name: Arc::new("Overflowed Parameters".to_string()),
        }
    }
}

impl Default for OverflowedParamsMetric {
    fn default() -> Self {
        Self::new()
    }
}

impl Metric for OverflowedParamsMetric {
    type Input = ScaleRecord;

    fn update(&mut self, record: &ScaleRecord, _: &MetricMetadata) -> SerializedEntry {
        match record.outcome.as_ref().and_then(|o| o.overflow.as_ref()) {
            Some(overflow) => SerializedEntry::new(
                format!(
                    "{}: {}",
                    self.name,
                    overflow.summary(burn_mpric_scale::OVERFLOW_NAMES_SHOWN)
                ),
                if overflow.params.is_empty() {
                    "(global norm)".to_string()
                } else {
                    overflow.params.join(";")
                },
            ),
            None => SerializedEntry::new(format!("{}: none", self.name), "-".to_string()),
        }
    }

    fn clear(&mut self) {}

    fn name(&self) -> MetricName {
        self.name.clone()
    }

    fn attributes(&self) -> MetricAttributes {
        MetricAttributes::None
    }
}
