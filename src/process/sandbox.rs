//! Confines what a command may touch: it writes only the paths it was given, reads only those
//! and the system's and the user's toolchain directories, and, when asked, reaches no network.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use kleene::process::sandbox::{self, Sandbox};
//! use kleene::process::{self, Interrupt, Invocation};
//!
//! let stage = tempfile::tempdir()?;
//! let outside = tempfile::tempdir()?;
//! let sandbox = Sandbox::new().writing(stage.path());
//! let command = format!("echo ok > out.txt && echo no > {}/escape", outside.path().display());
//! let inv = Invocation {
//!     sandbox: Some(&sandbox),
//!     ..Invocation::new(&command, stage.path())
//! };
//! let done = process::run(&inv, &Interrupt::default())?;
//! if sandbox::mode() == sandbox::Mode::Landlock {
//!     // The write inside the stage happened, the one outside was denied and is named.
//!     assert!(stage.path().join("out.txt").exists() && !outside.path().join("escape").exists());
//!     assert!(!done.success());
//!     assert!(done.sandbox_denials()[0].contains("escape"));
//! }
//! # Ok(())
//! # }
//! ```
//!
//! A [`Sandbox`] is a description: the paths a command may write (with everything beneath
//! them), the paths it may read and execute beside the defaults, and whether it may use the
//! network. [`process::run`](super::run) applies it to the one command it starts: where the
//! kernel has Landlock (Linux 5.13 and later, enabled), a fresh thread restricts itself to the
//! description and starts the command, which inherits the restriction and can never shed it;
//! kleene's own threads stay free. Each command also gets a private temporary directory of
//! its own as `TMPDIR`, removed when it ends.
//!
//! What the defaults let a command read: the system's directories (`/usr`, `/bin`, `/lib*`,
//! `/etc`, `/opt`, `/proc`, `/sys`, `/dev`, `/run`, `/var/lib`), and the user's toolchain
//! directories that exist (`~/.cargo`, `~/.rustup`, `~/.pyenv`, `~/.local`, `~/.npm`,
//! `~/.nvm`, `~/.cache`, git's configuration, and the directories `CARGO_HOME`, `RUSTUP_HOME`,
//! `PYENV_ROOT`, `VIRTUAL_ENV`, `JAVA_HOME`, `GOROOT`, `GOPATH` name). Everything else, the
//! rest of the home directory and `/tmp` among it, is out of reach unless given, but for the
//! build tools' configuration files (`Cargo.toml`, `.cargo/config.toml`, `pyproject.toml`,
//! `pytest.ini`, `package.json`, …) in the directories above the command's own, which cargo
//! and pytest read as they look for a workspace or a root. A confined
//! command can also neither signal nor trace a process outside its sandbox (Landlock ABI 6).
//!
//! Where the kernel has no Landlock ([`mode`] says [`Mode::Unavailable`]) a command runs
//! unconfined: the caller decides whether that is acceptable, and kleene's CLI says so when a
//! run starts.
//!
//! A denial reaches the command as an ordinary `EACCES` ("Permission denied"), so a failed
//! command's output tail is read for such lines: [`Finished::sandbox_denials`] names each path
//! that lies outside what the command was given, and the justification a fixer reads says
//! how to declare it.
//!
//! [`Finished::sandbox_denials`]: super::Finished::sandbox_denials

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// What a confined command may touch beside the defaults (see the module's documentation).
///
/// Built once and handed by reference to every command that runs under it:
///
/// ```
/// use std::path::Path;
/// use kleene::process::sandbox::{Network, Sandbox};
///
/// let sandbox = Sandbox::new()
///     .writing("/work/stage")
///     .reading("/opt/sdk")
///     .without_network();
/// assert_eq!(sandbox.writes(), [Path::new("/work/stage")]);
/// assert_eq!(sandbox.network(), Network::Closed);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sandbox {
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    network: Network,
}

/// Whether a confined command may use the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Network {
    /// As unconfined commands do.
    #[default]
    Open,
    /// No TCP connection or listening socket, loopback included (Landlock ABI 4, Linux 6.7).
    Closed,
}

impl Sandbox {
    /// The defaults alone: read the system's and the toolchains' directories, write nothing
    /// but the private `TMPDIR`, network open.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same, also letting the command write (create, change, remove) `path` and
    /// everything beneath it. A file may be given: then only that file. A relative path is
    /// taken from the current directory, now.
    #[must_use]
    pub fn writing(mut self, path: impl Into<PathBuf>) -> Self {
        self.write.push(absolute(path.into()));
        self
    }

    /// The same, also letting the command read and execute `path` and everything beneath it
    /// (a relative path is taken from the current directory, now).
    #[must_use]
    pub fn reading(mut self, path: impl Into<PathBuf>) -> Self {
        self.read.push(absolute(path.into()));
        self
    }

    /// The same, with the network cut: no TCP connection and no listening socket.
    #[must_use]
    pub fn without_network(mut self) -> Self {
        self.network = Network::Closed;
        self
    }

    /// The paths given to write, in the order given.
    pub fn writes(&self) -> &[PathBuf] {
        &self.write
    }

    /// The paths given to read beside the defaults, in the order given.
    pub fn reads(&self) -> &[PathBuf] {
        &self.read
    }

    /// Whether the network is open.
    pub fn network(&self) -> Network {
        self.network
    }

    /// What the lines of a failed command's output that say a path was denied name: each
    /// path outside what the sandbox gives, with whether it may read it (so a fixer knows what
    /// to declare). Empty when none is found.
    pub(crate) fn denials(&self, output: &str, dir: &Path) -> Vec<String> {
        let mut found = Vec::new();
        let lines: Vec<&str> = output.lines().map(str::trim).collect();
        for (i, line) in lines.iter().enumerate() {
            if !(line.contains("Permission denied") || line.contains("Operation not permitted")) {
                continue;
            }
            // cargo names what it failed on a few lines above the cause; a denied connection
            // names no path at all.
            let denied = denied_path(line, dir).or_else(|| match self.network {
                Network::Open => paths_in(&lines[i.saturating_sub(3)..i].join(" "), dir).pop(),
                Network::Closed => None,
            });
            let said = match denied {
                // A path the command may write was refused by its own permissions.
                Some(path) if self.write.iter().any(|w| path.starts_with(w)) => continue,
                Some(path) if self.may_read(&path) => format!(
                    "write to {} denied by the sandbox (the command may read it, not write it)",
                    path.display()
                ),
                Some(path) => format!(
                    "{} denied by the sandbox (outside what the command may read or write)",
                    path.display()
                ),
                None if self.network == Network::Closed => {
                    format!("denied (the network is cut for this command): {line}")
                }
                None => format!("denied: {line}"),
            };
            if !found.contains(&said) {
                found.push(said);
            }
            if found.len() == MAX_DENIALS {
                break;
            }
        }
        found
    }

    fn may_read(&self, path: &Path) -> bool {
        self.read
            .iter()
            .chain(default_reads().iter().map(|(path, _)| path))
            .any(|r| path.starts_with(r))
    }

    /// The description as it crosses to a contained host.
    pub(crate) fn to_wire(&self) -> SandboxWire {
        use std::os::unix::ffi::OsStrExt;
        let bytes = |paths: &[PathBuf]| {
            paths
                .iter()
                .map(|p| p.as_os_str().as_bytes().to_vec())
                .collect()
        };
        SandboxWire {
            read: bytes(&self.read),
            write: bytes(&self.write),
            network: self.network == Network::Open,
        }
    }
}

fn absolute(path: PathBuf) -> PathBuf {
    std::path::absolute(&path).unwrap_or(path)
}

/// What surrounds a path in a tool's message (GNU tools quote with `‘’`).
const QUOTES: &str = "'\"`‘’“”:,()[]{}";

/// How many denied lines a failed command's justification names at most.
const MAX_DENIALS: usize = 8;

/// A [`Sandbox`] as a contained host reads it (paths as bytes: they need not be UTF-8).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SandboxWire {
    read: Vec<Vec<u8>>,
    write: Vec<Vec<u8>>,
    network: bool,
}

impl SandboxWire {
    pub(crate) fn into_sandbox(self) -> Sandbox {
        use std::os::unix::ffi::OsStringExt;
        let paths = |paths: Vec<Vec<u8>>| {
            paths
                .into_iter()
                .map(|p| PathBuf::from(std::ffi::OsString::from_vec(p)))
                .collect()
        };
        Sandbox {
            read: paths(self.read),
            write: paths(self.write),
            network: if self.network {
                Network::Open
            } else {
                Network::Closed
            },
        }
    }
}

/// The path a line saying "Permission denied" names as denied: the last one before those
/// words (`sh: 1: cannot create /tmp/x: Permission denied`), else the first after them
/// (`PermissionError: [Errno 13] Permission denied: '/tmp/x'`).
fn denied_path(line: &str, dir: &Path) -> Option<PathBuf> {
    let marker = ["Permission denied", "Operation not permitted"]
        .iter()
        .filter_map(|m| line.find(m).map(|at| (at, m.len())))
        .min()?;
    let (before, after) = (&line[..marker.0], &line[marker.0 + marker.1..]);
    // `cat: seen: Permission denied`: the last word before the words, when it names a file.
    let last_word = before
        .rsplit(|c: char| c.is_whitespace() || QUOTES.contains(c))
        .find(|w| !w.is_empty())
        .map(|w| dir.join(w))
        .filter(|p| p.symlink_metadata().is_ok())
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p));
    paths_in(before, dir)
        .pop()
        .or(last_word)
        .or_else(|| paths_in(after, dir).into_iter().next())
}

/// The absolute paths a line of output names (`/tmp/x`, `'../run.json'`), relative ones
/// resolved against the command's directory.
fn paths_in(line: &str, dir: &Path) -> Vec<PathBuf> {
    line.split(|c: char| c.is_whitespace() || QUOTES.contains(c))
        .filter(|word| word.contains('/') && !word.contains("://"))
        .map(|word| {
            let path = lexically_normal(&dir.join(word));
            // A symlink is denied for what it leads to.
            std::fs::canonicalize(&path).unwrap_or(path)
        })
        .collect()
}

/// `path` with `.` and `..` taken away by its words alone (a denied path may not exist).
fn lexically_normal(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// How commands are confined on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// Landlock: writes, reads and (at ABI 4 and later) the network are confined.
    Landlock,
    /// Neither Landlock nor any other confinement is available: commands run as the user runs
    /// them, and can write anywhere the user can.
    Unavailable,
}

impl Mode {
    /// A word for messages and `--json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Landlock => "landlock",
            Mode::Unavailable => "none",
        }
    }
}

/// How commands given a [`Sandbox`] are confined on this machine (probed once).
pub fn mode() -> Mode {
    if landlock_abi() > 0 {
        Mode::Landlock
    } else {
        Mode::Unavailable
    }
}

/// The kernel's Landlock ABI version as this build can use it (0: none).
pub fn landlock_abi() -> u8 {
    static ABI: OnceLock<u8> = OnceLock::new();
    *ABI.get_or_init(imp::probe)
}

/// Why a command could not be confined as its sandbox says; it was not started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// A path the sandbox gives does not exist (Landlock grants existing files only).
    #[error("the sandbox gives {}, which does not exist: create it first", path.display())]
    MissingPath {
        /// The path.
        path: PathBuf,
    },
    /// The network was to be cut, and the kernel's Landlock cannot (it needs ABI 4).
    #[error(
        "the network cannot be cut here: Landlock ABI {abi} has no network rules (ABI 4, Linux 6.7)"
    )]
    NetworkUnsupported {
        /// The kernel's ABI.
        abi: u8,
    },
    /// The kernel refused the rules.
    #[error("confine the command with Landlock: {message}")]
    Landlock {
        /// What the kernel or the crate said.
        message: String,
    },
    /// The private temporary directory could not be made.
    #[error("make the command's private temporary directory in {}", dir.display())]
    TempDir {
        /// Where it was to be made.
        dir: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// The system's and the toolchains' directories every confined command may read, opened
/// once, each with whether it is a file.
fn default_reads() -> &'static [(PathBuf, bool)] {
    static READS: OnceLock<Vec<(PathBuf, bool)>> = OnceLock::new();
    READS.get_or_init(|| {
        let mut paths: Vec<PathBuf> = SYSTEM_READS.iter().map(PathBuf::from).collect();
        for var in TOOLCHAIN_VARS {
            if let Some(value) = std::env::var_os(var).filter(|v| !v.is_empty()) {
                let path = PathBuf::from(value);
                // A relative value would name the command's own directory.
                if path.is_absolute() {
                    paths.push(path);
                }
            }
        }
        if let Some(home) = std::env::var_os("HOME").map(PathBuf::from)
            && home.is_absolute()
        {
            paths.extend(HOME_READS.iter().map(|name| home.join(name)));
        }
        paths.sort();
        paths.dedup();
        paths
            .into_iter()
            .filter_map(|path| {
                let meta = std::fs::metadata(&path).ok()?;
                Some((path, meta.is_file()))
            })
            .collect()
    })
}

const SYSTEM_READS: [&str; 15] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc",
    "/sys", "/dev", "/run", "/var/lib", "/nix",
];

const TOOLCHAIN_VARS: [&str; 11] = [
    "CARGO_HOME",
    "RUSTUP_HOME",
    "PYENV_ROOT",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "NVM_DIR",
    "JAVA_HOME",
    "GOROOT",
    "GOPATH",
    "PIP_CACHE_DIR",
    "npm_config_cache",
];

const HOME_READS: [&str; 14] = [
    ".cargo",
    ".rustup",
    ".pyenv",
    ".local",
    ".npm",
    ".npmrc",
    ".nvm",
    ".cache",
    ".gitconfig",
    ".config/git",
    ".config/pip",
    ".m2",
    ".gradle",
    "go",
];

/// The devices every confined command may write (its output, the usual sinks and sources).
const DEVICES: [&str; 8] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// A private temporary directory for one command at a time, removed when dropped.
///
/// A thread keeps one for the commands it runs ([`PrivateTmp::give_back`] keeps it,
/// [`PrivateTmp::take`] empties it for the next): making and removing a directory costs a
/// disk's journal twice a command, emptying an empty one a single read.
#[derive(Debug)]
pub(crate) struct PrivateTmp {
    path: PathBuf,
}

thread_local! {
    static KEPT_TMP: std::cell::RefCell<Option<PrivateTmp>> = const { std::cell::RefCell::new(None) };
}

impl PrivateTmp {
    /// This thread's temporary directory, emptied of what its last command left (by now
    /// everything that command started is gone), or a new one.
    pub(crate) fn take() -> Result<Self, SandboxError> {
        match KEPT_TMP.with(|kept| kept.borrow_mut().take()) {
            Some(tmp) if tmp.emptied() => Ok(tmp),
            // One that cannot be emptied is removed whole as it is dropped.
            _ => Self::make(),
        }
    }

    /// Keeps the directory for this thread's next command.
    pub(crate) fn give_back(self) {
        KEPT_TMP.with(|kept| *kept.borrow_mut() = Some(self));
    }

    fn emptied(&self) -> bool {
        std::fs::read_dir(&self.path).is_ok_and(|entries| {
            entries.into_iter().all(|entry| {
                entry.is_ok_and(|entry| {
                    let path = entry.path();
                    match entry.file_type() {
                        Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path).is_ok(),
                        Ok(_) => std::fs::remove_file(&path).is_ok(),
                        Err(_) => false,
                    }
                })
            })
        })
    }

    fn make() -> Result<Self, SandboxError> {
        use std::os::unix::fs::DirBuilderExt;
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        // A thread's directory goes with the thread, but not with a process that exits
        // (the main thread's stays): what ended processes left is removed here, once a
        // process.
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(|| sweep_ended(&base));
        let mut last = None;
        for _ in 0..16 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let path = base.join(format!("{TMP_PREFIX}{}-{n}-{nanos:x}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(Self { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(source) => return Err(SandboxError::TempDir { dir: base, source }),
            }
        }
        Err(SandboxError::TempDir {
            dir: base,
            source: last.unwrap_or_else(|| std::io::Error::other("no free name")),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// Removes the temporary directories in `base` that processes no longer running made.
fn sweep_ended(base: &Path) {
    for left in super::left_by_ended_processes(base, TMP_PREFIX) {
        let _ = std::fs::remove_dir_all(left);
    }
}

/// How every command's private temporary directory is named: `kleene-call-PID-N-NANOS`.
const TMP_PREFIX: &str = "kleene-call-";

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The build tools' configuration files in the directories above `dir` (not `dir` itself),
/// which cargo, rustup, pytest and npm read as they look for a workspace or a root: a confined
/// command may read these, or its tools fail on a file they were denied. Looked up once per
/// parent directory (a run's stages share theirs).
fn ancestor_configs(dir: &Path) -> Vec<PathBuf> {
    use std::collections::HashMap;
    use std::sync::{Mutex, PoisonError};
    static FOUND: OnceLock<Mutex<HashMap<PathBuf, Vec<PathBuf>>>> = OnceLock::new();
    let Some(parent) = dir.parent() else {
        return Vec::new();
    };
    let found = FOUND.get_or_init(Mutex::default);
    if let Some(known) = found
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(parent)
    {
        return known.clone();
    }
    let configs: Vec<PathBuf> = parent
        .ancestors()
        .flat_map(|a| ANCESTOR_CONFIGS.iter().map(move |name| a.join(name)))
        .filter(|path| std::fs::metadata(path).is_ok_and(|m| m.is_file()))
        .collect();
    let mut found = found.lock().unwrap_or_else(PoisonError::into_inner);
    // Bounded: a long-lived process that confines commands in ever new directories keeps
    // only the latest few.
    if found.len() >= 64 {
        found.clear();
    }
    found.insert(parent.to_owned(), configs.clone());
    configs
}

const ANCESTOR_CONFIGS: [&str; 12] = [
    "Cargo.toml",
    ".cargo/config.toml",
    ".cargo/config",
    "rust-toolchain.toml",
    "rust-toolchain",
    "pyproject.toml",
    "setup.cfg",
    "tox.ini",
    "pytest.ini",
    "package.json",
    ".npmrc",
    ".editorconfig",
];

/// Starts `start` on a fresh thread confined to `sandbox` plus `extra_writes` (the private
/// temporary directory, a cgroup's file) for a command in `dir`, so that what it starts
/// inherits the confinement and this thread stays free.
pub(crate) fn confined<T: Send>(
    sandbox: &Sandbox,
    dir: &Path,
    extra_writes: &[&Path],
    start: impl FnOnce() -> std::io::Result<T> + Send,
) -> Result<std::io::Result<T>, SandboxError> {
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_owned());
    let configs = ancestor_configs(&dir);
    std::thread::scope(|scope| {
        let thread = scope.spawn(|| {
            imp::restrict_this_thread(sandbox, &configs, extra_writes)?;
            Ok(start())
        });
        thread.join().unwrap_or_else(|_| {
            Err(SandboxError::Landlock {
                message: "the thread that confines the command panicked".to_owned(),
            })
        })
    })
}

#[cfg(target_os = "linux")]
mod imp {
    use std::collections::HashMap;
    use std::path::{Path, PathBuf};
    use std::sync::{Mutex, PoisonError};

    use landlock::{
        ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus,
        PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr,
        RulesetStatus, Scope,
    };

    use super::{DEVICES, Network, Sandbox, SandboxError, default_reads};

    /// The newest ABI this code was written and tested against.
    const TARGET: ABI = ABI::V6;

    /// Restricts a throwaway thread to nothing in particular and reads the kernel's answer:
    /// the crate tells the kernel's ABI only through a restriction's status.
    pub(super) fn probe() -> u8 {
        let probe = std::thread::spawn(|| {
            let status = Ruleset::default()
                .set_compatibility(CompatLevel::BestEffort)
                .handle_access(AccessFs::Execute)
                .ok()?
                .create()
                .ok()?
                .restrict_self()
                .ok()?;
            match status.landlock {
                LandlockStatus::Available { effective_abi, .. } => Some(effective_abi as u8),
                _ => None,
            }
        });
        probe.join().ok().flatten().unwrap_or(0)
    }

    fn landlock(e: impl std::fmt::Display) -> SandboxError {
        SandboxError::Landlock {
            message: e.to_string(),
        }
    }

    /// The grants every confined command gets, opened once per process: the system's and
    /// toolchains' directories to read, and the devices to read and write. A call then costs
    /// one rule each, not an open, a stat and a close.
    fn default_grants() -> &'static [(PathFd, BitFlags<AccessFs>)] {
        static GRANTS: std::sync::OnceLock<Vec<(PathFd, BitFlags<AccessFs>)>> =
            std::sync::OnceLock::new();
        GRANTS.get_or_init(|| {
            let read = AccessFs::from_read(TARGET);
            let device = read | AccessFs::WriteFile | AccessFs::IoctlDev;
            let devices = DEVICES.iter().filter_map(|device_path| {
                let meta = std::fs::metadata(device_path).ok()?;
                Some((Path::new(device_path).to_owned(), !meta.is_dir(), device))
            });
            default_reads()
                .iter()
                .map(|(path, is_file)| (path.clone(), *is_file, read))
                .chain(devices)
                .filter_map(|(path, is_file, access)| {
                    let fd = PathFd::new(&path).ok()?;
                    Some((fd, masked(is_file, access)))
                })
                .collect()
        })
    }

    /// `access` as a rule on a file may carry it: a directory's rights are refused there.
    fn masked(is_file: bool, access: BitFlags<AccessFs>) -> BitFlags<AccessFs> {
        if is_file {
            access & AccessFs::from_file(TARGET)
        } else {
            access
        }
    }

    /// A rule giving `access` beneath `path`, which must exist.
    fn rule(path: &Path, access: BitFlags<AccessFs>) -> Result<PathBeneath<PathFd>, SandboxError> {
        let missing = || SandboxError::MissingPath {
            path: path.to_owned(),
        };
        let fd = PathFd::new(path).map_err(|_| missing())?;
        let is_file = rustix::fs::fstat(&fd)
            .map(|st| {
                rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Directory
            })
            .map_err(|_| missing())?;
        Ok(PathBeneath::new(fd, masked(is_file, access)))
    }

    /// A ruleset built for a set of grants, kept with the files its paths named when it was
    /// built: the same grants (a slot's stage, cache and temporary directory) cost one
    /// `stat` a path and one restriction, not a rule each (a system call apiece).
    struct Built {
        ruleset: RulesetCreated,
        files: Vec<Option<(u64, u64)>>,
    }

    /// What a ruleset was built for: the paths given to read, the configuration files, the
    /// paths to write, and whether the network is open.
    type Grants = (Vec<PathBuf>, Vec<PathBuf>, Vec<PathBuf>, bool);

    /// The built rulesets, by the grants they were built for (at most [`KEPT_RULESETS`]).
    fn built() -> &'static Mutex<HashMap<Grants, Built>> {
        static BUILT: std::sync::OnceLock<Mutex<HashMap<Grants, Built>>> =
            std::sync::OnceLock::new();
        BUILT.get_or_init(Mutex::default)
    }

    const KEPT_RULESETS: usize = 64;

    /// The device and inode each path names now (`None`: it names nothing).
    fn files<'p>(paths: impl Iterator<Item = &'p PathBuf>) -> Vec<Option<(u64, u64)>> {
        paths
            .map(|p| {
                use std::os::unix::fs::MetadataExt;
                std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
            })
            .collect()
    }

    pub(super) fn restrict_this_thread(
        sandbox: &Sandbox,
        configs: &[PathBuf],
        extra_writes: &[&Path],
    ) -> Result<(), SandboxError> {
        let abi = super::landlock_abi();
        if sandbox.network == Network::Closed && abi < 4 {
            return Err(SandboxError::NetworkUnsupported { abi });
        }
        let writes: Vec<PathBuf> = sandbox
            .write
            .iter()
            .cloned()
            .chain(extra_writes.iter().map(|p| p.to_path_buf()))
            .collect();
        let now = files(sandbox.read.iter().chain(configs).chain(&writes));
        let grants = (
            sandbox.read.clone(),
            configs.to_vec(),
            writes,
            sandbox.network == Network::Open,
        );
        let kept = {
            let built = built().lock().unwrap_or_else(PoisonError::into_inner);
            built
                .get(&grants)
                .filter(|b| b.files == now)
                .and_then(|b| b.ruleset.try_clone().ok())
        };
        let ruleset = match kept {
            Some(ruleset) => ruleset,
            None => {
                let ruleset = build(sandbox, configs, extra_writes)?;
                // Kept only when every path named a file: a missing configuration file
                // would be looked for again at every call.
                if now.iter().all(Option::is_some)
                    && let Ok(copy) = ruleset.try_clone()
                {
                    let mut built = built().lock().unwrap_or_else(PoisonError::into_inner);
                    if built.len() >= KEPT_RULESETS {
                        built.clear();
                    }
                    built.insert(
                        grants,
                        Built {
                            ruleset: copy,
                            files: now,
                        },
                    );
                }
                ruleset
            }
        };
        let status = ruleset.restrict_self().map_err(landlock)?;
        match status.ruleset {
            RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced => Ok(()),
            RulesetStatus::NotEnforced => Err(SandboxError::Landlock {
                message: "the kernel enforced none of the rules".to_owned(),
            }),
        }
    }

    /// The ruleset of `sandbox`'s grants, beside the defaults.
    fn build(
        sandbox: &Sandbox,
        configs: &[PathBuf],
        extra_writes: &[&Path],
    ) -> Result<RulesetCreated, SandboxError> {
        let read = AccessFs::from_read(TARGET);
        let all = AccessFs::from_all(TARGET);
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(all)
            .map_err(landlock)?
            .scope(Scope::from_all(TARGET))
            .map_err(landlock)?;
        if sandbox.network == Network::Closed {
            ruleset = ruleset
                .handle_access(AccessNet::from_all(TARGET))
                .map_err(landlock)?;
        }
        let mut created = ruleset.create().map_err(landlock)?;
        for (fd, access) in default_grants() {
            created = created
                .add_rule(PathBeneath::new(fd, *access))
                .map_err(landlock)?;
        }
        for path in configs {
            // A configuration file gone since it was looked up is simply not given.
            if let Ok(rule) = rule(path, AccessFs::ReadFile.into()) {
                created = created.add_rule(rule).map_err(landlock)?;
            }
        }
        for path in &sandbox.read {
            created = created.add_rule(rule(path, read)?).map_err(landlock)?;
        }
        for path in sandbox
            .write
            .iter()
            .map(PathBuf::as_path)
            .chain(extra_writes.iter().copied())
        {
            created = created.add_rule(rule(path, all)?).map_err(landlock)?;
        }
        Ok(created)
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::path::Path;

    use super::{Sandbox, SandboxError};

    pub(super) fn probe() -> u8 {
        0
    }

    pub(super) fn restrict_this_thread(
        _: &Sandbox,
        _: &[std::path::PathBuf],
        _: &[&Path],
    ) -> Result<(), SandboxError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denied_path_outside_the_sandbox_is_named_and_one_it_may_write_is_not() {
        let sandbox = Sandbox::new().writing("/work/stage");
        let out = "sh: 1: cannot create /tmp/escape: Permission denied\n\
                   cat: ../state/run.json: Permission denied\n\
                   rm: cannot remove 'own.txt': Permission denied\n\
                   all good\n";
        let denials = sandbox.denials(out, Path::new("/work/stage"));
        assert_eq!(denials.len(), 2, "{denials:?}");
        assert_eq!(
            denials[0],
            "/tmp/escape denied by the sandbox (outside what the command may read or write)"
        );
        assert!(denials[1].starts_with("/work/state/run.json denied"));
    }

    #[test]
    fn each_tool_s_way_of_saying_it_names_the_path() {
        let sandbox = Sandbox::new().writing("/s");
        let dir = Path::new("/s");
        let cases = [
            (
                "mkdir: cannot create directory ‘../x’: Permission denied",
                "/x",
            ),
            (
                "PermissionError: [Errno 13] Permission denied: '/home/u/key'",
                "/home/u/key",
            ),
            (
                "error: failed to read `/p/Cargo.toml`\n\nCaused by:\n  Permission denied (os error 13)",
                "/p/Cargo.toml",
            ),
        ];
        for (output, path) in cases {
            let denials = sandbox.denials(output, dir);
            assert_eq!(denials.len(), 1, "{output}: {denials:?}");
            assert!(
                denials[0].starts_with(&format!("{path} denied")),
                "{denials:?}"
            );
        }
        let read = sandbox.denials("sh: 1: cannot create /usr/x: Permission denied", dir);
        assert!(read[0].starts_with("write to /usr/x denied"), "{read:?}");
    }

    /// A slot's stage removed and made again at the same path is a new directory: the
    /// ruleset built for the old one must not be the one that confines the next command.
    #[test]
    fn a_directory_made_again_at_its_path_is_given_again() {
        if mode() != Mode::Landlock {
            return;
        }
        let run = |dir: &Path, sandbox: &Sandbox| {
            let inv = super::super::Invocation {
                sandbox: Some(sandbox),
                ..super::super::Invocation::new("echo x > f", dir)
            };
            super::super::run(&inv, &super::super::Interrupt::default())
                .unwrap()
                .success()
        };
        let root = tempfile::tempdir().unwrap();
        let stage = root.path().join("stage");
        let other = root.path().join("other");
        std::fs::create_dir(&stage).unwrap();
        std::fs::create_dir(&other).unwrap();
        let sandbox = Sandbox::new().writing(&stage);
        assert!(run(&stage, &sandbox));
        std::fs::remove_dir_all(&stage).unwrap();
        std::fs::create_dir(&stage).unwrap();
        assert!(
            run(&stage, &sandbox),
            "the new directory at the old path was refused"
        );
        // The same sandbox never writes elsewhere, the kept ruleset notwithstanding.
        assert!(!run(&other, &sandbox));
        assert!(run(&other, &Sandbox::new().writing(&other)));
    }

    #[test]
    fn a_denial_without_a_path_names_the_cut_network() {
        let sandbox = Sandbox::new().without_network();
        let denials = sandbox.denials(
            "curl: (7) Failed to connect: Permission denied",
            Path::new("/"),
        );
        assert!(denials[0].contains("network is cut"), "{denials:?}");
    }

    #[test]
    fn a_description_crosses_to_the_host_unchanged() {
        let sandbox = Sandbox::new().writing("/a").reading("/b").without_network();
        let json = serde_json::to_string(&sandbox.to_wire()).unwrap();
        let back: SandboxWire = serde_json::from_str(&json).unwrap();
        assert_eq!(back.into_sandbox(), sandbox);
    }

    #[test]
    fn a_private_tmp_is_made_apart_kept_empty_and_removed() {
        let a = PrivateTmp::take().unwrap();
        let b = PrivateTmp::take().unwrap();
        assert_ne!(a.path(), b.path());
        std::fs::create_dir(a.path().join("d")).unwrap();
        std::fs::write(a.path().join("d/x"), b"x").unwrap();
        std::fs::write(a.path().join("x"), b"x").unwrap();
        let path = a.path().to_owned();
        a.give_back();
        // What the last command left is gone when the next takes it.
        let again = PrivateTmp::take().unwrap();
        assert_eq!(again.path(), path);
        assert_eq!(std::fs::read_dir(&path).unwrap().count(), 0);
        drop(again);
        assert!(!path.exists());
        drop(b);
    }
}
