//! One function per command. Each returns the process's [`Exit`] or a [`Failure`] to print.

use std::collections::BTreeMap;
use std::fs;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kleene::batch::{
    BatchError, BatchErrorKind, BatchEvidence, ClosureWorker, EvidenceJournal, FileJournal,
    TaskStatus,
};
use kleene::signing::{Envelope, PublicKey, SigningKey};
use kleene::{
    ValidatedPlan,
    acceptance::{
        AcceptanceProblem, AcceptanceRecord, BuildBinding, ClosureMismatch, SignedError,
        StoredRecord, VerifyError, accept_audited, export, verify_archive, verify_signed_archive,
    },
    closure::{ClosureRecord, RecoverOn, RecoveryPolicy, Session},
    id::{ChannelId, Digest, TaskId},
    snapshot::Snapshot,
};

use crate::cli::{
    AcceptArgs, Exit, ExportArgs, GraphArgs, HelpArgs, KeygenArgs, PlanArgs, ResumeArgs, RunArgs,
    SigningArgs, StateArgs, VerifyArgs, jobs,
};
use crate::formats::{RunInfo, encode_closure_line_as};
use crate::observer::Observer;
use crate::report::{Event, Reporter, detail, failure_reason, report_event, status_word};
use crate::state::{ClosureEntry, StateDir, write_atomic, write_replace};
use kleene::batch::JournalKey;
use kleene::error::Chain;
use kleene::process::{self, Containment, GroupRecords, Interrupt};
use kleene::shell::{ShellPlan, ShellRuntime, describe_changes, merges};

/// A command that could not do what was asked: the exit code and the message to print.
#[derive(Debug)]
pub struct Failure {
    /// The exit code.
    pub exit: Exit,
    /// What went wrong (reads after "kleene: ").
    pub message: String,
}

impl Failure {
    fn bad_input(message: impl ToString) -> Self {
        Self {
            exit: Exit::BadInput,
            message: message.to_string(),
        }
    }

    fn halted(message: impl ToString) -> Self {
        Self {
            exit: Exit::Halted,
            message: message.to_string(),
        }
    }
}

pub type Outcome = Result<Exit, Failure>;

fn absolute(path: &Path) -> Result<PathBuf, Failure> {
    std::path::absolute(path)
        .map_err(|e| Failure::bad_input(format!("resolve {}: {e}", path.display())))
}

/// `kleene help [TOPIC]`: the plan file reference for `plan`, a command's long help for a
/// command's name, kleene's own help without a topic.
pub fn help(args: &HelpArgs) -> Outcome {
    use clap::CommandFactory;
    let mut cli = crate::cli::Cli::command();
    // Built first, so a command's usage line reads `kleene validate`, not `validate`.
    cli.build();
    let printed = match args.topic.as_deref() {
        Some("plan" | "plans") => {
            println!("{}", crate::cli::PLAN_HELP);
            Ok(())
        }
        None => cli.print_long_help(),
        Some(name) => {
            let names: Vec<String> = cli
                .get_subcommands()
                .map(|c| c.get_name().to_owned())
                .collect();
            match cli.find_subcommand_mut(name) {
                Some(sub) => sub.print_long_help(),
                None => {
                    return Err(Failure::bad_input(format!(
                        "no help topic `{name}`: try `kleene help plan` or one of {}",
                        names.join(", ")
                    )));
                }
            }
        }
    };
    printed.map_err(|e| Failure::bad_input(format!("print help: {e}")))?;
    Ok(Exit::Ok)
}

/// `kleene validate PLAN`.
pub fn validate(args: &PlanArgs, rep: &mut Reporter) -> Outcome {
    let (loaded, _) = read_plan(&args.plan, &[])?;
    let plan = loaded.plan();
    if rep.mode() == crate::report::Mode::Json {
        let tasks: Vec<_> = plan
            .tasks()
            .map(|t| {
                serde_json::json!({
                    "id": t.id,
                    "lane": t.kind.lane(),
                    "module": t.kind.module().map(|m| m.as_str().to_owned()),
                    "owned_paths": t.owned_paths,
                    "depends_on": plan.prerequisites(&t.id),
                    "synthesized": t.is_synthesized(),
                    "has_commands": loaded.command(&t.id).is_some(),
                    "consolidated_from": t.consolidated_from,
                })
            })
            .collect();
        rep.say_json(&serde_json::json!({
            "event": "plan_valid",
            "file": args.plan,
            "digest": plan.digest().to_string(),
            "tasks": tasks,
            "merged": merges(plan),
            "plan_files": loaded.files().map_or(0, kleene::shell::PlanFiles::len),
        }));
        return Ok(Exit::Ok);
    }
    let files = loaded.files().map_or(0, kleene::shell::PlanFiles::len);
    rep.say(&format!(
        "{} is valid: {} tasks, {files} plan file{} bound, plan digest {}",
        args.plan.display(),
        plan.len(),
        if files == 1 { "" } else { "s" },
        plan.digest()
    ));
    for (i, t) in plan.tasks().enumerate() {
        let commands = match loaded.command(&t.id) {
            Some(c) => format!(
                "run, {} check{}{}",
                c.checks.len(),
                if c.checks.len() == 1 { "" } else { "s" },
                if c.fix.is_some() { ", fix" } else { "" }
            ),
            None if t.is_synthesized() => "synthesized, runs nothing".to_owned(),
            None => "runs nothing".to_owned(),
        };
        let module = t
            .kind
            .module()
            .map_or(String::new(), |m| format!(" {m}", m = m.as_str()));
        let after: Vec<&str> = plan
            .prerequisites(&t.id)
            .iter()
            .map(|id| id.as_str())
            .collect();
        rep.say(&format!(
            "{:>3}. {} [{}{module}] ({commands}){}",
            i + 1,
            t.id,
            t.kind.lane(),
            if after.is_empty() {
                String::new()
            } else {
                format!(" after {}", after.join(", "))
            }
        ));
    }
    for merge in merges(plan) {
        rep.say(&format!("note: {merge}"));
    }
    Ok(Exit::Ok)
}

/// `kleene graph PLAN [--out BASE]`.
pub fn graph(args: &GraphArgs, rep: &mut Reporter) -> Outcome {
    let (loaded, _) = read_plan(&args.plan, &[])?;
    let dot = loaded.plan().to_dot();
    let Some(base) = &args.out else {
        print!("{dot}");
        return Ok(Exit::Ok);
    };
    let dot_path = base.with_extension("dot");
    write_atomic(&dot_path, dot.as_bytes()).map_err(|e| Failure::bad_input(Chain(&e)))?;
    rep.say(&format!("wrote {}", dot_path.display()));
    let svg_path = base.with_extension("svg");
    match std::process::Command::new("dot")
        .arg("-Tsvg")
        .arg(&dot_path)
        .arg("-o")
        .arg(&svg_path)
        .status()
    {
        Ok(status) if status.success() => rep.say(&format!("wrote {}", svg_path.display())),
        Ok(status) => {
            return Err(Failure::halted(format!(
                "render {} with Graphviz: dot exited with {status}",
                svg_path.display()
            )));
        }
        Err(_) => rep.say("Graphviz `dot` is not on PATH: no SVG (the DOT file is complete)"),
    }
    Ok(Exit::Ok)
}

/// Reads the plan file at `file` with the files beside it (leaving out `skip`, and the
/// default state directory `.kleene` beside the plan when there is one).
fn read_plan(file: &Path, skip: &[PathBuf]) -> Result<(ShellPlan, String), Failure> {
    let mut skip = skip.to_vec();
    skip.push(PathBuf::from(".kleene"));
    ShellPlan::read(file, &skip).map_err(|e| Failure::bad_input(Chain(&e)))
}

/// The plan a state directory's run started with: its stored text and the plan files it
/// bound.
fn stored_plan(state: &StateDir, text: &str) -> Result<ShellPlan, Failure> {
    let files = state
        .plan_files()
        .map_err(|e| Failure::bad_input(Chain(&e)))?;
    ShellPlan::from_text(&state.plan_path(), text, files).map_err(|e| Failure::bad_input(Chain(&e)))
}

/// `kleene run PLAN`.
pub fn run(args: &RunArgs, rep: Reporter) -> Outcome {
    if let Some(url) = &args.restate {
        return crate::restate::run(args, url);
    }
    // The run's own directories are never plan files, wherever they are.
    let mut skip = vec![args.state.state.clone()];
    skip.extend(args.workspace.iter().cloned());
    let (loaded, text) = read_plan(&args.plan, &skip)?;
    // A merged task would otherwise vanish from the run without a word. On stderr, so
    // stdout keeps exactly its events; `kleene validate --json` reports merges as data.
    if rep.mode() != crate::report::Mode::Json {
        for merge in merges(loaded.plan()) {
            eprintln!("kleene: note: {merge}");
        }
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err(Failure::bad_input(format!(
            "use --timeout {}: it must be a positive number of seconds",
            args.timeout
        )));
    }
    let state = StateDir::at(&args.state.state);
    if args.restart {
        set_aside(&state)?;
    }
    let _lock = state.lock("run").map_err(|e| Failure::halted(Chain(&e)))?;
    let workspace = match &args.workspace {
        Some(w) => absolute(w)?,
        None => absolute(&state.default_workspace())?,
    };
    let channel = match &args.channel {
        Some(c) => ChannelId::new(c.clone())
            .map_err(|e| Failure::bad_input(format!("use --channel {c:?}: {e}")))?,
        None => loaded
            .default_channel()
            .map_err(|e| Failure::bad_input(format!("derive a channel id: {e}")))?,
    };
    let plan_dir = match args.plan.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => absolute(dir)?,
        _ => absolute(Path::new("."))?,
    };
    let info = RunInfo {
        channel: channel.to_string(),
        workspace,
        plan_file: args.plan.clone(),
        plan_dir,
        max_depth: args.max_depth,
        max_fixes: args.max_fixes,
        recover_warnings: args.recover_warnings,
        batch_recovery: args.batch_recovery,
        timeout_secs: args.timeout,
    };
    policy(&info, info.max_depth)?;
    state
        .create(&info, &text, loaded.files())
        .map_err(|e| Failure::bad_input(Chain(&e)))?;
    refuse_live_groups(&state, args.kill_stale)?;
    let pass = Pass {
        resumed: false,
        jobs: jobs(args.jobs),
    };
    execute(&state, &info, &loaded, pass, &args.signing, rep)
}

/// Moves the state directory of an earlier run aside (`STATE.old-N`), so `run --restart`
/// starts over and the old run stays there to inspect.
fn set_aside(state: &StateDir) -> Result<(), Failure> {
    let root = state.root();
    if fs::symlink_metadata(root).is_err() {
        return Ok(());
    }
    // Holding the old directory's lock while it moves keeps a writer from racing the move.
    let _lock = state
        .lock("run --restart")
        .map_err(|e| Failure::halted(Chain(&e)))?;
    let name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "state".to_owned());
    for n in 1..1000 {
        let aside = root.with_file_name(format!("{name}.old-{n}"));
        if fs::symlink_metadata(&aside).is_ok() {
            continue;
        }
        return fs::rename(root, &aside).map_err(|e| {
            Failure::halted(format!(
                "move {} aside to {}: {e}",
                root.display(),
                aside.display()
            ))
        });
    }
    Err(Failure::halted(format!(
        "move {} aside: {name}.old-1 to {name}.old-999 all exist; remove some",
        root.display()
    )))
}

/// Refuses to start while a command of an earlier kleene in this state directory is still
/// running (it could still write), or kills it when the user asked for that.
fn refuse_live_groups(state: &StateDir, kill: bool) -> Result<(), Failure> {
    let records = GroupRecords::new(state.running_dir());
    let live = records.live();
    if live.is_empty() {
        return Ok(());
    }
    if kill {
        for group in &live {
            records.kill(group);
        }
        return Ok(());
    }
    let names: Vec<String> = live
        .iter()
        .map(|g| format!("process group {} ({})", g.group, g.label))
        .collect();
    Err(Failure::halted(format!(
        "start in {}: commands of an earlier kleene are still running and could still write: \
         {}; wait for them, kill them, or pass --kill-stale",
        state.root().display(),
        names.join("; ")
    )))
}

/// `kleene resume`.
pub fn resume(args: &ResumeArgs, rep: Reporter) -> Outcome {
    let state = StateDir::at(&args.state.state);
    let _lock = state
        .lock("resume")
        .map_err(|e| Failure::halted(Chain(&e)))?;
    let (info, text) = state.open().map_err(|e| Failure::bad_input(Chain(&e)))?;
    let loaded = stored_plan(&state, &text)?;
    refuse_changed_plan(&info, &loaded, &state)?;
    refuse_live_groups(&state, args.kill_stale)?;
    let pass = Pass {
        resumed: true,
        jobs: jobs(args.jobs),
    };
    execute(&state, &info, &loaded, pass, &args.signing, rep)
}

/// A resume runs the plan as it was when the run started; if the plan file has changed
/// since, running the old copy would surprise, so it is refused, naming what changed.
fn refuse_changed_plan(
    info: &RunInfo,
    stored: &ShellPlan,
    state: &StateDir,
) -> Result<(), Failure> {
    let Some(name) = info.plan_file.file_name() else {
        return Ok(());
    };
    let current = info.plan_dir.join(name);
    let Ok(text) = fs::read_to_string(&current) else {
        // Gone or unreadable: the stored copy is all there is, and it is what ran.
        return Ok(());
    };
    // The plan's files as they are now, gathered as the run gathered them (a run started
    // before plans carried their files compares the plan file alone).
    // A file added since is not part of the run and changes nothing it does; a bound file
    // changed or removed is named.
    let fresh = match stored.files() {
        Some(bound) => {
            let skip = [state.root().to_owned(), info.workspace.clone()];
            ShellPlan::read(&current, &skip).and_then(|(plan, _)| {
                let files = plan.files().map(|now| now.only_paths_of(bound));
                ShellPlan::from_text(&current, &text, files)
            })
        }
        None => ShellPlan::from_text(&current, &text, None),
    };
    let Ok(fresh) = fresh else {
        return Err(Failure::bad_input(format!(
            "resume: {} no longer loads, and the run started from an earlier version of it; \
             restore it, or start over with kleene run {} --restart --state {} (the old run \
             is kept beside it)",
            current.display(),
            current.display(),
            state.root().display()
        )));
    };
    let changes = describe_changes(stored, &fresh);
    if changes.is_empty() {
        return Ok(());
    }
    Err(Failure::bad_input(format!(
        "resume: {} changed since the run started ({}); the run can only continue the plan it \
         started with. Undo the change, or start over with kleene run {} --restart --state {} \
         (the old run is kept beside it)",
        current.display(),
        changes.join("; "),
        current.display(),
        state.root().display()
    )))
}

fn policy(info: &RunInfo, depth: u32) -> Result<RecoveryPolicy, Failure> {
    RecoveryPolicy::builder()
        .max_recovery_depth(depth)
        .max_total_fix_attempts(info.max_fixes)
        .recover_on(if info.recover_warnings {
            RecoverOn::BlockersAndWarnings
        } else {
            RecoverOn::Blockers
        })
        .build()
        .map_err(|e| Failure::bad_input(format!("use this recovery policy: {e}")))
}

/// How `run` or `resume` drives the batch: whether it continues a run, and how many calls
/// it makes at once.
#[derive(Debug, Clone, Copy)]
struct Pass {
    resumed: bool,
    jobs: NonZeroUsize,
}

fn execute(
    state: &StateDir,
    info: &RunInfo,
    loaded: &ShellPlan,
    pass: Pass,
    signing: &SigningArgs,
    mut rep: Reporter,
) -> Outcome {
    let Pass { resumed, jobs } = pass;
    let journal_key = journal_key(signing_key(signing, state)?.as_ref());
    let channel = ChannelId::new(info.channel.clone()).map_err(|e| {
        Failure::bad_input(format!("read channel of {}: {e}", state.root().display()))
    })?;
    let interrupt = Interrupt::install()
        .map_err(|e| Failure::halted(format!("install the SIGINT/SIGTERM handler: {e}")))?;
    // What stages an earlier kleene left hold nothing anyone needs: their calls were never
    // settled, and a resume makes them again in fresh stages.
    if let Ok(entries) = fs::read_dir(state.stages_dir()) {
        for entry in entries.flatten() {
            if let Err(e) = kleene::stage::remove_stage(&entry.path()) {
                rep.say(&format!(
                    "warning: failed to remove a stage an earlier kleene left: {}",
                    Chain(&e)
                ));
            }
        }
    }
    // The commands read the run's own copy of the plan's files, checked against what the
    // plan binds; a run started before plans carried their files reads the plan directory.
    let plan_dir = match loaded.files() {
        Some(files) => {
            let copy = state.plan_files_dir();
            files.verify_copy(&copy).map_err(|e| {
                Failure::halted(format!(
                    "read the plan's files in {}: {}",
                    state.root().display(),
                    Chain(&e)
                ))
            })?;
            copy
        }
        None => info.plan_dir.clone(),
    };
    fs::create_dir_all(&info.workspace)
        .map_err(|e| Failure::halted(format!("create {}: {e}", info.workspace.display())))?;
    let rep = Arc::new(Mutex::new(rep));
    let observer = Arc::new(Observer {
        rep: Arc::clone(&rep),
        // Absolute, so every path a command is given (its stage as KLEENE_WORKSPACE, its
        // spec file) still holds after it changes directory, whatever --state said.
        state: StateDir::at(&absolute(state.root())?),
    });
    let runtime = ShellRuntime::new(loaded.clone(), state.root())
        .map_err(|e| Failure::halted(Chain(&e)))?
        .with_plan_dir(&plan_dir)
        .with_default_timeout(Duration::from_secs_f64(info.timeout_secs))
        .with_interrupt(interrupt.clone())
        .with_group_records(GroupRecords::new(state.running_dir()))
        .with_observer(observer);
    let plan = loaded.plan();
    let report = || rep.lock().unwrap_or_else(PoisonError::into_inner);
    report().emit(&Event::RunStarted {
        channel: info.channel.clone(),
        tasks: plan.len(),
        resumed,
    });
    if process::containment() == Containment::ProcessGroup {
        report().say(&format!(
            "note: commands are contained by {} only (no PID namespace here): a child that \
             calls setsid, or every child after kleene is killed with SIGKILL, can outlive its \
             call; a later resume refuses to start while one is alive",
            Containment::ProcessGroup.as_str()
        ));
    }
    let session = Session::new("kleene-run", info.channel.clone())
        .map_err(|e| Failure::bad_input(format!("open a session: {e}")))?;
    let recovery = policy(info, info.max_depth)?;
    let mut journal = FileJournal::open(state.journal_dir())
        .map_err(|e| Failure::halted(format!("open the journal: {}", Chain(&e))))?;
    if let Some(key) = &journal_key {
        journal = journal.with_mac_key(key.clone());
    }
    // Group commit: one sync per task instead of two; every event is still durable before the
    // next command runs, and an unsynced settlement is only ever replayed (allow), never lost.
    let batch = loaded
        .batch(channel)
        .with_group_commit(true)
        .with_recovery(info.batch_recovery);
    let mut fixes = BTreeMap::new();
    // One worker per slot, each with its own stage; the threaded driver reserves the lowest
    // ready task first, so one job makes the calls in the sequential order.
    let workers = |slot: usize| {
        ClosureWorker::new(
            runtime.agent(slot.to_string()),
            session.clone(),
            recovery.clone(),
        )
    };
    let result = batch.run_threaded_observed(jobs, workers, &(), &mut journal, &mut |event| {
        report_event(&mut report(), &mut fixes, event);
    });
    for (_, torn) in journal.repairs() {
        report().say(&format!(
            "note: the journal ended in a record cut short by an earlier crash; removed its \
             {} byte(s) at byte {} ({})",
            torn.discarded, torn.offset, torn.cause
        ));
    }
    // The runtime's observer holds the reporter too.
    drop(runtime);
    let mut rep = Arc::try_unwrap(rep)
        .map(|rep| rep.into_inner().unwrap_or_else(PoisonError::into_inner))
        .map_err(|_| Failure::halted("finish the run: its reporter is still in use"))?;
    let outcome =
        result.map_err(|err| stopped(err, state, &info.channel, journal_key.as_ref(), &mut rep))?;
    if let Err(message) = project_workspace(&outcome.evidence, &info.workspace) {
        rep.say(&format!(
            "warning: failed to write the workspace: {message}"
        ));
    }
    finish(plan, &outcome.evidence, state, &mut rep)
}

/// Writes every accepted file into the run's workspace, for people to look at: only accepted
/// outputs ever reach it, and only after the batch accepted them. A file that already holds
/// the accepted bytes is left alone; nothing is written through a symlink.
fn project_workspace(evidence: &BatchEvidence, workspace: &Path) -> Result<(), String> {
    let mut wrote = false;
    for (_, output) in evidence.accepted_outputs() {
        for (path, content) in output.files() {
            let mut dir = workspace.to_owned();
            let mut parts = path.components().peekable();
            while let Some(part) = parts.next() {
                let next = dir.join(part);
                if parts.peek().is_none() {
                    dir = next;
                    break;
                }
                match fs::symlink_metadata(&next) {
                    Ok(meta) if meta.is_dir() => {}
                    Ok(_) => {
                        return Err(format!(
                            "{} is not a directory (a link or a file); {path} was not written",
                            next.display()
                        ));
                    }
                    Err(_) => fs::create_dir(&next)
                        .map_err(|e| format!("create {}: {e}", next.display()))?,
                }
                dir = next;
            }
            match fs::symlink_metadata(&dir) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(format!(
                        "{} is a link; {path} was not written",
                        dir.display()
                    ));
                }
                Ok(meta)
                    if meta.is_file()
                        && meta.len() == content.len() as u64
                        && fs::read(&dir).is_ok_and(|old| old == *content) =>
                {
                    continue;
                }
                _ => {}
            }
            // Each file replaced whole but not synced one by one: the journal, not the
            // workspace, is the authority, and one sync of the file system below makes the
            // whole projection durable at the cost of one flush instead of one per file.
            write_replace(&dir, content).map_err(|e| Chain(&e).to_string())?;
            wrote = true;
        }
    }
    if wrote {
        fs::File::open(workspace)
            .and_then(|dir| rustix::fs::syncfs(&dir).map_err(std::io::Error::from))
            .map_err(|e| format!("sync {}: {e}", workspace.display()))?;
    }
    Ok(())
}

/// Reports the tasks the worker never saw (drained) and the run's outcome.
fn finish(
    plan: &ValidatedPlan,
    evidence: &BatchEvidence,
    state: &StateDir,
    rep: &mut Reporter,
) -> Outcome {
    for id in plan.topological_order() {
        if let Some(TaskStatus::Drained { blocked_by }) = evidence.status(id) {
            rep.emit(&Event::TaskDrained {
                task: id.to_string(),
                blocked_by: blocked_by.to_string(),
            });
        }
    }
    let summary = evidence.summary();
    let complete = summary.is_complete();
    rep.emit(&Event::RunFinished {
        outcome: if complete { "accepted" } else { "halted" }.to_owned(),
        accepted: summary.accepted,
        failed: summary.failed,
        drained: summary.drained,
    });
    let dir = state.root().display();
    if complete {
        rep.say(&format!(
            "all {} tasks accepted; next: kleene accept --state {dir}",
            summary.accepted
        ));
        Ok(Exit::Ok)
    } else {
        for id in plan.topological_order() {
            if evidence.status(id) == Some(TaskStatus::Failed) {
                rep.say(&format!(
                    "{id} failed: {}",
                    failure_reason(evidence, plan, id)
                ));
            }
        }
        rep.say(&format!(
            "halted; see kleene status --state {dir} and kleene audit --state {dir}"
        ));
        Ok(Exit::Halted)
    }
}

fn stopped(
    err: BatchError,
    state: &StateDir,
    channel: &str,
    key: Option<&JournalKey>,
    rep: &mut Reporter,
) -> Failure {
    let dir = state.root().display();
    if err.is_cancelled() {
        // The journal holds everything settled before the interrupt (and the reservation).
        let summary = Some(read_journal(state, key))
            .zip(ChannelId::new(channel).ok())
            .and_then(|(journal, channel)| journal.load(&channel).ok().flatten())
            .and_then(|load| load.into_evidence().ok())
            .map(|evidence| evidence.summary());
        rep.emit(&Event::RunFinished {
            outcome: "interrupted".to_owned(),
            accepted: summary.as_ref().map_or(0, |s| s.accepted),
            failed: summary.as_ref().map_or(0, |s| s.failed),
            drained: summary.as_ref().map_or(0, |s| s.drained),
        });
        return Failure {
            exit: Exit::Interrupted,
            message: format!("{}; continue with kleene resume --state {dir}", Chain(&err)),
        };
    }
    if err.is_worker_unavailable() {
        return Failure {
            exit: Exit::Halted,
            message: format!("{}; then kleene resume --state {dir}", Chain(&err)),
        };
    }
    let exit = match err.kind() {
        BatchErrorKind::Journal(_) | BatchErrorKind::Fold { .. } => Exit::Halted,
        BatchErrorKind::PendingTurnBlocked { .. } => Exit::Halted,
        _ => Exit::BadInput,
    };
    Failure {
        exit,
        message: Chain(&err).to_string(),
    }
}

/// The journal key the environment names (KLEENE_SIGNING_KEY), for the commands that only
/// read a journal and take no key option.
fn env_journal_key(state: &StateDir) -> Result<Option<JournalKey>, Failure> {
    let args = SigningArgs {
        signing_key: std::env::var_os("KLEENE_SIGNING_KEY").map(PathBuf::from),
    };
    Ok(journal_key(signing_key(&args, state)?.as_ref()))
}

/// The state directory's journal for reading: nothing is created, cut or removed.
fn read_journal(state: &StateDir, key: Option<&JournalKey>) -> FileJournal {
    let journal = FileJournal::open_read_only(state.journal_dir());
    match key {
        Some(key) => journal.with_mac_key(key.clone()),
        None => journal,
    }
}

/// The journal MAC key of a signing key.
fn journal_key(key: Option<&SigningKey>) -> Option<JournalKey> {
    key.map(|k| JournalKey::from_bytes(k.journal_mac_key()))
}

fn load_evidence(
    state: &StateDir,
    key: Option<&JournalKey>,
) -> Result<(RunInfo, ShellPlan, BatchEvidence), Failure> {
    let (info, text) = state.open().map_err(|e| Failure::bad_input(Chain(&e)))?;
    let loaded = stored_plan(state, &text)?;
    let channel =
        ChannelId::new(info.channel.clone()).map_err(|e| Failure::bad_input(Chain(&e)))?;
    let journal = read_journal(state, key);
    let load = journal
        .load(&channel)
        .map_err(|e| Failure::bad_input(Chain(&e)))?
        .ok_or_else(|| {
            Failure::bad_input(format!(
                "read evidence in {}: channel {channel} has no journal yet",
                state.root().display()
            ))
        })?;
    let evidence = load
        .into_evidence()
        .map_err(|e| Failure::bad_input(Chain(&e)))?;
    Ok((info, loaded, evidence))
}

/// `kleene status`.
pub fn status(args: &StateArgs, rep: &mut Reporter) -> Outcome {
    let state = StateDir::at(&args.state);
    let key = env_journal_key(&state)?;
    let (info, loaded, evidence) = load_evidence(&state, key.as_ref())?;
    let summary = evidence.summary();
    let fixes = kleene::shell::fixes_by_task(&evidence);
    let mut rows = Vec::new();
    for id in loaded.plan().topological_order() {
        let status = evidence.status(id);
        let calls = evidence.task(id).map_or(0, |t| t.calls());
        let fixes = fixes.get(id).copied().unwrap_or(0);
        let why = match &status {
            Some(TaskStatus::Failed) => Some(failure_reason(&evidence, loaded.plan(), id)),
            Some(TaskStatus::Drained { blocked_by }) => {
                Some(format!("prerequisite {blocked_by} failed"))
            }
            Some(TaskStatus::InFlight { .. }) => {
                Some("interrupted; kleene resume replays it".to_owned())
            }
            _ => None,
        };
        rows.push((id.clone(), status_word(status.as_ref()), calls, fixes, why));
    }
    if rep.mode() == crate::report::Mode::Json {
        let tasks: Vec<_> = rows
            .iter()
            .map(|(id, status, calls, fixes, why)| {
                serde_json::json!({
                    "task": id, "status": status, "calls": calls, "fixes": fixes, "why": why,
                })
            })
            .collect();
        rep.say_json(&serde_json::json!({
            "event": "status",
            "channel": info.channel,
            "workspace": info.workspace,
            "evidence_digest": evidence.digest().to_string(),
            "complete": summary.is_complete(),
            "tasks": tasks,
        }));
    } else {
        rep.say(&format!(
            "channel {} · plan {} · workspace {}",
            info.channel,
            info.plan_file.display(),
            info.workspace.display()
        ));
        let width = rows.iter().map(|r| r.0.as_str().len()).max().unwrap_or(0);
        let status_width = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
        for (id, status, calls, fixes, why) in &rows {
            let why = why.as_ref().map_or(String::new(), |w| format!("  {w}"));
            rep.say(&format!(
                "  {:<width$}  {status:<status_width$} {:>15}{why}",
                id.as_str(),
                kleene::shell::calls_and_fixes(*calls, *fixes)
            ));
        }
        rep.say(&format!(
            "{} accepted, {} failed, {} drained, {} in flight, {} pending; evidence {}",
            summary.accepted,
            summary.failed,
            summary.drained,
            summary.in_flight,
            summary.pending,
            evidence.digest()
        ));
    }
    Ok(if summary.is_complete() {
        Exit::Ok
    } else {
        Exit::Halted
    })
}

/// Builds the acceptance record of the run in `state`.
fn acceptance(
    state: &StateDir,
    key: Option<&SigningKey>,
) -> Result<(kleene::acceptance::AcceptanceRecord, Snapshot), Failure> {
    let (_, loaded, evidence) = load_evidence(state, journal_key(key).as_ref())?;
    let snapshot = Snapshot::from_evidence(&evidence).map_err(|e| Failure::halted(Chain(&e)))?;
    let binding = BuildBinding::new(
        evidence.channel().clone(),
        loaded.plan().digest(),
        evidence.evidence_version(),
    );
    // The record binds each call's audit trail by digest: a trail the closure log can no
    // longer show is named here, before anything is sealed.
    let entries = state.closure_log();
    let (logged, mut problems) = read_closure_log(state, &entries);
    let sealed = accept_audited(
        loaded.plan(),
        &evidence,
        &snapshot,
        &binding,
        logged.iter().map(|l| (&l.task, l.call, l.record)),
    );
    if let Err(err) = &sealed {
        problems.extend(err.problems().iter().map(|p| match p {
            AcceptanceProblem::ClosureRecord(m) => {
                format!("{}: {m}", closure_place(state, &logged, m))
            }
            other => other.to_string(),
        }));
    }
    match sealed {
        Ok(record) if problems.is_empty() => Ok((record, snapshot)),
        _ => Err(Failure::halted(format!(
            "accept the build: {} problem(s), nothing was written:\n  {}",
            problems.len(),
            problems.join("\n  ")
        ))),
    }
}

/// One record of the closure log, read back in the form kleene writes.
struct LoggedClosure<'e> {
    task: TaskId,
    call: u32,
    record: &'e ClosureRecord,
    /// The file and line it stands on.
    place: String,
}

/// The records of the closure log that read back in the one form kleene writes, and a
/// problem for each line that does not (unreadable, not a task id, or edited into another
/// spelling of the same value). Line order carries no meaning: a record is found by its
/// task and call.
fn read_closure_log<'e>(
    state: &StateDir,
    entries: &'e [ClosureEntry],
) -> (Vec<LoggedClosure<'e>>, Vec<String>) {
    let log_path = state.closure_log_path();
    let text = fs::read_to_string(&log_path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut problems = Vec::new();
    let mut logged = Vec::new();
    for entry in entries {
        let place = format!("{} line {}", log_path.display(), entry.line);
        let record = match &entry.record {
            Ok(record) => record,
            Err(e) => {
                problems.push(format!(
                    "{place} (task {} call {}): unreadable: {e}",
                    entry.task, entry.call
                ));
                continue;
            }
        };
        let Ok(task) = TaskId::new(entry.task.clone()) else {
            problems.push(format!("{place}: task {:?} is not a task id", entry.task));
            continue;
        };
        // One value has one written form: a byte changed to an equivalent spelling (an
        // upper-case hex digit, an escape) is an edit too.
        let again = encode_closure_line_as(entry.format, &task, entry.call, record);
        let written = lines.get(entry.line.saturating_sub(1)).copied();
        if !again.is_ok_and(|again| Some(again.as_slice()) == written.map(str::as_bytes)) {
            problems.push(format!(
                "{place} (task {task} call {}): not in the form kleene writes; it was edited",
                entry.call
            ));
        }
        logged.push(LoggedClosure {
            task,
            call: entry.call,
            record,
            place,
        });
    }
    (logged, problems)
}

/// Where the record a mismatch is about stands: its line, or the log when it has none.
fn closure_place(state: &StateDir, logged: &[LoggedClosure<'_>], m: &ClosureMismatch) -> String {
    let (task, call) = m.call();
    logged
        .iter()
        .find(|l| &l.task == task && l.call == call)
        .map_or_else(
            || state.closure_log_path().display().to_string(),
            |l| l.place.clone(),
        )
}

/// `kleene accept`.
pub fn accept_run(args: &AcceptArgs, rep: &mut Reporter) -> Outcome {
    let state = StateDir::at(&args.state.state);
    let _lock = state
        .lock("accept")
        .map_err(|e| Failure::halted(Chain(&e)))?;
    let key = signing_key(&args.signing, &state)?;
    let (record, _) = acceptance(&state, key.as_ref())?;
    let path = state.acceptance_path();
    let envelope_path = record_envelope_path(&state);
    write_atomic(&path, record.to_json().as_bytes()).map_err(|e| Failure::halted(Chain(&e)))?;
    match &key {
        Some(key) => write_atomic(&envelope_path, record.sign(key).to_json().as_bytes())
            .map_err(|e| Failure::halted(Chain(&e)))?,
        // An envelope of an earlier record no longer describes this one.
        None => match fs::remove_file(&envelope_path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Failure::halted(format!(
                    "remove {}: {e}",
                    envelope_path.display()
                )));
            }
        },
    }
    let key_id = key.as_ref().map(|k| k.public_key().key_id());
    if rep.mode() == crate::report::Mode::Json {
        rep.say_json(&serde_json::json!({
            "event": "accepted",
            "record": path,
            "record_digest": record.digest().to_string(),
            "files": record.files().entries().len(),
            "signature": key_id.as_ref().map(|_| &envelope_path),
            "key_id": key_id,
        }));
    } else {
        let signed = key_id
            .map(|id| format!("; signed by key {id} in {}", envelope_path.display()))
            .unwrap_or_default();
        rep.say(&format!(
            "accepted {} files; record {} written to {}{signed}",
            record.files().entries().len(),
            record.digest(),
            path.display()
        ));
    }
    Ok(Exit::Ok)
}

/// Where `kleene accept --signing-key` puts the record's DSSE envelope.
fn record_envelope_path(state: &StateDir) -> PathBuf {
    state
        .acceptance_path()
        .with_file_name("acceptance.dsse.json")
}

/// Where `kleene export --signing-key` puts the signed in-toto statement: beside the
/// archive, as an in-toto bundle of one line.
fn statement_envelope_path(archive: &Path) -> PathBuf {
    let mut name = archive.as_os_str().to_owned();
    name.push(".intoto.jsonl");
    PathBuf::from(name)
}

/// The signing key named by `--signing-key` or `KLEENE_SIGNING_KEY`, refused when it lies
/// inside the state directory (whoever can write the state could then also sign) or when
/// others can read it.
fn signing_key(args: &SigningArgs, state: &StateDir) -> Result<Option<SigningKey>, Failure> {
    use std::os::unix::fs::PermissionsExt as _;
    let Some(path) = &args.signing_key else {
        return Ok(None);
    };
    let shown = path.display();
    let resolved = fs::canonicalize(path)
        .map_err(|e| Failure::bad_input(format!("read signing key {shown}: {e}")))?;
    let root = fs::canonicalize(state.root()).or_else(|_| std::path::absolute(state.root()));
    if let Ok(root) = root
        && resolved.starts_with(&root)
    {
        return Err(Failure::bad_input(format!(
            "use signing key {shown}: it is inside the state directory {}, where anyone \
                 who can forge evidence can also read it; move it elsewhere (see SECURITY.md)",
            root.display()
        )));
    }
    let mode = fs::metadata(&resolved)
        .map_err(|e| Failure::bad_input(format!("read signing key {shown}: {e}")))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(Failure::bad_input(format!(
            "use signing key {shown}: others can access it (mode {:o}); run chmod 600 {shown}",
            mode & 0o777
        )));
    }
    let text = fs::read_to_string(&resolved)
        .map_err(|e| Failure::bad_input(format!("read signing key {shown}: {e}")))?;
    SigningKey::from_pem(&text)
        .map(Some)
        .map_err(|e| Failure::bad_input(format!("{shown}: {e}")))
}

/// Checks that the record stored in `state` carries a valid signature by `key`.
fn check_record_signature(
    state: &StateDir,
    stored: &StoredRecord,
    key: &SigningKey,
) -> Result<(), Failure> {
    let path = record_envelope_path(state);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Failure::halted(format!(
                "export: the acceptance record in {} is not signed ({} is missing); sign it \
                 with kleene accept --signing-key once you trust the evidence (see SECURITY.md)",
                state.acceptance_path().display(),
                path.display()
            )));
        }
        Err(e) => return Err(Failure::bad_input(format!("read {}: {e}", path.display()))),
    };
    let signed = Envelope::from_json(&text)
        .map_err(|e| Failure::bad_input(format!("{}: {e}", path.display())))
        .and_then(|envelope| {
            StoredRecord::from_signed(&envelope, &key.public_key())
                .map_err(|e| Failure::halted(format!("{}: {e}", path.display())))
        })?;
    if signed.digest() != stored.digest() {
        return Err(Failure::halted(format!(
            "export: {} signs record {}, but {} holds record {}; the record was replaced \
             after it was signed: restore it, or accept again with the key once you trust \
             the evidence (see SECURITY.md)",
            path.display(),
            signed.digest(),
            state.acceptance_path().display(),
            stored.digest()
        )));
    }
    Ok(())
}

/// `kleene export OUT.tar`.
pub fn export_run(args: &ExportArgs, rep: &mut Reporter) -> Outcome {
    let state = StateDir::at(&args.state.state);
    let _lock = state
        .lock("export")
        .map_err(|e| Failure::halted(Chain(&e)))?;
    let key = signing_key(&args.signing, &state)?;
    let (record, snapshot) = acceptance(&state, key.as_ref())?;
    let stored = stored_record(&state, Some(&record))?;
    if let (Some(stored), Some(key)) = (&stored, &key) {
        check_record_signature(&state, stored, key)?;
    }
    match stored {
        Some(stored) if stored.digest() != record.digest() => {
            let differences = record
                .differences(&stored.to_json())
                .unwrap_or_default()
                .iter()
                .map(|d| format!("\n  {d}"))
                .collect::<String>();
            return Err(Failure::halted(format!(
                "export: the evidence no longer matches the acceptance record in {} \
                 (recorded {}, now {}):{differences}\n\
                 the evidence changed after it was accepted. If you did not change it \
                 (by resuming or re-running), something else wrote the state directory: \
                 do not accept again before you know what (see SECURITY.md); if you did, \
                 run kleene accept again",
                state.acceptance_path().display(),
                stored.digest(),
                record.digest()
            )));
        }
        Some(_) => {}
        None => {
            write_atomic(&state.acceptance_path(), record.to_json().as_bytes())
                .map_err(|e| Failure::halted(Chain(&e)))?;
            if let Some(key) = &key {
                write_atomic(
                    &record_envelope_path(&state),
                    record.sign(key).to_json().as_bytes(),
                )
                .map_err(|e| Failure::halted(Chain(&e)))?;
            }
        }
    }
    let archive = export(&record, &snapshot).map_err(|e| Failure::halted(Chain(&e)))?;
    write_atomic(&args.out, archive.as_bytes()).map_err(|e| Failure::halted(Chain(&e)))?;
    let signature = statement_envelope_path(&args.out);
    if let Some(key) = &key {
        let line = format!("{}\n", archive.verified().signed_statement(key).to_json());
        write_atomic(&signature, line.as_bytes()).map_err(|e| Failure::halted(Chain(&e)))?;
    }
    let key_id = key.as_ref().map(|k| k.public_key().key_id());
    if rep.mode() == crate::report::Mode::Json {
        rep.say_json(&serde_json::json!({
            "event": "exported",
            "archive": args.out,
            "record_digest": record.digest().to_string(),
            "files": record.files().entries().len(),
            "signature": key_id.as_ref().map(|_| &signature),
            "key_id": key_id,
        }));
    } else {
        let check = match &key_id {
            Some(id) => format!(
                "signed statement {} (key {id}); check it with kleene verify {} --public-key \
                 PUBLIC_KEY_FILE",
                signature.display(),
                args.out.display()
            ),
            None => format!(
                "check it with kleene verify {} --state {}",
                args.out.display(),
                state.root().display()
            ),
        };
        rep.say(&format!(
            "exported {} files to {} (record {}); {check}",
            record.files().entries().len(),
            args.out.display(),
            record.digest(),
        ));
    }
    Ok(Exit::Ok)
}

/// The acceptance record stored in `state`, if there is one, with every digest of its body
/// recomputed. A record that does not hold together is refused naming what is wrong; with
/// the record the evidence gives (`expected`), also every field, task and file that differs.
fn stored_record(
    state: &StateDir,
    expected: Option<&AcceptanceRecord>,
) -> Result<Option<StoredRecord>, Failure> {
    let path = state.acceptance_path();
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Failure::bad_input(format!("read {}: {e}", path.display()))),
    };
    StoredRecord::from_json(&text).map(Some).map_err(|err| {
        let differences = expected
            .and_then(|r| r.differences(&text).ok())
            .map(|ds| {
                let lines: String = ds.iter().map(|d| format!("\n  {d}")).collect();
                if lines.is_empty() {
                    String::new()
                } else {
                    format!("\nit differs from the record the evidence gives in:{lines}")
                }
            })
            .unwrap_or_default();
        Failure::bad_input(format!(
            "{}: {err}{differences}\nrestore the record kleene wrote; only if you trust the \
             evidence, rewrite it with kleene accept (see SECURITY.md)",
            path.display()
        ))
    })
}

/// `kleene verify ARCHIVE`.
pub fn verify(args: &VerifyArgs, rep: &mut Reporter) -> Outcome {
    let pinned = args
        .record
        .as_deref()
        .map(|hex| {
            Digest::from_str(hex)
                .map_err(|e| Failure::bad_input(format!("use --record {hex}: {e}")))
        })
        .transpose()?;
    let bytes = fs::read(&args.archive)
        .map_err(|e| Failure::bad_input(format!("read {}: {e}", args.archive.display())))?;
    let (verified, key_id) = match &args.public_key {
        Some(public) => verify_signed(args, public, &bytes, pinned)?,
        None => {
            let expected = match pinned {
                Some(digest) => digest,
                None => stored_record(&StateDir::at(&args.state), None)?
                    .map(|r| r.digest())
                    .ok_or_else(|| {
                        Failure::bad_input(format!(
                            "verify {}: no expected record: pass --record DIGEST, \
                             --public-key FILE, or the --state of the run (its \
                             acceptance.json)",
                            args.archive.display()
                        ))
                    })?,
            };
            let verified = verify_archive(&bytes, expected)
                .map_err(|err| archive_failure(&args.archive, &err))?;
            (verified, None)
        }
    };
    let files = verified.manifest().entries().len();
    // The state's closure log, when it is there, is checked against the closures the
    // archive's record binds: the audit trail of every accepted call.
    let state = StateDir::at(&args.state);
    if state.closure_log_path().is_file() {
        let entries = state.closure_log();
        let problems = closure_problems(&state, &entries, None, Some(verified.record()));
        if !problems.is_empty() {
            return Err(Failure::halted(format!(
                "verify {}: the archive verified, but {} closure record(s) in {} do not match \
                 its record:\n  {}",
                args.archive.display(),
                problems.len(),
                state.closure_log_path().display(),
                problems.join("\n  ")
            )));
        }
    }
    if rep.mode() == crate::report::Mode::Json {
        rep.say_json(&serde_json::json!({
            "event": "verified",
            "archive": args.archive,
            "record_digest": verified.record_digest().to_string(),
            "files": files,
            "key_id": key_id,
        }));
    } else {
        let signed = key_id
            .map(|id| format!(", signed by key {id}"))
            .unwrap_or_default();
        rep.say(&format!(
            "{}: verified {files} files against record {}{signed}",
            args.archive.display(),
            verified.record_digest()
        ));
    }
    Ok(Exit::Ok)
}

fn archive_failure(archive: &Path, err: &VerifyError) -> Failure {
    let mut lines = vec![format!("verify {}: {}", archive.display(), Chain(err))];
    for m in err.mismatches() {
        lines.push(format!("  {m}"));
    }
    Failure::halted(lines.join("\n"))
}

/// `kleene verify --public-key`: the archive against the statement signed beside it.
fn verify_signed(
    args: &VerifyArgs,
    public: &Path,
    bytes: &[u8],
    pinned: Option<Digest>,
) -> Result<(kleene::acceptance::VerifiedArchive, Option<String>), Failure> {
    let read = |path: &Path| {
        fs::read_to_string(path)
            .map_err(|e| Failure::bad_input(format!("read {}: {e}", path.display())))
    };
    let key = PublicKey::from_pem(&read(public)?)
        .map_err(|e| Failure::bad_input(format!("{}: {e}", public.display())))?;
    let signature = args
        .signature
        .clone()
        .unwrap_or_else(|| statement_envelope_path(&args.archive));
    let text = fs::read_to_string(&signature).map_err(|e| {
        Failure::bad_input(format!(
            "verify {}: read its signature {}: {e}; export with --signing-key, or pass \
             --signature FILE",
            args.archive.display(),
            signature.display()
        ))
    })?;
    let envelope = Envelope::from_json(&text)
        .map_err(|e| Failure::bad_input(format!("{}: {e}", signature.display())))?;
    let verified = verify_signed_archive(bytes, &envelope, &key).map_err(|err| match &err {
        SignedError::Archive(inner) => archive_failure(&args.archive, inner),
        other => Failure::halted(format!(
            "verify {} with {}: {}",
            args.archive.display(),
            signature.display(),
            Chain(other)
        )),
    })?;
    if let Some(pinned) = pinned
        && pinned != verified.record_digest()
    {
        return Err(Failure::halted(format!(
            "verify {}: the signed record is {}, but --record is {pinned}; check which \
                 archive and which record you meant",
            args.archive.display(),
            verified.record_digest()
        )));
    }
    Ok((verified, Some(key.key_id())))
}

/// `kleene keygen --out DIR`.
pub fn keygen(args: &KeygenArgs, rep: &mut Reporter) -> Outcome {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = &args.out;
    let secret_path = dir.join("kleene.key");
    let public_path = dir.join("kleene.pub");
    for path in [&secret_path, &public_path] {
        if fs::symlink_metadata(path).is_ok() {
            return Err(Failure::bad_input(format!(
                "keygen: {} already exists; it is never overwritten: choose another --out \
                 or remove it yourself",
                path.display()
            )));
        }
    }
    fs::create_dir_all(dir)
        .map_err(|e| Failure::bad_input(format!("create {}: {e}", dir.display())))?;
    let key = SigningKey::generate().map_err(|e| Failure::halted(Chain(&e)))?;
    let write = |path: &Path, mode: u32, text: &str| {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)
            .and_then(|mut f| {
                f.write_all(text.as_bytes())?;
                f.sync_all()
            })
            .map_err(|e| Failure::halted(format!("write {}: {e}", path.display())))
    };
    write(&secret_path, 0o600, &key.to_pem())?;
    write(&public_path, 0o644, &key.public_key().to_pem())?;
    let key_id = key.public_key().key_id();
    if rep.mode() == crate::report::Mode::Json {
        rep.say_json(&serde_json::json!({
            "event": "key_generated",
            "secret_key": secret_path,
            "public_key": public_path,
            "key_id": key_id,
        }));
    } else {
        rep.say(&format!(
            "wrote secret key {} (mode 600; keep it outside every state directory) and public \
             key {}; key id {key_id}",
            secret_path.display(),
            public_path.display()
        ));
    }
    Ok(Exit::Ok)
}

/// Every closure record of the log that is not what the journal (`evidence`) or the
/// acceptance record (`accepted`) binds, or not in the one form kleene writes, named by line.
fn closure_problems(
    state: &StateDir,
    entries: &[ClosureEntry],
    evidence: Option<&BatchEvidence>,
    accepted: Option<&StoredRecord>,
) -> Vec<String> {
    let (logged, mut problems) = read_closure_log(state, entries);
    let given = || logged.iter().map(|l| (&l.task, l.call, l.record));
    let checks = [
        evidence.map(|e| ("journal", e.verify_closures(given()))),
        accepted.map(|a| ("acceptance record", a.verify_closures(given()))),
    ];
    for (binder, checked) in checks.into_iter().flatten() {
        for m in checked.err().iter().flat_map(|e| e.mismatches()) {
            let place = closure_place(state, &logged, m);
            problems.push(format!("{place} (checked against the {binder}): {m}"));
        }
    }
    problems
}

/// `kleene audit`.
pub fn audit(args: &StateArgs, rep: &mut Reporter) -> Outcome {
    let state = StateDir::at(&args.state);
    let (_, text) = state.open().map_err(|e| Failure::bad_input(Chain(&e)))?;
    let mut entries = state.closure_log();
    // In execution order, then by call: the trail reads like the run.
    if let Ok(loaded) = stored_plan(&state, &text) {
        let rank: BTreeMap<&str, usize> = loaded
            .plan()
            .topological_order()
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i))
            .collect();
        entries.sort_by_key(|e| {
            (
                rank.get(e.task.as_str()).copied().unwrap_or(usize::MAX),
                e.call,
                e.line,
            )
        });
    }
    let log_path = state.closure_log_path();
    let mut broken = Vec::new();
    for entry in &entries {
        let place = format!("{} line {}", log_path.display(), entry.line);
        // An unreadable line is named once, with the log's other problems below.
        let Ok(record) = &entry.record else { continue };
        let log = record.audit();
        let verified = log.verify();
        if rep.mode() == crate::report::Mode::Json {
            // The outcome as the record's own JSON writes it (the record's wire form).
            let outcome = serde_json::to_value(record)
                .map(|mut r| r["outcome"].take())
                .unwrap_or_default();
            rep.say_json(&serde_json::json!({
                "event": "audit",
                "task": entry.task,
                "call": entry.call,
                "line": entry.line,
                "verified": verified.is_ok(),
                "error": verified.as_ref().err().map(ToString::to_string),
                "outcome": outcome,
                "entries": log.entries().iter().map(|e| serde_json::json!({
                    "kind": e.event().kind(),
                    "task_ref": e.event().task_ref(),
                    "hash": e.hash().to_string(),
                    "event": e.event(),
                })).collect::<Vec<_>>(),
            }));
        } else {
            rep.say(&format!(
                "{} call {}: {} entries, {}",
                entry.task,
                entry.call,
                log.len(),
                match &verified {
                    Ok(()) => format!("hash chain verified, head {}", log.head()),
                    Err(e) => format!("HASH CHAIN BROKEN: {e}"),
                }
            ));
            let width = log
                .entries()
                .iter()
                .map(|e| e.event().task_ref().as_str().len())
                .max()
                .unwrap_or(0);
            for (i, e) in log.entries().iter().enumerate() {
                let line = format!(
                    "  {i:>3} {:<18} {:<width$} {}",
                    e.event().kind(),
                    e.event().task_ref().as_str(),
                    detail(e.event())
                );
                rep.say(line.trim_end());
            }
        }
        if let Err(e) = verified {
            broken.push(format!(
                "{place} (task {} call {}): {e}",
                entry.task, entry.call
            ));
        }
    }
    if entries.is_empty() {
        rep.say("no closure records yet");
    }
    // The journal binds every settled closure, the acceptance record every accepted one.
    let key = env_journal_key(&state)?;
    let evidence = load_evidence(&state, key.as_ref()).ok().map(|(_, _, e)| e);
    let accepted = stored_record(&state, None)?;
    broken.extend(closure_problems(
        &state,
        &entries,
        evidence.as_ref(),
        accepted.as_ref(),
    ));
    if broken.is_empty() {
        Ok(Exit::Ok)
    } else {
        Err(Failure::halted(format!(
            "audit: {} record(s) failed verification:\n  {}",
            broken.len(),
            broken.join("\n  ")
        )))
    }
}
