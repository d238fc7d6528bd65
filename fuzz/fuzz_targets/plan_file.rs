//! Plan files as the CLI reads them: an `AppBuildPlan` document whose task objects also carry
//! `run`, `checks`, `fix` and `timeout_secs`.
//!
//! The loader lives in the binary (`src/bin/kleene/planfile.rs`), which no library API
//! reaches, so its source is compiled in here as a module. When the library gains a plan-file
//! loader, call that instead and drop the `#[path]` module.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

#[allow(dead_code, unreachable_pub)]
#[path = "../../src/bin/kleene/planfile.rs"]
mod planfile;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match planfile::load_text(Path::new("plan.json"), text) {
        Ok(loaded) => {
            let _ = loaded.plan.digest();
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
