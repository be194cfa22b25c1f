//! Running a recipe: the training loop (`train.rs`), one step's forward and backward pass
//! and how replicas combine it (`step.rs`), the progress lines (`progress.rs`) and reports
//! (`report.rs`) of a run, its replicas on their own threads (`ddp.rs`) or in several
//! processes (`processes.rs`), resuming from a checkpoint (`resume.rs`) and the output
//! folder's lock (`lock.rs`).

#[cfg(feature = "ddp")]
mod ddp;
pub(crate) mod grads;
pub(crate) mod history;
pub(crate) mod lock;
pub(crate) mod options;
pub(crate) mod processes;
pub(crate) mod progress;
pub(crate) mod report;
pub(crate) mod resume;
pub(crate) mod scaling;
pub(crate) mod step;
pub(crate) mod train;

use burn::tensor::backend::Backend;
use burn_mpric::MpDevice;

use crate::backend::{BackendTask, mp_device};
use crate::error::Error;
use crate::optim::with_optimizer;
use crate::recipe::{BackendName, Strategy};
use step::Peers;
use train::{Loop, Run};

pub use options::{Summary, TrainOptions};
pub(crate) use processes::MPI_NOT_BUILT;
pub use processes::{
    DEFAULT_COORDINATOR, DEFAULT_STEP_TIMEOUT, Engine, MAX_PROCESSES, MIN_STEP_TIMEOUT, Processes,
};
pub use train::train;

/// A run on its devices: one loop over all of them (`multi_device`, one device, or this
/// process's devices in a multi-process run), or one replica per device on its own thread
/// (`ddp`).
impl BackendTask for Run<'_> {
    type Output = Result<Summary, Error>;

    fn run<B: Backend>(self, device: B::Device, backend: BackendName) -> Self::Output {
        self.run_on::<B>(vec![device], backend)
    }

    fn run_on<B: Backend>(self, devices: Vec<B::Device>, backend: BackendName) -> Self::Output {
        let settings = self
            .plan
            .recipe
            .settings()
            .map_err(|e| e.in_file(&self.plan.label))?;
        let replicas = devices
            .into_iter()
            .map(|d| mp_device::<B>(d, settings.clone(), backend))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.in_file(&self.plan.label))?;
        // Several processes: each drives its devices from one thread, whatever the strategy.
        let peers = match self.link {
            Some(link) => Peers::Processes(link),
            None if replicas.len() > 1 && self.plan.recipe.strategy == Some(Strategy::Ddp) => {
                return ddp_train(self, replicas);
            }
            None => Peers::Local,
        };
        with_optimizer::<B, _>(
            &self.plan.recipe,
            Loop {
                run: self,
                replicas,
                peers,
                model: None,
            },
        )
    }
}

#[cfg(feature = "ddp")]
fn ddp_train<B: Backend>(run: Run<'_>, replicas: Vec<MpDevice<B>>) -> Result<Summary, Error> {
    ddp::train(run, replicas)
}

#[cfg(not(feature = "ddp"))]
fn ddp_train<B: Backend>(_: Run<'_>, _: Vec<MpDevice<B>>) -> Result<Summary, Error> {
    Err(Error::Internal(
        "strategy `ddp` needs the `ddp` feature of burn-mpric-train".into(),
    ))
}
