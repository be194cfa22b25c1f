//! Gradients as one flat list of f32 values in module order, and back: what a transport that
//! moves plain numbers between processes (a socket, MPI, a file) needs to sum gradients.
//!
//! Every process of a data-parallel run holds the same module, so walking its parameters
//! gives the same order everywhere; a parameter used twice is taken once, and one without a
//! gradient is left out (the same ones on every process, as their graphs have the same
//! shape). The values cross at f32 whatever the gradients' dtype (f16 and bf16 convert
//! exactly; f64 is rounded), are summed there, and go back at each gradient's own dtype.

use std::collections::HashSet;

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, FloatDType, Shape, Tensor, TensorData};

use crate::dtype::float_dtype;
use crate::error::StepError;
use crate::pack::Register;
use crate::read::read_all_f32;

/// A module's gradients flattened into one f32 buffer in parameter order, ready to be summed
/// across processes; [`FlatGrads::unflatten`] turns a buffer of the same layout (the sum) back
/// into [`GradientsParams`].
///
/// # Example
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::GradientsParams;
/// use burn::tensor::Tensor;
/// use burn_mpric_scale::FlatGrads;
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let model: Linear<B> = LinearConfig::new(2, 1).init(&device);
/// let loss = model.forward(Tensor::<B, 2>::from_floats([[1.0, 2.0]], &device)).sum();
/// let grads = GradientsParams::from_grads(loss.backward(), &model);
///
/// let flat = FlatGrads::new(&model, grads);
/// let values = flat.read()?;
/// assert_eq!(values, [1.0, 2.0, 1.0]); // the weight's gradient (the input), then the bias's
///
/// // Another process's gradients would be added here; this one doubles its own.
/// let summed: Vec<f32> = values.iter().map(|v| v * 2.0).collect();
/// let grads = flat.unflatten(&summed)?;
/// let weight = grads.get::<Flex, 2>(model.weight.id).unwrap();
/// assert_eq!(weight.into_data().to_vec::<f32>().unwrap(), [2.0, 4.0]);
/// # Ok::<(), burn_mpric_scale::StepError>(())
/// ```
pub struct FlatGrads<B: Backend> {
    /// The gradients, each flattened and at f32, in parameter order.
    parts: Vec<Tensor<B, 1>>,
    registers: Vec<Register<B>>,
    device: Option<B::Device>,
}

impl<B: Backend> std::fmt::Debug for FlatGrads<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlatGrads")
            .field("gradients", &self.parts.len())
            .field("values", &self.len())
            .finish()
    }
}

impl<B: Backend> FlatGrads<B> {
    /// Takes the gradients of `module`'s parameters out of `grads`, in parameter order.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn_mpric_scale::FlatGrads;
    ///
    /// let model: Linear<Autodiff<Flex>> = LinearConfig::new(3, 2).init(&Default::default());
    /// assert!(FlatGrads::new(&model, GradientsParams::new()).is_empty());
    /// ```
    pub fn new<AB, M>(module: &M, grads: GradientsParams) -> Self
    where
        AB: AutodiffBackend<InnerBackend = B>,
        M: AutodiffModule<AB>,
    {
        let mut walk = Walk::<AB> {
            grads,
            seen: HashSet::new(),
            flat: FlatGrads {
                parts: Vec::new(),
                registers: Vec::new(),
                device: None,
            },
        };
        module.visit(&mut walk);
        walk.flat
    }

    /// The number of values.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::tensor::Tensor;
    /// use burn::optim::GradientsParams;
    /// use burn_mpric_scale::FlatGrads;
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let model: Linear<B> = LinearConfig::new(3, 2).init(&device);
    /// let loss = model.forward(Tensor::<B, 2>::ones([1, 3], &device)).sum();
    /// let flat = FlatGrads::new(&model, GradientsParams::from_grads(loss.backward(), &model));
    /// assert_eq!(flat.len(), 3 * 2 + 2);
    /// ```
    pub fn len(&self) -> usize {
        self.parts.iter().map(|p| p.shape().num_elements()).sum()
    }

    /// Whether there is no gradient.
    ///
    /// See [`FlatGrads::new`] for an example.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// The values, read from the device in one read.
    ///
    /// See [`FlatGrads`] for an example.
    ///
    /// # Errors
    ///
    /// [`StepError::Read`] when the device cannot be read.
    pub fn read(&self) -> Result<Vec<f32>, StepError> {
        self.read_with(Vec::new())
    }

    /// The values followed by `extra`'s (at f32), in the same one read: what a transport
    /// sends along with the gradients, such as the step's loss, costs no read of its own.
    /// [`unflatten`](Self::unflatten) takes the values without them.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::FlatGrads;
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let model: Linear<B> = LinearConfig::new(2, 1).init(&device);
    /// let loss = model.forward(Tensor::<B, 2>::from_floats([[1.0, 2.0]], &device)).sum();
    /// let grads = GradientsParams::from_grads(loss.backward(), &model);
    ///
    /// let flat = FlatGrads::new(&model, grads);
    /// let extra = Tensor::<Flex, 1>::from_floats([7.0], &device);
    /// assert_eq!(flat.read_with(vec![extra])?, [1.0, 2.0, 1.0, 7.0]);
    /// # Ok::<(), burn_mpric_scale::StepError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`StepError::Read`] when the device cannot be read.
    pub fn read_with(&self, extra: Vec<Tensor<B, 1>>) -> Result<Vec<f32>, StepError> {
        let Some(device) = self
            .device
            .clone()
            .or_else(|| extra.first().map(Tensor::device))
        else {
            return Ok(Vec::new());
        };
        let extra = extra
            .into_iter()
            .map(|t| t.cast(FloatDType::F32).to_device(&device));
        read_all_f32(Tensor::cat(
            self.parts.iter().cloned().chain(extra).collect(),
            0,
        ))
    }

    /// `values` (laid out as [`read`](Self::read) returned them: another process's sum, say)
    /// as gradients of the same parameters, at each gradient's own dtype and on its device.
    ///
    /// See [`FlatGrads`] for an example.
    ///
    /// # Errors
    ///
    /// [`StepError::FlatLength`] when `values` does not hold [`len`](Self::len) values.
    pub fn unflatten(self, values: &[f32]) -> Result<GradientsParams, StepError> {
        let expected = self.len();
        if values.len() != expected {
            return Err(StepError::FlatLength {
                expected,
                got: values.len(),
            });
        }
        let mut grads = GradientsParams::new();
        let Some(device) = self.device else {
            return Ok(grads);
        };
        let all = Tensor::<B, 1>::from_data(TensorData::new(values.to_vec(), [expected]), &device);
        let mut start = 0;
        for (part, register) in self.parts.iter().zip(self.registers) {
            let len = part.shape().num_elements();
            register(&mut grads, all.clone().slice(start..start + len));
            start += len;
        }
        Ok(grads)
    }
}

/// Visits the parameters in module order and takes their gradients.
struct Walk<AB: AutodiffBackend> {
    grads: GradientsParams,
    seen: HashSet<burn::module::ParamId>,
    flat: FlatGrads<AB::InnerBackend>,
}

impl<AB: AutodiffBackend> ModuleVisitor<AB> for Walk<AB> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<AB, D>>) {
        if !self.seen.insert(param.id) {
            return;
        }
        let Some(grad) = self.grads.remove::<AB::InnerBackend, D>(param.id) else {
            return;
        };
        let (id, shape, dtype): (_, Shape, DType) = (param.id, grad.shape(), grad.dtype());
        self.flat.device.get_or_insert_with(|| grad.device());
        let len = shape.num_elements();
        self.flat
            .parts
            .push(grad.reshape([len]).cast(FloatDType::F32));
        self.flat.registers.push(Box::new(move |grads, flat| {
            let grad: Tensor<AB::InnerBackend, D> = flat.reshape(shape);
            let grad = match float_dtype(dtype) {
                Some(own) if own != FloatDType::F32 => grad.cast(own),
                _ => grad,
            };
            grads.register::<AB::InnerBackend, D>(id, grad);
        }));
    }
}
