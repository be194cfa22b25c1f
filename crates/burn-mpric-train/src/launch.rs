//! `mpric launch N <recipe> [train options]`: the N processes of one run on this machine,
//! each `mpric train` with its rank (through `MPRIC_WORLD`, `MPRIC_RANK`,
//! `MPRIC_COORDINATOR`, and `MPRIC_LOCAL_RANK`/`MPRIC_LOCAL_WORLD`, so that they split the
//! recipe's `backend.devices`), their output lines prefixed with their rank. The launcher waits for
//! all of them: a process that fails ends the others by itself, within the run's timeout.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::Error;
use crate::run::MAX_PROCESSES;

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
    let mut children: Vec<(Child, Vec<JoinHandle<()>>)> = Vec::with_capacity(processes);
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
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                // The processes already started end by themselves (rank `rank` never joins).
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
        children.push((child, copies));
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
    for (_, copies) in children {
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
