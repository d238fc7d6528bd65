//! Accepted means tested, end to end: each call runs in its own staged workspace, a refused
//! call leaves nothing behind, nothing is read through a symlink, and the state directory has
//! one writer and survives a crash at any moment.
//!
//! Each test names the defect it guards; each failed on the code before staged workspaces.

use std::path::Path;
use std::process::{Command as StdCommand, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tempfile::TempDir;

use crate::cli::basics::{kleene, module, run, status, task, text, write_plan};

fn both(out: &Output) -> String {
    format!("{}\n{}", text(&out.stdout), text(&out.stderr))
}

fn accept(dir: &Path) -> Output {
    kleene(dir)
        .args(["accept", "--state", "st"])
        .output()
        .unwrap()
}

/// A plan of one task, `app_module`, owning `owned`, with the extra keys `extra`.
fn one_task(dir: &Path, owned: &[&str], extra: serde_json::Value) -> std::path::PathBuf {
    write_plan(dir, vec![task("app_module", "module", owned, &[], extra)])
}

/// Waits until `path` exists (a command of the run got that far).
fn wait_for(path: &Path, what: &str) {
    let started = Instant::now();
    while !path.exists() {
        assert!(started.elapsed() < Duration::from_secs(20), "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn spawn_run(dir: &Path, plan: &Path) -> std::process::Child {
    StdCommand::new(env!("CARGO_BIN_EXE_kleene"))
        .current_dir(dir)
        .args(["run", plan.to_str().unwrap(), "--state", "st"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A refused write used to be accepted on the next call: the candidate was the diff of a
/// shared workspace against the previous call, and the refused file was never rolled back.
#[test]
fn a_refused_write_is_refused_again_on_every_later_call() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(
        tmp.path(),
        vec![
            module(),
            task(
                "two",
                "page",
                &[],
                &["app_module"],
                json!({
                    "run": "mkdir -p out && echo 2 > out/two.txt",
                    "checks": [{"id": "two", "command": "grep -q 2 out/two.txt"}],
                    "retry_limit": 2,
                }),
            ),
        ],
    );
    let out = run(tmp.path(), &plan);
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    let st = text(&status(tmp.path()).stdout);
    assert!(st.contains("two") && st.contains("failed"), "{st}");
    // Refused again on the second call, for the same file: recovery stalled there.
    assert!(
        st.contains("2 calls") && st.contains("recovery_stalled"),
        "every call was refused: {st}"
    );
    assert!(
        st.contains("writes out/two.txt, which the task does not own"),
        "{st}"
    );
    assert_eq!(accept(tmp.path()).status.code(), Some(1));
}

/// A fixer could patch another task's file: refused, then accepted on retry, and the export
/// held the unpatched file while the checks ran against the patched one.
#[test]
fn a_fixer_that_patches_another_tasks_file_is_never_accepted() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(
        tmp.path(),
        vec![
            task(
                "app_module",
                "module",
                &["app/MODULE"],
                &[],
                json!({"run": "mkdir -p app && echo bad > app/MODULE"}),
            ),
            task(
                "app_page",
                "page",
                &["app/page.html"],
                &["app_module"],
                json!({
                    "run": "echo page > app/page.html",
                    "checks": [{"id": "module-good", "command": "grep -q good app/MODULE"}],
                    "fix": "echo good > app/MODULE",
                    "retry_limit": 2,
                }),
            ),
        ],
    );
    let out = run(tmp.path(), &plan);
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    let st = text(&status(tmp.path()).stdout);
    assert!(st.contains("app_page") && st.contains("failed"), "{st}");
    assert!(
        st.contains("writes app/MODULE, which the task does not own"),
        "{st}"
    );
    assert_eq!(accept(tmp.path()).status.code(), Some(1));
    // The run's workspace holds only accepted bytes.
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("st/workspace/app/MODULE")).unwrap(),
        "bad\n"
    );
}

/// Files from outside the workspace were exported through a symlinked directory: the worker
/// checked only the last component of a path for a link.
#[test]
fn nothing_is_read_through_a_symlinked_directory() {
    let cases = [
        ("one link", "ln -s /etc out"),
        ("a chain of two", "ln -s /etc e && ln -s e out"),
        (
            "a link to the file",
            "mkdir out && ln -s /etc/passwd out/passwd",
        ),
    ];
    for (what, command) in cases {
        let tmp = TempDir::new().unwrap();
        let plan = one_task(tmp.path(), &["out/passwd"], json!({"run": command}));
        let out = run(tmp.path(), &plan);
        assert_eq!(out.status.code(), Some(1), "{what}: {}", both(&out));
        let st = text(&status(tmp.path()).stdout);
        assert!(st.contains("symbolic link"), "{what}: {st}");
        assert_eq!(accept(tmp.path()).status.code(), Some(1), "{what}");
        let journal = std::fs::read_dir(tmp.path().join("st/journal"))
            .unwrap()
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .collect::<Vec<_>>()
            .concat();
        let passwd = std::fs::read("/etc/passwd").unwrap();
        assert!(
            !journal
                .windows(passwd.len().min(32))
                .any(|w| w == &passwd[..passwd.len().min(32)]),
            "{what}: /etc/passwd reached the evidence"
        );
    }
}

/// A check that swaps the directory for a link after `run` wrote the real file: what the
/// checks left is what is judged, and it is refused.
#[test]
fn a_check_that_swaps_in_a_link_after_run_is_refused() {
    let tmp = TempDir::new().unwrap();
    let plan = one_task(
        tmp.path(),
        &["out/passwd"],
        json!({
            "run": "mkdir -p out && echo mine > out/passwd",
            "checks": [{"id": "swap", "command": "rm -rf out && ln -s /etc out"}],
        }),
    );
    let out = run(tmp.path(), &plan);
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    let st = text(&status(tmp.path()).stdout);
    assert!(st.contains("out is a symbolic link to /etc"), "{st}");
}

/// Writes kleene cannot name were silently skipped while an admissible stray name was
/// refused.
#[test]
fn a_file_kleene_cannot_name_is_refused_by_name() {
    for (what, command, shown) in [
        ("a secret-like name", "touch .env", ".env"),
        ("a newline", "touch \"$(printf 'a\\nb')\"", "a\\nb"),
        ("invalid UTF-8", "touch \"$(printf 'x\\377y')\"", "x\\xffy"),
    ] {
        let tmp = TempDir::new().unwrap();
        let plan = one_task(
            tmp.path(),
            &["app/MODULE"],
            json!({"run": format!("mkdir -p app && echo m > app/MODULE && {command}")}),
        );
        let out = run(tmp.path(), &plan);
        assert_eq!(out.status.code(), Some(1), "{what}: {}", both(&out));
        let st = text(&status(tmp.path()).stdout);
        assert!(st.contains("kleene refuses"), "{what}: {st}");
        let journal_text = std::fs::read_dir(tmp.path().join("st/journal"))
            .unwrap()
            .map(|e| {
                String::from_utf8_lossy(&std::fs::read(e.unwrap().path()).unwrap()).into_owned()
            })
            .collect::<String>();
        assert!(
            journal_text.contains(shown),
            "{what}: the rejection names {shown}"
        );
    }
}

/// Deleting another task's file became visible only at acceptance, as a missing file.
#[test]
fn deleting_a_prerequisites_file_is_refused() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(
        tmp.path(),
        vec![
            module(),
            task(
                "app_page",
                "page",
                &["app/page.html"],
                &["app_module"],
                json!({"run": "rm app/MODULE && echo p > app/page.html"}),
            ),
        ],
    );
    let out = run(tmp.path(), &plan);
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    let st = text(&status(tmp.path()).stdout);
    assert!(st.contains("deletes app/MODULE"), "{st}");
}

/// A call sees its transitive prerequisites' files and nothing that is not an accepted
/// output: not another branch's files, not the files of a refused call.
#[test]
fn a_stage_holds_exactly_the_transitive_prerequisites_outputs() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(
        tmp.path(),
        vec![
            module(),
            task(
                "app_model",
                "model",
                &["app/model.txt"],
                &["app_module"],
                json!({"run": "echo model > app/model.txt"}),
            ),
            task(
                "app_service",
                "service",
                &["app/files.txt"],
                &["app_model"],
                json!({"run": "find . -type f ! -name files.txt | sort > app/files.txt"}),
            ),
        ],
    );
    let out = run(tmp.path(), &plan);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let files = std::fs::read_to_string(tmp.path().join("st/workspace/app/files.txt")).unwrap();
    // The plan's base (here the plan file itself) lies under the prerequisites' outputs.
    assert_eq!(files, "./app/MODULE\n./app/model.txt\n./plan.json\n");
    // With an empty base, the prerequisites' outputs alone.
    let mut text: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    text["base"] = json!("empty");
    std::fs::write(&plan, text.to_string()).unwrap();
    let out = kleene(tmp.path())
        .args(["run", plan.to_str().unwrap(), "--state", "st", "--restart"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let files = std::fs::read_to_string(tmp.path().join("st/workspace/app/files.txt")).unwrap();
    assert_eq!(files, "./app/MODULE\n./app/model.txt\n");
}

/// `resume` silently ran a stale plan after the plan file was edited.
#[test]
fn resume_refuses_a_changed_plan_file_and_restart_keeps_the_old_run() {
    let tmp = TempDir::new().unwrap();
    let failing = |run: &str| {
        vec![task(
            "app_module",
            "module",
            &["app/MODULE"],
            &[],
            json!({"run": run}),
        )]
    };
    let plan = write_plan(tmp.path(), failing("exit 3"));
    assert_eq!(run(tmp.path(), &plan).status.code(), Some(1));
    write_plan(tmp.path(), failing("mkdir -p app && echo m > app/MODULE"));
    let out = kleene(tmp.path())
        .args(["resume", "--state", "st"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("task app_module"), "{err}");
    assert!(err.contains("--restart"), "{err}");
    let out = kleene(tmp.path())
        .args(["run", plan.to_str().unwrap(), "--state", "st", "--restart"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    assert!(tmp.path().join("st.old-1/run.json").exists());
    // It says where the old run went and how to remove it, once.
    let said = text(&out.stdout);
    let line = "set the earlier run aside in st.old-1 (kept for inspection; remove it with \
                rm -rf st.old-1)";
    assert_eq!(said.matches(line).count(), 1, "{said}");
    // The run set aside names its own workspace, not the new run's.
    assert_names_its_own_workspace(tmp.path(), "st.old-1");
}

/// `kleene status --state STATE` names STATE/workspace as the run's workspace.
fn assert_names_its_own_workspace(dir: &Path, state: &str) {
    let status = text(
        &kleene(dir)
            .args(["status", "--state", state])
            .output()
            .unwrap()
            .stdout,
    );
    let own = dir.join(state).join("workspace");
    assert!(
        status.contains(&format!("workspace {}", own.display())),
        "{status}"
    );
}

/// A call that removed its own stage stopped the run as if kleene's host had failed
/// ("nothing was counted"), and every resume made the same call again: no budget bounded
/// it. What a call does to its stage is its own failure, counted and refused.
#[test]
fn a_call_that_removes_its_own_stage_is_refused_and_counted() {
    let tmp = TempDir::new().unwrap();
    let plan = one_task(
        tmp.path(),
        &["app/MODULE"],
        json!({
            "run": "mkdir -p app && echo m > app/MODULE && rm -rf \"$KLEENE_WORKSPACE\"",
            "retry_limit": 1,
            // Confined, a call cannot remove its stage (only empty it): what kleene does
            // with a removed stage is for unconfined commands.
            "sandbox": false,
        }),
    );
    let out = run(tmp.path(), &plan);
    let all = both(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(
        all.contains("call 2 refused") && all.contains("the stage itself cannot be read"),
        "{all}"
    );
    assert!(!all.contains("nothing was counted"), "{all}");
    let s = text(&status(tmp.path()).stdout);
    assert!(s.contains("failed") && s.contains("2 calls"), "{s}");
}

/// A copied state directory, resumed, wrote its accepted files into the original's
/// workspace: `run.json` named even the default workspace by its absolute path.
#[test]
fn a_copied_state_directory_resumes_into_its_own_workspace() {
    let tmp = TempDir::new().unwrap();
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
                    // The first call waits to be killed; the resumed one writes its file.
                    "run": "if [ -f \"$KLEENE_CACHE_DIR/started\" ]; then echo m > app/model.txt; else touch \"$KLEENE_CACHE_DIR/started\"; sleep 30; fi",
                    "retry_limit": 1,
                }),
            ),
        ],
    );
    let mut child = spawn_run(tmp.path(), &plan);
    wait_for(
        &tmp.path().join("st/cache/started"),
        "app_model never started",
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let copied = StdCommand::new("cp")
        .current_dir(tmp.path())
        .args(["-a", "st", "copy"])
        .status()
        .unwrap();
    assert!(copied.success());
    let out = kleene(tmp.path())
        .args(["resume", "--state", "copy", "--kill-stale"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("copy/workspace/app/model.txt")).unwrap(),
        "m\n"
    );
    assert!(
        !tmp.path().join("st/workspace/app/model.txt").exists(),
        "the copy wrote into the original's workspace"
    );
    assert_names_its_own_workspace(tmp.path(), "copy");
}

/// `kleene resume` during a run ran the remaining tasks twice and left a journal that never
/// folded again; two `kleene run` at once raced on a fixed temporary file name.
#[test]
fn a_second_writer_is_refused_naming_the_first() {
    let tmp = TempDir::new().unwrap();
    let plan = one_task(
        tmp.path(),
        &["app/MODULE"],
        json!({"run": "touch \"$KLEENE_CACHE_DIR/started\"; sleep 2; mkdir -p app && echo m > app/MODULE"}),
    );
    let mut first = spawn_run(tmp.path(), &plan);
    wait_for(
        &tmp.path().join("st/cache/started"),
        "the run never started",
    );
    for args in [
        vec!["resume", "--state", "st"],
        vec!["run", plan.to_str().unwrap(), "--state", "st"],
        vec!["accept", "--state", "st"],
    ] {
        let out = kleene(tmp.path()).args(&args).output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!("pid {}", first.id())) && err.contains("kleene run"),
            "{args:?}: {err}"
        );
    }
    // Readers need no lock.
    assert_eq!(status(tmp.path()).status.code(), Some(1));
    assert!(first.wait().unwrap().success());
    let st = status(tmp.path());
    assert_eq!(st.status.code(), Some(0), "{}", both(&st));
}

/// A kill between writing run.json and the journal's first record left a state directory
/// that neither `run` nor `resume` would use.
#[test]
fn a_run_killed_before_its_first_record_resumes() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(tmp.path(), vec![module()]);
    assert_eq!(run(tmp.path(), &plan).status.code(), Some(0));
    // What a crash right after run.json leaves: the layout, and no evidence at all.
    std::fs::remove_dir_all(tmp.path().join("st/journal")).unwrap();
    let out = kleene(tmp.path())
        .args(["resume", "--state", "st"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    assert_eq!(status(tmp.path()).status.code(), Some(0));
}

/// A full disk while kleene wrote its own spec file was recorded as the task's rejection, and
/// all four calls were spent in milliseconds. Later it spent the fix attempt drawn just
/// before the spec was written: with a budget of one fix and no retries, the resumed task
/// failed although its fix never ran.
#[test]
fn kleenes_own_write_failure_stops_the_run_without_spending_a_call_or_a_fix() {
    let tmp = TempDir::new().unwrap();
    let plan = one_task(
        tmp.path(),
        &["app/MODULE"],
        json!({
            "run": "mkdir -p app && echo bad > app/MODULE",
            "checks": [{"id": "good", "command": "grep -q good app/MODULE"}],
            "fix": "echo good > app/MODULE",
            "retry_limit": 0,
        }),
    );
    // A directory where the fixer's spec file belongs: writing it fails, even as root, the
    // way a full disk makes it fail.
    let blocker = tmp.path().join("st/specs/app_module_fix_1.call1.md");
    std::fs::create_dir_all(&blocker).unwrap();
    let out = kleene(tmp.path())
        .args([
            "run",
            plan.to_str().unwrap(),
            "--state",
            "st",
            "--max-fixes",
            "1",
        ])
        .output()
        .unwrap();
    let all = both(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.contains("nothing was counted"), "{all}");
    let s = text(&status(tmp.path()).stdout);
    assert!(s.contains("pending") && s.contains("0 calls"), "{s}");
    std::fs::remove_dir(&blocker).unwrap();
    let out = kleene(tmp.path())
        .args(["resume", "--state", "st"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let s = text(&status(tmp.path()).stdout);
    assert!(s.contains("1 call, 1 fix"), "{s}");
}

/// A task that leaves gigabytes in its owned paths is refused with the file named, without
/// kleene reading it (a 300 MB output took 1.2 GB of memory, so a large enough one would
/// exhaust it); marked as scratch, the same output is ignored and the task is accepted.
#[test]
fn a_call_that_writes_more_than_a_gigabyte_is_refused_naming_the_file() {
    let tmp = TempDir::new().unwrap();
    let run_cmd = "mkdir -p app/out && truncate -s 2G app/out/blob.bin && echo ok > app/MODULE";
    let plan = one_task(
        tmp.path(),
        &["app"],
        json!({"run": run_cmd, "retry_limit": 0}),
    );
    let out = run(tmp.path(), &plan);
    let all = both(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(
        all.contains("app/out/blob.bin (2147483648 bytes)") && all.contains("scratch"),
        "{all}"
    );
    let plan = one_task(
        tmp.path(),
        &["app"],
        json!({"run": run_cmd, "retry_limit": 0, "scratch": ["app/out/**"]}),
    );
    let out = kleene(tmp.path())
        .args(["run", plan.to_str().unwrap(), "--state", "st2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
}

/// A closure log whose last line was torn (a crash mid-write) is cut back before the next
/// record is appended, so the torn line does not swallow it and the audit passes.
#[test]
fn a_torn_last_line_of_the_closure_log_is_cut_before_the_next_record() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(tmp.path(), vec![module()]);
    std::fs::create_dir(tmp.path().join("st")).unwrap();
    let log = tmp.path().join("st/closures.jsonl");
    std::fs::write(&log, r#"{"format":2,"task":"app_mod"#).unwrap();
    let out = run(tmp.path(), &plan);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(!text.contains("app_mod\""), "{text}");
    let out = kleene(tmp.path())
        .args(["audit", "--state", "st"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
}

/// The file manifest and task results of the acceptance record in `dir/st`.
fn accepted_manifest(dir: &Path) -> (serde_json::Value, serde_json::Value) {
    let out = accept(dir);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("st/acceptance.json")).unwrap())
            .unwrap();
    (record["files"].clone(), record["task_results"].clone())
}

/// A tiny deterministic generator, so a failing trial can be replayed from its seed.
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// A kill in the first milliseconds left a state directory nobody could use, and a kill mid
/// run could leave a task's processes writing after `resume` had started. Whatever moment
/// SIGKILL hits, `resume` ends in the uninterrupted run's files and results.
#[test]
fn sigkill_at_any_moment_of_the_demo_then_resume_gives_the_same_acceptance() {
    let reference = TempDir::new().unwrap();
    assert_eq!(
        run(reference.path(), &crate::cli::basics::demo_plan())
            .status
            .code(),
        Some(0)
    );
    let (files, _) = accepted_manifest(reference.path());
    let mut seed = 0x5eed_2026_u64;
    for trial in 0..50 {
        let tmp = TempDir::new().unwrap();
        // A fifth of the trials land in the first 20 ms (state directory creation), the rest
        // anywhere in a run of a few hundred milliseconds.
        let delay = if trial % 5 == 0 {
            next(&mut seed) % 20
        } else {
            next(&mut seed) % 400
        };
        let mut child = spawn_run(tmp.path(), &crate::cli::basics::demo_plan());
        std::thread::sleep(Duration::from_millis(delay));
        let _ = child.kill();
        let _ = child.wait();
        let out = if tmp.path().join("st/run.json").exists() {
            kleene(tmp.path())
                .args(["resume", "--state", "st"])
                .output()
                .unwrap()
        } else {
            // Killed before the run was recorded: nothing to resume, so start it.
            run(tmp.path(), &crate::cli::basics::demo_plan())
        };
        assert_eq!(
            out.status.code(),
            Some(0),
            "trial {trial} (killed after {delay} ms): {}",
            both(&out)
        );
        let (got, results) = accepted_manifest(tmp.path());
        assert_eq!(got, files, "trial {trial} (killed after {delay} ms)");
        assert_eq!(results.as_array().map(Vec::len), Some(4), "trial {trial}");
    }
}

/// Two `kleene run` started together: exactly one runs, the other is refused naming it.
#[test]
fn two_runs_started_together_exactly_one_is_refused() {
    for trial in 0..5 {
        let tmp = TempDir::new().unwrap();
        let release = tmp.path().join("release");
        // The running one holds the directory until the test releases it, after the other
        // has been refused: however slow either start, they overlap.
        let plan = one_task(
            tmp.path(),
            &["app/MODULE"],
            json!({"run": format!(
                "while [ ! -e {} ]; do sleep 0.02; done; mkdir -p app && echo m > app/MODULE",
                release.display()
            )}),
        );
        let mut a = spawn_run(tmp.path(), &plan);
        let mut b = spawn_run(tmp.path(), &plan);
        let (a_pid, b_pid) = (a.id(), b.id());
        let started = Instant::now();
        while a.try_wait().unwrap().is_none() && b.try_wait().unwrap().is_none() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "trial {trial}: neither run was refused"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        std::fs::write(&release, "").unwrap();
        let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
        let ok: Vec<usize> = (0..2).filter(|&i| outs[i].status.success()).collect();
        assert_eq!(
            ok.len(),
            1,
            "trial {trial}: {}\n{}",
            both(&outs[0]),
            both(&outs[1])
        );
        let refused = 1 - ok[0];
        let other = if refused == 0 { b_pid } else { a_pid };
        let err = text(&outs[refused].stderr);
        assert!(
            err.contains(&format!("pid {other}")),
            "trial {trial}: {err}"
        );
    }
}

/// After a SIGKILL of `kleene run`, the task's process group kept running (12 of 20 trials)
/// and once overwrote an accepted file after `resume` had started.
#[test]
fn a_task_that_outlives_a_killed_kleene_is_named_or_killed_by_resume() {
    let tmp = TempDir::new().unwrap();
    let late = tmp.path().join("late");
    let release = tmp.path().join("release");
    // The first call waits for a file only the test creates (after `--kill-stale`), so it is
    // still running when `resume` looks however loaded the machine is, and it writes `late`
    // at once if anything let it live.
    let plan = one_task(
        tmp.path(),
        &["app/MODULE"],
        json!({
            "run": format!(
                "if [ \"$KLEENE_CALL\" = 1 ]; then touch \"$KLEENE_CACHE_DIR/started\"; \
                 while [ ! -e {release} ]; do sleep 0.02; done; touch {late}; fi; \
                 mkdir -p app && echo m > app/MODULE",
                release = release.display(),
                late = late.display()
            ),
            // The killed call counts: leave room for the resumed one.
            "retry_limit": 1,
        }),
    );
    // Without a PID namespace the group survives kleene: resume must see it.
    let mut child = StdCommand::new(env!("CARGO_BIN_EXE_kleene"))
        .current_dir(tmp.path())
        .env("KLEENE_CONTAINMENT", "process-group")
        .args(["run", plan.to_str().unwrap(), "--state", "st"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(
        &tmp.path().join("st/cache/started"),
        "the task never started",
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let out = kleene(tmp.path())
        .args(["resume", "--state", "st"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("still running")
            && err.contains("task app_module call 1")
            && err.contains("--kill-stale"),
        "{err}"
    );
    let out = kleene(tmp.path())
        .args(["resume", "--state", "st", "--kill-stale"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    // Released now, a surviving first call would write `late` within milliseconds; a killed
    // one never does. (On a loaded machine a survivor might be late: the test can then pass
    // wrongly, never fail wrongly.)
    std::fs::write(&release, "").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(!late.exists(), "the killed call's process kept running");
}

/// Without a PID namespace a `setsid` child outlives its call. It wrote into the next call's
/// stage (the same directory, reused), and that call's candidate carried what it wrote as
/// the next task's output. Now every call there gets a directory of its own: what such a
/// child writes, by the path it was given or by its working directory, lands nowhere.
#[test]
fn a_command_that_outlives_its_call_never_writes_into_a_later_call_s_stage() {
    let tmp = TempDir::new().unwrap();
    let plant =
        "sleep 0.5; echo planted > \"$KLEENE_WORKSPACE/app/b.txt\"; echo planted > app/c.txt";
    let plan = write_plan(
        tmp.path(),
        vec![
            task(
                "app_module",
                "module",
                &["app/MODULE"],
                &[],
                json!({"run": format!(
                    "mkdir -p app && echo m > app/MODULE && setsid sh -c '{plant}' > /dev/null 2>&1 < /dev/null & sleep 0.2"
                )}),
            ),
            task(
                "app_b",
                "model",
                &["app/b.txt", "app/c.txt"],
                &["app_module"],
                json!({"run": "sleep 1; for f in b c; do test -f app/$f.txt || echo honest > app/$f.txt; done"}),
            ),
        ],
    );
    run_under_process_groups(tmp.path(), &plan);
    for file in ["b", "c"] {
        assert_eq!(
            std::fs::read_to_string(tmp.path().join(format!("st/workspace/app/{file}.txt")))
                .unwrap(),
            "honest\n",
            "app/{file}.txt"
        );
    }
}

/// Under process groups alone a call's stage is kept for the next call once no process
/// started while its commands ran still runs: a chain's calls then share one directory, as
/// under a PID namespace, instead of linking every earlier file into a fresh one.
#[test]
fn under_process_groups_a_call_that_left_nothing_running_hands_its_stage_on() {
    assert_stage_handed_on("");
}

/// What a command leaves in its own process group is killed as its call ends, and a killed
/// process waiting to be reaped runs nothing of its own again: the stage is quiet all the
/// same.
#[test]
fn under_process_groups_what_a_call_left_in_its_group_does_not_keep_its_stage_from_the_next() {
    assert_stage_handed_on(" && { sleep 30 > /dev/null 2>&1 & }");
}

/// Runs a chain of ten tasks under process groups alone, each command followed by `tail`
/// and recording the directory it ran in, with kleene alone in a PID namespace; asserts that
/// every call ran in the first call's directory, each handing it on to the next.
fn assert_stage_handed_on(tail: &str) {
    let tmp = TempDir::new().unwrap();
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let after: Vec<String> = (i > 0).then(|| format!("t{}", i - 1)).into_iter().collect();
            let after: Vec<&str> = after.iter().map(String::as_str).collect();
            task(
                &format!("t{i}"),
                "config",
                &[&format!("out/f{i}")],
                &after,
                json!({"run": format!(
                    "mkdir -p out && echo {i} > out/f{i} && pwd >> \"$KLEENE_CACHE_DIR/stages\"{tail}"
                )}),
            )
        })
        .collect();
    let plan = write_plan(tmp.path(), tasks);
    if !run_alone_under_process_groups(tmp.path(), &plan) {
        return;
    }
    // A fresh stage is named apart from every earlier one, so a name seen twice running is
    // one directory handed on.
    let stages = std::fs::read_to_string(tmp.path().join("st/cache/stages")).unwrap();
    let stages: Vec<&str> = stages.lines().collect();
    assert_eq!(stages.len(), 10, "{stages:?}");
    assert!(
        stages.iter().all(|stage| *stage == stages[0]),
        "a call after the first had a fresh stage: {stages:?}"
    );
}

/// Under process groups alone the last call's stage, once proved quiet, is where the
/// workspace takes its directories from whole, as under a PID namespace.
#[test]
fn under_process_groups_a_quiet_last_stage_gives_the_workspace_its_directory() {
    let tmp = TempDir::new().unwrap();
    let plan = out_x_plan(tmp.path(), "stat -c %i out > \"$KLEENE_CACHE_DIR/inode\"");
    if !run_alone_under_process_groups(tmp.path(), &plan) {
        return;
    }
    let written = std::fs::read_to_string(tmp.path().join("st/cache/inode")).unwrap();
    let projected = std::os::unix::fs::MetadataExt::ino(
        &std::fs::metadata(tmp.path().join("st/workspace/out")).unwrap(),
    );
    assert_eq!(
        written.trim(),
        projected.to_string(),
        "the workspace did not take the stage's directory"
    );
}

/// What a command left running is not moved into the workspace with its directory: a child
/// that outlives its call, writing into its working directory, writes into a stage that was
/// removed, never into the workspace.
#[test]
fn under_process_groups_what_outlives_the_last_call_never_writes_into_the_workspace() {
    let tmp = TempDir::new().unwrap();
    let plan = out_x_plan(
        tmp.path(),
        "(cd out && setsid sh -c 'sleep 0.5; echo late > x' > /dev/null 2>&1 < /dev/null &); \
         sleep 0.1",
    );
    run_under_process_groups(tmp.path(), &plan);
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("st/workspace/out/x")).unwrap(),
        "accepted\n"
    );
}

/// A plan of one task that owns `out/x`, writes `accepted` into it, then runs `then`.
fn out_x_plan(dir: &Path, then: &str) -> std::path::PathBuf {
    write_plan(
        dir,
        vec![task(
            "app_config",
            "config",
            &["out/x"],
            &[],
            json!({"run": format!("mkdir -p out && echo accepted > out/x && {then}")}),
        )],
    )
}

/// Runs `plan` in `dir` under process groups alone, one call at a time, into `st`; asserts
/// that it succeeded.
fn run_under_process_groups(dir: &Path, plan: &Path) {
    let out = kleene(dir)
        .env("KLEENE_CONTAINMENT", "process-group")
        .args(["run", plan.to_str().unwrap(), "--state", "st", "-j", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
}

/// [`run_under_process_groups`] with kleene alone in a PID namespace with its own `/proc`;
/// false (said) where no such namespace can be made here.
///
/// A call's stage is proved quiet when every id handed out while its commands ran is gone,
/// so a process another program starts meanwhile leaves the proof unsure: on a busy machine
/// a quiet stage was proved so only now and then. In a namespace of its own only kleene's
/// processes take ids, and a quiet stage is proved so every time.
///
/// kleene is the namespace's first process, its init (`unshare --fork` starts it so), and
/// behaves as one: what a command leaves in its group becomes kleene's child once the
/// command's shell ends; kleene kills it with the group as it would anywhere, and never
/// reaps it, so it stays a zombie, which the proof counts as gone just as it counts one the
/// machine's init reaped. kleene's exit ends the namespace, killing what is left there: no
/// test that runs here looks at what outlives kleene.
fn run_alone_under_process_groups(dir: &Path, plan: &Path) -> bool {
    let Some(flags) = own_pid_namespace() else {
        // CI runs as root on a machine that makes namespaces: a skip there would hide
        // that the test checked nothing.
        assert!(
            std::env::var_os("CI").is_none(),
            "no PID namespace with its own /proc could be made, and CI must check the proof"
        );
        eprintln!(
            "skipped: no PID namespace with its own /proc can be made here (no unshare, or \
             user namespaces are disabled), and the proof is unsure wherever other programs \
             start processes"
        );
        return false;
    };
    let out = StdCommand::new("unshare")
        .args(flags)
        .arg(env!("CARGO_BIN_EXE_kleene"))
        .current_dir(dir)
        .env("KLEENE_CONTAINMENT", "process-group")
        .args(["run", plan.to_str().unwrap(), "--state", "st", "-j", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    true
}

/// The flags that give `unshare`'s command a PID namespace and a `/proc` of its own here:
/// plainly where this user may (root, as in CI), else inside a user namespace of its own.
/// `--kill-child` ends the namespace with `unshare` should the test be killed.
fn own_pid_namespace() -> Option<&'static [&'static str]> {
    const TRIED: [&[&str]; 2] = [
        &["--pid", "--fork", "--kill-child", "--mount-proc"],
        &[
            "--user",
            "--map-root-user",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
        ],
    ];
    static WORKS: std::sync::OnceLock<Option<&'static [&'static str]>> = std::sync::OnceLock::new();
    *WORKS.get_or_init(|| {
        TRIED.into_iter().find(|flags| {
            StdCommand::new("unshare")
                .args(*flags)
                .arg("true")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
    })
}

/// Two tasks in one stage, one after the other: the first (after `prelude`) leaves a `setsid`
/// child that records its pid in the cache, then would write the second task's file into the
/// stage while that task runs, and sleeps a minute, unless something kills it.
fn stray_plan(dir: &Path, prelude: &str) -> std::path::PathBuf {
    let plant = "echo $$ > \"$KLEENE_CACHE_DIR/stray.pid\"; sleep 0.5; echo planted > \"$KLEENE_WORKSPACE/app/b.txt\"; sleep 60";
    write_plan(
        dir,
        vec![
            task(
                "app_module",
                "module",
                &["app/MODULE"],
                &[],
                json!({"run": format!(
                    "{prelude}mkdir -p app && echo m > app/MODULE && (setsid sh -c '{plant}' > /dev/null 2>&1 < /dev/null &); \
                     while [ ! -s \"$KLEENE_CACHE_DIR/stray.pid\" ]; do sleep 0.01; done"
                )}),
            ),
            task(
                "app_b",
                "model",
                &["app/b.txt"],
                &["app_module"],
                json!({"run": "sleep 1; test -f app/b.txt || echo honest > app/b.txt"}),
            ),
        ],
    )
}

/// Runs [`stray_plan`] with `-j 1` under `containment`; the run must succeed.
fn run_stray_plan(dir: &Path, prelude: &str, containment: &str) {
    let plan = stray_plan(dir, prelude);
    let out = kleene(dir)
        .env("KLEENE_CONTAINMENT", containment)
        .args(["run", plan.to_str().unwrap(), "--state", "st", "-j", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
}

/// The stray of [`stray_plan`] is dead, and the second task's file is its own.
fn assert_stray_killed(dir: &Path) {
    let stray = std::fs::read_to_string(dir.join("st/cache/stray.pid")).unwrap();
    // It sleeps for a minute unless killed: gone now means it was killed.
    let alive = std::fs::read_to_string(format!("/proc/{}/stat", stray.trim()))
        .is_ok_and(|stat| !stat.contains(") Z"));
    assert!(
        !alive,
        "the setsid child {} outlived its call",
        stray.trim()
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("st/workspace/app/b.txt")).unwrap(),
        "honest\n"
    );
}

/// Without a PID namespace but with a writable cgroup v2 hierarchy, each command runs in a
/// cgroup of its own that is killed when it ends: a `setsid` child is gone before the call is
/// judged, so stages are reused as under a PID namespace and nothing it would have written
/// lands anywhere.
#[test]
fn a_cgroup_kills_what_left_the_group_before_the_call_is_judged() {
    let tmp = TempDir::new().unwrap();
    run_stray_plan(
        tmp.path(),
        "cat /proc/self/cgroup > \"$KLEENE_CACHE_DIR/cgroup\"; ",
        "cgroup",
    );
    let cgroup = std::fs::read_to_string(tmp.path().join("st/cache/cgroup")).unwrap();
    if !cgroup.contains("kleene-") {
        eprintln!("skipped: no writable cgroup v2 here ({})", cgroup.trim());
        return;
    }
    assert_stray_killed(tmp.path());
}

/// Where neither a PID namespace nor a writable cgroup is to be had (a container under the
/// default seccomp profile), every call used to get a fresh stage, since a `setsid` child
/// could outlive it: a link per input, 5–6 ms a call at a thousand tasks. The host now
/// serves as a subreaper there: what a command left becomes its child and is killed before
/// the call is judged, so the stage is reused and nothing the child would have written lands.
#[test]
fn a_subreaper_host_kills_what_left_the_group_before_the_call_is_judged() {
    let tmp = TempDir::new().unwrap();
    run_stray_plan(tmp.path(), "", "subreaper");
    assert_stray_killed(tmp.path());
}

/// Under a subreaper host a SIGKILL of kleene reaches the host as its parent-death signal,
/// and the host stops its command (one that ignores SIGTERM too, after its grace) and kills
/// what it left, a `setsid` child included, before it ends. With calls in flight on several
/// threads the signal comes once for each of kleene's threads that ends; a host that took the
/// second as a reason to exit at once left its command's children running.
#[test]
fn nothing_survives_a_killed_kleene_under_a_subreaper_host() {
    let tmp = TempDir::new().unwrap();
    let late = tmp.path().join("late");
    std::fs::create_dir(&late).unwrap();
    let run = |owned: &str| {
        json!({
            "run": format!(
                "if [ \"$KLEENE_CALL\" = 1 ]; then trap '' TERM; \
                 (setsid sh -c 'sleep 1.5; touch {late}/$0' \"$KLEENE_TASK\" > /dev/null 2>&1 < /dev/null &); \
                 setsid sh -c 'sleep 1.5; touch {late}/$0-child' \"$KLEENE_TASK\" > /dev/null 2>&1 < /dev/null & \
                 touch \"$KLEENE_CACHE_DIR/started-$KLEENE_TASK\"; sleep 30; fi; \
                 mkdir -p \"$(dirname {owned})\" && echo m > {owned}",
                late = late.display()
            ),
            // The killed call counts: leave room for the resumed one.
            "retry_limit": 1,
            // Two lanes with no contract between them: both calls run at once.
            "kind": {"lane": "config"},
        })
    };
    let plan = write_plan(
        tmp.path(),
        vec![
            task(
                "app_module",
                "module",
                &["app/MODULE"],
                &[],
                run("app/MODULE"),
            ),
            task(
                "lib_module",
                "module",
                &["lib/MODULE"],
                &[],
                run("lib/MODULE"),
            ),
        ],
    );
    let mut child = StdCommand::new(env!("CARGO_BIN_EXE_kleene"))
        .current_dir(tmp.path())
        .env("KLEENE_CONTAINMENT", "subreaper")
        .args(["run", plan.to_str().unwrap(), "--state", "st", "-j", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    for task in ["app_module", "lib_module"] {
        wait_for(
            &tmp.path().join(format!("st/cache/started-{task}")),
            "a task never started",
        );
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = Instant::now();
    // Right away, a resume waits out the host's grace instead of naming its group as alive.
    let out = kleene(tmp.path())
        .env("KLEENE_CONTAINMENT", "subreaper")
        .args(["resume", "--state", "st", "-j", "2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    std::thread::sleep(Duration::from_millis(2500).saturating_sub(killed.elapsed()));
    let survivors: Vec<_> = std::fs::read_dir(&late)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        survivors.is_empty(),
        "setsid children outlived kleene: {survivors:?}"
    );
}

/// Where a PID namespace is available, nothing a task started survives a SIGKILL of kleene.
#[test]
fn nothing_survives_a_killed_kleene_where_namespaces_work() {
    if namespaces_missing() {
        return;
    }
    let tmp = TempDir::new().unwrap();
    let late = tmp.path().join("late");
    let plan = one_task(
        tmp.path(),
        &["app/MODULE"],
        json!({"run": format!(
            "setsid sh -c 'sleep 1; touch {}' & touch \"$KLEENE_CACHE_DIR/started\"; sleep 30",
            late.display()
        )}),
    );
    let mut child = spawn_run(tmp.path(), &plan);
    wait_for(
        &tmp.path().join("st/cache/started"),
        "the task never started",
    );
    child.kill().unwrap();
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!late.exists(), "a setsid child outlived kleene");
}

/// Whether no PID namespace can be made here (a test that needs one says it skips).
fn namespaces_missing() -> bool {
    let missing = !namespaces_work();
    if missing {
        eprintln!("skipped: no PID namespace on this machine");
    }
    missing
}

/// Whether a PID namespace under a parent-death signal can be made here.
fn namespaces_work() -> bool {
    StdCommand::new("setpriv")
        .args([
            "--pdeathsig",
            "KILL",
            "--",
            "unshare",
            "--pid",
            "--fork",
            "--kill-child",
        ])
        .arg("true")
        .status()
        .is_ok_and(|s| s.success())
}

/// Two tasks in one stage directory, one after the other: the first leaves a `setsid` child
/// that writes into the stage while the second runs, unless something kills it.
fn setsid_plan(dir: &Path) -> std::path::PathBuf {
    write_plan(
        dir,
        vec![
            task(
                "app_module",
                "module",
                &["app/MODULE"],
                &[],
                json!({"run": "mkdir -p app && echo m > app/MODULE && \
                    (setsid sh -c 'sleep 0.4; echo late > \"$0/app/late.txt\"' \"$PWD\" \
                    > /dev/null 2>&1 < /dev/null &); sleep 0.2"}),
            ),
            task(
                "app_model",
                "model",
                &["app/model.txt"],
                &["app_module"],
                json!({"run": "sleep 0.8; echo model > app/model.txt"}),
            ),
        ],
    )
}

/// No file named `late.txt` anywhere under the state directory, half a second on.
fn assert_no_late_write(dir: &Path) {
    std::thread::sleep(Duration::from_millis(500));
    let stray: Vec<_> = walk(&dir.join("st"))
        .into_iter()
        .filter(|p| p.ends_with("late.txt"))
        .collect();
    assert!(
        stray.is_empty(),
        "a setsid child outlived its call: {stray:?}"
    );
}

/// One contained host serves every call of a run, so what a call leaves behind must die with
/// the call: a `setsid` child of the first task, still sleeping when the second task's call
/// runs in the same stage directory, would write a file the second task does not own.
#[test]
fn a_setsid_child_dies_with_its_call_where_namespaces_work() {
    if namespaces_missing() {
        return;
    }
    let tmp = TempDir::new().unwrap();
    let plan = setsid_plan(tmp.path());
    let out = run(tmp.path(), &plan);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    assert_no_late_write(tmp.path());
}

/// A PID namespace needs no program but kleene's own: with a `PATH` that holds only `sh`, a
/// command still runs as a child of its namespace's init, so its shell is PID 2. kleene used
/// to start its host through util-linux's `setpriv` and `unshare`, and fell back to a weaker
/// containment where they were missing.
#[test]
fn a_pid_namespace_needs_no_program_but_kleene() {
    if namespaces_missing() {
        return;
    }
    let tmp = TempDir::new().unwrap();
    // Beside the plan's directory, whose files kleene copies.
    let bin = TempDir::new().unwrap();
    std::os::unix::fs::symlink("/bin/sh", bin.path().join("sh")).unwrap();
    let plan = one_task(
        tmp.path(),
        &["pid.txt"],
        json!({"run": "echo $$ > pid.txt"}),
    );
    let out = kleene(tmp.path())
        .env("PATH", bin.path())
        .args(["run", plan.to_str().unwrap(), "--state", "st"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let pid = std::fs::read_to_string(tmp.path().join("st/workspace/pid.txt")).unwrap();
    assert_eq!(pid.trim(), "2", "{}", both(&out));
}

/// A user who may not make a PID namespace (anyone but root, on most machines) still gets
/// one, inside a user namespace that maps them to themselves: the probe used to fall back to
/// process groups for every such user. Run as `nobody` where the tests run as root.
#[test]
fn an_unprivileged_user_is_contained_too() {
    let uid = StdCommand::new("id").arg("-u").output().unwrap();
    let root = text(&uid.stdout).trim() == "0";
    // kleene, as `nobody` where the tests run as root, in a directory anyone may write.
    let unprivileged = |dir: &Path, plan: &Path| {
        let mut open = std::fs::metadata(dir).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut open, 0o777);
        std::fs::set_permissions(dir, open).unwrap();
        let mut cmd = if root {
            let mut c = StdCommand::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(env!("CARGO_BIN_EXE_kleene"));
            c
        } else {
            StdCommand::new(env!("CARGO_BIN_EXE_kleene"))
        };
        let out = cmd
            .current_dir(dir)
            .env("HOME", dir)
            .args(["run", plan.to_str().unwrap(), "--state", "st"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", both(&out));
        both(&out)
    };
    let tmp = TempDir::new().unwrap();
    let said = unprivileged(tmp.path(), &setsid_plan(tmp.path()));
    // Where this user can make a user namespace with a PID namespace inside, kleene must.
    let mut probe = if root {
        let mut c = StdCommand::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "unshare",
        ]);
        c
    } else {
        StdCommand::new("unshare")
    };
    let nested = probe
        .args(["--user", "--map-current-user", "--pid", "--fork", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !nested {
        eprintln!("skipped: this user may make no user namespace here");
        return;
    }
    assert!(!said.contains("no PID namespace here"), "{said}");
    assert_no_late_write(tmp.path());
    // A subreaper would have killed that child too: the command's shell must be the second
    // process of a namespace of its own, and what it writes must keep the user's own id.
    let tmp = TempDir::new().unwrap();
    let plan = one_task(
        tmp.path(),
        &["pid.txt"],
        // Unconfined: the thread that confines a command takes an id of the namespace too.
        json!({"run": "echo \"$$ $(id -u)\" > pid.txt", "sandbox": false}),
    );
    let said = unprivileged(tmp.path(), &plan);
    let pid = std::fs::read_to_string(tmp.path().join("st/workspace/pid.txt")).unwrap();
    let me = if root {
        "65534".to_owned()
    } else {
        text(&uid.stdout).trim().to_owned()
    };
    assert_eq!(pid.trim(), format!("2 {me}"), "{said}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// A plan over a real tiny Rust crate: the check runs `cargo test --offline` in the stage,
/// `target/**` is scratch, and the exported archive, extracted into an empty directory,
/// passes the same `cargo test --offline`.
#[test]
fn a_rust_crate_is_accepted_and_its_export_passes_its_own_tests() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path();
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("Cargo.toml"),
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    )
    .unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "pub fn add(a: u32, b: u32) -> u32 { a + b }\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() { assert_eq!(super::add(2, 3), 5); }\n}\n",
    )
    .unwrap();
    let plan = dir.join("plan.json");
    let cargo_test = "cargo test --offline --quiet";
    std::fs::write(
        &plan,
        serde_json::to_string_pretty(&json!({
            // cargo writes both; a crate without dependencies needs neither exported.
            "scratch": ["target/**", "Cargo.lock"],
            "tasks": [
                {
                    "id": "manifest", "owner": "shell",
                    "spec": {"intent": "declare the crate"},
                    "owned_paths": ["Cargo.toml"],
                    "run": "cp \"$KLEENE_PLAN_DIR/src/Cargo.toml\" .",
                },
                {
                    "id": "library", "owner": "shell",
                    "spec": {"intent": "add two numbers, with a unit test"},
                    "owned_paths": ["src"],
                    "depends_on": ["manifest"],
                    "run": "mkdir -p src && cp \"$KLEENE_PLAN_DIR/src/lib.rs\" src/lib.rs",
                    "checks": [{"id": "cargo-test", "command": cargo_test}],
                    "timeout_secs": 300,
                },
            ],
        }))
        .unwrap(),
    )
    .unwrap();
    let out = run(dir, &plan);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    assert_eq!(accept(dir).status.code(), Some(0));
    let out = kleene(dir)
        .args(["export", "crate.tar", "--state", "st"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let listing = StdCommand::new("tar")
        .args(["-tf", "crate.tar"])
        .current_dir(dir)
        .output()
        .unwrap();
    let listing = text(&listing.stdout);
    assert!(
        !listing.contains("target/"),
        "scratch was exported: {listing}"
    );
    let extracted = dir.join("extracted");
    std::fs::create_dir(&extracted).unwrap();
    let untar = StdCommand::new("tar")
        .args(["-xf", "../crate.tar"])
        .current_dir(&extracted)
        .status()
        .unwrap();
    assert!(untar.success());
    // The archive keeps the files under its files/ directory, beside the record.
    let root = if extracted.join("files").is_dir() {
        extracted.join("files")
    } else {
        extracted.clone()
    };
    let test = StdCommand::new("sh")
        .args(["-c", cargo_test])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(test.status.success(), "{}", both(&test));
}

/// An owned directory could never be accepted ("writes out/ok.txt, which the task does not
/// own"): owning a directory now owns its subtree.
#[test]
fn owning_a_directory_owns_everything_beneath_it() {
    let tmp = TempDir::new().unwrap();
    let plan = one_task(
        tmp.path(),
        &["out"],
        json!({"run": "mkdir -p out/deep && echo ok > out/ok.txt && echo d > out/deep/d.txt"}),
    );
    let out = run(tmp.path(), &plan);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    assert_eq!(accept(tmp.path()).status.code(), Some(0));
}

/// The CLI blanked the commands out of the plan before digesting it, so changing a command
/// kept the same channel and the acceptance record bound no command.
#[test]
fn changing_a_command_changes_the_channel_and_the_record() {
    let tmp = TempDir::new().unwrap();
    let channel_of = |run_cmd: &str, state: &str| {
        let plan = one_task(tmp.path(), &["app/MODULE"], json!({"run": run_cmd}));
        let out = kleene(tmp.path())
            .args(["run", plan.to_str().unwrap(), "--state", state, "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", both(&out));
        let started: serde_json::Value = text(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .find(|e: &serde_json::Value| e["event"] == "run_started")
            .unwrap();
        started["channel"].as_str().unwrap().to_owned()
    };
    let a = channel_of("mkdir -p app && echo m > app/MODULE", "st1");
    let b = channel_of("mkdir -p app && echo m > app/MODULE # changed", "st2");
    assert_ne!(a, b);
}

/// One flipped bit anywhere in the journal made a read-only command delete accepted
/// evidence. Every command refuses a flipped journal and leaves its bytes as they were.
#[test]
fn every_command_refuses_a_flipped_journal_without_changing_it() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path();
    assert_eq!(
        run(dir, &crate::cli::basics::demo_plan()).status.code(),
        Some(0)
    );
    let journal = journal_file(dir);
    let pristine = std::fs::read(&journal).unwrap();
    let mut seed = 0x0b17_f11b_u64;
    for trial in 0..24 {
        let bit = (next(&mut seed) % (pristine.len() as u64 * 8)) as usize;
        let mut flipped = pristine.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        std::fs::write(&journal, &flipped).unwrap();
        for args in [
            vec!["status", "--state", "st"],
            vec!["accept", "--state", "st"],
            vec!["resume", "--state", "st"],
            vec!["export", "x.tar", "--state", "st"],
        ] {
            let out = kleene(dir).args(&args).output().unwrap();
            assert!(
                !out.status.success(),
                "trial {trial}, bit {bit}, {args:?} accepted a flipped journal: {}",
                both(&out)
            );
            assert_eq!(
                std::fs::read(&journal).unwrap(),
                flipped,
                "trial {trial}, bit {bit}: {args:?} changed the journal"
            );
        }
    }
}

/// A journal that ends in an interrupted write (a torn tail) is read without a byte changed
/// by the commands that only read, and cut only by the writer that resumes.
#[test]
fn readers_leave_a_torn_tail_alone_and_resume_cuts_it() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path();
    assert_eq!(
        run(dir, &crate::cli::basics::demo_plan()).status.code(),
        Some(0)
    );
    let journal = journal_file(dir);
    let whole = std::fs::read(&journal).unwrap();
    // The first bytes of another record: what a crash in the middle of an append leaves.
    let mut torn = whole.clone();
    torn.extend_from_slice(&whole[..37]);
    std::fs::write(&journal, &torn).unwrap();
    for args in [
        vec!["status", "--state", "st"],
        vec!["audit", "--state", "st"],
    ] {
        let out = kleene(dir).args(&args).output().unwrap();
        // Named, as what the journal holds beyond its last whole record, but never cut.
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", both(&out));
        assert!(
            both(&out).contains("37 bytes at byte") && both(&out).contains("no whole record"),
            "{args:?}: {}",
            both(&out)
        );
        assert_eq!(
            std::fs::read(&journal).unwrap(),
            torn,
            "{args:?} changed the journal"
        );
    }
    let out = kleene(dir)
        .args(["resume", "--state", "st"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let after = std::fs::read(&journal).unwrap();
    assert!(after.starts_with(&whole), "resume lost a whole record");
    assert!(!after.ends_with(&whole[..37]), "resume kept the torn tail");
}

/// The journal file of the run in `dir/st` (its one channel).
fn journal_file(dir: &Path) -> std::path::PathBuf {
    std::fs::read_dir(dir.join("st/journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_file())
        .unwrap()
}

/// Unmounts a tmpfs when the test ends, however it ends.
struct Tmpfs(std::path::PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = StdCommand::new("umount").arg(&self.0).status();
    }
}

/// The temporary files (`.NAME.tmp-…`) anywhere under `dir`: what a failed write left.
fn temporary_files(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type().unwrap().is_dir() {
                todo.push(entry.path());
            } else if name.starts_with('.') && name.contains(".tmp-") {
                found.push(entry.path().display().to_string());
            }
        }
    }
    found
}

/// The record digest `kleene accept` writes for the run in `state`.
fn record_digest(dir: &Path, state: &str) -> String {
    let out = kleene(dir)
        .args(["accept", "--state", state])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let record: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(state).join("acceptance.json")).unwrap(),
    )
    .unwrap();
    record["record_digest"].as_str().unwrap().to_owned()
}

/// Disk full burned the retry budget: ENOSPC was recorded as the task's rejection and the
/// run could never finish after space was freed. Later a disk filled while a check ran
/// spent a fix attempt on the failure it caused. On a full disk every level of filling
/// stops the run without counting a call or a fix, and a resume after freeing space ends
/// with the acceptance record of an uninterrupted run.
#[test]
fn a_full_disk_stops_the_run_and_resume_finishes_it_once_space_is_freed() {
    let tmp = TempDir::new().unwrap();
    let mnt = tmp.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = StdCommand::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1600k", "tmpfs"])
        .arg(&mnt)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs here (not root?)");
        return;
    }
    let _guard = Tmpfs(mnt.clone());
    let demo = crate::cli::basics::demo_plan();
    let reference = tmp.path().join("reference");
    let out = kleene(tmp.path())
        .args(["run", "--no-cache", demo.to_str().unwrap(), "--state"])
        .arg(&reference)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let uninterrupted = record_digest(tmp.path(), reference.to_str().unwrap());
    let state = mnt.join("st");
    let st = state.to_str().unwrap();
    let mut stopped = 0;
    // Every 4 KiB from 20 KiB to 84 KiB left free: the run stops while staging, in the
    // journal, in a command's output, before a fix and while writing a spec. Freed, the
    // file system has more than the 1 MiB kleene wants free before it runs a fix.
    for fill_kib in (1516..=1580).step_by(4) {
        let _ = std::fs::remove_dir_all(&state);
        let filler = mnt.join("fill");
        let _ = std::fs::write(&filler, vec![0u8; fill_kib * 1024]);
        let out = kleene(tmp.path())
            .args(["run", "--no-cache", demo.to_str().unwrap(), "--state", st])
            .output()
            .unwrap();
        std::fs::remove_file(&filler).unwrap();
        if out.status.success() {
            continue; // this level left enough room
        }
        let err = text(&out.stderr);
        if !state.join("run.json").exists() {
            // Too full to record the run at all: there is nothing to resume.
            assert!(err.contains("No space left"), "fill {fill_kib} KiB: {err}");
            continue;
        }
        stopped += 1;
        assert!(
            err.contains("nothing was counted") || err.contains("No space left"),
            "fill {fill_kib} KiB: {err}"
        );
        assert_eq!(
            temporary_files(&state),
            Vec::<String>::new(),
            "fill {fill_kib} KiB"
        );
        let out = kleene(tmp.path())
            .args(["resume", "--no-cache", "--state", st])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "fill {fill_kib} KiB: {}",
            both(&out)
        );
        assert_eq!(
            record_digest(tmp.path(), st),
            uninterrupted,
            "fill {fill_kib} KiB: the resumed run's record differs from an uninterrupted one's"
        );
        // The audit trail is whole too: no torn line, no record of a withdrawn call.
        let out = kleene(tmp.path())
            .args(["audit", "--state", st])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "fill {fill_kib} KiB: {}",
            both(&out)
        );
    }
    assert!(
        stopped > 0,
        "no level of filling stopped the run: the test tested nothing"
    );
    // Accepting on a full disk fails, leaves no temporary file, and succeeds once freed.
    let _ = std::fs::remove_dir_all(&state);
    let out = kleene(tmp.path())
        .args(["run", "--no-cache", demo.to_str().unwrap(), "--state", st])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let filler = mnt.join("fill");
    let mut fill = std::fs::File::create(&filler).unwrap();
    while std::io::Write::write_all(&mut fill, &[0u8; 4096]).is_ok() {}
    drop(fill);
    let out = kleene(tmp.path())
        .args(["accept", "--state", st])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", both(&out));
    assert_eq!(temporary_files(&state), Vec::<String>::new());
    std::fs::remove_file(&filler).unwrap();
    assert_eq!(record_digest(tmp.path(), st), uninterrupted);
}

/// A pytest-style check leaves a cache the task does not own: the call was refused and made
/// again, identical, to the end of the budget, without a word about `scratch`. A refusal is
/// a verdict: the second identical one ends the task as `recovery_stalled`, naming the remedy;
/// the same plan with the cache declared as scratch is accepted.
#[test]
fn a_check_that_leaves_an_unowned_cache_stalls_after_two_calls_and_names_scratch() {
    let tmp = TempDir::new().unwrap();
    let cached = |scratch: bool| {
        let mut extra = json!({
            "run": "mkdir -p app && echo m > app/MODULE",
            "checks": [{"id": "tests", "command":
                "mkdir -p .pytest_cache/v && echo '# cache' > .pytest_cache/.gitignore"}],
            "fix": "true",
            "retry_limit": 3,
        });
        if scratch {
            extra["scratch"] = json!([".pytest_cache/**"]);
        }
        extra
    };
    let plan = one_task(tmp.path(), &["app/MODULE"], cached(false));
    let out = run(tmp.path(), &plan);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    assert!(stdout.contains("recovery_stalled"), "{stdout}");
    assert!(
        stdout.contains("scratch") && stdout.contains(".pytest_cache/**"),
        "{stdout}"
    );
    let status = text(&crate::cli::basics::status(tmp.path()).stdout);
    assert!(status.contains("2 calls"), "{status}");
    assert!(status.contains("recovery_stalled"), "{status}");

    let again = TempDir::new().unwrap();
    let plan = one_task(again.path(), &["app/MODULE"], cached(true));
    let out = run(again.path(), &plan);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
}

/// `kleene run` on a directory that holds a run that is not finished (interrupted before
/// its last task) names `resume`, and `--restart` for after editing the plan: a run that
/// could go on is never replaced unasked.
#[test]
fn a_second_run_over_an_unfinished_one_offers_resume_and_restart() {
    let tmp = TempDir::new().unwrap();
    let plan = one_task(
        tmp.path(),
        &["app/MODULE"],
        json!({"run": "mkdir -p app && echo m > app/MODULE"}),
    );
    assert_eq!(run(tmp.path(), &plan).status.code(), Some(0));
    // Cut the journal back to the run's start: the task is pending again.
    let info: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("st/run.json")).unwrap()).unwrap();
    let channel = kleene::id::ChannelId::new(info["channel"].as_str().unwrap()).unwrap();
    let journal = kleene::batch::FileJournal::open_read_only(tmp.path().join("st/journal"));
    let first = journal.record_ends(&channel).unwrap()[0];
    let log = journal.path_for(&channel);
    let bytes = std::fs::read(&log).unwrap();
    std::fs::write(&log, &bytes[..first]).unwrap();
    let out = run(tmp.path(), &plan);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--restart") && err.contains("kleene resume"),
        "{err}"
    );
}

/// The workspace the accepted files are written into is the user's: a link planted there (a
/// directory or a file of an accepted path) must be refused, never written through.
#[test]
fn the_workspace_projection_never_writes_through_a_planted_link() {
    for planted in ["dir", "file"] {
        let tmp = TempDir::new().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("MODULE"), "kept").unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        if planted == "dir" {
            std::os::unix::fs::symlink(&outside, ws.join("app")).unwrap();
        } else {
            std::fs::create_dir(ws.join("app")).unwrap();
            std::os::unix::fs::symlink(outside.join("MODULE"), ws.join("app/MODULE")).unwrap();
        }
        let plan = one_task(
            tmp.path(),
            &["app/MODULE"],
            json!({"run": "mkdir -p app && echo accepted > app/MODULE"}),
        );
        let out = kleene(tmp.path())
            .args([
                "run",
                plan.to_str().unwrap(),
                "--state",
                "st",
                "--workspace",
                "ws",
            ])
            .output()
            .unwrap();
        let all = both(&out);
        assert_eq!(out.status.code(), Some(0), "{planted}: {all}");
        let why = if planted == "dir" {
            "is not a directory (a link or a file)"
        } else {
            "is a link"
        };
        assert!(
            all.contains("failed to write the workspace") && all.contains(why),
            "{planted}: {all}"
        );
        assert_eq!(
            std::fs::read_to_string(outside.join("MODULE")).unwrap(),
            "kept",
            "{planted}: written through the link"
        );
    }
}

/// The workspace's directories that a run's last stage holds exactly are moved from it whole
/// instead of being written file by file; what lands there must still be only the accepted
/// files, each a file of its own with the mode a written one gets: never a scratch file,
/// never a second link to one inode (a link the call made, or the object store's that a
/// stage's inputs share), never the mode the command chose.
#[test]
fn what_the_workspace_takes_from_a_stage_is_only_accepted_files_of_their_own() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(
        tmp.path(),
        vec![
            task(
                "lib_module",
                "module",
                &["lib/a.txt", "lib/b.txt"],
                &[],
                json!({
                    "run": "mkdir -p lib/target && echo same > lib/a.txt && ln lib/a.txt lib/b.txt \
                            && echo junk > lib/target/junk",
                    "scratch": ["lib/target/**"],
                }),
            ),
            task(
                "app_model",
                "model",
                &["app/x.txt", "app/deep/y.txt"],
                &["lib_module"],
                json!({
                    "run": "umask 077; mkdir -p app/deep app/cache && cat lib/a.txt > app/x.txt \
                            && echo y > app/deep/y.txt && echo c > app/cache/tmp",
                    "scratch": ["app/cache/**"],
                }),
            ),
        ],
    );
    let out = kleene(tmp.path())
        .args(["run", plan.to_str().unwrap(), "--state", "st", "-j", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let ws = tmp.path().join("st/workspace");
    let mut files: Vec<String> = walk(&ws)
        .iter()
        .filter(|p| p.is_file())
        .map(|p| p.strip_prefix(&ws).unwrap().display().to_string())
        .collect();
    files.sort();
    assert_eq!(
        files,
        ["app/deep/y.txt", "app/x.txt", "lib/a.txt", "lib/b.txt"]
    );
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let umask = status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .map_or(0o022, |m| u32::from_str_radix(m.trim(), 8).unwrap());
    for file in &files {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(ws.join(file)).unwrap();
        assert_eq!(meta.nlink(), 1, "{file} shares its inode");
        assert_eq!(meta.mode() & 0o7777, 0o666 & !umask, "{file}'s mode");
    }
    for dir in ["app", "app/deep", "lib"] {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(ws.join(dir)).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o777 & !umask, "{dir}'s mode");
    }
    assert_eq!(
        std::fs::read_to_string(ws.join("app/x.txt")).unwrap(),
        "same\n"
    );
}

/// With a cgroup per command (no PID namespace), a `setsid` child outlived a kleene killed
/// with SIGKILL, after its process group had ended: `resume` found no live group in its
/// records and started while the child could still write. The record names the command's
/// cgroup now, and a cgroup that still holds a process counts as alive.
#[test]
fn a_setsid_child_that_outlives_a_killed_kleene_in_its_cgroup_is_named_or_killed_by_resume() {
    if kleene::process::containment() != kleene::process::Containment::Cgroup {
        eprintln!("skipped: no writable cgroup v2 with cgroup.kill here");
        return;
    }
    let tmp = TempDir::new().unwrap();
    let (late, release, leader) = (
        tmp.path().join("late"),
        tmp.path().join("release"),
        tmp.path().join("leader-ends"),
    );
    // The first call starts a child that leaves its process group, then waits until the test
    // lets its own group end, after kleene is gone: only the cgroup still holds the child.
    let plan = one_task(
        tmp.path(),
        &["app/MODULE"],
        json!({
            "run": format!(
                "if [ \"$KLEENE_CALL\" = 1 ]; then \
                 setsid sh -c 'while [ ! -e {release} ]; do sleep 0.02; done; touch {late}' & \
                 touch \"$KLEENE_CACHE_DIR/started\"; \
                 while [ ! -e {leader} ]; do sleep 0.02; done; exit 0; fi; \
                 mkdir -p app && echo m > app/MODULE",
                release = release.display(),
                late = late.display(),
                leader = leader.display(),
            ),
            "retry_limit": 1,
        }),
    );
    let mut child = StdCommand::new(env!("CARGO_BIN_EXE_kleene"))
        .current_dir(tmp.path())
        .env("KLEENE_CONTAINMENT", "cgroup")
        .args(["run", plan.to_str().unwrap(), "--state", "st"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(
        &tmp.path().join("st/cache/started"),
        "the task never started",
    );
    child.kill().unwrap();
    child.wait().unwrap();
    // The command's own group ends; its setsid child lives on in the cgroup.
    std::fs::write(&leader, "").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let out = kleene(tmp.path())
        .env("KLEENE_CONTAINMENT", "cgroup")
        .args(["resume", "--state", "st"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("still running") && err.contains("task app_module call 1"),
        "{err}"
    );
    let out = kleene(tmp.path())
        .env("KLEENE_CONTAINMENT", "cgroup")
        .args(["resume", "--state", "st", "--kill-stale"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    std::fs::write(&release, "").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(!late.exists(), "the setsid child kept running");
}
