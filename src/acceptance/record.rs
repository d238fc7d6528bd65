//! The acceptance record: digests that bind a plan, its execution evidence, the build and the
//! exact final files together.

use serde::{Deserialize, Serialize};

use super::FileManifest;
use crate::digest::CanonicalHasher;
use crate::{ChannelId, Digest, TaskId};

/// The version of the record format written by this build.
pub const RECORD_FORMAT: u32 = 1;

/// What a build ran as: the trusted channel, the plan it executed, the version of the
/// evidence format, and the kleene version that accepted it.
///
/// # Examples
///
/// ```
/// use kleene::{BuildBinding, ChannelId, Digest};
///
/// let plan: Digest = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262".parse()?;
/// let binding = BuildBinding::new(ChannelId::new("chan-1")?, plan, 1);
/// assert_eq!(binding.crate_version(), env!("CARGO_PKG_VERSION"));
/// assert_ne!(binding.digest(), BuildBinding::new(ChannelId::new("chan-2")?, plan, 1).digest());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildBinding {
    channel: ChannelId,
    plan_digest: Digest,
    evidence_version: u32,
    crate_version: String,
}

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
        CanonicalHasher::new("build binding")
            .str(self.channel.as_str())
            .digest(&self.plan_digest)
            .u64(u64::from(self.evidence_version))
            .str(&self.crate_version)
            .finish()
    }
}

/// One accepted task as the record lists it: its id and the digest of its accepted output.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TaskResult {
    task: TaskId,
    output_digest: Digest,
}

impl TaskResult {
    pub(crate) fn new(task: TaskId, output_digest: Digest) -> Self {
        Self {
            task,
            output_digest,
        }
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

pub(crate) fn task_results_digest(results: &[TaskResult]) -> Digest {
    let mut h = CanonicalHasher::new("task results");
    h.u64(results.len() as u64);
    for r in results {
        h.str(r.task.as_str()).digest(&r.output_digest);
    }
    h.finish()
}

/// Everything a record states; its digest is the record digest. Shared by records made by
/// acceptance and records read back from an archive, so both digest the same way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RecordBody {
    pub(crate) format: u32,
    pub(crate) binding: BuildBinding,
    pub(crate) binding_digest: Digest,
    pub(crate) plan_digest: Digest,
    pub(crate) task_inventory_digest: Digest,
    pub(crate) evidence_digest: Digest,
    pub(crate) task_results: Vec<TaskResult>,
    pub(crate) task_results_digest: Digest,
    pub(crate) files: FileManifest,
}

/// Why the fields of a record do not hold together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// A format this build does not read.
    #[error("read acceptance record: format {found} is not the supported {RECORD_FORMAT}")]
    Format {
        /// The format found.
        found: u32,
    },
    /// A stated digest is not the digest of what it covers.
    #[error(
        "read acceptance record: {field} is recorded as {recorded} but recomputes to {computed}"
    )]
    Digest {
        /// Which digest.
        field: &'static str,
        /// The digest written in the record.
        recorded: Digest,
        /// The digest recomputed from the record's contents.
        computed: Digest,
    },
    /// Task results out of order or repeated.
    #[error("read acceptance record: task {task} is out of order or repeated")]
    Unsorted {
        /// The first task out of place.
        task: TaskId,
    },
}

impl RecordBody {
    pub(crate) fn digest(&self) -> Digest {
        CanonicalHasher::new("acceptance record")
            .u64(u64::from(self.format))
            .digest(&self.binding_digest)
            .digest(&self.plan_digest)
            .digest(&self.task_inventory_digest)
            .digest(&self.evidence_digest)
            .digest(&self.task_results_digest)
            .digest(&self.files.digest())
            .finish()
    }

    /// Recomputes every digest the body can recompute from its own contents (the file
    /// manifest checked its own digest when it was read).
    pub(crate) fn check(&self) -> Result<(), RecordError> {
        if self.format != RECORD_FORMAT {
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
        let computed = task_results_digest(&self.task_results);
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
/// Only [`accept`](crate::accept) makes one, after checking the complete final snapshot; it
/// has no public constructor and cannot be deserialised. A record carrying only a status
/// therefore cannot stand in for it: whatever requires an `AcceptanceRecord` (export) can be
/// authorised by nothing but a passing acceptance run.
///
/// ```compile_fail
/// // A status read from somewhere cannot become an AcceptanceRecord.
/// let record: kleene::AcceptanceRecord = serde_json::from_str(r#"{"status":"accepted"}"#).unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AcceptanceRecord {
    #[serde(flatten)]
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
        canonical_json(self)
    }
}

/// A record read back from JSON whose digests all recompute. It describes an acceptance; it
/// does not authorise anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReadRecord {
    #[serde(flatten)]
    pub(crate) body: RecordBody,
    pub(crate) record_digest: Digest,
}

impl ReadRecord {
    pub(crate) fn check(&self) -> Result<(), RecordError> {
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
}

/// The one JSON form of a record, so a record read back can be re-rendered byte for byte.
pub(crate) fn canonical_json<T: Serialize>(value: &T) -> String {
    // The record is plain structs, strings, numbers and sequences (no maps with non-string
    // keys, no floats), which serde_json always serialises.
    serde_json::to_string_pretty(value).expect("acceptance records always serialise to JSON")
}
