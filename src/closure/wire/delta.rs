//! The `CLDT` payload: one step of a closure's incremental form.

use super::audit::AuditEventV1;
use super::state::RecoveryPolicyV1;
use super::state::StateSealV1;
use super::task::TaskV2;
use crate::closure::audit::AuditEntry;
use crate::closure::audit::AuditEvent;
use crate::closure::audit::AuditLog;
use crate::closure::machine::history::ClosureDelta;
use crate::closure::machine::history::Payload;
use crate::closure::machine::history::Start;
use crate::closure::machine::state::StateSeal;
use crate::closure::policy::RecoveryPolicy;
use crate::closure::step::ExecutionOutput;
use crate::closure::task::Task;
use crate::id::digest::Digest;
use crate::wire::Invalid;
use crate::wire::Record;
use crate::wire::Seq;
use serde::Deserialize;
use serde::Serialize;
use std::borrow::Cow;

/// A [`ClosureDelta`] (`CLDT` format version 1).
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
pub(crate) struct ClosureDeltaV1<'a> {
    prev: DigestBytes,
    events: Seq<'a, AuditEvent, AuditEventV1<'a>>,
    head: DigestBytes,
    payload: PayloadV1<'a>,
}

/// What a delta's entries do not carry.
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
#[serde(rename_all = "snake_case")]
pub(super) enum PayloadV1<'a> {
    None,
    Start(Box<StartV1<'a>>),
    Output { text: Cow<'a, str> },
}

/// The start of a closure: its root task, policy, fix-budget snapshot and their seal.
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
pub(super) struct StartV1<'a> {
    task: TaskV2<'a>,
    policy: RecoveryPolicyV1,
    budget_max: u32,
    budget_used: u32,
    seal: StateSealV1,
}

impl<'a> Record<'a, ClosureDelta> for ClosureDeltaV1<'a> {
    fn of(d: &'a ClosureDelta) -> Self {
        let payload = match &d.payload {
            Payload::None => StepPayload::None,
            Payload::Output(o) => StepPayload::Output(&o.text),
            Payload::Start(start) => StepPayload::Start {
                task: &start.task,
                policy: &start.policy,
                budget: (start.budget_max, start.budget_used),
                seal: &start.seal,
            },
        };
        Self {
            prev: DigestBytes(d.prev),
            events: Seq::Borrowed(&d.events),
            head: DigestBytes(d.head),
            payload: payload.into(),
        }
    }
}

impl TryFrom<ClosureDeltaV1<'_>> for ClosureDelta {
    type Error = Invalid;

    fn try_from(w: ClosureDeltaV1<'_>) -> Result<Self, Invalid> {
        let payload = match w.payload {
            PayloadV1::None => Payload::None,
            PayloadV1::Output { text } => Payload::Output(ExecutionOutput {
                text: text.into_owned(),
            }),
            PayloadV1::Start(s) => Payload::Start(Box::new(Start {
                task: Task::try_from(s.task)?,
                policy: s.policy.try_into()?,
                budget_max: s.budget_max,
                budget_used: s.budget_used,
                seal: s.seal.into(),
            })),
        };
        Ok(ClosureDelta {
            prev: w.prev.0,
            events: w.events.into_values(AuditEvent::from),
            head: w.head.0,
            payload,
        })
    }
}

/// A closure step's delta (`CLDT` version 1) written straight from the closure's audit log:
/// the bytes of the [`ClosureDeltaV1`] of the delta the step would build, without building
/// it (nothing is cloned on the path that persists every step). It is only ever written, so
/// it has no serde form; `tests/formats/wire_native_encode.rs` compares its bytes with the serde form
/// of the delta.
#[derive(bincode::Encode)]
pub(crate) struct StepDeltaV1<'a> {
    prev: DigestBytes,
    events: StepEvents<'a>,
    head: DigestBytes,
    payload: PayloadV1<'a>,
}

/// What a step's delta carries besides its entries.
pub(crate) enum StepPayload<'a> {
    /// Nothing: the entries say it all.
    None,
    /// The closure's start: its root task, policy, fix-budget snapshot and their seal.
    Start {
        task: &'a Task,
        policy: &'a RecoveryPolicy,
        budget: (u32, u32),
        seal: &'a StateSeal,
    },
    /// An execution's output text.
    Output(&'a str),
}

/// The events of a run of audit entries, written as the list of them a delta holds.
pub(super) struct StepEvents<'a>(&'a [AuditEntry]);

impl bincode::Encode for StepEvents<'_> {
    fn encode<E: bincode::enc::Encoder>(
        &self,
        encoder: &mut E,
    ) -> Result<(), bincode::error::EncodeError> {
        crate::wire::encode_seq(encoder, self.0.iter().map(|e| AuditEventV1::of(e.event())))
    }
}

impl<'a> StepDeltaV1<'a> {
    /// The delta of the audit entries of one `step` and what it carries besides them.
    pub(crate) fn new(step: &'a [AuditEntry], payload: StepPayload<'a>) -> Self {
        Self {
            prev: DigestBytes(step.first().map_or(AuditLog::GENESIS, AuditEntry::prev)),
            events: StepEvents(step),
            head: DigestBytes(step.last().map_or(AuditLog::GENESIS, AuditEntry::hash)),
            payload: payload.into(),
        }
    }
}

impl<'a> From<StepPayload<'a>> for PayloadV1<'a> {
    fn from(payload: StepPayload<'a>) -> Self {
        match payload {
            StepPayload::None => PayloadV1::None,
            StepPayload::Output(text) => PayloadV1::Output {
                text: Cow::Borrowed(text),
            },
            StepPayload::Start {
                task,
                policy,
                budget: (budget_max, budget_used),
                seal,
            } => PayloadV1::Start(Box::new(StartV1 {
                task: TaskV2::of(task),
                policy: RecoveryPolicyV1::of(policy),
                budget_max,
                budget_used,
                seal: StateSealV1::of(seal),
            })),
        }
    }
}

/// A digest written as one run of 32 bytes (not 32 separate integers): a delta is encoded
/// at every step.
#[derive(Debug, Clone, Copy)]
pub(super) struct DigestBytes(Digest);

impl Serialize for DigestBytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0.as_bytes())
    }
}

/// Its length (32, a `u64`) and the bytes, as `serialize_bytes` writes them to bincode.
impl bincode::Encode for DigestBytes {
    fn encode<E: bincode::enc::Encoder>(
        &self,
        encoder: &mut E,
    ) -> Result<(), bincode::error::EncodeError> {
        bincode::Encode::encode(self.0.as_bytes().as_slice(), encoder)
    }
}

impl<'de> Deserialize<'de> for DigestBytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Bytes;
        impl<'de> serde::de::Visitor<'de> for Bytes {
            type Value = DigestBytes;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("32 bytes of a digest")
            }

            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<DigestBytes, E> {
                <[u8; 32]>::try_from(v)
                    .map(|b| DigestBytes(Digest::from_bytes(b)))
                    .map_err(|_| E::invalid_length(v.len(), &self))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<DigestBytes, A::Error> {
                let mut bytes = [0u8; 32];
                for (i, b) in bytes.iter_mut().enumerate() {
                    *b = seq
                        .next_element()?
                        .ok_or_else(|| serde::de::Error::invalid_length(i, &self))?;
                }
                if seq.next_element::<u8>()?.is_some() {
                    return Err(serde::de::Error::invalid_length(33, &self));
                }
                Ok(DigestBytes(Digest::from_bytes(bytes)))
            }
        }
        d.deserialize_bytes(Bytes)
    }
}
