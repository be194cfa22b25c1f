//! Start-up and the way out: MPI initialized (or adopted) with this process's rank and the
//! job's size from the launcher ([`MpiWorld`]), and finalized or aborted once ([`end_mpi`]).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use ::mpi::Threading;
use ::mpi::environment::Universe;
use ::mpi::topology::SimpleCommunicator;
use ::mpi::traits::*;

use crate::error::ClusterError;

/// The MPI environment this process initialized; finalized by [`Mpi::finish`](crate::Transport::finish) or
/// [`end_mpi`], and only once.
static UNIVERSE: Mutex<Option<Universe>> = Mutex::new(None);

/// Set by a join every rank refused ([`mark_refused`]): [`end_mpi`] then waits for every rank
/// before it ends, rather than aborting.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// Marks this process's join as refused by every rank: each will say why and end with the
/// refusal's exit code, and none may end before the others have said it (a launcher stops the
/// other ranks when one ends with an error, mid-sentence).
pub(crate) fn mark_refused() {
    REFUSED.store(true, Ordering::SeqCst);
}

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
    pub(super) rank: usize,
    pub(super) world: usize,
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
/// else aborts the job with `code`, so that no other rank waits for this one. After a join
/// every rank refused ([`MpiWorld::join`]'s `RankRefused`), it waits for every rank to get
/// here, then finalizes: each has said why before any ends. A program that initialized MPI
/// through [`MpiWorld::init`] calls it once on the way out, after reporting its error (the
/// `mpric` CLI does); after [`Mpi::finish`](crate::Transport::finish) it does nothing.
///
/// ```
/// // Outside an MPI job, or once MPI has ended, nothing happens.
/// burn_mpric_cluster::end_mpi(0);
/// ```
pub fn end_mpi(code: i32) {
    let universe = UNIVERSE.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(universe) = universe {
        if REFUSED.swap(false, Ordering::SeqCst) {
            universe.world().barrier();
        } else if code != 0 {
            MpiWorld::abort(code);
        }
        drop(universe);
    }
}
