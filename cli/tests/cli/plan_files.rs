//! The files beside a plan, as a user and an attacker meet them: bound into the plan digest,
//! copied into the run's state, read from there by every command, and named when they change,
//! are damaged, or are too many to carry.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::json;
use tempfile::TempDir;

use crate::cli::basics::{kleene, module, run, task, text, write_plan};

/// A plan whose task runs a helper script beside the plan file.
fn scripted(dir: &Path, body: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("tasks")).unwrap();
    std::fs::write(dir.join("tasks/model.sh"), body).unwrap();
    write_plan(
        dir,
        vec![
            module(),
            task(
                "app_model",
                "model",
                &["app/model.txt"],
                &["app_module"],
                json!({"run": "sh \"$KLEENE_PLAN_DIR/tasks/model.sh\""}),
            ),
        ],
    )
}

fn both(out: &std::process::Output) -> String {
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

#[test]
fn commands_read_the_runs_own_copy_and_a_later_edit_is_named_on_resume() {
    let tmp = TempDir::new().unwrap();
    let plan = scripted(
        tmp.path(),
        "mkdir -p app && echo \"$KLEENE_PLAN_DIR\" > app/model.txt\n",
    );
    let out = run(tmp.path(), &plan);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let written = std::fs::read_to_string(tmp.path().join("st/workspace/app/model.txt")).unwrap();
    assert!(
        written.trim_end().ends_with("st/plan-files"),
        "the command read {written}"
    );
    let copy = tmp.path().join("st/plan-files/tasks/model.sh");
    assert_eq!(
        std::fs::metadata(&copy).unwrap().permissions().mode() & 0o222,
        0,
        "the copy is read-only"
    );
    // An edited script is a changed plan: resume names the file; an added file is not.
    std::fs::write(tmp.path().join("notes.txt"), "unrelated").unwrap();
    std::fs::write(tmp.path().join("tasks/model.sh"), "echo edited\n").unwrap();
    let out = kleene(tmp.path())
        .args(["resume", "--state", "st"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("plan file tasks/model.sh changed"), "{err}");
    assert!(!err.contains("notes.txt"), "{err}");
}

#[test]
fn a_damaged_copy_in_the_state_is_named_and_nothing_runs() {
    let tmp = TempDir::new().unwrap();
    let plan = scripted(tmp.path(), "mkdir -p app && echo ok > app/model.txt\n");
    let out = run(tmp.path(), &plan);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let copy = tmp.path().join("st/plan-files/tasks/model.sh");
    let mut perms = std::fs::metadata(&copy).unwrap().permissions();
    perms.set_mode(0o644);
    std::fs::set_permissions(&copy, perms).unwrap();
    std::fs::write(&copy, "rm -rf \"$HOME\"\n").unwrap();
    let out = kleene(tmp.path())
        .args(["resume", "--state", "st"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("plan file tasks/model.sh: its bytes have digest"),
        "{err}"
    );
}

#[test]
fn too_many_bytes_beside_the_plan_are_refused_before_anything_runs_naming_the_largest() {
    let tmp = TempDir::new().unwrap();
    let plan = scripted(tmp.path(), "mkdir -p app && echo ok > app/model.txt\n");
    let big = std::fs::File::create(tmp.path().join("dataset.bin")).unwrap();
    big.set_len(kleene::shell::MAX_PLAN_FILE_BYTES + 1).unwrap();
    let out = run(tmp.path(), &plan);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("the largest: dataset.bin"), "{err}");
    assert!(err.contains("\"inputs\""), "{err}");
    assert_eq!(err.matches("the largest").count(), 1, "said once: {err}");
    assert!(!tmp.path().join("st/run.json").exists());
    // Declaring what the commands read is the way out.
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    doc["inputs"] = json!(["tasks/**"]);
    std::fs::write(&plan, doc.to_string()).unwrap();
    let out = run(tmp.path(), &plan);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
}

#[test]
fn a_symlink_beside_the_plan_is_refused_by_name() {
    let tmp = TempDir::new().unwrap();
    let plan = scripted(tmp.path(), "mkdir -p app && echo ok > app/model.txt\n");
    std::os::unix::fs::symlink("/etc/passwd", tmp.path().join("tasks/secret.sh")).unwrap();
    let out = run(tmp.path(), &plan);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("plan file tasks/secret.sh: it is a symlink"),
        "{err}"
    );
}

#[test]
fn the_plan_digest_follows_every_byte_of_the_plans_files() {
    let tmp = TempDir::new().unwrap();
    let plan = scripted(tmp.path(), "echo one\n");
    let digest = |dir: &Path| {
        let out = kleene(dir)
            .args(["validate", "--json", plan.to_str().unwrap()])
            .output()
            .unwrap();
        let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (
            line["digest"].as_str().unwrap().to_owned(),
            line["plan_files"].as_u64().unwrap(),
        )
    };
    let (first, files) = digest(tmp.path());
    assert_eq!(files, 2, "plan.json and tasks/model.sh");
    std::fs::write(tmp.path().join("tasks/model.sh"), "echo two\n").unwrap();
    assert_ne!(digest(tmp.path()).0, first);
    std::fs::write(tmp.path().join("tasks/model.sh"), "echo one\n").unwrap();
    assert_eq!(digest(tmp.path()).0, first);
}

#[test]
fn an_empty_inputs_list_binds_no_files_whatever_lies_beside_the_plan() {
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(
        tmp.path(),
        vec![task(
            "app_module",
            "module",
            &["app/MODULE"],
            &[],
            json!({"run": "mkdir -p app && ls \"$KLEENE_PLAN_DIR\" | wc -l > app/MODULE"}),
        )],
    );
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    doc["inputs"] = json!([]);
    std::fs::write(&plan, doc.to_string()).unwrap();
    // Far more than a plan may carry, and nothing the commands read.
    let big = std::fs::File::create(tmp.path().join("dataset.bin")).unwrap();
    big.set_len(kleene::shell::MAX_PLAN_FILE_BYTES * 2).unwrap();
    let out = run(tmp.path(), &plan);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let listed = std::fs::read_to_string(tmp.path().join("st/workspace/app/MODULE")).unwrap();
    assert_eq!(listed.trim(), "0", "the plan's copy holds no file");
}

/// What was added under a bound directory since the run started and cannot be carried (a
/// FIFO, a symlink, a file past the bound) is named by `resume` with why, not only "no
/// longer loads"; a FIFO never makes it wait.
#[test]
fn what_resume_cannot_carry_is_named_with_why() {
    type Add = fn(&Path);
    let cases: [(&str, Add); 3] = [
        ("tasks/pipe: it is not a regular file", |dir| {
            assert_eq!(
                std::process::Command::new("mkfifo")
                    .arg(dir.join("tasks/pipe"))
                    .status()
                    .unwrap()
                    .code(),
                Some(0)
            );
        }),
        ("tasks/passwd: it is a symlink", |dir| {
            std::os::unix::fs::symlink("/etc/passwd", dir.join("tasks/passwd")).unwrap();
        }),
        ("tasks/big.bin (9437184 bytes)", |dir| {
            std::fs::write(dir.join("tasks/big.bin"), vec![0u8; 9 * 1024 * 1024]).unwrap();
        }),
    ];
    for (named, add) in cases {
        let tmp = TempDir::new().unwrap();
        let plan = scripted(tmp.path(), "mkdir -p app && echo ok > app/model.txt\n");
        let out = run(tmp.path(), &plan);
        assert_eq!(out.status.code(), Some(0), "{}", both(&out));
        add(tmp.path());
        let out = kleene(tmp.path())
            .args(["resume", "--state", "st"])
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(named), "{named}: {err}");
    }
}

/// A plan at the root of a project in git, with a 12 MiB build directory and a virtualenv
/// that `.gitignore` names: run with the output redirected into the project, then resume
/// with it redirected there again: nothing the commands never read is bound or refused.
#[test]
fn a_project_root_binds_what_git_tracks_and_never_kleenes_own_output() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path();
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "git {args:?}");
    };
    if std::process::Command::new("git")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no git here");
        return;
    }
    let plan = scripted(dir, "mkdir -p app && echo ok > app/model.txt\n");
    std::fs::write(dir.join(".gitignore"), "/build/\n/.venv/\n/st/\n").unwrap();
    std::fs::create_dir_all(dir.join("build")).unwrap();
    std::fs::write(dir.join("build/big.bin"), vec![0u8; 12 << 20]).unwrap();
    std::fs::create_dir_all(dir.join(".venv/lib")).unwrap();
    std::fs::write(dir.join(".venv/pyvenv.cfg"), "home = /usr/bin\n").unwrap();
    git(&["init", "-q"]);
    git(&["add", "."]);
    let log = |name: &str| std::fs::File::create(dir.join(name)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kleene"))
        .current_dir(dir)
        .args(["run", plan.to_str().unwrap(), "--state", "st"])
        .stdout(log("run.out"))
        .stderr(log("run.err"))
        .status()
        .unwrap();
    let said = std::fs::read_to_string(dir.join("run.out")).unwrap()
        + &std::fs::read_to_string(dir.join("run.err")).unwrap();
    assert_eq!(out.code(), Some(0), "{said}");
    let manifest = std::fs::read_to_string(dir.join("st/plan-files.json")).unwrap();
    for never in ["run.out", "run.err", "build/", ".venv/"] {
        assert!(!manifest.contains(never), "{never} bound: {manifest}");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kleene"))
        .current_dir(dir)
        .args(["resume", "--state", "st"])
        .stdout(log("resume.out"))
        .stderr(log("run.err"))
        .status()
        .unwrap();
    let said = std::fs::read_to_string(dir.join("resume.out")).unwrap()
        + &std::fs::read_to_string(dir.join("run.err")).unwrap();
    assert_eq!(out.code(), Some(0), "{said}");
}

/// `validate` and `run` say how much of the project a plan binds, and where the bytes are.
#[test]
fn validate_and_run_say_what_the_plan_binds_and_its_largest_files() {
    let tmp = TempDir::new().unwrap();
    let plan = scripted(tmp.path(), "mkdir -p app && echo ok > app/model.txt\n");
    std::fs::write(tmp.path().join("fixture.bin"), vec![7u8; 5000]).unwrap();
    let out = kleene(tmp.path())
        .args(["validate", plan.to_str().unwrap()])
        .output()
        .unwrap();
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains("binds 3 files of the project")
            && said.contains("the largest: fixture.bin (5000 bytes)"),
        "{said}"
    );
    let out = run(tmp.path(), &plan);
    assert!(
        text(&out.stderr).contains("kleene: the plan binds 3 files of the project"),
        "{}",
        both(&out)
    );
}
