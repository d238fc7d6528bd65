//! The shell agent of the CLI: each task call is one closure (run by the library's
//! `ClosureWorker`) over the task's commands, in the call's own staged workspace.
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
//! fed the rendered recovery spec on stdin and in `KLEENE_RECOVERY_SPEC_FILE`. A command that
//! cannot run (missing, not executable, timed out) is an infrastructure failure, and an
//! interrupt cancels the call: neither is ever handed to a fixer.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kleene::batch::{BatchAgent, Candidate, Proposal, Rejection, WorkerCall, WorkerFailure};
use kleene::stage::{
    ObjectStore, ScratchRule, Stage, StageChanges, StageError, StageInput, remove_stage,
};
use kleene::{
    Agent, Task,
    audit::{AuditEntry, AuditEvent},
    closure::{
        AgentError, AgentErrorKind, ClosureRecord, ExecutionOutput, GovernanceDecision, Session,
        Severity, Spec, TailLimits, ValidationToken, ValidatorResult, Verdict,
    },
    id::{Digest, TaskId, ValidatorId},
    plan::{AdmittedPath, PathGlob, PlannedTask},
};

use crate::planfile::TaskCommands;
use crate::report::{Event, Reporter};
use crate::state::{StateDir, StateError, write_replace};
use kleene::error::Chain;
use kleene::process::{self, Finished, GroupRecords, Interrupt, Invocation, RunError};

/// What every call of a run shares.
#[derive(Debug)]
pub struct Context {
    /// The plan file's directory (absolute), exported as `KLEENE_PLAN_DIR`.
    pub plan_dir: PathBuf,
    /// The commands per task.
    pub commands: BTreeMap<TaskId, TaskCommands>,
    /// The plan-level scratch globs (each task adds its own).
    pub scratch: Vec<PathGlob>,
    /// Timeout of each command for tasks that set none.
    pub default_timeout: Duration,
    /// Where closure records and specs go.
    pub state: StateDir,
    /// Set by SIGINT/SIGTERM.
    pub interrupt: Interrupt,
    /// Where running process groups are recorded.
    pub records: GroupRecords,
    /// The build cache shared by calls, exported as `KLEENE_CACHE_DIR` (absolute).
    pub cache_dir: PathBuf,
    /// Whether a command can outlive its call (no PID namespace here: a `setsid` child
    /// escapes its process group). Then no stage is reused and none is made again under a
    /// name used before, so what such a child writes, by its working directory or by the
    /// path it was given, never lands in a later call's stage.
    pub commands_can_outlive_calls: bool,
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

/// The agent: runs a call's commands in its stage and proposes what the stage holds after.
#[derive(Debug)]
pub struct ShellAgent<'a> {
    ctx: &'a Context,
    rep: Arc<Mutex<Reporter>>,
    /// The run's object store, shared by every worker slot (its writes are atomic renames).
    store: &'a ObjectStore,
    /// The worker slot this agent serves: its stage is `STATE/stages/call-SLOT`, so calls in
    /// flight together never share a workspace.
    slot: usize,
    /// The blake3 of each file of each accepted output, by the output's digest: an input is
    /// hashed once per run, however many calls stage it.
    /// Each accepted output's file digests, in the order its files iterate: hashed once per
    /// run, and matched to the files by position, not looked up by path.
    file_digests: HashMap<Digest, Arc<Vec<Digest>>>,
    /// The last call's stage, turned into the next call's by [`Stage::reuse`]: in a chain,
    /// a call then pays for the files that changed, not for linking every input again.
    spare: Option<Stage>,
    /// Stages made so far, naming each one apart when commands can outlive their calls.
    stages_made: u64,
    /// The call under way.
    current: Option<CallState>,
}

/// What one call needs while its closure runs.
#[derive(Debug)]
struct CallState {
    task: TaskId,
    call: u32,
    stage: Stage,
    /// The exact rejection and refused candidate of a corrective call, as the fixer's input.
    correction: Option<String>,
    /// A non-zero exit of `run`/`fix`, judged with the checks.
    exec_failure: Option<ValidatorResult>,
    /// Why kleene's own host stopped the closure (a spec file it could not write, a full
    /// disk before a fix), in words: the call is withdrawn.
    own_io: Option<String>,
    /// The fix subtask whose spec file was written before its attempt was drawn, and where.
    prepared_fix: Option<(TaskId, PathBuf)>,
}

/// Why a command of the closure stopped it, classified for the batch.
#[derive(Debug, thiserror::Error)]
pub enum Stopped {
    /// The command could not run to an exit status (missing, timed out, interrupted).
    #[error("the {role} command did not finish")]
    Run {
        /// `run`, `fix` or `check <id>`.
        role: String,
        /// What the runner reported (boxed: it carries the command's output tail).
        #[source]
        source: Box<RunError>,
    },
    /// The run was interrupted between commands.
    #[error("interrupted")]
    Interrupted,
    /// Anything else (a task with no fix command for its fix, kleene's own I/O).
    #[error("{0}")]
    Other(String),
}

impl AgentError for Stopped {
    fn kind(&self) -> AgentErrorKind {
        match self {
            Self::Run { source, .. } if source.is_interrupted() => AgentErrorKind::Cancelled,
            Self::Run { .. } => AgentErrorKind::Infrastructure,
            Self::Interrupted => AgentErrorKind::Cancelled,
            Self::Other(_) => AgentErrorKind::Other,
        }
    }
}

/// kleene's own storage failed during a call: the call is withdrawn, never counted.
fn unavailable(what: &str, err: impl std::fmt::Display) -> WorkerFailure {
    WorkerFailure::Unavailable {
        detail: format!("{what}: {err}"),
    }
}

impl<'a> ShellAgent<'a> {
    /// The agent of worker slot `slot` over `ctx`, reporting to `rep`, staging from `store`.
    pub fn new(
        ctx: &'a Context,
        rep: Arc<Mutex<Reporter>>,
        store: &'a ObjectStore,
        slot: usize,
    ) -> Self {
        Self {
            ctx,
            rep,
            store,
            slot,
            file_digests: HashMap::new(),
            spare: None,
            stages_made: 0,
            current: None,
        }
    }

    /// Opens the run's object store in the state directory.
    ///
    /// # Errors
    ///
    /// When the store cannot be opened.
    pub fn open_store(ctx: &Context) -> Result<ObjectStore, StateError> {
        let objects = ctx.state.objects_dir();
        ObjectStore::open(&objects).map_err(|e| StateError::Corrupt {
            path: objects,
            message: Chain(&e).to_string(),
        })
    }

    fn say(&self, text: &str) {
        self.rep
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .say(text);
    }

    fn emit(&self, event: Event) {
        self.rep
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .emit(&event);
    }

    fn commands(&self) -> Option<&'a TaskCommands> {
        let ctx = self.ctx;
        self.current
            .as_ref()
            .and_then(|c| ctx.commands.get(&c.task))
    }

    fn state(&mut self) -> Result<&mut CallState, Stopped> {
        self.current
            .as_mut()
            .ok_or_else(|| Stopped::Other("no call is under way".to_owned()))
    }

    /// The call's stage, holding its task's transitive prerequisites' accepted outputs.
    fn stage(&mut self, call: &WorkerCall<'_>) -> Result<Stage, WorkerFailure> {
        let inputs = call.inputs();
        let mut digests = Vec::with_capacity(inputs.len());
        for (_, output) in &inputs {
            let files = self.file_digests.entry(output.digest()).or_insert_with(|| {
                Arc::new(
                    output
                        .files()
                        .values()
                        .map(|c| Digest::from(blake3::hash(c)))
                        .collect(),
                )
            });
            digests.push(Arc::clone(files));
        }
        let staged = inputs
            .iter()
            .zip(&digests)
            .flat_map(|((_, output), digests)| {
                output
                    .files()
                    .iter()
                    .zip(digests.iter())
                    .map(|((path, content), d)| StageInput::with_digest(path, content, *d))
            });
        if let Some(spare) = self.spare.take() {
            let inputs: Vec<StageInput<'_>> = staged.collect();
            match spare.reuse(self.store, inputs.iter().copied()) {
                Ok(stage) => return Ok(stage),
                // A stage that cannot be swept is removed; a fresh one follows.
                Err(_) => return self.fresh_stage(inputs),
            }
        }
        let inputs: Vec<StageInput<'_>> = staged.collect();
        self.fresh_stage(inputs)
    }

    /// A new stage directory holding `inputs`.
    fn fresh_stage(&mut self, inputs: Vec<StageInput<'_>>) -> Result<Stage, WorkerFailure> {
        let name = if self.ctx.commands_can_outlive_calls {
            self.stages_made += 1;
            format!(
                "call-{}.{}-{}",
                self.slot,
                std::process::id(),
                self.stages_made
            )
        } else {
            format!("call-{}", self.slot)
        };
        let root = self.ctx.state.stages_dir().join(name);
        // A stage left by a crashed run holds nothing anyone needs: its call was never
        // settled, and a resume makes the call again from a fresh stage.
        remove_stage(&root).map_err(|e| unavailable("remove a stale stage", Chain(&e)))?;
        Stage::prepare(root, self.store, inputs)
            .map_err(|e| unavailable("stage the call", Chain(&e)))
    }
}

impl Drop for ShellAgent<'_> {
    fn drop(&mut self) {
        // The last stage holds nothing that is not in the journal and the workspace.
        for stage in [self.spare.take(), self.current.take().map(|c| c.stage)]
            .into_iter()
            .flatten()
        {
            let _ = stage.discard();
        }
    }
}

impl BatchAgent for ShellAgent<'_> {
    fn begin_call(&mut self, call: &WorkerCall<'_>) -> Result<(), WorkerFailure> {
        let task = call.task();
        if self.ctx.interrupt.is_set() {
            return Err(WorkerFailure::Cancelled);
        }
        self.emit(Event::TaskStarted {
            task: task.id.to_string(),
            call: call.attempt(),
        });
        let stage = self.stage(call)?;
        self.current = Some(CallState {
            task: task.id.clone(),
            call: call.attempt(),
            stage,
            correction: call
                .correction()
                .map(|c| correction_text(task, c.rejection(), c.candidate())),
            exec_failure: None,
            own_io: None,
            prepared_fix: None,
        });
        Ok(())
    }

    fn fixes(&self, task: &PlannedTask) -> bool {
        self.ctx
            .commands
            .get(&task.id)
            .is_some_and(|c| c.fix.is_some())
    }

    fn prepare_fix(&mut self, _call: &WorkerCall<'_>, fix: &Task) -> Result<(), WorkerFailure> {
        let ctx = self.ctx;
        let state = self
            .state()
            .map_err(|e| unavailable("prepare the fix", e))?;
        // A failure on a disk this full most likely came from it (a command's output cut
        // short), and no fix can mend that: the call is withdrawn before the attempt is
        // spent, as a failed call is when it ends on a full disk.
        if let Some(free) = state.stage.nearly_full() {
            return Err(full_disk(ctx, free));
        }
        // The spec file is written before the attempt is drawn too: a disk too full for it
        // stops the call before the fix could run.
        let path = self
            .spec_file(fix, &spec_text(fix.spec()))
            .map_err(|e| unavailable("kleene could not write its own files", e))?;
        let state = self
            .state()
            .map_err(|e| unavailable("prepare the fix", e))?;
        state.prepared_fix = Some((fix.id().clone(), path));
        Ok(())
    }

    fn audited(&mut self, call: &WorkerCall<'_>, entry: &AuditEntry) {
        if let AuditEvent::SubtaskSpawned {
            task_ref,
            depth,
            triggering_validators,
            ..
        } = entry.event()
        {
            self.emit(Event::FixSpawned {
                task: call.task().id.to_string(),
                fix: task_ref.to_string(),
                depth: *depth,
                triggering: triggering_validators
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
            });
        }
    }

    fn finish_call(
        &mut self,
        call: &WorkerCall<'_>,
        record: &ClosureRecord,
    ) -> Result<Proposal, WorkerFailure> {
        let task = call.task();
        let Some(state) = self.current.take() else {
            return Err(unavailable("finish the call", "it never started"));
        };
        let full = (!record.outcome().is_resolved())
            .then(|| state.stage.nearly_full())
            .flatten();
        let changes = self.settle_stage(&task.id, state.stage);
        if let Some(detail) = state.own_io {
            // The closure stopped before the fix it spawned could run: the call is withdrawn,
            // and so is its record (a resume makes the call again).
            return Err(WorkerFailure::Unavailable { detail });
        }
        // A call that failed while the disk holding its stage was full most likely failed
        // because of it: the host failed, not the task, so the call is withdrawn, before its
        // record is saved (the call is made again under the same number).
        if let Some(free) = full {
            return Err(full_disk(self.ctx, free));
        }
        let changes = changes.map_err(|e| unavailable("read the call's stage", Chain(&e)))?;
        // The record is the call's audit trail for people (`kleene audit`), bound by the
        // journal's digest: a call whose record cannot be saved is withdrawn too, so no
        // settled call lacks it. Saved last, once nothing else can withdraw the call.
        self.ctx
            .state
            .append_closure(&task.id, call.attempt(), record)
            .map_err(|e| unavailable("kleene could not write its own files", Chain(&e)))?;
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

    fn withdraw_call(&mut self, call: &WorkerCall<'_>, _: &ClosureRecord, _: &WorkerFailure) {
        // The stage is settled as a finished call's is; no record is saved, since the call
        // made again under this number saves its own.
        if let Some(state) = self.current.take() {
            let _ = self.settle_stage(&call.task().id, state.stage);
        }
    }
}

impl ShellAgent<'_> {
    /// What the call changed in `stage`, which is then kept for the next call (or removed
    /// when it cannot be read). The stage is walked whatever the outcome: an input damaged
    /// in place must be dropped from the store before any later stage links it. One refused
    /// unread as too large is not seen, so it counts as deleted: those are dropped too.
    fn settle_stage(&mut self, task: &TaskId, stage: Stage) -> Result<StageChanges, StageError> {
        let changes = stage.changes_within(&self.ctx.scratch_for(task), MAX_CALL_OUTPUT_BYTES);
        if let Ok(changes) = &changes {
            for path in changes.written().keys().chain(changes.deleted()) {
                if let Some(digest) = stage.input_digest(path) {
                    let _ = self.store.forget(&digest);
                }
            }
        }
        // Kept for the next call, which turns it into its own stage, unless it cannot be
        // read or a command of this call may still be writing into it.
        if changes.is_ok() && !self.ctx.commands_can_outlive_calls {
            self.spare = Some(stage);
        } else if let Err(err) = stage.discard() {
            self.say(&format!(
                "warning: failed to remove a stage: {}",
                Chain(&err)
            ));
        }
        changes
    }

    fn timeout(&self) -> Duration {
        self.commands()
            .and_then(|c| c.timeout)
            .unwrap_or(self.ctx.default_timeout)
    }

    fn run(
        &mut self,
        task: &Task,
        role: &str,
        command: &str,
        stdin: Option<(&str, PathBuf)>,
    ) -> Result<Finished, Stopped> {
        let timeout = self.timeout();
        let ctx = self.ctx;
        let state = self.state()?;
        let root_task = state.task.to_string();
        self.emit(Event::CommandStarted {
            task: task.id().to_string(),
            root_task: root_task.clone(),
            role: role.to_owned(),
            command: command.to_owned(),
        });
        let state = self.state()?;
        let dir = state.stage.root().to_owned();
        let mut env = vec![
            ("KLEENE_PLAN_DIR", ctx.plan_dir.display().to_string()),
            ("KLEENE_WORKSPACE", dir.display().to_string()),
            ("KLEENE_CACHE_DIR", ctx.cache_dir.display().to_string()),
            ("KLEENE_TASK", state.task.to_string()),
            ("KLEENE_SUBTASK", task.id().to_string()),
            ("KLEENE_DEPTH", task.depth().to_string()),
            ("KLEENE_CALL", state.call.to_string()),
        ];
        if let Some((_, path)) = &stdin {
            env.push(("KLEENE_RECOVERY_SPEC_FILE", path.display().to_string()));
        }
        let inv = Invocation {
            command,
            dir: &dir,
            timeout,
            stdin: stdin.as_ref().map(|(text, _)| text.as_bytes()),
            env,
            limits: TailLimits::default(),
            records: Some((
                &ctx.records,
                format!("task {} call {}", state.task, state.call),
            )),
        };
        let done = process::run(&inv, &ctx.interrupt).map_err(|source| Stopped::Run {
            role: role.to_owned(),
            source: Box::new(source),
        })?;
        self.emit(Event::CommandFinished {
            task: task.id().to_string(),
            root_task,
            role: role.to_owned(),
            status: done.status_text(),
        });
        Ok(done)
    }

    fn spec_file(&mut self, task: &Task, text: &str) -> Result<PathBuf, Stopped> {
        let ctx = self.ctx;
        let state = self.state()?;
        let path = ctx
            .state
            .specs_dir()
            .join(format!("{}.call{}.md", task.id(), state.call));
        // A spec kleene cannot write (a full disk) is kleene's failure, not the task's: the
        // call is withdrawn and never counted.
        if let Err(e) = write_replace(&path, text.as_bytes()) {
            state.own_io = Some(format!(
                "kleene could not write its own files: {}",
                Chain(&e)
            ));
            return Err(Stopped::Other(Chain(&e).to_string()));
        }
        // The state directory is absolute here, so the path holds in any directory.
        Ok(path)
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
            return Err(Stopped::Interrupted);
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
        let state = self.state()?;
        state.exec_failure = None;
        let correction = state.correction.clone();
        let root = state.task.clone();
        let Some(commands) = self.commands() else {
            // A lane the plan only declares (for example a synthesised module lane) runs
            // nothing; its candidate is empty.
            return Ok(ExecutionOutput::new("nothing to run"));
        };
        let (role, command, spec) = if task.depth() > 0 {
            ("fix", commands.fix.clone(), Some(spec_text(task.spec())))
        } else if let Some(correction) = correction {
            // A corrective call (a retry, or batch recovery): the fixer gets the exact
            // rejection; a task without one runs again with it on stdin.
            match &commands.fix {
                Some(fix) => ("fix", Some(fix.clone()), Some(correction)),
                None => ("run", Some(commands.run.clone()), Some(correction)),
            }
        } else {
            ("run", Some(commands.run.clone()), None)
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
        let mut results: Vec<ValidatorResult> =
            self.state()?.exec_failure.take().into_iter().collect();
        let checks = self.commands().map_or(&[][..], |c| &c.checks[..]);
        for check in checks {
            let done = self.run(task, &format!("check {}", check.id), &check.command, None)?;
            if done.success() {
                results.push(ValidatorResult::pass(check.id.clone()));
            } else {
                let root_task = self.state()?.task.to_string();
                self.emit(Event::CheckFailed {
                    task: task.id().to_string(),
                    root_task,
                    check: check.id.to_string(),
                    severity: check.severity.to_string(),
                    status: done.status_text(),
                });
                results.push(ValidatorResult::new(
                    check.id.clone(),
                    check.severity,
                    check.overridable,
                    done.justification(&check.command),
                ));
            }
        }
        Ok(Verdict::new(results))
    }
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

/// The withdrawal of a call whose stages' file system has only `free` bytes left.
fn full_disk(ctx: &Context, free: u64) -> WorkerFailure {
    WorkerFailure::Unavailable {
        detail: format!(
            "the file system holding {} has only {free} bytes free; free some space",
            ctx.state.stages_dir().display()
        ),
    }
}

/// The bytes a call may write outside its scratch: a candidate is held in memory, journaled
/// and archived, so a task that leaves gigabytes of build output in its owned paths is
/// refused with the file named (mark it as scratch) instead of exhausting memory.
const MAX_CALL_OUTPUT_BYTES: u64 = 1 << 30;
