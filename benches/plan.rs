//! Plan pipeline (normalise + consolidate + validate) against the bare petgraph baseline
//! (build the same graph from the same string ids, run `petgraph::algo::toposort`), plus
//! peak memory per task.
//!
//! Run: `cargo bench --bench plan -- --warm-up-time 1 --measurement-time 3`.
//! `-- --test` (CI smoke run) uses a 10k-task plan instead of 100k.

use std::collections::HashMap as StdHashMap;
use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use kleene::{
    AdmittedPath, AgentId, AppBuildPlan, ModuleName, Plan, PlannedTask, Spec, TaskId, TaskKind,
};
use petgraph::graph::{DiGraph, NodeIndex};

/// Tasks per module: a module lane (for every other module), two persistence tasks (merged
/// by consolidation), four models, four services, three pages, a config and an auth task.
const MODULE_SHAPE: [&str; 16] = [
    "module",
    "persistence",
    "persistence",
    "model",
    "model",
    "model",
    "model",
    "service",
    "service",
    "service",
    "service",
    "page",
    "page",
    "page",
    "config",
    "auth",
];

/// A small deterministic generator (xorshift64*), so every run benches the same plan.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
    }
}

/// A plan of about `tasks` tasks: half the modules have no module lane (normalisation
/// synthesises them), every persistence pair is merged, and each service, page, config and
/// auth task has explicit edges to earlier work (other modules' services and models), so
/// that explicit plus normalised edges come to about three per task.
fn generate(tasks: usize) -> AppBuildPlan {
    let modules = tasks / MODULE_SHAPE.len();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let agent = AgentId::new("Agent").unwrap();
    let mut out = Vec::with_capacity(tasks);
    for m in 0..modules {
        let module = ModuleName::new(format!("m{m}")).unwrap();
        for (k, lane) in MODULE_SHAPE.iter().enumerate() {
            if *lane == "module" && m % 2 == 1 {
                continue;
            }
            let kind = match *lane {
                "module" => TaskKind::Module {
                    module: module.clone(),
                },
                "persistence" => TaskKind::Persistence {
                    module: module.clone(),
                },
                "model" => TaskKind::Model {
                    module: module.clone(),
                },
                "service" => TaskKind::Service {
                    module: module.clone(),
                },
                "page" => TaskKind::Page {
                    module: module.clone(),
                },
                "config" => TaskKind::Config {
                    module: Some(module.clone()),
                },
                _ => TaskKind::Auth {
                    module: Some(module.clone()),
                },
            };
            let id = TaskId::new(format!("m{m}_{lane}_{k}")).unwrap();
            let mut task = PlannedTask::new(id, kind, agent.clone(), Spec::new(*lane));
            task.owned_paths
                .push(AdmittedPath::admit(&format!("app/m{m}/{lane}_{k}.py")).unwrap());
            if m > 0 && matches!(*lane, "service" | "page" | "config" | "auth") {
                // Depend on models and services of earlier modules: forward edges only.
                for _ in 0..2 {
                    let other = rng.below(m);
                    let target = if rng.below(2) == 0 { 3 } else { 7 };
                    let pick = target + rng.below(4);
                    let dep = format!("m{other}_{}_{pick}", MODULE_SHAPE[pick]);
                    task.depends_on.push(TaskId::new(dep).unwrap());
                }
            }
            out.push(task);
        }
    }
    // Input order carries no meaning; reverse it so nothing benefits from it.
    out.reverse();
    AppBuildPlan::new(out)
}

fn kleene_pipeline(plan: AppBuildPlan) -> kleene::ValidatedPlan {
    Plan::draft(plan)
        .normalize()
        .consolidate()
        .unwrap()
        .validate()
        .unwrap()
}

/// The baseline: index the ids with std's `HashMap`, build the `DiGraph`, `toposort`.
fn petgraph_toposort(tasks: &[PlannedTask]) -> Vec<NodeIndex> {
    let mut graph = DiGraph::<(), ()>::with_capacity(tasks.len(), tasks.len() * 3);
    let mut index = StdHashMap::with_capacity(tasks.len());
    for t in tasks {
        index.insert(t.id.as_str(), graph.add_node(()));
    }
    for t in tasks {
        let to = index[t.id.as_str()];
        for d in &t.depends_on {
            graph.add_edge(index[d.as_str()], to, ());
        }
    }
    petgraph::algo::toposort(&graph, None).unwrap()
}

/// The same baseline with the id index on foldhash, as kleene uses.
fn petgraph_toposort_foldhash(tasks: &[PlannedTask]) -> Vec<NodeIndex> {
    let mut graph = DiGraph::<(), ()>::with_capacity(tasks.len(), tasks.len() * 3);
    let mut index: foldhash::HashMap<&str, NodeIndex> =
        foldhash::HashMap::with_capacity_and_hasher(tasks.len(), Default::default());
    for t in tasks {
        index.insert(t.id.as_str(), graph.add_node(()));
    }
    for t in tasks {
        let to = index[t.id.as_str()];
        for d in &t.depends_on {
            graph.add_edge(index[d.as_str()], to, ());
        }
    }
    petgraph::algo::toposort(&graph, None).unwrap()
}

/// Resident memory in KiB from `/proc/self/status` (Linux); `None` elsewhere.
fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Resets the peak-RSS mark (Linux `clear_refs` 5); returns whether it worked.
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Peak extra resident memory of one run of `f` on a fresh copy of `plan`, in bytes per
/// task, and the memory still held by its result.
fn memory_per_task<T>(
    plan: &AppBuildPlan,
    f: impl FnOnce(AppBuildPlan) -> T,
) -> Option<(f64, f64)> {
    let input = plan.clone();
    let n = input.tasks.len() as f64;
    let base = status_kib("VmRSS:")?;
    if !reset_peak() {
        return None;
    }
    let result = f(input);
    let peak = status_kib("VmHWM:")?;
    let held = status_kib("VmRSS:")?;
    drop(black_box(result));
    Some((
        (peak.saturating_sub(base) * 1024) as f64 / n,
        (held.saturating_sub(base) * 1024) as f64 / n,
    ))
}

/// The fastest of a few timed runs of each stage, to show where the time goes.
fn stage_breakdown(plan: &AppBuildPlan, runs: usize) {
    use std::time::{Duration, Instant};
    let mut best = [Duration::MAX; 4];
    for _ in 0..runs {
        let input = plan.clone();
        let t0 = Instant::now();
        let normalized = Plan::draft(input).normalize();
        let t1 = Instant::now();
        let consolidated = normalized.consolidate().unwrap();
        let t2 = Instant::now();
        let validated = consolidated.validate().unwrap();
        let t3 = Instant::now();
        drop(black_box(validated));
        let t4 = Instant::now();
        for (b, d) in best.iter_mut().zip([t1 - t0, t2 - t1, t3 - t2, t4 - t3]) {
            *b = (*b).min(d);
        }
    }
    eprintln!(
        "plan bench: fastest stages: normalize {:?}, validate + consolidate {:?}, validate + build {:?}, drop {:?}",
        best[0], best[1], best[2], best[3]
    );
}

fn smoke_run() -> bool {
    std::env::args().any(|a| a == "--test")
}

fn bench(c: &mut Criterion) {
    let size = if smoke_run() { 10_000 } else { 100_000 };
    let plan = generate(size);
    let prepared = Plan::draft(plan.clone())
        .normalize()
        .consolidate()
        .unwrap()
        .into_app_build_plan();
    let edges: usize = prepared.tasks.iter().map(|t| t.depends_on.len()).sum();
    eprintln!(
        "plan bench: {} tasks in, {} after normalisation and consolidation, {edges} edges",
        plan.tasks.len(),
        prepared.tasks.len()
    );
    // Memory first, before other runs leave freed memory behind that the allocator reuses.
    if let Some((peak, held)) = memory_per_task(&plan, kleene_pipeline) {
        eprintln!(
            "plan bench: kleene pipeline peak {peak:.0} B/task above the input, result holds {held:.0} B/task"
        );
    }
    if let Some((peak, _)) = memory_per_task(&prepared, |p| petgraph_toposort(&p.tasks)) {
        eprintln!("plan bench: petgraph baseline peak {peak:.0} B/task above the input");
    }
    stage_breakdown(&plan, if smoke_run() { 1 } else { 5 });

    let mut group = c.benchmark_group("plan");
    group.sample_size(10);
    group.bench_function("kleene normalize+consolidate+validate", |b| {
        b.iter_batched(|| plan.clone(), kleene_pipeline, BatchSize::LargeInput)
    });
    group.bench_function("petgraph build+toposort (std HashMap)", |b| {
        b.iter(|| petgraph_toposort(black_box(&prepared.tasks)))
    });
    group.bench_function("petgraph build+toposort (foldhash)", |b| {
        b.iter(|| petgraph_toposort_foldhash(black_box(&prepared.tasks)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
