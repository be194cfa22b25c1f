//! The watchdog on every wait of an MPI run. Every collective is started non-blocking and
//! completed by polling with a deadline ([`complete`]): MPI has no timeouts, and a rank that
//! is alive but stopped (SIGSTOP, a deadlock, a hung device) would hold its peers inside
//! `MPI_Allreduce` forever. When a deadline passes, the rank finds who did not arrive or does
//! not answer ([`Watch`]: arrival notes between rank 0 and every rank, pings), says so, and
//! aborts the job.

use std::time::{Duration, Instant};

use ::mpi::request::{LocalScope, Request, Scope};
use ::mpi::topology::SimpleCommunicator;
use ::mpi::traits::*;

use crate::error::{ranks_text, seconds};
use crate::mpi::start::MpiWorld;

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

/// Polls `request` until it completes; at `deadline`, aborts the job with a line naming
/// the ranks that did not arrive or do not answer (see [`Watch`]).
pub(super) fn complete<'a, D: ?Sized, S: Scope<'a>>(
    place: (usize, usize),
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
            timed_out(place, what, allowed, watch.as_deref_mut());
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
fn timed_out(
    (me, world): (usize, usize),
    what: &str,
    allowed: Duration,
    watch: Option<&mut Watch>,
) -> ! {
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
    let line = format!("error: rank {me} of {world}: {line}\n");
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    MpiWorld::abort(1)
}

/// Whether `rank` exchanges watchdog notes with `peer`: rank 0 with every other rank, the
/// others with rank 0.
pub(super) fn watches(rank: usize, peer: usize) -> bool {
    peer != rank && (rank == 0 || peer == 0)
}

/// The buffers of one step's [`Watch`], which must outlive the step's requests.
pub(super) struct Notes {
    step: u64,
    pub(super) arrived: Vec<u64>,
    pings: Vec<u64>,
    pongs: Vec<u64>,
}

impl Notes {
    pub(super) fn new(step: u64, world: usize) -> Self {
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
pub(super) struct Watch<'a, 'b> {
    scope: &'b LocalScope<'a>,
    note: &'a u64,
    /// Per watched peer, its arrival note still awaited (`None` once it came).
    arrivals: Vec<(usize, Option<Request<'a, u64, &'b LocalScope<'a>>>)>,
    pings: Vec<(usize, Option<Request<'a, u64, &'b LocalScope<'a>>>)>,
    pongs: Option<&'a mut [u64]>,
    sent: Vec<Request<'a, u64, &'b LocalScope<'a>>>,
}

impl<'a, 'b> Watch<'a, 'b> {
    pub(super) fn post(
        scope: &'b LocalScope<'a>,
        comm: &SimpleCommunicator,
        notes: &'a mut Notes,
    ) -> Self {
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
    pub(super) fn settle(mut self) {
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
