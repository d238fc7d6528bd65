//! Bounded auto-fix recovery: run a task to its closure.
//!
//! A task runs the inner loop `governance → pre_validate → execute → post_validate →
//! move_next`. A recoverable post-execute failure (an overridable blocker; a warning only
//! when [`RecoverOn::BlockersAndWarnings`](crate::closure::step::RecoverOn) opts in) spawns a fix subtask
//! `{root}_fix_{depth}` whose spec is rendered from the root's spec and every failure so far
//! ([`render_recovery_spec`]). The closure ends at the first clean completion
//! (`recovery_resolved`) or at a bound: the depth and the global fix budget
//! (`recovery_exhausted`), a verdict that repeats the previous attempt's after
//! normalisation (`recovery_stalled`, see [`VerdictNormalizer`](crate::closure::verdict::VerdictNormalizer)), or any other halt
//! (governance denial, pre-execute rejection, non-overridable blocker, withheld warning,
//! iteration cap). Every step is audited in a hash-chained [`AuditLog`](crate::closure::audit::AuditLog).
//!
//! Drive it with [`run_to_closure`] over your [`Agent`], or step by step with the sans-IO
//! [`Closure`] machine, persisting its [`ClosureState`] between steps. Both produce the same
//! immutable [`ClosureRecord`]; so does `run_closure_async` over an `AsyncAgent` (feature
//! `async`).
//!
//! ```
//! use kleene::{closure::Closure, closure::ExecutionOutput, closure::GovernanceDecision, closure::step::Next, closure::RecoveryPolicy, closure::step::Session,
//!              closure::Severity, closure::Spec, Task, id::TaskId, id::ValidatorId, closure::ValidatorResult, closure::Verdict};
//!
//! let failing = Verdict::new([ValidatorResult::new(
//!     ValidatorId::new("tests")?, Severity::Blocker, true, "test login ... FAILED")]);
//! let mut posts = vec![Verdict::clean(), failing].into_iter().rev();
//! let task = Task::new(TaskId::new("x")?, Spec::new("add /login"));
//! let mut closure = Closure::start(task, Session::new("build", "demo")?, RecoveryPolicy::default());
//! let record = loop {
//!     closure = match closure {
//!         Closure::Governance(due) => due.feed(GovernanceDecision::Approve),
//!         Closure::PreValidate(due) => due.feed(Verdict::clean()),
//!         Closure::Execute(due) => due.feed(ExecutionOutput::new("patched")),
//!         Closure::PostValidate(due) => due.feed(posts.next().unwrap_or_default()),
//!         Closure::MoveNext(due) => due.feed(Next::Complete),
//!         Closure::Done(record) => break record,
//!     };
//! };
//! assert_eq!(record.outcome().resolved_depth(), Some(1));
//! assert_eq!(record.attempts()[1].task.id().as_str(), "x_fix_1");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod agent_error;
#[cfg(feature = "async")]
mod async_driver;
pub mod audit;
pub(crate) mod bound;
mod driver;
pub mod machine;
pub mod policy;
pub mod record;
mod spec;
pub mod step;
pub mod task;
pub mod verdict;
pub(crate) mod wire;

pub use agent_error::{AgentError, AgentErrorKind};
#[cfg(feature = "async")]
pub use async_driver::{AsyncAgent, run_closure_async, run_to_closure_async};
pub use driver::{Agent, ClosureRun, run_closure, run_to_closure, run_to_closure_with};
pub use machine::{Closure, ClosureState};
pub use policy::{FixBudget, RecoveryPolicy};
pub use record::{ClosureOutcome, ClosureRecord};
pub use spec::render_recovery_spec;
pub use step::{ExecutionOutput, GovernanceDecision, Session, ValidationToken};
pub use task::{Spec, Task};
pub use verdict::{Severity, ValidatorResult, Verdict};
