//! The async driver's overhead: 10k tasks of an async worker that yields once, driven by
//! `Batch::run_async` over a memory journal, against the same futures under a bare
//! `join_all` with no kleene, on the same single-threaded executor in the same run; the
//! sequential driver with a sync worker doing the same (what the machine itself costs); and
//! `join_all` plus the two blake3 digests kleene must make per task (the call's input, the
//! candidate it settles with), the floor no driver of this design goes under.

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::task::Poll;

use blake3::hazmat::HasherExt;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures_executor::block_on;
use futures_util::future::join_all;
use kleene::batch::{
    AsyncWorker, AsyncWorkerCall, Batch, Candidate, MemoryJournal, Proposal, Worker, WorkerCall,
    WorkerFailure,
};
use kleene::{ValidatedPlan, id::ChannelId, plan::PlannedTask};

#[path = "common/independent.rs"]
mod independent;
use independent::independent_plan;

const TASKS: usize = 10_000;

/// Pending once (waking itself at once), as `tokio::task::yield_now` without the runtime.
async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await;
}

/// The work both sides await: yield once, then propose an empty candidate.
async fn work(task: &PlannedTask) -> Proposal {
    yield_now().await;
    black_box(task);
    Candidate::default().into()
}

/// The worker kleene calls.
struct YieldsOnce;

impl AsyncWorker for YieldsOnce {
    async fn call(&mut self, call: &AsyncWorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        Ok(work(call.task()).await)
    }
}

/// The sequential driver's worker: the same candidate, without the yield.
struct Noop;

impl Worker for Noop {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        black_box(call.task());
        Ok(Candidate::default().into())
    }
}

/// `join_all` of the same futures plus the two blake3 digests kleene makes for every task:
/// the floor no driver of this design goes under.
fn join_all_and_digests(tasks: &[&PlannedTask]) -> impl Sized {
    let input_key = blake3::hazmat::hash_derive_key_context("kleene batch task input v1");
    let candidate_key = blake3::hazmat::hash_derive_key_context("kleene batch candidate v1");
    // A task's input is about 64 bytes (plan digest, inputs, id, prerequisites); an empty
    // candidate is its file count.
    let inputs: Vec<blake3::Hash> = (0..tasks.len() as u64)
        .map(|i| {
            let mut input = [7u8; 64];
            input[..8].copy_from_slice(&i.to_le_bytes());
            blake3::Hasher::new_from_context_key(&input_key)
                .update(&input)
                .finalize()
        })
        .collect();
    let proposals = block_on(join_all(tasks.iter().map(|t| work(t))));
    let candidates: Vec<blake3::Hash> = proposals
        .iter()
        .map(|_| {
            blake3::Hasher::new_from_context_key(&candidate_key)
                .update(&0u64.to_le_bytes())
                .finalize()
        })
        .collect();
    (inputs, proposals, candidates)
}

fn run_async(plan: &ValidatedPlan, channel: &ChannelId, slots: NonZeroUsize) -> impl Sized {
    let batch = Batch::new(plan, channel.clone());
    let mut journal = MemoryJournal::default();
    let outcome = block_on(batch.run_async(slots, |_| YieldsOnce, &(), &mut journal)).unwrap();
    assert_eq!(outcome.evidence.accepted_outputs().count(), TASKS);
    outcome
}

fn sequential_run(plan: &ValidatedPlan, channel: &ChannelId) -> impl Sized {
    let batch = Batch::new(plan, channel.clone());
    batch
        .run(&mut Noop, &(), &mut MemoryJournal::default())
        .unwrap()
}

/// The fastest of `runs` alternating runs of `join_all`, the floor, the sequential driver and
/// `run_async` with a slot per task, and their ratios: on a shared, noisy machine the fastest
/// run of each is the least disturbed one, and alternating exposes all four to the same load.
/// Prints `result:` lines for `benches/all.sh`.
fn fastest_ratios(plan: &ValidatedPlan, tasks: &[&PlannedTask], channel: &ChannelId, runs: usize) {
    use std::time::{Duration, Instant};
    let slots = NonZeroUsize::new(tasks.len()).unwrap();
    let mut best = [Duration::MAX; 4];
    let time = |best: &mut Duration, f: &mut dyn FnMut()| {
        let t0 = Instant::now();
        f();
        *best = (*best).min(t0.elapsed());
    };
    for _ in 0..runs {
        let [join, floor, sequential, asynchronous] = &mut best;
        time(join, &mut || {
            black_box(block_on(join_all(tasks.iter().map(|t| work(t)))));
        });
        time(floor, &mut || {
            black_box(join_all_and_digests(tasks));
        });
        time(sequential, &mut || {
            black_box(sequential_run(plan, channel));
        });
        time(asynchronous, &mut || {
            black_box(run_async(plan, channel, slots));
        });
    }
    let [join, floor, sequential, asynchronous] = best.map(|d| d.as_secs_f64());
    let n = tasks.len();
    eprintln!(
        "batch_async: fastest of {runs}, {n} tasks: join_all {:.2} ms, the floor {:.2} ms \
         ({:.2}x join_all), sequential {:.2} ms, run_async (jobs = {n}) {:.2} ms",
        join * 1e3,
        floor * 1e3,
        floor / join,
        sequential * 1e3,
        asynchronous * 1e3
    );
    println!(
        "result: run_async, {n} yielding tasks, jobs = {n} / the floor (fastest of {runs})|{:.2}|2.5",
        asynchronous / floor
    );
    println!(
        "result: the sequential driver, {n} no-op tasks / join_all (fastest of {runs}; the floor alone is {:.2})|{:.2}|2",
        floor / join,
        sequential / join
    );
}

fn smoke_run() -> bool {
    std::env::args().any(|a| a == "--test")
}

fn async_driver(c: &mut Criterion) {
    let plan = independent_plan(TASKS);
    let tasks: Vec<&PlannedTask> = plan.tasks().collect();
    let channel = ChannelId::new("bench").unwrap();
    fastest_ratios(&plan, &tasks, &channel, if smoke_run() { 1 } else { 15 });
    let mut group = c.benchmark_group("async_driver");
    group.throughput(Throughput::Elements(TASKS as u64));
    group.sample_size(20);
    group.bench_function("join_all", |b| {
        b.iter(|| black_box(block_on(join_all(tasks.iter().map(|t| work(t))))))
    });
    group.bench_function("join_all_and_digests", |b| {
        b.iter(|| black_box(join_all_and_digests(&tasks)))
    });
    for jobs in [TASKS, 64] {
        let slots = NonZeroUsize::new(jobs).unwrap();
        group.bench_with_input(BenchmarkId::new("run_async", jobs), &slots, |b, &slots| {
            b.iter(|| black_box(run_async(&plan, &channel, slots)))
        });
    }
    group.bench_function("sequential_run", |b| {
        b.iter(|| black_box(sequential_run(&plan, &channel)))
    });
    group.finish();
}

criterion_group!(benches, async_driver);
criterion_main!(benches);
