//! The approved app build plan as a DAG, and the steps that make it executable:
//! normalisation, consolidation and validation.
//!
//! A plan moves through type states, and only the last one can be executed:
//! [`Plan<Draft>`](Draft) → [`normalize`](Plan::normalize) → [`Plan<Normalized>`](Normalized)
//! → [`consolidate`](Plan::consolidate) (validates the normalised DAG first) →
//! [`Plan<Consolidated>`](Consolidated) → [`validate`](Plan::validate) (validates again: a
//! merge can create a cycle) → [`ValidatedPlan`].
//!
//! ```
//! use kleene::{AppBuildPlan, plan::Plan, id::TaskId};
//!
//! let plan = AppBuildPlan::from_json(r#"{"tasks": [
//!   {"id": "model_tasks", "kind": {"lane": "model", "module": "tasks"},
//!    "owner": "ModelAgent", "spec": {"intent": "task schema"},
//!    "owned_paths": ["backend/schemas.py"]},
//!   {"id": "service_tasks", "kind": {"lane": "service", "module": "tasks"},
//!    "owner": "ServiceAgent", "spec": {"intent": "task handlers"}}
//! ]}"#)?;
//! let validated = Plan::draft(plan).normalize().consolidate()?.validate()?;
//!
//! // Normalisation synthesised the missing module lane and the contract edges.
//! let order: Vec<&str> = validated.topological_order().iter().map(|t| t.as_str()).collect();
//! assert_eq!(order, ["module_tasks", "model_tasks", "service_tasks"]);
//! let service = TaskId::new("service_tasks")?;
//! assert_eq!(validated.prerequisites(&service).len(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Validation reports every problem at once, each naming its tasks:
//!
//! ```
//! use kleene::{id::AgentId, AppBuildPlan, plan::ModuleName, plan::Plan, plan::PlannedTask, plan::PlanProblem, closure::Spec,
//!              id::TaskId, plan::TaskKind};
//!
//! let task = |id: &str| PlannedTask::new(
//!     TaskId::new(id).unwrap(),
//!     TaskKind::Config { module: None },
//!     AgentId::new("ConfigAgent").unwrap(),
//!     Spec::new(id),
//! );
//! let a = task("a").after(TaskId::new("b")?);
//! let b = task("b").after(TaskId::new("a")?).after(TaskId::new("ghost")?);
//! let err = Plan::draft(AppBuildPlan::new(vec![a, b])).normalize().consolidate().unwrap_err();
//! assert_eq!(err.problems().len(), 2);
//! assert!(matches!(&err.problems()[0], PlanProblem::UnknownDependency { .. }));
//! assert_eq!(err.cycles().next().unwrap(), [TaskId::new("a")?, TaskId::new("b")?]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod consolidate;
mod dot;
mod explain;
mod extension;
mod load;
mod model;
mod normalize;
pub(crate) mod path;
pub(crate) mod validate;

use std::collections::BTreeMap;
use std::marker::PhantomData;

pub use dot::{NodeOutcome, NodeState};
pub use explain::explain_value_error;
pub use extension::{ExtensionValue, Extensions};
pub use model::{
    AppBuildPlan, ContractKind, DEFAULT_RETRY_LIMIT, InputContract, MAX_MODULE_NAME_LEN,
    ModuleName, ModuleNameError, PlanLoadError, PlannedTask, SYNTHESIZED_MODULE_OWNER, TaskKind,
    TaskOrigin,
};
pub use path::{
    AdmittedPath, GlobError, MAX_COMPONENT_LEN, MAX_PATH_LEN, PathError, PathGlob,
    SECRETS_MANIFEST_PATH,
};
pub use validate::{PlanProblem, PlanValidationError, ValidatedPlan, ValidationStage};

mod sealed {
    pub trait Sealed {}
}

/// A stage of a [`Plan`] (type state). Sealed: only [`Draft`], [`Normalized`] and
/// [`Consolidated`] implement it.
pub trait PlanState: sealed::Sealed {
    /// The stage's name.
    const NAME: &'static str;
}

/// A plan as written (type state): nothing checked or added yet.
#[derive(Debug, Clone, Copy)]
pub enum Draft {}
/// A normalised plan (type state): module lanes synthesised, contract edges added.
#[derive(Debug, Clone, Copy)]
pub enum Normalized {}
/// A normalised plan whose DAG was validated and whose persistence tasks were consolidated
/// (type state); it must be validated again.
#[derive(Debug, Clone, Copy)]
pub enum Consolidated {}

impl sealed::Sealed for Draft {}
impl sealed::Sealed for Normalized {}
impl sealed::Sealed for Consolidated {}
impl PlanState for Draft {
    const NAME: &'static str = "draft";
}
impl PlanState for Normalized {
    const NAME: &'static str = "normalized";
}
impl PlanState for Consolidated {
    const NAME: &'static str = "consolidated";
}

/// An [`AppBuildPlan`] on its way to a [`ValidatedPlan`]; `S` is its stage (type state).
///
/// ```compile_fail
/// use kleene::{AppBuildPlan, plan::Plan};
/// // A draft cannot be validated: it must be normalised and consolidated first.
/// let _ = Plan::draft(AppBuildPlan::default()).validate();
/// ```
///
/// ```compile_fail
/// use kleene::{AppBuildPlan, plan::Plan};
/// // Skipping consolidation (and the validation that comes with it) does not compile either.
/// let _ = Plan::draft(AppBuildPlan::default()).normalize().validate();
/// ```
///
/// ```
/// use kleene::{AppBuildPlan, plan::Plan};
/// // The one order that compiles.
/// let plan = Plan::draft(AppBuildPlan::default()).normalize().consolidate()?.validate()?;
/// assert!(plan.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Plan<S: PlanState> {
    tasks: Vec<PlannedTask>,
    /// The plan-level extension values, carried unchanged through every stage.
    extensions: BTreeMap<String, ExtensionValue>,
    /// After consolidation: the merged plan's structure, carried over from the validation
    /// of the normalised plan, and its order (`None` when the merge closed a cycle).
    carried: Option<(validate::Resolved, Option<Vec<u32>>)>,
    state: PhantomData<S>,
}

impl<S: PlanState> Plan<S> {
    fn at(tasks: Vec<PlannedTask>, extensions: BTreeMap<String, ExtensionValue>) -> Self {
        Self {
            tasks,
            extensions,
            carried: None,
            state: PhantomData,
        }
    }

    /// The tasks at this stage.
    pub fn tasks(&self) -> &[PlannedTask] {
        &self.tasks
    }

    /// The plan as data at this stage (for example, to save a normalised plan).
    pub fn into_app_build_plan(self) -> AppBuildPlan {
        AppBuildPlan {
            tasks: self.tasks,
            extensions: self.extensions,
        }
    }
}

impl Plan<Draft> {
    /// A draft of `plan`.
    pub fn draft(plan: AppBuildPlan) -> Self {
        Self::at(plan.tasks, plan.extensions)
    }

    /// Normalises the plan: synthesises a module lane `module_<name>` (owner
    /// [`SYNTHESIZED_MODULE_OWNER`]) for every module that tasks reference but no task
    /// provides; then adds the contract edges module → model, module → persistence,
    /// persistence → model, module → service, model → service, module → page, and module →
    /// config/auth for config and auth tasks tied to a module, recording each as an
    /// [`InputContract`] on the receiving task. Explicit edges are kept (repeats removed);
    /// no other task is ever added.
    ///
    /// Idempotent: normalising a normalised plan changes nothing.
    pub fn normalize(self) -> Plan<Normalized> {
        let mut tasks = self.tasks;
        normalize::normalize(&mut tasks);
        Plan::at(tasks, self.extensions)
    }
}

impl Plan<Normalized> {
    /// Validates the normalised DAG, then merges the persistence tasks of each module into
    /// one: the survivor is the smallest id; owned paths, prerequisites and input contracts
    /// are united; every edge to a merged task is re-pointed to the survivor and
    /// de-duplicated.
    ///
    /// # Errors
    ///
    /// [`PlanValidationError`] at [`ValidationStage::BeforeConsolidation`] with every
    /// problem of the normalised plan.
    pub fn consolidate(self) -> Result<Plan<Consolidated>, PlanValidationError> {
        // Every rule but acyclicity here; consolidation orders the merged plan, which
        // proves the normalised plan acyclic too (or orders it on its own when it cannot).
        let resolved =
            validate::analyse_unordered(&self.tasks, ValidationStage::BeforeConsolidation)?;
        let (tasks, resolved, order) = consolidate::consolidate(self.tasks, resolved)?;
        Ok(Plan {
            tasks,
            extensions: self.extensions,
            carried: Some((resolved, order)),
            state: PhantomData,
        })
    }
}

impl Plan<Consolidated> {
    /// Validates the consolidated plan again: a merge can create a cycle.
    ///
    /// Consolidation carries the resolved structure of the validated normalised plan over to
    /// the merged plan by integer remapping, so this second validation does not resolve
    /// string ids again. What a merge can change is the DAG (cycles) and the topological
    /// order: consolidation already ordered the merged plan (that order is also what proves
    /// the normalised plan acyclic), so this validation reports the cycles a merge closed, if
    /// any; the other rules hold by construction (a merge removes tasks and
    /// re-points edges to an existing survivor: no id is added, no edge to an unknown task
    /// or to itself remains, contracts move with their edges, and the set of owned paths is
    /// unchanged). A test checks that the carried structure equals a validation from
    /// scratch of the consolidated tasks.
    ///
    /// # Errors
    ///
    /// [`PlanValidationError`] at [`ValidationStage::AfterConsolidation`] with every
    /// problem.
    ///
    /// # Complexity
    ///
    /// `O((n + e) log n)` for `n` tasks and `e` edges (the log from ordering ties by id).
    pub fn validate(self) -> Result<ValidatedPlan, PlanValidationError> {
        let structure = match self.carried {
            // Consolidation already ordered the merged plan.
            Some((resolved, Some(order))) => validate::Structure { resolved, order },
            Some((resolved, None)) => {
                validate::ordered(&self.tasks, resolved, ValidationStage::AfterConsolidation)?
            }
            None => validate::analyse(&self.tasks, ValidationStage::AfterConsolidation)?,
        };
        Ok(ValidatedPlan::build(self.tasks, self.extensions, structure))
    }
}

impl AppBuildPlan {
    /// Normalises, consolidates and validates the plan in one go.
    ///
    /// # Errors
    ///
    /// [`PlanValidationError`] with every problem of the first validation that failed.
    pub fn validate(self) -> Result<ValidatedPlan, PlanValidationError> {
        Plan::draft(self).normalize().consolidate()?.validate()
    }
}
