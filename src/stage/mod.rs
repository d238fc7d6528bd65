//! A staged workspace for one task call: the accepted files it starts from, and exactly what
//! the call created, changed or deleted there.
//!
//! ```
//! use kleene::plan::AdmittedPath;
//! use kleene::stage::{ObjectStore, Stage, StageInput};
//!
//! let tmp = std::env::temp_dir().join(format!("kleene-stage-doc-{}", std::process::id()));
//! let store = ObjectStore::open(tmp.join("objects"))?;
//! let input = AdmittedPath::admit("billing/MODULE")?;
//! let stage = Stage::prepare(tmp.join("stage"), &store, [StageInput::new(&input, b"name=billing\n")])?;
//! std::fs::write(stage.root().join("notes.txt"), "written by the call")?;
//! let changes = stage.changes(&())?;
//! assert_eq!(changes.written().keys().map(AdmittedPath::as_str).collect::<Vec<_>>(), ["notes.txt"]);
//! assert!(changes.deleted().is_empty() && changes.refused().is_empty());
//! stage.discard()?;
//! # std::fs::remove_dir_all(&tmp)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What a stage guarantees
//!
//! A call sees only its stage: the accepted outputs of its task's transitive prerequisites,
//! nothing else. After the call, [`Stage::changes`] walks the stage from its root, opening
//! every directory relative to its parent with `O_NOFOLLOW`, so **kleene never reads through a
//! symbolic link**, at any component of any path. What the call left is classified:
//!
//! - a regular file that is new, or whose content differs from the input at its path, is
//!   *written* (it becomes the candidate, whose every path the task must own);
//! - an input that is no longer there as a regular file is *deleted*;
//! - a symbolic link, a FIFO, a socket or a device, and any file whose name kleene cannot
//!   admit as a project path (not UTF-8, a control character, a secret-like name), is
//!   *refused*, named as well as it can be (lossy and escaped);
//! - a directory or file kleene may not read (permissions the call set), and the stage
//!   itself when the call removed or replaced it, is *refused* too: the call's failure,
//!   never mistaken for the host's (what lay beneath counts as deleted);
//! - anything the caller's [`ScratchRule`] calls scratch (`target/**`, `**/__pycache__/**`)
//!   is ignored: never read, never part of a candidate;
//! - with [`Stage::changes_within`], a file that would take what the call wrote past a
//!   number of bytes is *refused* unread, so a call that leaves gigabytes of build output
//!   outside its scratch costs a refusal, not the memory to hold it.
//!
//! A symlink in a task's output therefore never carries a file into a candidate: a task that
//! wants a file at a path writes the file there.
//!
//! # Cost
//!
//! Inputs are hard links to a content-addressed [`ObjectStore`] (a copy where the file system
//! refuses a link), so preparing a stage costs one link per input file whatever its size. A
//! walk compares each input's file identity (device, inode, size, modification and change
//! times) with the one recorded when it was linked and reads and hashes only files whose
//! identity changed or that are new: the cost of a call grows with the number of files in its
//! stage and the bytes the call itself wrote, never with the bytes of its inputs.
//! [`Stage::reuse`] turns one call's stage into the next call's, keeping every input that is
//! wanted again and still unchanged, so a chain of calls pays for the files that differ.
//!
//! A reused stage is watched (inotify on Linux): every directory holding inputs, and every
//! input's inode, whichever name reaches it. The walk after its next call then visits only
//! the names the kernel says the call touched (and whole any directory it made), so its cost
//! follows what the call did, not how many files the stage holds. Whatever the kernel cannot
//! tell exactly (a full event queue, a watched directory removed or moved, a watch refused
//! for want of room) makes that walk whole again, as a first call's always is. A property
//! test checks, for every sequence of what a call can do to its stage, that both walks find
//! the same.
//!
//! Objects are read-only (mode 0444). A process running as root can still write through the
//! link in place; the change time of the shared inode then moves, so the walk of every stage
//! holding that input re-hashes it and reports the change, and [`ObjectStore::forget`] lets
//! the caller drop the damaged object so that the next stage gets a fresh copy.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

// Paths are hashed on every call for every input: a fast hasher keeps that small (the keys
// are kleene's own admitted paths, and a stage holds one call's inputs).
use foldhash::HashSet;
use rustix::fs::{Mode, OFlags, Stat};

use crate::id::digest::Digest;
use crate::plan::path::AdmittedPath;

mod changes;
mod prepare;
mod store;
mod sweep;
mod walk;

pub use changes::{StageChanges, StageRefusal};
pub use prepare::StageInput;
pub use store::ObjectStore;
pub use sweep::remove_stage;

#[cfg(target_os = "linux")]
mod track;
#[cfg(not(target_os = "linux"))]
mod track {
    //! Elsewhere no kernel tells which names a call touched: every walk is whole.
    use std::collections::HashSet;
    use std::path::Path;

    use crate::plan::path::AdmittedPath;

    #[derive(Debug)]
    pub(crate) struct Tracker;

    impl Tracker {
        pub(crate) fn new(_: &Path) -> Option<Self> {
            None
        }
        pub(crate) fn watch_input(&mut self, _: &Path, _: &AdmittedPath) {}
        pub(crate) fn arm(&mut self) {}
        pub(crate) fn catch_up(&mut self) {}
        pub(crate) fn touched(&mut self) -> Option<&HashSet<(String, Vec<u8>)>> {
            None
        }
    }
}

/// Why a stage or the object store could not be prepared, walked or removed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StageError {
    /// A file-system operation on `path` failed (disk full, permissions, …).
    #[error("access {}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The stage directory already exists: a stage always starts empty.
    #[error("prepare stage {}: the directory already exists (remove it first)", path.display())]
    Exists {
        /// The stage directory.
        path: PathBuf,
    },
    /// An object file's content does not match its name.
    #[error(
        "read object {digest} in {}: its content no longer matches its digest; remove the \
         file and run again",
        dir.display()
    )]
    ObjectCorrupt {
        /// The store's directory.
        dir: PathBuf,
        /// The object's digest (its file name).
        digest: Digest,
    },
}

impl StageError {
    fn io(path: &Path) -> impl FnOnce(io::Error) -> StageError + '_ {
        move |source| StageError::Io {
            path: path.to_owned(),
            source,
        }
    }

    /// The operating system's error, when a file-system operation failed.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            StageError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Decides which paths of a stage are scratch: build output and caches that are never part of
/// a candidate, never read and never carried to another call.
///
/// `()` has no scratch paths.
pub trait ScratchRule {
    /// Whether the file (or symlink, or special file) at `path` is scratch.
    fn is_scratch(&self, path: &str) -> bool;

    /// Whether everything under the directory `dir` is scratch, so the walk need not enter it.
    /// The default enters every directory.
    fn covers_dir(&self, dir: &str) -> bool {
        let _ = dir;
        false
    }
}

impl ScratchRule for () {
    fn is_scratch(&self, _path: &str) -> bool {
        false
    }
}

impl<S: ScratchRule + ?Sized> ScratchRule for &S {
    fn is_scratch(&self, path: &str) -> bool {
        (**self).is_scratch(path)
    }

    fn covers_dir(&self, dir: &str) -> bool {
        (**self).covers_dir(dir)
    }
}

/// The identity of a file as the walk sees it: if none of these moved, the content did not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileIdentity {
    dev: u64,
    ino: u64,
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileIdentity {
    /// Whether `later` is this file with nothing moved but its change time (forward): what a
    /// link made to it or removed from it does, and no write does (a write moves the
    /// modification time, and usually the size).
    fn moved_only_change_time_to(&self, later: &FileIdentity) -> bool {
        self.dev == later.dev
            && self.ino == later.ino
            && self.size == later.size
            && self.mtime == later.mtime
            && self.ctime <= later.ctime
    }
}

// The field types of `struct stat` differ between architectures; the casts are lossless on
// every one kleene builds for.
#[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
fn identity(st: &Stat) -> FileIdentity {
    FileIdentity {
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
        size: st.st_size as i64,
        mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
        ctime: (st.st_ctime as i64, st.st_ctime_nsec as i64),
    }
}

#[derive(Debug, Clone)]
struct Staged {
    digest: Digest,
    /// Recorded once every input is linked.
    identity: Option<FileIdentity>,
}

/// A call's staged workspace.
///
/// Built by [`Stage::prepare`], walked by [`Stage::changes`], removed by
/// [`Stage::discard`]. Dropping a stage leaves its directory in place (for inspection).
#[derive(Debug)]
pub struct Stage {
    root: PathBuf,
    inputs: BTreeMap<AdmittedPath, Staged>,
    /// What the last walk found, so [`Stage::reuse`] needs no second walk.
    last_walk: Mutex<Option<WalkResult>>,
    /// Which names the call touched, once the stage serves a second call: the walk then
    /// visits those alone.
    tracker: Mutex<Option<track::Tracker>>,
}

/// What [`Stage::changes`] leaves for [`Stage::reuse`]: the inputs it found changed or gone,
/// the top-most entries (raw relative paths) that are not unchanged inputs, the inputs whose
/// identity moved while their bytes stayed, and whether it visited only touched names.
#[derive(Debug)]
struct WalkResult {
    dropped: HashSet<AdmittedPath>,
    leftovers: Vec<Vec<u8>>,
    refreshed: Vec<(AdmittedPath, FileIdentity)>,
    tracked: bool,
}

impl Stage {
    /// The stage's root directory, opened without following a link.
    fn open_root(&self) -> Result<OwnedFd, StageError> {
        rustix::fs::open(
            &self.root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| StageError::io(&self.root)(e.into()))
    }

    /// The stage directory: where the call's commands run.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The digest of the input at `path`, if the stage started with one there.
    pub fn input_digest(&self, path: &AdmittedPath) -> Option<Digest> {
        self.inputs.get(path).map(|s| s.digest)
    }

    /// The bytes free to the caller on the file system that holds the stage: a call that
    /// failed with almost none left most likely failed for want of room, which is the
    /// host's failure, not the task's.
    ///
    /// # Errors
    ///
    /// [`StageError::Io`] when the file system cannot be asked.
    pub fn free_bytes(&self) -> Result<u64, StageError> {
        let st =
            rustix::fs::statvfs(&self.root).map_err(|e| StageError::io(&self.root)(e.into()))?;
        Ok(st.f_bavail.saturating_mul(st.f_frsize))
    }

    /// The bytes free on the stage's file system when they are fewer than
    /// [`FULL_DISK_MARGIN`]: a call that failed there, or a fix about to start there, is
    /// withdrawn as the host failing rather than counted against the task.
    pub fn nearly_full(&self) -> Option<u64> {
        self.free_bytes()
            .ok()
            .filter(|&free| free < FULL_DISK_MARGIN)
    }

    /// Removes the stage directory and everything in it (links are removed, never followed).
    ///
    /// # Errors
    ///
    /// [`StageError::Io`] when it cannot be removed.
    pub fn discard(self) -> Result<(), StageError> {
        sweep::remove_stage(&self.root)
    }

    /// [`discard`](Self::discard), telling `store` (the store the stage was linked from)
    /// that the links removed were kleene's own: removing a link moves its object's change
    /// time, and without this the next stage to link the object would read and hash it
    /// again, every object of every input, when each call gets a fresh stage.
    #[cfg_attr(not(feature = "shell"), allow(dead_code))]
    pub(crate) fn discard_linked_from(self, store: &ObjectStore) -> Result<(), StageError> {
        let digests: Vec<Digest> = self.inputs.values().map(|s| s.digest).collect();
        sweep::remove_stage(&self.root)?;
        for digest in &digests {
            store.relinked(digest);
        }
        Ok(())
    }
}

/// The free bytes below which a stage's file system counts as full ([`Stage::nearly_full`]):
/// 1 MiB, room for any command's output and kleene's own small writes.
pub const FULL_DISK_MARGIN: u64 = 1 << 20;

#[cfg(test)]
mod tests {
    //! What the tests of every part of the stage share.
    use super::*;

    pub(super) fn p(s: &str) -> AdmittedPath {
        AdmittedPath::admit(s).unwrap()
    }

    pub(super) fn setup() -> (tempfile::TempDir, ObjectStore) {
        let tmp = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(tmp.path().join("objects")).unwrap();
        (tmp, store)
    }
}
