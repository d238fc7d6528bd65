//! What a shell run's calls share: the runtime (plan, store, work directory, policy), its
//! defaults, its events and their observer.
//!
//! ```no_run
//! use std::path::Path;
//! use kleene::shell::{ShellPlan, ShellRuntime};
//!
//! let (plan, _text) = ShellPlan::read(Path::new("examples/demo/plan.json"), &[])?;
//! let runtime = ShellRuntime::new(plan, Path::new("/tmp/kleene-work"))?
//!     .with_default_timeout(std::time::Duration::from_secs(60));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use super::agent::{ShellAgent, unavailable};
use super::planfile::ShellPlan;
use super::scratch::Scratch;
use crate::batch::{
    ClosureWorker, DispatchedCall, Proposal, WorkerFailure, candidate::AcceptedOutput,
    machine::Dispatch,
};
use crate::closure::{ClosureRecord, RecoveryPolicy, Severity, step::Session};
use crate::id::{ChannelId, Digest, IdError, TaskId, ValidatorId};
use crate::plan::AdmittedPath;
use crate::process::{self, Containment, GroupRecords, Interrupt};
use crate::stage::{ObjectStore, StageError};
use crate::text::Chain;

/// The recovery depth a shell run allows by default.
pub const DEFAULT_MAX_DEPTH: u32 = 3;
/// The run-wide fix attempts a shell run allows by default.
pub const DEFAULT_MAX_FIXES: u32 = 10;
/// The timeout of each command of a task that sets none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The bytes a call may write outside its scratch by default: a candidate is held in memory,
/// journaled and archived, so a task that leaves gigabytes of build output in its owned paths
/// is refused with the file named (mark it as scratch) instead of exhausting memory.
pub const DEFAULT_MAX_CALL_OUTPUT_BYTES: u64 = 1 << 30;

/// The recovery policy of a shell run's defaults (depth 3, 10 fixes, blockers only).
pub fn default_policy() -> RecoveryPolicy {
    RecoveryPolicy::builder()
        .max_recovery_depth(DEFAULT_MAX_DEPTH)
        .max_total_fix_attempts(DEFAULT_MAX_FIXES)
        .build()
        .unwrap_or_default()
}

/// The closure session of a shell run on `channel`: the same wherever its calls run, so a
/// run's audit trails do not depend on the driver.
///
/// # Errors
///
/// [`IdError`] when the channel is not a project name.
pub fn session(channel: &ChannelId) -> Result<Session, IdError> {
    Session::new("kleene-run", channel.to_string())
}

/// What a shell run tells its observer while calls run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShellEvent {
    /// A call of a task started.
    CallStarted {
        /// The task.
        task: TaskId,
        /// The call number.
        call: u32,
    },
    /// A closure spawned a fix subtask.
    FixSpawned {
        /// The task whose call it is.
        task: TaskId,
        /// The fix subtask.
        fix: TaskId,
        /// Its recovery depth.
        depth: u32,
        /// The checks whose failure it fixes.
        triggering: Vec<ValidatorId>,
    },
    /// A command started.
    CommandStarted {
        /// The task or fix subtask it runs for.
        task: TaskId,
        /// The task whose call it is.
        root_task: TaskId,
        /// `run`, `fix` or `check ID`.
        role: String,
        /// The shell command.
        command: String,
    },
    /// A command finished.
    CommandFinished {
        /// The task or fix subtask it ran for.
        task: TaskId,
        /// The task whose call it is.
        root_task: TaskId,
        /// `run`, `fix` or `check ID`.
        role: String,
        /// How it ended, in words.
        status: String,
    },
    /// A check failed.
    CheckFailed {
        /// The task or fix subtask it checked.
        task: TaskId,
        /// The task whose call it is.
        root_task: TaskId,
        /// The check.
        check: ValidatorId,
        /// Its severity.
        severity: Severity,
        /// How it ended, in words.
        status: String,
    },
    /// Something a person should know that changes no outcome (a stage left behind).
    Warning(String),
}

/// Sees a shell run's calls as they run, and keeps each finished call's record.
pub trait ShellObserver: Send + Sync + std::fmt::Debug {
    /// Told of each [`ShellEvent`]. Defaults to nothing.
    fn event(&self, event: ShellEvent) {
        let _ = event;
    }

    /// Told of every call whose closure ended (whatever it proposes), before its proposal
    /// is returned: keep the record (a closure log) here. An error withdraws the call, so no
    /// settled call lacks its record. Defaults to keeping nothing.
    ///
    /// # Errors
    ///
    /// Why the record could not be kept, in words.
    fn call_ended(&self, task: &TaskId, call: u32, record: &ClosureRecord) -> Result<(), String> {
        let _ = (task, call, record);
        Ok(())
    }
}

/// An observer that keeps nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl ShellObserver for Quiet {}

/// Why a shell runtime could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShellError {
    /// A directory could not be made.
    #[error("create {}", path.display())]
    Create {
        /// The directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The object store could not be opened.
    #[error("open the object store")]
    Store(#[source] StageError),
}

/// Everything the calls of one shell plan share, wherever they run: the plan and its
/// commands, where the plan's files are, where stages, specs and the build cache go, and how
/// commands are run.
#[derive(Debug)]
pub struct ShellRuntime {
    pub(super) plan: ShellPlan,
    pub(super) plan_dir: PathBuf,
    pub(super) store: Arc<ObjectStore>,
    pub(super) stages: PathBuf,
    pub(super) specs: PathBuf,
    pub(super) cache: PathBuf,
    pub(super) default_timeout: Duration,
    pub(super) interrupt: Interrupt,
    pub(super) records: Option<GroupRecords>,
    /// Whether commands are contained by process groups alone, so that a call's stage is
    /// handed on only when its commands are proved to have left nothing running.
    pub(super) commands_can_outlive_calls: bool,
    pub(super) max_call_output_bytes: u64,
    pub(super) observer: Arc<dyn ShellObserver>,
    pub(super) leave_last_stages: bool,
    /// Whether commands run in the sandbox their task's `sandbox` key describes (the
    /// default), or all unconfined.
    pub(super) confine: bool,
    /// The stages agents left as they were dropped that nothing can still write into.
    pub(super) quiet_stages: Mutex<Vec<PathBuf>>,
    /// Stages made so far, naming each one apart when commands can outlive their calls (a
    /// stage a call may still be writing into is never handed on, and never named again).
    pub(super) stages_made: AtomicU64,
    /// The files every call's stage starts from (the plan's base), read once.
    base: OnceLock<Result<Arc<BaseFiles>, String>>,
}

/// The files of a plan's base, by path, with their bytes and digests.
pub(super) type BaseFiles = Vec<(AdmittedPath, Vec<u8>, Digest)>;

impl ShellRuntime {
    /// The runtime of `plan`, keeping its objects, stages, specs and build cache under
    /// `work` (made absolute, so every path a command is given holds after it changes
    /// directory). Commands find the plan's files in the current directory until
    /// [`with_plan_dir`](Self::with_plan_dir) names the copy they run from.
    ///
    /// # Errors
    ///
    /// [`ShellError`] when the directories or the object store cannot be made.
    pub fn new(plan: ShellPlan, work: &Path) -> Result<Self, ShellError> {
        let work = absolute(work)?;
        let store = ObjectStore::open(work.join("objects")).map_err(ShellError::Store)?;
        Self::with_shared_store(plan, &work, Arc::new(store))
    }

    /// As [`new`](Self::new), with stages linking their inputs from `store`, shared with
    /// other runtimes (a worker's runtime per channel over one store): `work` gets no store
    /// of its own.
    ///
    /// # Errors
    ///
    /// [`ShellError`] when the directories cannot be made.
    pub fn with_shared_store(
        plan: ShellPlan,
        work: &Path,
        store: Arc<ObjectStore>,
    ) -> Result<Self, ShellError> {
        let create = |path: PathBuf| {
            std::fs::create_dir_all(&path)
                .map(|()| path.clone())
                .map_err(|source| ShellError::Create { path, source })
        };
        let work = absolute(work)?;
        Ok(Self {
            plan,
            plan_dir: std::path::absolute(".").unwrap_or_default(),
            store,
            stages: create(work.join("stages"))?,
            specs: create(work.join("specs"))?,
            cache: create(work.join("cache"))?,
            default_timeout: DEFAULT_TIMEOUT,
            interrupt: Interrupt::default(),
            records: None,
            commands_can_outlive_calls: process::containment() == Containment::ProcessGroup,
            max_call_output_bytes: DEFAULT_MAX_CALL_OUTPUT_BYTES,
            observer: Arc::new(Quiet),
            leave_last_stages: false,
            confine: true,
            quiet_stages: Mutex::new(Vec::new()),
            stages_made: AtomicU64::new(0),
            base: OnceLock::new(),
        })
    }

    /// The files every call's stage starts from: none for a plan whose base is
    /// [`Base::Empty`](super::Base::Empty) or that binds no files; otherwise every file the
    /// plan binds, its bytes held by the plan or read from the plan's directory
    /// ([`with_plan_dir`](Self::with_plan_dir)) and checked against their digests.
    pub(super) fn base_files(&self) -> Result<Arc<BaseFiles>, String> {
        self.base
            .get_or_init(|| {
                let files = match (self.plan.base(), self.plan.files()) {
                    (super::Base::Project, Some(files)) => files.clone(),
                    _ => return Ok(Arc::new(Vec::new())),
                };
                let files = files
                    .with_bytes_from(&self.plan_dir)
                    .map_err(|e| Chain(&e).to_string())?;
                Ok(Arc::new(
                    files
                        .iter()
                        .filter_map(|(path, digest)| {
                            files
                                .bytes(path)
                                .map(|b| (path.clone(), b.to_vec(), *digest))
                        })
                        .collect(),
                ))
            })
            .clone()
    }

    /// Commands run unconfined, whatever their tasks' `sandbox` keys say (by default each
    /// runs in a sandbox that lets it write only its stage, its scratch and a private
    /// `TMPDIR`: see [`crate::process::sandbox`]).
    #[must_use]
    pub fn without_sandbox(self) -> Self {
        self.confining_commands(false)
    }

    /// Commands run confined (`true`, the default) or not: see
    /// [`without_sandbox`](Self::without_sandbox).
    #[must_use]
    pub fn confining_commands(mut self, confine: bool) -> Self {
        self.confine = confine;
        self
    }

    /// Whether commands run confined (see [`without_sandbox`](Self::without_sandbox)).
    pub fn confines_commands(&self) -> bool {
        self.confine
    }

    /// Commands find the plan's files in `dir` (`KLEENE_PLAN_DIR`, made absolute).
    #[must_use]
    pub fn with_plan_dir(mut self, dir: &Path) -> Self {
        self.plan_dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_owned());
        self
    }

    /// Each command of a task that sets no `timeout_secs` may run this long.
    #[must_use]
    pub fn with_default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = timeout;
        self
    }

    /// Commands stop, and calls are cancelled, when `interrupt` is set.
    #[must_use]
    pub fn with_interrupt(mut self, interrupt: Interrupt) -> Self {
        self.interrupt = interrupt;
        self
    }

    /// Every running process group is recorded in `records` (so a later run can refuse to
    /// start while one is alive).
    #[must_use]
    pub fn with_group_records(mut self, records: GroupRecords) -> Self {
        self.records = Some(records);
        self
    }

    /// `observer` sees the calls and keeps their records.
    #[must_use]
    pub fn with_observer(mut self, observer: Arc<dyn ShellObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// A call may write at most `bytes` outside its scratch.
    #[must_use]
    pub fn with_max_call_output_bytes(mut self, bytes: u64) -> Self {
        self.max_call_output_bytes = bytes;
        self
    }

    /// The stages an agent holds when it is dropped are left in
    /// [`stages_dir`](Self::stages_dir) instead of removed then, for the caller to remove
    /// when it suits it: removing a stage of many files costs about as much as writing
    /// them, and the `kleene` binary does it on another thread while it writes the
    /// workspace. (They hold nothing that is not in the journal.) Those a caller may move
    /// files out of are [`quiet_last_stages`](Self::quiet_last_stages).
    #[must_use]
    pub fn leaving_last_stages(mut self) -> Self {
        self.leave_last_stages = true;
        self
    }

    /// The plan.
    pub fn plan(&self) -> &ShellPlan {
        &self.plan
    }

    /// Where the stages are made.
    pub fn stages_dir(&self) -> &Path {
        &self.stages
    }

    /// The stages agents left in [`stages_dir`](Self::stages_dir) as they were dropped (see
    /// [`leaving_last_stages`](Self::leaving_last_stages)) that nothing a command started can
    /// still write into: each one its last call handed on, which under process groups alone
    /// means its commands were proved to have left nothing running. Files may be moved out of
    /// these whole; anything else in the directory is for removing only.
    pub fn quiet_last_stages(&self) -> Vec<PathBuf> {
        self.quiet_stages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Where recovery specs are written.
    pub fn specs_dir(&self) -> &Path {
        &self.specs
    }

    /// The interrupt commands watch.
    pub fn interrupt(&self) -> &Interrupt {
        &self.interrupt
    }

    /// An agent whose stages are named after `slot` (unique among the agents in flight on
    /// this runtime's stages directory).
    pub fn agent(&self, slot: impl Into<String>) -> ShellAgent<'_> {
        ShellAgent::new(self, slot.into())
    }

    /// Makes one call a batch machine reserved elsewhere, as [`Batch::run`] would make it:
    /// stages `inputs` (the accepted outputs of the task's transitive prerequisites, each
    /// verified against its digest), runs the task's closure under `policy` with `draw`
    /// recording each fix attempt durably before the fix runs, and returns the proposal with
    /// the closure's record.
    ///
    /// [`Batch::run`]: crate::batch::Batch::run
    pub fn run_dispatch(
        &self,
        channel: &ChannelId,
        dispatch: &Dispatch,
        inputs: &[(TaskId, AcceptedOutput)],
        policy: &RecoveryPolicy,
        draw: &mut dyn FnMut(&TaskId) -> Result<(), String>,
    ) -> DispatchOutcome {
        let session = match session(channel) {
            Ok(s) => s,
            Err(e) => {
                return DispatchOutcome {
                    result: Err(unavailable("open the closure session", e)),
                    record: None,
                };
            }
        };
        let slot = format!("{}-{}", dispatch.task(), dispatch.attempt());
        let mut worker = ClosureWorker::new(self.agent(slot), session, policy.clone());
        let call = DispatchedCall {
            plan: self.plan.plan(),
            channel,
            dispatch,
            inputs,
        };
        let result = call.make(&mut worker, draw);
        let record = worker.agent_mut().take_last_record();
        DispatchOutcome { result, record }
    }

    pub(super) fn scratch_for(&self, task: &TaskId) -> Scratch {
        let own = self.plan.command(task).map_or(&[][..], |c| &c.scratch[..]);
        Scratch::new(self.plan.scratch().iter().chain(own))
    }
}

/// What [`ShellRuntime::run_dispatch`] ended with.
#[derive(Debug)]
#[non_exhaustive]
pub struct DispatchOutcome {
    /// The proposal, carrying the settled closure, or why the call failed or was withdrawn.
    pub result: Result<Proposal, WorkerFailure>,
    /// The closure's whole record when the call finished (what the proposal's settlement
    /// binds by digest); `None` when it was withdrawn or never started.
    pub record: Option<ClosureRecord>,
}

/// `path` made absolute, or why it could not be.
pub(super) fn absolute(path: &Path) -> Result<PathBuf, ShellError> {
    std::path::absolute(path).map_err(|source| ShellError::Create {
        path: path.to_owned(),
        source,
    })
}
