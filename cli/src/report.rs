//! What a run tells people and machines: one event type, three renderings, and the words
//! for what the evidence and the audit trail say.
//!
//! Every step of a run is an [`Event`]; [`report_event`] makes them from the evidence events
//! a run records. On a terminal the events drive a live display (an
//! overall bar and one line per running task, fix attempts shown); otherwise each event is
//! one plain line; with `--json` each event is one JSON object per line on stdout.

use std::collections::{BTreeMap, HashMap};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use kleene::ValidatedPlan;
use kleene::batch::{
    BatchEvidence, Rejection, TaskStatus, evidence::EvidenceEvent, evidence::FailureCause,
    evidence::Settlement,
};
use kleene::shell::counted;
use kleene::{
    closure::audit::AuditEvent,
    closure::{ClosureRecord, GovernanceDecision, record::ClosureFailure, step::ExhaustedBound},
    id::{Digest, TaskId},
};
use serde::Serialize;

use crate::excerpt::{self, CheckEvidence};
use crate::formats::EVENTS_FORMAT;

/// One thing that happened during a run.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A run or resume began.
    RunStarted {
        /// The channel the evidence is bound to.
        channel: String,
        /// Tasks in the plan.
        tasks: usize,
        /// Whether this continues an interrupted run.
        resumed: bool,
        /// How commands are confined: `landlock`, `off` (`--sandbox off`) or `none` (the
        /// kernel cannot).
        sandbox: String,
    },
    /// A task's closure began (its `run` command is next).
    TaskStarted {
        /// The task.
        task: String,
        /// The batch call number for this task (1 for the first call).
        call: u32,
    },
    /// A command of a task began.
    CommandStarted {
        /// The task (or fix subtask) it runs for.
        task: String,
        /// The plan task whose call this is (`task` itself, or the root of a fix subtask).
        root_task: String,
        /// `run`, `fix` or `check <id>`.
        role: String,
        /// The command line.
        command: String,
    },
    /// A command of a task ended with an exit status (one that could not finish ends the
    /// call instead, which the task's outcome reports).
    CommandFinished {
        /// The task (or fix subtask) it ran for.
        task: String,
        /// The plan task whose call this is.
        root_task: String,
        /// `run`, `fix` or `check <id>`.
        role: String,
        /// How it ended: `exit code 0`, `killed by signal 9`.
        status: String,
    },
    /// A check withheld approval.
    CheckFailed {
        /// The task (or fix subtask).
        task: String,
        /// The plan task whose call this is.
        root_task: String,
        /// The check's id.
        check: String,
        /// Its severity.
        severity: String,
        /// How the command ended.
        status: String,
    },
    /// A fix subtask was spawned for a recoverable failure.
    FixSpawned {
        /// The root task.
        task: String,
        /// The fix subtask's id (`{task}_fix_{depth}`).
        fix: String,
        /// Its depth.
        depth: u32,
        /// The checks that triggered it.
        triggering: Vec<String>,
    },
    /// The task's output was accepted.
    TaskAccepted {
        /// The task.
        task: String,
        /// Fix subtasks it took.
        fixes: u32,
    },
    /// The task's closure halted or its output was rejected.
    TaskFailed {
        /// The task.
        task: String,
        /// Why, in one line.
        reason: String,
        /// The failed checks that halted the call's closure, each with a bounded excerpt
        /// of its output (empty when no check failed: a refused file, an infrastructure
        /// failure).
        evidence: Vec<CheckEvidence>,
    },
    /// The task was not run because a prerequisite failed.
    TaskDrained {
        /// The task.
        task: String,
        /// The failed prerequisite.
        blocked_by: String,
    },
    /// The run ended.
    RunFinished {
        /// `accepted`, `halted` or `interrupted`.
        outcome: String,
        /// Accepted tasks.
        accepted: usize,
        /// Failed tasks.
        failed: usize,
        /// Drained tasks.
        drained: usize,
    },
}

/// How events are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A live display on the terminal (stderr).
    Live,
    /// One plain line per event on stdout.
    Plain,
    /// One JSON object per event on stdout.
    Json,
}

impl Mode {
    /// JSON when asked for, live when stderr is a terminal, plain otherwise.
    pub fn detect(json: bool) -> Self {
        if json {
            Mode::Json
        } else if std::io::stderr().is_terminal() {
            Mode::Live
        } else {
            Mode::Plain
        }
    }
}

/// Renders events in one [`Mode`].
#[derive(Debug)]
pub struct Reporter {
    mode: Mode,
    live: Option<Live>,
    clock: Clock,
    /// The failed checks of each recorded closure that halted, by record digest, until the
    /// journal settles the closure: the record reaches the CLI when its call ends (from the
    /// agent), the settlement later (from the journal), and only the settlement says the
    /// task failed.
    recorded: HashMap<Digest, Vec<CheckEvidence>>,
    /// The failed checks of each task's closure the journal settled, until the call's own
    /// settlement (journaled just after) is shown.
    settled: HashMap<TaskId, Vec<CheckEvidence>>,
}

/// When the run and each running task and command began, for the durations the live display
/// and the JSON events carry. Keyed by task id: one task has at most one call in flight.
#[derive(Debug)]
struct Clock {
    run: Instant,
    tasks: HashMap<String, Instant>,
    commands: HashMap<(String, String), Instant>,
}

impl Clock {
    fn new() -> Self {
        Self {
            run: Instant::now(),
            tasks: HashMap::new(),
            commands: HashMap::new(),
        }
    }

    /// Notes what `event` starts and returns how long what it ends took.
    fn observe(&mut self, event: &Event) -> Option<Duration> {
        let now = Instant::now();
        match event {
            Event::RunStarted { .. } => {
                self.run = now;
                None
            }
            Event::TaskStarted { task, .. } => {
                self.tasks.insert(task.clone(), now);
                None
            }
            Event::CommandStarted { task, role, .. } => {
                self.commands.insert((task.clone(), role.clone()), now);
                None
            }
            Event::CommandFinished { task, role, .. } => self
                .commands
                .remove(&(task.clone(), role.clone()))
                .map(|t| now - t),
            Event::TaskAccepted { task, .. } | Event::TaskFailed { task, .. } => {
                self.tasks.remove(task).map(|t| now - t)
            }
            Event::RunFinished { .. } => Some(now - self.run),
            Event::CheckFailed { .. } | Event::FixSpawned { .. } | Event::TaskDrained { .. } => {
                None
            }
        }
    }
}

/// The live display: an overall bar and one line per running task with its elapsed time.
#[derive(Debug)]
struct Live {
    multi: MultiProgress,
    overall: ProgressBar,
    /// One line per task with a call in flight, by task id.
    running: BTreeMap<String, ProgressBar>,
    /// Tasks with an outcome: a retried task counts once.
    settled: std::collections::BTreeSet<String>,
}

impl Live {
    fn new(target: ProgressDrawTarget, tasks: usize) -> Self {
        let multi = MultiProgress::with_draw_target(target);
        let overall = multi.add(ProgressBar::new(tasks as u64));
        overall.set_style(
            // The template's noun is fixed text, so it is chosen here: `0/1 task`.
            ProgressStyle::with_template(if tasks == 1 {
                "{bar:30.cyan/blue} {pos}/{len} task {msg}"
            } else {
                "{bar:30.cyan/blue} {pos}/{len} tasks {msg}"
            })
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Self {
            multi,
            overall,
            running: BTreeMap::new(),
            settled: std::collections::BTreeSet::new(),
        }
    }

    fn show_running(&self) {
        match self.running.len() {
            0 => self.overall.set_message(""),
            n => self.overall.set_message(format!("({n} running)")),
        }
    }

    /// A line printed above the bars, attached to `task`'s line when it is running.
    fn note(&self, task: &str, line: &str) {
        match self.running.get(task) {
            Some(bar) => bar.println(format!("    {line}")),
            None => self.multi.suspend(|| println_flush(line)),
        }
    }

    fn show(&mut self, event: &Event) {
        match event {
            Event::RunStarted { .. } => {}
            Event::TaskStarted { task, .. } => {
                let bar = self.multi.add(ProgressBar::new_spinner());
                bar.set_style(
                    ProgressStyle::with_template("  {spinner} {prefix:.bold} [{elapsed}] {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar.set_prefix(task.clone());
                bar.enable_steady_tick(Duration::from_millis(100));
                if let Some(old) = self.running.insert(task.clone(), bar) {
                    old.finish_and_clear();
                    self.multi.remove(&old);
                }
                self.show_running();
            }
            Event::CommandStarted {
                root_task,
                role,
                command,
                ..
            } => {
                if let Some(bar) = self.running.get(root_task) {
                    bar.set_message(format!("{role}: {command}"));
                }
            }
            Event::CommandFinished { .. } => {}
            Event::CheckFailed { root_task, .. } => self.note(root_task, &plain(event)),
            Event::FixSpawned { task, .. } => self.note(task, &plain(event)),
            Event::TaskAccepted { task, .. }
            | Event::TaskFailed { task, .. }
            | Event::TaskDrained { task, .. } => {
                if let Some(bar) = self.running.remove(task) {
                    bar.finish_and_clear();
                    self.multi.remove(&bar);
                }
                self.settled.insert(task.clone());
                self.overall.set_position(self.settled.len() as u64);
                self.show_running();
                self.multi.suspend(|| println_flush(&plain(event)));
            }
            Event::RunFinished { outcome, .. } => {
                for (_, bar) in std::mem::take(&mut self.running) {
                    bar.finish_and_clear();
                    self.multi.remove(&bar);
                }
                if outcome == "accepted" {
                    self.overall.finish_with_message(outcome.clone());
                } else {
                    // Keep the bar where the run stopped.
                    self.overall.abandon_with_message(outcome.clone());
                }
                self.multi.suspend(|| println_flush(&plain(event)));
            }
        }
    }
}

impl Reporter {
    /// A reporter in `mode`.
    pub fn new(mode: Mode) -> Self {
        Self {
            mode,
            live: None,
            clock: Clock::new(),
            recorded: HashMap::new(),
            settled: HashMap::new(),
        }
    }

    /// Keeps the failed checks of a call's closure `record` (when it halted on some) for the
    /// line that reports the call's failure.
    pub fn note_record(&mut self, record: &ClosureRecord) {
        let evidence = excerpt::failed_checks(record);
        if !evidence.is_empty() {
            self.recorded.insert(record.digest(), evidence);
        }
    }

    /// The journal settled `task`'s closure whose record has `digest`.
    fn closure_settled(&mut self, task: &TaskId, digest: &Digest) {
        match self.recorded.remove(digest) {
            Some(evidence) => self.settled.insert(task.clone(), evidence),
            None => self.settled.remove(task),
        };
    }

    /// The failed checks of `task`'s last settled closure, taken.
    fn take_settled(&mut self, task: &TaskId) -> Vec<CheckEvidence> {
        self.settled.remove(task).unwrap_or_default()
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Shows one event.
    pub fn emit(&mut self, event: &Event) {
        let took = self.clock.observe(event);
        match self.mode {
            Mode::Json => println_flush(&self.json_line(event, took)),
            Mode::Plain => println_flush(&plain(event)),
            Mode::Live => self.live(event),
        }
    }

    /// The JSON object for `event`: its fields, when it happened (`ts`, UTC, and
    /// `elapsed_ms` since the run began) and, for what ends, how long it took
    /// (`duration_ms`).
    fn json_line(&self, event: &Event, took: Option<Duration>) -> String {
        let mut value = serde_json::to_value(event).unwrap_or_default();
        if let Some(fields) = value.as_object_mut() {
            fields.insert("format".into(), EVENTS_FORMAT.into());
            fields.insert("ts".into(), rfc3339(SystemTime::now()).into());
            fields.insert("elapsed_ms".into(), millis(self.clock.run.elapsed()).into());
            if let Some(took) = took {
                fields.insert("duration_ms".into(), millis(took).into());
            }
        }
        value.to_string()
    }

    /// A final human-readable message (the reason a run stopped, a path written); JSON
    /// mode turns it into a `message` event so stdout stays one JSON object per line.
    pub fn say(&mut self, text: &str) {
        match self.mode {
            Mode::Json => {
                let line = serde_json::json!({
                    "format": EVENTS_FORMAT,
                    "event": "message",
                    "text": text,
                    "ts": rfc3339(SystemTime::now()),
                });
                println_flush(&line.to_string());
            }
            Mode::Plain => println_flush(text),
            Mode::Live => match &self.live {
                Some(live) => live.multi.suspend(|| println_flush(text)),
                None => println_flush(text),
            },
        }
    }

    /// The `error` event a failed command ends with in JSON mode: its exit code and why.
    pub fn say_error(&mut self, exit: u8, message: &str) {
        let line = serde_json::json!({
            "format": EVENTS_FORMAT,
            "event": "error",
            "exit": exit,
            "message": message,
            "ts": rfc3339(SystemTime::now()),
        });
        println_flush(&line.to_string());
    }

    /// A result object for machines (JSON mode only prints it; the others never call it),
    /// with the events' `format`.
    pub fn say_json(&mut self, value: &serde_json::Value) {
        let mut value = value.clone();
        if let Some(fields) = value.as_object_mut() {
            fields.insert("format".into(), EVENTS_FORMAT.into());
        }
        println_flush(&value.to_string());
    }

    fn live(&mut self, event: &Event) {
        if let Event::RunStarted { tasks, .. } = event {
            self.live = Some(Live::new(ProgressDrawTarget::stderr(), *tasks));
        }
        match self.live.as_mut() {
            Some(live) => live.show(event),
            None => println_flush(&plain(event)),
        }
    }
}

/// Whole milliseconds, saturating (a run does not last 584 million years).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `t` as an RFC 3339 UTC timestamp with milliseconds: `2026-12-01T16:20:01.123Z`.
fn rfc3339(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm), in u64 since
    // the clock cannot be before the epoch here.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_millis()
    )
}

fn println_flush(line: &str) {
    let mut out = std::io::stdout().lock();
    // A closed stdout (a pipe to `head`) must not abort a run that is writing evidence.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The one-line rendering of an event.
pub fn plain(event: &Event) -> String {
    match event {
        Event::RunStarted {
            channel,
            tasks,
            resumed,
            sandbox,
        } => format!(
            "{} {} on channel {channel} ({})",
            if *resumed { "resuming" } else { "running" },
            counted(*tasks as u64, "task", "tasks"),
            match sandbox.as_str() {
                "off" => "commands unconfined: --sandbox off",
                "none" => "commands unconfined: no Landlock here",
                _ => "commands sandboxed",
            }
        ),
        Event::TaskStarted { task, call } if *call > 1 => format!("{task}: call {call}"),
        Event::TaskStarted { task, .. } => format!("{task}: started"),
        Event::CommandStarted {
            task,
            role,
            command,
            ..
        } => format!("{task}: {role}: {command}"),
        Event::CommandFinished {
            task, role, status, ..
        } => format!("{task}: {role}: {status}"),
        Event::CheckFailed {
            task,
            check,
            severity,
            status,
            ..
        } => format!("{task}: check {check} failed ({severity}, {status})"),
        Event::FixSpawned {
            task,
            fix,
            depth,
            triggering,
        } => format!(
            "{task}: spawned {fix} (depth {depth}) for {}",
            triggering.join(", ")
        ),
        Event::TaskAccepted { task, fixes: 0 } => format!("{task}: accepted"),
        Event::TaskAccepted { task, fixes: 1 } => format!("{task}: accepted after 1 fix"),
        Event::TaskAccepted { task, fixes } => format!("{task}: accepted after {fixes} fixes"),
        Event::TaskFailed {
            task,
            reason,
            evidence,
        } => {
            let mut text = format!("{task}: FAILED: {reason}");
            for line in excerpt::render_checks(evidence, "    ") {
                text.push('\n');
                text.push_str(&line);
            }
            text
        }
        Event::TaskDrained { task, blocked_by } => {
            format!("{task}: drained (prerequisite {blocked_by} failed)")
        }
        Event::RunFinished {
            outcome,
            accepted,
            failed,
            drained,
        } => format!("{outcome}: {accepted} accepted, {failed} failed, {drained} drained"),
    }
}

/// Shows what one evidence event says happened, as it is recorded.
pub fn report_event(rep: &mut Reporter, fixes: &mut BTreeMap<TaskId, u32>, event: &EvidenceEvent) {
    let failed = |rep: &mut Reporter, task: &TaskId, reason: String| {
        let evidence = rep.take_settled(task);
        rep.emit(&Event::TaskFailed {
            task: task.to_string(),
            reason,
            evidence,
        });
    };
    match event {
        EvidenceEvent::ClosureSettled { task, closure, .. } => {
            fixes.insert(task.clone(), closure.fix_attempts);
            rep.closure_settled(task, &closure.record_digest);
        }
        EvidenceEvent::Settled {
            task,
            attempt,
            settlement,
        } => match settlement {
            Settlement::Accepted { .. } => {
                rep.take_settled(task);
                rep.emit(&Event::TaskAccepted {
                    task: task.to_string(),
                    fixes: fixes.remove(task).unwrap_or(0),
                });
            }
            Settlement::Rejected { rejection, .. } => {
                let why = rejection.headline();
                failed(rep, task, format!("call {attempt} refused: {why}"));
            }
            Settlement::Infrastructure(failure) => {
                failed(rep, task, format!("infrastructure: {failure}"));
            }
            _ => {}
        },
        // A withdrawn call settled no closure, so no check evidence goes with it.
        EvidenceEvent::Withdrawn { task, detail, .. } => failed(rep, task, detail.clone()),
        EvidenceEvent::RecoveryConsumed {
            granted, refused, ..
        } => {
            if !granted.is_empty() {
                let names: Vec<&str> = granted.iter().map(TaskId::as_str).collect();
                rep.say(&format!(
                    "batch recovery: one corrective call for {}",
                    names.join(", ")
                ));
            }
            for (task, reason) in refused {
                rep.say(&format!("batch recovery refused {task}: {reason}"));
            }
        }
        _ => {}
    }
}

/// Why a failed task failed, in one line, and what to change in the plan when a file it
/// wrote was refused.
pub fn failure_reason(evidence: &BatchEvidence, plan: &ValidatedPlan, id: &TaskId) -> String {
    let Some(cause) = evidence.failure_cause(id) else {
        return "it has not failed".to_owned();
    };
    let remedy = match cause {
        FailureCause::Rejected { rejection, .. } | FailureCause::Stalled { rejection, .. } => {
            remedy(plan, rejection)
        }
        _ => None,
    };
    match remedy {
        Some(remedy) => format!("{cause}; {remedy}"),
        None => cause.to_string(),
    }
}

/// Directories that tools fill on their own (caches, build output, environments): a file
/// beneath one is scratch, not a task's output.
const TOOL_OUTPUT_DIRS: &[&str] = &[
    ".pytest_cache",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    ".tox",
    ".nox",
    ".venv",
    "venv",
    "target",
    "node_modules",
    ".gradle",
    ".cache",
    "build",
    "dist",
    ".next",
    "coverage",
];

/// What to change in the plan so a call that wrote `rejection`'s file is not refused again:
/// declare a tool's cache or build output as scratch, or own the file (or leave it to the
/// task that owns it).
pub fn remedy(plan: &ValidatedPlan, rejection: &Rejection) -> Option<String> {
    let Rejection::NotOwned { task, path } = rejection else {
        return None;
    };
    let components: Vec<&str> = path.as_str().split('/').collect();
    let tool_dir = components[..components.len().saturating_sub(1)]
        .iter()
        .position(|c| TOOL_OUTPUT_DIRS.contains(c) || c.ends_with(".egg-info"));
    if let Some(at) = tool_dir {
        let glob = if at == 0 {
            format!("{}/**", components[0])
        } else {
            format!("**/{}/**", components[at])
        };
        return Some(format!(
            "{} is a tool's cache or build output: declare it in `scratch` \
             (\"scratch\": [\"{glob}\"], for the task or the whole plan)",
            components[..=at].join("/")
        ));
    }
    Some(match plan.owner_of(path) {
        Some(owner) if owner != task => format!(
            "{path} is owned by task {owner}: leave it to that task, or move it to this \
             task's `owned_paths`"
        ),
        _ => format!(
            "add {path} (or its directory) to task {task}'s `owned_paths`, or declare it in \
             `scratch` if it is build output"
        ),
    })
}

/// One word (or a few) for a task's status; `None` is a planned task the evidence does not
/// hold.
pub fn status_word(status: Option<&TaskStatus>) -> String {
    match status {
        Some(TaskStatus::Drained { .. }) => "drained".to_owned(),
        Some(other) => other.to_string(),
        None => "not in the evidence".to_owned(),
    }
}

pub fn verdict_line(verdict: &kleene::closure::Verdict) -> String {
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
pub fn detail(event: &AuditEvent) -> String {
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
        } => format!(
            "depth {depth}, {}",
            counted(u64::from(*fix_attempts), "fix attempt", "fix attempts")
        ),
        AuditEvent::RecoveryExhausted { depth, bound, .. } => {
            format!("depth {depth}, {}", bound_text(*bound))
        }
        AuditEvent::RecoveryStalled { depth, .. } => format!("depth {depth}, verdict repeated"),
        AuditEvent::Halted { reason, .. } => reason.halt_type().to_owned(),
        AuditEvent::Failed { failure, .. } => match failure {
            ClosureFailure::Agent { phase, message } => {
                format!("{} failed: {message}", phase.as_str())
            }
            ClosureFailure::FixId { depth, message } => {
                format!("the fix at depth {depth} could not be named: {message}")
            }
            _ => "stopped by a failure this kleene does not know".to_owned(),
        },
        _ => String::new(),
    }
}

/// Which bound ran out, in words.
fn bound_text(bound: ExhaustedBound) -> String {
    match bound {
        ExhaustedBound::Depth { max } => format!("the depth bound ({max}) was reached"),
        ExhaustedBound::FixBudget { max } => format!("the fix budget ({max}) was spent"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_events_are_tagged_snake_case() {
        let e = Event::FixSpawned {
            task: "svc".into(),
            fix: "svc_fix_1".into(),
            depth: 1,
            triggering: vec!["unit-tests".into()],
        };
        let v: serde_json::Value = serde_json::to_value(&e).unwrap();
        assert_eq!(v["event"], "fix_spawned");
        assert_eq!(v["fix"], "svc_fix_1");
        assert_eq!(plain(&e), "svc: spawned svc_fix_1 (depth 1) for unit-tests");
    }

    #[test]
    fn plain_lines_count_fixes() {
        let line = |fixes| {
            plain(&Event::TaskAccepted {
                task: "t".into(),
                fixes,
            })
        };
        assert_eq!(line(0), "t: accepted");
        assert_eq!(line(1), "t: accepted after 1 fix");
        assert_eq!(line(3), "t: accepted after 3 fixes");
    }

    fn started(task: &str) -> Event {
        Event::TaskStarted {
            task: task.into(),
            call: 1,
        }
    }

    #[test]
    fn the_live_display_keeps_a_line_for_every_running_task() {
        let mut live = Live::new(ProgressDrawTarget::hidden(), 3);
        for task in ["a", "b", "c"] {
            live.show(&started(task));
        }
        assert_eq!(live.running.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        live.show(&Event::CommandStarted {
            task: "b_fix_1".into(),
            root_task: "b".into(),
            role: "fix".into(),
            command: "make fix".into(),
        });
        assert_eq!(live.running["b"].message(), "fix: make fix");
        live.show(&Event::TaskAccepted {
            task: "b".into(),
            fixes: 1,
        });
        assert_eq!(live.running.keys().collect::<Vec<_>>(), ["a", "c"]);
        assert_eq!(live.overall.position(), 1);
        assert_eq!(live.overall.message(), "(2 running)");
        live.show(&Event::RunFinished {
            outcome: "interrupted".into(),
            accepted: 1,
            failed: 0,
            drained: 0,
        });
        assert!(live.running.is_empty());
    }

    #[test]
    fn json_events_carry_when_and_how_long() {
        let rep = Reporter::new(Mode::Json);
        let mut clock = Clock::new();
        assert_eq!(clock.observe(&started("a")), None);
        std::thread::sleep(Duration::from_millis(20));
        let ended = Event::TaskFailed {
            task: "a".into(),
            reason: "r".into(),
            evidence: Vec::new(),
        };
        let took = clock.observe(&ended);
        assert!(
            took.is_some_and(|d| d >= Duration::from_millis(20)),
            "{took:?}"
        );
        // A task that ends twice (a retried call's rejection, then acceptance) times from
        // its latest start only.
        assert_eq!(clock.observe(&ended), None);
        let line: serde_json::Value = serde_json::from_str(&rep.json_line(&ended, took)).unwrap();
        assert_eq!(line["event"], "task_failed");
        assert!(line["duration_ms"].as_u64().unwrap() >= 20);
        assert!(line["elapsed_ms"].is_u64());
        let ts = line["ts"].as_str().unwrap();
        assert_eq!(ts.len(), "2026-12-01T16:20:01.123Z".len(), "{ts}");
        assert!(ts.ends_with('Z'));
    }

    /// A closure whose check always fails with `justification`, and whose fixes change
    /// nothing.
    fn failing_record(justification: &str) -> ClosureRecord {
        use kleene::closure::{
            Agent, ExecutionOutput, RecoveryPolicy, Session, Severity, Spec, Task, ValidationToken,
            ValidatorResult, Verdict, run_to_closure,
        };
        struct Failing(String);
        impl Agent for Failing {
            type Error = std::io::Error;
            fn govern(
                &mut self,
                _: &Task,
                _: &Session,
                _: u32,
            ) -> std::io::Result<GovernanceDecision> {
                Ok(GovernanceDecision::Approve)
            }
            fn pre_validate(&mut self, _: &Task, _: u32) -> std::io::Result<Verdict> {
                Ok(Verdict::clean())
            }
            fn execute(
                &mut self,
                _: &Task,
                _: &ValidationToken,
            ) -> std::io::Result<ExecutionOutput> {
                Ok(ExecutionOutput::new("ran"))
            }
            fn post_validate(&mut self, _: &Task, _: &ExecutionOutput) -> std::io::Result<Verdict> {
                let id = kleene::id::ValidatorId::new("tests").unwrap();
                Ok(Verdict::new([ValidatorResult::new(
                    id,
                    Severity::Blocker,
                    true,
                    self.0.clone(),
                )]))
            }
        }
        let task = Task::new(TaskId::new("svc").unwrap(), Spec::new("the service"));
        run_to_closure(
            task,
            Session::new("build", "p").unwrap(),
            &mut Failing(justification.to_owned()),
            &RecoveryPolicy::default(),
        )
    }

    /// The record reaches the reporter when the call ends; its failed checks are shown with
    /// the settlement of the closure the journal binds by the record's digest, and only once.
    #[test]
    fn a_failed_calls_checks_go_with_its_settlement() {
        let mut rep = Reporter::new(Mode::Plain);
        let svc = TaskId::new("svc").unwrap();
        let record =
            failing_record("`sh t.sh` failed with exit code 1\nexpected 12000, got 10700\n");
        rep.note_record(&record);
        // Another record's settlement takes nothing of this one's.
        rep.closure_settled(&svc, &Digest::from_bytes([7; 32]));
        assert!(rep.take_settled(&svc).is_empty());
        rep.closure_settled(&svc, &record.digest());
        let evidence = rep.take_settled(&svc);
        assert_eq!(evidence.len(), 1);
        assert_eq!(evidence[0].check, "tests");
        assert_eq!(evidence[0].excerpt.lines, ["expected 12000, got 10700"]);
        assert!(rep.take_settled(&svc).is_empty());
        assert!(rep.recorded.is_empty());

        let line = plain(&Event::TaskFailed {
            task: "svc".into(),
            reason: "call 1 refused: closure halted at svc".into(),
            evidence,
        });
        assert_eq!(
            line,
            "svc: FAILED: call 1 refused: closure halted at svc\n    \
             check tests (blocker): `sh t.sh` failed with exit code 1\n    \
             | expected 12000, got 10700"
        );
    }

    #[test]
    fn timestamps_are_utc_civil_dates() {
        let at = |secs: u64, millis: u64| {
            rfc3339(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(at(1_796_141_429, 139), "2026-12-01T16:10:29.139Z");
        assert_eq!(at(4_107_542_399, 999), "2100-02-28T23:59:59.999Z");
    }
}
