//! Where a journal's bytes live: a small log store per channel that a [`Journal`] writes its
//! sealed records to, with file, memory and crash-testing stores.
//!
//! A [`Journal`] does the record work once — framing, sealing, torn-tail detection,
//! compaction — over any [`LogBackend`]; the backend only keeps bytes. [`FileBackend`] keeps
//! one file per channel (what [`FileJournal`] is), [`MemoryBackend`] a byte vector, and
//! [`CrashBackend`] tells the bytes written from the bytes made durable, so a test can cut
//! the power at any sync and load what a real disk would have kept.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use kleene::{id::ChannelId, id::TaskId};
//! use kleene::batch::{journal::CrashBackend, evidence::EvidenceEvent, journal::EvidenceJournal, journal::Journal};
//!
//! let channel = ChannelId::new("chan-1")?;
//! let interrupted = |attempt| EvidenceEvent::Interrupted { task: TaskId::new("t").unwrap(), attempt };
//! let mut journal = Journal::new(CrashBackend::default());
//! journal.append(&channel, &[interrupted(1)])?;
//! // The power goes before the second append's sync: that commit never happened, or it tore.
//! journal.backend_mut().freeze_after_syncs(0);
//! assert!(journal.append(&channel, &[interrupted(2)]).is_err());
//! for kept in [0, 7] {
//!     let after = Journal::new(journal.backend().after_crash(kept));
//!     let load = after.load(&channel)?.expect("the first commit was durable");
//!     assert_eq!(load.events.len(), 1);
//!     assert_eq!(load.torn_tail.is_some(), kept > 0);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! [`FileJournal`]: crate::batch::FileJournal

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::error::JournalError;
use super::pending::PendingSync;
use crate::id::ChannelId;

#[cfg(doc)]
use crate::batch::journal::Journal;

/// Why a log store could not read or write a channel's log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// A file operation failed.
    #[error("access journal at {}", .path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// A store that is not a file system (a database, an engine's state) refused.
    #[error("access journal store for channel {channel}: {detail}")]
    Store {
        /// The channel whose log was being accessed.
        channel: ChannelId,
        /// What the store said, in its own words.
        detail: String,
        /// The store's own error, when it has one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl BackendError {
    fn io(path: &Path) -> impl FnOnce(io::Error) -> BackendError + '_ {
        move |source| BackendError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// The bytes of one log per channel: what a [`Journal`] needs from its storage.
///
/// `append` may leave its bytes volatile until `sync`; `truncate` and `replace` are durable
/// when they return, and `replace` is atomic (after a crash the log holds the old bytes or
/// the new ones).
pub trait LogBackend {
    /// The bytes of `channel`'s log, or `None` when it has none.
    ///
    /// # Errors
    ///
    /// [`BackendError`] when the log cannot be read.
    fn read(&self, channel: &ChannelId) -> Result<Option<Vec<u8>>, BackendError>;

    /// Appends `bytes` to `channel`'s log, creating it if needed.
    ///
    /// # Errors
    ///
    /// [`BackendError`] when the bytes cannot be written; some of them may have been.
    fn append(&mut self, channel: &ChannelId, bytes: &[u8]) -> Result<(), BackendError>;

    /// Makes everything appended to `channel`'s log durable.
    ///
    /// # Errors
    ///
    /// [`BackendError`] when the store cannot promise durability.
    fn sync(&mut self, channel: &ChannelId) -> Result<(), BackendError>;

    /// What makes everything appended to `channel`'s log durable, to run later and on any
    /// thread (see [`EvidenceJournal::append_deferred`]). The default syncs now and returns
    /// [`PendingSync::durable`]; a store that can sync from another thread (a file) returns
    /// the sync instead.
    ///
    /// # Errors
    ///
    /// [`BackendError`] when the sync (or what it needs) fails now.
    ///
    /// [`EvidenceJournal::append_deferred`]: super::EvidenceJournal::append_deferred
    fn sync_later(&mut self, channel: &ChannelId) -> Result<PendingSync, BackendError> {
        self.sync(channel).map(|()| PendingSync::durable())
    }

    /// Cuts `channel`'s log to its first `len` bytes, durably.
    ///
    /// # Errors
    ///
    /// [`BackendError`] when the log cannot be cut.
    fn truncate(&mut self, channel: &ChannelId, len: u64) -> Result<(), BackendError>;

    /// Replaces `channel`'s log with `bytes`, atomically and durably.
    ///
    /// # Errors
    ///
    /// [`BackendError`] when the log cannot be replaced; it is intact then.
    fn replace(&mut self, channel: &ChannelId, bytes: &[u8]) -> Result<(), BackendError>;

    /// Whether writes are refused (a store opened only to read).
    fn read_only(&self) -> bool {
        false
    }
}

/// One append-only file per channel in a directory, each sync an `fdatasync`.
///
/// File names are a digest of the channel id, so no channel id can name a path outside the
/// directory. One journal should own a directory.
#[derive(Debug)]
pub struct FileBackend {
    dir: PathBuf,
    read_only: bool,
    /// Each channel's log open for appending, shared with the syncs handed out for later.
    open: HashMap<ChannelId, Arc<OpenLog>>,
}

/// A channel's log open for appending, with its path for the errors that name it (a sync
/// handed out for later must not hash the channel id again to find it).
#[derive(Debug)]
struct OpenLog {
    file: File,
    path: PathBuf,
    /// Whether its last sync took long enough to be worth overlapping with other work.
    syncs_take_long: AtomicBool,
}

impl OpenLog {
    /// A sync this long or longer is made later where it can be (see
    /// [`LogBackend::sync_later`]): a disk's takes a hundred microseconds or more, tmpfs's
    /// about one.
    const LONG_SYNC: Duration = Duration::from_micros(40);

    fn sync(&self) -> io::Result<()> {
        let started = Instant::now();
        let synced = self.file.sync_data();
        self.syncs_take_long
            .store(started.elapsed() >= Self::LONG_SYNC, Ordering::Relaxed);
        synced
    }
}

impl FileBackend {
    /// Opens (creating if needed) the directory `dir`, removing temp files an interrupted
    /// replacement left behind.
    ///
    /// # Errors
    ///
    /// [`BackendError::Io`] when the directory cannot be created or listed.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, BackendError> {
        let dir = dir.into();
        crate::fs::open_dir(&dir).map_err(|(path, source)| BackendError::Io { path, source })?;
        Ok(Self {
            dir,
            read_only: false,
            open: HashMap::new(),
        })
    }

    /// The directory `dir` for reading only: nothing is created or removed (not even a
    /// replacement's temp file, which may be a running writer's). A missing directory holds
    /// no logs.
    pub fn open_read_only(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            read_only: true,
            open: HashMap::new(),
        }
    }

    /// The file that holds `channel`'s log.
    pub fn path_for(&self, channel: &ChannelId) -> PathBuf {
        journal_file(&self.dir, channel)
    }

    fn file(&mut self, channel: &ChannelId) -> Result<&Arc<OpenLog>, BackendError> {
        if !self.open.contains_key(channel) {
            let path = self.path_for(channel);
            let existed = path.exists();
            let file = OpenOptions::new()
                .append(true)
                .create(true)
                .open(&path)
                .map_err(BackendError::io(&path))?;
            if !existed {
                // A new file is durable only once its directory entry is.
                crate::fs::sync_dir(&self.dir)
                    .map_err(|(path, source)| BackendError::Io { path, source })?;
            }
            self.open.insert(
                channel.clone(),
                Arc::new(OpenLog {
                    file,
                    path,
                    syncs_take_long: AtomicBool::new(false),
                }),
            );
        }
        // The path is named only in an error: a commit's append and sync do not hash it.
        match self.open.get(channel) {
            Some(file) => Ok(file),
            None => Err(BackendError::Io {
                path: journal_file(&self.dir, channel),
                source: io::Error::other("append handle vanished"),
            }),
        }
    }
}

impl LogBackend for FileBackend {
    fn read(&self, channel: &ChannelId) -> Result<Option<Vec<u8>>, BackendError> {
        let path = self.path_for(channel);
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(BackendError::io(&path)(e)),
        }
    }

    fn append(&mut self, channel: &ChannelId, bytes: &[u8]) -> Result<(), BackendError> {
        let written = (&self.file(channel)?.file).write_all(bytes);
        written.map_err(|e| {
            self.open.remove(channel);
            BackendError::io(&self.path_for(channel))(e)
        })
    }

    fn sync(&mut self, channel: &ChannelId) -> Result<(), BackendError> {
        let synced = self.file(channel)?.sync();
        synced.map_err(|e| {
            self.open.remove(channel);
            BackendError::io(&self.path_for(channel))(e)
        })
    }

    fn sync_later(&mut self, channel: &ChannelId) -> Result<PendingSync, BackendError> {
        let log = Arc::clone(self.file(channel)?);
        // Where a sync costs next to nothing (tmpfs), holding back what waits for it would
        // cost more than the sync: it is made now.
        if !log.syncs_take_long.load(Ordering::Relaxed) {
            return self.sync(channel).map(|()| PendingSync::durable());
        }
        Ok(PendingSync::new(move || {
            log.sync().map_err(|source| JournalError::Io {
                path: log.path.clone(),
                source,
            })
        }))
    }

    fn truncate(&mut self, channel: &ChannelId, len: u64) -> Result<(), BackendError> {
        self.open.remove(channel);
        let path = self.path_for(channel);
        let file = OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(BackendError::io(&path))?;
        file.set_len(len).map_err(BackendError::io(&path))?;
        file.sync_all().map_err(BackendError::io(&path))
    }

    fn replace(&mut self, channel: &ChannelId, bytes: &[u8]) -> Result<(), BackendError> {
        // The append handle points at the file being replaced; the next append reopens.
        self.open.remove(channel);
        crate::fs::replace_file(&self.dir, &self.path_for(channel), bytes)
            .map_err(|(path, source)| BackendError::Io { path, source })
    }

    fn read_only(&self) -> bool {
        self.read_only
    }
}

/// Logs as byte vectors in memory: every write is durable at once.
#[derive(Debug, Clone, Default)]
pub struct MemoryBackend {
    logs: HashMap<ChannelId, Vec<u8>>,
}

impl MemoryBackend {
    /// A store holding `bytes` as `channel`'s log.
    pub fn with_log(channel: ChannelId, bytes: Vec<u8>) -> Self {
        Self {
            logs: HashMap::from([(channel, bytes)]),
        }
    }

    /// The bytes of `channel`'s log.
    pub fn log(&self, channel: &ChannelId) -> Option<&[u8]> {
        self.logs.get(channel).map(Vec::as_slice)
    }
}

impl LogBackend for MemoryBackend {
    fn read(&self, channel: &ChannelId) -> Result<Option<Vec<u8>>, BackendError> {
        Ok(self.logs.get(channel).cloned())
    }

    fn append(&mut self, channel: &ChannelId, bytes: &[u8]) -> Result<(), BackendError> {
        self.logs
            .entry(channel.clone())
            .or_default()
            .extend_from_slice(bytes);
        Ok(())
    }

    fn sync(&mut self, _channel: &ChannelId) -> Result<(), BackendError> {
        Ok(())
    }

    fn truncate(&mut self, channel: &ChannelId, len: u64) -> Result<(), BackendError> {
        if let Some(log) = self.logs.get_mut(channel) {
            log.truncate(usize::try_from(len).unwrap_or(usize::MAX));
        }
        Ok(())
    }

    fn replace(&mut self, channel: &ChannelId, bytes: &[u8]) -> Result<(), BackendError> {
        self.logs.insert(channel.clone(), bytes.to_vec());
        Ok(())
    }
}

/// A store that tells written bytes from durable ones, for crash tests.
///
/// Appends reach the live log; a sync makes the live log durable; truncation and replacement
/// are durable at once. [`CrashBackend::freeze_after_syncs`] lets N more syncs succeed and
/// cuts the power at the next one: that sync and every operation after it fail.
/// [`CrashBackend::after_crash`] then gives what a disk would hold, the durable bytes plus any
/// prefix of what was written since.
#[derive(Debug, Clone, Default)]
pub struct CrashBackend {
    live: HashMap<ChannelId, Vec<u8>>,
    durable: HashMap<ChannelId, Vec<u8>>,
    syncs: u64,
    frozen_after: Option<u64>,
    frozen: bool,
}

impl CrashBackend {
    /// Lets `syncs` more syncs succeed; the one after fails, and so does every operation
    /// after it: the crash.
    pub fn freeze_after_syncs(&mut self, syncs: u64) {
        self.frozen_after = Some(self.syncs.saturating_add(syncs));
    }

    /// How many syncs succeeded so far.
    pub fn syncs(&self) -> u64 {
        self.syncs
    }

    /// Whether the crash happened (a sync was refused).
    pub fn is_frozen(&self) -> bool {
        self.frozen
    }

    /// What a disk holds after the crash: every durable log, and of the bytes written to a
    /// log since its last sync the first `kept_unsynced` (all of them when there are fewer).
    pub fn after_crash(&self, kept_unsynced: usize) -> MemoryBackend {
        let mut logs = self.durable.clone();
        for (channel, live) in &self.live {
            let durable = logs.entry(channel.clone()).or_default();
            if live.starts_with(durable) {
                let extra = &live[durable.len()..];
                durable.extend_from_slice(&extra[..kept_unsynced.min(extra.len())]);
            }
        }
        logs.retain(|_, bytes| !bytes.is_empty());
        MemoryBackend { logs }
    }

    /// How many bytes were written to `channel`'s log since its last sync: where a crash
    /// could cut.
    pub fn unsynced(&self, channel: &ChannelId) -> usize {
        let live = self.live.get(channel).map_or(0, Vec::len);
        let durable = self.durable.get(channel).map_or(0, Vec::len);
        live.saturating_sub(durable)
    }

    fn alive(&self, channel: &ChannelId) -> Result<(), BackendError> {
        if self.is_frozen() {
            return Err(BackendError::Store {
                channel: channel.clone(),
                detail: "the crash backend froze (the simulated power loss)".to_owned(),
                source: None,
            });
        }
        Ok(())
    }
}

impl LogBackend for CrashBackend {
    fn read(&self, channel: &ChannelId) -> Result<Option<Vec<u8>>, BackendError> {
        self.alive(channel)?;
        Ok(self.live.get(channel).cloned())
    }

    fn append(&mut self, channel: &ChannelId, bytes: &[u8]) -> Result<(), BackendError> {
        self.alive(channel)?;
        self.live
            .entry(channel.clone())
            .or_default()
            .extend_from_slice(bytes);
        Ok(())
    }

    fn sync(&mut self, channel: &ChannelId) -> Result<(), BackendError> {
        if self.frozen_after == Some(self.syncs) {
            self.frozen = true;
        }
        self.alive(channel)?;
        let live = self.live.get(channel).cloned().unwrap_or_default();
        self.durable.insert(channel.clone(), live);
        self.syncs += 1;
        Ok(())
    }

    fn truncate(&mut self, channel: &ChannelId, len: u64) -> Result<(), BackendError> {
        self.alive(channel)?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if let Some(log) = self.live.get_mut(channel) {
            log.truncate(len);
            let cut = log.clone();
            self.durable.insert(channel.clone(), cut);
        }
        Ok(())
    }

    fn replace(&mut self, channel: &ChannelId, bytes: &[u8]) -> Result<(), BackendError> {
        self.alive(channel)?;
        self.live.insert(channel.clone(), bytes.to_vec());
        self.durable.insert(channel.clone(), bytes.to_vec());
        Ok(())
    }
}

/// The file in `dir` that holds `channel`'s journal (the key it is named by cannot change
/// without losing every existing journal).
fn journal_file(dir: &Path, channel: &ChannelId) -> PathBuf {
    channel_file(
        dir,
        "kleene channel journal file name v1",
        channel,
        "journal",
    )
}

/// The file in `dir` that holds `channel`'s data: a digest of the id under `context` plus
/// `extension`, so no channel id can name a path outside `dir`.
fn channel_file(dir: &Path, context: &str, channel: &ChannelId, extension: &str) -> PathBuf {
    let name = blake3::Hasher::new_derive_key(context)
        .update(channel.as_str().as_bytes())
        .finalize()
        .to_hex();
    dir.join(format!("{name}.{extension}"))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn no_channel_id_names_a_file_outside_its_directory() {
        let dir = Path::new("/journal");
        // Channel ids are names, and the file name is derived from the id's digest anyway.
        let channel = crate::id::ChannelId::new("etc..passwd").unwrap();
        let path = super::channel_file(dir, "kleene test file name v1", &channel, "ckpt");
        assert_eq!(path.parent(), Some(dir));
    }
}
