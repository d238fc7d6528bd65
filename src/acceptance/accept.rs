//! `accept`: the complete final snapshot checked against the plan and the evidence.

use std::collections::BTreeSet;

use super::record::{RECORD_FORMAT, RecordBody, task_results_digest};
use super::{AcceptanceRecord, BuildBinding, TaskResult};
use crate::batch::{BatchEvidence, TaskStatus};
use crate::closure::ClosureRecord;
use crate::closure::bound::ClosureMismatch;
use crate::id::digest::{Canonical, CanonicalHasher, Unordered};
use crate::plan::{PlannedTask, ValidatedPlan};
use crate::snapshot::{Snapshot, SnapshotError};
use crate::{id::ChannelId, id::TaskId, id::digest::Digest, plan::path::AdmittedPath};

/// One reason a build cannot be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AcceptanceProblem {
    /// The evidence executed another plan.
    #[error("evidence executed plan {evidence}, the plan is {plan}")]
    PlanMismatch {
        /// The validated plan's digest.
        plan: Digest,
        /// The plan digest in the evidence.
        evidence: Digest,
    },
    /// The snapshot was projected from other (changed) evidence.
    #[error("snapshot was projected from evidence {snapshot}, the evidence is {evidence}")]
    EvidenceChanged {
        /// The evidence digest the snapshot carries.
        snapshot: Digest,
        /// The digest of the evidence given.
        evidence: Digest,
    },
    /// The binding names another channel than the evidence's trusted one.
    #[error("binding names channel {binding}, the evidence ran on {evidence}")]
    ChannelMismatch {
        /// The binding's channel.
        binding: ChannelId,
        /// The evidence's channel.
        evidence: ChannelId,
    },
    /// The binding names another plan.
    #[error("binding names plan {binding}, the plan is {plan}")]
    BindingPlanMismatch {
        /// The binding's plan digest.
        binding: Digest,
        /// The plan's digest.
        plan: Digest,
    },
    /// The binding names another evidence format version.
    #[error("binding names evidence version {binding}, the evidence is version {evidence}")]
    EvidenceVersionMismatch {
        /// The binding's version.
        binding: u32,
        /// The evidence's version.
        evidence: u32,
    },
    /// The audit trail of a settled call, as the given closure records hold it, is missing or
    /// not the one the evidence binds: sealing would bind a trail nobody can show.
    #[error("the audit trail the evidence binds is not in the closure records: {0}")]
    ClosureRecord(ClosureMismatch),
    /// Two accepted outputs hold the same path, so the evidence projects no snapshot.
    #[error("{0}")]
    ConflictingOutputs(SnapshotError),
    /// A planned task is not accepted.
    #[error("task {task} is not accepted: it {}; finish the run before accepting", standing(.status))]
    TaskNotAccepted {
        /// The task.
        task: TaskId,
        /// Where it stands.
        status: TaskStatus,
    },
    /// A planned task is not in the evidence's batch inventory: the evidence is of another
    /// plan's batch.
    #[error(
        "task {task} is not in the evidence's batch inventory; accept the evidence of this \
         plan's batch"
    )]
    TaskNotInEvidence {
        /// The task.
        task: TaskId,
    },
    /// The evidence holds an accepted output of a task the plan does not have.
    #[error("task {task} has an accepted output but is not in the plan")]
    UnplannedTask {
        /// The task.
        task: TaskId,
    },
    /// A planned file is not in the snapshot.
    #[error("planned file {path} of task {task} is missing")]
    MissingPlannedFile {
        /// The path.
        path: AdmittedPath,
        /// The task that owns it.
        task: TaskId,
    },
    /// A file is not owned by the task it is attributed to.
    #[error(
        "file {path} of task {task} is outside its ownership ({}); only the planned owner \
         may write it",
        owned_by(.owner)
    )]
    OutsideOwnership {
        /// The path.
        path: AdmittedPath,
        /// The task it is attributed to.
        task: TaskId,
        /// Its planned owner, if any.
        owner: Option<TaskId>,
    },
}

fn standing(status: &TaskStatus) -> String {
    match status {
        TaskStatus::Accepted => "is accepted".to_owned(),
        TaskStatus::Failed => "failed".to_owned(),
        TaskStatus::Drained { blocked_by } => {
            format!("was drained because its prerequisite {blocked_by} failed")
        }
        TaskStatus::InFlight { attempt } => {
            format!("has call {attempt} in flight (reserved, never settled)")
        }
        TaskStatus::Pending => "is pending (not called yet)".to_owned(),
    }
}

fn owned_by(owner: &Option<TaskId>) -> String {
    match owner {
        Some(owner) => format!("it is owned by task {owner}"),
        None => "no task owns it".to_owned(),
    }
}

impl AcceptanceProblem {
    /// The path involved, if the problem is about one file.
    pub fn path(&self) -> Option<&AdmittedPath> {
        match self {
            Self::MissingPlannedFile { path, .. } | Self::OutsideOwnership { path, .. } => {
                Some(path)
            }
            _ => None,
        }
    }
}

/// Why a build was not accepted: every problem found, not just the first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AcceptanceError {
    /// The snapshot, plan and evidence do not agree.
    #[error("accept build: {} problem(s): {}", problems.len(), problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Rejected {
        /// Every problem, in a deterministic order.
        problems: Vec<AcceptanceProblem>,
    },
}

impl AcceptanceError {
    /// Every problem found.
    pub fn problems(&self) -> &[AcceptanceProblem] {
        match self {
            Self::Rejected { problems } => problems,
        }
    }
}

impl crate::batch::Batch<'_> {
    /// Accepts `evidence` of this batch's run: the snapshot of its accepted outputs checked
    /// against the plan and sealed in an [`AcceptanceRecord`] bound to this batch's channel,
    /// the plan's digest and the evidence's format. One call for [`accept`] with the
    /// [`Snapshot::from_evidence`] and [`BuildBinding`] it needs.
    ///
    /// # Errors
    ///
    /// [`AcceptanceError::Rejected`] listing every problem (a task not accepted, evidence of
    /// another plan), or [`AcceptanceProblem::ConflictingOutputs`] alone when two accepted
    /// outputs hold one path.
    ///
    /// # Examples
    ///
    /// See [`Batch::run_agents`](crate::batch::Batch::run_agents).
    pub fn accept(&self, evidence: &BatchEvidence) -> Result<AcceptanceRecord, AcceptanceError> {
        let snapshot =
            Snapshot::from_evidence(evidence).map_err(|e| AcceptanceError::Rejected {
                problems: vec![AcceptanceProblem::ConflictingOutputs(e)],
            })?;
        let binding = BuildBinding::new(
            self.channel().clone(),
            self.plan().digest(),
            evidence.evidence_version(),
        );
        accept(self.plan(), evidence, &snapshot, &binding)
    }
}

/// Checks the complete final `snapshot` against `plan` and `evidence` under `binding`:
/// every planned file present, nothing outside its task's ownership, every planned task
/// accepted, and every digest consistent. Returns the [`AcceptanceRecord`] that binds them.
///
/// # Errors
///
/// [`AcceptanceError::Rejected`] listing every problem found.
pub fn accept(
    plan: &ValidatedPlan,
    evidence: &BatchEvidence,
    snapshot: &Snapshot,
    binding: &BuildBinding,
) -> Result<AcceptanceRecord, AcceptanceError> {
    let mut problems = Vec::new();
    let plan_digest = plan.digest();
    let evidence_digest = evidence.digest();
    if evidence.plan_digest() != plan_digest {
        problems.push(AcceptanceProblem::PlanMismatch {
            plan: plan_digest,
            evidence: evidence.plan_digest(),
        });
    }
    if snapshot.evidence_digest() != evidence_digest {
        problems.push(AcceptanceProblem::EvidenceChanged {
            snapshot: snapshot.evidence_digest(),
            evidence: evidence_digest,
        });
    }
    if binding.channel() != evidence.channel() {
        problems.push(AcceptanceProblem::ChannelMismatch {
            binding: binding.channel().clone(),
            evidence: evidence.channel().clone(),
        });
    }
    if binding.plan_digest() != plan_digest {
        problems.push(AcceptanceProblem::BindingPlanMismatch {
            binding: binding.plan_digest(),
            plan: plan_digest,
        });
    }
    if binding.evidence_version() != evidence.evidence_version() {
        problems.push(AcceptanceProblem::EvidenceVersionMismatch {
            binding: binding.evidence_version(),
            evidence: evidence.evidence_version(),
        });
    }
    let mut planned: Vec<_> = plan.tasks().collect();
    planned.sort_by(|a, b| a.id.cmp(&b.id));
    for task in &planned {
        match evidence.status(&task.id) {
            Some(TaskStatus::Accepted) => {}
            Some(status) => problems.push(AcceptanceProblem::TaskNotAccepted {
                task: task.id.clone(),
                status,
            }),
            None => problems.push(AcceptanceProblem::TaskNotInEvidence {
                task: task.id.clone(),
            }),
        }
    }
    let mut results: Vec<TaskResult> = evidence
        .accepted_outputs()
        .map(|(id, out)| {
            let result = TaskResult::new(id.clone(), out.digest());
            // A reused output is bound to the closure of the call that made it; that it was
            // reused, and from which run, the evidence digest binds.
            let reused = evidence
                .reused_from(id)
                .and_then(|from| Some((from.call, from.closure?)))
                .map(|(call, c)| (call, c.audit_head, c.record_digest));
            let called = evidence
                .accepted_closure(id)
                .map(|(call, c)| (call, c.audit_head, c.record_digest));
            match reused.or(called) {
                Some((call, head, record)) => result.with_closure(call, head, record),
                None => result,
            }
        })
        .collect();
    results.sort();
    for r in &results {
        if plan.task(r.task()).is_none() {
            problems.push(AcceptanceProblem::UnplannedTask {
                task: r.task().clone(),
            });
        }
    }
    // An owned directory is present when anything beneath it is.
    let mut missing = BTreeSet::new();
    for task in &planned {
        for path in task.unwritten_owned_paths(snapshot.file_map()) {
            missing.insert((path.clone(), task.id.clone()));
        }
    }
    problems.extend(
        missing
            .into_iter()
            .map(|(path, task)| AcceptanceProblem::MissingPlannedFile { path, task }),
    );
    for (path, file) in snapshot.files() {
        let owner = plan.owner_of(path);
        if owner != Some(file.task()) {
            problems.push(AcceptanceProblem::OutsideOwnership {
                path: path.clone(),
                task: file.task().clone(),
                owner: owner.cloned(),
            });
        }
    }
    if !problems.is_empty() {
        return Err(AcceptanceError::Rejected { problems });
    }
    let task_results_digest = task_results_digest(RECORD_FORMAT, &results);
    Ok(AcceptanceRecord::seal(RecordBody {
        format: RECORD_FORMAT,
        binding_digest: binding.digest(),
        binding: binding.clone(),
        plan_digest,
        task_inventory_digest: task_inventory_digest(&planned),
        evidence_digest,
        task_results: results,
        task_results_digest,
        files: snapshot.manifest(),
    }))
}

/// [`accept`], after checking the audit trails it binds: every closure the evidence settled
/// must be among `closures` (task, call, record: what an audit store holds, in any order),
/// whole and unchanged. Use it wherever closure records are kept apart from the evidence
/// (a log file, a table), so that a damaged trail is named before anything is sealed.
///
/// Records of calls the evidence never settled are ignored; a call whose record was saved
/// twice must match in every copy.
///
/// ```
/// # use kleene::acceptance::{accept_audited, AcceptanceProblem};
/// # fn demo(plan: &kleene::plan::ValidatedPlan, evidence: &kleene::batch::BatchEvidence,
/// #         snapshot: &kleene::snapshot::Snapshot, binding: &kleene::acceptance::BuildBinding,
/// #         stored: &[(kleene::id::TaskId, u32, kleene::closure::ClosureRecord)]) {
/// match accept_audited(plan, evidence, snapshot, binding,
///                      stored.iter().map(|(task, call, record)| (task, *call, record))) {
///     Ok(record) => println!("sealed {}", record.digest()),
///     Err(err) => for problem in err.problems() {
///         if let AcceptanceProblem::ClosureRecord(m) = problem {
///             eprintln!("restore the closure record of task {} call {}", m.call().0, m.call().1);
///         }
///     },
/// }
/// # }
/// ```
///
/// # Errors
///
/// [`AcceptanceError::Rejected`] listing every problem [`accept`] finds and every missing
/// or changed closure record ([`AcceptanceProblem::ClosureRecord`]).
pub fn accept_audited<'r>(
    plan: &ValidatedPlan,
    evidence: &BatchEvidence,
    snapshot: &Snapshot,
    binding: &BuildBinding,
    closures: impl IntoIterator<Item = (&'r TaskId, u32, &'r ClosureRecord)>,
) -> Result<AcceptanceRecord, AcceptanceError> {
    let trails: Vec<AcceptanceProblem> = match evidence.verify_closures(closures) {
        Ok(_) => Vec::new(),
        Err(e) => e
            .mismatches()
            .iter()
            .cloned()
            .map(AcceptanceProblem::ClosureRecord)
            .collect(),
    };
    match accept(plan, evidence, snapshot, binding) {
        Ok(record) if trails.is_empty() => Ok(record),
        Ok(_) => Err(AcceptanceError::Rejected { problems: trails }),
        Err(AcceptanceError::Rejected { mut problems }) => {
            problems.extend(trails);
            Err(AcceptanceError::Rejected { problems })
        }
    }
}

/// The plan's task inventory, sorted by id: each task's id, lane, owner, retry limit and
/// owned paths.
fn task_inventory_digest(tasks: &[&PlannedTask]) -> Digest {
    CanonicalHasher::new("task inventory")
        .seq(tasks.iter().map(|t| InventoryTask(t)))
        .finish()
}

/// A planned task as the inventory binds it: who does what and where, not how.
struct InventoryTask<'a>(&'a PlannedTask);

impl Canonical for InventoryTask<'_> {
    fn encode(&self, h: &mut CanonicalHasher) {
        let t = self.0;
        let owned = Unordered::sorted(&t.owned_paths);
        h.put(&(&t.id, &t.kind, &t.owner, t.retry_limit, owned));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_read_as_words_and_say_what_to_do() {
        let task = TaskId::new("billing_service").unwrap();
        let in_flight = AcceptanceProblem::TaskNotAccepted {
            task: task.clone(),
            status: TaskStatus::InFlight { attempt: 2 },
        };
        assert_eq!(
            in_flight.to_string(),
            "task billing_service is not accepted: it has call 2 in flight (reserved, never \
             settled); finish the run before accepting"
        );
        let outside = AcceptanceProblem::OutsideOwnership {
            path: AdmittedPath::admit("billing/x.sh").unwrap(),
            task,
            owner: None,
        };
        assert!(
            outside.to_string().contains("(no task owns it)"),
            "{outside}"
        );
    }
}
