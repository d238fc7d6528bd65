//! Proptest strategies for the foundation types: ids, specs, validator results, verdicts
//! and tasks anywhere in a fix chain.
//!
//! ```
//! use kleene::testing::foundation::task;
//! use proptest::strategy::{Strategy, ValueTree};
//! use proptest::test_runner::TestRunner;
//!
//! let mut runner = TestRunner::deterministic();
//! let t = task().new_tree(&mut runner).unwrap().current();
//! assert!(t.prior_failures().iter().all(|f| f.attempt < t.depth()));
//! ```

use proptest::prelude::*;

use crate::{
    closure::task::FailureEntry, closure::task::Spec, closure::task::Task,
    closure::verdict::Severity, closure::verdict::ValidatorResult, closure::verdict::Verdict,
    id::TaskId, id::ValidatorId,
};

/// Valid task ids: short ASCII names, occasionally with non-ASCII letters.
pub fn task_id() -> impl Strategy<Value = TaskId> {
    "[a-z][a-z0-9_]{0,12}(é|ß)?".prop_map(|s| TaskId::new(s).expect("the pattern is a valid id"))
}

/// Valid validator ids from a small pool, so verdicts repeat ids.
pub fn validator_id() -> impl Strategy<Value = ValidatorId> {
    prop::sample::select(vec!["tests", "lint", "types", "schema"])
        .prop_map(|s| ValidatorId::new(s).expect("the pool holds valid ids"))
}

/// Any severity.
pub fn severity() -> impl Strategy<Value = Severity> {
    prop_oneof![
        Just(Severity::Info),
        Just(Severity::Warning),
        Just(Severity::Blocker)
    ]
}

/// Specs with arbitrary (Unicode) intent and up to three criteria.
pub fn spec() -> impl Strategy<Value = Spec> {
    (".{0,40}", prop::collection::vec(".{0,20}", 0..3)).prop_map(|(intent, criteria)| {
        criteria
            .into_iter()
            .fold(Spec::new(intent), Spec::with_criterion)
    })
}

/// Validator results with justifications up to 200 characters (any Unicode, newlines
/// included).
pub fn validator_result() -> impl Strategy<Value = ValidatorResult> {
    (validator_id(), severity(), any::<bool>(), "(.|\n){0,200}")
        .prop_map(|(id, s, o, j)| ValidatorResult::new(id, s, o, j))
}

/// Verdicts of up to eight results.
pub fn verdict() -> impl Strategy<Value = Verdict> {
    prop::collection::vec(validator_result(), 0..8).prop_map(Verdict::new)
}

/// Failure entries of `attempt`, with justifications up to 300 characters.
pub fn failure_entry(attempt: u32) -> impl Strategy<Value = FailureEntry> {
    (validator_id(), severity(), "(.|\n){0,300}").prop_map(move |(validator_id, severity, j)| {
        FailureEntry {
            attempt,
            validator_id,
            severity,
            justification: j,
        }
    })
}

/// Tasks at depth 0 to 4: a root, or the fix subtask at the end of a chain built the way the
/// closure builds it (linear fix ids, root id and spec carried, failures accumulated with
/// their attempts).
pub fn task() -> impl Strategy<Value = Task> {
    let attempt_failures =
        prop::collection::vec(prop::collection::vec(failure_entry(0), 1..3), 0..=4);
    (
        task_id(),
        spec(),
        attempt_failures,
        prop::collection::vec(spec(), 4),
    )
        .prop_map(|(root_id, root_spec, failures_per_attempt, fix_specs)| {
            let mut task = Task::new(root_id.clone(), root_spec);
            for (attempt, (failures, fix_spec)) in
                failures_per_attempt.into_iter().zip(fix_specs).enumerate()
            {
                let depth = attempt as u32 + 1;
                let failures = failures.into_iter().map(|f| FailureEntry {
                    attempt: attempt as u32,
                    ..f
                });
                // Short root ids keep `_fix_N` within MAX_ID_LEN; fall back to the root id
                // itself so the strategy never fails.
                let id = root_id.fix_id(depth).unwrap_or_else(|_| root_id.clone());
                task = Task::fix_subtask(&task, id, fix_spec, failures);
            }
            task
        })
}
