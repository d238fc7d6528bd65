//! Snapshot projection, scoped artifact repair, acceptance, canonical export and archive
//! verification (R11, "artifact admission and completeness").

use std::collections::BTreeMap;

use kleene::batch::{
    BatchEvidence, Candidate, Rejection, evidence::EVIDENCE_VERSION, evidence::EvidenceEvent,
    evidence::InventoryEntry, evidence::Settlement,
};
use kleene::{
    AppBuildPlan, ValidatedPlan,
    acceptance::{
        AcceptanceProblem, BuildBinding, ExportError, FileMismatch, VerifyError, accept, export,
        verify_archive,
    },
    closure::Spec,
    id::{AgentId, ChannelId, Digest, TaskId, ValidatorId},
    plan::{AdmittedPath, ModuleName, PlannedTask, TaskKind},
    snapshot::{
        Diagnostic, ProposalProblem, REPAIR_PROPOSAL_BUDGET, RepairError, RepairLedger,
        RepairProposal, RouteRefusal, Snapshot,
    },
};
use proptest::prelude::*;
use sha2::Digest as _;

fn p(s: &str) -> AdmittedPath {
    AdmittedPath::admit(s).unwrap()
}

fn t(s: &str) -> TaskId {
    TaskId::new(s).unwrap()
}

const SCHEMA: &str = "backend/schemas.py";
const SERVICE: &str = "backend/services.py";
const MODULE: &str = "backend/tasks/__init__.py";
const PAGE: &str = "frontend/pages/tasks.tsx";
const CONFIG: &str = "config/app.yaml";

/// A plan with a module lane, a model (schema), a service, a page and an app config task,
/// each owning exactly its files.
fn plan_tasks() -> Vec<PlannedTask> {
    let m = || ModuleName::new("tasks").unwrap();
    let task = |id: &str, kind, owner: &str, paths: &[&str]| {
        paths.iter().fold(
            PlannedTask::new(t(id), kind, AgentId::new(owner).unwrap(), Spec::new(id)),
            |task, path| task.owning(p(path)),
        )
    };
    vec![
        task(
            "module_tasks",
            TaskKind::Module { module: m() },
            "ModuleAgent",
            &[MODULE],
        ),
        task(
            "model_tasks",
            TaskKind::Model { module: m() },
            "ModelAgent",
            &[SCHEMA],
        ),
        task(
            "service_tasks",
            TaskKind::Service { module: m() },
            "ServiceAgent",
            &[SERVICE],
        ),
        task(
            "page_tasks",
            TaskKind::Page { module: m() },
            "PageAgent",
            &[PAGE],
        ),
        task(
            "config_app",
            TaskKind::Config { module: None },
            "ConfigAgent",
            &[CONFIG],
        ),
    ]
}

fn plan() -> ValidatedPlan {
    AppBuildPlan::new(plan_tasks()).validate().unwrap()
}

fn outputs() -> BTreeMap<TaskId, BTreeMap<AdmittedPath, Vec<u8>>> {
    let one = |path: &str, body: &str| BTreeMap::from([(p(path), body.as_bytes().to_vec())]);
    BTreeMap::from([
        (
            t("module_tasks"),
            one(MODULE, "ACTIONS = ['create', 'list']\n"),
        ),
        (
            t("model_tasks"),
            one(SCHEMA, "class Task(BaseModel):\n    title: str\n"),
        ),
        (
            t("service_tasks"),
            one(SERVICE, "class TaskModule:\n    def create(self): ...\n"),
        ),
        (
            t("page_tasks"),
            one(PAGE, "export default function Tasks() {}\n"),
        ),
        (t("config_app"), one(CONFIG, "name: demo\n")),
    ])
}

const CHANNEL: &str = "chan-1";

/// Evidence of a batch that ran `plan` on [`CHANNEL`]: every task with an output is
/// accepted on its first call; `rejected` tasks are refused once; the rest never ran.
fn evidence_with(
    plan: &ValidatedPlan,
    outputs: &BTreeMap<TaskId, BTreeMap<AdmittedPath, Vec<u8>>>,
    rejected: &[&str],
) -> BatchEvidence {
    let inventory = plan
        .tasks()
        .map(|task| InventoryEntry {
            task: task.id.clone(),
            owner: task.owner.clone(),
            budget: task.retry_limit + 1,
        })
        .collect();
    let mut events = vec![EvidenceEvent::Started {
        channel: ChannelId::new(CHANNEL).unwrap(),
        plan_digest: plan.digest(),
        evidence_version: EVIDENCE_VERSION,
        inputs: BTreeMap::new(),
        recovery: false,
        inventory,
    }];
    for id in plan.topological_order() {
        let settlement = if rejected.contains(&id.as_str()) {
            Settlement::Rejected {
                candidate: Candidate::default(),
                rejection: Rejection::contract(id, "missing action list"),
            }
        } else if let Some(files) = outputs.get(id) {
            let candidate = Candidate::new(files.clone());
            let digest = candidate.digest();
            Settlement::Accepted { candidate, digest }
        } else {
            continue;
        };
        events.push(EvidenceEvent::Reserved {
            task: id.clone(),
            attempt: 1,
            input_digest: Digest::from_bytes([7; 32]),
        });
        events.push(EvidenceEvent::Settled {
            task: id.clone(),
            attempt: 1,
            settlement,
        });
    }
    BatchEvidence::fold(events).unwrap()
}

pub(crate) struct Build {
    pub(crate) plan: ValidatedPlan,
    pub(crate) evidence: BatchEvidence,
    pub(crate) snapshot: Snapshot,
}

fn build_with(outputs: &BTreeMap<TaskId, BTreeMap<AdmittedPath, Vec<u8>>>) -> Build {
    let plan = plan();
    let evidence = evidence_with(&plan, outputs, &[]);
    let snapshot = Snapshot::from_evidence(&evidence).unwrap();
    Build {
        plan,
        evidence,
        snapshot,
    }
}

pub(crate) fn build() -> Build {
    build_with(&outputs())
}

pub(crate) fn binding(b: &Build) -> BuildBinding {
    BuildBinding::new(
        ChannelId::new(CHANNEL).unwrap(),
        b.plan.digest(),
        EVIDENCE_VERSION,
    )
}

fn diag(path: &str, message: &str) -> Diagnostic {
    Diagnostic::new(p(path), ValidatorId::new("schema_check").unwrap(), message)
}

#[test]
fn complete_build_is_accepted_exported_and_verified() {
    let b = build();
    let record = accept(&b.plan, &b.evidence, &b.snapshot, &binding(&b)).unwrap();
    assert_eq!(record.task_results().len(), 5);
    assert_eq!(record.files().digest(), b.snapshot.manifest().digest());
    assert_eq!(record.evidence_digest(), b.evidence.digest());
    let archive = export(&record, &b.snapshot).unwrap();
    let verified = verify_archive(archive.as_bytes(), record.digest()).unwrap();
    assert_eq!(verified.files().len(), 5);
    assert_eq!(
        verified.files()[&p(SCHEMA)],
        outputs()[&t("model_tasks")][&p(SCHEMA)]
    );

    let statement: serde_json::Value =
        serde_json::from_str(&verified.in_toto_statement().to_json()).unwrap();
    assert_eq!(statement["_type"], "https://in-toto.io/Statement/v1");
    assert_eq!(
        statement["predicate"]["record_digest"],
        record.digest().to_string()
    );
    let subjects = statement["subject"].as_array().unwrap();
    assert_eq!(subjects.len(), 5);
    for s in subjects {
        let content = &verified.files()[&p(s["name"].as_str().unwrap())];
        let sha = sha2::Sha256::digest(content);
        let hex: String = sha.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(s["digest"]["sha256"], hex);
        assert_eq!(
            s["digest"]["blake3"],
            blake3::hash(content).to_hex().as_str()
        );
    }
}

#[test]
fn service_task_cannot_change_or_delete_the_model_schema() {
    let b = build();
    let ledger = RepairLedger::default();
    let routes = ledger
        .route(
            &b.plan,
            &b.evidence,
            &b.snapshot,
            &[diag(SERVICE, "handler missing create")],
        )
        .unwrap();
    let [request] = routes.requests() else {
        panic!("{routes:?}")
    };
    assert_eq!(request.target(), &t("service_tasks"));
    for proposal in [
        RepairProposal::new().write(p(SCHEMA), "class Task: pass\n"),
        RepairProposal::new().delete(p(SCHEMA)),
        RepairProposal::new()
            .write(p(SERVICE), "class TaskModule: ...\n")
            .write(p(SCHEMA), "class Task: pass\n"),
    ] {
        let submitted =
            RepairLedger::default().submit(&b.plan, &b.evidence, &b.snapshot, request, proposal);
        match submitted.outcome {
            Err(RepairError::Rejected { problems, .. }) => assert_eq!(
                problems,
                [ProposalProblem::NotOwned {
                    path: p(SCHEMA),
                    owner: Some(t("model_tasks"))
                }]
            ),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        b.snapshot.get(&p(SCHEMA)).unwrap().task(),
        &t("model_tasks")
    );
}

#[test]
fn schema_staging_is_atomic() {
    let b = build();
    let before = b.snapshot.clone();
    let ledger = RepairLedger::default();
    let routes = ledger
        .route(
            &b.plan,
            &b.evidence,
            &b.snapshot,
            &[diag(SCHEMA, "Task lacks due_date")],
        )
        .unwrap();
    let request = &routes.requests()[0];
    assert_eq!(request.target(), &t("model_tasks"));
    // A valid schema change staged with an unowned file: refused whole.
    let staged = RepairProposal::new()
        .write(p(SCHEMA), "class Task(BaseModel):\n    due_date: date\n")
        .write(p("backend/migrations/001.py"), "ALTER TABLE\n")
        .delete(p(SCHEMA));
    let submitted = ledger.submit(&b.plan, &b.evidence, &b.snapshot, request, staged);
    let Err(RepairError::Rejected { problems, .. }) = &submitted.outcome else {
        panic!("{:?}", submitted.outcome)
    };
    assert_eq!(
        problems,
        &[
            ProposalProblem::NotOwned {
                path: p("backend/migrations/001.py"),
                owner: None
            },
            ProposalProblem::DeletesRequiredArtifact { path: p(SCHEMA) },
        ]
    );
    assert_eq!(b.snapshot, before);
    assert_eq!(submitted.ledger.proposals(&t("model_tasks")), 1);

    // The same request cannot dispatch again; a fresh route stops the unchanged target.
    let again = submitted.ledger.submit(
        &b.plan,
        &b.evidence,
        &b.snapshot,
        request,
        RepairProposal::new().write(p(SCHEMA), "x"),
    );
    assert!(matches!(
        again.outcome,
        Err(RepairError::RequestConsumed { .. })
    ));
    let rerouted = submitted
        .ledger
        .route(
            &b.plan,
            &b.evidence,
            &b.snapshot,
            &[diag(SCHEMA, "Task lacks due_date")],
        )
        .unwrap();
    assert!(rerouted.requests().is_empty());
    assert!(matches!(
        rerouted.refused(),
        [RouteRefusal::Unchanged { .. }]
    ));

    // A valid proposal yields a new snapshot; the old value is untouched.
    let fixed = "class Task(BaseModel):\n    due_date: date\n";
    let ok = ledger.submit(
        &b.plan,
        &b.evidence,
        &b.snapshot,
        request,
        RepairProposal::new().write(p(SCHEMA), fixed),
    );
    let repaired = ok.outcome.unwrap();
    assert_eq!(
        repaired.get(&p(SCHEMA)).unwrap().content(),
        fixed.as_bytes()
    );
    assert_eq!(b.snapshot, before);
    let record = accept(&b.plan, &b.evidence, &repaired, &binding(&b)).unwrap();
    assert_eq!(
        record.files().get(&p(SCHEMA)).unwrap().len(),
        fixed.len() as u64
    );
}

#[test]
fn repair_routing_is_scoped_by_exact_paths() {
    let plan = plan();
    // page_tasks was refused once and config_app never ran.
    let mut outs = outputs();
    outs.remove(&t("config_app"));
    let evidence = evidence_with(&plan, &outs, &["page_tasks"]);
    let snapshot = Snapshot::from_evidence(&evidence).unwrap();
    let diagnostics = [
        diag(SCHEMA, "bad"),
        diag(SERVICE, "bad"),
        diag(SERVICE, "worse"),
        diag(PAGE, "missing"),
        diag(CONFIG, "missing"),
        diag("backend/schemas_v2.py", "unknown"),
    ];
    let routes = RepairLedger::default()
        .route(&plan, &evidence, &snapshot, &diagnostics)
        .unwrap();
    let targets: Vec<_> = routes
        .requests()
        .iter()
        .map(|r| r.target().as_str())
        .collect();
    assert_eq!(targets, ["model_tasks", "service_tasks"]);
    assert_eq!(routes.requests()[1].diagnostics().len(), 2);
    let batch: Vec<_> = routes
        .refused()
        .iter()
        .filter(|r| r.needs_batch_recovery())
        .map(|r| match r {
            RouteRefusal::NeedsBatchRecovery { task, paths, .. } => (task.as_str(), paths.clone()),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(
        batch,
        [
            ("config_app", vec![p(CONFIG)]),
            ("page_tasks", vec![p(PAGE)])
        ]
    );
    assert!(routes.refused().contains(&RouteRefusal::Unowned {
        path: p("backend/schemas_v2.py")
    }));
}

#[test]
fn a_stuck_target_does_not_starve_an_independent_one() {
    let b = build();
    let diagnostics = [diag(SCHEMA, "bad"), diag(PAGE, "bad")];
    let ledger = RepairLedger::default();
    let routes = ledger
        .route(&b.plan, &b.evidence, &b.snapshot, &diagnostics)
        .unwrap();
    let model = &routes.requests()[0];
    assert_eq!(model.target(), &t("model_tasks"));
    // The model repair changes nothing: same bytes.
    let same = b.snapshot.get(&p(SCHEMA)).unwrap().content().to_vec();
    let s = ledger.submit(
        &b.plan,
        &b.evidence,
        &b.snapshot,
        model,
        RepairProposal::new().write(p(SCHEMA), same),
    );
    let snapshot = s.outcome.unwrap();
    let routes = s
        .ledger
        .route(&b.plan, &b.evidence, &snapshot, &diagnostics)
        .unwrap();
    let targets: Vec<_> = routes
        .requests()
        .iter()
        .map(|r| r.target().as_str())
        .collect();
    assert_eq!(targets, ["page_tasks"]);
    assert!(
        matches!(routes.refused(), [RouteRefusal::Unchanged { task, .. }] if task.as_str() == "model_tasks")
    );
}

#[test]
fn omitted_planned_file_blocks_acceptance_and_export() {
    let mut outs = outputs();
    outs.get_mut(&t("page_tasks")).unwrap().clear();
    let b = build_with(&outs);
    let err = accept(&b.plan, &b.evidence, &b.snapshot, &binding(&b)).unwrap_err();
    assert_eq!(
        err.problems(),
        [AcceptanceProblem::MissingPlannedFile {
            path: p(PAGE),
            task: t("page_tasks")
        }]
    );
    // A record of the complete build cannot export the incomplete snapshot.
    let complete = build();
    let record = accept(
        &complete.plan,
        &complete.evidence,
        &complete.snapshot,
        &binding(&complete),
    )
    .unwrap();
    assert!(matches!(
        export(&record, &b.snapshot),
        Err(ExportError::EvidenceMismatch { .. })
    ));
}

#[test]
fn changed_task_evidence_blocks_acceptance_and_export() {
    let original = build();
    let record = accept(
        &original.plan,
        &original.evidence,
        &original.snapshot,
        &binding(&original),
    )
    .unwrap();
    let mut outs = outputs();
    outs.insert(
        t("service_tasks"),
        BTreeMap::from([(p(SERVICE), b"class UserSessionHandler: ...\n".to_vec())]),
    );
    let changed = build_with(&outs);
    // The original snapshot against the changed evidence.
    let err = accept(
        &changed.plan,
        &changed.evidence,
        &original.snapshot,
        &binding(&changed),
    )
    .unwrap_err();
    assert!(matches!(
        err.problems(),
        [AcceptanceProblem::EvidenceChanged { .. }]
    ));
    // The original record cannot export the snapshot of the changed evidence.
    assert!(matches!(
        export(&record, &changed.snapshot),
        Err(ExportError::EvidenceMismatch { .. })
    ));
    // A binding to another channel or plan is a problem too, listed with every other one.
    let other = BuildBinding::new(
        ChannelId::new("chan-2").unwrap(),
        Digest::from_bytes([1; 32]),
        9,
    );
    let err = accept(&changed.plan, &changed.evidence, &original.snapshot, &other).unwrap_err();
    assert_eq!(err.problems().len(), 4, "{err}");
}

#[test]
fn unaccepted_tasks_are_listed() {
    let plan = plan();
    let mut outs = outputs();
    outs.remove(&t("config_app"));
    let evidence = evidence_with(&plan, &outs, &["page_tasks"]);
    let snapshot = Snapshot::from_evidence(&evidence).unwrap();
    let binding = BuildBinding::new(
        ChannelId::new(CHANNEL).unwrap(),
        plan.digest(),
        EVIDENCE_VERSION,
    );
    let err = accept(&plan, &evidence, &snapshot, &binding).unwrap_err();
    let not_accepted: Vec<_> = err
        .problems()
        .iter()
        .filter_map(|p| match p {
            AcceptanceProblem::TaskNotAccepted { task, .. } => Some(task.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(not_accepted, ["config_app", "page_tasks"]);
    let missing: Vec<_> = err.problems().iter().filter_map(|p| p.path()).collect();
    assert_eq!(missing, [&p(CONFIG), &p(PAGE)]);
}

// ---- archive tampering -------------------------------------------------------------------

/// The entries of an archive: (name, content, byte range of the content).
pub(crate) fn entries(archive: &[u8]) -> Vec<(String, Vec<u8>, std::ops::Range<usize>)> {
    use std::io::Read;
    let mut a = tar::Archive::new(archive);
    a.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let name = String::from_utf8(e.path_bytes().into_owned()).unwrap();
            let start = e.raw_file_position() as usize;
            let mut content = Vec::new();
            e.read_to_end(&mut content).unwrap();
            let range = start..start + content.len();
            (name, content, range)
        })
        .collect()
}

/// A tar of `entries` in the given order with canonical headers.
pub(crate) fn tar_of(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, content) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_size(content.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        b.append_data(&mut h, name, content.as_slice()).unwrap();
    }
    b.into_inner().unwrap()
}

/// A generated file set of 1..8 tasks' worth of files, for property tests.
fn file_sets() -> impl Strategy<Value = BTreeMap<TaskId, BTreeMap<AdmittedPath, Vec<u8>>>> {
    proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 5).prop_map(
        |bodies| {
            let mut outs = outputs();
            for ((_, files), body) in outs.iter_mut().zip(bodies) {
                for content in files.values_mut() {
                    content.extend_from_slice(&body);
                }
            }
            outs
        },
    )
}

fn accepted_archive(outs: &BTreeMap<TaskId, BTreeMap<AdmittedPath, Vec<u8>>>) -> (Digest, Vec<u8>) {
    let b = build_with(outs);
    let record = accept(&b.plan, &b.evidence, &b.snapshot, &binding(&b)).unwrap();
    (
        record.digest(),
        export(&record, &b.snapshot).unwrap().into_bytes(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn any_flipped_byte_fails_verification_naming_the_path(
        outs in file_sets(),
        pick in any::<prop::sample::Index>(),
        bit in 0u8..8,
        anywhere in any::<prop::sample::Index>(),
    ) {
        let (digest, archive) = accepted_archive(&outs);
        let contents: Vec<_> = entries(&archive).into_iter().filter(|e| !e.2.is_empty()).collect();
        let (name, _, range) = &contents[pick.index(contents.len())];
        let offset = range.start + pick.index(range.len());
        let mut tampered = archive.clone();
        tampered[offset] ^= 1 << bit;
        let err = verify_archive(&tampered, digest).unwrap_err();
        if name == "acceptance.json" {
            prop_assert_eq!(err.entry(), Some("acceptance.json"), "{}", err);
        } else {
            let path = name.strip_prefix("files/").unwrap();
            prop_assert!(
                matches!(err.mismatches(), [FileMismatch::Changed { path: p, .. }] if p.as_str() == path),
                "{}", err
            );
        }
        // A flip anywhere else (headers, padding, trailer) fails too.
        let mut tampered = archive.clone();
        tampered[anywhere.index(archive.len())] ^= 1 << bit;
        prop_assert!(verify_archive(&tampered, digest).is_err());
    }

    #[test]
    fn renamed_added_removed_files_fail_naming_the_paths(
        outs in file_sets(),
        pick in any::<prop::sample::Index>(),
        change in 0u8..3,
    ) {
        let (digest, archive) = accepted_archive(&outs);
        let mut list: Vec<(String, Vec<u8>)> =
            entries(&archive).into_iter().map(|(n, c, _)| (n, c)).collect();
        let i = 1 + pick.index(list.len() - 1);
        let old = list[i].0.strip_prefix("files/").unwrap().to_owned();
        let expected: Vec<FileMismatch> = match change {
            0 => {
                let new = format!("{old}.bak");
                list[i].0 = format!("files/{new}");
                vec![FileMismatch::Missing { path: p(&old) }, FileMismatch::Extra { path: p(&new) }]
            }
            1 => {
                list.remove(i);
                vec![FileMismatch::Missing { path: p(&old) }]
            }
            _ => {
                let new = format!("{old}.extra");
                list.push((format!("files/{new}"), b"payload".to_vec()));
                vec![FileMismatch::Extra { path: p(&new) }]
            }
        };
        // Keep canonical order so the only difference is the file set.
        let record = list.remove(0);
        list.sort_by(|a, b| p(&a.0[6..]).cmp(&p(&b.0[6..])));
        list.insert(0, record);
        let err = verify_archive(&tar_of(&list), digest).unwrap_err();
        prop_assert_eq!(err.mismatches(), &expected[..], "{}", err);
    }

    #[test]
    fn reordered_entries_fail_naming_the_entry(outs in file_sets(), a in any::<prop::sample::Index>(), b in any::<prop::sample::Index>()) {
        let (digest, archive) = accepted_archive(&outs);
        let mut list: Vec<(String, Vec<u8>)> =
            entries(&archive).into_iter().map(|(n, c, _)| (n, c)).collect();
        let (i, j) = (a.index(list.len()), b.index(list.len()));
        prop_assume!(i != j);
        list.swap(i, j);
        let err = verify_archive(&tar_of(&list), digest).unwrap_err();
        let named = err.entry().map(str::to_owned);
        prop_assert!(matches!(err, VerifyError::OutOfOrder { .. }), "{}", err);
        // The first entry out of place is the one moved forward or the one right after it.
        let lo = i.min(j);
        prop_assert!(named == Some(list[lo].0.clone()) || named == Some(list[lo + 1].0.clone()), "{:?}", named);
    }

    #[test]
    fn record_and_archive_are_identical_across_runs_and_input_orders(
        outs in file_sets(),
        order in Just(plan_tasks()).prop_shuffle(),
    ) {
        let (digest, archive) = accepted_archive(&outs);
        let plan = AppBuildPlan::new(order).validate().unwrap();
        let evidence = evidence_with(&plan, &outs, &[]);
        let snapshot = Snapshot::from_evidence(&evidence).unwrap();
        let binding = BuildBinding::new(ChannelId::new(CHANNEL).unwrap(), plan.digest(), EVIDENCE_VERSION);
        let record = accept(&plan, &evidence, &snapshot, &binding).unwrap();
        prop_assert_eq!(record.digest(), digest);
        prop_assert_eq!(export(&record, &snapshot).unwrap().into_bytes(), archive);
    }
}

/// A random repair operation: which diagnosed path picks the target, and a proposal over
/// every planned path plus unowned ones.
/// (index of the diagnosed path, changes as (path index, content or deletion), replay an
/// earlier request instead of the fresh one).
type Operation = (usize, Vec<(usize, Option<Vec<u8>>)>, bool);

fn operations() -> impl Strategy<Value = Vec<Operation>> {
    // Indexes past the universe stand for the diagnosed path, so many proposals are
    // admissible and the budget is really spent.
    let change = (
        0usize..24,
        proptest::option::weighted(0.9, proptest::collection::vec(any::<u8>(), 0..8)),
    );
    proptest::collection::vec(
        (
            0usize..5,
            proptest::collection::vec(change, 0..3),
            any::<bool>(),
        ),
        1..12,
    )
}

const UNIVERSE: [&str; 7] = [
    SCHEMA,
    SERVICE,
    MODULE,
    PAGE,
    CONFIG,
    "backend/extra.py",
    "README.md",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn repairs_never_touch_paths_outside_their_target_nor_exceed_the_budget(ops in operations()) {
        let b = build();
        let mut ledger = RepairLedger::default();
        let mut snapshot = b.snapshot.clone();
        let mut judged: BTreeMap<TaskId, u32> = BTreeMap::new();
        let mut stale = Vec::new();
        for (diagnosed, changes, replay_stale) in ops {
            let diagnostics = [diag(UNIVERSE[diagnosed], "still failing")];
            let routes = ledger.route(&b.plan, &b.evidence, &snapshot, &diagnostics).unwrap();
            let request = match (replay_stale, stale.last(), routes.requests().first()) {
                (true, Some(old), _) => Clone::clone(old),
                (_, _, Some(r)) => r.clone(),
                (_, Some(old), None) => Clone::clone(old),
                (_, None, None) => continue,
            };
            let proposal = changes.into_iter().fold(RepairProposal::new(), |prop, (i, c)| {
                let path = p(UNIVERSE.get(i).unwrap_or(&UNIVERSE[diagnosed]));
                match c {
                    Some(bytes) => prop.write(path, bytes),
                    None => prop.delete(path),
                }
            });
            let before = snapshot.clone();
            let submitted = ledger.submit(&b.plan, &b.evidence, &snapshot, &request, proposal);
            match &submitted.outcome {
                Ok(next) => {
                    for path in UNIVERSE.map(p) {
                        if before.get(&path) != next.get(&path) {
                            prop_assert_eq!(b.plan.owner_of(&path), Some(request.target()));
                        }
                    }
                    *judged.entry(request.target().clone()).or_default() += 1;
                    snapshot = next.clone();
                }
                Err(RepairError::Rejected { .. }) => {
                    *judged.entry(request.target().clone()).or_default() += 1;
                }
                Err(_) => {}
            }
            stale.push(request);
            ledger = submitted.ledger;
            for (task, n) in &judged {
                prop_assert!(*n <= REPAIR_PROPOSAL_BUDGET);
                prop_assert_eq!(ledger.proposals(task), *n);
            }
            // Whatever happened, the snapshot is still a complete, acceptable build.
            prop_assert!(accept(&b.plan, &b.evidence, &snapshot, &binding(&b)).is_ok());
        }
    }
}

#[test]
fn two_proposals_then_the_target_is_exhausted() {
    let b = build();
    let diagnostics = [diag(SCHEMA, "Task lacks due_date")];
    let mut ledger = RepairLedger::default();
    let mut snapshot = b.snapshot.clone();
    for (n, body) in ["v1", "v2"].into_iter().enumerate() {
        let routes = ledger
            .route(&b.plan, &b.evidence, &snapshot, &diagnostics)
            .unwrap();
        let request = routes.requests()[0].clone();
        assert_eq!(request.attempt(), n as u32 + 1);
        let s = ledger.submit(
            &b.plan,
            &b.evidence,
            &snapshot,
            &request,
            RepairProposal::new().write(p(SCHEMA), body),
        );
        let next = s.outcome.unwrap();
        // The answered request cannot dispatch again, and it was routed on the old snapshot.
        let replay = s.ledger.submit(
            &b.plan,
            &b.evidence,
            &next,
            &request,
            RepairProposal::new().write(p(SCHEMA), "v9"),
        );
        assert!(matches!(
            replay.outcome,
            Err(RepairError::RequestConsumed { .. })
        ));
        ledger = s.ledger;
        snapshot = next;
    }
    let routes = ledger
        .route(&b.plan, &b.evidence, &snapshot, &diagnostics)
        .unwrap();
    assert_eq!(
        routes.refused(),
        [RouteRefusal::BudgetExhausted {
            task: t("model_tasks"),
            used: REPAIR_PROPOSAL_BUDGET
        }]
    );
    // A snapshot of other evidence is refused before any routing.
    let other = build_with(&{
        let mut o = outputs();
        o.insert(
            t("page_tasks"),
            BTreeMap::from([(p(PAGE), b"changed".to_vec())]),
        );
        o
    });
    assert!(matches!(
        ledger.route(&b.plan, &b.evidence, &other.snapshot, &diagnostics),
        Err(RepairError::EvidenceMismatch { .. })
    ));
}

#[test]
fn a_request_routed_on_an_older_snapshot_is_stale() {
    let b = build();
    let ledger = RepairLedger::default();
    let routes = ledger
        .route(
            &b.plan,
            &b.evidence,
            &b.snapshot,
            &[diag(SCHEMA, "x"), diag(SERVICE, "y")],
        )
        .unwrap();
    let [model, service] = routes.requests() else {
        panic!("{routes:?}")
    };
    let s = ledger.submit(
        &b.plan,
        &b.evidence,
        &b.snapshot,
        model,
        RepairProposal::new().write(p(SCHEMA), "fixed"),
    );
    let repaired = s.outcome.unwrap();
    // The service request was routed before the schema changed; its own files did not
    // change, so it is still current on the new snapshot.
    let s2 = s.ledger.submit(
        &b.plan,
        &b.evidence,
        &repaired,
        service,
        RepairProposal::new().write(p(SERVICE), "fixed"),
    );
    assert!(s2.outcome.is_ok());
    // A second model request routed on the original snapshot is stale after the repair.
    let again = s
        .ledger
        .route(&b.plan, &b.evidence, &b.snapshot, &[diag(SCHEMA, "x2")])
        .unwrap();
    let stale = s.ledger.submit(
        &b.plan,
        &b.evidence,
        &repaired,
        &again.requests()[0],
        RepairProposal::new().write(p(SCHEMA), "again"),
    );
    assert!(matches!(
        stale.outcome,
        Err(RepairError::StaleRequest { .. })
    ));
}
