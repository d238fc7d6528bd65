//! Shorthands the test modules share: ids and paths from literals that are known valid.

use kleene::{AdmittedPath, ChannelId, TaskId};

pub fn id(s: &str) -> TaskId {
    TaskId::new(s).unwrap()
}

pub fn chan(s: &str) -> ChannelId {
    ChannelId::new(s).unwrap()
}

pub fn path(s: &str) -> AdmittedPath {
    AdmittedPath::admit(s).unwrap()
}
