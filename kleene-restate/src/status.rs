//! A channel's progress as its status handler reports it: every task's state and calls, and
//! why the last pass stopped, if it did.
//!
//! ```
//! use kleene_restate::status::ChannelStatus;
//!
//! let empty = ChannelStatus::empty("chan-1");
//! assert!(!empty.has_evidence() && !empty.is_complete());
//! ```

use kleene::batch::{BatchEvidence, TaskStatus};
use kleene::closure::ClosureOutcome;
use kleene::id::Digest;
use kleene::id::TaskId;
use serde::{Deserialize, Serialize};

use crate::call::StoredClosure;

/// One task's line of a status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskLine {
    /// The task.
    pub task: TaskId,
    /// Where it stands. Written as the words `kleene status` prints (`accepted`, `failed`,
    /// `in flight (call 2)`, …), so the JSON reads as before; read back into the type.
    #[serde(with = "status_text")]
    pub status: TaskStatus,
    /// How many calls were made (interrupted ones count).
    pub calls: u32,
    /// How many fixes its calls ran (left out when none, so an answer without fixes keeps
    /// an earlier adapter's JSON).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fixes: u32,
    /// Its accepted output's digest.
    pub accepted: Option<Digest>,
    /// Why it failed, in one line, when it did (absent from an earlier adapter's answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A channel's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelStatus {
    /// The channel.
    pub channel: String,
    /// Every task, in the plan's topological order (empty before a submission).
    pub tasks: Vec<TaskLine>,
    /// Events folded into the evidence.
    pub events: u64,
    /// The evidence digest (the same fold gives the same digest, locally or on Restate).
    pub evidence_digest: Option<Digest>,
    /// Why the last pass stopped, when it stopped before the batch settled.
    pub stopped: Option<String>,
}

impl ChannelStatus {
    /// The status of a channel without evidence.
    pub fn empty(channel: &str) -> Self {
        Self {
            channel: channel.to_owned(),
            tasks: Vec::new(),
            events: 0,
            evidence_digest: None,
            stopped: None,
        }
    }

    /// The status `evidence` gives, with the last stop's reason.
    pub fn of(evidence: &BatchEvidence, stopped: Option<String>) -> Self {
        let fixes = kleene::shell::fixes_by_task(evidence);
        let tasks = evidence
            .inventory()
            .map(|(id, t)| TaskLine {
                task: id.clone(),
                status: evidence.status(id).unwrap_or(TaskStatus::Pending),
                calls: t.calls(),
                fixes: fixes.get(id).copied().unwrap_or(0),
                accepted: t.accepted().map(|a| a.digest()),
                why: evidence.failure_cause(id).map(|cause| cause.to_string()),
            })
            .collect();
        Self {
            channel: evidence.channel().to_string(),
            tasks,
            events: evidence.event_count(),
            evidence_digest: Some(evidence.summary().evidence_digest),
            stopped,
        }
    }

    /// Whether the channel has evidence.
    pub fn has_evidence(&self) -> bool {
        !self.tasks.is_empty()
    }

    /// Whether every task is accepted.
    pub fn is_complete(&self) -> bool {
        self.has_evidence() && self.tasks.iter().all(|t| t.accepted.is_some())
    }
}

/// One line a task, as `kleene status` prints it: the task, its state, its calls and the
/// fixes they ran, and why it failed.
impl std::fmt::Display for ChannelStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "channel {}: {} events", self.channel, self.events)?;
        let width = self.tasks.iter().map(|t| t.task.as_str().len()).max();
        let status_width = self.tasks.iter().map(|t| t.status.to_string().len()).max();
        let (width, status_width) = (width.unwrap_or(0), status_width.unwrap_or(0));
        for t in &self.tasks {
            let why = t.why.as_ref().map_or(String::new(), |w| format!("  {w}"));
            writeln!(
                f,
                "  {:<width$}  {:<status_width$} {:>15}{why}",
                t.task.as_str(),
                t.status.to_string(),
                kleene::shell::calls_and_fixes(t.calls, t.fixes)
            )?;
        }
        if let Some(digest) = self.evidence_digest {
            writeln!(f, "evidence {digest}")?;
        }
        if let Some(why) = &self.stopped {
            writeln!(f, "stopped: {why}")?;
        }
        Ok(())
    }
}

/// A task's status as its words: the JSON keeps the text `kleene status` prints, and a
/// reader gets the typed status back or a refusal naming the text.
mod status_text {
    use kleene::batch::TaskStatus;
    use kleene::id::TaskId;
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    pub(super) fn serialize<S: Serializer>(status: &TaskStatus, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(status)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<TaskStatus, D::Error> {
        let text = String::deserialize(d)?;
        parse(&text).ok_or_else(|| D::Error::custom(format!("unknown task status {text:?}")))
    }

    /// The status whose words are `text`.
    pub(super) fn parse(text: &str) -> Option<TaskStatus> {
        match text {
            "accepted" => return Some(TaskStatus::Accepted),
            "failed" => return Some(TaskStatus::Failed),
            "pending" => return Some(TaskStatus::Pending),
            _ => {}
        }
        if let Some(call) = text
            .strip_prefix("in flight (call ")
            .and_then(|rest| rest.strip_suffix(')'))
        {
            return call
                .parse()
                .ok()
                .map(|attempt| TaskStatus::InFlight { attempt });
        }
        let blocked_by = text
            .strip_prefix("drained (prerequisite ")
            .and_then(|rest| rest.strip_suffix(" failed)"))?;
        TaskId::new(blocked_by)
            .ok()
            .map(|blocked_by| TaskStatus::Drained { blocked_by })
    }
}

/// One line about a closure record a channel keeps: how the call's closure ended, and each
/// task of its tree (the root, then every fix subtask) with the checks that last failed it,
/// so the fix that ran and what it repaired can be read without the whole record.
///
/// ```
/// use kleene_restate::call::StoredClosure;
/// use kleene_restate::status::closure_line;
///
/// let unreadable = StoredClosure { task: "a".parse()?, call: 1, record: "{}".into() };
/// assert!(closure_line(&unreadable).starts_with("a call 1: unreadable record"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn closure_line(stored: &StoredClosure) -> String {
    let head = format!("{} call {}", stored.task, stored.call);
    let record = match stored.read() {
        Ok(r) => r,
        Err(e) => return format!("{head}: unreadable record: {e}"),
    };
    let end = match record.outcome() {
        ClosureOutcome::Resolved { task_ref, depth } => {
            format!("resolved by {task_ref} (depth {depth})")
        }
        ClosureOutcome::Halted {
            task_ref, reason, ..
        } => format!("halted at {task_ref}: {}", reason.halt_type()),
        ClosureOutcome::Failed { task_ref, .. } => format!("failed at {task_ref}"),
        // A later kleene's ending: the record still reads.
        _ => "ended".to_owned(),
    };
    let fixes = record.fix_attempts();
    let tasks: Vec<String> = record
        .attempts()
        .iter()
        .map(|a| {
            let checks = match a.last_post_verdict() {
                None => "never reached its checks".to_owned(),
                Some(v) if v.is_clean() => "clean".to_owned(),
                Some(v) => {
                    let failed: Vec<&str> = v.failures().map(|r| r.validator_id.as_str()).collect();
                    format!("failed {}", failed.join(", "))
                }
            };
            format!("{} {checks}", a.task.id())
        })
        .collect();
    format!(
        "{head}: {end}, {fixes} fix{}; {}",
        if fixes == 1 { "" } else { "es" },
        tasks.join("; ")
    )
}

#[cfg(test)]
mod status_tests {
    use kleene::batch::TaskStatus;
    use kleene::id::TaskId;

    use super::status_text::parse;

    #[test]
    fn every_status_reads_back_from_its_words() {
        let statuses = [
            TaskStatus::Accepted,
            TaskStatus::Failed,
            TaskStatus::Pending,
            TaskStatus::InFlight { attempt: 12 },
            TaskStatus::Drained {
                blocked_by: TaskId::new("db_schema").unwrap(),
            },
        ];
        for status in statuses {
            assert_eq!(parse(&status.to_string()), Some(status));
        }
        for text in [
            "",
            "Accepted",
            "in flight (call x)",
            "drained (prerequisite  failed)",
        ] {
            assert_eq!(parse(text), None, "{text:?}");
        }
    }
}
