//! The manifest of a plan's files as a state directory keeps it and a Restate submission
//! carries it (`PlanFilesManifest`, JSON: path → digest), then the plan file bound to it.
//! A manifest that decodes re-encodes to one that decodes to the same files, and binding it
//! never panics, whatever the paths and digests.
#![no_main]

use std::path::Path;

use kleene::shell::{PlanFiles, PlanFilesManifest, ShellPlan};
use libfuzzer_sys::fuzz_target;

const PLAN: &str = r#"{"tasks": [{"id": "a", "owner": "sh", "spec": {"intent": "a"},
  "run": "sh \"$KLEENE_PLAN_DIR/a.sh\""}]}"#;

fuzz_target!(|data: &[u8]| {
    let Ok(manifest) = serde_json::from_slice::<PlanFilesManifest>(data) else {
        return;
    };
    let files = PlanFiles::from_manifest(manifest.clone());
    let text = serde_json::to_string(&files.manifest()).expect("a manifest encodes");
    let again: PlanFilesManifest = serde_json::from_str(&text).expect("its encoding decodes");
    assert_eq!(again, manifest, "a manifest changed in a round trip");
    let bound = ShellPlan::from_text(Path::new("plan.json"), PLAN, Some(files))
        .expect("any manifest binds to a valid plan");
    let _ = bound.plan().digest();
});
