//! A failure's evidence where the user looks: the failed check's output in `run`'s terminal
//! line, in `status` and in `audit`; a fix's own output in `audit`; a run's graph coloured
//! by how each task ended.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tempfile::TempDir;

use super::basics::{demo_plan, kleene, module, run, status, task, text, write_plan};

/// The line the failing check prints on stderr, after a line on stdout.
const DISTINCT: &str = "expected 12000, got 10700";

/// The app module, a model whose check fails with [`DISTINCT`] and has no fix, and a page
/// after the model (drained when it fails).
fn failing_plan(dir: &Path) -> PathBuf {
    write_plan(
        dir,
        vec![
            module(),
            task(
                "app_model",
                "model",
                &["app/model.txt"],
                &["app_module"],
                json!({
                    "run": "echo 10700 > app/model.txt",
                    "checks": [{
                        "id": "totals",
                        "command": format!("echo 'checking totals'; echo '{DISTINCT}' >&2; exit 1"),
                    }],
                }),
            ),
            task(
                "app_page",
                "page",
                &["app/index.html"],
                &["app_model"],
                json!({"run": "echo hi > app/index.html"}),
            ),
        ],
    )
}

fn output(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = kleene(dir).args(args).output().unwrap();
    let stdout = text(&out.stdout);
    (out.status.code(), format!("{stdout}{}", text(&out.stderr)))
}

/// `kleene run`, `status` and `audit` each show the failed check's output under the task,
/// indented, and the JSON forms carry it as a field.
#[test]
fn a_failed_checks_output_is_shown_by_run_status_and_audit() {
    let tmp = TempDir::new().unwrap();
    let plan = failing_plan(tmp.path());
    let out = run(tmp.path(), &plan);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let failed = stdout
        .lines()
        .position(|l| l.starts_with("app_model: FAILED: call 1 refused"))
        .unwrap_or_else(|| panic!("no failure line: {stdout}"));
    let under: Vec<&str> = stdout.lines().skip(failed + 1).take(5).collect();
    assert!(
        under[0].starts_with("    check totals (blocker): `echo 'checking totals';")
            && under[0].ends_with("failed with exit code 1"),
        "{stdout}"
    );
    assert!(
        under.contains(&format!("    | {DISTINCT}").as_str()),
        "{stdout}"
    );
    assert!(under.contains(&"    | checking totals"), "{stdout}");

    let out = status(tmp.path());
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    let row = shown
        .lines()
        .position(|l| l.starts_with("  app_model ") && l.contains("failed check(s): totals"))
        .unwrap_or_else(|| panic!("no row: {shown}"));
    let under: Vec<&str> = shown.lines().skip(row + 1).take(5).collect();
    assert!(
        under[0].starts_with("      check totals (blocker): "),
        "{shown}"
    );
    assert!(
        under.contains(&format!("      | {DISTINCT}").as_str()),
        "{shown}"
    );
    // The table goes on after the excerpt.
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("  app_page ") && l.contains("drained")),
        "{shown}"
    );

    let (_, json) = output(tmp.path(), &["status", "--state", "st", "--json"]);
    let status: Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
    let model = status["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task"] == "app_model")
        .unwrap();
    assert_eq!(model["evidence"][0]["check"], "totals", "{json}");
    assert!(
        model["evidence"][0]["lines"]
            .as_array()
            .unwrap()
            .contains(&json!(DISTINCT)),
        "{json}"
    );

    let (code, audit) = output(tmp.path(), &["audit", "--state", "st"]);
    assert_eq!(code, Some(0), "{audit}");
    let post = audit
        .lines()
        .position(|l| l.contains("post_validated") && l.contains("failed: totals"))
        .unwrap_or_else(|| panic!("no failed post-validation: {audit}"));
    let under: Vec<&str> = audit.lines().skip(post + 1).take(5).collect();
    assert!(
        under[0].starts_with("        check totals (blocker): "),
        "{audit}"
    );
    assert!(
        under.contains(&format!("        | {DISTINCT}").as_str()),
        "{audit}"
    );

    // A record changed since the run is not shown as the call's evidence (`audit` names it).
    let log = tmp.path().join("st/closures.jsonl");
    let edited = std::fs::read_to_string(&log)
        .unwrap()
        .replace("got 10700", "got 99999");
    std::fs::write(&log, edited).unwrap();
    let shown = text(&super::basics::status(tmp.path()).stdout);
    assert!(shown.contains("failed check(s): totals"), "{shown}");
    assert!(
        !shown.contains("got 99999") && !shown.contains("| "),
        "{shown}"
    );

    // The run's JSON event carries it too.
    let (_, json) = output(
        tmp.path(),
        &["run", plan.to_str().unwrap(), "--state", "st2", "--json"],
    );
    let failed: Value = json
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["event"] == "task_failed")
        .unwrap_or_else(|| panic!("no task_failed event: {json}"));
    assert_eq!(failed["task"], "app_model");
    assert_eq!(failed["evidence"][0]["check"], "totals", "{failed}");
    assert!(
        failed["evidence"][0]["lines"]
            .as_array()
            .unwrap()
            .contains(&json!(DISTINCT)),
        "{failed}"
    );
}

/// The demo's one fix: `audit` shows what the fix itself printed under its execution, and
/// `audit --json` carries the recorded output.
#[test]
fn audit_shows_a_fixs_own_output() {
    let tmp = TempDir::new().unwrap();
    let (code, out) = output(
        tmp.path(),
        &["run", demo_plan().to_str().unwrap(), "--state", "st"],
    );
    assert_eq!(code, Some(0), "{out}");
    let (code, audit) = output(tmp.path(), &["audit", "--state", "st"]);
    assert_eq!(code, Some(0), "{audit}");
    let executed = audit
        .lines()
        .position(|l| l.contains(" executed ") && l.contains("billing_service_fix_1"))
        .unwrap_or_else(|| panic!("no fix execution: {audit}"));
    let under: Vec<&str> = audit.lines().skip(executed + 1).take(3).collect();
    assert!(
        under[0].starts_with(
            "        output: fix: `sh \"$KLEENE_PLAN_DIR/fix_vat.sh\"` finished with exit code 0"
        ),
        "{audit}"
    );
    assert!(
        under.iter().any(|l| l.starts_with("        | fix_vat: ")
            && l.ends_with("expects gross 10000 = 12000, so VAT_PERCENT=20")),
        "{audit}"
    );
    // The check that triggered the fix shows what the fix was given.
    assert!(audit.contains("        |  right: 12000"), "{audit}");
    // The root task's own run is not a fix: no output under its execution.
    let root = audit
        .lines()
        .position(|l| l.contains(" executed ") && l.contains(" billing_module "))
        .unwrap_or_else(|| panic!("no root execution: {audit}"));
    assert!(
        !audit.lines().nth(root + 1).unwrap().contains("output:"),
        "{audit}"
    );

    let (_, json) = output(tmp.path(), &["audit", "--state", "st", "--json"]);
    let fix_output = json
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["task"] == "billing_service")
        .flat_map(|e| e["entries"].as_array().cloned().unwrap_or_default())
        .find(|e| e["kind"] == "executed" && e["task_ref"] == "billing_service_fix_1")
        .unwrap_or_else(|| panic!("no fix execution: {json}"));
    assert!(
        fix_output["output"]
            .as_str()
            .unwrap()
            .contains("so VAT_PERCENT=20"),
        "{fix_output}"
    );
}

/// `kleene graph --state` fills each task by how it ended and labels it with its calls:
/// an accepted, a failed and a drained task are drawn differently.
#[test]
fn a_runs_graph_colours_each_task_by_how_it_ended() {
    let tmp = TempDir::new().unwrap();
    let plan = failing_plan(tmp.path());
    assert_eq!(run(tmp.path(), &plan).status.code(), Some(1));
    let (code, dot) = output(tmp.path(), &["graph", "--state", "st"]);
    assert_eq!(code, Some(0), "{dot}");
    assert!(dot.starts_with("digraph plan {"), "{dot}");
    let node = |id: &str| {
        dot.lines()
            .find(|l| l.starts_with(&format!("  \"{id}\" [")))
            .unwrap_or_else(|| panic!("no node {id}: {dot}"))
            .to_owned()
    };
    let fill = |line: &str| {
        let at = line.find("fillcolor=\"").unwrap() + "fillcolor=\"".len();
        line[at..at + 7].to_owned()
    };
    let (accepted, failed, drained) = (node("app_module"), node("app_model"), node("app_page"));
    assert!(accepted.contains(r"\naccepted · 1 call"), "{accepted}");
    assert!(failed.contains(r"\nfailed · 1 call"), "{failed}");
    assert!(failed.contains("penwidth=3"), "{failed}");
    assert!(drained.contains(r#"\ndrained""#), "{drained}");
    assert_ne!(fill(&accepted), fill(&failed));
    assert_ne!(fill(&failed), fill(&drained));
    assert!(!accepted.contains("penwidth"), "{accepted}");
    assert!(dot.contains("\"app_model\" -> \"app_page\";"), "{dot}");

    // The plan's own graph is unchanged, and the two cannot be asked for at once.
    let (code, plain) = output(tmp.path(), &["graph", plan.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{plain}");
    assert!(!plain.contains("accepted"), "{plain}");
    let (code, both) = output(
        tmp.path(),
        &["graph", plan.to_str().unwrap(), "--state", "st"],
    );
    assert_eq!(code, Some(2), "{both}");
}
