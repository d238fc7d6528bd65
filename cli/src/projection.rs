//! Writes a run's accepted files into its workspace, for people to look at: only accepted
//! outputs ever reach it, and nothing is written through a link.
//!
//! ```text
//! project(&evidence, Path::new(".kleene/workspace"))?;   // every accepted file, in place
//! ```
//!
//! A file that already holds the accepted bytes is left alone. A file that exists is replaced
//! whole (a temporary file beside it, then a rename), a new one is written in place; neither
//! is synced one by one: the journal, not the
//! workspace, is the authority, and one sync of the file system below makes the whole
//! projection durable at the cost of one flush instead of one per file.
//!
//! Every step is taken relative to an open directory (`openat`, `renameat`), never by a path
//! from the root: a directory is opened once for all the files it receives, and a link
//! planted anywhere below the workspace is refused, not followed, whoever planted it and
//! whenever.
//!
//! A directory the workspace lacks is moved whole from the run's last stage when that stage
//! holds exactly the accepted files below it (checked byte for byte, each a file of its own):
//! one rename instead of a file written per accepted file, and nothing left for the stage's
//! removal. That is only done where every process a call started is gone before the call is
//! judged, so nothing can write a stage after its check.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use kleene::batch::BatchEvidence;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

/// Writes every accepted file of `evidence` below `workspace` (which must exist).
///
/// `stages` are the run's last stages, which no command can still write (every process a
/// call started was killed before it was judged): a directory the workspace lacks, that one
/// of them holds with exactly the accepted files below it (each a file of its own, not a
/// link to the object store, holding the accepted bytes), is moved whole into the workspace
/// instead of being written file by file. Pass none where commands can outlive their calls.
///
/// # Errors
///
/// A message naming the path, at the first file that could not be written (a link or a file
/// where a directory must be, a link where the file must be, an I/O failure); the files
/// before it are written.
pub fn project(
    evidence: &BatchEvidence,
    workspace: &Path,
    stages: &[PathBuf],
) -> Result<(), String> {
    let root = rustix::fs::open(
        workspace,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("open {}: {e}", workspace.display()))?;
    let tree = Tree::of_accepted(evidence);
    // A stage on another file system cannot be renamed from: not worth checking.
    let device = rustix::fs::fstat(&root).map(|st| st.st_dev).ok();
    let stages: Vec<OwnedFd> = stages
        .iter()
        .filter_map(|stage| rustix::fs::open(stage, DIRECTORY, Mode::empty()).ok())
        .filter(|stage| rustix::fs::fstat(stage).map(|st| st.st_dev).ok() == device)
        .collect();
    let mut projection = Projection {
        workspace,
        modes: Modes::of_this_process(),
        wrote: false,
    };
    projection.dir(&root, "", &tree, &stages)?;
    if projection.wrote {
        rustix::fs::syncfs(&root).map_err(|e| format!("sync {}: {e}", workspace.display()))?;
    }
    Ok(())
}

/// What a workspace holds otherwise than accepted ([`differences`]).
#[derive(Debug, Default)]
pub struct Differences {
    /// Accepted files (or directories of them) that are not there: never written (a run
    /// stopped before its workspace was), or removed.
    pub missing: Vec<String>,
    /// Accepted files that are there otherwise: a link, not a regular file, other bytes, or
    /// unreadable; each with what is wrong.
    pub changed: Vec<String>,
}

/// Every accepted file of `evidence` that `workspace` does not hold as accepted, in path
/// order; nothing is written. A workspace that does not exist (never written, or removed
/// whole) has nothing missing or changed; one that cannot be opened is the one change.
pub fn differences(evidence: &BatchEvidence, workspace: &Path) -> Differences {
    let mut found = Differences::default();
    let root = match rustix::fs::open(
        workspace,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(root) => root,
        Err(Errno::NOENT) => return found,
        Err(e) => {
            found.changed.push(format!("{}: {e}", workspace.display()));
            return found;
        }
    };
    let tree = Tree::of_accepted(evidence);
    differences_below(&root, "", &tree, &mut found);
    found
}

/// Adds to `found` what directory `at` (the workspace's `prefix`) lacks of `tree`.
fn differences_below(at: &OwnedFd, prefix: &str, tree: &Tree<'_>, found: &mut Differences) {
    let joined = |name: &str| {
        if prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{prefix}/{name}")
        }
    };
    for (name, child) in &tree.dirs {
        let path = joined(name);
        match rustix::fs::openat(at, *name, DIRECTORY, Mode::empty()) {
            Ok(fd) => differences_below(&fd, &path, child, found),
            Err(Errno::NOENT) => found.missing.push(format!("{path}/")),
            Err(Errno::NOTDIR | Errno::LOOP) => found.changed.push(format!(
                "{path} is a link or a file, not the accepted directory"
            )),
            Err(e) => found.changed.push(format!("{path}: {e}")),
        }
    }
    for (name, content) in &tree.files {
        let path = joined(name);
        let opened = rustix::fs::openat(
            at,
            *name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        );
        let why = match opened {
            Err(Errno::NOENT) => {
                found.missing.push(path);
                continue;
            }
            Err(Errno::LOOP) => "is a link".to_owned(),
            Err(e) => format!("cannot be read: {e}"),
            Ok(fd) => match rustix::fs::fstat(&fd) {
                Ok(st) if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile => {
                    "is not a regular file".to_owned()
                }
                Ok(_) if reads_as(fd, content) => continue,
                Ok(_) => "differs from its accepted bytes".to_owned(),
                Err(e) => format!("cannot be read: {e}"),
            },
        };
        found.changed.push(format!("{path} {why}"));
    }
}

/// Opening a directory below another, never through a link.
const DIRECTORY: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// The accepted files by directory, in path order.
#[derive(Default)]
struct Tree<'a> {
    dirs: BTreeMap<&'a str, Tree<'a>>,
    files: BTreeMap<&'a str, &'a [u8]>,
}

impl<'a> Tree<'a> {
    /// Every accepted file of `evidence`, by directory.
    fn of_accepted(evidence: &'a BatchEvidence) -> Self {
        let mut tree = Tree::default();
        for (_, output) in evidence.accepted_outputs() {
            for (path, content) in output.files() {
                tree.insert(path.as_str(), content);
            }
        }
        tree
    }

    fn insert(&mut self, path: &'a str, content: &'a [u8]) {
        match path.split_once('/') {
            Some((dir, rest)) => self.dirs.entry(dir).or_default().insert(rest, content),
            None => {
                self.files.insert(path, content);
            }
        }
    }
}

/// The modes kleene gives what it creates (`0o666` and `0o777` under the process's umask),
/// so that a moved file or directory looks like one written.
#[derive(Clone, Copy)]
struct Modes {
    file: u32,
    dir: u32,
}

impl Modes {
    fn of_this_process() -> Self {
        // Setting the umask to read it would race with other threads: Linux shows it.
        let umask = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("Umask:"))
                    .and_then(|m| u32::from_str_radix(m.trim(), 8).ok())
            })
            .unwrap_or(0o022);
        Self {
            file: 0o666 & !umask,
            dir: 0o777 & !umask,
        }
    }
}

struct Projection<'w> {
    workspace: &'w Path,
    modes: Modes,
    wrote: bool,
}

impl Projection<'_> {
    /// Projects `tree` into directory `at` (the workspace's `prefix`), with `stages` the same
    /// directory in each stage that has it.
    fn dir(
        &mut self,
        at: &OwnedFd,
        prefix: &str,
        tree: &Tree<'_>,
        stages: &[OwnedFd],
    ) -> Result<(), String> {
        for (name, child) in &tree.dirs {
            let path = if prefix.is_empty() {
                (*name).to_owned()
            } else {
                format!("{prefix}/{name}")
            };
            let walked = || self.workspace.join(&path);
            let opened = match rustix::fs::openat(at, *name, DIRECTORY, Mode::empty()) {
                Err(Errno::NOENT) => {
                    if self.moved_whole(at, name, child, stages) {
                        continue;
                    }
                    match rustix::fs::mkdirat(at, *name, Mode::from_raw_mode(0o777)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(format!("create {}: {e}", walked().display())),
                    }
                    rustix::fs::openat(at, *name, DIRECTORY, Mode::empty())
                }
                other => other,
            };
            let fd = match opened {
                Ok(fd) => fd,
                Err(Errno::NOTDIR | Errno::LOOP) => {
                    let file = child
                        .first_file()
                        .map_or(path.clone(), |f| format!("{path}/{f}"));
                    return Err(format!(
                        "{} is not a directory (a link or a file); {file} was not written",
                        walked().display()
                    ));
                }
                Err(e) => return Err(format!("open {}: {e}", walked().display())),
            };
            let below: Vec<OwnedFd> = stages
                .iter()
                .filter_map(|stage| rustix::fs::openat(stage, *name, DIRECTORY, Mode::empty()).ok())
                .collect();
            self.dir(&fd, &path, child, &below)?;
        }
        for (name, content) in &tree.files {
            let text = if prefix.is_empty() {
                (*name).to_owned()
            } else {
                format!("{prefix}/{name}")
            };
            self.file(at, name, &text, content)?;
        }
        Ok(())
    }

    /// Moves directory `name` whole from the stage that holds exactly `tree` below it into
    /// `at`, where it is missing; false (nothing changed) where no stage does.
    fn moved_whole(
        &mut self,
        at: &OwnedFd,
        name: &str,
        tree: &Tree<'_>,
        stages: &[OwnedFd],
    ) -> bool {
        for stage in stages {
            let Ok(dir) = rustix::fs::openat(stage, name, DIRECTORY, Mode::empty()) else {
                continue;
            };
            if !(self.holds_exactly(&dir, tree, true) && self.set_mode(&dir, self.modes.dir)) {
                continue;
            }
            // NOREPLACE: whatever appeared at the name since is never replaced.
            if rustix::fs::renameat_with(stage, name, at, name, RenameFlags::NOREPLACE).is_ok() {
                self.wrote = true;
                return true;
            }
        }
        false
    }

    /// Whether directory `dir` holds exactly `tree`: the same names, each file a regular file
    /// with no other link (so not an object of the store) holding the accepted bytes, each
    /// directory the same again; modes are set to what a written one gets. With `split`, the
    /// first level of more than one directory is checked on two threads (reading back many
    /// files is most of what a move costs).
    fn holds_exactly(&self, dir: &OwnedFd, tree: &Tree<'_>, split: bool) -> bool {
        let Ok(listing) = rustix::fs::Dir::read_from(dir) else {
            return false;
        };
        let mut seen = 0usize;
        let mut below = Vec::with_capacity(tree.dirs.len());
        for entry in listing {
            let Ok(entry) = entry else {
                return false;
            };
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            seen += 1;
            let Ok(name) = std::str::from_utf8(name) else {
                return false;
            };
            let held = if let Some(child) = tree.dirs.get_key_value(name) {
                below.push(child);
                true
            } else if let Some(content) = tree.files.get(name) {
                self.holds_file(dir, name, content)
            } else {
                false
            };
            if !held {
                return false;
            }
        }
        if seen != tree.dirs.len() + tree.files.len() {
            return false;
        }
        let holds = |(name, child): &(&&str, &Tree<'_>), split: bool| {
            rustix::fs::openat(dir, **name, DIRECTORY, Mode::empty()).is_ok_and(|sub| {
                self.set_mode(&sub, self.modes.dir) && self.holds_exactly(&sub, child, split)
            })
        };
        if split && below.len() > 1 {
            let (left, right) = below.split_at(below.len() / 2);
            std::thread::scope(|scope| {
                let other = scope.spawn(|| left.iter().all(|d| holds(d, false)));
                let here = right.iter().all(|d| holds(d, false));
                // A panic on the other thread is no proof: nothing is moved.
                other.join().unwrap_or(false) && here
            })
        } else {
            below.iter().all(|d| holds(d, split))
        }
    }

    /// Whether `name` in `dir` is a regular file of one link holding exactly `content`.
    fn holds_file(&self, dir: &OwnedFd, name: &str, content: &[u8]) -> bool {
        let Some(fd) = open_file(dir, name) else {
            return false;
        };
        let Ok(st) = rustix::fs::fstat(&fd) else {
            return false;
        };
        FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
            && st.st_nlink == 1
            && u64::try_from(st.st_size).ok() == u64::try_from(content.len()).ok()
            && give_mode(&fd, st.st_mode, self.modes.file)
            && reads_as(fd, content)
    }

    /// Gives `fd` `mode` unless it has it; false where it cannot.
    fn set_mode(&self, fd: &OwnedFd, mode: u32) -> bool {
        rustix::fs::fstat(fd).is_ok_and(|st| give_mode(fd, st.st_mode, mode))
    }

    /// Writes one accepted file into directory `at`, unless it already holds its bytes.
    fn file(&mut self, at: &OwnedFd, name: &str, text: &str, content: &[u8]) -> Result<(), String> {
        let shown = || self.workspace.join(text).display().to_string();
        match rustix::fs::statat(at, name, AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => {
                create(at, name, content).map_err(|e| format!("write {}: {e}", shown()))?;
                self.wrote = true;
                return Ok(());
            }
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                return Err(format!("{} is a link; {text} was not written", shown()));
            }
            Ok(st)
                if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
                    && u64::try_from(st.st_size).ok() == u64::try_from(content.len()).ok()
                    && holds(at, name, content) =>
            {
                return Ok(());
            }
            _ => {}
        }
        replace(at, name, content).map_err(|e| format!("write {}: {e}", shown()))?;
        self.wrote = true;
        Ok(())
    }
}

impl Tree<'_> {
    /// The first file below this directory, to name in a message.
    fn first_file(&self) -> Option<String> {
        if let Some(name) = self.files.keys().next() {
            return Some((*name).to_owned());
        }
        let (name, child) = self.dirs.iter().next()?;
        child.first_file().map(|f| format!("{name}/{f}"))
    }
}

/// Whether file `name` in `dir` holds exactly `content`.
fn holds(dir: &OwnedFd, name: &str, content: &[u8]) -> bool {
    open_file(dir, name).is_some_and(|fd| reads_as(fd, content))
}

/// File `name` in `dir`, opened to read, never through a link.
fn open_file(dir: &OwnedFd, name: &str) -> Option<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()
}

/// Gives `fd`, whose mode is `now`, `mode` unless it has it; false where it cannot.
fn give_mode(fd: &OwnedFd, now: u32, mode: u32) -> bool {
    now & 0o7777 == mode || rustix::fs::fchmod(fd, Mode::from_raw_mode(mode)).is_ok()
}

/// Whether the file open at `fd` reads as exactly `content`.
fn reads_as(fd: OwnedFd, content: &[u8]) -> bool {
    // One byte more than expected is enough to tell a longer file.
    let mut held = Vec::with_capacity(content.len() + 1);
    File::from(fd)
        .take(content.len() as u64 + 1)
        .read_to_end(&mut held)
        .is_ok_and(|_| held == content)
}

/// Creates file `name` in `dir` with `content`, where there was none: no one can have read
/// an older version of it, so it needs no temporary file (a rename per file is a fifth of
/// the projection's cost). `O_EXCL`: a file or link that appeared since is never written
/// through. A failed write (a full disk) removes what it made.
fn create(dir: &OwnedFd, name: &str, content: &[u8]) -> std::io::Result<()> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o666),
    )?;
    let written = File::from(fd).write_all(content);
    if written.is_err() {
        let _ = rustix::fs::unlinkat(dir, name, AtFlags::empty());
    }
    written
}

/// Replaces file `name` in `dir` whole with `content`: a temporary file beside it, renamed
/// over it. A failed write (a full disk) leaves no temporary file behind.
fn replace(dir: &OwnedFd, name: &str, content: &[u8]) -> std::io::Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let tmp = format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let written = (|| {
        let fd = rustix::fs::openat(
            dir,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        )?;
        File::from(fd).write_all(content)?;
        rustix::fs::renameat(dir, tmp.as_str(), dir, name)?;
        Ok(())
    })();
    if written.is_err() {
        // Best effort: what cannot be removed is a hidden file kleene never reads.
        let _ = rustix::fs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
    }
    written
}
