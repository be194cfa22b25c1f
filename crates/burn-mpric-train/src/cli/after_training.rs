//! `mpric evaluate`, `mpric predict` and `mpric export`: the command lines over
//! [`crate::infer`].

use std::path::PathBuf;

use burn::tensor::FloatDType;
use burn_mpric::export::Layout;
use clap::{Args, ValueEnum};

use crate::error::Error;
use crate::infer::evaluate::{default_json, evaluate};
use crate::infer::export::{export, sidecar_path};
use crate::infer::predict::{Sampling, generate, predict};
use crate::infer::{Trained, parse_policy};
use crate::plan::Plan;
use crate::schema::OutputKind;

/// `mpric evaluate`.
#[derive(Debug, Args)]
pub(crate) struct EvaluateArgs {
    /// The recipe file the model was trained with.
    pub(crate) recipe: PathBuf,
    /// The checkpoint: `step-N`, `N`, or a checkpoint folder (default: the newest that
    /// passes verification).
    #[arg(long)]
    pub(crate) checkpoint: Option<String>,
    /// Score this file (CSV, image folder with one subfolder per class, or text, as the
    /// recipe's data) instead of the held-out split.
    #[arg(long)]
    pub(crate) data: Option<PathBuf>,
    /// Run the model at this policy instead of the training one (`f32`, `mixed_f16`, `f16`
    /// for pure half inference, ...).
    #[arg(long)]
    pub(crate) policy: Option<String>,
    /// Where to write the JSON (default: evaluation.json in the recipe's output folder).
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
    /// Print the JSON instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Override a recipe field, as for `train`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
}

/// How predictions are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// One row per input, with a header.
    Csv,
    /// An array of objects.
    Json,
}

/// `mpric predict`.
#[derive(Debug, Args)]
pub(crate) struct PredictArgs {
    /// The recipe file the model was trained with.
    pub(crate) recipe: PathBuf,
    /// The inputs: a CSV file with the model's columns, an image, or a folder of images.
    #[arg(long, required_unless_present = "prompt", conflicts_with = "prompt")]
    pub(crate) data: Option<PathBuf>,
    /// For a character model: the text to continue.
    #[arg(long)]
    pub(crate) prompt: Option<String>,
    /// For a character model: how many characters to generate.
    #[arg(long, default_value_t = 200)]
    pub(crate) tokens: usize,
    /// Draw each character from the model's probabilities (with --seed) instead of taking
    /// the most probable one.
    #[arg(long)]
    pub(crate) sample: bool,
    /// The seed of --sample.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// The temperature of --sample.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) temperature: f64,
    /// The checkpoint, as for `evaluate`.
    #[arg(long)]
    pub(crate) checkpoint: Option<String>,
    /// Run the model at this policy instead of the training one.
    #[arg(long)]
    pub(crate) policy: Option<String>,
    /// Convert and resize images of another size or channel count as training did.
    #[arg(long)]
    pub(crate) resize: bool,
    /// Give every class's probability instead of the most probable class: one column per
    /// class, named by its label, in the order the checkpoint (and an export's sidecar)
    /// lists the classes; each row's probabilities sum to 1. For classifiers with --data.
    #[arg(long)]
    pub(crate) probabilities: bool,
    /// The output format.
    #[arg(long, value_enum, default_value = "csv")]
    pub(crate) format: Format,
    /// Write to this file instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
    /// Override a recipe field, as for `train`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
}

/// The dtypes an export writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ExportDtype {
    /// 4 bytes a value.
    F32,
    /// 2 bytes a value, f16's range (65504).
    F16,
    /// 2 bytes a value, f32's range.
    Bf16,
}

/// The layouts an export writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ExportLayout {
    /// torch.nn's: Linear weights [out, in], norms' weight/bias.
    Pytorch,
    /// Burn's: Linear weights [in, out], norms' gamma/beta.
    Burn,
}

/// `mpric export`.
#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    /// The recipe file the model was trained with.
    pub(crate) recipe: PathBuf,
    /// The safetensors file to write; the sidecar JSON goes beside it (`.json`).
    #[arg(long)]
    pub(crate) to: PathBuf,
    /// The dtype of the weights in the file.
    #[arg(long, value_enum, default_value = "f32")]
    pub(crate) dtype: ExportDtype,
    /// The weights' layout.
    #[arg(long, value_enum, default_value = "pytorch")]
    pub(crate) layout: ExportLayout,
    /// The checkpoint, as for `evaluate`.
    #[arg(long)]
    pub(crate) checkpoint: Option<String>,
    /// Override a recipe field, as for `train`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
}

/// Runs `mpric evaluate`; returns what it prints.
pub(crate) fn run_evaluate(args: &EvaluateArgs) -> Result<String, Error> {
    let policy = parse_policy(args.policy.as_deref())?;
    let plan = Plan::load(&args.recipe, &args.set)?;
    let trained = Trained::open(&plan, args.checkpoint.as_deref())?;
    let evaluation = evaluate(&plan, &trained, args.data.as_deref(), policy)?;
    let json = serde_json::to_string_pretty(&evaluation)
        .map_err(|e| Error::Internal(e.to_string()))?
        + "\n";
    let out = args.out.clone().unwrap_or_else(|| default_json(&plan));
    crate::atomic::write_atomic(&out, json.as_bytes())
        .map_err(|e| Error::Input(format!("--out {}: cannot write it: {e}", out.display())))?;
    Ok(if args.json {
        json
    } else {
        format!("{}written: {}\n", evaluation.table(), out.display())
    })
}

/// Runs `mpric predict`; returns what goes to stdout (nothing when --out is given).
pub(crate) fn run_predict(args: &PredictArgs) -> Result<String, Error> {
    let policy = parse_policy(args.policy.as_deref())?;
    if args.probabilities && args.prompt.is_some() {
        return Err(Error::Usage(
            "--probabilities gives the class probabilities of --data rows or images; --prompt generates text, leave --probabilities out".into(),
        ));
    }
    let plan = Plan::load(&args.recipe, &args.set)?;
    let trained = Trained::open(&plan, args.checkpoint.as_deref())?;
    // Refused before the model runs: a regression model has no classes.
    if args.probabilities
        && let OutputKind::Value { target } = &trained.schema.outputs
    {
        return Err(Error::Input(format!(
            "--probabilities: the model predicts `{target}`, a value, not classes; leave --probabilities out"
        )));
    }
    let text = match (&args.prompt, &args.data) {
        (Some(prompt), _) => {
            let sampling = if args.sample {
                Sampling::Sample {
                    seed: args.seed,
                    temperature: args.temperature,
                }
            } else {
                Sampling::Greedy
            };
            let text = generate(&plan, &trained, prompt, args.tokens, sampling, policy)?;
            match args.format {
                Format::Csv => text + "\n",
                Format::Json => {
                    serde_json::json!({ "prompt": prompt, "text": text, "tokens": args.tokens })
                        .to_string()
                        + "\n"
                }
            }
        }
        (None, Some(data)) => {
            let found = predict(&plan, &trained, data, policy, args.resize)?;
            if let Some(note) = &found.note {
                eprintln!("note: {note}");
            }
            match (args.format, args.probabilities) {
                (Format::Csv, false) => found.csv()?,
                (Format::Json, false) => found.json()?,
                (Format::Csv, true) => found.probabilities_csv()?,
                (Format::Json, true) => found.probabilities_json()?,
            }
        }
        (None, None) => return Err(Error::Usage("give --data FILE, or --prompt TEXT".into())),
    };
    match &args.out {
        Some(out) => {
            crate::atomic::write_atomic(out, text.as_bytes()).map_err(|e| {
                Error::Input(format!("--out {}: cannot write it: {e}", out.display()))
            })?;
            Ok(String::new())
        }
        None => Ok(text),
    }
}

/// Runs `mpric export`; returns the line it prints.
pub(crate) fn run_export(args: &ExportArgs) -> Result<String, Error> {
    let plan = Plan::load(&args.recipe, &args.set)?;
    let trained = Trained::open(&plan, args.checkpoint.as_deref())?;
    let dtype = match args.dtype {
        ExportDtype::F32 => FloatDType::F32,
        ExportDtype::F16 => FloatDType::F16,
        ExportDtype::Bf16 => FloatDType::BF16,
    };
    let layout = match args.layout {
        ExportLayout::Pytorch => Layout::PyTorch,
        ExportLayout::Burn => Layout::Burn,
    };
    let sidecar = export(&plan, &trained, &args.to, dtype, layout)?;
    let bytes = std::fs::metadata(&args.to).map(|m| m.len()).unwrap_or(0);
    Ok(format!(
        "wrote {} ({} bytes, {} weights in the {} layout, step {}) and {}\n",
        args.to.display(),
        bytes,
        sidecar.dtype,
        sidecar.layout,
        sidecar.step,
        sidecar_path(&args.to).display()
    ))
}
