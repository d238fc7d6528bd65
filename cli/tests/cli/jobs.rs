//! `kleene run -j N`: calls in flight together, each in its own staged workspace, the run's
//! fix budget shared by all of them.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use tempfile::TempDir;

use crate::cli::basics::{kleene, module, repairable, task, text, write_plan};

/// `kleene run PLAN -j JOBS` into a fresh state directory.
fn run_with_jobs(dir: &Path, plan: &Path, state: &str, jobs: &str) {
    let out = kleene(dir)
        .args(["run", plan.to_str().unwrap(), "--state", state, "-j", jobs])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}

/// A task's command that naps a second between writing when it started and when it ended
/// (nanoseconds since the epoch) under `log` (which its task's sandbox must give), then
/// writes its output.
fn nap_logged(log: &Path, id: &str) -> String {
    let log = log.display();
    format!(
        "date +%s%N > {log}/{id}.start && sleep 1 && date +%s%N > {log}/{id}.end \
         && mkdir -p out && echo {id} > out/{id}.txt"
    )
}

/// When the task `id` of a [`nap_logged`] plan started and ended, by its own clock.
fn span(log: &Path, id: &str) -> (u128, u128) {
    let read = |edge: &str| -> u128 {
        let name = format!("{id}.{edge}");
        let text = std::fs::read_to_string(log.join(&name)).expect(&name);
        text.trim().parse().expect(&name)
    };
    (read("start"), read("end"))
}

/// The most of these tasks whose naps overlapped at one moment.
fn most_at_once(log: &Path, ids: &[&str]) -> usize {
    let mut edges: Vec<(u128, i32)> = ids
        .iter()
        .flat_map(|id| {
            let (start, end) = span(log, id);
            [(start, 1), (end, -1)]
        })
        .collect();
    // An end sorts before a start at the same instant: touching naps do not overlap.
    edges.sort_unstable();
    let (mut now, mut most) = (0, 0);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    usize::try_from(most).unwrap()
}

#[test]
fn eight_one_second_tasks_with_eight_jobs_all_run_at_once() {
    let tmp = TempDir::new().unwrap();
    let log = TempDir::new().unwrap();
    let ids: Vec<String> = (0..8).map(|i| format!("sleep_{i}")).collect();
    let tasks = ids
        .iter()
        .map(|id| {
            json!({
                "id": id,
                "kind": {"lane": "config"},
                "owner": "shell",
                "spec": {"intent": id},
                "owned_paths": [format!("out/{id}.txt")],
                "retry_limit": 0,
                "run": nap_logged(log.path(), id),
                "sandbox": {"write": [log.path()]},
            })
        })
        .collect();
    run_with_jobs(tmp.path(), &write_plan(tmp.path(), tasks), "st", "8");
    for id in &ids {
        let file = tmp.path().join(format!("st/workspace/out/{id}.txt"));
        assert_eq!(std::fs::read_to_string(&file).unwrap(), format!("{id}\n"));
    }
    // One task's time, not eight: every nap overlapped every other. Counted by the tasks'
    // own clocks, which a loaded machine cannot make look serial or parallel; the wall time
    // against `xargs -P` is the `cli_parallel` bench's.
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    assert_eq!(most_at_once(log.path(), &ids), 8);
}

#[test]
fn calls_in_flight_together_never_spend_more_fixes_than_the_run_has() {
    let tmp = TempDir::new().unwrap();
    // Both calls are in flight before either spawns its fix.
    let repairable =
        |id: &str, file: &str| repairable(id, file, &format!("sleep 0.3; echo bad > {file}"));
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
            "-j",
            "2",
        ])
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert_eq!(
        stdout.matches("accepted after 1 fix").count(),
        1,
        "{stdout}"
    );
    assert!(
        stdout.contains("recovery_exhausted (the run's 1 fix attempt(s) are used)"),
        "{stdout}"
    );
}

/// The evidence digest `kleene status --json` reports for a run of the demo with `jobs`.
fn demo_digest(jobs: &str) -> String {
    let tmp = TempDir::new().unwrap();
    let plan = crate::cli::basics::demo_plan();
    let out = kleene(tmp.path())
        .args(["run", plan.to_str().unwrap(), "--state", "st", "-j", jobs])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let out = kleene(tmp.path())
        .args(["status", "--state", "st", "--json"])
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    status["evidence_digest"].as_str().unwrap().to_owned()
}

#[test]
fn the_demo_gives_the_same_evidence_with_one_job_and_with_four() {
    assert_eq!(demo_digest("1"), demo_digest("4"));
}

#[test]
fn a_diamond_of_one_second_tasks_with_three_jobs_follows_its_critical_path() {
    let tmp = TempDir::new().unwrap();
    let log = TempDir::new().unwrap();
    let node = |id: &str, after: &[&str]| {
        json!({
            "id": id,
            "kind": {"lane": "config"},
            "owner": "shell",
            "spec": {"intent": format!("sleep {id}")},
            "owned_paths": [format!("out/{id}.txt")],
            "depends_on": after,
            "retry_limit": 0,
            "run": nap_logged(log.path(), id),
                "sandbox": {"write": [log.path()]},
        })
    };
    let plan = write_plan(
        tmp.path(),
        vec![
            node("a", &[]),
            node("b", &["a"]),
            node("c", &["a"]),
            node("d", &["a"]),
            node("e", &["b", "c", "d"]),
        ],
    );
    run_with_jobs(tmp.path(), &plan, "st", "3");
    // The critical path: a, then b, c and d together, then e; three naps, not five.
    let (_, a_end) = span(log.path(), "a");
    let middle = ["b", "c", "d"].map(|id| span(log.path(), id));
    let (e_start, _) = span(log.path(), "e");
    assert!(
        middle.iter().all(|&(start, _)| start >= a_end),
        "{middle:?}"
    );
    assert!(middle.iter().all(|&(_, end)| end <= e_start), "{middle:?}");
    assert_eq!(most_at_once(log.path(), &["b", "c", "d"]), 3);
}

/// Ctrl-C with several calls in flight stops every one of them (their process groups), keeps
/// their reservations, and `resume` makes each call again, still concurrently.
#[test]
fn ctrl_c_stops_every_call_in_flight_and_resume_finishes_them() {
    let tmp = TempDir::new().unwrap();
    let marks = tmp.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    let m = marks.display();
    // The first call of each task says it started and then sleeps far longer than the test
    // waits; the resumed call says it runs and waits for the other two to say so too, so
    // the three can only finish if they run at once. No sleep window decides the outcome.
    let tasks = (0..3)
        .map(|i| {
            let file = format!("app/f{i}");
            let run = format!(
                "if [ \"$KLEENE_CALL\" = 1 ]; then touch {m}/started{i}; sleep 120; fi; \
                 touch {m}/resumed{i}; n=0; \
                 until [ -e {m}/resumed0 ] && [ -e {m}/resumed1 ] && [ -e {m}/resumed2 ]; do \
                 n=$((n+1)); [ $n -gt 3000 ] && exit 1; sleep 0.01; done; \
                 mkdir -p app; echo {i} > {file}"
            );
            task(
                &format!("app_t{i}"),
                "model",
                &[file.as_str()],
                &[],
                // An interrupted call counts: one more is left for the resume.
                json!({"run": run, "retry_limit": 1, "sandbox": {"write": [&marks]}}),
            )
        })
        .collect();
    let plan = write_plan(tmp.path(), tasks);
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_kleene"))
        .current_dir(tmp.path())
        .args(["run", plan.to_str().unwrap(), "--state", "st", "-j", "3"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let waiting = Instant::now();
    while !(0..3).all(|i| marks.join(format!("started{i}")).exists()) {
        assert!(
            waiting.elapsed() < Duration::from_secs(60),
            "the three calls never ran at once"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let interrupted = Instant::now();
    let signalled = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(signalled.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    // Every call was stopped, not waited for (each sleeps two minutes).
    assert!(
        interrupted.elapsed() < Duration::from_secs(60),
        "{:?}",
        interrupted.elapsed()
    );
    assert!(!tmp.path().join("st/workspace/app").exists());

    let out = kleene(tmp.path())
        .args(["resume", "--state", "st", "-j", "3"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let status = kleene(tmp.path())
        .args(["status", "--state", "st"])
        .output()
        .unwrap();
    let status = text(&status.stdout);
    assert_eq!(
        status.matches("accepted         2 calls").count(),
        3,
        "{status}"
    );
}

/// A run with two jobs and 2001 tasks left 19 closure records out of its closure log: one
/// call's torn-tail check cut away a line another call was still writing, so `kleene audit`
/// failed on a run nothing had interrupted.
#[test]
fn calls_in_flight_together_keep_every_closure_record() {
    let tmp = TempDir::new().unwrap();
    let mut tasks = vec![module()];
    for i in 0..300 {
        tasks.push(task(
            &format!("app_t{i}"),
            "model",
            &[&format!("app/t{i}.txt")],
            &["app_module"],
            json!({"run": format!("echo {i} > app/t{i}.txt")}),
        ));
    }
    let plan = write_plan(tmp.path(), tasks);
    run_with_jobs(tmp.path(), &plan, "st", "4");
    let out = kleene(tmp.path())
        .args(["audit", "--state", "st"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let log = std::fs::read_to_string(tmp.path().join("st/closures.jsonl")).unwrap();
    assert_eq!(log.lines().count(), 301);
}

/// Every command reads an empty stdin, as it always has, whether its shell was held while its
/// call's reservation synced or not (where a sync takes long, as on a disk, a call's shell
/// starts before its reservation is durable and waits on its stdin until it is).
#[test]
fn every_command_reads_an_empty_stdin_held_or_not() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path();
    let tasks = (0..4)
        .map(|i| {
            let file = format!("t{i}.txt");
            task(
                &format!("t{i}"),
                "config",
                &[file.as_str()],
                &[],
                // A stdin left open would keep `cat` waiting until the timeout.
                json!({"run": format!("cat > {file} && echo read >> {file}"), "timeout_secs": 30}),
            )
        })
        .collect();
    let plan = write_plan(dir, tasks);
    for jobs in ["1", "2"] {
        let state = format!("st{jobs}");
        run_with_jobs(dir, &plan, &state, jobs);
        for i in 0..4 {
            let file = dir.join(&state).join(format!("workspace/t{i}.txt"));
            assert_eq!(
                std::fs::read_to_string(&file).unwrap(),
                "read\n",
                "-j {jobs}: t{i}"
            );
        }
    }
}
