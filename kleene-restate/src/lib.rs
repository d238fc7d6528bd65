//! Runs a kleene plan on Restate, a durable-execution engine, with task workers on any
//! number of processes.
//!
//! ```no_run
//! // kleene-restate worker --listen 127.0.0.1:9081     (as many as you like, behind one URL)
//! // kleene-restate register --admin http://127.0.0.1:9070 --endpoint http://127.0.0.1:9080
//! // kleene-restate run --restate http://127.0.0.1:8080 plan.json
//! ```
//!
//! The channel is a Restate virtual object whose exclusive handlers drive kleene's sans-IO
//! [`BatchMachine`](kleene::batch::BatchMachine); see [`service`] for how each part maps
//! onto Restate, [`plan`] for the plans it runs, and the crate's README for what works.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

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
