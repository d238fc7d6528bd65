//! Evidence events: the append-only facts a batch records, in the order they happened.
//!
//! [`BatchEvidence`](super::BatchEvidence) is nothing but the fold of these events; a journal
//! stores them, a resume replays them. Nothing is ever edited: a retry, a drain or a recovery
//! is a new event.

use std::collections::BTreeMap;

use crate::batch::cache::ActionKey;
use crate::batch::candidate::{Candidate, Rejection};
use crate::batch::recovery::IneligibleReason;
use crate::batch::worker::InfrastructureFailure;
use crate::id::digest::{canonical_enum, canonical_struct};
use crate::{
    closure::ClosureOutcome, closure::ClosureRecord, id::AgentId, id::ChannelId, id::TaskId,
    id::digest::Digest,
};

/// One planned task as the batch inventory records it when the batch starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryEntry {
    /// The task.
    pub task: TaskId,
    /// The agent that owns it (its `pending_turn_replay` policy applies on resume).
    pub owner: AgentId,
    /// Its total call budget: `retry_limit + 1`.
    pub budget: u32,
}

/// One fact about a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EvidenceEvent {
    /// The batch started on `channel` for the plan with `plan_digest`.
    Started {
        /// The trusted channel the batch runs on.
        channel: ChannelId,
        /// The digest of the validated plan.
        plan_digest: Digest,
        /// The evidence format version.
        evidence_version: u32,
        /// Digests of the batch's immutable named inputs.
        inputs: BTreeMap<String, Digest>,
        /// Whether the batch opted in to bounded batch recovery.
        recovery: bool,
        /// Every planned task, in topological order.
        inventory: Vec<InventoryEntry>,
    },
    /// A call was reserved (durable before the call may have any effect: before its worker
    /// is called, or while a worker that waits for it prepares).
    Reserved {
        /// The task.
        task: TaskId,
        /// The call number, from 1.
        attempt: u32,
        /// The digest of everything the call depends on.
        input_digest: Digest,
    },
    /// A reserved call settled.
    Settled {
        /// The task.
        task: TaskId,
        /// The call number that settled.
        attempt: u32,
        /// How it settled.
        settlement: Settlement,
    },
    /// A resume closed a reservation whose call never settled (the run was stopped, or
    /// kleene or its machine was lost): the call keeps its number and, up to as many
    /// interruptions as the task's budget, does not count against it.
    Interrupted {
        /// The task.
        task: TaskId,
        /// The call number that was interrupted.
        attempt: u32,
    },
    /// A reserved call was never made: the worker's host failed before it could do anything
    /// that lasts. The call does not count; the next reservation reuses its number.
    Withdrawn {
        /// The task.
        task: TaskId,
        /// The withdrawn call number.
        attempt: u32,
        /// Why, for the operator.
        detail: String,
    },
    /// The task was drained: a prerequisite failed, so it is never called.
    Drained {
        /// The task.
        task: TaskId,
        /// The failed task that blocks it.
        blocked_by: TaskId,
    },
    /// A recovery request was consumed: some roots were granted one corrective call, their
    /// drained descendants released, the other roots refused with a typed reason.
    RecoveryConsumed {
        /// The request's fingerprint (its identity).
        request: Digest,
        /// Roots granted one corrective call.
        granted: Vec<TaskId>,
        /// Drained descendants released to run with their own budgets.
        released: Vec<TaskId>,
        /// Roots refused, with why.
        refused: Vec<(TaskId, IneligibleReason)>,
    },
    // New variants go last: journals written before them keep their variant numbers.
    /// A call's closure drew one fix attempt from the run-wide budget, committed before the
    /// fix ran: a resume restores the budget from these, so a crash never returns one.
    FixDrawn {
        /// The task.
        task: TaskId,
        /// The call number.
        attempt: u32,
        /// The fix subtask the attempt is for.
        fix: TaskId,
    },
    /// A call's closure settled (journaled just before the call's settlement).
    ClosureSettled {
        /// The task.
        task: TaskId,
        /// The call number.
        attempt: u32,
        /// What the closure used and how it ended.
        closure: ClosureSettlement,
    },
    /// The task's output was taken from an earlier accepted call with the same action key
    /// (a cache hit): accepted without a call, and naming the call that made it.
    Reused {
        /// The task.
        task: TaskId,
        /// Where the output was accepted before.
        from: ReusedFrom,
        /// The reused output.
        candidate: Candidate,
        /// Its digest, as it was accepted.
        digest: Digest,
    },
}

/// Where a reused output was accepted: the action key it answered and the call that made
/// it, with that call's closure, so its audit trail can be found and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReusedFrom {
    /// The action key the output answered (everything the call depended on).
    pub key: ActionKey,
    /// The run (channel) whose call made and accepted it.
    pub channel: ChannelId,
    /// That call's number in its run.
    pub call: u32,
    /// That call's closure, where it ran one.
    pub closure: Option<ReusedClosure>,
}

/// The closure of the call a reused output came from, by the digests that bind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReusedClosure {
    /// The digest of its whole record ([`ClosureRecord::digest`]).
    pub record_digest: Digest,
    /// The head of its hash-chained audit log.
    pub audit_head: Digest,
}

impl ReusedClosure {
    /// The digests that bind `record`.
    pub fn of(record: &ClosureRecord) -> Self {
        Self {
            record_digest: record.digest(),
            audit_head: record.audit().head(),
        }
    }

    /// A closure bound by these digests (as read back from a record of them).
    pub fn new(record_digest: Digest, audit_head: Digest) -> Self {
        Self {
            record_digest,
            audit_head,
        }
    }
}

impl ReusedFrom {
    /// Where `key`'s output was accepted: call `call` of run `channel`, under `closure`
    /// where it ran one.
    pub fn new(
        key: ActionKey,
        channel: ChannelId,
        call: u32,
        closure: Option<ReusedClosure>,
    ) -> Self {
        Self {
            key,
            channel,
            call,
            closure,
        }
    }
}

canonical_struct!(ReusedFrom {
    key => key.digest(),
    channel,
    call,
    closure
});

canonical_struct!(ReusedClosure {
    record_digest,
    audit_head
});

/// How a reserved call settled.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settlement {
    /// The candidate passed the ownership check and the output contract.
    Accepted {
        /// The accepted candidate.
        candidate: Candidate,
        /// Its digest at acceptance.
        digest: Digest,
    },
    /// The candidate was refused; both are kept verbatim.
    Rejected {
        /// The refused candidate.
        candidate: Candidate,
        /// The exact rejection.
        rejection: Rejection,
    },
    /// The worker's infrastructure failed; this is never a repairable output error.
    Infrastructure(InfrastructureFailure),
}

impl EvidenceEvent {
    /// The task the event is about, if it is about one.
    pub fn task(&self) -> Option<&TaskId> {
        match self {
            Self::Reserved { task, .. }
            | Self::Settled { task, .. }
            | Self::Interrupted { task, .. }
            | Self::Withdrawn { task, .. }
            | Self::Drained { task, .. }
            | Self::FixDrawn { task, .. }
            | Self::ClosureSettled { task, .. }
            | Self::Reused { task, .. } => Some(task),
            Self::Started { .. } | Self::RecoveryConsumed { .. } => None,
        }
    }
}

/// How a settled closure ended, in brief (the full record is the agent's to keep).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClosureEnd {
    /// A task of the tree completed cleanly at `depth`.
    Resolved {
        /// The depth it resolved at (0: the root itself).
        depth: u32,
    },
    /// The closure halted at `depth` with the named halt (`recovery_exhausted`, …).
    Halted {
        /// The depth of the task that halted.
        depth: u32,
        /// The halt's name.
        halt: String,
    },
    /// The closure stopped on something other than a verdict (an agent failure).
    Failed {
        /// The depth it stopped at.
        depth: u32,
    },
}

/// A settled closure as batch evidence: what it drew from the run-wide fix budget, how it
/// ended, and the digests that bind its record (the audit log's head and the whole record).
///
/// # Examples
///
/// ```
/// use kleene::batch::evidence::ClosureSettlement;
/// # use kleene::{Agent, closure::ExecutionOutput, closure::GovernanceDecision, closure::step::Session, Task, closure::step::ValidationToken, closure::Verdict};
/// # struct Passes;
/// # impl Agent for Passes {
/// #     type Error = std::convert::Infallible;
/// #     fn govern(&mut self, _: &Task, _: &Session, _: u32) -> Result<GovernanceDecision, Self::Error> { Ok(GovernanceDecision::Approve) }
/// #     fn pre_validate(&mut self, _: &Task, _: u32) -> Result<Verdict, Self::Error> { Ok(Verdict::clean()) }
/// #     fn execute(&mut self, _: &Task, _: &ValidationToken) -> Result<ExecutionOutput, Self::Error> { Ok(ExecutionOutput::new("done")) }
/// #     fn post_validate(&mut self, _: &Task, _: &ExecutionOutput) -> Result<Verdict, Self::Error> { Ok(Verdict::clean()) }
/// # }
/// use kleene::{closure::RecoveryPolicy, closure::Spec, id::TaskId, closure::run_to_closure};
///
/// let task = Task::new(TaskId::new("x")?, Spec::new("build"));
/// let record = run_to_closure(task, Session::new("build", "demo")?, &mut Passes,
///                             &RecoveryPolicy::default());
/// let settled = ClosureSettlement::of(&record);
/// assert_eq!(settled.audit_head, record.audit().head());
/// assert_eq!(settled.fix_attempts, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClosureSettlement {
    /// Fix subtasks the closure spawned (each drew one attempt from the run's budget).
    pub fix_attempts: u32,
    /// How it ended.
    pub end: ClosureEnd,
    /// The head of its hash-chained audit log.
    pub audit_head: Digest,
    /// The digest of its whole record ([`ClosureRecord::digest`]).
    pub record_digest: Digest,
}

impl ClosureSettlement {
    /// The settlement of `record`.
    pub fn of(record: &ClosureRecord) -> Self {
        let outcome = record.outcome();
        let end = match outcome {
            ClosureOutcome::Resolved { depth, .. } => ClosureEnd::Resolved { depth: *depth },
            ClosureOutcome::Halted { depth, reason, .. } => ClosureEnd::Halted {
                depth: *depth,
                halt: reason.halt_type().to_owned(),
            },
            ClosureOutcome::Failed { depth, .. } => ClosureEnd::Failed { depth: *depth },
        };
        Self {
            fix_attempts: record.fix_attempts(),
            end,
            audit_head: record.audit().head(),
            record_digest: record.digest(),
        }
    }
}

canonical_struct!(ClosureSettlement {
    fix_attempts,
    end,
    audit_head,
    record_digest,
});

canonical_enum!(ClosureEnd {
    Resolved { depth } => 0u64,
    Halted { depth, halt } => 1u64,
    Failed { depth } => 2u64,
});
