//! Each task call as one closure of its task, as under `kleene run`: `run`, then every check;
//! a failing blocker check spawns a fix subtask whose `fix` command gets the recovery spec on
//! stdin and in `$KLEENE_RECOVERY_SPEC_FILE`, within the run's fix budget.
//!
//! ```no_run
//! use kleene::batch::{Batch, ClosureWorker, MemoryJournal};
//! use kleene::id::ChannelId;
//! use kleene_restate::closure::{ShellAgent, policy, session};
//! use kleene_restate::plan::ShellPlan;
//! use kleene_restate::shell::Runner;
//!
//! let plan = ShellPlan::load(&std::fs::read_to_string("plan.json")?)?;
//! let runner = Runner::open(std::path::Path::new("/tmp/kleene-local"))?;
//! let channel = ChannelId::new("run-1")?;
//! let agent = ShellAgent::new(&plan, &runner, None);
//! let mut worker = ClosureWorker::new(agent, session(&channel)?, policy());
//! let outcome = Batch::new(plan.plan(), channel).run(&mut worker, &(), &mut MemoryJournal::default())?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Locally, the library's [`ClosureWorker`](kleene::batch::ClosureWorker) runs a
//! [`ShellAgent`]. A remote worker has no `WorkerCall` (kleene builds those only inside its
//! own drivers), so [`run_call`] makes the same closure from a [`Dispatch`] with the same
//! agent, budget and settlement, and draws each fix through a caller's function that makes
//! the draw durable before the fix runs.

use std::path::PathBuf;

use kleene::batch::{
    AgentFailure, BatchAgent, Candidate, Dispatch, Proposal, Rejection, WorkerCall, WorkerFailure,
};
use kleene::closure::{
    Agent, AgentError, AgentErrorKind, Closure, ClosureRecord, ExecutionOutput, FixBudget,
    GovernanceDecision, Next, RecoveryPolicy, Session, Severity, Spec, Task, ValidationToken,
    ValidatorResult, Verdict,
};
use kleene::error::Chain;
use kleene::id::{ChannelId, IdError, TaskId, ValidatorId};
use kleene::plan::{AdmittedPath, PlannedTask};
use kleene::process::{self, Finished, Interrupt, Invocation, RunError};
use kleene::stage::{Stage, StageInput};

use crate::call::StoredClosure;
use crate::plan::{DEFAULT_TIMEOUT, ShellCommand, ShellPlan};
use crate::shell::{Runner, Scratch};

/// The most bytes one call may write outside its scratch. Its candidate travels as the call's
/// result, in JSON that spends up to four characters a byte, and Restate refuses a message
/// past 32 MiB by default (retrying it until the call fails, with no word of why): a call
/// that writes more is refused naming the file, which is never read.
pub const MAX_CALL_OUTPUT_BYTES: u64 = 4 * 1024 * 1024;

/// The withdrawal detail for a stage whose file system has only `free` bytes left.
fn full_disk(stage: &Stage, free: u64) -> String {
    format!(
        "the file system holding {} has only {free} bytes free; free some space",
        stage.root().display()
    )
}

/// The recovery depth `kleene run` allows by default.
pub const MAX_DEPTH: u32 = 3;
/// The run-wide fix attempts `kleene run` allows by default.
pub const MAX_FIXES: u32 = 10;

/// The recovery policy of `kleene run`'s defaults (depth 3, 10 fixes, blockers only).
pub fn policy() -> RecoveryPolicy {
    RecoveryPolicy::builder()
        .max_recovery_depth(MAX_DEPTH)
        .max_total_fix_attempts(MAX_FIXES)
        .build()
        .unwrap_or_default()
}

/// The closure session of a run on `channel`, as `kleene run` opens it.
///
/// # Errors
///
/// [`IdError`] when the channel is not a project name.
pub fn session(channel: &ChannelId) -> Result<Session, IdError> {
    Session::new("kleene-run", channel.to_string())
}

/// Why a command stopped a closure, classified as `kleene run` classifies it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Stopped {
    /// The command could not run to an exit status (missing, timed out, interrupted).
    #[error("the {role} command did not finish")]
    Run {
        /// `run`, `fix` or `check ID`.
        role: String,
        /// What the runner reported.
        #[source]
        source: Box<RunError>,
    },
    /// Anything else (a fix with no fix command, a spec file that could not be written).
    #[error("{0}")]
    Other(String),
}

impl AgentError for Stopped {
    fn kind(&self) -> AgentErrorKind {
        match self {
            Self::Run { source, .. } if source.is_interrupted() => AgentErrorKind::Cancelled,
            Self::Run { .. } => AgentErrorKind::Infrastructure,
            Self::Other(_) => AgentErrorKind::Other,
        }
    }
}

/// The call under way.
#[derive(Debug)]
struct CallState {
    task: TaskId,
    call: u32,
    stage: Stage,
    command: ShellCommand,
    correction: Option<String>,
    /// A non-zero exit of `run`/`fix`, judged with the checks.
    exec_failure: Option<ValidatorResult>,
    own_io: Option<String>,
    /// The fix subtask whose recovery spec was written before its attempt was drawn, and
    /// where.
    prepared_fix: Option<(TaskId, PathBuf)>,
}

/// The agent of a shell plan's calls: runs a call's commands in its stage and proposes what
/// the stage holds after.
#[derive(Debug)]
pub struct ShellAgent<'p> {
    plan: &'p ShellPlan,
    runner: &'p Runner,
    plan_dir: Option<String>,
    current: Option<CallState>,
    /// The record of every call the library's closure worker finished (a local run):
    /// what acceptance checks the evidence's audit trails against.
    records: Vec<StoredClosure>,
}

impl<'p> ShellAgent<'p> {
    /// An agent for `plan`'s calls, staging them with `runner`.
    pub fn new(plan: &'p ShellPlan, runner: &'p Runner, plan_dir: Option<String>) -> Self {
        Self {
            plan,
            runner,
            plan_dir,
            current: None,
            records: Vec::new(),
        }
    }

    /// The closure record of every call the library's closure worker finished with this
    /// agent (a local run), in the order they finished; withdrawn calls keep none, as their
    /// number is made again. [`run_call`] returns its record instead.
    pub fn records(&self) -> &[StoredClosure] {
        &self.records
    }

    /// Prepares call `call` of `task` in a fresh stage holding `inputs`.
    fn begin(
        &mut self,
        task: &PlannedTask,
        call: u32,
        correction: Option<String>,
        inputs: &[(AdmittedPath, Vec<u8>)],
    ) -> Result<(), WorkerFailure> {
        let command = self
            .plan
            .command(&task.id)
            .cloned()
            .unwrap_or_else(|| ShellCommand {
                run: None,
                timeout: DEFAULT_TIMEOUT,
                scratch: Vec::new(),
                checks: Vec::new(),
                fix: None,
            });
        let root = self.runner.stage_root(&format!("{}-{call}", task.id));
        let stage = Stage::prepare(
            &root,
            self.runner.store(),
            inputs.iter().map(|(p, b)| StageInput::new(p, b)),
        )
        .map_err(|e| WorkerFailure::Unavailable {
            detail: format!("stage the call: {}", Chain(&e)),
        })?;
        self.current = Some(CallState {
            task: task.id.clone(),
            call,
            stage,
            command,
            correction,
            exec_failure: None,
            own_io: None,
            prepared_fix: None,
        });
        Ok(())
    }

    /// Writes the recovery spec of the fix subtask `fix` before its attempt is drawn, so a
    /// disk too full for it withdraws the call without spending the attempt.
    fn prepare(&mut self, fix: &Task) -> Result<(), Stopped> {
        // A failure on a disk this full most likely came from it, and no fix can mend that:
        // the call is withdrawn before the attempt is spent.
        let state = self.state()?;
        if let Some(free) = state.stage.nearly_full() {
            let detail = full_disk(&state.stage, free);
            state.own_io = Some(detail.clone());
            return Err(Stopped::Other(detail));
        }
        let path = self.spec_file(fix, &spec_text(fix.spec()))?;
        self.state()?.prepared_fix = Some((fix.id().clone(), path));
        Ok(())
    }

    /// What the call proposes once its closure ended with `record`.
    fn finish(
        &mut self,
        task: &PlannedTask,
        record: &ClosureRecord,
    ) -> Result<Proposal, WorkerFailure> {
        let Some(state) = self.current.take() else {
            return Err(WorkerFailure::Unavailable {
                detail: format!("finish the call of task {}: it never started", task.id),
            });
        };
        // A call that failed on a nearly full disk most likely failed because of it: the
        // host failed, not the task, so the call is withdrawn.
        let full = (!record.outcome().is_resolved())
            .then(|| state.stage.nearly_full())
            .flatten()
            .map(|free| full_disk(&state.stage, free));
        let changes = state
            .stage
            .changes_within(&Scratch::new(&state.command.scratch), MAX_CALL_OUTPUT_BYTES);
        // A stage left behind costs disk, never correctness: the next call gets a new one.
        let _ = state.stage.discard();
        if let Some(detail) = state.own_io.or(full) {
            return Err(WorkerFailure::Unavailable { detail });
        }
        let changes = changes.map_err(|e| WorkerFailure::Unavailable {
            detail: format!("read the call's stage: {}", Chain(&e)),
        })?;
        let refusal = changes.refusal_summary();
        let candidate = Candidate::new(changes.into_written());
        let missing: Vec<&str> = task
            .unwritten_owned_paths(candidate.files())
            .into_iter()
            .map(AdmittedPath::as_str)
            .collect();
        let refusal = refusal.or_else(|| {
            (record.outcome().is_resolved() && !missing.is_empty())
                .then(|| format!("owned paths not written: {}", missing.join(", ")))
        });
        Ok(match refusal {
            Some(text) => Proposal::refused(candidate, Rejection::contract(&task.id, text)),
            None => Proposal::new(candidate),
        })
    }

    fn state(&mut self) -> Result<&mut CallState, Stopped> {
        self.current
            .as_mut()
            .ok_or_else(|| Stopped::Other("no call is under way".to_owned()))
    }

    fn run(
        &mut self,
        task: &Task,
        role: &str,
        command: &str,
        stdin: Option<(&str, PathBuf)>,
    ) -> Result<Finished, Stopped> {
        let plan_dir = self.plan_dir.clone();
        let state = self.state()?;
        let dir = state.stage.root().to_owned();
        let mut env = vec![
            ("KLEENE_WORKSPACE", dir.display().to_string()),
            ("KLEENE_TASK", state.task.to_string()),
            ("KLEENE_SUBTASK", task.id().to_string()),
            ("KLEENE_DEPTH", task.depth().to_string()),
            ("KLEENE_CALL", state.call.to_string()),
        ];
        if let Some(p) = plan_dir {
            env.push(("KLEENE_PLAN_DIR", p));
        }
        if let Some((_, path)) = &stdin {
            env.push(("KLEENE_RECOVERY_SPEC_FILE", path.display().to_string()));
        }
        let inv = Invocation {
            timeout: state.command.timeout,
            stdin: stdin.as_ref().map(|(text, _)| text.as_bytes()),
            env,
            ..Invocation::new(command, &dir)
        };
        process::run(&inv, &Interrupt::default()).map_err(|source| Stopped::Run {
            role: role.to_owned(),
            source: Box::new(source),
        })
    }

    /// Writes a fix's recovery spec beside the stages (never inside one: it is no output).
    fn spec_file(&mut self, task: &Task, text: &str) -> Result<PathBuf, Stopped> {
        let runner = self.runner;
        let state = self.state()?;
        let path = runner.spec_path(&format!("{}.call{}", task.id(), state.call));
        if let Err(e) = std::fs::write(&path, text) {
            let message = format!("write the recovery spec {}: {e}", path.display());
            state.own_io = Some(format!("kleene could not write its own files: {message}"));
            return Err(Stopped::Other(message));
        }
        Ok(path)
    }
}

impl BatchAgent for ShellAgent<'_> {
    fn begin_call(&mut self, call: &WorkerCall<'_>) -> Result<(), WorkerFailure> {
        let inputs: Vec<(AdmittedPath, Vec<u8>)> = call
            .inputs()
            .into_iter()
            .flat_map(|(_, out)| out.files().iter().map(|(p, b)| (p.clone(), b.clone())))
            .collect();
        let task = call.task();
        let correction = call
            .correction()
            .map(|c| correction_text(task, c.rejection(), c.candidate()));
        self.begin(task, call.attempt(), correction, &inputs)
    }

    fn fixes(&self, task: &PlannedTask) -> bool {
        self.plan.command(&task.id).is_some_and(|c| c.fix.is_some())
    }

    fn prepare_fix(&mut self, _call: &WorkerCall<'_>, fix: &Task) -> Result<(), WorkerFailure> {
        self.prepare(fix).map_err(|e| WorkerFailure::Unavailable {
            detail: self
                .current
                .as_ref()
                .and_then(|state| state.own_io.clone())
                .unwrap_or_else(|| e.to_string()),
        })
    }

    fn finish_call(
        &mut self,
        call: &WorkerCall<'_>,
        record: &ClosureRecord,
    ) -> Result<Proposal, WorkerFailure> {
        // Kept whatever the call proposes: a record of a call that does not settle a
        // closure is ignored by acceptance, a missing one would refuse it.
        self.records.push(StoredClosure::of(
            call.task().id.clone(),
            call.attempt(),
            record,
        ));
        self.finish(call.task(), record)
    }

    fn withdraw_call(
        &mut self,
        call: &WorkerCall<'_>,
        record: &ClosureRecord,
        _failure: &WorkerFailure,
    ) {
        // Cleans up the stage; the record is not kept: the call made again under the same
        // number ends with its own.
        let _ = self.finish(call.task(), record);
    }
}

impl Agent for ShellAgent<'_> {
    type Error = Stopped;

    fn govern(
        &mut self,
        _task: &Task,
        _session: &Session,
        _iteration: u32,
    ) -> Result<GovernanceDecision, Stopped> {
        // The plan file is the approved plan: every task and fix subtask in it may proceed.
        Ok(GovernanceDecision::Approve)
    }

    fn pre_validate(&mut self, _task: &Task, _iteration: u32) -> Result<Verdict, Stopped> {
        Ok(Verdict::clean())
    }

    fn execute(
        &mut self,
        task: &Task,
        _token: &ValidationToken,
    ) -> Result<ExecutionOutput, Stopped> {
        let state = self.state()?;
        state.exec_failure = None;
        let correction = state.correction.clone();
        let root = state.task.clone();
        let commands = state.command.clone();
        let Some(run) = commands.run else {
            // A lane the plan only declares runs nothing; its candidate is empty.
            return Ok(ExecutionOutput::new("nothing to run"));
        };
        let (role, command, spec) = if task.depth() > 0 {
            ("fix", commands.fix, Some(spec_text(task.spec())))
        } else if let Some(correction) = correction {
            match commands.fix {
                Some(fix) => ("fix", Some(fix), Some(correction)),
                None => ("run", Some(run), Some(correction)),
            }
        } else {
            ("run", Some(run), None)
        };
        let Some(command) = command else {
            return Err(Stopped::Other(format!(
                "task {root} has no fix command for {}",
                task.id()
            )));
        };
        let prepared = self
            .state()?
            .prepared_fix
            .as_ref()
            .filter(|(fix, _)| fix == task.id())
            .map(|(_, path)| path.clone());
        let stdin = match (spec, prepared) {
            (Some(text), Some(path)) => Some((text, path)),
            (Some(text), _) => {
                let path = self.spec_file(task, &text)?;
                Some((text, path))
            }
            (None, _) => None,
        };
        let done = self.run(
            task,
            role,
            &command,
            stdin.as_ref().map(|(t, p)| (t.as_str(), p.clone())),
        )?;
        if !done.success() {
            let validator = ValidatorId::new(role).map_err(|e| Stopped::Other(e.to_string()))?;
            self.state()?.exec_failure = Some(ValidatorResult::new(
                validator,
                Severity::Blocker,
                true,
                done.justification(&command),
            ));
        }
        Ok(ExecutionOutput::new(format!(
            "{role}: `{command}` finished with {}\n{}",
            done.status_text(),
            done.tail.stdout()
        )))
    }

    fn post_validate(
        &mut self,
        task: &Task,
        _output: &ExecutionOutput,
    ) -> Result<Verdict, Stopped> {
        let state = self.state()?;
        let mut results: Vec<ValidatorResult> = state.exec_failure.take().into_iter().collect();
        let checks = state.command.checks.clone();
        for check in &checks {
            let done = self.run(task, &format!("check {}", check.id), &check.command, None)?;
            results.push(if done.success() {
                ValidatorResult::pass(check.id.clone())
            } else {
                ValidatorResult::new(
                    check.id.clone(),
                    check.severity,
                    check.overridable,
                    done.justification(&check.command),
                )
            });
        }
        Ok(Verdict::new(results))
    }
}

/// What a call made by [`run_call`] ended with.
#[derive(Debug)]
#[non_exhaustive]
pub struct Called {
    /// The proposal, carrying the settled closure, or why the call failed or was withdrawn
    /// ([`WorkerFailure`]: the call could not be made, a draw failed, or the agent failed with
    /// an infrastructure error or a cancellation).
    pub result: Result<Proposal, WorkerFailure>,
    /// The fix subtasks drawn for, in order.
    pub drawn: Vec<TaskId>,
    /// The closure's whole record, when the closure ran to its end: what the proposal's
    /// settlement binds by digest.
    pub record: Option<ClosureRecord>,
}

/// Runs `dispatch`'s call of `task` as one closure with `agent`, exactly as the library's
/// `ClosureWorker` runs a call: the run's budget is what the evidence left when the call was
/// reserved, and every fix subtask first calls `draw`, which must make the draw durable
/// before it returns (the fix does not run when it fails). Returns the proposal, the fix
/// subtasks drawn for, and the closure's record.
pub fn run_call(
    agent: &mut ShellAgent<'_>,
    task: &PlannedTask,
    dispatch: &Dispatch,
    inputs: &[(AdmittedPath, Vec<u8>)],
    session: &Session,
    policy: &RecoveryPolicy,
    draw: &mut dyn FnMut(&TaskId) -> Result<(), String>,
) -> Called {
    let correction = dispatch
        .correction()
        .map(|c| correction_text(task, c.rejection(), c.candidate()));
    if let Err(e) = agent.begin(task, dispatch.attempt(), correction, inputs) {
        return Called {
            result: Err(e),
            drawn: Vec::new(),
            record: None,
        };
    }
    let no_fix;
    let policy = if agent.fixes(task) {
        policy
    } else {
        no_fix = without_fixes(policy);
        &no_fix
    };
    let max = policy.max_total_fix_attempts();
    let used = dispatch.fix_attempts_used().min(max);
    let budget = FixBudget::restore(max, used).unwrap_or_else(|_| FixBudget::new(0));
    let root = Task::new(task.id.clone(), task.spec.clone());
    let mut guarded = Drawing {
        agent: &mut *agent,
        draw,
        drawn: Vec::new(),
    };
    let mut closure = Closure::start_with_budget(root, session.clone(), policy.clone(), &budget);
    let mut error = None;
    let record = loop {
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
    let drawn = guarded.drawn;
    let finished = agent.finish(task, &record);
    Called {
        result: proposal(&task.id, &record, finished, error),
        drawn,
        record: Some(record),
    }
}

/// `policy` with recovery depth 0: the policy of a task without a fix command.
fn without_fixes(policy: &RecoveryPolicy) -> RecoveryPolicy {
    RecoveryPolicy::builder()
        .max_recovery_depth(0)
        .max_total_fix_attempts(policy.max_total_fix_attempts())
        .max_inner_iterations(policy.max_inner_iterations().get())
        .recover_on(policy.recover_on())
        .normalizer(policy.normalizer().clone())
        .build()
        .unwrap_or_default()
}

/// The agent's own error, or the failed draw of a fix attempt.
#[derive(Debug, thiserror::Error)]
enum DrawError {
    #[error(transparent)]
    Agent(Stopped),
    #[error("failed to record a fix attempt: {0}")]
    Draw(String),
}

impl AgentError for DrawError {
    fn kind(&self) -> AgentErrorKind {
        match self {
            Self::Agent(e) => e.kind(),
            Self::Draw(_) => AgentErrorKind::Infrastructure,
        }
    }
}

/// The agent, with every fix subtask's first phase preceded by its durable draw.
struct Drawing<'a, 'p> {
    agent: &'a mut ShellAgent<'p>,
    draw: &'a mut dyn FnMut(&TaskId) -> Result<(), String>,
    drawn: Vec<TaskId>,
}

impl Agent for Drawing<'_, '_> {
    type Error = DrawError;

    fn govern(
        &mut self,
        task: &Task,
        session: &Session,
        iteration: u32,
    ) -> Result<GovernanceDecision, DrawError> {
        if task.depth() > 0 && self.drawn.last() != Some(task.id()) {
            // Prepared first: what fails before the fix can run must not spend its attempt.
            self.agent.prepare(task).map_err(DrawError::Agent)?;
            (self.draw)(task.id()).map_err(DrawError::Draw)?;
            self.drawn.push(task.id().clone());
        }
        self.agent
            .govern(task, session, iteration)
            .map_err(DrawError::Agent)
    }

    fn pre_validate(&mut self, task: &Task, iteration: u32) -> Result<Verdict, DrawError> {
        self.agent
            .pre_validate(task, iteration)
            .map_err(DrawError::Agent)
    }

    fn execute(
        &mut self,
        task: &Task,
        token: &ValidationToken,
    ) -> Result<ExecutionOutput, DrawError> {
        self.agent.execute(task, token).map_err(DrawError::Agent)
    }

    fn post_validate(
        &mut self,
        task: &Task,
        output: &ExecutionOutput,
    ) -> Result<Verdict, DrawError> {
        self.agent
            .post_validate(task, output)
            .map_err(DrawError::Agent)
    }

    fn move_next(&mut self, task: &Task, iteration: u32) -> Result<Next, DrawError> {
        self.agent
            .move_next(task, iteration)
            .map_err(DrawError::Agent)
    }
}

/// What a call whose closure ended with `record` proposes, as the library's closure worker
/// decides it: refused with the halt when the closure halted, carrying the settled closure.
fn proposal(
    task: &TaskId,
    record: &ClosureRecord,
    finished: Result<Proposal, WorkerFailure>,
    error: Option<DrawError>,
) -> Result<Proposal, WorkerFailure> {
    match error {
        Some(DrawError::Draw(detail)) => {
            return Err(WorkerFailure::Unavailable {
                detail: format!("record a fix attempt in the journal: {detail}"),
            });
        }
        Some(DrawError::Agent(err)) if err.kind() != AgentErrorKind::Other => {
            return Err(WorkerFailure::Agent(AgentFailure::new(err)));
        }
        _ => {}
    }
    Ok(finished?.closed_by(task, record))
}

/// The text a fixer receives: the spec's intent and its acceptance criteria.
fn spec_text(spec: &Spec) -> String {
    let mut text = spec.intent.clone();
    if !spec.acceptance_criteria.is_empty() {
        text.push_str("\n\n## Acceptance criteria\n\n");
        for c in &spec.acceptance_criteria {
            text.push_str("- ");
            text.push_str(c);
            text.push('\n');
        }
    }
    text
}

/// The corrective call's input: the original task, the exact rejection, the refused files.
fn correction_text(task: &PlannedTask, rejection: &Rejection, candidate: &Candidate) -> String {
    let mut text = format!(
        "Corrective call for task {} (batch recovery). Achieve the original task below; its \
         last candidate was refused with the exact rejection after it.\n\n## Original task\n\n{}\n\n\
         ## Exact rejection\n\n{rejection}\n\n## Refused candidate ({} files)\n\n",
        task.id,
        spec_text(&task.spec),
        candidate.files().len()
    );
    for path in candidate.files().keys() {
        text.push_str("- ");
        text.push_str(path.as_str());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use kleene::batch::{Batch, BatchEvidence, ClosureWorker, MemoryJournal};
    use std::path::Path;

    fn task(id: &str, extra: &str) -> String {
        format!(
            r#"{{"id": "{id}", "kind": {{"lane": "config"}}, "owner": "shell",
                "spec": {{"intent": "make {id}", "acceptance_criteria": ["{id} is right"]}},
                "owned_paths": ["{id}.txt"]{extra}}}"#
        )
    }

    fn plan(tasks: &[String]) -> ShellPlan {
        ShellPlan::load(&format!(r#"{{"tasks": [{}]}}"#, tasks.join(","))).unwrap()
    }

    /// Makes the first call of the plan's first task through [`run_call`].
    fn first_call(
        plan: &ShellPlan,
        inputs: &[(AdmittedPath, Vec<u8>)],
        draw: &mut dyn FnMut(&TaskId) -> Result<(), String>,
    ) -> (Result<Proposal, WorkerFailure>, Vec<TaskId>) {
        let dir = tempfile::tempdir().unwrap();
        first_call_in(dir.path(), plan, inputs, draw)
    }

    /// [`first_call`] with the runner's files in `dir`.
    fn first_call_in(
        dir: &Path,
        plan: &ShellPlan,
        inputs: &[(AdmittedPath, Vec<u8>)],
        draw: &mut dyn FnMut(&TaskId) -> Result<(), String>,
    ) -> (Result<Proposal, WorkerFailure>, Vec<TaskId>) {
        let runner = Runner::open(dir).unwrap();
        let channel = ChannelId::new("chan").unwrap();
        let (mut machine, _) = Batch::new(plan.plan(), channel.clone())
            .machine(None)
            .unwrap();
        let dispatch = machine.reserve(1).unwrap().dispatches.remove(0);
        let task = plan
            .plan()
            .tasks()
            .find(|t| &t.id == dispatch.task())
            .unwrap();
        let mut agent = ShellAgent::new(plan, &runner, None);
        let called = run_call(
            &mut agent,
            task,
            &dispatch,
            inputs,
            &session(&channel).unwrap(),
            &policy(),
            draw,
        );
        if let Ok(p) = &called.result {
            // The record returned is the one the proposal's settlement binds.
            let (record, closure) = (called.record.as_ref().unwrap(), p.closure().unwrap());
            assert_eq!(record.digest(), closure.record_digest);
            assert_eq!(record.audit().head(), closure.audit_head);
        }
        (called.result, called.drawn)
    }

    fn no_draw(_: &TaskId) -> Result<(), String> {
        Err("no draws here".into())
    }

    fn paths(p: &Proposal) -> Vec<&str> {
        p.candidate()
            .files()
            .keys()
            .map(AdmittedPath::as_str)
            .collect()
    }

    #[test]
    fn what_a_call_leaves_in_scratch_is_not_its_candidate() {
        let plan = plan(&[task(
            "a",
            r#", "scratch": ["target/**"],
               "run": "mkdir -p target/x && echo o > target/x/o && echo k > a.txt""#,
        )]);
        let (result, _) = first_call(&plan, &[], &mut no_draw);
        let p = result.unwrap();
        assert!(p.rejection().is_none(), "{:?}", p.rejection());
        assert_eq!(paths(&p), ["a.txt"]);
        assert!(p.closure().is_some());
    }

    /// A candidate too large for a Restate message was sent anyway: the server refused it
    /// and retried the call until the task failed, saying nothing of why.
    #[test]
    fn a_call_that_writes_more_than_a_message_can_carry_is_refused_naming_the_file() {
        let plan = plan(&[task(
            "a",
            &format!(
                r#", "run": "echo k > a.txt && head -c {} /dev/zero > big.bin""#,
                MAX_CALL_OUTPUT_BYTES + 1
            ),
        )]);
        let (result, _) = first_call(&plan, &[], &mut no_draw);
        let p = result.unwrap();
        let text = p.rejection().unwrap().to_string();
        assert!(
            text.contains(&format!("big.bin ({} bytes)", MAX_CALL_OUTPUT_BYTES + 1))
                && text.contains(&format!("past the {MAX_CALL_OUTPUT_BYTES} bytes")),
            "{text}"
        );
        assert_eq!(paths(&p), ["a.txt"]);
    }

    #[test]
    fn a_failing_command_is_refused_with_its_output() {
        let plan = plan(&[task("a", r#", "run": "echo oops >&2; exit 4""#)]);
        let (result, _) = first_call(&plan, &[], &mut no_draw);
        let text = result.unwrap().rejection().unwrap().to_string();
        assert!(
            text.contains("exit code 4") && text.contains("oops"),
            "{text}"
        );
    }

    #[test]
    fn inputs_are_staged_and_not_part_of_the_candidate() {
        let plan = plan(&[task("a", r#", "run": "tr a-z A-Z < in.txt > a.txt""#)]);
        let input = AdmittedPath::admit("in.txt").unwrap();
        let (result, _) = first_call(&plan, &[(input, b"abc\n".to_vec())], &mut no_draw);
        let p = result.unwrap();
        let files: Vec<(&str, &[u8])> = p
            .candidate()
            .files()
            .iter()
            .map(|(p, b)| (p.as_str(), b.as_slice()))
            .collect();
        assert_eq!(files, [("a.txt", &b"ABC\n"[..])]);
    }

    #[test]
    fn deleting_an_input_is_refused() {
        let plan = plan(&[task("a", r#", "run": "rm in.txt; echo a > a.txt""#)]);
        let input = AdmittedPath::admit("in.txt").unwrap();
        let (result, _) = first_call(&plan, &[(input, b"x".to_vec())], &mut no_draw);
        let text = result.unwrap().rejection().unwrap().to_string();
        assert!(text.contains("deletes in.txt"), "{text}");
    }

    /// A task whose `run` writes a wrong value, whose check refuses it, and whose fix reads
    /// the recovery spec and writes the right one (and leaves `marker`).
    fn fixable(marker: &Path) -> String {
        task(
            "a",
            &format!(
                r#", "run": "echo wrong > a.txt",
                   "checks": [{{"id": "right", "command": "grep -q right a.txt"}}],
                   "fix": "grep -q 'is right' && echo right > a.txt && touch {}""#,
                marker.display()
            ),
        )
    }

    #[test]
    fn a_refused_draw_withdraws_the_call_and_its_fix_never_runs() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("fixed");
        let plan = plan(&[fixable(&marker)]);
        let (result, drawn) = first_call(&plan, &[], &mut no_draw);
        assert!(
            matches!(&result, Err(WorkerFailure::Unavailable { detail }) if detail.contains("no draws here")),
            "{result:?}"
        );
        assert!(drawn.is_empty());
        assert!(!marker.exists(), "the fix ran without a draw");
    }

    #[test]
    fn a_granted_draw_runs_the_fix_with_the_recovery_spec() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("fixed");
        let plan = plan(&[fixable(&marker)]);
        let mut draws = 0;
        let (result, drawn) = first_call(&plan, &[], &mut |_| {
            draws += 1;
            Ok(())
        });
        let p = result.unwrap();
        assert!(p.rejection().is_none(), "{:?}", p.rejection());
        assert_eq!(p.candidate().files().values().next().unwrap(), b"right\n");
        assert!(marker.exists());
        assert_eq!((draws, drawn.len()), (1, 1));
        assert_eq!(p.closure().map(|c| c.fix_attempts), Some(1));
    }

    /// The fix's recovery spec is written before its attempt is drawn, so a disk too full
    /// for the spec withdraws the call without spending the attempt.
    #[test]
    fn the_recovery_spec_is_written_before_the_attempt_is_drawn() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("fixed");
        let plan = plan(&[fixable(&marker)]);
        let runner_dir = dir.path().join("runner");
        let stages = runner_dir.join("stages");
        let mut specs_at_draw = Vec::new();
        let (result, _) = first_call_in(&runner_dir, &plan, &[], &mut |fix| {
            let specs = std::fs::read_dir(&stages)
                .unwrap()
                .filter_map(|e| e.unwrap().file_name().into_string().ok())
                .filter(|name| name.starts_with(&format!("{fix}.call1-")) && name.ends_with(".md"))
                .count();
            specs_at_draw.push(specs);
            Ok(())
        });
        assert!(result.unwrap().rejection().is_none());
        assert_eq!(
            specs_at_draw,
            [1],
            "the spec was not there when the attempt was drawn"
        );
        assert!(marker.exists());
    }

    /// A call that fails on a nearly full disk, where no fix can help, is withdrawn before
    /// its fix draws an attempt (the CLI's full-disk margin, here too); on a disk with room
    /// the same call is fixed. Needs a small tmpfs, so root; skipped elsewhere.
    #[test]
    fn a_failure_on_a_nearly_full_disk_withdraws_the_call_before_its_fix() {
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("small");
        std::fs::create_dir(&mnt).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
            .arg(&mnt)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("skipped: cannot mount a tmpfs here (not root?)");
            return;
        }
        let unmount = || {
            let _ = std::process::Command::new("umount").arg(&mnt).status();
        };
        let marker = dir.path().join("fixed");
        let plan = plan(&[fixable(&marker)]);
        // Leave less than the margin free.
        let filler = mnt.join("fill");
        let _ = std::fs::write(&filler, vec![0u8; 1536 * 1024]);
        let mut draws = 0;
        let (full, _) = first_call_in(&mnt.join("runner"), &plan, &[], &mut |_| {
            draws += 1;
            Ok(())
        });
        std::fs::remove_file(&filler).unwrap();
        let (roomy, _) = first_call_in(&mnt.join("runner2"), &plan, &[], &mut |_| Ok(()));
        unmount();
        assert!(
            matches!(&full, Err(WorkerFailure::Unavailable { detail }) if detail.contains("bytes free")),
            "{full:?}"
        );
        assert_eq!(draws, 0, "the fix drew an attempt on a full disk");
        assert!(roomy.unwrap().rejection().is_none());
        assert!(marker.exists());
    }

    /// The plan's evidence when every call is made by `run_call`, one at a time, its draws
    /// folded before its settlement (what the channel object does), and the calls' records.
    fn remote_evidence(plan: &ShellPlan, runner: &Runner) -> (BatchEvidence, Vec<StoredClosure>) {
        let mut records = Vec::new();
        let channel = ChannelId::new("chan").unwrap();
        let session = session(&channel).unwrap();
        let (mut machine, _) = Batch::new(plan.plan(), channel).machine(None).unwrap();
        loop {
            let mut work = machine.reserve(1).unwrap();
            let Some(dispatch) = work.dispatches.pop() else {
                break;
            };
            let task = plan
                .plan()
                .tasks()
                .find(|t| &t.id == dispatch.task())
                .unwrap();
            let inputs: Vec<(AdmittedPath, Vec<u8>)> = plan
                .transitive_prerequisites(&task.id)
                .iter()
                .filter_map(|p| machine.evidence().accepted(p))
                .flat_map(|out| out.files().clone())
                .collect();
            let mut agent = ShellAgent::new(plan, runner, None);
            let called = run_call(
                &mut agent,
                task,
                &dispatch,
                &inputs,
                &session,
                &policy(),
                &mut |_| Ok(()),
            );
            for fix in &called.drawn {
                machine.draw_fix(&dispatch, fix).unwrap();
            }
            if let Some(record) = &called.record {
                records.push(StoredClosure::of(
                    task.id.clone(),
                    dispatch.attempt(),
                    record,
                ));
            }
            machine.settle(&dispatch, called.result, &()).unwrap();
        }
        (machine.into_evidence(), records)
    }

    #[test]
    fn run_call_gives_the_evidence_of_the_library_s_closure_worker() {
        let dir = tempfile::tempdir().unwrap();
        let plan = plan(&[
            fixable(&dir.path().join("fixed")),
            task(
                "b",
                r#", "depends_on": ["a"], "run": "cat a.txt > b.txt",
                   "checks": [{"id": "warn", "command": "false", "severity": "warning"}]"#,
            ),
            task("c", r#", "depends_on": ["b"], "run": "exit 3""#),
        ]);
        let runner = Runner::open(&dir.path().join("remote")).unwrap();
        let (remote, remote_records) = remote_evidence(&plan, &runner);

        let runner = Runner::open(&dir.path().join("local")).unwrap();
        let channel = ChannelId::new("chan").unwrap();
        let agent = ShellAgent::new(&plan, &runner, None);
        let mut worker = ClosureWorker::new(agent, session(&channel).unwrap(), policy());
        let local = Batch::new(plan.plan(), channel)
            .run(&mut worker, &(), &mut MemoryJournal::default())
            .unwrap()
            .evidence;
        assert_eq!(local.fix_attempts_used(), 1);
        assert_eq!(remote.summary(), local.summary());
        assert_eq!(
            remote.summary().evidence_digest,
            local.summary().evidence_digest
        );
        // Both ways keep every settled call's record, and they are the same records: each
        // verifies against both evidences.
        let read = |records: &[StoredClosure]| -> Vec<(TaskId, u32, ClosureRecord)> {
            records
                .iter()
                .map(|s| (s.task.clone(), s.call, s.read().unwrap()))
                .collect()
        };
        let local_records = read(worker.agent().records());
        let remote_records = read(&remote_records);
        for evidence in [&local, &remote] {
            let settled: usize = evidence
                .inventory()
                .map(|(id, _)| {
                    evidence
                        .closures_of(id)
                        .filter(|c| c.settled().is_some())
                        .count()
                })
                .sum();
            assert!(settled >= 3, "{settled}");
            for records in [&local_records, &remote_records] {
                let checked = evidence
                    .verify_closures(records.iter().map(|(t, c, r)| (t, *c, r)))
                    .unwrap();
                assert_eq!(checked, settled);
            }
        }
    }
}
