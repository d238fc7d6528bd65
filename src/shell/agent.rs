//! The shell agent: each task call is one closure over the task's commands, in the call's
//! own staged workspace.
//!
//! ```no_run
//! use std::path::Path;
//! use std::sync::Arc;
//! use kleene::batch::{Batch, ClosureWorker, MemoryJournal};
//! use kleene::shell::{self, ShellPlan, ShellRuntime};
//!
//! let (plan, _text) = ShellPlan::read(Path::new("examples/demo/plan.json"), &[])?;
//! let channel = plan.default_channel()?;
//! let runtime = ShellRuntime::new(plan, Path::new("/tmp/kleene-work"))?;
//! let mut worker = ClosureWorker::new(runtime.agent("local"), shell::session(&channel)?,
//!                                     shell::default_policy());
//! let outcome = Batch::new(runtime.plan().plan(), channel)
//!     .run(&mut worker, &(), &mut MemoryJournal::default())?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A call's stage holds the accepted outputs of the task's transitive prerequisites and
//! nothing else; `run`, the checks and every `fix` of the call's closure run there, so the
//! files the checks ran against are exactly the candidate plus its inputs. The candidate is
//! what the call created or changed in the stage (scratch paths aside); a deleted input, a
//! symlink, a special file or a name kleene cannot admit refuses the call, named.
//!
//! `run` is the closure's execution, `checks` its post-validation (a failed check keeps the
//! bounded output tail as its justification), and `fix` the execution of every fix subtask,
//! fed the rendered recovery spec on stdin and in `KLEENE_RECOVERY_SPEC_FILE`. A command that
//! cannot run (missing, not executable, timed out) is an infrastructure failure, and an
//! interrupt cancels the call: neither is ever handed to a fixer.

use foldhash::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use super::planfile::{TaskCommands, TaskSandbox};
use super::text::{correction_text, spec_text};
use crate::batch::reservation::Reservation;
use crate::batch::{BatchAgent, Candidate, Proposal, Rejection, WorkerCall, WorkerFailure};
use crate::closure::audit::{AuditEntry, AuditEvent};
use crate::closure::{
    Agent, AgentError, AgentErrorKind, ClosureRecord, ExecutionOutput, GovernanceDecision,
    Severity, Task, ValidatorResult, Verdict, step::Session, step::ValidationToken,
    verdict::TailLimits,
};
use crate::id::{Digest, TaskId, ValidatorId};
use crate::plan::{AdmittedPath, PlannedTask};
use crate::process::sandbox::Sandbox;
use crate::process::{self, Finished, Invocation, RunError};
use crate::stage::{Stage, StageChanges, StageError, StageInput, remove_stage};
use crate::text::Chain;

use super::runtime::*;

/// The agent: runs a call's commands in its stage and proposes what the stage holds after.
#[derive(Debug)]
pub struct ShellAgent<'a> {
    rt: &'a ShellRuntime,
    /// Names this agent's stages apart from other agents' on the same runtime.
    slot: String,
    /// Each accepted output's file digests, in the order its files iterate: hashed once per
    /// agent, and matched to the files by position, not looked up by path.
    file_digests: HashMap<Digest, Arc<Vec<Digest>>>,
    /// The last call's stage, turned into the next call's by [`Stage::reuse`]: in a chain,
    /// a call then pays for the files that changed, not for linking every input again.
    spare: Option<Stage>,
    /// The call under way.
    current: Option<CallState>,
    /// The record of the last call that finished.
    last_record: Option<ClosureRecord>,
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
    /// Whether every command of the call so far was proved to leave nothing running: the
    /// stage is then quiet, and the next call may turn it into its own.
    left_nothing_running: bool,
    /// The call's reservation, which its first command waits for (while its shell loads).
    reservation: Reservation,
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
pub(super) fn unavailable(what: &str, err: impl std::fmt::Display) -> WorkerFailure {
    WorkerFailure::Unavailable {
        detail: format!("{what}: {err}"),
    }
}

impl<'a> ShellAgent<'a> {
    /// An agent over `rt` whose stages are named after `slot`.
    pub(super) fn new(rt: &'a ShellRuntime, slot: String) -> Self {
        Self {
            rt,
            slot,
            file_digests: HashMap::default(),
            spare: None,
            current: None,
            last_record: None,
        }
    }

    /// The record of the last call it finished, taken.
    pub(super) fn take_last_record(&mut self) -> Option<ClosureRecord> {
        self.last_record.take()
    }

    fn say(&self, text: &str) {
        self.rt.observer.event(ShellEvent::Warning(text.to_owned()));
    }

    fn emit(&self, event: ShellEvent) {
        self.rt.observer.event(event);
    }

    fn commands(&self) -> Option<&'a TaskCommands> {
        let rt = self.rt;
        self.current.as_ref().and_then(|c| rt.plan.command(&c.task))
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
        // The plan's base under everything: a prerequisite's accepted file at one of its
        // paths is the one staged.
        let base = self
            .rt
            .base_files()
            .map_err(|e| unavailable("read the plan's files", e))?;
        let accepted: HashSet<&AdmittedPath> = inputs
            .iter()
            .flat_map(|(_, output)| output.files().keys())
            .collect();
        // A task that names its inputs is keyed by those alone, so its stage holds those
        // alone: it cannot read a bound file its key does not cover.
        let named = self
            .rt
            .plan
            .command(&call.task().id)
            .and_then(|c| c.inputs.as_deref());
        let staged = base
            .iter()
            .filter(|(path, _, _)| !accepted.contains(path))
            .filter(|(path, _, _)| {
                named.is_none_or(|globs| globs.iter().any(|g| g.matches(path.as_str())))
            })
            .map(|(path, content, d)| StageInput::with_digest(path, content, *d))
            .chain(
                inputs
                    .iter()
                    .zip(&digests)
                    .flat_map(|((_, output), digests)| {
                        output
                            .files()
                            .iter()
                            .zip(digests.iter())
                            .map(|((path, content), d)| StageInput::with_digest(path, content, *d))
                    }),
            );
        if let Some(spare) = self.spare.take() {
            let inputs: Vec<StageInput<'_>> = staged.collect();
            match spare.reuse(&self.rt.store, inputs.iter().copied()) {
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
        let name = if self.rt.commands_can_outlive_calls {
            // Numbered by the runtime, not the agent: a later pass's agent of the same slot
            // never names a stage as an earlier one did.
            let made = self.rt.stages_made.fetch_add(1, Ordering::Relaxed) + 1;
            format!("call-{}.{}-{made}", self.slot, std::process::id())
        } else {
            format!("call-{}", self.slot)
        };
        let root = self.rt.stages.join(name);
        // A stage left by a crashed run holds nothing anyone needs: its call was never
        // settled, and a resume makes the call again from a fresh stage.
        remove_stage(&root).map_err(|e| unavailable("remove a stale stage", Chain(&e)))?;
        Stage::prepare(root, &self.rt.store, inputs)
            .map_err(|e| unavailable("stage the call", Chain(&e)))
    }
}

impl Drop for ShellAgent<'_> {
    fn drop(&mut self) {
        if self.rt.leave_last_stages {
            // Only a stage kept for a next call is quiet; one a call still held may not be.
            if let Some(spare) = &self.spare {
                self.rt
                    .quiet_stages
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(spare.root().to_owned());
            }
            return;
        }
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
        if self.rt.interrupt.is_set() {
            return Err(WorkerFailure::Cancelled);
        }
        self.emit(ShellEvent::CallStarted {
            task: task.id.clone(),
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
            left_nothing_running: true,
            reservation: call.reservation(),
        });
        Ok(())
    }

    fn waits_for_reservation(&self) -> bool {
        // Only commands act, and every command waits for the reservation before its first
        // line: making the stage is kleene's own work, which a resume finds and replaces.
        true
    }

    fn fixes(&self, task: &PlannedTask) -> bool {
        self.rt
            .plan
            .command(&task.id)
            .is_some_and(|c| c.fix.is_some())
    }

    fn prepare_fix(&mut self, _call: &WorkerCall<'_>, fix: &Task) -> Result<(), WorkerFailure> {
        let rt = self.rt;
        let state = self
            .state()
            .map_err(|e| unavailable("prepare the fix", e))?;
        // A failure on a disk this full most likely came from it (a command's output cut
        // short), and no fix can mend that: the call is withdrawn before the attempt is
        // spent, as a failed call is when it ends on a full disk.
        if let Some(free) = state.stage.nearly_full() {
            return Err(full_disk(rt, free));
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
            self.emit(ShellEvent::FixSpawned {
                task: call.task().id.clone(),
                fix: task_ref.clone(),
                depth: *depth,
                triggering: triggering_validators.clone(),
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
        let changes = self.settle_stage(&task.id, state.stage, state.left_nothing_running);
        if let Some(detail) = state.own_io {
            // The closure stopped before the fix it spawned could run: the call is withdrawn,
            // and so is its record (a resume makes the call again).
            return Err(WorkerFailure::Unavailable { detail });
        }
        // A call that failed while the disk holding its stage was full most likely failed
        // because of it: the host failed, not the task, so the call is withdrawn, before its
        // record is saved (the call is made again under the same number).
        if let Some(free) = full {
            return Err(full_disk(self.rt, free));
        }
        let changes = changes.map_err(|e| unavailable("read the call's stage", Chain(&e)))?;
        // The record is the call's audit trail for people (`kleene audit`), bound by the
        // journal's digest: a call whose record cannot be saved is withdrawn too, so no
        // settled call lacks it. Saved last, once nothing else can withdraw the call.
        self.rt
            .observer
            .call_ended(&task.id, call.attempt(), record)
            .map_err(|e| unavailable("kleene could not write its own files", e))?;
        self.last_record = Some(record.clone());
        let refusal = changes.refusal_summary();
        let deleted: HashSet<AdmittedPath> = changes.deleted().iter().cloned().collect();
        let mut written = changes.into_written();
        // What the task owns of the plan's base and left as it was is its output too: it
        // owns those files, and what it leaves there is what it stands behind (a task that
        // finds its file already right changes nothing and is still accepted with it). A
        // prerequisite's accepted file at the path was staged instead, and is not the base.
        if let Ok(base) = self.rt.base_files() {
            let accepted: HashSet<&AdmittedPath> = call
                .inputs()
                .into_iter()
                .flat_map(|(_, output)| output.files().keys())
                .collect();
            for (path, content, _) in base.iter() {
                if task.owns(path)
                    && !written.contains_key(path)
                    && !deleted.contains(path)
                    && !accepted.contains(path)
                {
                    written.insert(path.clone(), content.clone());
                }
            }
        }
        let candidate = Candidate::new(written);
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
            let _ = self.settle_stage(&call.task().id, state.stage, state.left_nothing_running);
        }
    }
}

impl ShellAgent<'_> {
    /// What the call changed in `stage`, which is then kept for the next call (or removed
    /// when it cannot be read). The stage is walked whatever the outcome: an input damaged
    /// in place must be dropped from the store before any later stage links it. One refused
    /// unread as too large is not seen, so it counts as deleted: those are dropped too.
    fn settle_stage(
        &mut self,
        task: &TaskId,
        stage: Stage,
        left_nothing_running: bool,
    ) -> Result<StageChanges, StageError> {
        let changes =
            stage.changes_within(&self.rt.scratch_for(task), self.rt.max_call_output_bytes);
        if let Ok(changes) = &changes {
            for path in changes.written().keys().chain(changes.deleted()) {
                if let Some(digest) = stage.input_digest(path) {
                    let _ = self.rt.store.forget(&digest);
                }
            }
        }
        // Kept for the next call, which turns it into its own stage, unless it cannot be
        // read or a command of this call may still be writing into it.
        if changes.is_ok() && left_nothing_running {
            self.spare = Some(stage);
        } else if let Err(err) = stage.discard_linked_from(&self.rt.store) {
            self.say(&format!("failed to remove a stage: {}", Chain(&err)));
        }
        changes
    }

    fn timeout(&self) -> Duration {
        self.commands()
            .and_then(|c| c.timeout)
            .unwrap_or(self.rt.default_timeout)
    }

    fn run(
        &mut self,
        task: &Task,
        role: &str,
        command: &str,
        stdin: Option<(&str, PathBuf)>,
    ) -> Result<Finished, Stopped> {
        let timeout = self.timeout();
        let rt = self.rt;
        let state = self.state()?;
        let root_task = state.task.clone();
        self.emit(ShellEvent::CommandStarted {
            task: task.id().clone(),
            root_task: root_task.clone(),
            role: role.to_owned(),
            command: command.to_owned(),
        });
        let state = self.state()?;
        let dir = state.stage.root().to_owned();
        let mut env = vec![
            ("KLEENE_PLAN_DIR", rt.plan_dir.display().to_string()),
            ("KLEENE_WORKSPACE", dir.display().to_string()),
            ("KLEENE_CACHE_DIR", rt.cache.display().to_string()),
            ("KLEENE_TASK", state.task.to_string()),
            ("KLEENE_SUBTASK", task.id().to_string()),
            ("KLEENE_DEPTH", task.depth().to_string()),
            ("KLEENE_CALL", state.call.to_string()),
        ];
        if let Some((_, path)) = &stdin {
            env.push(("KLEENE_RECOVERY_SPEC_FILE", path.display().to_string()));
        }
        let sandbox = match (rt.confine, self.commands().map(|c| &c.sandbox)) {
            (false, _) | (true, Some(TaskSandbox::Off)) => None,
            (true, declared) => {
                let mut sandbox = Sandbox::new()
                    .writing(&dir)
                    .writing(&rt.cache)
                    .reading(&rt.plan_dir);
                if let Some((_, path)) = &stdin {
                    sandbox = sandbox.reading(path);
                }
                if let Some(TaskSandbox::Confined {
                    read,
                    write,
                    network,
                }) = declared
                {
                    sandbox = read.iter().fold(sandbox, |s, p| s.reading(p));
                    sandbox = write.iter().fold(sandbox, |s, p| s.writing(p));
                    if !network {
                        sandbox = sandbox.without_network();
                    }
                }
                Some(sandbox)
            }
        };
        // A stage lies in the project's work tree: git would find the project's repository
        // above it, which a confined command may not read (nor should change).
        if let (Some(_), Some(stages)) = (&sandbox, dir.parent()) {
            env.push(("GIT_CEILING_DIRECTORIES", stages.display().to_string()));
        }
        let state = self.state()?;
        let reservation = state.reservation.clone();
        let waits = !reservation.is_durable();
        let hold = move || reservation.wait_durable().is_ok();
        let inv = Invocation {
            command,
            dir: &dir,
            timeout,
            stdin: stdin.as_ref().map(|(text, _)| text.as_bytes()),
            env,
            limits: TailLimits::default(),
            records: rt
                .records
                .as_ref()
                .map(|r| (r, format!("task {} call {}", state.task, state.call))),
            hold: waits.then_some(&hold as &(dyn Fn() -> bool + Sync)),
            sandbox: sandbox.as_ref(),
        };
        let done = process::run(&inv, &rt.interrupt);
        // A command that did not finish was stopped as its containment stops everything, so
        // only process groups alone leave its stage in doubt.
        let left_nothing_running = done.as_ref().map_or(
            !rt.commands_can_outlive_calls,
            Finished::left_nothing_running,
        );
        if let Some(state) = self.current.as_mut() {
            state.left_nothing_running &= left_nothing_running;
        }
        let done = done.map_err(|source| Stopped::Run {
            role: role.to_owned(),
            source: Box::new(source),
        })?;
        self.emit(ShellEvent::CommandFinished {
            task: task.id().clone(),
            root_task,
            role: role.to_owned(),
            status: done.status_text(),
        });
        Ok(done)
    }

    fn spec_file(&mut self, task: &Task, text: &str) -> Result<PathBuf, Stopped> {
        let rt = self.rt;
        let state = self.state()?;
        let path = rt.specs.join(spec_file_name(task.id(), state.call));
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
        if self.rt.interrupt.is_set() {
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
        let mut text = format!(
            "{role}: `{command}` finished with {}\n{}",
            done.status_text(),
            done.tail.stdout()
        );
        // What a command says on stderr (a shell script's diagnostics, a fixer explaining
        // itself) is as much its output as stdout: the record keeps both bounded tails, so
        // `kleene audit` can show what a fix did.
        if !done.tail.stderr().is_empty() {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str("--- stderr (tail) ---\n");
            text.push_str(done.tail.stderr());
        }
        Ok(ExecutionOutput::new(text))
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
                let root_task = self.state()?.task.clone();
                self.emit(ShellEvent::CheckFailed {
                    task: task.id().clone(),
                    root_task,
                    check: check.id.clone(),
                    severity: check.severity,
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

/// The withdrawal of a call whose stages' file system has only `free` bytes left.
fn full_disk(rt: &ShellRuntime, free: u64) -> WorkerFailure {
    WorkerFailure::Unavailable {
        detail: format!(
            "the file system holding {} has only {free} bytes free; free some space",
            rt.stages.display()
        ),
    }
}

/// Writes `bytes` to `path` through a temporary file beside it and a rename, so a reader
/// never sees half a file (no fsync: a spec is rewritten whenever its call is made again).
/// The name of the spec file of `task`'s call number `call` in the specs directory: the
/// task id and the call (`billing_fix_1.call2.md`), one component of at most 255 bytes however
/// long the id is (see [`TaskId::file_name`]). Task ids are names, never paths, so the file
/// is always inside the specs directory.
fn spec_file_name(task: &TaskId, call: u32) -> String {
    task.file_name(&format!(".call{call}.md"))
}

fn write_replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    // Named apart from the file (a spec's name may already be 255 bytes, with no room for a
    // suffix) and from every other writer: the process and a count, since agents on
    // several threads write specs at once. Task ids never start with '.', so no spec is
    // ever named like this.
    let temp = path.with_file_name(format!(
        ".tmp-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&temp, bytes)?;
    std::fs::rename(&temp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temp);
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::spec_file_name;
    use crate::id::TaskId;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Whatever string a task id accepts, the spec file of any call of it (or of any
        /// of its fix ids) is one component of at most 255 bytes that stays in the specs
        /// directory.
        #[test]
        fn every_spec_file_is_one_name_in_the_specs_directory(
            s in proptest::prop_oneof![
                proptest::prelude::any::<String>(),
                "[./a\\\\\0é]{0,6}",
                "[a-zé][a-zé.]{100,255}",
            ],
            call in proptest::prelude::any::<u32>(),
            depth in 1..=u32::MAX,
        ) {
            let Ok(id) = TaskId::new(s) else { return Ok(()) };
            for id in std::iter::once(id.clone()).chain(id.fix_id(depth).ok()) {
                let name = spec_file_name(&id, call);
                proptest::prop_assert!(name.len() <= 255, "{} bytes", name.len());
                proptest::prop_assert!(!name.contains(['/', '\0']), "{name:?}");
                proptest::prop_assert!(name != "." && name != "..", "{name:?}");
                let specs = Path::new("/state/specs");
                let path = specs.join(&name);
                proptest::prop_assert_eq!(path.parent(), Some(specs));
                proptest::prop_assert_eq!(path.file_name(), Some(name.as_ref()));
            }
        }
    }

    #[test]
    fn a_short_id_names_its_spec_as_before() {
        let id = TaskId::new("billing_service_fix_1").unwrap();
        assert_eq!(spec_file_name(&id, 1), "billing_service_fix_1.call1.md");
    }
}
