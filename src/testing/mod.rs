//! Test support for users' own property-test suites (feature `testing`): scripted agents and
//! workers, and proptest strategies for kleene's inputs.

pub mod batch;
pub mod closure;
pub mod foundation;
pub mod plan;
