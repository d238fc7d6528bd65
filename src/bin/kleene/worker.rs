//! The batch worker of the CLI: each task call is one closure over the task's commands, run
//! in the call's own staged workspace.
//!
//! A call's stage holds the accepted outputs of the task's transitive prerequisites and
//! nothing else; `run`, the checks and every `fix` of the call's closure run there, so the
//! files the checks ran against are exactly the candidate plus its inputs. The candidate is
//! what the call created or changed in the stage (scratch paths aside); a deleted input, a
//! symlink, a special file or a name kleene cannot admit refuses the call, named. The stage is
//! discarded when the call settles; the next call starts from a fresh one.
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
use kleene::Digest;
use kleene::PathGlob;
use kleene::stage::{ObjectStore, ScratchRule, Stage, StageChanges, StageInput};

use crate::runner::{self, GroupRecords, Interrupt, Invocation, RunError};
use crate::state::{StateDir, StateError, write_replace};

/// What every call of a run shares.
#[derive(Debug)]
pub struct Context {
    /// The workspace (absolute).
    pub workspace: PathBuf,
    /// The plan file's directory (absolute), exported as `KLEENE_PLAN_DIR`.
    pub plan_dir: PathBuf,
    /// The commands per task.
    pub commands: BTreeMap<TaskId, TaskCommands>,
    /// The plan-level scratch globs (each task adds its own).
    pub scratch: Vec<PathGlob>,
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
    /// Where running process groups are recorded.
    pub records: GroupRecords,
    /// The build cache shared by calls, exported as `KLEENE_CACHE_DIR` (absolute).
    pub cache_dir: PathBuf,
}

impl Context {
    /// What counts as scratch in `task`'s stage: the plan's globs and the task's own.
    fn scratch_for(&self, task: &TaskId) -> Scratch {
        let own = self.commands.get(task).map_or(&[][..], |c| &c.scratch[..]);
        Scratch::new(self.scratch.iter().chain(own))
    }
}

/// Scratch globs as the stage's rule: a path is scratch when any glob matches it, and a
/// directory is skipped whole when a glob `P/**` has a `P` that matches the directory itself
/// (then every path beneath it matches).
#[derive(Debug)]
struct Scratch {
    globs: Vec<PathGlob>,
    subtrees: Vec<PathGlob>,
}

impl Scratch {
    fn new<'g>(globs: impl Iterator<Item = &'g PathGlob>) -> Self {
        let globs: Vec<PathGlob> = globs.cloned().collect();
        let subtrees = globs
            .iter()
            .filter_map(|g| g.as_str().strip_suffix("/**"))
            .filter_map(|prefix| PathGlob::parse(prefix).ok())
            .collect();
        Self { globs, subtrees }
    }
}

impl ScratchRule for Scratch {
    fn is_scratch(&self, path: &str) -> bool {
        self.globs.iter().any(|g| g.matches(path))
    }

    fn covers_dir(&self, dir: &str) -> bool {
        self.subtrees.iter().any(|g| g.matches(dir))
    }
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
    /// What each task's latest call left in its stage that refuses the call (deleted
    /// inputs, symlinks, special files, unnameable names), as one message.
    pub stage_refusals: BTreeMap<TaskId, String>,
}

impl Shared {
    /// Sharing state around `reporter`.
    pub fn new(reporter: Reporter) -> Rc<RefCell<Self>> {
        Rc::new(RefCell::new(Self {
            reporter,
            halts: BTreeMap::new(),
            fixes: BTreeMap::new(),
            reported: BTreeSet::new(),
            stage_refusals: BTreeMap::new(),
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
    store: ObjectStore,
    /// The blake3 of each file of each accepted output, by the output's digest: an input is
    /// hashed once per run, however many calls stage it.
    file_digests: BTreeMap<Digest, Rc<BTreeMap<AdmittedPath, Digest>>>,
    /// The last call's stage, turned into the next call's by [`Stage::reuse`]: in a chain,
    /// a call then pays for the files that changed, not for linking every input again.
    spare: Option<Stage>,
}

/// kleene's own storage failed during a call: the call is withdrawn, never counted.
fn unavailable(what: &str, err: impl std::fmt::Display) -> WorkerFailure {
    WorkerFailure::Unavailable {
        detail: format!("{what}: {err}"),
    }
}

impl<'a> ShellWorker<'a> {
    /// A worker over `ctx`.
    ///
    /// # Errors
    ///
    /// When the object store in the state directory cannot be opened.
    pub fn new(ctx: &'a Context, shared: Rc<RefCell<Shared>>) -> Result<Self, StateError> {
        let objects = ctx.state.objects_dir();
        let store = ObjectStore::open(&objects).map_err(|e| StateError::Corrupt {
            path: objects,
            message: e.to_string(),
        })?;
        Ok(Self {
            ctx,
            shared,
            store,
            file_digests: BTreeMap::new(),
            spare: None,
        })
    }

    fn emit(&self, event: Event) {
        self.shared.borrow_mut().emit(&event);
    }

    /// The call's stage, holding its task's transitive prerequisites' accepted outputs.
    fn stage(&mut self, call: &WorkerCall<'_>) -> Result<Stage, WorkerFailure> {
        let inputs = call.inputs();
        let mut digests = Vec::with_capacity(inputs.len());
        for (_, output) in &inputs {
            let files = self.file_digests.entry(output.digest()).or_insert_with(|| {
                Rc::new(
                    output
                        .files()
                        .iter()
                        .map(|(p, c)| (p.clone(), Digest::from(blake3::hash(c))))
                        .collect(),
                )
            });
            digests.push(Rc::clone(files));
        }
        let staged = inputs
            .iter()
            .zip(&digests)
            .flat_map(|((_, output), digests)| {
                output
                    .files()
                    .iter()
                    .map(move |(path, content)| match digests.get(path) {
                        Some(d) => StageInput::with_digest(path, content, *d),
                        None => StageInput::new(path, content),
                    })
            });
        if let Some(spare) = self.spare.take() {
            let inputs: Vec<StageInput<'_>> = staged.collect();
            match spare.reuse(&self.store, inputs.iter().copied()) {
                Ok(stage) => return Ok(stage),
                // A stage that cannot be swept is removed; a fresh one follows.
                Err(_) => return self.fresh_stage(inputs),
            }
        }
        let inputs: Vec<StageInput<'_>> = staged.collect();
        self.fresh_stage(inputs)
    }

    /// A new stage directory holding `inputs`.
    fn fresh_stage(&self, inputs: Vec<StageInput<'_>>) -> Result<Stage, WorkerFailure> {
        let root = self.ctx.state.stages_dir().join("call");
        // A stage left by a crashed run holds nothing anyone needs: its call was never
        // settled, and a resume makes the call again from a fresh stage.
        if std::fs::symlink_metadata(&root).is_ok() {
            std::fs::remove_dir_all(&root)
                .map_err(|e| unavailable(&format!("remove stale stage {}", root.display()), e))?;
        }
        Stage::prepare(root, &self.store, inputs).map_err(|e| unavailable("stage the call", e))
    }
}

impl Drop for ShellWorker<'_> {
    fn drop(&mut self) {
        // The last stage holds nothing that is not in the journal and the workspace.
        if let Some(stage) = self.spare.take() {
            let _ = stage.discard();
        }
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
        let stage = self.stage(call)?;
        let outcome = self.run_in(&stage, call);
        // The stage is walked whatever the outcome: an input damaged in place must be dropped
        // from the store before any later stage links it.
        let changes = stage.changes(&self.ctx.scratch_for(&task.id));
        if let Ok(changes) = &changes {
            for path in changes.written().keys() {
                if let Some(digest) = stage.input_digest(path) {
                    let _ = self.store.forget(&digest);
                }
            }
            // Kept for the next call, which turns it into its own stage.
            self.spare = Some(stage);
        } else if let Err(err) = stage.discard() {
            self.shared
                .borrow_mut()
                .reporter
                .say(&format!("warning: failed to remove a stage: {err}"));
        }
        outcome?;
        let changes = changes.map_err(|e| unavailable("read the call's stage", e))?;
        Ok(self.candidate(task, changes))
    }
}

impl ShellWorker<'_> {
    /// Runs the call's closure in `stage`.
    fn run_in(&mut self, stage: &Stage, call: &WorkerCall<'_>) -> Result<(), WorkerFailure> {
        let task = call.task();
        let Some(commands) = self.ctx.commands.get(&task.id) else {
            // A lane the plan only declares (for example a synthesised module lane) runs
            // nothing; its candidate is empty.
            self.shared.borrow_mut().halts.remove(&task.id);
            return Ok(());
        };
        let correction = call
            .correction()
            .map(|c| correction_text(task, c.rejection(), c.candidate()));
        let mut agent = ShellAgent {
            ctx: self.ctx,
            task,
            commands,
            stage: stage.root(),
            call: call.attempt(),
            correction,
            shared: Rc::clone(&self.shared),
            exec_failure: None,
            infrastructure: None,
            own_io: None,
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
        if let Some(err) = agent.own_io.take() {
            // The closure stopped before the fix it spawned could run: the call is withdrawn,
            // and so is its record (a resume makes the call again).
            self.emit(Event::TaskFailed {
                task: task.id.to_string(),
                reason: format!("kleene could not write its own files: {err}"),
            });
            return Err(WorkerFailure::Unavailable { detail: err });
        }
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
        let halt = halt_text(&record);
        // A call that failed while the disk holding its stage was full most likely failed
        // because of it: the host failed, not the task, so the call is withdrawn.
        if halt.is_some()
            && let Some(free) = nearly_full(stage.root())
        {
            let detail = format!(
                "the file system holding {} has only {free} bytes free; free some space",
                stage.root().display()
            );
            self.emit(Event::TaskFailed {
                task: task.id.to_string(),
                reason: detail.clone(),
            });
            return Err(WorkerFailure::Unavailable { detail });
        }
        let mut shared = self.shared.borrow_mut();
        shared.fixes.insert(task.id.clone(), record.fix_attempts());
        match halt {
            Some(reason) => {
                shared.halts.insert(task.id.clone(), reason);
            }
            None => {
                shared.halts.remove(&task.id);
            }
        }
        Ok(())
    }

    /// Exactly what the call created or changed in its stage. What the stage refuses outright
    /// (deleted inputs, links, special files, unnameable names) is kept for the contract,
    /// which refuses the call with it; a write into another task's file reaches the batch's
    /// ownership check, which refuses it.
    fn candidate(&mut self, task: &PlannedTask, changes: StageChanges) -> Candidate {
        let refusal = refusal_text(&changes);
        let mut shared = self.shared.borrow_mut();
        match refusal {
            Some(text) => shared.stage_refusals.insert(task.id.clone(), text),
            None => shared.stage_refusals.remove(&task.id),
        };
        drop(shared);
        Candidate::new(changes.into_written())
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
        let shared = self.shared.borrow();
        let halt = shared.halts.get(&task.id);
        let refused = shared.stage_refusals.get(&task.id);
        if halt.is_some() || refused.is_some() {
            let text: Vec<&str> = [refused, halt]
                .into_iter()
                .flatten()
                .map(String::as_str)
                .collect();
            return Err(Rejection::contract(&task.id, text.join("\n\n")));
        }
        drop(shared);
        let missing: Vec<&str> = task
            .unwritten_owned_paths(candidate.files())
            .into_iter()
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
    /// The call's staged workspace, where every command runs.
    stage: &'a Path,
    call: u32,
    correction: Option<String>,
    shared: Rc<RefCell<Shared>>,
    /// A non-zero exit of `run`/`fix`, judged with the checks.
    exec_failure: Option<ValidatorResult>,
    /// The infrastructure failure that stopped the closure, if any.
    infrastructure: Option<RunError>,
    /// kleene's own I/O failure (a spec file it could not write) that stopped the closure.
    own_io: Option<String>,
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
            ("KLEENE_WORKSPACE", self.stage.display().to_string()),
            ("KLEENE_CACHE_DIR", self.ctx.cache_dir.display().to_string()),
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
            dir: self.stage,
            timeout: self.timeout(),
            stdin: stdin.as_ref().map(|(text, _)| text.as_bytes()),
            env,
            limits: TailLimits::default(),
            records: Some((
                &self.ctx.records,
                format!("task {} call {}", self.task.id, self.call),
            )),
        };
        runner::run(&inv, &self.ctx.interrupt).map_err(|err| {
            let stopped = Stopped(format!("{role}: {err}"));
            self.infrastructure = Some(err);
            stopped
        })
    }

    fn spec_file(&mut self, task: &Task, text: &str) -> Result<PathBuf, Stopped> {
        let path = self
            .ctx
            .state
            .specs_dir()
            .join(format!("{}.call{}.md", task.id(), self.call));
        // A spec kleene cannot write (a full disk) is kleene's failure, not the task's: the
        // call is withdrawn and never counted.
        if let Err(e) = write_replace(&path, text.as_bytes()) {
            self.own_io = Some(e.to_string());
            return Err(Stopped(e.to_string()));
        }
        // Commands run in the stage: a relative --state must not leak into the variable.
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
        _ => InfrastructureFailure::Transport {
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

/// The bytes free on the file system holding `dir`, when fewer than a full-disk margin
/// (1 MiB) are.
fn nearly_full(dir: &Path) -> Option<u64> {
    const MARGIN: u64 = 1 << 20;
    let st = rustix::fs::statvfs(dir).ok()?;
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    (free < MARGIN).then_some(free)
}

/// What the stage refuses, as the rejection text (one line, so every summary shows it), or
/// `None`.
fn refusal_text(changes: &StageChanges) -> Option<String> {
    let mut items: Vec<String> = changes
        .deleted()
        .iter()
        .map(|p| format!("deletes {p}, an accepted output of a prerequisite (a call may only write its own paths)"))
        .collect();
    items.extend(changes.refused().iter().map(ToString::to_string));
    if items.is_empty() {
        return None;
    }
    // Name the first ones; a call that left thousands does not need them all repeated.
    const SHOWN: usize = 20;
    let more = items.len().saturating_sub(SHOWN);
    items.truncate(SHOWN);
    if more > 0 {
        items.push(format!("and {more} more"));
    }
    Some(format!(
        "the call left what kleene refuses in its stage: {}",
        items.join("; ")
    ))
}
