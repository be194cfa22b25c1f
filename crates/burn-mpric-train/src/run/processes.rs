//! A run of several processes (`mpirun -np N mpric train`, `srun mpric train`, `mpric train
//! --world N --rank R`, or `mpric launch N`): each process drives its own devices as one loop
//! (its share of every batch, one shard per device), and each step the processes sum their
//! gradients, scaled loss and correct count through a burn-mpric-cluster [`Transport`] (MPI
//! or the TCP star: the step does not know which), so that every process steps the same
//! model with the same gradients and takes the same skip decision. Rank 0 is the only
//! process that writes into the output folder.

use std::sync::Mutex;
use std::time::Duration;

use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Int, Tensor, TensorData};
use burn_mpric::scale::{DataParallel, StepError};
use burn_mpric::{MixedPrecision, MpDevice};
use burn_mpric_cluster::{ClusterError, Coordinator, Reduction, RunSpec, Tcp, Timeouts, Transport};
use serde_json::Value;

use crate::checkpoint::Checkpoint;
use crate::checkpoint::manifest::{FileDigest, MANIFEST_FILE};
use crate::error::Error;
use crate::models::Model;
use crate::optim::Ad;
use crate::plan::Plan;
use crate::recipe::document::field_path;
use crate::run::grads::{StepGrads, read_count};

/// Where the coordinator listens when no address is given: loopback, so that nothing off
/// this machine can reach it.
pub const DEFAULT_COORDINATOR: &str = "127.0.0.1:29610";

/// The most processes a run may have: the coordinator holds a connection and a thread's
/// handshake per process.
pub const MAX_PROCESSES: usize = 1024;

/// The shortest [`Processes::step_timeout`].
pub const MIN_STEP_TIMEOUT: Duration = Duration::from_millis(100);

/// The default for [`Processes::step_timeout`]: with it, a run that lost a process ends on
/// every other one within 55 s (a process that never joins: 50 s after rank 0 started
/// waiting, 55 s after another process did).
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(25);

/// The engine that carries a multi-process run's sums.
///
/// ```
/// use burn_mpric_train::{Engine, Processes};
/// use burn_mpric_cluster::Reduction;
///
/// assert_eq!(Processes::new(2, 1)?.engine, Engine::Tcp);
/// assert_eq!(Engine::Mpi(Reduction::Fast).to_string(), "mpi (fast)");
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Engine {
    /// The TCP star (`--world`/`--rank`, `mpric launch`, `srun` without MPI): rank 0 hosts
    /// the coordinator at [`Processes::coordinator`]; sums are added in rank order.
    #[default]
    Tcp,
    /// MPI (`mpirun`, `srun` with PMI/PMIx; feature `mpi`): rank and world from the
    /// launcher, sums by the given reduction.
    Mpi(Reduction),
}

impl Engine {
    /// How this engine adds the ranks' buffers.
    ///
    /// ```
    /// use burn_mpric_train::Engine;
    /// use burn_mpric_cluster::Reduction;
    ///
    /// assert_eq!(Engine::Tcp.reduction(), Reduction::Exact);
    /// ```
    pub fn reduction(&self) -> Reduction {
        match self {
            Engine::Tcp => Reduction::Exact,
            Engine::Mpi(reduction) => *reduction,
        }
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Engine::Tcp => f.write_str("tcp (exact)"),
            Engine::Mpi(reduction) => write!(f, "mpi ({reduction})"),
        }
    }
}

/// This process's place in a multi-process run.
///
/// Every process runs the same recipe with the same `world` and `coordinator`, each with its
/// own `rank`. Rank 0 listens on `coordinator` (its own thread) and writes the run's metrics,
/// plots and checkpoints; the others write nothing. The `local_world` processes of one machine
/// (`mpric launch` sets them) split the recipe's `backend.devices` between them, in the order
/// of their `local_rank`.
///
/// ```
/// use burn_mpric_train::Processes;
///
/// let p = Processes::new(2, 1)?;
/// assert_eq!(p.coordinator, "127.0.0.1:29610");
/// assert!(!p.is_writer());
/// assert!(Processes::new(2, 2).is_err());
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Processes {
    /// The number of processes.
    pub world: usize,
    /// This process's rank, `0..world`.
    pub rank: usize,
    /// `host:port` of the coordinator, which rank 0 listens on.
    pub coordinator: String,
    /// The longest one step may take on any process, rank 0's evaluation and checkpoint
    /// included; a process silent for longer is given up. Joining may take twice as long.
    pub step_timeout: Duration,
    /// This process's index among the processes of its machine, `0..local_world`.
    pub local_rank: usize,
    /// The number of processes on this machine that split `backend.devices` (1: this
    /// process drives all of them).
    pub local_world: usize,
    /// What carries the sums.
    pub engine: Engine,
}

impl Processes {
    /// Rank `rank` of `world` processes, with the default coordinator address and timeout.
    ///
    /// # Errors
    ///
    /// [`Error::Usage`] when `world` is 0 or above [`MAX_PROCESSES`], or `rank` is not below
    /// it.
    ///
    /// See [`Processes`] for an example.
    pub fn new(world: usize, rank: usize) -> Result<Self, Error> {
        if world == 0 || world > MAX_PROCESSES {
            return Err(Error::Usage(format!(
                "--world {world}: a run has 1 to {MAX_PROCESSES} processes"
            )));
        }
        if rank >= world {
            return Err(Error::Usage(format!(
                "--rank {rank}: a run of {world} processes has ranks 0 to {}",
                world - 1
            )));
        }
        Ok(Self {
            world,
            rank,
            coordinator: DEFAULT_COORDINATOR.into(),
            step_timeout: DEFAULT_STEP_TIMEOUT,
            local_rank: 0,
            local_world: 1,
            engine: Engine::Tcp,
        })
    }

    /// The same process as `local_rank` of the `local_world` processes on its machine,
    /// which split the recipe's devices.
    ///
    /// # Errors
    ///
    /// [`Error::Usage`] when `local_rank` is not below `local_world`, or `local_world` is
    /// above `world`.
    ///
    /// ```
    /// use burn_mpric_train::Processes;
    ///
    /// let p = Processes::new(4, 3)?.on_machine(1, 2)?;
    /// assert_eq!(p.own_devices(&[0, 1, 2, 3])?, [2, 3]);
    /// assert!(p.own_devices(&[0, 1, 2]).unwrap_err().to_string().contains("multiple of 2"));
    /// assert_eq!(p.own_devices(&[0])?, [0], "one device is shared");
    /// assert!(Processes::new(2, 0)?.on_machine(0, 3).is_err());
    /// # Ok::<(), burn_mpric_train::Error>(())
    /// ```
    pub fn on_machine(mut self, local_rank: usize, local_world: usize) -> Result<Self, Error> {
        if local_world == 0 || local_world > self.world || local_rank >= local_world {
            return Err(Error::Usage(format!(
                "--local-rank {local_rank} --local-world {local_world}: expected a local rank below a local world of 1 to {} (the run's processes)",
                self.world
            )));
        }
        self.local_rank = local_rank;
        self.local_world = local_world;
        Ok(self)
    }

    /// This process's share of the recipe's devices `all`: all of them when it is alone on
    /// its machine, the one device when there is one (the processes share it: a CPU), else
    /// the `local_rank`-th of `local_world` equal slices.
    ///
    /// See [`Processes::on_machine`] for an example.
    ///
    /// # Errors
    ///
    /// [`Error::Usage`] when the devices do not split evenly.
    pub fn own_devices(&self, all: &[usize]) -> Result<Vec<usize>, Error> {
        if self.local_rank >= self.local_world {
            return Err(Error::Usage(format!(
                "local rank {} of a local world of {}: expected a rank below it",
                self.local_rank, self.local_world
            )));
        }
        if all.len() == 1 {
            return Ok(all.to_vec());
        }
        if !all.len().is_multiple_of(self.local_world) {
            return Err(Error::Usage(format!(
                "the {} processes on this machine split backend.devices {all:?}: its length must be a multiple of {}",
                self.local_world, self.local_world
            )));
        }
        let share = all.len() / self.local_world;
        Ok(all[self.local_rank * share..][..share].to_vec())
    }

    /// Errors unless every process's `devices` each get at least one sample of a batch of
    /// `batch_size`.
    ///
    /// ```
    /// use burn_mpric_train::Processes;
    ///
    /// let p = Processes::new(4, 0)?;
    /// assert!(p.fits(2, 8).is_ok());
    /// assert!(p.fits(2, 7).unwrap_err().to_string().contains("batch_size of at least 8"));
    /// # Ok::<(), burn_mpric_train::Error>(())
    /// ```
    pub fn fits(&self, devices: usize, batch_size: usize) -> Result<(), Error> {
        let replicas = self.world.saturating_mul(devices.max(1));
        if replicas > batch_size {
            return Err(Error::Usage(format!(
                "--world {}: {} processes of {} device(s) need a batch_size of at least {replicas} (one sample per device), the recipe has {batch_size}",
                self.world,
                self.world,
                devices.max(1)
            )));
        }
        Ok(())
    }

    /// Whether this process writes the run's files (rank 0).
    ///
    /// See [`Processes`] for an example.
    pub fn is_writer(&self) -> bool {
        self.rank == 0
    }

    /// The waits of the run: a process that never joins is given up after twice the step
    /// timeout, one that stops answering after the step timeout.
    ///
    /// ```
    /// use std::time::Duration;
    /// use burn_mpric_train::Processes;
    ///
    /// let t = Processes::new(2, 0)?.timeouts();
    /// assert_eq!((t.step, t.join), (Duration::from_secs(25), Duration::from_secs(50)));
    /// # Ok::<(), burn_mpric_train::Error>(())
    /// ```
    pub fn timeouts(&self) -> Timeouts {
        Timeouts::new(self.step_timeout)
    }

    fn error(&self, source: ClusterError) -> Error {
        Error::Cluster {
            rank: self.rank,
            world: self.world,
            source,
        }
    }
}

/// This process's connection to the run, over whichever engine carries it.
pub(crate) struct Link {
    processes: Processes,
    /// `None` once a step failed: its connection is closed.
    parallel: Mutex<Option<DataParallel>>,
}

/// Rank 0's coordinator of the TCP star, listening from the start of the process (the join
/// timeout counts from there) until the run's identity is known.
pub(crate) struct Listening(Option<Coordinator>);

impl Listening {
    /// On rank 0 of a TCP run, binds the coordinator's address; elsewhere, nothing.
    pub(crate) fn bind(processes: &Processes) -> Result<Self, Error> {
        if !processes.is_writer() || processes.engine != Engine::Tcp {
            return Ok(Self(None));
        }
        let mut spec = RunSpec::new(processes.world, Vec::new());
        spec.timeouts = processes.timeouts();
        Coordinator::bind(&processes.coordinator, spec)
            .map(|c| Self(Some(c)))
            .map_err(|e| processes.error(e))
    }
}

impl Link {
    /// Joins the run: returns once every process has joined with the same `identity`, or
    /// with the reason the run does not start.
    pub(crate) fn join(
        processes: &Processes,
        listening: Listening,
        identity: Vec<(String, String)>,
    ) -> Result<Self, Error> {
        let mut spec = RunSpec::new(processes.world, identity);
        spec.timeouts = processes.timeouts();
        let failed = |e| processes.error(e);
        let transport: Box<dyn Transport> = match processes.engine {
            Engine::Tcp => Box::new(
                Tcp::join(listening.0, &processes.coordinator, processes.rank, &spec)
                    .map_err(failed)?,
            ),
            Engine::Mpi(reduction) => join_mpi(&spec, reduction).map_err(failed)?,
        };
        Ok(Self {
            processes: processes.clone(),
            parallel: Mutex::new(Some(DataParallel::new(transport))),
        })
    }

    /// Says this process is done and waits for the others.
    pub(crate) fn finish(self) -> Result<(), Error> {
        let parallel =
            self.parallel.into_inner().ok().flatten().ok_or_else(|| {
                Error::Internal("the connection was closed by a failed step".into())
            })?;
        match parallel.finish() {
            Ok(()) => Ok(()),
            Err(StepError::Transport(e)) => Err(self.processes.error(e)),
            Err(e) => Err(Error::Internal(e.to_string())),
        }
    }

    /// This process's rank and the number of processes.
    pub(crate) fn place(&self) -> (usize, usize) {
        (self.processes.rank, self.processes.world)
    }

    /// This process's gradients, scaled loss and correct count for `step`, summed with every
    /// other process's: the gradients at their parameters' dtypes (`forward_backward` casts
    /// each shard's before adding them, as burn-collective sums them in one process), the loss
    /// at f32.
    pub(crate) fn sum<B: Backend>(
        &self,
        step: u64,
        model: &Model<Ad<B>>,
        device: &MpDevice<B>,
        own: StepGrads<B>,
    ) -> Result<StepGrads<B>, Error> {
        // The loss and the count travel after the gradients, read with them.
        let loss = own.scaled_loss.inner().cast(FloatDType::F32).mean();
        let own_correct = own.correct.map(read_count);
        let correct = own_correct.unwrap_or(0) as f32;
        let correct = TensorData::new(vec![correct], [1]);
        let correct = Tensor::<MixedPrecision<B>, 1>::from_data(correct, device);
        let mut held = self
            .parallel
            .lock()
            .map_err(|_| Error::Internal("a step failed while it held the connection".into()))?;
        let parallel = held
            .as_mut()
            .ok_or_else(|| Error::Internal("the connection was closed by a failed step".into()))?;
        let (grads, extra) = match parallel.sum_grads_with(model, own.grads, vec![loss, correct]) {
            Ok(summed) => summed,
            Err(StepError::Transport(e)) => {
                *held = None;
                return Err(self.processes.error(e));
            }
            Err(e) => return Err(Error::Step { step, source: e }),
        };
        let [loss, correct] = extra[..] else {
            return Err(Error::Internal("the summed step has no loss".into()));
        };
        let data = TensorData::new(vec![loss], [1]);
        let scaled_loss = Tensor::<Ad<B>, 1>::from_data(data, (device, DType::F32));
        Ok(StepGrads {
            grads,
            scaled_loss,
            correct: own_correct.map(|_| {
                let count = TensorData::new(vec![correct as i64], [1]);
                Tensor::<Ad<B>, 1, Int>::from_data(count, device)
            }),
        })
    }
}

#[cfg(feature = "mpi")]
fn join_mpi(spec: &RunSpec, reduction: Reduction) -> Result<Box<dyn Transport>, ClusterError> {
    let world = burn_mpric_cluster::MpiWorld::init()?;
    Ok(Box::new(world.join(spec, reduction)?))
}

#[cfg(not(feature = "mpi"))]
fn join_mpi(_: &RunSpec, _: Reduction) -> Result<Box<dyn Transport>, ClusterError> {
    Err(ClusterError::Config(MPI_NOT_BUILT.into()))
}

/// Why an MPI run cannot start in an `mpric` built without the feature.
pub(crate) const MPI_NOT_BUILT: &str = "this mpric is built without MPI: build it with `--features mpi` (needs an MPI library such as libopenmpi-dev, and libclang-dev), or start the processes with `mpric launch N` or --world/--rank";

/// What every process of a run must agree on, field by field: the recipe (its output folder
/// aside: only rank 0 writes there), the data it loaded, the checkpoint it resumes from, the
/// step it stops at (`--until`), its number of devices and the program's version.
pub(crate) fn identity(
    plan: &Plan,
    resumed: Option<&Checkpoint>,
    until: Option<u64>,
    devices_per_process: usize,
    reduction: Reduction,
) -> Result<Vec<(String, String)>, Error> {
    let recipe = plan.recipe.explicit().map_err(|e| e.in_file(&plan.label))?;
    let mut value = serde_json::to_value(&recipe)
        .map_err(|e| Error::Internal(format!("recipe is not serializable: {e}")))?;
    if let Value::Object(map) = &mut value {
        map.remove("output");
    }
    let mut fields = Vec::new();
    flatten("", &value, &mut fields);
    fields.push((
        "data (SHA-256)".into(),
        plan.data
            .digest()
            .map_or("built in".to_string(), |d| d.sha256.clone()),
    ));
    let resumed = match resumed {
        None => "none (a new run)".to_string(),
        // Its manifest lists every file's SHA-256: two copies that differ differ here.
        Some(found) => {
            let path = found.dir.join(MANIFEST_FILE);
            let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
            let digest = FileDigest::of(&bytes).sha256;
            format!("step {} (manifest SHA-256 {})", found.step, &digest[..16])
        }
    };
    fields.push(("the checkpoint resumed".into(), resumed));
    fields.push((
        "devices per process".into(),
        devices_per_process.to_string(),
    ));
    fields.push((
        "--until".into(),
        until.map_or("not given".to_string(), |u| u.to_string()),
    ));
    fields.push(("--reduce".into(), reduction.to_string()));
    fields.push(("mpric version".into(), env!("CARGO_PKG_VERSION").into()));
    Ok(fields)
}

/// `value`'s leaves as (dotted path, JSON text).
fn flatten(path: &str, value: &Value, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                flatten(&field_path(path, key), v, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                flatten(&format!("{path}[{i}]"), v, out);
            }
            if items.is_empty() {
                out.push((path.to_string(), "[]".into()));
            }
        }
        leaf => out.push((path.to_string(), leaf.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Recipe;

    #[test]
    fn the_identity_names_recipe_fields_by_path_and_leaves_the_output_out() {
        let mut recipe = Recipe::example();
        let plan = Plan::new(recipe.clone(), "r").unwrap();
        let fields = identity(&plan, None, None, 1, Reduction::Exact).unwrap();
        let find = |key: &str| {
            fields
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(find("seed"), Some(recipe.seed.to_string()));
        assert!(find("output").is_none());
        assert_eq!(find("the checkpoint resumed").unwrap(), "none (a new run)");

        recipe.output = "elsewhere".into();
        let moved = identity(
            &Plan::new(recipe.clone(), "r").unwrap(),
            None,
            None,
            1,
            Reduction::Exact,
        )
        .unwrap();
        assert_eq!(
            moved, fields,
            "the output folder may differ between machines"
        );
        let seed = recipe.seed;
        recipe.seed += 1;
        let other = identity(
            &Plan::new(recipe, "r").unwrap(),
            None,
            None,
            1,
            Reduction::Exact,
        )
        .unwrap();
        assert_eq!(
            RunSpec::new(2, fields).difference(&other).unwrap(),
            format!("`seed` is {seed} in the run and {} here", seed + 1)
        );
    }
}
