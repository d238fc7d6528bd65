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
//! use kleene::batch::{EvidenceJournal, FileJournal};
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
use std::io;
use std::path::PathBuf;

use super::backend::{BackendError, FileBackend, LogBackend};
use super::event::EvidenceEvent;
use super::evidence::{BatchEvidence, FoldError};
use crate::checkpoint::{self, CheckpointError};
use crate::id::ChannelId;

/// The first four bytes of a framed journal record.
const RECORD_MAGIC: [u8; 4] = *b"KLNJ";
/// The record format version written today (version 1: bare checkpoint envelopes).
const RECORD_VERSION: u16 = 2;
/// The bytes a version-2 header covers with its own check.
const HEADER_FIELDS: usize = 16;
/// The bytes before a version-2 record's body.
const RECORD_HEADER_LEN: usize = HEADER_FIELDS + 32 + 32;
const SEAL_CHECKSUM: u8 = 0;
const SEAL_MAC: u8 = 1;
const SEAL_CONTEXT: &str = "kleene journal record seal v2";
const HEADER_CONTEXT: &str = "kleene journal record header v2";
/// The seal a chain starts from.
const GENESIS: [u8; 32] = [0; 32];

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

/// What is wrong with a damaged journal record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordDamage {
    /// The bytes do not start like a journal record of any version.
    #[error("it does not start like a journal record")]
    NotARecord,
    /// The header's own check does not match: its length or kind cannot be trusted.
    #[error("its header checksum does not match")]
    HeaderChecksum,
    /// The plain checksum over the record does not match.
    #[error("its checksum does not match")]
    Checksum,
    /// The keyed MAC does not verify under the configured key.
    #[error("its MAC does not verify with the configured journal key")]
    Mac,
    /// The header passed its check but names a record format or seal this build cannot read.
    #[error(
        "its header declares record format version {version} with seal kind {seal}, which this build cannot read"
    )]
    Unsupported {
        /// The record format version.
        version: u16,
        /// The seal kind.
        seal: u8,
    },
    /// The header passed its check but declares a body beyond [`checkpoint::MAX_PAYLOAD_LEN`].
    #[error("its header declares a {declared}-byte body, more than the {max} allowed")]
    TooLarge {
        /// The declared body length.
        declared: u64,
        /// The bound.
        max: u64,
    },
    /// A record of format version 1 (a bare checkpoint envelope) does not open.
    #[error(transparent)]
    Envelope(CheckpointError),
}

/// Why a journal could not be loaded, appended to, repaired or compacted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// An I/O operation on `path` failed.
    #[error("access journal at {}", .path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// An event or snapshot did not encode.
    #[error("encode journal record for channel {channel}")]
    Encode {
        /// The channel.
        channel: ChannelId,
        /// The codec's error.
        #[source]
        source: CheckpointError,
    },
    /// A record passed its checks but is not an event (or a snapshot anywhere but first):
    /// the journal was written by something else, and cutting it would lose data.
    #[error(
        "read journal of channel {channel}: record {record} at byte {offset} holds a foreign entry"
    )]
    Foreign {
        /// The channel.
        channel: ChannelId,
        /// The record's number, counting from 1.
        record: u64,
        /// Where the record starts.
        offset: u64,
        /// Why it was refused.
        #[source]
        source: CheckpointError,
    },
    /// A record is damaged and is not an incomplete final record: corruption, not a torn
    /// write. Nothing was changed.
    #[error(
        "read journal of channel {channel}: record {record} at byte {offset} is damaged ({damage}) and is not an interrupted final write; nothing was changed: restore the journal file from a copy, or move it aside and start the run again"
    )]
    Corrupt {
        /// The channel.
        channel: ChannelId,
        /// The damaged record's number, counting from 1.
        record: u64,
        /// Where the damaged record starts.
        offset: u64,
        /// What is wrong with it.
        damage: RecordDamage,
    },
    /// A journal key is configured but a record carries only a plain checksum.
    #[error(
        "read journal of channel {channel}: record {record} at byte {offset} carries no MAC, but a journal key is configured, so it cannot be trusted; nothing was changed: read the journal without the key only if you trust the directory, or start a new run with the key"
    )]
    Unkeyed {
        /// The channel.
        channel: ChannelId,
        /// The record's number, counting from 1.
        record: u64,
        /// Where the record starts.
        offset: u64,
    },
    /// A record is sealed with a journal key, but none is configured.
    #[error(
        "read journal of channel {channel}: record {record} at byte {offset} is sealed with a journal key, but none is configured: configure the key the journal was written with"
    )]
    KeyRequired {
        /// The channel.
        channel: ChannelId,
        /// The record's number, counting from 1.
        record: u64,
        /// Where the record starts.
        offset: u64,
    },
    /// A journal opened with [`FileJournal::open_read_only`] was asked to write.
    #[error(
        "write journal of channel {channel}: it was opened read-only; open it with FileJournal::open to write"
    )]
    ReadOnly {
        /// The channel.
        channel: ChannelId,
    },
    /// An append found the journal ending in an incomplete record.
    #[error(
        "append to journal of channel {channel}: it ends in an incomplete record at byte {} ({} bytes); cut it first with repair_torn_tail",
        .torn.offset, .torn.discarded
    )]
    TornTailNotRepaired {
        /// The channel.
        channel: ChannelId,
        /// The incomplete tail.
        torn: TornTail,
    },
    /// A store that is not a file system (a database, an engine) refused.
    #[error("access journal store for channel {channel}: {detail}")]
    Store {
        /// The channel.
        channel: ChannelId,
        /// What the store said.
        detail: String,
        /// The store's own error, when it has one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The journaled events do not fold into evidence.
    #[error("fold journal of channel {channel}")]
    Fold {
        /// The channel.
        channel: ChannelId,
        /// The fold's error.
        #[source]
        source: FoldError,
    },
}

impl JournalError {
    fn from_backend(e: BackendError) -> Self {
        match e {
            BackendError::Io { path, source } => JournalError::Io { path, source },
            BackendError::Store {
                channel,
                detail,
                source,
            } => JournalError::Store {
                channel,
                detail,
                source,
            },
        }
    }

    /// True when the journal holds damaged, unkeyed or foreign records: its bytes, not the
    /// environment, are at fault.
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            JournalError::Corrupt { .. }
                | JournalError::Unkeyed { .. }
                | JournalError::KeyRequired { .. }
                | JournalError::Foreign { .. }
        )
    }

    /// The byte offset of the record at fault, if the error names one.
    pub fn offset(&self) -> Option<u64> {
        match self {
            JournalError::Corrupt { offset, .. }
            | JournalError::Unkeyed { offset, .. }
            | JournalError::KeyRequired { offset, .. }
            | JournalError::Foreign { offset, .. } => Some(*offset),
            JournalError::TornTailNotRepaired { torn, .. } => Some(torn.offset),
            _ => None,
        }
    }

    /// The number (counting from 1) of the record at fault, if the error names one.
    pub fn record(&self) -> Option<u64> {
        match self {
            JournalError::Corrupt { record, .. }
            | JournalError::Unkeyed { record, .. }
            | JournalError::KeyRequired { record, .. }
            | JournalError::Foreign { record, .. } => Some(*record),
            _ => None,
        }
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

/// A journal in memory, holding event values (no encoding): for tests, benches and callers
/// that keep the journal alive themselves.
#[derive(Debug, Clone, Default)]
pub struct MemoryJournal {
    /// foldhash (seeded per process) rather than SipHash: a run looks its channel up on
    /// every append.
    channels: HashMap<
        ChannelId,
        (Option<BatchEvidence>, Vec<EvidenceEvent>),
        foldhash::fast::RandomState,
    >,
}

impl EvidenceJournal for MemoryJournal {
    fn append(
        &mut self,
        channel: &ChannelId,
        events: &[EvidenceEvent],
    ) -> Result<(), JournalError> {
        // Looked up before it is cloned: a run appends to one channel thousands of times.
        match self.channels.get_mut(channel) {
            Some((_, tail)) => tail.extend_from_slice(events),
            None => {
                self.channels
                    .insert(channel.clone(), (None, events.to_vec()));
            }
        }
        Ok(())
    }

    fn load(&self, channel: &ChannelId) -> Result<Option<JournalLoad>, JournalError> {
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

fn seal_of(
    channel: &ChannelId,
    key: Option<&JournalKey>,
    previous: &[u8; 32],
    header: &[u8],
    body: &[u8],
) -> [u8; 32] {
    let mut h = match key {
        Some(key) => {
            let mut h = blake3::Hasher::new_keyed(&key.0);
            h.update(SEAL_CONTEXT.as_bytes());
            // Only the MAC binds the channel: a plain checksum that did would report a
            // journal copied from another channel as damage instead of naming its channel.
            let id = channel.as_str().as_bytes();
            h.update(&(id.len() as u64).to_le_bytes());
            h.update(id);
            h
        }
        None => blake3::Hasher::new_derive_key(SEAL_CONTEXT),
    };
    h.update(previous);
    h.update(header);
    h.update(body);
    *h.finalize().as_bytes()
}

fn header_check(fields: &[u8]) -> [u8; 32] {
    *blake3::Hasher::new_derive_key(HEADER_CONTEXT)
        .update(fields)
        .finalize()
        .as_bytes()
}

/// Appends one version-2 record holding `body` to `out` and returns its seal.
fn frame(
    channel: &ChannelId,
    key: Option<&JournalKey>,
    previous: &[u8; 32],
    body: &[u8],
    out: &mut Vec<u8>,
) -> [u8; 32] {
    let start = out.len();
    out.extend_from_slice(&RECORD_MAGIC);
    out.extend_from_slice(&RECORD_VERSION.to_le_bytes());
    out.push(if key.is_some() {
        SEAL_MAC
    } else {
        SEAL_CHECKSUM
    });
    out.push(0);
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    let check = header_check(&out[start..]);
    out.extend_from_slice(&check);
    let seal = seal_of(channel, key, previous, &out[start..], body);
    out.extend_from_slice(&seal);
    out.extend_from_slice(body);
    seal
}

/// Encodes one commit of `events` as a single record after `previous`, returning its seal.
pub(crate) fn encode_commit(
    channel: &ChannelId,
    key: Option<&JournalKey>,
    previous: &[u8; 32],
    events: &[EvidenceEvent],
    out: &mut Vec<u8>,
) -> Result<[u8; 32], JournalError> {
    let mut body = Vec::new();
    for event in events {
        let envelope = checkpoint::encode(event).map_err(|source| JournalError::Encode {
            channel: channel.clone(),
            source,
        })?;
        body.extend_from_slice(&envelope);
    }
    Ok(frame(channel, key, previous, &body, out))
}

/// Encodes a journal made of one snapshot record, returning it and its seal.
pub(crate) fn encode_snapshot(
    channel: &ChannelId,
    key: Option<&JournalKey>,
    evidence: &BatchEvidence,
) -> Result<(Vec<u8>, [u8; 32]), JournalError> {
    let body = checkpoint::encode(evidence).map_err(|source| JournalError::Encode {
        channel: channel.clone(),
        source,
    })?;
    let mut out = Vec::with_capacity(RECORD_HEADER_LEN + body.len());
    let seal = frame(channel, key, &GENESIS, &body, &mut out);
    Ok((out, seal))
}

/// One whole record found by [`scan`].
#[derive(Debug, Clone)]
pub(crate) struct RecordSpan {
    start: usize,
    // Read only by the testing feature's image journal.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) end: usize,
    /// The checkpoint envelopes it holds.
    body: std::ops::Range<usize>,
}

/// A journal image's whole records, its torn tail, and the seal the next record chains to.
#[derive(Debug, Clone)]
pub(crate) struct Scan {
    pub(crate) records: Vec<RecordSpan>,
    pub(crate) torn: Option<TornTail>,
    pub(crate) last_seal: [u8; 32],
}

enum Step {
    Whole {
        end: usize,
        body_start: usize,
        seal: [u8; 32],
    },
    Torn(CheckpointError),
}

/// Whether an intact record of either version starts somewhere after `from`: then a record
/// that fails before it is damage, not a torn final write.
fn intact_record_after(bytes: &[u8], from: usize) -> bool {
    (from + 1..bytes.len()).any(|at| {
        let rest = &bytes[at..];
        if rest.starts_with(&RECORD_MAGIC) && rest.len() >= HEADER_FIELDS + 32 {
            header_check(&rest[..HEADER_FIELDS]) == rest[HEADER_FIELDS..HEADER_FIELDS + 32]
        } else {
            // Only a header whose declared record fits is worth hashing.
            rest.starts_with(&checkpoint::MAGIC)
                && rest.get(6) == Some(&checkpoint::CODEC_BINCODE2)
                && checkpoint::declared_len(rest).is_some()
                && checkpoint::open_prefix(rest).is_ok()
        }
    })
}

/// Checks a version-2 record at `at`.
fn step_v2(
    bytes: &[u8],
    at: usize,
    channel: &ChannelId,
    key: Option<&JournalKey>,
    previous: &[u8; 32],
) -> Result<Step, Result<RecordDamage, SealKind>> {
    let rest = &bytes[at..];
    if rest.len() < HEADER_FIELDS + 32 {
        return Ok(Step::Torn(CheckpointError::TooShort {
            len: rest.len(),
            needed: RECORD_HEADER_LEN as u64,
        }));
    }
    let (fields, after) = rest.split_at(HEADER_FIELDS);
    if header_check(fields) != after[..32] {
        return Err(Ok(RecordDamage::HeaderChecksum));
    }
    let version = u16::from_le_bytes([fields[4], fields[5]]);
    let seal_kind = fields[6];
    if version != RECORD_VERSION || fields[7] != 0 || seal_kind > SEAL_MAC {
        return Err(Ok(RecordDamage::Unsupported {
            version,
            seal: seal_kind,
        }));
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&fields[8..16]);
    let declared = u64::from_le_bytes(len);
    if declared > checkpoint::MAX_PAYLOAD_LEN {
        return Err(Ok(RecordDamage::TooLarge {
            declared,
            max: checkpoint::MAX_PAYLOAD_LEN,
        }));
    }
    let needed = RECORD_HEADER_LEN as u64 + declared;
    if (rest.len() as u64) < needed {
        return Ok(Step::Torn(CheckpointError::TooShort {
            len: rest.len(),
            needed,
        }));
    }
    match (seal_kind, key) {
        (SEAL_CHECKSUM, Some(_)) => return Err(Err(SealKind::Unkeyed)),
        (SEAL_MAC, None) => return Err(Err(SealKind::KeyRequired)),
        _ => {}
    }
    // `needed` fits: it is at most `rest.len()`.
    let end = RECORD_HEADER_LEN + declared as usize;
    let header = &rest[..HEADER_FIELDS + 32];
    let stored = &rest[HEADER_FIELDS + 32..RECORD_HEADER_LEN];
    let seal = seal_of(
        channel,
        key,
        previous,
        header,
        &rest[RECORD_HEADER_LEN..end],
    );
    if seal != stored {
        return Err(Ok(if key.is_some() {
            RecordDamage::Mac
        } else {
            RecordDamage::Checksum
        }));
    }
    Ok(Step::Whole {
        end: at + end,
        body_start: at + RECORD_HEADER_LEN,
        seal,
    })
}

enum SealKind {
    Unkeyed,
    KeyRequired,
}

/// Walks a journal image record by record, checking every header and seal (but not
/// decoding payloads). Never changes anything.
pub(crate) fn scan(
    channel: &ChannelId,
    bytes: &[u8],
    key: Option<&JournalKey>,
) -> Result<Scan, JournalError> {
    let mut records = Vec::new();
    let mut previous = GENESIS;
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let record = records.len() as u64 + 1;
        let offset = at as u64;
        let corrupt = |damage| JournalError::Corrupt {
            channel: channel.clone(),
            record,
            offset,
            damage,
        };
        let torn = |cause| {
            Ok(Scan {
                records: records.clone(),
                torn: Some(TornTail {
                    offset,
                    discarded: rest.len() as u64,
                    cause,
                }),
                last_seal: previous,
            })
        };
        let magic_prefix = |magic: &[u8; 4]| rest.len() < 4 && magic.starts_with(rest);
        if rest.starts_with(&RECORD_MAGIC) || magic_prefix(&RECORD_MAGIC) {
            match step_v2(bytes, at, channel, key, &previous) {
                Ok(Step::Whole {
                    end,
                    body_start,
                    seal,
                }) => {
                    records.push(RecordSpan {
                        start: at,
                        end,
                        body: body_start..end,
                    });
                    previous = seal;
                    at = end;
                }
                Ok(Step::Torn(cause)) => return torn(cause),
                Err(Ok(damage)) => return Err(corrupt(damage)),
                Err(Err(SealKind::Unkeyed)) => {
                    return Err(JournalError::Unkeyed {
                        channel: channel.clone(),
                        record,
                        offset,
                    });
                }
                Err(Err(SealKind::KeyRequired)) => {
                    return Err(JournalError::KeyRequired {
                        channel: channel.clone(),
                        record,
                        offset,
                    });
                }
            }
        } else if rest.starts_with(&checkpoint::MAGIC) || magic_prefix(&checkpoint::MAGIC) {
            if key.is_some() {
                return Err(JournalError::Unkeyed {
                    channel: channel.clone(),
                    record,
                    offset,
                });
            }
            match checkpoint::open_prefix(rest) {
                Ok(len) => {
                    records.push(RecordSpan {
                        start: at,
                        end: at + len,
                        body: at..at + len,
                    });
                    previous = GENESIS;
                    at += len;
                }
                // A version-1 record cannot tell a torn write from a damaged length field;
                // a whole record after it proves damage.
                Err(cause @ CheckpointError::TooShort { .. })
                    if !intact_record_after(bytes, at)
                        && !checkpoint::whole_but_for_its_length(rest) =>
                {
                    return torn(cause);
                }
                Err(cause) => return Err(corrupt(RecordDamage::Envelope(cause))),
            }
        } else {
            return Err(corrupt(RecordDamage::NotARecord));
        }
    }
    Ok(Scan {
        records,
        torn: None,
        last_seal: previous,
    })
}

/// Where each whole record of a journal image ends (up to the first that is not whole).
pub(crate) fn record_ends(
    channel: &ChannelId,
    bytes: &[u8],
    key: Option<&JournalKey>,
) -> Vec<usize> {
    scan(channel, bytes, key)
        .map(|s| s.records.iter().map(|r| r.end).collect())
        .unwrap_or_default()
}

/// Parses a journal image: its whole records (the first envelope of the first may be a
/// snapshot) and its torn tail, left in place. Never changes anything.
pub(crate) fn parse(
    channel: &ChannelId,
    bytes: &[u8],
    key: Option<&JournalKey>,
) -> Result<JournalLoad, JournalError> {
    let scanned = scan(channel, bytes, key)?;
    let mut snapshot = None;
    let mut events = Vec::new();
    for (i, span) in scanned.records.iter().enumerate() {
        let foreign = |source| JournalError::Foreign {
            channel: channel.clone(),
            record: i as u64 + 1,
            offset: span.start as u64,
            source,
        };
        let mut at = span.body.start;
        while at < span.body.end {
            let body = &bytes[at..span.body.end];
            // Only the length: decoding verifies the envelope's checksum once.
            let len = checkpoint::declared_len(body).ok_or_else(|| {
                foreign(CheckpointError::TooShort {
                    len: body.len(),
                    needed: checkpoint::HEADER_LEN as u64,
                })
            })?;
            let envelope = &body[..len];
            match checkpoint::decode::<EvidenceEvent>(envelope) {
                Ok(event) => events.push(event),
                Err(CheckpointError::WrongKind { .. })
                    if i == 0 && at == span.body.start && snapshot.is_none() =>
                {
                    snapshot =
                        Some(checkpoint::decode::<BatchEvidence>(envelope).map_err(foreign)?);
                }
                Err(e) => return Err(foreign(e)),
            }
            at += len;
        }
    }
    Ok(JournalLoad {
        snapshot,
        events,
        torn_tail: scanned.torn,
    })
}

/// The evidence journal over a log store: sealed, chained records appended to one log per
/// channel, each append made durable before it returns. Over a [`FileBackend`] it is the
/// [`FileJournal`]; over a [`CrashBackend`] it is what crash tests load after a simulated power
/// loss.
///
/// [`CrashBackend`]: crate::batch::CrashBackend
#[derive(Debug)]
pub struct Journal<B> {
    backend: B,
    key: Option<JournalKey>,
    /// The seal the next record of each channel chains to, once its log was checked whole.
    last_seals: HashMap<ChannelId, [u8; 32]>,
    repairs: Vec<(ChannelId, TornTail)>,
    scratch: Vec<u8>,
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

impl<B: LogBackend> EvidenceJournal for Journal<B> {
    fn append(
        &mut self,
        channel: &ChannelId,
        events: &[EvidenceEvent],
    ) -> Result<(), JournalError> {
        self.writable(channel)?;
        let previous = self.last_seal(channel)?;
        let mut bytes = std::mem::take(&mut self.scratch);
        bytes.clear();
        let sealed = encode_commit(channel, self.key.as_ref(), &previous, events, &mut bytes);
        let written = sealed.and_then(|seal| {
            self.backend
                .append(channel, &bytes)
                .and_then(|()| self.backend.sync(channel))
                .map(|()| seal)
                .map_err(|e| {
                    // The log may now end in a partial record; the next append must repair
                    // first.
                    self.last_seals.remove(channel);
                    JournalError::from_backend(e)
                })
        });
        self.scratch = bytes;
        self.last_seals.insert(channel.clone(), written?);
        Ok(())
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
    use std::collections::BTreeMap;
    use std::fs::{self, OpenOptions};
    use std::io::Write;
    use std::path::Path;

    use super::*;
    use crate::batch::event::{InventoryEntry, Settlement};
    use crate::batch::evidence::EVIDENCE_VERSION;
    use crate::batch::{Candidate, TaskStatus};
    use crate::{id::AgentId, id::TaskId, id::digest::Digest};

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

    /// One record per event, chained.
    fn image(events: &[EvidenceEvent]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut seal = GENESIS;
        for event in events {
            seal =
                encode_commit(&chan(), None, &seal, std::slice::from_ref(event), &mut out).unwrap();
        }
        out
    }

    #[test]
    fn every_cut_is_a_torn_tail_keeping_exactly_the_whole_records_before_it() {
        let all = events();
        let bytes = image(&all);
        let ends = record_ends(&chan(), &bytes, None);
        assert_eq!(ends.len(), 3);
        for cut in 0..=bytes.len() {
            let load = parse(&chan(), &bytes[..cut], None).unwrap();
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
    fn a_flipped_bit_in_a_middle_record_is_corruption_naming_it() {
        let mut bytes = image(&events());
        let ends = record_ends(&chan(), &bytes, None);
        bytes[ends[0] + 90] ^= 1;
        let err = parse(&chan(), &bytes, None).unwrap_err();
        assert!(
            matches!(
                err,
                JournalError::Corrupt { record: 2, offset, damage: RecordDamage::Checksum, .. }
                    if offset == ends[0] as u64
            ),
            "{err}"
        );
        // A flip in the length field is caught by the header check, not taken as torn.
        let mut bytes = image(&events());
        bytes[ends[1] + 12] ^= 0x40;
        assert!(matches!(
            parse(&chan(), &bytes, None),
            Err(JournalError::Corrupt {
                record: 3,
                damage: RecordDamage::HeaderChecksum,
                ..
            })
        ));
    }

    #[test]
    fn a_foreign_record_is_refused_not_cut() {
        let mut bytes = image(&events());
        let task = crate::closure::task::Task::new(
            TaskId::new("x").unwrap(),
            crate::closure::task::Spec::new("y"),
        );
        let foreign = checkpoint::encode(&task).unwrap();
        frame(
            &chan(),
            None,
            &scan(&chan(), &bytes, None).unwrap().last_seal,
            &foreign,
            &mut bytes,
        );
        assert!(matches!(
            parse(&chan(), &bytes, None),
            Err(JournalError::Foreign { record: 4, .. })
        ));
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

    /// Journals written before record framing (format version 1: bare checkpoint envelopes
    /// of events and snapshots at their format version 1, one per event, optionally led by a
    /// snapshot): old data, kept as it was written, never rewritten.
    const V1_FIXTURES: [&str; 2] = [
        "tests/fixtures/journal_v1.journal",
        "tests/fixtures/journal_v1_compacted.journal",
    ];

    #[test]
    fn version_one_journal_fixtures_load() {
        for name in V1_FIXTURES {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
            let fixture = fs::read(&path).unwrap();
            let load = parse(&chan(), &fixture, None).unwrap();
            assert!(load.torn_tail.is_none());
            assert_eq!(
                load.into_evidence().unwrap().digest(),
                BatchEvidence::fold(events()).unwrap().digest()
            );
            // Every truncation of an old journal is a torn tail after its whole records.
            let ends = record_ends(&chan(), &fixture, None);
            for cut in 0..fixture.len() {
                let load = parse(&chan(), &fixture[..cut], None).unwrap();
                let kept = ends
                    .iter()
                    .copied()
                    .filter(|&e| e <= cut)
                    .max()
                    .unwrap_or(0);
                let torn = load.torn_tail.map(|t| t.offset as usize);
                assert_eq!(torn, (cut != kept).then_some(kept), "{name} cut at {cut}");
            }
        }
    }

    #[test]
    fn every_single_bit_flip_in_a_version_one_journal_is_refused() {
        let fixture = fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/journal_v1.journal"),
        )
        .unwrap();
        let (mut torn, mut refused, mut ok) = (0, 0, 0);
        for byte in 0..fixture.len() {
            for bit in 0..8 {
                let mut f = fixture.clone();
                f[byte] ^= 1 << bit;
                match parse(&chan(), &f, None) {
                    Ok(l) if l.torn_tail.is_some() => torn += 1,
                    Ok(_) => ok += 1,
                    Err(_) => refused += 1,
                }
            }
        }
        // The checksum covers the length as written, so even a flipped length field in
        // the last record is told from a torn write.
        assert_eq!((torn, ok), (0, 0), "{refused} refused");
    }

    /// Journals of record format 2 written before closures were evidence (their events and
    /// snapshot at format version 1): old data, kept as it was written; they still load.
    #[test]
    fn version_two_journals_of_version_one_events_still_load() {
        let all = events();
        let key = JournalKey::from_bytes(*b"kleene journal fixture key v2 ..");
        for (name, key) in [
            ("tests/fixtures/journal_v2.journal", None),
            ("tests/fixtures/journal_v2_keyed.journal", Some(&key)),
        ] {
            let bytes = fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(name)).unwrap();
            let load = parse(&chan(), &bytes, key).unwrap();
            assert_eq!(load.events, all[1..]);
            assert_eq!(
                load.into_evidence().unwrap().digest(),
                BatchEvidence::fold(all.clone()).unwrap().digest()
            );
        }
    }

    /// The events of [`events`] with a closure in between: one fix drawn, the closure
    /// settled, then the call's settlement.
    fn closure_events() -> Vec<EvidenceEvent> {
        let mut all = events();
        let t = TaskId::new("t").unwrap();
        let settled = all.pop().unwrap();
        all.push(EvidenceEvent::FixDrawn {
            task: t.clone(),
            attempt: 1,
            fix: TaskId::new("t_fix_1").unwrap(),
        });
        all.push(EvidenceEvent::ClosureSettled {
            task: t,
            attempt: 1,
            closure: crate::batch::ClosureSettlement {
                fix_attempts: 1,
                end: crate::batch::ClosureEnd::Resolved { depth: 1 },
                audit_head: Digest::from_bytes([8; 32]),
                record_digest: Digest::from_bytes([9; 32]),
            },
        });
        all.push(settled);
        all
    }

    /// Today's formats (record format 2 framing; events and snapshots at format version 2,
    /// closure events included), unkeyed and keyed: a change to the framing, the seals or
    /// the event encoding shows here first. Run with `KLEENE_WRITE_FIXTURES=1` to (re)write
    /// them after a deliberate format change (and bump the format version it changes).
    #[test]
    fn todays_journal_fixtures_are_what_this_build_writes() {
        let all = closure_events();
        let key = JournalKey::from_bytes(*b"kleene journal fixture key v2 ..");
        for (name, key) in [
            ("tests/fixtures/journal_v2_closures.journal", None),
            (
                "tests/fixtures/journal_v2_closures_keyed.journal",
                Some(&key),
            ),
        ] {
            let (mut bytes, seal) = encode_snapshot(
                &chan(),
                key,
                &BatchEvidence::fold(all[..2].to_vec()).unwrap(),
            )
            .unwrap();
            encode_commit(&chan(), key, &seal, &all[2..], &mut bytes).unwrap();
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
            if std::env::var_os("KLEENE_WRITE_FIXTURES").is_some() {
                fs::write(&path, &bytes).unwrap();
            }
            assert_eq!(fs::read(&path).unwrap(), bytes, "{name}");
            let load = parse(&chan(), &bytes, key).unwrap();
            assert_eq!(load.events, all[2..]);
            let evidence = load.into_evidence().unwrap();
            assert_eq!(
                evidence.digest(),
                BatchEvidence::fold(all.clone()).unwrap().digest()
            );
            assert_eq!(evidence.fix_attempts_used(), 1);
        }
    }

    /// An event of a format newer than this build's is refused by its version (a build that
    /// reads only version-1 events refuses today's closure events the same way), and a
    /// version-1 envelope of an old event still decodes.
    #[test]
    fn event_format_versions_are_refused_or_read_by_number() {
        let event = closure_events().remove(2);
        let payload = checkpoint::encode_payload(&event).unwrap();
        let future = checkpoint::seal(*b"BEVT", 3, &payload);
        let err = checkpoint::decode::<EvidenceEvent>(&future).unwrap_err();
        assert!(
            matches!(
                err,
                CheckpointError::UnsupportedVersion {
                    found: 3,
                    min: 1,
                    max: 2,
                    ..
                }
            ),
            "{err}"
        );
        let old = events().remove(1);
        let v1 = checkpoint::seal(*b"BEVT", 1, &checkpoint::encode_payload(&old).unwrap());
        assert_eq!(checkpoint::decode::<EvidenceEvent>(&v1).unwrap(), old);
    }

    #[test]
    fn a_version_one_journal_takes_version_two_appends_and_detects_middle_damage() {
        let all = events();
        let mut bytes = fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/journal_v1.journal"),
        )
        .unwrap();
        let old_len = bytes.len();
        let last = scan(&chan(), &bytes, None).unwrap().last_seal;
        encode_commit(&chan(), None, &last, &all[1..2], &mut bytes).unwrap();
        assert_eq!(parse(&chan(), &bytes, None).unwrap().events.len(), 4);
        // A flipped high bit in a version-1 length field would claim the rest of the file;
        // the intact records after it show it is damage.
        let ends = record_ends(&chan(), &bytes, None);
        let mut damaged = bytes.clone();
        damaged[ends[0] + 11 + 5] ^= 0x10;
        assert!(matches!(
            parse(&chan(), &damaged, None),
            Err(JournalError::Corrupt { record: 2, .. })
        ));
        // The genuinely torn last version-1 record is still a torn tail.
        let torn = parse(&chan(), &bytes[..old_len - 3], None).unwrap();
        assert_eq!(torn.events.len(), 2);
        assert_eq!(torn.torn_tail.unwrap().offset as usize, ends[1]);
    }
}
