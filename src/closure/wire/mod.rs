//! The records of the closure payloads: `CLSR` (a [`ClosureRecord`], also its JSON), `CLST`
//! (a [`ClosureState`]) and `CLDT` (a [`ClosureDelta`]), and every type inside them
//! (sessions, verdicts, steps, attempts, outcomes, the policy, audit entries and events).
//!
//! | payload | version | record | change |
//! |---|---|---|---|
//! | `CLSR` | 1 | [`ClosureRecordV1`] | the closure tree: attempts, steps, audit log, outcome |
//! | `CLST` | 1 | [`ClosureStateV1`] | a running closure, no seal |
//! | | 2 | [`ClosureStateV2`] | the policy and budget snapshot sealed to the audit head |
//! | `CLDT` | 1 | [`ClosureDeltaV1`] | the audit head before the step, its events, the head after it, then the start or an execution's output |
//!
//! Every record borrows from the domain value it is written from ([`Record::of`]); reading
//! one back checks what the domain type guarantees (a task's parent and root, a policy's
//! bounds, a record's audit chain and shape) and names what does not hold.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

mod checkpoint;
pub(crate) mod task;

use crate::closure::audit::{AuditEntry, AuditEvent, AuditLog, LoopPhase};
use crate::closure::phase::{
    ExecutionOutput, ExhaustedBound, GovernanceDecision, HaltReason, Next, RecoverOn, Session,
};
use crate::closure::task::Task;
use crate::closure::verdict::{ValidatorResult, Verdict};
use crate::closure::{
    ClosureDelta, ClosureFailure, ClosureOutcome, ClosureProgress, ClosureRecord, ClosureState,
    NormalizedResult, NormalizedVerdict, Payload, RecoveryPolicy, Start, StateSeal, StepRecord,
    TaskAttempt, VerdictNormalizer,
};
use crate::id::digest::Digest;
use crate::id::{ProjectId, SessionMode, TaskId, ValidatorId};
use crate::wire::{Invalid, Record, Seq};
use task::{SeverityV1, TaskV2};

/// A [`Session`]: mode and project.
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
pub(crate) struct SessionV1<'a> {
    mode: Cow<'a, SessionMode>,
    project: Cow<'a, ProjectId>,
}

impl<'a> Record<'a, Session> for SessionV1<'a> {
    fn of(s: &'a Session) -> Self {
        Self {
            mode: Cow::Borrowed(&s.mode),
            project: Cow::Borrowed(&s.project),
        }
    }
}

impl From<SessionV1<'_>> for Session {
    fn from(w: SessionV1<'_>) -> Self {
        Session {
            mode: w.mode.into_owned(),
            project: w.project.into_owned(),
        }
    }
}

/// A [`GovernanceDecision`]; its variants keep their Rust names.
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
pub(crate) enum GovernanceDecisionV1<'a> {
    Approve,
    Deny { reason: Cow<'a, str> },
}

impl<'a> Record<'a, GovernanceDecision> for GovernanceDecisionV1<'a> {
    fn of(d: &'a GovernanceDecision) -> Self {
        match d {
            GovernanceDecision::Approve => GovernanceDecisionV1::Approve,
            GovernanceDecision::Deny { reason } => GovernanceDecisionV1::Deny {
                reason: Cow::Borrowed(reason),
            },
        }
    }
}

impl From<GovernanceDecisionV1<'_>> for GovernanceDecision {
    fn from(w: GovernanceDecisionV1<'_>) -> Self {
        match w {
            GovernanceDecisionV1::Approve => GovernanceDecision::Approve,
            GovernanceDecisionV1::Deny { reason } => GovernanceDecision::Deny {
                reason: reason.into_owned(),
            },
        }
    }
}

/// A [`ValidatorResult`].
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
pub(crate) struct ValidatorResultV1<'a> {
    validator_id: Cow<'a, ValidatorId>,
    severity: SeverityV1,
    overridable: bool,
    justification: Cow<'a, str>,
}

impl<'a> Record<'a, ValidatorResult> for ValidatorResultV1<'a> {
    fn of(r: &'a ValidatorResult) -> Self {
        Self {
            validator_id: Cow::Borrowed(&r.validator_id),
            severity: r.severity.into(),
            overridable: r.overridable,
            justification: Cow::Borrowed(&r.justification),
        }
    }
}

impl From<ValidatorResultV1<'_>> for ValidatorResult {
    fn from(w: ValidatorResultV1<'_>) -> Self {
        ValidatorResult {
            validator_id: w.validator_id.into_owned(),
            severity: w.severity.into(),
            overridable: w.overridable,
            justification: w.justification.into_owned(),
        }
    }
}

/// A [`Verdict`]: the sequence of its results.
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
#[serde(transparent)]
pub(crate) struct VerdictV1<'a>(Seq<'a, ValidatorResult, ValidatorResultV1<'a>>);

impl<'a> Record<'a, Verdict> for VerdictV1<'a> {
    fn of(v: &'a Verdict) -> Self {
        Self(Seq::Borrowed(v.results()))
    }
}

impl From<VerdictV1<'_>> for Verdict {
    /// Restores the canonical order, so an edited record cannot break equality.
    fn from(w: VerdictV1<'_>) -> Self {
        Verdict::new(w.0.into_values(ValidatorResult::from))
    }
}

/// An [`ExecutionOutput`].
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
pub(crate) struct ExecutionOutputV1<'a> {
    text: Cow<'a, str>,
}

impl<'a> Record<'a, ExecutionOutput> for ExecutionOutputV1<'a> {
    fn of(o: &'a ExecutionOutput) -> Self {
        Self {
            text: Cow::Borrowed(&o.text),
        }
    }
}

impl From<ExecutionOutputV1<'_>> for ExecutionOutput {
    fn from(w: ExecutionOutputV1<'_>) -> Self {
        ExecutionOutput {
            text: w.text.into_owned(),
        }
    }
}

/// A [`Next`].
#[derive(Debug, Clone, Copy, Serialize, Deserialize, bincode::Encode)]
#[serde(rename_all = "snake_case")]
pub(crate) enum NextV1 {
    Complete,
    Continue,
}

impl From<Next> for NextV1 {
    fn from(n: Next) -> Self {
        match n {
            Next::Complete => NextV1::Complete,
            Next::Continue => NextV1::Continue,
        }
    }
}

impl From<NextV1> for Next {
    fn from(n: NextV1) -> Self {
        match n {
            NextV1::Complete => Next::Complete,
            NextV1::Continue => Next::Continue,
        }
    }
}

/// An [`ExhaustedBound`].
#[derive(Debug, Clone, Copy, Serialize, Deserialize, bincode::Encode)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ExhaustedBoundV1 {
    Depth { max: u32 },
    FixBudget { max: u32 },
}

impl From<ExhaustedBound> for ExhaustedBoundV1 {
    fn from(b: ExhaustedBound) -> Self {
        match b {
            ExhaustedBound::Depth { max } => ExhaustedBoundV1::Depth { max },
            ExhaustedBound::FixBudget { max } => ExhaustedBoundV1::FixBudget { max },
        }
    }
}

impl From<ExhaustedBoundV1> for ExhaustedBound {
    fn from(b: ExhaustedBoundV1) -> Self {
        match b {
            ExhaustedBoundV1::Depth { max } => ExhaustedBound::Depth { max },
            ExhaustedBoundV1::FixBudget { max } => ExhaustedBound::FixBudget { max },
        }
    }
}

/// A [`HaltReason`].
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
#[serde(rename_all = "snake_case")]
pub(crate) enum HaltReasonV1<'a> {
    GovernanceDenied {
        reason: Cow<'a, str>,
    },
    PreExecuteRejected {
        verdict: VerdictV1<'a>,
    },
    NonOverridableBlocker {
        verdict: VerdictV1<'a>,
    },
    WarningWithheld {
        verdict: VerdictV1<'a>,
    },
    IterationCap {
        cap: u32,
    },
    RecoveryExhausted {
        bound: ExhaustedBoundV1,
        verdict: VerdictV1<'a>,
    },
    RecoveryStalled {
        verdict: VerdictV1<'a>,
    },
}

impl<'a> Record<'a, HaltReason> for HaltReasonV1<'a> {
    fn of(r: &'a HaltReason) -> Self {
        use HaltReasonV1 as W;
        match r {
            HaltReason::GovernanceDenied { reason } => W::GovernanceDenied {
                reason: Cow::Borrowed(reason),
            },
            HaltReason::PreExecuteRejected { verdict } => W::PreExecuteRejected {
                verdict: VerdictV1::of(verdict),
            },
            HaltReason::NonOverridableBlocker { verdict } => W::NonOverridableBlocker {
                verdict: VerdictV1::of(verdict),
            },
            HaltReason::WarningWithheld { verdict } => W::WarningWithheld {
                verdict: VerdictV1::of(verdict),
            },
            HaltReason::IterationCap { cap } => W::IterationCap { cap: *cap },
            HaltReason::RecoveryExhausted { bound, verdict } => W::RecoveryExhausted {
                bound: (*bound).into(),
                verdict: VerdictV1::of(verdict),
            },
            HaltReason::RecoveryStalled { verdict } => W::RecoveryStalled {
                verdict: VerdictV1::of(verdict),
            },
        }
    }
}

impl From<HaltReasonV1<'_>> for HaltReason {
    fn from(w: HaltReasonV1<'_>) -> Self {
        use HaltReasonV1 as W;
        match w {
            W::GovernanceDenied { reason } => HaltReason::GovernanceDenied {
                reason: reason.into_owned(),
            },
            W::PreExecuteRejected { verdict } => HaltReason::PreExecuteRejected {
                verdict: verdict.into(),
            },
            W::NonOverridableBlocker { verdict } => HaltReason::NonOverridableBlocker {
                verdict: verdict.into(),
            },
            W::WarningWithheld { verdict } => HaltReason::WarningWithheld {
                verdict: verdict.into(),
            },
            W::IterationCap { cap } => HaltReason::IterationCap { cap },
            W::RecoveryExhausted { bound, verdict } => HaltReason::RecoveryExhausted {
                bound: bound.into(),
                verdict: verdict.into(),
            },
            W::RecoveryStalled { verdict } => HaltReason::RecoveryStalled {
                verdict: verdict.into(),
            },
        }
    }
}

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

/// A [`RecoverOn`].
#[derive(Debug, Clone, Copy, Serialize, Deserialize, bincode::Encode)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RecoverOnV1 {
    Blockers,
    BlockersAndWarnings,
}

/// A [`VerdictNormalizer`]: what it masks.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, bincode::Encode)]
pub(crate) struct VerdictNormalizerV1 {
    masking: MaskingV1,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, bincode::Encode)]
#[serde(rename_all = "snake_case")]
enum MaskingV1 {
    Noise,
    Exact,
}

/// A [`RecoveryPolicy`]: its bounds, what is recovered and the normaliser.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, bincode::Encode)]
pub(crate) struct RecoveryPolicyV1 {
    max_recovery_depth: u32,
    max_total_fix_attempts: u32,
    max_inner_iterations: u32,
    recover_on: RecoverOnV1,
    normalizer: VerdictNormalizerV1,
}

impl Record<'_, RecoveryPolicy> for RecoveryPolicyV1 {
    fn of(p: &RecoveryPolicy) -> Self {
        Self {
            max_recovery_depth: p.max_recovery_depth(),
            max_total_fix_attempts: p.max_total_fix_attempts(),
            max_inner_iterations: p.max_inner_iterations().get(),
            recover_on: match p.recover_on() {
                RecoverOn::Blockers => RecoverOnV1::Blockers,
                RecoverOn::BlockersAndWarnings => RecoverOnV1::BlockersAndWarnings,
            },
            normalizer: VerdictNormalizerV1 {
                masking: match p.normalizer().is_exact() {
                    true => MaskingV1::Exact,
                    false => MaskingV1::Noise,
                },
            },
        }
    }
}

impl TryFrom<RecoveryPolicyV1> for RecoveryPolicy {
    type Error = Invalid;

    /// Builds the policy through its builder, so a record out of bounds is refused.
    fn try_from(w: RecoveryPolicyV1) -> Result<Self, Invalid> {
        RecoveryPolicy::builder()
            .max_recovery_depth(w.max_recovery_depth)
            .max_total_fix_attempts(w.max_total_fix_attempts)
            .max_inner_iterations(w.max_inner_iterations)
            .recover_on(match w.recover_on {
                RecoverOnV1::Blockers => RecoverOn::Blockers,
                RecoverOnV1::BlockersAndWarnings => RecoverOn::BlockersAndWarnings,
            })
            .normalizer(match w.normalizer.masking {
                MaskingV1::Exact => VerdictNormalizer::exact(),
                MaskingV1::Noise => VerdictNormalizer::default(),
            })
            .build()
            .map_err(|e| e.to_string())
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

/// A [`ClosureRecord`] (`CLSR` format version 1, and the JSON of a closure log line).
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
pub(crate) struct ClosureRecordV1<'a> {
    root_task_ref: Cow<'a, TaskId>,
    session: SessionV1<'a>,
    policy: RecoveryPolicyV1,
    outcome: ClosureOutcomeV1<'a>,
    attempts: Seq<'a, TaskAttempt, TaskAttemptV1<'a>>,
    fix_attempts: u32,
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
        })
    }
}

/// A [`NormalizedResult`].
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
pub(crate) struct NormalizedResultV1<'a> {
    validator_id: Cow<'a, ValidatorId>,
    severity: SeverityV1,
    justification: Cow<'a, str>,
}

impl<'a> Record<'a, NormalizedResult> for NormalizedResultV1<'a> {
    fn of(r: &'a NormalizedResult) -> Self {
        Self {
            validator_id: Cow::Borrowed(&r.validator_id),
            severity: r.severity.into(),
            justification: Cow::Borrowed(&r.justification),
        }
    }
}

impl From<NormalizedResultV1<'_>> for NormalizedResult {
    fn from(w: NormalizedResultV1<'_>) -> Self {
        NormalizedResult {
            validator_id: w.validator_id.into_owned(),
            severity: w.severity.into(),
            justification: w.justification.into_owned(),
        }
    }
}

/// A [`NormalizedVerdict`]: the sequence of its results.
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
#[serde(transparent)]
pub(crate) struct NormalizedVerdictV1<'a>(Seq<'a, NormalizedResult, NormalizedResultV1<'a>>);

impl<'a> Record<'a, NormalizedVerdict> for NormalizedVerdictV1<'a> {
    fn of(v: &'a NormalizedVerdict) -> Self {
        Self(Seq::Borrowed(v.results()))
    }
}

impl From<NormalizedVerdictV1<'_>> for NormalizedVerdict {
    fn from(w: NormalizedVerdictV1<'_>) -> Self {
        NormalizedVerdict::from(w.0.into_values(NormalizedResult::from))
    }
}

/// A [`StateSeal`]: one digest per sealed field.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, bincode::Encode)]
pub(crate) struct StateSealV1 {
    policy: Digest,
    budget_max: Digest,
    budget_used: Digest,
}

impl Record<'_, StateSeal> for StateSealV1 {
    fn of(s: &StateSeal) -> Self {
        Self {
            policy: s.policy,
            budget_max: s.budget_max,
            budget_used: s.budget_used,
        }
    }
}

impl From<StateSealV1> for StateSeal {
    fn from(w: StateSealV1) -> Self {
        StateSeal {
            policy: w.policy,
            budget_max: w.budget_max,
            budget_used: w.budget_used,
        }
    }
}

/// A [`ClosureProgress`] as `CLST` version 2 writes it (with the seal).
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
pub(crate) struct ClosureProgressV2<'a> {
    policy: RecoveryPolicyV1,
    session: SessionV1<'a>,
    budget_max: u32,
    budget_used: u32,
    fix_attempts: u32,
    previous: Option<NormalizedVerdictV1<'a>>,
    done: Seq<'a, TaskAttempt, TaskAttemptV1<'a>>,
    current: TaskAttemptV1<'a>,
    audit: AuditLogV1<'a>,
    seal: StateSealV1,
}

impl<'a> Record<'a, ClosureProgress> for ClosureProgressV2<'a> {
    fn of(p: &'a ClosureProgress) -> Self {
        Self {
            policy: RecoveryPolicyV1::of(&p.policy),
            session: SessionV1::of(&p.session),
            budget_max: p.budget_max,
            budget_used: p.budget_used,
            fix_attempts: p.fix_attempts,
            previous: p.previous.as_ref().map(NormalizedVerdictV1::of),
            done: Seq::Borrowed(&p.done),
            current: TaskAttemptV1::of(&p.current),
            audit: AuditLogV1::of(&p.audit),
            seal: StateSealV1::of(&p.seal),
        }
    }
}

impl TryFrom<ClosureProgressV2<'_>> for ClosureProgress {
    type Error = Invalid;

    fn try_from(w: ClosureProgressV2<'_>) -> Result<Self, Invalid> {
        Ok(ClosureProgress {
            policy: w.policy.try_into()?,
            session: w.session.into(),
            budget_max: w.budget_max,
            budget_used: w.budget_used,
            fix_attempts: w.fix_attempts,
            previous: w.previous.map(NormalizedVerdict::from),
            done: w.done.try_into_values(TaskAttempt::try_from)?,
            current: w.current.try_into()?,
            audit: w.audit.into(),
            seal: w.seal.into(),
        })
    }
}

/// A [`ClosureProgress`] as `CLST` version 1 wrote it, before the seal.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ClosureProgressV1<'a> {
    policy: RecoveryPolicyV1,
    session: SessionV1<'a>,
    budget_max: u32,
    budget_used: u32,
    fix_attempts: u32,
    previous: Option<NormalizedVerdictV1<'a>>,
    done: Seq<'a, TaskAttempt, TaskAttemptV1<'a>>,
    current: TaskAttemptV1<'a>,
    audit: AuditLogV1<'a>,
}

impl TryFrom<ClosureProgressV1<'_>> for ClosureProgress {
    type Error = Invalid;

    /// Version 1 carried no seal, so its policy and budget are taken as written and sealed
    /// now; its outputs are still checked against the audit log on restore.
    fn try_from(w: ClosureProgressV1<'_>) -> Result<Self, Invalid> {
        let policy: RecoveryPolicy = w.policy.try_into()?;
        let audit = AuditLog::from(w.audit);
        Ok(ClosureProgress {
            seal: StateSeal::of(audit.head(), &policy, w.budget_max, w.budget_used),
            policy,
            session: w.session.into(),
            budget_max: w.budget_max,
            budget_used: w.budget_used,
            fix_attempts: w.fix_attempts,
            previous: w.previous.map(NormalizedVerdict::from),
            done: w.done.try_into_values(TaskAttempt::try_from)?,
            current: w.current.try_into()?,
            audit,
        })
    }
}

/// A [`ClosureState`] (`CLST` format version 2): the phase due, by its snake-case name.
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ClosureStateV2<'a> {
    Governance(ClosureProgressV2<'a>),
    PreValidate(ClosureProgressV2<'a>),
    Execute(ClosureProgressV2<'a>),
    PostValidate(ClosureProgressV2<'a>),
    MoveNext(ClosureProgressV2<'a>),
    Done(Box<ClosureRecordV1<'a>>),
}

impl<'a> Record<'a, ClosureState> for ClosureStateV2<'a> {
    fn of(s: &'a ClosureState) -> Self {
        let p = ClosureProgressV2::of;
        match s {
            ClosureState::Governance(x) => ClosureStateV2::Governance(p(x)),
            ClosureState::PreValidate(x) => ClosureStateV2::PreValidate(p(x)),
            ClosureState::Execute(x) => ClosureStateV2::Execute(p(x)),
            ClosureState::PostValidate(x) => ClosureStateV2::PostValidate(p(x)),
            ClosureState::MoveNext(x) => ClosureStateV2::MoveNext(p(x)),
            ClosureState::Done(r) => ClosureStateV2::Done(Box::new(ClosureRecordV1::of(r))),
        }
    }
}

impl TryFrom<ClosureStateV2<'_>> for ClosureState {
    type Error = Invalid;

    fn try_from(w: ClosureStateV2<'_>) -> Result<Self, Invalid> {
        Ok(match w {
            ClosureStateV2::Governance(p) => ClosureState::Governance(p.try_into()?),
            ClosureStateV2::PreValidate(p) => ClosureState::PreValidate(p.try_into()?),
            ClosureStateV2::Execute(p) => ClosureState::Execute(p.try_into()?),
            ClosureStateV2::PostValidate(p) => ClosureState::PostValidate(p.try_into()?),
            ClosureStateV2::MoveNext(p) => ClosureState::MoveNext(p.try_into()?),
            ClosureStateV2::Done(r) => ClosureState::Done(Box::new((*r).try_into()?)),
        })
    }
}

/// A [`ClosureState`] as `CLST` format version 1 wrote it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ClosureStateV1<'a> {
    Governance(ClosureProgressV1<'a>),
    PreValidate(ClosureProgressV1<'a>),
    Execute(ClosureProgressV1<'a>),
    PostValidate(ClosureProgressV1<'a>),
    MoveNext(ClosureProgressV1<'a>),
    Done(Box<ClosureRecordV1<'a>>),
}

impl TryFrom<ClosureStateV1<'_>> for ClosureState {
    type Error = Invalid;

    fn try_from(w: ClosureStateV1<'_>) -> Result<Self, Invalid> {
        Ok(match w {
            ClosureStateV1::Governance(p) => ClosureState::Governance(p.try_into()?),
            ClosureStateV1::PreValidate(p) => ClosureState::PreValidate(p.try_into()?),
            ClosureStateV1::Execute(p) => ClosureState::Execute(p.try_into()?),
            ClosureStateV1::PostValidate(p) => ClosureState::PostValidate(p.try_into()?),
            ClosureStateV1::MoveNext(p) => ClosureState::MoveNext(p.try_into()?),
            ClosureStateV1::Done(r) => ClosureState::Done(Box::new((*r).try_into()?)),
        })
    }
}

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
enum PayloadV1<'a> {
    None,
    Start(Box<StartV1<'a>>),
    Output { text: Cow<'a, str> },
}

/// The start of a closure: its root task, policy, fix-budget snapshot and their seal.
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
struct StartV1<'a> {
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
struct StepEvents<'a>(&'a [AuditEntry]);

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
struct DigestBytes(Digest);

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

/// Serde for the domain values a caller persists whole: each is its current record's form,
/// so the format never follows a refactor of the domain type.
macro_rules! serde_through {
    ($($domain:ty => $record:ident),* $(,)?) => {$(
        impl Serialize for $domain {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                $record::of(self).serialize(s)
            }
        }

        impl<'de> Deserialize<'de> for $domain {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                <$domain>::try_from($record::deserialize(d)?).map_err(serde::de::Error::custom)
            }
        }
    )*};
}

serde_through!(
    ClosureRecord => ClosureRecordV1,
    ClosureState => ClosureStateV2,
    ClosureDelta => ClosureDeltaV1,
    AuditLog => AuditLogV1,
);

impl Serialize for AuditEvent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        AuditEventV1::of(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for AuditEvent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        AuditEventV1::deserialize(d).map(AuditEvent::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A verdict read back is in canonical order, however the record ordered its results,
    /// so a hand-edited record cannot break equality.
    #[test]
    fn a_verdict_read_back_is_in_canonical_order() {
        let json = r#"[{"validator_id":"z","severity":"info","overridable":true,"justification":""},
                      {"validator_id":"a","severity":"info","overridable":true,"justification":""}]"#;
        let v = Verdict::from(serde_json::from_str::<VerdictV1<'_>>(json).unwrap());
        assert_eq!(v.results()[0].validator_id.as_str(), "a");
    }

    fn resolved_record() -> ClosureRecord {
        use crate::closure::Closure;
        let task = Task::new(
            TaskId::new("x").unwrap(),
            crate::closure::task::Spec::new("intent"),
        );
        let session = Session::new("build", "p").unwrap();
        let mut closure = Closure::start(task, session, RecoveryPolicy::default());
        loop {
            closure = match closure {
                Closure::Governance(due) => due.feed(GovernanceDecision::Approve),
                Closure::PreValidate(due) => due.feed(Verdict::clean()),
                Closure::Execute(due) => due.feed(ExecutionOutput::new("done")),
                Closure::PostValidate(due) => due.feed(Verdict::clean()),
                Closure::MoveNext(due) => due.feed(Next::Complete),
                Closure::Done(record) => return *record,
            };
        }
    }

    /// A record that decodes but does not hold together is refused as invalid, naming
    /// what is wrong, whether read from a checkpoint or from JSON.
    #[test]
    fn a_record_that_does_not_hold_together_is_refused_as_invalid() {
        use crate::checkpoint::{
            self, CheckpointError, InvalidPayload, decode_payload, encode_payload, seal,
        };
        let record = resolved_record();
        let mut wire = ClosureRecordV1::of(&record);
        wire.fix_attempts = 1;
        let bytes = seal(*b"CLSR", 1, &encode_payload(&wire).unwrap());
        let err = checkpoint::decode::<ClosureRecord>(&bytes).unwrap_err();
        assert!(
            matches!(&err, CheckpointError::Invalid { kind, reason }
            if kind == "CLSR" && **reason == InvalidPayload::Inconsistent {
                reason: "closure record of x holds 1 tasks for 1 fix attempts".to_owned()
            }),
            "{err}"
        );
        let err = ClosureRecord::from_json(&serde_json::to_string(&wire).unwrap()).unwrap_err();
        assert!(
            err.to_string().contains("holds 1 tasks for 1 fix attempts"),
            "{err}"
        );
        // The same record with its count intact reads back as itself.
        wire.fix_attempts = 0;
        let payload = encode_payload(&wire).unwrap();
        let back = decode_payload::<ClosureRecordV1<'static>>(&payload).unwrap();
        assert_eq!(ClosureRecord::try_from(back), Ok(record));
    }

    /// A policy record is checked by the builder: one out of bounds is refused, naming the
    /// setting.
    #[test]
    fn a_policy_record_is_rechecked() {
        let policy = RecoveryPolicy::default();
        let json = serde_json::to_string(&RecoveryPolicyV1::of(&policy)).unwrap();
        let back = serde_json::from_str::<RecoveryPolicyV1>(&json).unwrap();
        assert_eq!(RecoveryPolicy::try_from(back), Ok(policy));
        let bad = json.replace("\"max_inner_iterations\":50", "\"max_inner_iterations\":0");
        let back = serde_json::from_str::<RecoveryPolicyV1>(&bad).unwrap();
        let err = RecoveryPolicy::try_from(back).unwrap_err();
        assert!(err.contains("max_inner_iterations"), "{err}");
    }
}
