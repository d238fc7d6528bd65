//! The async side of [`ClosureWorker`]: over an [`AsyncBatchAgent`] it is an
//! [`AsyncWorker`] for the async driver, over the same sans-IO closure machine (feature
//! `async`).
//!
//! A [`ClosureWorker`] turns each [`AsyncWorkerCall`] into a closure of the call's task run
//! by your [`AsyncBatchAgent`], exactly as it does each `WorkerCall` with a
//! [`BatchAgent`](super::BatchAgent): every fix subtask first draws one attempt from the
//! run's budget and awaits the journal's commit of that draw before the fix runs; a closure
//! that halts proposes what the agent left, refused with the halt; the settled closure is
//! journaled with the call's settlement. The same answers give the same evidence as
//! [`ClosureWorker`] under [`Batch::run`](super::Batch::run).
//!
//! An agent that only answers the phases, and whose last execution output is its task's one
//! file, needs no [`AsyncBatchAgent`] of its own: wrap it in
//! [`OutputFile`](super::OutputFile), or let
//! [`Batch::run_agents_async`](super::Batch::run_agents_async) do it.
//!
//! The example is on the [`AsyncWorker`] impl of [`ClosureWorker`];
//! `examples/tokio_minimal.rs` is a whole tokio program in 30 lines.
//!
//! [`ClosureWorker`]: super::ClosureWorker

use std::future::Future;

use super::asynchronous::{AsyncWorker, AsyncWorkerCall};
use super::closure_worker::{ClosureWorker, GuardError, closure_proposal, withdrawal};
use super::error::BatchError;
use super::executor::{Batch, RunOutcome};
use super::journal::EvidenceJournal;
use super::output_file::OutputFile;
use super::worker::{Proposal, WorkerFailure};
use crate::closure::{AsyncAgent, Closure, ClosureRecord};
use crate::plan::PlannedTask;
use crate::{
    closure::audit::AuditEntry, closure::step::ExecutionOutput, closure::step::GovernanceDecision,
    closure::step::Next, closure::step::Session, closure::step::ValidationToken,
    closure::task::Task, closure::verdict::Verdict, id::TaskId,
};

/// An [`AsyncAgent`] that a [`ClosureWorker`] can run async batch calls with: the async
/// counterpart of [`BatchAgent`](super::BatchAgent).
pub trait AsyncBatchAgent: AsyncAgent {
    /// Prepares for `call` before its closure starts (a workspace for it, the correction to
    /// make). Defaults to nothing.
    ///
    /// # Errors
    ///
    /// [`WorkerFailure`] when the call cannot be made (the closure does not start).
    fn begin_call(
        &mut self,
        call: &AsyncWorkerCall<'_>,
    ) -> impl Future<Output = Result<(), WorkerFailure>> + Send {
        let _ = call;
        std::future::ready(Ok(()))
    }

    /// Whether a failure of `task` may be fixed by fix subtasks; when false its closure runs
    /// with recovery depth 0. Defaults to true.
    fn fixes(&self, task: &PlannedTask) -> bool {
        let _ = task;
        true
    }

    /// Prepares the fix subtask `fix` of `call` before its attempt is drawn from the run's
    /// budget, as [`BatchAgent::prepare_fix`](super::BatchAgent::prepare_fix): a failure
    /// here withdraws the call without spending the attempt. Defaults to nothing.
    ///
    /// # Errors
    ///
    /// [`WorkerFailure`] when the fix cannot be prepared.
    fn prepare_fix(
        &mut self,
        call: &AsyncWorkerCall<'_>,
        fix: &Task,
    ) -> impl Future<Output = Result<(), WorkerFailure>> + Send {
        let _ = (call, fix);
        std::future::ready(Ok(()))
    }

    /// Sees every audit entry of the call's closure as it is appended (for live progress).
    fn audited(&mut self, call: &AsyncWorkerCall<'_>, entry: &AuditEntry) {
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
        call: &AsyncWorkerCall<'_>,
        record: &ClosureRecord,
    ) -> impl Future<Output = Result<Proposal, WorkerFailure>> + Send;

    /// Told, instead of [`finish_call`](Self::finish_call), that `call` is withdrawn, as
    /// [`BatchAgent::withdraw_call`](super::BatchAgent::withdraw_call): keep nothing of
    /// `record` that says the call ended, since a resume makes it again under the same
    /// number. Defaults to `finish_call`, its proposal dropped.
    fn withdraw_call(
        &mut self,
        call: &AsyncWorkerCall<'_>,
        record: &ClosureRecord,
        failure: &WorkerFailure,
    ) -> impl Future<Output = ()> + Send
    where
        Self: Send,
    {
        let _ = failure;
        async move {
            let _ = self.finish_call(call, record).await;
        }
    }
}

impl Batch<'_> {
    /// [`run_agents`](Batch::run_agents) for an [`AsyncAgent`]: every task of the plan runs
    /// to its closure, up to `jobs` calls at once as futures under any executor, and the
    /// text of a call's last execution is its task's one file.
    ///
    /// `jobs` of 0 is taken as 1. Dropping the future keeps every reservation in the
    /// journal for a resume. For a session, policy or agent of your own, run a
    /// [`ClosureWorker`] with [`run_async`](Batch::run_async).
    ///
    /// # Errors
    ///
    /// As [`run_async`](Batch::run_async).
    ///
    /// # Examples
    ///
    /// `examples/tokio_minimal.rs` is a whole tokio program; with a single-threaded executor:
    ///
    /// ```
    /// use kleene::{AppBuildPlan, AsyncAgent, Batch, ExecutionOutput, Task, ValidationToken, Verdict};
    ///
    /// struct Model;
    /// impl AsyncAgent for Model {
    ///     type Error = kleene::Error;
    ///     async fn execute(&mut self, t: &Task, _: &ValidationToken) -> Result<ExecutionOutput, kleene::Error> {
    ///         Ok(ExecutionOutput::new(t.spec().intent.clone()))
    ///     }
    ///     async fn post_validate(&mut self, _: &Task, _: &ExecutionOutput) -> Result<Verdict, kleene::Error> {
    ///         Ok(Verdict::clean())
    ///     }
    /// }
    ///
    /// let plan = AppBuildPlan::from_json(r#"{"tasks": [{"id": "a", "owner": "M",
    ///   "spec": {"intent": "x"}, "owned_paths": ["a.txt"]}]}"#)?.validate()?;
    /// let batch = Batch::new(&plan, "main".parse()?);
    /// let mut journal = kleene::batch::MemoryJournal::default();
    /// let outcome = futures_executor::block_on(batch.run_agents_async(2, |_| Model, &mut journal))?;
    /// assert!(batch.accept(&outcome.evidence).is_ok());
    /// # Ok::<(), kleene::Error>(())
    /// ```
    pub async fn run_agents_async<A: AsyncAgent + Send>(
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
        self.run_async(jobs, make, &(), journal).await
    }
}

// The async half of the adapter; its sync half and its docs are in `output_file`.
impl<A: AsyncAgent + Send> AsyncAgent for OutputFile<A> {
    type Error = A::Error;

    fn govern(
        &mut self,
        task: &Task,
        session: &Session,
        iteration: u32,
    ) -> impl Future<Output = Result<GovernanceDecision, Self::Error>> + Send {
        self.agent_mut().govern(task, session, iteration)
    }

    fn pre_validate(
        &mut self,
        task: &Task,
        iteration: u32,
    ) -> impl Future<Output = Result<Verdict, Self::Error>> + Send {
        self.agent_mut().pre_validate(task, iteration)
    }

    async fn execute(
        &mut self,
        task: &Task,
        token: &ValidationToken,
    ) -> Result<ExecutionOutput, Self::Error> {
        let output = self.agent_mut().execute(task, token).await?;
        self.keep(&output);
        Ok(output)
    }

    fn post_validate(
        &mut self,
        task: &Task,
        output: &ExecutionOutput,
    ) -> impl Future<Output = Result<Verdict, Self::Error>> + Send {
        self.agent_mut().post_validate(task, output)
    }

    fn move_next(
        &mut self,
        task: &Task,
        iteration: u32,
    ) -> impl Future<Output = Result<Next, Self::Error>> + Send {
        self.agent_mut().move_next(task, iteration)
    }
}

impl<A: AsyncAgent + Send> AsyncBatchAgent for OutputFile<A> {
    fn begin_call(
        &mut self,
        _call: &AsyncWorkerCall<'_>,
    ) -> impl Future<Output = Result<(), WorkerFailure>> + Send {
        self.begin();
        std::future::ready(Ok(()))
    }

    fn finish_call(
        &mut self,
        call: &AsyncWorkerCall<'_>,
        _record: &ClosureRecord,
    ) -> impl Future<Output = Result<Proposal, WorkerFailure>> + Send {
        std::future::ready(self.proposal(call.task(), "AsyncBatchAgent"))
    }
}

/// A [`ClosureWorker`] over an [`AsyncBatchAgent`] is an [`AsyncWorker`]: every call is one
/// closure of the call's task, under one recovery policy and one run-wide fix budget, with
/// the same evidence for the same answers as the synchronous worker.
///
/// # Examples
///
/// ```
/// use std::collections::BTreeMap;
/// use std::num::NonZeroUsize;
/// use kleene::batch::{AsyncBatchAgent, ClosureWorker, AsyncWorkerCall, Batch, Candidate,
///                     MemoryJournal, Proposal, WorkerFailure};
/// use kleene::closure::{AsyncAgent, ClosureRecord, ExecutionOutput, GovernanceDecision,
///                       RecoveryPolicy, step::Session, Severity, step::ValidationToken, ValidatorResult,
///                       Verdict};
/// use kleene::{plan::AdmittedPath, AppBuildPlan, Task, id::ChannelId, id::ValidatorId, plan::Plan};
///
/// /// Its first build fails the tests; the fix passes them.
/// struct Flaky { files: BTreeMap<AdmittedPath, Vec<u8>> }
/// impl AsyncAgent for Flaky {
///     type Error = std::io::Error;
///     async fn govern(&mut self, _: &Task, _: &Session, _: u32) -> std::io::Result<GovernanceDecision> {
///         Ok(GovernanceDecision::Approve)
///     }
///     async fn pre_validate(&mut self, _: &Task, _: u32) -> std::io::Result<Verdict> { Ok(Verdict::clean()) }
///     async fn execute(&mut self, task: &Task, _: &ValidationToken) -> std::io::Result<ExecutionOutput> {
///         let body = if task.depth() == 0 { "broken" } else { "fixed" };
///         self.files.insert(AdmittedPath::admit("config/app.toml").unwrap(), body.into());
///         Ok(ExecutionOutput::new(body))
///     }
///     async fn post_validate(&mut self, task: &Task, _: &ExecutionOutput) -> std::io::Result<Verdict> {
///         Ok(if task.depth() == 0 {
///             Verdict::new([ValidatorResult::new(ValidatorId::new("tests").unwrap(),
///                                                Severity::Blocker, true, "1 failed")])
///         } else {
///             Verdict::clean()
///         })
///     }
/// }
/// impl AsyncBatchAgent for Flaky {
///     async fn finish_call(&mut self, _: &AsyncWorkerCall<'_>, _: &ClosureRecord)
///         -> Result<Proposal, WorkerFailure> {
///         Ok(Candidate::new(std::mem::take(&mut self.files)).into())
///     }
/// }
///
/// let plan = Plan::draft(AppBuildPlan::from_json(r#"{"tasks": [
///   {"id": "svc", "kind": {"lane": "config"}, "owner": "ServiceAgent",
///    "spec": {"intent": "settings"}, "owned_paths": ["config/app.toml"]}]}"#)?)
///     .normalize().consolidate()?.validate()?;
/// let session = Session::new("build", "demo")?;
/// let (batch, mut journal) = (Batch::new(&plan, ChannelId::new("chan-1")?), MemoryJournal::default());
/// let run = batch.run_async(
///     NonZeroUsize::MIN,
///     |_slot| ClosureWorker::new(Flaky { files: BTreeMap::new() }, session.clone(),
///                                RecoveryPolicy::default()),
///     &(),
///     &mut journal,
/// );
/// let outcome = futures_executor::block_on(run)?;
/// assert!(outcome.evidence.summary().is_complete());
/// assert_eq!(outcome.evidence.fix_attempts_used(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
impl<A: AsyncBatchAgent + Send> AsyncWorker for ClosureWorker<A> {
    async fn call(&mut self, call: &AsyncWorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        let task = call.task();
        self.agent.begin_call(call).await?;
        let policy = if self.agent.fixes(task) {
            &self.policy
        } else {
            &self.no_fix
        };
        // The run's budget is the evidence's, shared by the calls in flight together.
        let budget = call.fix_budget(policy.max_total_fix_attempts());
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
                    let (next, failed) = due.step_async_keeping_error(&mut guarded).await;
                    if failed.is_some() {
                        error = failed;
                    }
                    next
                }
            };
        };
        let agent_error = match withdrawal(error) {
            Ok(agent_error) => agent_error,
            Err(failure) => {
                self.agent.withdraw_call(call, &record, &failure).await;
                return Err(failure);
            }
        };
        let finished = self.agent.finish_call(call, &record).await;
        closure_proposal(&task.id, record, finished, agent_error)
    }
}

/// The agent, with every fix subtask's first phase preceded by its preparation and then its
/// durable draw.
struct Guarded<'w, 'c, A> {
    agent: &'w mut A,
    call: &'w AsyncWorkerCall<'c>,
    /// The last fix drawn for, so each fix draws once however many iterations it runs.
    drawn: Option<TaskId>,
}

impl<A: AsyncBatchAgent + Send> AsyncAgent for Guarded<'_, '_, A> {
    type Error = GuardError<A::Error>;

    async fn govern(
        &mut self,
        task: &Task,
        session: &Session,
        iteration: u32,
    ) -> Result<GovernanceDecision, Self::Error> {
        if task.depth() > 0 && self.drawn.as_ref() != Some(task.id()) {
            // Prepared first: what fails before the fix can run must not spend its attempt.
            self.agent
                .prepare_fix(self.call, task)
                .await
                .map_err(GuardError::Prepare)?;
            self.call
                .draw_fix(task.id())
                .await
                .map_err(GuardError::Ledger)?;
            self.drawn = Some(task.id().clone());
        }
        self.agent
            .govern(task, session, iteration)
            .await
            .map_err(GuardError::Agent)
    }

    async fn pre_validate(&mut self, task: &Task, iteration: u32) -> Result<Verdict, Self::Error> {
        self.agent
            .pre_validate(task, iteration)
            .await
            .map_err(GuardError::Agent)
    }

    async fn execute(
        &mut self,
        task: &Task,
        token: &ValidationToken,
    ) -> Result<ExecutionOutput, Self::Error> {
        self.agent
            .execute(task, token)
            .await
            .map_err(GuardError::Agent)
    }

    async fn post_validate(
        &mut self,
        task: &Task,
        output: &ExecutionOutput,
    ) -> Result<Verdict, Self::Error> {
        self.agent
            .post_validate(task, output)
            .await
            .map_err(GuardError::Agent)
    }

    async fn move_next(&mut self, task: &Task, iteration: u32) -> Result<Next, Self::Error> {
        self.agent
            .move_next(task, iteration)
            .await
            .map_err(GuardError::Agent)
    }
}
