//! The bundled example projects, each run to acceptance as a user would: a Python package
//! checked by pytest and a Rust crate checked by `cargo test`, each repaired once by its
//! `fix` from the failure the recovery spec carries, with its tools' output as scratch.

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

use tempfile::TempDir;

use crate::cli::basics::{kleene, text};

fn example(name: &str) -> PathBuf {
    crate::cli::basics::in_repository(format!("examples/{name}/plan.json"))
}

/// Runs `plan` in an empty directory, then accepts it: both must succeed, one fix included.
fn runs_to_acceptance(plan: &Path, fixed: &str) -> TempDir {
    let tmp = TempDir::new().unwrap();
    let out = kleene(tmp.path())
        .args(["run", plan.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("{fixed}: accepted after 1 fix")),
        "{stdout}"
    );
    let out = kleene(tmp.path()).args(["accept"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    tmp
}

/// Whether `python3 -m pytest` runs here.
fn pytest_available() -> bool {
    StdCommand::new("python3")
        .args(["-m", "pytest", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_python_example_is_accepted_with_its_pytest_caches_as_scratch() {
    if !pytest_available() {
        eprintln!("skipped: python3 -m pytest is not available here (pip install pytest)");
        return;
    }
    let tmp = runs_to_acceptance(&example("python"), "shop_pricing");
    let pricing =
        std::fs::read_to_string(tmp.path().join(".kleene/workspace/shop/pricing.py")).unwrap();
    assert!(
        pricing.contains("MEMBER_DISCOUNT_PERCENT = 10"),
        "{pricing}"
    );
    // pytest's caches were scratch: never part of the accepted files.
    let workspace = tmp.path().join(".kleene/workspace");
    assert!(!workspace.join(".pytest_cache").exists());
    assert!(!workspace.join("tests/__pycache__").exists());
}

#[test]
fn the_rust_crate_example_is_accepted_with_cargo_test() {
    let tmp = runs_to_acceptance(&example("rust-crate"), "tally_words");
    let words = std::fs::read_to_string(tmp.path().join(".kleene/workspace/src/words.rs")).unwrap();
    assert!(words.contains("split_whitespace"), "{words}");
    let workspace = tmp.path().join(".kleene/workspace");
    assert!(!workspace.join("Cargo.lock").exists());
    assert!(!workspace.join("target").exists());
}

/// The existing-crate example: a bug in a real crate's file fixed in place, checked by its
/// own `cargo test`, and the accepted change given back as a one-line patch.
#[test]
fn the_existing_crate_example_fixes_its_bug_in_place() {
    let tmp = TempDir::new().unwrap();
    let out = kleene(tmp.path())
        .args(["run", example("existing-crate").to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("stats_mean: accepted"), "{stdout}");
    let out = kleene(tmp.path()).args(["diff"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let patch = text(&out.stdout);
    assert!(
        patch.contains("-    Some(xs.iter().sum::<f64>() / (xs.len() - 1) as f64)")
            && patch.contains("+    Some(xs.iter().sum::<f64>() / xs.len() as f64)"),
        "{patch}"
    );
    assert_eq!(patch.matches("diff --git").count(), 1, "{patch}");
}
