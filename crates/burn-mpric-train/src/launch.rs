//! `mpric launch N <recipe> [train options]`: the N processes of one run on this machine,
//! each `mpric train` with its rank (through `MPRIC_WORLD`, `MPRIC_RANK`,
//! `MPRIC_COORDINATOR`, and `MPRIC_LOCAL_RANK`/`MPRIC_LOCAL_WORLD`, so that they split the
//! recipe's `backend.devices`), their output lines prefixed with their rank. The launcher waits for
//! all of them: a process that fails ends the others by itself, within the run's timeout. A
//! launcher that ends first (killed, its terminal closed) takes its processes with it: each
//! watches the launcher through its standard input, so none trains on holding the output
//! folder and the port.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::Error;
use crate::run::MAX_PROCESSES;

/// Set for each launched process to the launcher's process id: the process then ends when
/// its standard input, a pipe the launcher holds open and never writes, reaches its end.
pub(crate) const LAUNCHER: &str = "MPRIC_LAUNCHER";

/// Flags the launcher sets itself.
const SET_BY_LAUNCHER: [&str; 5] = [
    "--world",
    "--rank",
    "--coordinator",
    "--local-rank",
    "--local-world",
];

/// Runs `processes` processes of `mpric train <train...>` with a coordinator on
/// `127.0.0.1:port` (a free port when `None`) and waits for all of them.
pub(crate) fn launch(processes: usize, port: Option<u16>, train: &[String]) -> Result<(), Error> {
    if processes == 0 || processes > MAX_PROCESSES {
        return Err(Error::Usage(format!(
            "launch {processes}: a run has 1 to {MAX_PROCESSES} processes"
        )));
    }
    if let Some(flag) = train.iter().find(|a| {
        SET_BY_LAUNCHER
            .iter()
            .any(|f| a == f || a.starts_with(&format!("{f}=")))
    }) {
        return Err(Error::Usage(format!(
            "launch: {flag} is set by the launcher for each process; leave it out"
        )));
    }
    let port = match port {
        Some(port) => port,
        None => free_port()?,
    };
    let exe = std::env::current_exe()
        .map_err(|e| Error::Internal(format!("cannot find the mpric executable: {e}")))?;
    let coordinator = format!("127.0.0.1:{port}");
    // Each child's stdin stays open while the launcher lives (see `end_with_launcher`).
    let mut children: Vec<(Child, Vec<JoinHandle<()>>, Option<ChildStdin>)> =
        Vec::with_capacity(processes);
    for rank in 0..processes {
        let spawned = Command::new(&exe)
            .arg("train")
            .args(train)
            .env("MPRIC_WORLD", processes.to_string())
            .env("MPRIC_RANK", rank.to_string())
            .env("MPRIC_COORDINATOR", &coordinator)
            // The processes of this machine split the recipe's devices.
            .env("MPRIC_LOCAL_RANK", rank.to_string())
            .env("MPRIC_LOCAL_WORLD", processes.to_string())
            .env(LAUNCHER, std::process::id().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                // The processes already started see their stdin close as `children` drops.
                return Err(Error::Internal(format!("cannot start rank {rank}: {e}")));
            }
        };
        let mut copies = Vec::new();
        if let Some(out) = child.stdout.take() {
            // Rank 0's summary is the run's: printed as is.
            let prefix = (rank != 0).then(|| format!("[rank {rank}] "));
            copies.push(copy_lines(out, prefix, false));
        }
        if let Some(err) = child.stderr.take() {
            copies.push(copy_lines(err, Some(format!("[rank {rank}] ")), true));
        }
        let stdin = child.stdin.take();
        children.push((child, copies, stdin));
    }
    let mut failed: Vec<(usize, ExitStatus)> = Vec::new();
    let mut running: Vec<usize> = (0..processes).collect();
    // The first process to fail is the one to report: the others fail because of it.
    while !running.is_empty() {
        running.retain(|&rank| match children[rank].0.try_wait() {
            Ok(Some(status)) => {
                if !status.success() {
                    failed.push((rank, status));
                }
                false
            }
            Ok(None) => true,
            Err(_) => false,
        });
        std::thread::sleep(Duration::from_millis(20));
    }
    for (_, copies, _) in children {
        for copy in copies {
            let _ = copy.join();
        }
    }
    match failed.first() {
        None => Ok(()),
        Some(&(rank, status)) => Err(Error::Launched {
            summary: failed
                .iter()
                .map(|(rank, status)| format!("rank {rank} {}", describe(status)))
                .collect::<Vec<_>>()
                .join("; "),
            code: status
                .code()
                .map_or(1, |c| u8::try_from(c).unwrap_or(1))
                .max(1),
            first: rank,
        }),
    }
}

/// In a process that `mpric launch` started (`MPRIC_LAUNCHER` set), a thread that ends this
/// process, with one line naming its place (`(rank, world)`; `None` in a run of one), when
/// the launcher ends before it: the launcher holds this process's stdin open and never
/// writes to it, so the end of stdin means the launcher is gone, however it ended.
pub(crate) fn end_with_launcher(place: Option<(usize, usize)>) {
    let Ok(launcher) = std::env::var(LAUNCHER) else {
        return;
    };
    let who = place.map_or("error: ".to_string(), |(rank, world)| {
        format!("error: rank {rank} of {world}: ")
    });
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        // Not eprintln!: stderr may be a pipe to the launcher, now closed, and a panic here
        // would end this thread instead of the process.
        let _ = writeln!(
            std::io::stderr(),
            "{who}its launcher (process {launcher}) ended, so it stops"
        );
        std::process::exit(1);
    });
}

/// A free port on loopback (asked of the system, then released for rank 0 to take).
fn free_port() -> Result<u16, Error> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error::Internal(format!("cannot find a free port on 127.0.0.1: {e}")))
}

/// Copies `from` line by line to this process's stdout (or stderr), each line after
/// `prefix`; bytes that are not UTF-8 are passed on as they are.
fn copy_lines(
    from: impl Read + Send + 'static,
    prefix: Option<String>,
    to_stderr: bool,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(from);
        let mut line = Vec::new();
        while matches!(reader.read_until(b'\n', &mut line), Ok(n) if n > 0) {
            let mut bytes = prefix.clone().unwrap_or_default().into_bytes();
            bytes.extend_from_slice(&line);
            let _ = if to_stderr {
                std::io::stderr().lock().write_all(&bytes)
            } else {
                std::io::stdout().lock().write_all(&bytes)
            };
            line.clear();
        }
    })
}

/// How a process ended, as a clause: `exited with status 2`, `was killed by signal 9`.
fn describe(status: &ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("was killed by signal {signal}");
        }
    }
    "ended without a status".into()
}
