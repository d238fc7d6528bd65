//! The adapter that makes a batch agent of any agent whose execution output is its task's one
//! file, for the synchronous and the async closure workers alike.
//!
//! An agent that only answers a closure's phases ([`Agent`] or
//! [`AsyncAgent`](crate::closure::AsyncAgent)) says nothing about which files a call
//! proposes. [`OutputFile`] answers for it: the text of the call's last execution is the
//! content of the task's one owned path. [`Batch::run_agents`](super::Batch::run_agents) and
//! [`Batch::run_agents_async`](super::Batch::run_agents_async) wrap your agent in it, so most
//! programs never name it.

use std::collections::BTreeMap;

use super::candidate::Candidate;
use super::closure_worker::BatchAgent;
use super::worker::{InfrastructureFailure, Proposal, WorkerCall, WorkerFailure};
use crate::closure::{Agent, ClosureRecord};
use crate::plan::PlannedTask;
use crate::{
    closure::step::ExecutionOutput, closure::step::GovernanceDecision, closure::step::Next,
    closure::step::Session, closure::step::ValidationToken, closure::task::Task,
    closure::verdict::Verdict,
};

/// An agent whose last execution output is its task's file: the one trait to implement for
/// an agent that writes nothing but that text (no shell, no workspace).
///
/// Wrap an [`Agent`] for a [`ClosureWorker`](super::ClosureWorker), or an
/// [`AsyncAgent`](crate::closure::AsyncAgent) for an `ClosureWorker` (feature `async`):
/// it answers every phase with your agent, keeps the output of the call's last `execute` (a
/// fix's output replaces the one it fixes), and proposes that text as the content of the
/// task's one owned path. A call whose closure never executed proposes no file (a halted
/// closure's refusal still comes with it). An agent that writes several files, or prepares
/// workspaces, implements [`BatchAgent`] (or `AsyncBatchAgent`) itself instead.
///
/// A call of a task that owns no path or several fails with
/// [`InfrastructureFailure::Agent`] naming the task: which file gets the text is not this
/// adapter's guess to make. That task fails (never repaired); the others go on.
///
/// # Examples
///
/// ```
/// use kleene::batch::{Batch, ClosureWorker, MemoryJournal, OutputFile};
/// use kleene::closure::{RecoveryPolicy, step::Session};
/// use kleene::{Agent, AppBuildPlan, ExecutionOutput, Task, ValidationToken};
///
/// /// Writes its task's intent.
/// struct Echo;
/// impl Agent for Echo {
///     type Error = std::io::Error;
///     fn execute(&mut self, task: &Task, _: &ValidationToken) -> std::io::Result<ExecutionOutput> {
///         Ok(ExecutionOutput::new(task.spec().intent.clone()))
///     }
///     fn post_validate(&mut self, _: &Task, _: &ExecutionOutput) -> std::io::Result<kleene::Verdict> {
///         Ok(kleene::Verdict::clean())
///     }
/// }
///
/// let plan = AppBuildPlan::from_json(r#"{"tasks": [{"id": "svc", "owner": "Echo",
///   "spec": {"intent": "port = 80"}, "owned_paths": ["app.toml"]}]}"#)?.validate()?;
/// // What `Batch::run_agents` does for you, with a session and policy of your own.
/// let mut worker = ClosureWorker::new(OutputFile::new(Echo), Session::new("build", "demo")?,
///                                     RecoveryPolicy::default());
/// let batch = Batch::new(&plan, "chan-1".parse()?);
/// let outcome = batch.run(&mut worker, &(), &mut MemoryJournal::default())?;
/// assert!(outcome.evidence.summary().is_complete());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct OutputFile<A> {
    agent: A,
    /// The current call's last execution output: a call is one closure, run by one slot's
    /// agent at a time, so this is never shared between calls.
    last: Option<ExecutionOutput>,
}

impl<A> OutputFile<A> {
    /// Wraps `agent`.
    pub fn new(agent: A) -> Self {
        Self { agent, last: None }
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

    /// Forgets what an earlier call (withdrawn before it finished) executed: it is not the
    /// next call's.
    pub(super) fn begin(&mut self) {
        self.last = None;
    }

    pub(super) fn keep(&mut self, output: &ExecutionOutput) {
        self.last = Some(output.clone());
    }

    /// What the call of `task` proposes: the last execution's text as its one file.
    pub(super) fn proposal(
        &mut self,
        task: &PlannedTask,
        batch_agent: &str,
    ) -> Result<Proposal, WorkerFailure> {
        match (task.owned_paths.as_slice(), self.last.take()) {
            (_, None) => Ok(Candidate::default().into()),
            ([path], Some(output)) => {
                let files = BTreeMap::from([(path.clone(), output.text.into_bytes())]);
                Ok(Candidate::new(files).into())
            }
            (paths, Some(_)) => Err(WorkerFailure::Infrastructure(
                InfrastructureFailure::Agent {
                    detail: format!(
                        "OutputFile writes a task's one owned path, and task {} owns {}: \
                         implement {batch_agent}::finish_call to say which file gets what",
                        task.id,
                        paths.len()
                    ),
                },
            )),
        }
    }
}

impl<A: Agent> Agent for OutputFile<A> {
    type Error = A::Error;

    fn govern(
        &mut self,
        task: &Task,
        session: &Session,
        iteration: u32,
    ) -> Result<GovernanceDecision, Self::Error> {
        self.agent.govern(task, session, iteration)
    }

    fn pre_validate(&mut self, task: &Task, iteration: u32) -> Result<Verdict, Self::Error> {
        self.agent.pre_validate(task, iteration)
    }

    fn execute(
        &mut self,
        task: &Task,
        token: &ValidationToken,
    ) -> Result<ExecutionOutput, Self::Error> {
        let output = self.agent.execute(task, token)?;
        self.keep(&output);
        Ok(output)
    }

    fn post_validate(
        &mut self,
        task: &Task,
        output: &ExecutionOutput,
    ) -> Result<Verdict, Self::Error> {
        self.agent.post_validate(task, output)
    }

    fn move_next(&mut self, task: &Task, iteration: u32) -> Result<Next, Self::Error> {
        self.agent.move_next(task, iteration)
    }
}

impl<A: Agent> BatchAgent for OutputFile<A> {
    fn begin_call(&mut self, _call: &WorkerCall<'_>) -> Result<(), WorkerFailure> {
        self.begin();
        Ok(())
    }

    fn finish_call(
        &mut self,
        call: &WorkerCall<'_>,
        _record: &ClosureRecord,
    ) -> Result<Proposal, WorkerFailure> {
        self.proposal(call.task(), "BatchAgent")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{Batch, ClosureWorker, MemoryJournal, TaskStatus};
    use crate::closure::RecoveryPolicy;
    use crate::plan::AppBuildPlan;

    struct Echo;
    impl Agent for Echo {
        type Error = std::convert::Infallible;
        fn execute(
            &mut self,
            t: &Task,
            _: &ValidationToken,
        ) -> Result<ExecutionOutput, Self::Error> {
            Ok(ExecutionOutput::new(t.spec().intent.clone()))
        }
        fn post_validate(&mut self, _: &Task, _: &ExecutionOutput) -> Result<Verdict, Self::Error> {
            Ok(Verdict::clean())
        }
    }

    #[test]
    fn a_task_owning_two_paths_fails_and_names_itself() -> Result<(), Box<dyn std::error::Error>> {
        let plan = AppBuildPlan::from_json(
            r#"{"tasks": [
              {"id": "two", "owner": "E", "spec": {"intent": "x"}, "owned_paths": ["a", "b"]},
              {"id": "one", "owner": "E", "spec": {"intent": "y"}, "owned_paths": ["c"]}]}"#,
        )?
        .validate()?;
        let session = Session::new("build", "t")?;
        let mut worker =
            ClosureWorker::new(OutputFile::new(Echo), session, RecoveryPolicy::default());
        let outcome =
            Batch::new(&plan, "c".parse()?).run(&mut worker, &(), &mut MemoryJournal::default())?;
        let evidence = outcome.evidence;
        assert_eq!(evidence.status(&"two".parse()?), Some(TaskStatus::Failed));
        assert_eq!(evidence.status(&"one".parse()?), Some(TaskStatus::Accepted));
        let printed = format!("{evidence:?}");
        assert!(printed.contains("task two owns 2"), "{printed}");
        Ok(())
    }
}
