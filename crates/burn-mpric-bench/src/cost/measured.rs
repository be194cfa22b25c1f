//! The measured GPU rows the cost model is fitted on and checked against:
//! `data/h200-2026-12-04.csv`, the CUDA and Wgpu tables of BENCHMARKS.md's "Results,
//! 2026-12-04 (GPU)".

use serde::Deserialize;

/// One measured row.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct MeasuredRow {
    /// `cuda`, `wgpu`, `wgpu (burn 0.22)`.
    pub backend: String,
    /// The workload's name.
    pub workload: String,
    /// The size, as the report labels it.
    pub size: String,
    /// The variant, as BENCHMARKS.md names it (`f32`, `mixed_f16`, `pure_bf16`,
    /// `f32 + dynamic scaler`, `casts alone (mixed_f16)`, ...).
    pub variant: String,
    /// Median milliseconds per iteration.
    pub median_ms: f64,
}

/// The run the rows come from.
pub const H200_RUN: &str = "NVIDIA H200, 2026-12-04 (BENCHMARKS.md), Burn's kernels unfused";

const H200_ROWS: &str = include_str!("../../data/h200-2026-12-04.csv");

/// Parses rows in the layout of `data/h200-2026-12-04.csv` (`#` starts a comment line).
pub fn parse(text: &str) -> Result<Vec<MeasuredRow>, String> {
    csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .from_reader(text.as_bytes())
        .deserialize()
        .map(|row| row.map_err(|e| format!("measured rows: {e}")))
        .collect()
}

/// The H200 rows.
pub fn h200() -> Vec<MeasuredRow> {
    parse(H200_ROWS).expect("the bench's own data file parses")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_h200_rows_are_read_with_their_backends_and_the_transformer_block() {
        let _heap = crate::memory::heap_tests();
        let rows = h200();
        let block = rows
            .iter()
            .find(|r| {
                r.backend == "cuda"
                    && r.workload == "transformer_block_step"
                    && r.variant == "pure_f16"
            })
            .expect("the pure f16 block on CUDA");
        assert_eq!(block.size, "b32 s512 d1024 h16 ff4096 l1");
        assert_eq!(block.median_ms, 87.7);
        assert!(rows.iter().any(|r| r.backend == "wgpu (burn 0.22)"));
        assert!(parse("backend,workload\ncuda").is_err());
    }
}
