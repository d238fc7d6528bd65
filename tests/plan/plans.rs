//! Plans (R11 slice 1): normalisation, consolidation, validation, queries, JSON, DOT.

use kleene::{
    AppBuildPlan,
    closure::Spec,
    id::{AgentId, TaskId},
    plan::{
        ContractKind, InputContract, ModuleName, Plan, PlanProblem, PlannedTask, TaskKind,
        ValidationStage,
    },
};

use crate::support::{id, path};

fn m(s: &str) -> ModuleName {
    ModuleName::new(s).unwrap()
}

fn task(name: &str, kind: TaskKind) -> PlannedTask {
    PlannedTask::new(
        id(name),
        kind,
        AgentId::new("Agent").unwrap(),
        Spec::new(name),
    )
}

fn model(name: &str, module: &str) -> PlannedTask {
    task(name, TaskKind::Model { module: m(module) })
}
fn service(name: &str, module: &str) -> PlannedTask {
    task(name, TaskKind::Service { module: m(module) })
}
fn page(name: &str, module: &str) -> PlannedTask {
    task(name, TaskKind::Page { module: m(module) })
}
fn persistence(name: &str, module: &str) -> PlannedTask {
    task(name, TaskKind::Persistence { module: m(module) })
}
fn module(name: &str, module: &str) -> PlannedTask {
    task(name, TaskKind::Module { module: m(module) })
}

fn normalized(tasks: Vec<PlannedTask>) -> Vec<PlannedTask> {
    Plan::draft(AppBuildPlan::new(tasks))
        .normalize()
        .into_app_build_plan()
        .tasks
}

fn find<'a>(tasks: &'a [PlannedTask], name: &str) -> &'a PlannedTask {
    tasks.iter().find(|t| t.id.as_str() == name).unwrap()
}

fn deps(t: &PlannedTask) -> Vec<&str> {
    let mut d: Vec<&str> = t.depends_on.iter().map(TaskId::as_str).collect();
    d.sort_unstable();
    d
}

fn contracts(t: &PlannedTask) -> Vec<(&str, ContractKind)> {
    let mut c: Vec<_> = t
        .input_contracts
        .iter()
        .map(|c| (c.from.as_str(), c.contract))
        .collect();
    c.sort_unstable();
    c
}

fn strs(ids: &[TaskId]) -> Vec<&str> {
    ids.iter().map(TaskId::as_str).collect()
}

#[test]
fn absent_module_tasks_get_one_synthesized_lane_and_contract_edges() {
    let tasks = normalized(vec![
        model("model_t", "tasks"),
        persistence("db_t", "tasks"),
        service("svc_t", "tasks"),
        page("page_t", "tasks"),
    ]);
    assert_eq!(tasks.len(), 5, "exactly one task added: the module lane");
    let lane = find(&tasks, "module_tasks");
    assert!(lane.is_synthesized());
    assert_eq!(lane.kind, TaskKind::Module { module: m("tasks") });
    assert!(lane.depends_on.is_empty() && lane.owned_paths.is_empty());

    assert_eq!(deps(find(&tasks, "db_t")), ["module_tasks"]);
    assert_eq!(deps(find(&tasks, "model_t")), ["db_t", "module_tasks"]);
    assert_eq!(
        contracts(find(&tasks, "model_t")),
        [
            ("db_t", ContractKind::Persistence),
            ("module_tasks", ContractKind::Module)
        ]
    );
    assert_eq!(deps(find(&tasks, "svc_t")), ["model_t", "module_tasks"]);
    assert_eq!(
        contracts(find(&tasks, "svc_t")),
        [
            ("model_t", ContractKind::Schemas),
            ("module_tasks", ContractKind::Module)
        ]
    );
    assert_eq!(deps(find(&tasks, "page_t")), ["module_tasks"]);
}

#[test]
fn existing_module_lane_and_explicit_edges_are_kept() {
    let tasks = normalized(vec![
        module("tasks_module", "tasks"),
        page("page_t", "tasks")
            .after(id("svc_t"))
            .after(id("svc_t")),
        service("svc_t", "tasks"),
        task("config", TaskKind::Config { module: None }),
        task("auth", TaskKind::Auth { module: None }).after(id("config")),
    ]);
    assert_eq!(
        tasks.len(),
        5,
        "the provided module lane is used, none synthesized"
    );
    assert!(tasks.iter().all(|t| !t.is_synthesized()));
    let page = find(&tasks, "page_t");
    assert_eq!(
        page.depends_on,
        [id("svc_t"), id("tasks_module")],
        "explicit edge first, repeats removed"
    );
    assert_eq!(
        deps(find(&tasks, "auth")),
        ["config"],
        "app-wide lanes get no invented edges"
    );
    assert!(find(&tasks, "config").depends_on.is_empty());
}

#[test]
fn multiple_modules_get_their_own_lanes_and_edges_stay_within_a_module() {
    let tasks = normalized(vec![
        model("model_b", "billing"),
        service("svc_b", "billing").after(id("model_t")),
        model("model_t", "tasks"),
        service("svc_t", "tasks"),
        task(
            "auth_t",
            TaskKind::Auth {
                module: Some(m("tasks")),
            },
        ),
    ]);
    let synthesized: Vec<&str> = tasks
        .iter()
        .filter(|t| t.is_synthesized())
        .map(|t| t.id.as_str())
        .collect();
    assert_eq!(synthesized, ["module_billing", "module_tasks"]);
    assert_eq!(deps(find(&tasks, "svc_t")), ["model_t", "module_tasks"]);
    assert_eq!(
        deps(find(&tasks, "svc_b")),
        ["model_b", "model_t", "module_billing"],
        "the explicit cross-module edge stays, no other cross-module edge appears"
    );
    assert_eq!(deps(find(&tasks, "auth_t")), ["module_tasks"]);
}

#[test]
fn repeated_normalisation_changes_nothing() {
    let once = normalized(vec![
        model("model_t", "tasks"),
        persistence("db_t", "tasks").after(id("cfg")),
        service("svc_t", "tasks"),
        task("cfg", TaskKind::Config { module: None }),
    ]);
    let twice = normalized(once.clone());
    assert_eq!(once, twice);
    // Also through JSON: a saved normalised plan normalises to itself.
    let reloaded = AppBuildPlan::from_json(&AppBuildPlan::new(once.clone()).to_json()).unwrap();
    assert_eq!(normalized(reloaded.tasks), once);
}

#[test]
fn ambiguous_module_owners_are_reported_with_both_tasks() {
    let err = AppBuildPlan::new(vec![
        module("m2", "tasks"),
        module("m1", "tasks"),
        model("model_t", "tasks"),
    ])
    .validate()
    .unwrap_err();
    assert_eq!(err.stage(), ValidationStage::BeforeConsolidation);
    assert_eq!(
        err.problems(),
        [PlanProblem::AmbiguousModuleOwner {
            module: m("tasks"),
            tasks: vec![id("m1"), id("m2")],
        }]
    );
}

#[test]
fn a_cycle_created_by_consolidation_is_caught_by_revalidation() {
    // db_a -> reader -> db_b is acyclic; merging db_a and db_b closes the loop.
    let plan = AppBuildPlan::new(vec![
        persistence("db_a", "tasks").owning(path("backend/db/a.py")),
        task("reader", TaskKind::Config { module: None }).after(id("db_a")),
        persistence("db_b", "tasks")
            .after(id("reader"))
            .owning(path("backend/db/b.py")),
    ]);
    let consolidated = Plan::draft(plan).normalize().consolidate().unwrap();
    let err = consolidated.validate().unwrap_err();
    assert_eq!(err.stage(), ValidationStage::AfterConsolidation);
    let cycles: Vec<Vec<&str>> = err.cycles().map(strs).collect();
    assert_eq!(cycles, [["db_a", "reader"]]);
}

#[test]
fn consolidation_merges_persistence_tasks_of_a_module() {
    let plan = AppBuildPlan::new(vec![
        persistence("db_b", "tasks")
            .owning(path("backend/db/b.py"))
            .owning(path("backend/db/shared.py")),
        persistence("db_a", "tasks").owning(path("backend/db/a.py")),
        persistence("db_x", "other"),
        model("model_t", "tasks").after(id("db_b")),
        page("page_t", "tasks").after(id("db_a")).after(id("db_b")),
    ]);
    let mut retry = plan.clone();
    retry.tasks[0].retry_limit = 1;
    let plan = Plan::draft(plan)
        .normalize()
        .consolidate()
        .unwrap()
        .validate()
        .unwrap();
    assert_eq!(
        plan.len(),
        6,
        "two tasks became one; two module lanes were added"
    );
    let db = plan.task(&id("db_a")).unwrap();
    assert!(plan.task(&id("db_b")).is_none());
    assert_eq!(db.consolidated_from, [id("db_b")]);
    assert_eq!(
        db.owned_paths,
        [
            path("backend/db/a.py"),
            path("backend/db/b.py"),
            path("backend/db/shared.py")
        ]
    );
    assert_eq!(db.spec.intent, "db_a\n\ndb_b");
    assert_eq!(plan.owner_of(&path("backend/db/b.py")), Some(&id("db_a")));
    let model = plan.task(&id("model_t")).unwrap();
    assert_eq!(
        model.depends_on,
        [id("db_a"), id("module_tasks")],
        "re-pointed and de-duplicated"
    );
    assert_eq!(
        contracts(model),
        [
            ("db_a", ContractKind::Persistence),
            ("module_tasks", ContractKind::Module)
        ]
    );
    assert_eq!(
        plan.prerequisites(&id("page_t")),
        [&id("db_a"), &id("module_tasks")]
    );
    assert_eq!(
        plan.task(&id("db_x")).unwrap().consolidated_from,
        [] as [TaskId; 0]
    );

    let saved = plan.to_app_build_plan();
    assert_eq!(AppBuildPlan::from_json(&saved.to_json()).unwrap(), saved);
    assert_eq!(
        saved.validate().unwrap().digest(),
        plan.digest(),
        "a saved validated plan validates to the same plan"
    );

    let merged = retry.validate().unwrap();
    assert_eq!(
        merged.task(&id("db_a")).unwrap().retry_limit,
        1,
        "a merge never raises a budget"
    );
}

#[test]
fn validation_reports_every_problem_at_once() {
    let mut contract_only = task("contract_only", TaskKind::Config { module: None });
    contract_only.input_contracts.push(InputContract {
        from: id("dup"),
        contract: ContractKind::Module,
    });
    let err = AppBuildPlan::new(vec![
        task("dup", TaskKind::Config { module: None }).owning(path("a/b.py")),
        task("dup", TaskKind::Config { module: None }),
        task("selfish", TaskKind::Config { module: None }).after(id("selfish")),
        task("lost", TaskKind::Config { module: None }).after(id("ghost")),
        task("x", TaskKind::Config { module: None })
            .after(id("y"))
            .owning(path("a/b.py"))
            .owning(path("a")),
        task("y", TaskKind::Config { module: None }).after(id("x")),
        contract_only,
    ])
    .validate()
    .unwrap_err();
    let shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "2 tasks have id dup",
            "task selfish depends on itself",
            "task lost depends on unknown task ghost",
            "task contract_only has an input contract from dup, which is not a prerequisite",
            "path a/b.py is owned by dup, x",
            "path a/b.py of task dup lies under path a of task x",
            "cycle x -> y -> x",
        ]
    );
    assert!(
        err.to_string()
            .starts_with("validate plan before consolidation: 2 tasks")
    );
    assert!(err.problems()[6].is_cycle());
}

use proptest::strategy::Strategy as _;

proptest::proptest! {
    /// The problems come in one order whatever the order of the plan's tasks: by kind, then
    /// by the ids and paths they name (two unknown dependencies swapped places when their
    /// tasks did).
    #[test]
    fn the_problems_do_not_move_with_the_order_of_the_tasks(
        order in proptest::strategy::Just((0..8usize).collect::<Vec<_>>()).prop_shuffle(),
    ) {
        let config = || TaskKind::Config { module: None };
        let tasks = || vec![
            task("lost", config()).after(id("ghost")),
            task("astray", config()).after(id("phantom")),
            task("selfish", config()).after(id("selfish")),
            task("x", config()).after(id("y")).owning(path("a/b.py")),
            task("y", config()).after(id("x")).owning(path("a/b.py")),
            task("p", config()).owning(path("c")),
            task("q", config()).owning(path("c/d")),
            task("z", config()).after(id("nowhere")),
        ];
        let problems = |tasks: Vec<PlannedTask>| -> Vec<String> {
            AppBuildPlan::new(tasks)
                .validate()
                .unwrap_err()
                .problems()
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        let given = problems(tasks());
        let mut shuffled: Vec<Option<PlannedTask>> = tasks().into_iter().map(Some).collect();
        let reordered: Vec<PlannedTask> = order.iter().filter_map(|&i| shuffled[i].take()).collect();
        proptest::prop_assert_eq!(problems(reordered), given);
    }
}

#[test]
fn validated_plan_answers_queries_in_deterministic_order() {
    let plan = AppBuildPlan::new(vec![
        page("page_t", "tasks").owning(path("frontend/tasks.tsx")),
        service("svc_t", "tasks").owning(path("backend/service.py")),
        model("model_t", "tasks").owning(path("backend/schemas.py")),
        task("cfg", TaskKind::Config { module: None }),
    ])
    .validate()
    .unwrap();
    assert_eq!(
        strs(plan.topological_order()),
        ["cfg", "module_tasks", "model_t", "page_t", "svc_t"],
        "ties broken by id"
    );
    let ids: Vec<&TaskId> = plan.tasks().map(|t| &t.id).collect();
    assert_eq!(ids, plan.topological_order().iter().collect::<Vec<_>>());
    assert_eq!(
        plan.transitive_dependents(&id("module_tasks")),
        [id("model_t"), id("page_t"), id("svc_t")]
    );
    assert_eq!(plan.transitive_dependents(&id("model_t")), [id("svc_t")]);
    assert!(plan.transitive_dependents(&id("nope")).is_empty());
    assert_eq!(
        plan.prerequisites(&id("svc_t")),
        [&id("model_t"), &id("module_tasks")]
    );
    assert_eq!(plan.dependents(&id("model_t")), [&id("svc_t")]);
    assert_eq!(
        plan.owner_of(&path("backend/schemas.py")),
        Some(&id("model_t"))
    );
    assert_eq!(plan.owner_of(&path("backend")), None);
    assert_eq!(plan.dependency_count(), 4);
    assert_eq!(plan.len(), 5);
}

#[test]
fn json_loading_names_field_position_and_rule() {
    let unknown = AppBuildPlan::from_json(
        r#"{"tasks": [{"id": "a", "kind": {"lane": "config"}, "owner": "o",
            "spec": {"intent": "x"}, "ownd_paths": []}]}"#,
    )
    .unwrap_err();
    assert_eq!(unknown.field(), "tasks[0].ownd_paths");
    assert_eq!(unknown.position(), (2, 49));
    assert!(
        unknown.to_string().contains("unknown field `ownd_paths`"),
        "{unknown}"
    );

    let hostile = AppBuildPlan::from_json(
        r#"{"tasks": [{"id": "a", "kind": {"lane": "config"}, "owner": "o",
            "spec": {"intent": "x"}, "owned_paths": ["ok.py", "../../etc/passwd"]}]}"#,
    )
    .unwrap_err();
    assert_eq!(hostile.field(), "tasks[0].owned_paths[1]");
    assert!(hostile.to_string().contains("traversal"), "{hostile}");
    assert!(
        hostile.to_string().contains("../../etc/passwd"),
        "{hostile}"
    );

    let lane = AppBuildPlan::from_json(
        r#"{"tasks": [{"id": "a", "kind": {"lane": "model", "module": "t", "x": 1},
            "owner": "o", "spec": {"intent": "x"}}]}"#,
    )
    .unwrap_err();
    assert!(lane.to_string().contains("unknown field `x`"), "{lane}");

    let missing = AppBuildPlan::from_json(r#"{"tasks": [{"id": "a"}]}"#).unwrap_err();
    // Names the key and the JSON it takes, not serde's "missing field".
    assert!(
        missing
            .to_string()
            .contains("tasks[0] is missing \"owner\": a string"),
        "{missing}"
    );
    assert!(
        AppBuildPlan::from_json(r#"{"tasks": []} x"#).is_err(),
        "trailing data"
    );
}

/// A task id names files in kleene's state, so one that is a path (or hides, or is too
/// long, or holds a NUL) is refused at load, at the id, with the rule it broke.
#[test]
fn json_loading_refuses_an_id_that_is_not_a_name() {
    let long = "a".repeat(257);
    for (id, field, rule) in [
        ("web/api", "tasks[0].id", "contains '/' at byte 3"),
        ("../../escape", "tasks[0].id", "contains '/' at byte 2"),
        ("..", "tasks[0].id", "names the parent directory"),
        (".", "tasks[0].id", "names the directory itself"),
        (".hidden", "tasks[0].id", "starts with '.'"),
        ("a\\u0000b", "tasks[0].id", "control character"),
        (long.as_str(), "tasks[0].id", "257 bytes long"),
    ] {
        let json = format!(
            r#"{{"tasks": [{{"id": "{id}", "kind": {{"lane": "config"}}, "owner": "o",
                "spec": {{"intent": "x"}}}}]}}"#
        );
        let err = AppBuildPlan::from_json(&json).unwrap_err();
        assert_eq!(err.field(), field, "{id}: {err}");
        assert!(err.to_string().contains(rule), "{id}: {err}");
        assert!(err.to_string().contains("task id"), "{id}: {err}");
    }
    // Ids that merely refer to a task are ids too.
    let edge = AppBuildPlan::from_json(
        r#"{"tasks": [{"id": "a", "kind": {"lane": "config"}, "owner": "o",
            "spec": {"intent": "x"}, "depends_on": ["../b"]}]}"#,
    )
    .unwrap_err();
    assert_eq!(edge.field(), "tasks[0].depends_on[0]", "{edge}");
    assert!(
        edge.to_string().contains("a task id is a name, not a path"),
        "{edge}"
    );
}

#[test]
fn dot_export_colours_lanes_and_marks_synthesized_tasks() {
    let plan = AppBuildPlan::new(vec![model("model_t", "tasks"), service("svc_t", "tasks")])
        .validate()
        .unwrap();
    let dot = plan.to_dot();
    assert!(dot.contains(
        r##""module_tasks" [label="module_tasks\nmodule · tasks\n(synthesized)", fillcolor="#f4d35e", style="filled,dashed"];"##
    ), "{dot}");
    assert!(dot.contains(r##""model_t" [label="model_t\nmodel · tasks", fillcolor="#8ecae6"];"##));
    assert!(dot.contains(r##""model_t" -> "svc_t";"##));
    assert_eq!(dot.matches(" -> ").count(), 3);
    assert!(dot.ends_with("}\n"));
}

mod properties {
    use std::collections::{BTreeMap, BTreeSet};

    use kleene::testing::plan::{
        acyclic_plan, arbitrary_plan, hostile_path_with_rule, ordinary_path,
        plan_with_injected_cycle, plan_with_missing_module_lanes,
    };
    use kleene::{
        AppBuildPlan, ValidatedPlan, id::TaskId, plan::AdmittedPath, plan::Plan, plan::PlannedTask,
    };
    use proptest::prelude::*;

    fn normalize(tasks: Vec<PlannedTask>) -> Vec<PlannedTask> {
        Plan::draft(AppBuildPlan::new(tasks))
            .normalize()
            .into_app_build_plan()
            .tasks
    }

    /// The oracle: repeatedly take the smallest id whose prerequisites are all placed.
    fn oracle_order(plan: &ValidatedPlan) -> Vec<TaskId> {
        let mut pending: BTreeMap<&TaskId, BTreeSet<&TaskId>> = plan
            .tasks()
            .map(|t| (&t.id, t.depends_on.iter().collect()))
            .collect();
        let mut order = Vec::new();
        while let Some(next) = pending
            .iter()
            .find(|(_, pre)| pre.is_empty())
            .map(|(id, _)| *id)
        {
            pending.remove(next);
            for pre in pending.values_mut() {
                pre.remove(next);
            }
            order.push(next.clone());
        }
        assert!(
            pending.is_empty(),
            "the oracle found a cycle in a validated plan"
        );
        order
    }

    fn shuffled(tasks: Vec<PlannedTask>) -> impl Strategy<Value = Vec<PlannedTask>> {
        Just(tasks).prop_shuffle().prop_map(|mut tasks| {
            // Inner lists carry no order either.
            for t in &mut tasks {
                t.depends_on.reverse();
                t.owned_paths.reverse();
                t.input_contracts.reverse();
            }
            tasks
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        #[test]
        fn acyclic_plans_validate_in_an_order_that_respects_every_edge(plan in acyclic_plan(40)) {
            let validated = plan.validate().unwrap();
            let position: BTreeMap<&TaskId, usize> = validated
                .topological_order()
                .iter()
                .enumerate()
                .map(|(i, id)| (id, i))
                .collect();
            prop_assert_eq!(position.len(), validated.len());
            for task in validated.tasks() {
                for pre in &task.depends_on {
                    prop_assert!(position[pre] < position[&task.id], "{} before {}", pre, task.id);
                }
                let mut direct: Vec<&TaskId> = task.depends_on.iter().collect();
                direct.sort_unstable();
                prop_assert_eq!(validated.prerequisites(&task.id), direct);
                for path in &task.owned_paths {
                    prop_assert_eq!(validated.owner_of(path), Some(&task.id));
                }
            }
            let oracle = oracle_order(&validated);
            prop_assert_eq!(validated.topological_order(), oracle.as_slice());
            prop_assert_eq!(validated.dependency_count(),
                validated.tasks().map(|t| t.depends_on.len()).sum::<usize>());
        }

        #[test]
        fn an_injected_cycle_is_reported_as_that_cycle((plan, ring) in plan_with_injected_cycle(30)) {
            let err = plan.validate().unwrap_err();
            let cycles: Vec<&[TaskId]> = err.cycles().collect();
            prop_assert_eq!(cycles, vec![ring.as_slice()]);
            prop_assert_eq!(err.problems().len(), 1);
        }

        #[test]
        fn normalisation_is_idempotent_and_keeps_explicit_edges(plan in prop_oneof![acyclic_plan(30), arbitrary_plan(12)]) {
            let once = normalize(plan.tasks.clone());
            prop_assert_eq!(&normalize(once.clone()), &once);
            for (before, after) in plan.tasks.iter().zip(&once) {
                prop_assert_eq!(&before.id, &after.id);
                for dep in &before.depends_on {
                    prop_assert!(after.depends_on.contains(dep));
                }
                prop_assert!(after.depends_on.starts_with(&{
                    let mut explicit = before.depends_on.clone();
                    let mut seen = BTreeSet::new();
                    explicit.retain(|d| seen.insert(d.clone()));
                    explicit
                }), "explicit edges first, in their order");
            }
        }

        #[test]
        fn normalisation_adds_only_the_missing_module_lanes((plan, missing) in plan_with_missing_module_lanes(30)) {
            prop_assert!(!missing.is_empty());
            let before = plan.tasks.len();
            let once = normalize(plan.tasks);
            let added: Vec<&PlannedTask> = once[before..].iter().collect();
            let lanes: BTreeSet<&str> = added.iter().map(|t| t.id.as_str()).collect();
            let expected: BTreeSet<String> = missing.iter().map(|m| format!("module_{m}")).collect();
            prop_assert_eq!(lanes, expected.iter().map(String::as_str).collect::<BTreeSet<_>>());
            for t in added {
                prop_assert!(t.is_synthesized() && t.kind.provides().is_some());
                prop_assert!(t.depends_on.is_empty() && t.owned_paths.is_empty());
            }
        }

        #[test]
        fn the_digest_does_not_depend_on_order(
            (plan, reordered) in acyclic_plan(30).prop_flat_map(|p| {
                let tasks = p.tasks.clone();
                (Just(p), shuffled(tasks))
            })
        ) {
            let changed = {
                let mut tasks = reordered.clone();
                tasks[0].spec.intent.push_str(" (changed)");
                AppBuildPlan::new(tasks)
            };
            let a = plan.validate().unwrap();
            let b = AppBuildPlan::new(reordered).validate().unwrap();
            prop_assert_eq!(a.digest(), b.digest());
            // The whole pipeline is idempotent: a validated plan, saved, validates to itself.
            prop_assert_eq!(a.to_app_build_plan().validate().unwrap().digest(), a.digest());
            prop_assert_eq!(a.topological_order(), b.topological_order());
            prop_assert_ne!(changed.validate().unwrap().digest(), a.digest());
        }

        #[test]
        fn validation_never_panics_and_explains_every_refusal(plan in arbitrary_plan(14)) {
            let json = plan.to_json();
            prop_assert_eq!(&AppBuildPlan::from_json(&json).unwrap(), &plan);
            match plan.validate() {
                Ok(validated) => {
                    let oracle = oracle_order(&validated);
            prop_assert_eq!(validated.topological_order(), oracle.as_slice());
                }
                Err(err) => {
                    prop_assert!(!err.problems().is_empty());
                    for problem in err.problems() {
                        prop_assert!(!problem.tasks().is_empty());
                    }
                }
            }
        }

        #[test]
        fn no_hostile_path_is_admitted((raw, rule) in hostile_path_with_rule()) {
            let err = AdmittedPath::admit(&raw).unwrap_err();
            prop_assert_eq!(err.rule(), rule, "{:?}: {}", raw, err);
            prop_assert_eq!(err.path(), raw.as_str());
            prop_assert!(serde_json::from_value::<AdmittedPath>(serde_json::Value::String(raw)).is_err());
        }

        #[test]
        fn ordinary_paths_are_admitted_and_ordered_by_components(a in ordinary_path(), b in ordinary_path()) {
            let pa = AdmittedPath::admit(&a).unwrap();
            let pb = AdmittedPath::admit(&b).unwrap();
            prop_assert_eq!(pa.as_str(), a.as_str());
            prop_assert_eq!(pa.cmp(&pb), pa.components().cmp(pb.components()));
            let joined = AdmittedPath::admit(&format!("{a}/{b}")).unwrap();
            prop_assert!(joined.starts_with(&pa));
            prop_assert_eq!(pb.starts_with(&pa), b == a || b.starts_with(&format!("{a}/")));
        }
    }
}

#[test]
fn a_task_that_takes_a_synthesized_lane_id_is_reported_not_merged() {
    // `module_tasks` is the id normalisation gives the missing lane of module `tasks`.
    let err = AppBuildPlan::new(vec![model("module_tasks", "tasks")])
        .validate()
        .unwrap_err();
    assert_eq!(
        err.problems(),
        [PlanProblem::DuplicateTaskId {
            id: id("module_tasks"),
            count: 2
        }],
        "and no self-dependency was invented"
    );
}

/// With a duplicated id, a cycle through it was reported or not depending on which task with
/// the id came first (a prerequisite resolved to the first): x → y → x through the first `x`
/// only. Every order of the three tasks now reports the duplicate and the cycle alike.
#[test]
fn a_cycle_through_a_duplicated_id_is_reported_in_every_order() {
    let config = || TaskKind::Config { module: None };
    let tasks = || {
        vec![
            task("x", config()).after(id("y")),
            task("y", config()).after(id("x")),
            task("x", config()),
        ]
    };
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    let shown: Vec<Vec<String>> = orders
        .iter()
        .map(|order| {
            let mut given: Vec<Option<PlannedTask>> = tasks().into_iter().map(Some).collect();
            let ordered: Vec<PlannedTask> = order.iter().filter_map(|&i| given[i].take()).collect();
            AppBuildPlan::new(ordered)
                .validate()
                .unwrap_err()
                .problems()
                .iter()
                .map(ToString::to_string)
                .collect()
        })
        .collect();
    for (order, problems) in orders.iter().zip(&shown) {
        assert_eq!(problems, &shown[0], "order {order:?}");
    }
    assert_eq!(shown[0], ["2 tasks have id x", "cycle x -> y -> x"]);
}
