//! The plan of independent tasks the driver benches use: its critical path is one task.

use kleene::{
    AppBuildPlan, ValidatedPlan,
    closure::Spec,
    id::{AgentId, TaskId},
    plan::{Plan, PlannedTask, TaskKind},
};

/// `n` config tasks with no dependencies, `t000000` onwards.
pub fn independent_plan(n: usize) -> ValidatedPlan {
    let tasks = (0..n)
        .map(|i| {
            PlannedTask::new(
                TaskId::new(format!("t{i:06}")).unwrap(),
                TaskKind::Config { module: None },
                AgentId::new("ConfigAgent").unwrap(),
                Spec::new("independent"),
            )
        })
        .collect();
    Plan::draft(AppBuildPlan::new(tasks))
        .normalize()
        .consolidate()
        .unwrap()
        .validate()
        .unwrap()
}
