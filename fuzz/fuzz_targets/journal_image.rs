//! Journal load over an in-memory image (`ImageJournal`, which parses exactly the bytes a
//! `FileJournal` holds), then the fold of what loaded. Input: `kleene_fuzz::journal_input`
//! (bare or framed records, sealed so they pass their checks, or the image verbatim).
//!
//! Checks: loading leaves the image unchanged; a torn tail ends where the image ends.
#![no_main]

use kleene::batch::journal::EvidenceJournal;
use kleene::id::ChannelId;
use kleene::testing::batch::ImageJournal;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kleene_fuzz::assert_envelope_layout();
    kleene_fuzz::assert_journal_layout();
    let image = kleene_fuzz::journal_input(data);
    let channel = ChannelId::new("fuzz").expect("a valid channel id");
    let journal = &mut ImageJournal::with_image(channel.clone(), image.clone());
    let loaded = journal.load(&channel);
    assert_eq!(
        journal.image(&channel),
        Some(image.as_slice()),
        "a load changed the journal"
    );
    if let Ok(Some(load)) = loaded {
        if let Some(torn) = &load.torn_tail {
            assert_eq!(
                torn.offset + torn.discarded,
                image.len() as u64,
                "a torn tail does not end where the image ends"
            );
        }
        let _ = load.into_evidence();
    }
});
