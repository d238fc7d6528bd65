//! The `CLSR` payload: a closure record, its attempts, steps, failures and outcome.

use super::audit::AuditLogV1;
use super::audit::LoopPhaseV1;
use super::state::RecoveryPolicyV1;
use super::step::ExecutionOutputV1;
use super::step::GovernanceDecisionV1;
use super::step::HaltReasonV1;
use super::step::NextV1;
use super::step::SessionV1;
use super::step::VerdictV1;
use super::task::TaskV2;
use crate::closure::audit::AuditLog;
use crate::closure::record::ClosureFailure;
use crate::closure::record::ClosureOutcome;
use crate::closure::record::ClosureRecord;
use crate::closure::record::StepRecord;
use crate::closure::record::TaskAttempt;
use crate::closure::step::ExecutionOutput;
use crate::closure::step::Next;
use crate::closure::task::Task;
use crate::closure::verdict::Verdict;
use crate::id::TaskId;
use crate::wire::Invalid;
use crate::wire::Record;
use crate::wire::Seq;
use serde::Deserialize;
use serde::Serialize;
use std::borrow::Cow;

/// A [`ClosureFailure`].
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ClosureFailureV1<'a> {
    Agent {
        phase: LoopPhaseV1,
        message: Cow<'a, str>,
    },
    FixId {
        depth: u32,
        message: Cow<'a, str>,
    },
}

impl<'a> Record<'a, ClosureFailure> for ClosureFailureV1<'a> {
    fn of(f: &'a ClosureFailure) -> Self {
        match f {
            ClosureFailure::Agent { phase, message } => ClosureFailureV1::Agent {
                phase: (*phase).into(),
                message: Cow::Borrowed(message),
            },
            ClosureFailure::FixId { depth, message } => ClosureFailureV1::FixId {
                depth: *depth,
                message: Cow::Borrowed(message),
            },
        }
    }
}

impl From<ClosureFailureV1<'_>> for ClosureFailure {
    fn from(w: ClosureFailureV1<'_>) -> Self {
        match w {
            ClosureFailureV1::Agent { phase, message } => ClosureFailure::Agent {
                phase: phase.into(),
                message: message.into_owned(),
            },
            ClosureFailureV1::FixId { depth, message } => ClosureFailure::FixId {
                depth,
                message: message.into_owned(),
            },
        }
    }
}

/// A [`ClosureOutcome`].
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ClosureOutcomeV1<'a> {
    Resolved {
        task_ref: Cow<'a, TaskId>,
        depth: u32,
    },
    Halted {
        task_ref: Cow<'a, TaskId>,
        depth: u32,
        iteration: u32,
        reason: HaltReasonV1<'a>,
    },
    Failed {
        task_ref: Cow<'a, TaskId>,
        depth: u32,
        iteration: u32,
        failure: ClosureFailureV1<'a>,
    },
}

impl<'a> Record<'a, ClosureOutcome> for ClosureOutcomeV1<'a> {
    fn of(o: &'a ClosureOutcome) -> Self {
        match o {
            ClosureOutcome::Resolved { task_ref, depth } => ClosureOutcomeV1::Resolved {
                task_ref: Cow::Borrowed(task_ref),
                depth: *depth,
            },
            ClosureOutcome::Halted {
                task_ref,
                depth,
                iteration,
                reason,
            } => ClosureOutcomeV1::Halted {
                task_ref: Cow::Borrowed(task_ref),
                depth: *depth,
                iteration: *iteration,
                reason: HaltReasonV1::of(reason),
            },
            ClosureOutcome::Failed {
                task_ref,
                depth,
                iteration,
                failure,
            } => ClosureOutcomeV1::Failed {
                task_ref: Cow::Borrowed(task_ref),
                depth: *depth,
                iteration: *iteration,
                failure: ClosureFailureV1::of(failure),
            },
        }
    }
}

impl From<ClosureOutcomeV1<'_>> for ClosureOutcome {
    fn from(w: ClosureOutcomeV1<'_>) -> Self {
        match w {
            ClosureOutcomeV1::Resolved { task_ref, depth } => ClosureOutcome::Resolved {
                task_ref: task_ref.into_owned(),
                depth,
            },
            ClosureOutcomeV1::Halted {
                task_ref,
                depth,
                iteration,
                reason,
            } => ClosureOutcome::Halted {
                task_ref: task_ref.into_owned(),
                depth,
                iteration,
                reason: reason.into(),
            },
            ClosureOutcomeV1::Failed {
                task_ref,
                depth,
                iteration,
                failure,
            } => ClosureOutcome::Failed {
                task_ref: task_ref.into_owned(),
                depth,
                iteration,
                failure: failure.into(),
            },
        }
    }
}

/// A [`StepRecord`]: one iteration as far as it got.
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
pub(crate) struct StepRecordV1<'a> {
    iteration: u32,
    governance: GovernanceDecisionV1<'a>,
    pre_verdict: Option<VerdictV1<'a>>,
    output: Option<ExecutionOutputV1<'a>>,
    post_verdict: Option<VerdictV1<'a>>,
    next: Option<NextV1>,
}

impl<'a> Record<'a, StepRecord> for StepRecordV1<'a> {
    fn of(s: &'a StepRecord) -> Self {
        Self {
            iteration: s.iteration,
            governance: GovernanceDecisionV1::of(&s.governance),
            pre_verdict: s.pre_verdict.as_ref().map(VerdictV1::of),
            output: s.output.as_ref().map(ExecutionOutputV1::of),
            post_verdict: s.post_verdict.as_ref().map(VerdictV1::of),
            next: s.next.map(NextV1::from),
        }
    }
}

impl From<StepRecordV1<'_>> for StepRecord {
    fn from(w: StepRecordV1<'_>) -> Self {
        StepRecord {
            iteration: w.iteration,
            governance: w.governance.into(),
            pre_verdict: w.pre_verdict.map(Verdict::from),
            output: w.output.map(ExecutionOutput::from),
            post_verdict: w.post_verdict.map(Verdict::from),
            next: w.next.map(Next::from),
        }
    }
}

/// A [`TaskAttempt`]: one task of the tree (at task format version 2) and its iterations.
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
pub(crate) struct TaskAttemptV1<'a> {
    task: TaskV2<'a>,
    steps: Seq<'a, StepRecord, StepRecordV1<'a>>,
}

impl<'a> Record<'a, TaskAttempt> for TaskAttemptV1<'a> {
    fn of(a: &'a TaskAttempt) -> Self {
        Self {
            task: TaskV2::of(&a.task),
            steps: Seq::Borrowed(&a.steps),
        }
    }
}

impl TryFrom<TaskAttemptV1<'_>> for TaskAttempt {
    type Error = Invalid;

    fn try_from(w: TaskAttemptV1<'_>) -> Result<Self, Invalid> {
        Ok(TaskAttempt {
            task: Task::try_from(w.task)?,
            steps: w.steps.into_values(StepRecord::from),
        })
    }
}

/// A [`ClosureRecord`] (`CLSR` format version 1, and the JSON of a closure log line).
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
pub(crate) struct ClosureRecordV1<'a> {
    root_task_ref: Cow<'a, TaskId>,
    session: SessionV1<'a>,
    policy: RecoveryPolicyV1,
    outcome: ClosureOutcomeV1<'a>,
    attempts: Seq<'a, TaskAttempt, TaskAttemptV1<'a>>,
    pub(super) fix_attempts: u32,
    audit: AuditLogV1<'a>,
}

impl<'a> Record<'a, ClosureRecord> for ClosureRecordV1<'a> {
    fn of(r: &'a ClosureRecord) -> Self {
        Self {
            root_task_ref: Cow::Borrowed(&r.root_task_ref),
            session: SessionV1::of(&r.session),
            policy: RecoveryPolicyV1::of(&r.policy),
            outcome: ClosureOutcomeV1::of(&r.outcome),
            attempts: Seq::Borrowed(&r.attempts),
            fix_attempts: r.fix_attempts,
            audit: AuditLogV1::of(&r.audit),
        }
    }
}

impl TryFrom<ClosureRecordV1<'_>> for ClosureRecord {
    type Error = Invalid;

    /// Re-verifies the audit chain and that the record holds one task per fix plus the root.
    fn try_from(w: ClosureRecordV1<'_>) -> Result<Self, Invalid> {
        let root_task_ref = w.root_task_ref.into_owned();
        let audit = AuditLog::from(w.audit);
        audit
            .verify()
            .map_err(|e| format!("closure record of {root_task_ref}: {e}"))?;
        let attempts = w.attempts.try_into_values(TaskAttempt::try_from)?;
        if u64::try_from(attempts.len()).ok() != Some(u64::from(w.fix_attempts) + 1) {
            return Err(format!(
                "closure record of {root_task_ref} holds {} tasks for {} fix attempts",
                attempts.len(),
                w.fix_attempts
            ));
        }
        Ok(ClosureRecord {
            root_task_ref,
            session: w.session.into(),
            policy: w.policy.try_into()?,
            outcome: w.outcome.into(),
            attempts,
            fix_attempts: w.fix_attempts,
            audit,
            json: Default::default(),
        })
    }
}
