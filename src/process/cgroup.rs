//! A cgroup of its own for each command where there is no PID namespace but a writable
//! cgroup v2 hierarchy: when the command ends, `cgroup.kill` stops everything it started,
//! including processes that called `setsid` to leave its process group, so nothing it started
//! outlives its call and the call's stage is quiet when it is judged.
//!
//! The command's shell moves itself into the cgroup (`echo $$ > cgroup.procs`) before it runs
//! the command, so even its first child starts inside; std offers no safe way to place a child
//! in a cgroup at spawn.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// The environment variable naming the `cgroup.procs` file the command's shell enters.
pub(crate) const PROCS_VAR: &str = "KLEENE_CGROUP_PROCS";

/// What the shell prints when it cannot enter its cgroup (then it exits 125 before running
/// anything of the command).
pub(crate) const ENTER_FAILED: &str = "kleene: cannot enter the cgroup made for the command";

/// Whether cgroups may be used in this process at all (off inside a contained host, and
/// when the user asks for process groups only).
static ALLOWED: AtomicBool = AtomicBool::new(true);

/// Turns cgroup containment off for this process (`KLEENE_CONTAINMENT=process-group`, and a
/// contained host, which has its PID namespace). Call before the first command runs.
pub fn disable_cgroups() {
    ALLOWED.store(false, Ordering::SeqCst);
}

/// The cgroup this process's commands' cgroups are made in (its own), probed once: `None`
/// where cgroup v2 is not mounted, not writable here, or has no `cgroup.kill` (Linux before
/// 5.14).
fn base() -> Option<&'static Path> {
    static BASE: OnceLock<Option<PathBuf>> = OnceLock::new();
    if !ALLOWED.load(Ordering::SeqCst) {
        return None;
    }
    BASE.get_or_init(probe).as_deref()
}

fn probe() -> Option<PathBuf> {
    let mount = cgroup2_mount()?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let base = mount.join(path.trim_start_matches('/'));
    let probe = base.join(format!("kleene-{}-probe", std::process::id()));
    let _ = std::fs::remove_dir(&probe);
    std::fs::create_dir(&probe).ok()?;
    let works = probe.join("cgroup.kill").exists();
    let _ = std::fs::remove_dir(&probe);
    if works {
        remove_stale(&base);
    }
    works.then_some(base)
}

/// Removes the empty cgroups that processes no longer alive kept for their next commands (a
/// library user that never called [`release_cgroups`]); one still holding a process cannot be
/// removed and stays.
fn remove_stale(base: &Path) {
    for left in super::left_by_ended_processes(base, "kleene-") {
        let _ = std::fs::remove_dir(left);
    }
}

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified`
/// on a hybrid system).
fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mounts.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let fstype = right.split_whitespace().next()?;
        (fstype == "cgroup2").then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
    })
}

/// Whether commands of this process run in cgroups of their own.
pub(crate) fn available() -> bool {
    base().is_some()
}

/// Empty cgroups of this process, kept for the next command: making and removing a cgroup
/// costs more than the command's whole containment otherwise (an RCU grace period or two).
static SPARE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Removes the empty cgroups this process keeps for its next commands (call before it
/// exits; the `kleene` binary does). A cgroup still in use is left alone.
pub fn release_cgroups() {
    let spare = std::mem::take(&mut *SPARE.lock().unwrap_or_else(PoisonError::into_inner));
    for dir in spare {
        let _ = std::fs::remove_dir(&dir);
    }
}

/// One command's cgroup: empty when the command starts, killed when it ends, then kept for
/// the next command if it is empty again (removed otherwise, when it can be).
#[derive(Debug)]
pub(crate) struct CallCgroup {
    dir: PathBuf,
    /// Whether the last kill left it empty, so a later command may reuse it.
    empty: AtomicBool,
}

impl CallCgroup {
    /// An empty cgroup for one command, or `None` where cgroups are not available.
    pub(crate) fn make() -> Option<Self> {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let base = base()?;
        let spare = SPARE.lock().unwrap_or_else(PoisonError::into_inner).pop();
        let dir = match spare {
            Some(dir) => dir,
            None => {
                let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
                let dir = base.join(format!("kleene-{}-{serial}", std::process::id()));
                std::fs::create_dir(&dir).ok()?;
                dir
            }
        };
        Some(Self {
            dir,
            empty: AtomicBool::new(false),
        })
    }

    /// The cgroup's directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The `cgroup.procs` file the command's shell writes its pid to.
    pub(crate) fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Kills every process in the cgroup and waits (at most a few seconds) until none is
    /// left; true when the cgroup is empty.
    pub(crate) fn kill_all(&self) -> bool {
        // Unreadable counts as populated: this process's own cgroup is reused only when it
        // is known to be empty.
        let emptied = kill_until_empty(&self.dir, |dir| populated(dir).unwrap_or(true));
        if emptied {
            self.empty.store(true, Ordering::SeqCst);
        }
        emptied
    }
}

/// Whether the cgroup at `dir` holds a process, by its `cgroup.events`; `None` when that
/// cannot be read.
fn populated(dir: &Path) -> Option<bool> {
    std::fs::read_to_string(dir.join("cgroup.events"))
        .ok()
        .map(|events| events.lines().any(|l| l.trim() == "populated 1"))
}

/// Writes `cgroup.kill` of the cgroup at `dir`, then waits (at most a few seconds) until
/// `is_populated` says it is empty; true when it is.
fn kill_until_empty(dir: &Path, is_populated: impl Fn(&Path) -> bool) -> bool {
    if let Ok(mut kill) = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.kill"))
    {
        let _ = kill.write_all(b"1");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if !is_populated(dir) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether the cgroup at `dir`, recorded by an earlier kleene, still holds a process (one
/// that is gone, or unreadable, holds none that kleene could stop).
pub(crate) fn populated_at(dir: &Path) -> bool {
    populated(dir).unwrap_or(false)
}

/// Kills every process in the cgroup at `dir`, recorded by an earlier kleene, and removes it
/// once it is empty (best effort: a cgroup that does not empty in time stays).
pub(crate) fn kill_at(dir: &Path) {
    if kill_until_empty(dir, populated_at) {
        let _ = std::fs::remove_dir(dir);
    }
}

impl Drop for CallCgroup {
    fn drop(&mut self) {
        if *self.empty.get_mut() {
            SPARE
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(std::mem::take(&mut self.dir));
        } else {
            // Only an empty cgroup can be removed; one that is not stays for a later kleene
            // to find (its processes are recorded as the call's process group too).
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

/// The shell text that moves the command's shell into its cgroup, then runs `command`, on
/// the same line so the command's own lines keep their numbers.
pub(crate) fn entering(command: &str) -> String {
    format!(
        "echo $$ > \"${PROCS_VAR}\" 2>/dev/null || {{ echo '{ENTER_FAILED}' >&2; exit 125; }}; unset {PROCS_VAR}; {command}"
    )
}
