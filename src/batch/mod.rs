//! The batch executor: runs a validated plan through a worker, keeps everything it learns as
//! append-only evidence, and recovers failed roots with one bounded corrective call.
//!
//! ```
//! use kleene::batch::{EvidenceJournal, MemoryJournal};
//! use kleene::ChannelId;
//!
//! let mut journal = MemoryJournal::default();
//! assert!(journal.load(&ChannelId::new("chan-1")?)?.is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod candidate;
mod event;
mod evidence;
mod executor;
pub(crate) mod journal;
mod recovery;
mod worker;

pub use candidate::{AcceptedOutput, Candidate, Rejection};
pub use event::{EvidenceEvent, InventoryEntry, Settlement};
pub use evidence::{
    BatchEvidence, BatchSummary, EVIDENCE_VERSION, FAILURE_HISTORY_LIMIT, FailureKind, FailureNote,
    FoldError, RecoveryRecord, RejectedAttempt, TaskEvidence, TaskStatus,
};
pub use executor::{Batch, BatchError, DEFAULT_COMPACTION_AFTER, RecoveryOutcome};
pub use journal::{
    EvidenceJournal, FileJournal, JournalError, JournalLoad, MemoryJournal, TornTail,
};
pub use recovery::{IneligibleReason, RecoveryError, RecoveryRequest, TaskBatchRecovery};
pub use worker::{
    Correction, InfrastructureFailure, OutputContract, PendingTurnReplay, Worker, WorkerCall,
    WorkerFailure,
};
