//! Several calls at once: the threaded driver runs up to `jobs` calls on scoped threads, one
//! worker per thread, over the same machine and journal as the sequential drive.
//!
//! The calling thread keeps the machine and the journal; the worker threads only call.
//! Settlements (and fix draws) that arrive together are folded together and journaled in one
//! append with the reservations they make possible, so they share one durable sync (group
//! commit); nothing is acknowledged or dispatched before the append that holds it returns.
//!
//! The example is on [`Batch::run_threaded`].

use std::num::NonZeroUsize;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Mutex, OnceLock, PoisonError};

use super::candidate::AcceptedOutput;
use super::event::EvidenceEvent;
use super::executor::{Batch, BatchError, Driver, Run, RunOutcome};
use super::journal::{EvidenceJournal, JournalError};
use super::machine::{Dispatch, Prerequisites, Reservation, Settled};
use super::worker::{
    Ancestry, FixLedger, OutputContract, Proposal, Worker, WorkerCall, WorkerFailure,
};
use crate::plan::{PlannedTask, ValidatedPlan};
use crate::{closure::FixBudget, id::ChannelId, id::TaskId};

impl<'p> Batch<'p> {
    /// [`run`](Self::run) with up to `jobs` calls in flight at once, each on its own scoped
    /// thread with its own worker, made by `make_worker(slot)` for slots `0..jobs` (once per
    /// run, and never more slots than the plan has tasks; a slot's worker makes every call of
    /// that thread, so it may own a workspace).
    /// Ready tasks are reserved lowest position first, so `jobs = 1` makes the calls of
    /// [`run`](Self::run) in its order. The evidence does not depend on the order calls end
    /// in: the same outcomes give the same evidence digest as [`run`](Self::run).
    ///
    /// The calls in flight share one run-wide fix budget (a [`ClosureWorker`](super::ClosureWorker)
    /// spends from it), so together they never spend more fixes than the run has; which of
    /// two concurrent calls gets the last fix is the one that asks first. A call's
    /// [`fix_attempts_used`](WorkerCall::fix_attempts_used) is what the run had used when the
    /// call was reserved.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run). A cancelled or unavailable call stops new reservations; the
    /// calls already in flight settle (and are journaled) before the error is returned.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use std::num::NonZeroUsize;
    /// use kleene::batch::{Batch, Candidate, MemoryJournal, Proposal, Worker, WorkerCall,
    ///                     WorkerFailure};
    /// use kleene::{plan::AdmittedPath, AppBuildPlan, id::ChannelId, plan::Plan};
    ///
    /// let plan = Plan::draft(AppBuildPlan::from_json(r#"{"tasks": [
    ///   {"id": "a", "kind": {"lane": "config"}, "owner": "A", "spec": {"intent": "a"},
    ///    "owned_paths": ["a.toml"]},
    ///   {"id": "b", "kind": {"lane": "config"}, "owner": "B", "spec": {"intent": "b"},
    ///    "owned_paths": ["b.toml"]}]}"#)?)
    ///     .normalize().consolidate()?.validate()?;
    ///
    /// /// Writes its task's file; one per thread.
    /// struct Writes;
    /// impl Worker for Writes {
    ///     fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
    ///         let file = AdmittedPath::admit(&format!("{}.toml", call.task().id)).unwrap();
    ///         Ok(Candidate::new(BTreeMap::from([(file, b"x".to_vec())])).into())
    ///     }
    /// }
    ///
    /// let batch = Batch::new(&plan, ChannelId::new("chan-1")?);
    /// let jobs = NonZeroUsize::new(2).unwrap();
    /// let outcome = batch.run_threaded(jobs, |_slot| Writes, &(), &mut MemoryJournal::default())?;
    /// assert!(outcome.evidence.summary().is_complete());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run_threaded<W: Worker + Send>(
        &self,
        jobs: NonZeroUsize,
        make_worker: impl FnMut(usize) -> W,
        contract: &impl OutputContract,
        journal: &mut impl EvidenceJournal,
    ) -> Result<RunOutcome, BatchError> {
        self.run_threaded_observed(jobs, make_worker, contract, journal, &mut |_| {})
    }

    /// [`run_threaded`](Self::run_threaded), showing `observer` every evidence event as it
    /// is journaled (on the calling thread).
    ///
    /// # Errors
    ///
    /// As [`run_threaded`](Self::run_threaded).
    pub fn run_threaded_observed<W: Worker + Send>(
        &self,
        jobs: NonZeroUsize,
        make_worker: impl FnMut(usize) -> W,
        contract: &impl OutputContract,
        journal: &mut impl EvidenceJournal,
        observer: &mut dyn FnMut(&EvidenceEvent),
    ) -> Result<RunOutcome, BatchError> {
        // More slots than tasks could never all be busy: a typo of `-j 100000` must not start
        // a hundred thousand threads.
        let slots = jobs.get().min(self.plan().tasks().count().max(1));
        let workers: Vec<W> = (0..slots).map(make_worker).collect();
        let mut driver = Threaded { workers };
        self.run_driven(&mut driver, contract, journal, observer)
    }
}

/// The threaded driver: one worker per slot.
struct Threaded<W> {
    workers: Vec<W>,
}

/// What a worker thread tells the calling thread.
enum Message {
    /// The call of `slot` returned.
    Returned {
        slot: usize,
        result: Result<Proposal, WorkerFailure>,
    },
    /// The call of `slot` draws a fix; `reply` answers once the draw is durable.
    Draw {
        slot: usize,
        fix: TaskId,
        reply: Sender<Result<(), String>>,
    },
    /// The worker of `slot` panicked; the run stops and the panic is passed on.
    Panicked,
}

/// Sends [`Message::Panicked`] if a worker thread unwinds.
struct PanicGuard<'s>(&'s Sender<Message>);

impl Drop for PanicGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.0.send(Message::Panicked);
        }
    }
}

/// What a worker thread shares with the others: read-only, or written once.
struct Shared<'a> {
    plan: &'a ValidatedPlan,
    /// The plan's tasks by position.
    tasks: &'a [&'a PlannedTask],
    channel: &'a ChannelId,
    graph: &'a Prerequisites,
    /// The same, each task's sorted by id.
    by_id: &'a Prerequisites,
    /// Every accepted output by position, set once when its task is accepted.
    accepted: &'a [OnceLock<AcceptedOutput>],
    /// The fix attempts the evidence had used when the pass started.
    fixes_used: u32,
    /// The one fix budget every call of the pass spends from, made by the first call that
    /// asks: calls in flight together never spend more than the run has.
    budget: &'a Mutex<Option<FixBudget>>,
}

/// A call's fix ledger on a worker thread: each draw is made durable by the calling thread
/// before the fix may run.
struct ThreadLedger<'a> {
    slot: usize,
    used: u32,
    shared: &'a Shared<'a>,
    to_driver: &'a Sender<Message>,
}

impl FixLedger for ThreadLedger<'_> {
    fn used(&self) -> u32 {
        self.used
    }

    fn fix_budget(&self, max: u32) -> FixBudget {
        let mut shared = self
            .shared
            .budget
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match &*shared {
            Some(budget) if budget.max() == max => budget.clone(),
            // A worker with another limit than the first call's keeps its own count.
            Some(budget) => restored(max, budget.used()),
            None => {
                let budget = restored(max, self.shared.fixes_used);
                *shared = Some(budget.clone());
                budget
            }
        }
    }

    fn draw(&self, fix: &TaskId) -> Result<(), JournalError> {
        let (reply, answer) = mpsc::channel();
        let failed = |detail: String| JournalError::Store {
            channel: self.shared.channel.clone(),
            detail,
            source: None,
        };
        self.to_driver
            .send(Message::Draw {
                slot: self.slot,
                fix: fix.clone(),
                reply,
            })
            .map_err(|_| failed("the batch stopped before the fix was recorded".to_owned()))?;
        match answer.recv() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(detail)) => Err(failed(detail)),
            Err(_) => Err(failed(
                "the batch stopped before the fix was recorded".to_owned(),
            )),
        }
    }
}

/// A budget of `max` with `used` taken (all of it when `used` is more).
fn restored(max: u32, used: u32) -> FixBudget {
    FixBudget::restore(max, used.min(max)).unwrap_or_else(|_| FixBudget::new(0))
}

/// One worker thread: calls its worker for every dispatch it is sent, until the channel
/// closes.
fn serve<W: Worker>(
    slot: usize,
    worker: &mut W,
    shared: &Shared<'_>,
    jobs: Receiver<Dispatch>,
    to_driver: Sender<Message>,
) {
    let _guard = PanicGuard(&to_driver);
    let order = shared.plan.topological_order();
    while let Ok(dispatch) = jobs.recv() {
        // Declared per call: a call's view lives no longer than its dispatch.
        let accepted_at = |p: usize| {
            let a = shared.accepted.get(p)?.get()?;
            Some((&order[p], a))
        };
        let prerequisites_of = |p: usize| shared.graph.of(p);
        let task = shared
            .tasks
            .get(dispatch.position())
            .copied()
            .filter(|t| &t.id == dispatch.task());
        let result = match task {
            None => Err(WorkerFailure::Unavailable {
                detail: format!("find task {} in the plan", dispatch.task()),
            }),
            Some(task) => {
                let prerequisites: Vec<_> = shared
                    .by_id
                    .of(dispatch.position())
                    .iter()
                    .filter_map(|&p| accepted_at(p))
                    .collect();
                let ledger = ThreadLedger {
                    slot,
                    used: dispatch.fix_attempts_used(),
                    shared,
                    to_driver: &to_driver,
                };
                worker.call(&WorkerCall {
                    channel: shared.channel,
                    task,
                    prerequisites,
                    attempt: dispatch.attempt(),
                    correction: dispatch.correction(),
                    ancestry: Ancestry {
                        position: dispatch.position(),
                        prerequisites_of: &prerequisites_of,
                        accepted_at: &accepted_at,
                    },
                    ledger: &ledger,
                })
            }
        };
        if to_driver.send(Message::Returned { slot, result }).is_err() {
            return;
        }
    }
}

impl<W: Worker + Send> Driver for Threaded<W> {
    fn drive<J: EvidenceJournal>(
        &mut self,
        run: &mut Run<'_, '_, J>,
        contract: &impl OutputContract,
    ) -> Result<(), BatchError> {
        let plan = run.batch.plan();
        let graph = run.machine.graph().clone();
        let by_id = run.machine.prerequisites_by_id().clone();
        let accepted: Vec<OnceLock<AcceptedOutput>> = (0..plan.len())
            .map(|p| {
                let cell = OnceLock::new();
                if let Some(a) = run.machine.evidence().task_at(p).and_then(|t| t.accepted()) {
                    let _ = cell.set(a.clone());
                }
                cell
            })
            .collect();
        let channel = run.batch.channel().clone();
        let budget = Mutex::new(None);
        let tasks = run.machine.tasks().to_vec();
        let shared = Shared {
            plan,
            tasks: &tasks,
            channel: &channel,
            graph: &graph,
            by_id: &by_id,
            accepted: &accepted,
            fixes_used: run.machine.evidence().fix_attempts_used(),
            budget: &budget,
        };
        let jobs = self.workers.len();
        std::thread::scope(|scope| {
            let (to_driver, from_workers) = mpsc::channel();
            let mut to_slots = Vec::with_capacity(jobs);
            for (slot, worker) in self.workers.iter_mut().enumerate() {
                let (to_slot, slot_jobs) = mpsc::channel();
                to_slots.push(to_slot);
                let (shared, to_driver) = (&shared, to_driver.clone());
                scope.spawn(move || serve(slot, worker, shared, slot_jobs, to_driver));
            }
            drop(to_driver);
            let mut coordinator = Coordinator {
                slots: vec![None; jobs],
                to_slots,
                accepted: &accepted,
                stop: None,
                replies: Vec::new(),
            };
            let result = coordinator.run(run, &from_workers, contract);
            // Closing the slots' channels ends every thread once its call returns; the
            // scope waits for them (and passes a worker's panic on).
            drop(coordinator);
            result
        })
    }
}

/// The calling thread's side of a threaded pass.
struct Coordinator<'a> {
    /// The call each slot is making, if any.
    slots: Vec<Option<Dispatch>>,
    to_slots: Vec<Sender<Dispatch>>,
    accepted: &'a [OnceLock<AcceptedOutput>],
    /// Why the pass stops once the calls in flight have settled.
    stop: Option<BatchError>,
    /// Fix draws to answer once the append that holds them returns.
    replies: Vec<Sender<Result<(), String>>>,
}

impl Coordinator<'_> {
    fn run<J: EvidenceJournal>(
        &mut self,
        run: &mut Run<'_, '_, J>,
        from_workers: &Receiver<Message>,
        contract: &impl OutputContract,
    ) -> Result<(), BatchError> {
        loop {
            if self.stop.is_none() {
                let Reservation { events, dispatches } = run.machine.reserve(self.slots.len())?;
                for event in events {
                    run.commit_buffered(event);
                }
                // One append for everything since the last: settlements, draws, drains and
                // reservations (group commit).
                if let Err(err) = run.flush() {
                    self.refuse_draws(&err);
                    return Err(err);
                }
                self.answer_draws();
                run.checkpoint()?;
                for dispatch in dispatches {
                    let Some(slot) = self.slots.iter().position(Option::is_none) else {
                        break;
                    };
                    self.slots[slot] = Some(dispatch.clone());
                    if self.to_slots[slot].send(dispatch).is_err() {
                        // The thread is gone (it panicked); the scope passes the panic on.
                        return Ok(());
                    }
                }
            } else {
                if let Err(err) = run.flush() {
                    self.refuse_draws(&err);
                    return Err(err);
                }
                self.answer_draws();
                run.checkpoint()?;
            }
            if self.slots.iter().all(Option::is_none) {
                return match self.stop.take() {
                    Some(stop) => Err(stop),
                    None => Ok(()),
                };
            }
            let Ok(first) = from_workers.recv() else {
                return Ok(());
            };
            let mut next = Some(first);
            while let Some(message) = next {
                if !self.receive(run, message, contract)? {
                    return Ok(());
                }
                next = from_workers.try_recv().ok();
            }
        }
    }

    /// Folds one message; false when a worker panicked.
    fn receive<J: EvidenceJournal>(
        &mut self,
        run: &mut Run<'_, '_, J>,
        message: Message,
        contract: &impl OutputContract,
    ) -> Result<bool, BatchError> {
        match message {
            Message::Panicked => return Ok(false),
            Message::Draw { slot, fix, reply } => {
                let Some(dispatch) = self.slots.get(slot).and_then(Option::as_ref) else {
                    let _ = reply.send(Err(format!("slot {slot} has no call in flight")));
                    return Ok(true);
                };
                let event = run.machine.draw_fix(dispatch, &fix)?;
                run.commit_buffered(event);
                self.replies.push(reply);
            }
            Message::Returned { slot, result } => {
                let Some(dispatch) = self.slots.get_mut(slot).and_then(Option::take) else {
                    return Ok(true);
                };
                let Settled { events, stop } = run.machine.settle(&dispatch, result, contract)?;
                for event in events {
                    run.commit_buffered(event);
                }
                if let Some(stop) = stop {
                    self.stop.get_or_insert(stop);
                }
                let accepted = run
                    .machine
                    .evidence()
                    .task_at(dispatch.position())
                    .and_then(|t| t.accepted());
                if let (Some(a), Some(cell)) = (accepted, self.accepted.get(dispatch.position())) {
                    let _ = cell.set(a.clone());
                }
            }
        }
        Ok(true)
    }

    fn answer_draws(&mut self) {
        for reply in self.replies.drain(..) {
            let _ = reply.send(Ok(()));
        }
    }

    fn refuse_draws(&mut self, err: &BatchError) {
        for reply in self.replies.drain(..) {
            let _ = reply.send(Err(format!("journal the batch's events: {err}")));
        }
    }
}
