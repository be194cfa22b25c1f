//! [`Tcp`]: the [`Transport`] of the TCP star: this rank's [`Worker`], and on rank 0 the
//! [`Coordinator`] on a thread of its own.

use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::coordinator::Coordinator;
use crate::error::ClusterError;
use crate::spec::RunSpec;
use crate::transport::Transport;
use crate::worker::Worker;

/// One rank of a run over the TCP star, needing nothing installed: rank 0's process hosts the
/// coordinator, which adds every rank's buffer in rank order ([`Reduction::Exact`]
/// (crate::Reduction::Exact)) and sends the sum to all.
///
/// ```
/// use std::thread;
/// use burn_mpric_cluster::{ClusterError, Coordinator, RunSpec, Tcp, Transport};
///
/// let spec = RunSpec::new(2, vec![("seed".into(), "7".into())]);
/// let coordinator = Coordinator::bind("127.0.0.1:0", spec.clone())?;
/// let addr = coordinator.local_addr().to_string();
/// let other = {
///     let (addr, spec) = (addr.clone(), spec.clone());
///     thread::spawn(move || -> Result<Vec<f32>, ClusterError> {
///         let mut link = Tcp::join(None, &addr, 1, &spec)?;
///         let sum = link.all_reduce(1, &[2.0])?;
///         Box::new(link).finish()?;
///         Ok(sum)
///     })
/// };
/// let mut link = Tcp::join(Some(coordinator), &addr, 0, &spec)?;
/// assert_eq!(link.all_reduce(1, &[1.0])?, [3.0]);
/// Box::new(link).finish()?;
/// assert_eq!(other.join().unwrap()?, [3.0]);
/// # Ok::<(), ClusterError>(())
/// ```
#[derive(Debug)]
pub struct Tcp {
    /// `None` once a step failed: its connection is closed.
    worker: Option<Worker>,
    coordinator: Option<JoinHandle<Result<u64, ClusterError>>>,
    world: usize,
}

impl Tcp {
    /// Joins the run at `addr` as `rank`. Rank 0 passes the `coordinator` it bound (first
    /// thing in its process, so that the join timeout counts from there): it runs on a thread
    /// with `spec`'s identity, and this rank reaches it on loopback when it listens on every
    /// interface.
    ///
    /// # Errors
    ///
    /// As [`Worker::join`].
    pub fn join(
        coordinator: Option<Coordinator>,
        addr: &str,
        rank: usize,
        spec: &RunSpec,
    ) -> Result<Self, ClusterError> {
        let mut address = addr.to_string();
        let coordinator = coordinator.map(|mut coordinator| {
            coordinator.set_identity(spec.identity.clone());
            address = own_address(coordinator.local_addr());
            std::thread::spawn(move || coordinator.run())
        });
        let worker = Worker::join(&address, rank, spec)?;
        Ok(Self {
            worker: Some(worker),
            coordinator,
            world: spec.world,
        })
    }

    /// On rank 0, waits (a few seconds at most) until the coordinator has told the other
    /// ranks why the run stopped and closed their connections: a process that exits first
    /// resets them, and a reset may discard what they have not read yet.
    fn settle(&self) {
        if let Some(handle) = &self.coordinator {
            let until = Instant::now() + Duration::from_secs(5);
            while !handle.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

fn closed() -> ClusterError {
    ClusterError::Config("the connection was closed by a failed step".into())
}

impl Transport for Tcp {
    fn rank(&self) -> usize {
        self.worker.as_ref().map_or(0, Worker::rank)
    }

    fn world(&self) -> usize {
        self.world
    }

    fn all_reduce(&mut self, step: u64, values: &[f32]) -> Result<Vec<f32>, ClusterError> {
        let worker = self.worker.as_mut().ok_or_else(closed)?;
        worker.all_reduce(step, values).inspect_err(|_| {
            // Closed first, so that rank 0's coordinator, which waits for every rank to
            // close before it returns, is not held up by this one.
            self.worker = None;
            self.settle();
        })
    }

    fn finish(mut self: Box<Self>) -> Result<(), ClusterError> {
        let worker = self.worker.take().ok_or_else(closed)?;
        if let Err(e) = worker.finish() {
            self.settle();
            return Err(e);
        }
        match self.coordinator.take().map(JoinHandle::join) {
            None => Ok(()),
            Some(Ok(result)) => result.map(|_| ()),
            Some(Err(_)) => Err(ClusterError::Config(
                "the coordinator's thread panicked".into(),
            )),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_zero_reaches_a_wildcard_listener_on_loopback() {
        assert_eq!(own_address("0.0.0.0:7".parse().unwrap()), "127.0.0.1:7");
        assert_eq!(own_address("10.1.2.3:7".parse().unwrap()), "10.1.2.3:7");
    }
}
