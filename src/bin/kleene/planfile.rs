//! Plan files: an `AppBuildPlan` JSON document plus, per task, the commands that do the work.
//!
//! Each task object may carry four keys the library's plan format does not know:
//!
//! ```json
//! { "id": "billing_service", "kind": "service", ...,
//!   "run": "sh tasks/service.sh",
//!   "checks": [ { "id": "unit-tests", "command": "sh billing/tests/vat_test.sh",
//!                 "severity": "blocker", "overridable": true } ],
//!   "fix": "sh fix.sh",
//!   "timeout_secs": 60 }
//! ```
//!
//! [`split`] takes those keys out of the text by blanking them with spaces, so every other
//! byte keeps its line and column: an error the plan loader reports about the rest of the
//! document points at the user's own file, not at a re-serialised copy.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use std::path::{Path, PathBuf};

use kleene::{
    AppBuildPlan, PlanLoadError, PlanValidationError, Severity, TaskId, ValidatedPlan, ValidatorId,
};
use serde::Deserialize;
use serde_json::value::RawValue;

/// The keys of a task object that belong to the CLI, not to the plan model.
pub const COMMAND_KEYS: [&str; 4] = ["run", "checks", "fix", "timeout_secs"];

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
            column: offset - line_start + 1,
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
}

/// A plan file taken apart: the plan model's JSON and the commands per task.
#[derive(Debug, Clone)]
pub struct Split {
    /// The document with the command keys blanked; positions are unchanged.
    pub plan_json: String,
    /// Each task's id (or `tasks[i]` when it has none), by index, to name tasks in errors.
    pub labels: Vec<String>,
    /// The commands of every task that declares them.
    pub commands: BTreeMap<TaskId, TaskCommands>,
}

/// Why a plan file's structure or command keys were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// The text is not JSON.
    #[error("{pos}: {message}")]
    Syntax {
        /// Where.
        pos: Pos,
        /// serde_json's message, without its position.
        message: String,
    },
    /// The document is JSON but not shaped like a plan.
    #[error("{pos}: {message}")]
    Shape {
        /// Where.
        pos: Pos,
        /// What was expected.
        message: String,
    },
    /// A command key of a task is missing or malformed.
    #[error("{pos}: task {task}: field `{field}`: {message}")]
    Field {
        /// Where.
        pos: Pos,
        /// The task's id, or `tasks[i]` when it has none.
        task: String,
        /// The field.
        field: String,
        /// What is wrong.
        message: String,
    },
}

#[cfg(test)]
impl SplitError {
    /// Where in the file the problem is.
    pub fn pos(&self) -> Pos {
        match self {
            SplitError::Syntax { pos, .. }
            | SplitError::Shape { pos, .. }
            | SplitError::Field { pos, .. } => *pos,
        }
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

fn offset_in(text: &str, part: &str) -> usize {
    (part.as_ptr() as usize).saturating_sub(text.as_ptr() as usize)
}

/// Takes the command keys out of a plan file's text.
///
/// # Errors
///
/// [`SplitError`] with the line and column of the first problem: malformed JSON, a
/// document or task that is not an object, a task without a string `id`, or a missing or
/// malformed command key.
pub fn split(text: &str) -> Result<Split, SplitError> {
    let syntax = |err: serde_json::Error, base: Pos| SplitError::Syntax {
        pos: base.inner(err.line(), err.column()),
        message: message_of(&err),
    };
    let start = Pos { line: 1, column: 1 };
    // A full parse first, so malformed JSON anywhere is reported where it is.
    serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(|e| syntax(e, start))?;
    let doc: BTreeMap<String, &RawValue> =
        serde_json::from_str(text).map_err(|e| SplitError::Shape {
            pos: start,
            message: format!("a plan file must be a JSON object ({})", message_of(&e)),
        })?;
    let Some(tasks_raw) = doc.get("tasks") else {
        return Ok(Split {
            plan_json: text.to_owned(),
            labels: Vec::new(),
            commands: BTreeMap::new(),
        });
    };
    // Positions are computed only for errors: each one scans the text from its start.
    let at = |offset: usize| Pos::of(text, offset);
    let tasks: Vec<&RawValue> =
        serde_json::from_str(tasks_raw.get()).map_err(|e| SplitError::Shape {
            pos: at(offset_in(text, tasks_raw.get())),
            message: format!("`tasks` must be an array ({})", message_of(&e)),
        })?;

    // (key, value offset, value length) of every command member, blanked once all are known.
    let mut members_to_blank: Vec<(&str, usize, usize)> = Vec::new();
    let mut commands = BTreeMap::new();
    let mut labels = Vec::with_capacity(tasks.len());
    for (index, task_raw) in tasks.iter().enumerate() {
        let task_offset = offset_in(text, task_raw.get());
        let members: BTreeMap<String, &RawValue> =
            serde_json::from_str(task_raw.get()).map_err(|e| SplitError::Shape {
                pos: at(task_offset),
                message: format!("tasks[{index}] must be an object ({})", message_of(&e)),
            })?;
        let label = members
            .get("id")
            .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
            .unwrap_or_else(|| format!("tasks[{index}]"));
        labels.push(label.clone());
        let field = |name: &str, offset: usize, message: String| SplitError::Field {
            pos: at(offset),
            task: label.clone(),
            field: name.to_owned(),
            message,
        };
        let mut found = BTreeMap::new();
        for key in COMMAND_KEYS {
            if let Some(raw) = members.get(key) {
                let offset = offset_in(text, raw.get());
                if key_start(text, key, offset).is_none() {
                    return Err(field(
                        key,
                        offset,
                        "write the key as plain `\"key\"`, without escapes".to_owned(),
                    ));
                }
                members_to_blank.push((key, offset, raw.get().len()));
                found.insert(key, (*raw, offset));
            }
        }
        if found.is_empty() {
            // A task without commands is a lane the plan only declares (it runs nothing).
            continue;
        }
        let id_raw = members.get("id").ok_or_else(|| {
            field(
                "id",
                task_offset,
                "missing (a task with commands needs an id)".to_owned(),
            )
        })?;
        let id: TaskId = serde_json::from_str(id_raw.get())
            .map_err(|e| field("id", offset_in(text, id_raw.get()), message_of(&e)))?;
        let typed = |key: &str| -> Result<Option<(&RawValue, usize)>, SplitError> {
            Ok(found.get(key).copied())
        };
        // An error inside a command value, at its own line and column.
        let inner = |name: &str, offset: usize, e: &serde_json::Error| SplitError::Field {
            pos: at(offset).inner(e.line(), e.column()),
            task: label.clone(),
            field: name.to_owned(),
            message: message_of(e),
        };
        let run = match typed("run")? {
            Some((raw, pos)) => {
                let run: String =
                    serde_json::from_str(raw.get()).map_err(|e| inner("run", pos, &e))?;
                if run.trim().is_empty() {
                    return Err(field("run", pos, "must not be empty".to_owned()));
                }
                run
            }
            None => {
                return Err(field(
                    "run",
                    task_offset,
                    "missing (checks and fix need a run command)".to_owned(),
                ));
            }
        };
        let checks: Vec<Check> = match typed("checks")? {
            Some((raw, pos)) => {
                serde_json::from_str(raw.get()).map_err(|e| inner("checks", pos, &e))?
            }
            None => Vec::new(),
        };
        let mut seen = std::collections::BTreeSet::new();
        for check in &checks {
            if !seen.insert(check.id.clone()) {
                let pos = found.get("checks").map_or(task_offset, |(_, p)| *p);
                return Err(field(
                    "checks",
                    pos,
                    format!("check id `{}` is used twice", check.id),
                ));
            }
        }
        let fix: Option<String> = match typed("fix")? {
            Some((raw, pos)) => {
                Some(serde_json::from_str(raw.get()).map_err(|e| inner("fix", pos, &e))?)
            }
            None => None,
        };
        let timeout = match typed("timeout_secs")? {
            Some((raw, pos)) => {
                let secs: f64 =
                    serde_json::from_str(raw.get()).map_err(|e| inner("timeout_secs", pos, &e))?;
                if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
                    return Err(field(
                        "timeout_secs",
                        pos,
                        format!("{secs} is not between 0 and 86400 seconds"),
                    ));
                }
                Some(Duration::from_secs_f64(secs))
            }
            None => None,
        };
        commands.insert(
            id,
            TaskCommands {
                run,
                checks,
                fix,
                timeout,
            },
        );
    }

    // In text order, on the partly blanked bytes: a last member then finds the comma before
    // it even when the members between were command keys blanked a moment ago.
    members_to_blank.sort_by_key(|&(_, offset, _)| offset);
    let mut bytes = text.as_bytes().to_vec();
    for (key, offset, len) in members_to_blank {
        if let Some((from, to)) = member_span(text, &bytes, key, offset, len) {
            for b in &mut bytes[from..to] {
                if *b != b'\n' {
                    *b = b' ';
                }
            }
        }
    }
    // Only whole tokens and ASCII separators were blanked, so the text is still UTF-8.
    let plan_json = String::from_utf8(bytes).map_err(|e| SplitError::Shape {
        pos: Pos::of(text, e.utf8_error().valid_up_to()),
        message: "blanking the command keys broke a character".to_owned(),
    })?;
    Ok(Split {
        plan_json,
        labels,
        commands,
    })
}

/// A plan file loaded and validated: the plan the batch may run and the commands per task.
#[derive(Debug)]
pub struct LoadedPlan {
    /// The validated plan (normalised, consolidated).
    pub plan: ValidatedPlan,
    /// The commands of every task that declares them.
    pub commands: BTreeMap<TaskId, TaskCommands>,
}

/// Why a plan file was refused. Every message names the file; the ones about a place in it
/// name the line, column, task and field.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("read plan {}: {source}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Malformed JSON, a wrong shape, or a bad command key.
    #[error("load plan {}: {source}", file.display())]
    Split {
        /// The file.
        file: PathBuf,
        /// What and where.
        #[source]
        source: SplitError,
    },
    /// The plan model refused a field (unknown field, bad id, inadmissible path).
    #[error("load plan {}: line {line} column {column}: task {task}: field `{field}`: {message}", file.display())]
    Plan {
        /// The file.
        file: PathBuf,
        /// The line.
        line: usize,
        /// The column.
        column: usize,
        /// The task, or `-` for the top level.
        task: String,
        /// The field path inside the task (or the document).
        field: String,
        /// The plan loader's message (it names the path rule for a refused path).
        message: String,
        /// The loader's error.
        source: Box<PlanLoadError>,
    },
    /// The plan is not a valid DAG with unique owners.
    #[error("validate plan {}: {source}", file.display())]
    Invalid {
        /// The file.
        file: PathBuf,
        /// Every problem.
        #[source]
        source: Box<PlanValidationError>,
    },
    /// Consolidation merged away a task that has commands of its own.
    #[error(
        "validate plan {}: task {task} has commands but consolidation merged it into {survivor}; \
         give each module one persistence task",
        file.display()
    )]
    MergedAway {
        /// The file.
        file: PathBuf,
        /// The merged task.
        task: TaskId,
        /// The task it was merged into.
        survivor: TaskId,
    },
}

/// Reads, splits, loads and validates the plan file at `file`.
///
/// # Errors
///
/// [`LoadError`] naming the file and, where there is one, the line, column, task and field.
pub fn load(file: &Path) -> Result<(LoadedPlan, String), LoadError> {
    let text = std::fs::read_to_string(file).map_err(|source| LoadError::Read {
        file: file.to_owned(),
        source,
    })?;
    let loaded = load_text(file, &text)?;
    Ok((loaded, text))
}

/// Splits, loads and validates `text`, read from `file`.
///
/// # Errors
///
/// As [`load`].
pub fn load_text(file: &Path, text: &str) -> Result<LoadedPlan, LoadError> {
    let split = split(text).map_err(|source| LoadError::Split {
        file: file.to_owned(),
        source,
    })?;
    let draft = AppBuildPlan::from_json(&split.plan_json).map_err(|source| {
        let (line, column) = source.position();
        let (task, field) = name_task(&split.labels, source.field());
        let message = match &source {
            PlanLoadError::Json { message, .. } => message.clone(),
            other => other.to_string(),
        };
        LoadError::Plan {
            file: file.to_owned(),
            line,
            column,
            task,
            field,
            message,
            source: Box::new(source),
        }
    })?;
    let plan = draft.validate().map_err(|source| LoadError::Invalid {
        file: file.to_owned(),
        source: Box::new(source),
    })?;
    for id in split.commands.keys() {
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
    Ok(LoadedPlan {
        plan,
        commands: split.commands,
    })
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

fn skip_back(bytes: &[u8], mut i: usize) -> usize {
    while i > 0 && bytes[i - 1].is_ascii_whitespace() {
        i -= 1;
    }
    i
}

/// Where the plainly written `"key"` of the member whose value is at `value_at` starts.
fn key_start(text: &str, key: &str, value_at: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let colon = skip_back(bytes, value_at);
    if colon == 0 || bytes[colon - 1] != b':' {
        return None;
    }
    let key_end = skip_back(bytes, colon - 1);
    let start = key_end.checked_sub(key.len() + 2)?;
    (text.get(start..key_end)? == format!("\"{key}\"")).then_some(start)
}

/// The byte span of the member `"key": value` and one adjacent comma, scanning for commas
/// in `bytes` (the text as blanked so far).
fn member_span(
    text: &str,
    bytes: &[u8],
    key: &str,
    value_at: usize,
    value_len: usize,
) -> Option<(usize, usize)> {
    let start = key_start(text, key, value_at)?;
    let end = value_at + value_len;
    let mut after = end;
    while after < bytes.len() && bytes[after].is_ascii_whitespace() {
        after += 1;
    }
    if after < bytes.len() && bytes[after] == b',' {
        return Some((start, after + 1));
    }
    // The last member: take the comma before it instead.
    let before = skip_back(bytes, start);
    if before > 0 && bytes[before - 1] == b',' {
        return Some((before - 1, end));
    }
    Some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = r#"{
  "tasks": [
    { "id": "a", "kind": "module",
      "run": "echo a > a.txt",
      "checks": [ { "id": "has-a", "command": "test -s a.txt" },
                  { "id": "lint", "command": "true", "severity": "warning", "overridable": false } ],
      "fix": "sh fix.sh",
      "timeout_secs": 2.5 },
    { "id": "b", "run": "true", "depends_on": ["a"] },
    { "id": "c", "depends_on": ["b"] }
  ]
}"#;

    #[test]
    fn commands_come_out_and_positions_stay() {
        let split = split(PLAN).unwrap();
        let a = &split.commands[&TaskId::new("a").unwrap()];
        assert_eq!(a.run, "echo a > a.txt");
        assert_eq!(a.checks.len(), 2);
        assert_eq!(a.checks[0].severity, Severity::Blocker);
        assert!(a.checks[0].overridable);
        assert_eq!(a.checks[1].severity, Severity::Warning);
        assert!(!a.checks[1].overridable);
        assert_eq!(a.fix.as_deref(), Some("sh fix.sh"));
        assert_eq!(a.timeout, Some(Duration::from_millis(2500)));
        let b = &split.commands[&TaskId::new("b").unwrap()];
        assert_eq!((b.checks.len(), b.fix.as_ref(), b.timeout), (0, None, None));
        assert!(!split.commands.contains_key(&TaskId::new("c").unwrap()));

        assert_eq!(split.plan_json.len(), PLAN.len());
        assert_eq!(split.plan_json.lines().count(), PLAN.lines().count());
        let value: serde_json::Value = serde_json::from_str(&split.plan_json).unwrap();
        let stripped = serde_json::json!({"tasks": [
            {"id": "a", "kind": "module"},
            {"id": "b", "depends_on": ["a"]},
            {"id": "c", "depends_on": ["b"]}
        ]});
        assert_eq!(value, stripped);
        // An untouched token is where it was.
        let at = PLAN.find("\"depends_on\": [\"a\"]").unwrap();
        assert_eq!(&split.plan_json[at..at + 12], "\"depends_on\"");
    }

    #[test]
    fn malformed_json_points_to_line_and_column() {
        let text = "{\n  \"tasks\": [\n    { \"id\": \"a\", }\n  ]\n}";
        let err = split(text).unwrap_err();
        assert!(matches!(err, SplitError::Syntax { .. }), "{err}");
        assert_eq!(err.pos().line, 3);
        assert_eq!(err.pos().column, 18);
        assert!(err.to_string().starts_with("line 3 column 18: "), "{err}");
    }

    #[test]
    fn bad_command_fields_are_named_with_their_task() {
        let text = "{\"tasks\": [\n {\"id\": \"svc\", \"run\": \"true\",\n  \"checks\": [{\"id\": \"t\", \"command\": \"x\", \"severity\": \"fatal\"}]}]}";
        let err = split(text).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("task svc: field `checks`"), "{msg}");
        assert!(msg.contains("unknown variant `fatal`"), "{msg}");
        assert_eq!(err.pos().line, 3);

        let err = split("{\"tasks\": [{\"id\": \"t\", \"fix\": \"sh f\"}]}").unwrap_err();
        assert!(
            err.to_string().contains("task t: field `run`: missing"),
            "{err}"
        );

        let err = split("{\"tasks\": [{\"id\": \"t\", \"run\": \"x\", \"timeout_secs\": 0}]}")
            .unwrap_err();
        assert!(err.to_string().contains("field `timeout_secs`"), "{err}");

        let text = "{\"tasks\": [{\"id\": \"t\", \"run\": \"x\", \"checks\": [{\"id\": \"a\", \"command\": \"x\"}, {\"id\": \"a\", \"command\": \"y\"}]}]}";
        assert!(split(text).unwrap_err().to_string().contains("used twice"));

        let err = split("{\"tasks\": [{\"run\": \"x\"}]}").unwrap_err();
        assert!(
            err.to_string().contains("task tasks[0]: field `id`"),
            "{err}"
        );
    }

    #[test]
    fn unknown_check_keys_are_refused() {
        let text = "{\"tasks\": [{\"id\": \"t\", \"run\": \"x\", \"checks\": [{\"id\": \"a\", \"comand\": \"x\"}]}]}";
        let err = split(text).unwrap_err();
        assert!(err.to_string().contains("unknown field `comand`"), "{err}");
    }

    #[test]
    fn shapes_are_checked() {
        assert!(matches!(
            split("[1]").unwrap_err(),
            SplitError::Shape { .. }
        ));
        assert!(matches!(
            split("{\"tasks\": 3}").unwrap_err(),
            SplitError::Shape { .. }
        ));
        assert!(matches!(
            split("{\"tasks\": [3]}").unwrap_err(),
            SplitError::Shape { .. }
        ));
    }

    const DEMO: &str = include_str!("../../../examples/demo/plan.json");

    #[test]
    fn the_demo_plan_loads_with_its_commands() {
        let loaded = load_text(Path::new("plan.json"), DEMO).unwrap();
        assert_eq!(loaded.plan.len(), 4);
        assert_eq!(loaded.commands.len(), 4);
        let svc = &loaded.commands[&TaskId::new("billing_service").unwrap()];
        assert!(svc.fix.is_some());
        assert_eq!(svc.checks.len(), 2);
    }

    #[test]
    fn plan_errors_name_file_task_field_and_position() {
        let text = DEMO.replace("\"billing/items.sh\"]", "\"../items.sh\"]");
        let err = load_text(Path::new("p.json"), &text).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("load plan p.json: line "), "{msg}");
        assert!(
            msg.contains("task billing_model: field `owned_paths[0]`"),
            "{msg}"
        );
        let LoadError::Plan { line, .. } = err else {
            panic!("{msg}")
        };
        let expected = text
            .lines()
            .position(|l| l.contains("../items.sh"))
            .unwrap()
            + 1;
        assert_eq!(line, expected);

        let text = DEMO.replace(
            "\"owner\": \"shell\",",
            "\"owner\": \"shell\", \"colour\": 1,",
        );
        let msg = load_text(Path::new("p.json"), &text)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("unknown field `colour`"), "{msg}");
        assert!(msg.contains("task billing_module"), "{msg}");

        let text = DEMO.replace(
            "\"depends_on\": [\"billing_module\"]",
            "\"depends_on\": [\"nope\"]",
        );
        let msg = load_text(Path::new("p.json"), &text)
            .unwrap_err()
            .to_string();
        assert!(msg.starts_with("validate plan p.json"), "{msg}");
        assert!(msg.contains("nope"), "{msg}");
    }

    #[test]
    fn trailing_command_members_leave_valid_json() {
        for text in [
            "{\"tasks\": [{\"id\": \"t\", \"run\": \"x\", \"fix\": \"y\"}]}",
            "{\"tasks\": [{\"run\": \"x\", \"id\": \"t\", \"fix\": \"y\", \"timeout_secs\": 1}]}",
            "{\"tasks\": [{\"run\": \"x\", \"fix\": \"y\", \"id\": \"t\"}]}",
        ] {
            let split = split(text).unwrap();
            let v: serde_json::Value = serde_json::from_str(&split.plan_json).unwrap();
            assert_eq!(v, serde_json::json!({"tasks": [{"id": "t"}]}), "{text}");
        }
    }

    #[test]
    fn last_member_takes_the_comma_before_it() {
        let text = "{\"tasks\": [{\"id\": \"t\",\n \"run\": \"x\"}]}";
        let split = split(text).unwrap();
        let v: serde_json::Value = serde_json::from_str(&split.plan_json).unwrap();
        assert_eq!(v, serde_json::json!({"tasks": [{"id": "t"}]}));
    }
}
