//! End-to-end under crashes: on a 3-node Restate cluster on loopback, started by
//! `scripts/restate-server.sh cluster 3` (replicated log and metadata, replication 2), nodes
//! are killed under a running pass; on a single node started by the same script, a worker and
//! then the server are SIGKILLed. Each pass ends accepted with nothing run twice. Skipped with
//! a message where the server cannot be installed, unless `CI=true`, where that fails.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use kleene_restate::client::Restate;
use kleene_restate::status::ChannelStatus;

const BIN: &str = env!("CARGO_BIN_EXE_kleene-restate");

/// Ports of this test's cluster: shifted from the script's defaults, clear of a user's.
const PORT_SHIFT: &str = "300";

/// Ports of this test's single node (ingress, admin, node-to-node), clear of the cluster's
/// and of the default server the other end-to-end tests share.
const SINGLE_PORTS: [&str; 3] = ["27480", "27470", "27422"];

/// The two tests start servers and many processes each: one at a time on a small machine.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Kills the process (SIGKILL) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The server the script started, a cluster or a single node; every node is stopped when
/// dropped.
struct Nodes {
    data: PathBuf,
    ingress: String,
    admin: String,
    single: bool,
    _temp: tempfile::TempDir,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/restate-server.sh")
}

impl Nodes {
    /// Three nodes (or one, if `single`), or `None` (skip) where the script cannot start
    /// them off CI.
    fn start(single: bool) -> Option<Self> {
        let temp = tempfile::tempdir().expect("a temporary directory");
        let data = temp.path().join("data");
        let mut nodes = Self {
            data,
            ingress: String::new(),
            admin: String::new(),
            single,
            _temp: temp,
        };
        let args: &[&str] = if single {
            &["start"]
        } else {
            &["cluster", "3"]
        };
        let out = nodes.script(args, false);
        if !out.status.success() {
            let message = format!(
                "scripts/restate-server.sh {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
            eprintln!("skipped: {message}");
            return None;
        }
        let env = String::from_utf8_lossy(&out.stdout).into_owned();
        let value = |key: &str| {
            env.lines()
                .find_map(|l| l.strip_prefix(&format!("{key}=")))
                .map(str::to_owned)
                .unwrap_or_default()
        };
        nodes.ingress = value("RESTATE_INGRESS_URL");
        nodes.admin = value("RESTATE_ADMIN_URL");
        Some(nodes)
    }

    fn script(&self, args: &[&str], kill: bool) -> Output {
        Command::new("bash")
            .arg(script())
            .args(args)
            .env("KLEENE_RESTATE_DATA", &self.data)
            .env("KLEENE_RESTATE_CLUSTER_PORTS", PORT_SHIFT)
            .env("KLEENE_RESTATE_INGRESS", SINGLE_PORTS[0])
            .env("KLEENE_RESTATE_ADMIN", SINGLE_PORTS[1])
            .env("KLEENE_RESTATE_NODE", SINGLE_PORTS[2])
            .env("SIGKILL_SERVER", if kill { "1" } else { "0" })
            .output()
            .expect("run the server script")
    }

    /// SIGKILLs node `node` (the single node: any `node`).
    fn kill(&self, node: usize) {
        let node = node.to_string();
        let args: &[&str] = if self.single {
            &["stop"]
        } else {
            &["node-stop", &node]
        };
        let out = self.script(args, true);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn restart(&self, node: usize) {
        let node = node.to_string();
        let args: &[&str] = if self.single {
            &["start"]
        } else {
            &["node-start", &node]
        };
        let out = self.script(args, false);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The node that leads the partition now: the one whose log names the highest leader
    /// epoch, among those in `alive`.
    fn leader(&self, alive: &[usize]) -> Option<usize> {
        let mut best: Option<(u64, usize)> = None;
        for &node in alive {
            let log = std::fs::read_to_string(
                self.data
                    .with_file_name("data-cluster")
                    .join(format!("n{node}/restate-server.log")),
            )
            .unwrap_or_default();
            for line in log.lines() {
                let Some(rest) = line.split("became Leader of epoch e").nth(1) else {
                    continue;
                };
                let epoch: String = rest.chars().take_while(char::is_ascii_digit).collect();
                if let Ok(epoch) = epoch.parse::<u64>()
                    && best.is_none_or(|(e, _)| epoch > e)
                {
                    best = Some((epoch, node));
                }
            }
        }
        best.map(|(_, node)| node)
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        let stop = if self.single { "stop" } else { "cluster-stop" };
        let _ = self.script(&[stop], true);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on port {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Two workers, told every node's ingress, behind a balancer registered with the server.
struct Workers {
    ingress: String,
    dir: PathBuf,
    ports: Vec<u16>,
    procs: Vec<Option<Proc>>,
    _balance: Proc,
}

impl Workers {
    fn start(nodes: &Nodes, dir: &Path) -> Self {
        let ports: Vec<u16> = (0..2).map(|_| free_port()).collect();
        let balance = free_port();
        let mut command = Command::new(BIN);
        command.args(["balance", "--listen", &format!("127.0.0.1:{balance}")]);
        for p in &ports {
            command.args(["--backend", &format!("http://127.0.0.1:{p}")]);
        }
        let mut workers = Self {
            ingress: nodes.ingress.clone(),
            dir: dir.to_owned(),
            ports,
            procs: Vec::new(),
            _balance: Proc(command.stderr(Stdio::null()).spawn().unwrap()),
        };
        for i in 0..workers.ports.len() {
            let worker = workers.spawn(i);
            workers.procs.push(Some(worker));
        }
        wait_for_port(balance);
        let out = Command::new(BIN)
            .args(["register", "--admin", &nodes.admin])
            .args(["--endpoint", &format!("http://127.0.0.1:{balance}")])
            .env("KLEENE_RESTATE_RETRY_SECS", "60")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        workers
    }

    /// Worker `i`, listening on its port once this returns.
    fn spawn(&self, i: usize) -> Proc {
        let work = self.dir.join(format!("w{i}"));
        std::fs::create_dir_all(&work).unwrap();
        let worker = Proc(
            Command::new(BIN)
                .current_dir(&work)
                .args([
                    "worker",
                    "--listen",
                    &format!("127.0.0.1:{}", self.ports[i]),
                    "--jobs",
                    "4",
                ])
                .arg("--dir")
                .arg(&work)
                .env("RESTATE_INGRESS_URL", &self.ingress)
                .stderr(Stdio::null())
                .spawn()
                .expect("start a worker"),
        );
        wait_for_port(self.ports[i]);
        worker
    }

    /// The worker whose process tree runs a command line containing `needle`, if any.
    fn running(&self, needle: &str) -> Option<usize> {
        let pids: Vec<u32> = self
            .procs
            .iter()
            .map(|p| p.as_ref().map_or(0, |p| p.0.id()))
            .collect();
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if !String::from_utf8_lossy(&cmdline).contains(needle) {
                continue;
            }
            // Up the parents to a worker; other programs' commands lead elsewhere.
            let mut at = Some(pid);
            for _ in 0..8 {
                let Some(here) = at else { break };
                if let Some(i) = pids.iter().position(|&p| p == here) {
                    return Some(i);
                }
                at = parent(here);
            }
        }
        None
    }

    /// SIGKILLs worker `i`, then starts it again on its port.
    fn kill_and_restart(&mut self, i: usize) {
        drop(self.procs[i].take());
        std::thread::sleep(Duration::from_millis(500));
        self.procs[i] = Some(self.spawn(i));
    }
}

/// The parent of process `pid`.
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name's closing parenthesis: state, then the parent's pid.
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// A plan of 22 tasks (chains and fan-outs, four needing a fix, two slow) whose commands
/// each log their task and call to `log`, outside their stages.
fn plan(dir: &Path, log: &Path) -> PathBuf {
    // Each task's sandbox gives the log, which must exist to be given.
    std::fs::File::create(log).unwrap();
    let logged = |what: &str| format!("echo \"{what} $(basename \"$PWD\")\" >> {};", log.display());
    let mut tasks = Vec::new();
    let mut task = |id: String, run: String, deps: Vec<String>, fix: bool| {
        let mut t = serde_json::json!({
            "id": id, "kind": {"lane": "config"}, "owner": "shell", "spec": {"intent": id},
            "owned_paths": [format!("{id}.txt")], "depends_on": deps,
            "run": format!("{} {run}", logged("run")),
            "sandbox": {"write": [log]},
        });
        if fix {
            t["run"] = format!("{} {run}; echo wrong > {id}.txt", logged("run")).into();
            t["checks"] =
                serde_json::json!([{"id": "right", "command": format!("grep -q right {id}.txt")}]);
            t["fix"] = format!("{} echo right > {id}.txt", logged("fix")).into();
        }
        tasks.push(t);
    };
    for i in 0..4 {
        task(
            format!("root{i}"),
            format!("echo {i} > root{i}.txt"),
            vec![],
            i == 1,
        );
    }
    for i in 0..12 {
        let parent = format!("root{}", i % 4);
        let run = format!("sleep 0.3; cat {parent}.txt > fan{i}.txt");
        task(format!("fan{i}"), run, vec![parent], i % 5 == 2);
    }
    for i in 0..2 {
        let run = format!("sleep 4; cat fan{i}.txt > slow{i}.txt");
        task(format!("slow{i}"), run, vec![format!("fan{i}")], i == 1);
    }
    for i in 0..4 {
        let deps: Vec<String> = (0..3).map(|k| format!("fan{}", (i * 3 + k) % 12)).collect();
        let run = format!(
            "cat {} > join{i}.txt",
            deps.iter()
                .map(|d| format!("{d}.txt"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        let mut deps = deps;
        deps.push(format!("slow{}", i % 2));
        task(format!("join{i}"), run, deps, false);
    }
    let path = dir.join("plan.json");
    std::fs::write(&path, serde_json::json!({ "tasks": tasks }).to_string()).unwrap();
    path
}

fn lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits until `log` holds a line starting with `prefix`.
fn wait_for_line(log: &Path, prefix: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !lines(log).iter().any(|l| l.starts_with(prefix)) {
        assert!(
            Instant::now() < deadline,
            "no `{prefix}` line in {}",
            lines(log).join("\n")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Submits `plan` to channel `chan` with a retry window long enough to outlast the restarts
/// the tests make: the submitter needs no manual step. `per_invocation` calls go to a worker
/// in one invocation.
fn submit(nodes: &Nodes, plan: &Path, chan: &str, per_invocation: u32) -> Proc {
    Proc(
        Command::new(BIN)
            .args(["run", "--no-cache", "--json", "--channel", chan])
            .arg(format!("--calls-per-invocation={per_invocation}"))
            .arg(plan)
            .args(["--retry-secs", "300"])
            .env("RESTATE_INGRESS_URL", &nodes.ingress)
            .env("RESTATE_ADMIN_URL", &nodes.admin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start run"),
    )
}

/// Waits until progress is logged past the `before` lines already there.
fn wait_for_progress(log: &Path, before: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while lines(log).len() == before {
        assert!(Instant::now() < deadline, "no progress in 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for the submitter to end, then checks what every crash test promises: the pass
/// ended accepted, no command ran twice under one call number, the ledger granted exactly
/// the fixes the evidence counts (and every fix that ran was granted), and every task's
/// accepted output is the local run's.
fn ends_accepted_with_nothing_run_twice(
    mut run: Proc,
    nodes: &Nodes,
    plan: &Path,
    log: &Path,
    chan: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(300);
    let (code, stdout, stderr) = loop {
        if let Ok(Some(code)) = run.0.try_wait() {
            let mut stdout = String::new();
            let mut stderr = String::new();
            use std::io::Read;
            if let Some(mut s) = run.0.stdout.take() {
                let _ = s.read_to_string(&mut stdout);
            }
            if let Some(mut s) = run.0.stderr.take() {
                let _ = s.read_to_string(&mut stderr);
            }
            break (code, stdout, stderr);
        }
        assert!(Instant::now() < deadline, "the run did not end in 300 s");
        std::thread::sleep(Duration::from_millis(100));
    };
    let status: ChannelStatus =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    assert!(status.is_complete(), "{status}\n{stderr}");
    assert_eq!(code.code(), Some(0), "{stderr}");
    // One execution per call number.
    let all = lines(log);
    let mut seen = BTreeSet::new();
    for line in &all {
        assert!(
            seen.insert(line.clone()),
            "{line} ran twice:\n{}",
            all.join("\n")
        );
    }
    let restate = Restate::new(&nodes.ingress, &nodes.admin);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let evidence = runtime
        .block_on(restate.evidence(chan))
        .unwrap()
        .expect("the channel has evidence");
    let granted = runtime.block_on(restate.fix_grants(chan)).unwrap();
    let granted = u32::try_from(granted.len()).unwrap();
    assert_eq!(granted, evidence.fix_attempts_used(), "{}", all.join("\n"));
    let fixes_logged = all.iter().filter(|l| l.starts_with("fix ")).count();
    assert!(
        u32::try_from(fixes_logged).unwrap() <= granted,
        "{}",
        all.join("\n")
    );
    let local = Command::new(BIN)
        .args(["local", "--json", "--channel", chan])
        .arg(plan)
        .output()
        .unwrap();
    let local: ChannelStatus = serde_json::from_slice(&local.stdout).unwrap();
    let accepted = |s: &ChannelStatus| -> BTreeMap<String, Option<kleene::id::Digest>> {
        s.tasks
            .iter()
            .map(|t| (t.task.to_string(), t.accepted))
            .collect()
    };
    assert_eq!(accepted(&status), accepted(&local));
    eprintln!("{status}");
}

/// The node the workers and the submitter talk to is killed mid-call, then the partition's
/// leader; both restart. The pass ends accepted with no manual step and nothing run twice.
#[test]
fn a_cluster_losing_the_node_in_use_and_then_the_leader_runs_nothing_twice() {
    let _one = ONE_AT_A_TIME.lock();
    let Some(nodes) = Nodes::start(false) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let _workers = Workers::start(&nodes, dir.path());
    // Outside the plan's directory, whose files the plan binds.
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("calls.log");
    let plan = plan(dir.path(), &log);
    let chan = format!("cluster-{}", std::process::id());
    let run = submit(&nodes, &plan, &chan, 1);
    // Node 1 is first in every list: the one the workers and the submitter talk to.
    wait_for_line(&log, "run call-slow0-");
    nodes.kill(1);
    eprintln!("node 1 killed mid-call");
    // Progress after the first loss, then the leader goes too.
    wait_for_progress(&log, lines(&log).len());
    // The partition's leader among the nodes left, once one has taken over.
    let deadline = Instant::now() + Duration::from_secs(60);
    let leader = loop {
        if let Some(leader) = nodes.leader(&[2, 3]) {
            break leader;
        }
        assert!(Instant::now() < deadline, "no node took the partition over");
        std::thread::sleep(Duration::from_millis(50));
    };
    nodes.kill(leader);
    eprintln!("node {leader} (the leader) killed");
    std::thread::sleep(Duration::from_secs(2));
    nodes.restart(1);
    nodes.restart(leader);
    eprintln!("both restarted");
    ends_accepted_with_nothing_run_twice(run, &nodes, &plan, &log, &chan);
}

/// On a single node, with two calls to an invocation: the worker running a slow call is
/// SIGKILLed and started again, then the server is SIGKILLed mid-call and started again. The
/// pass ends accepted with no manual step and nothing run twice: the killed worker's calls are
/// recorded as interrupted and made again under new numbers.
#[test]
fn a_single_node_losing_a_worker_and_then_the_server_runs_nothing_twice() {
    let _one = ONE_AT_A_TIME.lock();
    let Some(nodes) = Nodes::start(true) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut workers = Workers::start(&nodes, dir.path());
    // Outside the plan's directory, whose files the plan binds.
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("calls.log");
    let plan = plan(dir.path(), &log);
    let chan = format!("single-{}", std::process::id());
    // Calls in pairs: a kill ends every call of the invocation it lands in.
    let run = submit(&nodes, &plan, &chan, 2);
    wait_for_line(&log, "run call-slow0-");
    let deadline = Instant::now() + Duration::from_secs(10);
    let busy = loop {
        if let Some(i) = workers.running("sleep 4") {
            break i;
        }
        assert!(Instant::now() < deadline, "no worker runs the slow call");
        std::thread::sleep(Duration::from_millis(20));
    };
    workers.kill_and_restart(busy);
    eprintln!("worker {busy} killed mid-call and restarted");
    // The server next, while a slow call runs: the one the killed worker left is made again.
    let deadline = Instant::now() + Duration::from_secs(60);
    while workers.running("sleep 4").is_none() {
        assert!(
            Instant::now() < deadline,
            "no slow call made again:\n{}",
            lines(&log).join("\n")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    nodes.kill(1);
    eprintln!("server killed mid-call");
    std::thread::sleep(Duration::from_secs(1));
    nodes.restart(1);
    eprintln!("server restarted");
    ends_accepted_with_nothing_run_twice(run, &nodes, &plan, &log, &chan);
}
