//! Journal load over an in-memory image (`ImageJournal`, which parses exactly the bytes a
//! `FileJournal` holds), then the fold of what loaded.
//!
//! The first byte picks the image: even, the rest is framed records that are sealed
//! (`kleene_fuzz::journal_image`); odd, the rest is the image verbatim.
#![no_main]

use kleene::ChannelId;
use kleene::batch::EvidenceJournal;
use kleene::testing::batch::ImageJournal;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kleene_fuzz::assert_envelope_layout();
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let image = if mode & 1 == 0 {
        kleene_fuzz::journal_image(rest)
    } else {
        rest.to_vec()
    };
    let channel = ChannelId::new("fuzz").expect("a valid channel id");
    let journal = &mut ImageJournal::with_image(channel.clone(), image.clone());
    if let Ok(Some(load)) = journal.load(&channel) {
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
