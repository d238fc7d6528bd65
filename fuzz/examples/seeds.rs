//! Writes the seed corpora in `fuzz/seeds/<target>/` from real values encoded by kleene
//! itself: a closure driven to depth 1, a batch whose first call is rejected and whose journal
//! is compacted, its acceptance export, and small plans.
//!
//! Run from the repository root with
//! `cargo run --manifest-path fuzz/Cargo.toml --example seeds`; it replaces the seed
//! directories and is deterministic, so a rerun changes nothing unless an encoding changed.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use kleene::batch::{Batch, Candidate, evidence::EvidenceEvent};
use kleene::checkpoint::{self, HEADER_LEN};
use kleene::testing::batch::{ImageJournal, ScriptedOutcome, ScriptedWorker};
use kleene::testing::process::decode_host_frames;
use kleene::{
    AppBuildPlan, Task, closure::Closure,
    acceptance::{BuildBinding, accept, export},
    closure::{
        ClosureRecord, ExecutionOutput, GovernanceDecision, step::Next, verdict::OutputTail, RecoveryPolicy,
        step::Session, Severity, Spec, verdict::TailLimits, ValidatorResult, Verdict,
    },
    id::{ChannelId, TaskId, ValidatorId},
    plan::AdmittedPath,
    snapshot::Snapshot,
};
use kleene_fuzz::{CheckpointMode, JournalMode, checkpoint_seed, delta_log_seed, journal_seed};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const PLAN_JSON: &str = r#"{"tasks": [
  {"id": "config_app", "kind": {"lane": "config"}, "owner": "ConfigAgent",
   "spec": {"intent": "app config"}, "owned_paths": ["config/app.yaml"]},
  {"id": "svc", "kind": {"lane": "service", "module": "billing"}, "owner": "ServiceAgent",
   "spec": {"intent": "billing service", "acceptance_criteria": ["tests pass"]},
   "owned_paths": ["billing/service.py"], "depends_on": ["config_app"]}
]}"#;

const PLAN_FILE: &str = r#"{"tasks": [
  {"id": "config_app", "kind": {"lane": "config"}, "owner": "ConfigAgent",
   "spec": {"intent": "app config"}, "owned_paths": ["config/app.yaml"],
   "run": "sh tasks/config.sh", "timeout_secs": 30},
  {"id": "svc", "kind": {"lane": "service", "module": "billing"}, "owner": "ServiceAgent",
   "spec": {"intent": "billing service"}, "owned_paths": ["billing/service.py"],
   "depends_on": ["config_app"], "run": "sh tasks/service.sh",
   "checks": [{"id": "unit-tests", "command": "sh billing/test.sh",
               "severity": "blocker", "overridable": true}],
   "fix": "sh fix.sh"}
]}"#;

const TEST_LOG: &str = "running 2 tests\n---- tests::login stdout ----\n\
thread 'tests::login' (7) panicked at src/lib.rs:17:9:\nassertion failed\n\
stack backtrace:\n  0: core::panicking::panic_fmt\n             at ./src/lib.rs:4:17\n\
  1: core::panicking::panic\n             at ./src/lib.rs:9:5\n\
failures:\n    tests::login\n\ntest result: FAILED. 1 passed; 1 failed\n";

const PYTEST_LOG: &str = "____ test_vat ____\n\n>   assert vat(100) == 20\nE   assert 19 == 20\n\
billing/test.py:12: AssertionError\n=== short test summary info ===\n\
FAILED billing/test.py::test_vat\n=== 1 failed in 0.01s ===\n";

fn main() -> Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let mut seeds = Seeds::new(root)?;
    closure_seeds(&mut seeds)?;
    batch_seeds(&mut seeds)?;
    plan_seeds(&mut seeds)?;
    tail_seeds(&mut seeds)?;
    host_seeds(&mut seeds)?;
    println!("wrote {} seeds, {} bytes", seeds.count, seeds.bytes);
    Ok(())
}

/// The seed directories, emptied when the generator starts.
struct Seeds {
    root: PathBuf,
    count: usize,
    bytes: usize,
}

impl Seeds {
    fn new(root: PathBuf) -> Result<Self> {
        if root.exists() {
            fs::remove_dir_all(&root)?;
        }
        fs::create_dir_all(&root)?;
        Ok(Self {
            root,
            count: 0,
            bytes: 0,
        })
    }

    fn write(&mut self, target: &str, name: &str, bytes: &[u8]) -> Result<()> {
        let dir = self.root.join(target);
        fs::create_dir_all(&dir)?;
        fs::write(dir.join(name), bytes)?;
        self.count += 1;
        self.bytes += bytes.len();
        Ok(())
    }
}

fn failing(test: &str) -> Result<Verdict> {
    Ok(Verdict::new([ValidatorResult::new(
        ValidatorId::new("tests")?,
        Severity::Blocker,
        true,
        format!("test {test} ... FAILED"),
    )]))
}

/// A closure whose root fails once and whose fix passes: its state at every phase of the
/// fix's iteration, and its record.
fn closure_seeds(seeds: &mut Seeds) -> Result<()> {
    let task = Task::new(
        TaskId::new("task_X")?,
        Spec::new("add /login").with_criterion("GET /login is 200"),
    );
    seeds.write("checkpoint_task", "root", &checkpoint_seed(&task)?)?;
    let v1 =
        fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/task_v1.ckpt"))?;
    let mut old = vec![CheckpointMode::Oldest.byte()];
    old.extend_from_slice(&v1[HEADER_LEN..]);
    seeds.write("checkpoint_task", "version_1", &old)?;
    let mut raw = vec![CheckpointMode::Raw.byte()];
    raw.extend_from_slice(&checkpoint::encode(&task)?);
    seeds.write("checkpoint_task", "raw_envelope", &raw)?;

    let session = Session::new("build", "demo")?;
    let clean = drive(
        task.clone(),
        session.clone(),
        vec![Verdict::clean()],
        |_, _| Ok(()),
    )?;
    seeds.write(
        "checkpoint_closure_record",
        "depth_0",
        &checkpoint_seed(&*clean)?,
    )?;
    let post = vec![failing("login")?, Verdict::clean()];
    let record = drive(task, session, post, |step, closure| {
        // The root's governance, its failed post-validation, and the fix's move-next.
        if [0, 3, 9].contains(&step) {
            seeds.write(
                "closure_deltas",
                &format!("history_{step}"),
                &delta_log_seed(&closure.history())?,
            )?;
            let name = format!("state_{step}");
            seeds.write(
                "checkpoint_closure_state",
                &name,
                &checkpoint_seed(&closure.state())?,
            )?;
        }
        Ok(())
    })?;
    if let Some(fix) = record.attempts().last() {
        seeds.write("checkpoint_task", "fix", &checkpoint_seed(&fix.task)?)?;
    }
    seeds.write(
        "checkpoint_closure_record",
        "depth_1",
        &checkpoint_seed(&*record)?,
    )?;
    // The CLI's state files as an earlier kleene left them (the committed fixture).
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/cli_state_v0");
    seeds.write("cli_state_files", "run_v0", &fs::read(fixture.join("run.json"))?)?;
    let log = fs::read_to_string(fixture.join("closures.jsonl"))?;
    if let Some(line) = log.lines().nth(2) {
        seeds.write("cli_state_files", "closure_line_v0", line.as_bytes())?;
    }
    Ok(())
}

/// Drives a closure of `task` to its end, feeding `post` as post-validation verdicts (clean
/// after they run out), and shows `on_step` the machine before each step.
fn drive(
    task: Task,
    session: Session,
    post: Vec<Verdict>,
    mut on_step: impl FnMut(usize, &Closure) -> Result<()>,
) -> Result<Box<ClosureRecord>> {
    let mut post = post.into_iter();
    let mut closure = Closure::start(task, session, RecoveryPolicy::default());
    for step in 0.. {
        on_step(step, &closure)?;
        closure = match closure {
            Closure::Governance(due) => due.feed(GovernanceDecision::Approve),
            Closure::PreValidate(due) => due.feed(Verdict::clean()),
            Closure::Execute(due) => {
                let output = ExecutionOutput::new(format!("patched {}", due.task().id()));
                due.feed(output)
            }
            Closure::PostValidate(due) => due.feed(post.next().unwrap_or_default()),
            Closure::MoveNext(due) => due.feed(Next::Complete),
            Closure::Done(record) => return Ok(record),
        };
    }
    Err("the closure never ended".into())
}

/// A two-task batch whose service's first call writes outside its ownership: its journal (whole,
/// torn, compacted), each kind of event, the folded evidence and the acceptance export.
fn batch_seeds(seeds: &mut Seeds) -> Result<()> {
    let plan = AppBuildPlan::from_json(PLAN_JSON)?.validate()?;
    let channel = ChannelId::new("chan-1")?;
    let config = TaskId::new("config_app")?;
    let svc = TaskId::new("svc")?;
    let file = |path: &str, bytes: &[u8]| -> Result<Candidate> {
        Ok(Candidate::new(BTreeMap::from([(
            AdmittedPath::admit(path)?,
            bytes.to_vec(),
        )])))
    };
    let mut worker = ScriptedWorker::new()
        .script(
            config.clone(),
            [ScriptedOutcome::Candidate(file(
                "config/app.yaml",
                b"name: demo\n",
            )?)],
        )
        .script(
            svc.clone(),
            [
                ScriptedOutcome::Candidate(file("config/app.yaml", b"x")?),
                ScriptedOutcome::Candidate(file("billing/service.py", b"VAT = 0.2\n")?),
            ],
        );
    let batch = Batch::new(&plan, channel.clone());
    let mut journal = ImageJournal::default();
    let evidence = batch.dispatch(&mut worker, &(), &mut journal)?;
    let image = journal.image(&channel).ok_or("no journal image")?.to_vec();
    // Each commit's checkpoint envelopes, as the journal framed them.
    let mut records = Vec::new();
    let mut start = 0;
    for end in journal.record_ends(&channel) {
        records.push(envelopes(&image[start + RECORD_HEADER_LEN..end])?);
        start = end;
    }
    let last = records
        .last()
        .and_then(|r| r.last())
        .ok_or("an empty journal")?;
    let torn_tail = &last[..20];
    let all_but_last = &records[..records.len() - 1];

    // journal_file reads the same format and runs on these seeds too (see run.sh).
    seeds.write(
        "journal_image",
        "framed",
        &journal_seed(JournalMode::Framed, &records, &[]),
    )?;
    seeds.write(
        "journal_image",
        "framed_torn",
        &journal_seed(JournalMode::Framed, all_but_last, torn_tail),
    )?;
    seeds.write(
        "journal_image",
        "bare",
        &journal_seed(JournalMode::Bare, &records, &[]),
    )?;
    seeds.write(
        "journal_image",
        "bare_torn",
        &journal_seed(JournalMode::Bare, all_but_last, torn_tail),
    )?;
    let mut raw = vec![1];
    raw.extend_from_slice(&image[..journal.record_ends(&channel)[0]]);
    seeds.write("journal_image", "raw_first_record", &raw)?;
    // One event of each kind that occurred.
    let mut kinds = Vec::new();
    for envelope in records.iter().flatten() {
        let event = checkpoint::decode::<EvidenceEvent>(envelope)?;
        let kind = format!("{event:?}")
            .split([' ', '{', '('])
            .next()
            .unwrap_or("event")
            .to_lowercase();
        if !kinds.contains(&kind) {
            seeds.write(
                "checkpoint_evidence_event",
                &kind,
                &checkpoint_seed(&event)?,
            )?;
            kinds.push(kind);
        }
    }
    seeds.write(
        "checkpoint_batch_evidence",
        "settled",
        &checkpoint_seed(&evidence)?,
    )?;

    let snapshot = [vec![checkpoint::encode(&evidence)?]];
    seeds.write(
        "journal_image",
        "compacted",
        &journal_seed(JournalMode::Framed, &snapshot, &[]),
    )?;

    let snapshot = Snapshot::from_evidence(&evidence)?;
    let binding = BuildBinding::new(channel, plan.digest(), evidence.evidence_version());
    let record = accept(&plan, &evidence, &snapshot, &binding)?;
    seeds.write(
        "verify_archive",
        "export",
        &export(&record, &snapshot)?.into_bytes(),
    )?;
    Ok(())
}

/// A journal record's header length (record format 2).
const RECORD_HEADER_LEN: usize = 80;

/// The checkpoint envelopes a journal record's body holds, back to back.
fn envelopes(mut body: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let declared = body.get(11..19).ok_or("a cut envelope header")?;
        let len = HEADER_LEN + usize::try_from(u64::from_le_bytes(declared.try_into()?))?;
        let (envelope, rest) = body.split_at_checked(len).ok_or("a cut envelope")?;
        out.push(envelope.to_vec());
        body = rest;
    }
    Ok(out)
}

fn plan_seeds(seeds: &mut Seeds) -> Result<()> {
    seeds.write("plan_json", "two_tasks", PLAN_JSON.as_bytes())?;
    seeds.write("plan_json", "empty", br#"{"tasks": []}"#)?;
    seeds.write("plan_file", "two_tasks", PLAN_FILE.as_bytes())?;
    Ok(())
}

fn tail_seeds(seeds: &mut Seeds) -> Result<()> {
    for (name, log, bound) in [
        ("cargo_fits", TEST_LOG, 4096u16),
        ("cargo_cut", TEST_LOG, 200),
        ("pytest_cut", PYTEST_LOG, 120),
        ("tiny_bound", PYTEST_LOG, 10),
    ] {
        let mut input = Vec::new();
        input.extend_from_slice(&bound.to_le_bytes());
        input.extend_from_slice(&bound.to_le_bytes());
        let split = u16::try_from(log.len())?;
        input.extend_from_slice(&split.to_le_bytes());
        input.extend_from_slice(log.as_bytes());
        input.extend_from_slice(b"warning: unused\n\xff\xfe\n");
        // The seed must be one the target accepts as is.
        let _ = OutputTail::capture(log.as_bytes(), b"", TailLimits::both(usize::from(bound)));
        seeds.write("output_tail", name, &input)?;
    }
    Ok(())
}

/// One socket frame: a little-endian `u32` length, then the bytes.
fn frame(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut out = u32::try_from(bytes.len())?.to_le_bytes().to_vec();
    out.extend_from_slice(bytes);
    Ok(out)
}

/// What each end of the contained host's socket reads: kleene's end a hello and answers,
/// the host's end requests (one with a stdin frame); and a frame cut short.
fn host_seeds(seeds: &mut Seeds) -> Result<()> {
    let tail = OutputTail::capture(TEST_LOG.as_bytes(), b"", TailLimits::both(256));
    let hello = serde_json::json!({"protocol": "kleene-host 1", "pid": 1, "reaper": false});
    let answers = [
        serde_json::json!({"Finished": {"code": 101, "signal": null, "tail": tail}}),
        serde_json::json!({"TimedOut": {"tail": tail}}),
        serde_json::json!({"Spawn": {"errno": 2, "message": "no such file"}}),
    ];
    let mut kleene_end = frame(&serde_json::to_vec(&hello)?)?;
    for answer in &answers {
        kleene_end.extend(frame(&serde_json::to_vec(answer)?)?);
    }
    let request = |stdin: bool| {
        serde_json::json!({"command": "cargo test", "dir": b"/tmp/stage".to_vec(),
            "timeout_ms": 60000, "stdin": stdin, "env": [["CARGO_TERM_COLOR", "never"]],
            "limits": {"stdout": 4096, "stderr": 4096}})
    };
    let mut host_end = frame(&serde_json::to_vec(&request(false))?)?;
    host_end.extend(frame(&serde_json::to_vec(&request(true))?)?);
    host_end.extend(frame(b"input for the command")?);
    let cut = kleene_end[..kleene_end.len() - 3].to_vec();
    for (name, bytes, expected) in [
        ("kleene_end", &kleene_end, (4, 0)),
        ("host_end", &host_end, (0, 2)),
        ("cut_answer", &cut, (3, 0)),
    ] {
        // A seed must decode as far as it was written to, or it seeds nothing.
        assert_eq!(decode_host_frames(bytes), expected, "seed {name}");
        seeds.write("host_frames", name, bytes)?;
    }
    Ok(())
}
