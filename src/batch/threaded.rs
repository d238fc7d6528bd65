//! Several calls at once: the threaded driver runs up to `jobs` calls on scoped threads, one
//! worker per thread, over the same machine and journal as the sequential drive.
//!
//! The calling thread keeps the machine and the journal; the worker threads only call.
//! Settlements (and fix draws) that arrive together are folded together and journaled in one
//! append with the reservations they make possible, so they share one durable sync (group
//! commit); nothing is acknowledged or dispatched before the append that holds it returns,
//! except to workers that wait for their call's reservation
//! ([`Worker::waits_for_reservation`]): they get their calls while the append syncs, and the
//! calling thread makes the sync meanwhile.
//!
//! The example is on [`Batch::run_threaded`].

use std::num::NonZeroUsize;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Mutex, OnceLock, PoisonError};

use super::candidate::AcceptedOutput;
use super::error::BatchError;
use super::evidence::event::EvidenceEvent;
use super::executor::{Batch, RunOutcome};
use super::journal::{EvidenceJournal, JournalError};
use super::machine::{Dispatch, LowestFirst, Prerequisites};
use super::pass::{Driver, Run, Sequential};
use super::reservation::Reservation;
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
    /// The factory `make_worker` is given each slot's index (`0`, `1`, …), which most
    /// factories ignore (`|_slot| MyWorker::new()`); use it to give each slot its own
    /// workspace or client. `contract` and `journal` are as for [`run`](Self::run): `&()`
    /// adds no check of your own to the built-in one. The run only borrows the batch, so
    /// `Batch::new(&plan, channel).run_threaded(…)` is one expression.
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
        let mut workers: Vec<W> = (0..slots).map(make_worker).collect();
        if let [worker] = workers.as_mut_slice()
            && !self.durable_observation
        {
            // One slot makes the sequential drive's calls in its order (the same evidence):
            // on the calling thread, each call saves two thread hand-offs. Observed durably,
            // a call's thread of its own lets the calling thread show what its reservation's
            // sync made durable while the call runs, instead of after it.
            return self.run_driven(&mut Sequential(worker), contract, journal, observer);
        }
        let mut driver = Threaded { workers };
        self.run_driven(&mut driver, contract, journal, observer)
    }
}

/// The threaded driver: one worker per slot.
struct Threaded<W> {
    workers: Vec<W>,
}

/// What a worker thread tells the calling thread.
#[allow(
    clippy::large_enum_variant,
    reason = "a returned call carries its dispatch back; boxing it would allocate per call"
)]
enum Message {
    /// The call of `slot` returned.
    Returned {
        slot: usize,
        dispatch: Dispatch,
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

/// A prerequisite's accepted output, with the task that produced it.
pub(super) type AcceptedInput<'a> = (&'a TaskId, &'a AcceptedOutput);

/// What the calls of one pass share, whichever driver makes them (threads or futures):
/// read-only, or written once. The driver owns it for the pass and lends it to every call.
pub(super) struct Shared<'p> {
    plan: &'p ValidatedPlan,
    /// The plan's tasks by position.
    tasks: Vec<&'p PlannedTask>,
    pub(super) channel: ChannelId,
    pub(super) graph: Prerequisites,
    /// The same, each task's sorted by id.
    by_id: Prerequisites,
    /// Every accepted output a call may read, set once when its task is accepted.
    pub(super) accepted: AcceptedCells,
    pub(super) budget: SharedBudget,
}

impl<'p> Shared<'p> {
    /// What a pass of `run` shares, as far as its evidence goes.
    pub(super) fn of<J, O>(run: &Run<'_, 'p, J, O>) -> Self {
        Self {
            plan: run.batch.plan(),
            tasks: run.machine.tasks().to_vec(),
            channel: run.batch.channel().clone(),
            graph: run.machine.graph().clone(),
            by_id: run.machine.prerequisites_by_id().clone(),
            accepted: AcceptedCells::of(run),
            budget: SharedBudget::new(run.machine.evidence().fix_attempts_used()),
        }
    }

    /// The task at `position` and its accepted output, once it has one.
    pub(super) fn accepted_at(&self, position: usize) -> Option<(&TaskId, &AcceptedOutput)> {
        let accepted = self.accepted.cell(position)?.get()?;
        Some((self.plan.topological_order().get(position)?, accepted))
    }

    /// The planned task `dispatch` names, and the accepted outputs of its direct
    /// prerequisites sorted by task id: what every driver hands a call.
    pub(super) fn call_of(
        &self,
        dispatch: &Dispatch,
    ) -> Result<(&'p PlannedTask, Vec<AcceptedInput<'_>>), WorkerFailure> {
        let task = self
            .tasks
            .get(dispatch.position())
            .copied()
            .filter(|t| &t.id == dispatch.task())
            .ok_or_else(|| WorkerFailure::Unavailable {
                detail: format!("find task {} in the plan", dispatch.task()),
            })?;
        let prerequisites = self
            .by_id
            .of(dispatch.position())
            .iter()
            .filter_map(|&p| self.accepted_at(p))
            .collect();
        Ok((task, prerequisites))
    }
}

/// The one fix budget every call of a pass spends from, made by the first call that asks:
/// calls in flight together never spend more than the run has.
pub(super) struct SharedBudget {
    /// The fix attempts the evidence had used when the pass started.
    fixes_used: u32,
    budget: Mutex<Option<FixBudget>>,
}

impl SharedBudget {
    pub(super) fn new(fixes_used: u32) -> Self {
        Self {
            fixes_used,
            budget: Mutex::new(None),
        }
    }

    /// The pass's budget of size `max`, as a call may spend it.
    pub(super) fn of_size(&self, max: u32) -> FixBudget {
        let mut shared = self.budget.lock().unwrap_or_else(PoisonError::into_inner);
        match &*shared {
            Some(budget) if budget.max() == max => budget.clone(),
            // A worker with another limit than the first call's keeps its own count.
            Some(budget) => restored(max, budget.used()),
            None => {
                let budget = restored(max, self.fixes_used);
                *shared = Some(budget.clone());
                budget
            }
        }
    }
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
        self.shared.budget.of_size(max)
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
    jobs: Receiver<(Dispatch, Reservation)>,
    to_driver: Sender<Message>,
) {
    let _guard = PanicGuard(&to_driver);
    while let Ok((dispatch, reservation)) = jobs.recv() {
        // Declared per call: a call's view lives no longer than its dispatch.
        let accepted_at = |p: usize| shared.accepted_at(p);
        let prerequisites_of = |p: usize| shared.graph.of(p);
        let result = match shared.call_of(&dispatch) {
            Err(failure) => Err(failure),
            Ok((task, prerequisites)) => {
                let ledger = ThreadLedger {
                    slot,
                    used: dispatch.fix_attempts_used(),
                    shared,
                    to_driver: &to_driver,
                };
                worker.call(&WorkerCall {
                    channel: &shared.channel,
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
                    reservation,
                })
            }
        };
        let returned = Message::Returned {
            slot,
            dispatch,
            result,
        };
        if to_driver.send(returned).is_err() {
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
        let shared = Shared::of(run);
        let jobs = self.workers.len();
        let deferred = self.workers.iter().all(Worker::waits_for_reservation);
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
                group: GroupCommit::new(jobs, &shared.accepted),
                to_slots,
                deferred,
            };
            let result = coordinator.run(run, &from_workers, contract);
            // Closing the slots' channels ends every thread once its call returns; the
            // scope waits for them (and passes a worker's panic on).
            drop(coordinator);
            result
        })
    }
}

/// The accepted outputs the calls in flight read their prerequisites' outputs from, set once
/// as tasks are accepted: a cell only for each task with dependents (no call reads the
/// others), so a plan of 10k independent tasks has none, where a cell per task was 64 bytes
/// each to allocate, initialise and drop every pass.
pub(super) struct AcceptedCells {
    /// Per position, where its cell is in `cells` (`NONE`: the task has no dependents).
    cell_of: Vec<usize>,
    cells: Vec<OnceLock<AcceptedOutput>>,
}

impl AcceptedCells {
    const NONE: usize = usize::MAX;

    /// The cells of `run`'s tasks with dependents, as far as the pass's evidence has them.
    fn of<J, O>(run: &Run<'_, '_, J, O>) -> Self {
        let mut cells = Vec::new();
        let cell_of = (0..run.batch.plan().len())
            .map(|p| {
                if !run.machine.has_dependents(p) {
                    return Self::NONE;
                }
                let cell = OnceLock::new();
                if let Some(a) = run.machine.evidence().task_at(p).and_then(|t| t.accepted()) {
                    let _ = cell.set(a.clone());
                }
                cells.push(cell);
                cells.len() - 1
            })
            .collect();
        Self { cell_of, cells }
    }

    /// The cell of the task at `position`, if it has dependents.
    pub(super) fn cell(&self, position: usize) -> Option<&OnceLock<AcceptedOutput>> {
        self.cells.get(*self.cell_of.get(position)?)
    }
}

/// Answers a call waiting for its fix draw to be durable.
pub(super) trait DrawReply {
    /// Sends the answer; a call that no longer waits is not an error.
    fn answer(self, result: Result<(), String>);
}

impl DrawReply for Sender<Result<(), String>> {
    fn answer(self, result: Result<(), String>) {
        let _ = self.send(result);
    }
}

/// The journaling side of a pass with several calls in flight, whatever carries the calls
/// (threads or futures): settlements and fix draws are folded as they arrive and journaled
/// in one append with the reservations they make possible (group commit); nothing is
/// acknowledged or handed out before the append that holds it returns.
pub(super) struct GroupCommit<'a, R> {
    /// The call each slot is making, if any: its task's position and its number. The call
    /// owns its dispatch and hands it back when it returns, so no slot keeps a copy.
    slots: Vec<Option<(usize, u32)>>,
    /// The slots making none, lowest handed out first (not a scan of `slots`: a driver may
    /// have thousands of slots; a bitset allocates nothing per call).
    free: LowestFirst,
    accepted: &'a AcceptedCells,
    /// Why the pass stops once the calls in flight have settled.
    stop: Option<BatchError>,
    /// Fix draws to answer once the append that holds them returns.
    replies: Vec<R>,
}

impl<'a, R: DrawReply> GroupCommit<'a, R> {
    pub(super) fn new(slots: usize, accepted: &'a AcceptedCells) -> Self {
        Self {
            slots: vec![None; slots],
            free: {
                let mut free = LowestFirst::with_positions(slots);
                for slot in 0..slots {
                    free.insert(slot);
                }
                free
            },
            accepted,
            stop: None,
            replies: Vec::new(),
        }
    }

    /// Reserves what the machine allows (unless the pass stops), journals everything since
    /// the last commit in one append and answers the draws it held: the calls to start now,
    /// each with the free slot it takes.
    pub(super) fn commit<J: EvidenceJournal, O: FnMut(&EvidenceEvent)>(
        &mut self,
        run: &mut Run<'_, '_, J, O>,
    ) -> Result<Vec<(usize, Dispatch)>, BatchError> {
        if self.stop.is_some() {
            self.flush(run)?;
            return Ok(Vec::new());
        }
        let mut dispatches = Vec::new();
        run.reserve_buffered(self.slots.len(), &mut dispatches)?;
        self.publish_reused(run);
        // One append for everything since the last: settlements, draws, drains and
        // reservations.
        self.flush(run)?;
        Ok(self.assign(dispatches))
    }

    /// [`commit`](Self::commit), handing back the append's sync as the reservation of the
    /// calls it starts instead of waiting for it: the calls go out while it syncs, and
    /// [`synced`](Self::synced) completes it (nothing else is answered or compacted before).
    pub(super) fn commit_deferred<J: EvidenceJournal, O: FnMut(&EvidenceEvent)>(
        &mut self,
        run: &mut Run<'_, '_, J, O>,
    ) -> Result<(Vec<(usize, Dispatch)>, Reservation), BatchError> {
        if self.stop.is_some() {
            self.flush(run)?;
            return Ok((Vec::new(), Reservation::durable()));
        }
        let mut dispatches = Vec::new();
        run.reserve_buffered(self.slots.len(), &mut dispatches)?;
        self.publish_reused(run);
        let reservation = run
            .flush_deferred()
            .inspect_err(|err| self.refuse_draws(err))?;
        Ok((self.assign(dispatches), reservation))
    }

    /// Completes the sync of what [`commit_deferred`](Self::commit_deferred) appended, then
    /// answers the draws it held.
    pub(super) fn synced<J: EvidenceJournal, O: FnMut(&EvidenceEvent)>(
        &mut self,
        run: &mut Run<'_, '_, J, O>,
        reservation: &Reservation,
    ) -> Result<(), BatchError> {
        let synced = reservation
            .complete()
            .map_err(|e| BatchError::new(run.batch.channel().clone(), e));
        synced.inspect_err(|err| self.refuse_draws(err))?;
        run.synced();
        self.answer_draws();
        run.checkpoint()
    }

    /// Publishes the outputs the last reservation reused, as a settlement publishes an
    /// accepted one: the calls it starts may read them.
    fn publish_reused<J: EvidenceJournal, O: FnMut(&EvidenceEvent)>(
        &mut self,
        run: &mut Run<'_, '_, J, O>,
    ) {
        for position in run.machine.take_reused_positions() {
            self.publish(run, position);
        }
    }

    /// Sets the cell of the task at `position` to its accepted output, if it has both.
    fn publish<J: EvidenceJournal, O: FnMut(&EvidenceEvent)>(
        &self,
        run: &Run<'_, '_, J, O>,
        position: usize,
    ) {
        let accepted = run
            .machine
            .evidence()
            .task_at(position)
            .and_then(|t| t.accepted());
        if let (Some(a), Some(cell)) = (accepted, self.accepted.cell(position)) {
            let _ = cell.set(a.clone());
        }
    }

    /// Gives each of `dispatches` a free slot: the calls to start now.
    fn assign(&mut self, dispatches: Vec<Dispatch>) -> Vec<(usize, Dispatch)> {
        let mut starts = Vec::with_capacity(dispatches.len());
        for dispatch in dispatches {
            let Some(slot) = self.free.pop_first() else {
                break;
            };
            self.slots[slot] = Some((dispatch.position(), dispatch.attempt()));
            starts.push((slot, dispatch));
        }
        starts
    }

    fn flush<J: EvidenceJournal, O: FnMut(&EvidenceEvent)>(
        &mut self,
        run: &mut Run<'_, '_, J, O>,
    ) -> Result<(), BatchError> {
        run.flush().inspect_err(|err| self.refuse_draws(err))?;
        self.answer_draws();
        run.checkpoint()
    }

    /// Tells every draw waiting for the last append that it was not recorded.
    fn refuse_draws(&mut self, err: &BatchError) {
        for reply in self.replies.drain(..) {
            reply.answer(Err(format!("journal the batch's events: {err}")));
        }
    }

    /// Tells every draw waiting for the last append that it is durable.
    fn answer_draws(&mut self) {
        for reply in self.replies.drain(..) {
            reply.answer(Ok(()));
        }
    }

    /// Whether no call is in flight: the pass ends with [`end`](Self::end).
    pub(super) fn is_idle(&self) -> bool {
        self.free.len() == self.slots.len()
    }

    /// How the pass ends once idle: why it stopped, if it did.
    pub(super) fn end(&mut self) -> Result<(), BatchError> {
        match self.stop.take() {
            Some(stop) => Err(stop),
            None => Ok(()),
        }
    }

    /// Folds the call of `slot` drawing a fix; `reply` is answered after the next commit.
    pub(super) fn draw<J: EvidenceJournal, O: FnMut(&EvidenceEvent)>(
        &mut self,
        run: &mut Run<'_, '_, J, O>,
        slot: usize,
        fix: &TaskId,
        reply: R,
    ) -> Result<(), BatchError> {
        let call = self.slots.get(slot).copied().flatten();
        let Some((task, attempt)) =
            call.and_then(|(p, attempt)| Some((&run.machine.tasks().get(p)?.id, attempt)))
        else {
            reply.answer(Err(format!("slot {slot} has no call in flight")));
            return Ok(());
        };
        let event = run.machine.draw_fix_of(&task.clone(), attempt, fix)?;
        run.commit_buffered(event);
        self.replies.push(reply);
        Ok(())
    }

    /// Folds what the call of `slot` (making `dispatch`, handed back) returned; it is
    /// journaled at the next commit.
    pub(super) fn returned<J: EvidenceJournal, O: FnMut(&EvidenceEvent)>(
        &mut self,
        run: &mut Run<'_, '_, J, O>,
        slot: usize,
        dispatch: &Dispatch,
        result: Result<Proposal, WorkerFailure>,
        contract: &impl OutputContract,
    ) -> Result<(), BatchError> {
        let Some(call) = self.slots.get_mut(slot).and_then(Option::take) else {
            return Ok(());
        };
        debug_assert_eq!(call, (dispatch.position(), dispatch.attempt()));
        self.free.insert(slot);
        if let Some(stop) = run.settle_buffered(dispatch, result, contract)? {
            self.stop.get_or_insert(stop);
        }
        // Only a task with dependents has its output read by a later call.
        let position = dispatch.position();
        if run.machine.has_dependents(position) {
            self.publish(run, position);
        }
        Ok(())
    }
}

/// The calling thread's side of a threaded pass.
struct Coordinator<'a> {
    group: GroupCommit<'a, Sender<Result<(), String>>>,
    to_slots: Vec<Sender<(Dispatch, Reservation)>>,
    /// Whether every worker waits for its call's reservation: calls then go out while their
    /// reservations sync.
    deferred: bool,
}

impl Coordinator<'_> {
    fn run<J: EvidenceJournal>(
        &mut self,
        run: &mut Run<'_, '_, J>,
        from_workers: &Receiver<Message>,
        contract: &impl OutputContract,
    ) -> Result<(), BatchError> {
        loop {
            let (starts, reservation) = if self.deferred {
                self.group.commit_deferred(run)?
            } else {
                (self.group.commit(run)?, Reservation::durable())
            };
            for (slot, dispatch) in starts {
                if self.to_slots[slot]
                    .send((dispatch, reservation.clone()))
                    .is_err()
                {
                    // The thread is gone (it panicked); the scope passes the panic on.
                    return Ok(());
                }
            }
            if self.deferred {
                self.group.synced(run, &reservation)?;
            }
            if self.group.is_idle() {
                return self.group.end();
            }
            let Ok(first) = from_workers.recv() else {
                return Ok(());
            };
            let mut next = Some(first);
            while let Some(message) = next {
                match message {
                    Message::Panicked => return Ok(()),
                    Message::Draw { slot, fix, reply } => {
                        self.group.draw(run, slot, &fix, reply)?;
                    }
                    Message::Returned {
                        slot,
                        dispatch,
                        result,
                    } => {
                        self.group
                            .returned(run, slot, &dispatch, result, contract)?;
                    }
                }
                next = from_workers.try_recv().ok();
            }
        }
    }
}
