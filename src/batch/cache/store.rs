//! Where accepted results are kept: the [`ActionCache`] trait a run consults, a cache in
//! memory, and a cache in a directory whose every read is checked.
//!
//! ```
//! # use std::collections::BTreeMap;
//! # use kleene::batch::Candidate;
//! # use kleene::batch::candidate::AcceptedOutput;
//! # use kleene::batch::cache::{ActionKeyParts, CachedResult, Provenance};
//! # use kleene::id::{ChannelId, Digest, TaskId};
//! # use kleene::plan::AdmittedPath;
//! use kleene::batch::cache::{ActionCache, FileCache, Lookup};
//! # let plan = kleene::AppBuildPlan::from_json(r#"{"tasks": [
//! #   {"id": "a", "owner": "shell", "spec": {"intent": "a"}, "owned_paths": ["a.txt"]}]}"#)?
//! #     .validate()?;
//! # let key = ActionKeyParts::new(plan.tasks().next().unwrap()).key();
//! # let files = Candidate::new(BTreeMap::from([(AdmittedPath::admit("a.txt")?, b"a".to_vec())]));
//! # let output = AcceptedOutput::verified(files.clone(), files.digest()).unwrap();
//! # let provenance = Provenance::new(ChannelId::new("run-1")?, 1);
//! # let result = CachedResult::new(key, TaskId::new("a")?, provenance, &output, None);
//! let dir = tempfile::tempdir()?;
//! let cache = FileCache::new(dir.path());
//! assert!(matches!(cache.lookup(&key), Lookup::Miss));
//! cache.store(&result, &output, None)?;
//! match cache.lookup(&key) {
//!     Lookup::Hit(hit) => assert_eq!(hit.output().files(), output.files()),
//!     other => panic!("{other:?}"),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::entry::{CachedResult, EntryProblem, MAX_ENTRY_BYTES};
use super::key::ActionKey;
use crate::batch::Candidate;
use crate::batch::candidate::AcceptedOutput;
use crate::batch::candidate::Rejection;
use crate::closure::ClosureRecord;
use crate::id::Digest;
use crate::id::TaskId;

/// The most bytes one accepted output's files may hold together, as a call's output may.
pub const MAX_OUTPUT_BYTES: u64 = 1 << 30;

/// What a lookup found.
#[derive(Debug)]
#[non_exhaustive]
pub enum Lookup {
    /// A result whose every digest was checked (boxed: it carries a whole closure record).
    Hit(Box<CacheHit>),
    /// Nothing is kept under the key.
    Miss,
    /// Something is kept under the key and was not taken: a miss, with why.
    Refused {
        /// Where the entry lies (a file's path for a [`FileCache`]).
        entry: String,
        /// What is wrong with it.
        problem: EntryProblem,
    },
}

/// A result found in a cache, checked: its entry's seal, its files against the digests the
/// entry names and the output digest it was accepted under, and the call's closure record's
/// text against the length and blake3 the entry names.
#[derive(Debug, Clone)]
pub struct CacheHit {
    result: CachedResult,
    output: AcceptedOutput,
    /// The closure record's text, bound by the entry; read into a record only when asked
    /// (a run that reuses keeps the text, and reading ten thousand records costs a sixth of
    /// a null run).
    closure_json: Option<Arc<str>>,
    closure: std::sync::OnceLock<Option<ClosureRecord>>,
}

impl CacheHit {
    /// What the entry says of the result: its key, task and provenance.
    pub fn result(&self) -> &CachedResult {
        &self.result
    }

    /// The accepted output, rebuilt and verified.
    pub fn output(&self) -> &AcceptedOutput {
        &self.output
    }

    /// The closure record of the call that made it (its audit trail), where it kept one
    /// whose text reads as a record of the digest the entry names (read at the first ask).
    pub fn closure(&self) -> Option<&ClosureRecord> {
        self.closure
            .get_or_init(|| {
                let json = self.closure_json.as_deref()?;
                let record = ClosureRecord::from_json_as_written(json.to_owned()).ok()?;
                let named = self.result.closure().map(|c| c.record);
                (Some(record.digest()) == named).then_some(record)
            })
            .as_ref()
    }

    /// The hit taken apart: what its entry says, its output, and its closure record's text.
    pub(crate) fn into_parts(self) -> (CachedResult, AcceptedOutput, Option<Arc<str>>) {
        (self.result, self.output, self.closure_json)
    }

    /// The closure record's text, as the cache kept it (its blake3 and length are the ones
    /// the entry names): what a run that reuses the result keeps as the call's trail.
    pub fn closure_json(&self) -> Option<&Arc<str>> {
        self.closure_json.as_ref()
    }
}

/// Something a batch's cache did not give or take: never a failure of the run, which makes
/// the call instead (a refused entry) or goes on without the entry (a failed store).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum CacheWarning {
    /// An entry kept under the task's key was refused: a miss, with why.
    Refused {
        /// The task.
        task: TaskId,
        /// Where the entry lies (a file's path for a [`FileCache`]).
        entry: String,
        /// What is wrong with it.
        problem: EntryProblem,
    },
    /// An entry that holds together was not the task's to reuse (it names another task or
    /// key, or its output writes outside what the task owns): a miss.
    Unusable {
        /// The task.
        task: TaskId,
        /// The task's key.
        key: ActionKey,
        /// Why the output was not taken.
        rejection: Rejection,
    },
    /// A task's accepted output could not be kept.
    NotStored {
        /// The task.
        task: TaskId,
        /// Its key.
        key: ActionKey,
        /// Why.
        error: std::sync::Arc<CacheError>,
    },
}

impl std::fmt::Display for CacheWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused {
                task,
                entry,
                problem,
            } => write!(
                f,
                "task {task}: the cache entry {entry} was not taken ({problem}); the task is called"
            ),
            Self::Unusable {
                task,
                key,
                rejection,
            } => write!(
                f,
                "task {task}: the cache entry under key {key} was not taken ({}); the task is called",
                rejection.headline()
            ),
            Self::NotStored { task, key, error } => write!(
                f,
                "task {task}: its accepted output was not kept in the cache under key {key}: {error}"
            ),
        }
    }
}

/// Why a result could not be stored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// The output is not the one the result names.
    #[error("the output {found} is not the accepted output {expected} the result names")]
    OutputDiffers {
        /// The result's output digest.
        expected: Digest,
        /// The output given.
        found: Digest,
    },
    /// The closure record given is not the one the result names.
    #[error(
        "the closure record given ({}) is not the one the result names ({})",
        record_name(.given),
        record_name(.expected)
    )]
    ClosureDiffers {
        /// The record the result names, if any.
        expected: Option<Digest>,
        /// The record given, if any.
        given: Option<Digest>,
    },
    /// A file of the cache could not be written.
    #[error("write {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// A store of accepted results by action key. Only accepted results are stored; a lookup
/// never gives a result whose digests do not hold.
pub trait ActionCache: Send + Sync {
    /// The result kept under `key`, checked.
    fn lookup(&self, key: &ActionKey) -> Lookup;

    /// Keeps `result`, whose accepted output is `output` and whose call's closure record is
    /// `closure`, under its key (replacing what was kept there).
    ///
    /// # Errors
    ///
    /// [`CacheError`] when `output` or `closure` is not the result's, or the cache cannot be
    /// written.
    fn store(
        &self,
        result: &CachedResult,
        output: &AcceptedOutput,
        closure: Option<&ClosureRecord>,
    ) -> Result<(), CacheError>;
}

fn check_given(
    result: &CachedResult,
    output: &AcceptedOutput,
    closure: Option<&ClosureRecord>,
) -> Result<(), CacheError> {
    if result.output() != output.digest() {
        return Err(CacheError::OutputDiffers {
            expected: result.output(),
            found: output.digest(),
        });
    }
    let expected = result.closure().map(|c| c.record);
    let given = closure.map(ClosureRecord::digest);
    if expected != given {
        return Err(CacheError::ClosureDiffers { expected, given });
    }
    Ok(())
}

fn record_name(record: &Option<Digest>) -> String {
    record.map_or_else(|| "none".to_owned(), |d| d.to_string())
}

/// Results kept in this process's memory: for tests, and for an orchestrator that keeps
/// its own.
#[derive(Debug, Default)]
pub struct MemoryCache {
    results: Mutex<HashMap<ActionKey, CacheHit>>,
}

impl MemoryCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }
}

impl ActionCache for MemoryCache {
    fn lookup(&self, key: &ActionKey) -> Lookup {
        let results = self.results.lock().unwrap_or_else(PoisonError::into_inner);
        results
            .get(key)
            .map_or(Lookup::Miss, |hit| Lookup::Hit(Box::new(hit.clone())))
    }

    fn store(
        &self,
        result: &CachedResult,
        output: &AcceptedOutput,
        closure: Option<&ClosureRecord>,
    ) -> Result<(), CacheError> {
        check_given(result, output, closure)?;
        let hit = CacheHit {
            result: result.clone(),
            output: output.clone(),
            closure_json: closure.map(|r| Arc::from(r.as_json())),
            closure: std::sync::OnceLock::from(closure.cloned()),
        };
        self.results
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(result.key(), hit);
        Ok(())
    }
}

/// Results kept in a directory: `entries/KEY.json` (a [`CachedResult`]'s JSON) and
/// `objects/BLAKE3` (each accepted file's bytes). Every read checks the entry's seal (and,
/// with a key, its MAC), each object against its digest and the files against the output
/// digest; whatever does not hold is a [`Lookup::Refused`] naming the entry. Writes go
/// through a temporary file and a rename, objects before the entry that names them, so two
/// writers never mix their bytes; nothing is synced, since a crash can only leave what a
/// read refuses (a missing or cut-short file): a miss, never a wrong hit.
///
/// Without a key, the checks find damage (a flipped byte, a truncated file, swapped
/// objects), not a forger who can write the directory: such a forger can seal an entry of
/// their own. With [`with_mac_key`](Self::with_mac_key), an entry not sealed by the key is
/// refused.
#[derive(Debug, Clone)]
pub struct FileCache {
    dir: PathBuf,
    mac_key: Option<[u8; 32]>,
    /// Set once this value made the layout: a run stores thousands of results, and each
    /// need not ask for its directories again.
    prepared: Arc<AtomicBool>,
}

/// The cache directory tag (<https://bford.info/cachedir/>): backup tools skip a directory
/// holding it, and kleene never binds one as a plan's file.
const CACHEDIR_TAG: &str = "Signature: 8a477f597d28d172789f06886806bc55\n\
# This directory is a cache of accepted results made by kleene.\n\
# For information about cache directory tags see https://bford.info/cachedir/\n";

impl FileCache {
    /// The cache in `dir` (made on the first store).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            mac_key: None,
            prepared: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Makes the layout (and the cache directory tag) once.
    fn prepare(&self) -> Result<(), CacheError> {
        if self.prepared.load(Ordering::Acquire) {
            return Ok(());
        }
        for dir in [self.dir.join("objects"), self.dir.join("entries")] {
            fs::create_dir_all(&dir).map_err(|source| CacheError::Io { path: dir, source })?;
        }
        // Tagged as a cache, and ignored by git as a whole (as pytest's cache is), so a
        // cache beside a repository's state never shows as its untracked files.
        for (name, text) in [("CACHEDIR.TAG", CACHEDIR_TAG), (".gitignore", "*\n")] {
            let path = self.dir.join(name);
            if fs::symlink_metadata(&path).is_err() {
                write_new(&self.dir, &path, text.as_bytes())?;
            }
        }
        self.prepared.store(true, Ordering::Release);
        Ok(())
    }

    /// This cache, sealing each entry it stores with a MAC under `key` and refusing an entry
    /// without one.
    #[must_use]
    pub fn with_mac_key(mut self, key: [u8; 32]) -> Self {
        self.mac_key = Some(key);
        self
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the entry of `key` lies.
    pub fn entry_path(&self, key: &ActionKey) -> PathBuf {
        self.dir.join("entries").join(format!("{key}.json"))
    }

    fn object_path(&self, digest: Digest) -> PathBuf {
        self.dir.join("objects").join(digest.to_string())
    }

    fn read_hit(&self, key: &ActionKey, path: &Path) -> Result<Option<CacheHit>, EntryProblem> {
        let bytes = match read_bounded(path, MAX_ENTRY_BYTES) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Err(EntryProblem::TooLarge),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(EntryProblem::Unreadable(e.to_string())),
        };
        let result = CachedResult::from_json(&bytes, self.mac_key.as_ref())?;
        if result.key() != *key {
            return Err(EntryProblem::OtherKey {
                wanted: *key,
                found: result.key(),
            });
        }
        let mut files = BTreeMap::new();
        let mut budget = MAX_OUTPUT_BYTES;
        for (path, file) in result.files() {
            let limit = file.len.min(budget);
            let bytes = match read_bounded(&self.object_path(file.blake3), limit) {
                Ok(Some(bytes)) => bytes,
                Ok(None) => return Err(EntryProblem::ObjectDamaged { path: path.clone() }),
                Err(e) => {
                    return Err(EntryProblem::ObjectUnreadable {
                        path: path.clone(),
                        reason: e.to_string(),
                    });
                }
            };
            if bytes.len() as u64 != file.len || Digest::from(blake3::hash(&bytes)) != file.blake3 {
                return Err(EntryProblem::ObjectDamaged { path: path.clone() });
            }
            budget -= file.len;
            files.insert(path.clone(), bytes);
        }
        let output = AcceptedOutput::verified(Candidate::new(files), result.output())
            .ok_or(EntryProblem::Output(result.output()))?;
        let closure_json = result
            .closure()
            .map(|c| self.read_closure(c.record, c.json.len, c.json.blake3))
            .transpose()?;
        Ok(Some(CacheHit {
            result,
            output,
            closure_json,
            closure: std::sync::OnceLock::new(),
        }))
    }

    /// The text of the closure record kept as the object `blake3`, checked against the
    /// length and blake3 the entry names (the entry's seal binds them to the record's
    /// digest); whoever asks for the record reads it then.
    fn read_closure(
        &self,
        record: Digest,
        len: u64,
        blake3: Digest,
    ) -> Result<Arc<str>, EntryProblem> {
        let problem = |reason: String| EntryProblem::Closure { record, reason };
        let bytes = read_bounded(&self.object_path(blake3), len.min(MAX_OUTPUT_BYTES))
            .map_err(|e| problem(e.to_string()))?
            .filter(|b| b.len() as u64 == len && Digest::from(blake3::hash(b)) == blake3)
            .ok_or_else(|| problem("its object does not hold its bytes".to_owned()))?;
        let text = String::from_utf8(bytes).map_err(|e| problem(e.to_string()))?;
        Ok(Arc::from(text))
    }
}

/// What a cache directory holds ([`FileCache::usage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CacheUsage {
    /// Entries (kept results), whether or not they read back.
    pub entries: u64,
    /// Objects (files' and closure records' bytes).
    pub objects: u64,
    /// Bytes in all, entries and objects.
    pub bytes: u64,
}

/// What [`FileCache::prune`] removed, and what it kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Pruned {
    /// Entries removed: refused on reading, or not kept.
    pub entries: u64,
    /// Objects removed: named by no entry kept (and temporary files left by a lost writer).
    pub objects: u64,
    /// Bytes freed.
    pub bytes: u64,
    /// Entries kept.
    pub kept: u64,
}

impl FileCache {
    /// How many entries and objects the cache holds, and their bytes; an empty cache (one
    /// never written) holds none.
    ///
    /// # Errors
    ///
    /// [`CacheError::Io`] when a directory of the cache cannot be read.
    pub fn usage(&self) -> Result<CacheUsage, CacheError> {
        let mut usage = CacheUsage::default();
        for (dir, count) in [
            ("entries", &mut usage.entries),
            ("objects", &mut usage.objects),
        ] {
            for (_, len) in self.listing(dir)? {
                *count += 1;
                usage.bytes += len;
            }
        }
        Ok(usage)
    }

    /// Removes every entry that does not read back whole (each is checked as a lookup
    /// checks it) or that `keep` declines, then every object no kept entry names, and the
    /// temporary files of writers lost more than an hour ago. A run storing at the same
    /// time can lose an object it just wrote to the sweep; its entry then reads back as a
    /// miss, never as a wrong hit.
    ///
    /// ```
    /// use kleene::batch::cache::FileCache;
    /// let dir = tempfile::tempdir()?;
    /// let cache = FileCache::new(dir.path());
    /// let pruned = cache.prune(|_| true)?; // keep every entry that reads back
    /// assert_eq!((pruned.entries, pruned.kept), (0, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`CacheError::Io`] when a directory cannot be read or a file removed.
    pub fn prune(&self, keep: impl Fn(&CachedResult) -> bool) -> Result<Pruned, CacheError> {
        let mut pruned = Pruned::default();
        let mut named = std::collections::HashSet::new();
        let remove = |path: &Path| {
            fs::remove_file(path).map_err(|source| CacheError::Io {
                path: path.to_owned(),
                source,
            })
        };
        for (path, len) in self.listing("entries")? {
            let key = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|hex| hex.parse::<Digest>().ok())
                .map(ActionKey::from_digest);
            let kept = key.and_then(|key| match self.read_hit(&key, &path) {
                Ok(Some(hit)) if keep(hit.result()) => Some(hit),
                _ => None,
            });
            match kept {
                Some(hit) => {
                    pruned.kept += 1;
                    named.extend(hit.result().files().values().map(|f| f.blake3));
                    named.extend(hit.result().closure().map(|c| c.json.blake3));
                }
                None => {
                    remove(&path)?;
                    pruned.entries += 1;
                    pruned.bytes += len;
                }
            }
        }
        let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for (path, len) in self.listing("objects")? {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let stale = match name.parse::<Digest>() {
                Ok(digest) => !named.contains(&digest),
                // A temporary file: a writer's until it renames it.
                Err(_) => fs::symlink_metadata(&path)
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t < an_hour_ago),
            };
            if stale {
                remove(&path)?;
                pruned.objects += 1;
                pruned.bytes += len;
            }
        }
        Ok(pruned)
    }

    /// The files of `dir` in the cache (a missing directory has none), each with its length.
    fn listing(&self, dir: &str) -> Result<Vec<(PathBuf, u64)>, CacheError> {
        let dir = self.dir.join(dir);
        let io = |source| CacheError::Io {
            path: dir.clone(),
            source,
        };
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(e)),
        };
        let mut files = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io)?;
            let meta = entry.metadata().map_err(io)?;
            if meta.is_file() {
                files.push((entry.path(), meta.len()));
            }
        }
        Ok(files)
    }
}

impl ActionCache for FileCache {
    fn lookup(&self, key: &ActionKey) -> Lookup {
        let path = self.entry_path(key);
        match self.read_hit(key, &path) {
            Ok(Some(hit)) => Lookup::Hit(Box::new(hit)),
            Ok(None) => Lookup::Miss,
            Err(problem) => Lookup::Refused {
                entry: path.display().to_string(),
                problem,
            },
        }
    }

    fn store(
        &self,
        result: &CachedResult,
        output: &AcceptedOutput,
        closure: Option<&ClosureRecord>,
    ) -> Result<(), CacheError> {
        check_given(result, output, closure)?;
        self.prepare()?;
        let objects = self.dir.join("objects");
        let entries = self.dir.join("entries");
        let closure_json = closure.map(ClosureRecord::to_json);
        for bytes in output
            .files()
            .values()
            .map(Vec::as_slice)
            .chain(closure_json.as_ref().map(String::as_bytes))
        {
            let target = self.object_path(Digest::from(blake3::hash(bytes)));
            // An object is named by its bytes, so a new one is written in place: what a crash
            // or a writer beside this one can leave is a short file, which every read refuses
            // by its hash. Three syscalls a file where a check, a temporary name and a rename
            // took five: a run keeping 100,000 files spent 2.6 s on them, now 1.5 s. One
            // already there is kept unless damaged, and a damaged one is replaced through a
            // rename.
            match File::create_new(&target).and_then(|mut f| f.write_all(bytes)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    if read_bounded(&target, bytes.len() as u64)
                        .ok()
                        .flatten()
                        .as_deref()
                        != Some(bytes)
                    {
                        write_new(&objects, &target, bytes)?;
                    }
                }
                Err(source) => {
                    return Err(CacheError::Io {
                        path: target,
                        source,
                    });
                }
            }
        }
        let entry = self.entry_path(&result.key());
        write_new(
            &entries,
            &entry,
            result.to_json(self.mac_key.as_ref()).as_bytes(),
        )
    }
}

/// The bytes of `path`, or `None` when it holds more than `limit`; read without trusting
/// its size for any allocation.
fn read_bounded(path: &Path, limit: u64) -> io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    open_regular(path)?
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= limit).then_some(bytes))
}

/// Opens `path` for reading when it is a regular file: never through a link planted at its
/// name, and never waiting on a FIFO put there (whoever can write the cache can put
/// either); anything else is an error, which makes the entry a refused miss.
#[cfg(unix)]
fn open_regular(path: &Path) -> io::Result<File> {
    use rustix::fs::{FileType, Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let kind = FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode);
    if kind != FileType::RegularFile {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("it is not a regular file but a {kind:?}"),
        ));
    }
    Ok(File::from(fd))
}

#[cfg(not(unix))]
fn open_regular(path: &Path) -> io::Result<File> {
    File::open(path)
}

/// Writes `bytes` to `target` in `dir` durably through a temporary file of this writer's
/// own and a rename.
fn write_new(dir: &Path, target: &Path, bytes: &[u8]) -> Result<(), CacheError> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| CacheError::Io { path, source }
    };
    // Not synced: every read checks what it reads, so what a crash leaves (nothing, or a
    // file cut short) is a miss, and a run does not pay two syncs for each file it keeps.
    let written = File::create_new(&tmp)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(io(&tmp))
        .and_then(|()| fs::rename(&tmp, target).map_err(io(target)));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_larger_than_its_bound_is_told_apart_from_one_that_fits() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        fs::write(&path, b"12345").unwrap();
        assert_eq!(read_bounded(&path, 5).unwrap(), Some(b"12345".to_vec()));
        assert_eq!(read_bounded(&path, 4).unwrap(), None);
    }

    /// A write that fails leaves neither the target nor its temporary file behind.
    #[test]
    fn a_failed_write_leaves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("missing-dir").join("f");
        assert!(write_new(tmp.path(), &target, b"x").is_err());
        assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 0);
    }
}
