// Tokens are minted only by governance; their fields are private.
use kleene::{id::{Digest, TaskId}, closure::{step::Session, step::ValidationToken}};

fn main() {
    let _forged = ValidationToken {
        digest: Digest::from_bytes([0; 32]),
        task_id: TaskId::new("t").unwrap(),
        session: Session::new("build", "p").unwrap(),
    };
}
