//! The plan's order: Kahn's algorithm over the resolved graph, or the cycles that block it.

use super::Resolved;
use super::problem::PlanProblem;
use crate::id::TaskId;
use crate::plan::model::PlannedTask;
use crate::plan::normalize::index;
use foldhash::{HashMap, HashMapExt};
use petgraph::Direction;
use petgraph::graph::DiGraph;
use petgraph::graph::NodeIndex;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Kahn's algorithm over the resolved graph, ties broken by id; or a cycle problem for each
/// strongly connected component that blocks it.
///
/// Kahn's order over integer adjacency is both what fixes the tie-break and cheaper than a
/// depth-first `toposort` followed by a re-sort.
pub(crate) fn topological_order(
    tasks: &[PlannedTask],
    resolved: &Resolved,
) -> Result<Vec<u32>, Vec<PlanProblem>> {
    kahn(resolved).map_err(|stuck| {
        cycles(
            &stuck.indegree,
            &resolved.pre_start,
            &resolved.pre,
            &stuck.rank,
        )
        .into_iter()
        .map(|path| PlanProblem::Cycle {
            path: path.iter().map(|&i| tasks[i as usize].id.clone()).collect(),
        })
        .collect()
    })
}

/// [`topological_order`] on the integer structure alone, for a plan whose tasks are not
/// built yet (consolidation orders the merged plan before it merges the tasks): `None` when
/// the graph has a cycle.
pub(crate) fn order_positions(resolved: &Resolved) -> Option<Vec<u32>> {
    kahn(resolved).ok()
}

/// What Kahn's algorithm leaves when a cycle blocks it: the remaining in-degrees (non-zero
/// exactly on the blocked tasks) and the id rank of every task, which the cycle report needs.
struct Stuck {
    indegree: Vec<u32>,
    rank: Vec<u32>,
}

fn kahn(resolved: &Resolved) -> Result<Vec<u32>, Stuck> {
    let n = resolved.pre_start.len().saturating_sub(1);
    let Resolved {
        by_id,
        pre_start,
        pre,
        ..
    } = resolved;
    let mut rank = vec![0u32; n];
    for (r, &i) in by_id.iter().enumerate() {
        rank[i as usize] = index(r);
    }
    let mut indegree: Vec<u32> = pre_start.windows(2).map(|w| w[1] - w[0]).collect();
    // Dependents (reverse CSR).
    let mut post_start = vec![0u32; n + 1];
    for &j in pre {
        post_start[j as usize + 1] += 1;
    }
    for i in 0..n {
        post_start[i + 1] += post_start[i];
    }
    let mut fill = post_start.clone();
    let mut post = vec![0u32; pre.len()];
    for i in 0..n {
        for &j in resolved.prerequisites(i) {
            post[fill[j as usize] as usize] = index(i);
            fill[j as usize] += 1;
        }
    }
    drop(fill);

    // The ready set is a min-heap of id ranks.
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
    if order.len() == n {
        return Ok(order);
    }
    Err(Stuck { indegree, rank })
}

/// The first 16 bytes of `id`, zero-padded, as a big-endian number: ordering by it agrees
/// with ordering by the id wherever the prefixes differ (ids hold no NUL).
// Split from the validation that calls it once per task: inlined there as before.
#[inline]
pub(super) fn id_prefix(id: &TaskId) -> u128 {
    let bytes = id.as_str().as_bytes();
    let mut buf = [0u8; 16];
    let n = bytes.len().min(16);
    buf[..n].copy_from_slice(&bytes[..n]);
    u128::from_be_bytes(buf)
}

/// One cycle per strongly connected component among the tasks Kahn could not order (those
/// with `indegree > 0`), each the shortest cycle through the component's smallest id.
pub(super) fn cycles(
    indegree: &[u32],
    pre_start: &[u32],
    pre: &[u32],
    rank: &[u32],
) -> Vec<Vec<u32>> {
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
pub(super) fn shortest_cycle(
    graph: &DiGraph<u32, ()>,
    scc: &[NodeIndex],
    rank: &[u32],
) -> Option<Vec<u32>> {
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
