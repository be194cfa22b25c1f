//! The built-in models, one enum over them, their losses, their held-out evaluation
//! (`evaluate.rs`) and the description of their forward passes for an export.

pub mod conv;
pub mod evaluate;
pub mod mlp;
pub mod transformer;

use std::sync::{Mutex, MutexGuard};

use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::loss::{CrossEntropyLossConfig, MseLoss, Reduction};
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, FloatDType, Int, Tensor};
use burn_mpric::export::Layout;

use crate::data::{Batch, Dims, Inputs, Targets};
use crate::error::Error;
use crate::recipe::ModelConfig;
use crate::schema::InputKind;
use conv::{ConvNet, ImageConvNet};
use mlp::Mlp;
use transformer::{LmSizes, TransformerLm};

/// One of the built-in models.
#[derive(Module, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Model<B: Backend> {
    /// [`Mlp`].
    Mlp(Mlp<B>),
    /// [`ConvNet`].
    Conv(ConvNet<B>),
    /// [`TransformerLm`].
    TransformerLm(TransformerLm<B>),
    /// [`ImageConvNet`]: model kind `conv` on image data.
    ImageConv(ImageConvNet<B>),
}

/// The loss of a batch and, where it applies, the number of correct predictions.
#[derive(Debug)]
pub struct Output<B: Backend> {
    /// Mean loss over the batch, at f32, `[1]`.
    pub loss: Tensor<B, 1>,
    /// Correct predictions (classification and language modelling), `[1]`.
    pub correct: Option<Tensor<B, 1, Int>>,
}

/// Model init reads Burn's backend RNG, which is global to the process: one init at a time.
static INIT_LOCK: Mutex<()> = Mutex::new(());

/// Holds the backend RNG for this thread: no model of this crate is initialized elsewhere
/// until it is dropped. Every init here takes it; so must any other code (tests) that draws
/// from the RNG while a seeded init may run on another thread.
pub(crate) fn rng_lock() -> MutexGuard<'static, ()> {
    INIT_LOCK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<B: Backend> Model<B> {
    /// A freshly initialized model (Burn's initializers, the backend's current RNG), every
    /// parameter materialized under [`rng_lock`], so that a seeded init on another thread
    /// never sees its draws.
    pub fn init(config: &ModelConfig, dims: Dims, device: &B::Device) -> Self {
        let _rng = rng_lock();
        Self::build(config, dims, device)
    }

    /// A model initialized from `seed`: the backend RNG is seeded and every parameter is
    /// materialized while no other thread of this crate initializes a model, so the same
    /// seed gives the same parameters.
    pub fn init_seeded(config: &ModelConfig, dims: Dims, seed: u64, device: &B::Device) -> Self {
        let _rng = rng_lock();
        B::seed(device, seed);
        Self::build(config, dims, device)
    }

    /// The model with every parameter materialized (Burn initializes them lazily, at first
    /// use); the caller holds [`rng_lock`].
    fn build(config: &ModelConfig, dims: Dims, device: &B::Device) -> Self {
        let model = match config {
            ModelConfig::Mlp(c) => {
                Model::Mlp(Mlp::new(dims.inputs, &c.hidden, dims.outputs, device))
            }
            ModelConfig::Conv(c) if let Some(shape) = dims.image => {
                Model::ImageConv(ImageConvNet::new(
                    shape,
                    &c.channels,
                    c.kernel_size,
                    &c.hidden,
                    dims.outputs,
                    device,
                ))
            }
            ModelConfig::Conv(c) => Model::Conv(ConvNet::new(
                dims.inputs,
                &c.channels,
                c.kernel_size,
                &c.hidden,
                dims.outputs,
                device,
            )),
            ModelConfig::TransformerLm(c) => Model::TransformerLm(TransformerLm::new(
                LmSizes {
                    vocab: dims.inputs,
                    d_model: c.d_model,
                    heads: c.heads,
                    layers: c.layers,
                    d_ff: c.d_ff(),
                    context: c.context,
                },
                device,
            )),
        };
        model.visit(&mut Materialize);
        model
    }

    /// Every float parameter as f32 values, in module order (for tests and inspection).
    pub fn param_values(&self) -> Vec<Vec<f32>> {
        let mut collect = Collect(Vec::new());
        self.visit(&mut collect);
        collect.0
    }

    /// `true` when every float parameter is finite: one flag per parameter on the device,
    /// combined there, and one read.
    pub fn params_finite(&self) -> Result<bool, Error> {
        let mut flags = Finite(Vec::new());
        self.visit(&mut flags);
        if flags.0.is_empty() {
            return Ok(true);
        }
        let all = Tensor::cat(flags.0, 0).all();
        let data = all
            .try_into_data()
            .map_err(|e| Error::Internal(format!("reading the parameters' finiteness: {e}")))?;
        Ok(data.iter::<bool>().all(|finite| finite))
    }

    /// The model's outputs for some inputs, cast to f32: logits `[n, classes]`, standardized
    /// values `[n, 1]`, or next-character logits `[n * t, vocab]` for token windows `[n, t]`.
    pub fn outputs(&self, inputs: Inputs<B>) -> Result<Tensor<B, 2>, Error> {
        let out = match (self, inputs) {
            (Model::Mlp(m), Inputs::Features(x)) => m.forward(x),
            (Model::Conv(m), Inputs::Features(x)) => m.forward(x),
            (Model::ImageConv(m), Inputs::Features(x)) => m.forward(x),
            (Model::TransformerLm(m), Inputs::Tokens(x)) => {
                let logits = m.forward(x);
                let [n, t, v] = logits.dims();
                logits.reshape([n * t, v])
            }
            _ => {
                return Err(Error::Internal(
                    "the model does not take this data's inputs".into(),
                ));
            }
        };
        Ok(out.cast(FloatDType::F32))
    }

    /// The batch's loss (and correct predictions), from the outputs at f32.
    pub fn forward(&self, batch: Batch<B>) -> Result<Output<B>, Error> {
        let out = self.outputs(batch.inputs)?;
        match batch.targets {
            Targets::Classes(y) => Ok(classification(out, y)),
            Targets::Values(y) => Ok(Output {
                loss: MseLoss::new().forward(out, y, Reduction::Mean),
                correct: None,
            }),
            Targets::Tokens(y) => {
                let [n, t] = y.dims();
                Ok(classification(out, y.reshape([n * t])))
            }
        }
    }
}

/// The forward pass of the model `config` describes, in words, naming the tensors of an
/// export in `layout`: precise enough to compute it from the file alone (`mpric export`'s
/// sidecar). Each model describes its own; `inputs` tells the two kinds of `conv` apart.
pub(crate) fn describe_forward(config: &ModelConfig, inputs: &InputKind, layout: Layout) -> String {
    let notation = Notation::of(layout);
    match config {
        ModelConfig::Mlp(c) => mlp::describe_forward(c, &notation),
        ModelConfig::Conv(c) => match inputs {
            InputKind::Image { size, .. } => conv::describe_image_forward(c, *size, &notation),
            _ => conv::describe_forward(c, &notation),
        },
        ModelConfig::TransformerLm(c) => transformer::describe_forward(c, &notation),
    }
}

/// The words the models' forward passes are described in, for an export's layout.
pub(crate) struct Notation {
    /// What `linear(name, x)` computes from the file's tensors.
    pub(crate) linear: &'static str,
    /// What `layernorm(x, name)` computes from the file's tensors.
    pub(crate) norm: &'static str,
    /// How input columns are read and standardized.
    pub(crate) columns: &'static str,
    /// How classes and values are read from the outputs.
    pub(crate) outputs: &'static str,
}

impl Notation {
    fn of(layout: Layout) -> Self {
        let (linear, norm) = match layout {
            Layout::PyTorch => (
                "linear(name, x) = x @ name.weight.T + name.bias (name.weight is [out, in])",
                "layernorm(x, name) = (x - mean(x)) / sqrt(var(x) + 1e-5) * name.weight + name.bias over the last axis (biased variance)",
            ),
            Layout::Burn => (
                "linear(name, x) = x @ name.weight + name.bias (name.weight is [in, out])",
                "layernorm(x, name) = (x - mean(x)) / sqrt(var(x) + 1e-5) * name.gamma + name.beta over the last axis (biased variance)",
            ),
        };
        Self {
            linear,
            norm,
            columns: "x = the columns in schema.inputs.columns.names order, each standardized: (raw - schema.scaling.mean[f]) / schema.scaling.std[f], rounded to f32",
            outputs: "classes: softmax(logits), labels in schema.outputs.classes.names order; a value: output * schema.scaling.target[1] + schema.scaling.target[0]",
        }
    }
}

fn classification<B: Backend>(logits: Tensor<B, 2>, targets: Tensor<B, 1, Int>) -> Output<B> {
    let [n, _] = logits.dims();
    let correct = logits
        .clone()
        .argmax(1)
        .reshape([n])
        .equal(targets.clone())
        .int()
        .sum();
    let loss = CrossEntropyLossConfig::new()
        .init(&logits.device())
        .forward(logits, targets);
    Output {
        loss,
        correct: Some(correct),
    }
}

/// Reads every parameter once, which runs its (lazy) initializer.
struct Materialize;

impl<B: Backend> ModuleVisitor<B> for Materialize {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let _ = param.val();
    }
}

struct Finite<B: Backend>(Vec<Tensor<B, 1, Bool>>);

impl<B: Backend> ModuleVisitor<B> for Finite<B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0.push(param.val().is_finite().all());
    }
}

struct Collect(Vec<Vec<f32>>);

impl<B: Backend> ModuleVisitor<B> for Collect {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let data = param.val().cast(FloatDType::F32).into_data();
        self.0.push(data.to_vec::<f32>().unwrap_or_default());
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use crate::data::Dataset;
    use crate::models::Model;
    use crate::recipe::ModelConfig;

    /// The model and data of `Recipe::example()` (an MLP on iris).
    fn example() -> (ModelConfig, Dataset) {
        let recipe = crate::Recipe::example();
        let data =
            Dataset::load(&recipe.dataset, &recipe.model, 0, std::path::Path::new("")).unwrap();
        (recipe.model, data)
    }

    #[test]
    fn model() {
        use crate::data::Dims;
        use crate::recipe::MlpConfig;
        use burn::module::Module;

        let config = ModelConfig::Mlp(MlpConfig { hidden: vec![8] });
        let model = Model::<Flex>::init(
            &config,
            Dims {
                inputs: 4,
                outputs: 3,
                image: None,
            },
            &Default::default(),
        );
        assert_eq!(model.num_params(), 4 * 8 + 8 + 8 * 3 + 3);
    }

    #[test]
    fn output() {
        let (config, data) = example();
        let device = Default::default();
        let model = Model::<Flex>::init(&config, data.dims(), &device);
        let out = model
            .forward(data.batch(true, &[0, 1, 2], &device))
            .unwrap();
        assert_eq!(out.loss.dims(), [1]);
        let correct: i64 =
            burn::tensor::ElementConversion::elem(out.correct.unwrap().into_scalar());
        assert!((0..=3).contains(&correct));
    }

    #[test]
    fn init() {
        let (config, data) = example();
        let device = Default::default();
        use burn::module::Module;

        let model = Model::<Flex>::init(&config, data.dims(), &device);
        assert!(matches!(model, Model::Mlp(_)));
        assert_eq!(model.num_params(), 4 * 64 + 64 + 64 * 3 + 3);
    }

    #[test]
    fn init_seeded() {
        use crate::data::Dims;
        use crate::recipe::MlpConfig;

        let config = ModelConfig::Mlp(MlpConfig { hidden: vec![4] });
        let dims = Dims {
            inputs: 2,
            outputs: 1,
            image: None,
        };
        let a = Model::<Flex>::init_seeded(&config, dims, 3, &Default::default());
        let b = Model::<Flex>::init_seeded(&config, dims, 3, &Default::default());
        assert_eq!(a.param_values(), b.param_values());
    }

    #[test]
    fn param_values() {
        let (config, data) = example();
        let device = Default::default();
        let model = Model::<Flex>::init_seeded(&config, data.dims(), 0, &device);
        let params = model.param_values();
        assert_eq!(params.len(), 4);
        assert!(params.iter().flatten().all(|v| v.is_finite()));
    }

    #[test]
    fn params_finite() -> Result<(), crate::Error> {
        let (config, data) = example();
        let device = Default::default();
        let model = Model::<Flex>::init_seeded(&config, data.dims(), 0, &device);
        assert!(model.params_finite()?);
        Ok(())
    }

    #[test]
    fn forward() {
        let (config, data) = example();
        let device = Default::default();
        use burn::tensor::DType;

        let model = Model::<Flex>::init(&config, data.dims(), &device);
        let out = model.forward(data.batch(false, &[0, 1], &device)).unwrap();
        assert_eq!(out.loss.dtype(), DType::F32);
        assert!(out.loss.into_scalar() > 0.0);
    }
}
