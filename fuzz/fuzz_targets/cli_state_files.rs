//! The CLI's own state files: `run.json` and the lines of `closures.jsonl`, of every format
//! version (`cli/src/formats.rs`, compiled in here as a module: no library API reaches
//! the binary's decoders).
//!
//! Checks: decoding never panics; what decodes re-encodes in the current format and decodes
//! again to the same value; a closure line re-encodes in the format it declared.
#![no_main]

use kleene::id::TaskId;
use libfuzzer_sys::fuzz_target;

#[allow(dead_code, unreachable_pub)]
#[path = "../../cli/src/formats.rs"]
mod formats;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let root = std::path::Path::new("/state");
    if let Ok(formats::RunFile { info, .. }) = formats::decode_run_file(text, root) {
        let again = formats::decode_run_file(&formats::encode_run_file(&info, root), root)
            .expect("a run file kleene wrote decodes")
            .info;
        // NaN timeouts compare unequal to themselves; everything else must come back.
        if !info.timeout_secs.is_nan() {
            assert_eq!(again, info, "a run file changed in a round trip");
        }
    }
    if let Ok(line) = formats::decode_closure_line(text) {
        let Ok(task) = TaskId::new(line.task.clone()) else {
            return;
        };
        let current = formats::encode_closure_line(&task, line.call, &line.record)
            .expect("a decoded record encodes");
        let back = formats::decode_closure_line(
            std::str::from_utf8(&current).expect("kleene writes UTF-8"),
        )
        .expect("a closure line kleene wrote decodes");
        assert_eq!((back.call, &back.task), (line.call, &line.task));
        assert_eq!(back.record.digest(), line.record.digest());
        formats::encode_closure_line_as(line.format, &task, line.call, &line.record)
            .expect("a decoded line encodes in its own format");
    }
});
