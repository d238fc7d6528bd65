//! Runs one shell command in its own process group with a timeout, capturing bounded output.
//!
//! This is what the `kleene` CLI runs every command of a plan file with, for agents of your
//! own that run `cargo test`, `pytest` or a coding agent's CLI:
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use kleene::process::{self, Interrupt, Invocation};
//!
//! let dir = tempfile::tempdir()?;
//! let inv = Invocation {
//!     timeout: Duration::from_secs(60),
//!     ..Invocation::new("echo built; echo 'warning: unused' >&2; exit 3", dir.path())
//! };
//! let done = process::run(&inv, &Interrupt::default())?;
//! assert_eq!(done.code, Some(3));
//! // A failed command becomes the justification a fixer reads.
//! let why = done.justification(inv.command);
//! assert!(why.contains("exit code 3") && why.contains("warning: unused"));
//! # Ok(())
//! # }
//! ```
//!
//! Every command of a plan file runs as `sh -c COMMAND` in the workspace directory. The child
//! leads a new process group, so a timeout or Ctrl-C can stop everything the command started
//! (a test runner and its workers, a `sleep` in the background) with one `killpg`, and the
//! terminal's own Ctrl-C does not reach the children behind kleene's back.
//!
//! # What outlives a command
//!
//! Where the machine allows it (Linux, and the right to make a PID namespace, or a user
//! namespace with one inside) and once a program is named that can serve as the host (see
//! [`contain_commands_with`]; the `kleene` binary names itself), commands run inside a
//! contained host: the init of a PID namespace under a parent-death signal, which kills
//! and reaps every process a command left behind (including ones that called `setsid` to leave
//! its process group) before it reports the command's end, and which the kernel tears down with
//! everything in it when kleene dies, even by SIGKILL. One host serves a thread's every
//! command, so a call costs one fork, not a new namespace. Where no namespace can be made,
//! a writable cgroup v2 hierarchy gives each command a cgroup of its own, killed when it ends;
//! without one either, the named host runs as the child subreaper of its commands and kills
//! whatever they left (see [`Containment::Subreaper`]). Where no host is named the command
//! leads a process group that kleene kills when the command ends; a process that leaves the group, or
//! a group whose kleene was killed with SIGKILL, can keep running. For that case each running
//! group is recorded in a file (see [`GroupRecords`]) until it is stopped, so the next
//! `kleene resume` can refuse to start while an earlier call's processes are still alive, or
//! kill them when asked. [`Finished::left_nothing_running`] says whether a command's end was
//! proved to leave nothing running (under process groups alone, by looking at the processes
//! started while it ran). [`containment`] says which of the two is in force.
//!
//! A command either finishes ([`Finished`], success or an ordinary non-zero exit that a
//! validator may judge and a fix may repair) or fails as infrastructure ([`RunError`]: it
//! could not be spawned, the shell could not find or execute it, it timed out, or the user
//! interrupted it). Infrastructure failures are never handed to a fixer.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::closure::verdict::{OutputTail, TailLimits};
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// The most bytes of each stream held in memory while a command runs. Far above any tail
/// limit, so the tail is exact, yet a command that prints gigabytes cannot exhaust memory.
const HELD_BYTES: usize = 1 << 20;

/// How long a process group gets between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_millis(500);

/// How often a wait re-checks the deadline, the interrupt flag and a silent leader.
const POLL: Duration = Duration::from_millis(25);

/// Set by SIGINT/SIGTERM; every running command is stopped when it turns true.
#[derive(Debug, Clone, Default)]
pub struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    /// A flag that SIGINT and SIGTERM set.
    pub fn install() -> std::io::Result<Self> {
        let flag = Self::default();
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            // A second Ctrl-C while the first is being handled exits at once.
            signal_hook::flag::register_conditional_shutdown(signal, 130, Arc::clone(&flag.0))?;
            signal_hook::flag::register(signal, Arc::clone(&flag.0))?;
        }
        Ok(flag)
    }

    /// Whether an interrupt arrived.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Sets the flag (what the signal handler does): every command running with it stops.
    pub fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// One command to run.
#[derive(Clone)]
pub struct Invocation<'a> {
    /// The shell command line, run as `sh -c`.
    pub command: &'a str,
    /// The working directory.
    pub dir: &'a Path,
    /// Longest run allowed before the whole group is killed.
    pub timeout: Duration,
    /// Bytes written to the command's stdin (then closed); stdin is empty otherwise.
    pub stdin: Option<&'a [u8]>,
    /// Extra environment variables, exported by the command's shell before the command (on
    /// its first line, so the command's lines keep their numbers). A name no shell can assign
    /// (`A-B`) is put in the shell's environment instead, where it reaches the command or not
    /// as `/bin/sh` decides (bash passes such names on, dash drops them).
    pub env: Vec<(&'a str, String)>,
    /// Bounds of the kept output tail.
    pub limits: TailLimits,
    /// Where the running process group is recorded while the command runs, if anywhere,
    /// with a label (task and call) for the message that names it.
    pub records: Option<(&'a GroupRecords, String)>,
    /// What the command waits for, if anything: called once its shell has started, and the
    /// shell runs the command only if it returns true (else the run ends with
    /// [`RunError::Withheld`] and nothing of the command ran); the timeout counts from its
    /// return. kleene holds a call's first command until the call's reservation is durable,
    /// so the sync overlaps with the shell loading itself. Where the shell cannot wait (a
    /// command given stdin, or one run by a host process), it is called before the shell
    /// starts.
    pub hold: Option<&'a (dyn Fn() -> bool + Sync)>,
    /// What the command may touch, if it is confined (see [`sandbox`]): it then writes only
    /// what the sandbox gives and a private `TMPDIR`. `None` runs it as the user runs
    /// anything. Where the kernel cannot confine ([`sandbox::mode`]), a command given a
    /// sandbox runs unconfined.
    pub sandbox: Option<&'a sandbox::Sandbox>,
}

impl std::fmt::Debug for Invocation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Invocation")
            .field("command", &self.command)
            .field("dir", &self.dir)
            .field("timeout", &self.timeout)
            .field("stdin", &self.stdin.map(<[u8]>::len))
            .field("env", &self.env)
            .field("limits", &self.limits)
            .field("records", &self.records)
            .field("hold", &self.hold.is_some())
            .field("sandbox", &self.sandbox)
            .finish()
    }
}

impl<'a> Invocation<'a> {
    /// `command` in `dir` with the defaults: a ten-minute timeout, empty stdin, no extra
    /// environment, the default tail limits, no record of its group, and no sandbox.
    pub fn new(command: &'a str, dir: &'a Path) -> Self {
        Self {
            command,
            dir,
            timeout: Duration::from_secs(600),
            stdin: None,
            env: Vec::new(),
            limits: TailLimits::default(),
            records: None,
            hold: None,
            sandbox: None,
        }
    }
}

/// How far kleene can stop what a command leaves running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Containment {
    /// A PID namespace with a parent-death signal: nothing outlives the command or kleene.
    PidNamespace,
    /// A process group in a cgroup of its own (cgroup v2, no PID namespace): everything the
    /// command started, a `setsid` child too, is killed with the cgroup when it ends; only
    /// a SIGKILL of kleene itself leaves them running.
    Cgroup,
    /// A host that is the child subreaper of the commands it runs (no PID namespace and no
    /// writable cgroup, as in a container under the default seccomp profile): whatever a
    /// command started becomes the host's child when its parent ends, a `setsid` child too,
    /// and the host kills and reaps them all before it answers. When kleene dies, even by
    /// SIGKILL, the host is told by a parent-death signal and does the same; only a SIGKILL of
    /// the host itself leaves a command running.
    Subreaper,
    /// A process group only: a `setsid` child, or everything after kleene is SIGKILLed, can
    /// outlive it.
    ProcessGroup,
}

impl Containment {
    /// A word for messages and `--json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Containment::PidNamespace => "pid-namespace",
            Containment::Cgroup => "cgroup",
            Containment::Subreaper => "subreaper",
            Containment::ProcessGroup => "process-group",
        }
    }
}

pub use cgroup::{disable_cgroups, release_cgroups};
#[cfg(feature = "testing")]
pub(crate) use host::decode_both_ends;
pub use host::{contain_commands_with, serve_host_if_asked};

mod cgroup;
mod host;
pub mod sandbox;
mod started;

/// The entries of `dir` named `PREFIX<pid>-…` whose process no longer runs: what processes
/// of kleene's kept for their next commands (a cgroup, a temporary directory) and left when
/// they ended.
pub(crate) fn left_by_ended_processes(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            name.to_str()
                .and_then(|n| n.strip_prefix(prefix))
                .and_then(|rest| rest.split('-').next())
                .filter(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
                .is_some_and(|pid| !Path::new("/proc").join(pid).exists())
        })
        .map(|entry| entry.path())
        .collect()
}

/// Starts up to `count` contained hosts without waiting for them, so that their start (a
/// program's, a millisecond or two) overlaps what the process does before its first
/// commands; the first `count` threads to run a command take one each instead of starting
/// their own. Does nothing before [`contain_commands_with`] named a host, or where hosts
/// proved not to work. Each host is started by a thread of its own that lives as long as the
/// host is kept, so any thread may call this (the `kleene` binary calls it first thing in
/// `run` and `resume`); a host that ended is never handed out. A thread's host goes back to
/// the spares when the thread ends, for the next thread to take.
pub fn start_hosts(count: usize) {
    host::start_early(count);
}

/// Stops the calling thread's contained host, if it started one, and every spare host (those
/// [`start_hosts`] started that no thread took, and those whose threads ended), and removes
/// the records of their process groups (call before the process ends; the `kleene` binary
/// does). A later command on this thread starts a new host.
pub fn release_host() {
    host::release();
}

/// The containment in force, probed once per process: a PID namespace once
/// [`contain_commands_with`] named a host that works here (unless
/// [`disable_pid_namespaces`] was called), else a cgroup per command where cgroup v2 is
/// writable (unless [`disable_cgroups`] was called), else the named host as a subreaper, a
/// process group where no host was named or none works.
pub fn containment() -> Containment {
    match host::kind() {
        Some(kind) => kind,
        None if cgroup::available() => Containment::Cgroup,
        None => Containment::ProcessGroup,
    }
}

/// Turns PID namespaces off for this process (`KLEENE_CONTAINMENT=subreaper`): the host named
/// by [`contain_commands_with`] then serves as a subreaper where no cgroup is writable (call
/// [`disable_cgroups`] too to have it everywhere). Call before the first command runs.
pub fn disable_pid_namespaces() {
    host::disable_namespaces();
}

/// The process groups of commands that are running, one file each in a directory: what a
/// later kleene checks before it starts work in the same state directory.
#[derive(Debug, Clone)]
pub struct GroupRecords {
    dir: PathBuf,
}

/// A recorded process group that is still alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveGroup {
    /// The process group id.
    pub group: i32,
    /// The task and call it belongs to, and its command.
    pub label: String,
    /// The cgroup the command ran in, where it had one: what it started can have left the
    /// group (`setsid`) but not the cgroup.
    cgroup: Option<PathBuf>,
}

/// What a record's second line starts with when the command ran in a cgroup of its own.
const CGROUP_LINE: &str = "cgroup ";

impl GroupRecords {
    /// Records kept in `dir` (created on first use).
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    pub(crate) fn record(&self, group: i32, label: &str) {
        self.record_in(group, None, label);
    }

    /// Records `group`, and the cgroup its command runs in, if it has one.
    pub(crate) fn record_in(&self, group: i32, cgroup: Option<&Path>, label: &str) {
        // Best effort: a missing record only weakens a later check, never this run.
        let _ = std::fs::create_dir_all(&self.dir);
        let started = start_time(group).unwrap_or_default();
        // The label (which holds the command) goes last: it may span lines.
        let text = match cgroup.and_then(Path::to_str) {
            Some(cgroup) => format!("{started}\n{CGROUP_LINE}{cgroup}\n{label}\n"),
            None => format!("{started}\n{label}\n"),
        };
        let _ = std::fs::write(self.dir.join(group.to_string()), text);
    }

    pub(crate) fn forget(&self, group: i32) {
        let _ = std::fs::remove_file(self.dir.join(group.to_string()));
    }

    /// The recorded groups that still have a live process, after giving groups that are
    /// being killed (a parent-death signal is delivered asynchronously, and a subreaper host
    /// gives its command a grace before it kills it) a moment to go; records of dead ones are
    /// removed. A group whose command ran in a cgroup of its own
    /// counts as alive while that cgroup holds a process, even once the group itself is gone
    /// (a `setsid` child that outlived a kleene killed with SIGKILL).
    pub fn live(&self) -> Vec<LiveGroup> {
        let deadline = Instant::now() + GRACE + Duration::from_secs(1);
        loop {
            let live = self.live_now();
            if live.is_empty() || Instant::now() >= deadline {
                return live;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn live_now(&self) -> Vec<LiveGroup> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut live = Vec::new();
        for entry in entries.flatten() {
            let Some(group) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
                .filter(|g| *g > 1)
            else {
                continue;
            };
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let mut lines = text.lines().peekable();
            let started = lines.next().unwrap_or_default();
            let cgroup = lines
                .next_if(|l| l.starts_with(CGROUP_LINE))
                .map(|l| PathBuf::from(&l[CGROUP_LINE.len()..]));
            let label = lines.next().unwrap_or("an earlier call").to_owned();
            let exists = group_alive(group);
            // A group id is not reused while any member lives; a new leader with the same id
            // has another start time.
            let same = match start_time(group) {
                Some(now) => now == started,
                None => true,
            };
            let contained = cgroup.as_deref().is_some_and(cgroup::populated_at);
            if (exists && same) || contained {
                live.push(LiveGroup {
                    group,
                    label,
                    cgroup,
                });
            } else {
                self.forget(group);
            }
        }
        live.sort_by_key(|g| g.group);
        live
    }

    /// Kills `group` (SIGKILL to every member, and to everything in its command's cgroup)
    /// and forgets it.
    pub fn kill(&self, group: &LiveGroup) {
        signal_group(Pid::from_raw(group.group), Signal::SIGKILL);
        if let Some(cgroup) = &group.cgroup {
            cgroup::kill_at(cgroup);
        }
        self.forget(group.group);
    }
}

/// Whether a process of group `group` may still run code of its own. Zombies do not count: a
/// killed command's processes stay zombies until someone reaps them, and they can write
/// nothing. Nor does a process every thread of which is exiting, once nothing else of its PID
/// namespace can run: the init of a contained host's namespace whose kleene was killed waits,
/// exiting, until the commands kleene started in the namespace are reaped, which on a machine
/// whose init never reaps is never, and it has sent every one of them SIGKILL first. Without
/// `/proc`, any member counts.
fn group_alive(group: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return killpg(Pid::from_raw(group), None::<Signal>).is_ok();
    };
    let group = group.to_string();
    entries.flatten().any(|entry| {
        let Some(pid) = process_id(&entry) else {
            return false;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        let Some(fields) = StatFields::of(&stat) else {
            return false;
        };
        fields.pgrp == group
            && (fields.runs()
                || threads_run(&format!("/proc/{pid}/task"))
                || (fields.exiting() && namespace_runs(&pid)))
    })
}

/// The process id an entry of `/proc` names, if it names one.
fn process_id(entry: &std::fs::DirEntry) -> Option<String> {
    entry
        .file_name()
        .to_str()
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .map(str::to_owned)
}

/// Whether another process of the PID namespace of `pid`, an exiting process, may still run
/// code of its own: one that is neither a zombie nor exiting and has no SIGKILL pending. An
/// exiting process of this process's own namespace leaves nothing behind it; the init of
/// another kills everything in its namespace as it exits.
fn namespace_runs(pid: &str) -> bool {
    let namespace = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    let Some(theirs) = namespace(pid) else {
        return false;
    };
    if namespace("self").as_ref() == Some(&theirs) {
        return false;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|entry| {
        let Some(other) = process_id(&entry).filter(|other| other != pid) else {
            return false;
        };
        namespace(&other).as_ref() == Some(&theirs)
            && (runs_at(format!("/proc/{other}/stat")) == Some(true)
                || threads_run(&format!("/proc/{other}/task")))
            && !kill_pending(&other)
    })
}

/// Whether SIGKILL is pending for process `pid` (then it runs no code of its own again).
fn kill_pending(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| StatusFields::of(&status))
        .is_some_and(|status| status.killed)
}

/// The fields of a `/proc/ID/status` file that tell what became of a process or thread.
struct StatusFields {
    /// The id of its process (its own, unless it is a thread).
    process: u32,
    /// A zombie, or dead.
    zombie: bool,
    /// SIGKILL pending, for the thread or its whole process.
    killed: bool,
}

impl StatusFields {
    fn of(text: &str) -> Option<Self> {
        const SIGKILL_BIT: u64 = 1 << (9 - 1);
        let mut state = None;
        let mut process = None;
        let mut killed = false;
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match key {
                "State" => state = value.chars().next(),
                "Tgid" => process = value.parse().ok(),
                "ShdPnd" | "SigPnd" => {
                    killed |= u64::from_str_radix(value, 16).is_ok_and(|m| m & SIGKILL_BIT != 0);
                }
                _ => {}
            }
        }
        let state = state?;
        Some(Self {
            process: process?,
            zombie: state == 'Z' || state == 'X',
            killed,
        })
    }
}

/// Whether a thread of the process whose threads are listed at `tasks` runs: one whose
/// process's first thread ended (or is ending) may still have others.
fn threads_run(tasks: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(tasks) else {
        return false;
    };
    entries
        .flatten()
        .any(|entry| runs_at(entry.path().join("stat")) == Some(true))
}

/// Whether the process or thread whose `/proc/…/stat` is at `stat` runs (see
/// [`StatFields::runs`]); `None` where it cannot be read: gone, or never there.
fn runs_at(stat: impl AsRef<Path>) -> Option<bool> {
    let stat = std::fs::read_to_string(stat).ok()?;
    StatFields::of(&stat).map(|fields| fields.runs())
}

/// The fields of a `/proc/PID/stat` line that tell whether a process runs, its group, and
/// when it started.
struct StatFields<'a> {
    state: &'a str,
    pgrp: &'a str,
    flags: u64,
    /// Field 22: when the process started, which tells a reused id.
    started: &'a str,
}

impl<'a> StatFields<'a> {
    /// The kernel's flag of a task that is exiting (`PF_EXITING`).
    const EXITING: u64 = 0x4;

    fn of(stat: &'a str) -> Option<Self> {
        // The command name (field 2) may hold spaces and parentheses: count after the last ')'.
        let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
        let state = fields.next()?;
        let pgrp = fields.nth(1)?;
        let flags = fields.nth(3)?.parse().ok()?;
        let started = fields.nth(12)?;
        Some(Self {
            state,
            pgrp,
            flags,
            started,
        })
    }

    /// Neither a zombie nor dead nor exiting.
    fn runs(&self) -> bool {
        self.state != "Z" && self.state != "X" && !self.exiting()
    }

    /// Exiting, but not yet a zombie.
    fn exiting(&self) -> bool {
        self.flags & Self::EXITING != 0 && self.state != "Z" && self.state != "X"
    }
}

/// The start time of process `pid` (field 22 of `/proc/PID/stat`), to tell a reused id.
fn start_time(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    StatFields::of(&stat).map(|fields| fields.started.to_owned())
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
    /// Whether nothing the command started can still run: see
    /// [`left_nothing_running`](Self::left_nothing_running).
    quiet: bool,
    /// What the sandbox denied it, as read off its output: see
    /// [`sandbox_denials`](Self::sandbox_denials).
    denials: Vec<String>,
}

impl Finished {
    /// Whether kleene proved that nothing the command started still runs, so that nothing
    /// of it can write into its directory any more. Always true under a PID namespace, a
    /// cgroup or a subreaper host, which kill and reap everything a command left before it
    /// is reported ended. Under process groups alone, true only when no process started
    /// while the command ran still runs once its group is killed: a process another program
    /// started meanwhile makes it false, so the answer errs on the safe side only.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use kleene::process::{self, Interrupt, Invocation};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let done = process::run(&Invocation::new("true", dir.path()), &Interrupt::default())?;
    /// // `true` starts nothing; only where commands are contained by process groups alone
    /// // may a process another program started meanwhile leave this unproved.
    /// let _ = done.left_nothing_running();
    /// # Ok(())
    /// # }
    /// ```
    pub fn left_nothing_running(&self) -> bool {
        self.quiet
    }

    /// What the command's sandbox denied it, when it failed confined: each path its output
    /// says was denied ("Permission denied") that lies outside what the sandbox gave it.
    /// Empty when it succeeded, ran unconfined, or no such line was printed.
    pub fn sandbox_denials(&self) -> &[String] {
        &self.denials
    }

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

    /// What a fixer reads about this failed run of `command`: its status and the kept tails
    /// of stdout and stderr.
    pub fn justification(&self, command: &str) -> String {
        let mut text = format!("`{command}` failed with {}\n", self.status_text());
        for (name, tail) in [
            ("stdout", self.tail.stdout()),
            ("stderr", self.tail.stderr()),
        ] {
            if tail.is_empty() {
                continue;
            }
            text.push_str(&format!("--- {name} (tail) ---\n"));
            text.push_str(tail);
            if !text.ends_with('\n') {
                text.push('\n');
            }
        }
        if !self.denials.is_empty() {
            text.push_str("--- denied by kleene's sandbox ---\n");
            for denial in &self.denials {
                text.push_str(denial);
                text.push('\n');
            }
            text.push_str(
                "The command may write only its workspace (stage), its scratch and $TMPDIR, and \
                 read those and the system's and toolchains' directories; a plan task declares \
                 other paths in its `sandbox` (`\"sandbox\": {\"read\": [...], \"write\": [...]}`).\n",
            );
        }
        text
    }
}

/// Why a command could not do its work at all (an infrastructure failure, never repairable).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The shell itself could not be started in the directory.
    #[error("start `sh -c {command}` in {}", dir.display())]
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
    /// What the command waited for ([`Invocation::hold`]) said no: it never ran.
    #[error("run `{command}`: withheld, it never ran")]
    Withheld {
        /// The command line.
        command: String,
    },
    /// The command could not be confined as its sandbox says; it never ran.
    #[error("run `{command}` in its sandbox")]
    Sandbox {
        /// The command line.
        command: String,
        /// Why.
        #[source]
        source: sandbox::SandboxError,
    },
    /// Waiting for the command or reading its output failed.
    #[error("wait for `{command}`")]
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
/// The calling thread multiplexes both output pipes with `poll` and watches the deadline and
/// the interrupt flag in between, so a command costs one process and no helper threads
/// (a thread feeds stdin only when there is input).
///
/// # Errors
///
/// [`RunError`] for every infrastructure failure; an ordinary non-zero exit is a
/// [`Finished`] value.
pub fn run(inv: &Invocation<'_>, interrupt: &Interrupt) -> Result<Finished, RunError> {
    let done = host::run(inv, interrupt).unwrap_or_else(|| run_here(inv, interrupt, Place::Here));
    match (done, inv.sandbox) {
        (Ok(mut finished), Some(sandbox))
            if !finished.success() && sandbox::mode() != sandbox::Mode::Unavailable =>
        {
            let output = format!("{}\n{}", finished.tail.stdout(), finished.tail.stderr());
            finished.denials = sandbox.denials(&output, inv.dir);
            Ok(finished)
        }
        (done, _) => done,
    }
}

/// Where [`run_here`] starts a command, which says what proves it left nothing running.
#[derive(Clone, Copy)]
enum Place<'a> {
    /// Where this process runs, with no host: a cgroup of its own where cgroups are
    /// available, else only its process group, and then the processes started while it ran
    /// are looked at once it ended.
    Here,
    /// Inside a contained host's namespace, entered for the start alone: the host sweeps it.
    Namespace(&'a host::Entry),
    /// In a contained host, which kills and reaps whatever its commands leave.
    Host,
}

/// Runs `inv` as a child of this thread, in its own process group: inside `namespace` when
/// one is given (a contained host's, entered for the start alone), else where this process
/// runs, in a cgroup of its own where cgroups are available (what a contained host does
/// inside its namespace, and the fallback where there is no host).
fn run_here(
    inv: &Invocation<'_>,
    interrupt: &Interrupt,
    place: Place<'_>,
) -> Result<Finished, RunError> {
    let command = inv.command.to_owned();
    // A shell given stdin cannot also wait on it: its command waits before it starts.
    let gate = match inv.hold {
        Some(hold) if inv.stdin.is_some() => {
            if !hold() {
                return Err(RunError::Withheld { command });
            }
            None
        }
        hold => hold,
    };
    let mut started = Instant::now();
    let namespace = match place {
        Place::Namespace(entry) => Some(entry),
        Place::Here | Place::Host => None,
    };
    // The namespace contains the command already.
    let cgroup = match namespace {
        Some(_) => None,
        None => cgroup::CallCgroup::make(),
    };
    // With neither a host nor a cgroup, only the ids handed out while the command ran can
    // tell that nothing it started outlives it.
    let uncontained = matches!((place, &cgroup), (Place::Here, None));
    let window = uncontained.then(started::StartWindow::open).flatten();
    let script = match &cgroup {
        Some(_) => cgroup::entering(inv.command),
        None => command.clone(),
    };
    let mut cmd = Command::new(SHELL);
    // Where the run's key lives is none of a command's business (removing a variable the
    // process does not have would cost the copy `exported` saves).
    if std::env::var_os(SIGNING_KEY_VAR).is_some() {
        cmd.env_remove(SIGNING_KEY_VAR);
    }
    let procs = cgroup.as_ref().map(cgroup::CallCgroup::procs);
    let procs = match procs.as_deref().map(|p| (p, p.to_str())) {
        Some((_, Some(text))) => Some(text),
        Some((path, None)) => {
            cmd.env(cgroup::PROCS_VAR, path);
            None
        }
        None => None,
    };
    // A confined command gets a temporary directory of its own, the one place beside what
    // its sandbox gives where it may write; it goes when the command ends.
    let confined = match inv
        .sandbox
        .filter(|_| sandbox::mode() != sandbox::Mode::Unavailable)
    {
        Some(sandbox) => Some((
            sandbox,
            sandbox::PrivateTmp::take().map_err(|source| RunError::Sandbox {
                command: command.clone(),
                source,
            })?,
        )),
        None => None,
    };
    let tmp_text = confined
        .as_ref()
        .map(|(_, tmp)| tmp.path().to_string_lossy());
    let env = inv
        .env
        .iter()
        .map(|(key, value)| (*key, value.as_str()))
        .chain(procs.map(|p| (cgroup::PROCS_VAR, p)))
        .chain(tmp_text.as_deref().map(|t| ("TMPDIR", t)));
    let mut script = exported(env, &script, &mut cmd);
    // A recorded group is on record before a line of its command runs: a kleene killed
    // between the spawn and the record (a moment a loaded machine stretches) would otherwise
    // leave a running command that no later kleene knows of.
    let gated = gate.is_some() || inv.records.is_some();
    if gated {
        // A command given stdin reads it after the gate's line, from the same pipe.
        script.insert_str(0, if inv.stdin.is_some() { GATE_LINE } else { GATE });
    }
    cmd.arg("-c")
        .arg(&script)
        .current_dir(inv.dir)
        .process_group(0)
        .stdin(if inv.stdin.is_some() || gated {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut start = || match namespace {
        Some(namespace) => namespace.spawn(&mut cmd),
        None => cmd.spawn(),
    };
    let spawned = match &confined {
        Some((sandbox, tmp)) => {
            let procs = cgroup.as_ref().map(cgroup::CallCgroup::procs);
            let extra: Vec<&Path> = std::iter::once(tmp.path())
                .chain(procs.as_deref())
                .collect();
            sandbox::confined(sandbox, inv.dir, &extra, start).map_err(|source| {
                RunError::Sandbox {
                    command: command.clone(),
                    source,
                }
            })?
        }
        None => start(),
    };
    let mut child = spawned.map_err(|source| RunError::Spawn {
        command: command.clone(),
        dir: inv.dir.to_owned(),
        source,
    })?;
    // The child leads its own group, so its pid is the group id.
    let group = Pid::from_raw(child.id().cast_signed());
    #[cfg(test)]
    tests::BEFORE_RECORD.with(|hook| {
        if let Some(hook) = hook.borrow().as_ref() {
            hook();
        }
    });
    if let Some((records, label)) = &inv.records {
        records.record_in(
            group.as_raw(),
            cgroup.as_ref().map(cgroup::CallCgroup::dir),
            &format!("{label}: `{command}`"),
        );
    }
    // Withheld, the shell reads end of file (its stdin is dropped here) and exits before a
    // line of the command; the run then ends as any other, its group killed.
    let mut withheld = false;
    if gated {
        withheld = gate.is_some_and(|hold| !hold());
        if !withheld {
            // A shell that is gone already says why in its status and output.
            if let Some(open) = child.stdin.as_mut() {
                let _ = open.write_all(b"\n");
            }
            // The command's time starts when it may run.
            started = Instant::now();
        }
        if withheld || inv.stdin.is_none() {
            drop(child.stdin.take());
        }
    }
    let feeder = spawn_feeder(&mut child, inv.stdin);
    let mut streams = Streams::new(child.stdout.take(), child.stderr.take());

    let deadline = started + inv.timeout;
    let mut status: Option<std::io::Result<ExitStatus>> = None;
    let mut leader_gone: Option<Instant> = None;
    let ended = loop {
        if interrupt.is_set() {
            break End::Interrupted;
        }
        let now = Instant::now();
        if now >= deadline {
            break End::TimedOut;
        }
        if streams.closed() {
            break End::Exited;
        }
        if leader_gone.is_some_and(|at| now.duration_since(at) > DRAIN) {
            // Something escaped the group and still holds the pipes: stop listening.
            break End::Exited;
        }
        let woke = streams.pump(POLL.min(deadline - now));
        if !woke && status.is_none() {
            // Quiet pipes: the leader may be gone while leftovers of its group hold them.
            if let Ok(Some(exited)) = child.try_wait() {
                status = Some(Ok(exited));
                leader_gone = Some(Instant::now());
                signal_group(group, Signal::SIGKILL);
                // What left the group is in the cgroup, or a subreaper host's child now: once
                // it is gone the pipes close.
                if let Some(cgroup) = &cgroup {
                    cgroup.kill_all();
                }
                if host::reaping() {
                    host::reap_orphans();
                }
            }
        }
    };
    let status = match ended {
        End::Exited => {
            let status = status.unwrap_or_else(|| child.wait());
            // Whatever the command left running in its group must not outlive it.
            signal_group(group, Signal::SIGKILL);
            Some(status)
        }
        End::TimedOut | End::Interrupted => {
            // The leader's status after our own signal says nothing about the command.
            stop_group(group, &mut child);
            streams.drain(DRAIN);
            None
        }
    };
    // Whatever the command started, in its group or not, ends with its call: the stage it
    // ran in is quiet from here on.
    if let Some(cgroup) = &cgroup {
        cgroup.kill_all();
    }
    if let Some(feeder) = feeder {
        let _ = feeder.join();
    }
    if let Some((_, tmp)) = confined {
        tmp.give_back();
    }
    if let Some((records, _)) = &inv.records {
        records.forget(group.as_raw());
    }
    if withheld {
        return Err(RunError::Withheld { command });
    }
    let tail = OutputTail::capture(&streams.out.held, &streams.err.held, inv.limits);
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
    if cgroup.is_some()
        && status.code() == Some(125)
        && streams
            .err
            .held
            .starts_with(cgroup::ENTER_FAILED.as_bytes())
    {
        return Err(RunError::Spawn {
            command,
            dir: inv.dir.to_owned(),
            source: std::io::Error::other(cgroup::ENTER_FAILED),
        });
    }
    let quiet = !uncontained || window.is_some_and(|w| w.nothing_started_runs());
    match status.code() {
        Some(127) => Err(RunError::NotFound { command, tail }),
        Some(126) => Err(RunError::NotExecutable { command, tail }),
        code => Ok(Finished {
            code,
            signal: status.signal(),
            tail,
            quiet,
            denials: Vec::new(),
        }),
    }
}

/// The POSIX shell every command runs in.
const SHELL: &str = "/bin/sh";

/// What a shell whose command waits (for its [`Invocation::hold`], or for its group to be
/// recorded) runs first, on the command's first line: it reads one line from its stdin, which
/// kleene writes once the command may run, and exits at end of file, which is what it reads
/// when kleene withholds the command or dies. Its stdin is then what every command's is.
const GATE: &str = "IFS= read -r _ || exit 1; exec </dev/null; ";

/// The gate of a command given stdin: the line it waits for comes first on that stdin, and
/// the shell reads a pipe no further than the line's end, so the command reads the rest.
const GATE_LINE: &str = "IFS= read -r _ || exit 1; ";

/// The variable that names the journal's signing key, which no command sees.
const SIGNING_KEY_VAR: &str = "KLEENE_SIGNING_KEY";

/// `script` with `env` exported before it, on its first line (so the command's own lines
/// keep their numbers), where each name is one the shell can assign; any other name is set
/// on `cmd`. The shell sets the variables itself because a spawn that leaves the environment
/// as it stands hands the process's own to the shell as it is, where changing it has std
/// copy every variable of the process on every spawn: about a quarter of kleene's own
/// instructions per call, measured.
fn exported<'e>(
    env: impl IntoIterator<Item = (&'e str, &'e str)>,
    script: &str,
    cmd: &mut Command,
) -> String {
    let mut exports = String::new();
    for (key, value) in env {
        if !is_shell_name(key) {
            cmd.env(key, value);
            continue;
        }
        exports.push_str(if exports.is_empty() { "export " } else { " " });
        exports.push_str(key);
        exports.push_str("='");
        exports.push_str(&value.replace('\'', "'\\''"));
        exports.push('\'');
    }
    if exports.is_empty() {
        return script.to_owned();
    }
    exports.push_str("; ");
    exports.push_str(script);
    exports
}

/// Whether `name` is one a POSIX shell can assign: a letter or underscore, then letters,
/// digits and underscores.
fn is_shell_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// How long output is still read after the leader is gone or the group was killed.
const DRAIN: Duration = Duration::from_millis(200);

enum End {
    Exited,
    TimedOut,
    Interrupted,
}

/// One output pipe and what it said so far (at most [`HELD_BYTES`], the latest).
struct Stream<R> {
    pipe: Option<R>,
    held: Vec<u8>,
}

impl<R: Read + AsFd> Stream<R> {
    fn new(pipe: Option<R>) -> Self {
        Self {
            pipe,
            held: Vec::new(),
        }
    }

    /// Reads what is ready; closes the stream on end of file or error.
    fn read_ready(&mut self) {
        let Some(pipe) = self.pipe.as_mut() else {
            return;
        };
        let mut chunk = [0u8; 8192];
        match pipe.read(&mut chunk) {
            Ok(0) | Err(_) => self.pipe = None,
            Ok(n) => {
                self.held.extend_from_slice(&chunk[..n]);
                if self.held.len() > 2 * HELD_BYTES {
                    self.held.drain(..self.held.len() - HELD_BYTES);
                }
            }
        }
    }
}

struct Streams {
    out: Stream<ChildStdout>,
    err: Stream<ChildStderr>,
}

impl Streams {
    fn new(out: Option<ChildStdout>, err: Option<ChildStderr>) -> Self {
        Self {
            out: Stream::new(out),
            err: Stream::new(err),
        }
    }

    fn closed(&self) -> bool {
        self.out.pipe.is_none() && self.err.pipe.is_none()
    }

    /// Waits up to `timeout` for output and reads it; false when nothing happened.
    fn pump(&mut self, timeout: Duration) -> bool {
        let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        let (out_ready, err_ready) = {
            let mut which = Vec::with_capacity(2);
            let mut fds = Vec::with_capacity(2);
            if let Some(p) = &self.out.pipe {
                which.push(0);
                fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
            }
            if let Some(p) = &self.err.pipe {
                which.push(1);
                fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, PollTimeout::from(ms)) {
                // EINTR is how SIGINT wakes us: the caller re-checks the flag.
                Ok(0) | Err(_) => return false,
                Ok(_) => {}
            }
            let ready = |stream: i32| {
                which
                    .iter()
                    .zip(&fds)
                    .any(|(w, fd)| *w == stream && fd.revents().is_some_and(|r| !r.is_empty()))
            };
            (ready(0), ready(1))
        };
        if out_ready {
            self.out.read_ready();
        }
        if err_ready {
            self.err.read_ready();
        }
        true
    }

    /// Reads whatever is left for at most `window`.
    fn drain(&mut self, window: Duration) {
        let until = Instant::now() + window;
        while !self.closed() {
            let now = Instant::now();
            if now >= until {
                break;
            }
            self.pump(until - now);
        }
    }
}

/// SIGTERM, a grace period, then SIGKILL; reaps the leader.
fn stop_group(group: Pid, child: &mut Child) {
    signal_group(group, Signal::SIGTERM);
    let until = Instant::now() + GRACE;
    while Instant::now() < until {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    signal_group(group, Signal::SIGKILL);
    let _ = child.wait();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn inv<'a>(command: &'a str, dir: &'a Path, timeout_ms: u64) -> Invocation<'a> {
        Invocation {
            timeout: Duration::from_millis(timeout_ms),
            ..Invocation::new(command, dir)
        }
    }

    #[test]
    fn a_held_command_runs_only_once_its_hold_returns_and_only_if_it_says_yes() {
        let d = dir();
        let marker = d.path().join("ran");
        let command = format!("date +%s%N > '{}'", marker.display());
        let released = std::sync::Mutex::new(None);
        let hold = || {
            // Long enough that a shell not held would have written the marker by now.
            thread::sleep(Duration::from_millis(300));
            assert!(!marker.exists(), "the command ran before its hold returned");
            *released.lock().unwrap() = Some(std::time::SystemTime::now());
            true
        };
        let held = Invocation {
            hold: Some(&hold),
            ..inv(&command, d.path(), 10_000)
        };
        assert!(run(&held, &Interrupt::default()).unwrap().success());
        let ran: u128 = std::fs::read_to_string(&marker)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let released = released.lock().unwrap().unwrap();
        let released = released.duration_since(std::time::UNIX_EPOCH).unwrap();
        assert!(
            ran >= released.as_nanos(),
            "ran at {ran}, released at {released:?}"
        );

        std::fs::remove_file(&marker).unwrap();
        let refuse = || false;
        let refused = Invocation {
            hold: Some(&refuse),
            ..inv(&command, d.path(), 10_000)
        };
        let err = run(&refused, &Interrupt::default()).unwrap_err();
        assert!(matches!(err, RunError::Withheld { .. }), "{err:?}");
        thread::sleep(Duration::from_millis(100));
        assert!(!marker.exists(), "a withheld command ran");
    }

    #[test]
    fn a_held_command_s_timeout_starts_when_it_is_let_run() {
        let d = dir();
        let slow = || {
            thread::sleep(Duration::from_millis(400));
            true
        };
        for stdin in [None, Some(&b"x"[..])] {
            let held = Invocation {
                stdin,
                hold: Some(&slow),
                ..inv("sleep 0.1", d.path(), 300)
            };
            let done = run(&held, &Interrupt::default());
            assert!(done.is_ok_and(|d| d.success()), "stdin {stdin:?}");
        }
    }

    #[test]
    fn a_held_command_given_stdin_waits_before_its_shell_starts() {
        let d = dir();
        let refuse = || false;
        let refused = Invocation {
            stdin: Some(b"input"),
            hold: Some(&refuse),
            ..inv("cat > got", d.path(), 10_000)
        };
        let err = run(&refused, &Interrupt::default()).unwrap_err();
        assert!(matches!(err, RunError::Withheld { .. }), "{err:?}");
        let yes = || true;
        let held = Invocation {
            stdin: Some(b"input"),
            hold: Some(&yes),
            ..inv("cat > got", d.path(), 10_000)
        };
        assert!(run(&held, &Interrupt::default()).unwrap().success());
        assert_eq!(std::fs::read(d.path().join("got")).unwrap(), b"input");
    }

    #[test]
    fn a_held_shell_whose_kleene_is_gone_exits_before_a_line_of_its_command() {
        // What a held shell reads when kleene dies: end of file, with nothing written.
        let d = dir();
        let out = Command::new(SHELL)
            .arg("-c")
            .arg(format!("{GATE}touch ran"))
            .current_dir(d.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert!(!d.path().join("ran").exists());
        // And once released, its command reads the empty stdin every command has.
        let mut shell = Command::new(SHELL)
            .arg("-c")
            .arg(format!("{GATE}wc -c > count"))
            .current_dir(d.path())
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let mut gate = shell.stdin.take().unwrap();
        gate.write_all(b"\nleft in the pipe\n").unwrap();
        drop(gate);
        assert!(shell.wait().unwrap().success());
        let count = std::fs::read_to_string(d.path().join("count")).unwrap();
        assert_eq!(count.trim(), "0");
    }

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn only_what_ended_processes_left_is_found() {
        let dir = dir();
        // Past the largest pid_max Linux allows: never a running process.
        let ended = dir.path().join("kleene-call-4194305-0-1");
        let running = dir
            .path()
            .join(format!("kleene-call-{}-0-1", std::process::id()));
        for path in [
            &ended,
            &running,
            &dir.path().join("kleene-call-x-0"),
            &dir.path().join("other"),
        ] {
            std::fs::create_dir(path).unwrap();
        }
        assert_eq!(left_by_ended_processes(dir.path(), "kleene-call-"), [ended]);
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
    fn every_variable_reaches_the_command_as_it_was_given() {
        let d = dir();
        let values = [
            "plain",
            "it's",
            "a  b",
            "$HOME `id` \\ \"q\" ''",
            "new\nline",
            "",
        ];
        let names = ["A", "B", "C", "D", "E", "F"];
        let mut i = inv(
            "printf '%s|' \"$A\" \"$B\" \"$C\" \"$D\" \"$E\" \"$F\"",
            d.path(),
            5000,
        );
        i.env = names
            .iter()
            .zip(values)
            .map(|(name, value)| (*name, value.to_owned()))
            .collect();
        // A name no shell can assign is put in the shell's environment (dash drops it).
        i.env.push(("NOT-A-NAME", "odd".to_owned()));
        let done = run(&i, &Interrupt::default()).unwrap();
        assert!(done.success(), "{}", done.tail.stderr());
        let expected: String = values.iter().map(|v| format!("{v}|")).collect();
        assert_eq!(done.tail.stdout(), expected);
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(48))]

        /// For every value (no NUL, which no environment can hold) and every name a shell can
        /// assign, the command reads the value back exactly.
        #[test]
        fn any_value_reaches_the_command_exactly(
            name in "[A-Za-z_][A-Za-z0-9_]{0,12}",
            value in "[^\\x00]{0,64}",
        ) {
            let d = dir();
            let command = format!("printf '%s' \"${name}\"");
            let mut i = inv(&command, d.path(), 5000);
            i.env.push((&name, value.clone()));
            let done = run(&i, &Interrupt::default()).unwrap();
            proptest::prop_assert!(done.success(), "{}", done.tail.stderr());
            proptest::prop_assert_eq!(done.tail.stdout(), value);
        }
    }

    #[test]
    fn a_status_is_read_for_its_process_state_and_pending_kill() {
        let text = "Name:\tsh\nState:\tS (sleeping)\nTgid:\t42\nPid:\t43\nShdPnd:\t0000000000000100\nSigPnd:\t0000000000000000\n";
        let status = StatusFields::of(text).unwrap();
        assert_eq!(status.process, 42);
        assert!(!status.zombie);
        assert!(status.killed);
        let zombie =
            StatusFields::of("State:\tZ (zombie)\nTgid:\t7\nSigPnd:\t0\nShdPnd:\t0\n").unwrap();
        assert!(zombie.zombie && !zombie.killed);
        assert!(StatusFields::of("Name:\tx\n").is_none());
    }

    #[test]
    fn a_command_s_lines_keep_their_numbers() {
        let d = dir();
        let mut i = inv("true\nkleene_no_such_command_here || true", d.path(), 5000);
        i.env.push(("K", "v".to_owned()));
        let done = run(&i, &Interrupt::default()).unwrap();
        let stderr = done.tail.stderr();
        // dash says `sh: 2: …`, bash `sh: line 2: …`.
        assert!(
            stderr.contains(": 2: ") || stderr.contains("line 2:"),
            "{stderr}"
        );
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
            &inv("sleep 30 & echo started; sleep 30", d.path(), 2000),
            &Interrupt::default(),
        )
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(25));
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
        assert!(started.elapsed() < Duration::from_secs(25));
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
        assert!(started.elapsed() < Duration::from_secs(25));
    }

    #[test]
    fn a_command_that_ignores_stdin_is_fine() {
        let d = dir();
        let mut i = inv("exit 0", d.path(), 5000);
        let big = vec![b'x'; 1 << 20];
        i.stdin = Some(&big);
        assert!(run(&i, &Interrupt::default()).unwrap().success());
    }

    #[test]
    fn exit_codes_and_missing_commands_are_told_apart() {
        let d = dir();
        let done = run(&inv("exit 7", d.path(), 5000), &Interrupt::default()).unwrap();
        assert_eq!(done.code, Some(7));
        let err = run(
            &inv("no-such-command-kleene", d.path(), 5000),
            &Interrupt::default(),
        )
        .unwrap_err();
        assert!(matches!(err, RunError::NotFound { .. }), "{err}");
    }

    thread_local! {
        /// Run on this thread between a command's spawn and its group's record: the moment
        /// a loaded machine stretches.
        pub(super) static BEFORE_RECORD: std::cell::RefCell<Option<Box<dyn Fn()>>> =
            std::cell::RefCell::new(None);
    }

    /// A kleene killed between a command's spawn and its group's record left a running
    /// command no later kleene knew of (a resume went ahead beside it): no line of a recorded
    /// command runs before its record exists, however long that takes, with or without stdin.
    #[test]
    fn no_line_of_a_recorded_command_runs_before_its_record() {
        let d = dir();
        let records = GroupRecords::new(d.path().join("running"));
        BEFORE_RECORD.with(|hook| {
            *hook.borrow_mut() = Some(Box::new(|| thread::sleep(Duration::from_millis(300))));
        });
        let check = format!(
            "if [ -e '{}/'$$ ]; then echo recorded; else echo unrecorded; fi; cat",
            d.path().join("running").display()
        );
        for stdin in [None, Some(&b"the spec\nline two\n"[..])] {
            let mut i = inv(&check, d.path(), 60_000);
            i.records = Some((&records, "task t call 1".to_owned()));
            i.stdin = stdin;
            let done = run(&i, &Interrupt::default()).unwrap();
            assert!(done.success());
            let expected = format!(
                "recorded\n{}",
                std::str::from_utf8(stdin.unwrap_or_default()).unwrap()
            );
            assert_eq!(done.tail.stdout(), expected, "stdin {stdin:?}");
        }
        BEFORE_RECORD.with(|hook| *hook.borrow_mut() = None);
    }

    #[test]
    fn a_running_group_is_recorded_until_it_ends() {
        let d = dir();
        let records = GroupRecords::new(d.path().join("running"));
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (r, s) = (records.clone(), Arc::clone(&seen));
        let release = d.path().join("release");
        let r_release = release.clone();
        // The command runs until the watcher has seen its record, however slow its start.
        let watcher = thread::spawn(move || {
            let waiting = Instant::now();
            let mut live = r.live();
            while live.is_empty() && waiting.elapsed() < Duration::from_secs(30) {
                thread::sleep(Duration::from_millis(10));
                live = r.live();
            }
            *s.lock().unwrap() = live;
            std::fs::write(&r_release, "").unwrap();
        });
        let command = format!("while [ ! -e {} ]; do sleep 0.01; done", release.display());
        let mut i = inv(&command, d.path(), 60_000);
        i.records = Some((&records, "task t call 1".to_owned()));
        assert!(run(&i, &Interrupt::default()).unwrap().success());
        watcher.join().unwrap();
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert!(
            seen[0].label.starts_with("task t call 1: `while"),
            "{seen:?}"
        );
        assert!(records.live().is_empty());
    }

    /// A process whose first thread ended while another still runs shows that thread as a
    /// zombie: it was counted as gone, though its other thread could still write.
    #[test]
    fn a_process_whose_first_thread_ended_still_counts_while_another_runs() {
        // Python's main thread can end the way C's can, leaving the other thread running.
        let script = "import ctypes, threading, time\n\
                      threading.Thread(target=lambda: time.sleep(30)).start()\n\
                      ctypes.CDLL(None).pthread_exit(None)\n";
        let Ok(mut child) = Command::new("python3")
            .args(["-c", script])
            .process_group(0)
            .spawn()
        else {
            eprintln!("skipped: no python3 here");
            return;
        };
        let group = child.id().cast_signed();
        let stat = format!("/proc/{group}/stat");
        let waiting = Instant::now();
        let leader_gone = || runs_at(&stat) == Some(false);
        while !leader_gone() && waiting.elapsed() < Duration::from_secs(30) {
            thread::sleep(Duration::from_millis(10));
        }
        assert!(leader_gone(), "the first thread never ended");
        assert!(group_alive(group));
        signal_group(Pid::from_raw(group), Signal::SIGKILL);
        let _ = child.wait();
        assert!(!group_alive(group));
    }

    /// The init of another PID namespace, exiting, leaves the namespace quiet only once every
    /// other process there is gone or bound to die; of this process's own namespace, nothing
    /// is left behind an exiting process.
    #[test]
    fn another_namespace_runs_while_a_process_there_does() {
        let d = dir();
        let ready = d.path().join("ready");
        let script = format!("sleep 30 & sleep 30 & touch {}; wait", ready.display());
        let Ok(mut init) = Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child", "sh", "-c", &script])
            .spawn()
        else {
            eprintln!("skipped: no unshare here");
            return;
        };
        let waiting = Instant::now();
        while !ready.exists() && waiting.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = init.try_wait() {
                eprintln!("skipped: no PID namespace may be made here");
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
        assert!(
            ready.exists(),
            "the namespace's shell never started its children"
        );
        // `unshare` forks the shell, which is the namespace's init.
        let children =
            std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", init.id())).unwrap();
        let shell = children.split_whitespace().next().unwrap().to_owned();
        assert!(namespace_runs(&shell));
        assert!(!namespace_runs(&std::process::id().to_string()));
        // The kernel's list of a process's children may miss one while the list changes
        // (`touch` exiting beside the sleeps; proc(5) says it is not reliable then): every
        // look kills what it lists, so a sleep the first look missed is killed by the next.
        let kill_children = || {
            let listed = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
                .unwrap_or_default();
            for child in listed.split_whitespace().filter_map(|c| c.parse().ok()) {
                let _ = nix::sys::signal::kill(Pid::from_raw(child), Signal::SIGKILL);
            }
        };
        kill_children();
        // Killed, they are zombies until the shell reaps them: nothing of theirs runs.
        let waiting = Instant::now();
        while namespace_runs(&shell) && waiting.elapsed() < Duration::from_secs(30) {
            thread::sleep(Duration::from_millis(10));
            kill_children();
        }
        assert!(!namespace_runs(&shell));
        let _ = init.kill();
        let _ = init.wait();
    }

    #[test]
    fn a_record_of_a_dead_group_is_dropped() {
        let d = dir();
        let records = GroupRecords::new(d.path().join("running"));
        fs_write(&d.path().join("running"), "999999", "1\nold\n");
        assert!(records.live().is_empty());
        assert!(!d.path().join("running/999999").exists());
    }

    fn fs_write(dir: &Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(name), text).unwrap();
    }
}
