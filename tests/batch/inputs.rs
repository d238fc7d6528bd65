//! What a worker call is given and how a host failure is settled: every transitive
//! prerequisite's accepted output, and a withdrawn call that never counts.

use kleene::ValidatedPlan;
use kleene::batch::{
    Batch, Candidate, MemoryJournal, Proposal, TaskStatus, Worker, WorkerCall, WorkerFailure,
    journal::EvidenceJournal,
};

use crate::support::{chan, id, path, validated};

/// A chain a → b → c of general tasks, each owning one file.
fn chain() -> ValidatedPlan {
    validated(
        r#"{"tasks": [
      {"id": "a", "owner": "w", "spec": {"intent": "a"}, "owned_paths": ["a.txt"]},
      {"id": "b", "owner": "w", "spec": {"intent": "b"}, "owned_paths": ["b.txt"], "depends_on": ["a"]},
      {"id": "c", "owner": "w", "spec": {"intent": "c"}, "owned_paths": ["c.txt"], "depends_on": ["b"]}
    ]}"#,
    )
}

/// Writes its task's one file; records what `inputs()` offered; the first call of `b` fails
/// its host when `unavailable` is set.
#[derive(Default)]
struct Recorder {
    seen: Vec<(String, Vec<String>)>,
    unavailable: bool,
}

impl Worker for Recorder {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        let task = call.task();
        let inputs = call.inputs().iter().map(|(t, _)| t.to_string()).collect();
        self.seen.push((task.id.to_string(), inputs));
        if self.unavailable && task.id.as_str() == "b" {
            self.unavailable = false;
            return Err(WorkerFailure::Unavailable {
                detail: "disk full".to_owned(),
            });
        }
        let file = path(&format!("{}.txt", task.id));
        Ok(Candidate::new([(file, b"x".to_vec())].into()).into())
    }
}

#[test]
fn inputs_are_every_transitive_prerequisites_accepted_output() {
    let plan = chain();
    let mut worker = Recorder::default();
    let evidence = Batch::new(&plan, chan("inputs"))
        .dispatch(&mut worker, &(), &mut MemoryJournal::default())
        .unwrap();
    assert!(evidence.summary().is_complete());
    let seen: Vec<(&str, Vec<&str>)> = worker
        .seen
        .iter()
        .map(|(t, i)| (t.as_str(), i.iter().map(String::as_str).collect()))
        .collect();
    assert_eq!(
        seen,
        [("a", vec![]), ("b", vec!["a"]), ("c", vec!["a", "b"])]
    );
}

#[test]
fn an_unavailable_worker_withdraws_the_call_and_resume_makes_it_again() {
    let plan = chain();
    let batch = Batch::new(&plan, chan("withdrawn"));
    let mut journal = MemoryJournal::default();
    let mut worker = Recorder {
        unavailable: true,
        ..Recorder::default()
    };
    let err = batch.dispatch(&mut worker, &(), &mut journal).unwrap_err();
    assert!(err.is_worker_unavailable(), "{err}");
    let text = kleene::error::Chain(&err).to_string();
    assert!(text.contains("disk full"), "{text}");
    let stored = journal
        .load(&chan("withdrawn"))
        .unwrap()
        .unwrap()
        .into_evidence()
        .unwrap();
    // Nothing counted: the task is pending with no call made.
    assert_eq!(stored.status(&id("b")), Some(TaskStatus::Pending));
    assert_eq!(stored.task(&id("b")).unwrap().calls(), 0);
    let done = batch.resume(&mut worker, &(), &mut journal).unwrap();
    assert!(done.summary().is_complete());
    assert_eq!(done.task(&id("b")).unwrap().calls(), 1);
}
