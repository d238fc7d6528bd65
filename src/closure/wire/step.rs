//! The records of one iteration's parts: the session, the governance decision, verdicts,
//! an execution's output, the next move and why a loop halted.

use super::task::SeverityV1;
use crate::closure::step::ExecutionOutput;
use crate::closure::step::ExhaustedBound;
use crate::closure::step::GovernanceDecision;
use crate::closure::step::HaltReason;
use crate::closure::step::Next;
use crate::closure::step::Session;
use crate::closure::verdict::ValidatorResult;
use crate::closure::verdict::Verdict;
use crate::id::ProjectId;
use crate::id::SessionMode;
use crate::id::ValidatorId;
use crate::wire::Record;
use crate::wire::Seq;
use serde::Deserialize;
use serde::Serialize;
use std::borrow::Cow;

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
