//! The inner loop as types: `Governance → PreValidate → Execute → PostValidate → MoveNext`.
//!
//! A phase is a type. [`Step<P>`] owns the task and what the phases so far have earned;
//! every transition consumes `self` and returns the next phase or a [`Halt`]. A transition
//! the current phase does not have is a compile error. The core is sans-IO: transitions take
//! the governance decision, validator verdicts and execution output as values and call
//! nothing, so any orchestrator can drive them.
//!
//! ```
//! use kleene::{closure::ExecutionOutput, closure::GovernanceDecision, closure::step::Moved, closure::step::Next, closure::step::PostValidation, closure::step::RecoverOn,
//!              closure::step::Session, closure::Spec, closure::step::Step, Task, id::TaskId, closure::Verdict};
//!
//! let session = Session::new("build", "demo")?;
//! let task = Task::new(TaskId::new("task_X")?, Spec::new("add /login"));
//! let (step, token) = Step::new(task, session).govern(GovernanceDecision::Approve)?;
//! let step = step.pre_validate(Verdict::clean())?;
//! // ... run the work with `token` in hand, then hand it back with the output:
//! let step = step.execute(token, ExecutionOutput::new("wrote src/login.rs"))?;
//! let PostValidation::Clean(step) = step.post_validate(Verdict::clean(), RecoverOn::Blockers) else {
//!     unreachable!("a clean verdict is clean")
//! };
//! let Moved::Completed(done) = step.move_next(Next::Complete) else { unreachable!() };
//! assert_eq!(done.task().id().as_str(), "task_X");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Transitions the phase does not have do not compile:
//!
//! ```compile_fail
//! use kleene::{closure::step::RecoverOn, closure::step::Session, closure::Spec, closure::step::Step, Task, id::TaskId, closure::Verdict};
//! let step = Step::new(Task::new(TaskId::new("t").unwrap(), Spec::new("x")),
//!                      Session::new("m", "p").unwrap());
//! step.post_validate(Verdict::clean(), RecoverOn::Blockers); // no post-validation before execution
//! ```

use std::num::NonZeroU32;

use crate::closure::audit::LoopPhase;
use crate::id::digest::{ByteTag, CanonicalHasher, Digest, canonical_enum, canonical_struct};
use crate::{
    closure::task::Task, closure::verdict::Verdict, id::IdError, id::ProjectId, id::SessionMode,
    id::TaskId, id::ValidatorId,
};

/// The default cap on inner-loop iterations of one task.
pub const DEFAULT_ITERATION_CAP: NonZeroU32 = match NonZeroU32::new(50) {
    Some(n) => n,
    None => unreachable!(),
};

/// What governance is asked about: the kind of work (the *mode*, such as `build` or
/// `review`) and the project it is for.
///
/// An agent's [`govern`](crate::closure::Agent::govern) receives it with every iteration,
/// so one governance gate can approve a build in one project and refuse it in another.
/// A task and every fix subtask of its closure run in the same session. It is recorded in
/// the closure's audit log, not in the plan: the same plan can run in several sessions.
/// [`Batch::run_agents`](crate::batch::Batch::run_agents) uses mode `build` and the run's
/// channel as the project.
///
/// ```
/// use kleene::closure::step::Session;
///
/// let session = Session::new("build", "shop")?;
/// assert_eq!(session.mode().as_str(), "build");
/// assert_eq!(session.project().as_str(), "shop");
/// # Ok::<(), kleene::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Session {
    pub(in crate::closure) mode: SessionMode,
    pub(in crate::closure) project: ProjectId,
}

impl Session {
    /// The session of `mode` work on `project`.
    ///
    /// # Errors
    ///
    /// [`IdError`] when either part is empty, too long or holds a control character.
    pub fn new(mode: impl Into<String>, project: impl Into<String>) -> Result<Self, IdError> {
        Ok(Self {
            mode: SessionMode::new(mode)?,
            project: ProjectId::new(project)?,
        })
    }

    /// Mode `build` in the project named as `channel` is: what a run that was given no
    /// session of its own uses.
    pub(crate) fn build_on(channel: &crate::id::ChannelId) -> Self {
        Self {
            mode: SessionMode::build(),
            project: ProjectId::named_as(channel),
        }
    }

    /// The mode.
    pub fn mode(&self) -> &SessionMode {
        &self.mode
    }

    /// The project.
    pub fn project(&self) -> &ProjectId {
        &self.project
    }
}

/// What governance decided about one step of one task.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GovernanceDecision {
    /// The step may proceed; a fresh [`ValidationToken`] is minted for it.
    Approve,
    /// The step may not proceed; the task halts.
    Deny {
        /// Why, verbatim.
        reason: String,
    },
}

/// Which post-execute failures the closure may auto-fix.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum RecoverOn {
    /// Only overridable blockers; a warning withholds approval and halts.
    #[default]
    Blockers,
    /// Overridable blockers and warnings.
    BlockersAndWarnings,
}

/// Proof that governance approved one iteration of one task in one session.
///
/// It cannot be built outside this crate, cloned or copied, and [`Step::execute`] consumes
/// it, so a token is used at most once. It is a derived blake3 digest over the session, the
/// task id, the spec digest, the depth and the iteration; a token minted for another task,
/// session or iteration is refused with a [`TokenError`].
///
/// ```compile_fail
/// # fn f(t: kleene::closure::step::ValidationToken) {
/// let copy = t.clone();
/// # }
/// ```
#[derive(Debug, PartialEq, Eq)]
pub struct ValidationToken {
    digest: Digest,
    task_id: TaskId,
    session: Session,
}

impl ValidationToken {
    pub(crate) fn mint(session: &Session, task: &Task, iteration: u32) -> Self {
        Self {
            digest: token_digest(session, task, iteration),
            task_id: task.id().clone(),
            session: session.clone(),
        }
    }

    /// The digest, for binding into names the executor creates (branches, worktrees).
    pub fn digest(&self) -> Digest {
        self.digest
    }

    /// The task the token was minted for.
    pub fn task_id(&self) -> &TaskId {
        &self.task_id
    }
}

fn token_digest(session: &Session, task: &Task, iteration: u32) -> Digest {
    let spec = task.spec().digest();
    CanonicalHasher::new("validation token")
        .put(&(session, task.id(), spec, task.depth(), iteration))
        .finish()
}

canonical_struct!(Session { mode, project });

// Approval and denial keep the one-byte tags of the optional reason they were first
// encoded as.
canonical_enum!(GovernanceDecision {
    Approve => ByteTag(0),
    Deny { reason } => ByteTag(1),
});

canonical_enum!(RecoverOn {
    Blockers => 0u64,
    BlockersAndWarnings => 1u64,
});

canonical_enum!(ExhaustedBound {
    Depth { max } => "depth",
    FixBudget { max } => "fix_budget",
});

// Tagged by `halt_type()`'s codes.
canonical_enum!(HaltReason {
    GovernanceDenied { reason } => "governance_denied",
    PreExecuteRejected { verdict } => "pre_execute_rejected",
    NonOverridableBlocker { verdict } => "non_overridable_blocker",
    WarningWithheld { verdict } => "warning_withheld",
    IterationCap { cap } => "iteration_cap",
    RecoveryExhausted { bound, verdict } => "recovery_exhausted",
    RecoveryStalled { verdict } => "recovery_stalled",
});

canonical_enum!(Next {
    Complete => "complete",
    Continue => "continue",
});

/// Why a token was refused at execution.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The token was minted in another session.
    #[error("token for task {task} was minted in another session")]
    WrongSession {
        /// The task being executed.
        task: TaskId,
    },
    /// The token was minted for another task.
    #[error("token minted for task {presented} presented to execute task {expected}")]
    WrongTask {
        /// The task being executed.
        expected: TaskId,
        /// The task the token was minted for.
        presented: TaskId,
    },
    /// The token was minted for another iteration, depth or spec of the same task.
    #[error("token for task {task} was minted for another iteration or spec")]
    Stale {
        /// The task being executed.
        task: TaskId,
    },
}

/// A token refused by [`Step::execute`], with the step given back unchanged.
#[derive(Debug, thiserror::Error)]
#[error("execute task {}: its validation token was refused", .step.task().id())]
pub struct TokenRejected {
    /// The step, still waiting for a matching token.
    pub step: Box<Step<Execute>>,
    /// Why the token was refused.
    #[source]
    pub error: TokenError,
}

/// What execution produced, as reported by the executor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ExecutionOutput {
    /// The executor's report, verbatim.
    pub text: String,
}

impl ExecutionOutput {
    /// An output with `text`.
    pub fn new(text: impl Into<String>) -> Self {
        Self { text: text.into() }
    }
}

/// Which budget ran out when recovery is exhausted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExhaustedBound {
    /// The next fix would be deeper than `max_recovery_depth`.
    Depth {
        /// The configured bound.
        max: u32,
    },
    /// The closure tree (or batch) used all of `max_total_fix_attempts`.
    FixBudget {
        /// The configured bound.
        max: u32,
    },
}

/// Why a task stopped without completing. Every halt is terminal for its task.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HaltReason {
    /// Governance denied the step.
    GovernanceDenied {
        /// Governance's reason, verbatim.
        reason: String,
    },
    /// A pre-execute validator blocked; pre-execute failures are never auto-fixed.
    PreExecuteRejected {
        /// The pre-execute verdict.
        verdict: Verdict,
    },
    /// A post-execute blocker that may not be overridden.
    NonOverridableBlocker {
        /// The post-execute verdict.
        verdict: Verdict,
    },
    /// A post-execute warning withholds approval and the policy does not auto-fix warnings.
    WarningWithheld {
        /// The post-execute verdict.
        verdict: Verdict,
    },
    /// The task ran more inner-loop iterations than allowed.
    IterationCap {
        /// The cap.
        cap: u32,
    },
    /// A recovery bound was reached (`recovery_exhausted`).
    RecoveryExhausted {
        /// Which bound.
        bound: ExhaustedBound,
        /// The verdict that would have needed another fix.
        verdict: Verdict,
    },
    /// The attempt's verdict equalled the previous attempt's (`recovery_stalled`).
    RecoveryStalled {
        /// The repeated verdict.
        verdict: Verdict,
    },
}

impl HaltReason {
    /// The snake-case name used in audit logs (`recovery_exhausted`, …).
    pub fn halt_type(&self) -> &'static str {
        match self {
            HaltReason::GovernanceDenied { .. } => "governance_denied",
            HaltReason::PreExecuteRejected { .. } => "pre_execute_rejected",
            HaltReason::NonOverridableBlocker { .. } => "non_overridable_blocker",
            HaltReason::WarningWithheld { .. } => "warning_withheld",
            HaltReason::IterationCap { .. } => "iteration_cap",
            HaltReason::RecoveryExhausted { .. } => "recovery_exhausted",
            HaltReason::RecoveryStalled { .. } => "recovery_stalled",
        }
    }

    /// The verdict that stopped the task, when a verdict did (not for a governance denial
    /// or the iteration cap): its failures, with their justifications, are what a person
    /// reading why the task halted needs, and what a fix was (or would have been) given.
    pub fn verdict(&self) -> Option<&Verdict> {
        match self {
            HaltReason::PreExecuteRejected { verdict }
            | HaltReason::NonOverridableBlocker { verdict }
            | HaltReason::WarningWithheld { verdict }
            | HaltReason::RecoveryExhausted { verdict, .. }
            | HaltReason::RecoveryStalled { verdict } => Some(verdict),
            HaltReason::GovernanceDenied { .. } | HaltReason::IterationCap { .. } => None,
        }
    }
}

/// A task that stopped, with the reason and the iteration it stopped in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("task {} halted: {}", .task.id(), .reason.halt_type())]
pub struct Halt {
    /// The task that halted.
    pub task: Task,
    /// The iteration it halted in (1-based).
    pub iteration: u32,
    /// Why.
    pub reason: HaltReason,
}

mod sealed {
    pub trait Sealed {}
}

/// A phase of the inner loop (type state). Sealed: only kleene's five phases implement it.
pub trait Phase: sealed::Sealed {
    /// The phase's snake-case name, as used in audit events.
    const NAME: &'static str;
    /// The phase as audit events and agent failures name it.
    const LOOP: LoopPhase;
    /// What a step in this phase is owed besides itself: the iteration's
    /// [`ValidationToken`] from governance's approval until execution spends it, nothing
    /// otherwise.
    type Held: std::fmt::Debug;
}

/// Governance decides whether the step may run (type state).
#[derive(Debug)]
pub struct Governance;

/// Pre-execute validation (type state). Remembers which token governance minted.
#[derive(Debug)]
pub struct PreValidate {
    token: Digest,
}

/// Execution (type state). Remembers the token and the pre-execute verdict.
#[derive(Debug)]
pub struct Execute {
    token: Digest,
    pre_verdict: Verdict,
}

/// Post-execute validation (type state). Holds what execution produced.
#[derive(Debug)]
pub struct PostValidate {
    pre_verdict: Verdict,
    output: ExecutionOutput,
}

/// Deciding what comes after a clean post-validation (type state).
#[derive(Debug)]
pub struct MoveNext {
    pre_verdict: Verdict,
    output: ExecutionOutput,
    post_verdict: Verdict,
}

macro_rules! phase {
    ($t:ty, $loop:ident, $name:literal, $held:ty) => {
        impl sealed::Sealed for $t {}
        impl Phase for $t {
            const NAME: &'static str = $name;
            const LOOP: LoopPhase = LoopPhase::$loop;
            type Held = $held;
        }
    };
}
phase!(Governance, Governance, "governance", ());
phase!(PreValidate, PreValidate, "pre_validate", ValidationToken);
phase!(Execute, Execute, "execute", ValidationToken);
phase!(PostValidate, PostValidate, "post_validate", ());
phase!(MoveNext, MoveNext, "move_next", ());

/// One task in one phase of the inner loop.
#[derive(Debug)]
pub struct Step<P: Phase> {
    task: Task,
    session: Session,
    iteration: u32,
    cap: NonZeroU32,
    phase: P,
}

impl<P: Phase> Step<P> {
    /// The task.
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// The session it runs in.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The current iteration, from 1.
    pub fn iteration(&self) -> u32 {
        self.iteration
    }

    /// The iteration cap.
    pub fn iteration_cap(&self) -> NonZeroU32 {
        self.cap
    }

    /// The current phase's name.
    pub fn phase_name(&self) -> &'static str {
        P::NAME
    }

    fn halt(self, reason: HaltReason) -> Halt {
        Halt {
            task: self.task,
            iteration: self.iteration,
            reason,
        }
    }

    /// Moves to the next phase, built from what this phase earned.
    fn map_phase<Q: Phase>(self, next: impl FnOnce(P) -> Q) -> Step<Q> {
        Step {
            task: self.task,
            session: self.session,
            iteration: self.iteration,
            cap: self.cap,
            phase: next(self.phase),
        }
    }
}

impl Step<Governance> {
    /// The first step of `task` in `session`, with the default iteration cap (50).
    pub fn new(task: Task, session: Session) -> Self {
        Self::at_iteration(task, session, 1, DEFAULT_ITERATION_CAP)
    }

    /// Sets the iteration cap.
    #[must_use]
    pub fn with_iteration_cap(mut self, cap: NonZeroU32) -> Self {
        self.cap = cap;
        self
    }

    pub(crate) fn at_iteration(
        task: Task,
        session: Session,
        iteration: u32,
        cap: NonZeroU32,
    ) -> Self {
        Step {
            task,
            session,
            iteration,
            cap,
            phase: Governance,
        }
    }

    /// Applies governance's decision. Approval mints a fresh [`ValidationToken`] for this
    /// task, session and iteration; the caller hands it back to [`Step::execute`].
    ///
    /// # Errors
    ///
    /// A [`Halt`] with [`HaltReason::GovernanceDenied`] when governance denies.
    // A halt carries the task it stopped; it is the terminal value, not a hot-path error.
    #[allow(clippy::result_large_err)]
    pub fn govern(
        self,
        decision: GovernanceDecision,
    ) -> Result<(Step<PreValidate>, ValidationToken), Halt> {
        match decision {
            GovernanceDecision::Deny { reason } => {
                Err(self.halt(HaltReason::GovernanceDenied { reason }))
            }
            GovernanceDecision::Approve => {
                let token = ValidationToken::mint(&self.session, &self.task, self.iteration);
                let step = self.map_phase(|Governance| PreValidate {
                    token: token.digest,
                });
                Ok((step, token))
            }
        }
    }
}

impl Step<PreValidate> {
    /// Applies the pre-execute verdict. Warnings pass; any blocker, overridable or not,
    /// halts: pre-execute failures are never auto-fixed.
    ///
    /// # Errors
    ///
    /// A [`Halt`] with [`HaltReason::PreExecuteRejected`] when the verdict has a blocker.
    // A halt carries the task it stopped; it is the terminal value, not a hot-path error.
    #[allow(clippy::result_large_err)]
    pub fn pre_validate(self, verdict: Verdict) -> Result<Step<Execute>, Halt> {
        if verdict.worst() == Some(crate::closure::verdict::Severity::Blocker) {
            return Err(self.halt(HaltReason::PreExecuteRejected { verdict }));
        }
        Ok(self.map_phase(|PreValidate { token }| Execute {
            token,
            pre_verdict: verdict,
        }))
    }
}

impl Step<Execute> {
    /// Records what execution produced, consuming the token governance minted for it.
    ///
    /// # Errors
    ///
    /// [`TokenRejected`] (with this step given back) when the token was minted for another
    /// session, task, iteration or spec.
    pub fn execute(
        self,
        token: ValidationToken,
        output: ExecutionOutput,
    ) -> Result<Step<PostValidate>, TokenRejected> {
        let error = if token.session != self.session {
            Some(TokenError::WrongSession {
                task: self.task.id().clone(),
            })
        } else if &token.task_id != self.task.id() {
            Some(TokenError::WrongTask {
                expected: self.task.id().clone(),
                presented: token.task_id.clone(),
            })
        } else if token.digest != self.phase.token {
            Some(TokenError::Stale {
                task: self.task.id().clone(),
            })
        } else {
            None
        };
        if let Some(error) = error {
            return Err(TokenRejected {
                step: Box::new(self),
                error,
            });
        }
        Ok(self.map_phase(|Execute { pre_verdict, .. }| PostValidate {
            pre_verdict,
            output,
        }))
    }

    /// The pre-execute verdict this step passed with.
    pub fn pre_verdict(&self) -> &Verdict {
        &self.phase.pre_verdict
    }
}

/// What post-execute validation decided.
#[derive(Debug)]
#[must_use]
pub enum PostValidation {
    /// No warning or blocker: the step may move on.
    Clean(Step<MoveNext>),
    /// An overridable blocker (or a warning, when opted in): the closure spawns a fix.
    Recoverable(Recoverable),
    /// A non-overridable blocker, or a warning that was not opted in.
    Halted(Halt),
}

/// A post-execute failure the closure may recover from by spawning a fix subtask.
///
/// Only [`Step::post_validate`] makes one (`#[non_exhaustive]`), so a recovery is always
/// backed by a real post-execute verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Recoverable {
    /// The task whose attempt failed.
    pub task: Task,
    /// Its session.
    pub session: Session,
    /// The iteration the failure happened in.
    pub iteration: u32,
    /// The full post-execute verdict.
    pub verdict: Verdict,
    /// What execution produced.
    pub output: ExecutionOutput,
}

impl Recoverable {
    /// The validators whose results triggered recovery.
    pub fn triggering_validators(&self) -> Vec<ValidatorId> {
        self.verdict.failing_validators()
    }
}

impl Step<PostValidate> {
    /// Classifies the post-execute verdict under `recover_on`.
    pub fn post_validate(self, verdict: Verdict, recover_on: RecoverOn) -> PostValidation {
        use crate::closure::verdict::Severity::{Blocker, Warning};
        if verdict.has_non_overridable_blocker() {
            return PostValidation::Halted(
                self.halt(HaltReason::NonOverridableBlocker { verdict }),
            );
        }
        match verdict.worst() {
            Some(Blocker) => self.recoverable(verdict),
            Some(Warning) if recover_on == RecoverOn::BlockersAndWarnings => {
                self.recoverable(verdict)
            }
            Some(Warning) => {
                PostValidation::Halted(self.halt(HaltReason::WarningWithheld { verdict }))
            }
            _ => PostValidation::Clean(self.map_phase(
                |PostValidate {
                     pre_verdict,
                     output,
                 }| MoveNext {
                    pre_verdict,
                    output,
                    post_verdict: verdict,
                },
            )),
        }
    }

    fn recoverable(self, verdict: Verdict) -> PostValidation {
        PostValidation::Recoverable(Recoverable {
            task: self.task,
            session: self.session,
            iteration: self.iteration,
            verdict,
            output: self.phase.output,
        })
    }

    /// What execution produced.
    pub fn output(&self) -> &ExecutionOutput {
        &self.phase.output
    }
}

/// What the task does after a clean iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Next {
    /// The task is done.
    Complete,
    /// The task has another step: back to governance.
    Continue,
}

/// The result of [`Step::move_next`].
#[derive(Debug)]
#[must_use]
pub enum Moved {
    /// The task completed cleanly.
    Completed(Completed),
    /// The task continues with its next iteration.
    Continue(Step<Governance>),
    /// The next iteration would pass the cap.
    Halted(Halt),
}

/// A task that completed with a clean post-validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    task: Task,
    session: Session,
    iterations: u32,
    pre_verdict: Verdict,
    output: ExecutionOutput,
    post_verdict: Verdict,
}

impl Completed {
    /// The task.
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// Its session.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// How many iterations it took.
    pub fn iterations(&self) -> u32 {
        self.iterations
    }

    /// The last pre-execute verdict.
    pub fn pre_verdict(&self) -> &Verdict {
        &self.pre_verdict
    }

    /// What the last execution produced.
    pub fn output(&self) -> &ExecutionOutput {
        &self.output
    }

    /// The last (clean) post-execute verdict.
    pub fn post_verdict(&self) -> &Verdict {
        &self.post_verdict
    }

    /// Takes the task back.
    pub fn into_task(self) -> Task {
        self.task
    }
}

impl Step<MoveNext> {
    /// Completes the task or returns to governance for its next iteration.
    pub fn move_next(self, next: Next) -> Moved {
        match next {
            Next::Complete => Moved::Completed(Completed {
                task: self.task,
                session: self.session,
                iterations: self.iteration,
                pre_verdict: self.phase.pre_verdict,
                output: self.phase.output,
                post_verdict: self.phase.post_verdict,
            }),
            Next::Continue if self.iteration >= self.cap.get() => {
                let cap = self.cap.get();
                Moved::Halted(self.halt(HaltReason::IterationCap { cap }))
            }
            Next::Continue => {
                let iteration = self.iteration + 1;
                Moved::Continue(Step::at_iteration(
                    self.task,
                    self.session,
                    iteration,
                    self.cap,
                ))
            }
        }
    }

    /// The clean post-execute verdict.
    pub fn post_verdict(&self) -> &Verdict {
        &self.phase.post_verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        closure::task::Spec, closure::verdict::Severity, closure::verdict::ValidatorResult,
    };

    fn session() -> Session {
        Session::new("build", "p").unwrap()
    }

    fn task(id: &str) -> Task {
        Task::new(TaskId::new(id).unwrap(), Spec::new("do it"))
    }

    fn blocker(overridable: bool) -> Verdict {
        Verdict::new([ValidatorResult::new(
            ValidatorId::new("tests").unwrap(),
            Severity::Blocker,
            overridable,
            "failed",
        )])
    }

    fn warning() -> Verdict {
        Verdict::new([ValidatorResult::new(
            ValidatorId::new("lint").unwrap(),
            Severity::Warning,
            true,
            "unused",
        )])
    }

    /// A halt names the verdict that stopped it, and only a verdict did.
    #[test]
    fn a_halt_reason_gives_the_verdict_that_stopped_it() {
        let v = blocker(false);
        let with_verdict = [
            HaltReason::PreExecuteRejected { verdict: v.clone() },
            HaltReason::NonOverridableBlocker { verdict: v.clone() },
            HaltReason::WarningWithheld { verdict: v.clone() },
            HaltReason::RecoveryExhausted {
                bound: ExhaustedBound::Depth { max: 0 },
                verdict: v.clone(),
            },
            HaltReason::RecoveryStalled { verdict: v.clone() },
        ];
        for reason in &with_verdict {
            assert_eq!(reason.verdict(), Some(&v), "{}", reason.halt_type());
        }
        let denied = HaltReason::GovernanceDenied {
            reason: "no".into(),
        };
        assert_eq!(denied.verdict(), None);
        assert_eq!(HaltReason::IterationCap { cap: 3 }.verdict(), None);
    }

    fn to_post(t: Task) -> Step<PostValidate> {
        let (s, tok) = Step::new(t, session())
            .govern(GovernanceDecision::Approve)
            .unwrap();
        s.pre_validate(Verdict::clean())
            .unwrap()
            .execute(tok, ExecutionOutput::new("ok"))
            .unwrap()
    }

    #[test]
    fn denial_and_pre_blockers_halt() {
        let h = Step::new(task("t"), session())
            .govern(GovernanceDecision::Deny {
                reason: "no".into(),
            })
            .unwrap_err();
        assert_eq!(h.reason.halt_type(), "governance_denied");
        let (s, _) = Step::new(task("t"), session())
            .govern(GovernanceDecision::Approve)
            .unwrap();
        let h = s.pre_validate(blocker(true)).unwrap_err();
        assert!(matches!(h.reason, HaltReason::PreExecuteRejected { .. }));
        let (s, _) = Step::new(task("t"), session())
            .govern(GovernanceDecision::Approve)
            .unwrap();
        assert!(s.pre_validate(warning()).is_ok());
    }

    #[test]
    fn post_validation_classifies() {
        assert!(matches!(
            to_post(task("t")).post_validate(blocker(false), RecoverOn::BlockersAndWarnings),
            PostValidation::Halted(Halt {
                reason: HaltReason::NonOverridableBlocker { .. },
                ..
            })
        ));
        assert!(matches!(
            to_post(task("t")).post_validate(blocker(true), RecoverOn::Blockers),
            PostValidation::Recoverable(_)
        ));
        assert!(matches!(
            to_post(task("t")).post_validate(warning(), RecoverOn::Blockers),
            PostValidation::Halted(Halt {
                reason: HaltReason::WarningWithheld { .. },
                ..
            })
        ));
        assert!(matches!(
            to_post(task("t")).post_validate(warning(), RecoverOn::BlockersAndWarnings),
            PostValidation::Recoverable(_)
        ));
    }

    #[test]
    fn tokens_are_bound_to_task_session_and_iteration() {
        let (_, tok_a) = Step::new(task("a"), session())
            .govern(GovernanceDecision::Approve)
            .unwrap();
        let (s_b, tok_b) = Step::new(task("b"), session())
            .govern(GovernanceDecision::Approve)
            .unwrap();
        let s_b = s_b.pre_validate(Verdict::clean()).unwrap();
        let rejected = s_b.execute(tok_a, ExecutionOutput::default()).unwrap_err();
        assert!(matches!(rejected.error, TokenError::WrongTask { .. }));
        let s_b = *rejected.step;
        assert!(s_b.execute(tok_b, ExecutionOutput::default()).is_ok());

        let other = Session::new("review", "p").unwrap();
        let (_, tok_other) = Step::new(task("c"), other)
            .govern(GovernanceDecision::Approve)
            .unwrap();
        let (s_c, _) = Step::new(task("c"), session())
            .govern(GovernanceDecision::Approve)
            .unwrap();
        let err = s_c
            .pre_validate(Verdict::clean())
            .unwrap()
            .execute(tok_other, ExecutionOutput::default())
            .unwrap_err();
        assert!(matches!(err.error, TokenError::WrongSession { .. }));
    }

    #[test]
    fn a_stale_token_from_an_earlier_iteration_is_refused() {
        let (s, tok1) = Step::new(task("t"), session())
            .govern(GovernanceDecision::Approve)
            .unwrap();
        let (s2, tok1b) = Step::new(task("t"), session())
            .govern(GovernanceDecision::Approve)
            .unwrap();
        drop(s2);
        let post = s
            .pre_validate(Verdict::clean())
            .unwrap()
            .execute(tok1, ExecutionOutput::default())
            .unwrap();
        let PostValidation::Clean(mv) = post.post_validate(Verdict::clean(), RecoverOn::Blockers)
        else {
            panic!("clean")
        };
        let Moved::Continue(g) = mv.move_next(Next::Continue) else {
            panic!("continue")
        };
        assert_eq!(g.iteration(), 2);
        let (s, _tok2) = g.govern(GovernanceDecision::Approve).unwrap();
        let err = s
            .pre_validate(Verdict::clean())
            .unwrap()
            .execute(tok1b, ExecutionOutput::default())
            .unwrap_err();
        assert!(matches!(err.error, TokenError::Stale { .. }));
    }

    #[test]
    fn iteration_cap_halts() {
        let cap = NonZeroU32::new(3).unwrap();
        let mut g = Step::new(task("t"), session()).with_iteration_cap(cap);
        let halt = loop {
            let (s, tok) = g.govern(GovernanceDecision::Approve).unwrap();
            let post = s
                .pre_validate(Verdict::clean())
                .unwrap()
                .execute(tok, ExecutionOutput::default())
                .unwrap();
            let PostValidation::Clean(mv) =
                post.post_validate(Verdict::clean(), RecoverOn::Blockers)
            else {
                panic!("clean")
            };
            match mv.move_next(Next::Continue) {
                Moved::Continue(next) => g = next,
                Moved::Halted(h) => break h,
                Moved::Completed(_) => panic!("never completes"),
            }
        };
        assert_eq!(halt.iteration, 3);
        assert_eq!(halt.reason, HaltReason::IterationCap { cap: 3 });
    }
}
