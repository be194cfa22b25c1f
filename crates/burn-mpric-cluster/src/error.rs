//! [`ClusterError`]: why a multi-process run stopped, in one line that names the rank.

use std::time::Duration;

/// Why a coordinator or a worker stopped. Every variant reads as one line and names the rank
/// it is about.
///
/// ```
/// use burn_mpric_cluster::ClusterError;
///
/// let err = ClusterError::RankLost { rank: 2, reason: "closed its connection".into() };
/// assert_eq!(err.to_string(), "rank 2 was lost: closed its connection");
/// ```
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The coordinator could not listen on its address.
    #[error("the coordinator cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// Not every rank joined in time (coordinator side).
    #[error("{} did not join within {}", ranks_text(missing), seconds(*timeout))]
    JoinTimeout {
        /// The ranks that never joined.
        missing: Vec<usize>,
        /// The join timeout.
        timeout: Duration,
    },
    /// A rank stopped answering or closed its connection (coordinator side).
    #[error("rank {rank} was lost: {reason}")]
    RankLost {
        /// The rank.
        rank: usize,
        /// What happened.
        reason: String,
    },
    /// The coordinator stopped the run because another rank was lost (worker side).
    #[error("the run was stopped: rank {rank} {}", lost_clause(reason))]
    Aborted {
        /// The rank that was lost.
        rank: usize,
        /// What happened to it.
        reason: String,
    },
    /// The connection to the coordinator (hosted by rank 0's process) failed (worker side).
    #[error("lost rank 0, the coordinator at {addr}: {reason}")]
    CoordinatorLost {
        /// The coordinator's address.
        addr: String,
        /// What happened.
        reason: String,
    },
    /// A rank asked to join with another recipe, world size or rank range, so the run does
    /// not start: said by the coordinator, and by every rank that had joined.
    #[error("rank {rank} was refused, so the run does not start: {reason}")]
    RankRefused {
        /// The refused rank.
        rank: usize,
        /// Why.
        reason: String,
    },
    /// The coordinator refused this worker (worker side).
    #[error("the coordinator refused rank {rank}: {reason}")]
    Refused {
        /// This worker's rank.
        rank: usize,
        /// The coordinator's reason.
        reason: String,
    },
    /// A rank sent something the protocol does not allow at that point.
    #[error("rank {rank} broke the protocol: {reason}")]
    Protocol {
        /// The rank.
        rank: usize,
        /// What it sent.
        reason: String,
    },
    /// The settings are unusable.
    #[error("{0}")]
    Config(String),
}

/// A duration as a person reads it: `60 s`, `0.3 s`.
pub(crate) fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

/// What happened to an aborted run's rank, as the clause after its number.
fn lost_clause(reason: &str) -> String {
    if reason.starts_with("did not join") {
        reason.to_string()
    } else {
        format!("was lost: {reason}")
    }
}

/// `rank 2`, `ranks 1, 3`.
pub(crate) fn ranks_text(ranks: &[usize]) -> String {
    match ranks {
        [one] => format!("rank {one}"),
        many => format!(
            "ranks {}",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_join_timeout_names_every_missing_rank() {
        let err = ClusterError::JoinTimeout {
            missing: vec![1, 3],
            timeout: Duration::from_secs(60),
        };
        assert_eq!(err.to_string(), "ranks 1, 3 did not join within 60 s");
        let err = ClusterError::JoinTimeout {
            missing: vec![2],
            timeout: Duration::from_secs(5),
        };
        assert_eq!(err.to_string(), "rank 2 did not join within 5 s");
    }
}
