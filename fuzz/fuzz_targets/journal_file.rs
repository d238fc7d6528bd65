//! Journal load from a file (`FileJournal` over a scratch directory, in /dev/shm when there
//! is one), then the fold of what loaded. Input as in `journal_image`.
//!
//! Checks: loading leaves the file byte for byte as it was.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use kleene::batch::{journal::EvidenceJournal, FileJournal};
use kleene::id::ChannelId;
use libfuzzer_sys::fuzz_target;

fn scratch_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = PathBuf::from("/dev/shm");
        let base = if shm.is_dir() {
            shm
        } else {
            std::env::temp_dir()
        };
        base.join(format!("kleene-fuzz-journal-{}", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    kleene_fuzz::assert_envelope_layout();
    kleene_fuzz::assert_journal_layout();
    let image = kleene_fuzz::journal_input(data);
    let channel = ChannelId::new("fuzz").expect("a valid channel id");
    let journal = &mut FileJournal::open(scratch_dir()).expect("the scratch directory opens");
    let path = journal.path_for(&channel);
    std::fs::write(&path, &image).expect("the scratch journal is written");
    let loaded = journal.load(&channel);
    let after = std::fs::read(&path).expect("the scratch journal is readable");
    assert!(after == image, "a load changed the journal file");
    if let Ok(Some(load)) = loaded {
        let _ = load.into_evidence();
    }
});
