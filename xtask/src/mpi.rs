//! MPI for `cargo xtask check` and `cargo xtask bench --allreduce`: the features that build
//! the MPI transport into every crate that has one, a preflight that names what to install,
//! and the all-reduce benchmark run under `mpirun` for 2, 3 and 4 processes.

use burn_mpric_cluster::MPIRUN_ENV;
use std::process::Command;

/// The features that build the MPI transport and its tests, for every crate that has them.
pub const FEATURES: &str = "burn-mpric/mpi,burn-mpric-cluster/mpi,burn-mpric-scale/mpi,burn-mpric-022/mpi,burn-mpric-train/mpi,burn-mpric-examples/mpi,burn-mpric-snippets/mpi";

/// What to install for MPI on Debian or Ubuntu.
const INSTALL: &str = "apt-get install -y libopenmpi-dev openmpi-bin libclang-dev";

/// Whether `program args` runs and exits 0.
fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|out| out.status.success())
}

/// Errors naming what is missing unless an MPI launcher and an MPI library to build against
/// are installed.
pub fn preflight() -> Result<(), String> {
    let launcher = runs("mpirun", &["--version"]);
    let library = runs("mpicc", &["-show"]) || runs("mpicc", &["--showme"]);
    match (launcher, library) {
        (true, true) => Ok(()),
        (false, _) => Err(format!(
            "the MPI tests need `mpirun` (OpenMPI or MPICH), which was not found: {INSTALL}"
        )),
        (true, false) => Err(format!(
            "the MPI transport builds against an MPI library (`mpicc` was not found): {INSTALL}"
        )),
    }
}

/// `cargo xtask bench --allreduce [--sizes A,B] [--reps N]`: builds the all-reduce benchmark
/// (burn-mpric-cluster's `allreduce` example) in release, runs it under `mpirun
/// --oversubscribe` with 2, 3 and 4 processes, and writes `target/bench/allreduce.md` and
/// `.jsonl`.
pub fn bench(cargo: &str, root: &std::path::Path, args: &[String]) -> Result<(), String> {
    preflight()?;
    let status = Command::new(cargo)
        .current_dir(root)
        .args([
            "build",
            "--release",
            "-p",
            "burn-mpric-cluster",
            "--features",
            "mpi",
        ])
        .args(["--example", "allreduce"])
        .status()
        .map_err(|e| format!("could not start cargo: {e}"))?;
    if !status.success() {
        return Err("building the all-reduce benchmark failed".into());
    }
    let exe = root.join("target/release/examples/allreduce");
    let mut lines = Vec::new();
    for np in [2, 3, 4] {
        let mut cmd = Command::new("mpirun");
        for (key, value) in MPIRUN_ENV {
            if std::env::var_os(key).is_none() {
                cmd.env(key, value);
            }
        }
        let out = cmd
            .args(["--oversubscribe", "-np", &np.to_string()])
            .arg(&exe)
            .args(args)
            .output()
            .map_err(|e| format!("could not start mpirun: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "the all-reduce benchmark with {np} processes failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        lines.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| l.starts_with('{'))
                .map(str::to_string),
        );
    }
    let dir = root.join("target/bench");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("allreduce.jsonl"), lines.join("\n") + "\n")
        .map_err(|e| e.to_string())?;
    let table = table(&lines)?;
    std::fs::write(dir.join("allreduce.md"), &table).map_err(|e| e.to_string())?;
    println!("{table}");
    Ok(())
}

/// The benchmark's JSON lines as a Markdown table, with each engine's time as a ratio to
/// MPI `exact` of the same size and processes.
fn table(lines: &[String]) -> Result<String, String> {
    let rows: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).map_err(|e| format!("{l}: {e}")))
        .collect::<Result<_, _>>()?;
    let field = |row: &serde_json::Value, key: &str| row[key].as_f64().unwrap_or(f64::NAN);
    let mut out = String::from(
        "| processes | values | engine | median per all-reduce | x exact | spread (IQR/median) | bytes in, rank 0 | bytes in, other ranks |\n|---|---|---|---|---|---|---|---|\n",
    );
    for row in &rows {
        let exact = rows
            .iter()
            .find(|r| {
                r["engine"] == "mpi exact"
                    && r["processes"] == row["processes"]
                    && r["values"] == row["values"]
            })
            .map_or(f64::NAN, |r| field(r, "median_s"));
        let median = field(row, "median_s");
        out.push_str(&format!(
            "| {} | {} | {} | {:.3} ms | {:.2} | {:.2} | {} | {} |\n",
            row["processes"],
            row["values"],
            row["engine"].as_str().unwrap_or("?"),
            median * 1e3,
            median / exact,
            field(row, "iqr_over_median"),
            bytes(field(row, "rank0_bytes_per_step")),
            bytes(field(row, "other_rank_bytes_per_step")),
        ));
    }
    Ok(out)
}

fn bytes(n: f64) -> String {
    match n {
        n if n >= 1024.0 * 1024.0 => format!("{:.1} MiB", n / 1024.0 / 1024.0),
        n if n >= 1024.0 => format!("{:.0} KiB", n / 1024.0),
        n => format!("{n:.0} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_gives_each_engine_s_time_as_a_ratio_to_exact() {
        let lines = [
            r#"{"engine":"mpi exact","processes":2,"values":1024,"median_s":0.002,"iqr_over_median":0.1,"rank0_bytes_per_step":4096,"other_rank_bytes_per_step":4096}"#,
            r#"{"engine":"tcp star","processes":2,"values":1024,"median_s":0.003,"iqr_over_median":0.2,"rank0_bytes_per_step":8192,"other_rank_bytes_per_step":8192}"#,
        ]
        .map(String::from);
        let table = table(&lines).unwrap();
        assert!(
            table.contains("| 2 | 1024 | tcp star | 3.000 ms | 1.50 | 0.20 | 8 KiB | 8 KiB |"),
            "{table}"
        );
        assert!(
            table.contains("| 2 | 1024 | mpi exact | 2.000 ms | 1.00 |"),
            "{table}"
        );
    }
}
