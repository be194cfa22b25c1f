//! The loop's loss scaling as one type, [`Scaling`], whichever way a step's outcome reaches
//! the host: [`Scaling::HostRead`] reads each step as it is taken (the outcome at once, the
//! skip-cause probe, the parameters checked after each applied step); [`Scaling::OnDevice`]
//! (a recipe with `sync_every`) decides the skip on the device and learns the outcomes at
//! each read, every `sync_every` steps and at each checkpoint (the parameters checked once
//! per read). The loop calls the same methods for both.

use std::collections::VecDeque;
use std::time::Duration;

use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, Transaction};
use burn_mpric::scale::{
    DeviceLossScaler, LossScaler, LossScalerRecord, SkipCause, StepError, StepOutcome,
};
use burn_mpric::{MixedPrecision, MpDevice};

use crate::error::{Error, RecipeError};
use crate::models::Model;
use crate::optim::Ad;
use crate::run::grads::{StepGrads, read_count};
use crate::run::step::Peers;

/// A step on the device path: the device optimizer's step, which the optimizer type knows.
pub(crate) type DeviceStep<B, O> = fn(
    &mut DeviceLossScaler<MixedPrecision<B>>,
    &mut O,
    f64,
    Model<Ad<B>>,
    GradientsParams,
    Tensor<Ad<B>, 1>,
) -> (Model<Ad<B>>, Result<Vec<StepOutcome>, StepError>);

/// The device path as the optimizer hands it to the loop: how to step, and how often the
/// host reads.
pub(crate) struct OnDevice<B: Backend, O> {
    pub(crate) every: usize,
    pub(crate) step: DeviceStep<B, O>,
}

/// What a step's metrics row says besides its outcome, known when the step is taken.
pub(crate) struct StepInfo {
    pub(crate) step: u64,
    pub(crate) epoch: u64,
    pub(crate) lr: f64,
    /// Predictions the step's accuracy counts over.
    pub(crate) predictions: usize,
    pub(crate) took: Duration,
}

/// A step whose outcome the host knows: what its metrics row is made of.
pub(crate) struct Decided {
    pub(crate) info: StepInfo,
    pub(crate) outcome: StepOutcome,
    pub(crate) correct: Option<i64>,
    pub(crate) cause: Option<SkipCause>,
}

/// A step taken on the device path and not read yet.
pub(crate) struct Unread<B: Backend> {
    info: StepInfo,
    correct: Option<Tensor<Ad<B>, 1, Int>>,
}

/// The probe of a skipped step on the host-read path (`None`: no probe for this run).
pub(crate) type SkipProbe<'a, B> =
    &'a dyn Fn(&Model<Ad<B>>, &StepOutcome) -> Result<Option<SkipCause>, Error>;

/// The loss scaler of the loop, and what its way of reading needs.
pub(crate) enum Scaling<B: Backend, O> {
    /// One host read per step.
    HostRead(LossScaler),
    /// The skip decided on the device, the outcomes read later.
    OnDevice {
        scaler: DeviceLossScaler<MixedPrecision<B>>,
        step: DeviceStep<B, O>,
        /// The steps taken and not read yet, oldest first.
        unread: VecDeque<Unread<B>>,
        /// The last step whose parameters were checked finite.
        checked_through: u64,
    },
}

impl<B, O> Scaling<B, O>
where
    B: Backend,
    O: Optimizer<Model<Ad<B>>, Ad<B>>,
{
    /// The scaling of a run that starts after step `start`, on `device`'s path when
    /// `on_device` is given.
    pub(crate) fn new(
        scaler: LossScaler,
        on_device: Option<OnDevice<B, O>>,
        device: &MpDevice<B>,
        start: u64,
    ) -> Result<Self, RecipeError> {
        Ok(match on_device {
            None => Self::HostRead(scaler),
            Some(path) => Self::OnDevice {
                scaler: DeviceLossScaler::new(scaler, device)
                    .map_err(|e| RecipeError::new("sync_every", e.to_string()))?
                    .with_sync_every(path.every)
                    // The rows and skip lines name a skipped step's parameters, as on the host.
                    .with_overflow_names(true),
                step: path.step,
                unread: VecDeque::new(),
                checked_through: start,
            },
        })
    }

    /// The loss multiplied by the scale.
    pub(crate) fn scale_loss(&self, loss: Tensor<Ad<B>, 1>) -> Tensor<Ad<B>, 1> {
        match self {
            Self::HostRead(scaler) => scaler.scale_loss(loss),
            Self::OnDevice { scaler, .. } => scaler.scale_loss(loss),
        }
    }

    /// Takes a step: the model after it, and the steps whose outcomes the host now knows,
    /// oldest first (this one on the host-read path; on the device path, those of a read,
    /// if the step made one). `info` describes the step once it is taken; `read_all` reads
    /// every pending step (a checkpoint, the run's last step); `peers` and `probe` serve the
    /// host-read path (burn-collective's all-reduce under `ddp`, the skip-cause probe).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn step(
        &mut self,
        optim: &mut O,
        lr: f64,
        model: Model<Ad<B>>,
        grads: StepGrads<B>,
        info: &dyn Fn() -> StepInfo,
        read_all: bool,
        peers: Peers<'_>,
        probe: SkipProbe<'_, B>,
    ) -> Result<(Model<Ad<B>>, Vec<Decided>), Error> {
        let failed = |source| Error::Step {
            step: info().step,
            source,
        };
        let StepGrads {
            grads,
            scaled_loss,
            correct,
        } = grads;
        match self {
            Self::HostRead(scaler) => {
                let (model, outcome) = match peers {
                    #[cfg(feature = "ddp")]
                    Peers::Collective { peer, .. } => scaler.step_all_reduced(
                        burn::collective::PeerId::from(peer),
                        optim,
                        lr,
                        model,
                        grads,
                        scaled_loss,
                    ),
                    _ => scaler.step_with_loss(optim, lr, model, grads, scaled_loss),
                };
                let outcome = outcome.map_err(failed)?;
                let cause = probe(&model, &outcome)?;
                let decided = Decided {
                    info: info(),
                    outcome,
                    correct: correct.map(read_count),
                    cause,
                };
                Ok((model, vec![decided]))
            }
            Self::OnDevice {
                scaler,
                step,
                unread,
                ..
            } => {
                let (model, learned) = step(scaler, optim, lr, model, grads, scaled_loss);
                unread.push_back(Unread {
                    info: info(),
                    correct,
                });
                let mut learned = learned.map_err(failed)?;
                // A checkpoint holds every step read, and the end of the run reads them all.
                if read_all {
                    learned.extend(scaler.sync().map_err(failed)?);
                }
                Ok((model, decide(unread, learned)?))
            }
        }
    }

    /// Whether an applied step's parameters are checked as its outcome is learned (the
    /// host-read path) rather than once per read ([`Self::check_read`]).
    pub(crate) fn checks_each_step(&self) -> bool {
        matches!(self, Self::HostRead(_))
    }

    /// The device path after a read at `step`: the parameters checked once for the steps
    /// since the last read; the step and the reason when they are not finite.
    pub(crate) fn check_read(
        &mut self,
        step: u64,
        model: &Model<Ad<B>>,
    ) -> Result<Option<(u64, String)>, Error> {
        let Self::OnDevice {
            checked_through, ..
        } = self
        else {
            return Ok(None);
        };
        let found = (!model.params_finite()?).then(|| {
            let steps = format!("{}..={step}", *checked_through + 1);
            let reason = format!("an optimizer step of steps {steps} left non-finite parameters");
            (step, reason)
        });
        *checked_through = step;
        Ok(found)
    }

    /// The scaler's state as of the last step the host knows, for a checkpoint.
    pub(crate) fn record(&self) -> LossScalerRecord {
        match self {
            Self::HostRead(scaler) => scaler.to_record(),
            Self::OnDevice { scaler, .. } => scaler.host().to_record(),
        }
    }

    /// Skipped steps in the whole run, as far as the host knows.
    pub(crate) fn skipped(&self) -> u64 {
        match self {
            Self::HostRead(scaler) => scaler.stats().skipped,
            Self::OnDevice { scaler, .. } => scaler.host().stats().skipped,
        }
    }
}

/// The unread steps the `outcomes` learned (oldest first) describe, with their counts read
/// in one transaction.
fn decide<B: Backend>(
    unread: &mut VecDeque<Unread<B>>,
    outcomes: Vec<StepOutcome>,
) -> Result<Vec<Decided>, Error> {
    let steps: Vec<Unread<B>> = unread.drain(..outcomes.len().min(unread.len())).collect();
    let mut transaction = Transaction::<MixedPrecision<B>>::default();
    let mut any = false;
    for count in steps.iter().filter_map(|s| s.correct.as_ref()) {
        transaction = transaction.register(count.clone().inner());
        any = true;
    }
    let read = match any {
        true => transaction
            .try_execute()
            .map_err(|e| Error::Internal(format!("reading the steps' counts: {e}")))?,
        false => Vec::new(),
    };
    let mut counts = read.into_iter().map(|data| {
        data.convert::<i64>()
            .to_vec::<i64>()
            .ok()
            .and_then(|v| v.first().copied())
    });
    steps
        .into_iter()
        .zip(outcomes)
        .map(|(s, outcome)| {
            let correct =
                match s.correct {
                    Some(_) => Some(counts.next().flatten().ok_or_else(|| {
                        Error::Internal("the device returned too few counts".into())
                    })?),
                    None => None,
                };
            Ok(Decided {
                info: s.info,
                outcome,
                correct,
                cause: None,
            })
        })
        .collect()
}
