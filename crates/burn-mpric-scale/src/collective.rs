//! Data parallelism through burn-collective (feature `collective`): every replica sums its
//! gradients with the others' through burn-collective's all-reduce, then takes the skip
//! decision on the sum, so that all replicas skip or apply the same steps and keep the same
//! scale.

use burn::collective::{PeerId, ReduceOperation, all_reduce};
use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorPrimitive};

use crate::error::StepError;
use crate::read::read_bool;
use crate::scaler::{LossScaler, mean_at_f32};
use crate::unscale::cast_grads_to_param_dtype;
use burn_mpric_core::scale::StepOutcome;

fn collective_error(err: burn::collective::CollectiveError) -> StepError {
    StepError::Collective(format!("{err:?}"))
}

/// The sum of `value` over all peers (burn-collective's all-reduce); every peer calls it, in
/// the same order as its other collective operations. For the figures of a data-parallel step
/// besides its gradients (correct predictions, token counts).
///
/// # Example
///
/// ```standalone_crate
/// use burn::backend::Flex;
/// use burn::collective::{CollectiveConfig, PeerId, finish_collective, register};
/// use burn::tensor::Tensor;
/// use burn_mpric_scale::sum_over_peers;
///
/// let sums: Vec<f32> = std::thread::scope(|s| {
///     let peers: Vec<_> = [3.0f32, 4.0]
///         .into_iter()
///         .enumerate()
///         .map(|(i, count)| {
///             s.spawn(move || {
///                 let (peer, device) = (PeerId::from(i), Default::default());
///                 let config = CollectiveConfig::default().with_num_devices(2);
///                 register::<Flex>(peer, device, config).unwrap();
///                 let value = Tensor::<Flex, 1>::from_floats([count], &device);
///                 let sum = sum_over_peers(peer, value).unwrap().into_scalar();
///                 finish_collective::<Flex>(peer).unwrap();
///                 sum
///             })
///         })
///         .collect();
///     peers.into_iter().map(|p| p.join().unwrap()).collect()
/// });
/// assert_eq!(sums, vec![7.0, 7.0]);
/// ```
pub fn sum_over_peers<B: Backend, const D: usize>(
    peer: PeerId,
    value: Tensor<B, D>,
) -> Result<Tensor<B, D>, StepError> {
    let summed = all_reduce::<B>(peer, value.into_primitive().tensor(), ReduceOperation::Sum)
        .map_err(collective_error)?;
    Ok(Tensor::from_primitive(TensorPrimitive::Float(summed)))
}

/// Whether every peer's gradients were finite: `finite` is this peer's answer; the count of
/// peers that saw a non-finite gradient is all-reduced (burn-collective) and read once.
///
/// For loops that unscale and check each replica's own gradients before they are summed (for
/// example with [`LossScaler::check`]): the local answer must not decide the step, or one
/// replica skips while another applies. Every peer calls it, in the same order as its other
/// collective operations, then runs or skips its optimizer and calls [`LossScaler::update`]
/// with the answer.
///
/// # Example
///
/// (A standalone doctest: burn-collective's local server is one per process and backend, so
/// collective examples must not share a process.)
///
/// ```standalone_crate
/// use burn::backend::Flex;
/// use burn::collective::{CollectiveConfig, PeerId, finish_collective, register};
/// use burn_mpric_scale::all_peers_finite;
///
/// let answers: Vec<bool> = std::thread::scope(|s| {
///     let peers: Vec<_> = [true, false]
///         .into_iter()
///         .enumerate()
///         .map(|(i, finite)| {
///             s.spawn(move || {
///                 let (peer, device) = (PeerId::from(i), Default::default());
///                 let config = CollectiveConfig::default().with_num_devices(2);
///                 register::<Flex>(peer, device, config).unwrap();
///                 let all = all_peers_finite::<Flex>(peer, finite, &device).unwrap();
///                 finish_collective::<Flex>(peer).unwrap();
///                 all
///             })
///         })
///         .collect();
///     peers.into_iter().map(|p| p.join().unwrap()).collect()
/// });
/// assert_eq!(answers, vec![false, false]); // one peer overflowed: both skip
/// ```
pub fn all_peers_finite<B: Backend>(
    peer: PeerId,
    finite: bool,
    device: &B::Device,
) -> Result<bool, StepError> {
    let found = Tensor::<B, 1>::from_floats([if finite { 0.0 } else { 1.0 }], device);
    let found = sum_over_peers(peer, found)?;
    let none = found.equal_elem(0.0);
    read_bool(none.try_into_data()?)
}

impl LossScaler {
    /// [`step_with_loss`](Self::step_with_loss) for one replica of a data-parallel run whose
    /// peers are registered with burn-collective: the gradients, cast to their parameters'
    /// dtypes, are summed over all peers with burn-collective's all-reduce (in the order of
    /// their parameter ids, the same on every peer), and so is the loss; then the summed
    /// gradients are unscaled, checked and applied as `step_with_loss` does. Every peer sees
    /// the same sum, so every peer takes the same decision: one replica's overflow skips the
    /// step on all of them, and all keep the same scale and counters. Each replica weights its
    /// loss by its share of the global batch, so that the sum is the global batch's gradient.
    ///
    /// The sum is taken before the division by the scale. The scale is a power of two, so
    /// summing first and dividing after gives the same result as dividing first; the sum runs
    /// at the parameters' dtype (f32 for mixed policies), where scaled gradients do not
    /// overflow.
    ///
    /// The peers' modules must be clones of one module: the all-reduce pairs gradients by
    /// parameter id. Every peer must call it once per step; a peer that stops calling leaves
    /// the others waiting in the all-reduce.
    ///
    /// # Example
    ///
    /// ```standalone_crate
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::collective::{CollectiveConfig, PeerId, finish_collective, register};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::{GradientsParams, SgdConfig};
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::LossScaler;
    ///
    /// type B = Autodiff<Flex>;
    /// // One model for all replicas, so that their parameters have the same ids.
    /// let model: Linear<B> = LinearConfig::new(1, 1).init(&Default::default());
    /// let _ = (model.weight.val(), model.bias.as_ref().map(|b| b.val())); // materialized
    /// let outcomes: Vec<(bool, f32)> = std::thread::scope(|s| {
    ///     let peers: Vec<_> = [2.0f32, f32::INFINITY]
    ///         .into_iter()
    ///         .enumerate()
    ///         .map(|(i, input)| {
    ///             let model = model.clone();
    ///             s.spawn(move || {
    ///                 let (peer, device) = (PeerId::from(i), Default::default());
    ///                 let config = CollectiveConfig::default().with_num_devices(2);
    ///                 register::<Flex>(peer, device, config).unwrap();
    ///                 let mut scaler = LossScaler::default();
    ///                 let x = Tensor::<B, 2>::from_floats([[input]], &device);
    ///                 let scaled = scaler.scale_loss(model.forward(x).sum());
    ///                 let grads = GradientsParams::from_grads(scaled.backward(), &model);
    ///                 let mut optim = SgdConfig::new().init();
    ///                 let (_model, outcome) =
    ///                     scaler.step_all_reduced(peer, &mut optim, 0.1, model, grads, scaled);
    ///                 finish_collective::<Flex>(peer).unwrap();
    ///                 (outcome.unwrap().is_skipped(), scaler.scale())
    ///             })
    ///         })
    ///         .collect();
    ///     peers.into_iter().map(|p| p.join().unwrap()).collect()
    /// });
    /// // Only the second replica's batch overflowed; both skipped and backed off.
    /// assert_eq!(outcomes, vec![(true, 16384.0), (true, 16384.0)]);
    /// ```
    pub fn step_all_reduced<B, M, O, const D: usize>(
        &mut self,
        peer: PeerId,
        optim: &mut O,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
        scaled_loss: Tensor<B, D>,
    ) -> (M, Result<StepOutcome, StepError>)
    where
        B: AutodiffBackend,
        M: AutodiffModule<B>,
        O: Optimizer<M, B>,
    {
        let grads = cast_grads_to_param_dtype(&module, grads);
        let summed = grads
            .all_reduce::<B::InnerBackend>(peer, ReduceOperation::Sum)
            .map_err(collective_error)
            .and_then(|grads| Ok((grads, sum_over_peers(peer, mean_at_f32(scaled_loss))?)));
        match summed {
            Ok((grads, loss)) => self.step_inner(optim, lr, module, grads, Some(loss)),
            Err(err) => (module, Err(err)),
        }
    }
}
