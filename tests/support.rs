//! Shorthands the test modules share: ids and paths from literals that are known valid.

use kleene::{
    id::{ChannelId, TaskId},
    plan::AdmittedPath,
};

pub fn id(s: &str) -> TaskId {
    TaskId::new(s).unwrap()
}

pub fn chan(s: &str) -> ChannelId {
    ChannelId::new(s).unwrap()
}

pub fn path(s: &str) -> AdmittedPath {
    AdmittedPath::admit(s).unwrap()
}

/// The validated plan of a plan JSON text (normalised, consolidated, validated).
pub fn validated(json: &str) -> kleene::ValidatedPlan {
    let plan = kleene::AppBuildPlan::from_json(json).unwrap();
    kleene::plan::Plan::draft(plan)
        .normalize()
        .consolidate()
        .unwrap()
        .validate()
        .unwrap()
}
