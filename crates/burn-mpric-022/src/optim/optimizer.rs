//! The wrapper: a device-path update rule as a Burn 0.22 per-parameter `Optimizer` whose state
//! and parameters are stored at the chosen dtypes, and that state's record.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use burn::module::Module;
use burn::optim::{
    LearningRate, ModuleOptimizer, Optimizer, RecordState, StateSink, StateSource, join_index,
};
use burn::tensor::{DType, Device, FloatDType, Shape, Tensor, TensorData};
use burn_mpric_core::optim::{
    BytesPerParameter, DrawKeys, MasterWeights, OptimizerPrecision, PrecisionError, RoundingStream,
};
use burn_store::burn_pack::Scalar;

use super::draws::{device_uniforms, on_gpu};
use super::params::store_params;
use super::round::{kahan_split, stochastic_round};
use crate::device::DeviceRule;
use crate::dtype::{plain_float, to_burn_dtype};

/// An update rule (Adam, AdamW, SGD: burn-mpric-core's
/// [`DeviceAdamConfig`](burn_mpric_core::scale::DeviceAdamConfig),
/// [`DeviceAdamWConfig`](burn_mpric_core::scale::DeviceAdamWConfig),
/// [`DeviceSgdConfig`](burn_mpric_core::scale::DeviceSgdConfig)) with its state and the
/// parameters stored per an [`OptimizerPrecision`]; every step computes at f32 inside.
///
/// A Burn 0.22 per-parameter `Optimizer`: [`init`](Self::init) gives the `ModuleOptimizer`
/// that loops, the [`LossScaler`](crate::LossScaler) and burn-train's `Learner` take. A skipped
/// step (the loss scaler does not call the optimizer) leaves the parameters, the state, the
/// compensation buffers and the rounding stream as they were; the optimizer's record holds all
/// of it.
///
/// # Example
///
/// ```
/// use burn_mpric_022::optim::{LowPrecisionOptimizer, MasterWeights, OptimizerPrecision, StateDtype};
/// use burn_mpric_core::scale::DeviceSgdConfig;
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
    /// run and on every process; shared by the module optimizer's clones.
    next_stream: Arc<AtomicU64>,
}

/// One parameter's state under a [`LowPrecisionOptimizer`]: the rule's per-element state
/// tensors (Adam's moments, SGD's velocity) in the parameter's shape at the state dtype, its
/// one-element state (Adam's betas' powers, which stand for its step count) at f32, the
/// compensation buffer (Kahan), and the position in the rounding stream and where its numbers
/// are made.
///
/// Its record (Burn's `RecordState`, which `ModuleOptimizer::to_record` and `save` use) names
/// the leaves as Burn's derive would: `slots.len`, `slots.0`, ..., `scalars.len`,
/// `scalars.0`, ..., `compensation`, `stream`, `draws`, `drawn_on_device`; the two positions
/// are `u64` scalars, which burnpack keeps exactly, and where the numbers are made is 1 (the
/// device) or 0 (the host), absent from records saved before it existed.
///
/// # Example
///
/// ```
/// use burn_mpric_022::optim::LowPrecisionState;
///
/// let fresh = LowPrecisionState::<2> {
///     slots: Vec::new(), scalars: Vec::new(), compensation: None, stream: 3, draws: 0,
///     drawn_on_device: Some(false),
/// };
/// assert_eq!(fresh.stream, 3);
/// ```
#[derive(Clone, Debug)]
pub struct LowPrecisionState<const D: usize> {
    /// The rule's per-element state tensors, in the parameter's shape.
    pub slots: Vec<Tensor<D>>,
    /// The rule's one-element state tensors, at f32.
    pub scalars: Vec<Tensor<1>>,
    /// What rounding the weight to bf16 dropped (Kahan only), at bf16.
    pub compensation: Option<Tensor<D>>,
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
    /// use burn_mpric_022::optim::{LowPrecisionOptimizer, OptimizerPrecision};
    /// use burn_mpric_core::scale::DeviceAdamWConfig;
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
    /// use burn_mpric_022::optim::{LowPrecisionOptimizer, OptimizerPrecision};
    /// use burn_mpric_core::scale::DeviceAdamConfig;
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
    /// use burn_mpric_022::optim::{LowPrecisionOptimizer, MasterWeights, OptimizerPrecision, StateDtype};
    /// use burn_mpric_core::scale::DeviceAdamConfig;
    ///
    /// let kahan = OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::Kahan);
    /// let optim = LowPrecisionOptimizer::new(DeviceAdamConfig::new(), kahan).unwrap();
    /// assert_eq!(optim.bytes_per_parameter().total(), 10);
    /// ```
    pub fn bytes_per_parameter(&self) -> BytesPerParameter {
        self.precision
            .bytes_per_parameter(self.rule.elementwise_slots())
    }

    /// `module` with its float parameters stored at the dtype this precision keeps them at:
    /// bf16 for stochastic rounding and Kahan, unchanged for f32 master weights. Call it on a
    /// new model and on one loaded from a checkpoint, so that every step sees the same dtypes.
    /// Each parameter keeps its id, whether it takes a gradient and its reparameterization; a
    /// parameter not yet initialized stays lazy.
    ///
    /// Under [`autocast`](crate::autocast()), call it after autocasting: autocast stores every
    /// parameter at the policy's param dtype, so it would cast bf16 parameters back to f32.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::tensor::{DType, Device};
    /// use burn_mpric_022::optim::{LowPrecisionOptimizer, MasterWeights, OptimizerPrecision, StateDtype};
    /// use burn_mpric_core::scale::DeviceAdamConfig;
    ///
    /// let kahan = OptimizerPrecision::new(StateDtype::F32, MasterWeights::Kahan);
    /// let optim = LowPrecisionOptimizer::new(DeviceAdamConfig::new(), kahan).unwrap();
    /// let model = optim.store_params(LinearConfig::new(2, 2).init(&Device::flex()));
    /// assert_eq!(model.weight.val().dtype(), DType::BF16);
    /// ```
    pub fn store_params<M: Module>(&self, module: M) -> M {
        store_params(self.precision.master, module)
    }

    /// The Burn `ModuleOptimizer` that steps whole modules with this optimizer, as
    /// `AdamConfig::init` gives Burn's Adam, its rounding streams numbered from 0.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::optim::{LowPrecisionOptimizer, OptimizerPrecision};
    /// use burn_mpric_core::scale::DeviceAdamConfig;
    ///
    /// let optim = LowPrecisionOptimizer::new(DeviceAdamConfig::new(), OptimizerPrecision::default()).unwrap();
    /// let module_optim = optim.init();
    /// assert!(module_optim.to_record().is_empty());
    /// ```
    pub fn init(&self) -> ModuleOptimizer {
        ModuleOptimizer::from(Self {
            next_stream: Arc::new(AtomicU64::new(0)),
            ..self.clone()
        })
    }

    fn fresh<const D: usize>(&self, shape: &Shape, device: &Device) -> LowPrecisionState<D> {
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
            drawn_on_device: Some(self.precision.draws.on_device(on_gpu(device))),
        }
    }
}

impl<R: DeviceRule> Optimizer for LowPrecisionOptimizer<R> {
    type State<const D: usize> = LowPrecisionState<D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<D>, Option<Self::State<D>>) {
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
        let stored = to_burn_dtype(self.precision.state.dtype());
        let slots = slots
            .into_iter()
            .map(|slot| slot.cast(stored).reshape(shape.clone()))
            .collect();

        let on_device = state.drawn_on_device.unwrap_or(false);
        let uniforms = || {
            let (seed, stream, draw) = (self.precision.seed, state.stream, state.draws);
            if on_device {
                return device_uniforms(&DrawKeys::new(seed, stream, draw), len, &device);
            }
            let draws = RoundingStream::new(seed).uniforms(stream, draw, len);
            // At f32 whatever the device's default float dtype: the draws are compared with
            // a probability that can be far below bf16's spacing.
            Tensor::<1>::from_data(TensorData::new(draws, [len]), (&device, DType::F32))
        };
        let (weight, compensation) = match self.precision.master {
            // A non-float (quantized) parameter stays at f32, as the device path keeps it.
            MasterWeights::F32 => match plain_float(param_dtype) {
                Some(own) => (weight.cast(own), None),
                None => (weight, None),
            },
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

    fn to_device<const D: usize>(state: Self::State<D>, device: &Device) -> Self::State<D> {
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

const SLOTS: &str = "slots";
const SLOTS_LEN: &str = "slots.len";
const SCALARS: &str = "scalars";
const SCALARS_LEN: &str = "scalars.len";
const COMPENSATION: &str = "compensation";
const STREAM: &str = "stream";
const DRAWS: &str = "draws";
const DRAWN_ON_DEVICE: &str = "drawn_on_device";

/// Written by hand rather than with `#[derive(RecordState)]`, for two reasons. Burn 0.22.1's
/// derive expands to paths inside burn-optim (`crate::RecordState`, `crate::join_index`), so it
/// does not compile in another crate. And the derive rebuilds every tensor at the device's
/// default float dtype (f32), which would widen bf16 moments and compensation buffers on load;
/// here each tensor comes back at the dtype it was saved at where the device runs that dtype.
/// (`ModuleOptimizer::load_record` loads onto `Device::default()`, which can be another device
/// than the one training runs on; there a bf16 tensor comes back at f32, exactly, and the next
/// step stores it at bf16 again.) The leaves are named as the derive names them.
impl<const D: usize> RecordState for LowPrecisionState<D> {
    fn state_flatten(&self, prefix: &str, out: &mut StateSink) {
        out.push_scalar(prefix, SLOTS_LEN, Scalar::from(self.slots.len()));
        for (index, slot) in self.slots.iter().enumerate() {
            out.push_tensor(prefix, &join_index(SLOTS, index), slot.to_data());
        }
        out.push_scalar(prefix, SCALARS_LEN, Scalar::from(self.scalars.len()));
        for (index, scalar) in self.scalars.iter().enumerate() {
            out.push_tensor(prefix, &join_index(SCALARS, index), scalar.to_data());
        }
        if let Some(compensation) = &self.compensation {
            out.push_tensor(prefix, COMPENSATION, compensation.to_data());
        }
        out.push_scalar(prefix, STREAM, Scalar::from(self.stream));
        out.push_scalar(prefix, DRAWS, Scalar::from(self.draws));
        if let Some(on_device) = self.drawn_on_device {
            out.push_scalar(prefix, DRAWN_ON_DEVICE, Scalar::from(u64::from(on_device)));
        }
    }

    fn state_unflatten(prefix: &str, src: &mut StateSource, device: &Device) -> Option<Self> {
        fn tensor<const N: usize>(data: TensorData, device: &Device) -> Tensor<N> {
            let dtype = data.dtype();
            if device.supports_dtype(dtype) {
                Tensor::<N>::from_data(data, (device, dtype))
            } else {
                Tensor::<N>::from_data(data, device)
            }
        }
        let mut list = |name: &str, len: &str| -> Option<Vec<TensorData>> {
            let len = usize::try_from(src.take_scalar(prefix, len)?).ok()?;
            (0..len)
                .map(|index| src.take_tensor(prefix, &join_index(name, index)))
                .collect()
        };
        let slots = list(SLOTS, SLOTS_LEN)?
            .into_iter()
            .map(|data| tensor(data, device))
            .collect();
        let scalars = list(SCALARS, SCALARS_LEN)?
            .into_iter()
            .map(|data| tensor(data, device))
            .collect();
        let compensation = src
            .take_tensor(prefix, COMPENSATION)
            .map(|data| tensor(data, device));
        Some(Self {
            slots,
            scalars,
            compensation,
            stream: u64::try_from(src.take_scalar(prefix, STREAM)?).ok()?,
            draws: u64::try_from(src.take_scalar(prefix, DRAWS)?).ok()?,
            drawn_on_device: src
                .take_scalar(prefix, DRAWN_ON_DEVICE)
                .and_then(|on| u64::try_from(on).ok())
                .map(|on| on == 1),
        })
    }
}
