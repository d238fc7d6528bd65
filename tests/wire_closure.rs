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
    Closure, Task, checkpoint,
    checkpoint::CheckpointError,
    closure::{
        ClosureDelta, ClosureRecord, ClosureState, ExecutionOutput, GovernanceDecision, Next,
        RecoverOn, RecoveryPolicy, Session, Severity, Spec, ValidatorResult, Verdict,
        VerdictNormalizer,
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
