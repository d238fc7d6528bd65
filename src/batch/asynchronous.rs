//! Calls as futures: the async driver keeps up to `jobs` calls of [`AsyncWorker`]s in flight
//! over the same machine and journal as the sequential and threaded drivers (feature
//! `async`).
//!
//! [`Batch::run_async`] is [`Batch::run_threaded`] without threads: one future per call,
//! each slot's worker making that slot's calls, all polled by the driver's own future, so
//! it runs under any executor (tokio's multi-threaded runtime, a single-threaded
//! `block_on`). Settlements and fix draws that complete together are folded together and
//! journaled in one append with the reservations they make possible (group commit); nothing
//! is acknowledged or handed out before the append that holds it returns. The same outcomes
//! give the same evidence as the other drivers, whatever order the calls complete in.
//!
//! An [`AsyncWorker`] is anything that makes a call as a future. To run an
//! [`AsyncAgent`](crate::closure::AsyncAgent) (the closure's phases, with fixes), make each
//! slot's worker a [`ClosureWorker`](super::ClosureWorker) over an `AsyncBatchAgent`; an agent whose
//! execution output is its task's one file needs only `AsyncAgent`, wrapped in
//! [`OutputFile`](super::OutputFile).
//!
//! **Journal I/O is synchronous.** The driver appends to the [`EvidenceJournal`] on the task
//! that polls it, between polls of the calls: a [`FileJournal`](super::FileJournal) blocks
//! that executor thread for each group's `fdatasync`. An embedder who needs it off the
//! executor wraps the journal (an append that hands the write to a blocking pool and waits
//! for it), or polls the driver on a thread of its own.
//!
//! **Cancellation.** Dropping the driver's future drops the calls in flight. Every one of
//! them was reserved in the journal before its future was first polled, and nothing is
//! written after the reservation that the drop could tear, so a later [`Batch::run`] (any
//! driver) resumes them as interrupted calls under the agents' `pending_turn_replay` rules.
//!
//! ```
//! use std::collections::BTreeMap;
//! use std::num::NonZeroUsize;
//! use kleene::batch::{AsyncWorker, AsyncWorkerCall, Batch, Candidate, MemoryJournal, Proposal,
//!                     WorkerFailure};
//! use kleene::{plan::AdmittedPath, AppBuildPlan, id::ChannelId, plan::Plan};
//!
//! let plan = Plan::draft(AppBuildPlan::from_json(r#"{"tasks": [
//!   {"id": "a", "kind": {"lane": "config"}, "owner": "A", "spec": {"intent": "a"},
//!    "owned_paths": ["a.toml"]},
//!   {"id": "b", "kind": {"lane": "config"}, "owner": "B", "spec": {"intent": "b"},
//!    "owned_paths": ["b.toml"]}]}"#)?)
//!     .normalize().consolidate()?.validate()?;
//!
//! /// Writes its task's file after awaiting its (simulated) model.
//! struct Writes;
//! impl AsyncWorker for Writes {
//!     async fn call(&mut self, call: &AsyncWorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
//!         let body = async { b"x".to_vec() }.await;
//!         let file = AdmittedPath::admit(&format!("{}.toml", call.task().id)).unwrap();
//!         Ok(Candidate::new(BTreeMap::from([(file, body)])).into())
//!     }
//! }
//!
//! let batch = Batch::new(&plan, ChannelId::new("chan-1")?);
//! let jobs = NonZeroUsize::new(2).unwrap();
//! let mut journal = MemoryJournal::default();
//! let outcome = futures_executor::block_on(batch.run_async(jobs, |_slot| Writes, &(), &mut journal))?;
//! assert!(outcome.evidence.summary().is_complete());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::future::Future;
use std::num::NonZeroUsize;

use std::task::Poll;

use futures_channel::{mpsc, oneshot};
use futures_util::stream::{FuturesUnordered, StreamExt};

use super::candidate::AcceptedOutput;
use super::error::BatchError;
use super::evidence::event::EvidenceEvent;
use super::executor::{Batch, RunOutcome};
use super::journal::{EvidenceJournal, JournalError};
use super::machine::{Dispatch, PassNotes};
use super::pass::{RecoveryPass, Run};
use super::threaded::{DrawReply, GroupCommit, Shared as Pass};
use super::worker::{Correction, OutputContract, Proposal, WorkerFailure, transitive_inputs};
use crate::closure::FixBudget;
use crate::plan::PlannedTask;
use crate::{id::ChannelId, id::TaskId};

/// The async counterpart of [`Worker`](super::Worker): performs a task's call as a future,
/// proposing a candidate (possibly refusing it itself, see [`Proposal`]) or saying why it
/// could not.
///
/// Implement `call` with `async fn`. The future must be `Send`, so that the driver's future
/// is `Send` whenever the worker, the contract and the journal are, and a service can spawn
/// a run on a multi-threaded runtime from generic code (a trait's `async fn` cannot promise
/// `Send` to generic callers otherwise). The trait is not object safe: the driver is generic
/// over the worker and never boxes a call, which keeps a call as cheap as the future itself.
/// It takes `&mut self` like [`Worker`](super::Worker): each slot has its own worker, made by
/// the factory given to [`Batch::run_async`]; workers that share a client clone a handle.
///
/// # Examples
///
/// ```
/// use kleene::batch::{AsyncWorker, AsyncWorkerCall, Candidate, Proposal, WorkerFailure};
///
/// struct Noop;
/// impl AsyncWorker for Noop {
///     async fn call(&mut self, _call: &AsyncWorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
///         Ok(Candidate::default().into())
///     }
/// }
/// ```
pub trait AsyncWorker {
    /// Performs one call.
    ///
    /// # Errors
    ///
    /// [`WorkerFailure`] when the infrastructure failed or the call was cancelled.
    fn call(
        &mut self,
        call: &AsyncWorkerCall<'_>,
    ) -> impl Future<Output = Result<Proposal, WorkerFailure>> + Send;
}

impl<W: AsyncWorker + ?Sized> AsyncWorker for &mut W {
    fn call(
        &mut self,
        call: &AsyncWorkerCall<'_>,
    ) -> impl Future<Output = Result<Proposal, WorkerFailure>> + Send {
        (**self).call(call)
    }
}

/// One call of an [`AsyncWorker`]: what a [`WorkerCall`](super::WorkerCall) says (the task,
/// its prerequisites' accepted outputs, the call number, the correction to make), with fix
/// draws that are awaited until the driver has journaled them.
pub struct AsyncWorkerCall<'a> {
    shared: &'a Shared<'a>,
    slot: usize,
    task: &'a PlannedTask,
    dispatch: &'a Dispatch,
    prerequisites: Vec<(&'a TaskId, &'a AcceptedOutput)>,
}

impl std::fmt::Debug for AsyncWorkerCall<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncWorkerCall")
            .field("channel", &self.shared.pass.channel)
            .field("task", &self.task.id)
            .field("attempt", &self.dispatch.attempt())
            .finish_non_exhaustive()
    }
}

impl<'a> AsyncWorkerCall<'a> {
    /// The channel the batch runs on.
    pub fn channel(&self) -> &'a ChannelId {
        &self.shared.pass.channel
    }
    /// The planned task.
    pub fn task(&self) -> &'a PlannedTask {
        self.task
    }
    /// The accepted outputs of the task's direct prerequisites, sorted by task id.
    pub fn prerequisites(&self) -> &[(&'a TaskId, &'a AcceptedOutput)] {
        &self.prerequisites
    }
    /// The accepted outputs of every transitive prerequisite of the task, in the plan's
    /// topological order (as [`WorkerCall::inputs`](super::WorkerCall::inputs)).
    ///
    /// # Complexity
    ///
    /// Linear in the number of the task's ancestors and the edges between them; computed on
    /// each call of this method.
    pub fn inputs(&self) -> Vec<(&'a TaskId, &'a AcceptedOutput)> {
        let shared = self.shared;
        transitive_inputs(
            self.dispatch.position(),
            |p| shared.pass.graph.of(p),
            |p| shared.pass.accepted_at(p),
        )
    }
    /// The call number for this task, from 1 (interrupted calls count).
    pub fn attempt(&self) -> u32 {
        self.dispatch.attempt()
    }
    /// The correction to make, if an earlier candidate was refused.
    pub fn correction(&self) -> Option<Correction<'a>> {
        self.dispatch.correction()
    }
    /// The fix attempts the whole run had used when this call was reserved.
    pub fn fix_attempts_used(&self) -> u32 {
        self.dispatch.fix_attempts_used()
    }

    /// Commits to the journal that this call draws one fix attempt (for the fix subtask
    /// `fix`); resolves once the draw is durable, before the fix may run.
    /// [`ClosureWorker`](super::ClosureWorker) does this for every fix it spawns.
    ///
    /// # Errors
    ///
    /// [`JournalError`] when the journal cannot be written or the batch stopped; the fix
    /// must not run then.
    pub async fn draw_fix(&self, fix: &TaskId) -> Result<(), JournalError> {
        let stopped = || "the batch stopped before the fix was recorded".to_owned();
        let (reply, answer) = oneshot::channel();
        let draw = Draw {
            slot: self.slot,
            fix: fix.clone(),
            reply,
        };
        let answer = match self.shared.draws.unbounded_send(draw) {
            Ok(()) => answer.await.unwrap_or_else(|_| Err(stopped())),
            Err(_) => Err(stopped()),
        };
        answer.map_err(|detail| JournalError::Store {
            channel: self.shared.pass.channel.clone(),
            detail,
            source: None,
        })
    }

    /// The run's fix budget of size `max` for this call's closure: one budget shared by the
    /// calls in flight together.
    pub(crate) fn fix_budget(&self, max: u32) -> FixBudget {
        self.shared.pass.budget.of_size(max)
    }
}

impl<'p> Batch<'p> {
    /// [`run`](Self::run) with up to `jobs` calls in flight at once, each a future of its
    /// slot's worker, made by `make_worker(slot)` for slots `0..jobs` (once, before the
    /// future is returned, and never more slots than the plan has tasks).
    /// Ready tasks are reserved lowest position first, so `jobs = 1` makes the calls of
    /// [`run`](Self::run) in its order; the same outcomes give the same evidence digest as
    /// [`run`](Self::run) whatever order the calls complete in. The calls in flight share one
    /// run-wide fix budget, as in [`run_threaded`](Self::run_threaded).
    ///
    /// The factory `make_worker` is given each slot's index (`0`, `1`, …), which most
    /// factories ignore (`|_slot| ClosureWorker::new(…)`); use it to give each slot its
    /// own workspace or client handle. `contract` is your own check of each candidate after
    /// the built-in one (a candidate writes only its task's owned paths): `&()` adds none,
    /// a closure `|task, candidate| …` refuses with the exact
    /// [`Rejection`](super::Rejection) a corrective call receives. `journal` keeps the
    /// evidence ([`MemoryJournal`](super::MemoryJournal) in memory,
    /// [`FileJournal`](super::FileJournal) on disk, to resume after a crash).
    ///
    /// The future borrows the contract and the journal but not the batch (it keeps its own
    /// copy), so `Batch::new(&plan, channel).run_async(…).await` is one expression, and the
    /// future may be stored before it is awaited. It needs no particular runtime and is
    /// `Send` when the worker, the contract and the journal are. Settlements and fix draws that complete together share one
    /// append (group commit), and nothing is handed out or acknowledged before the append
    /// that holds it returns.
    ///
    /// **The journal's I/O is synchronous**: the driver appends on the task that polls it,
    /// between polls of the calls, so a [`FileJournal`](super::FileJournal) blocks that
    /// executor thread for each group's `fdatasync`. An embedder who needs it off the
    /// executor wraps the journal (an append that hands the write to a blocking pool and
    /// waits for it), or polls the run on a thread of its own.
    ///
    /// **Cancellation**: dropping the future drops the calls in flight. Each was reserved in
    /// the journal before its future was first polled, so a later [`run`](Self::run) (with
    /// any driver) resumes them as interrupted calls under the agents' `pending_turn_replay`
    /// rules.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run). A cancelled or unavailable call stops new reservations; the
    /// calls already in flight settle (and are journaled) before the error is returned. On
    /// a journal error the calls still in flight are dropped; their reservations stay.
    ///
    /// # Panics
    ///
    /// When a worker's call panics, the panic passes through this future (the other calls
    /// in flight are dropped; every reservation stays for a resume).
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::collections::BTreeMap;
    /// # use std::num::NonZeroUsize;
    /// # use kleene::batch::{AsyncWorker, AsyncWorkerCall, Batch, Candidate, MemoryJournal,
    /// #                     Proposal, WorkerFailure};
    /// # use kleene::{plan::AdmittedPath, AppBuildPlan, id::ChannelId, plan::Plan};
    /// # let plan = Plan::draft(AppBuildPlan::from_json(r#"{"tasks": [
    /// #   {"id": "a", "kind": {"lane": "config"}, "owner": "A", "spec": {"intent": "a"},
    /// #    "owned_paths": ["a.toml"]}]}"#)?)
    /// #     .normalize().consolidate()?.validate()?;
    /// # struct Writes;
    /// # impl AsyncWorker for Writes {
    /// #     async fn call(&mut self, call: &AsyncWorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
    /// #         let file = AdmittedPath::admit(&format!("{}.toml", call.task().id)).unwrap();
    /// #         Ok(Candidate::new(BTreeMap::from([(file, b"x".to_vec())])).into())
    /// #     }
    /// # }
    /// let batch = Batch::new(&plan, ChannelId::new("chan-1")?);
    /// let mut journal = MemoryJournal::default();
    /// let run = batch.run_async(NonZeroUsize::MIN, |_slot| Writes, &(), &mut journal);
    /// let outcome = futures_executor::block_on(run)?;
    /// assert!(outcome.evidence.summary().is_complete());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run_async<'a, W, F, C, J>(
        &self,
        jobs: NonZeroUsize,
        make_worker: F,
        contract: &'a C,
        journal: &'a mut J,
    ) -> impl Future<Output = Result<RunOutcome, BatchError>> + use<'a, 'p, W, F, C, J>
    where
        W: AsyncWorker + 'a,
        F: FnMut(usize) -> W,
        C: OutputContract,
        J: EvidenceJournal,
    {
        let workers = self.slot_workers(jobs, make_worker);
        // The future owns its copy of the batch (a plan reference and a few small maps), so
        // it does not borrow `self`: `Batch::new(&plan, channel).run_async(…)` is one
        // expression, and the future can be stored or returned before it is awaited.
        let batch = self.clone();
        async move {
            batch
                .run_workers(workers, contract, journal, |_: &EvidenceEvent| {})
                .await
        }
    }

    /// [`run_async`](Self::run_async), showing `observer` every evidence event as it is
    /// journaled.
    ///
    /// # Errors
    ///
    /// As [`run_async`](Self::run_async).
    pub fn run_async_observed<'a, W, F, C, J>(
        &self,
        jobs: NonZeroUsize,
        make_worker: F,
        contract: &'a C,
        journal: &'a mut J,
        observer: &'a mut (dyn FnMut(&EvidenceEvent) + Send),
    ) -> impl Future<Output = Result<RunOutcome, BatchError>> + use<'a, 'p, W, F, C, J>
    where
        W: AsyncWorker + 'a,
        F: FnMut(usize) -> W,
        C: OutputContract,
        J: EvidenceJournal,
    {
        let workers = self.slot_workers(jobs, make_worker);
        // As in `run_async`: the future owns its batch and borrows only what it is given.
        let batch = self.clone();
        async move {
            batch
                .run_workers(workers, contract, journal, observer)
                .await
        }
    }

    fn slot_workers<W>(
        &self,
        jobs: NonZeroUsize,
        make_worker: impl FnMut(usize) -> W,
    ) -> Vec<Option<W>> {
        // More slots than tasks could never all be busy.
        let slots = jobs.get().min(self.plan().tasks().count().max(1));
        (0..slots).map(make_worker).map(Some).collect()
    }

    /// The run: a fresh dispatch or a resume, then the one recovery, each pass driven by
    /// the slots' workers.
    async fn run_workers<W: AsyncWorker, J: EvidenceJournal, O: FnMut(&EvidenceEvent)>(
        &self,
        mut workers: Vec<Option<W>>,
        contract: &impl OutputContract,
        journal: &mut J,
        mut observer: O,
    ) -> Result<RunOutcome, BatchError> {
        let resumed = self.has_evidence(journal)?;
        let mut run = if resumed {
            self.begin_resume(journal, &mut observer)?
        } else {
            self.begin_dispatch(journal, &mut observer)?
        };
        drive(&mut run, &mut workers, contract).await?;
        let (evidence, mut notes) = run.finish()?;
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
        let (outcome, more) = match self.begin_recover(&request, journal, &mut observer)? {
            RecoveryPass::Consumed(outcome) => (*outcome, PassNotes::default()),
            RecoveryPass::Granted {
                mut run,
                granted,
                refused,
            } => {
                if !granted.is_empty() {
                    drive(&mut run, &mut workers, contract).await?;
                }
                RecoveryPass::finish(*run, granted, refused)?
            }
        };
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
}

/// What the calls of a pass share: the pass (as the threaded driver shares it) and where
/// calls send their fix draws.
struct Shared<'a> {
    pass: Pass<'a>,
    draws: mpsc::UnboundedSender<Draw>,
}

/// A call's fix draw, answered once it is durable.
struct Draw {
    slot: usize,
    fix: TaskId,
    reply: oneshot::Sender<Result<(), String>>,
}

impl DrawReply for oneshot::Sender<Result<(), String>> {
    fn answer(self, result: Result<(), String>) {
        let _ = self.send(result);
    }
}

/// A call that returned, with its slot's worker and its dispatch back.
struct Returned<W> {
    slot: usize,
    worker: W,
    dispatch: Dispatch,
    result: Result<Proposal, WorkerFailure>,
}

/// Makes `dispatch`'s call with the worker of `slot`, handing the worker and the dispatch
/// back with the result.
///
/// A plain function returning an `async move` block rather than an `async fn`: an
/// `async fn` moves its arguments into locals when first polled and keeps room for both,
/// which made each call's future (moved whole into its task, 10k of them at once) a
/// dispatch larger.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn keeps its arguments twice in its future"
)]
fn call<'s, W: AsyncWorker + 's>(
    shared: &'s Shared<'s>,
    slot: usize,
    mut worker: W,
    dispatch: Dispatch,
) -> impl Future<Output = Returned<W>> + 's {
    async move {
        // Decided before the call's first await, so that nothing but the call itself is
        // kept across it.
        let (task, prerequisites) = match shared.pass.call_of(&dispatch) {
            Ok(found) => found,
            Err(failure) => {
                return Returned {
                    slot,
                    worker,
                    dispatch,
                    result: Err(failure),
                };
            }
        };
        let call = AsyncWorkerCall {
            shared,
            slot,
            task,
            dispatch: &dispatch,
            prerequisites,
        };
        let result = worker.call(&call).await;
        drop(call);
        Returned {
            slot,
            worker,
            dispatch,
            result,
        }
    }
}

/// Folds every draw that arrived and every call that returned by now, as it is taken
/// (nothing is collected first: a commit of 10k calls would hold 10k results at once),
/// polling with the driver's own waker (draining with a second, no-op waker would swap the
/// calls' registered waker at every completion); waits for the first. `false` when nothing
/// is in flight or arriving.
fn settle_ready<'f, W, F, J, O>(
    in_flight: &'f mut FuturesUnordered<F>,
    draws: &'f mut mpsc::UnboundedReceiver<Draw>,
    group: &'f mut GroupCommit<'_, oneshot::Sender<Result<(), String>>>,
    run: &'f mut Run<'_, '_, J, O>,
    workers: &'f mut [Option<W>],
    contract: &'f impl OutputContract,
) -> impl Future<Output = Result<bool, BatchError>> + 'f
where
    F: Future<Output = Returned<W>>,
    J: EvidenceJournal,
    O: FnMut(&EvidenceEvent),
{
    std::future::poll_fn(move |cx| {
        let mut taken = false;
        while let Poll::Ready(Some(Draw { slot, fix, reply })) = draws.poll_next_unpin(cx) {
            taken = true;
            group.draw(run, slot, &fix, reply)?;
        }
        let drained = loop {
            match in_flight.poll_next_unpin(cx) {
                Poll::Ready(Some(Returned {
                    slot,
                    worker,
                    dispatch,
                    result,
                })) => {
                    taken = true;
                    if let Some(free) = workers.get_mut(slot) {
                        *free = Some(worker);
                    }
                    group.returned(run, slot, &dispatch, result, contract)?;
                }
                Poll::Ready(None) => break true,
                Poll::Pending => break false,
            }
        };
        if taken {
            Poll::Ready(Ok(true))
        } else if drained {
            Poll::Ready(Ok(false))
        } else {
            Poll::Pending
        }
    })
}

/// Drives one pass: reserves into free slots, starts their calls, and folds whatever
/// completed together before the next commit.
async fn drive<W: AsyncWorker, J: EvidenceJournal, O: FnMut(&EvidenceEvent)>(
    run: &mut Run<'_, '_, J, O>,
    workers: &mut [Option<W>],
    contract: &impl OutputContract,
) -> Result<(), BatchError> {
    let (draws, mut drawn) = mpsc::unbounded();
    let shared = Shared {
        pass: Pass::of(run),
        draws,
    };
    let mut group = GroupCommit::new(workers.len(), &shared.pass.accepted);
    let mut in_flight = FuturesUnordered::new();
    loop {
        for (slot, dispatch) in group.commit(run)? {
            match workers.get_mut(slot).and_then(Option::take) {
                Some(worker) => in_flight.push(call(&shared, slot, worker, dispatch)),
                // A free slot always has its worker back; were it missing, the call is
                // withdrawn (it never ran) rather than left in flight forever.
                None => {
                    let missing = WorkerFailure::Unavailable {
                        detail: format!("find the worker of slot {slot}"),
                    };
                    group.returned(run, slot, &dispatch, Err(missing), contract)?;
                }
            }
        }
        if group.is_idle() {
            return group.end();
        }
        // Everything already complete joins the same commit.
        let settled = settle_ready(
            &mut in_flight,
            &mut drawn,
            &mut group,
            run,
            workers,
            contract,
        );
        if !settled.await? {
            return group.end();
        }
    }
}
