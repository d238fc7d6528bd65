//! Runs a kleene plan on Restate, a durable-execution engine, with task workers on any
//! number of processes.
//!
//! ```
//! use kleene_restate::plan::ShellPlan;
//! use kleene_restate::service::Submission;
//!
//! let text = r#"{"tasks": [
//!   {"id": "a", "kind": {"lane": "config"}, "owner": "shell", "spec": {"intent": "a"},
//!    "owned_paths": ["a.txt"], "run": "echo a > a.txt"}]}"#;
//! let plan = ShellPlan::load(text)?;
//! let channel = plan.default_channel()?; // the channel `kleene run` would use
//! let submission = Submission { plan: text.to_owned(), plan_dir: None, jobs: 8, block: vec![] };
//! // Restate::new(ingress, admin).submit(channel.as_str(), &submission).await runs it on
//! // whichever worker processes serve the registered deployment.
//! # let _ = (channel, submission);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! From a shell: `kleene-restate worker` (as many as you like, behind `kleene-restate
//! balance`), `kleene-restate register`, then `kleene-restate run plan.json`; see the
//! crate's README.
//!
//! The channel is a Restate virtual object whose exclusive handlers drive kleene's sans-IO
//! [`BatchMachine`](kleene::batch::BatchMachine); see [`service`] for how each part maps
//! onto Restate, [`plan`] for the plans it runs, and the crate's README for what works.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod accept;
pub mod balance;
pub mod call;
pub mod client;
pub mod content;
pub mod plan;
// The SDK's macros generate the handlers' clients without docs.
#[allow(missing_docs)]
pub mod service;
pub mod shell;
pub mod status;
