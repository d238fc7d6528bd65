//! Task ids are names, not paths (issue 41): a plan whose id is a path is refused before
//! anything is written, and the files kleene names after a task stay in its state
//! directory however long the id is.

use std::path::{Path, PathBuf};

use tempfile::TempDir;

use crate::cli::basics::{kleene, module, repairable, run, text, write_plan};

/// Every file and directory under `dir`, relative to it, sorted.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path.clone());
            }
            found.push(path.strip_prefix(dir).unwrap().to_owned());
        }
    }
    found.sort();
    found
}

/// A plan (in `dir`) of the module task and a repairable task called `id`.
fn plan_with(dir: &Path, id: &str) -> PathBuf {
    write_plan(
        dir,
        vec![
            module(),
            repairable(id, "app/model.txt", "echo bad > app/model.txt"),
        ],
    )
}

#[test]
fn an_id_that_is_a_path_is_refused_by_validate_and_run_and_nothing_is_written() {
    let tmp = TempDir::new().unwrap();
    // The project sits two levels down, so an id escaping the specs directory would land
    // inside the temporary directory, where this test looks.
    let project = tmp.path().join("outer/project");
    std::fs::create_dir_all(&project).unwrap();
    for (id, rule) in [
        ("../../escape", "it contains '/' at byte 2"),
        ("web/api", "it contains '/' at byte 3"),
        ("..", "which names the parent directory"),
        (".hidden", "it starts with '.'"),
    ] {
        let plan = plan_with(&project, id);
        let before = tree(tmp.path());

        let out = kleene(&project)
            .args(["validate", "plan.json"])
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{id}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{id}: one line:\n{stderr}");
        assert!(stderr.contains(&format!("task {id}: ")), "{id}: {stderr}");
        assert!(stderr.contains("field `id`"), "{id}: {stderr}");
        assert!(stderr.contains(rule), "{id}: {stderr}");
        assert!(
            stderr.contains("a task id is a name, not a path"),
            "{id}: {stderr}"
        );
        assert_eq!(tree(tmp.path()), before, "{id}: validate wrote a file");

        let out = run(&project, &plan);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{id}: {stderr}");
        assert!(stderr.contains(&format!("task {id}: ")), "{id}: {stderr}");
        assert!(stderr.contains(rule), "{id}: {stderr}");
        let after = tree(tmp.path());
        assert!(
            !after.iter().any(|p| p.to_string_lossy().contains("escape")),
            "{id}: {after:?}"
        );
        assert!(
            !after.iter().any(|p| p.to_string_lossy().contains(".call")),
            "{id}: a spec was written: {after:?}"
        );
        std::fs::remove_dir_all(project.join("st")).ok();
    }
}

#[test]
fn a_long_id_with_a_fix_runs_and_its_specs_stay_in_the_state_directory() {
    let tmp = TempDir::new().unwrap();
    // 250 bytes: its fix id is 256 (the most an id may be), and `{fix}.call1.md` is longer
    // than a file name may be.
    let id = format!("app_model_{}", "x".repeat(240));
    assert_eq!(id.len(), 250);
    let plan = plan_with(tmp.path(), &id);
    let out = run(tmp.path(), &plan);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("spawned {id}_fix_1 (depth 1)")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("{id}: accepted after 1 fix")),
        "{stdout}"
    );

    let specs = tmp.path().join("st/specs");
    let names: Vec<String> = std::fs::read_dir(&specs)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let name = &names[0];
    assert!(name.len() <= 255, "{} bytes: {name}", name.len());
    assert!(name.starts_with("app_model_xxx"), "{name}");
    assert!(name.ends_with(".call1.md"), "{name}");
    let spec = std::fs::read_to_string(specs.join(name)).unwrap();
    assert!(spec.contains("expected good in app/model.txt"), "{spec}");
    // Nothing named after the task was written anywhere else.
    let stray: Vec<PathBuf> = tree(tmp.path())
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(".call") && !p.starts_with("st/specs"))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");

    let status = kleene(tmp.path())
        .args(["status", "--state", "st"])
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(0), "{}", text(&status.stderr));
}
