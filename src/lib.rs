//! kleene runs agent-driven build work as a typed state machine with bounded, auditable
//! recovery.
//!
//! A task runs to its *closure*: each recoverable failure spawns a fix subtask rendered from
//! the original spec and every failure so far, until the checks pass (here at depth 2) or a
//! bound halts it, and every step lands in a hash-chained audit log.
//!
//! ```
//! use kleene::closure::{ExecutionOutput, GovernanceDecision, step::Next, RecoveryPolicy, step::Session,
//!                       Severity, Spec, ValidatorResult, Verdict};
//! use kleene::id::{TaskId, ValidatorId};
//! use kleene::{closure::Closure, Task};
//!
//! let failing = |test: &str| -> Result<Verdict, kleene::id::IdError> {
//!     Ok(Verdict::new([ValidatorResult::new(ValidatorId::new("tests")?, Severity::Blocker,
//!         true, format!("test {test} ... FAILED"))]))
//! };
//! let mut post_verdicts = vec![failing("login")?, failing("logout")?, Verdict::clean()].into_iter();
//! let task = Task::new(TaskId::new("task_X")?, Spec::new("add /login and /logout"));
//! let mut closure = Closure::start(task, Session::new("build", "demo")?, RecoveryPolicy::default());
//! let record = loop {
//!     closure = match closure {
//!         Closure::Governance(due) => due.feed(GovernanceDecision::Approve),
//!         Closure::PreValidate(due) => due.feed(Verdict::clean()),
//!         Closure::Execute(due) => {
//!             let output = ExecutionOutput::new(format!("patched {}", due.task().id()));
//!             due.feed(output)
//!         }
//!         Closure::PostValidate(due) => due.feed(post_verdicts.next().unwrap_or_default()),
//!         Closure::MoveNext(due) => due.feed(Next::Complete),
//!         Closure::Done(record) => break record,
//!     };
//! };
//! assert_eq!(record.outcome().resolved_depth(), Some(2));
//! let ids: Vec<_> = record.attempts().iter().map(|a| a.task.id().as_str()).collect();
//! assert_eq!(ids, ["task_X", "task_X_fix_1", "task_X_fix_2"]);
//! assert!(record.audit().verify().is_ok());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Start here
//!
//! | You have | Start with |
//! |---|---|
//! | one task and an agent that can govern, validate and execute it | [`closure::run_to_closure`] over your [`Agent`]; it returns the [`closure::ClosureRecord`] |
//! | your own runtime (async, a queue, a UI) that must make every call itself | the sans-IO [`closure::Closure`] machine above: feed it one answer at a time and persist its [`closure::ClosureState`] between steps |
//! | a plan of many tasks and an agent that writes each task's file | [`AppBuildPlan`] → [`ValidatedPlan`] → [`Batch::run_agents`] (or `run_agents_async` for an `AsyncAgent`, feature `async`): every task runs to its closure; then [`Batch::accept`] seals the record |
//! | a plan whose calls write several files, or a session and policy of your own | [`Batch::run`] with a [`batch::ClosureWorker`] over your [`batch::BatchAgent`], then [`acceptance::accept`] and [`acceptance::export`] |
//! | agents that run commands (`cargo test`, a coding agent's CLI) | [`process::run`](crate::process) (feature `process`, unix): a process group, a timeout, bounded output, and a PID namespace where the host allows it |
//! | shell commands and no Rust | the `kleene` command-line tool (the package `kleene-cli`; `cargo install --path cli` in this repository): `kleene run PLAN`, then `kleene accept` and `kleene export` |
//!
//! The modules are named for the concepts: [`plan`] (plans, tasks' kinds, owned paths),
//! [`closure`] (a task, its phases, verdicts and the closure that runs it), [`batch`] (a plan's
//! run, its evidence and journal), [`closure::audit`] (the hash-chained audit log), [`snapshot`] (the
//! files a run accepted), [`acceptance`] (the record, the archive, verification), [`id`]
//! (identifiers and digests), [`checkpoint`] (tasks, closures and evidence as bytes),
//! [`signing`] (signatures over what acceptance records), [`error`] (every error in one type)
//! and, on unix, `stage` (a call's staged workspace) and `process` (running commands).
//!
//! [`audit`]: closure::audit
//!
//! # Terms
//!
//! The words the rest of these docs use, each in one sentence:
//!
//! - **Closure**: one task run until its checks pass or a bound stops it; every failure
//!   spawns a *fix subtask* (`x_fix_1`, `x_fix_2`, …) whose spec carries the task's
//!   *prior failures*.
//! - **Verdict**: what validators said about one attempt; a *blocker* in it is a failure a
//!   fix may address.
//! - **Session**: the kind of work (`build`, `review`) and the project it is for, which
//!   governance approves each iteration against ([`closure::step::Session`]).
//! - **Channel**: the name a run's evidence is kept under, in a journal. It is *trusted*:
//!   kleene resumes only evidence of the same channel, so two runs never mix.
//! - **Call**: one attempt of a planned task by your worker, numbered from 1. It is
//!   *reserved* in the journal before it starts and *settled* after. A call a crash left
//!   reserved is a *pending turn*; `pending_turn_replay` says whether a resume may make it
//!   again ([`batch::worker::PendingTurnReplay`]).
//! - **Drained**: a task never called because a prerequisite failed.
//! - **Evidence**: everything a run learnt, as append-only events; the **acceptance record**
//!   binds the plan, the evidence and the accepted files by digest.
//! - **Lane** and **module**: a plan task's kind (model, persistence, service, page,
//!   config, auth) and the feature it belongs to. *Normalisation* adds the module lane a
//!   module needs and the edges between lanes; *consolidation* merges a module's
//!   persistence tasks into one ([`plan`]).
//!
//! # Errors
//!
//! Each concern returns its own error enum ([`plan::PlanLoadError`], [`batch::BatchError`],
//! [`acceptance::VerifyError`], …), whose messages read after "failed to …" and whose
//! [`source`](std::error::Error::source) carries the cause instead of repeating it. Every one
//! converts into [`Error`] with `?`; [`error::Chain`] prints an error with its causes.
//!
//! # Should I use this crate?
//!
//! Use it when agents (or scripts) change files on your behalf and you need to know, and
//! prove afterwards, what was asked, what was tried, why each fix was attempted and which
//! files were accepted. It does not run the agents or pick what they do: you bring the
//! [`Agent`] or [`batch::Worker`]; kleene bounds, records and checks what it does.
//!
//! # The inner loop
//!
//! Underneath, one attempt of one task is a typestate: each phase is a type, and a
//! transition the phase does not have does not compile.
//!
//! ```
//! use kleene::{closure::ExecutionOutput, closure::GovernanceDecision, closure::step::Moved, closure::step::Next, closure::step::PostValidation, closure::step::RecoverOn,
//!              closure::step::Session, closure::Spec, closure::step::Step, Task, id::TaskId, closure::Verdict};
//!
//! let task = Task::new(TaskId::new("task_X")?, Spec::new("add a /login route"));
//! let (step, token) = Step::new(task, Session::new("build", "demo")?)
//!     .govern(GovernanceDecision::Approve)?;
//! let step = step
//!     .pre_validate(Verdict::clean())?
//!     .execute(token, ExecutionOutput::new("done"))?;
//! match step.post_validate(Verdict::clean(), RecoverOn::Blockers) {
//!     PostValidation::Clean(step) => assert!(matches!(step.move_next(Next::Complete), Moved::Completed(_))),
//!     other => panic!("unexpected {other:?}"),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// No unsafe code: everything here is bookkeeping over values.
#![forbid(unsafe_code)]
// Every public item is part of the contract users build on.
#![deny(missing_docs)]
// Users put these types in their own state; they must be printable.
#![warn(missing_debug_implementations)]
// `Halt` carries the whole task by value so nothing is lost; a halt is terminal and happens
// at most once per task, so its size costs nothing on the hot path.
#![allow(clippy::result_large_err)]

pub mod acceptance;
pub mod batch;
pub mod checkpoint;
pub mod closure;
pub mod documentation;
pub mod error;
mod fs;
pub mod id;
pub mod plan;
#[cfg(all(unix, feature = "process"))]
pub mod process;
#[cfg(all(unix, feature = "shell"))]
pub mod shell;
pub mod signing;
pub mod snapshot;
#[cfg(unix)]
pub mod stage;
#[cfg(feature = "testing")]
pub mod testing;
mod text;
mod wire;

pub use batch::Batch;
#[cfg(feature = "async")]
pub use closure::AsyncAgent;
pub use closure::step::{ExecutionOutput, ValidationToken};
pub use closure::verdict::Verdict;
pub use closure::{Agent, Task};
pub use error::Error;
pub use plan::{AppBuildPlan, ValidatedPlan};
