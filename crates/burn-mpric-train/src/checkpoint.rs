//! Checkpoints, written so that a run killed at any moment leaves the last good one intact.
//!
//! Layout of an output folder:
//!
//! ```text
//! <output>/checkpoints/step-00000100/model.mpk      model record (Burn named MessagePack, f32)
//!                                    optimizer.mpk  optimizer record
//!                                    state.mpk      step, data position, loss-scaler record,
//!                                                   the recipe, the metrics so far
//! ```
//!
//! All three are MessagePack, so every float comes back bit for bit (the run state holds the
//! loss scale and the metrics of every step, and a decimal round trip through JSON is not
//! exact with every parser).
//!
//! A checkpoint is written into a hidden temporary folder (`.step-00000100.tmp`), each file
//! flushed to disk, and the folder is then renamed to its final name: a rename is atomic, so
//! a checkpoint folder is either complete or absent. Single files (metrics, plots) are written
//! the same way: `.<name>.tmp`, then a rename. Temporaries left by a killed run are removed
//! by the next run. The two most recent checkpoints are kept.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::optim::Optimizer;
use burn::record::{
    FullPrecisionSettings, NamedMpkBytesRecorder, PrecisionSettings, Record, Recorder,
};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_mpric::scale::LossScalerRecord;
use serde::{Deserialize, Serialize};

use burn::backend::Flex;
use burn_mpric::scale::LossScaler;
use burn_mpric::{MixedPrecision, MpDevice, Policy};

use crate::data::DataPosition;
use crate::error::Error;
use crate::metrics::{EvalRow, StepRow};
use crate::models::Model;
use crate::plan::Plan;
use crate::recipe::Recipe;
use crate::train::{Ad, OptimizerTask, with_optimizer};

/// The version of the run state this crate writes and reads.
///
/// ```
/// assert_eq!(burn_mpric_train::checkpoint::STATE_FORMAT_VERSION, 1);
/// ```
pub const STATE_FORMAT_VERSION: u32 = 1;

/// How many checkpoints an output folder keeps.
///
/// ```
/// assert_eq!(burn_mpric_train::checkpoint::KEEP_CHECKPOINTS, 2);
/// ```
pub const KEEP_CHECKPOINTS: usize = 2;

/// Everything about a run besides the model and optimizer records.
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("mpric-doc-state-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// # let mut recipe = burn_mpric_train::Recipe::example();
/// # recipe.output = dir.clone();
/// # let plan = burn_mpric_train::Plan::new(recipe, "doc")?;
/// # burn_mpric_train::train(&plan, &Default::default())?;
/// let state = burn_mpric_train::checkpoint::latest(&dir)?.unwrap().read_state()?;
/// assert_eq!((state.step, state.total_steps, state.steps.len()), (20, 20, 20));
/// assert_eq!(state.recipe.output, dir);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    /// [`STATE_FORMAT_VERSION`].
    pub format_version: u32,
    /// Steps done.
    pub step: u64,
    /// Steps of the whole run.
    pub total_steps: u64,
    /// Where the batch order stands.
    pub data: DataPosition,
    /// The loss scaler (scale, counters, configuration).
    pub scaler: LossScalerRecord,
    /// The recipe of the run (after overrides).
    pub recipe: Recipe,
    /// Metrics of every step so far.
    pub steps: Vec<StepRow>,
    /// Held-out evaluations so far.
    pub eval: Vec<EvalRow>,
}

impl<B: Backend> Record<B> for TrainState {
    type Item<S: PrecisionSettings> = TrainState;

    fn into_item<S: PrecisionSettings>(self) -> Self::Item<S> {
        self
    }

    fn from_item<S: PrecisionSettings>(item: Self::Item<S>, _device: &B::Device) -> Self {
        item
    }
}

/// A checkpoint folder on disk.
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("mpric-doc-checkpoint-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// # let mut recipe = burn_mpric_train::Recipe::example();
/// # recipe.output = dir.clone();
/// # let plan = burn_mpric_train::Plan::new(recipe, "doc")?;
/// # burn_mpric_train::train(&plan, &Default::default())?;
/// use burn_mpric_train::checkpoint::latest;
///
/// let checkpoint = latest(&dir)?.expect("the run wrote a checkpoint");
/// assert_eq!(checkpoint.step, 20);
/// assert!(checkpoint.dir.ends_with("checkpoints/step-00000020"));
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The folder.
    pub dir: PathBuf,
    /// The step it was written after.
    pub step: u64,
}

impl Checkpoint {
    /// The model record.
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("mpric-doc-model-path-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// # let mut recipe = burn_mpric_train::Recipe::example();
    /// # recipe.output = dir.clone();
    /// # let plan = burn_mpric_train::Plan::new(recipe, "doc")?;
    /// # burn_mpric_train::train(&plan, &Default::default())?;
    /// let checkpoint = burn_mpric_train::checkpoint::latest(&dir)?.unwrap();
    /// assert!(checkpoint.model_path().is_file());
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), burn_mpric_train::Error>(())
    /// ```
    pub fn model_path(&self) -> PathBuf {
        self.dir.join("model.mpk")
    }

    /// The optimizer record.
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("mpric-doc-optim-path-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// # let mut recipe = burn_mpric_train::Recipe::example();
    /// # recipe.output = dir.clone();
    /// # let plan = burn_mpric_train::Plan::new(recipe, "doc")?;
    /// # burn_mpric_train::train(&plan, &Default::default())?;
    /// let checkpoint = burn_mpric_train::checkpoint::latest(&dir)?.unwrap();
    /// assert!(checkpoint.optimizer_path().is_file());
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), burn_mpric_train::Error>(())
    /// ```
    pub fn optimizer_path(&self) -> PathBuf {
        self.dir.join("optimizer.mpk")
    }

    /// The run state.
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("mpric-doc-state-path-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// # let mut recipe = burn_mpric_train::Recipe::example();
    /// # recipe.output = dir.clone();
    /// # let plan = burn_mpric_train::Plan::new(recipe, "doc")?;
    /// # burn_mpric_train::train(&plan, &Default::default())?;
    /// let checkpoint = burn_mpric_train::checkpoint::latest(&dir)?.unwrap();
    /// assert!(checkpoint.state_path().ends_with("state.mpk"));
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), burn_mpric_train::Error>(())
    /// ```
    pub fn state_path(&self) -> PathBuf {
        self.dir.join("state.mpk")
    }

    /// Reads and checks the run state.
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("mpric-doc-read-state-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// # let mut recipe = burn_mpric_train::Recipe::example();
    /// # recipe.output = dir.clone();
    /// # let plan = burn_mpric_train::Plan::new(recipe, "doc")?;
    /// # burn_mpric_train::train(&plan, &Default::default())?;
    /// let checkpoint = burn_mpric_train::checkpoint::latest(&dir)?.unwrap();
    /// let state = checkpoint.read_state()?;
    /// assert_eq!(state.step, checkpoint.step);
    /// std::fs::write(checkpoint.state_path(), b"garbage").unwrap();
    /// assert!(checkpoint.read_state().is_err());
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), burn_mpric_train::Error>(())
    /// ```
    pub fn read_state(&self) -> Result<TrainState, Error> {
        let path = self.state_path();
        let bytes = fs::read(&path).map_err(|e| Error::io(&path, e))?;
        let state: TrainState = Recorder::<Flex>::load(&recorder(), bytes, &Default::default())
            .map_err(|e| Error::checkpoint(&path, format!("not a valid run state: {e}")))?;
        if state.format_version != STATE_FORMAT_VERSION {
            return Err(Error::checkpoint(
                &path,
                format!(
                    "run state format {} is not supported (expected {STATE_FORMAT_VERSION})",
                    state.format_version
                ),
            ));
        }
        if state.step != self.step || state.steps.len() as u64 != state.step {
            return Err(Error::checkpoint(
                &path,
                format!(
                    "inconsistent run state: folder step {}, state step {}, {} metric rows",
                    self.step,
                    state.step,
                    state.steps.len()
                ),
            ));
        }
        Ok(state)
    }

    /// Loads the model record into `model` (a model of the same recipe).
    pub(crate) fn load_model<B: Backend>(
        &self,
        model: Model<B>,
        device: &B::Device,
    ) -> Result<Model<B>, Error> {
        let path = self.model_path();
        let bytes = fs::read(&path).map_err(|e| Error::io(&path, e))?;
        let record = Recorder::<B>::load(&recorder(), bytes, device).map_err(|e| {
            Error::checkpoint(&path, format!("not a model record of this recipe: {e}"))
        })?;
        Ok(model.load_record(record))
    }

    /// Loads the optimizer record into `optim`.
    pub(crate) fn load_optimizer<B, O>(&self, optim: O, device: &B::Device) -> Result<O, Error>
    where
        B: AutodiffBackend,
        O: Optimizer<Model<B>, B>,
    {
        let path = self.optimizer_path();
        let bytes = fs::read(&path).map_err(|e| Error::io(&path, e))?;
        let record = Recorder::<B>::load(&recorder(), bytes, device).map_err(|e| {
            Error::checkpoint(
                &path,
                format!("not an optimizer record of this recipe: {e}"),
            )
        })?;
        Ok(optim.load_record(record))
    }
}

/// What [`Checkpoint::verify`] read.
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("mpric-doc-verified-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// # let mut recipe = burn_mpric_train::Recipe::example();
/// # recipe.output = dir.clone();
/// # let plan = burn_mpric_train::Plan::new(recipe, "doc")?;
/// # burn_mpric_train::train(&plan, &Default::default())?;
/// let verified = burn_mpric_train::checkpoint::latest(&dir)?.unwrap().verify()?;
/// // The MLP of `Recipe::example()`: 4 inputs, 64 hidden, 3 classes (weights and biases).
/// let sizes: Vec<usize> = verified.params.iter().map(Vec::len).collect();
/// assert_eq!(sizes, vec![4 * 64, 64, 64 * 3, 3]);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Verified {
    /// The run state.
    pub state: TrainState,
    /// Every float parameter of the model, as f32, in module order.
    pub params: Vec<Vec<f32>>,
}

impl Checkpoint {
    /// Loads every part of the checkpoint on the CPU (Flex): the run state, the loss-scaler
    /// record, the model record into a model of the saved recipe, and the optimizer record
    /// into its optimizer. Returns the state and the parameters.
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("mpric-doc-verify-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// # let mut recipe = burn_mpric_train::Recipe::example();
    /// # recipe.output = dir.clone();
    /// # let plan = burn_mpric_train::Plan::new(recipe, "doc")?;
    /// # burn_mpric_train::train(&plan, &Default::default())?;
    /// let checkpoint = burn_mpric_train::checkpoint::latest(&dir)?.unwrap();
    /// assert!(checkpoint.verify().is_ok());
    /// std::fs::write(checkpoint.optimizer_path(), b"truncated").unwrap();
    /// assert!(checkpoint.verify().is_err());
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), burn_mpric_train::Error>(())
    /// ```
    pub fn verify(&self) -> Result<Verified, Error> {
        let state = self.read_state()?;
        LossScaler::from_record(state.scaler.clone())
            .map_err(|e| Error::checkpoint(&self.state_path(), e))?;
        let plan = Plan::new(
            state.recipe.clone(),
            &self.state_path().display().to_string(),
        )?;
        let device = MixedPrecision::<Flex>::device(Default::default(), Policy::F32)
            .map_err(|e| Error::Internal(format!("the CPU device: {e}")))?;

        struct Load<'a> {
            checkpoint: &'a Checkpoint,
            plan: &'a Plan,
            device: MpDevice<Flex>,
        }
        impl OptimizerTask<Flex> for Load<'_> {
            type Output = Result<Vec<Vec<f32>>, Error>;
            fn run<O: Optimizer<Model<Ad<Flex>>, Ad<Flex>>>(self, optim: O) -> Self::Output {
                let model =
                    Model::<Ad<Flex>>::init(&self.plan.model, self.plan.data.dims(), &self.device);
                let model = self.checkpoint.load_model(model, &self.device)?;
                self.checkpoint.load_optimizer(optim, &self.device)?;
                Ok(model.param_values())
            }
        }
        let params = with_optimizer::<Flex, _>(
            plan.optimizer,
            Load {
                checkpoint: self,
                plan: &plan,
                device,
            },
        )?;
        Ok(Verified { state, params })
    }
}

fn recorder() -> NamedMpkBytesRecorder<FullPrecisionSettings> {
    NamedMpkBytesRecorder::<FullPrecisionSettings>::new()
}

/// The checkpoints folder of an output folder.
///
/// ```
/// use burn_mpric_train::checkpoint::checkpoints_dir;
///
/// assert!(checkpoints_dir("runs/x".as_ref()).ends_with("runs/x/checkpoints"));
/// ```
pub fn checkpoints_dir(output: &Path) -> PathBuf {
    output.join("checkpoints")
}

fn parse_step(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("step-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The complete checkpoints of an output folder, oldest first.
///
/// ```
/// use burn_mpric_train::checkpoint::list;
///
/// assert!(list("no/such/output".as_ref()).unwrap().is_empty());
/// ```
pub fn list(output: &Path) -> Result<Vec<Checkpoint>, Error> {
    let dir = checkpoints_dir(output);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(&dir, e))?;
        let Some(step) = entry.file_name().to_str().and_then(parse_step) else {
            continue;
        };
        if entry.path().is_dir() {
            found.push(Checkpoint {
                dir: entry.path(),
                step,
            });
        }
    }
    found.sort_by_key(|c| c.step);
    Ok(found)
}

/// The most recent complete checkpoint, if any.
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("mpric-doc-latest-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// # let mut recipe = burn_mpric_train::Recipe::example();
/// # recipe.output = dir.clone();
/// # let plan = burn_mpric_train::Plan::new(recipe, "doc")?;
/// # burn_mpric_train::train(&plan, &Default::default())?;
/// use burn_mpric_train::checkpoint::latest;
///
/// assert_eq!(latest(&dir)?.unwrap().step, 20);
/// assert!(latest(&dir.join("elsewhere"))?.is_none());
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
pub fn latest(output: &Path) -> Result<Option<Checkpoint>, Error> {
    Ok(list(output)?.pop())
}

/// Removes the temporaries (`.*.tmp`) a killed run left in the output folder and in its
/// checkpoints folder.
pub(crate) fn clean_temporaries(output: &Path) -> Result<(), Error> {
    for dir in [output.to_path_buf(), checkpoints_dir(output)] {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') && name.ends_with(".tmp") {
                let path = entry.path();
                let result = if path.is_dir() {
                    fs::remove_dir_all(&path)
                } else {
                    fs::remove_file(&path)
                };
                result.map_err(|e| Error::io(&path, e))?;
            }
        }
    }
    Ok(())
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let mut file = File::create(path).map_err(|e| Error::io(path, e))?;
    file.write_all(bytes).map_err(|e| Error::io(path, e))?;
    file.sync_all().map_err(|e| Error::io(path, e))
}

fn sync_dir(dir: &Path) {
    // Makes the rename durable across a power loss; not needed against a killed process,
    // and not possible on every platform, so failures are ignored.
    if let Ok(file) = File::open(dir) {
        let _ = file.sync_all();
    }
}

/// Writes `bytes` to `path` atomically: a temporary file next to it (`.<name>.tmp`),
/// flushed, then renamed over `path`.
///
/// ```
/// use burn_mpric_train::checkpoint::write_atomic;
///
/// let path = std::env::temp_dir().join(format!("mpric-doc-{}.txt", std::process::id()));
/// write_atomic(&path, b"one").unwrap();
/// write_atomic(&path, b"two").unwrap();
/// assert_eq!(std::fs::read(&path).unwrap(), b"two");
/// # std::fs::remove_file(path).unwrap();
/// ```
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let name = path
        .file_name()
        .ok_or_else(|| Error::Internal(format!("{} has no file name", path.display())))?;
    let parent = path.parent().unwrap_or_else(|| Path::new("."));
    let tmp = parent.join(format!(".{}.tmp", name.to_string_lossy()));
    write_synced(&tmp, bytes)?;
    fs::rename(&tmp, path).map_err(|e| Error::io(path, e))?;
    sync_dir(parent);
    Ok(())
}

/// Writes a checkpoint of `model`, `optim` and `state` (at `state.step`) into the output
/// folder atomically, then removes all but the [`KEEP_CHECKPOINTS`] most recent ones.
pub(crate) fn save<B, O>(
    output: &Path,
    model: &Model<B>,
    optim: &O,
    state: &TrainState,
) -> Result<Checkpoint, Error>
where
    B: AutodiffBackend,
    O: Optimizer<Model<B>, B>,
{
    let dir = checkpoints_dir(output);
    fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let name = format!("step-{:08}", state.step);
    let tmp = dir.join(format!(".{name}.tmp"));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    }
    fs::create_dir(&tmp).map_err(|e| Error::io(&tmp, e))?;

    let model_bytes = Recorder::<B>::record(&recorder(), model.clone().into_record(), ())
        .map_err(|e| Error::Internal(format!("model record: {e}")))?;
    write_synced(&tmp.join("model.mpk"), &model_bytes)?;
    let optim_bytes = Recorder::<B>::record(&recorder(), optim.to_record(), ())
        .map_err(|e| Error::Internal(format!("optimizer record: {e}")))?;
    write_synced(&tmp.join("optimizer.mpk"), &optim_bytes)?;
    let state_bytes = Recorder::<B>::record(&recorder(), state.clone(), ())
        .map_err(|e| Error::Internal(format!("run state: {e}")))?;
    write_synced(&tmp.join("state.mpk"), &state_bytes)?;
    sync_dir(&tmp);

    let path = dir.join(&name);
    if path.exists() {
        remove_checkpoint_dir(&path)?;
    }
    fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
    sync_dir(&dir);

    let all = list(output)?;
    let old = all.len().saturating_sub(KEEP_CHECKPOINTS);
    for checkpoint in &all[..old] {
        remove_checkpoint_dir(&checkpoint.dir)?;
    }
    Ok(Checkpoint {
        dir: path,
        step: state.step,
    })
}

/// Removes a checkpoint folder without ever leaving a partial one under a checkpoint name:
/// it is first renamed to a temporary (atomic), then deleted.
fn remove_checkpoint_dir(path: &Path) -> Result<(), Error> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let doomed = path.with_file_name(format!(".{name}.old.tmp"));
    if doomed.exists() {
        fs::remove_dir_all(&doomed).map_err(|e| Error::io(&doomed, e))?;
    }
    fs::rename(path, &doomed).map_err(|e| Error::io(path, e))?;
    fs::remove_dir_all(&doomed).map_err(|e| Error::io(&doomed, e))
}
