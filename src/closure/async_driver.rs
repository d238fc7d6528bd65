//! The closure in async form: an [`AsyncAgent`] answers every phase with a future, and
//! [`run_closure_async`] drives the same sans-IO [`Closure`] machine as [`run_closure`]
//! (feature `async`).
//!
//! Nothing here depends on a runtime: the driver awaits only the agent's futures, so it runs
//! under tokio, async-std or a single-threaded executor alike. The machine decides
//! everything (fix subtasks, bounds, stalls, audit); the driver only asks and feeds, so a
//! closure driven here ends with the same [`ClosureRecord`] as the sync driver given the
//! same answers.
//!
//! ```
//! use kleene::closure::{AsyncAgent, ExecutionOutput, GovernanceDecision, RecoveryPolicy,
//!                       step::Session, Spec, step::ValidationToken, Verdict, run_closure_async};
//! use kleene::{Task, id::TaskId};
//!
//! /// Awaits its (simulated) model for the execution.
//! struct Model;
//! impl AsyncAgent for Model {
//!     type Error = std::io::Error;
//!     async fn govern(&mut self, _: &Task, _: &Session, _: u32) -> std::io::Result<GovernanceDecision> {
//!         Ok(GovernanceDecision::Approve)
//!     }
//!     async fn pre_validate(&mut self, _: &Task, _: u32) -> std::io::Result<Verdict> {
//!         Ok(Verdict::clean())
//!     }
//!     async fn execute(&mut self, _: &Task, _: &ValidationToken) -> std::io::Result<ExecutionOutput> {
//!         let answer = async { "patched" }.await; // a model call
//!         Ok(ExecutionOutput::new(answer))
//!     }
//!     async fn post_validate(&mut self, _: &Task, _: &ExecutionOutput) -> std::io::Result<Verdict> {
//!         Ok(Verdict::clean())
//!     }
//! }
//!
//! let policy = RecoveryPolicy::default();
//! let task = Task::new(TaskId::new("x")?, Spec::new("add /login"));
//! let run = futures_executor::block_on(run_closure_async(
//!     task, Session::new("build", "demo")?, &mut Model, &policy, &policy.fix_budget(), &mut ()));
//! assert_eq!(run.record.outcome().resolved_depth(), Some(0));
//! assert!(run.error.is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::future::Future;

use super::agent_error::AgentError;
use super::driver::ClosureRun;
use super::machine::Closure;
use super::policy::{FixBudget, RecoveryPolicy};
use super::record::ClosureRecord;
use crate::{
    closure::audit::AuditSink, closure::step::ExecutionOutput, closure::step::GovernanceDecision,
    closure::step::Next, closure::step::Session, closure::step::ValidationToken,
    closure::task::Task, closure::verdict::Verdict,
};

/// The async counterpart of [`Agent`](super::Agent): governance, pre-validation, execution
/// and post-validation of one iteration of one task, each answered by a future.
///
/// Implement the methods with `async fn`. The futures must be `Send`, so a closure (and a
/// batch) driven by an async agent can be spawned on a multi-threaded runtime from generic
/// code; an agent whose state is not `Send` (an `Rc`) keeps it behind a `Send` handle.
/// Errors and verdicts mean what they mean for the sync agent. Only `execute` and
/// `post_validate` must be written; governance approves and pre-validation passes unless
/// the agent says otherwise.
///
/// # Examples
///
/// ```
/// use kleene::closure::{AsyncAgent, ExecutionOutput, GovernanceDecision, step::Session,
///                       step::ValidationToken, Verdict};
/// use kleene::Task;
///
/// struct AlwaysPasses;
/// impl AsyncAgent for AlwaysPasses {
///     type Error = std::io::Error;
///     async fn govern(&mut self, _: &Task, _: &Session, _: u32) -> std::io::Result<GovernanceDecision> {
///         Ok(GovernanceDecision::Approve)
///     }
///     async fn pre_validate(&mut self, _: &Task, _: u32) -> std::io::Result<Verdict> {
///         Ok(Verdict::clean())
///     }
///     async fn execute(&mut self, _: &Task, _: &ValidationToken) -> std::io::Result<ExecutionOutput> {
///         Ok(ExecutionOutput::new("done"))
///     }
///     async fn post_validate(&mut self, _: &Task, _: &ExecutionOutput) -> std::io::Result<Verdict> {
///         Ok(Verdict::clean())
///     }
/// }
/// ```
pub trait AsyncAgent {
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
    ) -> impl Future<Output = Result<GovernanceDecision, Self::Error>> + Send {
        let _ = (task, session, iteration);
        std::future::ready(Ok(GovernanceDecision::Approve))
    }

    /// The pre-execute validators' verdict on `task`. Defaults to [`Verdict::clean`]: an
    /// agent with no pre-execute validators has nothing to object to.
    ///
    /// # Errors
    ///
    /// The agent's own error.
    fn pre_validate(
        &mut self,
        task: &Task,
        iteration: u32,
    ) -> impl Future<Output = Result<Verdict, Self::Error>> + Send {
        let _ = (task, iteration);
        std::future::ready(Ok(Verdict::clean()))
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
    ) -> impl Future<Output = Result<ExecutionOutput, Self::Error>> + Send;

    /// The post-execute validators' verdict on what execution produced (keep a failing test
    /// run's bounded output tail in the justification: it reaches the fix task verbatim).
    ///
    /// # Errors
    ///
    /// The agent's own error.
    fn post_validate(
        &mut self,
        task: &Task,
        output: &ExecutionOutput,
    ) -> impl Future<Output = Result<Verdict, Self::Error>> + Send;

    /// After a clean iteration: is the task complete? Defaults to [`Next::Complete`].
    ///
    /// # Errors
    ///
    /// The agent's own error.
    fn move_next(
        &mut self,
        task: &Task,
        iteration: u32,
    ) -> impl Future<Output = Result<Next, Self::Error>> + Send {
        let _ = (task, iteration);
        std::future::ready(Ok(Next::Complete))
    }
}

impl Closure {
    /// [`step`](Self::step) with an [`AsyncAgent`]: performs the one step that is due by
    /// awaiting `agent`, and returns the next state (a `Done` closure is returned
    /// unchanged).
    pub async fn step_async<A: AsyncAgent + ?Sized>(self, agent: &mut A) -> Closure {
        self.step_async_keeping_error(agent).await.0
    }

    /// [`step_async`](Self::step_async), also handing back the agent's error when the step
    /// failed with one (the closure is then done, its record holding the error's text).
    pub async fn step_async_keeping_error<A: AsyncAgent + ?Sized>(
        self,
        agent: &mut A,
    ) -> (Closure, Option<A::Error>) {
        match self {
            Closure::Governance(due) => {
                match agent
                    .govern(due.task(), due.session(), due.iteration())
                    .await
                {
                    Ok(decision) => (due.feed(decision), None),
                    Err(e) => (due.fail(e.to_string()), Some(e)),
                }
            }
            Closure::PreValidate(due) => {
                match agent.pre_validate(due.task(), due.iteration()).await {
                    Ok(verdict) => (due.feed(verdict), None),
                    Err(e) => (due.fail(e.to_string()), Some(e)),
                }
            }
            Closure::Execute(due) => match agent.execute(due.task(), due.token()).await {
                Ok(output) => (due.feed(output), None),
                Err(e) => (due.fail(e.to_string()), Some(e)),
            },
            Closure::PostValidate(due) => {
                match agent.post_validate(due.task(), due.output()).await {
                    Ok(verdict) => (due.feed(verdict), None),
                    Err(e) => (due.fail(e.to_string()), Some(e)),
                }
            }
            Closure::MoveNext(due) => match agent.move_next(due.task(), due.iteration()).await {
                Ok(next) => (due.feed(next), None),
                Err(e) => (due.fail(e.to_string()), Some(e)),
            },
            done @ Closure::Done(_) => (done, None),
        }
    }
}

/// [`run_to_closure`](super::run_to_closure) with an [`AsyncAgent`]: the closure gets its
/// own fix budget of `policy.max_total_fix_attempts()`.
pub async fn run_to_closure_async<A: AsyncAgent + ?Sized>(
    task: Task,
    session: Session,
    agent: &mut A,
    policy: &RecoveryPolicy,
) -> ClosureRecord {
    run_closure_async(task, session, agent, policy, &policy.fix_budget(), &mut ())
        .await
        .record
}

/// [`run_closure`](super::run_closure) with an [`AsyncAgent`]: runs `task` to its closure,
/// drawing fixes from `budget` and forwarding every audit entry to `sink` as soon as it is
/// appended, and keeps the agent's error typed.
///
/// The future is `Send` when the sink is; dropping it abandons the closure (nothing of it
/// was persisted here).
///
/// # Examples
///
/// ```
/// # use kleene::closure::{AsyncAgent, ExecutionOutput, GovernanceDecision, step::ValidationToken, Verdict};
/// # struct Offline;
/// # impl AsyncAgent for Offline {
/// #     type Error = std::io::Error;
/// #     async fn govern(&mut self, _: &Task, _: &Session, _: u32) -> std::io::Result<GovernanceDecision> { Ok(GovernanceDecision::Approve) }
/// #     async fn pre_validate(&mut self, _: &Task, _: u32) -> std::io::Result<Verdict> { Ok(Verdict::clean()) }
/// #     async fn execute(&mut self, _: &Task, _: &ValidationToken) -> std::io::Result<ExecutionOutput> {
/// #         Err(std::io::Error::new(std::io::ErrorKind::NotFound, "the model is offline"))
/// #     }
/// #     async fn post_validate(&mut self, _: &Task, _: &ExecutionOutput) -> std::io::Result<Verdict> { Ok(Verdict::clean()) }
/// # }
/// use kleene::closure::{AgentError, AgentErrorKind, RecoveryPolicy, step::Session, Spec, run_closure_async};
/// use kleene::{Task, id::TaskId};
///
/// let policy = RecoveryPolicy::default();
/// let task = Task::new(TaskId::new("x")?, Spec::new("build"));
/// let run = futures_executor::block_on(run_closure_async(
///     task, Session::new("build", "demo")?, &mut Offline, &policy, &policy.fix_budget(), &mut ()));
/// let error = run.error.expect("execution failed");
/// assert_eq!(AgentError::kind(&error), AgentErrorKind::Infrastructure);
/// assert!(!run.record.outcome().is_resolved());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub async fn run_closure_async<A: AsyncAgent + ?Sized, S: AuditSink + ?Sized>(
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
            due => {
                let (next, failed) = due.step_async_keeping_error(agent).await;
                if failed.is_some() {
                    error = failed;
                }
                next
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::closure::{Agent, Severity, Spec, ValidatorResult, run_closure};
    use crate::id::{TaskId, ValidatorId};

    /// Fails its first post-validation, then passes: the same answers in both forms.
    struct Flaky;

    fn post(task: &Task) -> Verdict {
        if task.depth() == 0 {
            let tests = ValidatorId::new("tests").unwrap();
            Verdict::new([ValidatorResult::new(
                tests,
                Severity::Blocker,
                true,
                "1 failed",
            )])
        } else {
            Verdict::clean()
        }
    }

    impl Agent for Flaky {
        type Error = std::convert::Infallible;
        fn govern(
            &mut self,
            _: &Task,
            _: &Session,
            _: u32,
        ) -> Result<GovernanceDecision, Self::Error> {
            Ok(GovernanceDecision::Approve)
        }
        fn pre_validate(&mut self, _: &Task, _: u32) -> Result<Verdict, Self::Error> {
            Ok(Verdict::clean())
        }
        fn execute(
            &mut self,
            _: &Task,
            _: &ValidationToken,
        ) -> Result<ExecutionOutput, Self::Error> {
            Ok(ExecutionOutput::new("built"))
        }
        fn post_validate(
            &mut self,
            task: &Task,
            _: &ExecutionOutput,
        ) -> Result<Verdict, Self::Error> {
            Ok(post(task))
        }
    }

    impl AsyncAgent for Flaky {
        type Error = std::convert::Infallible;
        async fn govern(
            &mut self,
            _: &Task,
            _: &Session,
            _: u32,
        ) -> Result<GovernanceDecision, Self::Error> {
            Ok(GovernanceDecision::Approve)
        }
        async fn pre_validate(&mut self, _: &Task, _: u32) -> Result<Verdict, Self::Error> {
            Ok(Verdict::clean())
        }
        async fn execute(
            &mut self,
            _: &Task,
            _: &ValidationToken,
        ) -> Result<ExecutionOutput, Self::Error> {
            Ok(ExecutionOutput::new("built"))
        }
        async fn post_validate(
            &mut self,
            task: &Task,
            _: &ExecutionOutput,
        ) -> Result<Verdict, Self::Error> {
            Ok(post(task))
        }
    }

    #[test]
    fn the_async_driver_ends_with_the_sync_drivers_record() {
        let policy = RecoveryPolicy::default();
        let session = Session::new("build", "demo").unwrap();
        let task = Task::new(TaskId::new("x").unwrap(), Spec::new("add /login"));
        let sync = run_closure(
            task.clone(),
            session.clone(),
            &mut Flaky,
            &policy,
            &policy.fix_budget(),
            &mut (),
        );
        let record =
            futures_executor::block_on(run_to_closure_async(task, session, &mut Flaky, &policy));
        assert_eq!(record.outcome().resolved_depth(), Some(1));
        assert_eq!(record.digest(), sync.record.digest());
    }
}
