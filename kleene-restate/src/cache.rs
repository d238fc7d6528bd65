//! The cache of accepted results kept in Restate: one `ActionCache/{key}` object per action
//! key, which any channel consults, so a second submission of an edited plan, from any
//! machine, reuses what the first accepted.
//!
//! ```
//! use std::collections::BTreeMap;
//! use kleene::batch::Candidate;
//! use kleene::batch::cache::{ActionCache, ActionKeyParts, CachedResult, Provenance};
//! use kleene::batch::candidate::AcceptedOutput;
//! use kleene::id::ChannelId;
//! use kleene::plan::AdmittedPath;
//! use kleene_restate::cache::{CacheEntry, ChannelCache};
//!
//! # let plan = kleene::AppBuildPlan::from_json(r#"{"tasks": [{"id": "a",
//! #   "kind": {"lane": "config"}, "owner": "x", "spec": {"intent": "a"},
//! #   "owned_paths": ["a.txt"]}]}"#)?.validate()?;
//! let task = plan.tasks().next().unwrap();
//! let key = ActionKeyParts::new(task).key();
//! let candidate = Candidate::new(BTreeMap::from([(AdmittedPath::admit("a.txt")?, b"a\n".to_vec())]));
//! let output = AcceptedOutput::verified(candidate.clone(), candidate.digest()).unwrap();
//! let result = CachedResult::new(key, task.id.clone(), Provenance::new(ChannelId::new("c")?, 1), &output, None);
//! // A channel's stores become entries for the `ActionCache` objects…
//! let channel = ChannelCache::default();
//! channel.store(&result, &output, None)?;
//! let (_, entry) = channel.take_stored().remove(0);
//! // …which another channel reads back, checked, into its own batch's cache.
//! let other = ChannelCache::default();
//! other.admit(&task.id, key, entry)?;
//! assert!(matches!(other.lookup(&key), kleene::batch::cache::Lookup::Hit(_)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The channel's batch machine never waits: before it reserves, the channel asks it which
//! keys its newly ready tasks have ([`BatchMachine::take_ready_action_keys`]), fetches those entries
//! (journaled calls, so a replay reads the same), admits each one that checks into the
//! batch's in-memory cache, and takes the reuses ([`BatchMachine::reserve_reused`]) round
//! after round; then it reserves calls. What the batch stores on acceptance goes to the
//! objects as one-way messages.
//!
//! [`BatchMachine::take_ready_action_keys`]: kleene::batch::machine::BatchMachine::take_ready_action_keys
//! [`BatchMachine::reserve_reused`]: kleene::batch::machine::BatchMachine::reserve_reused

use std::sync::{Mutex, PoisonError};

use kleene::batch::cache::{
    ActionCache, ActionKey, CacheError, CachedResult, EntryProblem, Lookup, MemoryCache,
};
use kleene::batch::candidate::AcceptedOutput;
use kleene::closure::ClosureRecord;
use kleene::closure::record::ClosureRecordError;
use kleene::id::TaskId;
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

use crate::content::{ContentError, Files, verify};

/// An accepted result as an `ActionCache` object keeps it: the sealed entry, the output's
/// files and the call's closure record. Everything is checked when it is admitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheEntry {
    /// The [`CachedResult`]'s JSON, sealed by its digest.
    pub result: String,
    /// The accepted output's files.
    pub files: Files,
    /// The closure record of the call that made the output, as `ClosureRecord::to_json`
    /// wrote it; absent when the call kept none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closure: Option<String>,
}

/// Why an entry was not admitted: it is a miss, never a hit.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheEntryError {
    /// The sealed result does not read.
    #[error("the entry under action key {key} is refused: {problem}")]
    Entry {
        /// The key looked up.
        key: ActionKey,
        /// What is wrong with it.
        problem: EntryProblem,
    },
    /// It is another key's or another task's result.
    #[error("the entry under action key {key} is task {task}'s under key {found}")]
    Other {
        /// The key looked up.
        key: ActionKey,
        /// The task the entry names.
        task: TaskId,
        /// The key the entry names.
        found: ActionKey,
    },
    /// The files are not the output the entry seals.
    #[error("the files of the entry under action key {key} are not its output")]
    Files {
        /// The key looked up.
        key: ActionKey,
        /// Why.
        #[source]
        source: ContentError,
    },
    /// The closure record does not read.
    #[error("the closure record of the entry under action key {key} does not read")]
    Record {
        /// The key looked up.
        key: ActionKey,
        /// Why.
        #[source]
        source: ClosureRecordError,
    },
    /// The record is not the one the entry seals, or is missing.
    #[error("the entry under action key {key} does not hold the closure record it names")]
    Cache {
        /// The key looked up.
        key: ActionKey,
        /// Why.
        #[source]
        source: CacheError,
    },
}

/// A channel's view of the cache: the results admitted for this pass (what the batch's
/// machine looks up) and the results the batch stored since they were last taken.
#[derive(Debug, Default)]
pub struct ChannelCache {
    admitted: MemoryCache,
    stored: Mutex<Vec<(ActionKey, CacheEntry)>>,
}

impl ChannelCache {
    /// Checks `entry`, fetched under `key` for `task`, and admits it for the batch's lookups.
    ///
    /// # Errors
    ///
    /// [`CacheEntryError`] naming what does not hold: the entry is then a miss.
    pub fn admit(
        &self,
        task: &TaskId,
        key: ActionKey,
        entry: CacheEntry,
    ) -> Result<(), CacheEntryError> {
        let result = CachedResult::from_json(entry.result.as_bytes(), None)
            .map_err(|problem| CacheEntryError::Entry { key, problem })?;
        if result.key() != key || result.task() != task {
            return Err(CacheEntryError::Other {
                key,
                task: result.task().clone(),
                found: result.key(),
            });
        }
        let output = verify(result.output(), entry.files)
            .map_err(|source| CacheEntryError::Files { key, source })?;
        let closure = entry
            .closure
            .as_deref()
            .map(ClosureRecord::from_json)
            .transpose()
            .map_err(|source| CacheEntryError::Record { key, source })?;
        self.admitted
            .store(&result, &output, closure.as_ref())
            .map_err(|source| CacheEntryError::Cache { key, source })
    }

    /// The results the batch stored since the last take, each with its key: what goes to
    /// the `ActionCache` objects.
    pub fn take_stored(&self) -> Vec<(ActionKey, CacheEntry)> {
        std::mem::take(&mut *self.stored.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl ActionCache for ChannelCache {
    fn lookup(&self, key: &ActionKey) -> Lookup {
        self.admitted.lookup(key)
    }

    fn store(
        &self,
        result: &CachedResult,
        output: &AcceptedOutput,
        closure: Option<&ClosureRecord>,
    ) -> Result<(), CacheError> {
        self.admitted.store(result, output, closure)?;
        let entry = CacheEntry {
            result: result.to_json(None),
            files: Files::of(output.candidate()),
            closure: closure.map(ClosureRecord::to_json),
        };
        self.stored
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((result.key(), entry));
        Ok(())
    }
}

use crate::store::Carried;

/// The state key of an `ActionCache` object's entry: inline, or (a large output's) in the
/// channel's content store.
const ENTRY: &str = "entry";

/// The cache in Restate: one virtual object per action key (its hex digest), holding the
/// last result accepted under it.
#[derive(Debug, Default)]
pub struct ActionCacheObject;

#[restate_sdk::object(name = "ActionCache")]
impl ActionCacheObject {
    /// The entry kept under this key, if any. Served beside a write (shared).
    #[handler]
    async fn get(
        &self,
        ctx: SharedObjectContext<'_>,
    ) -> Result<Json<Option<Carried<CacheEntry>>>, HandlerError> {
        Ok(Json(
            ctx.get::<Json<Carried<CacheEntry>>>(ENTRY)
                .await?
                .map(|j| j.0),
        ))
    }

    /// Keeps `entry` under this key, replacing what was kept.
    #[handler]
    async fn put(
        &self,
        ctx: ObjectContext<'_>,
        entry: Json<Carried<CacheEntry>>,
    ) -> Result<(), HandlerError> {
        ctx.set(ENTRY, entry);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kleene::batch::Candidate;
    use kleene::batch::cache::{ActionKeyParts, Provenance};
    use kleene::id::ChannelId;
    use kleene::plan::AdmittedPath;
    use std::collections::BTreeMap;

    fn stored(task: &str, bytes: &[u8]) -> (TaskId, ActionKey, CacheEntry) {
        let plan = kleene::AppBuildPlan::from_json(&format!(
            r#"{{"tasks": [{{"id": "{task}", "kind": {{"lane": "config"}}, "owner": "x",
                "spec": {{"intent": "{task}"}}, "owned_paths": ["{task}.txt"]}}]}}"#
        ))
        .unwrap()
        .validate()
        .unwrap();
        let planned = plan.tasks().next().unwrap();
        let key = ActionKeyParts::new(planned).key();
        let path = AdmittedPath::admit(&format!("{task}.txt")).unwrap();
        let candidate = Candidate::new(BTreeMap::from([(path, bytes.to_vec())]));
        let output = AcceptedOutput::verified(candidate.clone(), candidate.digest()).unwrap();
        let result = CachedResult::new(
            key,
            planned.id.clone(),
            Provenance::new(ChannelId::new("c").unwrap(), 1),
            &output,
            None,
        );
        let cache = ChannelCache::default();
        cache.store(&result, &output, None).unwrap();
        let (_, entry) = cache.take_stored().remove(0);
        (planned.id.clone(), key, entry)
    }

    #[test]
    fn an_entry_reads_back_and_a_tampered_one_is_a_miss_naming_why() {
        let (task, key, entry) = stored("a", b"a\n");
        assert!(
            ChannelCache::default()
                .admit(&task, key, entry.clone())
                .is_ok()
        );
        // A file's bytes changed.
        let mut changed = entry.clone();
        changed.files.0[0].1 = b"b\n".to_vec();
        let cache = ChannelCache::default();
        let err = cache.admit(&task, key, changed).unwrap_err();
        assert!(matches!(err, CacheEntryError::Files { .. }), "{err}");
        assert!(matches!(cache.lookup(&key), Lookup::Miss));
        // The sealed result edited.
        let mut edited = entry.clone();
        edited.result = edited.result.replacen("\"call\":1", "\"call\":2", 1);
        let err = ChannelCache::default()
            .admit(&task, key, edited)
            .unwrap_err();
        assert!(matches!(err, CacheEntryError::Entry { .. }), "{err}");
        // Another task's entry under this key.
        let (other_task, other_key, other) = stored("b", b"b\n");
        let err = ChannelCache::default()
            .admit(&task, key, other)
            .unwrap_err();
        assert!(matches!(err, CacheEntryError::Other { .. }), "{err}");
        assert!(
            ChannelCache::default()
                .admit(&other_task, other_key, entry.clone())
                .is_err()
        );
        // A record the entry does not name.
        let mut record = entry;
        record.closure = Some("{}".into());
        assert!(ChannelCache::default().admit(&task, key, record).is_err());
    }

    #[test]
    fn an_entry_keeps_its_json() {
        let (_, _, entry) = stored("a", b"a\n");
        let text = serde_json::to_string(&entry).unwrap();
        assert_eq!(serde_json::from_str::<CacheEntry>(&text).unwrap(), entry);
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(value.get("closure").is_none(), "{text}");
    }
}
