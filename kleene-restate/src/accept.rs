//! Acceptance of a channel's batch, wherever it ran: the acceptance record and the canonical
//! export that `kleene accept` and `kleene export` make, built from the channel's evidence
//! after checking every audit trail it binds against the closure records the channel keeps,
//! as `kleene accept` checks them against its closure log.
//!
//! ```
//! use std::path::Path;
//! use std::sync::Arc;
//! use kleene::batch::{ClosureWorker, MemoryJournal};
//! use kleene::shell::{self, ShellPlan, ShellRuntime};
//! use kleene_restate::accept::{KeptRecords, acceptance};
//!
//! let plan = ShellPlan::from_text(Path::new("plan.json"), r#"{"tasks": [
//!   {"id": "a", "kind": {"lane": "config"}, "owner": "shell", "spec": {"intent": "a"},
//!    "owned_paths": ["a.txt"], "run": "echo a > a.txt"}]}"#, None)?;
//! let dir = tempfile::tempdir()?;
//! let channel = plan.default_channel()?;
//! let kept = Arc::new(KeptRecords::default());
//! let runtime = ShellRuntime::new(plan.clone(), dir.path())?.with_observer(kept.clone());
//! let mut worker = ClosureWorker::new(runtime.agent("0"), shell::session(&channel)?,
//!                                     shell::default_policy());
//! let batch = plan.batch(channel);
//! let evidence = batch.run(&mut worker, &(), &mut MemoryJournal::default())?.evidence;
//! // The closure records the runtime kept (on Restate: the channel's `closures` handler).
//! let (record, _snapshot) = acceptance(&plan, &evidence, &kept.records())?;
//! assert_eq!(record.task_results().len(), 1);
//!
//! // A missing (or changed) record refuses, naming the task and call.
//! let refused = acceptance(&plan, &evidence, &[]).unwrap_err();
//! assert!(refused.to_string().contains("task a call 1"), "{refused}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use kleene::acceptance::{
    AcceptanceProblem, AcceptanceRecord, BuildBinding, ClosureMismatch, accept_audited,
};
use kleene::batch::BatchEvidence;
use kleene::closure::ClosureRecord;
use kleene::id::TaskId;
use kleene::shell::{ShellObserver, ShellPlan};
use kleene::snapshot::{Snapshot, SnapshotError};

use crate::call::StoredClosure;

/// Keeps the closure record of every call a local shell run finished, as the channel keeps
/// a remote run's: what [`acceptance`] checks the evidence's audit trails against.
#[derive(Debug, Default)]
pub struct KeptRecords(std::sync::Mutex<Vec<StoredClosure>>);

impl KeptRecords {
    /// The records kept so far, in the order their calls finished.
    pub fn records(&self) -> Vec<StoredClosure> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl ShellObserver for KeptRecords {
    fn call_ended(&self, task: &TaskId, call: u32, record: &ClosureRecord) -> Result<(), String> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(StoredClosure::of(task.clone(), call, record));
        Ok(())
    }
}

/// Why a channel's batch could not be accepted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AcceptError {
    /// The evidence does not project to a file set.
    #[error("project the accepted outputs of channel {channel}")]
    Snapshot {
        /// The channel.
        channel: String,
        /// Why.
        #[source]
        source: SnapshotError,
    },
    /// The acceptance check found problems.
    #[error("accept the build of channel {channel}: {}", problems.join("; "))]
    Rejected {
        /// The channel.
        channel: String,
        /// Every problem, in words.
        problems: Vec<String>,
        /// The settled calls (task, call) whose closure record is missing, changed or
        /// unreadable, in task order.
        closures: Vec<(TaskId, u32)>,
    },
}

/// The acceptance record and file set of `evidence` against `plan`, bound as `kleene accept`
/// binds them (channel, plan digest, evidence version), after checking every settled call's
/// audit trail against `closures` (the records the channel keeps, in any order): each must be
/// there, read back in the form kleene writes, and digest to what the evidence binds.
///
/// # Errors
///
/// [`AcceptError`] when the file set cannot be projected or the build is not acceptable
/// (a task not accepted, a file outside its task's ownership, a digest mismatch, a closure
/// record missing, changed or unreadable: each named by task and call).
pub fn acceptance(
    plan: &ShellPlan,
    evidence: &BatchEvidence,
    closures: &[StoredClosure],
) -> Result<(AcceptanceRecord, Snapshot), AcceptError> {
    let channel = evidence.channel().to_string();
    let snapshot = Snapshot::from_evidence(evidence).map_err(|source| AcceptError::Snapshot {
        channel: channel.clone(),
        source,
    })?;
    let binding = BuildBinding::new(
        evidence.channel().clone(),
        plan.plan().digest(),
        evidence.evidence_version(),
    );
    let mut problems = Vec::new();
    let mut bad: Vec<(TaskId, u32)> = Vec::new();
    let mut records: Vec<(&TaskId, u32, ClosureRecord)> = Vec::with_capacity(closures.len());
    for stored in closures {
        match stored.read() {
            Ok(record) => records.push((&stored.task, stored.call, record)),
            Err(e) => {
                problems.push(format!(
                    "task {} call {}: the closure record channel {channel} keeps does not \
                     read back: {e}",
                    stored.task, stored.call
                ));
                bad.push((stored.task.clone(), stored.call));
            }
        }
    }
    let sealed = accept_audited(
        plan.plan(),
        evidence,
        &snapshot,
        &binding,
        records
            .iter()
            .map(|(task, call, record)| (*task, *call, record)),
    );
    match sealed {
        Ok(record) if problems.is_empty() => Ok((record, snapshot)),
        Ok(_) => Err(AcceptError::Rejected {
            channel,
            problems,
            closures: bad,
        }),
        Err(e) => {
            for problem in e.problems() {
                match problem {
                    AcceptanceProblem::ClosureRecord(m) => {
                        let (task, call) = m.call();
                        // An unreadable record was named already; it is not also missing.
                        if bad.iter().any(|(t, c)| t == task && *c == call) {
                            continue;
                        }
                        bad.push((task.clone(), call));
                        problems.push(closure_problem(&channel, m));
                    }
                    other => problems.push(other.to_string()),
                }
            }
            bad.sort();
            Err(AcceptError::Rejected {
                channel,
                problems,
                closures: bad,
            })
        }
    }
}

/// A closure mismatch in the adapter's words: the records are the channel's, not a log file.
fn closure_problem(channel: &str, m: &ClosureMismatch) -> String {
    match m {
        ClosureMismatch::Missing { task, call } => format!(
            "task {task} call {call}: the evidence binds its closure's audit trail, and \
             channel {channel} keeps no closure record of it"
        ),
        ClosureMismatch::Changed {
            task,
            call,
            recorded,
            computed,
            ..
        } => format!(
            "task {task} call {call}: the closure record channel {channel} keeps digests to \
             {computed}, but the evidence binds {recorded}; the record was changed after its \
             call settled"
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kleene::batch::{ClosureWorker, MemoryJournal};
    use kleene::shell::{self, ShellRuntime};
    use std::path::Path;
    use std::sync::Arc;

    /// A two-task plan, `a` repaired by one fix, run locally: its evidence and the records
    /// the agent kept.
    fn run() -> (ShellPlan, BatchEvidence, Vec<StoredClosure>) {
        let plan = ShellPlan::from_text(
            Path::new("plan.json"),
            r#"{"tasks": [
              {"id": "a", "kind": {"lane": "config"}, "owner": "shell", "spec": {"intent": "a"},
               "owned_paths": ["a.txt"], "run": "echo wrong > a.txt",
               "checks": [{"id": "right", "command": "grep -q right a.txt"}],
               "fix": "echo right > a.txt"},
              {"id": "b", "kind": {"lane": "config"}, "owner": "shell", "spec": {"intent": "b"},
               "owned_paths": ["b.txt"], "depends_on": ["a"], "run": "cat a.txt > b.txt"}]}"#,
            None,
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let channel = plan.default_channel().unwrap();
        let kept = Arc::new(KeptRecords::default());
        let runtime = ShellRuntime::new(plan.clone(), dir.path())
            .unwrap()
            .with_observer(kept.clone());
        let session = shell::session(&channel).unwrap();
        let mut worker = ClosureWorker::new(runtime.agent("0"), session, shell::default_policy());
        let evidence = plan
            .batch(channel)
            .run(&mut worker, &(), &mut MemoryJournal::default())
            .unwrap()
            .evidence;
        (plan, evidence, kept.records())
    }

    fn refused(
        plan: &ShellPlan,
        evidence: &BatchEvidence,
        closures: &[StoredClosure],
    ) -> (Vec<String>, Vec<(TaskId, u32)>) {
        match acceptance(plan, evidence, closures) {
            Err(AcceptError::Rejected {
                problems, closures, ..
            }) => (problems, closures),
            other => panic!("not refused: {other:?}"),
        }
    }

    fn a() -> TaskId {
        TaskId::new("a").unwrap()
    }

    #[test]
    fn the_kept_records_verify_and_the_record_binds_them() {
        let (plan, evidence, records) = run();
        assert_eq!(evidence.fix_attempts_used(), 1);
        let (record, _) = acceptance(&plan, &evidence, &records).unwrap();
        let (call, settled) = evidence.accepted_closure(&a()).unwrap();
        let kept = records.iter().find(|r| r.task == a() && r.call == call);
        assert_eq!(
            kept.unwrap().read().unwrap().digest(),
            settled.record_digest
        );
        assert_eq!(record.task_results().len(), 2);
        // Order does not matter, and records of calls the evidence never settled are ignored.
        let mut shuffled = records.clone();
        shuffled.reverse();
        shuffled.push(StoredClosure {
            call: 7,
            ..records[0].clone()
        });
        let (again, _) = acceptance(&plan, &evidence, &shuffled).unwrap();
        assert_eq!(again.digest(), record.digest());
    }

    #[test]
    fn a_missing_record_refuses_naming_the_task_and_call() {
        let (plan, evidence, records) = run();
        let without_a: Vec<StoredClosure> =
            records.iter().filter(|r| r.task != a()).cloned().collect();
        let (problems, calls) = refused(&plan, &evidence, &without_a);
        assert_eq!(calls, [(a(), 1)]);
        assert!(
            problems.len() == 1
                && problems[0].starts_with("task a call 1:")
                && problems[0].contains("keeps no closure record"),
            "{problems:?}"
        );
    }

    #[test]
    fn a_changed_record_refuses_naming_the_task_and_call() {
        let (plan, evidence, records) = run();
        // Another call's record, whole and readable, stored as a's.
        let b = records.iter().find(|r| r.task != a()).unwrap().clone();
        let swapped: Vec<StoredClosure> = records
            .iter()
            .map(|r| {
                if r.task == a() {
                    StoredClosure {
                        record: b.record.clone(),
                        ..r.clone()
                    }
                } else {
                    r.clone()
                }
            })
            .collect();
        let (problems, calls) = refused(&plan, &evidence, &swapped);
        assert_eq!(calls, [(a(), 1)]);
        assert!(
            problems[0].starts_with("task a call 1:") && problems[0].contains("was changed"),
            "{problems:?}"
        );
    }

    #[test]
    fn an_edited_record_text_refuses_naming_the_task_and_call() {
        let (plan, evidence, records) = run();
        // The same value in another spelling (a space): an edit all the same.
        let edited: Vec<StoredClosure> = records
            .iter()
            .map(|r| {
                if r.task == a() {
                    StoredClosure {
                        record: r.record.replacen('{', "{ ", 1),
                        ..r.clone()
                    }
                } else {
                    r.clone()
                }
            })
            .collect();
        let (problems, calls) = refused(&plan, &evidence, &edited);
        assert_eq!(calls, [(a(), 1)]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("task a call 1:") && problems[0].contains("does not read back"),
            "{problems:?}"
        );
    }
}
