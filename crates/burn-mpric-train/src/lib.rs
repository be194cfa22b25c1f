//! Training recipes for [burn-mpric](https://github.com/burn-mpric/burn-mpric): a recipe file
//! names a model, a dataset, a backend, a precision policy, a loss scale and an optimizer;
//! `mpric train <recipe>` trains it with `Autodiff<MixedPrecision<B>>`, writes metrics (CSV,
//! JSON), plots (SVG) and checkpoints, and `--resume` continues a run bit for bit.
//!
//! ```
//! use burn_mpric_train::{Plan, TrainOptions, train};
//!
//! let recipe = concat!(env!("CARGO_MANIFEST_DIR"), "/../../recipes/quickstart.toml");
//! let output = std::env::temp_dir().join(format!("mpric-doc-lib-{}", std::process::id()));
//! let overrides = ["steps=50".to_string(), format!("output={}", output.display())];
//! let plan = Plan::load(recipe.as_ref(), &overrides)?;
//! let policy = plan.check_backend()?.policy; // as the backend resolves it
//! let summary = train(&plan, &TrainOptions { overwrite: true, ..TrainOptions::default() })?;
//! assert_eq!(policy.to_string(), "p=f32,c=bf16,o=f32");
//! assert_eq!(summary.step, 50);
//! assert!(output.join("metrics.csv").exists() && output.join("loss.svg").exists());
//! # std::fs::remove_dir_all(&output).unwrap();
//! # Ok::<(), burn_mpric_train::Error>(())
//! ```
//!
//! Determinism: the model is initialized from the recipe's seed (Burn's backend RNG is
//! seeded right before init, under a lock), the data split and batch order come from this
//! crate's own generator (`rng.rs`) whose state is checkpointed, and the models use no
//! dropout. Two runs of one recipe on one machine give the same parameters, and a run
//! stopped and resumed gives the parameters of the uninterrupted run.
#![warn(missing_docs)]

mod adapters;
mod atomic;
pub mod audit;
mod backend;
pub mod checkpoint;
pub mod cli;
mod data;
mod devices;
mod digest;
mod error;
pub mod infer;
mod launch;
mod models;
mod optim;
mod plan;
pub mod recipe;
pub mod report;
mod run;
pub mod schema;

pub use error::{Error, RecipeError};
pub use plan::{BackendCheck, Plan};
pub use recipe::Recipe;
pub use run::{
    DEFAULT_COORDINATOR, DEFAULT_STEP_TIMEOUT, Engine, MAX_PROCESSES, MIN_STEP_TIMEOUT, Processes,
    Summary, TrainOptions, train,
};
