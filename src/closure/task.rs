//! Tasks, their specs, and the attributed failures they carry through recovery.
//!
//! A [`Task`] is either a root (made by [`Task::new`]) or a fix subtask made by the closure
//! driver. A fix subtask keeps the root's id and spec unchanged (`root_task_ref`,
//! `root_spec`) and the whole list of earlier failures (`prior_failures`), so recovery is
//! always rendered from the original intent.
//!
//! ```
//! use kleene::{closure::Spec, Task, id::TaskId};
//!
//! let task = Task::new(TaskId::new("task_X")?, Spec::new("add a /login route"));
//! assert_eq!(task.depth(), 0);
//! assert_eq!(task.root_task_ref(), task.id());
//! assert_eq!(task.root_spec(), task.spec());
//! assert!(task.prior_failures().is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use serde::{Deserialize, Serialize};
use std::sync::Arc;

use crate::id::digest::{Digest, canonical_struct};
use crate::{closure::verdict::Severity, id::TaskId, id::ValidatorId};

/// What a task must achieve: its intent and the criteria that say it is done.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Spec {
    /// The intent, in the words of whoever planned the task.
    pub intent: String,
    /// Criteria that must hold when the task is done.
    #[serde(default)]
    pub acceptance_criteria: Vec<String>,
}

canonical_struct!(Spec {
    intent,
    acceptance_criteria,
});

impl Spec {
    /// A spec with an intent and no acceptance criteria.
    pub fn new(intent: impl Into<String>) -> Self {
        Self {
            intent: intent.into(),
            acceptance_criteria: Vec::new(),
        }
    }

    /// Adds an acceptance criterion.
    #[must_use]
    pub fn with_criterion(mut self, criterion: impl Into<String>) -> Self {
        self.acceptance_criteria.push(criterion.into());
        self
    }

    /// The canonical digest of this spec (bound into validation tokens).
    pub fn digest(&self) -> Digest {
        Digest::of("spec", self)
    }
}

/// One failure of one attempt, attributed to the attempt that produced it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FailureEntry {
    /// The attempt that produced it: 0 for the root task, `d` for the fix at depth `d`.
    pub attempt: u32,
    /// Which validator reported it.
    pub validator_id: ValidatorId,
    /// How serious it was.
    pub severity: Severity,
    /// The validator's justification, verbatim (including any output tail).
    pub justification: String,
}

/// Why a persisted task record was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TaskError {
    /// A root task (depth 0) named a parent, or a fix subtask named none.
    #[error("task {id} at depth {depth} has an inconsistent parent_task_ref")]
    InconsistentParent {
        /// The task.
        id: TaskId,
        /// Its depth.
        depth: u32,
    },
    /// A root task (depth 0) names another task or spec as its root.
    #[error("root task {id} names another task or spec as its root")]
    InconsistentRoot {
        /// The task.
        id: TaskId,
    },
    /// A failure entry claims an attempt at or after the task's own depth.
    #[error("task {id} at depth {depth} carries a failure from attempt {attempt}")]
    FutureFailure {
        /// The task.
        id: TaskId,
        /// Its depth.
        depth: u32,
        /// The attempt the entry claims.
        attempt: u32,
    },
}

/// A unit of work that runs through the inner loop.
///
/// Fields are private so the recovery invariants hold: depth 0 has no parent and every
/// deeper task has one; failures never come from a later attempt than the task itself.
///
/// Its serde form is exactly its checkpoint payload's, format version 2 (see `FORMATS.md`).
#[derive(Clone, PartialEq, Eq)]
// Shared: a closure keeps each task in its attempt and in the step that runs it, and a fix
// carries its root's spec and every earlier failure, so a copy must not copy those.
pub struct Task(Arc<TaskRecord>);

impl Task {
    /// A root task.
    pub fn new(id: TaskId, spec: Spec) -> Self {
        Self(Arc::new(TaskRecord {
            id,
            spec,
            depth: 0,
            parent_task_ref: None,
            root_task_ref: None,
            root_spec: None,
            prior_failures: Vec::new(),
        }))
    }

    /// A fix subtask of `parent`: one level deeper, the parent as
    /// `parent_task_ref`, the root's id and spec carried unchanged, and `prior_failures`
    /// = the parent's list plus `new_failures`.
    pub(crate) fn fix_subtask(
        parent: &Task,
        id: TaskId,
        spec: Spec,
        new_failures: impl IntoIterator<Item = FailureEntry>,
    ) -> Self {
        let mut prior_failures = parent.0.prior_failures.clone();
        prior_failures.extend(new_failures);
        Self(Arc::new(TaskRecord {
            id,
            spec,
            depth: parent.0.depth + 1,
            parent_task_ref: Some(parent.0.id.clone()),
            root_task_ref: Some(parent.root_task_ref().clone()),
            root_spec: Some(parent.root_spec().clone()),
            prior_failures,
        }))
    }

    /// Every field as stored (an absent root is the task's own), for the wire records.
    pub(crate) fn record(&self) -> &TaskRecord {
        &self.0
    }

    /// This task's id.
    pub fn id(&self) -> &TaskId {
        &self.0.id
    }

    /// This task's own spec (for a fix subtask, the rendered recovery spec).
    pub fn spec(&self) -> &Spec {
        &self.0.spec
    }

    /// 0 for a root task, `parent.depth + 1` for a fix subtask.
    pub fn depth(&self) -> u32 {
        self.0.depth
    }

    /// The task this one fixes, if it is a fix subtask.
    pub fn parent_task_ref(&self) -> Option<&TaskId> {
        self.0.parent_task_ref.as_ref()
    }

    /// The root of this task's closure: the stored ref, or this task's own id.
    pub fn root_task_ref(&self) -> &TaskId {
        self.0.root_task_ref.as_ref().unwrap_or(&self.0.id)
    }

    /// The root's original spec: the stored one, or this task's own spec.
    pub fn root_spec(&self) -> &Spec {
        self.0.root_spec.as_ref().unwrap_or(&self.0.spec)
    }

    /// Every failure of earlier attempts, each attributed to its attempt.
    pub fn prior_failures(&self) -> &[FailureEntry] {
        &self.0.prior_failures
    }

    /// Whether `root_task_ref` was stored explicitly (false for roots and for data written
    /// before format version 2).
    pub fn has_explicit_root(&self) -> bool {
        self.0.root_task_ref.is_some()
    }
}

impl std::fmt::Debug for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Destructured, so a field added to the record is not left out.
        let TaskRecord {
            id,
            spec,
            depth,
            parent_task_ref,
            root_task_ref,
            root_spec,
            prior_failures,
        } = &*self.0;
        f.debug_struct("Task")
            .field("id", id)
            .field("spec", spec)
            .field("depth", depth)
            .field("parent_task_ref", parent_task_ref)
            .field("root_task_ref", root_task_ref)
            .field("root_spec", root_spec)
            .field("prior_failures", prior_failures)
            .finish()
    }
}

/// Every field of a [`Task`]: what a persisted record holds once read, not yet checked,
/// and what a task holds once [`Task::try_from`] checked it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskRecord {
    pub(super) id: TaskId,
    pub(super) spec: Spec,
    pub(super) depth: u32,
    pub(super) parent_task_ref: Option<TaskId>,
    pub(super) root_task_ref: Option<TaskId>,
    pub(super) root_spec: Option<Spec>,
    pub(super) prior_failures: Vec<FailureEntry>,
}

impl TryFrom<TaskRecord> for Task {
    type Error = TaskError;

    fn try_from(r: TaskRecord) -> Result<Self, TaskError> {
        if (r.depth == 0) != r.parent_task_ref.is_none() {
            return Err(TaskError::InconsistentParent {
                id: r.id,
                depth: r.depth,
            });
        }
        // A root is its own root: an explicit ref or spec, if stored, must be its own.
        let foreign_root = r.root_task_ref.as_ref().is_some_and(|root| root != &r.id)
            || r.root_spec.as_ref().is_some_and(|spec| spec != &r.spec);
        if r.depth == 0 && foreign_root {
            return Err(TaskError::InconsistentRoot { id: r.id });
        }
        // Failures at depth d come from attempts 0..d; a root carries none.
        if let Some(f) = r.prior_failures.iter().find(|f| f.attempt >= r.depth) {
            return Err(TaskError::FutureFailure {
                attempt: f.attempt,
                id: r.id,
                depth: r.depth,
            });
        }
        Ok(Task(Arc::new(r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> TaskId {
        TaskId::new(s).unwrap()
    }

    #[test]
    fn fix_subtask_keeps_root_and_accumulates() {
        let root = Task::new(id("x"), Spec::new("intent"));
        let f0 = FailureEntry {
            attempt: 0,
            validator_id: ValidatorId::new("tests").unwrap(),
            severity: Severity::Blocker,
            justification: "boom".into(),
        };
        let fix1 = Task::fix_subtask(&root, id("x_fix_1"), Spec::new("r1"), [f0.clone()]);
        let f1 = FailureEntry {
            attempt: 1,
            ..f0.clone()
        };
        let fix2 = Task::fix_subtask(&fix1, id("x_fix_2"), Spec::new("r2"), [f1.clone()]);
        assert_eq!(fix2.depth(), 2);
        assert_eq!(fix2.parent_task_ref(), Some(&id("x_fix_1")));
        assert_eq!(fix2.root_task_ref(), &id("x"));
        assert_eq!(fix2.root_spec().intent, "intent");
        assert_eq!(fix2.prior_failures(), &[f0, f1]);
    }

    #[test]
    fn json_without_r21_fields_loads() {
        let json = r#"{"id":"t","spec":{"intent":"do"},"depth":0,"parent_task_ref":null}"#;
        let t: Task = serde_json::from_str(json).unwrap();
        assert_eq!(t.root_task_ref(), &id("t"));
        assert!(!t.has_explicit_root());
        assert!(t.prior_failures().is_empty());
    }

    #[test]
    fn inconsistent_records_are_refused() {
        let json = r#"{"id":"t","spec":{"intent":"do"},"depth":1,"parent_task_ref":null}"#;
        let err = serde_json::from_str::<Task>(json).unwrap_err();
        assert!(
            err.to_string().contains("inconsistent parent_task_ref"),
            "{err}"
        );
        let json = r#"{"id":"t","spec":{"intent":"do"},"depth":1,"parent_task_ref":"p",
            "prior_failures":[{"attempt":1,"validator_id":"v","severity":"blocker","justification":""}]}"#;
        let err = serde_json::from_str::<Task>(json).unwrap_err();
        assert!(err.to_string().contains("attempt 1"), "{err}");
        let json = r#"{"id":"t","spec":{"intent":"do"},"depth":0,"parent_task_ref":null,
            "root_task_ref":"other"}"#;
        let err = serde_json::from_str::<Task>(json).unwrap_err();
        assert!(
            err.to_string().contains("root task t names another"),
            "{err}"
        );
        let json = r#"{"id":"t","spec":{"intent":"do"},"depth":0,"parent_task_ref":null,
            "root_task_ref":"t","root_spec":{"intent":"do"}}"#;
        assert!(serde_json::from_str::<Task>(json).is_ok());
    }

    #[test]
    fn spec_digest_separates_fields() {
        let a = Spec::new("ab").with_criterion("c");
        let b = Spec::new("a").with_criterion("bc");
        assert_ne!(a.digest(), b.digest());
        assert_eq!(a.digest(), a.clone().digest());
    }
}
