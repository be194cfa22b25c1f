//! `strategy = "ddp"`: one thread per device, each a whole replica (model, optimizer, loss
//! scaler, data order), whose gradients are summed with the others' through burn-collective's
//! all-reduce before one loss-scaler decision that is the same on every replica. The first
//! replica writes the metrics, evaluations and checkpoints.

use std::marker::PhantomData;

use burn::collective::{CollectiveConfig, PeerId, finish_collective, register};
use burn::module::Module;
use burn::tensor::backend::Backend;
use burn_mpric::{MixedPrecision, MpDevice};

use crate::error::Error;
use crate::models::Model;
use crate::optim::{Ad, with_optimizer};
use crate::run::options::Summary;
use crate::run::step::{Peers, StepTurn};
use crate::run::train::{Loop, Run};

/// A registered peer, unregistered however its thread ends.
struct Registered<B: Backend>(PeerId, PhantomData<B>);

impl<B: Backend> Registered<B> {
    fn new(peer: PeerId, device: &MpDevice<B>, peers: usize) -> Result<Self, Error> {
        let config = CollectiveConfig::default().with_num_devices(peers);
        register::<MixedPrecision<B>>(peer, device.clone(), config)
            .map_err(|e| Error::Internal(format!("burn-collective refused peer {peer}: {e:?}")))?;
        Ok(Self(peer, PhantomData))
    }
}

impl<B: Backend> Drop for Registered<B> {
    fn drop(&mut self) {
        // Nothing to report: the run's own result says what happened.
        let _ = finish_collective::<MixedPrecision<B>>(self.0);
    }
}

/// Trains `run` with one replica per device of `replicas`; the result is the first replica's.
pub(crate) fn train<B: Backend>(
    run: Run<'_>,
    replicas: Vec<MpDevice<B>>,
) -> Result<Summary, Error> {
    let count = replicas.len();
    // One model for all: the all-reduce pairs gradients by parameter id.
    let (plan, recipe) = (run.plan, &run.plan.recipe);
    let model = Model::<Ad<B>>::init_seeded(
        &plan.recipe.model,
        plan.data.dims(),
        recipe.seed,
        &replicas[0],
    );
    let turn = StepTurn::new(count);
    let results: Vec<Result<Summary, Error>> = std::thread::scope(|s| {
        let threads: Vec<_> = replicas
            .into_iter()
            .enumerate()
            .map(|(peer, device)| {
                let (run, turn) = (run.clone(), &turn);
                let model = model.clone().fork(&device);
                s.spawn(move || {
                    let _registered = Registered::new(PeerId::from(peer), &device, count)?;
                    with_optimizer::<B, _>(
                        &run.plan.recipe,
                        Loop {
                            run,
                            replicas: vec![device],
                            peers: Peers::Collective { peer, count, turn },
                            model: Some(model),
                        },
                    )
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err(Error::Internal("a replica's thread panicked".into())))
            })
            .collect()
    });
    let mut results = results.into_iter();
    let first = results
        .next()
        .unwrap_or_else(|| Err(Error::Internal("no replica ran".into())))?;
    // Every replica took the same decisions: the same skipped count and final scale.
    let decided = |s: &Summary| (s.skipped, s.last.as_ref().map(|r| r.loss_scale));
    for (peer, other) in results.enumerate() {
        if let Ok(other) = other
            && decided(&other) != decided(&first)
        {
            return Err(Error::Internal(format!(
                "replica {} ended with (skipped, scale) {:?}, replica 0 with {:?}",
                peer + 1,
                decided(&other),
                decided(&first)
            )));
        }
    }
    Ok(first)
}
