use kleene::{AppBuildPlan, Error, Task, acceptance::*, batch::*, closure::*, id::*, snapshot::*};
struct Model; // writes each task's intent as its file; `api` fails its tests once, its fix passes
impl AsyncAgent for Model {
    type Error = Error;
    async fn execute(&mut self, t: &Task, _: &ValidationToken) -> Result<ExecutionOutput, Error> {
        Ok(ExecutionOutput::new(format!("// {}\n", t.spec().intent)))
    }
    async fn post_validate(&mut self, t: &Task, _: &ExecutionOutput) -> Result<Verdict, Error> {
        let fail = ValidatorResult::new(ValidatorId::new("tests")?, Severity::Blocker, true, "red");
        Ok(Verdict::new((t.id().as_str() == "api").then_some(fail)))
    }
}
#[tokio::main] // `cargo run --example tokio_minimal --features async`
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let plan = AppBuildPlan::from_json(r#"{"tasks": [
  {"id": "api", "owner": "M", "spec": {"intent": "the API"}, "owned_paths": ["api.rs"]},
  {"id": "ui", "owner": "M", "spec": {"intent": "the UI"}, "owned_paths": ["ui.rs"]},
  {"id": "doc", "owner": "M", "spec": {"intent": "docs"}, "owned_paths": ["doc.md"], "depends_on": ["api", "ui"]}]}"#)?.validate()?;
    let (channel, session) = (ChannelId::new("c")?, Session::new("build", "demo")?);
    let policy = RecoveryPolicy::default(); // fixes are bounded: at most 10 in the whole run
    let make = |_| AsyncClosureWorker::new(OutputFile::new(Model), session.clone(), policy.clone());
    let ev = Batch::new(&plan, channel.clone()) // one expression: the run owns its batch
        .run_async(2.try_into()?, make, &(), &mut MemoryJournal::default())
        .await?
        .evidence;
    let binding = BuildBinding::new(channel, plan.digest(), ev.evidence_version());
    let record = accept(&plan, &ev, &Snapshot::from_evidence(&ev)?, &binding)?;
    println!("{} fix, record {}", ev.fix_attempts_used(), record.digest());
    Ok(())
}
