//! kleene's integration tests: one binary, one module per area (builds faster than many).

mod acceptance;
mod batch;
mod foundation;
mod plan;
