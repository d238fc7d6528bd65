//! Journal load from a file (`FileJournal` over a scratch directory, in /dev/shm when there
//! is one), then the fold of what loaded. Input as in `journal_image`.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use kleene::ChannelId;
use kleene::batch::{EvidenceJournal, FileJournal};
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
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let image = if mode & 1 == 0 {
        kleene_fuzz::journal_image(rest)
    } else {
        rest.to_vec()
    };
    let channel = ChannelId::new("fuzz").expect("a valid channel id");
    let journal = &mut FileJournal::open(scratch_dir()).expect("the scratch directory opens");
    std::fs::write(journal.path_for(&channel), &image).expect("the scratch journal is written");
    if let Ok(Some(load)) = journal.load(&channel) {
        let _ = load.into_evidence();
    }
});
