//! kleene's integration tests: one binary, one module per area (builds faster than many).

// The closure tests use the scripted agent and strategies of the `testing` feature.
mod acceptance;
mod batch;
#[cfg(feature = "testing")]
mod closure;
mod foundation;
mod plan;
