//! Folding evidence events into evidence, and why a sequence does not fold.

use super::BatchEvidence;
use super::EVIDENCE_VERSION;
use super::FAILURE_HISTORY_LIMIT;
use super::Tasks;
use super::event::EvidenceEvent;
use super::event::Settlement;
use super::history::ClosureCall;
use super::history::FailureKind;
use super::history::FailureNote;
use super::history::RecoveryRecord;
use super::index_of;
use super::task::RejectedAttempt;
use super::task::TaskEvidence;
use crate::batch::candidate::AcceptedOutput;
use crate::id::TaskId;
use crate::id::digest::Digest;
use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

/// Why a sequence of evidence events does not fold into evidence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FoldError {
    /// The first event is not `Started`, or `Started` appears twice.
    #[error(
        "fold evidence event {index}: the batch must start exactly once, first; the journal does not begin with its run's start or holds two runs: move it aside and start the run again"
    )]
    NotStarted {
        /// The event's position.
        index: u64,
    },
    /// The evidence was written in a format version this build does not read.
    #[error(
        "fold evidence: unsupported evidence_version {found} (this build reads {EVIDENCE_VERSION})"
    )]
    UnsupportedVersion {
        /// The version found.
        found: u32,
    },
    /// The inventory lists a task twice.
    #[error("fold evidence: the batch inventory lists task {task} twice")]
    DuplicateTask {
        /// The task listed twice.
        task: TaskId,
    },
    /// An event names a task that is not in the inventory.
    #[error("fold evidence event {index}: task {task} is not in the batch inventory")]
    UnknownTask {
        /// The event's position.
        index: u64,
        /// The task.
        task: TaskId,
    },
    /// An event does not follow from the task's state (for example a settlement without its
    /// reservation, or a call to an accepted task).
    #[error(
        "fold evidence event {index}: a `{event}` event for task {task} cannot follow the events before it (the task was {state}); the journal was edited or written by two runs at once: restore it from a copy, or move it aside and start the run again"
    )]
    OutOfOrder {
        /// The event's position.
        index: u64,
        /// The task.
        task: TaskId,
        /// Which event.
        event: &'static str,
        /// What the events before it say about the task.
        state: String,
    },
    /// An accepted output's files do not match the digest it was accepted under.
    #[error(
        "fold evidence event {index}: accepted output of task {task} does not match its digest {digest}, so it was changed after it was accepted; restore the journal from a copy, or move it aside and start the run again"
    )]
    DigestMismatch {
        /// The event's position.
        index: u64,
        /// The task.
        task: TaskId,
        /// The recorded digest.
        digest: Digest,
    },
}

impl BatchEvidence {
    /// Folds a whole event sequence.
    ///
    /// # Errors
    ///
    /// [`FoldError`] when the sequence does not start with `Started`, names an unknown task,
    /// has an event out of order, or holds an accepted output whose digest does not match.
    pub fn fold(events: impl IntoIterator<Item = EvidenceEvent>) -> Result<Self, FoldError> {
        let mut events = events.into_iter();
        let first = events.next().ok_or(FoldError::NotStarted { index: 0 })?;
        let mut evidence = Self::start(&first)?;
        for event in events {
            evidence.apply(event)?;
        }
        Ok(evidence)
    }

    /// This evidence with `events` folded on after it: how a store that keeps a checkpoint
    /// and appends each commit's events after it reads the whole back, without writing the
    /// whole evidence at every commit. Equal to folding every event from the start.
    ///
    /// ```
    /// use kleene::AppBuildPlan;
    /// use kleene::batch::{Batch, BatchEvidence};
    /// use kleene::id::ChannelId;
    ///
    /// let plan = AppBuildPlan::from_json(r#"{"tasks": [{"id": "a", "kind": {"lane": "config"},
    ///     "owner": "x", "spec": {"intent": "a"}, "owned_paths": ["a.txt"]}]}"#)?
    ///     .validate()?;
    /// let (mut machine, mut events) = Batch::new(&plan, ChannelId::new("c")?).machine(None)?;
    /// let checkpoint = BatchEvidence::fold(events.clone())?;
    /// let commit = machine.reserve(1)?.events;
    /// events.extend(commit.clone());
    /// let whole = checkpoint.extended(commit)?;
    /// assert_eq!(whole.digest(), BatchEvidence::fold(events)?.digest());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`FoldError`] when an event does not follow (an unknown task, one out of order, an
    /// accepted output whose digest does not match).
    pub fn extended(
        mut self,
        events: impl IntoIterator<Item = EvidenceEvent>,
    ) -> Result<Self, FoldError> {
        for event in events {
            self.apply(event)?;
        }
        Ok(self)
    }

    /// Starts a fold with the `Started` event. By reference: the evidence copies each id of
    /// the inventory anyway, so a run that journals its start by value (a memory journal
    /// keeps it) need not copy the whole inventory first.
    pub(crate) fn start(event: &EvidenceEvent) -> Result<Self, FoldError> {
        Self::start_with(event, None)
    }

    /// [`start`](Self::start) for a `Started` event made from a validated plan whose
    /// topological order is `order`: the index by id is left to be built if a lookup ever
    /// needs it (the plan's ids are unique), and the evidence lists the plan's ids
    /// themselves when the inventory names exactly them (checked by address: no copy of
    /// each id, and no hashing of it).
    pub(crate) fn start_planned(
        event: &EvidenceEvent,
        order: Arc<[TaskId]>,
    ) -> Result<Self, FoldError> {
        Self::start_with(event, Some(order))
    }

    fn start_with(
        event: &EvidenceEvent,
        planned: Option<Arc<[TaskId]>>,
    ) -> Result<Self, FoldError> {
        let EvidenceEvent::Started {
            channel,
            plan_digest,
            evidence_version,
            inputs,
            recovery,
            inventory,
        } = event
        else {
            return Err(FoldError::NotStarted { index: 0 });
        };
        let (plan_digest, evidence_version, recovery) =
            (*plan_digest, *evidence_version, *recovery);
        if evidence_version != EVIDENCE_VERSION {
            return Err(FoldError::UnsupportedVersion {
                found: evidence_version,
            });
        }
        let (channel, inputs) = (channel.clone(), inputs.clone());
        let unique = planned.is_some();
        let order: Arc<[TaskId]> = match planned {
            Some(order)
                if order.len() == inventory.len()
                    && order
                        .iter()
                        .zip(inventory)
                        .all(|(id, e)| id.shares_allocation_with(&e.task)) =>
            {
                order
            }
            _ => inventory.iter().map(|e| e.task.clone()).collect(),
        };
        let tasks = Tasks::new(inventory);
        let index = if unique {
            OnceLock::new()
        } else {
            OnceLock::from(index_of(&order).map_err(|task| FoldError::DuplicateTask { task })?)
        };
        Ok(Self {
            channel,
            plan_digest,
            evidence_version,
            inputs,
            recovery,
            order,
            tasks,
            recoveries: Vec::new(),
            failure_history: VecDeque::new(),
            events: 1,
            closures: Vec::new(),
            fixes_used: 0,
            index: Arc::new(index),
        })
    }

    pub(super) fn note(&mut self, task: &TaskId, attempt: u32, kind: FailureKind) {
        if self.failure_history.len() == FAILURE_HISTORY_LIMIT {
            self.failure_history.pop_front();
        }
        self.failure_history.push_back(FailureNote {
            task: task.clone(),
            attempt,
            kind,
        });
    }

    /// Applies one more event read from outside (a journal): accepted outputs are verified
    /// against their digests.
    pub(crate) fn apply(&mut self, event: EvidenceEvent) -> Result<(), FoldError> {
        self.apply_checked(event, true)
    }

    /// Applies an event the executor just made; `verify` is false only when the accepted
    /// digest was computed from the same candidate a moment ago.
    pub(crate) fn apply_checked(
        &mut self,
        event: EvidenceEvent,
        verify: bool,
    ) -> Result<(), FoldError> {
        self.apply_at(None, event, verify)
    }

    /// [`apply_checked`](Self::apply_checked) with where the event's task sits, when the
    /// caller knows it: the task is then found without a lookup by id (the hint is checked,
    /// and a wrong one falls back to the lookup).
    pub(crate) fn apply_at(
        &mut self,
        hint: Option<usize>,
        event: EvidenceEvent,
        verify: bool,
    ) -> Result<(), FoldError> {
        let index = self.events;
        let out_of_order =
            |task: &TaskId, event: &'static str, t: &TaskEvidence| FoldError::OutOfOrder {
                index,
                task: task.clone(),
                event,
                state: t.describe(),
            };
        match event {
            EvidenceEvent::Started { .. } => return Err(FoldError::NotStarted { index }),
            EvidenceEvent::Reserved {
                task,
                attempt,
                input_digest,
            } => return self.apply_reserved(hint, &task, attempt, input_digest),
            EvidenceEvent::Settled {
                task,
                attempt,
                settlement,
            } => {
                let t = self.task_hinted(index, &task, hint)?;
                let Some((reserved, input_digest)) = t.in_flight else {
                    return Err(out_of_order(&task, "settled", t));
                };
                if reserved != attempt {
                    return Err(out_of_order(&task, "settled", t));
                }
                t.in_flight = None;
                t.last_input_digest = Some(input_digest);
                let kind = match settlement {
                    Settlement::Accepted { candidate, digest } => {
                        let accepted = if verify {
                            AcceptedOutput::verified(candidate, digest)
                        } else {
                            Some(AcceptedOutput::trusted(candidate, digest))
                        };
                        let accepted = accepted.ok_or_else(|| FoldError::DigestMismatch {
                            index,
                            task: task.clone(),
                            digest,
                        })?;
                        t.accepted = Some(accepted);
                        None
                    }
                    Settlement::Rejected {
                        candidate,
                        rejection,
                    } => {
                        t.rejections.push(RejectedAttempt {
                            attempt,
                            input_digest,
                            candidate,
                            rejection,
                        });
                        Some(FailureKind::Rejected)
                    }
                    Settlement::Infrastructure(failure) => {
                        t.infrastructure = Some(Box::new((attempt, failure)));
                        Some(FailureKind::Infrastructure)
                    }
                };
                if let Some(kind) = kind {
                    self.note(&task, attempt, kind);
                }
            }
            EvidenceEvent::Interrupted { task, attempt } => {
                let t = self.task_hinted(index, &task, hint)?;
                if t.in_flight.map(|(a, _)| a) != Some(attempt) {
                    return Err(out_of_order(&task, "interrupted", t));
                }
                t.in_flight = None;
                t.interrupted.push(attempt);
                self.note(&task, attempt, FailureKind::Interrupted);
            }
            EvidenceEvent::Withdrawn { task, attempt, .. } => {
                let t = self.task_hinted(index, &task, hint)?;
                if t.in_flight.map(|(a, _)| a) != Some(attempt) {
                    return Err(out_of_order(&task, "withdrawn", t));
                }
                t.in_flight = None;
                t.calls = attempt - 1;
                if let Some(call) = self
                    .closures
                    .iter_mut()
                    .rev()
                    .find(|c| c.task == task && c.attempt == attempt && !c.withdrawn)
                {
                    call.withdrawn = true;
                }
            }
            EvidenceEvent::Drained { task, blocked_by } => {
                if !self.index().contains_key(&blocked_by) {
                    return Err(FoldError::UnknownTask {
                        index,
                        task: blocked_by,
                    });
                }
                let t = self.task_hinted(index, &task, hint)?;
                if t.accepted.is_some() || t.in_flight.is_some() || t.blocked_by.is_some() {
                    return Err(out_of_order(&task, "drained", t));
                }
                t.blocked_by = Some(blocked_by);
            }
            EvidenceEvent::RecoveryConsumed {
                request,
                granted,
                released,
                refused,
            } => {
                for root in &granted {
                    let t = self.task_mut(index, root)?;
                    if t.correction_granted || t.accepted.is_some() || t.rejections.is_empty() {
                        return Err(out_of_order(root, "recovery granted", t));
                    }
                    t.correction_granted = true;
                }
                for task in &released {
                    let t = self.task_mut(index, task)?;
                    if t.blocked_by.take().is_none() {
                        return Err(out_of_order(task, "released", t));
                    }
                }
                for (task, _) in &refused {
                    self.task_mut(index, task)?;
                }
                self.recoveries.push(RecoveryRecord {
                    request,
                    granted,
                    released,
                    refused,
                });
            }
            EvidenceEvent::FixDrawn { task, attempt, .. } => {
                let t = self.task_hinted(index, &task, hint)?;
                if t.in_flight.map(|(a, _)| a) != Some(attempt) {
                    return Err(out_of_order(&task, "fix drawn", t));
                }
                let call = self.closure_call(&task, attempt);
                if call.settled.is_some() {
                    let t = self.task_hinted(index, &task, hint)?;
                    return Err(out_of_order(&task, "fix drawn", t));
                }
                let before = call.fix_attempts_used();
                call.fixes_drawn = call.fixes_drawn.saturating_add(1);
                let after = call.fix_attempts_used();
                self.fixes_used = self.fixes_used.saturating_add(after - before);
            }
            EvidenceEvent::ClosureSettled {
                task,
                attempt,
                closure,
            } => {
                let t = self.task_hinted(index, &task, hint)?;
                if t.in_flight.map(|(a, _)| a) != Some(attempt) {
                    return Err(out_of_order(&task, "closure settled", t));
                }
                let call = self.closure_call(&task, attempt);
                // A closure spawns every fix it draws, so it cannot settle with fewer.
                if call.settled.is_some() || closure.fix_attempts < call.fixes_drawn {
                    let t = self.task_hinted(index, &task, hint)?;
                    return Err(out_of_order(&task, "closure settled", t));
                }
                let before = call.fix_attempts_used();
                call.settled = Some(closure);
                let after = call.fix_attempts_used();
                self.fixes_used = self.fixes_used.saturating_add(after - before);
            }
            EvidenceEvent::Reused {
                task,
                from,
                candidate,
                digest,
            } => {
                let t = self.task_hinted(index, &task, hint)?;
                // Only a task that could be called now takes a reused output: nothing in
                // flight, nothing accepted, not drained.
                if t.accepted.is_some() || t.in_flight.is_some() || t.blocked_by.is_some() {
                    return Err(out_of_order(&task, "reused", t));
                }
                let accepted = if verify {
                    AcceptedOutput::verified(candidate, digest)
                } else {
                    Some(AcceptedOutput::trusted(candidate, digest))
                };
                t.accepted = Some(accepted.ok_or_else(|| FoldError::DigestMismatch {
                    index,
                    task: task.clone(),
                    digest,
                })?);
                t.reused = Some(Box::new(from));
            }
        }
        self.events += 1;
        Ok(())
    }

    /// Folds a `Reserved` event of `task` from its parts: the machine folds the reservation
    /// it journals without a copy of the event (one id clone and drop per call fewer).
    pub(crate) fn apply_reserved(
        &mut self,
        hint: Option<usize>,
        task: &TaskId,
        attempt: u32,
        input_digest: Digest,
    ) -> Result<(), FoldError> {
        let (index, recovery) = (self.events, self.recovery);
        let t = self.task_hinted(index, task, hint)?;
        if !t.may_reserve(recovery) || attempt != t.calls + 1 {
            return Err(FoldError::OutOfOrder {
                index,
                task: task.clone(),
                event: "reserved",
                state: t.describe(),
            });
        }
        t.calls = attempt;
        t.in_flight = Some((attempt, input_digest));
        self.events += 1;
        Ok(())
    }

    /// The closure entry of call `attempt` of `task` (a withdrawn call's number is reused by
    /// the next call, which gets its own entry), made if the call has none yet.
    fn closure_call(&mut self, task: &TaskId, attempt: u32) -> &mut ClosureCall {
        let found = self
            .closures
            .iter()
            .rposition(|c| &c.task == task && c.attempt == attempt && !c.withdrawn);
        let at = match found {
            Some(at) => at,
            None => {
                // Kept in plan order (then call order), not in the order calls happened to
                // end: calls settled concurrently in another order give the same evidence.
                let index = self
                    .index
                    .get_or_init(|| super::index_of_unique(&self.order));
                let key = (index.get(task).copied(), attempt);
                let at = self
                    .closures
                    .partition_point(|c| (index.get(&c.task).copied(), c.attempt) <= key);
                self.closures.insert(
                    at,
                    ClosureCall {
                        task: task.clone(),
                        attempt,
                        fixes_drawn: 0,
                        settled: None,
                        withdrawn: false,
                    },
                );
                at
            }
        };
        &mut self.closures[at]
    }

    fn task_hinted(
        &mut self,
        index: u64,
        task: &TaskId,
        hint: Option<usize>,
    ) -> Result<&mut TaskEvidence, FoldError> {
        match hint {
            Some(i)
                if self
                    .order
                    .get(i)
                    .is_some_and(|id| id.shares_allocation_with(task) || id == task) =>
            {
                self.task_at_mut(index, task, i)
            }
            _ => self.task_mut(index, task),
        }
    }

    fn task_mut(&mut self, index: u64, task: &TaskId) -> Result<&mut TaskEvidence, FoldError> {
        match self.index().get(task) {
            Some(&i) => self.task_at_mut(index, task, i),
            None => Err(FoldError::UnknownTask {
                index,
                task: task.clone(),
            }),
        }
    }

    /// The evidence of `task` at `i` (the inventory has one entry per id, so `i` is in
    /// range; a task it is not is reported as unknown rather than trusted).
    fn task_at_mut(
        &mut self,
        index: u64,
        task: &TaskId,
        i: usize,
    ) -> Result<&mut TaskEvidence, FoldError> {
        self.tasks.get_mut(i).ok_or_else(|| FoldError::UnknownTask {
            index,
            task: task.clone(),
        })
    }
}
