//! An acceptance record read back is checked whole: every edit of its body that did not
//! re-seal it is refused, naming the field, and, against the record the evidence gives,
//! the task or file that differs.
//!
//! Regression: editing a file digest, a length, removing an entry or renaming a task in a
//! stored record used to pass, because only `record_digest` was read.

use kleene::acceptance::{
    FileMismatch, RecordDifference, RecordError, StoredRecord, VerifyError, accept, export,
    verify_archive,
};
use serde_json::Value;

use crate::acceptance::records::{binding, build, entries, tar_of};
use crate::support::id;

/// One way to edit a stored record without re-sealing it.
struct Tampering {
    what: &'static str,
    edit: fn(&mut Value),
    field: &'static str,
    named: fn(&[RecordDifference]) -> bool,
}

fn tamperings() -> Vec<Tampering> {
    vec![
        Tampering {
            what: "a file digest",
            edit: |v| {
                v["files"]["entries"][0]["blake3"] =
                    blake3::hash(b"forged").to_hex().as_str().into()
            },
            field: "files.digest",
            named: |d| {
                matches!(d, [RecordDifference::File(FileMismatch::Changed { path, .. })]
                    if path.as_str() == "backend/schemas.py")
            },
        },
        Tampering {
            what: "a length",
            edit: |v| {
                let len = v["files"]["entries"][0]["len"].as_u64().unwrap();
                v["files"]["entries"][0]["len"] = (len + 1).into();
            },
            field: "files.digest",
            named: |d| {
                matches!(d, [RecordDifference::File(FileMismatch::Changed { path, expected, found })]
                    if path.as_str() == "backend/schemas.py" && found.len() == expected.len() + 1)
            },
        },
        Tampering {
            what: "a removed entry",
            edit: |v| {
                v["files"]["entries"].as_array_mut().unwrap().remove(0);
            },
            field: "files.digest",
            named: |d| {
                matches!(d, [RecordDifference::File(FileMismatch::Missing { path })]
                    if path.as_str() == "backend/schemas.py")
            },
        },
        Tampering {
            what: "a renamed task",
            edit: |v| v["task_results"][0]["task"] = "config_app_forged".into(),
            field: "task_results_digest",
            named: |d| {
                d == [
                    RecordDifference::MissingTask {
                        task: id("config_app"),
                    },
                    RecordDifference::ExtraTask {
                        task: id("config_app_forged"),
                    },
                ]
            },
        },
    ]
}

fn tampered(json: &str, edit: fn(&mut Value)) -> String {
    let mut v: Value = serde_json::from_str(json).unwrap();
    edit(&mut v);
    serde_json::to_string_pretty(&v).unwrap()
}

#[test]
fn every_edit_of_a_stored_record_is_refused_naming_what_differs() {
    let b = build();
    let record = accept(&b.plan, &b.evidence, &b.snapshot, &binding(&b)).unwrap();
    let json = record.to_json();
    assert_eq!(
        StoredRecord::from_json(&json).unwrap().digest(),
        record.digest()
    );
    assert_eq!(record.differences(&json).unwrap(), []);
    for t in tamperings() {
        let edited = tampered(&json, t.edit);
        let err = StoredRecord::from_json(&edited).unwrap_err();
        assert_eq!(err.field(), Some(t.field), "{}: {err}", t.what);
        assert!(err.to_string().contains(t.field), "{}: {err}", t.what);
        let differences = record.differences(&edited).unwrap();
        assert!((t.named)(&differences), "{}: {differences:?}", t.what);
    }
}

#[test]
fn an_edited_record_inside_an_archive_is_refused_naming_the_field() {
    let b = build();
    let record = accept(&b.plan, &b.evidence, &b.snapshot, &binding(&b)).unwrap();
    let archive = export(&record, &b.snapshot).unwrap().into_bytes();
    let parts: Vec<(String, Vec<u8>)> = entries(&archive)
        .into_iter()
        .map(|(name, content, _)| (name, content))
        .collect();
    assert_eq!(parts[0].0, "acceptance.json");
    for t in tamperings() {
        let mut parts = parts.clone();
        parts[0].1 = tampered(&record.to_json(), t.edit).into_bytes();
        let err = verify_archive(&tar_of(&parts), record.digest()).unwrap_err();
        assert!(
            matches!(&err, VerifyError::Record(e) if e.field() == Some(t.field)),
            "{}: {err:?}",
            t.what
        );
        assert_eq!(err.entry(), Some("acceptance.json"));
    }
}

#[test]
fn a_re_sealed_record_is_self_consistent_and_only_the_evidence_tells() {
    // What the digests cannot do (see SECURITY.md): an edit that re-seals every digest
    // reads back as a consistent record; only the record the evidence gives, or a
    // signature, shows the difference.
    let b = build();
    let record = accept(&b.plan, &b.evidence, &b.snapshot, &binding(&b)).unwrap();
    let stored = StoredRecord::from_json(&record.to_json()).unwrap();
    assert_eq!(stored.task_results(), record.task_results());
    assert_eq!(stored.files(), record.files());
    assert_eq!(stored.binding(), record.binding());
    assert_eq!(stored.evidence_digest(), record.evidence_digest());
    assert_eq!(stored.to_json(), record.to_json());
}

#[test]
fn every_single_bit_flip_of_a_stored_record_is_refused() {
    let b = build();
    let record = accept(&b.plan, &b.evidence, &b.snapshot, &binding(&b)).unwrap();
    let json = record.to_json().into_bytes();
    for byte in 0..json.len() {
        for bit in 0..8 {
            let mut flipped = json.clone();
            flipped[byte] ^= 1 << bit;
            // Bytes that are no longer UTF-8 cannot even be read as text.
            if let Ok(text) = String::from_utf8(flipped) {
                assert!(
                    StoredRecord::from_json(&text).is_err(),
                    "bit {bit} of byte {byte} passed"
                );
            }
        }
    }
}

#[test]
fn a_record_with_an_added_field_is_not_canonical() {
    let b = build();
    let record = accept(&b.plan, &b.evidence, &b.snapshot, &binding(&b)).unwrap();
    let extra = record
        .to_json()
        .replacen('{', "{\n  \"status\": \"accepted\",", 1);
    assert_eq!(
        StoredRecord::from_json(&extra),
        Err(RecordError::NonCanonical)
    );
    assert!(matches!(
        StoredRecord::from_json(r#"{"status": "accepted"}"#),
        Err(RecordError::Unreadable { line: 1, .. })
    ));
}

proptest::proptest! {
    /// Damage anywhere in an exported archive is refused, and the refusal names a place
    /// (an entry, a path, or the end-of-archive padding with its byte) and what to do; it
    /// used to say `entry ""` for damage in padding.
    #[test]
    fn any_damaged_byte_is_refused_naming_its_place(
        at in proptest::prelude::any::<proptest::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let b = build();
        let record = accept(&b.plan, &b.evidence, &b.snapshot, &binding(&b)).unwrap();
        let mut archive = export(&record, &b.snapshot).unwrap().into_bytes();
        let i = at.index(archive.len());
        archive[i] ^= flip;
        let err = verify_archive(&archive, record.digest()).unwrap_err();
        let text = err.to_string();
        proptest::prop_assert!(!text.contains("entry \"\""), "byte {}: {}", i, text);
        proptest::prop_assert!(text.contains("; "), "byte {}: {}", i, text);
        proptest::prop_assert!(
            err.entry().is_some() || !err.mismatches().is_empty() || text.contains("byte "),
            "byte {}: {}", i, text
        );
    }
}
