//! Running a validated plan: fresh dispatch, resume and bounded recovery over one channel.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::cache::binding::CacheSettings;
use super::cache::{ActionCache, ActionKeyParts, CacheWarning};

use super::error::{BatchError, BatchErrorKind};
use super::evidence::event::{EvidenceEvent, InventoryEntry};
use super::evidence::{BatchEvidence, EVIDENCE_VERSION, FoldError, TaskStatus};
use super::journal::{EvidenceJournal, JournalError};
use super::machine::{BatchMachine, PassNotes, Prerequisites, input_digest};
use super::pass::{Driver, Observer, RecoveryPass, Run, Sequential};
use super::recovery::{self, IneligibleReason, RecoveryError, RecoveryRequest};
use super::worker::{AgentFailure, OutputContract, PendingTurnReplay, Worker};

use crate::id::digest::CanonicalHasher;
use crate::plan::{PlannedTask, ValidatedPlan};
use crate::{id::AgentId, id::ChannelId, id::TaskId, id::digest::Digest};

/// The fewest journaled events after which the executor compacts the journal into a
/// snapshot. Past it, compaction waits until the tail is as long as the snapshot (the
/// inventory plus the events it folds), so the amortised cost per event stays constant.
pub const DEFAULT_COMPACTION_AFTER: u64 = 4096;

/// What a consumed recovery request decided, and the evidence after the recovery ran.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RecoveryOutcome {
    /// Roots granted one corrective call.
    pub granted: Vec<TaskId>,
    /// Roots refused, with why; they stay blocked.
    pub refused: Vec<(TaskId, IneligibleReason)>,
    /// The evidence after the corrective calls and the released descendants ran.
    pub evidence: BatchEvidence,
}

/// What [`Batch::run`] did: whether it resumed, what its recovery decided, the evidence at
/// the end, and every agent error a call failed with (typed, in call order).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunOutcome {
    /// The evidence after the run.
    pub evidence: BatchEvidence,
    /// True when the run continued evidence already on the channel.
    pub resumed: bool,
    /// Roots granted their one corrective call by this run's recovery.
    pub granted: Vec<TaskId>,
    /// Roots this run's recovery refused, with why.
    pub refused: Vec<(TaskId, IneligibleReason)>,
    /// The agent errors calls failed with (each call's task and number), in call order.
    pub agent_failures: Vec<(TaskId, u32, AgentFailure)>,
    /// What the batch's cache did not give or take (refused entries, failed stores), in
    /// the order they happened; none of them changes the evidence.
    pub cache_warnings: Vec<CacheWarning>,
    /// The closure records of the calls whose outputs this run reused, as the cache kept
    /// their text (bound by the sealed entry its
    /// [`Reused`](crate::batch::evidence::EvidenceEvent::Reused) event came from), for a
    /// caller that keeps each call's record beside the evidence; reading one
    /// ([`ClosureRecord::from_json`](crate::closure::ClosureRecord::from_json)) and checking
    /// it against the reuse's digests
    /// ([`BatchEvidence::verify_closures`](crate::batch::BatchEvidence::verify_closures)) is
    /// the checker's part.
    pub reused_closures: Vec<(TaskId, std::sync::Arc<str>)>,
}

/// A batch of one validated plan on one trusted channel: the name its evidence is kept under
/// in the journal, which a resume must present again (evidence of another channel is never
/// read).
///
/// # Examples
///
/// See the [module documentation](super).
#[derive(Debug, Clone)]
pub struct Batch<'p> {
    pub(super) plan: &'p ValidatedPlan,
    pub(super) channel: ChannelId,
    inputs: BTreeMap<String, Digest>,
    recovery: bool,
    replay: BTreeMap<AgentId, PendingTurnReplay>,
    pub(super) group_commit: bool,
    pub(super) durable_observation: bool,
    pub(super) compaction_after: u64,
    cache: CacheSettings,
}

impl<'p> Batch<'p> {
    /// A batch running `plan` on `channel`, without recovery, every agent `allow`, each
    /// event committed on its own.
    pub fn new(plan: &'p ValidatedPlan, channel: ChannelId) -> Self {
        Self {
            plan,
            channel,
            inputs: BTreeMap::new(),
            recovery: false,
            replay: BTreeMap::new(),
            group_commit: false,
            durable_observation: false,
            compaction_after: DEFAULT_COMPACTION_AFTER,
            cache: CacheSettings::default(),
        }
    }

    /// Adds an immutable named input (its digest is recorded; a resume or recovery with
    /// different bytes is refused).
    pub fn with_input(mut self, name: impl Into<String>, bytes: &[u8]) -> Self {
        let digest = Digest::of("batch input", bytes);
        self.inputs.insert(name.into(), digest);
        self
    }

    /// Bounded batch recovery (default off). With it, a task's first output-contract
    /// rejection is retained and deferred (the batch settles with the task failed and its
    /// dependents drained) instead of being retried at once; a later [`RecoveryRequest`] can
    /// grant the task one corrective call. The choice is recorded: a resume or recovery of
    /// the batch with the other choice is refused.
    pub fn with_recovery(mut self, enabled: bool) -> Self {
        self.recovery = enabled;
        self
    }

    /// Declares what a resume does with `agent`'s pending turns: calls a crash left
    /// reserved and never settled (default [`PendingTurnReplay::Allow`]: make them again).
    pub fn with_pending_turn_replay(mut self, agent: AgentId, policy: PendingTurnReplay) -> Self {
        self.replay.insert(agent, policy);
        self
    }

    /// Group commit: a settlement (and any drains after it) is committed together with the
    /// next reservation, in one durable append, instead of on its own. Every event is still
    /// durable before the next call may have any effect; only the number of syncs changes.
    pub fn with_group_commit(mut self, group: bool) -> Self {
        self.group_commit = group;
        self
    }

    /// Durable observation (default off): an observer of the run (`run_observed`,
    /// `run_threaded_observed`, `run_async_observed`) is shown each event only once the
    /// journal holds it durably, instead of as soon as it is decided. With group commit a
    /// settlement is otherwise shown before the append that holds it, and a report made
    /// from it (`accepted`) can say what a full disk or a crash then takes back. Each event
    /// a group commit holds back is copied once for the observer.
    ///
    /// ```
    /// # use kleene::batch::Batch;
    /// # fn demo(batch: Batch<'_>) -> Batch<'_> {
    /// batch.with_group_commit(true).with_durable_observation(true)
    /// # }
    /// ```
    pub fn with_durable_observation(mut self, durable: bool) -> Self {
        self.durable_observation = durable;
        self
    }

    /// Compacts the journal after at least `events` events (default
    /// [`DEFAULT_COMPACTION_AFTER`]).
    pub fn with_compaction_after(mut self, events: u64) -> Self {
        self.compaction_after = events.max(1);
        self
    }

    /// Reuses accepted outputs from `cache` and keeps this batch's in it. Before a task is
    /// called, its action key (see [`ActionKeyParts`]) is looked up: a checked entry made
    /// for the same task under the same key, writing only what the task owns, accepts the
    /// task without a call, recorded as an [`EvidenceEvent::Reused`] event that names the
    /// call that made it. Every accepted call's output is kept under its key. By default a
    /// task's key covers its plan entry, the batch's inputs and its prerequisites' accepted
    /// outputs; [`with_action_keys`](Self::with_action_keys) says what else a call reads.
    /// A refused entry or a failed store is a warning ([`RunOutcome::cache_warnings`]),
    /// never a failure.
    ///
    /// ```
    /// use std::{collections::BTreeMap, sync::Arc};
    /// use kleene::batch::{Batch, Candidate, MemoryJournal, Proposal, Worker, WorkerCall, WorkerFailure};
    /// use kleene::batch::cache::MemoryCache;
    /// use kleene::{plan::AdmittedPath, AppBuildPlan, id::ChannelId, plan::Plan};
    ///
    /// let plan = Plan::draft(AppBuildPlan::from_json(r#"{"tasks": [
    ///   {"id": "a", "owner": "A", "spec": {"intent": "a"}, "owned_paths": ["a.txt"]}]}"#)?)
    ///     .normalize().consolidate()?.validate()?;
    /// struct Counting(u32);
    /// impl Worker for Counting {
    ///     fn call(&mut self, _: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
    ///         self.0 += 1;
    ///         let file = AdmittedPath::admit("a.txt").unwrap();
    ///         Ok(Candidate::new(BTreeMap::from([(file, b"a".to_vec())])).into())
    ///     }
    /// }
    /// let cache = Arc::new(MemoryCache::new());
    /// let mut worker = Counting(0);
    /// for run in ["run-1", "run-2"] {
    ///     let batch = Batch::new(&plan, ChannelId::new(run)?).with_cache(cache.clone());
    ///     let outcome = batch.run(&mut worker, &(), &mut MemoryJournal::default())?;
    ///     assert!(outcome.evidence.summary().is_complete());
    /// }
    /// assert_eq!(worker.0, 1); // the second run reused the first run's output
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_cache(mut self, cache: Arc<dyn ActionCache>) -> Self {
        self.cache.cache = Some(cache);
        self
    }

    /// What names each task's call for the cache, but for its prerequisites' accepted
    /// outputs (which the batch adds): its plan entry and whatever else the call can read
    /// or is affected by (files, settings), or `None` for a task that must never be cached
    /// (one with effects outside its output). Replaces the default keys of
    /// [`with_cache`](Self::with_cache), batch inputs included.
    pub fn with_action_keys(
        mut self,
        keys: impl Fn(&PlannedTask) -> Option<ActionKeyParts> + Send + Sync + 'static,
    ) -> Self {
        self.cache.keys = Some(Arc::new(keys));
        self
    }

    /// The channel.
    pub fn channel(&self) -> &ChannelId {
        &self.channel
    }

    pub(crate) fn plan(&self) -> &'p ValidatedPlan {
        self.plan
    }

    fn policy(&self, agent: &AgentId) -> PendingTurnReplay {
        self.replay.get(agent).copied().unwrap_or_default()
    }

    /// Runs the batch from the start.
    ///
    /// # Errors
    ///
    /// [`BatchErrorKind::EvidenceExists`] when the channel already has evidence,
    /// [`BatchErrorKind::Cancelled`] when a call was cancelled, [`BatchErrorKind::Journal`] when the
    /// journal fails.
    pub fn dispatch(
        &self,
        worker: &mut impl Worker,
        contract: &impl OutputContract,
        journal: &mut impl EvidenceJournal,
    ) -> Result<BatchEvidence, BatchError> {
        self.dispatch_observed(&mut Sequential(worker), contract, journal, Box::new(|_| {}))
            .map(|(evidence, _)| evidence)
    }

    fn dispatch_observed(
        &self,
        driver: &mut impl Driver,
        contract: &impl OutputContract,
        journal: &mut impl EvidenceJournal,
        observer: Observer<'_>,
    ) -> Result<(BatchEvidence, PassNotes), BatchError> {
        let mut run = self.begin_dispatch(journal, observer)?;
        driver.drive(&mut run, contract)?;
        run.finish()
    }

    /// The start of a fresh batch's first pass: refuses a channel that has evidence and
    /// journals the start; every driver then drives the returned pass.
    pub(super) fn begin_dispatch<'j, J: EvidenceJournal, O: FnMut(&EvidenceEvent)>(
        &'j self,
        journal: &'j mut J,
        mut observer: O,
    ) -> Result<Run<'j, 'p, J, O>, BatchError> {
        // An interrupted first append leaves only a torn tail: cut it before writing.
        journal
            .repair_torn_tail(&self.channel)
            .map_err(|e| BatchError::new(self.channel.clone(), e))?;
        if journal
            .load(&self.channel)
            .map_err(|e| BatchError::new(self.channel.clone(), e))?
            .is_some()
        {
            return Err(BatchError::new(
                self.channel.clone(),
                BatchErrorKind::EvidenceExists,
            ));
        }
        let started = self.started();
        let evidence = BatchEvidence::start_planned(&started, self.plan.shared_order())
            .map_err(|source| self.fold_error(source))?;
        // Shown before it is handed to the journal by value (a memory journal keeps it rather
        // than a copy of the whole inventory), as a group commit shows its events before
        // their append; an append that fails ends the run before anything else is recorded.
        // With durable observation, a copy is shown once the append returns.
        let shown_after = self.durable_observation.then(|| started.clone());
        if shown_after.is_none() {
            observer(&started);
        }
        journal
            .append_owned(&self.channel, &mut vec![started])
            .map_err(|e| BatchError::new(self.channel.clone(), e))?;
        if let Some(started) = &shown_after {
            observer(started);
        }
        Ok(Run::new(self, journal, evidence, 1, 0, observer))
    }

    /// Continues the batch from its journal: the restored evidence replaces any local state.
    /// Calls left in flight are closed as interrupted (free of their budgets, up to as many
    /// as each budget) and re-dispatched
    /// for `allow` agents; a `block` agent's stops the resume.
    ///
    /// # Errors
    ///
    /// [`BatchErrorKind::NoEvidence`], [`BatchErrorKind::ChannelMismatch`],
    /// [`BatchErrorKind::PlanMismatch`], [`BatchErrorKind::InventoryMismatch`],
    /// [`BatchErrorKind::InputsChanged`], [`BatchErrorKind::RecoveryModeChanged`] when the evidence
    /// cannot be trusted for this batch; [`BatchErrorKind::PendingTurnBlocked`] for a `block`
    /// agent's interrupted call; [`BatchErrorKind::Cancelled`], [`BatchErrorKind::Journal`].
    pub fn resume(
        &self,
        worker: &mut impl Worker,
        contract: &impl OutputContract,
        journal: &mut impl EvidenceJournal,
    ) -> Result<BatchEvidence, BatchError> {
        self.resume_observed(&mut Sequential(worker), contract, journal, Box::new(|_| {}))
            .map(|(evidence, _)| evidence)
    }

    fn resume_observed(
        &self,
        driver: &mut impl Driver,
        contract: &impl OutputContract,
        journal: &mut impl EvidenceJournal,
        observer: Observer<'_>,
    ) -> Result<(BatchEvidence, PassNotes), BatchError> {
        let mut run = self.begin_resume(journal, observer)?;
        driver.drive(&mut run, contract)?;
        run.finish()
    }

    /// The start of a resumed pass: the restored evidence, checked, with the calls left in
    /// flight interrupted (or the resume refused for a `block` agent's).
    pub(super) fn begin_resume<'j, J: EvidenceJournal, O: FnMut(&EvidenceEvent)>(
        &'j self,
        journal: &'j mut J,
        observer: O,
    ) -> Result<Run<'j, 'p, J, O>, BatchError> {
        let mut run = self.restore(journal, observer)?;
        let interruptions = self.interruptions(run.evidence())?;
        run.record_all(interruptions)?;
        Ok(run)
    }

    /// Consumes a recovery request: re-checks the restored evidence against the plan, grants
    /// each eligible root one corrective call with its exact rejection and candidate, then
    /// runs the roots and their released descendants (with their own budgets). Accepted
    /// tasks are never called again.
    ///
    /// # Errors
    ///
    /// [`BatchErrorKind::Recovery`] when the request is refused as a whole (recovery not
    /// enabled, no roots, unknown root, stale fingerprint); the errors of
    /// [`resume`](Self::resume) otherwise.
    pub fn recover(
        &self,
        request: &RecoveryRequest,
        worker: &mut impl Worker,
        contract: &impl OutputContract,
        journal: &mut impl EvidenceJournal,
    ) -> Result<RecoveryOutcome, BatchError> {
        self.recover_observed(
            request,
            &mut Sequential(worker),
            contract,
            journal,
            Box::new(|_| {}),
        )
        .map(|(outcome, _)| outcome)
    }

    fn recover_observed(
        &self,
        request: &RecoveryRequest,
        driver: &mut impl Driver,
        contract: &impl OutputContract,
        journal: &mut impl EvidenceJournal,
        observer: Observer<'_>,
    ) -> Result<(RecoveryOutcome, PassNotes), BatchError> {
        match self.begin_recover(request, journal, observer)? {
            RecoveryPass::Consumed(outcome) => Ok((*outcome, PassNotes::default())),
            RecoveryPass::Granted {
                mut run,
                granted,
                refused,
            } => {
                if !granted.is_empty() {
                    driver.drive(&mut run, contract)?;
                }
                RecoveryPass::finish(*run, granted, refused)
            }
        }
    }

    /// The start of a recovery pass: the request checked against the restored evidence and
    /// consumed, each root granted or refused. Drive the pass when a root was granted.
    pub(super) fn begin_recover<'j, J: EvidenceJournal, O: FnMut(&EvidenceEvent)>(
        &'j self,
        request: &RecoveryRequest,
        journal: &'j mut J,
        observer: O,
    ) -> Result<RecoveryPass<'j, 'p, J, O>, BatchError> {
        let mut run = self.restore(journal, observer)?;
        let evidence = run.evidence();
        if !evidence.recovery_enabled() {
            return Err(BatchError::new(
                self.channel.clone(),
                RecoveryError::NotEnabled {
                    channel: self.channel.clone(),
                },
            ));
        }
        if request.roots().is_empty() {
            return Err(BatchError::new(
                self.channel.clone(),
                RecoveryError::NoRoots {
                    channel: self.channel.clone(),
                },
            ));
        }
        if let Some(task) = request.roots().iter().find(|r| evidence.task(r).is_none()) {
            return Err(BatchError::new(
                self.channel.clone(),
                RecoveryError::UnknownRoot {
                    channel: self.channel.clone(),
                    task: task.clone(),
                },
            ));
        }
        let expected = recovery::fingerprint(evidence, request.roots());
        if expected != request.fingerprint() {
            return Err(BatchError::new(
                self.channel.clone(),
                RecoveryError::StaleFingerprint {
                    channel: self.channel.clone(),
                    expected,
                    found: request.fingerprint(),
                },
            ));
        }
        if evidence
            .consumed_requests()
            .any(|r| r == request.fingerprint())
        {
            // A consumed request never dispatches again, and is not recorded twice.
            let refused = request
                .roots()
                .iter()
                .map(|r| (r.clone(), IneligibleReason::RequestAlreadyConsumed))
                .collect();
            return Ok(RecoveryPass::Consumed(Box::new(RecoveryOutcome {
                granted: Vec::new(),
                refused,
                evidence: run.machine.into_evidence(),
            })));
        }
        let inputs_changed = self.changed_inputs(evidence).is_some();
        let mut granted = Vec::new();
        let mut refused = Vec::new();
        for root in request.roots() {
            match self.eligibility(run.machine.graph(), evidence, root, inputs_changed) {
                Ok(()) => granted.push(root.clone()),
                Err(why) => refused.push((root.clone(), why)),
            }
        }
        let granted_set: BTreeSet<&TaskId> = granted.iter().collect();
        let released: Vec<TaskId> = self
            .plan
            .topological_order()
            .iter()
            .filter(|id| {
                evidence
                    .task(id)
                    .and_then(|t| t.blocked_by())
                    .is_some_and(|b| granted_set.contains(b))
            })
            .cloned()
            .collect();
        run.record(EvidenceEvent::RecoveryConsumed {
            request: request.fingerprint(),
            granted: granted.clone(),
            released,
            refused: refused.clone(),
        })?;
        Ok(RecoveryPass::Granted {
            run: Box::new(run),
            granted,
            refused,
        })
    }

    /// Runs the plan to its end in one call: a fresh dispatch when the channel has no
    /// evidence yet, a [`resume`](Self::resume) otherwise; then, when the batch opted in to
    /// recovery and none was consumed yet, one [`recover`](Self::recover) that grants every
    /// eligible root its single corrective call.
    ///
    /// `worker` makes every call. `contract` is your own check of each candidate, run after
    /// the built-in one (a candidate writes only its task's owned paths): pass `&()` to
    /// accept every candidate that passes the built-in check, or a closure
    /// `|task, candidate| …` returning the exact [`Rejection`](super::Rejection) a
    /// corrective call receives. `journal` keeps the evidence: a
    /// [`MemoryJournal`](super::MemoryJournal) for a run you keep alive yourself, a
    /// [`FileJournal`](super::FileJournal) to resume after a crash. The run only borrows
    /// the batch, so `Batch::new(&plan, channel).run(…)` is one expression.
    ///
    /// # Errors
    ///
    /// The errors of [`dispatch`](Self::dispatch), [`resume`](Self::resume) and
    /// [`recover`](Self::recover).
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::collections::BTreeMap;
    /// # use kleene::batch::{Batch, Candidate, MemoryJournal, Proposal, Worker,
    /// #                     WorkerCall, WorkerFailure};
    /// # use kleene::{plan::AdmittedPath, AppBuildPlan, id::ChannelId, plan::Plan};
    /// # let plan = Plan::draft(AppBuildPlan::from_json(r#"{"tasks": [
    /// #   {"id": "svc", "kind": {"lane": "config"}, "owner": "ServiceAgent",
    /// #    "spec": {"intent": "settings"}, "owned_paths": ["config/app.toml"]}]}"#)?)
    /// #     .normalize().consolidate()?.validate()?;
    /// # struct Svc;
    /// # impl Worker for Svc {
    /// #     fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
    /// #         let path = if call.correction().is_some() { "config/app.toml" } else { "backend/x.py" };
    /// #         Ok(Candidate::new(BTreeMap::from([(AdmittedPath::admit(path).unwrap(), b"x".to_vec())])).into())
    /// #     }
    /// # }
    /// let batch = Batch::new(&plan, ChannelId::new("chan-1")?).with_recovery(true);
    /// let outcome = batch.run(&mut Svc, &(), &mut MemoryJournal::default())?;
    /// assert!(!outcome.resumed);
    /// assert_eq!(outcome.granted.len(), 1); // the one corrective call
    /// assert!(outcome.evidence.summary().is_complete());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run(
        &self,
        worker: &mut impl Worker,
        contract: &impl OutputContract,
        journal: &mut impl EvidenceJournal,
    ) -> Result<RunOutcome, BatchError> {
        self.run_observed(worker, contract, journal, &mut |_| {})
    }

    /// [`run`](Self::run), showing `observer` every evidence event as it is recorded (for
    /// live progress): the events are the run's only facts, so a report made from them
    /// says exactly what the evidence says.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run).
    pub fn run_observed(
        &self,
        worker: &mut impl Worker,
        contract: &impl OutputContract,
        journal: &mut impl EvidenceJournal,
        observer: &mut dyn FnMut(&EvidenceEvent),
    ) -> Result<RunOutcome, BatchError> {
        self.run_driven(&mut Sequential(worker), contract, journal, observer)
    }

    pub(crate) fn run_driven(
        &self,
        driver: &mut impl Driver,
        contract: &impl OutputContract,
        journal: &mut impl EvidenceJournal,
        observer: &mut dyn FnMut(&EvidenceEvent),
    ) -> Result<RunOutcome, BatchError> {
        let resumed = self.has_evidence(journal)?;
        let (evidence, mut notes) = if resumed {
            self.resume_observed(driver, contract, journal, Box::new(&mut *observer))?
        } else {
            self.dispatch_observed(driver, contract, journal, Box::new(&mut *observer))?
        };
        let Some(request) = self.pending_recovery(&evidence) else {
            return Ok(RunOutcome {
                evidence,
                resumed,
                granted: Vec::new(),
                refused: Vec::new(),
                agent_failures: notes.agent_failures,
                cache_warnings: notes.cache_warnings,
                reused_closures: notes.reused_closures,
            });
        };
        let (outcome, more) =
            self.recover_observed(&request, driver, contract, journal, Box::new(observer))?;
        notes.extend(more);
        Ok(RunOutcome {
            evidence: outcome.evidence,
            resumed,
            granted: outcome.granted,
            refused: outcome.refused,
            agent_failures: notes.agent_failures,
            cache_warnings: notes.cache_warnings,
            reused_closures: notes.reused_closures,
        })
    }

    /// Whether the channel has evidence to resume (an interrupted last append is cut
    /// first). A run killed before its first record has nothing to resume: it starts.
    pub(super) fn has_evidence(
        &self,
        journal: &mut impl EvidenceJournal,
    ) -> Result<bool, BatchError> {
        journal
            .repair_torn_tail(&self.channel)
            .map_err(|e| BatchError::new(self.channel.clone(), e))?;
        Ok(journal
            .load(&self.channel)
            .map_err(|e| BatchError::new(self.channel.clone(), e))?
            .is_some_and(|load| load.snapshot.is_some() || !load.events.is_empty()))
    }

    /// The one recovery a run makes after its first pass: every root, when the batch opted
    /// in and consumed no request yet.
    pub(super) fn pending_recovery(&self, evidence: &BatchEvidence) -> Option<RecoveryRequest> {
        // The cheap checks first: most batches never opt in, and the roots are a walk of
        // every task.
        if !evidence.recovery_enabled() || !evidence.recoveries().is_empty() {
            return None;
        }
        let roots: Vec<TaskId> = evidence.recovery_roots().cloned().collect();
        if roots.is_empty() {
            return None;
        }
        Some(RecoveryRequest::for_roots(evidence, roots))
    }

    fn eligibility(
        &self,
        graph: &Prerequisites,
        evidence: &BatchEvidence,
        root: &TaskId,
        inputs_changed: bool,
    ) -> Result<(), IneligibleReason> {
        let t = evidence
            .task(root)
            .ok_or(IneligibleReason::DiagnosticsMissing)?;
        if t.accepted().is_some() {
            return Err(IneligibleReason::AlreadyAccepted);
        }
        if t.recovery_consumed() {
            return Err(IneligibleReason::RootAlreadyConsumed);
        }
        if t.infrastructure_failure().is_some() {
            return Err(IneligibleReason::InfrastructureFailure);
        }
        if t.in_flight().is_some() {
            return Err(IneligibleReason::UncertainInterruptedExecution);
        }
        if t.rejections().is_empty() || evidence.status(root) != Some(TaskStatus::Failed) {
            return Err(IneligibleReason::DiagnosticsMissing);
        }
        if t.calls_spent() >= t.budget() {
            return Err(IneligibleReason::BudgetExhausted);
        }
        let current = evidence
            .position(root)
            .map(|i| input_digest(self.plan, &self.input_template(), graph, evidence, i));
        if inputs_changed || current != t.last_input_digest() {
            return Err(IneligibleReason::InputsChanged);
        }
        Ok(())
    }

    fn inventory(&self) -> Vec<InventoryEntry> {
        self.plan
            .tasks()
            .map(|t| InventoryEntry {
                task: t.id.clone(),
                owner: t.owner.clone(),
                budget: t.retry_limit.saturating_add(1),
            })
            .collect()
    }

    fn fold_error(&self, source: FoldError) -> BatchError {
        BatchError::new(self.channel.clone(), BatchErrorKind::Fold { source })
    }

    fn inventory_mismatch(&self, task: &TaskId) -> BatchError {
        BatchError::new(
            self.channel.clone(),
            BatchErrorKind::InventoryMismatch { task: task.clone() },
        )
    }

    fn changed_inputs(&self, evidence: &BatchEvidence) -> Option<Vec<String>> {
        let recorded = evidence.input_digests();
        let names: BTreeSet<&String> = recorded.keys().chain(self.inputs.keys()).collect();
        let changed: Vec<String> = names
            .into_iter()
            .filter(|n| recorded.get(*n) != self.inputs.get(*n))
            .cloned()
            .collect();
        (!changed.is_empty()).then_some(changed)
    }

    /// The part of every task's input digest that all tasks share: the plan and the batch
    /// inputs.
    fn input_template(&self) -> CanonicalHasher {
        let mut h = CanonicalHasher::new("batch task input");
        h.put(&(self.plan.digest(), &self.inputs));
        h
    }

    /// Loads the channel's evidence and checks it against this batch: channel, plan,
    /// inventory, owners, budgets, recovery mode and the ownership of every accepted output.
    /// (Accepted-output digests were verified by the fold.)
    fn restore<'j, J: EvidenceJournal, O: FnMut(&EvidenceEvent)>(
        &'j self,
        journal: &'j mut J,
        observer: O,
    ) -> Result<Run<'j, 'p, J, O>, BatchError> {
        // The run appends from here on, so an interrupted last append is cut first (the
        // journal reports what it cut); damage anywhere else is refused, never cut.
        journal
            .repair_torn_tail(&self.channel)
            .map_err(|e| BatchError::new(self.channel.clone(), e))?;
        let load = journal
            .load(&self.channel)
            .map_err(|e| BatchError::new(self.channel.clone(), e))?
            .ok_or_else(|| BatchError::new(self.channel.clone(), BatchErrorKind::NoEvidence))?;
        let tail = load.events.len() as u64;
        let snapshot_events = load.snapshot.as_ref().map_or(0, BatchEvidence::event_count);
        let evidence = load
            .into_evidence()
            .map_err(|source| JournalError::Fold {
                channel: self.channel.clone(),
                source,
            })
            .map_err(|e| BatchError::new(self.channel.clone(), e))?;
        self.check_evidence(&evidence)?;
        Ok(Run::new(
            self,
            journal,
            evidence,
            tail,
            snapshot_events,
            observer,
        ))
    }

    /// Checks restored evidence against this batch: channel, plan, inventory, owners,
    /// budgets, recovery mode and the ownership of every accepted output. (Accepted-output
    /// digests were verified by the fold.)
    fn check_evidence(&self, evidence: &BatchEvidence) -> Result<(), BatchError> {
        if evidence.channel() != &self.channel {
            return Err(BatchError::new(
                self.channel.clone(),
                BatchErrorKind::ChannelMismatch {
                    found: evidence.channel().clone(),
                },
            ));
        }
        if evidence.plan_digest() != self.plan.digest() {
            return Err(BatchError::new(
                self.channel.clone(),
                BatchErrorKind::PlanMismatch {
                    expected: self.plan.digest(),
                    found: evidence.plan_digest(),
                },
            ));
        }
        if evidence.recovery_enabled() != self.recovery {
            return Err(BatchError::new(
                self.channel.clone(),
                BatchErrorKind::RecoveryModeChanged {
                    recorded: evidence.recovery_enabled(),
                },
            ));
        }
        let inventory = self.inventory();
        let recorded: Vec<_> = evidence.inventory().collect();
        for i in 0..inventory.len().max(recorded.len()) {
            match (inventory.get(i), recorded.get(i)) {
                (Some(e), Some((id, t)))
                    if &e.task == *id && &e.owner == t.owner() && e.budget == t.budget() => {}
                (Some(e), _) => return Err(self.inventory_mismatch(&e.task)),
                (None, Some((id, _))) => return Err(self.inventory_mismatch(id)),
                (None, None) => break,
            }
        }
        for (task, output) in evidence.accepted_outputs() {
            if let Some(path) = output
                .files()
                .keys()
                .find(|p| self.plan.owner_of(p) != Some(task))
            {
                return Err(BatchError::new(
                    self.channel.clone(),
                    BatchErrorKind::AcceptedOutputNotOwned {
                        task: task.clone(),
                        path: path.clone(),
                    },
                ));
            }
        }
        Ok(())
    }

    /// The interruptions a resume records for the calls left in flight, after refusing a
    /// resume whose inputs changed or that would replay a `block` agent's call. Every call
    /// in flight is looked at, so with several in flight the first `block` one (in
    /// topological order) is named.
    fn interruptions(&self, evidence: &BatchEvidence) -> Result<Vec<EvidenceEvent>, BatchError> {
        if let Some(names) = self.changed_inputs(evidence) {
            return Err(BatchError::new(
                self.channel.clone(),
                BatchErrorKind::InputsChanged { names },
            ));
        }
        let mut events = Vec::new();
        for (task, attempt) in evidence.in_flight() {
            let agent = evidence
                .task(task)
                .map(|t| t.owner().clone())
                .ok_or_else(|| self.inventory_mismatch(task))?;
            if self.policy(&agent) == PendingTurnReplay::Block {
                return Err(BatchError::new(
                    self.channel.clone(),
                    BatchErrorKind::PendingTurnBlocked {
                        agent,
                        task: task.clone(),
                        attempt,
                    },
                ));
            }
            events.push(EvidenceEvent::Interrupted {
                task: task.clone(),
                attempt,
            });
        }
        Ok(events)
    }

    fn started(&self) -> EvidenceEvent {
        EvidenceEvent::Started {
            channel: self.channel.clone(),
            plan_digest: self.plan.digest(),
            evidence_version: EVIDENCE_VERSION,
            inputs: self.inputs.clone(),
            recovery: self.recovery,
            inventory: self.inventory(),
        }
    }

    pub(crate) fn machine_over(&self, evidence: BatchEvidence) -> BatchMachine<'p> {
        BatchMachine::new(
            self.plan,
            self.channel.clone(),
            self.input_template(),
            evidence,
            self.cache.binding(&self.inputs),
        )
    }

    /// The batch as a sans-IO [`BatchMachine`], for a driver of your own: from nothing (a
    /// fresh batch) or from the channel's evidence as a journal folds it (a resume, checked
    /// as [`resume`](Self::resume) checks it, calls left in flight interrupted). Append the
    /// returned events (the start, or the interruptions) in one commit before anything else.
    ///
    /// # Errors
    ///
    /// As [`resume`](Self::resume) for evidence that cannot be trusted for this batch, or
    /// holds a `block` agent's interrupted call.
    ///
    /// # Examples
    ///
    /// See the [machine's documentation](super::machine::BatchMachine).
    pub fn machine(
        &self,
        evidence: Option<BatchEvidence>,
    ) -> Result<(BatchMachine<'p>, Vec<EvidenceEvent>), BatchError> {
        match evidence {
            None => {
                let started = self.started();
                let evidence = BatchEvidence::start_planned(&started, self.plan.shared_order())
                    .map_err(|source| self.fold_error(source))?;
                Ok((self.machine_over(evidence), vec![started]))
            }
            Some(evidence) => {
                self.check_evidence(&evidence)?;
                let events = self.interruptions(&evidence)?;
                let mut machine = self.machine_over(evidence);
                machine.apply_external(events.clone())?;
                Ok((machine, events))
            }
        }
    }
}
