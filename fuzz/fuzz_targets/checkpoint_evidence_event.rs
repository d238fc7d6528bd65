//! Journal records (`BEVT`, one evidence event each). A decoded event must re-encode stably
//! and fold (or be refused) without panicking.
#![no_main]

use kleene::batch::{BatchEvidence, evidence::EvidenceEvent};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kleene_fuzz::assert_envelope_layout();
    let bytes = kleene_fuzz::checkpoint_bytes::<EvidenceEvent>(data);
    if let Some(event) = kleene_fuzz::decode_and_round_trip::<EvidenceEvent>(&bytes) {
        let _ = BatchEvidence::fold([event]);
    }
});
