//! One training step's arithmetic: the forward and backward pass of a batch on this
//! process's replicas (one device, a shard per device, or a shard per thread under `ddp`),
//! how the replicas combine their gradients ([`Peers`]), and the cause of a skipped step.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};

use burn::module::Module;
use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use burn_mpric::MpDevice;
use burn_mpric::scale::{LossScaler, ProbeRead, SkipCause, StepOutcome, cast_grads_to_param_dtype};

use crate::error::Error;
use crate::models::Model;
use crate::optim::Ad;
use crate::plan::Plan;
use crate::run::grads::StepGrads;
use crate::run::processes::Link;

/// Where the replicas of a collective run meet at the end of each step, after the first one
/// has written its reports: a failure there stops every replica at that step (a replica that
/// went on alone would wait in the next all-reduce forever).
#[cfg_attr(not(feature = "ddp"), allow(dead_code))]
pub(crate) struct StepTurn {
    barrier: Barrier,
    failed: AtomicBool,
}

impl StepTurn {
    /// A meeting point for `count` replicas.
    #[cfg_attr(not(feature = "ddp"), allow(dead_code))]
    pub(crate) fn new(count: usize) -> Self {
        Self {
            barrier: Barrier::new(count),
            failed: AtomicBool::new(false),
        }
    }

    /// Waits for every replica; `failed` says whether this one failed. Returns whether any
    /// replica failed.
    #[cfg_attr(not(feature = "ddp"), allow(dead_code))]
    pub(crate) fn end_step(&self, failed: bool) -> bool {
        if failed {
            self.failed.store(true, Ordering::SeqCst);
        }
        self.barrier.wait();
        self.failed.load(Ordering::SeqCst)
    }
}

/// How the replicas of a step combine their gradients.
#[derive(Clone, Copy)]
pub(crate) enum Peers<'a> {
    /// One thread: the model lives on the first device; with several devices, each runs one
    /// shard and the gradients are summed there (`multi_device`).
    Local,
    /// One thread per device (`ddp`): this thread is replica `peer` of `count`, and the
    /// gradients are summed through burn-collective.
    #[cfg(feature = "ddp")]
    Collective {
        peer: usize,
        count: usize,
        turn: &'a StepTurn,
    },
    /// One process of several (`--world`): this process's devices run its shards of each
    /// batch as under `Local`, and the sums span every process through `link`.
    Processes(&'a Link),
}

impl Peers<'_> {
    /// Whether this thread writes the run's metrics, evaluations and checkpoints.
    pub(crate) fn is_main(&self) -> bool {
        match self {
            Peers::Local => true,
            #[cfg(feature = "ddp")]
            Peers::Collective { peer, .. } => *peer == 0,
            Peers::Processes(link) => link.place().0 == 0,
        }
    }
}

/// Forward and backward of one batch, each loss multiplied by `scale` (the loss scaler's): on the main device alone, or split into one contiguous
/// shard per replica, each shard's loss weighted by its share of the batch (so the summed
/// gradients are those of the whole batch's mean loss) and the gradients summed on the main
/// device.
pub(crate) fn forward_backward<B: Backend>(
    plan: &Plan,
    model: &Model<Ad<B>>,
    scale: &dyn Fn(Tensor<Ad<B>, 1>) -> Tensor<Ad<B>, 1>,
    items: &[usize],
    replicas: &[MpDevice<B>],
    peers: Peers<'_>,
) -> Result<StepGrads<B>, Error> {
    let main = &replicas[0];
    #[cfg(feature = "ddp")]
    if let Peers::Collective { peer, count, .. } = peers {
        // This replica's shard; its loss weighted by its share of the batch, so that the sum
        // over the replicas is the gradient of the whole batch's mean loss.
        let own = shard(items, count)[peer];
        let out = model.forward(plan.data.batch::<Ad<B>>(false, own, main))?;
        let share = own.len() as f64 / items.len() as f64;
        let scaled = scale(out.loss.mul_scalar(share));
        let grads = GradientsParams::from_grads(scaled.backward(), model);
        let correct = match out.correct {
            Some(c) => Some(sum_over_peers::<B>(peer, c)?),
            None => None,
        };
        return Ok(StepGrads {
            grads,
            scaled_loss: scaled,
            correct,
        });
    }
    if replicas.len() == 1 && !matches!(peers, Peers::Processes(_)) {
        let out = model.forward(plan.data.batch::<Ad<B>>(false, items, main))?;
        let scaled = scale(out.loss);
        let grads = GradientsParams::from_grads(scaled.backward(), model);
        return Ok(StepGrads {
            grads,
            scaled_loss: scaled,
            correct: out.correct,
        });
    }
    let shards = match peers {
        // This process's devices take their shards of the batch split over every device of
        // every process (the same shards as one process with all the devices).
        Peers::Processes(link) => {
            let (rank, world) = link.place();
            let all = shard(items, world * replicas.len());
            all[rank * replicas.len()..][..replicas.len()].to_vec()
        }
        _ => shard(items, replicas.len()),
    };
    let mut accumulator = GradientsAccumulator::<Model<Ad<B>>>::new();
    let mut losses = Vec::with_capacity(shards.len());
    let mut correct: Vec<Tensor<Ad<B>, 1, burn::tensor::Int>> = Vec::new();
    for (shard, device) in shards.into_iter().zip(replicas) {
        let replica = model.clone().fork(device);
        let out = replica.forward(plan.data.batch::<Ad<B>>(false, shard, device))?;
        let share = shard.len() as f64 / items.len() as f64;
        let scaled = scale(out.loss.mul_scalar(share));
        let mut grads = GradientsParams::from_grads(scaled.backward(), &replica);
        if let Peers::Processes(_) = peers {
            // Summed at the parameters' dtype, as every other sum of the run is (and as
            // `ddp` sums its replicas): two f16 gradients may overflow where their f32 sum
            // does not.
            grads = cast_grads_to_param_dtype(&replica, grads);
        }
        accumulator.accumulate(model, grads.to_device(main, model));
        losses.push(scaled.detach().to_device(main));
        // Summed on the main device and read once, so that no replica waits for another.
        correct.extend(out.correct.map(|c| c.to_device(main)));
    }
    let correct = (!correct.is_empty()).then(|| Tensor::cat(correct, 0).sum());
    Ok(StepGrads {
        grads: accumulator.grads(),
        scaled_loss: Tensor::cat(losses, 0).sum(),
        correct,
    })
}

/// A count summed over all replicas (burn-collective), as every replica calls it.
#[cfg(feature = "ddp")]
fn sum_over_peers<B: Backend>(
    peer: usize,
    count: Tensor<Ad<B>, 1, burn::tensor::Int>,
) -> Result<Tensor<Ad<B>, 1, burn::tensor::Int>, Error> {
    let peer = burn::collective::PeerId::from(peer);
    let summed = burn_mpric::scale::sum_over_peers(peer, count.float().inner())
        .map_err(|e| Error::Internal(e.to_string()))?;
    Ok(Tensor::<Ad<B>, 1>::from_inner(summed).int())
}

/// `items` split into `n` contiguous shards whose sizes differ by at most one (`n` is at most
/// `items.len()`, checked with the recipe).
fn shard(items: &[usize], n: usize) -> Vec<&[usize]> {
    let (base, extra) = (items.len() / n, items.len() % n);
    let mut shards = Vec::with_capacity(n);
    let mut start = 0;
    for i in 0..n {
        let len = base + usize::from(i < extra);
        shards.push(&items[start..start + len]);
        start += len;
    }
    shards
}

/// The cause of a skipped step (one process): its batch once more at the probe's scale, the
/// two reads compared ([`SkipCause::judge`]).
pub(crate) fn skip_cause<B: Backend>(
    plan: &Plan,
    model: &Model<Ad<B>>,
    items: &[usize],
    replicas: &[MpDevice<B>],
    peers: Peers<'_>,
    outcome: &StepOutcome,
    step: u64,
) -> Result<SkipCause, Error> {
    let read = ProbeRead::of(outcome.loss, false, false);
    let probe_scale = read.probe_scale(outcome.scale_used);
    let prober = LossScaler::fixed(probe_scale)
        .map_err(|e| Error::Internal(format!("the probe's scale {probe_scale}: {e}")))?;
    let probed = forward_backward(
        plan,
        model,
        &|loss| prober.scale_loss(loss),
        items,
        replicas,
        peers,
    )?;
    let checked = prober
        .check(model, probed.grads, Some(probed.scaled_loss))
        .map_err(|source| Error::Step { step, source })?;
    let params = outcome
        .overflow
        .as_ref()
        .map(|o| o.params.clone())
        .unwrap_or_default();
    let still = checked.overflow.as_ref().map_or(&[][..], |o| &o.params[..]);
    Ok(SkipCause::judge(
        read,
        checked.probe_read(),
        outcome.scale_used,
        probe_scale,
        params,
        still,
    ))
}
