//! Checking stored closure records against the closures a run's evidence (or an acceptance
//! record) binds: the audit trail of every call is bound by digest, so a changed, missing
//! or swapped record is named by task and call.
//!
//! ```no_run
//! # fn demo(record: &kleene::acceptance::StoredRecord, closures: &[(kleene::id::TaskId, u32, kleene::closure::ClosureRecord)])
//! # -> Result<(), kleene::acceptance::ClosuresError> {
//! let checked = record.verify_closures(closures.iter().map(|(t, c, r)| (t, *c, r)))?;
//! println!("{checked} closure record(s) match their acceptance record");
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;

use crate::{closure::ClosureRecord, id::TaskId, id::digest::Digest};

/// One closure record that does not match its acceptance record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClosureMismatch {
    /// The evidence or the acceptance record binds the closure of a call, and no record of it
    /// was given.
    #[error(
        "task {task} call {call}: its closure record is missing; restore the closure log \
         kleene wrote"
    )]
    Missing {
        /// The task.
        task: TaskId,
        /// The accepted call.
        call: u32,
    },
    /// The closure record of a call does not digest to what the evidence or the acceptance
    /// record binds.
    #[error(
        "task {task} call {call}: the closure record digests to {computed}, but {recorded} \
         (audit head {audit_head}) is bound to it; the record was changed after its call \
         settled: restore it"
    )]
    Changed {
        /// The task.
        task: TaskId,
        /// The accepted call.
        call: u32,
        /// The digest the acceptance record binds.
        recorded: Digest,
        /// The digest of the record given.
        computed: Digest,
        /// The audit head the acceptance record binds.
        audit_head: Digest,
    },
}

impl ClosureMismatch {
    /// The task and call the mismatch is about.
    pub fn call(&self) -> (&TaskId, u32) {
        match self {
            Self::Missing { task, call } | Self::Changed { task, call, .. } => (task, *call),
        }
    }
}

/// Why stored closure records were refused: every mismatch, in task order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("check closure records against the acceptance record: {} of them do not match", .mismatches.len())]
pub struct ClosuresError {
    mismatches: Vec<ClosureMismatch>,
}

impl ClosuresError {
    /// Every mismatch, in task order.
    pub fn mismatches(&self) -> &[ClosureMismatch] {
        &self.mismatches
    }
}

/// Checks `closures` against `bound` closures (task, call, audit head, record digest).
pub(crate) fn verify_bound<'b, 'r>(
    bound: impl IntoIterator<Item = (&'b TaskId, u32, Digest, Digest)>,
    closures: impl IntoIterator<Item = (&'r TaskId, u32, &'r ClosureRecord)>,
) -> Result<usize, ClosuresError> {
    let mut given: BTreeMap<(&TaskId, u32), Vec<&ClosureRecord>> = BTreeMap::new();
    for (task, call, record) in closures {
        given.entry((task, call)).or_default().push(record);
    }
    let mut mismatches = Vec::new();
    let mut matched = 0;
    for (task, call, audit_head, recorded) in bound {
        match given.get(&(task, call)).map(Vec::as_slice) {
            None | Some([]) => mismatches.push(ClosureMismatch::Missing {
                task: task.clone(),
                call,
            }),
            Some(records) => {
                // A call whose record was saved twice must match in every copy.
                for record in records {
                    let computed = record.digest();
                    if computed != recorded {
                        mismatches.push(ClosureMismatch::Changed {
                            task: task.clone(),
                            call,
                            recorded,
                            computed,
                            audit_head,
                        });
                    }
                }
                matched += 1;
            }
        }
    }
    if mismatches.is_empty() {
        Ok(matched)
    } else {
        Err(ClosuresError { mismatches })
    }
}
