//! The convenience driver: a user-implemented [`Agent`] answers every phase.

use super::{Closure, ClosureRecord, FixBudget, RecoveryPolicy};
use crate::{
    AuditSink, ExecutionOutput, GovernanceDecision, Next, Session, Task, ValidationToken, Verdict,
};

/// What [`run_to_closure`] calls: governance, pre-validation, execution and post-validation
/// of one iteration of one task (the root or a fix subtask).
///
/// Every method may fail with the agent's own error (an I/O failure, a crashed tool): the
/// closure then ends with [`ClosureFailure::Agent`](crate::ClosureFailure::Agent) holding
/// the error's `Display` text (include the cause there), never a panic. Verdicts are not
/// errors: a failing test run is a [`Verdict`] with a blocker.
///
/// # Examples
///
/// ```
/// use kleene::{Agent, ExecutionOutput, GovernanceDecision, Session, Task, ValidationToken, Verdict};
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
    type Error: std::fmt::Display;

    /// Governance's decision about `iteration` of `task` in `session`.
    ///
    /// # Errors
    ///
    /// The agent's own error.
    fn govern(
        &mut self,
        task: &Task,
        session: &Session,
        iteration: u32,
    ) -> Result<GovernanceDecision, Self::Error>;

    /// The pre-execute validators' verdict on `task` (its spec is new content at every
    /// depth, so it is validated again, R21).
    ///
    /// # Errors
    ///
    /// The agent's own error.
    fn pre_validate(&mut self, task: &Task, iteration: u32) -> Result<Verdict, Self::Error>;

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
        match self {
            Closure::Governance(due) => {
                match agent.govern(due.task(), due.session(), due.iteration()) {
                    Ok(decision) => due.feed(decision),
                    Err(e) => due.fail(e.to_string()),
                }
            }
            Closure::PreValidate(due) => match agent.pre_validate(due.task(), due.iteration()) {
                Ok(verdict) => due.feed(verdict),
                Err(e) => due.fail(e.to_string()),
            },
            Closure::Execute(due) => match agent.execute(due.task(), due.token()) {
                Ok(output) => due.feed(output),
                Err(e) => due.fail(e.to_string()),
            },
            Closure::PostValidate(due) => match agent.post_validate(due.task(), due.output()) {
                Ok(verdict) => due.feed(verdict),
                Err(e) => due.fail(e.to_string()),
            },
            Closure::MoveNext(due) => match agent.move_next(due.task(), due.iteration()) {
                Ok(next) => due.feed(next),
                Err(e) => due.fail(e.to_string()),
            },
            done @ Closure::Done(_) => done,
        }
    }
}

/// Runs `task` to its closure: the inner loop for the root, and a fix subtask (rendered from
/// the root spec and every failure so far) after each recoverable post-execute failure,
/// until a clean completion or a bound (R13, R21).
///
/// The closure gets its own fix budget of `policy.max_total_fix_attempts()`; use
/// [`run_to_closure_with`] to share a budget across closures or to forward audit events.
///
/// # Examples
///
/// ```
/// # use kleene::{Agent, ExecutionOutput, GovernanceDecision, Session, Task, ValidationToken, Verdict};
/// # struct AlwaysPasses;
/// # impl Agent for AlwaysPasses {
/// #     type Error = std::io::Error;
/// #     fn govern(&mut self, _: &Task, _: &Session, _: u32) -> Result<GovernanceDecision, Self::Error> { Ok(GovernanceDecision::Approve) }
/// #     fn pre_validate(&mut self, _: &Task, _: u32) -> Result<Verdict, Self::Error> { Ok(Verdict::clean()) }
/// #     fn execute(&mut self, _: &Task, _: &ValidationToken) -> Result<ExecutionOutput, Self::Error> { Ok(ExecutionOutput::new("done")) }
/// #     fn post_validate(&mut self, _: &Task, _: &ExecutionOutput) -> Result<Verdict, Self::Error> { Ok(Verdict::clean()) }
/// # }
/// use kleene::{run_to_closure, RecoveryPolicy, Spec, TaskId};
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
    let mut closure = Closure::start_with_budget(task, session, policy.clone(), budget);
    let mut forwarded = 0;
    loop {
        let entries = closure.audit().entries();
        for (index, entry) in entries.iter().enumerate().skip(forwarded) {
            sink.record(index, entry);
        }
        forwarded = entries.len();
        closure = match closure {
            Closure::Done(record) => return *record,
            due => due.step(agent),
        };
    }
}
