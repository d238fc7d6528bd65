//! A plan's acceptance record does not depend on the order in which its calls finish,
//! written as a library user would, with nothing but `kleene::testing` and the public API.

use std::sync::{Arc, Mutex};

use kleene::batch::{MemoryJournal, evidence::EvidenceEvent};
use kleene::id::TaskId;
use kleene::testing::closure::ScriptedAgent;
use kleene::testing::completion::{CompletionOrder, completion_order};
use kleene::{AppBuildPlan, Batch, ExecutionOutput, ValidatedPlan, Verdict};
use proptest::prelude::*;

/// A plan of `n` tasks, each owning one file, task `i` depending on the earlier tasks its
/// bits name; and which tasks fail their tests once (their fix passes).
fn plans() -> impl Strategy<Value = (ValidatedPlan, Vec<bool>)> {
    (2usize..=6).prop_flat_map(|n| {
        (
            prop::collection::vec(any::<u8>(), n),
            prop::collection::vec(prop::bool::weighted(0.3), n),
        )
            .prop_map(move |(bits, fails)| {
                let tasks: Vec<String> = (0..n)
                    .map(|i| {
                        let deps: Vec<String> = (0..i)
                            .filter(|j| bits[i] & (1 << j) != 0)
                            .map(|j| format!("\"t{j}\""))
                            .collect();
                        format!(
                            r#"{{"id": "t{i}", "owner": "M", "spec": {{"intent": "t{i}"}},
                               "owned_paths": ["t{i}.txt"], "depends_on": [{}]}}"#,
                            deps.join(", ")
                        )
                    })
                    .collect();
                let json = format!(r#"{{"tasks": [{}]}}"#, tasks.join(", "));
                let plan = AppBuildPlan::from_json(&json).unwrap().validate().unwrap();
                (plan, fails)
            })
    })
}

/// One script for every slot: each task writes its id, and a failing task's first verdict
/// is a blocker.
fn agent(plan: &ValidatedPlan, fails: &[bool], order: CompletionOrder) -> ScriptedAgent {
    let mut agent = ScriptedAgent::new().completing_in(order);
    for id in plan.topological_order().iter() {
        let index: usize = id.as_str()[1..].parse().unwrap();
        let mut script = ScriptedAgent::new().outputs([ExecutionOutput::new(id.as_str())]);
        if fails[index] {
            script = script.post_verdicts([Verdict::blocker("tests", "1 failed").unwrap()]);
        }
        agent = agent.of_task(id.clone(), script);
    }
    agent
}

fn ids(plan: &ValidatedPlan) -> Vec<TaskId> {
    plan.topological_order().to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Under `run_async`, three calls at a time, any scripted completion order gives the
    /// record of the sequential run.
    #[test]
    fn the_record_does_not_depend_on_the_completion_order(
        (plan, fails, order) in plans().prop_flat_map(|(plan, fails)| {
            let tasks = ids(&plan);
            (Just(plan), Just(fails), completion_order(tasks))
        })
    ) {
        let batch = Batch::new(&plan, "main".parse().unwrap());
        let sequential = Arc::new(Mutex::new(agent(&plan, &fails, CompletionOrder::new())));
        let evidence = batch
            .run_agents(1, |_| sequential.clone(), &mut MemoryJournal::default())
            .unwrap()
            .evidence;
        let expected = batch.accept(&evidence).unwrap();

        let scripted = Arc::new(Mutex::new(agent(&plan, &fails, order)));
        let mut journal = MemoryJournal::default();
        let run = batch.run_agents_async(3, |_| scripted.clone(), &mut journal);
        let evidence = futures_executor::block_on(run).unwrap().evidence;
        let failing = fails.iter().filter(|&&f| f).count();
        prop_assert_eq!(evidence.fix_attempts_used() as usize, failing);
        prop_assert_eq!(batch.accept(&evidence).unwrap().digest(), expected.digest());
    }
}

/// The scripted order is the order the calls finish in: two independent tasks settle in
/// the order scripted, both ways, and their records are the same.
#[test]
fn a_scripted_completion_order_is_the_order_calls_settle_in() {
    let plan = AppBuildPlan::from_json(
        r#"{"tasks": [
          {"id": "a", "owner": "M", "spec": {"intent": "a"}, "owned_paths": ["a"]},
          {"id": "b", "owner": "M", "spec": {"intent": "b"}, "owned_paths": ["b"]}]}"#,
    )
    .unwrap()
    .validate()
    .unwrap();
    let batch = Batch::new(&plan, "main".parse().unwrap());
    let (a, b): (TaskId, TaskId) = ("a".parse().unwrap(), "b".parse().unwrap());
    let mut records = Vec::new();
    for order in [vec![a.clone(), b.clone()], vec![b.clone(), a.clone()]] {
        let agent = Arc::new(Mutex::new(
            ScriptedAgent::new().completing_in(CompletionOrder::finishing_in(order.clone())),
        ));
        let mut settled = Vec::new();
        let mut journal = MemoryJournal::default();
        let mut observe = |event: &EvidenceEvent| {
            if let EvidenceEvent::Settled { task, .. } = event {
                settled.push(task.clone());
            }
        };
        let run = batch.run_async_observed(
            2.try_into().unwrap(),
            |_| {
                kleene::batch::ClosureWorker::new(
                    kleene::batch::OutputFile::new(agent.clone()),
                    kleene::closure::step::Session::new("build", "main").unwrap(),
                    kleene::closure::RecoveryPolicy::default(),
                )
            },
            &(),
            &mut journal,
            &mut observe,
        );
        let evidence = futures_executor::block_on(run).unwrap().evidence;
        assert_eq!(settled, order);
        records.push(batch.accept(&evidence).unwrap().digest());
    }
    assert_eq!(records[0], records[1]);
}
