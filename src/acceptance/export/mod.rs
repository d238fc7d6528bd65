//! The canonical export archive: a tar whose bytes depend only on the accepted files and
//! their record, and the verifier that recomputes everything from those bytes.

use super::AcceptanceRecord;
use super::record::RecordError;
use crate::snapshot::FileMismatch;
use crate::snapshot::Snapshot;
use crate::text::quoted;
use crate::{id::digest::Digest, plan::path::AdmittedPath, plan::path::PathError};

mod verify;

pub use verify::{VerifiedArchive, verify_archive};

/// The archive entry holding the acceptance record as JSON. It comes first.
pub(crate) const RECORD_ENTRY: &str = "acceptance.json";

/// Every snapshot file is stored under this directory, so no file can shadow the record.
pub(crate) const FILES_DIR: &str = "files";

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
    /// An entry that is neither the record (`acceptance.json`) nor under `files/`.
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
            Self::Symlink { target } => write!(f, "it is a symbolic link to {}", quoted(target)),
            Self::HardLink { target } => write!(f, "it is a hard link to {}", quoted(target)),
            Self::Device => f.write_str("it is a device or FIFO"),
            Self::Duplicate => f.write_str("its name appears twice"),
            Self::Unexpected => write!(f, "it is neither {RECORD_ENTRY} nor under {FILES_DIR}/"),
            Self::EntryType { byte } => write!(f, "its entry type {byte:#04x} is not a file"),
        }
    }
}

/// Where in an archive's bytes a non-canonical byte sits, outside every entry's content.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ArchivePlace {
    /// The header blocks of an entry (with the long-name blocks before it, if any).
    Header {
        /// The entry name.
        entry: String,
    },
    /// The zero padding that fills an entry's content up to a whole block.
    Padding {
        /// The entry name.
        entry: String,
    },
    /// The two zero blocks that end the archive.
    EndOfArchive,
    /// Bytes after the end-of-archive blocks.
    AfterEnd,
}

impl std::fmt::Display for ArchivePlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Header { entry } => write!(f, "the header of entry {}", quoted(entry)),
            Self::Padding { entry } => write!(f, "the padding after entry {}", quoted(entry)),
            Self::EndOfArchive => f.write_str("the archive's end-of-archive padding"),
            Self::AfterEnd => f.write_str("bytes after the archive's end-of-archive padding"),
        }
    }
}

/// Why an archive failed verification. Every variant names the entry, path or byte
/// involved, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The bytes are not a readable tar archive.
    #[error(
        "verify archive: unreadable at byte {offset} ({}): {message}; the archive is damaged \
         or truncated: export it again or fetch an intact copy",
        after_entry(.after)
    )]
    Malformed {
        /// The last entry read intact, if any.
        after: Option<String>,
        /// Where the unreadable part starts: the header after the last intact entry, or the
        /// content of an entry cut short.
        offset: u64,
        /// What the tar reader reported.
        message: String,
    },
    /// A hostile entry (zip-slip and friends), refused before use.
    #[error(
        "verify archive: entry {name} is refused because {kind}; kleene export never writes \
         one, so do not unpack this archive",
        name = quoted(.name)
    )]
    Hostile {
        /// The entry name as found (lossily decoded).
        name: String,
        /// What makes it hostile.
        kind: HostileEntry,
    },
    /// An entry header differs from the canonical one.
    #[error(
        "verify archive: entry {name} has non-canonical {field}; the archive was changed \
         after export: export it again",
        name = quoted(.name)
    )]
    NonCanonical {
        /// The entry name.
        name: String,
        /// Which header field, or `"json"` for a record that is not in canonical form.
        field: &'static str,
    },
    /// Every entry's header and content checked out, but a byte around them (padding,
    /// header filler, the end-of-archive blocks) differs from the canonical archive.
    #[error(
        "verify archive: byte {offset} is not canonical, in {place}; the archive was damaged \
         or changed after export: export it again or fetch an intact copy"
    )]
    StrayByte {
        /// The offset of the first differing byte.
        offset: u64,
        /// Where it is.
        place: ArchivePlace,
    },
    /// The archive stops inside its end-of-archive padding.
    #[error(
        "verify archive: it ends at byte {len}, inside its end-of-archive padding ({expected} \
         bytes expected); it was cut short: copy it again"
    )]
    Truncated {
        /// The archive's length.
        len: u64,
        /// The canonical archive's length.
        expected: u64,
    },
    /// An entry is not in canonical order (record first, then files sorted by path).
    #[error(
        "verify archive: entry {name} is out of order (the record comes first, then files \
         sorted by path); the archive was not written by kleene export: export it again",
        name = quoted(.name)
    )]
    OutOfOrder {
        /// The entry name.
        name: String,
    },
    /// The archive has no record entry.
    #[error(
        "verify archive: it has no entry {RECORD_ENTRY}; it is not a kleene export: verify \
         the archive kleene export wrote"
    )]
    MissingRecord,
    /// The record entry is not a readable record.
    #[error(
        "verify archive: entry {RECORD_ENTRY} is not a record: {message}; the archive was \
         changed after export: export it again"
    )]
    UnreadableRecord {
        /// What the JSON reader reported.
        message: String,
    },
    /// The record's own digests do not recompute.
    #[error(
        "verify archive: entry {RECORD_ENTRY} is not an intact record; export it again or \
         fetch an intact copy"
    )]
    Record(#[source] RecordError),
    /// The record is intact but is not the one expected.
    #[error(
        "verify archive: entry {RECORD_ENTRY} has record digest {found}, expected {expected}; \
         it is another build's archive, or the expected digest is of another record: check \
         which archive and which record you meant"
    )]
    UnexpectedRecord {
        /// The trusted record digest.
        expected: Digest,
        /// The digest of the record in the archive.
        found: Digest,
    },
    /// The files differ from the record: every changed, missing and extra path.
    #[error(
        "verify archive: files differ from the record: {}; the archive's files were changed \
         after export: export it again",
        list(.mismatches)
    )]
    Files {
        /// Every difference, in path order.
        mismatches: Vec<FileMismatch>,
    },
}

fn after_entry(after: &Option<String>) -> String {
    match after {
        Some(name) => format!("after entry {}", quoted(name)),
        None => "its first entry".to_owned(),
    }
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
            Self::StrayByte {
                place: ArchivePlace::Header { entry } | ArchivePlace::Padding { entry },
                ..
            } => Some(entry),
            Self::MissingRecord
            | Self::UnreadableRecord { .. }
            | Self::Record(_)
            | Self::UnexpectedRecord { .. } => Some(RECORD_ENTRY),
            Self::Malformed { after, .. } => after.as_deref(),
            _ => None,
        }
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
    #[error(
        "export snapshot: the archive it wrote does not verify; nothing was published: report \
         it, this is a defect of kleene export"
    )]
    Verify(#[source] VerifyError),
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
    let verified = verify_archive(&bytes, record.digest()).map_err(ExportError::Verify)?;
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
