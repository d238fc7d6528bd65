//! The acceptance record: digests that bind a plan, its execution evidence, the build and the
//! exact final files together.

use serde::Serialize;

use crate::acceptance::wire::AcceptanceRecordV2;
use crate::closure::bound::ClosuresError;
use crate::id::digest::{Canonical, CanonicalHasher, canonical_struct};
use crate::snapshot::{FileManifest, FileMismatch};
use crate::{id::ChannelId, id::TaskId, id::digest::Digest};

/// The version of the record format written by this build. Format 2 added each task's
/// closure binding; records of format 1 (none) still load.
pub(crate) const RECORD_FORMAT: u32 = 2;

/// What a build ran as: the trusted channel, the plan it executed, the version of the
/// evidence format, and the kleene version that accepted it.
///
/// # Examples
///
/// ```
/// use kleene::{acceptance::BuildBinding, id::ChannelId, id::Digest};
///
/// let plan: Digest = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262".parse()?;
/// let binding = BuildBinding::new(ChannelId::new("chan-1")?, plan, 1);
/// assert_eq!(binding.crate_version(), env!("CARGO_PKG_VERSION"));
/// assert_ne!(binding.digest(), BuildBinding::new(ChannelId::new("chan-2")?, plan, 1).digest());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildBinding {
    channel: ChannelId,
    plan_digest: Digest,
    evidence_version: u32,
    crate_version: String,
}

canonical_struct!(BuildBinding {
    channel,
    plan_digest,
    evidence_version,
    crate_version,
});

impl BuildBinding {
    /// The binding of a build on `channel` of the plan with `plan_digest`, whose evidence has
    /// format `evidence_version`, accepted by this version of kleene.
    pub fn new(channel: ChannelId, plan_digest: Digest, evidence_version: u32) -> Self {
        Self {
            channel,
            plan_digest,
            evidence_version,
            crate_version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }

    /// A binding read back from a record, naming the kleene version that wrote it.
    pub(crate) fn of_parts(
        channel: ChannelId,
        plan_digest: Digest,
        evidence_version: u32,
        crate_version: String,
    ) -> Self {
        Self {
            channel,
            plan_digest,
            evidence_version,
            crate_version,
        }
    }

    /// The trusted channel the build ran on.
    pub fn channel(&self) -> &ChannelId {
        &self.channel
    }

    /// The digest of the plan the build executed.
    pub fn plan_digest(&self) -> Digest {
        self.plan_digest
    }

    /// The format version of the execution evidence.
    pub fn evidence_version(&self) -> u32 {
        self.evidence_version
    }

    /// The kleene version that accepted the build.
    pub fn crate_version(&self) -> &str {
        &self.crate_version
    }

    /// The canonical digest of the binding.
    pub fn digest(&self) -> Digest {
        Digest::of("build binding", self)
    }
}

/// The closure of a task's accepted call, as an acceptance record binds it: the call, the
/// head of the closure's audit log and the digest of its whole record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ClosureBinding {
    call: u32,
    audit_head: Digest,
    record_digest: Digest,
}

impl ClosureBinding {
    /// The accepted call's number.
    pub fn call(&self) -> u32 {
        self.call
    }
    /// The head of the closure's hash-chained audit log.
    pub fn audit_head(&self) -> Digest {
        self.audit_head
    }
    /// The digest of the closure's whole record
    /// ([`ClosureRecord::digest`](crate::closure::ClosureRecord::digest)).
    pub fn record_digest(&self) -> Digest {
        self.record_digest
    }
}

/// One accepted task as the record lists it: its id, the digest of its accepted output and,
/// when its accepted call ran a closure, that closure's binding.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TaskResult {
    task: TaskId,
    output_digest: Digest,
    closure: Option<ClosureBinding>,
}

impl TaskResult {
    pub(crate) fn new(task: TaskId, output_digest: Digest) -> Self {
        Self {
            task,
            output_digest,
            closure: None,
        }
    }

    pub(crate) fn with_closure(
        mut self,
        call: u32,
        audit_head: Digest,
        record_digest: Digest,
    ) -> Self {
        self.closure = Some(ClosureBinding {
            call,
            audit_head,
            record_digest,
        });
        self
    }

    /// The closure of the task's accepted call, if it ran one (records of format 1 bind
    /// none).
    pub fn closure(&self) -> Option<&ClosureBinding> {
        self.closure.as_ref()
    }

    /// The task.
    pub fn task(&self) -> &TaskId {
        &self.task
    }

    /// The digest of its accepted output.
    pub fn output_digest(&self) -> Digest {
        self.output_digest
    }
}

pub(crate) fn task_results_digest(format: u32, results: &[TaskResult]) -> Digest {
    CanonicalHasher::new("task results")
        .seq(results.iter().map(|r| ResultOfFormat(format, r)))
        .finish()
}

/// A task result as a record of the given format binds it.
struct ResultOfFormat<'a>(u32, &'a TaskResult);

impl Canonical for ResultOfFormat<'_> {
    fn encode(&self, h: &mut CanonicalHasher) {
        let ResultOfFormat(
            format,
            TaskResult {
                task,
                output_digest,
                closure,
            },
        ) = self;
        h.put(&(task, output_digest));
        // Format 1 bound no closures; its digests stay what they were.
        if *format >= 2 {
            h.put(closure);
        }
    }
}

canonical_struct!(ClosureBinding {
    call,
    audit_head,
    record_digest,
});

/// Everything a record states; its digest is the record digest. Shared by records made by
/// acceptance and records read back from an archive, so both digest the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordBody {
    pub(super) format: u32,
    pub(super) binding: BuildBinding,
    pub(super) binding_digest: Digest,
    pub(super) plan_digest: Digest,
    pub(super) task_inventory_digest: Digest,
    pub(super) evidence_digest: Digest,
    pub(super) task_results: Vec<TaskResult>,
    pub(super) task_results_digest: Digest,
    pub(super) files: FileManifest,
}

// The binding and the task results are bound through their own digests, which a load
// recomputes and checks.
canonical_struct!(RecordBody {
    format,
    binding_digest,
    plan_digest,
    task_inventory_digest,
    evidence_digest,
    task_results_digest,
    files,
} skip {
    binding,
    task_results,
});

/// Why a record read back from its JSON form was refused. Each variant names what does not
/// hold: the field, the task or the file path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The text is not a record at all.
    #[error(
        "read acceptance record: it is not a record (line {line}, column {column}: {message}); \
         restore the record kleene wrote"
    )]
    Unreadable {
        /// What the JSON reader reported.
        message: String,
        /// The line of the problem (1-based).
        line: usize,
        /// The column of the problem (1-based).
        column: usize,
    },
    /// A format this build does not read.
    #[error(
        "read acceptance record: format {found} is not one this build reads (1 to {RECORD_FORMAT}); \
         read it with the kleene version that wrote it"
    )]
    Format {
        /// The format found.
        found: u32,
    },
    /// A stated digest is not the digest of what it covers: the record was edited or
    /// damaged after it was sealed.
    #[error(
        "read acceptance record: {field} is recorded as {recorded} but its contents digest to \
         {computed}; the record was edited or damaged after it was sealed"
    )]
    Digest {
        /// Which digest, as a field path (`record_digest`, `files.digest`, …).
        field: &'static str,
        /// The digest written in the record.
        recorded: Digest,
        /// The digest recomputed from the record's contents.
        computed: Digest,
    },
    /// Task results out of order or repeated.
    #[error(
        "read acceptance record: task {task} is out of order or repeated in task_results; \
         the record was edited after it was sealed"
    )]
    Unsorted {
        /// The first task out of place.
        task: TaskId,
    },
    /// File entries out of order or repeated.
    #[error(
        "read acceptance record: file {path} is out of order or repeated in files.entries; \
         the record was edited after it was sealed"
    )]
    UnsortedFile {
        /// The first path out of place (as written).
        path: String,
    },
    /// Every digest recomputes but the text is not the one form kleene writes, so something
    /// (an added field, a reordering) rides along unchecked.
    #[error(
        "read acceptance record: it is not in the canonical form kleene writes (an added, \
         reordered or reformatted field); restore the record kleene wrote"
    )]
    NonCanonical,
}

impl RecordError {
    /// The field this error is about, if it names one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::Format { .. } => Some("format"),
            Self::Digest { field, .. } => Some(field),
            Self::Unsorted { .. } => Some("task_results"),
            Self::UnsortedFile { .. } => Some("files.entries"),
            _ => None,
        }
    }
}

impl RecordBody {
    pub(crate) fn digest(&self) -> Digest {
        Digest::of("acceptance record", self)
    }

    /// Recomputes every digest the body can recompute from its own contents (the file
    /// manifest checked its own digest when it was read).
    pub(crate) fn check(&self) -> Result<(), RecordError> {
        if !(1..=RECORD_FORMAT).contains(&self.format)
            || (self.format < 2 && self.task_results.iter().any(|r| r.closure.is_some()))
        {
            return Err(RecordError::Format { found: self.format });
        }
        let computed = self.binding.digest();
        if computed != self.binding_digest {
            return Err(RecordError::Digest {
                field: "binding_digest",
                recorded: self.binding_digest,
                computed,
            });
        }
        if self.binding.plan_digest != self.plan_digest {
            return Err(RecordError::Digest {
                field: "binding.plan_digest",
                recorded: self.binding.plan_digest,
                computed: self.plan_digest,
            });
        }
        if let Some(w) = self
            .task_results
            .windows(2)
            .find(|w| w[0].task >= w[1].task)
        {
            return Err(RecordError::Unsorted {
                task: w[1].task.clone(),
            });
        }
        let computed = task_results_digest(self.format, &self.task_results);
        if computed != self.task_results_digest {
            return Err(RecordError::Digest {
                field: "task_results_digest",
                recorded: self.task_results_digest,
                computed,
            });
        }
        Ok(())
    }
}

/// Passing acceptance of one build: the digests of its plan, task inventory and results,
/// build binding and exact file contents, and a digest of the record itself.
///
/// Only [`accept`](crate::acceptance::accept) makes one, after checking the complete final snapshot; it
/// has no public constructor and cannot be deserialised. A record carrying only a status
/// therefore cannot stand in for it: whatever requires an `AcceptanceRecord` (export) can be
/// authorised by nothing but a passing acceptance run.
///
/// ```compile_fail
/// // A status read from somewhere cannot become an AcceptanceRecord.
/// let record: kleene::acceptance::AcceptanceRecord = serde_json::from_str(r#"{"status":"accepted"}"#).unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptanceRecord {
    body: RecordBody,
    record_digest: Digest,
}

impl AcceptanceRecord {
    pub(crate) fn seal(body: RecordBody) -> Self {
        let record_digest = body.digest();
        Self {
            body,
            record_digest,
        }
    }

    /// The digest of the whole record: what a verifier of an exported archive trusts.
    pub fn digest(&self) -> Digest {
        self.record_digest
    }

    /// The build binding.
    pub fn binding(&self) -> &BuildBinding {
        &self.body.binding
    }

    /// The digest of the validated plan.
    pub fn plan_digest(&self) -> Digest {
        self.body.plan_digest
    }

    /// The digest of the plan's task inventory (ids, owners, owned paths).
    pub fn task_inventory_digest(&self) -> Digest {
        self.body.task_inventory_digest
    }

    /// The digest of the batch evidence the build was accepted from.
    pub fn evidence_digest(&self) -> Digest {
        self.body.evidence_digest
    }

    /// Every accepted task and the digest of its output, sorted by task id.
    pub fn task_results(&self) -> &[TaskResult] {
        &self.body.task_results
    }

    /// The digest of [`task_results`](Self::task_results).
    pub fn task_results_digest(&self) -> Digest {
        self.body.task_results_digest
    }

    /// The exact final files.
    pub fn files(&self) -> &FileManifest {
        &self.body.files
    }

    /// The record as canonical JSON (the form stored in an exported archive).
    pub fn to_json(&self) -> String {
        self.wire().to_json()
    }

    /// The record as it is written.
    pub(crate) fn wire(&self) -> AcceptanceRecordV2<'_> {
        AcceptanceRecordV2::of(&self.body, self.record_digest)
    }

    /// Checks stored closure records (task, call, record) against the closure each
    /// accepted task's call is bound to; returns how many bound closures matched.
    ///
    /// # Errors
    ///
    /// [`ClosuresError`] naming every accepted call whose record is missing or changed.
    pub fn verify_closures<'r>(
        &self,
        closures: impl IntoIterator<Item = (&'r TaskId, u32, &'r crate::closure::ClosureRecord)>,
    ) -> Result<usize, ClosuresError> {
        super::closures::verify(&self.body.task_results, closures)
    }
}

/// An acceptance record read back from its JSON form, with every digest of its body
/// recomputed: the binding, the task results, the file list and the record digest itself.
///
/// It describes an acceptance; it does not authorise anything (only an
/// [`AcceptanceRecord`] made by [`accept`](crate::acceptance::accept) does). What a reader can trust
/// it for is in the threat model (`SECURITY.md`): the digests catch accidental damage and
/// edits that did not re-seal the record; a signature catches re-sealing.
///
/// # Examples
///
/// An edited length is refused, naming the digest that no longer recomputes:
///
/// ```
/// # use std::collections::BTreeMap;
/// # use kleene::batch::{BatchEvidence, Candidate, evidence::EVIDENCE_VERSION, evidence::EvidenceEvent,
/// #                     evidence::InventoryEntry, evidence::Settlement};
/// # use kleene::{plan::AdmittedPath, AppBuildPlan, acceptance::BuildBinding, id::ChannelId, id::Digest, snapshot::Snapshot, acceptance::accept};
/// # let plan = AppBuildPlan::from_json(r#"{"tasks": [
/// #   {"id": "config_app", "kind": {"lane": "config"}, "owner": "ConfigAgent",
/// #    "spec": {"intent": "app config"}, "owned_paths": ["config/app.yaml"]}
/// # ]}"#)?.validate()?;
/// # let task = plan.topological_order()[0].clone();
/// # let candidate = Candidate::new(BTreeMap::from([
/// #     (AdmittedPath::admit("config/app.yaml")?, b"name: demo\n".to_vec()),
/// # ]));
/// # let channel = ChannelId::new("chan-1")?;
/// # let evidence = BatchEvidence::fold([
/// #     EvidenceEvent::Started { channel: channel.clone(), plan_digest: plan.digest(),
/// #         evidence_version: EVIDENCE_VERSION, inputs: BTreeMap::new(), recovery: false,
/// #         inventory: vec![InventoryEntry {
/// #             task: task.clone(), owner: "ConfigAgent".parse()?, budget: 4 }] },
/// #     EvidenceEvent::Reserved { task: task.clone(), attempt: 1,
/// #                               input_digest: Digest::from_bytes([0; 32]) },
/// #     EvidenceEvent::Settled { task, attempt: 1,
/// #         settlement: Settlement::Accepted { digest: candidate.digest(), candidate } },
/// # ])?;
/// # let snapshot = Snapshot::from_evidence(&evidence)?;
/// # let binding = BuildBinding::new(channel, plan.digest(), EVIDENCE_VERSION);
/// use kleene::{acceptance::FileMismatch, acceptance::RecordDifference, acceptance::StoredRecord};
///
/// let record = accept(&plan, &evidence, &snapshot, &binding)?;
/// let json = record.to_json();
/// assert_eq!(StoredRecord::from_json(&json)?.digest(), record.digest());
///
/// let edited = json.replacen("\"len\": 11", "\"len\": 12", 1);
/// let err = StoredRecord::from_json(&edited).unwrap_err();
/// assert_eq!(err.field(), Some("files.digest"));
/// // Compared with the record the evidence gives, the difference is named by path.
/// let differences = record.differences(&edited)?;
/// assert!(matches!(&differences[..], [RecordDifference::File(FileMismatch::Changed { path, .. })]
///     if path.as_str() == "config/app.yaml"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    pub(super) body: RecordBody,
    pub(super) record_digest: Digest,
}

impl StoredRecord {
    /// Reads a record from the JSON that [`AcceptanceRecord::to_json`] wrote, recomputing
    /// every digest of its body and requiring the exact canonical text.
    ///
    /// # Errors
    ///
    /// [`RecordError`] naming the field, task or path that does not hold.
    pub fn from_json(json: &str) -> Result<Self, RecordError> {
        let record = Self::parse(json.as_bytes())?;
        if record.to_json() != json {
            return Err(RecordError::NonCanonical);
        }
        Ok(record)
    }

    /// Reads and checks a record, accepting any JSON layout of it (the archive verifier
    /// checks the canonical form itself, to name the entry).
    pub(crate) fn parse(json: &[u8]) -> Result<Self, RecordError> {
        AcceptanceRecordV2::parse(json)?.into_stored()
    }

    /// The record of `body` sealed with `record_digest`, once every digest recomputes.
    pub(crate) fn checked(body: RecordBody, record_digest: Digest) -> Result<Self, RecordError> {
        let record = Self {
            body,
            record_digest,
        };
        record.check()?;
        Ok(record)
    }

    fn check(&self) -> Result<(), RecordError> {
        self.body.check()?;
        let computed = self.body.digest();
        if computed != self.record_digest {
            return Err(RecordError::Digest {
                field: "record_digest",
                recorded: self.record_digest,
                computed,
            });
        }
        Ok(())
    }

    /// The digest of the whole record, recomputed from its body.
    pub fn digest(&self) -> Digest {
        self.record_digest
    }

    /// The build binding.
    pub fn binding(&self) -> &BuildBinding {
        &self.body.binding
    }

    /// The digest of the batch evidence the build was accepted from.
    pub fn evidence_digest(&self) -> Digest {
        self.body.evidence_digest
    }

    /// Every accepted task and the digest of its output, sorted by task id.
    pub fn task_results(&self) -> &[TaskResult] {
        &self.body.task_results
    }

    /// The exact final files.
    pub fn files(&self) -> &FileManifest {
        &self.body.files
    }

    /// The record as canonical JSON (byte for byte what it was read from, when read with
    /// [`from_json`](Self::from_json)).
    pub fn to_json(&self) -> String {
        AcceptanceRecordV2::of(&self.body, self.record_digest).to_json()
    }

    /// Checks stored closure records (task, call, record) against the closure each
    /// accepted task's call is bound to; returns how many bound closures matched.
    ///
    /// # Errors
    ///
    /// [`ClosuresError`] naming every accepted call whose record is missing or changed.
    pub fn verify_closures<'r>(
        &self,
        closures: impl IntoIterator<Item = (&'r TaskId, u32, &'r crate::closure::ClosureRecord)>,
    ) -> Result<usize, ClosuresError> {
        super::closures::verify(&self.body.task_results, closures)
    }
}

/// One way a stored record differs from the record the evidence gives: a field, a task or
/// a file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordDifference {
    /// A field of the record (a digest, the format, the binding) differs.
    Field {
        /// The field path, as in the JSON (`binding.channel`, `evidence_digest`, …).
        field: &'static str,
        /// Its value in the stored record.
        stored: String,
        /// Its value in the expected record.
        expected: String,
    },
    /// A task is in the expected record but not in the stored one.
    MissingTask {
        /// The task.
        task: TaskId,
    },
    /// A task is in the stored record but not in the expected one (a renamed task shows
    /// as one missing and one extra).
    ExtraTask {
        /// The task, as written.
        task: TaskId,
    },
    /// A task's output digest differs.
    TaskOutput {
        /// The task.
        task: TaskId,
        /// The digest in the stored record.
        stored: Digest,
        /// The digest in the expected record.
        expected: Digest,
    },
    /// The closure binding of a task's accepted call differs.
    TaskClosure {
        /// The task.
        task: TaskId,
        /// The closure record digest in the stored record, if it binds one.
        stored: Option<Digest>,
        /// The closure record digest in the expected record, if it binds one.
        expected: Option<Digest>,
    },
    /// A file entry differs (expected = the evidence's record, found = the stored one).
    File(FileMismatch),
}

impl std::fmt::Display for RecordDifference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Field {
                field,
                stored,
                expected,
            } => write!(f, "field {field}: stored {stored}, expected {expected}"),
            Self::MissingTask { task } => write!(f, "task {task}: missing from the stored record"),
            Self::ExtraTask { task } => write!(f, "task {task}: not in the expected record"),
            Self::TaskOutput {
                task,
                stored,
                expected,
            } => write!(
                f,
                "task {task}: output digest stored {stored}, expected {expected}"
            ),
            Self::TaskClosure {
                task,
                stored,
                expected,
            } => {
                let shown = |d: &Option<Digest>| d.map_or("none".to_owned(), |d| d.to_string());
                write!(
                    f,
                    "task {task}: closure record digest stored {}, expected {}",
                    shown(stored),
                    shown(expected)
                )
            }
            Self::File(m) => write!(f, "file {}: {m}", m.path()),
        }
    }
}

impl AcceptanceRecord {
    /// Every field, task and file where the record stored as `json` differs from this one,
    /// checked or not: what to show when a stored record is refused or no longer matches.
    /// Differences in digests that only summarise listed values (such as
    /// `task_results_digest`) are left out when the values themselves are named.
    ///
    /// # Errors
    ///
    /// [`RecordError::Unreadable`] when `json` is not shaped like a record at all.
    pub fn differences(&self, json: &str) -> Result<Vec<RecordDifference>, RecordError> {
        let wire = AcceptanceRecordV2::parse(json.as_bytes())?;
        let mut out = Vec::new();
        let mut field = |field: &'static str, stored: String, expected: String| {
            if stored != expected {
                out.push(RecordDifference::Field {
                    field,
                    stored,
                    expected,
                });
            }
        };
        let b = &self.body;
        field("format", wire.format.to_string(), b.format.to_string());
        field(
            "binding.channel",
            wire.binding.channel.to_string(),
            b.binding.channel.to_string(),
        );
        field(
            "binding.plan_digest",
            wire.binding.plan_digest.to_string(),
            b.binding.plan_digest.to_string(),
        );
        field(
            "binding.evidence_version",
            wire.binding.evidence_version.to_string(),
            b.binding.evidence_version.to_string(),
        );
        field(
            "binding.crate_version",
            wire.binding.crate_version.to_string(),
            b.binding.crate_version.clone(),
        );
        field(
            "binding_digest",
            wire.binding_digest.to_string(),
            b.binding_digest.to_string(),
        );
        field(
            "plan_digest",
            wire.plan_digest.to_string(),
            b.plan_digest.to_string(),
        );
        field(
            "task_inventory_digest",
            wire.task_inventory_digest.to_string(),
            b.task_inventory_digest.to_string(),
        );
        field(
            "evidence_digest",
            wire.evidence_digest.to_string(),
            b.evidence_digest.to_string(),
        );
        let tasks_named = task_differences(&wire.task_results(), &b.task_results);
        if tasks_named.is_empty() {
            field(
                "task_results_digest",
                wire.task_results_digest.to_string(),
                b.task_results_digest.to_string(),
            );
        }
        let stored_files = wire.files.unchecked();
        let files_named = b.files.compare(&stored_files);
        if files_named.is_empty() {
            field(
                "files.digest",
                wire.files.digest.to_string(),
                b.files.digest().to_string(),
            );
        }
        if tasks_named.is_empty() && files_named.is_empty() {
            field(
                "record_digest",
                wire.record_digest.to_string(),
                self.record_digest.to_string(),
            );
        }
        out.extend(tasks_named);
        out.extend(files_named.into_iter().map(RecordDifference::File));
        Ok(out)
    }
}

fn task_differences(stored: &[TaskResult], expected: &[TaskResult]) -> Vec<RecordDifference> {
    use std::collections::BTreeMap;
    let stored: BTreeMap<_, _> = stored.iter().map(|r| (&r.task, r)).collect();
    let expected: BTreeMap<_, _> = expected.iter().map(|r| (&r.task, r)).collect();
    let mut out = Vec::new();
    for (task, want) in &expected {
        match stored.get(task) {
            None => out.push(RecordDifference::MissingTask {
                task: (*task).clone(),
            }),
            Some(got) if got.output_digest != want.output_digest => {
                out.push(RecordDifference::TaskOutput {
                    task: (*task).clone(),
                    stored: got.output_digest,
                    expected: want.output_digest,
                })
            }
            Some(got) if got.closure != want.closure => out.push(RecordDifference::TaskClosure {
                task: (*task).clone(),
                stored: got.closure.map(|c| c.record_digest),
                expected: want.closure.map(|c| c.record_digest),
            }),
            Some(_) => {}
        }
    }
    for task in stored.keys().filter(|t| !expected.contains_key(*t)) {
        out.push(RecordDifference::ExtraTask {
            task: (*task).clone(),
        });
    }
    out
}

/// The one JSON form of what embeds a record (its in-toto statement), so it can be
/// re-rendered byte for byte.
pub(crate) fn canonical_json<T: Serialize>(value: &T) -> String {
    // Plain structs, strings, numbers and sequences (no maps with non-string keys, no
    // floats), which serde_json always serialises.
    serde_json::to_string_pretty(value).expect("acceptance records always serialise to JSON")
}
