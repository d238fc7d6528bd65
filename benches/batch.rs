//! Batch executor benches: executor overhead per task against a bare loop, journal commit cost
//! against journal size, durable commit against a bare append + fdatasync, and fold/resume
//! against bare decode + checksum, and the threaded driver on 1,000 one-millisecond calls against
//! eight bare threads sleeping the same naps. Each compares against a baseline measured in the
//! same run.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::hint::black_box;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kleene::ValidatedPlan;
use kleene::batch::{
    Batch, BatchEvidence, Candidate, FileJournal, MemoryJournal, Proposal, Worker, WorkerCall,
    WorkerFailure, evidence::EvidenceEvent, journal::EvidenceJournal,
};
use kleene::checkpoint;
use kleene::{
    AppBuildPlan,
    closure::Spec,
    id::{AgentId, ChannelId, TaskId},
    plan::{Plan, PlannedTask, TaskKind},
};

#[path = "common/independent.rs"]
mod independent;
use independent::independent_plan;

/// The worker both the executor and the bare loop call: it proposes an empty candidate.
struct Noop;

impl Noop {
    fn work(&mut self, task: &PlannedTask, prerequisites: usize) -> Candidate {
        black_box((task, prerequisites));
        Candidate::default()
    }
}

impl Worker for Noop {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        Ok(self.work(call.task(), call.prerequisites().len()).into())
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

/// Four ways to commit the same event, interleaved: each timed iteration also runs the
/// other three untimed, so the disk's fsync latency (which drifts by 10× on a shared machine)
/// weighs on all of them alike and their ratios stay meaningful.
struct Committers {
    small: FileJournal,
    large: FileJournal,
    bare: std::fs::File,
    bare_small: std::fs::File,
    channel: ChannelId,
    event: EvidenceEvent,
    record: Vec<u8>,
    dirs: Vec<PathBuf>,
}

impl Committers {
    fn new(events: &[EvidenceEvent]) -> Self {
        let channel = ChannelId::new("bench").unwrap();
        let open = |name: &str, size: usize| {
            let dir = scratch_dir(name);
            let journal = FileJournal::open(&dir).unwrap();
            // Pre-fill the journal with `size` events, written once.
            fs::write(journal.path_for(&channel), encode_all(&events[..size])).unwrap();
            (dir, journal)
        };
        let (small_dir, small) = open("commit-1k", 1_000);
        let (large_dir, large) = open("commit-100k", 100_000);
        // The same bytes as the large journal, appended and fdatasync'd by hand.
        let path = large_dir.join("bare.journal");
        fs::write(&path, encode_all(&events[..100_000])).unwrap();
        let bare = OpenOptions::new().append(true).open(&path).unwrap();
        let path = small_dir.join("bare.journal");
        fs::write(&path, encode_all(&events[..1_000])).unwrap();
        let bare_small = OpenOptions::new().append(true).open(&path).unwrap();
        let event = events[1].clone();
        let record = checkpoint::encode(&event).unwrap();
        Self {
            small,
            large,
            bare,
            bare_small,
            channel,
            event,
            record,
            dirs: vec![small_dir, large_dir],
        }
    }

    fn run(&mut self, which: usize) {
        match which {
            0 => self
                .small
                .append(&self.channel, std::slice::from_ref(&self.event))
                .unwrap(),
            1 => self
                .large
                .append(&self.channel, std::slice::from_ref(&self.event))
                .unwrap(),
            2 => {
                self.bare.write_all(&self.record).unwrap();
                self.bare.sync_data().unwrap();
            }
            _ => {
                self.bare_small.write_all(&self.record).unwrap();
                self.bare_small.sync_data().unwrap();
            }
        }
    }

    fn timed(&mut self, which: usize, iters: u64) -> Duration {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            for other in (0..4).filter(|&o| o != which) {
                self.run(other);
            }
            let start = Instant::now();
            self.run(which);
            total += start.elapsed();
        }
        total
    }
}

impl Drop for Committers {
    fn drop(&mut self) {
        for dir in &self.dirs {
            let _ = fs::remove_dir_all(dir);
        }
    }
}

/// Fsync latency on a shared disk drifts by 10× between criterion's measurement windows, so
/// the ratios are also measured paired: each round times all four commits back to back (in a
/// rotating order), and the medians of the per-round ratios are printed.
fn paired_commit_ratios(committers: &mut Committers, rounds: usize) {
    let mut small_large = Vec::with_capacity(rounds);
    let mut durable_bare = Vec::with_capacity(rounds);
    let mut bare_small_large = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let mut t = [Duration::ZERO; 4];
        for k in 0..4 {
            let which = (round + k) % 4;
            t[which] = committers.timed(which, 1);
        }
        let r = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
        small_large.push(r(t[1], t[0]));
        durable_bare.push(r(t[1], t[2]));
        bare_small_large.push(r(t[2], t[3]));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    eprintln!(
        "batch/journal_commit paired medians over {rounds} rounds: durable 100k/1k = {:.2}, \
         durable/bare at 100k = {:.2}, bare 100k/1k = {:.2}",
        median(&mut small_large),
        median(&mut durable_bare),
        median(&mut bare_small_large)
    );
}

fn journal_commit(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch/journal_commit");
    group.sample_size(20);
    let events = batch_events(50_000);
    let mut committers = Committers::new(&events);
    for (which, name) in [
        (0, "durable_append/1000"),
        (1, "durable_append/100000"),
        (2, "bare_append_fdatasync/100000"),
        (3, "bare_append_fdatasync/1000"),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| committers.timed(which, iters))
        });
    }
    if !std::env::args().any(|a| a == "--test") {
        paired_commit_ratios(&mut committers, 200);
    }
    let eight: Vec<EvidenceEvent> = events[1..9].to_vec();
    group.bench_function("group_commit_8_events/100000", |b| {
        b.iter(|| {
            committers
                .large
                .append(&committers.channel, &eight)
                .unwrap()
        })
    });
    group.finish();
}

fn fold_resume(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch/fold_resume");
    group.sample_size(10);
    let events = batch_events(50_000);
    assert!(events.len() > 100_000);
    let channel = ChannelId::new("bench").unwrap();
    let dir = scratch_dir("fold");
    let journal = FileJournal::open(&dir).unwrap();
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

/// The worker of the threaded bench: each call sleeps `NAP`, as a task that waits on a tool.
struct Nap;

const NAP: Duration = Duration::from_millis(1);

impl Worker for Nap {
    fn call(&mut self, _call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        std::thread::sleep(NAP);
        Ok(Candidate::default().into())
    }
}

/// 1,000 one-millisecond calls on 8 slots: the threaded driver against the bound, which is
/// 8 bare threads each sleeping through its eighth of the naps (what sleeping alone costs on
/// this machine; the ideal is 125 ms).
fn threaded_naps(c: &mut Criterion) {
    const TASKS: usize = 1_000;
    const JOBS: usize = 8;
    let mut group = c.benchmark_group("batch/threaded_naps");
    group.sample_size(10);
    let plan = independent_plan(TASKS);
    group.bench_function(BenchmarkId::new("bound_8_threads", TASKS), |b| {
        b.iter(|| {
            std::thread::scope(|s| {
                for _ in 0..JOBS {
                    s.spawn(|| {
                        for _ in 0..TASKS / JOBS {
                            std::thread::sleep(NAP);
                        }
                    });
                }
            })
        })
    });
    let batch = Batch::new(&plan, ChannelId::new("bench").unwrap()).with_group_commit(true);
    let jobs = std::num::NonZeroUsize::new(JOBS).unwrap();
    group.bench_function(BenchmarkId::new("run_threaded_jobs_8", TASKS), |b| {
        b.iter_batched(
            MemoryJournal::default,
            |mut journal| {
                let outcome = batch
                    .run_threaded(jobs, |_| Nap, &(), &mut journal)
                    .unwrap();
                assert!(outcome.evidence.summary().is_complete());
                black_box(outcome)
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = executor_overhead, journal_commit, fold_resume, threaded_naps
}
criterion_main!(benches);
