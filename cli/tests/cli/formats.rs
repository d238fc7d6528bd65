//! The state directory's own files across versions: a run made by an earlier kleene (its
//! `run.json`, `closures.jsonl` and journal, committed under `tests/fixtures/cli_state_v0`)
//! is still read, resumed, audited, accepted and exported to the same bytes.

use std::path::Path;

use tempfile::TempDir;

use crate::cli::basics::{kleene, text};

/// The fixture's acceptance record digest, pinned: any change to how a stored run is read,
/// or to what the record binds, shows here first.
const V0_RECORD: &str = "2beef446e3d9b1262a3e612c1a93542965a5da9377aaaf3d62f63cabe8db70c5";
/// The blake3 of its export archive.
const V0_ARCHIVE_BLAKE3: &str = "2952b4aa791a49dc63f63ed69bd8ce607be4bf63c78a09387a6289b770e3a5c8";

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A copy of the state directory an earlier kleene left (the demo, accepted).
pub(crate) fn v0_state(tmp: &TempDir) -> std::path::PathBuf {
    let fixture = crate::cli::basics::in_repository("tests/fixtures/cli_state_v0");
    let state = tmp.path().join("st");
    copy_dir(&fixture, &state);
    state
}

#[test]
fn a_run_left_by_an_earlier_kleene_is_read_audited_accepted_and_exported() {
    let tmp = TempDir::new().unwrap();
    let state = v0_state(&tmp);
    let st = state.to_str().unwrap();
    let status = kleene(tmp.path())
        .args(["status", "--state", st])
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(0), "{}", text(&status.stderr));
    assert!(
        text(&status.stdout).contains("4 accepted, 0 failed"),
        "{}",
        text(&status.stdout)
    );
    let audit = kleene(tmp.path())
        .args(["audit", "--state", st])
        .output()
        .unwrap();
    assert_eq!(audit.status.code(), Some(0), "{}", text(&audit.stderr));
    assert!(
        text(&audit.stdout).contains("billing_service_fix_1"),
        "{}",
        text(&audit.stdout)
    );
    let accept = kleene(tmp.path())
        .args(["accept", "--state", st])
        .output()
        .unwrap();
    assert_eq!(accept.status.code(), Some(0), "{}", text(&accept.stderr));
    assert!(
        text(&accept.stdout).contains(V0_RECORD),
        "{}",
        text(&accept.stdout)
    );
    let archive = tmp.path().join("demo.tar");
    let export = kleene(tmp.path())
        .args(["export", "--state", st, archive.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(export.status.code(), Some(0), "{}", text(&export.stderr));
    let bytes = std::fs::read(&archive).unwrap();
    assert_eq!(blake3::hash(&bytes).to_hex().as_str(), V0_ARCHIVE_BLAKE3);
}

#[test]
fn a_state_directory_from_a_newer_kleene_is_refused_by_name_and_left_alone() {
    let tmp = TempDir::new().unwrap();
    let state = v0_state(&tmp);
    let run_file = state.join("run.json");
    let newer = std::fs::read_to_string(&run_file)
        .unwrap()
        .replacen('{', "{\n  \"format\": 4,", 1);
    std::fs::write(&run_file, &newer).unwrap();
    for command in ["status", "audit", "accept", "resume"] {
        let out = kleene(tmp.path())
            .args([command, "--state", state.to_str().unwrap()])
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {stderr}");
        assert!(
            stderr.contains("run.json format 4, written by a newer kleene")
                && stderr.contains("reads formats up to 3"),
            "{command}: {stderr}"
        );
        assert_eq!(
            std::fs::read_to_string(&run_file).unwrap(),
            newer,
            "{command}"
        );
    }
}

#[test]
fn a_new_run_writes_the_current_formats() {
    let tmp = TempDir::new().unwrap();
    let out = crate::cli::basics::run(tmp.path(), &crate::cli::basics::demo_plan());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let run_file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("st/run.json")).unwrap())
            .unwrap();
    assert_eq!(run_file["format"], 3);
    // The default workspace is named inside the state directory, so the directory can move.
    assert_eq!(run_file["workspace"], "workspace");
    let log = std::fs::read_to_string(tmp.path().join("st/closures.jsonl")).unwrap();
    assert_eq!(log.lines().count(), 4);
    for line in log.lines() {
        assert!(line.starts_with("{\"format\":1,"), "{line}");
    }
    let status = kleene(tmp.path())
        .args(["--json", "status", "--state", "st"])
        .output()
        .unwrap();
    let result: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(result["format"], 1, "{result}");
}

/// A state directory an earlier kleene left names even its default workspace by absolute
/// path; moved since, it has a `workspace` directory of its own, and that is the one used.
#[test]
fn a_moved_run_of_an_earlier_kleene_uses_its_own_workspace() {
    let tmp = TempDir::new().unwrap();
    let state = v0_state(&tmp);
    let st = state.to_str().unwrap();
    let status = |dir: &Path| {
        let out = kleene(dir)
            .args(["status", "--state", st])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    // Without one it ran with a workspace elsewhere: the saved path stands.
    assert!(
        status(tmp.path()).contains("workspace /tmp/kfx/st/workspace"),
        "{}",
        status(tmp.path())
    );
    std::fs::create_dir(state.join("workspace")).unwrap();
    let own = format!("workspace {}", state.join("workspace").display());
    let said = status(tmp.path());
    assert!(said.contains(&own), "{said}");
    assert!(
        said.contains("2 accepted files are not in the workspace yet (first: billing/)"),
        "{said}"
    );
    // Read, never rewritten: run.json keeps the format and path it was written with.
    assert_eq!(
        std::fs::read(state.join("run.json")).unwrap(),
        std::fs::read(crate::cli::basics::in_repository(
            "tests/fixtures/cli_state_v0/run.json"
        ))
        .unwrap()
    );
}
