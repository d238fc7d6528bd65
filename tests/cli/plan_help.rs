//! A first plan (issue 27): `kleene help plan` documents every key and gives a plan that
//! validates, and each mistake a new author makes gets one message, in JSON terms, at its
//! line and column.

use std::path::Path;

use tempfile::TempDir;

use crate::cli::basics::{kleene, text};

/// Words that name the Rust types reading a plan, or serde's vocabulary, rather than JSON.
const JARGON: [&str; 11] = [
    "struct",
    "enum",
    "KindRepr",
    "Spec",
    "variant",
    "sequence",
    "u32",
    "f64",
    "AppBuildPlan",
    "PlannedTask",
    "load plan: load plan",
];

/// `kleene validate` on `plan` (written to `plan.json` in a fresh directory): exit code,
/// stdout, stderr.
fn validate(plan: &str) -> (Option<i32>, String, String) {
    let tmp = TempDir::new().unwrap();
    std::fs::write(tmp.path().join("plan.json"), plan).unwrap();
    let out = kleene(tmp.path())
        .args(["validate", "plan.json"])
        .output()
        .unwrap();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

fn help_plan(dir: &Path) -> String {
    let out = kleene(dir).args(["help", "plan"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// The minimal plan between the marker lines of `kleene help plan`.
fn minimal_plan(help: &str) -> String {
    let start = help.find("----- begin plan -----\n").expect("begin marker") + 23;
    let end = help.find("----- end plan -----").expect("end marker");
    help[start..end].to_owned()
}

#[test]
fn help_plan_lists_every_key_and_its_minimal_plan_validates() {
    let tmp = TempDir::new().unwrap();
    let help = help_plan(tmp.path());
    for key in [
        "tasks",
        "scratch",
        "id *",
        "owner *",
        "spec *",
        "intent *",
        "acceptance_criteria",
        "kind",
        "\"lane\"",
        "\"module\"",
        "depends_on",
        "owned_paths",
        "retry_limit",
        "input_contracts",
        "origin",
        "consolidated_from",
        "run",
        "checks",
        "severity",
        "overridable",
        "fix",
        "timeout_secs",
    ] {
        assert!(help.contains(key), "`{key}` is not documented:\n{help}");
    }
    let plan = minimal_plan(&help);
    assert!(plan.lines().count() <= 12, "{plan}");
    let (code, stdout, stderr) = validate(&plan);
    assert_eq!(code, Some(0), "{stderr}\n{plan}");
    assert!(stdout.contains("is valid: 2 tasks"), "{stdout}");

    // `kleene run --help` ends with the same reference; `-h` stays short.
    let long = kleene(tmp.path()).args(["run", "--help"]).output().unwrap();
    assert!(text(&long.stdout).contains(&help.trim_end().to_string()));
    let short = kleene(tmp.path()).args(["run", "-h"]).output().unwrap();
    assert!(!text(&short.stdout).contains("----- begin plan -----"));

    // `help` still explains commands, and refuses an unknown topic by name.
    let out = kleene(tmp.path())
        .args(["help", "validate"])
        .output()
        .unwrap();
    assert!(
        text(&out.stdout).contains("Usage: kleene validate"),
        "{out:?}"
    );
    let out = kleene(tmp.path())
        .args(["help", "plans?"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("kleene help plan"), "{out:?}");
}

/// A plan of one task whose body (after `"id": "tests",`) is `body`, one key per line from
/// line 3 on.
fn one_task(body: &str) -> String {
    format!("{{\n  \"tasks\": [\n    {{ \"id\": \"tests\",\n{body}\n    }}\n  ]\n}}\n")
}

/// Asserts that validating `plan` fails with exactly one message that says `phrase` once,
/// at `line` and `column` when given (serde_json's: the end of the offending key or value),
/// and names no Rust type.
fn refused(plan: &str, phrase: &str, at: Option<(usize, usize)>) -> String {
    let (code, _, stderr) = validate(plan);
    assert_eq!(code, Some(2), "{stderr}\n{plan}");
    assert_eq!(stderr.lines().count(), 1, "one line:\n{stderr}");
    assert_eq!(
        stderr.matches(phrase).count(),
        1,
        "`{phrase}` once:\n{stderr}"
    );
    if let Some((line, column)) = at {
        assert!(
            stderr.contains(&format!("plan.json: line {line} column {column}: ")),
            "line {line} column {column}:\n{stderr}\n{plan}"
        );
        assert_eq!(stderr.matches("line ").count(), 1, "{stderr}");
    }
    for word in JARGON {
        assert!(!stderr.contains(word), "`{word}` in:\n{stderr}");
    }
    stderr
}

#[test]
fn spec_as_a_string_asks_for_the_object() {
    let plan = one_task("      \"owner\": \"shell\",\n      \"spec\": \"first\"");
    let msg = refused(
        &plan,
        r#"spec must be an object such as {"intent": "…", "acceptance_criteria": ["…"]}"#,
        Some((5, 21)),
    );
    assert!(msg.contains("task tests: field `spec`"), "{msg}");
    assert!(msg.contains("not the string \"first\""), "{msg}");
}

#[test]
fn a_misspelt_spec_key_is_refused_not_dropped() {
    let plan = one_task(
        "      \"owner\": \"shell\",\n      \"spec\": {\"intent\": \"x\", \"acceptance_criterias\": [\"y\"]}",
    );
    refused(
        &plan,
        "unknown field `acceptance_criterias`, expected `intent` or `acceptance_criteria`",
        Some((5, 52)),
    );
}

#[test]
fn kind_as_a_string_asks_for_the_lane_object() {
    let plan = one_task(
        "      \"owner\": \"shell\",\n      \"kind\": \"general\",\n      \"spec\": {\"intent\": \"x\"}",
    );
    refused(
        &plan,
        r#"kind must be an object such as {"lane": "general"}"#,
        Some((5, 23)),
    );
    let plan = one_task(
        "      \"owner\": \"shell\",\n      \"kind\": {\"lane\": \"modle\", \"module\": \"m\"},\n      \"spec\": {\"intent\": \"x\"}",
    );
    refused(
        &plan,
        r#"lane must be one of "general", "module""#,
        Some((5, 30)),
    );
    let plan = one_task(
        "      \"owner\": \"shell\",\n      \"kind\": {\"lane\": \"general\", \"module\": \"m\"},\n      \"spec\": {\"intent\": \"x\"}",
    );
    refused(&plan, r#"kind takes no "module" here; remove it"#, None);
}

#[test]
fn a_trailing_comma_is_called_one() {
    let plan = one_task("      \"owner\": \"shell\",\n      \"spec\": {\"intent\": \"x\"},");
    refused(&plan, "trailing comma", Some((6, 5)));
    // Inside a command key too, where serde_json itself says "key must be a string".
    let plan = one_task(
        "      \"owner\": \"shell\", \"spec\": {\"intent\": \"x\"}, \"run\": \"true\",\n      \"checks\": [{\"id\": \"t\", \"command\": \"true\",}]",
    );
    let msg = refused(&plan, "trailing comma", None);
    assert!(!msg.contains("key must be a string"), "{msg}");
}

#[test]
fn a_missing_owner_is_named_with_its_shape() {
    let plan = one_task("      \"spec\": {\"intent\": \"x\"}");
    let msg = refused(
        &plan,
        r#"is missing "owner": a string such as "shell""#,
        Some((5, 5)),
    );
    assert!(msg.contains("task tests"), "{msg}");
}

#[test]
fn a_misspelt_depends_on_gets_a_suggestion() {
    for typo in ["depend_on", "dependson", "depends"] {
        let plan = one_task(&format!(
            "      \"owner\": \"shell\", \"spec\": {{\"intent\": \"x\"}},\n      \"{typo}\": []"
        ));
        let msg = refused(&plan, "did you mean `depends_on`?", None);
        assert!(
            msg.contains(&format!("line 5 column {}", typo.len() + 8)),
            "{msg}"
        );
    }
}

#[test]
fn a_command_key_of_the_wrong_shape_is_named_with_its_shape() {
    let plan = one_task(
        "      \"owner\": \"shell\", \"spec\": {\"intent\": \"x\"}, \"run\": \"true\",\n      \"timeout_secs\": \"60\"",
    );
    refused(
        &plan,
        r#"timeout_secs must be a number of seconds such as 60, not the string "60""#,
        Some((5, 26)),
    );
}

#[test]
fn an_empty_plan_is_refused() {
    for plan in [
        r#"{"tasks": []}"#,
        r#"{"scratch": ["target/**"], "tasks": []}"#,
    ] {
        let msg = refused(plan, "`tasks` is empty", None);
        assert!(msg.contains("kleene help plan"), "{msg}");
    }
    refused("{}", r#"the plan is missing "tasks""#, Some((1, 2)));
}

#[test]
fn validate_names_each_task_consolidation_merged() {
    let task = |id: &str| {
        format!(
            r#"{{"id": "{id}", "owner": "shell", "kind": {{"lane": "persistence", "module": "tasks"}},
              "spec": {{"intent": "store {id}"}}}}"#
        )
    };
    let plan = format!(
        "{{\"tasks\": [{}, {}]}}",
        task("db_users"),
        task("db_tasks")
    );
    let (code, stdout, stderr) = validate(&plan);
    assert_eq!(code, Some(0), "{stderr}");
    let note = "task db_users was merged into db_tasks: both are persistence tasks of module tasks";
    assert_eq!(stdout.matches(note).count(), 1, "{stdout}");

    let tmp = TempDir::new().unwrap();
    std::fs::write(tmp.path().join("plan.json"), &plan).unwrap();
    let out = kleene(tmp.path())
        .args(["validate", "plan.json", "--json"])
        .output()
        .unwrap();
    let event: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        event["merged"][0]
            .as_str()
            .unwrap_or_default()
            .starts_with(note),
        "{event}"
    );

    // `kleene run` says so too, on stderr, so stdout keeps only its events.
    let out = kleene(tmp.path())
        .args(["run", "plan.json", "--state", "st", "-j", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr).matches(note).count(), 1, "{out:?}");
    assert!(!text(&out.stdout).contains(note), "{out:?}");
}
