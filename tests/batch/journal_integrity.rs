//! Journal integrity: a read never changes a byte, damage is corruption named by record and
//! offset (never a torn tail to cut), only a genuinely incomplete final record is torn, a
//! crafted length field never makes the decoder reserve what the bytes do not hold, and a
//! keyed journal refuses records re-sealed without the key.
//!
//! Guards the bugs where one flipped byte in record 4 of 9 made a read-only `kleene status`
//! truncate the journal and report accepted tasks as pending, and where a 57-byte journal
//! made bincode reserve 1 GiB.

use std::fs;
use std::path::PathBuf;

use kleene::batch::{
    Batch, BatchErrorKind, Candidate, FileJournal, JournalKey, journal::EvidenceJournal,
    journal::JournalError, journal::RecordDamage,
};
use kleene::testing::batch::{ImageJournal, ScriptedOutcome, ScriptedWorker};
use kleene::{ValidatedPlan, id::ChannelId};
use peak_alloc::PeakAlloc;
use proptest::prelude::*;

use crate::support::{chan, id, path};

// Counts this test binary's allocations, so a test can bound the peak a decode reaches.
#[global_allocator]
static ALLOCATOR: PeakAlloc = PeakAlloc;

fn plan() -> ValidatedPlan {
    crate::batch::runs::app_plan()
}

fn candidate(p: &str, text: &str) -> ScriptedOutcome {
    ScriptedOutcome::Candidate(Candidate::new(
        [(path(p), text.as_bytes().to_vec())].into_iter().collect(),
    ))
}

fn worker() -> ScriptedWorker {
    ScriptedWorker::new()
        .script(
            id("model_tasks"),
            [candidate("backend/schemas.py", "class Task: ...")],
        )
        .script(
            id("service_tasks"),
            [candidate(
                "backend/services/tasks.py",
                "class TaskService: ...",
            )],
        )
        .script(
            id("page_tasks"),
            [candidate(
                "frontend/pages/tasks.tsx",
                "export default () => null",
            )],
        )
}

const CHANNEL: &str = "integrity";

/// The journal of a whole run: one record per event, or one per commit with group commit.
fn run_image(group_commit: bool, key: Option<JournalKey>) -> Vec<u8> {
    let plan = plan();
    let mut journal = ImageJournal::default();
    if let Some(key) = key {
        journal = journal.with_mac_key(key);
    }
    Batch::new(&plan, chan(CHANNEL))
        .with_group_commit(group_commit)
        .dispatch(&mut worker(), &(), &mut journal)
        .unwrap();
    journal.image(&chan(CHANNEL)).unwrap().to_vec()
}

fn ends_of(image: &[u8]) -> Vec<usize> {
    ImageJournal::with_image(chan(CHANNEL), image.to_vec()).record_ends(&chan(CHANNEL))
}

fn keyed_ends_of(image: &[u8], key: JournalKey) -> Vec<usize> {
    ImageJournal::with_image(chan(CHANNEL), image.to_vec())
        .with_mac_key(key)
        .record_ends(&chan(CHANNEL))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kleene-integrity-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

/// A state directory whose journal holds `image`.
fn file_journal(name: &str, image: &[u8]) -> (PathBuf, FileJournal, PathBuf) {
    let dir = scratch(name);
    let journal = FileJournal::open(&dir).unwrap();
    let file = journal.path_for(&chan(CHANNEL));
    fs::write(&file, image).unwrap();
    (dir, journal, file)
}

#[test]
fn a_flipped_bit_in_record_four_of_nine_is_refused_and_changes_nothing() {
    let image = run_image(false, None);
    let ends = ends_of(&image);
    assert_eq!(
        ends.len(),
        9,
        "start, then a reservation and a settlement per task"
    );
    let mut damaged = image.clone();
    damaged[ends[2] + 100] ^= 0x08;
    let (dir, mut journal, file) = file_journal("flip", &damaged);

    let err = journal.load(&chan(CHANNEL)).unwrap_err();
    assert!(
        matches!(
            &err,
            JournalError::Corrupt { record: 4, offset, channel, .. }
                if *offset == ends[2] as u64 && *channel == chan(CHANNEL)
        ),
        "{err}"
    );
    assert!(err.is_corruption());
    assert_eq!(
        (err.record(), err.offset()),
        (Some(4), Some(ends[2] as u64))
    );
    let message = err.to_string();
    assert!(message.contains("record 4") && message.contains(&format!("byte {}", ends[2])));
    assert!(!message.contains("pending") && !message.contains("in flight"));
    assert_eq!(fs::read(&file).unwrap(), damaged);

    // A writer refuses too: nothing is cut, no accepted task runs again.
    let plan = plan();
    let mut calls = worker();
    let batch = Batch::new(&plan, chan(CHANNEL));
    let err = batch.resume(&mut calls, &(), &mut journal).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            BatchErrorKind::Journal(JournalError::Corrupt { record: 4, .. })
        ),
        "{err}"
    );
    assert!(matches!(
        journal.repair_torn_tail(&chan(CHANNEL)),
        Err(JournalError::Corrupt { record: 4, .. })
    ));
    assert!(calls.calls().is_empty());
    assert_eq!(fs::read(&file).unwrap(), damaged);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_single_bit_flip_is_refused_as_corruption() {
    for group_commit in [false, true] {
        let image = run_image(group_commit, None);
        let journal = ImageJournal::with_image(chan(CHANNEL), image.clone());
        assert!(
            journal
                .load(&chan(CHANNEL))
                .unwrap()
                .unwrap()
                .torn_tail
                .is_none()
        );
        let ends = ends_of(&image);
        for byte in 0..image.len() {
            for bit in 0..8 {
                let mut flipped = image.clone();
                flipped[byte] ^= 1 << bit;
                let journal = ImageJournal::with_image(chan(CHANNEL), flipped.clone());
                match journal.load(&chan(CHANNEL)) {
                    Err(e) if e.is_corruption() => {
                        // The error names the record that holds the flipped byte.
                        let record = ends.iter().filter(|&&end| end <= byte).count() as u64 + 1;
                        assert_eq!(e.record(), Some(record), "byte {byte} bit {bit}: {e}");
                    }
                    other => panic!("byte {byte} bit {bit}: {other:?}"),
                }
                assert_eq!(journal.image(&chan(CHANNEL)).unwrap(), &flipped[..]);
            }
        }
    }
}

#[test]
fn every_truncation_is_a_torn_tail_keeping_exactly_the_whole_records_before_it() {
    let image = run_image(true, None);
    let ends = ends_of(&image);
    assert!(ends.len() >= 4);
    let full = ImageJournal::with_image(chan(CHANNEL), image.clone())
        .load(&chan(CHANNEL))
        .unwrap()
        .unwrap();
    for cut in 0..image.len() {
        let mut journal = ImageJournal::with_image(chan(CHANNEL), image[..cut].to_vec());
        let whole = ends.iter().filter(|&&end| end <= cut).count();
        let kept = if whole == 0 { 0 } else { ends[whole - 1] };
        let load = journal.load(&chan(CHANNEL)).unwrap();
        if let Some(load) = &load {
            let torn = load.torn_tail.as_ref();
            assert_eq!(
                torn.map(|t| t.offset as usize),
                (cut != kept).then_some(kept)
            );
            assert_eq!(torn.map_or(0, |t| t.discarded as usize), cut - kept);
            assert!(full.events.starts_with(&load.events));
        } else {
            assert_eq!(whole, 0, "cut at {cut}");
        }
        assert_eq!(journal.image(&chan(CHANNEL)).unwrap(), &image[..cut]);
        let cut_off = journal.repair_torn_tail(&chan(CHANNEL)).unwrap();
        assert_eq!(
            cut_off.map(|t| t.offset as usize),
            (cut != kept).then_some(kept)
        );
        assert_eq!(journal.image(&chan(CHANNEL)).unwrap(), &image[..kept]);
    }
}

#[test]
fn a_resume_after_a_torn_append_cuts_it_and_reports_the_cut() {
    let image = run_image(true, None);
    let ends = ends_of(&image);
    let cut = ends[ends.len() - 2] + 40;
    let (dir, mut journal, file) = file_journal("torn", &image[..cut]);
    let plan = plan();
    let done = Batch::new(&plan, chan(CHANNEL))
        .with_group_commit(true)
        .resume(&mut worker(), &(), &mut journal)
        .unwrap();
    assert!(done.summary().is_complete());
    assert_eq!(journal.repairs().len(), 1);
    assert_eq!(journal.repairs()[0].1.offset as usize, ends[ends.len() - 2]);
    assert!(
        fs::read(&file)
            .unwrap()
            .starts_with(&image[..ends[ends.len() - 2]])
    );
    fs::remove_dir_all(&dir).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Through the file system: loading a journal with a flipped bit is refused and leaves
    /// the file byte for byte as it was.
    #[test]
    fn loading_a_flipped_file_changes_no_byte(at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let image = run_image(true, None);
        let mut flipped = image.clone();
        let byte = at.index(image.len());
        flipped[byte] ^= 1 << bit;
        let (dir, journal, file) = file_journal(&format!("prop-{byte}-{bit}"), &flipped);
        let loaded = journal.load(&chan(CHANNEL));
        prop_assert!(matches!(&loaded, Err(e) if e.is_corruption()), "{:?}", loaded);
        prop_assert_eq!(fs::read(&file).unwrap(), flipped);
        fs::remove_dir_all(&dir).unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// Bounded allocation.

/// A checkpoint envelope built from the format table in `kleene::checkpoint`'s docs.
fn envelope(kind: &[u8; 4], version: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"KLNE");
    out.extend_from_slice(&version.to_le_bytes());
    out.push(1);
    out.extend_from_slice(kind);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let sum = blake3::Hasher::new_derive_key("kleene checkpoint envelope v1")
        .update(&out)
        .update(payload)
        .finalize();
    out.extend_from_slice(sum.as_bytes());
    out.extend_from_slice(payload);
    out
}

/// Event payloads whose first string (the channel id of a start event) claims `claim`
/// bytes while only a few follow: bincode's varint prefixes 252 (u32) and 253 (u64).
fn lying_payloads() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for claim in [1u64 << 20, 1 << 27, (1 << 30) - 64, 1 << 40] {
        let mut p = vec![0u8];
        if let Ok(small) = u32::try_from(claim) {
            p.push(252);
            p.extend_from_slice(&small.to_le_bytes());
        } else {
            p.push(253);
            p.extend_from_slice(&claim.to_le_bytes());
        }
        p.extend_from_slice(b"chan");
        out.push(p);
    }
    out
}

#[test]
fn a_length_field_claiming_a_gigabyte_decodes_to_an_error_without_reserving_it() {
    for payload in lying_payloads() {
        let bytes = envelope(b"BEVT", 1, &payload);
        assert!(bytes.len() < 1024, "{} bytes", bytes.len());
        let journal = ImageJournal::with_image(chan(CHANNEL), bytes.clone());
        let before = ALLOCATOR.current_usage();
        ALLOCATOR.reset_peak_usage();
        let loaded = journal.load(&chan(CHANNEL));
        let peak = ALLOCATOR.peak_usage().saturating_sub(before);
        assert!(
            matches!(&loaded, Err(JournalError::Foreign { record: 1, .. })),
            "{loaded:?}"
        );
        // Other tests allocate concurrently; a reservation of what the length claims would
        // be a gigabyte.
        assert!(
            peak < 64 << 20,
            "peak {peak} bytes for a {}-byte journal",
            bytes.len()
        );
    }
}

// ---------------------------------------------------------------------------------------
// Keyed MAC.

fn key(byte: u8) -> JournalKey {
    JournalKey::from_bytes([byte; 32])
}

/// Re-seals `image`'s record `n` (counting from 0) with a plain checksum after changing one
/// byte of its body, as anyone who can write the directory and read the format docs can,
/// and re-chains the records after it.
fn forge(image: &[u8], n: usize, at_from_end: usize) -> Vec<u8> {
    let ends = ends_of(image);
    let mut starts = vec![0];
    starts.extend_from_slice(&ends[..ends.len() - 1]);
    let mut out = Vec::new();
    let mut previous = [0u8; 32];
    for (i, (&start, &end)) in starts.iter().zip(&ends).enumerate() {
        let mut body = image[start + 80..end].to_vec();
        if i == n {
            // Flip a byte of the envelope's payload (counted from its end: a settlement ends
            // in its candidate's digest) and fix the envelope's own checksum.
            let payload_at = body.len() - 1 - at_from_end;
            body[payload_at] ^= 1;
            let (header, payload) = body.split_at(51);
            let sum = blake3::Hasher::new_derive_key("kleene checkpoint envelope v1")
                .update(&header[..19])
                .update(payload)
                .finalize();
            body[19..51].copy_from_slice(sum.as_bytes());
        }
        let mut header = Vec::new();
        header.extend_from_slice(b"KLNJ");
        header.extend_from_slice(&2u16.to_le_bytes());
        header.push(0);
        header.push(0);
        header.extend_from_slice(&(body.len() as u64).to_le_bytes());
        let check = blake3::Hasher::new_derive_key("kleene journal record header v2")
            .update(&header)
            .finalize();
        header.extend_from_slice(check.as_bytes());
        let seal = *blake3::Hasher::new_derive_key("kleene journal record seal v2")
            .update(&previous)
            .update(&header)
            .update(&body)
            .finalize()
            .as_bytes();
        out.extend_from_slice(&header);
        out.extend_from_slice(&seal);
        out.extend_from_slice(&body);
        previous = seal;
    }
    out
}

#[test]
fn a_record_resealed_with_a_valid_checksum_is_accepted_without_a_key_and_refused_with_one() {
    let unkeyed = run_image(false, None);
    // The forger's encoder reproduces the journal exactly when it changes nothing...
    let ends = ends_of(&unkeyed);
    assert_eq!(forge(&unkeyed, usize::MAX, 0), unkeyed);
    // ...so a forged record (here: a settlement's candidate bytes) passes every plain check.
    let forged = forge(&unkeyed, 2, 3);
    assert_ne!(forged, unkeyed);
    let plain = ImageJournal::with_image(chan(CHANNEL), forged.clone());
    let original = ImageJournal::with_image(chan(CHANNEL), unkeyed.clone());
    let (forged_events, events) = (
        plain.load(&chan(CHANNEL)).unwrap().unwrap().events,
        original.load(&chan(CHANNEL)).unwrap().unwrap().events,
    );
    assert_ne!(forged_events[2], events[2]);
    assert_eq!(forged_events[3..], events[3..]);

    // With a key, the journal's records carry MACs; the forged plain record is refused.
    let keyed = run_image(false, Some(key(7)));
    let keyed_ends = keyed_ends_of(&keyed, key(7));
    assert_eq!(keyed_ends.len(), ends.len());
    let journal = ImageJournal::with_image(chan(CHANNEL), keyed.clone()).with_mac_key(key(7));
    assert!(journal.load(&chan(CHANNEL)).unwrap().is_some());
    let mut spliced = keyed[..keyed_ends[1]].to_vec();
    spliced.extend_from_slice(&forged[ends[1]..ends[2]]);
    let journal = ImageJournal::with_image(chan(CHANNEL), spliced).with_mac_key(key(7));
    let err = journal.load(&chan(CHANNEL)).unwrap_err();
    assert!(
        matches!(&err, JournalError::Unkeyed { record: 3, offset, .. } if *offset == keyed_ends[1] as u64),
        "{err}"
    );
    // A forger who marks the record as keyed without the key fails the MAC.
    let mut marked = keyed.clone();
    let at = keyed_ends[1];
    marked[at + 60] ^= 1;
    let journal = ImageJournal::with_image(chan(CHANNEL), marked).with_mac_key(key(7));
    assert!(matches!(
        journal.load(&chan(CHANNEL)),
        Err(JournalError::Corrupt {
            record: 3,
            damage: RecordDamage::Mac,
            ..
        })
    ));
    // The wrong key, a journal without MACs, and a keyed journal read without its key.
    let wrong = ImageJournal::with_image(chan(CHANNEL), keyed.clone()).with_mac_key(key(8));
    assert!(matches!(
        wrong.load(&chan(CHANNEL)),
        Err(JournalError::Corrupt {
            record: 1,
            damage: RecordDamage::Mac,
            ..
        })
    ));
    let unkeyed_journal = ImageJournal::with_image(chan(CHANNEL), unkeyed).with_mac_key(key(7));
    assert!(matches!(
        unkeyed_journal.load(&chan(CHANNEL)),
        Err(JournalError::Unkeyed {
            record: 1,
            offset: 0,
            ..
        })
    ));
    let keyless = ImageJournal::with_image(chan(CHANNEL), keyed.clone());
    assert!(matches!(
        keyless.load(&chan(CHANNEL)),
        Err(JournalError::KeyRequired { record: 1, .. })
    ));
    // The MAC binds the channel: a keyed journal copied to another channel is refused.
    let other: ChannelId = chan("another");
    let copied = ImageJournal::with_image(other.clone(), keyed).with_mac_key(key(7));
    assert!(matches!(
        copied.load(&other),
        Err(JournalError::Corrupt {
            record: 1,
            damage: RecordDamage::Mac,
            ..
        })
    ));
}

#[test]
fn a_file_journal_with_a_key_writes_and_verifies_macs() {
    let dir = scratch("keyed");
    let plan = plan();
    let mut journal = FileJournal::open(&dir).unwrap().with_mac_key(key(3));
    let done = Batch::new(&plan, chan(CHANNEL))
        .dispatch(&mut worker(), &(), &mut journal)
        .unwrap();
    let reread = FileJournal::open(&dir).unwrap().with_mac_key(key(3));
    let load = reread.load(&chan(CHANNEL)).unwrap().unwrap();
    assert_eq!(load.into_evidence().unwrap().digest(), done.digest());
    let keyless = FileJournal::open(&dir).unwrap();
    assert!(matches!(
        keyless.load(&chan(CHANNEL)),
        Err(JournalError::KeyRequired { .. })
    ));
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_journal_that_does_not_fold_says_what_is_wrong_and_what_to_do() {
    // Whole, intact records whose events do not follow from each other, as two runs
    // writing at once leave them: a settlement repeated after its task was accepted.
    let mut journal = ImageJournal::with_image(chan(CHANNEL), run_image(true, None));
    let events = journal.load(&chan(CHANNEL)).unwrap().unwrap().events;
    let settled = events
        .iter()
        .rev()
        .find(|e| matches!(e, kleene::batch::evidence::EvidenceEvent::Settled { .. }))
        .unwrap()
        .clone();
    journal.append(&chan(CHANNEL), &[settled]).unwrap();
    let plan = plan();
    let mut calls = worker();
    let err = Batch::new(&plan, chan(CHANNEL))
        .resume(&mut calls, &(), &mut journal)
        .unwrap_err();
    // The fold error is the cause, so it is read through the chain.
    let message = kleene::error::Chain(&err).to_string();
    assert!(
        matches!(
            err.kind(),
            BatchErrorKind::Journal(JournalError::Fold { .. })
        ),
        "{message}"
    );
    assert!(
        message.contains("the task was accepted after 1 call(s)"),
        "{message}"
    );
    assert!(message.contains("restore it from a copy"), "{message}");
    assert!(
        !message.contains("pending") && !message.contains("InFlight"),
        "{message}"
    );
    assert!(calls.calls().is_empty());
}
