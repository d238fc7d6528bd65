//! Runs one task call's shell command in a staged workspace built from its inputs, and turns
//! what it left into the worker's reply; also a local worker that does the same in-process,
//! the reference a Restate run is compared with.
//!
//! ```
//! use std::time::Duration;
//! use kleene::id::TaskId;
//! use kleene_restate::call::TaskReply;
//! use kleene_restate::shell::{Runner, ShellJob};
//!
//! let dir = tempfile::tempdir()?;
//! let runner = Runner::open(dir.path())?;
//! let task = TaskId::new("a")?;
//! let job = ShellJob { task: &task, label: "a-1", command: Some("echo hi > a.txt"),
//!                      timeout: Duration::from_secs(5), plan_dir: None, scratch: &[] };
//! let TaskReply::Proposal { candidate, rejection: None } = runner.run(&job, Vec::new()) else {
//!     panic!("the command succeeds");
//! };
//! assert_eq!(candidate.files().len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kleene::batch::{
    Candidate, InfrastructureFailure, Proposal, Rejection, Worker, WorkerCall, WorkerFailure,
};
use kleene::error::Chain;
use kleene::id::TaskId;
use kleene::plan::{AdmittedPath, PathGlob};
use kleene::process::{self, Interrupt, Invocation};
use kleene::stage::{ObjectStore, ScratchRule, Stage, StageChanges, StageInput};

use crate::call::TaskReply;
use crate::plan::ShellPlan;

/// One command to run for a call.
#[derive(Debug, Clone, Copy)]
pub struct ShellJob<'a> {
    /// The task.
    pub task: &'a TaskId,
    /// A name for the call's stage directory (unique per call).
    pub label: &'a str,
    /// The command (`sh -c`); `None` runs nothing.
    pub command: Option<&'a str>,
    /// Its timeout.
    pub timeout: Duration,
    /// `KLEENE_PLAN_DIR`, if set.
    pub plan_dir: Option<&'a str>,
    /// Scratch globs: what the command leaves there is never read into the candidate.
    pub scratch: &'a [PathGlob],
}

/// Runs calls in stages under one directory, sharing one content-addressed object store.
#[derive(Debug)]
pub struct Runner {
    store: ObjectStore,
    stages: PathBuf,
    serial: AtomicU64,
}

/// Why a runner could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("open the worker's cache in {dir}")]
pub struct RunnerError {
    dir: PathBuf,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl Runner {
    /// A runner keeping its objects and stages under `dir`.
    ///
    /// # Errors
    ///
    /// [`RunnerError`] when the directories cannot be made.
    pub fn open(dir: &Path) -> Result<Self, RunnerError> {
        let err = |source: Box<dyn std::error::Error + Send + Sync>| RunnerError {
            dir: dir.to_owned(),
            source,
        };
        let store = ObjectStore::open(dir.join("objects")).map_err(|e| err(Box::new(e)))?;
        let stages = dir.join("stages");
        std::fs::create_dir_all(&stages).map_err(|e| err(Box::new(e)))?;
        Ok(Self {
            store,
            stages,
            serial: AtomicU64::new(0),
        })
    }

    /// Runs `job` in a fresh stage holding `inputs`, and says what the call proposes.
    pub fn run(&self, job: &ShellJob<'_>, inputs: Vec<(AdmittedPath, Vec<u8>)>) -> TaskReply {
        let Some(command) = job.command else {
            // A task that declares no command runs nothing; its candidate is empty.
            return TaskReply::Proposal {
                candidate: Candidate::new(std::collections::BTreeMap::new()),
                rejection: None,
            };
        };
        let infra = |what: &str, e: &(dyn std::error::Error + 'static)| {
            TaskReply::Failed(InfrastructureFailure::Agent {
                detail: format!("{what} for task {}: {}", job.task, Chain(e)),
            })
        };
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let root = self
            .stages
            .join(format!("{}-{}-{serial}", job.label, std::process::id()));
        let stage = match Stage::prepare(
            &root,
            &self.store,
            inputs.iter().map(|(p, b)| StageInput::new(p, b)),
        ) {
            Ok(s) => s,
            Err(e) => return infra("prepare the stage", &e),
        };
        let dir = stage.root().to_owned();
        let mut env = vec![
            ("KLEENE_WORKSPACE", dir.display().to_string()),
            ("KLEENE_TASK", job.task.to_string()),
        ];
        if let Some(p) = job.plan_dir {
            env.push(("KLEENE_PLAN_DIR", p.to_owned()));
        }
        let inv = Invocation {
            timeout: job.timeout,
            env,
            ..Invocation::new(command, &dir)
        };
        let reply = match process::run(&inv, &Interrupt::default()) {
            Err(e) => infra("run the command", &e),
            Ok(done) => match stage.changes(&Scratch::new(job.scratch)) {
                Err(e) => infra("read the stage", &e),
                Ok(changes) => {
                    let refusal = refusal_text(&changes);
                    let candidate = Candidate::new(changes.into_written());
                    let rejection = if !done.success() {
                        Some(Rejection::contract(job.task, done.justification(command)))
                    } else {
                        refusal.map(|text| Rejection::contract(job.task, text))
                    };
                    TaskReply::Proposal {
                        candidate,
                        rejection,
                    }
                }
            },
        };
        // A stage left behind costs disk, never correctness: the next call gets a new one.
        let _ = stage.discard();
        reply
    }
}

/// Scratch globs as the stage's rule, as `kleene run` applies them: a path is scratch when a
/// glob matches it, and a directory is skipped whole when a glob `P/**` has a `P` that
/// matches the directory itself.
struct Scratch<'a> {
    globs: &'a [PathGlob],
    subtrees: Vec<PathGlob>,
}

impl<'a> Scratch<'a> {
    fn new(globs: &'a [PathGlob]) -> Self {
        let subtrees = globs
            .iter()
            .filter_map(|g| g.as_str().strip_suffix("/**"))
            .filter_map(|prefix| PathGlob::parse(prefix).ok())
            .collect();
        Self { globs, subtrees }
    }
}

impl ScratchRule for Scratch<'_> {
    fn is_scratch(&self, path: &str) -> bool {
        self.globs.iter().any(|g| g.matches(path))
    }

    fn covers_dir(&self, dir: &str) -> bool {
        self.subtrees.iter().any(|g| g.matches(dir))
    }
}

/// What the stage refuses, as one line, or `None`.
fn refusal_text(changes: &StageChanges) -> Option<String> {
    let mut items: Vec<String> = changes
        .deleted()
        .iter()
        .map(|p| format!("deletes {p}, an accepted output of a prerequisite"))
        .collect();
    items.extend(changes.refused().iter().map(ToString::to_string));
    (!items.is_empty()).then(|| {
        format!(
            "the call left what kleene refuses in its stage: {}",
            items.join("; ")
        )
    })
}

/// A kleene [`Worker`] that runs a shell plan's commands in-process with a [`Runner`]: the
/// local run a Restate run of the same plan must agree with.
#[derive(Debug)]
pub struct LocalShellWorker<'a> {
    plan: &'a ShellPlan,
    runner: Runner,
    plan_dir: Option<String>,
}

impl<'a> LocalShellWorker<'a> {
    /// A worker for `plan` keeping its stages under `dir`.
    ///
    /// # Errors
    ///
    /// [`RunnerError`] when the directories cannot be made.
    pub fn new(
        plan: &'a ShellPlan,
        dir: &Path,
        plan_dir: Option<String>,
    ) -> Result<Self, RunnerError> {
        Ok(Self {
            plan,
            runner: Runner::open(dir)?,
            plan_dir,
        })
    }
}

impl Worker for LocalShellWorker<'_> {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        let task = &call.task().id;
        let Some(command) = self.plan.command(task) else {
            return Err(WorkerFailure::Unavailable {
                detail: format!("task {task} has no command"),
            });
        };
        let inputs = call
            .inputs()
            .into_iter()
            .flat_map(|(_, out)| out.files().iter().map(|(p, b)| (p.clone(), b.clone())))
            .collect();
        let label = format!("{task}-{}", call.attempt());
        let job = ShellJob {
            task,
            label: &label,
            command: command.run.as_deref(),
            timeout: command.timeout,
            plan_dir: self.plan_dir.as_deref(),
            scratch: &command.scratch,
        };
        match self.runner.run(&job, inputs).into_result() {
            Some(result) => result,
            None => Err(WorkerFailure::Unavailable {
                detail: format!("task {task}: a local call cannot be interrupted"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job<'a>(task: &'a TaskId, command: &'a str) -> ShellJob<'a> {
        ShellJob {
            task,
            label: "t",
            command: Some(command),
            timeout: Duration::from_secs(10),
            plan_dir: None,
            scratch: &[],
        }
    }

    #[test]
    fn what_a_call_leaves_in_scratch_is_not_its_candidate() {
        let dir = tempfile::tempdir().unwrap();
        let runner = Runner::open(dir.path()).unwrap();
        let t = TaskId::new("t").unwrap();
        let scratch = [PathGlob::parse("target/**").unwrap()];
        let reply = runner.run(
            &ShellJob {
                scratch: &scratch,
                ..job(
                    &t,
                    "mkdir -p target/x && echo o > target/x/o && echo k > kept.txt",
                )
            },
            Vec::new(),
        );
        let TaskReply::Proposal { candidate, .. } = reply else {
            panic!("the command succeeds: {reply:?}");
        };
        let paths: Vec<&str> = candidate.files().keys().map(AdmittedPath::as_str).collect();
        assert_eq!(paths, ["kept.txt"]);
    }

    #[test]
    fn a_failing_command_is_a_rejection_with_its_output() {
        let dir = tempfile::tempdir().unwrap();
        let runner = Runner::open(dir.path()).unwrap();
        let t = TaskId::new("t").unwrap();
        let TaskReply::Proposal {
            rejection: Some(r), ..
        } = runner.run(&job(&t, "echo oops >&2; exit 4"), Vec::new())
        else {
            panic!("a failed command is a refused proposal");
        };
        let text = r.to_string();
        assert!(
            text.contains("exit code 4") && text.contains("oops"),
            "{text}"
        );
    }

    #[test]
    fn inputs_are_staged_and_not_part_of_the_candidate() {
        let dir = tempfile::tempdir().unwrap();
        let runner = Runner::open(dir.path()).unwrap();
        let t = TaskId::new("t").unwrap();
        let input = AdmittedPath::admit("in.txt").unwrap();
        let reply = runner.run(
            &job(&t, "tr a-z A-Z < in.txt > out.txt"),
            vec![(input, b"abc\n".to_vec())],
        );
        let TaskReply::Proposal {
            candidate,
            rejection: None,
        } = reply
        else {
            panic!("the command succeeds: {reply:?}");
        };
        let files: Vec<(&str, &[u8])> = candidate
            .files()
            .iter()
            .map(|(p, b)| (p.as_str(), b.as_slice()))
            .collect();
        assert_eq!(files, [("out.txt", &b"ABC\n"[..])]);
    }

    #[test]
    fn deleting_an_input_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let runner = Runner::open(dir.path()).unwrap();
        let t = TaskId::new("t").unwrap();
        let input = AdmittedPath::admit("in.txt").unwrap();
        let reply = runner.run(&job(&t, "rm in.txt"), vec![(input, b"x".to_vec())]);
        assert!(
            matches!(&reply, TaskReply::Proposal { rejection: Some(r), .. } if r.to_string().contains("deletes in.txt")),
            "{reply:?}"
        );
    }
}
