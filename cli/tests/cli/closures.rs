//! Closure records as evidence, end to end: the run-wide fix budget comes from the journal
//! (a deleted closure log gives nothing back), and a changed closure record is named by
//! `kleene audit` and `kleene verify` through the closures the acceptance record binds.

use std::path::Path;
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tempfile::TempDir;

use crate::cli::basics::{kleene, module, task, text, write_plan};

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
            // An interrupted call is replayed without spending this one call.
            "retry_limit": 0,
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
    let status = text(&crate::cli::basics::status(tmp.path()).stdout);
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

/// A run of `module` and `app_model` (fixed once), not yet accepted.
fn finished_run(dir: &Path) {
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
    let out = kleene(dir)
        .args(["run", plan.to_str().unwrap(), "--state", "st"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// The record digest `kleene accept` prints, once it accepted.
fn accepted_digest(dir: &Path) -> String {
    let out = kleene(dir)
        .args(["accept", "--state", "st", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let event: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    event["record_digest"].as_str().unwrap().to_owned()
}

/// `accept` sealed a damaged closure log: the record then bound audit trails the state
/// directory could no longer show. Each damage is now refused by `accept` and `export`,
/// naming the task, and nothing is written; swapped lines verify, since a record is found
/// by its task and call, not by its place.
#[test]
fn accept_and_export_refuse_a_damaged_closure_log_and_write_nothing() {
    let tmp = TempDir::new().unwrap();
    finished_run(tmp.path());
    let log = tmp.path().join("st/closures.jsonl");
    let original = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = original.lines().collect();
    assert!(lines.len() >= 2, "{original}");
    let clean = accepted_digest(tmp.path());
    std::fs::remove_file(tmp.path().join("st/acceptance.json")).unwrap();

    let joined = |lines: &[&str]| lines.iter().map(|l| format!("{l}\n")).collect::<String>();
    let fixed = lines.iter().position(|l| l.contains("app_model")).unwrap();
    let mut flipped = original.clone().into_bytes();
    let middle = original.find("app_model").unwrap() + 40;
    flipped[middle] ^= 0x01;
    let damages: Vec<(&str, Vec<u8>)> = vec![
        (
            "a dropped line",
            joined(
                &lines
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| i != fixed)
                    .map(|(_, l)| *l)
                    .collect::<Vec<_>>(),
            )
            .into_bytes(),
        ),
        (
            "an edited text",
            original
                .replacen("expected good", "expected gold", 1)
                .into_bytes(),
        ),
        ("a flipped byte", flipped),
        (
            "a truncated last line",
            original.as_bytes()[..original.len() - 20].to_vec(),
        ),
    ];
    for (damage, bytes) in &damages {
        assert_ne!(bytes.as_slice(), original.as_bytes(), "{damage}");
        std::fs::write(&log, bytes).unwrap();
        for args in [
            vec!["accept", "--state", "st"],
            vec!["export", "out.tar", "--state", "st"],
        ] {
            let out = kleene(tmp.path()).args(&args).output().unwrap();
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{damage}, {args:?}: {stderr}");
            assert!(
                stderr.contains("closures.jsonl") && stderr.contains("app_"),
                "{damage}, {args:?}: {stderr}"
            );
            assert!(stderr.contains("nothing was written"), "{stderr}");
            assert!(
                !tmp.path().join("st/acceptance.json").exists(),
                "{damage}, {args:?}: a record was sealed"
            );
            assert!(
                !tmp.path().join("out.tar").exists(),
                "{damage}, {args:?}: an archive was written"
            );
        }
    }
    // Line order carries no meaning: the same records in another order seal the same record.
    let mut swapped = lines.clone();
    swapped.swap(0, 1);
    std::fs::write(&log, joined(&swapped)).unwrap();
    assert_eq!(accepted_digest(tmp.path()), clean);
    std::fs::write(&log, &original).unwrap();
    assert_eq!(accepted_digest(tmp.path()), clean);
}
