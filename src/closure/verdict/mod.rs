//! What validators say about a step: severities, single results and canonical verdicts.
//!
//! A [`Verdict`] is a multiset of [`ValidatorResult`]s: two verdicts are equal when they
//! hold the same results the same number of times, in any order. This is the comparison
//! stall detection uses: a fix whose verdict equals the previous attempt's made no progress.
//!
//! ```
//! use kleene::{closure::Severity, id::ValidatorId, closure::ValidatorResult, closure::Verdict};
//!
//! let lint = ValidatorResult::new(ValidatorId::new("lint")?, Severity::Warning, true, "unused import");
//! let test = ValidatorResult::new(ValidatorId::new("tests")?, Severity::Blocker, true, "1 failed");
//! let a = Verdict::new([lint.clone(), test.clone()]);
//! let b = Verdict::new([test, lint]);
//! assert_eq!(a, b);
//! assert!(!a.is_clean());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub(crate) mod normalize;
mod tail;

use serde::{Deserialize, Serialize};

pub use normalize::{NormalizedResult, NormalizedVerdict, VerdictNormalizer};
pub use tail::{OutputTail, TailLimits};

use crate::id::ValidatorId;
use crate::id::digest::canonical_struct;
use std::sync::Arc;

/// How serious a validator result is. Ordered: `Info < Warning < Blocker`.
///
/// Plan files name a validator's severity by its lowercase name, so it keeps a serde form of
/// its own; persisted payloads write their own record of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Informational; never withholds approval.
    Info,
    /// Withholds approval; auto-fixed only when the recovery policy opts in.
    Warning,
    /// Blocks; auto-fixed when overridable, halts at once when not.
    Blocker,
}

impl Severity {
    /// The lowercase name used in specs, audit lines and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Blocker => "blocker",
        }
    }
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One validator's finding about one attempt.
///
/// The `justification` is kept verbatim: for a failing test run it carries the bounded
/// [`OutputTail`] (test names, assertions, file:line), which is what later reaches the fix
/// task in its rendered spec.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ValidatorResult {
    /// Which validator produced it.
    pub validator_id: ValidatorId,
    /// How serious it is.
    pub severity: Severity,
    /// Whether a blocker may be overridden by an auto-fix. Non-overridable blockers halt.
    pub overridable: bool,
    /// Why, verbatim.
    pub justification: String,
}

impl ValidatorResult {
    /// A result.
    pub fn new(
        validator_id: ValidatorId,
        severity: Severity,
        overridable: bool,
        justification: impl Into<String>,
    ) -> Self {
        Self {
            validator_id,
            severity,
            overridable,
            justification: justification.into(),
        }
    }

    /// A passing (informational) result with an empty justification.
    pub fn pass(validator_id: ValidatorId) -> Self {
        Self::new(validator_id, Severity::Info, true, "")
    }

    /// Whether this result withholds approval (a warning or a blocker).
    pub fn is_failure(&self) -> bool {
        self.severity > Severity::Info
    }
}

/// A canonical multiset of validator results.
///
/// The results are kept sorted, so equality ignores the order they arrived in and keeps
/// their multiplicity. Construct with [`Verdict::new`]; the order is restored on
/// deserialisation too, so a hand-edited record cannot break equality.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Verdict {
    // Shared: a closure keeps each verdict in its audit log and in its attempt's record.
    results: Arc<[ValidatorResult]>,
}

canonical_struct!(ValidatorResult {
    validator_id,
    severity,
    overridable,
    justification,
});

canonical_struct!(Verdict { results => results[..] });

impl Verdict {
    /// The verdict made of `results`, in canonical order.
    pub fn new(results: impl IntoIterator<Item = ValidatorResult>) -> Self {
        let mut results: Vec<_> = results.into_iter().collect();
        if results.is_empty() {
            return Self::clean();
        }
        results.sort();
        Self {
            results: results.into(),
        }
    }

    /// A verdict with no results: clean.
    pub fn clean() -> Self {
        Self::default()
    }

    /// The verdict of one failing check: `validator` reports a blocker, with `justification`
    /// (a failing test's output, say) kept verbatim for the fix that follows. The blocker is
    /// overridable, so the closure spawns a fix subtask rather than halting; build a
    /// [`ValidatorResult`] for any other severity.
    ///
    /// ```
    /// use kleene::Verdict;
    ///
    /// let verdict = Verdict::blocker("tests", "test login ... FAILED")?;
    /// assert!(!verdict.is_clean());
    /// assert!(!verdict.has_non_overridable_blocker());
    /// # Ok::<(), kleene::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`IdError`](crate::id::IdError) when `validator` is not a valid validator id (empty,
    /// too long, a control character).
    pub fn blocker(
        validator: impl Into<String>,
        justification: impl Into<String>,
    ) -> Result<Self, crate::id::IdError> {
        let id = ValidatorId::new(validator)?;
        Ok(Self::new([ValidatorResult::new(
            id,
            Severity::Blocker,
            true,
            justification,
        )]))
    }

    /// The results in canonical order.
    pub fn results(&self) -> &[ValidatorResult] {
        &self.results
    }

    /// True when no result is a warning or a blocker.
    pub fn is_clean(&self) -> bool {
        self.failures().next().is_none()
    }

    /// The results that withhold approval (warnings and blockers).
    pub fn failures(&self) -> impl Iterator<Item = &ValidatorResult> {
        self.results.iter().filter(|r| r.is_failure())
    }

    /// The most serious severity present, if any result is present.
    pub fn worst(&self) -> Option<Severity> {
        self.results.iter().map(|r| r.severity).max()
    }

    /// True when some blocker may not be overridden.
    pub fn has_non_overridable_blocker(&self) -> bool {
        self.results
            .iter()
            .any(|r| r.severity == Severity::Blocker && !r.overridable)
    }

    /// The ids of the validators that withheld approval, sorted and de-duplicated.
    pub fn failing_validators(&self) -> Vec<ValidatorId> {
        let mut ids: Vec<_> = self.failures().map(|r| r.validator_id.clone()).collect();
        ids.dedup();
        ids
    }
}

impl From<Vec<ValidatorResult>> for Verdict {
    fn from(results: Vec<ValidatorResult>) -> Self {
        Self::new(results)
    }
}

impl From<Verdict> for Vec<ValidatorResult> {
    fn from(v: Verdict) -> Self {
        v.results.to_vec()
    }
}

impl FromIterator<ValidatorResult> for Verdict {
    fn from_iter<I: IntoIterator<Item = ValidatorResult>>(iter: I) -> Self {
        Self::new(iter)
    }
}

// Enters a digest as its text.
crate::id::digest::canonical_text!(Severity);

#[cfg(test)]
mod tests {
    use super::*;

    fn r(id: &str, s: Severity, o: bool, j: &str) -> ValidatorResult {
        ValidatorResult::new(ValidatorId::new(id).unwrap(), s, o, j)
    }

    #[test]
    fn multiset_semantics() {
        let a = r("a", Severity::Blocker, true, "x");
        let b = r("b", Severity::Warning, true, "y");
        assert_eq!(
            Verdict::new([a.clone(), b.clone()]),
            Verdict::new([b.clone(), a.clone()])
        );
        assert_ne!(
            Verdict::new([a.clone(), a.clone(), b.clone()]),
            Verdict::new([a.clone(), b.clone(), b.clone()])
        );
        assert_ne!(Verdict::new([a.clone()]), Verdict::new([a.clone(), a]));
    }

    #[test]
    fn classification() {
        let v = Verdict::new([
            r("t", Severity::Blocker, false, "x"),
            r("t", Severity::Warning, true, "y"),
            r("i", Severity::Info, true, ""),
        ]);
        assert!(!v.is_clean());
        assert!(v.has_non_overridable_blocker());
        assert_eq!(v.worst(), Some(Severity::Blocker));
        assert_eq!(v.failing_validators(), vec![ValidatorId::new("t").unwrap()]);
        assert!(Verdict::new([r("i", Severity::Info, true, "")]).is_clean());
    }
}
