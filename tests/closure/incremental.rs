//! A closure's incremental form: one delta per step, restored by verifying and folding.
//!
//! Restoring from the deltas of any prefix of a run gives exactly the live machine at that
//! step; a dropped, duplicated, reordered or edited delta is refused naming its position; a
//! store cut anywhere restores to its last whole step; persisted `ClosureState`s still load.
//!
//! Also guards the bug where `Closure::restore` accepted a state whose tasks had been edited
//! where its audit log does not reach (a fix subtask's rendered spec): restore now replays
//! the state's own history and refuses a state that differs from what it replays to.

use kleene::testing::closure::{ScriptedAgent, policy, scripted_agent};
use kleene::{
    Task, checkpoint,
    closure::Closure,
    closure::{
        ClosureState, ExecutionOutput, RecoveryPolicy, Severity, Spec, ValidatorResult, Verdict,
        machine::ClosureDelta, machine::ClosureDeltaError, machine::ClosureStateError,
        step::Session,
    },
    id::{TaskId, ValidatorId},
};
use proptest::prelude::*;
use serde_json::Value;

fn root() -> Task {
    Task::new(TaskId::new("x").unwrap(), Spec::new("add /login"))
}

fn session() -> Session {
    Session::new("build", "demo").unwrap()
}

fn failing(text: &str) -> Verdict {
    Verdict::new([ValidatorResult::new(
        ValidatorId::new("tests").unwrap(),
        Severity::Blocker,
        true,
        text,
    )])
}

/// Runs a closure to its end, keeping the live state and the delta after every step
/// (the start first).
fn run(policy: RecoveryPolicy, mut agent: ScriptedAgent) -> Vec<(ClosureState, ClosureDelta)> {
    let mut closure = Closure::start(root(), session(), policy);
    let mut steps = vec![(closure.state(), closure.step_delta())];
    while !matches!(closure, Closure::Done(_)) {
        closure = closure.step(&mut agent);
        steps.push((closure.state(), closure.step_delta()));
    }
    steps
}

fn deltas(steps: &[(ClosureState, ClosureDelta)]) -> Vec<ClosureDelta> {
    steps.iter().map(|(_, d)| d.clone()).collect()
}

/// A run with fixes, outputs and a resolution: root and first fix fail, the second passes.
fn three_task_run() -> Vec<(ClosureState, ClosureDelta)> {
    let agent = ScriptedAgent::new()
        .outputs([
            ExecutionOutput::new("wrote a"),
            ExecutionOutput::new("wrote b"),
        ])
        .post_verdicts([failing("test a ... FAILED"), failing("test b ... FAILED")]);
    run(RecoveryPolicy::default(), agent)
}

fn restored_state(deltas: Vec<ClosureDelta>) -> ClosureState {
    Closure::restore_from_deltas(deltas).unwrap().state()
}

/// `delta` with `edit` applied to its serialised form.
fn edited(delta: &ClosureDelta, edit: impl FnOnce(&mut Value)) -> ClosureDelta {
    let mut json = serde_json::to_value(delta).unwrap();
    edit(&mut json);
    serde_json::from_value(json).unwrap()
}

fn refused_at(deltas: Vec<ClosureDelta>) -> (usize, ClosureDeltaError) {
    let err = Closure::restore_from_deltas(deltas).unwrap_err();
    (err.position().expect("a position is named"), err)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn restoring_any_prefix_of_deltas_gives_the_live_machine(
        policy in policy(),
        agent in scripted_agent(),
    ) {
        let steps = run(policy, agent);
        for k in 0..steps.len() {
            let restored = Closure::restore_from_deltas(deltas(&steps[..=k])).unwrap();
            let live = &steps[k].0;
            prop_assert_eq!(&restored.state(), live);
            prop_assert_eq!(restored.history(), deltas(&steps[..=k]));
            // The whole-state form replays to the same machine.
            let from_state = Closure::restore(live.clone()).unwrap();
            prop_assert_eq!(from_state.audit().head(), restored.audit().head());
        }
        let (ClosureState::Done(live), Ok(Closure::Done(restored))) =
            (&steps[steps.len() - 1].0, Closure::restore_from_deltas(deltas(&steps)))
        else {
            panic!("the run ends done")
        };
        prop_assert_eq!(restored.digest(), live.digest());
        prop_assert_eq!(restored.audit().head(), live.audit().head());
    }

    #[test]
    fn a_store_cut_anywhere_restores_to_its_last_whole_step(
        agent in scripted_agent(),
        cut in any::<prop::sample::Index>(),
    ) {
        let steps = run(RecoveryPolicy::default(), agent);
        let mut store = Vec::new();
        let mut ends = Vec::new();
        for (_, delta) in &steps {
            store.extend(delta.encode().unwrap());
            ends.push(store.len());
        }
        let cut = cut.index(store.len() + 1);
        let (whole, len) = ClosureDelta::decode_log(&store[..cut]).unwrap();
        prop_assert_eq!(len, ends.iter().copied().rfind(|e| *e <= cut).unwrap_or(0));
        match whole.len() {
            0 => prop_assert_eq!(
                Closure::restore_from_deltas(whole).err(),
                Some(ClosureDeltaError::Empty)
            ),
            n => prop_assert_eq!(&restored_state(whole), &steps[n - 1].0),
        }
    }

    #[test]
    fn a_dropped_duplicated_or_reordered_delta_is_refused_naming_its_position(
        agent in scripted_agent(),
        at in any::<prop::sample::Index>(),
    ) {
        let all = deltas(&run(RecoveryPolicy::default(), agent));
        prop_assume!(all.len() >= 3);
        // Any delta but the start and the last (dropping the last is a shorter history).
        let p = 1 + at.index(all.len() - 2);
        let mut dropped = all.clone();
        dropped.remove(p);
        let (q, err) = refused_at(dropped);
        prop_assert!(q == p && matches!(err, ClosureDeltaError::BrokenLink { .. }), "{:?}", err);
        let mut duplicated = all.clone();
        duplicated.insert(p + 1, all[p].clone());
        let (q, err) = refused_at(duplicated);
        prop_assert!(q == p + 1 && matches!(err, ClosureDeltaError::BrokenLink { .. }), "{:?}", err);
        let mut swapped = all.clone();
        swapped.swap(p, p + 1);
        let (q, err) = refused_at(swapped);
        prop_assert!(q == p && matches!(err, ClosureDeltaError::BrokenLink { .. }), "{:?}", err);
        let mut restarted = all.clone();
        restarted.insert(p, all[0].clone());
        prop_assert_eq!(refused_at(restarted).0, p);
    }

    #[test]
    fn an_edited_delta_is_refused_naming_its_position(
        agent in scripted_agent(),
        at in any::<prop::sample::Index>(),
    ) {
        let all = deltas(&run(RecoveryPolicy::default(), agent));
        prop_assume!(all.len() >= 2);
        let p = 1 + at.index(all.len() - 1);
        // A head that is not this delta's: the previous delta's.
        let other = serde_json::to_value(&all[p - 1]).unwrap()["head"].clone();
        let mut forged = all.clone();
        forged[p] = edited(&all[p], |d| d["head"] = other);
        let (q, err) = refused_at(forged);
        prop_assert!(q == p && matches!(err, ClosureDeltaError::Edited { .. }), "{:?}", err);
    }
}

#[test]
fn the_live_history_is_the_deltas_of_its_steps_and_round_trips_through_checkpoints() {
    let steps = three_task_run();
    let all = deltas(&steps);
    assert!(all[0].is_start());
    assert!(all[1..].iter().all(|d| !d.is_start()));
    let restored = Closure::restore_from_deltas(all.clone()).unwrap();
    assert_eq!(restored.history(), all);
    for delta in &all {
        let bytes = delta.encode().unwrap();
        assert_eq!(&checkpoint::decode::<ClosureDelta>(&bytes).unwrap(), delta);
        assert!(
            checkpoint::decode::<ClosureState>(&bytes).is_err(),
            "kinds differ"
        );
    }
    let Closure::Done(record) = restored else {
        panic!("done")
    };
    assert_eq!(record.outcome().resolved_depth(), Some(2));
    // One append per step: no delta grows with the history before it.
    let sizes: Vec<usize> = all.iter().map(|d| d.encode().unwrap().len()).collect();
    assert!(sizes.iter().all(|s| *s < 1024), "{sizes:?}");
}

#[test]
fn an_edited_output_or_verdict_is_refused_naming_its_delta() {
    let all = deltas(&three_task_run());
    let executed = all
        .iter()
        .position(|d| d.events()[0].kind() == "executed")
        .unwrap();
    let mut forged = all.clone();
    forged[executed] = edited(&all[executed], |d| {
        assert_eq!(d["payload"]["output"]["text"], "wrote a");
        d["payload"]["output"]["text"] = "wrote something else".into();
    });
    let err = Closure::restore_from_deltas(forged).unwrap_err();
    assert!(
        matches!(&err, ClosureDeltaError::OutputMismatch { position, task } if *position == executed && task.as_str() == "x"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&format!("delta {executed}")),
        "{err}"
    );

    // A verdict edited in its event: its digest no longer matches.
    let post = executed + 1;
    let mut forged = all.clone();
    forged[post] = edited(&all[post], |d| {
        let event = &mut d["events"][0]["post_validated"]["verdict"];
        // A clean verdict: no results.
        *event = serde_json::json!([]);
    });
    assert!(matches!(
        refused_at(forged),
        (q, ClosureDeltaError::Edited { .. } | ClosureDeltaError::Diverged { .. }) if q == post
    ));

    // A consequence that the step does not produce (the fix spawned at another depth).
    let mut forged = all.clone();
    forged[post] = edited(&all[post], |d| {
        d["events"][1]["subtask_spawned"]["depth"] = 2.into();
    });
    let (q, err) = refused_at(forged);
    assert_eq!(q, post);
    assert!(
        matches!(
            err,
            ClosureDeltaError::Diverged {
                found: "subtask_spawned",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn an_edited_policy_in_the_start_is_refused() {
    let mut all = deltas(&three_task_run());
    all[0] = edited(&all[0], |d| {
        d["payload"]["start"]["policy"]["max_recovery_depth"] = 100.into();
    });
    let err = Closure::restore_from_deltas(all).unwrap_err();
    assert!(
        matches!(err, ClosureDeltaError::Tampered { position: 0, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("policy"), "{err}");
}

#[test]
fn a_history_without_its_start_is_refused() {
    let all = deltas(&three_task_run());
    assert_eq!(
        Closure::restore_from_deltas(all[1..].to_vec()).err(),
        Some(ClosureDeltaError::NotStart { position: 0 })
    );
    assert_eq!(
        Closure::restore_from_deltas(Vec::new()).err(),
        Some(ClosureDeltaError::Empty)
    );
}

#[test]
fn a_damaged_delta_inside_a_store_is_named_with_its_byte_offset() {
    let all = deltas(&three_task_run());
    let first = all[0].encode().unwrap();
    let mut store = first.clone();
    let mut second = all[1].encode().unwrap();
    let last = second.len() - 1;
    second[last] ^= 1;
    store.extend(second);
    store.extend(all[2].encode().unwrap());
    let err = ClosureDelta::decode_log(&store).unwrap_err();
    assert!(
        matches!(&err, ClosureDeltaError::Decode { position: 1, offset, .. } if *offset == first.len()),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains(&format!("delta 1 at byte {}", first.len())),
        "{err}"
    );
}

#[test]
fn a_shared_budget_is_drawn_from_after_restoring() {
    let budget = kleene::closure::FixBudget::new(5);
    let all = deltas(&three_task_run());
    // The closure had spawned one fix when it was persisted after its fifth step.
    let restored = Closure::restore_from_deltas_with_budget(all[..6].to_vec(), &budget).unwrap();
    assert_eq!(restored.fix_attempts(), 1);
    let mut agent = ScriptedAgent::new().post_verdicts([failing("test c ... FAILED")]);
    let mut closure = restored;
    while !matches!(closure, Closure::Done(_)) {
        closure = closure.step(&mut agent);
    }
    assert_eq!(budget.used(), 1);
}

/// The committed `ClosureState` checkpoints (format versions 1 and 2) still restore, now by
/// folding their history, and move into the incremental form unchanged.
#[test]
fn persisted_closure_states_still_restore_and_move_to_deltas() {
    for bytes in [
        &include_bytes!("../fixtures/closure/state_v1.ckpt")[..],
        &include_bytes!("../fixtures/closure/state_v2.ckpt")[..],
    ] {
        let state = checkpoint::decode::<ClosureState>(bytes).unwrap();
        let restored = Closure::restore(state.clone()).unwrap();
        assert!(matches!(restored, Closure::PostValidate(_)), "{restored:?}");
        assert_eq!(restored.state(), state);
        let folded = Closure::restore_from_deltas(restored.history()).unwrap();
        assert_eq!(folded.audit().head(), restored.audit().head());
        assert_eq!(folded.state(), restored.state());
    }
}

/// Restore used to check a state's counters and phase but not its tasks against its audit
/// log, so a fix subtask's rendered spec (what the agent is asked to do) could be edited
/// in a persisted state and the closure resumed with it.
#[test]
fn a_state_with_an_edited_fix_spec_is_refused() {
    let steps = three_task_run();
    // Waiting for x_fix_1's post-validation.
    let (state, _) = steps
        .iter()
        .filter(|(s, _)| matches!(s, ClosureState::PostValidate(_)))
        .nth(1)
        .unwrap()
        .clone();
    let mut json = serde_json::to_value(&state).unwrap();
    let intent = &mut json["post_validate"]["current"]["task"]["spec"]["intent"];
    assert!(intent.as_str().unwrap().contains("test a ... FAILED"));
    *intent = "delete the test suite".into();
    let forged: ClosureState = serde_json::from_value(json).unwrap();
    let err = Closure::restore(forged).unwrap_err();
    assert!(
        matches!(err, ClosureStateError::Inconsistent { .. }),
        "{err:?}"
    );
    assert_eq!(err.task().map(TaskId::as_str), Some("x_fix_1"));
    assert!(err.to_string().contains("replays to"), "{err}");
}
