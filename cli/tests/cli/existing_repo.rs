//! An existing repository as a user meets it: a copy of a real crate's source (semver
//! 1.0.28, its own tests included) in git, a plan at its root whose task changes one source
//! file and adds a test, `cargo test` as its check; the accepted change comes back as a
//! patch `git apply` takes, or is applied where nothing changed since.

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

use serde_json::json;
use tempfile::TempDir;

use crate::cli::basics::{kleene, text};

/// The registry's copy of semver 1.0.28, a crate of this project's dependency tree.
fn semver_source() -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))?;
    std::fs::read_dir(home.join("registry/src"))
        .ok()?
        .flatten()
        .map(|index| index.path().join("semver-1.0.28"))
        .find(|dir| dir.join("src/parse.rs").is_file())
}

fn sh(dir: &Path, script: &str) {
    let out = StdCommand::new("sh")
        .current_dir(dir)
        .args(["-c", script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn a_task_changes_a_real_crate_and_the_change_comes_back_as_a_patch() {
    let Some(source) = semver_source() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "semver 1.0.28 is in the dependency tree, so CI has its source"
        );
        eprintln!("skipped: no registry copy of semver 1.0.28 here");
        return;
    };
    let tmp = TempDir::new().unwrap();
    let repo = tmp.path().join("semver");
    sh(
        tmp.path(),
        &format!("cp -R '{}' semver && chmod -R u+w semver", source.display()),
    );
    // Offline, its one dev-dependency (criterion 0.8, for benches) cannot be had: the
    // manifest is cut before it, and the lock file that names it goes too.
    let manifest = std::fs::read_to_string(repo.join("Cargo.toml")).unwrap();
    let cut = manifest
        .find("[target.\"cfg(not(miri))\".dev-dependencies")
        .unwrap_or(manifest.len());
    std::fs::write(repo.join("Cargo.toml"), &manifest[..cut]).unwrap();
    let _ = std::fs::remove_file(repo.join("Cargo.lock"));
    let plan = json!({
        "scratch": ["target/**", "Cargo.lock"],
        "tasks": [{
            "id": "version_v_prefix",
            "kind": {"lane": "service", "module": "semver"},
            "owner": "shell",
            "spec": {
                "intent": "Version::parse accepts a leading v, as in v1.2.3",
                "acceptance_criteria": ["\"v1.2.3\" parses as 1.2.3", "the crate's own tests pass"]
            },
            "owned_paths": ["src/parse.rs", "tests/test_v_prefix.rs"],
            "run": "sed -i '0,/fn from_str(text: &str) -> Result<Self, Self::Err> {/s//&\\n        let text = text.strip_prefix(\"v\").unwrap_or(text);/' src/parse.rs && printf '#[test]\\nfn v_prefix() {\\n    assert_eq!(semver::Version::parse(\"v1.2.3\").unwrap(), semver::Version::new(1, 2, 3));\\n}\\n' > tests/test_v_prefix.rs",
            "checks": [
                {"id": "v-prefix", "command": "grep -q 'strip_prefix(\"v\")' src/parse.rs"},
                {"id": "tests", "command": "cargo test --offline --quiet"}
            ],
            "timeout_secs": 900
        }]
    });
    std::fs::write(
        repo.join("plan.json"),
        serde_json::to_string_pretty(&plan).unwrap(),
    )
    .unwrap();
    std::fs::write(
        repo.join(".gitignore"),
        "/target/\n/.kleene/\n/Cargo.lock\n",
    )
    .unwrap();
    sh(
        &repo,
        "git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm semver",
    );
    let out = kleene(&repo)
        .args(["run", "plan.json", "-j", "1"])
        .timeout(std::time::Duration::from_secs(900))
        .output()
        .unwrap();
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{said}");
    // Only what the task owns was bound to change; the rest of the crate was its base.
    let out = kleene(&repo).args(["diff"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let patch = text(&out.stdout);
    assert!(
        patch.contains("diff --git a/src/parse.rs b/src/parse.rs"),
        "{patch}"
    );
    assert!(patch.contains("+++ b/tests/test_v_prefix.rs"), "{patch}");
    assert_eq!(patch.matches("diff --git").count(), 2, "{patch}");
    std::fs::write(tmp.path().join("accepted.patch"), &patch).unwrap();
    sh(&repo, "git apply --check ../accepted.patch");
    // One commit per accepted task, once the run is accepted: `git am` takes them.
    let out = kleene(&repo).args(["diff", "--per-task"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("run kleene accept"),
        "{}",
        text(&out.stderr)
    );
    let out = kleene(&repo).args(["accept"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = kleene(&repo).args(["diff", "--per-task"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    std::fs::write(tmp.path().join("series.mbox"), &out.stdout).unwrap();
    sh(
        tmp.path(),
        "git clone -q semver am && cd am && git -c user.name=t -c user.email=t@t am -q ../series.mbox",
    );
    let log = StdCommand::new("git")
        .args(["-C", "am", "log", "-1", "--format=%s%n%b"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let message = text(&log.stdout);
    assert!(
        message.starts_with("version_v_prefix: Version::parse accepts a leading v")
            && message.contains("Kleene-Record: "),
        "{message}"
    );
    // A file the user edited meanwhile: nothing is written, and it is named.
    std::fs::write(repo.join("src/parse.rs"), "// edited by hand\n").unwrap();
    let out = kleene(&repo).args(["apply"]).output().unwrap();
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("src/parse.rs was edited"), "{said}");
    assert!(!repo.join("tests/test_v_prefix.rs").exists());
    sh(&repo, "git checkout -q src/parse.rs");
    let out = kleene(&repo).args(["apply"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let parse = std::fs::read_to_string(repo.join("src/parse.rs")).unwrap();
    assert!(parse.contains("strip_prefix(\"v\")"), "{parse}");
    assert!(repo.join("tests/test_v_prefix.rs").is_file());
    // The whole project as the run leaves it, in a directory of its own: file for file what
    // the applied working tree tracks.
    let built = tmp.path().join("built");
    let export_tree = || {
        kleene(&repo)
            .args(["export", "--tree"])
            .arg(&built)
            .output()
            .unwrap()
    };
    let out = export_tree();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("2 of them accepted"),
        "{}",
        text(&out.stdout)
    );
    let tracked = StdCommand::new("git")
        .args(["ls-files", "--cached", "--others", "--exclude-standard"])
        .current_dir(&repo)
        .output()
        .unwrap();
    let tracked = text(&tracked.stdout);
    assert!(tracked.lines().count() > 10, "{tracked}");
    for path in tracked.lines() {
        assert_eq!(
            std::fs::read(built.join(path)).ok(),
            std::fs::read(repo.join(path)).ok(),
            "{path}"
        );
    }
    let out = export_tree();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("exists"),
        "{}",
        text(&out.stderr)
    );
}
