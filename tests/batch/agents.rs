//! `Batch::run_agents`, as a library user meets it: a run stopped part-way resumes from its
//! `FileJournal` by making the same call again, and its record is then accepted.

use kleene::batch::{FileJournal, TaskStatus};
use kleene::{Agent, AppBuildPlan, Batch, ExecutionOutput, Task, ValidationToken, Verdict};

/// Writes each task's intent; cancels its first execution of `doc` when told to (as a Ctrl-C
/// would), and fails `api`'s tests once.
struct Model {
    cancel_doc: bool,
}

impl Agent for Model {
    type Error = std::io::Error;
    fn execute(&mut self, t: &Task, _: &ValidationToken) -> std::io::Result<ExecutionOutput> {
        if t.id() == "doc" && std::mem::take(&mut self.cancel_doc) {
            return Err(std::io::ErrorKind::Interrupted.into());
        }
        Ok(ExecutionOutput::new(t.spec().intent.clone()))
    }
    fn post_validate(&mut self, t: &Task, _: &ExecutionOutput) -> std::io::Result<Verdict> {
        Ok(if t.id() == "api" {
            Verdict::blocker("tests", "1 failed").map_err(std::io::Error::other)?
        } else {
            Verdict::clean()
        })
    }
}

fn plan() -> kleene::ValidatedPlan {
    AppBuildPlan::from_json(
        r#"{"tasks": [
          {"id": "api", "owner": "M", "spec": {"intent": "the API"}, "owned_paths": ["api.rs"]},
          {"id": "doc", "owner": "M", "spec": {"intent": "docs"}, "owned_paths": ["doc.md"],
           "depends_on": ["api"]}]}"#,
    )
    .unwrap()
    .validate()
    .unwrap()
}

#[test]
fn a_cancelled_run_resumes_from_its_file_journal_and_is_accepted() {
    let plan = plan();
    let dir = tempfile::tempdir().unwrap();
    let batch = Batch::new(&plan, "main".parse().unwrap());

    let mut journal = FileJournal::open(dir.path()).unwrap();
    let stopped = batch.run_agents(2, |_| Model { cancel_doc: true }, &mut journal);
    let err = stopped.expect_err("the cancelled call stops the run");
    assert!(err.is_cancelled(), "{err:?}");

    // A new process: the journal opened again, agents made afresh.
    let mut journal = FileJournal::open(dir.path()).unwrap();
    let outcome = batch
        .run_agents(2, |_| Model { cancel_doc: false }, &mut journal)
        .unwrap();
    assert!(outcome.resumed);
    let evidence = outcome.evidence;
    let doc = "doc".parse().unwrap();
    assert_eq!(evidence.status(&doc), Some(TaskStatus::Accepted));
    assert_eq!(evidence.task(&doc).unwrap().interrupted_attempts(), [1]);
    // The fix `api` used before the stop is not given back, nor drawn again.
    assert_eq!(evidence.fix_attempts_used(), 1);
    let record = batch.accept(&evidence).unwrap();
    assert_eq!(record.task_results().len(), 2);
}

#[test]
fn a_task_owning_two_files_fails_and_the_rest_are_accepted() {
    let plan = AppBuildPlan::from_json(
        r#"{"tasks": [
          {"id": "two", "owner": "M", "spec": {"intent": "x"}, "owned_paths": ["a", "b"]},
          {"id": "one", "owner": "M", "spec": {"intent": "y"}, "owned_paths": ["c"]}]}"#,
    )
    .unwrap()
    .validate()
    .unwrap();
    let batch = Batch::new(&plan, "main".parse().unwrap());
    let mut journal = kleene::batch::MemoryJournal::default();
    let evidence = batch
        .run_agents(1, |_| Model { cancel_doc: false }, &mut journal)
        .unwrap()
        .evidence;
    assert_eq!(
        evidence.status(&"two".parse().unwrap()),
        Some(TaskStatus::Failed)
    );
    assert_eq!(
        evidence.status(&"one".parse().unwrap()),
        Some(TaskStatus::Accepted)
    );
    // Acceptance names the task that is not accepted.
    let refused = batch.accept(&evidence).unwrap_err();
    assert!(
        refused.to_string().contains("task two is not accepted"),
        "{refused}"
    );
}
