//! `kleene worker`, `kleene restate …` and `kleene run --restate URL` hand the work to the
//! Restate adapter's binary with the arguments it takes (here a stand-in that prints them),
//! and say how to build the adapter when it is missing.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use crate::cli::basics::{demo_plan, kleene, text};

/// A stand-in adapter that prints its arguments, one per line, and exits 7.
fn stand_in(dir: &Path) -> PathBuf {
    let path = dir.join("kleene-restate");
    std::fs::write(
        &path,
        "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done\nexit 7\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn forwarded(tmp: &TempDir, args: &[&str]) -> (Option<i32>, Vec<String>) {
    let out = kleene(tmp.path())
        .env("KLEENE_RESTATE_BIN", stand_in(tmp.path()))
        .args(args)
        .output()
        .unwrap();
    let lines = text(&out.stdout).lines().map(str::to_owned).collect();
    (out.status.code(), lines)
}

#[test]
fn worker_restate_and_run_on_restate_reach_the_adapter_with_its_arguments() {
    let tmp = TempDir::new().unwrap();
    let (code, args) = forwarded(&tmp, &["worker", "--listen", "127.0.0.1:9081", "--help"]);
    assert_eq!(code, Some(7), "the adapter's exit code is kleene's");
    assert_eq!(args, ["worker", "--listen", "127.0.0.1:9081", "--help"]);

    let (_, args) = forwarded(&tmp, &["restate", "status", "--channel", "c1"]);
    assert_eq!(args, ["status", "--channel", "c1"]);

    let plan = demo_plan();
    let plan = plan.to_str().unwrap();
    let url = "http://127.0.0.1:8080";
    let (_, args) = forwarded(&tmp, &["run", "--restate", url, plan, "-j", "3"]);
    assert_eq!(args, ["run", "--restate", url, "-j", "3", plan]);
    let (_, args) = forwarded(&tmp, &["run", plan, "--restate", url, "--channel", "c2"]);
    assert_eq!(args, ["run", "--restate", url, "--channel", "c2", plan]);
}

#[test]
fn a_local_only_flag_on_restate_and_a_missing_adapter_are_refused_saying_why() {
    let tmp = TempDir::new().unwrap();
    let plan = demo_plan();
    let out = kleene(tmp.path())
        .env("KLEENE_RESTATE_BIN", stand_in(tmp.path()))
        .args([
            "run",
            plan.to_str().unwrap(),
            "--restate",
            "http://x",
            "--max-depth",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--max-depth is for local runs only"),
        "{}",
        text(&out.stderr)
    );
    assert!(text(&out.stdout).is_empty(), "the adapter was not started");

    let out = kleene(tmp.path())
        .env("KLEENE_RESTATE_BIN", tmp.path().join("absent"))
        .args(["worker", "--listen", "127.0.0.1:9081"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("cargo build -p kleene-restate"),
        "{}",
        text(&out.stderr)
    );
}
