//! Results a run can reuse: what a task's call depends on, named by one digest (its
//! [`ActionKey`]), and the accepted results kept under such keys, each with what proves it.
//!
//! ```
//! use kleene::AppBuildPlan;
//! use kleene::batch::cache::ActionKeyParts;
//!
//! let plan = AppBuildPlan::from_json(r#"{"tasks": [
//!   {"id": "a", "owner": "shell", "spec": {"intent": "write a"}, "owned_paths": ["a.txt"]}
//! ]}"#)?.validate()?;
//! let task = plan.tasks().next().unwrap();
//! let key = ActionKeyParts::new(task).setting("base", b"project").key();
//! assert_eq!(key, ActionKeyParts::new(task).setting("base", b"project").key());
//! assert_ne!(key, ActionKeyParts::new(task).setting("base", b"empty").key());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub(crate) mod binding;
pub mod entry;
pub mod key;
pub mod store;

pub use entry::{CachedClosure, CachedResult, EntryProblem, Provenance};
pub use key::{ActionKey, ActionKeyParts, CALL_SEMANTICS};
pub use store::{ActionCache, CacheError, CacheHit, CacheWarning, FileCache, Lookup, MemoryCache};
