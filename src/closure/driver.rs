//! The convenience driver: a user-implemented [`Agent`] answers every phase.

use super::agent_error::AgentError;
use super::machine::Closure;
use super::policy::{FixBudget, RecoveryPolicy};
use super::record::ClosureRecord;
use crate::{
    closure::audit::AuditSink, closure::step::ExecutionOutput, closure::step::GovernanceDecision,
    closure::step::Next, closure::step::Session, closure::step::ValidationToken,
    closure::task::Task, closure::verdict::Verdict,
};

/// What [`run_to_closure`] calls: governance, pre-validation, execution and post-validation
/// of one iteration of one task (the root or a fix subtask).
///
/// Every method may fail with the agent's own error (an I/O failure, a crashed tool): the
/// closure then ends with [`ClosureFailure::Agent`](crate::closure::record::ClosureFailure::Agent) holding
/// the error's `Display` text, never a panic, and [`run_closure`] hands back the typed error
/// itself (its source chain intact). The error says what kind of failure it is through
/// [`AgentError`], which a batch uses to tell infrastructure from a cancellation. Verdicts
/// are not errors: a failing test run is a [`Verdict`] with a blocker.
///
/// # Examples
///
/// ```
/// use kleene::{Agent, closure::ExecutionOutput, closure::GovernanceDecision, closure::step::Session, Task, closure::step::ValidationToken, closure::Verdict};
///
/// struct AlwaysPasses;
/// impl Agent for AlwaysPasses {
///     type Error = std::io::Error;
///     fn govern(&mut self, _: &Task, _: &Session, _: u32) -> Result<GovernanceDecision, Self::Error> {
///         Ok(GovernanceDecision::Approve)
///     }
///     fn pre_validate(&mut self, _: &Task, _: u32) -> Result<Verdict, Self::Error> {
///         Ok(Verdict::clean())
///     }
///     fn execute(&mut self, _: &Task, _: &ValidationToken) -> Result<ExecutionOutput, Self::Error> {
///         Ok(ExecutionOutput::new("done"))
///     }
///     fn post_validate(&mut self, _: &Task, _: &ExecutionOutput) -> Result<Verdict, Self::Error> {
///         Ok(Verdict::clean())
///     }
/// }
/// ```
pub trait Agent {
    /// The agent's own error.
    type Error: AgentError;

    /// Governance's decision about `iteration` of `task` in `session`. Defaults to
    /// [`GovernanceDecision::Approve`]: an agent without a gate of its own approves every
    /// step, and execution still needs the single-use token the approval mints.
    ///
    /// # Errors
    ///
    /// The agent's own error.
    fn govern(
        &mut self,
        task: &Task,
        session: &Session,
        iteration: u32,
    ) -> Result<GovernanceDecision, Self::Error> {
        let _ = (task, session, iteration);
        Ok(GovernanceDecision::Approve)
    }

    /// The pre-execute validators' verdict on `task` (its spec is new content at every
    /// depth, so it is validated again). Defaults to [`Verdict::clean`]: an agent with
    /// no pre-execute validators has nothing to object to.
    ///
    /// # Errors
    ///
    /// The agent's own error.
    fn pre_validate(&mut self, task: &Task, iteration: u32) -> Result<Verdict, Self::Error> {
        let _ = (task, iteration);
        Ok(Verdict::clean())
    }

    /// Executes `task` under the token governance minted for this iteration.
    ///
    /// # Errors
    ///
    /// The agent's own error.
    fn execute(
        &mut self,
        task: &Task,
        token: &ValidationToken,
    ) -> Result<ExecutionOutput, Self::Error>;

    /// The post-execute validators' verdict on what execution produced. Keep the bounded
    /// output tail of a failing test run in the justification: it reaches the fix task
    /// verbatim.
    ///
    /// # Errors
    ///
    /// The agent's own error.
    fn post_validate(
        &mut self,
        task: &Task,
        output: &ExecutionOutput,
    ) -> Result<Verdict, Self::Error>;

    /// After a clean iteration: is the task complete? Defaults to [`Next::Complete`].
    ///
    /// # Errors
    ///
    /// The agent's own error.
    fn move_next(&mut self, task: &Task, iteration: u32) -> Result<Next, Self::Error> {
        let _ = (task, iteration);
        Ok(Next::Complete)
    }
}

impl Closure {
    /// Performs the one step that is due by asking `agent`, and returns the next state
    /// (a `Done` closure is returned unchanged).
    pub fn step<A: Agent + ?Sized>(self, agent: &mut A) -> Closure {
        self.advance(agent, &mut None)
    }

    /// [`step`](Self::step), also handing back the agent's error when the step failed with
    /// one (the closure is then done, its record holding the error's text).
    pub fn step_keeping_error<A: Agent + ?Sized>(
        self,
        agent: &mut A,
    ) -> (Closure, Option<A::Error>) {
        let mut error = None;
        let next = self.advance(agent, &mut error);
        (next, error)
    }

    /// [`step`](Self::step), putting the agent's error in `error` when the step failed with
    /// one. The closure is returned alone: a closure is a few hundred bytes, and a pair
    /// with the error would be copied once more at every step.
    fn advance<A: Agent + ?Sized>(self, agent: &mut A, error: &mut Option<A::Error>) -> Closure {
        let mut failed = |e: A::Error| {
            let message = e.to_string();
            *error = Some(e);
            message
        };
        match self {
            Closure::Governance(due) => {
                match agent.govern(due.task(), due.session(), due.iteration()) {
                    Ok(decision) => due.feed(decision),
                    Err(e) => due.fail(failed(e)),
                }
            }
            Closure::PreValidate(due) => match agent.pre_validate(due.task(), due.iteration()) {
                Ok(verdict) => due.feed(verdict),
                Err(e) => due.fail(failed(e)),
            },
            Closure::Execute(due) => match agent.execute(due.task(), due.token()) {
                Ok(output) => due.feed(output),
                Err(e) => due.fail(failed(e)),
            },
            Closure::PostValidate(due) => match agent.post_validate(due.task(), due.output()) {
                Ok(verdict) => due.feed(verdict),
                Err(e) => due.fail(failed(e)),
            },
            Closure::MoveNext(due) => match agent.move_next(due.task(), due.iteration()) {
                Ok(next) => due.feed(next),
                Err(e) => due.fail(failed(e)),
            },
            done @ Closure::Done(_) => done,
        }
    }
}

/// Runs `task` to its closure: the inner loop for the root, and a fix subtask (rendered from
/// the root spec and every failure so far) after each recoverable post-execute failure,
/// until a clean completion or a bound.
///
/// The closure gets its own fix budget of `policy.max_total_fix_attempts()`; use
/// [`run_to_closure_with`] to share a budget across closures or to forward audit events.
///
/// # Examples
///
/// ```
/// # use kleene::{Agent, closure::ExecutionOutput, closure::GovernanceDecision, closure::step::Session, Task, closure::step::ValidationToken, closure::Verdict};
/// # struct AlwaysPasses;
/// # impl Agent for AlwaysPasses {
/// #     type Error = std::io::Error;
/// #     fn govern(&mut self, _: &Task, _: &Session, _: u32) -> Result<GovernanceDecision, Self::Error> { Ok(GovernanceDecision::Approve) }
/// #     fn pre_validate(&mut self, _: &Task, _: u32) -> Result<Verdict, Self::Error> { Ok(Verdict::clean()) }
/// #     fn execute(&mut self, _: &Task, _: &ValidationToken) -> Result<ExecutionOutput, Self::Error> { Ok(ExecutionOutput::new("done")) }
/// #     fn post_validate(&mut self, _: &Task, _: &ExecutionOutput) -> Result<Verdict, Self::Error> { Ok(Verdict::clean()) }
/// # }
/// use kleene::{closure::run_to_closure, closure::RecoveryPolicy, closure::Spec, id::TaskId};
///
/// let task = Task::new(TaskId::new("x")?, Spec::new("add /login"));
/// let record = run_to_closure(task, Session::new("build", "demo")?, &mut AlwaysPasses,
///                             &RecoveryPolicy::default());
/// assert_eq!(record.outcome().resolved_depth(), Some(0));
/// assert!(record.audit().verify().is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn run_to_closure<A: Agent + ?Sized>(
    task: Task,
    session: Session,
    agent: &mut A,
    policy: &RecoveryPolicy,
) -> ClosureRecord {
    run_to_closure_with(task, session, agent, policy, &policy.fix_budget(), &mut ())
}

/// [`run_to_closure`] drawing fixes from a shared `budget`, forwarding every audit entry to
/// `sink` as soon as it is appended.
pub fn run_to_closure_with<A: Agent + ?Sized, S: AuditSink + ?Sized>(
    task: Task,
    session: Session,
    agent: &mut A,
    policy: &RecoveryPolicy,
    budget: &FixBudget,
    sink: &mut S,
) -> ClosureRecord {
    run_closure(task, session, agent, policy, budget, sink).record
}

/// How a closure driven by [`run_closure`] ended: its record and, when the agent failed,
/// the agent's error itself (typed, with its source chain).
#[derive(Debug)]
#[non_exhaustive]
pub struct ClosureRun<E> {
    /// The closure's record.
    pub record: ClosureRecord,
    /// The agent's error that ended the closure, if one did (the record's outcome is then
    /// [`ClosureOutcome::Failed`](crate::closure::ClosureOutcome::Failed) with its text).
    pub error: Option<E>,
}

/// [`run_to_closure_with`], keeping the agent's error typed instead of only its text.
///
/// # Examples
///
/// ```
/// use kleene::{closure::AgentError, closure::AgentErrorKind, closure::FixBudget, closure::RecoveryPolicy, closure::step::Session, closure::Spec, Task,
///              id::TaskId, closure::run_closure};
/// # use kleene::{Agent, closure::ExecutionOutput, closure::GovernanceDecision, closure::step::ValidationToken, closure::Verdict};
/// # struct Offline;
/// # impl Agent for Offline {
/// #     type Error = std::io::Error;
/// #     fn govern(&mut self, _: &Task, _: &Session, _: u32) -> Result<GovernanceDecision, Self::Error> { Ok(GovernanceDecision::Approve) }
/// #     fn pre_validate(&mut self, _: &Task, _: u32) -> Result<Verdict, Self::Error> { Ok(Verdict::clean()) }
/// #     fn execute(&mut self, _: &Task, _: &ValidationToken) -> Result<ExecutionOutput, Self::Error> {
/// #         Err(std::io::Error::new(std::io::ErrorKind::NotFound, "cargo is not installed"))
/// #     }
/// #     fn post_validate(&mut self, _: &Task, _: &ExecutionOutput) -> Result<Verdict, Self::Error> { Ok(Verdict::clean()) }
/// # }
/// let policy = RecoveryPolicy::default();
/// let task = Task::new(TaskId::new("x")?, Spec::new("build"));
/// let run = run_closure(task, Session::new("build", "demo")?, &mut Offline, &policy,
///                       &policy.fix_budget(), &mut ());
/// let error = run.error.expect("execution failed");
/// assert_eq!(AgentError::kind(&error), AgentErrorKind::Infrastructure);
/// assert!(!run.record.outcome().is_resolved());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn run_closure<A: Agent + ?Sized, S: AuditSink + ?Sized>(
    task: Task,
    session: Session,
    agent: &mut A,
    policy: &RecoveryPolicy,
    budget: &FixBudget,
    sink: &mut S,
) -> ClosureRun<A::Error> {
    let mut closure = Closure::start_with_budget(task, session, policy.clone(), budget);
    let mut forwarded = 0;
    let mut error = None;
    loop {
        let entries = closure.audit().entries();
        for (index, entry) in entries.iter().enumerate().skip(forwarded) {
            sink.record(index, entry);
        }
        forwarded = entries.len();
        closure = match closure {
            Closure::Done(record) => {
                return ClosureRun {
                    record: *record,
                    error,
                };
            }
            due => due.advance(agent, &mut error),
        };
    }
}
