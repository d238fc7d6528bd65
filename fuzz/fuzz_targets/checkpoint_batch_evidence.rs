//! Journal snapshots (`EVID`, folded batch evidence). A decoded snapshot must re-encode
//! stably, and summarising it or taking its snapshot of files must not panic.
#![no_main]

use kleene::batch::BatchEvidence;
use kleene::snapshot::Snapshot;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kleene_fuzz::assert_envelope_layout();
    let bytes = kleene_fuzz::checkpoint_bytes::<BatchEvidence>(data);
    if let Some(evidence) = kleene_fuzz::decode_and_round_trip::<BatchEvidence>(&bytes) {
        let _ = evidence.summary();
        let _ = Snapshot::from_evidence(&evidence);
    }
});
