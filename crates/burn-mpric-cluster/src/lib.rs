//! The transport of burn-mpric's multi-process data-parallel training: a [`Coordinator`]
//! (rank 0's process runs it on a thread) and one [`Worker`] per
//! rank, over TCP.
//!
//! What it guarantees, whatever the other processes do:
//! - **Every wait is bounded** ([`Timeouts`]): a rank that never joins, dies (its connection
//!   closes, seen at once) or stops answering ends the run on every other rank with
//!   [`ClusterError::RankLost`] / [`ClusterError::Aborted`] naming it.
//! - **A rank joins only into its own run**: its hello carries the world size and the
//!   identity (the recipe, flattened) every rank must share; a difference is refused with
//!   the first differing field ([`RunSpec::difference`]), and before the run starts it stops
//!   the run on every rank, naming the rank and the field.
//! - **Nothing that arrives is trusted**: frames have a magic, a version and a length limit;
//!   bytes of another protocol, a port scan or a second run only close their own connection.
//! - **One sum, the same bits everywhere**: each step's buffers are added in rank order by
//!   the coordinator and the one result goes to every rank.
//!
//! It authenticates nobody and encrypts nothing: bind it to loopback (the default of its
//! callers) or a private network.

mod coordinator;
mod error;
mod frame;
mod spec;
mod worker;

pub use coordinator::Coordinator;
pub use error::ClusterError;
pub use spec::{RunSpec, Timeouts};
pub use worker::Worker;
