//! kleene's integration tests: one binary, one module per area (builds faster than many).
//! They use the `testing` feature, which the self dev-dependency in Cargo.toml turns on.

mod acceptance;
mod batch;
mod closure;
mod foundation;
mod plan;
