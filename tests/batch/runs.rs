//! Batch executor: R11's execution-evidence cases, the offline integration run, and the
//! crash-anywhere property.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use kleene::batch::{
    Batch, BatchError, BatchErrorKind, BatchEvidence, Candidate, FileJournal, MemoryJournal,
    Rejection, TaskStatus, Worker, WorkerCall, WorkerFailure, evidence::FailureCause,
    journal::EvidenceJournal, recovery::IneligibleReason, recovery::RecoveryError,
    recovery::RecoveryRequest, worker::InfrastructureFailure, worker::PendingTurnReplay,
};
use kleene::testing::batch::{ImageJournal, ScriptedOutcome, ScriptedWorker};
use kleene::{
    AppBuildPlan, ValidatedPlan,
    id::{AgentId, ChannelId},
    plan::{Plan, PlannedTask},
};
use kleene::{closure::Spec, id::TaskId, plan::TaskKind};
use proptest::prelude::*;

use crate::support::{chan, id, path, validated};

fn files(entries: &[(&str, &str)]) -> Candidate {
    Candidate::new(
        entries
            .iter()
            .map(|(p, c)| (path(p), c.as_bytes().to_vec()))
            .collect(),
    )
}

fn ok(entries: &[(&str, &str)]) -> ScriptedOutcome {
    ScriptedOutcome::Candidate(files(entries))
}

/// The R11 shape: a module lane (synthesised), its model, a service that must not write the
/// model's schemas, and a page after the service.
pub(crate) fn app_plan() -> ValidatedPlan {
    validated(APP_PLAN)
}

/// The plan of [`app_plan`], as JSON.
pub(crate) const APP_PLAN: &str = r#"{"tasks": [
      {"id": "model_tasks", "kind": {"lane": "model", "module": "tasks"},
       "owner": "ModelAgent", "spec": {"intent": "task schema"},
       "owned_paths": ["backend/schemas.py"]},
      {"id": "service_tasks", "kind": {"lane": "service", "module": "tasks"},
       "owner": "ServiceAgent", "spec": {"intent": "task handlers"},
       "owned_paths": ["backend/services/tasks.py"]},
      {"id": "page_tasks", "kind": {"lane": "page", "module": "tasks"},
       "owner": "PageAgent", "spec": {"intent": "task list page"},
       "owned_paths": ["frontend/pages/tasks.tsx"], "depends_on": ["service_tasks"]}
    ]}"#;

fn model() -> TaskId {
    id("model_tasks")
}
fn service() -> TaskId {
    id("service_tasks")
}
fn page() -> TaskId {
    id("page_tasks")
}

/// A service that first writes the model's schemas (outside its ownership), then corrects.
fn app_worker() -> ScriptedWorker {
    ScriptedWorker::new()
        .script(model(), [ok(&[("backend/schemas.py", "class Task: ...")])])
        .script(
            service(),
            [
                ok(&[
                    ("backend/services/tasks.py", "class TaskService: ..."),
                    ("backend/schemas.py", "class Task: hijacked"),
                ]),
                ok(&[("backend/services/tasks.py", "class UserTaskModule: ...")]),
            ],
        )
        .script(page(), [ok(&[("frontend/pages/tasks.tsx", "<TaskList/>")])])
}

fn recovering<'p>(plan: &'p ValidatedPlan, channel: &str) -> Batch<'p> {
    Batch::new(plan, chan(channel)).with_recovery(true)
}

#[test]
fn offline_integration_prerequisite_invalid_output_retained_correction_released_complete() {
    let plan = app_plan();
    let batch = recovering(&plan, "offline");
    let mut journal = MemoryJournal::default();
    let mut worker = app_worker();

    // First pass: the prerequisite succeeds, the service output is invalid and retained, the
    // page is drained behind it.
    let first = batch.dispatch(&mut worker, &(), &mut journal).unwrap();
    assert_eq!(first.status(&model()), Some(TaskStatus::Accepted));
    assert_eq!(first.status(&service()), Some(TaskStatus::Failed));
    assert_eq!(
        first.status(&page()),
        Some(TaskStatus::Drained {
            blocked_by: service()
        })
    );
    let rejected = &first.task(&service()).unwrap().rejections()[0];
    assert_eq!(
        rejected.rejection(),
        &Rejection::NotOwned {
            task: service(),
            path: path("backend/schemas.py")
        }
    );
    assert!(!first.summary().is_complete());
    assert_eq!(worker.calls_of(&page()).len(), 0);

    // One bounded correction, then the released page.
    let roots: Vec<TaskId> = first.recovery_roots().cloned().collect();
    assert_eq!(roots, [service()]);
    let request = RecoveryRequest::for_roots(&first, roots);
    let outcome = batch
        .recover(&request, &mut worker, &(), &mut journal)
        .unwrap();
    assert_eq!(outcome.granted, [service()]);
    assert!(outcome.refused.is_empty());
    let service_calls = worker.calls_of(&service());
    assert_eq!(service_calls.len(), 2);
    assert_eq!(
        service_calls[1].correction,
        Some((rejected.rejection().clone(), rejected.candidate().digest()))
    );
    let done = outcome.evidence;
    assert!(done.summary().is_complete(), "{:?}", done.summary());
    assert_eq!(worker.calls_of(&page()).len(), 1);
    let page_prerequisites: Vec<TaskId> =
        plan.prerequisites(&page()).into_iter().cloned().collect();
    assert!(page_prerequisites.contains(&service()));
    assert_eq!(
        worker.calls_of(&page())[0].prerequisites,
        page_prerequisites
    );
    assert_eq!(
        done.accepted(&model()).unwrap().digest(),
        first.accepted(&model()).unwrap().digest()
    );
    assert_eq!(done.accepted_outputs().count(), plan.len());
}

#[test]
fn exact_rejection_is_retained_and_deferred() {
    let plan = app_plan();
    let mut journal = MemoryJournal::default();
    let mut worker = app_worker();
    let evidence = recovering(&plan, "retain")
        .dispatch(&mut worker, &(), &mut journal)
        .unwrap();
    let t = evidence.task(&service()).unwrap();
    // Deferred: one call only, not retried in the batch.
    assert_eq!(t.calls(), 1);
    assert_eq!(t.rejections().len(), 1);
    let candidate = &t.rejections()[0].candidate();
    assert_eq!(candidate.files().len(), 2);
    assert_eq!(
        candidate.files()[&path("backend/schemas.py")],
        b"class Task: hijacked"
    );
    // The journal holds the same evidence (it is the fold of the journaled events).
    let reloaded = journal
        .load(&chan("retain"))
        .unwrap()
        .unwrap()
        .into_evidence()
        .unwrap();
    assert_eq!(reloaded.digest(), evidence.digest());
    assert_eq!(evidence.failure_history().count(), 1);
    assert_eq!(evidence.evidence_version(), 1);
}

#[test]
fn user_contract_rejection_is_kept_verbatim_and_retried_with_correction_without_recovery() {
    let plan = app_plan();
    let contract = |task: &PlannedTask, c: &Candidate| {
        let ok = c
            .files()
            .values()
            .all(|v| !v.starts_with(b"class TaskService"));
        if ok {
            Ok(())
        } else {
            Err(Rejection::contract(
                &task.id,
                "handler must implement UserTaskModule with all actions",
            ))
        }
    };
    let mut worker = ScriptedWorker::new().script(
        service(),
        [
            ok(&[("backend/services/tasks.py", "class TaskService: ...")]),
            ok(&[("backend/services/tasks.py", "class UserTaskModule: ...")]),
        ],
    );
    let evidence = Batch::new(&plan, chan("contract"))
        .dispatch(&mut worker, &contract, &mut MemoryJournal::default())
        .unwrap();
    assert!(evidence.summary().is_complete());
    let calls = worker.calls_of(&service());
    assert_eq!(calls.len(), 2);
    let (rejection, _) = calls[1].correction.clone().unwrap();
    assert_eq!(
        rejection.to_string(),
        "candidate for task service_tasks was refused: handler must implement UserTaskModule with all actions"
    );
}

#[test]
fn finite_budgets_bound_every_task() {
    let plan = app_plan();
    let bad = ok(&[("backend/schemas.py", "nope")]);
    // Without recovery: retry_limit + 1 = 4 calls, each after the first with a correction.
    // Each call is refused for another file, so recovery never stalls.
    let mut worker = ScriptedWorker::new().script(
        service(),
        [
            bad.clone(),
            ok(&[("elsewhere/one.txt", "x")]),
            ok(&[("elsewhere/two.txt", "x")]),
            ok(&[("elsewhere/three.txt", "x")]),
        ],
    );
    let evidence = Batch::new(&plan, chan("budget"))
        .dispatch(&mut worker, &(), &mut MemoryJournal::default())
        .unwrap();
    assert_eq!(worker.calls_of(&service()).len(), 4);
    assert!(
        worker
            .calls_of(&service())
            .iter()
            .skip(1)
            .all(|c| c.correction.is_some())
    );
    assert_eq!(evidence.status(&service()), Some(TaskStatus::Failed));
    assert_eq!(evidence.task(&service()).unwrap().rejections().len(), 4);

    // With recovery: one corrective call; a second request for the same root is refused.
    let batch = recovering(&plan, "budget-r");
    let mut journal = MemoryJournal::default();
    let mut worker = ScriptedWorker::new().script(service(), [bad]);
    let first = batch.dispatch(&mut worker, &(), &mut journal).unwrap();
    let request = RecoveryRequest::for_roots(&first, [service()]);
    let second = batch
        .recover(&request, &mut worker, &(), &mut journal)
        .unwrap();
    assert_eq!(second.granted, [service()]);
    assert_eq!(second.evidence.status(&service()), Some(TaskStatus::Failed));
    assert_eq!(second.evidence.recovery_roots().count(), 0);
    // The same roots with the same inputs make the same, consumed, request.
    let again = RecoveryRequest::for_roots(&second.evidence, [service()]);
    assert_eq!(again, request);
    let third = batch
        .recover(&again, &mut worker, &(), &mut journal)
        .unwrap();
    assert_eq!(
        third.refused,
        [(service(), IneligibleReason::RequestAlreadyConsumed)]
    );
    let wider = RecoveryRequest::for_roots(&second.evidence, [service(), model()]);
    let fourth = batch
        .recover(&wider, &mut worker, &(), &mut journal)
        .unwrap();
    assert_eq!(
        fourth.refused,
        [
            (model(), IneligibleReason::AlreadyAccepted),
            (service(), IneligibleReason::RootAlreadyConsumed)
        ]
    );
    assert!(fourth.granted.is_empty());
    assert_eq!(worker.calls_of(&service()).len(), 2);
    assert!(third.evidence.task(&service()).unwrap().calls() <= 4);
}

/// A refusal is a verdict: a call refused for the same reason as the call before it ends
/// the task (`recovery_stalled`) instead of spending the rest of its budget, and the failure
/// cause says so.
#[test]
fn a_repeated_refusal_stalls_recovery_after_two_calls() {
    let plan = app_plan();
    let bad = ok(&[("backend/schemas.py", "nope")]);
    let mut worker = ScriptedWorker::new().script(service(), [bad]);
    let evidence = Batch::new(&plan, chan("stalled"))
        .dispatch(&mut worker, &(), &mut MemoryJournal::default())
        .unwrap();
    assert_eq!(worker.calls_of(&service()).len(), 2);
    assert_eq!(evidence.status(&service()), Some(TaskStatus::Failed));
    assert!(matches!(
        evidence.failure_cause(&service()),
        Some(kleene::batch::evidence::FailureCause::Stalled { call: 2, .. })
    ));
    let cause = evidence.failure_cause(&service()).unwrap().to_string();
    assert!(
        cause.starts_with("recovery_stalled: call 2 was refused for the same reason as call 1"),
        "{cause}"
    );
}

#[test]
fn zero_retry_limit_leaves_no_corrective_call() {
    let mut plan = AppBuildPlan::from_json(
        r#"{"tasks": [{"id": "cfg", "kind": {"lane": "config"}, "owner": "ConfigAgent",
            "spec": {"intent": "settings"}, "owned_paths": ["config/app.toml"], "retry_limit": 0}]}"#,
    )
    .unwrap();
    plan.tasks[0].retry_limit = 0;
    let plan = Plan::draft(plan)
        .normalize()
        .consolidate()
        .unwrap()
        .validate()
        .unwrap();
    let batch = recovering(&plan, "zero");
    let mut journal = MemoryJournal::default();
    let mut worker = ScriptedWorker::new().script(id("cfg"), [ok(&[("elsewhere.txt", "x")])]);
    let first = batch.dispatch(&mut worker, &(), &mut journal).unwrap();
    assert_eq!(first.recovery_roots().count(), 0);
    let request = RecoveryRequest::for_roots(&first, [id("cfg")]);
    let out = batch
        .recover(&request, &mut worker, &(), &mut journal)
        .unwrap();
    assert_eq!(
        out.refused,
        [(id("cfg"), IneligibleReason::BudgetExhausted)]
    );
    assert_eq!(worker.calls().len(), 1);
}

#[test]
fn infrastructure_failures_are_never_repairable() {
    let plan = app_plan();
    let batch = recovering(&plan, "infra");
    let mut journal = MemoryJournal::default();
    let mut worker = ScriptedWorker::new().script(
        service(),
        [ScriptedOutcome::Infrastructure(
            InfrastructureFailure::ProcessMissing {
                detail: "ag2 worker".into(),
            },
        )],
    );
    let first = batch.dispatch(&mut worker, &(), &mut journal).unwrap();
    assert_eq!(first.status(&service()), Some(TaskStatus::Failed));
    assert!(first.task(&service()).unwrap().rejections().is_empty());
    assert_eq!(first.recovery_roots().count(), 0);
    let request = RecoveryRequest::for_roots(&first, [service()]);
    let out = batch
        .recover(&request, &mut worker, &(), &mut journal)
        .unwrap();
    assert_eq!(
        out.refused,
        [(service(), IneligibleReason::InfrastructureFailure)]
    );
    assert_eq!(worker.calls_of(&service()).len(), 1);

    // Nor are they retried without recovery.
    let mut worker = ScriptedWorker::new().script(
        service(),
        [ScriptedOutcome::Infrastructure(
            InfrastructureFailure::Timeout { after_ms: 10 },
        )],
    );
    Batch::new(&plan, chan("infra-2"))
        .dispatch(&mut worker, &(), &mut MemoryJournal::default())
        .unwrap();
    assert_eq!(worker.calls_of(&service()).len(), 1);
}

#[test]
fn accepted_outputs_are_seeded_never_rerun_and_refused_requests_name_their_reason() {
    let plan = app_plan();
    let batch = recovering(&plan, "seed");
    let mut journal = MemoryJournal::default();
    let mut worker = app_worker();
    let first = batch.dispatch(&mut worker, &(), &mut journal).unwrap();
    let request = RecoveryRequest::for_roots(&first, [service(), model(), page()]);
    let out = batch
        .recover(&request, &mut worker, &(), &mut journal)
        .unwrap();
    assert_eq!(out.granted, [service()]);
    assert_eq!(
        out.refused,
        [
            (model(), IneligibleReason::AlreadyAccepted),
            (page(), IneligibleReason::DiagnosticsMissing)
        ]
    );
    assert_eq!(worker.calls_of(&model()).len(), 1);
    // The page was released by the service's grant even though the request also named it.
    assert_eq!(out.evidence.status(&page()), Some(TaskStatus::Accepted));
}

#[test]
fn stale_inputs_block_recovery_and_resume() {
    let plan = app_plan();
    let mut journal = MemoryJournal::default();
    let mut worker = app_worker();
    let original = recovering(&plan, "stale").with_input("module_contract", b"v1");
    let first = original.dispatch(&mut worker, &(), &mut journal).unwrap();
    let request = RecoveryRequest::for_roots(&first, [service()]);

    let changed = recovering(&plan, "stale").with_input("module_contract", b"v2");
    let out = changed
        .recover(&request, &mut worker, &(), &mut journal)
        .unwrap();
    assert_eq!(out.refused, [(service(), IneligibleReason::InputsChanged)]);
    assert_eq!(worker.calls_of(&service()).len(), 1);
    let err = changed.resume(&mut worker, &(), &mut journal).unwrap_err();
    assert!(
        matches!(err.kind(), BatchErrorKind::InputsChanged { names, .. } if names == &["module_contract"]),
        "{err}"
    );

    // A request fingerprinted against other evidence is stale as a whole.
    let mut other_journal = MemoryJournal::default();
    let other = recovering(&plan, "stale-other")
        .dispatch(&mut app_worker(), &(), &mut other_journal)
        .unwrap();
    let foreign = RecoveryRequest::for_roots(&other, [service()]);
    let err = original
        .recover(&foreign, &mut worker, &(), &mut journal)
        .unwrap_err();
    assert!(
        matches!(
            err.kind(),
            BatchErrorKind::Recovery(RecoveryError::StaleFingerprint { .. })
        ),
        "{err}"
    );
}

#[test]
fn interruption_keeps_reservation_and_history_and_allow_replays_within_budget() {
    let plan = app_plan();
    let batch = Batch::new(&plan, chan("interrupt"));
    let mut journal = MemoryJournal::default();
    let bad = ok(&[("backend/schemas.py", "x")]);
    let good = ok(&[("backend/services/tasks.py", "y")]);
    let mut worker = ScriptedWorker::new().script(service(), [bad, ScriptedOutcome::Cancel, good]);
    let err = batch.dispatch(&mut worker, &(), &mut journal).unwrap_err();
    assert!(err.is_cancelled(), "{err}");
    let stored = journal
        .load(&chan("interrupt"))
        .unwrap()
        .unwrap()
        .into_evidence()
        .unwrap();
    assert_eq!(
        stored.status(&service()),
        Some(TaskStatus::InFlight { attempt: 2 })
    );
    assert_eq!(stored.task(&service()).unwrap().rejections().len(), 1);

    let done = batch.resume(&mut worker, &(), &mut journal).unwrap();
    assert!(done.summary().is_complete());
    let t = done.task(&service()).unwrap();
    assert_eq!(t.interrupted_attempts(), [2]);
    assert_eq!(t.calls(), 3);
    let calls = worker.calls_of(&service());
    let third = calls[2];
    assert_eq!(third.attempt, 3);
    assert!(third.correction.is_some());
}

#[test]
fn interrupted_block_worker_is_not_replayed() {
    let plan = app_plan();
    let batch = recovering(&plan, "block").with_pending_turn_replay(
        AgentId::new("ServiceAgent").unwrap(),
        PendingTurnReplay::Block,
    );
    let mut journal = MemoryJournal::default();
    let mut worker = ScriptedWorker::new().script(service(), [ScriptedOutcome::Cancel]);
    assert!(
        batch
            .dispatch(&mut worker, &(), &mut journal)
            .unwrap_err()
            .is_cancelled()
    );
    let err = batch.resume(&mut worker, &(), &mut journal).unwrap_err();
    let channel = err.channel();
    match err.kind() {
        BatchErrorKind::PendingTurnBlocked {
            agent,
            task,
            attempt,
        } => {
            assert_eq!(agent.as_str(), "ServiceAgent");
            assert_eq!(channel, &chan("block"));
            assert_eq!(task, &service());
            assert_eq!(*attempt, 1);
        }
        other => panic!("unexpected {other}"),
    }
    assert!(
        kleene::error::Chain(&err)
            .to_string()
            .contains("service_tasks")
    );
    assert_eq!(worker.calls_of(&service()).len(), 1);
    // Recovery cannot authorise the replay either.
    let stored = journal
        .load(&chan("block"))
        .unwrap()
        .unwrap()
        .into_evidence()
        .unwrap();
    let request = RecoveryRequest::for_roots(&stored, [service()]);
    let out = batch
        .recover(&request, &mut worker, &(), &mut journal)
        .unwrap();
    assert_eq!(
        out.refused,
        [(service(), IneligibleReason::UncertainInterruptedExecution)]
    );
    assert_eq!(worker.calls_of(&service()).len(), 1);
    assert_eq!(out.evidence.status(&page()), Some(TaskStatus::Pending));
    assert!(worker.calls_of(&page()).is_empty());
}

#[test]
fn trusted_channel_lineage() {
    let plan = app_plan();
    let mut journal = ImageJournal::default();
    let a = recovering(&plan, "chan-a");
    let first = a.dispatch(&mut app_worker(), &(), &mut journal).unwrap();

    // A missing channel has no evidence to reuse.
    let b = recovering(&plan, "chan-b");
    let err = b.resume(&mut app_worker(), &(), &mut journal).unwrap_err();
    assert!(matches!(err.kind(), BatchErrorKind::NoEvidence), "{err}");

    // Evidence copied under another channel is refused.
    let image = journal.image(&chan("chan-a")).unwrap().to_vec();
    let mut copied = ImageJournal::with_image(chan("chan-b"), image);
    let err = b.resume(&mut app_worker(), &(), &mut copied).unwrap_err();
    assert!(
        matches!(err.kind(), BatchErrorKind::ChannelMismatch { found, .. } if *found == chan("chan-a")),
        "{err}"
    );

    // A request fingerprinted on channel A does not apply to channel B's own evidence.
    let mut journal_b = MemoryJournal::default();
    b.dispatch(&mut app_worker(), &(), &mut journal_b).unwrap();
    let request = RecoveryRequest::for_roots(&first, [service()]);
    let err = b
        .recover(&request, &mut app_worker(), &(), &mut journal_b)
        .unwrap_err();
    assert!(
        matches!(
            err.kind(),
            BatchErrorKind::Recovery(RecoveryError::StaleFingerprint { .. })
        ),
        "{err}"
    );

    // A fresh dispatch on a channel with evidence is refused.
    let err = a
        .dispatch(&mut app_worker(), &(), &mut journal)
        .unwrap_err();
    assert!(
        matches!(err.kind(), BatchErrorKind::EvidenceExists),
        "{err}"
    );
}

#[test]
fn stale_local_state_is_replaced_never_merged() {
    let plan = app_plan();
    let batch = recovering(&plan, "replace");
    let mut journal = MemoryJournal::default();
    let mut worker = app_worker();
    let stale: BatchEvidence = batch.dispatch(&mut worker, &(), &mut journal).unwrap();
    let request = RecoveryRequest::for_roots(&stale, [service()]);
    let recovered = batch
        .recover(&request, &mut worker, &(), &mut journal)
        .unwrap()
        .evidence;
    // The stale copy cannot reset the consumed attempt: the same request is consumed.
    let replay = RecoveryRequest::for_roots(&stale, [service()]);
    let out = batch
        .recover(&replay, &mut worker, &(), &mut journal)
        .unwrap();
    assert_eq!(
        out.refused,
        [(service(), IneligibleReason::RequestAlreadyConsumed)]
    );
    assert_eq!(out.evidence.digest(), recovered.digest());
    assert_ne!(out.evidence.digest(), stale.digest());
    assert_eq!(worker.calls_of(&service()).len(), 2);
    // Resume restores the journal's state, not the caller's.
    let calls = worker.calls().len();
    let resumed = batch.resume(&mut worker, &(), &mut journal).unwrap();
    assert_eq!(resumed.digest(), recovered.digest());
    assert_eq!(worker.calls().len(), calls);
}

#[test]
fn file_journal_resumes_after_a_torn_tail() {
    let plan = app_plan();
    let dir = std::env::temp_dir().join(format!("kleene-batch-torn-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let batch = Batch::new(&plan, chan("torn")).with_compaction_after(3);
    let mut journal = FileJournal::open(&dir).unwrap();
    let mut worker = ScriptedWorker::new().script(service(), [ScriptedOutcome::Cancel, ok(&[])]);
    assert!(batch.dispatch(&mut worker, &(), &mut journal).is_err());
    let file = journal.path_for(&chan("torn"));
    let mut bytes = std::fs::read(&file).unwrap();
    bytes.extend_from_slice(&[0x4b, 0x4c, 0x4e, 0x45, 1, 0]);
    std::fs::write(&file, &bytes).unwrap();
    let mut reopened = FileJournal::open(&dir).unwrap();
    let load = reopened.load(&chan("torn")).unwrap().unwrap();
    assert_eq!(load.torn_tail.as_ref().unwrap().discarded, 6);
    let done = batch.resume(&mut worker, &(), &mut reopened).unwrap();
    assert!(done.summary().is_complete());
    let again = FileJournal::open(&dir)
        .unwrap()
        .load(&chan("torn"))
        .unwrap()
        .unwrap();
    assert!(again.torn_tail.is_none());
    assert_eq!(again.into_evidence().unwrap().digest(), done.digest());
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---------------------------------------------------------------------------------------
// Crash anywhere.

/// A journal that remembers its byte image after every commit, so a test can cut it as it
/// was at any moment (and inside the records of the next commit).
#[derive(Default)]
struct Recorder {
    inner: ImageJournal,
    history: Rc<RefCell<Vec<Vec<u8>>>>,
}

impl Recorder {
    fn snap(&mut self, channel: &ChannelId) {
        let image = self.inner.image(channel).unwrap_or_default().to_vec();
        self.history.borrow_mut().push(image);
    }
}

/// A worker that checks, at every call, that the journal's durable image already holds the
/// call's reservation and every earlier settlement (exactly one call in flight: this one).
struct DurableCheck {
    inner: ScriptedWorker,
    history: Rc<RefCell<Vec<Vec<u8>>>>,
}

impl Worker for DurableCheck {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<kleene::batch::Proposal, WorkerFailure> {
        let image = self.history.borrow().last().cloned().unwrap_or_default();
        let channel = call.channel().clone();
        let durable = ImageJournal::with_image(channel.clone(), image)
            .load(&channel)
            .unwrap()
            .unwrap()
            .into_evidence()
            .unwrap();
        assert_eq!(
            durable.status(&call.task().id),
            Some(TaskStatus::InFlight {
                attempt: call.attempt()
            })
        );
        assert_eq!(durable.in_flight().count(), 1);
        self.inner.call(call)
    }
}

impl EvidenceJournal for Recorder {
    fn append(
        &mut self,
        channel: &ChannelId,
        events: &[kleene::batch::evidence::EvidenceEvent],
    ) -> Result<(), kleene::batch::journal::JournalError> {
        self.inner.append(channel, events)?;
        self.snap(channel);
        Ok(())
    }
    fn load(
        &self,
        channel: &ChannelId,
    ) -> Result<Option<kleene::batch::journal::JournalLoad>, kleene::batch::journal::JournalError>
    {
        self.inner.load(channel)
    }
    fn repair_torn_tail(
        &mut self,
        channel: &ChannelId,
    ) -> Result<Option<kleene::batch::journal::TornTail>, kleene::batch::journal::JournalError>
    {
        self.inner.repair_torn_tail(channel)
    }
    fn compact(
        &mut self,
        channel: &ChannelId,
        evidence: &BatchEvidence,
    ) -> Result<(), kleene::batch::journal::JournalError> {
        self.inner.compact(channel, evidence)?;
        self.snap(channel);
        Ok(())
    }
}

#[derive(Debug, Clone)]
enum Step {
    Accept,
    Reject,
    Infra,
}

#[derive(Debug, Clone)]
struct Scenario {
    deps: Vec<Vec<usize>>,
    scripts: Vec<Vec<Step>>,
    retry_limits: Vec<u32>,
    block: Vec<bool>,
    recovery: bool,
    group_commit: bool,
    compaction_after: u64,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (2usize..6).prop_flat_map(|n| {
        let deps = (0..n)
            .map(|i| proptest::sample::subsequence((0..i).collect::<Vec<_>>(), 0..=i.min(2)))
            .collect::<Vec<_>>();
        let step =
            prop_oneof![4 => Just(Step::Accept), 3 => Just(Step::Reject), 1 => Just(Step::Infra)];
        let scripts = proptest::collection::vec(proptest::collection::vec(step, 1..4), n);
        (
            deps,
            scripts,
            proptest::collection::vec(0u32..3, n),
            proptest::collection::vec(any::<bool>(), n),
            any::<bool>(),
            any::<bool>(),
            2u64..12,
        )
            .prop_map(
                |(deps, scripts, retry_limits, block, recovery, group_commit, compaction_after)| {
                    Scenario {
                        deps,
                        scripts,
                        retry_limits,
                        block,
                        recovery,
                        group_commit,
                        compaction_after,
                    }
                },
            )
    })
}

fn tid(i: usize) -> TaskId {
    id(&format!("t{i}"))
}

impl Scenario {
    fn plan(&self) -> ValidatedPlan {
        let tasks = self
            .deps
            .iter()
            .enumerate()
            .map(|(i, deps)| {
                let mut t = PlannedTask::new(
                    tid(i),
                    TaskKind::Config { module: None },
                    AgentId::new(format!("agent{i}")).unwrap(),
                    Spec::new(format!("task {i}")),
                )
                .owning(path(&format!("t{i}/out.txt")));
                for d in deps {
                    t = t.after(tid(*d));
                }
                t.retry_limit = self.retry_limits[i];
                t
            })
            .collect();
        Plan::draft(AppBuildPlan::new(tasks))
            .normalize()
            .consolidate()
            .unwrap()
            .validate()
            .unwrap()
    }

    fn worker(&self) -> ScriptedWorker {
        let mut w = ScriptedWorker::new();
        for (i, script) in self.scripts.iter().enumerate() {
            let owned = format!("t{i}/out.txt");
            let outcomes = script.iter().enumerate().map(|(k, s)| match s {
                Step::Accept => ok(&[(owned.as_str(), &format!("v{k}"))]),
                Step::Reject => ok(&[("foreign/x.txt", "no")]),
                Step::Infra => ScriptedOutcome::Infrastructure(InfrastructureFailure::Transport {
                    detail: "reset".into(),
                }),
            });
            w = w.script(tid(i), outcomes.collect::<Vec<_>>());
        }
        w
    }

    fn batch<'p>(&self, plan: &'p ValidatedPlan) -> Batch<'p> {
        let mut b = Batch::new(plan, chan("crash"))
            .with_group_commit(self.group_commit)
            .with_compaction_after(self.compaction_after)
            .with_recovery(self.recovery);
        for (i, block) in self.block.iter().enumerate() {
            if *block {
                b = b.with_pending_turn_replay(
                    AgentId::new(format!("agent{i}")).unwrap(),
                    PendingTurnReplay::Block,
                );
            }
        }
        b
    }
}

/// Runs to the end through the library's one entry point: dispatch (or resume), then one
/// recovery of every eligible root if the batch opted in and has not recovered yet.
fn complete(
    batch: &Batch<'_>,
    worker: &mut impl Worker,
    journal: &mut impl EvidenceJournal,
) -> Result<BatchEvidence, BatchError> {
    batch
        .run(worker, &(), journal)
        .map(|outcome| outcome.evidence)
}

fn check_invariants(plan: &ValidatedPlan, evidence: &BatchEvidence, worker: &ScriptedWorker) {
    for (task, t) in evidence.inventory() {
        // Interrupted calls go free up to the budget: at most twice the budget in all.
        assert!(t.calls_spent() <= t.budget(), "{task} exceeded its budget");
        assert!(
            t.calls() <= 2 * t.budget(),
            "{task} was called more than twice its budget"
        );
        // Exactly a failed task has a cause, and it names one of the task's own calls.
        let cause = evidence.failure_cause(task);
        assert_eq!(
            cause.is_some(),
            evidence.status(task) == Some(TaskStatus::Failed),
            "{task}: {cause:?}"
        );
        let call = match cause {
            Some(FailureCause::Rejected { call, .. })
            | Some(FailureCause::Infrastructure { call, .. })
            | Some(FailureCause::Interrupted { call, .. }) => call,
            Some(FailureCause::CallsSpent { calls }) => calls,
            _ => 1,
        };
        assert!((1..=t.calls().max(1)).contains(&call), "{task}: {cause:?}");
    }
    for call in worker.calls() {
        let prerequisites: Vec<TaskId> = plan
            .prerequisites(&call.task)
            .into_iter()
            .cloned()
            .collect();
        assert_eq!(
            call.prerequisites, prerequisites,
            "{} was called without all its prerequisites accepted",
            call.task
        );
    }
}

/// What must match the uninterrupted run whatever the cut: statuses and accepted outputs.
fn outcome(
    evidence: &BatchEvidence,
) -> BTreeMap<TaskId, (Option<TaskStatus>, Option<kleene::id::Digest>)> {
    evidence
        .inventory()
        .map(|(id, _)| {
            (
                id.clone(),
                (
                    evidence.status(id),
                    evidence.accepted(id).map(|a| a.digest()),
                ),
            )
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn crash_anywhere_then_resume(s in scenario(), inside in 0.0f64..1.0) {
        let plan = s.plan();
        let batch = s.batch(&plan);
        let mut recorder = Recorder::default();
        let mut worker = DurableCheck { inner: s.worker(), history: recorder.history.clone() };
        let full = complete(&batch, &mut worker, &mut recorder).unwrap();
        check_invariants(&plan, &full, &worker.inner);
        let channel = chan("crash");

        // Every moment of the journal: after each record of each commit, and torn inside
        // each record. A compaction replaces the file atomically, so it is either old or new.
        let mut cuts: Vec<Vec<u8>> = Vec::new();
        let mut previous: Vec<u8> = Vec::new();
        let history = recorder.history.borrow().clone();
        for image in &history {
            if image.len() > previous.len() && image.starts_with(&previous) {
                let ends = ImageJournal::with_image(channel.clone(), image.clone()).record_ends(&channel);
                let mut start = previous.len();
                for end in ends.into_iter().filter(|&e| e > previous.len()) {
                    let torn = start + 1 + ((end - start - 2) as f64 * inside) as usize;
                    cuts.push(image[..torn].to_vec());
                    cuts.push(image[..end].to_vec());
                    start = end;
                }
            }
            cuts.push(image.clone());
            previous = image.clone();
        }
        for cut in cuts {
            let mut journal = ImageJournal::with_image(channel.clone(), cut);
            let before = journal
                .load(&channel)
                .unwrap()
                .map(|l| l.into_evidence().unwrap());
            // Scripted afresh for the resume, told what it resumes: the call a crash
            // interrupted gets again the outcome it was due.
            let mut worker = match &before {
                Some(before) => s.worker().resuming(before),
                None => s.worker(),
            };
            let result = complete(&batch, &mut worker, &mut journal);
            let uncertain = before.as_ref().and_then(|b| {
                b.in_flight().next().map(|(t, a)| (t.clone(), a, b.task(t).unwrap().owner().clone()))
            });
            match (result, uncertain) {
                (Err(err), Some((t, a, owner))) if err.is_pending_turn_blocked() => {
                    let c = err.channel().clone();
                    let BatchErrorKind::PendingTurnBlocked { agent, task, attempt } = err.into_kind() else {
                        unreachable!("checked above")
                    };
                    prop_assert_eq!(&task, &t);
                    prop_assert_eq!(attempt, a);
                    prop_assert_eq!(&agent, &owner);
                    prop_assert_eq!(&c, &channel);
                    prop_assert!(s.block[t.as_str()[1..].parse::<usize>().unwrap()]);
                    prop_assert!(worker.calls().is_empty());
                }
                (Ok(resumed), uncertain) => {
                    check_invariants(&plan, &resumed, &worker);
                    // Never a lost accepted output.
                    if let Some(before) = &before {
                        for (task, output) in before.accepted_outputs() {
                            prop_assert_eq!(resumed.accepted(task).map(|a| a.digest()), Some(output.digest()));
                        }
                    }
                    match uncertain {
                        None => prop_assert_eq!(resumed.digest(), full.digest()),
                        Some((t, _, _)) => {
                            prop_assert!(!s.block[t.as_str()[1..].parse::<usize>().unwrap()]);
                            prop_assert_eq!(resumed.task(&t).unwrap().interrupted_attempts().len(), 1);
                            // The script does not shift: the resumed run ends as the
                            // full run did, unless the interrupted call took the task's last
                            // spare call.
                            let spare = full.task(&t).is_some_and(|f| f.calls() < f.budget());
                            if spare {
                                prop_assert_eq!(outcome(&resumed), outcome(&full));
                            }
                        }
                    }
                }
                (other, uncertain) => prop_assert!(false, "unexpected {:?} with {:?}", other.map(|e| e.digest()), uncertain),
            }
        }
    }
}

/// Routing: one ineligible target never starves an independent eligible one, and a partial
/// recovery keeps the unrecovered root blocked while the rest completes.
#[test]
fn independent_roots_recover_independently() {
    let plan = AppBuildPlan::from_json(
        r#"{"tasks": [
      {"id": "service_tasks", "kind": {"lane": "service", "module": "tasks"},
       "owner": "ServiceAgent", "spec": {"intent": "task handlers"},
       "owned_paths": ["backend/services/tasks.py"]},
      {"id": "page_tasks", "kind": {"lane": "page", "module": "tasks"},
       "owner": "PageAgent", "spec": {"intent": "task list page"},
       "owned_paths": ["frontend/pages/tasks.tsx"], "depends_on": ["service_tasks"]},
      {"id": "config_app", "kind": {"lane": "config"}, "owner": "ConfigAgent",
       "spec": {"intent": "settings"}, "owned_paths": ["config/app.toml"]},
      {"id": "auth_app", "kind": {"lane": "auth"}, "owner": "AuthAgent",
       "spec": {"intent": "login"}, "owned_paths": ["backend/auth.py"]}
    ]}"#,
    )
    .unwrap();
    let plan = Plan::draft(plan)
        .normalize()
        .consolidate()
        .unwrap()
        .validate()
        .unwrap();
    let batch = recovering(&plan, "routing");
    let mut journal = MemoryJournal::default();
    let mut worker = ScriptedWorker::new()
        .script(
            service(),
            [
                ok(&[("backend/auth.py", "hijack")]),
                ok(&[("backend/services/tasks.py", "ok")]),
            ],
        )
        .script(
            id("config_app"),
            [ScriptedOutcome::Infrastructure(
                InfrastructureFailure::Timeout { after_ms: 5 },
            )],
        )
        .script(
            id("auth_app"),
            [
                ok(&[("config/app.toml", "hijack")]),
                ok(&[("config/app.toml", "again")]),
            ],
        );
    let first = batch.dispatch(&mut worker, &(), &mut journal).unwrap();
    let roots: Vec<TaskId> = first.recovery_roots().cloned().collect();
    assert_eq!(roots.len(), 2, "{roots:?}");
    let request = RecoveryRequest::for_roots(&first, [service(), id("config_app"), id("auth_app")]);
    let out = batch
        .recover(&request, &mut worker, &(), &mut journal)
        .unwrap();
    let mut granted = out.granted.clone();
    granted.sort();
    assert_eq!(granted, [id("auth_app"), service()]);
    assert_eq!(
        out.refused,
        [(id("config_app"), IneligibleReason::InfrastructureFailure)]
    );
    let e = &out.evidence;
    assert_eq!(e.status(&service()), Some(TaskStatus::Accepted));
    assert_eq!(e.status(&page()), Some(TaskStatus::Accepted));
    // The auth target's correction was rejected again: it stays blocked, alone.
    assert_eq!(e.status(&id("auth_app")), Some(TaskStatus::Failed));
    assert_eq!(e.status(&id("config_app")), Some(TaskStatus::Failed));
    assert_eq!(e.summary().failed, 2);
    assert_eq!(e.recovery_roots().count(), 0, "nothing left to route");
}
