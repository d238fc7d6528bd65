//! Plan files: an `AppBuildPlan` JSON document plus, per task, the shell commands that do
//! the work, and the files beside it that those commands read.
//!
//! Each task object may carry five keys besides the plan model's, and the plan object two:
//!
//! ```json
//! { "scratch": ["target/**"],
//!   "inputs": ["tasks/**", "fix.sh"],
//!   "tasks": [
//!     { "id": "billing_service", "owner": "shell", "spec": {"intent": "…"}, ...,
//!       "run": "sh tasks/service.sh",
//!       "checks": [ { "id": "unit-tests", "command": "sh billing/tests/vat_test.sh",
//!                     "severity": "blocker", "overridable": true } ],
//!       "fix": "sh fix.sh",
//!       "timeout_secs": 60,
//!       "scratch": ["**/__pycache__/**"] } ] }
//! ```
//!
//! The library's loader ([`AppBuildPlan::from_json_with`]) keeps each value raw with its
//! offset in the file, so the commands are parsed here with errors at their own line and
//! column, every other unknown key is refused with a suggestion, and every value is bound
//! into the plan digest (and so into the derived channel and the acceptance record). So is
//! the manifest of the plan's files ([`PlanFiles`]) when they are collected.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::plan_files::{MANIFEST_KEY, PlanFiles};
use crate::batch::cache::key::ActionKeyParts;
use crate::batch::{Batch, BatchEvidence};
use crate::closure::Severity;
use crate::id::{ChannelId, TaskId, ValidatorId};
use crate::plan::{
    AdmittedPath, AppBuildPlan, ExtensionValue, Extensions, PathGlob, PlanLoadError, PlannedTask,
    ValidatedPlan, explain_value_error,
};

mod changes;
mod error;

pub use changes::describe_changes;
pub use error::LoadError;

/// The keys of a task object that belong to shell plans, not to the plan model.
pub const TASK_KEYS: [&str; 8] = [
    "run",
    "checks",
    "fix",
    "timeout_secs",
    "scratch",
    "inputs",
    "cache",
    "sandbox",
];

/// The keys of the plan object that belong to shell plans.
pub const PLAN_KEYS: [&str; 3] = ["scratch", "inputs", "base"];

/// What every call's stage starts from, beside its prerequisites' accepted files (the plan
/// key `base`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Base {
    /// The project's files the plan binds (what git tracks beside the plan, or the files
    /// there): a task changes an existing repository in place, in its stage.
    #[default]
    Project,
    /// Nothing: a plan that builds its project from nothing.
    Empty,
}

/// The JSON each command key holds, for messages (`key[]`: one entry of the array `key`),
/// as [`explain_value_error`] takes them.
const SHAPES: &[(&str, &str)] = &[
    ("run", r#"a shell command such as "pytest -q""#),
    ("fix", r#"a shell command such as "sh fix.sh""#),
    (
        "checks",
        r#"an array of objects such as [{"id": "tests", "command": "pytest -q"}]"#,
    ),
    (
        "checks[]",
        r#"an object such as {"id": "tests", "command": "pytest -q"}"#,
    ),
    ("id", r#"a string such as "tests""#),
    ("command", r#"a shell command such as "pytest -q""#),
    ("severity", r#"one of "blocker", "warning", "info""#),
    ("overridable", "true or false"),
    ("timeout_secs", "a number of seconds such as 60"),
    ("scratch", r#"an array of globs such as ["target/**"]"#),
    ("scratch[]", r#"a glob such as "target/**""#),
    ("inputs", r#"an array of globs such as ["tasks/**"]"#),
    ("inputs[]", r#"a glob such as "tasks/**""#),
    ("base", r#"one of "project", "empty""#),
    ("cache", "true or false"),
    (
        "sandbox",
        r#"false, or an object such as {"read": ["/opt/sdk"], "write": ["~/.cache/x"], "network": false}"#,
    ),
];

const EXTENSIONS: Extensions<'static> = Extensions {
    task_keys: &TASK_KEYS,
    plan_keys: &PLAN_KEYS,
};

/// A line and column in a plan file (both 1-based; columns count bytes, like serde_json).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1.
    pub column: usize,
}

impl Pos {
    /// The position of byte `offset` of `text`.
    pub fn of(text: &str, offset: usize) -> Self {
        let before = &text.as_bytes()[..offset.min(text.len())];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        Self {
            line,
            column: before.len() - line_start + 1,
        }
    }

    /// Shifts a position reported inside a sub-document that starts at `self`.
    fn inner(self, line: usize, column: usize) -> Self {
        if line <= 1 {
            Self {
                line: self.line,
                column: self.column + column.saturating_sub(1),
            }
        } else {
            Self {
                line: self.line + line - 1,
                column,
            }
        }
    }
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {} column {}", self.line, self.column)
    }
}

/// One validator command of a task.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// The validator id its results carry.
    pub id: ValidatorId,
    /// The shell command; a non-zero exit withholds approval.
    pub command: String,
    /// How serious a failure is (default blocker).
    #[serde(default = "blocker")]
    pub severity: Severity,
    /// Whether a failure may be auto-fixed (default true).
    #[serde(default = "yes")]
    pub overridable: bool,
}

fn blocker() -> Severity {
    Severity::Blocker
}

fn yes() -> bool {
    true
}

/// What the CLI runs for one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskCommands {
    /// Does the work and writes the task's owned files.
    pub run: String,
    /// Post-validation.
    pub checks: Vec<Check>,
    /// Gets a fix subtask's recovery spec; without it failures are not auto-fixed.
    pub fix: Option<String>,
    /// Per-command timeout, when the task sets one.
    pub timeout: Option<Duration>,
    /// The task's own scratch globs (the plan's apply too): files a call writes there are
    /// never part of its candidate.
    pub scratch: Vec<PathGlob>,
    /// The plan's files the task's commands read, when the task names them (its `inputs`):
    /// only these are part of its action key, so editing a file no task names reuses every
    /// result. `None`: every file the plan binds.
    pub inputs: Option<Vec<PathGlob>>,
    /// Whether the task's accepted result may be kept and reused (`"cache": false` for a
    /// task with effects outside its stage, such as a deploy: it is always called).
    pub cache: bool,
    /// What the task's commands may touch beside their stage (the task key `sandbox`).
    pub sandbox: TaskSandbox,
}

/// What a task's commands may touch beside their stage, their scratch and a private
/// `TMPDIR` (the task key `sandbox`; see [`crate::process::sandbox`]).
///
/// ```json
/// "sandbox": {"read": ["/opt/sdk"], "write": ["~/.cache/my-tool"], "network": false}
/// ```
///
/// `"sandbox": false` runs the task's commands unconfined (a deploy that writes elsewhere);
/// paths are absolute or start with `~/` (the home directory of whoever runs the plan).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskSandbox {
    /// Confined: the defaults plus these paths, the network open or cut.
    Confined {
        /// Paths the commands may also read and execute.
        read: Vec<PathBuf>,
        /// Paths the commands may also write.
        write: Vec<PathBuf>,
        /// Whether the commands may use the network.
        network: bool,
    },
    /// Not confined (`"sandbox": false`).
    Off,
}

impl Default for TaskSandbox {
    fn default() -> Self {
        TaskSandbox::Confined {
            read: Vec::new(),
            write: Vec::new(),
            network: true,
        }
    }
}

/// The JSON of the task key `sandbox`.
#[derive(Deserialize)]
#[serde(untagged)]
enum SandboxField {
    Switch(bool),
    Rules(SandboxRules),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SandboxRules {
    #[serde(default)]
    read: Vec<String>,
    #[serde(default)]
    write: Vec<String>,
    #[serde(default = "yes")]
    network: bool,
}

/// The name under which a plan file's text is bound into its batch's evidence.
const PLAN_FILE_INPUT: &str = "plan file";

/// How a loaded plan stands to the evidence of a batch ([`ShellPlan::binding_in`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PlanBinding {
    /// The evidence binds this plan file's text and this plan's digest.
    Same,
    /// The evidence binds no plan text (a batch not run from a plan file), and this plan's
    /// digest.
    DigestOnly,
    /// The evidence binds another plan file text.
    TextDiffers,
    /// The text is the one bound, but the plan's digest is not: the plan's files (their
    /// manifest) differ from those the batch ran with.
    DigestDiffers,
}

/// A plan file loaded and validated: the plan the batch may run, the commands per task and
/// the files its commands may read.
///
/// ```
/// use std::path::Path;
/// use kleene::shell::ShellPlan;
///
/// let plan = ShellPlan::from_text(Path::new("plan.json"), r#"{"tasks": [
///   {"id": "a", "owner": "shell", "spec": {"intent": "a"}, "owned_paths": ["a.txt"],
///    "run": "echo a > a.txt", "timeout_secs": 5}]}"#, None)?;
/// let a = plan.plan().tasks().next().map(|t| t.id.clone()).unwrap();
/// assert_eq!(plan.command(&a).map(|c| c.run.as_str()), Some("echo a > a.txt"));
/// assert!(plan.default_channel()?.as_str().starts_with("run-"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Cloning one is cheap (its parts are shared): a worker hands the same plan to every call.
#[derive(Debug, Clone)]
pub struct ShellPlan {
    parts: Arc<ShellPlanParts>,
}

/// What a [`ShellPlan`] is made of, shared by its clones.
#[derive(Debug)]
struct ShellPlanParts {
    plan: ValidatedPlan,
    commands: BTreeMap<TaskId, TaskCommands>,
    scratch: Vec<PathGlob>,
    inputs: Option<Vec<PathGlob>>,
    base: Base,
    files: Option<PlanFiles>,
    /// The plan file's own name among its files (it lies beside them).
    file_name: Option<AdmittedPath>,
    text: String,
}

impl ShellPlan {
    /// Reads, loads and validates the plan file at `file`, and collects the files beside it
    /// that its commands may read (see [`PlanFiles::collect`]; `skip` names directories
    /// kleene writes, such as the run's state directory). Returns the plan and the file's
    /// text.
    ///
    /// # Errors
    ///
    /// [`LoadError`] naming the file and, where there is one, the line, column, task and
    /// field; [`LoadError::Files`] when the plan's files cannot be collected.
    pub fn read(file: &Path, skip: &[PathBuf]) -> Result<(Self, String), LoadError> {
        let text = std::fs::read_to_string(file).map_err(|source| LoadError::Read {
            file: file.to_owned(),
            source,
        })?;
        let dir = match file.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
            _ => PathBuf::from("."),
        };
        let plan = build(file, &text, Files::Collect { dir: &dir, skip })?;
        Ok((plan, text))
    }

    /// Loads and validates `text`, read from `file`, binding `files` (the manifest the plan
    /// was started with, with or without their bytes). `None` binds no plan files: a plan
    /// that reads nothing beside its commands, or one started before plans carried them.
    ///
    /// # Errors
    ///
    /// As [`ShellPlan::read`].
    pub fn from_text(file: &Path, text: &str, files: Option<PlanFiles>) -> Result<Self, LoadError> {
        build(file, text, Files::Given(files))
    }

    /// The validated plan (normalised, consolidated); its digest covers every command,
    /// scratch glob and plan file.
    pub fn plan(&self) -> &ValidatedPlan {
        &self.parts.plan
    }

    /// What every call's stage starts from beside its prerequisites' accepted files: the
    /// plan's files ([`Base::Project`], the default) or nothing.
    pub fn base(&self) -> Base {
        self.parts.base
    }

    /// The plan file's text, as it was read.
    pub fn text(&self) -> &str {
        &self.parts.text
    }

    /// The batch of this plan on `channel`, as every driver of shell plans runs it: the
    /// plan file's text is a named input of the evidence, so a resume with other bytes is
    /// refused and the same plan gives the same evidence wherever its calls run.
    pub fn batch(&self, channel: ChannelId) -> Batch<'_> {
        Batch::new(&self.parts.plan, channel)
            .with_input(PLAN_FILE_INPUT, self.parts.text.as_bytes())
    }

    /// Whether `evidence` is of this plan's batch: its text is the plan file the batch
    /// bound, and its digest (which covers the plan's files) the plan the batch ran. A
    /// stored copy of a plan that was changed or damaged since its run started is told
    /// apart here from a plan file the user edited.
    pub fn binding_in(&self, evidence: &BatchEvidence) -> PlanBinding {
        match evidence.binds_input(PLAN_FILE_INPUT, self.parts.text.as_bytes()) {
            Some(false) => PlanBinding::TextDiffers,
            _ if evidence.plan_digest() != self.parts.plan.digest() => PlanBinding::DigestDiffers,
            Some(true) => PlanBinding::Same,
            None => PlanBinding::DigestOnly,
        }
    }

    /// The commands of every task that declares them.
    pub fn commands(&self) -> &BTreeMap<TaskId, TaskCommands> {
        &self.parts.commands
    }

    /// The commands of `task`; `None` for a task that declares none (it runs nothing).
    pub fn command(&self, task: &TaskId) -> Option<&TaskCommands> {
        self.parts.commands.get(task)
    }

    /// The plan-level scratch globs, which apply to every task.
    pub fn scratch(&self) -> &[PathGlob] {
        &self.parts.scratch
    }

    /// The plan's `inputs` globs: `None` when it declares none (every file beside the plan
    /// counts), an empty list when it declares that its commands read none.
    pub fn inputs(&self) -> Option<&[PathGlob]> {
        self.parts.inputs.as_deref()
    }

    /// The files the plan binds, if any.
    pub fn files(&self) -> Option<&PlanFiles> {
        self.parts.files.as_ref()
    }

    /// What `task`'s call depends on in this plan, part by part (`None` for a task the plan
    /// does not have, or one that says `"cache": false`: it is never reused): its own entry
    /// (its commands included), the plan's `scratch` and `base`, and the files it reads:
    /// those its `inputs` name (its stage holds only those), or else every file the plan
    /// binds, which its commands can read through `$KLEENE_PLAN_DIR` whatever the base. The
    /// plan file itself is not one of them: of that, the task's entry is what its call
    /// depends on, and an edit of another task is not. The
    /// accepted outputs of the tasks the call is given are added by whoever runs it
    /// ([`ActionKeyParts::prerequisite`]).
    ///
    /// ```
    /// use std::path::Path;
    /// use kleene::shell::ShellPlan;
    ///
    /// let text = |run_b: &str| format!(r#"{{"tasks": [
    ///   {{"id": "a", "owner": "shell", "spec": {{"intent": "a"}}, "owned_paths": ["a"],
    ///    "run": "echo a > a"}},
    ///   {{"id": "b", "owner": "shell", "spec": {{"intent": "b"}}, "owned_paths": ["b"],
    ///    "run": "{run_b}"}}]}}"#);
    /// let key = |run_b: &str, id: &str| {
    ///     let plan = ShellPlan::from_text(Path::new("plan.json"), &text(run_b), None).unwrap();
    ///     let id = plan.plan().tasks().find(|t| t.id.as_str() == id).unwrap().id.clone();
    ///     plan.action_key_parts(&id).unwrap().key()
    /// };
    /// // Editing b's command changes b's key, and a's not at all.
    /// assert_ne!(key("echo b > b", "b"), key("echo B > b", "b"));
    /// assert_eq!(key("echo b > b", "a"), key("echo B > b", "a"));
    /// ```
    pub fn action_key_parts(&self, task: &TaskId) -> Option<ActionKeyParts> {
        let entry = self.parts.plan.task(task)?;
        let commands = self.parts.commands.get(task);
        if commands.is_some_and(|c| !c.cache) {
            return None;
        }
        let named = commands.and_then(|c| c.inputs.as_deref());
        let mut parts = ActionKeyParts::new(entry);
        for key in PLAN_KEYS.iter().filter(|k| **k != "inputs") {
            if let Some(value) = self.parts.plan.extension(key) {
                parts = parts.setting(key, value.canonical().as_bytes());
            }
        }
        if let Some(files) = &self.parts.files {
            parts = parts.reads(
                files
                    .iter()
                    .filter(|(path, _)| Some(*path) != self.parts.file_name.as_ref())
                    .filter(|(path, _)| {
                        named.is_none_or(|globs| globs.iter().any(|g| g.matches(path.as_str())))
                    })
                    .map(|(path, digest)| (path.clone(), *digest)),
            );
        }
        Some(parts)
    }

    /// The channel a run of this plan takes when none is named: `run-` and the first twelve
    /// hex digits of the plan digest, so the same plan (commands and files included) finds
    /// its run again.
    ///
    /// # Errors
    ///
    /// Never in practice: the id is `run-` and hex digits.
    pub fn default_channel(&self) -> Result<ChannelId, crate::id::IdError> {
        let digest = self.parts.plan.digest().to_string();
        ChannelId::new(format!("run-{}", &digest[..digest.len().min(12)]))
    }
}

/// Where a plan's files come from while it loads.
enum Files<'a> {
    /// Collected from the plan file's directory.
    Collect { dir: &'a Path, skip: &'a [PathBuf] },
    /// Given (a stored or submitted manifest), or none.
    Given(Option<PlanFiles>),
}

/// Loads and validates `text`, read from `file`, with its files from `files`.
fn build(file: &Path, text: &str, files: Files<'_>) -> Result<ShellPlan, LoadError> {
    let mut draft = AppBuildPlan::from_json_with(text, &EXTENSIONS).map_err(|source| {
        let (line, column) = source.position();
        let (task, field) = name_task(&labels(text), source.field());
        let PlanLoadError::Json { message, .. } = &source;
        let message = message.clone();
        LoadError::Plan {
            file: file.to_owned(),
            line,
            column,
            task,
            field,
            message,
            error: Box::new(source),
        }
    })?;
    let reader = Reader { file, text };
    let scratch = match draft.extensions.get("scratch") {
        Some(value) => reader.globs("-", "scratch", value)?,
        None => Vec::new(),
    };
    let inputs = match draft.extensions.get("inputs") {
        Some(value) => Some(reader.globs("-", "inputs", value)?),
        None => None,
    };
    let base = match draft.extensions.get("base") {
        Some(value) => reader.parse("-", "base", value)?,
        None => Base::default(),
    };
    let mut commands = BTreeMap::new();
    for task in &draft.tasks {
        if let Some(c) = reader.commands(task)? {
            commands.insert(task.id.clone(), c);
        }
    }
    // The library accepts an empty plan (a valid, if idle, graph); a plan file without tasks
    // is always a mistake, and its run would report "all 0 tasks accepted".
    if draft.tasks.is_empty() {
        return Err(LoadError::Empty {
            file: file.to_owned(),
        });
    }
    let files = match files {
        // `"inputs": []` says the commands read nothing beside the plan: none are bound.
        Files::Collect { .. } if inputs.as_ref().is_some_and(Vec::is_empty) => {
            Some(PlanFiles::default())
        }
        Files::Collect { dir, skip } => Some(
            PlanFiles::collect(dir, inputs.as_deref().unwrap_or_default(), skip, &scratch)
                .map_err(|source| LoadError::Files {
                    file: file.to_owned(),
                    source,
                })?,
        ),
        Files::Given(files) => files,
    };
    // Bound as a plan key no file can write: the plan digest, the derived channel and the
    // acceptance record then cover exactly the bytes the commands were given.
    if let Some(files) = &files {
        draft
            .extensions
            .insert(MANIFEST_KEY.to_owned(), files.extension_value());
    }
    let plan = draft.validate().map_err(|error| LoadError::Invalid {
        file: file.to_owned(),
        error: Box::new(error),
    })?;
    for id in commands.keys() {
        if plan.task(id).is_none() {
            let survivor = plan
                .tasks()
                .find(|t| t.consolidated_from.contains(id))
                .map_or_else(|| id.clone(), |t| t.id.clone());
            return Err(LoadError::MergedAway {
                file: file.to_owned(),
                task: id.clone(),
                survivor,
            });
        }
    }
    // Checked on the validated plan, so a task that consolidation gave another's paths is
    // held to the same rule as one that owned them as written.
    if let Some(task) = plan
        .tasks()
        .find(|t| !t.owned_paths.is_empty() && !commands.contains_key(&t.id))
    {
        return Err(LoadError::NoRun {
            file: file.to_owned(),
            task: task.id.clone(),
            owned: task.owned_paths.clone(),
            merged: task.consolidated_from.clone(),
        });
    }
    Ok(ShellPlan {
        parts: Arc::new(ShellPlanParts {
            plan,
            commands,
            scratch,
            inputs,
            base,
            files,
            file_name: file
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| AdmittedPath::admit(n).ok()),
            text: text.to_owned(),
        }),
    })
}

/// What consolidation did to a plan, one sentence per task it merged away: which task, into
/// which, and why, so a task never disappears from `kleene validate` without a word.
pub fn merges(plan: &ValidatedPlan) -> Vec<String> {
    plan.tasks()
        .flat_map(|survivor| {
            let module = survivor
                .kind
                .module()
                .map_or_else(String::new, |m| format!(" of module {m}"));
            survivor.consolidated_from.iter().map(move |merged| {
                format!(
                    "task {merged} was merged into {id}: both are {lane} tasks{module}, and a \
                     module gets one {lane} task (the one with the smallest id keeps the others' \
                     paths, edges and specs)",
                    id = survivor.id,
                    lane = survivor.kind.lane(),
                )
            })
        })
        .collect()
}

/// Reads the CLI's extension values of a plan file, with errors at their place in it.
struct Reader<'a> {
    file: &'a Path,
    text: &'a str,
}

impl Reader<'_> {
    fn pos(&self, value: &ExtensionValue) -> Pos {
        Pos::of(self.text, value.offset().unwrap_or(0))
    }

    fn error(&self, pos: Pos, task: &str, field: &str, message: String) -> LoadError {
        LoadError::Command {
            file: self.file.to_owned(),
            pos,
            task: task.to_owned(),
            field: field.to_owned(),
            message,
        }
    }

    /// Reads `value` as `T`; an error inside it is reported at its own line and column.
    fn parse<T: serde::de::DeserializeOwned>(
        &self,
        task: &str,
        field: &str,
        value: &ExtensionValue,
    ) -> Result<T, LoadError> {
        // Tracks the path inside the value (`checks[0].severity`) so the message can name
        // the key and the JSON it takes.
        let mut de = serde_json::Deserializer::from_str(value.json());
        serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let inner = e.path().to_string();
            let path = if inner == "." || inner.is_empty() {
                field.to_owned()
            } else if inner.starts_with('[') {
                format!("{field}{inner}")
            } else {
                format!("{field}.{inner}")
            };
            let e = e.into_inner();
            let pos = self.pos(value).inner(e.line(), e.column());
            self.error(
                pos,
                task,
                &path,
                explain_value_error(&path, &message_of(&e), SHAPES),
            )
        })
    }

    fn globs(
        &self,
        task: &str,
        key: &str,
        value: &ExtensionValue,
    ) -> Result<Vec<PathGlob>, LoadError> {
        let patterns: Vec<String> = self.parse(task, key, value)?;
        patterns
            .iter()
            .enumerate()
            .map(|(i, p)| {
                PathGlob::parse(p).map_err(|e| {
                    self.error(self.pos(value), task, &format!("{key}[{i}]"), e.to_string())
                })
            })
            .collect()
    }

    /// The task's commands, or `None` when it declares none (a lane the plan only declares;
    /// it runs nothing).
    fn commands(&self, task: &PlannedTask) -> Result<Option<TaskCommands>, LoadError> {
        let label = task.id.as_str();
        let Some(first) = task.extensions.values().min_by_key(|v| v.offset()) else {
            return Ok(None);
        };
        let get = |key: &str| task.extension(key);
        let run = match get("run") {
            Some(value) => {
                let run: String = self.parse(label, "run", value)?;
                if run.trim().is_empty() {
                    return Err(self.error(
                        self.pos(value),
                        label,
                        "run",
                        "must not be empty".to_owned(),
                    ));
                }
                run
            }
            None => {
                return Err(self.error(
                    self.pos(first),
                    label,
                    "run",
                    "missing (checks, fix, timeout_secs, scratch, inputs and cache need a run command)"
                        .to_owned(),
                ));
            }
        };
        let checks: Vec<Check> = match get("checks") {
            Some(value) => self.parse(label, "checks", value)?,
            None => Vec::new(),
        };
        let mut seen = BTreeSet::new();
        for check in &checks {
            if !seen.insert(check.id.clone()) {
                let pos = get("checks").map_or(self.pos(first), |v| self.pos(v));
                return Err(self.error(
                    pos,
                    label,
                    "checks",
                    format!("check id `{}` is used twice", check.id),
                ));
            }
        }
        let fix: Option<String> = match get("fix") {
            Some(value) => Some(self.parse(label, "fix", value)?),
            None => None,
        };
        let timeout = match get("timeout_secs") {
            Some(value) => {
                let secs: f64 = self.parse(label, "timeout_secs", value)?;
                if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
                    return Err(self.error(
                        self.pos(value),
                        label,
                        "timeout_secs",
                        format!("{secs} is not between 0 and 86400 seconds"),
                    ));
                }
                Some(Duration::from_secs_f64(secs))
            }
            None => None,
        };
        let scratch = match get("scratch") {
            Some(value) => self.globs(label, "scratch", value)?,
            None => Vec::new(),
        };
        let inputs = match get("inputs") {
            Some(value) => Some(self.globs(label, "inputs", value)?),
            None => None,
        };
        let cache = match get("cache") {
            Some(value) => self.parse(label, "cache", value)?,
            None => true,
        };
        let sandbox = match get("sandbox") {
            Some(value) => self.sandbox(label, value)?,
            None => TaskSandbox::default(),
        };
        Ok(Some(TaskCommands {
            run,
            checks,
            fix,
            timeout,
            scratch,
            inputs,
            cache,
            sandbox,
        }))
    }

    fn sandbox(&self, task: &str, value: &ExtensionValue) -> Result<TaskSandbox, LoadError> {
        let rules = match self.parse(task, "sandbox", value)? {
            SandboxField::Switch(true) => return Ok(TaskSandbox::default()),
            SandboxField::Switch(false) => return Ok(TaskSandbox::Off),
            SandboxField::Rules(rules) => rules,
        };
        let paths = |key: &str, given: &[String]| -> Result<Vec<PathBuf>, LoadError> {
            given
                .iter()
                .enumerate()
                .map(|(i, path)| {
                    declared_path(path).map_err(|why| {
                        self.error(self.pos(value), task, &format!("sandbox.{key}[{i}]"), why)
                    })
                })
                .collect()
        };
        Ok(TaskSandbox::Confined {
            read: paths("read", &rules.read)?,
            write: paths("write", &rules.write)?,
            network: rules.network,
        })
    }
}

/// A path a task's `sandbox` gives: absolute, or under the home directory of whoever runs
/// the plan (`~/`).
fn declared_path(path: &str) -> Result<PathBuf, String> {
    if let Some(rest) = path.strip_prefix("~/") {
        return match std::env::var_os("HOME").map(PathBuf::from) {
            Some(home) if home.is_absolute() => Ok(home.join(rest)),
            _ => Err(format!(
                "`{path}` names the home directory, and HOME is not set"
            )),
        };
    }
    if Path::new(path).is_absolute() {
        Ok(PathBuf::from(path))
    } else {
        Err(format!(
            "`{path}` is relative: give an absolute path or one under `~/` (the stage is given already)"
        ))
    }
}

/// Strips serde_json's " at line L column C" suffix; the position is reported separately.
fn message_of(err: &serde_json::Error) -> String {
    let text = err.to_string();
    match text.rfind(" at line ") {
        Some(i) if err.line() > 0 => text[..i].to_owned(),
        _ => text,
    }
}

/// Each task's id (or `tasks[i]` when it has none), by index, read leniently from a
/// document the loader refused, to name tasks in its errors.
fn labels(text: &str) -> Vec<String> {
    let Ok(doc) = serde_json::from_str::<serde_json::Value>(text) else {
        return Vec::new();
    };
    let Some(tasks) = doc.get("tasks").and_then(|t| t.as_array()) else {
        return Vec::new();
    };
    tasks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.get("id")
                .and_then(|id| id.as_str())
                .filter(|id| !id.is_empty())
                .map_or_else(|| format!("tasks[{i}]"), str::to_owned)
        })
        .collect()
}

/// `tasks[2].owned_paths[0]` → (`billing_service`, `owned_paths[0]`).
fn name_task(labels: &[String], field: &str) -> (String, String) {
    let Some(rest) = field.strip_prefix("tasks[") else {
        return ("-".to_owned(), field.to_owned());
    };
    let Some((index, after)) = rest.split_once(']') else {
        return ("-".to_owned(), field.to_owned());
    };
    let task = index
        .parse::<usize>()
        .ok()
        .and_then(|i| labels.get(i).cloned())
        .unwrap_or_else(|| format!("tasks[{index}]"));
    let after = after.strip_prefix('.').unwrap_or(after);
    (
        task,
        if after.is_empty() {
            ".".to_owned()
        } else {
            after.to_owned()
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn load(text: &str) -> Result<ShellPlan, LoadError> {
        load_text(Path::new("p.json"), text)
    }

    fn load_text(file: &Path, text: &str) -> Result<ShellPlan, LoadError> {
        ShellPlan::from_text(file, text, None)
    }

    #[test]
    fn a_task_that_owns_paths_needs_run() {
        let plan = |extra: &str| {
            format!(
                "{{\"tasks\": [{{\"id\": \"t\", \"owner\": \"sh\", \"spec\": {{\"intent\": \"x\"}}{extra}}}]}}"
            )
        };
        let err = load(&plan(", \"owned_paths\": [\"a\"]")).unwrap_err();
        assert!(
            matches!(&err, LoadError::NoRun { task, owned, .. }
                if task.as_str() == "t" && owned.len() == 1),
            "{err}"
        );
        assert!(
            err.to_string().contains(
                "task t owns \"a\" but has no \"run\": add a \"run\" command that writes it"
            ),
            "{err}"
        );
        // Owning nothing, a task may run nothing; owning paths, it runs something.
        assert!(load(&plan("")).is_ok());
        assert!(load(&plan(", \"owned_paths\": [\"a\"], \"run\": \"echo > a\"")).is_ok());

        // A persistence task without commands that consolidation gave another's paths.
        let task = |id: &str, extra: &str| {
            format!(
                "{{\"id\": \"{id}\", \"owner\": \"sh\", \"spec\": {{\"intent\": \"x\"}}, \
                 \"kind\": {{\"lane\": \"persistence\", \"module\": \"m\"}}{extra}}}"
            )
        };
        let text = format!(
            "{{\"tasks\": [{}, {}]}}",
            task("db_a", ""),
            task("db_b", ", \"owned_paths\": [\"m/db.py\"]")
        );
        let err = load(&text).unwrap_err();
        assert!(
            matches!(&err, LoadError::NoRun { task, .. } if task.as_str() == "db_a"),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("task db_a (merged with db_b) owns \"m/db.py\""),
            "{err}"
        );
    }

    fn pos(err: &LoadError) -> Pos {
        match err {
            LoadError::Command { pos, .. } => *pos,
            LoadError::Plan { line, column, .. } => Pos {
                line: *line,
                column: *column,
            },
            other => panic!("no position: {other}"),
        }
    }

    pub(super) const PLAN: &str = r#"{
  "scratch": ["target/**"],
  "tasks": [
    { "id": "a", "owner": "sh", "spec": {"intent": "a"},
      "run": "echo a > a.txt",
      "checks": [ { "id": "has-a", "command": "test -s a.txt" },
                  { "id": "lint", "command": "true", "severity": "warning", "overridable": false } ],
      "fix": "sh fix.sh",
      "timeout_secs": 2.5,
      "scratch": ["**/__pycache__/**", "*.log"] },
    { "id": "b", "owner": "sh", "spec": {"intent": "b"}, "run": "true", "depends_on": ["a"] },
    { "id": "c", "owner": "sh", "spec": {"intent": "c"}, "depends_on": ["b"] }
  ]
}"#;

    #[test]
    fn commands_and_scratch_globs_are_parsed() {
        let loaded = load(PLAN).unwrap();
        let a = &loaded.commands()[&TaskId::new("a").unwrap()];
        assert_eq!(a.run, "echo a > a.txt");
        assert_eq!(a.checks.len(), 2);
        assert_eq!(a.checks[0].severity, Severity::Blocker);
        assert!(a.checks[0].overridable);
        assert_eq!(a.checks[1].severity, Severity::Warning);
        assert!(!a.checks[1].overridable);
        assert_eq!(a.fix.as_deref(), Some("sh fix.sh"));
        assert_eq!(a.timeout, Some(Duration::from_millis(2500)));
        assert!(a.scratch[0].matches("x/__pycache__/m.pyc"));
        assert!(a.scratch[1].matches("build.log"));
        let b = &loaded.commands()[&TaskId::new("b").unwrap()];
        assert_eq!((b.checks.len(), b.fix.as_ref(), b.timeout), (0, None, None));
        assert!(b.scratch.is_empty());
        assert!(!loaded.commands().contains_key(&TaskId::new("c").unwrap()));
        assert_eq!(loaded.scratch().len(), 1);
        assert!(loaded.scratch()[0].matches("target/debug/app"));
    }

    /// Regression (issue 10, defect 7): the commands were blanked out of the text before
    /// the plan was digested, so changing one kept the plan digest and the derived channel.
    #[test]
    fn every_command_and_glob_is_bound_into_the_plan_digest() {
        let base = load(PLAN).unwrap().plan().digest();
        for (from, to) in [
            ("echo a > a.txt", "echo A > a.txt"),
            ("test -s a.txt", "test -f a.txt"),
            ("\"severity\": \"warning\"", "\"severity\": \"blocker\""),
            ("\"overridable\": false", "\"overridable\": true"),
            ("sh fix.sh", "sh other.sh"),
            ("2.5", "3"),
            ("\"*.log\"", "\"*.txt\""),
            ("[\"target/**\"]", "[\"target/**\", \"dist/**\"]"),
            ("\"run\": \"true\"", "\"run\": \"false\""),
        ] {
            assert!(PLAN.contains(from), "{from}");
            let changed = load(&PLAN.replacen(from, to, 1)).unwrap();
            assert_ne!(changed.plan().digest(), base, "{from} -> {to}");
        }
        let reformatted: serde_json::Value = serde_json::from_str(PLAN).unwrap();
        assert_eq!(
            load(&serde_json::to_string_pretty(&reformatted).unwrap())
                .unwrap()
                .plan()
                .digest(),
            base
        );
    }

    #[test]
    fn malformed_json_points_to_line_and_column() {
        let text = "{\n  \"tasks\": [\n    { \"id\": \"a\", }\n  ]\n}";
        let err = load(text).unwrap_err();
        assert_eq!(
            pos(&err),
            Pos {
                line: 3,
                column: 18
            }
        );
        assert!(
            crate::text::Chain(&err)
                .to_string()
                .contains("line 3 column 18: "),
            "{err}"
        );
    }

    #[test]
    fn bad_command_fields_are_named_with_their_task_and_exact_position() {
        let text = "{\"tasks\": [\n {\"id\": \"svc\", \"owner\": \"sh\", \"spec\": {\"intent\": \"x\"}, \"run\": \"true\",\n  \"checks\": [{\"id\": \"t\",\n   \"command\": \"x\", \"severity\": \"fatal\"}]}]}";
        let err = load(text).unwrap_err();
        let msg = crate::text::Chain(&err).to_string();
        assert!(
            msg.contains("task svc: field `checks[0].severity`"),
            "{msg}"
        );
        assert!(
            msg.contains(
                "severity must be one of \"blocker\", \"warning\", \"info\", not \"fatal\""
            ),
            "{msg}"
        );
        // Inside the value, at the bad string itself.
        let line = text.lines().nth(3).unwrap();
        assert_eq!(
            pos(&err),
            Pos {
                line: 4,
                // serde_json points at the closing quote.
                column: line.find("\"fatal\"").unwrap() + 7
            }
        );

        let task = |extra: &str| {
            format!(
                "{{\"tasks\": [{{\"id\": \"t\", \"owner\": \"sh\", \"spec\": {{\"intent\": \"x\"}}{extra}}}]}}"
            )
        };
        let err = load(&task(", \"fix\": \"sh f\"")).unwrap_err();
        assert!(
            crate::text::Chain(&err)
                .to_string()
                .contains("task t: field `run`: missing"),
            "{err}"
        );
        let err = load(&task(", \"run\": \"x\", \"timeout_secs\": 0")).unwrap_err();
        assert!(
            crate::text::Chain(&err)
                .to_string()
                .contains("field `timeout_secs`"),
            "{err}"
        );
        let err = load(&task(", \"run\": \" \"")).unwrap_err();
        assert!(
            crate::text::Chain(&err)
                .to_string()
                .contains("must not be empty"),
            "{err}"
        );
        let err = load(&task(
            ", \"run\": \"x\", \"checks\": [{\"id\": \"a\", \"command\": \"x\"}, {\"id\": \"a\", \"command\": \"y\"}]",
        ))
        .unwrap_err();
        assert!(
            crate::text::Chain(&err).to_string().contains("used twice"),
            "{err}"
        );
        let err = load(&task(
            ", \"run\": \"x\", \"scratch\": [\"ok/**\", \"../up/**\"]",
        ))
        .unwrap_err();
        assert!(
            crate::text::Chain(&err)
                .to_string()
                .contains("task t: field `scratch[1]`"),
            "{err}"
        );
        let err = load(&task(
            ", \"run\": \"x\", \"checks\": [{\"id\": \"a\", \"comand\": \"x\"}]",
        ))
        .unwrap_err();
        assert!(
            crate::text::Chain(&err)
                .to_string()
                .contains("unknown field `comand`"),
            "{err}"
        );
        let err = load("{\"scratch\": [\"/abs\"], \"tasks\": []}").unwrap_err();
        assert!(
            crate::text::Chain(&err)
                .to_string()
                .contains("p.json: line 1 column 13: field `scratch[0]`"),
            "{err}"
        );
    }

    #[test]
    fn unknown_keys_get_a_suggestion_with_task_line_and_column() {
        let text = PLAN.replace("\"fix\"", "\"fxi\"");
        let err = load(&text).unwrap_err();
        let msg = crate::text::Chain(&err).to_string();
        assert!(msg.contains("task a: field `fxi`"), "{msg}");
        assert!(msg.contains("did you mean `fix`?"), "{msg}");
        let line = text.lines().position(|l| l.contains("fxi")).unwrap() + 1;
        assert_eq!(pos(&err).line, line);
    }

    #[test]
    fn shapes_are_checked() {
        for text in ["[1]", "{\"tasks\": 3}", "{\"tasks\": [3]}"] {
            assert!(
                matches!(load(text).unwrap_err(), LoadError::Plan { .. }),
                "{text}"
            );
        }
    }

    const DEMO: &str = include_str!("../../../examples/demo/plan.json");

    #[test]
    fn the_demo_plan_loads_with_its_commands() {
        let loaded = load_text(Path::new("plan.json"), DEMO).unwrap();
        assert_eq!(loaded.plan().len(), 4);
        assert_eq!(loaded.commands().len(), 4);
        let svc = &loaded.commands()[&TaskId::new("billing_service").unwrap()];
        assert!(svc.fix.is_some());
        assert_eq!(svc.checks.len(), 2);
    }

    #[test]
    fn plan_errors_name_file_task_field_and_position() {
        let text = DEMO.replace("\"billing/items.sh\"]", "\"../items.sh\"]");
        let err = load_text(Path::new("p.json"), &text).unwrap_err();
        let msg = crate::text::Chain(&err).to_string();
        assert!(msg.starts_with("load plan p.json: line "), "{msg}");
        assert!(
            msg.contains("task billing_model: field `owned_paths[0]`"),
            "{msg}"
        );
        let expected = text
            .lines()
            .position(|l| l.contains("../items.sh"))
            .unwrap()
            + 1;
        assert_eq!(pos(&err).line, expected);

        let text = DEMO.replace(
            "\"owner\": \"shell\",",
            "\"owner\": \"shell\", \"colour\": 1,",
        );
        let msg = load_text(Path::new("p.json"), &text)
            .map_err(|e| crate::text::Chain(&e).to_string())
            .unwrap_err();
        assert!(msg.contains("unknown field `colour`"), "{msg}");
        assert!(msg.contains("task billing_module"), "{msg}");

        let text = DEMO.replace(
            "\"depends_on\": [\"billing_module\"]",
            "\"depends_on\": [\"nope\"]",
        );
        let msg = load_text(Path::new("p.json"), &text)
            .map_err(|e| crate::text::Chain(&e).to_string())
            .unwrap_err();
        assert!(msg.starts_with("validate plan p.json"), "{msg}");
        assert!(msg.contains("nope"), "{msg}");
    }
}
