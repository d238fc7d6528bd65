//! The smallest program: a 3-task plan whose `api` task fails its tests once and is
//! fixed, run two calls at once (on threads), and its acceptance record. `tokio_minimal.rs` is its async twin.
use kleene::{Agent, AppBuildPlan, Batch, Error, ExecutionOutput, Task, ValidationToken, Verdict};

/// Writes each task's intent as its file; `api` fails its tests until a fix runs.
struct Model;
impl Agent for Model {
    type Error = Error;
    fn execute(&mut self, t: &Task, _: &ValidationToken) -> Result<ExecutionOutput, Error> {
        Ok(ExecutionOutput::new(format!("// {}\n", t.spec().intent)))
    }
    fn post_validate(&mut self, t: &Task, _: &ExecutionOutput) -> Result<Verdict, Error> {
        let fails = t.id() == "api"; // the fix's id is `api_fix_1`: it passes
        Ok(if fails {
            Verdict::blocker("tests", "test api ... FAILED")?
        } else {
            Verdict::clean()
        })
    }
}

// `cargo run --example minimal`
fn main() -> Result<(), Error> {
    let plan = AppBuildPlan::from_json(
        r#"{"tasks": [
      {"id": "api", "owner": "M", "spec": {"intent": "the API"}, "owned_paths": ["api.rs"]},
      {"id": "ui", "owner": "M", "spec": {"intent": "the UI"}, "owned_paths": ["ui.rs"]},
      {"id": "doc", "owner": "M", "spec": {"intent": "docs"}, "owned_paths": ["doc.md"],
       "depends_on": ["api", "ui"]}]}"#,
    )?
    .validate()?;
    let batch = Batch::new(&plan, "main".parse()?);
    let mut journal = kleene::batch::MemoryJournal::default(); // a FileJournal resumes a crash
    let evidence = batch.run_agents(2, |_slot| Model, &mut journal)?.evidence;
    let record = batch.accept(&evidence)?;
    println!(
        "{} fix, record {}",
        evidence.fix_attempts_used(),
        record.digest()
    );
    Ok(())
}
