//! Plans that fit any project: the general lane, typed extension keys bound into the plan
//! digest, owned directories, linear ownership checks, scratch globs.

use kleene::{AgentId, AppBuildPlan, ModuleName, Plan, PlannedTask, Spec, TaskKind};
use proptest::prelude::*;

use crate::support::{id, path};

fn general(name: &str) -> PlannedTask {
    PlannedTask::new(
        id(name),
        TaskKind::General,
        AgentId::new("cargo").unwrap(),
        Spec::new(name),
    )
}

fn service(name: &str, module: &str) -> PlannedTask {
    PlannedTask::new(
        id(name),
        TaskKind::Service {
            module: ModuleName::new(module).unwrap(),
        },
        AgentId::new("Agent").unwrap(),
        Spec::new(name),
    )
}

#[test]
fn general_tasks_pass_normalisation_and_consolidation_untouched() {
    let build = general("build").owning(path("target_out/lib.txt"));
    let docs = general("docs").after(id("build")).owning(path("site"));
    let tasks = vec![build.clone(), docs.clone(), service("svc", "billing")];
    let normalized = Plan::draft(AppBuildPlan::new(tasks)).normalize();
    let by_id = |plan: &[PlannedTask], name: &str| {
        plan.iter()
            .find(|t| t.id.as_str() == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(by_id(normalized.tasks(), "build"), build);
    assert_eq!(by_id(normalized.tasks(), "docs"), docs);
    let validated = normalized.consolidate().unwrap().validate().unwrap();
    assert_eq!(validated.task(&id("build")), Some(&build));
    assert_eq!(validated.task(&id("docs")), Some(&docs));
    // Only the web-app task's module got a lane.
    assert_eq!(validated.len(), 4);
}

#[test]
fn a_plan_of_only_general_tasks_validates_and_kind_defaults_to_general() {
    let plan = AppBuildPlan::from_json(
        r#"{"tasks": [
          {"id": "fetch", "owner": "sh", "spec": {"intent": "download the data"}},
          {"id": "clean", "kind": {"lane": "general"}, "owner": "sh",
           "spec": {"intent": "clean it"}, "depends_on": ["fetch"]}
        ]}"#,
    )
    .unwrap();
    assert!(plan.tasks.iter().all(|t| t.kind == TaskKind::General));
    assert_eq!(plan.tasks[0].kind.lane(), "general");
    assert_eq!(plan.tasks[0].kind.module(), None);
    let validated = plan.clone().validate().unwrap();
    let order: Vec<&str> = validated
        .topological_order()
        .iter()
        .map(|t| t.as_str())
        .collect();
    assert_eq!(order, ["fetch", "clean"]);
    assert_eq!(AppBuildPlan::from_json(&plan.to_json()).unwrap(), plan);
    assert!(validated.to_dot().contains("clean"));

    let tied = AppBuildPlan::from_json(
        r#"{"tasks": [{"id": "a", "kind": {"lane": "general", "module": "m"},
            "owner": "o", "spec": {"intent": "x"}}]}"#,
    );
    assert!(tied.is_err(), "a general task is tied to no module");
}

#[test]
fn the_digest_covers_the_general_lane() {
    let as_general = AppBuildPlan::new(vec![general("a")]).validate().unwrap();
    let mut config = general("a");
    config.kind = TaskKind::Config { module: None };
    let as_config = AppBuildPlan::new(vec![config]).validate().unwrap();
    assert_ne!(as_general.digest(), as_config.digest());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever else a plan holds, its general tasks come out of validation exactly as
    /// written.
    #[test]
    fn general_tasks_are_never_changed(plan in kleene::testing::plan::acyclic_plan(30)) {
        let written: Vec<PlannedTask> = plan
            .tasks
            .iter()
            .filter(|t| t.kind == TaskKind::General)
            .cloned()
            .collect();
        let validated = plan.validate().unwrap();
        // Consolidation may re-point an edge to a merged persistence task to its survivor;
        // nothing else about a general task changes.
        let survivor = |d: &kleene::TaskId| {
            validated
                .tasks()
                .find(|s| &s.id == d || s.consolidated_from.contains(d))
                .map(|s| s.id.clone())
        };
        for t in &written {
            // Normalisation removes repeated edges, keeping the first of each.
            let mut seen = std::collections::BTreeSet::new();
            let mut expected = t.clone();
            expected.depends_on = t
                .depends_on
                .iter()
                .filter_map(survivor)
                .filter(|d| seen.insert(d.clone()))
                .collect();
            prop_assert_eq!(validated.task(&t.id), Some(&expected));
        }
    }
}
