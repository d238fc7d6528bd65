//! The records of the `TASK` payload: a task as format versions 1 and 2 write it, and the
//! spec and attributed failures inside it (which closure records and states reuse).
//!
//! | version | record | change |
//! |---|---|---|
//! | 1 | [`TaskV1`] | id, spec, depth, parent |
//! | 2 | [`TaskV2`] | fix subtasks carry `root_task_ref`, `root_spec`, `prior_failures` |

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::closure::task::{FailureEntry, Spec, Task, TaskRecord};
use crate::closure::verdict::Severity;
use crate::id::{TaskId, ValidatorId};
use crate::wire::{Invalid, Record, Seq};

/// A [`Spec`]: its intent and acceptance criteria.
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
pub(crate) struct SpecV1<'a> {
    intent: Cow<'a, str>,
    #[serde(default)]
    acceptance_criteria: Seq<'a, String, Cow<'a, str>>,
}

impl<'a> Record<'a, Spec> for SpecV1<'a> {
    fn of(spec: &'a Spec) -> Self {
        Self {
            intent: Cow::Borrowed(&spec.intent),
            acceptance_criteria: Seq::Borrowed(&spec.acceptance_criteria),
        }
    }
}

impl From<SpecV1<'_>> for Spec {
    fn from(w: SpecV1<'_>) -> Self {
        Spec {
            intent: w.intent.into_owned(),
            acceptance_criteria: w.acceptance_criteria.into_values(Cow::into_owned),
        }
    }
}

/// A [`Severity`], by its lowercase name.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, bincode::Encode)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SeverityV1 {
    Info,
    Warning,
    Blocker,
}

impl From<Severity> for SeverityV1 {
    fn from(s: Severity) -> Self {
        match s {
            Severity::Info => SeverityV1::Info,
            Severity::Warning => SeverityV1::Warning,
            Severity::Blocker => SeverityV1::Blocker,
        }
    }
}

impl From<SeverityV1> for Severity {
    fn from(s: SeverityV1) -> Self {
        match s {
            SeverityV1::Info => Severity::Info,
            SeverityV1::Warning => Severity::Warning,
            SeverityV1::Blocker => Severity::Blocker,
        }
    }
}

/// A [`FailureEntry`]: one failure of one attempt.
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
pub(crate) struct FailureEntryV1<'a> {
    attempt: u32,
    validator_id: Cow<'a, ValidatorId>,
    severity: SeverityV1,
    justification: Cow<'a, str>,
}

impl<'a> Record<'a, FailureEntry> for FailureEntryV1<'a> {
    fn of(f: &'a FailureEntry) -> Self {
        Self {
            attempt: f.attempt,
            validator_id: Cow::Borrowed(&f.validator_id),
            severity: f.severity.into(),
            justification: Cow::Borrowed(&f.justification),
        }
    }
}

impl From<FailureEntryV1<'_>> for FailureEntry {
    fn from(w: FailureEntryV1<'_>) -> Self {
        FailureEntry {
            attempt: w.attempt,
            validator_id: w.validator_id.into_owned(),
            severity: w.severity.into(),
            justification: w.justification.into_owned(),
        }
    }
}

/// A [`Task`] as format version 2 writes it. The fields version 2 added default, so JSON
/// written before them still reads.
#[derive(Debug, Serialize, Deserialize, bincode::Encode)]
pub(crate) struct TaskV2<'a> {
    id: Cow<'a, TaskId>,
    spec: SpecV1<'a>,
    depth: u32,
    parent_task_ref: Option<Cow<'a, TaskId>>,
    #[serde(default)]
    root_task_ref: Option<Cow<'a, TaskId>>,
    #[serde(default)]
    root_spec: Option<SpecV1<'a>>,
    #[serde(default)]
    prior_failures: Seq<'a, FailureEntry, FailureEntryV1<'a>>,
}

impl<'a> Record<'a, Task> for TaskV2<'a> {
    fn of(t: &'a Task) -> Self {
        let t = t.record();
        Self {
            id: Cow::Borrowed(&t.id),
            spec: SpecV1::of(&t.spec),
            depth: t.depth,
            parent_task_ref: t.parent_task_ref.as_ref().map(Cow::Borrowed),
            root_task_ref: t.root_task_ref.as_ref().map(Cow::Borrowed),
            root_spec: t.root_spec.as_ref().map(SpecV1::of),
            prior_failures: Seq::Borrowed(&t.prior_failures),
        }
    }
}

impl TryFrom<TaskV2<'_>> for Task {
    type Error = Invalid;

    /// Checks the task's invariants (parent, root, failures) instead of trusting the record.
    fn try_from(w: TaskV2<'_>) -> Result<Self, Invalid> {
        Task::try_from(TaskRecord {
            id: w.id.into_owned(),
            spec: w.spec.into(),
            depth: w.depth,
            parent_task_ref: w.parent_task_ref.map(Cow::into_owned),
            root_task_ref: w.root_task_ref.map(Cow::into_owned),
            root_spec: w.root_spec.map(Spec::from),
            prior_failures: w.prior_failures.into_values(FailureEntry::from),
        })
        .map_err(|e| e.to_string())
    }
}

/// A [`Task`] as format version 1 wrote it, before fix subtasks carried their root.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct TaskV1<'a> {
    pub(crate) id: Cow<'a, TaskId>,
    pub(crate) spec: SpecV1<'a>,
    pub(crate) depth: u32,
    pub(crate) parent_task_ref: Option<Cow<'a, TaskId>>,
}

impl TryFrom<TaskV1<'_>> for Task {
    type Error = Invalid;

    /// Migrates: a version-1 task loads with no explicit root and no prior failures.
    fn try_from(w: TaskV1<'_>) -> Result<Self, Invalid> {
        Task::try_from(TaskV2 {
            id: w.id,
            spec: w.spec,
            depth: w.depth,
            parent_task_ref: w.parent_task_ref,
            root_task_ref: None,
            root_spec: None,
            prior_failures: Seq::default(),
        })
    }
}

impl Serialize for Task {
    /// A task's serde form is its current record's (version 2).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        TaskV2::of(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Task {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Task::try_from(TaskV2::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}
