//! `kleene-restate`: serve kleene's task workers on Restate, submit plans to channels, and
//! read their status.
//!
//! ```text
//! kleene-restate worker --listen 127.0.0.1:9081 --jobs 4
//! kleene-restate balance --listen 127.0.0.1:9080 --backend http://127.0.0.1:9081 --backend http://127.0.0.1:9082
//! kleene-restate register --endpoint http://127.0.0.1:9080
//! kleene-restate run plan.json
//! kleene-restate status --channel run-0123456789ab
//! ```
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use kleene::batch::{ClosureWorker, FileJournal, MemoryJournal};
use kleene::error::Chain;
use kleene::id::{AgentId, ChannelId};
use kleene::shell::{self, ShellPlan, ShellRuntime};
use kleene_restate::accept::{KeptRecords, acceptance};
use kleene_restate::balance::Balancer;
use kleene_restate::client::{ClientError, Restate};
use kleene_restate::service::{RunReport, Submission, TaskWorker, endpoint_of, serve};
use kleene_restate::status::{ChannelStatus, closure_line};
use kleene_restate::store::ContentStore;

#[derive(Parser)]
#[command(
    name = "kleene-restate",
    version,
    about = "Run kleene plans on Restate"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args)]
struct Server {
    /// Restate's ingress URL; a cluster's nodes comma-separated (requests fail over).
    #[arg(
        long = "restate",
        default_value = "http://127.0.0.1:8080",
        env = "RESTATE_INGRESS_URL"
    )]
    ingress: String,
    /// Restate's admin URL; a cluster's nodes comma-separated.
    #[arg(
        long,
        default_value = "http://127.0.0.1:9070",
        env = "RESTATE_ADMIN_URL"
    )]
    admin: String,
    /// How long a request that no node serves is retried on the nodes, in seconds.
    #[arg(long, default_value_t = 10, env = "KLEENE_RESTATE_RETRY_SECS")]
    retry_secs: u64,
    /// The content store the workers were given (`worker --store`): where evidence larger
    /// than a message is read from.
    #[arg(long, env = "KLEENE_RESTATE_STORE")]
    store: Option<PathBuf>,
}

impl Server {
    fn client(&self) -> Result<Restate, Failure> {
        let store = content_store(self.store.as_deref())?;
        Ok(Restate::new(&self.ingress, &self.admin)
            .with_retry_window(std::time::Duration::from_secs(self.retry_secs))
            .with_store(store))
    }
}

/// The content store in `dir`, if one is given.
fn content_store(dir: Option<&Path>) -> Result<Option<ContentStore>, Failure> {
    dir.map(ContentStore::open)
        .transpose()
        .map_err(|e| fail(&e, 2))
}

#[derive(Subcommand)]
enum Command {
    /// Serve the channel object, the content store and the task-worker service.
    Worker {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:9080")]
        listen: SocketAddr,
        /// Calls this process runs at once.
        #[arg(long, short = 'j', default_value_t = 4)]
        jobs: usize,
        /// Where stages and objects live (default: a temporary directory).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// A content store shared by every worker of the deployment (and given to `run`,
        /// `status` and `accept`): outputs, replies and evidence larger than a message go
        /// through it, and a call may write 1 GiB instead of 4 MiB.
        #[arg(long, env = "KLEENE_RESTATE_STORE")]
        store: Option<PathBuf>,
        /// on: each command writes only its stage, scratch and a private TMPDIR, as under
        /// `kleene run` (see kleene's SECURITY.md); off: commands can write anywhere you can.
        #[arg(long, value_name = "on|off", env = "KLEENE_SANDBOX", default_value = "on",
              value_parser = ["on", "off"])]
        sandbox: String,
        /// Restate's ingress URL, where the calls draw fix attempts and fetch plan files; a
        /// cluster's nodes comma-separated (a draw fails over to the next node).
        #[arg(
            long = "restate",
            default_value = "http://127.0.0.1:8080",
            env = "RESTATE_INGRESS_URL"
        )]
        ingress: String,
    },
    /// Spread Restate's calls over several workers behind one deployment URL.
    Balance {
        /// Address to listen on (the URL to register).
        #[arg(long)]
        listen: SocketAddr,
        /// A worker's URL; repeat for each.
        #[arg(long = "backend", required = true)]
        backends: Vec<String>,
    },
    /// Register a worker deployment (a worker's or a balancer's URL) with Restate.
    Register {
        #[command(flatten)]
        server: Server,
        /// The deployment's URL.
        #[arg(long)]
        endpoint: String,
    },
    /// Submit a plan file to its channel and wait for the pass to end.
    Run {
        #[command(flatten)]
        server: Server,
        /// The plan file (the CLI's format: `run`, `checks`, `fix`, `timeout_secs`, `scratch`,
        /// `inputs`). The files beside it that its commands read travel with it by digest
        /// (at most 4096 files, 8 MiB; the plan key `inputs` narrows them).
        plan: PathBuf,
        /// The channel (default: derived from the plan, as `kleene run` derives it).
        #[arg(long)]
        channel: Option<String>,
        /// Calls in flight at once.
        #[arg(long, short = 'j', default_value_t = 8)]
        jobs: usize,
        /// An agent whose interrupted calls must not be replayed; repeat for each.
        #[arg(long = "block")]
        block: Vec<String>,
        /// After this many commits a pass hands over to a new invocation of the channel,
        /// which goes on from its evidence (bounding the server's memory for one
        /// invocation, whatever the plan's size).
        #[arg(long, default_value_t = kleene_restate::service::DEFAULT_CONTINUE_EVERY)]
        continue_every: u32,
        /// Make every call: consult no cache and keep nothing in it (the cache is kept in
        /// Restate, one `ActionCache` object per action key, shared by every channel).
        #[arg(long)]
        no_cache: bool,
        /// How many of a reservation's calls go to a worker in one invocation: more lowers
        /// the server's CPU per call (short calls run faster), and a group's replies come
        /// back when its slowest call ends.
        #[arg(long, default_value_t = kleene_restate::service::DEFAULT_CALLS_PER_INVOCATION)]
        calls_per_invocation: u32,
        /// Print the final status as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Continue a channel's batch from its evidence.
    Resume {
        #[command(flatten)]
        server: Server,
        /// The channel.
        #[arg(long)]
        channel: String,
        /// Print the final status as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a channel's status.
    Status {
        #[command(flatten)]
        server: Server,
        /// The channel.
        #[arg(long)]
        channel: String,
        /// Print it as JSON.
        #[arg(long)]
        json: bool,
        /// Also show the closure records the channel keeps: how each call's closure ended
        /// and the fixes that ran.
        #[arg(long, conflicts_with = "json")]
        closures: bool,
    },
    /// Accept a channel's build: print its acceptance record (as `kleene accept` writes it),
    /// bound to the plan the channel ran.
    Accept {
        #[command(flatten)]
        server: Server,
        /// The plan file the channel ran: names the channel when `--channel` does not, and is
        /// checked to be the plan the channel ran.
        #[arg(required_unless_present = "channel")]
        plan: Option<PathBuf>,
        /// The channel (default: derived from the plan).
        #[arg(long)]
        channel: Option<String>,
        /// Also write the canonical archive (as `kleene export`; `kleene verify` checks it).
        #[arg(long)]
        export: Option<PathBuf>,
    },
    /// Run a plan file locally with kleene's sequential driver (the reference run).
    Local {
        /// The plan file.
        plan: PathBuf,
        /// The channel (default: derived from the plan).
        #[arg(long)]
        channel: Option<String>,
        /// Print the final status as JSON.
        #[arg(long)]
        json: bool,
        /// Write the run's acceptance record here.
        #[arg(long)]
        record: Option<PathBuf>,
        /// Journal to kleene's file journal in this directory (default: in memory).
        #[arg(long)]
        journal: Option<PathBuf>,
    },
}

/// A failure to report: the message and the exit code.
struct Failure(String, u8);

fn fail(e: &(dyn std::error::Error + 'static), code: u8) -> Failure {
    Failure(format!("failed to {}", Chain(e)), code)
}

/// A request's failure: exit 3 when the server could not be reached (start it, or point at
/// a node that answers), 2 when it answered with a refusal.
fn client_fail(e: &ClientError) -> Failure {
    let code = if matches!(e, ClientError::Transport { .. }) {
        3
    } else {
        2
    };
    fail(e, code)
}

fn main() -> ExitCode {
    if let Some(exit) = kleene::process::serve_host_if_asked() {
        return exit;
    }
    // This binary is its commands' contained host, as `kleene` is: what a command leaves
    // running dies with it, and with the worker when the worker is killed.
    if std::env::var("KLEENE_CONTAINMENT").as_deref() != Ok("process-group")
        && let Ok(me) = std::env::current_exe()
    {
        kleene::process::contain_commands_with(me);
    }
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kleene-restate: failed to start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(code) => code,
        Err(Failure(message, code)) => {
            eprintln!("kleene-restate: {message}");
            ExitCode::from(code)
        }
    }
}

/// Reads the plan file `plan` with the files beside it, as `kleene run` reads it (leaving
/// out its default state directory `.kleene`), so both derive the same plan digest.
fn load(plan: &Path) -> Result<ShellPlan, Failure> {
    ShellPlan::read(plan, &[PathBuf::from(".kleene")])
        .map(|(shell, _)| shell)
        .map_err(|e| fail(&e, 2))
}

fn channel_of(shell: &ShellPlan, channel: Option<String>) -> Result<String, Failure> {
    match channel {
        Some(c) => ChannelId::new(c.clone())
            .map(|c| c.to_string())
            .map_err(|e| Failure(format!("failed to use --channel {c:?}: {e}"), 2)),
        None => shell
            .default_channel()
            .map(|c| c.to_string())
            .map_err(|e| fail(&e, 2)),
    }
}

/// Prints a line to stdout; a closed pipe (`| head`) is not an error worth a panic.
fn out(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{text}");
}

fn report(status: &ChannelStatus, json: bool) -> ExitCode {
    // Written, not printed: a reader that closes the pipe early (`| head`) ends the
    // output, never the process with a panic.
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = if json {
        writeln!(
            stdout,
            "{}",
            serde_json::to_string_pretty(status).unwrap_or_default()
        )
    } else {
        write!(stdout, "{status}")
    };
    if status.is_complete() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

async fn run(command: Command) -> Result<ExitCode, Failure> {
    match command {
        Command::Worker {
            listen,
            jobs,
            dir,
            store,
            sandbox,
            ingress,
        } => {
            let temp;
            let dir = match dir {
                Some(d) => d,
                None => {
                    temp = tempfile::tempdir().map_err(|e| fail(&e, 2))?;
                    temp.path().to_owned()
                }
            };
            let store = content_store(store.as_deref())?;
            let worker =
                TaskWorker::new(&dir, jobs, &ingress, store.clone()).map_err(|e| fail(&e, 2))?;
            let worker = if sandbox == "on" {
                worker
            } else {
                worker.without_sandbox()
            };
            let endpoint = endpoint_of(worker, store);
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .map_err(|e| Failure(format!("failed to listen on {listen}: {e}"), 2))?;
            eprintln!("kleene-restate: worker on http://{listen} ({jobs} calls at once)");
            serve(listener, endpoint).await.map_err(|e| fail(&e, 2))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Balance { listen, backends } => {
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .map_err(|e| Failure(format!("failed to listen on {listen}: {e}"), 2))?;
            eprintln!(
                "kleene-restate: balancer on http://{listen} over {}",
                backends.join(", ")
            );
            Balancer::new(backends)
                .serve(listener)
                .await
                .map_err(|e| fail(&e, 2))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Register { server, endpoint } => {
            server
                .client()?
                .register(&endpoint)
                .await
                .map_err(|e| client_fail(&e))?;
            eprintln!("kleene-restate: registered {endpoint}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            server,
            plan,
            channel,
            jobs,
            block,
            continue_every,
            no_cache,
            calls_per_invocation,
            json,
        } => {
            let shell = load(&plan)?;
            let channel = channel_of(&shell, channel)?;
            let block = block
                .into_iter()
                .map(|a| {
                    AgentId::new(a.clone())
                        .map_err(|e| Failure(format!("failed to use --block {a:?}: {e}"), 2))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let client = server.client()?;
            // Refuse at once what the channel would refuse after the pass it is running.
            let before = client.status(&channel).await.map_err(|e| client_fail(&e))?;
            if before.has_evidence() {
                return Err(Failure(
                    format!(
                        "failed to batch on channel {channel}: the channel already has \
                         evidence; resume it"
                    ),
                    2,
                ));
            }
            let submission = Submission {
                continue_every: Some(continue_every),
                no_cache,
                calls_per_invocation: Some(calls_per_invocation),
                ..Submission::of(&shell, jobs, block)
            };
            let follow = (!json).then(|| tokio::spawn(follow(client.clone(), channel.clone())));
            let result = client.submit(&channel, &submission).await;
            if let Some(f) = follow {
                f.abort();
            }
            finish(result, json)
        }
        Command::Resume {
            server,
            channel,
            json,
        } => finish(server.client()?.resume(&channel).await, json),
        Command::Status {
            server,
            channel,
            json,
            closures,
        } => {
            let client = server.client()?;
            let status = client.status(&channel).await.map_err(|e| client_fail(&e))?;
            let code = report(&status, json);
            if closures {
                let mut kept = client
                    .closures(&channel)
                    .await
                    .map_err(|e| client_fail(&e))?;
                kept.sort_by(|a, b| (&a.task, a.call).cmp(&(&b.task, b.call)));
                out(&format!("closure records kept: {}", kept.len()));
                for stored in &kept {
                    out(&format!("  {}", closure_line(stored)));
                }
            }
            Ok(code)
        }
        Command::Accept {
            server,
            plan,
            channel,
            export,
        } => {
            let given = plan.as_deref().map(load).transpose()?;
            let channel = match (&given, channel) {
                (Some(shell), channel) => channel_of(shell, channel)?,
                (None, Some(channel)) => channel,
                (None, None) => {
                    return Err(Failure(
                        "failed to accept: name a plan or --channel".into(),
                        2,
                    ));
                }
            };
            let client = server.client()?;
            // The plan the channel ran, as its workers rebuilt it: what the record binds.
            let shell = client
                .submission(&channel)
                .await
                .map_err(|e| client_fail(&e))?
                .ok_or_else(|| {
                    Failure(
                        format!("failed to accept channel {channel}: it has no submission"),
                        2,
                    )
                })?
                .shell_plan(&channel)
                .map_err(|e| fail(&e, 2))?;
            if let Some(given) = &given
                && given.plan().digest() != shell.plan().digest()
            {
                return Err(Failure(
                    format!(
                        "failed to accept channel {channel}: it ran plan {}, and {} is plan {} \
                         (the plan file or the files beside it changed since)",
                        shell.plan().digest(),
                        plan.as_deref().unwrap_or(Path::new("")).display(),
                        given.plan().digest()
                    ),
                    2,
                ));
            }
            let evidence = client
                .evidence(&channel)
                .await
                .map_err(|e| client_fail(&e))?
                .ok_or_else(|| {
                    Failure(
                        format!("failed to accept channel {channel}: it has no evidence"),
                        2,
                    )
                })?;
            // Read after the evidence: a record is kept before the evidence that binds it,
            // so every record this evidence binds is there (a pass still running may have
            // added more, which acceptance ignores).
            let closures = client
                .closures(&channel)
                .await
                .map_err(|e| client_fail(&e))?;
            let (record, snapshot) =
                acceptance(&shell, &evidence, &closures).map_err(|e| fail(&e, 1))?;
            if let Some(path) = export {
                let archive =
                    kleene::acceptance::export(&record, &snapshot).map_err(|e| fail(&e, 1))?;
                std::fs::write(&path, archive.as_bytes())
                    .map_err(|e| Failure(format!("failed to write {}: {e}", path.display()), 2))?;
            }
            out(&record.to_json());
            eprintln!(
                "kleene-restate: record digest {} (kleene verify ARCHIVE --record DIGEST)",
                record.digest()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Local {
            plan,
            channel,
            json,
            record,
            journal,
        } => {
            let shell = load(&plan)?;
            let channel = channel_of(&shell, channel)?;
            let id = ChannelId::new(channel).map_err(|e| fail(&e, 2))?;
            let dir = tempfile::tempdir().map_err(|e| fail(&e, 2))?;
            // The commands read a copy of the plan's files, as under `kleene run`.
            let copy = dir.path().join("plan");
            if let Some(files) = shell.files() {
                files.write_copy(&copy).map_err(|e| fail(&e, 2))?;
            }
            let kept = Arc::new(KeptRecords::default());
            let runtime = ShellRuntime::new(shell.clone(), dir.path())
                .map_err(|e| fail(&e, 2))?
                .with_plan_dir(&copy)
                .with_observer(kept.clone());
            let session = shell::session(&id).map_err(|e| fail(&e, 2))?;
            let mut worker =
                ClosureWorker::new(runtime.agent("local"), session, shell::default_policy());
            let batch = shell.batch(id);
            let outcome = match journal {
                Some(dir) => {
                    let mut journal = FileJournal::open(dir).map_err(|e| fail(&e, 2))?;
                    batch.run(&mut worker, &(), &mut journal)
                }
                None => batch.run(&mut worker, &(), &mut MemoryJournal::default()),
            }
            .map_err(|e| fail(&e, 1))?;
            if let Some(path) = record {
                let (record, _) = acceptance(&shell, &outcome.evidence, &kept.records())
                    .map_err(|e| fail(&e, 1))?;
                std::fs::write(&path, record.to_json())
                    .map_err(|e| Failure(format!("failed to write {}: {e}", path.display()), 2))?;
            }
            Ok(report(&ChannelStatus::of(&outcome.evidence, None), json))
        }
    }
}

fn finish(
    result: Result<RunReport, kleene_restate::client::ClientError>,
    json: bool,
) -> Result<ExitCode, Failure> {
    match result {
        Ok(run) => {
            // A refused entry was a miss; never silent, never a flood.
            for warning in run.cache_warnings.iter().take(5) {
                eprintln!("kleene-restate: cache entry refused, the task was called: {warning}");
            }
            if run.cache_warnings.len() > 5 {
                eprintln!(
                    "kleene-restate: {} more cache entries refused",
                    run.cache_warnings.len() - 5
                );
            }
            let code = report(&run.status, json);
            if let Some(why) = &run.status.stopped {
                eprintln!("kleene-restate: {why}");
            }
            Ok(code)
        }
        Err(e) => match e.handler_message() {
            Some(message) => Err(Failure(message.to_owned(), 2)),
            None => Err(client_fail(&e)),
        },
    }
}

/// Prints each task's change of state while a pass runs.
async fn follow(client: Restate, channel: String) {
    let mut last: Option<ChannelStatus> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let Ok(now) = client.status(&channel).await else {
            continue;
        };
        for t in &now.tasks {
            let before = last
                .as_ref()
                .and_then(|l| l.tasks.iter().find(|b| b.task == t.task));
            if before.is_none_or(|b| b.status != t.status) {
                eprintln!("  {} {}", t.task, t.status);
            }
        }
        last = Some(now);
    }
}
