//! The async driver: the same evidence as the sequential run for the same outcomes, under
//! tokio's multi-threaded runtime and under single-threaded executors, whatever order the
//! calls complete in; calls really in flight together; a dropped run whose reservations a
//! resume continues; and the closure-running worker in all three drivers.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use kleene::batch::{
    AsyncBatchAgent, AsyncWorker, AsyncWorkerCall, Batch, BatchAgent, BatchErrorKind, Candidate,
    ClosureWorker, MemoryJournal, OutputFile, Proposal, TaskStatus, WorkerCall, WorkerFailure,
    evidence::EvidenceEvent, journal::EvidenceJournal, worker::InfrastructureFailure,
    worker::PendingTurnReplay,
};
use kleene::{
    Agent, Task,
    closure::{
        AsyncAgent, ClosureRecord, ExecutionOutput, GovernanceDecision, RecoveryPolicy, Severity,
        ValidatorResult, Verdict, step::Session, step::ValidationToken,
    },
    id::{AgentId, TaskId, ValidatorId},
};
use proptest::prelude::*;

use crate::batch::machine::{Outcome, Scripted, Shape, shape_strategy};
use crate::support::{chan, id, path, validated};

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

/// Pending once (waking itself at once): the other calls in flight get polled first.
async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await;
}

/// The index of task `t{i}`.
fn index(task: &TaskId) -> usize {
    task.as_str()[1..].parse().unwrap()
}

/// Answers from a script after yielding as often as `pauses` says for the call: how many
/// polls each call takes decides the order the calls complete in.
struct Yielding<'s> {
    shape: &'s Shape,
    pauses: &'s [u8],
}

impl AsyncWorker for Yielding<'_> {
    async fn call(&mut self, call: &AsyncWorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        let at = index(&call.task().id) * 3 + call.attempt() as usize;
        for _ in 0..self.pauses[at % self.pauses.len()] {
            yield_now().await;
        }
        self.shape.result(&call.task().id, call.attempt())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// For all plans, scripts, job counts and completion orders, the async run (on a
    /// single-threaded `block_on`) gives the sequential run's evidence, summary and recovery.
    #[test]
    fn any_completion_order_gives_the_sequential_runs_evidence(
        shape in shape_strategy(8),
        n in 1usize..=4,
        recovery in any::<bool>(),
        pauses in proptest::collection::vec(0u8..4, 1..24),
    ) {
        let plan = shape.plan();
        let batch = Batch::new(&plan, chan("t")).with_recovery(recovery);
        let sequential = batch
            .run(&mut Scripted(&shape), &(), &mut MemoryJournal::default())
            .unwrap();
        let mut journal = MemoryJournal::default();
        let run = batch.run_async(
            jobs(n),
            |_| Yielding { shape: &shape, pauses: &pauses },
            &(),
            &mut journal,
        );
        let outcome = futures_executor::block_on(run).unwrap();
        prop_assert_eq!(outcome.evidence.digest(), sequential.evidence.digest());
        prop_assert_eq!(outcome.evidence.summary(), sequential.evidence.summary());
        prop_assert_eq!(&outcome.granted, &sequential.granted);
        let folded = journal.load(&chan("t")).unwrap().unwrap().into_evidence().unwrap();
        prop_assert_eq!(folded.digest(), sequential.evidence.digest());
    }
}

/// A diamond t0 → {t1, t2, t3} → t4 with a refusal and an infrastructure failure in it.
fn diamond() -> Shape {
    Shape {
        deps: vec![vec![], vec![0], vec![0], vec![0], vec![1, 2, 3]],
        retries: vec![1, 1, 1, 0, 1],
        script: vec![
            vec![Outcome::Accept],
            vec![Outcome::Trespass, Outcome::Accept],
            vec![Outcome::AcceptClosure],
            vec![Outcome::Accept],
            vec![Outcome::Infrastructure],
        ],
    }
}

/// Sleeps on tokio's timer for a time of its own (later tasks first), then answers.
struct Sleeps {
    shape: Arc<Shape>,
}

impl AsyncWorker for Sleeps {
    async fn call(&mut self, call: &AsyncWorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        let ms = 5 * (5 - index(&call.task().id) as u64);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        self.shape.result(&call.task().id, call.attempt())
    }
}

#[test]
fn a_run_spawned_on_tokios_multi_threaded_runtime_gives_the_sequential_runs_evidence() {
    let shape = Arc::new(diamond());
    let plan = shape.plan();
    let sequential = Batch::new(&plan, chan("t"))
        .run(&mut Scripted(&shape), &(), &mut MemoryJournal::default())
        .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let spawned = Arc::clone(&shape);
    // Spawning needs a `Send + 'static` future: the run's future is `Send`, and the task
    // owns its plan and journal.
    let handle = runtime.spawn(async move {
        let plan = spawned.plan();
        let batch = Batch::new(&plan, chan("t"));
        let mut journal = MemoryJournal::default();
        let make = |_| Sleeps {
            shape: Arc::clone(&spawned),
        };
        batch.run_async(jobs(3), make, &(), &mut journal).await
    });
    let outcome = runtime.block_on(handle).unwrap().unwrap();
    assert_eq!(outcome.evidence.digest(), sequential.evidence.digest());
    assert_eq!(outcome.evidence.summary(), sequential.evidence.summary());
}

#[test]
fn a_run_on_a_local_pool_gives_the_sequential_runs_evidence() {
    let shape = diamond();
    let plan = shape.plan();
    let batch = Batch::new(&plan, chan("t"));
    let sequential = batch
        .run(&mut Scripted(&shape), &(), &mut MemoryJournal::default())
        .unwrap();
    let pauses = [3, 0, 2, 1];
    let mut pool = futures_executor::LocalPool::new();
    let mut journal = MemoryJournal::default();
    let make = |_| Yielding {
        shape: &shape,
        pauses: &pauses,
    };
    let outcome = pool
        .run_until(batch.run_async(jobs(3), make, &(), &mut journal))
        .unwrap();
    assert_eq!(outcome.evidence.digest(), sequential.evidence.digest());
    assert_eq!(outcome.evidence.summary(), sequential.evidence.summary());
}

/// Waits at a barrier that opens only when three calls wait at it, and fails (rather than
/// hangs) if that does not happen within a few seconds; counts the calls in flight.
struct MeetsTwoOthers<'s> {
    shape: &'s Shape,
    barrier: Arc<tokio::sync::Barrier>,
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl AsyncWorker for MeetsTwoOthers<'_> {
    async fn call(&mut self, call: &AsyncWorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let met = tokio::time::timeout(Duration::from_secs(5), self.barrier.wait()).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        match met {
            Ok(_) => self.shape.result(&call.task().id, call.attempt()),
            Err(_) => Err(WorkerFailure::Infrastructure(
                InfrastructureFailure::Timeout { after_ms: 5000 },
            )),
        }
    }
}

#[test]
fn three_calls_are_in_flight_together_on_one_thread() {
    let shape = independent(6);
    let plan = shape.plan();
    let batch = Batch::new(&plan, chan("t"));
    let (running, most) = (Arc::default(), Arc::new(AtomicUsize::new(0)));
    let barrier = Arc::new(tokio::sync::Barrier::new(3));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut journal = MemoryJournal::default();
    let make = |_| MeetsTwoOthers {
        shape: &shape,
        barrier: Arc::clone(&barrier),
        running: Arc::clone(&running),
        most: Arc::clone(&most),
    };
    let outcome = runtime
        .block_on(batch.run_async(jobs(3), make, &(), &mut journal))
        .unwrap();
    // Every call met two others at the barrier: none timed out.
    assert!(outcome.evidence.summary().is_complete(), "{outcome:?}");
    assert_eq!(
        most.load(Ordering::SeqCst),
        3,
        "never more than the job limit"
    );
}

/// Counts its call and never finishes it: the run is dropped while it waits.
struct Hangs {
    started: Arc<AtomicUsize>,
}

impl AsyncWorker for Hangs {
    async fn call(&mut self, _call: &AsyncWorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        self.started.fetch_add(1, Ordering::SeqCst);
        std::future::pending().await
    }
}

/// Polls an async run of four independent tasks with three slots once, so that its three
/// calls are in flight, then drops it.
fn dropped_mid_flight(batch: &Batch<'_>, journal: &mut MemoryJournal) {
    let started = Arc::new(AtomicUsize::new(0));
    let make = |_| Hangs {
        started: Arc::clone(&started),
    };
    let mut run = Box::pin(batch.run_async(jobs(3), make, &(), journal));
    let polled = run.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    assert!(polled.is_pending());
    assert_eq!(started.load(Ordering::SeqCst), 3, "three calls in flight");
    drop(run);
}

#[test]
fn a_dropped_run_keeps_every_reservation_and_a_resume_continues_them() {
    let shape = independent(4);
    let plan = shape.plan();
    let batch = Batch::new(&plan, chan("t"));
    let mut journal = MemoryJournal::default();
    dropped_mid_flight(&batch, &mut journal);
    let load = journal.load(&chan("t")).unwrap().unwrap();
    let kinds: Vec<_> = load
        .events
        .iter()
        .map(|e| match e {
            EvidenceEvent::Started { .. } => "started".to_owned(),
            EvidenceEvent::Reserved { task, attempt, .. } => format!("reserved {task} {attempt}"),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        ["started", "reserved t0 1", "reserved t1 1", "reserved t2 1"]
    );

    // Any driver resumes them; here the sequential one.
    let resumed = batch.run(&mut Scripted(&shape), &(), &mut journal).unwrap();
    assert!(resumed.resumed);
    assert!(resumed.evidence.summary().is_complete());
    for (task, interrupted) in [("t0", &[1][..]), ("t1", &[1]), ("t2", &[1]), ("t3", &[])] {
        let t = resumed.evidence.task(&id(task)).unwrap();
        assert_eq!(t.interrupted_attempts(), interrupted, "{task}");
    }

    // The same evidence as a resume of the same three reservations made by the machine.
    let mut by_hand = MemoryJournal::default();
    let (mut machine, started) = batch.machine(None).unwrap();
    by_hand.append(&chan("t"), &started).unwrap();
    let work = machine.reserve(3).unwrap();
    by_hand.append(&chan("t"), &work.events).unwrap();
    let reference = batch.run(&mut Scripted(&shape), &(), &mut by_hand).unwrap();
    assert_eq!(resumed.evidence.digest(), reference.evidence.digest());
}

#[test]
fn the_resume_of_a_dropped_run_stops_at_the_call_of_a_block_agent() {
    let shape = independent(4);
    let plan = shape.plan();
    let mut journal = MemoryJournal::default();
    dropped_mid_flight(&Batch::new(&plan, chan("t")), &mut journal);
    let agent = AgentId::new("Agent1").unwrap();
    let blocking = Batch::new(&plan, chan("t"))
        .with_pending_turn_replay(agent.clone(), PendingTurnReplay::Block);
    let err = blocking
        .run(&mut Scripted(&shape), &(), &mut journal)
        .unwrap_err();
    match err.kind() {
        BatchErrorKind::PendingTurnBlocked {
            agent: named,
            task,
            attempt,
        } => {
            assert_eq!((named, task, *attempt), (&agent, &id("t1"), 1));
        }
        other => panic!("expected the block agent's call to stop the resume, got {other}"),
    }
    // Nothing was replayed: the three calls are still in flight.
    let evidence = journal
        .load(&chan("t"))
        .unwrap()
        .unwrap()
        .into_evidence()
        .unwrap();
    assert_eq!(evidence.in_flight().count(), 3);
}

/// Fails the post-validation of every even task's root once (a justification of its own, so
/// recovery never stalls); its fix passes. Answers the same as a sync and as an async agent.
#[derive(Debug, Clone, Copy)]
struct FixesEvenTasks;

fn post_verdict(task: &Task) -> Verdict {
    if task.depth() == 0 && index(task.root_task_ref()).is_multiple_of(2) {
        Verdict::new([ValidatorResult::new(
            ValidatorId::new("tests").unwrap(),
            Severity::Blocker,
            true,
            format!("{} failed", task.id()),
        )])
    } else {
        Verdict::clean()
    }
}

fn own_file(task: &TaskId, record: &ClosureRecord) -> Proposal {
    let body = format!("{task} resolved at {:?}", record.outcome().resolved_depth());
    let file = path(&format!("out/{task}.txt"));
    Candidate::new(BTreeMap::from([(file, body.into_bytes())])).into()
}

impl Agent for FixesEvenTasks {
    type Error = std::io::Error;
    fn govern(&mut self, _: &Task, _: &Session, _: u32) -> std::io::Result<GovernanceDecision> {
        Ok(GovernanceDecision::Approve)
    }
    fn pre_validate(&mut self, _: &Task, _: u32) -> std::io::Result<Verdict> {
        Ok(Verdict::clean())
    }
    fn execute(&mut self, task: &Task, _: &ValidationToken) -> std::io::Result<ExecutionOutput> {
        Ok(ExecutionOutput::new(format!("{} ran", task.id())))
    }
    fn post_validate(&mut self, task: &Task, _: &ExecutionOutput) -> std::io::Result<Verdict> {
        Ok(post_verdict(task))
    }
}

impl BatchAgent for FixesEvenTasks {
    fn finish_call(
        &mut self,
        call: &WorkerCall<'_>,
        record: &ClosureRecord,
    ) -> Result<Proposal, WorkerFailure> {
        Ok(own_file(&call.task().id, record))
    }
}

impl AsyncAgent for FixesEvenTasks {
    type Error = std::io::Error;
    async fn govern(
        &mut self,
        _: &Task,
        _: &Session,
        _: u32,
    ) -> std::io::Result<GovernanceDecision> {
        Ok(GovernanceDecision::Approve)
    }
    async fn pre_validate(&mut self, _: &Task, _: u32) -> std::io::Result<Verdict> {
        Ok(Verdict::clean())
    }
    async fn execute(
        &mut self,
        task: &Task,
        _: &ValidationToken,
    ) -> std::io::Result<ExecutionOutput> {
        // Later tasks' models answer sooner: the calls complete out of order.
        for _ in 0..(5 - index(task.root_task_ref()).min(5)) {
            yield_now().await;
        }
        Ok(ExecutionOutput::new(format!("{} ran", task.id())))
    }
    async fn post_validate(
        &mut self,
        task: &Task,
        _: &ExecutionOutput,
    ) -> std::io::Result<Verdict> {
        Ok(post_verdict(task))
    }
}

impl AsyncBatchAgent for FixesEvenTasks {
    async fn finish_call(
        &mut self,
        call: &AsyncWorkerCall<'_>,
        record: &ClosureRecord,
    ) -> Result<Proposal, WorkerFailure> {
        Ok(own_file(&call.task().id, record))
    }
}

#[test]
fn the_closure_running_worker_gives_the_same_evidence_in_all_three_drivers() {
    // t0 → {t1, t2} → t3, and t4 on its own.
    let plan = validated(
        r#"{"tasks": [
        {"id": "t0", "kind": {"lane": "config"}, "owner": "A", "spec": {"intent": "0"},
         "owned_paths": ["out/t0.txt"]},
        {"id": "t1", "kind": {"lane": "config"}, "owner": "A", "spec": {"intent": "1"},
         "owned_paths": ["out/t1.txt"], "depends_on": ["t0"]},
        {"id": "t2", "kind": {"lane": "config"}, "owner": "A", "spec": {"intent": "2"},
         "owned_paths": ["out/t2.txt"], "depends_on": ["t0"]},
        {"id": "t3", "kind": {"lane": "config"}, "owner": "A", "spec": {"intent": "3"},
         "owned_paths": ["out/t3.txt"], "depends_on": ["t1", "t2"]},
        {"id": "t4", "kind": {"lane": "config"}, "owner": "A", "spec": {"intent": "4"},
         "owned_paths": ["out/t4.txt"]}]}"#,
    );
    let session = Session::new("build", "demo").unwrap();
    let policy = RecoveryPolicy::default();
    let batch = Batch::new(&plan, chan("t"));
    let sequential = batch
        .run(
            &mut ClosureWorker::new(FixesEvenTasks, session.clone(), policy.clone()),
            &(),
            &mut MemoryJournal::default(),
        )
        .unwrap();
    let threaded = batch
        .run_threaded(
            jobs(3),
            |_| ClosureWorker::new(FixesEvenTasks, session.clone(), policy.clone()),
            &(),
            &mut MemoryJournal::default(),
        )
        .unwrap();
    let mut journal = MemoryJournal::default();
    let make = |_| ClosureWorker::new(FixesEvenTasks, session.clone(), policy.clone());
    let asynchronous =
        futures_executor::block_on(batch.run_async(jobs(3), make, &(), &mut journal)).unwrap();
    assert!(sequential.evidence.summary().is_complete());
    // t0, t2 and t4 each drew one fix, journaled before it ran.
    assert_eq!(asynchronous.evidence.fix_attempts_used(), 3);
    assert_eq!(asynchronous.evidence.digest(), sequential.evidence.digest());
    assert_eq!(threaded.evidence.digest(), sequential.evidence.digest());
    let load = journal.load(&chan("t")).unwrap().unwrap();
    let drawn = load
        .events
        .iter()
        .filter(|e| matches!(e, EvidenceEvent::FixDrawn { .. }))
        .count();
    assert_eq!(drawn, 3);
    assert_eq!(
        load.into_evidence().unwrap().digest(),
        sequential.evidence.digest()
    );
}

/// [`FixesEvenTasks`] on a host with no room to prepare a fix: every fix subtask's
/// preparation fails with the host unavailable. Keeps how each call ended for it.
#[derive(Debug, Clone, Default)]
struct NoRoomForFixes {
    ended: Arc<std::sync::Mutex<Vec<&'static str>>>,
}

impl AsyncAgent for NoRoomForFixes {
    type Error = std::io::Error;
    async fn govern(
        &mut self,
        task: &Task,
        session: &Session,
        iteration: u32,
    ) -> std::io::Result<GovernanceDecision> {
        AsyncAgent::govern(&mut FixesEvenTasks, task, session, iteration).await
    }
    async fn pre_validate(&mut self, task: &Task, iteration: u32) -> std::io::Result<Verdict> {
        AsyncAgent::pre_validate(&mut FixesEvenTasks, task, iteration).await
    }
    async fn execute(
        &mut self,
        task: &Task,
        token: &ValidationToken,
    ) -> std::io::Result<ExecutionOutput> {
        assert_eq!(task.depth(), 0, "a fix ran that could not be prepared");
        AsyncAgent::execute(&mut FixesEvenTasks, task, token).await
    }
    async fn post_validate(
        &mut self,
        task: &Task,
        output: &ExecutionOutput,
    ) -> std::io::Result<Verdict> {
        AsyncAgent::post_validate(&mut FixesEvenTasks, task, output).await
    }
}

impl AsyncBatchAgent for NoRoomForFixes {
    async fn prepare_fix(
        &mut self,
        _: &AsyncWorkerCall<'_>,
        _: &Task,
    ) -> Result<(), WorkerFailure> {
        Err(WorkerFailure::Unavailable {
            detail: "no space left for the fix's spec".to_owned(),
        })
    }
    async fn finish_call(
        &mut self,
        call: &AsyncWorkerCall<'_>,
        record: &ClosureRecord,
    ) -> Result<Proposal, WorkerFailure> {
        self.ended.lock().unwrap().push("finished");
        Ok(own_file(&call.task().id, record))
    }
    async fn withdraw_call(
        &mut self,
        _: &AsyncWorkerCall<'_>,
        _: &ClosureRecord,
        _: &WorkerFailure,
    ) {
        self.ended.lock().unwrap().push("withdrawn");
    }
}

/// In the async driver too, a fix that cannot be prepared withdraws its call before the
/// attempt is drawn: the journal holds no draw, the agent is told the call is withdrawn
/// (never finished), and a resume on a working host fixes the task with the run's one
/// attempt.
#[test]
fn an_async_fix_that_cannot_be_prepared_is_withdrawn_without_spending_its_attempt() {
    let plan = validated(
        r#"{"tasks": [{"id": "t0", "kind": {"lane": "config"}, "owner": "A",
            "spec": {"intent": "0"}, "owned_paths": ["out/t0.txt"], "retry_limit": 0}]}"#,
    );
    let session = Session::new("build", "room").unwrap();
    let policy = RecoveryPolicy::builder()
        .max_total_fix_attempts(1)
        .build()
        .unwrap();
    let batch = Batch::new(&plan, chan("room"));
    let mut journal = MemoryJournal::default();
    let agent = NoRoomForFixes::default();
    let make = |_| ClosureWorker::new(agent.clone(), session.clone(), policy.clone());
    let err = futures_executor::block_on(batch.run_async(jobs(2), make, &(), &mut journal))
        .expect_err("the host had no room");
    assert!(
        matches!(
            err.kind(),
            BatchErrorKind::WorkerUnavailable { fixes_drawn: 0, .. }
        ),
        "{err:?}"
    );
    assert_eq!(*agent.ended.lock().unwrap(), ["withdrawn"]);
    let load = journal.load(&chan("room")).unwrap().unwrap();
    assert!(
        !load
            .events
            .iter()
            .any(|e| matches!(e, EvidenceEvent::FixDrawn { .. })),
        "{:?}",
        load.events
    );
    let make = |_| ClosureWorker::new(FixesEvenTasks, session.clone(), policy.clone());
    let outcome =
        futures_executor::block_on(batch.run_async(jobs(2), make, &(), &mut journal)).unwrap();
    assert!(outcome.evidence.summary().is_complete());
    assert_eq!(outcome.evidence.fix_attempts_used(), 1);
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

/// Returns once every call of the run waits at the barrier: they all complete together.
struct Together<'s> {
    shape: &'s Shape,
    barrier: Arc<tokio::sync::Barrier>,
}

impl AsyncWorker for Together<'_> {
    async fn call(&mut self, call: &AsyncWorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        self.barrier.wait().await;
        self.shape.result(&call.task().id, call.attempt())
    }
}

#[test]
fn calls_that_complete_together_settle_in_one_commit() {
    let shape = independent(4);
    let plan = shape.plan();
    let batch = Batch::new(&plan, chan("t"));
    let barrier = Arc::new(tokio::sync::Barrier::new(4));
    let mut journal = Counting::default();
    let make = |_| Together {
        shape: &shape,
        barrier: Arc::clone(&barrier),
    };
    let outcome =
        futures_executor::block_on(batch.run_async(jobs(4), make, &(), &mut journal)).unwrap();
    assert!(outcome.evidence.summary().is_complete());
    let sizes: Vec<_> = journal.appends.iter().map(Vec::len).collect();
    // The start; the four reservations before any call; the four settlements together.
    assert_eq!(sizes, [1, 4, 4]);
    assert!(
        journal.appends[2]
            .iter()
            .all(|e| matches!(e, EvidenceEvent::Settled { .. }))
    );
}

#[test]
fn the_observer_sees_every_journaled_event_in_order() {
    let shape = diamond();
    let plan = shape.plan();
    let batch = Batch::new(&plan, chan("t"));
    let pauses = [1, 0, 2];
    let mut seen = Vec::new();
    let mut observer = |e: &EvidenceEvent| seen.push(e.clone());
    let mut journal = MemoryJournal::default();
    let make = |_| Yielding {
        shape: &shape,
        pauses: &pauses,
    };
    let run = batch.run_async_observed(jobs(3), make, &(), &mut journal, &mut observer);
    futures_executor::block_on(run).unwrap();
    let load = journal.load(&chan("t")).unwrap().unwrap();
    assert_eq!(seen, load.events);
}

#[test]
fn every_driver_runs_as_one_expression_over_a_temporary_batch() {
    let shape = diamond();
    let plan = shape.plan();
    // Sequential and threaded: the run ends before the statement does.
    let sequential = Batch::new(&plan, chan("t"))
        .run(&mut Scripted(&shape), &(), &mut MemoryJournal::default())
        .unwrap();
    let threaded = Batch::new(&plan, chan("t"))
        .run_threaded(
            jobs(2),
            |_| Scripted(&shape),
            &(),
            &mut MemoryJournal::default(),
        )
        .unwrap();
    let pauses = [1, 0, 2];
    let make = |_| Yielding {
        shape: &shape,
        pauses: &pauses,
    };
    // Awaited in the same expression, inside a future a runtime polls.
    let awaited = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(async {
            Batch::new(&plan, chan("t"))
                .run_async(jobs(2), make, &(), &mut MemoryJournal::default())
                .await
        })
        .unwrap();
    // Stored first and awaited later: the future owns its batch, so the temporary `Batch`
    // may be gone (this was E0716 when the future borrowed it).
    let mut journal = MemoryJournal::default();
    let stored = Batch::new(&plan, chan("t")).run_async(jobs(2), make, &(), &mut journal);
    let stored = futures_executor::block_on(stored).unwrap();
    for outcome in [&threaded, &awaited, &stored] {
        assert_eq!(outcome.evidence.digest(), sequential.evidence.digest());
    }
}

/// Only the two phases that say something: writes its task's intent, and `api`'s first
/// build fails its tests.
struct Plain;

impl AsyncAgent for Plain {
    type Error = kleene::Error;
    async fn execute(
        &mut self,
        task: &Task,
        _: &ValidationToken,
    ) -> Result<ExecutionOutput, kleene::Error> {
        let root = task.root_task_ref();
        Ok(ExecutionOutput::new(format!(
            "{root} at depth {}",
            task.depth()
        )))
    }
    async fn post_validate(
        &mut self,
        task: &Task,
        _: &ExecutionOutput,
    ) -> Result<Verdict, kleene::Error> {
        // kleene's own error is an agent error: its constructors' errors pass with `?`.
        let tests = ValidatorId::new("tests")?;
        let failed = ValidatorResult::new(tests, Severity::Blocker, true, "1 test failed");
        Ok(Verdict::new(
            (task.id().as_str() == "api").then_some(failed),
        ))
    }
}

#[test]
fn an_output_file_agent_writes_its_last_output_to_its_tasks_one_path() {
    let plan = validated(
        r#"{"tasks": [
        {"id": "api", "owner": "A", "spec": {"intent": "the API"}, "owned_paths": ["api.rs"]},
        {"id": "ui", "owner": "A", "spec": {"intent": "the UI"}, "owned_paths": ["ui.rs"]},
        {"id": "two", "owner": "A", "spec": {"intent": "two files"},
         "owned_paths": ["a.txt", "b.txt"]}]}"#,
    );
    let session = Session::new("build", "demo").unwrap();
    let make = |_| {
        ClosureWorker::new(
            OutputFile::new(Plain),
            session.clone(),
            RecoveryPolicy::default(),
        )
    };
    let outcome = futures_executor::block_on(Batch::new(&plan, chan("t")).run_async(
        jobs(2),
        make,
        &(),
        &mut MemoryJournal::default(),
    ))
    .unwrap();
    let evidence = &outcome.evidence;
    let file = |task: &str, file: &str| {
        let accepted = evidence.accepted(&id(task)).unwrap();
        String::from_utf8(accepted.files()[&path(file)].clone()).unwrap()
    };
    // The fix's output replaced the failed build's: the file is what the fix wrote.
    assert_eq!(file("api", "api.rs"), "api at depth 1");
    assert_eq!(evidence.fix_attempts_used(), 1);
    assert_eq!(file("ui", "ui.rs"), "ui at depth 0");
    // Which of two files gets the text is not the adapter's guess: the task fails, named.
    assert_eq!(evidence.status(&id("two")), Some(TaskStatus::Failed));
    let (_, failure) = evidence
        .task(&id("two"))
        .unwrap()
        .infrastructure_failure()
        .unwrap();
    assert!(failure.to_string().contains("task two owns 2"), "{failure}");
}
