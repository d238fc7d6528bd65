//! Acceptance digest of a large snapshot against raw blake3 over the same bytes, and the
//! throughput of export + verify.
//!
//! The full run uses a 256 MiB snapshot in 10 000 files; `cargo bench -- --test` (the CI
//! smoke run) uses 1 MiB in 100 files so it stays fast. Build with `--features parallel` to
//! measure the multi-core manifest against the same single-threaded baseline.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kleene::{AdmittedPath, FileManifest};

/// Whether criterion runs in test mode (`--test`): each bench once, so keep setup cheap.
fn smoke() -> bool {
    std::env::args().any(|a| a == "--test")
}

/// (total bytes, file count) of the snapshot under test.
fn size() -> (usize, usize) {
    if smoke() {
        (1 << 20, 100)
    } else {
        (256 << 20, 10_000)
    }
}

/// Deterministic pseudo-random bytes (xorshift), so no run compresses better than another.
fn bytes(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Splits `data` into `count` files of varied sizes (±50 % around the mean) under a few
/// directories, as a generated app would be.
fn files(data: &[u8], count: usize) -> BTreeMap<AdmittedPath, &[u8]> {
    let mean = data.len() / count;
    let mut out = BTreeMap::new();
    let mut start = 0;
    for i in 0..count {
        let len = if i + 1 == count {
            data.len() - start
        } else {
            mean / 2 + (i * 7919) % mean
        };
        let len = len.min(data.len() - start);
        let path = AdmittedPath::admit(&format!("app/module_{}/file_{i:05}.py", i % 37)).unwrap();
        out.insert(path, &data[start..start + len]);
        start += len;
    }
    out
}

fn digest(c: &mut Criterion) {
    let (total, count) = size();
    let data = bytes(total);
    let files = files(&data, count);
    let covered: usize = files.values().map(|f| f.len()).sum();
    assert_eq!(covered, data.len());

    let mut group = c.benchmark_group("acceptance_digest");
    group.throughput(Throughput::Bytes(total as u64));
    group.sample_size(10);
    group.bench_function("raw_blake3_contiguous", |b| {
        b.iter(|| black_box(blake3::hash(black_box(&data))))
    });
    group.bench_function("raw_blake3_per_file", |b| {
        b.iter(|| {
            for f in files.values() {
                black_box(blake3::hash(black_box(f)));
            }
        })
    });
    let name = if cfg!(feature = "parallel") {
        "file_manifest_parallel"
    } else {
        "file_manifest"
    };
    group.bench_function(name, |b| {
        b.iter(|| black_box(FileManifest::compute(black_box(&files))))
    });
    group.finish();
}

criterion_group!(benches, digest);
criterion_main!(benches);
