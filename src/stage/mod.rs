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

// Paths are hashed on every call for every input: a fast hasher keeps that small (the keys
// are kleene's own admitted paths, and a stage holds one call's inputs).
use foldhash::{HashMap, HashSet, HashSetExt};
use std::ffi::CStr;
use std::fs;
use std::io::{self, Read, Seek, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, Stat};

use crate::id::digest::Digest;
use crate::plan::path::AdmittedPath;

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

/// A content-addressed directory of read-only files, one per distinct content, that stages
/// link their inputs to.
///
/// Each object is written once (temporary file, then rename) and verified once per process
/// the first time it is used; afterwards it is trusted by name until [`ObjectStore::forget`].
#[derive(Debug)]
pub struct ObjectStore {
    dir: PathBuf,
    verified: Mutex<HashSet<Digest>>,
}

impl ObjectStore {
    /// The store in `dir`, created if missing.
    ///
    /// # Errors
    ///
    /// [`StageError::Io`] when the directory cannot be created.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, StageError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(StageError::io(&dir))?;
        Ok(Self {
            dir,
            verified: Mutex::new(HashSet::new()),
        })
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, digest: &Digest) -> PathBuf {
        self.dir.join(digest.to_string())
    }

    fn is_verified(&self, digest: &Digest) -> bool {
        self.verified
            .lock()
            .map(|set| set.contains(digest))
            .unwrap_or(false)
    }

    fn mark_verified(&self, digest: Digest) {
        if let Ok(mut set) = self.verified.lock() {
            set.insert(digest);
        }
    }

    /// The object file holding `content` (whose blake3 is `digest`), written if missing.
    fn ensure(&self, digest: Digest, content: &[u8]) -> Result<PathBuf, StageError> {
        let path = self.path_of(&digest);
        if self.is_verified(&digest) {
            return Ok(path);
        }
        match fs::read(&path) {
            Ok(existing) if Digest::from(blake3::hash(&existing)) == digest => {}
            Ok(_) => {
                // A damaged object (a torn write from an earlier crash, or an in-place write):
                // replace it, since the caller holds the true bytes.
                fs::remove_file(&path).map_err(StageError::io(&path))?;
                self.write_object(&path, content)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.write_object(&path, content)?,
            Err(e) => return Err(StageError::io(&path)(e)),
        }
        self.mark_verified(digest);
        Ok(path)
    }

    fn write_object(&self, path: &Path, content: &[u8]) -> Result<(), StageError> {
        let tmp = self
            .dir
            .join(format!(".tmp-{}-{}", std::process::id(), unique_suffix()));
        let written = (|| {
            let mut file = fs::File::create(&tmp)?;
            file.write_all(content)?;
            file.set_permissions(fs::Permissions::from_mode(0o444))?;
            fs::rename(&tmp, path)
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(StageError::io(path)(e));
        }
        Ok(())
    }

    /// Drops the object for `digest` (a stage reported it changed in place), so the next
    /// stage that needs it writes a fresh copy.
    ///
    /// # Errors
    ///
    /// [`StageError::Io`] when the file exists but cannot be removed.
    pub fn forget(&self, digest: &Digest) -> Result<(), StageError> {
        if let Ok(mut set) = self.verified.lock() {
            set.remove(digest);
        }
        let path = self.path_of(digest);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StageError::io(&path)(e)),
        }
    }
}

fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// One file a stage starts with: a prerequisite's accepted output.
#[derive(Debug, Clone, Copy)]
pub struct StageInput<'a> {
    path: &'a AdmittedPath,
    content: &'a [u8],
    digest: Option<Digest>,
}

impl<'a> StageInput<'a> {
    /// The file `content` at `path`; its digest is computed when the stage is prepared.
    pub fn new(path: &'a AdmittedPath, content: &'a [u8]) -> Self {
        Self {
            path,
            content,
            digest: None,
        }
    }

    /// The same, with the blake3 of `content` already known (a caller that stages the same
    /// accepted output for many calls computes it once).
    ///
    /// The digest is trusted only to name the object: an object whose content does not match
    /// is rewritten from `content`.
    pub fn with_digest(path: &'a AdmittedPath, content: &'a [u8], digest: Digest) -> Self {
        Self {
            path,
            content,
            digest: Some(digest),
        }
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
    /// Creates the stage directory `root` holding exactly `inputs`, hard-linked from `store`
    /// (copied where the file system refuses a link).
    ///
    /// # Errors
    ///
    /// [`StageError::Exists`] when `root` exists; [`StageError::Io`] when a directory, object
    /// or link cannot be written (for example a full disk). A stage that failed half-way is
    /// removed.
    pub fn prepare<'a>(
        root: impl Into<PathBuf>,
        store: &ObjectStore,
        inputs: impl IntoIterator<Item = StageInput<'a>>,
    ) -> Result<Self, StageError> {
        let root = root.into();
        if fs::symlink_metadata(&root).is_ok() {
            return Err(StageError::Exists { path: root });
        }
        if let Some(parent) = root.parent() {
            fs::create_dir_all(parent).map_err(StageError::io(parent))?;
        }
        fs::create_dir(&root).map_err(StageError::io(&root))?;
        let mut stage = Self {
            root,
            inputs: BTreeMap::new(),
            last_walk: Mutex::new(None),
            tracker: Mutex::new(None),
        };
        let mut made_dirs: HashSet<PathBuf> = HashSet::new();
        let linked = inputs
            .into_iter()
            .try_for_each(|input| stage.link(store, input, &mut made_dirs))
            .and_then(|()| stage.record_identities());
        if let Err(e) = linked {
            let _ = fs::remove_dir_all(&stage.root);
            return Err(e);
        }
        Ok(stage)
    }

    /// Records every input's identity once all are linked: inputs with the same content share
    /// one object, and each link moves the shared inode's change time.
    fn record_identities(&mut self) -> Result<(), StageError> {
        for (path, staged) in &mut self.inputs {
            let target = self.root.join(path.as_str());
            let st = rustix::fs::lstat(&target).map_err(|e| StageError::io(&target)(e.into()))?;
            staged.identity = Some(identity(&st));
        }
        Ok(())
    }

    fn link(
        &mut self,
        store: &ObjectStore,
        input: StageInput<'_>,
        made_dirs: &mut HashSet<PathBuf>,
    ) -> Result<(), StageError> {
        let digest = input
            .digest
            .unwrap_or_else(|| Digest::from(blake3::hash(input.content)));
        let object = store.ensure(digest, input.content)?;
        // The stage is new and no command has run in it yet, so no component of `target` can
        // be a link planted by a task.
        let target = self.root.join(input.path.as_str());
        if let Some(parent) = target.parent()
            && parent != self.root
            && !made_dirs.contains(parent)
        {
            fs::create_dir_all(parent).map_err(StageError::io(parent))?;
            made_dirs.insert(parent.to_owned());
        }
        if let Err(e) = fs::hard_link(&object, &target) {
            // Another file system, a link-count limit or a file system without links: copy.
            if e.kind() == io::ErrorKind::AlreadyExists {
                return Err(StageError::io(&target)(e));
            }
            fs::write(&target, input.content).map_err(StageError::io(&target))?;
        }
        if self
            .inputs
            .insert(
                input.path.clone(),
                Staged {
                    digest,
                    identity: None,
                },
            )
            .is_some()
        {
            return Err(StageError::io(&target)(io::ErrorKind::AlreadyExists.into()));
        }
        Ok(())
    }

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

    /// What the call created, changed, deleted or left that kleene refuses, relative to the
    /// inputs, ignoring what `scratch` calls scratch. Nothing is followed through a link.
    ///
    /// # Errors
    ///
    /// [`StageError::Io`] when a directory or file of the stage cannot be read.
    pub fn changes(&self, scratch: &impl ScratchRule) -> Result<StageChanges, StageError> {
        self.changes_within(scratch, u64::MAX)
    }

    /// [`changes`](Self::changes), refusing ([`StageRefusal::TooLarge`]) every file that
    /// would take the bytes the call wrote past `max_written_bytes`, without reading it.
    /// Files are taken in the walk's order (by name, depth first); an input rewritten with
    /// its own bytes costs nothing.
    ///
    /// # Errors
    ///
    /// [`StageError::Io`] when a directory or file of the stage cannot be read.
    pub fn changes_within(
        &self,
        scratch: &impl ScratchRule,
        max_written_bytes: u64,
    ) -> Result<StageChanges, StageError> {
        let root_fd = match rustix::fs::open(
            &self.root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            // The call removed or replaced its own stage: its failure, refused like any
            // other thing it left, never mistaken for the host failing.
            Err(e) if left_by_the_call(e) => {
                return Ok(StageChanges {
                    written: BTreeMap::new(),
                    deleted: self.inputs.keys().cloned().collect(),
                    refused: vec![StageRefusal::Unreadable {
                        path: String::new(),
                        reason: io::Error::from(e).to_string(),
                    }],
                });
            }
            Err(e) => return Err(StageError::io(&self.root)(e.into())),
        };
        // Once the stage serves another call, the kernel tells which names the call
        // touched; without that (a first call, a full queue, a directory moved) every name
        // is visited.
        let touched = self
            .tracker
            .lock()
            .ok()
            .and_then(|mut t| t.as_mut().and_then(|t| t.touched().cloned()));
        let walked = match touched {
            Some(touched) => self.walk_touched(&root_fd, scratch, max_written_bytes, &touched)?,
            None => None,
        };
        let (walk, examined) = match walked {
            Some((walk, examined)) => (walk, Some(examined)),
            None => {
                let mut walk = Walk::new(self, scratch, max_written_bytes, self.inputs.iter());
                walk.dir(&root_fd, "", b"")?;
                (walk, None)
            }
        };
        let Walk {
            seen,
            written,
            refused,
            leftovers,
            refreshed,
            ..
        } = walk;
        // Inputs the walk could have found changed: every one, or those it examined.
        let candidates: Box<dyn Iterator<Item = &AdmittedPath>> = match &examined {
            Some(examined) => Box::new(examined.iter().copied()),
            None => Box::new(self.inputs.keys()),
        };
        let mut dropped = HashSet::new();
        let mut deleted = Vec::new();
        for path in candidates {
            if !seen.contains(path) {
                deleted.push(path.clone());
                dropped.insert(path.clone());
            } else if written.contains_key(path) {
                dropped.insert(path.clone());
            }
        }
        deleted.sort_unstable();
        if let Ok(mut last) = self.last_walk.lock() {
            *last = Some(WalkResult {
                dropped,
                leftovers,
                refreshed,
                tracked: examined.is_some(),
            });
        }
        Ok(StageChanges {
            written,
            deleted,
            refused,
        })
    }

    /// What a whole walk finds, leaving the stage's state for reuse alone: the reference the
    /// walk of touched names is checked against.
    #[cfg(test)]
    fn changes_whole(&self, scratch: &impl ScratchRule) -> Result<StageChanges, StageError> {
        let root_fd = self.open_root()?;
        let mut walk = Walk::new(self, scratch, u64::MAX, self.inputs.iter());
        walk.dir(&root_fd, "", b"")?;
        let mut deleted: Vec<AdmittedPath> = self
            .inputs
            .keys()
            .filter(|p| !walk.seen.contains(p))
            .cloned()
            .collect();
        deleted.sort_unstable();
        Ok(StageChanges {
            written: walk.written,
            deleted,
            refused: walk.refused,
        })
    }

    /// The walk of the names the call touched (`touched`: directory and raw name), and the
    /// inputs it examined: each touched name and every input beneath one. `None` when a
    /// touched directory cannot be opened where it was: the caller walks the stage whole.
    fn walk_touched<'s, S: ScratchRule>(
        &'s self,
        root_fd: &OwnedFd,
        scratch: &'s S,
        max_written_bytes: u64,
        touched: &HashSet<(String, Vec<u8>)>,
    ) -> Result<Option<TouchedWalk<'s, S>>, StageError> {
        let mut by_dir: BTreeMap<&str, Vec<std::ffi::CString>> = BTreeMap::new();
        let mut examined: HashSet<&AdmittedPath> = HashSet::new();
        let mut touched_paths: HashSet<String> = HashSet::new();
        for (dir, name) in touched {
            let Ok(c_name) = std::ffi::CString::new(name.clone()) else {
                return Ok(None);
            };
            by_dir.entry(dir.as_str()).or_default().push(c_name);
            let Ok(name) = std::str::from_utf8(name) else {
                continue; // never an input's name
            };
            let rel = if dir.is_empty() {
                name.to_owned()
            } else {
                format!("{dir}/{name}")
            };
            let admitted = AdmittedPath::admit(&rel);
            touched_paths.insert(rel);
            let Ok(at) = admitted else {
                continue;
            };
            for (path, _) in self.inputs.range::<AdmittedPath, _>(&at..) {
                if *path != at && !path.starts_with(&at) {
                    break;
                }
                examined.insert(path);
            }
        }
        let mut walk = Walk::new(
            self,
            scratch,
            max_written_bytes,
            examined
                .iter()
                .filter_map(|p| self.inputs.get_key_value(*p)),
        );
        // A touched name that is a directory is walked whole: names touched beneath it are
        // visited there, not a second time.
        let inside_touched = |dir: &str| {
            dir.match_indices('/')
                .map(|(slash, _)| &dir[..slash])
                .chain([dir])
                .any(|above| touched_paths.contains(above))
        };
        for (dir, mut names) in by_dir {
            if !dir.is_empty() && inside_touched(dir) {
                continue;
            }
            names.sort_unstable();
            if dir.is_empty() {
                walk.entries(root_fd, "", b"", names)?;
                continue;
            }
            let Ok(fd) = open_dir_beneath(root_fd, dir) else {
                return Ok(None);
            };
            walk.entries(&fd, dir, dir.as_bytes(), names)?;
        }
        Ok(Some((walk, examined)))
    }

    /// Turns this stage into the stage of another call, holding exactly `inputs`: every
    /// input this stage already holds unchanged stays, everything else the stage holds is
    /// removed (without following a link), and the missing inputs are linked. A chain of
    /// calls whose inputs grow by a few files each pays for those files and one walk, not
    /// for a fresh link of every input.
    ///
    /// # Errors
    ///
    /// [`StageError::Io`] when the stage cannot be read or changed; the stage is then
    /// removed, and the caller prepares a fresh one.
    pub fn reuse<'a>(
        self,
        store: &ObjectStore,
        inputs: impl IntoIterator<Item = StageInput<'a>>,
    ) -> Result<Self, StageError> {
        let root = self.root.clone();
        let last = self.last_walk.lock().ok().and_then(|mut last| last.take());
        let result = match last {
            Some(walk) => {
                let tracked = walk.tracked;
                let refreshed: Vec<AdmittedPath> =
                    walk.refreshed.iter().map(|(p, _)| p.clone()).collect();
                self.reset_from(walk, store, inputs)
                    .map(|(stage, linked)| stage.rearm(tracked, linked.iter().chain(&refreshed)))
            }
            None => self
                .reset(store, inputs)
                .map(|(stage, _)| stage.rearm(false, std::iter::empty())),
        };
        if result.is_err() {
            let _ = remove_root(&root);
        }
        result
    }

    /// Readies the tracker for the stage's next call: after a walk of touched names it
    /// watches what was linked or changed since; otherwise it watches every input anew.
    fn rearm<'p>(self, tracked: bool, changed: impl Iterator<Item = &'p AdmittedPath>) -> Self {
        if let Ok(mut slot) = self.tracker.lock() {
            let incremental = tracked && slot.is_some();
            if !incremental {
                *slot = track::Tracker::new(&self.root);
            }
            if let Some(tracker) = slot.as_mut() {
                // What the reset removed is forgotten before anything is watched again: a
                // directory made anew at a removed one's place needs a watch of its own.
                tracker.catch_up();
                if incremental {
                    for path in changed {
                        tracker.watch_input(&self.root, path);
                    }
                } else {
                    for path in self.inputs.keys() {
                        tracker.watch_input(&self.root, path);
                    }
                }
                tracker.arm();
            }
        }
        self
    }

    /// [`Stage::reuse`] after a walk: removes what the walk listed as leftovers and the inputs
    /// no longer wanted, then links what is missing; no second walk.
    fn reset_from<'a>(
        mut self,
        walk: WalkResult,
        store: &ObjectStore,
        inputs: impl IntoIterator<Item = StageInput<'a>>,
    ) -> Result<(Self, Vec<AdmittedPath>), StageError> {
        // Each wanted input, its digest, and whether the stage still holds it.
        let mut wanted: HashMap<&AdmittedPath, (StageInput<'a>, Digest, bool)> = inputs
            .into_iter()
            .map(|i| {
                let d = i
                    .digest
                    .unwrap_or_else(|| Digest::from(blake3::hash(i.content)));
                (i.path, (i, d, false))
            })
            .collect();
        let root_fd = self.open_root()?;
        for raw in &walk.leftovers {
            remove_beneath(&root_fd, raw, &self.root)?;
        }
        let refreshed: HashMap<AdmittedPath, FileIdentity> = walk.refreshed.into_iter().collect();
        // Kept in place: most inputs stay, and the map is neither rebuilt nor searched.
        let mut removed: Vec<(AdmittedPath, bool)> = Vec::new();
        self.inputs.retain(|path, staged| {
            if walk.dropped.contains(path) {
                // Changed or deleted: gone with the leftovers.
                removed.push((path.clone(), false));
                return false;
            }
            if let Some(now) = refreshed.get(path) {
                staged.identity = Some(*now);
            }
            match wanted.get_mut(path) {
                Some((_, digest, held)) if *digest == staged.digest => {
                    *held = true;
                    true
                }
                _ => {
                    removed.push((path.clone(), true));
                    false
                }
            }
        });
        for (path, present) in &removed {
            if *present {
                remove_beneath(&root_fd, path.as_str().as_bytes(), &self.root)?;
            }
            // A directory it leaves empty goes too, so every directory of the stage holds an
            // input (and is watched).
            prune_empty_parents(&root_fd, path.as_str());
        }
        let missing = wanted
            .into_values()
            .filter(|(_, _, held)| !held)
            .map(|(input, digest, _)| (input, digest))
            .collect();
        self.link_missing(store, missing)
    }

    /// Links every wanted input the stage does not hold, then records identities again where
    /// a link moved them.
    fn link_missing(
        mut self,
        store: &ObjectStore,
        mut missing: Vec<(StageInput<'_>, Digest)>,
    ) -> Result<(Self, Vec<AdmittedPath>), StageError> {
        let mut made_dirs: HashSet<PathBuf> = HashSet::new();
        let mut linked = HashSet::new();
        // Linked in path order, so directories are made before what they hold.
        missing.sort_unstable_by(|a, b| a.0.path.cmp(b.0.path));
        let mut newly = Vec::with_capacity(missing.len());
        for (input, digest) in missing {
            self.link(store, input, &mut made_dirs)?;
            linked.insert(digest);
            newly.push(input.path.clone());
        }
        // A link moves the change time of every file sharing its object.
        for (path, staged) in &mut self.inputs {
            if staged.identity.is_none() || linked.contains(&staged.digest) {
                let target = self.root.join(path.as_str());
                let st =
                    rustix::fs::lstat(&target).map_err(|e| StageError::io(&target)(e.into()))?;
                staged.identity = Some(identity(&st));
            }
        }
        Ok((self, newly))
    }

    fn reset<'a>(
        mut self,
        store: &ObjectStore,
        inputs: impl IntoIterator<Item = StageInput<'a>>,
    ) -> Result<(Self, Vec<AdmittedPath>), StageError> {
        let wanted: BTreeMap<AdmittedPath, StageInput<'a>> =
            inputs.into_iter().map(|i| (i.path.clone(), i)).collect();
        let digest_of = |i: &StageInput<'_>| {
            i.digest
                .unwrap_or_else(|| Digest::from(blake3::hash(i.content)))
        };
        let wanted_digests: BTreeMap<&AdmittedPath, Digest> =
            wanted.iter().map(|(p, i)| (p, digest_of(i))).collect();
        let root_fd = self.open_root()?;
        let mut kept = BTreeMap::new();
        let mut sweep = Sweep {
            root: &self.root,
            old: &self.inputs,
            wanted: &wanted_digests,
            kept: &mut kept,
        };
        sweep.dir(&root_fd, "")?;
        self.inputs = kept;
        let missing = wanted
            .iter()
            .filter(|(p, _)| !self.inputs.contains_key(*p))
            .map(|(p, i)| (*i, wanted_digests[p]))
            .collect();
        self.link_missing(store, missing)
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
        remove_stage(&self.root)
    }
}

/// Removes the stage directory at `root` that no [`Stage`] owns any more (one a crashed run
/// left behind), whatever its call left there: the directory, even one the call made
/// unreadable, or the file or link that replaced it (a link is removed, never followed).
/// Nothing there is no error.
///
/// # Errors
///
/// [`StageError::Io`] when it cannot be removed.
pub fn remove_stage(root: &Path) -> Result<(), StageError> {
    remove_root(root).map_err(StageError::io(root))
}

fn remove_root(root: &Path) -> io::Result<()> {
    match fs::symlink_metadata(root) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Ok(meta) if !meta.is_dir() => return fs::remove_file(root),
        _ => {}
    }
    match fs::remove_dir_all(root) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => {
            // A call may have left a directory without write permission: open it up and
            // try once more.
            make_writable(root);
            fs::remove_dir_all(root).map_err(|_| e)
        }
    }
}

fn make_writable(dir: &Path) {
    // Opened up before it is listed: a directory the call made unreadable cannot be listed.
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            make_writable(&entry.path());
        }
    }
}

/// Something a call left in its stage that can never be part of a candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StageRefusal {
    /// A symbolic link (kleene never follows one).
    Symlink {
        /// Its path in the stage (escaped where not printable).
        path: String,
        /// Where it points (escaped).
        target: String,
    },
    /// A FIFO, socket or device.
    SpecialFile {
        /// Its path in the stage (escaped).
        path: String,
        /// What it is.
        kind: &'static str,
    },
    /// A file whose name cannot be a project path.
    Unnameable {
        /// Its path in the stage, lossy and escaped.
        path: String,
        /// Why the name is refused.
        reason: String,
    },
    /// Something the call left that kleene may not read (its permissions), or that it
    /// removed or replaced while kleene looked: the stage itself when `path` is empty.
    /// What lay beneath counts as deleted.
    Unreadable {
        /// Its path in the stage (escaped); empty for the stage itself.
        path: String,
        /// What the operating system said.
        reason: String,
    },
    /// A file that would take what the call wrote past the bytes the caller allows
    /// ([`Stage::changes_within`]); it was not read.
    TooLarge {
        /// Its path in the stage.
        path: String,
        /// Its size when kleene looked (at least this many bytes).
        bytes: u64,
        /// The bytes a call may write in all.
        limit: u64,
    },
}

impl std::fmt::Display for StageRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StageRefusal::Symlink { path, target } => {
                write!(
                    f,
                    "{path} is a symbolic link to {target} (write the file itself)"
                )
            }
            StageRefusal::SpecialFile { path, kind } => write!(f, "{path} is a {kind}"),
            StageRefusal::Unnameable { path, reason } => {
                write!(f, "{path} cannot be a project path: {reason}")
            }
            StageRefusal::Unreadable { path, reason } if path.is_empty() => {
                write!(
                    f,
                    "the stage itself cannot be read (removed or replaced?): {reason}"
                )
            }
            StageRefusal::Unreadable { path, reason } => {
                write!(f, "{path} cannot be read: {reason}")
            }
            StageRefusal::TooLarge { path, bytes, limit } => write!(
                f,
                "{path} ({bytes} bytes) takes what the call wrote past the {limit} bytes it \
                 may write (mark build output as scratch)"
            ),
        }
    }
}

/// What a call changed in its stage.
#[derive(Debug, Clone, Default)]
pub struct StageChanges {
    written: BTreeMap<AdmittedPath, Vec<u8>>,
    deleted: Vec<AdmittedPath>,
    refused: Vec<StageRefusal>,
}

impl StageChanges {
    /// Files the call created, or whose content it changed, with their content.
    pub fn written(&self) -> &BTreeMap<AdmittedPath, Vec<u8>> {
        &self.written
    }

    /// The written files, by value (the candidate).
    pub fn into_written(self) -> BTreeMap<AdmittedPath, Vec<u8>> {
        self.written
    }

    /// Inputs the call removed (or replaced by something that is not a regular file).
    pub fn deleted(&self) -> &[AdmittedPath] {
        &self.deleted
    }

    /// What the call left that can never be part of a candidate.
    pub fn refused(&self) -> &[StageRefusal] {
        &self.refused
    }

    /// Why the candidate must be refused, in one line, when it must: the inputs the call
    /// deleted and what it left that kleene refuses, the first twenty of them named.
    ///
    /// ```
    /// # use kleene::stage::StageChanges;
    /// assert_eq!(StageChanges::default().refusal_summary(), None);
    /// ```
    pub fn refusal_summary(&self) -> Option<String> {
        const SHOWN: usize = 20;
        let total = self.deleted.len() + self.refused.len();
        if total == 0 {
            return None;
        }
        let mut items: Vec<String> = self
            .deleted
            .iter()
            .map(|p| {
                format!("deletes {p}, one of its inputs (a call may only write its own paths)")
            })
            .chain(self.refused.iter().map(ToString::to_string))
            .take(SHOWN)
            .collect();
        if total > SHOWN {
            items.push(format!("and {} more", total - SHOWN));
        }
        Some(format!(
            "the call left what kleene refuses in its stage: {}",
            items.join("; ")
        ))
    }
}

/// A walk of the touched names, and the inputs it examined.
type TouchedWalk<'s, S> = (Walk<'s, S>, HashSet<&'s AdmittedPath>);

struct Walk<'s, S> {
    stage: &'s Stage,
    scratch: &'s S,
    /// The inputs by name: an unchanged input is recognised by one hash lookup, without
    /// admitting its path again or searching the ordered map.
    by_name: HashMap<&'s str, (&'s AdmittedPath, &'s Staged)>,
    seen: HashSet<&'s AdmittedPath>,
    written: BTreeMap<AdmittedPath, Vec<u8>>,
    refused: Vec<StageRefusal>,
    leftovers: Vec<Vec<u8>>,
    /// How many enclosing directories are leftovers already (their entries are not listed).
    inside_leftover: usize,
    /// The bytes the call may still write.
    room: u64,
    max_written_bytes: u64,
    /// Inputs whose identity moved while their bytes stayed: recorded anew for the next walk.
    refreshed: Vec<(AdmittedPath, FileIdentity)>,
}

/// Whether an error reading the stage is the call's doing (permissions it set, or something
/// it removed or replaced), not the host's: those are refused as what the call left, while
/// the rest (an I/O error, no memory, no file descriptors) stops the walk.
fn left_by_the_call(errno: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    matches!(
        errno,
        Errno::ACCESS | Errno::PERM | Errno::NOENT | Errno::NOTDIR | Errno::LOOP
    )
}

/// The free bytes below which a stage's file system counts as full ([`Stage::nearly_full`]):
/// 1 MiB, room for any command's output and kleene's own small writes.
pub const FULL_DISK_MARGIN: u64 = 1 << 20;

/// How deep the walk descends: far below what an admitted path can reach, so a deeper tree
/// is refused by name instead of exhausting file descriptors.
const MAX_DEPTH: usize = 128;

impl<'s, S: ScratchRule> Walk<'s, S> {
    /// A walk of `stage` that recognises `inputs` (all of them, or those it may meet).
    fn new(
        stage: &'s Stage,
        scratch: &'s S,
        max_written_bytes: u64,
        inputs: impl Iterator<Item = (&'s AdmittedPath, &'s Staged)>,
    ) -> Self {
        let by_name: HashMap<&'s str, (&'s AdmittedPath, &'s Staged)> =
            inputs.map(|(p, s)| (p.as_str(), (p, s))).collect();
        Self {
            stage,
            scratch,
            seen: HashSet::with_capacity(by_name.len()),
            by_name,
            written: BTreeMap::new(),
            refused: Vec::new(),
            leftovers: Vec::new(),
            inside_leftover: 0,
            room: max_written_bytes,
            max_written_bytes,
            refreshed: Vec::new(),
        }
    }

    fn place(&self, rel: &str) -> PathBuf {
        self.stage.root.join(rel)
    }

    fn leftover(&mut self, raw: Vec<u8>) {
        if self.inside_leftover == 0 {
            self.leftovers.push(raw);
        }
    }

    fn unreadable(&mut self, path: String, errno: rustix::io::Errno) {
        self.refused.push(StageRefusal::Unreadable {
            path,
            reason: io::Error::from(errno).to_string(),
        });
    }

    /// Whether an input lies beneath the directory `dir`.
    fn holds_inputs(&self, dir: &str) -> bool {
        let Ok(dir) = AdmittedPath::admit(dir) else {
            return false;
        };
        self.stage
            .inputs
            .range::<AdmittedPath, _>(&dir..)
            .next()
            .is_some_and(|(p, _)| p.starts_with(&dir) && *p != dir)
    }

    fn dir(&mut self, fd: &OwnedFd, prefix: &str, raw_prefix: &[u8]) -> Result<(), StageError> {
        let dir = Dir::read_from(fd).map_err(|e| StageError::io(&self.place(prefix))(e.into()))?;
        let mut names: Vec<std::ffi::CString> = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|e| StageError::io(&self.place(prefix))(e.into()))?;
            let name = entry.file_name();
            if name.to_bytes() != b"." && name.to_bytes() != b".." {
                names.push(name.to_owned());
            }
        }
        // Sorted, so refusals are listed in a stable order.
        names.sort_unstable();
        self.entries(fd, prefix, raw_prefix, names)
    }

    /// Classifies the entries `names` of the directory `fd` (at `prefix`, whose raw bytes are
    /// `raw_prefix`); a name that is not there is not there.
    fn entries(
        &mut self,
        fd: &OwnedFd,
        prefix: &str,
        raw_prefix: &[u8],
        names: Vec<std::ffi::CString>,
    ) -> Result<(), StageError> {
        let depth = prefix.split('/').filter(|c| !c.is_empty()).count();
        for c_name in names {
            let name = c_name.to_bytes();
            let shown = escape(name);
            let rel = if prefix.is_empty() {
                shown.into_owned()
            } else {
                let mut rel = String::with_capacity(prefix.len() + 1 + shown.len());
                rel.push_str(prefix);
                rel.push('/');
                rel.push_str(&shown);
                rel
            };
            let raw = || {
                if raw_prefix.is_empty() {
                    name.to_vec()
                } else {
                    [raw_prefix, b"/", name].concat()
                }
            };
            let st = match rustix::fs::statat(fd, &c_name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                // Removed between listing and looking: it is not there.
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) if left_by_the_call(e) => {
                    self.unreadable(rel, e);
                    continue;
                }
                Err(e) => return Err(StageError::io(&self.place(&rel))(e.into())),
            };
            match FileType::from_raw_mode(st.st_mode as _) {
                FileType::Directory => {
                    // A directory that holds no input goes whole when the stage is reused.
                    // An escaped name (not UTF-8, a control character) is never admitted, so
                    // it never holds an input, and it is never one.
                    let holds = self.holds_inputs(&rel);
                    let raw = raw();
                    if !holds {
                        self.leftover(raw.clone());
                        self.inside_leftover += 1;
                    }
                    let walked = self.subdir(fd, &c_name, &rel, &raw, depth);
                    if !holds {
                        self.inside_leftover -= 1;
                    }
                    walked?;
                }
                FileType::RegularFile => {
                    if !self.regular(fd, &c_name, rel, &raw, &st)? {
                        self.leftover(raw());
                    }
                }
                other => {
                    self.leftover(raw());
                    if self.scratch.is_scratch(&rel) {
                        continue;
                    }
                    if other == FileType::Symlink {
                        let target = rustix::fs::readlinkat(fd, &c_name, Vec::new())
                            .map(|t| escape(t.as_bytes()).into_owned())
                            .unwrap_or_else(|_| "(unreadable)".to_owned());
                        self.refused
                            .push(StageRefusal::Symlink { path: rel, target });
                    } else {
                        let kind = match other {
                            FileType::Fifo => "FIFO",
                            FileType::Socket => "socket",
                            FileType::CharacterDevice => "character device",
                            FileType::BlockDevice => "block device",
                            _ => "file of unknown type",
                        };
                        self.refused
                            .push(StageRefusal::SpecialFile { path: rel, kind });
                    }
                }
            }
        }
        Ok(())
    }

    fn subdir(
        &mut self,
        fd: &OwnedFd,
        c_name: &CStr,
        rel: &str,
        raw: &[u8],
        depth: usize,
    ) -> Result<(), StageError> {
        if self.scratch.covers_dir(rel) {
            return Ok(());
        }
        if depth + 1 > MAX_DEPTH {
            self.refused.push(StageRefusal::Unnameable {
                path: rel.to_owned(),
                reason: format!("nested deeper than {MAX_DEPTH} directories"),
            });
            return Ok(());
        }
        let child = match rustix::fs::openat(
            fd,
            c_name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(child) => child,
            Err(e) if left_by_the_call(e) => {
                self.unreadable(rel.to_owned(), e);
                return Ok(());
            }
            Err(e) => return Err(StageError::io(&self.place(rel))(e.into())),
        };
        self.dir(&child, rel, raw)
    }

    /// Classifies a regular file (`rel` its path as shown, `raw` its bytes); returns whether
    /// it is an input, unchanged.
    fn regular(
        &mut self,
        fd: &OwnedFd,
        c_name: &CStr,
        rel: String,
        raw: &impl Fn() -> Vec<u8>,
        st: &Stat,
    ) -> Result<bool, StageError> {
        if self.scratch.is_scratch(&rel) {
            return Ok(false);
        }
        // Most files of a stage are its unchanged inputs: recognised by name and identity.
        if let Some(&(path, staged)) = self.by_name.get(rel.as_str()) {
            if staged.identity == Some(identity(st)) {
                self.seen.insert(path);
                return Ok(true);
            }
            self.file(fd, c_name, path, staged.digest)?;
            let unchanged = self.seen.contains(path) && !self.written.contains_key(path);
            if unchanged {
                // Its bytes stayed: the next walk recognises it by what it is now.
                self.refreshed.push((path.clone(), identity(st)));
            }
            return Ok(unchanged);
        }
        // Admitted from its own bytes: `rel` is escaped where the name has a control
        // character, and the escape's backslash is not what is wrong with it.
        let raw = raw();
        let path = match std::str::from_utf8(&raw).map(AdmittedPath::admit) {
            Ok(Ok(path)) => path,
            Err(_) => {
                self.refused.push(StageRefusal::Unnameable {
                    path: rel,
                    reason: "the name is not UTF-8".to_owned(),
                });
                return Ok(false);
            }
            Ok(Err(e)) => {
                self.refused.push(StageRefusal::Unnameable {
                    path: rel,
                    reason: e.to_string(),
                });
                return Ok(false);
            }
        };
        // Not an input (an input's name is admitted, so it was found above): a new file.
        self.read_new(fd, c_name, path)?;
        Ok(false)
    }

    /// An input whose identity changed: unchanged when its bytes still hash to its digest.
    /// It is hashed as it is read, so an unchanged input costs no memory and no room.
    fn file(
        &mut self,
        dir: &OwnedFd,
        name: &CStr,
        path: &'s AdmittedPath,
        digest: Digest,
    ) -> Result<(), StageError> {
        let Some(mut file) = self.open(dir, name, path)? else {
            return Ok(());
        };
        let mut hasher = blake3::Hasher::new();
        hasher
            .update_reader(&file)
            .and_then(|_| file.rewind())
            .map_err(StageError::io(&self.place(path.as_str())))?;
        if Digest::from(hasher.finalize()) == digest {
            self.seen.insert(path);
            return Ok(());
        }
        let Some(content) = self.take(file, path)? else {
            return Ok(());
        };
        self.seen.insert(path);
        self.written.insert(path.clone(), content);
        Ok(())
    }

    /// A file that is not an input: written by the call.
    fn read_new(
        &mut self,
        dir: &OwnedFd,
        name: &CStr,
        path: AdmittedPath,
    ) -> Result<(), StageError> {
        if let Some(content) = self.read(dir, name, &path)? {
            self.written.insert(path, content);
        }
        Ok(())
    }

    /// The regular file `name` in `dir`, opened; `None` (and a refusal) when it turned into
    /// a link between the look and the open.
    fn open(
        &mut self,
        dir: &OwnedFd,
        name: &CStr,
        path: &AdmittedPath,
    ) -> Result<Option<fs::File>, StageError> {
        match rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Some(fs::File::from(fd))),
            Err(rustix::io::Errno::LOOP) => {
                self.refused.push(StageRefusal::Symlink {
                    path: path.as_str().to_owned(),
                    target: "(changed while kleene read it)".to_owned(),
                });
                Ok(None)
            }
            Err(e) if left_by_the_call(e) => {
                self.unreadable(path.as_str().to_owned(), e);
                Ok(None)
            }
            Err(e) => Err(StageError::io(&self.place(path.as_str()))(e.into())),
        }
    }

    /// The bytes of the regular file `name` in `dir`, when they fit the room left; `None`
    /// (and a refusal) when they do not, or when it turned into a link.
    fn read(
        &mut self,
        dir: &OwnedFd,
        name: &CStr,
        path: &AdmittedPath,
    ) -> Result<Option<Vec<u8>>, StageError> {
        match self.open(dir, name, path)? {
            Some(file) => self.take(file, path),
            None => Ok(None),
        }
    }

    /// The bytes of the opened file at `path`, when they fit the room left; `None` (and a
    /// refusal) when they do not.
    fn take(&mut self, file: fs::File, path: &AdmittedPath) -> Result<Option<Vec<u8>>, StageError> {
        let place = self.place(path.as_str());
        let size = file.metadata().map_err(StageError::io(&place))?.len();
        let too_large = |bytes| StageRefusal::TooLarge {
            path: path.as_str().to_owned(),
            bytes,
            limit: self.max_written_bytes,
        };
        if size > self.room {
            self.refused.push(too_large(size));
            return Ok(None);
        }
        let mut content = Vec::new();
        // Read no more than the room left (and one byte to tell), should the file grow.
        file.take(self.room.saturating_add(1))
            .read_to_end(&mut content)
            .map_err(StageError::io(&place))?;
        let read = content.len() as u64;
        if read > self.room {
            self.refused.push(too_large(read));
            return Ok(None);
        }
        self.room -= read;
        Ok(Some(content))
    }
}

/// The walk of [`Stage::reuse`]: keeps unchanged inputs that are wanted again, removes the
/// rest, never following a link.
struct Sweep<'s> {
    root: &'s Path,
    old: &'s BTreeMap<AdmittedPath, Staged>,
    wanted: &'s BTreeMap<&'s AdmittedPath, Digest>,
    kept: &'s mut BTreeMap<AdmittedPath, Staged>,
}

impl Sweep<'_> {
    fn fail(&self, rel: &str) -> impl FnOnce(rustix::io::Errno) -> StageError + '_ {
        let place = self.root.join(rel);
        move |e| StageError::io(&place)(e.into())
    }

    /// Sweeps the directory `fd` (at `prefix`); returns whether it still holds anything.
    fn dir(&mut self, fd: &OwnedFd, prefix: &str) -> Result<bool, StageError> {
        let mut names: Vec<Vec<u8>> = Vec::new();
        for entry in Dir::read_from(fd).map_err(self.fail(prefix))? {
            let entry = entry.map_err(self.fail(prefix))?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(name.to_vec());
            }
        }
        let mut holds = false;
        for name in names {
            let Ok(c_name) = std::ffi::CString::new(name.clone()) else {
                continue;
            };
            let rel = match std::str::from_utf8(&name) {
                Ok(n) if prefix.is_empty() => n.to_owned(),
                Ok(n) => format!("{prefix}/{n}"),
                // Never an input: removed below whatever it is.
                Err(_) => String::new(),
            };
            let st = match rustix::fs::statat(fd, &c_name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(self.fail(&rel)(e)),
            };
            match FileType::from_raw_mode(st.st_mode as _) {
                FileType::Directory => {
                    let child = rustix::fs::openat(
                        fd,
                        &c_name,
                        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                    .map_err(self.fail(&rel))?;
                    // A directory the call left without write or search permission.
                    let _ = rustix::fs::fchmod(&child, Mode::from_raw_mode(0o755));
                    if self.dir(&child, &rel)? {
                        holds = true;
                    } else {
                        rustix::fs::unlinkat(fd, &c_name, AtFlags::REMOVEDIR)
                            .map_err(self.fail(&rel))?;
                    }
                }
                FileType::RegularFile if !rel.is_empty() => {
                    let keep = AdmittedPath::admit(&rel).ok().and_then(|path| {
                        let old = self.old.get(&path)?;
                        let same = self.wanted.get(&path) == Some(&old.digest)
                            && old.identity == Some(identity(&st));
                        same.then(|| (path, old.clone()))
                    });
                    match keep {
                        Some((path, staged)) => {
                            self.kept.insert(path, staged);
                            holds = true;
                        }
                        None => rustix::fs::unlinkat(fd, &c_name, AtFlags::empty())
                            .map_err(self.fail(&rel))?,
                    }
                }
                _ => {
                    rustix::fs::unlinkat(fd, &c_name, AtFlags::empty()).map_err(self.fail(&rel))?
                }
            }
        }
        Ok(holds)
    }
}

/// Removes the entry at the raw relative path `raw` beneath `root` (a whole tree for a
/// directory), opening every parent with `O_NOFOLLOW`; an entry already gone is fine, a
/// parent that is no longer a directory is an error (the caller starts a fresh stage).
fn remove_beneath(root: &OwnedFd, raw: &[u8], shown: &Path) -> Result<(), StageError> {
    beneath(root, raw, remove_entry).map_err(|e| StageError::io(shown)(e.into()))
}

/// The directory `rel` beneath `root`, every component opened with `O_NOFOLLOW`.
fn open_dir_beneath(root: &OwnedFd, rel: &str) -> Result<OwnedFd, rustix::io::Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut components = rel.split('/');
    let first = components.next().unwrap_or(".");
    let mut fd = rustix::fs::openat(root, first, flags, Mode::empty())?;
    for component in components {
        fd = rustix::fs::openat(&fd, component, flags, Mode::empty())?;
    }
    Ok(fd)
}

/// Runs `op` on the entry at the raw relative path `raw` beneath `root`, in its parent opened
/// with `O_NOFOLLOW` at every component; an entry (or parent) already gone is fine.
fn beneath(
    root: &OwnedFd,
    raw: &[u8],
    op: impl FnOnce(&OwnedFd, &CStr) -> Result<(), rustix::io::Errno>,
) -> Result<(), rustix::io::Errno> {
    let mut parts: Vec<&[u8]> = raw.split(|&b| b == b'/').collect();
    let Some(last) = parts.pop() else {
        return Ok(());
    };
    let mut dir: Option<OwnedFd> = None;
    for part in parts {
        let Ok(name) = std::ffi::CString::new(part) else {
            return Ok(());
        };
        let parent = dir.as_ref().unwrap_or(root);
        match rustix::fs::openat(
            parent,
            &name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => dir = Some(fd),
            Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    let parent = dir.as_ref().unwrap_or(root);
    let Ok(name) = std::ffi::CString::new(last) else {
        return Ok(());
    };
    op(parent, &name)
}

/// Removes `name` in `dir`: a file or link by unlinking it, a directory with everything in it.
fn remove_entry(dir: &OwnedFd, name: &CStr) -> Result<(), rustix::io::Errno> {
    let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    if FileType::from_raw_mode(st.st_mode as _) == FileType::Directory {
        let child = rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        // A directory the call left without write or search permission.
        let _ = rustix::fs::fchmod(&child, Mode::from_raw_mode(0o755));
        let mut names = Vec::new();
        for entry in Dir::read_from(&child)? {
            let entry = entry?;
            let n = entry.file_name();
            if n.to_bytes() != b"." && n.to_bytes() != b".." {
                names.push(n.to_owned());
            }
        }
        for n in names {
            remove_entry(&child, &n)?;
        }
        rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)
    } else {
        match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
            Err(rustix::io::Errno::NOENT) => Ok(()),
            other => other,
        }
    }
}

/// Removes the now-empty directories above `path` (best effort; a non-empty one stops it).
fn prune_empty_parents(root: &OwnedFd, path: &str) {
    let mut parts: Vec<&str> = path.split('/').collect();
    parts.pop();
    while !parts.is_empty() {
        let joined = parts.join("/");
        // A directory already gone leaves its parent to prune; any other failure (not
        // empty, not a directory) ends the pruning.
        let removed = beneath(
            root,
            joined.as_bytes(),
            |dir, name| match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
                Err(rustix::io::Errno::NOENT) => Ok(()),
                other => other,
            },
        );
        if removed.is_err() {
            return;
        }
        parts.pop();
    }
}

/// A name as text: UTF-8 stays as it is except control characters and backslashes, which are
/// escaped, as are bytes that are not UTF-8 (`\xff`).
fn escape(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes)
        && !text.chars().any(|c| c.is_control() || c == '\\')
    {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() || c == '\\' {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;

    fn p(s: &str) -> AdmittedPath {
        AdmittedPath::admit(s).unwrap()
    }

    fn setup() -> (tempfile::TempDir, ObjectStore) {
        let tmp = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(tmp.path().join("objects")).unwrap();
        (tmp, store)
    }

    /// Within a limit, files are taken in the walk's order until the next would pass it;
    /// that one and every later one that does not fit is refused unread (a sparse file of a
    /// terabyte costs nothing), and an input rewritten with its own bytes is free.
    #[test]
    fn files_past_the_written_bytes_limit_are_refused_unread() {
        let (tmp, store) = setup();
        let input = p("in.txt");
        let stage = Stage::prepare(
            tmp.path().join("s"),
            &store,
            [StageInput::new(&input, &[b'i'; 40])],
        )
        .unwrap();
        let root = stage.root().to_owned();
        fs::remove_file(root.join("in.txt")).unwrap();
        fs::write(root.join("in.txt"), [b'i'; 40]).unwrap();
        fs::write(root.join("a.txt"), [b'a'; 30]).unwrap();
        fs::write(root.join("b.txt"), [b'b'; 30]).unwrap();
        fs::write(root.join("c.txt"), [b'c'; 20]).unwrap();
        fs::File::create(root.join("huge.bin"))
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        let changes = stage.changes_within(&(), 50).unwrap();
        let written: Vec<&str> = changes.written().keys().map(AdmittedPath::as_str).collect();
        assert_eq!(written, ["a.txt", "c.txt"]);
        let refused: Vec<(&str, u64)> = changes
            .refused()
            .iter()
            .map(|r| match r {
                StageRefusal::TooLarge {
                    path,
                    bytes,
                    limit: 50,
                } => (path.as_str(), *bytes),
                other => panic!("{other}"),
            })
            .collect();
        assert_eq!(refused, [("b.txt", 30), ("huge.bin", 1 << 40)]);
        assert!(changes.deleted().is_empty());
        assert!(
            changes.refused()[0]
                .to_string()
                .contains("mark build output as scratch")
        );
        // Without a limit, the same walk reads them all.
        fs::remove_file(root.join("huge.bin")).unwrap();
        assert_eq!(stage.changes(&()).unwrap().written().len(), 3);
    }

    #[test]
    fn a_new_stage_holds_exactly_its_inputs_and_reports_no_change() {
        let (tmp, store) = setup();
        let (a, b) = (p("a/one.txt"), p("b/c/two.txt"));
        let stage = Stage::prepare(
            tmp.path().join("s"),
            &store,
            [StageInput::new(&a, b"1"), StageInput::new(&b, b"2")],
        )
        .unwrap();
        assert_eq!(fs::read(stage.root().join("a/one.txt")).unwrap(), b"1");
        let changes = stage.changes(&()).unwrap();
        assert!(changes.written().is_empty(), "{changes:?}");
        assert!(changes.deleted().is_empty() && changes.refused().is_empty());
    }

    #[test]
    fn created_changed_and_deleted_files_are_reported() {
        let (tmp, store) = setup();
        let (a, b) = (p("a.txt"), p("b.txt"));
        let stage = Stage::prepare(
            tmp.path().join("s"),
            &store,
            [StageInput::new(&a, b"1"), StageInput::new(&b, b"2")],
        )
        .unwrap();
        // Replace a (new inode, same name) with other bytes; delete b; create c.
        fs::remove_file(stage.root().join("a.txt")).unwrap();
        fs::write(stage.root().join("a.txt"), "changed").unwrap();
        fs::remove_file(stage.root().join("b.txt")).unwrap();
        fs::create_dir(stage.root().join("d")).unwrap();
        fs::write(stage.root().join("d/c.txt"), "new").unwrap();
        let changes = stage.changes(&()).unwrap();
        let written: Vec<_> = changes.written().keys().map(|p| p.as_str()).collect();
        assert_eq!(written, ["a.txt", "d/c.txt"]);
        assert_eq!(changes.deleted(), [p("b.txt")]);
    }

    #[test]
    fn rewriting_the_same_bytes_is_no_change() {
        let (tmp, store) = setup();
        let a = p("a.txt");
        let stage =
            Stage::prepare(tmp.path().join("s"), &store, [StageInput::new(&a, b"same")]).unwrap();
        fs::remove_file(stage.root().join("a.txt")).unwrap();
        fs::write(stage.root().join("a.txt"), "same").unwrap();
        let changes = stage.changes(&()).unwrap();
        assert!(changes.written().is_empty() && changes.deleted().is_empty());
    }

    #[test]
    fn an_in_place_write_through_the_link_is_seen() {
        let (tmp, store) = setup();
        let a = p("a.txt");
        let stage =
            Stage::prepare(tmp.path().join("s"), &store, [StageInput::new(&a, b"1")]).unwrap();
        let target = stage.root().join("a.txt");
        // Root ignores the read-only mode; make it writable for every user running the test.
        fs::set_permissions(&target, fs::Permissions::from_mode(0o644)).unwrap();
        fs::OpenOptions::new()
            .append(true)
            .open(&target)
            .unwrap()
            .write_all(b"2")
            .unwrap();
        let changes = stage.changes(&()).unwrap();
        assert_eq!(
            changes.written().get(&a).map(Vec::as_slice),
            Some(&b"12"[..])
        );
        // The object is damaged too; forgetting it makes the next stage get the true bytes.
        let digest = stage.input_digest(&a).unwrap();
        store.forget(&digest).unwrap();
        let next =
            Stage::prepare(tmp.path().join("s2"), &store, [StageInput::new(&a, b"1")]).unwrap();
        assert_eq!(fs::read(next.root().join("a.txt")).unwrap(), b"1");
    }

    #[test]
    fn symlinks_are_refused_and_never_followed() {
        let (tmp, store) = setup();
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("passwd"), "secret").unwrap();
        let stage = Stage::prepare(tmp.path().join("s"), &store, []).unwrap();
        std::os::unix::fs::symlink(&outside, stage.root().join("out")).unwrap();
        std::os::unix::fs::symlink(outside.join("passwd"), stage.root().join("file")).unwrap();
        let changes = stage.changes(&()).unwrap();
        assert!(changes.written().is_empty(), "{changes:?}");
        let paths: Vec<_> = changes
            .refused()
            .iter()
            .map(|r| match r {
                StageRefusal::Symlink { path, .. } => path.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(paths, ["file", "out"]);
    }

    #[test]
    fn unnameable_files_are_refused_by_name() {
        let (tmp, store) = setup();
        let stage = Stage::prepare(tmp.path().join("s"), &store, []).unwrap();
        let root = stage.root();
        fs::write(root.join("new\nline"), "x").unwrap();
        fs::write(root.join(".env"), "x").unwrap();
        fs::write(root.join(std::ffi::OsStr::from_bytes(b"bad\xffname")), "x").unwrap();
        let changes = stage.changes(&()).unwrap();
        let shown: Vec<String> = changes.refused().iter().map(ToString::to_string).collect();
        assert_eq!(changes.refused().len(), 3, "{shown:?}");
        assert!(shown.iter().any(|s| s.starts_with(".env ")), "{shown:?}");
        assert!(
            shown.iter().any(|s| s.starts_with("bad\\xffname ")),
            "{shown:?}"
        );
        // Named for what is wrong with it, not for the backslash its escape shows.
        assert!(
            shown
                .iter()
                .any(|s| s.starts_with("new\\nline ") && s.contains("control character")),
            "{shown:?}"
        );
        // Under a directory whose name is not UTF-8, every file is unnameable for that.
        let dir = root.join(std::ffi::OsStr::from_bytes(b"d\xfe"));
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("ok.txt"), "x").unwrap();
        let changes = stage.changes(&()).unwrap();
        let shown: Vec<String> = changes.refused().iter().map(ToString::to_string).collect();
        assert!(
            shown
                .iter()
                .any(|s| s.starts_with("d\\xfe/ok.txt ") && s.contains("not UTF-8")),
            "{shown:?}"
        );
    }

    /// A call that removes or replaces its own stage is refused for it (its failure, so
    /// it counts), never reported as the host failing to read the stage; its inputs count
    /// as deleted, and nothing is read through a stage replaced by a link.
    #[test]
    fn a_stage_removed_or_replaced_by_its_call_is_refused() {
        let (tmp, store) = setup();
        let input = AdmittedPath::admit("app/MODULE").unwrap();
        let outside = tmp.path().join("outside");
        fs::create_dir_all(outside.join("app")).unwrap();
        fs::write(outside.join("app/MODULE"), "not staged").unwrap();
        for (n, replace) in ["removed", "a file", "a link"].into_iter().enumerate() {
            let stage = Stage::prepare(
                tmp.path().join(format!("s{n}")),
                &store,
                [StageInput::new(&input, b"m")],
            )
            .unwrap();
            let root = stage.root().to_owned();
            fs::remove_dir_all(&root).unwrap();
            match replace {
                "a file" => fs::write(&root, "x").unwrap(),
                "a link" => std::os::unix::fs::symlink(&outside, &root).unwrap(),
                _ => {}
            }
            let changes = stage.changes(&()).unwrap();
            assert!(changes.written().is_empty(), "{replace}");
            assert_eq!(changes.deleted(), std::slice::from_ref(&input), "{replace}");
            assert!(
                matches!(changes.refused(), [StageRefusal::Unreadable { path, .. }] if path.is_empty()),
                "{replace}: {:?}",
                changes.refused()
            );
            assert!(
                changes.refused()[0]
                    .to_string()
                    .starts_with("the stage itself cannot be read"),
                "{replace}"
            );
            // What replaced it is removed; what a link pointed to is left alone.
            stage.discard().unwrap();
            assert!(fs::symlink_metadata(&root).is_err(), "{replace}");
        }
        assert_eq!(fs::read(outside.join("app/MODULE")).unwrap(), b"not staged");
    }

    /// A directory or file the call made unreadable is refused by name where permissions
    /// bind kleene's user (root reads everything, so there is nothing to refuse).
    #[test]
    fn what_the_call_made_unreadable_is_refused_by_name() {
        let (tmp, store) = setup();
        let stage = Stage::prepare(tmp.path().join("s"), &store, []).unwrap();
        let root = stage.root();
        fs::create_dir_all(root.join("app/locked")).unwrap();
        fs::write(root.join("app/locked/f"), "x").unwrap();
        fs::write(root.join("app/closed"), "x").unwrap();
        fs::write(root.join("app/ok"), "x").unwrap();
        fs::set_permissions(root.join("app/locked"), fs::Permissions::from_mode(0o000)).unwrap();
        fs::set_permissions(root.join("app/closed"), fs::Permissions::from_mode(0o000)).unwrap();
        let changes = stage.changes(&()).unwrap();
        // Read anyway: this user is not bound by permissions (root, or CAP_DAC_OVERRIDE).
        if fs::read(root.join("app/closed")).is_ok() {
            assert!(changes.refused().is_empty(), "{:?}", changes.refused());
        } else {
            let shown: Vec<String> = changes.refused().iter().map(ToString::to_string).collect();
            assert_eq!(
                shown,
                [
                    "app/closed cannot be read: Permission denied (os error 13)",
                    "app/locked cannot be read: Permission denied (os error 13)",
                ]
            );
            assert_eq!(
                changes
                    .written()
                    .keys()
                    .map(AdmittedPath::as_str)
                    .collect::<Vec<_>>(),
                ["app/ok"]
            );
        }
        stage.discard().unwrap();
    }

    /// The one-line summary names the deleted inputs, then the refusals, the first twenty,
    /// and counts the rest.
    #[test]
    fn the_refusal_summary_names_twenty_and_counts_the_rest() {
        let (tmp, store) = setup();
        let input = AdmittedPath::admit("in.txt").unwrap();
        let stage = Stage::prepare(
            tmp.path().join("s"),
            &store,
            [StageInput::new(&input, b"i")],
        )
        .unwrap();
        fs::remove_file(stage.root().join("in.txt")).unwrap();
        for i in 0..24 {
            std::os::unix::fs::symlink("/etc/passwd", stage.root().join(format!("l{i:02}")))
                .unwrap();
        }
        let summary = stage.changes(&()).unwrap().refusal_summary().unwrap();
        assert!(
            summary.starts_with(
                "the call left what kleene refuses in its stage: deletes in.txt, one of its inputs"
            ),
            "{summary}"
        );
        assert!(summary.contains("l18 is a symbolic link"), "{summary}");
        assert!(!summary.contains("l19"), "{summary}");
        assert!(summary.ends_with("; and 5 more"), "{summary}");
        assert_eq!(summary.lines().count(), 1);
    }

    #[test]
    fn special_files_are_refused() {
        let (tmp, store) = setup();
        let stage = Stage::prepare(tmp.path().join("s"), &store, []).unwrap();
        let fifo = stage.root().join("pipe");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let changes = stage.changes(&()).unwrap();
        assert!(matches!(
            changes.refused(),
            [StageRefusal::SpecialFile { kind: "FIFO", .. }]
        ));
    }

    struct Target;
    impl ScratchRule for Target {
        fn is_scratch(&self, path: &str) -> bool {
            path.starts_with("target/") || path.ends_with(".pyc")
        }
        fn covers_dir(&self, dir: &str) -> bool {
            dir == "target"
        }
    }

    #[test]
    fn scratch_is_ignored_even_when_it_holds_links() {
        let (tmp, store) = setup();
        let stage = Stage::prepare(tmp.path().join("s"), &store, []).unwrap();
        fs::create_dir_all(stage.root().join("target/debug")).unwrap();
        fs::write(stage.root().join("target/debug/x"), "bin").unwrap();
        std::os::unix::fs::symlink("/etc", stage.root().join("target/etc")).unwrap();
        fs::write(stage.root().join("m.pyc"), "b").unwrap();
        let changes = stage.changes(&Target).unwrap();
        assert!(changes.written().is_empty() && changes.refused().is_empty());
    }

    #[test]
    fn an_existing_stage_directory_is_refused_and_a_failed_one_removed() {
        let (tmp, store) = setup();
        let root = tmp.path().join("s");
        fs::create_dir(&root).unwrap();
        assert!(matches!(
            Stage::prepare(&root, &store, []),
            Err(StageError::Exists { .. })
        ));
        // Two inputs at the same path cannot both be linked: the half-made stage is removed.
        let a = p("a.txt");
        let other = tmp.path().join("s2");
        let err = Stage::prepare(
            &other,
            &store,
            [StageInput::new(&a, b"1"), StageInput::new(&a, b"2")],
        )
        .unwrap_err();
        assert!(err.io_error().is_some(), "{err}");
        assert!(!other.exists());
    }

    #[test]
    fn a_damaged_object_is_rewritten_from_the_true_bytes() {
        let (tmp, store) = setup();
        let a = p("a.txt");
        let digest = Digest::from(blake3::hash(b"true"));
        let object = store.dir().join(digest.to_string());
        fs::write(&object, "torn").unwrap();
        let stage = Stage::prepare(
            tmp.path().join("s"),
            &store,
            [StageInput::with_digest(&a, b"true", digest)],
        )
        .unwrap();
        assert_eq!(fs::read(stage.root().join("a.txt")).unwrap(), b"true");
    }

    #[test]
    fn discard_removes_everything_without_following_links() {
        let (tmp, store) = setup();
        let keep = tmp.path().join("keep");
        fs::create_dir(&keep).unwrap();
        fs::write(keep.join("f"), "x").unwrap();
        let stage = Stage::prepare(tmp.path().join("s"), &store, []).unwrap();
        std::os::unix::fs::symlink(&keep, stage.root().join("link")).unwrap();
        fs::create_dir(stage.root().join("ro")).unwrap();
        fs::set_permissions(stage.root().join("ro"), fs::Permissions::from_mode(0o500)).unwrap();
        let root = stage.root().to_owned();
        stage.discard().unwrap();
        assert!(!root.exists());
        assert!(keep.join("f").exists());
    }

    #[test]
    fn reuse_keeps_unchanged_inputs_and_removes_everything_else() {
        reuse_scenario(false);
    }

    #[test]
    fn reuse_after_a_walk_needs_no_second_walk_and_gives_the_same_stage() {
        reuse_scenario(true);
    }

    fn reuse_scenario(walk_first: bool) {
        let (tmp, store) = setup();
        let (a, b, c) = (p("out/a.txt"), p("out/b.txt"), p("c.txt"));
        let stage = Stage::prepare(
            tmp.path().join("s"),
            &store,
            [StageInput::new(&a, b"a"), StageInput::new(&b, b"b")],
        )
        .unwrap();
        let root = stage.root().to_owned();
        let kept_inode = fs::metadata(root.join("out/a.txt")).unwrap().ino();
        // What a call leaves: a new file, a changed input, a link, scratch and a new tree.
        fs::write(root.join("new.txt"), "n").unwrap();
        fs::remove_file(root.join("out/b.txt")).unwrap();
        fs::write(root.join("out/b.txt"), "changed").unwrap();
        std::os::unix::fs::symlink("/etc", root.join("link")).unwrap();
        fs::create_dir_all(root.join("target/debug/deep")).unwrap();
        fs::write(root.join("target/debug/deep/x"), "bin").unwrap();
        fs::create_dir_all(root.join("out/new")).unwrap();
        fs::write(root.join("out/new/y"), "y").unwrap();
        if walk_first {
            let changes = stage.changes(&()).unwrap();
            assert_eq!(changes.written().len(), 4, "{changes:?}");
        }
        let next = stage
            .reuse(
                &store,
                [
                    StageInput::new(&a, b"a"),
                    StageInput::new(&b, b"b"),
                    StageInput::new(&c, b"c"),
                ],
            )
            .unwrap();
        assert_eq!(fs::read(root.join("out/b.txt")).unwrap(), b"b");
        assert_eq!(fs::read(root.join("c.txt")).unwrap(), b"c");
        assert_eq!(
            fs::metadata(root.join("out/a.txt")).unwrap().ino(),
            kept_inode
        );
        let mut left: Vec<String> = walk_names(&root);
        left.sort();
        assert_eq!(left, ["c.txt", "out", "out/a.txt", "out/b.txt"]);
        let changes = next.changes(&()).unwrap();
        assert!(
            changes.written().is_empty() && changes.deleted().is_empty(),
            "{changes:?}"
        );
        assert!(changes.refused().is_empty());
        // Dropping an input removes it (and a directory it leaves empty).
        let last = next.reuse(&store, [StageInput::new(&c, b"c")]).unwrap();
        assert_eq!(walk_names(&root), ["c.txt"]);
        assert!(last.changes(&()).unwrap().written().is_empty());
    }

    fn walk_names(root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut todo = vec![root.to_owned()];
        while let Some(dir) = todo.pop() {
            for e in fs::read_dir(&dir).unwrap() {
                let e = e.unwrap();
                let rel = e
                    .path()
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                if e.file_type().unwrap().is_dir() {
                    todo.push(e.path());
                }
                out.push(rel);
            }
        }
        out.sort();
        out
    }

    #[test]
    fn escape_shows_every_byte() {
        assert_eq!(escape(b"a\tb\\c\xfe"), "a\\tb\\\\c\\xfe");
        assert_eq!(escape("ünï".as_bytes()), "ünï");
    }
    /// What a call can do to its stage, as a command would do it.
    #[derive(Debug, Clone)]
    enum Op {
        /// Writes a new file (or overwrites one) at one of a few names.
        Write(usize, u8),
        /// Writes an input in place (through its link), with other bytes or its own.
        InPlace(usize, bool),
        Delete(usize),
        Rename(usize, usize),
        /// Replaces an input by a new file moved over it (a new inode), same bytes or not.
        Replace(usize, bool),
        /// Writes an input through a hard link made elsewhere in the stage, then removes the
        /// link: only the input's inode can tell.
        AliasWrite(usize),
        MakeTree(usize),
        RemoveDir(usize),
        Symlink(usize),
        Chmod(usize),
        MoveDir(usize, usize),
    }

    const NAMES: [&str; 8] = [
        "out/f0",
        "out/f1",
        "out/sub/f2",
        "top",
        "new/x",
        "out/sub/f3",
        "target/t",
        "z/y/w",
    ];
    const DIRS: [&str; 4] = ["out", "out/sub", "new", "z"];

    fn op_strategy() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            (0..8usize, any::<u8>()).prop_map(|(i, b)| Op::Write(i, b)),
            (0..64usize, any::<bool>()).prop_map(|(i, same)| Op::InPlace(i, same)),
            (0..64usize).prop_map(Op::Delete),
            (0..64usize, 0..8usize).prop_map(|(i, j)| Op::Rename(i, j)),
            (0..64usize, any::<bool>()).prop_map(|(i, same)| Op::Replace(i, same)),
            (0..64usize).prop_map(Op::AliasWrite),
            (0..4usize).prop_map(Op::MakeTree),
            (0..4usize).prop_map(Op::RemoveDir),
            (0..8usize).prop_map(Op::Symlink),
            (0..64usize).prop_map(Op::Chmod),
            (0..4usize, 0..4usize).prop_map(|(i, j)| Op::MoveDir(i, j)),
        ]
    }

    /// Applies `op` to the stage at `root` holding `inputs`, ignoring what the file system
    /// refuses (a name that is not there, a parent that is a file): a command would too.
    fn apply(root: &Path, inputs: &[AdmittedPath], op: &Op) {
        let input =
            |i: usize| (!inputs.is_empty()).then(|| root.join(inputs[i % inputs.len()].as_str()));
        let put = |path: &Path, bytes: &[u8]| {
            if let Some(parent) = path.parent() {
                let _ = fs::create_dir_all(parent);
            }
            let _ = fs::write(path, bytes);
        };
        match op {
            Op::Write(i, b) => put(&root.join(NAMES[*i]), &[*b; 3]),
            Op::InPlace(i, same) => {
                if let Some(path) = input(*i) {
                    let bytes = fs::read(&path).unwrap_or_default();
                    let bytes = if *same {
                        bytes
                    } else {
                        [bytes, b"+".to_vec()].concat()
                    };
                    let _ = fs::OpenOptions::new()
                        .write(true)
                        .truncate(true)
                        .open(&path)
                        .and_then(|mut f| f.write_all(&bytes));
                }
            }
            Op::Delete(i) => {
                if let Some(path) = input(*i) {
                    let _ = fs::remove_file(path);
                }
            }
            Op::Rename(i, j) => {
                if let Some(path) = input(*i) {
                    let to = root.join(NAMES[*j]);
                    if let Some(parent) = to.parent() {
                        let _ = fs::create_dir_all(parent);
                    }
                    let _ = fs::rename(path, to);
                }
            }
            Op::Replace(i, same) => {
                if let Some(path) = input(*i) {
                    let bytes = fs::read(&path).unwrap_or_default();
                    let bytes = if *same { bytes } else { b"replaced".to_vec() };
                    let tmp = root.join("replacement.tmp");
                    let _ = fs::write(&tmp, bytes).and_then(|()| fs::rename(&tmp, &path));
                }
            }
            Op::AliasWrite(i) => {
                if let Some(path) = input(*i) {
                    let alias = root.join("alias.tmp");
                    if fs::hard_link(&path, &alias).is_ok() {
                        let _ = fs::OpenOptions::new()
                            .append(true)
                            .open(&alias)
                            .and_then(|mut f| f.write_all(b"!"));
                        let _ = fs::remove_file(&alias);
                    }
                }
            }
            Op::MakeTree(d) => {
                put(&root.join(DIRS[*d]).join("deep/t1"), b"t1");
                put(&root.join(DIRS[*d]).join("t2"), b"t2");
            }
            Op::RemoveDir(d) => {
                let _ = fs::remove_dir_all(root.join(DIRS[*d]));
            }
            Op::Symlink(i) => {
                let _ = std::os::unix::fs::symlink("/etc", root.join(NAMES[*i]));
            }
            Op::Chmod(i) => {
                if let Some(path) = input(*i) {
                    let _ = fs::set_permissions(path, fs::Permissions::from_mode(0o600));
                }
            }
            Op::MoveDir(i, j) => {
                let _ = fs::rename(root.join(DIRS[*i]), root.join(DIRS[*j]).join("moved"));
            }
        }
    }

    /// A sorted, comparable form of what a walk found.
    type Summary = (Vec<(String, Vec<u8>)>, Vec<String>, Vec<String>);

    fn summary(c: &StageChanges) -> Summary {
        let mut refused: Vec<String> = c.refused().iter().map(ToString::to_string).collect();
        refused.sort();
        (
            c.written()
                .iter()
                .map(|(p, b)| (p.as_str().to_owned(), b.clone()))
                .collect(),
            c.deleted().iter().map(|p| p.as_str().to_owned()).collect(),
            refused,
        )
    }

    struct TargetScratch;
    impl ScratchRule for TargetScratch {
        fn is_scratch(&self, path: &str) -> bool {
            path.starts_with("target/")
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 128, ..Default::default() })]

        /// For all sequences of calls, each doing anything a command can do to its stage
        /// (write, rewrite in place or through another link, delete, rename, replace, make
        /// and remove trees, plant links, change modes, move directories), the walk of the
        /// names the kernel says were touched finds exactly what a walk of the whole stage
        /// finds, and the reused stage holds exactly its next inputs.
        #[test]
        fn the_walk_of_touched_names_finds_what_a_whole_walk_finds(
            calls in proptest::collection::vec(proptest::collection::vec(op_strategy(), 0..6), 1..6),
        ) {
            let (tmp, store) = setup();
            let first = [(p("out/f0"), b"zero".to_vec()), (p("out/sub/f2"), b"two".to_vec()), (p("top"), b"zero".to_vec())];
            let mut inputs: BTreeMap<AdmittedPath, Vec<u8>> = first.into_iter().collect();
            let staged = |inputs: &BTreeMap<AdmittedPath, Vec<u8>>| -> Vec<(AdmittedPath, Vec<u8>)> {
                inputs.iter().map(|(p, c)| (p.clone(), c.clone())).collect()
            };
            let now = staged(&inputs);
            let mut stage = Stage::prepare(
                tmp.path().join("s"),
                &store,
                now.iter().map(|(p, c)| StageInput::new(p, c)),
            ).unwrap();
            // A first call with nothing done, so the stage is reused and tracked from here on.
            stage.changes(&TargetScratch).unwrap();
            stage = stage.reuse(&store, now.iter().map(|(p, c)| StageInput::new(p, c))).unwrap();
            for ops in &calls {
                let root = stage.root().to_owned();
                let held: Vec<AdmittedPath> = inputs.keys().cloned().collect();
                for op in ops {
                    apply(&root, &held, op);
                }
                let tracked = stage.changes(&TargetScratch).unwrap();
                let whole = stage.changes_whole(&TargetScratch).unwrap();
                proptest::prop_assert_eq!(summary(&tracked), summary(&whole), "after {:?}", ops);
                // What a caller does with changed inputs: their objects may be damaged.
                for path in tracked.written().keys().chain(tracked.deleted()) {
                    if let Some(digest) = stage.input_digest(path) {
                        let _ = store.forget(&digest);
                    }
                }
                // The next call's inputs: this call's output where it was clean.
                if tracked.refused().is_empty() {
                    for path in tracked.deleted() {
                        inputs.remove(path);
                    }
                    for (path, bytes) in tracked.written() {
                        inputs.insert(path.clone(), bytes.clone());
                    }
                    // Owned paths never nest: a file whose directory is also a file is left out.
                    let names: Vec<AdmittedPath> = inputs.keys().cloned().collect();
                    inputs.retain(|p, _| !names.iter().any(|q| q != p && p.as_str().starts_with(&format!("{}/", q.as_str()))));
                }
                let next = staged(&inputs);
                stage = stage.reuse(&store, next.iter().map(|(p, c)| StageInput::new(p, c))).unwrap();
                let fresh = stage.changes_whole(&TargetScratch).unwrap();
                proptest::prop_assert!(
                    fresh.written().is_empty() && fresh.deleted().is_empty() && fresh.refused().is_empty(),
                    "the reused stage is not its inputs: {:?}", fresh
                );
                for (path, bytes) in &next {
                    proptest::prop_assert_eq!(&fs::read(root.join(path.as_str())).unwrap(), bytes);
                }
            }
        }
    }
}
