//! A CSV file as a table of numeric features and one target column, read with the `csv`
//! crate (the reader burn-dataset itself builds on; burn-dataset's `InMemDataset::from_csv`
//! wants a row type known at compile time, and a recipe's columns are known at run time).

use std::path::Path;

use crate::data::source::file_error;
use crate::data::tabular::{Table, Targets};
use crate::error::RecipeError;
use crate::recipe::{CsvSource, TaskKind};

/// The most classes a classification target may have.
pub const MAX_CLASSES: usize = 65_536;

/// Parses `bytes`, the content of `path`, as `source` describes it.
pub fn parse(path: &Path, bytes: &[u8], source: &CsvSource) -> Result<Table, RecipeError> {
    let mut reader = CsvReader::new(bytes, source.header, source.delimiter);
    let in_file = |message: String| file_error(path, message);
    let at = |line: Option<u64>, message: String| match line {
        Some(line) => file_error(path, format!("line {line}: {message}")),
        None => file_error(path, message),
    };
    let names = reader.names().map_err(in_file)?;
    let list = |names: &[String]| {
        let shown: Vec<String> = names.iter().take(20).map(|n| format!("`{n}`")).collect();
        let more = names.len().saturating_sub(20);
        if more > 0 {
            format!("{} and {more} more", shown.join(", "))
        } else {
            shown.join(", ")
        }
    };
    let target = names
        .iter()
        .position(|n| *n == source.target)
        .ok_or_else(|| {
            RecipeError::new(
                "dataset.target",
                format!(
                    "{}: no column `{}`; the columns are {}",
                    path.display(),
                    source.target,
                    list(&names)
                ),
            )
        })?;
    if let Some(missing) = source.ignore.iter().find(|n| !names.contains(n)) {
        return Err(RecipeError::new(
            "dataset.ignore",
            format!(
                "{}: no column `{missing}`; the columns are {}",
                path.display(),
                list(&names)
            ),
        ));
    }
    let features: Vec<usize> = (0..names.len())
        .filter(|&i| i != target && !source.ignore.contains(&names[i]))
        .collect();
    if features.is_empty() {
        return Err(file_error(
            path,
            format!(
                "no feature columns: every column besides the target `{}` is ignored",
                source.target
            ),
        ));
    }

    let mut values = Vec::new();
    let mut labels: Vec<String> = Vec::new();
    let mut lines: Vec<Option<u64>> = Vec::new();
    let mut rows = 0usize;
    for row in reader {
        let (line, row) = row.map_err(in_file)?;
        for &f in &features {
            let field = &row[f];
            match field.parse::<f64>() {
                Ok(v) if v.is_finite() => values.push(v),
                _ => {
                    let what = if field.is_empty() {
                        "is empty".to_string()
                    } else {
                        format!("`{}` is not a finite number", truncate(field))
                    };
                    return Err(at(
                        line,
                        format!(
                            "column `{}` {what} (every column but the target must be numeric; leave a column out with dataset.ignore)",
                            names[f]
                        ),
                    ));
                }
            }
        }
        let label = &row[target];
        if label.is_empty() {
            return Err(at(line, format!("the target `{}` is empty", source.target)));
        }
        labels.push(label.to_string());
        lines.push(line);
        rows += 1;
    }
    if rows == 0 {
        return Err(file_error(path, "has a header but no data rows"));
    }

    let targets = match source.task {
        TaskKind::Regression => {
            let mut ys = Vec::with_capacity(rows);
            for (i, label) in labels.iter().enumerate() {
                match label.parse::<f64>() {
                    Ok(v) if v.is_finite() => ys.push(v),
                    _ => {
                        return Err(at(
                            lines[i],
                            format!(
                                "the target `{}` is `{}`, not a finite number (task = \"regression\"; use \"classification\" for labels)",
                                source.target,
                                truncate(label)
                            ),
                        ));
                    }
                }
            }
            Targets::Values(ys)
        }
        TaskKind::Classification => {
            let mut classes: Vec<&str> = labels.iter().map(String::as_str).collect();
            classes.sort_by(|a, b| compare_labels(a, b));
            classes.dedup();
            if classes.len() < 2 {
                return Err(file_error(
                    path,
                    format!(
                        "the target `{}` has one value (`{}`); classification needs at least 2 classes",
                        source.target,
                        truncate(classes.first().copied().unwrap_or_default())
                    ),
                ));
            }
            if classes.len() > MAX_CLASSES {
                return Err(file_error(
                    path,
                    format!(
                        "the target `{}` has {} distinct values; classification takes at most {MAX_CLASSES} (use task = \"regression\" for a number)",
                        source.target,
                        classes.len()
                    ),
                ));
            }
            let class_names: Vec<String> = classes.iter().map(|c| c.to_string()).collect();
            let ids = labels
                .iter()
                .map(|l| {
                    class_names
                        .binary_search_by(|c| compare_labels(c, l))
                        .unwrap_or(0)
                })
                .collect();
            Targets::Classes {
                ids,
                names: class_names,
            }
        }
    };
    Ok(Table {
        values,
        features: features.len(),
        names: features.iter().map(|&f| names[f].clone()).collect(),
        target: source.target.clone(),
        targets,
    })
}

/// A CSV file's rows as training and `mpric predict`/`evaluate --data` read them: fields
/// trimmed, every row as long as the first (or the header), line numbers that count "\r\n"
/// line ends, and one text per problem (`line N: ...`; the caller names the file).
pub(crate) struct CsvReader<'a> {
    reader: csv::Reader<&'a [u8]>,
    lines: Lines<'a>,
    header: bool,
    /// The first row of a file without a header, read for its number of columns.
    first: Option<csv::StringRecord>,
}

impl<'a> CsvReader<'a> {
    /// Reads `bytes`, whose first line is a header when `header` is set.
    pub(crate) fn new(bytes: &'a [u8], header: bool, delimiter: u8) -> Self {
        let reader = csv::ReaderBuilder::new()
            .has_headers(header)
            .delimiter(delimiter)
            .trim(csv::Trim::All)
            .flexible(false)
            .from_reader(bytes);
        Self {
            reader,
            lines: Lines::new(bytes),
            header,
            first: None,
        }
    }

    /// The column names: the header's (line 1), or positions from 1 for a file without one;
    /// refused when there is none, or when a name appears twice.
    pub(crate) fn names(&mut self) -> Result<Vec<String>, String> {
        let names: Vec<String> = if self.header {
            let header = self.reader.headers().map_err(|err| match err.kind() {
                csv::ErrorKind::Utf8 { .. } => "line 1: the header is not valid UTF-8".to_string(),
                _ => format!("line 1: {err}"),
            })?;
            if header.is_empty() || header.iter().all(str::is_empty) {
                return Err("is empty (no header row)".into());
            }
            header.iter().map(str::to_string).collect()
        } else {
            let mut first = csv::StringRecord::new();
            match self.reader.read_record(&mut first) {
                Ok(true) => {}
                Ok(false) => return Err("has no rows".into()),
                Err(err) => return Err(self.describe(err)),
            }
            let names = (1..=first.len()).map(|i| i.to_string()).collect();
            self.first = Some(first);
            names
        };
        if let Some(dup) = names
            .iter()
            .enumerate()
            .find(|(i, n)| names[..*i].contains(n))
            .map(|(_, n)| n)
        {
            return Err(format!(
                "line 1: column `{}` appears twice in the header",
                dup.escape_debug()
            ));
        }
        Ok(names)
    }

    /// A row's error as the file's line shows it.
    fn describe(&mut self, err: csv::Error) -> String {
        let message = match err.kind() {
            csv::ErrorKind::UnequalLengths {
                expected_len, len, ..
            } => format!(
                "{len} fields where {} has {expected_len}",
                if self.header {
                    "the header"
                } else {
                    "the first row"
                }
            ),
            csv::ErrorKind::Utf8 { .. } => "not valid UTF-8".to_string(),
            csv::ErrorKind::Io(e) => format!("cannot read it: {e}"),
            _ => err.to_string(),
        };
        match err.position().map(|p| self.lines.at(p)) {
            Some(line) => format!("line {line}: {message}"),
            None => message,
        }
    }
}

/// The rows after the header (for a file without one, from the first row), each with the
/// line it starts on; read [`CsvReader::names`] first.
impl Iterator for CsvReader<'_> {
    type Item = Result<(Option<u64>, csv::StringRecord), String>;

    fn next(&mut self) -> Option<Self::Item> {
        let record = match self.first.take() {
            Some(first) => first,
            None => {
                let mut record = csv::StringRecord::new();
                match self.reader.read_record(&mut record) {
                    Ok(true) => record,
                    Ok(false) => return None,
                    Err(err) => return Some(Err(self.describe(err))),
                }
            }
        };
        let line = record.position().map(|p| self.lines.at(p));
        Some(Ok((line, record)))
    }
}

/// Line numbers of CSV records, counted from their byte offsets: the reader's own line
/// counter does not count lines that end in "\r\n" (files saved on Windows). Records are
/// asked for in file order, so each count continues from the previous one.
struct Lines<'a> {
    bytes: &'a [u8],
    /// The offset counted up to, and the newlines before it.
    counted: (usize, u64),
}

impl<'a> Lines<'a> {
    /// Counting lines of `bytes`.
    fn new(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            counted: (0, 0),
        }
    }

    /// The line (from 1) a record at `position` starts on.
    fn at(&mut self, position: &csv::Position) -> u64 {
        let bytes = self.bytes;
        // A record's offset may point at the "\n" of the "\r\n" before it: start past it.
        let mut start = (position.byte() as usize).min(bytes.len());
        while start < bytes.len() && matches!(bytes[start], b'\r' | b'\n') {
            start += 1;
        }
        if start < self.counted.0 {
            self.counted = (0, 0);
        }
        let (from, before) = self.counted;
        let newlines = before + bytes[from..start].iter().filter(|b| **b == b'\n').count() as u64;
        self.counted = (start, newlines);
        newlines + 1
    }
}

/// Labels in numeric order where both are numbers (`2` before `10`), else in text order.
fn compare_labels(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) if x.is_finite() && y.is_finite() => x.total_cmp(&y).then_with(|| a.cmp(b)),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        _ => a.cmp(b),
    }
}

/// A field as an error message shows it: at most 40 characters.
fn truncate(field: &str) -> String {
    if field.chars().count() > 40 {
        format!("{}...", field.chars().take(40).collect::<String>())
    } else {
        field.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn source(task: TaskKind) -> CsvSource {
        CsvSource {
            path: PathBuf::from("d.csv"),
            target: "y".into(),
            task,
            header: true,
            delimiter: b',',
            ignore: vec![],
        }
    }

    fn parse_str(text: &str, source: &CsvSource) -> Result<Table, RecipeError> {
        parse(Path::new("d.csv"), text.as_bytes(), source)
    }

    #[test]
    fn classes_are_the_sorted_distinct_labels() {
        let table = parse_str(
            "a, y ,b\n1,10,2\n3,2,4\n5,10,6\n",
            &source(TaskKind::Classification),
        )
        .unwrap();
        assert_eq!((table.features, table.values.len()), (2, 6));
        assert_eq!(table.values, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let Targets::Classes { ids, names } = table.targets else {
            panic!()
        };
        assert_eq!(names, vec!["2", "10"]); // numeric order
        assert_eq!(ids, vec![1, 0, 1]);
    }

    #[test]
    fn text_labels_and_ignored_columns() {
        let mut s = source(TaskKind::Classification);
        s.ignore = vec!["id".into()];
        let table = parse_str("id,x,y\nq1,0.5,cat\nq2,1.5,dog\n", &s).unwrap();
        assert_eq!(table.values, vec![0.5, 1.5]);
        let Targets::Classes { names, .. } = table.targets else {
            panic!()
        };
        assert_eq!(names, vec!["cat", "dog"]);
    }

    #[test]
    fn no_header_names_columns_by_position() {
        let mut s = source(TaskKind::Regression);
        s.header = false;
        s.target = "2".into();
        s.delimiter = b';';
        let table = parse_str("1;7.5\n2;8.5\n", &s).unwrap();
        assert_eq!(table.values, vec![1.0, 2.0]);
        assert!(matches!(table.targets, Targets::Values(ref v) if v == &vec![7.5, 8.5]));
    }

    #[test]
    fn bad_rows_name_the_line() {
        let c = source(TaskKind::Classification);
        let err = |text: &str| parse_str(text, &c).unwrap_err().to_string();
        assert_eq!(
            err("x,y\n1,a\n2\n"),
            "dataset.path: d.csv: line 3: 1 fields where the header has 2"
        );
        assert_eq!(
            err("x,y\n1,a\nfoo,b\n"),
            "dataset.path: d.csv: line 3: column `x` `foo` is not a finite number (every column but the target must be numeric; leave a column out with dataset.ignore)"
        );
        assert!(err("x,y\n,a\n2,b\n").contains("line 2: column `x` is empty"));
        assert!(err("x,y\n1,a\n2,\n").contains("line 3: the target `y` is empty"));
        assert!(err("x,y\nNaN,a\n2,b\n").contains("`NaN` is not a finite number"));
        assert_eq!(err(""), "dataset.path: d.csv: is empty (no header row)");
        assert_eq!(
            err("x,y\n"),
            "dataset.path: d.csv: has a header but no data rows"
        );
        assert!(err("x,y\n1,a\n2,a\n").contains("has one value (`a`)"));
        assert!(err("x,x,y\n1,2,a\n").contains("line 1: column `x` appears twice"));
        let bad_utf8 = parse(Path::new("d.csv"), b"x,y\n1,a\n2,\xff\n", &c).unwrap_err();
        assert_eq!(
            bad_utf8.to_string(),
            "dataset.path: d.csv: line 3: not valid UTF-8"
        );
    }

    #[test]
    fn windows_line_endings_count_lines() {
        let c = source(TaskKind::Classification);
        let text = "x,y\r\n1,a\r\n2,b\r\nthree,a\r\n";
        let err = parse_str(text, &c).unwrap_err().to_string();
        assert!(err.contains("line 4: column `x` `three`"), "{err}");
        let err = parse_str("x,y\r\n1,a\r\n2\r\n", &c)
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 3: 1 fields"), "{err}");
    }

    #[test]
    fn unknown_columns_list_the_real_ones() {
        let mut s = source(TaskKind::Classification);
        s.target = "label".into();
        let err = parse_str("a,b\n1,2\n", &s).unwrap_err();
        assert_eq!(
            err.to_string(),
            "dataset.target: d.csv: no column `label`; the columns are `a`, `b`"
        );
        let mut s = source(TaskKind::Classification);
        s.ignore = vec!["zz".into()];
        assert_eq!(
            parse_str("a,y\n1,2\n", &s).unwrap_err().field,
            "dataset.ignore"
        );
    }

    #[test]
    fn regression_targets_must_be_numbers() {
        let err = parse_str("x,y\n1,2.5\n2,high\n", &source(TaskKind::Regression)).unwrap_err();
        assert!(
            err.message
                .contains("line 3: the target `y` is `high`, not a finite number"),
            "{err}"
        );
    }
}
