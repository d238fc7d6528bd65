//! Why a batch on a channel could not be dispatched, resumed or recovered.

use super::evidence::FoldError;
use super::journal::JournalError;
use super::recovery::RecoveryError;
use super::worker::AgentFailure;
use crate::id::digest::Digest;
use crate::id::{AgentId, ChannelId, TaskId};
use crate::plan::path::AdmittedPath;

/// What went wrong with a batch (see [`BatchError`], which names the channel).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BatchErrorKind {
    /// The journal failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// A fresh dispatch found evidence on its channel (resume instead).
    #[error("the channel already has evidence; resume it")]
    EvidenceExists,
    /// A resume or recovery found no evidence on its channel: evidence is never borrowed
    /// from another channel or rebuilt.
    #[error("the channel has no evidence")]
    NoEvidence,
    /// The journal of the channel holds evidence of another channel.
    #[error("its evidence belongs to channel {found}")]
    ChannelMismatch {
        /// The channel the evidence names.
        found: ChannelId,
    },
    /// The evidence was made for another plan.
    #[error("evidence is for plan {found}, not {expected}")]
    PlanMismatch {
        /// The plan given.
        expected: Digest,
        /// The plan the evidence names.
        found: Digest,
    },
    /// The evidence's inventory (tasks, owners, budgets, order) differs from the plan's.
    #[error("task {task} differs from the recorded inventory")]
    InventoryMismatch {
        /// The first differing task.
        task: TaskId,
    },
    /// An accepted output writes a path its task does not own in the plan.
    #[error("accepted output of task {task} writes {path}, which it does not own")]
    AcceptedOutputNotOwned {
        /// The task.
        task: TaskId,
        /// The path.
        path: AdmittedPath,
    },
    /// The batch's immutable inputs differ from those recorded.
    #[error("inputs changed: {}", .names.join(", "))]
    InputsChanged {
        /// The names of the inputs that differ (added, removed or changed).
        names: Vec<String>,
    },
    /// The batch's recovery opt-in differs from the recorded one.
    #[error("batch recovery was {}, cannot change it", if *.recorded { "enabled" } else { "disabled" })]
    RecoveryModeChanged {
        /// The recorded opt-in.
        recorded: bool,
    },
    /// A call reserved for an agent that declared `pending_turn_replay: block` never settled;
    /// replaying it could repeat effects that were never recorded.
    #[error(
        "task {task} (agent {agent}, call {attempt}) was interrupted in flight and its agent blocks replay"
    )]
    PendingTurnBlocked {
        /// The agent.
        agent: AgentId,
        /// The task.
        task: TaskId,
        /// The interrupted call number.
        attempt: u32,
    },
    /// The worker or caller cancelled a call; its reservation is kept.
    #[error("run task {task}: call {attempt} was cancelled; its reservation is kept")]
    Cancelled {
        /// The task.
        task: TaskId,
        /// The cancelled call number.
        attempt: u32,
        /// The agent's own error, when an agent cancelled the call.
        #[source]
        cause: Option<AgentFailure>,
    },
    /// The worker's host failed during the call (a full disk, say). The reservation was
    /// withdrawn, the call does not count against the task's retries, and a resume makes it
    /// again. Fix attempts it drew stay spent: a fix may have run before the host failed.
    #[error(
        "run task {task}: call {attempt} could not be made ({detail}); {}, \
         resume once the cause is fixed",
        withdrawn_counts(*fixes_drawn)
    )]
    WorkerUnavailable {
        /// The task.
        task: TaskId,
        /// The withdrawn call number.
        attempt: u32,
        /// What failed.
        detail: String,
        /// Fix attempts the call drew from the run's budget before it was withdrawn.
        fixes_drawn: u32,
    },
    /// A recovery request was refused as a whole.
    #[error(transparent)]
    Recovery(#[from] RecoveryError),
    /// The executor's own events did not fold (an internal invariant broke).
    #[error("fold its evidence")]
    Fold {
        /// The fold's error.
        #[source]
        source: FoldError,
    },
}

/// Why a batch on a channel could not be dispatched, resumed or recovered: the channel, and
/// what went wrong there ([`BatchErrorKind`], also the error's
/// [`source`](std::error::Error::source)).
///
/// ```
/// # use kleene::batch::{BatchError, BatchErrorKind};
/// fn explain(err: &BatchError) -> String {
///     match err.kind() {
///         BatchErrorKind::NoEvidence => format!("nothing to resume on {}", err.channel()),
///         _ => kleene::error::Chain(err).to_string(),
///     }
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[error("batch on channel {channel}")]
pub struct BatchError {
    channel: ChannelId,
    #[source]
    kind: BatchErrorKind,
}

/// What a withdrawn call that drew `fixes_drawn` fix attempts leaves counted, in words.
fn withdrawn_counts(fixes_drawn: u32) -> String {
    match fixes_drawn {
        0 => "nothing was counted".to_owned(),
        1 => "the call does not count, but the fix attempt it drew stays spent (the fix \
              may have run)"
            .to_owned(),
        n => format!(
            "the call does not count, but the {n} fix attempts it drew stay spent (they \
             may have run)"
        ),
    }
}

impl BatchError {
    pub(crate) fn new(channel: ChannelId, kind: impl Into<BatchErrorKind>) -> Self {
        Self {
            channel,
            kind: kind.into(),
        }
    }

    /// The channel of the batch.
    pub fn channel(&self) -> &ChannelId {
        &self.channel
    }

    /// What went wrong.
    pub fn kind(&self) -> &BatchErrorKind {
        &self.kind
    }

    /// What went wrong, giving up the channel.
    pub fn into_kind(self) -> BatchErrorKind {
        self.kind
    }

    /// Whether a resume stopped on a `block` agent's interrupted call.
    pub fn is_pending_turn_blocked(&self) -> bool {
        matches!(self.kind, BatchErrorKind::PendingTurnBlocked { .. })
    }
    /// Whether the worker's host failed and the call was withdrawn (resume once it is fixed).
    pub fn is_worker_unavailable(&self) -> bool {
        matches!(self.kind, BatchErrorKind::WorkerUnavailable { .. })
    }
    /// Whether the batch was cancelled mid-call.
    pub fn is_cancelled(&self) -> bool {
        matches!(self.kind, BatchErrorKind::Cancelled { .. })
    }
}
