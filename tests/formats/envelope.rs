//! The checkpoint envelope is what `kleene::checkpoint`'s docs say it is: an encoder and a
//! decoder written here from the format table alone (not calling the crate's envelope code)
//! agree with the crate's in both directions.
//!
//! Guards the docs that described the checksum as "blake3 over header and payload" while
//! the code used blake3's derive-key mode with a context string.

use kleene::checkpoint::{self, CheckpointError};
use kleene::{Task, closure::Spec, id::TaskId};

/// The documented envelope around `payload`.
fn encode_from_docs(kind: &[u8; 4], version: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&[0x4b, 0x4c, 0x4e, 0x45]);
    out.extend_from_slice(&version.to_le_bytes());
    out.push(1);
    out.extend_from_slice(kind);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    assert_eq!(out.len(), 19);
    let mut h = blake3::Hasher::new_derive_key("kleene checkpoint envelope v1");
    h.update(&out[0..19]);
    h.update(payload);
    out.extend_from_slice(h.finalize().as_bytes());
    out.extend_from_slice(payload);
    out
}

/// The documented fields of an envelope, checked: (version, kind, payload).
fn decode_from_docs(bytes: &[u8]) -> Option<(u16, [u8; 4], &[u8])> {
    let header = bytes.get(..51)?;
    if header[0..4] != *b"KLNE" || header[6] != 1 {
        return None;
    }
    let version = u16::from_le_bytes([header[4], header[5]]);
    let kind = [header[7], header[8], header[9], header[10]];
    let len = u64::from_le_bytes(header[11..19].try_into().ok()?);
    let payload = &bytes[51..];
    if payload.len() as u64 != len {
        return None;
    }
    let mut h = blake3::Hasher::new_derive_key("kleene checkpoint envelope v1");
    h.update(&header[0..19]);
    h.update(payload);
    (h.finalize().as_bytes()[..] == header[19..51]).then_some((version, kind, payload))
}

fn task() -> Task {
    Task::new(
        TaskId::new("task_X").unwrap(),
        Spec::new("add /login").with_criterion("GET /login is 200"),
    )
}

fn bincode_standard() -> impl bincode::config::Config {
    bincode::config::standard()
}

#[test]
fn an_envelope_written_from_the_docs_decodes_with_the_crate() {
    let payload = bincode::serde::encode_to_vec(task(), bincode_standard()).unwrap();
    let bytes = encode_from_docs(b"TASK", 2, &payload);
    assert_eq!(checkpoint::decode::<Task>(&bytes).unwrap(), task());
    // The checksum covers the header: a changed version byte is refused.
    let mut changed = bytes.clone();
    changed[4] = 1;
    assert!(matches!(
        checkpoint::decode::<Task>(&changed),
        Err(CheckpointError::ChecksumMismatch)
    ));
}

#[test]
fn an_envelope_written_by_the_crate_decodes_from_the_docs() {
    let bytes = checkpoint::encode(&task()).unwrap();
    let (version, kind, payload) = decode_from_docs(&bytes).expect("a documented envelope");
    assert_eq!((version, &kind), (2, b"TASK"));
    let (decoded, used): (Task, usize) =
        bincode::serde::decode_from_slice(payload, bincode_standard()).unwrap();
    assert_eq!(used, payload.len());
    assert_eq!(decoded, task());
    assert_eq!(encode_from_docs(b"TASK", 2, payload), bytes);
}
