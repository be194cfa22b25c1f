//! [`DeviceLossScaler`]: the step contract with the skip decided on the device and the host
//! told later.

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::{GradientsParams, MultiGradientsParams};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Bool, DType, FloatDType, Tensor, TensorData, Transaction};
use burn_mpric_core::scale::{
    PendingStep, PendingSteps, ReadHandle, ReadValue, StepOutcome, merge_by_name,
};

use super::optim::DeviceOptimizer;
use super::rules::DeviceRule;
use super::scale::DeviceScale;
use crate::error::StepError;
use crate::overflow::named_grads;
use crate::read::{read_bool, read_one};
use crate::scaler::LossScaler;
use crate::unscale::unscale_on_device;

/// Loss scaling with the skip decided on the device: the finiteness flag, the scale and its
/// growth counter stay device tensors, the optimizer's update is kept or discarded by a
/// select on the flag ([`DeviceOptimizer`]), and the host reads nothing between backward
/// and the optimizer. It learns each step's [`StepOutcome`] later, all pending steps in one
/// read: at [`sync`](Self::sync) (at a checkpoint, when a metric is logged) or every `n`
/// steps, one step behind ([`with_sync_every`](Self::with_sync_every)).
///
/// The outcomes are the host scaler's ([`LossScaler`]), replayed from the flags read: the
/// same decisions, scales and counters as a host-read run of the same steps, and the device's
/// scale is checked against them at every full sync. What the host learns late: the loss,
/// the skip, and the stop after `max_consecutive_skips` skips in a row (from the sync that
/// reads it), and with [`with_overflow_names`](Self::with_overflow_names) the parameters
/// that overflowed. Not on this path: global-norm clipping and the skip-cause probe (they
/// need the gradients on the host at the step); use [`LossScaler`] for them.
///
/// # Example
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig, loss::{MseLoss, Reduction}};
/// use burn::optim::GradientsParams;
/// use burn::tensor::Tensor;
/// use burn_mpric_scale::{DeviceAdamConfig, DeviceLossScaler, DeviceOptimizer, LossScaler};
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let mut model: Linear<B> = LinearConfig::new(4, 4).init(&device);
/// let mut optim = DeviceOptimizer::new(DeviceAdamConfig::new());
/// let mut scaler = DeviceLossScaler::new(LossScaler::default(), &device).unwrap();
///
/// for _ in 0..3 {
///     let x = Tensor::<B, 2>::ones([2, 4], &device);
///     let loss = MseLoss::new().forward(model.forward(x.clone()), x, Reduction::Mean);
///     let scaled = scaler.scale_loss(loss);
///     let grads = GradientsParams::from_grads(scaled.backward(), &model);
///     let (next, done) = scaler.step(&mut optim, 1e-3, model, grads, Some(scaled));
///     model = next;
///     done.unwrap(); // nothing was read
/// }
/// let outcomes = scaler.sync().unwrap(); // one read for the three steps
/// assert_eq!(outcomes.len(), 3);
/// assert!(outcomes.iter().all(|o| o.is_applied() && o.loss.is_some()));
/// ```
pub struct DeviceLossScaler<B: Backend> {
    /// The host's scaler, as of the last step it learned.
    host: LossScaler,
    /// The state the next step uses.
    device: DeviceScale<B>,
    pending: PendingSteps<Tensor<B, 1, Bool>, Tensor<B, 1>>,
    /// Keep each parameter's finiteness flag, to name the overflowed ones at the read.
    names: bool,
}

/// What the unscale found, on the device: the step's finiteness and, with names on, each
/// gradient's overflow by module path.
struct Checks<B: Backend> {
    /// `None`: the step had no gradients.
    finite: Option<Tensor<B, 1, Bool>>,
    overflowed: Vec<(String, Tensor<B, 1, Bool>)>,
}

impl<B: Backend> DeviceLossScaler<B> {
    /// The device path of a host scaler (a fresh one, or one restored from a checkpoint),
    /// with its state copied to `device`.
    ///
    /// Fails with [`StepError::NotOnDevice`] when the scaler clips gradients or its growth
    /// or backoff factor is not exact in f32 ([`DeviceScale::new`]).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn_mpric_scale::{DeviceLossScaler, LossScaler};
    ///
    /// let device = Default::default();
    /// assert!(DeviceLossScaler::<Flex>::new(LossScaler::default(), &device).is_ok());
    /// let clipped = LossScaler::default().with_clip_norm(1.0).unwrap();
    /// assert!(DeviceLossScaler::<Flex>::new(clipped, &device).is_err());
    /// ```
    pub fn new(host: LossScaler, device: &B::Device) -> Result<Self, StepError> {
        if host.clip().is_some() {
            return Err(StepError::NotOnDevice(
                "global-norm clipping needs the norm on the host; use LossScaler for clipped \
                 steps"
                    .into(),
            ));
        }
        Ok(Self {
            device: DeviceScale::new(host.loss_scale(), device)?,
            host,
            pending: PendingSteps::new(0),
            names: false,
        })
    }

    /// Reads the pending steps every `n` steps, one step behind: after the `n + 1`-th
    /// pending step is queued, the `n` before it are read, and the newest one stays on the
    /// device. `0` (the default) reads at [`sync`](Self::sync), and once
    /// [`MAX_PENDING_STEPS`](burn_mpric_core::scale::MAX_PENDING_STEPS) steps are pending.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn_mpric_scale::{DeviceLossScaler, LossScaler};
    ///
    /// let scaler = DeviceLossScaler::<Flex>::new(LossScaler::default(), &Default::default()).unwrap();
    /// assert_eq!(scaler.with_sync_every(10).sync_every(), 10);
    /// ```
    #[must_use]
    pub fn with_sync_every(self, n: usize) -> Self {
        Self {
            pending: self.pending.with_sync_every(n),
            ..self
        }
    }

    /// Names the parameters whose gradients overflowed in each skipped step's outcome
    /// ([`StepOutcome::overflow`], as the host-read path does), learned with the step at the
    /// read. Each step then keeps one more flag per parameter (three more ops per parameter:
    /// off by default).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::{DeviceLossScaler, DeviceOptimizer, DeviceSgdConfig, LossScaler};
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let model: Linear<B> = LinearConfig::new(1, 1).init(&device);
    /// let mut scaler = DeviceLossScaler::new(LossScaler::default(), &device)
    ///     .unwrap()
    ///     .with_overflow_names(true);
    /// let mut grads = GradientsParams::new();
    /// grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[f32::NAN]], &device));
    /// let mut optim = DeviceOptimizer::new(DeviceSgdConfig::new());
    /// let (_, _) = scaler.step::<B, _, _, 1>(&mut optim, 1.0, model, grads, None);
    /// let outcome = &scaler.sync().unwrap()[0];
    /// assert_eq!(outcome.overflow.as_ref().unwrap().params, ["weight"]);
    /// ```
    #[must_use]
    pub fn with_overflow_names(self, names: bool) -> Self {
        Self { names, ..self }
    }

    /// Whether skipped steps' outcomes name the parameters that overflowed
    /// ([`with_overflow_names`](Self::with_overflow_names)).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn_mpric_scale::{DeviceLossScaler, LossScaler};
    ///
    /// let scaler = DeviceLossScaler::<Flex>::new(LossScaler::default(), &Default::default()).unwrap();
    /// assert!(!scaler.overflow_names());
    /// assert!(scaler.with_overflow_names(true).overflow_names());
    /// ```
    pub fn overflow_names(&self) -> bool {
        self.names
    }

    /// How often pending steps are read (0: at [`sync`](Self::sync), and once
    /// [`MAX_PENDING_STEPS`](burn_mpric_core::scale::MAX_PENDING_STEPS) are pending).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn_mpric_scale::{DeviceLossScaler, LossScaler};
    ///
    /// let scaler = DeviceLossScaler::<Flex>::new(LossScaler::default(), &Default::default()).unwrap();
    /// assert_eq!(scaler.sync_every(), 0);
    /// ```
    pub fn sync_every(&self) -> usize {
        self.pending.sync_every()
    }

    /// The host's scaler as of the last step it learned: its scale, counters and record
    /// ([`LossScaler::to_record`]) are those of a host-read run that stopped there. Call
    /// [`sync`](Self::sync) first to include every step, as before a checkpoint.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn_mpric_scale::{DeviceLossScaler, LossScaler};
    ///
    /// let scaler = DeviceLossScaler::<Flex>::new(LossScaler::default(), &Default::default()).unwrap();
    /// assert_eq!(scaler.host().scale(), 32768.0);
    /// ```
    pub fn host(&self) -> &LossScaler {
        &self.host
    }

    /// The scale the next step uses, on the device.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn_mpric_scale::{DeviceLossScaler, LossScaler};
    ///
    /// let scaler = DeviceLossScaler::<Flex>::new(LossScaler::fixed(4.0).unwrap(), &Default::default()).unwrap();
    /// assert_eq!(scaler.device_scale().scale().into_scalar(), 4.0);
    /// ```
    pub fn device_scale(&self) -> &DeviceScale<B> {
        &self.device
    }

    /// Steps taken and not read yet.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn_mpric_scale::{DeviceLossScaler, LossScaler};
    ///
    /// let scaler = DeviceLossScaler::<Flex>::new(LossScaler::default(), &Default::default()).unwrap();
    /// assert_eq!(scaler.pending(), 0);
    /// ```
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Multiplies the loss by the device's scale `S`, at f32 (f64 stays f64), before
    /// backward.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::tensor::{DType, FloatDType, Tensor};
    /// use burn_mpric_scale::{DeviceLossScaler, LossScaler};
    ///
    /// let device = Default::default();
    /// let scaler = DeviceLossScaler::<Flex>::new(LossScaler::default(), &device).unwrap();
    /// let loss = Tensor::<Autodiff<Flex>, 1>::from_floats([4.0], &device).cast(FloatDType::F16);
    /// let scaled = scaler.scale_loss(loss);
    /// assert_eq!(scaled.dtype(), DType::F32);
    /// assert_eq!(scaled.into_scalar(), 131072.0);
    /// ```
    pub fn scale_loss<AB, const D: usize>(&self, loss: Tensor<AB, D>) -> Tensor<AB, D>
    where
        AB: AutodiffBackend<InnerBackend = B>,
    {
        let wide = match loss.dtype() {
            DType::F64 => FloatDType::F64,
            _ => FloatDType::F32,
        };
        let scale = Tensor::<AB, 1>::from_inner(self.device.scale().cast(wide));
        let scale = scale.to_device(&loss.device()).reshape([1; D]);
        loss.cast(wide).mul(scale)
    }

    /// One optimizer step over `grads` (from a loss scaled by
    /// [`scale_loss`](Self::scale_loss)), with nothing read: the gradients are cast to their
    /// parameters' dtypes and unscaled by the device's `1/S` in packed buffers, their
    /// finiteness becomes a device flag, `optim` applies or discards its update by that flag,
    /// and the device's scale moves on by it. `scaled_loss`, when given, is kept (its mean)
    /// for the outcome.
    ///
    /// Returns the outcomes the host learned in this call: none, unless
    /// [`with_sync_every`](Self::with_sync_every) made it read. The module always comes
    /// back; on `Err` from a gradient's shape nothing changed, on `Err` from a read
    /// ([`sync`](Self::sync)'s errors) the step was taken.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::{DeviceLossScaler, DeviceOptimizer, DeviceSgdConfig, LossScaler};
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let model: Linear<B> = LinearConfig::new(1, 1).init(&device);
    /// let before = model.weight.val().into_data();
    /// let mut scaler = DeviceLossScaler::new(LossScaler::default(), &device).unwrap();
    /// let mut grads = GradientsParams::new();
    /// grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[f32::NAN]], &device));
    /// let mut optim = DeviceOptimizer::new(DeviceSgdConfig::new());
    /// let (model, learned) = scaler.step::<B, _, _, 1>(&mut optim, 1.0, model, grads, None);
    /// assert!(learned.unwrap().is_empty());
    /// assert_eq!(model.weight.val().into_data(), before); // skipped on the device
    /// let outcome = &scaler.sync().unwrap()[0];
    /// assert!(outcome.is_skipped());
    /// assert_eq!(outcome.next_scale, 16384.0);
    /// ```
    pub fn step<AB, M, R, const D: usize>(
        &mut self,
        optim: &mut DeviceOptimizer<R, B>,
        lr: f64,
        module: M,
        grads: GradientsParams,
        scaled_loss: Option<Tensor<AB, D>>,
    ) -> (M, Result<Vec<StepOutcome>, StepError>)
    where
        AB: AutodiffBackend<InnerBackend = B>,
        M: AutodiffModule<AB>,
        R: DeviceRule,
    {
        let inverse = self.device.scale().recip();
        let (grads, finite) = match unscale_on_device::<AB, M>(&module, grads, inverse) {
            Ok(checked) => checked,
            Err(err) => return (module, Err(err)),
        };
        let overflowed = self.overflow_flags::<AB, M>(&module, std::slice::from_ref(&grads));
        let checks = Checks { finite, overflowed };
        self.apply(optim, lr, module, grads, checks, scaled_loss)
    }

    /// With names on, each gradient's "holds inf or NaN" flag by module path.
    fn overflow_flags<AB, M>(
        &self,
        module: &M,
        shards: &[GradientsParams],
    ) -> Vec<(String, Tensor<B, 1, Bool>)>
    where
        AB: AutodiffBackend<InnerBackend = B>,
        M: AutodiffModule<AB>,
    {
        if !self.names {
            return Vec::new();
        }
        let flags = named_grads::<AB, M>(module, shards)
            .into_iter()
            .map(|(path, grad)| (path, grad.is_finite().bool_not().any()));
        merge_by_name(flags, |all, flag| {
            let flag = flag.to_device(&all.device());
            all.bool_or(flag)
        })
    }

    /// [`step`](Self::step) for gradients held on several devices, as burn-train's
    /// `MultiDeviceOptim::OptimSharded` hands them to `TrainStep::optimize_multi`: each shard
    /// is cast and unscaled on its own device, their flags make one decision for all of them
    /// (a non-finite gradient on any device skips the whole step), and a parameter's shards
    /// are summed, at its dtype, on the device Burn's optimizers pick for it, where its update
    /// then runs (the parameter and its state move there, as in Burn's `step_multi`).
    /// Nothing is read.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::{GradientsParams, MultiGradientsParams};
    /// use burn::prelude::DeviceOps;
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::{DeviceLossScaler, DeviceOptimizer, DeviceSgdConfig, LossScaler};
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let model: Linear<B> = LinearConfig::new(1, 1).with_bias(false).init(&device);
    /// let (before, id) = (model.weight.val().into_scalar(), model.weight.id);
    /// let shard = |value: f32| {
    ///     let mut grads = GradientsParams::new();
    ///     grads.register(id, Tensor::<Flex, 2>::from_floats([[value]], &device));
    ///     (grads, device.to_id())
    /// };
    /// let mut scaler = DeviceLossScaler::new(LossScaler::fixed(2.0).unwrap(), &device).unwrap();
    /// let mut optim = DeviceOptimizer::new(DeviceSgdConfig::new());
    /// // The shards' unscaled gradients, 1 and 3, are summed: the update is lr * 4.
    /// let grads = MultiGradientsParams { grads: vec![shard(2.0), shard(6.0)] };
    /// let (model, _) = scaler.step_multi::<B, _, _, 1>(&mut optim, 0.5, model, grads, None);
    /// assert_eq!(model.weight.val().into_scalar(), before - 2.0);
    /// // One shard overflowed: the whole step is skipped.
    /// let grads = MultiGradientsParams { grads: vec![shard(2.0), shard(f32::INFINITY)] };
    /// let (model, _) = scaler.step_multi::<B, _, _, 1>(&mut optim, 0.5, model, grads, None);
    /// assert_eq!(model.weight.val().into_scalar(), before - 2.0);
    /// assert!(scaler.sync().unwrap()[1].is_skipped());
    /// ```
    pub fn step_multi<AB, M, R, const D: usize>(
        &mut self,
        optim: &mut DeviceOptimizer<R, B>,
        lr: f64,
        module: M,
        grads: MultiGradientsParams,
        scaled_loss: Option<Tensor<AB, D>>,
    ) -> (M, Result<Vec<StepOutcome>, StepError>)
    where
        AB: AutodiffBackend<InnerBackend = B>,
        M: AutodiffModule<AB>,
        R: DeviceRule,
    {
        let inverse = self.device.scale().recip();
        let scale_device = inverse.device();
        let mut shards = Vec::with_capacity(grads.grads.len());
        let mut finite: Option<Tensor<B, 1, Bool>> = None;
        for (shard, device) in grads.grads {
            let (shard, flag) = match unscale_on_device::<AB, M>(&module, shard, inverse.clone()) {
                Ok(checked) => checked,
                Err(err) => return (module, Err(err)),
            };
            if let Some(flag) = flag {
                let flag = flag.to_device(&scale_device);
                finite = Some(match finite {
                    Some(all) => all.bool_and(flag),
                    None => flag,
                });
            }
            shards.push((shard, device));
        }
        let overflowed = match self.names {
            true => {
                let parts: Vec<GradientsParams> = shards
                    .iter()
                    .map(|(shard, _)| {
                        let mut part = GradientsParams::new();
                        copy_grads::<AB, M>(&module, shard, &mut part);
                        part
                    })
                    .collect();
                self.overflow_flags::<AB, M>(&module, &parts)
            }
            false => Vec::new(),
        };
        let grads = sum_shards::<AB, M>(&module, MultiGradientsParams { grads: shards });
        let checks = Checks { finite, overflowed };
        self.apply(optim, lr, module, grads, checks, scaled_loss)
    }

    /// The step after the unscale: the update kept or discarded by `finite`, the scale moved
    /// on by it, the step queued for the host to read.
    fn apply<AB, M, R, const D: usize>(
        &mut self,
        optim: &mut DeviceOptimizer<R, B>,
        lr: f64,
        module: M,
        grads: GradientsParams,
        checks: Checks<B>,
        scaled_loss: Option<Tensor<AB, D>>,
    ) -> (M, Result<Vec<StepOutcome>, StepError>)
    where
        AB: AutodiffBackend<InnerBackend = B>,
        M: AutodiffModule<AB>,
        R: DeviceRule,
    {
        let Checks { finite, overflowed } = checks;
        let module = match &finite {
            Some(flag) => optim.step::<AB, M>(lr, module, grads, flag.clone()),
            None => module,
        };
        // A step without gradients counts as finite (as on the host), and the scale moves
        // on with it.
        let scale_device = self.device.scale().device();
        let flag = match &finite {
            Some(flag) => flag.clone().to_device(&scale_device),
            None => Tensor::<B, 1, Bool>::from_bool(TensorData::from([true]), &scale_device),
        };
        self.device = self.device.clone().adjust(flag);
        let loss = scaled_loss.map(|loss| loss.inner().cast(FloatDType::F32).mean());
        let step = PendingStep::new(finite, loss).with_overflowed(overflowed);
        let learned = match self.pending.push(step) {
            Some(due) => self.read(due),
            None => Ok(Vec::new()),
        };
        (module, learned)
    }

    /// Reads every pending step in one transaction and returns their outcomes in order: the
    /// host's scaler takes the same decisions as on the host-read path, each loss divided by
    /// the scale its step used. The device's scale is read too and must equal the host's.
    ///
    /// Fails with [`StepError::Stalled`] when a step reached `max_consecutive_skips`
    /// skips in a row (every pending step is counted all the same), and with a read error
    /// when the device could not be read (the steps stay pending).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn_mpric_scale::{DeviceLossScaler, LossScaler};
    ///
    /// let mut scaler = DeviceLossScaler::<Flex>::new(LossScaler::default(), &Default::default()).unwrap();
    /// assert!(scaler.sync().unwrap().is_empty());
    /// ```
    pub fn sync(&mut self) -> Result<Vec<StepOutcome>, StepError> {
        let all = self.pending.len();
        self.read(all)
    }

    /// Reads the oldest `count` pending steps (all of them: and the device's scale, checked).
    fn read(&mut self, count: usize) -> Result<Vec<StepOutcome>, StepError> {
        let plan = self.pending.plan(count);
        let scale = self.device.scale();
        let scale_device = scale.device();
        let mut transaction = Transaction::<B>::default();
        for handle in &plan {
            transaction = match handle {
                ReadHandle::Flag(flag) => {
                    transaction.register((*flag).clone().to_device(&scale_device))
                }
                ReadHandle::Loss(loss) => {
                    transaction.register((*loss).clone().to_device(&scale_device))
                }
                ReadHandle::Scale => transaction.register(scale.clone()),
            };
        }
        let data = transaction.try_execute()?;
        let values = plan
            .iter()
            .zip(data)
            .map(|(handle, data)| match handle.is_flag() {
                true => read_bool(data).map(ReadValue::Flag),
                false => read_one::<f32>(data, "value").map(ReadValue::Number),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let max = self.host.max_consecutive_skips();
        let settled = self
            .pending
            .settle(count, &values, self.host.core_mut(), max, self.names);
        Ok(settled?)
    }
}

/// `grads` as one set: each parameter's shards summed on the device Burn's optimizers pick
/// for it (`MultiGradientsParams::remove`).
fn sum_shards<AB: AutodiffBackend, M: AutodiffModule<AB>>(
    module: &M,
    grads: MultiGradientsParams,
) -> GradientsParams {
    struct Summer {
        shards: MultiGradientsParams,
        out: GradientsParams,
    }
    impl<AB: AutodiffBackend> ModuleVisitor<AB> for Summer {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<AB, D>>) {
            if let Some((grad, _)) = self.shards.remove::<AB::InnerBackend, D>(param.id) {
                self.out.register::<AB::InnerBackend, D>(param.id, grad);
            }
        }
    }
    let mut summer = Summer {
        shards: grads,
        out: GradientsParams::new(),
    };
    module.visit(&mut summer);
    summer.out
}

/// Copies `from`'s gradients of `module`'s parameters into `to` (tensors are shared, not
/// copied).
fn copy_grads<AB: AutodiffBackend, M: AutodiffModule<AB>>(
    module: &M,
    from: &GradientsParams,
    to: &mut GradientsParams,
) {
    struct Copier<'a> {
        from: &'a GradientsParams,
        to: &'a mut GradientsParams,
    }
    impl<AB: AutodiffBackend> ModuleVisitor<AB> for Copier<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<AB, D>>) {
            if let Some(grad) = self.from.get::<AB::InnerBackend, D>(param.id) {
                self.to.register::<AB::InnerBackend, D>(param.id, grad);
            }
        }
    }
    module.visit(&mut Copier { from, to });
}
