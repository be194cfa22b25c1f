//! `mpric policy` explains a policy on a backend.

use crate::common::{fresh_dir, run, run_ok};

#[test]
fn policy_prints_resolved_dtypes_and_op_categories() {
    let dir = fresh_dir("policy");
    let out = run_ok(&dir, &["policy", "mixed_f16", "--backend", "flex"]);
    assert!(out.contains("p=f32,c=f16,o=f32"), "{out}");
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    for line in [
        "matmul: compute",
        "exp: full",
        "softmax: full",
        "add: promote",
        "compute dtype: f16",
    ] {
        assert!(lines.contains(&line), "missing {line:?} in:\n{out}");
    }
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.ends_with(": compute")
                || l.ends_with(": full")
                || l.ends_with(": promote"))
            .count(),
        burn_mpric::Op::ALL.len()
    );

    // `half` resolves to bf16 on Flex.
    let out = run_ok(&dir, &["policy", "p=f32,c=half,o=f32"]);
    assert!(out.contains("p=f32,c=bf16,o=f32"), "{out}");

    // A policy the backend can't run, and a malformed one: exit 2, one line.
    for args in [
        &["policy", "mixed_f16", "--backend", "ndarray"][..],
        &["policy", "p=f32,c=bf61"][..],
    ] {
        let out = run(&dir, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    }
}
