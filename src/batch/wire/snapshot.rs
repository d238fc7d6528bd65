//! The `EVID` payload: a folded evidence snapshot, a journal's compaction.

use super::Text;
use super::event::CandidateV1;
use super::event::ClosureSettlementV1;
use super::event::InfrastructureFailureV1;
use super::event::Refused;
use super::event::RejectionV1;
use super::event::refused_from;
use super::event::refused_of;
use crate::batch::cache::ActionKey;
use crate::batch::candidate::AcceptedOutput;
use crate::batch::evidence::BatchEvidence;
use crate::batch::evidence::ClosureCall;
use crate::batch::evidence::EVIDENCE_VERSION;
use crate::batch::evidence::FAILURE_HISTORY_LIMIT;
use crate::batch::evidence::FailureKind;
use crate::batch::evidence::FailureNote;
use crate::batch::evidence::RecoveryRecord;
use crate::batch::evidence::RejectedAttempt;
use crate::batch::evidence::ReusedClosure;
use crate::batch::evidence::ReusedFrom;
use crate::batch::evidence::TaskEvidence;
use crate::batch::evidence::index_of;
use crate::checkpoint::InvalidPayload;
use crate::id::AgentId;
use crate::id::ChannelId;
use crate::id::TaskId;
use crate::id::digest::Digest;
use serde::Deserialize;
use serde::Serialize;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// An accepted output: the candidate and the digest it was accepted under.
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) struct AcceptedOutputV1<'a> {
    pub(super) candidate: CandidateV1<'a>,
    pub(super) digest: Digest,
}

/// A refused candidate with its exact rejection.
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) struct RejectedAttemptV1<'a> {
    pub(super) attempt: u32,
    pub(super) input_digest: Digest,
    pub(super) candidate: CandidateV1<'a>,
    pub(super) rejection: RejectionV1<'a>,
}

/// Everything a snapshot knows about one task.
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) struct TaskEvidenceV1<'a> {
    pub(super) owner: Text<'a, AgentId>,
    pub(super) budget: u32,
    pub(super) calls: u32,
    pub(super) in_flight: Option<(u32, Digest)>,
    pub(super) last_input_digest: Option<Digest>,
    pub(super) rejections: Vec<RejectedAttemptV1<'a>>,
    pub(super) accepted: Option<AcceptedOutputV1<'a>>,
    pub(super) infrastructure: Option<(u32, InfrastructureFailureV1<'a>)>,
    pub(super) interrupted: Cow<'a, [u32]>,
    pub(super) blocked_by: Option<Text<'a, TaskId>>,
    pub(super) correction_granted: bool,
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
            infrastructure: t.infrastructure.as_deref().map(|(n, f)| (*n, f.into())),
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
            infrastructure: self.infrastructure.map(|(n, f)| Box::new((n, f.into()))),
            interrupted: self.interrupted.into_owned(),
            blocked_by: self.blocked_by.map(Cow::into_owned),
            correction_granted: self.correction_granted,
            reused: None,
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
    pub(super) task: Text<'a, TaskId>,
    pub(super) attempt: u32,
    pub(super) kind: FailureKindV1,
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
    pub(super) request: Digest,
    pub(super) granted: Cow<'a, [TaskId]>,
    pub(super) released: Cow<'a, [TaskId]>,
    pub(super) refused: Refused<'a>,
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
    pub(super) task: Text<'a, TaskId>,
    pub(super) attempt: u32,
    pub(super) fixes_drawn: u32,
    pub(super) settled: Option<ClosureSettlementV1<'a>>,
    pub(super) withdrawn: bool,
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

/// Where a reused output was accepted, as a snapshot holds it.
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) struct ReusedV1<'a> {
    pub(super) task: Text<'a, TaskId>,
    pub(super) key: Digest,
    pub(super) channel: Text<'a, ChannelId>,
    pub(super) call: u32,
    pub(super) closure: Option<(Digest, Digest)>,
}

/// A folded evidence snapshot, format version 3 (version 2 with the reused outputs).
#[derive(Serialize, Deserialize, bincode::Encode)]
pub(crate) struct BatchEvidenceV3<'a> {
    pub(super) channel: Text<'a, ChannelId>,
    pub(super) plan_digest: Digest,
    pub(super) evidence_version: u32,
    pub(super) inputs: Cow<'a, BTreeMap<String, Digest>>,
    pub(super) recovery: bool,
    pub(super) order: Vec<Text<'a, TaskId>>,
    pub(super) tasks: Vec<TaskEvidenceV1<'a>>,
    pub(super) recoveries: Vec<RecoveryRecordV1<'a>>,
    pub(super) failure_history: Vec<FailureNoteV1<'a>>,
    pub(super) events: u64,
    pub(super) closures: Vec<ClosureCallV2<'a>>,
    // A JSON copy written before outputs were reused has none.
    #[serde(default)]
    pub(super) reused: Vec<ReusedV1<'a>>,
}

/// A folded evidence snapshot of format version 2 (the closures of the calls), written
/// before outputs were reused.
#[derive(Deserialize)]
pub(crate) struct BatchEvidenceV2<'a> {
    pub(super) channel: Text<'a, ChannelId>,
    pub(super) plan_digest: Digest,
    pub(super) evidence_version: u32,
    pub(super) inputs: Cow<'a, BTreeMap<String, Digest>>,
    pub(super) recovery: bool,
    pub(super) order: Vec<Text<'a, TaskId>>,
    pub(super) tasks: Vec<TaskEvidenceV1<'a>>,
    pub(super) recoveries: Vec<RecoveryRecordV1<'a>>,
    pub(super) failure_history: Vec<FailureNoteV1<'a>>,
    pub(super) events: u64,
    pub(super) closures: Vec<ClosureCallV2<'a>>,
}

/// A folded evidence snapshot of format version 1, written before closures were evidence.
#[derive(Deserialize)]
pub(crate) struct BatchEvidenceV1<'a> {
    pub(super) channel: Text<'a, ChannelId>,
    pub(super) plan_digest: Digest,
    pub(super) evidence_version: u32,
    pub(super) inputs: Cow<'a, BTreeMap<String, Digest>>,
    pub(super) recovery: bool,
    pub(super) order: Vec<Text<'a, TaskId>>,
    pub(super) tasks: Vec<TaskEvidenceV1<'a>>,
    pub(super) recoveries: Vec<RecoveryRecordV1<'a>>,
    pub(super) failure_history: Vec<FailureNoteV1<'a>>,
    pub(super) events: u64,
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

impl<'a> From<BatchEvidenceV2<'a>> for BatchEvidenceV3<'a> {
    fn from(r: BatchEvidenceV2<'a>) -> Self {
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
            closures: r.closures,
            reused: Vec::new(),
        }
    }
}

impl<'a> From<&'a BatchEvidence> for BatchEvidenceV3<'a> {
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
            reused: e
                .reused()
                .map(|(task, from)| ReusedV1 {
                    task: Cow::Borrowed(task),
                    key: from.key.digest(),
                    channel: Cow::Borrowed(&from.channel),
                    call: from.call,
                    closure: from.closure.map(|c| (c.record_digest, c.audit_head)),
                })
                .collect(),
        }
    }
}

impl TryFrom<BatchEvidenceV3<'_>> for BatchEvidence {
    type Error = InvalidPayload;

    /// Checks what the snapshot states before trusting it: one evidence set per listed
    /// task, every accepted output matching its digest (the rest is checked as the domain
    /// type rebuilds its index).
    fn try_from(r: BatchEvidenceV3<'_>) -> Result<Self, InvalidPayload> {
        if r.order.len() != r.tasks.len() {
            return Err(InvalidPayload::TaskCount {
                listed: r.order.len() as u64,
                held: r.tasks.len() as u64,
            });
        }
        let order: Arc<[TaskId]> = r.order.into_iter().map(Cow::into_owned).collect();
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
            .or_else(|| r.reused.iter().find_map(|u| unknown("reused", &u.task)))
            .or_else(|| {
                r.failure_history
                    .iter()
                    .find_map(|n| unknown("failure_history", &n.task))
            });
        if let Some(stray) = stray {
            return Err(stray);
        }
        let mut tasks: crate::batch::evidence::Tasks = order
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
        let index = Arc::new(std::sync::OnceLock::from(
            index_of(&order).map_err(|task| InvalidPayload::DuplicateTask { task })?,
        ));
        let closures: Vec<ClosureCall> = r.closures.into_iter().map(Into::into).collect();
        for u in r.reused {
            let from = ReusedFrom::new(
                ActionKey::from_digest(u.key),
                u.channel.into_owned(),
                u.call,
                u.closure
                    .map(|(record, head)| ReusedClosure::new(record, head)),
            );
            let task = u.task.into_owned();
            // The task is known (checked above).
            if let Some(t) = index
                .get()
                .and_then(|i| i.get(&task).copied())
                .and_then(|p| tasks.get_mut(p))
            {
                t.reused = Some(Box::new(from));
            }
        }
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
