//! End-to-end tests on loopback against a real Restate server (started by
//! `scripts/restate-server.sh start`): worker processes behind the adapter's balancer, plans
//! submitted with the binary. Without a server they are skipped with a message, unless
//! `CI=true`, where a missing server fails them.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use std::num::NonZeroUsize;
use std::sync::Arc;

use kleene::acceptance::{AcceptanceRecord, BuildBinding, accept_audited};
use kleene::batch::{BatchEvidence, ClosureWorker, FileJournal};
use kleene::closure::{RecoveryPolicy, step::RecoverOn};
use kleene::id::ChannelId;
use kleene::shell::{self, ShellPlan, ShellRuntime};
use kleene::snapshot::Snapshot;
use kleene_restate::accept::KeptRecords;
use kleene_restate::service::Submission;
use kleene_restate::status::ChannelStatus;

const BIN: &str = env!("CARGO_BIN_EXE_kleene-restate");

/// One test at a time: each registers its own workers as the server's deployment.
static SERIAL: Mutex<()> = Mutex::new(());

fn ingress() -> String {
    std::env::var("RESTATE_INGRESS_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into())
}

fn admin() -> String {
    std::env::var("RESTATE_ADMIN_URL").unwrap_or_else(|_| "http://127.0.0.1:9070".into())
}

/// Whether `url`'s `/health` answers 200.
fn healthy(url: &str) -> bool {
    let Some(addr) = url.strip_prefix("http://") else {
        return false;
    };
    let Ok(mut s) = TcpStream::connect(addr.trim_end_matches('/')) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.0\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.ends_with(b"200")
}

/// The serial lock when a server is there; `None` (skip) when it is not, a failure on CI.
fn server() -> Option<MutexGuard<'static, ()>> {
    let guard = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    if healthy(&admin()) {
        return Some(guard);
    }
    let message = format!(
        "no Restate server answers on {}; start one with scripts/restate-server.sh start",
        admin()
    );
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
    eprintln!("skipped: {message}");
    None
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn balancer_port() -> u16 {
    std::env::var("KLEENE_RESTATE_E2E_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(9180)
}

fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on port {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills the process (SIGKILL) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Worker processes behind a balancer, registered with the server.
struct Cluster {
    workers: Vec<Option<Proc>>,
    dirs: Vec<PathBuf>,
    _balancer: Proc,
    _temp: tempfile::TempDir,
}

impl Cluster {
    fn start(workers: usize, jobs: usize) -> Self {
        Self::start_as(workers, jobs, None, None)
    }

    /// Workers as if on other machines: each in its own empty working directory with its own
    /// `--dir`, and run as the user `uid` when one is given; all given the content store
    /// `store` when there is one.
    fn start_as(workers: usize, jobs: usize, uid: Option<u32>, store: Option<&Path>) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let temp = tempfile::tempdir().expect("a temporary directory");
        let mut procs = Vec::new();
        let mut dirs = Vec::new();
        let mut backends = Vec::new();
        if uid.is_some() {
            let open = std::fs::Permissions::from_mode(0o755);
            std::fs::set_permissions(temp.path(), open).expect("open the cluster's directory");
        }
        for i in 0..workers {
            let port = free_port();
            let dir = temp.path().join(format!("w{i}"));
            let cwd = temp.path().join(format!("w{i}-cwd"));
            for d in [&dir, &cwd] {
                std::fs::create_dir_all(d).expect("a worker directory");
                if let Some(uid) = uid {
                    std::os::unix::fs::chown(d, Some(uid), Some(uid)).expect("chown");
                }
            }
            let mut command = match uid {
                Some(uid) => {
                    let mut c = Command::new("setpriv");
                    c.arg(format!("--reuid={uid}"))
                        .arg(format!("--regid={uid}"))
                        .arg("--clear-groups")
                        .arg(BIN);
                    c
                }
                None => Command::new(BIN),
            };
            let child = command
                .current_dir(&cwd)
                .args(["worker", "--listen", &format!("127.0.0.1:{port}")])
                .env("RESTATE_INGRESS_URL", ingress())
                .args(["--jobs", &jobs.to_string()])
                .arg("--dir")
                .arg(&dir)
                .args(store.map(|s| format!("--store={}", s.display())))
                .stderr(Stdio::null())
                .spawn()
                .expect("start a worker");
            procs.push(Some(Proc(child)));
            dirs.push(dir);
            backends.push(port);
        }
        for &p in &backends {
            wait_for_port(p);
        }
        // One deployment URL for every test: an invocation stays pinned to the deployment it
        // started on, so a later test's workers serve an earlier test's retries.
        let port = balancer_port();
        let mut balance = Command::new(BIN);
        balance.args(["balance", "--listen", &format!("127.0.0.1:{port}")]);
        for p in &backends {
            balance.args(["--backend", &format!("http://127.0.0.1:{p}")]);
        }
        let balancer = Proc(
            balance
                .stderr(Stdio::null())
                .spawn()
                .expect("start the balancer"),
        );
        wait_for_port(port);
        let out = Command::new(BIN)
            .args(["register", "--admin", &admin()])
            .args(["--endpoint", &format!("http://127.0.0.1:{port}")])
            .output()
            .expect("run register");
        assert!(
            out.status.success(),
            "register: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self {
            workers: procs,
            dirs,
            _balancer: balancer,
            _temp: temp,
        }
    }

    /// SIGKILLs worker `i`.
    fn kill(&mut self, i: usize) {
        self.workers[i] = None;
    }

    /// The worker whose stages hold call `call` (`TASK-N`), waiting for one to appear.
    fn running(&self, call: &str) -> usize {
        let deadline = Instant::now() + Duration::from_secs(20);
        // kleene's shell runtime names a call's stage `call-TASK-N` (and more when commands
        // can outlive their calls), in the stages of the channel's own directory.
        let stage = format!("call-{call}");
        let has_stage = |runs: &Path| {
            std::fs::read_dir(runs).is_ok_and(|channels| {
                channels.flatten().any(|c| {
                    std::fs::read_dir(c.path().join("stages")).is_ok_and(|entries| {
                        entries.flatten().any(|e| {
                            let name = e.file_name().to_string_lossy().into_owned();
                            name == stage || name.starts_with(&format!("{stage}."))
                        })
                    })
                })
            })
        };
        loop {
            for (i, d) in self.dirs.iter().enumerate() {
                let found = has_stage(&d.join("runs"));
                if found {
                    return i;
                }
            }
            assert!(Instant::now() < deadline, "no worker started call {call}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A channel id no earlier run on the same server used.
fn channel(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("e2e-{name}-{}-{nanos}", std::process::id())
}

fn task(id: &str, run: &str, deps: &[&str]) -> serde_json::Value {
    serde_json::json!({
        "id": id, "kind": {"lane": "config"}, "owner": "shell", "spec": {"intent": id},
        "owned_paths": [format!("{id}.txt")], "depends_on": deps, "run": run,
    })
}

/// `tasks`, each allowed by its sandbox to append to `log` (made here: a sandbox gives only
/// what exists), which lies outside every stage.
fn logging_to(log: &Path, tasks: Vec<serde_json::Value>) -> Vec<serde_json::Value> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("make the log");
    tasks
        .into_iter()
        .map(|mut t| {
            t["sandbox"] = serde_json::json!({ "write": [log] });
            t
        })
        .collect()
}

fn plan_file(dir: &Path, tasks: Vec<serde_json::Value>) -> PathBuf {
    let path = dir.join("plan.json");
    std::fs::write(&path, serde_json::json!({ "tasks": tasks }).to_string()).expect("write plan");
    path
}

fn cli(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("RESTATE_INGRESS_URL", ingress())
        .env("RESTATE_ADMIN_URL", admin())
        .output()
        .expect("run kleene-restate")
}

fn status_of(out: &Output) -> ChannelStatus {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {} stderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn run(plan: &Path, channel: &str, extra: &[&str]) -> (Output, Duration) {
    let plan = plan.to_string_lossy().into_owned();
    let mut args = vec![
        "run",
        "--no-cache",
        "--json",
        "--channel",
        channel,
        plan.as_str(),
    ];
    args.extend_from_slice(extra);
    let start = Instant::now();
    let out = cli(&args);
    (out, start.elapsed())
}

#[test]
fn two_workers_give_the_local_run_s_results_and_a_second_submission_is_refused() {
    let Some(_serial) = server() else { return };
    let _cluster = Cluster::start(2, 4);
    let dir = tempfile::tempdir().unwrap();
    let plan = plan_file(
        dir.path(),
        vec![
            task("a", "echo alpha > a.txt", &[]),
            task("b", "tr a-z A-Z < a.txt > b.txt", &["a"]),
            task("c", "cat a.txt b.txt > c.txt", &["b"]),
            // Scratch (the plan's `target/**`) never reaches a candidate, here or locally.
            task(
                "d",
                "mkdir -p target && echo junk > target/j && echo delta > d.txt",
                &[],
            ),
            task("e", "cat c.txt d.txt > e.txt", &["c", "d"]),
        ],
    );
    let mut with_scratch: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&plan).unwrap()).unwrap();
    with_scratch["scratch"] = serde_json::json!(["target/**"]);
    std::fs::write(&plan, with_scratch.to_string()).unwrap();
    let chan = channel("results");
    let (out, _) = run(&plan, &chan, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let remote = status_of(&out);
    let plan_arg = plan.to_string_lossy().into_owned();
    let local = status_of(&cli(&["local", "--json", "--channel", &chan, &plan_arg]));
    assert!(remote.is_complete() && local.is_complete());
    assert_eq!(remote.tasks, local.tasks);
    assert_eq!(remote.evidence_digest, local.evidence_digest);
    // The same acceptance record: file manifest, task results, evidence, binding. Written
    // apart from the plan's directory, whose every file the plan binds.
    let out_dir = tempfile::tempdir().unwrap();
    let local_record = out_dir.path().join("local-record.json");
    let record_arg = local_record.to_string_lossy().into_owned();
    let out = cli(&[
        "local",
        "--json",
        "--channel",
        &chan,
        "--record",
        &record_arg,
        &plan_arg,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let archive = out_dir.path().join("remote.tar");
    let archive_arg = archive.to_string_lossy().into_owned();
    let accepted = cli(&[
        "accept",
        "--channel",
        &chan,
        "--export",
        &archive_arg,
        &plan_arg,
    ]);
    assert!(
        accepted.status.success(),
        "{}",
        String::from_utf8_lossy(&accepted.stderr)
    );
    let remote_record: serde_json::Value = serde_json::from_slice(&accepted.stdout).unwrap();
    let local_record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&local_record).unwrap()).unwrap();
    assert_eq!(remote_record, local_record);
    // The exported archive verifies against the record digest alone, as `kleene verify`
    // checks it.
    let stderr = String::from_utf8_lossy(&accepted.stderr);
    let digest: kleene::id::Digest = stderr
        .split_whitespace()
        .skip_while(|w| *w != "digest")
        .nth(1)
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("no record digest in {stderr}"));
    let bytes = std::fs::read(&archive).unwrap();
    let verified = kleene::acceptance::verify_archive(&bytes, digest).unwrap();
    assert_eq!(verified.files().len(), 5);

    let again = cli(&["run", "--no-cache", "--json", "--channel", &chan, &plan_arg]);
    assert_eq!(again.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        stderr.contains(&format!(
            "batch on channel {chan}: the channel already has evidence; resume it"
        )),
        "{stderr}"
    );
    // The channel object refuses it too, not only the client's check.
    let body = serde_json::json!({"plan": std::fs::read_to_string(&plan).unwrap(),
                                  "plan_dir": null, "jobs": 1, "block": []});
    let direct = Command::new("curl")
        .args(["-s", "-X", "POST", "-H", "content-type: application/json"])
        .arg(format!("{}/Channel/{chan}/submit", ingress()))
        .args(["-d", &body.to_string()])
        .output();
    if let Ok(direct) = direct {
        assert!(
            String::from_utf8_lossy(&direct.stdout).contains("already has evidence"),
            "{}",
            String::from_utf8_lossy(&direct.stdout)
        );
    }
}

/// Calls grouped three to a worker invocation (`--calls-per-invocation 3`): every task,
/// a fixed one and a failed one among them, ends as the local run's, with the same outputs.
#[test]
fn calls_grouped_into_invocations_give_the_local_run_s_results() {
    let Some(_serial) = server() else { return };
    let _cluster = Cluster::start(2, 4);
    let dir = tempfile::tempdir().unwrap();
    let mut tasks: Vec<serde_json::Value> = (0..9)
        .map(|i| task(&format!("r{i}"), &format!("echo {i} > r{i}.txt"), &[]))
        .collect();
    for i in 0..3 {
        let deps: Vec<String> = (0..3).map(|k| format!("r{}", i * 3 + k)).collect();
        let deps: Vec<&str> = deps.iter().map(String::as_str).collect();
        let inputs: Vec<String> = deps.iter().map(|d| format!("{d}.txt")).collect();
        let run = format!("cat {} > j{i}.txt", inputs.join(" "));
        tasks.push(task(&format!("j{i}"), &run, &deps));
    }
    let mut fixed = task("f", "echo wrong > f.txt", &["j0"]);
    fixed["checks"] = serde_json::json!([{"id": "right", "command": "grep -q right f.txt"}]);
    fixed["fix"] = "echo right > f.txt".into();
    tasks.push(fixed);
    tasks.push(task("x", "exit 3", &["j1"]));
    let plan = plan_file(dir.path(), tasks);
    let chan = channel("grouped");
    let (out, _) = run(&plan, &chan, &["--calls-per-invocation", "3"]);
    let remote = status_of(&out);
    let plan_arg = plan.to_string_lossy().into_owned();
    let local = status_of(&cli(&["local", "--json", "--channel", &chan, &plan_arg]));
    let ends = |s: &ChannelStatus| -> Vec<(String, String, Option<kleene::id::Digest>)> {
        let mut ends: Vec<_> = s
            .tasks
            .iter()
            .map(|t| (t.task.to_string(), format!("{:?}", t.status), t.accepted))
            .collect();
        ends.sort();
        ends
    };
    assert_eq!(ends(&remote), ends(&local), "{remote}");
    assert_eq!(
        remote.tasks.iter().filter(|t| t.accepted.is_some()).count(),
        13,
        "{remote}"
    );
}

/// Eight tasks that each sleep a second, writing when they started and ended (nanoseconds
/// since the epoch) under `log` (a directory their sandbox gives them), so a test can count
/// how many ran at once.
///
/// With `meet`, each sleep first waits (up to 30 s) until all eight have started, so eight
/// overlap exactly when eight run at once, however late a loaded machine starts the last:
/// the count does not depend on timing. A run of fewer at once makes the waiting ones give up,
/// and the count says so.
fn sleeps(dir: &Path, log: &Path, meet: bool) -> PathBuf {
    let shown = log.display();
    let wait = if meet {
        format!(
            "n=0; while [ $(ls {shown} | grep -c start) -lt 8 ] && [ $n -lt 300 ]; do \
             sleep 0.1; n=$((n+1)); done; "
        )
    } else {
        String::new()
    };
    plan_file(
        dir,
        (0..8)
            .map(|i| {
                let mut t = task(
                    &format!("s{i}"),
                    &format!(
                        "date +%s%N > {shown}/s{i}.start; {wait}sleep 1; \
                         date +%s%N > {shown}/s{i}.end; echo {i} > s{i}.txt"
                    ),
                    &[],
                );
                t["sandbox"] = serde_json::json!({ "write": [log] });
                t
            })
            .collect(),
    )
}

/// The most sleeps of [`sleeps`] that were running at one moment.
fn most_at_once(log: &Path) -> usize {
    let read = |name: String| -> u128 {
        let text = std::fs::read_to_string(log.join(&name)).expect(&name);
        text.trim().parse().expect(&name)
    };
    let mut edges: Vec<(u128, i32)> = (0..8)
        .flat_map(|i| {
            [
                (read(format!("s{i}.start")), 1),
                (read(format!("s{i}.end")), -1),
            ]
        })
        .collect();
    // An end sorts before a start at the same instant: touching intervals do not overlap.
    edges.sort_unstable();
    let (mut now, mut most) = (0, 0);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    usize::try_from(most).expect("a count")
}

#[test]
fn eight_sleeps_on_two_workers_of_four_run_all_at_once() {
    let Some(_serial) = server() else { return };
    let _cluster = Cluster::start(2, 4);
    let dir = tempfile::tempdir().unwrap();
    let log = tempfile::tempdir().unwrap();
    let (out, took) = run(
        &sleeps(dir.path(), log.path(), true),
        &channel("four"),
        &["--jobs", "8"],
    );
    assert!(
        status_of(&out).is_complete(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("8 x sleep 1, two workers of four calls: {took:?}");
    // Counted from the tasks' own clocks rather than the run's wall time, which a loaded
    // machine stretches, and met before they sleep: all eight sleeps overlapped, so the
    // workers ran four calls each.
    assert_eq!(most_at_once(log.path()), 8);
}

#[test]
fn eight_sleeps_on_two_workers_of_one_run_two_at_a_time() {
    let Some(_serial) = server() else { return };
    let _cluster = Cluster::start(2, 1);
    let dir = tempfile::tempdir().unwrap();
    let log = tempfile::tempdir().unwrap();
    let (out, took) = run(
        &sleeps(dir.path(), log.path(), false),
        &channel("one"),
        &["--jobs", "8"],
    );
    assert!(
        status_of(&out).is_complete(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("8 x sleep 1, two workers of one call: {took:?}");
    // Never more than the two workers' one call each, however many jobs the run asks for,
    // and both workers took calls.
    assert_eq!(most_at_once(log.path()), 2);
    assert!(
        took >= Duration::from_secs(4),
        "two one-call workers cannot do it in {took:?}"
    );
}

/// The channel appends each commit's events after its checkpoint and writes the whole only
/// every 64 commits (it wrote it at every commit: O(tasks) a commit). A pass of well over 64
/// commits, read while it runs and at its end, gives the local run's evidence, and leaves one
/// checkpoint at rest.
#[test]
fn a_long_pass_kept_as_checkpoint_and_appended_commits_reads_back_whole() {
    let Some(_serial) = server() else { return };
    let _cluster = Cluster::start(1, 2);
    let dir = tempfile::tempdir().unwrap();
    let tasks = (0..150)
        .map(|i| task(&format!("t{i:03}"), &format!("echo {i} > t{i:03}.txt"), &[]))
        .collect();
    let plan = plan_file(dir.path(), tasks);
    let chan = channel("tail");
    let plan_arg = plan.to_string_lossy().into_owned();
    // `-j 2` refills one call at a time: a commit a call.
    let child = Command::new(BIN)
        .args([
            "run",
            "--no-cache",
            "--json",
            "-j",
            "2",
            "--channel",
            &chan,
            &plan_arg,
        ])
        .env("RESTATE_INGRESS_URL", ingress())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start run");
    // Read while commits are appended: the state first (the checkpoint's events and those
    // of the commits after it), then the status, which must count at least all of them (it
    // can only have grown since), so it folded the tail onto the checkpoint.
    let mut tails_seen = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let state = channel_state(&chan);
        let bytes =
            |v: &serde_json::Value| -> Vec<u8> { serde_json::from_value(v.clone()).unwrap() };
        let kept = state.get("evidence").map_or(0, |v| {
            kleene::checkpoint::decode::<kleene::batch::BatchEvidence>(&bytes(v))
                .unwrap()
                .event_count()
        });
        // A tail key names the count of events before its commit. The admin API's scan is
        // no snapshot: under load it can show a new checkpoint beside tail keys the same
        // commit removed, which the checkpoint already holds.
        let appended: u64 = state
            .iter()
            .filter(|(k, _)| {
                k.strip_prefix("evidence-tail/")
                    .and_then(|before| before.parse::<u64>().ok())
                    .is_some_and(|before| before >= kept)
            })
            .map(|(_, v)| {
                serde_json::from_slice::<Vec<serde_json::Value>>(&bytes(v))
                    .unwrap()
                    .len() as u64
            })
            .sum();
        if appended > 0 {
            tails_seen += 1;
        }
        let status = status_of(&cli(&["status", "--json", "--channel", &chan]));
        assert!(
            status.events >= kept + appended,
            "status counts {} events; the state held {kept} checkpointed and {appended} after",
            status.events
        );
        let accepted = status.tasks.iter().filter(|t| t.accepted.is_some()).count();
        if accepted == 150 || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(tails_seen > 0, "no read saw commits after the checkpoint");
    let out = child.wait_with_output().unwrap();
    let remote = status_of(&out);
    let local = status_of(&cli(&["local", "--json", "--channel", &chan, &plan_arg]));
    assert!(remote.is_complete(), "{remote}");
    assert_eq!(remote.evidence_digest, local.evidence_digest);
    assert!(remote.events > 2 * 64, "{} events", remote.events);
    // At rest: the checkpoint alone.
    let state = channel_state(&chan);
    let tail: Vec<&String> = state
        .keys()
        .filter(|k| k.starts_with("evidence-tail/"))
        .collect();
    assert!(tail.is_empty(), "{tail:?}");
    assert_eq!(
        kleene_restate_evidence(&chan).digest(),
        local.evidence_digest.unwrap()
    );
}

/// A pass hands over to a new invocation every `--continue-every` commits (each draining its
/// calls, keeping its evidence, and queueing a resume of the channel for itself); the run
/// follows it to the end and gives the local run's evidence, each task called once.
#[test]
fn a_pass_handed_over_across_invocations_gives_the_local_run_s_evidence() {
    let Some(_serial) = server() else { return };
    let _cluster = Cluster::start(2, 2);
    let dir = tempfile::tempdir().unwrap();
    let mut tasks: Vec<serde_json::Value> = (0..60)
        .map(|i| task(&format!("t{i:02}"), &format!("echo {i} > t{i:02}.txt"), &[]))
        .collect();
    tasks.push(fixable_task("fixed", ""));
    tasks.push(task(
        "joined",
        "cat t00.txt t59.txt fixed.txt > joined.txt",
        &["t00", "t59", "fixed"],
    ));
    let plan = plan_file(dir.path(), tasks);
    let chan = channel("handover");
    let (out, _) = run(&plan, &chan, &["-j", "2", "--continue-every", "5"]);
    let remote = status_of(&out);
    assert!(
        remote.is_complete(),
        "{remote}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan_arg = plan.to_string_lossy().into_owned();
    let local = status_of(&cli(&["local", "--json", "--channel", &chan, &plan_arg]));
    assert_eq!(remote.tasks, local.tasks);
    assert_eq!(remote.evidence_digest, local.evidence_digest);
    // The channel ran in several invocations: the submission and the resumes it queued.
    let query = format!(
        "SELECT count(*) AS n FROM sys_invocation WHERE target_service_name = 'Channel' \
         AND target_service_key = '{chan}' AND target_handler_name = 'resume'"
    );
    let (status, body) = post_json(
        &format!("{}/query", admin()),
        &serde_json::json!({ "query": query }),
    );
    assert_eq!(status, 200, "{body}");
    let rows: serde_json::Value = serde_json::from_str(&body).unwrap();
    let resumes = rows["rows"][0]["n"].as_u64().unwrap_or(0);
    assert!(resumes >= 5, "{resumes} resumes: {body}");
}

/// The cache kept in Restate: a plan submitted to one channel, then edited and submitted to
/// another, calls only the edited task and its dependents; the rest are reused with their
/// trail (the reused calls' closure records kept on the new channel, so `accept` checks
/// them), and an edit that leaves the output byte-identical calls none of its dependents.
#[test]
fn a_second_submission_of_an_edited_plan_calls_only_what_changed() {
    let Some(_serial) = server() else { return };
    let _cluster = Cluster::start(2, 4);
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    // Outside the plan's directory: the plan binds the files beside it.
    let log = elsewhere.path().join("calls.log");
    // Unique to this run of the test, so no earlier run's results are in the cache.
    let salt = channel("salt");
    let logged = |id: &str, run: &str| format!("echo {id} >> {}; {run}", log.display());
    let tasks = |b: &str| {
        vec![
            task("a", &logged("a", &format!("echo {salt} > a.txt")), &[]),
            task("b", &logged("b", b), &["a"]),
            task("c", &logged("c", "cat b.txt > c.txt"), &["b"]),
            task("d", &logged("d", "cat a.txt > d.txt"), &["a"]),
            task("e", &logged("e", "echo e > e.txt"), &[]),
            task("f", &logged("f", "cat c.txt d.txt > f.txt"), &["c", "d"]),
        ]
    };
    let calls = |from: usize| -> Vec<String> {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let mut ids: Vec<String> = text.lines().skip(from).map(str::to_owned).collect();
        ids.sort();
        ids
    };
    let submit_telling = |b: &str, chan: &str| {
        let plan = plan_file(dir.path(), logging_to(&log, tasks(b)));
        let plan_arg = plan.to_string_lossy().into_owned();
        let out = cli(&["run", "--json", "-j", "4", "--channel", chan, &plan_arg]);
        let status = status_of(&out);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(status.is_complete(), "{status}\n{stderr}");
        (status, stderr)
    };
    let submit = |b: &str, chan: &str| submit_telling(b, chan).0;
    let first_chan = channel("cache1");
    let first = submit("cat a.txt > b.txt; echo b >> b.txt", &first_chan);
    assert_eq!(calls(0), ["a", "b", "c", "d", "e", "f"], "{first}");
    // b edited: b, c and f are called; a, d and e are reused.
    let seen = calls(0).len();
    let chan = channel("cache2");
    let second = submit("cat a.txt > b.txt; echo bb >> b.txt", &chan);
    assert_eq!(calls(seen), ["b", "c", "f"], "{second}");
    let called = |s: &ChannelStatus, id: &str| {
        s.tasks
            .iter()
            .find(|t| t.task.as_str() == id)
            .map(|t| t.calls)
    };
    for reused in ["a", "d", "e"] {
        assert_eq!(called(&second, reused), Some(0), "{second}");
    }
    let evidence = kleene_restate_evidence(&chan);
    let mut reused: Vec<String> = evidence.reused().map(|(t, _)| t.to_string()).collect();
    reused.sort();
    assert_eq!(reused, ["a", "d", "e"]);
    // Acceptance checks the reused calls' closure records, kept on the new channel.
    let plan = plan_file(
        dir.path(),
        logging_to(&log, tasks("cat a.txt > b.txt; echo bb >> b.txt")),
    );
    let (out, exported) = accept_exporting(elsewhere.path(), &chan, &plan);
    assert!(
        out.status.success() && exported,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // An edit that leaves b's output byte-identical: b is called, nothing after it.
    let seen = calls(0).len();
    let third = submit("cat a.txt > b.txt;  echo bb >> b.txt", &channel("cache3"));
    assert_eq!(calls(seen), ["b"], "{third}");
    // Poisoned: e's entry (kept by the first run) with a byte of its file changed, through
    // the admin API. It is a miss naming the task and the key, and e is called again.
    let query = "SELECT service_key, value FROM state WHERE service_name = 'ActionCache'";
    let (code, body) = post_json(
        &format!("{}/query", admin()),
        &serde_json::json!({ "query": query }),
    );
    assert_eq!(code, 200, "{body}");
    let rows: serde_json::Value = serde_json::from_str(&body).unwrap();
    let (key, mut entry) = rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|row| {
            let hex = row["value"].as_str()?;
            let bytes: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            let entry: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
            let result: serde_json::Value = serde_json::from_str(entry["result"].as_str()?).ok()?;
            (result["task"] == "e" && result["channel"] == first_chan.as_str())
                .then(|| (row["service_key"].as_str().unwrap().to_owned(), entry))
        })
        .expect("the first run kept e's result");
    entry["files"][0][1] = serde_json::json!("Zgo="); // "f\n" where "e\n" was
    let mut state = serde_json::Map::new();
    state.insert(
        "entry".into(),
        serde_json::json!(serde_json::to_vec(&entry).unwrap()),
    );
    set_object_state("ActionCache", &key, &state);
    let seen = calls(0).len();
    let (fourth, stderr) =
        submit_telling("cat a.txt > b.txt;  echo bb >> b.txt", &channel("cache4"));
    assert_eq!(calls(seen), ["e"], "{fourth}");
    assert!(
        stderr.contains("cache entry refused")
            && stderr.contains("task e")
            && stderr.contains(&key),
        "{stderr}"
    );
}

/// Runs a plan whose first task sleeps, SIGKILLs the worker running it, and returns the
/// run's output, its channel and the cluster (still serving).
fn kill_mid_call(extra: &[&str]) -> (Output, String, Cluster) {
    let mut cluster = Cluster::start(2, 4);
    let dir = tempfile::tempdir().unwrap();
    let plan = plan_file(
        dir.path(),
        vec![
            task("k", "sleep 2; echo killed-or-not > k.txt", &[]),
            task("after", "cat k.txt > after.txt", &["k"]),
        ],
    );
    let chan = channel("kill");
    let plan_arg = plan.to_string_lossy().into_owned();
    let mut args = vec![
        "run".to_owned(),
        "--no-cache".into(),
        "--json".into(),
        "--channel".into(),
        chan.clone(),
        plan_arg,
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let child = Command::new(BIN)
        .args(&args)
        .env("RESTATE_INGRESS_URL", ingress())
        .env("RESTATE_ADMIN_URL", admin())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start run");
    let victim = cluster.running("k-1");
    // The shared status handler answers while the exclusive pass runs.
    let during = status_of(&cli(&["status", "--json", "--channel", &chan]));
    let k = during.tasks.iter().find(|t| t.task.as_str() == "k");
    assert_eq!(
        k.map(|t| &t.status),
        Some(&kleene::batch::TaskStatus::InFlight { attempt: 1 }),
        "{during}"
    );
    cluster.kill(victim);
    (
        child.wait_with_output().expect("wait for run"),
        chan,
        cluster,
    )
}

#[test]
fn a_killed_worker_s_call_is_made_again_for_an_allow_agent() {
    let Some(_serial) = server() else { return };
    let (out, _, _cluster) = kill_mid_call(&[]);
    let status = status_of(&out);
    assert!(
        status.is_complete(),
        "{status}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let k = status
        .tasks
        .iter()
        .find(|t| t.task.as_str() == "k")
        .unwrap();
    assert_eq!(k.calls, 2, "the interrupted call counts: {status}");
}

#[test]
fn a_killed_worker_s_call_stops_the_run_for_a_block_agent() {
    let Some(_serial) = server() else { return };
    let (out, chan, _cluster) = kill_mid_call(&["--block", "shell"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = status_of(&out);
    let why = status.stopped.clone().unwrap_or_default();
    assert!(
        why.contains(&format!("channel {chan}"))
            && why.contains(
                "task k (agent shell, call 1) was interrupted in flight and its agent blocks replay"
            ),
        "{why}"
    );
    let k = status
        .tasks
        .iter()
        .find(|t| t.task.as_str() == "k")
        .unwrap();
    assert_eq!(k.status, kleene::batch::TaskStatus::InFlight { attempt: 1 });
    // A resume refuses the same way: the evidence still holds the call in flight.
    let again = cli(&["resume", "--json", "--channel", &chan]);
    let resumed = status_of(&again);
    assert!(resumed.stopped.is_some_and(|w| w.contains("blocks replay")));
}

/// The script that started the server, when it did (its pid file is in the data directory).
fn server_script() -> Option<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/restate-server.sh");
    let data = std::env::var("KLEENE_RESTATE_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            let cache = std::env::var("KLEENE_RESTATE_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|_| {
                    PathBuf::from(std::env::var("HOME").unwrap_or_default())
                        .join(".cache/kleene-restate")
                });
            cache.join("data")
        });
    (script.exists() && data.join("restate-server.pid").exists()).then_some(script)
}

/// The script that started the server, which a test that restarts it needs; `None` (skip,
/// saying why) when it did not start it, a failure on CI.
fn restartable() -> Option<PathBuf> {
    let found = server_script();
    if found.is_none() {
        let message =
            "the server was not started by scripts/restate-server.sh, which this test restarts";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
        eprintln!("skipped: {message}");
    }
    found
}

fn script(script: &Path, command: &str, kill: bool) {
    let out = Command::new("bash")
        .arg(script)
        .arg(command)
        .env("SIGKILL_SERVER", if kill { "1" } else { "0" })
        .output()
        .expect("run the server script");
    assert!(
        out.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_plan_survives_a_server_killed_and_restarted_on_its_data() {
    let Some(_serial) = server() else { return };
    let Some(script_path) = restartable() else {
        return;
    };
    let cluster = Cluster::start(2, 4);
    let dir = tempfile::tempdir().unwrap();
    let plan = plan_file(
        dir.path(),
        vec![
            task("first", "echo first > first.txt", &[]),
            task("slow", "sleep 2; cat first.txt > slow.txt", &["first"]),
            task("last", "cat slow.txt > last.txt", &["slow"]),
        ],
    );
    let chan = channel("restart");
    let plan_arg = plan.to_string_lossy().into_owned();
    let submit = Command::new(BIN)
        .args(["run", "--no-cache", "--json", "--channel", &chan, &plan_arg])
        .env("RESTATE_INGRESS_URL", ingress())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start run");
    let _submit = Proc(submit);
    cluster.running("slow-1");
    script(&script_path, "stop", true);
    script(&script_path, "start", false);
    let status = resume_once_served(&chan, Duration::from_secs(60));
    eprintln!("after the restart:\n{status}");
    assert!(status.is_complete(), "{status}");
    let calls = |id: &str| {
        status
            .tasks
            .iter()
            .find(|t| t.task.as_str() == id)
            .map(|t| t.calls)
    };
    // Accepted before the crash, never called again.
    assert_eq!(calls("first"), Some(1), "{status}");
    assert_eq!(calls("last"), Some(1), "{status}");
}

/// The status `resume` reports once the restarted server serves the channel again (the
/// submit invocation resumes on its own; a resume queues behind it and reports), retried
/// for at most `within`.
fn resume_once_served(chan: &str, within: Duration) -> ChannelStatus {
    let deadline = Instant::now() + within;
    loop {
        let out = cli(&["resume", "--json", "--channel", chan]);
        if out.status.code() != Some(2) {
            return status_of(&out);
        }
        assert!(
            Instant::now() < deadline,
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Whether process `pid` is still running (a zombie has ended; only its parent's wait is
/// missing).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// The host pids of the processes whose command line holds `marker`.
fn running_with(marker: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(marker) && alive(pid) {
            pids.push(pid);
        }
    }
    pids
}

/// The lines of `log` (empty before it exists).
fn log_lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A server crash ends the turn of every call in flight. The abandoned call's command (its
/// process group) is stopped within a bound instead of running on beside the call that
/// replaces it; its number is spent and never run again; a draw for it after its turn is
/// refused; and the fixes the ledger granted are the fixes the evidence counts.
#[test]
fn a_call_abandoned_by_a_server_crash_is_stopped_and_its_number_never_runs_twice() {
    let Some(_serial) = server() else { return };
    let Some(script_path) = restartable() else {
        return;
    };
    let _cluster = Cluster::start(2, 4);
    let dir = tempfile::tempdir().unwrap();
    // Every command logs its stage (named after its task and call) to a file outside it,
    // and outside the plan's directory, whose files the plan binds.
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("calls.log");
    let logged = |what: &str| {
        format!(
            "echo \"{what} $(basename \"$PWD\") $$\" >> {};",
            log.display()
        )
    };
    let mut tasks = vec![serde_json::json!({
        "id": "slow", "kind": {"lane": "config"}, "owner": "shell", "spec": {"intent": "slow"},
        "owned_paths": ["slow.txt"],
        // Its commands' lines name the log, so the test finds them among the host's.
        "run": format!(
            "{} sh -c 'sleep 30' {} & wait; echo wrong > slow.txt",
            logged("run"),
            log.display()
        ),
        "checks": [{"id": "right", "command": "grep -q right slow.txt"}],
        "fix": format!("{} echo right > slow.txt", logged("fix")),
    })];
    for i in 0..4 {
        let id = format!("quick{i}");
        tasks.push(task(
            &id,
            &format!("{} echo {i} > {id}.txt", logged("run")),
            &[],
        ));
    }
    tasks.push(task(
        "after",
        &format!("{} cat slow.txt > after.txt", logged("run")),
        &["slow"],
    ));
    let plan = plan_file(dir.path(), logging_to(&log, tasks));
    let chan = channel("fence");
    let plan_arg = plan.to_string_lossy().into_owned();
    let submit = Command::new(BIN)
        .args(["run", "--no-cache", "--json", "--channel", &chan, &plan_arg])
        .env("RESTATE_INGRESS_URL", ingress())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start run");
    let _submit = Proc(submit);
    // Commands run in a PID namespace: their host pids are found by their command lines.
    let marker = log.to_string_lossy().into_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !log_lines(&log)
        .iter()
        .any(|l| l.starts_with("run call-slow-1"))
    {
        assert!(Instant::now() < deadline, "call slow-1 never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let pids = loop {
        let pids = running_with(&marker);
        // The command's shell and the one it started in the background.
        if pids.len() >= 2 {
            break pids;
        }
        assert!(
            Instant::now() < deadline,
            "found {pids:?} running call slow-1"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    script(&script_path, "stop", true);
    let ended = Instant::now();
    while pids.iter().any(|&p| alive(p)) && ended.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let stopped_after = ended.elapsed();
    // Restarted before anything is asserted, so a failure leaves the server to later tests.
    script(&script_path, "start", false);
    assert!(
        pids.iter().all(|&p| !alive(p)),
        "the abandoned call's commands {pids:?} still ran {stopped_after:?} after its turn ended"
    );
    eprintln!("the abandoned call's commands stopped {stopped_after:?} after the crash");
    let status = resume_once_served(&chan, Duration::from_secs(90));
    assert!(status.is_complete(), "{status}");
    // One execution per call number: no (command, task, call) logged twice.
    let lines = log_lines(&log);
    let mut seen = BTreeSet::new();
    for line in &lines {
        let call = line.rsplit_once(' ').map_or(line.as_str(), |(c, _)| c);
        assert!(
            seen.insert(call.to_owned()),
            "{call} ran twice:\n{}",
            lines.join("\n")
        );
    }
    // The interrupted call counts; the call that replaced it ran the fix.
    let slow = status
        .tasks
        .iter()
        .find(|t| t.task.as_str() == "slow")
        .unwrap();
    assert_eq!(slow.calls, 2, "{status}");
    // Every grant is in the evidence, and nothing more.
    let ledger = object_state("FixLedger", &chan);
    let granted: Vec<serde_json::Value> = ledger.get("drawn").map_or_else(Vec::new, |v| {
        let bytes: Vec<u8> = serde_json::from_value(v.clone()).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    });
    let evidence = kleene_restate_evidence(&chan);
    assert_eq!(
        u32::try_from(granted.len()).unwrap(),
        evidence.fix_attempts_used(),
        "{granted:?}"
    );
    // A draw for the sealed call, as its abandoned execution would make it late, is refused.
    let (code, answer) = post_json(
        &format!("{}/FixLedger/{chan}/draw", ingress()),
        &serde_json::json!({"task": "slow", "attempt": 1, "fix": "slow_fix_1", "max": 10,
                            "turn": "late"}),
    );
    assert_eq!((code, answer.trim()), (200, "\"Sealed\""));
}

/// Copies the directory `from` into `to`, recursively.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A copy of the bundled demo's directory (plan, task scripts, fix) at `dir/demo`: its plan
/// file.
fn demo_copy(dir: &Path) -> PathBuf {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/demo");
    let to = dir.join("demo");
    copy_dir(&demo, &to);
    to.join("plan.json")
}

/// The evidence and acceptance record of `plan` on `chan` as `kleene run --channel CHAN PLAN`
/// then `kleene accept` make them, through the library as the CLI's commands do: the plan
/// and the files beside it read, the commands run from a copy of those files in the state
/// directory, the threaded driver with group commit and `kleene run`'s default policy, and
/// every audit trail checked against the closure records before the record is sealed.
fn cli_record(plan: &Path, chan: &str) -> (BatchEvidence, AcceptanceRecord) {
    let (shell, _) = ShellPlan::read(plan, &[PathBuf::from(".kleene")]).unwrap();
    let state = tempfile::tempdir().unwrap();
    let copy = state.path().join("plan-files");
    shell.files().unwrap().write_copy(&copy).unwrap();
    let kept = Arc::new(KeptRecords::default());
    let runtime = ShellRuntime::new(shell.clone(), state.path())
        .unwrap()
        .with_plan_dir(&copy)
        .with_default_timeout(Duration::from_secs(600))
        .with_observer(kept.clone());
    let channel = ChannelId::new(chan).unwrap();
    let session = shell::session(&channel).unwrap();
    let policy = RecoveryPolicy::builder()
        .max_recovery_depth(3)
        .max_total_fix_attempts(10)
        .recover_on(RecoverOn::Blockers)
        .build()
        .unwrap();
    let mut journal = FileJournal::open(state.path().join("journal")).unwrap();
    let evidence = shell
        .batch(channel.clone())
        .with_group_commit(true)
        .run_threaded(
            NonZeroUsize::new(4).unwrap(),
            |slot| {
                ClosureWorker::new(
                    runtime.agent(slot.to_string()),
                    session.clone(),
                    policy.clone(),
                )
            },
            &(),
            &mut journal,
        )
        .unwrap()
        .evidence;
    let snapshot = Snapshot::from_evidence(&evidence).unwrap();
    let binding = BuildBinding::new(channel, shell.plan().digest(), evidence.evidence_version());
    let records: Vec<_> = kept
        .records()
        .iter()
        .map(|s| (s.task.clone(), s.call, s.read().unwrap()))
        .collect();
    let record = accept_audited(
        shell.plan(),
        &evidence,
        &snapshot,
        &binding,
        records.iter().map(|(t, c, r)| (t, *c, r)),
    )
    .unwrap();
    (evidence, record)
}

/// The record digest `kleene-restate accept` printed.
fn printed_digest(stderr: &str) -> Option<kleene::id::Digest> {
    stderr
        .split_whitespace()
        .skip_while(|w| *w != "digest")
        .nth(1)
        .and_then(|d| d.parse().ok())
}

/// The `kleene` CLI binary, when cargo built it beside this one (`cargo build -p kleene`, or
/// the root crate's tests): `kleene run` and `kleene accept` themselves are then checked too.
fn kleene_cli() -> Option<PathBuf> {
    let cli = Path::new(BIN).with_file_name("kleene");
    cli.is_file().then_some(cli)
}

/// The bundled demo, with its checks and the fix that repairs its VAT bug, submitted from a
/// directory that is then moved away, and run by workers that never saw it: each in its own
/// empty working directory with its own `--dir`, started after the move, as another user
/// where the tests run as root. The plan's scripts travel by digest; the run is accepted
/// from the channel alone, and its evidence and record digests are those of `kleene run`
/// plus `kleene accept` on a copy of the same directory.
#[test]
fn the_demo_runs_on_workers_that_never_saw_its_directory_and_gives_kleene_run_s_record() {
    let Some(_serial) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let submitted = demo_copy(&dir.path().join("submitter"));
    let reference = demo_copy(&dir.path().join("reference"));
    let chan = channel("elsewhere");
    // What `kleene-restate run` sends: the plan's text, its files' manifest and bytes.
    let (plan, _) = ShellPlan::read(&submitted, &[PathBuf::from(".kleene")]).unwrap();
    // Every call made (as `kleene run` on a fresh state makes them): the server's cache may
    // hold this plan's results from an earlier run of the test.
    let submission = Submission {
        no_cache: true,
        ..Submission::of(&plan, 8, Vec::new())
    };
    assert!(
        plan.files()
            .is_some_and(|f| f.iter().any(|(p, _)| p.as_str() == "fix_vat.sh")),
        "the fix script is one of the plan's files"
    );
    let moved = dir.path().join("moved-away");
    std::fs::rename(dir.path().join("submitter"), &moved).unwrap();
    assert!(!submitted.exists());
    // As root, the workers run as `nobody`, who cannot even enter this 0700 temporary
    // directory: they could not reach the moved copy either.
    let uid = (is_root() && Path::new("/usr/bin/setpriv").exists()).then_some(65534);
    if uid.is_none() {
        eprintln!("note: workers run as this user (not root, or no setpriv)");
    }
    let cluster = Cluster::start_as(2, 4, uid, None);
    let client = kleene_restate::client::Restate::new(&ingress(), &admin());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let report = runtime
        .block_on(client.submit(&chan, &submission))
        .unwrap_or_else(|e| panic!("submit: {e}"));
    let remote = report.status;
    assert!(remote.is_complete(), "{remote}");
    // The unit-tests check caught the VAT bug; one fix repaired it, and the status says so.
    let service = remote
        .tasks
        .iter()
        .find(|t| t.task.as_str() == "billing_service")
        .unwrap();
    assert_eq!((service.calls, service.fixes), (1, 1), "{remote}");
    let shown = String::from_utf8_lossy(&cli(&["status", "--channel", &chan]).stdout).into_owned();
    // A reader gone before the status is written (`| head`) ends the output, not in a panic.
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let closed = Command::new(BIN)
        .args(["status", "--channel", &chan])
        .env("RESTATE_INGRESS_URL", ingress())
        .env("RESTATE_ADMIN_URL", admin())
        .stdout(writer)
        .output()
        .expect("run kleene-restate");
    assert!(
        !String::from_utf8_lossy(&closed.stderr).contains("panicked"),
        "{}",
        String::from_utf8_lossy(&closed.stderr)
    );
    assert_eq!(closed.status.code(), Some(0));
    assert!(
        shown
            .lines()
            .any(|l| l.contains("billing_service") && l.ends_with("1 call, 1 fix")),
        "{shown}"
    );
    // The workers made their own read-only copies of the plan's files.
    let digest = plan.plan().digest().to_string();
    let copies = cluster
        .dirs
        .iter()
        .filter(|d| d.join("plans").join(&digest).join("fix_vat.sh").is_file())
        .count();
    assert!(copies >= 1, "no worker copied the plan's files");
    if let Some(uid) = uid {
        // Made by the workers themselves, as that other user.
        let owner = |d: &PathBuf| {
            std::fs::metadata(d.join("plans").join(&digest))
                .ok()
                .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        };
        assert!(cluster.dirs.iter().filter_map(owner).all(|o| o == uid));
    }

    // Accepted from the channel alone: the submitter's directory is still gone.
    let archives = tempfile::tempdir().unwrap();
    let archive = archives.path().join("demo.tar");
    let accepted = cli(&[
        "accept",
        "--channel",
        &chan,
        "--export",
        &archive.to_string_lossy(),
    ]);
    let stderr = String::from_utf8_lossy(&accepted.stderr).into_owned();
    assert!(accepted.status.success(), "{stderr}");
    let remote_digest = printed_digest(&stderr).expect("a record digest");
    kleene::acceptance::verify_archive(&std::fs::read(&archive).unwrap(), remote_digest).unwrap();

    let (evidence, record) = cli_record(&reference, &chan);
    eprintln!(
        "demo on Restate: evidence {:?}, record {remote_digest}; kleene run + accept: evidence \
         {}, record {}",
        remote.evidence_digest,
        evidence.summary().evidence_digest,
        record.digest()
    );
    assert_eq!(
        remote.evidence_digest,
        Some(evidence.summary().evidence_digest)
    );
    assert_eq!(record.digest(), remote_digest);
    let remote_record: serde_json::Value = serde_json::from_slice(&accepted.stdout).unwrap();
    let local_record: serde_json::Value = serde_json::from_str(&record.to_json()).unwrap();
    assert_eq!(remote_record, local_record);

    // And the CLI itself, when it is built: `kleene run` then `kleene accept`.
    match kleene_cli() {
        Some(kleene) => {
            let state = tempfile::tempdir().unwrap();
            let st = state.path().join("st");
            let ran = Command::new(&kleene)
                .arg("run")
                .arg("--state")
                .arg(&st)
                .args(["--channel", &chan])
                .arg(&reference)
                .output()
                .unwrap();
            assert!(
                ran.status.success(),
                "{}",
                String::from_utf8_lossy(&ran.stderr)
            );
            let accepted = Command::new(&kleene)
                .args(["--json", "accept", "--state"])
                .arg(&st)
                .output()
                .unwrap();
            let out = String::from_utf8_lossy(&accepted.stdout).into_owned();
            assert!(accepted.status.success(), "{out}");
            let event: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
            assert_eq!(
                event["record_digest"].as_str(),
                Some(remote_digest.to_string().as_str()),
                "{out}"
            );
        }
        None => eprintln!(
            "note: the kleene binary is not built beside this one; compared through the library only"
        ),
    }
}

fn is_root() -> bool {
    // The owner of /proc/self is the effective user.
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

fn kleene_restate_evidence(chan: &str) -> kleene::batch::BatchEvidence {
    let client = kleene_restate::client::Restate::new(&ingress(), &admin());
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(client.evidence(chan))
        .unwrap()
        .expect("the channel has evidence")
}

/// A task whose `run` writes a wrong value that its check refuses, and whose `fix` repairs it
/// after running `before_fix`.
fn fixable_task(id: &str, before_fix: &str) -> serde_json::Value {
    serde_json::json!({
        "id": id, "kind": {"lane": "config"}, "owner": "shell", "spec": {"intent": id},
        "owned_paths": [format!("{id}.txt")], "run": format!("echo wrong > {id}.txt"),
        "checks": [{"id": "right", "command": format!("grep -q right {id}.txt")}],
        "fix": format!("{before_fix} echo right > {id}.txt"),
    })
}

#[test]
fn a_worker_killed_during_a_fix_leaves_its_draw_counted() {
    let Some(_serial) = server() else { return };
    let mut cluster = Cluster::start(2, 4);
    let dir = tempfile::tempdir().unwrap();
    // Outside the plan's directory, whose files the plan binds; the task's sandbox gives it.
    let marks = tempfile::tempdir().unwrap();
    let mark = marks.path().join("fix-started");
    let before = format!(
        "if [ ! -e {m} ]; then touch {m}; sleep 30; fi;",
        m = mark.display()
    );
    let mut fixable = fixable_task("f", &before);
    fixable["sandbox"] = serde_json::json!({ "write": [marks.path()] });
    let plan = plan_file(dir.path(), vec![fixable]);
    let chan = channel("killfix");
    let plan_arg = plan.to_string_lossy().into_owned();
    let child = Command::new(BIN)
        .args(["run", "--no-cache", "--json", "--channel", &chan, &plan_arg])
        .env("RESTATE_INGRESS_URL", ingress())
        .env("RESTATE_ADMIN_URL", admin())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start run");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !mark.exists() {
        assert!(Instant::now() < deadline, "the fix never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let victim = cluster.running("f-1");
    cluster.kill(victim);
    let out = child.wait_with_output().expect("wait for run");
    let status = status_of(&out);
    assert!(
        status.is_complete(),
        "{status}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(status.tasks[0].calls, 2, "{status}");
    // The interrupted call's draw, read from the ledger, and the second call's own.
    assert_eq!(kleene_restate_evidence(&chan).fix_attempts_used(), 2);
}

#[test]
fn calls_in_flight_together_never_draw_more_than_the_run_s_fix_budget() {
    let Some(_serial) = server() else { return };
    let _cluster = Cluster::start(2, 4);
    let dir = tempfile::tempdir().unwrap();
    // Twelve tasks that each need a fix; the run's budget is kleene run's default, ten.
    let tasks = (0..12)
        .map(|i| fixable_task(&format!("t{i:02}"), "sleep 0.2;"))
        .collect();
    let plan = plan_file(dir.path(), tasks);
    let chan = channel("budget");
    let (out, _) = run(&plan, &chan, &["-j", "8"]);
    // A draw refused for want of budget comes after the call's `run` command ran: the call
    // is spent as an interrupted one (a withdrawn call was made again under its number, a
    // second execution), so the pass goes on without a resume. The call after it halts on
    // the spent budget instead of drawing, and the corrective call after that runs the fix
    // at depth 0, as in a local run.
    let status = status_of(&out);
    assert!(
        status.is_complete(),
        "{status}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(kleene_restate_evidence(&chan).fix_attempts_used(), 10);
    let plan_arg = plan.to_string_lossy().into_owned();
    let local = status_of(&cli(&["local", "--json", "--channel", &chan, &plan_arg]));
    // Every task ends with the local run's output. Which two tasks find the budget spent is
    // decided by which draws reach the ledger first, so only the split's shape is compared:
    // ten tasks fixed in their first call, two that needed a corrective call (and, here, an
    // interrupted call before it).
    let outputs = |s: &ChannelStatus| -> Vec<_> {
        s.tasks
            .iter()
            .map(|t| (t.task.clone(), t.accepted))
            .collect()
    };
    assert_eq!(outputs(&status), outputs(&local));
    let calls = |s: &ChannelStatus| {
        let mut calls: Vec<u32> = s.tasks.iter().map(|t| t.calls).collect();
        calls.sort_unstable();
        calls
    };
    assert_eq!(calls(&local), [vec![1; 10], vec![2; 2]].concat(), "{local}");
    assert_eq!(
        calls(&status),
        [vec![1; 10], vec![3; 2]].concat(),
        "{status}"
    );
}

/// A call that wrote more than a Restate message carries was sent anyway: the server refused
/// the result and retried the call until the task failed, and `status` said only "failed".
/// The worker refuses it naming the file, and the status says why.
#[test]
fn a_call_too_large_for_a_message_is_refused_and_the_status_says_why() {
    let Some(_serial) = server() else { return };
    let _cluster = Cluster::start(1, 1);
    let dir = tempfile::tempdir().unwrap();
    let limit = kleene_restate::worker::MAX_CALL_OUTPUT_BYTES;
    let plan = plan_file(
        dir.path(),
        vec![task(
            "a",
            &format!(
                "echo a > a.txt && head -c {} /dev/zero > big.bin",
                limit + 1
            ),
            &[],
        )],
    );
    let chan = channel("too-large");
    let (out, _) = run(&plan, &chan, &[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = status_of(&out);
    let why = status.tasks[0].why.as_deref().unwrap_or_default();
    assert!(
        why.contains("refused") && why.contains(&format!("big.bin ({} bytes)", limit + 1)),
        "{status:?}"
    );
    // Since kleene ends a task whose call is refused for the same reason as the one before
    // as recovery_stalled, the line starts with that cause and then quotes the refusal.
    let shown = String::from_utf8_lossy(&cli(&["status", "--channel", &chan]).stdout).into_owned();
    assert!(
        shown.contains("2 calls  ") && shown.contains("refused") && shown.contains("big.bin"),
        "{shown}"
    );
}

/// A call that writes 100 MiB, 25 times what a message may carry, goes through the workers'
/// shared content store: accepted, its dependent's stage holds the very bytes, the channel's
/// state holds references only, and `accept --export` reads the evidence from the store (and
/// without the store says which flag it needs).
#[test]
fn a_call_writing_100_mib_goes_through_the_content_store_and_is_accepted() {
    let Some(_serial) = server() else { return };
    let store = tempfile::tempdir().unwrap();
    let _cluster = Cluster::start_as(2, 2, None, Some(store.path()));
    let dir = tempfile::tempdir().unwrap();
    let plan_dir = dir.path().join("plan");
    std::fs::create_dir_all(&plan_dir).unwrap();
    let bytes = 100 * 1024 * 1024;
    let make = format!("yes kleene | head -c {bytes}");
    let mut big = task(
        "big",
        &format!("{make} > big.bin && echo made > big.txt"),
        &[],
    );
    big["owned_paths"] = serde_json::json!(["big.txt", "big.bin"]);
    let check = task(
        "check",
        &format!("{make} | cmp - big.bin && wc -c < big.bin > check.txt"),
        &["big"],
    );
    let plan = plan_file(&plan_dir, vec![big, check]);
    let chan = channel("hundred-mib");
    let store_flag = format!("--store={}", store.path().display());
    let (out, took) = run(&plan, &chan, &[&store_flag]);
    let status = status_of(&out);
    assert!(
        status.is_complete(),
        "{status}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("100 MiB through Restate in {took:?}");
    // Nothing in the channel's state is anywhere near the output's size.
    let state = channel_state(&chan);
    let largest = state
        .values()
        .map(|v| v.to_string().len())
        .max()
        .unwrap_or(0);
    assert!(
        largest < 2 * 1024 * 1024,
        "a state value of {largest} bytes"
    );
    let export = tempfile::tempdir().unwrap();
    let archive = export.path().join("out.tar");
    let accept = |extra: &[&str]| {
        let mut args = vec!["accept", "--channel", &chan];
        args.extend_from_slice(extra);
        let archive = archive.to_string_lossy().into_owned();
        let plan = plan.to_string_lossy().into_owned();
        args.extend_from_slice(&["--export", &archive, &plan]);
        cli(&args)
    };
    let refused = accept(&[]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("--store"), "{said}");
    assert!(!archive.exists());
    let accepted = accept(&[&store_flag]);
    assert!(
        accepted.status.success(),
        "{}",
        String::from_utf8_lossy(&accepted.stderr)
    );
    let exported = std::fs::metadata(&archive).unwrap().len();
    assert!(exported > bytes, "the archive holds {exported} bytes");
}

/// A plan whose files are more than a plan may carry is refused before anything is sent,
/// naming the largest files and the plan key that narrows them (no server needed).
#[test]
fn a_plan_whose_files_are_too_large_is_refused_before_submission() {
    let dir = tempfile::tempdir().unwrap();
    let plan = plan_file(dir.path(), vec![task("a", "echo a > a.txt", &[])]);
    std::fs::write(dir.path().join("small.sh"), "true\n").unwrap();
    let big = std::fs::File::create(dir.path().join("big.bin")).unwrap();
    big.set_len(kleene::shell::MAX_PLAN_FILE_BYTES + 1).unwrap();
    // Nothing listens there: the refusal comes before any request.
    let out = Command::new(BIN)
        .args([
            "run",
            "--restate",
            "http://127.0.0.1:9",
            "--admin",
            "http://127.0.0.1:9",
        ])
        .arg(&plan)
        .output()
        .expect("run kleene-restate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the largest: big.bin ({} bytes)",
            kleene::shell::MAX_PLAN_FILE_BYTES + 1
        )) && stderr.contains("\"inputs\"")
            && !stderr.contains("reach"),
        "{stderr}"
    );
}

/// POSTs `body` as JSON to `url` (HTTP/1.0, so the answer ends with the connection): the
/// status and the body.
fn post_json(url: &str, body: &serde_json::Value) -> (u16, String) {
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (host, path) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
    let body = body.to_string();
    let mut s = TcpStream::connect(host).expect("reach the server");
    write!(
        s,
        "POST /{path} HTTP/1.0\r\nhost: {host}\r\ncontent-type: application/json\r\n\
         accept: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, body.to_owned())
}

/// Every state entry of `Channel/{chan}`, read through the admin API's SQL (values in hex).
fn channel_state(chan: &str) -> serde_json::Map<String, serde_json::Value> {
    object_state("Channel", chan)
}

/// Every state entry of the virtual object `service/{key}`, read through the admin API's SQL
/// (each value as its bytes).
fn object_state(service: &str, key: &str) -> serde_json::Map<String, serde_json::Value> {
    let query = format!(
        "SELECT key, value FROM state WHERE service_name = '{service}' AND service_key = '{key}'"
    );
    let (status, body) = post_json(
        &format!("{}/query", admin()),
        &serde_json::json!({ "query": query }),
    );
    assert_eq!(status, 200, "{body}");
    let rows: serde_json::Value = serde_json::from_str(&body).unwrap();
    let mut state = serde_json::Map::new();
    for row in rows["rows"].as_array().expect("rows") {
        let hex = row["value"].as_str().expect("a hex value");
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        state.insert(
            row["key"].as_str().expect("a key").to_owned(),
            serde_json::json!(bytes),
        );
    }
    state
}

/// Replaces the whole state of `Channel/{chan}` through the admin API, as an operator (or
/// an attacker with the admin port) could.
fn set_channel_state(chan: &str, state: &serde_json::Map<String, serde_json::Value>) {
    set_object_state("Channel", chan, state);
}

/// Replaces the whole state of the virtual object `service/{key}` through the admin API.
fn set_object_state(service: &str, key: &str, state: &serde_json::Map<String, serde_json::Value>) {
    let (status, body) = post_json(
        &format!("{}/services/{service}/state", admin()),
        &serde_json::json!({ "object_key": key, "new_state": state }),
    );
    assert!((200..300).contains(&status), "{status} {body}");
}

/// The closure record kept under `key`, as stored (a `StoredClosure`'s JSON).
fn kept(state: &serde_json::Map<String, serde_json::Value>, key: &str) -> serde_json::Value {
    let bytes: Vec<u8> = serde_json::from_value(state[key].clone()).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// `accept --export` on `chan`: the output, and whether the archive was written.
fn accept_exporting(dir: &Path, chan: &str, plan: &Path) -> (Output, bool) {
    let archive = dir.join(format!("{chan}.tar"));
    assert!(
        !plan.starts_with(dir),
        "an archive beside the plan would change its files"
    );
    let _ = std::fs::remove_file(&archive);
    let out = cli(&[
        "accept",
        "--channel",
        chan,
        "--export",
        &archive.to_string_lossy(),
        &plan.to_string_lossy(),
    ]);
    (out, archive.exists())
}

/// The channel keeps the closure record of every call it settled; `accept` checks every audit
/// trail the evidence binds against them. A record changed or removed in the server's state
/// (through the admin API) refuses acceptance naming the task and call, and nothing is
/// printed or exported as accepted; the original records restored, it accepts again with the
/// same record digest.
#[test]
fn accept_checks_the_closure_records_the_channel_keeps() {
    let Some(_serial) = server() else { return };
    let _cluster = Cluster::start(1, 2);
    let dir = tempfile::tempdir().unwrap();
    let plan = plan_file(
        dir.path(),
        vec![
            fixable_task("f", ""),
            task("g", "cat f.txt > g.txt", &["f"]),
        ],
    );
    let chan = channel("closures");
    let archives = tempfile::tempdir().unwrap();
    let (out, _) = run(&plan, &chan, &[]);
    let status = status_of(&out);
    assert!(status.is_complete(), "{status}");

    // Every settled call's record is there, reads back, and is the one the evidence binds.
    let evidence = kleene_restate_evidence(&chan);
    assert_eq!(evidence.fix_attempts_used(), 1);
    let client = kleene_restate::client::Restate::new(&ingress(), &admin());
    let stored = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(client.closures(&chan))
        .unwrap();
    let records: Vec<_> = stored
        .iter()
        .map(|s| (s.task.clone(), s.call, s.read().unwrap()))
        .collect();
    let checked = evidence
        .verify_closures(records.iter().map(|(t, c, r)| (t, *c, r)))
        .unwrap();
    assert_eq!((checked, stored.len()), (2, 2));
    let fixed = records
        .iter()
        .find(|(t, _, _)| t.as_str() == "f")
        .map(|(_, _, r)| r)
        .unwrap();
    assert_eq!(fixed.fix_attempts(), 1, "the record shows the fix that ran");
    let shown = cli(&["status", "--closures", "--channel", &chan]);
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(
        shown.contains("closure records kept: 2")
            && shown.contains(
                "f call 1: resolved by f_fix_1 (depth 1), 1 fix; f failed right; f_fix_1 clean"
            ),
        "{shown}"
    );

    let (accepted, exported) = accept_exporting(archives.path(), &chan, &plan);
    let stderr = String::from_utf8_lossy(&accepted.stderr).into_owned();
    assert!(accepted.status.success() && exported, "{stderr}");
    let digest_of = |stderr: &str| {
        stderr
            .split_whitespace()
            .skip_while(|w| *w != "digest")
            .nth(1)
            .map(str::to_owned)
    };
    let digest = digest_of(&stderr).expect("a record digest");

    // g's record kept as f's: whole and readable, but not the one the evidence binds.
    let original = channel_state(&chan);
    let mut swapped = original.clone();
    let mut as_f = kept(&original, "closure/g/1");
    as_f["task"] = "f".into();
    as_f["call"] = 1.into();
    swapped.insert(
        "closure/f/1".into(),
        serde_json::json!(serde_json::to_vec(&as_f).unwrap()),
    );
    set_channel_state(&chan, &swapped);
    let (refused, exported) = accept_exporting(archives.path(), &chan, &plan);
    let stderr = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("task f call 1: the closure record channel")
            && stderr.contains("was changed"),
        "{stderr}"
    );
    assert!(refused.stdout.is_empty() && !exported, "accepted anyway");

    // The record removed.
    let mut removed = original.clone();
    removed.remove("closure/f/1");
    set_channel_state(&chan, &removed);
    let (refused, exported) = accept_exporting(archives.path(), &chan, &plan);
    let stderr = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("task f call 1:") && stderr.contains("keeps no closure record"),
        "{stderr}"
    );
    assert!(refused.stdout.is_empty() && !exported, "accepted anyway");

    // Restored: accepted again, with the same record.
    set_channel_state(&chan, &original);
    let (accepted, exported) = accept_exporting(archives.path(), &chan, &plan);
    let stderr = String::from_utf8_lossy(&accepted.stderr).into_owned();
    assert!(accepted.status.success() && exported, "{stderr}");
    assert_eq!(digest_of(&stderr), Some(digest));
}
