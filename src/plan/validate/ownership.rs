//! Owned paths: every path owned once, and never inside another task's.

use super::problem::PlanProblem;
use crate::id::TaskId;
use crate::plan::model::PlannedTask;
use crate::plan::normalize::index;
use crate::plan::path::AdmittedPath;

/// Owned paths as (hash of the path, task position, index in its `owned_paths`), sorted.
///
/// Hashing instead of sorting by path keeps ownership checks linear and cache-friendly;
/// every hash match is confirmed by comparing the paths themselves.
pub(crate) type PathEntries = Vec<(u64, u32, u32)>;

// Split from the validation that calls these once per path: inlined there as before.
#[inline]
pub(crate) fn path_hash(path: &str) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0).hash_one(path)
}

#[inline]
pub(super) fn entry_path<'a>(
    tasks: &'a [PlannedTask],
    &(_, t, k): &(u64, u32, u32),
) -> &'a AdmittedPath {
    &tasks[t as usize].owned_paths[k as usize]
}

/// The entries whose path is exactly `path`.
#[inline]
pub(super) fn entries_for<'e>(
    entries: &'e [(u64, u32, u32)],
    tasks: &[PlannedTask],
    path: &str,
) -> impl Iterator<Item = &'e (u64, u32, u32)> {
    let h = path_hash(path);
    let start = entries.partition_point(|e| e.0 < h);
    entries[start..]
        .iter()
        .take_while(move |e| e.0 == h)
        .filter(move |e| entry_path(tasks, e).as_str() == path)
}

/// Reports paths owned by several tasks and paths nested under another owned path (each
/// against its nearest owned ancestor); returns the owned-path entries.
pub(super) fn ownership_problems(
    tasks: &[PlannedTask],
    problems: &mut Vec<PlanProblem>,
) -> PathEntries {
    // Walk the tasks in order (memory order), never in hash order, so the paths are read
    // sequentially.
    let mut entries: PathEntries =
        Vec::with_capacity(tasks.iter().map(|t| t.owned_paths.len()).sum());
    // Every proper prefix of an owned path that ends at a separator, longest first per path,
    // as (hash, task, index in its `owned_paths`, length): hashed here, while the path's
    // bytes are in cache, so the nesting check below need not read the path again (on a
    // large plan each read is a cache miss).
    let mut prefixes: Vec<(u64, u32, u32, u32)> = Vec::with_capacity(entries.capacity() * 2);
    for (t, task) in tasks.iter().enumerate() {
        for (k, p) in task.owned_paths.iter().enumerate() {
            let raw = p.as_str();
            entries.push((path_hash(raw), index(t), index(k)));
            // A byte scan: owned paths are short, and `rmatch_indices` pays a `memrchr`
            // call per separator.
            prefixes.extend(
                (0..raw.len())
                    .rev()
                    .filter(|&i| raw.as_bytes()[i] == b'/')
                    .map(|i| (path_hash(&raw[..i]), index(t), index(k), index(i))),
            );
        }
    }
    // Only a path that some task owns can be an outer one: a set of owned path hashes
    // rejects almost every probe without touching a path.
    let hashes: foldhash::HashSet<u64> = entries.iter().map(|e| e.0).collect();
    entries.sort_unstable();
    // A task that lists a path twice owns it once.
    entries
        .dedup_by(|b, a| a.0 == b.0 && a.1 == b.1 && entry_path(tasks, a) == entry_path(tasks, b));

    let mut twice: Vec<(&AdmittedPath, Vec<&TaskId>)> = Vec::new();
    for run in entries
        .chunk_by(|a, b| a.0 == b.0)
        .filter(|run| run.len() > 1)
    {
        let mut by_path: Vec<(&AdmittedPath, Vec<&TaskId>)> = Vec::new();
        for e in run {
            let path = entry_path(tasks, e);
            let owner = &tasks[e.1 as usize].id;
            match by_path.iter_mut().find(|(p, _)| *p == path) {
                Some((_, owners)) => owners.push(owner),
                None => by_path.push((path, vec![owner])),
            }
        }
        for (path, mut owners) in by_path.into_iter().filter(|(_, o)| o.len() > 1) {
            owners.sort_unstable();
            twice.push((path, owners));
        }
    }

    let mut nested: Vec<(&AdmittedPath, &AdmittedPath, &TaskId, &TaskId)> = Vec::new();
    // Per owned path (a run of its prefixes), the nearest owned ancestor: the first prefix
    // whose hash is owned and whose text an owned path matches.
    for run in prefixes.chunk_by(|a, b| (a.1, a.2) == (b.1, b.2)) {
        let (t, k) = (run[0].1 as usize, run[0].2 as usize);
        let inner = &tasks[t].owned_paths[k];
        let outer = run
            .iter()
            .filter(|prefix| hashes.contains(&prefix.0))
            .find_map(|prefix| {
                let text = &inner.as_str()[..prefix.3 as usize];
                entries_for(&entries, tasks, text)
                    .min_by(|a, b| tasks[a.1 as usize].id.cmp(&tasks[b.1 as usize].id))
            });
        if let Some(o) = outer {
            nested.push((
                inner,
                entry_path(tasks, o),
                &tasks[t].id,
                &tasks[o.1 as usize].id,
            ));
        }
    }
    twice.sort_unstable();
    nested.sort_unstable();
    // One report per pair of paths, naming the smallest owner of each.
    nested.dedup_by(|b, a| a.0 == b.0 && a.1 == b.1);
    problems.extend(
        twice
            .into_iter()
            .map(|(path, owners)| PlanProblem::PathOwnedTwice {
                path: path.clone(),
                tasks: owners.into_iter().cloned().collect(),
            }),
    );
    problems.extend(
        nested.into_iter().map(
            |(inner, outer, inner_task, outer_task)| PlanProblem::NestedPath {
                outer: outer.clone(),
                outer_task: outer_task.clone(),
                inner: inner.clone(),
                inner_task: inner_task.clone(),
            },
        ),
    );
    entries
}
