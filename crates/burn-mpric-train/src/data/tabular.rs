//! Tabular datasets from `linfa-datasets` (the data ships inside the package: nothing is
//! downloaded): iris and red-wine quality as classification, diabetes as regression.

use crate::data::rng::Rng;
use crate::error::RecipeError;
use crate::recipe::DatasetName;

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

/// A tabular dataset split into training and evaluation examples, features standardized
/// with the training split's statistics.
#[derive(Debug, Clone)]
pub struct Tabular {
    /// Which dataset.
    pub name: DatasetName,
    /// Features per example.
    pub features: usize,
    /// Classification or regression.
    pub task: Task,
    train_x: Vec<f32>,
    train_y: Vec<f32>,
    eval_x: Vec<f32>,
    eval_y: Vec<f32>,
}

impl Tabular {
    /// Loads `name` and splits off `eval_fraction` of it for evaluation, with a split drawn
    /// from `seed`.
    pub fn load(name: DatasetName, eval_fraction: f64, seed: u64) -> Result<Self, RecipeError> {
        let (records, targets, features, classification): (Vec<f64>, Vec<f64>, usize, bool) =
            match name {
                DatasetName::Iris => {
                    let ds = linfa_datasets::iris();
                    let features = ds.records.ncols();
                    (
                        ds.records.iter().copied().collect(),
                        ds.targets.iter().map(|t| *t as f64).collect(),
                        features,
                        true,
                    )
                }
                DatasetName::Winequality => {
                    let ds = linfa_datasets::winequality();
                    let features = ds.records.ncols();
                    (
                        ds.records.iter().copied().collect(),
                        ds.targets.iter().map(|t| *t as f64).collect(),
                        features,
                        true,
                    )
                }
                DatasetName::Diabetes => {
                    let ds = linfa_datasets::diabetes();
                    let features = ds.records.ncols();
                    (
                        ds.records.iter().copied().collect(),
                        ds.targets.iter().copied().collect(),
                        features,
                        false,
                    )
                }
                DatasetName::TinyText => {
                    return Err(RecipeError::new(
                        "dataset.name",
                        "tiny_text is not a tabular dataset",
                    ));
                }
            };
        let n = targets.len();
        // Classes: the distinct target values in order (wine quality 3..=8 becomes 0..=5).
        let (task, targets) = if classification {
            let mut values: Vec<i64> = targets.iter().map(|t| *t as i64).collect();
            values.sort_unstable();
            values.dedup();
            let index = |t: f64| values.iter().position(|v| *v == t as i64).unwrap_or(0) as f64;
            let mapped = targets.iter().map(|t| index(*t)).collect();
            (
                Task::Classification {
                    classes: values.len(),
                },
                mapped,
            )
        } else {
            (Task::Regression, targets)
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

        // Feature statistics of the training split.
        let mut mean = vec![0.0f64; features];
        let mut var = vec![0.0f64; features];
        for &i in &train_idx {
            for (f, m) in mean.iter_mut().enumerate() {
                *m += records[i * features + f];
            }
        }
        mean.iter_mut().for_each(|m| *m /= train_idx.len() as f64);
        for &i in &train_idx {
            for f in 0..features {
                let d = records[i * features + f] - mean[f];
                var[f] += d * d;
            }
        }
        let std: Vec<f64> = var
            .iter()
            .map(|v| {
                let s = (v / train_idx.len() as f64).sqrt();
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
        let take = |idx: &[usize]| -> (Vec<f32>, Vec<f32>) {
            let mut x = Vec::with_capacity(idx.len() * features);
            let mut y = Vec::with_capacity(idx.len());
            for &i in idx {
                for f in 0..features {
                    x.push(((records[i * features + f] - mean[f]) / std[f]) as f32);
                }
                y.push(((targets[i] - y_mean) / y_std) as f32);
            }
            (x, y)
        };
        let (train_x, train_y) = take(&train_idx);
        let (eval_x, eval_y) = take(&eval_idx);
        Ok(Self {
            name,
            features,
            task,
            train_x,
            train_y,
            eval_x,
            eval_y,
        })
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
