//! What validation reports: each problem of a plan, and the error that holds them all.

use crate::id::TaskId;
use crate::plan::model::ModuleName;
use crate::plan::path::AdmittedPath;
use std::fmt;

/// One problem found in a plan. Every variant names the tasks involved.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum PlanProblem {
    /// The tasks form a cycle. `path` lists it in dependency order: each task is a
    /// prerequisite of the next, and the last is a prerequisite of the first.
    Cycle {
        /// The cycle, starting at its smallest id.
        path: Vec<TaskId>,
    },
    /// A task depends on an id that no task has.
    UnknownDependency {
        /// The dependent task.
        task: TaskId,
        /// The missing prerequisite.
        dependency: TaskId,
    },
    /// Several tasks share one id.
    DuplicateTaskId {
        /// The shared id.
        id: TaskId,
        /// How many tasks have it.
        count: usize,
    },
    /// A task lists itself as a prerequisite.
    SelfDependency {
        /// The task.
        task: TaskId,
    },
    /// A module is provided by more than one module lane.
    AmbiguousModuleOwner {
        /// The module.
        module: ModuleName,
        /// The tasks that provide it, sorted.
        tasks: Vec<TaskId>,
    },
    /// A path is owned by more than one task.
    PathOwnedTwice {
        /// The path.
        path: AdmittedPath,
        /// The tasks that own it, sorted.
        tasks: Vec<TaskId>,
    },
    /// An owned path lies beneath another owned path (`a` and `a/b`). Owning `a` owns its
    /// whole subtree, so the two overlap (within one task the inner path is redundant).
    NestedPath {
        /// The outer path.
        outer: AdmittedPath,
        /// The task that owns it.
        outer_task: TaskId,
        /// The path beneath it.
        inner: AdmittedPath,
        /// The task that owns that.
        inner_task: TaskId,
    },
    /// A task records an input contract from a task that is not one of its prerequisites.
    ContractWithoutDependency {
        /// The receiving task.
        task: TaskId,
        /// The contract's source.
        from: TaskId,
    },
}

impl PlanProblem {
    /// Whether this problem is a cycle.
    pub fn is_cycle(&self) -> bool {
        matches!(self, Self::Cycle { .. })
    }

    /// The cycle's path, if this problem is a cycle.
    pub fn cycle(&self) -> Option<&[TaskId]> {
        match self {
            Self::Cycle { path } => Some(path),
            _ => None,
        }
    }

    /// The tasks this problem names.
    pub fn tasks(&self) -> Vec<&TaskId> {
        match self {
            Self::Cycle { path } => path.iter().collect(),
            Self::UnknownDependency { task, .. }
            | Self::SelfDependency { task }
            | Self::ContractWithoutDependency { task, .. } => vec![task],
            Self::DuplicateTaskId { id, .. } => vec![id],
            Self::AmbiguousModuleOwner { tasks, .. } | Self::PathOwnedTwice { tasks, .. } => {
                tasks.iter().collect()
            }
            Self::NestedPath {
                outer_task,
                inner_task,
                ..
            } => vec![outer_task, inner_task],
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Self::DuplicateTaskId { .. } => 0,
            Self::SelfDependency { .. } => 1,
            Self::UnknownDependency { .. } => 2,
            Self::ContractWithoutDependency { .. } => 3,
            Self::AmbiguousModuleOwner { .. } => 4,
            Self::PathOwnedTwice { .. } => 5,
            Self::NestedPath { .. } => 6,
            Self::Cycle { .. } => 7,
        }
    }
}

pub(super) fn join(ids: &[TaskId]) -> String {
    ids.iter()
        .map(TaskId::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for PlanProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cycle { path } => {
                let ids: Vec<&str> = path.iter().map(TaskId::as_str).collect();
                let first = ids.first().copied().unwrap_or_default();
                write!(f, "cycle {} -> {first}", ids.join(" -> "))
            }
            Self::UnknownDependency { task, dependency } => {
                write!(f, "task {task} depends on unknown task {dependency}")
            }
            Self::DuplicateTaskId { id, count } => write!(f, "{count} tasks have id {id}"),
            Self::SelfDependency { task } => write!(f, "task {task} depends on itself"),
            Self::AmbiguousModuleOwner { module, tasks } => {
                write!(f, "module {module} is provided by {}", join(tasks))
            }
            Self::PathOwnedTwice { path, tasks } => {
                write!(f, "path {path} is owned by {}", join(tasks))
            }
            Self::NestedPath {
                outer,
                outer_task,
                inner,
                inner_task,
            } => write!(
                f,
                "path {inner} of task {inner_task} lies under path {outer} of task {outer_task}"
            ),
            Self::ContractWithoutDependency { task, from } => write!(
                f,
                "task {task} has an input contract from {from}, which is not a prerequisite"
            ),
        }
    }
}

/// When validation ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValidationStage {
    /// On the normalised plan, before persistence tasks were consolidated.
    BeforeConsolidation,
    /// On the consolidated plan (a merge can create a cycle).
    AfterConsolidation,
}

impl fmt::Display for ValidationStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::BeforeConsolidation => "before consolidation",
            Self::AfterConsolidation => "after consolidation",
        })
    }
}

/// Every problem validation found in a plan (never empty).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("validate plan {stage}: {}", summary(.problems))]
pub struct PlanValidationError {
    stage: ValidationStage,
    problems: Vec<PlanProblem>,
}

pub(super) fn summary(problems: &[PlanProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl PlanValidationError {
    /// Every problem found at `stage`, in a fixed order: by kind, then by the ids and paths
    /// they name, so the order of the plan's tasks never moves them.
    pub(crate) fn new(stage: ValidationStage, mut problems: Vec<PlanProblem>) -> Self {
        problems.sort_by(|a, b| a.rank().cmp(&b.rank()).then_with(|| a.cmp(b)));
        Self { stage, problems }
    }

    /// All problems, in a fixed order (by kind, then by the ids they name).
    pub fn problems(&self) -> &[PlanProblem] {
        &self.problems
    }

    /// When validation ran.
    pub fn stage(&self) -> ValidationStage {
        self.stage
    }

    /// The cycles found.
    pub fn cycles(&self) -> impl Iterator<Item = &[TaskId]> {
        self.problems.iter().filter_map(PlanProblem::cycle)
    }
}
