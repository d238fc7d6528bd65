//! Where evidence events are committed: an append-only journal per channel.
//!
//! Each event is one checksummed checkpoint envelope; a journal is the concatenation of them,
//! optionally led by a snapshot (the folded [`BatchEvidence`]) written by compaction. A commit
//! appends, so its cost does not grow with the batch; compaction rewrites the journal as one
//! snapshot, atomically, once the tail is as long as the evidence it folds into.
//!
//! On load, a torn or corrupted tail (an interrupted append, a flipped bit) is detected by the
//! envelope checksum and cut at the last whole record; nothing before it is lost.
//!
//! ```
//! use kleene::ChannelId;
//! use kleene::batch::{EvidenceJournal, FileJournal};
//!
//! let dir = std::env::temp_dir().join(format!("kleene-journal-doc-{}", std::process::id()));
//! let mut journal = FileJournal::open(&dir)?;
//! assert!(journal.load(&ChannelId::new("chan-1")?)?.is_none());
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::event::EvidenceEvent;
use super::evidence::{BatchEvidence, FoldError};
use crate::ChannelId;
use crate::checkpoint::{self, CheckpointError};

/// Why a journal could not be loaded, appended to or compacted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// An I/O operation on `path` failed.
    #[error("access journal at {}: {source}", .path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// An event or snapshot did not encode.
    #[error("encode journal record for channel {channel}: {source}")]
    Encode {
        /// The channel.
        channel: ChannelId,
        /// The codec's error.
        #[source]
        source: CheckpointError,
    },
    /// A record passed its checksum but is not an event (or a snapshot anywhere but first):
    /// the journal was written by something else, and cutting it would lose data.
    #[error("journal of channel {channel} holds a foreign record at byte {offset}: {source}")]
    Foreign {
        /// The channel.
        channel: ChannelId,
        /// Where the record starts.
        offset: u64,
        /// Why it was refused.
        #[source]
        source: CheckpointError,
    },
    /// The journaled events do not fold into evidence.
    #[error("fold journal of channel {channel}: {source}")]
    Fold {
        /// The channel.
        channel: ChannelId,
        /// The fold's error.
        #[source]
        source: FoldError,
    },
}

impl JournalError {
    // A private conversion: a `From` impl would add `(PathBuf, io::Error)` to the public API.
    fn from_io((path, source): checkpoint::IoFailure) -> Self {
        JournalError::Io { path, source }
    }

    fn io(path: &Path) -> impl FnOnce(io::Error) -> JournalError + '_ {
        move |source| JournalError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// A tail that was cut on load because it was not a whole, intact record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Where the whole records end (the new journal length).
    pub offset: u64,
    /// How many bytes were cut.
    pub discarded: u64,
    /// Why the first cut record was refused.
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
    /// The tail that was cut, if one was torn.
    pub torn_tail: Option<TornTail>,
}

impl JournalLoad {
    /// A load made of an optional snapshot, the events after it and the tail that was cut
    /// (for implementations of [`EvidenceJournal`]).
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
                BatchEvidence::start(first)?
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
/// per call (after a crash, either all of a call's events are there or a torn tail that
/// `load` cuts), and `compact` must replace the journal atomically.
pub trait EvidenceJournal {
    /// Appends `events` to `channel`'s journal, durably, in one commit.
    ///
    /// # Errors
    ///
    /// [`JournalError`] when the events cannot be encoded or written.
    fn append(&mut self, channel: &ChannelId, events: &[EvidenceEvent])
    -> Result<(), JournalError>;

    /// Loads `channel`'s journal, or `None` when the channel has none. A torn tail is cut
    /// (and reported), never returned as data.
    ///
    /// # Errors
    ///
    /// [`JournalError`] when the journal cannot be read or holds a foreign record.
    fn load(&mut self, channel: &ChannelId) -> Result<Option<JournalLoad>, JournalError>;

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

/// A journal in memory, holding event values (no encoding): for tests, benches and callers
/// that keep the journal alive themselves.
#[derive(Debug, Clone, Default)]
pub struct MemoryJournal {
    channels: HashMap<ChannelId, (Option<BatchEvidence>, Vec<EvidenceEvent>)>,
}

impl EvidenceJournal for MemoryJournal {
    fn append(
        &mut self,
        channel: &ChannelId,
        events: &[EvidenceEvent],
    ) -> Result<(), JournalError> {
        self.channels
            .entry(channel.clone())
            .or_default()
            .1
            .extend_from_slice(events);
        Ok(())
    }

    fn load(&mut self, channel: &ChannelId) -> Result<Option<JournalLoad>, JournalError> {
        Ok(self
            .channels
            .get(channel)
            .map(|(snapshot, events)| JournalLoad {
                snapshot: snapshot.clone(),
                events: events.clone(),
                torn_tail: None,
            }))
    }

    fn compact(
        &mut self,
        channel: &ChannelId,
        evidence: &BatchEvidence,
    ) -> Result<(), JournalError> {
        self.channels
            .insert(channel.clone(), (Some(evidence.clone()), Vec::new()));
        Ok(())
    }
}

/// Encodes events as concatenated checksummed records.
pub(crate) fn encode_events(
    channel: &ChannelId,
    events: &[EvidenceEvent],
    out: &mut Vec<u8>,
) -> Result<(), JournalError> {
    for event in events {
        let record = checkpoint::encode(event).map_err(|source| JournalError::Encode {
            channel: channel.clone(),
            source,
        })?;
        out.extend_from_slice(&record);
    }
    Ok(())
}

/// Encodes a snapshot record.
pub(crate) fn encode_snapshot(
    channel: &ChannelId,
    evidence: &BatchEvidence,
) -> Result<Vec<u8>, JournalError> {
    checkpoint::encode(evidence).map_err(|source| JournalError::Encode {
        channel: channel.clone(),
        source,
    })
}

/// Where each whole record ends, and the tail after the last one if it is torn.
pub(crate) fn record_ends(bytes: &[u8]) -> (Vec<usize>, Option<TornTail>) {
    let mut ends = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match checkpoint::open_prefix(&bytes[at..]) {
            Ok(len) => {
                at += len;
                ends.push(at);
            }
            Err(cause) => {
                return (
                    ends,
                    Some(TornTail {
                        offset: at as u64,
                        discarded: (bytes.len() - at) as u64,
                        cause,
                    }),
                );
            }
        }
    }
    (ends, None)
}

/// Parses a journal image: records up to the first torn one, the first may be a snapshot.
pub(crate) fn parse(channel: &ChannelId, bytes: &[u8]) -> Result<JournalLoad, JournalError> {
    let (ends, torn_tail) = record_ends(bytes);
    let mut snapshot = None;
    let mut events = Vec::with_capacity(ends.len());
    let mut start = 0;
    for (i, &end) in ends.iter().enumerate() {
        let record = &bytes[start..end];
        let foreign = |source| JournalError::Foreign {
            channel: channel.clone(),
            offset: start as u64,
            source,
        };
        match checkpoint::decode::<EvidenceEvent>(record) {
            Ok(event) => events.push(event),
            Err(CheckpointError::WrongKind { .. }) if i == 0 => {
                snapshot = Some(checkpoint::decode::<BatchEvidence>(record).map_err(foreign)?);
            }
            Err(e) => return Err(foreign(e)),
        }
        start = end;
    }
    Ok(JournalLoad {
        snapshot,
        events,
        torn_tail,
    })
}

/// A journal in a directory: one append-only file per channel, each append followed by
/// `fdatasync` before it returns.
///
/// File names are a digest of the channel id, so no channel id can name a path outside the
/// directory. One journal should own a directory.
#[derive(Debug)]
pub struct FileJournal {
    dir: PathBuf,
    open: HashMap<ChannelId, File>,
    scratch: Vec<u8>,
}

impl FileJournal {
    /// Opens (creating if needed) the journal directory `dir`, removing temp files an
    /// interrupted compaction left behind.
    ///
    /// # Errors
    ///
    /// [`JournalError::Io`] when the directory cannot be created or listed.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, JournalError> {
        let dir = dir.into();
        checkpoint::open_dir(&dir).map_err(JournalError::from_io)?;
        Ok(Self {
            dir,
            open: HashMap::new(),
            scratch: Vec::new(),
        })
    }

    /// The file that holds `channel`'s journal.
    pub fn path_for(&self, channel: &ChannelId) -> PathBuf {
        checkpoint::channel_file(
            &self.dir,
            "kleene channel journal file name v1",
            channel,
            "journal",
        )
    }

    /// The append handle for `channel`, cutting a torn tail first so new records never land
    /// after garbage.
    fn handle(&mut self, channel: &ChannelId) -> Result<&mut File, JournalError> {
        let path = self.path_for(channel);
        let dir = self.dir.clone();
        match self.open.entry(channel.clone()) {
            std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(slot) => {
                let existed = path.exists();
                let file = OpenOptions::new()
                    .read(true)
                    .append(true)
                    .create(true)
                    .open(&path)
                    .map_err(JournalError::io(&path))?;
                if existed {
                    let bytes = fs::read(&path).map_err(JournalError::io(&path))?;
                    if let (_, Some(torn)) = record_ends(&bytes) {
                        file.set_len(torn.offset).map_err(JournalError::io(&path))?;
                        file.sync_all().map_err(JournalError::io(&path))?;
                    }
                } else {
                    // A new file is durable only once its directory entry is.
                    checkpoint::sync_dir(&dir).map_err(JournalError::from_io)?;
                }
                Ok(slot.insert(file))
            }
        }
    }
}

impl EvidenceJournal for FileJournal {
    fn append(
        &mut self,
        channel: &ChannelId,
        events: &[EvidenceEvent],
    ) -> Result<(), JournalError> {
        let mut bytes = std::mem::take(&mut self.scratch);
        bytes.clear();
        encode_events(channel, events, &mut bytes)?;
        let file = self.handle(channel)?;
        let written = file.write_all(&bytes).and_then(|()| file.sync_data());
        self.scratch = bytes;
        written.map_err(|source| {
            // The file may now end in a partial record; reopening cuts it.
            self.open.remove(channel);
            JournalError::Io {
                path: self.path_for(channel),
                source,
            }
        })
    }

    fn load(&mut self, channel: &ChannelId) -> Result<Option<JournalLoad>, JournalError> {
        let path = self.path_for(channel);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(JournalError::io(&path)(e)),
        };
        let load = parse(channel, &bytes)?;
        if let Some(torn) = &load.torn_tail {
            // Cut now, so the next append follows the last whole record.
            self.open.remove(channel);
            let file = OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(JournalError::io(&path))?;
            file.set_len(torn.offset).map_err(JournalError::io(&path))?;
            file.sync_all().map_err(JournalError::io(&path))?;
        }
        if load.snapshot.is_none() && load.events.is_empty() {
            return Ok(None);
        }
        Ok(Some(load))
    }

    fn compact(
        &mut self,
        channel: &ChannelId,
        evidence: &BatchEvidence,
    ) -> Result<(), JournalError> {
        let bytes = encode_snapshot(channel, evidence)?;
        // The append handle points at the file being replaced; the next append reopens.
        self.open.remove(channel);
        checkpoint::replace_file(&self.dir, &self.path_for(channel), &bytes)
            .map_err(JournalError::from_io)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::batch::event::{InventoryEntry, Settlement};
    use crate::batch::evidence::EVIDENCE_VERSION;
    use crate::batch::{Candidate, TaskStatus};
    use crate::{AgentId, Digest, TaskId};

    fn chan() -> ChannelId {
        ChannelId::new("c").unwrap()
    }

    fn events() -> Vec<EvidenceEvent> {
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

    fn image(events: &[EvidenceEvent]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_events(&chan(), events, &mut out).unwrap();
        out
    }

    #[test]
    fn every_cut_keeps_exactly_the_whole_records_before_it() {
        let all = events();
        let bytes = image(&all);
        let (ends, torn) = record_ends(&bytes);
        assert_eq!(ends.len(), 3);
        assert!(torn.is_none());
        for cut in 0..=bytes.len() {
            let load = parse(&chan(), &bytes[..cut]).unwrap();
            let whole = ends.iter().filter(|&&e| e <= cut).count();
            assert_eq!(load.events, all[..whole]);
            let kept = if whole == 0 { 0 } else { ends[whole - 1] };
            assert_eq!(load.torn_tail.is_some(), cut != kept, "cut at {cut}");
            if let Some(t) = load.torn_tail {
                assert_eq!(t.offset as usize, kept);
                assert_eq!(t.discarded as usize, cut - kept);
            }
        }
    }

    #[test]
    fn a_flipped_bit_cuts_from_its_record() {
        let all = events();
        let mut bytes = image(&all);
        let (ends, _) = record_ends(&bytes);
        bytes[ends[1] + 60] ^= 1;
        let load = parse(&chan(), &bytes).unwrap();
        assert_eq!(load.events, all[..2]);
        assert_eq!(
            load.torn_tail.unwrap().cause,
            CheckpointError::ChecksumMismatch
        );
    }

    #[test]
    fn a_foreign_record_is_refused_not_cut() {
        let mut bytes = image(&events());
        bytes.extend(
            checkpoint::encode(&crate::Task::new(
                TaskId::new("x").unwrap(),
                crate::Spec::new("y"),
            ))
            .unwrap(),
        );
        assert!(matches!(
            parse(&chan(), &bytes),
            Err(JournalError::Foreign { .. })
        ));
    }

    #[test]
    fn file_journal_appends_compacts_and_cuts_torn_tails() {
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
        // A torn append: the next open cuts it before appending.
        let path = journal.path_for(&chan());
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&image(&all[1..2])[..30]).unwrap();
        drop(f);
        let mut reopened = FileJournal::open(&dir).unwrap();
        let load = reopened.load(&chan()).unwrap().unwrap();
        assert!(load.snapshot.is_some());
        assert_eq!(load.events, all[2..]);
        assert_eq!(load.torn_tail.as_ref().unwrap().discarded, 30);
        let folded = load.into_evidence().unwrap();
        assert_eq!(
            folded.status(&TaskId::new("t").unwrap()),
            TaskStatus::Accepted
        );
        assert_eq!(folded.digest(), BatchEvidence::fold(all).unwrap().digest());
        assert!(reopened.load(&chan()).unwrap().unwrap().torn_tail.is_none());
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Journals written before record framing (format version 1: bare checkpoint envelopes,
    /// one per event, optionally led by a snapshot). Run with `KLEENE_WRITE_FIXTURES=1` to
    /// (re)write them; they should never need to change.
    fn v1_fixtures() -> [(&'static str, Vec<u8>); 2] {
        let all = events();
        let mut plain = Vec::new();
        for event in &all {
            plain.extend(checkpoint::encode(event).unwrap());
        }
        let mut compacted =
            checkpoint::encode(&BatchEvidence::fold(all[..2].to_vec()).unwrap()).unwrap();
        compacted.extend(checkpoint::encode(&all[2]).unwrap());
        [
            ("tests/fixtures/journal_v1.journal", plain),
            ("tests/fixtures/journal_v1_compacted.journal", compacted),
        ]
    }

    #[test]
    fn version_one_journal_fixtures_load() {
        for (name, bytes) in v1_fixtures() {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
            if std::env::var_os("KLEENE_WRITE_FIXTURES").is_some() {
                fs::write(&path, &bytes).unwrap();
            }
            let fixture = fs::read(&path).unwrap();
            assert_eq!(fixture, bytes, "{name}");
            let load = parse(&chan(), &fixture).unwrap();
            assert!(load.torn_tail.is_none());
            assert_eq!(
                load.into_evidence().unwrap().digest(),
                BatchEvidence::fold(events()).unwrap().digest()
            );
        }
    }

    #[test]
    fn memory_journal_compaction_replaces_the_tail() {
        let mut journal = MemoryJournal::default();
        let all = events();
        journal.append(&chan(), &all).unwrap();
        let evidence = BatchEvidence::fold(all).unwrap();
        journal.compact(&chan(), &evidence).unwrap();
        let load = journal.load(&chan()).unwrap().unwrap();
        assert!(load.events.is_empty());
        assert_eq!(load.into_evidence().unwrap(), evidence);
    }
}
