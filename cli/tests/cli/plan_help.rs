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

    // The rules a path must pass are in the reference, the secret-name rule included.
    for rule in [
        "no trailing \"/\"",
        ".env, id_rsa or credentials",
        ".pem or .key",
        "secrets.txt",
        "security/secrets.yaml is the one exception",
        "A task\n",
    ] {
        let flat = rule.replace('\n', " ");
        let joined = help.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            joined.contains(flat.trim()),
            "`{rule}` is not documented:\n{help}"
        );
    }

    // `kleene run --help` shows the run's options and points at the reference instead of
    // reprinting it; `-h` too.
    for flag in ["--help", "-h"] {
        let out = kleene(tmp.path()).args(["run", flag]).output().unwrap();
        let usage = text(&out.stdout);
        assert!(out.status.success(), "{usage}");
        assert!(!usage.contains("----- begin plan -----"), "{usage}");
        assert!(!usage.contains("Plan file keys"), "{usage}");
        assert!(usage.contains("--restart"), "{usage}");
        assert!(usage.contains(": kleene help plan"), "{usage}");
        assert!(usage.lines().count() < help.lines().count() / 2, "{usage}");
    }

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

#[test]
fn the_minimal_plan_runs_to_acceptance_with_only_a_posix_shell() {
    let tmp = TempDir::new().unwrap();
    let plan = minimal_plan(&help_plan(tmp.path()));
    // Nothing beyond sh and its standard utilities (the old plan needed pytest and ruff).
    for tool in ["pytest", "ruff", "python", "cargo", "npm"] {
        assert!(!plan.contains(tool), "{tool} in:\n{plan}");
    }
    std::fs::write(tmp.path().join("plan.json"), &plan).unwrap();
    let out = kleene(tmp.path())
        .args(["validate", "plan.json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = kleene(tmp.path())
        .args(["run", "plan.json"])
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("all 2 tasks accepted"), "{stdout}");
    let out = kleene(tmp.path()).args(["accept"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let workspace = tmp.path().join(".kleene/workspace");
    for file in ["greeting.txt", "copy.txt"] {
        assert_eq!(
            std::fs::read_to_string(workspace.join(file)).unwrap(),
            "hello\n",
            "{file}"
        );
    }
}

#[test]
fn a_task_that_owns_paths_without_run_is_refused_before_anything_runs() {
    let tmp = TempDir::new().unwrap();
    // As the issue found it: a lane with owned paths and no commands at all.
    let plan_text = r#"{"tasks": [{"id": "lanes", "owner": "shell", "spec": {"intent": "x"},
        "owned_paths": ["app/a.txt", "app/b.txt"]}]}"#;
    let plan = tmp.path().join("plan.json");
    let msg = refused(
        plan_text,
        "task lanes owns \"app/a.txt\" and \"app/b.txt\" but has no \"run\"",
        None,
    );
    assert!(
        msg.contains("add a \"run\" command that writes them"),
        "{msg}"
    );
    assert!(msg.contains("kleene help plan"), "{msg}");

    // `kleene run` refuses it the same way, before it makes a state directory.
    std::fs::write(&plan, plan_text).unwrap();
    let out = kleene(tmp.path())
        .args(["run", "plan.json", "--state", "st"])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("task lanes owns"), "{stderr}");
    assert!(!tmp.path().join("st").exists());

    // A task that owns nothing may leave `run` out: it runs nothing and is accepted, and a
    // task after it runs once it is.
    let plan = r#"{"tasks": [
        {"id": "ready", "owner": "shell", "spec": {"intent": "a point to wait for"}},
        {"id": "after", "owner": "shell", "spec": {"intent": "write a"}, "depends_on": ["ready"],
         "owned_paths": ["a.txt"], "run": "echo a > a.txt"}
    ]}"#;
    std::fs::write(tmp.path().join("plan.json"), plan).unwrap();
    let out = kleene(tmp.path())
        .args(["run", "plan.json", "--state", "ok"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("all 2 tasks accepted"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_trailing_slash_is_named_with_what_to_write_instead() {
    let plan = one_task(
        "      \"owner\": \"shell\", \"spec\": {\"intent\": \"x\"}, \"run\": \"true\",\n      \"owned_paths\": [\"src/app/\"]",
    );
    let msg = refused(&plan, "ends in '/'", None);
    assert!(msg.contains("write \"src/app\" for the directory"), "{msg}");
    assert!(!msg.contains("is empty"), "{msg}");

    let plan = one_task(
        "      \"owner\": \"shell\", \"spec\": {\"intent\": \"x\"}, \"run\": \"true\",\n      \"scratch\": [\"target/\"]",
    );
    let msg = refused(&plan, "ends in '/'", None);
    assert!(msg.contains("write `target/**`"), "{msg}");
}

#[test]
fn one_of_anything_is_counted_in_the_singular() {
    let tmp = TempDir::new().unwrap();
    let plan = r#"{"tasks": [{"id": "only", "owner": "shell", "spec": {"intent": "write a"},
        "owned_paths": ["a.txt"], "run": "echo a > a.txt"}]}"#;
    std::fs::write(tmp.path().join("plan.json"), plan).unwrap();
    let mut said = String::new();
    for args in [
        &["validate", "plan.json"][..],
        &["run", "plan.json", "--state", "st"],
        &["accept", "--state", "st"],
        &["export", "out.tar", "--state", "st"],
        &["verify", "out.tar", "--state", "st"],
        &["audit", "--state", "st"],
    ] {
        let out = kleene(tmp.path()).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        said.push_str(&text(&out.stdout));
        said.push_str(&text(&out.stderr));
    }
    for line in [
        "is valid: 1 task,",
        "running 1 task on channel",
        "1 task accepted; next: kleene accept",
        "accepted 1 file;",
        "exported 1 file to",
        "verified 1 file against",
    ] {
        assert!(said.contains(line), "`{line}` in:\n{said}");
    }
    for noun in [
        "tasks", "files", "calls", "fixes", "entries", "bytes", "records", "problems",
    ] {
        assert!(
            !said.contains(&format!(" 1 {noun}")),
            "`1 {noun}` in:\n{said}"
        );
    }
}
