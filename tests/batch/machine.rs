//! The sans-IO batch machine: several calls in flight, settlements in any order, and the
//! evidence that does not depend on that order.

use std::collections::BTreeMap;

use kleene::acceptance::{BuildBinding, accept, export};
use kleene::batch::evidence::EVIDENCE_VERSION;
use kleene::batch::worker::InfrastructureFailure;
use kleene::batch::{
    Batch, BatchEvidence, Candidate, MemoryJournal, Proposal, Rejection, TaskStatus, Worker,
    WorkerCall, WorkerFailure, evidence::ClosureSettlement, journal::EvidenceJournal,
    machine::BatchMachine, worker::PendingTurnReplay,
};
use kleene::snapshot::Snapshot;
use kleene::{
    Agent, Task, ValidatedPlan,
    closure::{
        ExecutionOutput, GovernanceDecision, RecoveryPolicy, Spec, Verdict, run_to_closure,
        step::Session, step::ValidationToken,
    },
    id::{AgentId, TaskId},
};
use proptest::prelude::*;

use crate::support::{chan, id, path, validated};

/// What a scripted call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Writes its own file.
    Accept,
    /// Writes a file it does not own (refused by the ownership check).
    Trespass,
    /// Fails on infrastructure.
    Infrastructure,
    /// Writes its own file, from a closure.
    AcceptClosure,
    /// Refused by the worker itself, from a closure.
    RefuseClosure,
}

fn outcome_strategy() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        4 => Just(Outcome::Accept),
        2 => Just(Outcome::Trespass),
        1 => Just(Outcome::Infrastructure),
        2 => Just(Outcome::AcceptClosure),
        1 => Just(Outcome::RefuseClosure),
    ]
}

/// A random plan: `deps[i]` are earlier tasks task `i` depends on, `retries[i]` its retries.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    pub(crate) deps: Vec<Vec<usize>>,
    pub(crate) retries: Vec<u32>,
    /// `script[i][a]` is what call `a + 1` of task `i` does (the last one repeats).
    pub(crate) script: Vec<Vec<Outcome>>,
}

pub(crate) fn shape_strategy(max_tasks: usize) -> impl Strategy<Value = Shape> {
    (1..=max_tasks)
        .prop_flat_map(|n| {
            let deps = (0..n)
                .map(|i| proptest::sample::subsequence((0..i).collect::<Vec<_>>(), 0..=i.min(2)))
                .collect::<Vec<_>>();
            let retries = proptest::collection::vec(0u32..=2, n);
            let script =
                proptest::collection::vec(proptest::collection::vec(outcome_strategy(), 1..=3), n);
            (deps, retries, script)
        })
        .prop_map(|(deps, retries, script)| Shape {
            deps,
            retries,
            script,
        })
}

impl Shape {
    pub(crate) fn plan(&self) -> ValidatedPlan {
        let tasks: Vec<String> = (0..self.deps.len())
            .map(|i| {
                let deps: Vec<String> = self.deps[i].iter().map(|d| format!("\"t{d}\"")).collect();
                format!(
                    r#"{{"id": "t{i}", "kind": {{"lane": "config"}}, "owner": "Agent{i}",
                        "spec": {{"intent": "task {i}"}}, "owned_paths": ["out/t{i}.txt"],
                        "retry_limit": {}, "depends_on": [{}]}}"#,
                    self.retries[i],
                    deps.join(", ")
                )
            })
            .collect();
        validated(&format!(r#"{{"tasks": [{}]}}"#, tasks.join(", ")))
    }

    pub(crate) fn outcome(&self, task: &TaskId, attempt: u32) -> Outcome {
        let i: usize = task.as_str()[1..].parse().unwrap();
        let script = &self.script[i];
        let at = (attempt as usize).saturating_sub(1).min(script.len() - 1);
        script[at]
    }

    /// What the scripted worker returns for call `attempt` of `task`.
    pub(crate) fn result(&self, task: &TaskId, attempt: u32) -> Result<Proposal, WorkerFailure> {
        let own = || {
            Candidate::new(BTreeMap::from([(
                path(&format!("out/{task}.txt")),
                format!("{task} call {attempt}").into_bytes(),
            )]))
        };
        match self.outcome(task, attempt) {
            Outcome::Accept => Ok(own().into()),
            Outcome::Trespass => Ok(Candidate::new(BTreeMap::from([(
                path("elsewhere/x.txt"),
                b"x".to_vec(),
            )]))
            .into()),
            Outcome::Infrastructure => Err(WorkerFailure::Infrastructure(
                InfrastructureFailure::Transport {
                    detail: format!("{task} call {attempt}"),
                },
            )),
            Outcome::AcceptClosure => Ok(Proposal::new(own()).with_closure(settlement())),
            Outcome::RefuseClosure => Ok(Proposal::refused(
                own(),
                Rejection::contract(task, "closure halted: recovery_stalled"),
            )
            .with_closure(settlement())),
        }
    }
}

/// A worker answering from a [`Shape`]'s script.
pub(crate) struct Scripted<'s>(pub(crate) &'s Shape);

impl Worker for Scripted<'_> {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        self.0.result(&call.task().id, call.attempt())
    }
}

struct Passes;
impl Agent for Passes {
    type Error = std::convert::Infallible;
    fn govern(&mut self, _: &Task, _: &Session, _: u32) -> Result<GovernanceDecision, Self::Error> {
        Ok(GovernanceDecision::Approve)
    }
    fn pre_validate(&mut self, _: &Task, _: u32) -> Result<Verdict, Self::Error> {
        Ok(Verdict::clean())
    }
    fn execute(&mut self, _: &Task, _: &ValidationToken) -> Result<ExecutionOutput, Self::Error> {
        Ok(ExecutionOutput::new("done"))
    }
    fn post_validate(&mut self, _: &Task, _: &ExecutionOutput) -> Result<Verdict, Self::Error> {
        Ok(Verdict::clean())
    }
}

/// A settled closure's evidence (the same one for every call: only where it sits matters).
fn settlement() -> ClosureSettlement {
    let task = Task::new(id("x"), Spec::new("build"));
    let record = run_to_closure(
        task,
        Session::new("build", "demo").unwrap(),
        &mut Passes,
        &RecoveryPolicy::default(),
    );
    ClosureSettlement::of(&record)
}

/// Drives `machine` to the end with at most `limit` calls in flight, settling the call
/// `pick(in_flight)` chooses next; every event goes to `journal`.
pub(crate) fn drive_machine(
    machine: &mut BatchMachine<'_>,
    shape: &Shape,
    limit: usize,
    journal: &mut impl EvidenceJournal,
    mut pick: impl FnMut(usize) -> usize,
) {
    let channel = machine.evidence().channel().clone();
    let mut in_flight = Vec::new();
    loop {
        let work = machine.reserve(limit).unwrap();
        journal.append(&channel, &work.events).unwrap();
        in_flight.extend(work.dispatches);
        if in_flight.is_empty() {
            assert!(machine.is_settled());
            return;
        }
        let dispatch = in_flight.swap_remove(pick(in_flight.len()));
        let result = shape.result(dispatch.task(), dispatch.attempt());
        let settled = machine.settle(&dispatch, result, &()).unwrap();
        assert!(settled.stop.is_none());
        journal.append(&channel, &settled.events).unwrap();
    }
}

fn sequential(shape: &Shape, plan: &ValidatedPlan, recovery: bool) -> BatchEvidence {
    Batch::new(plan, chan("seq"))
        .with_recovery(recovery)
        .dispatch(&mut Scripted(shape), &(), &mut MemoryJournal::default())
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// For all plans, scripts, concurrency limits and completion orders, the machine's
    /// evidence equals (and digests as) the sequential drive's, and its journal folds to it.
    #[test]
    fn evidence_does_not_depend_on_completion_order(
        shape in shape_strategy(8),
        limit in 1usize..=4,
        recovery in any::<bool>(),
        picks in proptest::collection::vec(any::<prop::sample::Index>(), 64),
    ) {
        let plan = shape.plan();
        let oracle = sequential(&shape, &plan, recovery);
        let batch = Batch::new(&plan, chan("seq")).with_recovery(recovery);
        let (mut machine, started) = batch.machine(None).unwrap();
        let mut journal = MemoryJournal::default();
        journal.append(&chan("seq"), &started).unwrap();
        let mut next = picks.iter().cycle();
        drive_machine(&mut machine, &shape, limit, &mut journal, |n| {
            next.next().map_or(0, |i| i.index(n))
        });
        let evidence = machine.into_evidence();
        prop_assert_eq!(evidence.digest(), oracle.digest());
        // Everything but the recent-failure history (a log of when things failed) is equal.
        prop_assert!(evidence.inventory().eq(oracle.inventory()));
        prop_assert_eq!(evidence.closures(), oracle.closures());
        let folded = journal.load(&chan("seq")).unwrap().unwrap().into_evidence().unwrap();
        prop_assert_eq!(folded.digest(), oracle.digest());
        // What users keep is the same to the byte: the acceptance record and its export.
        prop_assert_eq!(exported(&plan, &evidence), exported(&plan, &oracle));
    }
}

/// The export archive's bytes when the evidence is accepted, or the reason it is not.
fn exported(plan: &ValidatedPlan, evidence: &BatchEvidence) -> Result<Vec<u8>, String> {
    let snapshot = Snapshot::from_evidence(evidence).map_err(|e| e.to_string())?;
    let binding = BuildBinding::new(evidence.channel().clone(), plan.digest(), EVIDENCE_VERSION);
    let record = accept(plan, evidence, &snapshot, &binding).map_err(|e| e.to_string())?;
    Ok(export(&record, &snapshot)
        .map_err(|e| e.to_string())?
        .into_bytes())
}

fn independent(n: usize) -> Shape {
    Shape {
        deps: vec![Vec::new(); n],
        retries: vec![0; n],
        script: vec![vec![Outcome::Accept]; n],
    }
}

#[test]
fn one_reserve_reserves_every_ready_task_up_to_the_limit() {
    let shape = Shape {
        deps: vec![vec![], vec![], vec![0], vec![]],
        ..independent(4)
    };
    let plan = shape.plan();
    let batch = Batch::new(&plan, chan("c"));
    let (mut machine, _) = batch.machine(None).unwrap();
    let work = machine.reserve(8).unwrap();
    let tasks: Vec<&str> = work.dispatches.iter().map(|d| d.task().as_str()).collect();
    // t2 waits for t0; the others are ready at once and reserved in one commit.
    assert_eq!(tasks.len(), 3);
    assert!(!tasks.contains(&"t2"));
    assert_eq!(work.events.len(), 3);
    assert_eq!(machine.in_flight(), 3);
    assert!(
        machine.reserve(8).unwrap().dispatches.is_empty(),
        "nothing newly ready"
    );
    let t0 = work
        .dispatches
        .iter()
        .find(|d| d.task() == &id("t0"))
        .unwrap();
    machine.settle(t0, shape.result(t0.task(), 1), &()).unwrap();
    let next = machine.reserve(8).unwrap();
    assert_eq!(next.dispatches.len(), 1);
    assert_eq!(next.dispatches[0].task(), &id("t2"));
    assert_eq!(next.dispatches[0].prerequisites()[0].0, id("t0"));
}

#[test]
fn a_failure_drains_its_dependents_while_other_calls_are_in_flight() {
    let mut shape = Shape {
        deps: vec![vec![], vec![0], vec![1], vec![]],
        ..independent(4)
    };
    shape.script[0] = vec![Outcome::Infrastructure];
    let plan = shape.plan();
    let batch = Batch::new(&plan, chan("c"));
    let (mut machine, _) = batch.machine(None).unwrap();
    let work = machine.reserve(2).unwrap();
    assert_eq!(work.dispatches.len(), 2); // t0 and t3
    let t0 = &work.dispatches[0];
    machine.settle(t0, shape.result(t0.task(), 1), &()).unwrap();
    let drained = machine.reserve(2).unwrap();
    assert!(drained.dispatches.is_empty());
    assert_eq!(drained.events.len(), 2, "t1 and t2 drain behind t0");
    assert!(!machine.is_settled(), "t3 is still in flight");
    assert_eq!(
        machine.evidence().status(&id("t2")),
        Some(TaskStatus::Drained {
            blocked_by: id("t0")
        })
    );
    let t3 = &work.dispatches[1];
    machine.settle(t3, shape.result(t3.task(), 1), &()).unwrap();
    assert!(machine.is_settled());
}

#[test]
fn a_dispatch_survives_serialisation_and_settles_its_call() {
    let shape = independent(1);
    let plan = shape.plan();
    let batch = Batch::new(&plan, chan("c"));
    let (mut machine, _) = batch.machine(None).unwrap();
    let dispatch = machine.reserve(1).unwrap().dispatches.remove(0);
    let json = serde_json::to_string(&dispatch).unwrap();
    let back: kleene::batch::machine::Dispatch = serde_json::from_str(&json).unwrap();
    assert_eq!(back, dispatch);
    machine
        .settle(&back, shape.result(back.task(), 1), &())
        .unwrap();
    assert!(machine.evidence().summary().is_complete());
    // A second settlement of the same call is refused, never folded.
    assert!(
        machine
            .settle(&back, shape.result(back.task(), 1), &())
            .is_err()
    );
}

#[test]
fn a_machine_rebuilt_from_its_journal_between_steps_continues_the_same_batch() {
    let shape = Shape {
        deps: vec![vec![], vec![0], vec![0], vec![1, 2]],
        ..independent(4)
    };
    let plan = shape.plan();
    let batch = Batch::new(&plan, chan("seq"));
    let mut journal = MemoryJournal::default();
    let (mut machine, started) = batch.machine(None).unwrap();
    journal.append(&chan("seq"), &started).unwrap();
    // Every step persists and the next step starts from the journal's fold.
    loop {
        let work = machine.reserve(2).unwrap();
        journal.append(&chan("seq"), &work.events).unwrap();
        if work.dispatches.is_empty() && machine.is_settled() {
            break;
        }
        for dispatch in work.dispatches.iter().rev() {
            let settled = machine
                .settle(
                    dispatch,
                    shape.result(dispatch.task(), dispatch.attempt()),
                    &(),
                )
                .unwrap();
            journal.append(&chan("seq"), &settled.events).unwrap();
        }
        let evidence = journal
            .load(&chan("seq"))
            .unwrap()
            .unwrap()
            .into_evidence()
            .unwrap();
        let (again, interrupted) = batch.machine(Some(evidence)).unwrap();
        assert!(interrupted.is_empty());
        machine = again;
    }
    assert!(machine.evidence().summary().is_complete());
    assert_eq!(
        machine.evidence().digest(),
        sequential(&shape, &plan, false).digest()
    );
}

#[test]
fn a_resume_with_three_calls_in_flight_names_the_block_agents_call() {
    let shape = Shape {
        retries: vec![1; 3],
        ..independent(3)
    };
    let plan = shape.plan();
    let batch = Batch::new(&plan, chan("c"));
    let mut journal = MemoryJournal::default();
    let (mut machine, started) = batch.machine(None).unwrap();
    journal.append(&chan("c"), &started).unwrap();
    let work = machine.reserve(3).unwrap();
    assert_eq!(work.dispatches.len(), 3);
    journal.append(&chan("c"), &work.events).unwrap();
    // The process dies with three reservations in flight; t1's agent blocks replay.
    let blocking = batch
        .clone()
        .with_pending_turn_replay(AgentId::new("Agent1").unwrap(), PendingTurnReplay::Block);
    let err = blocking
        .resume(&mut Scripted(&shape), &(), &mut journal)
        .unwrap_err();
    assert!(err.is_pending_turn_blocked());
    let text = kleene::error::Chain(&err).to_string();
    assert!(
        text.contains("task t1") && text.contains("agent Agent1"),
        "{text}"
    );
    // Nothing was recorded: the other two are still in flight, and an allow-all resume
    // interrupts all three and runs them again.
    let evidence = batch
        .resume(&mut Scripted(&shape), &(), &mut journal)
        .unwrap();
    for i in 0..3 {
        let t = evidence.task(&id(&format!("t{i}"))).unwrap();
        assert_eq!(t.interrupted_attempts(), &[1]);
        assert_eq!(t.calls(), 2);
    }
    assert!(evidence.summary().is_complete());
}

/// Guards a defect of the machine's first sequential drive: it compacted after the first of
/// a step's drains, into a snapshot that already held the next drain, which it then appended
/// again; the journal no longer folded.
#[test]
fn compaction_inside_a_step_of_several_drains_keeps_the_journal_foldable() {
    let mut shape = Shape {
        deps: vec![vec![], vec![], vec![0], vec![0]],
        ..independent(4)
    };
    shape.script[0] = vec![Outcome::Trespass];
    shape.retries[0] = 1;
    let plan = shape.plan();
    let batch = Batch::new(&plan, chan("seq"))
        .with_recovery(true)
        .with_compaction_after(6);
    let mut journal = kleene::testing::batch::ImageJournal::default();
    let evidence = batch
        .dispatch(&mut Scripted(&shape), &(), &mut journal)
        .unwrap();
    let folded = journal
        .load(&chan("seq"))
        .unwrap()
        .unwrap()
        .into_evidence()
        .unwrap();
    assert_eq!(folded.digest(), evidence.digest());
    assert_eq!(
        folded.status(&id("t3")),
        Some(TaskStatus::Drained {
            blocked_by: id("t0")
        })
    );
}
