//! The run-wide parts of the evidence: failure notes, recovery decisions and the closure
//! of each call.

use super::event::ClosureSettlement;
use crate::batch::recovery::IneligibleReason;
use crate::id::TaskId;
use crate::id::digest::Digest;
use crate::id::digest::canonical_struct;

/// One entry of the bounded failure history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureNote {
    /// The task.
    pub task: TaskId,
    /// The call number.
    pub attempt: u32,
    /// What happened.
    pub kind: FailureKind,
}

/// What kind of failure a [`FailureNote`] records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureKind {
    /// The candidate was refused.
    Rejected,
    /// The worker's infrastructure failed.
    Infrastructure,
    /// The call was interrupted and closed by a resume.
    Interrupted,
}

/// What one consumed recovery request decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryRecord {
    /// The request's fingerprint.
    pub request: Digest,
    /// Roots granted one corrective call.
    pub granted: Vec<TaskId>,
    /// Drained descendants released.
    pub released: Vec<TaskId>,
    /// Roots refused, with why.
    pub refused: Vec<(TaskId, IneligibleReason)>,
}

/// The closure of one call as the evidence holds it: the fix attempts it drew (committed
/// before each fix ran) and, once it settled, its settlement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosureCall {
    pub(in crate::batch) task: TaskId,
    pub(in crate::batch) attempt: u32,
    pub(in crate::batch) fixes_drawn: u32,
    pub(in crate::batch) settled: Option<ClosureSettlement>,
    /// The call was withdrawn: its number is reused by the next call, which gets its own
    /// entry; the fixes it drew stay counted.
    pub(in crate::batch) withdrawn: bool,
}

impl ClosureCall {
    /// The task.
    pub fn task(&self) -> &TaskId {
        &self.task
    }
    /// The call number.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
    /// Fix attempts committed before they ran.
    pub fn fixes_drawn(&self) -> u32 {
        self.fixes_drawn
    }
    /// The settled closure, if the call got that far.
    pub fn settled(&self) -> Option<&ClosureSettlement> {
        self.settled.as_ref()
    }
    /// Whether the call was withdrawn (its host failed; the call itself does not count).
    pub fn withdrawn(&self) -> bool {
        self.withdrawn
    }
    /// What the call took from the run's fix budget: every fix it drew, or every fix its
    /// settled closure spawned, whichever is more. A withdrawn call's draws stay counted: a
    /// fix may have run before its host failed.
    pub fn fix_attempts_used(&self) -> u32 {
        self.fixes_drawn
            .max(self.settled.as_ref().map_or(0, |c| c.fix_attempts))
    }
}

canonical_struct!(RecoveryRecord {
    request,
    granted,
    released,
    refused,
});

canonical_struct!(ClosureCall {
    task,
    attempt,
    fixes_drawn,
    withdrawn,
    settled,
});
