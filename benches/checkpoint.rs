//! Checkpoint encode and decode throughput for a task carrying 10 prior failures, each with
//! a 4 KiB output-tail justification, against raw blake3 over the same bytes (the envelope
//! checksum alone is one blake3 pass, so it bounds what the codec can reach).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kleene::{
    Task, checkpoint,
    closure::{verdict::OutputTail, verdict::TailLimits},
};
use std::hint::black_box;

/// A 4 KiB justification made from real `cargo test` output with backtraces.
fn justification() -> String {
    let out = include_bytes!("../tests/fixtures/tails/cargo_bt.stdout");
    let mut j = OutputTail::capture(out, b"", TailLimits::default()).render();
    j.truncate(4096);
    while j.len() < 4096 {
        j.push('.');
    }
    j
}

/// A fix subtask at depth 10 with 10 attributed failures (built through JSON, the way a
/// persisted record arrives).
fn task() -> Task {
    let j = justification();
    let failures: Vec<_> = (0..10)
        .map(|attempt| {
            serde_json::json!({
                "attempt": attempt,
                "validator_id": "tests",
                "severity": "blocker",
                "justification": j,
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "id": "task_X_fix_10",
        "spec": {"intent": "fix the failing tests", "acceptance_criteria": ["cargo test passes"]},
        "depth": 10,
        "parent_task_ref": "task_X_fix_9",
        "root_task_ref": "task_X",
        "root_spec": {"intent": "add a /login route", "acceptance_criteria": ["GET /login is 200"]},
        "prior_failures": failures,
    }))
    .unwrap()
}

fn bench(c: &mut Criterion) {
    let task = task();
    let bytes = checkpoint::encode(&task).unwrap();
    assert_eq!(checkpoint::decode::<Task>(&bytes).unwrap(), task);

    let mut g = c.benchmark_group("checkpoint_task_10x4KiB");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("encode", |b| {
        b.iter(|| black_box(checkpoint::encode(black_box(&task)).unwrap()))
    });
    g.bench_function("decode", |b| {
        b.iter(|| black_box(checkpoint::decode::<Task>(black_box(&bytes)).unwrap()))
    });
    g.bench_function("blake3_baseline", |b| {
        b.iter(|| black_box(blake3::hash(black_box(&bytes))))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
