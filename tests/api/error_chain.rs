//! Errors chain: each level's message says what failed and its `source()` says why, and no
//! message repeats the message of its source.
//!
//! Guards the bug where a journal's I/O error, a refused closure state and a refused
//! execution token printed their cause and returned it from `source()` as well, so a
//! reporter that walks the chain (as `kleene::error::Chain` does) said everything twice.

use std::collections::BTreeMap;
use std::error::Error as StdError;

use kleene::batch::{
    Batch, Candidate, FileJournal, MemoryJournal, Proposal, Worker, WorkerCall, WorkerFailure,
    evidence::EvidenceEvent, journal::EvidenceJournal,
};
use kleene::error::{Chain, Error};
use kleene::testing::closure::ScriptedAgent;
use kleene::{
    AppBuildPlan, Task,
    closure::Closure,
    closure::{
        ClosureState, ExecutionOutput, GovernanceDecision, RecoveryPolicy, Severity, Spec,
        ValidatorResult, Verdict, step::Session, step::Step,
    },
    id::{ChannelId, TaskId, ValidatorId},
    plan::AdmittedPath,
};

/// Every message of `err`'s chain, outermost first.
fn levels(err: &(dyn StdError + 'static)) -> Vec<String> {
    let mut out = vec![err.to_string()];
    let mut cause = err.source();
    while let Some(e) = cause {
        out.push(e.to_string());
        cause = e.source();
    }
    out
}

/// Asserts that no level of `err`'s chain prints the level below it, that the chain is at
/// least `depth` deep, and that the umbrella error wraps it without adding or losing a level.
fn assert_chains(err: impl Into<Error> + StdError + 'static, depth: usize) {
    let own = levels(&err);
    assert!(own.len() >= depth, "expected {depth} levels: {own:#?}");
    for pair in own.windows(2) {
        assert!(
            !pair[0].contains(&pair[1]),
            "{:?} repeats its source {:?}",
            pair[0],
            pair[1]
        );
    }
    let chained = Chain(&err).to_string();
    assert_eq!(chained, own.join(": "));
    let wrapped: Error = err.into();
    assert_eq!(
        levels(&wrapped),
        own,
        "the umbrella error changes the chain"
    );
}

#[test]
fn a_journal_that_cannot_be_opened_says_where_and_chains_the_os_error() {
    let file = std::env::temp_dir().join(format!("kleene-chain-{}", std::process::id()));
    std::fs::write(&file, b"not a directory").unwrap();
    let err = FileJournal::open(file.join("journal")).unwrap_err();
    std::fs::remove_file(&file).unwrap();
    let chain = levels(&err);
    assert!(chain[0].starts_with("access journal at "), "{chain:?}");
    assert_chains(err, 2);
}

struct Writes;

impl Worker for Writes {
    fn call(&mut self, _: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        Ok(Candidate::new(BTreeMap::from([(
            AdmittedPath::admit("config/app.toml").unwrap(),
            b"x".to_vec(),
        )]))
        .into())
    }
}

#[test]
fn a_journal_that_does_not_fold_chains_the_fold_error() {
    let plan = AppBuildPlan::from_json(
        r#"{"tasks": [{"id": "svc", "owner": "ServiceAgent", "spec": {"intent": "settings"},
            "owned_paths": ["config/app.toml"]}]}"#,
    )
    .unwrap()
    .validate()
    .unwrap();
    let channel = ChannelId::new("chain").unwrap();
    let batch = Batch::new(&plan, channel.clone());
    let mut journal = MemoryJournal::default();
    batch.dispatch(&mut Writes, &(), &mut journal).unwrap();
    // A settlement repeated after its task was accepted, as two writers leave it.
    let events = journal.load(&channel).unwrap().unwrap().events;
    let settled = events
        .iter()
        .rev()
        .find(|e| matches!(e, EvidenceEvent::Settled { .. }))
        .unwrap()
        .clone();
    journal.append(&channel, &[settled]).unwrap();
    let err = batch.resume(&mut Writes, &(), &mut journal).unwrap_err();
    let chain = levels(&err);
    assert_eq!(chain[0], "batch on channel chain", "{chain:?}");
    assert_eq!(chain[1], "fold journal of channel chain", "{chain:?}");
    assert!(chain[2].contains("restore it from a copy"), "{chain:?}");
    assert_chains(err, 3);
}

#[test]
fn a_closure_state_with_a_broken_audit_log_chains_the_audit_error() {
    let failing = Verdict::new([ValidatorResult::new(
        ValidatorId::new("tests").unwrap(),
        Severity::Blocker,
        true,
        "test tests::login ... FAILED",
    )]);
    let mut agent = ScriptedAgent::new().post_verdicts([failing, Verdict::clean()]);
    let task = Task::new(TaskId::new("x").unwrap(), Spec::new("add /login"));
    let mut closure = Closure::start(
        task,
        Session::new("build", "demo").unwrap(),
        RecoveryPolicy::default(),
    );
    while !matches!(&closure, Closure::PostValidate(due) if due.task().depth() == 1) {
        closure = closure.step(&mut agent);
    }
    let mut json = serde_json::to_value(closure.state()).unwrap();
    let entries = json["post_validate"]["audit"]["entries"]
        .as_array_mut()
        .unwrap();
    entries.remove(1);
    let state: ClosureState = serde_json::from_value(json).unwrap();
    let err = Closure::restore(state).unwrap_err();
    assert!(
        matches!(err, kleene::closure::machine::ClosureStateError::Audit(_)),
        "{err:?}"
    );
    assert_chains(err, 2);
}

#[test]
fn a_refused_token_names_the_task_and_chains_why() {
    let session = Session::new("build", "demo").unwrap();
    let ready = |id: &str| {
        let task = Task::new(TaskId::new(id).unwrap(), Spec::new("x"));
        let (step, token) = Step::new(task, session.clone())
            .govern(GovernanceDecision::Approve)
            .unwrap();
        (step.pre_validate(Verdict::clean()).unwrap(), token)
    };
    let (a, _) = ready("a");
    let (_, b_token) = ready("b");
    let err = a
        .execute(b_token, ExecutionOutput::new("done"))
        .unwrap_err();
    let chain = levels(&err);
    assert_eq!(
        chain,
        [
            "execute task a: its validation token was refused",
            "token minted for task b presented to execute task a",
        ]
    );
    assert_chains(err, 2);
}

#[test]
fn an_archive_whose_record_was_edited_chains_the_record_error() {
    use kleene::batch::{
        BatchEvidence, evidence::EVIDENCE_VERSION, evidence::InventoryEntry, evidence::Settlement,
    };
    use kleene::{
        acceptance::BuildBinding, acceptance::VerifyError, acceptance::accept, acceptance::export,
        acceptance::verify_archive, id::Digest, snapshot::Snapshot,
    };

    let plan = AppBuildPlan::from_json(
        r#"{"tasks": [{"id": "cfg", "owner": "ConfigAgent", "spec": {"intent": "config"},
            "owned_paths": ["config/app.yaml"]}]}"#,
    )
    .unwrap()
    .validate()
    .unwrap();
    let task = TaskId::new("cfg").unwrap();
    let channel = ChannelId::new("chain").unwrap();
    let candidate = Candidate::new(BTreeMap::from([(
        AdmittedPath::admit("config/app.yaml").unwrap(),
        b"name: demo\n".to_vec(),
    )]));
    let evidence = BatchEvidence::fold([
        EvidenceEvent::Started {
            channel: channel.clone(),
            plan_digest: plan.digest(),
            evidence_version: EVIDENCE_VERSION,
            inputs: BTreeMap::new(),
            recovery: false,
            inventory: vec![InventoryEntry {
                task: task.clone(),
                owner: "ConfigAgent".parse().unwrap(),
                budget: 4,
            }],
        },
        EvidenceEvent::Reserved {
            task: task.clone(),
            attempt: 1,
            input_digest: Digest::from_bytes([0; 32]),
        },
        EvidenceEvent::Settled {
            task,
            attempt: 1,
            settlement: Settlement::Accepted {
                digest: candidate.digest(),
                candidate,
            },
        },
    ])
    .unwrap();
    let snapshot = Snapshot::from_evidence(&evidence).unwrap();
    let binding = BuildBinding::new(channel, plan.digest(), EVIDENCE_VERSION);
    let record = accept(&plan, &evidence, &snapshot, &binding).unwrap();
    let mut archive = export(&record, &snapshot).unwrap().into_bytes();
    // One hex digit of the recorded plan digest, changed to another hex digit.
    let hex = plan.digest().to_string();
    let at = archive
        .windows(hex.len())
        .position(|w| w == hex.as_bytes())
        .unwrap();
    archive[at] = if archive[at] == b'0' { b'1' } else { b'0' };
    let err = verify_archive(&archive, record.digest()).unwrap_err();
    assert!(matches!(err, VerifyError::Record(_)), "{err:?}");
    assert_chains(err, 2);
}

#[test]
fn errors_without_a_cause_wrap_as_themselves() {
    assert_chains(TaskId::new("").unwrap_err(), 1);
    assert_chains(AdmittedPath::admit("../etc").unwrap_err(), 1);
    let invalid = AppBuildPlan::from_json(
        r#"{"tasks": [{"id": "a", "owner": "o", "spec": {"intent": "x"},
            "depends_on": ["b"]}]}"#,
    )
    .unwrap()
    .validate()
    .unwrap_err();
    assert_chains(invalid, 1);
    assert_chains(AppBuildPlan::from_json("{").unwrap_err(), 1);
}

/// The text of every `#[error(…)]` attribute and every `Display` implementation in `src`.
fn message_sources() -> Vec<(String, String)> {
    fn files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    /// The text from `start` to the bracket that closes the first `open` after it.
    fn balanced(text: &str, start: usize, open: char, close: char) -> &str {
        let mut depth = 0usize;
        for (i, c) in text[start..].char_indices() {
            if c == open {
                depth += 1;
            } else if c == close {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return &text[start..start + i + 1];
                }
            }
        }
        &text[start..]
    }
    let mut paths = Vec::new();
    // The library's messages and the command-line tool's (its own package, `cli/`).
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    files(&root.join("src"), &mut paths);
    files(&root.join("cli/src"), &mut paths);
    let mut found = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.display().to_string();
        for (at, _) in text.match_indices("#[error(") {
            found.push((name.clone(), balanced(&text, at, '(', ')').to_owned()));
        }
        for (at, _) in text.match_indices("Display for ") {
            found.push((name.clone(), balanced(&text, at, '{', '}').to_owned()));
        }
    }
    found
}

/// Messages are for people: `Debug` output (quoted and escaped at best, struct dumps at
/// worst) is no part of one. Guards the messages that printed a task status, a path list,
/// magic bytes and every refused path through `{:?}`.
#[test]
fn no_message_uses_debug_formatting() {
    let sources = message_sources();
    assert!(sources.len() > 100, "found only {} messages", sources.len());
    let offenders: Vec<String> = sources
        .iter()
        .filter(|(_, text)| text.contains(":?}") || text.contains(":#?}"))
        .map(|(file, text)| format!("{file}: {text}"))
        .collect();
    assert!(
        offenders.is_empty(),
        "Debug in messages:\n{}",
        offenders.join("\n\n")
    );
}
