//! A folder of images, one subfolder per class (the layout of torchvision's `ImageFolder`
//! and burn-dataset's `ImageFolderDataset`), decoded with the `image` crate, resized to the
//! recipe's square size and read as a [`Table`] of pixels. burn-dataset's own reader comes
//! with its `vision` feature, which also brings an HTTP client for dataset downloads; the
//! `image` crate it uses is all this needs.
//!
//! Which files count: inside a class folder (and its subfolders) every `.png`, `.jpg`,
//! `.jpeg` and `.bmp` file is an image and must decode (a damaged image is an error naming
//! it, never dropped in silence); other files (notes, `Thumbs.db`) and files at the top
//! level are skipped and counted in the run's description; names starting with `.` are
//! hidden and ignored.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use image::imageops::FilterType;
use image::{DynamicImage, ImageReader, Limits};

use crate::data::source::{FolderDigest, file_error, read_limited, resolve};
use crate::data::tabular::{Table, Tabular, Targets};
use crate::error::RecipeError;
use crate::recipe::{Channels, ImageSource};

/// File extensions read as images (lowercase).
pub const IMAGE_EXTENSIONS: [&str; 4] = ["png", "jpg", "jpeg", "bmp"];

/// The largest image file read.
const MAX_IMAGE_FILE_BYTES: u64 = 64 << 20;

/// The largest decoded image (width or height, and memory).
const MAX_IMAGE_SIDE: u32 = 16_384;
const MAX_DECODED_BYTES: u64 = 512 << 20;

/// The most pixel values (images × channels × size²) a dataset may hold in memory.
const MAX_VALUES: usize = 1 << 28;

/// How deep class folders may nest.
const MAX_DEPTH: usize = 8;

/// The side and channels of every image of a dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageShape {
    /// 1 (gray) or 3 (rgb).
    pub channels: usize,
    /// Height and width.
    pub size: usize,
}

/// An image folder, loaded: the pixels as a tabular dataset (one feature per channel and
/// pixel, standardized per channel), their shape, and the files skipped.
#[derive(Debug, Clone)]
pub struct Images {
    /// Examples and classes.
    pub table: Tabular,
    /// The images' shape.
    pub shape: ImageShape,
    /// The class names (the subfolders), in class-id order.
    pub classes: Vec<String>,
    /// Colour or grey, as the recipe reads the files.
    pub channels: Channels,
    /// Files that are not images, relative to the folder.
    pub skipped: Vec<String>,
}

/// Loads the folder `source.path` (resolved against `base`).
pub fn load(
    base: &Path,
    source: &ImageSource,
    eval_fraction: f64,
    seed: u64,
) -> Result<Images, RecipeError> {
    let root = resolve(base, &source.path);
    let meta =
        std::fs::metadata(&root).map_err(|e| file_error(&root, format!("cannot read it: {e}")))?;
    if !meta.is_dir() {
        return Err(file_error(
            &root,
            "is a file; kind `image_folder` reads a folder with one subfolder per class",
        ));
    }
    let mut skipped = Vec::new();
    let mut classes = Vec::new();
    for entry in sorted_entries(&root)? {
        if entry.is_dir() {
            classes.push(entry);
        } else {
            skipped.push(relative(&root, &entry));
        }
    }
    if classes.len() < 2 {
        return Err(file_error(
            &root,
            format!(
                "has {} class folder{}; kind `image_folder` needs one subfolder per class, at least 2",
                classes.len(),
                if classes.len() == 1 { "" } else { "s" }
            ),
        ));
    }

    let mut files: Vec<(usize, PathBuf)> = Vec::new();
    let mut names = Vec::with_capacity(classes.len());
    for (id, class) in classes.iter().enumerate() {
        let before = files.len();
        let mut images = Vec::new();
        walk(class, 0, &mut images, &mut |p| {
            skipped.push(relative(&root, p))
        })?;
        files.extend(images.into_iter().map(|p| (id, p)));
        if files.len() == before {
            return Err(file_error(
                class,
                format!(
                    "class folder holds no images ({})",
                    IMAGE_EXTENSIONS.join(", ")
                ),
            ));
        }
        names.push(relative(&root, class));
    }

    let shape = ImageShape {
        channels: source.channels.count(),
        size: source.size,
    };
    let per_image = shape.channels * shape.size * shape.size;
    if files.len().saturating_mul(per_image) > MAX_VALUES {
        return Err(RecipeError::new(
            "dataset.image_size",
            format!(
                "{}: {} images of {}x{}x{} values are {} MiB in memory, more than the {} MiB a recipe may hold; use a smaller image_size",
                root.display(),
                files.len(),
                shape.channels,
                shape.size,
                shape.size,
                (files.len() * per_image * 8) >> 20,
                (MAX_VALUES * 8) >> 20
            ),
        ));
    }

    let mut digest = FolderDigest::default();
    let mut values = Vec::with_capacity(files.len() * per_image);
    let mut ids = Vec::with_capacity(files.len());
    for (id, path) in &files {
        let bytes = read_image_file(path)?;
        digest.add(&relative(&root, path), &bytes);
        values.extend(pixels(path, &bytes, shape, source.channels)?);
        ids.push(*id);
    }
    let targets = Targets::Classes {
        ids,
        names: names.clone(),
    };
    let table = Table {
        values,
        features: per_image,
        names: Vec::new(),
        target: "class folder".to_string(),
        targets,
    };
    let name = format!("image_folder {}", source.path.display());
    let mut table = Tabular::split(name, table, eval_fraction, seed, shape.size * shape.size)?;
    table.digest = Some(digest.finish());
    Ok(Images {
        table,
        shape,
        classes: names,
        channels: source.channels,
        skipped,
    })
}

/// The entries of a folder, hidden ones left out, sorted by name.
fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>, RecipeError> {
    let read =
        std::fs::read_dir(dir).map_err(|e| file_error(dir, format!("cannot list it: {e}")))?;
    let mut entries = Vec::new();
    for entry in read {
        let entry = entry.map_err(|e| file_error(dir, format!("cannot list it: {e}")))?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        entries.push(entry.path());
    }
    entries.sort();
    Ok(entries)
}

/// The image files under `dir`, in name order; other files go to `skip`.
fn walk(
    dir: &Path,
    depth: usize,
    images: &mut Vec<PathBuf>,
    skip: &mut dyn FnMut(&Path),
) -> Result<(), RecipeError> {
    if depth > MAX_DEPTH {
        return Err(file_error(
            dir,
            format!("folders nest more than {MAX_DEPTH} levels deep (a link loop?)"),
        ));
    }
    for entry in sorted_entries(dir)? {
        if entry.is_dir() {
            walk(&entry, depth + 1, images, skip)?;
        } else if is_image_name(&entry) {
            images.push(entry);
        } else {
            skip(&entry);
        }
    }
    Ok(())
}

fn is_image_name(path: &Path) -> bool {
    path.extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .is_some_and(|e| IMAGE_EXTENSIONS.contains(&e.as_str()))
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

fn read_image_file(path: &Path) -> Result<Vec<u8>, RecipeError> {
    let bytes = read_limited(path, MAX_IMAGE_FILE_BYTES)
        .map_err(|e| file_error(path, format!("cannot read it: {e}")))?;
    if bytes.len() as u64 > MAX_IMAGE_FILE_BYTES {
        return Err(file_error(
            path,
            format!(
                "larger than {} MiB; image files are read whole",
                MAX_IMAGE_FILE_BYTES >> 20
            ),
        ));
    }
    Ok(bytes)
}

/// Decodes `bytes`, resizes to the shape, and returns the values in `[0, 1]`, channel-major.
fn pixels(
    path: &Path,
    bytes: &[u8],
    shape: ImageShape,
    channels: Channels,
) -> Result<Vec<f64>, RecipeError> {
    Ok(values(&decode(path, bytes)?, shape, channels))
}

/// The image in a file's bytes, within the size limits.
fn decode(path: &Path, bytes: &[u8]) -> Result<DynamicImage, RecipeError> {
    let not_image = |e: &dyn std::fmt::Display| {
        file_error(
            path,
            format!(
                "not a readable image ({e}); fix or remove it, or move it out of the class folders"
            ),
        )
    };
    let mut reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| not_image(&e))?;
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_IMAGE_SIDE);
    limits.max_image_height = Some(MAX_IMAGE_SIDE);
    limits.max_alloc = Some(MAX_DECODED_BYTES);
    reader.limits(limits);
    reader.decode().map_err(|e| not_image(&e))
}

/// An image resized to the shape, its values in `[0, 1]`, channel-major.
fn values(image: &DynamicImage, shape: ImageShape, channels: Channels) -> Vec<f64> {
    let size = shape.size as u32;
    let resized = image.resize_exact(size, size, FilterType::Triangle);
    let plane = shape.size * shape.size;
    let mut out = vec![0.0f64; shape.channels * plane];
    match channels {
        Channels::Rgb => {
            for (i, px) in resized.to_rgb8().pixels().enumerate() {
                for c in 0..3 {
                    out[c * plane + i] = f64::from(px.0[c]) / 255.0;
                }
            }
        }
        Channels::Gray => {
            for (i, px) in resized.to_luma8().pixels().enumerate() {
                out[i] = f64::from(px.0[0]) / 255.0;
            }
        }
    }
    out
}

/// One image file as a model trained on `channels` images of `shape` reads it: the values
/// training would have made of it. An image of another size or channel count is refused
/// (naming what it is and what the model reads) unless `resize`, which converts and resizes
/// it as training does.
pub(crate) fn read_for_model(
    path: &Path,
    shape: ImageShape,
    channels: Channels,
    resize: bool,
) -> Result<Vec<f64>, String> {
    let bytes = read_image_file(path).map_err(|e| e.message)?;
    let image = decode(path, &bytes).map_err(|e| e.message)?;
    let color = image.color();
    let has = usize::from(color.channel_count()) - usize::from(color.has_alpha());
    let (w, h) = (image.width() as usize, image.height() as usize);
    if !resize && (w != shape.size || h != shape.size || has != shape.channels) {
        let name = |n: usize| if n == 1 { "gray" } else { "color" };
        return Err(format!(
            "{}: a {w}x{h} {} image; the model reads {}x{} {} images (pass --resize to convert and resize it as training did)",
            path.display(),
            name(has),
            shape.size,
            shape.size,
            name(shape.channels)
        ));
    }
    Ok(values(&image, shape, channels))
}

/// The image files under `dir` (its subfolders too), in name order.
pub(crate) fn image_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut images = Vec::new();
    walk(dir, 0, &mut images, &mut |_| {}).map_err(|e| e.message)?;
    Ok(images)
}

/// The class folders of an image folder (its subfolders, in name order), each with its
/// image files.
pub(crate) fn class_folders(root: &Path) -> Result<Vec<(String, Vec<PathBuf>)>, String> {
    let mut classes = Vec::new();
    for entry in sorted_entries(root).map_err(|e| e.message)? {
        if entry.is_dir() {
            let mut images = Vec::new();
            walk(&entry, 0, &mut images, &mut |_| {}).map_err(|e| e.message)?;
            classes.push((relative(root, &entry), images));
        }
    }
    Ok(classes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{Rgb, RgbImage};

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mpric-images-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn source(path: &Path, size: usize, channels: Channels) -> ImageSource {
        ImageSource {
            path: path.to_path_buf(),
            size,
            channels,
        }
    }

    /// A `w × h` image of one colour, saved as PNG.
    fn save(path: &Path, w: u32, h: u32, colour: [u8; 3]) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        RgbImage::from_pixel(w, h, Rgb(colour)).save(path).unwrap();
    }

    #[test]
    fn classes_are_subfolders_and_images_are_resized() {
        let dir = scratch("ok");
        for i in 0..3 {
            save(&dir.join(format!("red/{i}.png")), 7, 5, [255, 0, 0]);
            save(&dir.join(format!("blue/deeper/{i}.PNG")), 3, 9, [0, 0, 255]);
        }
        std::fs::write(dir.join("red/notes.txt"), "not an image").unwrap();
        std::fs::write(dir.join("README"), "top level").unwrap();
        std::fs::write(dir.join("red/.hidden.png"), "ignored").unwrap();
        let images = load(&dir, &source(&dir, 4, Channels::Rgb), 0.34, 0).unwrap();
        assert_eq!(images.classes, vec!["blue", "red"]);
        assert_eq!(
            images.shape,
            ImageShape {
                channels: 3,
                size: 4
            }
        );
        assert_eq!(images.skipped, vec!["README", "red/notes.txt"]);
        let t = &images.table;
        assert_eq!((t.features, t.train_len(), t.eval_len()), (48, 4, 2));
        // Red images have the red plane above the mean and the blue plane below it.
        let (x, y) = t.rows(false, &(0..4).collect::<Vec<_>>());
        for (row, class) in x.chunks(48).zip(y) {
            let (r, b) = (row[0], row[32]);
            assert_eq!(r > 0.0, class == 1.0, "{row:?}");
            assert_eq!(b > 0.0, class == 0.0, "{row:?}");
        }
        let digest = t.digest.clone().unwrap();
        // The digest changes with any image's content, and only with images.
        std::fs::write(dir.join("red/notes.txt"), "edited").unwrap();
        assert_eq!(
            load(&dir, &source(&dir, 4, Channels::Rgb), 0.34, 0)
                .unwrap()
                .table
                .digest,
            Some(digest.clone())
        );
        save(&dir.join("red/0.png"), 7, 5, [250, 0, 0]);
        assert_ne!(
            load(&dir, &source(&dir, 4, Channels::Rgb), 0.34, 0)
                .unwrap()
                .table
                .digest,
            Some(digest)
        );
        let gray = load(&dir, &source(&dir, 2, Channels::Gray), 0.34, 0).unwrap();
        assert_eq!(gray.table.features, 4);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_folders_and_images_are_named() {
        let dir = scratch("bad");
        let err = |dir: &Path| {
            load(dir, &source(dir, 4, Channels::Rgb), 0.2, 0)
                .unwrap_err()
                .to_string()
        };
        assert!(err(&dir.join("missing")).contains("cannot read it"));
        save(&dir.join("only/0.png"), 2, 2, [1, 2, 3]);
        assert!(
            err(&dir).ends_with(
                "has 1 class folder; kind `image_folder` needs one subfolder per class, at least 2"
            ),
            "{}",
            err(&dir)
        );
        std::fs::create_dir_all(dir.join("empty")).unwrap();
        std::fs::write(dir.join("empty/a.txt"), "x").unwrap();
        assert_eq!(
            err(&dir),
            format!(
                "dataset.path: {}: class folder holds no images (png, jpg, jpeg, bmp)",
                dir.join("empty").display()
            )
        );
        std::fs::write(dir.join("empty/broken.jpg"), b"\xff\xd8\xff\xe0 truncated").unwrap();
        let message = err(&dir);
        assert!(
            message.starts_with(&format!(
                "dataset.path: {}: not a readable image (",
                dir.join("empty/broken.jpg").display()
            )),
            "{message}"
        );
        std::fs::write(
            dir.join("empty/broken.jpg"),
            b"plain text with an image name",
        )
        .unwrap();
        assert!(err(&dir).contains("broken.jpg: not a readable image"));
        assert!(err(&dir.join("only/0.png")).ends_with(
            "is a file; kind `image_folder` reads a folder with one subfolder per class"
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn oversized_images_are_refused_before_decoding() {
        let dir = scratch("bomb");
        // A PNG header claiming 100000 x 100000 pixels.
        let mut header = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR".to_vec();
        header.extend(100_000u32.to_be_bytes());
        header.extend(100_000u32.to_be_bytes());
        header.extend([8, 2, 0, 0, 0, 0, 0, 0, 0]);
        std::fs::create_dir_all(dir.join("a")).unwrap();
        std::fs::write(dir.join("a/big.png"), &header).unwrap();
        save(&dir.join("b/0.png"), 2, 2, [0, 0, 0]);
        let err = load(&dir, &source(&dir, 4, Channels::Rgb), 0.2, 0).unwrap_err();
        assert!(
            err.message.contains("big.png: not a readable image"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
