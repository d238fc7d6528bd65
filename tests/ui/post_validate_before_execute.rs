// A step that passed pre-validation must execute before it can be post-validated.
use kleene::{closure::{GovernanceDecision, step::RecoverOn, step::Session, Spec, step::Step, Verdict}, id::TaskId, Task};

fn main() {
    let task = Task::new(TaskId::new("t").unwrap(), Spec::new("x"));
    let (step, _token) = Step::new(task, Session::new("build", "p").unwrap())
        .govern(GovernanceDecision::Approve)
        .unwrap();
    let step = step.pre_validate(Verdict::clean()).unwrap();
    let _ = step.post_validate(Verdict::clean(), RecoverOn::Blockers);
}
