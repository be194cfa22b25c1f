//! The transports of burn-mpric's multi-process data-parallel training, behind one trait:
//! [`Transport`] (one rank's `all_reduce` of a flat f32 buffer per step, and `finish`). The
//! step code holds a `Box<dyn Transport>` and never knows which engine carries its sums.
//!
//! - [`Mpi`] (feature `mpi`): the engine of clusters. `mpirun` and `srun` start the
//!   processes and give each its rank; MPI picks the algorithm and the interconnect. The sum
//!   is gathered and added in rank order ([`Reduction::Exact`], the default) or left to
//!   `MPI_Allreduce` ([`Reduction::Fast`]). A watchdog bounds every wait and aborts the job,
//!   naming the rank that did not arrive.
//! - [`Tcp`]: a star over TCP that needs nothing installed: a [`Coordinator`] (rank 0's
//!   process runs it on a thread) and one [`Worker`] per rank. Rank 0 receives every rank's
//!   buffer and sends the sum back, so it carries 2(N-1) buffers per step.
//!
//! What both guarantee, whatever the other processes do:
//! - **Every wait is bounded** ([`Timeouts`]): a rank that never joins, dies or stops
//!   answering ends the run on every other rank, and a line names it.
//! - **A rank joins only into its own run**: the identity (the recipe, flattened) every rank
//!   must share is compared field by field ([`RunSpec::difference`]); a difference before the
//!   run starts stops it on every rank, naming the rank and the field.
//! - **One sum, the same bits everywhere**: [`Reduction::Exact`] adds the buffers in rank
//!   order ([`sum_in_rank_order`]), as one process adds its replicas.
//!
//! The TCP star's frames have a magic, a version and a length limit: bytes of another
//! protocol, a port scan or a second run only close their own connection. Neither transport
//! authenticates or encrypts: bind the star to loopback (the default of its callers) or a
//! private network; MPI's own launcher decides who joins an MPI job.

mod coordinator;
mod error;
mod exchange;
mod frame;
mod launcher;
#[cfg(feature = "mpi")]
mod mpi;
mod mpirun;
mod spec;
mod tcp;
mod transport;
mod worker;

#[cfg(feature = "mpi")]
pub use self::mpi::{Mpi, MpiWorld, end_mpi};
pub use coordinator::Coordinator;
pub use error::ClusterError;
pub use exchange::Exchange;
pub use launcher::{BadVariable, launched_by_mpi, local_place, srun_task};
// Without the `mpi` feature too: starting `mpirun` needs no MPI library in this process.
pub use mpirun::{MPIRUN_ENV, mpirun, mpirun_test};
pub use spec::{RunSpec, Timeouts};
pub use tcp::Tcp;
pub use transport::{Reduction, Transport, sum_in_rank_order};
pub use worker::Worker;

/// What the two editions re-export as their `mpi` module (`burn_mpric::mpi`,
/// `burn_mpric_022::mpi`; feature `mpi`): one list, so that both offer the same names.
#[cfg(feature = "mpi")]
pub mod editions {
    /// The MPI transport and what a process needs to join a run over it.
    pub mod mpi {
        pub use crate::{
            ClusterError, Mpi, MpiWorld, Reduction, RunSpec, Timeouts, Transport, end_mpi,
            launched_by_mpi,
        };
    }
}
