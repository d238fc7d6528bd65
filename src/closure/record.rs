//! The immutable result of a closure: outcome, every task of the tree, the audit log.

use crate::id::digest::canonical_enum;
use crate::{
    closure::RecoveryPolicy, closure::audit::AuditLog, closure::audit::LoopPhase,
    closure::step::ExecutionOutput, closure::step::GovernanceDecision, closure::step::HaltReason,
    closure::step::Next, closure::step::Session, closure::task::Task, closure::verdict::Verdict,
    id::TaskId, id::digest::Digest,
};

/// How a closure ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClosureOutcome {
    /// A task completed with a clean post-validation: the fixpoint (`recovery_resolved`).
    Resolved {
        /// The task that completed.
        task_ref: TaskId,
        /// Its depth: 0 when the root itself passed.
        depth: u32,
    },
    /// A task halted and the closure with it.
    Halted {
        /// The task that halted.
        task_ref: TaskId,
        /// Its depth.
        depth: u32,
        /// The iteration it halted in.
        iteration: u32,
        /// Why (`recovery_exhausted`, `recovery_stalled`, governance denial, …).
        reason: HaltReason,
    },
    /// The closure could not go on for a reason outside the task's verdicts.
    Failed {
        /// The task it stopped at.
        task_ref: TaskId,
        /// Its depth.
        depth: u32,
        /// The iteration it stopped in.
        iteration: u32,
        /// What failed.
        failure: ClosureFailure,
    },
}

/// A closure stopped by something other than a verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClosureFailure {
    /// The agent reported its own error (an I/O failure, a crashed tool).
    Agent {
        /// The phase it failed in.
        phase: LoopPhase,
        /// Its error, as it displayed itself.
        message: String,
    },
    /// The next fix subtask's id would be invalid (the root id is too long for the
    /// `_fix_{depth}` suffix).
    FixId {
        /// The depth of the fix that could not be named.
        depth: u32,
        /// Why the id was refused.
        message: String,
    },
}

canonical_enum!(ClosureFailure {
    Agent { phase, message } => "agent",
    FixId { depth, message } => "fix_id",
});

impl ClosureOutcome {
    /// The task the closure ended at.
    pub fn task_ref(&self) -> &TaskId {
        match self {
            ClosureOutcome::Resolved { task_ref, .. }
            | ClosureOutcome::Halted { task_ref, .. }
            | ClosureOutcome::Failed { task_ref, .. } => task_ref,
        }
    }

    /// The depth of the task the closure ended at.
    pub fn depth(&self) -> u32 {
        match self {
            ClosureOutcome::Resolved { depth, .. }
            | ClosureOutcome::Halted { depth, .. }
            | ClosureOutcome::Failed { depth, .. } => *depth,
        }
    }

    /// The depth it resolved at, if it resolved.
    pub fn resolved_depth(&self) -> Option<u32> {
        match self {
            ClosureOutcome::Resolved { depth, .. } => Some(*depth),
            _ => None,
        }
    }

    /// The halt reason, if it halted.
    pub fn halt_reason(&self) -> Option<&HaltReason> {
        match self {
            ClosureOutcome::Halted { reason, .. } => Some(reason),
            _ => None,
        }
    }

    /// True when the closure reached its fixpoint.
    pub fn is_resolved(&self) -> bool {
        matches!(self, ClosureOutcome::Resolved { .. })
    }

    /// True when it halted with `recovery_stalled`.
    pub fn is_stalled(&self) -> bool {
        matches!(self.halt_reason(), Some(HaltReason::RecoveryStalled { .. }))
    }

    /// True when it halted with `recovery_exhausted`.
    pub fn is_exhausted(&self) -> bool {
        matches!(
            self.halt_reason(),
            Some(HaltReason::RecoveryExhausted { .. })
        )
    }
}

/// Why a stored closure record was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClosureRecordError {
    /// The text is not a closure record, or its audit chain or shape does not hold.
    #[error("read closure record: {message}; restore the record kleene wrote")]
    Unreadable {
        /// What the reader reported.
        message: String,
    },
    /// The text reads as a record but is not the one form kleene writes.
    #[error(
        "read closure record: it is not in the one form kleene writes (an added, renamed or \
         respelled field); restore the record kleene wrote"
    )]
    NonCanonical,
}

/// One iteration of one task, as far as it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRecord {
    /// The iteration, from 1.
    pub iteration: u32,
    /// Governance's decision.
    pub governance: GovernanceDecision,
    /// The pre-execute verdict, if pre-validation ran.
    pub pre_verdict: Option<Verdict>,
    /// What execution produced, if it ran.
    pub output: Option<ExecutionOutput>,
    /// The post-execute verdict, if post-validation ran.
    pub post_verdict: Option<Verdict>,
    /// What came next, if the iteration was clean.
    pub next: Option<Next>,
}

impl StepRecord {
    pub(crate) fn governed(iteration: u32, governance: GovernanceDecision) -> Self {
        Self {
            iteration,
            governance,
            pre_verdict: None,
            output: None,
            post_verdict: None,
            next: None,
        }
    }
}

/// One task of the closure tree (the root or a fix subtask) and every iteration it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskAttempt {
    /// The task, exactly as it ran (for a fix, its rendered recovery spec and
    /// `prior_failures`).
    pub task: Task,
    /// Its iterations, in order.
    pub steps: Vec<StepRecord>,
}

impl TaskAttempt {
    pub(crate) fn new(task: Task) -> Self {
        Self {
            task,
            steps: Vec::new(),
        }
    }

    /// The last post-execute verdict of this task, if it got that far.
    pub fn last_post_verdict(&self) -> Option<&Verdict> {
        self.steps
            .iter()
            .rev()
            .find_map(|s| s.post_verdict.as_ref())
    }
}

/// The immutable outcome of [`run_to_closure`](crate::closure::run_to_closure) or of a driven
/// [`Closure`](crate::closure::Closure).
///
/// It holds the outcome, every task of the closure tree in order (root first, then
/// `x_fix_1`, `x_fix_2`, …) with all its verdicts, how many fixes were spawned, and the
/// hash-chained audit log. It is serialisable and checkpoint-encodable
/// ([`checkpoint::encode`](crate::checkpoint::encode)).
///
/// Reading one back (JSON or checkpoint) re-verifies its audit chain and that it holds one
/// task per spawned fix plus the root, so a damaged record is an error, not a value. Its
/// serde form is exactly its checkpoint payload's, format version 1 (see `FORMATS.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosureRecord {
    pub(super) root_task_ref: TaskId,
    pub(super) session: Session,
    pub(super) policy: RecoveryPolicy,
    pub(super) outcome: ClosureOutcome,
    pub(super) attempts: Vec<TaskAttempt>,
    pub(super) fix_attempts: u32,
    pub(super) audit: AuditLog,
    /// The record's JSON, made the first time it is asked for: a batch digests every record
    /// it settles and a log may store the same text, and encoding the record is most of what
    /// a call of a no-op command costs.
    pub(super) json: JsonOnce,
}

/// A record's JSON, made once. It is a cache of the value, not part of it: every record
/// equals itself whether or not its text was made yet.
#[derive(Clone, Default)]
pub(super) struct JsonOnce(std::sync::OnceLock<Box<str>>);

impl PartialEq for JsonOnce {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for JsonOnce {}

impl std::fmt::Debug for JsonOnce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("..")
    }
}

impl ClosureRecord {
    /// The root task of the closure.
    pub fn root_task_ref(&self) -> &TaskId {
        &self.root_task_ref
    }

    /// The session every task of the tree ran in.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The policy it ran under.
    pub fn policy(&self) -> &RecoveryPolicy {
        &self.policy
    }

    /// How it ended.
    pub fn outcome(&self) -> &ClosureOutcome {
        &self.outcome
    }

    /// Every task of the tree, root first, each with its iterations and verdicts.
    pub fn attempts(&self) -> &[TaskAttempt] {
        &self.attempts
    }

    /// How many fix subtasks this closure spawned.
    pub fn fix_attempts(&self) -> u32 {
        self.fix_attempts
    }

    /// The audit log of the whole tree.
    pub fn audit(&self) -> &AuditLog {
        &self.audit
    }

    /// The record as JSON, in the one form [`from_json`](Self::from_json) reads back.
    pub fn to_json(&self) -> String {
        self.as_json().to_owned()
    }

    /// The record as JSON, as [`to_json`](Self::to_json) writes it, made once per record
    /// (its [`digest`](Self::digest) is of these bytes), so a log that stores the text
    /// beside the digest encodes the record once.
    ///
    /// ```
    /// # use kleene::{Agent, closure::ExecutionOutput, closure::GovernanceDecision, closure::step::Session, Task, closure::step::ValidationToken, closure::Verdict};
    /// # struct AlwaysPasses;
    /// # impl Agent for AlwaysPasses {
    /// #     type Error = std::io::Error;
    /// #     fn govern(&mut self, _: &Task, _: &Session, _: u32) -> Result<GovernanceDecision, Self::Error> { Ok(GovernanceDecision::Approve) }
    /// #     fn pre_validate(&mut self, _: &Task, _: u32) -> Result<Verdict, Self::Error> { Ok(Verdict::clean()) }
    /// #     fn execute(&mut self, _: &Task, _: &ValidationToken) -> Result<ExecutionOutput, Self::Error> { Ok(ExecutionOutput::new("done")) }
    /// #     fn post_validate(&mut self, _: &Task, _: &ExecutionOutput) -> Result<Verdict, Self::Error> { Ok(Verdict::clean()) }
    /// # }
    /// use kleene::{closure::run_to_closure, closure::ClosureRecord, closure::RecoveryPolicy};
    /// use kleene::{closure::Spec, id::TaskId};
    ///
    /// let task = Task::new(TaskId::new("x")?, Spec::new("add /login"));
    /// let record = run_to_closure(task, Session::new("build", "demo")?, &mut AlwaysPasses,
    ///                             &RecoveryPolicy::default());
    /// // A log line that embeds the record's text, and reads it back.
    /// let line = format!("{{\"record\":{}}}", record.as_json());
    /// let stored = &line["{\"record\":".len()..line.len() - 1];
    /// assert_eq!(ClosureRecord::from_json(stored)?, record);
    /// assert_eq!(stored, record.to_json());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn as_json(&self) -> &str {
        // Plain structs, sequences and strings (no map with non-string keys): the encoding
        // cannot fail and is one fixed text per value.
        self.json
            .0
            .get_or_init(|| serde_json::to_string(self).unwrap_or_default().into())
    }

    /// Reads a record stored with [`to_json`](Self::to_json), re-verifying its audit chain
    /// and shape, and requiring the exact text `to_json` writes: a changed byte that still
    /// parses to the same value (a renamed optional field, an upper-case hex digit) is an
    /// edit too.
    ///
    /// # Errors
    ///
    /// [`ClosureRecordError`] when the text does not read as a record or is not in that form.
    pub fn from_json(json: &str) -> Result<Self, ClosureRecordError> {
        let record: Self =
            serde_json::from_str(json).map_err(|e| ClosureRecordError::Unreadable {
                message: e.to_string(),
            })?;
        if record.as_json() != json {
            return Err(ClosureRecordError::NonCanonical);
        }
        Ok(record)
    }

    /// Reads a record whose text is already bound by a digest its reader checked (a cache
    /// object named by its blake3 in a sealed entry): parsed, its audit chain and shape
    /// checked as by [`from_json`](Self::from_json), and its text kept as it was written
    /// instead of written again to compare (about a third of the reading). Its
    /// [`digest`](Self::digest) is then of that text: a text that is not the one `to_json`
    /// writes has a digest no record written by kleene has, and [`from_json`](Self::from_json)
    /// (what `audit` and `accept` read the closure log with) refuses it.
    pub(crate) fn from_json_as_written(json: String) -> Result<Self, ClosureRecordError> {
        let record: Self =
            serde_json::from_str(&json).map_err(|e| ClosureRecordError::Unreadable {
                message: e.to_string(),
            })?;
        let _ = record.json.0.set(json.into_boxed_str());
        Ok(record)
    }

    /// The canonical digest of the whole record (outcome, every task and iteration, the
    /// audit log): one changed byte anywhere in a stored record changes it. A batch journals
    /// it with the call's settlement, and an acceptance record binds it.
    pub fn digest(&self) -> Digest {
        Digest::of("closure record", self.as_json().as_bytes())
    }
}
