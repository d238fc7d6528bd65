//! The batch evidence payloads (`BEVT`, `EVID`) and the acceptance record, pinned byte for
//! byte: the bytes today's build writes for one value of every shape are committed under
//! `tests/fixtures/payloads/`, and each must decode to the value built here and encode back
//! to exactly the same bytes. A refactor of a domain type that moved a byte fails here.
//!
//! Run with `KLEENE_WRITE_FIXTURES=1` to (re)write the fixtures; they should never need to
//! change (a change is a format change: bump the payload's version instead).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kleene::acceptance::{AcceptanceRecord, BuildBinding, RecordError, StoredRecord, accept};
use kleene::batch::cache::ActionKeyParts;
use kleene::batch::evidence::{ReusedClosure, ReusedFrom};
use kleene::batch::{
    Batch, BatchEvidence, Candidate, MemoryJournal, Rejection, evidence::ClosureEnd,
    evidence::ClosureSettlement, evidence::EVIDENCE_VERSION, evidence::EvidenceEvent,
    evidence::InventoryEntry, evidence::Settlement, recovery::IneligibleReason,
    worker::InfrastructureFailure,
};
use kleene::checkpoint::{self, CheckpointError, InvalidPayload};
use kleene::closure::{
    ClosureRecord, ExecutionOutput, RecoveryPolicy, Severity, Spec, ValidatorResult, Verdict,
    run_to_closure, step::RecoverOn, step::Session,
};
use kleene::id::{AgentId, Digest, ValidatorId};
use kleene::snapshot::Snapshot;
use kleene::testing::batch::{ScriptedOutcome, ScriptedWorker};
use kleene::testing::closure::ScriptedAgent;
use kleene::testing::foundation::task_id;
use kleene::{Task, ValidatedPlan};
use proptest::prelude::*;

use crate::support::{chan, id, path, validated};

fn d(byte: u8) -> Digest {
    Digest::from_bytes([byte; 32])
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/payloads")
        .join(name)
}

/// The committed bytes of `name`, (re)written from `bytes` when asked to.
fn pinned(name: &str, bytes: &[u8]) -> Vec<u8> {
    let path = fixture(name);
    if std::env::var_os("KLEENE_WRITE_FIXTURES").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
    }
    std::fs::read(&path).unwrap_or_else(|e| panic!("read fixture {}: {e}", path.display()))
}

/// A closure that needed one fix: a blocker on the first try, clean after the fix.
fn closure_record() -> ClosureRecord {
    let failing = Verdict::new([ValidatorResult::new(
        ValidatorId::new("tests").unwrap(),
        Severity::Blocker,
        true,
        "test a ... FAILED",
    )]);
    let mut agent = ScriptedAgent::new()
        .outputs([
            ExecutionOutput::new("first try"),
            ExecutionOutput::new("fixed"),
        ])
        .post_verdicts([failing, Verdict::clean()]);
    let policy = RecoveryPolicy::builder()
        .recover_on(RecoverOn::BlockersAndWarnings)
        .build()
        .unwrap();
    run_to_closure(
        Task::new(id("a"), Spec::new("add /login").with_criterion("200")),
        Session::new("build", "wire").unwrap(),
        &mut agent,
        &policy,
    )
}

fn settled_closure(end: ClosureEnd) -> ClosureSettlement {
    let mut settled = ClosureSettlement::of(&closure_record());
    settled.end = end;
    settled
}

/// The ownership check's rejection, as a real batch makes it (it has no public
/// constructor).
fn not_owned() -> Rejection {
    let plan = validated(
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
    evidence.task(&id("owned")).unwrap().rejections()[0]
        .rejection()
        .clone()
}

fn candidate(file: &str, body: &[u8]) -> Candidate {
    Candidate::new(BTreeMap::from([
        (path(file), body.to_vec()),
        (path("docs/empty.md"), Vec::new()),
    ]))
}

/// One event of every variant, and of every way a call settles.
fn events() -> Vec<(&'static str, EvidenceEvent)> {
    let accepted = candidate("src/a.rs", b"fn a() {}\n");
    let reasons = [
        IneligibleReason::InputsChanged,
        IneligibleReason::DiagnosticsMissing,
        IneligibleReason::BudgetExhausted,
        IneligibleReason::RootAlreadyConsumed,
        IneligibleReason::RequestAlreadyConsumed,
        IneligibleReason::UncertainInterruptedExecution,
        IneligibleReason::InfrastructureFailure,
        IneligibleReason::AlreadyAccepted,
    ];
    let settled = |name, settlement| {
        (
            name,
            EvidenceEvent::Settled {
                task: id("a"),
                attempt: 2,
                settlement,
            },
        )
    };
    vec![
        (
            "started",
            EvidenceEvent::Started {
                channel: chan("chan-wire"),
                plan_digest: d(1),
                evidence_version: EVIDENCE_VERSION,
                inputs: BTreeMap::from([("spec".to_owned(), d(2)), ("tests".to_owned(), d(3))]),
                recovery: true,
                inventory: vec![
                    InventoryEntry {
                        task: id("a"),
                        owner: AgentId::new("BackendAgent").unwrap(),
                        budget: 3,
                    },
                    InventoryEntry {
                        task: id("b"),
                        owner: AgentId::new("FrontendAgent").unwrap(),
                        budget: 1,
                    },
                ],
            },
        ),
        (
            "reserved",
            EvidenceEvent::Reserved {
                task: id("a"),
                attempt: 2,
                input_digest: d(4),
            },
        ),
        settled(
            "settled_accepted",
            Settlement::Accepted {
                digest: accepted.digest(),
                candidate: accepted,
            },
        ),
        settled(
            "settled_rejected_contract",
            Settlement::Rejected {
                candidate: candidate("src/b.rs", b"fn b() {"),
                rejection: Rejection::contract(&id("a"), "unbalanced brace"),
            },
        ),
        settled(
            "settled_rejected_not_owned",
            Settlement::Rejected {
                candidate: candidate("b.txt", b"x"),
                rejection: not_owned(),
            },
        ),
        settled(
            "settled_infrastructure_process_missing",
            Settlement::Infrastructure(InfrastructureFailure::ProcessMissing {
                detail: "no such file".to_owned(),
            }),
        ),
        settled(
            "settled_infrastructure_timeout",
            Settlement::Infrastructure(InfrastructureFailure::Timeout { after_ms: 1500 }),
        ),
        settled(
            "settled_infrastructure_transport",
            Settlement::Infrastructure(InfrastructureFailure::Transport {
                detail: "broken pipe".to_owned(),
            }),
        ),
        settled(
            "settled_infrastructure_agent",
            Settlement::Infrastructure(InfrastructureFailure::Agent {
                detail: "tool crashed".to_owned(),
            }),
        ),
        (
            "interrupted",
            EvidenceEvent::Interrupted {
                task: id("a"),
                attempt: 1,
            },
        ),
        (
            "withdrawn",
            EvidenceEvent::Withdrawn {
                task: id("a"),
                attempt: 3,
                detail: "disk full".to_owned(),
            },
        ),
        (
            "drained",
            EvidenceEvent::Drained {
                task: id("b"),
                blocked_by: id("a"),
            },
        ),
        (
            "recovery_consumed",
            EvidenceEvent::RecoveryConsumed {
                request: d(5),
                granted: vec![id("a")],
                released: vec![id("b")],
                refused: reasons.into_iter().map(|why| (id("c"), why)).collect(),
            },
        ),
        (
            "fix_drawn",
            EvidenceEvent::FixDrawn {
                task: id("a"),
                attempt: 2,
                fix: id("a_fix_1"),
            },
        ),
        (
            "closure_settled_resolved",
            EvidenceEvent::ClosureSettled {
                task: id("a"),
                attempt: 2,
                closure: ClosureSettlement::of(&closure_record()),
            },
        ),
        (
            "closure_settled_halted",
            EvidenceEvent::ClosureSettled {
                task: id("a"),
                attempt: 2,
                closure: settled_closure(ClosureEnd::Halted {
                    depth: 1,
                    halt: "recovery_stalled".to_owned(),
                }),
            },
        ),
        (
            "closure_settled_failed",
            EvidenceEvent::ClosureSettled {
                task: id("a"),
                attempt: 2,
                closure: settled_closure(ClosureEnd::Failed { depth: 0 }),
            },
        ),
    ]
}

/// Evidence of a run with an accepted task (whose call ran a closure that drew a fix), a
/// failed one (a refused candidate, then a withdrawn and an interrupted call), one failed
/// on infrastructure, a drained one and a consumed recovery request.
fn snapshot_evidence() -> BatchEvidence {
    let entry = |task: &str, budget| InventoryEntry {
        task: id(task),
        owner: AgentId::new("w").unwrap(),
        budget,
    };
    let accepted = candidate("src/a.rs", b"fn a() {}\n");
    let reserve = |task: &str, attempt, byte| EvidenceEvent::Reserved {
        task: id(task),
        attempt,
        input_digest: d(byte),
    };
    BatchEvidence::fold([
        EvidenceEvent::Started {
            channel: chan("chan-wire"),
            plan_digest: d(1),
            evidence_version: EVIDENCE_VERSION,
            inputs: BTreeMap::from([("spec".to_owned(), d(2))]),
            recovery: true,
            inventory: vec![entry("a", 2), entry("b", 3), entry("c", 1), entry("d", 1)],
        },
        reserve("a", 1, 10),
        EvidenceEvent::FixDrawn {
            task: id("a"),
            attempt: 1,
            fix: id("a_fix_1"),
        },
        EvidenceEvent::ClosureSettled {
            task: id("a"),
            attempt: 1,
            closure: ClosureSettlement::of(&closure_record()),
        },
        EvidenceEvent::Settled {
            task: id("a"),
            attempt: 1,
            settlement: Settlement::Accepted {
                digest: accepted.digest(),
                candidate: accepted,
            },
        },
        reserve("b", 1, 11),
        EvidenceEvent::Settled {
            task: id("b"),
            attempt: 1,
            settlement: Settlement::Rejected {
                candidate: candidate("src/b.rs", b"fn b() {"),
                rejection: Rejection::contract(&id("b"), "unbalanced brace"),
            },
        },
        EvidenceEvent::RecoveryConsumed {
            request: d(5),
            granted: vec![id("b")],
            released: Vec::new(),
            refused: vec![(id("c"), IneligibleReason::DiagnosticsMissing)],
        },
        reserve("b", 2, 12),
        EvidenceEvent::Withdrawn {
            task: id("b"),
            attempt: 2,
            detail: "disk full".to_owned(),
        },
        reserve("b", 2, 13),
        EvidenceEvent::Interrupted {
            task: id("b"),
            attempt: 2,
        },
        reserve("c", 1, 14),
        EvidenceEvent::Settled {
            task: id("c"),
            attempt: 1,
            settlement: Settlement::Infrastructure(InfrastructureFailure::Timeout {
                after_ms: 1500,
            }),
        },
        EvidenceEvent::Drained {
            task: id("d"),
            blocked_by: id("c"),
        },
    ])
    .unwrap()
}

/// `bytes`, an envelope, relabelled as format `version` and resealed.
fn as_version(bytes: &[u8], version: u16) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out[4..6].copy_from_slice(&version.to_le_bytes());
    reseal(&out)
}

/// Every event's envelope of format version 2 is pinned (written before outputs were
/// reused, never rewritten): it decodes to the event, and today's build writes the same
/// payload under format version 3.
#[test]
fn every_evidence_event_keeps_its_bytes() {
    for (name, event) in events() {
        let committed = std::fs::read(fixture(&format!("evidence_event_{name}.bevt"))).unwrap();
        let decoded = checkpoint::decode::<EvidenceEvent>(&committed).unwrap();
        assert_eq!(decoded, event, "{name}");
        let today = checkpoint::encode(&event).unwrap();
        assert_eq!(today, as_version(&committed, 3), "{name}");
    }
}

/// Evidence of one task whose output was reused from call 3 of another run.
fn reused_evidence() -> (EvidenceEvent, BatchEvidence) {
    let plan: ValidatedPlan = validated(
        r#"{"tasks": [{"id": "w", "owner": "W", "spec": {"intent": "w"}, "owned_paths": ["w.txt"]}]}"#,
    );
    let key = ActionKeyParts::new(plan.tasks().next().unwrap()).key();
    let output = candidate("w.txt", b"reused\n");
    let reused = EvidenceEvent::Reused {
        task: id("w"),
        from: ReusedFrom::new(
            key,
            chan("run-0"),
            3,
            Some(ReusedClosure::new(d(21), d(22))),
        ),
        digest: output.digest(),
        candidate: output,
    };
    let evidence = BatchEvidence::fold([
        EvidenceEvent::Started {
            channel: chan("chan-wire"),
            plan_digest: d(1),
            evidence_version: EVIDENCE_VERSION,
            inputs: BTreeMap::new(),
            recovery: false,
            inventory: vec![InventoryEntry {
                task: id("w"),
                owner: AgentId::new("W").unwrap(),
                budget: 1,
            }],
        },
        reused.clone(),
    ])
    .unwrap();
    (reused, evidence)
}

/// The reused-output event (format version 3) is pinned: it decodes to the event and
/// re-encodes identically.
#[test]
fn the_reused_output_event_keeps_its_bytes() {
    let (event, _) = reused_evidence();
    let bytes = checkpoint::encode(&event).unwrap();
    let committed = pinned("evidence_event_reused_v3.bevt", &bytes);
    assert_eq!(
        checkpoint::decode::<EvidenceEvent>(&committed).unwrap(),
        event
    );
    assert_eq!(bytes, committed);
}

/// The snapshot of a run (every status, a closure, a recovery, the failure history), pinned
/// at format version 2: it decodes to the evidence, and today's build writes the same
/// payload with an empty list of reused outputs under version 3. A snapshot with a reused
/// output is pinned at version 3.
#[test]
fn an_evidence_snapshot_keeps_its_bytes() {
    let evidence = snapshot_evidence();
    let committed = std::fs::read(fixture("evidence_snapshot.evid")).unwrap();
    let decoded = checkpoint::decode::<BatchEvidence>(&committed).unwrap();
    assert_eq!(decoded, evidence);
    assert_eq!(decoded.digest(), evidence.digest());
    assert_eq!(decoded.fix_attempts_used(), 1);
    let today = checkpoint::encode(&evidence).unwrap();
    // The payload's length (a u64 after the header) grows by the empty list's one byte.
    let mut grown = committed.clone();
    grown.push(0);
    let len = u64::from_le_bytes(committed[11..19].try_into().unwrap()) + 1;
    grown[11..19].copy_from_slice(&len.to_le_bytes());
    assert_eq!(today, as_version(&grown, 3));

    let (_, reused) = reused_evidence();
    let bytes = checkpoint::encode(&reused).unwrap();
    let committed = pinned("evidence_snapshot_reused_v3.evid", &bytes);
    let decoded = checkpoint::decode::<BatchEvidence>(&committed).unwrap();
    assert_eq!(decoded, reused);
    assert_eq!(decoded.digest(), reused.digest());
    assert_eq!(decoded.reused().count(), 1);
    assert_eq!(bytes, committed);
}

/// A two-task plan, both accepted with closures bound, and its acceptance record.
fn accepted_record() -> AcceptanceRecord {
    let plan: ValidatedPlan = validated(
        r#"{"tasks": [
          {"id": "api", "owner": "BackendAgent", "spec": {"intent": "api"}, "owned_paths": ["src/api.rs"]},
          {"id": "page", "owner": "FrontendAgent", "spec": {"intent": "page"}, "owned_paths": ["web/page.tsx", "web/empty.css"], "depends_on": ["api"]}
        ]}"#,
    );
    let outputs = [
        (
            "api",
            Candidate::new(BTreeMap::from([(
                path("src/api.rs"),
                b"fn api() {}\n".to_vec(),
            )])),
        ),
        (
            "page",
            Candidate::new(BTreeMap::from([
                (path("web/page.tsx"), b"export default 1;\n".to_vec()),
                (path("web/empty.css"), Vec::new()),
            ])),
        ),
    ];
    let mut events = vec![EvidenceEvent::Started {
        channel: chan("chan-wire"),
        plan_digest: plan.digest(),
        evidence_version: EVIDENCE_VERSION,
        inputs: BTreeMap::new(),
        recovery: false,
        inventory: plan
            .tasks()
            .map(|task| InventoryEntry {
                task: task.id.clone(),
                owner: task.owner.clone(),
                budget: task.retry_limit + 1,
            })
            .collect(),
    }];
    let settled = ClosureSettlement::of(&closure_record());
    for (task, candidate) in outputs {
        events.extend([
            EvidenceEvent::Reserved {
                task: id(task),
                attempt: 1,
                input_digest: d(7),
            },
            EvidenceEvent::ClosureSettled {
                task: id(task),
                attempt: 1,
                closure: settled.clone(),
            },
            EvidenceEvent::Settled {
                task: id(task),
                attempt: 1,
                settlement: Settlement::Accepted {
                    digest: candidate.digest(),
                    candidate,
                },
            },
        ]);
    }
    let evidence = BatchEvidence::fold(events).unwrap();
    let snapshot = Snapshot::from_evidence(&evidence).unwrap();
    let binding = BuildBinding::new(chan("chan-wire"), plan.digest(), EVIDENCE_VERSION);
    accept(&plan, &evidence, &snapshot, &binding).unwrap()
}

/// The acceptance record (format 2, closures bound) is pinned: the committed text reads
/// back, re-renders to exactly the same bytes and states what the record built here
/// states. (Its build binding names the kleene version that wrote it, so the comparison
/// is by field, not by digest.)
#[test]
fn an_acceptance_record_keeps_its_bytes() {
    let record = accepted_record();
    assert!(record.task_results().iter().all(|r| r.closure().is_some()));
    let committed = pinned("acceptance_record_v2.json", record.to_json().as_bytes());
    let text = String::from_utf8(committed).unwrap();
    let stored = StoredRecord::from_json(&text).unwrap();
    assert_eq!(stored.to_json(), text);
    assert_eq!(stored.task_results(), record.task_results());
    assert_eq!(stored.files(), record.files());
    assert_eq!(stored.evidence_digest(), record.evidence_digest());
    let (a, b) = (stored.binding(), record.binding());
    assert_eq!(
        (a.channel(), a.plan_digest(), a.evidence_version()),
        (b.channel(), b.plan_digest(), b.evidence_version())
    );
    if a.crate_version() == b.crate_version() {
        assert_eq!(stored.digest(), record.digest());
        assert_eq!(record.to_json(), text);
    }
    assert!(text.contains("\"format\": 2"));
}

/// The format-1 record committed before closures were bound still reads, binding none.
#[test]
fn an_acceptance_record_of_format_one_still_reads() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/acceptance/record-v1.json"),
    )
    .unwrap();
    let stored = StoredRecord::from_json(&text).unwrap();
    assert_eq!(stored.to_json(), text);
    assert!(stored.task_results().iter().all(|r| r.closure().is_none()));
}

/// A record of a format newer than this build's is refused by its number.
#[test]
fn an_acceptance_record_of_a_newer_format_is_refused_by_number() {
    let text = accepted_record().to_json();
    let newer = text.replacen("\"format\": 2", "\"format\": 3", 1);
    assert_eq!(
        StoredRecord::from_json(&newer).unwrap_err(),
        RecordError::Format { found: 3 }
    );
}

/// Payloads of a version newer than this build's are refused by their number, with the
/// versions this build reads.
#[test]
fn evidence_payloads_of_a_newer_version_are_refused_by_number() {
    let event = checkpoint::encode(&events()[1].1).unwrap();
    let snapshot = checkpoint::encode(&snapshot_evidence()).unwrap();
    for (mut bytes, kind) in [(event, "BEVT"), (snapshot, "EVID")] {
        bytes[4..6].copy_from_slice(&4u16.to_le_bytes());
        let resealed = reseal(&bytes);
        let err = match kind {
            "BEVT" => checkpoint::decode::<EvidenceEvent>(&resealed).map(|_| ()),
            _ => checkpoint::decode::<BatchEvidence>(&resealed).map(|_| ()),
        }
        .unwrap_err();
        assert!(
            matches!(
                &err,
                CheckpointError::UnsupportedVersion { kind: k, found: 4, min: 1, max: 3 } if k == kind
            ),
            "{err}"
        );
    }
}

/// The envelope's checksum recomputed after its header was edited (the checksum carries no
/// secret; see the checkpoint module).
fn reseal(bytes: &[u8]) -> Vec<u8> {
    let mut h = blake3::Hasher::new_derive_key("kleene checkpoint envelope v1");
    h.update(&bytes[..19]);
    h.update(&bytes[51..]);
    let mut out = bytes.to_vec();
    out[19..51].copy_from_slice(h.finalize().as_bytes());
    out
}

/// A version-1 event payload holding one of the closure events (which version 2 added) is
/// refused as invalid, naming the event, instead of being read as if version 1 had it.
/// (Before the events had their own record, version-1 bytes were decoded with the newest
/// shape and such a payload loaded.)
#[test]
fn a_version_one_event_cannot_be_a_closure_event() {
    for (name, event) in ["fix_drawn", "closure_settled"].iter().zip(
        events()
            .into_iter()
            .filter(|(n, _)| *n == "fix_drawn" || *n == "closure_settled_resolved"),
    ) {
        let mut bytes = checkpoint::encode(&event.1).unwrap();
        bytes[4..6].copy_from_slice(&1u16.to_le_bytes());
        let err = checkpoint::decode::<EvidenceEvent>(&reseal(&bytes)).unwrap_err();
        assert!(
            matches!(
                &err,
                CheckpointError::Invalid { kind, reason } if kind == "BEVT"
                    && matches!(**reason, InvalidPayload::NewerEvent { version: 1, event } if event == *name)
            ),
            "{err}"
        );
    }
    // An event version 1 had still reads from a version-1 payload.
    let (_, reserved) = events().swap_remove(1);
    let mut bytes = checkpoint::encode(&reserved).unwrap();
    bytes[4..6].copy_from_slice(&1u16.to_le_bytes());
    assert_eq!(
        checkpoint::decode::<EvidenceEvent>(&reseal(&bytes)).unwrap(),
        reserved
    );
}

/// A snapshot whose accepted output was changed after it was accepted is refused by a typed
/// error naming the task, not loaded and not reported as an undecodable payload.
#[test]
fn a_snapshot_with_a_changed_accepted_output_is_refused_naming_the_task() {
    let mut bytes = checkpoint::encode(&snapshot_evidence()).unwrap();
    let content = b"fn a() {}\n";
    let at = bytes
        .windows(content.len())
        .position(|w| w == content)
        .unwrap();
    bytes[at] = b'F';
    let err = checkpoint::decode::<BatchEvidence>(&reseal(&bytes)).unwrap_err();
    assert!(
        matches!(
            &err,
            CheckpointError::Invalid { kind, reason } if kind == "EVID"
                && matches!(&**reason, InvalidPayload::AcceptedDigest { task, .. } if *task == id("a"))
        ),
        "{err}"
    );
    assert!(err.to_string().contains("task a"), "{err}");
}

fn agent_id() -> impl Strategy<Value = AgentId> {
    "[A-Z][a-zA-Z]{0,10}".prop_map(|s| AgentId::new(s).unwrap())
}

fn digest() -> impl Strategy<Value = Digest> {
    any::<[u8; 32]>().prop_map(Digest::from_bytes)
}

fn candidate_strategy() -> impl Strategy<Value = Candidate> {
    prop::collection::btree_map(
        "[a-z]{1,6}(/[a-z]{1,6})?\\.(rs|py)".prop_map(|s| path(&s)),
        prop::collection::vec(any::<u8>(), 0..24),
        0..4,
    )
    .prop_map(Candidate::new)
}

fn text() -> impl Strategy<Value = String> {
    "[ -~]{0,16}(é|→)?"
}

fn rejection() -> impl Strategy<Value = Rejection> {
    prop_oneof![
        (task_id(), "[a-z]{1,6}\\.rs").prop_map(|(task, p)| Rejection::NotOwned {
            task,
            path: path(&p),
        }),
        (task_id(), text()).prop_map(|(task, message)| Rejection::contract(&task, message)),
    ]
}

fn infrastructure() -> impl Strategy<Value = InfrastructureFailure> {
    prop_oneof![
        text().prop_map(|detail| InfrastructureFailure::ProcessMissing { detail }),
        any::<u64>().prop_map(|after_ms| InfrastructureFailure::Timeout { after_ms }),
        text().prop_map(|detail| InfrastructureFailure::Transport { detail }),
        text().prop_map(|detail| InfrastructureFailure::Agent { detail }),
    ]
}

fn settlement() -> impl Strategy<Value = Settlement> {
    prop_oneof![
        (candidate_strategy(), digest())
            .prop_map(|(candidate, digest)| Settlement::Accepted { candidate, digest }),
        (candidate_strategy(), rejection()).prop_map(|(candidate, rejection)| {
            Settlement::Rejected {
                candidate,
                rejection,
            }
        }),
        infrastructure().prop_map(Settlement::Infrastructure),
    ]
}

fn ineligible() -> impl Strategy<Value = IneligibleReason> {
    prop::sample::select(vec![
        IneligibleReason::InputsChanged,
        IneligibleReason::DiagnosticsMissing,
        IneligibleReason::BudgetExhausted,
        IneligibleReason::RootAlreadyConsumed,
        IneligibleReason::RequestAlreadyConsumed,
        IneligibleReason::UncertainInterruptedExecution,
        IneligibleReason::InfrastructureFailure,
        IneligibleReason::AlreadyAccepted,
    ])
}

fn closure_settlement() -> impl Strategy<Value = ClosureSettlement> {
    static BASE: std::sync::LazyLock<ClosureSettlement> =
        std::sync::LazyLock::new(|| ClosureSettlement::of(&closure_record()));
    let end = prop_oneof![
        any::<u32>().prop_map(|depth| ClosureEnd::Resolved { depth }),
        (any::<u32>(), "[a-z_]{1,20}").prop_map(|(depth, halt)| ClosureEnd::Halted { depth, halt }),
        any::<u32>().prop_map(|depth| ClosureEnd::Failed { depth }),
    ];
    (any::<u32>(), end, digest(), digest()).prop_map(|(fix_attempts, end, head, record)| {
        let mut settled = BASE.clone();
        settled.fix_attempts = fix_attempts;
        settled.end = end;
        settled.audit_head = head;
        settled.record_digest = record;
        settled
    })
}

fn event() -> impl Strategy<Value = EvidenceEvent> {
    let tasks = || prop::collection::vec(task_id(), 0..4);
    prop_oneof![
        (
            "[a-z][a-z0-9-]{0,10}",
            digest(),
            any::<u32>(),
            prop::collection::btree_map(text(), digest(), 0..3),
            any::<bool>(),
            prop::collection::vec((task_id(), agent_id(), any::<u32>()), 0..4),
        )
            .prop_map(
                |(channel, plan_digest, evidence_version, inputs, recovery, inventory)| {
                    EvidenceEvent::Started {
                        channel: chan(&channel),
                        plan_digest,
                        evidence_version,
                        inputs,
                        recovery,
                        inventory: inventory
                            .into_iter()
                            .map(|(task, owner, budget)| InventoryEntry {
                                task,
                                owner,
                                budget,
                            })
                            .collect(),
                    }
                }
            ),
        (task_id(), any::<u32>(), digest()).prop_map(|(task, attempt, input_digest)| {
            EvidenceEvent::Reserved {
                task,
                attempt,
                input_digest,
            }
        }),
        (task_id(), any::<u32>(), settlement()).prop_map(|(task, attempt, settlement)| {
            EvidenceEvent::Settled {
                task,
                attempt,
                settlement,
            }
        }),
        (task_id(), any::<u32>())
            .prop_map(|(task, attempt)| EvidenceEvent::Interrupted { task, attempt }),
        (task_id(), any::<u32>(), text()).prop_map(|(task, attempt, detail)| {
            EvidenceEvent::Withdrawn {
                task,
                attempt,
                detail,
            }
        }),
        (task_id(), task_id())
            .prop_map(|(task, blocked_by)| EvidenceEvent::Drained { task, blocked_by }),
        (
            digest(),
            tasks(),
            tasks(),
            prop::collection::vec((task_id(), ineligible()), 0..4),
        )
            .prop_map(|(request, granted, released, refused)| {
                EvidenceEvent::RecoveryConsumed {
                    request,
                    granted,
                    released,
                    refused,
                }
            }),
        (task_id(), any::<u32>(), task_id())
            .prop_map(|(task, attempt, fix)| EvidenceEvent::FixDrawn { task, attempt, fix }),
        (task_id(), any::<u32>(), closure_settlement()).prop_map(|(task, attempt, closure)| {
            EvidenceEvent::ClosureSettled {
                task,
                attempt,
                closure,
            }
        }),
    ]
}

proptest! {
    /// Every event reads back as itself, and its bytes re-encode identically.
    #[test]
    fn every_event_round_trips_through_its_record(event in event()) {
        let bytes = checkpoint::encode(&event).unwrap();
        let back = checkpoint::decode::<EvidenceEvent>(&bytes).unwrap();
        prop_assert_eq!(&back, &event);
        prop_assert_eq!(checkpoint::encode(&back).unwrap(), bytes);
    }

    /// Garbage behind a valid envelope of either payload kind and either version reaches
    /// the record decoders; it is refused with a typed error, never a panic.
    #[test]
    fn garbage_evidence_payloads_are_refused_without_a_panic(
        payload in prop::collection::vec(any::<u8>(), 0..200),
        version in 1u16..=2,
    ) {
        let mut bytes = checkpoint::encode(&events()[1].1).unwrap();
        bytes.truncate(51);
        bytes.extend_from_slice(&payload);
        bytes[4..6].copy_from_slice(&version.to_le_bytes());
        bytes[11..19].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        let _ = checkpoint::decode::<EvidenceEvent>(&reseal(&bytes));
        bytes[7..11].copy_from_slice(b"EVID");
        let _ = checkpoint::decode::<BatchEvidence>(&reseal(&bytes));
    }
}
