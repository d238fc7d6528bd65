//! Shell-task plans, run the same way by every driver: the plan-file format (`run`, `checks`,
//! `fix`, `timeout_secs`, `scratch`, `inputs`), the agent that runs a call's commands in its
//! staged workspace, and the plan's own files carried by digest.
//!
//! ```
//! use std::path::Path;
//! use kleene::batch::{Batch, ClosureWorker, MemoryJournal};
//! use kleene::shell::{self, ShellPlan, ShellRuntime};
//!
//! let plan = ShellPlan::from_text(Path::new("plan.json"), r#"{"tasks": [
//!   {"id": "hello", "owner": "shell", "spec": {"intent": "greet"}, "owned_paths": ["hello.txt"],
//!    "run": "echo hello > hello.txt", "checks": [{"id": "said", "command": "grep -q hello hello.txt"}]}]}"#,
//!   None)?;
//! let channel = plan.default_channel()?;
//! let work = tempfile::tempdir()?;
//! let runtime = ShellRuntime::new(plan, work.path())?;
//! let mut worker = ClosureWorker::new(runtime.agent("0"), shell::session(&channel)?,
//!                                     shell::default_policy());
//! let outcome = Batch::new(runtime.plan().plan(), channel)
//!     .run(&mut worker, &(), &mut MemoryJournal::default())?;
//! assert!(outcome.evidence.summary().is_complete());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The `kleene` CLI runs plans through this module with the threaded driver, and the Restate
//! adapter's workers make each reserved call through [`ShellRuntime::run_dispatch`]: the
//! same agent, the same stage rule, the same texts for fixers, so a plan's evidence and
//! acceptance record do not depend on where its calls ran.
//!
//! A plan binds the files beside it that its commands read ([`PlanFiles`]): their manifest
//! is part of the plan digest, and a call runs with `KLEENE_PLAN_DIR` naming a copy checked
//! against it, so a worker on another machine needs nothing from the submitter's disk.

mod agent;
mod plan_files;
mod planfile;
mod runtime;
mod scratch;
mod text;

pub use agent::{ShellAgent, Stopped};
pub use plan_files::{
    MAX_PLAN_FILE_BYTES, MAX_PLAN_FILES, PlanFiles, PlanFilesError, PlanFilesManifest,
};
pub use planfile::{
    Base, Check, LoadError, PLAN_KEYS, PlanBinding, Pos, ShellPlan, TASK_KEYS, TaskCommands,
    TaskSandbox, describe_changes, merges,
};
pub use runtime::{
    DEFAULT_MAX_CALL_OUTPUT_BYTES, DEFAULT_MAX_DEPTH, DEFAULT_MAX_FIXES, DEFAULT_TIMEOUT,
    DispatchOutcome, Quiet, ShellError, ShellEvent, ShellObserver, ShellRuntime, default_policy,
    session,
};
pub use scratch::Scratch;
pub use text::{calls_and_fixes, counted, fixes_by_task};
