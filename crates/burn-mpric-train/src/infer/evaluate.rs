//! `mpric evaluate`: a trained model's loss and metrics on the held-out split (the numbers
//! the training run recorded for that checkpoint, at the training policy) or on a file of
//! the recipe's kind, at the training policy or another one.

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::Module;
use burn::tensor::backend::Backend;
use burn_mpric::{BurnDType, MixedPrecision, MpDevice, Policy};
use serde::{Deserialize, Serialize};

use crate::data::Dataset;
use crate::error::Error;
use crate::infer::inputs::{self, Targets};
use crate::infer::{ModelTask, Trained, with_model};
use crate::models::Model;
use crate::models::evaluate::evaluate as held_out_metrics;
use crate::plan::Plan;

/// What `mpric evaluate` measured (the content of its JSON file).
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("mpric-doc-evaluation-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// use burn_mpric_train::infer::evaluate::{Evaluation, evaluate};
/// use burn_mpric_train::infer::Trained;
/// use burn_mpric_train::{Plan, Recipe, train};
///
/// let mut recipe = Recipe::example(); // an MLP on iris, 20 steps
/// recipe.output = dir.clone();
/// let plan = Plan::new(recipe, "doc")?;
/// let summary = train(&plan, &Default::default())?;
/// let trained = Trained::open(&plan, None)?;
/// let eval: Evaluation = evaluate(&plan, &trained, None, None)?;
/// assert_eq!(eval.loss, summary.eval.as_ref().unwrap().loss); // what training recorded
/// assert_eq!(eval.accuracy, summary.eval.unwrap().accuracy);
/// assert_eq!((eval.step, eval.predictions), (20, 30));
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// The recipe file.
    pub recipe: String,
    /// The checkpoint folder.
    pub checkpoint: PathBuf,
    /// The step it was written after.
    pub step: u64,
    /// The policy the model ran at, as the device resolved it.
    pub policy: String,
    /// The backend.
    pub backend: String,
    /// What was scored: the held-out split, or a file.
    pub data: String,
    /// Predictions scored (examples, or characters for text).
    pub predictions: usize,
    /// Mean loss (cross-entropy; for regression the MSE of the standardized target, the
    /// training loss). `None` when it was not finite.
    pub loss: Option<f32>,
    /// Accuracy (classification and text).
    pub accuracy: Option<f32>,
    /// `exp(loss)` (text).
    pub perplexity: Option<f64>,
    /// Mean squared error in the target's own units (regression).
    pub mse: Option<f64>,
    /// Mean absolute error in the target's own units (regression).
    pub mae: Option<f64>,
    /// The parameters' bytes at the policy's param dtype.
    pub weight_bytes: u64,
    /// Wall time of the scoring, seconds (the model loaded, the data read).
    pub seconds: f64,
}

/// Scores the model of `trained` on the held-out split (`data` None) or on the file `data`,
/// at `policy` (the recipe's when `None`).
pub fn evaluate(
    plan: &Plan,
    trained: &Trained,
    data: Option<&Path>,
    policy: Option<Policy>,
) -> Result<Evaluation, Error> {
    let (dataset, what) = match data {
        None => (None, format!("held-out split of {}", plan.data.describe())),
        Some(path) => {
            let read = inputs::read(plan, &trained.schema, path, Targets::Required, false)?;
            if let Some(note) = &read.note {
                eprintln!("note: {note}");
            }
            (Some(read.data), path.display().to_string())
        }
    };
    let scored = dataset.as_ref().unwrap_or(&plan.data);
    let task = Score {
        data: scored,
        // The run's batch size: evaluation batches of the run's size add up as its did.
        batch_size: trained.state.recipe.batch_size,
        target_std: trained
            .schema
            .scaling
            .as_ref()
            .and_then(|s| s.target)
            .map(|(_, std)| std),
    };
    let (scores, resolved) = with_model(plan, trained, policy, task)?;
    Ok(Evaluation {
        recipe: plan.label.clone(),
        checkpoint: trained.checkpoint.dir.clone(),
        step: trained.checkpoint.step,
        policy: resolved.to_string(),
        backend: format!(
            "{} {}",
            plan.recipe.backend.name,
            plan.recipe.backend.describe_devices()
        ),
        data: what,
        predictions: scores.predictions,
        loss: scores.loss,
        accuracy: scores.accuracy,
        perplexity: matches!(scored, Dataset::Text(_))
            .then(|| scores.loss.map(|l| f64::from(l).exp()))
            .flatten(),
        mse: scores.errors.map(|(mse, _)| mse),
        mae: scores.errors.map(|(_, mae)| mae),
        weight_bytes: scores.weight_bytes,
        seconds: scores.seconds,
    })
}

struct Score<'a> {
    data: &'a Dataset,
    batch_size: usize,
    /// The regression target's deviation, to report errors in its units.
    target_std: Option<f64>,
}

struct Scores {
    predictions: usize,
    loss: Option<f32>,
    accuracy: Option<f32>,
    errors: Option<(f64, f64)>,
    weight_bytes: u64,
    seconds: f64,
}

impl ModelTask for Score<'_> {
    type Output = Scores;

    fn run<B: Backend>(
        self,
        model: Model<MixedPrecision<B>>,
        device: &MpDevice<B>,
    ) -> Result<Scores, Error> {
        let started = Instant::now();
        // The same batches and reductions as the training run's held-out rows.
        let row = held_out_metrics(&model, self.data, self.batch_size, device)?;
        let errors = match self.target_std {
            Some(std) => Some(regression_errors(
                &model,
                self.data,
                self.batch_size,
                device,
                std,
            )?),
            None => None,
        };
        let param = device.policy().param().to_burn();
        Ok(Scores {
            predictions: row.predictions,
            loss: row.loss,
            accuracy: row.accuracy,
            errors,
            weight_bytes: (model.num_params() * burn::tensor::DType::from(param).size()) as u64,
            seconds: started.elapsed().as_secs_f64(),
        })
    }
}

/// Mean squared and absolute error over the held-out split, in the target's units.
fn regression_errors<B: Backend>(
    model: &Model<MixedPrecision<B>>,
    data: &Dataset,
    batch_size: usize,
    device: &MpDevice<B>,
    std: f64,
) -> Result<(f64, f64), Error> {
    let (mut squared, mut absolute, mut n) = (0.0f64, 0.0f64, 0usize);
    for items in data.eval_batches(batch_size.max(256)) {
        let batch = data.batch::<MixedPrecision<B>>(true, &items, device);
        let targets = match &batch.targets {
            crate::data::Targets::Values(y) => y.clone().into_data(),
            _ => return Err(Error::Internal("regression without values".into())),
        };
        let outputs = model.outputs(batch.inputs)?.into_data();
        let (p, y) = (
            outputs
                .to_vec::<f32>()
                .map_err(|e| Error::Internal(format!("{e:?}")))?,
            targets
                .to_vec::<f32>()
                .map_err(|e| Error::Internal(format!("{e:?}")))?,
        );
        for (p, y) in p.iter().zip(&y) {
            let d = f64::from(p - y) * std;
            squared += d * d;
            absolute += d.abs();
            n += 1;
        }
    }
    let n = n.max(1) as f64;
    Ok((squared / n, absolute / n))
}

impl Evaluation {
    /// The table `mpric evaluate` prints.
    ///
    /// ```
    /// use burn_mpric_train::infer::evaluate::Evaluation;
    ///
    /// let e = Evaluation { recipe: "r.toml".into(), checkpoint: "runs/r/checkpoints/step-00000020".into(),
    ///     step: 20, policy: "p=f32,c=bf16,o=f32".into(), backend: "flex device 0".into(),
    ///     data: "held-out split".into(), predictions: 30, loss: Some(0.5), accuracy: Some(0.9),
    ///     perplexity: None, mse: None, mae: None, weight_bytes: 1064, seconds: 0.01 };
    /// assert!(e.table().contains("accuracy     0.9000"));
    /// ```
    pub fn table(&self) -> String {
        let mut lines = vec![
            format!(
                "{} at step {} ({})",
                self.recipe,
                self.step,
                self.checkpoint.display()
            ),
            format!("  data         {}", self.data),
            format!("  policy       {} on {}", self.policy, self.backend),
            format!("  predictions  {}", self.predictions),
            format!(
                "  loss         {}",
                self.loss
                    .map_or("not finite".to_string(), |l| format!("{l:.4}"))
            ),
        ];
        let metric = |name: &str, value: Option<f64>| value.map(|v| format!("  {name:<12} {v:.4}"));
        lines.extend(metric("accuracy", self.accuracy.map(f64::from)));
        lines.extend(metric("perplexity", self.perplexity));
        lines.extend(metric("mse", self.mse));
        lines.extend(metric("mae", self.mae));
        lines.push(format!(
            "  weights      {} bytes; {:.3} s",
            self.weight_bytes, self.seconds
        ));
        lines.join("\n") + "\n"
    }
}

/// The JSON file `mpric evaluate` writes by default: `<output>/evaluation.json`.
pub fn default_json(plan: &Plan) -> PathBuf {
    plan.recipe.output.join("evaluation.json")
}
