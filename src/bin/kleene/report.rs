//! What a run tells people and machines: one event type, three renderings, and the words
//! for what the evidence and the audit trail say.
//!
//! Every step of a run is an [`Event`]; [`report_event`] makes them from the evidence events
//! a run records. On a terminal the events drive a live display (an
//! overall bar and one line per running task, fix attempts shown); otherwise each event is
//! one plain line; with `--json` each event is one JSON object per line on stdout.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use std::collections::BTreeMap;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use kleene::batch::{BatchEvidence, EvidenceEvent, Settlement, TaskStatus};
use kleene::{
    audit::AuditEvent,
    closure::{ClosureFailure, GovernanceDecision},
    id::TaskId,
};
use serde::Serialize;

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
        /// `run`, `fix` or `check:<id>`.
        role: String,
        /// The command line.
        command: String,
    },
    /// A check withheld approval.
    CheckFailed {
        /// The task (or fix subtask).
        task: String,
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
}

#[derive(Debug)]
struct Live {
    multi: MultiProgress,
    overall: ProgressBar,
    current: Option<(String, ProgressBar)>,
    /// Tasks with an outcome: a retried task counts once.
    settled: std::collections::BTreeSet<String>,
}

impl Reporter {
    /// A reporter in `mode`.
    pub fn new(mode: Mode) -> Self {
        Self { mode, live: None }
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Shows one event.
    pub fn emit(&mut self, event: &Event) {
        match self.mode {
            Mode::Json => {
                if let Ok(line) = serde_json::to_string(event) {
                    println_flush(&line);
                }
            }
            Mode::Plain => println_flush(&plain(event)),
            Mode::Live => self.live(event),
        }
    }

    /// A final human-readable message (the reason a run stopped, a path written); JSON
    /// mode turns it into a `message` event so stdout stays one JSON object per line.
    pub fn say(&mut self, text: &str) {
        match self.mode {
            Mode::Json => {
                let line = serde_json::json!({ "event": "message", "text": text });
                println_flush(&line.to_string());
            }
            Mode::Plain => println_flush(text),
            Mode::Live => match &self.live {
                Some(live) => live.multi.suspend(|| println_flush(text)),
                None => println_flush(text),
            },
        }
    }

    /// A result object for machines (JSON mode only prints it; the others never call it).
    pub fn say_json(&mut self, value: &serde_json::Value) {
        println_flush(&value.to_string());
    }

    fn live(&mut self, event: &Event) {
        if let Event::RunStarted { tasks, .. } = event {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
            let overall = multi.add(ProgressBar::new(*tasks as u64));
            overall.set_style(
                ProgressStyle::with_template("{bar:30.cyan/blue} {pos}/{len} tasks {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            self.live = Some(Live {
                multi,
                overall,
                current: None,
                settled: std::collections::BTreeSet::new(),
            });
        }
        let Some(live) = self.live.as_mut() else {
            println_flush(&plain(event));
            return;
        };
        match event {
            Event::RunStarted { .. } => {}
            Event::TaskStarted { task, .. } => {
                let bar = live.multi.add(ProgressBar::new_spinner());
                bar.set_style(
                    ProgressStyle::with_template("  {spinner} {prefix:.bold} {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar.set_prefix(task.clone());
                bar.enable_steady_tick(Duration::from_millis(100));
                live.current = Some((task.clone(), bar));
            }
            Event::CommandStarted { role, command, .. } => {
                if let Some((_, bar)) = &live.current {
                    bar.set_message(format!("{role}: {command}"));
                }
            }
            Event::CheckFailed { .. } | Event::FixSpawned { .. } => {
                let line = plain(event);
                match &live.current {
                    Some((_, bar)) => bar.println(format!("    {line}")),
                    None => live.multi.suspend(|| println_flush(&line)),
                }
            }
            Event::TaskAccepted { task, .. }
            | Event::TaskFailed { task, .. }
            | Event::TaskDrained { task, .. } => {
                let line = plain(event);
                match live.current.take() {
                    Some((running, bar)) if &running == task => {
                        bar.finish_and_clear();
                        live.multi.remove(&bar);
                    }
                    other => live.current = other,
                }
                live.settled.insert(task.clone());
                live.overall.set_position(live.settled.len() as u64);
                live.multi.suspend(|| println_flush(&line));
            }
            Event::RunFinished { outcome, .. } => {
                if let Some((_, bar)) = live.current.take() {
                    bar.finish_and_clear();
                }
                if outcome == "accepted" {
                    live.overall.finish_with_message(outcome.clone());
                } else {
                    // Keep the bar where the run stopped.
                    live.overall.abandon_with_message(outcome.clone());
                }
                live.multi.suspend(|| println_flush(&plain(event)));
            }
        }
    }
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
        } => format!(
            "{} {tasks} tasks on channel {channel}",
            if *resumed { "resuming" } else { "running" }
        ),
        Event::TaskStarted { task, call } if *call > 1 => format!("{task}: call {call}"),
        Event::TaskStarted { task, .. } => format!("{task}: started"),
        Event::CommandStarted {
            task,
            role,
            command,
        } => format!("{task}: {role}: {command}"),
        Event::CheckFailed {
            task,
            check,
            severity,
            status,
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
        Event::TaskFailed { task, reason } => format!("{task}: FAILED: {reason}"),
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
        rep.emit(&Event::TaskFailed {
            task: task.to_string(),
            reason,
        });
    };
    match event {
        EvidenceEvent::ClosureSettled { task, closure, .. } => {
            fixes.insert(task.clone(), closure.fix_attempts);
        }
        EvidenceEvent::Settled {
            task,
            attempt,
            settlement,
        } => match settlement {
            Settlement::Accepted { .. } => rep.emit(&Event::TaskAccepted {
                task: task.to_string(),
                fixes: fixes.remove(task).unwrap_or(0),
            }),
            Settlement::Rejected { rejection, .. } => {
                let text = rejection.to_string();
                let first = text.lines().next().unwrap_or_default();
                failed(rep, task, format!("call {attempt} rejected: {first}"));
            }
            Settlement::Infrastructure(failure) => {
                failed(rep, task, format!("infrastructure: {failure}"));
            }
            _ => {}
        },
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

/// Why a failed task failed, in one line.
pub fn failure_reason(evidence: &BatchEvidence, id: &TaskId) -> String {
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
}
