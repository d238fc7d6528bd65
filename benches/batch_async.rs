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
use kleene::{id::ChannelId, plan::PlannedTask};

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

fn async_driver(c: &mut Criterion) {
    let plan = independent_plan(TASKS);
    let tasks: Vec<&PlannedTask> = plan.tasks().collect();
    let channel = ChannelId::new("bench").unwrap();
    let mut group = c.benchmark_group("async_driver");
    group.throughput(Throughput::Elements(TASKS as u64));
    group.sample_size(20);
    group.bench_function("join_all", |b| {
        b.iter(|| black_box(block_on(join_all(tasks.iter().map(|t| work(t))))))
    });
    group.bench_function("join_all_and_digests", |b| {
        let input_key = blake3::hazmat::hash_derive_key_context("kleene batch task input v1");
        let candidate_key = blake3::hazmat::hash_derive_key_context("kleene batch candidate v1");
        b.iter(|| {
            // A task's input is about 64 bytes (plan digest, inputs, id, prerequisites); an
            // empty candidate is its file count.
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
            black_box((inputs, proposals, candidates))
        })
    });
    for jobs in [TASKS, 64] {
        let slots = NonZeroUsize::new(jobs).unwrap();
        group.bench_with_input(BenchmarkId::new("run_async", jobs), &slots, |b, &slots| {
            b.iter(|| {
                let batch = Batch::new(&plan, channel.clone());
                let mut journal = MemoryJournal::default();
                let run = batch.run_async(slots, |_| YieldsOnce, &(), &mut journal);
                let outcome = block_on(run).unwrap();
                assert_eq!(outcome.evidence.accepted_outputs().count(), TASKS);
                black_box(outcome)
            })
        });
    }
    group.bench_function("sequential_run", |b| {
        b.iter(|| {
            let batch = Batch::new(&plan, channel.clone());
            let outcome = batch
                .run(&mut Noop, &(), &mut MemoryJournal::default())
                .unwrap();
            black_box(outcome)
        })
    });
    group.finish();
}

criterion_group!(benches, async_driver);
criterion_main!(benches);
