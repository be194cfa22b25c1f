//! The `[dataset]` table: a bundled dataset by `name`, or the user's own data by `kind` and
//! `path` (a CSV file, a UTF-8 text, a folder of images).

use crate::recipe::help::{Help, help, one_of};
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::RecipeError;

/// The bundled datasets.
///
/// ```
/// use burn_mpric_train::recipe::DatasetName;
///
/// assert_eq!(DatasetName::TinyText.to_string(), "tiny_text");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DatasetName {
    /// Iris flowers: 150 examples, 4 features, 3 classes (`linfa-datasets`).
    Iris,
    /// Red wine quality: 1599 examples, 11 features, quality 3-8 as 6 classes
    /// (`linfa-datasets`).
    Winequality,
    /// Diabetes progression: 442 examples, 10 features, regression (`linfa-datasets`).
    Diabetes,
    /// The text shipped with this crate (`data/tiny_text.txt`), characters as tokens.
    TinyText,
}

impl DatasetName {
    /// The name of the target column of a bundled table, as `mpric predict` and `mpric
    /// evaluate --data` read it in a CSV file (the features keep the names `linfa-datasets`
    /// gives them).
    ///
    /// ```
    /// use burn_mpric_train::recipe::DatasetName;
    ///
    /// assert_eq!(DatasetName::Winequality.target_column(), "quality");
    /// ```
    pub fn target_column(self) -> &'static str {
        match self {
            DatasetName::Iris => "species",
            DatasetName::Winequality => "quality",
            DatasetName::Diabetes => "progression",
            DatasetName::TinyText => "next character",
        }
    }
}

impl fmt::Display for DatasetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DatasetName::Iris => "iris",
            DatasetName::Winequality => "winequality",
            DatasetName::Diabetes => "diabetes",
            DatasetName::TinyText => "tiny_text",
        })
    }
}

/// The kinds of data a recipe reads from the user's files.
///
/// ```
/// use burn_mpric_train::recipe::DataKind;
///
/// let kind: DataKind = serde_json::from_str("\"image_folder\"").unwrap();
/// assert_eq!(kind, DataKind::ImageFolder);
/// assert_eq!(kind.to_string(), "image_folder");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DataKind {
    /// A CSV file: one example per row, one column the target, every other column a
    /// numeric feature.
    Csv,
    /// A UTF-8 text file, for the character-level language model.
    Text,
    /// A folder with one subfolder per class, holding PNG, JPEG or BMP images.
    ImageFolder,
}

impl fmt::Display for DataKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DataKind::Csv => "csv",
            DataKind::Text => "text",
            DataKind::ImageFolder => "image_folder",
        })
    }
}

/// What a CSV file's target column holds.
///
/// ```
/// use burn_mpric_train::recipe::TaskKind;
///
/// let task: TaskKind = serde_json::from_str("\"regression\"").unwrap();
/// assert_eq!(task, TaskKind::Regression);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskKind {
    /// Class labels (any text; each distinct value is a class); cross-entropy, accuracy.
    Classification,
    /// A number, standardized with the training split's mean and deviation; MSE.
    Regression,
}

/// How images are read: three colour channels or one grey channel.
///
/// ```
/// use burn_mpric_train::recipe::Channels;
///
/// assert_eq!(Channels::Rgb.count(), 3);
/// assert_eq!(Channels::Gray.count(), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channels {
    /// Red, green, blue.
    Rgb,
    /// Luminance.
    Gray,
}

impl Channels {
    /// The number of channels.
    ///
    /// ```
    /// assert_eq!(burn_mpric_train::recipe::Channels::Rgb.count(), 3);
    /// ```
    pub fn count(self) -> usize {
        match self {
            Channels::Rgb => 3,
            Channels::Gray => 1,
        }
    }
}

/// The `[dataset]` table. Either `name` (a bundled dataset) or `kind` and `path` (the user's
/// data); the other fields belong to one kind each.
///
/// A relative `path` is read from the recipe file's folder (from the working directory for
/// a recipe that is not read from a file).
///
/// ```toml
/// [dataset]
/// kind = "csv"
/// path = "data/wine.csv"     # relative to this recipe file
/// target = "quality"         # the target column, by header name
/// task = "classification"    # or "regression"
/// # header = true            # false: columns are named 1, 2, 3, ...
/// # delimiter = ","
/// # ignore = ["id"]          # columns that are neither feature nor target
/// # eval_fraction = 0.2
/// ```
///
/// ```
/// use burn_mpric_train::recipe::{DataSource, DatasetConfig, DatasetName};
///
/// let spec: DatasetConfig = serde_json::from_str(r#"{"name": "iris"}"#).unwrap();
/// assert_eq!(spec.eval_fraction(), 0.2);
/// assert_eq!(spec.source()?, DataSource::Builtin(DatasetName::Iris));
///
/// let csv: DatasetConfig = serde_json::from_str(r#"{"kind": "csv", "path": "a.csv"}"#).unwrap();
/// assert_eq!(csv.source().unwrap_err().to_string(), "dataset.target: missing; kind `csv` needs the name of the target column");
/// # Ok::<(), burn_mpric_train::RecipeError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetConfig {
    /// A bundled dataset: `iris`, `winequality`, `diabetes` or `tiny_text`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<DatasetName>,
    /// The user's data: `csv`, `text` or `image_folder`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<DataKind>,
    /// The file (`csv`, `text`) or folder (`image_folder`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// `csv`: the target column's name (its header, or its position from 1 without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// `csv`: `classification` or `regression`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskKind>,
    /// `csv`: whether the first row names the columns (default `true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<bool>,
    /// `csv`: the field separator, one ASCII character (default `,`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delimiter: Option<String>,
    /// `csv`: columns to leave out (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore: Option<Vec<String>>,
    /// `image_folder`: every image is resized to this many pixels square (default 32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_size: Option<usize>,
    /// `image_folder`: `rgb` (default) or `gray`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<Channels>,
    /// The share held out for evaluation (default 0.2; 0.1 for text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_fraction: Option<f64>,
}

/// Where a recipe's data comes from, with every default applied: what
/// [`DatasetConfig::source`] makes of a valid `[dataset]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataSource {
    /// A bundled dataset.
    Builtin(DatasetName),
    /// A CSV file.
    Csv(CsvSource),
    /// A UTF-8 text file.
    Text {
        /// The file, as the recipe writes it.
        path: PathBuf,
    },
    /// A folder of images, one subfolder per class.
    ImageFolder(ImageSource),
}

/// A CSV file and how to read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvSource {
    /// The file, as the recipe writes it.
    pub path: PathBuf,
    /// The target column.
    pub target: String,
    /// Classification or regression.
    pub task: TaskKind,
    /// Whether the first row names the columns.
    pub header: bool,
    /// The field separator.
    pub delimiter: u8,
    /// Columns left out.
    pub ignore: Vec<String>,
}

/// A folder of images and how to read them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSource {
    /// The folder, as the recipe writes it.
    pub path: PathBuf,
    /// Side of the square every image is resized to, in pixels.
    pub size: usize,
    /// Colour or grey.
    pub channels: Channels,
}

/// The largest `image_size` a recipe may ask for.
///
/// ```
/// assert_eq!(burn_mpric_train::recipe::MAX_IMAGE_SIZE, 512);
/// ```
pub const MAX_IMAGE_SIZE: usize = 512;

/// The kind-specific fields, and the kinds each belongs to.
const KIND_FIELDS: [(&str, DataKind); 7] = [
    ("target", DataKind::Csv),
    ("task", DataKind::Csv),
    ("header", DataKind::Csv),
    ("delimiter", DataKind::Csv),
    ("ignore", DataKind::Csv),
    ("image_size", DataKind::ImageFolder),
    ("channels", DataKind::ImageFolder),
];

impl DatasetConfig {
    /// A bundled dataset with the default split.
    ///
    /// ```
    /// use burn_mpric_train::recipe::{DatasetConfig, DatasetName};
    ///
    /// assert_eq!(DatasetConfig::builtin(DatasetName::TinyText).eval_fraction(), 0.1);
    /// ```
    pub fn builtin(name: DatasetName) -> Self {
        Self {
            name: Some(name),
            ..Self::default()
        }
    }

    /// The evaluation share, with its default.
    ///
    /// ```
    /// use burn_mpric_train::recipe::{DatasetConfig, DatasetName};
    ///
    /// assert_eq!(DatasetConfig::builtin(DatasetName::Iris).eval_fraction(), 0.2);
    /// ```
    pub fn eval_fraction(&self) -> f64 {
        self.eval_fraction
            .unwrap_or(if self.is_text() { 0.1 } else { 0.2 })
    }

    /// Whether the data is text (for the language model).
    ///
    /// ```
    /// use burn_mpric_train::recipe::{DatasetConfig, DatasetName};
    ///
    /// assert!(DatasetConfig::builtin(DatasetName::TinyText).is_text());
    /// assert!(!DatasetConfig::builtin(DatasetName::Iris).is_text());
    /// ```
    pub fn is_text(&self) -> bool {
        self.name == Some(DatasetName::TinyText) || self.kind == Some(DataKind::Text)
    }

    /// How recipes name this data in messages: the bundled name, or `kind` and path.
    ///
    /// ```
    /// use burn_mpric_train::recipe::{DatasetConfig, DatasetName};
    ///
    /// assert_eq!(DatasetConfig::builtin(DatasetName::Iris).label(), "iris");
    /// ```
    pub fn label(&self) -> String {
        match (self.name, self.kind, &self.path) {
            (Some(name), _, _) => name.to_string(),
            (None, Some(kind), Some(path)) => format!("{kind} {}", path.display()),
            (None, Some(kind), None) => kind.to_string(),
            (None, None, _) => "(no dataset)".to_string(),
        }
    }

    /// Checks the table and applies the defaults; errors name the field.
    ///
    /// ```
    /// use burn_mpric_train::recipe::{Channels, DataSource, DatasetConfig};
    ///
    /// let images: DatasetConfig = serde_json::from_str(r#"{"kind": "image_folder", "path": "shapes"}"#).unwrap();
    /// let DataSource::ImageFolder(source) = images.source()? else { unreachable!() };
    /// assert_eq!((source.size, source.channels), (32, Channels::Rgb));
    ///
    /// let both: DatasetConfig = serde_json::from_str(r#"{"name": "iris", "kind": "csv"}"#).unwrap();
    /// assert_eq!(both.source().unwrap_err().field, "dataset.kind");
    /// let stray: DatasetConfig = serde_json::from_str(r#"{"kind": "text", "path": "a.txt", "target": "y"}"#).unwrap();
    /// assert_eq!(stray.source().unwrap_err().to_string(), "dataset.target: only kind `csv` takes it, this is kind `text`");
    /// # Ok::<(), burn_mpric_train::RecipeError>(())
    /// ```
    pub fn source(&self) -> Result<DataSource, RecipeError> {
        let kind = match (self.name, self.kind) {
            (Some(_), Some(_)) => {
                return Err(RecipeError::new(
                    "dataset.kind",
                    "give `name` (a bundled dataset) or `kind` and `path` (your data), not both",
                ));
            }
            (None, None) => {
                return Err(RecipeError::new(
                    "dataset.name",
                    "missing; give `name` (iris, winequality, diabetes, tiny_text) or `kind` (csv, text, image_folder) and `path`",
                ));
            }
            (Some(name), None) => {
                if self.path.is_some() {
                    return Err(RecipeError::new(
                        "dataset.path",
                        format!(
                            "the bundled dataset `{name}` has no path; for your own file give `kind` instead of `name`"
                        ),
                    ));
                }
                if let Some(field) = self.kind_fields().first() {
                    return Err(RecipeError::new(
                        format!("dataset.{field}"),
                        format!("only your own data takes it, `{name}` is a bundled dataset"),
                    ));
                }
                return Ok(DataSource::Builtin(name));
            }
            (None, Some(kind)) => kind,
        };
        if let Some(field) = self
            .kind_fields()
            .into_iter()
            .find(|field| KIND_FIELDS.iter().any(|(f, k)| f == field && *k != kind))
        {
            let owner = KIND_FIELDS
                .iter()
                .find(|(f, _)| *f == field)
                .map(|(_, k)| *k)
                .unwrap_or(kind);
            return Err(RecipeError::new(
                format!("dataset.{field}"),
                format!("only kind `{owner}` takes it, this is kind `{kind}`"),
            ));
        }
        let path = match &self.path {
            Some(path) if !path.as_os_str().is_empty() => path.clone(),
            _ => {
                return Err(RecipeError::new(
                    "dataset.path",
                    format!(
                        "missing; kind `{kind}` reads {}",
                        match kind {
                            DataKind::ImageFolder => "a folder",
                            _ => "a file",
                        }
                    ),
                ));
            }
        };
        match kind {
            DataKind::Text => Ok(DataSource::Text { path }),
            DataKind::Csv => {
                let target = match &self.target {
                    Some(target) if !target.trim().is_empty() => target.trim().to_string(),
                    _ => {
                        return Err(RecipeError::new(
                            "dataset.target",
                            "missing; kind `csv` needs the name of the target column",
                        ));
                    }
                };
                let task = self.task.ok_or_else(|| {
                    RecipeError::new(
                        "dataset.task",
                        "missing; give `classification` or `regression`",
                    )
                })?;
                let delimiter = match self.delimiter.as_deref().unwrap_or(",") {
                    "\\t" => b'\t',
                    d if d.len() == 1 && d.is_ascii() && d != "\"" && d != "\n" => d.as_bytes()[0],
                    d => {
                        return Err(RecipeError::new(
                            "dataset.delimiter",
                            format!(
                                "must be one ASCII character other than a quote or a newline (\"\\t\" for a tab), got {d:?}"
                            ),
                        ));
                    }
                };
                let ignore = self.ignore.clone().unwrap_or_default();
                if ignore.contains(&target) {
                    return Err(RecipeError::new(
                        "dataset.ignore",
                        format!("lists the target column `{target}`"),
                    ));
                }
                Ok(DataSource::Csv(CsvSource {
                    path,
                    target,
                    task,
                    header: self.header.unwrap_or(true),
                    delimiter,
                    ignore,
                }))
            }
            DataKind::ImageFolder => {
                let size = self.image_size.unwrap_or(32);
                if size == 0 || size > MAX_IMAGE_SIZE {
                    return Err(RecipeError::new(
                        "dataset.image_size",
                        format!("must be between 1 and {MAX_IMAGE_SIZE} pixels, got {size}"),
                    ));
                }
                Ok(DataSource::ImageFolder(ImageSource {
                    path,
                    size,
                    channels: self.channels.unwrap_or(Channels::Rgb),
                }))
            }
        }
    }

    /// The same table with every default of its kind spelled out.
    pub(crate) fn explicit(&self) -> Result<Self, RecipeError> {
        let mut spelled = self.clone();
        spelled.eval_fraction = Some(self.eval_fraction());
        match self.source()? {
            DataSource::Csv(csv) => {
                spelled.header = Some(csv.header);
                spelled.delimiter = Some((csv.delimiter as char).to_string());
                spelled.ignore = Some(csv.ignore);
            }
            DataSource::ImageFolder(images) => {
                spelled.image_size = Some(images.size);
                spelled.channels = Some(images.channels);
            }
            DataSource::Builtin(_) | DataSource::Text { .. } => {}
        }
        Ok(spelled)
    }

    /// The kind-specific fields this table sets.
    fn kind_fields(&self) -> Vec<&'static str> {
        let set = [
            self.target.is_some(),
            self.task.is_some(),
            self.header.is_some(),
            self.delimiter.is_some(),
            self.ignore.is_some(),
            self.image_size.is_some(),
            self.channels.is_some(),
        ];
        KIND_FIELDS
            .iter()
            .zip(set)
            .filter(|(_, set)| *set)
            .map(|((field, _), _)| *field)
            .collect()
    }
}

/// What each field of `[dataset]` accepts and a line that sets it, by its path below the table
/// (`""`: the table).
pub(super) fn field_help(field: &str) -> Option<Help> {
    Some(match field {
        "" => help(
            "a [dataset] table with `name` (a bundled dataset) or `kind` and `path` (your data)",
            "name = \"iris\" under [dataset]",
        ),
        "name" => help(
            one_of(&["iris", "winequality", "diabetes", "tiny_text"]),
            "name = \"iris\" under [dataset]",
        ),
        "kind" => help(
            one_of(&["csv", "text", "image_folder"]),
            "kind = \"csv\" under [dataset]",
        ),
        "path" => help(
            "a file or folder path in quotes",
            "path = \"data/wine.csv\" under [dataset]",
        ),
        "target" => help(
            "the target column's name in quotes",
            "target = \"quality\" under [dataset]",
        ),
        "task" => help(
            one_of(&["classification", "regression"]),
            "task = \"classification\" under [dataset]",
        ),
        "header" => help("`true` or `false`", "header = true under [dataset]"),
        "delimiter" => help(
            "one character in quotes",
            "delimiter = \";\" under [dataset]",
        ),
        "ignore" => help(
            "an array of column names in quotes",
            "ignore = [\"id\"] under [dataset]",
        ),
        "ignore[]" => help(
            "a column name in quotes",
            "ignore = [\"id\"] under [dataset]",
        ),
        "image_size" => help(
            "a whole number of pixels from 1 to 512",
            "image_size = 32 under [dataset]",
        ),
        "channels" => help(
            one_of(&["rgb", "gray"]),
            "channels = \"gray\" under [dataset]",
        ),
        "eval_fraction" => help(
            "a number between 0 and 0.9",
            "eval_fraction = 0.2 under [dataset]",
        ),
        _ => return None,
    })
}
