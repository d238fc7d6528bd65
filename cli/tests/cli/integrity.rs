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

use crate::cli::basics::{demo_plan, kleene, run, text};

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

/// A run may take its signing key from the environment; no command it runs sees where it
/// lives.
#[test]
fn a_command_never_sees_the_signing_key_s_variable() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path();
    // Kept apart from the plan's files, which must not hold a secret.
    let keys = TempDir::new().unwrap();
    kleene(keys.path())
        .args(["keygen", "--out", "keys"])
        .assert()
        .success();
    let plan = crate::cli::basics::write_plan(
        dir,
        vec![crate::cli::basics::task(
            "app_config",
            "config",
            &["config.txt"],
            &[],
            serde_json::json!({
                "run": "test -z \"${KLEENE_SIGNING_KEY+set}\" && echo clean > config.txt"
            }),
        )],
    );
    let out = kleene(dir)
        .env("KLEENE_SIGNING_KEY", keys.path().join("keys/kleene.key"))
        .args(["run", plan.to_str().unwrap(), "--state", "st"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(dir.join("st/workspace/config.txt")).unwrap(),
        "clean\n"
    );
}

#[test]
fn keygen_sign_export_and_verify_with_a_public_key() {
    use std::os::unix::fs::PermissionsExt as _;
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path();
    kleene(dir)
        .args(["keygen", "--out", "keys"])
        .assert()
        .success();
    let mode = |p: &str| std::fs::metadata(dir.join(p)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode("keys/kleene.key"), 0o600);
    let secret = std::fs::read(dir.join("keys/kleene.key")).unwrap();
    let out = kleene(dir)
        .args(["keygen", "--out", "keys"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("already exists"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read(dir.join("keys/kleene.key")).unwrap(), secret);

    // Signing vouches for the evidence, so the run seals its journal with the same key.
    kleene(dir)
        .args(["run", demo_plan().to_str().unwrap(), "--state", "st"])
        .args(["--signing-key", "keys/kleene.key"])
        .assert()
        .success();
    kleene(dir)
        .args([
            "accept",
            "--state",
            "st",
            "--signing-key",
            "keys/kleene.key",
        ])
        .assert()
        .success();
    assert!(dir.join("st/acceptance.dsse.json").exists());
    // The key may also come from the environment.
    kleene(dir)
        .env("KLEENE_SIGNING_KEY", "keys/kleene.key")
        .args(["export", "out.tar", "--state", "st"])
        .assert()
        .success();
    let sidecar = dir.join("out.tar.intoto.jsonl");
    assert!(sidecar.exists());

    // The verifier needs no state directory: only the archive, its envelope and the key.
    let verifier = TempDir::new().unwrap();
    let v = verifier.path();
    for f in ["out.tar", "out.tar.intoto.jsonl", "keys/kleene.pub"] {
        std::fs::copy(dir.join(f), v.join(Path::new(f).file_name().unwrap())).unwrap();
    }
    let ok = kleene(v)
        .args(["verify", "out.tar", "--public-key", "kleene.pub"])
        .output()
        .unwrap();
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    assert!(
        text(&ok.stdout).contains("signed by key"),
        "{}",
        text(&ok.stdout)
    );

    // Another key's public half is refused.
    kleene(v)
        .args(["keygen", "--out", "other"])
        .assert()
        .success();
    let out = kleene(v)
        .args(["verify", "out.tar", "--public-key", "other/kleene.pub"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no signature by key"),
        "{}",
        text(&out.stderr)
    );

    // An altered statement is refused.
    let line = std::fs::read_to_string(v.join("out.tar.intoto.jsonl")).unwrap();
    let mut env: Value = serde_json::from_str(&line).unwrap();
    env["payloadType"] = "application/vnd.other+json".into();
    std::fs::write(v.join("forged.jsonl"), env.to_string()).unwrap();
    let out = kleene(v)
        .args([
            "verify",
            "out.tar",
            "--public-key",
            "kleene.pub",
            "--signature",
            "forged.jsonl",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("altered"),
        "{}",
        text(&out.stderr)
    );

    // A missing signature is bad input, naming the file it looked for.
    std::fs::rename(v.join("out.tar"), v.join("copy.tar")).unwrap();
    let out = kleene(v)
        .args(["verify", "copy.tar", "--public-key", "kleene.pub"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("copy.tar.intoto.jsonl"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_re_sealed_record_is_caught_by_its_signature() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path();
    kleene(dir)
        .args(["keygen", "--out", "keys"])
        .assert()
        .success();
    kleene(dir)
        .args(["run", demo_plan().to_str().unwrap(), "--state", "st"])
        .args(["--signing-key", "keys/kleene.key"])
        .assert()
        .success();
    kleene(dir)
        .args([
            "accept",
            "--state",
            "st",
            "--signing-key",
            "keys/kleene.key",
        ])
        .assert()
        .success();
    // Someone who can write the state directory replaces the signed record with another
    // self-consistent one (the record of another run): its digests all recompute, its
    // signature does not exist.
    let out = kleene(dir)
        .args([
            "run",
            &demo_plan().to_string_lossy(),
            "--state",
            "st2",
            "--channel",
            "other",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    kleene(dir)
        .args(["accept", "--state", "st2"])
        .assert()
        .success();
    let signed_record = std::fs::read(dir.join("st/acceptance.json")).unwrap();
    std::fs::copy(
        dir.join("st2/acceptance.json"),
        dir.join("st/acceptance.json"),
    )
    .unwrap();
    let out = kleene(dir)
        .args([
            "export",
            "out.tar",
            "--state",
            "st",
            "--signing-key",
            "keys/kleene.key",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("the record was replaced after it was signed"),
        "{}",
        text(&out.stderr)
    );
    std::fs::write(dir.join("st/acceptance.json"), signed_record).unwrap();

    // A record whose envelope is gone is not signed. (An unsigned accept cannot remove it
    // here: a journal sealed with a key cannot even be read without it.)
    let envelope = std::fs::read(dir.join("st/acceptance.dsse.json")).unwrap();
    let out = kleene(dir)
        .args(["accept", "--state", "st"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("sealed with a journal key"),
        "{}",
        text(&out.stderr)
    );
    std::fs::remove_file(dir.join("st/acceptance.dsse.json")).unwrap();
    let out = kleene(dir)
        .args([
            "export",
            "out.tar",
            "--state",
            "st",
            "--signing-key",
            "keys/kleene.key",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is not signed"),
        "{}",
        text(&out.stderr)
    );
    // A signature of another record does not vouch for this one.
    let mut record: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("st/acceptance.json")).unwrap())
            .unwrap();
    record["binding"]["crate_version"] = "9.9.9".into();
    let mut env: Value = serde_json::from_slice(&envelope).unwrap();
    env["payload"] =
        base64_encode(serde_json::to_string_pretty(&record).unwrap().as_bytes()).into();
    std::fs::write(dir.join("st/acceptance.dsse.json"), env.to_string()).unwrap();
    let out = kleene(dir)
        .args([
            "export",
            "out.tar",
            "--state",
            "st",
            "--signing-key",
            "keys/kleene.key",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("altered"),
        "{}",
        text(&out.stderr)
    );
    assert!(!dir.join("out.tar").exists());

    // A key inside the state directory is refused: whoever forges evidence could read it.
    std::fs::copy(dir.join("keys/kleene.key"), dir.join("st/kleene.key")).unwrap();
    let out = kleene(dir)
        .args(["accept", "--state", "st", "--signing-key", "st/kleene.key"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("inside the state directory"),
        "{}",
        text(&out.stderr)
    );
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
