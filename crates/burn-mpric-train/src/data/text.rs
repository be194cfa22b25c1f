//! Text tokenized by character, for the language model: the text shipped with this crate,
//! or a UTF-8 file of the user's.

use std::path::Path;

use crate::data::source::file_error;
use crate::digest::FileDigest;
use crate::error::RecipeError;

/// The most distinct characters a text may have (the model's vocabulary).
pub const MAX_VOCAB: usize = 65_536;

/// The shipped text (`data/tiny_text.txt`, about 16 KB of original English prose).
pub const TINY_TEXT: &str = include_str!("../../data/tiny_text.txt");

/// A character-level corpus: the vocabulary (sorted distinct characters) and the token ids of
/// the training part (the start of the text) and the evaluation part (its end).
#[derive(Debug, Clone)]
pub struct Text {
    vocab: Vec<char>,
    train: Vec<u32>,
    eval: Vec<u32>,
    context: usize,
    /// The content hash of the file the text was read from (none for the shipped text).
    pub digest: Option<FileDigest>,
    /// How messages name the text.
    pub name: String,
}

impl Text {
    /// Tokenizes the shipped text and holds out its last `eval_fraction` for evaluation;
    /// `context` is the model's window, which both parts must fit.
    pub fn load(eval_fraction: f64, context: usize) -> Result<Self, RecipeError> {
        Self::tokenize(TINY_TEXT, eval_fraction, context)
    }

    /// Tokenizes the content of the UTF-8 file `path`, as [`load`](Self::load) does the
    /// shipped text.
    pub fn from_file(
        path: &Path,
        bytes: &[u8],
        digest: FileDigest,
        eval_fraction: f64,
        context: usize,
    ) -> Result<Self, RecipeError> {
        let text = std::str::from_utf8(bytes).map_err(|err| {
            let valid = &bytes[..err.valid_up_to()];
            let line = valid.iter().filter(|b| **b == b'\n').count() + 1;
            let column = valid.len() - valid.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1) + 1;
            file_error(
                path,
                format!(
                    "not valid UTF-8: line {line}, byte {column} of the line (byte offset {}); save the text as UTF-8",
                    err.valid_up_to()
                ),
            )
        })?;
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        if text.trim().is_empty() {
            return Err(file_error(path, "has no text"));
        }
        let mut loaded = Self::tokenize(text, eval_fraction, context).map_err(|err| {
            RecipeError::new(err.field, format!("{}: {}", path.display(), err.message))
        })?;
        loaded.digest = Some(digest);
        loaded.name = format!("text {}", path.display());
        Ok(loaded)
    }

    fn tokenize(text: &str, eval_fraction: f64, context: usize) -> Result<Self, RecipeError> {
        let mut vocab: Vec<char> = text.chars().collect();
        vocab.sort_unstable();
        vocab.dedup();
        if vocab.len() > MAX_VOCAB {
            return Err(RecipeError::new(
                "dataset.path",
                format!(
                    "{} distinct characters; the character-level model takes at most {MAX_VOCAB}",
                    vocab.len()
                ),
            ));
        }
        let tokens: Vec<u32> = text
            .chars()
            .map(|c| vocab.binary_search(&c).unwrap_or(0) as u32)
            .collect();
        let eval_n = (tokens.len() as f64 * eval_fraction).round() as usize;
        let split = tokens.len() - eval_n.min(tokens.len());
        let (train, eval) = tokens.split_at(split);
        if eval.len() < context + 1 || train.len() < 2 * (context + 1) {
            return Err(RecipeError::new(
                "model.context",
                format!(
                    "the text has {} training and {} evaluation characters; a context of {context} does not fit (use a smaller context, a larger dataset.eval_fraction or a longer text)",
                    train.len(),
                    eval.len()
                ),
            ));
        }
        Ok(Self {
            vocab,
            train: train.to_vec(),
            eval: eval.to_vec(),
            context,
            digest: None,
            name: "tiny_text".to_string(),
        })
    }

    /// A text of held-out characters only, tokenized with `like`'s vocabulary: a file scored
    /// by a model trained on `like`. A character outside the vocabulary is an error naming
    /// it; the text must hold more characters than the context.
    pub(crate) fn held_out(path: &Path, text: &str, like: &Text) -> Result<Self, String> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut tokens = Vec::with_capacity(text.len());
        for (line, content) in text.split('\n').enumerate() {
            for c in (line > 0)
                .then_some('\n')
                .into_iter()
                .chain(content.chars())
            {
                match like.vocab.binary_search(&c) {
                    Ok(id) => tokens.push(id as u32),
                    Err(_) => {
                        return Err(format!(
                            "{}: line {}: the character {c:?} is not in the model's vocabulary of {} characters",
                            path.display(),
                            line + 1,
                            like.vocab.len()
                        ));
                    }
                }
            }
        }
        if tokens.len() < like.context + 1 {
            return Err(format!(
                "{}: {} characters; the model reads windows of {} and needs at least {}",
                path.display(),
                tokens.len(),
                like.context,
                like.context + 1
            ));
        }
        Ok(Self {
            vocab: like.vocab.clone(),
            train: Vec::new(),
            eval: tokens,
            context: like.context,
            digest: None,
            name: format!("text {}", path.display()),
        })
    }

    /// The vocabulary: token `i` is the `i`-th character.
    pub fn vocab(&self) -> &[char] {
        &self.vocab
    }

    /// Distinct characters.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// Training characters.
    pub fn train_len(&self) -> usize {
        self.train.len()
    }

    /// Evaluation characters.
    pub fn eval_len(&self) -> usize {
        self.eval.len()
    }

    /// The model's context length.
    pub fn context(&self) -> usize {
        self.context
    }

    /// The largest window start in the training part.
    pub fn max_train_offset(&self) -> usize {
        self.train.len() - self.context - 1
    }

    /// Window starts covering the evaluation part without overlap.
    pub fn eval_offsets(&self) -> Vec<usize> {
        (0..=self.eval.len() - self.context - 1)
            .step_by(self.context)
            .collect()
    }

    /// Inputs and next-character targets (each `offsets.len() × context`, row-major) of the
    /// windows starting at `offsets`.
    pub fn windows(&self, eval: bool, offsets: &[usize]) -> (Vec<i64>, Vec<i64>) {
        let tokens = if eval { &self.eval } else { &self.train };
        let mut inputs = Vec::with_capacity(offsets.len() * self.context);
        let mut targets = Vec::with_capacity(offsets.len() * self.context);
        for &offset in offsets {
            let window = &tokens[offset..offset + self.context + 1];
            inputs.extend(window[..self.context].iter().map(|t| i64::from(*t)));
            targets.extend(window[1..].iter().map(|t| i64::from(*t)));
        }
        (inputs, targets)
    }

    #[cfg(test)]
    /// Decodes token ids back to text.
    pub fn decode(&self, tokens: &[i64]) -> String {
        tokens
            .iter()
            .map(|t| self.vocab.get(*t as usize).copied().unwrap_or('?'))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tiny_text() {
        use crate::data::text::TINY_TEXT;
        assert!(TINY_TEXT.len() > 10_000);
        assert!(TINY_TEXT.starts_with("The Lighthouse Keeper"));
    }

    #[test]
    fn text() {
        use crate::data::text::Text;

        let text = Text::load(0.1, 64).unwrap();
        assert!(text.vocab_size() > 40 && text.vocab_size() < 100);
        assert!(text.train_len() > 8 * text.eval_len());
        assert!(Text::load(0.1, 100_000).is_err());
    }

    #[test]
    fn load() {
        use crate::data::text::{TINY_TEXT, Text};
        let text = Text::load(0.1, 64).unwrap();
        assert_eq!(
            text.train_len() + text.eval_len(),
            TINY_TEXT.chars().count()
        );
        assert_eq!(Text::load(0.1, 100_000).unwrap_err().field, "model.context");
    }

    #[test]
    fn vocab_size() {
        use crate::data::text::Text;
        let text = Text::load(0.1, 8).unwrap();
        assert!(text.vocab_size() < 100);
    }

    #[test]
    fn train_len() {
        use crate::data::text::Text;
        assert!(Text::load(0.1, 8).unwrap().train_len() > 10_000);
    }

    #[test]
    fn eval_len() {
        use crate::data::text::Text;
        assert!(Text::load(0.1, 8).unwrap().eval_len() > 1_000);
    }

    #[test]
    fn context() {
        use crate::data::text::Text;
        assert_eq!(Text::load(0.1, 8).unwrap().context(), 8);
    }

    #[test]
    fn max_train_offset() {
        use crate::data::text::Text;
        let text = Text::load(0.1, 8).unwrap();
        assert_eq!(text.max_train_offset(), text.train_len() - 9);
    }

    #[test]
    fn eval_offsets() {
        use crate::data::text::Text;
        let text = Text::load(0.1, 8).unwrap();
        let offsets = text.eval_offsets();
        assert_eq!(offsets[..3], [0, 8, 16]);
        assert!(*offsets.last().unwrap() + 9 <= text.eval_len());
    }

    #[test]
    fn windows() {
        use crate::data::text::Text;
        let text = Text::load(0.1, 4).unwrap();
        let (inputs, targets) = text.windows(false, &[0]);
        assert_eq!(text.decode(&inputs), "The ");
        assert_eq!(text.decode(&targets), "he L");
    }

    #[test]
    fn from_file() {
        use crate::data::text::Text;
        use crate::digest::FileDigest;
        use std::path::Path;

        let bytes = "ab\u{e9}c ".repeat(40);
        let digest = FileDigest::of(bytes.as_bytes());
        let text = Text::from_file(
            Path::new("t.txt"),
            bytes.as_bytes(),
            digest.clone(),
            0.25,
            8,
        )
        .unwrap();
        assert_eq!(
            (text.vocab_size(), text.train_len(), text.eval_len()),
            (5, 150, 50)
        );
        assert_eq!(text.digest, Some(digest.clone()));
        let (inputs, _) = text.windows(false, &[0]);
        assert_eq!(text.decode(&inputs), "ab\u{e9}c ab\u{e9}");

        let err = |bytes: &[u8]| {
            Text::from_file(Path::new("t.txt"), bytes, digest.clone(), 0.25, 8)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(b"hello\nwor\xffld"),
            "dataset.path: t.txt: not valid UTF-8: line 2, byte 4 of the line (byte offset 9); save the text as UTF-8"
        );
        assert_eq!(err(b" \n\t"), "dataset.path: t.txt: has no text");
        assert!(err(b"short text").starts_with("model.context: t.txt: the text has "));
    }

    #[test]
    fn decode() {
        use crate::data::text::Text;

        let text = Text::load(0.1, 16).unwrap();
        let (inputs, _) = text.windows(false, &[0]);
        assert_eq!(text.decode(&inputs), "The Lighthouse K");
    }
}
