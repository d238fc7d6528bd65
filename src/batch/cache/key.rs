//! A task's action key: one digest over everything that can change what its call does, and
//! nothing else.
//!
//! ```
//! use kleene::AppBuildPlan;
//! use kleene::batch::cache::ActionKeyParts;
//! use kleene::id::{Digest, TaskId};
//! use kleene::plan::AdmittedPath;
//!
//! let plan = AppBuildPlan::from_json(r#"{"tasks": [
//!   {"id": "a", "owner": "shell", "spec": {"intent": "write a"}, "owned_paths": ["a.txt"]},
//!   {"id": "b", "owner": "shell", "spec": {"intent": "read a"}, "owned_paths": ["b.txt"],
//!    "depends_on": ["a"]}
//! ]}"#)?.validate()?;
//! let b = plan.task(&TaskId::new("b")?).unwrap();
//! let helper = AdmittedPath::admit("tools/helper.sh")?;
//! let parts = |helper_bytes: &[u8], a_output: &[u8]| {
//!     ActionKeyParts::new(b)
//!         .reads([(helper.clone(), Digest::from(blake3::hash(helper_bytes)))])
//!         .prerequisite(TaskId::new("a").unwrap(), Digest::from(blake3::hash(a_output)))
//! };
//! // Whatever the call can read or was given changes its key; the same inputs give the same.
//! assert_eq!(parts(b"v1", b"out").key(), parts(b"v1", b"out").key());
//! assert_ne!(parts(b"v1", b"out").key(), parts(b"v2", b"out").key());
//! assert_ne!(parts(b"v1", b"out").key(), parts(b"v1", b"other").key());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The key covers, in this order (FORMATS.md names the encoding):
//!
//! - the version of kleene's call semantics ([`CALL_SEMANTICS`]), so a kleene that makes a
//!   call differently never reuses a result made the old way;
//! - the task's own plan entry, in the plan digest's canonical form (its id, kind, owner,
//!   spec, retry limit, owned paths, prerequisites and every extension value such as a shell
//!   task's commands, timeout and scratch): reformatting the plan, reordering its tasks or
//!   the keys of an object changes nothing, and another task's entry is not part of it;
//! - the settings of the plan that reach every call (named values, such as the plan's
//!   scratch globs or its base);
//! - the files the call's stage holds beside its prerequisites' results, by path and digest;
//! - the accepted output of each task whose files the call is given, by task and digest.
//!
//! What the call reaches outside its stage (tools on the host, the network, the clock) is
//! not in the key: a task whose result depends on such things must not be reused.

use std::collections::BTreeMap;
use std::fmt;

use crate::id::digest::CanonicalHasher;
use crate::id::{Digest, TaskId};
use crate::plan::AdmittedPath;
use crate::plan::PlannedTask;

/// The version of what a call means: how its stage is made, what it is given and how its
/// result is judged. Raised whenever a kleene would make the same call differently, so no
/// result made the old way is ever reused.
pub const CALL_SEMANTICS: u32 = 1;

/// The digest naming everything a task's call depends on (see the [module](self) docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ActionKey(Digest);

impl ActionKey {
    /// The key as a digest (its text form is the digest's).
    pub fn digest(&self) -> Digest {
        self.0
    }

    /// The key a stored entry names: trusted only as far as the entry's seal is.
    pub(crate) fn from_digest(digest: Digest) -> Self {
        Self(digest)
    }
}

impl fmt::Display for ActionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// What a task's call depends on, part by part; [`key`](Self::key) digests it.
///
/// Each part is a set: the order in which files, settings or prerequisites are added does
/// not matter, and a part added twice under one name keeps its last value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionKeyParts {
    task: Digest,
    settings: BTreeMap<String, Digest>,
    reads: BTreeMap<AdmittedPath, Digest>,
    prerequisites: BTreeMap<TaskId, Digest>,
}

impl ActionKeyParts {
    /// The parts of `task`'s key, with its plan entry and nothing else yet.
    pub fn new(task: &PlannedTask) -> Self {
        Self {
            task: crate::plan::validate::task_digest(task),
            settings: BTreeMap::new(),
            reads: BTreeMap::new(),
            prerequisites: BTreeMap::new(),
        }
    }

    /// With the plan setting `name` (one that reaches every call) set to `value`, given in a
    /// canonical form of the caller's (the same setting always the same bytes).
    #[must_use]
    pub fn setting(mut self, name: &str, value: &[u8]) -> Self {
        self.settings
            .insert(name.to_owned(), Digest::of("action setting", value));
        self
    }

    /// With `files` (each path and the digest of its bytes) in the call's stage.
    #[must_use]
    pub fn reads(mut self, files: impl IntoIterator<Item = (AdmittedPath, Digest)>) -> Self {
        self.reads.extend(files);
        self
    }

    /// With `task`'s accepted output (its digest) given to the call.
    #[must_use]
    pub fn prerequisite(mut self, task: TaskId, output: Digest) -> Self {
        self.prerequisites.insert(task, output);
        self
    }

    /// The key of these parts.
    pub fn key(&self) -> ActionKey {
        let Self {
            task,
            settings,
            reads,
            prerequisites,
        } = self;
        ActionKey(
            CanonicalHasher::new("action key")
                .put(&CALL_SEMANTICS)
                .put(task)
                .put(settings)
                .put(reads)
                .put(prerequisites)
                .finish(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AppBuildPlan;

    fn plan(tasks: &str) -> crate::ValidatedPlan {
        AppBuildPlan::from_json(&format!(r#"{{"tasks": [{tasks}]}}"#))
            .unwrap()
            .validate()
            .unwrap()
    }

    fn path(p: &str) -> AdmittedPath {
        AdmittedPath::admit(p).unwrap()
    }

    const A: &str =
        r#"{"id": "a", "owner": "shell", "spec": {"intent": "a"}, "owned_paths": ["a"]}"#;

    /// Each part is its own: a value moved from one part to another is another key, so no
    /// two different sets of inputs can be made to meet by shifting what goes where.
    #[test]
    fn a_value_in_another_part_is_another_key() {
        let plan = plan(A);
        let a = plan.tasks().next().unwrap();
        let d = Digest::from(blake3::hash(b"x"));
        let keys = [
            ActionKeyParts::new(a).key(),
            ActionKeyParts::new(a).reads([(path("a"), d)]).key(),
            ActionKeyParts::new(a)
                .prerequisite(TaskId::new("a").unwrap(), d)
                .key(),
            ActionKeyParts::new(a).setting("a", b"x").key(),
        ];
        for (i, k) in keys.iter().enumerate() {
            for other in &keys[i + 1..] {
                assert_ne!(k, other);
            }
        }
    }

    #[test]
    fn the_order_parts_are_added_in_does_not_matter() {
        let plan = plan(A);
        let a = plan.tasks().next().unwrap();
        let (d1, d2) = (
            Digest::from(blake3::hash(b"1")),
            Digest::from(blake3::hash(b"2")),
        );
        let one = ActionKeyParts::new(a)
            .reads([(path("x"), d1), (path("y"), d2)])
            .setting("s", b"1")
            .setting("t", b"2");
        let other = ActionKeyParts::new(a)
            .setting("t", b"2")
            .reads([(path("y"), d2)])
            .setting("s", b"1")
            .reads([(path("x"), d1)]);
        assert_eq!(one.key(), other.key());
    }

    /// A key is the digest's text: what a cache's file names and records show.
    #[test]
    fn its_text_is_its_digest() {
        let plan = plan(A);
        let key = ActionKeyParts::new(plan.tasks().next().unwrap()).key();
        assert_eq!(key.to_string(), key.digest().to_string());
        assert_eq!(key.to_string().len(), 64);
    }
}
