//! A scripted batch worker and a byte-image journal, for deterministic batch tests.
//!
//! ```
//! use kleene::id::TaskId;
//! use kleene::batch::{Candidate, worker::InfrastructureFailure};
//! use kleene::testing::batch::{ScriptedOutcome, ScriptedWorker};
//!
//! let worker = ScriptedWorker::new()
//!     .script(TaskId::new("svc")?, [
//!         ScriptedOutcome::Infrastructure(InfrastructureFailure::Timeout { after_ms: 30_000 }),
//!     ])
//!     .script(TaskId::new("page")?, [ScriptedOutcome::Cancel, ScriptedOutcome::Candidate(Candidate::default())]);
//! assert!(worker.calls().is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use crate::batch::journal::Journal;
use crate::batch::journal::backend::MemoryBackend;
use crate::batch::{
    BatchEvidence, Candidate, JournalKey, Proposal, Rejection, Worker, WorkerCall, WorkerFailure,
    evidence::EvidenceEvent, journal::EvidenceJournal, journal::JournalError, journal::JournalLoad,
    journal::TornTail, worker::InfrastructureFailure,
};
use crate::testing::closure::locked;
use crate::testing::completion::CompletionOrder;
use crate::{id::ChannelId, id::TaskId, id::digest::Digest};

/// The journal backend that cuts the power at any sync, for crash tests of your own (see
/// [`ImageJournal`] for a journal whose bytes a test cuts by hand).
pub use crate::batch::journal::CrashBackend;

/// What a scripted worker does on one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScriptedOutcome {
    /// Propose this candidate.
    Candidate(Candidate),
    /// Fail on infrastructure.
    Infrastructure(InfrastructureFailure),
    /// Abort mid-call (the reservation stays in flight).
    Cancel,
}

/// One call a scripted worker received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedCall {
    /// The task.
    pub task: TaskId,
    /// The call number.
    pub attempt: u32,
    /// The prerequisites whose accepted outputs the call carried.
    pub prerequisites: Vec<TaskId>,
    /// The correction the call carried: the exact rejection and the refused candidate's
    /// digest.
    pub correction: Option<(Rejection, Digest)>,
}

/// What a scripted worker keeps of a call: the same from a `WorkerCall` as from an
/// `AsyncWorkerCall`, which share these accessors but no trait.
macro_rules! scripted_call {
    ($call:expr) => {
        ScriptedCall {
            task: $call.task().id.clone(),
            attempt: $call.attempt(),
            prerequisites: $call
                .prerequisites()
                .iter()
                .map(|(id, _)| (*id).clone())
                .collect(),
            correction: $call
                .correction()
                .map(|c| (c.rejection().clone(), c.candidate().digest())),
        }
    };
}

/// A worker that answers from per-task scripts: call `n` of a task gets the script's `n`th
/// outcome (the last one repeats); tasks without a script get an empty candidate.
///
/// Calls are counted by their call number, so a task's calls get the same outcomes whichever
/// slot makes them and whatever worker a resume brings. A call a crash interrupted never
/// answered: tell a worker scripted afresh for the resume what it resumes
/// ([`resuming`](Self::resuming)), and the call made again gets the outcome the interrupted
/// one was due, so the script does not shift. [`completing_in`](Self::completing_in) makes
/// its async answers wait a scripted number of turns, so the calls of a `run_async` finish
/// in the order a test chooses. It is a [`Worker`] and, with feature `async`, an
/// [`AsyncWorker`](crate::batch::AsyncWorker); `Arc<Mutex<ScriptedWorker>>` is one worker
/// shared by every slot of a run, so that [`calls`](Self::calls) lists them all.
///
/// ```
/// use kleene::batch::{Batch, FileJournal, TaskStatus, journal::EvidenceJournal};
/// use kleene::testing::batch::{ScriptedOutcome, ScriptedWorker};
/// use kleene::{AppBuildPlan, batch::Candidate, id::TaskId};
///
/// let plan = AppBuildPlan::from_json(r#"{"tasks": [{"id": "a", "owner": "M",
///   "spec": {"intent": "a"}, "owned_paths": []}]}"#)?.validate()?;
/// let a = TaskId::new("a")?;
/// let script = || ScriptedWorker::new().script(a.clone(), [ScriptedOutcome::Cancel,
///     ScriptedOutcome::Candidate(Candidate::default())]);
/// let dir = tempfile::tempdir()?;
/// let mut journal = FileJournal::open(dir.path())?;
/// let batch = Batch::new(&plan, "main".parse()?);
/// assert!(batch.run(&mut script(), &(), &mut journal).is_err()); // call 1 stops the run
///
/// // The resume makes call 2; scripted afresh and told what it resumes, the worker answers
/// // it with the outcome call 1 was due.
/// let before = journal.load(batch.channel())?.map(|l| l.into_evidence()).transpose()?;
/// let mut worker = script().resuming(before.as_ref().ok_or("no evidence")?);
/// assert!(batch.run(&mut worker, &(), &mut journal).is_err()); // cancelled again
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct ScriptedWorker {
    scripts: BTreeMap<TaskId, Vec<ScriptedOutcome>>,
    /// Per task, the call numbers that never answered (a crash interrupted them).
    unanswered: BTreeMap<TaskId, BTreeSet<u32>>,
    calls: Vec<ScriptedCall>,
    order: CompletionOrder,
}

impl ScriptedWorker {
    /// A worker with no scripts.
    pub fn new() -> Self {
        Self::default()
    }

    /// Scripts `task`'s calls, in order.
    pub fn script(
        mut self,
        task: TaskId,
        outcomes: impl IntoIterator<Item = ScriptedOutcome>,
    ) -> Self {
        self.scripts.insert(task, outcomes.into_iter().collect());
        self
    }

    /// Counts out the calls `evidence` holds that never answered (in flight when the journal
    /// was cut, or interrupted by an earlier resume): the call a resume makes again gets the
    /// outcome the interrupted one was due.
    #[must_use]
    pub fn resuming(mut self, evidence: &BatchEvidence) -> Self {
        let interrupted = evidence
            .inventory()
            .flat_map(|(task, t)| t.interrupted_attempts().iter().map(move |&a| (task, a)));
        for (task, attempt) in interrupted.chain(evidence.in_flight()) {
            self.unanswered
                .entry(task.clone())
                .or_default()
                .insert(attempt);
        }
        self
    }

    /// Makes each async answer for a task wait the turns `order` gives it (the synchronous
    /// [`Worker`] answers at once).
    #[must_use]
    pub fn completing_in(mut self, order: CompletionOrder) -> Self {
        self.order = order;
        self
    }

    /// Every call received, in order.
    pub fn calls(&self) -> &[ScriptedCall] {
        &self.calls
    }

    /// The calls `task` received.
    pub fn calls_of(&self, task: &TaskId) -> Vec<&ScriptedCall> {
        self.calls.iter().filter(|c| &c.task == task).collect()
    }

    /// Records `call` and answers it from its task's script, saying how many turns the async
    /// answer waits.
    fn answer(&mut self, call: ScriptedCall) -> (Result<Proposal, WorkerFailure>, u32) {
        let wait = self.order.turns_of(&call.task);
        let skipped = self
            .unanswered
            .get(&call.task)
            .map_or(0, |calls| calls.range(..call.attempt).count());
        let due = usize::try_from(call.attempt.saturating_sub(1))
            .unwrap_or(usize::MAX)
            .saturating_sub(skipped);
        let outcome = self
            .scripts
            .get(&call.task)
            .and_then(|script| script.get(due).or_else(|| script.last()));
        let answer = match outcome {
            None => Ok(Candidate::default().into()),
            Some(ScriptedOutcome::Candidate(c)) => Ok(c.clone().into()),
            Some(ScriptedOutcome::Infrastructure(f)) => {
                Err(WorkerFailure::Infrastructure(f.clone()))
            }
            Some(ScriptedOutcome::Cancel) => Err(WorkerFailure::Cancelled),
        };
        self.calls.push(call);
        (answer, wait)
    }
}

impl Worker for ScriptedWorker {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        self.answer(scripted_call!(call)).0
    }
}

/// One scripted worker shared by the slots of a threaded run.
impl Worker for Arc<Mutex<ScriptedWorker>> {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        locked(self).call(call)
    }
}

#[cfg(feature = "async")]
mod asynchronous {
    use super::{ScriptedCall, ScriptedWorker, locked};
    use crate::batch::{AsyncWorker, AsyncWorkerCall, Proposal, WorkerFailure};
    use crate::testing::completion::turns;
    use std::sync::{Arc, Mutex};

    /// The same answers as the synchronous worker, each after its task's turns.
    impl AsyncWorker for ScriptedWorker {
        async fn call(&mut self, call: &AsyncWorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
            let (answer, wait) = self.answer(scripted_call!(call));
            turns(wait).await;
            answer
        }
    }

    /// One scripted worker shared by the slots of an async run; the lock is never held
    /// across a wait.
    impl AsyncWorker for Arc<Mutex<ScriptedWorker>> {
        async fn call(&mut self, call: &AsyncWorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
            // The lock is a temporary of this statement: released before the wait.
            let (answer, wait) = locked(self).answer(scripted_call!(call));
            turns(wait).await;
            answer
        }
    }
}

/// A journal that keeps, per channel, exactly the bytes a [`FileJournal`](crate::batch::FileJournal)
/// would hold (framed, sealed records, snapshot first after compaction), so crash tests can
/// cut it after any record or inside one, or flip its bits, and load what is left. It is the
/// real [`Journal`] over a [`MemoryBackend`].
#[derive(Debug)]
pub struct ImageJournal {
    journal: Journal<MemoryBackend>,
}

impl Default for ImageJournal {
    fn default() -> Self {
        Self {
            journal: Journal::new(MemoryBackend::default()),
        }
    }
}

impl ImageJournal {
    /// A journal holding `image` for `channel`.
    pub fn with_image(channel: ChannelId, image: Vec<u8>) -> Self {
        Self {
            journal: Journal::new(MemoryBackend::with_log(channel, image)),
        }
    }

    /// Seals records written from now on with a keyed MAC under `key` and verifies every
    /// record against it on load, as [`FileJournal::with_mac_key`](crate::batch::FileJournal::with_mac_key) does.
    #[must_use]
    pub fn with_mac_key(self, key: JournalKey) -> Self {
        Self {
            journal: self.journal.with_mac_key(key),
        }
    }

    /// The bytes held for `channel`.
    pub fn image(&self, channel: &ChannelId) -> Option<&[u8]> {
        self.journal.backend().log(channel)
    }

    /// Where each whole record of `channel`'s image ends (up to the first that is not whole).
    pub fn record_ends(&self, channel: &ChannelId) -> Vec<usize> {
        // A memory log always reads.
        self.journal.record_ends(channel).unwrap_or_default()
    }
}

impl EvidenceJournal for ImageJournal {
    fn append(
        &mut self,
        channel: &ChannelId,
        events: &[EvidenceEvent],
    ) -> Result<(), JournalError> {
        self.journal.append(channel, events)
    }

    fn load(&self, channel: &ChannelId) -> Result<Option<JournalLoad>, JournalError> {
        self.journal.load(channel)
    }

    fn repair_torn_tail(&mut self, channel: &ChannelId) -> Result<Option<TornTail>, JournalError> {
        self.journal.repair_torn_tail(channel)
    }

    fn compact(
        &mut self,
        channel: &ChannelId,
        evidence: &BatchEvidence,
    ) -> Result<(), JournalError> {
        self.journal.compact(channel, evidence)
    }
}
