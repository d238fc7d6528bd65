//! A cache entry's JSON (`CachedResult::from_json`), read with and without a MAC key. An
//! entry that decodes re-encodes, sealed or not, to an entry that decodes to the same
//! result; with a key, only an entry sealed by that key decodes.
#![no_main]

use kleene::batch::cache::CachedResult;
use libfuzzer_sys::fuzz_target;

const KEY: [u8; 32] = [7; 32];

fuzz_target!(|data: &[u8]| {
    if let Ok(result) = CachedResult::from_json(data, None) {
        let text = result.to_json(None);
        let again = CachedResult::from_json(text.as_bytes(), None).expect("its encoding decodes");
        assert_eq!(again, result, "an entry changed in a round trip");
        let sealed = result.to_json(Some(&KEY));
        assert_eq!(CachedResult::from_json(sealed.as_bytes(), Some(&KEY)).ok(), Some(result));
    }
    if let Ok(result) = CachedResult::from_json(data, Some(&KEY)) {
        assert!(CachedResult::from_json(data, None).is_ok_and(|r| r == result));
    }
});
