//! Task checkpoints (`TASK`): the current payload, the version-1 migration, unsupported
//! versions and the envelope parser. A decoded task must re-encode stably.
#![no_main]

use kleene::Task;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kleene_fuzz::assert_envelope_layout();
    let bytes = kleene_fuzz::checkpoint_bytes::<Task>(data);
    let _ = kleene_fuzz::decode_and_round_trip::<Task>(&bytes);
});
