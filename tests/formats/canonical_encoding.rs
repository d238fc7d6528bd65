//! The canonical encoding behind every digest, pinned value by value.
//!
//! Journals, checkpoints and acceptance records carry these digests and are re-verified
//! whenever they load, so the value a digest takes for a given logical value must never
//! move by accident: any change to the encoding is a format change, made on purpose, with
//! a new purpose version. Each value below exercises every field and every variant its
//! type has, including every typed reason whose message a user reads, so rewording an
//! error message (which is not part of any encoding) changes none of them.

use std::collections::BTreeMap;

use kleene::acceptance::{AcceptanceRecord, BuildBinding, FileManifest, StoredRecord, accept};
use kleene::batch::{
    Batch, BatchEvidence, Candidate, MemoryJournal, Rejection, evidence::ClosureSettlement,
    evidence::EVIDENCE_VERSION, evidence::EvidenceEvent, evidence::InventoryEntry,
    evidence::Settlement, recovery::IneligibleReason, recovery::RecoveryRequest,
    worker::InfrastructureFailure,
};
use kleene::closure::audit::{AuditEvent, AuditLog, LoopPhase};
use kleene::closure::{
    ClosureRecord, ExecutionOutput, GovernanceDecision, RecoveryPolicy, Severity, Spec,
    ValidatorResult, Verdict, record::ClosureFailure, run_to_closure, step::ExhaustedBound,
    step::HaltReason, step::Next, step::RecoverOn, step::Session,
};
use kleene::id::{AgentId, Digest, ValidatorId};
use kleene::plan::{ExtensionValue, ModuleName, PlannedTask, TaskKind};
use kleene::snapshot::{Diagnostic, RepairLedger, Snapshot};
use kleene::testing::batch::{ScriptedOutcome, ScriptedWorker};
use kleene::testing::closure::ScriptedAgent;
use kleene::{AppBuildPlan, Task, ValidatedPlan};

use proptest::prelude::*;
use serde_json::Value;

use crate::support::{chan, id, path};

fn d(byte: u8) -> Digest {
    Digest::from_bytes([byte; 32])
}

fn verdict(severity: Severity, overridable: bool, text: &str) -> Verdict {
    Verdict::new([
        ValidatorResult::new(
            ValidatorId::new("tests").unwrap(),
            severity,
            overridable,
            text,
        ),
        ValidatorResult::new(ValidatorId::new("lint").unwrap(), Severity::Info, true, ""),
    ])
}

/// A plan that uses every field a task has: lanes with and without a module, a lane that
/// normalisation synthesises, dependencies, input contracts, criteria, a retry limit and
/// extension values on a task and on the plan.
pub(crate) fn plan() -> ValidatedPlan {
    let m = || ModuleName::new("tasks").unwrap();
    let task = |name: &str, kind, owner: &str| {
        PlannedTask::new(
            id(name),
            kind,
            AgentId::new(owner).unwrap(),
            Spec::new(name),
        )
    };
    let mut model = task("model_tasks", TaskKind::Model { module: m() }, "ModelAgent")
        .owning(path("backend/schemas.py"))
        .owning(path("backend/a.py"));
    model.spec = Spec::new("schemas")
        .with_criterion("title is required")
        .with_criterion("ids are uuids");
    model.retry_limit = 4;
    model.extensions.insert(
        "run".to_owned(),
        ExtensionValue::new(&serde_json::json!({"cmd": "make", "args": [1, 2]})),
    );
    let mut service = task(
        "service_tasks",
        TaskKind::Service { module: m() },
        "ServiceAgent",
    )
    .owning(path("backend/services.py"));
    service.depends_on.push(id("model_tasks"));
    let config = task(
        "config_app",
        TaskKind::Config { module: None },
        "ConfigAgent",
    )
    .owning(path("config/app.yaml"));
    let general = task("docs", TaskKind::General, "sh");
    let mut plan = AppBuildPlan::new(vec![service, model, config, general]);
    plan.extensions.insert(
        "scratch".to_owned(),
        ExtensionValue::new(&serde_json::json!("tmp")),
    );
    kleene::plan::Plan::draft(plan)
        .normalize()
        .consolidate()
        .unwrap()
        .validate()
        .unwrap()
}

/// A log with every kind of event and every variant of every enum an event carries.
pub(crate) fn audit_log() -> AuditLog {
    let session = Session::new("build", "demo").unwrap();
    let blocker = verdict(Severity::Blocker, false, "test a ... FAILED");
    let warning = verdict(Severity::Warning, true, "unused import");
    let events = vec![
        AuditEvent::ClosureStarted {
            root_task_ref: id("x"),
            session,
        },
        AuditEvent::Governed {
            task_ref: id("x"),
            iteration: 1,
            decision: GovernanceDecision::Approve,
            token: Some(d(1)),
        },
        AuditEvent::Governed {
            task_ref: id("x"),
            iteration: 2,
            decision: GovernanceDecision::Deny {
                reason: "outside the change window".to_owned(),
            },
            token: None,
        },
        AuditEvent::PreValidated {
            task_ref: id("x"),
            iteration: 1,
            verdict: Verdict::clean(),
        },
        AuditEvent::Executed {
            task_ref: id("x"),
            iteration: 1,
            output: d(2),
        },
        AuditEvent::PostValidated {
            task_ref: id("x"),
            iteration: 1,
            verdict: blocker.clone(),
        },
        AuditEvent::MovedNext {
            task_ref: id("x"),
            iteration: 1,
            next: Next::Continue,
        },
        AuditEvent::MovedNext {
            task_ref: id("x"),
            iteration: 2,
            next: Next::Complete,
        },
        AuditEvent::SubtaskSpawned {
            parent_ref: id("x"),
            task_ref: id("x_fix_1"),
            depth: 1,
            triggering_validators: vec![
                ValidatorId::new("tests").unwrap(),
                ValidatorId::new("lint").unwrap(),
            ],
        },
        AuditEvent::RecoveryResolved {
            root_task_ref: id("x"),
            task_ref: id("x_fix_1"),
            depth: 1,
            fix_attempts: 1,
        },
        AuditEvent::RecoveryExhausted {
            root_task_ref: id("x"),
            task_ref: id("x_fix_3"),
            depth: 3,
            bound: ExhaustedBound::Depth { max: 3 },
        },
        AuditEvent::RecoveryExhausted {
            root_task_ref: id("x"),
            task_ref: id("x_fix_2"),
            depth: 2,
            bound: ExhaustedBound::FixBudget { max: 2 },
        },
        AuditEvent::RecoveryStalled {
            root_task_ref: id("x"),
            task_ref: id("x_fix_2"),
            depth: 2,
        },
    ];
    let halts = [
        HaltReason::GovernanceDenied {
            reason: "frozen".to_owned(),
        },
        HaltReason::PreExecuteRejected {
            verdict: blocker.clone(),
        },
        HaltReason::NonOverridableBlocker {
            verdict: blocker.clone(),
        },
        HaltReason::WarningWithheld {
            verdict: warning.clone(),
        },
        HaltReason::IterationCap { cap: 5 },
        HaltReason::RecoveryExhausted {
            bound: ExhaustedBound::FixBudget { max: 2 },
            verdict: blocker.clone(),
        },
        HaltReason::RecoveryStalled { verdict: warning },
    ];
    let failures = [
        ClosureFailure::Agent {
            phase: LoopPhase::Execute,
            message: "tool crashed".to_owned(),
        },
        ClosureFailure::Agent {
            phase: LoopPhase::Governance,
            message: String::new(),
        },
        ClosureFailure::Agent {
            phase: LoopPhase::PreValidate,
            message: "a".to_owned(),
        },
        ClosureFailure::Agent {
            phase: LoopPhase::PostValidate,
            message: "b".to_owned(),
        },
        ClosureFailure::Agent {
            phase: LoopPhase::MoveNext,
            message: "c".to_owned(),
        },
        ClosureFailure::FixId {
            depth: 2,
            message: "the id is too long".to_owned(),
        },
    ];
    let mut log = AuditLog::new();
    let halted = halts.into_iter().map(|reason| AuditEvent::Halted {
        task_ref: id("x"),
        iteration: 3,
        reason,
    });
    let failed = failures.into_iter().map(|failure| AuditEvent::Failed {
        task_ref: id("x"),
        iteration: 4,
        failure,
    });
    for event in events.into_iter().chain(halted).chain(failed) {
        log.append(event);
    }
    log
}

/// A closure that fails once, spawns a fix, resolves it at depth 1 (governance tokens,
/// execution outputs and a fix subtask all reach its record).
pub(crate) fn closure_record() -> ClosureRecord {
    let mut agent = ScriptedAgent::new()
        .outputs([
            ExecutionOutput::new("first try"),
            ExecutionOutput::new("fixed"),
        ])
        .post_verdicts([
            verdict(Severity::Blocker, true, "test a ... FAILED"),
            Verdict::clean(),
        ]);
    let policy = RecoveryPolicy::builder()
        .recover_on(RecoverOn::BlockersAndWarnings)
        .build()
        .unwrap();
    run_to_closure(
        Task::new(
            id("x"),
            Spec::new("add /login").with_criterion("200 on success"),
        ),
        Session::new("build", "demo").unwrap(),
        &mut agent,
        &policy,
    )
}

const INELIGIBLE: [IneligibleReason; 8] = [
    IneligibleReason::InputsChanged,
    IneligibleReason::DiagnosticsMissing,
    IneligibleReason::BudgetExhausted,
    IneligibleReason::RootAlreadyConsumed,
    IneligibleReason::RequestAlreadyConsumed,
    IneligibleReason::UncertainInterruptedExecution,
    IneligibleReason::InfrastructureFailure,
    IneligibleReason::AlreadyAccepted,
];

fn infrastructure() -> [InfrastructureFailure; 4] {
    [
        InfrastructureFailure::ProcessMissing {
            detail: "no such file".to_owned(),
        },
        InfrastructureFailure::Timeout { after_ms: 1500 },
        InfrastructureFailure::Transport {
            detail: "broken pipe".to_owned(),
        },
        InfrastructureFailure::Agent {
            detail: "tool crashed".to_owned(),
        },
    ]
}

/// Evidence with every field of every task's evidence set: inputs, recovery, an accepted
/// output, both kinds of rejection, every infrastructure failure, an interrupted and a
/// withdrawn call, a drained task, a recovery that granted, released and refused a root for
/// every reason, and closures that drew fixes and ended every way.
pub(crate) fn evidence() -> BatchEvidence {
    BatchEvidence::fold(every_kind_of_event()).unwrap()
}

/// The events [`evidence`] folds.
fn every_kind_of_event() -> Vec<EvidenceEvent> {
    let names = [
        "ok", "rejected", "owned", "infra_0", "infra_1", "infra_2", "infra_3", "cut", "drained",
    ];
    let inventory = names
        .iter()
        .map(|n| InventoryEntry {
            task: id(n),
            owner: AgentId::new("w").unwrap(),
            budget: 3,
        })
        .collect();
    let accepted = Candidate::new(BTreeMap::from([(path("ok.txt"), b"ok".to_vec())]));
    let refused = Candidate::new(BTreeMap::from([(path("bad.txt"), b"no".to_vec())]));
    let reserve = |task: &str, attempt, byte| EvidenceEvent::Reserved {
        task: id(task),
        attempt,
        input_digest: d(byte),
    };
    let settle = |task: &str, attempt, settlement| EvidenceEvent::Settled {
        task: id(task),
        attempt,
        settlement,
    };
    let closure = |fix_attempts, end| {
        let record = closure_record();
        let mut settled = ClosureSettlement::of(&record);
        settled.fix_attempts = fix_attempts;
        settled.end = end;
        settled
    };
    let mut events = vec![
        EvidenceEvent::Started {
            channel: chan("chan-pin"),
            plan_digest: d(9),
            evidence_version: EVIDENCE_VERSION,
            inputs: BTreeMap::from([("spec".to_owned(), d(3)), ("tests".to_owned(), d(4))]),
            recovery: true,
            inventory,
        },
        reserve("ok", 1, 10),
        EvidenceEvent::FixDrawn {
            task: id("ok"),
            attempt: 1,
            fix: id("ok_fix_1"),
        },
        EvidenceEvent::ClosureSettled {
            task: id("ok"),
            attempt: 1,
            closure: closure(
                1,
                kleene::batch::evidence::ClosureEnd::Resolved { depth: 1 },
            ),
        },
        settle(
            "ok",
            1,
            Settlement::Accepted {
                digest: accepted.digest(),
                candidate: accepted,
            },
        ),
        reserve("rejected", 1, 11),
        EvidenceEvent::ClosureSettled {
            task: id("rejected"),
            attempt: 1,
            closure: closure(
                0,
                kleene::batch::evidence::ClosureEnd::Halted {
                    depth: 0,
                    halt: "recovery_stalled".to_owned(),
                },
            ),
        },
        settle(
            "rejected",
            1,
            Settlement::Rejected {
                candidate: refused.clone(),
                rejection: Rejection::contract(&id("rejected"), "missing action list"),
            },
        ),
        reserve("owned", 1, 12),
        EvidenceEvent::ClosureSettled {
            task: id("owned"),
            attempt: 1,
            closure: closure(0, kleene::batch::evidence::ClosureEnd::Failed { depth: 0 }),
        },
        settle(
            "owned",
            1,
            Settlement::Rejected {
                candidate: refused,
                rejection: owned_rejection(),
            },
        ),
    ];
    for (i, failure) in infrastructure().into_iter().enumerate() {
        let task = format!("infra_{i}");
        events.push(reserve(&task, 1, 20 + i as u8));
        events.push(settle(&task, 1, Settlement::Infrastructure(failure)));
    }
    events.extend([
        reserve("cut", 1, 30),
        EvidenceEvent::Withdrawn {
            task: id("cut"),
            attempt: 1,
            detail: "disk full".to_owned(),
        },
        reserve("cut", 1, 31),
        EvidenceEvent::Interrupted {
            task: id("cut"),
            attempt: 1,
        },
        reserve("cut", 2, 32),
        EvidenceEvent::Drained {
            task: id("drained"),
            blocked_by: id("rejected"),
        },
        EvidenceEvent::RecoveryConsumed {
            request: d(40),
            granted: vec![id("rejected")],
            released: vec![id("drained")],
            refused: INELIGIBLE
                .iter()
                .map(|why| (id("owned"), why.clone()))
                .collect(),
        },
    ]);
    events
}

/// The ownership check's rejection, as a real batch makes it (its variant has no public
/// constructor): a worker proposes a file its task does not own.
fn owned_rejection() -> Rejection {
    let plan = crate::support::validated(
        r#"{"tasks": [{"id": "owned", "owner": "w", "spec": {"intent": "x"}, "owned_paths": ["a.txt"]}]}"#,
    );
    let mut worker = ScriptedWorker::new().script(
        id("owned"),
        [ScriptedOutcome::Candidate(Candidate::new(BTreeMap::from(
            [(path("b.txt"), b"x".to_vec())],
        )))],
    );
    let evidence = Batch::new(&plan, chan("owned"))
        .dispatch(&mut worker, &(), &mut MemoryJournal::default())
        .unwrap();
    let task = evidence.task(&id("owned")).unwrap();
    task.rejections()[0].rejection().clone()
}

/// Every digest kleene makes, named, for the fixed values above.
fn digests() -> Vec<(&'static str, Digest)> {
    let mut out = Vec::new();
    let plan = plan();
    out.push(("plan", plan.digest()));
    out.push(("spec", Spec::new("x").with_criterion("y").digest()));

    let log = audit_log();
    for (i, entry) in log.entries().iter().enumerate() {
        out.push((AUDIT_ENTRY_NAMES[i], entry.hash()));
    }
    for (i, event) in log.events().enumerate() {
        out.push((AUDIT_EVENT_NAMES[i], event.digest()));
    }
    out.push(("audit head", log.head()));

    let record = closure_record();
    out.push(("closure record", record.digest()));
    out.push(("closure audit head", record.audit().head()));
    for event in record.audit().events() {
        match event {
            AuditEvent::Governed {
                token: Some(token), ..
            } => out.push(("closure validation token", *token)),
            AuditEvent::Executed { output, .. } => out.push(("closure execution output", *output)),
            _ => {}
        }
    }

    let evidence = evidence();
    out.push(("evidence", evidence.digest()));
    out.push((
        "recovery request",
        RecoveryRequest::for_roots(&evidence, [id("rejected"), id("owned")]).fingerprint(),
    ));

    // A real batch: its named input and the per-call input digests.
    let chain = crate::support::validated(
        r#"{"tasks": [
          {"id": "a", "owner": "w", "spec": {"intent": "a"}, "owned_paths": ["a.txt"]},
          {"id": "b", "owner": "w", "spec": {"intent": "b"}, "owned_paths": ["b.txt"], "depends_on": ["a"]}
        ]}"#,
    );
    let mut worker = ScriptedWorker::new()
        .script(
            id("a"),
            [ScriptedOutcome::Candidate(Candidate::new(BTreeMap::from(
                [(path("a.txt"), b"a".to_vec())],
            )))],
        )
        .script(
            id("b"),
            [ScriptedOutcome::Candidate(Candidate::new(BTreeMap::from(
                [(path("b.txt"), b"b".to_vec())],
            )))],
        );
    let ran = Batch::new(&chain, chan("chain"))
        .with_input("spec", b"the spec")
        .dispatch(&mut worker, &(), &mut MemoryJournal::default())
        .unwrap();
    out.push(("batch input", ran.input_digests()["spec"]));
    out.push((
        "task input a",
        ran.task(&id("a")).unwrap().last_input_digest().unwrap(),
    ));
    out.push((
        "task input b",
        ran.task(&id("b")).unwrap().last_input_digest().unwrap(),
    ));
    out.push(("chain evidence", ran.digest()));

    // Acceptance: the build whose record is committed as a fixture.
    let b = crate::acceptance::records::build();
    out.push(("acceptance evidence", b.evidence.digest()));
    let accepted: AcceptanceRecord = accept(
        &b.plan,
        &b.evidence,
        &b.snapshot,
        &crate::acceptance::records::binding(&b),
    )
    .unwrap();
    out.push(("acceptance binding", accepted.binding().digest()));
    out.push((
        "acceptance task inventory",
        accepted.task_inventory_digest(),
    ));
    out.push(("acceptance task results", accepted.task_results_digest()));
    out.push(("acceptance files", accepted.files().digest()));
    out.push(("acceptance record", accepted.digest()));
    let with_closures = accepted_with_closures();
    out.push((
        "closure-bound task results",
        with_closures.task_results_digest(),
    ));
    out.push(("closure-bound record", with_closures.digest()));
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/acceptance");
    let stored =
        StoredRecord::from_json(&std::fs::read_to_string(dir.join("record-v1.json")).unwrap())
            .unwrap();
    out.push(("stored record", stored.digest()));
    out.push(("stored evidence", stored.evidence_digest()));

    // Repair routing fingerprints a target's diagnostics and files.
    let finding = Diagnostic::new(
        path("backend/services.py"),
        ValidatorId::new("wiring").unwrap(),
        "no create()",
    );
    let routes = RepairLedger::default()
        .route(&b.plan, &b.evidence, &b.snapshot, &[finding])
        .unwrap();
    out.push(("repair fingerprint", routes.requests()[0].fingerprint()));
    let snapshot = Snapshot::from_evidence(&b.evidence).unwrap();
    out.push(("snapshot manifest", snapshot.manifest().digest()));
    out.push((
        "file manifest",
        FileManifest::compute(&BTreeMap::from([(path("a.txt"), b"a".to_vec())])).digest(),
    ));
    let task = plan.tasks().next().expect("the plan has tasks");
    out.push((
        "action key",
        kleene::batch::cache::ActionKeyParts::new(task)
            .setting("base", b"\"project\"")
            .reads([(path("tools/make.sh"), d(4))])
            .prerequisite(id("a"), d(5))
            .key()
            .digest(),
    ));
    out
}

const AUDIT_EVENT_NAMES: [&str; 26] = [
    "event closure_started",
    "event governed approve",
    "event governed deny",
    "event pre_validated",
    "event executed",
    "event post_validated",
    "event moved_next continue",
    "event moved_next complete",
    "event subtask_spawned",
    "event recovery_resolved",
    "event recovery_exhausted depth",
    "event recovery_exhausted fix_budget",
    "event recovery_stalled",
    "event halted governance_denied",
    "event halted pre_execute_rejected",
    "event halted non_overridable_blocker",
    "event halted warning_withheld",
    "event halted iteration_cap",
    "event halted recovery_exhausted",
    "event halted recovery_stalled",
    "event failed agent execute",
    "event failed agent governance",
    "event failed agent pre_validate",
    "event failed agent post_validate",
    "event failed agent move_next",
    "event failed fix_id",
];

const AUDIT_ENTRY_NAMES: [&str; 26] = [
    "entry 0", "entry 1", "entry 2", "entry 3", "entry 4", "entry 5", "entry 6", "entry 7",
    "entry 8", "entry 9", "entry 10", "entry 11", "entry 12", "entry 13", "entry 14", "entry 15",
    "entry 16", "entry 17", "entry 18", "entry 19", "entry 20", "entry 21", "entry 22", "entry 23",
    "entry 24", "entry 25",
];

/// The values every digest above had when the canonical encoding was first pinned.
const PINNED: &[(&str, &str)] = &[
    (
        "plan",
        "7110b3e40233c799afdff1e3cbcd2318de55aa23eee5df1efe1278c3e93beff8",
    ),
    (
        "spec",
        "8f7387a8bd8b453b405881529b5ff90093eb600dde055a844a3f93e1a76d9499",
    ),
    (
        "entry 0",
        "59f93d2deeec436e9bc5c29e2eae70a9f625bef184900f8eac0d21bd52dffade",
    ),
    (
        "entry 1",
        "782974c75ef60c4c335ac55b502caa48120da07ef08153ad128aa3886ebe2375",
    ),
    (
        "entry 2",
        "7138b8f142732f91668acbc4bef36ed356cdb6b53cdc0c1150d42525b57ffb57",
    ),
    (
        "entry 3",
        "9eec28ac35a2de2a95455aedeb193eed350115a71c3d7a8d756775a54a731f55",
    ),
    (
        "entry 4",
        "3d13bbb21160333eac08277b67335776a6335ca0654989ec3cba9b9c22f05af6",
    ),
    (
        "entry 5",
        "92afe8a457ec74ce73217e36001d23fe14aea62ff3654dfb077276664fc7127f",
    ),
    (
        "entry 6",
        "ef37285f910c7fecd0616b8ab2cb9b6230de94703a2c4cc4c9a1404fe91b6de3",
    ),
    (
        "entry 7",
        "9683c956cded531c7abc9455402e92bd3cdcf5e1d36523d6e5b0caed89aefd60",
    ),
    (
        "entry 8",
        "184508964cf98a0874e9401d6de746de9cf8622263cbb93aef31f285d5794e85",
    ),
    (
        "entry 9",
        "e3bf8ff6b626961cdeddef6e97b53769754d71ed5360e73fd08fa19a076824ba",
    ),
    (
        "entry 10",
        "35b90a7fc57d3e3bb6b7f1b5f9eb96ac7c9be215839ac8a335c6a1f0799fc699",
    ),
    (
        "entry 11",
        "dd0601a6803cf207e2d635f408c0f4937c537a3a642df6723d858d795fbe9fcc",
    ),
    (
        "entry 12",
        "81b9d75570827e178cdfee3044dd023221ae12d5ef86f3a748875dab3d8c7436",
    ),
    (
        "entry 13",
        "0a693106cbc1359822f655c277487f58d67ae6289210bc99265b64e23dca1949",
    ),
    (
        "entry 14",
        "5a8b2be65142720a2781dfc0da7bef672d4602b8eeac8d34d6e3005d3c92ba03",
    ),
    (
        "entry 15",
        "6cb341bd37f61dc3c4ad0c81c9351c1aea42528b67191016605341c8bf95d0ec",
    ),
    (
        "entry 16",
        "3fd27b7d822c624d82f557be1aff03de8c18e9911660e107d680ecffbf6ce805",
    ),
    (
        "entry 17",
        "99949ee95b1593744299a9c2311d60e2468139ecd820f5674b243175fb0996a3",
    ),
    (
        "entry 18",
        "2190aed66a518d9932a47e6e15022b1a1b13f67296171e8754c9b6a9e8465712",
    ),
    (
        "entry 19",
        "046a8d015cdf32a48dc065b6033e5712c7332756b68a1e47aeca28b579ac54dc",
    ),
    (
        "entry 20",
        "6d988c24f84ba44c84822313eb9683cfee434de2674645d2a39de9ec569ec5a2",
    ),
    (
        "entry 21",
        "fff228ddd8660dfc0d3af649bcd120d750aada5c8a04400fe7b189aefbd7f786",
    ),
    (
        "entry 22",
        "62a036af8c0d20aa9471675bf5015a30cebd9b63595273283e5d843b6d82754f",
    ),
    (
        "entry 23",
        "a39c23370a825a4e04f615749689cae86bbc43f3169e7f204144e69208b6b999",
    ),
    (
        "entry 24",
        "ee0ff18dec00d5c5e3f41dd39a4ef20be6b9d1e7d7ea897131c33463fa300823",
    ),
    (
        "entry 25",
        "7f16fafbc8070462a9b963d6d4740434d08a29de42fc87c670bcac32fb1c2756",
    ),
    (
        "event closure_started",
        "00a434a991fe3b0d6c3a931cad56547cad7ca0f2bceb82eff7e75640114b705e",
    ),
    (
        "event governed approve",
        "5c70085dbe747ab4e1915c6eccaa659fc6d06b28d6405391045f49544fd27b91",
    ),
    (
        "event governed deny",
        "327c710ded7eb8863e6aeb802c38636af6881150af7201d4a893ba61023cef57",
    ),
    (
        "event pre_validated",
        "87be86edcc75840d5d8d472facd1f3092507f18cff0b26e13f5728377f3338b3",
    ),
    (
        "event executed",
        "738a7368f954bb000b694e606644042aa14fd13022d793d43739e0666faef534",
    ),
    (
        "event post_validated",
        "3ad7a0a88309d7d439d902ce254fa12624f99401448caa04139b63a2561c2eb7",
    ),
    (
        "event moved_next continue",
        "1a17ab9be5125e09369881dff6c7b242e06540c7d415b21cee83d571fd792558",
    ),
    (
        "event moved_next complete",
        "ef5afdd17740d9d48186ff4e1729d61e4f6801b8621989366f80aca730950431",
    ),
    (
        "event subtask_spawned",
        "2915ff77cc0a428f3b78da400638f3bd433c24c22b172f5a0ce7f90f327b5072",
    ),
    (
        "event recovery_resolved",
        "6660106307244ee91a43dfca84c465d84a8a4873d189ce4af4395e6cd02363fa",
    ),
    (
        "event recovery_exhausted depth",
        "c8ae1b165c7ef6932223127217dc74c6416144e7b225327c2475c6e50f517709",
    ),
    (
        "event recovery_exhausted fix_budget",
        "b8b1183fd17f6f5511808dffe20dcbecb69a128662d50afd0ccda1914c824ed1",
    ),
    (
        "event recovery_stalled",
        "f7b9f5d8442606d8331afdae5755bb4a98b73251f2aaf9aa84cc064e0d9a0e96",
    ),
    (
        "event halted governance_denied",
        "567c08c11d49b495df259cf188086c6eef9a64b6a1b815aebbe63ed5bb484384",
    ),
    (
        "event halted pre_execute_rejected",
        "54007d09eb9009a7eb6a37bf7dd70a23f5876054ea5e28a671b8c7316b287c06",
    ),
    (
        "event halted non_overridable_blocker",
        "17faac390618446f3d350235ee4b5c6113a42b4f6e730f6898b4d1a5b7fde3a2",
    ),
    (
        "event halted warning_withheld",
        "d4d95064c6fe52c1f9ebbb627d7e9c6ad8fef57f031b935e7288380d1f9b84c0",
    ),
    (
        "event halted iteration_cap",
        "47f87a43922d70d67a73bf226e3587bb5930c2335d0c4225ebe57f0f07c0ccf7",
    ),
    (
        "event halted recovery_exhausted",
        "6b6b4a7f70cf26640b82f27bd9d36d4311be9faeb3c8d86f37f54505caa590d2",
    ),
    (
        "event halted recovery_stalled",
        "e300fbc8d7a78b75ccce8996bd61c499f08d04740febca940ff8b7989c370c46",
    ),
    (
        "event failed agent execute",
        "322f79e81f056cd8589b5581812ec63714df0596e50e7f20ead8d75564112f74",
    ),
    (
        "event failed agent governance",
        "93a081e0c25049eb62805f10887cc68bbee231d3e9d8ef1900a95595ca4ff370",
    ),
    (
        "event failed agent pre_validate",
        "d094f6c035d18480f323c8b432169d374480e2576457248a8f2fac9a5751228f",
    ),
    (
        "event failed agent post_validate",
        "da52a5fad6c9a0088f9b720776a34beb4c42cda746c11ff32864ccd75fa79198",
    ),
    (
        "event failed agent move_next",
        "17643c3968b2e5e9f38c2f48fc26994e89e12ddeba799f526f7e53a8896c1ee8",
    ),
    (
        "event failed fix_id",
        "c523adabaa9a73f118d0afea9f8c321ede7a5bc39e64069bea1ea9ff0949b1aa",
    ),
    (
        "audit head",
        "7f16fafbc8070462a9b963d6d4740434d08a29de42fc87c670bcac32fb1c2756",
    ),
    (
        "closure record",
        "394bc55671971f7f02a64fd980772148bb05c5a73d46225dd4e59305f407c3c8",
    ),
    (
        "closure audit head",
        "7a78d8a8ada84309ee843bf16c04e729749e0491755e46e7fe3b6a641c8328d9",
    ),
    (
        "closure validation token",
        "85ff292a7d8e0d19401c5ecd706b141e7c65c4b3877a8b354fd99a59afbbb47a",
    ),
    (
        "closure execution output",
        "3ef9e8e8f5fe6b6489e33e3e6418a8fadbb9baf50a5484a3037d4ecd11332045",
    ),
    (
        "closure validation token",
        "021017c6c201e8faa51304b51b5006e69a57c6ff56369b6cbe8ff75542f99097",
    ),
    (
        "closure execution output",
        "5e8d9c28e323ca76715d2857af54a2f41ef6495563081a530df63d2eec345737",
    ),
    (
        "evidence",
        "31a8993d300c90ddb2b215e503f47e5c6e17f97781927117019602cfa09d87a2",
    ),
    (
        "recovery request",
        "f6bd7499be9ec35f17a59d7f32adc7800591850819b98622caaf7770b92f5009",
    ),
    (
        "batch input",
        "724efaa370198034cfbc18a3a9f85d80e387ced6757df434f11aa188198b2cde",
    ),
    (
        "task input a",
        "2cb3339359d00d13803b485888b16f612b9a0b6a9834b460dd2a8be43c378d19",
    ),
    (
        "task input b",
        "0a5d7506f9f525e2b5121137c817b3c3ce93b848cc48adf2df650ea214523e5d",
    ),
    (
        "chain evidence",
        "747034d5bd8ed91ce9213bcecccbb8d7a69667ca07ffe32223558bd3586857ab",
    ),
    (
        "acceptance evidence",
        "6df2f49b82747d2f04a4b51f3229abeb580de90a143d111efa066b52fa010c54",
    ),
    (
        "acceptance binding",
        "3a38c18619ca30099fd3424cb4af803fb11e9604ede8dc8b7908ab93323201cd",
    ),
    (
        "acceptance task inventory",
        "3560dacc1879983c93a98c6ba6895aa33978cac0f616b22efe312a5e89480189",
    ),
    (
        "acceptance task results",
        "8034a7a597a6081f4ad5d4e76d79f73eb9b858bb9bf3abd02790bcf1bab60a58",
    ),
    (
        "acceptance files",
        "3f3bd0fe33943f99bc8a4d01e539976502fe598dafcfc64f369ed8609b8de18f",
    ),
    (
        "acceptance record",
        "5f23b171d52a47faf206f46e7ceb2f008cc928318b1ec4674cd5ae9608497ab7",
    ),
    (
        "closure-bound task results",
        "db360c586cbd31e817c9e97abe03250aa9b03ff9999ffdd1631870b0a1197328",
    ),
    (
        "closure-bound record",
        "53dde4b7010eb233e686f38783b0e563fd818b7b1bfa3079818f7c2598f96255",
    ),
    (
        "stored record",
        "6a557f4ca75eead9c37c179cb3006abbf18f5d95cdeeddc4e533c8c56affda17",
    ),
    (
        "stored evidence",
        "6df2f49b82747d2f04a4b51f3229abeb580de90a143d111efa066b52fa010c54",
    ),
    (
        "repair fingerprint",
        "2bb7e6fa5c7cb62704a204dc76edb6245d14274c22f3f9db762876e0657d9b11",
    ),
    (
        "snapshot manifest",
        "3f3bd0fe33943f99bc8a4d01e539976502fe598dafcfc64f369ed8609b8de18f",
    ),
    (
        "file manifest",
        "ed1ccbf25d0c80f85c9b5e8e427367f0b6efbc19781e18d18c700088c928cd15",
    ),
    (
        "action key",
        "f6b41930a70aa2cfc6f99e596b56eef6a1bc28b7715094ce3f5d3481e4dba973",
    ),
];

/// A store that checkpoints now and then and appends each commit's events after the
/// checkpoint (the Restate channel) reads back the very evidence a whole fold gives, for
/// every point the checkpoint could have been taken at, through the checkpoint's encoding.
#[test]
fn a_checkpoint_extended_with_the_events_after_it_is_the_whole_fold() {
    let events = every_kind_of_event();
    let whole = BatchEvidence::fold(events.clone()).unwrap();
    for k in 1..=events.len() {
        let checkpoint = BatchEvidence::fold(events[..k].to_vec()).unwrap();
        let bytes = kleene::checkpoint::encode(&checkpoint).unwrap();
        let read: BatchEvidence = kleene::checkpoint::decode(&bytes).unwrap();
        let extended = read.extended(events[k..].to_vec()).unwrap();
        assert_eq!(
            extended.digest(),
            whole.digest(),
            "checkpoint after {k} events"
        );
        assert_eq!(extended.event_count(), whole.event_count());
    }
    // An event that does not follow is refused, as in a whole fold.
    let checkpoint = BatchEvidence::fold(events[..2].to_vec()).unwrap();
    assert!(checkpoint.extended(events[..1].to_vec()).is_err());
}

#[test]
fn every_digest_keeps_its_pinned_value() {
    let actual: Vec<(&str, String)> = digests()
        .into_iter()
        .map(|(name, d)| (name, d.to_string()))
        .collect();
    let table: String = actual
        .iter()
        .map(|(name, d)| format!("    ({name:?}, {d:?}),\n"))
        .collect();
    let pinned: Vec<(&str, String)> = PINNED
        .iter()
        .map(|(name, d)| (*name, (*d).to_owned()))
        .collect();
    assert_eq!(actual, pinned, "today's digests:\n{table}");
}

// ---------------------------------------------------------------------------------------
// Every field changes the digest.
//
// A value's JSON form names every field it has; changing any one leaf of it (a string, a
// number, a flag) and reading it back gives a value that differs in exactly that field.
// Whenever that value is a different value, its digest must be a different digest:
// otherwise the field is not part of the canonical encoding.

/// Every copy of `value` with exactly one leaf changed, with the leaf's JSON pointer.
fn one_leaf_changed(value: &Value) -> Vec<(String, Value)> {
    fn walk(at: &str, v: &Value, root: &Value, out: &mut Vec<(String, Value)>) {
        let changed = match v {
            Value::Object(map) => {
                for (key, child) in map {
                    walk(&format!("{at}/{key}"), child, root, out);
                }
                return;
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(&format!("{at}/{i}"), child, root, out);
                }
                return;
            }
            Value::Null => return,
            Value::Bool(b) => Value::Bool(!b),
            Value::Number(n) => match n.as_u64() {
                Some(n) => Value::from(n + 1),
                None => return,
            },
            // A digest's hex stays hex; any other text gets one more character.
            Value::String(s) if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) => {
                let last = if s.ends_with('0') { "1" } else { "0" };
                Value::from(format!("{}{last}", &s[..63]))
            }
            Value::String(s) => Value::from(format!("{s}x")),
        };
        let mut copy = root.clone();
        if let Some(slot) = copy.pointer_mut(at) {
            *slot = changed;
            out.push((at.to_owned(), copy));
        }
    }
    let mut out = Vec::new();
    walk("", value, value, &mut out);
    out
}

/// Checks that every one-leaf change of `value` that reads back as a different value has a
/// different digest, except under the JSON keys in `derived` (fields that no digest covers
/// because they are derived from the ones it does). Returns how many changes were checked.
fn every_field_changes_the_digest<T>(
    value: &T,
    digest: impl Fn(&T) -> Digest,
    derived: &[&str],
) -> Result<usize, TestCaseError>
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let before = digest(value);
    let json = serde_json::to_value(value).unwrap();
    let mut checked = 0;
    for (at, changed) in one_leaf_changed(&json) {
        if at.split('/').any(|key| derived.contains(&key)) {
            continue;
        }
        let Ok(other) = serde_json::from_value::<T>(changed) else {
            continue;
        };
        if &other == value {
            continue;
        }
        prop_assert_ne!(digest(&other), before, "changing {} kept the digest", at);
        checked += 1;
    }
    Ok(checked)
}

fn digest_strategy() -> impl Strategy<Value = Digest> {
    any::<[u8; 32]>().prop_map(Digest::from_bytes)
}

fn halt_reason() -> impl Strategy<Value = HaltReason> {
    prop_oneof![
        "[a-z ]{0,8}".prop_map(|reason| HaltReason::GovernanceDenied { reason }),
        verdict_strategy().prop_map(|verdict| HaltReason::PreExecuteRejected { verdict }),
        verdict_strategy().prop_map(|verdict| HaltReason::NonOverridableBlocker { verdict }),
        verdict_strategy().prop_map(|verdict| HaltReason::WarningWithheld { verdict }),
        (1u32..9).prop_map(|cap| HaltReason::IterationCap { cap }),
        (bound(), verdict_strategy())
            .prop_map(|(bound, verdict)| HaltReason::RecoveryExhausted { bound, verdict }),
        verdict_strategy().prop_map(|verdict| HaltReason::RecoveryStalled { verdict }),
    ]
}

fn verdict_strategy() -> impl Strategy<Value = Verdict> {
    kleene::testing::foundation::verdict()
}

fn bound() -> impl Strategy<Value = ExhaustedBound> {
    prop_oneof![
        (0u32..9).prop_map(|max| ExhaustedBound::Depth { max }),
        (0u32..9).prop_map(|max| ExhaustedBound::FixBudget { max }),
    ]
}

fn closure_failure() -> impl Strategy<Value = ClosureFailure> {
    let phase = prop_oneof![
        Just(LoopPhase::Governance),
        Just(LoopPhase::PreValidate),
        Just(LoopPhase::Execute),
        Just(LoopPhase::PostValidate),
        Just(LoopPhase::MoveNext),
    ];
    prop_oneof![
        (phase, "[a-z ]{0,8}")
            .prop_map(|(phase, message)| ClosureFailure::Agent { phase, message }),
        (0u32..9, "[a-z ]{0,8}")
            .prop_map(|(depth, message)| ClosureFailure::FixId { depth, message }),
    ]
}

/// Every kind of audit event, with values from the testing strategies.
fn audit_event() -> impl Strategy<Value = AuditEvent> {
    use kleene::testing::closure::governance_decision;
    use kleene::testing::foundation::{task_id, validator_id};
    let it = 1u32..9;
    prop_oneof![
        (task_id(), task_id(), task_id()).prop_map(|(root, mode, project)| {
            AuditEvent::ClosureStarted {
                root_task_ref: root,
                session: Session::new(mode.as_str(), project.as_str()).unwrap(),
            }
        }),
        (
            task_id(),
            it.clone(),
            governance_decision(),
            proptest::option::of(digest_strategy())
        )
            .prop_map(
                |(task_ref, iteration, decision, token)| AuditEvent::Governed {
                    task_ref,
                    iteration,
                    decision,
                    token,
                }
            ),
        (task_id(), it.clone(), verdict_strategy()).prop_map(|(task_ref, iteration, verdict)| {
            AuditEvent::PreValidated {
                task_ref,
                iteration,
                verdict,
            }
        }),
        (task_id(), it.clone(), digest_strategy()).prop_map(|(task_ref, iteration, output)| {
            AuditEvent::Executed {
                task_ref,
                iteration,
                output,
            }
        }),
        (task_id(), it.clone(), verdict_strategy()).prop_map(|(task_ref, iteration, verdict)| {
            AuditEvent::PostValidated {
                task_ref,
                iteration,
                verdict,
            }
        }),
        (task_id(), it.clone(), any::<bool>()).prop_map(|(task_ref, iteration, done)| {
            AuditEvent::MovedNext {
                task_ref,
                iteration,
                next: if done { Next::Complete } else { Next::Continue },
            }
        }),
        (
            task_id(),
            task_id(),
            0u32..9,
            proptest::collection::vec(validator_id(), 0..3)
        )
            .prop_map(|(parent_ref, task_ref, depth, triggering_validators)| {
                AuditEvent::SubtaskSpawned {
                    parent_ref,
                    task_ref,
                    depth,
                    triggering_validators,
                }
            }),
        (task_id(), task_id(), 0u32..9, 0u32..9).prop_map(
            |(root_task_ref, task_ref, depth, fix_attempts)| AuditEvent::RecoveryResolved {
                root_task_ref,
                task_ref,
                depth,
                fix_attempts,
            }
        ),
        (task_id(), task_id(), 0u32..9, bound()).prop_map(
            |(root_task_ref, task_ref, depth, bound)| AuditEvent::RecoveryExhausted {
                root_task_ref,
                task_ref,
                depth,
                bound,
            }
        ),
        (task_id(), task_id(), 0u32..9).prop_map(|(root_task_ref, task_ref, depth)| {
            AuditEvent::RecoveryStalled {
                root_task_ref,
                task_ref,
                depth,
            }
        }),
        (task_id(), it.clone(), halt_reason()).prop_map(|(task_ref, iteration, reason)| {
            AuditEvent::Halted {
                task_ref,
                iteration,
                reason,
            }
        }),
        (task_id(), it, closure_failure()).prop_map(|(task_ref, iteration, failure)| {
            AuditEvent::Failed {
                task_ref,
                iteration,
                failure,
            }
        }),
    ]
}

proptest! {
    #[test]
    fn every_field_of_an_audit_event_changes_its_digest(event in audit_event()) {
        let checked = every_field_changes_the_digest(&event, AuditEvent::digest, &[])?;
        prop_assert!(checked > 0, "no field of {event:?} was checked");
    }

    #[test]
    fn every_field_of_an_audit_event_changes_its_entry_and_the_head(
        events in proptest::collection::vec(audit_event(), 1..4),
        at in any::<proptest::sample::Index>(),
    ) {
        let log = |events: &[AuditEvent]| {
            let mut log = AuditLog::new();
            for e in events {
                log.append(e.clone());
            }
            log.head()
        };
        let i = at.index(events.len());
        let head = log(&events);
        let json = serde_json::to_value(&events[i]).unwrap();
        for (where_, changed) in one_leaf_changed(&json) {
            let Ok(other) = serde_json::from_value::<AuditEvent>(changed) else { continue };
            if other == events[i] {
                continue;
            }
            let mut edited = events.clone();
            edited[i] = other;
            prop_assert_ne!(log(&edited), head, "changing event {} at {} kept the head", i, where_);
        }
    }

    #[test]
    fn every_field_of_a_spec_changes_its_digest(spec in kleene::testing::foundation::spec()) {
        every_field_changes_the_digest(&spec, Spec::digest, &[])?;
    }

    #[test]
    fn every_field_of_a_plan_changes_its_digest(
        plan in kleene::testing::plan::acyclic_plan(6),
    ) {
        let validate = |plan: &AppBuildPlan| {
            kleene::plan::Plan::draft(plan.clone()).normalize().consolidate().ok()?.validate().ok()
        };
        let Some(validated) = validate(&plan) else { return Ok(()) };
        let digest = |p: &AppBuildPlan| validate(p).map(|v| v.digest());
        let json = serde_json::to_value(&plan).unwrap();
        let mut checked = 0;
        for (at, changed) in one_leaf_changed(&json) {
            let Ok(other) = serde_json::from_value::<AppBuildPlan>(changed) else { continue };
            let Some(other_validated) = validate(&other) else { continue };
            if other_validated.to_app_build_plan() == validated.to_app_build_plan() {
                continue;
            }
            prop_assert_ne!(digest(&other), Some(validated.digest()), "changing {} kept the digest", at);
            checked += 1;
        }
        prop_assert!(checked > 0 || plan.tasks.is_empty());
    }
}

/// The evidence's failure history and event count are derived from the events the digest
/// covers (and shown, never compared), so they are the only fields it leaves out.
#[test]
fn every_field_of_the_evidence_changes_its_digest() {
    let checked = every_field_changes_the_digest(
        &evidence(),
        BatchEvidence::digest,
        &["failure_history", "events"],
    )
    .unwrap();
    assert!(checked > 50, "only {checked} fields checked");
}

#[test]
fn every_field_of_a_binding_and_a_closure_record_changes_its_digest() {
    let binding = crate::acceptance::records::binding(&crate::acceptance::records::build());
    assert!(every_field_changes_the_digest(&binding, BuildBinding::digest, &[]).unwrap() >= 4);
    let record = closure_record();
    assert!(every_field_changes_the_digest(&record, ClosureRecord::digest, &[]).unwrap() > 20);
}

/// The acceptance build again, with every accepted call's closure bound (record format 2
/// binds them in its task results).
fn accepted_with_closures() -> AcceptanceRecord {
    let b = crate::acceptance::records::build();
    let settled = ClosureSettlement::of(&closure_record());
    let inventory = b
        .plan
        .tasks()
        .map(|task| InventoryEntry {
            task: task.id.clone(),
            owner: task.owner.clone(),
            budget: task.retry_limit + 1,
        })
        .collect();
    let mut events = vec![EvidenceEvent::Started {
        channel: b.evidence.channel().clone(),
        plan_digest: b.plan.digest(),
        evidence_version: EVIDENCE_VERSION,
        inputs: BTreeMap::new(),
        recovery: false,
        inventory,
    }];
    for (task, accepted) in b.evidence.accepted_outputs() {
        events.extend([
            EvidenceEvent::Reserved {
                task: task.clone(),
                attempt: 1,
                input_digest: d(7),
            },
            EvidenceEvent::ClosureSettled {
                task: task.clone(),
                attempt: 1,
                closure: settled.clone(),
            },
            EvidenceEvent::Settled {
                task: task.clone(),
                attempt: 1,
                settlement: Settlement::Accepted {
                    candidate: accepted.candidate().clone(),
                    digest: accepted.digest(),
                },
            },
        ]);
    }
    let evidence = BatchEvidence::fold(events).unwrap();
    let snapshot = Snapshot::from_evidence(&evidence).unwrap();
    accept(
        &b.plan,
        &evidence,
        &snapshot,
        &crate::acceptance::records::binding(&b),
    )
    .unwrap()
}

/// Every field of a stored acceptance record is under one of its digests: a record with any
/// one field changed does not load, and it is a digest (or the format) that refuses it.
#[test]
fn every_field_of_an_acceptance_record_is_under_a_digest() {
    use kleene::acceptance::RecordError;
    let record = accepted_with_closures();
    assert!(record.task_results().iter().all(|r| r.closure().is_some()));
    let json: Value = serde_json::from_str(&record.to_json()).unwrap();
    // Reading checks every digest first and the canonical layout last, so a record written
    // in another layout (serde_json sorts the keys) reads as far as the layout check: the
    // digests of the untouched record hold.
    let read = |v: &Value| StoredRecord::from_json(&serde_json::to_string_pretty(v).unwrap());
    assert!(matches!(read(&json), Err(RecordError::NonCanonical)));
    let mut refused_by_a_digest = 0;
    for (at, changed) in one_leaf_changed(&json) {
        match read(&changed) {
            Ok(_) | Err(RecordError::NonCanonical) => {
                panic!("a record with {at} changed passes every digest")
            }
            Err(RecordError::Digest { .. }) => refused_by_a_digest += 1,
            // A changed format is refused as a format; a changed id or path may not parse.
            Err(_) => {}
        }
    }
    assert!(refused_by_a_digest > 40, "{refused_by_a_digest}");
}

/// A repair target's fingerprint covers every field of every diagnostic routed to it.
#[test]
fn every_field_of_a_diagnostic_changes_the_repair_fingerprint() {
    let b = crate::acceptance::records::build();
    let fingerprint = |path_: &str, validator: &str, message: &str| {
        let finding = Diagnostic::new(path(path_), ValidatorId::new(validator).unwrap(), message);
        let routes = RepairLedger::default()
            .route(&b.plan, &b.evidence, &b.snapshot, &[finding])
            .unwrap();
        routes.requests()[0].fingerprint()
    };
    let base = fingerprint("backend/services.py", "wiring", "no create()");
    assert_ne!(
        fingerprint("backend/schemas.py", "wiring", "no create()"),
        base
    );
    assert_ne!(
        fingerprint("backend/services.py", "lint", "no create()"),
        base
    );
    assert_ne!(
        fingerprint("backend/services.py", "wiring", "no list()"),
        base
    );
    assert_eq!(
        fingerprint("backend/services.py", "wiring", "no create()"),
        base
    );
}
