//! `kleene run -j N`: calls in flight together, each in its own staged workspace, the run's
//! fix budget shared by all of them.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use tempfile::TempDir;

use crate::cli::{kleene, module, repairable, task, text, write_plan};

/// `count` commands `sh -c CMD` started at once by hand, waited for: what the same work costs
/// this machine right now, without kleene (a loaded machine slows both alike).
fn by_hand(count: usize, command: &str) -> Duration {
    let started = Instant::now();
    let children: Vec<_> = (0..count)
        .map(|_| {
            std::process::Command::new("sh")
                .args(["-c", command])
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        child.wait().unwrap();
    }
    started.elapsed()
}

/// `kleene run PLAN -j JOBS` into a fresh state directory: how long it took.
fn timed_run(dir: &Path, plan: &Path, state: &str, jobs: &str) -> Duration {
    let started = Instant::now();
    let out = kleene(dir)
        .args(["run", plan.to_str().unwrap(), "--state", state, "-j", jobs])
        .output()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    took
}

fn sleepers(nap: &str) -> Vec<serde_json::Value> {
    (0..8)
        .map(|i| {
            json!({
                "id": format!("sleep_{i}"),
                "kind": {"lane": "config"},
                "owner": "shell",
                "spec": {"intent": format!("sleep {i}")},
                "owned_paths": [format!("out/{i}.txt")],
                "retry_limit": 0,
                "run": format!("{nap} && mkdir -p out && echo {i} > out/{i}.txt"),
            })
        })
        .collect()
}

#[test]
fn eight_one_second_tasks_with_eight_jobs_take_one_second() {
    let tmp = TempDir::new().unwrap();
    // kleene's own cost for the same plan with nothing to wait for, and the naps by hand:
    // on a quiet machine about 0.05 s and 1.0 s, so the bound is the 1.15 s.
    let overhead = timed_run(
        tmp.path(),
        &write_plan(tmp.path(), sleepers("true")),
        "st0",
        "8",
    );
    let naps = by_hand(8, "sleep 1");
    let plan = write_plan(tmp.path(), sleepers("sleep 1"));
    let took = timed_run(tmp.path(), &plan, "st", "8");
    for i in 0..8 {
        let file = tmp.path().join(format!("st/workspace/out/{i}.txt"));
        assert_eq!(std::fs::read_to_string(&file).unwrap(), format!("{i}\n"));
    }
    // One task's time, not eight: serial calls would take 8 s.
    assert!(
        took <= naps + overhead + Duration::from_millis(100),
        "took {took:?}; the naps by hand {naps:?}, kleene without naps {overhead:?}"
    );
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
    let plan = crate::cli::demo_plan();
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
fn a_diamond_of_one_second_tasks_with_three_jobs_takes_its_critical_path() {
    let tmp = TempDir::new().unwrap();
    let diamond = |nap: &str| {
        let node = |id: &str, after: &[&str]| {
            json!({
                "id": id,
                "kind": {"lane": "config"},
                "owner": "shell",
                "spec": {"intent": format!("sleep {id}")},
                "owned_paths": [format!("out/{id}.txt")],
                "depends_on": after,
                "retry_limit": 0,
                "run": format!("{nap} && mkdir -p out && echo {id} > out/{id}.txt"),
            })
        };
        write_plan(
            tmp.path(),
            vec![
                node("a", &[]),
                node("b", &["a"]),
                node("c", &["a"]),
                node("d", &["a"]),
                node("e", &["b", "c", "d"]),
            ],
        )
    };
    let overhead = timed_run(tmp.path(), &diamond("true"), "st0", "3");
    let nap = by_hand(1, "sleep 1");
    let took = timed_run(tmp.path(), &diamond("sleep 1"), "st", "3");
    // The critical path a, then b/c/d together, then e: three naps, not five (on a quiet
    // machine the bound is about 3.25 s).
    assert!(
        took <= nap * 3 + overhead + Duration::from_millis(150),
        "took {took:?}; one nap by hand {nap:?}, kleene without naps {overhead:?}"
    );
}

/// Ctrl-C with several calls in flight stops every one of them (their process groups), keeps
/// their reservations, and `resume` makes each call again, still concurrently.
#[test]
fn ctrl_c_stops_every_call_in_flight_and_resume_finishes_them() {
    let tmp = TempDir::new().unwrap();
    let tasks = (0..3)
        .map(|i| {
            let file = format!("app/f{i}");
            task(
                &format!("app_t{i}"),
                "model",
                &[file.as_str()],
                &[],
                // An interrupted call counts: one more is left for the resume.
                json!({"run": format!("sleep 2; mkdir -p app; echo {i} > {file}"), "retry_limit": 1}),
            )
        })
        .collect();
    let plan = write_plan(tmp.path(), tasks);
    let started = Instant::now();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_kleene"))
        .current_dir(tmp.path())
        .args(["run", plan.to_str().unwrap(), "--state", "st", "-j", "3"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let signalled = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(signalled.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    // Every call was stopped, not waited for (each sleeps 2 s).
    assert!(
        started.elapsed() < Duration::from_millis(1800),
        "{:?}",
        started.elapsed()
    );
    assert!(!tmp.path().join("st/workspace/app").exists());

    let started = Instant::now();
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
    assert!(
        started.elapsed() < Duration::from_millis(3500),
        "{:?}",
        started.elapsed()
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
