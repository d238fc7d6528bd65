//! Plan files as `kleene::shell` reads them: an `AppBuildPlan` document whose task objects
//! also carry `run`, `checks`, `fix`, `timeout_secs` and `scratch`.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match kleene::shell::ShellPlan::from_text(Path::new("plan.json"), text, None) {
        Ok(loaded) => {
            let _ = loaded.plan().digest();
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
