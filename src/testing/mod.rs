//! Test support for users' own property-test suites (feature `testing`): scripted agents and
//! workers, and proptest strategies for kleene's inputs.
//!
//! [`closure`] scripts an agent (sync or async, task by task), [`batch`] a batch worker
//! (sync or async), a journal whose bytes a test can cut and the
//! [`CrashBackend`](batch::CrashBackend) that cuts the power at any sync, [`completion`]
//! the order in which an async run's calls finish, and [`plan`] and [`foundation`]
//! generate plans, paths, ids and verdicts. Every driver runs them: `Batch::run`,
//! `run_threaded` and `run_agents` (through `Arc<Mutex<_>>` for one script over several
//! slots), and `run_async` and `run_agents_async` with feature `async`. A property over every generated plan, checked against kleene's own rules:
//!
//! ```
//! use kleene::testing::plan::acyclic_plan;
//! use proptest::prelude::*;
//! use proptest::test_runner::TestRunner;
//!
//! TestRunner::default().run(&acyclic_plan(8), |plan| {
//!     let validated = plan.validate().expect("an acyclic plan validates");
//!     // Every task comes after all its prerequisites.
//!     let order = validated.topological_order();
//!     for (i, id) in order.iter().enumerate() {
//!         for p in validated.prerequisites(id) {
//!             prop_assert!(order[..i].contains(p));
//!         }
//!     }
//!     Ok(())
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod batch;
pub mod closure;
pub mod completion;
pub mod foundation;
pub mod plan;
#[cfg(all(unix, feature = "process"))]
pub mod process;
