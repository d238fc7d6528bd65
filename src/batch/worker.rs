//! The worker a batch calls for each task, what it is given, and how it can fail.

use serde::{Deserialize, Serialize};

use super::candidate::{AcceptedOutput, Candidate, Rejection};
use crate::plan::PlannedTask;
use crate::{ChannelId, TaskId};

/// A failure of the worker's infrastructure, not of its output. It fails the task for this
/// batch and is never reclassified as a repairable output error (no corrective call is
/// granted for it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[non_exhaustive]
pub enum InfrastructureFailure {
    /// The worker process (or service) was not there.
    #[error("worker process is missing: {detail}")]
    ProcessMissing {
        /// What was missing.
        detail: String,
    },
    /// The call did not answer in time.
    #[error("worker call timed out after {after_ms} ms")]
    Timeout {
        /// How long the caller waited.
        after_ms: u64,
    },
    /// The transport to the worker broke.
    #[error("worker transport failed: {detail}")]
    Transport {
        /// The transport's message.
        detail: String,
    },
}

/// What a resume does with a call that was reserved but never settled (a pending turn).
///
/// Agents declare it; the default keeps the existing behaviour (`Allow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum PendingTurnReplay {
    /// Re-dispatch the task; the interrupted call counts against its budget.
    #[default]
    Allow,
    /// Stop the resume, naming the agent, channel and task: the interrupted call may have
    /// had effects that were never recorded.
    Block,
}

/// Why a worker call produced no candidate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerFailure {
    /// The worker's infrastructure failed; the task fails, never as a repairable error.
    #[error(transparent)]
    Infrastructure(#[from] InfrastructureFailure),
    /// The worker or its caller aborted the call mid-flight. The batch stops; the call's
    /// reservation and the task's rejection history are kept, and a resume decides (by the
    /// agent's [`PendingTurnReplay`]) whether the call may be replayed.
    #[error("worker call was cancelled")]
    Cancelled,
    /// The worker could not make the call at all because its own host failed (its disk is
    /// full, its state directory cannot be written). The batch stops and the reservation is
    /// withdrawn: the call does not count against the task's budget, and a resume makes it
    /// again. Only for failures that left no effect behind (a staged workspace is discarded).
    #[error("worker could not make the call: {detail}")]
    Unavailable {
        /// What failed, for the operator.
        detail: String,
    },
}

/// The exact rejection of the task's last refused candidate, and that candidate: what a
/// corrective call must fix.
#[derive(Debug, Clone, Copy)]
pub struct Correction<'a> {
    pub(crate) rejection: &'a Rejection,
    pub(crate) candidate: &'a Candidate,
}

impl<'a> Correction<'a> {
    /// The exact rejection.
    pub fn rejection(&self) -> &'a Rejection {
        self.rejection
    }
    /// The refused candidate.
    pub fn candidate(&self) -> &'a Candidate {
        self.candidate
    }
}

/// One call of a worker: the task, its prerequisites' accepted outputs, the call number and,
/// after a rejection, the correction to make.
#[derive(Debug)]
pub struct WorkerCall<'a> {
    pub(crate) channel: &'a ChannelId,
    pub(crate) task: &'a PlannedTask,
    pub(crate) prerequisites: Vec<(&'a TaskId, &'a AcceptedOutput)>,
    pub(crate) attempt: u32,
    pub(crate) correction: Option<Correction<'a>>,
    pub(crate) ancestry: Ancestry<'a>,
}

/// What [`WorkerCall::inputs`] needs to walk the task's ancestors on demand: most workers
/// never ask, so a call does not pay for the walk.
#[derive(Clone, Copy)]
pub(crate) struct Ancestry<'a> {
    pub(crate) position: usize,
    pub(crate) prerequisites_of: &'a dyn Fn(usize) -> &'a [usize],
    pub(crate) accepted_at: &'a dyn Fn(usize) -> Option<(&'a TaskId, &'a AcceptedOutput)>,
}

impl std::fmt::Debug for Ancestry<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ancestry")
            .field("position", &self.position)
            .finish_non_exhaustive()
    }
}

impl<'a> WorkerCall<'a> {
    /// The channel the batch runs on.
    pub fn channel(&self) -> &'a ChannelId {
        self.channel
    }
    /// The planned task.
    pub fn task(&self) -> &'a PlannedTask {
        self.task
    }
    /// The accepted outputs of the task's direct prerequisites, sorted by task id.
    pub fn prerequisites(&self) -> &[(&'a TaskId, &'a AcceptedOutput)] {
        &self.prerequisites
    }
    /// The accepted outputs of every transitive prerequisite of the task (its prerequisites,
    /// theirs, and so on), in the plan's topological order: what a staged workspace for the
    /// call starts from.
    ///
    /// # Complexity
    ///
    /// Linear in the number of the task's ancestors and the edges between them; computed on
    /// each call of this method.
    pub fn inputs(&self) -> Vec<(&'a TaskId, &'a AcceptedOutput)> {
        let a = self.ancestry;
        let mut seen = std::collections::BTreeSet::new();
        let mut todo = vec![a.position];
        while let Some(p) = todo.pop() {
            for &q in (a.prerequisites_of)(p) {
                if seen.insert(q) {
                    todo.push(q);
                }
            }
        }
        seen.into_iter()
            .filter_map(|p| (a.accepted_at)(p))
            .collect()
    }

    /// The call number for this task, from 1 (interrupted calls count).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
    /// The correction to make, if an earlier candidate was refused.
    pub fn correction(&self) -> Option<Correction<'a>> {
        self.correction
    }
}

/// Performs a task: proposes a candidate, or reports why it could not.
///
/// # Examples
///
/// ```
/// use kleene::batch::{Candidate, Worker, WorkerCall, WorkerFailure};
///
/// struct Noop;
/// impl Worker for Noop {
///     fn call(&mut self, _call: &WorkerCall<'_>) -> Result<Candidate, WorkerFailure> {
///         Ok(Candidate::default())
///     }
/// }
/// ```
pub trait Worker {
    /// Performs one call.
    ///
    /// # Errors
    ///
    /// [`WorkerFailure`] when the infrastructure failed or the call was cancelled.
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Candidate, WorkerFailure>;
}

impl<W: Worker + ?Sized> Worker for &mut W {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Candidate, WorkerFailure> {
        (**self).call(call)
    }
}

/// A user-supplied check of a candidate, run after the built-in ownership check.
///
/// `()` accepts every candidate; a closure `Fn(&PlannedTask, &Candidate) -> Result<(),
/// Rejection>` is a contract.
pub trait OutputContract {
    /// Accepts `candidate` for `task`, or refuses it with the exact rejection.
    ///
    /// # Errors
    ///
    /// The [`Rejection`] a corrective call will receive verbatim.
    fn check(&self, task: &PlannedTask, candidate: &Candidate) -> Result<(), Rejection>;
}

impl OutputContract for () {
    fn check(&self, _task: &PlannedTask, _candidate: &Candidate) -> Result<(), Rejection> {
        Ok(())
    }
}

impl<F: Fn(&PlannedTask, &Candidate) -> Result<(), Rejection>> OutputContract for F {
    fn check(&self, task: &PlannedTask, candidate: &Candidate) -> Result<(), Rejection> {
        self(task, candidate)
    }
}
