//! burn-train metrics that show the loss scale and the skipped steps.

use std::sync::Arc;

use burn::train::metric::state::{FormatOptions, NumericMetricState};
use burn::train::metric::{
    Metric, MetricAttributes, MetricMetadata, MetricName, Numeric, NumericAttributes, NumericEntry,
    SerializedEntry,
};

use crate::ScalerHandle;

macro_rules! scaler_metric {
    ($(#[$doc:meta])* $name:ident, $label:literal, $precision:literal, |$handle:ident| $value:expr) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $name {
            handle: ScalerHandle,
            name: MetricName,
            state: NumericMetricState,
        }

        impl $name {
            /// A metric reading `handle`.
            pub fn new(handle: ScalerHandle) -> Self {
                Self {
                    handle,
                    name: Arc::new($label.to_string()),
                    state: NumericMetricState::new(),
                }
            }
        }

        impl Metric for $name {
            type Input = ();

            fn update(&mut self, _: &(), _: &MetricMetadata) -> SerializedEntry {
                let $handle = &self.handle;
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

scaler_metric!(
    /// The loss scale after each step.
    ///
    /// ```
    /// use burn::train::metric::Metric;
    /// use burn_mpric_learner::{LossScaleMetric, ScalerHandle};
    ///
    /// let metric = LossScaleMetric::new(ScalerHandle::default());
    /// assert_eq!(metric.name().as_str(), "Loss Scale");
    /// ```
    LossScaleMetric,
    "Loss Scale",
    1,
    |handle| f64::from(handle.scale())
);

scaler_metric!(
    /// The number of skipped (non-finite) steps so far.
    ///
    /// ```
    /// use burn::train::metric::Metric;
    /// use burn_mpric_learner::{ScalerHandle, SkippedStepsMetric};
    ///
    /// let metric = SkippedStepsMetric::new(ScalerHandle::default());
    /// assert_eq!(metric.name().as_str(), "Skipped Steps");
    /// ```
    SkippedStepsMetric,
    "Skipped Steps",
    0,
    |handle| handle.stats().skipped as f64
);
