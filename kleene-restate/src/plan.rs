//! Shell-task plans for the Restate adapter: the CLI's plan-file format, limited to the keys
//! a remote worker can honour today (`run`, `timeout_secs` and `scratch`).
//!
//! ```
//! use kleene_restate::plan::ShellPlan;
//!
//! let plan = ShellPlan::load(r#"{"tasks": [
//!   {"id": "a", "kind": {"lane": "config"}, "owner": "shell", "spec": {"intent": "a"},
//!    "owned_paths": ["a.txt"], "run": "echo a > a.txt", "timeout_secs": 5}]}"#)?;
//! let a = plan.plan().tasks().next().map(|t| t.id.clone()).unwrap();
//! assert_eq!(plan.command(&a).and_then(|c| c.run.as_deref()), Some("echo a > a.txt"));
//! # Ok::<(), kleene_restate::plan::PlanError>(())
//! ```
//!
//! The keys are read with the CLI's own extension list, so a plan file's digest (and the
//! channel derived from it) is the same here as under `kleene run`. `checks` and `fix` need
//! the closure worker, which does not run on Restate yet; a plan that uses them is refused,
//! never run without them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kleene::id::{ChannelId, TaskId};
use kleene::plan::{ExtensionValue, Extensions, PathGlob, PlanLoadError, PlanValidationError};
use kleene::{AppBuildPlan, ValidatedPlan};

/// The task keys of the CLI's plan-file format (kept in step with `kleene run`).
const TASK_KEYS: [&str; 5] = ["run", "checks", "fix", "timeout_secs", "scratch"];
/// The plan keys of the CLI's plan-file format.
const PLAN_KEYS: [&str; 1] = ["scratch"];
/// The keys the adapter cannot honour yet.
const UNSUPPORTED: [&str; 2] = ["checks", "fix"];

/// The default per-command timeout, as under `kleene run`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// What a worker runs for one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellCommand {
    /// The shell command (`sh -c`), run in the task's staged workspace; `None` for a task
    /// that declares none (a lane the plan only declares, or one validation synthesised),
    /// which runs nothing and proposes an empty candidate, as under `kleene run`.
    pub run: Option<String>,
    /// The longest the command may run.
    pub timeout: Duration,
    /// The plan's and the task's scratch globs: what the command leaves there is never part
    /// of its candidate.
    pub scratch: Vec<PathGlob>,
}

/// A validated plan and the shell command of every task.
#[derive(Debug)]
pub struct ShellPlan {
    plan: ValidatedPlan,
    commands: BTreeMap<TaskId, ShellCommand>,
}

/// Why a plan text was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The JSON or the plan model refused the text.
    #[error("load the plan")]
    Load(#[source] PlanLoadError),
    /// The plan did not validate.
    #[error("validate the plan")]
    Invalid(#[source] Box<PlanValidationError>),
    /// A key's value has the wrong type.
    #[error("read `{key}` of task {task}: {message}")]
    BadValue {
        /// The task.
        task: TaskId,
        /// The key.
        key: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// A `scratch` value is not a list of globs.
    #[error("read `scratch` of {what}: {message}")]
    BadScratch {
        /// "task ID" or "the plan".
        what: String,
        /// What is wrong with it.
        message: String,
    },
    /// The plan uses a key the adapter does not honour yet.
    #[error(
        "run {what} on Restate: `{key}` needs the closure worker, which the Restate adapter \
         does not run yet; run this plan locally with `kleene run`"
    )]
    Unsupported {
        /// "task ID".
        what: String,
        /// The key.
        key: &'static str,
    },
}

impl ShellPlan {
    /// Loads and validates a plan file's text.
    ///
    /// # Errors
    ///
    /// [`PlanError`] when the text does not load or validate, a value has the wrong type,
    /// a `scratch` value is not a list of globs, or the plan uses `checks` or `fix`.
    pub fn load(text: &str) -> Result<Self, PlanError> {
        let extensions = Extensions {
            task_keys: &TASK_KEYS,
            plan_keys: &PLAN_KEYS,
        };
        let draft = AppBuildPlan::from_json_with(text, &extensions).map_err(PlanError::Load)?;
        let plan_scratch = match draft.extensions.get("scratch") {
            Some(v) => globs(v).map_err(|message| PlanError::BadScratch {
                what: "the plan".to_owned(),
                message,
            })?,
            None => Vec::new(),
        };
        let plan = draft
            .validate()
            .map_err(|e| PlanError::Invalid(Box::new(e)))?;
        let mut commands = BTreeMap::new();
        for task in plan.tasks() {
            if let Some(key) = UNSUPPORTED.iter().find(|k| task.extension(k).is_some()) {
                return Err(PlanError::Unsupported {
                    what: format!("task {}", task.id),
                    key,
                });
            }
            let bad = |key: &'static str, e: serde_json::Error| PlanError::BadValue {
                task: task.id.clone(),
                key,
                message: e.to_string(),
            };
            let run: Option<String> = task
                .extension("run")
                .map(ExtensionValue::parse)
                .transpose()
                .map_err(|e| bad("run", e))?;
            let timeout = match task.extension("timeout_secs") {
                Some(v) => {
                    Duration::from_secs(v.parse::<u64>().map_err(|e| bad("timeout_secs", e))?)
                }
                None => DEFAULT_TIMEOUT,
            };
            let mut scratch = plan_scratch.clone();
            if let Some(v) = task.extension("scratch") {
                scratch.extend(globs(v).map_err(|message| PlanError::BadScratch {
                    what: format!("task {}", task.id),
                    message,
                })?);
            }
            commands.insert(
                task.id.clone(),
                ShellCommand {
                    run,
                    timeout,
                    scratch,
                },
            );
        }
        Ok(Self { plan, commands })
    }

    /// The validated plan.
    pub fn plan(&self) -> &ValidatedPlan {
        &self.plan
    }

    /// The command of `task`.
    pub fn command(&self, task: &TaskId) -> Option<&ShellCommand> {
        self.commands.get(task)
    }

    /// The channel `kleene run` derives for this plan when none is named.
    ///
    /// # Errors
    ///
    /// Never in practice: the id is `run-` and hex digits.
    pub fn default_channel(&self) -> Result<ChannelId, kleene::id::IdError> {
        let digest = self.plan.digest().to_string();
        ChannelId::new(format!("run-{}", &digest[..digest.len().min(12)]))
    }

    /// Every task `task` depends on, directly or not, sorted by id: the tasks whose accepted
    /// outputs its stage starts from (as under `kleene run`).
    pub fn transitive_prerequisites(&self, task: &TaskId) -> Vec<TaskId> {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&TaskId> = self.plan.prerequisites(task);
        while let Some(t) = stack.pop() {
            if seen.insert(t.clone()) {
                stack.extend(self.plan.prerequisites(t));
            }
        }
        seen.into_iter().collect()
    }
}

/// The globs of a `scratch` value (a list of strings), or why it is not one.
fn globs(value: &ExtensionValue) -> Result<Vec<PathGlob>, String> {
    let patterns: Vec<String> = value.parse().map_err(|e| e.to_string())?;
    patterns
        .iter()
        .enumerate()
        .map(|(i, p)| PathGlob::parse(p).map_err(|e| format!("scratch[{i}]: {e}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, extra: &str) -> String {
        format!(
            r#"{{"id": "{id}", "kind": {{"lane": "config"}}, "owner": "shell",
                "spec": {{"intent": "{id}"}}, "owned_paths": ["{id}.txt"]{extra}}}"#
        )
    }

    #[test]
    fn a_chain_lists_every_ancestor() {
        let text = format!(
            r#"{{"tasks": [{}, {}, {}]}}"#,
            task("a", r#", "run": "true""#),
            task("b", r#", "run": "true", "depends_on": ["a"]"#),
            task(
                "c",
                r#", "run": "true", "depends_on": ["b"], "timeout_secs": 3"#
            ),
        );
        let plan = ShellPlan::load(&text).unwrap();
        let c = TaskId::new("c").unwrap();
        let got: Vec<String> = plan
            .transitive_prerequisites(&c)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(got, ["a", "b"]);
        assert_eq!(plan.command(&c).unwrap().timeout, Duration::from_secs(3));
    }

    #[test]
    fn checks_are_refused_not_ignored() {
        let text = format!(
            r#"{{"tasks": [{}]}}"#,
            task(
                "a",
                r#", "run": "true", "checks": [{"id": "x", "command": "true"}]"#
            )
        );
        let err = ShellPlan::load(&text).unwrap_err();
        assert!(
            matches!(err, PlanError::Unsupported { key: "checks", .. }),
            "{err}"
        );
        assert!(err.to_string().contains("task a"));
    }

    #[test]
    fn scratch_globs_of_the_plan_and_the_task_both_apply() {
        let text = format!(
            r#"{{"scratch": ["target/**"], "tasks": [{}]}}"#,
            task("a", r#", "run": "true", "scratch": ["**/*.tmp"]"#)
        );
        let plan = ShellPlan::load(&text).unwrap();
        let a = TaskId::new("a").unwrap();
        let globs: Vec<&str> = plan
            .command(&a)
            .unwrap()
            .scratch
            .iter()
            .map(PathGlob::as_str)
            .collect();
        assert_eq!(globs, ["target/**", "**/*.tmp"]);
        let bad = format!(
            r#"{{"scratch": ["../x"], "tasks": [{}]}}"#,
            task("a", r#", "run": "true""#)
        );
        assert!(matches!(
            ShellPlan::load(&bad),
            Err(PlanError::BadScratch { .. })
        ));
    }

    #[test]
    fn a_task_without_a_command_runs_nothing() {
        let text = format!(r#"{{"tasks": [{}]}}"#, task("a", ""));
        let plan = ShellPlan::load(&text).unwrap();
        let a = TaskId::new("a").unwrap();
        assert_eq!(plan.command(&a).map(|c| c.run.clone()), Some(None));
    }
}
