//! Validation: every problem of a plan at once, or a [`ValidatedPlan`].

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt;

use foldhash::{HashMap, HashMapExt};
use petgraph::Direction;
use petgraph::graph::{DiGraph, NodeIndex};

use super::model::{ModuleName, PlannedTask};
use super::normalize::index;
use crate::digest::{CanonicalHasher, Digest};
use crate::{AdmittedPath, TaskId};

/// One problem found in a plan. Every variant names the tasks involved.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PlanProblem {
    /// The tasks form a cycle. `path` lists it in dependency order: each task is a
    /// prerequisite of the next, and the last is a prerequisite of the first.
    Cycle {
        /// The cycle, starting at its smallest id.
        path: Vec<TaskId>,
    },
    /// A task depends on an id that no task has.
    UnknownDependency {
        /// The dependent task.
        task: TaskId,
        /// The missing prerequisite.
        dependency: TaskId,
    },
    /// Several tasks share one id.
    DuplicateTaskId {
        /// The shared id.
        id: TaskId,
        /// How many tasks have it.
        count: usize,
    },
    /// A task lists itself as a prerequisite.
    SelfDependency {
        /// The task.
        task: TaskId,
    },
    /// A module is provided by more than one module lane.
    AmbiguousModuleOwner {
        /// The module.
        module: ModuleName,
        /// The tasks that provide it, sorted.
        tasks: Vec<TaskId>,
    },
    /// A path is owned by more than one task.
    PathOwnedTwice {
        /// The path.
        path: AdmittedPath,
        /// The tasks that own it, sorted.
        tasks: Vec<TaskId>,
    },
    /// A path is owned as a file by one task while another owned path lies beneath it, so
    /// it would have to be a directory too (`a` and `a/b`).
    NestedPath {
        /// The outer path.
        outer: AdmittedPath,
        /// The task that owns it.
        outer_task: TaskId,
        /// The path beneath it.
        inner: AdmittedPath,
        /// The task that owns that.
        inner_task: TaskId,
    },
    /// A task records an input contract from a task that is not one of its prerequisites.
    ContractWithoutDependency {
        /// The receiving task.
        task: TaskId,
        /// The contract's source.
        from: TaskId,
    },
}

impl PlanProblem {
    /// Whether this problem is a cycle.
    pub fn is_cycle(&self) -> bool {
        matches!(self, Self::Cycle { .. })
    }

    /// The cycle's path, if this problem is a cycle.
    pub fn cycle(&self) -> Option<&[TaskId]> {
        match self {
            Self::Cycle { path } => Some(path),
            _ => None,
        }
    }

    /// The tasks this problem names.
    pub fn tasks(&self) -> Vec<&TaskId> {
        match self {
            Self::Cycle { path } => path.iter().collect(),
            Self::UnknownDependency { task, .. }
            | Self::SelfDependency { task }
            | Self::ContractWithoutDependency { task, .. } => vec![task],
            Self::DuplicateTaskId { id, .. } => vec![id],
            Self::AmbiguousModuleOwner { tasks, .. } | Self::PathOwnedTwice { tasks, .. } => {
                tasks.iter().collect()
            }
            Self::NestedPath {
                outer_task,
                inner_task,
                ..
            } => vec![outer_task, inner_task],
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Self::DuplicateTaskId { .. } => 0,
            Self::SelfDependency { .. } => 1,
            Self::UnknownDependency { .. } => 2,
            Self::ContractWithoutDependency { .. } => 3,
            Self::AmbiguousModuleOwner { .. } => 4,
            Self::PathOwnedTwice { .. } => 5,
            Self::NestedPath { .. } => 6,
            Self::Cycle { .. } => 7,
        }
    }
}

fn join(ids: &[TaskId]) -> String {
    ids.iter()
        .map(TaskId::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for PlanProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cycle { path } => {
                let ids: Vec<&str> = path.iter().map(TaskId::as_str).collect();
                let first = ids.first().copied().unwrap_or_default();
                write!(f, "cycle {} -> {first}", ids.join(" -> "))
            }
            Self::UnknownDependency { task, dependency } => {
                write!(f, "task {task} depends on unknown task {dependency}")
            }
            Self::DuplicateTaskId { id, count } => write!(f, "{count} tasks have id {id}"),
            Self::SelfDependency { task } => write!(f, "task {task} depends on itself"),
            Self::AmbiguousModuleOwner { module, tasks } => {
                write!(f, "module {module} is provided by {}", join(tasks))
            }
            Self::PathOwnedTwice { path, tasks } => {
                write!(f, "path {path} is owned by {}", join(tasks))
            }
            Self::NestedPath {
                outer,
                outer_task,
                inner,
                inner_task,
            } => write!(
                f,
                "path {inner} of task {inner_task} lies under path {outer} of task {outer_task}"
            ),
            Self::ContractWithoutDependency { task, from } => write!(
                f,
                "task {task} has an input contract from {from}, which is not a prerequisite"
            ),
        }
    }
}

/// When validation ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValidationStage {
    /// On the normalised plan, before persistence tasks were consolidated.
    BeforeConsolidation,
    /// On the consolidated plan (a merge can create a cycle).
    AfterConsolidation,
}

impl fmt::Display for ValidationStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::BeforeConsolidation => "before consolidation",
            Self::AfterConsolidation => "after consolidation",
        })
    }
}

/// Every problem validation found in a plan (never empty).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("validate plan {stage}: {}", summary(.problems))]
pub struct PlanValidationError {
    stage: ValidationStage,
    problems: Vec<PlanProblem>,
}

fn summary(problems: &[PlanProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl PlanValidationError {
    /// All problems, in a fixed order (by kind, then by the ids they name).
    pub fn problems(&self) -> &[PlanProblem] {
        &self.problems
    }

    /// When validation ran.
    pub fn stage(&self) -> ValidationStage {
        self.stage
    }

    /// The cycles found.
    pub fn cycles(&self) -> impl Iterator<Item = &[TaskId]> {
        self.problems.iter().filter_map(PlanProblem::cycle)
    }
}

/// What structural analysis of a plan yields when it finds no problem.
pub(crate) struct Structure {
    /// Task positions in topological order, ties broken by id.
    order: Vec<u32>,
    /// Task positions sorted by id.
    by_id: Vec<u32>,
    /// Prerequisites of each task (CSR: `pre[pre_start[i]..pre_start[i + 1]]`), de-duplicated.
    pre_start: Vec<u32>,
    pre: Vec<u32>,
}

/// Analyses `tasks`: returns the structure, or every problem found.
pub(crate) fn analyse(
    tasks: &[PlannedTask],
    stage: ValidationStage,
) -> Result<Structure, PlanValidationError> {
    let n = tasks.len();
    let mut problems = Vec::new();

    // Intern ids to dense indices once; every later step works on integers.
    let mut ids: HashMap<&str, u32> = HashMap::with_capacity(n);
    let mut duplicates: BTreeMap<&TaskId, usize> = BTreeMap::new();
    for (i, task) in tasks.iter().enumerate() {
        if ids.insert(task.id.as_str(), index(i)).is_some() {
            *duplicates.entry(&task.id).or_insert(1) += 1;
        }
    }
    // The first task with a duplicated id is the one others resolve to.
    for (i, task) in tasks.iter().enumerate().rev() {
        if duplicates.contains_key(&task.id) {
            ids.insert(task.id.as_str(), index(i));
        }
    }
    problems.extend(
        duplicates
            .into_iter()
            .map(|(id, count)| PlanProblem::DuplicateTaskId {
                id: id.clone(),
                count,
            }),
    );

    let mut pre_start = Vec::with_capacity(n + 1);
    let mut pre: Vec<u32> = Vec::with_capacity(tasks.iter().map(|t| t.depends_on.len()).sum());
    let mut indegree = vec![0u32; n];
    pre_start.push(0);
    for (i, task) in tasks.iter().enumerate() {
        let start = pre.len();
        for dep in &task.depends_on {
            if *dep == task.id {
                problems.push(PlanProblem::SelfDependency {
                    task: task.id.clone(),
                });
                continue;
            }
            match ids.get(dep.as_str()) {
                Some(&j) if j as usize != i => pre.push(j),
                Some(_) => {}
                None => problems.push(PlanProblem::UnknownDependency {
                    task: task.id.clone(),
                    dependency: dep.clone(),
                }),
            }
        }
        let mine = &mut pre[start..];
        if mine.len() > 1 {
            mine.sort_unstable();
            let mut kept = 1;
            for k in 1..mine.len() {
                if mine[k] != mine[kept - 1] {
                    mine[kept] = mine[k];
                    kept += 1;
                }
            }
            pre.truncate(start + kept);
        }
        indegree[i] = index(pre.len() - start);
        pre_start.push(index(pre.len()));
        for contract in &task.input_contracts {
            if !task.depends_on.contains(&contract.from) {
                problems.push(PlanProblem::ContractWithoutDependency {
                    task: task.id.clone(),
                    from: contract.from.clone(),
                });
            }
        }
    }

    let mut providers: BTreeMap<&ModuleName, Vec<&TaskId>> = BTreeMap::new();
    for task in tasks {
        if let Some(module) = task.kind.provides() {
            providers.entry(module).or_default().push(&task.id);
        }
    }
    for (module, mut owners) in providers {
        if owners.len() > 1 {
            owners.sort_unstable();
            problems.push(PlanProblem::AmbiguousModuleOwner {
                module: module.clone(),
                tasks: owners.into_iter().cloned().collect(),
            });
        }
    }

    ownership_problems(tasks, &mut problems);

    let mut by_id: Vec<u32> = (0..index(n)).collect();
    by_id.sort_unstable_by(|&a, &b| tasks[a as usize].id.cmp(&tasks[b as usize].id));
    let mut rank = vec![0u32; n];
    for (r, &i) in by_id.iter().enumerate() {
        rank[i as usize] = index(r);
    }

    // Dependents (reverse CSR) for Kahn's algorithm.
    let mut post_start = vec![0u32; n + 1];
    for &j in &pre {
        post_start[j as usize + 1] += 1;
    }
    for i in 0..n {
        post_start[i + 1] += post_start[i];
    }
    let mut fill = post_start.clone();
    let mut post = vec![0u32; pre.len()];
    for i in 0..n {
        for &j in &pre[pre_start[i] as usize..pre_start[i + 1] as usize] {
            post[fill[j as usize] as usize] = index(i);
            fill[j as usize] += 1;
        }
    }
    drop(fill);

    // Kahn's algorithm; the ready set is a min-heap of id ranks, so ties go by id.
    let mut ready: BinaryHeap<Reverse<u32>> = (0..n)
        .filter(|&i| indegree[i] == 0)
        .map(|i| Reverse(rank[i]))
        .collect();
    let mut order = Vec::with_capacity(n);
    while let Some(Reverse(r)) = ready.pop() {
        let i = by_id[r as usize];
        order.push(i);
        for &d in &post[post_start[i as usize] as usize..post_start[i as usize + 1] as usize] {
            let deg = &mut indegree[d as usize];
            *deg -= 1;
            if *deg == 0 {
                ready.push(Reverse(rank[d as usize]));
            }
        }
    }
    if order.len() < n {
        problems.extend(
            cycles(&indegree, &pre_start, &pre, &rank)
                .into_iter()
                .map(|path| PlanProblem::Cycle {
                    path: path.iter().map(|&i| tasks[i as usize].id.clone()).collect(),
                }),
        );
    }

    if problems.is_empty() {
        Ok(Structure {
            order,
            by_id,
            pre_start,
            pre,
        })
    } else {
        problems.sort_by_key(PlanProblem::rank);
        Err(PlanValidationError { stage, problems })
    }
}

/// One cycle per strongly connected component among the tasks Kahn could not order (those
/// with `indegree > 0`), each the shortest cycle through the component's smallest id.
fn cycles(indegree: &[u32], pre_start: &[u32], pre: &[u32], rank: &[u32]) -> Vec<Vec<u32>> {
    let stuck: Vec<u32> = (0..indegree.len())
        .filter(|&i| indegree[i] > 0)
        .map(index)
        .collect();
    let mut local = HashMap::with_capacity(stuck.len());
    let mut graph: DiGraph<u32, ()> = DiGraph::with_capacity(stuck.len(), stuck.len());
    for &i in &stuck {
        local.insert(i, graph.add_node(i));
    }
    for &i in &stuck {
        for &j in &pre[pre_start[i as usize] as usize..pre_start[i as usize + 1] as usize] {
            if let (Some(&a), Some(&b)) = (local.get(&j), local.get(&i)) {
                graph.add_edge(a, b, ());
            }
        }
    }
    let mut found: Vec<Vec<u32>> = petgraph::algo::kosaraju_scc(&graph)
        .into_iter()
        .filter(|scc| scc.len() > 1)
        .filter_map(|scc| shortest_cycle(&graph, &scc, rank))
        .collect();
    found.sort_unstable_by_key(|c| c.first().map(|&i| rank[i as usize]));
    found
}

/// The shortest cycle inside `scc` through its member with the smallest id, as task
/// positions in dependency order.
fn shortest_cycle(graph: &DiGraph<u32, ()>, scc: &[NodeIndex], rank: &[u32]) -> Option<Vec<u32>> {
    let member: std::collections::HashSet<NodeIndex> = scc.iter().copied().collect();
    let start = *scc.iter().min_by_key(|&&n| rank[graph[n] as usize])?;
    // Breadth-first from `start`; neighbours visited by id so the cycle is deterministic.
    let mut parent: HashMap<NodeIndex, NodeIndex> = HashMap::with_capacity(scc.len());
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        let mut next: Vec<NodeIndex> = graph
            .neighbors_directed(node, Direction::Outgoing)
            .filter(|n| member.contains(n))
            .collect();
        next.sort_unstable_by_key(|&n| rank[graph[n] as usize]);
        for n in next {
            if n == start {
                let mut path = vec![graph[node]];
                let mut at = node;
                while let Some(&p) = parent.get(&at) {
                    path.push(graph[p]);
                    at = p;
                }
                path.reverse();
                return Some(path);
            }
            if let std::collections::hash_map::Entry::Vacant(e) = parent.entry(n) {
                e.insert(node);
                queue.push_back(n);
            }
        }
    }
    None
}

/// Reports paths owned twice and paths nested under another owned path.
fn ownership_problems(tasks: &[PlannedTask], problems: &mut Vec<PlanProblem>) {
    let mut owned: Vec<(&AdmittedPath, &TaskId)> = tasks
        .iter()
        .flat_map(|t| t.owned_paths.iter().map(move |p| (p, &t.id)))
        .collect();
    owned.sort_unstable();
    owned.dedup();
    // Sorted by components, every path's extensions follow it directly, so a stack of the
    // current ancestors finds each nesting in one pass.
    let mut ancestors: Vec<(&AdmittedPath, &TaskId)> = Vec::new();
    let mut k = 0;
    while k < owned.len() {
        let path = owned[k].0;
        let same = owned[k..].iter().take_while(|(p, _)| *p == path).count();
        if same > 1 {
            problems.push(PlanProblem::PathOwnedTwice {
                path: path.clone(),
                tasks: owned[k..k + same]
                    .iter()
                    .map(|(_, t)| (*t).clone())
                    .collect(),
            });
        }
        while ancestors.last().is_some_and(|(a, _)| !path.starts_with(a)) {
            ancestors.pop();
        }
        if let Some((outer, outer_task)) = ancestors.last() {
            problems.push(PlanProblem::NestedPath {
                outer: (*outer).clone(),
                outer_task: (*outer_task).clone(),
                inner: path.clone(),
                inner_task: owned[k].1.clone(),
            });
        }
        ancestors.push(owned[k]);
        k += same;
    }
}

/// A plan that passed validation after normalisation and consolidation: the only form of a
/// plan that can be executed.
///
/// It holds the dependency graph (a petgraph [`DiGraph`] whose node `i` is the `i`-th task
/// in topological order, with edges from prerequisite to dependent), the deterministic
/// topological order (ties broken by id), the canonical plan digest and the owner index.
#[derive(Debug, Clone)]
pub struct ValidatedPlan {
    tasks: Vec<PlannedTask>,
    order: Vec<TaskId>,
    /// Positions sorted by id, for lookups.
    by_id: Vec<u32>,
    graph: DiGraph<(), (), u32>,
    /// Owned paths sorted by components, with the position of their owner.
    owners: Vec<(AdmittedPath, u32)>,
    digest: Digest,
}

impl ValidatedPlan {
    pub(crate) fn build(tasks: Vec<PlannedTask>, structure: Structure) -> Self {
        let n = tasks.len();
        let Structure {
            order,
            by_id,
            pre_start,
            pre,
        } = structure;
        let mut position = vec![0u32; n];
        for (p, &i) in order.iter().enumerate() {
            position[i as usize] = index(p);
        }
        let mut graph = DiGraph::with_capacity(n, pre.len());
        for _ in 0..n {
            graph.add_node(());
        }
        for &i in &order {
            let to = NodeIndex::new(position[i as usize] as usize);
            for &j in &pre[pre_start[i as usize] as usize..pre_start[i as usize + 1] as usize] {
                graph.add_edge(NodeIndex::new(position[j as usize] as usize), to, ());
            }
        }
        let mut slots: Vec<Option<PlannedTask>> = tasks.into_iter().map(Some).collect();
        let tasks: Vec<PlannedTask> = order
            .iter()
            .filter_map(|&i| slots[i as usize].take())
            .collect();
        let ids: Vec<TaskId> = tasks.iter().map(|t| t.id.clone()).collect();
        let by_id: Vec<u32> = by_id.iter().map(|&i| position[i as usize]).collect();
        let mut owners: Vec<(AdmittedPath, u32)> = tasks
            .iter()
            .enumerate()
            .flat_map(|(i, t)| t.owned_paths.iter().map(move |p| (p.clone(), index(i))))
            .collect();
        owners.sort_unstable();
        owners.dedup();
        let digest = plan_digest(&tasks, &by_id);
        Self {
            tasks,
            order: ids,
            by_id,
            graph,
            owners,
            digest,
        }
    }

    /// The canonical digest of the plan: the same for the same tasks in any input order,
    /// different when any field of any task differs.
    pub fn digest(&self) -> Digest {
        self.digest
    }

    /// The task ids in topological order: every task after all its prerequisites, ties
    /// broken by id (smallest first).
    pub fn topological_order(&self) -> &[TaskId] {
        &self.order
    }

    /// The task with `id`.
    pub fn task(&self, id: &TaskId) -> Option<&PlannedTask> {
        self.position(id).map(|p| &self.tasks[p])
    }

    /// Every task, in topological order.
    pub fn tasks(&self) -> impl Iterator<Item = &PlannedTask> {
        self.tasks.iter()
    }

    /// The direct prerequisites of `id`, sorted by id (empty for an unknown id).
    pub fn prerequisites(&self, id: &TaskId) -> Vec<&TaskId> {
        self.neighbours(id, Direction::Incoming)
    }

    /// The direct dependents of `id`, sorted by id (empty for an unknown id).
    pub fn dependents(&self, id: &TaskId) -> Vec<&TaskId> {
        self.neighbours(id, Direction::Outgoing)
    }

    /// Every task that depends on `id` directly or transitively, in topological order
    /// (empty for an unknown id): what a failure of `id` drains.
    ///
    /// # Complexity
    ///
    /// Linear in the number of dependents and their edges.
    pub fn transitive_dependents(&self, id: &TaskId) -> Vec<TaskId> {
        let Some(start) = self.position(id) else {
            return Vec::new();
        };
        let mut seen = vec![false; self.tasks.len()];
        let mut stack = vec![NodeIndex::new(start)];
        let mut found = Vec::new();
        while let Some(node) = stack.pop() {
            for next in self.graph.neighbors_directed(node, Direction::Outgoing) {
                if !seen[next.index()] {
                    seen[next.index()] = true;
                    found.push(next.index());
                    stack.push(next);
                }
            }
        }
        found.sort_unstable();
        found.into_iter().map(|p| self.order[p].clone()).collect()
    }

    /// The task that owns `path`, if any.
    pub fn owner_of(&self, path: &AdmittedPath) -> Option<&TaskId> {
        self.owners
            .binary_search_by(|(p, _)| p.cmp(path))
            .ok()
            .map(|k| &self.order[self.owners[k].1 as usize])
    }

    /// The number of tasks.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether the plan has no task.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// The dependency graph: node `i` is the `i`-th task of
    /// [`topological_order`](Self::topological_order); edges run from prerequisite to
    /// dependent.
    pub fn graph(&self) -> &DiGraph<(), (), u32> {
        &self.graph
    }

    /// The plan as data (tasks in topological order), for saving or inspection.
    pub fn to_app_build_plan(&self) -> super::AppBuildPlan {
        super::AppBuildPlan::new(self.tasks.clone())
    }

    fn position(&self, id: &TaskId) -> Option<usize> {
        self.by_id
            .binary_search_by(|&p| self.order[p as usize].cmp(id))
            .ok()
            .map(|k| self.by_id[k] as usize)
    }

    fn neighbours(&self, id: &TaskId, direction: Direction) -> Vec<&TaskId> {
        let Some(p) = self.position(id) else {
            return Vec::new();
        };
        let mut out: Vec<&TaskId> = self
            .graph
            .neighbors_directed(NodeIndex::new(p), direction)
            .map(|n| &self.order[n.index()])
            .collect();
        out.sort_unstable();
        out
    }
}

/// The canonical digest: tasks in id order, each with its lists sorted, so neither the
/// order of tasks nor the order inside a task's lists changes it.
fn plan_digest(tasks: &[PlannedTask], by_id: &[u32]) -> Digest {
    let mut h = CanonicalHasher::new("plan");
    h.u64(tasks.len() as u64);
    let mut deps: Vec<&TaskId> = Vec::new();
    let mut paths: Vec<&AdmittedPath> = Vec::new();
    for &i in by_id {
        let t = &tasks[i as usize];
        h.str(t.id.as_str())
            .str(t.kind.lane())
            .opt_str(t.kind.module().map(ModuleName::as_str))
            .str(t.owner.as_str())
            .digest(&t.spec.digest())
            .u64(u64::from(t.retry_limit))
            .u64(u64::from(t.is_synthesized()));
        paths.clear();
        paths.extend(&t.owned_paths);
        paths.sort_unstable();
        paths.dedup();
        h.u64(paths.len() as u64);
        for p in &paths {
            h.str(p.as_str());
        }
        for list in [&t.depends_on, &t.consolidated_from] {
            deps.clear();
            deps.extend(list.iter());
            deps.sort_unstable();
            deps.dedup();
            h.u64(deps.len() as u64);
            for d in &deps {
                h.str(d.as_str());
            }
        }
        let mut contracts: Vec<_> = t.input_contracts.iter().collect();
        contracts.sort_unstable();
        contracts.dedup();
        h.u64(contracts.len() as u64);
        for c in contracts {
            h.str(c.from.as_str()).u64(c.contract.tag());
        }
    }
    h.finish()
}
