//! Journal records on the wire: framing and sealing a commit or a snapshot, and scanning an
//! image record by record to tell whole records, damage and a torn tail apart.

use super::error::{JournalError, RecordDamage};
use super::{JournalKey, JournalLoad, TornTail};
use crate::batch::evidence::BatchEvidence;
use crate::batch::evidence::event::EvidenceEvent;
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
pub(super) const GENESIS: [u8; 32] = [0; 32];

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
    pub(super) end: usize,
    /// The checkpoint envelopes it holds.
    body: std::ops::Range<usize>,
}

/// A journal image's whole records, its torn tail, and the seal the next record chains to.
#[derive(Debug, Clone)]
pub(crate) struct Scan {
    pub(super) records: Vec<RecordSpan>,
    pub(super) torn: Option<TornTail>,
    pub(super) last_seal: [u8; 32],
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

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::Path;

    use super::super::tests::{chan, events, image};
    use super::*;
    use crate::id::ChannelId;
    use crate::id::TaskId;
    use crate::id::digest::Digest;

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
            closure: crate::batch::evidence::ClosureSettlement {
                fix_attempts: 1,
                end: crate::batch::evidence::ClosureEnd::Resolved { depth: 1 },
                audit_head: Digest::from_bytes([8; 32]),
                record_digest: Digest::from_bytes([9; 32]),
            },
        });
        all.push(settled);
        all
    }

    /// Journals whose events and snapshot are at format version 2 (closure events, written
    /// before outputs were reused), unkeyed and keyed: old data, kept as it was written;
    /// they still load.
    #[test]
    fn version_two_journals_with_closure_events_still_load() {
        let all = closure_events();
        let key = JournalKey::from_bytes(*b"kleene journal fixture key v2 ..");
        for (name, key) in [
            ("tests/fixtures/journal_v2_closures.journal", None),
            (
                "tests/fixtures/journal_v2_closures_keyed.journal",
                Some(&key),
            ),
        ] {
            let bytes = fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(name)).unwrap();
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

    /// The events of [`closure_events`] for a batch of two tasks, the second of which is
    /// reused: its output taken from call 3 of another run, with that call's closure record.
    fn reuse_events() -> Vec<EvidenceEvent> {
        let mut all = closure_events();
        let u = TaskId::new("u").unwrap();
        if let EvidenceEvent::Started { inventory, .. } = &mut all[0] {
            inventory.push(crate::batch::evidence::InventoryEntry {
                task: u.clone(),
                owner: crate::id::AgentId::new("b").unwrap(),
                budget: 1,
            });
        }
        let candidate = crate::batch::Candidate::new(std::collections::BTreeMap::from([(
            crate::plan::AdmittedPath::admit("u.txt").unwrap(),
            b"reused".to_vec(),
        )]));
        all.push(EvidenceEvent::Reused {
            task: u,
            from: crate::batch::evidence::ReusedFrom::new(
                crate::batch::cache::ActionKey::from_digest(Digest::from_bytes([10; 32])),
                ChannelId::new("run-0").unwrap(),
                3,
                Some(crate::batch::evidence::ReusedClosure::new(
                    Digest::from_bytes([11; 32]),
                    Digest::from_bytes([12; 32]),
                )),
            ),
            digest: candidate.digest(),
            candidate,
        });
        all
    }

    /// Today's formats (record format 2 framing; events and snapshots at format version 3,
    /// closure events and a reused output included), unkeyed and keyed: a change to the
    /// framing, the seals or the event encoding shows here first. Run with
    /// `KLEENE_WRITE_FIXTURES=1` to (re)write them after a deliberate format change (and
    /// bump the format version it changes).
    #[test]
    fn todays_journal_fixtures_are_what_this_build_writes() {
        let all = reuse_events();
        let key = JournalKey::from_bytes(*b"kleene journal fixture key v2 ..");
        for (name, key) in [
            ("tests/fixtures/journal_v3_reused.journal", None),
            ("tests/fixtures/journal_v3_reused_keyed.journal", Some(&key)),
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
            assert_eq!(evidence.reused().count(), 1);
            // A snapshot taken after the reuse keeps where it came from.
            let (snapshot, _) = encode_snapshot(&chan(), key, &evidence).unwrap();
            let reread = parse(&chan(), &snapshot, key)
                .unwrap()
                .into_evidence()
                .unwrap();
            assert_eq!(reread, evidence);
            assert_eq!(reread.digest(), evidence.digest());
        }
    }

    /// An event of a format newer than this build's is refused by its version (a build that
    /// reads only version-1 events refuses today's closure events the same way), and a
    /// version-1 envelope of an old event still decodes.
    #[test]
    fn event_format_versions_are_refused_or_read_by_number() {
        let event = closure_events().remove(2);
        let payload = checkpoint::encode_payload(&event).unwrap();
        let future = checkpoint::seal(*b"BEVT", 4, &payload);
        let err = checkpoint::decode::<EvidenceEvent>(&future).unwrap_err();
        assert!(
            matches!(
                err,
                CheckpointError::UnsupportedVersion {
                    found: 4,
                    min: 1,
                    max: 3,
                    ..
                }
            ),
            "{err}"
        );
        let old = events().remove(1);
        let v1 = checkpoint::seal(*b"BEVT", 1, &checkpoint::encode_payload(&old).unwrap());
        assert_eq!(checkpoint::decode::<EvidenceEvent>(&v1).unwrap(), old);
        // A reused output is a version-3 event: a version-2 envelope cannot hold one.
        let reused = reuse_events().pop().unwrap();
        let v2 = checkpoint::seal(*b"BEVT", 2, &checkpoint::encode_payload(&reused).unwrap());
        let err = checkpoint::decode::<EvidenceEvent>(&v2).unwrap_err();
        assert!(err.to_string().contains("reused"), "{err}");
        let v3 = checkpoint::seal(*b"BEVT", 3, &checkpoint::encode_payload(&reused).unwrap());
        assert_eq!(checkpoint::decode::<EvidenceEvent>(&v3).unwrap(), reused);
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
