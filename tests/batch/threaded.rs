//! The threaded driver: several calls at once, the same evidence as the sequential run,
//! settlements that arrive together journaled together, and crashes with several
//! reservations in flight.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use kleene::batch::{
    Batch, BatchErrorKind, MemoryJournal, Proposal, Worker, WorkerCall, WorkerFailure,
    evidence::EvidenceEvent, journal::CrashBackend, journal::EvidenceJournal, journal::Journal,
};
use proptest::prelude::*;

use crate::batch::machine::{Outcome, Scripted, Shape, shape_strategy};
use crate::support::{chan, id};

fn jobs(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap()
}

fn independent(n: usize) -> Shape {
    Shape {
        deps: vec![Vec::new(); n],
        retries: vec![1; n],
        script: vec![vec![Outcome::Accept]; n],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// For all plans, scripts and job counts, the threaded run's evidence digests as the
    /// sequential run's.
    #[test]
    fn the_threaded_run_gives_the_sequential_runs_evidence(
        shape in shape_strategy(8),
        n in 1usize..=4,
        recovery in any::<bool>(),
    ) {
        let plan = shape.plan();
        let batch = Batch::new(&plan, chan("t")).with_recovery(recovery);
        let sequential = batch
            .run(&mut Scripted(&shape), &(), &mut MemoryJournal::default())
            .unwrap();
        let mut journal = MemoryJournal::default();
        let threaded = batch
            .run_threaded(jobs(n), |_| Scripted(&shape), &(), &mut journal)
            .unwrap();
        prop_assert_eq!(threaded.evidence.digest(), sequential.evidence.digest());
        prop_assert_eq!(&threaded.granted, &sequential.granted);
        let folded = journal.load(&chan("t")).unwrap().unwrap().into_evidence().unwrap();
        prop_assert_eq!(folded.digest(), sequential.evidence.digest());
    }
}

/// Sleeps, then answers from a script; counts the calls in flight at once.
struct Sleepy<'s> {
    shape: &'s Shape,
    pause: Duration,
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl Worker for Sleepy<'_> {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(self.pause);
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.shape.result(&call.task().id, call.attempt())
    }
}

#[test]
fn independent_tasks_run_at_once_up_to_the_job_limit() {
    let shape = independent(6);
    let plan = shape.plan();
    let batch = Batch::new(&plan, chan("t"));
    let (running, most) = (Arc::default(), Arc::new(AtomicUsize::new(0)));
    let outcome = batch
        .run_threaded(
            jobs(3),
            |_| Sleepy {
                shape: &shape,
                pause: Duration::from_millis(150),
                running: Arc::clone(&running),
                most: Arc::clone(&most),
            },
            &(),
            &mut MemoryJournal::default(),
        )
        .unwrap();
    assert!(outcome.evidence.summary().is_complete());
    assert_eq!(
        most.load(Ordering::SeqCst),
        3,
        "never more than the job limit"
    );
}

/// Keeps the events of every append, in order.
#[derive(Default)]
struct Counting {
    inner: MemoryJournal,
    appends: Vec<Vec<EvidenceEvent>>,
}

impl EvidenceJournal for Counting {
    fn append(
        &mut self,
        channel: &kleene::id::ChannelId,
        events: &[EvidenceEvent],
    ) -> Result<(), kleene::batch::journal::JournalError> {
        self.appends.push(events.to_vec());
        self.inner.append(channel, events)
    }
    fn load(
        &self,
        channel: &kleene::id::ChannelId,
    ) -> Result<Option<kleene::batch::journal::JournalLoad>, kleene::batch::journal::JournalError>
    {
        self.inner.load(channel)
    }
    fn compact(
        &mut self,
        channel: &kleene::id::ChannelId,
        evidence: &kleene::batch::BatchEvidence,
    ) -> Result<(), kleene::batch::journal::JournalError> {
        self.inner.compact(channel, evidence)
    }
}

/// Returns only once every worker of the run has been called, so the settlements arrive
/// close together.
struct Together<'s> {
    shape: &'s Shape,
    barrier: Arc<Barrier>,
}

impl Worker for Together<'_> {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        self.barrier.wait();
        self.shape.result(&call.task().id, call.attempt())
    }
}

#[test]
fn ready_tasks_are_reserved_in_one_commit_and_settlements_share_commits() {
    let shape = independent(4);
    let plan = shape.plan();
    let batch = Batch::new(&plan, chan("t"));
    let barrier = Arc::new(Barrier::new(4));
    let mut journal = Counting::default();
    let outcome = batch
        .run_threaded(
            jobs(4),
            |_| Together {
                shape: &shape,
                barrier: Arc::clone(&barrier),
            },
            &(),
            &mut journal,
        )
        .unwrap();
    assert!(outcome.evidence.summary().is_complete());
    // The start, then all four reservations in one commit, before any call.
    assert_eq!(journal.appends[0].len(), 1);
    assert_eq!(journal.appends[1].len(), 4);
    assert!(
        journal.appends[1]
            .iter()
            .all(|e| matches!(e, EvidenceEvent::Reserved { .. }))
    );
    // Every settlement is journaled, none twice, each in a commit of its own or with others.
    let settled: usize = journal.appends[2..]
        .iter()
        .flatten()
        .filter(|e| matches!(e, EvidenceEvent::Settled { .. }))
        .count();
    assert_eq!(settled, 4);
    assert!(journal.appends.len() <= 2 + 4);
}

#[test]
fn a_crash_at_the_commit_of_several_reservations_cuts_at_the_last_whole_record() {
    let shape = independent(3);
    let plan = shape.plan();
    let batch = Batch::new(&plan, chan("t"));
    let channel = chan("t");
    for kept in [0usize, 1, 17, 200, 10_000] {
        let mut journal = Journal::new(CrashBackend::default());
        // The start is durable; the commit of the three reservations is where the power goes.
        journal.backend_mut().freeze_after_syncs(1);
        let calls = Arc::new(Mutex::new(0));
        let counted = |_| CountsCalls {
            shape: &shape,
            calls: Arc::clone(&calls),
        };
        let err = batch
            .run_threaded(jobs(3), counted, &(), &mut journal)
            .unwrap_err();
        assert!(matches!(err.kind(), BatchErrorKind::Journal(_)), "{err}");
        assert_eq!(
            *calls.lock().unwrap(),
            0,
            "no call before its reservation is durable"
        );
        let mut disk = Journal::new(journal.backend().after_crash(kept));
        disk.repair_torn_tail(&channel).unwrap();
        let load = disk.load(&channel).unwrap().unwrap();
        let reserved = load
            .events
            .iter()
            .filter(|e| matches!(e, EvidenceEvent::Reserved { .. }))
            .count();
        // One record: all three reservations or none.
        assert!(reserved == 0 || reserved == 3, "kept {kept}: {reserved}");
        let resumed = batch
            .run_threaded(jobs(3), |_| Scripted(&shape), &(), &mut disk)
            .unwrap();
        assert!(resumed.resumed);
        assert!(resumed.evidence.summary().is_complete());
        for i in 0..3 {
            let t = resumed.evidence.task(&id(&format!("t{i}"))).unwrap();
            assert_eq!(t.interrupted_attempts().len(), reserved / 3, "kept {kept}");
        }
    }
}

/// Counts its calls.
struct CountsCalls<'s> {
    shape: &'s Shape,
    calls: Arc<Mutex<usize>>,
}

impl Worker for CountsCalls<'_> {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        *self.calls.lock().unwrap() += 1;
        self.shape.result(&call.task().id, call.attempt())
    }
}

/// Cancels task t0's call; answers the others after a pause.
struct CancelsFirst<'s> {
    shape: &'s Shape,
}

impl Worker for CancelsFirst<'_> {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        if call.task().id == id("t0") {
            return Err(WorkerFailure::Cancelled);
        }
        std::thread::sleep(Duration::from_millis(30));
        self.shape.result(&call.task().id, call.attempt())
    }
}

#[test]
fn a_cancelled_call_stops_new_calls_and_the_calls_in_flight_settle() {
    let shape = independent(5);
    let plan = shape.plan();
    let batch = Batch::new(&plan, chan("t"));
    let mut journal = MemoryJournal::default();
    let err = batch
        .run_threaded(
            jobs(3),
            |_| CancelsFirst { shape: &shape },
            &(),
            &mut journal,
        )
        .unwrap_err();
    assert!(err.is_cancelled(), "{err}");
    let evidence = journal
        .load(&chan("t"))
        .unwrap()
        .unwrap()
        .into_evidence()
        .unwrap();
    // t0 stays reserved; t1 and t2 were in flight with it and settled; nothing else ran.
    assert_eq!(evidence.in_flight().count(), 1);
    assert!(evidence.accepted(&id("t1")).is_some());
    assert!(evidence.accepted(&id("t2")).is_some());
    assert_eq!(evidence.task(&id("t3")).unwrap().calls(), 0);
    let resumed = batch
        .run_threaded(jobs(3), |_| Scripted(&shape), &(), &mut journal)
        .unwrap();
    assert!(resumed.evidence.summary().is_complete());
    assert_eq!(
        resumed
            .evidence
            .task(&id("t0"))
            .unwrap()
            .interrupted_attempts(),
        &[1]
    );
}

/// Draws one fix per call before answering.
struct DrawsAFix<'s> {
    shape: &'s Shape,
}

impl Worker for DrawsAFix<'_> {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        let fix = id(&format!("{}.fix", call.task().id));
        call.draw_fix(&fix)
            .map_err(|e| WorkerFailure::Unavailable {
                detail: e.to_string(),
            })?;
        self.shape.result(&call.task().id, call.attempt())
    }
}

#[test]
fn fix_draws_from_threads_are_journaled_before_the_call_goes_on() {
    let shape = independent(4);
    let plan = shape.plan();
    let batch = Batch::new(&plan, chan("t"));
    let mut journal = MemoryJournal::default();
    let outcome = batch
        .run_threaded(jobs(4), |_| DrawsAFix { shape: &shape }, &(), &mut journal)
        .unwrap();
    assert_eq!(outcome.evidence.fix_attempts_used(), 4);
    let folded = journal
        .load(&chan("t"))
        .unwrap()
        .unwrap()
        .into_evidence()
        .unwrap();
    assert_eq!(folded.digest(), outcome.evidence.digest());
    let sequential = batch
        .run(
            &mut DrawsAFix { shape: &shape },
            &(),
            &mut MemoryJournal::default(),
        )
        .unwrap();
    assert_eq!(sequential.evidence.digest(), outcome.evidence.digest());
}

/// A job count far above the plan's size starts one slot per task at most: `-j 100000`
/// used to start a hundred thousand threads for a plan of three tasks.
#[test]
fn no_more_slots_than_tasks_are_started() {
    let shape = independent(3);
    let plan = shape.plan();
    let batch = Batch::new(&plan, chan("t"));
    let made = AtomicUsize::new(0);
    let outcome = batch
        .run_threaded(
            jobs(100_000),
            |_| {
                made.fetch_add(1, Ordering::SeqCst);
                Scripted(&shape)
            },
            &(),
            &mut MemoryJournal::default(),
        )
        .unwrap();
    assert!(outcome.evidence.summary().is_complete());
    assert_eq!(made.load(Ordering::SeqCst), 3);
}

/// Refuses every append after the first `room` ones, as a disk that fills does.
struct FillsUp {
    inner: MemoryJournal,
    room: usize,
}

impl EvidenceJournal for FillsUp {
    fn append(
        &mut self,
        channel: &kleene::id::ChannelId,
        events: &[EvidenceEvent],
    ) -> Result<(), kleene::batch::journal::JournalError> {
        if self.room == 0 {
            return Err(kleene::batch::journal::JournalError::Io {
                path: "memory".into(),
                source: std::io::Error::from(std::io::ErrorKind::StorageFull),
            });
        }
        self.room -= 1;
        self.inner.append(channel, events)
    }
    fn load(
        &self,
        channel: &kleene::id::ChannelId,
    ) -> Result<Option<kleene::batch::journal::JournalLoad>, kleene::batch::journal::JournalError>
    {
        self.inner.load(channel)
    }
    fn compact(
        &mut self,
        channel: &kleene::id::ChannelId,
        evidence: &kleene::batch::BatchEvidence,
    ) -> Result<(), kleene::batch::journal::JournalError> {
        self.inner.compact(channel, evidence)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// For all plans, scripts, job counts and appends at which the journal fills up: with
    /// durable observation, every settlement the observer was shown is one the journal
    /// holds, so a report made from them (`accepted`) never says what the journal lost.
    #[test]
    fn with_durable_observation_nothing_shown_is_missing_from_the_journal(
        shape in shape_strategy(6),
        n in 1usize..=3,
        room in 0usize..12,
    ) {
        let plan = shape.plan();
        let batch = Batch::new(&plan, chan("t"))
            .with_group_commit(true)
            .with_durable_observation(true);
        let mut journal = FillsUp { inner: MemoryJournal::default(), room };
        let mut shown = Vec::new();
        let _ = batch.run_threaded_observed(
            jobs(n),
            |_| Scripted(&shape),
            &(),
            &mut journal,
            &mut |event| shown.push(event.clone()),
        );
        let journaled = match journal.load(&chan("t")).unwrap() {
            Some(load) => load.into_evidence().unwrap(),
            None => {
                prop_assert!(shown.is_empty(), "{shown:?}");
                return Ok(());
            }
        };
        for event in &shown {
            if let EvidenceEvent::Settled { task, attempt, .. } = event {
                let held = journaled.task(task).unwrap();
                prop_assert!(
                    held.calls() >= *attempt && held.in_flight().map(|(a, _)| a) != Some(*attempt),
                    "{task} call {attempt} was shown settled, and the journal holds {held:?}"
                );
            }
        }
    }
}
