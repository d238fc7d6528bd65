//! Checkpoint envelopes: how tasks, closures and batch evidence become bytes that can be
//! kept anywhere and read back safely, and the one codec behind them.
//!
//! A checkpoint is a 51-byte header followed by a bincode payload. Every integer is little
//! endian:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 4 | magic `KLNE` (`4b 4c 4e 45`) |
//! | 4 | 2 | format version of the payload type (`u16`) |
//! | 6 | 1 | codec tag: `1` = bincode 2, `bincode::config::standard()` (variable-length integers, little endian), the bytes its serde mode writes for the payload's record |
//! | 7 | 4 | payload kind, four ASCII bytes (`TASK`, `CLSR`, `CLST`, `CLDT`, `BEVT`, `EVID`), so one type's bytes never decode as another's |
//! | 11 | 8 | payload length `n` (`u64`), at most [`MAX_PAYLOAD_LEN`] |
//! | 19 | 32 | checksum |
//! | 51 | n | payload |
//!
//! The checksum is blake3 in derive-key mode (`blake3::Hasher::new_derive_key`) with the
//! context string `"kleene checkpoint envelope v1"`, over the 19 header bytes at offsets
//! 0..19 followed by the `n` payload bytes; the checksum field itself is not covered. It
//! detects accidental damage only: it carries no secret, so whoever can write the bytes can
//! recompute it. An envelope is exactly `51 + n` bytes: fewer is truncated, more is trailing
//! garbage, and both are refused.
//!
//! Decoding never panics: truncated, corrupted or foreign bytes give a [`CheckpointError`].
//! bincode is called only from this module, behind the codec tag, so the format can change in
//! one place. Payloads are read through serde and written by bincode's native encoder (the
//! records derive its `Encode`), which writes the same bytes as its serde mode at a fraction
//! of the cost. A task or closure payload is the encoding of a record of its own, one per format
//! version, not of the domain type, so refactoring a domain type never changes the bytes;
//! a payload that decodes but does not hold together (a task whose parent does not fit its
//! depth, a record whose audit chain breaks) is refused as [`CheckpointError::Invalid`].
//! bincode is not self-describing, so older format versions are decoded by their own
//! records and migrated (a [`Task`](crate::closure::task::Task) written before fix subtasks carried
//! their root loads with `root_task_ref = None`, `root_spec = None`, `prior_failures = []`).
//!
//! Where the bytes are kept is the caller's choice (a file, a database row): an envelope is
//! self-contained, and decoding checks everything before it trusts anything.
//!
//! ```
//! use kleene::checkpoint::{self, CheckpointError};
//! use kleene::{closure::Spec, Task, id::TaskId};
//!
//! let task = Task::new(TaskId::new("t1")?, Spec::new("build the login page"));
//! let bytes = checkpoint::encode(&task)?;
//! assert_eq!(checkpoint::decode::<Task>(&bytes)?, task);
//!
//! // A damaged copy is refused with a typed error, never a panic.
//! let mut damaged = bytes.clone();
//! *damaged.last_mut().unwrap() ^= 1;
//! assert!(matches!(checkpoint::decode::<Task>(&damaged), Err(CheckpointError::ChecksumMismatch)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(test)]
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::wire::{Invalid, Record};

/// The first four bytes of every checkpoint.
pub const MAGIC: [u8; 4] = *b"KLNE";
/// The codec tag of bincode 2 (the bytes of its serde mode, standard configuration).
pub const CODEC_BINCODE2: u8 = 1;
/// Header length in bytes.
pub const HEADER_LEN: usize = 4 + 2 + 1 + 4 + 8 + 32;
/// The largest payload the decoder will accept (1 GiB).
pub const MAX_PAYLOAD_LEN: u64 = 1 << 30;

/// Why bytes could not be encoded or decoded as a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// Fewer bytes than a header, or than the header's declared payload length.
    #[error("decode checkpoint: truncated at {len} bytes, at least {needed} needed")]
    TooShort {
        /// Bytes present.
        len: usize,
        /// Bytes needed.
        needed: u64,
    },
    /// Bytes after the declared payload.
    #[error("decode checkpoint: {extra} bytes after its declared payload")]
    TrailingBytes {
        /// How many.
        extra: usize,
    },
    /// The bytes do not start with [`MAGIC`].
    #[error(
        "decode checkpoint: not a kleene checkpoint (its first bytes are {}, not `4b 4c 4e 45`)",
        hex_bytes(.found)
    )]
    BadMagic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// A codec tag this build cannot read.
    #[error("decode checkpoint: unknown codec tag {tag}")]
    UnknownCodec {
        /// The tag found.
        tag: u8,
    },
    /// The payload is of another kind than the one asked for.
    #[error("decode checkpoint: it holds a {found} payload, expected {expected}")]
    WrongKind {
        /// The kind asked for.
        expected: String,
        /// The kind found.
        found: String,
    },
    /// A format version this build cannot read.
    #[error(
        "decode checkpoint: unsupported {kind} format version {found} (this build reads {min}..={max})"
    )]
    UnsupportedVersion {
        /// The payload kind.
        kind: String,
        /// The version found.
        found: u16,
        /// Oldest readable version.
        min: u16,
        /// Newest (current) version.
        max: u16,
    },
    /// The declared payload length is beyond [`MAX_PAYLOAD_LEN`].
    #[error(
        "decode checkpoint: it declares a {declared}-byte payload, more than the {max} allowed"
    )]
    PayloadTooLarge {
        /// Declared length.
        declared: u64,
        /// The bound.
        max: u64,
    },
    /// The checksum does not match: the bytes were corrupted.
    #[error("decode checkpoint: checksum mismatch, the bytes were corrupted")]
    ChecksumMismatch,
    /// The payload passed the checksum but did not decode as the asked-for type.
    #[error("decode checkpoint payload: {message}")]
    Decode {
        /// The codec's message.
        message: String,
    },
    /// The value could not be encoded.
    #[error("encode checkpoint: {message}")]
    Encode {
        /// The codec's message.
        message: String,
    },
    /// The payload decoded as its record but states something that cannot hold, so it is
    /// not trusted as a value.
    #[error("decode {kind} checkpoint payload: {reason}")]
    Invalid {
        /// The payload kind.
        kind: String,
        /// What does not hold (boxed: it names a task and a digest, and every journal and
        /// batch error carries a checkpoint error).
        reason: Box<InvalidPayload>,
    },
}

/// What a decoded payload states that cannot hold (see [`CheckpointError::Invalid`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidPayload {
    /// The record's fields contradict each other (a task whose parent does not fit its
    /// depth, a policy out of bounds, a closure record whose audit chain breaks).
    #[error("{reason}; restore the bytes kleene wrote")]
    Inconsistent {
        /// What does not hold, naming the field.
        reason: String,
    },
    /// A payload of an older format version holds a record only a later version has.
    #[error(
        "a format-{version} payload cannot hold a `{event}` event, which later versions added; the bytes were edited or mislabelled"
    )]
    NewerEvent {
        /// The payload's format version.
        version: u16,
        /// The event it holds.
        event: &'static str,
    },
    /// The snapshot's evidence is of an evidence format this build does not read.
    #[error(
        "the snapshot holds evidence of format {found}, and this build reads {reads}; read it with the kleene version that wrote it"
    )]
    EvidenceVersion {
        /// The evidence format found.
        found: u32,
        /// The evidence format this build reads.
        reads: u32,
    },
    /// The snapshot lists a different number of tasks than it holds evidence of.
    #[error(
        "the snapshot lists {listed} tasks but holds the evidence of {held}; the bytes were edited"
    )]
    TaskCount {
        /// Tasks listed in its inventory order.
        listed: u64,
        /// Task evidence sets it holds.
        held: u64,
    },
    /// The snapshot lists a task twice.
    #[error("the snapshot lists task {task} twice; the bytes were edited")]
    DuplicateTask {
        /// The task listed twice.
        task: crate::id::TaskId,
    },
    /// A part of the snapshot names a task that is not in its inventory.
    #[error(
        "the snapshot's {part} name task {task}, which is not in its inventory; the bytes were edited"
    )]
    UnknownTask {
        /// Which part (`closures`, `failure_history`).
        part: &'static str,
        /// The task.
        task: crate::id::TaskId,
    },
    /// The snapshot keeps a longer failure history than a batch ever keeps.
    #[error(
        "the snapshot keeps {kept} failures, more than the {max} a batch keeps; the bytes were edited"
    )]
    FailureHistory {
        /// Failure notes kept.
        kept: u64,
        /// The bound.
        max: u64,
    },
    /// An accepted output's files do not match the digest it was accepted under.
    #[error(
        "the accepted output of task {task} does not match its digest {digest}, so it was changed after it was accepted"
    )]
    AcceptedDigest {
        /// The task.
        task: crate::id::TaskId,
        /// The digest it was accepted under.
        digest: crate::id::digest::Digest,
    },
}

/// Implemented next to each persisted type, so only kleene's own types are checkpoints.
pub(crate) mod sealed {
    pub trait Sealed {}
}

/// A type that kleene checkpoints. Sealed: implemented for kleene's own persisted types.
///
/// Each payload is written as a record of its own (its wire type), not as the domain type
/// itself, so refactoring the domain type never changes the bytes.
pub trait Checkpoint: Sized + sealed::Sealed {
    /// Four bytes naming the payload kind.
    const KIND: [u8; 4];
    /// The current format version of this payload kind.
    const VERSION: u16;
    /// The oldest format version that can still be read (and migrated).
    const MIN_VERSION: u16 = Self::VERSION;

    /// Appends the value's payload, of the current format version, to `out`.
    #[doc(hidden)]
    fn write_payload(&self, out: &mut Vec<u8>) -> Result<(), CheckpointError>;

    /// Decodes, and checks, a payload of the current format version.
    #[doc(hidden)]
    fn from_payload(payload: &[u8]) -> Result<Self, CheckpointError>;

    /// Decodes a payload of an older format version. Only called for versions in
    /// `MIN_VERSION..VERSION`.
    #[doc(hidden)]
    fn migrate(version: u16, payload: &[u8]) -> Result<Self, CheckpointError> {
        let _ = payload;
        Err(unsupported::<Self>(version))
    }
}

/// The error of a payload of kind `T` that decoded but states something that cannot hold.
pub(crate) fn invalid<T: Checkpoint>(reason: InvalidPayload) -> CheckpointError {
    CheckpointError::Invalid {
        kind: kind_name(T::KIND),
        reason: Box::new(reason),
    }
}

fn kind_name(kind: [u8; 4]) -> String {
    String::from_utf8_lossy(&kind).into_owned()
}

fn unsupported<T: Checkpoint>(found: u16) -> CheckpointError {
    CheckpointError::UnsupportedVersion {
        kind: kind_name(T::KIND),
        found,
        min: T::MIN_VERSION,
        max: T::VERSION,
    }
}

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<{ MAX_PAYLOAD_LEN as usize }>()
}

/// Encodes `value` through its serde form as bincode payload bytes (no envelope): the tests'
/// way to build an envelope of another version or kind, and their reference for the bytes
/// the native encoder must write.
#[cfg(test)]
pub(crate) fn encode_payload<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CheckpointError> {
    bincode::serde::encode_to_vec(value, bincode_config()).map_err(|e| CheckpointError::Encode {
        message: e.to_string(),
    })
}

/// What a fresh envelope reserves for its payload: a closure's step delta or a batch event
/// fits, so the common envelope is encoded without growing its buffer.
const PAYLOAD_CAPACITY: usize = 256;

/// Appends `value`'s bincode bytes to `out`, written by bincode's native encoder: the same
/// bytes as its serde mode (every record's serde form and `Encode` agree, see `crate::wire`),
/// without serde's layers (a digest through serde is 32 calls, one per byte).
pub(crate) fn encode_payload_into<T: bincode::Encode + ?Sized>(
    value: &T,
    out: &mut Vec<u8>,
) -> Result<(), CheckpointError> {
    bincode::encode_into_writer(value, Append(out), bincode_config()).map_err(|e| {
        CheckpointError::Encode {
            message: e.to_string(),
        }
    })
}

/// bincode's writer over the end of a byte vector (bincode's own is not public).
struct Append<'a>(&'a mut Vec<u8>);

impl bincode::enc::write::Writer for Append<'_> {
    // Inlined, as bincode's own writer is: most writes are a byte or a few (a varint, a
    // tag), and a call (and a `memcpy`) per write would cost more than the bytes.
    #[inline(always)]
    fn write(&mut self, bytes: &[u8]) -> Result<(), bincode::error::EncodeError> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }
}

/// How many bytes of memory bincode may claim per payload byte. bincode counts a decoded
/// integer at its in-memory width (at most 16 bytes, a `u128`) however short its encoding,
/// and a string or byte buffer at exactly the bytes it occupies, so a value that is really
/// encoded in `n` bytes never claims more than `16 n`.
const CLAIM_PER_BYTE: usize = 16;

/// Decodes `payload` with a bincode limit of `N` bytes claimed.
fn decode_limited<T: DeserializeOwned, const N: usize>(
    payload: &[u8],
) -> Result<(T, usize), bincode::error::DecodeError> {
    bincode::serde::decode_from_slice(payload, bincode::config::standard().with_limit::<N>())
}

/// Decodes a whole payload; bytes left over are an error.
///
/// Allocation is bounded by the bytes actually present: bincode reserves what a length field
/// claims (`vec![0; len]` for a string) after checking it against its limit, so the limit is
/// chosen from the payload's own length (the next power of 16 above `16 × len`, at least
/// 4 KiB), never the 1 GiB [`MAX_PAYLOAD_LEN`]. A 57-byte payload whose length field claims
/// a gigabyte is refused before anything is reserved.
pub(crate) fn decode_payload<T: DeserializeOwned>(payload: &[u8]) -> Result<T, CheckpointError> {
    let claim = payload.len().saturating_mul(CLAIM_PER_BYTE);
    let decoded = match claim {
        0..=0x1000 => decode_limited::<T, 0x1000>(payload),
        0x1001..=0x1_0000 => decode_limited::<T, 0x1_0000>(payload),
        0x1_0001..=0x10_0000 => decode_limited::<T, 0x10_0000>(payload),
        0x10_0001..=0x100_0000 => decode_limited::<T, 0x100_0000>(payload),
        0x100_0001..=0x1000_0000 => decode_limited::<T, 0x1000_0000>(payload),
        _ => decode_limited::<T, { (MAX_PAYLOAD_LEN as usize).saturating_mul(CLAIM_PER_BYTE) }>(
            payload,
        ),
    };
    let (value, used) = decoded.map_err(|e| CheckpointError::Decode {
        message: e.to_string(),
    })?;
    if used != payload.len() {
        return Err(CheckpointError::Decode {
            message: format!("{} bytes left after the value", payload.len() - used),
        });
    }
    Ok(value)
}

fn checksum(header: &[u8], payload: &[u8]) -> [u8; 32] {
    use blake3::hazmat::HasherExt;
    // A closure appends one envelope per step: derive the key once.
    static KEY: std::sync::OnceLock<blake3::hazmat::ContextKey> = std::sync::OnceLock::new();
    let key = KEY
        .get_or_init(|| blake3::hazmat::hash_derive_key_context("kleene checkpoint envelope v1"));
    let mut h = blake3::Hasher::new_from_context_key(key);
    h.update(header);
    h.update(payload);
    *h.finalize().as_bytes()
}

/// Wraps an already encoded payload in an envelope.
#[cfg(test)]
pub(crate) fn seal(kind: [u8; 4], version: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&[0; HEADER_LEN]);
    out.extend_from_slice(payload);
    seal_in_place(kind, version, &mut out);
    out
}

/// Fills in the header of `envelope`: [`HEADER_LEN`] bytes reserved, then the payload.
fn seal_in_place(kind: [u8; 4], version: u16, envelope: &mut [u8]) {
    let (header, payload) = envelope.split_at_mut(HEADER_LEN);
    let (fixed, sum) = header.split_at_mut(19);
    fixed[..4].copy_from_slice(&MAGIC);
    fixed[4..6].copy_from_slice(&version.to_le_bytes());
    fixed[6] = CODEC_BINCODE2;
    fixed[7..11].copy_from_slice(&kind);
    fixed[11..19].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    sum.copy_from_slice(&checksum(fixed, payload));
}

/// An envelope whose structure and checksum were verified.
pub(crate) struct Opened<'a> {
    pub(crate) kind: [u8; 4],
    pub(crate) version: u16,
    pub(crate) payload: &'a [u8],
}

/// Checks an envelope's structure and checksum, without interpreting the payload.
pub(crate) fn open(bytes: &[u8]) -> Result<Opened<'_>, CheckpointError> {
    let Some((header, rest)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        return Err(CheckpointError::TooShort {
            len: bytes.len(),
            needed: HEADER_LEN as u64,
        });
    };
    let field = |at: usize, len: usize| &header[at..at + len];
    let magic: [u8; 4] = [header[0], header[1], header[2], header[3]];
    if magic != MAGIC {
        return Err(CheckpointError::BadMagic { found: magic });
    }
    let version = u16::from_le_bytes([header[4], header[5]]);
    let codec = header[6];
    if codec != CODEC_BINCODE2 {
        return Err(CheckpointError::UnknownCodec { tag: codec });
    }
    let kind = [header[7], header[8], header[9], header[10]];
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(field(11, 8));
    let declared = u64::from_le_bytes(len_bytes);
    if declared > MAX_PAYLOAD_LEN {
        return Err(CheckpointError::PayloadTooLarge {
            declared,
            max: MAX_PAYLOAD_LEN,
        });
    }
    let needed = HEADER_LEN as u64 + declared;
    if (rest.len() as u64) < declared {
        return Err(CheckpointError::TooShort {
            len: bytes.len(),
            needed,
        });
    }
    if (rest.len() as u64) > declared {
        return Err(CheckpointError::TrailingBytes {
            extra: rest.len() - declared as usize,
        });
    }
    if checksum(field(0, 19), rest) != field(19, 32) {
        return Err(CheckpointError::ChecksumMismatch);
    }
    Ok(Opened {
        kind,
        version,
        payload: rest,
    })
}

/// Encodes `value` in a checkpoint envelope at its type's current format version.
///
/// # Errors
///
/// [`CheckpointError::Encode`] when the codec refuses the value.
pub fn encode<T: Checkpoint>(value: &T) -> Result<Vec<u8>, CheckpointError> {
    let mut out = Vec::with_capacity(HEADER_LEN + PAYLOAD_CAPACITY);
    encode_into(value, &mut out)?;
    Ok(out)
}

/// Appends `value`'s checkpoint envelope to `out` (an append-only store held in memory,
/// say) and returns its length: the same bytes as [`encode`], encoded in place, so
/// appending one envelope per step allocates nothing once `out` has room.
///
/// # Errors
///
/// [`CheckpointError::Encode`] when the codec refuses the value; `out` is then left as it
/// was.
pub fn encode_into<T: Checkpoint>(value: &T, out: &mut Vec<u8>) -> Result<usize, CheckpointError> {
    envelope_into::<T>(out, |out| value.write_payload(out))
}

/// Appends an envelope of kind and version `T`'s holding `wire`, a borrowed form that
/// encodes exactly as a `T` does (so that a value can be persisted without first being
/// built), and returns its length.
pub(crate) fn encode_as_into<T: Checkpoint, W: bincode::Encode + ?Sized>(
    wire: &W,
    out: &mut Vec<u8>,
) -> Result<usize, CheckpointError> {
    envelope_into::<T>(out, |out| encode_payload_into(wire, out))
}

/// Reserves a header at the end of `out`, lets `payload` append the payload after it, then
/// fills the header and checksum in; on an error `out` is left as it was.
fn envelope_into<T: Checkpoint>(
    out: &mut Vec<u8>,
    payload: impl FnOnce(&mut Vec<u8>) -> Result<(), CheckpointError>,
) -> Result<usize, CheckpointError> {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_LEN]);
    if let Err(e) = payload(out) {
        out.truncate(start);
        return Err(e);
    }
    seal_in_place(T::KIND, T::VERSION, &mut out[start..]);
    Ok(out.len() - start)
}

/// Decodes a checkpoint of type `T`, migrating older format versions.
///
/// # Errors
///
/// A [`CheckpointError`] naming what is wrong: too short, bad magic, unknown codec, wrong
/// kind, unsupported version, checksum mismatch, or a payload that does not decode.
pub fn decode<T: Checkpoint>(bytes: &[u8]) -> Result<T, CheckpointError> {
    let opened = open(bytes)?;
    if opened.kind != T::KIND {
        return Err(CheckpointError::WrongKind {
            expected: kind_name(T::KIND),
            found: kind_name(opened.kind),
        });
    }
    match opened.version {
        v if v == T::VERSION => T::from_payload(opened.payload),
        v if (T::MIN_VERSION..T::VERSION).contains(&v) => T::migrate(v, opened.payload),
        v => Err(unsupported::<T>(v)),
    }
}

/// Appends the wire record `W` of `value` to `out`.
pub(crate) fn write_record<'a, D, W: Record<'a, D>>(
    value: &'a D,
    out: &mut Vec<u8>,
) -> Result<(), CheckpointError> {
    encode_payload_into(&W::of(value), out)
}

/// Decodes the wire record `W` and checks it into the domain value of payload kind `T`.
pub(crate) fn read_record<T, W>(payload: &[u8]) -> Result<T, CheckpointError>
where
    T: Checkpoint + TryFrom<W, Error = Invalid>,
    W: DeserializeOwned,
{
    T::try_from(decode_payload::<W>(payload)?)
        .map_err(|reason| invalid::<T>(InvalidPayload::Inconsistent { reason }))
}

/// Bytes as space-separated hex pairs, for a message.
fn hex_bytes(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The length of the whole envelope at the start of `bytes` (which may continue with more
/// records), after checking its structure and checksum. Journals use it to walk a sequence of
/// records and find where a torn tail starts.
pub(crate) fn open_prefix(bytes: &[u8]) -> Result<usize, CheckpointError> {
    let Some(header) = bytes.first_chunk::<HEADER_LEN>() else {
        return Err(CheckpointError::TooShort {
            len: bytes.len(),
            needed: HEADER_LEN as u64,
        });
    };
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&header[11..19]);
    let declared = u64::from_le_bytes(len_bytes).min(MAX_PAYLOAD_LEN + 1);
    let end = usize::try_from(HEADER_LEN as u64 + declared).unwrap_or(usize::MAX);
    open(bytes.get(..end).unwrap_or(bytes))?;
    Ok(end)
}

/// The length of the envelope at the start of `bytes` as its header declares it, if the
/// header and that many bytes are present; the checksum is left to [`decode`].
pub(crate) fn declared_len(bytes: &[u8]) -> Option<usize> {
    let header = bytes.first_chunk::<HEADER_LEN>()?;
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&header[11..19]);
    let declared = u64::from_le_bytes(len_bytes);
    let end = usize::try_from(declared).ok()?.checked_add(HEADER_LEN)?;
    (declared <= MAX_PAYLOAD_LEN && end <= bytes.len()).then_some(end)
}

/// Whether `bytes` would be one whole, intact envelope if its length field said
/// `bytes.len() - HEADER_LEN`: then a record that looks cut short is complete and its length
/// field is what was damaged (the checksum covers the length as written).
pub(crate) fn whole_but_for_its_length(bytes: &[u8]) -> bool {
    let Some((header, payload)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        return false;
    };
    let mut fields = [0u8; 19];
    fields.copy_from_slice(&header[..19]);
    fields[11..19].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    fields[..] != header[..19] && checksum(&fields, payload) == header[19..51]
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::fs;
    use std::path::Path;

    use super::*;
    use crate::closure::wire::task::{SpecV1, TaskV1};
    use crate::{closure::task::Spec, closure::task::Task, id::TaskId};

    fn task() -> Task {
        Task::new(
            TaskId::new("t").unwrap(),
            Spec::new("x").with_criterion("c"),
        )
    }

    #[test]
    fn round_trip_and_each_refusal() {
        let bytes = encode(&task()).unwrap();
        assert_eq!(decode::<Task>(&bytes).unwrap(), task());
        assert!(matches!(
            decode::<Task>(&bytes[..10]),
            Err(CheckpointError::TooShort { .. })
        ));
        assert!(matches!(
            decode::<Task>(&bytes[..bytes.len() - 1]),
            Err(CheckpointError::TooShort { .. })
        ));
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            decode::<Task>(&longer),
            Err(CheckpointError::TrailingBytes { extra: 1 })
        );
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert!(matches!(
            decode::<Task>(&bad),
            Err(CheckpointError::BadMagic { .. })
        ));
        let mut bad = bytes.clone();
        bad[6] = 9;
        assert_eq!(
            decode::<Task>(&bad),
            Err(CheckpointError::UnknownCodec { tag: 9 })
        );
        let mut bad = bytes.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(decode::<Task>(&bad), Err(CheckpointError::ChecksumMismatch));
        let future = seal(*b"TASK", 3, &encode_payload(&task()).unwrap());
        assert!(matches!(
            decode::<Task>(&future),
            Err(CheckpointError::UnsupportedVersion { found: 3, .. })
        ));
        let foreign = seal(*b"EVID", 2, &encode_payload(&task()).unwrap());
        assert!(matches!(
            decode::<Task>(&foreign),
            Err(CheckpointError::WrongKind { .. })
        ));
        let garbage = seal(*b"TASK", 2, &[0xff; 3]);
        assert!(matches!(
            decode::<Task>(&garbage),
            Err(CheckpointError::Decode { .. })
        ));
    }

    fn task_v1<'a>(id: &'a TaskId, spec: &'a Spec, parent: Option<&'a TaskId>) -> TaskV1<'a> {
        TaskV1 {
            id: Cow::Borrowed(id),
            spec: SpecV1::of(spec),
            depth: u32::from(parent.is_some()),
            parent_task_ref: parent.map(Cow::Borrowed),
        }
    }

    #[test]
    fn an_envelope_encoded_in_place_is_the_envelope_of_its_payload() {
        let mut store = b"earlier envelopes".to_vec();
        let len = encode_into(&task(), &mut store).unwrap();
        let whole = encode(&task()).unwrap();
        assert_eq!(len, whole.len());
        assert_eq!(&store[17..], whole.as_slice());
        assert_eq!(store[..17], *b"earlier envelopes");
        let payload = encode_payload(&task()).unwrap();
        assert_eq!(whole, seal(Task::KIND, Task::VERSION, &payload));
        assert_eq!(decode::<Task>(&store[17..]).unwrap(), task());
    }

    #[test]
    fn version_one_migrates() {
        let (id, spec) = (TaskId::new("t").unwrap(), Spec::new("x"));
        let bytes = seal(
            *b"TASK",
            1,
            &encode_payload(&task_v1(&id, &spec, None)).unwrap(),
        );
        let t = decode::<Task>(&bytes).unwrap();
        assert_eq!(t, Task::new(TaskId::new("t").unwrap(), Spec::new("x")));
    }

    /// A record that decodes but breaks the task's invariants is refused by name, at either
    /// version, instead of being trusted.
    #[test]
    fn an_inconsistent_task_record_is_refused_as_invalid() {
        let (id, spec) = (TaskId::new("t").unwrap(), Spec::new("x"));
        let mut orphan = task_v1(&id, &spec, None);
        orphan.depth = 1;
        let payload = encode_payload(&orphan).unwrap();
        // Version 2 appends three fields; with none of them set they encode as 0, 0, 0.
        let v2 = [payload.as_slice(), &[0, 0, 0]].concat();
        for bytes in [seal(*b"TASK", 1, &payload), seal(*b"TASK", 2, &v2)] {
            let err = decode::<Task>(&bytes).unwrap_err();
            assert!(
                matches!(&err, CheckpointError::Invalid { kind, reason }
                    if kind == "TASK" && reason.to_string().contains("inconsistent parent_task_ref")),
                "{err}"
            );
        }
    }

    proptest::proptest! {
        /// Garbage behind a valid envelope (checksum included) reaches the payload decoder
        /// of both the current and the migrated version; it must never panic.
        #[test]
        fn garbage_payloads_never_panic_the_decoder(
            payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256),
            version in 1u16..=2,
        ) {
            let _ = decode::<Task>(&seal(*b"TASK", version, &payload));
        }
    }

    /// The committed version-1 fixture is exactly what the version-1 shape writes. Run with
    /// `KLEENE_WRITE_FIXTURES=1` to (re)write it; it should never need to change.
    #[test]
    fn version_one_fixture_is_what_the_v1_shape_writes() {
        let id = TaskId::new("task_X_fix_1").unwrap();
        let spec = Spec::new("fix the failing login test").with_criterion("GET /login is 200");
        let parent = TaskId::new("task_X").unwrap();
        let v1 = task_v1(&id, &spec, Some(&parent));
        let bytes = seal(*b"TASK", 1, &encode_payload(&v1).unwrap());
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/task_v1.ckpt");
        if std::env::var_os("KLEENE_WRITE_FIXTURES").is_some() {
            fs::write(&path, &bytes).unwrap();
        }
        assert_eq!(fs::read(&path).unwrap(), bytes);
    }
}
