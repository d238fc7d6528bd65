//! `kleene::process` through a contained host: the `kleene` binary serves as the PID 1 of a
//! namespace for every command these tests run (each test thread keeps its own host).

use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use kleene::process::{self, Containment, Interrupt, Invocation, RunError};

/// These tests share the process's spare hosts: one at a time, each sees only its own.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Holds [`ONE_AT_A_TIME`] for a test (a test that failed while holding it does not stop
/// the others).
fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// [`alone`], where commands are contained here (see [`contained`]).
fn contained_alone() -> Option<std::sync::MutexGuard<'static, ()>> {
    let alone = alone();
    contained().then_some(alone)
}

/// Names the `kleene` binary as the host; `false` where no PID namespace can be made here.
fn contained() -> bool {
    assert!(process::contain_commands_with(env!("CARGO_BIN_EXE_kleene")));
    let works = process::containment() == Containment::PidNamespace;
    if !works {
        eprintln!("skipped: no PID namespace on this machine");
    }
    works
}

fn inv<'a>(command: &'a str, dir: &'a Path) -> Invocation<'a> {
    Invocation {
        timeout: Duration::from_secs(10),
        ..Invocation::new(command, dir)
    }
}

#[test]
fn exit_codes_output_stdin_and_env_cross_the_host() {
    let Some(_alone) = contained_alone() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let input = vec![b'x'; 3 << 20];
    let mut i = inv("wc -c; echo \"$K\" >&2; pwd >&2; exit 7", dir.path());
    i.stdin = Some(&input);
    i.env.push(("K", "v".to_owned()));
    let done = process::run(&i, &Interrupt::default()).unwrap();
    assert_eq!(done.code, Some(7));
    assert_eq!(done.tail.stdout().trim(), (3 << 20).to_string());
    let canonical = dir.path().canonicalize().unwrap();
    assert!(done.tail.stderr().contains('v'), "{}", done.tail.stderr());
    assert!(
        done.tail.stderr().contains(canonical.to_str().unwrap()),
        "{}",
        done.tail.stderr()
    );
    let err = process::run(
        &inv("no-such-command-kleene", dir.path()),
        &Interrupt::default(),
    )
    .unwrap_err();
    assert!(matches!(err, RunError::NotFound { .. }), "{err}");
}

#[test]
fn a_relative_directory_means_one_under_the_callers() {
    let Some(_alone) = contained_alone() else {
        return;
    };
    let done = process::run(&inv("pwd", Path::new("tests")), &Interrupt::default()).unwrap();
    assert!(
        done.tail.stdout().trim_end().ends_with("/tests"),
        "{}",
        done.tail.stdout()
    );
}

#[test]
fn a_setsid_child_is_gone_before_run_returns() {
    let Some(_alone) = contained_alone() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("late");
    let command = format!(
        "(setsid sh -c 'sleep 0.3; echo late > {}' > /dev/null 2>&1 < /dev/null &); sleep 0.1",
        marker.display()
    );
    let done = process::run(&inv(&command, dir.path()), &Interrupt::default()).unwrap();
    assert!(done.success());
    thread::sleep(Duration::from_millis(600));
    assert!(!marker.exists(), "the setsid child outlived its command");
}

#[test]
fn a_timeout_stops_the_command_and_the_host_serves_the_next() {
    let Some(_alone) = contained_alone() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut i = inv("echo started; sleep 30", dir.path());
    // Long enough for a loaded machine to start the shell and echo; far short of the sleep.
    i.timeout = Duration::from_secs(2);
    let started = Instant::now();
    let err = process::run(&i, &Interrupt::default()).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(25));
    match err {
        RunError::TimedOut { tail, .. } => assert_eq!(tail.stdout().trim(), "started"),
        other => panic!("not a timeout: {other}"),
    }
    let done = process::run(&inv("echo again", dir.path()), &Interrupt::default()).unwrap();
    assert_eq!(done.tail.stdout().trim(), "again");
}

#[test]
fn an_interrupt_stops_the_command_and_a_new_host_serves_the_next() {
    let Some(_alone) = contained_alone() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (started_mark, release, marker) = (
        dir.path().join("started"),
        dir.path().join("release"),
        dir.path().join("after"),
    );
    // The command runs until the test releases it, which it does only after the interrupt:
    // a command that survived would then write the marker at once.
    let command = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.02; done; touch {}",
        started_mark.display(),
        release.display(),
        marker.display()
    );
    let interrupt = Interrupt::default();
    let flag = interrupt.clone();
    let setter = thread::spawn(move || {
        let waiting = Instant::now();
        while !started_mark.exists() && waiting.elapsed() < Duration::from_secs(30) {
            thread::sleep(Duration::from_millis(10));
        }
        flag.set();
    });
    let err = process::run(&inv(&command, dir.path()), &interrupt).unwrap_err();
    setter.join().unwrap();
    assert!(err.is_interrupted(), "{err}");
    std::fs::write(&release, "").unwrap();
    thread::sleep(Duration::from_millis(500));
    assert!(!marker.exists(), "the interrupted command kept running");
    let done = process::run(&inv("echo again", dir.path()), &Interrupt::default()).unwrap();
    assert_eq!(done.tail.stdout().trim(), "again");
}

#[test]
fn threads_run_commands_at_once_each_in_its_own_host() {
    let Some(_alone) = contained_alone() else {
        return;
    };
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let marks = dir.path().display().to_string();
    // Each command waits until all three have started: one host would run them one after
    // another, and the first would give up waiting (exit 1).
    let workers: Vec<_> = (0..3)
        .map(|n| {
            let dir = Arc::clone(&dir);
            let command = format!(
                "touch {marks}/m{n}; i=0; \
                 until [ -e {marks}/m0 ] && [ -e {marks}/m1 ] && [ -e {marks}/m2 ]; do \
                 i=$((i+1)); [ $i -gt 3000 ] && exit 1; sleep 0.01; done; echo {n}"
            );
            thread::spawn(move || {
                process::run(&inv(&command, dir.path()), &Interrupt::default()).unwrap()
            })
        })
        .collect();
    for (n, w) in workers.into_iter().enumerate() {
        let done = w.join().unwrap();
        assert!(done.success(), "command {n} never saw the others start");
        assert_eq!(done.tail.stdout().trim(), n.to_string());
    }
}

/// A thread's host outlives the thread: the next thread to run a command takes it instead of
/// starting one (a run's next pass, on threads of its own, pays no host start).
#[test]
fn the_next_thread_takes_the_host_of_one_that_ended() {
    let Some(_alone) = contained_alone() else {
        return;
    };
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let namespace = || {
        let dir = Arc::clone(&dir);
        thread::spawn(move || {
            let done = process::run(
                &inv("readlink /proc/self/ns/pid", dir.path()),
                &Interrupt::default(),
            )
            .unwrap();
            assert!(done.success(), "{}", done.tail.stderr());
            done.tail.stdout().trim().to_owned()
        })
        .join()
        .unwrap()
    };
    let first = namespace();
    assert!(first.starts_with("pid:["), "{first}");
    assert_eq!(namespace(), first);
}

/// The init of the namespace `namespace` (as `readlink /proc/self/ns/pid` names it): the
/// process there whose id in it is 1.
fn init_of(namespace: &str) -> Option<i32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let theirs = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?;
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let innermost = status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))?
                .split_whitespace()
                .last()?
                .to_owned();
            (theirs.to_str() == Some(namespace) && innermost == "1").then_some(pid)
        })
}

/// A host killed while its command runs takes the command with it (the kernel ends the
/// namespace): the call is an infrastructure failure, not the command's own death by
/// SIGKILL, and the next command gets a new host.
#[test]
fn a_host_killed_during_a_command_fails_the_call_and_a_new_host_serves_the_next() {
    let Some(_alone) = contained_alone() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("namespace");
    let command = format!(
        "readlink /proc/self/ns/pid > {0}.part && mv {0}.part {0}; sleep 30",
        mark.display()
    );
    let killer = thread::spawn(move || {
        let waiting = Instant::now();
        while !mark.exists() && waiting.elapsed() < Duration::from_secs(30) {
            thread::sleep(Duration::from_millis(10));
        }
        let namespace = std::fs::read_to_string(&mark).unwrap();
        let host = init_of(namespace.trim()).expect("the namespace has an init");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(host), nix::sys::signal::SIGKILL)
            .unwrap();
    });
    let started = Instant::now();
    let err = process::run(&inv(&command, dir.path()), &Interrupt::default()).unwrap_err();
    killer.join().unwrap();
    assert!(started.elapsed() < Duration::from_secs(25));
    assert!(matches!(err, RunError::Wait { .. }), "{err}");
    let done = process::run(&inv("echo again", dir.path()), &Interrupt::default()).unwrap();
    assert_eq!(done.tail.stdout().trim(), "again");
}

/// A host back from the spares is recorded where the commands of the thread that took it are
/// recorded: the state directory it served before no longer names it once its thread ended.
#[test]
fn a_host_back_from_the_spares_is_recorded_where_its_next_commands_are() {
    let Some(_alone) = contained_alone() else {
        return;
    };
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let first = process::GroupRecords::new(dir.path().join("first"));
    let second = process::GroupRecords::new(dir.path().join("second"));
    let (d, records) = (Arc::clone(&dir), first.clone());
    thread::spawn(move || {
        let mut i = inv("true", d.path());
        i.records = Some((&records, "first".to_owned()));
        assert!(process::run(&i, &Interrupt::default()).unwrap().success());
    })
    .join()
    .unwrap();
    assert!(first.live().is_empty(), "{:?}", first.live());
    let release = dir.path().join("release");
    let command = format!("while [ ! -e {} ]; do sleep 0.01; done", release.display());
    let (d, records) = (Arc::clone(&dir), second.clone());
    let user = thread::spawn(move || {
        let mut i = inv(&command, d.path());
        i.records = Some((&records, "second".to_owned()));
        process::run(&i, &Interrupt::default()).unwrap()
    });
    let waiting = Instant::now();
    let mut live = second.live();
    while live.is_empty() && waiting.elapsed() < Duration::from_secs(30) {
        thread::sleep(Duration::from_millis(10));
        live = second.live();
    }
    std::fs::write(&release, "").unwrap();
    assert!(user.join().unwrap().success());
    assert_eq!(live.len(), 1, "{live:?}");
    assert!(live[0].label.starts_with("second"), "{live:?}");
}
