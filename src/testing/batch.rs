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

use std::collections::BTreeMap;

use crate::batch::journal::Journal;
use crate::batch::journal::backend::MemoryBackend;
use crate::batch::{
    BatchEvidence, Candidate, JournalKey, Proposal, Rejection, Worker, WorkerCall, WorkerFailure,
    evidence::EvidenceEvent, journal::EvidenceJournal, journal::JournalError, journal::JournalLoad,
    journal::TornTail, worker::InfrastructureFailure,
};
use crate::{id::ChannelId, id::TaskId, id::digest::Digest};

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

/// A worker that answers from per-task scripts: call `n` of a task gets the script's `n`th
/// outcome (the last one repeats); tasks without a script get an empty candidate.
#[derive(Debug, Clone, Default)]
pub struct ScriptedWorker {
    scripts: BTreeMap<TaskId, Vec<ScriptedOutcome>>,
    calls: Vec<ScriptedCall>,
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

    /// Every call received, in order.
    pub fn calls(&self) -> &[ScriptedCall] {
        &self.calls
    }

    /// The calls `task` received.
    pub fn calls_of(&self, task: &TaskId) -> Vec<&ScriptedCall> {
        self.calls.iter().filter(|c| &c.task == task).collect()
    }
}

impl Worker for ScriptedWorker {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        let task = &call.task().id;
        self.calls.push(ScriptedCall {
            task: task.clone(),
            attempt: call.attempt(),
            prerequisites: call
                .prerequisites()
                .iter()
                .map(|(id, _)| (*id).clone())
                .collect(),
            correction: call
                .correction()
                .map(|c| (c.rejection().clone(), c.candidate().digest())),
        });
        let outcome = self.scripts.get(task).and_then(|script| {
            let at = usize::try_from(call.attempt().saturating_sub(1)).unwrap_or(usize::MAX);
            script.get(at).or_else(|| script.last())
        });
        match outcome {
            None => Ok(Candidate::default().into()),
            Some(ScriptedOutcome::Candidate(c)) => Ok(c.clone().into()),
            Some(ScriptedOutcome::Infrastructure(f)) => {
                Err(WorkerFailure::Infrastructure(f.clone()))
            }
            Some(ScriptedOutcome::Cancel) => Err(WorkerFailure::Cancelled),
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
