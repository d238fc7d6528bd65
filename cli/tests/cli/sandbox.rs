//! Commands in the sandbox: what a hostile command tries is denied, named in its call's
//! evidence, and the run's state stays whole; real toolchains still work; `--sandbox off`
//! says what it cannot stop.

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use serde_json::json;
use tempfile::TempDir;

use crate::cli::basics::{kleene, task, text, write_plan};

/// Whether this kernel confines commands (Landlock); the tests that need it say when not.
fn confined_here() -> bool {
    let confined = kleene::process::sandbox::mode() == kleene::process::sandbox::Mode::Landlock;
    if !confined {
        eprintln!("skipped: this kernel has no Landlock");
    }
    confined
}

fn run_in(dir: &Path, plan: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let out = kleene(dir)
        .args(["run", plan.to_str().unwrap(), "--state", "st", "--no-cache"])
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code(),
        format!("{}{}", text(&out.stdout), text(&out.stderr)),
    )
}

/// The name of the journal a run on `channel` keeps (it depends on the channel alone),
/// learnt from a benign run in a state directory of its own.
fn journal_name(dir: &Path, channel: &str) -> String {
    let plan = write_plan(
        dir,
        vec![task(
            "probe",
            "config",
            &["p.txt"],
            &[],
            json!({"run": "echo p > p.txt"}),
        )],
    );
    let out = kleene(dir)
        .args([
            "run",
            plan.to_str().unwrap(),
            "--state",
            "probe",
            "--no-cache",
        ])
        .args(["--channel", channel])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let name = std::fs::read_dir(dir.join("probe/journal"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name();
    std::fs::remove_dir_all(dir.join("probe")).unwrap();
    std::fs::remove_file(plan).unwrap();
    name.to_string_lossy().into_owned()
}

/// Each hostile command alone in its task (the denied step fails the task): a write outside
/// the stage, a read of the state directory, an append to the journal, a write into the
/// stages beside its own, and a read through a symlink planted to the state directory.
#[test]
fn hostile_commands_are_denied_named_in_their_evidence_and_the_state_stays_whole() {
    if !confined_here() {
        return;
    }
    let tmp = TempDir::new().unwrap();
    let outside = TempDir::new().unwrap();
    let channel = "hostile";
    let journal = journal_name(tmp.path(), channel);
    let escape = outside.path().join("escape");
    let hostile = [
        ("write_outside", format!("echo x > {}", escape.display())),
        ("read_state", "cat ../../run.json".to_owned()),
        (
            "append_journal",
            format!("echo junk >> ../../journal/{journal}"),
        ),
        ("other_stage", "mkdir ../other-stage".to_owned()),
        (
            "planted_link",
            "ln -s ../../run.json seen && cat seen".to_owned(),
        ),
    ];
    let tasks = hostile
        .iter()
        .map(|(id, run)| {
            task(
                id,
                "config",
                &[&format!("{id}.txt")],
                &[],
                json!({"run": format!("echo ok > {id}.txt && {run}")}),
            )
        })
        .collect();
    let plan = write_plan(tmp.path(), tasks);
    let state = tmp.path().join("st");
    let (code, said) = run_in(tmp.path(), &plan, &["--channel", channel, "-j", "1"]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("(commands sandboxed)"), "{said}");
    assert!(!escape.exists(), "{said}");
    assert!(!state.join("stages/other-stage").exists(), "{said}");
    // Each failed, its evidence naming the path it was denied.
    let named = [
        ("write_outside", escape.display().to_string()),
        ("read_state", state.join("run.json").display().to_string()),
        (
            "append_journal",
            state.join("journal").join(&journal).display().to_string(),
        ),
        (
            "other_stage",
            state.join("stages/other-stage").display().to_string(),
        ),
        ("planted_link", state.join("run.json").display().to_string()),
    ];
    let out = kleene(tmp.path())
        .args(["status", "--state", "st"])
        .output()
        .unwrap();
    let status = text(&out.stdout);
    for (id, path) in &named {
        assert!(
            status
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{id} ")) && l.contains("failed")),
            "{id}: {status}"
        );
        assert!(
            said.contains(&format!("{path} denied by the sandbox")),
            "{id} names {path}: {said}"
        );
    }
    assert!(status.contains("denied by the sandbox"), "{status}");
    assert!(
        said.contains("declares other paths in its `sandbox`"),
        "{said}"
    );
    // The state is whole: every command that reads it verifies it.
    for args in [&["status"][..], &["audit"], &["resume"]] {
        let out = kleene(tmp.path())
            .args(args)
            .args(["--state", "st"])
            .output()
            .unwrap();
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(
            !all.contains("damaged") && !all.contains("tamper") && !all.contains("corrupt"),
            "{args:?}: {all}"
        );
        assert_ne!(out.status.code(), Some(2), "{args:?}: {all}");
    }
}

/// `--sandbox off` runs commands as the user would: the write outside the stage lands, and
/// the run's first line says commands are unconfined.
#[test]
fn sandbox_off_says_so_and_stops_nothing() {
    let tmp = TempDir::new().unwrap();
    let outside = TempDir::new().unwrap();
    let escape = outside.path().join("escape");
    let plan = write_plan(
        tmp.path(),
        vec![task(
            "a",
            "config",
            &["a.txt"],
            &[],
            json!({"run": format!("echo a > a.txt && echo x > {}", escape.display())}),
        )],
    );
    let (code, said) = run_in(tmp.path(), &plan, &["--sandbox", "off"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("(commands unconfined: --sandbox off)"),
        "{said}"
    );
    assert!(escape.exists());
    // So does a task that opts out (`"sandbox": false`), with the sandbox on.
    std::fs::remove_file(&escape).unwrap();
    let plan = write_plan(
        tmp.path(),
        vec![task(
            "a",
            "config",
            &["a.txt"],
            &[],
            json!({"run": format!("echo a > a.txt && echo x > {}", escape.display()),
                   "sandbox": false}),
        )],
    );
    let (code, said) = run_in(tmp.path(), &plan, &["--restart"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(escape.exists(), "{said}");
}

/// A path a task's sandbox declares is written; the same write undeclared is denied; a
/// relative declared path is refused when the plan loads, at its position.
#[test]
fn a_declared_path_is_given_and_a_relative_one_refused() {
    if !confined_here() {
        return;
    }
    let tmp = TempDir::new().unwrap();
    let shared = TempDir::new().unwrap();
    let log = shared.path().join("log");
    let run = format!("echo a > a.txt && echo seen >> {}", log.display());
    let plan = write_plan(
        tmp.path(),
        vec![task(
            "a",
            "config",
            &["a.txt"],
            &[],
            json!({"run": run, "sandbox": {"write": [shared.path()]}}),
        )],
    );
    let (code, said) = run_in(tmp.path(), &plan, &[]);
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "seen\n");
    let plan = write_plan(
        tmp.path(),
        vec![task(
            "a",
            "config",
            &["a.txt"],
            &[],
            json!({"run": run, "sandbox": {"write": ["logs"]}}),
        )],
    );
    let (code, said) = run_in(tmp.path(), &plan, &["--restart"]);
    assert_eq!(code, Some(2), "{said}");
    assert!(
        said.contains("sandbox.write[0]") && said.contains("`logs` is relative"),
        "{said}"
    );
}

/// `"network": false` cuts the network: a connection to a server on loopback is refused and
/// named, while a task with the network open reaches it.
#[test]
fn network_false_stops_a_command_reaching_a_server_on_loopback() {
    if !confined_here() || kleene::process::sandbox::landlock_abi() < 4 {
        eprintln!("skipped: this kernel cannot cut the network with Landlock");
        return;
    }
    if !std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("skipped: no python3");
        return;
    }
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    server.set_nonblocking(true).unwrap();
    let port = server.local_addr().unwrap().port();
    let connect = format!(
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5).sendall(b'hi')\""
    );
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(
        tmp.path(),
        vec![task(
            "cut",
            "config",
            &["cut.txt"],
            &[],
            json!({"run": format!("echo a > cut.txt && {connect}"),
                   "sandbox": {"network": false}}),
        )],
    );
    let (code, said) = run_in(tmp.path(), &plan, &[]);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("the network is cut for this command"),
        "{said}"
    );
    assert!(server.accept().is_err(), "a connection got through: {said}");
    let plan = write_plan(
        tmp.path(),
        vec![task(
            "open",
            "config",
            &["open.txt"],
            &[],
            json!({"run": format!("echo a > open.txt && {connect}")}),
        )],
    );
    let (code, said) = run_in(tmp.path(), &plan, &["--restart"]);
    assert_eq!(code, Some(0), "{said}");
    std::thread::sleep(Duration::from_millis(100));
    let (mut conn, _) = server.accept().unwrap();
    conn.set_nonblocking(false).unwrap();
    let mut got = Vec::new();
    conn.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"hi");
}

/// A C project built with `make` and `cc`, and a Python virtualenv a task makes and runs
/// pytest from, both under the default sandbox (the Rust crate and the Python package of
/// `examples/` run under it in `examples.rs`).
#[test]
fn make_and_a_virtualenv_work_in_the_sandbox() {
    let tmp = TempDir::new().unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(
        project.join("hello.c"),
        "#include <stdio.h>\nint main(void) { puts(\"hello\"); return 0; }\n",
    )
    .unwrap();
    std::fs::write(
        project.join("Makefile"),
        "hello: hello.c\n\tcc -o hello hello.c\n",
    )
    .unwrap();
    std::fs::write(
        project.join("test_it.py"),
        "def test_it():\n    assert 1 + 1 == 2\n",
    )
    .unwrap();
    let have = |program: &str| {
        std::process::Command::new(program)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let mut tasks = Vec::new();
    if have("make") && have("cc") {
        tasks.push(task(
            "c_build",
            "config",
            &["out.txt"],
            &[],
            json!({"run": "make && ./hello > out.txt", "scratch": ["hello"]}),
        ));
    } else {
        eprintln!("skipped the C project: no make or cc");
    }
    let pytest = std::process::Command::new("python3")
        .args(["-m", "pytest", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if pytest {
        tasks.push(task(
            "venv_tests",
            "config",
            &["tested.txt"],
            &[],
            json!({
                "run": "python3 -m venv --system-site-packages .venv \
                        && .venv/bin/python -m pytest -q -p no:cacheprovider test_it.py \
                        && echo passed > tested.txt",
                "scratch": [".venv/**", "**/__pycache__/**"],
            }),
        ));
    } else {
        eprintln!("skipped the virtualenv: no pytest");
    }
    if tasks.is_empty() {
        return;
    }
    let plan = write_plan(&project, tasks);
    let (code, said) = run_in(&project, &plan, &[]);
    assert_eq!(code, Some(0), "{said}");
    if have("make") && have("cc") {
        assert_eq!(
            std::fs::read_to_string(project.join("st/workspace/out.txt")).unwrap(),
            "hello\n"
        );
    }
}

/// A confined command cannot signal kleene (Landlock ABI 6): under process groups alone,
/// where the command's parent is kleene itself, `kill -0 $PPID` is refused; unconfined it
/// is not.
#[test]
fn a_confined_command_cannot_signal_kleene() {
    if !confined_here() || kleene::process::sandbox::landlock_abi() < 6 {
        eprintln!("skipped: this kernel's Landlock cannot scope signals");
        return;
    }
    let tmp = TempDir::new().unwrap();
    let plan = write_plan(
        tmp.path(),
        vec![task(
            "a",
            "config",
            &["a.txt"],
            &[],
            json!({"run": "kill -0 $PPID; echo $? > a.txt"}),
        )],
    );
    for (mode, expected) in [("on", "1\n"), ("off", "0\n")] {
        let out = kleene(tmp.path())
            .env("KLEENE_CONTAINMENT", "process-group")
            .args(["run", plan.to_str().unwrap(), "--state", "st", "--no-cache"])
            .args(["--restart", "--sandbox", mode])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
        let got = std::fs::read_to_string(tmp.path().join("st/workspace/a.txt")).unwrap();
        assert_eq!(got, expected, "--sandbox {mode}");
    }
}

/// Every containment confines alike: under a cgroup per command (whose shell enters its
/// cgroup through a file the sandbox gives it), a subreaper host (which receives the sandbox
/// in its request) and process groups alone, a benign task is accepted and a write outside
/// its stage is denied and named.
#[test]
fn every_containment_confines_alike() {
    if !confined_here() {
        return;
    }
    let outside = TempDir::new().unwrap();
    for containment in ["default", "cgroup", "subreaper", "process-group"] {
        let tmp = TempDir::new().unwrap();
        let escape = outside.path().join(containment);
        let plan = write_plan(
            tmp.path(),
            vec![
                task(
                    "benign",
                    "config",
                    &["b.txt"],
                    &[],
                    json!({"run": "echo b > b.txt && cat b.txt > /dev/null"}),
                ),
                task(
                    "hostile",
                    "config",
                    &["h.txt"],
                    &[],
                    json!({"run": format!("echo h > h.txt && echo x > {}", escape.display())}),
                ),
            ],
        );
        let out = kleene(tmp.path())
            .env("KLEENE_CONTAINMENT", containment)
            .args(["run", plan.to_str().unwrap(), "--state", "st", "--no-cache"])
            .output()
            .unwrap();
        let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(1), "{containment}: {said}");
        assert!(said.contains("benign: accepted"), "{containment}: {said}");
        assert!(
            said.contains(&format!("{} denied by the sandbox", escape.display())),
            "{containment}: {said}"
        );
        assert!(!escape.exists(), "{containment}");
    }
}
