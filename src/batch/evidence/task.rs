//! What the evidence knows about one task: its calls, rejections and status.

use super::event::InventoryEntry;
use crate::batch::candidate::AcceptedOutput;
use crate::batch::candidate::Candidate;
use crate::batch::candidate::Rejection;
use crate::batch::worker::InfrastructureFailure;
use crate::id::AgentId;
use crate::id::TaskId;
use crate::id::digest::Digest;
use crate::id::digest::OptByte;
use crate::id::digest::canonical_struct;

/// A refused candidate, kept verbatim with its exact rejection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedAttempt {
    pub(in crate::batch) attempt: u32,
    pub(in crate::batch) input_digest: Digest,
    pub(in crate::batch) candidate: Candidate,
    pub(in crate::batch) rejection: Rejection,
}

impl RejectedAttempt {
    /// The call number.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
    /// The digest of the call's inputs.
    pub fn input_digest(&self) -> Digest {
        self.input_digest
    }
    /// The refused candidate.
    pub fn candidate(&self) -> &Candidate {
        &self.candidate
    }
    /// The exact rejection.
    pub fn rejection(&self) -> &Rejection {
        &self.rejection
    }
}

/// Where a task stands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskStatus {
    /// Its output was accepted.
    Accepted,
    /// It failed and no further call is allowed in this batch (a recovery may grant one).
    Failed,
    /// A prerequisite failed; it was never called.
    Drained {
        /// The failed task that blocks it.
        blocked_by: TaskId,
    },
    /// A call was reserved and has not settled.
    InFlight {
        /// The reserved call number.
        attempt: u32,
    },
    /// It is waiting for a (first or further) call.
    Pending,
}

/// Why a failed task failed: what ended its calls, from its evidence
/// ([`BatchEvidence::failure_cause`](super::BatchEvidence::failure_cause)). Its `Display` is one line for people.
///
/// ```
/// # use kleene::batch::evidence::FailureCause;
/// # fn show(cause: FailureCause<'_>) {
/// match cause {
///     FailureCause::Rejected { call, rejection } => eprintln!("call {call}: {rejection}"),
///     other => eprintln!("{other}"),
/// }
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum FailureCause<'e> {
    /// The worker's infrastructure failed on `call`: never repairable.
    Infrastructure {
        /// The call.
        call: u32,
        /// What failed.
        failure: &'e InfrastructureFailure,
    },
    /// The candidate of `call`, its last, was refused and no call is left.
    Rejected {
        /// The call.
        call: u32,
        /// Why it was refused.
        rejection: &'e Rejection,
    },
    /// The candidate of `call` was refused for the same reason as the call before it, so
    /// recovery stalled: another call would be refused again, and none was made.
    Stalled {
        /// The call.
        call: u32,
        /// The answered call before it, refused for the same reason (`call - 1`, unless a
        /// crash interrupted the calls between them).
        previous: u32,
        /// Why both were refused.
        rejection: &'e Rejection,
    },
    /// `call`, its last, was interrupted and its `budget` of calls is spent (as many
    /// interruptions as its budget went free before it).
    Interrupted {
        /// The call.
        call: u32,
        /// Its calls in all (`retry_limit + 1`).
        budget: u32,
    },
    /// Its `calls` are spent, with no refusal or interruption on record.
    CallsSpent {
        /// The calls made.
        calls: u32,
    },
}

impl std::fmt::Display for FailureCause<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Infrastructure { call, failure } => {
                write!(f, "infrastructure failure on call {call}: {failure}")
            }
            Self::Rejected { call, rejection } => {
                write!(f, "call {call} refused: {}", rejection.headline())
            }
            Self::Stalled {
                call,
                previous,
                rejection,
            } => write!(
                f,
                "recovery_stalled: call {call} was refused for the same reason as call \
                 {previous}, so no further call was made: {}",
                rejection.headline()
            ),
            Self::Interrupted { call, budget } => write!(
                f,
                "call {call} was interrupted and its {budget} call(s) (retry_limit + 1) are \
                 spent, with as many interruptions as free calls before it"
            ),
            Self::CallsSpent { calls } => write!(f, "failed after {calls} call(s)"),
        }
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Accepted => f.write_str("accepted"),
            Self::Failed => f.write_str("failed"),
            Self::Drained { blocked_by } => write!(f, "drained (prerequisite {blocked_by} failed)"),
            Self::InFlight { attempt } => write!(f, "in flight (call {attempt})"),
            Self::Pending => f.write_str("pending"),
        }
    }
}

/// Everything the batch knows about one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEvidence {
    pub(in crate::batch) owner: AgentId,
    pub(in crate::batch) budget: u32,
    pub(in crate::batch) calls: u32,
    pub(in crate::batch) in_flight: Option<(u32, Digest)>,
    pub(in crate::batch) last_input_digest: Option<Digest>,
    pub(in crate::batch) rejections: Vec<RejectedAttempt>,
    pub(in crate::batch) accepted: Option<AcceptedOutput>,
    /// Boxed: rare, and the failure is large; every task of every run has this field, and
    /// a memory journal's snapshot copies them all.
    pub(in crate::batch) infrastructure: Option<Box<(u32, InfrastructureFailure)>>,
    pub(in crate::batch) interrupted: Vec<u32>,
    pub(in crate::batch) blocked_by: Option<TaskId>,
    pub(in crate::batch) correction_granted: bool,
    /// Where its output came from, when it was reused (the evidence digest covers it, with
    /// the other tasks' reuses, in plan order). Boxed: rare, and every task has the field.
    pub(in crate::batch) reused: Option<Box<super::ReusedFrom>>,
}

impl TaskEvidence {
    /// The task's state in words, for a refusal: what the events so far say.
    pub(super) fn describe(&self) -> String {
        match (&self.accepted, self.in_flight, &self.blocked_by) {
            (Some(_), _, _) => format!("accepted after {} call(s)", self.calls),
            (None, Some((attempt, _)), _) => format!("in flight with call {attempt}"),
            (None, None, Some(root)) => format!("drained behind {root}"),
            (None, None, None) => format!(
                "settled after {} call(s), {} of its {} spent, none in flight",
                self.calls,
                self.calls_spent(),
                self.budget
            ),
        }
    }

    /// A task's evidence at the start: `owner` is the entry's owner (or the same id,
    /// shared).
    pub(super) fn owned_by(entry: &InventoryEntry, owner: AgentId) -> Self {
        Self {
            owner,
            budget: entry.budget,
            calls: 0,
            in_flight: None,
            last_input_digest: None,
            rejections: Vec::new(),
            accepted: None,
            infrastructure: None,
            interrupted: Vec::new(),
            blocked_by: None,
            correction_granted: false,
            reused: None,
        }
    }

    /// The agent that owns the task.
    pub fn owner(&self) -> &AgentId {
        &self.owner
    }
    /// The total call budget, `retry_limit + 1`.
    pub fn budget(&self) -> u32 {
        self.budget
    }
    /// Calls made so far, interrupted ones included: the number of the last call.
    pub fn calls(&self) -> u32 {
        self.calls
    }
    /// The calls that count against the budget: every call made, less those interrupted.
    ///
    /// An interrupted call (the run was stopped, or kleene or its machine was lost, while it
    /// ran) ended through no doing of the task's, so it does not spend the task's budget;
    /// it keeps its call number and stays on record. At most `budget` interruptions go
    /// free, so a task that is interrupted over and over is still called at most twice its
    /// budget in all.
    pub fn calls_spent(&self) -> u32 {
        let free = u32::try_from(self.interrupted.len())
            .unwrap_or(u32::MAX)
            .min(self.budget);
        self.calls.saturating_sub(free)
    }
    /// Every refused candidate, oldest first.
    pub fn rejections(&self) -> &[RejectedAttempt] {
        &self.rejections
    }
    /// The accepted output, if any.
    pub fn accepted(&self) -> Option<&AcceptedOutput> {
        self.accepted.as_ref()
    }
    /// The infrastructure failure that failed the task, with its call number.
    pub fn infrastructure_failure(&self) -> Option<(u32, &InfrastructureFailure)> {
        self.infrastructure.as_deref().map(|(a, f)| (*a, f))
    }
    /// Call numbers that were reserved, never settled, and closed by a resume.
    pub fn interrupted_attempts(&self) -> &[u32] {
        &self.interrupted
    }
    /// The failed prerequisite that drained this task.
    pub fn blocked_by(&self) -> Option<&TaskId> {
        self.blocked_by.as_ref()
    }
    /// Whether a recovery granted (and so consumed) this task's one corrective call.
    pub fn recovery_consumed(&self) -> bool {
        self.correction_granted
    }
    /// The input digest of the last settled call.
    pub fn last_input_digest(&self) -> Option<Digest> {
        self.last_input_digest
    }
    /// The reserved, unsettled call and its input digest.
    pub fn in_flight(&self) -> Option<(u32, Digest)> {
        self.in_flight
    }

    /// How many refused candidates this batch lets the task accumulate before it fails.
    fn allowance(&self, recovery: bool) -> u32 {
        if recovery {
            // The first rejection is deferred; a granted recovery allows one more.
            1 + u32::from(self.correction_granted)
        } else {
            self.budget
        }
    }

    /// Whether the task may be called again now: a reservation would be in order, and its
    /// recovery has not stalled.
    pub(crate) fn may_call(&self, recovery: bool) -> bool {
        self.may_reserve(recovery) && !self.recovery_stalled()
    }

    /// Whether its last two answered calls, one after the other, were refused for the same
    /// reason (the same rule, the same file or message). A refusal is a verdict, and a
    /// verdict repeated unchanged halts recovery: a third call would be refused again, so the
    /// budget is not spent on it. A call a crash interrupted between the two answered
    /// nothing, so it does not separate them. A corrective call a recovery granted still
    /// runs.
    pub(crate) fn recovery_stalled(&self) -> bool {
        match self.rejections.as_slice() {
            [.., before, last] => {
                let between = (before.attempt + 1..last.attempt)
                    .all(|attempt| self.interrupted.contains(&attempt));
                !self.correction_granted && between && last.rejection == before.rejection
            }
            _ => false,
        }
    }

    /// Whether the budget and the task's state allow one more reservation. A journal's
    /// reservation is checked against this, not [`may_call`](Self::may_call): a journal an
    /// earlier kleene wrote may call again after a repeated refusal, and still loads.
    pub(super) fn may_reserve(&self, recovery: bool) -> bool {
        self.accepted.is_none()
            && self.in_flight.is_none()
            && self.blocked_by.is_none()
            && self.infrastructure.is_none()
            && self.calls_spent() < self.budget
            && (self.rejections.len() as u64) < u64::from(self.allowance(recovery))
    }

    pub(super) fn status(&self, recovery: bool) -> TaskStatus {
        if self.accepted.is_some() {
            TaskStatus::Accepted
        } else if let Some((attempt, _)) = self.in_flight {
            TaskStatus::InFlight { attempt }
        } else if let Some(blocked_by) = &self.blocked_by {
            TaskStatus::Drained {
                blocked_by: blocked_by.clone(),
            }
        } else if self.may_call(recovery) {
            TaskStatus::Pending
        } else {
            TaskStatus::Failed
        }
    }
}

canonical_struct!(TaskEvidence {
    owner,
    budget,
    calls,
    in_flight,
    last_input_digest,
    rejections,
    accepted,
    infrastructure => infrastructure.as_deref(),
    interrupted,
    blocked_by => OptByte(blocked_by.as_ref()),
    correction_granted,
} skip {
    reused,
});

canonical_struct!(RejectedAttempt {
    attempt,
    input_digest,
    candidate,
    rejection,
});
