//! The canonical export archive: a tar whose bytes depend only on the accepted files and
//! their record, and the verifier that recomputes everything from those bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

use super::record::{ReadRecord, RecordError, canonical_json};
use super::{AcceptanceRecord, FileManifest, FileMismatch};
use crate::snapshot::Snapshot;
use crate::{AdmittedPath, Digest, PathError};

/// The archive entry holding the acceptance record as JSON. It comes first.
pub const RECORD_ENTRY: &str = "acceptance.json";

/// Every snapshot file is stored under this directory, so no file can shadow the record.
pub const FILES_DIR: &str = "files";

/// The fixed metadata of every entry: no time, no owner, one mode.
const MTIME: u64 = 0;
const UID: u64 = 0;
const GID: u64 = 0;
const MODE: u32 = 0o644;

/// A hostile kind of archive entry, refused before its content is used.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostileEntry {
    /// The name is absolute, traverses (`..`), or otherwise fails path admission.
    Path(PathError),
    /// The name is not UTF-8.
    NotUtf8,
    /// A symbolic link, to `target`.
    Symlink {
        /// Where it points.
        target: String,
    },
    /// A hard link, to `target`.
    HardLink {
        /// Where it points.
        target: String,
    },
    /// A character or block device, or a FIFO.
    Device,
    /// A second entry with a name already seen.
    Duplicate,
    /// An entry that is neither the record nor under [`FILES_DIR`]`/`.
    Unexpected,
    /// An entry type a canonical archive never has (directories, PAX globals, …).
    EntryType {
        /// The raw type byte.
        byte: u8,
    },
}

impl std::fmt::Display for HostileEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Path(e) => write!(f, "its name fails path admission ({})", e.rule()),
            Self::NotUtf8 => f.write_str("its name is not UTF-8"),
            Self::Symlink { target } => write!(f, "it is a symbolic link to {target:?}"),
            Self::HardLink { target } => write!(f, "it is a hard link to {target:?}"),
            Self::Device => f.write_str("it is a device or FIFO"),
            Self::Duplicate => f.write_str("its name appears twice"),
            Self::Unexpected => write!(f, "it is neither {RECORD_ENTRY} nor under {FILES_DIR}/"),
            Self::EntryType { byte } => write!(f, "its entry type {byte:#04x} is not a file"),
        }
    }
}

/// Why an archive failed verification. Every variant names the entry or path involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The bytes are not a readable tar archive.
    #[error("verify archive: unreadable after entry {after:?}: {message}")]
    Malformed {
        /// The last entry read intact, if any.
        after: Option<String>,
        /// What the tar reader reported.
        message: String,
    },
    /// A hostile entry (zip-slip and friends), refused before use.
    #[error("verify archive: entry {name:?} is refused because {kind}")]
    Hostile {
        /// The entry name as found (lossily decoded).
        name: String,
        /// What makes it hostile.
        kind: HostileEntry,
    },
    /// An entry header differs from the canonical one.
    #[error("verify archive: entry {name:?} has non-canonical {field}")]
    NonCanonical {
        /// The entry name.
        name: String,
        /// Which header field (or `"bytes"` for padding and trailer).
        field: &'static str,
    },
    /// An entry is not in canonical order (record first, then files sorted by path).
    #[error("verify archive: entry {name:?} is out of order")]
    OutOfOrder {
        /// The entry name.
        name: String,
    },
    /// The archive has no record entry.
    #[error("verify archive: it has no {RECORD_ENTRY}")]
    MissingRecord,
    /// The record entry is not a readable record.
    #[error("verify archive: {RECORD_ENTRY} is unreadable: {message}")]
    UnreadableRecord {
        /// What the JSON reader reported.
        message: String,
    },
    /// The record's own digests do not recompute.
    #[error("verify archive: {RECORD_ENTRY} is inconsistent: {0}")]
    Record(#[from] RecordError),
    /// The record is intact but is not the one expected.
    #[error("verify archive: {RECORD_ENTRY} has digest {found}, expected {expected}")]
    UnexpectedRecord {
        /// The trusted record digest.
        expected: Digest,
        /// The digest of the record in the archive.
        found: Digest,
    },
    /// The files differ from the record: every changed, missing and extra path.
    #[error("verify archive: files differ from the record: {}", list(.mismatches))]
    Files {
        /// Every difference, in path order.
        mismatches: Vec<FileMismatch>,
    },
}

fn list(mismatches: &[FileMismatch]) -> String {
    mismatches
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl VerifyError {
    /// The file mismatches, if that is why verification failed.
    pub fn mismatches(&self) -> &[FileMismatch] {
        match self {
            Self::Files { mismatches } => mismatches,
            _ => &[],
        }
    }

    /// The archive entry this error names, if it names one.
    pub fn entry(&self) -> Option<&str> {
        match self {
            Self::Hostile { name, .. }
            | Self::NonCanonical { name, .. }
            | Self::OutOfOrder { name } => Some(name),
            Self::MissingRecord
            | Self::UnreadableRecord { .. }
            | Self::Record(_)
            | Self::UnexpectedRecord { .. } => Some(RECORD_ENTRY),
            _ => None,
        }
    }
}

/// An archive that passed [`verify_archive`]: its record digest and exact files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedArchive {
    record: ReadRecord,
    manifest: FileManifest,
    files: BTreeMap<AdmittedPath, Vec<u8>>,
}

impl VerifiedArchive {
    /// The digest of the record inside (equal to the one verification was asked to trust).
    pub fn record_digest(&self) -> Digest {
        self.record.record_digest
    }

    pub(crate) fn record(&self) -> &ReadRecord {
        &self.record
    }

    /// The manifest of the files, as recorded and as recomputed.
    pub fn manifest(&self) -> &FileManifest {
        &self.manifest
    }

    /// The verified files, sorted by path: what a caller may publish.
    pub fn files(&self) -> &BTreeMap<AdmittedPath, Vec<u8>> {
        &self.files
    }
}

/// Why a snapshot could not be exported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// The snapshot was projected from other evidence than the record accepted.
    #[error("export snapshot: it is of evidence {snapshot}, the record accepted evidence {record}")]
    EvidenceMismatch {
        /// The evidence digest in the record.
        record: Digest,
        /// The evidence digest of the snapshot.
        snapshot: Digest,
    },
    /// The snapshot's files are not the files the record accepted.
    #[error("export snapshot: files differ from the record: {}", list(.mismatches))]
    Files {
        /// Every difference, in path order.
        mismatches: Vec<FileMismatch>,
    },
    /// The archive could not be written.
    #[error("export snapshot: writing the archive failed: {message}")]
    Write {
        /// What the tar writer reported.
        message: String,
    },
    /// The written archive failed its own verification.
    #[error("export snapshot: {0}")]
    Verify(#[from] VerifyError),
}

/// A canonical archive that was verified right after it was written: the bytes to publish
/// and what verification found in them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalArchive {
    bytes: Vec<u8>,
    verified: VerifiedArchive,
}

impl CanonicalArchive {
    /// The archive bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The archive bytes, by value.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// What verification of these exact bytes found.
    pub fn verified(&self) -> &VerifiedArchive {
        &self.verified
    }
}

/// Writes `snapshot` as the canonical archive of `record` (sorted entries, fixed
/// mtime/uid/gid/mode, the record first as JSON), then verifies the written bytes against
/// the record before returning them. Identical input gives byte-identical output.
///
/// # Errors
///
/// [`ExportError`] when the snapshot is not exactly what the record accepted, or the
/// written archive does not verify.
pub fn export(
    record: &AcceptanceRecord,
    snapshot: &Snapshot,
) -> Result<CanonicalArchive, ExportError> {
    if snapshot.evidence_digest() != record.evidence_digest() {
        return Err(ExportError::EvidenceMismatch {
            record: record.evidence_digest(),
            snapshot: snapshot.evidence_digest(),
        });
    }
    let mismatches = record.files().compare(&snapshot.manifest());
    if !mismatches.is_empty() {
        return Err(ExportError::Files { mismatches });
    }
    let bytes = render(
        record.to_json().as_bytes(),
        &snapshot
            .files()
            .map(|(p, f)| (p, f.content()))
            .collect::<Vec<_>>(),
    )
    .map_err(|e| ExportError::Write {
        message: e.to_string(),
    })?;
    let verified = verify_archive(&bytes, record.digest())?;
    Ok(CanonicalArchive { bytes, verified })
}

/// The canonical archive of `files` with `record_json` as its first entry.
pub(crate) fn render(
    record_json: &[u8],
    files: &[(&AdmittedPath, &[u8])],
) -> std::io::Result<Vec<u8>> {
    let block = |n: usize| n.div_ceil(512) * 512;
    let capacity = files
        .iter()
        .map(|(p, b)| 1024 + block(p.as_str().len()) + block(b.len()))
        .sum::<usize>()
        + 1024
        + block(record_json.len())
        + 1024;
    let mut builder = tar::Builder::new(Vec::with_capacity(capacity));
    append(&mut builder, RECORD_ENTRY, record_json)?;
    for &(path, content) in files {
        append(&mut builder, &format!("{FILES_DIR}/{path}"), content)?;
    }
    builder.into_inner()
}

fn append(builder: &mut tar::Builder<Vec<u8>>, name: &str, content: &[u8]) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(content.len() as u64);
    header.set_mode(MODE);
    header.set_mtime(MTIME);
    header.set_uid(UID);
    header.set_gid(GID);
    builder.append_data(&mut header, name, content)
}

/// Verifies `archive` against the record digest a caller trusts: reads the actual bytes,
/// refuses hostile entries, recomputes the record's digests and every file's
/// `(length, blake3)`, and checks the bytes are exactly the canonical rendering.
///
/// # Errors
///
/// [`VerifyError`]: hostile or non-canonical entries by name, an inconsistent or unexpected
/// record, or [`VerifyError::Files`] listing every changed, missing and extra path.
pub fn verify_archive(
    archive: &[u8],
    expected_record: Digest,
) -> Result<VerifiedArchive, VerifyError> {
    let (record_json, files) = read_entries(archive)?;
    let record_json = record_json.ok_or(VerifyError::MissingRecord)?;
    let record: ReadRecord =
        serde_json::from_slice(&record_json).map_err(|e| VerifyError::UnreadableRecord {
            message: e.to_string(),
        })?;
    record.check()?;
    if record.record_digest != expected_record {
        return Err(VerifyError::UnexpectedRecord {
            expected: expected_record,
            found: record.record_digest,
        });
    }
    if canonical_json(&record).as_bytes() != record_json.as_slice() {
        return Err(VerifyError::NonCanonical {
            name: RECORD_ENTRY.to_owned(),
            field: "json",
        });
    }
    let actual = FileManifest::compute(&files);
    let mismatches = record.body.files.compare(&actual);
    if !mismatches.is_empty() {
        return Err(VerifyError::Files { mismatches });
    }
    let rendered = render(
        &record_json,
        &files
            .iter()
            .map(|(p, b)| (p, b.as_slice()))
            .collect::<Vec<_>>(),
    )
    .map_err(|e| VerifyError::Malformed {
        after: None,
        message: e.to_string(),
    })?;
    if rendered != archive {
        // Every entry header checked out, so the difference is in padding or the trailer.
        return Err(VerifyError::NonCanonical {
            name: String::new(),
            field: "bytes",
        });
    }
    Ok(VerifiedArchive {
        record,
        manifest: actual,
        files,
    })
}

type Entries = (Option<Vec<u8>>, BTreeMap<AdmittedPath, Vec<u8>>);

/// Reads every entry, refusing hostile and non-canonical ones before using their content.
fn read_entries(archive: &[u8]) -> Result<Entries, VerifyError> {
    let mut reader = tar::Archive::new(archive);
    let malformed = |after: &Option<String>, e: std::io::Error| VerifyError::Malformed {
        after: after.clone(),
        message: e.to_string(),
    };
    let mut last: Option<String> = None;
    let mut seen = BTreeSet::new();
    let mut record = None;
    let mut files: BTreeMap<AdmittedPath, Vec<u8>> = BTreeMap::new();
    let mut last_file: Option<AdmittedPath> = None;
    for entry in reader.entries().map_err(|e| malformed(&last, e))? {
        let mut entry = entry.map_err(|e| malformed(&last, e))?;
        let raw = entry.path_bytes().into_owned();
        let name = String::from_utf8_lossy(&raw).into_owned();
        let hostile = |kind| VerifyError::Hostile {
            name: name.clone(),
            kind,
        };
        let Ok(text) = std::str::from_utf8(&raw) else {
            return Err(hostile(HostileEntry::NotUtf8));
        };
        // Admission catches absolute and traversing names before anything else is trusted.
        let admitted = AdmittedPath::admit(text).map_err(|e| hostile(HostileEntry::Path(e)))?;
        let header = entry.header();
        let link = || {
            entry
                .link_name_bytes()
                .map(|l| String::from_utf8_lossy(&l).into_owned())
                .unwrap_or_default()
        };
        match header.entry_type() {
            tar::EntryType::Regular => {}
            tar::EntryType::Symlink => {
                return Err(hostile(HostileEntry::Symlink { target: link() }));
            }
            tar::EntryType::Link => return Err(hostile(HostileEntry::HardLink { target: link() })),
            tar::EntryType::Char | tar::EntryType::Block | tar::EntryType::Fifo => {
                return Err(hostile(HostileEntry::Device));
            }
            other => {
                return Err(hostile(HostileEntry::EntryType {
                    byte: other.as_byte(),
                }));
            }
        }
        if !seen.insert(text.to_owned()) {
            return Err(hostile(HostileEntry::Duplicate));
        }
        let non_canonical = |field| VerifyError::NonCanonical {
            name: name.clone(),
            field,
        };
        if header.mode().ok() != Some(MODE) {
            return Err(non_canonical("mode"));
        }
        if header.mtime().ok() != Some(MTIME) {
            return Err(non_canonical("mtime"));
        }
        if header.uid().ok() != Some(UID) || header.gid().ok() != Some(GID) {
            return Err(non_canonical("owner"));
        }
        // The header's size is untrusted: never reserve more than the archive could hold.
        let declared = usize::try_from(entry.size()).unwrap_or(usize::MAX);
        let mut content = Vec::with_capacity(declared.min(archive.len()));
        entry
            .read_to_end(&mut content)
            .map_err(|e| malformed(&last, e))?;
        if text == RECORD_ENTRY {
            if last.is_some() {
                return Err(VerifyError::OutOfOrder { name });
            }
            record = Some(content);
        } else {
            let path = match admitted
                .as_str()
                .strip_prefix(FILES_DIR)
                .and_then(|r| r.strip_prefix('/'))
            {
                Some(rest) => {
                    AdmittedPath::admit(rest).map_err(|e| hostile(HostileEntry::Path(e)))?
                }
                None => return Err(hostile(HostileEntry::Unexpected)),
            };
            if record.is_none() || last_file.as_ref().is_some_and(|l| *l >= path) {
                return Err(VerifyError::OutOfOrder { name });
            }
            last_file = Some(path.clone());
            files.insert(path, content);
        }
        last = Some(name);
    }
    Ok((record, files))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ChannelId;
    use crate::acceptance::AcceptanceRecord;
    use crate::acceptance::record::{BuildBinding, RECORD_FORMAT, RecordBody, task_results_digest};
    use crate::digest::CanonicalHasher;

    fn p(s: &str) -> AdmittedPath {
        AdmittedPath::admit(s).unwrap()
    }

    fn record(files: &BTreeMap<AdmittedPath, Vec<u8>>) -> AcceptanceRecord {
        let plan = CanonicalHasher::new("test plan").finish();
        let binding = BuildBinding::new(ChannelId::new("chan").unwrap(), plan, 1);
        AcceptanceRecord::seal(RecordBody {
            format: RECORD_FORMAT,
            binding_digest: binding.digest(),
            binding,
            plan_digest: plan,
            task_inventory_digest: plan,
            evidence_digest: plan,
            task_results: Vec::new(),
            task_results_digest: task_results_digest(&[]),
            files: FileManifest::compute(files),
        })
    }

    fn archive(files: &BTreeMap<AdmittedPath, Vec<u8>>) -> (AcceptanceRecord, Vec<u8>) {
        let r = record(files);
        let refs: Vec<_> = files.iter().map(|(p, b)| (p, b.as_slice())).collect();
        let bytes = render(r.to_json().as_bytes(), &refs).unwrap();
        (r, bytes)
    }

    fn sample() -> BTreeMap<AdmittedPath, Vec<u8>> {
        [
            ("backend/models.py", &b"class User: ...\n"[..]),
            ("README.md", b"# app\n"),
        ]
        .into_iter()
        .map(|(k, v)| (p(k), v.to_vec()))
        .collect()
    }

    type RawEntry<'a> = (tar::EntryType, &'a str, &'a [u8], Option<&'a str>);
    type Expect = fn(&HostileEntry) -> bool;

    /// Builds a raw archive entry by entry, so tests can write what the exporter never would.
    fn raw_archive(entries: &[RawEntry]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (kind, name, content, link) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_size(content.len() as u64);
            h.set_mode(MODE);
            h.set_mtime(MTIME);
            h.set_uid(UID);
            h.set_gid(GID);
            // Write the name bytes directly: the builder itself refuses `..` and absolute names.
            let gnu = h.as_gnu_mut().unwrap();
            gnu.name[..name.len()].copy_from_slice(name.as_bytes());
            if let Some(l) = link {
                gnu.linkname[..l.len()].copy_from_slice(l.as_bytes());
            }
            h.set_cksum();
            b.append(&h, *content).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn round_trip_and_byte_identical() {
        let files = sample();
        let (r, bytes) = archive(&files);
        let (_, again) = archive(&files);
        assert_eq!(bytes, again);
        let verified = verify_archive(&bytes, r.digest()).unwrap();
        assert_eq!(verified.files(), &files);
        assert_eq!(verified.manifest(), r.files());
    }

    #[test]
    fn long_paths_round_trip() {
        let long = format!("{}/{}.py", "d".repeat(200), "f".repeat(200));
        let mut files = sample();
        files.insert(p(&long), b"x".to_vec());
        let (r, bytes) = archive(&files);
        let verified = verify_archive(&bytes, r.digest()).unwrap();
        assert_eq!(verified.files(), &files);
    }

    #[test]
    fn wrong_trust_anchor_is_refused() {
        let (_, bytes) = archive(&sample());
        let other = CanonicalHasher::new("x").finish();
        assert!(matches!(
            verify_archive(&bytes, other),
            Err(VerifyError::UnexpectedRecord { .. })
        ));
    }

    #[test]
    fn hostile_entries_are_refused() {
        let (r, good) = archive(&sample());
        let record_json = r.to_json();
        let rec = (
            tar::EntryType::Regular,
            RECORD_ENTRY,
            record_json.as_bytes(),
            None,
        );
        let cases: Vec<(Vec<RawEntry>, Expect)> = vec![
            (
                vec![rec, (tar::EntryType::Regular, "/etc/passwd", b"x", None)],
                |k| matches!(k, HostileEntry::Path(PathError::Absolute { .. })),
            ),
            (
                vec![rec, (tar::EntryType::Regular, "files/../../x", b"x", None)],
                |k| matches!(k, HostileEntry::Path(PathError::Traversal { .. })),
            ),
            (
                vec![
                    rec,
                    (tar::EntryType::Symlink, "files/a", b"", Some("/etc/passwd")),
                ],
                |k| matches!(k, HostileEntry::Symlink { target } if target == "/etc/passwd"),
            ),
            (
                vec![
                    rec,
                    (
                        tar::EntryType::Link,
                        "files/a",
                        b"",
                        Some("acceptance.json"),
                    ),
                ],
                |k| matches!(k, HostileEntry::HardLink { .. }),
            ),
            (
                vec![rec, (tar::EntryType::Char, "files/a", b"", None)],
                |k| matches!(k, HostileEntry::Device),
            ),
            (
                vec![rec, (tar::EntryType::Fifo, "files/a", b"", None)],
                |k| matches!(k, HostileEntry::Device),
            ),
            (
                vec![
                    rec,
                    (tar::EntryType::Regular, "files/a", b"1", None),
                    (tar::EntryType::Regular, "files/a", b"2", None),
                ],
                |k| matches!(k, HostileEntry::Duplicate),
            ),
            (
                vec![rec, (tar::EntryType::Regular, "other/a", b"1", None)],
                |k| matches!(k, HostileEntry::Unexpected),
            ),
            (
                vec![rec, (tar::EntryType::Directory, "files/d", b"", None)],
                |k| matches!(k, HostileEntry::EntryType { .. }),
            ),
        ];
        for (entries, expected) in cases {
            let bytes = raw_archive(&entries);
            match verify_archive(&bytes, r.digest()) {
                Err(VerifyError::Hostile { kind, .. }) => assert!(expected(&kind), "{kind:?}"),
                other => panic!("{:?}: {other:?}", entries.last().map(|e| e.1)),
            }
        }
        assert!(verify_archive(&good, r.digest()).is_ok());
    }

    #[test]
    fn non_canonical_headers_and_trailers_are_refused() {
        let files = sample();
        let (r, bytes) = archive(&files);
        let mut padded = bytes.clone();
        padded.extend_from_slice(&[0; 512]);
        assert!(matches!(
            verify_archive(&padded, r.digest()),
            Err(VerifyError::NonCanonical { field: "bytes", .. })
        ));
        let files_first = raw_archive(&[
            (tar::EntryType::Regular, "files/README.md", b"# app\n", None),
            (
                tar::EntryType::Regular,
                RECORD_ENTRY,
                r.to_json().as_bytes(),
                None,
            ),
        ]);
        assert!(matches!(
            verify_archive(&files_first, r.digest()),
            Err(VerifyError::OutOfOrder { .. })
        ));
        assert_eq!(
            verify_archive(&bytes[..0], r.digest()),
            Err(VerifyError::MissingRecord)
        );
    }

    #[test]
    fn a_status_only_or_edited_record_is_refused() {
        let files = sample();
        let (r, _) = archive(&files);
        let with_record = |json: &str| {
            let mut entries: Vec<RawEntry> =
                vec![(tar::EntryType::Regular, RECORD_ENTRY, json.as_bytes(), None)];
            let names: Vec<String> = files.keys().map(|p| format!("{FILES_DIR}/{p}")).collect();
            for ((_, content), name) in files.iter().zip(&names) {
                entries.push((tar::EntryType::Regular, name, content, None));
            }
            verify_archive(&raw_archive(&entries), r.digest())
        };
        assert!(matches!(
            with_record(r#"{"status": "accepted"}"#),
            Err(VerifyError::UnreadableRecord { .. })
        ));
        // An extra field keeps every digest intact but is not the canonical record.
        let extra = r
            .to_json()
            .replacen('{', "{\n  \"status\": \"accepted\",", 1);
        assert_eq!(
            with_record(&extra),
            Err(VerifyError::NonCanonical {
                name: RECORD_ENTRY.to_owned(),
                field: "json"
            })
        );
        // A record whose file list was edited no longer recomputes its own digest.
        let edited = r.to_json().replacen("\"len\": 6", "\"len\": 7", 1);
        assert!(matches!(
            with_record(&edited),
            Err(VerifyError::UnreadableRecord { .. })
        ));
        assert!(with_record(&r.to_json()).is_ok());
    }

    #[test]
    fn a_huge_declared_size_is_not_trusted() {
        let (r, mut bytes) = archive(&sample());
        // The first header's size field (offset 124, 12 octal digits): claim ~64 GiB.
        bytes[124..136].copy_from_slice(b"77777777777\0");
        let header = tar::Header::from_byte_slice(&bytes[..512]).clone();
        let mut header = header;
        header.set_cksum();
        bytes[..512].copy_from_slice(header.as_bytes());
        assert!(verify_archive(&bytes, r.digest()).is_err());
    }
}
