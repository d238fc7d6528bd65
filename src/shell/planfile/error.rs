//! Why a plan file was refused, named by file, line, column, task and field.

use std::path::PathBuf;

use crate::id::TaskId;
use crate::plan::{AdmittedPath, PlanLoadError, PlanValidationError, ValidationStage};
use crate::shell::plan_files::PlanFilesError;

use super::Pos;

/// Why a plan file was refused. Every message names the file; the ones about a place in it
/// name the line, column, task and field.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read.
    #[error("read plan {}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A command key of a task (or the plan's `scratch`) is missing or malformed.
    #[error("load plan {}: {pos}: {}{message}", file.display(), place(task, field))]
    Command {
        /// The file.
        file: PathBuf,
        /// Where.
        pos: Pos,
        /// The task's id, or `-` for the plan's own keys.
        task: String,
        /// The field.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// Malformed JSON, or the plan model refused a field (unknown field, bad id,
    /// inadmissible path). The message is the loader's, so the loader's error is kept for
    /// callers but is not a `source`: a chain would print the message twice.
    #[error("load plan {}: line {line} column {column}: {}{message}", file.display(), place(task, field))]
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
        error: Box<PlanLoadError>,
    },
    /// The plan has no tasks: there is nothing to run, and a run would be "accepted" having
    /// done nothing.
    #[error(
        "load plan {}: `tasks` is empty; add at least one task such as \
         {{\"id\": \"tests\", \"owner\": \"shell\", \"spec\": {{\"intent\": \"the tests pass\"}}, \"run\": \"pytest -q\"}} \
         (see `kleene help plan`)",
        file.display()
    )]
    Empty {
        /// The file.
        file: PathBuf,
    },
    /// The plan is not a valid DAG with unique owners. The problems are listed here rather
    /// than through the library error's own message, which would say "validate plan" again
    /// and name the internal stage.
    #[error("validate plan {}: {}", file.display(), problems(error))]
    Invalid {
        /// The file.
        file: PathBuf,
        /// Every problem.
        error: Box<PlanValidationError>,
    },
    /// The plan's files could not be collected (too many bytes, a symlink, an unreadable
    /// file).
    #[error("load plan {}", file.display())]
    Files {
        /// The plan file.
        file: PathBuf,
        /// What was wrong, naming the file.
        source: PlanFilesError,
    },
    /// A task owns paths but has no `run`. Its calls run nothing, so they never write the
    /// paths it owns, and every one of them would be refused ("owned paths not written"):
    /// the plan is refused before anything runs. A task that owns nothing may leave `run`
    /// out (a lane the plan only declares, or a point that others depend on).
    #[error(
        "validate plan {}: task {task}{} owns {} but has no \"run\": add a \"run\" command \
         that writes {} (a task without \"run\" runs nothing, so only a task that owns no \
         paths may leave it out; see `kleene help plan`)",
        file.display(),
        merged_note(merged),
        owned_list(owned),
        if owned.len() == 1 { "it" } else { "them" }
    )]
    NoRun {
        /// The file.
        file: PathBuf,
        /// The task.
        task: TaskId,
        /// The paths it owns.
        owned: Vec<AdmittedPath>,
        /// The tasks consolidation merged into it (whose paths it now owns), if any.
        merged: Vec<TaskId>,
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

/// ` (merged with db_b)`: the tasks consolidation merged into a task, so an error about
/// paths the author wrote on one of them names it.
fn merged_note(merged: &[TaskId]) -> String {
    if merged.is_empty() {
        return String::new();
    }
    let ids: Vec<&str> = merged.iter().map(TaskId::as_str).collect();
    format!(" (merged with {})", ids.join(", "))
}

/// `"a", "b" and "c"`: owned paths as a sentence names them.
fn owned_list(owned: &[AdmittedPath]) -> String {
    let quoted: Vec<String> = owned.iter().map(|p| format!("{:?}", p.as_str())).collect();
    match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => "no paths".to_owned(),
    }
}

/// Every problem of `error`, `; `-separated; a problem only the merge of persistence tasks
/// made (a cycle through the merged task) says so.
fn problems(error: &PlanValidationError) -> String {
    let list = error
        .problems()
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    match error.stage() {
        ValidationStage::AfterConsolidation => format!(
            "{list} (after the persistence tasks of each module were merged into one; \
             see `kleene help plan`)"
        ),
        _ => list,
    }
}

/// `task a: field `spec`: ` — the task and field an error is about, each left out when
/// the error is about the whole document (`-` and `.`).
fn place(task: &str, field: &str) -> String {
    let mut place = String::new();
    if task != "-" {
        place.push_str(&format!("task {task}: "));
    }
    if field != "." {
        place.push_str(&format!("field `{field}`: "));
    }
    place
}
