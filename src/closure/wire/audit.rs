//! The records of the audit log: loop phases, events, entries and the log.

use super::record::ClosureFailureV1;
use super::step::ExhaustedBoundV1;
use super::step::GovernanceDecisionV1;
use super::step::HaltReasonV1;
use super::step::NextV1;
use super::step::SessionV1;
use super::step::VerdictV1;
use crate::closure::audit::AuditEntry;
use crate::closure::audit::AuditEvent;
use crate::closure::audit::AuditLog;
use crate::closure::audit::LoopPhase;
use crate::id::TaskId;
use crate::id::ValidatorId;
use crate::id::digest::Digest;
use crate::wire::Record;
use crate::wire::Seq;
use serde::Deserialize;
use serde::Serialize;
use std::borrow::Cow;

/// A [`LoopPhase`], by its snake-case name.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, bincode::Encode)]
#[serde(rename_all = "snake_case")]
pub(crate) enum LoopPhaseV1 {
    Governance,
    PreValidate,
    Execute,
    PostValidate,
    MoveNext,
}

impl From<LoopPhase> for LoopPhaseV1 {
    fn from(p: LoopPhase) -> Self {
        match p {
            LoopPhase::Governance => LoopPhaseV1::Governance,
            LoopPhase::PreValidate => LoopPhaseV1::PreValidate,
            LoopPhase::Execute => LoopPhaseV1::Execute,
            LoopPhase::PostValidate => LoopPhaseV1::PostValidate,
            LoopPhase::MoveNext => LoopPhaseV1::MoveNext,
        }
    }
}

impl From<LoopPhaseV1> for LoopPhase {
    fn from(p: LoopPhaseV1) -> Self {
        match p {
            LoopPhaseV1::Governance => LoopPhase::Governance,
            LoopPhaseV1::PreValidate => LoopPhase::PreValidate,
            LoopPhaseV1::Execute => LoopPhase::Execute,
            LoopPhaseV1::PostValidate => LoopPhase::PostValidate,
            LoopPhaseV1::MoveNext => LoopPhase::MoveNext,
        }
    }
}

/// An [`AuditEvent`], by its snake-case variant name (`failed` for a closure failure).
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AuditEventV1<'a> {
    ClosureStarted {
        root_task_ref: Cow<'a, TaskId>,
        session: SessionV1<'a>,
    },
    Governed {
        task_ref: Cow<'a, TaskId>,
        iteration: u32,
        decision: GovernanceDecisionV1<'a>,
        token: Option<Digest>,
    },
    PreValidated {
        task_ref: Cow<'a, TaskId>,
        iteration: u32,
        verdict: VerdictV1<'a>,
    },
    Executed {
        task_ref: Cow<'a, TaskId>,
        iteration: u32,
        output: Digest,
    },
    PostValidated {
        task_ref: Cow<'a, TaskId>,
        iteration: u32,
        verdict: VerdictV1<'a>,
    },
    MovedNext {
        task_ref: Cow<'a, TaskId>,
        iteration: u32,
        next: NextV1,
    },
    SubtaskSpawned {
        parent_ref: Cow<'a, TaskId>,
        task_ref: Cow<'a, TaskId>,
        depth: u32,
        triggering_validators: Seq<'a, ValidatorId, Cow<'a, ValidatorId>>,
    },
    RecoveryResolved {
        root_task_ref: Cow<'a, TaskId>,
        task_ref: Cow<'a, TaskId>,
        depth: u32,
        fix_attempts: u32,
    },
    RecoveryExhausted {
        root_task_ref: Cow<'a, TaskId>,
        task_ref: Cow<'a, TaskId>,
        depth: u32,
        bound: ExhaustedBoundV1,
    },
    RecoveryStalled {
        root_task_ref: Cow<'a, TaskId>,
        task_ref: Cow<'a, TaskId>,
        depth: u32,
    },
    Halted {
        task_ref: Cow<'a, TaskId>,
        iteration: u32,
        reason: HaltReasonV1<'a>,
    },
    Failed {
        task_ref: Cow<'a, TaskId>,
        iteration: u32,
        failure: ClosureFailureV1<'a>,
    },
}

impl<'a> Record<'a, AuditEvent> for AuditEventV1<'a> {
    fn of(e: &'a AuditEvent) -> Self {
        use AuditEventV1 as W;
        let id = Cow::Borrowed;
        match e {
            AuditEvent::ClosureStarted {
                root_task_ref,
                session,
            } => W::ClosureStarted {
                root_task_ref: id(root_task_ref),
                session: SessionV1::of(session),
            },
            AuditEvent::Governed {
                task_ref,
                iteration,
                decision,
                token,
            } => W::Governed {
                task_ref: id(task_ref),
                iteration: *iteration,
                decision: GovernanceDecisionV1::of(decision),
                token: *token,
            },
            AuditEvent::PreValidated {
                task_ref,
                iteration,
                verdict,
            } => W::PreValidated {
                task_ref: id(task_ref),
                iteration: *iteration,
                verdict: VerdictV1::of(verdict),
            },
            AuditEvent::Executed {
                task_ref,
                iteration,
                output,
            } => W::Executed {
                task_ref: id(task_ref),
                iteration: *iteration,
                output: *output,
            },
            AuditEvent::PostValidated {
                task_ref,
                iteration,
                verdict,
            } => W::PostValidated {
                task_ref: id(task_ref),
                iteration: *iteration,
                verdict: VerdictV1::of(verdict),
            },
            AuditEvent::MovedNext {
                task_ref,
                iteration,
                next,
            } => W::MovedNext {
                task_ref: id(task_ref),
                iteration: *iteration,
                next: (*next).into(),
            },
            AuditEvent::SubtaskSpawned {
                parent_ref,
                task_ref,
                depth,
                triggering_validators,
            } => W::SubtaskSpawned {
                parent_ref: id(parent_ref),
                task_ref: id(task_ref),
                depth: *depth,
                triggering_validators: Seq::Borrowed(triggering_validators),
            },
            AuditEvent::RecoveryResolved {
                root_task_ref,
                task_ref,
                depth,
                fix_attempts,
            } => W::RecoveryResolved {
                root_task_ref: id(root_task_ref),
                task_ref: id(task_ref),
                depth: *depth,
                fix_attempts: *fix_attempts,
            },
            AuditEvent::RecoveryExhausted {
                root_task_ref,
                task_ref,
                depth,
                bound,
            } => W::RecoveryExhausted {
                root_task_ref: id(root_task_ref),
                task_ref: id(task_ref),
                depth: *depth,
                bound: (*bound).into(),
            },
            AuditEvent::RecoveryStalled {
                root_task_ref,
                task_ref,
                depth,
            } => W::RecoveryStalled {
                root_task_ref: id(root_task_ref),
                task_ref: id(task_ref),
                depth: *depth,
            },
            AuditEvent::Halted {
                task_ref,
                iteration,
                reason,
            } => W::Halted {
                task_ref: id(task_ref),
                iteration: *iteration,
                reason: HaltReasonV1::of(reason),
            },
            AuditEvent::Failed {
                task_ref,
                iteration,
                failure,
            } => W::Failed {
                task_ref: id(task_ref),
                iteration: *iteration,
                failure: ClosureFailureV1::of(failure),
            },
        }
    }
}

impl From<AuditEventV1<'_>> for AuditEvent {
    fn from(w: AuditEventV1<'_>) -> Self {
        use AuditEventV1 as W;
        match w {
            W::ClosureStarted {
                root_task_ref,
                session,
            } => AuditEvent::ClosureStarted {
                root_task_ref: root_task_ref.into_owned(),
                session: session.into(),
            },
            W::Governed {
                task_ref,
                iteration,
                decision,
                token,
            } => AuditEvent::Governed {
                task_ref: task_ref.into_owned(),
                iteration,
                decision: decision.into(),
                token,
            },
            W::PreValidated {
                task_ref,
                iteration,
                verdict,
            } => AuditEvent::PreValidated {
                task_ref: task_ref.into_owned(),
                iteration,
                verdict: verdict.into(),
            },
            W::Executed {
                task_ref,
                iteration,
                output,
            } => AuditEvent::Executed {
                task_ref: task_ref.into_owned(),
                iteration,
                output,
            },
            W::PostValidated {
                task_ref,
                iteration,
                verdict,
            } => AuditEvent::PostValidated {
                task_ref: task_ref.into_owned(),
                iteration,
                verdict: verdict.into(),
            },
            W::MovedNext {
                task_ref,
                iteration,
                next,
            } => AuditEvent::MovedNext {
                task_ref: task_ref.into_owned(),
                iteration,
                next: next.into(),
            },
            W::SubtaskSpawned {
                parent_ref,
                task_ref,
                depth,
                triggering_validators,
            } => AuditEvent::SubtaskSpawned {
                parent_ref: parent_ref.into_owned(),
                task_ref: task_ref.into_owned(),
                depth,
                triggering_validators: triggering_validators.into_values(Cow::into_owned),
            },
            W::RecoveryResolved {
                root_task_ref,
                task_ref,
                depth,
                fix_attempts,
            } => AuditEvent::RecoveryResolved {
                root_task_ref: root_task_ref.into_owned(),
                task_ref: task_ref.into_owned(),
                depth,
                fix_attempts,
            },
            W::RecoveryExhausted {
                root_task_ref,
                task_ref,
                depth,
                bound,
            } => AuditEvent::RecoveryExhausted {
                root_task_ref: root_task_ref.into_owned(),
                task_ref: task_ref.into_owned(),
                depth,
                bound: bound.into(),
            },
            W::RecoveryStalled {
                root_task_ref,
                task_ref,
                depth,
            } => AuditEvent::RecoveryStalled {
                root_task_ref: root_task_ref.into_owned(),
                task_ref: task_ref.into_owned(),
                depth,
            },
            W::Halted {
                task_ref,
                iteration,
                reason,
            } => AuditEvent::Halted {
                task_ref: task_ref.into_owned(),
                iteration,
                reason: reason.into(),
            },
            W::Failed {
                task_ref,
                iteration,
                failure,
            } => AuditEvent::Failed {
                task_ref: task_ref.into_owned(),
                iteration,
                failure: failure.into(),
            },
        }
    }
}

/// An [`AuditEntry`]: the event, the digest it links to and its own.
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
pub(crate) struct AuditEntryV1<'a> {
    event: AuditEventV1<'a>,
    prev: Digest,
    hash: Digest,
}

impl<'a> Record<'a, AuditEntry> for AuditEntryV1<'a> {
    fn of(e: &'a AuditEntry) -> Self {
        Self {
            event: AuditEventV1::of(&e.event),
            prev: e.prev,
            hash: e.hash,
        }
    }
}

impl From<AuditEntryV1<'_>> for AuditEntry {
    fn from(w: AuditEntryV1<'_>) -> Self {
        AuditEntry {
            event: w.event.into(),
            prev: w.prev,
            hash: w.hash,
        }
    }
}

/// An [`AuditLog`]: its entries and head, as written (reading does not verify the chain;
/// whoever restores from it does).
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
pub(crate) struct AuditLogV1<'a> {
    entries: Seq<'a, AuditEntry, AuditEntryV1<'a>>,
    head: Digest,
}

impl<'a> Record<'a, AuditLog> for AuditLogV1<'a> {
    fn of(log: &'a AuditLog) -> Self {
        Self {
            entries: Seq::Borrowed(&log.entries),
            head: log.head,
        }
    }
}

impl From<AuditLogV1<'_>> for AuditLog {
    fn from(w: AuditLogV1<'_>) -> Self {
        AuditLog {
            entries: w.entries.into_values(AuditEntry::from),
            head: w.head,
        }
    }
}
