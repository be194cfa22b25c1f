//! [`mpirun`] and [`mpirun_test`]: MPI jobs on one machine, as this project's tests and
//! benchmark start them, for a user's tests of a data-parallel loop of their own too.

use std::path::Path;
use std::process::{Command, Output};

/// The environment `mpirun` needs on a single machine here: as root (CI runs as root), and in
/// a container (no shared-memory single copy). Variables already set are left as they are.
pub const MPIRUN_ENV: [(&str, &str); 3] = [
    ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
    ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
    ("OMPI_MCA_btl_vader_single_copy_mechanism", "none"),
];

/// `mpirun --oversubscribe --tag-output -np N` with [`MPIRUN_ENV`]: more processes than cores
/// allowed, each output line tagged with its rank (`[1,0]<stderr>:...`) so that the ranks'
/// lines do not interleave. Add the program and its arguments.
///
/// ```
/// let cmd = burn_mpric_cluster::mpirun(3);
/// let args: Vec<_> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
/// assert_eq!(args, ["--oversubscribe", "--tag-output", "-np", "3"]);
/// ```
pub fn mpirun(np: usize) -> Command {
    let mut cmd = Command::new("mpirun");
    for (key, value) in MPIRUN_ENV {
        if std::env::var_os(key).is_none() {
            cmd.env(key, value);
        }
    }
    cmd.args(["--oversubscribe", "--tag-output", "-np", &np.to_string()]);
    cmd
}

/// Runs the test `name` of the calling test binary as `np` MPI processes and waits for them,
/// with `MPRIC_TEST_OUT` set to `out` for the ranks. The test itself checks
/// [`launched_by_mpi`](crate::launched_by_mpi) first: launched by MPI it is a rank (it writes
/// what it saw under `out`); launched by `cargo test`, it calls this and compares.
///
/// ```no_run
/// use std::path::Path;
/// use burn_mpric_cluster::{launched_by_mpi, mpirun_test};
///
/// #[test]
/// fn two_ranks_agree() {
///     let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("two-ranks");
///     if launched_by_mpi(|key| std::env::var(key).ok()) {
///         // ... this rank's part, writing into MPRIC_TEST_OUT ...
///         return;
///     }
///     let done = mpirun_test("two_ranks_agree", 2, &out).unwrap();
///     assert!(done.status.success());
///     // ... compare what the ranks wrote ...
/// }
/// ```
///
/// # Errors
///
/// When `mpirun` or this program cannot be started.
pub fn mpirun_test(name: &str, np: usize, out: &Path) -> std::io::Result<Output> {
    mpirun(np)
        .arg(std::env::current_exe()?)
        .args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .env("MPRIC_TEST_OUT", out)
        .output()
}
