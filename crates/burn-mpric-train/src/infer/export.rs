//! `mpric export`: a trained model's weights as a safetensors file at f32, f16 or bf16
//! (through burn-store, see [`burn_mpric::export`]), with a JSON sidecar that says how to use
//! them: the recipe, the model's forward pass, the class labels and the training split's
//! standardization. The same JSON is in the file's metadata under `mpric`.

use std::path::{Path, PathBuf};

use burn::backend::Flex;
use burn::tensor::FloatDType;
use burn_mpric::export::{Export, Layout};
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::infer::Trained;
use crate::models::{Model, describe_forward};
use crate::plan::Plan;
use crate::recipe::Recipe;
use crate::schema::Schema;

/// The sidecar's format tag.
///
/// ```
/// assert_eq!(burn_mpric_train::infer::export::SIDECAR_FORMAT, "mpric-export/1");
/// ```
pub const SIDECAR_FORMAT: &str = "mpric-export/1";

/// What the sidecar JSON holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sidecar {
    /// [`SIDECAR_FORMAT`].
    pub format: String,
    /// The recipe the model was trained with.
    pub recipe: Recipe,
    /// The checkpoint's step.
    pub step: u64,
    /// The dtype of the tensors in the file.
    pub dtype: String,
    /// `pytorch` or `burn` (see [`Layout`]).
    pub layout: String,
    /// The forward pass, in words, with the tensor names (each model describes its own,
    /// see `models/`).
    pub forward: String,
    /// What the model reads and gives, with the standardization of its inputs.
    pub schema: Schema,
}

/// The sidecar path of an export: `model.safetensors` -> `model.json`.
///
/// ```
/// use burn_mpric_train::infer::export::sidecar_path;
///
/// assert_eq!(sidecar_path("out/model.safetensors".as_ref()), std::path::Path::new("out/model.json"));
/// assert_eq!(sidecar_path("m.json".as_ref()), std::path::Path::new("m.mpric.json"));
/// ```
pub fn sidecar_path(to: &Path) -> PathBuf {
    let json = to.with_extension("json");
    if json == to {
        to.with_extension("mpric.json")
    } else {
        json
    }
}

/// Writes the weights of `trained` to `to` at `dtype` in `layout`, and the sidecar beside
/// it; returns the sidecar.
pub fn export(
    plan: &Plan,
    trained: &Trained,
    to: &Path,
    dtype: FloatDType,
    layout: Layout,
) -> Result<Sidecar, Error> {
    let refuse = |why: String| Error::Input(format!("--to {}: {why}", to.display()));
    if to.is_dir() {
        return Err(refuse("is a folder; name the file to write".into()));
    }
    let parent = match to.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(refuse(format!(
            "the folder {} does not exist",
            parent.display()
        )));
    }
    let sidecar = Sidecar {
        format: SIDECAR_FORMAT.to_string(),
        recipe: trained.state.recipe.clone(),
        step: trained.checkpoint.step,
        dtype: format!("{dtype:?}").to_lowercase(),
        layout: layout.to_string(),
        forward: describe_forward(&trained.state.recipe.model, &trained.schema.inputs, layout),
        schema: trained.schema.clone(),
    };
    let json = serde_json::to_string_pretty(&sidecar)
        .map_err(|e| Error::Internal(format!("the sidecar: {e}")))?;
    let device = Default::default();
    let model = Model::<Flex>::init(&plan.recipe.model, plan.data.dims(), &device);
    let model = trained.checkpoint.load_model(model, &device)?;
    let written = Export::new(dtype)
        .layout(layout)
        .metadata("mpric", json.clone())
        .save(&model, to)
        .map_err(|e| match e {
            burn_mpric::export::ExportError::Io { source, .. } => {
                refuse(format!("cannot write it: {source}"))
            }
            other => Error::Internal(other.to_string()),
        });
    written?;
    let side = sidecar_path(to);
    crate::atomic::write_atomic(&side, (json + "\n").as_bytes())
        .map_err(|e| Error::Input(format!("{}: cannot write the sidecar: {e}", side.display())))?;
    Ok(sidecar)
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;
    use burn::tensor::FloatDType;
    use burn_mpric::export::{Export, Layout, load_safetensors};

    use crate::infer::Trained;
    use crate::models::Model;
    use crate::{Plan, Recipe, train};

    /// An f16 export read back with burn-store into a fresh model predicts what the f32
    /// model predicts: logits within 1e-2 (f16 keeps 11 significant bits of each weight),
    /// the same class for every held-out flower.
    #[test]
    fn an_f16_export_read_back_by_burn_predicts_as_the_f32_model() -> Result<(), crate::Error> {
        let dir = std::env::temp_dir().join(format!("mpric-export-f16-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut recipe = Recipe::example();
        recipe.output = dir.clone();
        recipe.steps = Some(60);
        let plan = Plan::new(recipe, "example")?;
        train(&plan, &Default::default())?;
        let trained = Trained::open(&plan, None)?;
        let device = Default::default();
        let fresh = || Model::<Flex>::init(&plan.recipe.model, plan.data.dims(), &device);
        let model = trained.checkpoint.load_model(fresh(), &device)?;
        for layout in [Layout::PyTorch, Layout::Burn] {
            let bytes = Export::new(FloatDType::F16)
                .layout(layout)
                .to_bytes(&model)
                .unwrap();
            let back = load_safetensors(fresh(), &bytes, layout, FloatDType::F32).unwrap();
            let items: Vec<usize> = (0..30).collect();
            let logits = |m: &Model<Flex>| {
                let batch = plan.data.batch::<Flex>(true, &items, &device);
                m.outputs(batch.inputs)
                    .unwrap()
                    .into_data()
                    .to_vec::<f32>()
                    .unwrap()
            };
            let (a, b) = (logits(&model), logits(&back));
            let worst = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f32::max);
            assert!(worst > 0.0 && worst < 1e-2, "{layout}: {worst}");
            let class = |l: &[f32]| -> Vec<usize> {
                l.chunks(3)
                    .map(|c| (0..3).max_by(|i, j| c[*i].total_cmp(&c[*j])).unwrap())
                    .collect()
            };
            assert_eq!(class(&a), class(&b), "{layout}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
        Ok(())
    }
}
