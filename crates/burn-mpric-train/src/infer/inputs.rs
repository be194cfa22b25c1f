//! New inputs for a trained model, read as training read its data: CSV rows matched to the
//! model's columns by name and standardized with the training split's statistics, image
//! files decoded as training decoded them, text tokenized with the model's characters. A
//! file that does not fit the model is refused naming what is wrong.

use std::path::{Path, PathBuf};

use crate::data::Dataset;
use crate::data::csv::CsvReader;
use crate::data::images::{self, ImageShape};
use crate::data::source::{MAX_DATA_FILE_BYTES, read_limited};
use crate::data::tabular::Tabular;
use crate::data::text::Text;
use crate::error::Error;
use crate::plan::Plan;
use crate::recipe::{Channels, DataSource};
use crate::schema::Scaling;
use crate::schema::{InputKind, OutputKind, Schema};

/// Examples read from a file: as a dataset whose held-out split they are, and how each is
/// named in predictions (its line, or its file).
#[derive(Debug)]
pub(crate) struct Examples {
    /// The examples as the held-out split of a dataset (targets 0 where the file has none).
    pub(crate) data: Dataset,
    /// One name per example: `line N` of a CSV file, or the image file.
    pub(crate) names: Vec<String>,
    /// What was left out of the file, for a note on stderr (extra columns).
    pub(crate) note: Option<String>,
}

/// Whether the file must carry the target (to score the model) or may leave it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Targets {
    /// `evaluate --data`: the target column, or class folders.
    Required,
    /// `predict`: inputs only; a target column is ignored.
    Ignored,
}

/// Reads `path` as inputs of the model `schema` describes, trained on `plan`'s data.
pub(crate) fn read(
    plan: &Plan,
    schema: &Schema,
    path: &Path,
    targets: Targets,
    resize: bool,
) -> Result<Examples, Error> {
    let input = |message: String| Error::Input(message);
    match (&schema.inputs, &plan.data) {
        (InputKind::Columns { names }, Dataset::Tabular(like)) => {
            let scaling = scaling(schema)?;
            read_csv(plan, path, names, &schema.outputs, scaling, like, targets).map_err(input)
        }
        (InputKind::Image { channels, size }, Dataset::Images(like)) => {
            let scaling = scaling(schema)?;
            let shape = ImageShape {
                channels: channels.count(),
                size: *size,
            };
            read_images(
                path,
                shape,
                *channels,
                scaling,
                &like.table,
                &schema.outputs,
                targets,
                resize,
            )
            .map_err(input)
        }
        (InputKind::Text { .. }, Dataset::Text(like)) => {
            let bytes = read_whole(path).map_err(input)?;
            let text = String::from_utf8(bytes)
                .map_err(|_| input(format!("{}: not valid UTF-8", path.display())))?;
            let data = Text::held_out(path, &text, like).map_err(input)?;
            Ok(Examples {
                data: Dataset::Text(data),
                names: Vec::new(),
                note: None,
            })
        }
        _ => Err(Error::Internal(
            "the checkpoint's inputs do not match the recipe's data".into(),
        )),
    }
}

/// The whole file, at most [`MAX_DATA_FILE_BYTES`] (as training reads its data).
fn read_whole(path: &Path) -> Result<Vec<u8>, String> {
    let bytes = read_limited(path, MAX_DATA_FILE_BYTES)
        .map_err(|e| format!("{}: cannot read it: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_DATA_FILE_BYTES {
        return Err(format!(
            "{}: larger than {} MiB; inputs are read whole",
            path.display(),
            MAX_DATA_FILE_BYTES >> 20
        ));
    }
    Ok(bytes)
}

fn scaling(schema: &Schema) -> Result<&Scaling, Error> {
    schema
        .scaling
        .as_ref()
        .ok_or_else(|| Error::Internal("the checkpoint holds no feature statistics".into()))
}

/// The target of one example, as the model trains on it.
fn target_value(
    outputs: &OutputKind,
    scaling: &Scaling,
    label: &str,
    at: &str,
) -> Result<f32, String> {
    match outputs {
        OutputKind::Classes { target, names } => {
            class_id(names, label).map(|id| id as f32).ok_or_else(|| {
                let shown: Vec<&str> = names.iter().take(12).map(String::as_str).collect();
                format!(
                    "{at}: the {target} `{}` is not a class the model knows ({}{})",
                    label.escape_debug(),
                    shown.join(", "),
                    if names.len() > 12 { ", ..." } else { "" }
                )
            })
        }
        OutputKind::Value { target } => match label.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(scaling.target_in(v)),
            _ => Err(format!(
                "{at}: the target `{target}` is `{label}`, not a finite number"
            )),
        },
        OutputKind::NextCharacter => Err(format!("{at}: text has no target column")),
    }
}

/// The class a label names: the same text, or the same number (`5` and `5.0`).
fn class_id(names: &[String], label: &str) -> Option<usize> {
    names.iter().position(|n| n == label).or_else(|| {
        let value = label.parse::<f64>().ok()?;
        names
            .iter()
            .position(|n| n.parse::<f64>().ok() == Some(value))
    })
}

fn read_csv(
    plan: &Plan,
    path: &Path,
    columns: &[String],
    outputs: &OutputKind,
    scaling: &Scaling,
    like: &Tabular,
    targets: Targets,
) -> Result<Examples, String> {
    let (header, delimiter) = match plan.recipe.dataset.source() {
        Ok(DataSource::Csv(csv)) => (csv.header, csv.delimiter),
        _ => (true, b','),
    };
    let meta =
        std::fs::metadata(path).map_err(|e| format!("{}: cannot read it: {e}", path.display()))?;
    if meta.is_dir() {
        return Err(format!(
            "{}: is a folder; the model reads rows of a CSV file",
            path.display()
        ));
    }
    let bytes = read_whole(path)?;
    let in_file = |message: String| format!("{}: {message}", path.display());
    let mut reader = CsvReader::new(&bytes, header, delimiter);
    let names = reader.names().map_err(in_file)?;
    let records = reader.collect::<Result<Vec<_>, _>>().map_err(in_file)?;
    if records.is_empty() {
        return Err(format!("{}: has no data rows", path.display()));
    }
    let at = |line: Option<u64>| match line {
        Some(line) => format!("{}: line {line}", path.display()),
        None => path.display().to_string(),
    };
    let position = |name: &str| names.iter().position(|n| n == name);
    let mut features = Vec::with_capacity(columns.len());
    for column in columns {
        match position(column) {
            Some(i) => features.push(i),
            None => {
                return Err(format!(
                    "{}: no column `{column}`; the model reads {}",
                    path.display(),
                    quoted(columns)
                ));
            }
        }
    }
    let target_name = outputs.target();
    let target = position(target_name);
    if targets == Targets::Required && target.is_none() {
        return Err(format!(
            "{}: no column `{target_name}`, the target; scoring the model needs it (mpric predict reads files without it)",
            path.display()
        ));
    }
    let extra: Vec<String> = names
        .iter()
        .enumerate()
        .filter(|(i, _)| !features.contains(i) && Some(*i) != target)
        .map(|(_, n)| n.clone())
        .collect();
    let mut x = Vec::with_capacity(records.len() * columns.len());
    let mut y = Vec::with_capacity(records.len());
    let mut row_names = Vec::with_capacity(records.len());
    let mut raw = vec![0.0f64; columns.len()];
    for (line, record) in &records {
        let line = *line;
        for (slot, &f) in raw.iter_mut().zip(&features) {
            let field = &record[f];
            *slot = match field.parse::<f64>() {
                Ok(v) if v.is_finite() => v,
                _ => {
                    return Err(format!(
                        "{}: column `{}` is `{}`, not a finite number",
                        at(line),
                        names[f],
                        field.chars().take(40).collect::<String>().escape_debug()
                    ));
                }
            };
        }
        x.extend(scaling.features(&raw));
        y.push(match (targets, target) {
            (Targets::Required, Some(t)) => target_value(outputs, scaling, &record[t], &at(line))?,
            _ => 0.0,
        });
        row_names
            .push(line.map_or_else(|| format!("row {}", row_names.len() + 1), |l| l.to_string()));
    }
    let note = (!extra.is_empty()).then(|| {
        format!(
            "{}: ignored {} column{} the model does not read: {}",
            path.display(),
            extra.len(),
            if extra.len() == 1 { "" } else { "s" },
            quoted(&extra)
        )
    });
    Ok(Examples {
        data: Dataset::Tabular(Tabular::held_out(
            format!("csv {}", path.display()),
            like,
            x,
            y,
        )),
        names: row_names,
        note,
    })
}

/// Names in backquotes, the first 20.
fn quoted(names: &[String]) -> String {
    let shown: Vec<String> = names.iter().take(20).map(|n| format!("`{n}`")).collect();
    match names.len().saturating_sub(20) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

#[allow(clippy::too_many_arguments)]
fn read_images(
    path: &Path,
    shape: ImageShape,
    channels: Channels,
    scaling: &Scaling,
    like: &Tabular,
    outputs: &OutputKind,
    targets: Targets,
    resize: bool,
) -> Result<Examples, String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("{}: cannot read it: {e}", path.display()))?;
    let files: Vec<(PathBuf, f32)> = match targets {
        Targets::Required => {
            if !meta.is_dir() {
                return Err(format!(
                    "{}: is a file; scoring the model reads a folder with one subfolder per class",
                    path.display()
                ));
            }
            let mut files = Vec::new();
            for (class, images) in images::class_folders(path)? {
                let id = target_value(
                    outputs,
                    scaling,
                    &class,
                    &path.join(&class).display().to_string(),
                )?;
                files.extend(images.into_iter().map(|f| (f, id)));
            }
            files
        }
        Targets::Ignored if meta.is_dir() => images::image_files(path)?
            .into_iter()
            .map(|f| (f, 0.0))
            .collect(),
        Targets::Ignored => vec![(path.to_path_buf(), 0.0)],
    };
    if files.is_empty() {
        return Err(format!(
            "{}: holds no images ({})",
            path.display(),
            images::IMAGE_EXTENSIONS.join(", ")
        ));
    }
    let mut x = Vec::with_capacity(files.len() * like.features);
    let mut y = Vec::with_capacity(files.len());
    let mut names = Vec::with_capacity(files.len());
    for (file, id) in files {
        let raw = images::read_for_model(&file, shape, channels, resize)?;
        x.extend(scaling.features(&raw));
        y.push(id);
        names.push(file.display().to_string());
    }
    Ok(Examples {
        data: Dataset::Tabular(Tabular::held_out(
            format!("images {}", path.display()),
            like,
            x,
            y,
        )),
        names,
        note: None,
    })
}
