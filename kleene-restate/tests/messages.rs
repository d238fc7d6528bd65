//! The adapter's own messages, as Restate journals them, pinned: a task call, every kind of
//! reply (and a proposal carrying its closure record), a fix draw, a submission, a run
//! report, a channel's status and the closure records it keeps. Restate replays a
//! journal after the adapter is upgraded, so each committed fixture must still read, and the
//! same value must write exactly the same JSON. The kleene values inside them (a dispatch, a
//! candidate, a settled closure) are read from kleene's own pinned fixtures.
//!
//! Run with `KLEENE_WRITE_FIXTURES=1` to (re)write the fixtures; a change to one is a format
//! change that in-flight calls would not survive.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kleene::batch::{
    Candidate, Proposal, Rejection, TaskStatus, evidence::ClosureSettlement, machine::Dispatch,
    worker::InfrastructureFailure,
};
use kleene::closure::ClosureRecord;
use kleene::id::{AgentId, ChannelId, Digest, TaskId};
use kleene::plan::AdmittedPath;
use kleene::shell::PlanFilesManifest;
use kleene_restate::call::{DrawAnswer, FixDraw, StoredClosure, TaskCall, TaskReply};
use kleene_restate::content::Files;
use kleene_restate::service::{PlanFileBytes, RunReport, Submission};
use kleene_restate::status::{ChannelStatus, TaskLine};
use serde::{Serialize, de::DeserializeOwned};

fn kleene_fixture<T: DeserializeOwned>(name: &str) -> T {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/json")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// `value`'s JSON must be the committed fixture's, and the fixture must read back as `value`.
fn pinned<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(name: &str, value: &T) {
    let json = serde_json::to_string(value).unwrap() + "\n";
    let path = fixture(name);
    if std::env::var_os("KLEENE_WRITE_FIXTURES").is_some() {
        std::fs::write(&path, &json).unwrap();
    }
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("read fixture {}: {e}", path.display()));
    assert_eq!(json, committed, "{name}: the JSON moved");
    let back: T = serde_json::from_str(&committed).unwrap();
    assert_eq!(&back, value, "{name}: reads back as another value");
}

fn id(s: &str) -> TaskId {
    TaskId::new(s).unwrap()
}

fn d(byte: u8) -> Digest {
    Digest::from_bytes([byte; 32])
}

/// A plan's files' manifest: `tasks/a.sh` and `fix.sh`.
fn manifest() -> PlanFilesManifest {
    PlanFilesManifest(BTreeMap::from([
        (AdmittedPath::admit("tasks/a.sh").unwrap(), d(5)),
        (AdmittedPath::admit("fix.sh").unwrap(), d(6)),
    ]))
}

/// Reads the committed fixture `name` as a `T`.
fn read<T: DeserializeOwned>(name: &str) -> T {
    serde_json::from_str(&std::fs::read_to_string(fixture(name)).unwrap()).unwrap()
}

#[test]
fn a_task_call_and_a_fix_draw_keep_their_json() {
    let dispatch: Dispatch = kleene_fixture("dispatch_v1_not_owned.json");
    let call = TaskCall {
        channel: ChannelId::new("chan").unwrap(),
        dispatch,
        plan: r#"{"tasks": []}"#.into(),
        plan_digest: None,
        plan_files: Some(manifest()),
        inputs: vec![(id("a"), d(1)), (id("a2"), d(2))],
    };
    pinned("task_call_v2.json", &call);
    // A call naming its plan by digest (what a channel sends now): no text.
    let by_digest = TaskCall {
        plan: String::new(),
        plan_digest: Some(d(3)),
        ..call.clone()
    };
    pinned("task_call_v3.json", &by_digest);
    // An earlier adapter's call (it named the submitter's directory) still reads, naming no
    // plan files: a worker refuses it.
    let old: TaskCall = read("task_call_v1.json");
    assert_eq!(old.plan_files, None);
    assert_eq!(old.dispatch, call.dispatch);
    let draw = FixDraw {
        task: id("b"),
        attempt: 2,
        fix: id("b_fix_1"),
        max: 10,
        turn: None,
    };
    pinned("fix_draw_v1.json", &draw);
    // A draw carrying its call's turn (what a worker sends now).
    let turned = FixDraw {
        turn: Some("inv_1/4242/1765000000".into()),
        ..draw
    };
    pinned("fix_draw_v2.json", &turned);
    // The ledger's answers.
    let answers = vec![
        DrawAnswer::Granted,
        DrawAnswer::Spent,
        DrawAnswer::Sealed,
        DrawAnswer::OtherTurn,
    ];
    pinned("draw_answers_v1.json", &answers);
}

#[test]
fn every_reply_keeps_its_json() {
    let candidate: Candidate = kleene_fixture("candidate_v1.json");
    let settled: Vec<ClosureSettlement> = kleene_fixture("closure_settlement_v1.json");
    let replies = vec![
        TaskReply::Proposal {
            candidate: candidate.clone(),
            rejection: None,
            closure: Some(settled[0].clone()),
            drawn: vec![id("b_fix_1")],
            record: None,
        },
        TaskReply::Proposal {
            candidate,
            rejection: Some(Rejection::Contract {
                task: id("b"),
                message: "missing out.txt".into(),
            }),
            closure: None,
            drawn: Vec::new(),
            record: None,
        },
        TaskReply::Withdrawn {
            detail: "the fix budget is spent".into(),
        },
        TaskReply::Failed(InfrastructureFailure::Timeout { after_ms: 30_000 }),
        TaskReply::Interrupted {
            nonce: "6b1e0c".into(),
        },
    ];
    // Candidates travel with their bytes as base64 now; the arrays of numbers an earlier
    // adapter wrote read as the same replies.
    pinned("task_replies_v2.json", &replies);
    assert_eq!(read::<Vec<TaskReply>>("task_replies_v1.json"), replies);
}

/// kleene's committed version-1 closure record (a checkpoint).
fn closure_record() -> ClosureRecord {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/closure/record_v1.ckpt");
    kleene::checkpoint::decode(&std::fs::read(path).unwrap()).unwrap()
}

/// A proposal carrying its closure's record (added after `task_replies_v1.json`, whose
/// replies carry none and keep their JSON), and the channel's answer of kept records.
#[test]
fn a_reply_with_its_closure_record_and_the_kept_records_keep_their_json() {
    let candidate: Candidate = kleene_fixture("candidate_v1.json");
    let record = closure_record();
    let reply = TaskReply::of(
        Ok(Proposal::new(candidate).closed_by(&id("b"), &record)),
        vec![id("b_fix_1")],
        Some(&record),
    );
    assert!(
        matches!(&reply, TaskReply::Proposal { record: Some(text), .. } if *text == record.to_json())
    );
    pinned("task_reply_record_v2.json", &reply);
    assert_eq!(read::<TaskReply>("task_reply_record_v1.json"), reply);
    let kept = vec![StoredClosure::of(id("b"), 2, &record)];
    pinned("closures_v1.json", &kept);
    assert_eq!(kept[0].read().unwrap(), record);
}

#[test]
fn a_submission_a_report_and_files_keep_their_json() {
    let submission = Submission {
        plan: r#"{"tasks": []}"#.into(),
        plan_files: Some(manifest()),
        file_bytes: vec![PlanFileBytes {
            digest: d(5),
            base64: "ZWNobyBhCg==".into(),
        }],
        jobs: 4,
        block: vec![AgentId::new("coder").unwrap()],
        continue_every: None,
        no_cache: false,
        calls_per_invocation: None,
    };
    pinned("submission_v2.json", &submission);
    // One that groups calls into worker invocations.
    let grouped = Submission {
        calls_per_invocation: Some(4),
        ..submission.clone()
    };
    pinned("submission_v4.json", &grouped);
    // One that says when a pass hands over to a new invocation.
    let handing_over = Submission {
        continue_every: Some(20),
        ..submission.clone()
    };
    pinned("submission_v3.json", &handing_over);
    // The channel keeps it without the bytes; an earlier adapter's reads with no plan files,
    // and the channel refuses it.
    let kept = Submission {
        file_bytes: Vec::new(),
        ..submission
    };
    pinned("submission_kept_v2.json", &kept);
    let old: Submission = read("submission_v1.json");
    assert_eq!((old.plan_files, old.file_bytes.len()), (None, 0));
    let status = ChannelStatus {
        channel: "chan".into(),
        tasks: vec![TaskLine {
            task: id("a"),
            status: TaskStatus::Accepted,
            calls: 1,
            fixes: 0,
            accepted: Some(d(3)),
            why: None,
        }],
        events: 7,
        evidence_digest: Some(d(4)),
        stopped: None,
    };
    pinned(
        "run_report_v1.json",
        &RunReport {
            status: status.clone(),
            resumed: true,
            continued: false,
            cache_warnings: Vec::new(),
        },
    );
    // A pass that handed over says so.
    pinned(
        "run_report_continued_v1.json",
        &RunReport {
            status: status.clone(),
            resumed: false,
            continued: true,
            cache_warnings: Vec::new(),
        },
    );
    // A failed task's line says why; an answer without the field (the first above, or an
    // earlier adapter's) reads as saying nothing.
    let mut failed = status.clone();
    failed.tasks[0] = TaskLine {
        status: TaskStatus::Failed,
        accepted: None,
        why: Some("call 1 rejected: too large".into()),
        ..failed.tasks[0].clone()
    };
    pinned(
        "run_report_failed_v1.json",
        &RunReport {
            status: failed,
            resumed: false,
            continued: false,
            cache_warnings: Vec::new(),
        },
    );
    // A task accepted after a fix says how many (the field is left out when none, so the
    // answers above keep their JSON).
    let mut fixed = status;
    fixed.tasks[0].fixes = 1;
    pinned("status_fixes_v1.json", &fixed);
    let candidate: Candidate = kleene_fixture("candidate_v1.json");
    pinned("files_v2.json", &Files::of(&candidate));
    assert_eq!(read::<Files>("files_v1.json"), Files::of(&candidate));
}

/// A value kept in the content store travels as its reference; one not kept, as itself (so
/// every message written before the store existed reads as inline).
#[test]
fn a_carried_value_keeps_its_json() {
    use kleene_restate::store::{Carried, StoredRef};
    let stored: Carried<Vec<u8>> = Carried::Stored {
        stored: StoredRef {
            blake3: "ab".repeat(32),
            len: 104_857_600,
        },
    };
    pinned("carried_stored_v1.json", &stored);
    let inline: Carried<Vec<u8>> = Carried::Inline(vec![1, 2, 3]);
    assert_eq!(serde_json::to_string(&inline).unwrap(), "[1,2,3]");
    assert_eq!(
        serde_json::from_str::<Carried<Vec<u8>>>("[1,2,3]").unwrap(),
        inline
    );
}
