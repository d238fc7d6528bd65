//! Plan pipeline (normalise + consolidate + validate) against the bare petgraph baseline
//! (build the same graph from the same string ids, run `petgraph::algo::toposort`). Memory
//! per task is measured by `benches/plan_memory.rs`, so that its counting allocator does not
//! slow these timings.
//!
//! Run: `cargo bench --bench plan -- --warm-up-time 1 --measurement-time 3`; with the filter
//! `fastest` (which names no criterion bench) only the stage breakdown and the fastest-of-15
//! ratio run.
//! `-- --test` (CI smoke run) uses a 10k-task plan instead of 100k.

use std::collections::HashMap as StdHashMap;
use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use kleene::{
    AppBuildPlan,
    plan::{Plan, PlannedTask},
};
use petgraph::graph::{DiGraph, NodeIndex};

#[path = "common/workload.rs"]
mod workload;
use workload::generate;

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

/// The fastest of `runs` alternating runs of the pipeline and the baseline, and their
/// ratio: on a shared, noisy machine the fastest run of each is the least disturbed one, and
/// alternating exposes both to the same load.
fn fastest_ratio(plan: &AppBuildPlan, prepared: &[PlannedTask], runs: usize) {
    use std::time::{Duration, Instant};
    let (mut kleene, mut baseline) = (Duration::MAX, Duration::MAX);
    for _ in 0..runs {
        let input = plan.clone();
        let t0 = Instant::now();
        let validated = kleene_pipeline(input);
        kleene = kleene.min(t0.elapsed());
        drop(black_box(validated));
        let t0 = Instant::now();
        black_box(petgraph_toposort(black_box(prepared)));
        baseline = baseline.min(t0.elapsed());
    }
    eprintln!(
        "plan bench: fastest of {runs}: kleene {kleene:?}, petgraph (std HashMap) {baseline:?}, ratio {:.2}",
        kleene.as_secs_f64() / baseline.as_secs_f64()
    );
    // One line for benches/all.sh's table: bench, ratio, target.
    println!(
        "result: plan pipeline, {} tasks / petgraph build + toposort (fastest of {runs})|{:.2}|2",
        plan.tasks.len(),
        kleene.as_secs_f64() / baseline.as_secs_f64()
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
    stage_breakdown(&plan, if smoke_run() { 1 } else { 5 });
    fastest_ratio(&plan, &prepared.tasks, if smoke_run() { 1 } else { 15 });

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
