//! The `CLST` payload: a running closure, its policy, normaliser and seal.

use super::audit::AuditLogV1;
use super::record::ClosureRecordV1;
use super::record::TaskAttemptV1;
use super::step::SessionV1;
use super::task::SeverityV1;
use crate::closure::audit::AuditLog;
use crate::closure::machine::state::ClosureProgress;
use crate::closure::machine::state::ClosureState;
use crate::closure::machine::state::StateSeal;
use crate::closure::policy::RecoveryPolicy;
use crate::closure::record::TaskAttempt;
use crate::closure::step::RecoverOn;
use crate::closure::verdict::normalize::NormalizedResult;
use crate::closure::verdict::normalize::NormalizedVerdict;
use crate::closure::verdict::normalize::VerdictNormalizer;
use crate::id::ValidatorId;
use crate::id::digest::Digest;
use crate::wire::Invalid;
use crate::wire::Record;
use crate::wire::Seq;
use serde::Deserialize;
use serde::Serialize;
use std::borrow::Cow;

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
pub(super) enum MaskingV1 {
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
