//! The contained host's socket: arbitrary bytes read as kleene's end reads them (a hello,
//! then answers) and as the host's end reads them (requests, each maybe followed by a stdin
//! frame), through `kleene::testing::process::decode_host_frames`. Input: the bytes.
//!
//! Checks: neither end panics; each decodes no more frames than the bytes can hold (every
//! frame is a four-byte length and then its bytes), so nothing is made of a length field
//! alone.
#![no_main]

use kleene::testing::process::decode_host_frames;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (answers, requests) = decode_host_frames(data);
    // The smallest JSON value a frame can hold is two bytes (`{}` or `""`).
    let most = data.len() / 6;
    assert!(answers <= most, "{answers} frames from {} bytes", data.len());
    assert!(requests <= most, "{requests} requests from {} bytes", data.len());
});
