//! Consolidation: one persistence task per module.

use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt};

use super::model::{ModuleName, PlannedTask, TaskKind};
use super::normalize::dedup_preserving_order;
use crate::{Spec, TaskId};

/// Merges the persistence tasks of each module into one (R11). Returns the tasks unchanged
/// when no module has more than one.
///
/// The survivor is the task with the smallest id. It keeps its own kind, owner and position,
/// and takes the union of owned paths (sorted), prerequisites and input contracts (the merged
/// tasks' edges re-pointed to it; edges between merged tasks vanish, they are inside one task
/// now), the smallest retry limit (a merge never grants a larger budget than any merged task
/// had), the specs in id order, and records the merged ids in `consolidated_from`. Every other
/// task's edges and contracts are re-pointed to the survivor and de-duplicated.
pub(crate) fn consolidate(tasks: Vec<PlannedTask>) -> Vec<PlannedTask> {
    let mut groups: BTreeMap<&ModuleName, Vec<usize>> = BTreeMap::new();
    for (i, task) in tasks.iter().enumerate() {
        if let TaskKind::Persistence { module } = &task.kind {
            groups.entry(module).or_default().push(i);
        }
    }
    let mut merges: Vec<Vec<usize>> = groups
        .into_values()
        .filter(|g| g.len() > 1)
        .map(|mut g| {
            g.sort_unstable_by(|&a, &b| tasks[a].id.cmp(&tasks[b].id));
            g
        })
        .collect();
    if merges.is_empty() {
        return tasks;
    }
    merges.sort_unstable();

    let mut renamed: HashMap<TaskId, TaskId> = HashMap::new();
    let mut merged_away = vec![false; tasks.len()];
    for group in &merges {
        let survivor = &tasks[group[0]].id;
        for &i in &group[1..] {
            renamed.insert(tasks[i].id.clone(), survivor.clone());
            merged_away[i] = true;
        }
    }

    let mut slots: Vec<Option<PlannedTask>> = tasks.into_iter().map(Some).collect();
    for group in &merges {
        let members: Vec<PlannedTask> = group.iter().filter_map(|&i| slots[i].take()).collect();
        if let Some(merged) = merge(members) {
            slots[group[0]] = Some(merged);
        }
    }
    let mut out: Vec<PlannedTask> = slots
        .into_iter()
        .zip(merged_away)
        .filter_map(|(slot, away)| if away { None } else { slot })
        .collect();
    for task in &mut out {
        let own = task.id.clone();
        for dep in &mut task.depends_on {
            if let Some(to) = renamed.get(dep) {
                *dep = to.clone();
            }
        }
        for contract in &mut task.input_contracts {
            if let Some(to) = renamed.get(&contract.from) {
                contract.from = to.clone();
            }
        }
        if !task.consolidated_from.is_empty() {
            // Edges among the merged tasks now point at the survivor itself.
            task.depends_on.retain(|d| *d != own);
            task.input_contracts.retain(|c| c.from != own);
        }
        dedup_preserving_order(&mut task.depends_on);
        dedup_preserving_order(&mut task.input_contracts);
    }
    out
}

/// Merges `members` (sorted by id, survivor first) into the survivor.
fn merge(members: Vec<PlannedTask>) -> Option<PlannedTask> {
    let mut members = members.into_iter();
    let mut survivor = members.next()?;
    let mut intents = vec![survivor.spec.intent.clone()];
    for other in members {
        survivor.owned_paths.extend(other.owned_paths);
        survivor.depends_on.extend(other.depends_on);
        survivor.input_contracts.extend(other.input_contracts);
        survivor.retry_limit = survivor.retry_limit.min(other.retry_limit);
        survivor
            .spec
            .acceptance_criteria
            .extend(other.spec.acceptance_criteria);
        intents.push(other.spec.intent);
        survivor.consolidated_from.push(other.id);
        survivor.consolidated_from.extend(other.consolidated_from);
    }
    survivor.owned_paths.sort_unstable();
    survivor.owned_paths.dedup();
    survivor.consolidated_from.sort_unstable();
    survivor.consolidated_from.dedup();
    survivor.spec = Spec {
        intent: intents.join("\n\n"),
        acceptance_criteria: survivor.spec.acceptance_criteria,
    };
    Some(survivor)
}
