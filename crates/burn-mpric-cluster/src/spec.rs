//! [`RunSpec`] and [`Timeouts`]: what every rank of a run must agree on, and how long anyone
//! waits for anyone.

use std::time::Duration;

/// How long the coordinator and the workers wait. With the defaults no wait of a run that
/// lost a rank passes 55 s: a rank that never joins is given up after `join` (50 s; a worker
/// waits [`Timeouts::worker_join`], 55 s, from its own start); a rank that has not sent a
/// step `step` after the step began (25 s; the first step [`Timeouts::first_step`], 37.5 s;
/// a killed process closes its connection, which is seen at once); a worker gives up on the
/// coordinator after [`Timeouts::reply`] (39.5 s; the first step
/// [`Timeouts::first_reply`], 52 s).
///
/// ```
/// use std::time::Duration;
/// use burn_mpric_cluster::Timeouts;
///
/// let t = Timeouts::default();
/// assert_eq!((t.join, t.step), (Duration::from_secs(50), Duration::from_secs(25)));
/// assert_eq!(t.worker_join(), Duration::from_secs(55));
/// assert!(t.reply() < t.worker_join());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// From the coordinator's start until every rank has joined.
    pub join: Duration,
    /// The longest a step may take once the run started, from the moment the coordinator
    /// sent the previous sum (or the welcome) until every rank has sent this step's values:
    /// one training step on the slowest rank.
    pub step: Duration,
    /// The longest a new connection may take to say who it is.
    pub handshake: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self::new(Duration::from_secs(25))
    }
}

impl Timeouts {
    /// Timeouts for steps of at most `step`: joining may take twice that, a handshake at most
    /// 5 s.
    ///
    /// ```
    /// use std::time::Duration;
    /// use burn_mpric_cluster::Timeouts;
    ///
    /// assert_eq!(Timeouts::new(Duration::from_secs(2)).join, Duration::from_secs(4));
    /// ```
    pub fn new(step: Duration) -> Self {
        Self {
            join: step * 2,
            step,
            handshake: step.min(Duration::from_secs(5)),
        }
    }

    /// How long a worker waits for the coordinator's answer to a step: longer than the
    /// coordinator waits for the slowest rank, so that the worker hears which rank was lost.
    ///
    /// ```
    /// use std::time::Duration;
    /// use burn_mpric_cluster::Timeouts;
    ///
    /// assert_eq!(Timeouts::new(Duration::from_secs(30)).reply(), Duration::from_secs(47));
    /// ```
    pub fn reply(&self) -> Duration {
        self.step + self.step / 2 + Duration::from_secs(2)
    }

    /// The first step's budget: one and a half steps, as it also starts the devices and
    /// loads the model (kernel compilation, a checkpoint).
    ///
    /// ```
    /// use std::time::Duration;
    /// use burn_mpric_cluster::Timeouts;
    ///
    /// assert_eq!(Timeouts::new(Duration::from_secs(20)).first_step(), Duration::from_secs(30));
    /// ```
    pub fn first_step(&self) -> Duration {
        self.step + self.step / 2
    }

    /// How long a worker waits for the answer to its first step: longer than
    /// [`first_step`](Self::first_step) by the same margin as [`reply`](Self::reply).
    ///
    /// ```
    /// use std::time::Duration;
    /// use burn_mpric_cluster::Timeouts;
    ///
    /// let t = Timeouts::new(Duration::from_secs(25));
    /// assert_eq!(t.first_reply(), Duration::from_secs(52));
    /// ```
    pub fn first_reply(&self) -> Duration {
        self.first_step() + self.step / 2 + Duration::from_secs(2)
    }

    /// How long a worker tries to join, from its start: the join timeout and a tenth of it
    /// (at most 5 s more), so that a worker started with the coordinator hears which rank
    /// never came before it gives up.
    ///
    /// ```
    /// use std::time::Duration;
    /// use burn_mpric_cluster::Timeouts;
    ///
    /// let t = Timeouts::new(Duration::from_secs(1));
    /// assert_eq!(t.worker_join(), Duration::from_millis(2200));
    /// ```
    pub fn worker_join(&self) -> Duration {
        self.join + (self.join / 10).min(Duration::from_secs(5))
    }
}

/// What every rank of a run must agree on.
///
/// ```
/// use burn_mpric_cluster::RunSpec;
///
/// let spec = RunSpec::new(2, vec![("seed".into(), "0".into())]);
/// assert!(spec.difference(&[("seed".into(), "1".into())]).unwrap().contains("`seed`"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RunSpec {
    /// The number of ranks (processes).
    pub world: usize,
    /// The fields that must be equal on every rank, by name (a recipe, flattened).
    pub identity: Vec<(String, String)>,
    /// The most values one step may carry.
    pub max_values: usize,
    /// The waits.
    pub timeouts: Timeouts,
}

impl RunSpec {
    /// A run of `world` ranks agreeing on `identity`, with the default timeouts and up to
    /// 2^28 values (1 GiB) per step.
    ///
    /// ```
    /// use burn_mpric_cluster::RunSpec;
    ///
    /// assert_eq!(RunSpec::new(4, vec![]).max_values, 1 << 28);
    /// ```
    pub fn new(world: usize, identity: Vec<(String, String)>) -> Self {
        Self {
            world,
            identity,
            max_values: 1 << 28,
            timeouts: Timeouts::default(),
        }
    }

    /// The first field on which `other` differs from this run, as a sentence; `None` when
    /// they agree.
    ///
    /// ```
    /// use burn_mpric_cluster::RunSpec;
    ///
    /// let spec = RunSpec::new(2, vec![("optimizer.lr".into(), "0.01".into())]);
    /// assert_eq!(spec.difference(&[("optimizer.lr".into(), "0.01".into())]), None);
    /// assert_eq!(
    ///     spec.difference(&[]).unwrap(),
    ///     "`optimizer.lr` is 0.01 in the run and not set here"
    /// );
    /// ```
    pub fn difference(&self, other: &[(String, String)]) -> Option<String> {
        let mut keys: Vec<&String> = self.identity.iter().chain(other).map(|(k, _)| k).collect();
        keys.sort();
        keys.dedup();
        let find = |list: &[(String, String)], key: &String| {
            list.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
        };
        keys.into_iter().find_map(|key| {
            let (ours, theirs) = (find(&self.identity, key), find(other, key));
            (ours != theirs).then(|| {
                let show = |v: Option<String>| v.unwrap_or_else(|| "not set".into());
                let (ours, theirs) = (show(ours), show(theirs));
                format!("`{key}` is {ours} in the run and {theirs} here")
            })
        })
    }
}
