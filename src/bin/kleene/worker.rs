//! The batch worker of the CLI: each task call is one closure over the task's commands.
//!
//! `run` is the closure's execution, `checks` its post-validation (a failed check keeps the
//! bounded output tail as its justification), and `fix` the execution of every fix subtask,
//! fed the rendered recovery spec on stdin and in `KLEENE_RECOVERY_SPEC_FILE`. A closure that
//! halts still proposes the files it left; the [`HaltContract`] then refuses them with the
//! halt as the exact rejection, which is how a halt becomes the task's rejection in the batch
//! evidence. A command that cannot run (missing, not executable, timed out) is an
//! infrastructure failure, and an interrupt cancels the call: neither is ever handed to a
//! fixer.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use kleene::batch::{
    Candidate, InfrastructureFailure, Rejection, Worker, WorkerCall, WorkerFailure,
};
use kleene::{
    AdmittedPath, Agent, AuditEntry, AuditEvent, AuditSink, ClosureFailure, ClosureOutcome,
    ClosureRecord, ExecutionOutput, ExhaustedBound, FixBudget, GovernanceDecision, HaltReason,
    PlannedTask, RecoveryPolicy, Session, Severity, Spec, TailLimits, Task, TaskId,
    ValidationToken, ValidatorId, ValidatorResult, Verdict, run_to_closure_with,
};

use crate::planfile::TaskCommands;
use crate::report::{Event, Reporter};
use crate::runner::{self, Interrupt, Invocation, RunError};
use crate::state::{StateDir, write_replace};

/// What every call of a run shares.
#[derive(Debug)]
pub struct Context {
    /// The workspace (absolute).
    pub workspace: PathBuf,
    /// The plan file's directory (absolute), exported as `KLEENE_PLAN_DIR`.
    pub plan_dir: PathBuf,
    /// The commands per task.
    pub commands: BTreeMap<TaskId, TaskCommands>,
    /// Timeout of each command for tasks that set none.
    pub default_timeout: Duration,
    /// The recovery policy for tasks with a `fix` command.
    pub policy: RecoveryPolicy,
    /// The same policy with depth 0, for tasks without one (their failures are never fixed).
    pub no_fix_policy: RecoveryPolicy,
    /// The run-wide fix budget, shared by every closure.
    pub budget: FixBudget,
    /// The session every closure runs in.
    pub session: Session,
    /// Where closure records and specs go.
    pub state: StateDir,
    /// Set by SIGINT/SIGTERM.
    pub interrupt: Interrupt,
}

/// What the worker, the output contract and the command share during one batch.
#[derive(Debug)]
pub struct Shared {
    /// Where events go.
    pub reporter: Reporter,
    /// The halt of each task's latest call, when its closure halted.
    pub halts: BTreeMap<TaskId, String>,
    /// Fix subtasks each task's latest call took.
    pub fixes: BTreeMap<TaskId, u32>,
    /// Tasks whose latest call's outcome was already shown.
    pub reported: BTreeSet<TaskId>,
}

impl Shared {
    /// Sharing state around `reporter`.
    pub fn new(reporter: Reporter) -> Rc<RefCell<Self>> {
        Rc::new(RefCell::new(Self {
            reporter,
            halts: BTreeMap::new(),
            fixes: BTreeMap::new(),
            reported: BTreeSet::new(),
        }))
    }

    /// Shows `event`.
    pub fn emit(&mut self, event: &Event) {
        match event {
            Event::TaskStarted { task, .. } => {
                self.reported.retain(|id| id.as_str() != task);
            }
            Event::TaskAccepted { task, .. } | Event::TaskFailed { task, .. } => {
                if let Ok(id) = TaskId::new(task.clone()) {
                    self.reported.insert(id);
                }
            }
            _ => {}
        }
        self.reporter.emit(event);
    }
}

/// The worker.
#[derive(Debug)]
pub struct ShellWorker<'a> {
    ctx: &'a Context,
    shared: Rc<RefCell<Shared>>,
    /// Every workspace file with a digest of its content after the last call: nothing else
    /// writes the workspace between calls, so the next call's "before" needs no second walk.
    known: Option<WorkspaceFiles>,
}

impl<'a> ShellWorker<'a> {
    /// A worker over `ctx`.
    pub fn new(ctx: &'a Context, shared: Rc<RefCell<Shared>>) -> Self {
        Self {
            ctx,
            shared,
            known: None,
        }
    }

    fn emit(&self, event: Event) {
        self.shared.borrow_mut().emit(&event);
    }
}

impl Worker for ShellWorker<'_> {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Candidate, WorkerFailure> {
        let task = call.task();
        if self.ctx.interrupt.is_set() {
            return Err(WorkerFailure::Cancelled);
        }
        self.emit(Event::TaskStarted {
            task: task.id.to_string(),
            call: call.attempt(),
        });
        let before = match self.known.take() {
            Some(known) => known,
            None => workspace_files(&self.ctx.workspace),
        };
        let Some(commands) = self.ctx.commands.get(&task.id) else {
            // A lane the plan only declares (for example a synthesised module lane) runs
            // nothing; its candidate is whatever its owned paths hold.
            self.shared.borrow_mut().halts.remove(&task.id);
            return Ok(self.candidate(task, &before));
        };
        let correction = call
            .correction()
            .map(|c| correction_text(task, c.rejection(), c.candidate()));
        let mut agent = ShellAgent {
            ctx: self.ctx,
            task,
            commands,
            call: call.attempt(),
            correction,
            shared: Rc::clone(&self.shared),
            exec_failure: None,
            infrastructure: None,
        };
        let policy = if commands.fix.is_some() {
            &self.ctx.policy
        } else {
            &self.ctx.no_fix_policy
        };
        let root = Task::new(task.id.clone(), task.spec.clone());
        let mut sink = EventSink {
            shared: Rc::clone(&self.shared),
            task: &task.id,
        };
        let record = run_to_closure_with(
            root,
            self.ctx.session.clone(),
            &mut agent,
            policy,
            &self.ctx.budget,
            &mut sink,
        );
        self.save(task, call.attempt(), &record);
        match agent.infrastructure.take() {
            Some(err) if err.is_interrupted() => return Err(WorkerFailure::Cancelled),
            Some(err) => {
                let failure = infrastructure(&err);
                self.emit(Event::TaskFailed {
                    task: task.id.to_string(),
                    reason: format!("infrastructure: {err}"),
                });
                return Err(failure.into());
            }
            None => {}
        }
        let mut shared = self.shared.borrow_mut();
        shared.fixes.insert(task.id.clone(), record.fix_attempts());
        match halt_text(&record) {
            Some(reason) => {
                shared.halts.insert(task.id.clone(), reason);
            }
            None => {
                shared.halts.remove(&task.id);
            }
        }
        drop(shared);
        Ok(self.candidate(task, &before))
    }
}

impl ShellWorker<'_> {
    /// The task's owned files as they are now, plus every other file that the call created
    /// or changed: all tasks share one workspace, so a write into another task's files or
    /// outside every task's ownership must reach the built-in ownership check, which refuses
    /// it. (A candidate cannot express a deletion, so a deleted foreign file is not seen
    /// here; the final acceptance finds the planned file missing.)
    fn candidate(&mut self, task: &PlannedTask, before: &WorkspaceFiles) -> Candidate {
        let mut files = BTreeMap::new();
        for owned in &task.owned_paths {
            collect(&self.ctx.workspace, owned, &mut files);
        }
        let after = workspace_files(&self.ctx.workspace);
        let own = |path: &AdmittedPath| task.owned_paths.iter().any(|o| path.starts_with(o));
        for (path, digest) in &after {
            if before.get(path) != Some(digest) && !own(path) {
                collect(&self.ctx.workspace, path, &mut files);
            }
        }
        self.known = Some(after);
        Candidate::new(files)
    }

    fn save(&self, task: &PlannedTask, call: u32, record: &ClosureRecord) {
        // The record is evidence for people (`kleene audit`); failing to write it must not
        // change the batch's outcome, but it is reported.
        if let Err(err) = self.ctx.state.append_closure(&task.id, call, record) {
            self.shared
                .borrow_mut()
                .reporter
                .say(&format!("warning: failed to save closure record: {err}"));
        }
    }
}

/// Refuses the candidate of a task whose closure halted, with the halt as the exact
/// rejection, and the candidate of a resolved task that left an owned path unwritten.
/// It runs after the built-in ownership check, so it is also where a task is seen accepted.
#[derive(Debug)]
pub struct HaltContract {
    /// Shared with the worker.
    pub shared: Rc<RefCell<Shared>>,
}

impl kleene::batch::OutputContract for HaltContract {
    fn check(&self, task: &PlannedTask, candidate: &Candidate) -> Result<(), Rejection> {
        let verdict = self.judge(task, candidate);
        let event = match &verdict {
            Ok(()) => Event::TaskAccepted {
                task: task.id.to_string(),
                fixes: self
                    .shared
                    .borrow()
                    .fixes
                    .get(&task.id)
                    .copied()
                    .unwrap_or(0),
            },
            Err(rejection) => Event::TaskFailed {
                task: task.id.to_string(),
                reason: first_line(&rejection.to_string()),
            },
        };
        self.shared.borrow_mut().emit(&event);
        verdict
    }
}

impl HaltContract {
    fn judge(&self, task: &PlannedTask, candidate: &Candidate) -> Result<(), Rejection> {
        if let Some(reason) = self.shared.borrow().halts.get(&task.id) {
            return Err(Rejection::contract(&task.id, reason.clone()));
        }
        let missing: Vec<&str> = task
            .owned_paths
            .iter()
            .filter(|p| !candidate.files().keys().any(|f| f.starts_with(p)))
            .map(AdmittedPath::as_str)
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(Rejection::contract(
                &task.id,
                format!("owned paths not written: {}", missing.join(", ")),
            ))
        }
    }
}

/// The closure's agent for one task call.
struct ShellAgent<'a> {
    ctx: &'a Context,
    task: &'a PlannedTask,
    commands: &'a TaskCommands,
    call: u32,
    correction: Option<String>,
    shared: Rc<RefCell<Shared>>,
    /// A non-zero exit of `run`/`fix`, judged with the checks.
    exec_failure: Option<ValidatorResult>,
    /// The infrastructure failure that stopped the closure, if any.
    infrastructure: Option<RunError>,
}

/// Turns the closure's audit entries into live events as they are appended.
struct EventSink<'a> {
    shared: Rc<RefCell<Shared>>,
    task: &'a TaskId,
}

impl AuditSink for EventSink<'_> {
    fn record(&mut self, _index: usize, entry: &AuditEntry) {
        if let AuditEvent::SubtaskSpawned {
            task_ref,
            depth,
            triggering_validators,
            ..
        } = entry.event()
        {
            self.shared.borrow_mut().emit(&Event::FixSpawned {
                task: self.task.to_string(),
                fix: task_ref.to_string(),
                depth: *depth,
                triggering: triggering_validators
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
            });
        }
    }
}

/// The error the agent hands the closure: it only says that the call stopped; the
/// [`RunError`] itself is kept on the agent for the worker to classify.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Stopped(String);

impl ShellAgent<'_> {
    fn emit(&self, event: Event) {
        self.shared.borrow_mut().emit(&event);
    }

    fn timeout(&self) -> Duration {
        self.commands.timeout.unwrap_or(self.ctx.default_timeout)
    }

    fn run(
        &mut self,
        task: &Task,
        role: &str,
        command: &str,
        stdin: Option<(&str, PathBuf)>,
    ) -> Result<runner::Finished, Stopped> {
        self.emit(Event::CommandStarted {
            task: task.id().to_string(),
            role: role.to_owned(),
            command: command.to_owned(),
        });
        let mut env = vec![
            ("KLEENE_PLAN_DIR", self.ctx.plan_dir.display().to_string()),
            ("KLEENE_WORKSPACE", self.ctx.workspace.display().to_string()),
            ("KLEENE_TASK", self.task.id.to_string()),
            ("KLEENE_SUBTASK", task.id().to_string()),
            ("KLEENE_DEPTH", task.depth().to_string()),
            ("KLEENE_CALL", self.call.to_string()),
        ];
        if let Some((_, path)) = &stdin {
            env.push(("KLEENE_RECOVERY_SPEC_FILE", path.display().to_string()));
        }
        let inv = Invocation {
            command,
            dir: &self.ctx.workspace,
            timeout: self.timeout(),
            stdin: stdin.as_ref().map(|(text, _)| text.as_bytes()),
            env,
            limits: TailLimits::default(),
        };
        runner::run(&inv, &self.ctx.interrupt).map_err(|err| {
            let stopped = Stopped(format!("{role}: {err}"));
            self.infrastructure = Some(err);
            stopped
        })
    }

    fn spec_file(&self, task: &Task, text: &str) -> Result<PathBuf, Stopped> {
        let path = self
            .ctx
            .state
            .specs_dir()
            .join(format!("{}.call{}.md", task.id(), self.call));
        write_replace(&path, text.as_bytes()).map_err(|e| Stopped(e.to_string()))?;
        // Commands run in the workspace: a relative --state must not leak into the variable.
        std::path::absolute(&path).map_err(|e| Stopped(format!("resolve {}: {e}", path.display())))
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
        if self.ctx.interrupt.is_set() {
            self.infrastructure = Some(RunError::Interrupted {
                command: String::new(),
            });
            return Err(Stopped("interrupted".to_owned()));
        }
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
        self.exec_failure = None;
        let (role, command, spec) = if task.depth() > 0 {
            (
                "fix",
                self.commands.fix.clone(),
                Some(spec_text(task.spec())),
            )
        } else if let Some(correction) = &self.correction {
            // A corrective call (a retry, or batch recovery): the fixer gets the exact
            // rejection; a task without one runs again with it on stdin.
            match &self.commands.fix {
                Some(fix) => ("fix", Some(fix.clone()), Some(correction.clone())),
                None => (
                    "run",
                    Some(self.commands.run.clone()),
                    Some(correction.clone()),
                ),
            }
        } else {
            ("run", Some(self.commands.run.clone()), None)
        };
        let Some(command) = command else {
            return Err(Stopped(format!(
                "task {} has no fix command for {}",
                self.task.id,
                task.id()
            )));
        };
        let stdin = match spec {
            Some(text) => {
                let path = self.spec_file(task, &text)?;
                Some((text, path))
            }
            None => None,
        };
        let done = self.run(
            task,
            role,
            &command,
            stdin.as_ref().map(|(t, p)| (t.as_str(), p.clone())),
        )?;
        if !done.success() {
            let validator = ValidatorId::new(role).map_err(|e| Stopped(e.to_string()))?;
            self.exec_failure = Some(ValidatorResult::new(
                validator,
                Severity::Blocker,
                true,
                justification(&command, &done),
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
        let mut results: Vec<ValidatorResult> = self.exec_failure.take().into_iter().collect();
        for check in &self.commands.checks {
            let done = self.run(task, &format!("check {}", check.id), &check.command, None)?;
            if done.success() {
                results.push(ValidatorResult::pass(check.id.clone()));
            } else {
                self.emit(Event::CheckFailed {
                    task: task.id().to_string(),
                    check: check.id.to_string(),
                    severity: check.severity.to_string(),
                    status: done.status_text(),
                });
                results.push(ValidatorResult::new(
                    check.id.clone(),
                    check.severity,
                    check.overridable,
                    justification(&check.command, &done),
                ));
            }
        }
        Ok(Verdict::new(results))
    }
}

/// A failed command's justification: the command, how it ended, and its output tail,
/// verbatim (R21 §3: the fixer sees the real failing output).
fn justification(command: &str, done: &runner::Finished) -> String {
    let mut text = format!("`{command}` failed with {}\n", done.status_text());
    if !done.tail.stdout().is_empty() {
        text.push_str("--- stdout (tail) ---\n");
        text.push_str(done.tail.stdout());
        if !text.ends_with('\n') {
            text.push('\n');
        }
    }
    if !done.tail.stderr().is_empty() {
        text.push_str("--- stderr (tail) ---\n");
        text.push_str(done.tail.stderr());
        if !text.ends_with('\n') {
            text.push('\n');
        }
    }
    text
}

/// The text a fixer receives: the rendered spec's intent and its acceptance criteria.
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

fn infrastructure(err: &RunError) -> InfrastructureFailure {
    match err {
        RunError::TimedOut { timeout, .. } => InfrastructureFailure::Timeout {
            after_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        },
        RunError::Spawn { .. } | RunError::NotFound { .. } | RunError::NotExecutable { .. } => {
            InfrastructureFailure::ProcessMissing {
                detail: err.to_string(),
            }
        }
        RunError::Interrupted { .. } | RunError::Wait { .. } => InfrastructureFailure::Transport {
            detail: err.to_string(),
        },
    }
}

/// The halt of a closure as the rejection text: the reason and the failures that caused it
/// (with their tails), or `None` when it resolved.
pub fn halt_text(record: &ClosureRecord) -> Option<String> {
    match record.outcome() {
        ClosureOutcome::Resolved { .. } => None,
        ClosureOutcome::Halted {
            task_ref, reason, ..
        } => {
            let mut text = format!("closure halted at {task_ref}: {}", describe(reason));
            if let Some(verdict) = verdict_of(reason) {
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
            ClosureFailure::Agent { phase, message } => {
                format!(
                    "closure stopped at {task_ref}: {} failed: {message}",
                    phase.as_str()
                )
            }
            other => format!("closure stopped at {task_ref}: {other:?}"),
        }),
        other => Some(format!("closure ended without resolving: {other:?}")),
    }
}

fn verdict_of(reason: &HaltReason) -> Option<&Verdict> {
    match reason {
        HaltReason::PreExecuteRejected { verdict }
        | HaltReason::NonOverridableBlocker { verdict }
        | HaltReason::WarningWithheld { verdict }
        | HaltReason::RecoveryExhausted { verdict, .. }
        | HaltReason::RecoveryStalled { verdict } => Some(verdict),
        _ => None,
    }
}

/// One line for a halt reason.
pub fn describe(reason: &HaltReason) -> String {
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

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_owned()
}

/// Adds `path` (a file, or every file under a directory) to `files`.
fn collect(workspace: &Path, path: &AdmittedPath, files: &mut BTreeMap<AdmittedPath, Vec<u8>>) {
    let full = workspace.join(path.as_str());
    let Ok(meta) = fs::symlink_metadata(&full) else {
        return;
    };
    if meta.is_file() {
        if let Ok(bytes) = fs::read(&full) {
            files.insert(path.clone(), bytes);
        }
    } else if meta.is_dir() {
        let Ok(entries) = fs::read_dir(&full) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Ok(child) = AdmittedPath::admit(&format!("{}/{name}", path.as_str())) {
                collect(workspace, &child, files);
            }
        }
    }
}

/// Every file of the workspace, keyed by admitted path, with a blake3 digest of its content.
type WorkspaceFiles = BTreeMap<AdmittedPath, blake3::Hash>;

/// Every file of the workspace with its digest. Names that cannot be admitted (secret-like,
/// hostile) are skipped: no candidate can carry them, and acceptance only reads planned paths.
fn workspace_files(workspace: &Path) -> WorkspaceFiles {
    let mut out = BTreeMap::new();
    walk(workspace, "", &mut out);
    out
}

fn walk(dir: &Path, prefix: &str, out: &mut WorkspaceFiles) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let rel = if prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{prefix}/{name}")
        };
        let Ok(path) = AdmittedPath::admit(&rel) else {
            continue;
        };
        match entry.file_type() {
            Ok(t) if t.is_dir() => walk(&entry.path(), &rel, out),
            Ok(t) if t.is_file() => {
                if let Ok(bytes) = fs::read(entry.path()) {
                    out.insert(path, blake3::hash(&bytes));
                }
            }
            _ => {}
        }
    }
}
