//! Where evidence events are committed: an append-only journal per channel.
//!
//! Each commit is one framed, sealed record; a journal is the concatenation of them,
//! optionally led by a snapshot (the folded [`BatchEvidence`]) written by compaction. A commit
//! appends, so its cost does not grow with the batch; compaction rewrites the journal as one
//! snapshot record, atomically, once the tail is as long as the evidence it folds into.
//!
//! Loading never changes the journal. A record that fails its checks is corruption, reported
//! with its number and byte offset; only a final record that is genuinely incomplete (the
//! file ends inside its header, or its intact header declares more bytes than the file has)
//! is a torn tail, the trace of an interrupted append. A writer cuts it explicitly with
//! [`EvidenceJournal::repair_torn_tail`] before it appends (the executor does so on every
//! dispatch, resume and recovery), and the cut is reported, never silent.
//!
//! ```
//! use kleene::id::ChannelId;
//! use kleene::batch::{journal::EvidenceJournal, FileJournal};
//!
//! let dir = std::env::temp_dir().join(format!("kleene-journal-doc-{}", std::process::id()));
//! let journal = FileJournal::open(&dir)?;
//! assert!(journal.load(&ChannelId::new("chan-1")?)?.is_none());
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Record format
//!
//! A record (record format version 2) is an 80-byte header and a body; integers are little
//! endian:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 4 | magic `KLNJ` |
//! | 4 | 2 | record format version, `2` |
//! | 6 | 1 | seal kind: `0` = checksum, `1` = keyed MAC |
//! | 7 | 1 | reserved, `0` |
//! | 8 | 8 | body length `n` |
//! | 16 | 32 | header check: blake3 in derive-key mode with context `"kleene journal record header v2"` over bytes 0..16 |
//! | 48 | 32 | seal (below) |
//! | 80 | n | body: one or more [checkpoint envelopes](crate::checkpoint), one per event, or one snapshot |
//!
//! With seal kind `0` the seal is blake3 in derive-key mode with context
//! `"kleene journal record seal v2"` over, in order: the previous record's seal (32 zero
//! bytes for the first record, or after a record of format version 1), header bytes 0..48,
//! and the body. With kind `1` it is blake3's keyed mode under the [`JournalKey`] over the 29
//! bytes `kleene journal record seal v2`, the channel id's length (8 bytes) and UTF-8
//! bytes, then the same three fields. Chaining each seal to the previous one means a record
//! cannot be removed from the middle or reordered without the next seal failing; the MAC
//! also binds each record to its channel.
//!
//! Journals written before the framing (record format version 1) are bare checkpoint
//! envelopes, one per event; they still load, and new commits are appended after them as
//! version-2 records. A version-1 record has one checksum over its header and payload, so a
//! flipped bit in its length field can make it look longer than the file: a failing
//! version-1 record counts as torn only if it is incomplete, no intact record of either
//! version starts anywhere after it, and it does not verify with its length field set to
//! the bytes actually present (which would prove the length field damaged).
//!
//! # What the seal protects against
//!
//! The plain checksum (seal kind `0`) detects accidental damage: a flipped bit, a sector
//! that did not land, an interrupted write. It carries no secret, so anyone who can write the
//! state directory can change a record and re-seal it, and the journal cannot tell. With a
//! [`JournalKey`] configured (a 32-byte secret kept outside the state directory), every
//! record carries a blake3 keyed-mode MAC instead: changing, re-sealing, reordering or
//! splicing records is refused unless the writer holds the key, and a journal that carries
//! plain checksums is refused as a whole. What a MAC cannot detect is removal of whole
//! records from the end of the journal (keep the last seal elsewhere to detect that) or a
//! replay of the entire file as it was earlier.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::evidence::event::EvidenceEvent;
use super::evidence::{BatchEvidence, FoldError};
use crate::checkpoint::CheckpointError;
use crate::id::ChannelId;

pub(crate) mod backend;
mod error;
mod frame;
mod memory;
mod pending;

pub use backend::{BackendError, CrashBackend, FileBackend, LogBackend, MemoryBackend};
pub use error::{JournalError, RecordDamage};
pub use memory::MemoryJournal;
pub use pending::PendingSync;

use frame::{GENESIS, encode_commit, encode_snapshot, parse, record_ends, scan};

/// A 32-byte secret under which journal records carry a keyed MAC (see the module docs).
///
/// Keep it outside the state directory: whoever can read it can forge records. Its `Debug`
/// output never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct JournalKey([u8; 32]);

impl JournalKey {
    /// The key made of these 32 bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl fmt::Debug for JournalKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JournalKey(..)")
    }
}

/// An incomplete final record: the trace of an interrupted append. [`EvidenceJournal::load`]
/// reports it and leaves it in place; [`EvidenceJournal::repair_torn_tail`] cuts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Where the whole records end (the journal's length once the tail is cut).
    pub offset: u64,
    /// How many bytes the incomplete record has.
    pub discarded: u64,
    /// Why the record is incomplete.
    pub cause: CheckpointError,
}

/// A channel's journal as loaded: an optional snapshot and the events after it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JournalLoad {
    /// The compacted evidence the journal starts from.
    pub snapshot: Option<BatchEvidence>,
    /// The events after the snapshot, in order.
    pub events: Vec<EvidenceEvent>,
    /// The incomplete final record, if the last append was interrupted (still in the
    /// journal until a writer repairs it).
    pub torn_tail: Option<TornTail>,
}

impl JournalLoad {
    /// A load made of an optional snapshot, the events after it and the incomplete final
    /// record (for implementations of [`EvidenceJournal`]).
    pub fn new(
        snapshot: Option<BatchEvidence>,
        events: Vec<EvidenceEvent>,
        torn_tail: Option<TornTail>,
    ) -> Self {
        Self {
            snapshot,
            events,
            torn_tail,
        }
    }

    /// Folds the load into evidence: the snapshot, then every event after it.
    ///
    /// # Errors
    ///
    /// [`FoldError`] when the events do not follow from the snapshot.
    pub fn into_evidence(self) -> Result<BatchEvidence, FoldError> {
        let mut events = self.events.into_iter();
        let mut evidence = match self.snapshot {
            Some(snapshot) => snapshot,
            None => {
                let first = events.next().ok_or(FoldError::NotStarted { index: 0 })?;
                BatchEvidence::start(&first)?
            }
        };
        for event in events {
            evidence.apply(event)?;
        }
        Ok(evidence)
    }
}

/// An append-only store of evidence events, one journal per channel.
///
/// Implement it to keep evidence in your own database: `append` must be durable and atomic
/// per call (after a crash, either all of a call's events are there or an incomplete final
/// record that `repair_torn_tail` cuts), `load` must not change anything, and `compact` must
/// replace the journal atomically.
pub trait EvidenceJournal {
    /// Appends `events` to `channel`'s journal, durably, in one commit.
    ///
    /// # Errors
    ///
    /// [`JournalError`] when the events cannot be encoded or written, or the journal ends in
    /// a torn tail that was not repaired.
    fn append(&mut self, channel: &ChannelId, events: &[EvidenceEvent])
    -> Result<(), JournalError>;

    /// [`append`](Self::append), taking the events: the batch drivers append this way, so
    /// a journal that keeps event values (the [`MemoryJournal`]) moves them in rather than
    /// cloning each. On success `events` is left empty with its capacity (the caller's
    /// next commit reuses it); on an error it is left as it was.
    ///
    /// The default appends `events` by reference, then clears it: a journal that encodes
    /// its events has nothing to gain from owning them.
    ///
    /// # Errors
    ///
    /// As [`append`](Self::append).
    fn append_owned(
        &mut self,
        channel: &ChannelId,
        events: &mut Vec<EvidenceEvent>,
    ) -> Result<(), JournalError> {
        self.append(channel, events)?;
        events.clear();
        Ok(())
    }

    /// [`append_owned`](Self::append_owned), except that it may return once the commit is
    /// written and before it is durable, handing back the sync that makes it so: the
    /// threaded and sequential drivers append a call's reservation this way when the call's
    /// worker waits for it (see [`Worker::waits_for_reservation`]), so the sync overlaps with
    /// what the call prepares. Nothing that depends on the commit may be seen before
    /// [`PendingSync::complete`] returns.
    ///
    /// The default appends durably and returns [`PendingSync::durable`].
    ///
    /// # Errors
    ///
    /// As [`append`](Self::append), for what fails before the sync.
    ///
    /// [`Worker::waits_for_reservation`]: crate::batch::Worker::waits_for_reservation
    fn append_deferred(
        &mut self,
        channel: &ChannelId,
        events: &mut Vec<EvidenceEvent>,
    ) -> Result<PendingSync, JournalError> {
        self.append_owned(channel, events)
            .map(|()| PendingSync::durable())
    }

    /// Loads `channel`'s journal, or `None` when the channel has no whole record. Never
    /// changes the journal: an incomplete final record is reported in
    /// [`JournalLoad::torn_tail`], never returned as data and never cut.
    ///
    /// # Errors
    ///
    /// [`JournalError`] when the journal cannot be read, or holds a damaged, unkeyed or
    /// foreign record (named by number and offset).
    fn load(&self, channel: &ChannelId) -> Result<Option<JournalLoad>, JournalError>;

    /// Cuts an incomplete final record, so the next append follows the last whole one, and
    /// returns what was cut. Writers call it before they append; journals whose appends
    /// cannot tear keep the default, which cuts nothing.
    ///
    /// # Errors
    ///
    /// [`JournalError`] when the journal cannot be read or written, or is corrupt (nothing
    /// is cut then).
    fn repair_torn_tail(&mut self, channel: &ChannelId) -> Result<Option<TornTail>, JournalError> {
        let _ = channel;
        Ok(None)
    }

    /// Replaces `channel`'s journal with one snapshot of `evidence`, atomically.
    ///
    /// # Errors
    ///
    /// [`JournalError`] when the snapshot cannot be written; the journal is intact.
    fn compact(
        &mut self,
        channel: &ChannelId,
        evidence: &BatchEvidence,
    ) -> Result<(), JournalError>;
}

/// The evidence journal over a log store: sealed, chained records appended to one log per
/// channel, each append made durable before it returns. Over a [`FileBackend`] it is the
/// [`FileJournal`]; over a [`CrashBackend`] it is what crash tests load after a simulated power
/// loss.
///
/// [`CrashBackend`]: crate::batch::journal::CrashBackend
#[derive(Debug)]
pub struct Journal<B> {
    backend: B,
    key: Option<JournalKey>,
    /// The seal the next record of each channel chains to, once its log was checked whole.
    last_seals: HashMap<ChannelId, [u8; 32]>,
    repairs: Vec<(ChannelId, TornTail)>,
    scratch: Vec<u8>,
    /// Set by a deferred sync that failed, which may have lost what was written before it.
    sync_failed: Arc<AtomicBool>,
}

/// A journal in a directory: one append-only file per channel, each append followed by
/// `fdatasync` before it returns.
///
/// File names are a digest of the channel id, so no channel id can name a path outside the
/// directory. One journal should own a directory.
pub type FileJournal = Journal<FileBackend>;

impl<B: LogBackend> Journal<B> {
    /// A journal over `backend`.
    pub fn new(backend: B) -> Self {
        Self {
            backend,
            key: None,
            last_seals: HashMap::new(),
            repairs: Vec::new(),
            scratch: Vec::new(),
            sync_failed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Seals every record written from now on with a keyed MAC under `key`, and refuses on
    /// load any record that does not verify under it (plain-checksum records included).
    #[must_use]
    pub fn with_mac_key(mut self, key: JournalKey) -> Self {
        self.key = Some(key);
        self.last_seals.clear();
        self
    }

    /// The log store.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The log store, to change (a crash test freezes it).
    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    /// The log store, giving up the journal.
    pub fn into_backend(self) -> B {
        self.backend
    }

    /// Every torn tail this journal cut, in order, with its channel: what to report after
    /// a run.
    pub fn repairs(&self) -> &[(ChannelId, TornTail)] {
        &self.repairs
    }

    /// Where each whole record of `channel`'s log ends (up to the first that is not whole):
    /// the places a crash test cuts.
    ///
    /// # Errors
    ///
    /// [`JournalError`] when the log cannot be read.
    pub fn record_ends(&self, channel: &ChannelId) -> Result<Vec<usize>, JournalError> {
        Ok(self
            .read(channel)?
            .map(|bytes| record_ends(channel, &bytes, self.key.as_ref()))
            .unwrap_or_default())
    }

    fn writable(&self, channel: &ChannelId) -> Result<(), JournalError> {
        if self.backend.read_only() {
            return Err(JournalError::ReadOnly {
                channel: channel.clone(),
            });
        }
        Ok(())
    }

    fn read(&self, channel: &ChannelId) -> Result<Option<Vec<u8>>, JournalError> {
        self.backend
            .read(channel)
            .map_err(JournalError::from_backend)
    }

    /// The seal `channel`'s next record chains to. The first append of a channel checks its
    /// whole log, so new records never land after damage or an unrepaired torn tail.
    fn last_seal(&mut self, channel: &ChannelId) -> Result<[u8; 32], JournalError> {
        if let Some(seal) = self.last_seals.get(channel) {
            return Ok(*seal);
        }
        let seal = match self.read(channel)? {
            Some(bytes) => {
                let scanned = scan(channel, &bytes, self.key.as_ref())?;
                if let Some(torn) = scanned.torn {
                    return Err(JournalError::TornTailNotRepaired {
                        channel: channel.clone(),
                        torn,
                    });
                }
                scanned.last_seal
            }
            None => GENESIS,
        };
        self.last_seals.insert(channel.clone(), seal);
        Ok(seal)
    }
}

impl FileJournal {
    /// Opens (creating if needed) the journal directory `dir`, removing temp files an
    /// interrupted compaction left behind.
    ///
    /// # Errors
    ///
    /// [`JournalError::Io`] when the directory cannot be created or listed.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, JournalError> {
        FileBackend::open(dir)
            .map(Journal::new)
            .map_err(JournalError::from_backend)
    }

    /// Opens the journal directory `dir` for reading only: nothing is created or removed
    /// (not even a compaction's temp file, which may be a running writer's), and every
    /// write is refused with [`JournalError::ReadOnly`]. A missing directory loads as no
    /// journal. This is what commands that only report should use.
    pub fn open_read_only(dir: impl Into<PathBuf>) -> Self {
        Journal::new(FileBackend::open_read_only(dir))
    }

    /// The file that holds `channel`'s journal.
    pub fn path_for(&self, channel: &ChannelId) -> PathBuf {
        self.backend.path_for(channel)
    }
}

impl<B: LogBackend> Journal<B> {
    /// Writes `events` to `channel`'s log as one sealed commit, then makes it durable with
    /// `sync`; the seal the next commit chains to is kept only once both succeed, so a log
    /// that may end in a partial record is checked again before the next append.
    fn commit<T>(
        &mut self,
        channel: &ChannelId,
        events: &[EvidenceEvent],
        sync: impl FnOnce(&mut B) -> Result<T, BackendError>,
    ) -> Result<T, JournalError> {
        self.writable(channel)?;
        if self.sync_failed.swap(false, Ordering::SeqCst) {
            // A deferred sync failed: what this journal last wrote may not be on the disk.
            self.last_seals.clear();
        }
        let previous = self.last_seal(channel)?;
        let mut bytes = std::mem::take(&mut self.scratch);
        bytes.clear();
        let sealed = encode_commit(channel, self.key.as_ref(), &previous, events, &mut bytes);
        let written = sealed.and_then(|seal| {
            self.backend
                .append(channel, &bytes)
                .and_then(|()| sync(&mut self.backend))
                .map(|synced| (seal, synced))
                .map_err(|e| {
                    self.last_seals.remove(channel);
                    JournalError::from_backend(e)
                })
        });
        self.scratch = bytes;
        let (seal, synced) = written?;
        self.last_seals.insert(channel.clone(), seal);
        Ok(synced)
    }
}

impl<B: LogBackend> EvidenceJournal for Journal<B> {
    fn append(
        &mut self,
        channel: &ChannelId,
        events: &[EvidenceEvent],
    ) -> Result<(), JournalError> {
        self.commit(channel, events, |backend| backend.sync(channel))
    }

    fn append_deferred(
        &mut self,
        channel: &ChannelId,
        events: &mut Vec<EvidenceEvent>,
    ) -> Result<PendingSync, JournalError> {
        let later = self.commit(channel, events, |backend| backend.sync_later(channel))?;
        events.clear();
        if later.is_durable() {
            return Ok(later);
        }
        let failed = Arc::clone(&self.sync_failed);
        Ok(PendingSync::new(move || {
            later
                .complete()
                .inspect_err(|_| failed.store(true, Ordering::SeqCst))
        }))
    }

    fn load(&self, channel: &ChannelId) -> Result<Option<JournalLoad>, JournalError> {
        let Some(bytes) = self.read(channel)? else {
            return Ok(None);
        };
        let load = parse(channel, &bytes, self.key.as_ref())?;
        if load.snapshot.is_none() && load.events.is_empty() {
            return Ok(None);
        }
        Ok(Some(load))
    }

    fn repair_torn_tail(&mut self, channel: &ChannelId) -> Result<Option<TornTail>, JournalError> {
        self.writable(channel)?;
        let Some(bytes) = self.read(channel)? else {
            return Ok(None);
        };
        let Some(torn) = scan(channel, &bytes, self.key.as_ref())?.torn else {
            return Ok(None);
        };
        self.last_seals.remove(channel);
        self.backend
            .truncate(channel, torn.offset)
            .map_err(JournalError::from_backend)?;
        self.repairs.push((channel.clone(), torn.clone()));
        Ok(Some(torn))
    }

    fn compact(
        &mut self,
        channel: &ChannelId,
        evidence: &BatchEvidence,
    ) -> Result<(), JournalError> {
        self.writable(channel)?;
        let (bytes, seal) = encode_snapshot(channel, self.key.as_ref(), evidence)?;
        self.last_seals.remove(channel);
        self.backend
            .replace(channel, &bytes)
            .map_err(JournalError::from_backend)?;
        self.last_seals.insert(channel.clone(), seal);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! The journal's own tests, and what the tests of its parts share.
    use std::collections::BTreeMap;
    use std::fs::{self, OpenOptions};
    use std::io::Write;

    use super::*;
    use crate::batch::evidence::EVIDENCE_VERSION;
    use crate::batch::evidence::event::{InventoryEntry, Settlement};
    use crate::batch::{Candidate, TaskStatus};
    use crate::{id::AgentId, id::TaskId, id::digest::Digest};

    pub(super) fn chan() -> ChannelId {
        ChannelId::new("c").unwrap()
    }

    pub(super) fn events() -> Vec<EvidenceEvent> {
        let t = TaskId::new("t").unwrap();
        let d = Digest::from_bytes([7; 32]);
        vec![
            EvidenceEvent::Started {
                channel: chan(),
                plan_digest: d,
                evidence_version: EVIDENCE_VERSION,
                inputs: BTreeMap::new(),
                recovery: false,
                inventory: vec![InventoryEntry {
                    task: t.clone(),
                    owner: AgentId::new("a").unwrap(),
                    budget: 2,
                }],
            },
            EvidenceEvent::Reserved {
                task: t.clone(),
                attempt: 1,
                input_digest: d,
            },
            EvidenceEvent::Settled {
                task: t,
                attempt: 1,
                settlement: Settlement::Accepted {
                    candidate: Candidate::default(),
                    digest: Candidate::default().digest(),
                },
            },
        ]
    }

    /// One record per event, chained.
    pub(super) fn image(events: &[EvidenceEvent]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut seal = GENESIS;
        for event in events {
            seal =
                encode_commit(&chan(), None, &seal, std::slice::from_ref(event), &mut out).unwrap();
        }
        out
    }

    #[test]
    fn a_deferred_append_loads_like_any_other_once_its_sync_completes() {
        let dir = tempfile::tempdir().unwrap();
        let mut journal = FileJournal::open(dir.path()).unwrap();
        let all = events();
        for event in &all {
            let mut one = vec![event.clone()];
            journal
                .append_deferred(&chan(), &mut one)
                .unwrap()
                .complete()
                .unwrap();
            assert!(one.is_empty(), "the events are taken");
        }
        let load = journal.load(&chan()).unwrap().unwrap();
        assert_eq!(load.events, all);
        assert_eq!(fs::read(journal.path_for(&chan())).unwrap(), image(&all));
    }

    #[test]
    fn after_a_deferred_sync_failed_the_next_append_checks_the_log_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut journal = FileJournal::open(dir.path()).unwrap();
        let all = events();
        journal.append(&chan(), &all[..1]).unwrap();
        let kept = fs::metadata(journal.path_for(&chan())).unwrap().len();
        let pending = journal
            .append_deferred(&chan(), &mut all[1..2].to_vec())
            .unwrap();
        // What a failed sync may leave: the deferred record lost in part.
        let file = OpenOptions::new()
            .write(true)
            .open(journal.path_for(&chan()))
            .unwrap();
        file.set_len(kept + 10).unwrap();
        drop(pending);
        journal.sync_failed.store(true, Ordering::SeqCst);
        // Chaining on the lost record's seal would bury the damage under a valid record.
        let err = journal.append(&chan(), &all[2..]).unwrap_err();
        assert!(
            matches!(err, JournalError::TornTailNotRepaired { .. }),
            "{err:?}"
        );
    }

    #[test]
    fn file_journal_appends_compacts_and_repairs_torn_tails_only_when_asked() {
        let dir = std::env::temp_dir().join(format!("kleene-journal-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let mut journal = FileJournal::open(&dir).unwrap();
        let all = events();
        journal.append(&chan(), &all[..2]).unwrap();
        let evidence = journal
            .load(&chan())
            .unwrap()
            .unwrap()
            .into_evidence()
            .unwrap();
        journal.compact(&chan(), &evidence).unwrap();
        journal.append(&chan(), &all[2..]).unwrap();
        // A torn append: loading reports it and leaves it; appending refuses until repaired.
        let path = journal.path_for(&chan());
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&image(&all[1..2])[..30]).unwrap();
        drop(f);
        let before = fs::read(&path).unwrap();
        let mut reopened = FileJournal::open(&dir).unwrap();
        let load = reopened.load(&chan()).unwrap().unwrap();
        assert!(load.snapshot.is_some());
        assert_eq!(load.events, all[2..]);
        assert_eq!(load.torn_tail.as_ref().unwrap().discarded, 30);
        assert_eq!(fs::read(&path).unwrap(), before);
        assert!(matches!(
            reopened.append(&chan(), &all[2..]),
            Err(JournalError::TornTailNotRepaired { .. })
        ));
        assert_eq!(fs::read(&path).unwrap(), before);
        let cut = reopened.repair_torn_tail(&chan()).unwrap().unwrap();
        assert_eq!(cut.discarded, 30);
        assert_eq!(reopened.repairs().len(), 1);
        assert_eq!(fs::read(&path).unwrap().len(), before.len() - 30);
        let folded = load.into_evidence().unwrap();
        assert_eq!(
            folded.status(&TaskId::new("t").unwrap()),
            Some(TaskStatus::Accepted)
        );
        assert_eq!(folded.digest(), BatchEvidence::fold(all).unwrap().digest());
        assert!(reopened.load(&chan()).unwrap().unwrap().torn_tail.is_none());
        assert_eq!(reopened.repair_torn_tail(&chan()).unwrap(), None);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_read_only_journal_removes_nothing_and_refuses_writes() {
        let dir = std::env::temp_dir().join(format!("kleene-journal-ro-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let missing = FileJournal::open_read_only(&dir);
        assert!(missing.load(&chan()).unwrap().is_none());
        assert!(!dir.exists());
        let mut writer = FileJournal::open(&dir).unwrap();
        writer.append(&chan(), &events()).unwrap();
        // A running writer's compaction temp file survives a reader.
        let tmp = dir.join("x.journal.tmp");
        fs::write(&tmp, b"half a snapshot").unwrap();
        let mut reader = FileJournal::open_read_only(&dir);
        assert_eq!(reader.load(&chan()).unwrap().unwrap().events, events());
        assert!(tmp.exists());
        for refused in [
            reader.append(&chan(), &events()).err(),
            reader.repair_torn_tail(&chan()).err(),
            reader
                .compact(&chan(), &BatchEvidence::fold(events()).unwrap())
                .err(),
        ] {
            assert!(matches!(refused, Some(JournalError::ReadOnly { .. })));
        }
        fs::remove_dir_all(&dir).unwrap();
    }
}
