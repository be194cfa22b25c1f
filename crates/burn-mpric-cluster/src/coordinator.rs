//! [`Coordinator`]: waits for every rank, then sums one buffer per step in rank order and
//! sends the sum to all; stops the run, naming the rank, when one is lost.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant};

use crate::error::{ClusterError, seconds};
use crate::frame::{
    Control, Frame, FrameError, closed_or_io, read_frame, write_control, write_values,
};
use crate::spec::RunSpec;

/// A joined rank: its connection.
struct Joined {
    rank: usize,
    stream: TcpStream,
    /// A send to it failed part-way: nothing more can be framed on its stream.
    told: bool,
}

/// What a handshake hands the run: a rank that joined, or one that named itself as a rank of
/// this run but was refused (another recipe or world size), which stops the run before it
/// starts; strays and duplicates never get this far.
enum Arrival {
    Joined(Joined),
    Refused { rank: usize, reason: String },
}

/// The coordinator of a run: rank 0's process starts it on a thread.
///
/// It listens on the address it is given (callers default to loopback); every connection
/// must say who it is within the handshake timeout and agree with the run's [`RunSpec`], or
/// it is turned away; before every rank has joined, such a refusal also stops the run, and
/// every rank hears which rank was refused and why ([`ClusterError::RankRefused`]), so that a
/// run never waits out its join timeout for a rank that came with another recipe. Bytes of
/// another protocol only close that connection. Once every rank
/// has joined, each step it reads one values frame from every rank (in rank order, each
/// within the step timeout), sums them in rank order (so every run sums in the same order)
/// and sends the sum to every rank. When a rank is lost it sends the others
/// [`Control::Abort`] naming it and returns [`ClusterError::RankLost`].
///
/// ```
/// use std::thread;
/// use burn_mpric_cluster::{Coordinator, RunSpec, Worker};
///
/// let spec = RunSpec::new(2, vec![("seed".into(), "0".into())]);
/// let coordinator = Coordinator::bind("127.0.0.1:0", spec.clone())?;
/// let addr = coordinator.local_addr().to_string();
/// let serving = thread::spawn(move || coordinator.run());
/// let ranks: Vec<_> = (0..2)
///     .map(|rank| {
///         let (addr, spec) = (addr.clone(), spec.clone());
///         thread::spawn(move || {
///             let mut worker = Worker::join(&addr, rank, &spec)?;
///             let sum = worker.all_reduce(1, &[rank as f32, 1.0])?;
///             worker.finish()?;
///             Ok::<_, burn_mpric_cluster::ClusterError>(sum)
///         })
///     })
///     .collect();
/// for rank in ranks {
///     assert_eq!(rank.join().unwrap()?, vec![1.0, 2.0]);
/// }
/// assert_eq!(serving.join().unwrap()?, 1, "one step");
/// # Ok::<(), burn_mpric_cluster::ClusterError>(())
/// ```
pub struct Coordinator {
    listener: TcpListener,
    spec: RunSpec,
    /// When it started listening: the join timeout counts from here, as the workers, which
    /// may connect from then on, count theirs from their own start.
    bound_at: Instant,
}

impl Coordinator {
    /// Listens on `addr` (`127.0.0.1:0` picks a free loopback port).
    ///
    /// ```
    /// use burn_mpric_cluster::{ClusterError, Coordinator, RunSpec};
    ///
    /// let err = Coordinator::bind("127.0.0.1:0", RunSpec::new(0, vec![])).err().unwrap();
    /// assert!(err.to_string().contains("at least one rank"));
    /// assert!(matches!(Coordinator::bind("nowhere:1", RunSpec::new(1, vec![])), Err(ClusterError::Bind { .. })));
    /// ```
    pub fn bind(addr: &str, spec: RunSpec) -> Result<Self, ClusterError> {
        if spec.world == 0 {
            return Err(ClusterError::Config(
                "a run needs at least one rank, got a world of 0".into(),
            ));
        }
        let listener = TcpListener::bind(addr).map_err(|source| ClusterError::Bind {
            addr: addr.to_string(),
            source,
        })?;
        Ok(Self {
            listener,
            spec,
            bound_at: Instant::now(),
        })
    }

    /// The address it listens on.
    ///
    /// ```
    /// use burn_mpric_cluster::{Coordinator, RunSpec};
    ///
    /// let c = Coordinator::bind("127.0.0.1:0", RunSpec::new(1, vec![])).unwrap();
    /// assert!(c.local_addr().ip().is_loopback());
    /// ```
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// Sets the identity every rank must share, when it is only known after binding (bind
    /// first, so that the workers can connect while this process gets ready; the join
    /// timeout counts from the bind).
    ///
    /// ```
    /// use burn_mpric_cluster::{Coordinator, RunSpec};
    ///
    /// let mut c = Coordinator::bind("127.0.0.1:0", RunSpec::new(1, vec![]))?;
    /// c.set_identity(vec![("seed".into(), "0".into())]);
    /// # Ok::<(), burn_mpric_cluster::ClusterError>(())
    /// ```
    pub fn set_identity(&mut self, identity: Vec<(String, String)>) {
        self.spec.identity = identity;
    }

    /// Runs the run: returns the number of steps once every rank has finished, or the error
    /// that stopped it. See [`Coordinator`].
    pub fn run(self) -> Result<u64, ClusterError> {
        let spec = Arc::new(self.spec);
        let (joins, joined) = mpsc::sync_channel::<Arrival>(spec.world);
        accept_in_background(self.listener, spec.clone(), joins);
        let mut ranks = match gather(&spec, &joined, self.bound_at + spec.timeouts.join) {
            Ok(ranks) => ranks,
            Err((err, told)) => {
                answer_late_arrivals(joined, told);
                return Err(err);
            }
        };
        // From here on, a connection that says hello is told the run has started.
        drop(joined);
        let result = welcome(&mut ranks).and_then(|()| step_loop(&spec, &mut ranks));
        if result.is_err() {
            close_gently(ranks);
        }
        result
    }
}

/// Tells every rank that the run starts.
fn welcome(ranks: &mut [Joined]) -> Result<(), ClusterError> {
    for rank in 0..ranks.len() {
        if let Err(e) = write_control(&mut ranks[rank].stream, &Control::Welcome) {
            ranks[rank].told = true;
            return Err(abort(ranks, rank, e.to_string()));
        }
    }
    Ok(())
}

/// Closes the connections of a run that stopped so that every rank can still read why: a
/// socket closed with unread bytes (a rank's values that were never read) resets the
/// connection, and a reset may discard the abort the rank has not read yet. Each connection
/// is shut for writing, then drained until its rank closes it (a rank exits once it has read
/// the abort), for at most a few seconds, before `run` returns (so that a process hosting the
/// coordinator which waits for `run` does not exit, resetting them, too early).
fn close_gently(ranks: Vec<Joined>) {
    let until = Instant::now() + Duration::from_secs(3);
    for mut join in ranks {
        let _ = join.stream.shutdown(std::net::Shutdown::Write);
        let mut sink = [0u8; 64 * 1024];
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero()
                || join
                    .stream
                    .set_read_timeout(Some(left.min(Duration::from_millis(200))))
                    .is_err()
            {
                break;
            }
            match std::io::Read::read(&mut join.stream, &mut sink) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    if !FrameError::Io(e).is_timeout() {
                        break;
                    }
                }
            }
        }
    }
}

/// Accepts connections for as long as the process lives; each says hello on its own thread,
/// so a silent or slow connection holds up nobody.
/// A flood of connections (a port scan) is turned away beyond this many handshakes at once,
/// besides one per rank.
const MAX_STRAY_HANDSHAKES: usize = 256;

fn accept_in_background(listener: TcpListener, spec: Arc<RunSpec>, joins: SyncSender<Arrival>) {
    let handshaking = Arc::new(AtomicUsize::new(0));
    let limit = spec.world.saturating_add(MAX_STRAY_HANDSHAKES);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let stream = match stream {
                Ok(stream) => stream,
                // Out of file descriptors, say: wait rather than spin.
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            if handshaking.fetch_add(1, Ordering::SeqCst) >= limit {
                handshaking.fetch_sub(1, Ordering::SeqCst);
                continue;
            }
            let (spec, joins, count) = (spec.clone(), joins.clone(), handshaking.clone());
            let spawned = std::thread::Builder::new().spawn(move || {
                handshake(stream, &spec, &joins);
                count.fetch_sub(1, Ordering::SeqCst);
            });
            if spawned.is_err() {
                handshaking.fetch_sub(1, Ordering::SeqCst);
            }
        }
    });
}

fn refuse(mut stream: TcpStream, reason: String) {
    tell(&mut stream, &Control::Refused { reason });
}

/// Sends a last word (a refusal, an abort) that nothing waits on: within a second, or not at
/// all, so that a peer that reads nothing holds up no one.
fn tell(stream: &mut TcpStream, control: &Control) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = write_control(stream, control);
}

fn handshake(mut stream: TcpStream, spec: &RunSpec, joins: &SyncSender<Arrival>) {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    if stream
        .set_read_timeout(Some(spec.timeouts.handshake))
        .is_err()
    {
        return;
    }
    let hello = match read_frame(&mut stream, 0) {
        Ok(Frame::Control(Control::Hello {
            rank,
            world,
            identity,
        })) => (rank, world, identity),
        Ok(_) => return refuse(stream, "the first message must be a hello".into()),
        Err(FrameError::Garbage(what)) => {
            eprintln!("mpric cluster: closed a connection from {peer} that {what}");
            return;
        }
        Err(_) => return,
    };
    let (rank, world, identity) = hello;
    let mismatch = if world != spec.world {
        Some(format!(
            "the run has {} ranks, this process expects {world}",
            spec.world
        ))
    } else if rank >= spec.world {
        Some(format!("rank {rank} is outside 0..{}", spec.world))
    } else {
        spec.difference(&identity)
            .map(|difference| format!("the recipe differs: {difference}"))
    };
    if let Some(reason) = mismatch {
        eprintln!("mpric cluster: refused rank {rank} from {peer}: {reason}");
        // The refused process hears it first: the run's own processes may exit as soon as
        // they hear of it, closing this connection with them.
        refuse(stream, reason.clone());
        // Before the run starts, the run stops with it (every rank hears why); once it has
        // started, only this connection is turned away.
        let _ = joins.send(Arrival::Refused { rank, reason });
        return;
    }
    let _ = stream.set_read_timeout(None);
    let Ok(duplicate) = stream.try_clone() else {
        return;
    };
    if joins
        .send(Arrival::Joined(Joined {
            rank,
            stream,
            told: false,
        }))
        .is_err()
    {
        refuse(
            duplicate,
            "the run has started; a rank cannot join it now".into(),
        );
    }
}

/// A run that did not start tells every rank that arrives later why, for as long as the
/// process lives (the rank that hosts the coordinator may say hello after the run failed).
fn answer_late_arrivals(joined: mpsc::Receiver<Arrival>, told: Control) {
    std::thread::spawn(move || {
        for arrival in joined {
            if let Arrival::Joined(mut join) = arrival {
                tell(&mut join.stream, &told);
            }
        }
    });
}

/// Waits until every rank has joined, within the join timeout; when the run cannot start, the
/// error and what every rank is told.
fn gather(
    spec: &RunSpec,
    joined: &mpsc::Receiver<Arrival>,
    deadline: Instant,
) -> Result<Vec<Joined>, (ClusterError, Control)> {
    let mut slots: Vec<Option<Joined>> = (0..spec.world).map(|_| None).collect();
    while slots.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        match joined.recv_timeout(left) {
            Ok(Arrival::Refused { rank, reason }) => {
                let stopped = Control::Stopped {
                    rank,
                    reason: reason.clone(),
                };
                tell_all(&mut slots, &stopped);
                return Err((ClusterError::RankRefused { rank, reason }, stopped));
            }
            Ok(Arrival::Joined(join)) => {
                if slots[join.rank].is_some() {
                    let rank = join.rank;
                    refuse(join.stream, format!("rank {rank} has already joined"));
                } else {
                    let rank = join.rank;
                    slots[rank] = Some(join);
                }
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                let missing: Vec<usize> = (0..spec.world).filter(|r| slots[*r].is_none()).collect();
                let reason = format!("did not join within {}", seconds(spec.timeouts.join));
                let abort = Control::Abort {
                    rank: missing[0],
                    reason,
                };
                tell_all(&mut slots, &abort);
                let err = ClusterError::JoinTimeout {
                    missing,
                    timeout: spec.timeouts.join,
                };
                return Err((err, abort));
            }
        }
    }
    Ok(slots.into_iter().flatten().collect())
}

/// Tells every rank that has joined why the run does not start.
fn tell_all(slots: &mut [Option<Joined>], control: &Control) {
    for join in slots.iter_mut().flatten() {
        tell(&mut join.stream, control);
    }
}

/// Tells every rank that `lost` is gone (`lost` too, when it is only slow and its stream
/// can take a message, so that it says why it stopped); the error to return.
fn abort(ranks: &mut [Joined], lost: usize, reason: String) -> ClusterError {
    let control = Control::Abort {
        rank: lost,
        reason: reason.clone(),
    };
    for join in ranks.iter_mut().filter(|j| !(j.rank == lost && j.told)) {
        tell(&mut join.stream, &control);
    }
    ClusterError::RankLost { rank: lost, reason }
}

/// Reads one frame from a rank whose step must have begun to arrive by `deadline` (the
/// rank is silent past it); once it arrives, a large frame may take as long as it keeps
/// coming (each read within a step timeout), so a slow link is not a lost rank.
fn read_by(stream: &mut TcpStream, deadline: Instant, spec: &RunSpec) -> Result<Frame, FrameError> {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    stream
        .set_read_timeout(Some(left))
        .map_err(FrameError::Io)?;
    match stream.peek(&mut [0u8; 1]) {
        Ok(0) => return Err(FrameError::Closed),
        Ok(_) => {}
        Err(e) => return Err(closed_or_io(e)),
    }
    stream
        .set_read_timeout(Some(spec.timeouts.step))
        .map_err(FrameError::Io)?;
    read_frame(stream, spec.max_values)
}

fn step_loop(spec: &RunSpec, ranks: &mut [Joined]) -> Result<u64, ClusterError> {
    let mut steps = 0;
    loop {
        // One deadline for the whole step: every rank started it when the previous sum went
        // out, so a healthy rank has sent it by then, and a worker waiting for the answer
        // (`Timeouts::reply`) hears which rank was lost before it gives up. The first step
        // also starts the devices and loads the model.
        let allowed = if steps == 0 {
            spec.timeouts.first_step()
        } else {
            spec.timeouts.step
        };
        let deadline = Instant::now() + allowed;
        let mut sum: Option<(u64, Vec<f32>)> = None;
        let mut done = Vec::new();
        for i in 0..ranks.len() {
            let rank = ranks[i].rank;
            let read = read_by(&mut ranks[i].stream, deadline, spec);
            match read {
                Ok(Frame::Values { step, values }) => match &mut sum {
                    None => sum = Some((step, values)),
                    Some((at, total)) if *at == step && total.len() == values.len() => {
                        total.iter_mut().zip(&values).for_each(|(t, v)| *t += v);
                    }
                    Some((at, total)) => {
                        let reason = format!(
                            "sent step {step} with {} values where rank 0 sent step {at} with {}",
                            values.len(),
                            total.len()
                        );
                        return Err(abort(ranks, rank, reason));
                    }
                },
                Ok(Frame::Control(Control::Done)) => done.push(rank),
                Ok(Frame::Control(other)) => {
                    return Err(abort(ranks, rank, format!("sent {other:?} during the run")));
                }
                Err(e) => {
                    let reason = if e.is_timeout() {
                        format!("did not finish its step within {}", seconds(allowed))
                    } else {
                        e.to_string()
                    };
                    return Err(abort(ranks, rank, reason));
                }
            }
        }
        if done.len() == ranks.len() {
            for join in ranks.iter_mut() {
                let _ = write_control(&mut join.stream, &Control::Done);
            }
            return Ok(steps);
        }
        if let Some(&rank) = done.first() {
            return Err(abort(
                ranks,
                rank,
                "finished while other ranks went on (the ranks disagree on the run's length)"
                    .into(),
            ));
        }
        let Some((step, total)) = sum else {
            continue;
        };
        // Every rank is waiting for this answer: a send fails only when a rank takes none of
        // it for a whole step.
        for i in 0..ranks.len() {
            let _ = ranks[i].stream.set_write_timeout(Some(spec.timeouts.step));
            if let Err(e) = write_values(&mut ranks[i].stream, step, &total) {
                let rank = ranks[i].rank;
                // Its stream stops mid-frame: it cannot be told why.
                ranks[i].told = true;
                return Err(abort(ranks, rank, e.to_string()));
            }
        }
        steps += 1;
    }
}
