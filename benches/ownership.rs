//! Ownership checks at scale (issue 10, defect 5): one task owning `n` files, checked
//! against an `n`-file candidate. They were quadratic (owned paths × candidate files): 4k /
//! 8k / 16k / 100k files took 1.9 s / 7.6 s / 30 s / 13 min in the CLI.
//!
//! - `validate`: normalise + consolidate + validate the one-task plan;
//! - `executor_dispatch`: the batch executor end to end on that plan with a worker that
//!   proposes the `n` files (built-in ownership check, candidate digest, journal), against
//!   `worker_only`, the worker's own cost (building the candidate);
//! - `owner_of_each_file`: `ValidatedPlan::owner_of` for every file, with the task owning
//!   each file, and with the task owning their directory;
//! - `unwritten_owned_paths`: "was every owned path written" over the same sets.
//!
//! Run: `cargo bench --bench ownership -- --warm-up-time 1 --measurement-time 3`.
//! `-- --test` (CI smoke run) uses 10k files instead of 100k.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use kleene::batch::{Batch, Candidate, MemoryJournal, Proposal, Worker, WorkerCall, WorkerFailure};
use kleene::{
    AppBuildPlan,
    closure::Spec,
    id::{AgentId, ChannelId, TaskId},
    plan::{AdmittedPath, PlannedTask, TaskKind},
};

fn files(n: usize) -> Vec<AdmittedPath> {
    (0..n)
        .map(|i| AdmittedPath::admit(&format!("out/d{:03}/f{i:06}.txt", i % 512)).unwrap())
        .collect()
}

fn task(owned: impl IntoIterator<Item = AdmittedPath>) -> PlannedTask {
    let mut t = PlannedTask::new(
        TaskId::new("gen").unwrap(),
        TaskKind::General,
        AgentId::new("sh").unwrap(),
        Spec::new("write the files"),
    );
    t.owned_paths = owned.into_iter().collect();
    t
}

struct Proposes(BTreeMap<AdmittedPath, Vec<u8>>);

impl Worker for Proposes {
    fn call(&mut self, _call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        Ok(Candidate::new(self.0.clone()).into())
    }
}

fn ownership(c: &mut Criterion) {
    let n = if std::env::args().any(|a| a == "--test") {
        10_000
    } else {
        100_000
    };
    let paths = files(n);
    let candidate: BTreeMap<AdmittedPath, Vec<u8>> =
        paths.iter().map(|p| (p.clone(), b"x\n".to_vec())).collect();
    let each_file = AppBuildPlan::new(vec![task(paths.iter().cloned())]);
    let directory = AppBuildPlan::new(vec![task([AdmittedPath::admit("out").unwrap()])])
        .validate()
        .unwrap();

    let mut group = c.benchmark_group(format!("ownership_{n}_files"));
    group.sample_size(10);
    group.bench_function("validate", |b| {
        b.iter_batched(
            || each_file.clone(),
            |plan| black_box(plan.validate().unwrap()),
            BatchSize::LargeInput,
        )
    });
    let validated = each_file.clone().validate().unwrap();
    let channel = ChannelId::new("bench").unwrap();
    group.bench_function("worker_only", |b| {
        b.iter(|| black_box(Candidate::new(candidate.clone())))
    });
    group.bench_function("executor_dispatch", |b| {
        let batch = Batch::new(&validated, channel.clone());
        let mut worker = Proposes(candidate.clone());
        b.iter_batched(
            MemoryJournal::default,
            |mut journal| {
                let evidence = batch.dispatch(&mut worker, &(), &mut journal).unwrap();
                assert_eq!(evidence.accepted_outputs().count(), 1);
                black_box(evidence)
            },
            BatchSize::LargeInput,
        )
    });
    group.bench_function("owner_of_each_file/owned_files", |b| {
        b.iter(|| {
            black_box(
                paths
                    .iter()
                    .filter(|p| validated.owner_of(p).is_some())
                    .count(),
            )
        })
    });
    group.bench_function("owner_of_each_file/owned_directory", |b| {
        b.iter(|| {
            black_box(
                paths
                    .iter()
                    .filter(|p| directory.owner_of(p).is_some())
                    .count(),
            )
        })
    });
    let owner = &validated.to_app_build_plan().tasks[0];
    group.bench_function("unwritten_owned_paths", |b| {
        b.iter(|| {
            let missing = owner.unwritten_owned_paths(&candidate);
            assert!(missing.is_empty());
            black_box(missing.len())
        })
    });
    group.finish();
}

criterion_group!(benches, ownership);
criterion_main!(benches);
