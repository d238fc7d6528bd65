//! The commands that only report on a state directory: `status` and `audit`.

use std::collections::BTreeMap;

use kleene::batch::{BatchEvidence, TaskStatus, evidence::FailureCause};
use kleene::closure::{ClosureRecord, audit::AuditEvent};
use kleene::id::TaskId;
use kleene::shell::counted;

use crate::cli::{Exit, StateArgs};
use crate::excerpt::{self, CheckEvidence};
use crate::report::{Reporter, detail, failure_reason, status_word};
use crate::state::{ClosureEntry, StateDir};
use kleene::error::Chain;

use super::accept::stored_record;
use super::closures::{bound_record, closure_problems};
use super::{Failure, Outcome, env_journal_key, journal_torn_tail, load_evidence, stored_plan};

/// `kleene status`.
pub fn status(args: &StateArgs, rep: &mut Reporter) -> Outcome {
    let state = StateDir::at(&args.state);
    let key = env_journal_key(&state)?;
    let (info, loaded, evidence) = load_evidence(&state, key.as_ref())?;
    let summary = evidence.summary();
    let crate::projection::Differences {
        missing,
        changed: workspace_differences,
    } = crate::projection::differences(&evidence, &info.workspace);
    let torn = journal_torn_tail(&state, key.as_ref());
    let fixes = kleene::shell::fixes_by_task(&evidence);
    // A call in flight while a kleene holds the lock is running, not interrupted.
    let writer = state.writer();
    // The closure log is read only when a task failed: it holds the failed checks' output.
    let failed_any = loaded
        .plan()
        .topological_order()
        .iter()
        .any(|id| evidence.status(id) == Some(TaskStatus::Failed));
    let closure_log = if failed_any {
        state.closure_log()
    } else {
        Vec::new()
    };
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
            Some(TaskStatus::InFlight { .. }) => Some(match &writer {
                Some(holder) => format!("running ({holder})"),
                None => "interrupted; kleene resume calls it again".to_owned(),
            }),
            _ => match evidence.reused_from(id) {
                Some(from) => Some(format!(
                    "up to date: reused from call {} of run {}",
                    from.call, from.channel
                )),
                None => {
                    interrupted_calls(evidence.task(id).map_or(&[], |t| t.interrupted_attempts()))
                }
            },
        };
        let checks = failed_checks(&closure_log, &evidence, id);
        rows.push((
            id.clone(),
            status_word(status.as_ref()),
            calls,
            fixes,
            why,
            checks,
        ));
    }
    if rep.mode() == crate::report::Mode::Json {
        let tasks: Vec<_> = rows
            .iter()
            .map(|(id, status, calls, fixes, why, checks)| {
                serde_json::json!({
                    "task": id, "status": status, "calls": calls, "fixes": fixes, "why": why,
                    "evidence": checks,
                })
            })
            .collect();
        rep.say_json(&serde_json::json!({
            "event": "status",
            "channel": info.channel,
            "workspace": info.workspace,
            "evidence_digest": evidence.digest().to_string(),
            "complete": summary.is_complete(),
            "writer": writer,
            "tasks": tasks,
            "workspace_differences": workspace_differences,
            "workspace_missing": missing,
            "journal_torn_tail": torn,
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
        for (id, status, calls, fixes, why, checks) in &rows {
            let why = why.as_ref().map_or(String::new(), |w| format!("  {w}"));
            rep.say(&format!(
                "  {:<width$}  {status:<status_width$} {:>15}{why}",
                id.as_str(),
                kleene::shell::calls_and_fixes(*calls, *fixes)
            ));
            // Under the task's row, indented past it, so the table still reads as one.
            for line in excerpt::render_checks(checks, "      ") {
                rep.say(&line);
            }
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
        if let Some(torn) = &torn {
            rep.say(&format!("note: {torn}"));
        }
        if !missing.is_empty() {
            rep.say(&format!(
                "note: {} not in the workspace yet (first: {}); kleene resume writes {}",
                match missing.len() {
                    1 => "1 accepted file is".to_owned(),
                    n => format!("{n} accepted files are"),
                },
                missing[0],
                if missing.len() == 1 { "it" } else { "them" }
            ));
        }
        if !workspace_differences.is_empty() {
            rep.say(&format!(
                "the workspace does not hold what was accepted: {}; kleene resume writes the \
                 accepted files again",
                workspace_differences.join("; ")
            ));
        }
    }
    Ok(
        if summary.is_complete() && workspace_differences.is_empty() && torn.is_none() {
            Exit::Ok
        } else {
            Exit::Halted
        },
    )
}

/// The failed checks (each with an excerpt of its output) of the call that made `id` fail,
/// from its closure record when the journal binds it; empty for a task that did not fail
/// on a check.
fn failed_checks(
    log: &[ClosureEntry],
    evidence: &BatchEvidence,
    id: &TaskId,
) -> Vec<CheckEvidence> {
    let call = match evidence.failure_cause(id) {
        Some(FailureCause::Rejected { call, .. } | FailureCause::Stalled { call, .. }) => call,
        _ => return Vec::new(),
    };
    bound_record(log, evidence, id, call)
        .map(excerpt::failed_checks)
        .unwrap_or_default()
}

/// The lines shown under an audit entry: the failed checks of a verdict with an excerpt of
/// each one's output, and a fix's own output under its execution.
fn evidence_lines(record: &ClosureRecord, event: &AuditEvent) -> Vec<String> {
    const INDENT: &str = "        ";
    match event {
        AuditEvent::PreValidated { verdict, .. } | AuditEvent::PostValidated { verdict, .. } => {
            excerpt::render_checks(&excerpt::check_evidence(verdict), INDENT)
        }
        AuditEvent::Executed {
            task_ref,
            iteration,
            ..
        } => excerpt::fix_output(record, task_ref, *iteration)
            .map(|e| e.render(INDENT, "output: "))
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// The calls of a task that were interrupted, in words (`None` for none).
fn interrupted_calls(calls: &[u32]) -> Option<String> {
    match calls {
        [] => None,
        [call] => Some(format!("call {call} was interrupted")),
        calls => Some(format!(
            "calls {} were interrupted",
            calls
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
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
    // The journal binds every settled closure, the acceptance record every accepted one.
    let key = env_journal_key(&state)?;
    let evidence = match load_evidence(&state, key.as_ref()) {
        Ok((_, _, evidence)) => Some(evidence),
        Err(failure) => {
            broken.push(failure.message);
            None
        }
    };
    // The run a reused output's record comes from, named where its trail is shown.
    let reused_from = |task: &str, call: u32| {
        let evidence = evidence.as_ref()?;
        let from = evidence.reused_from(&kleene::id::TaskId::new(task).ok()?)?;
        (from.call == call).then(|| from.channel.to_string())
    };
    for entry in &entries {
        let place = format!("{} line {}", log_path.display(), entry.line);
        let reused = reused_from(&entry.task, entry.call);
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
                "reused_from": reused,
                "line": entry.line,
                "verified": verified.is_ok(),
                "error": verified.as_ref().err().map(ToString::to_string),
                "outcome": outcome,
                "entries": log.entries().iter().map(|e| {
                    let mut entry = serde_json::json!({
                        "kind": e.event().kind(),
                        "task_ref": e.event().task_ref(),
                        "hash": e.hash().to_string(),
                        "event": e.event(),
                    });
                    // The event holds only the output's digest; the record holds its text.
                    if let AuditEvent::Executed { task_ref, iteration, .. } = e.event()
                        && let Some(text) = excerpt::step_output(record, task_ref, *iteration)
                    {
                        entry["output"] = text.into();
                    }
                    entry
                }).collect::<Vec<_>>(),
            }));
        } else {
            rep.say(&format!(
                "{} call {}{}: {}, {}",
                entry.task,
                entry.call,
                reused
                    .as_ref()
                    .map_or(String::new(), |run| format!(" of run {run}, reused")),
                counted(log.len() as u64, "entry", "entries"),
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
                for line in evidence_lines(record, e.event()) {
                    rep.say(&line);
                }
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
    if let Some(torn) = journal_torn_tail(&state, key.as_ref()) {
        broken.push(torn);
    }
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
            "audit: {} failed verification:\n  {}",
            counted(broken.len() as u64, "record", "records"),
            broken.join("\n  ")
        )))
    }
}
