//! Action keys of shell plans: for all plans and all edits, each part a call depends on
//! changes the keys of exactly the tasks that depend on it, and nothing else changes any.

use std::collections::BTreeMap;
use std::path::Path;

use kleene::id::TaskId;
use kleene::shell::ShellPlan;
use proptest::prelude::*;
use serde_json::{Value, json};
use tempfile::TempDir;

/// An edit of a plan, its files or its file's text.
#[derive(Debug, Clone)]
enum Edit {
    /// A command key of one task (`run`, `fix`, `timeout_secs`, `checks`, `scratch`), its
    /// spec or its retry limit: that task's key changes, and only its.
    Task(usize, usize),
    /// The plan's scratch globs: every key changes.
    PlanScratch,
    /// The plan's base: every key changes.
    Base,
    /// The bytes of one file beside the plan: the key of every task that reads it changes
    /// (every task that names no inputs; those that do, when they name it).
    File(usize),
    /// A file added beside the plan: the key of every task that names no inputs changes.
    NewFile,
    /// The tasks in another order, the file pretty-printed: no key changes.
    Reorder,
}

/// The plan's tasks: task `i` depends on the earlier tasks `deps[i]` names.
#[derive(Debug, Clone)]
struct Shape {
    deps: Vec<Vec<usize>>,
    with_fix: Vec<bool>,
    plan_scratch: bool,
    /// Tasks that name their inputs (`tools/make.sh` alone): only an edit of that file
    /// reaches them.
    named_inputs: Vec<bool>,
}

fn shape() -> impl Strategy<Value = Shape> {
    (2..7usize)
        .prop_flat_map(|n| {
            (
                (0..n)
                    .map(|i| proptest::sample::subsequence((0..i).collect::<Vec<_>>(), 0..=i))
                    .collect::<Vec<_>>(),
                proptest::collection::vec(any::<bool>(), n),
                any::<bool>(),
                proptest::collection::vec(any::<bool>(), n),
            )
        })
        .prop_map(|(deps, with_fix, plan_scratch, named_inputs)| Shape {
            deps,
            with_fix,
            plan_scratch,
            named_inputs,
        })
}

fn edit(n: usize) -> impl Strategy<Value = Edit> {
    prop_oneof![
        (0..n, 0..8usize).prop_map(|(i, k)| Edit::Task(i, k)),
        Just(Edit::PlanScratch),
        Just(Edit::Base),
        (0..3usize).prop_map(Edit::File),
        Just(Edit::NewFile),
        Just(Edit::Reorder),
    ]
}

fn task(shape: &Shape, i: usize) -> Value {
    let mut t = json!({
        "id": format!("t{i}"),
        "owner": "shell",
        "spec": {"intent": format!("write o{i}")},
        "owned_paths": [format!("o{i}")],
        "depends_on": shape.deps[i].iter().map(|d| format!("t{d}")).collect::<Vec<_>>(),
        "run": format!("sh tools/make.sh {i} > o{i}"),
        "checks": [{"id": "exists", "command": format!("test -s o{i}")}],
    });
    if shape.with_fix[i] {
        t["fix"] = json!("sh tools/fix.sh");
    }
    if shape.named_inputs[i] {
        t["inputs"] = json!(["tools/make.sh"]);
    }
    t
}

fn plan(shape: &Shape) -> Value {
    let mut plan = json!({
        "tasks": (0..shape.deps.len()).map(|i| task(shape, i)).collect::<Vec<_>>(),
    });
    if shape.plan_scratch {
        plan["scratch"] = json!(["target/**"]);
    }
    plan
}

/// Every task's key, once the plan and its files are written into `dir`.
fn keys(
    dir: &Path,
    plan: &Value,
    pretty: bool,
) -> BTreeMap<TaskId, kleene::batch::cache::ActionKey> {
    let text = if pretty {
        serde_json::to_string_pretty(plan).unwrap()
    } else {
        serde_json::to_string(plan).unwrap()
    };
    std::fs::write(dir.join("plan.json"), text).unwrap();
    let (loaded, _) = ShellPlan::read(&dir.join("plan.json"), &[]).unwrap();
    loaded
        .plan()
        .tasks()
        .map(|t| {
            let parts = loaded.action_key_parts(&t.id).unwrap();
            (t.id.clone(), parts.key())
        })
        .collect()
}

const FILES: [&str; 3] = ["tools/make.sh", "tools/fix.sh", "README"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// For all plans and all edits: an edit of one task's entry changes that task's key and
    /// no other; a plan setting or a file beside the plan changes every key; the order of
    /// the tasks and the layout of the file change none.
    #[test]
    fn each_part_changes_the_keys_of_the_tasks_it_reaches_and_nothing_else_does(
        (shape, edit) in shape().prop_flat_map(|s| { let n = s.deps.len(); (Just(s), edit(n)) }),
    ) {
        let tmp = TempDir::new().unwrap();
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join("tools")).unwrap();
        for f in FILES {
            std::fs::write(dir.join(f), format!("{f}\n")).unwrap();
        }
        let mut doc = plan(&shape);
        let before = keys(dir, &doc, false);
        let mut pretty = false;
        let changed: Vec<TaskId> = match &edit {
            Edit::Task(i, k) => {
                let t = &mut doc["tasks"][*i];
                match k {
                    0 => t["run"] = json!(format!("sh tools/make.sh {i} >o{i}")),
                    1 => t["fix"] = json!("sh tools/fix.sh --again"),
                    2 => t["timeout_secs"] = json!(30),
                    3 => t["checks"][0]["command"] = json!(format!("test -f o{i}")),
                    4 => t["scratch"] = json!(["cache/**"]),
                    5 => t["spec"]["acceptance_criteria"] = json!(["it is not empty"]),
                    6 => t["inputs"] = json!(["tools/**"]),
                    _ => t["retry_limit"] = json!(1),
                }
                vec![TaskId::new(format!("t{i}")).unwrap()]
            }
            Edit::PlanScratch => {
                doc["scratch"] = json!(["build/**"]);
                before.keys().cloned().collect()
            }
            Edit::Base => {
                doc["base"] = json!("empty");
                before.keys().cloned().collect()
            }
            Edit::File(f) => {
                std::fs::write(dir.join(FILES[*f]), "changed\n").unwrap();
                let reads = |i: usize| !shape.named_inputs[i] || FILES[*f] == "tools/make.sh";
                (0..shape.deps.len())
                    .filter(|&i| reads(i))
                    .map(|i| TaskId::new(format!("t{i}")).unwrap())
                    .collect()
            }
            Edit::NewFile => {
                std::fs::write(dir.join("tools/new.sh"), "new\n").unwrap();
                (0..shape.deps.len())
                    .filter(|&i| !shape.named_inputs[i])
                    .map(|i| TaskId::new(format!("t{i}")).unwrap())
                    .collect()
            }
            Edit::Reorder => {
                doc["tasks"].as_array_mut().unwrap().reverse();
                pretty = true;
                Vec::new()
            }
        };
        let after = keys(dir, &doc, pretty);
        prop_assert_eq!(before.len(), after.len());
        for (id, key) in &before {
            let moved = after[id] != *key;
            prop_assert_eq!(moved, changed.contains(id), "{} after {:?}", id, edit);
        }
    }
}

/// The same plan and files give the same keys wherever they lie: no path of the machine
/// enters a key.
#[test]
fn the_same_plan_elsewhere_has_the_same_keys() {
    let shape = Shape {
        deps: vec![vec![], vec![0]],
        with_fix: vec![true, false],
        plan_scratch: true,
        named_inputs: vec![false, true],
    };
    let [a, b] = [TempDir::new().unwrap(), TempDir::new().unwrap()];
    for dir in [a.path(), b.path()] {
        std::fs::create_dir_all(dir.join("tools")).unwrap();
        for f in FILES {
            std::fs::write(dir.join(f), format!("{f}\n")).unwrap();
        }
    }
    assert_eq!(
        keys(a.path(), &plan(&shape), false),
        keys(b.path(), &plan(&shape), true)
    );
}

/// A task that says `"cache": false` has no key: it is never reused.
#[test]
fn a_task_that_opts_out_has_no_key() {
    let tmp = TempDir::new().unwrap();
    let plan = json!({"tasks": [
        {"id": "kept", "owner": "shell", "spec": {"intent": "k"}, "owned_paths": ["k"],
         "run": "echo k > k"},
        {"id": "deploy", "owner": "shell", "spec": {"intent": "d"}, "owned_paths": ["d"],
         "run": "echo d > d", "cache": false},
    ]});
    std::fs::write(tmp.path().join("plan.json"), plan.to_string()).unwrap();
    let (loaded, _) = ShellPlan::read(&tmp.path().join("plan.json"), &[]).unwrap();
    assert!(
        loaded
            .action_key_parts(&TaskId::new("kept").unwrap())
            .is_some()
    );
    assert!(
        loaded
            .action_key_parts(&TaskId::new("deploy").unwrap())
            .is_none()
    );
}
