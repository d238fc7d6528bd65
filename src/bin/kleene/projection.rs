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
//! from the root: a directory is opened once for all the files it receives (outputs come in
//! path order), and a link planted anywhere below the workspace is refused, not followed,
//! whoever planted it and whenever.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;

use kleene::batch::BatchEvidence;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// Writes every accepted file of `evidence` below `workspace` (which must exist).
///
/// # Errors
///
/// A message naming the path, at the first file that could not be written (a link or a file
/// where a directory must be, a link where the file must be, an I/O failure); the files
/// before it are written.
pub fn project(evidence: &BatchEvidence, workspace: &Path) -> Result<(), String> {
    let root = rustix::fs::open(
        workspace,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("open {}: {e}", workspace.display()))?;
    // The directory the last file went to: files of one directory come one after another.
    let mut current: Option<(String, OwnedFd)> = None;
    let mut wrote = false;
    for (_, output) in evidence.accepted_outputs() {
        for (path, content) in output.files() {
            let text = path.as_str();
            let (parent, name) = text.rsplit_once('/').unwrap_or(("", text));
            let dir = match current.take() {
                Some((open, fd)) if open == parent => (open, fd),
                _ => (
                    parent.to_owned(),
                    open_parent(&root, parent, workspace, text)?,
                ),
            };
            let at = &current.insert(dir).1;
            let shown = || workspace.join(text).display().to_string();
            match rustix::fs::statat(at, name, AtFlags::SYMLINK_NOFOLLOW) {
                Err(Errno::NOENT) => {
                    create(at, name, content).map_err(|e| format!("write {}: {e}", shown()))?;
                    wrote = true;
                    continue;
                }
                Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                    return Err(format!("{} is a link; {text} was not written", shown()));
                }
                Ok(st)
                    if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
                        && u64::try_from(st.st_size).ok() == u64::try_from(content.len()).ok()
                        && holds(at, name, content) =>
                {
                    continue;
                }
                _ => {}
            }
            replace(at, name, content).map_err(|e| format!("write {}: {e}", shown()))?;
            wrote = true;
        }
    }
    if wrote {
        rustix::fs::syncfs(&root).map_err(|e| format!("sync {}: {e}", workspace.display()))?;
    }
    Ok(())
}

/// Opens directory `parent` below `root`, making what is missing; a component that is a link
/// or a file is refused (`O_NOFOLLOW`: the kernel, not a check before it, refuses the link).
fn open_parent(
    root: &OwnedFd,
    parent: &str,
    workspace: &Path,
    file: &str,
) -> Result<OwnedFd, String> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir =
        rustix::io::dup(root).map_err(|e| format!("open {}: {e}", workspace.display()))?;
    let mut walked = workspace.to_owned();
    for part in parent.split('/').filter(|p| !p.is_empty()) {
        walked.push(part);
        let not_a_directory = || {
            format!(
                "{} is not a directory (a link or a file); {file} was not written",
                walked.display()
            )
        };
        let opened = match rustix::fs::openat(&dir, part, flags, Mode::empty()) {
            Err(Errno::NOENT) => {
                match rustix::fs::mkdirat(&dir, part, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(format!("create {}: {e}", walked.display())),
                }
                rustix::fs::openat(&dir, part, flags, Mode::empty())
            }
            other => other,
        };
        dir = match opened {
            Ok(fd) => fd,
            Err(Errno::NOTDIR | Errno::LOOP) => return Err(not_a_directory()),
            Err(e) => return Err(format!("open {}: {e}", walked.display())),
        };
    }
    Ok(dir)
}

/// Whether file `name` in `dir` holds exactly `content`.
fn holds(dir: &OwnedFd, name: &str, content: &[u8]) -> bool {
    let Ok(fd) = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
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
