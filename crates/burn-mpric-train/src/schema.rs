//! What a trained model reads and gives, saved with every checkpoint and beside every
//! export: the input columns (or image shape, or characters), the training split's
//! standardization, and the class names or the regression target. `mpric predict` reads new
//! inputs with it, so that the same input gives the same answer as during training.

use serde::{Deserialize, Serialize};

use crate::recipe::Channels;

/// A model's inputs and outputs.
///
/// ```
/// use burn_mpric_train::schema::{InputKind, OutputKind, Schema};
/// use burn_mpric_train::{Plan, Recipe};
///
/// let plan = Plan::new(Recipe::example(), "example")?; // an MLP on iris
/// let schema = plan.schema();
/// assert!(matches!(&schema.inputs, InputKind::Columns { names } if names[0] == "sepal length"));
/// assert!(matches!(&schema.outputs, OutputKind::Classes { target, names }
///     if target == "species" && names == &["0", "1", "2"]));
/// assert_eq!(schema.scaling.as_ref().unwrap().mean.len(), 4);
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schema {
    /// What the model reads.
    pub inputs: InputKind,
    /// How raw features become model inputs (none for text).
    pub scaling: Option<Scaling>,
    /// What the model gives.
    pub outputs: OutputKind,
}

/// What a model reads.
///
/// ```
/// use burn_mpric_train::schema::InputKind;
///
/// let text = InputKind::Text { vocab: "ab ".into(), context: 8 };
/// assert_eq!(serde_json::to_string(&text).unwrap(), r#"{"text":{"vocab":"ab ","context":8}}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// Numeric columns, by name, in the order the model reads them.
    Columns {
        /// The feature columns.
        names: Vec<String>,
    },
    /// Square images, channel-major values in `[0, 1]` before standardization.
    Image {
        /// Colour or grey.
        channels: Channels,
        /// Height and width in pixels.
        size: usize,
    },
    /// Characters.
    Text {
        /// The vocabulary: token `i` is the `i`-th character.
        vocab: String,
        /// The longest input the model reads.
        context: usize,
    },
}

/// What a model gives.
///
/// ```
/// use burn_mpric_train::schema::OutputKind;
///
/// let value = OutputKind::Value { target: "price".into() };
/// assert_eq!(value.target(), "price");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputKind {
    /// One logit per class.
    Classes {
        /// The target column (or `class folder` for images).
        target: String,
        /// The class labels as the data spells them, in logit order.
        names: Vec<String>,
    },
    /// One standardized value (see [`Scaling::target_out`]).
    Value {
        /// The target column.
        target: String,
    },
    /// One logit per character of the vocabulary.
    NextCharacter,
}

impl OutputKind {
    /// The name of what the model predicts.
    pub fn target(&self) -> &str {
        match self {
            OutputKind::Classes { target, .. } | OutputKind::Value { target } => target,
            OutputKind::NextCharacter => "next character",
        }
    }
}

/// The statistics of a training split that features and targets are standardized with:
/// `(value - mean) / std`, computed in f64 and rounded to f32 once, so that the rows of
/// `mpric predict` get the bits the model trained on.
///
/// ```
/// use burn_mpric_train::schema::Scaling;
///
/// let s = Scaling { group: 1, mean: vec![1.0, 10.0], std: vec![2.0, 5.0], target: Some((3.0, 0.5)) };
/// assert_eq!(s.features(&[2.0, 0.0]), vec![0.5, -2.0]);
/// assert_eq!(s.target_in(4.0), 2.0);
/// assert_eq!(s.target_out(2.0), 4.0);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scaling {
    /// Consecutive features that share one mean and deviation (1 for columns; an image's
    /// `size * size` pixels of one channel).
    pub group: usize,
    /// The mean of each group of features over the training split.
    pub mean: Vec<f64>,
    /// The standard deviation of each group (1 where a feature is constant).
    pub std: Vec<f64>,
    /// The regression target's mean and deviation; `None` for classification.
    pub target: Option<(f64, f64)>,
}

impl Scaling {
    /// One example's raw features, standardized.
    pub fn features(&self, raw: &[f64]) -> Vec<f32> {
        let group = self.group.max(1);
        raw.iter()
            .enumerate()
            .map(|(f, v)| ((v - self.mean[f / group]) / self.std[f / group]) as f32)
            .collect()
    }

    /// A raw target as the model trains on it (unchanged for classes).
    pub fn target_in(&self, raw: f64) -> f32 {
        match self.target {
            Some((mean, std)) => ((raw - mean) / std) as f32,
            None => raw as f32,
        }
    }

    /// A model output back in the target's own units.
    pub fn target_out(&self, standardized: f32) -> f64 {
        match self.target {
            Some((mean, std)) => f64::from(standardized) * std + mean,
            None => f64::from(standardized),
        }
    }
}
