use kleene::{AppBuildPlan, AsyncAgent, Batch, Error, ExecutionOutput, Task, ValidationToken};
use kleene::{Verdict, batch::MemoryJournal};
struct Model; // writes each task's intent as its file; `api` fails its tests, its fix passes
impl AsyncAgent for Model {
    type Error = Error;
    async fn execute(&mut self, t: &Task, _: &ValidationToken) -> Result<ExecutionOutput, Error> {
        Ok(ExecutionOutput::new(format!("// {}\n", t.spec().intent)))
    }
    async fn post_validate(&mut self, t: &Task, _: &ExecutionOutput) -> Result<Verdict, Error> {
        let red = Verdict::blocker("tests", "test api ... FAILED")?;
        let api = t.id() == "api";
        Ok(if api { red } else { Verdict::clean() })
    }
}
const PLAN: &str = r#"{"tasks": [
  {"id": "api", "owner": "M", "spec": {"intent": "the API"}, "owned_paths": ["api.rs"]},
  {"id": "ui", "owner": "M", "spec": {"intent": "the UI"}, "owned_paths": ["ui.rs"]},
  {"id": "doc", "owner": "M", "spec": {"intent": "docs"}, "owned_paths": ["doc.md"],
   "depends_on": ["api", "ui"]}]}"#;
#[tokio::main] // `cargo run --example tokio_minimal --features async`; sync twin: minimal.rs
async fn main() -> Result<(), Error> {
    let plan = AppBuildPlan::from_json(PLAN)?.validate()?;
    let batch = Batch::new(&plan, "main".parse()?);
    let mut journal = MemoryJournal::default(); // a FileJournal resumes after a crash
    let running = batch.run_agents_async(2, |_slot| Model, &mut journal);
    let evidence = running.await?.evidence;
    let fixes = evidence.fix_attempts_used();
    println!("{fixes} fix, record {}", batch.accept(&evidence)?.digest());
    Ok(())
}
