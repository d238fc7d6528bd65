//! Foundation: ids, tasks, verdicts, the typestate inner loop, checkpoints.

use kleene::{Spec, Task, TaskId, checkpoint};

#[test]
fn task_round_trips_through_the_envelope() {
    let task = Task::new(TaskId::new("t").unwrap(), Spec::new("x"));
    let bytes = checkpoint::encode(&task).unwrap();
    assert_eq!(checkpoint::decode::<Task>(&bytes).unwrap(), task);
}
