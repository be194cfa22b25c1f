//! Datasets, the deterministic batch order, and batches as tensors.

pub mod csv;
pub mod images;
pub mod rng;
pub mod source;
pub mod tabular;
pub mod text;

use std::path::Path;

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::data::rng::Rng;
use crate::digest::FileDigest;
use crate::error::RecipeError;
use crate::recipe::{DataSource, DatasetConfig, ModelConfig};
use images::{ImageShape, Images};
use tabular::{Tabular, Task};
use text::Text;

/// A loaded dataset.
#[derive(Debug, Clone)]
pub enum Dataset {
    /// Features and targets.
    Tabular(Tabular),
    /// Characters.
    Text(Text),
    /// Images (their pixels as features) and classes.
    Images(Images),
}

/// A dataset seen by what it is made of.
enum Examples<'a> {
    /// Rows of features and targets (tabular data, images).
    Table(&'a Tabular),
    /// Characters.
    Text(&'a Text),
}

/// The sizes a model needs from its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    /// Features per example, or the vocabulary size for text.
    pub inputs: usize,
    /// Classes, 1 for regression, or the vocabulary size for text.
    pub outputs: usize,
    /// The shape of each image, for image data (`inputs` is its number of values).
    pub image: Option<ImageShape>,
}

impl Dataset {
    /// Loads the dataset of a recipe; the split depends on `seed`; relative paths start at
    /// `base` (the recipe file's folder).
    pub fn load(
        spec: &DatasetConfig,
        model: &ModelConfig,
        seed: u64,
        base: &Path,
    ) -> Result<Self, RecipeError> {
        let fraction = spec.eval_fraction();
        let context = || match model {
            ModelConfig::TransformerLm(c) => Ok(c.context),
            _ => Err(RecipeError::new(
                "model.kind",
                "text trains model kind `transformer_lm`",
            )),
        };
        match spec.source()? {
            DataSource::Builtin(crate::recipe::DatasetName::TinyText) => {
                Text::load(fraction, context()?).map(Dataset::Text)
            }
            DataSource::Builtin(name) => Tabular::load(name, fraction, seed).map(Dataset::Tabular),
            DataSource::Text { path } => {
                let (path, bytes, digest) = source::read_file(base, &path)?;
                Text::from_file(&path, &bytes, digest, fraction, context()?).map(Dataset::Text)
            }
            DataSource::Csv(csv) => {
                let (path, bytes, digest) = source::read_file(base, &csv.path)?;
                let table = csv::parse(&path, &bytes, &csv)?;
                drop(bytes);
                let name = format!("csv {}", csv.path.display());
                let mut data = Tabular::split(name, table, fraction, seed, 1)?;
                data.digest = Some(digest);
                Ok(Dataset::Tabular(data))
            }
            DataSource::ImageFolder(images) => {
                images::load(base, &images, fraction, seed).map(Dataset::Images)
            }
        }
    }

    /// What a model of this data reads and gives.
    pub fn schema(&self) -> crate::schema::Schema {
        use crate::schema::{InputKind, OutputKind, Schema};
        match self {
            Dataset::Text(t) => Schema {
                inputs: InputKind::Text {
                    vocab: t.vocab().iter().collect(),
                    context: t.context(),
                },
                scaling: None,
                outputs: OutputKind::NextCharacter,
            },
            Dataset::Tabular(t) | Dataset::Images(Images { table: t, .. }) => Schema {
                inputs: match self {
                    Dataset::Images(i) => InputKind::Image {
                        channels: i.channels,
                        size: i.shape.size,
                    },
                    _ => InputKind::Columns {
                        names: t.columns.clone(),
                    },
                },
                scaling: Some(t.scaling.clone()),
                outputs: match t.task {
                    Task::Classification { .. } => OutputKind::Classes {
                        target: t.target.clone(),
                        names: t.classes.clone(),
                    },
                    Task::Regression => OutputKind::Value {
                        target: t.target.clone(),
                    },
                },
            },
        }
    }

    /// The content hash of the user's data files (none for bundled data).
    pub fn digest(&self) -> Option<&FileDigest> {
        match self {
            Dataset::Tabular(t) => t.digest.as_ref(),
            Dataset::Images(i) => i.table.digest.as_ref(),
            Dataset::Text(t) => t.digest.as_ref(),
        }
    }

    /// What the data is made of: a table of examples (tabular data and images) or a text.
    fn examples(&self) -> Examples<'_> {
        match self {
            Dataset::Tabular(t) => Examples::Table(t),
            Dataset::Images(i) => Examples::Table(&i.table),
            Dataset::Text(t) => Examples::Text(t),
        }
    }

    /// The examples as a table, for data made of features (tabular and images).
    fn tabular(&self) -> Option<&Tabular> {
        match self.examples() {
            Examples::Table(t) => Some(t),
            Examples::Text(_) => None,
        }
    }

    /// Input and output sizes for the model.
    pub fn dims(&self) -> Dims {
        match self.examples() {
            Examples::Table(t) => Dims {
                inputs: t.features,
                outputs: t.outputs(),
                image: match self {
                    Dataset::Images(i) => Some(i.shape),
                    _ => None,
                },
            },
            Examples::Text(t) => Dims {
                inputs: t.vocab_size(),
                outputs: t.vocab_size(),
                image: None,
            },
        }
    }

    #[cfg(test)]
    /// Training examples (tabular) or characters (text).
    pub fn train_len(&self) -> usize {
        match self.examples() {
            Examples::Table(t) => t.train_len(),
            Examples::Text(t) => t.train_len(),
        }
    }

    #[cfg(test)]
    /// Evaluation examples (tabular) or characters (text).
    pub fn eval_len(&self) -> usize {
        match self.examples() {
            Examples::Table(t) => t.eval_len(),
            Examples::Text(t) => t.eval_len(),
        }
    }

    /// Whether accuracy applies (classification and language modelling).
    pub fn has_accuracy(&self) -> bool {
        self.tabular().is_none_or(|t| t.task != Task::Regression)
    }

    /// Steps in one epoch: full batches per pass over the training examples (tabular), or
    /// batches of windows that cover the training characters once on average (text).
    pub fn steps_per_epoch(&self, batch_size: usize) -> u64 {
        let batch_size = batch_size.max(1);
        let steps = match self.examples() {
            Examples::Table(t) => t.train_len() / batch_size,
            Examples::Text(t) => t.train_len() / (batch_size * t.context()),
        };
        steps.max(1) as u64
    }

    /// Errors if a batch is larger than the training split.
    pub fn check_batch_size(&self, batch_size: usize) -> Result<(), RecipeError> {
        if let Dataset::Text(_) = self
            && batch_size > MAX_TEXT_BATCH
        {
            return Err(RecipeError::new(
                "batch_size",
                format!("must be at most {MAX_TEXT_BATCH} sequences, got {batch_size}"),
            ));
        }
        if let Some(t) = self.tabular()
            && batch_size > t.train_len()
        {
            return Err(RecipeError::new(
                "batch_size",
                format!(
                    "must be at most the training split of {} ({} examples), got {batch_size}",
                    t.name,
                    t.train_len()
                ),
            ));
        }
        Ok(())
    }

    /// Evaluation items in batches of at most `batch_size`.
    pub fn eval_batches(&self, batch_size: usize) -> Vec<Vec<usize>> {
        let items: Vec<usize> = match self.examples() {
            Examples::Table(t) => (0..t.eval_len()).collect(),
            Examples::Text(t) => t.eval_offsets(),
        };
        items
            .chunks(batch_size.max(1))
            .map(<[usize]>::to_vec)
            .collect()
    }

    /// The tensors of some training (`eval == false`) or evaluation items.
    pub fn batch<B: Backend>(&self, eval: bool, items: &[usize], device: &B::Device) -> Batch<B> {
        let n = items.len();
        match self.examples() {
            Examples::Table(t) => {
                let (x, y) = t.rows(eval, items);
                let inputs = Inputs::Features(Tensor::from_data(
                    TensorData::new(x, [n, t.features]),
                    device,
                ));
                let targets = match t.task {
                    Task::Classification { .. } => {
                        let y: Vec<i64> = y.iter().map(|v| *v as i64).collect();
                        Targets::Classes(Tensor::from_data(TensorData::new(y, [n]), device))
                    }
                    Task::Regression => {
                        Targets::Values(Tensor::from_data(TensorData::new(y, [n, 1]), device))
                    }
                };
                Batch {
                    inputs,
                    targets,
                    len: n,
                }
            }
            Examples::Text(t) => {
                let (x, y) = t.windows(eval, items);
                let shape = [n, t.context()];
                Batch {
                    inputs: Inputs::Tokens(Tensor::from_data(TensorData::new(x, shape), device)),
                    targets: Targets::Tokens(Tensor::from_data(TensorData::new(y, shape), device)),
                    len: n * t.context(),
                }
            }
        }
    }

    /// Predictions in a batch of `items` examples (the batch's `len`): one per example, or
    /// one per character of each window for text.
    pub fn predictions(&self, items: usize) -> usize {
        match self {
            Dataset::Text(t) => items * t.context(),
            _ => items,
        }
    }

    /// A one-line description: name, sizes, split (and, for images, the files skipped).
    pub fn describe(&self) -> String {
        match self {
            Dataset::Tabular(t) => format!(
                "{}: {} features, {}, {} train / {} eval examples",
                t.name,
                t.features,
                match t.task {
                    Task::Classification { classes } => format!("{classes} classes"),
                    Task::Regression => "regression (standardized target)".to_string(),
                },
                t.train_len(),
                t.eval_len()
            ),
            Dataset::Images(i) => {
                let shown: Vec<&str> = i.classes.iter().take(8).map(String::as_str).collect();
                let more = if i.classes.len() > 8 { ", ..." } else { "" };
                let skipped = match i.skipped.as_slice() {
                    [] => String::new(),
                    files => format!(
                        "; skipped {} file{} that {} ({}{})",
                        files.len(),
                        if files.len() == 1 { "" } else { "s" },
                        if files.len() == 1 {
                            "is not an image"
                        } else {
                            "are not images"
                        },
                        files.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
                        if files.len() > 3 { ", ..." } else { "" }
                    ),
                };
                format!(
                    "{}: {} classes ({}{more}), {}x{}x{} pixels, {} train / {} eval images{skipped}",
                    i.table.name,
                    i.classes.len(),
                    shown.join(", "),
                    i.shape.channels,
                    i.shape.size,
                    i.shape.size,
                    i.table.train_len(),
                    i.table.eval_len()
                )
            }
            Dataset::Text(t) => format!(
                "{}: {} distinct characters, {} train / {} eval characters, context {}",
                t.name,
                t.vocab_size(),
                t.train_len(),
                t.eval_len(),
                t.context()
            ),
        }
    }
}

/// Model inputs.
#[derive(Debug, Clone)]
pub enum Inputs<B: Backend> {
    /// Standardized features, `[batch, features]`.
    Features(Tensor<B, 2>),
    /// Token ids, `[batch, context]`.
    Tokens(Tensor<B, 2, Int>),
}

/// Training targets.
#[derive(Debug, Clone)]
pub enum Targets<B: Backend> {
    /// Class indices, `[batch]`.
    Classes(Tensor<B, 1, Int>),
    /// Regression targets, `[batch, 1]`.
    Values(Tensor<B, 2>),
    /// Next-token ids, `[batch, context]`.
    Tokens(Tensor<B, 2, Int>),
}

/// One batch: inputs, targets, and the number of predictions it holds.
#[derive(Debug, Clone)]
pub struct Batch<B: Backend> {
    /// The inputs.
    pub inputs: Inputs<B>,
    /// The targets.
    pub targets: Targets<B>,
    /// Predictions in the batch (examples, or characters for text).
    pub len: usize,
}

/// Where the batch order stands: the whole state a checkpoint needs to draw the same next
/// batch.
///
/// For tabular data, `rng` is the generator state at the start of the current epoch (the
/// epoch's shuffle is redrawn from it) and `cursor` the next example of that order; for text,
/// `rng` is the current generator state and `cursor` the number of batches drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataPosition {
    /// Generator state (see above).
    pub rng: u64,
    /// Completed passes over the training split.
    pub epoch: u64,
    /// Position inside the epoch.
    pub cursor: u64,
}

/// Draws training batches in a deterministic order.
#[derive(Debug, Clone)]
pub struct Sampler {
    position: DataPosition,
    batch_size: usize,
    steps_per_epoch: u64,
    kind: SamplerKind,
}

#[derive(Debug, Clone)]
enum SamplerKind {
    Epochs { order: Vec<usize>, next_rng: Rng },
    Windows { max_offset: usize },
}

/// The largest batch of text sequences a recipe may ask for.
const MAX_TEXT_BATCH: usize = 4096;

/// The random stream of the batch order.
const ORDER_STREAM: u64 = 2;

impl Sampler {
    /// The order of a fresh run.
    pub fn new(data: &Dataset, seed: u64, batch_size: usize) -> Self {
        let position = DataPosition {
            rng: Rng::stream(seed, ORDER_STREAM).state(),
            epoch: 0,
            cursor: 0,
        };
        Self::restore(data, position, batch_size)
    }

    /// The order of a resumed run, from a checkpoint's position.
    pub fn restore(data: &Dataset, position: DataPosition, batch_size: usize) -> Self {
        let kind = match data {
            Dataset::Text(t) => SamplerKind::Windows {
                max_offset: t.max_train_offset(),
            },
            _ => {
                let train = data.tabular().map_or(0, Tabular::train_len);
                let (order, next_rng) = shuffled(train, position.rng);
                SamplerKind::Epochs { order, next_rng }
            }
        };
        Self {
            position,
            batch_size,
            steps_per_epoch: data.steps_per_epoch(batch_size),
            kind,
        }
    }

    /// Whether a position (from a checkpoint) can be restored on this data.
    pub fn fits(data: &Dataset, position: DataPosition) -> bool {
        match data {
            Dataset::Text(_) => true,
            _ => data
                .tabular()
                .is_some_and(|t| position.cursor as usize <= t.train_len()),
        }
    }

    /// The position after the batches drawn so far.
    pub fn position(&self) -> DataPosition {
        self.position
    }

    /// The items (example indices or window starts) of the next training batch.
    pub fn next_items(&mut self) -> Vec<usize> {
        let batch = self.batch_size;
        match &mut self.kind {
            SamplerKind::Epochs { order, next_rng } => {
                if self.position.cursor as usize + batch > order.len() {
                    // Drop the incomplete tail; the next epoch is shuffled from where the
                    // generator stands after this epoch's shuffle.
                    self.position.rng = next_rng.state();
                    self.position.epoch += 1;
                    self.position.cursor = 0;
                    let (new_order, new_rng) = shuffled(order.len(), self.position.rng);
                    *order = new_order;
                    *next_rng = new_rng;
                }
                let start = self.position.cursor as usize;
                self.position.cursor += batch as u64;
                order[start..start + batch].to_vec()
            }
            SamplerKind::Windows { max_offset } => {
                let mut rng = Rng::from_state(self.position.rng);
                let items = (0..batch).map(|_| rng.below(*max_offset + 1)).collect();
                self.position.rng = rng.state();
                self.position.cursor += 1;
                self.position.epoch = self.position.cursor / self.steps_per_epoch;
                items
            }
        }
    }
}

/// `0..n` shuffled by a generator in `state`, and the generator after the shuffle.
fn shuffled(n: usize, state: u64) -> (Vec<usize>, Rng) {
    let mut rng = Rng::from_state(state);
    let mut order: Vec<usize> = (0..n).collect();
    rng.shuffle(&mut order);
    (order, rng)
}

#[cfg(test)]
mod tests {
    use crate::data::Dataset;
    use std::path::Path;

    /// The data of `Recipe::example()`: iris, 120 training and 30 evaluation examples.
    fn iris() -> Dataset {
        let recipe = crate::Recipe::example();
        Dataset::load(&recipe.dataset, &recipe.model, 0, Path::new("")).unwrap()
    }

    #[test]
    fn dataset() {
        use crate::Recipe;
        use crate::data::Dataset;

        let recipe = Recipe::example(); // iris
        let data = Dataset::load(&recipe.dataset, &recipe.model.clone(), 0, Path::new("")).unwrap();
        assert_eq!(data.steps_per_epoch(16), 7); // 120 training examples
        assert!(data.check_batch_size(121).is_err());
    }

    #[test]
    fn dims() {
        let data = iris();
        assert_eq!(
            data.dims(),
            crate::data::Dims {
                inputs: 4,
                outputs: 3,
                image: None,
            }
        );
    }

    #[test]
    fn load() {
        use crate::Recipe;
        let recipe = Recipe::example();
        let data = iris();
        assert_eq!(data.train_len() + data.eval_len(), 150);
        let other =
            Dataset::load(&recipe.dataset, &recipe.model.clone(), 1, Path::new("")).unwrap();
        assert_eq!(other.train_len(), data.train_len());
    }

    #[test]
    fn dims_2() {
        let data = iris();
        assert_eq!((data.dims().inputs, data.dims().outputs), (4, 3));
    }

    #[test]
    fn train_len() {
        let data = iris();
        assert_eq!(data.train_len(), 120);
    }

    #[test]
    fn eval_len() {
        let data = iris();
        assert_eq!(data.eval_len(), 30);
    }

    #[test]
    fn has_accuracy() {
        let data = iris();
        assert!(data.has_accuracy());
    }

    #[test]
    fn steps_per_epoch() {
        let data = iris();
        assert_eq!(data.steps_per_epoch(16), 7);
        assert_eq!(data.steps_per_epoch(1000), 1);
    }

    #[test]
    fn check_batch_size() {
        let data = iris();
        assert!(data.check_batch_size(120).is_ok());
        assert_eq!(data.check_batch_size(121).unwrap_err().field, "batch_size");
    }

    #[test]
    fn eval_batches() {
        let data = iris();
        let batches = data.eval_batches(16);
        assert_eq!(
            batches.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![16, 14]
        );
    }

    #[test]
    fn batch() {
        let data = iris();
        use crate::data::Inputs;
        use burn::backend::Flex;

        let batch = data.batch::<Flex>(false, &[0, 5, 7], &Default::default());
        assert_eq!(batch.len, 3);
        assert!(matches!(batch.inputs, Inputs::Features(ref x) if x.dims() == [3, 4]));
    }

    #[test]
    fn predictions() {
        use crate::{Recipe, data::Dataset};

        let recipe = Recipe::example();
        let config = recipe.model.clone();
        let data = Dataset::load(&recipe.dataset, &config, 0, Path::new("")).unwrap();
        assert_eq!(data.predictions(16), 16);
    }

    #[test]
    fn describe() {
        let data = iris();
        assert!(data.describe().starts_with("iris: 4 features, 3 classes"));
    }

    #[test]
    fn inputs() {
        let data = iris();
        use crate::data::Inputs;
        use burn::backend::Flex;

        let batch = data.batch::<Flex>(true, &[0, 1], &Default::default());
        assert!(matches!(batch.inputs, Inputs::Features(_)));
    }

    #[test]
    fn targets() {
        let data = iris();
        use crate::data::Targets;
        use burn::backend::Flex;

        let batch = data.batch::<Flex>(true, &[0, 1], &Default::default());
        assert!(matches!(batch.targets, Targets::Classes(ref y) if y.dims() == [2]));
    }

    #[test]
    fn batch_2() {
        let data = iris();
        let batch = data.batch::<burn::backend::Flex>(false, &[3, 4], &Default::default());
        assert_eq!(batch.len, 2);
    }

    #[test]
    fn dataposition() {
        let data = iris();
        use crate::data::Sampler;

        let mut sampler = Sampler::new(&data, 0, 16);
        for _ in 0..8 {
            sampler.next_items();
        }
        // 7 full batches per epoch: the 8th batch starts the second epoch.
        assert_eq!(
            (sampler.position().epoch, sampler.position().cursor),
            (1, 16)
        );
    }

    #[test]
    fn sampler() {
        use crate::Recipe;
        use crate::data::{Dataset, Sampler};

        let recipe = Recipe::example();
        let data = Dataset::load(&recipe.dataset, &recipe.model.clone(), 0, Path::new("")).unwrap();
        let mut a = Sampler::new(&data, 7, 16);
        a.next_items();
        let mut b = Sampler::restore(&data, a.position(), 16);
        assert_eq!(a.next_items(), b.next_items());
    }

    #[test]
    fn new() {
        let data = iris();
        use crate::data::Sampler;

        let (mut a, mut b) = (Sampler::new(&data, 0, 16), Sampler::new(&data, 1, 16));
        assert_ne!(a.next_items(), b.next_items());
    }

    #[test]
    fn restore() {
        let data = iris();
        use crate::data::Sampler;

        let mut a = Sampler::new(&data, 0, 16);
        for _ in 0..9 {
            a.next_items();
        }
        let mut b = Sampler::restore(&data, a.position(), 16);
        assert_eq!(a.next_items(), b.next_items());
    }

    #[test]
    fn fits() {
        use crate::{Recipe, data::Dataset};
        let recipe = Recipe::example(); // iris: 120 training examples
        let data = Dataset::load(&recipe.dataset, &recipe.model.clone(), 0, Path::new("")).unwrap();
        use crate::data::{DataPosition, Sampler};

        assert!(Sampler::fits(
            &data,
            DataPosition {
                rng: 1,
                epoch: 0,
                cursor: 112
            }
        ));
        assert!(!Sampler::fits(
            &data,
            DataPosition {
                rng: 1,
                epoch: 0,
                cursor: 500
            }
        ));
    }

    #[test]
    fn position() {
        let data = iris();
        use crate::data::Sampler;

        let mut sampler = Sampler::new(&data, 0, 16);
        sampler.next_items();
        assert_eq!(sampler.position().cursor, 16);
    }

    #[test]
    fn next_items() {
        let data = iris();
        use crate::data::Sampler;

        let mut sampler = Sampler::new(&data, 0, 16);
        let items = sampler.next_items();
        assert_eq!(items.len(), 16);
        assert!(items.iter().all(|i| *i < 120));
    }
}
