//! Batch evidence: the fold of a batch's evidence events, and the summary derived from it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, OnceLock};

use super::candidate::AcceptedOutput;
use crate::id::digest::{Canonical, CanonicalHasher};
use crate::{id::AgentId, id::ChannelId, id::TaskId, id::digest::Digest};

/// The evidence format version this build writes and reads.
pub const EVIDENCE_VERSION: u32 = 1;

/// How many failure notes the bounded failure history keeps (the oldest are dropped; the
/// per-task evidence keeps everything).
pub const FAILURE_HISTORY_LIMIT: usize = 64;

pub(crate) mod event;
mod fold;
mod history;
mod task;

pub use event::{
    ClosureEnd, ClosureSettlement, EvidenceEvent, InventoryEntry, ReusedClosure, ReusedFrom,
    Settlement,
};
pub use fold::FoldError;
pub use history::{ClosureCall, FailureKind, FailureNote, RecoveryRecord};
pub use task::{FailureCause, RejectedAttempt, TaskEvidence, TaskStatus};

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
    /// The inventory in topological order; `tasks[i]` is the evidence of `order[i]`. Fixed
    /// once the batch starts, so it is shared: a memory journal's snapshot (a clone of the
    /// whole evidence) then copies no id of it.
    pub(super) order: Arc<[TaskId]>,
    pub(super) tasks: Tasks,
    pub(super) recoveries: Vec<RecoveryRecord>,
    pub(super) failure_history: VecDeque<FailureNote>,
    pub(super) events: u64,
    /// Every call that ran a closure, in plan order and, for one task, in call order.
    pub(super) closures: Vec<ClosureCall>,
    /// The run-wide fix attempts used (derived from `closures`), so a call need not sum them.
    pub(super) fixes_used: u32,
    /// Where each task sits in `order`; rebuilt on load, never persisted. Shared, as
    /// `order` is, and built at the first lookup by id: a run that finds its tasks by
    /// position (the executor's) never hashes its ten thousand ids. Evidence whose ids
    /// were not known to be unique (read from outside) builds it at once, refusing a
    /// duplicate.
    pub(super) index: Arc<OnceLock<Index>>,
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
            index: _,
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
            let index = self.index();
            closures.sort_by_key(|c| (index.get(&c.task).copied(), c.attempt));
            h.put("closures").seq(closures.into_iter());
        }
        // Likewise evidence without reused outputs; in plan order, as for closures.
        let reused: Vec<(&TaskId, &ReusedFrom)> = self.reused().collect();
        if !reused.is_empty() {
            h.put("reused").seq(reused.into_iter());
        }
    }
}

pub(super) type Index = HashMap<TaskId, usize, foldhash::fast::RandomState>;

/// Every task's evidence, in topological order, kept in shared chunks of [`Tasks::CHUNK`]:
/// a clone of the evidence (a memory journal's snapshot of ten thousand tasks) shares them
/// instead of copying every task, and the fold copies a chunk that is shared only when it
/// first changes one of its tasks after the clone. Each clone still holds exactly the
/// evidence of its own moment: nothing a clone holds ever changes.
#[derive(Clone, Default, PartialEq, Eq)]
pub(super) struct Tasks {
    chunks: Vec<Arc<Vec<TaskEvidence>>>,
    len: usize,
}

impl Tasks {
    /// Small enough that copying a chunk a fold writes to after a snapshot is cheap, large
    /// enough that a snapshot shares few pointers.
    const CHUNK: usize = 64;

    /// A fresh batch's evidence: each chunk is built in place. A task owned by the same
    /// agent as the task before it shares that task's owner id: plans list many tasks of
    /// one agent, each with an id of its own, and one shared id is what every later copy
    /// (a chunk copied after a snapshot) and drop of the evidence touches.
    pub(super) fn new<'i>(inventory: &'i [InventoryEntry]) -> Self {
        let mut last: Option<&AgentId> = None;
        let mut task = |entry: &'i InventoryEntry| {
            let owner = match last {
                Some(owner) if *owner == entry.owner => owner,
                _ => &entry.owner,
            };
            last = Some(owner);
            TaskEvidence::owned_by(entry, owner.clone())
        };
        Self {
            chunks: inventory
                .chunks(Self::CHUNK)
                .map(|c| Arc::new(c.iter().map(&mut task).collect()))
                .collect(),
            len: inventory.len(),
        }
    }

    pub(super) fn get(&self, i: usize) -> Option<&TaskEvidence> {
        self.chunks.get(i / Self::CHUNK)?.get(i % Self::CHUNK)
    }

    /// The `i`-th task's evidence to change: its chunk is copied first when a clone shares it.
    pub(super) fn get_mut(&mut self, i: usize) -> Option<&mut TaskEvidence> {
        Arc::make_mut(self.chunks.get_mut(i / Self::CHUNK)?).get_mut(i % Self::CHUNK)
    }
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // As the list it was before it was chunked.
        f.debug_list().entries(self).finish()
    }
}

impl FromIterator<TaskEvidence> for Tasks {
    fn from_iter<I: IntoIterator<Item = TaskEvidence>>(iter: I) -> Self {
        let mut tasks = Self::default();
        let mut chunk = Vec::new();
        for t in iter {
            if chunk.len() == Self::CHUNK {
                tasks.chunks.push(Arc::new(std::mem::take(&mut chunk)));
            }
            if chunk.is_empty() {
                chunk.reserve_exact(Self::CHUNK);
            }
            chunk.push(t);
            tasks.len += 1;
        }
        if !chunk.is_empty() {
            tasks.chunks.push(Arc::new(chunk));
        }
        tasks
    }
}

impl<'t> IntoIterator for &'t Tasks {
    type Item = &'t TaskEvidence;
    type IntoIter = TasksIter<'t>;

    fn into_iter(self) -> Self::IntoIter {
        TasksIter {
            chunks: self.chunks.iter(),
            chunk: [].iter(),
            left: self.len,
        }
    }
}

/// The tasks of a [`Tasks`] in order; its length is known (the evidence digest encodes it).
pub(super) struct TasksIter<'t> {
    chunks: std::slice::Iter<'t, Arc<Vec<TaskEvidence>>>,
    chunk: std::slice::Iter<'t, TaskEvidence>,
    left: usize,
}

impl<'t> Iterator for TasksIter<'t> {
    type Item = &'t TaskEvidence;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(t) = self.chunk.next() {
                self.left = self.left.saturating_sub(1);
                return Some(t);
            }
            self.chunk = self.chunks.next()?.iter();
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for TasksIter<'_> {}

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

/// The position of every task of `order`, whose ids are known to be unique.
pub(super) fn index_of_unique(order: &[TaskId]) -> Index {
    let mut index = Index::with_capacity_and_hasher(order.len(), Default::default());
    index.extend(order.iter().enumerate().map(|(i, id)| (id.clone(), i)));
    index
}

impl BatchEvidence {
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
        self.index().get(id).copied()
    }

    /// The index by id, built at its first use.
    pub(super) fn index(&self) -> &Index {
        self.index.get_or_init(|| index_of_unique(&self.order))
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
    /// Whether `bytes` are the immutable input the batch bound as `name` (see
    /// [`Batch::with_input`](crate::batch::Batch::with_input)): `None` when it bound none by
    /// that name. A copy of an input kept beside the evidence is checked with it.
    ///
    /// ```
    /// # fn demo(evidence: &kleene::batch::BatchEvidence) {
    /// match evidence.binds_input("plan file", b"{\"tasks\": []}") {
    ///     Some(true) => println!("the copy is the plan the batch ran"),
    ///     Some(false) => println!("the copy was changed since"),
    ///     None => println!("the batch bound no plan file"),
    /// }
    /// # }
    /// ```
    pub fn binds_input(&self, name: &str, bytes: &[u8]) -> Option<bool> {
        self.inputs
            .get(name)
            .map(|bound| *bound == Digest::of("batch input", bytes))
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
        self.position(id).and_then(|i| self.tasks.get(i))
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
                previous: task
                    .rejections
                    .iter()
                    .rev()
                    .nth(1)
                    .map_or(0, |before| before.attempt()),
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
    /// Every task whose output was reused from an earlier accepted call (a cache hit), with
    /// where it was accepted, in the plan's topological order.
    pub fn reused(&self) -> impl Iterator<Item = (&TaskId, &ReusedFrom)> {
        self.inventory()
            .filter_map(|(task, t)| Some((task, t.reused.as_deref()?)))
    }

    /// Where `task`'s output was accepted, when it was reused rather than made by a call of
    /// this batch.
    pub fn reused_from(&self, task: &TaskId) -> Option<&ReusedFrom> {
        self.task(task)?.reused.as_deref()
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
    /// evidence journaled, and every reused output's closure (under the call of the run that
    /// made it); returns how many matched. Records of calls the evidence does not
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
        // A reused output's closure is bound by its reuse, under the call that made it.
        let reused = self.reused().filter_map(|(task, from)| {
            let c = from.closure?;
            Some((task, from.call, c.audit_head, c.record_digest))
        });
        let bound = self
            .closures
            .iter()
            .filter_map(|c| {
                let s = c.settled.as_ref()?;
                Some((&c.task, c.attempt, s.audit_head, s.record_digest))
            })
            .chain(reused);
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
                    && t.calls_spent() < t.budget
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

    #[test]
    fn a_clone_of_the_tasks_never_sees_a_later_change() {
        let inventory: Vec<InventoryEntry> = (0..Tasks::CHUNK * 2 + 3)
            .map(|i| InventoryEntry {
                task: TaskId::new(format!("t{i}")).unwrap(),
                owner: AgentId::new("A").unwrap(),
                budget: 1,
            })
            .collect();
        let mut tasks = Tasks::new(&inventory);
        // One owner id for the run of tasks of one agent, each listed with an id of its own.
        let (first, last) = (
            tasks.get(0).unwrap(),
            tasks.get(inventory.len() - 1).unwrap(),
        );
        let same = |a: &AgentId, b: &AgentId| std::ptr::eq(a.as_str(), b.as_str());
        assert!(same(&first.owner, &inventory[0].owner));
        assert!(same(&last.owner, &inventory[0].owner));
        assert!(!same(&last.owner, &inventory[inventory.len() - 1].owner));
        let snapshot = tasks.clone();
        let last = inventory.len() - 1;
        tasks.get_mut(last).unwrap().calls = 1;
        tasks.get_mut(0).unwrap().calls = 2;
        assert_eq!(snapshot.get(last).unwrap().calls, 0);
        assert_eq!(snapshot.get(0).unwrap().calls, 0);
        assert_eq!(tasks.get(last).unwrap().calls, 1);
        assert!(tasks.get(last + 1).is_none() && tasks.get_mut(last + 1).is_none());
        // The untouched middle chunk is still shared; the changed ones were copied.
        assert!(Arc::ptr_eq(&tasks.chunks[1], &snapshot.chunks[1]));
        assert!(!Arc::ptr_eq(&tasks.chunks[0], &snapshot.chunks[0]));
        let calls: Vec<u32> = tasks.into_iter().map(|t| t.calls).collect();
        assert_eq!(calls.len(), inventory.len());
        assert_eq!(tasks.into_iter().len(), inventory.len());
        assert_eq!((calls[0], calls[1], calls[last]), (2, 0, 1));
        assert_ne!(tasks, snapshot);
        let rebuilt: Tasks = inventory
            .iter()
            .map(|e| TaskEvidence::owned_by(e, e.owner.clone()))
            .collect();
        assert_eq!(rebuilt, snapshot);
    }
    use crate::batch::candidate::{Candidate, Rejection};
    use std::collections::BTreeMap;

    use crate::batch::worker::InfrastructureFailure;

    use crate::batch::evidence::event::ClosureEnd;
    use crate::checkpoint;
    use crate::plan::path::AdmittedPath;
    use crate::{id::AgentId, id::ChannelId, id::TaskId, id::digest::Digest};

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

    /// A call a crash interrupted answered nothing: the refusals either side of it are still
    /// one after the other, so the same reason twice stalls the task (a resumed run makes no
    /// call the uninterrupted run would not have made).
    #[test]
    fn an_interrupted_call_between_two_identical_refusals_still_stalls() {
        let mut inventory = started(false);
        if let EvidenceEvent::Started { inventory, .. } = &mut inventory {
            inventory[0].budget = 3;
        }
        let interrupted = EvidenceEvent::Interrupted {
            task: t(),
            attempt: 2,
        };
        let events = vec![
            inventory,
            reserved(1),
            rejected(1),
            reserved(2),
            interrupted,
            reserved(3),
            rejected(3),
        ];
        let e = BatchEvidence::fold(events.clone()).unwrap();
        assert_eq!(e.status(&t()), Some(TaskStatus::Failed));
        let cause = e.failure_cause(&t()).map(|c| c.to_string());
        assert_eq!(
            cause.as_deref(),
            Some(
                "recovery_stalled: call 3 was refused for the same reason as call 1, so no \
                 further call was made: no"
            )
        );
        // Another reason after the interruption: the budget decides.
        let mut different = events;
        different.pop();
        different.push(rejected_for(3, "other"));
        let e = BatchEvidence::fold(different).unwrap();
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
        // An interruption spends no budget: after one, the task may still be called.
        assert_eq!(
            cause(vec![
                started(false),
                reserved(1),
                rejected(1),
                reserved(2),
                interrupted(2)
            ]),
            None
        );
        // As many interruptions as its budget go free; the next ones count.
        assert_eq!(
            cause(vec![
                started(false),
                reserved(1),
                interrupted(1),
                reserved(2),
                interrupted(2),
                reserved(3),
                interrupted(3),
                reserved(4),
                interrupted(4)
            ]),
            Some(
                "call 4 was interrupted and its 2 call(s) (retry_limit + 1) are spent, with as \
                 many interruptions as free calls before it"
                    .into()
            )
        );
        assert_eq!(
            cause(vec![
                started(false),
                reserved(1),
                interrupted(1),
                reserved(2),
                rejected_for(2, "yes"),
                reserved(3),
                rejected(3)
            ]),
            Some("call 3 refused: no".into())
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

    fn reused(digest: Option<Digest>) -> EvidenceEvent {
        let candidate = Candidate::default();
        EvidenceEvent::Reused {
            task: t(),
            from: ReusedFrom::new(
                crate::batch::cache::ActionKey::from_digest(Digest::from_bytes([4; 32])),
                ChannelId::new("run-0").unwrap(),
                2,
                None,
            ),
            digest: digest.unwrap_or_else(|| candidate.digest()),
            candidate,
        }
    }

    /// A reused output accepts a task without a call, once, and only a task that could be
    /// called: never one in flight, accepted or drained, nor under a digest that does not
    /// hold.
    #[test]
    fn a_reused_output_accepts_only_a_task_that_could_be_called() {
        let e = BatchEvidence::fold([started(false), reused(None)]).unwrap();
        assert_eq!(e.status(&t()), Some(TaskStatus::Accepted));
        assert_eq!(e.task(&t()).map(TaskEvidence::calls), Some(0));
        assert_eq!(e.reused_from(&t()).map(|f| f.call), Some(2));
        let refused = |events: Vec<EvidenceEvent>| {
            matches!(
                BatchEvidence::fold(events),
                Err(FoldError::OutOfOrder {
                    event: "reused",
                    ..
                })
            )
        };
        assert!(refused(vec![started(false), reserved(1), reused(None)]));
        assert!(refused(vec![started(false), reused(None), reused(None)]));
        assert!(matches!(
            BatchEvidence::fold([started(false), reused(Some(Digest::from_bytes([9; 32])))]),
            Err(FoldError::DigestMismatch { index: 1, .. })
        ));
        // Reused evidence digests apart from the same output made by a call.
        let called = BatchEvidence::fold([
            started(false),
            reserved(1),
            EvidenceEvent::Settled {
                task: t(),
                attempt: 1,
                settlement: Settlement::Accepted {
                    candidate: Candidate::default(),
                    digest: Candidate::default().digest(),
                },
            },
        ])
        .unwrap();
        assert_ne!(called.digest(), e.digest());
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
