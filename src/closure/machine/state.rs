//! A closure at rest: the plain [`ClosureState`] persisted between steps, the seal and
//! digests that bind it to its audit log, and [`Closure::restore`], which checks it before the
//! typed machine takes over.

use super::Closure;
use super::history::{self, ClosureDeltaError};
use crate::closure::audit::{AuditError, AuditEvent, AuditLog, LoopPhase};
use crate::closure::policy::{FixBudget, PolicyError, RecoveryPolicy};
use crate::closure::record::{ClosureRecord, TaskAttempt};
use crate::closure::verdict::NormalizedVerdict;
use crate::id::digest::Digest;
use crate::id::digest::{Canonical, Purpose};
use crate::{
    closure::step::ExecutionOutput, closure::step::Session, closure::task::Task, id::TaskId,
};

impl Closure {
    /// Brings a persisted state back into the typed machine, with a fix budget restored
    /// from the state's snapshot.
    ///
    /// Verify, then fold: the audit chain, every output against the digest its entry holds
    /// and the seal of policy and budget are checked; then the state's own history (its
    /// audit log and outputs) is replayed through the typed transitions from its root task,
    /// exactly as [`Closure::restore_from_deltas`] does, and everything else the state keeps
    /// (tasks, iterations, counters, the verdict kept for stall detection, the phase) must
    /// be what that replay produces.
    ///
    /// # Errors
    ///
    /// [`ClosureStateError`] naming what is inconsistent.
    pub fn restore(state: ClosureState) -> Result<Closure, ClosureStateError> {
        Self::restore_inner(state, None)
    }

    /// Like [`Closure::restore`], but the closure draws from `budget` (shared with the
    /// other closures of a batch) instead of the state's snapshot.
    ///
    /// # Errors
    ///
    /// [`ClosureStateError`] naming what is inconsistent.
    pub fn restore_with_budget(
        state: ClosureState,
        budget: &FixBudget,
    ) -> Result<Closure, ClosureStateError> {
        Self::restore_inner(state, Some(budget))
    }

    fn restore_inner(
        state: ClosureState,
        budget: Option<&FixBudget>,
    ) -> Result<Closure, ClosureStateError> {
        // Verify: the chain, every output against its digest, the seal of policy and budget.
        let (attempts, audit, policy) = match &state {
            ClosureState::Done(r) => (r.attempts.iter().collect(), &r.audit, &r.policy),
            _ => match state.progress() {
                Some((_, p)) => (p.attempts().collect::<Vec<_>>(), &p.audit, &p.policy),
                None => return Err(ClosureStateError::Empty),
            },
        };
        let (Some(root), Some(current)) = (attempts.first(), attempts.last()) else {
            return Err(ClosureStateError::Empty);
        };
        let task = current.task.id().clone();
        audit.verify()?;
        check_outputs(&attempts, audit)?;
        let own = match state.progress() {
            Some((_, p)) => {
                let expected = StateSeal::of(audit.head(), policy, p.budget_max, p.budget_used);
                if let Some(field) = expected.mismatch(&p.seal) {
                    return Err(ClosureStateError::Tampered { task, field });
                }
                Some(FixBudget::restore(p.budget_max, p.budget_used)?)
            }
            None => None,
        };
        // Fold: replay the state's own history through the typed transitions.
        let outputs = attempts
            .iter()
            .flat_map(|a| &a.steps)
            .filter_map(|s| s.output.as_ref());
        let origin = Some((&root.task, policy, (policy.max_total_fix_attempts(), 0)));
        let deltas = history::split(audit, outputs)
            .map(|(first, entries, output)| history::delta(first, entries, output, origin));
        let folded = match history::fold(deltas) {
            Ok((folded, _)) => folded,
            Err(source) => return Err(ClosureStateError::History { task, source }),
        };
        // Cross-check: what the state keeps besides its history must be what the history
        // replays to.
        if let Some(reason) = state.first_difference(&folded.state()) {
            return Err(match state.progress() {
                Some((phase, _)) => ClosureStateError::Inconsistent {
                    task,
                    phase,
                    reason,
                },
                None => ClosureStateError::RecordInconsistent { task },
            });
        }
        Ok(match budget.cloned().or(own) {
            Some(budget) => folded.with_budget(budget),
            None => folded,
        })
    }
}

/// A persisted closure: a plain enum of the phase it is at (see [`Closure::state`]).
///
/// Deserialise it (or [`checkpoint::decode`](crate::checkpoint::decode) it) and hand it to
/// [`Closure::restore`], which checks it before the typed machine takes over. Its serde form
/// is exactly its checkpoint payload's, format version 2 (see `FORMATS.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClosureState {
    /// Waiting for governance.
    Governance(ClosureProgress),
    /// Waiting for the pre-execute verdict.
    PreValidate(ClosureProgress),
    /// Waiting for execution.
    Execute(ClosureProgress),
    /// Waiting for the post-execute verdict.
    PostValidate(ClosureProgress),
    /// Waiting to know whether the clean task is complete.
    MoveNext(ClosureProgress),
    /// Finished.
    Done(Box<ClosureRecord>),
}

/// What a persisted, unfinished closure knows (see [`ClosureState`]).
///
/// Restoring re-checks it: every execution output against the digest its audit log
/// recorded, and the policy and fix-budget snapshot against a seal that binds them to the
/// audit log's head, so an edited output, policy, `budget_max` or `budget_used` is refused
/// naming the field. The seal and the audit chain carry no secret: they catch an edited
/// state, not a forger who recomputes them. Anchor [`AuditLog::head`] where the writer of
/// the state cannot reach, and restore with [`Closure::restore_with_budget`] to take the
/// budget from a trusted source instead of the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosureProgress {
    pub(in crate::closure) policy: RecoveryPolicy,
    pub(in crate::closure) session: Session,
    pub(in crate::closure) budget_max: u32,
    pub(in crate::closure) budget_used: u32,
    pub(in crate::closure) fix_attempts: u32,
    pub(in crate::closure) previous: Option<NormalizedVerdict>,
    pub(in crate::closure) done: Vec<TaskAttempt>,
    pub(in crate::closure) current: TaskAttempt,
    pub(in crate::closure) audit: AuditLog,
    pub(in crate::closure) seal: StateSeal,
}

/// Digests binding a state's policy and budget snapshot to its audit log's head, one per
/// field so that a mismatch names the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StateSeal {
    pub(in crate::closure) policy: Digest,
    pub(in crate::closure) budget_max: Digest,
    pub(in crate::closure) budget_used: Digest,
}

impl StateSeal {
    /// The seal binding `policy` and the budget snapshot to the audit `head`.
    pub(crate) fn of(
        head: Digest,
        policy: &RecoveryPolicy,
        budget_max: u32,
        budget_used: u32,
    ) -> Self {
        let field = |name: &str, value: &dyn Canonical| {
            Digest::of("closure state seal", &(head, name, value))
        };
        Self {
            policy: field("policy", policy),
            budget_max: field("budget_max", &budget_max),
            budget_used: field("budget_used", &budget_used),
        }
    }
}

impl StateSeal {
    /// The first field whose digest differs from `kept`'s.
    pub(in crate::closure) fn mismatch(&self, kept: &StateSeal) -> Option<StateField> {
        [
            (self.policy != kept.policy, StateField::Policy),
            (self.budget_max != kept.budget_max, StateField::BudgetMax),
            (self.budget_used != kept.budget_used, StateField::BudgetUsed),
        ]
        .into_iter()
        .find_map(|(differs, field)| differs.then_some(field))
    }
}

/// The digest an `executed` audit event records of an execution output.
pub(in crate::closure) fn output_digest(output: &ExecutionOutput) -> Digest {
    static OUTPUT: Purpose = Purpose::new("execution output");
    OUTPUT.hasher().put(&output.text).finish()
}

/// Checks every recorded execution output against the digest the audit log holds for it,
/// in order: an output edited, added or dropped after the fact is refused.
fn check_outputs(attempts: &[&TaskAttempt], audit: &AuditLog) -> Result<(), ClosureStateError> {
    let mut executed = audit.events().filter_map(|e| match e {
        AuditEvent::Executed {
            task_ref,
            iteration,
            output,
        } => Some((task_ref, *iteration, output)),
        _ => None,
    });
    for attempt in attempts {
        for step in &attempt.steps {
            let Some(output) = &step.output else { continue };
            let task = attempt.task.id();
            let refused = || ClosureStateError::Tampered {
                task: task.clone(),
                field: StateField::Output {
                    task: task.clone(),
                    iteration: step.iteration,
                },
            };
            match executed.next() {
                Some((t, i, d))
                    if t == task && i == step.iteration && *d == output_digest(output) => {}
                _ => return Err(refused()),
            }
        }
    }
    match executed.next() {
        Some((task, iteration, _)) => Err(ClosureStateError::Tampered {
            task: task.clone(),
            field: StateField::Output {
                task: task.clone(),
                iteration,
            },
        }),
        None => Ok(()),
    }
}

/// A persisted field that does not match what the state's seal or audit log commits to.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StateField {
    /// The recovery policy (depth, fix attempts, iteration cap, what is recovered, the
    /// normaliser).
    Policy,
    /// The fix budget's size.
    BudgetMax,
    /// The fix attempts the budget had spent.
    BudgetUsed,
    /// One iteration's execution output.
    Output {
        /// The task.
        task: TaskId,
        /// The iteration.
        iteration: u32,
    },
}

impl std::fmt::Display for StateField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateField::Policy => f.write_str("policy"),
            StateField::BudgetMax => f.write_str("budget_max"),
            StateField::BudgetUsed => f.write_str("budget_used"),
            StateField::Output { task, iteration } => {
                write!(f, "execution output of task {task} iteration {iteration}")
            }
        }
    }
}

impl ClosureState {
    /// The phase that is due and what the closure knows, unless it is done.
    fn progress(&self) -> Option<(LoopPhase, &ClosureProgress)> {
        Some(match self {
            ClosureState::Governance(p) => (LoopPhase::Governance, p),
            ClosureState::PreValidate(p) => (LoopPhase::PreValidate, p),
            ClosureState::Execute(p) => (LoopPhase::Execute, p),
            ClosureState::PostValidate(p) => (LoopPhase::PostValidate, p),
            ClosureState::MoveNext(p) => (LoopPhase::MoveNext, p),
            ClosureState::Done(_) => return None,
        })
    }

    /// Why this state (as persisted) is not `replayed` (what its history replays to),
    /// apart from the fix-budget snapshot, which is checked by its seal.
    fn first_difference(&self, replayed: &ClosureState) -> Option<&'static str> {
        let (Some((phase, kept)), Some((found_phase, found))) =
            (self.progress(), replayed.progress())
        else {
            return (self != replayed).then_some("the state is not what its audit log replays to");
        };
        [
            (
                phase != found_phase,
                "the recorded iteration does not match the phase",
            ),
            (
                kept.previous != found.previous,
                "the verdict kept for stall detection is not the previous attempt's",
            ),
            (
                kept.fix_attempts != found.fix_attempts,
                "the number of finished tasks differs from the fix attempts",
            ),
            (
                kept.session != found.session,
                "the session is not the one its audit log names",
            ),
            (
                kept.done != found.done || kept.current != found.current,
                "its tasks and iterations are not what its audit log replays to",
            ),
        ]
        .into_iter()
        .find_map(|(differs, reason)| differs.then_some(reason))
    }
}

impl ClosureProgress {
    /// Every task attempt, root first.
    fn attempts(&self) -> impl Iterator<Item = &TaskAttempt> {
        self.done.iter().chain([&self.current])
    }

    /// The task currently running.
    pub fn current_task(&self) -> &Task {
        &self.current.task
    }

    /// Fix subtasks spawned so far.
    pub fn fix_attempts(&self) -> u32 {
        self.fix_attempts
    }

    /// The audit log so far.
    pub fn audit(&self) -> &AuditLog {
        &self.audit
    }
}

/// Why a persisted [`ClosureState`] was refused by [`Closure::restore`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClosureStateError {
    /// The audit chain does not verify.
    #[error("restore closure state: its audit log does not verify; restore an untouched copy")]
    Audit(#[from] AuditError),
    /// The fix-budget snapshot is overdrawn.
    #[error("restore closure state: its fix budget does not hold together")]
    Budget(#[from] PolicyError),
    /// A persisted field was changed after the state was written: it does not match the
    /// state's seal or the digest its audit log recorded.
    #[error(
        "restore closure state: task {task}: its {field} is not what the closure wrote (it does not match the state's seal or audit log); the state was edited: restore an untouched copy"
    )]
    Tampered {
        /// The current task.
        task: TaskId,
        /// The field that does not match.
        field: StateField,
    },
    /// The state's audit log does not replay through the typed transitions.
    #[error(
        "restore closure state: task {task}: its audit log does not replay through the typed transitions; restore an untouched copy"
    )]
    History {
        /// The current task.
        task: TaskId,
        /// Where the replay broke.
        #[source]
        source: ClosureDeltaError,
    },
    /// A finished state's record is not what its audit log replays to.
    #[error(
        "restore closure state: the record ending at task {task} is not what its audit log replays to; restore an untouched copy"
    )]
    RecordInconsistent {
        /// The task the record ends at.
        task: TaskId,
    },
    /// The state holds no task at all.
    #[error("restore closure state: it holds no task; restore an untouched copy")]
    Empty,
    /// The state is not one the typed transitions could have produced.
    #[error("restore closure state: task {task} in phase {phase}: {reason}")]
    Inconsistent {
        /// The current task.
        task: TaskId,
        /// The persisted phase.
        phase: LoopPhase,
        /// What does not hold.
        reason: &'static str,
    },
}

impl ClosureStateError {
    /// The task named by an inconsistency.
    pub fn task(&self) -> Option<&TaskId> {
        match self {
            ClosureStateError::Inconsistent { task, .. }
            | ClosureStateError::Tampered { task, .. }
            | ClosureStateError::History { task, .. }
            | ClosureStateError::RecordInconsistent { task } => Some(task),
            _ => None,
        }
    }
}
