//! The launchers' environment, read in one place: whether an MPI launcher started this
//! process ([`launched_by_mpi`]: OpenMPI's `mpirun`, MPICH's hydra, `srun` with PMI or PMIx),
//! the task of an `srun` step ([`srun_task`]), and the launcher's count of this machine's
//! processes ([`local_place`]). Each reads the variables through `env` (`std::env::var(key).ok()`
//! in a program, a table in a test).

use std::fmt;

/// Whether this process was started by an MPI launcher (`mpirun`/`mpiexec` of OpenMPI or
/// MPICH, or `srun` with PMI/PMIx): the environment variables they set for each process.
///
/// ```
/// use burn_mpric_cluster::launched_by_mpi;
///
/// let env = |key: &str| (key == "OMPI_COMM_WORLD_SIZE").then(|| "2".to_string());
/// assert!(launched_by_mpi(env));
/// assert!(!launched_by_mpi(|_| None));
/// ```
pub fn launched_by_mpi(env: impl Fn(&str) -> Option<String>) -> bool {
    [
        "OMPI_COMM_WORLD_SIZE", // OpenMPI's mpirun
        "PMI_SIZE",             // MPICH's hydra, srun --mpi=pmi2
        "PMIX_RANK",            // srun --mpi=pmix, OpenMPI over PMIx
    ]
    .iter()
    .any(|key| env(key).is_some())
}

/// A launcher's variable that does not hold a number.
///
/// ```
/// use burn_mpric_cluster::srun_task;
///
/// let env = |key: &str| Some(if key == "SLURM_PROCID" { "x" } else { "4" }.to_string());
/// let bad = srun_task(env).unwrap().unwrap_err();
/// assert_eq!(bad.to_string(), "SLURM_PROCID=x: expected a number of processes or a rank");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadVariable {
    /// The variable.
    pub key: String,
    /// Its value.
    pub text: String,
}

impl fmt::Display for BadVariable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}={}: expected a number of processes or a rank",
            self.key, self.text
        )
    }
}

impl std::error::Error for BadVariable {}

/// The variable `key` as a number; `None` when it is not set.
fn number(env: &impl Fn(&str) -> Option<String>, key: &str) -> Result<Option<usize>, BadVariable> {
    match env(key) {
        None => Ok(None),
        Some(text) => text.trim().parse().map(Some).map_err(|_| BadVariable {
            key: key.to_string(),
            text,
        }),
    }
}

/// This process's (world, rank) as a task of an `srun` step (`SLURM_STEP_NUM_TASKS`,
/// `SLURM_PROCID`); `None` when either is not set: a batch script outside `srun` sets
/// `SLURM_NTASKS` and `SLURM_PROCID` for its one process, which is no task of a step.
///
/// ```
/// use burn_mpric_cluster::srun_task;
///
/// let env = |key: &str| match key {
///     "SLURM_STEP_NUM_TASKS" => Some("4".to_string()),
///     "SLURM_PROCID" => Some("2".to_string()),
///     _ => None,
/// };
/// assert_eq!(srun_task(env), Some(Ok((4, 2))));
/// assert_eq!(srun_task(|key: &str| env(key).filter(|_| key == "SLURM_PROCID")), None);
/// ```
pub fn srun_task(
    env: impl Fn(&str) -> Option<String>,
) -> Option<Result<(usize, usize), BadVariable>> {
    if env("SLURM_STEP_NUM_TASKS").is_none() || env("SLURM_PROCID").is_none() {
        return None;
    }
    let place = || -> Result<(usize, usize), BadVariable> {
        let world = number(&env, "SLURM_STEP_NUM_TASKS")?.unwrap_or_default();
        let rank = number(&env, "SLURM_PROCID")?.unwrap_or_default();
        Ok((world, rank))
    };
    Some(place())
}

/// This process's (local rank, local world) among the processes of its machine, as the MPI
/// launcher counts them (OpenMPI's `OMPI_COMM_WORLD_LOCAL_RANK`/`_SIZE`, MPICH's
/// `MPI_LOCALRANKID`/`MPI_LOCALNRANKS`): from the first launcher that sets both; `None` when
/// none does, or its values are not numbers.
///
/// ```
/// use burn_mpric_cluster::local_place;
///
/// let env = |key: &str| match key {
///     "OMPI_COMM_WORLD_LOCAL_RANK" => Some("1".to_string()),
///     "OMPI_COMM_WORLD_LOCAL_SIZE" => Some("3".to_string()),
///     _ => None,
/// };
/// assert_eq!(local_place(env), Some((1, 3)));
/// assert_eq!(local_place(|_| None), None);
/// ```
pub fn local_place(env: impl Fn(&str) -> Option<String>) -> Option<(usize, usize)> {
    let (rank, world) = [
        ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
        ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ]
    .into_iter()
    .find(|(rank, world)| env(rank).is_some() && env(world).is_some())?;
    Some((
        number(&env, rank).ok().flatten()?,
        number(&env, world).ok().flatten()?,
    ))
}
