//! Scoped artifact repair: requests for one accepted task chosen by exact diagnostic paths,
//! a two-proposal budget per target, and whole-proposal admission before anything changes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::Snapshot;
use crate::batch::{BatchEvidence, TaskStatus};
use crate::id::digest::canonical_struct;
use crate::plan::ValidatedPlan;
use crate::{id::TaskId, id::ValidatorId, id::digest::Digest, plan::path::AdmittedPath};

/// Proposals each repair target may submit, over the whole build.
pub const REPAIR_PROPOSAL_BUDGET: u32 = 2;

/// A validator's finding about one exact path of the snapshot.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Diagnostic {
    path: AdmittedPath,
    validator: ValidatorId,
    message: String,
}

canonical_struct!(Diagnostic {
    path,
    validator,
    message,
});

impl Diagnostic {
    /// `validator` found `message` about `path`.
    pub fn new(path: AdmittedPath, validator: ValidatorId, message: impl Into<String>) -> Self {
        Self {
            path,
            validator,
            message: message.into(),
        }
    }

    /// The path the finding is about.
    pub fn path(&self) -> &AdmittedPath {
        &self.path
    }

    /// The validator that found it.
    pub fn validator(&self) -> &ValidatorId {
        &self.validator
    }

    /// What it found.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// A request to repair the files of one accepted task, issued by [`RepairLedger::route`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairRequest {
    target: TaskId,
    attempt: u32,
    diagnostics: Vec<Diagnostic>,
    fingerprint: Digest,
}

impl RepairRequest {
    /// The accepted task whose files are to be repaired.
    pub fn target(&self) -> &TaskId {
        &self.target
    }

    /// Which proposal this is for the target (1 or 2).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The exact diagnostics that chose the target, sorted.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }

    /// The target's failure fingerprint: its diagnostics and current files.
    pub fn fingerprint(&self) -> Digest {
        self.fingerprint
    }
}

/// Why a diagnosed target gets no repair request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RouteRefusal {
    /// The owner is not accepted (failed, drained, pending, in flight): artifact repair
    /// cannot recover unexecuted work, batch recovery must.
    #[error(
        "route repair of {task}: it is {status}, not accepted; use batch recovery for {}",
        list(.paths)
    )]
    NeedsBatchRecovery {
        /// The owning task.
        task: TaskId,
        /// Where it stands.
        status: TaskStatus,
        /// The diagnosed paths it owns.
        paths: Vec<AdmittedPath>,
    },
    /// The owner is in the plan but not in the evidence: the evidence is of another plan's
    /// batch.
    #[error(
        "route repair of {task}: the evidence's batch inventory has no such task; route with \
         the evidence of this plan's batch"
    )]
    NotInEvidence {
        /// The owning task.
        task: TaskId,
    },
    /// No planned task owns the path.
    #[error("route repair of {path}: no planned task owns it")]
    Unowned {
        /// The path.
        path: AdmittedPath,
    },
    /// The target has used its whole proposal budget.
    #[error("route repair of {task}: its {used} proposals are used up")]
    BudgetExhausted {
        /// The target.
        task: TaskId,
        /// Proposals used.
        used: u32,
    },
    /// The target's failure fingerprint is the one its last proposal was made under: the
    /// last proposal was rejected or changed nothing, so the target stops.
    #[error(
        "route repair of {task}: unchanged since its last proposal (fingerprint {fingerprint})"
    )]
    Unchanged {
        /// The target.
        task: TaskId,
        /// The unchanged fingerprint.
        fingerprint: Digest,
    },
}

impl RouteRefusal {
    /// Whether the target belongs to batch recovery.
    pub fn needs_batch_recovery(&self) -> bool {
        matches!(self, Self::NeedsBatchRecovery { .. })
    }
}

/// What routing diagnostics gives: one request per eligible target, and a typed refusal
/// for every other target or unowned path. A refused target never holds back another.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RepairRoutes {
    requests: Vec<RepairRequest>,
    refused: Vec<RouteRefusal>,
}

impl RepairRoutes {
    /// The requests, one per eligible target, sorted by target.
    pub fn requests(&self) -> &[RepairRequest] {
        &self.requests
    }

    /// The refusals, in target (then path) order.
    pub fn refused(&self) -> &[RouteRefusal] {
        &self.refused
    }
}

/// One change a proposal makes to a path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    Write(Vec<u8>),
    Delete,
}

/// A repair worker's proposal: new contents for some paths, deletion of others. A path is
/// either written or deleted, never both.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RepairProposal {
    changes: BTreeMap<AdmittedPath, Change>,
}

impl RepairProposal {
    /// An empty proposal.
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes `content` to `path` (replacing an earlier change of the same path).
    #[must_use]
    pub fn write(mut self, path: AdmittedPath, content: impl Into<Vec<u8>>) -> Self {
        self.changes.insert(path, Change::Write(content.into()));
        self
    }

    /// Deletes `path` (replacing an earlier change of the same path).
    #[must_use]
    pub fn delete(mut self, path: AdmittedPath) -> Self {
        self.changes.insert(path, Change::Delete);
        self
    }

    /// Every path the proposal touches, sorted.
    pub fn paths(&self) -> impl Iterator<Item = &AdmittedPath> {
        self.changes.keys()
    }
}

/// One reason a proposal is refused as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProposalProblem {
    /// The proposal changes nothing.
    Empty,
    /// The path is not owned by the target (another task's, or nobody's): no repair may
    /// broaden ownership or touch another task's files.
    NotOwned {
        /// The path.
        path: AdmittedPath,
        /// Its planned owner, if any.
        owner: Option<TaskId>,
    },
    /// The path is a planned (required) final artifact and cannot be deleted.
    DeletesRequiredArtifact {
        /// The path.
        path: AdmittedPath,
    },
}

impl std::fmt::Display for ProposalProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Empty => f.write_str("it changes nothing"),
            Self::NotOwned {
                path,
                owner: Some(o),
            } => write!(f, "{path} is owned by {o}"),
            Self::NotOwned { path, owner: None } => write!(f, "{path} is owned by no task"),
            Self::DeletesRequiredArtifact { path } => {
                write!(f, "{path} is a required final artifact")
            }
        }
    }
}

impl ProposalProblem {
    /// The path involved, if any.
    pub fn path(&self) -> Option<&AdmittedPath> {
        match self {
            Self::Empty => None,
            Self::NotOwned { path, .. } | Self::DeletesRequiredArtifact { path } => Some(path),
        }
    }
}

/// Why a submitted proposal did not yield a new snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RepairError {
    /// The proposal failed admission; nothing changed. Lists every problem.
    #[error("repair {task}: proposal {attempt} refused: {}", problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Rejected {
        /// The target.
        task: TaskId,
        /// Which proposal.
        attempt: u32,
        /// Every problem found.
        problems: Vec<ProposalProblem>,
    },
    /// The target has no proposal left.
    #[error("repair {task}: its {REPAIR_PROPOSAL_BUDGET} proposals are used up")]
    BudgetExhausted {
        /// The target.
        task: TaskId,
    },
    /// The request was already answered by a proposal.
    #[error("repair {task}: request for proposal {attempt} was already consumed")]
    RequestConsumed {
        /// The target.
        task: TaskId,
        /// The request's proposal number.
        attempt: u32,
    },
    /// The snapshot or evidence is not the one the request was routed on.
    #[error("repair {task}: the request was routed on another snapshot or evidence")]
    StaleRequest {
        /// The target.
        task: TaskId,
    },
    /// The snapshot was not projected from the evidence given.
    #[error("route repairs: snapshot is of evidence {snapshot}, evidence given is {evidence}")]
    EvidenceMismatch {
        /// The evidence digest the snapshot was projected from.
        snapshot: Digest,
        /// The digest of the evidence given.
        evidence: Digest,
    },
}

/// The outcome of [`RepairLedger::submit`]: the updated ledger, and the new snapshot or why
/// there is none.
#[derive(Debug, Clone)]
pub struct Submitted {
    /// The ledger after the submission (the proposal counted if it was judged).
    pub ledger: RepairLedger,
    /// The new snapshot, or why the proposal did not produce one.
    pub outcome: Result<Snapshot, RepairError>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct TargetRecord {
    /// The fingerprint each proposal was made under, in order.
    proposed_under: Vec<Digest>,
}

/// Per-target repair budgets and failure fingerprints of one build. A value: every
/// submission returns a new ledger.
///
/// # Examples
///
/// ```
/// use kleene::snapshot::RepairLedger;
///
/// let ledger = RepairLedger::default();
/// assert_eq!(ledger.proposals(&kleene::id::TaskId::new("service_tasks")?), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairLedger {
    targets: BTreeMap<TaskId, TargetRecord>,
}

impl RepairLedger {
    /// Proposals `task` has submitted (at most [`REPAIR_PROPOSAL_BUDGET`]).
    pub fn proposals(&self, task: &TaskId) -> u32 {
        self.targets
            .get(task)
            .map_or(0, |r| r.proposed_under.len() as u32)
    }

    /// Chooses repair targets from the exact paths of `diagnostics` through the plan's owner
    /// index: one request per accepted owner with budget left and a changed fingerprint, a
    /// typed refusal for everything else.
    ///
    /// # Errors
    ///
    /// [`RepairError::EvidenceMismatch`] when `snapshot` was not projected from `evidence`.
    pub fn route(
        &self,
        plan: &ValidatedPlan,
        evidence: &BatchEvidence,
        snapshot: &Snapshot,
        diagnostics: &[Diagnostic],
    ) -> Result<RepairRoutes, RepairError> {
        check_evidence(evidence, snapshot)?;
        let mut by_owner: BTreeMap<TaskId, Vec<Diagnostic>> = BTreeMap::new();
        let mut unowned = BTreeSet::new();
        for d in diagnostics {
            match plan.owner_of(&d.path) {
                Some(owner) => by_owner.entry(owner.clone()).or_default().push(d.clone()),
                None => {
                    unowned.insert(d.path.clone());
                }
            }
        }
        let mut routes = RepairRoutes::default();
        for (task, mut diagnostics) in by_owner {
            diagnostics.sort();
            diagnostics.dedup();
            let status = match evidence.status(&task) {
                Some(status) => status,
                None => {
                    routes.refused.push(RouteRefusal::NotInEvidence { task });
                    continue;
                }
            };
            if status != TaskStatus::Accepted {
                let paths: BTreeSet<_> = diagnostics.iter().map(|d| d.path.clone()).collect();
                routes.refused.push(RouteRefusal::NeedsBatchRecovery {
                    task,
                    status,
                    paths: paths.into_iter().collect(),
                });
                continue;
            }
            let used = self.proposals(&task);
            if used >= REPAIR_PROPOSAL_BUDGET {
                routes
                    .refused
                    .push(RouteRefusal::BudgetExhausted { task, used });
                continue;
            }
            let fingerprint = fingerprint(evidence, snapshot, &task, &diagnostics);
            let last = self
                .targets
                .get(&task)
                .and_then(|r| r.proposed_under.last());
            if last == Some(&fingerprint) {
                routes
                    .refused
                    .push(RouteRefusal::Unchanged { task, fingerprint });
                continue;
            }
            routes.requests.push(RepairRequest {
                target: task,
                attempt: used + 1,
                diagnostics,
                fingerprint,
            });
        }
        routes.refused.extend(
            unowned
                .into_iter()
                .map(|path| RouteRefusal::Unowned { path }),
        );
        Ok(routes)
    }

    /// Judges `proposal` for `request` as a whole and, if every path is admitted, yields the
    /// new snapshot. `snapshot` itself never changes. A judged proposal (admitted or
    /// refused) counts against the target's budget.
    pub fn submit(
        &self,
        plan: &ValidatedPlan,
        evidence: &BatchEvidence,
        snapshot: &Snapshot,
        request: &RepairRequest,
        proposal: RepairProposal,
    ) -> Submitted {
        let task = &request.target;
        let refuse = |e| Submitted {
            ledger: self.clone(),
            outcome: Err(e),
        };
        if let Err(e) = check_evidence(evidence, snapshot) {
            return refuse(e);
        }
        let used = self.proposals(task);
        if request.attempt <= used {
            return refuse(RepairError::RequestConsumed {
                task: task.clone(),
                attempt: request.attempt,
            });
        }
        if used >= REPAIR_PROPOSAL_BUDGET {
            return refuse(RepairError::BudgetExhausted { task: task.clone() });
        }
        if request.attempt != used + 1
            || fingerprint(evidence, snapshot, task, &request.diagnostics) != request.fingerprint
        {
            return refuse(RepairError::StaleRequest { task: task.clone() });
        }
        let mut ledger = self.clone();
        ledger
            .targets
            .entry(task.clone())
            .or_default()
            .proposed_under
            .push(request.fingerprint);
        let problems = problems(plan, task, &proposal);
        let outcome = if problems.is_empty() {
            let mut writes = BTreeMap::new();
            let mut deletions = Vec::new();
            for (path, change) in proposal.changes {
                match change {
                    Change::Write(content) => {
                        writes.insert(path, Arc::<[u8]>::from(content));
                    }
                    Change::Delete => deletions.push(path),
                }
            }
            Ok(snapshot.with_repair(task, writes, deletions))
        } else {
            Err(RepairError::Rejected {
                task: task.clone(),
                attempt: request.attempt,
                problems,
            })
        };
        Submitted { ledger, outcome }
    }
}

/// Paths as a comma-separated list, for a message.
fn list(paths: &[AdmittedPath]) -> String {
    paths
        .iter()
        .map(AdmittedPath::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

fn check_evidence(evidence: &BatchEvidence, snapshot: &Snapshot) -> Result<(), RepairError> {
    let digest = evidence.digest();
    if snapshot.evidence_digest() != digest {
        return Err(RepairError::EvidenceMismatch {
            snapshot: snapshot.evidence_digest(),
            evidence: digest,
        });
    }
    Ok(())
}

/// A target's failure fingerprint: the trusted channel, the target, its exact diagnostics
/// and its current files. It changes exactly when the target's situation changes.
fn fingerprint(
    evidence: &BatchEvidence,
    snapshot: &Snapshot,
    task: &TaskId,
    diagnostics: &[Diagnostic],
) -> Digest {
    let files = crate::snapshot::FileManifest::of_sorted(
        snapshot.files_of(task).map(|(p, f)| (p, f.content())),
    );
    Digest::of(
        "repair target fingerprint",
        &(evidence.channel(), task, diagnostics, files),
    )
}

/// Every reason to refuse `proposal` for `task`, found before anything changes.
fn problems(
    plan: &ValidatedPlan,
    task: &TaskId,
    proposal: &RepairProposal,
) -> Vec<ProposalProblem> {
    if proposal.changes.is_empty() {
        return vec![ProposalProblem::Empty];
    }
    let required: BTreeSet<&AdmittedPath> = plan
        .task(task)
        .map(|t| t.owned_paths.iter().collect())
        .unwrap_or_default();
    let mut problems = Vec::new();
    for (path, change) in &proposal.changes {
        let owner = plan.owner_of(path);
        if owner != Some(task) {
            problems.push(ProposalProblem::NotOwned {
                path: path.clone(),
                owner: owner.cloned(),
            });
            continue;
        }
        if *change == Change::Delete && required.contains(path) {
            problems.push(ProposalProblem::DeletesRequiredArtifact { path: path.clone() });
        }
    }
    problems
}
