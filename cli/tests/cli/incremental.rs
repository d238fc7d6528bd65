//! Incremental runs through the CLI: `kleene run` again after an edit calls exactly the
//! edited task and what depends on it, reuses the rest with its audit trail, and ends with
//! the files a run from scratch makes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::json;
use tempfile::TempDir;

use crate::cli::basics::{kleene, text};

const TASKS: usize = 200;

/// Task `i`'s prerequisites: chains of twenty, and the last fifty tasks fan out of task 75.
fn deps(i: usize) -> Vec<usize> {
    let mut d = Vec::new();
    if !i.is_multiple_of(20) {
        d.push(i - 1);
    }
    if i >= 150 && i != 75 {
        d.push(75);
    }
    d
}

/// Every task that depends on `root`, directly or not, and `root`.
fn called_after_editing(root: usize) -> BTreeSet<String> {
    let mut called = BTreeSet::from([root]);
    for i in 0..TASKS {
        if deps(i).iter().any(|d| called.contains(d)) {
            called.insert(i);
        }
    }
    called.into_iter().map(|i| format!("t{i}")).collect()
}

/// The plan: each task writes `out/tI.txt`, its name and a checksum of what its
/// prerequisites wrote (so an edit reaches every task after it), and logs its call to `log`
/// (outside its stage, a path each task's sandbox declares);
/// every 29th task writes a wrong first draft that its check refuses and its `fix`
/// repairs. `edit` replaces task 75's `run`.
fn write_plan(dir: &Path, log: &Path, edit: Option<&str>) -> std::path::PathBuf {
    let sandbox = declared_log(log);
    let log = log.display();
    let tasks: Vec<serde_json::Value> = (0..TASKS)
        .map(|i| {
            let out = format!("out/t{i}.txt");
            let inputs: Vec<String> = deps(i).iter().map(|d| format!("out/t{d}.txt")).collect();
            let made = if inputs.is_empty() {
                format!("echo t{i} > {out}")
            } else {
                format!("echo t{i} $(cat {} | cksum) > {out}", inputs.join(" "))
            };
            let mut task = json!({
                "id": format!("t{i}"),
                "owner": "shell",
                "spec": {"intent": format!("write t{i}")},
                "owned_paths": [out],
                "depends_on": deps(i).iter().map(|d| format!("t{d}")).collect::<Vec<_>>(),
                "run": format!("echo \"run $KLEENE_TASK\" >> {log}; mkdir -p out && {made}"),
                "sandbox": sandbox,
            });
            if i % 29 == 3 {
                task["run"] = json!(format!(
                    "echo \"run $KLEENE_TASK\" >> {log}; mkdir -p out && echo draft > {out}"
                ));
                task["checks"] = json!([{"id": "final", "command": format!("grep -q t{i} {out}")}]);
                task["fix"] = json!(format!("echo \"fix $KLEENE_TASK\" >> {log}; {made}"));
            }
            if i == 75
                && let Some(run) = edit
            {
                task["run"] = json!(format!("echo \"run $KLEENE_TASK\" >> {log}; {run}"));
            }
            task
        })
        .collect();
    let plan = dir.join("plan.json");
    std::fs::write(
        &plan,
        serde_json::to_vec_pretty(&json!({"tasks": tasks})).unwrap(),
    )
    .unwrap();
    plan
}

/// The sandbox of a task that appends to `log`, which is made here: a sandbox gives only
/// what exists.
fn declared_log(log: &Path) -> serde_json::Value {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    json!({"write": [log]})
}

/// The tasks whose `run` the log shows since it was last taken, and empties it.
fn take_calls(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    std::fs::write(log, "").unwrap();
    let mut calls: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("run "))
        .map(str::to_owned)
        .collect();
    calls.sort();
    calls
}

fn run(dir: &Path, extra: &[&str]) -> std::process::Output {
    let out = kleene(dir)
        .args(["run", "plan.json", "-j", "2"])
        .args(extra)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// Every file under `dir`, by path.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut found = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().display().to_string();
                found.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    found
}

#[test]
fn an_edit_in_the_middle_calls_that_task_and_its_dependents_and_reuses_the_rest() {
    let tmp = TempDir::new().unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let log = tmp.path().join("calls.log");
    write_plan(&project, &log, None);
    run(&project, &[]);
    let first = take_calls(&log);
    assert_eq!(first.len(), TASKS, "every task called once");
    let fixes = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(fixes.is_empty());

    // Nothing changed: no call, and it says so.
    let out = run(&project, &[]);
    assert!(take_calls(&log).is_empty());
    assert!(
        text(&out.stdout).contains("200 tasks up to date"),
        "{}",
        text(&out.stdout)
    );

    // Task 75's run edited (its output changes): it and everything that depends on it.
    write_plan(
        &project,
        &log,
        Some("mkdir -p out && echo t75, edited > out/t75.txt"),
    );
    run(&project, &[]);
    let expected: Vec<String> = called_after_editing(75).into_iter().collect();
    assert_eq!(take_calls(&log), expected);
    assert!(expected.len() > 50 && expected.len() < TASKS);

    // The project as the reusing run leaves it is the one a run from scratch makes.
    let scratch = tmp.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    std::fs::copy(project.join("plan.json"), scratch.join("plan.json")).unwrap();
    run(&scratch, &["--no-cache"]);
    assert_eq!(take_calls(&log).len(), TASKS);
    // Exported beside the projects, not into them: a file the plan binds changes every
    // task's key.
    let project_tree = tmp.path().join("project-tree");
    let scratch_tree = tmp.path().join("scratch-tree");
    for (dir, tree) in [(&project, &project_tree), (&scratch, &scratch_tree)] {
        let out = kleene(dir)
            .args(["export", "--tree"])
            .arg(tree)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let reused_files = files(&project_tree);
    assert_eq!(reused_files.len(), TASKS + 1, "every output and the plan");
    let scratch_files = files(&scratch_tree);
    let differing: Vec<&String> = reused_files
        .keys()
        .chain(scratch_files.keys())
        .filter(|k| reused_files.get(*k) != scratch_files.get(*k))
        .collect();
    assert!(
        differing.is_empty(),
        "differ: {:?}",
        differing
            .iter()
            .map(|k| (
                k,
                reused_files.get(*k).map(|b| text(b)),
                scratch_files.get(*k).map(|b| text(b))
            ))
            .take(3)
            .collect::<Vec<_>>()
    );

    // Accepted, exported and verified with the reused trail bound; audit names it.
    let archive = tmp.path().join("out.tar");
    let archive = archive.to_str().unwrap();
    for args in [&["accept"][..], &["export", archive], &["verify", archive]] {
        let out = kleene(&project).args(args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let audit = kleene(&project).args(["audit"]).output().unwrap();
    assert_eq!(audit.status.code(), Some(0), "{}", text(&audit.stderr));
    let audit = text(&audit.stdout);
    assert!(audit.contains("t0 call 1 of run"), "{audit}");
    assert!(audit.contains("reused"), "{audit}");
    assert!(
        !audit.contains("t75 call 1 of run"),
        "t75 was called: {audit}"
    );

    // An edit that leaves task 75's output byte for byte as it was calls none of its
    // dependents (early cutoff).
    write_plan(
        &project,
        &log,
        Some("mkdir -p out && printf '%s\\n' 't75, edited' > out/t75.txt"),
    );
    let out = run(&project, &[]);
    assert_eq!(take_calls(&log), ["t75"], "{}", text(&out.stderr));
}

/// A task that names its inputs is called again only when one of them changes, and its
/// stage holds only those; a task that says `"cache": false` is called every run.
#[test]
fn a_tasks_inputs_narrow_what_calls_it_again_and_cache_false_opts_out() {
    let tmp = TempDir::new().unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir_all(project.join("tasks")).unwrap();
    let log = tmp.path().join("calls.log");
    let sandbox = declared_log(&log);
    let log = log.display();
    for name in ["a", "b"] {
        std::fs::write(
            project.join(format!("tasks/{name}.sh")),
            format!("echo {name} > out/{name}.txt\n"),
        )
        .unwrap();
    }
    let task = |name: &str, other: &str, extra: serde_json::Value| {
        let mut task = json!({
            "id": name, "owner": "shell", "spec": {"intent": name},
            "owned_paths": [format!("out/{name}.txt")],
            // Its stage holds its own script, and not the other task's.
            "run": format!(
                "echo \"run $KLEENE_TASK\" >> {log}; test ! -e tasks/{other}.sh && \
                 mkdir -p out && sh tasks/{name}.sh"
            ),
            "inputs": [format!("tasks/{name}.sh")],
            "sandbox": sandbox,
        });
        for (k, v) in extra.as_object().unwrap() {
            task[k] = v.clone();
        }
        task
    };
    let plan = json!({"tasks": [
        task("a", "b", json!({})),
        task("b", "a", json!({})),
        task("deploy", "a", json!({"cache": false, "inputs": [],
            "run": format!("echo \"run $KLEENE_TASK\" >> {log}; test ! -e tasks/a.sh && \
                            mkdir -p out && echo deployed > out/deploy.txt")})),
    ]});
    std::fs::write(project.join("plan.json"), plan.to_string()).unwrap();
    let log_path = tmp.path().join("calls.log");
    run(&project, &[]);
    assert_eq!(take_calls(&log_path), ["a", "b", "deploy"]);
    std::fs::write(project.join("tasks/b.sh"), "echo B > out/b.txt\n").unwrap();
    run(&project, &[]);
    assert_eq!(take_calls(&log_path), ["b", "deploy"]);
    run(&project, &[]);
    assert_eq!(take_calls(&log_path), ["deploy"]);
}

/// `kleene cache` says what the cache holds; `--prune` removes a damaged entry and the
/// objects no entry names, and the next run calls that task alone; `--clear` empties it.
#[test]
fn kleene_cache_sizes_prunes_and_clears() {
    let tmp = TempDir::new().unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let log = tmp.path().join("calls.log");
    write_plan(&project, &log, None);
    run(&project, &[]);
    take_calls(&log);
    let say = |args: &[&str]| {
        let out = kleene(&project).arg("cache").args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let shown = say(&[]);
    assert!(shown.contains("200 results"), "{shown}");
    // Damage one entry: a prune removes it (and nothing else), the next run calls it alone.
    let entries = project.join(".kleene-cache/entries");
    let victim = std::fs::read_dir(&entries)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .contains(r#""task":"t0""#)
        })
        .unwrap();
    let entry = std::fs::read_to_string(&victim).unwrap();
    std::fs::write(&victim, entry.replace(r#""call":1"#, r#""call":7"#)).unwrap();
    let pruned = say(&["--prune"]);
    assert!(
        pruned.contains("1 result that did not read back"),
        "{pruned}"
    );
    assert!(pruned.contains("199 results kept"), "{pruned}");
    assert!(!victim.exists());
    run(&project, &[]);
    assert_eq!(take_calls(&log), ["t0"]);
    let cleared = say(&["--clear"]);
    assert!(cleared.contains("200 results"), "{cleared}");
    assert!(say(&[]).contains("0 results"));
    run(&project, &[]);
    assert_eq!(take_calls(&log).len(), TASKS);
}

/// A cache that cannot be a directory is refused once, as bad input, before anything is
/// written; a cache whose entries all go bad says so in a few lines, not one a task.
#[test]
fn a_cache_that_cannot_be_one_is_refused_before_the_run_and_bad_entries_are_counted() {
    let tmp = TempDir::new().unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let log = tmp.path().join("calls.log");
    write_plan(&project, &log, None);
    let file = tmp.path().join("not-a-directory");
    std::fs::write(&file, "").unwrap();
    let out = kleene(&project)
        .args(["run", "plan.json", "--cache"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--cache"),
        "{}",
        text(&out.stderr)
    );
    assert!(!project.join(".kleene").exists());
    assert!(take_calls(&log).is_empty());

    run(&project, &[]);
    take_calls(&log);
    for entry in std::fs::read_dir(project.join(".kleene-cache/entries")).unwrap() {
        std::fs::write(entry.unwrap().path(), "{}").unwrap();
    }
    let out = run(&project, &[]);
    assert_eq!(take_calls(&log).len(), TASKS);
    let said = text(&out.stdout);
    assert_eq!(said.matches("warning:").count(), 6, "{said}");
    assert!(said.contains("195 more warnings"), "{said}");
}

/// Two runs at once in two state directories, sharing one cache: both are accepted, the
/// cache reads back whole, and a third run of either plan makes no call.
#[test]
fn two_runs_at_once_share_one_cache() {
    let tmp = TempDir::new().unwrap();
    let cache = tmp.path().join("shared-cache");
    let log = tmp.path().join("calls.log");
    let projects: Vec<std::path::PathBuf> = ["a", "b"]
        .iter()
        .map(|name| {
            let dir = tmp.path().join(name);
            std::fs::create_dir(&dir).unwrap();
            write_plan(&dir, &log, None);
            dir
        })
        .collect();
    let running: Vec<std::process::Child> = projects
        .iter()
        .map(|dir| {
            std::process::Command::new(env!("CARGO_BIN_EXE_kleene"))
                .current_dir(dir)
                .args(["run", "plan.json", "-j", "2", "--cache"])
                .arg(&cache)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in running {
        assert!(child.wait().unwrap().success());
    }
    let pruned = kleene(tmp.path())
        .args(["cache", "--prune", "--cache"])
        .arg(&cache)
        .output()
        .unwrap();
    assert!(
        text(&pruned.stdout).contains("0 results that did not read back"),
        "{}",
        text(&pruned.stdout)
    );
    take_calls(&log);
    run(&projects[1], &["--cache", cache.to_str().unwrap()]);
    assert!(take_calls(&log).is_empty());
}
