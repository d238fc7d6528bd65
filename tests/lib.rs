//! kleene's integration tests: one binary, one module per area (builds faster than many).

mod acceptance;
// The batch tests use the scripted worker and image journal of the `testing` feature.
#[cfg(feature = "testing")]
mod batch;
#[cfg(feature = "cli")]
mod cli;
// The closure tests use the scripted agent and strategies of the `testing` feature.
#[cfg(feature = "testing")]
mod closure;
mod foundation;
mod plan;
