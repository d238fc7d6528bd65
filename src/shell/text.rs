//! The words a fixer reads (a fix subtask's recovery spec, a corrective call's input), and
//! the calls and fixes a status line shows for each task, whichever driver ran the plan.

use std::collections::BTreeMap;

use crate::batch::{BatchEvidence, Candidate, Rejection};
use crate::closure::Spec;
use crate::id::TaskId;
use crate::plan::PlannedTask;

/// The text a fixer receives: the rendered spec's intent and its acceptance criteria.
pub(crate) fn spec_text(spec: &Spec) -> String {
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

/// A corrective call's input: the original task, the exact rejection, the refused files.
pub(crate) fn correction_text(
    task: &PlannedTask,
    rejection: &Rejection,
    candidate: &Candidate,
) -> String {
    let mut text = format!(
        "Corrective call for task {} (batch recovery). Achieve the original task below; its \
         last candidate was refused with the exact rejection after it.\n\n## Original task\n\n{}\n\n\
         ## Exact rejection\n\n{rejection}\n\n## Refused candidate ({})\n\n",
        task.id,
        spec_text(&task.spec),
        counted(candidate.files().len() as u64, "file", "files")
    );
    for path in candidate.files().keys() {
        text.push_str("- ");
        text.push_str(path.as_str());
        text.push('\n');
    }
    text
}

/// The fix attempts each task's calls used: every fix a call ran to its settlement or was
/// interrupted in. A withdrawn call's do not count here (its draws still bound the run's
/// budget): its number is made again.
pub fn fixes_by_task(evidence: &BatchEvidence) -> BTreeMap<&TaskId, u32> {
    let mut fixes: BTreeMap<&TaskId, u32> = BTreeMap::new();
    for call in evidence.closures().iter().filter(|c| !c.withdrawn()) {
        *fixes.entry(call.task()).or_default() += call.fix_attempts_used();
    }
    fixes
}

/// `n` followed by `one` or `many`, whichever `n` takes: `1 task`, `0 tasks`, `2 entries`.
/// Every count kleene prints goes through it, so none says `1 tasks`.
///
/// ```
/// assert_eq!(kleene::shell::counted(1, "task", "tasks"), "1 task");
/// assert_eq!(kleene::shell::counted(3, "entry", "entries"), "3 entries");
/// ```
pub fn counted(n: u64, one: &str, many: &str) -> String {
    match n {
        1 => format!("1 {one}"),
        n => format!("{n} {many}"),
    }
}

/// A task's calls and fixes as a status line shows them: `1 call`, `2 calls, 1 fix`.
///
/// ```
/// assert_eq!(kleene::shell::calls_and_fixes(1, 0), "1 call");
/// assert_eq!(kleene::shell::calls_and_fixes(2, 3), "2 calls, 3 fixes");
/// ```
pub fn calls_and_fixes(calls: u32, fixes: u32) -> String {
    let calls = counted(u64::from(calls), "call", "calls");
    match fixes {
        0 => calls,
        n => format!("{calls}, {}", counted(u64::from(n), "fix", "fixes")),
    }
}
