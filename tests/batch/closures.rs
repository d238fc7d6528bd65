//! Plans run through the library's `ClosureWorker`: the run-wide fix budget survives any
//! sequence of crashes and resumes, restored from nothing but the journal.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use kleene::batch::{
    Batch, BatchAgent, BatchEvidence, Candidate, ClosureWorker, Proposal, WorkerCall,
    WorkerFailure, evidence::EvidenceEvent, journal::EvidenceJournal, journal::JournalError,
    journal::JournalLoad, journal::TornTail,
};
use kleene::testing::batch::ImageJournal;
use kleene::{
    Agent, Task,
    closure::{
        ClosureRecord, ExecutionOutput, GovernanceDecision, RecoveryPolicy, Severity,
        ValidatorResult, Verdict, step::Session, step::ValidationToken,
    },
    id::{ChannelId, TaskId, ValidatorId},
};
use proptest::prelude::*;

use crate::support::{chan, path, validated};

/// A journal that keeps its image after every append, and counts the appends so the agent
/// can say when each fix ran.
struct Crashable {
    inner: ImageJournal,
    channel: ChannelId,
    images: Vec<Vec<u8>>,
    appends: Rc<Cell<usize>>,
}

impl Crashable {
    fn from_image(channel: &ChannelId, image: Vec<u8>, appends: Rc<Cell<usize>>) -> Self {
        Self {
            inner: ImageJournal::with_image(channel.clone(), image),
            channel: channel.clone(),
            images: Vec::new(),
            appends,
        }
    }

    fn snap(&mut self) {
        let image = self.inner.image(&self.channel).unwrap_or_default().to_vec();
        self.images.push(image);
        self.appends.set(self.images.len());
    }
}

impl EvidenceJournal for Crashable {
    fn append(
        &mut self,
        channel: &ChannelId,
        events: &[EvidenceEvent],
    ) -> Result<(), JournalError> {
        self.inner.append(channel, events)?;
        self.snap();
        Ok(())
    }
    fn load(&self, channel: &ChannelId) -> Result<Option<JournalLoad>, JournalError> {
        self.inner.load(channel)
    }
    fn repair_torn_tail(&mut self, channel: &ChannelId) -> Result<Option<TornTail>, JournalError> {
        self.inner.repair_torn_tail(channel)
    }
    fn compact(
        &mut self,
        channel: &ChannelId,
        evidence: &BatchEvidence,
    ) -> Result<(), JournalError> {
        self.inner.compact(channel, evidence)?;
        self.snap();
        Ok(())
    }
}

/// Fails each task's post-validation for its first `fails[task]` tasks of a closure (root,
/// then fixes), each time with another justification so recovery never stalls; writes the
/// task's owned file. It keeps nothing between runs that matters: every run gets a new one.
struct Fixer {
    fails: BTreeMap<TaskId, u32>,
    appends: Rc<Cell<usize>>,
    /// The journal's append count when each fix executed.
    fixes_run: Rc<RefCell<Vec<usize>>>,
    call: u32,
    /// Every closure record a call finished with: what an embedder keeps for its audit.
    records: Rc<RefCell<Vec<(TaskId, u32, ClosureRecord)>>>,
}

impl Agent for Fixer {
    type Error = std::io::Error;
    fn govern(&mut self, _: &Task, _: &Session, _: u32) -> std::io::Result<GovernanceDecision> {
        Ok(GovernanceDecision::Approve)
    }
    fn pre_validate(&mut self, _: &Task, _: u32) -> std::io::Result<Verdict> {
        Ok(Verdict::clean())
    }
    fn execute(&mut self, task: &Task, _: &ValidationToken) -> std::io::Result<ExecutionOutput> {
        if task.depth() > 0 {
            self.fixes_run.borrow_mut().push(self.appends.get());
        }
        Ok(ExecutionOutput::new(format!("{} ran", task.id())))
    }
    fn post_validate(&mut self, task: &Task, _: &ExecutionOutput) -> std::io::Result<Verdict> {
        let fails = self.fails.get(task.root_task_ref()).copied().unwrap_or(0);
        Ok(if task.depth() < fails {
            Verdict::new([ValidatorResult::new(
                ValidatorId::new("tests").unwrap(),
                Severity::Blocker,
                true,
                format!("call {} depth {} failed", self.call, task.depth()),
            )])
        } else {
            Verdict::clean()
        })
    }
}

impl BatchAgent for Fixer {
    fn begin_call(&mut self, call: &WorkerCall<'_>) -> Result<(), WorkerFailure> {
        self.call = call.attempt();
        Ok(())
    }
    fn finish_call(
        &mut self,
        call: &WorkerCall<'_>,
        record: &ClosureRecord,
    ) -> Result<Proposal, WorkerFailure> {
        self.records
            .borrow_mut()
            .push((call.task().id.clone(), call.attempt(), record.clone()));
        let file = path(&format!("out/{}.txt", call.task().id));
        Ok(Candidate::new(BTreeMap::from([(file, b"x".to_vec())])).into())
    }
}

fn plan_json(n: usize, retry: &[u32]) -> String {
    let tasks: Vec<String> = (0..n)
        .map(|i| {
            let after = if i == 0 {
                String::new()
            } else {
                format!(r#", "depends_on": ["t{}"]"#, i - 1)
            };
            format!(
                r#"{{"id": "t{i}", "kind": {{"lane": "config"}}, "owner": "Agent{i}",
                    "spec": {{"intent": "part {i}"}}, "owned_paths": ["out/t{i}.txt"],
                    "retry_limit": {}{after}}}"#,
                retry[i]
            )
        })
        .collect();
    format!(r#"{{"tasks": [{}]}}"#, tasks.join(","))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// However often the run crashes (at any durable point of the journal) and resumes with a
    /// fresh worker and agent, the fixes that actually ran never exceed the policy's
    /// `max_total_fix_attempts`: each fix's draw is durable before it runs, and the budget is
    /// restored from the journal alone (there is no other state to restore it from).
    #[test]
    fn crashes_and_resumes_never_exceed_the_run_wide_fix_budget(
        fails in proptest::collection::vec(0u32..5, 1..4),
        retry_seed in proptest::collection::vec(0u32..3, 4),
        max_fixes in 1u32..6,
        recovery in any::<bool>(),
        cuts in proptest::collection::vec(0.0f64..1.0, 0..4),
    ) {
        let n = fails.len();
        let plan = validated(&plan_json(n, &retry_seed));
        let channel = chan("closure-crash");
        let mut batch = Batch::new(&plan, channel.clone()).with_group_commit(true);
        if recovery {
            batch = batch.with_recovery(true);
        }
        let policy = RecoveryPolicy::builder()
            .max_recovery_depth(3)
            .max_total_fix_attempts(max_fixes)
            .build()
            .unwrap();
        let fails: BTreeMap<TaskId, u32> = fails
            .iter()
            .enumerate()
            .map(|(i, f)| (TaskId::new(format!("t{i}")).unwrap(), *f))
            .collect();
        let mut image = Vec::new();
        let mut fixes_ran = 0usize;
        // Each stage runs from the durable image, then "crashes" at the cut: only what the
        // journal held at that point survives, and every fix that had run by then counts.
        for cut in cuts.iter().copied().map(Some).chain([None]) {
            let appends = Rc::new(Cell::new(0));
            let fixes_run = Rc::new(RefCell::new(Vec::new()));
            let mut journal = Crashable::from_image(&channel, image.clone(), Rc::clone(&appends));
            let agent = Fixer {
                fails: fails.clone(),
                appends: Rc::clone(&appends),
                fixes_run: Rc::clone(&fixes_run),
                call: 0,
                records: Rc::default(),
            };
            let mut worker = ClosureWorker::new(agent, Session::new("build", "crash").unwrap(), policy.clone());
            let outcome = batch.run(&mut worker, &(), &mut journal);
            match cut {
                Some(cut) => {
                    let k = (cut * (journal.images.len() + 1) as f64) as usize;
                    let k = k.min(journal.images.len());
                    if k > 0 {
                        image = journal.images[k - 1].clone();
                    }
                    fixes_ran += fixes_run.borrow().iter().filter(|&&at| at <= k).count();
                }
                None => {
                    let outcome = outcome.unwrap();
                    fixes_ran += fixes_run.borrow().len();
                    let used = outcome.evidence.fix_attempts_used();
                    prop_assert!(used <= max_fixes, "evidence says {used} of {max_fixes} used");
                    for call in outcome.evidence.closures() {
                        prop_assert!(call.fix_attempts_used() <= max_fixes);
                    }
                }
            }
        }
        prop_assert!(
            fixes_ran <= max_fixes as usize,
            "{fixes_ran} fixes ran across crashes, more than the run's {max_fixes}"
        );
    }
}

/// A run without crashes spends exactly the fixes its closures spawned, and the evidence
/// says so (the budget `kleene status` shows comes from here, not from a closure log).
#[test]
fn the_fix_budget_is_evidence_and_binds_every_closure() {
    let plan = validated(&plan_json(2, &[0, 0]));
    let appends = Rc::new(Cell::new(0));
    let records = Rc::default();
    let agent = Fixer {
        fails: BTreeMap::from([(TaskId::new("t0").unwrap(), 2)]),
        appends: Rc::clone(&appends),
        fixes_run: Rc::new(RefCell::new(Vec::new())),
        call: 0,
        records: Rc::clone(&records),
    };
    let policy = RecoveryPolicy::default();
    let mut worker = ClosureWorker::new(agent, Session::new("build", "x").unwrap(), policy);
    let mut journal = Crashable::from_image(&chan("c"), Vec::new(), appends);
    let outcome = Batch::new(&plan, chan("c"))
        .run(&mut worker, &(), &mut journal)
        .unwrap();
    assert!(outcome.evidence.summary().is_complete());
    assert_eq!(outcome.evidence.fix_attempts_used(), 2);
    let (call, settled) = outcome
        .evidence
        .accepted_closure(&TaskId::new("t0").unwrap())
        .unwrap();
    assert_eq!((call, settled.fix_attempts), (1, 2));
    // Loading the journal again restores the same budget.
    let load = journal.load(&chan("c")).unwrap().unwrap();
    assert_eq!(load.into_evidence().unwrap().fix_attempts_used(), 2);
}

/// Any changed byte of a stored closure record (here its JSON) is refused: it no longer
/// reads back (its audit chain or shape breaks), or the acceptance record's binding names
/// its task and call.
#[test]
fn a_changed_byte_of_a_closure_record_is_named_through_the_acceptance_record() {
    let plan = validated(&plan_json(2, &[0, 0]));
    let records: Rc<RefCell<Vec<(TaskId, u32, ClosureRecord)>>> = Rc::default();
    let agent = Fixer {
        fails: BTreeMap::from([(TaskId::new("t1").unwrap(), 1)]),
        appends: Rc::new(Cell::new(0)),
        fixes_run: Rc::default(),
        call: 0,
        records: Rc::clone(&records),
    };
    let mut worker = ClosureWorker::new(
        agent,
        Session::new("build", "x").unwrap(),
        RecoveryPolicy::default(),
    );
    let channel = chan("tamper");
    let evidence = Batch::new(&plan, channel.clone())
        .run(
            &mut worker,
            &(),
            &mut kleene::batch::MemoryJournal::default(),
        )
        .unwrap()
        .evidence;
    let snapshot = kleene::snapshot::Snapshot::from_evidence(&evidence).unwrap();
    let binding =
        kleene::acceptance::BuildBinding::new(channel, plan.digest(), evidence.evidence_version());
    let accepted = kleene::acceptance::accept(&plan, &evidence, &snapshot, &binding).unwrap();
    let stored = kleene::acceptance::StoredRecord::from_json(&accepted.to_json()).unwrap();
    let records = records.borrow();
    let all = || records.iter().map(|(t, c, r)| (t, *c, r));
    assert_eq!(stored.verify_closures(all()), Ok(2));
    assert_eq!(accepted.verify_closures(all()), Ok(2));
    assert_eq!(evidence.verify_closures(all()), Ok(2));
    let (task, call, record) = &records[1];
    let json = record.to_json();
    assert_eq!(&ClosureRecord::from_json(&json).unwrap(), record);
    for at in 0..json.len() {
        let mut bytes = json.clone().into_bytes();
        bytes[at] ^= 1;
        let Ok(text) = String::from_utf8(bytes) else {
            continue;
        };
        let Ok(changed) = ClosureRecord::from_json(&text) else {
            continue; // refused on reading
        };
        let given = [
            (&records[0].0, records[0].1, &records[0].2),
            (task, *call, &changed),
        ];
        let err = stored
            .verify_closures(given.iter().copied())
            .expect_err(&format!("byte {at} changed and the record still matched"));
        assert!(
            err.mismatches().iter().any(|m| m.call() == (task, *call)),
            "byte {at}: {err:?}"
        );
        assert!(evidence.verify_closures(given.iter().copied()).is_err());
    }
    // A missing record of an accepted call is named too.
    let err = stored.verify_closures(all().take(1)).unwrap_err();
    assert!(matches!(
        err.mismatches(),
        [kleene::acceptance::ClosureMismatch::Missing { task: t, call: 1 }] if t.as_str() == "t1"
    ));
}

/// An agent whose every execution fails with a typed error of the given kind.
struct Broken(kleene::closure::AgentErrorKind);

/// The broken tool, with the cause beneath it.
#[derive(Debug, thiserror::Error)]
#[error("the compiler crashed")]
struct Crashed {
    #[source]
    cause: std::io::Error,
    kind: kleene::closure::AgentErrorKind,
}

impl kleene::closure::AgentError for Crashed {
    fn kind(&self) -> kleene::closure::AgentErrorKind {
        self.kind
    }
}

impl Agent for Broken {
    type Error = Crashed;
    fn govern(&mut self, _: &Task, _: &Session, _: u32) -> Result<GovernanceDecision, Crashed> {
        Ok(GovernanceDecision::Approve)
    }
    fn pre_validate(&mut self, _: &Task, _: u32) -> Result<Verdict, Crashed> {
        Ok(Verdict::clean())
    }
    fn execute(&mut self, _: &Task, _: &ValidationToken) -> Result<ExecutionOutput, Crashed> {
        Err(Crashed {
            cause: std::io::Error::other("segfault in codegen"),
            kind: self.0,
        })
    }
    fn post_validate(&mut self, _: &Task, _: &ExecutionOutput) -> Result<Verdict, Crashed> {
        Ok(Verdict::clean())
    }
}

impl BatchAgent for Broken {
    fn finish_call(
        &mut self,
        _: &WorkerCall<'_>,
        _: &ClosureRecord,
    ) -> Result<Proposal, WorkerFailure> {
        Ok(Candidate::default().into())
    }
}

/// Agents classify their failures and the batch keeps the typed error: infrastructure fails
/// the task (never repairable) with the whole source chain in the evidence, a cancellation
/// stops the batch with the error as its source, anything else refuses the call.
#[test]
fn agent_errors_keep_their_type_and_are_treated_by_their_kind() {
    use kleene::closure::AgentErrorKind::{Cancelled, Infrastructure, Other};
    let plan = validated(&plan_json(1, &[0]));
    let t0 = TaskId::new("t0").unwrap();
    let run = |kind| {
        let mut worker = ClosureWorker::new(
            Broken(kind),
            Session::new("build", "x").unwrap(),
            RecoveryPolicy::default(),
        );
        Batch::new(&plan, chan("typed")).with_recovery(true).run(
            &mut worker,
            &(),
            &mut kleene::batch::MemoryJournal::default(),
        )
    };

    let outcome = run(Infrastructure).unwrap();
    let (_, failure) = outcome
        .evidence
        .task(&t0)
        .unwrap()
        .infrastructure_failure()
        .unwrap();
    assert!(
        failure
            .to_string()
            .contains("the compiler crashed: segfault in codegen"),
        "{failure}"
    );
    assert!(
        outcome.granted.is_empty(),
        "an infrastructure failure is never repaired"
    );
    let [(task, 1, kept)] = &outcome.agent_failures[..] else {
        panic!("{:?}", outcome.agent_failures)
    };
    assert_eq!(task, &t0);
    assert_eq!(kept.kind(), Infrastructure);
    assert!(kept.error().downcast_ref::<Crashed>().is_some());

    let err = run(Cancelled).unwrap_err();
    assert!(err.is_cancelled());
    // The batch names its channel; its kind, the cancelled call; the kind's source, the agent.
    let source = std::error::Error::source(&err)
        .and_then(std::error::Error::source)
        .expect("the agent's error");
    assert_eq!(source.to_string(), "the compiler crashed");
    assert_eq!(
        source.source().map(ToString::to_string).as_deref(),
        Some("segfault in codegen")
    );

    let outcome = run(Other).unwrap();
    let rejection = outcome.evidence.task(&t0).unwrap().rejections()[0]
        .rejection()
        .to_string();
    assert!(
        rejection.contains("execute failed: the compiler crashed"),
        "{rejection}"
    );
    // One call: with `retry_limit: 0` the call budget leaves no corrective call.
    assert_eq!(outcome.agent_failures.len(), 1);
    assert_eq!(outcome.agent_failures[0].2.kind(), Other);
}

/// Where [`HostFails`]'s own host fails during a call.
#[derive(Clone, Copy, PartialEq)]
enum HostFailure {
    /// Nowhere: the call runs to its end.
    Nowhere,
    /// While preparing the fix subtask (writing what its fixer reads), before its draw.
    PreparingTheFix,
    /// After the fix ran, while reading what the call proposes.
    AfterTheFix,
}

/// Fails its root's first post-validation, so the closure spawns one fix, which passes; its
/// host fails where `fails` says. Counts the fixes that executed.
struct HostFails {
    fails: HostFailure,
    fixes_run: Rc<Cell<u32>>,
    /// How each call ended for the agent: "finished" or "withdrawn".
    ended: Rc<RefCell<Vec<&'static str>>>,
}

impl Agent for HostFails {
    type Error = std::io::Error;
    fn govern(&mut self, _: &Task, _: &Session, _: u32) -> std::io::Result<GovernanceDecision> {
        Ok(GovernanceDecision::Approve)
    }
    fn pre_validate(&mut self, _: &Task, _: u32) -> std::io::Result<Verdict> {
        Ok(Verdict::clean())
    }
    fn execute(&mut self, task: &Task, _: &ValidationToken) -> std::io::Result<ExecutionOutput> {
        if task.depth() > 0 {
            self.fixes_run.set(self.fixes_run.get() + 1);
        }
        Ok(ExecutionOutput::new("ran"))
    }
    fn post_validate(&mut self, task: &Task, _: &ExecutionOutput) -> std::io::Result<Verdict> {
        Ok(if task.depth() == 0 {
            Verdict::new([ValidatorResult::new(
                ValidatorId::new("tests").unwrap(),
                Severity::Blocker,
                true,
                "the root's first draft fails".to_owned(),
            )])
        } else {
            Verdict::clean()
        })
    }
}

impl BatchAgent for HostFails {
    fn prepare_fix(&mut self, _: &WorkerCall<'_>, _: &Task) -> Result<(), WorkerFailure> {
        if self.fails == HostFailure::PreparingTheFix {
            return Err(WorkerFailure::Unavailable {
                detail: "no space left for the fix's spec".to_owned(),
            });
        }
        Ok(())
    }
    fn finish_call(
        &mut self,
        call: &WorkerCall<'_>,
        _: &ClosureRecord,
    ) -> Result<Proposal, WorkerFailure> {
        self.ended.borrow_mut().push("finished");
        if self.fails == HostFailure::AfterTheFix {
            return Err(WorkerFailure::Unavailable {
                detail: "no space left to read the stage".to_owned(),
            });
        }
        let file = path(&format!("out/{}.txt", call.task().id));
        Ok(Candidate::new(BTreeMap::from([(file, b"x".to_vec())])).into())
    }
    fn withdraw_call(&mut self, _: &WorkerCall<'_>, _: &ClosureRecord, _: &WorkerFailure) {
        self.ended.borrow_mut().push("withdrawn");
    }
}

/// Runs the one-task plan with a budget of one fix and no retries, with the host failing
/// where `fails` says, on `journal`.
fn run_with_one_fix(
    fails: HostFailure,
    journal: &mut impl EvidenceJournal,
    fixes_run: &Rc<Cell<u32>>,
) -> Result<kleene::batch::RunOutcome, kleene::batch::BatchError> {
    run_telling(fails, journal, fixes_run, &Rc::default())
}

/// [`run_with_one_fix`], keeping how each call ended for the agent in `ended`.
fn run_telling(
    fails: HostFailure,
    journal: &mut impl EvidenceJournal,
    fixes_run: &Rc<Cell<u32>>,
    ended: &Rc<RefCell<Vec<&'static str>>>,
) -> Result<kleene::batch::RunOutcome, kleene::batch::BatchError> {
    let plan = validated(&plan_json(1, &[0]));
    let policy = RecoveryPolicy::builder()
        .max_recovery_depth(1)
        .max_total_fix_attempts(1)
        .build()
        .unwrap();
    let agent = HostFails {
        fails,
        fixes_run: Rc::clone(fixes_run),
        ended: Rc::clone(ended),
    };
    let mut worker = ClosureWorker::new(agent, Session::new("build", "host").unwrap(), policy);
    Batch::new(&plan, chan("host")).run(&mut worker, &(), journal)
}

/// A host that fails while preparing a fix stops the call before the fix could run: the
/// call is withdrawn, the attempt is not drawn, and once the host works again the task is
/// fixed with the run's one attempt. (Drawn before the preparation, the attempt was spent
/// and the resumed task failed with its fix never having run.)
#[test]
fn a_fix_that_cannot_be_prepared_is_withdrawn_without_spending_its_attempt() {
    let mut journal = kleene::batch::MemoryJournal::default();
    let fixes_run = Rc::new(Cell::new(0));
    let err = run_with_one_fix(HostFailure::PreparingTheFix, &mut journal, &fixes_run)
        .expect_err("the host failed");
    assert!(err.is_worker_unavailable(), "{err}");
    assert!(
        matches!(
            err.kind(),
            kleene::batch::BatchErrorKind::WorkerUnavailable { fixes_drawn: 0, .. }
        ),
        "{err:?}"
    );
    assert!(
        err.kind().to_string().contains("nothing was counted"),
        "{err:?}"
    );
    assert_eq!(fixes_run.get(), 0);
    let load = journal.load(&chan("host")).unwrap().unwrap();
    assert_eq!(load.into_evidence().unwrap().fix_attempts_used(), 0);

    let outcome = run_with_one_fix(HostFailure::Nowhere, &mut journal, &fixes_run).unwrap();
    assert!(outcome.evidence.summary().is_complete());
    assert_eq!(outcome.evidence.fix_attempts_used(), 1);
    assert_eq!(fixes_run.get(), 1);
}

/// A host that fails after a fix ran withdraws the call, but the attempt it drew stays
/// spent (the fix ran), and the error says so instead of "nothing was counted".
#[test]
fn a_call_withdrawn_after_its_fix_ran_says_the_attempt_stays_spent() {
    let mut journal = kleene::batch::MemoryJournal::default();
    let fixes_run = Rc::new(Cell::new(0));
    let err = run_with_one_fix(HostFailure::AfterTheFix, &mut journal, &fixes_run)
        .expect_err("the host failed");
    assert!(
        matches!(
            err.kind(),
            kleene::batch::BatchErrorKind::WorkerUnavailable { fixes_drawn: 1, .. }
        ),
        "{err:?}"
    );
    let text = err.kind().to_string();
    assert!(
        text.contains("the fix attempt it drew stays spent") && !text.contains("nothing was"),
        "{text}"
    );
    assert_eq!(fixes_run.get(), 1);
    let load = journal.load(&chan("host")).unwrap().unwrap();
    assert_eq!(load.into_evidence().unwrap().fix_attempts_used(), 1);
}

/// A memory journal whose disk fills up just before the first fix attempt is drawn: it
/// refuses every append that draws one.
#[derive(Default)]
struct FullBeforeTheDraw {
    inner: kleene::batch::MemoryJournal,
}

impl EvidenceJournal for FullBeforeTheDraw {
    fn append(
        &mut self,
        channel: &ChannelId,
        events: &[EvidenceEvent],
    ) -> Result<(), JournalError> {
        if events
            .iter()
            .any(|e| matches!(e, EvidenceEvent::FixDrawn { .. }))
        {
            return Err(JournalError::Io {
                path: "memory".into(),
                source: std::io::Error::from(std::io::ErrorKind::StorageFull),
            });
        }
        self.inner.append(channel, events)
    }
    fn load(&self, channel: &ChannelId) -> Result<Option<JournalLoad>, JournalError> {
        self.inner.load(channel)
    }
    fn repair_torn_tail(&mut self, channel: &ChannelId) -> Result<Option<TornTail>, JournalError> {
        self.inner.repair_torn_tail(channel)
    }
    fn compact(
        &mut self,
        channel: &ChannelId,
        evidence: &BatchEvidence,
    ) -> Result<(), JournalError> {
        self.inner.compact(channel, evidence)
    }
}

/// A call withdrawn because its fix could not be prepared, or because the journal refused
/// the fix's draw, is told so instead of finished: an agent that saves each finished call's
/// record (the CLI's closure log) never saves one for a call a resume makes again under the
/// same number. A call that runs to its end is finished, never withdrawn.
#[test]
fn a_withdrawn_call_is_told_so_instead_of_finished() {
    let fixes_run = Rc::new(Cell::new(0));
    let ended = Rc::new(RefCell::new(Vec::new()));
    let mut journal = kleene::batch::MemoryJournal::default();
    run_telling(
        HostFailure::PreparingTheFix,
        &mut journal,
        &fixes_run,
        &ended,
    )
    .expect_err("the fix could not be prepared");
    assert_eq!(*ended.borrow(), ["withdrawn"]);

    ended.borrow_mut().clear();
    let mut full = FullBeforeTheDraw::default();
    let err = run_telling(HostFailure::Nowhere, &mut full, &fixes_run, &ended)
        .expect_err("the journal refused the draw");
    assert!(err.is_worker_unavailable(), "{err}");
    assert!(
        err.kind().to_string().contains("record a fix attempt"),
        "{err:?}"
    );
    assert_eq!(*ended.borrow(), ["withdrawn"]);
    assert_eq!(fixes_run.get(), 0);

    ended.borrow_mut().clear();
    let outcome = run_telling(HostFailure::Nowhere, &mut journal, &fixes_run, &ended).unwrap();
    assert!(outcome.evidence.summary().is_complete());
    assert_eq!(*ended.borrow(), ["finished"]);
}

/// An agent that does not listen for withdrawals still has `finish_call` called for a
/// withdrawn call (its proposal dropped), so whatever it cleans up there is cleaned up.
#[test]
fn by_default_a_withdrawn_call_is_still_finished() {
    let plan = validated(&plan_json(1, &[0]));
    let records = Rc::new(RefCell::new(Vec::new()));
    let agent = Fixer {
        fails: BTreeMap::from([(TaskId::new("t0").unwrap(), 1)]),
        appends: Rc::new(Cell::new(0)),
        fixes_run: Rc::default(),
        call: 0,
        records: Rc::clone(&records),
    };
    let policy = RecoveryPolicy::builder()
        .max_recovery_depth(1)
        .max_total_fix_attempts(1)
        .build()
        .unwrap();
    let mut worker = ClosureWorker::new(agent, Session::new("build", "full").unwrap(), policy);
    let err = Batch::new(&plan, chan("full"))
        .run(&mut worker, &(), &mut FullBeforeTheDraw::default())
        .expect_err("the journal refused the draw");
    assert!(err.is_worker_unavailable(), "{err}");
    assert_eq!(records.borrow().len(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// For any scripted plan (a chain of up to three tasks, each failing its first calls some
    /// number of times) and any single changed byte of its closure log (the records as JSON
    /// lines), `accept_audited` either refuses, or every audit trail it binds still reads
    /// back from the log unchanged, and it seals the record the clean log seals.
    #[test]
    fn a_changed_byte_of_the_closure_log_is_refused_or_changes_nothing_bound(
        fails in proptest::collection::vec(0u32..3, 1..4),
        at_seed in any::<usize>(),
        flip in 1u8..=255,
    ) {
        let n = fails.len();
        let plan = validated(&plan_json(n, &vec![3; n]));
        let records: Rc<RefCell<Vec<(TaskId, u32, ClosureRecord)>>> = Rc::default();
        let agent = Fixer {
            fails: (0..n)
                .map(|i| (TaskId::new(format!("t{i}")).unwrap(), fails[i]))
                .collect(),
            appends: Rc::new(Cell::new(0)),
            fixes_run: Rc::default(),
            call: 0,
            records: Rc::clone(&records),
        };
        let mut worker = ClosureWorker::new(
            agent,
            Session::new("build", "x").unwrap(),
            RecoveryPolicy::default(),
        );
        let channel = chan("damaged-log");
        let evidence = Batch::new(&plan, channel.clone())
            .run(&mut worker, &(), &mut kleene::batch::MemoryJournal::default())
            .unwrap()
            .evidence;
        let snapshot = kleene::snapshot::Snapshot::from_evidence(&evidence).unwrap();
        let binding = kleene::acceptance::BuildBinding::new(
            channel,
            plan.digest(),
            evidence.evidence_version(),
        );
        let records = records.borrow();
        let clean = kleene::acceptance::accept_audited(
            &plan,
            &evidence,
            &snapshot,
            &binding,
            records.iter().map(|(t, c, r)| (t, *c, r)),
        )
        .unwrap();
        // The log: one JSON line per record, `task call record`.
        let log: String = records
            .iter()
            .map(|(t, c, r)| format!("{t} {c} {}\n", r.to_json()))
            .collect();
        let mut bytes = log.into_bytes();
        let at = at_seed % bytes.len();
        bytes[at] ^= flip;
        let read: Vec<(TaskId, u32, ClosureRecord)> = String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|line| {
                let mut parts = line.splitn(3, ' ');
                let task = TaskId::new(parts.next()?).ok()?;
                let call = parts.next()?.parse().ok()?;
                let record = ClosureRecord::from_json(parts.next()?).ok()?;
                Some((task, call, record))
            })
            .collect();
        let given = || read.iter().map(|(t, c, r)| (t, *c, r));
        match kleene::acceptance::accept_audited(&plan, &evidence, &snapshot, &binding, given()) {
            Err(err) => prop_assert!(err.problems().iter().all(|p| matches!(
                p,
                kleene::acceptance::AcceptanceProblem::ClosureRecord(_)
            ))),
            Ok(sealed) => {
                prop_assert_eq!(sealed.digest(), clean.digest());
                prop_assert!(evidence.verify_closures(given()).is_ok());
                prop_assert!(sealed.verify_closures(given()).is_ok());
            }
        }
    }
}
