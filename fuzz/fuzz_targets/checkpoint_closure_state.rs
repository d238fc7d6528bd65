//! Persisted closure machines (`CLST`) and `Closure::restore`, which re-checks them. A state
//! that restores must come back unchanged from the restored machine, and restore again.
#![no_main]

use kleene::{closure::ClosureState, closure::Closure};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kleene_fuzz::assert_envelope_layout();
    let bytes = kleene_fuzz::checkpoint_bytes::<ClosureState>(data);
    let Some(state) = kleene_fuzz::decode_and_round_trip::<ClosureState>(&bytes) else {
        return;
    };
    if let Ok(closure) = Closure::restore(state.clone()) {
        let persisted = closure.state();
        assert_eq!(
            persisted, state,
            "a restored closure persists another state"
        );
        assert!(
            Closure::restore(persisted).is_ok(),
            "a restored closure's own state does not restore"
        );
    }
});
