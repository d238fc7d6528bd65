// Execution consumes the token: it cannot be presented a second time.
use kleene::{closure::{ExecutionOutput, GovernanceDecision, step::Session, Spec, step::Step, Verdict}, id::TaskId, Task};

fn main() {
    let session = Session::new("build", "p").unwrap();
    let task = Task::new(TaskId::new("t").unwrap(), Spec::new("x"));
    let (step, token) = Step::new(task.clone(), session.clone())
        .govern(GovernanceDecision::Approve)
        .unwrap();
    let _done = step
        .pre_validate(Verdict::clean())
        .unwrap()
        .execute(token, ExecutionOutput::new("first"));
    let (again, _fresh) = Step::new(task, session)
        .govern(GovernanceDecision::Approve)
        .unwrap();
    let _ = again
        .pre_validate(Verdict::clean())
        .unwrap()
        .execute(token, ExecutionOutput::new("second"));
}
