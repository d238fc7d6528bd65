//! Batch evidence: the fold of a batch's evidence events, and the summary derived from it.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::candidate::{AcceptedOutput, Candidate, Rejection};
use super::event::{ClosureEnd, ClosureSettlement, EvidenceEvent, InventoryEntry, Settlement};
use super::recovery::IneligibleReason;
use super::worker::InfrastructureFailure;
use crate::id::digest::{Canonical, CanonicalHasher, OptByte, canonical_enum, canonical_struct};
use crate::{id::AgentId, id::ChannelId, id::TaskId, id::digest::Digest};

/// The evidence format version this build writes and reads.
pub const EVIDENCE_VERSION: u32 = 1;

/// How many failure notes the bounded failure history keeps (the oldest are dropped; the
/// per-task evidence keeps everything).
pub const FAILURE_HISTORY_LIMIT: usize = 64;

/// Why a sequence of evidence events does not fold into evidence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FoldError {
    /// The first event is not `Started`, or `Started` appears twice.
    #[error(
        "fold evidence event {index}: the batch must start exactly once, first; the journal does not begin with its run's start or holds two runs: move it aside and start the run again"
    )]
    NotStarted {
        /// The event's position.
        index: u64,
    },
    /// The evidence was written in a format version this build does not read.
    #[error(
        "fold evidence: unsupported evidence_version {found} (this build reads {EVIDENCE_VERSION})"
    )]
    UnsupportedVersion {
        /// The version found.
        found: u32,
    },
    /// The inventory lists a task twice.
    #[error("fold evidence: the batch inventory lists task {task} twice")]
    DuplicateTask {
        /// The task listed twice.
        task: TaskId,
    },
    /// An event names a task that is not in the inventory.
    #[error("fold evidence event {index}: task {task} is not in the batch inventory")]
    UnknownTask {
        /// The event's position.
        index: u64,
        /// The task.
        task: TaskId,
    },
    /// An event does not follow from the task's state (for example a settlement without its
    /// reservation, or a call to an accepted task).
    #[error(
        "fold evidence event {index}: a `{event}` event for task {task} cannot follow the events before it (the task was {state}); the journal was edited or written by two runs at once: restore it from a copy, or move it aside and start the run again"
    )]
    OutOfOrder {
        /// The event's position.
        index: u64,
        /// The task.
        task: TaskId,
        /// Which event.
        event: &'static str,
        /// What the events before it say about the task.
        state: String,
    },
    /// An accepted output's files do not match the digest it was accepted under.
    #[error(
        "fold evidence event {index}: accepted output of task {task} does not match its digest {digest}, so it was changed after it was accepted; restore the journal from a copy, or move it aside and start the run again"
    )]
    DigestMismatch {
        /// The event's position.
        index: u64,
        /// The task.
        task: TaskId,
        /// The recorded digest.
        digest: Digest,
    },
}

/// A refused candidate, kept verbatim with its exact rejection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedAttempt {
    pub(super) attempt: u32,
    pub(super) input_digest: Digest,
    pub(super) candidate: Candidate,
    pub(super) rejection: Rejection,
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
/// ([`BatchEvidence::failure_cause`]). Its `Display` is one line for people.
///
/// ```
/// # use kleene::batch::FailureCause;
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
        /// Why it and the call before it were refused.
        rejection: &'e Rejection,
    },
    /// `call`, its last, was interrupted and its `budget` of calls is spent.
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
            Self::Stalled { call, rejection } => write!(
                f,
                "recovery_stalled: call {call} was refused for the same reason as call {}, so \
                 no further call was made: {}",
                call.saturating_sub(1),
                rejection.headline()
            ),
            Self::Interrupted { call, budget } => write!(
                f,
                "call {call} was interrupted and its {budget} call(s) (retry_limit + 1) are spent"
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
    pub(super) owner: AgentId,
    pub(super) budget: u32,
    pub(super) calls: u32,
    pub(super) in_flight: Option<(u32, Digest)>,
    pub(super) last_input_digest: Option<Digest>,
    pub(super) rejections: Vec<RejectedAttempt>,
    pub(super) accepted: Option<AcceptedOutput>,
    pub(super) infrastructure: Option<(u32, InfrastructureFailure)>,
    pub(super) interrupted: Vec<u32>,
    pub(super) blocked_by: Option<TaskId>,
    pub(super) correction_granted: bool,
}

impl TaskEvidence {
    /// The task's state in words, for a refusal: what the events so far say.
    fn describe(&self) -> String {
        match (&self.accepted, self.in_flight, &self.blocked_by) {
            (Some(_), _, _) => format!("accepted after {} call(s)", self.calls),
            (None, Some((attempt, _)), _) => format!("in flight with call {attempt}"),
            (None, None, Some(root)) => format!("drained behind {root}"),
            (None, None, None) => format!(
                "settled after {} of its {} call(s), none in flight",
                self.calls, self.budget
            ),
        }
    }

    fn new(entry: &InventoryEntry) -> Self {
        Self {
            owner: entry.owner.clone(),
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
    /// Calls made so far, interrupted ones included.
    pub fn calls(&self) -> u32 {
        self.calls
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
        self.infrastructure.as_ref().map(|(a, f)| (*a, f))
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

    /// Whether its last two calls, one after the other, were refused for the same reason
    /// (the same rule, the same file or message). A refusal is a verdict, and a verdict
    /// repeated unchanged halts recovery: a third call would be refused again, so the
    /// budget is not spent on it. A corrective call a recovery granted still runs.
    pub(crate) fn recovery_stalled(&self) -> bool {
        match self.rejections.as_slice() {
            [.., before, last] => {
                !self.correction_granted
                    && last.attempt == before.attempt + 1
                    && last.rejection == before.rejection
            }
            _ => false,
        }
    }

    /// Whether the budget and the task's state allow one more reservation. A journal's
    /// reservation is checked against this, not [`may_call`](Self::may_call): a journal an
    /// earlier kleene wrote may call again after a repeated refusal, and still loads.
    fn may_reserve(&self, recovery: bool) -> bool {
        self.accepted.is_none()
            && self.in_flight.is_none()
            && self.blocked_by.is_none()
            && self.infrastructure.is_none()
            && self.calls < self.budget
            && (self.rejections.len() as u64) < u64::from(self.allowance(recovery))
    }

    fn status(&self, recovery: bool) -> TaskStatus {
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
    infrastructure,
    interrupted,
    blocked_by => OptByte(blocked_by.as_ref()),
    correction_granted,
});

canonical_struct!(RejectedAttempt {
    attempt,
    input_digest,
    candidate,
    rejection,
});

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
    pub(super) task: TaskId,
    pub(super) attempt: u32,
    pub(super) fixes_drawn: u32,
    pub(super) settled: Option<ClosureSettlement>,
    /// The call was withdrawn: its number is reused by the next call, which gets its own
    /// entry; the fixes it drew stay counted.
    pub(super) withdrawn: bool,
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

/// Everything a batch learned: the fold of its evidence events. Built only by folding events
/// (a run, a resume or a journal load); never edited by callers, never replaced by a summary.
///
/// # Examples
///
/// ```no_run
/// # fn demo(evidence: &kleene::batch::BatchEvidence) {
/// for (task, output) in evidence.accepted_outputs() {
///     println!("{task}: {}", output.digest());
/// }
/// println!("{:?}", evidence.summary());
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct BatchEvidence {
    pub(super) channel: ChannelId,
    pub(super) plan_digest: Digest,
    pub(super) evidence_version: u32,
    pub(super) inputs: BTreeMap<String, Digest>,
    pub(super) recovery: bool,
    /// The inventory in topological order; `tasks[i]` is the evidence of `order[i]`.
    pub(super) order: Vec<TaskId>,
    pub(super) tasks: Vec<TaskEvidence>,
    pub(super) recoveries: Vec<RecoveryRecord>,
    pub(super) failure_history: VecDeque<FailureNote>,
    pub(super) events: u64,
    /// Every call that ran a closure, in plan order and, for one task, in call order.
    pub(super) closures: Vec<ClosureCall>,
    /// The run-wide fix attempts used (derived from `closures`), so a call need not sum them.
    pub(super) fixes_used: u32,
    /// Where each task sits in `order`; rebuilt on load, never persisted.
    pub(super) index: HashMap<TaskId, usize, foldhash::fast::RandomState>,
}

impl PartialEq for BatchEvidence {
    fn eq(&self, other: &Self) -> bool {
        // `index` is derived from `order`.
        self.channel == other.channel
            && self.plan_digest == other.plan_digest
            && self.evidence_version == other.evidence_version
            && self.inputs == other.inputs
            && self.recovery == other.recovery
            && self.order == other.order
            && self.tasks == other.tasks
            && self.recoveries == other.recoveries
            && self.failure_history == other.failure_history
            && self.events == other.events
            && self.closures == other.closures
    }
}

impl Eq for BatchEvidence {}

impl Canonical for BatchEvidence {
    fn encode(&self, h: &mut CanonicalHasher) {
        // The failure history, the event count and the fixes used are derived from what is
        // encoded (or, for the history, kept only to show), and the index is `order`'s.
        let Self {
            channel,
            plan_digest,
            evidence_version,
            inputs,
            recovery,
            order,
            tasks,
            recoveries,
            closures,
            failure_history: _,
            events: _,
            fixes_used: _,
            index,
        } = self;
        h.put(&(channel, plan_digest, evidence_version, recovery, inputs))
            .seq(order.iter().zip(tasks))
            .put(recoveries);
        // Evidence without closures digests as it did before closures were evidence.
        if !closures.is_empty() {
            // In plan order, then call order (a withdrawn call before the one reusing its
            // number): the digest does not depend on the order concurrent calls ended in,
            // nor on the order an older build kept them in.
            let mut closures: Vec<&ClosureCall> = closures.iter().collect();
            closures.sort_by_key(|c| (index.get(&c.task).copied(), c.attempt));
            h.put("closures").seq(closures.into_iter());
        }
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

pub(super) type Index = HashMap<TaskId, usize, foldhash::fast::RandomState>;

/// The position of every task of `order`, or the first task listed twice.
pub(super) fn index_of(order: &[TaskId]) -> Result<Index, TaskId> {
    let mut index = Index::with_capacity_and_hasher(order.len(), Default::default());
    for (i, id) in order.iter().enumerate() {
        if index.insert(id.clone(), i).is_some() {
            return Err(id.clone());
        }
    }
    Ok(index)
}

impl BatchEvidence {
    /// Folds a whole event sequence.
    ///
    /// # Errors
    ///
    /// [`FoldError`] when the sequence does not start with `Started`, names an unknown task,
    /// has an event out of order, or holds an accepted output whose digest does not match.
    pub fn fold(events: impl IntoIterator<Item = EvidenceEvent>) -> Result<Self, FoldError> {
        let mut events = events.into_iter();
        let first = events.next().ok_or(FoldError::NotStarted { index: 0 })?;
        let mut evidence = Self::start(first)?;
        for event in events {
            evidence.apply(event)?;
        }
        Ok(evidence)
    }

    /// Starts a fold with the `Started` event.
    pub(crate) fn start(event: EvidenceEvent) -> Result<Self, FoldError> {
        let EvidenceEvent::Started {
            channel,
            plan_digest,
            evidence_version,
            inputs,
            recovery,
            inventory,
        } = event
        else {
            return Err(FoldError::NotStarted { index: 0 });
        };
        if evidence_version != EVIDENCE_VERSION {
            return Err(FoldError::UnsupportedVersion {
                found: evidence_version,
            });
        }
        let order: Vec<TaskId> = inventory.iter().map(|e| e.task.clone()).collect();
        let tasks = inventory.iter().map(TaskEvidence::new).collect();
        let index = index_of(&order).map_err(|task| FoldError::DuplicateTask { task })?;
        Ok(Self {
            channel,
            plan_digest,
            evidence_version,
            inputs,
            recovery,
            order,
            tasks,
            recoveries: Vec::new(),
            failure_history: VecDeque::new(),
            events: 1,
            closures: Vec::new(),
            fixes_used: 0,
            index,
        })
    }

    fn note(&mut self, task: &TaskId, attempt: u32, kind: FailureKind) {
        if self.failure_history.len() == FAILURE_HISTORY_LIMIT {
            self.failure_history.pop_front();
        }
        self.failure_history.push_back(FailureNote {
            task: task.clone(),
            attempt,
            kind,
        });
    }

    /// Applies one more event read from outside (a journal): accepted outputs are verified
    /// against their digests.
    pub(crate) fn apply(&mut self, event: EvidenceEvent) -> Result<(), FoldError> {
        self.apply_checked(event, true)
    }

    /// Applies an event the executor just made; `verify` is false only when the accepted
    /// digest was computed from the same candidate a moment ago.
    pub(crate) fn apply_checked(
        &mut self,
        event: EvidenceEvent,
        verify: bool,
    ) -> Result<(), FoldError> {
        self.apply_at(None, event, verify)
    }

    /// [`apply_checked`](Self::apply_checked) with where the event's task sits, when the
    /// caller knows it: the task is then found without a lookup by id (the hint is checked,
    /// and a wrong one falls back to the lookup).
    pub(crate) fn apply_at(
        &mut self,
        hint: Option<usize>,
        event: EvidenceEvent,
        verify: bool,
    ) -> Result<(), FoldError> {
        let index = self.events;
        let out_of_order =
            |task: &TaskId, event: &'static str, t: &TaskEvidence| FoldError::OutOfOrder {
                index,
                task: task.clone(),
                event,
                state: t.describe(),
            };
        match event {
            EvidenceEvent::Started { .. } => return Err(FoldError::NotStarted { index }),
            EvidenceEvent::Reserved {
                task,
                attempt,
                input_digest,
            } => {
                let recovery = self.recovery;
                let t = self.task_hinted(index, &task, hint)?;
                if !t.may_reserve(recovery) || attempt != t.calls + 1 {
                    return Err(out_of_order(&task, "reserved", t));
                }
                t.calls = attempt;
                t.in_flight = Some((attempt, input_digest));
            }
            EvidenceEvent::Settled {
                task,
                attempt,
                settlement,
            } => {
                let t = self.task_hinted(index, &task, hint)?;
                let Some((reserved, input_digest)) = t.in_flight else {
                    return Err(out_of_order(&task, "settled", t));
                };
                if reserved != attempt {
                    return Err(out_of_order(&task, "settled", t));
                }
                t.in_flight = None;
                t.last_input_digest = Some(input_digest);
                let kind = match settlement {
                    Settlement::Accepted { candidate, digest } => {
                        let accepted = if verify {
                            AcceptedOutput::verified(candidate, digest)
                        } else {
                            Some(AcceptedOutput::trusted(candidate, digest))
                        };
                        let accepted = accepted.ok_or_else(|| FoldError::DigestMismatch {
                            index,
                            task: task.clone(),
                            digest,
                        })?;
                        t.accepted = Some(accepted);
                        None
                    }
                    Settlement::Rejected {
                        candidate,
                        rejection,
                    } => {
                        t.rejections.push(RejectedAttempt {
                            attempt,
                            input_digest,
                            candidate,
                            rejection,
                        });
                        Some(FailureKind::Rejected)
                    }
                    Settlement::Infrastructure(failure) => {
                        t.infrastructure = Some((attempt, failure));
                        Some(FailureKind::Infrastructure)
                    }
                };
                if let Some(kind) = kind {
                    self.note(&task, attempt, kind);
                }
            }
            EvidenceEvent::Interrupted { task, attempt } => {
                let t = self.task_hinted(index, &task, hint)?;
                if t.in_flight.map(|(a, _)| a) != Some(attempt) {
                    return Err(out_of_order(&task, "interrupted", t));
                }
                t.in_flight = None;
                t.interrupted.push(attempt);
                self.note(&task, attempt, FailureKind::Interrupted);
            }
            EvidenceEvent::Withdrawn { task, attempt, .. } => {
                let t = self.task_hinted(index, &task, hint)?;
                if t.in_flight.map(|(a, _)| a) != Some(attempt) {
                    return Err(out_of_order(&task, "withdrawn", t));
                }
                t.in_flight = None;
                t.calls = attempt - 1;
                if let Some(call) = self
                    .closures
                    .iter_mut()
                    .rev()
                    .find(|c| c.task == task && c.attempt == attempt && !c.withdrawn)
                {
                    call.withdrawn = true;
                }
            }
            EvidenceEvent::Drained { task, blocked_by } => {
                if !self.index.contains_key(&blocked_by) {
                    return Err(FoldError::UnknownTask {
                        index,
                        task: blocked_by,
                    });
                }
                let t = self.task_hinted(index, &task, hint)?;
                if t.accepted.is_some() || t.in_flight.is_some() || t.blocked_by.is_some() {
                    return Err(out_of_order(&task, "drained", t));
                }
                t.blocked_by = Some(blocked_by);
            }
            EvidenceEvent::RecoveryConsumed {
                request,
                granted,
                released,
                refused,
            } => {
                for root in &granted {
                    let t = self.task_mut(index, root)?;
                    if t.correction_granted || t.accepted.is_some() || t.rejections.is_empty() {
                        return Err(out_of_order(root, "recovery granted", t));
                    }
                    t.correction_granted = true;
                }
                for task in &released {
                    let t = self.task_mut(index, task)?;
                    if t.blocked_by.take().is_none() {
                        return Err(out_of_order(task, "released", t));
                    }
                }
                for (task, _) in &refused {
                    self.task_mut(index, task)?;
                }
                self.recoveries.push(RecoveryRecord {
                    request,
                    granted,
                    released,
                    refused,
                });
            }
            EvidenceEvent::FixDrawn { task, attempt, .. } => {
                let t = self.task_hinted(index, &task, hint)?;
                if t.in_flight.map(|(a, _)| a) != Some(attempt) {
                    return Err(out_of_order(&task, "fix drawn", t));
                }
                let call = self.closure_call(&task, attempt);
                if call.settled.is_some() {
                    let t = self.task_hinted(index, &task, hint)?;
                    return Err(out_of_order(&task, "fix drawn", t));
                }
                let before = call.fix_attempts_used();
                call.fixes_drawn = call.fixes_drawn.saturating_add(1);
                let after = call.fix_attempts_used();
                self.fixes_used = self.fixes_used.saturating_add(after - before);
            }
            EvidenceEvent::ClosureSettled {
                task,
                attempt,
                closure,
            } => {
                let t = self.task_hinted(index, &task, hint)?;
                if t.in_flight.map(|(a, _)| a) != Some(attempt) {
                    return Err(out_of_order(&task, "closure settled", t));
                }
                let call = self.closure_call(&task, attempt);
                // A closure spawns every fix it draws, so it cannot settle with fewer.
                if call.settled.is_some() || closure.fix_attempts < call.fixes_drawn {
                    let t = self.task_hinted(index, &task, hint)?;
                    return Err(out_of_order(&task, "closure settled", t));
                }
                let before = call.fix_attempts_used();
                call.settled = Some(closure);
                let after = call.fix_attempts_used();
                self.fixes_used = self.fixes_used.saturating_add(after - before);
            }
        }
        self.events += 1;
        Ok(())
    }

    /// The closure entry of call `attempt` of `task` (a withdrawn call's number is reused by
    /// the next call, which gets its own entry), made if the call has none yet.
    fn closure_call(&mut self, task: &TaskId, attempt: u32) -> &mut ClosureCall {
        let found = self
            .closures
            .iter()
            .rposition(|c| &c.task == task && c.attempt == attempt && !c.withdrawn);
        let at = match found {
            Some(at) => at,
            None => {
                // Kept in plan order (then call order), not in the order calls happened to
                // end: calls settled concurrently in another order give the same evidence.
                let key = (self.index.get(task).copied(), attempt);
                let index = &self.index;
                let at = self
                    .closures
                    .partition_point(|c| (index.get(&c.task).copied(), c.attempt) <= key);
                self.closures.insert(
                    at,
                    ClosureCall {
                        task: task.clone(),
                        attempt,
                        fixes_drawn: 0,
                        settled: None,
                        withdrawn: false,
                    },
                );
                at
            }
        };
        &mut self.closures[at]
    }

    fn task_hinted(
        &mut self,
        index: u64,
        task: &TaskId,
        hint: Option<usize>,
    ) -> Result<&mut TaskEvidence, FoldError> {
        match hint {
            Some(i)
                if self
                    .order
                    .get(i)
                    .is_some_and(|id| id.shares_allocation_with(task) || id == task) =>
            {
                Ok(&mut self.tasks[i])
            }
            _ => self.task_mut(index, task),
        }
    }

    fn task_mut(&mut self, index: u64, task: &TaskId) -> Result<&mut TaskEvidence, FoldError> {
        match self.index.get(task) {
            Some(&i) => Ok(&mut self.tasks[i]),
            None => Err(FoldError::UnknownTask {
                index,
                task: task.clone(),
            }),
        }
    }

    /// The evidence of the `i`-th task of the inventory (topological order).
    pub(crate) fn task_at(&self, i: usize) -> Option<&TaskEvidence> {
        self.tasks.get(i)
    }

    /// The status of the `i`-th task of the inventory.
    pub(crate) fn status_at(&self, i: usize) -> Option<TaskStatus> {
        self.tasks.get(i).map(|t| t.status(self.recovery))
    }

    /// Where `id` sits in the inventory.
    pub(crate) fn position(&self, id: &TaskId) -> Option<usize> {
        self.index.get(id).copied()
    }

    /// The trusted channel the batch ran on.
    pub fn channel(&self) -> &ChannelId {
        &self.channel
    }
    /// The digest of the plan the batch ran.
    pub fn plan_digest(&self) -> Digest {
        self.plan_digest
    }
    /// The evidence format version ([`EVIDENCE_VERSION`]).
    pub fn evidence_version(&self) -> u32 {
        self.evidence_version
    }
    /// Whether the batch opted in to bounded batch recovery.
    pub fn recovery_enabled(&self) -> bool {
        self.recovery
    }
    /// Digests of the batch's immutable named inputs.
    pub fn input_digests(&self) -> &BTreeMap<String, Digest> {
        &self.inputs
    }
    /// How many events were folded.
    pub fn event_count(&self) -> u64 {
        self.events
    }
    /// The accepted output of `id`.
    pub fn accepted(&self, id: &TaskId) -> Option<&AcceptedOutput> {
        self.task(id).and_then(|t| t.accepted.as_ref())
    }
    /// Every accepted output, in topological order.
    pub fn accepted_outputs(&self) -> impl Iterator<Item = (&TaskId, &AcceptedOutput)> {
        self.inventory()
            .filter_map(|(id, t)| t.accepted.as_ref().map(|a| (id, a)))
    }
    /// The digest of every accepted output, in topological order.
    pub fn accepted_output_digests(&self) -> impl Iterator<Item = (&TaskId, Digest)> {
        self.accepted_outputs().map(|(id, a)| (id, a.digest()))
    }
    /// Everything known about `id`.
    pub fn task(&self, id: &TaskId) -> Option<&TaskEvidence> {
        self.position(id).map(|i| &self.tasks[i])
    }
    /// Every task in the inventory, in topological order.
    pub fn inventory(&self) -> impl Iterator<Item = (&TaskId, &TaskEvidence)> {
        self.order.iter().zip(&self.tasks)
    }
    /// Where `id` stands, or `None` when it is not in the batch inventory.
    pub fn status(&self, id: &TaskId) -> Option<TaskStatus> {
        self.position(id).and_then(|i| self.status_at(i))
    }
    /// Why `id` failed, when its status is [`TaskStatus::Failed`]; `None` otherwise.
    pub fn failure_cause(&self, id: &TaskId) -> Option<FailureCause<'_>> {
        if self.status(id) != Some(TaskStatus::Failed) {
            return None;
        }
        let task = self.task(id)?;
        if let Some((call, failure)) = task.infrastructure_failure() {
            return Some(FailureCause::Infrastructure { call, failure });
        }
        // Whichever of its last refusal and its last interruption came later ended it.
        let last_interrupted = task.interrupted.last().copied();
        let rejected = task
            .rejections
            .last()
            .filter(|r| last_interrupted.is_none_or(|call| call < r.attempt()));
        Some(match (rejected, last_interrupted) {
            (Some(rejected), _) if task.recovery_stalled() => FailureCause::Stalled {
                call: rejected.attempt(),
                rejection: rejected.rejection(),
            },
            (Some(rejected), _) => FailureCause::Rejected {
                call: rejected.attempt(),
                rejection: rejected.rejection(),
            },
            (None, Some(call)) => FailureCause::Interrupted {
                call,
                budget: task.budget,
            },
            (None, None) => FailureCause::CallsSpent { calls: task.calls },
        })
    }
    /// Tasks waiting for a call, in topological order.
    pub fn pending(&self) -> impl Iterator<Item = &TaskId> {
        self.inventory()
            .filter(|(_, t)| t.status(self.recovery) == TaskStatus::Pending)
            .map(|(id, _)| id)
    }
    /// Tasks with a reserved, unsettled call, in topological order.
    pub fn in_flight(&self) -> impl Iterator<Item = (&TaskId, u32)> {
        self.inventory()
            .filter_map(|(id, t)| t.in_flight.map(|(a, _)| (id, a)))
    }
    /// Roots whose corrective call a recovery consumed, in topological order.
    pub fn consumed_roots(&self) -> impl Iterator<Item = &TaskId> {
        self.inventory()
            .filter(|(_, t)| t.correction_granted)
            .map(|(id, _)| id)
    }
    /// Fingerprints of consumed recovery requests, oldest first.
    pub fn consumed_requests(&self) -> impl Iterator<Item = Digest> + '_ {
        self.recoveries.iter().map(|r| r.request)
    }
    /// What each consumed recovery request decided, oldest first.
    pub fn recoveries(&self) -> &[RecoveryRecord] {
        &self.recoveries
    }
    /// The most recent failures (at most [`FAILURE_HISTORY_LIMIT`]), oldest first.
    pub fn failure_history(&self) -> impl Iterator<Item = &FailureNote> {
        self.failure_history.iter()
    }
    /// Every call that ran a closure, in plan order and, for one task, in call order.
    pub fn closures(&self) -> &[ClosureCall] {
        &self.closures
    }
    /// The closures of `task`'s calls, oldest first.
    pub fn closures_of<'e>(&'e self, task: &'e TaskId) -> impl Iterator<Item = &'e ClosureCall> {
        self.closures.iter().filter(move |c| &c.task == task)
    }
    /// The settled closure of `task`'s accepted call, if the task is accepted and its call
    /// ran one.
    pub fn accepted_closure(&self, task: &TaskId) -> Option<(u32, &ClosureSettlement)> {
        let t = self.task(task)?;
        t.accepted.as_ref()?;
        // No call follows an accepted one, so the accepted call is the last.
        self.closures
            .iter()
            .filter(|c| &c.task == task && c.attempt == t.calls)
            .find_map(|c| c.settled.as_ref().map(|s| (c.attempt, s)))
    }
    /// Checks stored closure records (task, call, record) against every settled closure the
    /// evidence journaled; returns how many matched. Records of calls the evidence does not
    /// know are ignored.
    ///
    /// # Errors
    ///
    /// [`ClosuresError`](crate::acceptance::ClosuresError) naming every settled call whose record is
    /// missing or changed.
    pub fn verify_closures<'r>(
        &self,
        closures: impl IntoIterator<Item = (&'r TaskId, u32, &'r crate::closure::ClosureRecord)>,
    ) -> Result<usize, crate::closure::bound::ClosuresError> {
        let bound = self.closures.iter().filter_map(|c| {
            let s = c.settled.as_ref()?;
            Some((&c.task, c.attempt, s.audit_head, s.record_digest))
        });
        crate::closure::bound::verify_bound(bound, closures)
    }
    /// The run-wide fix attempts used so far: every settled closure's fixes and every fix an
    /// unsettled (interrupted) call drew. What a resume restores the fix budget from.
    pub fn fix_attempts_used(&self) -> u32 {
        self.fixes_used
    }
    /// Failed tasks that a recovery request could name: failed on a retained rejection,
    /// corrective call not yet consumed, budget left. In topological order.
    pub fn recovery_roots(&self) -> impl Iterator<Item = &TaskId> {
        self.inventory()
            .filter(|(_, t)| {
                t.status(self.recovery) == TaskStatus::Failed
                    && t.infrastructure.is_none()
                    && !t.rejections.is_empty()
                    && !t.correction_granted
                    && t.calls < t.budget
            })
            .map(|(id, _)| id)
    }

    /// The canonical digest of the whole evidence.
    pub fn digest(&self) -> Digest {
        Digest::of("batch evidence", self)
    }

    /// A derived summary; it never replaces the evidence.
    pub fn summary(&self) -> BatchSummary {
        let mut s = BatchSummary {
            accepted: 0,
            failed: 0,
            drained: 0,
            in_flight: 0,
            pending: 0,
            evidence_digest: self.digest(),
        };
        for t in &self.tasks {
            match t.status(self.recovery) {
                TaskStatus::Accepted => s.accepted += 1,
                TaskStatus::Failed => s.failed += 1,
                TaskStatus::Drained { .. } => s.drained += 1,
                TaskStatus::InFlight { .. } => s.in_flight += 1,
                TaskStatus::Pending => s.pending += 1,
            }
        }
        s
    }
}

/// Counts derived from [`BatchEvidence`], bound to it by the evidence digest.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchSummary {
    /// Accepted tasks.
    pub accepted: usize,
    /// Failed tasks.
    pub failed: usize,
    /// Drained tasks.
    pub drained: usize,
    /// Tasks with an unsettled call.
    pub in_flight: usize,
    /// Tasks waiting for a call.
    pub pending: usize,
    /// The digest of the evidence this summary was derived from.
    pub evidence_digest: Digest,
}

impl BatchSummary {
    /// Whether every task was accepted.
    pub fn is_complete(&self) -> bool {
        self.failed + self.drained + self.in_flight + self.pending == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint;
    use crate::plan::path::AdmittedPath;

    fn t() -> TaskId {
        TaskId::new("t").unwrap()
    }

    fn started(recovery: bool) -> EvidenceEvent {
        EvidenceEvent::Started {
            channel: ChannelId::new("c").unwrap(),
            plan_digest: Digest::from_bytes([1; 32]),
            evidence_version: EVIDENCE_VERSION,
            inputs: BTreeMap::new(),
            recovery,
            inventory: vec![InventoryEntry {
                task: t(),
                owner: AgentId::new("a").unwrap(),
                budget: 2,
            }],
        }
    }

    fn reserved(attempt: u32) -> EvidenceEvent {
        EvidenceEvent::Reserved {
            task: t(),
            attempt,
            input_digest: Digest::from_bytes([2; 32]),
        }
    }

    fn rejected(attempt: u32) -> EvidenceEvent {
        rejected_for(attempt, "no")
    }

    fn rejected_for(attempt: u32, why: &str) -> EvidenceEvent {
        EvidenceEvent::Settled {
            task: t(),
            attempt,
            settlement: Settlement::Rejected {
                candidate: Candidate::default(),
                rejection: Rejection::contract(&t(), why),
            },
        }
    }

    /// Two calls in a row refused for the same reason stall the task's recovery; a journal
    /// of an earlier kleene that called a third time anyway still folds.
    #[test]
    fn a_repeated_refusal_stalls_and_an_earlier_journal_still_folds() {
        let mut inventory = started(false);
        if let EvidenceEvent::Started { inventory, .. } = &mut inventory {
            inventory[0].budget = 3;
        }
        let two = vec![
            inventory.clone(),
            reserved(1),
            rejected(1),
            reserved(2),
            rejected(2),
        ];
        let e = BatchEvidence::fold(two.clone()).unwrap();
        assert_eq!(e.status(&t()), Some(TaskStatus::Failed));
        assert!(matches!(
            e.failure_cause(&t()),
            Some(FailureCause::Stalled { call: 2, .. })
        ));
        let mut older = two;
        older.extend([reserved(3), rejected_for(3, "other")]);
        let e = BatchEvidence::fold(older).unwrap();
        assert_eq!(e.task(&t()).unwrap().calls(), 3);
        assert_eq!(e.status(&t()), Some(TaskStatus::Failed));
        // Different reasons: the budget decides.
        let e = BatchEvidence::fold(vec![
            inventory,
            reserved(1),
            rejected_for(1, "one"),
            reserved(2),
            rejected_for(2, "two"),
        ])
        .unwrap();
        assert_eq!(e.status(&t()), Some(TaskStatus::Pending));
    }

    fn drawn(attempt: u32) -> EvidenceEvent {
        EvidenceEvent::FixDrawn {
            task: t(),
            attempt,
            fix: TaskId::new("t_fix_1").unwrap(),
        }
    }

    fn closure(attempt: u32, fix_attempts: u32) -> EvidenceEvent {
        EvidenceEvent::ClosureSettled {
            task: t(),
            attempt,
            closure: ClosureSettlement {
                fix_attempts,
                end: ClosureEnd::Halted {
                    depth: fix_attempts,
                    halt: "recovery_stalled".to_owned(),
                },
                audit_head: Digest::from_bytes([3; 32]),
                record_digest: Digest::from_bytes([4; 32]),
            },
        }
    }

    /// A failed task names what ended it: its last refusal, or a later interruption, or an
    /// infrastructure failure; a task that has not failed has no cause.
    #[test]
    fn a_failed_task_names_what_ended_it() {
        let interrupted = |attempt| EvidenceEvent::Interrupted { task: t(), attempt };
        let cause = |events: Vec<EvidenceEvent>| {
            let e = BatchEvidence::fold(events).unwrap();
            e.failure_cause(&t()).map(|c| c.to_string())
        };
        assert_eq!(
            cause(vec![
                started(false),
                reserved(1),
                rejected_for(1, "yes"),
                reserved(2),
                rejected(2)
            ]),
            Some("call 2 refused: no".into())
        );
        assert_eq!(
            cause(vec![
                started(false),
                reserved(1),
                rejected(1),
                reserved(2),
                rejected(2)
            ]),
            Some(
                "recovery_stalled: call 2 was refused for the same reason as call 1, so no \
                 further call was made: no"
                    .into()
            )
        );
        assert_eq!(
            cause(vec![
                started(false),
                reserved(1),
                rejected(1),
                reserved(2),
                interrupted(2)
            ]),
            Some("call 2 was interrupted and its 2 call(s) (retry_limit + 1) are spent".into())
        );
        assert_eq!(
            cause(vec![
                started(false),
                reserved(1),
                interrupted(1),
                reserved(2),
                rejected(2)
            ]),
            Some("call 2 refused: no".into())
        );
        let infrastructure = EvidenceEvent::Settled {
            task: t(),
            attempt: 1,
            settlement: Settlement::Infrastructure(InfrastructureFailure::Timeout { after_ms: 5 }),
        };
        assert_eq!(
            cause(vec![started(false), reserved(1), infrastructure]),
            Some("infrastructure failure on call 1: worker call timed out after 5 ms".into())
        );
        // Pending with a call left, and in flight: not failed.
        assert_eq!(cause(vec![started(false), reserved(1), rejected(1)]), None);
        assert_eq!(cause(vec![started(false), reserved(1)]), None);
    }

    #[test]
    fn closure_events_count_toward_the_run_wide_fix_budget() {
        // An interrupted call's draws count; a settled call counts what its closure spawned.
        let e = BatchEvidence::fold([
            started(false),
            reserved(1),
            drawn(1),
            drawn(1),
            EvidenceEvent::Interrupted {
                task: t(),
                attempt: 1,
            },
            reserved(2),
            drawn(2),
            closure(2, 1),
            rejected(2),
        ])
        .unwrap();
        assert_eq!(e.fix_attempts_used(), 3);
        assert_eq!(e.closures().len(), 2);
        // A snapshot restores the same count.
        let back: BatchEvidence = checkpoint::decode(&checkpoint::encode(&e).unwrap()).unwrap();
        assert_eq!((back.fix_attempts_used(), &back), (3, &e));
        assert_eq!(back.digest(), e.digest());
    }

    #[test]
    fn closure_events_that_did_not_happen_are_refused() {
        let refused = |events: Vec<EvidenceEvent>| {
            matches!(
                BatchEvidence::fold(events),
                Err(FoldError::OutOfOrder { .. })
            )
        };
        // A draw outside a call, a closure that spawned fewer fixes than it drew, a closure
        // settled twice, a draw after the closure settled.
        assert!(refused(vec![started(false), drawn(1)]));
        assert!(refused(vec![
            started(false),
            reserved(1),
            drawn(1),
            closure(1, 0)
        ]));
        assert!(refused(vec![
            started(false),
            reserved(1),
            closure(1, 0),
            closure(1, 0)
        ]));
        assert!(refused(vec![
            started(false),
            reserved(1),
            closure(1, 0),
            drawn(1)
        ]));
    }

    #[test]
    fn an_inventory_listing_a_task_twice_names_it() {
        let EvidenceEvent::Started {
            channel,
            plan_digest,
            evidence_version,
            inputs,
            recovery,
            mut inventory,
        } = started(false)
        else {
            unreachable!()
        };
        inventory.push(inventory[0].clone());
        let twice = EvidenceEvent::Started {
            channel,
            plan_digest,
            evidence_version,
            inputs,
            recovery,
            inventory,
        };
        let err = BatchEvidence::fold([twice]).unwrap_err();
        assert_eq!(err, FoldError::DuplicateTask { task: t() });
        assert!(err.to_string().contains("task t twice"), "{err}");
    }

    #[test]
    fn fold_refuses_what_did_not_happen() {
        assert!(matches!(
            BatchEvidence::fold([reserved(1)]),
            Err(FoldError::NotStarted { index: 0 })
        ));
        assert!(matches!(
            BatchEvidence::fold([started(false), started(false)]),
            Err(FoldError::NotStarted { index: 1 })
        ));
        assert!(matches!(
            BatchEvidence::fold([started(false), rejected(1)]),
            Err(FoldError::OutOfOrder {
                event: "settled",
                ..
            })
        ));
        assert!(matches!(
            BatchEvidence::fold([started(false), reserved(2)]),
            Err(FoldError::OutOfOrder {
                event: "reserved",
                ..
            })
        ));
        // A budget of two calls: a third reservation is refused.
        let over = [
            started(false),
            reserved(1),
            rejected(1),
            reserved(2),
            rejected(2),
            reserved(3),
        ];
        assert!(matches!(
            BatchEvidence::fold(over),
            Err(FoldError::OutOfOrder { index: 5, .. })
        ));
        // With recovery, the first rejection is final until a recovery grants a call.
        let deferred = [started(true), reserved(1), rejected(1), reserved(2)];
        assert!(matches!(
            BatchEvidence::fold(deferred),
            Err(FoldError::OutOfOrder { index: 3, .. })
        ));
        let mismatched = EvidenceEvent::Settled {
            task: t(),
            attempt: 1,
            settlement: Settlement::Accepted {
                candidate: Candidate::new(BTreeMap::from([(
                    AdmittedPath::admit("a.txt").unwrap(),
                    b"x".to_vec(),
                )])),
                digest: Candidate::default().digest(),
            },
        };
        assert!(matches!(
            BatchEvidence::fold([started(false), reserved(1), mismatched]),
            Err(FoldError::DigestMismatch { index: 2, .. })
        ));
    }

    #[test]
    fn status_history_and_snapshot_round_trip() {
        let e = BatchEvidence::fold([started(true), reserved(1), rejected(1)]).unwrap();
        assert_eq!(e.status(&t()), Some(TaskStatus::Failed));
        assert_eq!(e.recovery_roots().collect::<Vec<_>>(), [&t()]);
        assert_eq!(e.failure_history().count(), 1);
        assert_eq!(e.summary().failed, 1);
        assert_eq!(e.status(&TaskId::new("nope").unwrap()), None);
        let bytes = checkpoint::encode(&e).unwrap();
        let back: BatchEvidence = checkpoint::decode(&bytes).unwrap();
        assert_eq!(back, e);
        assert_eq!(back.digest(), e.digest());
    }

    #[test]
    fn failure_history_is_bounded() {
        let mut e = BatchEvidence::fold([started(false)]).unwrap();
        for i in 0..(FAILURE_HISTORY_LIMIT + 5) {
            e.note(&t(), i as u32, FailureKind::Rejected);
        }
        assert_eq!(e.failure_history().count(), FAILURE_HISTORY_LIMIT);
        assert_eq!(e.failure_history().next().unwrap().attempt, 5);

        // A snapshot keeping more than the bound is refused, not carried on unbounded.
        let mut json = serde_json::to_value(&e).unwrap();
        let history = json["failure_history"].as_array_mut().unwrap();
        history.push(history[0].clone());
        let err = serde_json::from_value::<BatchEvidence>(json).unwrap_err();
        assert!(err.to_string().contains("65 failures"), "{err}");
    }
}
