//! kleene's integration tests: one binary, one module per area (builds faster than many).
//! They use the `testing` feature, which the self dev-dependency in Cargo.toml turns on.

mod acceptance;
mod batch;
// End-to-end tests of the `kleene` binary.
#[cfg(feature = "cli")]
mod cli;
mod closure;
mod closure_tamper;
mod envelope_format;
mod foundation;
mod journal_integrity;
mod plan;
mod support;
