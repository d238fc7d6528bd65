//! Validation: every problem of a plan at once, or a [`ValidatedPlan`].

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use foldhash::{HashMap, HashMapExt};
use petgraph::Direction;
use petgraph::graph::{DiGraph, NodeIndex};

use super::extension::ExtensionValue;
use super::model::{ContractKind, InputContract, ModuleName, PlannedTask, TaskKind, TaskOrigin};
use super::normalize::index;
use crate::id::digest::{Canonical, CanonicalHasher, Digest, OptByte, Unordered, canonical_struct};
use crate::{id::TaskId, plan::path::AdmittedPath};

pub(crate) mod order;
pub(crate) mod ownership;
pub(crate) mod problem;

use order::{id_prefix, topological_order};
use ownership::{PathEntries, entries_for, ownership_problems};

pub use problem::{PlanProblem, PlanValidationError, ValidationStage};

/// A plan's tasks resolved to dense indices: what every check after id resolution works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// Task positions sorted by id.
    pub(super) by_id: Vec<u32>,
    /// Prerequisites of each task (CSR: `pre[pre_start[i]..pre_start[i + 1]]`), sorted and
    /// de-duplicated.
    pub(super) pre_start: Vec<u32>,
    pub(super) pre: Vec<u32>,
    /// Every owned path, by hash.
    pub(super) owned: PathEntries,
}

impl Resolved {
    pub(crate) fn prerequisites(&self, i: usize) -> &[u32] {
        &self.pre[self.pre_start[i] as usize..self.pre_start[i + 1] as usize]
    }
}

/// What validation of a plan yields when it finds no problem.
#[derive(Debug, Clone)]
pub(crate) struct Structure {
    pub(super) resolved: Resolved,
    /// Task positions in topological order, ties broken by id.
    pub(super) order: Vec<u32>,
}

/// Validates `tasks` from scratch: resolves every id and checks every rule. Returns the
/// structure, or every problem found.
pub(crate) fn analyse(
    tasks: &[PlannedTask],
    stage: ValidationStage,
) -> Result<Structure, PlanValidationError> {
    // With another rule broken, `analyse_unordered` already reports the cycles too.
    ordered(tasks, analyse_unordered(tasks, stage)?, stage)
}

/// The structure `resolved` of `tasks` (every rule but acyclicity checked) with its order,
/// or the cycles as the error of `stage`.
pub(crate) fn ordered(
    tasks: &[PlannedTask],
    resolved: Resolved,
    stage: ValidationStage,
) -> Result<Structure, PlanValidationError> {
    match topological_order(tasks, &resolved) {
        Ok(order) => Ok(Structure { resolved, order }),
        Err(cycles) => Err(PlanValidationError::new(stage, cycles)),
    }
}

/// [`analyse`] without the order when every other rule holds: the caller still owes the
/// check that the DAG is acyclic (consolidation proves it from the merged plan's order, see
/// `consolidate::consolidate`). When any other rule is broken, the cycles are looked for
/// here, so the error is exactly the one [`analyse`] gives.
pub(crate) fn analyse_unordered(
    tasks: &[PlannedTask],
    stage: ValidationStage,
) -> Result<Resolved, PlanValidationError> {
    let mut problems = Vec::new();
    let resolved = resolve(tasks, &mut problems);
    if problems.is_empty() {
        return Ok(resolved);
    }
    if let Err(cycles) = topological_order(tasks, &resolved) {
        problems.extend(cycles);
    }
    Err(PlanValidationError::new(stage, problems))
}

/// Resolves every id to a dense index and checks every rule but acyclicity, pushing each
/// problem found onto `problems`.
fn resolve(tasks: &[PlannedTask], problems: &mut Vec<PlanProblem>) -> Resolved {
    let n = tasks.len();

    // Intern ids to dense indices once; every later step works on integers. The same pass
    // keys each id for the sort by id and indexes it by allocation (below), while its text
    // is in cache: on a large plan every read of an id's text is a cache miss.
    let mut ids: HashMap<&str, u32> = HashMap::with_capacity(n);
    let mut by_allocation: HashMap<usize, u32> = HashMap::with_capacity(n);
    let mut keyed: Vec<(u128, u32)> = Vec::with_capacity(n);
    let mut duplicates: BTreeMap<&TaskId, usize> = BTreeMap::new();
    let mut edges = 0;
    for (i, task) in tasks.iter().enumerate() {
        edges += task.depends_on.len();
        if ids.insert(task.id.as_str(), index(i)).is_some() {
            *duplicates.entry(&task.id).or_insert(1) += 1;
        }
        by_allocation.insert(task.id.allocation(), index(i));
        keyed.push((id_prefix(&task.id), index(i)));
    }
    let has_duplicates = !duplicates.is_empty();
    if has_duplicates {
        // The first task with a duplicated id is the one others resolve to.
        for (i, task) in tasks.iter().enumerate().rev() {
            if duplicates.contains_key(&task.id) {
                ids.insert(task.id.as_str(), index(i));
            }
        }
    }
    // With a duplicated id, a prerequisite naming it names every task with it: resolved to
    // the first alone, a cycle through a later one was reported or not by their order.
    let mut same_id: HashMap<&str, Vec<u32>> = HashMap::new();
    if has_duplicates {
        for (i, task) in tasks.iter().enumerate() {
            if duplicates.contains_key(&task.id) {
                same_id.entry(task.id.as_str()).or_default().push(index(i));
            }
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

    // Most prerequisites are clones of their task's id (normalisation's contract edges):
    // found by the address of the shared text, they resolve without reading it, which on a
    // large plan is a cache miss per read. With a duplicated id the first task with it must
    // win, which only the text lookup knows, so then every prerequisite takes that path.
    if has_duplicates {
        by_allocation.clear();
    }
    let resolve = |dep: &TaskId| {
        by_allocation
            .get(&dep.allocation())
            .or_else(|| ids.get(dep.as_str()))
    };
    // Module lanes by module, gathered in the pass over the prerequisites.
    let mut providers: BTreeMap<&ModuleName, Vec<&TaskId>> = BTreeMap::new();
    let mut pre_start = Vec::with_capacity(n + 1);
    let mut pre: Vec<u32> = Vec::with_capacity(edges);
    pre_start.push(0);
    for (i, task) in tasks.iter().enumerate() {
        if let Some(module) = task.kind.provides() {
            providers.entry(module).or_default().push(&task.id);
        }
        let start = pre.len();
        for dep in &task.depends_on {
            match resolve(dep) {
                // A dependency on the task's own id resolves to its own position, or, when
                // the id is duplicated, to the first task with it: only then is the text
                // compared.
                Some(&j)
                    if j as usize == i || (has_duplicates && tasks[j as usize].id == task.id) =>
                {
                    problems.push(PlanProblem::SelfDependency {
                        task: task.id.clone(),
                    });
                }
                Some(&j) => match same_id.get(dep.as_str()) {
                    Some(all) => pre.extend(all.iter().copied().filter(|&k| k as usize != i)),
                    None => pre.push(j),
                },
                None => problems.push(PlanProblem::UnknownDependency {
                    task: task.id.clone(),
                    dependency: dep.clone(),
                }),
            }
        }
        sort_dedup_tail(&mut pre, start);
        pre_start.push(index(pre.len()));
        for contract in &task.input_contracts {
            // Normalisation clones the prerequisite's id into both lists, so comparing
            // allocations finds almost every contract's edge without comparing text.
            let has_edge = task
                .depends_on
                .iter()
                .any(|d| d.shares_allocation_with(&contract.from))
                || task.depends_on.contains(&contract.from);
            if !has_edge {
                problems.push(PlanProblem::ContractWithoutDependency {
                    task: task.id.clone(),
                    from: contract.from.clone(),
                });
            }
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

    let owned = ownership_problems(tasks, problems);

    // Sorting on a 16-byte prefix first keeps most comparisons off the heap.
    keyed.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| tasks[a.1 as usize].id.cmp(&tasks[b.1 as usize].id))
    });
    Resolved {
        by_id: keyed.into_iter().map(|(_, i)| i).collect(),
        pre_start,
        pre,
        owned,
    }
}

/// Sorts and de-duplicates `v[start..]` in place.
pub(crate) fn sort_dedup_tail(v: &mut Vec<u32>, start: usize) {
    let mine = &mut v[start..];
    if mine.len() > 1 {
        mine.sort_unstable();
        let mut kept = 1;
        for k in 1..mine.len() {
            if mine[k] != mine[kept - 1] {
                mine[kept] = mine[k];
                kept += 1;
            }
        }
        v.truncate(start + kept);
    }
}

/// A plan that passed validation after normalisation and consolidation: the only form of a
/// plan that can be executed.
///
/// It holds the dependency graph, the deterministic topological order (ties broken by id),
/// the canonical plan digest and the owner index. The graph is read through the tasks' ids:
/// [`prerequisites`](Self::prerequisites), [`dependents`](Self::dependents),
/// [`transitive_dependents`](Self::transitive_dependents) and
/// [`topological_order`](Self::topological_order).
///
/// ```
/// use kleene::{AppBuildPlan, id::TaskId};
///
/// let plan = AppBuildPlan::from_json(r#"{"tasks": [
///   {"id": "page", "owner": "ui", "spec": {"intent": "page"}, "depends_on": ["api"]},
///   {"id": "api", "owner": "svc", "spec": {"intent": "api"}, "depends_on": ["model"]},
///   {"id": "model", "owner": "db", "spec": {"intent": "model"}}
/// ]}"#)?.validate()?;
/// let ids = |v: Vec<&TaskId>| v.into_iter().map(|t| t.to_string()).collect::<Vec<_>>();
/// assert_eq!(plan.topological_order().iter().map(TaskId::as_str).collect::<Vec<_>>(),
///            ["model", "api", "page"]);
/// assert_eq!(ids(plan.prerequisites(&TaskId::new("api")?)), ["model"]);
/// assert_eq!(ids(plan.dependents(&TaskId::new("api")?)), ["page"]);
/// assert_eq!(plan.transitive_dependents(&TaskId::new("model")?).len(), 2);
/// assert_eq!(plan.dependency_count(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct ValidatedPlan {
    /// The tasks in the order they were given (after consolidation).
    tasks: Vec<PlannedTask>,
    /// The plan-level extension values.
    extensions: BTreeMap<String, ExtensionValue>,
    /// Task positions in topological order.
    topo: Vec<u32>,
    /// The topological rank of each task position.
    rank: Vec<u32>,
    /// Task ids in topological order; shared, so a batch's evidence lists its inventory
    /// without a copy of each id (see [`shared_order`](Self::shared_order)).
    order: Arc<[TaskId]>,
    /// Task positions sorted by id, for lookups.
    by_id: Vec<u32>,
    /// Node `r` is the task of rank `r`.
    graph: DiGraph<(), (), u32>,
    /// Owned paths by hash (see `PathEntries`); task positions refer to `tasks`.
    owners: PathEntries,
    /// The canonical digest, computed on first use.
    digest: OnceLock<Digest>,
}

impl ValidatedPlan {
    pub(crate) fn build(
        tasks: Vec<PlannedTask>,
        extensions: BTreeMap<String, ExtensionValue>,
        structure: Structure,
    ) -> Self {
        let n = tasks.len();
        let Structure {
            order: topo,
            resolved,
        } = structure;
        let mut rank = vec![0u32; n];
        for (r, &i) in topo.iter().enumerate() {
            rank[i as usize] = index(r);
        }
        let mut graph = DiGraph::with_capacity(n, resolved.pre.len());
        for _ in 0..n {
            graph.add_node(());
        }
        for &i in &topo {
            let to = NodeIndex::new(rank[i as usize] as usize);
            for &j in resolved.prerequisites(i as usize) {
                graph.add_edge(NodeIndex::new(rank[j as usize] as usize), to, ());
            }
        }
        let order: Arc<[TaskId]> = topo.iter().map(|&i| tasks[i as usize].id.clone()).collect();
        Self {
            tasks,
            extensions,
            topo,
            rank,
            order,
            by_id: resolved.by_id,
            graph,
            owners: resolved.owned,
            digest: OnceLock::new(),
        }
    }

    /// The canonical digest of the plan: the same for the same tasks in any input order,
    /// different when any field of any task, or any extension value of a task or of the
    /// plan, differs. Extension values enter in canonical form, so reformatting a plan file
    /// or reordering the keys of an object does not change the digest.
    ///
    /// Computed on the first call (it reads every byte of the plan) and kept.
    pub fn digest(&self) -> Digest {
        *self
            .digest
            .get_or_init(|| plan_digest(&self.tasks, &self.extensions))
    }

    /// The value of plan-level extension key `key`, if the plan carried it.
    pub fn extension(&self, key: &str) -> Option<&ExtensionValue> {
        self.extensions.get(key)
    }

    /// Every plan-level extension value, by key.
    pub fn extensions(&self) -> &BTreeMap<String, ExtensionValue> {
        &self.extensions
    }

    /// The task ids in topological order: every task after all its prerequisites, ties
    /// broken by id (smallest first).
    pub fn topological_order(&self) -> &[TaskId] {
        &self.order
    }

    /// [`topological_order`](Self::topological_order), shared.
    pub(crate) fn shared_order(&self) -> Arc<[TaskId]> {
        Arc::clone(&self.order)
    }

    /// The task with `id`.
    pub fn task(&self, id: &TaskId) -> Option<&PlannedTask> {
        self.position(id).map(|p| &self.tasks[p])
    }

    /// Every task, in topological order.
    pub fn tasks(&self) -> impl Iterator<Item = &PlannedTask> {
        self.topo.iter().map(|&p| &self.tasks[p as usize])
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
        let mut stack = vec![NodeIndex::new(self.rank[start] as usize)];
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

    /// The task that owns `path`, if any: the task that owns the path itself or one of its
    /// ancestor directories (owning `out` owns `out/a/b.txt`). Validation refuses overlapping
    /// ownership, so there is at most one.
    ///
    /// # Examples
    ///
    /// ```
    /// use kleene::{plan::AdmittedPath, AppBuildPlan};
    ///
    /// let plan = AppBuildPlan::from_json(r#"{"tasks": [
    ///   {"id": "site", "owner": "mkdocs", "spec": {"intent": "render"}, "owned_paths": ["site"]}
    /// ]}"#)?.validate()?;
    /// let owner = |p| plan.owner_of(&AdmittedPath::admit(p).unwrap()).map(|t| t.as_str());
    /// assert_eq!(owner("site"), Some("site"));
    /// assert_eq!(owner("site/css/main.css"), Some("site"));
    /// assert_eq!(owner("sites/x"), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Complexity
    ///
    /// One lookup for the path and one per ancestor: `O(d log n)` for a path of `d`
    /// components and `n` owned paths.
    pub fn owner_of(&self, path: &AdmittedPath) -> Option<&TaskId> {
        let raw = path.as_str();
        // The path itself, then its ancestors nearest first.
        std::iter::once(raw.len())
            .chain((0..raw.len()).rev().filter(|&i| raw.as_bytes()[i] == b'/'))
            .find_map(|end| entries_for(&self.owners, &self.tasks, &raw[..end]).next())
            .map(|e| &self.tasks[e.1 as usize].id)
    }

    /// The number of tasks.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether the plan has no task.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// How many direct dependencies (prerequisite → dependent pairs) the plan has, after
    /// normalisation added its contract edges.
    pub fn dependency_count(&self) -> usize {
        self.graph.edge_count()
    }

    /// The dependency graph, for the executor: node `i` is the `i`-th task of
    /// [`topological_order`](Self::topological_order); edges run from prerequisite to
    /// dependent. petgraph stays an implementation detail, out of the public API.
    pub(crate) fn graph(&self) -> &DiGraph<(), (), u32> {
        &self.graph
    }

    /// The plan as data (tasks in topological order), for saving or inspection.
    pub fn to_app_build_plan(&self) -> super::AppBuildPlan {
        super::AppBuildPlan {
            tasks: self.tasks().cloned().collect(),
            extensions: self.extensions.clone(),
        }
    }

    /// The position in `tasks` of the task with `id`.
    fn position(&self, id: &TaskId) -> Option<usize> {
        self.by_id
            .binary_search_by(|&p| self.tasks[p as usize].id.cmp(id))
            .ok()
            .map(|k| self.by_id[k] as usize)
    }

    fn neighbours(&self, id: &TaskId, direction: Direction) -> Vec<&TaskId> {
        let Some(p) = self.position(id) else {
            return Vec::new();
        };
        let mut out: Vec<&TaskId> = self
            .graph
            .neighbors_directed(NodeIndex::new(self.rank[p] as usize), direction)
            .map(|n| &self.order[n.index()])
            .collect();
        out.sort_unstable();
        out
    }
}

/// The canonical digest: a digest per task (its lists sorted), the task digests sorted, then
/// digested together. Neither the order of tasks nor the order inside a task's lists changes
/// it; any change to any field of any task does.
/// The digest of one task's plan entry, as the plan digest takes it in: the same for the
/// same entry in any plan, whatever the order of its lists.
pub(crate) fn task_digest(task: &PlannedTask) -> Digest {
    Digest::of("plan task", task)
}

fn plan_digest(tasks: &[PlannedTask], extensions: &BTreeMap<String, ExtensionValue>) -> Digest {
    let task = CanonicalHasher::new("plan task");
    let mut digests: Vec<Digest> = tasks.iter().map(|t| task.clone().put(t).finish()).collect();
    digests.sort_unstable();
    Digest::of("plan", &(digests, Extensions(extensions)))
}

// A task's lists are sets: their order is not part of the plan.
canonical_struct!(PlannedTask {
    id,
    kind,
    owner,
    spec,
    retry_limit,
    origin => *origin == TaskOrigin::Synthesized,
    owned_paths => Unordered::set(owned_paths),
    depends_on => Unordered::set(depends_on),
    consolidated_from => Unordered::set(consolidated_from),
    input_contracts => Unordered::set(input_contracts),
    extensions => Extensions(extensions),
});

impl Canonical for TaskKind {
    fn encode(&self, h: &mut CanonicalHasher) {
        h.put(self.lane()).put(&OptByte(self.module()));
    }
}

canonical_struct!(InputContract { from, contract });

impl Canonical for ContractKind {
    fn encode(&self, h: &mut CanonicalHasher) {
        h.put(&self.tag());
    }
}

/// Extension values, by key (the map is sorted), in canonical form. Written only when there
/// are some, so plans without extensions keep the digests they had before extensions
/// existed; the tag and the count keep the encoding unambiguous.
struct Extensions<'a>(&'a BTreeMap<String, ExtensionValue>);

impl Canonical for Extensions<'_> {
    fn encode(&self, h: &mut CanonicalHasher) {
        if !self.0.is_empty() {
            h.put("extensions").put(self.0);
        }
    }
}

impl Canonical for ExtensionValue {
    fn encode(&self, h: &mut CanonicalHasher) {
        h.put(self.canonical());
    }
}
