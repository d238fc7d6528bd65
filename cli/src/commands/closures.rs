//! The closure log read back and checked against what binds it: the journal or the
//! acceptance record.

use std::fs;

use kleene::batch::BatchEvidence;
use kleene::{
    acceptance::{ClosureMismatch, StoredRecord},
    closure::ClosureRecord,
    id::TaskId,
};

use crate::formats::encode_closure_line_as;
use crate::state::{ClosureEntry, StateDir};

/// One record of the closure log, read back in the form kleene writes.
pub(super) struct LoggedClosure<'e> {
    pub(super) task: TaskId,
    pub(super) call: u32,
    pub(super) record: &'e ClosureRecord,
    /// The file and line it stands on.
    place: String,
}

/// The records of the closure log that read back in the one form kleene writes, and a
/// problem for each line that does not (unreadable, not a task id, or edited into another
/// spelling of the same value). Line order carries no meaning: a record is found by its
/// task and call.
pub(super) fn read_closure_log<'e>(
    state: &StateDir,
    entries: &'e [ClosureEntry],
) -> (Vec<LoggedClosure<'e>>, Vec<String>) {
    let log_path = state.closure_log_path();
    let text = fs::read_to_string(&log_path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut problems = Vec::new();
    let mut logged = Vec::new();
    for entry in entries {
        let place = format!("{} line {}", log_path.display(), entry.line);
        let record = match &entry.record {
            Ok(record) => record,
            Err(e) => {
                problems.push(format!(
                    "{place} (task {} call {}): unreadable: {e}",
                    entry.task, entry.call
                ));
                continue;
            }
        };
        let Ok(task) = TaskId::new(entry.task.clone()) else {
            problems.push(format!("{place}: task {:?} is not a task id", entry.task));
            continue;
        };
        // One value has one written form: a byte changed to an equivalent spelling (an
        // upper-case hex digit, an escape) is an edit too.
        let again = encode_closure_line_as(entry.format, &task, entry.call, record);
        let written = lines.get(entry.line.saturating_sub(1)).copied();
        if !again.is_ok_and(|again| Some(again.as_slice()) == written.map(str::as_bytes)) {
            problems.push(format!(
                "{place} (task {task} call {}): not in the form kleene writes; it was edited",
                entry.call
            ));
        }
        logged.push(LoggedClosure {
            task,
            call: entry.call,
            record,
            place,
        });
    }
    (logged, problems)
}

/// The closure record of `task`'s call `call` as the closure log holds it, when it is the
/// record the journal binds for that call: a record changed since is never shown as the
/// call's evidence (`kleene audit` names it).
pub(super) fn bound_record<'e>(
    entries: &'e [ClosureEntry],
    evidence: &BatchEvidence,
    task: &TaskId,
    call: u32,
) -> Option<&'e ClosureRecord> {
    let digest = evidence
        .closures_of(task)
        .filter(|c| c.attempt() == call && !c.withdrawn())
        .find_map(|c| c.settled())?
        .record_digest;
    entries
        .iter()
        .filter(|e| e.call == call && e.task == task.as_str())
        .filter_map(|e| e.record.as_ref().ok())
        .find(|r| r.digest() == digest)
}

/// Where the record a mismatch is about stands: its line, or the log when it has none.
pub(super) fn closure_place(
    state: &StateDir,
    logged: &[LoggedClosure<'_>],
    m: &ClosureMismatch,
) -> String {
    let (task, call) = m.call();
    logged
        .iter()
        .find(|l| &l.task == task && l.call == call)
        .map_or_else(
            || state.closure_log_path().display().to_string(),
            |l| l.place.clone(),
        )
}

/// Every closure record of the log that is not what the journal (`evidence`) or the
/// acceptance record (`accepted`) binds, or not in the one form kleene writes, named by line.
pub(super) fn closure_problems(
    state: &StateDir,
    entries: &[ClosureEntry],
    evidence: Option<&BatchEvidence>,
    accepted: Option<&StoredRecord>,
) -> Vec<String> {
    let (logged, mut problems) = read_closure_log(state, entries);
    let given = || logged.iter().map(|l| (&l.task, l.call, l.record));
    let checks = [
        evidence.map(|e| ("journal", e.verify_closures(given()))),
        accepted.map(|a| ("acceptance record", a.verify_closures(given()))),
    ];
    for (binder, checked) in checks.into_iter().flatten() {
        for m in checked.err().iter().flat_map(|e| e.mismatches()) {
            let place = closure_place(state, &logged, m);
            problems.push(format!("{place} (checked against the {binder}): {m}"));
        }
    }
    problems
}
