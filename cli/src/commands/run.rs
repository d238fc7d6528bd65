//! `kleene run` and `kleene resume`: a pass of the plan's batch over the state directory,
//! and the workspace projected from what it accepted.

use std::collections::BTreeMap;
use std::fs;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kleene::batch::cache::FileCache;
use kleene::batch::{
    BatchError, BatchErrorKind, BatchEvidence, ClosureWorker, FileJournal, TaskStatus,
    journal::EvidenceJournal,
};
use kleene::{
    ValidatedPlan,
    closure::{RecoveryPolicy, step::RecoverOn, step::Session},
    id::ChannelId,
};

use crate::cli::{CacheArgs, Exit, ResumeArgs, RunArgs, SandboxSwitch, SigningArgs, jobs};
use crate::formats::RunInfo;
use crate::observer::Observer;
use crate::report::{Event, Reporter, failure_reason, report_event};
use crate::state::StateDir;
use kleene::batch::JournalKey;
use kleene::error::Chain;
use kleene::process::{self, Containment, GroupRecords, Interrupt, sandbox};
use kleene::shell::{ShellPlan, ShellRuntime, counted, describe_changes, merges};

use super::{
    Failure, Outcome, absolute, check_copies, journal_key, read_journal, read_plan, signing_key,
    stored_plan,
};

/// `kleene run PLAN`.
pub fn run(args: &RunArgs, mut rep: Reporter) -> Outcome {
    if let Some(url) = &args.restate {
        return crate::restate::run(args, url);
    }
    // Every run with a task needs a host, and starting one (three programs) takes longer
    // than reading the plan: the first starts now, the rest once the plan says how many.
    process::start_hosts(1);
    // The run's own directories are never plan files, wherever they are.
    let mut skip = vec![args.state.state.clone()];
    skip.extend(args.workspace.iter().cloned());
    let (loaded, text) = read_plan(&args.plan, &skip)?;
    start_hosts(args.jobs, &loaded);
    // A merged task would otherwise vanish from the run without a word. On stderr, so
    // stdout keeps exactly its events; `kleene validate --json` reports merges as data.
    if rep.mode() != crate::report::Mode::Json {
        for merge in merges(loaded.plan()) {
            eprintln!("kleene: note: {merge}");
        }
        if let Some(line) = loaded.files().and_then(super::plan::bound_files) {
            eprintln!("kleene: the plan {line}");
        }
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err(Failure::bad_input(format!(
            "use --timeout {}: it must be a positive number of seconds",
            args.timeout
        )));
    }
    let cache = cache_dir(&args.cache, &args.state.state)?;
    let state = StateDir::at(&args.state.state);
    if !args.restart
        && let Some(channel) = replace_finished(&state, &args.signing)?
    {
        rep.say(&format!(
            "replaced the finished run on channel {channel} in {}",
            state.root().display()
        ));
    }
    if args.restart
        && let Some(aside) = set_aside(&state)?
    {
        // Every restart keeps one more directory; say where it went and how to remove it,
        // so the old runs do not pile up unseen.
        rep.say(&format!(
            "set the earlier run aside in {} (kept for inspection; remove it with rm -rf {})",
            aside.display(),
            shell_word(&aside.to_string_lossy())
        ));
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
        cache,
        confine: args.sandbox.sandbox == SandboxSwitch::On,
    };
    execute(&state, &info, &loaded, pass, &args.signing, rep)
}

/// The cache directory a run uses (made if missing), unless caching is off: one that
/// cannot be a directory is the user's to fix, said once, before anything is written.
fn cache_dir(args: &CacheArgs, state: &Path) -> Result<Option<PathBuf>, Failure> {
    let Some(dir) = args.dir(state) else {
        return Ok(None);
    };
    fs::create_dir_all(&dir).map_err(|e| {
        Failure::bad_input(format!(
            "use --cache DIR (or KLEENE_CACHE) naming a directory: {} cannot be one: {e}",
            dir.display()
        ))
    })?;
    Ok(Some(dir))
}

/// Removes the state directory's run when it is finished (every task accepted, failed or
/// drained, nothing in flight): `kleene run` is the everyday command, and a finished run's
/// accepted results live on in the cache. Returns its channel; `None` when there was no run.
/// A run that is not finished is left for `resume` (or `--restart`), and `create` refuses
/// it, saying so.
fn replace_finished(state: &StateDir, signing: &SigningArgs) -> Result<Option<String>, Failure> {
    let Ok((info, _)) = state.open() else {
        return Ok(None);
    };
    let key = journal_key(signing_key(signing, state)?.as_ref());
    let finished = match bound_evidence(state, &info, key.as_ref()) {
        Ok(Some(evidence)) => {
            let summary = evidence.summary();
            summary.in_flight == 0 && summary.pending == 0
        }
        // A run killed before its first record made nothing: starting over loses nothing.
        Ok(None) => true,
        // A journal that does not read is the user's to look at, never removed unseen.
        Err(_) => false,
    };
    if !finished {
        return Ok(None);
    }
    let Some(aside) = set_aside(state)? else {
        return Ok(None);
    };
    fs::remove_dir_all(&aside).map_err(|e| {
        Failure::halted(format!(
            "remove the finished run set aside in {}: {e}",
            aside.display()
        ))
    })?;
    Ok(Some(info.channel))
}

/// Moves the state directory of an earlier run aside (`STATE.old-N`), so `run --restart`
/// starts over and the old run stays there to inspect. Returns where it went, or `None`
/// when there was no earlier run.
fn set_aside(state: &StateDir) -> Result<Option<PathBuf>, Failure> {
    let root = state.root();
    if fs::symlink_metadata(root).is_err() {
        return Ok(None);
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
        return match fs::rename(root, &aside) {
            Ok(()) => Ok(Some(aside)),
            Err(e) => Err(Failure::halted(format!(
                "move {} aside to {}: {e}",
                root.display(),
                aside.display()
            ))),
        };
    }
    Err(Failure::halted(format!(
        "move {} aside: {name}.old-1 to {name}.old-999 all exist; remove some",
        root.display()
    )))
}

/// `path` as one word of a POSIX shell command: as it is when it holds only characters no
/// shell treats specially, otherwise in single quotes. The `rm -rf` line is meant to be
/// pasted, and a path with a space split in two would remove something else.
fn shell_word(path: &str) -> String {
    // `rm -rf -x.old-1` would read the path as options.
    if path.starts_with('-') {
        return shell_word(&format!("./{path}"));
    }
    let plain = !path.is_empty()
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+,:@%".contains(&b));
    if plain {
        path.to_owned()
    } else {
        format!("'{}'", path.replace('\'', "'\\''"))
    }
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

/// Starts the hosts the run's calls will need (one per slot) while the run prepares.
fn start_hosts(given: Option<NonZeroUsize>, loaded: &ShellPlan) {
    process::start_hosts(jobs(given).get().min(loaded.plan().len()));
}

/// `kleene resume`.
pub fn resume(args: &ResumeArgs, rep: Reporter) -> Outcome {
    // As in `run`: the first host starts while the state is read.
    process::start_hosts(1);
    let state = StateDir::at(&args.state.state);
    let _lock = state
        .lock("resume")
        .map_err(|e| Failure::halted(Chain(&e)))?;
    let (info, text) = state.open().map_err(|e| Failure::bad_input(Chain(&e)))?;
    let loaded = stored_plan(&state, &text)?;
    start_hosts(args.jobs, &loaded);
    // kleene's own copies are checked against the journal before the user's plan file is
    // compared with them: a damaged copy is named as such, not as the user's edit.
    let key = journal_key(signing_key(&args.signing, &state)?.as_ref());
    let mut rep = rep;
    if let Some(evidence) = bound_evidence(&state, &info, key.as_ref())? {
        check_copies(&state, &loaded, &evidence)?;
        // A file missing is one an interrupted run never wrote; one changed is named.
        for found in crate::projection::differences(&evidence, &info.workspace).changed {
            rep.say(&format!(
                "note: the workspace's {found}; it is written again from the run's record"
            ));
        }
    }
    refuse_changed_plan(&info, &loaded, &state)?;
    refuse_live_groups(&state, args.kill_stale)?;
    let pass = Pass {
        resumed: true,
        jobs: jobs(args.jobs),
        cache: cache_dir(&args.cache, &args.state.state)?,
        confine: args.sandbox.sandbox == SandboxSwitch::On,
    };
    execute(&state, &info, &loaded, pass, &args.signing, rep)
}

/// The evidence the run's journal holds so far, read without writing; `None` before its
/// first record.
fn bound_evidence(
    state: &StateDir,
    info: &RunInfo,
    key: Option<&JournalKey>,
) -> Result<Option<BatchEvidence>, Failure> {
    let channel =
        ChannelId::new(info.channel.clone()).map_err(|e| Failure::bad_input(Chain(&e)))?;
    let Some(load) = read_journal(state, key)
        .load(&channel)
        .map_err(|e| Failure::bad_input(Chain(&e)))?
    else {
        return Ok(None);
    };
    load.into_evidence()
        .map(Some)
        .map_err(|e| Failure::bad_input(Chain(&e)))
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
    let fresh = match fresh {
        Ok(fresh) => fresh,
        Err(e) => {
            return Err(Failure::bad_input(format!(
                "resume: {} no longer loads ({}), and the run started from an earlier version \
                 of it; restore it, or start over with kleene run {} --restart --state {} (the \
                 old run is kept beside it)",
                current.display(),
                Chain(&e),
                current.display(),
                state.root().display()
            )));
        }
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
#[derive(Debug, Clone)]
struct Pass {
    resumed: bool,
    jobs: NonZeroUsize,
    /// The cache of accepted results, unless caching is off.
    cache: Option<PathBuf>,
    /// Whether commands run confined.
    confine: bool,
}

fn execute(
    state: &StateDir,
    info: &RunInfo,
    loaded: &ShellPlan,
    pass: Pass,
    signing: &SigningArgs,
    mut rep: Reporter,
) -> Outcome {
    let Pass {
        resumed,
        jobs,
        cache,
        confine,
    } = pass;
    let signing_key = signing_key(signing, state)?;
    let journal_key = journal_key(signing_key.as_ref());
    let channel = ChannelId::new(info.channel.clone()).map_err(|e| {
        Failure::bad_input(format!("read channel of {}: {e}", state.root().display()))
    })?;
    let interrupt = Interrupt::install()
        .map_err(|e| Failure::halted(format!("install the SIGINT/SIGTERM handler: {e}")))?;
    // What stages an earlier kleene left hold nothing anyone needs: their calls were never
    // settled, and a resume makes them again in fresh stages.
    warn_unremoved(&mut rep, remove_stages(state), "an earlier kleene left");
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
        .confining_commands(confine)
        .with_plan_dir(&plan_dir)
        .with_default_timeout(Duration::from_secs_f64(info.timeout_secs))
        .with_interrupt(interrupt.clone())
        .with_group_records(GroupRecords::new(state.running_dir()))
        .with_observer(observer)
        .leaving_last_stages();
    let plan = loaded.plan();
    let report = || rep.lock().unwrap_or_else(PoisonError::into_inner);
    let sandbox = match (confine, sandbox::mode()) {
        (false, _) => "off",
        (true, mode) => mode.as_str(),
    };
    report().emit(&Event::RunStarted {
        channel: info.channel.clone(),
        tasks: plan.len(),
        resumed,
        sandbox: sandbox.to_owned(),
    });
    if confine && sandbox::mode() == sandbox::Mode::Unavailable {
        report().say(
            "warning: this kernel has no Landlock, so commands run unconfined: they can write \
             anywhere you can, the state directory and its journal included (SECURITY.md)",
        );
    }
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
    // next command runs (which starts its shell while the sync is under way, held until it
    // returns), and an unsynced settlement is only ever replayed (allow), never lost.
    // A task's `accepted` is printed only once the journal holds it durably: a full disk
    // or a crash must not take back a line already printed.
    let mut batch = loaded
        .batch(channel)
        .with_group_commit(true)
        .with_durable_observation(true)
        .with_recovery(info.batch_recovery);
    if let Some(dir) = cache {
        let keys = loaded.clone();
        // With a signing key, every entry is sealed by a MAC derived from it: an entry
        // written by anyone without the key is refused, never reused.
        let cache = match &signing_key {
            Some(key) => FileCache::new(dir).with_mac_key(key.cache_mac_key()),
            None => FileCache::new(dir),
        };
        batch = batch
            .with_cache(Arc::new(cache))
            .with_action_keys(move |task| keys.action_key_parts(&task.id));
    }
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
             {} at byte {} ({})",
            counted(torn.discarded, "byte", "bytes"),
            torn.offset,
            torn.cause
        ));
    }
    // The stages the last calls handed on, which nothing a command started writes into any
    // more: a directory of accepted files is moved from there whole (writing each file again,
    // then removing the stage, costs about twice what the command did).
    let stages = runtime.quiet_last_stages();
    // The runtime's observer holds the reporter too.
    drop(runtime);
    let mut rep = Arc::try_unwrap(rep)
        .map(|rep| rep.into_inner().unwrap_or_else(PoisonError::into_inner))
        .map_err(|_| Failure::halted("finish the run: its reporter is still in use"))?;
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(err) => {
            warn_unremoved(&mut rep, remove_stages(state), "of this run");
            return Err(stopped(
                err,
                state,
                &info.channel,
                journal_key.as_ref(),
                &mut rep,
            ));
        }
    };
    // A cache gone bad warns once a task: the first few say what, the rest are counted.
    const SHOWN: usize = 5;
    for warning in outcome.cache_warnings.iter().take(SHOWN) {
        rep.say(&format!("warning: {warning}"));
    }
    if let Some(more) = outcome
        .cache_warnings
        .len()
        .checked_sub(SHOWN)
        .filter(|&n| n > 0)
    {
        rep.say(&format!(
            "warning: and {} of the cache like them; kleene cache --prune removes what does not read back",
            counted(more as u64, "more warning", "more warnings")
        ));
    }
    // A reused output's audit trail is the record of the call that made it: the closure
    // log keeps it under that call, as the evidence binds it, for audit and accept.
    for (task, record) in &outcome.reused_closures {
        let Some(from) = outcome.evidence.reused_from(task) else {
            continue;
        };
        if let Err(e) = state.append_closure_text(task, from.call, record) {
            rep.say(&format!(
                "warning: failed to keep the closure record of reused task {task}: {}",
                Chain(&e)
            ));
        }
    }
    if let Err(message) = crate::projection::project(&outcome.evidence, &info.workspace, &stages) {
        rep.say(&format!(
            "warning: failed to write the workspace: {message}"
        ));
    }
    warn_unremoved(&mut rep, remove_stages(state), "of this run");
    finish(plan, &outcome.evidence, state, &mut rep)
}

/// Removes every stage in the state directory; says why each that could not be, went.
fn remove_stages(state: &StateDir) -> Vec<String> {
    let Ok(entries) = fs::read_dir(state.stages_dir()) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| kleene::stage::remove_stage(&entry.path()).err())
        .map(|e| Chain(&e).to_string())
        .collect()
}

/// Says which stages (`whose`) could not be removed, and why.
fn warn_unremoved(rep: &mut Reporter, failed: Vec<String>, whose: &str) {
    for why in failed {
        rep.say(&format!("warning: failed to remove a stage {whose}: {why}"));
    }
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
    let reused = evidence.reused().count();
    if reused > 0 {
        let tasks = counted(reused as u64, "task", "tasks");
        rep.say(&format!(
            "{tasks} up to date: accepted results of earlier runs reused, no call made"
        ));
    }
    rep.emit(&Event::RunFinished {
        outcome: if complete { "accepted" } else { "halted" }.to_owned(),
        accepted: summary.accepted,
        failed: summary.failed,
        drained: summary.drained,
    });
    let dir = state.root().display();
    if complete {
        // "all 1 task accepted" reads wrong.
        let accepted = match summary.accepted {
            1 => "1 task accepted".to_owned(),
            n => format!("all {n} tasks accepted"),
        };
        rep.say(&format!("{accepted}; next: kleene accept --state {dir}"));
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

#[cfg(test)]
mod tests {
    use super::shell_word;

    #[test]
    fn a_path_to_remove_is_one_shell_word() {
        assert_eq!(shell_word("st.old-1"), "st.old-1");
        assert_eq!(shell_word("/tmp/a b/st.old-2"), "'/tmp/a b/st.old-2'");
        assert_eq!(shell_word("it's.old-1"), "'it'\\''s.old-1'");
        assert_eq!(shell_word("-x.old-1"), "./-x.old-1");
        assert_eq!(shell_word("$HOME.old-1"), "'$HOME.old-1'");
    }
}
