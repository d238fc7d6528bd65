//! A deterministic simulation of the batch machine under concurrency, in the style of
//! FoundationDB's and TigerBeetle's simulators: a seeded scheduler over random plans decides
//! which call in flight settles next, when the process is interrupted and at which journal
//! byte the power goes; every session resumes from what the disk holds, and the invariants
//! are checked throughout:
//!
//! - every accepted output that was durable survives every later crash and resume;
//! - no task is called while a prerequisite is not accepted (none after a failed one);
//! - no task is called more often than its budget allows;
//! - no call of a `block` agent that was left in flight is ever replayed;
//! - a simulation with no call left in flight by a crash ends with the outcomes of a
//!   sequential run of the same scripts.

use std::collections::BTreeMap;

use kleene::batch::{
    Batch, BatchErrorKind, BatchEvidence, TaskStatus, journal::CrashBackend,
    journal::EvidenceJournal, journal::Journal, journal::LogBackend, machine::Dispatch,
    worker::PendingTurnReplay,
};
use kleene::{
    ValidatedPlan,
    id::{AgentId, ChannelId, Digest, TaskId},
};
use proptest::prelude::*;

use crate::batch::machine::{Scripted, Shape, shape_strategy};
use crate::support::chan;

/// SplitMix64: the simulation's only source of choices, so a seed replays exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Why a session ended.
enum End {
    /// The batch settled.
    Settled,
    /// The process stopped between two steps (everything journaled is durable).
    Interrupted,
    /// A journal write failed: the simulated power loss.
    Crashed,
}

/// What a simulation learned.
struct Simulation {
    evidence: Option<BatchEvidence>,
    /// Whether some crash or interruption left a call in flight.
    left_in_flight: bool,
    /// Whether a resume stopped on a `block` agent's call.
    blocked: bool,
}

fn block_policy<'p>(batch: Batch<'p>, shape: &Shape, block: &[bool]) -> Batch<'p> {
    (0..shape.deps.len())
        .filter(|&i| block[i])
        .fold(batch, |b, i| {
            b.with_pending_turn_replay(
                AgentId::new(format!("Agent{i}")).unwrap(),
                PendingTurnReplay::Block,
            )
        })
}

fn accepted(evidence: &BatchEvidence) -> BTreeMap<TaskId, Digest> {
    evidence
        .accepted_outputs()
        .map(|(t, a)| (t.clone(), a.digest()))
        .collect()
}

/// Checks a dispatch against the evidence it was made from.
fn check_dispatch(plan: &ValidatedPlan, evidence: &BatchEvidence, dispatch: &Dispatch) {
    let task = dispatch.task();
    for p in plan.prerequisites(task) {
        assert_eq!(
            evidence.status(p),
            Some(TaskStatus::Accepted),
            "{task} called while its prerequisite {p} is not accepted"
        );
    }
    let t = evidence.task(task).unwrap();
    // An interrupted call spends no budget, up to as many as the budget.
    let free = u32::try_from(t.interrupted_attempts().len())
        .unwrap()
        .min(t.budget());
    assert!(
        dispatch.attempt() <= t.budget() + free,
        "{task} call {} exceeds its budget {} and {free} interruption(s)",
        dispatch.attempt(),
        t.budget()
    );
}

fn simulate(shape: &Shape, block: &[bool], limit: usize, seed: u64) -> Simulation {
    let mut rng = Rng(seed);
    let plan = shape.plan();
    let channel: ChannelId = chan("sim");
    let batch = block_policy(Batch::new(&plan, channel.clone()), shape, block);
    let mut disk: Vec<u8> = Vec::new();
    let mut durable_accepted: BTreeMap<TaskId, Digest> = BTreeMap::new();
    let mut left_in_flight = false;
    // Calls of `block` agents that were left in flight: they must never be made again.
    let mut never_again: Vec<(TaskId, u32)> = Vec::new();
    for session in 0.. {
        let crashes = session < 12;
        let mut backend = CrashBackend::default();
        if !disk.is_empty() {
            backend.replace(&channel, &disk).unwrap();
        }
        if crashes && rng.chance(40) {
            backend.freeze_after_syncs(rng.below(6));
        }
        let mut journal = Journal::new(backend);
        let restored = match journal.repair_torn_tail(&channel) {
            Ok(_) => journal
                .load(&channel)
                .unwrap()
                .map(|load| load.into_evidence().unwrap()),
            Err(_) => {
                // The power went at the repair: the disk is what it was.
                continue;
            }
        };
        if let Some(evidence) = &restored {
            // Every accepted output that was durable survived.
            for (task, digest) in &durable_accepted {
                assert_eq!(
                    evidence.accepted(task).map(|a| a.digest()),
                    Some(*digest),
                    "session {session}: the accepted output of {task} was lost"
                );
            }
            for (task, attempt) in evidence.in_flight() {
                let i: usize = task.as_str()[1..].parse().unwrap();
                left_in_flight = true;
                if block[i] {
                    never_again.push((task.clone(), attempt));
                }
            }
        }
        let (mut machine, opening) = match batch.machine(restored) {
            Ok(opened) => opened,
            Err(err) if err.is_pending_turn_blocked() => {
                let BatchErrorKind::PendingTurnBlocked { task, agent, .. } = err.into_kind() else {
                    unreachable!("checked above")
                };
                let i: usize = task.as_str()[1..].parse().unwrap();
                assert!(block[i], "{task} is not a block agent's");
                assert_eq!(agent.as_str(), format!("Agent{i}"));
                return Simulation {
                    evidence: None,
                    left_in_flight,
                    blocked: true,
                };
            }
            Err(other) => panic!("session {session}: {other}"),
        };
        let mut in_flight: Vec<Dispatch> = Vec::new();
        let mut end = End::Settled;
        if journal.append(&channel, &opening).is_err() {
            end = End::Crashed;
        }
        while matches!(end, End::Settled) {
            let work = machine.reserve(limit).unwrap();
            for dispatch in &work.dispatches {
                check_dispatch(&plan, machine.evidence(), dispatch);
                assert!(
                    !never_again
                        .iter()
                        .any(|(t, a)| t == dispatch.task() && *a < dispatch.attempt()),
                    "a block agent's interrupted call of {} was replayed",
                    dispatch.task()
                );
            }
            if journal.append(&channel, &work.events).is_err() {
                end = End::Crashed;
                break;
            }
            in_flight.extend(work.dispatches);
            if in_flight.is_empty() {
                assert!(machine.is_settled());
                break;
            }
            if crashes && rng.chance(3) {
                end = End::Interrupted;
                break;
            }
            let next = usize::try_from(rng.below(in_flight.len() as u64)).unwrap();
            let dispatch = in_flight.swap_remove(next);
            let result = shape.result(dispatch.task(), dispatch.attempt());
            let settled = machine.settle(&dispatch, result, &()).unwrap();
            assert!(settled.stop.is_none());
            if journal.append(&channel, &settled.events).is_err() {
                end = End::Crashed;
                break;
            }
            durable_accepted = accepted(machine.evidence());
        }
        let backend = journal.into_backend();
        disk = match end {
            End::Settled => {
                let evidence = machine.into_evidence();
                for t in evidence.inventory() {
                    assert!(t.1.calls_spent() <= t.1.budget(), "{} over its budget", t.0);
                }
                return Simulation {
                    evidence: Some(evidence),
                    left_in_flight,
                    blocked: false,
                };
            }
            End::Interrupted => backend.after_crash(usize::MAX),
            End::Crashed => {
                let torn = rng.below(backend.unsynced(&channel) as u64 + 2);
                backend.after_crash(usize::try_from(torn).unwrap())
            }
        }
        .log(&channel)
        .map(<[u8]>::to_vec)
        .unwrap_or_default();
    }
    unreachable!("the session loop ends by returning")
}

/// The outcome of every task: its status and accepted digest.
fn outcomes(evidence: &BatchEvidence) -> Vec<(TaskId, Option<TaskStatus>, Option<Digest>)> {
    evidence
        .inventory()
        .map(|(id, _)| {
            (
                id.clone(),
                evidence.status(id),
                evidence.accepted(id).map(|a| a.digest()),
            )
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_simulated_batch_keeps_its_invariants(
        shape in shape_strategy(7),
        block in proptest::collection::vec(proptest::bool::weighted(0.2), 7),
        limit in 1usize..=4,
        seed in any::<u64>(),
    ) {
        let simulation = simulate(&shape, &block, limit, seed);
        let plan = shape.plan();
        let sequential = Batch::new(&plan, chan("sim"))
            .dispatch(&mut Scripted(&shape), &(), &mut kleene::batch::MemoryJournal::default())
            .unwrap();
        if let Some(evidence) = simulation.evidence {
            prop_assert!(!simulation.blocked);
            prop_assert_eq!(evidence.in_flight().count(), 0);
            prop_assert_eq!(evidence.pending().count(), 0);
            if !simulation.left_in_flight {
                prop_assert_eq!(outcomes(&evidence), outcomes(&sequential));
                prop_assert_eq!(evidence.digest(), sequential.digest());
            }
        } else {
            prop_assert!(simulation.blocked && simulation.left_in_flight);
        }
    }
}
