// An executed step must be post-validated before it can move on.
use kleene::{closure::{ExecutionOutput, GovernanceDecision, step::Next, step::Session, Spec, step::Step, Verdict}, id::TaskId, Task};

fn main() {
    let task = Task::new(TaskId::new("t").unwrap(), Spec::new("x"));
    let (step, token) = Step::new(task, Session::new("build", "p").unwrap())
        .govern(GovernanceDecision::Approve)
        .unwrap();
    let step = step
        .pre_validate(Verdict::clean())
        .unwrap()
        .execute(token, ExecutionOutput::new("done"))
        .unwrap();
    let _ = step.move_next(Next::Complete);
}
