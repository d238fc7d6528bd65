//! The worker a batch calls for each task, what it is given, and how it can fail.

use serde::{Deserialize, Serialize};

/// A failure of the worker's infrastructure, not of its output. It fails the task for this
/// batch and is never reclassified as a repairable output error (no corrective call is
/// granted for it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[non_exhaustive]
pub enum InfrastructureFailure {
    /// The worker process (or service) was not there.
    #[error("worker process is missing: {detail}")]
    ProcessMissing {
        /// What was missing.
        detail: String,
    },
    /// The call did not answer in time.
    #[error("worker call timed out after {after_ms} ms")]
    Timeout {
        /// How long the caller waited.
        after_ms: u64,
    },
    /// The transport to the worker broke.
    #[error("worker transport failed: {detail}")]
    Transport {
        /// The transport's message.
        detail: String,
    },
}

/// What a resume does with a call that was reserved but never settled (a pending turn).
///
/// Agents declare it; the default keeps the existing behaviour (`Allow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum PendingTurnReplay {
    /// Re-dispatch the task; the interrupted call counts against its budget.
    #[default]
    Allow,
    /// Stop the resume, naming the agent, channel and task: the interrupted call may have
    /// had effects that were never recorded.
    Block,
}
