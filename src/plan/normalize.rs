//! Normalisation: synthesise missing module lanes, add contract edges, keep explicit edges.

use std::collections::BTreeSet;

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use super::model::{
    ContractKind, InputContract, ModuleName, PlannedTask, SYNTHESIZED_MODULE_OWNER, TaskKind,
    TaskOrigin,
};
use crate::{AgentId, Spec, TaskId};

/// Above this many entries, de-duplication uses a hash set instead of a linear scan.
const LINEAR_DEDUP_LIMIT: usize = 16;

/// Tasks of one module, by lane, as indices into the task list.
#[derive(Default)]
struct ModuleLanes {
    providers: Vec<u32>,
    persistence: Vec<u32>,
    models: Vec<u32>,
}

/// Normalises `tasks` in place (R11): every module a task references gets a lane, every task
/// receives the contract edges of its lane, explicit edges stay, nothing else is added.
///
/// Idempotent: a second call finds every lane and edge already present and changes nothing.
pub(crate) fn normalize(tasks: &mut Vec<PlannedTask>) {
    let mut additions: Vec<(u32, u32, ContractKind)> = Vec::new();
    let synthesized: Vec<ModuleName> = {
        let mut lanes: HashMap<&ModuleName, ModuleLanes> = HashMap::with_capacity(tasks.len() / 4);
        for (i, task) in tasks.iter().enumerate() {
            let Some(module) = task.kind.module() else {
                continue;
            };
            let entry = lanes.entry(module).or_default();
            let i = index(i);
            match task.kind {
                TaskKind::Module { .. } => entry.providers.push(i),
                TaskKind::Persistence { .. } => entry.persistence.push(i),
                TaskKind::Model { .. } => entry.models.push(i),
                _ => {}
            }
        }
        // Sorted, so synthesised lanes get the same positions whatever the input order.
        let missing: BTreeSet<&ModuleName> = lanes
            .iter()
            .filter(|(_, l)| l.providers.is_empty())
            .map(|(m, _)| *m)
            .collect();
        for (k, module) in missing.iter().enumerate() {
            if let Some(l) = lanes.get_mut(*module) {
                l.providers.push(index(tasks.len() + k));
            }
        }
        for (i, task) in tasks.iter().enumerate() {
            let Some(l) = task.kind.module().and_then(|m| lanes.get(m)) else {
                continue;
            };
            let i = index(i);
            let mut add = |sources: &[u32], contract| {
                additions.extend(sources.iter().map(|&s| (i, s, contract)));
            };
            match task.kind {
                TaskKind::Module { .. } => {}
                TaskKind::Model { .. } => {
                    add(&l.providers, ContractKind::Module);
                    add(&l.persistence, ContractKind::Persistence);
                }
                TaskKind::Service { .. } => {
                    add(&l.providers, ContractKind::Module);
                    add(&l.models, ContractKind::Schemas);
                }
                TaskKind::Persistence { .. }
                | TaskKind::Page { .. }
                | TaskKind::Config { .. }
                | TaskKind::Auth { .. } => add(&l.providers, ContractKind::Module),
            }
        }
        missing.into_iter().cloned().collect()
    };
    tasks.extend(synthesized.into_iter().map(module_lane));

    for task in tasks.iter_mut() {
        dedup_preserving_order(&mut task.depends_on);
        dedup_preserving_order(&mut task.input_contracts);
    }
    // Grouped by target, then by contract and source id, so the added edges have one order
    // whatever the input order was.
    additions.sort_unstable_by(|a, b| {
        (a.0, a.2)
            .cmp(&(b.0, b.2))
            .then_with(|| tasks[a.1 as usize].id.cmp(&tasks[b.1 as usize].id))
    });
    let mut start = 0;
    while start < additions.len() {
        let target = additions[start].0;
        let end = start
            + additions[start..]
                .iter()
                .take_while(|a| a.0 == target)
                .count();
        let new: Vec<(TaskId, ContractKind)> = additions[start..end]
            .iter()
            .map(|&(_, s, c)| (tasks[s as usize].id.clone(), c))
            .collect();
        let task = &mut tasks[target as usize];
        let mut known_deps = Known::new(&task.depends_on);
        let mut known_contracts = Known::new(&task.input_contracts);
        for (from, contract) in new {
            let input = InputContract {
                from: from.clone(),
                contract,
            };
            // A task listed as its own module's provider (duplicate ids) is left for
            // validation to report; normalisation never adds a self-edge.
            if from == task.id {
                continue;
            }
            if known_contracts.insert(&task.input_contracts, &input) {
                task.input_contracts.push(input);
            }
            if known_deps.insert(&task.depends_on, &from) {
                task.depends_on.push(from);
            }
        }
        start = end;
    }
}

/// Converts a task position to the dense index type used inside the plan.
pub(crate) fn index(i: usize) -> u32 {
    // Plans are bounded far below u32::MAX tasks by memory; saturate rather than wrap.
    u32::try_from(i).unwrap_or(u32::MAX)
}

fn module_lane(module: ModuleName) -> PlannedTask {
    let mut task = PlannedTask::new(
        module.lane_id().clone(),
        TaskKind::Module {
            module: module.clone(),
        },
        synthesized_owner(),
        Spec::new(format!("module contract of `{module}`")),
    );
    task.origin = TaskOrigin::Synthesized;
    task
}

fn synthesized_owner() -> AgentId {
    // A crate constant, not outside data; `synthesized_owner_is_a_valid_agent_id` checks it.
    #[allow(clippy::expect_used)]
    AgentId::new(SYNTHESIZED_MODULE_OWNER).expect("SYNTHESIZED_MODULE_OWNER is a valid agent id")
}

/// Removes repeated entries, keeping the first occurrence of each.
pub(crate) fn dedup_preserving_order<T: Eq + std::hash::Hash + Clone>(items: &mut Vec<T>) {
    if items.len() <= LINEAR_DEDUP_LIMIT {
        let mut i = 0;
        while i < items.len() {
            if items[..i].contains(&items[i]) {
                items.remove(i);
            } else {
                i += 1;
            }
        }
    } else {
        let mut seen = HashSet::with_capacity(items.len());
        items.retain(|x| seen.insert(x.clone()));
    }
}

/// Membership of a growing list: a linear scan while it is short, a hash set once long.
struct Known<T> {
    set: Option<HashSet<T>>,
}

impl<T: Eq + std::hash::Hash + Clone> Known<T> {
    fn new(items: &[T]) -> Self {
        let set = (items.len() > LINEAR_DEDUP_LIMIT).then(|| items.iter().cloned().collect());
        Self { set }
    }

    /// Whether `item` is new (and, for a long list, remembers it).
    fn insert(&mut self, items: &[T], item: &T) -> bool {
        match &mut self.set {
            Some(set) => set.insert(item.clone()),
            None => {
                if items.len() >= LINEAR_DEDUP_LIMIT {
                    let mut set: HashSet<T> = items.iter().cloned().collect();
                    let new = set.insert(item.clone());
                    self.set = Some(set);
                    new
                } else {
                    !items.contains(item)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthesized_owner_is_a_valid_agent_id() {
        assert!(AgentId::new(SYNTHESIZED_MODULE_OWNER).is_ok());
    }

    #[test]
    fn dedup_keeps_first_occurrences_at_any_length() {
        let mut short = vec![3, 1, 3, 2, 1];
        dedup_preserving_order(&mut short);
        assert_eq!(short, [3, 1, 2]);
        let mut long: Vec<u32> = (0..40).map(|i| i % 20).rev().collect();
        dedup_preserving_order(&mut long);
        assert_eq!(long, (0..20).rev().collect::<Vec<_>>());
    }
}
