//! [`Mpi`]: the [`Transport`](crate::Transport) over MPI (feature `mpi`, rsmpi over the
//! system's OpenMPI or MPICH): rank and world from the launcher, the run's identity checked by
//! broadcast, sums by gather-and-add in rank order
//! ([`Reduction::Exact`](crate::Reduction::Exact)) or `MPI_Allreduce`
//! ([`Reduction::Fast`](crate::Reduction::Fast)), and a watchdog on every wait that aborts the
//! whole run, naming the rank that did not arrive. A rank that dies is MPI's to handle:
//! `mpirun` and `srun` end the others.
//!
//! - `start.rs`: [`MpiWorld`] (MPI initialized, rank and world from the launcher, the job
//!   aborted) and [`end_mpi`];
//! - `collectives.rs`: [`MpiWorld::join`] and [`Mpi`]: the broadcasts, all-gathers and
//!   all-reduces of a run;
//! - `watchdog.rs`: the deadline on every wait (MPI has none), and who is named when it passes.

mod collectives;
mod start;
mod watchdog;

pub use collectives::Mpi;
pub use start::{MpiWorld, end_mpi};
