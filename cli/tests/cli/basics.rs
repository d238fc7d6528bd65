//! End-to-end tests of the `kleene` binary on temporary directories: real shell commands,
//! real process groups, real journals.

use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Output, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use serde_json::{Value, json};
use tempfile::TempDir;

pub(crate) fn kleene(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kleene"));
    cmd.current_dir(dir);
    cmd
}

/// `kleene run PLAN --state st` in `dir`.
pub(crate) fn run(dir: &Path, plan: &Path) -> Output {
    kleene(dir)
        .args(["run", &plan.to_string_lossy(), "--state", "st"])
        .output()
        .unwrap()
}

/// `kleene status --state st` in `dir`.
pub(crate) fn status(dir: &Path) -> Output {
    kleene(dir)
        .args(["status", "--state", "st"])
        .output()
        .unwrap()
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `path` in the repository (this package is its `cli/` directory).
pub(crate) fn in_repository(path: impl AsRef<Path>) -> PathBuf {
    let cli = Path::new(env!("CARGO_MANIFEST_DIR"));
    cli.parent().unwrap_or(cli).join(path)
}

pub(crate) fn demo_plan() -> PathBuf {
    crate::cli::basics::in_repository("examples/demo/plan.json")
}

/// A task of the `app` module with the given lane, owned paths, prerequisites and extra
/// keys (commands, retry_limit, …).
pub(crate) fn task(id: &str, lane: &str, owned: &[&str], after: &[&str], extra: Value) -> Value {
    let mut t = json!({
        "id": id,
        "kind": {"lane": lane, "module": "app"},
        "owner": "shell",
        "spec": {"intent": format!("build {id}"), "acceptance_criteria": [format!("{id} passes its checks")]},
        "owned_paths": owned,
        "depends_on": after,
        "retry_limit": 0,
    });
    if let (Some(t), Some(extra)) = (t.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            t.insert(k.clone(), v.clone());
        }
    }
    t
}

/// The module lane every test plan starts with.
pub(crate) fn module() -> Value {
    task(
        "app_module",
        "module",
        &["app/MODULE"],
        &[],
        json!({"run": "mkdir -p app && echo app > app/MODULE"}),
    )
}

/// A model task after the app module whose `run` (given) leaves `bad` in `file`, whose check
/// wants `good` there, and whose fix writes it.
pub(crate) fn repairable(id: &str, file: &str, run: &str) -> Value {
    task(
        id,
        "model",
        &[file],
        &["app_module"],
        json!({
            "run": run,
            "checks": [{"id": "good", "command": format!("grep -q good {file} || {{ echo 'expected good in {file}'; exit 1; }}")}],
            "fix": format!("echo good > {file}"),
        }),
    )
}

pub(crate) fn write_plan(dir: &Path, tasks: Vec<Value>) -> PathBuf {
    let path = dir.join("plan.json");
    let plan = json!({ "tasks": tasks });
    std::fs::write(&path, serde_json::to_string_pretty(&plan).unwrap()).unwrap();
    path
}

#[test]
fn demo_succeeds_with_one_fix_that_reads_the_evidence() {
    let tmp = TempDir::new().unwrap();
    let out = kleene(tmp.path())
        .args(["run", demo_plan().to_str().unwrap(), "--state", "st"])
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
        stdout.contains("billing_service: check unit-tests failed"),
        "{stdout}"
    );
    assert!(
        stdout.contains("spawned billing_service_fix_1 (depth 1) for unit-tests"),
        "{stdout}"
    );
    assert!(
        stdout.contains("billing_service: accepted after 1 fix"),
        "{stdout}"
    );
    assert!(
        stdout.contains("accepted: 4 accepted, 0 failed, 0 drained"),
        "{stdout}"
    );

    // The fixer got the failing assertion, with file:line, expected and actual.
    let spec = std::fs::read_to_string(tmp.path().join("st/specs/billing_service_fix_1.call1.md"))
        .unwrap();
    assert_eq!(spec.matches("Compute gross amounts").count(), 1, "{spec}");
    assert!(spec.contains("billing/tests/vat_test.sh:30"), "{spec}");
    assert!(spec.contains("left: 10700"), "{spec}");
    assert!(spec.contains("right: 12000"), "{spec}");
    let page = std::fs::read_to_string(tmp.path().join("st/workspace/site/index.html")).unwrap();
    assert!(page.contains("Total due: 120.00"), "{page}");

    let status = status(tmp.path());
    assert_eq!(status.status.code(), Some(0));
    assert!(text(&status.stdout).contains("4 accepted, 0 failed"));

    let audit = kleene(tmp.path())
        .args(["audit", "--state", "st"])
        .output()
        .unwrap();
    let audit_out = text(&audit.stdout);
    assert_eq!(audit.status.code(), Some(0), "{audit_out}");
    assert!(audit_out.contains("hash chain verified"), "{audit_out}");
    assert!(audit_out.contains("subtask_spawned"), "{audit_out}");

    kleene(tmp.path())
        .args(["accept", "--state", "st"])
        .assert()
        .success();
    kleene(tmp.path())
        .args(["export", "out.tar", "--state", "st"])
        .assert()
        .success();
    let verify = kleene(tmp.path())
        .args(["verify", "out.tar", "--state", "st"])
        .output()
        .unwrap();
    assert_eq!(verify.status.code(), Some(0), "{}", text(&verify.stderr));
    assert!(
        text(&verify.stdout).contains("verified 6 files"),
        "{}",
        text(&verify.stdout)
    );
    // The project as the run leaves it: the plan's own files with the six accepted over them.
    let out = kleene(tmp.path())
        .args(["export", "--tree", "built", "--state", "st"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("6 of them accepted"),
        "{}",
        text(&out.stdout)
    );
    let built = tmp.path().join("built");
    assert_eq!(
        std::fs::read(built.join("site/index.html")).unwrap(),
        std::fs::read(tmp.path().join("st/workspace/site/index.html")).unwrap()
    );
    assert!(built.join("plan.json").is_file());
}

/// With a relative `--state` (the default `.kleene` is one), KLEENE_WORKSPACE was relative
/// too: a command that changed directory lost its stage. Every path a command is given is
/// absolute and still holds from anywhere.
#[test]
fn every_path_a_command_is_given_holds_after_it_changes_directory() {
    let tmp = TempDir::new().unwrap();
    let check = "for v in \"$KLEENE_WORKSPACE\" \"$KLEENE_CACHE_DIR\" \"$KLEENE_PLAN_DIR\" \"$KLEENE_RECOVERY_SPEC_FILE\"; do \
                   case \"$v\" in /*) test -e \"$v\" || exit 1;; *) echo \"relative: $v\"; exit 1;; esac; done";
    let plan = write_plan(
        tmp.path(),
        vec![
            module(),
            task(
                "app_model",
                "model",
                &["app/model.txt"],
                &["app_module"],
                json!({
                    "run": "cd / && echo bad > \"$KLEENE_WORKSPACE/app/model.txt\"",
                    "checks": [{"id": "good", "command": "grep -q good app/model.txt"}],
                    // The fixer is given every variable, the spec file too.
                    "fix": format!("cd / && {{ {check}; }} && echo good > \"$KLEENE_WORKSPACE/app/model.txt\""),
                }),
            ),
        ],
    );
    let out = kleene(tmp.path())
        .args(["run", plan.to_str().unwrap(), "--state", "st"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("st/workspace/app/model.txt")).unwrap(),
        "good\n"
    );
}

#[test]
fn a_fix_that_changes_nothing_stalls() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(
        tmp.path(),
        vec![
            module(),
            task(
                "app_service",
                "service",
                &["app/svc.sh"],
                &["app_module"],
                json!({
                    "run": "echo 'echo 1' > app/svc.sh",
                    "checks": [{"id": "tests", "command": "echo 'assertion failed: svc() == 2 at app/svc_test.sh:3'; exit 1"}],
                    "fix": "cat > /dev/null",
                }),
            ),
        ],
    );
    let out = run(tmp.path(), &plan);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("spawned app_service_fix_1"), "{stdout}");
    assert!(!stdout.contains("app_service_fix_2"), "{stdout}");
    assert!(stdout.contains("recovery_stalled"), "{stdout}");
    let status = status(tmp.path());
    assert_eq!(status.status.code(), Some(1));
    assert!(
        text(&status.stdout).contains("recovery_stalled"),
        "{}",
        text(&status.stdout)
    );
}

#[test]
fn fixes_that_keep_failing_differently_exhaust_the_depth() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(
        tmp.path(),
        vec![
            module(),
            task(
                "app_model",
                "model",
                &["app/n.txt"],
                &["app_module"],
                json!({
                    "run": "echo 0 > app/n.txt",
                    "checks": [{"id": "tests", "command": "echo \"expected 9, got $(cat app/n.txt)\"; exit 1"}],
                    "fix": "echo $(( $(cat app/n.txt) + 1 )) > app/n.txt",
                }),
            ),
        ],
    );
    let out = kleene(tmp.path())
        .args([
            "run",
            plan.to_str().unwrap(),
            "--state",
            "st",
            "--max-depth",
            "2",
        ])
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("spawned app_model_fix_2 (depth 2)"),
        "{stdout}"
    );
    assert!(!stdout.contains("app_model_fix_3"), "{stdout}");
    assert!(stdout.contains("recovery_exhausted"), "{stdout}");
}

#[test]
fn a_failed_prerequisite_drains_its_dependent() {
    let tmp = TempDir::new().unwrap();
    let marker = tmp.path().join("page-ran");
    let plan = write_plan(
        tmp.path(),
        vec![
            module(),
            task(
                "app_service",
                "service",
                &["app/svc.sh"],
                &["app_module"],
                json!({
                    "run": "echo 'exit 1' > app/svc.sh",
                    "checks": [{"id": "contract", "command": "sh app/svc.sh", "overridable": false}],
                    "fix": "true",
                }),
            ),
            task(
                "app_page",
                "page",
                &["app/index.html"],
                &["app_service"],
                json!({"run": format!("touch {} && echo hi > app/index.html", marker.display())}),
            ),
        ],
    );
    let out = run(tmp.path(), &plan);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("non_overridable_blocker"), "{stdout}");
    assert!(!stdout.contains("spawned"), "{stdout}");
    assert!(
        stdout.contains("app_page: drained (prerequisite app_service failed)"),
        "{stdout}"
    );
    assert!(!marker.exists(), "a drained task was run");
    let status = status(tmp.path());
    assert!(text(&status.stdout).contains("prerequisite app_service failed"));
}

#[test]
fn a_missing_command_is_infrastructure_and_never_fixed() {
    let tmp = TempDir::new().unwrap();
    let marker = tmp.path().join("fixer-ran");
    let plan = write_plan(
        tmp.path(),
        vec![task(
            "app_module",
            "module",
            &["app/MODULE"],
            &[],
            json!({
                "run": "kleene_no_such_tool_xyz --build",
                "fix": format!("touch {}", marker.display()),
            }),
        )],
    );
    let out = run(tmp.path(), &plan);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("infrastructure"), "{stdout}");
    assert!(stdout.contains("command not found"), "{stdout}");
    assert!(!stdout.contains("spawned"), "{stdout}");
    assert!(
        !marker.exists(),
        "the fixer ran for an infrastructure failure"
    );
    let status = status(tmp.path());
    assert!(
        text(&status.stdout).contains("infrastructure failure on call 1"),
        "{}",
        text(&status.stdout)
    );
}

#[test]
fn a_timeout_kills_the_command_and_is_infrastructure() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(
        tmp.path(),
        vec![task(
            "app_module",
            "module",
            &["app/MODULE"],
            &[],
            json!({"run": "sleep 20 & sleep 20", "fix": "true", "timeout_secs": 0.3}),
        )],
    );
    let started = Instant::now();
    let out = run(tmp.path(), &plan);
    assert!(started.elapsed() < Duration::from_secs(10));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("timed out"), "{stdout}");
    assert!(!stdout.contains("spawned"), "{stdout}");
}

#[test]
fn a_hostile_path_is_refused_with_its_place_named() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(
        tmp.path(),
        vec![task(
            "app_module",
            "module",
            &["../../etc/passwd"],
            &[],
            json!({"run": "true"}),
        )],
    );
    let out = run(tmp.path(), &plan);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("plan.json"), "{stderr}");
    assert!(
        stderr.contains("task app_module: field `owned_paths[0]`"),
        "{stderr}"
    );
    assert!(stderr.contains("../../etc/passwd"), "{stderr}");
    assert!(
        !tmp.path().join("st").exists(),
        "a refused plan left state behind"
    );
}

#[test]
fn a_malformed_plan_points_to_line_and_column() {
    let tmp = TempDir::new().unwrap();
    let plan = tmp.path().join("plan.json");
    std::fs::write(
        &plan,
        "{\n  \"tasks\": [\n    {\"id\": \"a\" \"run\": \"true\"}\n  ]\n}\n",
    )
    .unwrap();
    let out = kleene(tmp.path())
        .args(["validate", plan.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("line 3 column 16"), "{stderr}");
    assert!(stderr.contains("plan.json"), "{stderr}");
}

#[test]
fn validate_and_graph_describe_the_demo() {
    let tmp = TempDir::new().unwrap();
    let out = kleene(tmp.path())
        .args(["validate", demo_plan().to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("is valid: 4 tasks"), "{stdout}");
    assert!(
        stdout.contains("billing_service [service billing] (run, 2 checks, fix)"),
        "{stdout}"
    );
    let out = kleene(tmp.path())
        .args(["graph", demo_plan().to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let dot = text(&out.stdout);
    assert!(dot.starts_with("digraph"), "{dot}");
    assert!(
        dot.contains("\"billing_service\" -> \"invoice_page\""),
        "{dot}"
    );
}

#[test]
fn interrupt_keeps_the_reservation_and_resume_finishes() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(
        tmp.path(),
        vec![
            module(),
            task(
                "app_page",
                "page",
                &["app/started", "app/page.html"],
                &["app_module"],
                json!({
                    // A call's stage is discarded when it settles: the marker of the first call
                    // lives in the cache, the one place that persists between calls.
                    "run": "mkdir -p app; if [ -f \"$KLEENE_CACHE_DIR/started\" ]; then echo page > app/page.html; touch app/started; else touch \"$KLEENE_CACHE_DIR/started\"; sleep 30; fi",
                    "checks": [{"id": "page", "command": "test -s app/page.html"}],
                    // The interrupted call counts against the budget: leave room for a replay.
                    "retry_limit": 1,
                }),
            ),
        ],
    );
    let started = Instant::now();
    let child = StdCommand::new(env!("CARGO_BIN_EXE_kleene"))
        .current_dir(tmp.path())
        .args(["run", plan.to_str().unwrap(), "--state", "st", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let flag = tmp.path().join("st/cache/started");
    while !flag.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the page task never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the sleep was not stopped"
    );
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("kleene resume"),
        "{}",
        text(&out.stderr)
    );
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("every --json line is JSON"))
        .collect();
    let finished = events
        .iter()
        .find(|e| e["event"] == "run_finished")
        .expect("a run_finished event");
    assert_eq!(finished["outcome"], "interrupted", "{finished}");
    assert_eq!(finished["accepted"], 1, "{finished}");
    let error = events.last().unwrap();
    assert_eq!(
        (&error["event"], &error["exit"]),
        (&json!("error"), &json!(130))
    );

    let status = status(tmp.path());
    let status_out = text(&status.stdout);
    assert_eq!(status.status.code(), Some(1), "{status_out}");
    assert!(status_out.contains("in flight (call 1)"), "{status_out}");
    assert!(status_out.contains("app_module") && status_out.contains("accepted"));

    let out = kleene(tmp.path())
        .args(["resume", "--state", "st"])
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("resuming 2 tasks on channel"), "{stdout}");
    assert!(stdout.contains("app_page: call 2"), "{stdout}");
    assert!(
        !stdout.contains("app_module: started"),
        "an accepted task ran again: {stdout}"
    );
    kleene(tmp.path())
        .args(["accept", "--state", "st"])
        .assert()
        .success();
}

#[test]
fn a_tampered_export_fails_verify_naming_the_path() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(
        tmp.path(),
        vec![
            module(),
            task(
                "app_model",
                "model",
                &["app/schema.txt"],
                &["app_module"],
                json!({"run": "echo 'id: int, name: text' > app/schema.txt"}),
            ),
        ],
    );
    kleene(tmp.path())
        .args(["run", plan.to_str().unwrap(), "--state", "st"])
        .assert()
        .success();
    kleene(tmp.path())
        .args(["accept", "--state", "st"])
        .assert()
        .success();
    kleene(tmp.path())
        .args(["export", "out.tar", "--state", "st"])
        .assert()
        .success();
    let path = tmp.path().join("out.tar");
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes
        .windows(9)
        .position(|w| w == b"name: tex")
        .expect("the file content is in the archive");
    bytes[at] = b'N';
    std::fs::write(&path, &bytes).unwrap();
    let out = kleene(tmp.path())
        .args(["verify", "out.tar", "--state", "st"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("app/schema.txt"), "{stderr}");
}

/// `kleene run` is the everyday command: run again over a finished run, it replaces it
/// (no pile of old state directories) and makes no call for what has not changed.
#[test]
fn a_second_run_over_a_finished_one_replaces_it_and_makes_no_call() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(tmp.path(), vec![module()]);
    kleene(tmp.path())
        .args(["run", plan.to_str().unwrap(), "--state", "st"])
        .assert()
        .success();
    let out = run(tmp.path(), &plan);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("replaced the finished run"), "{stdout}");
    assert!(stdout.contains("1 task up to date"), "{stdout}");
    let siblings: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("st"))
        .collect();
    assert_eq!(siblings.len(), 2, "{siblings:?}"); // st and st-cache, nothing set aside
}

#[test]
fn batch_recovery_gives_a_halted_root_one_corrective_call() {
    let tmp = TempDir::new().unwrap();
    // The closure's own fixer changes nothing (it stalls); the corrective call's fixer gets
    // the exact rejection on stdin and repairs the file only from it.
    let fix = "if grep -q 'Corrective call' && grep -q 'expected ok' \"$KLEENE_RECOVERY_SPEC_FILE\"; \
               then echo ok > app/state.txt; fi";
    let tasks = vec![
        module(),
        task(
            "app_model",
            "model",
            &["app/state.txt"],
            &["app_module"],
            json!({
                "run": "echo broken > app/state.txt",
                "checks": [{"id": "state", "command": "grep -q '^ok$' app/state.txt || { echo 'expected ok, found' \"$(cat app/state.txt)\"; exit 1; }"}],
                "fix": fix,
                "retry_limit": 1,
            }),
        ),
        task(
            "app_page",
            "page",
            &["app/page.txt"],
            &["app_model"],
            json!({"run": "cat app/state.txt > app/page.txt"}),
        ),
    ];
    let plan = write_plan(tmp.path(), tasks);
    let out = kleene(tmp.path())
        .args(["run", plan.to_str().unwrap(), "--state", "without"])
        .output()
        .unwrap();
    // Without the flag the retry comes at once, with the same correction: also repaired.
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));

    let out = kleene(tmp.path())
        .args([
            "run",
            plan.to_str().unwrap(),
            "--state",
            "with",
            "--batch-recovery",
        ])
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("recovery_stalled"), "{stdout}");
    assert!(
        stdout.contains("batch recovery: one corrective call for app_model"),
        "{stdout}"
    );
    assert!(stdout.contains("app_page: accepted"), "{stdout}");
    let spec = std::fs::read_to_string(tmp.path().join("with/specs/app_model.call2.md")).unwrap();
    assert!(spec.contains("## Exact rejection"), "{spec}");
    assert!(spec.contains("expected ok, found broken"), "{spec}");
}

#[test]
fn a_tampered_closure_log_fails_the_audit_naming_the_line() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(tmp.path(), vec![module()]);
    kleene(tmp.path())
        .args(["run", plan.to_str().unwrap(), "--state", "st"])
        .assert()
        .success();
    let log = tmp.path().join("st/closures.jsonl");
    let original = std::fs::read_to_string(&log).unwrap();
    // Rewrite the session recorded by the first audit entry: the chain must notice.
    let at = original.find("\"closure_started\"").unwrap();
    let (head, tail) = original.split_at(at);
    let tampered = format!(
        "{head}{}",
        tail.replacen("\"kleene-run\"", "\"kleene-rux\"", 1)
    );
    assert_ne!(tampered, original);
    std::fs::write(&log, tampered).unwrap();
    let out = kleene(tmp.path())
        .args(["audit", "--state", "st"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("closures.jsonl line 1"), "{stderr}");
    assert!(stderr.contains("app_module"), "{stderr}");
}

#[test]
fn json_mode_prints_one_object_per_line() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(tmp.path(), vec![module()]);
    let out = kleene(tmp.path())
        .args(["run", plan.to_str().unwrap(), "--state", "st", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["event"], "run_started");
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "task_accepted" && e["task"] == "app_module")
    );
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "run_finished" && e["outcome"] == "accepted")
    );
    let out = kleene(tmp.path())
        .args(["status", "--state", "st", "--json"])
        .output()
        .unwrap();
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["complete"], true);
    assert_eq!(status["tasks"][0]["status"], "accepted");
}

#[test]
fn sigterm_stops_the_run_like_ctrl_c() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(
        tmp.path(),
        vec![task(
            "app_module",
            "module",
            &["app/MODULE"],
            &[],
            json!({"run": "mkdir -p app && touch app/MODULE \"$KLEENE_CACHE_DIR/started\" && sleep 30"}),
        )],
    );
    let started = Instant::now();
    let child = StdCommand::new(env!("CARGO_BIN_EXE_kleene"))
        .current_dir(tmp.path())
        .args(["run", plan.to_str().unwrap(), "--state", "st"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let flag = tmp.path().join("st/cache/started");
    while !flag.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the task never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the sleep was not stopped"
    );
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    let status = status(tmp.path());
    assert!(
        text(&status.stdout).contains("in flight (call 1)"),
        "{}",
        text(&status.stdout)
    );
}

#[test]
fn a_write_outside_the_owned_paths_is_refused() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(
        tmp.path(),
        vec![task(
            "app_module",
            "module",
            &["app/MODULE"],
            &[],
            json!({"run": "mkdir -p app && echo m > app/MODULE && echo oops > stray.txt"}),
        )],
    );
    let out = run(tmp.path(), &plan);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "app_module: FAILED: call 1 refused: candidate for task app_module writes stray.txt"
        ),
        "{stdout}"
    );
}

/// R11: a service task cannot change a model task's schema. All tasks share one workspace,
/// so the worker must notice a write into another task's owned file, not only a new file
/// outside every task's ownership.
#[test]
fn a_service_overwriting_the_model_schema_is_refused() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(
        tmp.path(),
        vec![
            module(),
            task(
                "app_model",
                "model",
                &["app/schema.txt"],
                &[],
                json!({"run": "echo 'id: int' > app/schema.txt"}),
            ),
            task(
                "app_service",
                "service",
                &["app/service.txt"],
                &[],
                json!({"run": "echo svc > app/service.txt && echo 'id: text' > app/schema.txt"}),
            ),
        ],
    );
    let out = run(tmp.path(), &plan);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("app_service: FAILED: call 1 refused: candidate for task app_service writes app/schema.txt"),
        "{stdout}"
    );
    assert!(stdout.contains("app_model: accepted"), "{stdout}");
}

#[test]
fn graph_renders_svg_when_dot_is_on_path() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = TempDir::new().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    // A stand-in for Graphviz: records its arguments and writes the `-o` file.
    let dot = bin.join("dot");
    std::fs::write(
        &dot,
        "#!/bin/sh\necho \"$@\" > dot-args\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=$2; shift; done\necho '<svg/>' > \"$out\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&dot, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = kleene(tmp.path())
        .env("PATH", path)
        .args(["graph", demo_plan().to_str().unwrap(), "--out", "plan"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("wrote plan.svg"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("plan.svg")).unwrap(),
        "<svg/>\n"
    );
    let args = std::fs::read_to_string(tmp.path().join("dot-args")).unwrap();
    assert_eq!(args.trim(), "-Tsvg plan.dot -o plan.svg");
}

#[test]
fn the_fix_budget_is_shared_by_the_whole_run() {
    let tmp = TempDir::new().unwrap();
    let repairable = |id: &str, file: &str| repairable(id, file, &format!("echo bad > {file}"));
    let plan = write_plan(
        tmp.path(),
        vec![
            module(),
            repairable("app_model_a", "app/a.txt"),
            repairable("app_model_b", "app/b.txt"),
        ],
    );
    let out = kleene(tmp.path())
        .args([
            "run",
            plan.to_str().unwrap(),
            "--state",
            "st",
            "--max-fixes",
            "1",
            // One call at a time: the first task in the plan's order takes the one fix.
            "-j",
            "1",
        ])
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("app_model_a: accepted after 1 fix"),
        "{stdout}"
    );
    assert!(
        stdout.contains("recovery_exhausted (the run's 1 fix attempt(s) are used)"),
        "{stdout}"
    );
    assert!(!stdout.contains("spawned app_model_b_fix_1"), "{stdout}");
}
