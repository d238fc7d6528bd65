//! The real journal over a store that tells written bytes from durable ones: the power is cut
//! at every sync of a run, with none, part or all of the unsynced bytes on disk, and the run
//! resumed from what is left keeps every durable commit and ends with the accepted outputs of
//! a run that never crashed (a call whose reservation was durable counts as interrupted).

use kleene::batch::{
    Batch, BatchEvidence, journal::CrashBackend, journal::EvidenceJournal, journal::Journal,
    journal::LogBackend, journal::MemoryBackend,
};
use kleene::id::ChannelId;
use kleene::testing::batch::ScriptedWorker;
use proptest::prelude::*;

use crate::batch::runs::app_plan;
use crate::support::chan;

/// The run over a crash store frozen after `syncs` syncs: what the disk holds after the crash
/// with `kept` of the unsynced bytes written.
fn crashed_after(syncs: u64, kept: usize, channel: &ChannelId) -> Option<MemoryBackend> {
    let plan = app_plan();
    let batch = Batch::new(&plan, channel.clone());
    let mut journal = Journal::new(CrashBackend::default());
    journal.backend_mut().freeze_after_syncs(syncs);
    let ran = batch.dispatch(&mut ScriptedWorker::new(), &(), &mut journal);
    // A run that never reached the frozen sync did not crash.
    ran.is_err().then(|| journal.backend().after_crash(kept))
}

fn uncrashed(channel: &ChannelId) -> (BatchEvidence, u64) {
    let plan = app_plan();
    let batch = Batch::new(&plan, channel.clone());
    let mut journal = Journal::new(CrashBackend::default());
    let done = batch
        .dispatch(&mut ScriptedWorker::new(), &(), &mut journal)
        .unwrap();
    (done, journal.backend().syncs())
}

/// Resumes from `disk`; checks that loading changed nothing and that every durable event is
/// still the start of the journal afterwards.
fn resume_after(disk: MemoryBackend, channel: &ChannelId) -> BatchEvidence {
    let plan = app_plan();
    let batch = Batch::new(&plan, channel.clone());
    let mut journal = Journal::new(disk);
    // Loading never changes the log; the torn tail is cut as an explicit step.
    let before = journal.backend().read(channel).unwrap();
    let durable = journal
        .load(channel)
        .unwrap()
        .map(|l| l.events)
        .unwrap_or_default();
    assert_eq!(journal.backend().read(channel).unwrap(), before);
    journal.repair_torn_tail(channel).unwrap();
    // Resumes what the journal holds, or dispatches when nothing of the run was durable.
    let resumed = batch
        .run(&mut ScriptedWorker::new(), &(), &mut journal)
        .unwrap()
        .evidence;
    let after = journal.load(channel).unwrap().unwrap().events;
    assert!(after.starts_with(&durable), "a durable commit was lost");
    resumed
}

/// What a resumed run must match: every task's accepted output.
fn accepted(evidence: &BatchEvidence) -> Vec<(String, kleene::id::Digest)> {
    evidence
        .accepted_outputs()
        .map(|(task, output)| (task.to_string(), output.digest()))
        .collect()
}

#[test]
fn a_crash_at_every_sync_resumes_to_the_uncrashed_outputs() {
    let channel = chan("crash-backend");
    let (full, syncs) = uncrashed(&channel);
    assert!(syncs > 3, "the run syncs once per commit: {syncs}");
    assert_eq!(accepted(&full).len(), app_plan().tasks().count());
    for at in 0..syncs {
        for kept in [0, 1, 40, 80, 81, usize::MAX] {
            let disk = crashed_after(at, kept, &channel).expect("the run crashed");
            // Each sync that succeeded made one whole commit durable.
            let whole = Journal::new(disk.clone())
                .record_ends(&channel)
                .unwrap()
                .len();
            assert!(whole as u64 >= at, "{whole} whole records after {at} syncs");
            let resumed = resume_after(disk, &channel);
            assert_eq!(
                accepted(&resumed),
                accepted(&full),
                "crash at sync {at} keeping {kept} unsynced bytes"
            );
        }
    }
    assert!(crashed_after(syncs, 0, &channel).is_none());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// For all crash points and all prefixes of the unsynced bytes: loading is never an error
    /// (a torn tail is not corruption) and the resumed run ends where the uncrashed one did.
    #[test]
    fn any_crash_point_and_torn_prefix_resumes(at in 0u64..12, kept in 0usize..4096) {
        let channel = chan("crash-backend");
        let (full, syncs) = uncrashed(&channel);
        let Some(disk) = crashed_after(at % syncs, kept, &channel) else {
            return Err(TestCaseError::fail("the run did not crash"));
        };
        let load = Journal::new(disk.clone()).load(&channel);
        prop_assert!(load.is_ok(), "{:?}", load.err());
        prop_assert_eq!(accepted(&resume_after(disk, &channel)), accepted(&full));
    }
}
