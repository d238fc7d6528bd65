pub(crate) mod runs;
// Batch::run_agents as a library user meets it: a stop, a resume, acceptance.
mod agents;
// The async driver (feature "async"): tokio's runtime and single-threaded executors.
#[cfg(feature = "async")]
mod async_driver;
// Plans through the library's ClosureWorker: the fix budget across crashes.
mod cache;
mod closures;
// A plan's record whatever order its calls finish in, written with `kleene::testing` only.
#[cfg(feature = "async")]
mod completion_order;
mod inputs;
mod journal_crash;
mod journal_integrity;
pub(crate) mod machine;
mod reuse;
// Calls handed out while their reservations sync (the shell agent's held commands).
#[cfg(feature = "shell")]
mod reservation;
mod simulation;
mod threaded;
