// A step still waiting for governance has no `execute`: no work runs unapproved (INV1).
use kleene::{closure::{ExecutionOutput, step::Session, Spec, step::Step}, id::TaskId, Task};

fn main() {
    let task = Task::new(TaskId::new("t").unwrap(), Spec::new("x"));
    let step = Step::new(task, Session::new("build", "p").unwrap());
    let _ = step.execute(ExecutionOutput::new("done"));
}
