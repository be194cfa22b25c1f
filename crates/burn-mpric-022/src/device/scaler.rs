//! [`DeviceLossScaler`]: the step contract with the skip decided on the device and the host
//! told later.

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{GradientsParams, MultiGradientsParams};
use burn::tensor::{Bool, DType, Device, FloatDType, Tensor, TensorData, Transaction};
use burn_mpric_core::scale::{
    PendingStep, PendingSteps, ReadHandle, ReadValue, StepOutcome, merge_by_name,
};

use super::optim::DeviceOptimizer;
use super::rules::DeviceRule;
use super::scale::{DeviceScale, finite_value};
use crate::error::StepError;
use crate::grad_paths::grads_by_path;
use crate::scaler::{LossScaler, sum_shards};
use crate::unscale::{CheckKind, GradCheck};

/// Loss scaling with the skip decided on the device (Burn 0.22): the finiteness flag, the
/// scale and its growth counter stay device tensors, the optimizer's update is kept or
/// discarded by a select on the flag ([`DeviceOptimizer`]), and the host reads nothing
/// between backward and the optimizer. It learns each step's [`StepOutcome`] later, all
/// pending steps in one read: at [`sync`](Self::sync) or every `n` steps, one step behind
/// ([`with_sync_every`](Self::with_sync_every)). The same contract as the 0.21 edition's
/// `DeviceLossScaler`: the outcomes are the host scaler's, replayed from the flags read
/// (burn-mpric-core's `ScalerState::replay`), and the device's scale is checked against them
/// at every full sync; with [`with_overflow_names`](Self::with_overflow_names) a skipped
/// step's outcome names the parameters that overflowed. Not on this path: clipping and the
/// skip-cause probe; use [`LossScaler`] for them.
///
/// # Example
///
/// ```
/// use burn::nn::LinearConfig;
/// use burn::optim::{GradientsParams, MultiGradientsParams};
/// use burn::tensor::{Device, Tensor};
/// use burn_mpric_022::{DeviceLossScaler, DeviceOptimizer, LossScaler};
/// use burn_mpric_core::scale::DeviceAdamConfig;
///
/// let device = Device::flex().autodiff();
/// let mut model = LinearConfig::new(4, 1).init(&device);
/// let mut optim = DeviceOptimizer::new(DeviceAdamConfig::new());
/// let mut scaler = DeviceLossScaler::new(LossScaler::default(), &device).unwrap();
/// for _ in 0..3 {
///     let loss = model.forward(Tensor::<2>::ones([2, 4], &device)).square().mean();
///     let scaled = scaler.scale_loss(loss);
///     let grads = GradientsParams::from_grads(scaled.backward(), &model);
///     let (next, learned) = scaler.step(&mut optim, 1e-3, model, grads, Some(scaled));
///     model = next;
///     assert!(learned.unwrap().is_empty()); // nothing was read
/// }
/// let outcomes = scaler.sync().unwrap(); // one read for the three steps
/// assert_eq!(outcomes.len(), 3);
/// assert!(outcomes.iter().all(|o| o.is_applied() && o.loss.is_some()));
/// ```
pub struct DeviceLossScaler {
    /// The host's scaler, as of the last step it learned.
    host: LossScaler,
    /// The state the next step uses.
    device: DeviceScale,
    pending: PendingSteps<Tensor<1, Bool>, Tensor<1>>,
    /// Keep each parameter's finiteness flag, to name the overflowed ones at the read.
    names: bool,
}

/// What the unscale found, on the device: the gradients' sums (finite exactly when the step
/// is) and, with names on, each gradient's overflow by module path.
struct Checks {
    sums: Vec<Tensor<1>>,
    overflowed: Vec<(String, Tensor<1, Bool>)>,
}

impl DeviceLossScaler {
    /// The device path of a host scaler (a fresh one, or one restored from a checkpoint),
    /// its state copied to `device` (without autodiff).
    ///
    /// Fails with [`StepError::NotOnDevice`] when the scaler clips gradients or its growth
    /// or backoff factor is not exact in f32.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::tensor::Device;
    /// use burn_mpric_022::{DeviceLossScaler, LossScaler};
    ///
    /// assert!(DeviceLossScaler::new(LossScaler::default(), &Device::flex()).is_ok());
    /// let clipped = LossScaler::default().with_clip_norm(1.0).unwrap();
    /// assert!(DeviceLossScaler::new(clipped, &Device::flex()).is_err());
    /// ```
    pub fn new(host: LossScaler, device: &Device) -> Result<Self, StepError> {
        if host.clip().is_some() {
            return Err(StepError::NotOnDevice(
                "global-norm clipping needs the norm on the host; use LossScaler for clipped \
                 steps"
                    .into(),
            ));
        }
        let device = device.clone().without_autodiff();
        Ok(Self {
            device: DeviceScale::new(host.loss_scale(), &device)?,
            host,
            pending: PendingSteps::new(0),
            names: false,
        })
    }

    /// Reads the pending steps every `n` steps, one step behind: after the `n + 1`-th
    /// pending step is queued, the `n` before it are read. `0` (the default) reads at
    /// [`sync`](Self::sync), and once
    /// [`MAX_PENDING_STEPS`](burn_mpric_core::scale::MAX_PENDING_STEPS) steps are pending.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::tensor::Device;
    /// use burn_mpric_022::{DeviceLossScaler, LossScaler};
    ///
    /// let scaler = DeviceLossScaler::new(LossScaler::default(), &Device::flex()).unwrap();
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
    /// use burn::nn::LinearConfig;
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::{Device, Tensor};
    /// use burn_mpric_022::{DeviceLossScaler, DeviceOptimizer, LossScaler};
    /// use burn_mpric_core::scale::DeviceSgdConfig;
    ///
    /// let model = LinearConfig::new(1, 1).init(&Device::flex().autodiff());
    /// let mut scaler = DeviceLossScaler::new(LossScaler::default(), &Device::flex())
    ///     .unwrap()
    ///     .with_overflow_names(true);
    /// let mut grads = GradientsParams::new();
    /// grads.register(model.weight.id, Tensor::<2>::from_floats([[f32::NAN]], &Device::flex()));
    /// let mut optim = DeviceOptimizer::new(DeviceSgdConfig::new());
    /// let _ = scaler.step::<_, _, 1>(&mut optim, 1.0, model, grads, None);
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
    /// use burn::tensor::Device;
    /// use burn_mpric_022::{DeviceLossScaler, LossScaler};
    ///
    /// let scaler = DeviceLossScaler::new(LossScaler::default(), &Device::flex()).unwrap();
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
    /// use burn::tensor::Device;
    /// use burn_mpric_022::{DeviceLossScaler, LossScaler};
    ///
    /// let scaler = DeviceLossScaler::new(LossScaler::default(), &Device::flex()).unwrap();
    /// assert_eq!(scaler.sync_every(), 0);
    /// ```
    pub fn sync_every(&self) -> usize {
        self.pending.sync_every()
    }

    /// The host's scaler as of the last step it learned; [`sync`](Self::sync) first to
    /// include every step, as before a checkpoint.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::tensor::Device;
    /// use burn_mpric_022::{DeviceLossScaler, LossScaler};
    ///
    /// let scaler = DeviceLossScaler::new(LossScaler::default(), &Device::flex()).unwrap();
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
    /// use burn::tensor::Device;
    /// use burn_mpric_022::{DeviceLossScaler, LossScaler};
    ///
    /// let scaler = DeviceLossScaler::new(LossScaler::fixed(4.0).unwrap(), &Device::flex()).unwrap();
    /// assert_eq!(scaler.device_scale().scale().into_scalar::<f32>(), 4.0);
    /// ```
    pub fn device_scale(&self) -> &DeviceScale {
        &self.device
    }

    /// Steps taken and not read yet.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::tensor::Device;
    /// use burn_mpric_022::{DeviceLossScaler, LossScaler};
    ///
    /// let scaler = DeviceLossScaler::new(LossScaler::default(), &Device::flex()).unwrap();
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
    /// use burn::tensor::{DType, Device, FloatDType, Tensor};
    /// use burn_mpric_022::{DeviceLossScaler, LossScaler};
    ///
    /// let device = Device::flex().autodiff();
    /// let scaler = DeviceLossScaler::new(LossScaler::default(), &device).unwrap();
    /// let loss = Tensor::<1>::from_floats([4.0], &device).cast(FloatDType::F16);
    /// let scaled = scaler.scale_loss(loss);
    /// assert_eq!(scaled.dtype(), DType::F32);
    /// assert_eq!(scaled.into_scalar::<f32>(), 131072.0);
    /// ```
    pub fn scale_loss<const D: usize>(&self, loss: Tensor<D>) -> Tensor<D> {
        let wide = match loss.dtype() {
            DType::F64 => FloatDType::F64,
            _ => FloatDType::F32,
        };
        let scale = self.device.scale().cast(wide);
        let scale = scale.to_device(&loss.device().without_autodiff());
        loss.cast(wide).mul(scale.reshape([1; D]))
    }

    /// One optimizer step over `grads` (from a loss scaled by
    /// [`scale_loss`](Self::scale_loss)), with nothing read: each gradient is cast to f32,
    /// unscaled by the device's `1/S`, stored at its parameter's dtype and reduced to a
    /// device flag; `optim` applies or discards its update by that flag, and the device's
    /// scale moves on by it. `scaled_loss`, when given, is kept (its mean) for the outcome.
    ///
    /// Returns the outcomes the host learned in this call: none, unless
    /// [`with_sync_every`](Self::with_sync_every) made it read. The module always comes
    /// back; on `Err` from a gradient's shape nothing changed.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::optim::{GradientsParams, MultiGradientsParams};
    /// use burn::tensor::{Device, Tensor};
    /// use burn_mpric_022::{DeviceLossScaler, DeviceOptimizer, LossScaler};
    /// use burn_mpric_core::scale::DeviceSgdConfig;
    ///
    /// let model = LinearConfig::new(1, 1).init(&Device::flex().autodiff());
    /// let before = model.weight.val().into_data();
    /// let mut scaler = DeviceLossScaler::new(LossScaler::default(), &Device::flex()).unwrap();
    /// let mut grads = GradientsParams::new();
    /// grads.register(model.weight.id, Tensor::<2>::from_floats([[f32::NAN]], &Device::flex()));
    /// let mut optim = DeviceOptimizer::new(DeviceSgdConfig::new());
    /// let (model, learned) = scaler.step::<_, _, 1>(&mut optim, 1.0, model, grads, None);
    /// assert!(learned.unwrap().is_empty());
    /// assert_eq!(model.weight.val().into_data(), before); // skipped on the device
    /// let outcome = &scaler.sync().unwrap()[0];
    /// assert!(outcome.is_skipped());
    /// assert_eq!(outcome.next_scale, 16384.0);
    /// ```
    pub fn step<M: Module, R: DeviceRule, const D: usize>(
        &mut self,
        optim: &mut DeviceOptimizer<R>,
        lr: f64,
        module: M,
        mut grads: GradientsParams,
        scaled_loss: Option<Tensor<D>>,
    ) -> (M, Result<Vec<StepOutcome>, StepError>) {
        let inverse = self.device.scale().recip();
        let checks = match unscale(&module, &mut grads, inverse) {
            Ok(checks) => checks,
            Err(err) => return (module, Err(err)),
        };
        let overflowed = self.overflow_flags(&module, std::slice::from_ref(&grads));
        let checks = Checks {
            sums: checks,
            overflowed,
        };
        self.apply(optim, lr, module, grads, checks, scaled_loss)
    }

    /// With names on, each gradient's "holds inf or NaN" flag by module path, a parameter's
    /// shards on several devices folded into one flag (on the first shard's device).
    fn overflow_flags<M: Module>(
        &self,
        module: &M,
        shards: &[GradientsParams],
    ) -> Vec<(String, Tensor<1, Bool>)> {
        if !self.names {
            return Vec::new();
        }
        let flags = shards.iter().flat_map(|shard| {
            let by_path = grads_by_path(module, shard).into_iter();
            by_path.map(|(path, grad)| (path, grad.is_finite().bool_not().any()))
        });
        merge_by_name(flags, |all, flag| {
            let flag = flag.to_device(&all.device());
            all.bool_or(flag)
        })
    }

    /// [`step`](Self::step) for gradients held on several devices (Burn's
    /// `MultiGradientsParams`): each shard is cast and unscaled on its own device, their
    /// checks make one decision for all of them (a non-finite gradient on any device skips
    /// the whole step), and a parameter's shards are summed, at its dtype, on the device
    /// Burn's optimizers pick for it, where its update then runs (the parameter and its state
    /// move there, as in Burn's `step_multi`). Nothing is read.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::optim::{GradientsParams, MultiGradientsParams};
    /// use burn::tensor::{Device, Tensor};
    /// use burn_mpric_022::{DeviceLossScaler, DeviceOptimizer, LossScaler};
    /// use burn_mpric_core::scale::DeviceSgdConfig;
    ///
    /// let model = LinearConfig::new(1, 1).with_bias(false).init(&Device::flex().autodiff());
    /// let (before, id) = (model.weight.val().into_scalar::<f32>(), model.weight.id);
    /// let shard = |value: f32| {
    ///     let mut grads = GradientsParams::new();
    ///     grads.register(id, Tensor::<2>::from_floats([[value]], &Device::flex()));
    ///     (grads, Device::flex())
    /// };
    /// let mut scaler = DeviceLossScaler::new(LossScaler::fixed(2.0).unwrap(), &Device::flex()).unwrap();
    /// let mut optim = DeviceOptimizer::new(DeviceSgdConfig::new());
    /// // The shards' unscaled gradients, 1 and 3, are summed: the update is lr * 4.
    /// let grads = MultiGradientsParams { grads: vec![shard(2.0), shard(6.0)] };
    /// let (model, _) = scaler.step_multi::<_, _, 1>(&mut optim, 0.5, model, grads, None);
    /// assert_eq!(model.weight.val().into_scalar::<f32>(), before - 2.0);
    /// // One shard overflowed: the whole step is skipped.
    /// let grads = MultiGradientsParams { grads: vec![shard(2.0), shard(f32::INFINITY)] };
    /// let (model, _) = scaler.step_multi::<_, _, 1>(&mut optim, 0.5, model, grads, None);
    /// assert_eq!(model.weight.val().into_scalar::<f32>(), before - 2.0);
    /// assert!(scaler.sync().unwrap()[1].is_skipped());
    /// ```
    pub fn step_multi<M: Module, R: DeviceRule, const D: usize>(
        &mut self,
        optim: &mut DeviceOptimizer<R>,
        lr: f64,
        module: M,
        grads: MultiGradientsParams,
        scaled_loss: Option<Tensor<D>>,
    ) -> (M, Result<Vec<StepOutcome>, StepError>) {
        let inverse = self.device.scale().recip();
        let mut checks = Vec::new();
        let mut shards = Vec::with_capacity(grads.grads.len());
        for (mut shard, device) in grads.grads {
            match unscale(&module, &mut shard, inverse.clone()) {
                Ok(more) => checks.extend(more),
                Err(err) => return (module, Err(err)),
            }
            shards.push((shard, device));
        }
        let parts: Vec<GradientsParams> = match self.names {
            true => shards
                .iter()
                .map(|(shard, _)| copy_grads(&module, shard))
                .collect(),
            false => Vec::new(),
        };
        let overflowed = self.overflow_flags(&module, &parts);
        let grads = sum_shards(&module, MultiGradientsParams { grads: shards });
        let checks = Checks {
            sums: checks,
            overflowed,
        };
        self.apply(optim, lr, module, grads, checks, scaled_loss)
    }

    /// The step after the unscale: the update kept or discarded by the checks' finiteness,
    /// the scale moved on by it, the step queued for the host to read.
    fn apply<M: Module, R: DeviceRule, const D: usize>(
        &mut self,
        optim: &mut DeviceOptimizer<R>,
        lr: f64,
        module: M,
        grads: GradientsParams,
        checks: Checks,
        scaled_loss: Option<Tensor<D>>,
    ) -> (M, Result<Vec<StepOutcome>, StepError>) {
        let Checks {
            sums: checks,
            overflowed,
        } = checks;
        // Finite exactly when every check is (their sum is inf or NaN otherwise).
        let finite = checks
            .first()
            .map(Tensor::device)
            .and_then(|device| {
                let on_device = checks.iter().map(|c| c.clone().to_device(&device));
                on_device.reduce(Tensor::add)
            })
            .map(finite_value);
        let module = match &finite {
            Some(flag) => optim.step(lr, module, grads, flag.clone()),
            None => module,
        };
        // A step without gradients counts as finite (as on the host), and the scale moves
        // on with it.
        let scale_device = self.device.scale().device();
        let flag = match &finite {
            Some(flag) => flag.clone().to_device(&scale_device),
            None => Tensor::<1, Bool>::from_bool([true], &scale_device),
        };
        self.device = self.device.clone().adjust(flag);
        let loss = scaled_loss.map(|loss| loss.without_autodiff().cast(FloatDType::F32).mean());
        let step = PendingStep::new(finite, loss).with_overflowed(overflowed);
        let learned = match self.pending.push(step) {
            Some(due) => self.read(due),
            None => Ok(Vec::new()),
        };
        (module, learned)
    }

    /// Reads every pending step in one transaction and returns their outcomes in order, as
    /// the host-read path would have reported them; the device's scale is read too and must
    /// equal the host's.
    ///
    /// Fails with [`StepError::Stalled`] when a step reached `max_consecutive_skips` skips in
    /// a row (every pending step is counted all the same), and with a read error when the
    /// device could not be read (the steps stay pending).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::tensor::Device;
    /// use burn_mpric_022::{DeviceLossScaler, LossScaler};
    ///
    /// let mut scaler = DeviceLossScaler::new(LossScaler::default(), &Device::flex()).unwrap();
    /// assert!(scaler.sync().unwrap().is_empty());
    /// ```
    pub fn sync(&mut self) -> Result<Vec<StepOutcome>, StepError> {
        let all = self.pending.len();
        self.read(all)
    }

    /// Reads the oldest `count` pending steps (all of them: and the device's scale, checked).
    fn read(&mut self, count: usize) -> Result<Vec<StepOutcome>, StepError> {
        let plan = self.pending.plan(count);
        let mut transaction = Transaction::default();
        for handle in &plan {
            transaction = match handle {
                ReadHandle::Flag(flag) => transaction.register((*flag).clone()),
                ReadHandle::Loss(loss) => transaction.register((*loss).clone()),
                ReadHandle::Scale => transaction.register(self.device.scale()),
            };
        }
        let data = transaction.try_execute()?;
        let values = plan
            .iter()
            .zip(data)
            .map(|(handle, data)| read_value(handle.is_flag(), data))
            .collect::<Result<Vec<_>, _>>()?;
        let max = self.host.max_consecutive_skips();
        let settled = self
            .pending
            .settle(count, &values, self.host.core_mut(), max, self.names);
        Ok(settled?)
    }
}

/// A one-element value read back: a flag through `iter`, which converts (backends store
/// bools as they like, Wgpu as integers), or one `f32`.
fn read_value(flag: bool, data: TensorData) -> Result<ReadValue, StepError> {
    let unexpected = |what: &str| StepError::UnexpectedRead(format!("expected one {what}"));
    match flag {
        true => match data.iter::<bool>().collect::<Vec<_>>().as_slice() {
            [flag] => Ok(ReadValue::Flag(*flag)),
            _ => Err(unexpected("flag")),
        },
        false => match data.iter::<f32>().collect::<Vec<_>>().as_slice() {
            [value] => Ok(ReadValue::Number(*value)),
            _ => Err(unexpected("value")),
        },
    }
}

/// Casts and unscales every gradient of `module` in `grads` by `inverse`, on the device: the
/// one-element sums whose finiteness decides the step.
fn unscale<M: Module>(
    module: &M,
    grads: &mut GradientsParams,
    inverse: Tensor<1>,
) -> Result<Vec<Tensor<1>>, StepError> {
    let mut visitor = GradCheck::on_device(grads, inverse, CheckKind::Sum);
    module.visit(&mut visitor);
    let (checks, error) = visitor.finish();
    match error {
        Some(err) => Err(err),
        None => Ok(checks),
    }
}

/// `from`'s gradients of `module`'s parameters, in a set of their own (tensors are shared,
/// not copied).
fn copy_grads<M: Module>(module: &M, from: &GradientsParams) -> GradientsParams {
    struct Copier<'a> {
        from: &'a GradientsParams,
        to: GradientsParams,
    }
    impl ModuleVisitor for Copier<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(grad) = self.from.get::<D>(param.id) {
                self.to.register::<D>(param.id, grad);
            }
        }
    }
    let mut copier = Copier {
        from,
        to: GradientsParams::new(),
    };
    module.visit(&mut copier);
    copier.to
}
