//! kleene inside a tokio service: a request spawns a build whose agent awaits a (simulated)
//! model call per phase; the plan's two independent branches run at once; the evidence is
//! accepted and exported at the end. Run: `cargo run --example tokio_service --features async`
use kleene::acceptance::{BuildBinding, accept, export, verify_archive};
use kleene::batch::{AsyncBatchAgent, AsyncWorkerCall as Call, Batch, ClosureWorker};
use kleene::batch::{Candidate, MemoryJournal, Proposal, WorkerFailure as Failed};
use kleene::closure::{
    AsyncAgent, ClosureRecord, ExecutionOutput as Output, Verdict, step::Session,
};
use kleene::closure::{GovernanceDecision as Decision, Severity, step::ValidationToken as Token};
use kleene::{AppBuildPlan, Task, closure::ValidatorResult, id::ChannelId, id::ValidatorId};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use std::{io, num::NonZeroUsize};

const PLAN: &str = r#"{"tasks": [
  {"id": "api", "kind": {"lane": "config"}, "owner": "Model", "spec": {"intent": "the API"}, "owned_paths": ["api.rs"]},
  {"id": "ui", "kind": {"lane": "config"}, "owner": "Model", "spec": {"intent": "the UI"}, "owned_paths": ["ui.rs"]},
  {"id": "release", "kind": {"lane": "config"}, "owner": "Model", "spec": {"intent": "notes"}, "owned_paths": ["NOTES.md"], "depends_on": ["api", "ui"]}]}"#;

/// When each call ran: (task, start, end).
type Spans = Arc<Mutex<Vec<(String, Instant, Instant)>>>;
type Error = Box<dyn std::error::Error + Send + Sync>;
type Made = Result<Proposal, Failed>;

/// A simulated model (or tool) call.
async fn model(prompt: String) -> String {
    tokio::time::sleep(Duration::from_millis(40)).await;
    format!("// answer to: {prompt}\n")
}

/// One slot's agent: every phase awaits the model; the API's first tests fail, its fix passes.
struct Model {
    code: String,
    started: Instant,
    spans: Spans,
}
impl Model {
    fn new(spans: Spans) -> Self {
        let (code, started) = (String::new(), Instant::now());
        Self {
            code,
            started,
            spans,
        }
    }
}
impl AsyncAgent for Model {
    type Error = io::Error;
    async fn govern(&mut self, task: &Task, _: &Session, _: u32) -> io::Result<Decision> {
        model(format!("may I do {}?", task.id())).await;
        Ok(Decision::Approve)
    }
    async fn pre_validate(&mut self, _: &Task, _: u32) -> io::Result<Verdict> {
        Ok(Verdict::clean())
    }
    async fn execute(&mut self, task: &Task, _: &Token) -> io::Result<Output> {
        self.code = model(task.spec().intent.clone()).await;
        Ok(Output::new(self.code.clone()))
    }
    async fn post_validate(&mut self, task: &Task, _: &Output) -> io::Result<Verdict> {
        model(format!("test {}", task.id())).await;
        let tests = ValidatorId::new("tests").map_err(io::Error::other)?;
        let failed = ValidatorResult::new(tests, Severity::Blocker, true, "1 test failed");
        let first_api_build = task.id().as_str() == "api";
        Ok(Verdict::new(first_api_build.then_some(failed)))
    }
}
impl AsyncBatchAgent for Model {
    async fn begin_call(&mut self, _: &Call<'_>) -> Result<(), Failed> {
        self.started = Instant::now();
        Ok(())
    }
    async fn finish_call(&mut self, call: &Call<'_>, _: &ClosureRecord) -> Made {
        let span = (call.task().id.to_string(), self.started, Instant::now());
        self.spans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(span);
        let file = call.task().owned_paths[0].clone();
        Ok(Candidate::new([(file, std::mem::take(&mut self.code).into())].into()).into())
    }
}

/// What the service does for one request: build, accept, export; returns the archive.
async fn build(spans: Spans) -> Result<Vec<u8>, Error> {
    let plan = AppBuildPlan::from_json(PLAN)?.validate()?;
    let (channel, session) = (ChannelId::new("request-1")?, Session::new("build", "svc")?);
    let policy = kleene::closure::RecoveryPolicy::default();
    let agent = |_slot| Model::new(Arc::clone(&spans));
    let make = |slot| ClosureWorker::new(agent(slot), session.clone(), policy.clone());
    let (batch, mut journal) = (Batch::new(&plan, channel.clone()), MemoryJournal::default());
    let jobs = NonZeroUsize::new(2).ok_or("no slots")?;
    let run = batch.run_async(jobs, make, &(), &mut journal);
    let evidence = run.await?.evidence;
    let snapshot = kleene::snapshot::Snapshot::from_evidence(&evidence)?;
    let binding = BuildBinding::new(channel, plan.digest(), evidence.evidence_version());
    let record = accept(&plan, &evidence, &snapshot, &binding)?;
    let archive = export(&record, &snapshot)?;
    verify_archive(archive.as_bytes(), record.digest())?;
    let fixes = evidence.fix_attempts_used();
    println!("accepted with {fixes} fix: record {}", record.digest());
    Ok(archive.as_bytes().to_vec())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let spans = Spans::default();
    // A service spawns each request's build: the run's future is `Send`.
    let archive = tokio::spawn(build(Arc::clone(&spans))).await??;
    let spans = spans.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let span = |t: &str| spans.iter().find(|s| s.0 == t).ok_or("no call");
    let (&(_, api_start, api_end), &(_, ui_start, ui_end)) = (span("api")?, span("ui")?);
    assert!(api_start < ui_end && ui_start < api_end, "no overlap");
    let overlap = api_end.min(ui_end) - api_start.max(ui_start);
    println!("api and ui ran at once for {overlap:?}");
    let out = tempfile::tempdir()?;
    let path = out.path().join("accepted.tar");
    std::fs::write(&path, &archive)?;
    println!("exported {} bytes to {}", archive.len(), path.display());
    Ok(())
}
