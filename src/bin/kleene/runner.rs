//! Runs one shell command in its own process group with a timeout, capturing bounded output.
//!
//! Every command of a plan file runs as `sh -c COMMAND` in the workspace directory. The child
//! leads a new process group, so a timeout or Ctrl-C can stop everything the command started
//! (a test runner and its workers, a `sleep` in the background) with one `killpg`, and the
//! terminal's own Ctrl-C does not reach the children behind kleene's back.
//!
//! A command either finishes ([`Finished`], success or an ordinary non-zero exit that a
//! validator may judge and a fix may repair) or fails as infrastructure ([`RunError`]: it
//! could not be spawned, the shell could not find or execute it, it timed out, or the user
//! interrupted it). Infrastructure failures are never handed to a fixer.

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use kleene::{OutputTail, TailLimits};
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// The most bytes of each stream held in memory while a command runs. Far above any tail
/// limit, so the tail is exact, yet a command that prints gigabytes cannot exhaust memory.
const HELD_BYTES: usize = 1 << 20;

/// How long a process group gets between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_millis(500);

/// How often a wait re-checks the interrupt flag.
const POLL: Duration = Duration::from_millis(25);

/// Set by SIGINT/SIGTERM; every running command is stopped when it turns true.
#[derive(Debug, Clone, Default)]
pub struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    /// A flag that SIGINT and SIGTERM set.
    pub fn install() -> std::io::Result<Self> {
        let flag = Self::default();
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(signal, Arc::clone(&flag.0))?;
        }
        Ok(flag)
    }

    /// Whether an interrupt arrived.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Sets the flag (what the signal handler does).
    #[cfg(test)]
    pub fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// One command to run.
#[derive(Debug, Clone)]
pub struct Invocation<'a> {
    /// The shell command line, run as `sh -c`.
    pub command: &'a str,
    /// The working directory.
    pub dir: &'a Path,
    /// Longest run allowed before the whole group is killed.
    pub timeout: Duration,
    /// Bytes written to the command's stdin (then closed); stdin is empty otherwise.
    pub stdin: Option<&'a [u8]>,
    /// Extra environment variables.
    pub env: Vec<(&'static str, String)>,
    /// Bounds of the kept output tail.
    pub limits: TailLimits,
}

/// A command that ran to its end.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The exit code, or `None` when a signal (not sent by kleene) ended it.
    pub code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Bounded stdout/stderr.
    pub tail: OutputTail,
    /// Wall time.
    pub elapsed: Duration,
}

impl Finished {
    /// Whether the command succeeded (exit code 0).
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// "exit code 3" or "killed by signal 11".
    pub fn status_text(&self) -> String {
        match (self.code, self.signal) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            (None, None) => "unknown status".to_owned(),
        }
    }
}

/// Why a command could not do its work at all (an infrastructure failure, never repairable).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The shell itself could not be started in the directory.
    #[error("start `sh -c {command}` in {dir}: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The working directory.
        dir: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The shell could not find the command (exit 127).
    #[error("run `{command}`: command not found (exit 127){}", detail(tail))]
    NotFound {
        /// The command line.
        command: String,
        /// What the shell printed.
        tail: OutputTail,
    },
    /// The shell found the command but could not execute it (exit 126).
    #[error("run `{command}`: command not executable (exit 126){}", detail(tail))]
    NotExecutable {
        /// The command line.
        command: String,
        /// What the shell printed.
        tail: OutputTail,
    },
    /// The command ran longer than its timeout; its whole process group was killed.
    #[error("run `{command}`: timed out after {}s, process group killed", timeout.as_secs_f64())]
    TimedOut {
        /// The command line.
        command: String,
        /// The timeout.
        timeout: Duration,
        /// What it printed before it was killed.
        tail: OutputTail,
    },
    /// SIGINT or SIGTERM arrived; the command's process group was stopped.
    #[error("run `{command}`: interrupted, process group stopped")]
    Interrupted {
        /// The command line.
        command: String,
    },
    /// Waiting for the command or reading its output failed.
    #[error("wait for `{command}`: {source}")]
    Wait {
        /// The command line.
        command: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl RunError {
    /// Whether the user interrupted the run (as opposed to the command failing).
    pub fn is_interrupted(&self) -> bool {
        matches!(self, RunError::Interrupted { .. })
    }
}

fn detail(tail: &OutputTail) -> String {
    let stderr = tail.stderr().trim();
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}

/// Runs `inv` to its end, its timeout, or an interrupt.
///
/// # Errors
///
/// [`RunError`] for every infrastructure failure; an ordinary non-zero exit is a
/// [`Finished`] value.
pub fn run(inv: &Invocation<'_>, interrupt: &Interrupt) -> Result<Finished, RunError> {
    let started = Instant::now();
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(inv.command)
        .current_dir(inv.dir)
        .process_group(0)
        .stdin(if inv.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in &inv.env {
        cmd.env(key, value);
    }
    let mut child = cmd.spawn().map_err(|source| RunError::Spawn {
        command: inv.command.to_owned(),
        dir: inv.dir.to_owned(),
        source,
    })?;
    // The child leads its own group, so its pid is the group id.
    let group = Pid::from_raw(child.id().cast_signed());
    let feeder = spawn_feeder(&mut child, inv.stdin);
    let out = spawn_reader(child.stdout.take());
    let err = spawn_reader(child.stderr.take());

    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait());
    });

    let deadline = started + inv.timeout;
    let ended = loop {
        let now = Instant::now();
        if interrupt.is_set() {
            break End::Interrupted;
        }
        if now >= deadline {
            break End::TimedOut;
        }
        match rx.recv_timeout(POLL.min(deadline - now)) {
            Ok(status) => break End::Exited(status),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break End::Exited(Err(std::io::Error::other("waiter thread vanished")));
            }
        }
    };

    let status = match ended {
        End::Exited(status) => {
            // Whatever the command left running in its group would hold the pipes open.
            signal_group(group, Signal::SIGKILL);
            Some(status)
        }
        End::TimedOut | End::Interrupted => {
            // The leader's status after our own signal says nothing about the command.
            let _ = stop_group(group, &rx);
            None
        }
    };
    if let Some(feeder) = feeder {
        let _ = feeder.join();
    }
    let stdout = join_reader(out);
    let stderr = join_reader(err);
    let tail = OutputTail::capture(&stdout, &stderr, inv.limits);
    let command = inv.command.to_owned();
    let status = match (status, interrupt.is_set()) {
        (Some(status), _) => status,
        (None, true) => return Err(RunError::Interrupted { command }),
        (None, false) => {
            return Err(RunError::TimedOut {
                command,
                timeout: inv.timeout,
                tail,
            });
        }
    };
    let status: ExitStatus = status.map_err(|source| RunError::Wait {
        command: command.clone(),
        source,
    })?;
    match status.code() {
        Some(127) => Err(RunError::NotFound { command, tail }),
        Some(126) => Err(RunError::NotExecutable { command, tail }),
        code => Ok(Finished {
            code,
            signal: status.signal(),
            tail,
            elapsed: started.elapsed(),
        }),
    }
}

enum End {
    Exited(std::io::Result<ExitStatus>),
    TimedOut,
    Interrupted,
}

/// SIGTERM, a grace period, then SIGKILL; returns the leader's status.
fn stop_group(
    group: Pid,
    rx: &mpsc::Receiver<std::io::Result<ExitStatus>>,
) -> std::io::Result<ExitStatus> {
    signal_group(group, Signal::SIGTERM);
    let status = rx.recv_timeout(GRACE);
    signal_group(group, Signal::SIGKILL);
    match status {
        Ok(status) => status,
        Err(_) => rx
            .recv()
            .unwrap_or_else(|_| Err(std::io::Error::other("waiter thread vanished"))),
    }
}

fn signal_group(group: Pid, signal: Signal) {
    // ESRCH (the group is already gone) is the expected case after a clean exit, and no
    // other error leaves anything for the caller to do.
    let _: Result<(), Errno> = killpg(group, signal);
}

fn spawn_feeder(child: &mut Child, input: Option<&[u8]>) -> Option<JoinHandle<()>> {
    let mut stdin = child.stdin.take()?;
    let bytes = input?.to_vec();
    Some(thread::spawn(move || {
        // A command that does not read its stdin closes the pipe: that is its right.
        let _ = stdin.write_all(&bytes);
    }))
}

fn spawn_reader<R: Read + Send + 'static>(stream: Option<R>) -> Option<JoinHandle<Vec<u8>>> {
    let mut stream = stream?;
    Some(thread::spawn(move || {
        let mut held = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    held.extend_from_slice(&chunk[..n]);
                    if held.len() > 2 * HELD_BYTES {
                        held.drain(..held.len() - HELD_BYTES);
                    }
                }
            }
        }
        held
    }))
}

fn join_reader(handle: Option<JoinHandle<Vec<u8>>>) -> Vec<u8> {
    handle.and_then(|h| h.join().ok()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv<'a>(command: &'a str, dir: &'a Path, timeout_ms: u64) -> Invocation<'a> {
        Invocation {
            command,
            dir,
            timeout: Duration::from_millis(timeout_ms),
            stdin: None,
            env: Vec::new(),
            limits: TailLimits::default(),
        }
    }

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn captures_both_streams_and_the_exit_code() {
        let d = dir();
        let done = run(
            &inv("echo out; echo err >&2; exit 3", d.path(), 5000),
            &Interrupt::default(),
        )
        .unwrap();
        assert_eq!(done.code, Some(3));
        assert!(!done.success());
        assert_eq!(done.tail.stdout(), "out\n");
        assert_eq!(done.tail.stderr(), "err\n");
        assert_eq!(done.status_text(), "exit code 3");
    }

    #[test]
    fn runs_in_the_directory_with_stdin_and_env() {
        let d = dir();
        let mut i = inv("pwd; cat; printf %s \"$K\"", d.path(), 5000);
        i.stdin = Some(b"spec\n");
        i.env.push(("K", "v".to_owned()));
        let done = run(&i, &Interrupt::default()).unwrap();
        assert!(done.success());
        let canonical = d.path().canonicalize().unwrap();
        assert_eq!(
            done.tail.stdout(),
            format!("{}\nspec\nv", canonical.display())
        );
    }

    #[test]
    fn missing_command_is_infrastructure() {
        let d = dir();
        let err = run(
            &inv("no_such_command_kleene_xyz", d.path(), 5000),
            &Interrupt::default(),
        )
        .unwrap_err();
        assert!(matches!(err, RunError::NotFound { .. }), "{err}");
        assert!(err.to_string().contains("not found"), "{err}");
    }

    #[test]
    fn missing_directory_is_a_spawn_failure() {
        let d = dir();
        let gone = d.path().join("absent");
        let err = run(&inv("true", &gone, 5000), &Interrupt::default()).unwrap_err();
        assert!(matches!(err, RunError::Spawn { .. }), "{err}");
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let d = dir();
        let started = Instant::now();
        // The background sleep would keep stdout open for 30 s if only the shell died.
        let err = run(
            &inv("sleep 30 & echo started; sleep 30", d.path(), 300),
            &Interrupt::default(),
        )
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        match err {
            RunError::TimedOut { tail, .. } => assert_eq!(tail.stdout(), "started\n"),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn background_leftovers_do_not_hold_a_finished_command() {
        let d = dir();
        let started = Instant::now();
        let done = run(
            &inv("sleep 30 & echo ok", d.path(), 10_000),
            &Interrupt::default(),
        )
        .unwrap();
        assert!(done.success());
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn interrupt_stops_the_command() {
        let d = dir();
        let flag = Interrupt::default();
        let setter = flag.clone();
        let t = thread::spawn(move || {
            thread::sleep(Duration::from_millis(150));
            setter.set();
        });
        let started = Instant::now();
        let err = run(&inv("sleep 30", d.path(), 60_000), &flag).unwrap_err();
        t.join().unwrap();
        assert!(err.is_interrupted());
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_command_that_ignores_stdin_is_fine() {
        let d = dir();
        let mut i = inv("exit 0", d.path(), 5000);
        let big = vec![b'x'; 1 << 20];
        i.stdin = Some(&big);
        assert!(run(&i, &Interrupt::default()).unwrap().success());
    }
}
