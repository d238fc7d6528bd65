//! The final file set of a build: one projection of accepted task outputs, the admitted
//! repair overlay and deletion tombstones.
//!
//! A [`Snapshot`] can only be made from [`BatchEvidence`] (its accepted outputs, never a
//! rejected candidate or a raw response) and changed only by an admitted artifact repair
//! (see [`RepairLedger`]), which yields a new snapshot value. Validation, acceptance and
//! export all read the same projection.
//!
//! ```
//! use kleene::Snapshot;
//! use kleene::batch::BatchEvidence;
//!
//! # fn demo(evidence: &BatchEvidence) -> Result<(), Box<dyn std::error::Error>> {
//! let snapshot = Snapshot::from_evidence(evidence)?;
//! for (path, file) in snapshot.files() {
//!     println!("{path} from {} ({} bytes)", file.task(), file.content().len());
//! }
//! # Ok(()) }
//! ```


use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::acceptance::FileManifest;
use crate::batch::BatchEvidence;
use crate::{AdmittedPath, Digest, TaskId};

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
