//! The batch executor: runs a validated plan through a worker, keeps everything it learns as
//! append-only evidence, and recovers failed roots with one bounded corrective call.
//!
//! Tasks run in the plan's topological order. Each call is reserved in an
//! [`EvidenceJournal`](crate::batch::journal::EvidenceJournal) before the [`Worker`] is called and settled after; a candidate is
//! accepted only if it writes nothing but its task's admitted paths and passes the
//! [`OutputContract`](crate::batch::worker::OutputContract). A failed prerequisite drains every dependent (never called). The
//! [`BatchEvidence`] is the fold of the journaled [`EvidenceEvent`](crate::batch::evidence::EvidenceEvent)s; a resume rebuilds it
//! from the journal of the original channel and nothing else.
//!
//! ```
//! use std::collections::BTreeMap;
//! use kleene::batch::{Batch, Candidate, MemoryJournal, Proposal, recovery::RecoveryRequest, TaskStatus,
//!                     Worker, WorkerCall, WorkerFailure};
//! use kleene::{plan::AdmittedPath, AppBuildPlan, id::ChannelId, plan::Plan, id::TaskId};
//!
//! let plan = Plan::draft(AppBuildPlan::from_json(r#"{"tasks": [
//!   {"id": "svc", "kind": {"lane": "config"}, "owner": "ServiceAgent",
//!    "spec": {"intent": "settings"}, "owned_paths": ["config/app.toml"]}]}"#)?)
//!     .normalize().consolidate()?.validate()?;
//!
//! /// Writes outside its ownership first, then corrects itself when told why.
//! struct Svc;
//! impl Worker for Svc {
//!     fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
//!         let path = if call.correction().is_some() { "config/app.toml" } else { "backend/schemas.py" };
//!         Ok(Candidate::new(BTreeMap::from([(AdmittedPath::admit(path).unwrap(), b"x".to_vec())])).into())
//!     }
//! }
//!
//! let batch = Batch::new(&plan, ChannelId::new("chan-1")?).with_recovery(true);
//! let mut journal = MemoryJournal::default();
//! let svc = TaskId::new("svc")?;
//!
//! let evidence = batch.dispatch(&mut Svc, &(), &mut journal)?;
//! assert_eq!(evidence.status(&svc), Some(TaskStatus::Failed)); // rejection retained, deferred
//!
//! let request = RecoveryRequest::for_roots(&evidence, evidence.recovery_roots().cloned());
//! let outcome = batch.recover(&request, &mut Svc, &(), &mut journal)?;
//! assert_eq!(outcome.evidence.status(&svc), Some(TaskStatus::Accepted));
//! assert!(outcome.evidence.summary().is_complete());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`Batch::run`] does the same in one call (dispatch or resume, then the one recovery), and
//! [`ClosureWorker`] is a worker whose every call is one closure of its task, with the run's
//! fix budget and every closure's audit head kept in the evidence.
//!
//! Every driver runs one sans-IO [`BatchMachine`](crate::batch::machine::BatchMachine) ([`Batch::machine`]): it reserves ready
//! tasks up to a limit in one commit, hands out owned [`Dispatch`](crate::batch::machine::Dispatch)es and takes settlements
//! in any order; the evidence does not depend on that order. [`Batch::run_threaded`] makes
//! up to `jobs` calls at once on scoped threads, one worker per slot, with group commit.
//! With the `async` feature, `Batch::run_async` does the same with one future per call of an
//! `AsyncWorker`, under any executor (tokio, a single-threaded `block_on`); its journal I/O
//! is synchronous, and dropping its future keeps every reservation for a resume.
//! [`ClosureWorker`] is the closure-running worker for it too, over an `AsyncBatchAgent`;
//! [`OutputFile`] makes one of any `AsyncAgent` (or a batch agent of any `Agent`) whose
//! execution output is its task's one file.

#[cfg(feature = "async")]
mod async_closure_worker;
#[cfg(feature = "async")]
mod asynchronous;
pub mod cache;
pub mod candidate;
mod closure_worker;
mod dispatched;
mod error;
pub mod evidence;
mod executor;
pub mod journal;
pub mod machine;
mod output_file;
mod pass;
pub mod recovery;
pub(crate) mod reservation;
mod syncer;
mod threaded;
pub(crate) mod wire;
pub mod worker;

#[cfg(feature = "async")]
pub use async_closure_worker::AsyncBatchAgent;
#[cfg(feature = "async")]
pub use asynchronous::{AsyncWorker, AsyncWorkerCall};
pub use candidate::{Candidate, Rejection};
pub use closure_worker::{BatchAgent, ClosureWorker};
pub use dispatched::DispatchedCall;
pub use error::{BatchError, BatchErrorKind};
pub use evidence::{BatchEvidence, TaskStatus};
pub use executor::{Batch, DEFAULT_COMPACTION_AFTER, RecoveryOutcome, RunOutcome};
pub use journal::{FileJournal, JournalKey, MemoryJournal};
pub use output_file::OutputFile;
pub use reservation::Reservation;
pub use worker::{Proposal, Worker, WorkerCall, WorkerFailure};
