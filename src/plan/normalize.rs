//! Normalisation: synthesise missing module lanes, add contract edges, keep explicit edges.

use std::collections::BTreeSet;

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use super::model::{
    ContractKind, InputContract, ModuleName, PlannedTask, SYNTHESIZED_MODULE_OWNER, TaskKind,
    TaskOrigin,
};
use crate::{closure::task::Spec, id::AgentId};

/// Above this many entries, de-duplication uses a hash set instead of a linear scan.
const LINEAR_DEDUP_LIMIT: usize = 16;

/// Tasks of one module, by lane, as positions in the task list.
#[derive(Default)]
struct ModuleLanes {
    providers: Vec<u32>,
    persistence: Vec<u32>,
    models: Vec<u32>,
    /// Whether two of these tasks share an id (a duplicate id, which validation reports):
    /// only then can a task receive two contract edges from one id and need de-duplicating.
    repeated_id: bool,
}

/// Normalises `tasks` in place: every module a task references gets a lane, every task
/// receives the contract edges of its lane, explicit edges stay, nothing else is added.
///
/// Idempotent: a second call finds every lane and edge already present and changes nothing.
pub(crate) fn normalize(tasks: &mut Vec<PlannedTask>) {
    for task in tasks.iter_mut() {
        dedup_preserving_order(&mut task.depends_on);
        dedup_preserving_order(&mut task.input_contracts);
    }
    // Contract edges as (target, source, contract), grouped by target in task order; within
    // a target, by contract and then by source id, whatever the input order was.
    let mut additions: Vec<(u32, u32, ContractKind)> = Vec::new();
    // Per target task: whether its contract sources may repeat an id.
    let mut repeated_source = vec![false; tasks.len()];
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
        let by_id = |list: &mut Vec<u32>| {
            if list.len() > 1 {
                list.sort_unstable_by(|&a, &b| tasks[a as usize].id.cmp(&tasks[b as usize].id));
            }
        };
        for l in lanes.values_mut() {
            by_id(&mut l.providers);
            by_id(&mut l.persistence);
            by_id(&mut l.models);
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
        let mut ids: Vec<&str> = Vec::new();
        for (module, l) in lanes.iter_mut() {
            let id = |p: &u32| match tasks.get(*p as usize) {
                Some(task) => task.id.as_str(),
                None => module.lane_id().as_str(),
            };
            ids.clear();
            ids.extend(l.providers.iter().map(id));
            ids.extend(l.persistence.iter().map(id));
            ids.extend(l.models.iter().map(id));
            ids.sort_unstable();
            l.repeated_id = ids.windows(2).any(|w| w[0] == w[1]);
        }
        for (i, task) in tasks.iter().enumerate() {
            let Some(l) = task.kind.module().and_then(|m| lanes.get(m)) else {
                continue;
            };
            repeated_source[i] = l.repeated_id;
            let i = index(i);
            let mut add = |sources: &[u32], contract| {
                additions.extend(sources.iter().map(|&s| (i, s, contract)));
            };
            match task.kind {
                // Unreachable for general tasks (they have no module); listed so that a new
                // lane must decide its contract edges here.
                TaskKind::Module { .. } | TaskKind::General => {}
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

    let mut new_deps: Vec<usize> = Vec::new();
    let mut new_contracts: Vec<(usize, ContractKind)> = Vec::new();
    for group in additions.chunk_by(|a, b| a.0 == b.0) {
        let target = group[0].0 as usize;
        new_deps.clear();
        new_contracts.clear();
        {
            let task = &tasks[target];
            let deps = Members::new(&task.depends_on, |d| d.as_str());
            let contracts = Members::new(&task.input_contracts, |c| (c.from.as_str(), c.contract));
            for &(_, source, contract) in group {
                let source = source as usize;
                let from = tasks[source].id.as_str();
                // A task that shares its id with its module's lane (a duplicate id) is left
                // for validation to report; normalisation never adds a self-edge.
                if from == task.id.as_str() {
                    continue;
                }
                if !contracts.contains(&(from, contract)) {
                    new_contracts.push((source, contract));
                }
                if !deps.contains(&from) {
                    new_deps.push(source);
                }
            }
        }
        tasks[target].input_contracts.reserve(new_contracts.len());
        tasks[target].depends_on.reserve(new_deps.len());
        for &(source, contract) in &new_contracts {
            let from = tasks[source].id.clone();
            tasks[target]
                .input_contracts
                .push(InputContract { from, contract });
        }
        for &source in &new_deps {
            let from = tasks[source].id.clone();
            tasks[target].depends_on.push(from);
        }
        // Two sources can share an id (a duplicate that validation reports). Checked per
        // module rather than per task: re-scanning every grown list cost more than all the
        // rest of this loop.
        if repeated_source[target] {
            dedup_preserving_order(&mut tasks[target].depends_on);
            dedup_preserving_order(&mut tasks[target].input_contracts);
        }
    }
}

/// Membership in a list by a key: a scan while the list is short, a hash set once long.
struct Members<'a, T, K> {
    items: &'a [T],
    key: fn(&'a T) -> K,
    set: Option<HashSet<K>>,
}

impl<'a, T, K: Eq + std::hash::Hash> Members<'a, T, K> {
    fn new(items: &'a [T], key: fn(&'a T) -> K) -> Self {
        let set = (items.len() > LINEAR_DEDUP_LIMIT).then(|| items.iter().map(key).collect());
        Self { items, key, set }
    }

    fn contains(&self, item: &K) -> bool {
        match &self.set {
            Some(set) => set.contains(item),
            None => self.items.iter().any(|x| (self.key)(x) == *item),
        }
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
