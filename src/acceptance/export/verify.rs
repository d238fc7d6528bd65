//! The verifier of an export archive: everything recomputed from the archive's own bytes
//! against the record digest a caller trusts.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

use crate::acceptance::record::{RecordError, StoredRecord};
use crate::snapshot::FileManifest;
use crate::text::quoted;
use crate::{id::digest::Digest, plan::path::AdmittedPath};

use super::{
    ArchivePlace, FILES_DIR, GID, HostileEntry, MODE, MTIME, RECORD_ENTRY, UID, VerifyError, render,
};

/// An archive that passed [`verify_archive`]: its record digest and exact files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedArchive {
    record: StoredRecord,
    manifest: FileManifest,
    files: BTreeMap<AdmittedPath, Vec<u8>>,
}

impl VerifiedArchive {
    /// The digest of the record inside (equal to the one verification was asked to trust).
    pub fn record_digest(&self) -> Digest {
        self.record.record_digest
    }

    /// The acceptance record inside, every digest recomputed.
    pub fn record(&self) -> &StoredRecord {
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

/// Verifies `archive` against the record digest a caller trusts: reads the actual bytes,
/// refuses hostile entries, recomputes the record's digests and every file's
/// `(length, blake3)`, and checks the bytes are exactly the canonical rendering.
///
/// # Errors
///
/// [`VerifyError`]: hostile or non-canonical entries by name, an inconsistent or unexpected
/// record, or [`VerifyError::Files`] listing every changed, missing and extra path.
///
/// # Examples
///
/// One changed byte in a file of an exported archive is named by its path:
///
/// ```
/// # use std::collections::BTreeMap;
/// # use kleene::batch::{BatchEvidence, Candidate, evidence::EVIDENCE_VERSION, evidence::EvidenceEvent,
/// #                     evidence::InventoryEntry, evidence::Settlement};
/// # use kleene::{plan::AdmittedPath, AppBuildPlan, acceptance::BuildBinding, id::ChannelId, id::Digest, snapshot::Snapshot,
/// #              acceptance::accept, acceptance::export};
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
/// # let record = accept(&plan, &evidence, &snapshot, &binding)?;
/// use kleene::{acceptance::FileMismatch, acceptance::VerifyError, acceptance::verify_archive};
///
/// // `record` is the acceptance record, `archive` its export.
/// let archive = export(&record, &snapshot)?.into_bytes();
/// assert!(verify_archive(&archive, record.digest()).is_ok());
///
/// let mut tampered = archive.clone();
/// let at = tampered.windows(10).position(|w| w == b"name: demo").unwrap();
/// tampered[at] = b'N';
/// let err = verify_archive(&tampered, record.digest()).unwrap_err();
/// assert!(matches!(err.mismatches(), [FileMismatch::Changed { path, .. }]
///     if path.as_str() == "config/app.yaml"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn verify_archive(
    archive: &[u8],
    expected_record: Digest,
) -> Result<VerifiedArchive, VerifyError> {
    let (record_json, files) = read_entries(archive)?;
    let record_json = record_json.ok_or(VerifyError::MissingRecord)?;
    let record = StoredRecord::parse(&record_json).map_err(|e| match e {
        RecordError::Unreadable {
            message,
            line,
            column,
        } => VerifyError::UnreadableRecord {
            message: format!("{message} at line {line}, column {column}"),
        },
        other => VerifyError::Record(other),
    })?;
    if record.record_digest != expected_record {
        return Err(VerifyError::UnexpectedRecord {
            expected: expected_record,
            found: record.record_digest,
        });
    }
    if record.to_json().as_bytes() != record_json.as_slice() {
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
        offset: 0,
        message: e.to_string(),
    })?;
    if rendered != archive {
        return Err(locate_difference(&rendered, archive));
    }
    Ok(VerifiedArchive {
        record,
        manifest: actual,
        files,
    })
}

/// Names the first byte where `archive` differs from its canonical rendering. Every entry's
/// checked header fields and content agree by now, so the byte is in header filler, in
/// padding, in the end-of-archive blocks or past them; the canonical rendering (our own
/// bytes) gives the layout.
fn locate_difference(rendered: &[u8], archive: &[u8]) -> VerifyError {
    let offset = rendered
        .iter()
        .zip(archive)
        .position(|(a, b)| a != b)
        .unwrap_or(rendered.len().min(archive.len()));
    if offset == archive.len() {
        return VerifyError::Truncated {
            len: archive.len() as u64,
            expected: rendered.len() as u64,
        };
    }
    let place = place_of(rendered, offset as u64);
    VerifyError::StrayByte {
        offset: offset as u64,
        place,
    }
}

fn place_of(rendered: &[u8], offset: u64) -> ArchivePlace {
    if offset >= rendered.len() as u64 {
        return ArchivePlace::AfterEnd;
    }
    let mut reader = tar::Archive::new(rendered);
    // The rendering is our own canonical archive, so reading it back cannot fail; if it
    // somehow did, the byte is reported as in the end-of-archive padding.
    let Ok(entries) = reader.entries() else {
        return ArchivePlace::EndOfArchive;
    };
    for entry in entries.flatten() {
        let entry_name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let content_start = entry.raw_file_position();
        let content_end = content_start + entry.size();
        if offset < content_start {
            return ArchivePlace::Header { entry: entry_name };
        }
        if offset < content_end.div_ceil(512) * 512 {
            return ArchivePlace::Padding { entry: entry_name };
        }
    }
    ArchivePlace::EndOfArchive
}

type Entries = (Option<Vec<u8>>, BTreeMap<AdmittedPath, Vec<u8>>);

/// Reads every entry, refusing hostile and non-canonical ones before using their content.
fn read_entries(archive: &[u8]) -> Result<Entries, VerifyError> {
    let mut reader = tar::Archive::new(archive);
    let malformed =
        |after: &Option<String>, offset: u64, e: std::io::Error| VerifyError::Malformed {
            after: after.clone(),
            offset,
            message: e.to_string(),
        };
    let mut last: Option<String> = None;
    // Where the next header starts: the end of the last intact entry's padded content.
    let mut next_header = 0u64;
    let mut seen = BTreeSet::new();
    let mut record = None;
    let mut files: BTreeMap<AdmittedPath, Vec<u8>> = BTreeMap::new();
    let mut last_file: Option<AdmittedPath> = None;
    for entry in reader.entries().map_err(|e| malformed(&last, 0, e))? {
        let mut entry = entry.map_err(|e| malformed(&last, next_header, e))?;
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
        // A file's name is admitted without the `files/` prefix: the prefix is the archive's,
        // and the path under it may be as long as any admitted path.
        let file = match text
            .strip_prefix(FILES_DIR)
            .and_then(|r| r.strip_prefix('/'))
        {
            Some(rest) => {
                Some(AdmittedPath::admit(rest).map_err(|e| hostile(HostileEntry::Path(e)))?)
            }
            None => {
                AdmittedPath::admit(text).map_err(|e| hostile(HostileEntry::Path(e)))?;
                None
            }
        };
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
        let size = entry.size();
        let content_start = entry.raw_file_position();
        let declared = usize::try_from(size).unwrap_or(usize::MAX);
        let mut content = Vec::with_capacity(declared.min(archive.len()));
        entry
            .read_to_end(&mut content)
            .map_err(|e| malformed(&last, content_start, e))?;
        // The reader stops quietly at the end of the archive; a short entry is truncated.
        if content.len() as u64 != size {
            return Err(VerifyError::Malformed {
                after: last,
                offset: content_start,
                message: format!(
                    "entry {} declares {size} bytes but only {} are present",
                    quoted(&name),
                    content.len()
                ),
            });
        }
        if text == RECORD_ENTRY {
            if last.is_some() {
                return Err(VerifyError::OutOfOrder { name });
            }
            record = Some(content);
        } else {
            let Some(path) = file else {
                return Err(hostile(HostileEntry::Unexpected));
            };
            if record.is_none() || last_file.as_ref().is_some_and(|l| *l >= path) {
                return Err(VerifyError::OutOfOrder { name });
            }
            last_file = Some(path.clone());
            files.insert(path, content);
        }
        last = Some(name);
        next_header = (content_start + size).div_ceil(512) * 512;
    }
    Ok((record, files))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acceptance::AcceptanceRecord;
    use crate::acceptance::record::{BuildBinding, RECORD_FORMAT, RecordBody, task_results_digest};
    use crate::id::ChannelId;
    use crate::id::digest::CanonicalHasher;
    use crate::plan::path::MAX_PATH_LEN;
    use crate::plan::path::PathError;

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
            task_results_digest: task_results_digest(RECORD_FORMAT, &[]),
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
    fn a_path_of_the_longest_admitted_length_round_trips() {
        // The archive name adds `files/` to the path, so the name itself may be longer
        // than any admitted path; only the path under `files/` is subject to admission.
        let head = vec!["d".repeat(200); 5].join("/");
        let longest = format!("{head}/{}", "f".repeat(MAX_PATH_LEN - head.len() - 1));
        assert_eq!(longest.len(), MAX_PATH_LEN);
        let mut files = sample();
        files.insert(p(&longest), b"x".to_vec());
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
        assert_eq!(
            verify_archive(&padded, r.digest()),
            Err(VerifyError::StrayByte {
                offset: bytes.len() as u64,
                place: ArchivePlace::AfterEnd
            })
        );
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
        // A record whose file list was edited no longer recomputes its own digest, and the
        // refusal says which digest.
        let edited = r.to_json().replacen("\"len\": 6", "\"len\": 7", 1);
        assert!(matches!(
            with_record(&edited),
            Err(VerifyError::Record(RecordError::Digest {
                field: "files.digest",
                ..
            }))
        ));
        assert!(with_record(&r.to_json()).is_ok());
    }

    /// Damage outside every entry's content used to be reported as entry `""`: each place
    /// is now named, with the byte offset.
    #[test]
    fn damage_around_the_entries_names_its_place() {
        let files = sample();
        let (r, bytes) = archive(&files);
        let layout: Vec<(String, u64, u64)> = tar::Archive::new(&bytes[..])
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let name = String::from_utf8_lossy(&e.path_bytes()).into_owned();
                (name, e.raw_file_position(), e.size())
            })
            .collect();
        let flip = |at: u64| {
            let mut b = bytes.clone();
            b[at as usize] ^= 0x01;
            verify_archive(&b, r.digest()).unwrap_err()
        };
        for (name, start, size) in &layout {
            // The last padding byte of each entry (every sample entry leaves some).
            assert_ne!(size % 512, 0, "{name}");
            let at = (start + size).div_ceil(512) * 512 - 1;
            let err = flip(at);
            assert_eq!(
                err,
                VerifyError::StrayByte {
                    offset: at,
                    place: ArchivePlace::Padding {
                        entry: name.clone()
                    }
                }
            );
            assert_eq!(err.entry(), Some(name.as_str()));
            assert!(
                err.to_string()
                    .contains(&format!("the padding after entry {name:?}"))
            );
        }
        let end = bytes.len() as u64 - 1;
        let err = flip(end);
        assert_eq!(
            err,
            VerifyError::StrayByte {
                offset: end,
                place: ArchivePlace::EndOfArchive
            }
        );
        assert!(
            err.to_string().contains(&format!(
                "byte {end} is not canonical, in the archive's end-of-archive padding"
            )),
            "{err}"
        );
        let cut = &bytes[..bytes.len() - 512];
        assert_eq!(
            verify_archive(cut, r.digest()),
            Err(VerifyError::Truncated {
                len: cut.len() as u64,
                expected: bytes.len() as u64
            })
        );
    }

    #[test]
    fn every_refusal_says_what_to_do() {
        let (r, bytes) = archive(&sample());
        let other = CanonicalHasher::new("x").finish();
        let mut padded = bytes.clone();
        padded.extend_from_slice(&[0; 512]);
        let errors = [
            verify_archive(&bytes, other).unwrap_err(),
            verify_archive(&padded, r.digest()).unwrap_err(),
            verify_archive(&bytes[..0], r.digest()).unwrap_err(),
        ];
        for err in errors {
            let text = err.to_string();
            assert!(text.contains("; "), "{text}");
            assert!(!text.contains("entry \"\""), "{text}");
        }
    }

    #[test]
    fn a_huge_declared_size_is_not_trusted() {
        let (r, mut bytes) = archive(&sample());
        // The first header's size field (offset 124, 12 octal digits): claim ~8 GiB.
        bytes[124..136].copy_from_slice(b"77777777777\0");
        let header = tar::Header::from_byte_slice(&bytes[..512]).clone();
        let mut header = header;
        header.set_cksum();
        bytes[..512].copy_from_slice(header.as_bytes());
        let err = verify_archive(&bytes, r.digest()).unwrap_err();
        assert!(
            matches!(&err, VerifyError::Malformed { after: None, message, .. }
                if message.contains(RECORD_ENTRY) && message.contains("8589934591 bytes")),
            "{err:?}"
        );
    }
}
