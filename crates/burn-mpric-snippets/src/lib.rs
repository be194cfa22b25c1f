//! The Rust blocks of the user docs (README.md, `docs/`, the crate READMEs), gathered by
//! `build.rs` and run here as doctests, each against its edition's Burn: a block that names
//! `burn_mpric_022` is a Burn 0.22 program, any other a Burn 0.21 one. Nothing to use: the
//! crate exists for `cargo test --doc`.

/// The gathered blocks.
#[cfg(doctest)]
#[doc = include_str!(concat!(env!("OUT_DIR"), "/snippets.md"))]
pub struct Snippets;
