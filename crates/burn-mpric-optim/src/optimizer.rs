//! The wrapper: a device-path update rule as a Burn `SimpleOptimizer` whose state and
//! parameters are stored at the chosen dtypes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use burn::module::{AutodiffModule, Module};
use burn::optim::SimpleOptimizer;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::record::Record;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, FloatDType, Shape, Tensor, TensorData};
use burn_mpric_core::optim::{
    BytesPerParameter, DrawKeys, MasterWeights, OptimizerPrecision, PrecisionError, RoundingStream,
};
use burn_mpric_scale::{BurnDType, DeviceRule};

use crate::draws::{device_uniforms, on_gpu};
use crate::params::store_params;
use crate::round::{kahan_split, stochastic_round};

/// An update rule (Adam, AdamW, SGD: [`DeviceAdamConfig`](burn_mpric_scale::DeviceAdamConfig),
/// [`DeviceAdamWConfig`](burn_mpric_scale::DeviceAdamWConfig),
/// [`DeviceSgdConfig`](burn_mpric_scale::DeviceSgdConfig)) with its state and the parameters
/// stored per an [`OptimizerPrecision`]; every step computes at f32 inside.
///
/// A Burn `SimpleOptimizer`: [`init`](Self::init) gives the `Optimizer` that loops, the loss
/// scaler and Burn's Learner take. A skipped step (the loss scaler does not call the
/// optimizer) leaves the parameters, the state, the compensation buffers and the rounding
/// stream as they were; the optimizer's record holds all of it.
///
/// # Example
///
/// ```
/// use burn_mpric_optim::{LowPrecisionOptimizer, MasterWeights, OptimizerPrecision, StateDtype};
/// use burn_mpric_scale::DeviceSgdConfig;
///
/// let bf16_state = OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::F32);
/// // Plain SGD keeps no state: there is nothing to store at bf16.
/// let refused = LowPrecisionOptimizer::new(DeviceSgdConfig::new(), bf16_state).unwrap_err();
/// assert!(refused.to_string().contains("keeps no state"), "{refused}");
/// ```
#[derive(Clone, Debug)]
pub struct LowPrecisionOptimizer<R> {
    rule: R,
    precision: OptimizerPrecision,
    /// The next parameter's rounding stream, counted from 0 by each [`init`](Self::init) in
    /// the order Burn visits the parameters, so the same model gets the same streams in every
    /// run and on every process; shared by the adaptor's clones.
    next_stream: Arc<AtomicU64>,
}

/// One parameter's state under a [`LowPrecisionOptimizer`]: the rule's per-element state
/// tensors (Adam's moments, SGD's velocity) in the parameter's shape at the state dtype, its
/// one-element state (Adam's betas' powers, which stand for its step count) at f32, the
/// compensation buffer (Kahan), and the position in the rounding stream and where its numbers
/// are made.
///
/// # Example
///
/// ```
/// use burn::backend::Flex;
/// use burn_mpric_optim::LowPrecisionState;
///
/// let fresh = LowPrecisionState::<Flex, 2> {
///     slots: Vec::new(), scalars: Vec::new(), compensation: None, stream: 3, draws: 0,
///     drawn_on_device: Some(false),
/// };
/// assert_eq!(fresh.stream, 3);
/// ```
#[derive(Record, Clone)]
pub struct LowPrecisionState<B: Backend, const D: usize> {
    /// The rule's per-element state tensors, in the parameter's shape.
    pub slots: Vec<Tensor<B, D>>,
    /// The rule's one-element state tensors, at f32.
    pub scalars: Vec<Tensor<B, 1>>,
    /// What rounding the weight to bf16 dropped (Kahan only), at bf16.
    pub compensation: Option<Tensor<B, D>>,
    /// This parameter's stream of stochastic rounding.
    pub stream: u64,
    /// The steps taken so far: the next draw from the stream.
    pub draws: u64,
    /// Where the stream's numbers are made: on the device (burn-mpric-core's `DrawKeys`) or
    /// on the host (`RoundingStream`), fixed when the state is made so that a resumed run
    /// draws what the uninterrupted one would; `None` in a state saved before the choice
    /// existed, which drew on the host.
    pub drawn_on_device: Option<bool>,
}

impl<R: DeviceRule> LowPrecisionOptimizer<R> {
    /// The rule with its state and parameters at `precision`; refused (with the reason) when
    /// `precision` asks to store state the rule does not keep.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_optim::{LowPrecisionOptimizer, OptimizerPrecision};
    /// use burn_mpric_scale::DeviceAdamWConfig;
    ///
    /// let optim = LowPrecisionOptimizer::new(DeviceAdamWConfig::new(), "state=bf16".parse().unwrap()).unwrap();
    /// assert_eq!(optim.precision().to_string(), "state=bf16,master=f32");
    /// ```
    pub fn new(rule: R, precision: OptimizerPrecision) -> Result<Self, PrecisionError> {
        precision.check_for(rule.name(), rule.elementwise_slots())?;
        Ok(Self {
            rule,
            precision,
            next_stream: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The precision.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_optim::{LowPrecisionOptimizer, OptimizerPrecision};
    /// use burn_mpric_scale::DeviceAdamConfig;
    ///
    /// let optim = LowPrecisionOptimizer::new(DeviceAdamConfig::new(), OptimizerPrecision::default()).unwrap();
    /// assert!(optim.precision().is_f32());
    /// ```
    pub fn precision(&self) -> OptimizerPrecision {
        self.precision
    }

    /// The bytes one parameter costs between steps under this rule and precision.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_optim::{LowPrecisionOptimizer, MasterWeights, OptimizerPrecision, StateDtype};
    /// use burn_mpric_scale::DeviceAdamConfig;
    ///
    /// let kahan = OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::Kahan);
    /// let optim = LowPrecisionOptimizer::new(DeviceAdamConfig::new(), kahan).unwrap();
    /// assert_eq!(optim.bytes_per_parameter().total(), 10);
    /// ```
    pub fn bytes_per_parameter(&self) -> BytesPerParameter {
        self.precision
            .bytes_per_parameter(self.rule.elementwise_slots())
    }

    /// `module` with its float parameters at the dtype this precision keeps them at: bf16 for
    /// stochastic rounding and Kahan, unchanged for f32 master weights. Call it on a new model
    /// and on one loaded from a checkpoint (Burn's recorders load at f32), so that every step
    /// sees the same dtypes.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::tensor::DType;
    /// use burn_mpric_optim::{LowPrecisionOptimizer, MasterWeights, OptimizerPrecision, StateDtype};
    /// use burn_mpric_scale::DeviceAdamConfig;
    ///
    /// let kahan = OptimizerPrecision::new(StateDtype::F32, MasterWeights::Kahan);
    /// let optim = LowPrecisionOptimizer::new(DeviceAdamConfig::new(), kahan).unwrap();
    /// let model: Linear<Flex> = optim.store_params(LinearConfig::new(2, 2).init(&Default::default()));
    /// assert_eq!(model.weight.val().dtype(), DType::BF16);
    /// ```
    pub fn store_params<B: Backend, M: Module<B>>(&self, module: M) -> M {
        store_params(self.precision.master, module)
    }

    /// The Burn `Optimizer` for a module `M` trained on `B`, its rounding streams numbered
    /// from 0.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::Linear;
    /// use burn::optim::Optimizer;
    /// use burn_mpric_optim::{LowPrecisionOptimizer, OptimizerPrecision};
    /// use burn_mpric_scale::DeviceAdamConfig;
    ///
    /// type B = Autodiff<Flex>;
    /// let optim = LowPrecisionOptimizer::new(DeviceAdamConfig::new(), OptimizerPrecision::default()).unwrap();
    /// let adaptor = optim.init::<B, Linear<B>>();
    /// assert!(adaptor.to_record().is_empty());
    /// ```
    pub fn init<AB, M>(&self) -> OptimizerAdaptor<Self, M, AB>
    where
        AB: AutodiffBackend,
        M: AutodiffModule<AB>,
    {
        OptimizerAdaptor::from(Self {
            next_stream: Arc::new(AtomicU64::new(0)),
            ..self.clone()
        })
    }

    fn fresh<B: Backend, const D: usize>(
        &self,
        shape: &Shape,
        device: &B::Device,
    ) -> LowPrecisionState<B, D> {
        let mut slots = self.rule.init_state(shape.num_elements(), device);
        let scalars = slots.split_off(self.rule.elementwise_slots());
        LowPrecisionState {
            slots: slots
                .into_iter()
                .map(|slot| slot.reshape(shape.clone()))
                .collect(),
            scalars,
            compensation: None,
            stream: self.next_stream.fetch_add(1, Ordering::Relaxed),
            draws: 0,
            drawn_on_device: Some(self.precision.draws.on_device(on_gpu::<B>(device))),
        }
    }
}

impl<B: Backend, R: DeviceRule> SimpleOptimizer<B> for LowPrecisionOptimizer<R> {
    type State<const D: usize> = LowPrecisionState<B, D>;

    fn step<const D: usize>(
        &self,
        lr: f64,
        tensor: Tensor<B, D>,
        grad: Tensor<B, D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<B, D>, Option<Self::State<D>>) {
        let shape = tensor.shape();
        let len = shape.num_elements();
        let device = tensor.device();
        let param_dtype = tensor.dtype();
        let state = state.unwrap_or_else(|| self.fresh(&shape, &device));

        let mut weight = tensor.reshape([len]).cast(FloatDType::F32);
        if let Some(compensation) = state.compensation {
            weight = weight.add(compensation.reshape([len]).cast(FloatDType::F32));
        }
        let grad = grad.reshape([len]).cast(FloatDType::F32);
        let flat = state
            .slots
            .into_iter()
            .map(|slot| slot.reshape([len]).cast(FloatDType::F32))
            .chain(state.scalars)
            .collect();
        let (weight, mut slots) = self.rule.update(lr, weight, grad, flat);
        let scalars = slots.split_off(self.rule.elementwise_slots());
        let stored = self.precision.state.dtype().to_burn();
        let slots = slots
            .into_iter()
            .map(|slot| slot.cast(stored).reshape(shape.clone()))
            .collect();

        let on_device = state.drawn_on_device.unwrap_or(false);
        let uniforms = || {
            let (seed, stream, draw) = (self.precision.seed, state.stream, state.draws);
            if on_device {
                return device_uniforms::<B>(&DrawKeys::new(seed, stream, draw), len, &device);
            }
            let draws = RoundingStream::new(seed).uniforms(stream, draw, len);
            // At f32 whatever the device's default float dtype (a pure-bf16 policy's is bf16):
            // the draws are compared with probabilities far below bf16's spacing.
            Tensor::<B, 1>::from_data(TensorData::new(draws, [len]), (&device, DType::F32))
        };
        let (weight, compensation) = match self.precision.master {
            MasterWeights::F32 => (weight.cast(FloatDType::from(param_dtype)), None),
            MasterWeights::Stochastic => (stochastic_round(weight, uniforms()), None),
            MasterWeights::Kahan => {
                let (weight, compensation) = kahan_split(weight, uniforms());
                (weight, Some(compensation))
            }
        };
        let state = LowPrecisionState {
            slots,
            scalars,
            compensation: compensation.map(|c| c.reshape(shape.clone())),
            stream: state.stream,
            draws: state.draws + 1,
            drawn_on_device: Some(on_device),
        };
        (weight.reshape(shape), Some(state))
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &B::Device) -> Self::State<D> {
        LowPrecisionState {
            slots: state
                .slots
                .into_iter()
                .map(|slot| slot.to_device(device))
                .collect(),
            scalars: state
                .scalars
                .into_iter()
                .map(|scalar| scalar.to_device(device))
                .collect(),
            compensation: state.compensation.map(|c| c.to_device(device)),
            ..state
        }
    }
}
