//! What changed between the plan a run was started with and the plan file as it is now.

use std::collections::{BTreeMap, BTreeSet};

use crate::id::TaskId;
use crate::plan::{ExtensionValue, PlannedTask};
use crate::shell::plan_files::{MANIFEST_KEY, PlanFiles};

use super::ShellPlan;

/// What changed between the plan a run was started with (`old`) and the plan file as it is
/// now (`new`), one line per change, naming the task and the field: tasks added and
/// removed, then each changed field of each task by id, then the plan's own keys. Empty
/// exactly when the two plans have the same digest.
pub fn describe_changes(old: &ShellPlan, new: &ShellPlan) -> Vec<String> {
    let mut changes = Vec::new();
    let ids: BTreeSet<&TaskId> = old
        .plan()
        .tasks()
        .chain(new.plan().tasks())
        .map(|t| &t.id)
        .collect();
    for id in ids {
        match (old.plan().task(id), new.plan().task(id)) {
            (Some(_), None) => changes.push(format!("task {id} was removed")),
            (None, Some(_)) => changes.push(format!("task {id} was added")),
            (Some(a), Some(b)) => {
                for field in changed_fields(a, b) {
                    changes.push(format!("task {id}: `{field}` changed"));
                }
            }
            (None, None) => {}
        }
    }
    for key in changed_keys(old.plan().extensions(), new.plan().extensions()) {
        if key == MANIFEST_KEY {
            changes.extend(changed_files(old.files(), new.files()));
        } else {
            changes.push(format!("plan: `{key}` changed"));
        }
    }
    if changes.is_empty() && old.plan().digest() != new.plan().digest() {
        // A difference the field names above do not cover; still never silent.
        changes.push("the plan changed".to_owned());
    }
    changes
}

fn path_set(v: &[crate::plan::AdmittedPath]) -> BTreeSet<&crate::plan::AdmittedPath> {
    v.iter().collect()
}

fn id_set(v: &[TaskId]) -> BTreeSet<&TaskId> {
    v.iter().collect()
}

/// The fields in which `a` and `b` differ, in the plan format's order.
fn changed_fields(a: &PlannedTask, b: &PlannedTask) -> Vec<String> {
    let mut fields: Vec<String> = [
        ("kind", a.kind != b.kind),
        ("owner", a.owner != b.owner),
        ("spec", a.spec != b.spec),
        (
            "owned_paths",
            path_set(&a.owned_paths) != path_set(&b.owned_paths),
        ),
        ("depends_on", id_set(&a.depends_on) != id_set(&b.depends_on)),
        ("retry_limit", a.retry_limit != b.retry_limit),
        (
            "input_contracts",
            a.input_contracts.iter().collect::<BTreeSet<_>>()
                != b.input_contracts.iter().collect::<BTreeSet<_>>(),
        ),
        ("origin", a.origin != b.origin),
        (
            "consolidated_from",
            id_set(&a.consolidated_from) != id_set(&b.consolidated_from),
        ),
    ]
    .into_iter()
    .filter(|(_, changed)| *changed)
    .map(|(field, _)| field.to_owned())
    .collect();
    fields.extend(changed_keys(&a.extensions, &b.extensions));
    fields
}

/// One line per plan file added, removed or changed between `old` and `new`.
fn changed_files(old: Option<&PlanFiles>, new: Option<&PlanFiles>) -> Vec<String> {
    let (Some(old), Some(new)) = (old, new) else {
        return vec!["the plan's files changed".to_owned()];
    };
    let old: BTreeMap<_, _> = old.iter().collect();
    let new: BTreeMap<_, _> = new.iter().collect();
    old.keys()
        .chain(new.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter_map(|path| match (old.get(path), new.get(path)) {
            (Some(_), None) => Some(format!("plan file {path} was removed")),
            (None, Some(_)) => Some(format!("plan file {path} was added")),
            (Some(a), Some(b)) if a != b => Some(format!("plan file {path} changed")),
            _ => None,
        })
        .collect()
}

/// The keys whose values differ (present in one map only, or with different values).
fn changed_keys(
    a: &BTreeMap<String, ExtensionValue>,
    b: &BTreeMap<String, ExtensionValue>,
) -> Vec<String> {
    a.keys()
        .chain(b.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::tests::{PLAN, load};
    use super::*;

    /// Regression (issue 10, defect 8, the plan half): nothing compared the stored plan
    /// with the edited file, so `resume` ran the stale plan silently.
    #[test]
    fn changes_between_plans_name_each_task_and_field() {
        let old = load(PLAN).unwrap();
        assert!(describe_changes(&old, &load(PLAN).unwrap()).is_empty());
        let edited = PLAN
            .replacen("echo a > a.txt", "echo A > a.txt", 1)
            .replacen("\"depends_on\": [\"b\"]", "\"depends_on\": [\"a\"]", 1)
            .replacen("[\"target/**\"]", "[\"dist/**\"]", 1)
            .replacen(
                "\"depends_on\": [\"a\"] },",
                "\"depends_on\": [\"a\"], \"owned_paths\": [\"out\"] },\n    { \"id\": \"d\", \"owner\": \"sh\", \"spec\": {\"intent\": \"d\"} },",
                1,
            );
        let new = load(&edited).unwrap();
        assert_eq!(
            describe_changes(&old, &new),
            [
                "task a: `run` changed",
                "task b: `owned_paths` changed",
                "task c: `depends_on` changed",
                "task d was added",
                "plan: `scratch` changed",
            ]
        );
        assert_eq!(describe_changes(&new, &old)[3], "task d was removed");
    }
}
