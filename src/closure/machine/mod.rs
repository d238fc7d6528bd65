//! The sans-IO closure machine: ask what is due, feed back the result, persist between
//! steps.

pub(crate) mod history;
pub(crate) mod state;

pub use history::{ClosureDelta, ClosureDeltaError};
pub use state::{ClosureProgress, ClosureState, ClosureStateError, StateField};

use super::policy::{FixBudget, RecoveryPolicy};
use super::record::{ClosureFailure, ClosureOutcome, ClosureRecord, StepRecord, TaskAttempt};
use super::spec::render_recovery_spec_of;
use super::verdict::NormalizedVerdict;
use crate::closure::audit::{AuditEvent, AuditLog, LoopPhase};
use crate::closure::step::{Execute, Governance, MoveNext, Phase, PostValidate, PreValidate};
use crate::{
    closure::step::ExecutionOutput, closure::step::ExhaustedBound,
    closure::step::GovernanceDecision, closure::step::Halt, closure::step::HaltReason,
    closure::step::Moved, closure::step::Next, closure::step::PostValidation,
    closure::step::Recoverable, closure::step::Session, closure::step::Step,
    closure::step::ValidationToken, closure::task::FailureEntry, closure::task::Task,
    closure::verdict::Verdict,
};
use state::{StateSeal, output_digest};

/// Everything a running closure knows besides the typed step it is at.
#[derive(Debug, Clone)]
struct Core {
    policy: RecoveryPolicy,
    session: Session,
    budget: FixBudget,
    /// The normalised verdict of the last finished attempt, kept so that stall detection
    /// normalises each verdict once.
    previous: Option<NormalizedVerdict>,
    done: Vec<TaskAttempt>,
    current: TaskAttempt,
    audit: AuditLog,
}

/// A closure in progress or finished, driven step by step (sans-IO).
///
/// Match on it to learn what is due; each variant's `feed` takes the result and returns the
/// next `Closure`, and `fail` records that the agent itself failed. To persist it, append
/// [`Closure::step_delta`] to a store after every step (one small
/// [`ClosureDelta`] each; [`Closure::encode_step_delta_into`] writes its
/// envelope straight into an in-memory store) and restore with
/// [`Closure::restore_from_deltas`]; or persist the whole [`ClosureState`] of
/// [`Closure::state`] and restore with [`Closure::restore`]. Either restore replays the
/// audit log through the typed transitions before the machine takes over.
/// [`run_to_closure`](crate::closure::run_to_closure) drives exactly this machine. To forward audit
/// events live, hand `closure.audit().entries()[forwarded..]` to your
/// [`AuditSink`](crate::closure::audit::AuditSink) after each step.
///
/// # Examples
///
/// ```
/// use kleene::{checkpoint, closure::Closure, closure::ClosureState, closure::ExecutionOutput, closure::GovernanceDecision,
///              closure::step::Next, closure::RecoveryPolicy, closure::step::Session, closure::Spec, Task, id::TaskId, closure::Verdict};
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

/// A closure waiting for the answer of phase `P` (see the aliases below): the typed
/// [`Step`] it is at, and the iteration's validation token while it is owed one.
#[derive(Debug)]
#[must_use]
pub struct Awaiting<P: Phase> {
    // Boxed: the closure moves by value at every step.
    core: Box<Core>,
    step: Step<P>,
    token: P::Held,
}

/// A closure waiting for governance's decision.
pub type AwaitingGovernance = Awaiting<Governance>;
/// A closure waiting for the pre-execute verdict.
pub type AwaitingPreValidation = Awaiting<PreValidate>;
/// A closure waiting for the execution output.
pub type AwaitingExecution = Awaiting<Execute>;
/// A closure waiting for the post-execute verdict.
pub type AwaitingPostValidation = Awaiting<PostValidate>;
/// A closure waiting to know whether the clean task is complete.
pub type AwaitingMoveNext = Awaiting<MoveNext>;

impl<P: Phase> Awaiting<P> {
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
            phase: P::LOOP,
            message: message.into(),
        };
        self.core
            .failed(self.step.task(), self.step.iteration(), failure)
    }
}

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
                previous: None,
                done: Vec::new(),
                current: TaskAttempt::new(task),
                audit,
            }),
            step,
            token: (),
        })
    }

    /// The audit log so far (the record's, once done).
    pub fn audit(&self) -> &AuditLog {
        match self.core() {
            Ok(core) => &core.audit,
            Err(record) => &record.audit,
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

    /// The closure with `budget` to draw fixes from (a finished closure draws none).
    pub(in crate::closure) fn with_budget(mut self, budget: FixBudget) -> Closure {
        if let Some(core) = self.core_mut() {
            core.budget = budget;
        }
        self
    }

    fn core_mut(&mut self) -> Option<&mut Core> {
        // Only a running closure draws fixes.
        match self {
            Closure::Governance(d) => Some(&mut d.core),
            Closure::PreValidate(d) => Some(&mut d.core),
            Closure::Execute(d) => Some(&mut d.core),
            Closure::PostValidate(d) => Some(&mut d.core),
            Closure::MoveNext(d) => Some(&mut d.core),
            Closure::Done(_) => None,
        }
    }

    /// What a running closure knows, or the record of a finished one.
    fn core(&self) -> Result<&Core, &ClosureRecord> {
        match self {
            Closure::Governance(d) => Ok(&d.core),
            Closure::PreValidate(d) => Ok(&d.core),
            Closure::Execute(d) => Ok(&d.core),
            Closure::PostValidate(d) => Ok(&d.core),
            Closure::MoveNext(d) => Ok(&d.core),
            Closure::Done(record) => Err(record),
        }
    }

    /// Feeds the answer `event` records (with the execution's `output`), or gives the
    /// closure back when that answer is not the one due.
    pub(in crate::closure) fn feed_recorded(
        self,
        event: &AuditEvent,
        output: Option<&ExecutionOutput>,
    ) -> Result<Closure, Closure> {
        use AuditEvent as E;
        Ok(match (self, event) {
            (Closure::Governance(d), E::Governed { decision, .. }) => d.feed(decision.clone()),
            (Closure::PreValidate(d), E::PreValidated { verdict, .. }) => d.feed(verdict.clone()),
            (Closure::Execute(d), E::Executed { .. }) if output.is_some() => {
                d.feed(output.cloned().unwrap_or_default())
            }
            (Closure::PostValidate(d), E::PostValidated { verdict, .. }) => d.feed(verdict.clone()),
            (Closure::MoveNext(d), E::MovedNext { next, .. }) => d.feed(*next),
            (due, E::Failed { failure, .. }) => match (due, failure) {
                (due, ClosureFailure::Agent { phase, message }) if due.due() == Some(*phase) => {
                    due.fail(message.clone())
                }
                (due, _) => return Err(due),
            },
            (due, _) => return Err(due),
        })
    }

    /// The phase whose answer is due (none once done).
    pub fn due(&self) -> Option<LoopPhase> {
        Some(match self {
            Closure::Governance(_) => LoopPhase::Governance,
            Closure::PreValidate(_) => LoopPhase::PreValidate,
            Closure::Execute(_) => LoopPhase::Execute,
            Closure::PostValidate(_) => LoopPhase::PostValidate,
            Closure::MoveNext(_) => LoopPhase::MoveNext,
            Closure::Done(_) => return None,
        })
    }

    /// Records that the agent itself failed in the phase that is due; a finished closure
    /// is returned unchanged.
    pub fn fail(self, message: impl Into<String>) -> Closure {
        match self {
            Closure::Governance(d) => d.fail(message),
            Closure::PreValidate(d) => d.fail(message),
            Closure::Execute(d) => d.fail(message),
            Closure::PostValidate(d) => d.fail(message),
            Closure::MoveNext(d) => d.fail(message),
            done @ Closure::Done(_) => done,
        }
    }

    /// Fix subtasks spawned so far.
    pub fn fix_attempts(&self) -> u32 {
        self.core()
            .map_or_else(|r| r.fix_attempts, Core::fix_attempts)
    }

    /// The root task, the policy and the budget snapshot the closure started from (the
    /// budget's use before this closure's own fixes).
    pub(in crate::closure) fn origin(&self) -> Option<(&Task, &RecoveryPolicy, (u32, u32))> {
        match self.core() {
            Ok(core) => {
                let root = core.done.first().unwrap_or(&core.current);
                let used = core.budget.used().saturating_sub(core.fix_attempts());
                Some((&root.task, &core.policy, (core.budget.max(), used)))
            }
            Err(r) => {
                let budget = (r.policy.max_total_fix_attempts(), 0);
                Some((&r.attempts.first()?.task, &r.policy, budget))
            }
        }
    }

    /// Every task attempt so far, root first.
    pub(in crate::closure) fn attempts(&self) -> Vec<&TaskAttempt> {
        match self.core() {
            Ok(core) => core.done.iter().chain([&core.current]).collect(),
            Err(r) => r.attempts.iter().collect(),
        }
    }

    /// The output of the last iteration so far, if it executed.
    pub(in crate::closure) fn last_output(&self) -> Option<&ExecutionOutput> {
        let last = match self.core() {
            Ok(core) => &core.current,
            Err(r) => r.attempts.last()?,
        };
        last.steps.last()?.output.as_ref()
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
            Ok((step, token)) => Closure::PreValidate(Awaiting {
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
            Ok(step) => Closure::Execute(Awaiting {
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
            Ok(step) => Closure::PostValidate(Awaiting {
                core: self.core,
                step,
                token: (),
            }),
            // The token was minted for exactly this step, so this arm is never taken; it
            // ends the closure with a typed failure rather than a panic all the same.
            Err(rejected) => {
                let failure = ClosureFailure::Agent {
                    phase: LoopPhase::Execute,
                    message: crate::text::Chain(&rejected).to_string(),
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
            PostValidation::Clean(step) => Closure::MoveNext(Awaiting {
                core: self.core,
                step,
                token: (),
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
            Moved::Continue(step) => Closure::Governance(Awaiting {
                core: self.core,
                step,
                token: (),
            }),
            Moved::Halted(halt) => self.core.halted(halt),
        }
    }
}

// The ending states take the core as it arrives, boxed from the state that ends, and unbox
// it once, in `finish`.
#[allow(clippy::boxed_local, reason = "the core is unboxed once, at the end")]
impl Core {
    /// Fix subtasks spawned so far: every finished attempt but the root spawned one.
    fn fix_attempts(&self) -> u32 {
        u32::try_from(self.done.len()).unwrap_or(u32::MAX)
    }

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
        let spec = render_recovery_spec_of(
            r.task.root_spec(),
            &fix_id,
            fix_depth,
            [r.task.prior_failures(), &new_failures],
        );
        let fix = Task::fix_subtask(&r.task, fix_id, spec, new_failures);
        self.audit.append(AuditEvent::SubtaskSpawned {
            parent_ref: r.task.id().clone(),
            task_ref: fix.id().clone(),
            depth: fix_depth,
            triggering_validators: r.triggering_validators(),
        });
        self.previous = Some(normalized);
        let parent = std::mem::replace(&mut self.current, TaskAttempt::new(fix.clone()));
        self.done.push(parent);
        let step = Step::new(fix, self.session.clone())
            .with_iteration_cap(self.policy.max_inner_iterations());
        Closure::Governance(Awaiting {
            core: self,
            step,
            token: (),
        })
    }

    fn resolved(mut self: Box<Self>, task: &Task) -> Closure {
        self.audit.append(AuditEvent::RecoveryResolved {
            root_task_ref: task.root_task_ref().clone(),
            task_ref: task.id().clone(),
            depth: task.depth(),
            fix_attempts: self.fix_attempts(),
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
        let fix_attempts = self.fix_attempts();
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
            fix_attempts,
            audit: core.audit,
            json: Default::default(),
        }))
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
            fix_attempts: core.fix_attempts(),
            previous: core.previous.clone(),
            done: core.done.clone(),
            current: core.current.clone(),
            seal: StateSeal::of(
                core.audit.head(),
                &core.policy,
                core.budget.max(),
                budget_used,
            ),
            audit: core.audit.clone(),
        }
    }
}
