//! Batch executor benches: executor overhead per task against a bare loop, journal commit cost
//! against journal size, durable commit against a bare append + fdatasync, and fold/resume
//! against bare decode + checksum. Each compares against a baseline measured in the same run.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::hint::black_box;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kleene::ValidatedPlan;
use kleene::batch::{
    Batch, BatchEvidence, Candidate, EvidenceEvent, EvidenceJournal, FileJournal, MemoryJournal,
    Worker, WorkerCall, WorkerFailure,
};
use kleene::checkpoint;
use kleene::{AgentId, AppBuildPlan, ChannelId, Plan, PlannedTask, Spec, TaskId, TaskKind};

/// The worker both the executor and the bare loop call: it proposes an empty candidate.
struct Noop;

impl Noop {
    fn work(&mut self, task: &PlannedTask, prerequisites: usize) -> Candidate {
        black_box((task, prerequisites));
        Candidate::default()
    }
}

impl Worker for Noop {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Candidate, WorkerFailure> {
        Ok(self.work(call.task(), call.prerequisites().len()))
    }
}

/// `n` tasks, each after its predecessor (and every tenth also after the one five back).
fn plan(n: usize) -> ValidatedPlan {
    let tasks = (0..n)
        .map(|i| {
            let mut t = PlannedTask::new(
                TaskId::new(format!("t{i:06}")).unwrap(),
                TaskKind::Config { module: None },
                AgentId::new("ConfigAgent").unwrap(),
                Spec::new("noop"),
            );
            if i > 0 {
                t = t.after(TaskId::new(format!("t{:06}", i - 1)).unwrap());
            }
            if i >= 5 && i % 10 == 0 {
                t = t.after(TaskId::new(format!("t{:06}", i - 5)).unwrap());
            }
            t
        })
        .collect();
    Plan::draft(AppBuildPlan::new(tasks))
        .normalize()
        .consolidate()
        .unwrap()
        .validate()
        .unwrap()
}

fn bare_loop(plan: &ValidatedPlan, worker: &mut Noop) -> HashMap<TaskId, Candidate> {
    let mut outputs: HashMap<TaskId, Candidate> = HashMap::with_capacity(plan.len());
    for id in plan.topological_order() {
        let task = plan.task(id).unwrap();
        let prerequisites: Vec<&Candidate> = plan
            .prerequisites(id)
            .into_iter()
            .filter_map(|p| outputs.get(p))
            .collect();
        let candidate = worker.work(task, prerequisites.len());
        outputs.insert(id.clone(), candidate);
    }
    outputs
}

fn executor_overhead(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch/executor");
    group.sample_size(10);
    for n in [1_000usize, 10_000, 100_000] {
        let plan = plan(n);
        let channel = ChannelId::new("bench").unwrap();
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("bare_loop", n), &plan, |b, plan| {
            b.iter(|| black_box(bare_loop(plan, &mut Noop)))
        });
        group.bench_with_input(BenchmarkId::new("executor", n), &plan, |b, plan| {
            let batch = Batch::new(plan, channel.clone());
            b.iter_batched(
                MemoryJournal::default,
                |mut journal| black_box(batch.dispatch(&mut Noop, &(), &mut journal).unwrap()),
                BatchSize::LargeInput,
            )
        });
        group.bench_with_input(
            BenchmarkId::new("executor_group_commit", n),
            &plan,
            |b, plan| {
                let batch = Batch::new(plan, channel.clone()).with_group_commit(true);
                b.iter_batched(
                    MemoryJournal::default,
                    |mut journal| black_box(batch.dispatch(&mut Noop, &(), &mut journal).unwrap()),
                    BatchSize::LargeInput,
                )
            },
        );
    }
    group.finish();
}

/// The events of a finished batch of `tasks` tasks (2 per task, plus the start).
fn batch_events(tasks: usize) -> Vec<EvidenceEvent> {
    let plan = plan(tasks);
    let channel = ChannelId::new("bench").unwrap();
    let mut journal = MemoryJournal::default();
    Batch::new(&plan, channel.clone())
        .with_compaction_after(u64::MAX)
        .dispatch(&mut Noop, &(), &mut journal)
        .unwrap();
    journal.load(&channel).unwrap().unwrap().events
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kleene-bench-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

fn encode_all(events: &[EvidenceEvent]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in events {
        out.extend(checkpoint::encode(e).unwrap());
    }
    out
}

fn journal_commit(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch/journal_commit");
    group.sample_size(20);
    let events = batch_events(50_000);
    let next = events[1].clone();
    let record = checkpoint::encode(&next).unwrap();
    let channel = ChannelId::new("bench").unwrap();
    for size in [1_000usize, 100_000] {
        let dir = scratch_dir(&format!("commit-{size}"));
        let mut journal = FileJournal::open(&dir).unwrap();
        // Pre-fill the journal with `size` events, written once.
        fs::write(
            journal.path_for(&channel),
            encode_all(&events[..size.min(events.len())]),
        )
        .unwrap();
        group.bench_function(BenchmarkId::new("durable_append", size), |b| {
            b.iter(|| {
                journal
                    .append(&channel, std::slice::from_ref(&next))
                    .unwrap()
            })
        });
        if size == 100_000 {
            // The same bytes, appended and fdatasync'd by hand.
            let path = dir.join("bare.journal");
            fs::write(&path, encode_all(&events[..size.min(events.len())])).unwrap();
            let mut file = OpenOptions::new().append(true).open(&path).unwrap();
            group.bench_function(BenchmarkId::new("bare_append_fdatasync", size), |b| {
                b.iter(|| {
                    file.write_all(&record).unwrap();
                    file.sync_data().unwrap();
                })
            });
            let eight: Vec<EvidenceEvent> = events[1..9].to_vec();
            group.bench_function(BenchmarkId::new("group_commit_8_events", size), |b| {
                b.iter(|| journal.append(&channel, &eight).unwrap())
            });
        }
        drop(journal);
        let _ = fs::remove_dir_all(&dir);
    }
    group.finish();
}

fn fold_resume(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch/fold_resume");
    group.sample_size(10);
    let events = batch_events(50_000);
    assert!(events.len() > 100_000);
    let channel = ChannelId::new("bench").unwrap();
    let dir = scratch_dir("fold");
    let mut journal = FileJournal::open(&dir).unwrap();
    fs::write(journal.path_for(&channel), encode_all(&events)).unwrap();
    let path = journal.path_for(&channel);
    group.throughput(Throughput::Elements(events.len() as u64));
    group.bench_function(
        BenchmarkId::new("bare_decode_checksum", events.len()),
        |b| {
            b.iter(|| {
                let bytes = fs::read(&path).unwrap();
                let mut at = 0;
                let mut decoded = Vec::with_capacity(events.len());
                while at < bytes.len() {
                    let len = checkpoint::HEADER_LEN
                        + u64::from_le_bytes(bytes[at + 11..at + 19].try_into().unwrap()) as usize;
                    decoded
                        .push(checkpoint::decode::<EvidenceEvent>(&bytes[at..at + len]).unwrap());
                    at += len;
                }
                black_box(decoded)
            })
        },
    );
    group.bench_function(BenchmarkId::new("load_and_fold", events.len()), |b| {
        b.iter(|| {
            let evidence: BatchEvidence = journal
                .load(&channel)
                .unwrap()
                .unwrap()
                .into_evidence()
                .unwrap();
            black_box(evidence)
        })
    });
    group.finish();
    drop(journal);
    let _ = fs::remove_dir_all(&dir);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = executor_overhead, journal_commit, fold_resume
}
criterion_main!(benches);
