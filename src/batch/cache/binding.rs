//! A batch's cache and how it keys its tasks: what the machine consults before it reserves
//! a call, and stores into once a call is accepted.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::entry::{CachedResult, Provenance};
use super::key::{ActionKey, ActionKeyParts};
use super::store::{ActionCache, CacheWarning, Lookup};
use crate::batch::candidate::{AcceptedOutput, Rejection};
use crate::batch::evidence::{ReusedClosure, ReusedFrom};
use crate::closure::ClosureRecord;
use crate::id::digest::Digest;
use crate::id::{ChannelId, TaskId};
use crate::plan::PlannedTask;

/// What names a task's call, but for its prerequisites' outputs (the batch adds those);
/// `None` for a task that is never cached.
pub(crate) type TaskKeys = dyn Fn(&PlannedTask) -> Option<ActionKeyParts> + Send + Sync;

/// What a batch was told of caching: its cache, if any, and its keys, if not the default.
#[derive(Clone, Default)]
pub(crate) struct CacheSettings {
    pub(crate) cache: Option<Arc<dyn ActionCache>>,
    pub(crate) keys: Option<Arc<TaskKeys>>,
}

impl std::fmt::Debug for CacheSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheSettings")
            .field("cache", &self.cache.is_some())
            .field("keys", &self.keys.as_ref().map(|_| "caller's"))
            .finish()
    }
}

impl CacheSettings {
    /// The binding a batch's machine consults, when the batch has a cache; `inputs` are the
    /// batch's (the default keys name them).
    pub(crate) fn binding(&self, inputs: &BTreeMap<String, Digest>) -> Option<CacheBinding> {
        Some(CacheBinding {
            cache: self.cache.clone()?,
            keys: self.keys.clone(),
            inputs: inputs.clone(),
        })
    }
}

/// A batch's cache, and its tasks' keys.
#[derive(Clone)]
pub(crate) struct CacheBinding {
    cache: Arc<dyn ActionCache>,
    /// The caller's keys; without them, each task's plan entry and the batch's inputs.
    keys: Option<Arc<TaskKeys>>,
    inputs: BTreeMap<String, Digest>,
}

impl CacheBinding {
    /// `task`'s key, given its prerequisites' accepted outputs (sorted by task id), or
    /// `None` when the task is never cached.
    pub(crate) fn key(
        &self,
        task: &PlannedTask,
        prerequisites: impl IntoIterator<Item = (TaskId, Digest)>,
    ) -> Option<ActionKey> {
        let parts = match &self.keys {
            Some(keys) => keys(task)?,
            None => self
                .inputs
                .iter()
                .fold(ActionKeyParts::new(task), |parts, (name, d)| {
                    parts.setting(&format!("batch input {name}"), d.as_bytes())
                }),
        };
        let parts = prerequisites
            .into_iter()
            .fold(parts, |parts, (t, d)| parts.prerequisite(t, d));
        Some(parts.key())
    }

    /// The checked output kept under `key` for `task`, with where it was accepted; a refused
    /// entry, or one that is not `task`'s, is a warning and a miss.
    pub(crate) fn lookup(
        &self,
        task: &TaskId,
        key: ActionKey,
        warnings: &mut Vec<CacheWarning>,
    ) -> Option<(ReusedFrom, AcceptedOutput, Option<Arc<str>>)> {
        match self.cache.lookup(&key) {
            Lookup::Hit(hit) => {
                let (result, output, closure_json) = hit.into_parts();
                if result.task() != task || result.key() != key {
                    warnings.push(CacheWarning::Unusable {
                        task: task.clone(),
                        key,
                        rejection: Rejection::contract(
                            task,
                            format!(
                                "the entry kept under its key is task {}'s, under key {}",
                                result.task(),
                                result.key()
                            ),
                        ),
                    });
                    return None;
                }
                // The record's digests as the sealed entry names them; its text (bound by the
                // entry's blake3) is read as a record by whoever checks the trail.
                let from = ReusedFrom::new(
                    key,
                    result.provenance().channel.clone(),
                    result.provenance().call,
                    result
                        .closure()
                        .map(|c| ReusedClosure::new(c.record, c.audit_head)),
                );
                Some((from, output, closure_json))
            }
            Lookup::Miss => None,
            Lookup::Refused { entry, problem } => {
                warnings.push(CacheWarning::Refused {
                    task: task.clone(),
                    entry,
                    problem,
                });
                None
            }
        }
    }

    /// Keeps call `call`'s accepted `output` of `task` under `key`; a failure is a warning.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn store(
        &self,
        key: ActionKey,
        task: &TaskId,
        channel: &ChannelId,
        call: u32,
        output: &AcceptedOutput,
        closure: Option<&ClosureRecord>,
        warnings: &mut Vec<CacheWarning>,
    ) {
        let provenance = Provenance::new(channel.clone(), call);
        let result = CachedResult::new(key, task.clone(), provenance, output, closure);
        if let Err(error) = self.cache.store(&result, output, closure) {
            warnings.push(CacheWarning::NotStored {
                task: task.clone(),
                key,
                error: Arc::new(error),
            });
        }
    }
}
