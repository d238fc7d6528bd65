//! Closure record checkpoints (`CLSR`). A decoded record must re-encode stably, and its
//! audit chain and outcome must be readable without panicking.
#![no_main]

use kleene::closure::ClosureRecord;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kleene_fuzz::assert_envelope_layout();
    let bytes = kleene_fuzz::checkpoint_bytes::<ClosureRecord>(data);
    if let Some(record) = kleene_fuzz::decode_and_round_trip::<ClosureRecord>(&bytes) {
        let _ = record.audit().verify();
        let _ = record.outcome().resolved_depth();
    }
});
