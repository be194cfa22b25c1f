//! Checkpoints, written so that a run killed at any moment leaves the last good one intact.
//!
//! Layout of an output folder:
//!
//! ```text
//! <output>/.mpric.lock                              held by the run writing the folder
//! <output>/checkpoints/step-00000100/model.mpk      model record (Burn named MessagePack)
//!                                    optimizer.mpk  optimizer record
//!                                    state.mpk      step, data position, loss-scaler record,
//!                                                   the recipe, the metrics so far
//!                                    manifest.json  size and SHA-256 of the three files,
//!                                                   tensor layout of model and optimizer
//! ```
//!
//! The model record holds the parameters at the policy's param dtype (f16 under `pure_f16`).
//! `--resume` checks a checkpoint against its manifest and the recipe before loading it
//! ([`Checkpoint::verify_for`]); a newer checkpoint that fails is set aside as
//! `step-N.rejected` and the run continues from the newest one that passes.
//! The three records are MessagePack, so every float comes back bit for bit (the run state holds the
//! loss scale and the metrics of every step, and a decimal round trip through JSON is not
//! exact with every parser).
//!
//! A checkpoint is written into a hidden temporary folder (`.step-00000100.tmp`), each file
//! flushed to disk, and the folder is then renamed to its final name: a rename is atomic, so
//! a checkpoint folder is either complete or absent. Single files (metrics, plots) are written
//! the same way: `.<name>.tmp`, then a rename. Temporaries left by a killed run are removed
//! by the next run. The two most recent checkpoints are kept.

pub(crate) mod compat;
pub mod manifest;
pub mod record_layout;

use std::fs;
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::optim::Optimizer;
use burn::record::{
    DoublePrecisionSettings, FullPrecisionSettings, HalfPrecisionSettings, NamedMpkBytesRecorder,
    PrecisionSettings, Record, Recorder, RecorderError,
};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{FloatDType, bf16};
use burn_mpric::scale::LossScalerRecord;
use serde::{Deserialize, Serialize};

use burn::backend::Flex;
use burn_mpric::scale::LossScaler;
use burn_mpric::{MixedPrecision, MpDevice, Policy};

use crate::atomic::{sync_dir, write_synced};
use crate::checkpoint::manifest::{
    FileDigest, MANIFEST_FILE, Manifest, optimizer_fits, same_layout,
};
use crate::checkpoint::record_layout::{non_finite_tensors, record_tensors};
pub use crate::data::DataPosition;
use crate::data::Sampler;
use crate::error::Error;
use crate::models::Model;
use crate::optim::{Ad, OptimizerTask, with_optimizer};
use crate::plan::Plan;
use crate::recipe::Recipe;
use crate::report::metrics::{EvalRow, StepRow};

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
    /// The number of processes of a multi-process run (`--world`); absent for one process.
    /// A resumed run must have as many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<usize>,
    /// The devices of each process of a multi-process run; absent for one process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_devices: Option<usize>,
    /// What the model reads and gives, with the training split's standardization (absent
    /// in checkpoints written before it was saved: the recipe's data gives it then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<crate::schema::Schema>,
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
        self.dir.join(MODEL_FILE)
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
        self.dir.join(OPTIMIZER_FILE)
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
        self.dir.join(STATE_FILE)
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
        self.parse_state(bytes)
    }

    fn parse_state(&self, bytes: Vec<u8>) -> Result<TrainState, Error> {
        let path = self.state_path();
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
        load_model_bytes(model, bytes, &path, device)
    }

    /// Loads the optimizer record into `optim`.
    pub(crate) fn load_optimizer<B, O>(&self, optim: O, device: &B::Device) -> Result<O, Error>
    where
        B: AutodiffBackend,
        O: Optimizer<Model<B>, B>,
    {
        let path = self.optimizer_path();
        let bytes = fs::read(&path).map_err(|e| Error::io(&path, e))?;
        load_optimizer_bytes(optim, bytes, &path, device)
    }
}

fn load_model_bytes<B: Backend>(
    model: Model<B>,
    bytes: Vec<u8>,
    path: &Path,
    device: &B::Device,
) -> Result<Model<B>, Error> {
    {
        let record = Recorder::<B>::load(&recorder(), bytes, device).map_err(|e| {
            Error::checkpoint(path, format!("not a model record of this recipe: {e}"))
        })?;
        Ok(model.load_record(record))
    }
}

fn load_optimizer_bytes<B, O>(
    optim: O,
    bytes: Vec<u8>,
    path: &Path,
    device: &B::Device,
) -> Result<O, Error>
where
    B: AutodiffBackend,
    O: Optimizer<Model<B>, B>,
{
    {
        let record = Recorder::<B>::load(&recorder(), bytes, device).map_err(|e| {
            Error::checkpoint(path, format!("not an optimizer record of this recipe: {e}"))
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

/// Why a checkpoint cannot be resumed.
///
/// ```
/// use burn_mpric_train::checkpoint::Rejection;
///
/// let r = Rejection::Invalid("model.mpk: content differs from the manifest".into());
/// assert_eq!(r.to_string(), "model.mpk: content differs from the manifest");
/// ```
#[derive(Debug)]
pub enum Rejection {
    /// The checkpoint is damaged or does not prove itself (a file missing, truncated or
    /// replaced, a layout that does not fit, non-finite parameters). An older checkpoint may
    /// still serve.
    Invalid(String),
    /// The checkpoint is sound but the run's recipe differs from the one it was written with.
    Incompatible(Error),
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejection::Invalid(message) => f.write_str(message),
            Rejection::Incompatible(err) => write!(f, "{err}"),
        }
    }
}

impl Checkpoint {
    /// Loads every part of the checkpoint on the CPU (Flex) and checks it against the recipe
    /// it was written with: see [`verify_for`](Self::verify_for).
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
    /// let err = checkpoint.verify().unwrap_err().to_string();
    /// assert!(err.contains("optimizer.mpk: 9 bytes where the manifest says"), "{err}");
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), burn_mpric_train::Error>(())
    /// ```
    pub fn verify(&self) -> Result<Verified, Error> {
        let (manifest, state, files) = self.read_proven().map_err(|e| self.invalid(e))?;
        let plan = Plan::new(
            state.recipe.clone(),
            &self.state_path().display().to_string(),
        )?;
        self.fits(&plan, manifest, state, files)
            .map_err(|e| self.invalid(e))
    }

    /// Checks that the checkpoint can resume a run of `plan`, and loads it on the CPU (Flex):
    ///
    /// 1. `manifest.json` lists every file with its size and SHA-256, and the files match;
    /// 2. the run state is readable, of this version, consistent with the folder's step, and
    ///    its recipe equals `plan`'s up to the fields a resumed run may change
    ///    ([`Rejection::Incompatible`] otherwise);
    /// 3. the model record holds exactly the tensors (names, shapes) of `plan`'s model, and the
    ///    dtypes the manifest lists; the optimizer record holds state only for parameters of
    ///    that model, each with its parameter's shape; the loss-scaler record and the data
    ///    position are valid;
    /// 4. both records load, and every parameter is finite.
    ///
    /// Nothing that fails a check reaches Burn's `load_record`, which panics on a record that
    /// does not fit.
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("mpric-doc-verify-for-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// use burn_mpric_train::checkpoint::{Rejection, latest};
    /// use burn_mpric_train::recipe::{MlpConfig, ModelConfig};
    /// use burn_mpric_train::{Plan, Recipe, train};
    ///
    /// let mut recipe = Recipe::example();
    /// recipe.output = dir.clone();
    /// let plan = Plan::new(recipe.clone(), "doc")?;
    /// train(&plan, &Default::default())?;
    /// let checkpoint = latest(&dir)?.unwrap();
    /// assert!(checkpoint.verify_for(&plan).is_ok());
    ///
    /// recipe.model = ModelConfig::Mlp(MlpConfig { hidden: vec![32] });
    /// let other = Plan::new(recipe, "doc")?;
    /// assert!(matches!(checkpoint.verify_for(&other), Err(Rejection::Incompatible(_))));
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), burn_mpric_train::Error>(())
    /// ```
    pub fn verify_for(&self, plan: &Plan) -> Result<Verified, Rejection> {
        self.verify_with(plan, crate::checkpoint::compat::compatible)
    }

    /// As [`verify_for`](Self::verify_for), for using the model rather than resuming the
    /// run: the recipe must agree on the model, the data and the seed only (the backend,
    /// the policy and the optimizer may differ).
    pub fn verify_model_for(&self, plan: &Plan) -> Result<Verified, Rejection> {
        self.verify_with(plan, crate::checkpoint::compat::same_model)
    }

    fn verify_with(
        &self,
        plan: &Plan,
        same: fn(&Recipe, &Recipe) -> Result<(), Error>,
    ) -> Result<Verified, Rejection> {
        let (manifest, state, files) = self.read_proven().map_err(Rejection::Invalid)?;
        same(&state.recipe, &plan.recipe).map_err(Rejection::Incompatible)?;
        crate::checkpoint::compat::same_data(manifest.dataset.as_ref(), plan)
            .map_err(Rejection::Incompatible)?;
        self.fits(plan, manifest, state, files)
            .map_err(Rejection::Invalid)
    }

    fn invalid(&self, message: String) -> Error {
        Error::checkpoint(&self.dir, message)
    }

    /// Steps 1 and 2 of [`verify_for`](Self::verify_for), without the recipe comparison.
    fn read_proven(&self) -> Result<(Manifest, TrainState, RecordFiles), String> {
        let manifest = Manifest::read(&self.dir)?;
        if manifest.step != self.step {
            return Err(format!(
                "{MANIFEST_FILE}: written for step {}, in the folder of step {}",
                manifest.step, self.step
            ));
        }
        let state = manifest.read_file(&self.dir, STATE_FILE)?;
        let state = self.parse_state(state).map_err(|e| match e {
            Error::Checkpoint { message, .. } => format!("{STATE_FILE}: {message}"),
            other => other.to_string(),
        })?;
        let model = manifest.read_file(&self.dir, MODEL_FILE)?;
        let optimizer = manifest.read_file(&self.dir, OPTIMIZER_FILE)?;
        Ok((manifest, state, RecordFiles { model, optimizer }))
    }

    /// Steps 3 and 4 of [`verify_for`](Self::verify_for).
    fn fits(
        &self,
        plan: &Plan,
        manifest: Manifest,
        state: TrainState,
        files: RecordFiles,
    ) -> Result<Verified, String> {
        let model_layout =
            record_tensors(&files.model).map_err(|e| format!("{MODEL_FILE}: {e}"))?;
        if model_layout != manifest.model {
            return Err(format!(
                "{MODEL_FILE}: its tensors differ from the ones {MANIFEST_FILE} lists"
            ));
        }
        let optimizer_layout =
            record_tensors(&files.optimizer).map_err(|e| format!("{OPTIMIZER_FILE}: {e}"))?;
        if optimizer_layout != manifest.optimizer {
            return Err(format!(
                "{OPTIMIZER_FILE}: its tensors differ from the ones {MANIFEST_FILE} lists"
            ));
        }
        let device = MixedPrecision::<Flex>::device(Default::default(), Policy::F32)
            .map_err(|e| format!("the CPU device: {e}"))?;
        let fresh = Model::<Flex>::init(&plan.recipe.model, plan.data.dims(), &Default::default());
        let expected = Recorder::<Flex>::record(&recorder(), fresh.into_record(), ())
            .map_err(|e| format!("the recipe's model record: {e}"))?;
        let mut expected = record_tensors(&expected)?;
        // Names and shapes come from the recipe; dtypes from the policy the run resolved.
        for (want, got) in expected.iter_mut().zip(&model_layout) {
            want.dtype.clone_from(&got.dtype);
        }
        same_layout(&model_layout, &expected, MODEL_FILE)?;
        for (name, layout) in [
            (MODEL_FILE, &model_layout),
            (OPTIMIZER_FILE, &optimizer_layout),
        ] {
            if let Some(t) = layout
                .iter()
                .find(|t| !matches!(t.dtype.as_str(), "F64" | "F32" | "F16" | "BF16"))
            {
                return Err(format!(
                    "{name}: `{}` is {}, not a float dtype",
                    t.path, t.dtype
                ));
            }
        }
        optimizer_fits(&optimizer_layout, &model_layout)?;
        for (name, bytes) in [
            (MODEL_FILE, &files.model),
            (OPTIMIZER_FILE, &files.optimizer),
        ] {
            if let Some((path, bad)) = non_finite_tensors(bytes)?.first() {
                return Err(format!(
                    "{name}: `{path}` holds {bad} non-finite values (NaN or infinity); a checkpoint must hold finite values"
                ));
            }
        }
        LossScaler::from_record(state.scaler.clone()).map_err(|e| format!("{STATE_FILE}: {e}"))?;
        if !Sampler::fits(&plan.data, state.data) {
            return Err(format!(
                "{STATE_FILE}: the data position lies outside the training split"
            ));
        }

        struct Load<'a> {
            plan: &'a Plan,
            files: RecordFiles,
            dir: &'a Path,
            device: MpDevice<Flex>,
        }
        impl OptimizerTask<Flex> for Load<'_> {
            type Output = Result<Vec<Vec<f32>>, Error>;
            fn run<O: Optimizer<Model<Ad<Flex>>, Ad<Flex>>>(self, optim: O) -> Self::Output {
                let model = Model::<Ad<Flex>>::init(
                    &self.plan.recipe.model,
                    self.plan.data.dims(),
                    &self.device,
                );
                let model = load_model_bytes(
                    model,
                    self.files.model,
                    &self.dir.join(MODEL_FILE),
                    &self.device,
                )?;
                load_optimizer_bytes(
                    optim,
                    self.files.optimizer,
                    &self.dir.join(OPTIMIZER_FILE),
                    &self.device,
                )?;
                Ok(model.param_values())
            }
        }
        let params = with_optimizer::<Flex, _>(
            &state.recipe,
            Load {
                plan,
                files,
                dir: &self.dir,
                device,
            },
        )
        .map_err(|e| e.to_string())?;
        for (tensor, values) in model_layout.iter().zip(&params) {
            if let Some(bad) = values.iter().find(|v| !v.is_finite()) {
                return Err(format!(
                    "{MODEL_FILE}: parameter `{}` holds {bad}; a checkpoint must hold finite parameters",
                    tensor.path
                ));
            }
        }
        Ok(Verified { state, params })
    }
}

/// The two record files of a checkpoint, read and proven against its manifest.
struct RecordFiles {
    model: Vec<u8>,
    optimizer: Vec<u8>,
}

const MODEL_FILE: &str = "model.mpk";
const OPTIMIZER_FILE: &str = "optimizer.mpk";
const STATE_FILE: &str = "state.mpk";

/// Serializes a record with floats at `param` (the policy's param dtype), so that a checkpoint
/// holds parameters at the dtype they train in: f16 under `pure_f16`.
fn record_at<B: Backend, R: Record<B>>(
    record: R,
    param: FloatDType,
) -> Result<Vec<u8>, RecorderError> {
    match param {
        FloatDType::F16 => Recorder::<B>::record(
            &NamedMpkBytesRecorder::<HalfPrecisionSettings>::new(),
            record,
            (),
        ),
        FloatDType::BF16 => Recorder::<B>::record(
            &NamedMpkBytesRecorder::<Bf16PrecisionSettings>::new(),
            record,
            (),
        ),
        FloatDType::F64 => Recorder::<B>::record(
            &NamedMpkBytesRecorder::<DoublePrecisionSettings>::new(),
            record,
            (),
        ),
        _ => Recorder::<B>::record(&recorder(), record, ()),
    }
}

/// Records floats as bf16 (Burn ships f16, f32 and f64 settings).
#[derive(Debug, Default, Clone)]
struct Bf16PrecisionSettings;

impl PrecisionSettings for Bf16PrecisionSettings {
    type FloatElem = bf16;
    type IntElem = i32;
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

/// Checks before the first step that checkpoints can be written: creates the checkpoints
/// folder and writes (then removes) a small file in it.
pub(crate) fn preflight(output: &Path) -> Result<(), Error> {
    let dir = checkpoints_dir(output);
    fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let probe = dir.join(".preflight.tmp");
    write_synced(&probe, b"mpric").map_err(|e| match e {
        Error::Io { source, .. } => Error::Io {
            path: dir.clone(),
            source: std::io::Error::new(
                source.kind(),
                format!("checkpoints cannot be written here: {source}"),
            ),
        },
        other => other,
    })?;
    fs::remove_file(&probe).map_err(|e| Error::io(&probe, e))
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

/// Writes a checkpoint of `model` (at the param dtype `param`), `optim` and `state` (at
/// `state.step`) with its manifest into the output folder atomically, then removes all but the [`KEEP_CHECKPOINTS`] most recent ones.
pub(crate) fn save<B, O>(
    output: &Path,
    model: &Model<B>,
    optim: &O,
    state: &TrainState,
    param: FloatDType,
    dataset: Option<&FileDigest>,
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

    let model_bytes = record_at::<B, _>(model.clone().into_record(), param)
        .map_err(|e| Error::Internal(format!("model record: {e}")))?;
    let optim_bytes = Recorder::<B>::record(&recorder(), optim.to_record(), ())
        .map_err(|e| Error::Internal(format!("optimizer record: {e}")))?;
    let state_bytes = Recorder::<B>::record(&recorder(), state.clone(), ())
        .map_err(|e| Error::Internal(format!("run state: {e}")))?;
    // A finite model can sit on non-finite optimizer state (an Adam moment that overflowed
    // makes every later update 0); such a checkpoint would be refused on resume, so the run
    // stops instead of writing it.
    for (name, bytes) in [(MODEL_FILE, &model_bytes), (OPTIMIZER_FILE, &optim_bytes)] {
        let bad = non_finite_tensors(bytes).map_err(Error::Internal)?;
        if let Some((path, count)) = bad.first() {
            return Err(Error::Diverged {
                step: state.step,
                reason: format!(
                    "{count} values of `{path}` in the {} are not finite",
                    if name == MODEL_FILE {
                        "model"
                    } else {
                        "optimizer state"
                    }
                ),
                last_checkpoint: None,
            });
        }
    }
    let files = [
        (MODEL_FILE, model_bytes.as_slice()),
        (OPTIMIZER_FILE, optim_bytes.as_slice()),
        (STATE_FILE, state_bytes.as_slice()),
    ];
    let mut manifest = Manifest::new(state.step, &files, Some((&model_bytes, &optim_bytes)))
        .map_err(Error::Internal)?;
    manifest.dataset = dataset.cloned();
    for (name, bytes) in files {
        write_synced(&tmp.join(name), bytes)?;
    }
    // Written last: a folder with a manifest has all its files.
    write_synced(&tmp.join(MANIFEST_FILE), manifest.to_json().as_bytes())?;
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
