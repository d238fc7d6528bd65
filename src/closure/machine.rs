//! The sans-IO closure machine: ask what is due, feed back the result, persist between
//! steps.

use serde::{Deserialize, Serialize};

use super::{ClosureFailure, ClosureOutcome, ClosureRecord, FixBudget, NormalizedVerdict};
use super::{PolicyError, RecoveryPolicy, StepRecord, TaskAttempt, render_recovery_spec};
use crate::audit::{AuditError, AuditEvent, AuditLog, LoopPhase};
use crate::digest::Canonical;
use crate::digest::Digest;
use crate::phase::{Execute, Governance, MoveNext, PostValidate, PreValidate};
use crate::{
    id::TaskId, phase::ExecutionOutput, phase::ExhaustedBound, phase::GovernanceDecision,
    phase::Halt, phase::HaltReason, phase::Moved, phase::Next, phase::PostValidation,
    phase::Recoverable, phase::Session, phase::Step, phase::ValidationToken, task::FailureEntry,
    task::Task, verdict::Verdict,
};

/// Everything a running closure knows besides the typed step it is at.
#[derive(Debug, Clone)]
struct Core {
    policy: RecoveryPolicy,
    session: Session,
    budget: FixBudget,
    fix_attempts: u32,
    previous: Option<NormalizedVerdict>,
    done: Vec<TaskAttempt>,
    current: TaskAttempt,
    audit: AuditLog,
}

/// A closure in progress or finished, driven step by step (sans-IO).
///
/// Match on it to learn what is due; each variant's `feed` takes the result and returns the
/// next `Closure`, and `fail` records that the agent itself failed. [`Closure::state`]
/// gives a plain serialisable [`ClosureState`] to persist between any two steps, and
/// [`Closure::restore`] brings it back, re-checking it through the typed transitions.
/// [`run_to_closure`](crate::closure::run_to_closure) drives exactly this machine. To forward audit
/// events live, hand `closure.audit().entries()[forwarded..]` to your
/// [`AuditSink`](crate::audit::AuditSink) after each step.
///
/// # Examples
///
/// ```
/// use kleene::{checkpoint, Closure, closure::ClosureState, closure::ExecutionOutput, closure::GovernanceDecision,
///              closure::Next, closure::RecoveryPolicy, closure::Session, closure::Spec, Task, id::TaskId, closure::Verdict};
///
/// let task = Task::new(TaskId::new("x")?, Spec::new("add /login"));
/// let mut closure = Closure::start(task, Session::new("build", "demo")?, RecoveryPolicy::default());
/// let record = loop {
///     // An orchestrator may persist the state between any two steps and resume later.
///     let bytes = checkpoint::encode(&closure.state())?;
///     closure = Closure::restore(checkpoint::decode::<ClosureState>(&bytes)?)?;
///     closure = match closure {
///         Closure::Governance(due) => due.feed(GovernanceDecision::Approve),
///         Closure::PreValidate(due) => due.feed(Verdict::clean()),
///         Closure::Execute(due) => due.feed(ExecutionOutput::new("wrote src/login.rs")),
///         Closure::PostValidate(due) => due.feed(Verdict::clean()),
///         Closure::MoveNext(due) => due.feed(Next::Complete),
///         Closure::Done(record) => break record,
///     };
/// };
/// assert_eq!(record.outcome().resolved_depth(), Some(0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[must_use]
pub enum Closure {
    /// Governance must decide about the current task's iteration.
    Governance(AwaitingGovernance),
    /// Pre-execute validators must report.
    PreValidate(AwaitingPreValidation),
    /// The task must be executed with the minted token.
    Execute(AwaitingExecution),
    /// Post-execute validators must report on the output.
    PostValidate(AwaitingPostValidation),
    /// After a clean iteration: complete or continue?
    MoveNext(AwaitingMoveNext),
    /// The closure ended.
    Done(Box<ClosureRecord>),
}

macro_rules! awaiting {
    ($(#[$doc:meta])* $name:ident, $phase:ty, $loop_phase:expr $(, $token:ident)?) => {
        $(#[$doc])*
        #[derive(Debug)]
        #[must_use]
        pub struct $name {
            // Boxed: the closure moves by value at every step.
            core: Box<Core>,
            step: Step<$phase>,
            $($token: ValidationToken,)?
        }

        impl $name {
            /// The task whose iteration is due.
            pub fn task(&self) -> &Task {
                self.step.task()
            }

            /// The iteration (from 1).
            pub fn iteration(&self) -> u32 {
                self.step.iteration()
            }

            /// The session of the closure tree.
            pub fn session(&self) -> &Session {
                &self.core.session
            }

            /// The audit log so far.
            pub fn audit(&self) -> &AuditLog {
                &self.core.audit
            }

            /// Records that the agent itself failed in this phase (its own I/O error): the
            /// closure ends with [`ClosureFailure::Agent`].
            pub fn fail(self, message: impl Into<String>) -> Closure {
                let failure = ClosureFailure::Agent {
                    phase: $loop_phase,
                    message: message.into(),
                };
                self.core.failed(self.step.task(), self.step.iteration(), failure)
            }
        }
    };
}

awaiting!(
    /// A closure waiting for governance's decision.
    AwaitingGovernance,
    Governance,
    LoopPhase::Governance
);
awaiting!(
    /// A closure waiting for the pre-execute verdict.
    AwaitingPreValidation,
    PreValidate,
    LoopPhase::PreValidate,
    token
);
awaiting!(
    /// A closure waiting for the execution output.
    AwaitingExecution,
    Execute,
    LoopPhase::Execute,
    token
);
awaiting!(
    /// A closure waiting for the post-execute verdict.
    AwaitingPostValidation,
    PostValidate,
    LoopPhase::PostValidate
);
awaiting!(
    /// A closure waiting to know whether the clean task is complete.
    AwaitingMoveNext,
    MoveNext,
    LoopPhase::MoveNext
);

impl Closure {
    /// Starts a closure on `task` with its own fix budget of
    /// `policy.max_total_fix_attempts()`.
    pub fn start(task: Task, session: Session, policy: RecoveryPolicy) -> Closure {
        let budget = policy.fix_budget();
        Self::start_with_budget(task, session, policy, &budget)
    }

    /// Starts a closure on `task` that draws fixes from `budget`, shared with whatever
    /// else holds a clone of it (for example the other closures of one batch).
    pub fn start_with_budget(
        task: Task,
        session: Session,
        policy: RecoveryPolicy,
        budget: &FixBudget,
    ) -> Closure {
        let mut audit = AuditLog::new();
        audit.append(AuditEvent::ClosureStarted {
            root_task_ref: task.root_task_ref().clone(),
            session: session.clone(),
        });
        let step = Step::new(task.clone(), session.clone())
            .with_iteration_cap(policy.max_inner_iterations());
        Closure::Governance(AwaitingGovernance {
            core: Box::new(Core {
                policy,
                session,
                budget: budget.clone(),
                fix_attempts: 0,
                previous: None,
                done: Vec::new(),
                current: TaskAttempt::new(task),
                audit,
            }),
            step,
        })
    }

    /// The audit log so far (the record's, once done).
    pub fn audit(&self) -> &AuditLog {
        match self {
            Closure::Governance(d) => &d.core.audit,
            Closure::PreValidate(d) => &d.core.audit,
            Closure::Execute(d) => &d.core.audit,
            Closure::PostValidate(d) => &d.core.audit,
            Closure::MoveNext(d) => &d.core.audit,
            Closure::Done(record) => &record.audit,
        }
    }

    /// The plain, serialisable state to persist: the phase and everything the closure
    /// knows, including a snapshot of its fix budget.
    pub fn state(&self) -> ClosureState {
        let progress = |core: &Core| ClosureProgress::from(core);
        match self {
            Closure::Governance(d) => ClosureState::Governance(progress(&d.core)),
            Closure::PreValidate(d) => ClosureState::PreValidate(progress(&d.core)),
            Closure::Execute(d) => ClosureState::Execute(progress(&d.core)),
            Closure::PostValidate(d) => ClosureState::PostValidate(progress(&d.core)),
            Closure::MoveNext(d) => ClosureState::MoveNext(progress(&d.core)),
            Closure::Done(record) => ClosureState::Done(record.clone()),
        }
    }

    /// Brings a persisted state back into the typed machine, with a fix budget restored
    /// from the state's snapshot.
    ///
    /// The audit chain is verified and the current iteration is replayed through the typed
    /// transitions ([`Step::govern`], [`Step::pre_validate`], …), which re-mint the same
    /// validation token; a state those transitions would not have produced is refused.
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
        let (phase, progress) = match state {
            ClosureState::Done(record) => {
                record.audit.verify()?;
                check_outputs(&record.attempts, &record.audit)?;
                return Ok(Closure::Done(record));
            }
            ClosureState::Governance(p) => (LoopPhase::Governance, p),
            ClosureState::PreValidate(p) => (LoopPhase::PreValidate, p),
            ClosureState::Execute(p) => (LoopPhase::Execute, p),
            ClosureState::PostValidate(p) => (LoopPhase::PostValidate, p),
            ClosureState::MoveNext(p) => (LoopPhase::MoveNext, p),
        };
        progress.audit.verify()?;
        let attempts: Vec<TaskAttempt> = progress
            .done
            .iter()
            .chain(std::iter::once(&progress.current))
            .cloned()
            .collect();
        check_outputs(&attempts, &progress.audit)?;
        let expected = StateSeal::of(
            &progress.audit,
            &progress.policy,
            progress.budget_max,
            progress.budget_used,
        );
        let tampered = |field| ClosureStateError::Tampered {
            task: progress.current.task.id().clone(),
            field,
        };
        if expected.policy != progress.seal.policy {
            return Err(tampered(StateField::Policy));
        }
        if expected.budget_max != progress.seal.budget_max {
            return Err(tampered(StateField::BudgetMax));
        }
        if expected.budget_used != progress.seal.budget_used {
            return Err(tampered(StateField::BudgetUsed));
        }
        let budget = match budget {
            Some(b) => b.clone(),
            None => FixBudget::restore(progress.budget_max, progress.budget_used)?,
        };
        let core = Box::new(Core {
            policy: progress.policy,
            session: progress.session,
            budget,
            fix_attempts: progress.fix_attempts,
            previous: progress.previous,
            done: progress.done,
            current: progress.current,
            audit: progress.audit,
        });
        let bad = |reason: &'static str| ClosureStateError::Inconsistent {
            task: core.current.task.id().clone(),
            phase,
            reason,
        };
        if core.done.len() != core.fix_attempts as usize {
            return Err(bad(
                "the number of finished tasks differs from the fix attempts",
            ));
        }
        // Depths are persisted numbers: a root at the deepest depth has no fix below it.
        let expected_depth = core
            .done
            .first()
            .map_or(Some(core.current.task.depth()), |root| {
                root.task.depth().checked_add(core.fix_attempts)
            });
        if expected_depth != Some(core.current.task.depth()) {
            return Err(bad("the current task is not one level below its parent"));
        }
        let chain = core.done.iter().chain(std::iter::once(&core.current));
        if chain
            .clone()
            .zip(chain.skip(1))
            .any(|(parent, fix)| fix.task.parent_task_ref() != Some(parent.task.id()))
        {
            return Err(bad(
                "a fix subtask does not name the task before it as parent",
            ));
        }
        let expected_previous = core.done.last().and_then(|parent| {
            parent
                .last_post_verdict()
                .map(|v| core.policy.normalizer().normalize(v))
        });
        if core.previous != expected_previous {
            return Err(bad(
                "the verdict kept for stall detection is not the previous attempt's",
            ));
        }
        let cap = core.policy.max_inner_iterations();
        let last = core.current.steps.last().cloned();
        let iteration = match (phase, &last) {
            (LoopPhase::Governance, None) => 1,
            (LoopPhase::Governance, Some(s)) if s.next == Some(Next::Continue) => {
                s.iteration.saturating_add(1)
            }
            (LoopPhase::Governance, Some(_)) => {
                return Err(bad(
                    "governance is due but the last iteration did not continue",
                ));
            }
            (_, Some(s)) => s.iteration,
            (_, None) => return Err(bad("no iteration was governed yet")),
        };
        if iteration == 0 || iteration > cap.get() {
            return Err(bad("the iteration is outside 1..=max_inner_iterations"));
        }
        let step = Step::at_iteration(
            core.current.task.clone(),
            core.session.clone(),
            iteration,
            cap,
        );
        let Some(last) = last.filter(|_| phase != LoopPhase::Governance) else {
            return Ok(Closure::Governance(AwaitingGovernance { core, step }));
        };
        let (step, token) = match (&last.governance, step.govern(GovernanceDecision::Approve)) {
            (GovernanceDecision::Approve, Ok(minted)) => minted,
            _ => return Err(bad("the iteration was not approved by governance")),
        };
        let stage = (
            last.pre_verdict.clone(),
            last.output.clone(),
            last.post_verdict.clone(),
            last.next,
        );
        match (phase, stage) {
            (LoopPhase::PreValidate, (None, None, None, None)) => {
                Ok(Closure::PreValidate(AwaitingPreValidation {
                    core,
                    step,
                    token,
                }))
            }
            (LoopPhase::Execute, (Some(pre), None, None, None)) => match step.pre_validate(pre) {
                Ok(step) => Ok(Closure::Execute(AwaitingExecution { core, step, token })),
                Err(_) => Err(bad("the recorded pre-execute verdict blocks execution")),
            },
            (LoopPhase::PostValidate, (Some(pre), Some(output), None, None)) => {
                match step.pre_validate(pre).map(|s| s.execute(token, output)) {
                    Ok(Ok(step)) => {
                        Ok(Closure::PostValidate(AwaitingPostValidation { core, step }))
                    }
                    _ => Err(bad("the recorded iteration does not reach post-validation")),
                }
            }
            (LoopPhase::MoveNext, (Some(pre), Some(output), Some(post), None)) => {
                let recover_on = core.policy.recover_on();
                match step.pre_validate(pre).map(|s| s.execute(token, output)) {
                    Ok(Ok(step)) => match step.post_validate(post, recover_on) {
                        PostValidation::Clean(step) => {
                            Ok(Closure::MoveNext(AwaitingMoveNext { core, step }))
                        }
                        _ => Err(bad("the recorded post-execute verdict is not clean")),
                    },
                    _ => Err(bad("the recorded iteration does not reach post-validation")),
                }
            }
            _ => Err(bad("the recorded iteration does not match the phase")),
        }
    }
}

impl AwaitingGovernance {
    /// Applies governance's decision. Approval mints this iteration's own validation token
    /// (INV1); denial ends the closure with `governance_denied`.
    pub fn feed(mut self, decision: GovernanceDecision) -> Closure {
        let outcome = self.step.govern(decision.clone());
        let token_digest = outcome.as_ref().ok().map(|(_, t)| t.digest());
        let task_ref = self.core.current.task.id().clone();
        let iteration = match &outcome {
            Ok((s, _)) => s.iteration(),
            Err(h) => h.iteration,
        };
        self.core.audit.append(AuditEvent::Governed {
            task_ref,
            iteration,
            decision: decision.clone(),
            token: token_digest,
        });
        self.core
            .current
            .steps
            .push(StepRecord::governed(iteration, decision));
        match outcome {
            Ok((step, token)) => Closure::PreValidate(AwaitingPreValidation {
                core: self.core,
                step,
                token,
            }),
            Err(halt) => self.core.halted(halt),
        }
    }
}

impl AwaitingPreValidation {
    /// Applies the pre-execute verdict; a blocker ends the closure with
    /// `pre_execute_rejected` (never auto-fixed).
    pub fn feed(mut self, verdict: Verdict) -> Closure {
        self.core.audit.append(AuditEvent::PreValidated {
            task_ref: self.step.task().id().clone(),
            iteration: self.step.iteration(),
            verdict: verdict.clone(),
        });
        self.core.record(|s| s.pre_verdict = Some(verdict.clone()));
        match self.step.pre_validate(verdict) {
            Ok(step) => Closure::Execute(AwaitingExecution {
                core: self.core,
                step,
                token: self.token,
            }),
            Err(halt) => self.core.halted(halt),
        }
    }
}

impl AwaitingExecution {
    /// The validation token governance minted for this iteration: bind it into whatever
    /// the execution creates (branch, worktree).
    pub fn token(&self) -> &ValidationToken {
        &self.token
    }

    /// Records what execution produced, consuming the token.
    pub fn feed(mut self, output: ExecutionOutput) -> Closure {
        self.core.audit.append(AuditEvent::Executed {
            task_ref: self.step.task().id().clone(),
            iteration: self.step.iteration(),
            output: output_digest(&output),
        });
        self.core.record(|s| s.output = Some(output.clone()));
        match self.step.execute(self.token, output) {
            Ok(step) => Closure::PostValidate(AwaitingPostValidation {
                core: self.core,
                step,
            }),
            // The token was minted for exactly this step, so this arm is never taken; it
            // ends the closure with a typed failure rather than a panic all the same.
            Err(rejected) => {
                let failure = ClosureFailure::Agent {
                    phase: LoopPhase::Execute,
                    message: crate::error::Chain(&rejected).to_string(),
                };
                let step = *rejected.step;
                self.core.failed(step.task(), step.iteration(), failure)
            }
        }
    }
}

impl AwaitingPostValidation {
    /// What execution produced.
    pub fn output(&self) -> &ExecutionOutput {
        self.step.output()
    }

    /// Applies the post-execute verdict: clean moves on; a recoverable failure spawns the
    /// next fix subtask (or halts with `recovery_stalled` / `recovery_exhausted`); a
    /// non-overridable blocker or a withheld warning halts.
    pub fn feed(mut self, verdict: Verdict) -> Closure {
        self.core.audit.append(AuditEvent::PostValidated {
            task_ref: self.step.task().id().clone(),
            iteration: self.step.iteration(),
            verdict: verdict.clone(),
        });
        self.core.record(|s| s.post_verdict = Some(verdict.clone()));
        let recover_on = self.core.policy.recover_on();
        match self.step.post_validate(verdict, recover_on) {
            PostValidation::Clean(step) => Closure::MoveNext(AwaitingMoveNext {
                core: self.core,
                step,
            }),
            PostValidation::Recoverable(r) => self.core.recover(r),
            PostValidation::Halted(halt) => self.core.halted(halt),
        }
    }
}

impl AwaitingMoveNext {
    /// Completes the task (the closure resolves) or continues with its next iteration.
    pub fn feed(mut self, next: Next) -> Closure {
        self.core.audit.append(AuditEvent::MovedNext {
            task_ref: self.step.task().id().clone(),
            iteration: self.step.iteration(),
            next,
        });
        self.core.record(|s| s.next = Some(next));
        match self.step.move_next(next) {
            Moved::Completed(done) => self.core.resolved(done.task()),
            Moved::Continue(step) => Closure::Governance(AwaitingGovernance {
                core: self.core,
                step,
            }),
            Moved::Halted(halt) => self.core.halted(halt),
        }
    }
}

impl Core {
    /// Updates the current iteration's record (there always is one after governance).
    fn record(&mut self, update: impl FnOnce(&mut StepRecord)) {
        if let Some(step) = self.current.steps.last_mut() {
            update(step);
        }
    }

    fn recover(mut self: Box<Self>, r: Recoverable) -> Closure {
        let normalized = self.policy.normalizer().normalize(&r.verdict);
        let depth = r.task.depth();
        let halt = |reason| Halt {
            task: r.task.clone(),
            iteration: r.iteration,
            reason,
        };
        if self.previous.as_ref() == Some(&normalized) {
            return self.halted(halt(HaltReason::RecoveryStalled {
                verdict: r.verdict.clone(),
            }));
        }
        let max_depth = self.policy.max_recovery_depth();
        let fix_depth = match depth.checked_add(1).filter(|d| *d <= max_depth) {
            Some(d) => d,
            None => {
                return self.halted(halt(HaltReason::RecoveryExhausted {
                    bound: ExhaustedBound::Depth { max: max_depth },
                    verdict: r.verdict.clone(),
                }));
            }
        };
        let fix_id = match r.task.root_task_ref().fix_id(fix_depth) {
            Ok(id) => id,
            Err(e) => {
                let failure = ClosureFailure::FixId {
                    depth: fix_depth,
                    message: e.to_string(),
                };
                return self.failed(&r.task, r.iteration, failure);
            }
        };
        if !self.budget.try_take() {
            let max = self.budget.max();
            return self.halted(halt(HaltReason::RecoveryExhausted {
                bound: ExhaustedBound::FixBudget { max },
                verdict: r.verdict.clone(),
            }));
        }
        let new_failures: Vec<FailureEntry> = r
            .verdict
            .failures()
            .map(|f| FailureEntry {
                attempt: depth,
                validator_id: f.validator_id.clone(),
                severity: f.severity,
                justification: f.justification.clone(),
            })
            .collect();
        let all: Vec<FailureEntry> = r
            .task
            .prior_failures()
            .iter()
            .chain(&new_failures)
            .cloned()
            .collect();
        let spec = render_recovery_spec(r.task.root_spec(), &fix_id, fix_depth, &all);
        let fix = Task::fix_subtask(&r.task, fix_id, spec, new_failures);
        self.audit.append(AuditEvent::SubtaskSpawned {
            parent_ref: r.task.id().clone(),
            task_ref: fix.id().clone(),
            depth: fix_depth,
            triggering_validators: r.triggering_validators(),
        });
        self.fix_attempts += 1;
        self.previous = Some(normalized);
        let parent = std::mem::replace(&mut self.current, TaskAttempt::new(fix.clone()));
        self.done.push(parent);
        let step = Step::new(fix, self.session.clone())
            .with_iteration_cap(self.policy.max_inner_iterations());
        Closure::Governance(AwaitingGovernance { core: self, step })
    }

    fn resolved(mut self: Box<Self>, task: &Task) -> Closure {
        self.audit.append(AuditEvent::RecoveryResolved {
            root_task_ref: task.root_task_ref().clone(),
            task_ref: task.id().clone(),
            depth: task.depth(),
            fix_attempts: self.fix_attempts,
        });
        let outcome = ClosureOutcome::Resolved {
            task_ref: task.id().clone(),
            depth: task.depth(),
        };
        self.finish(outcome)
    }

    fn halted(mut self: Box<Self>, halt: Halt) -> Closure {
        let root_task_ref = halt.task.root_task_ref().clone();
        let task_ref = halt.task.id().clone();
        let depth = halt.task.depth();
        self.audit.append(match &halt.reason {
            HaltReason::RecoveryExhausted { bound, .. } => AuditEvent::RecoveryExhausted {
                root_task_ref,
                task_ref: task_ref.clone(),
                depth,
                bound: *bound,
            },
            HaltReason::RecoveryStalled { .. } => AuditEvent::RecoveryStalled {
                root_task_ref,
                task_ref: task_ref.clone(),
                depth,
            },
            reason => AuditEvent::Halted {
                task_ref: task_ref.clone(),
                iteration: halt.iteration,
                reason: reason.clone(),
            },
        });
        self.finish(ClosureOutcome::Halted {
            task_ref,
            depth,
            iteration: halt.iteration,
            reason: halt.reason,
        })
    }

    fn failed(
        mut self: Box<Self>,
        task: &Task,
        iteration: u32,
        failure: ClosureFailure,
    ) -> Closure {
        self.audit.append(AuditEvent::Failed {
            task_ref: task.id().clone(),
            iteration,
            failure: failure.clone(),
        });
        self.finish(ClosureOutcome::Failed {
            task_ref: task.id().clone(),
            depth: task.depth(),
            iteration,
            failure,
        })
    }

    fn finish(self: Box<Self>, outcome: ClosureOutcome) -> Closure {
        let core = *self;
        let mut attempts = core.done;
        let root_task_ref = core.current.task.root_task_ref().clone();
        attempts.push(core.current);
        Closure::Done(Box::new(ClosureRecord {
            root_task_ref,
            session: core.session,
            policy: core.policy,
            outcome,
            attempts,
            fix_attempts: core.fix_attempts,
            audit: core.audit,
        }))
    }
}

/// A persisted closure: a plain enum of the phase it is at (see [`Closure::state`]).
///
/// Deserialise it (or [`checkpoint::decode`](crate::checkpoint::decode) it) and hand it to
/// [`Closure::restore`], which checks it before the typed machine takes over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClosureProgress {
    policy: RecoveryPolicy,
    session: Session,
    budget_max: u32,
    budget_used: u32,
    fix_attempts: u32,
    previous: Option<NormalizedVerdict>,
    done: Vec<TaskAttempt>,
    current: TaskAttempt,
    audit: AuditLog,
    seal: StateSeal,
}

/// Digests binding a state's policy and budget snapshot to its audit log's head, one per
/// field so that a mismatch names the field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct StateSeal {
    policy: Digest,
    budget_max: Digest,
    budget_used: Digest,
}

impl StateSeal {
    fn of(audit: &AuditLog, policy: &RecoveryPolicy, budget_max: u32, budget_used: u32) -> Self {
        let field = |name: &str, value: &dyn Canonical| {
            Digest::of("closure state seal", &(audit.head(), name, value))
        };
        Self {
            policy: field("policy", policy),
            budget_max: field("budget_max", &budget_max),
            budget_used: field("budget_used", &budget_used),
        }
    }
}

/// The digest an `executed` audit event records of an execution output.
fn output_digest(output: &ExecutionOutput) -> Digest {
    Digest::of("execution output", &output.text)
}

/// Checks every recorded execution output against the digest the audit log holds for it,
/// in order: an output edited, added or dropped after the fact is refused.
fn check_outputs(attempts: &[TaskAttempt], audit: &AuditLog) -> Result<(), ClosureStateError> {
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

impl ClosureProgress {
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

impl From<&Core> for ClosureProgress {
    fn from(core: &Core) -> Self {
        // One read of the shared counter, so the seal covers exactly the snapshot kept.
        let budget_used = core.budget.used();
        Self {
            policy: core.policy.clone(),
            session: core.session.clone(),
            budget_max: core.budget.max(),
            budget_used,
            fix_attempts: core.fix_attempts,
            previous: core.previous.clone(),
            done: core.done.clone(),
            current: core.current.clone(),
            seal: StateSeal::of(&core.audit, &core.policy, core.budget.max(), budget_used),
            audit: core.audit.clone(),
        }
    }
}

/// A [`ClosureProgress`] as format version 1 wrote it, before the seal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ClosureProgressV1 {
    policy: RecoveryPolicy,
    session: Session,
    budget_max: u32,
    budget_used: u32,
    fix_attempts: u32,
    previous: Option<NormalizedVerdict>,
    done: Vec<TaskAttempt>,
    current: TaskAttempt,
    audit: AuditLog,
}

/// A [`ClosureState`] as format version 1 wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ClosureStateV1 {
    Governance(ClosureProgressV1),
    PreValidate(ClosureProgressV1),
    Execute(ClosureProgressV1),
    PostValidate(ClosureProgressV1),
    MoveNext(ClosureProgressV1),
    Done(Box<ClosureRecord>),
}

impl From<ClosureProgressV1> for ClosureProgress {
    /// Version 1 carried no seal, so its policy and budget are taken as written and sealed
    /// now; its outputs are still checked against the audit log on restore.
    fn from(v1: ClosureProgressV1) -> Self {
        Self {
            seal: StateSeal::of(&v1.audit, &v1.policy, v1.budget_max, v1.budget_used),
            policy: v1.policy,
            session: v1.session,
            budget_max: v1.budget_max,
            budget_used: v1.budget_used,
            fix_attempts: v1.fix_attempts,
            previous: v1.previous,
            done: v1.done,
            current: v1.current,
            audit: v1.audit,
        }
    }
}

impl From<ClosureStateV1> for ClosureState {
    fn from(v1: ClosureStateV1) -> Self {
        match v1 {
            ClosureStateV1::Governance(p) => ClosureState::Governance(p.into()),
            ClosureStateV1::PreValidate(p) => ClosureState::PreValidate(p.into()),
            ClosureStateV1::Execute(p) => ClosureState::Execute(p.into()),
            ClosureStateV1::PostValidate(p) => ClosureState::PostValidate(p.into()),
            ClosureStateV1::MoveNext(p) => ClosureState::MoveNext(p.into()),
            ClosureStateV1::Done(record) => ClosureState::Done(record),
        }
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
            | ClosureStateError::Tampered { task, .. } => Some(task),
            _ => None,
        }
    }
}
