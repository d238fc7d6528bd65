//! Checking stored closure records against the closures an acceptance record binds.
//!
//! ```no_run
//! # fn demo(record: &kleene::acceptance::StoredRecord, closures: &[(kleene::id::TaskId, u32, kleene::closure::ClosureRecord)])
//! # -> Result<(), kleene::acceptance::ClosuresError> {
//! let checked = record.verify_closures(closures.iter().map(|(t, c, r)| (t, *c, r)))?;
//! println!("{checked} closure record(s) match their acceptance record");
//! # Ok(()) }
//! ```

use super::record::TaskResult;
use crate::closure::ClosureRecord;
use crate::closure::bound::{ClosuresError, verify_bound};
use crate::id::TaskId;

/// Checks `closures` (task, call, record) against the closure bindings of `results`;
/// returns how many bound closures matched. Records of calls no result binds are ignored
/// (earlier, refused calls of a task).
pub(crate) fn verify<'r>(
    results: &[TaskResult],
    closures: impl IntoIterator<Item = (&'r TaskId, u32, &'r ClosureRecord)>,
) -> Result<usize, ClosuresError> {
    let bound = results.iter().filter_map(|r| {
        let c = r.closure()?;
        Some((r.task(), c.call(), c.audit_head(), c.record_digest()))
    });
    verify_bound(bound, closures)
}
