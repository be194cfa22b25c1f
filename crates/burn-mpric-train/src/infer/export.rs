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
use crate::models::Model;
use crate::plan::Plan;
use crate::recipe::{ModelConfig, Recipe};
use crate::schema::{InputKind, Schema};

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
    /// The forward pass, in words, with the tensor names.
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
        forward: forward(&trained.state.recipe.model, &trained.schema, layout),
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

/// The forward pass of a built-in model, naming its tensors, precise enough to compute it
/// from the file alone.
fn forward(model: &ModelConfig, schema: &Schema, layout: Layout) -> String {
    let (linear, norm) = match layout {
        Layout::PyTorch => (
            "linear(name, x) = x @ name.weight.T + name.bias (name.weight is [out, in])",
            "layernorm(x, name) = (x - mean(x)) / sqrt(var(x) + 1e-5) * name.weight + name.bias over the last axis (biased variance)",
        ),
        Layout::Burn => (
            "linear(name, x) = x @ name.weight + name.bias (name.weight is [in, out])",
            "layernorm(x, name) = (x - mean(x)) / sqrt(var(x) + 1e-5) * name.gamma + name.beta over the last axis (biased variance)",
        ),
    };
    let columns = "x = the columns in schema.inputs.columns.names order, each standardized: (raw - schema.scaling.mean[f]) / schema.scaling.std[f], rounded to f32";
    let outputs = "classes: softmax(logits), labels in schema.outputs.classes.names order; a value: output * schema.scaling.target[1] + schema.scaling.target[0]";
    let dense = |hidden: usize| {
        format!("for i in 0..{hidden}: x = relu(linear(dense.i, x)); out = linear(out, x)")
    };
    match model {
        ModelConfig::Mlp(c) => format!(
            "mlp: {columns}; for i in 0..{}: x = relu(linear(layers.i, x)); out = linear(out, x); {linear}; {outputs}",
            c.hidden.len()
        ),
        ModelConfig::Conv(c) => {
            let pad = c.kernel_size / 2;
            match &schema.inputs {
                InputKind::Image { size, .. } => {
                    let (mut side, mut pooled) = (*size, 0);
                    for _ in &c.channels {
                        if side >= 2 {
                            side /= 2;
                            pooled += 1;
                        }
                    }
                    format!(
                        "conv on images: x = the image resized to {size}x{size}, its pixels / 255 as [channels, {size}, {size}] (channel-major; rgb or one gray channel), each channel standardized: (x - schema.scaling.mean[c]) / schema.scaling.std[c]; for i in 0..{}: x = relu(conv2d(x, convs.i.weight [out, in, {k}, {k}], convs.i.bias, stride 1, zero padding {pad} on every side)), and for i < {pooled}: x = max_pool(x, 2x2, stride 2); x = flatten(x) in [channel, row, column] order; {}; {linear}; {outputs}",
                        c.channels.len(),
                        dense(c.hidden.len()),
                        k = c.kernel_size
                    )
                }
                _ => format!(
                    "conv on columns: {columns}; x as [1 channel, features]; for i in 0..{}: x = relu(conv1d(x, convs.i.weight [out, in, {k}], convs.i.bias, stride 1, zero padding {pad} on each side)); x = flatten(x) in [channel, feature] order; {}; {linear}; {outputs}",
                    c.channels.len(),
                    dense(c.hidden.len()),
                    k = c.kernel_size
                ),
            }
        }
        ModelConfig::TransformerLm(c) => format!(
            "transformer_lm: ids = each character's index in schema.inputs.text.vocab (at most {ctx} of them); x = token.weight[ids] + position.weight[0..len]; for i in 0..{layers}: x = x + attention_i(layernorm(x, encoder.layers.i.norm_2)); x = x + linear(encoder.layers.i.pwff.linear_outer, gelu(linear(encoder.layers.i.pwff.linear_inner, layernorm(x, encoder.layers.i.norm_1)))) (Burn's pre-norm layer: norm_2 before attention, norm_1 before the feed-forward); attention_i: {heads} heads of {dh}: q, k, v = linear(encoder.layers.i.mha.query|key|value, x) split into heads, scores = q @ k.T / sqrt({dh}) with every later position set to -10000, softmax over the last axis, weights @ v, heads concatenated, linear(encoder.layers.i.mha.output, .); gelu(x) = x * (1 + erf(x / sqrt(2))) / 2; logits = linear(head, layernorm(x, norm)); the next character: softmax(logits) at the last position; {linear}; {norm}",
            ctx = c.context,
            layers = c.layers,
            heads = c.heads,
            dh = c.d_model / c.heads.max(1),
        ),
    }
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
