//! Runs a kleene plan on Restate, a durable-execution engine, with task workers on any
//! number of processes.
//!
//! ```
//! use kleene::shell::ShellPlan;
//! use kleene_restate::service::Submission;
//!
//! let dir = tempfile::tempdir()?;
//! std::fs::write(dir.path().join("build.sh"), "echo a > a.txt\n")?;
//! std::fs::write(dir.path().join("plan.json"), r#"{"tasks": [
//!   {"id": "a", "kind": {"lane": "config"}, "owner": "shell", "spec": {"intent": "a"},
//!    "owned_paths": ["a.txt"], "run": "sh \"$KLEENE_PLAN_DIR/build.sh\""}]}"#)?;
//! // The plan file and the files beside it, bound into the plan digest.
//! let (plan, _text) = ShellPlan::read(&dir.path().join("plan.json"), &[])?;
//! let channel = plan.default_channel()?; // the channel `kleene run` would use
//! let submission = Submission::of(&plan, 8, vec![]);
//! // build.sh (and the plan file itself) travel by digest.
//! assert_eq!(submission.file_bytes.len(), 2);
//! // Restate::new(ingress, admin).submit(channel.as_str(), &submission).await runs it on
//! // whichever worker processes serve the registered deployment.
//! # let _ = channel;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! From a shell: `kleene-restate worker` (as many as you like, behind `kleene-restate
//! balance`), `kleene-restate register`, then `kleene-restate run plan.json`; see the
//! crate's README.
//!
//! The channel is a Restate virtual object whose exclusive handlers drive kleene's sans-IO
//! [`BatchMachine`](kleene::batch::machine::BatchMachine); see [`service`] for how each part maps
//! onto Restate, and the crate's README for what works. Plans are `kleene run`'s plan files,
//! loaded and run by kleene's own shell runtime ([`kleene::shell`]), so a plan gives the same
//! evidence and acceptance record here as under `kleene run`.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod accept;
pub mod balance;
// The SDK's macros generate the object's client without docs.
#[allow(missing_docs)]
pub mod cache;
pub mod call;
pub mod client;
pub mod content;
// The SDK's macros generate the handlers' clients without docs.
#[allow(missing_docs)]
pub mod service;
pub mod status;
pub mod store;
pub mod worker;
