//! Peak heap memory per task of the plan pipeline and of the petgraph baseline, counted by a
//! global allocator (in its own bench binary so it does not slow the timed benches).
//!
//! Run: `cargo bench --bench plan_memory`; `-- --test` uses a 10k-task plan.

use kleene::{AppBuildPlan, plan::Plan};
use peak_alloc::PeakAlloc;
use petgraph::graph::{DiGraph, NodeIndex};

#[path = "common/workload.rs"]
mod workload;

#[global_allocator]
static ALLOCATOR: PeakAlloc = PeakAlloc;

/// Peak bytes allocated above the starting point while `f` runs, and bytes its result holds.
fn measure<T>(f: impl FnOnce() -> T) -> (usize, usize) {
    let start = ALLOCATOR.current_usage();
    ALLOCATOR.reset_peak_usage();
    let result = f();
    let peak = ALLOCATOR.peak_usage().saturating_sub(start);
    let held = ALLOCATOR.current_usage().saturating_sub(start);
    drop(result);
    (peak, held)
}

fn main() {
    let size = if std::env::args().any(|a| a == "--test") {
        10_000
    } else {
        100_000
    };
    let plan = workload::generate(size);
    let prepared: AppBuildPlan = Plan::draft(plan.clone())
        .normalize()
        .consolidate()
        .unwrap()
        .into_app_build_plan();
    let n = plan.tasks.len() as f64;

    // The input is moved into the pipeline; its copy is made before the measurement.
    let input = plan.clone();
    let start = ALLOCATOR.current_usage();
    ALLOCATOR.reset_peak_usage();
    let validated = Plan::draft(input)
        .normalize()
        .consolidate()
        .unwrap()
        .validate()
        .unwrap();
    let peak = ALLOCATOR.peak_usage().saturating_sub(start);
    let held = ALLOCATOR.current_usage().saturating_sub(start);
    drop(validated);
    println!(
        "plan memory: kleene pipeline peak {:.0} B/task above its input, the ValidatedPlan holds {:.0} B/task beyond it",
        peak as f64 / n,
        held as f64 / n
    );

    let (peak, _) = measure(|| {
        let mut graph = DiGraph::<(), ()>::with_capacity(prepared.tasks.len(), 0);
        let mut index = std::collections::HashMap::with_capacity(prepared.tasks.len());
        for t in &prepared.tasks {
            index.insert(t.id.as_str(), graph.add_node(()));
        }
        for t in &prepared.tasks {
            let to = index[t.id.as_str()];
            for d in &t.depends_on {
                graph.add_edge(index[d.as_str()], to, ());
            }
        }
        let order: Vec<NodeIndex> = petgraph::algo::toposort(&graph, None).unwrap();
        order.len()
    });
    println!(
        "plan memory: petgraph build+toposort peak {:.0} B/task",
        peak as f64 / n
    );
}
