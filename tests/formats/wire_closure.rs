//! The pinned bytes of the task and closure payloads (`TASK`, `CLSR`, `CLST`, `CLDT`) and of
//! a closure record's JSON.
//!
//! Each fixture under `tests/fixtures/payloads/` was written by the code of the time and is
//! never regenerated: a test here decodes it, compares it with the value built the same way
//! today, re-encodes that value and requires the very same bytes. A change to a domain type
//! that moved a payload's encoding fails here instead of silently changing the format.
//! (`KLEENE_WRITE_FIXTURES=1` writes a fixture that is missing; it never overwrites one.)

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use kleene::{
    Task, checkpoint,
    checkpoint::CheckpointError,
    closure::Closure,
    closure::{
        ClosureRecord, ClosureState, ExecutionOutput, GovernanceDecision, RecoveryPolicy, Severity,
        Spec, ValidatorResult, Verdict, machine::ClosureDelta, step::Next, step::RecoverOn,
        step::Session, verdict::VerdictNormalizer,
    },
    id::{TaskId, ValidatorId},
};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/payloads")
}

/// The fixture `name`, written from `bytes` first when asked to and it does not exist yet.
fn pinned(name: &str, bytes: &[u8]) -> Vec<u8> {
    let path = dir().join(name);
    if std::env::var_os("KLEENE_WRITE_FIXTURES").is_some() && !path.exists() {
        std::fs::create_dir_all(dir()).unwrap();
        std::fs::write(&path, bytes).unwrap();
    }
    fixture(name)
}

fn fixture(name: &str) -> Vec<u8> {
    let path = dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn verdict(validator: &str, severity: Severity, overridable: bool, text: &str) -> Verdict {
    Verdict::new([ValidatorResult::new(
        ValidatorId::new(validator).unwrap(),
        severity,
        overridable,
        text,
    )])
}

/// The answers a scripted closure is fed; anything not scripted is a pass.
#[derive(Default, Clone)]
struct Script {
    governance: VecDeque<GovernanceDecision>,
    pre: VecDeque<Verdict>,
    post: VecDeque<Verdict>,
    next: VecDeque<Next>,
    /// The agent fails instead of answering the `n`th execution (from 0).
    fail_execution: Option<usize>,
}

/// Runs `root` to its end under `policy`, keeping the state after every step.
fn run(root: Task, policy: RecoveryPolicy, mut script: Script) -> (Closure, Vec<ClosureState>) {
    let session = Session::new("build", "login-service").unwrap();
    let mut closure = Closure::start(root, session, policy);
    let mut states = vec![closure.state()];
    let mut executions = 0;
    loop {
        closure = match closure {
            Closure::Governance(due) => due.feed(
                script
                    .governance
                    .pop_front()
                    .unwrap_or(GovernanceDecision::Approve),
            ),
            Closure::PreValidate(due) => due.feed(script.pre.pop_front().unwrap_or_default()),
            Closure::Execute(due) => {
                executions += 1;
                if script.fail_execution == Some(executions - 1) {
                    due.fail("the sandbox ran out of disk space")
                } else {
                    let text = format!("wrote src/login.rs (pass {executions}) — done ✓");
                    due.feed(ExecutionOutput::new(text))
                }
            }
            Closure::PostValidate(due) => due.feed(script.post.pop_front().unwrap_or_default()),
            Closure::MoveNext(due) => due.feed(script.next.pop_front().unwrap_or(Next::Complete)),
            done @ Closure::Done(_) => return (done, states),
        };
        states.push(closure.state());
    }
}

fn root() -> Task {
    Task::new(
        TaskId::new("task_X").unwrap(),
        Spec::new("add a /login route")
            .with_criterion("GET /login is 200")
            .with_criterion("POST /login sets a session cookie"),
    )
}

fn failing_tests() -> Verdict {
    verdict(
        "tests",
        Severity::Blocker,
        true,
        "test login::get ... FAILED\nassertion `left == right` failed\n  left: 404\n right: 200",
    )
}

/// The scenarios, each a closure that ends in its own way.
fn scenarios() -> Vec<(&'static str, Closure, Vec<ClosureState>)> {
    let warn_policy = RecoveryPolicy::builder()
        .max_recovery_depth(2)
        .max_total_fix_attempts(5)
        .max_inner_iterations(3)
        .recover_on(RecoverOn::BlockersAndWarnings)
        .normalizer(VerdictNormalizer::exact())
        .build()
        .unwrap();
    let lint_warning = verdict("lint", Severity::Warning, true, "unused import `std::io`");
    let two_failures = Verdict::new([
        ValidatorResult::new(
            ValidatorId::new("tests").unwrap(),
            Severity::Blocker,
            true,
            "test login::post ... FAILED",
        ),
        ValidatorResult::new(ValidatorId::new("types").unwrap(), Severity::Info, true, ""),
    ]);
    let scripted = |post: Vec<Verdict>| Script {
        post: post.into(),
        ..Script::default()
    };
    let mut out = Vec::new();
    let mut add = |name, (closure, states)| out.push((name, closure, states));
    // Two fixes: the root and the first fix fail (differently), the second passes, after
    // one iteration that continues.
    add(
        "resolved",
        run(
            root(),
            RecoveryPolicy::default(),
            Script {
                next: [Next::Continue].into(),
                post: [failing_tests(), Verdict::clean(), two_failures.clone()].into(),
                ..Script::default()
            },
        ),
    );
    add(
        "stalled",
        run(
            root(),
            RecoveryPolicy::default(),
            scripted(vec![failing_tests(), failing_tests()]),
        ),
    );
    add(
        "exhausted_depth",
        run(
            root(),
            warn_policy.clone(),
            scripted(vec![
                lint_warning.clone(),
                failing_tests(),
                two_failures.clone(),
            ]),
        ),
    );
    let one_fix = RecoveryPolicy::builder()
        .max_total_fix_attempts(1)
        .build()
        .unwrap();
    add(
        "exhausted_budget",
        run(
            root(),
            one_fix,
            scripted(vec![failing_tests(), two_failures.clone()]),
        ),
    );
    add(
        "denied",
        run(
            root(),
            RecoveryPolicy::default(),
            Script {
                governance: [
                    GovernanceDecision::Approve,
                    GovernanceDecision::Deny {
                        reason: "the fix touches /etc".into(),
                    },
                ]
                .into(),
                post: [failing_tests()].into(),
                ..Script::default()
            },
        ),
    );
    add(
        "pre_rejected",
        run(
            root(),
            RecoveryPolicy::default(),
            Script {
                pre: [verdict("plan", Severity::Blocker, true, "no such module")].into(),
                ..Script::default()
            },
        ),
    );
    add(
        "non_overridable",
        run(
            root(),
            RecoveryPolicy::default(),
            scripted(vec![verdict(
                "secrets",
                Severity::Blocker,
                false,
                "a key in git",
            )]),
        ),
    );
    add(
        "warning_withheld",
        run(
            root(),
            RecoveryPolicy::default(),
            scripted(vec![lint_warning]),
        ),
    );
    add(
        "iteration_cap",
        run(
            root(),
            warn_policy,
            Script {
                next: [Next::Continue, Next::Continue, Next::Continue].into(),
                ..Script::default()
            },
        ),
    );
    add(
        "agent_failed",
        run(
            root(),
            RecoveryPolicy::default(),
            Script {
                post: [failing_tests()].into(),
                fail_execution: Some(1),
                ..Script::default()
            },
        ),
    );
    out
}

fn record(closure: &Closure) -> &ClosureRecord {
    match closure {
        Closure::Done(record) => record,
        _ => panic!("the scenario did not end"),
    }
}

#[test]
fn the_scenarios_end_as_named() {
    let ends: Vec<String> = scenarios()
        .iter()
        .map(|(_, c, _)| {
            let outcome = record(c).outcome();
            match outcome.halt_reason() {
                Some(reason) => reason.halt_type().to_owned(),
                None if outcome.is_resolved() => "resolved".to_owned(),
                None => "failed".to_owned(),
            }
        })
        .collect();
    assert_eq!(
        ends,
        [
            "resolved",
            "recovery_stalled",
            "recovery_exhausted",
            "recovery_exhausted",
            "governance_denied",
            "pre_execute_rejected",
            "non_overridable_blocker",
            "warning_withheld",
            "iteration_cap",
            "failed",
        ]
    );
}

#[test]
fn tasks_decode_to_what_they_were_and_re_encode_to_the_same_bytes() {
    let (_, resolved, _) = scenarios().swap_remove(0);
    // The fix at depth 2 carries its root and the failures of both attempts before it.
    let fix = record(&resolved).attempts()[2].task.clone();
    assert_eq!(fix.prior_failures().len(), 2);
    assert!(fix.has_explicit_root());
    for (name, task) in [("task_root.ckpt", root()), ("task_fix.ckpt", fix)] {
        let bytes = pinned(name, &checkpoint::encode(&task).unwrap());
        assert_eq!(checkpoint::decode::<Task>(&bytes).unwrap(), task, "{name}");
        assert_eq!(checkpoint::encode(&task).unwrap(), bytes, "{name}");
    }
}

#[test]
fn records_decode_to_what_they_were_and_re_encode_to_the_same_bytes() {
    for (name, closure, _) in scenarios() {
        let record = record(&closure);
        let file = format!("record_{name}.ckpt");
        let bytes = pinned(&file, &checkpoint::encode(record).unwrap());
        assert_eq!(
            &checkpoint::decode::<ClosureRecord>(&bytes).unwrap(),
            record,
            "{file}"
        );
        assert_eq!(checkpoint::encode(record).unwrap(), bytes, "{file}");
    }
}

#[test]
fn record_json_reads_back_and_is_written_byte_for_byte() {
    for (name, closure, _) in scenarios() {
        let record = record(&closure);
        let file = format!("record_{name}.json");
        let text = pinned(&file, record.to_json().as_bytes());
        let text = String::from_utf8(text).unwrap();
        assert_eq!(&ClosureRecord::from_json(&text).unwrap(), record, "{file}");
        assert_eq!(record.to_json(), text, "{file}");
    }
}

#[test]
fn states_decode_to_what_they_were_and_re_encode_to_the_same_bytes() {
    let (_, _, states) = scenarios().swap_remove(0);
    // Mid-closure: the first fix's second iteration waiting for each phase in turn, the
    // second fix waiting to move on, then done.
    let picks = [
        ("governance", 9),
        ("pre_validate", 10),
        ("execute", 11),
        ("post_validate", 12),
        ("move_next", 17),
        ("done", states.len() - 1),
    ];
    for (name, at) in picks {
        let state = &states[at];
        let file = format!("state_{name}.ckpt");
        let bytes = pinned(&file, &checkpoint::encode(state).unwrap());
        let back = checkpoint::decode::<ClosureState>(&bytes).unwrap();
        assert_eq!(&back, state, "{file}");
        assert_eq!(checkpoint::encode(state).unwrap(), bytes, "{file}");
        assert!(Closure::restore(back).is_ok(), "{file}");
    }
}

#[test]
fn deltas_decode_to_what_they_were_and_re_encode_to_the_same_bytes() {
    for (name, closure, _) in scenarios() {
        let history = closure.history();
        let log: Vec<u8> = history.iter().flat_map(|d| d.encode().unwrap()).collect();
        let file = format!("deltas_{name}.ckpt");
        let bytes = pinned(&file, &log);
        let (back, len) = ClosureDelta::decode_log(&bytes).unwrap();
        assert_eq!(len, bytes.len(), "{file}");
        assert_eq!(back, history, "{file}");
        assert_eq!(log, bytes, "{file}");
        assert!(Closure::restore_from_deltas(back).is_ok(), "{file}");
    }
}

/// A payload of a later version than this build writes is refused by number.
#[test]
fn a_later_version_of_each_payload_is_refused_by_number() {
    let task = fixture("task_root.ckpt");
    let record = fixture("record_resolved.ckpt");
    let state = fixture("state_execute.ckpt");
    let delta = fixture("deltas_resolved.ckpt");
    fn later(bytes: &[u8], version: u16) -> Vec<u8> {
        // The envelope's version field, then its checksum recomputed by re-sealing.
        let mut header = bytes[..19].to_vec();
        header[4..6].copy_from_slice(&version.to_le_bytes());
        let payload = &bytes[51..];
        let sum = blake3::Hasher::new_derive_key("kleene checkpoint envelope v1")
            .update(&header)
            .update(payload)
            .finalize();
        [&header[..], sum.as_bytes(), payload].concat()
    }
    let one_delta = &delta[..51 + u64::from_le_bytes(delta[11..19].try_into().unwrap()) as usize];
    let refused = [
        checkpoint::decode::<Task>(&later(&task, 3)).unwrap_err(),
        checkpoint::decode::<ClosureRecord>(&later(&record, 2)).unwrap_err(),
        checkpoint::decode::<ClosureState>(&later(&state, 3)).unwrap_err(),
        checkpoint::decode::<ClosureDelta>(&later(one_delta, 2)).unwrap_err(),
    ];
    let found: Vec<(String, u16)> = refused
        .into_iter()
        .map(|e| match e {
            CheckpointError::UnsupportedVersion { kind, found, .. } => (kind, found),
            other => panic!("{other}"),
        })
        .collect();
    assert_eq!(
        found,
        [
            ("TASK".to_owned(), 3),
            ("CLSR".to_owned(), 2),
            ("CLST".to_owned(), 3),
            ("CLDT".to_owned(), 2)
        ]
    );
}

/// New reader, old data: the committed payloads of earlier versions (a version-1 task, a
/// version-1 closure state, written before their wire types) still load, and re-encode at
/// the current version to a value that reads back the same.
#[test]
fn earlier_versions_still_load_through_the_wire_types() {
    let old = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let task_v1 = std::fs::read(old.join("task_v1.ckpt")).unwrap();
    let task = checkpoint::decode::<Task>(&task_v1).unwrap();
    assert_eq!((task.depth(), task.has_explicit_root()), (1, false));
    let again = checkpoint::encode(&task).unwrap();
    assert_eq!(again[4..6], 2u16.to_le_bytes());
    assert_eq!(checkpoint::decode::<Task>(&again).unwrap(), task);

    let state_v1 = std::fs::read(old.join("closure/state_v1.ckpt")).unwrap();
    let state = checkpoint::decode::<ClosureState>(&state_v1).unwrap();
    let again = checkpoint::encode(&state).unwrap();
    assert_eq!(again[4..6], 2u16.to_le_bytes());
    assert_eq!(checkpoint::decode::<ClosureState>(&again).unwrap(), state);
    assert!(Closure::restore(state).is_ok());
}

mod round_trip {
    use super::*;
    use kleene::testing::closure::{policy, scripted_agent};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Every state, delta and record of any scripted closure reads back as itself from
        /// its checkpoint, and the record from its JSON too, re-encoding to the same bytes.
        #[test]
        fn every_payload_of_any_closure_reads_back_as_itself(
            policy in policy(),
            mut agent in scripted_agent(),
        ) {
            let task = root();
            let mut closure = Closure::start(task.clone(), Session::new("build", "p").unwrap(), policy);
            let bytes = checkpoint::encode(&task).unwrap();
            prop_assert_eq!(checkpoint::decode::<Task>(&bytes).unwrap(), task);
            loop {
                let state = closure.state();
                let bytes = checkpoint::encode(&state).unwrap();
                let back = checkpoint::decode::<ClosureState>(&bytes).unwrap();
                prop_assert_eq!(checkpoint::encode(&back).unwrap(), bytes);
                prop_assert_eq!(back, state);
                let delta = closure.step_delta();
                let bytes = delta.encode().unwrap();
                let back = checkpoint::decode::<ClosureDelta>(&bytes).unwrap();
                prop_assert_eq!(back.encode().unwrap(), bytes);
                prop_assert_eq!(back, delta);
                if let Closure::Done(record) = &closure {
                    let bytes = checkpoint::encode(record.as_ref()).unwrap();
                    let back = checkpoint::decode::<ClosureRecord>(&bytes).unwrap();
                    prop_assert_eq!(checkpoint::encode(&back).unwrap(), bytes);
                    prop_assert_eq!(&back, record.as_ref());
                    let json = record.to_json();
                    let back = ClosureRecord::from_json(&json).unwrap();
                    prop_assert_eq!(back.to_json(), json);
                    prop_assert_eq!(back.digest(), record.digest());
                    break;
                }
                closure = closure.step(&mut agent);
            }
        }
    }
}
