//! The record of the acceptance record's JSON form (`acceptance.json`, the record inside an
//! export, the predicate of its in-toto statement).
//!
//! The record mirrors the text kleene writes, key for key and in that order, so the domain
//! types in `crate::acceptance` can change without moving a byte, and a record read back can
//! be re-rendered byte for byte. Format 1 is the same record without any task's `closure`
//! key; reading checks the format the record declares.
//!
//! ```text
//! let json = AcceptanceRecordV2::of(&body, record_digest).to_json();
//! let stored = AcceptanceRecordV2::parse(json.as_bytes())?.into_stored()?;
//! ```

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::acceptance::record::{BuildBinding, RecordBody, RecordError, StoredRecord, TaskResult};
use crate::plan::path::AdmittedPath;
use crate::snapshot::manifest::{FileEntry, FileManifest, ManifestError};
use crate::{id::ChannelId, id::TaskId, id::digest::Digest};

/// What a build ran as.
#[derive(Serialize, Deserialize)]
pub(crate) struct BuildBindingV1<'a> {
    pub(crate) channel: Cow<'a, ChannelId>,
    pub(crate) plan_digest: Digest,
    pub(crate) evidence_version: u32,
    pub(crate) crate_version: Cow<'a, str>,
}

impl<'a> From<&'a BuildBinding> for BuildBindingV1<'a> {
    fn from(b: &'a BuildBinding) -> Self {
        Self {
            channel: Cow::Borrowed(b.channel()),
            plan_digest: b.plan_digest(),
            evidence_version: b.evidence_version(),
            crate_version: Cow::Borrowed(b.crate_version()),
        }
    }
}

impl From<BuildBindingV1<'_>> for BuildBinding {
    fn from(b: BuildBindingV1<'_>) -> Self {
        BuildBinding::of_parts(
            b.channel.into_owned(),
            b.plan_digest,
            b.evidence_version,
            b.crate_version.into_owned(),
        )
    }
}

/// The closure an accepted call is bound to (added in format 2).
#[derive(Clone, Copy, Serialize, Deserialize)]
pub(crate) struct ClosureBindingV2 {
    call: u32,
    audit_head: Digest,
    record_digest: Digest,
}

/// One accepted task.
#[derive(Serialize, Deserialize)]
pub(crate) struct TaskResultV2<'a> {
    task: Cow<'a, TaskId>,
    output_digest: Digest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    closure: Option<ClosureBindingV2>,
}

impl<'a> From<&'a TaskResult> for TaskResultV2<'a> {
    fn from(r: &'a TaskResult) -> Self {
        Self {
            task: Cow::Borrowed(r.task()),
            output_digest: r.output_digest(),
            closure: r.closure().map(|c| ClosureBindingV2 {
                call: c.call(),
                audit_head: c.audit_head(),
                record_digest: c.record_digest(),
            }),
        }
    }
}

impl From<&TaskResultV2<'_>> for TaskResult {
    fn from(r: &TaskResultV2<'_>) -> Self {
        let result = TaskResult::new(TaskId::clone(&r.task), r.output_digest);
        match r.closure {
            None => result,
            Some(c) => result.with_closure(c.call, c.audit_head, c.record_digest),
        }
    }
}

/// One file of the manifest.
#[derive(Clone, Serialize, Deserialize)]
pub(crate) struct FileEntryV1<'a> {
    path: Cow<'a, AdmittedPath>,
    len: u64,
    blake3: Digest,
}

impl From<FileEntryV1<'_>> for FileEntry {
    fn from(e: FileEntryV1<'_>) -> Self {
        FileEntry::of_parts(e.path.into_owned(), e.len, e.blake3)
    }
}

/// The exact final files, as written: not yet checked against their digest.
#[derive(Serialize, Deserialize)]
pub(crate) struct FileManifestV1<'a> {
    entries: Vec<FileEntryV1<'a>>,
    pub(crate) digest: Digest,
}

impl<'a> From<&'a FileManifest> for FileManifestV1<'a> {
    fn from(m: &'a FileManifest) -> Self {
        Self {
            entries: m
                .entries()
                .iter()
                .map(|e| FileEntryV1 {
                    path: Cow::Borrowed(e.path()),
                    len: e.len(),
                    blake3: e.blake3(),
                })
                .collect(),
            digest: m.digest(),
        }
    }
}

impl FileManifestV1<'_> {
    /// The entries as written, sorted and deduplicated but not checked against the recorded
    /// digest: for naming what differs in a manifest that was refused.
    pub(crate) fn unchecked(&self) -> FileManifest {
        let mut entries: Vec<FileEntry> = self.entries.iter().cloned().map(Into::into).collect();
        entries.sort_by(|a, b| a.path().cmp(b.path()));
        entries.dedup_by(|a, b| a.path() == b.path());
        FileManifest::from_sorted(entries)
    }
}

impl TryFrom<FileManifestV1<'_>> for FileManifest {
    type Error = ManifestError;

    /// The manifest, if its entries are sorted, unique and digest to the recorded digest.
    fn try_from(wire: FileManifestV1<'_>) -> Result<Self, ManifestError> {
        if let Some(pair) = wire.entries.windows(2).find(|w| w[0].path >= w[1].path) {
            return Err(ManifestError::Unsorted {
                path: pair[1].path.to_string(),
            });
        }
        let manifest = Self::from_sorted(wire.entries.into_iter().map(Into::into).collect());
        if manifest.digest() != wire.digest {
            return Err(ManifestError::DigestMismatch {
                recorded: wire.digest,
                computed: manifest.digest(),
            });
        }
        Ok(manifest)
    }
}

/// An acceptance record, format 2 (each task's closure binding); format 1 is the same
/// record without closure bindings.
#[derive(Serialize, Deserialize)]
pub(crate) struct AcceptanceRecordV2<'a> {
    pub(crate) format: u32,
    pub(crate) binding: BuildBindingV1<'a>,
    pub(crate) binding_digest: Digest,
    pub(crate) plan_digest: Digest,
    pub(crate) task_inventory_digest: Digest,
    pub(crate) evidence_digest: Digest,
    pub(crate) task_results: Vec<TaskResultV2<'a>>,
    pub(crate) task_results_digest: Digest,
    pub(crate) files: FileManifestV1<'a>,
    pub(crate) record_digest: Digest,
}

impl<'a> AcceptanceRecordV2<'a> {
    /// The record of `body` sealed with `record_digest`.
    pub(crate) fn of(body: &'a RecordBody, record_digest: Digest) -> Self {
        Self {
            format: body.format,
            binding: (&body.binding).into(),
            binding_digest: body.binding_digest,
            plan_digest: body.plan_digest,
            task_inventory_digest: body.task_inventory_digest,
            evidence_digest: body.evidence_digest,
            task_results: body.task_results.iter().map(Into::into).collect(),
            task_results_digest: body.task_results_digest,
            files: (&body.files).into(),
            record_digest,
        }
    }

    /// The one JSON form of a record, so a record read back re-renders byte for byte.
    pub(crate) fn to_json(&self) -> String {
        // Plain structs, strings, numbers and sequences (no maps with non-string keys, no
        // floats): serde_json serialises them without fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The task results as written, for naming what differs.
    pub(crate) fn task_results(&self) -> Vec<TaskResult> {
        self.task_results.iter().map(Into::into).collect()
    }
}

impl AcceptanceRecordV2<'static> {
    /// Reads the record from JSON, in any layout, trusting nothing yet.
    ///
    /// # Errors
    ///
    /// [`RecordError::Unreadable`] with the line and column of the problem.
    pub(crate) fn parse(json: &[u8]) -> Result<Self, RecordError> {
        serde_json::from_slice(json).map_err(|e| RecordError::Unreadable {
            message: strip_position(&e),
            line: e.line(),
            column: e.column(),
        })
    }

    /// The stored record, with every digest of its body recomputed and checked.
    ///
    /// # Errors
    ///
    /// [`RecordError`] naming the field, task or path that does not hold.
    pub(crate) fn into_stored(self) -> Result<StoredRecord, RecordError> {
        let task_results = self.task_results();
        let files = FileManifest::try_from(self.files).map_err(|e| match e {
            ManifestError::Unsorted { path } => RecordError::UnsortedFile { path },
            ManifestError::DigestMismatch { recorded, computed } => RecordError::Digest {
                field: "files.digest",
                recorded,
                computed,
            },
        })?;
        StoredRecord::checked(
            RecordBody {
                format: self.format,
                binding: self.binding.into(),
                binding_digest: self.binding_digest,
                plan_digest: self.plan_digest,
                task_inventory_digest: self.task_inventory_digest,
                evidence_digest: self.evidence_digest,
                task_results,
                task_results_digest: self.task_results_digest,
                files,
            },
            self.record_digest,
        )
    }
}

/// serde_json appends " at line L column C" to its messages; the error carries them apart.
fn strip_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

// The binding's serde form is its record's (a JSON copy has the record's shape).
impl Serialize for BuildBinding {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        BuildBindingV1::from(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for BuildBinding {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        BuildBindingV1::deserialize(d).map(Into::into)
    }
}

// A record serialises as its JSON form (the in-toto statement embeds it); it never
// deserialises: a record is read with `StoredRecord::from_json`, which checks it.
impl Serialize for crate::acceptance::AcceptanceRecord {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.wire().serialize(s)
    }
}

impl Serialize for StoredRecord {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        AcceptanceRecordV2::of(&self.body, self.record_digest).serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(b: u8) -> Digest {
        Digest::from_bytes([b; 32])
    }

    /// A task result's closure key is written only when it binds one, and reads back.
    #[test]
    fn task_results_round_trip_with_and_without_a_closure() {
        let plain = TaskResult::new(TaskId::new("a").unwrap(), d(1));
        let bound = plain.clone().with_closure(2, d(3), d(4));
        let json = serde_json::to_string(&TaskResultV2::from(&plain)).unwrap();
        assert!(!json.contains("closure"));
        let back: TaskResultV2<'_> = serde_json::from_str(&json).unwrap();
        assert_eq!(TaskResult::from(&back), plain);
        let json = serde_json::to_string(&TaskResultV2::from(&bound)).unwrap();
        let back = TaskResult::from(&serde_json::from_str::<TaskResultV2<'_>>(&json).unwrap());
        let c = back.closure().unwrap();
        assert_eq!(
            (c.call(), c.audit_head(), c.record_digest()),
            (2, d(3), d(4))
        );
    }

    /// A manifest read back is refused, by a typed error, when out of order or when its
    /// entries do not digest to its recorded digest.
    #[test]
    fn a_manifest_is_checked_on_the_way_in() {
        let files = std::collections::BTreeMap::from([
            (AdmittedPath::admit("a").unwrap(), b"1".to_vec()),
            (AdmittedPath::admit("b").unwrap(), b"2".to_vec()),
        ]);
        let m = FileManifest::compute(&files);
        let json = serde_json::to_string(&FileManifestV1::from(&m)).unwrap();
        let read = |json: &str| {
            FileManifest::try_from(serde_json::from_str::<FileManifestV1<'_>>(json).unwrap())
        };
        assert_eq!(read(&json).unwrap(), m);
        let tampered = json.replacen("\"len\":1", "\"len\":2", 1);
        assert!(matches!(
            read(&tampered),
            Err(ManifestError::DigestMismatch { .. })
        ));
        let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
        v["entries"].as_array_mut().unwrap().reverse();
        assert!(matches!(
            read(&v.to_string()),
            Err(ManifestError::Unsorted { path }) if path == "a"
        ));
    }
}
