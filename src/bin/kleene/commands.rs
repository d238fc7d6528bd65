//! One function per command. Each returns the process's [`Exit`] or a [`Failure`] to print.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::str::FromStr;
use std::time::Duration;

use kleene::batch::{
    Batch, BatchError, BatchEvidence, EvidenceJournal, FileJournal, RecoveryRequest,
    TaskBatchRecovery, TaskStatus,
};
use kleene::{
    AuditEvent, BuildBinding, ChannelId, ClosureFailure, Digest, FixBudget, GovernanceDecision,
    RecoverOn, RecoveryPolicy, Session, Snapshot, TaskId, ValidatedPlan, accept, export,
    verify_archive,
};

use crate::cli::{Exit, ExportArgs, GraphArgs, PlanArgs, RunArgs, StateArgs, VerifyArgs};
use crate::planfile::{self, LoadedPlan};
use crate::report::{Event, Reporter};
use crate::runner::Interrupt;
use crate::state::{RunInfo, StateDir, write_atomic};
use crate::worker::{Context, HaltContract, Shared, ShellWorker};

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

type Outcome = Result<Exit, Failure>;

fn absolute(path: &Path) -> Result<PathBuf, Failure> {
    std::path::absolute(path)
        .map_err(|e| Failure::bad_input(format!("resolve {}: {e}", path.display())))
}

/// `kleene validate PLAN`.
pub fn validate(args: &PlanArgs, rep: &mut Reporter) -> Outcome {
    let (loaded, _) = planfile::load(&args.plan).map_err(Failure::bad_input)?;
    let plan = &loaded.plan;
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
                    "has_commands": loaded.commands.contains_key(&t.id),
                })
            })
            .collect();
        rep.say_json(&serde_json::json!({
            "event": "plan_valid",
            "file": args.plan,
            "digest": plan.digest().to_string(),
            "tasks": tasks,
        }));
        return Ok(Exit::Ok);
    }
    rep.say(&format!(
        "{} is valid: {} tasks, plan digest {}",
        args.plan.display(),
        plan.len(),
        plan.digest()
    ));
    for (i, t) in plan.tasks().enumerate() {
        let commands = match loaded.commands.get(&t.id) {
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
    Ok(Exit::Ok)
}

/// `kleene graph PLAN [--out BASE]`.
pub fn graph(args: &GraphArgs, rep: &mut Reporter) -> Outcome {
    let (loaded, _) = planfile::load(&args.plan).map_err(Failure::bad_input)?;
    let dot = loaded.plan.to_dot();
    let Some(base) = &args.out else {
        print!("{dot}");
        return Ok(Exit::Ok);
    };
    let dot_path = base.with_extension("dot");
    write_atomic(&dot_path, dot.as_bytes()).map_err(Failure::bad_input)?;
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

/// `kleene run PLAN`.
pub fn run(args: &RunArgs, rep: Reporter) -> Outcome {
    let (loaded, text) = planfile::load(&args.plan).map_err(Failure::bad_input)?;
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err(Failure::bad_input(format!(
            "use --timeout {}: it must be a positive number of seconds",
            args.timeout
        )));
    }
    let state = StateDir::at(&args.state.state);
    let workspace = match &args.workspace {
        Some(w) => absolute(w)?,
        None => absolute(&state.default_workspace())?,
    };
    let channel = match &args.channel {
        Some(c) => ChannelId::new(c.clone())
            .map_err(|e| Failure::bad_input(format!("use --channel {c:?}: {e}")))?,
        None => {
            let digest = loaded.plan.digest().to_string();
            ChannelId::new(format!("run-{}", &digest[..digest.len().min(12)]))
                .map_err(|e| Failure::bad_input(format!("derive a channel id: {e}")))?
        }
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
    state.create(&info, &text).map_err(Failure::bad_input)?;
    execute(&state, &info, &loaded, &text, false, rep)
}

/// `kleene resume`.
pub fn resume(args: &StateArgs, rep: Reporter) -> Outcome {
    let state = StateDir::at(&args.state);
    let (info, text) = state.open().map_err(Failure::bad_input)?;
    let loaded = planfile::load_text(&state.plan_path(), &text).map_err(Failure::bad_input)?;
    execute(&state, &info, &loaded, &text, true, rep)
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

/// Fix attempts already spent by earlier calls of this run (for a resume).
fn spent_fixes(state: &StateDir) -> u32 {
    state
        .closure_log()
        .into_iter()
        .filter_map(|e| e.record.ok())
        .map(|r| r.fix_attempts())
        .sum()
}

fn execute(
    state: &StateDir,
    info: &RunInfo,
    loaded: &LoadedPlan,
    plan_text: &str,
    resumed: bool,
    rep: Reporter,
) -> Outcome {
    let plan = &loaded.plan;
    let channel = ChannelId::new(info.channel.clone()).map_err(|e| {
        Failure::bad_input(format!("read channel of {}: {e}", state.root().display()))
    })?;
    let interrupt = Interrupt::install()
        .map_err(|e| Failure::halted(format!("install the SIGINT/SIGTERM handler: {e}")))?;
    let spent = if resumed { spent_fixes(state) } else { 0 };
    let budget = FixBudget::restore(info.max_fixes, spent.min(info.max_fixes))
        .map_err(|e| Failure::bad_input(format!("restore the fix budget: {e}")))?;
    let ctx = Context {
        workspace: info.workspace.clone(),
        plan_dir: info.plan_dir.clone(),
        commands: loaded.commands.clone(),
        default_timeout: Duration::from_secs_f64(info.timeout_secs),
        policy: policy(info, info.max_depth)?,
        no_fix_policy: policy(info, 0)?,
        budget,
        session: Session::new("kleene-run", info.channel.clone())
            .map_err(|e| Failure::bad_input(format!("open a session: {e}")))?,
        state: state.clone(),
        interrupt: interrupt.clone(),
    };
    fs::create_dir_all(&ctx.workspace)
        .map_err(|e| Failure::halted(format!("create {}: {e}", ctx.workspace.display())))?;
    let shared = Shared::new(rep);
    shared.borrow_mut().emit(&Event::RunStarted {
        channel: info.channel.clone(),
        tasks: plan.len(),
        resumed,
    });
    let mut worker = ShellWorker::new(&ctx, Rc::clone(&shared));
    let contract = HaltContract {
        shared: Rc::clone(&shared),
    };
    let mut journal = FileJournal::open(state.journal_dir())
        .map_err(|e| Failure::halted(format!("open the journal: {e}")))?;
    // Group commit: one sync per task instead of two; every event is still durable before the
    // next command runs, and an unsynced settlement is only ever replayed (allow), never lost.
    let mut batch = Batch::new(plan, channel.clone())
        .with_input("plan file", plan_text.as_bytes())
        .with_group_commit(true);
    if info.batch_recovery {
        batch = batch.with_recovery(TaskBatchRecovery::new());
    }
    let result = if resumed {
        batch.resume(&mut worker, &contract, &mut journal)
    } else {
        batch.dispatch(&mut worker, &contract, &mut journal)
    };
    let mut evidence = match result {
        Ok(evidence) => evidence,
        Err(err) => return Err(stopped(err, state, &info.channel, &shared)),
    };
    if info.batch_recovery {
        let roots: Vec<TaskId> = evidence.recovery_roots().cloned().collect();
        if !roots.is_empty() {
            let request = RecoveryRequest::for_roots(&evidence, roots);
            shared.borrow_mut().reporter.say(&format!(
                "batch recovery: one corrective call for {}",
                request
                    .roots()
                    .iter()
                    .map(TaskId::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            match batch.recover(&request, &mut worker, &contract, &mut journal) {
                Ok(outcome) => {
                    for (task, reason) in &outcome.refused {
                        shared
                            .borrow_mut()
                            .reporter
                            .say(&format!("batch recovery refused {task}: {reason}"));
                    }
                    evidence = outcome.evidence;
                }
                Err(err) => return Err(stopped(err, state, &info.channel, &shared)),
            }
        }
    }
    drop(worker);
    drop(contract);
    let mut shared = Rc::try_unwrap(shared)
        .map(RefCell::into_inner)
        .map_err(|_| Failure::halted("finish the run: its reporter is still in use"))?;
    finish(plan, &evidence, state, &mut shared)
}

/// Reports the tasks the worker never saw (drained) and the run's outcome.
fn finish(
    plan: &ValidatedPlan,
    evidence: &BatchEvidence,
    state: &StateDir,
    shared: &mut Shared,
) -> Outcome {
    for id in plan.topological_order() {
        match evidence.status(id) {
            TaskStatus::Drained { blocked_by } => shared.emit(&Event::TaskDrained {
                task: id.to_string(),
                blocked_by: blocked_by.to_string(),
            }),
            // Refused by the built-in ownership check, which runs before (and instead of)
            // the output contract that reports the other outcomes as they happen.
            TaskStatus::Failed if !shared.reported.contains(id) => {
                shared.emit(&Event::TaskFailed {
                    task: id.to_string(),
                    reason: failure_reason(evidence, id),
                });
            }
            _ => {}
        }
    }
    let rep = &mut shared.reporter;
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
            if evidence.status(id) == TaskStatus::Failed {
                rep.say(&format!("{id} failed: {}", failure_reason(evidence, id)));
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
    shared: &Rc<RefCell<Shared>>,
) -> Failure {
    let dir = state.root().display();
    if err.is_cancelled() {
        // The journal holds everything settled before the interrupt (and the reservation).
        let summary = FileJournal::open(state.journal_dir())
            .ok()
            .zip(ChannelId::new(channel).ok())
            .and_then(|(journal, channel)| journal.load(&channel).ok().flatten())
            .and_then(|load| load.into_evidence().ok())
            .map(|evidence| evidence.summary());
        shared.borrow_mut().emit(&Event::RunFinished {
            outcome: "interrupted".to_owned(),
            accepted: summary.as_ref().map_or(0, |s| s.accepted),
            failed: summary.as_ref().map_or(0, |s| s.failed),
            drained: summary.as_ref().map_or(0, |s| s.drained),
        });
        return Failure {
            exit: Exit::Interrupted,
            message: format!("{err}; continue with kleene resume --state {dir}"),
        };
    }
    let exit = match err {
        BatchError::Journal(_) | BatchError::Fold { .. } => Exit::Halted,
        BatchError::PendingTurnBlocked { .. } => Exit::Halted,
        _ => Exit::BadInput,
    };
    Failure {
        exit,
        message: err.to_string(),
    }
}

/// Why a failed task failed, in one line.
fn failure_reason(evidence: &BatchEvidence, id: &TaskId) -> String {
    let Some(task) = evidence.task(id) else {
        return "not in the batch".to_owned();
    };
    if let Some((call, failure)) = task.infrastructure_failure() {
        return format!("infrastructure failure on call {call}: {failure}");
    }
    match (task.rejections().last(), task.interrupted_attempts().last()) {
        (Some(rejected), _) => format!(
            "call {} rejected: {}",
            rejected.attempt(),
            rejected
                .rejection()
                .to_string()
                .lines()
                .next()
                .unwrap_or_default()
        ),
        (None, Some(call)) => format!(
            "call {call} was interrupted and its {} call(s) (retry_limit + 1) are spent",
            task.budget()
        ),
        (None, None) => format!("failed after {} call(s)", task.calls()),
    }
}

fn load_evidence(state: &StateDir) -> Result<(RunInfo, LoadedPlan, BatchEvidence), Failure> {
    let (info, text) = state.open().map_err(Failure::bad_input)?;
    let loaded = planfile::load_text(&state.plan_path(), &text).map_err(Failure::bad_input)?;
    let channel = ChannelId::new(info.channel.clone()).map_err(Failure::bad_input)?;
    let journal = FileJournal::open(state.journal_dir()).map_err(Failure::bad_input)?;
    let load = journal
        .load(&channel)
        .map_err(Failure::bad_input)?
        .ok_or_else(|| {
            Failure::bad_input(format!(
                "read evidence in {}: channel {channel} has no journal yet",
                state.root().display()
            ))
        })?;
    let evidence = load.into_evidence().map_err(Failure::bad_input)?;
    Ok((info, loaded, evidence))
}

fn status_word(status: &TaskStatus) -> String {
    match status {
        TaskStatus::Accepted => "accepted".to_owned(),
        TaskStatus::Failed => "failed".to_owned(),
        TaskStatus::Drained { .. } => "drained".to_owned(),
        TaskStatus::InFlight { attempt } => format!("in flight (call {attempt})"),
        TaskStatus::Pending => "pending".to_owned(),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// `kleene status`.
pub fn status(args: &StateArgs, rep: &mut Reporter) -> Outcome {
    let state = StateDir::at(&args.state);
    let (info, loaded, evidence) = load_evidence(&state)?;
    let summary = evidence.summary();
    let mut fixes: BTreeMap<String, u32> = BTreeMap::new();
    for entry in state.closure_log() {
        if let Ok(record) = entry.record {
            *fixes.entry(entry.task).or_default() += record.fix_attempts();
        }
    }
    let mut rows = Vec::new();
    for id in loaded.plan.topological_order() {
        let status = evidence.status(id);
        let calls = evidence.task(id).map_or(0, |t| t.calls());
        let fixes = fixes.get(id.as_str()).copied().unwrap_or(0);
        let why = match &status {
            TaskStatus::Failed => Some(failure_reason(&evidence, id)),
            TaskStatus::Drained { blocked_by } => Some(format!("prerequisite {blocked_by} failed")),
            TaskStatus::InFlight { .. } => Some("interrupted; kleene resume replays it".to_owned()),
            _ => None,
        };
        rows.push((id.clone(), status_word(&status), calls, fixes, why));
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
            let calls = match calls {
                1 => "1 call".to_owned(),
                n => format!("{n} calls"),
            };
            let fixes = match fixes {
                0 => String::new(),
                1 => ", 1 fix".to_owned(),
                n => format!(", {n} fixes"),
            };
            let why = why.as_ref().map_or(String::new(), |w| format!("  {w}"));
            rep.say(&format!(
                "  {:<width$}  {status:<status_width$} {:>15}{why}",
                id.as_str(),
                format!("{calls}{fixes}")
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
fn acceptance(state: &StateDir) -> Result<(kleene::AcceptanceRecord, Snapshot), Failure> {
    let (_, loaded, evidence) = load_evidence(state)?;
    let snapshot = Snapshot::from_evidence(&evidence).map_err(Failure::halted)?;
    let binding = BuildBinding::new(
        evidence.channel().clone(),
        loaded.plan.digest(),
        evidence.evidence_version(),
    );
    let record = accept(&loaded.plan, &evidence, &snapshot, &binding).map_err(|err| {
        let problems: Vec<String> = err.problems().iter().map(|p| format!("  {p}")).collect();
        Failure::halted(format!(
            "accept the build: {} problem(s):\n{}",
            problems.len(),
            problems.join("\n")
        ))
    })?;
    Ok((record, snapshot))
}

/// `kleene accept`.
pub fn accept_run(args: &StateArgs, rep: &mut Reporter) -> Outcome {
    let state = StateDir::at(&args.state);
    let (record, _) = acceptance(&state)?;
    let path = state.acceptance_path();
    write_atomic(&path, record.to_json().as_bytes()).map_err(Failure::halted)?;
    if rep.mode() == crate::report::Mode::Json {
        rep.say_json(&serde_json::json!({
            "event": "accepted",
            "record": path,
            "record_digest": record.digest().to_string(),
            "files": record.files().entries().len(),
        }));
    } else {
        rep.say(&format!(
            "accepted {} files; record {} written to {}",
            record.files().entries().len(),
            record.digest(),
            path.display()
        ));
    }
    Ok(Exit::Ok)
}

/// `kleene export OUT.tar`.
pub fn export_run(args: &ExportArgs, rep: &mut Reporter) -> Outcome {
    let state = StateDir::at(&args.state.state);
    let (record, snapshot) = acceptance(&state)?;
    if let Some(stored) = stored_record_digest(&state)? {
        if stored != record.digest() {
            return Err(Failure::halted(format!(
                "export: the evidence no longer matches the acceptance record in {} \
                 (recorded {stored}, now {}); run kleene accept again",
                state.acceptance_path().display(),
                record.digest()
            )));
        }
    } else {
        write_atomic(&state.acceptance_path(), record.to_json().as_bytes())
            .map_err(Failure::halted)?;
    }
    let archive = export(&record, &snapshot).map_err(Failure::halted)?;
    write_atomic(&args.out, archive.as_bytes()).map_err(Failure::halted)?;
    if rep.mode() == crate::report::Mode::Json {
        rep.say_json(&serde_json::json!({
            "event": "exported",
            "archive": args.out,
            "record_digest": record.digest().to_string(),
            "files": record.files().entries().len(),
        }));
    } else {
        rep.say(&format!(
            "exported {} files to {} (record {}); check it with kleene verify {} --state {}",
            record.files().entries().len(),
            args.out.display(),
            record.digest(),
            args.out.display(),
            state.root().display()
        ));
    }
    Ok(Exit::Ok)
}

fn stored_record_digest(state: &StateDir) -> Result<Option<Digest>, Failure> {
    let path = state.acceptance_path();
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Failure::bad_input(format!("read {}: {e}", path.display()))),
    };
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Failure::bad_input(format!("read {}: {e}", path.display())))?;
    let digest = value
        .get("record_digest")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| Failure::bad_input(format!("read {}: no record_digest", path.display())))?;
    Digest::from_str(digest)
        .map(Some)
        .map_err(|e| Failure::bad_input(format!("read {}: record_digest: {e}", path.display())))
}

/// `kleene verify ARCHIVE`.
pub fn verify(args: &VerifyArgs, rep: &mut Reporter) -> Outcome {
    let expected = match &args.record {
        Some(hex) => Digest::from_str(hex)
            .map_err(|e| Failure::bad_input(format!("use --record {hex}: {e}")))?,
        None => stored_record_digest(&StateDir::at(&args.state))?.ok_or_else(|| {
            Failure::bad_input(format!(
                "verify {}: no expected record: pass --record DIGEST or the --state of the run \
                 (its acceptance.json)",
                args.archive.display()
            ))
        })?,
    };
    let bytes = fs::read(&args.archive)
        .map_err(|e| Failure::bad_input(format!("read {}: {e}", args.archive.display())))?;
    match verify_archive(&bytes, expected) {
        Ok(verified) => {
            let files = verified.manifest().entries().len();
            if rep.mode() == crate::report::Mode::Json {
                rep.say_json(&serde_json::json!({
                    "event": "verified",
                    "archive": args.archive,
                    "record_digest": verified.record_digest().to_string(),
                    "files": files,
                }));
            } else {
                rep.say(&format!(
                    "{}: verified {files} files against record {}",
                    args.archive.display(),
                    verified.record_digest()
                ));
            }
            Ok(Exit::Ok)
        }
        Err(err) => {
            let mut lines = vec![format!("verify {}: {err}", args.archive.display())];
            for m in err.mismatches() {
                lines.push(format!("  {m}"));
            }
            Err(Failure::halted(lines.join("\n")))
        }
    }
}

fn verdict_line(verdict: &kleene::Verdict) -> String {
    let failures: Vec<String> = verdict
        .failures()
        .map(|r| format!("{} ({})", r.validator_id, r.severity))
        .collect();
    if failures.is_empty() {
        "clean".to_owned()
    } else {
        format!("failed: {}", failures.join(", "))
    }
}

/// The part of an audit event worth a glance.
fn detail(event: &AuditEvent) -> String {
    match event {
        AuditEvent::ClosureStarted { session, .. } => {
            format!("session {}/{}", session.mode(), session.project())
        }
        AuditEvent::Governed { decision, .. } => match decision {
            GovernanceDecision::Approve => "approved, token minted".to_owned(),
            GovernanceDecision::Deny { reason } => format!("denied: {reason}"),
        },
        AuditEvent::PreValidated { verdict, .. } | AuditEvent::PostValidated { verdict, .. } => {
            verdict_line(verdict)
        }
        AuditEvent::Executed { output, .. } => format!("output {output}"),
        AuditEvent::SubtaskSpawned {
            parent_ref,
            depth,
            triggering_validators,
            ..
        } => format!(
            "depth {depth}, parent {parent_ref}, triggered by {}",
            triggering_validators
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        AuditEvent::RecoveryResolved {
            depth,
            fix_attempts,
            ..
        } => format!("depth {depth}, {fix_attempts} fix attempt(s)"),
        AuditEvent::RecoveryExhausted { depth, bound, .. } => {
            format!("depth {depth}, bound {bound:?}")
        }
        AuditEvent::RecoveryStalled { depth, .. } => format!("depth {depth}, verdict repeated"),
        AuditEvent::Halted { reason, .. } => reason.halt_type().to_owned(),
        AuditEvent::Failed { failure, .. } => match failure {
            ClosureFailure::Agent { phase, message } => {
                format!("{} failed: {message}", phase.as_str())
            }
            other => format!("{other:?}"),
        },
        _ => String::new(),
    }
}

/// `kleene audit`.
pub fn audit(args: &StateArgs, rep: &mut Reporter) -> Outcome {
    let state = StateDir::at(&args.state);
    let (_, text) = state.open().map_err(Failure::bad_input)?;
    let mut entries = state.closure_log();
    // In execution order, then by call: the trail reads like the run.
    if let Ok(loaded) = planfile::load_text(&state.plan_path(), &text) {
        let rank: BTreeMap<&str, usize> = loaded
            .plan
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
        let record = match &entry.record {
            Ok(r) => r,
            Err(e) => {
                broken.push(format!(
                    "{place} (task {} call {}): unreadable: {e}",
                    entry.task, entry.call
                ));
                continue;
            }
        };
        let log = record.audit();
        let verified = log.verify();
        if rep.mode() == crate::report::Mode::Json {
            rep.say_json(&serde_json::json!({
                "event": "audit",
                "task": entry.task,
                "call": entry.call,
                "line": entry.line,
                "verified": verified.is_ok(),
                "error": verified.as_ref().err().map(ToString::to_string),
                "outcome": record.outcome(),
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
