//! End-to-end on a 3-node Restate cluster on loopback, started by
//! `scripts/restate-server.sh cluster 3` (replicated log and metadata, replication 2): nodes
//! are killed under a running pass and it ends accepted with nothing run twice. Skipped with a
//! message where the server cannot be installed, unless `CI=true`, where that fails.

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

/// Kills the process (SIGKILL) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The cluster the script started; every node is stopped when dropped.
struct Nodes {
    data: PathBuf,
    ingress: String,
    admin: String,
    _temp: tempfile::TempDir,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/restate-server.sh")
}

impl Nodes {
    /// Three nodes, or `None` (skip) where the script cannot start them off CI.
    fn start() -> Option<Self> {
        let temp = tempfile::tempdir().expect("a temporary directory");
        let data = temp.path().join("data");
        let mut nodes = Self {
            data,
            ingress: String::new(),
            admin: String::new(),
            _temp: temp,
        };
        let out = nodes.script(&["cluster", "3"], false);
        if !out.status.success() {
            let message = format!(
                "scripts/restate-server.sh cluster 3 failed: {}",
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
            .env("SIGKILL_SERVER", if kill { "1" } else { "0" })
            .output()
            .expect("run the server script")
    }

    fn kill(&self, node: usize) {
        let out = self.script(&["node-stop", &node.to_string()], true);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn restart(&self, node: usize) {
        let out = self.script(&["node-start", &node.to_string()], false);
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
        let _ = self.script(&["cluster-stop"], true);
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

/// Two workers, told every node's ingress, behind a balancer registered with the cluster.
fn workers(nodes: &Nodes, dir: &Path) -> Vec<Proc> {
    let mut procs = Vec::new();
    let mut backends = Vec::new();
    for i in 0..2 {
        let port = free_port();
        let work = dir.join(format!("w{i}"));
        std::fs::create_dir_all(&work).unwrap();
        procs.push(Proc(
            Command::new(BIN)
                .current_dir(&work)
                .args([
                    "worker",
                    "--listen",
                    &format!("127.0.0.1:{port}"),
                    "--jobs",
                    "4",
                ])
                .arg("--dir")
                .arg(&work)
                .env("RESTATE_INGRESS_URL", &nodes.ingress)
                .stderr(Stdio::null())
                .spawn()
                .expect("start a worker"),
        ));
        backends.push(port);
    }
    for &p in &backends {
        wait_for_port(p);
    }
    let port = free_port();
    let mut balance = Command::new(BIN);
    balance.args(["balance", "--listen", &format!("127.0.0.1:{port}")]);
    for p in &backends {
        balance.args(["--backend", &format!("http://127.0.0.1:{p}")]);
    }
    procs.push(Proc(balance.stderr(Stdio::null()).spawn().unwrap()));
    wait_for_port(port);
    let out = Command::new(BIN)
        .args(["register", "--admin", &nodes.admin])
        .args(["--endpoint", &format!("http://127.0.0.1:{port}")])
        .env("KLEENE_RESTATE_RETRY_SECS", "60")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    procs
}

/// A plan of 22 tasks (chains and fan-outs, four needing a fix, two slow) whose commands
/// each log their task and call to `log`, outside their stages.
fn plan(dir: &Path, log: &Path) -> PathBuf {
    let logged = |what: &str| format!("echo \"{what} $(basename \"$PWD\")\" >> {};", log.display());
    let mut tasks = Vec::new();
    let mut task = |id: String, run: String, deps: Vec<String>, fix: bool| {
        let mut t = serde_json::json!({
            "id": id, "kind": {"lane": "config"}, "owner": "shell", "spec": {"intent": id},
            "owned_paths": [format!("{id}.txt")], "depends_on": deps,
            "run": format!("{} {run}", logged("run")),
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

/// The node the workers and the submitter talk to is killed mid-call, then the partition's
/// leader; both restart. The pass ends accepted with no manual step, no command ran twice
/// under one call number, the ledger granted exactly the fixes the evidence counts, and
/// every task's accepted output is the local run's.
#[test]
fn a_cluster_losing_the_node_in_use_and_then_the_leader_runs_nothing_twice() {
    let Some(nodes) = Nodes::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let _workers = workers(&nodes, dir.path());
    let log = dir.path().join("calls.log");
    let plan = plan(dir.path(), &log);
    let chan = format!("cluster-{}", std::process::id());
    let run = Command::new(BIN)
        .args(["run", "--no-cache", "--json", "--channel", &chan])
        .arg(&plan)
        // Long enough to outlast two nodes' restarts: the submitter needs no manual step.
        .args(["--retry-secs", "300"])
        .env("RESTATE_INGRESS_URL", &nodes.ingress)
        .env("RESTATE_ADMIN_URL", &nodes.admin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start run");
    // Node 1 is first in every list: the one the workers and the submitter talk to.
    wait_for_line(&log, "run call-slow0-");
    nodes.kill(1);
    eprintln!("node 1 killed mid-call");
    // Progress after the first loss, then the leader goes too.
    let before = lines(&log).len();
    let deadline = Instant::now() + Duration::from_secs(60);
    while lines(&log).len() == before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
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
    let out = Proc(run);
    let mut child = out;
    let deadline = Instant::now() + Duration::from_secs(300);
    let output = loop {
        if let Ok(Some(_)) = child.0.try_wait() {
            let mut stdout = String::new();
            let mut stderr = String::new();
            use std::io::Read;
            if let Some(mut s) = child.0.stdout.take() {
                let _ = s.read_to_string(&mut stdout);
            }
            if let Some(mut s) = child.0.stderr.take() {
                let _ = s.read_to_string(&mut stderr);
            }
            break (child.0.try_wait().ok().flatten(), stdout, stderr);
        }
        assert!(Instant::now() < deadline, "the run did not end in 300 s");
        std::thread::sleep(Duration::from_millis(100));
    };
    let (code, stdout, stderr) = output;
    let status: ChannelStatus =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    assert!(status.is_complete(), "{status}\n{stderr}");
    assert_eq!(code.and_then(|c| c.code()), Some(0), "{stderr}");
    // One execution per call number.
    let all = lines(&log);
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
        .block_on(restate.evidence(&chan))
        .unwrap()
        .expect("the channel has evidence");
    // Every grant the ledger made is a fix the evidence counts, and the other way round;
    // every fix that ran was granted.
    let granted = runtime.block_on(restate.fix_grants(&chan)).unwrap();
    let granted = u32::try_from(granted.len()).unwrap();
    assert_eq!(granted, evidence.fix_attempts_used(), "{}", all.join("\n"));
    let fixes_logged = all.iter().filter(|l| l.starts_with("fix ")).count();
    assert!(
        u32::try_from(fixes_logged).unwrap() <= granted,
        "{}",
        all.join("\n")
    );
    // Every task accepted with the local run's output.
    let local = Command::new(BIN)
        .args(["local", "--json", "--channel", &chan])
        .arg(&plan)
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
