//! One pass of the executor: the journal, the machine whose evidence it journals, and the
//! drivers that make its calls.

use std::cell::RefCell;

use super::error::BatchError;
use super::evidence::BatchEvidence;
use super::evidence::event::EvidenceEvent;
use super::executor::{Batch, RecoveryOutcome};
use super::journal::{EvidenceJournal, JournalError};
use super::machine::{BatchMachine, Dispatch, PassNotes};
use super::recovery::IneligibleReason;
use super::reservation::Reservation;
use super::syncer::Syncer;
use super::worker::{
    Ancestry, FixLedger, OutputContract, Proposal, Worker, WorkerCall, WorkerFailure,
};
use crate::id::{ChannelId, TaskId};

/// Sees every event a pass records, as it is recorded.
pub(super) type Observer<'o> = Box<dyn FnMut(&EvidenceEvent) + 'o>;

/// How a pass makes its calls: one at a time ([`Sequential`]) or several at once (the
/// threaded driver).
pub(crate) trait Driver {
    /// Runs the pass's machine until it settles or stops.
    fn drive<J: EvidenceJournal>(
        &mut self,
        run: &mut Run<'_, '_, J>,
        contract: &impl OutputContract,
    ) -> Result<(), BatchError>;
}

/// The sequential driver: one call at a time, in the plan's topological order.
pub(crate) struct Sequential<'w, W>(pub(crate) &'w mut W);

impl<W: Worker> Driver for Sequential<'_, W> {
    fn drive<J: EvidenceJournal>(
        &mut self,
        run: &mut Run<'_, '_, J>,
        contract: &impl OutputContract,
    ) -> Result<(), BatchError> {
        run.drive(&mut *self.0, contract)
    }
}

/// One pass of the executor over the journal and the machine whose evidence it journals,
/// showing `observer` every event it records (generic, so a pass can be `Send` when its
/// observer is).
pub(crate) struct Run<'b, 'p, J, O = Observer<'b>> {
    pub(super) batch: &'b Batch<'p>,
    journal: &'b mut J,
    pub(super) machine: BatchMachine<'p>,
    buffer: Vec<EvidenceEvent>,
    since_snapshot: u64,
    snapshot_events: u64,
    observer: O,
    /// With durable observation, the buffered events the observer has not been shown,
    /// in order: each is shown once the append that holds it is durable.
    unseen: Vec<EvidenceEvent>,
    /// How many of `unseen` the last deferred append holds: shown once its sync completes.
    unseen_in_sync: usize,
}

/// A recovery pass once its request is checked: already consumed (nothing to drive), or
/// consumed now with the roots it granted and refused.
/// (Both boxed: a pass and an outcome are large, and the two differ in size.)
pub(super) enum RecoveryPass<'b, 'p, J, O> {
    Consumed(Box<RecoveryOutcome>),
    Granted {
        run: Box<Run<'b, 'p, J, O>>,
        granted: Vec<TaskId>,
        refused: Vec<(TaskId, IneligibleReason)>,
    },
}

impl<J: EvidenceJournal, O: FnMut(&EvidenceEvent)> RecoveryPass<'_, '_, J, O> {
    /// Ends a granted pass once it was driven (or needed no driving).
    pub(super) fn finish(
        run: Run<'_, '_, J, O>,
        granted: Vec<TaskId>,
        refused: Vec<(TaskId, IneligibleReason)>,
    ) -> Result<(RecoveryOutcome, PassNotes), BatchError> {
        let (evidence, failures) = run.finish()?;
        Ok((
            RecoveryOutcome {
                granted,
                refused,
                evidence,
            },
            failures,
        ))
    }
}

/// The run's fix ledger during one call: draws go to the journal at once (the reservation
/// before them is already durable) and are folded into the evidence when the call returns.
struct Ledger<'c, J> {
    journal: RefCell<&'c mut J>,
    channel: &'c ChannelId,
    task: &'c TaskId,
    attempt: u32,
    used: u32,
    drawn: RefCell<Vec<EvidenceEvent>>,
}

impl<J: EvidenceJournal> FixLedger for Ledger<'_, J> {
    fn used(&self) -> u32 {
        self.used
    }

    fn draw(&self, fix: &TaskId) -> Result<(), JournalError> {
        let event = EvidenceEvent::FixDrawn {
            task: self.task.clone(),
            attempt: self.attempt,
            fix: fix.clone(),
        };
        self.journal
            .borrow_mut()
            .append(self.channel, std::slice::from_ref(&event))?;
        self.drawn.borrow_mut().push(event);
        Ok(())
    }
}

impl<'b, 'p, J: EvidenceJournal, O: FnMut(&EvidenceEvent)> Run<'b, 'p, J, O> {
    pub(super) fn new(
        batch: &'b Batch<'p>,
        journal: &'b mut J,
        evidence: BatchEvidence,
        since_snapshot: u64,
        snapshot_events: u64,
        observer: O,
    ) -> Self {
        Self {
            batch,
            journal,
            machine: batch.machine_over(evidence),
            buffer: Vec::new(),
            since_snapshot,
            snapshot_events,
            observer,
            unseen: Vec::new(),
            unseen_in_sync: 0,
        }
    }

    /// Shows the observer an event that is buffered for the next append: now, or (with
    /// durable observation) once that append is durable.
    fn show_buffered(&mut self, event: &EvidenceEvent) {
        if self.batch.durable_observation {
            self.unseen.push(event.clone());
        } else {
            (self.observer)(event);
        }
    }

    /// Shows the observer the first `count` unseen events, which are durable now.
    fn show_durable(&mut self, count: usize) {
        let count = count.min(self.unseen.len());
        for event in self.unseen.drain(..count) {
            (self.observer)(&event);
        }
        self.unseen_in_sync = self.unseen_in_sync.saturating_sub(count);
    }

    /// Shows the observer what the last deferred append held, once its sync has completed.
    pub(super) fn synced(&mut self) {
        self.show_durable(self.unseen_in_sync);
    }

    pub(super) fn evidence(&self) -> &BatchEvidence {
        self.machine.evidence()
    }

    /// Folds an event made outside the machine's steps, then journals it.
    pub(super) fn record(&mut self, event: EvidenceEvent) -> Result<(), BatchError> {
        self.record_all(vec![event])
    }

    /// Folds events made outside the machine's steps (readiness is recomputed once), then
    /// journals each.
    pub(super) fn record_all(&mut self, events: Vec<EvidenceEvent>) -> Result<(), BatchError> {
        if events.is_empty() {
            return Ok(());
        }
        self.machine.apply_external(events.clone())?;
        for event in events {
            self.commit(event)?;
        }
        self.checkpoint()
    }

    /// Journals an event the machine already folded: committed at once, or (group commit)
    /// with the next reservation.
    pub(super) fn commit(&mut self, event: EvidenceEvent) -> Result<(), BatchError> {
        if self.batch.group_commit {
            self.show_buffered(&event);
            self.buffer.push(event);
        } else {
            self.journal
                .append(&self.batch.channel, std::slice::from_ref(&event))
                .map_err(|e| BatchError::new(self.batch.channel.clone(), e))?;
            self.since_snapshot += 1;
            (self.observer)(&event);
        }
        Ok(())
    }

    /// Journals a settlement's event (committed at once, or with the next reservation),
    /// then folds it: committed at once, the candidate it carries is never copied.
    fn commit_then_fold(
        &mut self,
        dispatch: &Dispatch,
        event: EvidenceEvent,
    ) -> Result<(), BatchError> {
        if self.batch.group_commit {
            self.buffer.push(event.clone());
            self.show_buffered(&event);
        } else {
            self.journal
                .append(&self.batch.channel, std::slice::from_ref(&event))
                .map_err(|e| BatchError::new(self.batch.channel.clone(), e))?;
            self.since_snapshot += 1;
            (self.observer)(&event);
        }
        self.machine.fold_settled(dispatch, event)
    }

    /// Buffers an event the machine already folded for the next [`flush`](Self::flush),
    /// whatever the batch's group-commit choice (a driver that commits in groups).
    pub(super) fn commit_buffered(&mut self, event: EvidenceEvent) {
        self.show_buffered(&event);
        self.buffer.push(event);
    }

    /// Reserves what the machine allows up to `limit` calls in flight, buffering the events
    /// for the next [`flush`](Self::flush) (they go straight into the buffer: no list of
    /// their own to copy them from) and pushing the calls onto `dispatches`.
    pub(super) fn reserve_buffered(
        &mut self,
        limit: usize,
        dispatches: &mut Vec<Dispatch>,
    ) -> Result<(), BatchError> {
        let from = self.buffer.len();
        // The calls read their prerequisites' outputs themselves, so the dispatches carry
        // no digests of them.
        self.machine
            .reserve_into(limit, &mut self.buffer, dispatches, false)?;
        if self.batch.durable_observation {
            self.unseen.extend_from_slice(&self.buffer[from..]);
        } else {
            for event in &self.buffer[from..] {
                (self.observer)(event);
            }
        }
        Ok(())
    }

    /// Settles `dispatch`'s call with what it returned, buffering its events for the next
    /// [`flush`](Self::flush): judged straight into the buffer and folded from there, so a
    /// settlement allocates nothing of its own. Returns why the pass stops, if it does.
    pub(super) fn settle_buffered(
        &mut self,
        dispatch: &Dispatch,
        result: Result<Proposal, WorkerFailure>,
        contract: &impl OutputContract,
    ) -> Result<Option<BatchError>, BatchError> {
        let from = self.buffer.len();
        let stop = self
            .machine
            .judge_into(dispatch, result, contract, &mut self.buffer)?;
        for at in from..self.buffer.len() {
            let event = self.buffer[at].clone();
            self.show_buffered(&event);
            self.machine.fold_settled(dispatch, event)?;
        }
        self.machine.close(dispatch, stop.is_some());
        Ok(stop)
    }

    pub(super) fn flush(&mut self) -> Result<(), BatchError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let appended = self.buffer.len() as u64;
        // Handed over by value: a journal that keeps event values moves them instead of
        // cloning each, and the buffer keeps its capacity for the next commit.
        self.journal
            .append_owned(&self.batch.channel, &mut self.buffer)
            .map_err(|e| BatchError::new(self.batch.channel.clone(), e))?;
        self.since_snapshot += appended;
        self.buffer.clear();
        self.show_durable(self.unseen.len());
        Ok(())
    }

    /// [`flush`](Self::flush), handing back the append's sync as the reservation of the call
    /// it holds instead of waiting for it.
    pub(super) fn flush_deferred(&mut self) -> Result<Reservation, BatchError> {
        if self.buffer.is_empty() {
            return Ok(Reservation::durable());
        }
        let appended = self.buffer.len() as u64;
        let sync = self
            .journal
            .append_deferred(&self.batch.channel, &mut self.buffer)
            .map_err(|e| BatchError::new(self.batch.channel.clone(), e))?;
        self.since_snapshot += appended;
        self.buffer.clear();
        self.unseen_in_sync = self.unseen.len();
        Ok(Reservation::pending(&self.batch.channel, sync))
    }

    /// Compacts when the tail is long enough. Only where the journal holds everything the
    /// machine folded (the machine folds a step's events before they are journaled, and a
    /// snapshot taken between would hold events the journal then appends again).
    pub(super) fn checkpoint(&mut self) -> Result<(), BatchError> {
        if !self.buffer.is_empty() {
            return Ok(());
        }
        // A snapshot costs the whole inventory plus everything folded so far; waiting until
        // the tail is that long keeps the amortised cost per event constant.
        let snapshot_size = self.batch.plan.len() as u64 + self.snapshot_events;
        if self.since_snapshot >= self.batch.compaction_after.max(snapshot_size) {
            self.journal
                .compact(&self.batch.channel, self.machine.evidence())
                .map_err(|e| BatchError::new(self.batch.channel.clone(), e))?;
            self.snapshot_events = self.machine.evidence().event_count();
            self.since_snapshot = 0;
        }
        Ok(())
    }

    pub(super) fn finish(mut self) -> Result<(BatchEvidence, PassNotes), BatchError> {
        self.flush()?;
        self.checkpoint()?;
        let notes = PassNotes {
            agent_failures: self.machine.take_agent_failures(),
            cache_warnings: self.machine.take_cache_warnings(),
            reused_closures: self.machine.take_reused_closures(),
        };
        Ok((self.machine.into_evidence(), notes))
    }

    /// The sequential drive: one call at a time, in the plan's topological order.
    fn drive(
        &mut self,
        worker: &mut impl Worker,
        contract: &impl OutputContract,
    ) -> Result<(), BatchError> {
        std::thread::scope(|scope| self.drive_syncing(worker, contract, scope))
    }

    /// [`drive`](Self::drive), starting each deferred reservation's sync on a syncer thread
    /// in `scope` (made at the first) as soon as it is written.
    fn drive_syncing<'scope>(
        &mut self,
        worker: &mut impl Worker,
        contract: &impl OutputContract,
        scope: &'scope std::thread::Scope<'scope, '_>,
    ) -> Result<(), BatchError> {
        let mut syncer: Option<Option<Syncer<'scope>>> = None;
        let (mut events, mut dispatches) = (Vec::new(), Vec::with_capacity(1));
        loop {
            // The call gets the prerequisites' outputs themselves, not their digests.
            self.machine
                .reserve_into(1, &mut events, &mut dispatches, false)?;
            // Its calls read their prerequisites' outputs from the evidence itself.
            self.machine.take_reused_positions();
            let Some(dispatch) = dispatches.pop() else {
                for event in events.drain(..) {
                    self.commit(event)?;
                }
                return self.checkpoint();
            };
            // Drains are committed as they were made; the reservation (with anything
            // buffered) is durable before its call can have any effect.
            let reserved = events.pop();
            for event in events.drain(..) {
                self.commit(event)?;
            }
            if let Some(event) = reserved {
                self.commit_buffered(event);
            }
            // A worker that waits for its reservation gets its call while the reservation
            // syncs; nothing is compacted until it is durable.
            // Observed durably, what the reservation's append holds beside it (the last
            // settlement) is made durable before the call, so it is shown before the call
            // runs rather than after it: the sync is not overlapped with the call then.
            let show_first = self.batch.durable_observation && !self.unseen.is_empty();
            let reservation = if worker.waits_for_reservation() && !show_first {
                let reservation = self.flush_deferred()?;
                if !reservation.is_durable()
                    && let Some(syncer) = syncer.get_or_insert_with(|| Syncer::start(scope))
                {
                    syncer.begin(&reservation);
                }
                reservation
            } else {
                self.flush()?;
                self.checkpoint()?;
                Reservation::durable()
            };
            let (result, drawn) = self.call(worker, &dispatch, &reservation);
            reservation
                .complete()
                .map_err(|e| BatchError::new(self.batch.channel.clone(), e))?;
            self.synced();
            for event in drawn {
                (self.observer)(&event);
                self.machine.apply_drawn(event)?;
                self.since_snapshot += 1;
            }
            self.checkpoint()?;
            // Judged into the reservation's (drained) list: no list of its own per call.
            let stop = self
                .machine
                .judge_into(&dispatch, result, contract, &mut events)?;
            for event in events.drain(..) {
                self.commit_then_fold(&dispatch, event)?;
            }
            self.machine.close(&dispatch, stop.is_some());
            if let Some(stop) = stop {
                self.flush()?;
                self.checkpoint()?;
                return Err(stop);
            }
            self.checkpoint()?;
        }
    }

    /// Makes one call; hands back its result and the fix draws it committed (to fold).
    fn call(
        &mut self,
        worker: &mut impl Worker,
        dispatch: &Dispatch,
        reservation: &Reservation,
    ) -> (Result<Proposal, WorkerFailure>, Vec<EvidenceEvent>) {
        let Run {
            batch,
            journal,
            machine,
            ..
        } = self;
        let (batch, machine) = (*batch, &*machine);
        let ledger = Ledger {
            journal: RefCell::new(&mut **journal),
            channel: &batch.channel,
            task: dispatch.task(),
            attempt: dispatch.attempt(),
            used: dispatch.fix_attempts_used(),
            drawn: RefCell::new(Vec::new()),
        };
        let Some(task) = machine
            .locate(dispatch)
            .and_then(|p| machine.tasks().get(p).copied())
        else {
            return (
                Err(WorkerFailure::Unavailable {
                    detail: format!("find task {} in the plan", dispatch.task()),
                }),
                Vec::new(),
            );
        };
        let (graph, evidence) = (machine.graph(), machine.evidence());
        let order = batch.plan.topological_order();
        let accepted_at = |p: usize| {
            let t = evidence.task_at(p)?;
            t.accepted().map(|a| (&order[p], a))
        };
        let prerequisites: Vec<_> = machine
            .prerequisites_by_id()
            .of(dispatch.position())
            .iter()
            .filter_map(|&p| accepted_at(p))
            .collect();
        let prerequisites_of = |p: usize| graph.of(p);
        let result = worker.call(&WorkerCall {
            channel: &batch.channel,
            task,
            prerequisites,
            attempt: dispatch.attempt(),
            correction: dispatch.correction(),
            ancestry: Ancestry {
                position: dispatch.position(),
                prerequisites_of: &prerequisites_of,
                accepted_at: &accepted_at,
            }
            .into(),
            ledger: &ledger,
            reservation: reservation.clone(),
        });
        (result, ledger.drawn.into_inner())
    }
}
