//! burn-train metrics of the loss scale and the skipped steps, each read from the
//! [`ScaleRecord`] its own step's item carries (never from the shared scaler).

use std::sync::Arc;

use burn::tensor::TensorReadError;
use burn::train::metric::state::{FormatOptions, NumericMetricState};
use burn::train::metric::{
    Metric, MetricAttributes, MetricMetadata, MetricName, Numeric, NumericAttributes, NumericEntry,
    SerializedEntry,
};

use super::ScaleRecord;

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

            fn format(&self) -> FormatOptions {
                FormatOptions::new(self.name()).precision($precision)
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl Metric for $name {
            type Input = ScaleRecord;

            fn update(
                &mut self,
                $record: &ScaleRecord,
                _metadata: &MetricMetadata,
            ) -> Result<SerializedEntry, TensorReadError> {
                let value: f64 = $value;
                self.state.update(value, 1);
                Ok(self.state.compute_update(self.format()))
            }

            fn compute(&mut self) -> Result<SerializedEntry, TensorReadError> {
                Ok(self.state.compute_final(self.format()))
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
            fn value(&self) -> Option<NumericEntry> {
                Some(self.state.current_value())
            }

            fn running_value(&self) -> Option<NumericEntry> {
                Some(self.state.running_value())
            }

            fn final_value(&self) -> NumericEntry {
                self.state.final_value()
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
    /// # Example
    ///
    /// ```
    /// use burn::train::metric::Metric;
    /// use burn_mpric_022::LossScaleMetric;
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
    /// # Example
    ///
    /// ```
    /// use burn::train::metric::Metric;
    /// use burn_mpric_022::SkippedStepsMetric;
    ///
    /// assert_eq!(SkippedStepsMetric::new().name().as_str(), "Skipped Steps");
    /// ```
    SkippedStepsMetric,
    "Skipped Steps",
    0,
    |record| record.skipped_total() as f64
);

record_metric!(
    /// The probe's cause of each skipped step: 0 for an applied or unprobed step, 1 for a
    /// range problem (a dynamic scale fixes it), 2 for a loss that is not finite (the forward
    /// pass overflows or an op returns NaN), 3 for "not a range problem" (an op computes the
    /// gradients wrongly whatever the scale). Steps are probed when the model's
    /// [`LossStep::probe_copy`](crate::LossStep::probe_copy) keeps a copy of the batch.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::train::metric::Metric;
    /// use burn_mpric_022::SkipCauseMetric;
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
        .map_or(0.0, burn_mpric_core::scale::SkipCause::metric_value)
);
