//! [`Transport`]: what a data-parallel step needs from the engine that carries its sums, and
//! [`Reduction`]: how the sum is added up.

use std::fmt;
use std::str::FromStr;

use crate::error::ClusterError;

/// One rank's connection to a run of several processes, whatever carries it: the TCP star
/// ([`Tcp`](crate::Tcp)) or MPI ([`Mpi`](crate::Mpi), feature `mpi`). A training step
/// hands it one flat buffer and gets back the sum over every rank; it never knows which
/// engine answered.
///
/// ```
/// use burn_mpric_cluster::{ClusterError, Transport};
///
/// /// A run of one process: the sum is the process's own values.
/// struct Alone;
///
/// impl Transport for Alone {
///     fn rank(&self) -> usize { 0 }
///     fn world(&self) -> usize { 1 }
///     fn all_reduce(&mut self, _step: u64, values: &[f32]) -> Result<Vec<f32>, ClusterError> {
///         Ok(values.to_vec())
///     }
///     fn finish(self: Box<Self>) -> Result<(), ClusterError> { Ok(()) }
/// }
///
/// let mut link: Box<dyn Transport> = Box::new(Alone);
/// assert_eq!(link.all_reduce(1, &[1.0, 2.0])?, [1.0, 2.0]);
/// link.finish()?;
/// # Ok::<(), ClusterError>(())
/// ```
pub trait Transport: Send {
    /// This process's rank, `0..world`.
    fn rank(&self) -> usize;

    /// The number of processes in the run.
    fn world(&self) -> usize;

    /// Sends this rank's `values` for `step` and returns their sum over every rank. Every
    /// rank calls it with the same `step` and as many values; each rank gets the same bits.
    ///
    /// # Errors
    ///
    /// A [`ClusterError`] that names the rank lost or refused, when the run cannot go on.
    fn all_reduce(&mut self, step: u64, values: &[f32]) -> Result<Vec<f32>, ClusterError>;

    /// Says this rank has finished and waits until every rank has.
    ///
    /// # Errors
    ///
    /// A [`ClusterError`] when another rank was lost before it finished.
    fn finish(self: Box<Self>) -> Result<(), ClusterError>;
}

/// How the ranks' buffers are added.
///
/// - `Exact`: every rank's buffer is gathered and added in rank order, `((r0 + r1) + r2) + ...`,
///   the order a single process adds its replicas in: the same bits whatever the engine's
///   algorithm, the interconnect or the number of machines, so a run resumes and repeats bit
///   for bit. Each rank receives every other rank's buffer: (N-1) buffers per step.
/// - `Fast`: the engine's own all-reduce (`MPI_Allreduce`), which may regroup the sum of three
///   or more ranks by its algorithm (ring, tree, ...) and so differ from `Exact` in the last
///   bits; each rank moves about two buffers per step whatever N.
///
/// The text form is `exact` or `fast`.
///
/// ```
/// use burn_mpric_cluster::Reduction;
///
/// assert_eq!("fast".parse::<Reduction>()?, Reduction::Fast);
/// assert_eq!(Reduction::default(), Reduction::Exact);
/// assert_eq!(Reduction::Exact.to_string(), "exact");
/// assert!("ring".parse::<Reduction>().unwrap_err().contains("exact, fast"));
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Reduction {
    /// Gather, then add in rank order: bit-identical everywhere.
    #[default]
    Exact,
    /// The engine's all-reduce: fewer bytes, last bits depend on the algorithm.
    Fast,
}

impl fmt::Display for Reduction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reduction::Exact => "exact",
            Reduction::Fast => "fast",
        })
    }
}

impl FromStr for Reduction {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "exact" => Ok(Reduction::Exact),
            "fast" => Ok(Reduction::Fast),
            other => Err(format!(
                "unknown reduction `{other}`; accepted: exact, fast"
            )),
        }
    }
}

/// Adds `buffers` (one per rank, in rank order, each of `len` values) element by element in
/// rank order, as the TCP coordinator and a single process do: `((b0 + b1) + b2) + ...`.
///
/// ```
/// use burn_mpric_cluster::sum_in_rank_order;
///
/// // 1e8 + 1 - 1e8 is 0 at f32 in this order, 1 in another: the order shows in the bits.
/// let gathered = [1e8f32, 1.0, -1e8];
/// assert_eq!(sum_in_rank_order(&gathered, 1), [0.0]);
/// ```
pub fn sum_in_rank_order(buffers: &[f32], len: usize) -> Vec<f32> {
    let mut chunks = buffers.chunks_exact(len.max(1));
    let mut total = chunks.next().map(<[f32]>::to_vec).unwrap_or_default();
    for chunk in chunks {
        total.iter_mut().zip(chunk).for_each(|(t, v)| *t += v);
    }
    total.truncate(len);
    total
}
