//! [`Exchange`]: the Burn-free half of a data-parallel step across processes, which both
//! editions' `DataParallel` wrap: numbered sums over a [`Transport`], scaled, and split
//! into the gradients' values and the extra values sent with them.

use crate::error::ClusterError;
use crate::transport::Transport;

/// Numbered sums over a [`Transport`]: every process calls [`sum`](Self::sum) once per step,
/// in the same order, with as many values.
///
/// ```
/// use burn_mpric_cluster::{ClusterError, Exchange, Transport};
///
/// /// Two processes that hold the same values, seen from one of them.
/// struct Twins;
/// impl Transport for Twins {
///     fn rank(&self) -> usize { 0 }
///     fn world(&self) -> usize { 2 }
///     fn all_reduce(&mut self, _: u64, v: &[f32]) -> Result<Vec<f32>, ClusterError> {
///         Ok(v.iter().map(|x| x * 2.0).collect())
///     }
///     fn finish(self: Box<Self>) -> Result<(), ClusterError> { Ok(()) }
/// }
///
/// let mut exchange = Exchange::new(Box::new(Twins));
/// // Three gradient values and one loss, averaged over the two processes.
/// let (grads, extra) = exchange.sum(&[1.0, 2.0, 3.0, 0.5], 0.5, 3)?;
/// assert_eq!((grads, extra), (vec![1.0, 2.0, 3.0], vec![0.5]));
/// exchange.finish()?;
/// # Ok::<(), ClusterError>(())
/// ```
pub struct Exchange {
    transport: Box<dyn Transport>,
    /// Sums made so far: each is tagged with its number, which every process must share.
    sums: u64,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("rank", &self.transport.rank())
            .field("world", &self.transport.world())
            .field("sums", &self.sums)
            .finish()
    }
}

impl Exchange {
    /// Sums over `transport`, already joined.
    ///
    /// See [`Exchange`] for an example.
    pub fn new(transport: Box<dyn Transport>) -> Self {
        Self { transport, sums: 0 }
    }

    /// This process's rank.
    ///
    /// See [`Exchange`] for an example.
    pub fn rank(&self) -> usize {
        self.transport.rank()
    }

    /// The number of processes.
    ///
    /// See [`Exchange`] for an example.
    pub fn world(&self) -> usize {
        self.transport.world()
    }

    /// The sum over every process of `values`, each times `factor` (1 for a sum, 1/world for
    /// a mean), split into the first `at` values and the rest.
    ///
    /// See [`Exchange`] for an example.
    ///
    /// # Errors
    ///
    /// The transport's [`ClusterError`], naming the process lost or refused; a
    /// [`ClusterError::Protocol`] when the sum does not hold as many values as were sent.
    pub fn sum(
        &mut self,
        values: &[f32],
        factor: f32,
        at: usize,
    ) -> Result<(Vec<f32>, Vec<f32>), ClusterError> {
        self.sums += 1;
        let mut summed = self.transport.all_reduce(self.sums, values)?;
        if summed.len() != values.len() || at > summed.len() {
            return Err(ClusterError::Protocol {
                rank: self.rank(),
                reason: format!(
                    "got a sum of {} values for {} sent",
                    summed.len(),
                    values.len()
                ),
            });
        }
        if factor != 1.0 {
            summed.iter_mut().for_each(|v| *v *= factor);
        }
        let extra = summed.split_off(at);
        Ok((summed, extra))
    }

    /// Says this process has finished and waits until every process has.
    ///
    /// See [`Exchange`] for an example.
    ///
    /// # Errors
    ///
    /// The transport's [`ClusterError`] when another process was lost before it finished.
    pub fn finish(self) -> Result<(), ClusterError> {
        self.transport.finish()
    }
}
