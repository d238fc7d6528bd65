//! kleene runs agent-driven build work as a typed state machine with bounded, auditable
//! recovery.
//!
//! A task runs to its *closure*: each recoverable failure spawns a fix subtask rendered from
//! the original spec and every failure so far, until the checks pass (here at depth 2) or a
//! bound halts it, and every step lands in a hash-chained audit log.
//!
//! ```
//! use kleene::{Closure, ExecutionOutput, GovernanceDecision, Next, RecoveryPolicy, Session,
//!              Severity, Spec, Task, TaskId, ValidatorId, ValidatorResult, Verdict};
//!
//! let failing = |test: &str| -> Result<Verdict, kleene::IdError> {
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
//! | one task and an agent that can govern, validate and execute it | [`run_to_closure`] over your [`Agent`]; it returns the [`ClosureRecord`] |
//! | your own runtime (async, a queue, a UI) that must make every call itself | the sans-IO [`Closure`] machine above: feed it one answer at a time and persist its [`ClosureState`] between steps |
//! | a plan of many tasks | [`AppBuildPlan`] → [`ValidatedPlan`] → [`batch::Batch`] over your [`batch::Worker`], then [`accept`] and [`export`] |
//! | shell commands and no Rust | the `kleene` command-line tool (feature `cli`): `kleene run PLAN`, then `kleene accept` and `kleene export` |
//!
//! <!-- LEAD: once `ClosureWorker` and `Batch::run` exist, the plan row reads: "a plan of many tasks | `Batch::run` with a `ClosureWorker` over your `Agent`: every task runs to its closure". -->
//!
//! The modules are named for the concepts: [`batch`] runs a plan and keeps its evidence,
//! [`checkpoint`] turns tasks, closures and evidence into bytes and back, [`signing`] signs
//! what acceptance records, [`error`] gathers every error, and (on unix) [`stage`] gives a
//! call its staged workspace.
//!
//! # Errors
//!
//! Each concern returns its own error enum ([`PlanLoadError`], [`batch::BatchError`],
//! [`VerifyError`], …), whose messages read after "failed to …" and whose
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
//! use kleene::{ExecutionOutput, GovernanceDecision, Moved, Next, PostValidation, RecoverOn,
//!              Session, Spec, Step, Task, TaskId, Verdict};
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

mod acceptance;
mod audit;
pub mod batch;
pub mod checkpoint;
mod closure;
mod digest;
pub mod error;
mod id;
mod path;
mod phase;
mod plan;
#[cfg(all(unix, feature = "process"))]
pub mod process;
pub mod signing;
mod snapshot;
#[cfg(unix)]
pub mod stage;
mod task;
#[cfg(feature = "testing")]
pub mod testing;
mod verdict;

pub use acceptance::{
    ACCEPTANCE_PREDICATE_TYPE, AcceptanceError, AcceptanceProblem, AcceptanceRecord, ArchivePlace,
    BuildBinding, CanonicalArchive, ClosureBinding, ClosureMismatch, ClosuresError, ExportError,
    FileEntry, FileManifest, FileMismatch, HostileEntry, IN_TOTO_PAYLOAD_TYPE, InTotoStatement,
    ManifestError, RECORD_PAYLOAD_TYPE, RecordDifference, RecordError, SignedError, StoredRecord,
    Subject, TaskResult, VerifiedArchive, VerifyError, accept, export, verify_archive,
    verify_signed_archive,
};
#[cfg(feature = "tracing")]
pub use audit::TracingSink;
pub use audit::{AuditEntry, AuditError, AuditEvent, AuditLog, AuditSink, LoopPhase};
pub use closure::{
    Agent, AgentError, AgentErrorKind, AwaitingExecution, AwaitingGovernance, AwaitingMoveNext,
    AwaitingPostValidation, AwaitingPreValidation, Closure, ClosureFailure, ClosureOutcome,
    ClosureProgress, ClosureRecord, ClosureRecordError, ClosureRun, ClosureState,
    ClosureStateError, FixBudget, MAX_RECOVERY_DEPTH, NormalizedResult, NormalizedVerdict,
    PolicyError, RecoveryPolicy, RecoveryPolicyBuilder, StateField, StepRecord, TaskAttempt,
    VerdictNormalizer, render_recovery_spec, run_closure, run_to_closure, run_to_closure_with,
};
pub use digest::{Digest, DigestParseError};
pub use error::Error;
pub use id::{
    AgentId, ChannelId, IdError, MAX_ID_LEN, ProjectId, SessionMode, TaskId, ValidatorId,
};
pub use path::{
    AdmittedPath, GlobError, MAX_COMPONENT_LEN, MAX_PATH_LEN, PathError, PathGlob,
    SECRETS_MANIFEST_PATH,
};
pub use phase::{
    Completed, DEFAULT_ITERATION_CAP, Execute, ExecutionOutput, ExhaustedBound, Governance,
    GovernanceDecision, Halt, HaltReason, MoveNext, Moved, Next, Phase, PostValidate,
    PostValidation, PreValidate, RecoverOn, Recoverable, Session, Step, TokenError, TokenRejected,
    ValidationToken,
};
pub use plan::{
    AppBuildPlan, Consolidated, ContractKind, DEFAULT_RETRY_LIMIT, Draft, ExtensionValue,
    Extensions, InputContract, MAX_MODULE_NAME_LEN, ModuleName, ModuleNameError, Normalized, Plan,
    PlanLoadError, PlanProblem, PlanState, PlanValidationError, PlannedTask,
    SYNTHESIZED_MODULE_OWNER, TaskKind, TaskOrigin, ValidatedPlan, ValidationStage,
};
pub use snapshot::{
    Diagnostic, FileSource, ProposalProblem, REPAIR_PROPOSAL_BUDGET, RepairError, RepairLedger,
    RepairProposal, RepairRequest, RepairRoutes, RouteRefusal, Snapshot, SnapshotError,
    SnapshotFile, Submitted,
};
pub use task::{FailureEntry, Spec, Task, TaskError};
pub use verdict::{OutputTail, Severity, TailLimits, ValidatorResult, Verdict};
