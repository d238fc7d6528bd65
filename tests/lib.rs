//! kleene's integration tests: one binary, one module per area (builds faster than many).
//! They use the `testing` feature, which the self dev-dependency in Cargo.toml turns on.

// Acceptance records, their tampering, signatures.
mod acceptance;
// Running plans: the machine, its drivers, the journal.
mod batch;
// One task's closure: runs, its incremental form, tampering.
mod closure;
// Every persisted byte pinned: digests, envelopes, wire records.
mod formats;
// Plans: loading, validation, extensions.
mod plan;
// What the public API, the examples and the layers promise.
mod api;
mod support;
