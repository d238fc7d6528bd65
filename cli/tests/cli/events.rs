//! `kleene --json run`: one JSON object per line, each saying when it happened, and what ends
//! saying how long it took, with several calls in flight.

use serde_json::{Value, json};
use tempfile::TempDir;

use crate::cli::basics::{kleene, text, write_plan};

#[test]
fn json_events_carry_timestamps_and_durations_with_calls_in_flight() {
    let tmp = TempDir::new().unwrap();
    let tasks = (0..3)
        .map(|i| {
            json!({
                "id": format!("nap_{i}"),
                "kind": {"lane": "config"},
                "owner": "shell",
                "spec": {"intent": format!("nap {i}")},
                "owned_paths": [format!("out/{i}.txt")],
                "retry_limit": 0,
                "run": format!("sleep 0.3 && mkdir -p out && echo {i} > out/{i}.txt"),
                "checks": [{"id": "present", "command": format!("test -s out/{i}.txt")}],
            })
        })
        .collect();
    let plan = write_plan(tmp.path(), tasks);
    let out = kleene(tmp.path())
        .args([
            "--json",
            "run",
            plan.to_str().unwrap(),
            "--state",
            "st",
            "-j",
            "3",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let named =
        |name: &str| -> Vec<&Value> { events.iter().filter(|e| e["event"] == name).collect() };

    let mut last_elapsed = 0;
    for event in &events {
        assert_eq!(event["format"], 1, "{event}");
        let ts = event["ts"]
            .as_str()
            .unwrap_or_else(|| panic!("no ts: {event}"));
        assert!(
            ts.starts_with("20") && ts.ends_with('Z') && ts.len() == 24,
            "{ts}"
        );
        if event["event"] != "message" {
            let elapsed = event["elapsed_ms"].as_u64().unwrap();
            assert!(elapsed >= last_elapsed, "elapsed_ms went back: {event}");
            last_elapsed = elapsed;
        }
    }
    // The three calls were in flight together: each started before any finished.
    let first_done = events
        .iter()
        .position(|e| e["event"] == "task_accepted")
        .unwrap();
    let starts: Vec<usize> = (0..events.len())
        .filter(|&i| events[i]["event"] == "task_started")
        .collect();
    assert_eq!(starts.len(), 3);
    assert!(starts.iter().all(|&i| i < first_done), "{events:#?}");

    for accepted in named("task_accepted") {
        assert!(
            accepted["duration_ms"].as_u64().unwrap() >= 300,
            "{accepted}"
        );
    }
    let finished = named("command_finished");
    assert_eq!(finished.len(), 6, "a run and a check per task");
    for done in &finished {
        assert_eq!(done["status"], "exit code 0");
        assert_eq!(done["task"], done["root_task"]);
        let took = done["duration_ms"].as_u64().unwrap();
        if done["role"] == "run" {
            assert!(took >= 300, "{done}");
        }
    }
    let run = named("run_finished");
    assert_eq!(run.len(), 1);
    assert_eq!(run[0]["outcome"], "accepted");
    assert!(run[0]["duration_ms"].as_u64().unwrap() >= 300);
}
