//! The records of the batch evidence payloads: one evidence event (`BEVT`, a journal
//! record's body) and a folded evidence snapshot (`EVID`, a journal's compaction).
//!
//! Each record mirrors, field for field and variant for variant, the shape the payload's
//! format version has on the wire (bincode of these serde derives), so the domain types in
//! `crate::batch` can change without moving a byte. Encoding borrows: an event is encoded
//! for every journal append, so no candidate, output or closure settlement is cloned.
//!
//! ```text
//! let bytes = checkpoint::encode_payload(&EvidenceEventV3::from(&event))?;
//! let back: EvidenceEvent = checkpoint::decode_payload::<EvidenceEventV3>(&bytes)?.into();
//! ```

mod checkpoint;
pub(crate) mod event;
pub(crate) mod message;
pub(crate) mod snapshot;

use event::EvidenceEventV3;
use snapshot::BatchEvidenceV3;

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::batch::evidence::BatchEvidence;
use crate::batch::evidence::event::EvidenceEvent;

/// An id or a string, borrowed on encode, owned on decode.
type Text<'a, T> = Cow<'a, T>;

// The domain types' serde forms are their records' (the checkpoint trait asks for serde, and
// a JSON copy then has the payload's shape); decoding a snapshot checks it as the payload
// decoder does.
impl Serialize for EvidenceEvent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        EvidenceEventV3::from(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for EvidenceEvent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        EvidenceEventV3::deserialize(d).map(Into::into)
    }
}

impl Serialize for BatchEvidence {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        BatchEvidenceV3::from(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for BatchEvidence {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let record = BatchEvidenceV3::deserialize(d)?;
        BatchEvidence::try_from(record).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::snapshot::{ClosureCallV2, FailureKindV1, FailureNoteV1};
    use super::*;
    use std::borrow::Cow;
    use std::collections::BTreeMap;

    use crate::batch::candidate::Candidate;
    use crate::batch::evidence::BatchEvidence;
    use crate::batch::evidence::event::{EvidenceEvent, InventoryEntry, Settlement};

    use crate::checkpoint::InvalidPayload;
    use crate::checkpoint::{decode_payload, encode_payload};
    use crate::plan::path::AdmittedPath;
    use crate::{id::AgentId, id::ChannelId, id::TaskId, id::digest::Digest};

    fn id(s: &str) -> TaskId {
        TaskId::new(s).unwrap()
    }

    /// Each refusal of a snapshot names what does not hold.
    #[test]
    fn a_snapshot_that_cannot_hold_is_refused_by_what_is_wrong() {
        let candidate = Candidate::new(BTreeMap::from([(
            AdmittedPath::admit("a.txt").unwrap(),
            b"a".to_vec(),
        )]));
        let evidence = BatchEvidence::fold([
            EvidenceEvent::Started {
                channel: ChannelId::new("c").unwrap(),
                plan_digest: Digest::from_bytes([1; 32]),
                evidence_version: crate::batch::evidence::EVIDENCE_VERSION,
                inputs: BTreeMap::new(),
                recovery: false,
                inventory: vec![InventoryEntry {
                    task: id("a"),
                    owner: AgentId::new("w").unwrap(),
                    budget: 1,
                }],
            },
            EvidenceEvent::Reserved {
                task: id("a"),
                attempt: 1,
                input_digest: Digest::from_bytes([2; 32]),
            },
            EvidenceEvent::Settled {
                task: id("a"),
                attempt: 1,
                settlement: Settlement::Accepted {
                    digest: candidate.digest(),
                    candidate,
                },
            },
        ])
        .unwrap();
        let bytes = encode_payload(&BatchEvidenceV3::from(&evidence)).unwrap();
        let read = |edit: &dyn Fn(&mut BatchEvidenceV3<'static>)| {
            let mut wire: BatchEvidenceV3<'static> = decode_payload(&bytes).unwrap();
            edit(&mut wire);
            BatchEvidence::try_from(wire)
        };
        assert_eq!(read(&|_| {}).unwrap(), evidence);
        assert_eq!(
            read(&|w| w.order.push(Cow::Owned(id("b")))).unwrap_err(),
            InvalidPayload::TaskCount { listed: 2, held: 1 }
        );
        assert!(matches!(
            read(&|w| {
                let accepted = w.tasks[0].accepted.as_mut().unwrap();
                accepted.digest = Digest::from_bytes([0; 32]);
            })
            .unwrap_err(),
            InvalidPayload::AcceptedDigest { task, .. } if task == id("a")
        ));
        assert_eq!(
            read(&|w| w.failure_history.push(FailureNoteV1 {
                task: Cow::Owned(id("z")),
                attempt: 1,
                kind: FailureKindV1::Rejected,
            }))
            .unwrap_err(),
            InvalidPayload::UnknownTask {
                part: "failure_history",
                task: id("z")
            }
        );
        assert_eq!(
            read(&|w| w.closures.push(ClosureCallV2 {
                task: Cow::Owned(id("z")),
                attempt: 1,
                fixes_drawn: 0,
                settled: None,
                withdrawn: false,
            }))
            .unwrap_err(),
            InvalidPayload::UnknownTask {
                part: "closures",
                task: id("z")
            }
        );
        assert_eq!(
            read(&|w| w.evidence_version = 9).unwrap_err(),
            InvalidPayload::EvidenceVersion {
                found: 9,
                reads: crate::batch::evidence::EVIDENCE_VERSION
            }
        );
    }
}
