//! kleene's integration tests: one binary, one module per area (builds faster than many).
//! They use the `testing` feature, which the self dev-dependency in Cargo.toml turns on.

mod acceptance;
mod acceptance_integrity;
mod batch;
// The async driver (feature "async"): tokio's runtime and single-threaded executors.
#[cfg(feature = "async")]
mod batch_async;
// Plans through the library's ClosureWorker: the fix budget across crashes.
mod batch_closure;
mod batch_inputs;
mod batch_machine;
mod batch_simulation;
mod batch_threaded;
// Every digest pinned: the canonical encoding never moves by accident.
mod canonical_encoding;
// End-to-end tests of the `kleene` binary.
#[cfg(feature = "cli")]
mod cli;
// Closure records as evidence: the fix budget from the journal, tampering named.
#[cfg(feature = "cli")]
mod cli_closures;
// The bundled example projects (pytest, cargo test) run to acceptance.
#[cfg(feature = "cli")]
mod cli_examples;
// Acceptance-record tampering and signatures through the CLI.
#[cfg(feature = "cli")]
mod cli_integrity;
// State directories left by earlier versions, and the versions of the CLI's own files.
#[cfg(feature = "cli")]
mod cli_formats;
// The files beside a plan: bound, copied, checked and named.
#[cfg(feature = "cli")]
mod cli_plan_files;
// A first plan: `kleene help plan`, and one message per mistake in JSON terms.
#[cfg(feature = "cli")]
mod cli_plan_help;
// `--json` events: timestamps and durations with calls in flight.
#[cfg(feature = "cli")]
mod cli_events;
#[cfg(feature = "cli")]
mod cli_jobs;
// `kleene worker`, `kleene restate` and `run --restate`: handed to the Restate adapter.
#[cfg(all(unix, feature = "cli"))]
mod cli_restate;
// Staged workspaces, state-directory integrity and process containment, end to end.
#[cfg(feature = "cli")]
mod cli_staging;
mod closure;
// A closure's incremental form: deltas per step, verified and folded on restore.
mod closure_incremental;
// Steps persisted straight from the audit log: the same bytes as their deltas.
mod closure_step_envelopes;
mod closure_tamper;
mod envelope_format;
// What the examples promise about themselves (the minimal tokio example's length).
mod examples;
// Error messages and their source chains.
mod error_chain;
mod foundation;
mod journal_crash;
mod journal_integrity;
// The library in layers: no import runs up, no cycle between modules.
mod layers;
mod plan;
mod plan_extensions;
// The command runner, contained by the `kleene` binary as its host.
#[cfg(all(unix, feature = "cli"))]
mod process;
// What the public API may and may not name.
mod public_api;
mod signing;
mod support;
// The evidence payloads and the acceptance record, pinned byte for byte.
mod wire_evidence;
mod wire_messages;
// The pinned bytes of the task and closure payloads, through their wire types.
mod wire_closure;
// Payloads written by bincode's native encoder: the bytes of the records' serde forms.
mod wire_native_encode;
