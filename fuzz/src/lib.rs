//! Input formats shared by the fuzz targets and the seed generator.
//!
//! A checkpoint's checksum stops a mutating fuzzer at the envelope: almost every mutated input
//! fails with a checksum mismatch and never reaches the payload decoder. So the checkpoint and
//! journal targets read their input as *payloads plus a little framing*, and seal each payload
//! in a valid envelope (the layout documented in `kleene::checkpoint`) before decoding; one mode
//! still passes the bytes verbatim, for the envelope parser itself.
//!
//! ```
//! use kleene::checkpoint::{self, Checkpoint};
//! use kleene::{closure::Spec, Task, id::TaskId};
//!
//! let task = Task::new(TaskId::new("t1")?, Spec::new("build the login page"));
//! let input = kleene_fuzz::checkpoint_seed(&task)?;
//! assert_eq!(kleene_fuzz::checkpoint_bytes::<Task>(&input), checkpoint::encode(&task)?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::sync::Once;

use kleene::checkpoint::{self, Checkpoint, CheckpointError, HEADER_LEN, MAGIC};
use kleene::{closure::Spec, id::TaskId, Task};

/// The codec tag every envelope is sealed with (bincode 2).
const CODEC: u8 = checkpoint::CODEC_BINCODE2;

/// The envelope checksum's blake3 derive-key context.
const CHECKSUM_CONTEXT: &str = "kleene checkpoint envelope v1";

/// Seals `payload` in an envelope of `kind` at `version`, with a valid checksum, following
/// the layout `kleene::checkpoint` documents.
pub fn seal(kind: [u8; 4], version: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.push(CODEC);
    out.extend_from_slice(&kind);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let mut hasher = blake3::Hasher::new_derive_key(CHECKSUM_CONTEXT);
    hasher.update(&out);
    hasher.update(payload);
    out.extend_from_slice(hasher.finalize().as_bytes());
    out.extend_from_slice(payload);
    out
}

/// Panics (once, on the first input) if [`seal`] no longer writes what `checkpoint::encode`
/// writes: a changed envelope would otherwise turn every sealed input into a checksum
/// mismatch and the targets would silently stop reaching the payload decoders.
pub fn assert_envelope_layout() {
    static CHECKED: Once = Once::new();
    CHECKED.call_once(|| {
        let task = Task::new(
            TaskId::new("layout_probe").expect("a valid id"),
            Spec::new("probe"),
        );
        let encoded = checkpoint::encode(&task).expect("a task encodes");
        let payload = &encoded[HEADER_LEN..];
        assert_eq!(
            seal(Task::KIND, Task::VERSION, payload),
            encoded,
            "the checkpoint envelope layout changed: update kleene_fuzz::seal"
        );
    });
}

/// The first input byte of a checkpoint target: how the rest becomes envelope bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointMode {
    /// Sealed at the type's current format version.
    Current,
    /// Sealed at the oldest readable version (a migration path when it differs).
    Oldest,
    /// Sealed at the version after the current one (must be refused as unsupported).
    Future,
    /// Passed verbatim: the envelope parser itself.
    Raw,
}

impl CheckpointMode {
    /// The mode a first byte selects.
    pub fn of(byte: u8) -> Self {
        match byte % 4 {
            0 => Self::Current,
            1 => Self::Oldest,
            2 => Self::Future,
            _ => Self::Raw,
        }
    }

    /// The first byte that selects this mode.
    pub fn byte(self) -> u8 {
        match self {
            Self::Current => 0,
            Self::Oldest => 1,
            Self::Future => 2,
            Self::Raw => 3,
        }
    }

    fn version<T: Checkpoint>(self) -> u16 {
        match self {
            Self::Current | Self::Raw => T::VERSION,
            Self::Oldest => T::MIN_VERSION,
            Self::Future => T::VERSION.wrapping_add(1),
        }
    }
}

/// The envelope bytes a checkpoint target decodes as `T`: the first byte is a
/// [`CheckpointMode`], the rest the payload (or, raw, the whole envelope).
pub fn checkpoint_bytes<T: Checkpoint>(data: &[u8]) -> Vec<u8> {
    let Some((&mode, rest)) = data.split_first() else {
        return Vec::new();
    };
    match CheckpointMode::of(mode) {
        CheckpointMode::Raw => rest.to_vec(),
        mode => seal(T::KIND, mode.version::<T>(), rest),
    }
}

/// A checkpoint target's input for `value`: [`CheckpointMode::Current`] and its payload.
///
/// # Errors
///
/// When `value` does not encode.
pub fn checkpoint_seed<T: Checkpoint>(value: &T) -> Result<Vec<u8>, CheckpointError> {
    let encoded = checkpoint::encode(value)?;
    let mut input = vec![CheckpointMode::Current.byte()];
    input.extend_from_slice(&encoded[HEADER_LEN..]);
    Ok(input)
}

/// Decodes `bytes` as `T` and, when that succeeds, checks that the value's own encoding
/// decodes again and re-encodes to the same bytes (the codec is deterministic on what it
/// accepts). Returns the decoded value.
///
/// # Panics
///
/// When a decoded value's encoding does not decode, or re-encodes differently: a fuzz
/// finding.
pub fn decode_and_round_trip<T: Checkpoint>(bytes: &[u8]) -> Option<T> {
    let value = checkpoint::decode::<T>(bytes).ok()?;
    let first = checkpoint::encode(&value).expect("a decoded value encodes");
    let again = checkpoint::decode::<T>(&first).expect("a decoded value's encoding decodes");
    let second = checkpoint::encode(&again).expect("a decoded value encodes");
    assert_eq!(first, second, "re-encoding a decoded value is not stable");
    Some(value)
}

/// The delta store a delta target reads: with a first byte of 0 the rest verbatim; otherwise
/// a run of payloads, each a little-endian `u16` length and that many bytes, each sealed as
/// a current-version `ClosureDelta` envelope, one after the other (a last payload shorter
/// than its length is sealed as it is).
pub fn delta_log_input(data: &[u8]) -> Vec<u8> {
    use kleene::closure::machine::ClosureDelta;
    let Some((&mode, mut rest)) = data.split_first() else {
        return Vec::new();
    };
    if mode == 0 {
        return rest.to_vec();
    }
    let mut store = Vec::new();
    while let [a, b, tail @ ..] = rest {
        let len = usize::from(u16::from_le_bytes([*a, *b])).min(tail.len());
        let (payload, next) = tail.split_at(len);
        store.extend(seal(ClosureDelta::KIND, ClosureDelta::VERSION, payload));
        rest = next;
    }
    store
}

/// A delta target's input for `deltas`, in [`delta_log_input`]'s framing.
///
/// # Errors
///
/// When a delta does not encode.
pub fn delta_log_seed(deltas: &[kleene::closure::machine::ClosureDelta]) -> Result<Vec<u8>, CheckpointError> {
    let mut input = vec![1];
    for delta in deltas {
        let encoded = delta.encode()?;
        let payload = &encoded[HEADER_LEN..];
        let len = u16::try_from(payload.len()).map_err(|_| CheckpointError::Decode {
            message: "a seed delta longer than 64 KiB".to_owned(),
        })?;
        input.extend_from_slice(&len.to_le_bytes());
        input.extend_from_slice(payload);
    }
    Ok(input)
}

/// How one framed record of a journal target's input becomes journal bytes (the tag byte's
/// low two bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// An evidence event (`BEVT`), sealed.
    Event,
    /// A snapshot of folded evidence (`EVID`), sealed.
    Snapshot,
    /// A task checkpoint (`TASK`), sealed: a foreign record in a journal.
    Foreign,
    /// Verbatim bytes: torn records, flipped bits, garbage.
    Raw,
}

impl RecordKind {
    fn of(tag: u8) -> Self {
        match tag % 4 {
            0 => Self::Event,
            1 => Self::Snapshot,
            2 => Self::Foreign,
            _ => Self::Raw,
        }
    }

    fn tag(self) -> u8 {
        match self {
            Self::Event => 0,
            Self::Snapshot => 1,
            Self::Foreign => 2,
            Self::Raw => 3,
        }
    }
}

/// Which journal record format a journal target's input is framed in (its first byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalMode {
    /// Record format 1: bare checkpoint envelopes, one per event (journals written before
    /// the framing).
    Bare,
    /// Record format 2: each record a `KLNJ` frame with a header check and a seal chained
    /// to the previous record's, holding one or more envelopes.
    Framed,
    /// The rest of the input is the journal image verbatim.
    Raw,
}

impl JournalMode {
    fn of(byte: u8) -> Self {
        match byte % 4 {
            0 => Self::Bare,
            2 => Self::Framed,
            _ => Self::Raw,
        }
    }

    fn byte(self) -> u8 {
        match self {
            Self::Bare => 0,
            Self::Framed => 2,
            Self::Raw => 1,
        }
    }
}

/// The tag bit that puts a record's envelope in the same frame as the previous one.
const JOIN: u8 = 8;
/// The tag bit that seals an envelope at the version after the current one.
const FUTURE: u8 = 4;

const RECORD_MAGIC: [u8; 4] = *b"KLNJ";
const RECORD_VERSION: u16 = 2;
const SEAL_CHECKSUM: u8 = 0;
const RECORD_HEADER_CONTEXT: &str = "kleene journal record header v2";
const RECORD_SEAL_CONTEXT: &str = "kleene journal record seal v2";

/// Appends one record-format-2 frame holding `body` (checksum seal, no key) to `out`,
/// chained to `previous`, following the layout `kleene::batch` documents; returns its seal.
pub fn frame_record(previous: &[u8; 32], body: &[u8], out: &mut Vec<u8>) -> [u8; 32] {
    let start = out.len();
    out.extend_from_slice(&RECORD_MAGIC);
    out.extend_from_slice(&RECORD_VERSION.to_le_bytes());
    out.push(SEAL_CHECKSUM);
    out.push(0);
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    let check = *blake3::Hasher::new_derive_key(RECORD_HEADER_CONTEXT)
        .update(&out[start..])
        .finalize()
        .as_bytes();
    out.extend_from_slice(&check);
    let seal = *blake3::Hasher::new_derive_key(RECORD_SEAL_CONTEXT)
        .update(previous)
        .update(&out[start..])
        .update(body)
        .finalize()
        .as_bytes();
    out.extend_from_slice(&seal);
    out.extend_from_slice(body);
    seal
}

/// Panics (once) if [`journal_input`] no longer frames records as `ImageJournal` (and so
/// `FileJournal`) writes them; see [`assert_envelope_layout`] for why.
pub fn assert_journal_layout() {
    static CHECKED: Once = Once::new();
    CHECKED.call_once(|| {
        use kleene::batch::{evidence::EvidenceEvent, journal::EvidenceJournal};
        use kleene::testing::batch::ImageJournal;
        let channel = kleene::id::ChannelId::new("layout_probe").expect("a valid id");
        let event = |attempt| EvidenceEvent::Reserved {
            task: TaskId::new("t").expect("a valid id"),
            attempt,
            input_digest: kleene::id::Digest::from_bytes([7; 32]),
        };
        let mut journal = ImageJournal::default();
        journal
            .append(&channel, &[event(1), event(2)])
            .expect("an append");
        journal.append(&channel, &[event(3)]).expect("an append");
        let envelope = |attempt| checkpoint::encode(&event(attempt)).expect("an event encodes");
        let records = [vec![envelope(1), envelope(2)], vec![envelope(3)]];
        let seed = journal_seed(JournalMode::Framed, &records, &[]);
        assert_eq!(
            Some(journal_input(&seed).as_slice()),
            journal.image(&channel),
            "the journal record layout changed: update kleene_fuzz::frame_record"
        );
    });
}

/// One framed record of a journal target's input.
enum Piece<'a> {
    /// A sealed checkpoint envelope, and whether it joins the previous record's frame.
    Envelope { join: bool, bytes: Vec<u8> },
    /// Verbatim bytes.
    Raw(&'a [u8]),
}

/// The journal image a journal target loads.
///
/// The first byte is a [`JournalMode`] (`% 4`: `0` bare, `2` framed, odd raw). Framed and
/// bare, the rest is a sequence of records, each `tag, length (u16 little endian), bytes`:
/// the tag's low two bits are a [`RecordKind`], bit 2 seals at the version after the
/// current one (unsupported), and bit 3 (framed only) puts the envelope in the previous
/// record's frame. A record whose framing is cut short contributes its bytes verbatim, which
/// is how torn tails arise; so does a raw record.
pub fn journal_input(data: &[u8]) -> Vec<u8> {
    let Some((&mode, rest)) = data.split_first() else {
        return Vec::new();
    };
    let mode = JournalMode::of(mode);
    if mode == JournalMode::Raw {
        return rest.to_vec();
    }
    let mut pieces = Vec::new();
    let mut rest = rest;
    while let Some((&tag, after)) = rest.split_first() {
        let Some((len, after)) = after.split_first_chunk::<2>() else {
            pieces.push(Piece::Raw(after));
            break;
        };
        let len = usize::from(u16::from_le_bytes(*len));
        let (bytes, after) = after.split_at(len.min(after.len()));
        let bump = u16::from(tag & FUTURE != 0);
        let join = tag & JOIN != 0;
        let sealed = |kind: [u8; 4], version: u16| Piece::Envelope {
            join,
            bytes: seal(kind, version + bump, bytes),
        };
        let piece = match RecordKind::of(tag) {
            RecordKind::Event => sealed(
                kleene::batch::evidence::EvidenceEvent::KIND,
                kleene::batch::evidence::EvidenceEvent::VERSION,
            ),
            RecordKind::Snapshot => sealed(
                kleene::batch::BatchEvidence::KIND,
                kleene::batch::BatchEvidence::VERSION,
            ),
            RecordKind::Foreign => sealed(Task::KIND, Task::VERSION),
            RecordKind::Raw => Piece::Raw(bytes),
        };
        pieces.push(piece);
        rest = after;
    }
    let mut image = Vec::with_capacity(data.len() + 128);
    if mode == JournalMode::Bare {
        for piece in &pieces {
            match piece {
                Piece::Envelope { bytes, .. } => image.extend_from_slice(bytes),
                Piece::Raw(raw) => image.extend_from_slice(raw),
            }
        }
        return image;
    }
    let mut previous = [0; 32];
    let mut body: Option<Vec<u8>> = None;
    for piece in pieces {
        match piece {
            Piece::Envelope { join, bytes } => match &mut body {
                Some(open) if join => open.extend_from_slice(&bytes),
                _ => {
                    if let Some(done) = body.replace(bytes) {
                        previous = frame_record(&previous, &done, &mut image);
                    }
                }
            },
            Piece::Raw(raw) => {
                if let Some(done) = body.take() {
                    previous = frame_record(&previous, &done, &mut image);
                }
                image.extend_from_slice(raw);
            }
        }
    }
    if let Some(done) = body {
        frame_record(&previous, &done, &mut image);
    }
    image
}

/// A journal target's input that rebuilds a journal of `records` (each the checkpoint
/// envelopes of one commit: events, or one snapshot) followed by the raw bytes `tail`, in
/// record format `mode` (bare: every envelope its own record).
///
/// # Panics
///
/// When an envelope is longer than a `u16` length can frame (seeds are small), or `mode` is
/// [`JournalMode::Raw`].
pub fn journal_seed(mode: JournalMode, records: &[Vec<Vec<u8>>], tail: &[u8]) -> Vec<u8> {
    assert_ne!(mode, JournalMode::Raw, "a raw seed is the image itself");
    let mut input = vec![mode.byte()];
    let mut push = |tag: u8, bytes: &[u8]| {
        let len = u16::try_from(bytes.len()).expect("a seed record under 64 KiB");
        input.push(tag);
        input.extend_from_slice(&len.to_le_bytes());
        input.extend_from_slice(bytes);
    };
    for record in records {
        for (i, envelope) in record.iter().enumerate() {
            let kind = if envelope[7..11] == kleene::batch::BatchEvidence::KIND {
                RecordKind::Snapshot
            } else {
                RecordKind::Event
            };
            let join = if i > 0 && mode == JournalMode::Framed {
                JOIN
            } else {
                0
            };
            push(kind.tag() | join, &envelope[HEADER_LEN..]);
        }
    }
    if !tail.is_empty() {
        push(RecordKind::Raw.tag(), tail);
    }
    input
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_writes_what_encode_writes() {
        assert_envelope_layout();
    }

    #[test]
    fn framed_records_are_what_image_journal_writes() {
        assert_journal_layout();
    }

    #[test]
    fn a_bare_journal_seed_rebuilds_its_image() {
        let task = Task::new(TaskId::new("t").unwrap(), Spec::new("x"));
        let payload = &checkpoint::encode(&task).unwrap()[HEADER_LEN..];
        let event = seal(
            kleene::batch::evidence::EvidenceEvent::KIND,
            kleene::batch::evidence::EvidenceEvent::VERSION,
            payload,
        );
        let mut image = event.clone();
        image.extend_from_slice(&event[..10]);
        let seed = journal_seed(JournalMode::Bare, &[vec![event.clone()]], &event[..10]);
        assert_eq!(journal_input(&seed), image);
    }
}
