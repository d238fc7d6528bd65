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
//! use kleene::{Spec, Task, TaskId};
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
use kleene::{Spec, Task, TaskId};

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

/// The journal image a journal target loads.
///
/// The input is a sequence of records, each `tag, length (u16 little endian), bytes`. The
/// tag's low two bits are a [`RecordKind`]; bit 2 seals at the version after the current one
/// (unsupported). A record whose framing is cut short contributes its bytes verbatim, which
/// is how torn tails arise.
pub fn journal_image(data: &[u8]) -> Vec<u8> {
    let mut image = Vec::with_capacity(data.len() + 64);
    let mut rest = data;
    while let Some((&tag, after)) = rest.split_first() {
        let Some((len, after)) = after.split_first_chunk::<2>() else {
            image.extend_from_slice(after);
            break;
        };
        let len = usize::from(u16::from_le_bytes(*len));
        let (bytes, after) = after.split_at(len.min(after.len()));
        let future = tag & 4 != 0;
        let sealed = |kind: [u8; 4], version: u16| {
            seal(kind, if future { version + 1 } else { version }, bytes)
        };
        match RecordKind::of(tag) {
            RecordKind::Event => image.extend_from_slice(&sealed(
                kleene::batch::EvidenceEvent::KIND,
                kleene::batch::EvidenceEvent::VERSION,
            )),
            RecordKind::Snapshot => image.extend_from_slice(&sealed(
                kleene::batch::BatchEvidence::KIND,
                kleene::batch::BatchEvidence::VERSION,
            )),
            RecordKind::Foreign => image.extend_from_slice(&sealed(Task::KIND, Task::VERSION)),
            RecordKind::Raw => image.extend_from_slice(bytes),
        }
        rest = after;
    }
    image
}

/// A journal target's input that rebuilds `image`: each whole record (ending at the offsets
/// in `ends`) becomes an event or snapshot record of its payload, and anything after the last
/// end a raw record.
///
/// # Panics
///
/// When a record is longer than a `u16` length can frame (seeds are small).
pub fn journal_seed(image: &[u8], ends: &[usize]) -> Vec<u8> {
    let mut input = Vec::new();
    let mut push = |kind: RecordKind, bytes: &[u8]| {
        let len = u16::try_from(bytes.len()).expect("a seed record under 64 KiB");
        input.push(kind.tag());
        input.extend_from_slice(&len.to_le_bytes());
        input.extend_from_slice(bytes);
    };
    let mut start = 0;
    for &end in ends {
        let record = &image[start..end];
        let kind = if record[7..11] == kleene::batch::BatchEvidence::KIND {
            RecordKind::Snapshot
        } else {
            RecordKind::Event
        };
        push(kind, &record[HEADER_LEN..]);
        start = end;
    }
    if start < image.len() {
        push(RecordKind::Raw, &image[start..]);
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
    fn a_journal_seed_rebuilds_its_image() {
        let task = Task::new(TaskId::new("t").unwrap(), Spec::new("x"));
        let payload = &checkpoint::encode(&task).unwrap()[HEADER_LEN..];
        let event = seal(kleene::batch::EvidenceEvent::KIND, 1, payload);
        let mut image = event.clone();
        image.extend_from_slice(&event[..10]);
        let seed = journal_seed(&image, &[event.len()]);
        assert_eq!(journal_image(&seed), image);
    }
}
