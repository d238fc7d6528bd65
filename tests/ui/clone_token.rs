// A token is neither Clone nor Copy: one approval, one execution.
use kleene::{closure::{GovernanceDecision, step::Session, Spec, step::Step}, id::TaskId, Task};

fn main() {
    let task = Task::new(TaskId::new("t").unwrap(), Spec::new("x"));
    let (_step, token) = Step::new(task, Session::new("build", "p").unwrap())
        .govern(GovernanceDecision::Approve)
        .unwrap();
    let _copy = token.clone();
}
