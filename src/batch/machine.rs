//! The batch as a sans-IO state machine: which calls to make next, and what each settlement
//! means, in values; the driver does the journaling and the calling.
//!
//! A [`BatchMachine`] owns the plan's progress and the evidence fold. Asked for work with
//! [`reserve`](BatchMachine::reserve), it drains every task a failure blocks and reserves
//! every ready task up to a concurrency limit, handing back the events to append (in ONE
//! journal commit, before any call is made) and an owned [`Dispatch`] per call. Settlements
//! arrive in any order through [`settle`](BatchMachine::settle); each gives the events to
//! append and releases the dependents it unblocks. The machine's whole state is its
//! evidence: it is rebuilt from the journal's fold between any two steps, with
//! [`Batch::machine`](super::Batch::machine).
//!
//! The example is on [`BatchMachine`].

use petgraph::Direction;
use petgraph::graph::NodeIndex;

use super::cache::binding::CacheBinding;
use super::cache::{ActionKey, CacheWarning};
use super::candidate::{AcceptedOutput, Candidate, Rejection};
use super::error::{BatchError, BatchErrorKind};
use super::evidence::event::{EvidenceEvent, Settlement};
use super::evidence::{BatchEvidence, FoldError, TaskStatus};
use super::worker::{
    AgentFailure, Correction, InfrastructureFailure, OutputContract, Proposal, WorkerFailure,
};
use crate::closure::{AgentErrorKind, ClosureRecord};
use crate::id::digest::CanonicalHasher;
use crate::plan::{PlannedTask, ValidatedPlan};
use crate::{id::ChannelId, id::TaskId, id::digest::Digest};

/// The agent errors calls failed with: each call's task and number, in settlement order.
type AgentFailures = Vec<(TaskId, u32, AgentFailure)>;

/// What a pass noted beside its evidence: the agent errors calls failed with, and what the
/// cache did not give or take.
#[derive(Debug, Default)]
pub(crate) struct PassNotes {
    pub(crate) agent_failures: AgentFailures,
    pub(crate) cache_warnings: Vec<CacheWarning>,
    pub(crate) reused_closures: Vec<(TaskId, std::sync::Arc<str>)>,
}

impl PassNotes {
    pub(crate) fn extend(&mut self, more: PassNotes) {
        self.agent_failures.extend(more.agent_failures);
        self.cache_warnings.extend(more.cache_warnings);
        self.reused_closures.extend(more.reused_closures);
    }
}

/// One reserved call, owned and serialisable: everything a worker anywhere needs to know
/// about it except the prerequisites' outputs themselves (named here by their digests).
///
/// Its serde form is a versioned record of its own (pinned by `tests/fixtures/json/`), so
/// a call journaled by a durable-execution engine still reads after kleene changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatch {
    task: TaskId,
    position: usize,
    attempt: u32,
    input_digest: Digest,
    fix_attempts_used: u32,
    prerequisites: Vec<(TaskId, Digest)>,
    /// Boxed: most calls carry none, and a dispatch is moved around a lot.
    correction: Option<Box<DispatchCorrection>>,
}

/// The refused candidate a corrective call must fix, and the exact rejection.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DispatchCorrection {
    rejection: Rejection,
    candidate: Candidate,
}

impl Dispatch {
    /// A dispatch read back from its record.
    pub(crate) fn from_parts(
        task: TaskId,
        position: usize,
        attempt: u32,
        input_digest: Digest,
        fix_attempts_used: u32,
        prerequisites: Vec<(TaskId, Digest)>,
        correction: Option<(Rejection, Candidate)>,
    ) -> Self {
        Self {
            task,
            position,
            attempt,
            input_digest,
            fix_attempts_used,
            prerequisites,
            correction: correction.map(|(rejection, candidate)| {
                Box::new(DispatchCorrection {
                    rejection,
                    candidate,
                })
            }),
        }
    }

    /// The task to call.
    pub fn task(&self) -> &TaskId {
        &self.task
    }
    /// The task's place in the plan's topological order.
    pub fn position(&self) -> usize {
        self.position
    }
    /// The call number, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
    /// The digest of everything the call depends on (as reserved).
    pub fn input_digest(&self) -> Digest {
        self.input_digest
    }
    /// The run-wide fix attempts used when the call was reserved.
    pub fn fix_attempts_used(&self) -> u32 {
        self.fix_attempts_used
    }
    /// The task's direct prerequisites and the digests of their accepted outputs, sorted by
    /// task id.
    pub fn prerequisites(&self) -> &[(TaskId, Digest)] {
        &self.prerequisites
    }
    /// The correction to make, when an earlier candidate was refused.
    pub fn correction(&self) -> Option<Correction<'_>> {
        self.correction.as_ref().map(|c| Correction {
            rejection: &c.rejection,
            candidate: &c.candidate,
        })
    }
}

/// What one [`BatchMachine::reserve`] decided: the events to append, in one commit, before
/// any of the calls is made, and the calls.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reservation {
    /// Drains and reservations, in the order they were made.
    pub events: Vec<EvidenceEvent>,
    /// The reserved calls.
    pub dispatches: Vec<Dispatch>,
}

/// What one settlement decided: the events to append, and whether the batch must stop.
#[derive(Debug)]
#[non_exhaustive]
pub struct Settled {
    /// The closure's and the call's settlement (or the call's withdrawal).
    pub events: Vec<EvidenceEvent>,
    /// Set when the call was cancelled or could not be made: the driver reserves nothing
    /// more, lets the calls in flight settle and returns this.
    pub stop: Option<BatchError>,
}

/// The batch's progress and evidence as a sans-IO state machine: asked for work, it drains
/// what failures block and reserves every ready task up to a limit (the events to append
/// in one commit, and an owned [`Dispatch`] per call); settlements arrive in any order. Its
/// whole state is its evidence, so it is rebuilt from a journal's fold between any two
/// steps ([`Batch::machine`](super::Batch::machine)).
///
/// # Examples
///
/// ```
/// use std::collections::BTreeMap;
/// use kleene::batch::{Batch, Candidate, Proposal};
/// use kleene::{plan::AdmittedPath, AppBuildPlan, id::ChannelId, plan::Plan};
///
/// let plan = Plan::draft(AppBuildPlan::from_json(r#"{"tasks": [
///   {"id": "a", "kind": {"lane": "config"}, "owner": "A", "spec": {"intent": "a"},
///    "owned_paths": ["a.toml"]},
///   {"id": "b", "kind": {"lane": "config"}, "owner": "B", "spec": {"intent": "b"},
///    "owned_paths": ["b.toml"]}]}"#)?)
///     .normalize().consolidate()?.validate()?;
/// let batch = Batch::new(&plan, ChannelId::new("chan-1")?);
/// let (mut machine, started) = batch.machine(None)?;
/// assert_eq!(started.len(), 1); // the batch's start, to append first
///
/// let work = machine.reserve(8)?; // both tasks are ready: one commit, two calls
/// assert_eq!(work.dispatches.len(), 2);
/// // The calls may settle in any order.
/// for dispatch in work.dispatches.iter().rev() {
///     let file = AdmittedPath::admit(&format!("{}.toml", dispatch.task()))?;
///     let proposal = Proposal::new(Candidate::new(BTreeMap::from([(file, b"x".to_vec())])));
///     let settled = machine.settle(dispatch, Ok(proposal), &())?;
///     assert!(settled.stop.is_none());
/// }
/// assert!(machine.reserve(8)?.dispatches.is_empty());
/// assert!(machine.is_settled());
/// assert!(machine.evidence().summary().is_complete());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct BatchMachine<'p> {
    plan: &'p ValidatedPlan,
    /// The plan's tasks by position (topological order), so nothing looks one up by id.
    tasks: Vec<&'p PlannedTask>,
    channel: ChannelId,
    template: CanonicalHasher,
    graph: Prerequisites,
    /// The same prerequisites sorted by task id: the order calls list them in.
    by_id: Prerequisites,
    dependents: Prerequisites,
    evidence: BatchEvidence,
    /// Per task, how many prerequisites have not finished (accepted, failed or drained).
    waiting: Vec<usize>,
    /// Tasks whose prerequisites all finished and that may be called (or must be drained).
    ready: LowestFirst,
    /// Calls this machine handed out that have not settled.
    dispatched: usize,
    agent_failures: AgentFailures,
    /// The batch's cache.
    cache: Option<CacheBinding>,
    cache_warnings: Vec<CacheWarning>,
    reused_closures: Vec<(TaskId, std::sync::Arc<str>)>,
    /// Positions accepted with a reused output since a driver last took them: a driver that
    /// hands calls their prerequisites' outputs publishes these too.
    reused_positions: Vec<usize>,
    /// Ready tasks whose action keys [`take_ready_action_keys`](BatchMachine::take_ready_action_keys)
    /// handed out: a ready task's key never changes, so each is computed and handed out once.
    announced: LowestFirst,
    /// Of those, the ones [`reserve_reused`](BatchMachine::reserve_reused) has not tried yet.
    to_try: Vec<usize>,
}

impl std::fmt::Debug for BatchMachine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchMachine")
            .field("channel", &self.channel)
            .field("ready", &self.ready)
            .field("dispatched", &self.dispatched)
            .finish_non_exhaustive()
    }
}

impl<'p> BatchMachine<'p> {
    pub(crate) fn new(
        plan: &'p ValidatedPlan,
        channel: ChannelId,
        template: CanonicalHasher,
        evidence: BatchEvidence,
        cache: Option<CacheBinding>,
    ) -> Self {
        let graph = Prerequisites::of_plan(plan);
        let dependents = graph.reversed();
        let by_id = graph.sorted_by(plan.topological_order());
        let mut machine = Self {
            plan,
            tasks: plan.tasks().collect(),
            channel,
            template,
            graph,
            by_id,
            dependents,
            evidence,
            waiting: Vec::new(),
            ready: LowestFirst::default(),
            dispatched: 0,
            agent_failures: Vec::new(),
            cache,
            cache_warnings: Vec::new(),
            reused_closures: Vec::new(),
            reused_positions: Vec::new(),
            announced: LowestFirst::default(),
            to_try: Vec::new(),
        };
        machine.rebuild();
        machine
    }

    /// Recomputes readiness from the evidence alone. A call left in flight by an earlier
    /// pass counts as finished for its dependents, which then drain behind it: nothing this
    /// machine makes waits for a call it did not make.
    fn rebuild(&mut self) {
        let n = self.plan.len();
        self.waiting = (0..n)
            .map(|i| {
                self.graph
                    .of(i)
                    .iter()
                    .filter(|&&p| self.may_call(p))
                    .count()
            })
            .collect();
        let mut ready = LowestFirst::with_positions(n);
        for i in (0..n).filter(|&i| self.waiting[i] == 0 && self.may_call(i)) {
            ready.insert(i);
        }
        self.ready = ready;
    }

    fn may_call(&self, position: usize) -> bool {
        let recovery = self.evidence.recovery_enabled();
        self.evidence
            .task_at(position)
            .is_some_and(|t| t.may_call(recovery))
    }

    /// The evidence so far (every event the machine made is already folded in).
    pub fn evidence(&self) -> &BatchEvidence {
        &self.evidence
    }

    /// The evidence, ending the machine.
    pub fn into_evidence(self) -> BatchEvidence {
        self.evidence
    }

    /// How many calls this machine handed out that have not settled.
    pub fn in_flight(&self) -> usize {
        self.dispatched
    }

    /// Whether the batch has settled: no call in flight and nothing left to reserve or
    /// drain. (A [`reserve`](Self::reserve) with room drains everything it can.)
    pub fn is_settled(&self) -> bool {
        self.dispatched == 0 && self.ready.is_empty()
    }

    /// Takes the agent errors calls failed with so far (task, call number, error).
    pub fn take_agent_failures(&mut self) -> Vec<(TaskId, u32, AgentFailure)> {
        std::mem::take(&mut self.agent_failures)
    }

    /// Takes the closure records' text of the calls whose outputs were reused so far (each
    /// as the cache kept it, bound by the entry its reuse came from), for a driver that
    /// keeps records.
    pub fn take_reused_closures(&mut self) -> Vec<(TaskId, std::sync::Arc<str>)> {
        std::mem::take(&mut self.reused_closures)
    }

    /// Takes the positions of the tasks accepted with a reused output since the last take.
    pub(crate) fn take_reused_positions(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.reused_positions)
    }

    /// Takes what the batch's cache did not give or take so far (refused entries, failed
    /// stores): none of them stops the batch.
    pub fn take_cache_warnings(&mut self) -> Vec<CacheWarning> {
        std::mem::take(&mut self.cache_warnings)
    }

    /// The action keys the next [`reserve`](Self::reserve) looks up in the batch's cache that
    /// were not taken before: one for each task that became ready to be called since the last
    /// take and may be cached, with the task, in the order the machine takes them (a ready
    /// task's key never changes, so each is computed and handed out once). The machine never
    /// waits: a driver whose store answers asynchronously (a cache kept by a remote service)
    /// fetches these entries into the batch's cache (a
    /// [`MemoryCache`](super::cache::MemoryCache), say), then calls
    /// [`reserve_reused`](Self::reserve_reused). Empty when the batch has no cache.
    pub fn take_ready_action_keys(&mut self) -> Vec<(TaskId, ActionKey)> {
        if self.cache.is_none() {
            return Vec::new();
        }
        let fresh: Vec<usize> = self
            .ready
            .iter()
            .filter(|&p| !self.announced.contains(p))
            .collect();
        let order = self.plan.topological_order();
        let mut keys = Vec::with_capacity(fresh.len());
        for position in fresh {
            self.announced.insert(position);
            if let (Some(id), Some(key)) = (order.get(position), self.action_key(position)) {
                keys.push((id.clone(), key));
                self.to_try.push(position);
            }
        }
        keys
    }

    /// The action key of the task at `position`, whose prerequisites are all accepted, when
    /// the batch has a cache and the task may be cached.
    fn action_key(&self, position: usize) -> Option<ActionKey> {
        let binding = self.cache.as_ref()?;
        let order = self.plan.topological_order();
        let prerequisites = self.by_id.of(position).iter().filter_map(|&p| {
            let accepted = self.evidence.task_at(p)?.accepted()?;
            Some((order[p].clone(), accepted.digest()))
        });
        binding.key(self.tasks[position], prerequisites)
    }

    /// The event that accepts the task at `position` with an output its cache keeps, if it
    /// keeps one the task may take: made under the same key, naming the task, and writing
    /// only what the task owns.
    fn reuse(&mut self, position: usize, id: &TaskId) -> Option<EvidenceEvent> {
        let key = self.action_key(position)?;
        let binding = self.cache.as_ref()?;
        let (from, output, record) = binding.lookup(id, key, &mut self.cache_warnings)?;
        if let Err(rejection) = check_ownership(self.plan, self.tasks[position], output.candidate())
        {
            self.cache_warnings.push(CacheWarning::Unusable {
                task: id.clone(),
                key,
                rejection,
            });
            return None;
        }
        if let Some(record) = record {
            self.reused_closures.push((id.clone(), record));
        }
        let digest = output.digest();
        Some(EvidenceEvent::Reused {
            task: id.clone(),
            from,
            digest,
            candidate: output.into_candidate(),
        })
    }

    pub(crate) fn graph(&self) -> &Prerequisites {
        &self.graph
    }

    /// Whether some task depends on the task at `position`: only then does a call ever read
    /// its accepted output.
    pub(crate) fn has_dependents(&self, position: usize) -> bool {
        !self.dependents.of(position).is_empty()
    }

    /// The direct prerequisites of the task at `position`, sorted by task id.
    pub(crate) fn prerequisites_by_id(&self) -> &Prerequisites {
        &self.by_id
    }

    /// The plan's tasks by position.
    pub(crate) fn tasks(&self) -> &[&'p PlannedTask] {
        &self.tasks
    }

    /// Where `dispatch`'s task sits: its recorded position when that names the task (the
    /// ids share one allocation, so this is a pointer comparison), else a lookup.
    pub(crate) fn locate(&self, dispatch: &Dispatch) -> Option<usize> {
        let id = &dispatch.task;
        match self.plan.topological_order().get(dispatch.position) {
            Some(t) if t.shares_allocation_with(id) || t == id => Some(dispatch.position),
            _ => self.evidence.position(id),
        }
    }

    fn fold_error(&self, source: FoldError) -> BatchError {
        BatchError::new(self.channel.clone(), BatchErrorKind::Fold { source })
    }

    fn apply(&mut self, event: EvidenceEvent) -> Result<(), BatchError> {
        self.apply_at(None, event)
    }

    /// Folds an event of the task at `position` (a hint: checked, so a wrong one only
    /// costs a lookup).
    fn apply_at(
        &mut self,
        position: Option<usize>,
        event: EvidenceEvent,
    ) -> Result<(), BatchError> {
        // Every accepted digest the machine folds it computed from its candidate just before.
        self.evidence
            .apply_at(position, event, false)
            .map_err(|source| self.fold_error(source))
    }

    /// Folds events made outside the machine's steps (the interruptions a resume closes, a
    /// consumed recovery request) and recomputes readiness once. Only between passes, with
    /// nothing in flight.
    pub(crate) fn apply_external(&mut self, events: Vec<EvidenceEvent>) -> Result<(), BatchError> {
        for event in events {
            self.apply(event)?;
        }
        self.rebuild();
        Ok(())
    }

    /// Folds the fix draws a call journaled itself while it ran.
    pub(crate) fn apply_drawn(&mut self, event: EvidenceEvent) -> Result<(), BatchError> {
        self.apply(event)
    }

    /// Marks the task at `position` finished for its dependents, releasing those it was the
    /// last unfinished prerequisite of.
    fn finished(&mut self, position: usize) {
        for &d in self.dependents.of(position) {
            if let Some(w) = self.waiting.get_mut(d) {
                *w = w.saturating_sub(1);
                if *w == 0 && self.may_call(d) {
                    self.ready.insert(d);
                }
            }
        }
    }

    /// The failed task that keeps the task at `position` from running, if any: a
    /// prerequisite that is not accepted, or the root that drained it.
    fn blocker(&self, position: usize) -> Option<TaskId> {
        let order = self.plan.topological_order();
        for &p in self.graph.of(position) {
            match self.evidence.status_at(p) {
                Some(TaskStatus::Accepted) => {}
                Some(TaskStatus::Drained { blocked_by }) => return Some(blocked_by),
                _ => return Some(order[p].clone()),
            }
        }
        None
    }

    /// Drains every ready task a failure blocks and reserves ready tasks, lowest position
    /// first, until `limit` calls are in flight. Append `events` in one commit before making
    /// any of the calls. With a limit of one this is the plan's topological order.
    ///
    /// # Errors
    ///
    /// [`BatchErrorKind::Fold`] when an event the machine made does not fold (an internal
    /// invariant broke).
    pub fn reserve(&mut self, limit: usize) -> Result<Reservation, BatchError> {
        let mut events = Vec::new();
        let mut dispatches = Vec::new();
        self.reserve_into(limit, &mut events, &mut dispatches, true)?;
        Ok(Reservation { events, dispatches })
    }

    /// Accepts every task whose key was taken since the last call and whose result the
    /// batch's cache holds, making no call; the other ready tasks stay ready, and those a
    /// reuse makes ready wait for the next take. The events go in the next commit, as
    /// [`reserve`](Self::reserve)'s do.
    ///
    /// For a driver whose cache answers asynchronously: it fetches the entries of
    /// [`take_ready_action_keys`](Self::take_ready_action_keys) into the batch's cache,
    /// calls this, and repeats while new keys are taken; only then does it reserve calls.
    /// (`reserve` itself reuses too, but goes on to call a task a reuse made ready before its
    /// entry could be fetched.) Each ready task is tried once, so a pass of many tasks costs
    /// one key and one lookup a task, not one a task a round.
    ///
    /// # Errors
    ///
    /// [`BatchErrorKind::Fold`] when an event the machine made does not fold (an internal
    /// invariant broke).
    pub fn reserve_reused(&mut self) -> Result<Vec<EvidenceEvent>, BatchError> {
        let mut events = Vec::new();
        // Only the tasks whose keys were taken since: the others were tried already, and a
        // task found in no cache then is in none now (its key has not changed).
        for position in std::mem::take(&mut self.to_try) {
            if !self.ready.contains(position)
                || !self.may_call(position)
                || self.blocker(position).is_some()
            {
                // Reserved, drained or dropped by the next reservation, as ever.
                continue;
            }
            let id = self.plan.topological_order()[position].clone();
            if let Some(event) = self.reuse(position, &id) {
                self.ready.remove(position);
                self.apply_at(Some(position), event.clone())?;
                events.push(event);
                self.reused_positions.push(position);
                self.finished(position);
            }
        }
        Ok(events)
    }

    /// [`reserve`](Self::reserve) into the caller's buffers (a driver reuses them); without
    /// `digests`, the dispatches leave out their prerequisites' digests (a driver that hands
    /// the call the outputs themselves has no use for them).
    pub(crate) fn reserve_into(
        &mut self,
        limit: usize,
        events: &mut Vec<EvidenceEvent>,
        dispatches: &mut Vec<Dispatch>,
        digests: bool,
    ) -> Result<(), BatchError> {
        // At most one event and one call per ready task: sized once, so a commit of
        // thousands of calls does not grow (and copy) the buffers step by step.
        let room = limit.saturating_sub(self.dispatched).min(self.ready.len());
        events.reserve(room);
        dispatches.reserve(room);
        while self.dispatched < limit {
            let Some(position) = self.ready.pop_first() else {
                break;
            };
            if !self.may_call(position) {
                continue;
            }
            let id = self.plan.topological_order()[position].clone();
            if let Some(blocked_by) = self.blocker(position) {
                let event = EvidenceEvent::Drained {
                    task: id,
                    blocked_by,
                };
                self.apply_at(Some(position), event.clone())?;
                events.push(event);
                self.finished(position);
                continue;
            }
            if let Some(event) = self.reuse(position, &id) {
                // Accepted without a call: its dependents may be reused in the same pass.
                self.apply_at(Some(position), event.clone())?;
                events.push(event);
                self.reused_positions.push(position);
                self.finished(position);
                continue;
            }
            let dispatch = self.dispatch_for(position, id, digests);
            // Folded from its parts, then built once for the journal.
            self.evidence
                .apply_reserved(
                    Some(position),
                    &dispatch.task,
                    dispatch.attempt,
                    dispatch.input_digest,
                )
                .map_err(|source| self.fold_error(source))?;
            events.push(EvidenceEvent::Reserved {
                task: dispatch.task.clone(),
                attempt: dispatch.attempt,
                input_digest: dispatch.input_digest,
            });
            self.dispatched += 1;
            dispatches.push(dispatch);
        }
        Ok(())
    }

    fn dispatch_for(&self, position: usize, task: TaskId, digests: bool) -> Dispatch {
        let order = self.plan.topological_order();
        let t = self.evidence.task_at(position);
        let prerequisites: Vec<(TaskId, Digest)> = if digests {
            self.by_id
                .of(position)
                .iter()
                .filter_map(|&p| {
                    let a = self.evidence.task_at(p)?.accepted()?;
                    Some((order[p].clone(), a.digest()))
                })
                .collect()
        } else {
            Vec::new()
        };
        Dispatch {
            task,
            position,
            attempt: t.map_or(0, |t| t.calls()) + 1,
            input_digest: input_digest(
                self.plan,
                &self.template,
                &self.graph,
                &self.evidence,
                position,
            ),
            fix_attempts_used: self.evidence.fix_attempts_used(),
            prerequisites,
            correction: t.and_then(|t| t.rejections().last()).map(|r| {
                Box::new(DispatchCorrection {
                    rejection: r.rejection().clone(),
                    candidate: r.candidate().clone(),
                })
            }),
        }
    }

    /// Records that `dispatch`'s call draws one fix attempt for `fix`; append the event
    /// before the fix runs.
    ///
    /// # Errors
    ///
    /// [`BatchErrorKind::Fold`] when the call is not in flight.
    pub fn draw_fix(
        &mut self,
        dispatch: &Dispatch,
        fix: &TaskId,
    ) -> Result<EvidenceEvent, BatchError> {
        self.draw_fix_of(&dispatch.task, dispatch.attempt, fix)
    }

    /// [`draw_fix`](Self::draw_fix) for call `attempt` of `task`: a concurrent driver keeps
    /// only that much of each call in flight (the call's future owns its dispatch).
    pub(crate) fn draw_fix_of(
        &mut self,
        task: &TaskId,
        attempt: u32,
        fix: &TaskId,
    ) -> Result<EvidenceEvent, BatchError> {
        let event = EvidenceEvent::FixDrawn {
            task: task.clone(),
            attempt,
            fix: fix.clone(),
        };
        self.apply(event.clone())?;
        Ok(event)
    }

    /// Settles `dispatch`'s call with what the worker returned: the built-in ownership
    /// check, the worker's own rejection and `contract` decide acceptance. Calls may settle
    /// in any order; a task that finishes releases (or, when it failed, will drain) its
    /// dependents at the next [`reserve`](Self::reserve).
    ///
    /// # Errors
    ///
    /// [`BatchErrorKind::Fold`] when the call is not in flight.
    pub fn settle(
        &mut self,
        dispatch: &Dispatch,
        result: Result<Proposal, WorkerFailure>,
        contract: &impl OutputContract,
    ) -> Result<Settled, BatchError> {
        let settled = self.judge(dispatch, result, contract)?;
        for event in &settled.events {
            self.fold_settled(dispatch, event.clone())?;
        }
        self.close(dispatch, settled.stop.is_some());
        Ok(settled)
    }

    /// What `dispatch`'s call settles as, not yet folded: a driver journals each event and
    /// then hands it to [`fold_settled`](Self::fold_settled) (so a candidate is never
    /// copied), then calls [`close`](Self::close).
    pub(crate) fn judge(
        &mut self,
        dispatch: &Dispatch,
        result: Result<Proposal, WorkerFailure>,
        contract: &impl OutputContract,
    ) -> Result<Settled, BatchError> {
        let mut events = Vec::with_capacity(2);
        let stop = self.judge_into(dispatch, result, contract, &mut events)?;
        Ok(Settled { events, stop })
    }

    /// [`judge`](Self::judge), pushing the events onto `events` (a driver's commit buffer,
    /// so a settlement allocates no list of its own) and returning why the pass stops, if
    /// it does.
    pub(crate) fn judge_into(
        &mut self,
        dispatch: &Dispatch,
        result: Result<Proposal, WorkerFailure>,
        contract: &impl OutputContract,
        events: &mut Vec<EvidenceEvent>,
    ) -> Result<Option<BatchError>, BatchError> {
        let (id, attempt) = (&dispatch.task, dispatch.attempt);
        let position = self.locate(dispatch);
        let in_flight = position
            .and_then(|p| self.evidence.task_at(p))
            .and_then(|t| t.in_flight())
            .map(|(a, _)| a);
        let task = position.and_then(|p| self.tasks.get(p)).copied();
        let (Some(task), true) = (task, in_flight == Some(attempt)) else {
            // Not a call of this batch in flight: the fold names what is wrong with it.
            let event = EvidenceEvent::Settled {
                task: id.clone(),
                attempt,
                settlement: Settlement::Infrastructure(InfrastructureFailure::Transport {
                    detail: "settlement of a call that is not in flight".to_owned(),
                }),
            };
            let mut probe = self.evidence.clone();
            return Err(match probe.apply_checked(event, false) {
                Err(source) => self.fold_error(source),
                Ok(()) => self.fold_error(FoldError::UnknownTask {
                    index: self.evidence.event_count(),
                    task: id.clone(),
                }),
            });
        };
        let settlement = match result {
            Ok(Proposal {
                candidate,
                rejection,
                closure,
                error,
                record,
            }) => {
                if let Some(failure) = error {
                    self.agent_failures.push((id.clone(), attempt, failure));
                }
                if let Some(closure) = closure {
                    events.push(EvidenceEvent::ClosureSettled {
                        task: id.clone(),
                        attempt,
                        closure,
                    });
                }
                let verdict = check_ownership(self.plan, task, &candidate)
                    .and_then(|()| rejection.map_or(Ok(()), Err))
                    .and_then(|()| contract.check(task, &candidate));
                match verdict {
                    Ok(()) => {
                        let digest = candidate.digest();
                        if let Some(position) = position.filter(|_| self.cache.is_some()) {
                            self.keep(position, attempt, &candidate, digest, record.as_deref());
                        }
                        Settlement::Accepted { digest, candidate }
                    }
                    Err(rejection) => Settlement::Rejected {
                        candidate,
                        rejection,
                    },
                }
            }
            Err(WorkerFailure::Infrastructure(failure)) => Settlement::Infrastructure(failure),
            Err(WorkerFailure::Agent(failure)) if failure.kind() != AgentErrorKind::Cancelled => {
                let settlement = Settlement::Infrastructure(InfrastructureFailure::Agent {
                    detail: failure.chain_text(),
                });
                self.agent_failures.push((id.clone(), attempt, failure));
                settlement
            }
            Err(WorkerFailure::Agent(failure)) => {
                return Ok(Some(self.cancelled(dispatch, Some(failure))));
            }
            Err(WorkerFailure::Cancelled) => return Ok(Some(self.cancelled(dispatch, None))),
            Err(WorkerFailure::Unavailable { detail }) => {
                let event = EvidenceEvent::Withdrawn {
                    task: id.clone(),
                    attempt,
                    detail: detail.clone(),
                };
                let fixes_drawn = self
                    .evidence
                    .closures_of(id)
                    .find(|c| c.attempt() == attempt)
                    .map_or(0, |c| c.fixes_drawn());
                let stop = BatchError::new(
                    self.channel.clone(),
                    BatchErrorKind::WorkerUnavailable {
                        task: id.clone(),
                        attempt,
                        detail,
                        fixes_drawn,
                    },
                );
                events.push(event);
                return Ok(Some(stop));
            }
        };
        events.push(EvidenceEvent::Settled {
            task: id.clone(),
            attempt,
            settlement,
        });
        Ok(None)
    }

    /// Keeps call `attempt`'s accepted output of the task at `position` in the batch's cache, when it has
    /// one and the task may be cached.
    fn keep(
        &mut self,
        position: usize,
        attempt: u32,
        candidate: &Candidate,
        digest: Digest,
        record: Option<&ClosureRecord>,
    ) {
        let Some(key) = self.action_key(position) else {
            return;
        };
        if let Some(binding) = &self.cache {
            let output = AcceptedOutput::trusted(candidate.clone(), digest);
            binding.store(
                key,
                &self.tasks[position].id,
                &self.channel,
                attempt,
                &output,
                record,
                &mut self.cache_warnings,
            );
        }
    }

    /// Folds one event of a [`judge`](Self::judge)d settlement, once it is journaled.
    pub(crate) fn fold_settled(
        &mut self,
        dispatch: &Dispatch,
        event: EvidenceEvent,
    ) -> Result<(), BatchError> {
        self.apply_at(Some(dispatch.position), event)
    }

    /// Ends `dispatch`'s call once its settlement is folded: the task is ready again (a
    /// retry) or finished for its dependents. A call that `stopped` the pass (cancelled, or
    /// withdrawn) no longer counts as this machine's; a cancelled call's reservation stays
    /// in the evidence for a resume to judge.
    pub(crate) fn close(&mut self, dispatch: &Dispatch, stopped: bool) {
        self.dispatched = self.dispatched.saturating_sub(1);
        if stopped {
            return;
        }
        let Some(position) = self.locate(dispatch) else {
            return;
        };
        if self.may_call(position) {
            self.ready.insert(position);
        } else {
            self.finished(position);
        }
    }

    fn cancelled(&self, dispatch: &Dispatch, cause: Option<AgentFailure>) -> BatchError {
        BatchError::new(
            self.channel.clone(),
            BatchErrorKind::Cancelled {
                task: dispatch.task.clone(),
                attempt: dispatch.attempt,
                cause,
            },
        )
    }
}

/// The digest of everything a call of the task at `position` depends on: the plan, the
/// batch inputs (both in `template`) and the prerequisites' accepted outputs.
pub(crate) fn input_digest(
    plan: &ValidatedPlan,
    template: &CanonicalHasher,
    graph: &Prerequisites,
    evidence: &BatchEvidence,
    position: usize,
) -> Digest {
    let order = plan.topological_order();
    let accepted = |p: usize| evidence.task_at(p).and_then(|t| t.accepted());
    template
        .clone()
        .put(&order[position])
        .seq(graph.of(position).iter().map(|&p| (&order[p], accepted(p))))
        .finish()
}

/// A set of small numbers taken lowest first (the ready tasks' positions, a concurrent
/// driver's free slots): one bit per number, and a lower bound on the lowest set bit. A run
/// takes and puts back one number per call, so this is a few word operations where a
/// `BTreeSet` walked and rebalanced its nodes (about 200 instructions a call for 10k ready
/// tasks) and a binary heap sifted, and it is one allocation of `n / 8` bytes.
#[derive(Clone, Default)]
pub(super) struct LowestFirst {
    words: Vec<u64>,
    /// No bit below this word is set.
    first: usize,
    len: usize,
}

impl LowestFirst {
    /// An empty set with room for `0..n`.
    pub(super) fn with_positions(n: usize) -> Self {
        Self {
            words: vec![0; n.div_ceil(64)],
            first: 0,
            len: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `position`; whether it was not in the set yet.
    pub(super) fn insert(&mut self, position: usize) -> bool {
        let (word, bit) = (position / 64, 1u64 << (position % 64));
        if word >= self.words.len() {
            // Positions come from the plan the set was sized for; grow rather than lose one.
            self.words.resize(word + 1, 0);
        }
        if self.words[word] & bit != 0 {
            return false;
        }
        self.words[word] |= bit;
        self.len += 1;
        self.first = self.first.min(word);
        true
    }

    /// Whether `position` is in the set.
    pub(super) fn contains(&self, position: usize) -> bool {
        self.words
            .get(position / 64)
            .is_some_and(|w| w & (1u64 << (position % 64)) != 0)
    }

    /// Takes `position` out of the set; whether it was in it.
    pub(super) fn remove(&mut self, position: usize) -> bool {
        let bit = 1u64 << (position % 64);
        match self.words.get_mut(position / 64) {
            Some(word) if *word & bit != 0 => {
                *word &= !bit;
                self.len -= 1;
                true
            }
            _ => false,
        }
    }

    pub(super) fn pop_first(&mut self) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let at = self.first + self.words.get(self.first..)?.iter().position(|&w| w != 0)?;
        self.first = at;
        let word = &mut self.words[at];
        let bit = word.trailing_zeros() as usize;
        *word &= *word - 1;
        self.len -= 1;
        Some(at * 64 + bit)
    }

    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(at, &word)| {
            (0..64)
                .filter(move |bit| word & (1u64 << bit) != 0)
                .map(move |bit| at * 64 + bit)
        })
    }
}

impl std::fmt::Debug for LowestFirst {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// Every task's direct prerequisites (or, reversed, dependents) as positions in topological
/// order, read once from the plan's graph (node `i` is the `i`-th task), so nothing searches
/// by id.
#[derive(Debug, Clone)]
pub(crate) struct Prerequisites {
    start: Vec<usize>,
    positions: Vec<usize>,
}

impl Prerequisites {
    pub(crate) fn of_plan(plan: &ValidatedPlan) -> Self {
        let graph = plan.graph();
        let mut start = Vec::with_capacity(plan.len() + 1);
        let mut positions = Vec::with_capacity(graph.edge_count());
        for i in 0..plan.len() {
            start.push(positions.len());
            let from = positions.len();
            positions.extend(
                graph
                    .neighbors_directed(NodeIndex::new(i), Direction::Incoming)
                    .map(|n| n.index()),
            );
            positions[from..].sort_unstable();
        }
        start.push(positions.len());
        Self { start, positions }
    }

    /// The same lists, each sorted by the ids `order` gives the positions.
    fn sorted_by(&self, order: &[TaskId]) -> Self {
        let mut positions = self.positions.clone();
        for w in self.start.windows(2) {
            positions[w[0]..w[1]].sort_unstable_by(|&a, &b| order[a].cmp(&order[b]));
        }
        Self {
            start: self.start.clone(),
            positions,
        }
    }

    /// The same edges the other way round: each task's direct dependents, sorted.
    fn reversed(&self) -> Self {
        let n = self.start.len().saturating_sub(1);
        let mut counts = vec![0usize; n + 1];
        for &p in &self.positions {
            counts[p + 1] += 1;
        }
        for i in 0..n {
            counts[i + 1] += counts[i];
        }
        let start = counts.clone();
        let mut next = counts;
        let mut positions = vec![0usize; self.positions.len()];
        for d in 0..n {
            for &p in self.of(d) {
                positions[next[p]] = d;
                next[p] += 1;
            }
        }
        Self { start, positions }
    }

    pub(crate) fn of(&self, position: usize) -> &[usize] {
        match (self.start.get(position), self.start.get(position + 1)) {
            (Some(&a), Some(&b)) => &self.positions[a..b],
            _ => &[],
        }
    }
}

/// The built-in ownership check (a candidate may only write paths the plan gives its task:
/// an owned path itself or anything beneath an owned directory). It runs before the
/// worker's own rejection and the user's contract; the candidate is checked whole before
/// anything is accepted.
///
/// One owner lookup per file, never a scan of the owned paths: `O(n · d · log m)` for `n`
/// files of depth `d` and `m` owned paths in the plan.
fn check_ownership(
    plan: &ValidatedPlan,
    task: &PlannedTask,
    candidate: &Candidate,
) -> Result<(), Rejection> {
    if let Some(path) = candidate
        .files()
        .keys()
        .find(|p| plan.owner_of(p) != Some(&task.id))
    {
        return Err(Rejection::NotOwned {
            task: task.id.clone(),
            path: path.clone(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ready_set_hands_out_the_lowest_position_first() {
        let mut ready = LowestFirst::with_positions(130);
        for p in [129, 3, 64, 3, 0] {
            ready.insert(p);
        }
        assert_eq!(ready.len(), 4);
        assert_eq!(format!("{ready:?}"), "{0, 3, 64, 129}");
        assert_eq!(ready.pop_first(), Some(0));
        assert_eq!(ready.pop_first(), Some(3));
        // A position put back below the last one taken is found again.
        ready.insert(1);
        assert_eq!(ready.pop_first(), Some(1));
        assert_eq!(ready.pop_first(), Some(64));
        ready.insert(200);
        assert_eq!(ready.pop_first(), Some(129));
        assert_eq!(ready.pop_first(), Some(200));
        assert_eq!(ready.pop_first(), None);
        assert!(ready.is_empty());
    }

    #[test]
    fn reversed_prerequisites_are_the_dependents() {
        let forward = Prerequisites {
            start: vec![0, 0, 1, 3],
            positions: vec![0, 0, 1],
        };
        let back = forward.reversed();
        assert_eq!(back.of(0), &[1, 2]);
        assert_eq!(back.of(1), &[2]);
        assert!(back.of(2).is_empty());
    }
}
