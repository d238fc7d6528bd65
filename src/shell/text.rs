//! The words a fixer reads: a fix subtask's recovery spec, and a corrective call's input.

use crate::batch::{Candidate, Rejection};
use crate::closure::Spec;
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
         ## Exact rejection\n\n{rejection}\n\n## Refused candidate ({} files)\n\n",
        task.id,
        spec_text(&task.spec),
        candidate.files().len()
    );
    for path in candidate.files().keys() {
        text.push_str("- ");
        text.push_str(path.as_str());
        text.push('\n');
    }
    text
}
