//! A closure that resolves at depth 2: the root's tests fail, the first fix cures one
//! failure and not the other, the second fix passes.
//!
//! Run with `cargo run --example closure`.

use std::convert::Infallible;

use kleene::{
    Agent, Task,
    closure::{
        ExecutionOutput, GovernanceDecision, RecoveryPolicy, Severity, Spec, ValidatorResult,
        Verdict, run_to_closure, step::Session, step::ValidationToken,
    },
    id::{TaskId, ValidatorId},
};

/// Stands in for a coder and a test-running validator.
struct Coder {
    /// How many failing tests each successive attempt leaves.
    failing_per_attempt: Vec<&'static [&'static str]>,
    attempt: usize,
}

impl Agent for Coder {
    type Error = Infallible;

    fn govern(&mut self, _: &Task, _: &Session, _: u32) -> Result<GovernanceDecision, Infallible> {
        Ok(GovernanceDecision::Approve)
    }

    fn pre_validate(&mut self, _: &Task, _: u32) -> Result<Verdict, Infallible> {
        Ok(Verdict::clean())
    }

    fn execute(
        &mut self,
        task: &Task,
        token: &ValidationToken,
    ) -> Result<ExecutionOutput, Infallible> {
        println!(
            "execute {} (depth {}, token {})",
            task.id(),
            task.depth(),
            token.digest()
        );
        Ok(ExecutionOutput::new(format!("patched for {}", task.id())))
    }

    fn post_validate(&mut self, _: &Task, _: &ExecutionOutput) -> Result<Verdict, Infallible> {
        let failing = self
            .failing_per_attempt
            .get(self.attempt)
            .copied()
            .unwrap_or(&[]);
        self.attempt += 1;
        let tests = ValidatorId::new("tests").expect("a valid validator id");
        Ok(Verdict::new(failing.iter().map(|name| {
            ValidatorResult::new(
                tests.clone(),
                Severity::Blocker,
                true,
                format!(
                    "test {name} ... FAILED\nassertion `left == right` failed at src/lib.rs:40:9"
                ),
            )
        })))
    }
}

fn main() -> Result<(), kleene::Error> {
    let task = Task::new(
        TaskId::new("task_X")?,
        Spec::new("Handle webhooks: log the payload size and parse the event name.")
            .with_criterion("cargo test passes"),
    );
    let mut coder = Coder {
        failing_per_attempt: vec![
            &["tests::parses_the_event_name", "tests::reading_twice"],
            &["tests::reading_twice"],
        ],
        attempt: 0,
    };
    let record = run_to_closure(
        task,
        Session::new("build", "webhooks")?,
        &mut coder,
        &RecoveryPolicy::default(),
    );

    println!("\noutcome: {:?}", record.outcome());
    for attempt in record.attempts() {
        println!(
            "task {} (parent {:?})",
            attempt.task.id(),
            attempt.task.parent_task_ref().map(|p| p.as_str())
        );
    }
    let depth2 = &record.attempts()[2].task;
    println!("\nspec of {}:\n{}", depth2.id(), depth2.spec().intent);
    println!(
        "audit: {} entries, head {}",
        record.audit().len(),
        record.audit().head()
    );
    record.audit().verify()?;
    assert_eq!(record.outcome().resolved_depth(), Some(2));
    Ok(())
}
