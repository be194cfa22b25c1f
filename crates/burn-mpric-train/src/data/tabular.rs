//! Tabular data: features and targets, split into training and evaluation examples, features
//! standardized with the training split's statistics. The bundled sets come from
//! `linfa-datasets` (the data ships inside the package: nothing is downloaded): iris and
//! red-wine quality as classification, diabetes as regression; CSV files and image folders
//! arrive here as a [`Table`].

use crate::data::rng::Rng;
use crate::digest::FileDigest;
use crate::error::RecipeError;
use crate::recipe::DatasetName;
use crate::schema::Scaling;

/// What the targets are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    /// Class indices `0..classes`; cross-entropy loss, accuracy reported.
    Classification {
        /// Number of classes.
        classes: usize,
    },
    /// One real target, standardized with the training split's mean and deviation; MSE
    /// loss (1.0 is what predicting the mean scores).
    Regression,
}

/// Examples as read from a source, before the split: row-major features and the targets.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// `examples × features` values, row-major.
    pub values: Vec<f64>,
    /// Features per example.
    pub features: usize,
    /// The feature columns' names (as many as `features`; empty for images).
    pub names: Vec<String>,
    /// The target column's name.
    pub target: String,
    /// One target per example.
    pub targets: Targets,
}

/// The targets of a [`Table`].
#[derive(Debug, Clone, PartialEq)]
pub enum Targets {
    /// Class ids (indices into `names`).
    Classes {
        /// One class id per example.
        ids: Vec<usize>,
        /// The class names, in id order.
        names: Vec<String>,
    },
    /// Regression targets.
    Values(Vec<f64>),
}

impl Targets {
    fn len(&self) -> usize {
        match self {
            Targets::Classes { ids, .. } => ids.len(),
            Targets::Values(v) => v.len(),
        }
    }
}

/// A tabular dataset split into training and evaluation examples, features standardized
/// with the training split's statistics.
#[derive(Debug, Clone)]
pub struct Tabular {
    /// How messages name the dataset.
    pub name: String,
    /// Features per example.
    pub features: usize,
    /// Classification or regression.
    pub task: Task,
    /// The content hash of the files the data was read from (none for bundled data).
    pub digest: Option<FileDigest>,
    /// The feature columns' names (empty for images).
    pub columns: Vec<String>,
    /// The target column's name.
    pub target: String,
    /// The class names in class-id order (empty for regression).
    pub classes: Vec<String>,
    /// The training split's statistics the features and the target were standardized with.
    pub scaling: Scaling,
    train_x: Vec<f32>,
    train_y: Vec<f32>,
    eval_x: Vec<f32>,
    eval_y: Vec<f32>,
}

impl Tabular {
    /// Loads the bundled `name` and splits off `eval_fraction` of it for evaluation, with a
    /// split drawn from `seed`.
    pub fn load(name: DatasetName, eval_fraction: f64, seed: u64) -> Result<Self, RecipeError> {
        let classes = |targets: Vec<usize>| {
            // The distinct target values in order (wine quality 3..=8 becomes 0..=5).
            let mut values = targets.clone();
            values.sort_unstable();
            values.dedup();
            Targets::Classes {
                ids: targets
                    .iter()
                    .map(|t| values.binary_search(t).unwrap_or(0))
                    .collect(),
                names: values.iter().map(ToString::to_string).collect(),
            }
        };
        let table = match name {
            DatasetName::Iris | DatasetName::Winequality => {
                let ds = if name == DatasetName::Iris {
                    linfa_datasets::iris()
                } else {
                    linfa_datasets::winequality()
                };
                Table {
                    features: ds.records.ncols(),
                    names: ds.feature_names().to_vec(),
                    target: name.target_column().to_string(),
                    values: ds.records.iter().copied().collect(),
                    targets: classes(ds.targets.iter().copied().collect()),
                }
            }
            DatasetName::Diabetes => {
                let ds = linfa_datasets::diabetes();
                Table {
                    features: ds.records.ncols(),
                    names: ds.feature_names().to_vec(),
                    target: name.target_column().to_string(),
                    values: ds.records.iter().copied().collect(),
                    targets: Targets::Values(ds.targets.iter().copied().collect()),
                }
            }
            DatasetName::TinyText => {
                return Err(RecipeError::new(
                    "dataset.name",
                    "tiny_text is not a tabular dataset",
                ));
            }
        };
        Self::split(name.to_string(), table, eval_fraction, seed, 1)
    }

    /// Splits `table` into training and evaluation examples (`eval_fraction` held out, the
    /// split drawn from `seed`) and standardizes the features with the training split's
    /// mean and deviation, per group of `group` consecutive features (1: each feature on its
    /// own; an image's pixels share one group per channel).
    pub fn split(
        name: String,
        table: Table,
        eval_fraction: f64,
        seed: u64,
        group: usize,
    ) -> Result<Self, RecipeError> {
        let Table {
            values: records,
            features,
            names: columns,
            target,
            targets,
        } = table;
        let n = targets.len();
        if n < 2 {
            return Err(RecipeError::new(
                "dataset",
                format!(
                    "{name} has {n} example{}; a run needs at least 2 (one to train on, one held out)",
                    if n == 1 { "" } else { "s" }
                ),
            ));
        }
        let (task, classes, targets): (Task, Vec<String>, Vec<f64>) = match targets {
            Targets::Classes { ids, names } => (
                Task::Classification {
                    classes: names.len(),
                },
                names,
                ids.into_iter().map(|c| c as f64).collect(),
            ),
            Targets::Values(values) => (Task::Regression, Vec::new(), values),
        };

        let eval_n = ((n as f64 * eval_fraction).round() as usize).clamp(1, n - 1);
        let mut order: Vec<usize> = (0..n).collect();
        Rng::stream(seed, SPLIT_STREAM).shuffle(&mut order);
        let (eval_idx, train_idx) = order.split_at(eval_n);
        let mut train_idx = train_idx.to_vec();
        let mut eval_idx = eval_idx.to_vec();
        // Keep the file order inside each split: only membership depends on the seed.
        train_idx.sort_unstable();
        eval_idx.sort_unstable();

        // Feature statistics of the training split, one per group.
        let group = group.clamp(1, features.max(1));
        let groups = features.div_ceil(group);
        let count = (train_idx.len() * group) as f64;
        let mut mean = vec![0.0f64; groups];
        let mut var = vec![0.0f64; groups];
        for &i in &train_idx {
            for f in 0..features {
                mean[f / group] += records[i * features + f];
            }
        }
        mean.iter_mut().for_each(|m| *m /= count);
        for &i in &train_idx {
            for f in 0..features {
                let d = records[i * features + f] - mean[f / group];
                var[f / group] += d * d;
            }
        }
        let std: Vec<f64> = var
            .iter()
            .map(|v| {
                let s = (v / count).sqrt();
                if s > 1e-12 { s } else { 1.0 }
            })
            .collect();
        let (y_mean, y_std) = if task == Task::Regression {
            let m = train_idx.iter().map(|&i| targets[i]).sum::<f64>() / train_idx.len() as f64;
            let v = train_idx
                .iter()
                .map(|&i| (targets[i] - m).powi(2))
                .sum::<f64>()
                / train_idx.len() as f64;
            (m, v.sqrt().max(1e-12))
        } else {
            (0.0, 1.0)
        };
        let scaling = Scaling {
            group,
            mean,
            std,
            target: (task == Task::Regression).then_some((y_mean, y_std)),
        };
        let take = |idx: &[usize]| -> (Vec<f32>, Vec<f32>) {
            let mut x = Vec::with_capacity(idx.len() * features);
            let mut y = Vec::with_capacity(idx.len());
            for &i in idx {
                x.extend(scaling.features(&records[i * features..(i + 1) * features]));
                y.push(scaling.target_in(targets[i]));
            }
            (x, y)
        };
        let (train_x, train_y) = take(&train_idx);
        let (eval_x, eval_y) = take(&eval_idx);
        Ok(Self {
            name,
            features,
            task,
            digest: None,
            columns,
            target,
            classes,
            scaling,
            train_x,
            train_y,
            eval_x,
            eval_y,
        })
    }

    /// A table of held-out examples only (no training split): rows of a file scored by a
    /// model trained on another table, `x` already standardized with that table's
    /// statistics, `y` class ids or standardized targets.
    pub(crate) fn held_out(name: String, like: &Tabular, x: Vec<f32>, y: Vec<f32>) -> Self {
        Self {
            name,
            features: like.features,
            task: like.task,
            digest: None,
            columns: like.columns.clone(),
            target: like.target.clone(),
            classes: like.classes.clone(),
            scaling: like.scaling.clone(),
            train_x: Vec::new(),
            train_y: Vec::new(),
            eval_x: x,
            eval_y: y,
        }
    }

    /// Training examples.
    pub fn train_len(&self) -> usize {
        self.train_y.len()
    }

    /// Evaluation examples.
    pub fn eval_len(&self) -> usize {
        self.eval_y.len()
    }

    /// Outputs of a model for this task: the classes, or 1 for regression.
    pub fn outputs(&self) -> usize {
        match self.task {
            Task::Classification { classes } => classes,
            Task::Regression => 1,
        }
    }

    /// The features (row-major, `items.len() × features`) and targets of some examples.
    pub fn rows(&self, eval: bool, items: &[usize]) -> (Vec<f32>, Vec<f32>) {
        let (x, y) = if eval {
            (&self.eval_x, &self.eval_y)
        } else {
            (&self.train_x, &self.train_y)
        };
        let mut xs = Vec::with_capacity(items.len() * self.features);
        let mut ys = Vec::with_capacity(items.len());
        for &i in items {
            xs.extend_from_slice(&x[i * self.features..(i + 1) * self.features]);
            ys.push(y[i]);
        }
        (xs, ys)
    }
}

/// The random stream of the train/eval split.
const SPLIT_STREAM: u64 = 1;

#[cfg(test)]
mod tests {
    #[test]
    fn task() {
        use crate::data::tabular::{Tabular, Task};
        use crate::recipe::DatasetName;
        let wine = Tabular::load(DatasetName::Winequality, 0.2, 0).unwrap();
        assert_eq!(wine.task, Task::Classification { classes: 6 });
        let diabetes = Tabular::load(DatasetName::Diabetes, 0.2, 0).unwrap();
        assert_eq!(diabetes.task, Task::Regression);
    }

    #[test]
    fn tabular() {
        use crate::data::tabular::{Tabular, Task};
        use crate::recipe::DatasetName;

        let iris = Tabular::load(DatasetName::Iris, 0.2, 0).unwrap();
        assert_eq!(
            (iris.features, iris.train_len(), iris.eval_len()),
            (4, 120, 30)
        );
        assert_eq!(iris.task, Task::Classification { classes: 3 });
    }

    #[test]
    fn load() {
        use crate::data::tabular::Tabular;
        use crate::recipe::DatasetName;
        let a = Tabular::load(DatasetName::Iris, 0.2, 0).unwrap();
        let b = Tabular::load(DatasetName::Iris, 0.2, 1).unwrap();
        assert_ne!(a.rows(true, &[0]), b.rows(true, &[0])); // another split
        assert!(Tabular::load(DatasetName::TinyText, 0.2, 0).is_err());
    }

    #[test]
    fn train_len() {
        use crate::data::tabular::Tabular;
        use crate::recipe::DatasetName;
        assert_eq!(
            Tabular::load(DatasetName::Iris, 0.5, 0)
                .unwrap()
                .train_len(),
            75
        );
    }

    #[test]
    fn eval_len() {
        use crate::data::tabular::Tabular;
        use crate::recipe::DatasetName;
        assert_eq!(
            Tabular::load(DatasetName::Iris, 0.1, 0).unwrap().eval_len(),
            15
        );
    }

    #[test]
    fn outputs() {
        use crate::data::tabular::Tabular;
        use crate::recipe::DatasetName;
        assert_eq!(
            Tabular::load(DatasetName::Diabetes, 0.2, 0)
                .unwrap()
                .outputs(),
            1
        );
    }

    #[test]
    fn rows() {
        use crate::data::tabular::Tabular;
        use crate::recipe::DatasetName;
        let iris = Tabular::load(DatasetName::Iris, 0.2, 0).unwrap();
        let (x, y) = iris.rows(false, &[0, 1]);
        assert_eq!((x.len(), y.len()), (8, 2));
        assert!(y.iter().all(|c| [0.0, 1.0, 2.0].contains(c)));
    }
}
