//! `mpric predict`: a trained model's answers for new inputs: a class label and its
//! probability (or, with `--probabilities`, every class's probability), or a value in the
//! target's own units, per CSV row or image file; text generated from a prompt for the
//! character model.

use std::path::Path;

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use burn_mpric::{MixedPrecision, MpDevice, Policy, ResolvedPolicy};
use serde::{Deserialize, Serialize};

use crate::data::Dataset;
use crate::data::rng::Rng;
use crate::error::Error;
use crate::infer::inputs::{self, Targets};
use crate::infer::{ModelTask, Trained, with_model};
use crate::models::Model;
use crate::plan::Plan;
use crate::schema::{InputKind, OutputKind};

/// The model's answer for one input.
///
/// ```
/// use burn_mpric_train::infer::predict::Prediction;
///
/// let p = Prediction { input: "2".into(), label: Some("ok".into()), probability: Some(0.75),
///     probabilities: vec![0.25, 0.75], value: None };
/// assert_eq!(p.csv_fields(), vec!["2", "ok", "0.75"]);
/// assert_eq!(p.probability_fields(), vec!["2", "0.25", "0.75"]);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// The input: a CSV row's line number, or an image file.
    pub input: String,
    /// The most probable class, as the data spells it (classification).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Its probability (softmax of the logits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<f32>,
    /// Every class's probability (softmax of the logits), in the order of the classes the
    /// checkpoint's schema names ([`Predictions::classes`]); empty for regression.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probabilities: Vec<f32>,
    /// The predicted value in the target's own units (regression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
}

impl Prediction {
    /// The fields of its CSV row: input, then label and probability, or the value.
    pub fn csv_fields(&self) -> Vec<String> {
        let mut fields = vec![self.input.clone()];
        match (&self.label, self.probability, self.value) {
            (Some(label), Some(p), _) => {
                fields.push(label.clone());
                fields.push(p.to_string());
            }
            (_, _, Some(value)) => fields.push(value.to_string()),
            _ => {}
        }
        fields
    }

    /// The fields of its `--probabilities` CSV row: input, then each class's probability.
    ///
    /// ```
    /// use burn_mpric_train::infer::predict::Prediction;
    ///
    /// let p = Prediction { input: "a.png".into(), label: Some("b".into()), probability: Some(0.5),
    ///     probabilities: vec![0.5, 0.5], value: None };
    /// assert_eq!(p.probability_fields(), vec!["a.png", "0.5", "0.5"]);
    /// ```
    pub fn probability_fields(&self) -> Vec<String> {
        std::iter::once(self.input.clone())
            .chain(self.probabilities.iter().map(f32::to_string))
            .collect()
    }
}

/// Predictions for the inputs in `path` (a CSV file, an image, or a folder of images),
/// read as training read its data, at `policy` (the recipe's when `None`); `resize` converts
/// and resizes images of another shape as training did. Returns the predictions, the CSV
/// header naming their fields, a note on what the file held that the model does not read,
/// and the policy as the device resolved it.
pub fn predict(
    plan: &Plan,
    trained: &Trained,
    path: &Path,
    policy: Option<Policy>,
    resize: bool,
) -> Result<Predictions, Error> {
    let schema = &trained.schema;
    if let InputKind::Text { .. } = schema.inputs {
        return Err(Error::Input(
            "a character model predicts text from --prompt TEXT --tokens N, not from --data".into(),
        ));
    }
    let read = inputs::read(plan, schema, path, Targets::Ignored, resize)?;
    let task = Outputs {
        data: &read.data,
        batch_size: plan.recipe.batch_size,
    };
    let (rows, resolved) = with_model(plan, trained, policy, task)?;
    if let Some((_, name)) = rows
        .iter()
        .zip(&read.names)
        .find(|(row, _)| row.iter().any(|v| !v.is_finite()))
    {
        return Err(Error::Input(format!(
            "{}: the model's outputs for {name} are not finite at {resolved} (a value beyond the dtype's range); predict at --policy f32 or a mixed policy",
            path.display()
        )));
    }
    let input = match schema.inputs {
        InputKind::Columns { .. } => "line",
        _ => "file",
    };
    let (header, predictions) = match &schema.outputs {
        OutputKind::Classes { target, names } => (
            vec![input.to_string(), target.clone(), "probability".to_string()],
            rows.iter()
                .zip(&read.names)
                .map(|(logits, name)| {
                    let (class, p) = most_probable(logits);
                    Prediction {
                        input: name.clone(),
                        label: names.get(class).cloned(),
                        probability: Some(p),
                        probabilities: softmax(logits),
                        value: None,
                    }
                })
                .collect(),
        ),
        OutputKind::Value { target } => {
            let scaling = schema.scaling.as_ref();
            (
                vec![input.to_string(), target.clone()],
                rows.iter()
                    .zip(&read.names)
                    .map(|(out, name)| Prediction {
                        input: name.clone(),
                        label: None,
                        probability: None,
                        probabilities: Vec::new(),
                        value: scaling.map(|s| s.target_out(out[0])),
                    })
                    .collect(),
            )
        }
        OutputKind::NextCharacter => unreachable!("text was refused above"),
    };
    let classes = match &schema.outputs {
        OutputKind::Classes { names, .. } => names.clone(),
        _ => Vec::new(),
    };
    Ok(Predictions {
        header,
        classes,
        predictions,
        note: read.note,
        policy: resolved,
    })
}

/// What [`predict`] gives.
#[derive(Debug, Clone)]
pub struct Predictions {
    /// The CSV header: the input's column, then the target's (and `probability`).
    pub header: Vec<String>,
    /// The class labels, in the order the checkpoint's schema (the sidecar of an export)
    /// gives them, which is the order of every [`Prediction::probabilities`]; empty for
    /// regression.
    pub classes: Vec<String>,
    /// One per input.
    pub predictions: Vec<Prediction>,
    /// What the file held that the model does not read.
    pub note: Option<String>,
    /// The policy the model ran at.
    pub policy: ResolvedPolicy,
}

impl Predictions {
    /// As CSV, with a header.
    ///
    /// ```
    /// use burn_mpric_train::infer::predict::{Prediction, Predictions};
    ///
    /// let p = Predictions { header: vec!["line".into(), "price".into()], classes: vec![],
    ///     note: None, policy: "f32".parse().unwrap(),
    ///     predictions: vec![Prediction { input: "2".into(), label: None, probability: None,
    ///         probabilities: vec![], value: Some(1.5) }] };
    /// assert_eq!(p.csv()?, "line,price\n2,1.5\n");
    /// // A regression model has no classes to give probabilities of.
    /// assert!(p.probabilities_csv().unwrap_err().to_string().starts_with("--probabilities: "));
    /// # Ok::<(), burn_mpric_train::Error>(())
    /// ```
    pub fn csv(&self) -> Result<String, Error> {
        write_csv(
            &self.header,
            self.predictions.iter().map(Prediction::csv_fields),
        )
    }

    /// Every class's probability as CSV: a header of the input's column and the classes (in
    /// [`classes`](Self::classes) order), then one row per input whose probabilities sum
    /// to 1. An error for a model without classes (regression).
    ///
    /// ```
    /// use burn_mpric_train::infer::predict::{Prediction, Predictions};
    ///
    /// let p = Predictions { header: vec!["line".into(), "species".into(), "probability".into()],
    ///     classes: vec!["setosa".into(), "virginica".into()], note: None,
    ///     policy: "f32".parse().unwrap(),
    ///     predictions: vec![Prediction { input: "2".into(), label: Some("virginica".into()),
    ///         probability: Some(0.75), probabilities: vec![0.25, 0.75], value: None }] };
    /// assert_eq!(p.probabilities_csv()?, "line,setosa,virginica\n2,0.25,0.75\n");
    /// # Ok::<(), burn_mpric_train::Error>(())
    /// ```
    pub fn probabilities_csv(&self) -> Result<String, Error> {
        self.check_classes()?;
        let header: Vec<&String> = std::iter::once(&self.header[0])
            .chain(&self.classes)
            .collect();
        write_csv(
            header,
            self.predictions.iter().map(Prediction::probability_fields),
        )
    }

    /// Every class's probability as JSON: an array of objects, each with the input and a
    /// `probabilities` object whose keys are the classes, written in
    /// [`classes`](Self::classes) order (a class may share the input column's name, so the
    /// classes get an object of their own).
    ///
    /// ```
    /// use burn_mpric_train::infer::predict::{Prediction, Predictions};
    ///
    /// let p = Predictions { header: vec!["file".into(), "class folder".into(), "probability".into()],
    ///     classes: vec!["square".into(), "circle".into()], note: None,
    ///     policy: "f32".parse().unwrap(),
    ///     predictions: vec![Prediction { input: "a.png".into(), label: Some("square".into()),
    ///         probability: Some(0.5), probabilities: vec![0.5, 0.5], value: None }] };
    /// let json = p.probabilities_json()?;
    /// assert!(json.find("square").unwrap() < json.find("circle").unwrap());
    /// let rows: serde_json::Value = serde_json::from_str(&json).unwrap();
    /// assert_eq!(rows[0]["file"], "a.png");
    /// assert_eq!(rows[0]["probabilities"]["circle"], 0.5);
    /// # Ok::<(), burn_mpric_train::Error>(())
    /// ```
    pub fn probabilities_json(&self) -> Result<String, Error> {
        self.check_classes()?;
        let rows: Vec<ProbabilityRow> = self
            .predictions
            .iter()
            .map(|p| ProbabilityRow {
                input: (&self.header[0], &p.input),
                classes: &self.classes,
                probabilities: &p.probabilities,
            })
            .collect();
        serde_json::to_string_pretty(&rows)
            .map(|s| s + "\n")
            .map_err(|e| Error::Internal(e.to_string()))
    }

    /// Refuses `--probabilities` for a model without classes.
    fn check_classes(&self) -> Result<(), Error> {
        if self.classes.is_empty() {
            let target = self.header.get(1).map_or("a value", String::as_str);
            return Err(Error::Input(format!(
                "--probabilities: the model predicts `{target}`, a value, not classes; leave --probabilities out"
            )));
        }
        Ok(())
    }

    /// As JSON: an array of objects named by the header.
    pub fn json(&self) -> Result<String, Error> {
        let rows: Vec<serde_json::Map<String, serde_json::Value>> = self
            .predictions
            .iter()
            .map(|p| {
                let mut row = serde_json::Map::new();
                row.insert(self.header[0].clone(), p.input.clone().into());
                if let (Some(label), Some(prob)) = (&p.label, p.probability) {
                    row.insert(self.header[1].clone(), label.clone().into());
                    row.insert("probability".into(), f64::from(prob).into());
                }
                if let Some(value) = p.value {
                    row.insert(self.header[1].clone(), value.into());
                }
                row
            })
            .collect();
        serde_json::to_string_pretty(&rows)
            .map(|s| s + "\n")
            .map_err(|e| Error::Internal(e.to_string()))
    }
}

/// One row of `--probabilities --format json`: serialized as a map in the classes' order
/// (a `serde_json::Value` object would sort its keys).
struct ProbabilityRow<'a> {
    /// The input column's name and this row's input.
    input: (&'a String, &'a String),
    classes: &'a [String],
    probabilities: &'a [f32],
}

impl serde::Serialize for ProbabilityRow<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let classes = InOrder(self.classes.iter().zip(self.probabilities));
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry(self.input.0, self.input.1)?;
        map.serialize_entry("probabilities", &classes)?;
        map.end()
    }
}

/// The classes and their probabilities as a map that keeps the classes' order.
struct InOrder<'a, I>(I)
where
    I: Iterator<Item = (&'a String, &'a f32)> + Clone;

impl<'a, I> serde::Serialize for InOrder<'a, I>
where
    I: Iterator<Item = (&'a String, &'a f32)> + Clone,
{
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.clone())
    }
}

/// A header and rows as CSV text.
fn write_csv<H, R>(header: H, rows: impl Iterator<Item = R>) -> Result<String, Error>
where
    H: IntoIterator,
    H::Item: AsRef<[u8]>,
    R: IntoIterator,
    R::Item: AsRef<[u8]>,
{
    let fail = |e: csv::Error| Error::Internal(format!("writing CSV: {e}"));
    let mut writer = csv::Writer::from_writer(Vec::new());
    writer.write_record(header).map_err(fail)?;
    for row in rows {
        writer.write_record(row).map_err(fail)?;
    }
    let bytes = writer
        .into_inner()
        .map_err(|e| Error::Internal(format!("writing CSV: {e}")))?;
    String::from_utf8(bytes).map_err(|e| Error::Internal(e.to_string()))
}

/// The most probable class and its softmax probability, in f64.
fn most_probable(logits: &[f32]) -> (usize, f32) {
    let (best, max) = logits
        .iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |(bi, bv), (i, v)| {
            if *v > bv { (i, *v) } else { (bi, bv) }
        });
    let sum: f64 = logits.iter().map(|v| f64::from(v - max).exp()).sum();
    (best, (1.0 / sum) as f32)
}

/// The softmax of `logits`, computed in f64 so that each row sums to 1 up to f32 rounding.
fn softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f64> = logits.iter().map(|v| f64::from(v - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.iter().map(|e| (e / sum) as f32).collect()
}

/// The model's outputs for every held-out example of `data`, one row each.
struct Outputs<'a> {
    data: &'a Dataset,
    batch_size: usize,
}

impl ModelTask for Outputs<'_> {
    type Output = Vec<Vec<f32>>;

    fn run<B: Backend>(
        self,
        model: Model<MixedPrecision<B>>,
        device: &MpDevice<B>,
    ) -> Result<Vec<Vec<f32>>, Error> {
        let mut rows = Vec::new();
        for items in self.data.eval_batches(self.batch_size.max(256)) {
            let batch = self.data.batch::<MixedPrecision<B>>(true, &items, device);
            let out = model.outputs(batch.inputs)?;
            let [_, width] = out.dims();
            let values = out
                .into_data()
                .to_vec::<f32>()
                .map_err(|e| Error::Internal(format!("reading the outputs: {e:?}")))?;
            rows.extend(values.chunks(width.max(1)).map(<[f32]>::to_vec));
        }
        Ok(rows)
    }
}

/// How the character model picks each next character.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// The most probable one.
    Greedy,
    /// Drawn from the softmax of the logits divided by `temperature`, from a generator
    /// seeded with `seed`: the same seed gives the same text.
    Sample {
        /// The generator's seed.
        seed: u64,
        /// Above 0; below 1 sharpens, above 1 flattens.
        temperature: f64,
    },
}

/// The most characters [`generate`] makes in one call.
///
/// ```
/// assert_eq!(burn_mpric_train::infer::predict::MAX_GENERATED, 1_000_000);
/// ```
pub const MAX_GENERATED: usize = 1_000_000;

/// Text from the character model: `prompt` followed by `tokens` generated characters.
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("mpric-doc-generate-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// use burn_mpric_train::infer::Trained;
/// use burn_mpric_train::infer::predict::{Sampling, generate};
/// use burn_mpric_train::Plan;
///
/// let recipe = concat!(env!("CARGO_MANIFEST_DIR"), "/../../recipes/tiny_lm.toml");
/// let sets = ["steps=2".into(), "schedule.warmup_steps=1".into(), format!("output={}", dir.display())];
/// let plan = Plan::load(recipe.as_ref(), &sets)?;
/// burn_mpric_train::train(&plan, &Default::default())?;
/// let trained = Trained::open(&plan, None)?;
/// let text = generate(&plan, &trained, "The ", 5, Sampling::Greedy, None)?;
/// assert!(text.starts_with("The ") && text.chars().count() == 9);
/// assert!(generate(&plan, &trained, "", 5, Sampling::Greedy, None).is_err());
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
pub fn generate(
    plan: &Plan,
    trained: &Trained,
    prompt: &str,
    tokens: usize,
    sampling: Sampling,
    policy: Option<Policy>,
) -> Result<String, Error> {
    let InputKind::Text { vocab, context } = &trained.schema.inputs else {
        return Err(Error::Input(
            "--prompt is for character models (model kind transformer_lm); this model reads --data"
                .into(),
        ));
    };
    let vocab: Vec<char> = vocab.chars().collect();
    if prompt.is_empty() {
        return Err(Error::Input(
            "--prompt: empty; the model continues a text, give it at least one character".into(),
        ));
    }
    if let Sampling::Sample { temperature, .. } = sampling
        && !(temperature.is_finite() && temperature > 0.0)
    {
        return Err(Error::Input(format!(
            "--temperature {temperature}: must be a number above 0"
        )));
    }
    if tokens > MAX_GENERATED {
        return Err(Error::Input(format!(
            "--tokens {tokens}: at most {MAX_GENERATED} characters are generated at once"
        )));
    }
    let mut ids = Vec::with_capacity(prompt.len());
    for c in prompt.chars() {
        match vocab.iter().position(|v| *v == c) {
            Some(id) => ids.push(id as i64),
            None => {
                return Err(Error::Input(format!(
                    "--prompt: the character {c:?} is not in the model's vocabulary of {} characters",
                    vocab.len()
                )));
            }
        }
    }
    let task = Generate {
        ids,
        tokens,
        context: *context,
        sampling,
    };
    let (ids, _) = with_model(plan, trained, policy, task)?;
    Ok(ids.iter().map(|id| vocab[*id as usize]).collect())
}

struct Generate {
    ids: Vec<i64>,
    tokens: usize,
    context: usize,
    sampling: Sampling,
}

impl ModelTask for Generate {
    type Output = Vec<i64>;

    fn run<B: Backend>(
        self,
        model: Model<MixedPrecision<B>>,
        device: &MpDevice<B>,
    ) -> Result<Vec<i64>, Error> {
        let mut ids = self.ids;
        let mut rng = match self.sampling {
            Sampling::Sample { seed, .. } => Some(Rng::new(seed)),
            Sampling::Greedy => None,
        };
        for _ in 0..self.tokens {
            let window = &ids[ids.len().saturating_sub(self.context)..];
            let input = Tensor::<MixedPrecision<B>, 2, Int>::from_data(
                TensorData::new(window.to_vec(), [1, window.len()]),
                device,
            );
            let out = model.outputs(crate::data::Inputs::Tokens(input))?;
            let [t, v] = out.dims();
            let last = out
                .slice([t - 1..t, 0..v])
                .into_data()
                .to_vec::<f32>()
                .map_err(|e| Error::Internal(format!("reading the logits: {e:?}")))?;
            let next = match (self.sampling, rng.as_mut()) {
                (Sampling::Sample { temperature, .. }, Some(rng)) => {
                    sample(&last, temperature, rng)
                }
                _ => most_probable(&last).0,
            };
            ids.push(next as i64);
        }
        Ok(ids)
    }
}

/// A class drawn from the softmax of `logits / temperature`.
fn sample(logits: &[f32], temperature: f64, rng: &mut Rng) -> usize {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let weights: Vec<f64> = logits
        .iter()
        .map(|v| (f64::from(v - max) / temperature).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    // 53 random bits as a uniform draw in [0, total).
    let mut draw = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * total;
    for (i, w) in weights.iter().enumerate() {
        if draw < *w {
            return i;
        }
        draw -= w;
    }
    weights.len() - 1
}

#[cfg(test)]
mod tests {
    use super::{most_probable, softmax};

    #[test]
    fn softmax_sums_to_one_and_peaks_where_the_label_does() {
        for logits in [
            vec![0.0f32, 1.0, -2.0],
            vec![80.0, 80.5, -80.0, 3.0],
            vec![-1e4, 0.0],
            vec![5.0],
        ] {
            let p = softmax(&logits);
            let sum: f64 = p.iter().map(|v| f64::from(*v)).sum();
            assert!((sum - 1.0).abs() < 1e-6, "{logits:?}: {p:?}");
            let (best, top) = most_probable(&logits);
            assert_eq!(p[best], top, "{logits:?}");
            assert!(p.iter().all(|v| *v <= top));
        }
    }
}
