//! A run of several processes (`mpric train --world N --rank R`, or `mpric launch N`): each
//! process drives its own devices as one loop (its share of every batch, one shard per
//! device), and each step the processes sum their gradients, scaled loss and correct count
//! through burn-mpric-cluster, so that every process steps the same model with the same
//! gradients and takes the same skip decision. Rank 0 hosts the coordinator on a thread and
//! is the only process that writes into the output folder.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use burn::optim::GradientsParams;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Tensor, TensorData};
use burn_mpric::MpDevice;
use burn_mpric::scale::FlatGrads;
use burn_mpric_cluster::{ClusterError, Coordinator, RunSpec, Timeouts, Worker};
use serde_json::Value;

use crate::checkpoint::Checkpoint;
use crate::checkpoint::manifest::{FileDigest, MANIFEST_FILE};
use crate::error::Error;
use crate::models::Model;
use crate::optim::Ad;
use crate::plan::Plan;
use crate::recipe::document::field_path;
use crate::run::grads::StepGrads;

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

/// This process's connection to the run: its worker, and on rank 0 the coordinator's thread.
pub(crate) struct Link {
    processes: Processes,
    /// `None` once a step failed: its connection is closed.
    worker: Mutex<Option<Worker>>,
    coordinator: Mutex<Option<JoinHandle<Result<u64, ClusterError>>>>,
}

/// Rank 0's coordinator, listening from the start of the process (the join timeout counts
/// from there) until the run's identity is known.
pub(crate) struct Listening(Option<Coordinator>);

impl Listening {
    /// On rank 0, binds the coordinator's address; on the others, nothing.
    pub(crate) fn bind(processes: &Processes) -> Result<Self, Error> {
        if !processes.is_writer() {
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
    /// Joins the run (rank 0 first starts its coordinator, bound by `listening`): returns
    /// once every process has joined with the same `identity`, or with the reason the run
    /// does not start.
    pub(crate) fn join(
        processes: &Processes,
        listening: Listening,
        identity: Vec<(String, String)>,
    ) -> Result<Self, Error> {
        let mut spec = RunSpec::new(processes.world, identity);
        spec.timeouts = processes.timeouts();
        let mut address = processes.coordinator.clone();
        let coordinator = listening.0.map(|mut coordinator| {
            coordinator.set_identity(spec.identity.clone());
            address = own_address(coordinator.local_addr());
            std::thread::spawn(move || coordinator.run())
        });
        let worker =
            Worker::join(&address, processes.rank, &spec).map_err(|e| processes.error(e))?;
        Ok(Self {
            processes: processes.clone(),
            worker: Mutex::new(Some(worker)),
            coordinator: Mutex::new(coordinator),
        })
    }

    /// Says this process is done and waits for the others (and, on rank 0, the coordinator).
    pub(crate) fn finish(self) -> Result<(), Error> {
        let Self {
            processes,
            worker,
            coordinator,
        } = self;
        let worker =
            worker.into_inner().ok().flatten().ok_or_else(|| {
                Error::Internal("the connection was closed by a failed step".into())
            })?;
        if let Err(e) = worker.finish() {
            settle(&coordinator);
            return Err(processes.error(e));
        }
        let coordinator = coordinator.into_inner().ok().flatten();
        if let Some(coordinator) = coordinator {
            match coordinator.join() {
                Ok(result) => result.map(|_| ()).map_err(|e| processes.error(e))?,
                Err(_) => return Err(Error::Internal("the coordinator's thread panicked".into())),
            }
        }
        Ok(())
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
        let failed = |e: burn_mpric::scale::StepError| Error::Step { step, source: e };
        let flat = FlatGrads::new(model, own.grads);
        // The loss travels after the gradients, read with them.
        let loss = own.scaled_loss.inner().cast(FloatDType::F32).mean();
        let mut values = flat.read_with(vec![loss]).map_err(failed)?;
        values.push(own.correct.unwrap_or(0) as f32);
        let mut held = self
            .worker
            .lock()
            .map_err(|_| Error::Internal("a step failed while it held the connection".into()))?;
        let worker = held
            .as_mut()
            .ok_or_else(|| Error::Internal("the connection was closed by a failed step".into()))?;
        let mut summed = match worker.all_reduce(step, &values) {
            Ok(summed) => summed,
            Err(e) => {
                // Closed first, so that rank 0's coordinator, which waits for every rank to
                // close before it returns, is not held up by this one.
                *held = None;
                drop(held);
                settle(&self.coordinator);
                return Err(self.processes.error(e));
            }
        };
        let (Some(correct), Some(loss)) = (summed.pop(), summed.pop()) else {
            return Err(Error::Internal("the summed step has no loss".into()));
        };
        let grads: GradientsParams = flat.unflatten(&summed).map_err(failed)?;
        let data = TensorData::new(vec![loss], [1]);
        let scaled_loss = Tensor::<Ad<B>, 1>::from_data(data, (device, DType::F32));
        Ok(StepGrads {
            grads,
            scaled_loss,
            correct: own.correct.map(|_| correct as i64),
        })
    }
}

/// On rank 0, waits (a few seconds at most) until the coordinator has told the other
/// processes why the run stopped and closed their connections: a process that exits first
/// resets them, and a reset may discard what they have not read yet.
fn settle(coordinator: &Mutex<Option<JoinHandle<Result<u64, ClusterError>>>>) {
    let Ok(guard) = coordinator.lock() else {
        return;
    };
    if let Some(handle) = guard.as_ref() {
        let until = Instant::now() + Duration::from_secs(5);
        while !handle.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The address rank 0's own worker reaches its coordinator at: the one it listens on, with a
/// wildcard (`0.0.0.0`, `[::]`) replaced by loopback.
fn own_address(listening: SocketAddr) -> String {
    let mut addr = listening;
    if addr.ip().is_unspecified() {
        addr.set_ip(if addr.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    addr.to_string()
}

/// What every process of a run must agree on, field by field: the recipe (its output folder
/// aside: only rank 0 writes there), the data it loaded, the checkpoint it resumes from, the
/// step it stops at (`--until`), its number of devices and the program's version.
pub(crate) fn identity(
    plan: &Plan,
    resumed: Option<&Checkpoint>,
    until: Option<u64>,
    devices_per_process: usize,
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
        let fields = identity(&plan, None, None, 1).unwrap();
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
        let moved = identity(&Plan::new(recipe.clone(), "r").unwrap(), None, None, 1).unwrap();
        assert_eq!(
            moved, fields,
            "the output folder may differ between machines"
        );
        let seed = recipe.seed;
        recipe.seed += 1;
        let other = identity(&Plan::new(recipe, "r").unwrap(), None, None, 1).unwrap();
        assert_eq!(
            RunSpec::new(2, fields).difference(&other).unwrap(),
            format!("`seed` is {seed} in the run and {} here", seed + 1)
        );
    }

    #[test]
    fn rank_zero_reaches_a_wildcard_listener_on_loopback() {
        assert_eq!(own_address("0.0.0.0:7".parse().unwrap()), "127.0.0.1:7");
        assert_eq!(own_address("10.1.2.3:7".parse().unwrap()), "10.1.2.3:7");
    }
}
