//! The `mpric` command line: `train`, `launch`, `check`, `policy`, `audit`, `devices`, and, after
//! training, `evaluate`, `predict` and `export` (`cli/after_training.rs`).

mod after_training;

use std::path::PathBuf;
use std::process::ExitCode;

use burn_mpric::{MpSettings, Op, Policy, dtype_name};
use clap::{Args, Parser, Subcommand};

use crate::audit::{audit_recipe_with_trials, table};
use crate::backend::{ResolvePolicy, dispatch};
use crate::error::Error;
use crate::launch::{end_with_launcher, launch};
use crate::plan::Plan;
use crate::recipe::{BackendConfig, BackendName};
use crate::run::{Engine, MIN_STEP_TIMEOUT, Processes, Summary, TrainOptions, train};
use burn_mpric_cluster::{Reduction, launched_by_mpi, local_place, srun_task};

/// Train Burn models from recipe files, with mixed precision.
#[derive(Debug, Parser)]
#[command(name = "mpric", version, about, long_about = None)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Train a recipe (TOML, or JSON by extension); writes metrics, plots and checkpoints to
    /// the recipe's output folder. With --world N, this process is one rank of a run of N
    /// processes.
    Train(TrainArgs),
    /// Run N processes of one training run on this machine (each `mpric train` with its
    /// rank); their output lines are prefixed with their rank.
    Launch(LaunchArgs),
    /// Validate a recipe without training: fields, data, backend and policy.
    Check(CheckArgs),
    /// Explain a policy: the dtypes it resolves to on a backend and the category of each op.
    Policy(PolicyArgs),
    /// Measure a recipe's first steps op by op and say whether f16 or bf16 suits it: which
    /// op to keep at full precision, which initial loss scale; writes audit.json and
    /// audit_gradients.svg to the recipe's output folder.
    Audit(AuditArgs),
    /// Score a trained model (the newest checkpoint that verifies, or --checkpoint) on the
    /// held-out split or on a file: loss and the task's metrics, as a table and
    /// evaluation.json; --policy runs it at another precision.
    Evaluate(after_training::EvaluateArgs),
    /// A trained model's predictions for new inputs: a CSV file, an image or a folder of
    /// images (--data), or text from a prompt (--prompt); CSV or JSON to stdout or --out;
    /// --probabilities gives every class's probability instead of the most probable class.
    Predict(after_training::PredictArgs),
    /// Write a trained model's weights as safetensors (f32, f16 or bf16) with a JSON
    /// sidecar: the recipe, the forward pass, labels and standardization.
    Export(after_training::ExportArgs),
    /// List the GPU adapters and, for each, the `[backend] device` that selects it, the
    /// kernel compiler of this build (WGSL, SPIR-V, MSL), its dtypes and its matrix units.
    Devices(DevicesArgs),
}

/// `mpric devices`.
#[derive(Debug, Args)]
pub(crate) struct DevicesArgs {
    /// Print the adapters as JSON instead of the report.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `mpric audit`.
#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    /// The recipe file.
    pub(crate) recipe: PathBuf,
    /// Training steps to measure.
    #[arg(long, default_value_t = crate::audit::DEFAULT_AUDIT_STEPS)]
    pub(crate) steps: usize,
    /// Steps of each trial: the recipe as written, then, when it skips, each remedy.
    #[arg(long, default_value_t = crate::audit::DEFAULT_TRIAL_STEPS)]
    pub(crate) trial_steps: usize,
    /// Override a recipe field, as for `train`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
    /// Print the audit as JSON (what audit.json holds) instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `mpric train`.
#[derive(Debug, Args)]
pub(crate) struct TrainArgs {
    /// The recipe file.
    pub(crate) recipe: PathBuf,
    /// Continue the run in the output folder from its latest checkpoint.
    #[arg(long)]
    pub(crate) resume: bool,
    /// Start over in an output folder that holds a run (removes its checkpoints and metrics).
    #[arg(long, conflicts_with = "resume")]
    pub(crate) overwrite: bool,
    /// Stop after this step (a checkpoint is written); continue later with --resume.
    #[arg(long, value_name = "STEP")]
    pub(crate) until: Option<u64>,
    /// Override a recipe field, e.g. --set steps=20 --set optimizer.lr=0.01 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
    /// No progress bar and no per-checkpoint lines; only the final summary.
    #[arg(long, short)]
    pub(crate) quiet: bool,
    /// The number of processes of a multi-process run over the TCP star (default: MPI's
    /// under mpirun/srun with an mpric built with MPI, else SLURM_STEP_NUM_TASKS in an srun
    /// task, else 1).
    #[arg(long, env = "MPRIC_WORLD", value_name = "N")]
    pub(crate) world: Option<usize>,
    /// This process's rank, 0 to N-1 (default: SLURM_PROCID in an srun task). Rank 0 hosts the
    /// coordinator and writes the output folder.
    #[arg(long, env = "MPRIC_RANK", value_name = "R")]
    pub(crate) rank: Option<usize>,
    /// The coordinator's address, which rank 0 listens on and the others connect to
    /// (default 127.0.0.1:29610: this machine only).
    #[arg(long, env = "MPRIC_COORDINATOR", value_name = "HOST:PORT")]
    pub(crate) coordinator: Option<String>,
    /// The longest a step may take on any process (rank 0's evaluation and checkpoint
    /// included) before the others give it up; joining may take twice as long.
    #[arg(
        long,
        env = "MPRIC_TIMEOUT",
        value_name = "SECONDS",
        default_value_t = crate::run::DEFAULT_STEP_TIMEOUT.as_secs_f64()
    )]
    pub(crate) timeout: f64,
    /// This process's index among the processes on its machine, which split the recipe's
    /// `backend.devices` in order (`mpric launch` sets it).
    #[arg(long, env = "MPRIC_LOCAL_RANK", requires = "local_world")]
    pub(crate) local_rank: Option<usize>,
    /// The number of processes on this machine that split `backend.devices` (`mpric
    /// launch` sets it).
    #[arg(long, env = "MPRIC_LOCAL_WORLD", requires = "local_rank")]
    pub(crate) local_world: Option<usize>,
    /// How an MPI run adds the processes' gradients: `exact` (gathered, added in rank order:
    /// the same bits as one process and on any cluster) or `fast` (MPI_Allreduce: fewer
    /// bytes, last bits depend on MPI's algorithm). The TCP star always adds exactly.
    #[arg(long, env = "MPRIC_REDUCE", value_name = "exact|fast")]
    pub(crate) reduce: Option<Reduction>,
}

/// `mpric launch`.
#[derive(Debug, Args)]
pub(crate) struct LaunchArgs {
    /// The number of processes.
    pub(crate) processes: usize,
    /// The coordinator's port on 127.0.0.1 (default: a free one).
    #[arg(long)]
    pub(crate) port: Option<u16>,
    /// The recipe and `train` options, the same for every process (`--world`, `--rank` and
    /// `--coordinator` are set by the launcher).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "RECIPE [TRAIN OPTIONS]"
    )]
    pub(crate) train: Vec<String>,
}

/// `mpric check`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The recipe file.
    pub(crate) recipe: PathBuf,
    /// Override a recipe field, as for `train`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
}

/// `mpric policy`.
#[derive(Debug, Args)]
pub(crate) struct PolicyArgs {
    /// The policy text: `mixed_f16`, `p=f32,c=bf16,o=f32`, `half`, ...
    pub(crate) text: String,
    /// The backend to resolve it on.
    #[arg(long, value_enum, default_value = "flex")]
    pub(crate) backend: BackendName,
    /// The device index on that backend.
    #[arg(long, default_value_t = 0)]
    pub(crate) device: usize,
}

/// Runs the command line of this process and returns its exit status: 0 on success, 2 for
/// what it refuses (a bad recipe or arguments, a checkpoint that fails verification, an output
/// folder another run holds), 3 for a run that diverged, 1 for other failures while training. This is the `mpric` binary:
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     burn_mpric_train::cli::main()
/// }
/// ```
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match run(cli) {
        Ok(()) => 0,
        Err(err) => {
            // One write: the lines of several processes (mpirun's) must not interleave.
            use std::io::Write;
            let _ = std::io::stderr().write_all(format!("error: {err}\n").as_bytes());
            err.exit_code()
        }
    };
    // A rank of an MPI run that failed on its own aborts the job, so that no other rank
    // waits for it; after a clean run, or a refusal every rank saw, MPI is finalized.
    #[cfg(feature = "mpi")]
    burn_mpric_cluster::end_mpi(i32::from(code));
    ExitCode::from(code)
}

/// Runs `mpric` with these arguments (the first one is the program name); output goes to
/// stdout and stderr as from the binary. A malformed command line is an [`Error::Usage`].
///
/// ```
/// use burn_mpric_train::cli::run_from;
///
/// assert!(run_from(["mpric", "policy", "mixed_bf16"]).is_ok());
/// let err = run_from(["mpric", "policy", "mixed_f16", "--backend", "ndarray"]).unwrap_err();
/// assert_eq!(err.exit_code(), 2);
/// assert!(run_from(["mpric", "fly"]).is_err());
/// ```
pub fn run_from<I, T>(args: I) -> Result<(), Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = Cli::try_parse_from(args).map_err(|e| {
        let text = e.to_string();
        Error::Usage(text.lines().next().unwrap_or_default().to_string())
    })?;
    run(cli)
}

/// Runs a parsed command line.
pub(crate) fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Train(args) => {
            let plan = Plan::load(&args.recipe, &args.set)?;
            let options = TrainOptions {
                resume: args.resume,
                overwrite: args.overwrite,
                until: args.until,
                progress: !args.quiet,
                log: !args.quiet,
                processes: processes(&args, |key| std::env::var(key).ok(), mpi_place)?,
            };
            end_with_launcher(options.processes.as_ref().map(|p| (p.rank, p.world)));
            // The run starts the device once and announces itself (unless quiet) after the
            // device accepted the policy.
            let summary = train(&plan, &options)?;
            match &options.processes {
                Some(p) if !p.is_writer() => emit(&format!(
                    "rank {} of {}: steps {} -> {}, skipped steps {}, final loss scale {}\n",
                    p.rank,
                    p.world,
                    summary.start_step,
                    summary.step,
                    summary.skipped,
                    summary.last.as_ref().map_or(1.0, |r| r.loss_scale)
                )),
                _ => emit(&summary_text(&plan, &summary)),
            }
            Ok(())
        }
        Command::Launch(args) => launch(args.processes, args.port, &args.train),
        Command::Check(args) => {
            let plan = Plan::load(&args.recipe, &args.set)?;
            let check = plan.check_backend()?;
            let mut text = format!("{}: ok\n", plan.label);
            for line in plan.describe(&check) {
                text.push_str(&format!("  {line}\n"));
            }
            emit(&text);
            Ok(())
        }
        Command::Policy(args) => explain_policy(&args),
        Command::Evaluate(args) => {
            emit(&after_training::run_evaluate(&args)?);
            Ok(())
        }
        Command::Predict(args) => {
            emit(&after_training::run_predict(&args)?);
            Ok(())
        }
        Command::Export(args) => {
            emit(&after_training::run_export(&args)?);
            Ok(())
        }
        Command::Devices(args) => {
            let adapters = crate::devices::adapters();
            if args.json {
                let json = serde_json::to_string_pretty(&adapters)
                    .map_err(|e| Error::Input(format!("devices as JSON: {e}")))?;
                emit(&format!("{json}\n"));
            } else {
                emit(&crate::devices::report(&adapters));
            }
            Ok(())
        }
        Command::Audit(args) => {
            let plan = Plan::load(&args.recipe, &args.set)?;
            let (found, files) = audit_recipe_with_trials(&plan, args.steps, args.trial_steps)?;
            if args.json {
                emit(&format!("{}\n", found.to_json()?));
            } else {
                emit(&format!(
                    "{}\nwritten: {}, {}\n",
                    table(&found),
                    files.json.display(),
                    files.svg.display()
                ));
            }
            Ok(())
        }
    }
}

/// This process's place in a multi-process run: from MPI when an MPI launcher started it
/// (`mpirun`, `srun` with PMI/PMIx) and no --world is given; else from the flags, `MPRIC_*`
/// (read by clap) or, when neither gives the world size, from a task of an `srun` step
/// (`SLURM_STEP_NUM_TASKS`, `SLURM_PROCID`; a batch script outside `srun` sets `SLURM_NTASKS`
/// and `SLURM_PROCID` for its one process, which must stay a run of one); `None` for a run
/// of one process. `mpi` initializes MPI and gives this process's (rank, world). The
/// launchers' variables are read by burn-mpric-cluster ([`launched_by_mpi`], [`srun_task`],
/// [`local_place`]).
fn processes(
    args: &TrainArgs,
    env: impl Fn(&str) -> Option<String>,
    mpi: impl FnOnce() -> Result<(usize, usize), Error>,
) -> Result<Option<Processes>, Error> {
    let shortest = MIN_STEP_TIMEOUT.as_secs_f64();
    let timeout_ok =
        args.timeout.is_finite() && args.timeout >= shortest && args.timeout <= 86_400.0;
    let srun = srun_task(&env).filter(|_| args.world.is_none());
    let under_srun = srun.is_some();
    let by_mpi = args.world.is_none() && launched_by_mpi(&env);
    let mut processes = if by_mpi && (cfg!(feature = "mpi") || !under_srun) {
        if !cfg!(feature = "mpi") {
            return Err(Error::Usage(format!(
                "started by an MPI launcher, but {}",
                crate::run::MPI_NOT_BUILT
            )));
        }
        if args.rank.is_some() {
            return Err(Error::Usage(
                "--rank: under an MPI launcher the rank comes from MPI; leave it out".into(),
            ));
        }
        let (rank, world) = mpi()?;
        let reduction = args.reduce.unwrap_or_default();
        if world == 1 {
            return Ok(None);
        }
        let mut processes = Processes::new(world, rank)?;
        processes.engine = Engine::Mpi(reduction);
        // The launcher's own count of this machine's processes, which split its devices.
        if args.local_rank.is_none()
            && let Some((local_rank, local_world)) = local_place(&env)
        {
            processes = processes.on_machine(local_rank, local_world)?;
        }
        processes
    } else {
        let (world, rank) = match srun {
            Some(task) => {
                let (world, rank) = task.map_err(|bad| Error::Usage(bad.to_string()))?;
                (Some(world), args.rank.or(Some(rank)))
            }
            None => (args.world, args.rank),
        };
        let Some(world) = world else {
            return match rank {
                Some(rank) => Err(Error::Usage(format!(
                    "--rank {rank} needs --world, the number of processes"
                ))),
                None => Ok(None),
            };
        };
        if world == 1 && rank.unwrap_or(0) == 0 {
            return Ok(None);
        }
        let rank = rank.ok_or_else(|| {
            Error::Usage(format!(
                "--world {world} needs --rank, this process's rank (0 to {})",
                world.saturating_sub(1)
            ))
        })?;
        if args.reduce == Some(Reduction::Fast) {
            return Err(Error::Usage(
                "--reduce fast needs MPI (mpirun or srun, with an mpric built with --features mpi); the TCP star adds in rank order".into(),
            ));
        }
        let mut processes = Processes::new(world, rank)?;
        if let Some(coordinator) = &args.coordinator {
            processes.coordinator = coordinator.clone();
        }
        processes
    };
    if !timeout_ok {
        return Err(Error::Usage(format!(
            "--timeout {}: expected seconds from {shortest} to 86400",
            args.timeout
        )));
    }
    processes.step_timeout = std::time::Duration::from_secs_f64(args.timeout);
    if let (Some(local_rank), Some(local_world)) = (args.local_rank, args.local_world) {
        processes = processes.on_machine(local_rank, local_world)?;
    }
    Ok(Some(processes))
}

/// Initializes MPI and reads this process's (rank, world).
#[cfg(feature = "mpi")]
fn mpi_place() -> Result<(usize, usize), Error> {
    let world = burn_mpric_cluster::MpiWorld::init().map_err(|e| Error::Usage(e.to_string()))?;
    Ok((world.rank(), world.world()))
}

#[cfg(not(feature = "mpi"))]
fn mpi_place() -> Result<(usize, usize), Error> {
    Err(Error::Usage(crate::run::MPI_NOT_BUILT.into()))
}

/// Prints to stdout; a closed stdout (`mpric ... | head`) is not an error.
fn emit(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

fn summary_text(plan: &Plan, s: &Summary) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let f = |v: Option<f32>, d: usize| v.map_or("n/a".to_string(), |v| format!("{v:.d$}"));
    let _ = writeln!(
        o,
        "{}: steps {} -> {} of {} in {:.1} s ({} on {}, policy {})",
        plan.label,
        s.start_step,
        s.step,
        s.total_steps,
        s.wall_s,
        plan.recipe.model.kind(),
        plan.recipe.backend.name,
        s.policy
    );
    let _ = writeln!(
        o,
        "  final training loss {} (mean of the last steps), last batch accuracy {}",
        f(s.tail_loss, 4),
        f(s.last.as_ref().and_then(|r| r.accuracy), 3)
    );
    if let Some(eval) = &s.eval {
        let _ = writeln!(
            o,
            "  held-out loss {}, accuracy {} ({} predictions)",
            f(eval.loss, 4),
            f(eval.accuracy, 3),
            eval.predictions
        );
    }
    let _ = writeln!(o, "  {}", plan.recipe.optimizer.memory());
    let _ = writeln!(
        o,
        "  skipped steps {}, final loss scale {}",
        s.skipped,
        s.last.as_ref().map_or(1.0, |r| r.loss_scale)
    );
    let out = s.output.display();
    let _ = writeln!(o, "  metrics: {out}/metrics.csv, {out}/metrics.json");
    let _ = writeln!(o, "  plots:   {out}/loss.svg, {out}/loss_scale.svg");
    let _ = writeln!(o, "  checkpoints: {out}/checkpoints/");
    if s.step < s.total_steps {
        let _ = writeln!(
            o,
            "  stopped early; continue with: mpric train {} --resume",
            plan.label
        );
    }
    o
}

fn explain_policy(args: &PolicyArgs) -> Result<(), Error> {
    let policy: Policy = args
        .text
        .parse()
        .map_err(|e| Error::Usage(format!("policy `{}`: {e}", args.text)))?;

    let spec = BackendConfig {
        name: args.backend,
        device: args.device,
        devices: None,
    };
    let (resolved, kernels) = dispatch(&spec, ResolvePolicy(policy))
        .and_then(|r| r)
        .map_err(|e| Error::Usage(e.to_string()))?;
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "policy:  {resolved}");
    let _ = writeln!(o, "as written: {}", args.text);
    let _ = writeln!(
        o,
        "backend: {} device {} ({kernels})",
        args.backend, args.device
    );
    let (param, compute, output) = resolved.dtypes();
    let _ = writeln!(o, "param dtype:   {}", dtype_name(param));
    let _ = writeln!(o, "compute dtype: {}", dtype_name(compute));
    let _ = writeln!(o, "output dtype:  {}", dtype_name(output));
    let _ = writeln!(
        o,
        "op categories (compute: at the compute dtype; full: at f32 or wider; promote: at the widest input dtype):"
    );
    let settings = MpSettings::new(resolved.into());
    for op in Op::ALL {
        let _ = writeln!(o, "  {}: {}", op.name(), settings.category(*op));
    }
    emit(&o);
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{Cli, Command, Engine, Reduction, processes};

    fn no_mpi() -> Result<(usize, usize), crate::Error> {
        panic!("MPI is not asked for here")
    }

    fn train_args(args: &[&str]) -> super::TrainArgs {
        let mut all = vec!["mpric", "train", "r.toml"];
        all.extend(args);
        match Cli::try_parse_from(all).unwrap().command {
            Command::Train(args) => args,
            _ => unreachable!("parsed as train"),
        }
    }

    #[test]
    fn an_srun_task_is_a_rank_and_a_batch_script_is_one_process() {
        let srun = |key: &str| match key {
            "SLURM_STEP_NUM_TASKS" => Some("4".to_string()),
            "SLURM_NTASKS" => Some("4".to_string()),
            "SLURM_PROCID" => Some("2".to_string()),
            _ => None,
        };
        let p = processes(&train_args(&[]), srun, no_mpi).unwrap().unwrap();
        assert_eq!((p.world, p.rank), (4, 2));
        // The flags win over SLURM.
        let p = processes(&train_args(&["--world", "2", "--rank", "1"]), srun, no_mpi)
            .unwrap()
            .unwrap();
        assert_eq!((p.world, p.rank), (2, 1));
        // A batch script's own process (no srun step): one process.
        let batch = |key: &str| srun(key).filter(|_| key != "SLURM_STEP_NUM_TASKS");
        assert!(
            processes(&train_args(&[]), batch, no_mpi)
                .unwrap()
                .is_none()
        );
        let garbled =
            |key: &str| srun(key).map(|v| if key == "SLURM_PROCID" { "x".into() } else { v });
        let err = processes(&train_args(&[]), garbled, no_mpi)
            .unwrap_err()
            .to_string();
        assert!(err.contains("SLURM_PROCID=x"), "{err}");
    }

    #[test]
    fn a_timeout_below_the_shortest_is_refused() {
        let none = |_: &str| None;
        let err = processes(
            &train_args(&["--world", "2", "--rank", "0", "--timeout", "1e-12"]),
            none,
            no_mpi,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("expected seconds from 0.1 to 86400"), "{err}");
        let p = processes(
            &train_args(&["--world", "2", "--rank", "0", "--timeout", "0.5"]),
            none,
            no_mpi,
        )
        .unwrap()
        .unwrap();
        assert_eq!(p.step_timeout, std::time::Duration::from_millis(500));
    }

    #[test]
    fn under_mpirun_rank_and_world_come_from_mpi() {
        let mpirun = |key: &str| match key {
            "OMPI_COMM_WORLD_SIZE" => Some("3".to_string()),
            "OMPI_COMM_WORLD_LOCAL_RANK" => Some("1".to_string()),
            "OMPI_COMM_WORLD_LOCAL_SIZE" => Some("3".to_string()),
            _ => None,
        };
        let from_mpi = || Ok((1, 3));
        let result = processes(&train_args(&[]), mpirun, from_mpi);
        if !cfg!(feature = "mpi") {
            let err = result.unwrap_err().to_string();
            assert!(err.contains("built without MPI"), "{err}");
            return;
        }
        let p = result.unwrap().unwrap();
        assert_eq!((p.world, p.rank, p.local_rank, p.local_world), (3, 1, 1, 3));
        assert_eq!(p.engine, Engine::Mpi(Reduction::Exact));
        let p = processes(&train_args(&["--reduce", "fast"]), mpirun, from_mpi)
            .unwrap()
            .unwrap();
        assert_eq!(p.engine, Engine::Mpi(Reduction::Fast));
        // `mpirun -np 1`: a run of one process.
        assert!(
            processes(&train_args(&[]), mpirun, || Ok((0, 1)))
                .unwrap()
                .is_none()
        );
        let err = processes(&train_args(&["--rank", "1"]), mpirun, from_mpi)
            .unwrap_err()
            .to_string();
        assert!(err.contains("the rank comes from MPI"), "{err}");
        // The flags win over MPI: the TCP star.
        let p = processes(
            &train_args(&["--world", "2", "--rank", "1"]),
            mpirun,
            no_mpi,
        )
        .unwrap()
        .unwrap();
        assert_eq!(p.engine, Engine::Tcp);
    }

    #[test]
    fn the_tcp_star_adds_exactly_only() {
        let none = |_: &str| None;
        let err = processes(
            &train_args(&["--world", "2", "--rank", "0", "--reduce", "fast"]),
            none,
            no_mpi,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("--reduce fast needs MPI"), "{err}");
        assert!(train_args_err(&["--reduce", "ring"]).contains("exact, fast"));
    }

    fn train_args_err(args: &[&str]) -> String {
        let mut all = vec!["mpric", "train", "r.toml"];
        all.extend(args);
        Cli::try_parse_from(all).unwrap_err().to_string()
    }
}
