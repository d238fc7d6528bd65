//! The messages between a channel and its task workers: one call out, one reply back.
//!
//! ```
//! use kleene::batch::worker::InfrastructureFailure;
//! use kleene_restate::call::TaskReply;
//!
//! let reply = TaskReply::Failed(InfrastructureFailure::Transport { detail: "gone".into() });
//! assert!(reply.into_result().is_some_and(|r| r.is_err()));
//! assert!(TaskReply::Interrupted { nonce: "n".into() }.into_result().is_none());
//! ```

use kleene::batch::{
    Candidate, Proposal, Rejection, WorkerFailure, evidence::ClosureSettlement, machine::Dispatch,
    worker::InfrastructureFailure,
};
use kleene::closure::{ClosureRecord, record::ClosureRecordError};
use kleene::id::Digest;
use kleene::id::{ChannelId, TaskId};
use kleene::shell::PlanFilesManifest;
use serde::{Deserialize, Serialize};

/// The most bytes a call's closure record may take in its reply (its `to_json` text, as the
/// reply's JSON escapes it). With a candidate of at most
/// [`MAX_CALL_OUTPUT_BYTES`](crate::worker::MAX_CALL_OUTPUT_BYTES), as base64 (four
/// characters for three bytes), the reply stays well under the 32 MiB Restate refuses by
/// default. A record is
/// commands' output tails and verdicts, so only a runaway closure comes near it.
pub const MAX_CLOSURE_RECORD_BYTES: usize = 4 * 1024 * 1024;

/// One task call as the task-worker service receives it: the machine's owned dispatch, the
/// plan (its text and the digests of its files), and the accepted outputs its stage starts
/// from, by digest only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCall {
    /// The channel making the call.
    pub channel: ChannelId,
    /// The reserved call.
    pub dispatch: Dispatch,
    /// The plan file's text: the task's spec, commands, checks and fix, and the policy's
    /// inputs (the worker runs the call as one closure of the task). Empty when
    /// `plan_digest` names the plan instead.
    pub plan: String,
    /// The plan by digest: the worker reads its text from the channel's submission once per
    /// process and checks that the plan it rebuilds (with `plan_files`) has this digest.
    /// Sent instead of the text because every call carried the whole plan file (O(tasks)
    /// bytes a call, each copied into the channel's journal and the call's invocation).
    /// Absent from an earlier adapter's call, which carries the text (left out when absent,
    /// so such a call keeps its JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_digest: Option<Digest>,
    /// The plan's files by path and digest: the worker runs the call from its own copy of
    /// them (`KLEENE_PLAN_DIR`), fetched from the channel by digest. `None` only in a call
    /// an earlier adapter made (it named the submitter's directory), which a worker refuses.
    #[serde(default)]
    pub plan_files: Option<PlanFilesManifest>,
    /// Every transitive prerequisite and the digest of its accepted output, in the plan's
    /// topological order.
    pub inputs: Vec<(TaskId, Digest)>,
}

/// One fix attempt a call draws from its channel's run-wide budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FixDraw {
    /// The call's task.
    pub task: TaskId,
    /// The call's number.
    pub attempt: u32,
    /// The fix subtask the attempt is for.
    pub fix: TaskId,
    /// The run's budget: the draw is refused when this many were drawn on the channel.
    pub max: u32,
    /// The call's turn: the nonce of the worker's claim, which every attempt of one task-worker
    /// invocation shares. The ledger refuses a draw for a call number another execution drew
    /// under, and any draw once the channel has sealed the call. Absent from an earlier
    /// adapter's draw (left out when absent, so such a draw keeps its JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<String>,
}

/// The fix ledger's answer to a [`FixDraw`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum DrawAnswer {
    /// Granted, and durable in the ledger: the fix may run.
    Granted,
    /// The run's budget was drawn already.
    Spent,
    /// The channel sealed the call: its turn ended (its invocation was retried and found
    /// interrupted), so whatever still draws for it is an abandoned execution.
    Sealed,
    /// Another execution drew under the same call number first: a call number is one
    /// execution.
    OtherTurn,
}

impl DrawAnswer {
    /// Why the fix may not run, in words; `None` when it was granted.
    pub fn refusal(self, draw: &FixDraw, channel: &ChannelId) -> Option<String> {
        let call = format!("call {} of task {}", draw.attempt, draw.task);
        match self {
            Self::Granted => None,
            Self::Spent => Some(format!(
                "the run's {} fix attempt(s) are drawn on channel {channel}",
                draw.max
            )),
            Self::Sealed => Some(format!(
                "channel {channel} sealed {call}: its turn ended, and another call replaces it"
            )),
            Self::OtherTurn => Some(format!(
                "another execution of {call} drew on channel {channel} first; a call number is \
                 one execution"
            )),
        }
    }
}

/// What a worker answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum TaskReply {
    /// The command ran: what it wrote, and why the worker refuses it, if it does.
    Proposal {
        /// The files the call wrote (their bytes as base64 text; an earlier adapter's
        /// arrays of numbers read too).
        #[serde(with = "crate::content::wire_candidate")]
        candidate: Candidate,
        /// The worker's own rejection (the command failed, or left what a stage refuses).
        rejection: Option<Rejection>,
        /// The settled closure that produced the candidate.
        #[serde(default)]
        closure: Option<ClosureSettlement>,
        /// The fix subtasks the call drew attempts for, in order (each durable in the
        /// channel's fix ledger before the fix ran).
        #[serde(default)]
        drawn: Vec<TaskId>,
        /// The settled closure's whole record, as [`ClosureRecord::to_json`] writes it: the
        /// channel keeps it, so that acceptance can check the audit trail `closure` binds.
        /// Absent when no closure settled, and from an earlier adapter's reply (left out
        /// when absent, so such a reply keeps its JSON).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        record: Option<String>,
    },
    /// The call could not be made and is not counted (the stage or the plan's copy could not
    /// be made before anything ran): the same call number is made again.
    Withdrawn {
        /// Why.
        detail: String,
    },
    /// The call could not run (its inputs did not arrive, the command could not start or
    /// timed out).
    Failed(InfrastructureFailure),
    /// The call may have run, partly or wholly, and left no result to settle: a retried
    /// invocation found it claimed by an earlier attempt, or a fix draw did not go through
    /// after its commands ran. Its number is spent, as a local run's interrupted call is;
    /// kleene's resume rules decide whether another call is made.
    Interrupted {
        /// The call's claim.
        nonce: String,
    },
}

impl TaskReply {
    /// The reply of a call whose closure ended with `result`, having drawn `drawn`; `record`
    /// is the closure's record, carried when `result` settles that closure.
    ///
    /// A record past [`MAX_CLOSURE_RECORD_BYTES`] fails the call (an infrastructure failure
    /// naming its size): the message could not carry it, and a settlement whose record the
    /// channel cannot keep could never be accepted. Withdrawing instead would make the same
    /// call again, to the same end.
    pub fn of(
        result: Result<Proposal, WorkerFailure>,
        drawn: Vec<TaskId>,
        record: Option<&ClosureRecord>,
    ) -> Self {
        Self::within(result, drawn, record, MAX_CLOSURE_RECORD_BYTES)
    }

    /// [`of`](Self::of) with a record limit of `max` bytes.
    fn within(
        result: Result<Proposal, WorkerFailure>,
        drawn: Vec<TaskId>,
        record: Option<&ClosureRecord>,
        max: usize,
    ) -> Self {
        match result {
            Ok(p) => {
                // Only the record of the closure the proposal settles travels.
                let record = p
                    .closure()
                    .zip(record)
                    .filter(|(c, r)| c.record_digest == r.digest())
                    .map(|(_, r)| r.to_json());
                if let Some(text) = &record {
                    // As the reply's JSON carries it: the escaping counts.
                    let size = serde_json::to_string(text).map_or(usize::MAX, |t| t.len());
                    if size > max {
                        return Self::Failed(InfrastructureFailure::Agent {
                            detail: format!(
                                "the closure record of this call is {size} bytes, past the \
                                 {max} bytes a reply may carry; the channel could not keep \
                                 it, so the call cannot settle"
                            ),
                        });
                    }
                }
                Self::Proposal {
                    candidate: p.candidate().clone(),
                    rejection: p.rejection().cloned(),
                    closure: p.closure().cloned(),
                    drawn,
                    record,
                }
            }
            Err(WorkerFailure::Infrastructure(f)) => Self::Failed(f),
            Err(WorkerFailure::Agent(a)) => Self::Failed(InfrastructureFailure::Agent {
                detail: a.chain_text(),
            }),
            Err(WorkerFailure::Unavailable { detail }) => Self::Withdrawn { detail },
            Err(other) => Self::Withdrawn {
                detail: other.to_string(),
            },
        }
    }

    /// The fix subtasks the call drew attempts for.
    pub fn drawn(&self) -> &[TaskId] {
        match self {
            Self::Proposal { drawn, .. } => drawn,
            _ => &[],
        }
    }

    /// Takes the closure record out of the reply (the channel keeps it apart from the
    /// settlement).
    pub fn take_record(&mut self) -> Option<String> {
        match self {
            Self::Proposal { record, .. } => record.take(),
            _ => None,
        }
    }

    /// The settlement the reply gives the batch machine, or `None` for an interrupted call
    /// (which is not settled: a resume judges it).
    pub fn into_result(self) -> Option<Result<Proposal, WorkerFailure>> {
        match self {
            Self::Proposal {
                candidate,
                rejection,
                closure,
                ..
            } => {
                let proposal = match rejection {
                    None => Proposal::new(candidate),
                    Some(r) => Proposal::refused(candidate, r),
                };
                Some(Ok(match closure {
                    Some(c) => proposal.with_closure(c),
                    None => proposal,
                }))
            }
            Self::Failed(f) => Some(Err(WorkerFailure::Infrastructure(f))),
            Self::Withdrawn { detail } => Some(Err(WorkerFailure::Unavailable { detail })),
            Self::Interrupted { .. } => None,
        }
    }
}

/// A settled call's closure record as its channel keeps it (`Channel/{id}/closures`): the
/// task, the call number, and the record as [`ClosureRecord::to_json`] wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredClosure {
    /// The call's task.
    pub task: TaskId,
    /// The call's number.
    pub call: u32,
    /// The record's JSON text, exactly as written: reading it back checks its form and its
    /// audit chain, and its digest is what the evidence binds.
    pub record: String,
}

impl StoredClosure {
    /// The stored form of `record`, the closure of call `call` of `task`.
    pub fn of(task: TaskId, call: u32, record: &ClosureRecord) -> Self {
        Self {
            task,
            call,
            record: record.to_json(),
        }
    }

    /// The record, read back in the one form kleene writes.
    ///
    /// # Errors
    ///
    /// [`ClosureRecordError`] when the text does not read as a record or was edited.
    pub fn read(&self) -> Result<ClosureRecord, ClosureRecordError> {
        ClosureRecord::from_json(&self.record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kleene::AppBuildPlan;
    use kleene::batch::Batch;

    /// A dispatch the machine reserved survives the trip to a worker and back unchanged.
    #[test]
    fn a_reserved_dispatch_travels_as_json() {
        let plan = AppBuildPlan::from_json(
            r#"{"tasks": [{"id": "a", "kind": {"lane": "config"}, "owner": "shell",
                "spec": {"intent": "a"}, "owned_paths": ["a.txt"]}]}"#,
        )
        .unwrap()
        .validate()
        .unwrap();
        let channel = ChannelId::new("chan").unwrap();
        let batch = Batch::new(&plan, channel.clone());
        let (mut machine, _) = batch.machine(None).unwrap();
        let dispatch = machine.reserve(1).unwrap().dispatches.remove(0);
        let call = TaskCall {
            channel,
            dispatch,
            plan: "{}".into(),
            plan_digest: None,
            plan_files: Some(PlanFilesManifest::default()),
            inputs: Vec::new(),
        };
        let back: TaskCall = serde_json::from_str(&serde_json::to_string(&call).unwrap()).unwrap();
        assert_eq!(back, call);
    }

    /// kleene's committed version-1 closure record.
    fn record() -> ClosureRecord {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/closure/record_v1.ckpt");
        kleene::checkpoint::decode(&std::fs::read(path).unwrap()).unwrap()
    }

    fn settled(record: &ClosureRecord) -> Result<Proposal, WorkerFailure> {
        Ok(Proposal::new(Candidate::default()).closed_by(&TaskId::new("x").unwrap(), record))
    }

    #[test]
    fn a_proposal_carries_the_record_its_closure_binds_and_no_other() {
        let record = record();
        let mut reply = TaskReply::of(settled(&record), Vec::new(), Some(&record));
        assert_eq!(reply.take_record(), Some(record.to_json()));
        // A record the proposal's closure does not bind is not sent as its record.
        let other = Proposal::new(Candidate::default());
        let mut reply = TaskReply::of(Ok(other), Vec::new(), Some(&record));
        assert_eq!(reply.take_record(), None);
        // A reply without a record (an earlier adapter's) still reads.
        let old: TaskReply = serde_json::from_str(
            r#"{"Proposal":{"candidate":{"files":{}},"rejection":null,"closure":null,"drawn":[]}}"#,
        )
        .unwrap();
        assert!(matches!(old, TaskReply::Proposal { record: None, .. }));
    }

    #[test]
    fn a_record_past_the_limit_fails_the_call_naming_its_size() {
        let record = record();
        let size = serde_json::to_string(&record.to_json()).unwrap().len();
        let fits = TaskReply::within(settled(&record), Vec::new(), Some(&record), size);
        assert!(matches!(
            fits,
            TaskReply::Proposal {
                record: Some(_),
                ..
            }
        ));
        let reply = TaskReply::within(settled(&record), Vec::new(), Some(&record), size - 1);
        let TaskReply::Failed(InfrastructureFailure::Agent { detail }) = &reply else {
            panic!("{reply:?}");
        };
        assert!(
            detail.contains(&format!("{size} bytes, past the {} bytes", size - 1)),
            "{detail}"
        );
    }
}
