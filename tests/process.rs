//! `kleene::process` through a contained host: the `kleene` binary serves as the PID 1 of a
//! namespace for every command these tests run (each test thread keeps its own host).

use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use kleene::process::{self, Containment, Interrupt, Invocation, RunError};

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
    if !contained() {
        return;
    }
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
    if !contained() {
        return;
    }
    let done = process::run(&inv("pwd", Path::new("tests")), &Interrupt::default()).unwrap();
    assert!(
        done.tail.stdout().trim_end().ends_with("/tests"),
        "{}",
        done.tail.stdout()
    );
}

#[test]
fn a_setsid_child_is_gone_before_run_returns() {
    if !contained() {
        return;
    }
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
    if !contained() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut i = inv("echo started; sleep 30", dir.path());
    i.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let err = process::run(&i, &Interrupt::default()).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    match err {
        RunError::TimedOut { tail, .. } => assert_eq!(tail.stdout().trim(), "started"),
        other => panic!("not a timeout: {other}"),
    }
    let done = process::run(&inv("echo again", dir.path()), &Interrupt::default()).unwrap();
    assert_eq!(done.tail.stdout().trim(), "again");
}

#[test]
fn an_interrupt_stops_the_command_and_a_new_host_serves_the_next() {
    if !contained() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("after");
    let command = format!("sleep 1; touch {}", marker.display());
    let interrupt = Interrupt::default();
    let flag = interrupt.clone();
    let setter = thread::spawn(move || {
        thread::sleep(Duration::from_millis(200));
        flag.set();
    });
    let started = Instant::now();
    let err = process::run(&inv(&command, dir.path()), &interrupt).unwrap_err();
    setter.join().unwrap();
    assert!(err.is_interrupted(), "{err}");
    assert!(started.elapsed() < Duration::from_millis(900));
    thread::sleep(Duration::from_millis(1200));
    assert!(!marker.exists(), "the interrupted command kept running");
    let done = process::run(&inv("echo again", dir.path()), &Interrupt::default()).unwrap();
    assert_eq!(done.tail.stdout().trim(), "again");
}

#[test]
fn threads_run_commands_at_once_each_in_its_own_host() {
    if !contained() {
        return;
    }
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let started = Instant::now();
    let workers: Vec<_> = (0..3)
        .map(|n| {
            let dir = Arc::clone(&dir);
            thread::spawn(move || {
                let command = format!("sleep 0.5; echo {n}");
                process::run(&inv(&command, dir.path()), &Interrupt::default()).unwrap()
            })
        })
        .collect();
    for (n, w) in workers.into_iter().enumerate() {
        assert_eq!(w.join().unwrap().tail.stdout().trim(), n.to_string());
    }
    // One host would have run them one after another (1.5 s).
    assert!(
        started.elapsed() < Duration::from_millis(1400),
        "{:?}",
        started.elapsed()
    );
}
