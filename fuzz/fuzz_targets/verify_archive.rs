//! `verify_archive` over arbitrary tar bytes. The trusted digest is the `record_digest` the
//! archive's own record claims (when it has one), so a consistent forged record reaches every
//! check after the digest comparison; otherwise the zero digest.
#![no_main]

use kleene::{acceptance::verify_archive, id::Digest};
use libfuzzer_sys::fuzz_target;

/// The value of the first `"record_digest":"<64 hex>"` in `data`.
fn claimed_digest(data: &[u8]) -> Option<Digest> {
    const KEY: &[u8] = b"\"record_digest\":\"";
    let at = data.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let hex = std::str::from_utf8(data.get(at..at + 64)?).ok()?;
    hex.parse().ok()
}

fuzz_target!(|data: &[u8]| {
    let expected = claimed_digest(data).unwrap_or(Digest::from_bytes([0; 32]));
    match verify_archive(data, expected) {
        Ok(verified) => {
            let _ = verified.record_digest();
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
