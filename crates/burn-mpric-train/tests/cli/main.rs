//! End-to-end tests of the `mpric` binary and the recipe files: exact resume, a run killed
//! with SIGKILL, checkpoint integrity, run locking and divergence, several devices, bad recipes, the quickstart's mixed-vs-f32 result, the plots, `mpric policy`, recipes on the user's own files, `mpric audit`, runs of several processes (over MPI too, with feature `mpi`), `evaluate`, `predict` and `export` after training, and the GPU backends by compiler (`mpric devices`, `backend = "vulkan"`).
//!
//! Every test runs the real binary on real files in its own folder under Cargo's
//! per-target temporary directory.

mod after_training;
mod audit;
mod backends;
mod bad_recipes;
mod common;
mod device_path;
mod integrity;
mod kill;
#[cfg(feature = "mpi")]
mod mpi;
mod multi_device;
mod overflow;
mod plots;
mod policy;
mod processes;
mod quickstart;
mod resume;
mod user_data;
