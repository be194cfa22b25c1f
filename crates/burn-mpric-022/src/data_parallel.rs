//! [`DataParallel`]: data-parallel steps across processes for Burn 0.22, whose own DDP runs
//! in one process: each process's gradients are summed with every other's through a
//! burn-mpric-cluster [`Transport`] (MPI or the TCP star), so the [`LossScaler`]
//! (crate::LossScaler) that follows takes one decision on the same bits everywhere, and a
//! non-finite gradient on one process skips the step on all.

use std::collections::HashSet;

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::{GradientsParams, MultiGradientsParams};
use burn::tensor::{DType, FloatDType, Shape, Tensor, TensorData};
use burn_mpric_cluster::{Exchange, Transport};

use crate::dtype::plain_float;
use crate::error::StepError;

/// This process's side of a data-parallel run across processes, over any [`Transport`]:
/// [`Mpi`](burn_mpric_cluster::Mpi) under `mpirun`/`srun`, or [`Tcp`](burn_mpric_cluster::Tcp).
///
/// Each step, call [`mean_grads`](Self::mean_grads) (or [`sum_grads`](Self::sum_grads))
/// between backward and [`LossScaler::step`](crate::LossScaler::step): every process then
/// holds the same gradients, so the scaler applies or skips the same steps and keeps the same
/// scale everywhere. Every process calls it once per step, in the same order.
///
/// ```
/// use std::thread;
/// use burn::nn::LinearConfig;
/// use burn::optim::{GradientsParams, SgdConfig};
/// use burn::tensor::{Device, Tensor};
/// use burn_mpric_cluster::{Coordinator, RunSpec, Tcp};
/// use burn_mpric_022::{DataParallel, LossScaler};
///
/// // Two processes (threads here), each with its own batch; rank 1's is poisoned.
/// let spec = RunSpec::new(2, vec![]);
/// let coordinator = Coordinator::bind("127.0.0.1:0", spec.clone()).unwrap();
/// let addr = coordinator.local_addr().to_string();
/// let mut coordinator = Some(coordinator);
/// let ranks: Vec<_> = (0..2)
///     .map(|rank| {
///         let (addr, spec, coordinator) = (addr.clone(), spec.clone(), coordinator.take());
///         thread::spawn(move || {
///             let device = Device::flex().autodiff();
///             let transport = Tcp::join(coordinator, &addr, rank, &spec).unwrap();
///             let mut dp = DataParallel::new(Box::new(transport));
///             let model = LinearConfig::new(2, 1).init(&device);
///             let mut scaler = LossScaler::default();
///             let x = if rank == 1 { f32::NAN } else { 1.0 };
///             let loss = model.forward(Tensor::<2>::from_floats([[x, 2.0]], &device)).sum();
///             let grads = GradientsParams::from_grads(scaler.scale_loss(loss).backward(), &model);
///             let grads = dp.mean_grads(&model, grads).unwrap();
///             let (_model, outcome) = scaler.step(&mut SgdConfig::new().init(), 0.1, model, grads);
///             dp.finish().unwrap();
///             outcome.unwrap().is_skipped()
///         })
///     })
///     .collect();
/// // One process's NaN skips the step on both.
/// assert!(ranks.into_iter().all(|r| r.join().unwrap()));
/// ```
#[derive(Debug)]
pub struct DataParallel {
    exchange: Exchange,
}

impl DataParallel {
    /// Data-parallel steps over `transport`, already joined.
    ///
    /// See [`DataParallel`] for an example.
    pub fn new(transport: Box<dyn Transport>) -> Self {
        Self {
            exchange: Exchange::new(transport),
        }
    }

    /// This process's rank.
    ///
    /// See [`DataParallel`] for an example.
    pub fn rank(&self) -> usize {
        self.exchange.rank()
    }

    /// The number of processes.
    ///
    /// See [`DataParallel`] for an example.
    pub fn world(&self) -> usize {
        self.exchange.world()
    }

    /// The sum over every process of the gradients of `module`'s parameters, at each
    /// gradient's own dtype. Gradients of parameters outside `module` are dropped.
    ///
    /// See [`DataParallel`] for an example.
    ///
    /// # Errors
    ///
    /// [`StepError::Transport`] naming the lost or refused process; [`StepError::Read`]
    /// when the device cannot be read.
    pub fn sum_grads<M: Module>(
        &mut self,
        module: &M,
        grads: GradientsParams,
    ) -> Result<GradientsParams, StepError> {
        self.reduce(module, grads, Vec::new(), 1.0).map(|(g, _)| g)
    }

    /// The mean over every process of the gradients (their sum divided by the number of
    /// processes): with each process's loss a mean over its own batch, the gradient of the
    /// mean over all of them, as one process on the whole batch.
    ///
    /// See [`DataParallel`] for an example.
    ///
    /// # Errors
    ///
    /// As [`sum_grads`](Self::sum_grads).
    pub fn mean_grads<M: Module>(
        &mut self,
        module: &M,
        grads: GradientsParams,
    ) -> Result<GradientsParams, StepError> {
        let factor = 1.0 / self.world() as f32;
        self.reduce(module, grads, Vec::new(), factor)
            .map(|(g, _)| g)
    }

    /// Like [`mean_grads`](Self::mean_grads), and also the mean over every process of each
    /// of `extra`'s values (the step's loss, an accuracy), in the same exchange and the same
    /// device read.
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::optim::{GradientsParams, MultiGradientsParams};
    /// use burn::tensor::{Device, Tensor};
    /// use burn_mpric_cluster::{ClusterError, Transport};
    /// use burn_mpric_022::DataParallel;
    ///
    /// /// A run of one process.
    /// struct Alone;
    /// impl Transport for Alone {
    ///     fn rank(&self) -> usize { 0 }
    ///     fn world(&self) -> usize { 1 }
    ///     fn all_reduce(&mut self, _: u64, v: &[f32]) -> Result<Vec<f32>, ClusterError> {
    ///         Ok(v.to_vec())
    ///     }
    ///     fn finish(self: Box<Self>) -> Result<(), ClusterError> { Ok(()) }
    /// }
    ///
    /// let device = Device::flex().autodiff();
    /// let model = LinearConfig::new(2, 1).init(&device);
    /// let loss = model.forward(Tensor::<2>::from_floats([[1.0, 2.0]], &device)).sum();
    /// let value = loss.clone().detach().reshape([1]);
    /// let grads = GradientsParams::from_grads(loss.backward(), &model);
    /// let mut dp = DataParallel::new(Box::new(Alone));
    /// let (_grads, means) = dp.mean_grads_with(&model, grads, vec![value.clone()])?;
    /// assert_eq!(means, value.into_data().to_vec::<f32>().unwrap());
    /// # Ok::<(), burn_mpric_022::StepError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`sum_grads`](Self::sum_grads).
    pub fn mean_grads_with<M: Module>(
        &mut self,
        module: &M,
        grads: GradientsParams,
        extra: Vec<Tensor<1>>,
    ) -> Result<(GradientsParams, Vec<f32>), StepError> {
        let factor = 1.0 / self.world() as f32;
        self.reduce(module, grads, extra, factor)
    }

    /// Like [`sum_grads`](Self::sum_grads), and also the sum over every process of each of
    /// `extra`'s values, in the same exchange and the same device read.
    ///
    /// See [`mean_grads_with`](Self::mean_grads_with) for an example.
    ///
    /// # Errors
    ///
    /// As [`sum_grads`](Self::sum_grads).
    pub fn sum_grads_with<M: Module>(
        &mut self,
        module: &M,
        grads: GradientsParams,
        extra: Vec<Tensor<1>>,
    ) -> Result<(GradientsParams, Vec<f32>), StepError> {
        self.reduce(module, grads, extra, 1.0)
    }

    /// Like [`sum_grads`](Self::sum_grads) for gradients sharded over devices (burn-train's
    /// `MultiDeviceOptim::OptimSharded`): each device's shard is summed across processes in
    /// turn. Every process shards the parameters alike, so the shards line up.
    ///
    /// # Errors
    ///
    /// As [`sum_grads`](Self::sum_grads).
    ///
    /// See [`DataParallel`] for an example of the unsharded form.
    pub fn sum_multi_grads<M: Module>(
        &mut self,
        module: &M,
        grads: MultiGradientsParams,
    ) -> Result<MultiGradientsParams, StepError> {
        let mut summed = Vec::with_capacity(grads.grads.len());
        for (shard, device) in grads.grads {
            summed.push((self.sum_grads(module, shard)?, device));
        }
        Ok(MultiGradientsParams { grads: summed })
    }

    /// Says this process has finished and waits until every process has.
    ///
    /// See [`DataParallel`] for an example.
    ///
    /// # Errors
    ///
    /// [`StepError::Transport`] when another process was lost before it finished.
    pub fn finish(self) -> Result<(), StepError> {
        self.exchange.finish().map_err(StepError::from)
    }

    fn reduce<M: Module>(
        &mut self,
        module: &M,
        grads: GradientsParams,
        extra: Vec<Tensor<1>>,
        factor: f32,
    ) -> Result<(GradientsParams, Vec<f32>), StepError> {
        let mut walk = Flatten {
            grads,
            seen: HashSet::new(),
            parts: Vec::new(),
        };
        module.visit(&mut walk);
        let parts = walk.parts;
        let own: usize = parts.iter().map(|p| p.shape.num_elements()).sum();
        let Some(device) = parts
            .first()
            .map(|p| p.values.device())
            .or_else(|| extra.first().map(Tensor::device))
        else {
            // Nothing to send, but every process takes part in every exchange.
            let (_, extra) = self.exchange.sum(&[], factor, 0)?;
            return Ok((GradientsParams::new(), extra));
        };
        let all: Vec<Tensor<1>> = parts
            .iter()
            .map(|p| p.values.clone())
            .chain(extra.into_iter().map(|t| t.cast(FloatDType::F32)))
            .map(|t| t.to_device(&device))
            .collect();
        let values = Tensor::cat(all, 0)
            .try_into_data()?
            .convert_dtype(DType::F32)
            .try_to_vec::<f32>()
            .map_err(|err| StepError::UnexpectedRead(format!("{err:?}")))?;
        let (summed, extra) = self.exchange.sum(&values, factor, own)?;
        let mut grads = GradientsParams::new();
        if own > 0 {
            let flat = Tensor::<1>::from_data(TensorData::new(summed, [own]), &device);
            let mut start = 0;
            for part in parts {
                let len = part.shape.num_elements();
                (part.register)(&mut grads, flat.clone().slice(start..start + len));
                start += len;
            }
        }
        Ok((grads, extra))
    }
}

/// Puts a slice of the sum back as one parameter's gradient, at its shape and dtype.
type Register = Box<dyn FnOnce(&mut GradientsParams, Tensor<1>)>;

/// One gradient, flattened at f32, and how to put a slice of the sum back in its place.
struct Part {
    values: Tensor<1>,
    shape: Shape,
    register: Register,
}

/// Visits the parameters in module order (the same on every process, as every process holds
/// the same module) and takes their gradients; a shared parameter is taken once.
struct Flatten {
    grads: GradientsParams,
    seen: HashSet<ParamId>,
    parts: Vec<Part>,
}

impl ModuleVisitor for Flatten {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if !self.seen.insert(param.id) {
            return;
        }
        let Some(grad) = self.grads.remove::<D>(param.id) else {
            return;
        };
        let (id, shape, dtype) = (param.id, grad.shape(), grad.dtype());
        let len = shape.num_elements();
        let restore = shape.clone();
        self.parts.push(Part {
            values: grad.reshape([len]).cast(FloatDType::F32),
            shape,
            register: Box::new(move |grads, flat| {
                let grad: Tensor<D> = flat.reshape(restore);
                let grad = match plain_float(dtype) {
                    Some(own) if own != FloatDType::F32 => grad.cast(own),
                    _ => grad,
                };
                grads.register::<D>(id, grad);
            }),
        });
    }
}
