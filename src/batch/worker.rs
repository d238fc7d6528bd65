//! The worker a batch calls for each task, what it is given, and how it can fail.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::candidate::{AcceptedOutput, Candidate, Rejection};
use super::evidence::event::ClosureSettlement;
use super::journal::JournalError;
use super::machine::LowestFirst;
use super::reservation::Reservation;
use crate::closure::{AgentError, AgentErrorKind, ClosureRecord};
use crate::id::digest::{Canonical, CanonicalHasher};
use crate::plan::PlannedTask;
use crate::{closure::FixBudget, id::ChannelId, id::TaskId};

/// A failure of the worker's infrastructure, not of its output. It fails the task for this
/// batch and is never reclassified as a repairable output error (no corrective call is
/// granted for it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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
    /// The agent reported a failure of its own infrastructure (an [`AgentError`] of kind
    /// [`AgentErrorKind::Infrastructure`]); the text is the error and its sources.
    #[error("agent infrastructure failed: {detail}")]
    Agent {
        /// The agent's error and its sources, as text.
        detail: String,
    },
}

// An infrastructure failure's digest form is the sentence the evidence digest first encoded
// it as, frozen here so that the digests of stored evidence still verify; the error's
// message may be reworded freely without moving any digest. (Each sentence starts
// differently and the whole is length-prefixed, so the encoding is unambiguous.)
impl Canonical for InfrastructureFailure {
    fn encode(&self, h: &mut CanonicalHasher) {
        let frozen = match self {
            Self::ProcessMissing { detail } => format!("worker process is missing: {detail}"),
            Self::Timeout { after_ms } => format!("worker call timed out after {after_ms} ms"),
            Self::Transport { detail } => format!("worker transport failed: {detail}"),
            Self::Agent { detail } => format!("agent infrastructure failed: {detail}"),
        };
        h.put(&frozen);
    }
}

/// What a resume does with a call that was reserved but never settled (a pending turn).
///
/// Agents declare it; the default keeps the existing behaviour (`Allow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum PendingTurnReplay {
    /// Re-dispatch the task; the interrupted call stays on record under its number and, up
    /// to as many interruptions as the task's budget, does not count against it.
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
    /// The agent failed with its own typed error. A batch treats it by its kind: an
    /// infrastructure failure fails the task (never repairable) and a cancellation stops
    /// the batch, as the variants above; the error itself reaches the batch's caller.
    #[error(transparent)]
    Agent(AgentFailure),
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

/// An agent's error, kept whole: its type (reach it with [`error`](Self::error) and
/// `downcast_ref`), its source chain and its [`AgentErrorKind`]. Cloning shares the error.
#[derive(Clone)]
pub struct AgentFailure {
    kind: AgentErrorKind,
    error: Arc<dyn AgentError>,
}

impl AgentFailure {
    /// Keeps `error`, classified by its own [`AgentError::kind`].
    pub fn new(error: impl AgentError) -> Self {
        Self {
            kind: error.kind(),
            error: Arc::new(error),
        }
    }

    /// What kind of failure the agent said it was.
    pub fn kind(&self) -> AgentErrorKind {
        self.kind
    }

    /// The agent's error itself.
    pub fn error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.error
    }

    /// The error and every source beneath it, joined with `: `.
    pub fn chain_text(&self) -> String {
        let mut text = self.error.to_string();
        let mut next = self.error.source();
        while let Some(e) = next {
            text.push_str(": ");
            text.push_str(&e.to_string());
            next = e.source();
        }
        text
    }
}

impl std::fmt::Debug for AgentFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentFailure")
            .field("kind", &self.kind)
            .field("error", &self.error)
            .finish()
    }
}

impl std::fmt::Display for AgentFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&*self.error, f)
    }
}

/// Transparent: the agent's error shows itself and its sources are its own.
impl std::error::Error for AgentFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// Two failures are equal when they share the same error.
impl PartialEq for AgentFailure {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.error, &other.error)
    }
}

impl Eq for AgentFailure {}

/// What a worker call proposes: a candidate and, when the worker itself refuses it (a
/// closure that halted proposes what it left and says why it halted), that rejection.
///
/// A candidate the worker refuses is settled as rejected with exactly that rejection, after
/// the built-in ownership check and before the output contract.
///
/// # Examples
///
/// ```
/// use kleene::batch::{Candidate, Proposal, Rejection};
/// use kleene::id::TaskId;
///
/// let proposal = Proposal::refused(
///     Candidate::default(),
///     Rejection::contract(&TaskId::new("svc")?, "closure halted: recovery_stalled"),
/// );
/// assert!(proposal.rejection().is_some());
/// assert!(Proposal::from(Candidate::default()).rejection().is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    pub(super) candidate: Candidate,
    pub(super) rejection: Option<Rejection>,
    pub(super) closure: Option<ClosureSettlement>,
    /// The agent error the closure ended with, kept for the batch's caller.
    pub(super) error: Option<AgentFailure>,
    /// The closure's whole record, kept with the output in a batch's cache (boxed: most
    /// proposals carry none).
    pub(super) record: Option<Box<ClosureRecord>>,
}

impl Proposal {
    /// A candidate the worker stands behind.
    pub fn new(candidate: Candidate) -> Self {
        Self {
            candidate,
            rejection: None,
            closure: None,
            error: None,
            record: None,
        }
    }

    /// A candidate the worker itself refuses, with the exact rejection.
    pub fn refused(candidate: Candidate, rejection: Rejection) -> Self {
        Self {
            candidate,
            rejection: Some(rejection),
            closure: None,
            error: None,
            record: None,
        }
    }

    /// The same proposal, carrying the settled closure that produced it (journaled as
    /// evidence with the call's settlement).
    pub fn with_closure(mut self, closure: ClosureSettlement) -> Self {
        self.closure = Some(closure);
        self
    }

    /// The proposal of a call of `task` whose closure ended with `record`, as
    /// [`ClosureWorker`](super::ClosureWorker) makes it: refused when the closure halted or
    /// stopped, with the reason and every failure that caused it (justifications verbatim)
    /// after any rejection it already had, and carrying the settled closure. For a worker
    /// that runs the closure itself (on another machine, say) and must settle as the
    /// library's closure worker does.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use kleene::batch::{Candidate, Proposal};
    /// use kleene::closure::{run_to_closure, ExecutionOutput, GovernanceDecision, RecoveryPolicy,
    ///                       step::Session, Severity, Spec, step::ValidationToken, ValidatorResult, Verdict};
    /// use kleene::{Agent, Task, id::TaskId, id::ValidatorId};
    ///
    /// /// Its tests always fail, and it never fixes anything.
    /// struct Failing;
    /// impl Agent for Failing {
    ///     type Error = Infallible;
    ///     fn govern(&mut self, _: &Task, _: &Session, _: u32) -> Result<GovernanceDecision, Infallible> {
    ///         Ok(GovernanceDecision::Approve)
    ///     }
    ///     fn pre_validate(&mut self, _: &Task, _: u32) -> Result<Verdict, Infallible> {
    ///         Ok(Verdict::clean())
    ///     }
    ///     fn execute(&mut self, _: &Task, _: &ValidationToken) -> Result<ExecutionOutput, Infallible> {
    ///         Ok(ExecutionOutput::new("built"))
    ///     }
    ///     fn post_validate(&mut self, _: &Task, _: &ExecutionOutput) -> Result<Verdict, Infallible> {
    ///         let tests = ValidatorId::new("tests").unwrap();
    ///         Ok(Verdict::new([ValidatorResult::new(tests, Severity::Blocker, false, "1 failed")]))
    ///     }
    /// }
    ///
    /// let id = TaskId::new("svc")?;
    /// let task = Task::new(id.clone(), Spec::new("the service"));
    /// let record = run_to_closure(task, Session::new("build", "p")?, &mut Failing,
    ///                             &RecoveryPolicy::default());
    /// let proposal = Proposal::new(Candidate::default()).closed_by(&id, &record);
    /// let refusal = proposal.rejection().unwrap().to_string();
    /// assert!(refusal.contains("closure halted at svc") && refusal.contains("1 failed"));
    /// assert!(proposal.closure().is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn closed_by(self, task: &TaskId, record: &ClosureRecord) -> Self {
        self.closed_by_record(task, record.clone())
    }

    /// [`closed_by`](Self::closed_by), keeping `record` itself: the closure workers own
    /// their call's record and hand it over rather than copy it on every call.
    pub(crate) fn closed_by_record(mut self, task: &TaskId, record: ClosureRecord) -> Self {
        if let Some(halt) = super::closure_worker::halt_text(&record) {
            let text = match self.rejection.take() {
                Some(Rejection::Contract { message, .. }) => format!("{message}\n\n{halt}"),
                Some(other) => format!("{other}\n\n{halt}"),
                None => halt,
            };
            self.rejection = Some(Rejection::contract(task, text));
        }
        self.closure = Some(ClosureSettlement::of(&record));
        self.record = Some(Box::new(record));
        self
    }

    /// The candidate.
    pub fn candidate(&self) -> &Candidate {
        &self.candidate
    }

    /// The worker's own rejection of it, if any.
    pub fn rejection(&self) -> Option<&Rejection> {
        self.rejection.as_ref()
    }

    /// The closure that produced it, if one did.
    pub fn closure(&self) -> Option<&ClosureSettlement> {
        self.closure.as_ref()
    }

    /// The whole record of the closure that produced it, when it was
    /// [`closed_by`](Self::closed_by) one: a batch's cache keeps it with the output, so a
    /// reused output's audit trail comes with it.
    pub fn closure_record(&self) -> Option<&ClosureRecord> {
        self.record.as_deref()
    }
}

impl From<Candidate> for Proposal {
    fn from(candidate: Candidate) -> Self {
        Self::new(candidate)
    }
}

/// The run's record of fix attempts, open to a call while it runs: a closure commits each
/// fix it draws before the fix runs, so a crash can never hand a resume more fixes than the
/// run had.
pub(crate) trait FixLedger {
    /// Fix attempts the run had used when the call started (settled and interrupted calls).
    fn used(&self) -> u32;
    /// Durably records that the call draws a fix attempt for `fix`.
    fn draw(&self, fix: &TaskId) -> Result<(), JournalError>;
    /// The run's fix budget of size `max` as this call may spend it: by default what the
    /// evidence left when the call started; a driver with several calls in flight hands every
    /// call one shared budget, so together they never spend more than `max`.
    fn fix_budget(&self, max: u32) -> FixBudget {
        FixBudget::restore(max, self.used().min(max)).unwrap_or_else(|_| FixBudget::new(0))
    }
}

/// The exact rejection of the task's last refused candidate, and that candidate: what a
/// corrective call must fix.
#[derive(Debug, Clone, Copy)]
pub struct Correction<'a> {
    pub(super) rejection: &'a Rejection,
    pub(super) candidate: &'a Candidate,
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
    pub(super) channel: &'a ChannelId,
    pub(super) task: &'a PlannedTask,
    pub(super) prerequisites: Vec<(&'a TaskId, &'a AcceptedOutput)>,
    pub(super) attempt: u32,
    pub(super) correction: Option<Correction<'a>>,
    pub(super) ancestry: Inputs<'a>,
    pub(super) ledger: &'a dyn FixLedger,
    pub(super) reservation: Reservation,
}

/// What [`WorkerCall::inputs`] needs to walk the task's ancestors on demand: most workers
/// never ask, so a call does not pay for the walk.
#[derive(Clone, Copy)]
pub(crate) struct Ancestry<'a> {
    pub(super) position: usize,
    pub(super) prerequisites_of: &'a dyn Fn(usize) -> &'a [usize],
    pub(super) accepted_at: &'a dyn Fn(usize) -> Option<(&'a TaskId, &'a AcceptedOutput)>,
}

/// Where a call's transitive inputs come from: walked in the plan beside the machine, or
/// given whole by a call made away from it (see
/// [`DispatchedCall`](super::dispatched::DispatchedCall)).
#[derive(Clone, Copy)]
pub(crate) enum Inputs<'a> {
    Walk(Ancestry<'a>),
    Given(&'a [(TaskId, AcceptedOutput)]),
}

impl std::fmt::Debug for Inputs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Walk(a) => f
                .debug_struct("Walk")
                .field("position", &a.position)
                .finish_non_exhaustive(),
            Self::Given(given) => f.debug_tuple("Given").field(&given.len()).finish(),
        }
    }
}

impl<'a> From<Ancestry<'a>> for Inputs<'a> {
    fn from(ancestry: Ancestry<'a>) -> Self {
        Self::Walk(ancestry)
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
        match self.ancestry {
            Inputs::Walk(a) => transitive_inputs(a.position, a.prerequisites_of, a.accepted_at),
            Inputs::Given(given) => given.iter().map(|(id, output)| (id, output)).collect(),
        }
    }

    /// The call number for this task, from 1 (interrupted calls count).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
    /// The correction to make, if an earlier candidate was refused.
    pub fn correction(&self) -> Option<Correction<'a>> {
        self.correction
    }

    /// The call's reservation: durable already, unless the worker
    /// [waits for it](Worker::waits_for_reservation), which must then
    /// [`wait_durable`](Reservation::wait_durable) before the call has any effect.
    pub fn reservation(&self) -> Reservation {
        self.reservation.clone()
    }

    /// The fix attempts the whole run had used when this call started, from the evidence
    /// (every settled closure, and every fix an interrupted call drew).
    pub fn fix_attempts_used(&self) -> u32 {
        self.ledger.used()
    }

    /// Commits to the journal that this call draws one fix attempt (for the fix subtask
    /// `fix`), before the fix runs. [`ClosureWorker`](super::ClosureWorker) does this for
    /// every fix it spawns.
    ///
    /// # Errors
    ///
    /// [`JournalError`] when the journal cannot be written; the fix must not run then.
    pub fn draw_fix(&self, fix: &TaskId) -> Result<(), JournalError> {
        self.ledger.draw(fix)
    }

    /// The run's fix budget of size `max` for this call's closure (see
    /// [`FixLedger::fix_budget`]).
    pub(crate) fn fix_budget(&self, max: u32) -> FixBudget {
        self.ledger.fix_budget(max)
    }
}

/// The accepted outputs of every transitive prerequisite of the task at `position`, in
/// topological order (positions are topological, so sorting them sorts the outputs).
pub(crate) fn transitive_inputs<'a>(
    position: usize,
    prerequisites_of: impl Fn(usize) -> &'a [usize],
    accepted_at: impl Fn(usize) -> Option<(&'a TaskId, &'a AcceptedOutput)>,
) -> Vec<(&'a TaskId, &'a AcceptedOutput)> {
    // Prerequisites sit at lower positions: a bit per position marks what was seen, and
    // taking the bits lowest first gives topological order without a sort (every call of a
    // long chain walks all its ancestors: this is the cheap form of it).
    let mut seen = LowestFirst::with_positions(position + 1);
    let mut todo = vec![position];
    while let Some(p) = todo.pop() {
        for &q in prerequisites_of(p) {
            if seen.insert(q) {
                todo.push(q);
            }
        }
    }
    std::iter::from_fn(|| seen.pop_first())
        .filter_map(accepted_at)
        .collect()
}

impl std::fmt::Debug for dyn FixLedger + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FixLedger")
            .field("used", &self.used())
            .finish_non_exhaustive()
    }
}

/// Performs a task: proposes a candidate (possibly refusing it itself, see [`Proposal`]),
/// or reports why it could not.
///
/// # Examples
///
/// ```
/// use kleene::batch::{Candidate, Proposal, Worker, WorkerCall, WorkerFailure};
///
/// struct Noop;
/// impl Worker for Noop {
///     fn call(&mut self, _call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
///         Ok(Candidate::default().into())
///     }
/// }
/// ```
pub trait Worker {
    /// Performs one call.
    ///
    /// # Errors
    ///
    /// [`WorkerFailure`] when the infrastructure failed or the call was cancelled.
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure>;

    /// Whether every call of this worker waits for
    /// [`call.reservation().wait_durable()`](Reservation::wait_durable) before it has any
    /// effect. The sequential and threaded drivers then hand it its calls while their
    /// reservations sync, so what a call does first without effect overlaps with the sync
    /// (the async driver and [`DispatchedCall`](super::DispatchedCall) make every
    /// reservation durable first). Defaults to false: a call is made once its reservation is
    /// durable.
    fn waits_for_reservation(&self) -> bool {
        false
    }
}

impl<W: Worker + ?Sized> Worker for &mut W {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        (**self).call(call)
    }

    fn waits_for_reservation(&self) -> bool {
        (**self).waits_for_reservation()
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    /// The walk as first written: a set of positions, sorted.
    fn oracle(position: usize, prerequisites: &[Vec<usize>]) -> Vec<usize> {
        let mut seen = std::collections::BTreeSet::new();
        let mut todo = vec![position];
        while let Some(p) = todo.pop() {
            for &q in &prerequisites[p] {
                if seen.insert(q) {
                    todo.push(q);
                }
            }
        }
        seen.into_iter().collect()
    }

    proptest! {
        #[test]
        fn the_inputs_are_every_transitive_prerequisite_in_position_order(
            edges in prop::collection::vec(prop::collection::vec(any::<prop::sample::Index>(), 0..4), 1..300),
            pick in any::<prop::sample::Index>(),
        ) {
            // Each task's prerequisites sit at lower positions, as in a validated plan.
            let prerequisites: Vec<Vec<usize>> = edges
                .iter()
                .enumerate()
                .map(|(p, e)| if p == 0 { Vec::new() } else { e.iter().map(|i| i.index(p)).collect() })
                .collect();
            let position = pick.index(prerequisites.len());
            let ids: Vec<crate::id::TaskId> = (0..prerequisites.len())
                .map(|p| crate::id::TaskId::new(format!("t{p}")).unwrap())
                .collect();
            let empty = crate::batch::Candidate::default();
            let digest = empty.digest();
            let output = crate::batch::candidate::AcceptedOutput::trusted(empty, digest);
            let got: Vec<String> = super::transitive_inputs(
                position,
                |p| prerequisites[p].as_slice(),
                |p| Some((&ids[p], &output)),
            )
            .into_iter()
            .map(|(id, _)| id.to_string())
            .collect();
            let want: Vec<String> = oracle(position, &prerequisites)
                .into_iter()
                .map(|p| format!("t{p}"))
                .collect();
            prop_assert_eq!(got, want);
        }
    }
}
