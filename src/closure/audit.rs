//! The closure tree's audit trail: typed events in an append-only, hash-chained log.
//!
//! Every phase of every task of a closure, every spawned fix subtask and the closure's end
//! (`recovery_resolved`, `recovery_exhausted`, `recovery_stalled`, or another halt) is an
//! [`AuditEvent`]. [`AuditLog`] chains them: entry `i`'s blake3 digest covers its position,
//! the digest of entry `i - 1` and the canonically encoded event, and the log remembers its
//! head. [`AuditLog::verify`] recomputes the chain and names the first entry that was
//! edited, dropped, inserted or reordered. An [`AuditSink`] receives entries as they are
//! appended, so an orchestrator can forward them live.
//!
//! ```
//! use kleene::{closure::audit::AuditEvent, closure::audit::AuditLog, id::TaskId, id::ValidatorId};
//!
//! let mut log = AuditLog::new();
//! log.append(AuditEvent::SubtaskSpawned {
//!     parent_ref: TaskId::new("x")?,
//!     task_ref: TaskId::new("x_fix_1")?,
//!     depth: 1,
//!     triggering_validators: vec![ValidatorId::new("tests")?],
//! });
//! assert_eq!(log.len(), 1);
//! assert!(log.verify().is_ok());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The chain proves the log is internally consistent. It carries no key, so whoever can
//! rewrite the whole log can recompute it: anchor [`AuditLog::head`] somewhere the writer
//! cannot reach (an acceptance record, a code-host commit) to detect a wholesale rewrite.

use crate::id::digest::{Digest, Purpose, canonical_enum};
use crate::{
    closure::record::ClosureFailure, closure::step::ExhaustedBound,
    closure::step::GovernanceDecision, closure::step::HaltReason, closure::step::Next,
    closure::step::Session, closure::verdict::Verdict, id::TaskId, id::ValidatorId,
};

/// A phase of the inner loop, as named in audit events and agent failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LoopPhase {
    /// Governance decides whether the step may run.
    Governance,
    /// Pre-execute validation.
    PreValidate,
    /// Execution.
    Execute,
    /// Post-execute validation.
    PostValidate,
    /// Deciding whether the task is complete or continues.
    MoveNext,
}

impl LoopPhase {
    /// The snake-case name (`pre_validate`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            LoopPhase::Governance => "governance",
            LoopPhase::PreValidate => "pre_validate",
            LoopPhase::Execute => "execute",
            LoopPhase::PostValidate => "post_validate",
            LoopPhase::MoveNext => "move_next",
        }
    }
}

impl std::fmt::Display for LoopPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing that happened in a closure.
///
/// Its serde form is the one closure payloads write it in (format version 1).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuditEvent {
    /// A closure started on its root task, in a session (every subtask shares it).
    ClosureStarted {
        /// The root task.
        root_task_ref: TaskId,
        /// The session of the whole closure tree.
        session: Session,
    },
    /// Governance decided about one iteration of one task.
    Governed {
        /// The task.
        task_ref: TaskId,
        /// The iteration (from 1).
        iteration: u32,
        /// The decision.
        decision: GovernanceDecision,
        /// The digest of the validation token minted on approval (one per task
        /// iteration, never reused).
        token: Option<Digest>,
    },
    /// Pre-execute validators reported.
    PreValidated {
        /// The task.
        task_ref: TaskId,
        /// The iteration.
        iteration: u32,
        /// Their verdict.
        verdict: Verdict,
    },
    /// Execution reported.
    Executed {
        /// The task.
        task_ref: TaskId,
        /// The iteration.
        iteration: u32,
        /// The canonical digest of the execution output's text.
        output: Digest,
    },
    /// Post-execute validators reported.
    PostValidated {
        /// The task.
        task_ref: TaskId,
        /// The iteration.
        iteration: u32,
        /// Their verdict.
        verdict: Verdict,
    },
    /// After a clean iteration the task completed or continued.
    MovedNext {
        /// The task.
        task_ref: TaskId,
        /// The iteration.
        iteration: u32,
        /// What came next.
        next: Next,
    },
    /// A fix subtask was spawned (`subtask_spawned`).
    SubtaskSpawned {
        /// The task whose attempt failed.
        parent_ref: TaskId,
        /// The new fix subtask.
        task_ref: TaskId,
        /// Its depth.
        depth: u32,
        /// The validators whose failures triggered it.
        triggering_validators: Vec<ValidatorId>,
    },
    /// The closure reached its fixpoint (`recovery_resolved`).
    RecoveryResolved {
        /// The root task.
        root_task_ref: TaskId,
        /// The task that completed cleanly.
        task_ref: TaskId,
        /// Its depth.
        depth: u32,
        /// Fix subtasks spawned in this closure.
        fix_attempts: u32,
    },
    /// A recovery bound was reached (`recovery_exhausted`).
    RecoveryExhausted {
        /// The root task.
        root_task_ref: TaskId,
        /// The task whose failure needed another fix.
        task_ref: TaskId,
        /// Its depth.
        depth: u32,
        /// Which bound.
        bound: ExhaustedBound,
    },
    /// An attempt repeated the previous attempt's verdict (`recovery_stalled`).
    RecoveryStalled {
        /// The root task.
        root_task_ref: TaskId,
        /// The task whose verdict repeated its parent's.
        task_ref: TaskId,
        /// Its depth.
        depth: u32,
    },
    /// The closure halted for another reason (governance denial, pre-execute rejection,
    /// non-overridable blocker, withheld warning, iteration cap).
    Halted {
        /// The task that halted.
        task_ref: TaskId,
        /// The iteration it halted in.
        iteration: u32,
        /// Why.
        reason: HaltReason,
    },
    /// The closure stopped for a reason outside the verdicts (the agent's own error, an
    /// unnameable fix id).
    Failed {
        /// The task.
        task_ref: TaskId,
        /// The iteration.
        iteration: u32,
        /// What failed.
        failure: ClosureFailure,
    },
}

impl AuditEvent {
    /// The snake-case event type (`subtask_spawned`, `recovery_stalled`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            AuditEvent::ClosureStarted { .. } => "closure_started",
            AuditEvent::Governed { .. } => "governed",
            AuditEvent::PreValidated { .. } => "pre_validated",
            AuditEvent::Executed { .. } => "executed",
            AuditEvent::PostValidated { .. } => "post_validated",
            AuditEvent::MovedNext { .. } => "moved_next",
            AuditEvent::SubtaskSpawned { .. } => "subtask_spawned",
            AuditEvent::RecoveryResolved { .. } => "recovery_resolved",
            AuditEvent::RecoveryExhausted { .. } => "recovery_exhausted",
            AuditEvent::RecoveryStalled { .. } => "recovery_stalled",
            AuditEvent::Halted { .. } => "halted",
            AuditEvent::Failed { .. } => "closure_failed",
        }
    }

    /// The task the event is about (the root, for `closure_started`).
    pub fn task_ref(&self) -> &TaskId {
        match self {
            AuditEvent::ClosureStarted { root_task_ref, .. } => root_task_ref,
            AuditEvent::Governed { task_ref, .. }
            | AuditEvent::PreValidated { task_ref, .. }
            | AuditEvent::Executed { task_ref, .. }
            | AuditEvent::PostValidated { task_ref, .. }
            | AuditEvent::MovedNext { task_ref, .. }
            | AuditEvent::SubtaskSpawned { task_ref, .. }
            | AuditEvent::RecoveryResolved { task_ref, .. }
            | AuditEvent::RecoveryExhausted { task_ref, .. }
            | AuditEvent::RecoveryStalled { task_ref, .. }
            | AuditEvent::Halted { task_ref, .. }
            | AuditEvent::Failed { task_ref, .. } => task_ref,
        }
    }

    /// The canonical digest of the event: its kind, then every field, length-prefixed.
    pub fn digest(&self) -> Digest {
        Digest::of("audit event", self)
    }
}

// Each event encodes its kind, then its fields; the enums it carries encode their snake-case
// codes. Tokens and outputs enter by digest.
canonical_enum!(AuditEvent {
    ClosureStarted { root_task_ref, session } => "closure_started",
    Governed { task_ref, iteration, decision, token } => "governed",
    PreValidated { task_ref, iteration, verdict } => "pre_validated",
    Executed { task_ref, iteration, output } => "executed",
    PostValidated { task_ref, iteration, verdict } => "post_validated",
    MovedNext { task_ref, iteration, next } => "moved_next",
    SubtaskSpawned { parent_ref, task_ref, depth, triggering_validators } => "subtask_spawned",
    RecoveryResolved { root_task_ref, task_ref, depth, fix_attempts } => "recovery_resolved",
    RecoveryExhausted { root_task_ref, task_ref, depth, bound } => "recovery_exhausted",
    RecoveryStalled { root_task_ref, task_ref, depth } => "recovery_stalled",
    Halted { task_ref, iteration, reason } => "halted",
    Failed { task_ref, iteration, failure } => "closure_failed",
});

/// One entry of an [`AuditLog`]: the event, the previous entry's digest and its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    pub(super) event: AuditEvent,
    pub(super) prev: Digest,
    pub(super) hash: Digest,
}

impl AuditEntry {
    /// The event.
    pub fn event(&self) -> &AuditEvent {
        &self.event
    }

    /// The digest of the entry before it ([`AuditLog::GENESIS`] for the first).
    pub fn prev(&self) -> Digest {
        self.prev
    }

    /// This entry's digest: covers its position, `prev` and the event.
    pub fn hash(&self) -> Digest {
        self.hash
    }
}

/// The digest of the entry at `index`: its position, the previous entry's digest, and the
/// event's canonical encoding, in one pass.
fn entry_hash(index: usize, prev: &Digest, event: &AuditEvent) -> Digest {
    static ENTRY: Purpose = Purpose::new("audit entry");
    ENTRY.hasher().put(&(index as u64, prev, event)).finish()
}

/// Why an audit log failed verification. Each variant names the entry where the chain
/// breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// Entry `index` does not link to the entry before it: an entry was dropped, inserted or
    /// moved at that position.
    #[error(
        "verify audit log: entry {index} does not link to its predecessor (an entry was dropped, inserted or reordered)"
    )]
    BrokenLink {
        /// The first entry whose link is broken.
        index: usize,
    },
    /// Entry `index`'s digest does not match its content: it was edited.
    #[error("verify audit log: entry {index} does not match its digest (it was edited)")]
    EntryEdited {
        /// The edited entry.
        index: usize,
    },
    /// The log does not end at its recorded head: entries were dropped from, or appended
    /// to, its end.
    #[error(
        "verify audit log: the log of {len} entries does not end at its recorded head (entries were dropped or appended at the end)"
    )]
    HeadMismatch {
        /// How many entries the log holds.
        len: usize,
    },
}

impl AuditError {
    /// The index of the entry where verification failed (for a head mismatch, the length:
    /// the position right after the last entry present).
    pub fn index(&self) -> usize {
        match self {
            AuditError::BrokenLink { index } | AuditError::EntryEdited { index } => *index,
            AuditError::HeadMismatch { len } => *len,
        }
    }
}

/// An append-only, hash-chained log of [`AuditEvent`]s.
///
/// Deserialising does not verify: call [`AuditLog::verify`] on a log read from outside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditLog {
    pub(super) entries: Vec<AuditEntry>,
    pub(super) head: Digest,
}

impl Default for AuditLog {
    fn default() -> Self {
        Self::new()
    }
}

impl AuditLog {
    /// The `prev` of the first entry, and the head of an empty log: all zeros.
    pub const GENESIS: Digest = Digest::from_bytes([0; 32]);

    /// An empty log.
    pub fn new() -> Self {
        Self {
            // A closure that resolves at depth 3 appends about two dozen entries.
            entries: Vec::with_capacity(32),
            head: Self::GENESIS,
        }
    }

    /// Appends `event`, chained to the current head, and returns the new entry.
    pub fn append(&mut self, event: AuditEvent) -> &AuditEntry {
        let hash = entry_hash(self.entries.len(), &self.head, &event);
        self.entries.push(AuditEntry {
            event,
            prev: self.head,
            hash,
        });
        self.head = hash;
        &self.entries[self.entries.len() - 1]
    }

    /// The entries, oldest first; an entry's index is its position.
    pub fn entries(&self) -> &[AuditEntry] {
        &self.entries
    }

    /// The events, oldest first.
    pub fn events(&self) -> impl Iterator<Item = &AuditEvent> {
        self.entries.iter().map(AuditEntry::event)
    }

    /// How many entries the log holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the log holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The digest of the last entry ([`AuditLog::GENESIS`] when empty): anchor it elsewhere
    /// to detect a wholesale rewrite.
    pub fn head(&self) -> Digest {
        self.head
    }

    /// Recomputes the chain.
    ///
    /// # Errors
    ///
    /// An [`AuditError`] naming the first entry that was edited, dropped, inserted or
    /// reordered, or a [`AuditError::HeadMismatch`] when entries were dropped from or added
    /// to the end.
    ///
    /// # Complexity
    ///
    /// One blake3 pass over every event: linear in the log's size.
    pub fn verify(&self) -> Result<(), AuditError> {
        let mut prev = Self::GENESIS;
        for (index, entry) in self.entries.iter().enumerate() {
            if entry.prev != prev {
                return Err(AuditError::BrokenLink { index });
            }
            if entry_hash(index, &entry.prev, &entry.event) != entry.hash {
                return Err(AuditError::EntryEdited { index });
            }
            prev = entry.hash;
        }
        if prev != self.head {
            return Err(AuditError::HeadMismatch {
                len: self.entries.len(),
            });
        }
        Ok(())
    }
}

/// Receives audit entries as they are appended, so an orchestrator can forward them live
/// (to a database, a message bus, `tracing`).
///
/// # Examples
///
/// ```
/// use kleene::closure::audit::{AuditEntry, AuditSink};
///
/// #[derive(Default)]
/// struct Kinds(Vec<&'static str>);
/// impl AuditSink for Kinds {
///     fn record(&mut self, _index: usize, entry: &AuditEntry) {
///         self.0.push(entry.event().kind());
///     }
/// }
/// ```
pub trait AuditSink {
    /// Called once per entry, in order, right after it was appended at `index`.
    fn record(&mut self, index: usize, entry: &AuditEntry);
}

/// Keeps a copy of every entry.
impl AuditSink for Vec<AuditEntry> {
    fn record(&mut self, _index: usize, entry: &AuditEntry) {
        self.push(entry.clone());
    }
}

/// Discards every entry.
impl AuditSink for () {
    fn record(&mut self, _index: usize, _entry: &AuditEntry) {}
}

impl<S: AuditSink + ?Sized> AuditSink for &mut S {
    fn record(&mut self, index: usize, entry: &AuditEntry) {
        (**self).record(index, entry);
    }
}

/// An [`AuditSink`] that emits every entry as a `tracing` event at INFO level, target
/// `kleene::audit`, with the fields `index`, `kind`, `task` and `hash` (feature `tracing`).
#[cfg(feature = "tracing")]
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingSink;

#[cfg(feature = "tracing")]
impl AuditSink for TracingSink {
    fn record(&mut self, index: usize, entry: &AuditEntry) {
        tracing::info!(
            target: "kleene::audit",
            index,
            kind = entry.event().kind(),
            task = %entry.event().task_ref(),
            hash = %entry.hash(),
            "audit event"
        );
    }
}

// Enters a digest as its text.
crate::id::digest::canonical_text!(LoopPhase);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{closure::verdict::Severity, closure::verdict::ValidatorResult};

    fn id(s: &str) -> TaskId {
        TaskId::new(s).unwrap()
    }

    fn sample() -> AuditLog {
        let mut log = AuditLog::new();
        let verdict = Verdict::new([ValidatorResult::new(
            ValidatorId::new("tests").unwrap(),
            Severity::Blocker,
            true,
            "1 failed",
        )]);
        log.append(AuditEvent::PostValidated {
            task_ref: id("x"),
            iteration: 1,
            verdict,
        });
        log.append(AuditEvent::SubtaskSpawned {
            parent_ref: id("x"),
            task_ref: id("x_fix_1"),
            depth: 1,
            triggering_validators: vec![ValidatorId::new("tests").unwrap()],
        });
        log.append(AuditEvent::RecoveryResolved {
            root_task_ref: id("x"),
            task_ref: id("x_fix_1"),
            depth: 1,
            fix_attempts: 1,
        });
        log
    }

    #[test]
    fn a_fresh_log_verifies() {
        assert_eq!(AuditLog::new().verify(), Ok(()));
        let log = sample();
        assert_eq!(log.verify(), Ok(()));
        assert_eq!(log.entries()[1].prev(), log.entries()[0].hash());
        assert_eq!(log.head(), log.entries()[2].hash());
    }

    #[test]
    fn each_kind_of_tampering_is_named() {
        let log = sample();
        let mut edited = log.clone();
        edited.entries[1].event = AuditEvent::SubtaskSpawned {
            parent_ref: id("x"),
            task_ref: id("x_fix_1"),
            depth: 2,
            triggering_validators: vec![],
        };
        assert_eq!(edited.verify(), Err(AuditError::EntryEdited { index: 1 }));

        let mut dropped = log.clone();
        dropped.entries.remove(1);
        assert_eq!(dropped.verify(), Err(AuditError::BrokenLink { index: 1 }));

        let mut truncated = log.clone();
        truncated.entries.pop();
        assert_eq!(truncated.verify(), Err(AuditError::HeadMismatch { len: 2 }));

        let mut swapped = log.clone();
        swapped.entries.swap(0, 1);
        assert_eq!(swapped.verify(), Err(AuditError::BrokenLink { index: 0 }));

        let mut inserted = log.clone();
        let copy = inserted.entries[0].clone();
        inserted.entries.insert(1, copy);
        assert_eq!(inserted.verify(), Err(AuditError::BrokenLink { index: 1 }));
        assert_eq!(AuditError::BrokenLink { index: 1 }.index(), 1);
    }

    #[test]
    fn events_digest_every_field() {
        let a = AuditEvent::RecoveryStalled {
            root_task_ref: id("x"),
            task_ref: id("x_fix_1"),
            depth: 1,
        };
        let b = AuditEvent::RecoveryStalled {
            root_task_ref: id("x"),
            task_ref: id("x_fix_1"),
            depth: 2,
        };
        assert_ne!(a.digest(), b.digest());
        assert_eq!(a.digest(), a.clone().digest());
        assert_eq!(a.kind(), "recovery_stalled");
    }
}

#[cfg(all(test, feature = "tracing"))]
mod tracing_tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tracing::subscriber::with_default;
    use tracing::{Event, Metadata, Subscriber, span};

    use super::*;

    /// Counts the events it is sent on the `kleene::audit` target.
    struct Counter(Arc<AtomicUsize>);

    impl Subscriber for Counter {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
            span::Id::from_u64(1)
        }
        fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
        fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
        fn event(&self, event: &Event<'_>) {
            if event.metadata().target() == "kleene::audit" {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        fn enter(&self, _: &span::Id) {}
        fn exit(&self, _: &span::Id) {}
    }

    #[test]
    fn the_tracing_sink_emits_one_event_per_entry() {
        let count = Arc::new(AtomicUsize::new(0));
        let mut log = AuditLog::new();
        log.append(AuditEvent::RecoveryStalled {
            root_task_ref: TaskId::new("x").unwrap(),
            task_ref: TaskId::new("x_fix_1").unwrap(),
            depth: 1,
        });
        with_default(Counter(count.clone()), || {
            let mut sink = TracingSink;
            for (i, e) in log.entries().iter().enumerate() {
                sink.record(i, e);
            }
        });
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }
}
