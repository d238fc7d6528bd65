//! A closure's delta store (`ClosureDelta::decode_log`) and `Closure::restore_from_deltas`,
//! which verifies and folds it. Input: `kleene_fuzz::delta_log_input` (payloads sealed as
//! `CLDT` envelopes, or the store verbatim).
//!
//! Checks: decoding never panics and spans no more than the store; a closure that restores
//! gives its own history back, and that history restores to the same state.
#![no_main]

use kleene::{closure::machine::ClosureDelta, closure::Closure};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kleene_fuzz::assert_envelope_layout();
    let store = kleene_fuzz::delta_log_input(data);
    let Ok((deltas, whole)) = ClosureDelta::decode_log(&store) else {
        return;
    };
    assert!(whole <= store.len(), "the whole deltas span more than the store");
    let Ok(closure) = Closure::restore_from_deltas(deltas.clone()) else {
        return;
    };
    let history = closure.history();
    assert_eq!(history, deltas, "a restored closure tells another history");
    let again = Closure::restore_from_deltas(history).expect("a closure's own history restores");
    assert_eq!(again.state(), closure.state(), "its history restores another closure");
});
