//! The records of the batch evidence payloads: one evidence event (`BEVT`, a journal
//! record's body) and a folded evidence snapshot (`EVID`, a journal's compaction).
//!
//! Each record mirrors, field for field and variant for variant, the shape the payload's
//! format version has on the wire (bincode of these serde derives), so the domain types in
//! `crate::batch` can change without moving a byte. Encoding borrows: an event is encoded
//! for every journal append, so no candidate, output or closure settlement is cloned.
//!
//! ```text
//! let bytes = checkpoint::encode_payload(&EvidenceEventV2::from(&event))?;
//! let back: EvidenceEvent = checkpoint::decode_payload::<EvidenceEventV2>(&bytes)?.into();
//! ```

mod checkpoint;
pub(crate) mod message;

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::batch::candidate::{AcceptedOutput, Candidate, Rejection};
use crate::batch::event::{
    ClosureEnd, ClosureSettlement, EvidenceEvent, InventoryEntry, Settlement,
};
use crate::batch::evidence::{
    BatchEvidence, ClosureCall, EVIDENCE_VERSION, FAILURE_HISTORY_LIMIT, FailureKind, FailureNote,
    RecoveryRecord, RejectedAttempt, TaskEvidence, index_of,
};
use crate::batch::recovery::IneligibleReason;
use crate::batch::worker::InfrastructureFailure;
use crate::checkpoint::InvalidPayload;
use crate::plan::path::AdmittedPath;
use crate::{id::AgentId, id::ChannelId, id::TaskId, id::digest::Digest};

/// An id or a string, borrowed on encode, owned on decode.
type Text<'a, T> = Cow<'a, T>;

/// A candidate: its files, sorted by path.
#[derive(Serialize, Deserialize)]
pub(crate) struct CandidateV1<'a> {
    files: Cow<'a, BTreeMap<AdmittedPath, Vec<u8>>>,
}

/// What the serde form writes to bincode: the number of files (a `u64`), then each path's
/// text and contents (each its length, then its bytes).
impl bincode::Encode for CandidateV1<'_> {
    fn encode<E: bincode::enc::Encoder>(
        &self,
        encoder: &mut E,
    ) -> Result<(), bincode::error::EncodeError> {
        bincode::Encode::encode(&(self.files.len() as u64), encoder)?;
        for (path, contents) in self.files.iter() {
            bincode::Encode::encode(path.as_str(), encoder)?;
            bincode::Encode::encode(contents.as_slice(), encoder)?;
        }
        Ok(())
    }
}

impl<'a> From<&'a Candidate> for CandidateV1<'a> {
    fn from(c: &'a Candidate) -> Self {
        Self {
            files: Cow::Borrowed(c.files()),
        }
    }
}

impl From<CandidateV1<'_>> for Candidate {
    fn from(c: CandidateV1<'_>) -> Self {
        Candidate::new(c.files.into_owned())
    }
}

/// Why a candidate was refused.
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) enum RejectionV1<'a> {
    NotOwned {
        task: Text<'a, TaskId>,
        // Through its serde form (its text): a path has no `Encode` of its own.
        #[bincode(with_serde)]
        path: Text<'a, AdmittedPath>,
    },
    Contract {
        task: Text<'a, TaskId>,
        message: Text<'a, str>,
    },
}

impl<'a> From<&'a Rejection> for RejectionV1<'a> {
    fn from(r: &'a Rejection) -> Self {
        match r {
            Rejection::NotOwned { task, path } => Self::NotOwned {
                task: Cow::Borrowed(task),
                path: Cow::Borrowed(path),
            },
            Rejection::Contract { task, message } => Self::Contract {
                task: Cow::Borrowed(task),
                message: Cow::Borrowed(message),
            },
        }
    }
}

impl From<RejectionV1<'_>> for Rejection {
    fn from(r: RejectionV1<'_>) -> Self {
        match r {
            RejectionV1::NotOwned { task, path } => Rejection::NotOwned {
                task: task.into_owned(),
                path: path.into_owned(),
            },
            RejectionV1::Contract { task, message } => Rejection::Contract {
                task: task.into_owned(),
                message: message.into_owned(),
            },
        }
    }
}

/// A failure of the worker's infrastructure.
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) enum InfrastructureFailureV1<'a> {
    ProcessMissing { detail: Text<'a, str> },
    Timeout { after_ms: u64 },
    Transport { detail: Text<'a, str> },
    Agent { detail: Text<'a, str> },
}

impl<'a> From<&'a InfrastructureFailure> for InfrastructureFailureV1<'a> {
    fn from(f: &'a InfrastructureFailure) -> Self {
        match f {
            InfrastructureFailure::ProcessMissing { detail } => Self::ProcessMissing {
                detail: Cow::Borrowed(detail),
            },
            InfrastructureFailure::Timeout { after_ms } => Self::Timeout {
                after_ms: *after_ms,
            },
            InfrastructureFailure::Transport { detail } => Self::Transport {
                detail: Cow::Borrowed(detail),
            },
            InfrastructureFailure::Agent { detail } => Self::Agent {
                detail: Cow::Borrowed(detail),
            },
        }
    }
}

impl From<InfrastructureFailureV1<'_>> for InfrastructureFailure {
    fn from(f: InfrastructureFailureV1<'_>) -> Self {
        match f {
            InfrastructureFailureV1::ProcessMissing { detail } => Self::ProcessMissing {
                detail: detail.into_owned(),
            },
            InfrastructureFailureV1::Timeout { after_ms } => Self::Timeout { after_ms },
            InfrastructureFailureV1::Transport { detail } => Self::Transport {
                detail: detail.into_owned(),
            },
            InfrastructureFailureV1::Agent { detail } => Self::Agent {
                detail: detail.into_owned(),
            },
        }
    }
}

/// Why a root was refused a corrective call (variant numbers are the wire form).
#[derive(Clone, Copy, Serialize, Deserialize, bincode::Encode)]
pub(crate) enum IneligibleReasonV1 {
    InputsChanged,
    DiagnosticsMissing,
    BudgetExhausted,
    RootAlreadyConsumed,
    RequestAlreadyConsumed,
    UncertainInterruptedExecution,
    InfrastructureFailure,
    AlreadyAccepted,
}

impl From<&IneligibleReason> for IneligibleReasonV1 {
    fn from(r: &IneligibleReason) -> Self {
        match r {
            IneligibleReason::InputsChanged => Self::InputsChanged,
            IneligibleReason::DiagnosticsMissing => Self::DiagnosticsMissing,
            IneligibleReason::BudgetExhausted => Self::BudgetExhausted,
            IneligibleReason::RootAlreadyConsumed => Self::RootAlreadyConsumed,
            IneligibleReason::RequestAlreadyConsumed => Self::RequestAlreadyConsumed,
            IneligibleReason::UncertainInterruptedExecution => Self::UncertainInterruptedExecution,
            IneligibleReason::InfrastructureFailure => Self::InfrastructureFailure,
            IneligibleReason::AlreadyAccepted => Self::AlreadyAccepted,
        }
    }
}

impl From<IneligibleReasonV1> for IneligibleReason {
    fn from(r: IneligibleReasonV1) -> Self {
        match r {
            IneligibleReasonV1::InputsChanged => Self::InputsChanged,
            IneligibleReasonV1::DiagnosticsMissing => Self::DiagnosticsMissing,
            IneligibleReasonV1::BudgetExhausted => Self::BudgetExhausted,
            IneligibleReasonV1::RootAlreadyConsumed => Self::RootAlreadyConsumed,
            IneligibleReasonV1::RequestAlreadyConsumed => Self::RequestAlreadyConsumed,
            IneligibleReasonV1::UncertainInterruptedExecution => {
                Self::UncertainInterruptedExecution
            }
            IneligibleReasonV1::InfrastructureFailure => Self::InfrastructureFailure,
            IneligibleReasonV1::AlreadyAccepted => Self::AlreadyAccepted,
        }
    }
}

/// Roots refused by a recovery request, with why.
type Refused<'a> = Vec<(Text<'a, TaskId>, IneligibleReasonV1)>;

fn refused_of(refused: &[(TaskId, IneligibleReason)]) -> Refused<'_> {
    refused
        .iter()
        .map(|(task, why)| (Cow::Borrowed(task), why.into()))
        .collect()
}

fn refused_from(refused: Refused<'_>) -> Vec<(TaskId, IneligibleReason)> {
    refused
        .into_iter()
        .map(|(task, why)| (task.into_owned(), why.into()))
        .collect()
}

/// How a settled closure ended.
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) enum ClosureEndV1<'a> {
    Resolved { depth: u32 },
    Halted { depth: u32, halt: Text<'a, str> },
    Failed { depth: u32 },
}

/// A settled closure as batch evidence.
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) struct ClosureSettlementV1<'a> {
    fix_attempts: u32,
    end: ClosureEndV1<'a>,
    audit_head: Digest,
    record_digest: Digest,
}

impl<'a> From<&'a ClosureSettlement> for ClosureSettlementV1<'a> {
    fn from(c: &'a ClosureSettlement) -> Self {
        Self {
            fix_attempts: c.fix_attempts,
            end: match &c.end {
                ClosureEnd::Resolved { depth } => ClosureEndV1::Resolved { depth: *depth },
                ClosureEnd::Halted { depth, halt } => ClosureEndV1::Halted {
                    depth: *depth,
                    halt: Cow::Borrowed(halt),
                },
                ClosureEnd::Failed { depth } => ClosureEndV1::Failed { depth: *depth },
            },
            audit_head: c.audit_head,
            record_digest: c.record_digest,
        }
    }
}

impl From<ClosureSettlementV1<'_>> for ClosureSettlement {
    fn from(c: ClosureSettlementV1<'_>) -> Self {
        Self {
            fix_attempts: c.fix_attempts,
            end: match c.end {
                ClosureEndV1::Resolved { depth } => ClosureEnd::Resolved { depth },
                ClosureEndV1::Halted { depth, halt } => ClosureEnd::Halted {
                    depth,
                    halt: halt.into_owned(),
                },
                ClosureEndV1::Failed { depth } => ClosureEnd::Failed { depth },
            },
            audit_head: c.audit_head,
            record_digest: c.record_digest,
        }
    }
}

/// One planned task of the batch inventory.
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) struct InventoryEntryV1<'a> {
    task: Text<'a, TaskId>,
    owner: Text<'a, AgentId>,
    budget: u32,
}

/// How a reserved call settled.
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) enum SettlementV1<'a> {
    Accepted {
        candidate: CandidateV1<'a>,
        digest: Digest,
    },
    Rejected {
        candidate: CandidateV1<'a>,
        rejection: RejectionV1<'a>,
    },
    Infrastructure(InfrastructureFailureV1<'a>),
}

impl<'a> From<&'a Settlement> for SettlementV1<'a> {
    fn from(s: &'a Settlement) -> Self {
        match s {
            Settlement::Accepted { candidate, digest } => Self::Accepted {
                candidate: candidate.into(),
                digest: *digest,
            },
            Settlement::Rejected {
                candidate,
                rejection,
            } => Self::Rejected {
                candidate: candidate.into(),
                rejection: rejection.into(),
            },
            Settlement::Infrastructure(f) => Self::Infrastructure(f.into()),
        }
    }
}

impl From<SettlementV1<'_>> for Settlement {
    fn from(s: SettlementV1<'_>) -> Self {
        match s {
            SettlementV1::Accepted { candidate, digest } => Self::Accepted {
                candidate: candidate.into(),
                digest,
            },
            SettlementV1::Rejected {
                candidate,
                rejection,
            } => Self::Rejected {
                candidate: candidate.into(),
                rejection: rejection.into(),
            },
            SettlementV1::Infrastructure(f) => Self::Infrastructure(f.into()),
        }
    }
}

/// One evidence event, format version 2 (version 1 is the same shape without the last two
/// variants, so its bytes decode as this record).
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) enum EvidenceEventV2<'a> {
    Started {
        channel: Text<'a, ChannelId>,
        plan_digest: Digest,
        evidence_version: u32,
        inputs: Cow<'a, BTreeMap<String, Digest>>,
        recovery: bool,
        inventory: Vec<InventoryEntryV1<'a>>,
    },
    Reserved {
        task: Text<'a, TaskId>,
        attempt: u32,
        input_digest: Digest,
    },
    Settled {
        task: Text<'a, TaskId>,
        attempt: u32,
        settlement: SettlementV1<'a>,
    },
    Interrupted {
        task: Text<'a, TaskId>,
        attempt: u32,
    },
    Withdrawn {
        task: Text<'a, TaskId>,
        attempt: u32,
        detail: Text<'a, str>,
    },
    Drained {
        task: Text<'a, TaskId>,
        blocked_by: Text<'a, TaskId>,
    },
    RecoveryConsumed {
        request: Digest,
        granted: Cow<'a, [TaskId]>,
        released: Cow<'a, [TaskId]>,
        refused: Refused<'a>,
    },
    // Added in version 2.
    FixDrawn {
        task: Text<'a, TaskId>,
        attempt: u32,
        fix: Text<'a, TaskId>,
    },
    ClosureSettled {
        task: Text<'a, TaskId>,
        attempt: u32,
        closure: ClosureSettlementV1<'a>,
    },
}

impl<'a> From<&'a EvidenceEvent> for EvidenceEventV2<'a> {
    fn from(e: &'a EvidenceEvent) -> Self {
        use Cow::Borrowed as B;
        match e {
            EvidenceEvent::Started {
                channel,
                plan_digest,
                evidence_version,
                inputs,
                recovery,
                inventory,
            } => Self::Started {
                channel: B(channel),
                plan_digest: *plan_digest,
                evidence_version: *evidence_version,
                inputs: B(inputs),
                recovery: *recovery,
                inventory: inventory
                    .iter()
                    .map(|e| InventoryEntryV1 {
                        task: B(&e.task),
                        owner: B(&e.owner),
                        budget: e.budget,
                    })
                    .collect(),
            },
            EvidenceEvent::Reserved {
                task,
                attempt,
                input_digest,
            } => Self::Reserved {
                task: B(task),
                attempt: *attempt,
                input_digest: *input_digest,
            },
            EvidenceEvent::Settled {
                task,
                attempt,
                settlement,
            } => Self::Settled {
                task: B(task),
                attempt: *attempt,
                settlement: settlement.into(),
            },
            EvidenceEvent::Interrupted { task, attempt } => Self::Interrupted {
                task: B(task),
                attempt: *attempt,
            },
            EvidenceEvent::Withdrawn {
                task,
                attempt,
                detail,
            } => Self::Withdrawn {
                task: B(task),
                attempt: *attempt,
                detail: B(detail),
            },
            EvidenceEvent::Drained { task, blocked_by } => Self::Drained {
                task: B(task),
                blocked_by: B(blocked_by),
            },
            EvidenceEvent::RecoveryConsumed {
                request,
                granted,
                released,
                refused,
            } => Self::RecoveryConsumed {
                request: *request,
                granted: B(granted),
                released: B(released),
                refused: refused_of(refused),
            },
            EvidenceEvent::FixDrawn { task, attempt, fix } => Self::FixDrawn {
                task: B(task),
                attempt: *attempt,
                fix: B(fix),
            },
            EvidenceEvent::ClosureSettled {
                task,
                attempt,
                closure,
            } => Self::ClosureSettled {
                task: B(task),
                attempt: *attempt,
                closure: closure.into(),
            },
        }
    }
}

impl From<EvidenceEventV2<'_>> for EvidenceEvent {
    fn from(e: EvidenceEventV2<'_>) -> Self {
        match e {
            EvidenceEventV2::Started {
                channel,
                plan_digest,
                evidence_version,
                inputs,
                recovery,
                inventory,
            } => Self::Started {
                channel: channel.into_owned(),
                plan_digest,
                evidence_version,
                inputs: inputs.into_owned(),
                recovery,
                inventory: inventory
                    .into_iter()
                    .map(|e| InventoryEntry {
                        task: e.task.into_owned(),
                        owner: e.owner.into_owned(),
                        budget: e.budget,
                    })
                    .collect(),
            },
            EvidenceEventV2::Reserved {
                task,
                attempt,
                input_digest,
            } => Self::Reserved {
                task: task.into_owned(),
                attempt,
                input_digest,
            },
            EvidenceEventV2::Settled {
                task,
                attempt,
                settlement,
            } => Self::Settled {
                task: task.into_owned(),
                attempt,
                settlement: settlement.into(),
            },
            EvidenceEventV2::Interrupted { task, attempt } => Self::Interrupted {
                task: task.into_owned(),
                attempt,
            },
            EvidenceEventV2::Withdrawn {
                task,
                attempt,
                detail,
            } => Self::Withdrawn {
                task: task.into_owned(),
                attempt,
                detail: detail.into_owned(),
            },
            EvidenceEventV2::Drained { task, blocked_by } => Self::Drained {
                task: task.into_owned(),
                blocked_by: blocked_by.into_owned(),
            },
            EvidenceEventV2::RecoveryConsumed {
                request,
                granted,
                released,
                refused,
            } => Self::RecoveryConsumed {
                request,
                granted: granted.into_owned(),
                released: released.into_owned(),
                refused: refused_from(refused),
            },
            EvidenceEventV2::FixDrawn { task, attempt, fix } => Self::FixDrawn {
                task: task.into_owned(),
                attempt,
                fix: fix.into_owned(),
            },
            EvidenceEventV2::ClosureSettled {
                task,
                attempt,
                closure,
            } => Self::ClosureSettled {
                task: task.into_owned(),
                attempt,
                closure: closure.into(),
            },
        }
    }
}

impl EvidenceEventV2<'_> {
    /// The event read from a version-1 payload, which has no closure events.
    pub(crate) fn of_version_one(self) -> Result<Self, InvalidPayload> {
        match self {
            Self::FixDrawn { .. } => Err(InvalidPayload::NewerEvent {
                version: 1,
                event: "fix_drawn",
            }),
            Self::ClosureSettled { .. } => Err(InvalidPayload::NewerEvent {
                version: 1,
                event: "closure_settled",
            }),
            old => Ok(old),
        }
    }
}

/// An accepted output: the candidate and the digest it was accepted under.
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) struct AcceptedOutputV1<'a> {
    candidate: CandidateV1<'a>,
    digest: Digest,
}

/// A refused candidate with its exact rejection.
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) struct RejectedAttemptV1<'a> {
    attempt: u32,
    input_digest: Digest,
    candidate: CandidateV1<'a>,
    rejection: RejectionV1<'a>,
}

/// Everything a snapshot knows about one task.
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) struct TaskEvidenceV1<'a> {
    owner: Text<'a, AgentId>,
    budget: u32,
    calls: u32,
    in_flight: Option<(u32, Digest)>,
    last_input_digest: Option<Digest>,
    rejections: Vec<RejectedAttemptV1<'a>>,
    accepted: Option<AcceptedOutputV1<'a>>,
    infrastructure: Option<(u32, InfrastructureFailureV1<'a>)>,
    interrupted: Cow<'a, [u32]>,
    blocked_by: Option<Text<'a, TaskId>>,
    correction_granted: bool,
}

impl<'a> From<&'a TaskEvidence> for TaskEvidenceV1<'a> {
    fn from(t: &'a TaskEvidence) -> Self {
        Self {
            owner: Cow::Borrowed(&t.owner),
            budget: t.budget,
            calls: t.calls,
            in_flight: t.in_flight,
            last_input_digest: t.last_input_digest,
            rejections: t
                .rejections
                .iter()
                .map(|r| RejectedAttemptV1 {
                    attempt: r.attempt,
                    input_digest: r.input_digest,
                    candidate: (&r.candidate).into(),
                    rejection: (&r.rejection).into(),
                })
                .collect(),
            accepted: t.accepted.as_ref().map(|a| AcceptedOutputV1 {
                candidate: a.candidate().into(),
                digest: a.digest(),
            }),
            infrastructure: t.infrastructure.as_ref().map(|(n, f)| (*n, f.into())),
            interrupted: Cow::Borrowed(&t.interrupted),
            blocked_by: t.blocked_by.as_ref().map(Cow::Borrowed),
            correction_granted: t.correction_granted,
        }
    }
}

impl TaskEvidenceV1<'_> {
    /// The task's evidence, refusing an accepted output whose files do not match its digest.
    fn into_domain(self, task: &TaskId) -> Result<TaskEvidence, InvalidPayload> {
        let accepted = match self.accepted {
            None => None,
            Some(a) => {
                let digest = a.digest;
                Some(
                    AcceptedOutput::verified(a.candidate.into(), digest).ok_or_else(|| {
                        InvalidPayload::AcceptedDigest {
                            task: task.clone(),
                            digest,
                        }
                    })?,
                )
            }
        };
        Ok(TaskEvidence {
            owner: self.owner.into_owned(),
            budget: self.budget,
            calls: self.calls,
            in_flight: self.in_flight,
            last_input_digest: self.last_input_digest,
            rejections: self
                .rejections
                .into_iter()
                .map(|r| RejectedAttempt {
                    attempt: r.attempt,
                    input_digest: r.input_digest,
                    candidate: r.candidate.into(),
                    rejection: r.rejection.into(),
                })
                .collect(),
            accepted,
            infrastructure: self.infrastructure.map(|(n, f)| (n, f.into())),
            interrupted: self.interrupted.into_owned(),
            blocked_by: self.blocked_by.map(Cow::into_owned),
            correction_granted: self.correction_granted,
        })
    }
}

/// What kind of failure a failure note records (variant numbers are the wire form).
#[derive(Clone, Copy, Serialize, Deserialize, bincode::Encode)]
pub(crate) enum FailureKindV1 {
    Rejected,
    Infrastructure,
    Interrupted,
}

/// One entry of the bounded failure history.
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) struct FailureNoteV1<'a> {
    task: Text<'a, TaskId>,
    attempt: u32,
    kind: FailureKindV1,
}

impl<'a> From<&'a FailureNote> for FailureNoteV1<'a> {
    fn from(n: &'a FailureNote) -> Self {
        Self {
            task: Cow::Borrowed(&n.task),
            attempt: n.attempt,
            kind: match n.kind {
                FailureKind::Rejected => FailureKindV1::Rejected,
                FailureKind::Infrastructure => FailureKindV1::Infrastructure,
                FailureKind::Interrupted => FailureKindV1::Interrupted,
            },
        }
    }
}

impl From<FailureNoteV1<'_>> for FailureNote {
    fn from(n: FailureNoteV1<'_>) -> Self {
        Self {
            task: n.task.into_owned(),
            attempt: n.attempt,
            kind: match n.kind {
                FailureKindV1::Rejected => FailureKind::Rejected,
                FailureKindV1::Infrastructure => FailureKind::Infrastructure,
                FailureKindV1::Interrupted => FailureKind::Interrupted,
            },
        }
    }
}

/// What one consumed recovery request decided.
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) struct RecoveryRecordV1<'a> {
    request: Digest,
    granted: Cow<'a, [TaskId]>,
    released: Cow<'a, [TaskId]>,
    refused: Refused<'a>,
}

impl<'a> From<&'a RecoveryRecord> for RecoveryRecordV1<'a> {
    fn from(r: &'a RecoveryRecord) -> Self {
        Self {
            request: r.request,
            granted: Cow::Borrowed(&r.granted),
            released: Cow::Borrowed(&r.released),
            refused: refused_of(&r.refused),
        }
    }
}

impl From<RecoveryRecordV1<'_>> for RecoveryRecord {
    fn from(r: RecoveryRecordV1<'_>) -> Self {
        Self {
            request: r.request,
            granted: r.granted.into_owned(),
            released: r.released.into_owned(),
            refused: refused_from(r.refused),
        }
    }
}

/// The closure of one call as a snapshot holds it.
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) struct ClosureCallV2<'a> {
    task: Text<'a, TaskId>,
    attempt: u32,
    fixes_drawn: u32,
    settled: Option<ClosureSettlementV1<'a>>,
    withdrawn: bool,
}

impl<'a> From<&'a ClosureCall> for ClosureCallV2<'a> {
    fn from(c: &'a ClosureCall) -> Self {
        Self {
            task: Cow::Borrowed(&c.task),
            attempt: c.attempt,
            fixes_drawn: c.fixes_drawn,
            settled: c.settled.as_ref().map(Into::into),
            withdrawn: c.withdrawn,
        }
    }
}

impl From<ClosureCallV2<'_>> for ClosureCall {
    fn from(c: ClosureCallV2<'_>) -> Self {
        Self {
            task: c.task.into_owned(),
            attempt: c.attempt,
            fixes_drawn: c.fixes_drawn,
            settled: c.settled.map(Into::into),
            withdrawn: c.withdrawn,
        }
    }
}

/// A folded evidence snapshot, format version 2 (the closures of the calls).
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) struct BatchEvidenceV2<'a> {
    channel: Text<'a, ChannelId>,
    plan_digest: Digest,
    evidence_version: u32,
    inputs: Cow<'a, BTreeMap<String, Digest>>,
    recovery: bool,
    order: Vec<Text<'a, TaskId>>,
    tasks: Vec<TaskEvidenceV1<'a>>,
    recoveries: Vec<RecoveryRecordV1<'a>>,
    failure_history: Vec<FailureNoteV1<'a>>,
    events: u64,
    closures: Vec<ClosureCallV2<'a>>,
}

/// A folded evidence snapshot of format version 1, written before closures were evidence.
#[derive(Deserialize)]
pub(crate) struct BatchEvidenceV1<'a> {
    channel: Text<'a, ChannelId>,
    plan_digest: Digest,
    evidence_version: u32,
    inputs: Cow<'a, BTreeMap<String, Digest>>,
    recovery: bool,
    order: Vec<Text<'a, TaskId>>,
    tasks: Vec<TaskEvidenceV1<'a>>,
    recoveries: Vec<RecoveryRecordV1<'a>>,
    failure_history: Vec<FailureNoteV1<'a>>,
    events: u64,
}

impl<'a> From<BatchEvidenceV1<'a>> for BatchEvidenceV2<'a> {
    fn from(r: BatchEvidenceV1<'a>) -> Self {
        Self {
            channel: r.channel,
            plan_digest: r.plan_digest,
            evidence_version: r.evidence_version,
            inputs: r.inputs,
            recovery: r.recovery,
            order: r.order,
            tasks: r.tasks,
            recoveries: r.recoveries,
            failure_history: r.failure_history,
            events: r.events,
            closures: Vec::new(),
        }
    }
}

impl<'a> From<&'a BatchEvidence> for BatchEvidenceV2<'a> {
    fn from(e: &'a BatchEvidence) -> Self {
        let (order, tasks) = e
            .inventory()
            .map(|(task, evidence)| (Cow::Borrowed(task), evidence.into()))
            .unzip();
        Self {
            channel: Cow::Borrowed(e.channel()),
            plan_digest: e.plan_digest(),
            evidence_version: e.evidence_version(),
            inputs: Cow::Borrowed(e.input_digests()),
            recovery: e.recovery_enabled(),
            order,
            tasks,
            recoveries: e.recoveries().iter().map(Into::into).collect(),
            failure_history: e.failure_history().map(Into::into).collect(),
            events: e.event_count(),
            closures: e.closures().iter().map(Into::into).collect(),
        }
    }
}

impl TryFrom<BatchEvidenceV2<'_>> for BatchEvidence {
    type Error = InvalidPayload;

    /// Checks what the snapshot states before trusting it: one evidence set per listed
    /// task, every accepted output matching its digest (the rest is checked as the domain
    /// type rebuilds its index).
    fn try_from(r: BatchEvidenceV2<'_>) -> Result<Self, InvalidPayload> {
        if r.order.len() != r.tasks.len() {
            return Err(InvalidPayload::TaskCount {
                listed: r.order.len() as u64,
                held: r.tasks.len() as u64,
            });
        }
        let order: Vec<TaskId> = r.order.into_iter().map(Cow::into_owned).collect();
        // Every call and failure note is of a task of the inventory (folding refuses an
        // event of any other), so one that is not was written by hand.
        let known: std::collections::HashSet<&TaskId> = order.iter().collect();
        let unknown = |part, task: &TaskId| {
            (!known.contains(task)).then(|| InvalidPayload::UnknownTask {
                part,
                task: task.clone(),
            })
        };
        let stray = r
            .closures
            .iter()
            .find_map(|c| unknown("closures", &c.task))
            .or_else(|| {
                r.failure_history
                    .iter()
                    .find_map(|n| unknown("failure_history", &n.task))
            });
        if let Some(stray) = stray {
            return Err(stray);
        }
        let tasks = order
            .iter()
            .zip(r.tasks)
            .map(|(task, evidence)| evidence.into_domain(task))
            .collect::<Result<_, _>>()?;
        if r.evidence_version != EVIDENCE_VERSION {
            return Err(InvalidPayload::EvidenceVersion {
                found: r.evidence_version,
                reads: EVIDENCE_VERSION,
            });
        }
        // `note` keeps the history at the limit; a longer one would never shrink back.
        if r.failure_history.len() > FAILURE_HISTORY_LIMIT {
            return Err(InvalidPayload::FailureHistory {
                kept: r.failure_history.len() as u64,
                max: FAILURE_HISTORY_LIMIT as u64,
            });
        }
        let index = index_of(&order).map_err(|task| InvalidPayload::DuplicateTask { task })?;
        let closures: Vec<ClosureCall> = r.closures.into_iter().map(Into::into).collect();
        Ok(BatchEvidence {
            channel: r.channel.into_owned(),
            plan_digest: r.plan_digest,
            evidence_version: r.evidence_version,
            inputs: r.inputs.into_owned(),
            recovery: r.recovery,
            order,
            tasks,
            recoveries: r.recoveries.into_iter().map(Into::into).collect(),
            failure_history: r.failure_history.into_iter().map(Into::into).collect(),
            events: r.events,
            fixes_used: closures
                .iter()
                .fold(0u32, |n, c| n.saturating_add(c.fix_attempts_used())),
            closures,
            index,
        })
    }
}

// The domain types' serde forms are their records' (the checkpoint trait asks for serde, and
// a JSON copy then has the payload's shape); decoding a snapshot checks it as the payload
// decoder does.
impl Serialize for EvidenceEvent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        EvidenceEventV2::from(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for EvidenceEvent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        EvidenceEventV2::deserialize(d).map(Into::into)
    }
}

impl Serialize for BatchEvidence {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        BatchEvidenceV2::from(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for BatchEvidence {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let record = BatchEvidenceV2::deserialize(d)?;
        BatchEvidence::try_from(record).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::{decode_payload, encode_payload};

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
                evidence_version: crate::batch::EVIDENCE_VERSION,
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
        let bytes = encode_payload(&BatchEvidenceV2::from(&evidence)).unwrap();
        let read = |edit: &dyn Fn(&mut BatchEvidenceV2<'static>)| {
            let mut wire: BatchEvidenceV2<'static> = decode_payload(&bytes).unwrap();
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
                reads: crate::batch::EVIDENCE_VERSION
            }
        );
    }
}
