//! A closure's incremental form: one small delta per step, appended to a store, and a
//! restore that verifies the deltas and folds them back into the machine.
//!
//! See [`ClosureDelta`].

use super::Closure;
use super::state::StateField;
use super::state::{StateSeal, output_digest};
use crate::checkpoint::{self, CheckpointError, HEADER_LEN};
use crate::closure::audit::{AuditEntry, AuditEvent, AuditLog, LoopPhase};
use crate::closure::policy::{FixBudget, PolicyError, RecoveryPolicy};
use crate::closure::record::ClosureFailure;
use crate::closure::step::ExecutionOutput;
use crate::closure::wire::delta::{StepDeltaV1, StepPayload};
use crate::id::digest::Digest;
use crate::{closure::task::Task, id::TaskId};

/// What one step of a closure added to its history.
///
/// Persisting [`ClosureState`](super::ClosureState) after every step re-encodes the whole
/// history each time. A [`ClosureDelta`] holds only what one step added: the audit entries
/// it appended and what those entries do not carry themselves (the root task, policy and
/// fix-budget snapshot for the start; the output text for an execution, whose audit event
/// holds only its digest). The audit log is the single history: every answer the closure
/// was fed (a decision, a verdict, an output, "complete or continue", an agent failure) is
/// in it, and every counter (fix attempts, the verdict kept for stall detection) is derived
/// by replaying it.
///
/// [`Closure::restore_from_deltas`] checks each delta before it trusts it: that it links to
/// the entry before it, that it is a step the typed transitions would take from the state
/// the deltas before it reached (they are replayed and must append exactly the recorded
/// entries), and that an execution's output matches the digest its entry recorded.
///
/// ```
/// use kleene::{closure::Closure, Task, id::TaskId};
/// use kleene::closure::{machine::ClosureDelta, ExecutionOutput, GovernanceDecision, step::Next, RecoveryPolicy,
///                       step::Session, Spec, Verdict};
///
/// let task = Task::new(TaskId::new("x")?, Spec::new("add /login"));
/// let mut closure = Closure::start(task, Session::new("build", "demo")?, RecoveryPolicy::default());
/// // The store: an append-only byte log (a file, a database row per step, ...).
/// let mut store = closure.step_delta().encode()?;
/// let record = loop {
///     closure = match closure {
///         Closure::Governance(due) => due.feed(GovernanceDecision::Approve),
///         Closure::PreValidate(due) => due.feed(Verdict::clean()),
///         Closure::Execute(due) => due.feed(ExecutionOutput::new("wrote src/login.rs")),
///         Closure::PostValidate(due) => due.feed(Verdict::clean()),
///         Closure::MoveNext(due) => due.feed(Next::Complete),
///         Closure::Done(record) => break record,
///     };
///     store.extend(closure.step_delta().encode()?);
///     // After a crash: read the whole deltas back and continue from the last one.
///     let (deltas, _whole_len) = ClosureDelta::decode_log(&store)?;
///     closure = Closure::restore_from_deltas(deltas)?;
/// };
/// assert_eq!(record.outcome().resolved_depth(), Some(0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`Closure::step_delta`] gives the delta of the step that produced a closure;
/// [`Closure::history`] gives every delta so far. Encode one with [`ClosureDelta::encode`]
/// (a checkpoint envelope of kind `CLDT`) and append it to a store; restore with
/// [`Closure::restore_from_deltas`].
///
/// # Format versions
///
/// | version | change |
/// |---|---|
/// | 1 | the first: the audit head before the step, the step's audit events, the head after it, then nothing, the start (root task, policy, fix-budget size and use, and a seal binding them to the `closure_started` entry) or an execution's output text |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosureDelta {
    /// The audit head before the step (the digest its first entry links to).
    pub(in crate::closure) prev: Digest,
    /// The events the step appended, oldest first.
    pub(in crate::closure) events: Vec<AuditEvent>,
    /// The audit head after the step (the digest of its last entry).
    pub(in crate::closure) head: Digest,
    pub(in crate::closure) payload: Payload,
}

/// What a step's audit entries do not carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Payload {
    /// Nothing: the entries hold the whole answer.
    None,
    /// The start of the closure.
    Start(Box<Start>),
    /// The text of an execution output (its entry holds the digest).
    Output(ExecutionOutput),
}

/// The start of a closure: what its `closure_started` entry does not name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Start {
    pub(in crate::closure) task: Task,
    pub(in crate::closure) policy: RecoveryPolicy,
    pub(in crate::closure) budget_max: u32,
    pub(in crate::closure) budget_used: u32,
    pub(in crate::closure) seal: StateSeal,
}

impl ClosureDelta {
    /// The audit events the step appended, oldest first.
    pub fn events(&self) -> &[AuditEvent] {
        &self.events
    }

    /// The audit log's head before the step: what the step's first entry links to.
    pub fn prev(&self) -> Digest {
        self.prev
    }

    /// The audit log's head after the step (anchor it to detect a rewritten store).
    pub fn head(&self) -> Digest {
        self.head
    }

    /// True for the first delta of a closure (its start).
    pub fn is_start(&self) -> bool {
        matches!(self.payload, Payload::Start(_))
    }

    /// The delta as a checkpoint envelope (kind `CLDT`), ready to append to a store.
    ///
    /// # Errors
    ///
    /// [`CheckpointError`] if the payload cannot be encoded.
    pub fn encode(&self) -> Result<Vec<u8>, CheckpointError> {
        checkpoint::encode(self)
    }

    /// Appends the delta's envelope (the bytes of [`ClosureDelta::encode`]) to `store`, a
    /// store kept in memory, and returns its length: no buffer of its own is allocated.
    ///
    /// # Errors
    ///
    /// [`CheckpointError`] if the payload cannot be encoded; `store` is then unchanged.
    pub fn encode_into(&self, store: &mut Vec<u8>) -> Result<usize, CheckpointError> {
        checkpoint::encode_into(self, store)
    }

    /// Reads a store of deltas appended one after the other with [`ClosureDelta::encode`],
    /// and returns the whole deltas and how many bytes they span. A torn last delta (an
    /// append cut short by a crash) is left out, so the closure restores to its last whole
    /// step; cut the store to the returned length before appending again.
    ///
    /// # Errors
    ///
    /// [`ClosureDeltaError::Decode`] naming the delta and byte offset of a complete delta
    /// that does not decode (damaged, or not a delta).
    pub fn decode_log(bytes: &[u8]) -> Result<(Vec<ClosureDelta>, usize), ClosureDeltaError> {
        let mut deltas = Vec::new();
        let mut offset = 0;
        while let Some(rest) = bytes.get(offset..).filter(|r| r.len() >= HEADER_LEN) {
            let mut declared = [0u8; 8];
            declared.copy_from_slice(&rest[11..19]);
            let len = usize::try_from(u64::from_le_bytes(declared))
                .ok()
                .and_then(|n| n.checked_add(HEADER_LEN))
                .filter(|n| *n <= rest.len());
            let Some(len) = len else { break };
            let delta =
                checkpoint::decode(&rest[..len]).map_err(|source| ClosureDeltaError::Decode {
                    position: deltas.len(),
                    offset,
                    source,
                })?;
            deltas.push(delta);
            offset += len;
        }
        Ok((deltas, offset))
    }
}

impl Closure {
    /// The delta of the step that produced this closure (for a fresh closure, its start):
    /// append it to a store after every step, and the store holds the whole history at
    /// the cost of one small append per step.
    ///
    /// # Complexity
    ///
    /// Independent of the closure's depth: one or two audit entries and at most one output
    /// are copied.
    pub fn step_delta(&self) -> ClosureDelta {
        let entries = self.audit().entries();
        let first = entries.iter().rposition(opens_step).unwrap_or(0);
        delta(first, &entries[first..], self.last_output(), self.origin())
    }

    /// Appends the envelope of [`step_delta`](Closure::step_delta) (the bytes of
    /// `self.step_delta().encode()`) to `store` and returns its length, encoding straight
    /// from the closure's audit log: no delta is built and nothing is cloned, so persisting
    /// every step costs the encoding and the checksum alone.
    ///
    /// # Errors
    ///
    /// [`CheckpointError`] if the payload cannot be encoded; `store` is then unchanged.
    pub fn encode_step_delta_into(&self, store: &mut Vec<u8>) -> Result<usize, CheckpointError> {
        let entries = self.audit().entries();
        let first = entries.iter().rposition(opens_step).unwrap_or(0);
        let step = &entries[first..];
        let start;
        let payload = match (step.first(), self.origin()) {
            (Some(e), _) if matches!(e.event(), AuditEvent::Executed { .. }) => {
                StepPayload::Output(self.last_output().map_or("", |o| o.text.as_str()))
            }
            (Some(e), Some((task, policy, (budget_max, budget_used)))) if first == 0 => {
                start = StateSeal::of(e.hash(), policy, budget_max, budget_used);
                StepPayload::Start {
                    task,
                    policy,
                    budget: (budget_max, budget_used),
                    seal: &start,
                }
            }
            _ => StepPayload::None,
        };
        let wire = StepDeltaV1::new(step, payload);
        checkpoint::encode_as_into::<ClosureDelta, _>(&wire, store)
    }

    /// Every delta of the closure so far, oldest first: what a store holds after
    /// [`step_delta`](Closure::step_delta) was appended at every step (for example to move a
    /// closure persisted as a [`ClosureState`](super::ClosureState) into a delta store).
    pub fn history(&self) -> Vec<ClosureDelta> {
        let attempts = self.attempts();
        let outputs = attempts
            .iter()
            .flat_map(|a| &a.steps)
            .filter_map(|s| s.output.as_ref());
        let origin = self.origin();
        split(self.audit(), outputs)
            .map(|(first, entries, output)| delta(first, entries, output, origin))
            .collect()
    }

    /// Verifies `deltas` (a closure's history, start first) and folds them into the closure
    /// they lead to. It draws fixes from a budget restored from the start's snapshot plus
    /// the fixes the deltas spawned; use
    /// [`restore_from_deltas_with_budget`](Closure::restore_from_deltas_with_budget) when the
    /// closure shares a budget.
    ///
    /// # Errors
    ///
    /// [`ClosureDeltaError`] naming the position of the first delta that is missing,
    /// reordered, duplicated, edited or not a legal next step.
    ///
    /// # Complexity
    ///
    /// Linear in the history: each delta is replayed once through the typed transitions.
    pub fn restore_from_deltas(
        deltas: impl IntoIterator<Item = ClosureDelta>,
    ) -> Result<Closure, ClosureDeltaError> {
        let (closure, start) = fold(deltas)?;
        let used = start.budget_used.saturating_add(closure.fix_attempts());
        let budget = FixBudget::restore(start.budget_max, used)?;
        Ok(closure.with_budget(budget))
    }

    /// Like [`Closure::restore_from_deltas`], but the closure draws from `budget` (shared
    /// with the other closures of a batch).
    ///
    /// # Errors
    ///
    /// As [`Closure::restore_from_deltas`].
    pub fn restore_from_deltas_with_budget(
        deltas: impl IntoIterator<Item = ClosureDelta>,
        budget: &FixBudget,
    ) -> Result<Closure, ClosureDeltaError> {
        Ok(fold(deltas)?.0.with_budget(budget.clone()))
    }
}

/// The delta of the step whose entries start at index `first`; `output` is the step's
/// output when it is an execution, `origin` what the closure started from.
pub(in crate::closure) fn delta(
    first: usize,
    entries: &[AuditEntry],
    output: Option<&ExecutionOutput>,
    origin: Origin<'_>,
) -> ClosureDelta {
    let payload = match (entries.first(), origin) {
        (Some(e), _) if matches!(e.event(), AuditEvent::Executed { .. }) => {
            Payload::Output(output.cloned().unwrap_or_default())
        }
        (Some(e), Some((task, policy, (budget_max, budget_used)))) if first == 0 => {
            Payload::Start(Box::new(Start {
                seal: StateSeal::of(e.hash(), policy, budget_max, budget_used),
                task: task.clone(),
                policy: policy.clone(),
                budget_max,
                budget_used,
            }))
        }
        _ => Payload::None,
    };
    ClosureDelta {
        prev: entries.first().map_or(AuditLog::GENESIS, AuditEntry::prev),
        events: entries.iter().map(|e| e.event().clone()).collect(),
        head: entries.last().map_or(AuditLog::GENESIS, AuditEntry::hash),
        payload,
    }
}

/// What a closure started from: its root task, policy and fix-budget snapshot (size, use).
pub(in crate::closure) type Origin<'a> = Option<(&'a Task, &'a RecoveryPolicy, (u32, u32))>;

/// True for an entry that records an answer fed to the closure: the first entry of a step.
/// The entries after it in the same step are its consequences (a spawned fix, the end).
fn opens_step(entry: &AuditEntry) -> bool {
    match entry.event() {
        AuditEvent::ClosureStarted { .. }
        | AuditEvent::Governed { .. }
        | AuditEvent::PreValidated { .. }
        | AuditEvent::Executed { .. }
        | AuditEvent::PostValidated { .. }
        | AuditEvent::MovedNext { .. } => true,
        AuditEvent::Failed { failure, .. } => matches!(failure, ClosureFailure::Agent { .. }),
        AuditEvent::SubtaskSpawned { .. }
        | AuditEvent::RecoveryResolved { .. }
        | AuditEvent::RecoveryExhausted { .. }
        | AuditEvent::RecoveryStalled { .. }
        | AuditEvent::Halted { .. } => false,
    }
}

/// Splits a closure's audit log into its steps: each step's first index, its entries and,
/// for an execution, its output (taken from `outputs` in order).
pub(in crate::closure) fn split<'a>(
    audit: &'a AuditLog,
    outputs: impl IntoIterator<Item = &'a ExecutionOutput>,
) -> impl Iterator<Item = (usize, &'a [AuditEntry], Option<&'a ExecutionOutput>)> {
    let entries = audit.entries();
    let mut outputs = outputs.into_iter();
    let mut first = 0;
    std::iter::from_fn(move || {
        let start = first;
        let step = entries.get(start..).filter(|s| !s.is_empty())?;
        let len = 1 + step[1..].iter().take_while(|e| !opens_step(e)).count();
        first += len;
        let output = match step[0].event() {
            AuditEvent::Executed { .. } => outputs.next(),
            _ => None,
        };
        Some((start, &step[..len], output))
    })
}

/// Verifies and replays `deltas`, returning the closure they lead to (drawing from a
/// budget used only for the replay) and the start they began with.
pub(in crate::closure) fn fold(
    deltas: impl IntoIterator<Item = ClosureDelta>,
) -> Result<(Closure, Start), ClosureDeltaError> {
    let mut deltas = deltas.into_iter().enumerate();
    let Some((_, first)) = deltas.next() else {
        return Err(ClosureDeltaError::Empty);
    };
    let Payload::Start(start) = first.payload else {
        return Err(ClosureDeltaError::NotStart { position: 0 });
    };
    let session = match first.events.first() {
        Some(AuditEvent::ClosureStarted { session, .. }) => session.clone(),
        _ => return Err(ClosureDeltaError::NotStart { position: 0 }),
    };
    if first.prev != AuditLog::GENESIS {
        return Err(ClosureDeltaError::BrokenLink { position: 0 });
    }
    let replay = FixBudget::new(u32::MAX);
    let mut closure =
        Closure::start_with_budget(start.task.clone(), session, start.policy.clone(), &replay);
    compare(0, &closure, 0, &first.events, first.head)?;
    let expected = StateSeal::of(
        closure.audit().head(),
        &start.policy,
        start.budget_max,
        start.budget_used,
    );
    if let Some(field) = expected.mismatch(&start.seal) {
        return Err(ClosureDeltaError::Tampered { position: 0, field });
    }
    for (position, delta) in deltas {
        let before = closure.audit().len();
        let head = closure.audit().head();
        let Some(opening) = delta.events.first().filter(|_| delta.prev == head) else {
            return Err(ClosureDeltaError::BrokenLink { position });
        };
        if let (AuditEvent::Executed { output, .. }, Payload::Output(text)) =
            (opening, &delta.payload)
            && *output != output_digest(text)
        {
            return Err(ClosureDeltaError::OutputMismatch {
                position,
                task: opening.task_ref().clone(),
            });
        }
        let output = match &delta.payload {
            Payload::Output(text) => Some(text),
            _ => None,
        };
        // The budget a fix drew from was live: replay what the entries say it answered.
        let refused = delta.events.iter().find_map(|e| match e {
            AuditEvent::RecoveryExhausted {
                bound: crate::closure::step::ExhaustedBound::FixBudget { max },
                ..
            } => Some(*max),
            _ => None,
        });
        let budget = match refused {
            Some(max) => FixBudget::restore(max, max)?,
            None => replay.clone(),
        };
        closure = match closure.with_budget(budget).feed_recorded(opening, output) {
            Ok(next) => next,
            Err(due) => {
                return Err(ClosureDeltaError::IllegalStep {
                    position,
                    task: opening.task_ref().clone(),
                    found: opening.kind(),
                    due: due
                        .due()
                        .map_or("nothing (it had ended)", LoopPhase::as_str),
                });
            }
        };
        compare(position, &closure, before, &delta.events, delta.head)?;
    }
    Ok((closure, *start))
}

/// Checks that replaying a delta appended exactly its recorded events, ending at its head.
fn compare(
    position: usize,
    closure: &Closure,
    before: usize,
    events: &[AuditEvent],
    head: Digest,
) -> Result<(), ClosureDeltaError> {
    let appended = &closure.audit().entries()[before..];
    let same_events =
        appended.len() == events.len() && appended.iter().zip(events).all(|(a, r)| a.event() == r);
    match (same_events, closure.audit().head() == head) {
        (true, true) => return Ok(()),
        (true, false) => return Err(ClosureDeltaError::Edited { position }),
        (false, _) => {}
    }
    let found = events
        .iter()
        .find(|r| !appended.iter().any(|a| a.event() == *r));
    let produced = appended
        .iter()
        .map(AuditEntry::event)
        .find(|a| !events.contains(a));
    let culprit = found
        .or(produced)
        .or(events.first())
        .or(appended.first().map(AuditEntry::event));
    Err(match culprit {
        Some(event) => ClosureDeltaError::Diverged {
            position,
            task: event.task_ref().clone(),
            found: found.map_or("nothing", AuditEvent::kind),
            expected: produced.map_or("nothing", AuditEvent::kind),
        },
        // Neither side holds an event: only the head can differ.
        None => ClosureDeltaError::Edited { position },
    })
}

/// Why a closure's deltas were refused by [`Closure::restore_from_deltas`]. Each variant
/// names the position of the delta (from 0, the start) where the history breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClosureDeltaError {
    /// No delta at all.
    #[error("restore closure from deltas: there are none; the first delta is the closure's start")]
    Empty,
    /// The first delta is not a closure's start.
    #[error(
        "restore closure from deltas: delta {position} is not the closure's start; pass the deltas from the first one on"
    )]
    NotStart {
        /// Where.
        position: usize,
    },
    /// A delta does not link to the entry before it.
    #[error(
        "restore closure from deltas: delta {position} does not link to the delta before it (a delta was dropped, reordered or duplicated); restore the store from a copy"
    )]
    BrokenLink {
        /// The first delta whose link is broken.
        position: usize,
    },
    /// A delta's entries are the steps the closure took but their digests do not match.
    #[error(
        "restore closure from deltas: delta {position} does not match its digest (it was edited); restore the store from a copy"
    )]
    Edited {
        /// The edited delta.
        position: usize,
    },
    /// A delta answers a phase that was not due.
    #[error(
        "restore closure from deltas: delta {position} records `{found}` for task {task}, but the closure was waiting for {due}; the store was edited or mixes closures: restore it from a copy"
    )]
    IllegalStep {
        /// The delta.
        position: usize,
        /// The task it names.
        task: TaskId,
        /// The kind of its first entry.
        found: &'static str,
        /// The phase that was due.
        due: &'static str,
    },
    /// Replaying a delta did not append what it records.
    #[error(
        "restore closure from deltas: delta {position} records `{found}` for task {task} where the closure's step appends `{expected}`; the store was edited: restore it from a copy"
    )]
    Diverged {
        /// The delta.
        position: usize,
        /// The task involved.
        task: TaskId,
        /// The first recorded entry kind that does not follow.
        found: &'static str,
        /// What the step appends instead.
        expected: &'static str,
    },
    /// An execution's output text does not match the digest its entry recorded.
    #[error(
        "restore closure from deltas: the execution output in delta {position} (task {task}) is not the one its audit entry recorded; restore the store from a copy"
    )]
    OutputMismatch {
        /// The delta.
        position: usize,
        /// The task executed.
        task: TaskId,
    },
    /// The start's policy or fix-budget snapshot does not match its seal.
    #[error(
        "restore closure from deltas: the {field} in delta {position} is not what the closure wrote; restore the store from a copy"
    )]
    Tampered {
        /// The delta (the start).
        position: usize,
        /// The field.
        field: StateField,
    },
    /// The fix budget does not hold together.
    #[error("restore closure from deltas: its fix budget does not hold together")]
    Budget(#[from] PolicyError),
    /// A complete delta in a store does not decode.
    #[error("restore closure from deltas: delta {position} at byte {offset} does not decode")]
    Decode {
        /// The delta.
        position: usize,
        /// Its byte offset in the store.
        offset: usize,
        /// Why.
        #[source]
        source: CheckpointError,
    },
}

impl ClosureDeltaError {
    /// The position of the delta where the history breaks, if one is named.
    pub fn position(&self) -> Option<usize> {
        match self {
            ClosureDeltaError::NotStart { position }
            | ClosureDeltaError::BrokenLink { position }
            | ClosureDeltaError::Edited { position }
            | ClosureDeltaError::IllegalStep { position, .. }
            | ClosureDeltaError::Diverged { position, .. }
            | ClosureDeltaError::OutputMismatch { position, .. }
            | ClosureDeltaError::Tampered { position, .. }
            | ClosureDeltaError::Decode { position, .. } => Some(*position),
            ClosureDeltaError::Empty | ClosureDeltaError::Budget(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::closure::step::{GovernanceDecision, Next, Session};
    use crate::closure::task::Spec;
    use crate::closure::verdict::{Severity, ValidatorResult, Verdict};
    use crate::id::ValidatorId;

    fn resolved_after_one_fix() -> Closure {
        let task = Task::new(TaskId::new("x").unwrap(), Spec::new("intent"));
        let session = Session::new("build", "p").unwrap();
        let failing = Verdict::new([ValidatorResult::new(
            ValidatorId::new("tests").unwrap(),
            Severity::Blocker,
            true,
            "test a ... FAILED",
        )]);
        let mut posts = vec![Verdict::clean(), failing].into_iter().rev();
        let mut closure = Closure::start(task, session, RecoveryPolicy::default());
        loop {
            closure = match closure {
                Closure::Governance(due) => due.feed(GovernanceDecision::Approve),
                Closure::PreValidate(due) => due.feed(Verdict::clean()),
                Closure::Execute(due) => due.feed(ExecutionOutput::new("done")),
                Closure::PostValidate(due) => due.feed(posts.next().unwrap_or_default()),
                Closure::MoveNext(due) => due.feed(Next::Complete),
                done @ Closure::Done(_) => return done,
            };
        }
    }

    #[test]
    fn a_step_is_the_answer_it_was_fed_and_what_followed_from_it() {
        let closure = resolved_after_one_fix();
        let kinds: Vec<Vec<&str>> = closure
            .history()
            .iter()
            .map(|d| d.events().iter().map(AuditEvent::kind).collect())
            .collect();
        assert_eq!(
            kinds,
            [
                vec!["closure_started"],
                vec!["governed"],
                vec!["pre_validated"],
                vec!["executed"],
                vec!["post_validated", "subtask_spawned"],
                vec!["governed"],
                vec!["pre_validated"],
                vec!["executed"],
                vec!["post_validated"],
                vec!["moved_next", "recovery_resolved"],
            ]
        );
        // The deltas chain: each links to the head the one before it ended at.
        let history = closure.history();
        assert!(history.windows(2).all(|w| w[1].prev() == w[0].head()));
        assert_eq!(
            history.last().map(ClosureDelta::head),
            Some(closure.audit().head())
        );
        assert_eq!(closure.step_delta(), history[history.len() - 1]);
    }

    #[test]
    fn only_the_start_and_executions_carry_a_payload() {
        let history = resolved_after_one_fix().history();
        for delta in &history {
            let expected = match delta.events()[0] {
                AuditEvent::ClosureStarted { .. } => "start",
                AuditEvent::Executed { .. } => "output",
                _ => "none",
            };
            let found = match delta.payload {
                Payload::Start(_) => "start",
                Payload::Output(_) => "output",
                Payload::None => "none",
            };
            assert_eq!(found, expected);
        }
    }
}
