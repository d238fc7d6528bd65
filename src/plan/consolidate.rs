//! Consolidation: one persistence task per module.

use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt};

use super::model::{ModuleName, PlannedTask, TaskKind};
use super::normalize::{dedup_preserving_order, index};
use super::validate::order::{order_positions, topological_order};
use super::validate::ownership::{PathEntries, path_hash};
use super::validate::{
    PlanValidationError, Resolved, Structure, ValidationStage, ordered, sort_dedup_tail,
};
use crate::id::TaskId;

/// The merged plan: its tasks, its structure carried over from the normalised plan's, and
/// its topological order (`None` when the merge closed a cycle, which the second validation
/// reports).
pub(crate) type Merged = (Vec<PlannedTask>, Resolved, Option<Vec<u32>>);

/// Merges the persistence tasks of each module into one, and carries the resolved
/// structure of the normalised plan over to the merged plan. Returns both unchanged when no
/// module has more than one persistence task.
///
/// `resolved` passed every rule of the first validation but acyclicity, which is checked
/// here, once for both plans wherever possible: the merged plan's order is needed anyway, and
/// it proves the normalised plan acyclic too unless a merge hid an edge. A merge maps every
/// edge `a → b` of the normalised plan to `survivor(a) → survivor(b)` and drops it only when
/// both ends merge into one task; so a cycle of the normalised plan either becomes a closed
/// walk through at least one kept edge (a cycle of the merged plan), or lies wholly inside
/// one merge group (an edge between tasks of one group was dropped). Only when the merged
/// plan has a cycle or such an edge was dropped is the normalised plan ordered on its own,
/// and its cycles are then the first validation's error, as they were before.
///
/// # Errors
///
/// [`PlanValidationError`] at [`ValidationStage::BeforeConsolidation`] with the cycles of
/// the normalised plan.
///
/// The survivor is the task with the smallest id. It keeps its own kind, owner and position,
/// and takes the union of owned paths (sorted), prerequisites and input contracts (the merged
/// tasks' edges re-pointed to it; edges between merged tasks vanish, they are inside one task
/// now), the smallest retry limit (a merge never grants a larger budget than any merged task
/// had), the specs in id order, and records the merged ids in `consolidated_from`. Every other
/// task's edges and contracts are re-pointed to the survivor and de-duplicated.
///
/// `resolved` must be the resolution of `tasks` (validation of the normalised plan passed
/// every rule but acyclicity).
pub(crate) fn consolidate(
    mut tasks: Vec<PlannedTask>,
    resolved: Resolved,
) -> Result<Merged, PlanValidationError> {
    let merges: Vec<Vec<usize>> = {
        let mut groups: BTreeMap<&ModuleName, Vec<usize>> = BTreeMap::new();
        for (i, task) in tasks.iter().enumerate() {
            if let TaskKind::Persistence { module } = &task.kind {
                groups.entry(module).or_default().push(i);
            }
        }
        groups
            .into_values()
            .filter(|g| g.len() > 1)
            .map(|mut g| {
                g.sort_unstable_by(|&a, &b| tasks[a].id.cmp(&tasks[b].id));
                g
            })
            .collect()
    };
    if merges.is_empty() {
        // The merged plan is the normalised one: its order is the one check left.
        let Structure { resolved, order } =
            ordered(&tasks, resolved, ValidationStage::BeforeConsolidation)?;
        return Ok((tasks, resolved, Some(order)));
    }
    let n = tasks.len();
    // The survivor of every position (itself unless merged away).
    let mut survivor_of: Vec<u32> = (0..index(n)).collect();
    let mut merged_away = vec![false; n];
    // The members merged into each survivor (empty for every other task).
    let mut members_of: Vec<&[usize]> = vec![&[]; n];
    for group in &merges {
        members_of[group[0]] = &group[1..];
        for &i in &group[1..] {
            survivor_of[i] = index(group[0]);
            merged_away[i] = true;
        }
    }
    let mut new_position = vec![0u32; n];
    let mut kept = 0;
    for i in 0..n {
        new_position[i] = kept;
        if !merged_away[i] {
            kept += 1;
        }
    }
    let moved = |j: u32| new_position[survivor_of[j as usize] as usize];

    // The merged plan's prerequisites, from the old ones by integer remapping.
    let mut pre_start = Vec::with_capacity(n + 1 - merged_away.iter().filter(|m| **m).count());
    let mut pre = Vec::with_capacity(resolved.pre.len());
    pre_start.push(0);
    // Whether an edge between two tasks of one merge group was dropped (see above).
    let mut dropped_inner_edge = false;
    // The tasks whose lists the merge changes: survivors, and tasks with an edge to a merged
    // task.
    let mut touched = vec![false; n];
    for i in (0..n).filter(|&i| !merged_away[i]) {
        let start = pre.len();
        let own = new_position[i];
        let mut repointed = !members_of[i].is_empty();
        for &m in std::iter::once(&i).chain(members_of[i]) {
            for &j in resolved.prerequisites(m) {
                repointed |= merged_away[j as usize];
                let j = moved(j);
                if j == own {
                    dropped_inner_edge = true;
                } else {
                    pre.push(j);
                }
            }
        }
        // Kept positions only shift down, in order: an untouched task's list is still
        // sorted and free of repeats, and only a touched one needs sorting again.
        if repointed {
            sort_dedup_tail(&mut pre, start);
            touched[i] = true;
        }
        pre_start.push(index(pre.len()));
    }
    let by_id: Vec<u32> = resolved
        .by_id
        .iter()
        .filter(|&&i| !merged_away[i as usize])
        .map(|&i| new_position[i as usize])
        .collect();
    let mut merged = Resolved {
        by_id,
        pre_start,
        pre,
        owned: PathEntries::new(),
    };
    let order = order_positions(&merged);
    if order.is_none() || dropped_inner_edge {
        // Nothing proves the normalised plan acyclic: order it on its own, while its tasks
        // are still as they were.
        if let Err(cycles) = topological_order(&tasks, &resolved) {
            return Err(PlanValidationError::new(
                ValidationStage::BeforeConsolidation,
                cycles,
            ));
        }
    }

    // The same merge on the tasks themselves. Only the touched tasks need re-pointing.
    let mut renamed: HashMap<TaskId, TaskId> = HashMap::new();
    for group in &merges {
        let survivor = group[0];
        let mut intents = vec![std::mem::take(&mut tasks[survivor].spec.intent)];
        for &i in &group[1..] {
            // The merged task is removed below; take what the survivor inherits.
            let other = &mut tasks[i];
            let id = other.id.clone();
            let owned_paths = std::mem::take(&mut other.owned_paths);
            let depends_on = std::mem::take(&mut other.depends_on);
            let input_contracts = std::mem::take(&mut other.input_contracts);
            let criteria = std::mem::take(&mut other.spec.acceptance_criteria);
            let merged_from = std::mem::take(&mut other.consolidated_from);
            let retry_limit = other.retry_limit;
            intents.push(std::mem::take(&mut other.spec.intent));
            renamed.insert(id.clone(), tasks[survivor].id.clone());
            let s = &mut tasks[survivor];
            s.owned_paths.extend(owned_paths);
            s.depends_on.extend(depends_on);
            s.input_contracts.extend(input_contracts);
            s.retry_limit = s.retry_limit.min(retry_limit);
            s.spec.acceptance_criteria.extend(criteria);
            s.consolidated_from.push(id);
            s.consolidated_from.extend(merged_from);
        }
        let s = &mut tasks[survivor];
        s.spec.intent = intents.join("\n\n");
        s.owned_paths.sort_unstable();
        s.owned_paths.dedup();
        s.consolidated_from.sort_unstable();
        s.consolidated_from.dedup();
    }
    for (task, _) in tasks.iter_mut().zip(&touched).filter(|(_, t)| **t) {
        let PlannedTask {
            id,
            depends_on,
            input_contracts,
            ..
        } = task;
        for dep in depends_on.iter_mut() {
            if let Some(to) = renamed.get(dep) {
                *dep = to.clone();
            }
        }
        for contract in input_contracts.iter_mut() {
            if let Some(to) = renamed.get(&contract.from) {
                contract.from = to.clone();
            }
        }
        // Edges among the merged tasks now point at the survivor itself.
        depends_on.retain(|d| d != id);
        input_contracts.retain(|c| c.from != *id);
        dedup_preserving_order(depends_on);
        dedup_preserving_order(input_contracts);
    }
    let mut k = 0;
    tasks.retain(|_| {
        k += 1;
        !merged_away[k - 1]
    });

    // Entries of untouched tasks keep their order (positions only shift down); survivors'
    // entries are made afresh and merged in.
    let kept_entries = resolved
        .owned
        .into_iter()
        .filter(|e| !merged_away[e.1 as usize] && members_of[e.1 as usize].is_empty())
        .map(|(h, t, k)| (h, new_position[t as usize], k));
    let mut fresh: PathEntries = merges
        .iter()
        .flat_map(|group| {
            let t = new_position[group[0]];
            tasks[t as usize]
                .owned_paths
                .iter()
                .enumerate()
                .map(move |(k, p)| (path_hash(p.as_str()), t, index(k)))
        })
        .collect();
    fresh.sort_unstable();
    merged.owned = merge_sorted(kept_entries, fresh);
    Ok((tasks, merged, order))
}

/// Merges two sorted sequences into one sorted vector.
fn merge_sorted<T: Ord>(a: impl Iterator<Item = T>, b: Vec<T>) -> Vec<T> {
    let mut out = Vec::with_capacity(a.size_hint().0 + b.len());
    let mut a = a.peekable();
    let mut b = b.into_iter().peekable();
    loop {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => x <= y,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        out.extend(if take_a { a.next() } else { b.next() });
    }
    out
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use proptest::prelude::*;
    use proptest::sample::Index;
    use proptest::strategy::ValueTree;

    use super::super::validate::order::topological_order;
    use super::super::validate::{ValidationStage, analyse};
    use super::super::{AppBuildPlan, Plan};
    use super::*;
    use crate::testing::plan::acyclic_plan;

    /// Normalised plans that pass validation, with extra forward edges (so merging
    /// persistence tasks can close a loop).
    fn normalized_with_extra_edges() -> impl Strategy<Value = Vec<PlannedTask>> {
        (
            acyclic_plan(40),
            proptest::collection::vec((any::<Index>(), any::<Index>()), 0..12),
        )
            .prop_map(|(plan, extra)| {
                let mut tasks = Plan::draft(plan).normalize().into_app_build_plan().tasks;
                let Ok(structure) = analyse(&tasks, ValidationStage::BeforeConsolidation) else {
                    return tasks;
                };
                let order = structure.order;
                for (a, b) in extra {
                    let (a, b) = (a.index(order.len()), b.index(order.len()));
                    if a < b {
                        let prerequisite = tasks[order[a] as usize].id.clone();
                        let dependent = &mut tasks[order[b] as usize];
                        if !dependent.depends_on.contains(&prerequisite) {
                            dependent.depends_on.push(prerequisite);
                        }
                    }
                }
                tasks
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// The oracle for the second validation: carrying the structure through consolidation
        /// gives exactly what validating the consolidated tasks from scratch gives.
        #[test]
        fn carried_structure_equals_validation_from_scratch(tasks in normalized_with_extra_edges()) {
            let before = analyse(&tasks, ValidationStage::BeforeConsolidation).unwrap();
            let (merged, carried, order) = consolidate(tasks, before.resolved).unwrap();
            let carried_order = topological_order(&merged, &carried);
            prop_assert_eq!(&order, &carried_order.clone().ok());
            match analyse(&merged, ValidationStage::AfterConsolidation) {
                Ok(fresh) => {
                    prop_assert_eq!(&fresh.resolved, &carried);
                    prop_assert_eq!(Ok(fresh.order), carried_order);
                }
                Err(err) => {
                    prop_assert!(err.problems().iter().all(|p| p.is_cycle()), "{}", err);
                    prop_assert_eq!(Err(err.problems().to_vec()), carried_order);
                }
            }
        }
    }

    /// Normalised plans with extra edges in any direction, some between persistence tasks
    /// of one module (which a merge hides inside one task): cycles before consolidation,
    /// after it, or both.
    fn normalized_with_any_edges() -> impl Strategy<Value = Vec<PlannedTask>> {
        (
            acyclic_plan(40),
            proptest::collection::vec((any::<Index>(), any::<Index>()), 0..6),
            proptest::collection::vec((any::<Index>(), any::<Index>()), 0..3),
        )
            .prop_map(|(plan, extra, inner)| {
                let mut tasks = Plan::draft(plan).normalize().into_app_build_plan().tasks;
                let persistence: Vec<usize> = (0..tasks.len())
                    .filter(|&i| matches!(tasks[i].kind, TaskKind::Persistence { .. }))
                    .collect();
                let add = |tasks: &mut Vec<PlannedTask>, a: usize, b: usize| {
                    let prerequisite = tasks[a].id.clone();
                    if a != b && !tasks[b].depends_on.contains(&prerequisite) {
                        tasks[b].depends_on.push(prerequisite);
                    }
                };
                for (a, b) in extra {
                    let (a, b) = (a.index(tasks.len()), b.index(tasks.len()));
                    add(&mut tasks, a, b);
                }
                if !persistence.is_empty() {
                    for (a, b) in inner {
                        let (a, b) = (
                            persistence[a.index(persistence.len())],
                            persistence[b.index(persistence.len())],
                        );
                        if tasks[a].kind.module() == tasks[b].kind.module() {
                            add(&mut tasks, a, b);
                        }
                    }
                }
                tasks
            })
    }

    /// The pipeline as it was before the first validation left acyclicity to consolidation:
    /// the normalised plan validated and ordered from scratch, merged, and the merged plan
    /// validated and ordered from scratch. Returns the merged tasks and the order's ids.
    fn reference(
        tasks: Vec<PlannedTask>,
    ) -> Result<(Vec<PlannedTask>, Vec<TaskId>), PlanValidationError> {
        let tasks = Plan::draft(AppBuildPlan::new(tasks))
            .normalize()
            .into_app_build_plan()
            .tasks;
        let before = analyse(&tasks, ValidationStage::BeforeConsolidation)?;
        let (merged, _, _) = consolidate(tasks, before.resolved).unwrap();
        let after = analyse(&merged, ValidationStage::AfterConsolidation)?;
        let order = after
            .order
            .iter()
            .map(|&i| merged[i as usize].id.clone())
            .collect();
        Ok((merged, order))
    }

    fn pipeline(
        tasks: Vec<PlannedTask>,
    ) -> Result<(Vec<PlannedTask>, Vec<TaskId>), PlanValidationError> {
        let consolidated = Plan::draft(AppBuildPlan::new(tasks))
            .normalize()
            .consolidate()?;
        let merged = consolidated.tasks().to_vec();
        let validated = consolidated.validate()?;
        Ok((merged, validated.topological_order().to_vec()))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The oracle for acyclicity proved from the merged plan: the same tasks, order and
        /// errors (stage, problems, cycles) as validating and ordering each plan from scratch.
        #[test]
        fn pipeline_equals_validation_from_scratch(tasks in prop_oneof![
            normalized_with_any_edges(),
            normalized_with_extra_edges(),
            crate::testing::plan::arbitrary_plan(12).prop_map(|p| p.tasks),
            crate::testing::plan::plan_with_injected_cycle(30).prop_map(|(p, _)| p.tasks),
        ]) {
            prop_assert_eq!(pipeline(tasks.clone()), reference(tasks));
        }
    }

    #[test]
    fn the_any_edges_hide_cycles_inside_merges() {
        // Guards the generator above: some normalised plans must have a cycle only among
        // persistence tasks of one module, which the merged plan no longer shows.
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = normalized_with_any_edges();
        let (mut hidden, mut before, mut after) = (0, 0, 0);
        for _ in 0..600 {
            let tasks = strategy.new_tree(&mut runner).unwrap().current();
            let Err(err) = pipeline(tasks.clone()) else {
                continue;
            };
            let by_id = |id: &TaskId| tasks.iter().find(|t| t.id == *id);
            match err.stage() {
                ValidationStage::BeforeConsolidation => before += 1,
                ValidationStage::AfterConsolidation => after += 1,
            }
            if err.cycles().any(|c| {
                c.iter().all(|id| {
                    by_id(id).is_some_and(|t| matches!(t.kind, TaskKind::Persistence { .. }))
                })
            }) {
                hidden += 1;
            }
        }
        assert!(
            hidden > 0 && before > 0 && after > 0,
            "hidden {hidden}, before {before}, after {after}"
        );
    }

    #[test]
    fn the_extra_edges_do_create_post_merge_cycles() {
        // Guards the generator above: without post-merge cycles the oracle test would only
        // cover the acyclic case.
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = normalized_with_extra_edges();
        let mut cycles = 0;
        for _ in 0..300 {
            let tasks = strategy.new_tree(&mut runner).unwrap().current();
            let plan = Plan::draft(AppBuildPlan::new(tasks)).normalize();
            if plan.consolidate().is_ok_and(|c| c.validate().is_err()) {
                cycles += 1;
            }
        }
        assert!(cycles > 0, "no post-merge cycle in 300 generated plans");
    }
}
