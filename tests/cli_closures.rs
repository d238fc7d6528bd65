//! Closure records as evidence, end to end: the run-wide fix budget comes from the journal
//! (a deleted closure log gives nothing back), and a changed closure record is named by
//! `kleene audit` and `kleene verify` through the closures the acceptance record binds.

use std::path::Path;
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tempfile::TempDir;

use crate::cli::{kleene, module, task, text, write_plan};

/// A model task that fails its check until its fixer runs.
fn repairable(id: &str, file: &str, run: &str) -> serde_json::Value {
    task(
        id,
        "model",
        &[file],
        &["app_module"],
        json!({
            "run": run,
            "checks": [{"id": "good", "command": format!("grep -q good {file} || {{ echo 'expected good in {file}'; exit 1; }}")}],
            "fix": format!("echo good > {file}"),
            // Room for a replay of an interrupted call.
            "retry_limit": 1,
        }),
    )
}

/// Regression (issue 12): a resume restored the run's fix budget from `closures.jsonl`, so
/// a run whose log was lost (never synced, or deleted) got its budget back. The fix of
/// `app_model_a` is in the journal; with the log deleted, `app_model_b` still finds the one
/// fix of the run spent.
#[test]
fn a_deleted_closure_log_gives_no_fix_back_on_resume() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(
        tmp.path(),
        vec![
            module(),
            repairable(
                "app_model_a",
                "app/a.txt",
                "mkdir -p app; echo bad > app/a.txt",
            ),
            repairable(
                "app_model_b",
                "app/b.txt",
                // The first call waits to be killed; the replay writes a failing file.
                "mkdir -p app; if [ -f \"$KLEENE_CACHE_DIR/b_started\" ]; then echo bad > app/b.txt; else touch \"$KLEENE_CACHE_DIR/b_started\"; sleep 30; fi",
            ),
        ],
    );
    let mut child = StdCommand::new(env!("CARGO_BIN_EXE_kleene"))
        .current_dir(tmp.path())
        .args([
            "run",
            plan.to_str().unwrap(),
            "--state",
            "st",
            "--max-fixes",
            "1",
            // One call at a time, in the plan's order: app_model_a's fix is drawn and
            // journaled before app_model_b starts, so the kill cannot come first.
            "-j",
            "1",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let flag = tmp.path().join("st/cache/b_started");
    let started = Instant::now();
    while !flag.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "app_model_b never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A power cut: no handler runs, nothing is flushed.
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_file(tmp.path().join("st/closures.jsonl")).unwrap();
    let out = kleene(tmp.path())
        .args(["resume", "--state", "st", "--kill-stale"])
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("recovery_exhausted (the run's 1 fix attempt(s) are used)"),
        "{stdout}"
    );
    assert!(!stdout.contains("spawned app_model_b_fix_1"), "{stdout}");
    let status = text(&crate::cli::status(tmp.path()).stdout);
    assert!(status.contains("1 fix"), "{status}");
}

fn accepted_run(dir: &Path) {
    let plan = write_plan(
        dir,
        vec![
            module(),
            repairable(
                "app_model",
                "app/a.txt",
                "mkdir -p app; echo bad > app/a.txt",
            ),
        ],
    );
    for args in [
        vec!["run", plan.to_str().unwrap(), "--state", "st"],
        vec!["accept", "--state", "st"],
        vec!["export", "out.tar", "--state", "st"],
    ] {
        let out = kleene(dir).args(&args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

/// Any changed byte of the closure log is named: by `kleene audit` through the journal and
/// the acceptance record, and by `kleene verify` through the closures the exported record
/// binds (each line here is the closure of an accepted call).
#[test]
fn a_tampered_closure_record_is_named_by_audit_and_verify() {
    let tmp = TempDir::new().unwrap();
    accepted_run(tmp.path());
    let log = tmp.path().join("st/closures.jsonl");
    let original = std::fs::read(&log).unwrap();
    let record: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("st/acceptance.json")).unwrap(),
    )
    .unwrap();
    let bound = record["task_results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["closure"]["record_digest"].is_string())
        .count();
    assert_eq!(bound, 2, "both tasks' closures are bound: {record}");
    for args in [
        vec!["audit", "--state", "st"],
        vec!["verify", "out.tar", "--state", "st"],
    ] {
        let out = kleene(tmp.path()).args(&args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    // Every byte position in turn would take minutes of processes; a stride through the
    // whole log (plus its first and last bytes) covers every field of both records.
    let stride = (original.len() / 40).max(1);
    let positions = (0..original.len())
        .step_by(stride)
        .chain([original.len() - 1]);
    for at in positions {
        let mut tampered = original.clone();
        tampered[at] = if tampered[at] == b'7' { b'8' } else { b'7' };
        std::fs::write(&log, &tampered).unwrap();
        for args in [
            vec!["audit", "--state", "st"],
            vec!["verify", "out.tar", "--state", "st"],
        ] {
            let out = kleene(tmp.path()).args(&args).output().unwrap();
            let stderr = text(&out.stderr);
            assert_ne!(
                out.status.code(),
                Some(0),
                "byte {at} changed, {args:?} passed"
            );
            assert!(
                stderr.contains("closures.jsonl line") || stderr.contains("call 1"),
                "byte {at} changed, {args:?} did not name the record: {stderr}"
            );
        }
    }
    std::fs::write(&log, &original).unwrap();
}
