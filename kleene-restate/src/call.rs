//! The messages between a channel and its task workers: one call out, one reply back.
//!
//! ```
//! use kleene::batch::InfrastructureFailure;
//! use kleene_restate::call::TaskReply;
//!
//! let reply = TaskReply::Failed(InfrastructureFailure::Transport { detail: "gone".into() });
//! assert!(reply.into_result().is_some_and(|r| r.is_err()));
//! assert!(TaskReply::Interrupted { nonce: "n".into() }.into_result().is_none());
//! ```

use kleene::batch::{
    Candidate, Dispatch, InfrastructureFailure, Proposal, Rejection, WorkerFailure,
};
use kleene::id::Digest;
use kleene::id::{ChannelId, TaskId};
use serde::{Deserialize, Serialize};

/// One task call as the task-worker service receives it: the machine's owned dispatch, the
/// command, and the accepted outputs its stage starts from, by digest only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCall {
    /// The channel making the call.
    pub channel: ChannelId,
    /// The reserved call.
    pub dispatch: Dispatch,
    /// The shell command (`sh -c`); `None` runs nothing (an empty candidate).
    pub command: Option<String>,
    /// The command's timeout in milliseconds.
    pub timeout_ms: u64,
    /// `KLEENE_PLAN_DIR` for the command, when the plan was submitted from a directory.
    pub plan_dir: Option<String>,
    /// Every transitive prerequisite and the digest of its accepted output, sorted by task.
    pub inputs: Vec<(TaskId, Digest)>,
    /// The scratch globs: what the command leaves there is never part of its candidate.
    #[serde(default)]
    pub scratch: Vec<String>,
}

/// What a worker answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum TaskReply {
    /// The command ran: what it wrote, and why the worker refuses it, if it does.
    Proposal {
        /// The files the call wrote.
        candidate: Candidate,
        /// The worker's own rejection (the command failed, or left what a stage refuses).
        rejection: Option<Rejection>,
    },
    /// The call could not run (its inputs did not arrive, the command could not start or
    /// timed out).
    Failed(InfrastructureFailure),
    /// A retried invocation found this call claimed by an earlier attempt that left no
    /// result: the work may have run, partly or wholly. kleene's resume rules decide.
    Interrupted {
        /// The earlier attempt's claim.
        nonce: String,
    },
}

impl TaskReply {
    /// The settlement the reply gives the batch machine, or `None` for an interrupted call
    /// (which is not settled: a resume judges it).
    pub fn into_result(self) -> Option<Result<Proposal, WorkerFailure>> {
        match self {
            Self::Proposal {
                candidate,
                rejection: None,
            } => Some(Ok(Proposal::new(candidate))),
            Self::Proposal {
                candidate,
                rejection: Some(r),
            } => Some(Ok(Proposal::refused(candidate, r))),
            Self::Failed(f) => Some(Err(WorkerFailure::Infrastructure(f))),
            Self::Interrupted { .. } => None,
        }
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
            command: Some("true".into()),
            timeout_ms: 1000,
            plan_dir: None,
            inputs: Vec::new(),
            scratch: vec!["target/**".into()],
        };
        let back: TaskCall = serde_json::from_str(&serde_json::to_string(&call).unwrap()).unwrap();
        assert_eq!(back, call);
    }
}
