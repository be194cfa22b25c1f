//! [`Mpi`]: one rank of a run, joined through [`MpiWorld::join`] (the run's identity checked
//! by broadcast), its sums by gather-and-add in rank order ([`Reduction::Exact`]) or
//! `MPI_Allreduce` ([`Reduction::Fast`]), and [`Mpi::broadcast_bytes`]; every wait under the
//! watchdog.

use std::time::{Duration, Instant};

use ::mpi::collective::SystemOperation;
use ::mpi::topology::SimpleCommunicator;
use ::mpi::traits::*;

use crate::error::ClusterError;
use crate::mpi::start::{MpiWorld, end_mpi, mark_refused};
use crate::mpi::watchdog::{Notes, Watch, complete, watches};
use crate::spec::RunSpec;
use crate::transport::{Reduction, Transport, sum_in_rank_order};

impl MpiWorld {
    /// Joins the run: rank 0 broadcasts `spec`'s identity, every rank compares it with its
    /// own, and the run starts only if every rank agrees. Bounded by the join timeout.
    ///
    /// # Errors
    ///
    /// [`ClusterError::RankRefused`] on every rank, naming the first rank that differs and
    /// the field (MPI stays up until [`end_mpi`](crate::end_mpi), which waits for every rank,
    /// so that each can say why before any ends);
    /// [`ClusterError::Config`] when `spec`'s world is not the job's.
    /// A rank that never arrives aborts the job (see [`Mpi`]).
    pub fn join(self, spec: &RunSpec, reduction: Reduction) -> Result<Mpi, ClusterError> {
        if spec.world != self.world {
            return Err(ClusterError::Config(format!(
                "the run is of {} processes and the MPI job of {}",
                spec.world, self.world
            )));
        }
        let mpi = Mpi {
            rank: self.rank,
            world: self.world,
            spec: spec.clone(),
            reduction,
            answered: 0,
            gathered: Vec::new(),
        };
        let deadline = Instant::now() + spec.timeouts.join;
        let ours = serde_json::to_vec(&spec.identity)
            .map_err(|e| ClusterError::Config(format!("the identity is not serializable: {e}")))?;
        let theirs = mpi.broadcast(0, &ours, deadline, "the join")?;
        let run: Vec<(String, String)> =
            serde_json::from_slice(&theirs).map_err(|e| ClusterError::Protocol {
                rank: 0,
                reason: format!("sent an unreadable identity: {e}"),
            })?;
        let difference = RunSpec::new(self.world, run).difference(&spec.identity);
        let mut refused = vec![0u8; self.world];
        let flag = [u8::from(difference.is_some())];
        let comm = SimpleCommunicator::world();
        ::mpi::request::scope(|scope| {
            let request = comm.immediate_all_gather_into(scope, &flag[..], &mut refused[..]);
            complete((mpi.rank, mpi.world), request, deadline, "the join", None);
        });
        let Some(first) = refused.iter().position(|&r| r != 0) else {
            return Ok(mpi);
        };
        let reason = difference.unwrap_or_default().into_bytes();
        let reason = mpi.broadcast(first, &reason, deadline, "the join")?;
        // MPI ends in `end_mpi`, once this rank has said why: all ranks together.
        mark_refused();
        Err(ClusterError::RankRefused {
            rank: first,
            reason: String::from_utf8_lossy(&reason).into_owned(),
        })
    }
}

/// One rank of a run over MPI, from [`MpiWorld::join`].
///
/// Waits: the join within the join timeout, the first step within 1.5x the step timeout, each
/// later step within the step timeout, counted from this rank's arrival. When one runs out,
/// rank 0 aborts the job naming every rank whose arrival it has not seen (`rank 2 did not
/// reach step 17 within 25 s`), or, when all arrived, the ranks that do not answer a ping
/// within 1 s; another rank names rank 0 in the same way, and when rank 0 answers, leaves the
/// naming to rank 0 for 3 s before it aborts on its own.
#[derive(Debug)]
pub struct Mpi {
    rank: usize,
    world: usize,
    spec: RunSpec,
    reduction: Reduction,
    /// Steps answered so far (the first one has a longer budget).
    answered: u64,
    /// The buffer `exact` gathers every rank's values into.
    gathered: Vec<f32>,
}

impl Mpi {
    /// How the sums are added.
    ///
    /// See [`MpiWorld`] for an example.
    pub fn reduction(&self) -> Reduction {
        self.reduction
    }

    /// Adds the next sums the other way. Every rank must switch at the same step.
    ///
    /// ```no_run
    /// # use burn_mpric_cluster::{MpiWorld, Reduction, RunSpec};
    /// let world = MpiWorld::init()?;
    /// let spec = RunSpec::new(world.world(), vec![]);
    /// let mut link = world.join(&spec, Reduction::Exact)?;
    /// link.set_reduction(Reduction::Fast);
    /// assert_eq!(link.reduction(), Reduction::Fast);
    /// # Ok::<(), burn_mpric_cluster::ClusterError>(())
    /// ```
    pub fn set_reduction(&mut self, reduction: Reduction) {
        self.reduction = reduction;
    }

    /// Rank `root`'s `bytes` on every rank (the others pass anything, their own are not
    /// used), within the step timeout: for what the processes must share besides sums, such
    /// as a port or a NCCL unique id.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Config`] when `root` is not a rank; [`ClusterError::Protocol`] when
    /// the root announces more than 64 MiB.
    ///
    /// ```no_run
    /// # use burn_mpric_cluster::{MpiWorld, Reduction, RunSpec, Transport};
    /// let world = MpiWorld::init()?;
    /// let spec = RunSpec::new(world.world(), vec![]);
    /// let link = world.join(&spec, Reduction::Exact)?;
    /// let id = link.broadcast_bytes(0, &[link.rank() as u8; 128])?;
    /// assert_eq!(id, [0u8; 128]);
    /// # Ok::<(), burn_mpric_cluster::ClusterError>(())
    /// ```
    pub fn broadcast_bytes(&self, root: usize, bytes: &[u8]) -> Result<Vec<u8>, ClusterError> {
        if root >= self.world {
            return Err(ClusterError::Config(format!(
                "rank {root} is not in a run of {} processes",
                self.world
            )));
        }
        let deadline = Instant::now() + self.step_allowance();
        self.broadcast(root, bytes, deadline, "a broadcast")
    }

    /// `bytes` of rank `root`, on every rank (each rank passes its own; only the root's
    /// count).
    fn broadcast(
        &self,
        root: usize,
        bytes: &[u8],
        deadline: Instant,
        what: &str,
    ) -> Result<Vec<u8>, ClusterError> {
        let comm = SimpleCommunicator::world();
        let process = comm.process_at_rank(root as i32);
        let mut len = [bytes.len() as u64];
        ::mpi::request::scope(|scope| {
            let request = process.immediate_broadcast_into(scope, &mut len[..]);
            complete((self.rank, self.world), request, deadline, what, None);
        });
        let mut buffer = if self.rank == root {
            bytes.to_vec()
        } else {
            let len = usize::try_from(len[0])
                .ok()
                .filter(|&l| l <= 64 << 20)
                .ok_or_else(|| ClusterError::Protocol {
                    rank: root,
                    reason: format!("announced {} bytes to broadcast", len[0]),
                })?;
            vec![0u8; len]
        };
        ::mpi::request::scope(|scope| {
            let request = process.immediate_broadcast_into(scope, &mut buffer[..]);
            complete((self.rank, self.world), request, deadline, what, None);
        });
        Ok(buffer)
    }

    /// The budget of the next step.
    fn step_allowance(&self) -> Duration {
        if self.answered == 0 {
            self.spec.timeouts.first_step()
        } else {
            self.spec.timeouts.step
        }
    }
}

impl Transport for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world(&self) -> usize {
        self.world
    }

    fn all_reduce(&mut self, step: u64, values: &[f32]) -> Result<Vec<f32>, ClusterError> {
        if values.len() > self.spec.max_values {
            return Err(ClusterError::Config(format!(
                "a step of {} values is more than the run's limit of {} (RunSpec::max_values)",
                values.len(),
                self.spec.max_values
            )));
        }
        let deadline = Instant::now() + self.step_allowance();
        let what = format!("step {step}");
        let comm = SimpleCommunicator::world();
        let mut notes = Notes::new(step, self.world);
        let summed = match self.reduction {
            Reduction::Exact => {
                // Kept between steps: a model's N buffers are not allocated anew each step.
                let mut gathered = std::mem::take(&mut self.gathered);
                gathered.resize(values.len() * self.world, 0.0);
                ::mpi::request::scope(|scope| {
                    let mut watch = Watch::post(scope, &comm, &mut notes);
                    let request = comm.immediate_all_gather_into(scope, values, &mut gathered[..]);
                    complete(
                        (self.rank, self.world),
                        request,
                        deadline,
                        &what,
                        Some(&mut watch),
                    );
                    watch.settle();
                });
                let sum = sum_in_rank_order(&gathered, values.len());
                self.gathered = gathered;
                sum
            }
            Reduction::Fast => {
                let mut sum = vec![0f32; values.len()];
                ::mpi::request::scope(|scope| {
                    let mut watch = Watch::post(scope, &comm, &mut notes);
                    let request = comm.immediate_all_reduce_into(
                        scope,
                        values,
                        &mut sum[..],
                        SystemOperation::sum(),
                    );
                    complete(
                        (self.rank, self.world),
                        request,
                        deadline,
                        &what,
                        Some(&mut watch),
                    );
                    watch.settle();
                });
                sum
            }
        };
        let mut watched = (0..self.world).filter(|&peer| watches(self.rank, peer));
        if let Some(peer) = watched.find(|&peer| notes.arrived[peer] != step) {
            return Err(ClusterError::Protocol {
                rank: peer,
                reason: format!(
                    "was at step {} when rank {} was at {step}",
                    notes.arrived[peer], self.rank
                ),
            });
        }
        self.answered += 1;
        Ok(summed)
    }

    fn finish(self: Box<Self>) -> Result<(), ClusterError> {
        let comm = SimpleCommunicator::world();
        let deadline = Instant::now() + self.spec.timeouts.reply();
        complete(
            (self.rank, self.world),
            comm.immediate_barrier(),
            deadline,
            "the end of the run",
            None,
        );
        end_mpi(0);
        Ok(())
    }
}
