//! The batch worker whose every call is one closure of its task: the library's own pipeline
//! from a plan task to a candidate, with one run-wide fix budget kept in the evidence.
//!
//! A [`ClosureWorker`] turns each [`WorkerCall`] into a closure of the call's task (its root
//! is the planned task's id and spec) run by your [`BatchAgent`]. Every fix subtask the
//! closure spawns first draws one attempt from the run's budget, committed to the journal
//! before the fix runs, so no sequence of crashes and resumes ever hands out more than the
//! policy's `max_total_fix_attempts`: the budget of each call is restored from the evidence,
//! never from anything the agent keeps. A closure that halts still proposes what the agent
//! left, refused with the halt as its exact rejection (so batch recovery can hand it to a
//! corrective call); the settled closure (fixes used, how it ended, its audit head and record
//! digest) is journaled with the call's settlement. An agent error keeps its type: an
//! infrastructure failure fails the task, a cancellation stops the batch.
//!
//! The example is on [`ClosureWorker`].

use std::num::NonZeroUsize;

use super::error::BatchError;
use super::executor::{Batch, RunOutcome};
use super::journal::{EvidenceJournal, JournalError};
use super::output_file::OutputFile;
use super::worker::{AgentFailure, Proposal, Worker, WorkerCall, WorkerFailure};
use crate::closure::{AgentError, AgentErrorKind};
use crate::plan::PlannedTask;
use crate::text::Chain;
use crate::{
    closure::Agent, closure::Closure, closure::ClosureOutcome, closure::ClosureRecord,
    closure::RecoveryPolicy, closure::Task, closure::audit::AuditEntry,
    closure::record::ClosureFailure, closure::step::ExecutionOutput, closure::step::ExhaustedBound,
    closure::step::GovernanceDecision, closure::step::HaltReason, closure::step::Next,
    closure::step::Session, closure::step::ValidationToken, closure::verdict::Verdict, id::TaskId,
};

/// An [`Agent`] that a [`ClosureWorker`] can run batch calls with: besides answering the
/// closure's phases, it prepares each call and says what the call proposes.
pub trait BatchAgent: Agent {
    /// Prepares for `call` before its closure starts (a workspace for it, the correction to
    /// make). Defaults to nothing.
    ///
    /// # Errors
    ///
    /// [`WorkerFailure`] when the call cannot be made (the closure does not start).
    fn begin_call(&mut self, call: &WorkerCall<'_>) -> Result<(), WorkerFailure> {
        let _ = call;
        Ok(())
    }

    /// Whether every call of this agent waits for
    /// [`call.reservation().wait_durable()`](super::Reservation::wait_durable) before it has
    /// any effect, so its [`ClosureWorker`] gets each call while the reservation syncs (see
    /// [`Worker::waits_for_reservation`]). Defaults to false.
    fn waits_for_reservation(&self) -> bool {
        false
    }

    /// Whether a failure of `task` may be fixed by fix subtasks; when false its closure runs
    /// with recovery depth 0. Defaults to true.
    fn fixes(&self, task: &PlannedTask) -> bool {
        let _ = task;
        true
    }

    /// Prepares the fix subtask `fix` of `call` before its attempt is drawn from the run's
    /// budget: write what its fixer reads (its recovery spec, say). Called once per fix
    /// subtask. A failure here withdraws the call without spending the attempt, since
    /// nothing of the fix has run yet. Defaults to nothing.
    ///
    /// # Errors
    ///
    /// [`WorkerFailure`] when the fix cannot be prepared; return
    /// [`WorkerFailure::Unavailable`] for the agent's own host failing (a full disk).
    fn prepare_fix(&mut self, call: &WorkerCall<'_>, fix: &Task) -> Result<(), WorkerFailure> {
        let _ = (call, fix);
        Ok(())
    }

    /// Sees every audit entry of the call's closure as it is appended (for live progress).
    fn audited(&mut self, call: &WorkerCall<'_>, entry: &AuditEntry) {
        let _ = (call, entry);
    }

    /// What `call` proposes once its closure ended with `record` (called whatever the
    /// outcome, unless the call is withdrawn, so the agent can clean up). Refuse the
    /// candidate yourself when the agent knows why it must not be accepted; a halted
    /// closure's refusal is added to yours.
    ///
    /// # Errors
    ///
    /// [`WorkerFailure`] when the call's result cannot be read.
    fn finish_call(
        &mut self,
        call: &WorkerCall<'_>,
        record: &ClosureRecord,
    ) -> Result<Proposal, WorkerFailure>;

    /// Told, instead of [`finish_call`](Self::finish_call), that `call` is withdrawn: its
    /// closure stopped because a fix could not be prepared or its attempt could not be
    /// recorded in the journal (`failure` says which, and is what the batch stops with).
    /// The call does not count, and a resume makes it again under the same number, so keep
    /// nothing of `record` that says the call ended (a line of your closure log, say): the
    /// call made again ends with its own. Defaults to `finish_call`, its proposal dropped,
    /// so an agent that cleans up there still does.
    fn withdraw_call(
        &mut self,
        call: &WorkerCall<'_>,
        record: &ClosureRecord,
        failure: &WorkerFailure,
    ) {
        let _ = (failure, self.finish_call(call, record));
    }
}

impl Batch<'_> {
    /// Runs every task of the plan to its closure with agents `make_agent` makes, up to
    /// `jobs` calls at once: the shortest way from a plan and an [`Agent`] to evidence.
    ///
    /// Each call of a task is one closure: your agent executes the task, its post-execute
    /// verdict decides, and a failure spawns a fix subtask (bounded by
    /// [`RecoveryPolicy::default`]: at most 10 fixes in the whole run, 3 deep). The text of a
    /// call's last execution is the content of the task's one owned path (see
    /// [`OutputFile`]). `make_agent` is called once per slot with the slot's number, so each
    /// thread has an agent of its own; `jobs` of 0 is taken as 1. The closures run in the
    /// session of mode `build` on the project named as the channel.
    ///
    /// The journal keeps the evidence: a [`MemoryJournal`](super::MemoryJournal) for a run
    /// you keep alive, a [`FileJournal`](super::FileJournal) to resume after a crash (the
    /// same call resumes). Then [`accept`](Self::accept) the evidence. For a session,
    /// policy or agent of your own (several files a call, a workspace), run a
    /// [`ClosureWorker`] with [`run_threaded`](Self::run_threaded).
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run).
    ///
    /// # Examples
    ///
    /// ```
    /// use kleene::{Agent, AppBuildPlan, Batch, ExecutionOutput, Task, ValidationToken, Verdict};
    ///
    /// /// Writes each task's intent; the API's tests fail until a fix runs.
    /// struct Model;
    /// impl Agent for Model {
    ///     type Error = kleene::Error;
    ///     fn execute(&mut self, t: &Task, _: &ValidationToken) -> Result<ExecutionOutput, kleene::Error> {
    ///         Ok(ExecutionOutput::new(format!("// {}\n", t.spec().intent)))
    ///     }
    ///     fn post_validate(&mut self, t: &Task, _: &ExecutionOutput) -> Result<Verdict, kleene::Error> {
    ///         Ok(if t.id() == "api" { Verdict::blocker("tests", "1 failed")? } else { Verdict::clean() })
    ///     }
    /// }
    ///
    /// let plan = AppBuildPlan::from_json(r#"{"tasks": [
    ///   {"id": "api", "owner": "M", "spec": {"intent": "the API"}, "owned_paths": ["api.rs"]},
    ///   {"id": "doc", "owner": "M", "spec": {"intent": "docs"}, "owned_paths": ["doc.md"],
    ///    "depends_on": ["api"]}]}"#)?.validate()?;
    /// let batch = Batch::new(&plan, "main".parse()?);
    /// let evidence = batch.run_agents(2, |_slot| Model, &mut kleene::batch::MemoryJournal::default())?.evidence;
    /// assert_eq!(evidence.fix_attempts_used(), 1);
    /// let record = batch.accept(&evidence)?;
    /// assert_eq!(record.task_results().len(), 2);
    /// # Ok::<(), kleene::Error>(())
    /// ```
    pub fn run_agents<A: Agent + Send>(
        &self,
        jobs: usize,
        mut make_agent: impl FnMut(usize) -> A,
        journal: &mut impl EvidenceJournal,
    ) -> Result<RunOutcome, BatchError> {
        let (jobs, session, policy) = self.agents_setting(jobs);
        let make = |slot| {
            let agent = OutputFile::new(make_agent(slot));
            ClosureWorker::new(agent, session.clone(), policy.clone())
        };
        self.run_threaded(jobs, make, &(), journal)
    }

    /// What [`run_agents`](Self::run_agents) and `run_agents_async` run with: at least one
    /// slot, mode `build` on the project named as the channel, the default policy.
    pub(super) fn agents_setting(&self, jobs: usize) -> (NonZeroUsize, Session, RecoveryPolicy) {
        let jobs = NonZeroUsize::new(jobs).unwrap_or(NonZeroUsize::MIN);
        (
            jobs,
            Session::build_on(self.channel()),
            RecoveryPolicy::default(),
        )
    }
}

/// A batch [`Worker`] whose every call is one closure of the call's task, run by a
/// [`BatchAgent`] under one recovery policy and one run-wide fix budget. Over an
/// `AsyncBatchAgent` (feature `async`) it is an `AsyncWorker` for
/// [`Batch::run_async`](super::Batch::run_async), with the same evidence for the same
/// answers.
///
/// Every fix subtask a call's closure spawns first draws one attempt from the run's budget,
/// committed to the journal before the fix runs, and each call's budget is restored from the
/// evidence, so no sequence of crashes and resumes runs more than the policy's
/// `max_total_fix_attempts` fixes. A closure that halts proposes what the agent left, refused
/// with the halt as its exact rejection; the settled closure (fixes used, how it ended, its
/// audit head and record digest) is journaled with the call's settlement. An agent error
/// keeps its type: an infrastructure failure fails the task, a cancellation stops the batch.
///
/// # Examples
///
/// ```
/// use std::collections::BTreeMap;
/// use kleene::batch::{Batch, BatchAgent, Candidate, ClosureWorker, MemoryJournal, Proposal,
///                     WorkerCall, WorkerFailure};
/// use kleene::{plan::AdmittedPath, Agent, AppBuildPlan, closure::ClosureRecord, closure::ExecutionOutput,
///              closure::GovernanceDecision, plan::Plan, closure::RecoveryPolicy, closure::step::Session, closure::Severity, Task,
///              closure::step::ValidationToken, id::ValidatorId, closure::ValidatorResult, closure::Verdict, id::ChannelId};
///
/// /// Its first build fails the tests; the fix passes them.
/// struct Flaky { files: BTreeMap<AdmittedPath, Vec<u8>> }
/// impl Agent for Flaky {
///     type Error = std::io::Error;
///     fn govern(&mut self, _: &Task, _: &Session, _: u32) -> std::io::Result<GovernanceDecision> {
///         Ok(GovernanceDecision::Approve)
///     }
///     fn pre_validate(&mut self, _: &Task, _: u32) -> std::io::Result<Verdict> { Ok(Verdict::clean()) }
///     fn execute(&mut self, task: &Task, _: &ValidationToken) -> std::io::Result<ExecutionOutput> {
///         let body = if task.depth() == 0 { "broken" } else { "fixed" };
///         self.files.insert(AdmittedPath::admit("config/app.toml").unwrap(), body.into());
///         Ok(ExecutionOutput::new(body))
///     }
///     fn post_validate(&mut self, task: &Task, _: &ExecutionOutput) -> std::io::Result<Verdict> {
///         Ok(if task.depth() == 0 {
///             Verdict::new([ValidatorResult::new(ValidatorId::new("tests").unwrap(),
///                                                Severity::Blocker, true, "1 failed")])
///         } else {
///             Verdict::clean()
///         })
///     }
/// }
/// impl BatchAgent for Flaky {
///     fn finish_call(&mut self, _: &WorkerCall<'_>, _: &ClosureRecord) -> Result<Proposal, WorkerFailure> {
///         Ok(Candidate::new(std::mem::take(&mut self.files)).into())
///     }
/// }
///
/// let plan = Plan::draft(AppBuildPlan::from_json(r#"{"tasks": [
///   {"id": "svc", "kind": {"lane": "config"}, "owner": "ServiceAgent",
///    "spec": {"intent": "settings"}, "owned_paths": ["config/app.toml"]}]}"#)?)
///     .normalize().consolidate()?.validate()?;
/// let mut worker = ClosureWorker::new(Flaky { files: BTreeMap::new() },
///                                     Session::new("build", "demo")?, RecoveryPolicy::default());
/// let outcome = Batch::new(&plan, ChannelId::new("chan-1")?)
///     .run(&mut worker, &(), &mut MemoryJournal::default())?;
/// assert!(outcome.evidence.summary().is_complete());
/// assert_eq!(outcome.evidence.fix_attempts_used(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ClosureWorker<A> {
    pub(super) agent: A,
    pub(super) session: Session,
    pub(super) policy: RecoveryPolicy,
    pub(super) no_fix: RecoveryPolicy,
}

impl<A> ClosureWorker<A> {
    /// A worker running `agent`'s closures in `session` under `policy`; the policy's
    /// `max_total_fix_attempts` bounds the fixes of the whole run.
    pub fn new(agent: A, session: Session, policy: RecoveryPolicy) -> Self {
        Self {
            agent,
            session,
            no_fix: without_fixes(&policy),
            policy,
        }
    }

    /// The agent.
    pub fn agent(&self) -> &A {
        &self.agent
    }

    /// The agent, to change between runs.
    pub fn agent_mut(&mut self) -> &mut A {
        &mut self.agent
    }

    /// The agent back.
    pub fn into_agent(self) -> A {
        self.agent
    }

    /// The recovery policy.
    pub fn policy(&self) -> &RecoveryPolicy {
        &self.policy
    }
}

impl<A: BatchAgent> Worker for ClosureWorker<A> {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        let task = call.task();
        self.agent.begin_call(call)?;
        let policy = if self.agent.fixes(task) {
            &self.policy
        } else {
            &self.no_fix
        };
        let max = policy.max_total_fix_attempts();
        // The run's budget is the evidence's: what earlier calls used, restored per call, and
        // shared by the calls a driver has in flight together.
        let budget = call.fix_budget(max);
        let root = Task::new(task.id.clone(), task.spec.clone());
        let mut guarded = Guarded {
            agent: &mut self.agent,
            call,
            drawn: None,
        };
        let mut closure =
            Closure::start_with_budget(root, self.session.clone(), policy.clone(), &budget);
        let mut forwarded = 0;
        let mut error = None;
        let record = loop {
            let entries = closure.audit().entries();
            for entry in entries.iter().skip(forwarded) {
                guarded.agent.audited(call, entry);
            }
            forwarded = entries.len();
            closure = match closure {
                Closure::Done(record) => break *record,
                due => {
                    let (next, failed) = due.step_keeping_error(&mut guarded);
                    if failed.is_some() {
                        error = failed;
                    }
                    next
                }
            };
        };
        // A call whose reservation never became durable did nothing (its agent waits for it)
        // and is made again by a resume: nothing of it may say it ended.
        let reserved =
            call.reservation()
                .wait_durable()
                .map_err(|err| WorkerFailure::Unavailable {
                    detail: format!("record the call in the journal: {}", Chain(&err)),
                });
        let agent_error = match reserved.and_then(|()| withdrawal(error)) {
            Ok(agent_error) => agent_error,
            Err(failure) => {
                self.agent.withdraw_call(call, &record, &failure);
                return Err(failure);
            }
        };
        let finished = self.agent.finish_call(call, &record);
        closure_proposal(&task.id, record, finished, agent_error)
    }

    fn waits_for_reservation(&self) -> bool {
        self.agent.waits_for_reservation()
    }
}

/// `policy` with recovery depth 0: the policy of a task whose failures are not fixed.
pub(crate) fn without_fixes(policy: &RecoveryPolicy) -> RecoveryPolicy {
    RecoveryPolicy::builder()
        .max_recovery_depth(0)
        .max_total_fix_attempts(policy.max_total_fix_attempts())
        .max_inner_iterations(policy.max_inner_iterations().get())
        .recover_on(policy.recover_on())
        .normalizer(policy.normalizer().clone())
        .build()
        // Every field comes from a valid policy and depth 0 accepts any fix budget, so
        // this cannot fail; were it to, no task would be fixed rather than every one.
        .unwrap_or_else(|_| never_fix())
}

/// How the closure stopped, if it stopped early: the failure that withdraws the call (a fix
/// that could not be prepared, or whose draw the journal refused), else the agent's own
/// error, if any.
pub(crate) fn withdrawal<E: AgentError>(
    error: Option<GuardError<E>>,
) -> Result<Option<E>, WorkerFailure> {
    match error {
        Some(GuardError::Ledger(err)) => Err(WorkerFailure::Unavailable {
            detail: format!("record a fix attempt in the journal: {err}"),
        }),
        Some(GuardError::Prepare(failure)) => Err(failure),
        Some(GuardError::Agent(err)) => Ok(Some(err)),
        None => Ok(None),
    }
}

/// What a call whose closure ended with `record` proposes: the agent's `finished` proposal,
/// refused with the halt when the closure halted, carrying the settled closure; an agent
/// error of kind infrastructure or cancelled fails the call instead.
pub(crate) fn closure_proposal<E: AgentError>(
    task: &TaskId,
    record: ClosureRecord,
    finished: Result<Proposal, WorkerFailure>,
    agent_error: Option<E>,
) -> Result<Proposal, WorkerFailure> {
    let agent_error = agent_error.map(AgentFailure::new);
    if let Some(failure) = &agent_error
        && failure.kind() != AgentErrorKind::Other
    {
        return Err(WorkerFailure::Agent(failure.clone()));
    }
    let mut proposal = finished?.closed_by_record(task, record);
    proposal.error = agent_error;
    Ok(proposal)
}

/// A policy that never spawns a fix.
fn never_fix() -> RecoveryPolicy {
    RecoveryPolicy::builder()
        .max_recovery_depth(0)
        .max_total_fix_attempts(0)
        .build()
        .unwrap_or_default()
}

/// The agent, with every fix subtask's first phase preceded by its preparation and then its
/// draw in the journal.
struct Guarded<'w, 'c, A> {
    agent: &'w mut A,
    call: &'w WorkerCall<'c>,
    /// The last fix drawn for, so each fix draws once however many iterations it runs.
    drawn: Option<TaskId>,
}

/// The agent's own error, its failure to prepare a fix, or the journal's refusal to record a
/// fix attempt.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GuardError<E: AgentError> {
    #[error(transparent)]
    Agent(E),
    #[error("failed to prepare the fix")]
    Prepare(#[source] WorkerFailure),
    #[error("failed to journal the fix attempt")]
    Ledger(#[source] JournalError),
}

impl<E: AgentError> AgentError for GuardError<E> {
    fn kind(&self) -> AgentErrorKind {
        match self {
            Self::Agent(e) => e.kind(),
            Self::Prepare(_) | Self::Ledger(_) => AgentErrorKind::Infrastructure,
        }
    }
}

impl<A: BatchAgent> Agent for Guarded<'_, '_, A> {
    type Error = GuardError<A::Error>;

    fn govern(
        &mut self,
        task: &Task,
        session: &Session,
        iteration: u32,
    ) -> Result<GovernanceDecision, Self::Error> {
        if task.depth() > 0 && self.drawn.as_ref() != Some(task.id()) {
            // Prepared first: what fails before the fix can run must not spend its attempt.
            self.agent
                .prepare_fix(self.call, task)
                .map_err(GuardError::Prepare)?;
            self.call.draw_fix(task.id()).map_err(GuardError::Ledger)?;
            self.drawn = Some(task.id().clone());
        }
        self.agent
            .govern(task, session, iteration)
            .map_err(GuardError::Agent)
    }

    fn pre_validate(&mut self, task: &Task, iteration: u32) -> Result<Verdict, Self::Error> {
        self.agent
            .pre_validate(task, iteration)
            .map_err(GuardError::Agent)
    }

    fn execute(
        &mut self,
        task: &Task,
        token: &ValidationToken,
    ) -> Result<ExecutionOutput, Self::Error> {
        self.agent.execute(task, token).map_err(GuardError::Agent)
    }

    fn post_validate(
        &mut self,
        task: &Task,
        output: &ExecutionOutput,
    ) -> Result<Verdict, Self::Error> {
        self.agent
            .post_validate(task, output)
            .map_err(GuardError::Agent)
    }

    fn move_next(&mut self, task: &Task, iteration: u32) -> Result<Next, Self::Error> {
        self.agent
            .move_next(task, iteration)
            .map_err(GuardError::Agent)
    }
}

/// The halt of a closure as rejection text: the reason and the failures that caused it
/// (with their justifications verbatim), or `None` when it resolved.
pub(crate) fn halt_text(record: &ClosureRecord) -> Option<String> {
    match record.outcome() {
        ClosureOutcome::Resolved { .. } => None,
        ClosureOutcome::Halted {
            task_ref, reason, ..
        } => {
            let mut text = format!("closure halted at {task_ref}: {}", describe_halt(reason));
            if let Some(verdict) = reason.verdict() {
                let failed: Vec<String> = verdict
                    .failures()
                    .map(|r| r.validator_id.to_string())
                    .collect();
                if !failed.is_empty() {
                    text.push_str(&format!("; failed check(s): {}", failed.join(", ")));
                }
                for r in verdict.failures() {
                    text.push_str(&format!(
                        "\n\n{} ({}{}):\n{}",
                        r.validator_id,
                        r.severity,
                        if r.overridable {
                            ""
                        } else {
                            ", not overridable"
                        },
                        r.justification
                    ));
                }
            }
            Some(text)
        }
        ClosureOutcome::Failed {
            task_ref, failure, ..
        } => Some(match failure {
            ClosureFailure::Agent { phase, message } => format!(
                "closure stopped at {task_ref}: {} failed: {message}",
                phase.as_str()
            ),
            ClosureFailure::FixId { depth, message } => format!(
                "closure stopped at {task_ref}: the fix at depth {depth} cannot be named: {message}"
            ),
        }),
    }
}

/// One line for a halt reason.
fn describe_halt(reason: &HaltReason) -> String {
    match reason {
        HaltReason::RecoveryExhausted { bound, .. } => match bound {
            ExhaustedBound::Depth { max } => format!("recovery_exhausted (depth {max} reached)"),
            ExhaustedBound::FixBudget { max } => {
                format!("recovery_exhausted (the run's {max} fix attempt(s) are used)")
            }
        },
        other => other.halt_type().to_owned(),
    }
}
