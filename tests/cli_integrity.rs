//! End-to-end: the acceptance record in the state directory is checked whole by `verify`
//! and `export`, and with a key the record and the in-toto statement are signed and
//! `verify --public-key` checks the signature.
//!
//! Regression: editing a file digest, a length, removing an entry or renaming a task in
//! `.kleene/acceptance.json` used to pass `verify` and `export` (only `record_digest` was
//! read).

use std::path::Path;

use serde_json::Value;
use tempfile::TempDir;

use crate::cli::{demo_plan, kleene, run, text};

/// The demo, run, accepted and exported to `out.tar` in `dir` (state in `st`).
fn accepted_demo(dir: &Path) {
    assert!(run(dir, &demo_plan()).status.success());
    kleene(dir)
        .args(["accept", "--state", "st"])
        .assert()
        .success();
    kleene(dir)
        .args(["export", "out.tar", "--state", "st"])
        .assert()
        .success();
}

fn edit(json: &str, edit: impl FnOnce(&mut Value)) -> String {
    let mut v: Value = serde_json::from_str(json).unwrap();
    edit(&mut v);
    serde_json::to_string_pretty(&v).unwrap()
}

#[test]
fn an_edited_acceptance_record_fails_verify_and_export_naming_what_differs() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path();
    accepted_demo(dir);
    let record_path = dir.join("st/acceptance.json");
    let pristine = std::fs::read_to_string(&record_path).unwrap();
    let v: Value = serde_json::from_str(&pristine).unwrap();
    let first_file = v["files"]["entries"][0]["path"]
        .as_str()
        .unwrap()
        .to_owned();
    let first_task = v["task_results"][0]["task"].as_str().unwrap().to_owned();
    let forged_task = format!("{first_task}_forged");
    let cases: Vec<(&str, String, &str, String)> = vec![
        (
            "a file digest",
            edit(&pristine, |v| {
                v["files"]["entries"][0]["blake3"] = "0".repeat(64).into()
            }),
            "files.digest",
            format!("file {first_file}: {first_file} changed"),
        ),
        (
            "a length",
            edit(&pristine, |v| {
                v["files"]["entries"][0]["len"] = 1_000_000.into()
            }),
            "files.digest",
            format!("file {first_file}: {first_file} changed"),
        ),
        (
            "a removed entry",
            edit(&pristine, |v| {
                v["files"]["entries"].as_array_mut().unwrap().remove(0);
            }),
            "files.digest",
            format!("file {first_file}: {first_file} is missing"),
        ),
        (
            "a renamed task",
            edit(&pristine, |v| {
                v["task_results"][0]["task"] = forged_task.clone().into()
            }),
            "task_results_digest",
            format!("task {first_task}: missing from the stored record"),
        ),
    ];
    for (what, tampered, field, named) in cases {
        std::fs::write(&record_path, &tampered).unwrap();
        let out = kleene(dir)
            .args(["verify", "out.tar", "--state", "st"])
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{what}: verify passed: {stderr}"
        );
        assert!(
            stderr.contains("acceptance.json") && stderr.contains(field),
            "{what}: {stderr}"
        );

        let out = kleene(dir)
            .args(["export", "again.tar", "--state", "st"])
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{what}: export passed: {stderr}"
        );
        assert!(
            stderr.contains(field) && stderr.contains(&named),
            "{what}: {stderr}"
        );
        assert!(!dir.join("again.tar").exists(), "{what}");
        // The refused record is left as it was found: nothing rewrites evidence silently.
        assert_eq!(std::fs::read_to_string(&record_path).unwrap(), tampered);
    }
    std::fs::write(&record_path, &pristine).unwrap();
    kleene(dir)
        .args(["verify", "out.tar", "--state", "st"])
        .assert()
        .success();
}
