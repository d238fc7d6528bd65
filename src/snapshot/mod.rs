//! The final file set of a build: one projection of accepted task outputs, the admitted
//! repair overlay and deletion tombstones.
//!
//! A [`Snapshot`] can only be made from [`BatchEvidence`] (its accepted outputs, never a
//! rejected candidate or a raw response) and changed only by an admitted artifact repair
//! (see [`RepairLedger`]), which yields a new snapshot value. Validation, acceptance and
//! export all read the same projection.
//!
//! ```
//! use kleene::{plan::AdmittedPath, snapshot::Diagnostic, snapshot::ProposalProblem, snapshot::RepairError, snapshot::RepairLedger,
//!              snapshot::RepairProposal, snapshot::Snapshot, id::ValidatorId};
//! # use std::collections::BTreeMap;
//! # use kleene::batch::{BatchEvidence, Candidate, evidence::EVIDENCE_VERSION, evidence::EvidenceEvent,
//! #                     evidence::InventoryEntry, evidence::Settlement};
//! # use kleene::{AppBuildPlan, id::ChannelId, id::Digest};
//! # let plan = AppBuildPlan::from_json(r#"{"tasks": [
//! #   {"id": "model_tasks", "kind": {"lane": "model", "module": "tasks"}, "owner": "ModelAgent",
//! #    "spec": {"intent": "schemas"}, "owned_paths": ["backend/schemas.py"]},
//! #   {"id": "service_tasks", "kind": {"lane": "service", "module": "tasks"},
//! #    "owner": "ServiceAgent", "spec": {"intent": "handlers"},
//! #    "owned_paths": ["backend/services.py"]}
//! # ]}"#)?.validate()?;
//! # let mut events = vec![EvidenceEvent::Started {
//! #     channel: ChannelId::new("chan-1")?, plan_digest: plan.digest(),
//! #     evidence_version: EVIDENCE_VERSION, inputs: BTreeMap::new(), recovery: false,
//! #     inventory: plan.tasks().map(|t| InventoryEntry {
//! #         task: t.id.clone(), owner: t.owner.clone(), budget: t.retry_limit + 1 }).collect(),
//! # }];
//! # for t in plan.tasks() {
//! #     let files: BTreeMap<_, _> = t.owned_paths.iter().map(|p| (p.clone(), b"v1".to_vec())).collect();
//! #     let candidate = Candidate::new(files);
//! #     events.push(EvidenceEvent::Reserved { task: t.id.clone(), attempt: 1,
//! #                                           input_digest: Digest::from_bytes([0; 32]) });
//! #     events.push(EvidenceEvent::Settled { task: t.id.clone(), attempt: 1,
//! #         settlement: Settlement::Accepted { digest: candidate.digest(), candidate } });
//! # }
//! # let evidence = BatchEvidence::fold(events)?;
//! // `plan` is the ValidatedPlan, `evidence` the batch's execution evidence.
//! let snapshot = Snapshot::from_evidence(&evidence)?;
//! let services = AdmittedPath::admit("backend/services.py")?;
//! let schemas = AdmittedPath::admit("backend/schemas.py")?;
//!
//! // A diagnostic on the service file routes to the service task, and only to it.
//! let ledger = RepairLedger::default();
//! let finding = Diagnostic::new(services.clone(), ValidatorId::new("wiring")?, "no create()");
//! let routes = ledger.route(&plan, &evidence, &snapshot, &[finding])?;
//! let request = &routes.requests()[0];
//! assert_eq!(request.target().as_str(), "service_tasks");
//!
//! // Its proposal may not touch the model task's schema: refused whole, nothing changes.
//! let proposal = RepairProposal::new()
//!     .write(services.clone(), "class TaskModule: ...")
//!     .write(schemas.clone(), "class Task: ...");
//! let submitted = ledger.submit(&plan, &evidence, &snapshot, request, proposal);
//! assert!(matches!(&submitted.outcome,
//!     Err(RepairError::Rejected { problems, .. })
//!         if matches!(&problems[..], [ProposalProblem::NotOwned { .. }])));
//! assert_eq!(snapshot.get(&schemas).unwrap().content(), b"v1");
//! assert_eq!(submitted.ledger.proposals(request.target()), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub(crate) mod manifest;
mod repair;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::batch::BatchEvidence;
use crate::{id::TaskId, id::digest::Digest, plan::path::AdmittedPath};

pub use manifest::{FileEntry, FileManifest, FileMismatch, ManifestError};
pub use repair::{
    Diagnostic, ProposalProblem, REPAIR_PROPOSAL_BUDGET, RepairError, RepairLedger, RepairProposal,
    RepairRequest, RepairRoutes, RouteRefusal, Submitted,
};

/// Why a snapshot could not be projected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Two accepted outputs contain the same path.
    #[error("project snapshot: {path} is in the accepted outputs of both {first} and {second}")]
    ConflictingOutputs {
        /// The path.
        path: AdmittedPath,
        /// The first task (in id order).
        first: TaskId,
        /// The second task.
        second: TaskId,
    },
}

/// Where a snapshot file came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileSource {
    /// A task's accepted output.
    Generated,
    /// An admitted artifact repair of the task.
    Repair,
}

/// One file of a snapshot, attributed to the task that produced it.
#[derive(Clone, PartialEq, Eq)]
pub struct SnapshotFile {
    task: TaskId,
    source: FileSource,
    content: Arc<[u8]>,
}

impl SnapshotFile {
    /// The task the file is attributed to.
    pub fn task(&self) -> &TaskId {
        &self.task
    }

    /// Whether it came from the accepted output or a repair.
    pub fn source(&self) -> FileSource {
        self.source
    }

    /// The exact bytes.
    pub fn content(&self) -> &[u8] {
        &self.content
    }
}

impl fmt::Debug for SnapshotFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotFile")
            .field("task", &self.task)
            .field("source", &self.source)
            .field("len", &self.content.len())
            .finish()
    }
}

/// Files of accepted task outputs, each attributed to its task. Built only from
/// [`BatchEvidence::accepted_outputs`], so rejected candidates cannot be among them.
#[derive(Debug, PartialEq, Eq)]
struct GeneratedFiles {
    evidence_digest: Digest,
    plan_digest: Digest,
    files: BTreeMap<AdmittedPath, SnapshotFile>,
}

impl GeneratedFiles {
    fn from_evidence(evidence: &BatchEvidence) -> Result<Self, SnapshotError> {
        let mut outputs: Vec<_> = evidence.accepted_outputs().collect();
        outputs.sort_by(|a, b| a.0.cmp(b.0));
        let mut files = BTreeMap::new();
        for (task, output) in outputs {
            for (path, content) in output.files() {
                let file = SnapshotFile {
                    task: task.clone(),
                    source: FileSource::Generated,
                    content: Arc::from(content.as_slice()),
                };
                if let Some(previous) = files.insert(path.clone(), file) {
                    return Err(SnapshotError::ConflictingOutputs {
                        path: path.clone(),
                        first: previous.task,
                        second: task.clone(),
                    });
                }
            }
        }
        Ok(Self {
            evidence_digest: evidence.digest(),
            plan_digest: evidence.plan_digest(),
            files,
        })
    }
}

/// The admitted code overlay: files written by admitted repairs. Only
/// [`Snapshot::with_repair`] adds to it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct CodeOverlay(BTreeMap<AdmittedPath, SnapshotFile>);

/// Deletion tombstones of admitted repairs, each attributed to the repaired task. Only
/// [`Snapshot::with_repair`] adds to them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Tombstones(BTreeMap<AdmittedPath, TaskId>);

/// The one projection: generated files, overlaid by admitted repairs, minus tombstones.
fn project(
    generated: &GeneratedFiles,
    overlay: &CodeOverlay,
    tombstones: &Tombstones,
) -> BTreeMap<AdmittedPath, SnapshotFile> {
    let mut files = generated.files.clone();
    for (path, file) in &overlay.0 {
        files.insert(path.clone(), file.clone());
    }
    for path in tombstones.0.keys() {
        files.remove(path);
    }
    files
}

/// The final file set of a build, projected from its execution evidence and admitted repairs.
///
/// A value: applying a repair yields a new snapshot and leaves this one as it was.
///
/// Its only sources are accepted outputs (through [`Snapshot::from_evidence`]) and admitted
/// repairs (through [`RepairLedger::submit`]); a rejected candidate or a raw response has
/// no way in:
///
/// ```compile_fail
/// use kleene::snapshot::Snapshot;
/// use kleene::batch::Candidate;
///
/// let rejected = Candidate::default();
/// let snapshot = Snapshot::from_evidence(&rejected); // expects BatchEvidence
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Snapshot {
    generated: Arc<GeneratedFiles>,
    overlay: CodeOverlay,
    tombstones: Tombstones,
    files: BTreeMap<AdmittedPath, SnapshotFile>,
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("evidence_digest", &self.generated.evidence_digest)
            .field("files", &self.files.len())
            .field("overlay", &self.overlay.0.len())
            .field("tombstones", &self.tombstones.0.len())
            .finish()
    }
}

impl Snapshot {
    /// The snapshot of the accepted outputs in `evidence`, before any repair.
    ///
    /// # Errors
    ///
    /// [`SnapshotError::ConflictingOutputs`] when two accepted outputs contain one path.
    pub fn from_evidence(evidence: &BatchEvidence) -> Result<Self, SnapshotError> {
        let generated = Arc::new(GeneratedFiles::from_evidence(evidence)?);
        let (overlay, tombstones) = (CodeOverlay::default(), Tombstones::default());
        let files = project(&generated, &overlay, &tombstones);
        Ok(Self {
            generated,
            overlay,
            tombstones,
            files,
        })
    }

    /// A new snapshot with `writes` and `deletions` of an admitted repair of `task`.
    fn with_repair(
        &self,
        task: &TaskId,
        writes: BTreeMap<AdmittedPath, Arc<[u8]>>,
        deletions: Vec<AdmittedPath>,
    ) -> Self {
        let mut overlay = self.overlay.clone();
        let mut tombstones = self.tombstones.clone();
        for (path, content) in writes {
            tombstones.0.remove(&path);
            let file = SnapshotFile {
                task: task.clone(),
                source: FileSource::Repair,
                content,
            };
            overlay.0.insert(path, file);
        }
        for path in deletions {
            overlay.0.remove(&path);
            tombstones.0.insert(path, task.clone());
        }
        let files = project(&self.generated, &overlay, &tombstones);
        Self {
            generated: Arc::clone(&self.generated),
            overlay,
            tombstones,
            files,
        }
    }

    /// The digest of the evidence the snapshot was projected from.
    pub fn evidence_digest(&self) -> Digest {
        self.generated.evidence_digest
    }

    /// The digest of the plan that evidence executed.
    pub fn plan_digest(&self) -> Digest {
        self.generated.plan_digest
    }

    /// Every file by path, for range queries over owned directories.
    pub(crate) fn file_map(&self) -> &BTreeMap<AdmittedPath, SnapshotFile> {
        &self.files
    }

    /// Every file, sorted by path.
    pub fn files(&self) -> impl ExactSizeIterator<Item = (&AdmittedPath, &SnapshotFile)> {
        self.files.iter()
    }

    /// The file at `path`, if any.
    pub fn get(&self, path: &AdmittedPath) -> Option<&SnapshotFile> {
        self.files.get(path)
    }

    /// The number of files.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether the snapshot has no files.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Paths deleted by admitted repairs, with the task whose repair deleted each.
    pub fn tombstones(&self) -> impl Iterator<Item = (&AdmittedPath, &TaskId)> {
        self.tombstones.0.iter()
    }

    /// The exact contents: the sorted `(path, length, blake3)` list and its digest.
    pub fn manifest(&self) -> FileManifest {
        FileManifest::of_sorted(self.files.iter().map(|(p, f)| (p, f.content())))
    }

    /// The files attributed to `task`, sorted by path.
    pub(crate) fn files_of<'a>(
        &'a self,
        task: &'a TaskId,
    ) -> impl Iterator<Item = (&'a AdmittedPath, &'a SnapshotFile)> {
        self.files.iter().filter(move |(_, f)| f.task == *task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{
        Candidate, Rejection, evidence::EVIDENCE_VERSION, evidence::EvidenceEvent,
        evidence::InventoryEntry, evidence::Settlement,
    };
    use crate::{id::AgentId, id::ChannelId};

    fn p(s: &str) -> AdmittedPath {
        AdmittedPath::admit(s).unwrap()
    }

    /// Evidence where `a` is accepted with two files and `b` was rejected with one.
    fn evidence() -> BatchEvidence {
        let (a, b) = (TaskId::new("a").unwrap(), TaskId::new("b").unwrap());
        let entry = |task: &TaskId| InventoryEntry {
            task: task.clone(),
            owner: AgentId::new("Agent").unwrap(),
            budget: 1,
        };
        let accepted = Candidate::new(BTreeMap::from([
            (p("a/1"), b"one".to_vec()),
            (p("a/2"), b"two".to_vec()),
        ]));
        let rejected = Candidate::new(BTreeMap::from([(p("b/1"), b"rejected".to_vec())]));
        let call = |task: &TaskId, settlement| {
            [
                EvidenceEvent::Reserved {
                    task: task.clone(),
                    attempt: 1,
                    input_digest: Digest::from_bytes([0; 32]),
                },
                EvidenceEvent::Settled {
                    task: task.clone(),
                    attempt: 1,
                    settlement,
                },
            ]
        };
        let mut events = vec![EvidenceEvent::Started {
            channel: ChannelId::new("c").unwrap(),
            plan_digest: Digest::from_bytes([1; 32]),
            evidence_version: EVIDENCE_VERSION,
            inputs: BTreeMap::new(),
            recovery: false,
            inventory: vec![entry(&a), entry(&b)],
        }];
        events.extend(call(
            &a,
            Settlement::Accepted {
                digest: accepted.digest(),
                candidate: accepted,
            },
        ));
        events.extend(call(
            &b,
            Settlement::Rejected {
                candidate: rejected,
                rejection: Rejection::contract(&b, "bad"),
            },
        ));
        BatchEvidence::fold(events).unwrap()
    }

    #[test]
    fn rejected_candidates_never_reach_the_projection() {
        let snapshot = Snapshot::from_evidence(&evidence()).unwrap();
        let paths: Vec<_> = snapshot.files().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["a/1", "a/2"]);
        assert!(
            snapshot
                .files()
                .all(|(_, f)| f.task().as_str() == "a" && f.source() == FileSource::Generated)
        );
    }

    #[test]
    fn overlay_replaces_and_tombstones_remove_in_a_new_value() {
        let base = Snapshot::from_evidence(&evidence()).unwrap();
        let a = TaskId::new("a").unwrap();
        let writes = BTreeMap::from([(p("a/1"), Arc::<[u8]>::from(&b"ONE"[..]))]);
        let next = base.with_repair(&a, writes, vec![p("a/2")]);
        assert_eq!(next.get(&p("a/1")).unwrap().content(), b"ONE");
        assert_eq!(next.get(&p("a/1")).unwrap().source(), FileSource::Repair);
        assert!(next.get(&p("a/2")).is_none());
        assert_eq!(next.tombstones().count(), 1);
        // Writing a tombstoned path again brings it back; the base never changed.
        let again = next.with_repair(
            &a,
            BTreeMap::from([(p("a/2"), Arc::<[u8]>::from(&b"TWO"[..]))]),
            Vec::new(),
        );
        assert_eq!(again.len(), 2);
        assert_eq!(again.tombstones().count(), 0);
        assert_eq!(base.get(&p("a/1")).unwrap().content(), b"one");
        assert_ne!(base.manifest().digest(), again.manifest().digest());
        assert_eq!(base.evidence_digest(), again.evidence_digest());
    }
}
