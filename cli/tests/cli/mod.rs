// The common helpers, and the basic commands end to end.
pub(crate) mod basics;
// Closure records as evidence: the fix budget from the journal, tampering named.
mod closures;
// An existing repository: a real crate changed in place, its change as a patch and applied.
mod existing_repo;
// `--json` events: timestamps and durations with calls in flight.
mod events;
// A failure's evidence where the user looks: run, status, audit and a run's graph.
mod evidence;
// The bundled example projects (pytest, cargo test) run to acceptance.
mod examples;
// State directories left by earlier versions, and the versions of the CLI's own files.
mod formats;
// Task ids are names: a path is refused, and files named after tasks stay in the state.
mod ids;
// Acceptance-record tampering and signatures through the CLI.
mod integrity;
// Ctrl-C, SIGTERM and a killed kleene: recorded, not spent, and told apart from a live run.
mod incremental;
mod interruptions;
mod jobs;
// The files beside a plan: bound, copied, checked and named.
mod plan_files;
// A first plan: `kleene help plan`, and one message per mistake in JSON terms.
mod plan_help;
// `kleene worker`, `kleene restate` and `run --restate`: handed to the Restate adapter.
#[cfg(unix)]
mod restate;
// Commands in the sandbox: hostile ones denied and named, toolchains at work, `--sandbox off`.
mod sandbox;
// Every kind of state file damaged, and named by every command that reads it.
mod tampering;
// Staged workspaces, state-directory integrity and process containment, end to end.
mod staging;
// The command runner, contained by the `kleene` binary as its host.
#[cfg(unix)]
mod process;
