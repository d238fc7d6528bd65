//! Plans that fit any project: the general lane, typed extension keys bound into the plan
//! digest, owned directories, linear ownership checks, scratch globs.

use kleene::{
    AppBuildPlan,
    closure::Spec,
    id::AgentId,
    plan::{ModuleName, Plan, PlannedTask, TaskKind},
};
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
        let survivor = |d: &kleene::id::TaskId| {
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

mod properties {
    use kleene::{AppBuildPlan, plan::Extensions};
    use proptest::prelude::*;

    const KEYS: Extensions<'static> = Extensions {
        task_keys: &["run", "checks", "fix", "timeout_secs", "scratch"],
        plan_keys: &["scratch"],
    };

    const PLAN: &str = r#"{
  "scratch": ["target/**"],
  "tasks": [
    {"id": "build", "owner": "sh", "spec": {"intent": "build"},
     "owned_paths": ["out"],
     "run": "make",
     "checks": [{"id": "t", "command": "make test", "severity": "blocker"}],
     "fix": "sh fix.sh",
     "timeout_secs": 30,
     "scratch": ["**/__pycache__/**"]},
    {"id": "docs", "owner": "sh", "spec": {"intent": "docs"}, "depends_on": ["build"]}
  ]
}"#;

    fn digest(text: &str) -> kleene::id::Digest {
        AppBuildPlan::from_json_with(text, &KEYS)
            .unwrap()
            .validate()
            .unwrap()
            .digest()
    }

    #[test]
    fn declared_keys_are_kept_raw_with_their_offsets() {
        let plan = AppBuildPlan::from_json_with(PLAN, &KEYS).unwrap();
        let build = &plan.tasks[0];
        let run = build.extension("run").unwrap();
        assert_eq!(run.json(), "\"make\"");
        assert_eq!(&PLAN[run.offset().unwrap()..][..6], "\"make\"");
        assert_eq!(
            build
                .extension("timeout_secs")
                .unwrap()
                .parse::<u32>()
                .unwrap(),
            30
        );
        assert_eq!(
            build.extension("checks").unwrap().canonical(),
            r#"[{"command":"make test","id":"t","severity":"blocker"}]"#
        );
        assert!(plan.tasks[1].extensions.is_empty());
        assert_eq!(plan.extensions["scratch"].json(), r#"["target/**"]"#);
        // Saved and loaded again, the plan is the same plan.
        assert_eq!(
            AppBuildPlan::from_json_with(&plan.to_json(), &KEYS).unwrap(),
            plan
        );
        // The validated plan carries the plan-level values.
        let validated = plan.validate().unwrap();
        assert!(validated.extension("scratch").is_some());
        assert_eq!(validated.to_app_build_plan().extensions.len(), 1);
    }

    /// Regression (issue 10, defect 7): the CLI blanked its commands out of the plan before
    /// digesting it, so a changed command kept the plan digest, the channel and the
    /// acceptance binding.
    #[test]
    fn changing_any_extension_value_changes_the_digest() {
        let base = digest(PLAN);
        for (from, to) in [
            ("\"make\"", "\"make all\""),
            ("\"make test\"", "\"make check\""),
            ("\"severity\": \"blocker\"", "\"severity\": \"warning\""),
            ("\"sh fix.sh\"", "\"sh fix2.sh\""),
            ("30", "31"),
            ("[\"**/__pycache__/**\"]", "[]"),
            ("[\"target/**\"]", "[\"target/**\", \"node_modules/**\"]"),
            (",\n     \"fix\": \"sh fix.sh\"", ""),
        ] {
            assert!(PLAN.contains(from), "{from}");
            assert_ne!(digest(&PLAN.replacen(from, to, 1)), base, "{from} -> {to}");
        }
    }

    #[test]
    fn reformatting_and_reordering_keys_keep_the_digest() {
        let reordered = r#"{"tasks": [
            {"depends_on": ["build"], "spec": {"intent": "docs"}, "owner": "sh", "id": "docs"},
            {"scratch": ["**/__pycache__/**"], "timeout_secs": 30, "fix": "sh fix.sh",
             "checks": [{"severity": "blocker", "command": "make test", "id": "t"}],
             "run": "make", "owned_paths": ["out"], "spec": {"intent": "build"},
             "owner": "sh", "id": "build"}],
          "scratch": [ "target/**" ]}"#;
        assert_eq!(digest(reordered), digest(PLAN));
        let compact: serde_json::Value = serde_json::from_str(PLAN).unwrap();
        assert_eq!(digest(&compact.to_string()), digest(PLAN));
    }

    #[test]
    fn a_plan_without_extensions_keeps_the_digest_it_had_before_extensions() {
        // Computed by the code before extension keys existed.
        let plan = AppBuildPlan::from_json(DEMO_WITHOUT_COMMANDS).unwrap();
        assert_eq!(plan.validate().unwrap().digest().to_string(), DEMO_DIGEST);
    }

    const DEMO_WITHOUT_COMMANDS: &str = r#"{"tasks": [
      {"id": "billing_module", "kind": {"lane": "module", "module": "billing"},
       "owner": "shell", "spec": {"intent": "lay out the module"},
       "owned_paths": ["billing/MODULE"]},
      {"id": "billing_service", "kind": {"lane": "service", "module": "billing"},
       "owner": "shell", "spec": {"intent": "compute VAT", "acceptance_criteria": ["12000"]},
       "owned_paths": ["billing/vat.sh"], "depends_on": ["billing_module"], "retry_limit": 2}
    ]}"#;
    const DEMO_DIGEST: &str = "f354656a25b2ff08d5329c3624a2702606cded38c8bd90562140734f171d0ccc";

    #[test]
    fn unknown_keys_are_refused_with_a_suggestion_line_and_column() {
        let text = PLAN.replace("\"checks\"", "\"chekcs\"");
        let err = AppBuildPlan::from_json_with(&text, &KEYS).unwrap_err();
        assert_eq!(err.field(), "tasks[0].chekcs");
        // serde_json points at the key's closing quote.
        let line = text.lines().position(|l| l.contains("chekcs")).unwrap() + 1;
        let column = text.lines().nth(line - 1).unwrap().find("chekcs").unwrap() + 7;
        assert_eq!(err.position(), (line, column));
        assert!(
            err.to_string()
                .contains("unknown field `chekcs`, did you mean `checks`?"),
            "{err}"
        );

        let err = AppBuildPlan::from_json_with(
            &PLAN.replace("\"scratch\": [\"t", "\"scrach\": [\"t"),
            &KEYS,
        )
        .unwrap_err();
        assert_eq!(err.field(), "scrach");
        assert!(err.to_string().contains("did you mean `scratch`?"), "{err}");

        // Without the declaration the CLI's keys are unknown like any other.
        let err = AppBuildPlan::from_json(PLAN).unwrap_err();
        assert!(
            err.to_string()
                .contains("unknown field `scratch`, expected one of `tasks`"),
            "{err}"
        );
        let err = AppBuildPlan::from_json_with(&PLAN.replace("\"fix\"", "\"colour\""), &KEYS)
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("unknown field `colour`, expected one of `id`"),
            "{err}"
        );

        let twice = PLAN.replace("\"fix\": \"sh fix.sh\"", "\"fix\": \"a\", \"fix\": \"b\"");
        let err = AppBuildPlan::from_json_with(&twice, &KEYS).unwrap_err();
        assert!(err.to_string().contains("\"fix\" appears twice"), "{err}");
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            "[a-z \"\\\\é]{0,6}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                proptest::collection::btree_map("[a-z]{1,3}", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn with_run(value: &serde_json::Value, pretty: bool) -> String {
        let task = serde_json::json!({"id": "t", "owner": "o", "spec": {"intent": "x"}});
        let mut text = if pretty {
            serde_json::to_string_pretty(&task).unwrap()
        } else {
            task.to_string()
        };
        text.pop();
        let v = if pretty {
            serde_json::to_string_pretty(value)
        } else {
            serde_json::to_string(value)
        };
        format!("{{\"tasks\": [{text}, \"run\": {}}}]}}", v.unwrap())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// For all pairs of values: same digest exactly when the values are equal, however
        /// they are formatted.
        #[test]
        fn the_digest_binds_the_value_not_its_formatting(a in json_value(), b in json_value()) {
            prop_assert_eq!(digest(&with_run(&a, true)), digest(&with_run(&a, false)));
            prop_assert_eq!(digest(&with_run(&a, false)) == digest(&with_run(&b, false)), a == b);
        }
    }
}

mod globs {
    use kleene::plan::PathGlob;
    use proptest::prelude::*;

    /// The reference: the definitions, matched by plain recursion.
    fn reference(pattern: &[&str], path: &[&str]) -> bool {
        match pattern.split_first() {
            None => path.is_empty(),
            Some((&"**", rest)) => {
                reference(rest, path) || (!path.is_empty() && reference(pattern, &path[1..]))
            }
            Some((first, rest)) => match path.split_first() {
                Some((name, tail)) => {
                    component(
                        &first.chars().collect::<Vec<_>>(),
                        &name.chars().collect::<Vec<_>>(),
                    ) && reference(rest, tail)
                }
                None => false,
            },
        }
    }

    fn component(p: &[char], s: &[char]) -> bool {
        match p.split_first() {
            None => s.is_empty(),
            Some(('*', rest)) => component(rest, s) || (!s.is_empty() && component(p, &s[1..])),
            Some(('?', rest)) => !s.is_empty() && component(rest, &s[1..]),
            Some((c, rest)) => s.first() == Some(c) && component(rest, &s[1..]),
        }
    }

    fn pattern() -> impl Strategy<Value = String> {
        let part = prop_oneof![
            3 => "[ab*?]{1,4}".prop_filter("no partial **", |c| !c.contains("**")),
            1 => Just("**".to_owned()),
        ];
        proptest::collection::vec(part, 1..5).prop_map(|p| p.join("/"))
    }

    fn path() -> impl Strategy<Value = String> {
        proptest::collection::vec("[ab]{1,3}", 1..6).prop_map(|p| p.join("/"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// For all small patterns and paths, the matcher agrees with the reference.
        #[test]
        fn the_matcher_agrees_with_the_reference(p in pattern(), path in path()) {
            let glob = PathGlob::parse(&p).unwrap();
            let parts: Vec<&str> = p.split('/').collect();
            let components: Vec<&str> = path.split('/').collect();
            prop_assert_eq!(glob.matches(&path), reference(&parts, &components), "{} vs {}", p, path);
        }

        /// `prefix/**` matches exactly the paths under `prefix` (and `prefix` itself).
        #[test]
        fn a_directory_glob_matches_its_subtree(prefix in path(), path in path()) {
            let glob = PathGlob::parse(&format!("{prefix}/**")).unwrap();
            let under = path == prefix || path.starts_with(&format!("{prefix}/"));
            prop_assert_eq!(glob.matches(&path), under);
        }
    }
}

mod ownership {
    use std::collections::BTreeMap;

    use kleene::batch::{Batch, Candidate, MemoryJournal, Worker, WorkerCall, WorkerFailure};
    use kleene::{AppBuildPlan, id::TaskId, plan::PlanProblem};

    use super::general;
    use crate::support::{chan, id, path};

    /// Writes the given files for each task.
    struct Writes(BTreeMap<TaskId, Vec<&'static str>>);

    impl Worker for Writes {
        fn call(
            &mut self,
            call: &WorkerCall<'_>,
        ) -> Result<kleene::batch::Proposal, WorkerFailure> {
            let files = self.0.get(&call.task().id).cloned().unwrap_or_default();
            Ok(Candidate::new(
                files
                    .into_iter()
                    .map(|f| (path(f), b"x".to_vec()))
                    .collect(),
            )
            .into())
        }
    }

    /// Regression (issue 10, defect 4): `owned_paths: ["out"]` failed with "writes
    /// out/ok.txt, which the task does not own".
    #[test]
    fn an_owned_directory_owns_its_subtree() {
        let plan = AppBuildPlan::new(vec![
            general("gen").owning(path("out")),
            general("other").owning(path("other.txt")).after(id("gen")),
        ])
        .validate()
        .unwrap();
        assert_eq!(plan.owner_of(&path("out/ok.txt")), Some(&id("gen")));
        assert_eq!(plan.owner_of(&path("out/a/b/c.txt")), Some(&id("gen")));
        assert_eq!(plan.owner_of(&path("out")), Some(&id("gen")));
        assert_eq!(plan.owner_of(&path("outer/x")), None);
        assert_eq!(plan.owner_of(&path("out.txt")), None);

        let mut worker = Writes(BTreeMap::from([
            (id("gen"), vec!["out/ok.txt", "out/deep/er.txt"]),
            (id("other"), vec!["other.txt", "out/stolen.txt"]),
        ]));
        let evidence = Batch::new(&plan, chan("dirs"))
            .dispatch(&mut worker, &(), &mut MemoryJournal::default())
            .unwrap();
        let gen_out = evidence
            .accepted(&id("gen"))
            .expect("the directory's files are accepted");
        assert_eq!(gen_out.files().len(), 2);
        // A write into another task's directory is refused.
        let other = evidence.task(&id("other")).unwrap();
        assert!(other.accepted().is_none());
        assert!(other.rejections()[0].rejection().is_not_owned());
    }

    #[test]
    fn overlapping_directories_across_tasks_are_refused() {
        let err = AppBuildPlan::new(vec![
            general("a").owning(path("out")),
            general("b").owning(path("out/x")),
        ])
        .validate()
        .unwrap_err();
        assert!(
            err.problems().iter().any(|p| matches!(p,
                PlanProblem::NestedPath { outer, inner, outer_task, inner_task }
                    if outer.as_str() == "out" && inner.as_str() == "out/x"
                        && outer_task.as_str() == "a" && inner_task.as_str() == "b")),
            "{err}"
        );
    }

    #[test]
    fn unwritten_owned_paths_counts_a_directory_written_by_any_file_in_it() {
        let task = general("t")
            .owning(path("out"))
            .owning(path("a/b.txt"))
            .owning(path("lib"))
            .owning(path("z"));
        let files: BTreeMap<_, ()> = ["out/x/y", "a/b.txt", "lib.rs", "lib0/x", "y/z"]
            .into_iter()
            .map(|f| (path(f), ()))
            .collect();
        let missing: Vec<&str> = task
            .unwritten_owned_paths(&files)
            .into_iter()
            .map(|p| p.as_str())
            .collect();
        assert_eq!(missing, ["lib", "z"]);
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]

            /// For all sets of owned paths and files: the range query agrees with the
            /// definition (some file is the path or lies beneath it).
            #[test]
            fn unwritten_owned_paths_matches_the_definition(
                owned in proptest::collection::btree_set("[ab]{1,2}(/[ab]{1,2}){0,2}", 0..6),
                files in proptest::collection::btree_set("[ab]{1,2}(/[ab]{1,2}){0,3}", 0..12),
            ) {
                let mut task = general("t");
                for o in &owned {
                    task = task.owning(path(o));
                }
                let files: BTreeMap<_, ()> = files.iter().map(|f| (path(f), ())).collect();
                let expected: Vec<&str> = owned
                    .iter()
                    .map(String::as_str)
                    .filter(|o| !files.keys().any(|f| f.starts_with(&path(o))))
                    .collect();
                let got: Vec<&str> = task.unwritten_owned_paths(&files).into_iter().map(|p| p.as_str()).collect();
                prop_assert_eq!(got, expected);
            }

            /// For all paths: the owner is the task owning the path or its nearest owned
            /// ancestor.
            #[test]
            fn owner_of_matches_the_definition(
                a in "[ab]{1,2}(/[ab]{1,2}){0,1}",
                b in "[cd]{1,2}",
                probe in "[abcd]{1,2}(/[ab]{1,2}){0,3}",
            ) {
                let plan = AppBuildPlan::new(vec![
                    general("ta").owning(path(&a)),
                    general("tb").owning(path(&b)),
                ])
                .validate()
                .unwrap();
                let p = path(&probe);
                let expected = if p.starts_with(&path(&a)) {
                    Some(id("ta"))
                } else if p.starts_with(&path(&b)) {
                    Some(id("tb"))
                } else {
                    None
                };
                prop_assert_eq!(plan.owner_of(&p).cloned(), expected);
            }
        }
    }
}
