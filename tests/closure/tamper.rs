//! A persisted `ClosureState` is re-checked on restore: an edited policy, fix budget or
//! execution output is refused naming the field.
//!
//! Guards the bug where raising `budget_max`, lowering `budget_used`, raising
//! `max_recovery_depth` or editing an output's text restored without complaint.

use kleene::testing::closure::ScriptedAgent;
use kleene::{
    Task, checkpoint,
    closure::Closure,
    closure::{
        ClosureState, RecoveryPolicy, Severity, Spec, ValidatorResult, Verdict,
        machine::ClosureStateError, machine::StateField, step::Session,
    },
    id::{TaskId, ValidatorId},
};
use serde_json::Value;

/// A closure that spawned one fix and is waiting for the fix's post-execute verdict.
fn mid_run() -> ClosureState {
    let failing = Verdict::new([ValidatorResult::new(
        ValidatorId::new("tests").unwrap(),
        Severity::Blocker,
        true,
        "test tests::login ... FAILED",
    )]);
    let mut agent = ScriptedAgent::new().post_verdicts([failing, Verdict::clean()]);
    let task = Task::new(TaskId::new("x").unwrap(), Spec::new("add /login"));
    let session = Session::new("build", "demo").unwrap();
    let mut closure = Closure::start(task, session, RecoveryPolicy::default());
    while !matches!(&closure, Closure::PostValidate(due) if due.task().depth() == 1) {
        closure = closure.step(&mut agent);
    }
    closure.state()
}

/// `state` with `edit` applied to its persisted JSON form.
fn edited(state: &ClosureState, edit: impl FnOnce(&mut Value)) -> ClosureState {
    let mut json = serde_json::to_value(state).unwrap();
    edit(&mut json["post_validate"]);
    serde_json::from_value(json).unwrap()
}

fn refused_field(state: ClosureState) -> StateField {
    match Closure::restore(state) {
        Err(ClosureStateError::Tampered { field, .. }) => field,
        other => panic!("restored: {other:?}"),
    }
}

#[test]
fn an_untouched_state_restores_through_json_and_checkpoints() {
    let state = mid_run();
    assert_eq!(edited(&state, |_| {}), state);
    let bytes = checkpoint::encode(&state).unwrap();
    let decoded = checkpoint::decode::<ClosureState>(&bytes).unwrap();
    assert!(matches!(
        Closure::restore(decoded),
        Ok(Closure::PostValidate(_))
    ));
}

#[test]
fn a_raised_budget_max_is_refused() {
    let state = edited(&mid_run(), |p| p["budget_max"] = 1000.into());
    assert_eq!(refused_field(state), StateField::BudgetMax);
}

#[test]
fn a_lowered_budget_used_is_refused() {
    let state = mid_run();
    let state = edited(&state, |p| {
        assert_eq!(p["budget_used"], 1);
        p["budget_used"] = 0.into();
    });
    assert_eq!(refused_field(state), StateField::BudgetUsed);
}

#[test]
fn a_raised_max_recovery_depth_is_refused() {
    let state = edited(&mid_run(), |p| {
        p["policy"]["max_recovery_depth"] = 100.into();
    });
    assert_eq!(refused_field(state), StateField::Policy);
}

#[test]
fn an_edited_execution_output_is_refused_naming_its_iteration() {
    let state = edited(&mid_run(), |p| {
        let output = &mut p["current"]["steps"][0]["output"]["text"];
        assert!(output.is_string());
        *output = "wrote something else".into();
    });
    let err = Closure::restore(state).unwrap_err();
    assert_eq!(
        err,
        ClosureStateError::Tampered {
            task: TaskId::new("x_fix_1").unwrap(),
            field: StateField::Output {
                task: TaskId::new("x_fix_1").unwrap(),
                iteration: 1
            }
        }
    );
    let message = err.to_string();
    assert!(
        message.contains("execution output of task x_fix_1 iteration 1"),
        "{message}"
    );
    // An output of an earlier task of the tree is checked too.
    let state = edited(&mid_run(), |p| {
        p["done"][0]["steps"][0]["output"]["text"] = "forged".into();
    });
    assert!(matches!(
        refused_field(state),
        StateField::Output { task, iteration: 1 } if task.as_str() == "x"
    ));
}

/// Today's sealed state (format version 2) is what this build writes and restores. Run with
/// `KLEENE_WRITE_FIXTURES=1` to (re)write it after a deliberate format change.
#[test]
fn the_version_2_state_fixture_is_what_this_build_writes() {
    let bytes = checkpoint::encode(&mid_run()).unwrap();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/closure/state_v2.ckpt");
    if std::env::var_os("KLEENE_WRITE_FIXTURES").is_some() {
        std::fs::write(&path, &bytes).unwrap();
    }
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    let state = checkpoint::decode::<ClosureState>(&bytes).unwrap();
    assert!(matches!(
        Closure::restore(state),
        Ok(Closure::PostValidate(_))
    ));
}
