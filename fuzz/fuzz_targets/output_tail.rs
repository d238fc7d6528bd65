//! `OutputTail::capture` over arbitrary stdout/stderr bytes and bounds, checking what its
//! docs promise: the bound is never exceeded, a stream that fits is kept verbatim, and what
//! is elided plus what is kept accounts for the whole decoded stream.
//!
//! Input: two little-endian `u16` bounds, a `u16` split point, then the bytes (stdout before
//! the split, stderr after).
#![no_main]

use kleene::closure::{verdict::OutputTail, verdict::TailLimits};
use libfuzzer_sys::fuzz_target;

fn check(name: &str, raw: &[u8], kept: &str, elided: u64, bound: usize) {
    let decoded = String::from_utf8_lossy(raw);
    assert!(
        kept.len() <= bound,
        "{name}: kept {} bytes over a bound of {bound}",
        kept.len()
    );
    if decoded.len() <= bound {
        assert_eq!(
            kept, decoded,
            "{name}: a stream that fits is not kept verbatim"
        );
        assert_eq!(elided, 0, "{name}: a stream that fits reports elided bytes");
    } else {
        assert!(
            elided > 0 && elided <= decoded.len() as u64,
            "{name}: {elided} bytes elided of {}",
            decoded.len()
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((head, bytes)) = data.split_first_chunk::<6>() else {
        return;
    };
    let stdout_bound = usize::from(u16::from_le_bytes([head[0], head[1]]));
    let stderr_bound = usize::from(u16::from_le_bytes([head[2], head[3]]));
    let split = usize::from(u16::from_le_bytes([head[4], head[5]])).min(bytes.len());
    let (stdout, stderr) = bytes.split_at(split);
    let limits = TailLimits {
        stdout: stdout_bound,
        stderr: stderr_bound,
    };
    let tail = OutputTail::capture(stdout, stderr, limits);
    check(
        "stdout",
        stdout,
        tail.stdout(),
        tail.stdout_elided(),
        stdout_bound,
    );
    check(
        "stderr",
        stderr,
        tail.stderr(),
        tail.stderr_elided(),
        stderr_bound,
    );
    let _ = tail.render();
});
