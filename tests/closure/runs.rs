//! Closure: R13/R21 scenarios on real failing test runs, stall detection, bounds, the
//! machine/driver agreement, and the audit chain, over arbitrary scripted agents.

use kleene::testing::closure::{ScriptedAgent, policy, scripted_agent};
use kleene::{
    Task, checkpoint,
    closure::Closure,
    closure::audit::{AuditEvent, AuditLog},
    closure::{
        ClosureOutcome, ClosureRecord, ClosureState, FixBudget, GovernanceDecision, RecoveryPolicy,
        Severity, Spec, ValidatorResult, Verdict, record::ClosureFailure, run_to_closure,
        run_to_closure_with, step::ExhaustedBound, step::HaltReason, step::RecoverOn,
        step::Session, task::FailureEntry, verdict::OutputTail, verdict::TailLimits,
        verdict::VerdictNormalizer,
    },
    id::{TaskId, ValidatorId},
};
use proptest::prelude::*;

fn session() -> Session {
    Session::new("build", "demo").unwrap()
}

fn root(intent: &str) -> Task {
    Task::new(
        TaskId::new("x").unwrap(),
        Spec::new(intent).with_criterion("the whole test suite passes"),
    )
}

/// A real test run as the quality validator reports it: the bounded stdout/stderr tail
/// (R21 §3), not a one-line summary.
struct Run {
    stdout: &'static str,
    stderr: &'static str,
}

macro_rules! run {
    ($name:literal) => {
        Run {
            stdout: include_str!(concat!("../fixtures/closure/", $name, ".stdout")),
            stderr: include_str!(concat!("../fixtures/closure/", $name, ".stderr")),
        }
    };
}

impl Run {
    fn verdict(&self, command: &str) -> Verdict {
        let tail = OutputTail::capture(
            self.stdout.as_bytes(),
            self.stderr.as_bytes(),
            TailLimits::default(),
        );
        Verdict::new([
            ValidatorResult::new(
                ValidatorId::new("tests").unwrap(),
                Severity::Blocker,
                true,
                format!(
                    "`{command}` failed\n--- stdout (tail) ---\n{}\n--- stderr (tail) ---\n{}",
                    tail.stdout(),
                    tail.stderr()
                ),
            ),
            ValidatorResult::pass(ValidatorId::new("lint").unwrap()),
        ])
    }
}

struct Case {
    intent: &'static str,
    command: &'static str,
    run1: Run,
    run2: Run,
    partial: Run,
    /// (failing test name, assertion, file) that must reach the fix task.
    evidence: [&'static str; 3],
}

fn cases() -> [Case; 3] {
    [
        Case {
            intent: "Log users in and redirect them to their dashboard with a session cookie.",
            command: "python -m pytest",
            run1: run!("redirect_run1"),
            run2: run!("redirect_run2"),
            partial: run!("redirect_partial"),
            evidence: [
                "test_login_redirects_to_dashboard",
                "TypeError: 'mappingproxy' object does not support item assignment",
                "app/responses.py:15",
            ],
        },
        Case {
            intent: "Handle webhooks: log the payload size and parse the event name.",
            command: "cargo test",
            run1: run!("body_run1"),
            run2: run!("body_run2"),
            partial: run!("body_partial"),
            evidence: [
                "tests::parses_the_event_name",
                "assertion `left == right` failed",
                "src/lib.rs:40:9",
            ],
        },
        Case {
            intent: "Guard /admin: admins in, members forbidden, guests to the login page.",
            command: "cargo test",
            run1: run!("guard_run1"),
            run2: run!("guard_run2"),
            partial: run!("guard_partial"),
            evidence: [
                "tests::admin_reaches_the_dashboard",
                "assertion `left == right` failed",
                "src/lib.rs:32:9",
            ],
        },
    ]
}

#[test]
fn r21_cases_reach_the_fix_task_with_their_evidence_and_a_linear_chain() {
    for case in cases() {
        // Fails, partially fixed, regresses (same failures as the first run, but not as the
        // previous attempt's), then passes at depth 3.
        let mut agent = ScriptedAgent::new().post_verdicts([
            case.run1.verdict(case.command),
            case.partial.verdict(case.command),
            case.run2.verdict(case.command),
        ]);
        let record = run_to_closure(
            root(case.intent),
            session(),
            &mut agent,
            &RecoveryPolicy::default(),
        );
        assert_eq!(
            record.outcome().resolved_depth(),
            Some(3),
            "{}",
            case.intent
        );
        let ids: Vec<&str> = record
            .attempts()
            .iter()
            .map(|a| a.task.id().as_str())
            .collect();
        assert_eq!(ids, ["x", "x_fix_1", "x_fix_2", "x_fix_3"]);
        for attempt in &record.attempts()[1..] {
            let spec = &attempt.task.spec().intent;
            for needle in case.evidence {
                assert!(spec.contains(needle), "{needle:?} missing from {spec}");
            }
            assert_eq!(spec.matches(case.intent).count(), 1);
            assert_eq!(
                attempt.task.spec().acceptance_criteria,
                ["the whole test suite passes"]
            );
        }
        let depth3 = &record.attempts()[3].task;
        assert_eq!(depth3.spec().intent.matches(case.intent).count(), 1);
        assert_eq!(
            depth3.parent_task_ref().map(TaskId::as_str),
            Some("x_fix_2")
        );
        let attempts: Vec<u32> = depth3.prior_failures().iter().map(|f| f.attempt).collect();
        assert_eq!(attempts, [0, 1, 2], "one failing validator per attempt");
        // Each failure is shown with its attempt, validator and severity, in order.
        for n in 0..3 {
            assert!(
                depth3
                    .spec()
                    .intent
                    .contains(&format!("attempt {n} · validator tests · blocker"))
            );
        }
        // The agent executed exactly these specs: governance and execution saw each fix.
        let executed: Vec<&str> = agent
            .executed_tasks()
            .iter()
            .map(|t| t.id().as_str())
            .collect();
        assert_eq!(executed, ids);
        assert_eq!(record.audit().verify(), Ok(()));
    }
}

#[test]
fn two_real_runs_of_the_same_failures_stall_and_a_partial_fix_does_not() {
    for case in cases() {
        let (v1, v2) = (
            case.run1.verdict(case.command),
            case.run2.verdict(case.command),
        );
        assert_ne!(v1, v2, "real runs never print the same bytes");

        let mut agent = ScriptedAgent::new().post_verdicts([v1.clone(), v2.clone()]);
        let record = run_to_closure(
            root(case.intent),
            session(),
            &mut agent,
            &RecoveryPolicy::default(),
        );
        assert!(record.outcome().is_stalled(), "{:?}", record.outcome());
        assert_eq!(record.outcome().task_ref().as_str(), "x_fix_1");
        assert_eq!(record.fix_attempts(), 1, "stalled before spawning x_fix_2");
        assert!(
            record
                .audit()
                .events()
                .any(|e| e.kind() == "recovery_stalled")
        );

        // An exact comparison never stalls on the same two runs.
        let exact = RecoveryPolicy::builder()
            .normalizer(VerdictNormalizer::exact())
            .build()
            .unwrap();
        let mut agent = ScriptedAgent::new().post_verdicts([v1.clone(), v2]);
        let record = run_to_closure(root(case.intent), session(), &mut agent, &exact);
        assert_eq!(record.outcome().resolved_depth(), Some(2));

        // One failure fewer is progress, not a stall.
        let partial = case.partial.verdict(case.command);
        let mut agent = ScriptedAgent::new().post_verdicts([v1, partial]);
        let record = run_to_closure(
            root(case.intent),
            session(),
            &mut agent,
            &RecoveryPolicy::default(),
        );
        assert_eq!(record.outcome().resolved_depth(), Some(2));
    }
}

fn blocker(text: &str, overridable: bool) -> Verdict {
    Verdict::new([ValidatorResult::new(
        ValidatorId::new("tests").unwrap(),
        Severity::Blocker,
        overridable,
        text,
    )])
}

fn warning(text: &str) -> Verdict {
    Verdict::new([ValidatorResult::new(
        ValidatorId::new("lint").unwrap(),
        Severity::Warning,
        true,
        text,
    )])
}

#[test]
fn every_typed_halt() {
    let p = RecoveryPolicy::default();
    let run = |agent: ScriptedAgent, policy: &RecoveryPolicy| {
        let mut agent = agent;
        run_to_closure(root("intent"), session(), &mut agent, policy)
    };
    let halt = |r: &ClosureRecord| r.outcome().halt_reason().map(HaltReason::halt_type);

    let denied = run(
        ScriptedAgent::new()
            .post_verdicts([blocker("a", true)])
            .governance([
                GovernanceDecision::Approve,
                GovernanceDecision::Deny {
                    reason: "no".into(),
                },
            ]),
        &p,
    );
    assert_eq!(
        halt(&denied),
        Some("governance_denied"),
        "a fix is governed too"
    );
    assert_eq!(denied.outcome().task_ref().as_str(), "x_fix_1");

    let pre = run(ScriptedAgent::new().pre_verdicts([blocker("p", true)]), &p);
    assert_eq!(halt(&pre), Some("pre_execute_rejected"));

    let inv3 = run(
        ScriptedAgent::new().post_verdicts([blocker("b", false)]),
        &p,
    );
    assert_eq!(halt(&inv3), Some("non_overridable_blocker"));
    assert_eq!(inv3.fix_attempts(), 0);

    let withheld = run(ScriptedAgent::new().post_verdicts([warning("w")]), &p);
    assert_eq!(halt(&withheld), Some("warning_withheld"));
    let opted_in = RecoveryPolicy::builder()
        .recover_on(RecoverOn::BlockersAndWarnings)
        .build()
        .unwrap();
    let fixed = run(
        ScriptedAgent::new().post_verdicts([warning("w")]),
        &opted_in,
    );
    assert_eq!(fixed.outcome().resolved_depth(), Some(1));

    let never = RecoveryPolicy::builder()
        .max_recovery_depth(0)
        .max_total_fix_attempts(0)
        .build()
        .unwrap();
    let depth0 = run(
        ScriptedAgent::new().post_verdicts([blocker("a", true)]),
        &never,
    );
    assert_eq!(
        depth0.outcome().halt_reason(),
        Some(&HaltReason::RecoveryExhausted {
            bound: ExhaustedBound::Depth { max: 0 },
            verdict: blocker("a", true)
        })
    );

    let deep = run(
        ScriptedAgent::new().post_verdicts(["a", "b", "c", "d", "e"].map(|t| blocker(t, true))),
        &p,
    );
    assert!(deep.outcome().is_exhausted());
    assert_eq!(deep.outcome().task_ref().as_str(), "x_fix_3");
    assert_eq!(deep.fix_attempts(), 3);

    let capped = RecoveryPolicy::builder()
        .max_inner_iterations(2)
        .build()
        .unwrap();
    let cap = run(
        ScriptedAgent::new().nexts([
            kleene::closure::step::Next::Continue,
            kleene::closure::step::Next::Continue,
        ]),
        &capped,
    );
    assert_eq!(
        cap.outcome().halt_reason(),
        Some(&HaltReason::IterationCap { cap: 2 })
    );
}

#[test]
fn an_agent_error_is_a_typed_outcome() {
    let mut agent = ScriptedAgent::new()
        .outputs([kleene::testing::closure::Scripted::Fail("disk full".into())]);
    let record = run_to_closure(root("i"), session(), &mut agent, &RecoveryPolicy::default());
    match record.outcome() {
        ClosureOutcome::Failed {
            failure: ClosureFailure::Agent { phase, message },
            ..
        } => {
            assert_eq!(phase.as_str(), "execute");
            assert!(message.contains("disk full"));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(record.audit().verify(), Ok(()));
}

#[test]
fn a_fix_budget_is_shared_across_the_closures_of_a_batch() {
    let budget = FixBudget::new(3);
    let policy = RecoveryPolicy::default();
    let failing = || ["a", "b", "c"].map(|t| blocker(t, true));
    let mut first = ScriptedAgent::new().post_verdicts(failing());
    let mut sink = Vec::new();
    let a = run_to_closure_with(
        root("i"),
        session(),
        &mut first,
        &policy,
        &budget,
        &mut sink,
    );
    assert_eq!(a.outcome().resolved_depth(), Some(3));
    assert_eq!(
        sink,
        a.audit().entries(),
        "the sink saw every entry, in order"
    );
    let mut second = ScriptedAgent::new().post_verdicts(failing());
    let b = run_to_closure_with(root("i"), session(), &mut second, &policy, &budget, &mut ());
    assert_eq!(
        b.outcome().halt_reason().map(HaltReason::halt_type),
        Some("recovery_exhausted")
    );
    assert!(matches!(
        b.outcome().halt_reason(),
        Some(HaltReason::RecoveryExhausted {
            bound: ExhaustedBound::FixBudget { max: 3 },
            ..
        })
    ));
    assert_eq!(budget.remaining(), 0);
}

#[test]
fn records_and_states_round_trip_through_checkpoints_and_json() {
    let mut agent = ScriptedAgent::new().post_verdicts([blocker("a", true)]);
    let record = run_to_closure(root("i"), session(), &mut agent, &RecoveryPolicy::default());
    let bytes = checkpoint::encode(&record).unwrap();
    assert_eq!(checkpoint::decode::<ClosureRecord>(&bytes).unwrap(), record);
    let json = serde_json::to_string(&record).unwrap();
    assert_eq!(
        serde_json::from_str::<ClosureRecord>(&json).unwrap(),
        record
    );
    assert!(
        checkpoint::decode::<ClosureState>(&bytes).is_err(),
        "kinds differ"
    );
}

#[test]
fn a_tampered_state_is_refused_on_restore() {
    let closure = Closure::start(root("i"), session(), RecoveryPolicy::default());
    let Closure::Governance(due) = closure else {
        panic!("starts at governance")
    };
    let closure = due.feed(GovernanceDecision::Approve);
    let mut json = serde_json::to_value(closure.state()).unwrap();
    // Claim that pre-validation already passed without a recorded verdict.
    let progress = json.get_mut("pre_validate").unwrap().take();
    let forged = serde_json::json!({ "execute": progress });
    let state: ClosureState = serde_json::from_value(forged).unwrap();
    let err = Closure::restore(state).unwrap_err();
    assert!(
        err.to_string().contains("does not match the phase"),
        "{err}"
    );

    let mut json2 = serde_json::to_value(closure.state()).unwrap();
    let entries = &mut json2["pre_validate"]["audit"]["entries"];
    entries.as_array_mut().unwrap().remove(0);
    let state: ClosureState = serde_json::from_value(json2).unwrap();
    assert!(matches!(
        Closure::restore(state),
        Err(kleene::closure::machine::ClosureStateError::Audit(_))
    ));
}

fn normalized_post(
    record: &ClosureRecord,
    i: usize,
) -> Option<kleene::closure::verdict::NormalizedVerdict> {
    record.attempts()[i]
        .last_post_verdict()
        .map(|v| record.policy().normalizer().normalize(v))
}

fn recoverable(v: &Verdict, recover_on: RecoverOn) -> bool {
    !v.has_non_overridable_blocker()
        && match v.worst() {
            Some(Severity::Blocker) => true,
            Some(Severity::Warning) => recover_on == RecoverOn::BlockersAndWarnings,
            _ => false,
        }
}

/// The closure invariants of R13/R21, checked on one record.
fn check_invariants(record: &ClosureRecord, intent: &str) -> Result<(), TestCaseError> {
    let policy = record.policy();
    let attempts = record.attempts();
    let root = &attempts[0].task;
    // Terminates within the bounds.
    prop_assert!(attempts.len() as u32 <= policy.max_recovery_depth() + 1);
    prop_assert!(record.fix_attempts() <= policy.max_total_fix_attempts());
    prop_assert_eq!(record.fix_attempts() as usize, attempts.len() - 1);
    for a in attempts {
        prop_assert!(a.steps.len() as u32 <= policy.max_inner_iterations().get());
    }
    // Linear ids, root carried unchanged, failures accumulated with their attempt.
    let mut expected_failures: Vec<FailureEntry> = Vec::new();
    for (i, a) in attempts.iter().enumerate().skip(1) {
        let parent = &attempts[i - 1];
        prop_assert_eq!(a.task.id(), &root.id().fix_id(i as u32).unwrap());
        prop_assert_eq!(a.task.parent_task_ref(), Some(parent.task.id()));
        prop_assert_eq!(a.task.depth(), i as u32);
        prop_assert_eq!(a.task.root_task_ref(), root.id());
        prop_assert_eq!(a.task.root_spec(), root.spec());
        let failed = parent.last_post_verdict().unwrap();
        expected_failures.extend(failed.failures().map(|f| FailureEntry {
            attempt: (i - 1) as u32,
            validator_id: f.validator_id.clone(),
            severity: f.severity,
            justification: f.justification.clone(),
        }));
        prop_assert_eq!(a.task.prior_failures(), &expected_failures[..]);
        // The root intent exactly once, criteria unchanged.
        prop_assert_eq!(a.task.spec().intent.matches(intent).count(), 1);
        prop_assert_eq!(
            &a.task.spec().acceptance_criteria,
            &root.spec().acceptance_criteria
        );
        // Every spawn has exactly its audit event.
        let spawn = AuditEvent::SubtaskSpawned {
            parent_ref: parent.task.id().clone(),
            task_ref: a.task.id().clone(),
            depth: i as u32,
            triggering_validators: failed.failing_validators(),
        };
        prop_assert_eq!(record.audit().events().filter(|e| **e == spawn).count(), 1);
        // Consecutive recoveries never repeat a normalised verdict.
        if i >= 2 {
            prop_assert_ne!(
                normalized_post(record, i - 2),
                normalized_post(record, i - 1)
            );
        }
    }
    let spawned = record
        .audit()
        .events()
        .filter(|e| e.kind() == "subtask_spawned")
        .count();
    prop_assert_eq!(spawned as u32, record.fix_attempts());
    // Stalled exactly when the last recoverable verdict repeats the previous attempt's.
    let n = attempts.len();
    let last_recoverable = attempts[n - 1]
        .last_post_verdict()
        .is_some_and(|v| recoverable(v, policy.recover_on()));
    let repeats = n >= 2
        && last_recoverable
        && normalized_post(record, n - 1) == normalized_post(record, n - 2);
    prop_assert_eq!(record.outcome().is_stalled(), repeats);
    // Every iteration minted its own token (INV1).
    let tokens: Vec<_> = record
        .audit()
        .events()
        .filter_map(|e| match e {
            AuditEvent::Governed { token, .. } => *token,
            _ => None,
        })
        .collect();
    let mut unique = tokens.clone();
    unique.sort();
    unique.dedup();
    prop_assert_eq!(unique.len(), tokens.len());
    // The closure's end is audited last.
    let last = record.audit().entries().last().unwrap().event().kind();
    let expected_last = match record.outcome() {
        ClosureOutcome::Resolved { .. } => "recovery_resolved",
        o if o.is_stalled() => "recovery_stalled",
        o if o.is_exhausted() => "recovery_exhausted",
        ClosureOutcome::Halted { .. } => "halted",
        _ => "closure_failed",
    };
    prop_assert_eq!(last, expected_last);
    prop_assert_eq!(record.audit().verify(), Ok(()));
    Ok(())
}

#[derive(Debug, Clone)]
enum Mutation {
    Edit(usize),
    Drop(usize),
    Insert { at: usize, copy_of: usize },
    Swap(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Edit),
        any::<usize>().prop_map(Mutation::Drop),
        (any::<usize>(), any::<usize>()).prop_map(|(at, copy_of)| Mutation::Insert { at, copy_of }),
        any::<usize>().prop_map(Mutation::Swap),
    ]
}

/// Applies `m` to the serialised log (the only way to touch a log from outside) and returns
/// the mutated log and the entry index verification must name (a range, for an insert of
/// an entry's copy right before itself).
fn mutate(log: &AuditLog, m: &Mutation) -> (AuditLog, std::ops::RangeInclusive<usize>) {
    let mut json = serde_json::to_value(log).unwrap();
    let entries = json["entries"].as_array_mut().unwrap();
    let len = entries.len();
    let expected = match *m {
        Mutation::Edit(i) => {
            let i = i % len;
            let forged = AuditEvent::RecoveryStalled {
                root_task_ref: TaskId::new("forged").unwrap(),
                task_ref: TaskId::new("forged").unwrap(),
                depth: 7,
            };
            entries[i]["event"] = serde_json::to_value(forged).unwrap();
            i..=i
        }
        Mutation::Drop(i) => {
            let i = i % len;
            entries.remove(i);
            i..=i
        }
        Mutation::Insert { at, copy_of } => {
            let (at, copy_of) = (at % (len + 1), copy_of % len);
            let copy = entries[copy_of].clone();
            entries.insert(at, copy);
            at..=at + 1
        }
        Mutation::Swap(i) => {
            let i = i % (len - 1);
            entries.swap(i, i + 1);
            i..=i
        }
    };
    (serde_json::from_value(json).unwrap(), expected)
}

/// Drives the sans-IO machine, encoding and decoding its state through a checkpoint
/// between every single step.
fn drive_with_checkpoints(
    task: Task,
    policy: &RecoveryPolicy,
    agent: &mut ScriptedAgent,
) -> ClosureRecord {
    let mut closure = Closure::start(task, session(), policy.clone());
    loop {
        let bytes = checkpoint::encode(&closure.state()).unwrap();
        closure = Closure::restore(checkpoint::decode::<ClosureState>(&bytes).unwrap()).unwrap();
        closure = match closure {
            Closure::Done(record) => return *record,
            due => due.step(agent),
        };
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn closures_over_arbitrary_scripted_agents_keep_every_invariant(
        policy in policy(),
        agent in scripted_agent(),
        marker in 0u32..1_000_000,
    ) {
        let intent = format!("ROOT-INTENT-{marker}: build the login page");
        let task = Task::new(
            TaskId::new("x").unwrap(),
            Spec::new(intent.clone()).with_criterion("tests pass"),
        );
        let mut a = agent.clone();
        let record = run_to_closure(task.clone(), session(), &mut a, &policy);
        check_invariants(&record, &intent)?;

        // (a) and (b) agree, with a checkpoint round trip between every step.
        let mut b = agent;
        let driven = drive_with_checkpoints(task, &policy, &mut b);
        prop_assert_eq!(&driven, &record);
        prop_assert_eq!(b.executed_tasks(), a.executed_tasks());
    }

    #[test]
    fn closures_sharing_a_budget_never_spawn_more_fixes_than_it_holds(
        policy in policy(),
        agents in prop::collection::vec(scripted_agent(), 1..4),
        size in 0u32..5,
    ) {
        let budget = FixBudget::new(size);
        let spawned: u32 = agents
            .into_iter()
            .map(|mut agent| {
                run_to_closure_with(root("i"), session(), &mut agent, &policy, &budget, &mut ())
                    .fix_attempts()
            })
            .sum();
        prop_assert!(spawned <= size);
        prop_assert_eq!(budget.used(), spawned);
    }

    #[test]
    fn any_single_mutation_of_the_audit_chain_fails_verification(
        policy in policy(),
        mut agent in scripted_agent(),
        m in mutation(),
    ) {
        let record = run_to_closure(root("i"), session(), &mut agent, &policy);
        let log = record.audit();
        prop_assume!(log.len() >= 2);
        let (tampered, expected) = mutate(log, &m);
        prop_assume!(tampered != *log);
        let err = tampered.verify().unwrap_err();
        prop_assert!(expected.contains(&err.index()), "{:?} named {}", m, err);
    }
}

#[test]
fn an_unnameable_fix_is_a_typed_failure() {
    let long = TaskId::new("x".repeat(kleene::id::MAX_ID_LEN - 2)).unwrap();
    let task = Task::new(long, Spec::new("i"));
    let mut agent = ScriptedAgent::new().post_verdicts([blocker("a", true)]);
    let record = run_to_closure(task, session(), &mut agent, &RecoveryPolicy::default());
    assert!(matches!(
        record.outcome(),
        ClosureOutcome::Failed {
            failure: ClosureFailure::FixId { depth: 1, .. },
            ..
        }
    ));
    assert_eq!(record.fix_attempts(), 0);
}

#[test]
fn a_restored_closure_can_draw_from_a_shared_budget() {
    let budget = FixBudget::new(1);
    let mut agent = ScriptedAgent::new().post_verdicts([blocker("a", true), blocker("b", true)]);
    let mut closure = Closure::start(root("i"), session(), RecoveryPolicy::default());
    let record = loop {
        let state = closure.state();
        closure = Closure::restore_with_budget(state, &budget).unwrap();
        closure = match closure {
            Closure::Done(record) => break record,
            due => due.step(&mut agent),
        };
    };
    assert!(matches!(
        record.outcome().halt_reason(),
        Some(HaltReason::RecoveryExhausted {
            bound: ExhaustedBound::FixBudget { max: 1 },
            ..
        })
    ));
    assert_eq!(budget.used(), 1);
}

/// The scripted run whose record and mid-run state are committed as format-version-1
/// checkpoints.
fn v1_fixture_run() -> (ClosureRecord, ClosureState) {
    let posts = [blocker("test a ... FAILED", true), warning("unused import")];
    let policy = RecoveryPolicy::builder()
        .recover_on(RecoverOn::BlockersAndWarnings)
        .build()
        .unwrap();
    let mut agent = ScriptedAgent::new().post_verdicts(posts.clone());
    let record = run_to_closure(root("fixture intent"), session(), &mut agent, &policy);
    let mut agent = ScriptedAgent::new().post_verdicts(posts);
    let mut closure = Closure::start(root("fixture intent"), session(), policy);
    for _ in 0..7 {
        closure = closure.step(&mut agent);
    }
    (record, closure.state())
}

/// Old reader / new data and new reader / old data: the committed version-1 checkpoints
/// (written by this crate when `ClosureRecord` and `ClosureState` got format version 1)
/// still decode to exactly what the same run produces today, and re-encode to the same
/// bytes.
#[test]
fn version_1_checkpoints_still_decode() {
    let record_v1 = include_bytes!("../fixtures/closure/record_v1.ckpt");
    let state_v1 = include_bytes!("../fixtures/closure/state_v1.ckpt");
    let (record, state) = v1_fixture_run();
    assert_eq!(
        checkpoint::decode::<ClosureRecord>(record_v1).unwrap(),
        record
    );
    assert_eq!(checkpoint::decode::<ClosureState>(state_v1).unwrap(), state);
    assert_eq!(checkpoint::encode(&record).unwrap(), record_v1);
    assert_eq!(record.outcome().resolved_depth(), Some(2));
    let restored = Closure::restore(state).unwrap();
    assert!(matches!(restored, Closure::PostValidate(_)), "{restored:?}");
}

#[test]
fn a_state_that_forgets_the_previous_verdict_cannot_dodge_stall_detection() {
    let mut agent = ScriptedAgent::new().post_verdicts([blocker("a", true)]);
    let mut closure = Closure::start(root("i"), session(), RecoveryPolicy::default());
    // Governance, pre-validation, execution, post-validation: then x_fix_1 awaits governance.
    for _ in 0..4 {
        closure = closure.step(&mut agent);
    }
    assert!(matches!(closure, Closure::Governance(_)));
    let mut json = serde_json::to_value(closure.state()).unwrap();
    json["governance"]["previous"] = serde_json::Value::Null;
    let state: ClosureState = serde_json::from_value(json).unwrap();
    let err = Closure::restore(state).unwrap_err();
    assert_eq!(err.task().map(TaskId::as_str), Some("x_fix_1"));
    assert!(err.to_string().contains("stall detection"), "{err}");
}

#[test]
fn a_state_whose_root_depth_would_overflow_is_refused() {
    let mut agent = ScriptedAgent::new().post_verdicts([blocker("a", true)]);
    let mut closure = Closure::start(root("i"), session(), RecoveryPolicy::default());
    for _ in 0..4 {
        closure = closure.step(&mut agent);
    }
    let mut json = serde_json::to_value(closure.state()).unwrap();
    // A persisted root at the deepest depth there is: one fix below it has no depth.
    let task = &mut json["governance"]["done"][0]["task"];
    task["depth"] = serde_json::json!(u32::MAX);
    task["parent_task_ref"] = serde_json::json!("elsewhere");
    let state: ClosureState = serde_json::from_value(json).unwrap();
    let err = Closure::restore(state).unwrap_err();
    assert_eq!(err.task().map(TaskId::as_str), Some("x_fix_1"));
    // Restoring replays the history from that root, which does not lead to this state.
    assert!(err.to_string().contains("does not replay"), "{err}");
}

#[test]
fn a_damaged_record_does_not_read_back() {
    let mut agent = ScriptedAgent::new().post_verdicts([blocker("a", true), Verdict::clean()]);
    let record = run_to_closure(root("i"), session(), &mut agent, &RecoveryPolicy::default());
    let json = serde_json::to_value(&record).unwrap();
    assert_eq!(
        serde_json::from_value::<ClosureRecord>(json.clone()).unwrap(),
        record
    );

    let mut dropped_entry = json.clone();
    dropped_entry["audit"]["entries"]
        .as_array_mut()
        .unwrap()
        .remove(1);
    let err = serde_json::from_value::<ClosureRecord>(dropped_entry).unwrap_err();
    assert!(err.to_string().contains("verify audit log"), "{err}");

    let mut lost_fix = json;
    lost_fix["attempts"].as_array_mut().unwrap().pop();
    let err = serde_json::from_value::<ClosureRecord>(lost_fix).unwrap_err();
    assert!(
        err.to_string().contains("holds 1 tasks for 1 fix attempts"),
        "{err}"
    );
}
