//! [`Mpi`]: the [`Transport`] over MPI (feature `mpi`, rsmpi over the system's OpenMPI or
//! MPICH): rank and world from the launcher, the run's identity checked by broadcast, sums by
//! gather-and-add in rank order ([`Reduction::Exact`]) or `MPI_Allreduce`
//! ([`Reduction::Fast`]), and a watchdog on every wait that aborts the whole run, naming the
//! rank that did not arrive.
//!
//! Every collective is started non-blocking and completed by polling with a deadline: MPI has
//! no timeouts, and a rank that is alive but stopped (SIGSTOP, a deadlock, a hung device)
//! would hold its peers inside `MPI_Allreduce` forever. A rank that dies is MPI's to handle:
//! `mpirun` and `srun` end the others.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use ::mpi::Threading;
use ::mpi::collective::SystemOperation;
use ::mpi::environment::Universe;
use ::mpi::request::{LocalScope, Request, Scope};
use ::mpi::topology::SimpleCommunicator;
use ::mpi::traits::*;

use crate::error::{ClusterError, ranks_text, seconds};
use crate::spec::RunSpec;
use crate::transport::{Reduction, Transport, sum_in_rank_order};

/// The MPI environment this process initialized; finalized by [`Mpi::finish`] or
/// [`end_mpi`], and only once.
static UNIVERSE: Mutex<Option<Universe>> = Mutex::new(None);

/// The tags of the watchdog's messages: a rank arrived at a step, a ping, its answer.
const ARRIVED: i32 = 0x4d50;
const PING: i32 = 0x4d51;
const PONG: i32 = 0x4d52;

/// How long a rank whose step timed out waits for the answers to its pings.
const PROBE: Duration = Duration::from_secs(1);

/// How long a wait polls MPI without pause before it starts to sleep between polls.
const SPIN: Duration = Duration::from_millis(10);

/// How long a rank whose step timed out, and whose rank 0 answers, waits for rank 0 to abort
/// the job naming the rank that does not.
const NAMING_GRACE: Duration = Duration::from_secs(3);

/// This process's place in an MPI job, before it joins a run: MPI initialized, rank and world
/// known.
///
/// ```no_run
/// use burn_mpric_cluster::{ClusterError, MpiWorld, Reduction, RunSpec, Transport};
///
/// // Run under `mpirun -np 2`.
/// let world = MpiWorld::init()?;
/// let spec = RunSpec::new(world.world(), vec![("seed".into(), "7".into())]);
/// let mut link = world.join(&spec, Reduction::Exact)?;
/// let sum = link.all_reduce(1, &[link.rank() as f32])?;
/// assert_eq!(sum, [1.0]);
/// Box::new(link).finish()?;
/// # Ok::<(), ClusterError>(())
/// ```
#[derive(Debug)]
pub struct MpiWorld {
    rank: usize,
    world: usize,
}

impl MpiWorld {
    /// Initializes MPI (or adopts it when the program already did) and reads this process's
    /// rank and the job's size from the launcher.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Config`] when MPI was already finalized.
    pub fn init() -> Result<Self, ClusterError> {
        if ::mpi::environment::is_finalized() {
            return Err(ClusterError::Config(
                "MPI was already finalized in this process".into(),
            ));
        }
        if !::mpi::environment::is_initialized() {
            // Calls come from whichever thread runs the step, one at a time.
            let (universe, _) = ::mpi::initialize_with_threading(Threading::Serialized)
                .ok_or_else(|| ClusterError::Config("MPI could not be initialized".into()))?;
            *UNIVERSE.lock().unwrap_or_else(|e| e.into_inner()) = Some(universe);
        }
        let comm = SimpleCommunicator::world();
        Ok(Self {
            rank: comm.rank() as usize,
            world: comm.size() as usize,
        })
    }

    /// This process's rank in the job.
    ///
    /// See [`MpiWorld`] for an example.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes in the job.
    ///
    /// See [`MpiWorld`] for an example.
    pub fn world(&self) -> usize {
        self.world
    }

    /// Joins the run: rank 0 broadcasts `spec`'s identity, every rank compares it with its
    /// own, and the run starts only if every rank agrees. Bounded by the join timeout.
    ///
    /// # Errors
    ///
    /// [`ClusterError::RankRefused`] on every rank, naming the first rank that differs and
    /// the field (MPI is then finalized: every rank exits on its own);
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
            mpi.complete(request, deadline, "the join", None);
        });
        let Some(first) = refused.iter().position(|&r| r != 0) else {
            return Ok(mpi);
        };
        let reason = difference.unwrap_or_default().into_bytes();
        let reason = mpi.broadcast(first, &reason, deadline, "the join")?;
        end_mpi(0);
        Err(ClusterError::RankRefused {
            rank: first,
            reason: String::from_utf8_lossy(&reason).into_owned(),
        })
    }

    /// Ends the whole job now with `code` (`MPI_Abort`): for a rank that cannot go on while
    /// the others would wait for it. Say why on stderr first.
    ///
    /// ```no_run
    /// burn_mpric_cluster::MpiWorld::abort(1);
    /// ```
    pub fn abort(code: i32) -> ! {
        SimpleCommunicator::world().abort(code)
    }
}

/// Ends MPI in this process, if it is still up: finalizes it after a clean run (`code` 0),
/// else aborts the job with `code`, so that no other rank waits for this one. A program that
/// initialized MPI through [`MpiWorld::init`] calls it once on the way out (the `mpric` CLI
/// does); after [`Mpi::finish`] or a refused join it does nothing.
///
/// ```
/// // Outside an MPI job, or once MPI has ended, nothing happens.
/// burn_mpric_cluster::end_mpi(0);
/// ```
pub fn end_mpi(code: i32) {
    let universe = UNIVERSE.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(universe) = universe {
        if code != 0 {
            MpiWorld::abort(code);
        }
        drop(universe);
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
            self.complete(request, deadline, what, None);
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
            self.complete(request, deadline, what, None);
        });
        Ok(buffer)
    }

    /// Polls `request` until it completes; at `deadline`, aborts the job with a line naming
    /// the ranks that did not arrive or do not answer (see [`Watch`]).
    fn complete<'a, D: ?Sized, S: Scope<'a>>(
        &self,
        mut request: Request<'a, D, S>,
        deadline: Instant,
        what: &str,
        mut watch: Option<&mut Watch<'a, '_>>,
    ) {
        let started = Instant::now();
        loop {
            match request.test() {
                Ok(_) => return,
                Err(pending) => request = pending,
            }
            if let Some(watch) = watch.as_deref_mut() {
                watch.poll();
            }
            let now = Instant::now();
            if now >= deadline {
                let allowed = deadline.saturating_duration_since(started);
                self.timed_out(what, allowed, watch.as_deref_mut());
            }
            // Non-blocking collectives progress only inside MPI calls: poll in a tight loop
            // for the first moments (as blocking MPI calls do), then every 50 us, so that a
            // slow peer does not cost a core.
            if now.duration_since(started) > SPIN {
                std::thread::sleep(Duration::from_micros(50));
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// A wait ran out: finds who is missing or silent and says so, or leaves that to rank 0
    /// for a moment, then aborts the job.
    fn timed_out(&self, what: &str, allowed: Duration, watch: Option<&mut Watch>) -> ! {
        let me = self.rank;
        let within = seconds(allowed);
        let line = match watch {
            None => format!("{what} did not complete within {within}"),
            Some(watch) => {
                let absent = watch.absent();
                let silent = watch.probe();
                if !absent.is_empty() {
                    format!(
                        "{} did not reach {what} within {within} (stopped, stuck or too slow); the run is aborted",
                        ranks_text(&absent)
                    )
                } else if !silent.is_empty() {
                    format!(
                        "{} did not finish {what} within {within} and does not answer (stopped or stuck); the run is aborted",
                        ranks_text(&silent)
                    )
                } else if me == 0 {
                    format!("{what} did not complete within {within} though every rank answers")
                } else {
                    // Rank 0 answers: it finds the rank that does not and says so first.
                    let until = Instant::now() + NAMING_GRACE;
                    while Instant::now() < until {
                        watch.poll();
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    format!(
                        "{what} did not complete within {within}: rank 0 answers, another rank does not"
                    )
                }
            }
        };
        // One write, so that it does not interleave with the other ranks' lines.
        let line = format!("error: rank {me} of {}: {line}\n", self.world);
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        MpiWorld::abort(1)
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

/// Whether `rank` exchanges watchdog notes with `peer`: rank 0 with every other rank, the
/// others with rank 0.
fn watches(rank: usize, peer: usize) -> bool {
    peer != rank && (rank == 0 || peer == 0)
}

/// The buffers of one step's [`Watch`], which must outlive the step's requests.
struct Notes {
    step: u64,
    arrived: Vec<u64>,
    pings: Vec<u64>,
    pongs: Vec<u64>,
}

impl Notes {
    fn new(step: u64, world: usize) -> Self {
        Self {
            step,
            arrived: vec![u64::MAX; world],
            pings: vec![0; world],
            pongs: vec![0; world],
        }
    }
}

/// The watchdog's messages of one step, between rank 0 and every other rank: each rank
/// tells the other side when it arrives at the step, and answers a ping while it waits. A
/// rank whose step timed out knows who never arrived; it pings the others and learns who
/// arrived but no longer answers (stopped inside the collective).
struct Watch<'a, 'b> {
    scope: &'b LocalScope<'a>,
    note: &'a u64,
    /// Per watched peer, its arrival note still awaited (`None` once it came).
    arrivals: Vec<(usize, Option<Request<'a, u64, &'b LocalScope<'a>>>)>,
    pings: Vec<(usize, Option<Request<'a, u64, &'b LocalScope<'a>>>)>,
    pongs: Option<&'a mut [u64]>,
    sent: Vec<Request<'a, u64, &'b LocalScope<'a>>>,
}

impl<'a, 'b> Watch<'a, 'b> {
    fn post(scope: &'b LocalScope<'a>, comm: &SimpleCommunicator, notes: &'a mut Notes) -> Self {
        let rank = comm.rank() as usize;
        let Notes {
            step,
            arrived,
            pings,
            pongs,
        } = notes;
        let mut watch = Self {
            scope,
            note: step,
            arrivals: Vec::new(),
            pings: Vec::new(),
            pongs: Some(pongs),
            sent: Vec::new(),
        };
        let slots = arrived.iter_mut().zip(pings.iter_mut()).enumerate();
        for (peer, (arrival, ping)) in slots.filter(|(peer, _)| watches(rank, *peer)) {
            let process = comm.process_at_rank(peer as i32);
            watch
                .sent
                .push(process.immediate_send_with_tag(scope, watch.note, ARRIVED));
            watch.arrivals.push((
                peer,
                Some(process.immediate_receive_into_with_tag(scope, arrival, ARRIVED)),
            ));
            watch.pings.push((
                peer,
                Some(process.immediate_receive_into_with_tag(scope, ping, PING)),
            ));
        }
        watch
    }

    /// Takes in the notes that came, and answers pings.
    fn poll(&mut self) {
        for (_, slot) in &mut self.arrivals {
            if let Some(request) = slot.take()
                && let Err(pending) = request.test()
            {
                *slot = Some(pending);
            }
        }
        let comm = SimpleCommunicator::world();
        for (peer, slot) in &mut self.pings {
            if let Some(request) = slot.take() {
                match request.test() {
                    Ok(_) => {
                        let process = comm.process_at_rank(*peer as i32);
                        self.sent
                            .push(process.immediate_send_with_tag(self.scope, self.note, PONG));
                    }
                    Err(pending) => *slot = Some(pending),
                }
            }
        }
    }

    /// The watched peers that never arrived at this step.
    fn absent(&mut self) -> Vec<usize> {
        self.poll();
        self.arrivals
            .iter()
            .filter(|(_, awaited)| awaited.is_some())
            .map(|(peer, _)| *peer)
            .collect()
    }

    /// Pings every watched peer and returns those that do not answer within a second.
    fn probe(&mut self) -> Vec<usize> {
        let Some(pongs) = self.pongs.take() else {
            return Vec::new();
        };
        let comm = SimpleCommunicator::world();
        let peers: Vec<usize> = self.arrivals.iter().map(|(peer, _)| *peer).collect();
        let mut waiting = Vec::new();
        for (peer, pong) in pongs.iter_mut().enumerate() {
            if !peers.contains(&peer) {
                continue;
            }
            let process = comm.process_at_rank(peer as i32);
            self.sent
                .push(process.immediate_send_with_tag(self.scope, self.note, PING));
            waiting.push((
                peer,
                Some(process.immediate_receive_into_with_tag(self.scope, pong, PONG)),
            ));
        }
        let until = Instant::now() + PROBE;
        while Instant::now() < until && waiting.iter().any(|(_, r)| r.is_some()) {
            self.poll();
            for (_, slot) in &mut waiting {
                if let Some(request) = slot.take()
                    && let Err(pending) = request.test()
                {
                    *slot = Some(pending);
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let silent = waiting
            .iter()
            .filter(|(_, r)| r.is_some())
            .map(|(peer, _)| *peer)
            .collect();
        // The job is aborted next: the requests still open end with it.
        std::mem::forget(waiting);
        silent
    }

    /// Completes the step's notes once its collective has completed (every rank arrived):
    /// the notes in flight are waited for, the pings never sent are cancelled.
    fn settle(mut self) {
        self.poll();
        for request in self.sent {
            request.wait_without_status();
        }
        for (_, request) in self.arrivals {
            if let Some(request) = request {
                request.wait_without_status();
            }
        }
        for (_, request) in self.pings {
            if let Some(request) = request {
                request.cancel();
                request.wait_without_status();
            }
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
                    self.complete(request, deadline, &what, Some(&mut watch));
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
                    self.complete(request, deadline, &what, Some(&mut watch));
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
        self.complete(
            comm.immediate_barrier(),
            deadline,
            "the end of the run",
            None,
        );
        end_mpi(0);
        Ok(())
    }
}
