//! Interruptions as a user meets them: Ctrl-C, SIGTERM or a killed kleene stops a call, the
//! call stays on record as interrupted, and it does not spend the task's budget; `status`
//! tells a run that is running from one that was interrupted.

use std::path::Path;
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tempfile::TempDir;

use crate::cli::basics::{kleene, task, text, write_plan};

/// One task with `retry_limit: 0` whose first call waits until it is stopped and whose
/// next call succeeds; the first call marks that it started in the cache.
fn stoppable(dir: &Path) -> std::path::PathBuf {
    write_plan(
        dir,
        vec![task(
            "app_config",
            "config",
            &["out.txt"],
            &[],
            json!({
                "run": "if [ -f \"$KLEENE_CACHE_DIR/started\" ]; then echo ok > out.txt; \
                        else touch \"$KLEENE_CACHE_DIR/started\"; sleep 30; fi",
                "retry_limit": 0,
            }),
        )],
    )
}

/// Waits until the first call has started.
fn until_started(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !dir.join("st/cache/started").exists() {
        assert!(Instant::now() < deadline, "the call never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn status(dir: &Path) -> String {
    let out = kleene(dir)
        .args(["status", "--state", "st"])
        .output()
        .unwrap();
    text(&out.stdout)
}

#[test]
fn an_interrupted_call_spends_no_budget_and_stays_on_record() {
    for signal in ["INT", "TERM", "KILL"] {
        let tmp = TempDir::new().unwrap();
        let plan = stoppable(tmp.path());
        let mut child = StdCommand::new(env!("CARGO_BIN_EXE_kleene"))
            .current_dir(tmp.path())
            .args(["run", plan.to_str().unwrap(), "--state", "st", "-j", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        until_started(tmp.path());
        // While it runs, the call is running, by the kleene that holds the state.
        let live = status(tmp.path());
        assert!(
            live.contains(&format!(
                "running (pid {} running `kleene run`)",
                child.id()
            )),
            "{signal}: {live}"
        );
        assert!(
            StdCommand::new("kill")
                .args([&format!("-{signal}"), &child.id().to_string()])
                .status()
                .unwrap()
                .success()
        );
        child.wait().unwrap();
        let stopped = status(tmp.path());
        assert!(
            stopped.contains("interrupted; kleene resume calls it again"),
            "{signal}: {stopped}"
        );
        let out = kleene(tmp.path())
            .args(["resume", "--state", "st", "--kill-stale"])
            .output()
            .unwrap();
        let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{signal}: {said}");
        assert!(said.contains("app_config: accepted"), "{signal}: {said}");
        let after = status(tmp.path());
        assert!(
            after.contains("2 calls") && after.contains("call 1 was interrupted"),
            "{signal}: {after}"
        );
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("st/workspace/out.txt")).unwrap(),
            "ok\n"
        );
    }
}
