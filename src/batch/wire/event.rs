//! The `BEVT` payload: one evidence event, and the candidates, rejections, failures and
//! settlements inside it.

use super::Text;
use crate::batch::cache::ActionKey;
use crate::batch::candidate::Candidate;
use crate::batch::candidate::Rejection;
use crate::batch::evidence::event::ClosureEnd;
use crate::batch::evidence::event::ClosureSettlement;
use crate::batch::evidence::event::EvidenceEvent;
use crate::batch::evidence::event::InventoryEntry;
use crate::batch::evidence::event::ReusedClosure;
use crate::batch::evidence::event::ReusedFrom;
use crate::batch::evidence::event::Settlement;
use crate::batch::recovery::IneligibleReason;
use crate::batch::worker::InfrastructureFailure;
use crate::checkpoint::InvalidPayload;
use crate::id::AgentId;
use crate::id::ChannelId;
use crate::id::TaskId;
use crate::id::digest::Digest;
use crate::plan::path::AdmittedPath;
use serde::Deserialize;
use serde::Serialize;
use std::borrow::Cow;
use std::collections::BTreeMap;

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
pub(super) type Refused<'a> = Vec<(Text<'a, TaskId>, IneligibleReasonV1)>;

pub(super) fn refused_of(refused: &[(TaskId, IneligibleReason)]) -> Refused<'_> {
    refused
        .iter()
        .map(|(task, why)| (Cow::Borrowed(task), why.into()))
        .collect()
}

pub(super) fn refused_from(refused: Refused<'_>) -> Vec<(TaskId, IneligibleReason)> {
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

/// One evidence event, format version 3 (version 2 is the same shape without the last
/// variant, version 1 without the last three, so their bytes decode as this record).
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) enum EvidenceEventV3<'a> {
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
    // Added in version 3.
    Reused {
        task: Text<'a, TaskId>,
        key: Digest,
        channel: Text<'a, ChannelId>,
        call: u32,
        closure: Option<(Digest, Digest)>,
        candidate: CandidateV1<'a>,
        digest: Digest,
    },
}

impl<'a> From<&'a EvidenceEvent> for EvidenceEventV3<'a> {
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
            EvidenceEvent::Reused {
                task,
                from,
                candidate,
                digest,
            } => Self::Reused {
                task: B(task),
                key: from.key.digest(),
                channel: B(&from.channel),
                call: from.call,
                closure: from.closure.map(|c| (c.record_digest, c.audit_head)),
                candidate: candidate.into(),
                digest: *digest,
            },
        }
    }
}

impl From<EvidenceEventV3<'_>> for EvidenceEvent {
    fn from(e: EvidenceEventV3<'_>) -> Self {
        match e {
            EvidenceEventV3::Started {
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
            EvidenceEventV3::Reserved {
                task,
                attempt,
                input_digest,
            } => Self::Reserved {
                task: task.into_owned(),
                attempt,
                input_digest,
            },
            EvidenceEventV3::Settled {
                task,
                attempt,
                settlement,
            } => Self::Settled {
                task: task.into_owned(),
                attempt,
                settlement: settlement.into(),
            },
            EvidenceEventV3::Interrupted { task, attempt } => Self::Interrupted {
                task: task.into_owned(),
                attempt,
            },
            EvidenceEventV3::Withdrawn {
                task,
                attempt,
                detail,
            } => Self::Withdrawn {
                task: task.into_owned(),
                attempt,
                detail: detail.into_owned(),
            },
            EvidenceEventV3::Drained { task, blocked_by } => Self::Drained {
                task: task.into_owned(),
                blocked_by: blocked_by.into_owned(),
            },
            EvidenceEventV3::RecoveryConsumed {
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
            EvidenceEventV3::FixDrawn { task, attempt, fix } => Self::FixDrawn {
                task: task.into_owned(),
                attempt,
                fix: fix.into_owned(),
            },
            EvidenceEventV3::ClosureSettled {
                task,
                attempt,
                closure,
            } => Self::ClosureSettled {
                task: task.into_owned(),
                attempt,
                closure: closure.into(),
            },
            EvidenceEventV3::Reused {
                task,
                key,
                channel,
                call,
                closure,
                candidate,
                digest,
            } => Self::Reused {
                task: task.into_owned(),
                from: ReusedFrom::new(
                    ActionKey::from_digest(key),
                    channel.into_owned(),
                    call,
                    closure.map(|(record, head)| ReusedClosure::new(record, head)),
                ),
                candidate: candidate.into(),
                digest,
            },
        }
    }
}

impl EvidenceEventV3<'_> {
    /// The event read from a payload of an older `version`: version 1 has no closure
    /// events, versions 1 and 2 no reused output.
    pub(crate) fn of_version(self, version: u16) -> Result<Self, InvalidPayload> {
        let newer = |event| Err(InvalidPayload::NewerEvent { version, event });
        match self {
            Self::FixDrawn { .. } if version < 2 => newer("fix_drawn"),
            Self::ClosureSettled { .. } if version < 2 => newer("closure_settled"),
            Self::Reused { .. } if version < 3 => newer("reused"),
            old => Ok(old),
        }
    }
}
