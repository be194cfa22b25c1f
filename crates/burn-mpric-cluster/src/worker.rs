//! [`Worker`]: one rank's side of a run: join, then one all-reduce per step.

use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::error::{ClusterError, seconds};
use crate::frame::{Control, Frame, FrameError, read_frame, write_control, write_values};
use crate::spec::RunSpec;

/// One rank of a run, connected to the [`Coordinator`](crate::Coordinator). See there for an
/// example.
#[derive(Debug)]
pub struct Worker {
    stream: TcpStream,
    rank: usize,
    addr: String,
    spec: RunSpec,
    /// Steps answered so far (the first one has a longer budget).
    answered: u64,
}

impl Worker {
    /// Connects to the coordinator at `addr` as `rank` (retrying while it is not up yet, up to
    /// the join timeout) and waits until every rank has joined.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Refused`] when the coordinator turns this rank away (another recipe,
    /// world size or protocol, a rank already taken, a run already started), with its reason;
    /// [`ClusterError::CoordinatorLost`] when it cannot be reached or stops answering;
    /// [`ClusterError::Aborted`] when another rank never joined;
    /// [`ClusterError::RankRefused`] when another rank was refused before the run started.
    ///
    /// ```
    /// use std::time::Duration;
    /// use burn_mpric_cluster::{ClusterError, RunSpec, Timeouts, Worker};
    ///
    /// let mut spec = RunSpec::new(2, vec![]);
    /// spec.timeouts = Timeouts::new(Duration::from_millis(300));
    /// // Nothing listens there: the worker gives up after the join timeout.
    /// let err = Worker::join("127.0.0.1:9", 1, &spec).unwrap_err();
    /// assert!(matches!(err, ClusterError::CoordinatorLost { .. }), "{err}");
    /// ```
    pub fn join(addr: &str, rank: usize, spec: &RunSpec) -> Result<Self, ClusterError> {
        let started = Instant::now();
        let deadline = started + spec.timeouts.join;
        let lost = |reason: String| ClusterError::CoordinatorLost {
            addr: addr.to_string(),
            reason,
        };
        let mut stream = loop {
            match connect_before(addr, deadline) {
                Ok(stream) => break stream,
                Err(e) if Instant::now() >= deadline => {
                    return Err(lost(format!(
                        "cannot connect within {}: {e}",
                        seconds(spec.timeouts.join)
                    )));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        let _ = stream.set_nodelay(true);
        let hello = Control::Hello {
            rank,
            world: spec.world,
            identity: spec.identity.clone(),
        };
        write_control(&mut stream, &hello).map_err(|e| lost(e.to_string()))?;
        // The coordinator answers when every rank is in, or when it gives up on one.
        let wait =
            (started + spec.timeouts.worker_join()).saturating_duration_since(Instant::now());
        let mut worker = Self {
            stream,
            rank,
            addr: addr.to_string(),
            spec: spec.clone(),
            answered: 0,
        };
        match worker.read(wait)? {
            Frame::Control(Control::Welcome) => Ok(worker),
            other => Err(worker.unexpected(other)),
        }
    }

    /// This worker's rank.
    ///
    /// See [`Coordinator`](crate::Coordinator) for an example.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Sends this rank's `values` for `step` and returns the sum over all ranks, added in
    /// rank order (the same bits on every rank).
    ///
    /// # Errors
    ///
    /// [`ClusterError::Aborted`] naming the lost rank when the coordinator stopped the run;
    /// [`ClusterError::CoordinatorLost`] when the coordinator is gone or silent beyond
    /// [`Timeouts::reply`](crate::Timeouts::reply).
    ///
    /// See [`Coordinator`](crate::Coordinator) for an example.
    pub fn all_reduce(&mut self, step: u64, values: &[f32]) -> Result<Vec<f32>, ClusterError> {
        if values.len() > self.spec.max_values {
            return Err(ClusterError::Config(format!(
                "a step of {} values is more than the run's limit of {} (RunSpec::max_values)",
                values.len(),
                self.spec.max_values
            )));
        }
        // The coordinator reads the ranks in order: a large buffer may wait for the ranks
        // before this one, within the step's budget.
        let _ = self
            .stream
            .set_write_timeout(Some(self.spec.timeouts.reply()));
        if let Err(e) = write_values(&mut self.stream, step, values) {
            return Err(self.why_closed(e));
        }
        let wait = if self.answered == 0 {
            self.spec.timeouts.first_reply()
        } else {
            self.spec.timeouts.reply()
        };
        match self.read(wait)? {
            Frame::Values { step: at, values } if at == step => {
                self.answered += 1;
                Ok(values)
            }
            other => Err(self.unexpected(other)),
        }
    }

    /// Says this rank has finished and waits until every rank has.
    ///
    /// See [`Coordinator`](crate::Coordinator) for an example.
    pub fn finish(mut self) -> Result<(), ClusterError> {
        if let Err(e) = write_control(&mut self.stream, &Control::Done) {
            return Err(self.why_closed(e));
        }
        match self.read(self.spec.timeouts.reply())? {
            Frame::Control(Control::Done) => Ok(()),
            other => Err(self.unexpected(other)),
        }
    }

    /// A send failed: the coordinator may have stopped the run and closed this connection,
    /// its reason waiting unread; that reason, when it came, else the send's error.
    fn why_closed(&mut self, sent: std::io::Error) -> ClusterError {
        match self.read(Duration::from_secs(1)) {
            Ok(frame @ Frame::Control(Control::Abort { .. } | Control::Stopped { .. })) => {
                self.unexpected(frame)
            }
            _ => self.lost(sent.to_string()),
        }
    }

    fn lost(&self, reason: String) -> ClusterError {
        ClusterError::CoordinatorLost {
            addr: self.addr.clone(),
            reason,
        }
    }

    fn read(&mut self, wait: Duration) -> Result<Frame, ClusterError> {
        let _ = self
            .stream
            .set_read_timeout(Some(wait.max(Duration::from_millis(1))));
        read_frame(&mut self.stream, self.spec.max_values).map_err(|e| match e {
            e if e.is_timeout() => self.lost(format!("no answer within {}", seconds(wait))),
            FrameError::Closed => self.lost("it closed the connection".into()),
            e => self.lost(e.to_string()),
        })
    }

    fn unexpected(&self, frame: Frame) -> ClusterError {
        match frame {
            Frame::Control(Control::Abort { rank, reason }) => {
                ClusterError::Aborted { rank, reason }
            }
            Frame::Control(Control::Stopped { rank, reason }) => {
                ClusterError::RankRefused { rank, reason }
            }
            Frame::Control(Control::Refused { reason }) => ClusterError::Refused {
                rank: self.rank,
                reason,
            },
            other => ClusterError::Protocol {
                rank: 0,
                reason: format!("the coordinator sent {other:?}"),
            },
        }
    }
}

/// One attempt to connect to `addr` that ends by `deadline`: every address it resolves to is
/// tried with the time left (a host that drops packets would hold a plain connect for minutes).
fn connect_before(addr: &str, deadline: Instant) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the address resolves to nothing");
    for candidate in addr.to_socket_addrs()? {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "out of time"));
        }
        match TcpStream::connect_timeout(&candidate, left) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e,
        }
    }
    Err(last)
}
