//! The recovery policy (bounds, what may be auto-fixed, how verdicts are compared) and the
//! fix budget a closure tree (or a whole batch) draws from.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use super::verdict::VerdictNormalizer;
use crate::{closure::step::DEFAULT_ITERATION_CAP, closure::step::RecoverOn};

/// The deepest `max_recovery_depth` a policy accepts. A closure that needs more than this
/// many chained fixes is not converging; the bound also keeps fix ids short.
pub const MAX_RECOVERY_DEPTH: u32 = 1000;

/// Why a [`RecoveryPolicy`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// `max_inner_iterations` was 0: no task could ever run.
    #[error("build recovery policy: max_inner_iterations must be at least 1, got 0")]
    ZeroIterationCap,
    /// `max_recovery_depth` allows fixes but `max_total_fix_attempts` is 0, so none could
    /// ever be spawned. Use depth 0 to mean "never auto-fix".
    #[error(
        "build recovery policy: max_recovery_depth is {depth} but max_total_fix_attempts is 0; use depth 0 to disable auto-fix"
    )]
    ZeroFixBudget {
        /// The configured depth.
        depth: u32,
    },
    /// `max_recovery_depth` is beyond [`MAX_RECOVERY_DEPTH`].
    #[error("build recovery policy: max_recovery_depth {depth} is more than the {max} allowed")]
    DepthTooLarge {
        /// The configured depth.
        depth: u32,
        /// The bound.
        max: u32,
    },
    /// A fix budget was restored with more attempts used than it allows.
    #[error("restore fix budget: {used} attempts used of a budget of {max}")]
    BudgetOverdrawn {
        /// Attempts used.
        used: u32,
        /// The budget.
        max: u32,
    },
}

/// How a closure recovers: how deep fixes may nest, how many there may be, and which
/// failures are recovered.
///
/// | bound | default | meaning |
/// |---|---|---|
/// | `max_recovery_depth` | 3 | deepest fix subtask; 0 = never auto-fix |
/// | `max_total_fix_attempts` | 10 | fix subtasks across the closure tree (see [`FixBudget`]) |
/// | `max_inner_iterations` | 50 | inner-loop iterations of one task |
/// | `recover_on` | blockers only | warnings not opted in withhold approval: they halt |
/// | `normalizer` | [`VerdictNormalizer::default`] | how stall detection compares verdicts |
///
/// # Examples
///
/// ```
/// use kleene::{closure::step::RecoverOn, closure::RecoveryPolicy, closure::verdict::VerdictNormalizer};
///
/// let policy = RecoveryPolicy::builder()
///     .max_recovery_depth(2)
///     .recover_on(RecoverOn::BlockersAndWarnings)
///     .normalizer(VerdictNormalizer::exact())
///     .build()?;
/// assert_eq!(policy.max_total_fix_attempts(), 10);
/// assert!(RecoveryPolicy::builder().max_inner_iterations(0).build().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryPolicy {
    max_recovery_depth: u32,
    max_total_fix_attempts: u32,
    max_inner_iterations: NonZeroU32,
    recover_on: RecoverOn,
    normalizer: VerdictNormalizer,
}

// Every setting, as a persisted closure state seals it.
crate::id::digest::canonical_struct!(RecoveryPolicy {
    max_recovery_depth,
    max_total_fix_attempts,
    max_inner_iterations => max_inner_iterations.get(),
    recover_on,
    normalizer => normalizer.is_exact(),
});

impl Default for RecoveryPolicy {
    fn default() -> Self {
        Self {
            max_recovery_depth: 3,
            max_total_fix_attempts: 10,
            max_inner_iterations: DEFAULT_ITERATION_CAP,
            recover_on: RecoverOn::Blockers,
            normalizer: VerdictNormalizer::default(),
        }
    }
}

impl RecoveryPolicy {
    /// A builder starting from the defaults.
    pub fn builder() -> RecoveryPolicyBuilder {
        RecoveryPolicyBuilder {
            record: RecoveryPolicy::default().into(),
        }
    }

    /// The deepest fix subtask (`Task::depth`) the closure may spawn; 0 = never auto-fix.
    pub fn max_recovery_depth(&self) -> u32 {
        self.max_recovery_depth
    }

    /// How many fix subtasks a closure may spawn in all (the size of [`Self::fix_budget`]).
    pub fn max_total_fix_attempts(&self) -> u32 {
        self.max_total_fix_attempts
    }

    /// The inner-loop iteration cap of every task.
    pub fn max_inner_iterations(&self) -> NonZeroU32 {
        self.max_inner_iterations
    }

    /// Which post-execute failures are auto-fixed.
    pub fn recover_on(&self) -> RecoverOn {
        self.recover_on
    }

    /// How consecutive verdicts are compared for stall detection.
    pub fn normalizer(&self) -> &VerdictNormalizer {
        &self.normalizer
    }

    /// A fresh budget of `max_total_fix_attempts`. Clone it to share it across several
    /// closures of one batch.
    pub fn fix_budget(&self) -> FixBudget {
        FixBudget::new(self.max_total_fix_attempts)
    }
}

/// Builds a [`RecoveryPolicy`], checking it whole in [`RecoveryPolicyBuilder::build`].
#[derive(Debug, Clone)]
pub struct RecoveryPolicyBuilder {
    record: PolicyRecord,
}

impl RecoveryPolicyBuilder {
    /// Sets `max_recovery_depth` (default 3; 0 = never auto-fix).
    #[must_use]
    pub fn max_recovery_depth(mut self, depth: u32) -> Self {
        self.record.max_recovery_depth = depth;
        self
    }

    /// Sets `max_total_fix_attempts` (default 10).
    #[must_use]
    pub fn max_total_fix_attempts(mut self, attempts: u32) -> Self {
        self.record.max_total_fix_attempts = attempts;
        self
    }

    /// Sets `max_inner_iterations` (default 50).
    #[must_use]
    pub fn max_inner_iterations(mut self, iterations: u32) -> Self {
        self.record.max_inner_iterations = iterations;
        self
    }

    /// Sets which failures are auto-fixed (default: blockers only).
    #[must_use]
    pub fn recover_on(mut self, recover_on: RecoverOn) -> Self {
        self.record.recover_on = recover_on;
        self
    }

    /// Sets how verdicts are compared for stall detection.
    #[must_use]
    pub fn normalizer(mut self, normalizer: VerdictNormalizer) -> Self {
        self.record.normalizer = normalizer;
        self
    }

    /// Checks and builds the policy.
    ///
    /// # Errors
    ///
    /// [`PolicyError::ZeroIterationCap`], [`PolicyError::ZeroFixBudget`] or
    /// [`PolicyError::DepthTooLarge`].
    pub fn build(self) -> Result<RecoveryPolicy, PolicyError> {
        RecoveryPolicy::try_from(self.record)
    }
}

/// Every setting of a [`RecoveryPolicy`], not yet checked.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PolicyRecord {
    max_recovery_depth: u32,
    max_total_fix_attempts: u32,
    max_inner_iterations: u32,
    recover_on: RecoverOn,
    normalizer: VerdictNormalizer,
}

impl TryFrom<PolicyRecord> for RecoveryPolicy {
    type Error = PolicyError;

    fn try_from(r: PolicyRecord) -> Result<Self, PolicyError> {
        let max_inner_iterations =
            NonZeroU32::new(r.max_inner_iterations).ok_or(PolicyError::ZeroIterationCap)?;
        if r.max_recovery_depth > MAX_RECOVERY_DEPTH {
            return Err(PolicyError::DepthTooLarge {
                depth: r.max_recovery_depth,
                max: MAX_RECOVERY_DEPTH,
            });
        }
        if r.max_recovery_depth > 0 && r.max_total_fix_attempts == 0 {
            return Err(PolicyError::ZeroFixBudget {
                depth: r.max_recovery_depth,
            });
        }
        Ok(Self {
            max_recovery_depth: r.max_recovery_depth,
            max_total_fix_attempts: r.max_total_fix_attempts,
            max_inner_iterations,
            recover_on: r.recover_on,
            normalizer: r.normalizer,
        })
    }
}

impl From<RecoveryPolicy> for PolicyRecord {
    fn from(p: RecoveryPolicy) -> Self {
        Self {
            max_recovery_depth: p.max_recovery_depth,
            max_total_fix_attempts: p.max_total_fix_attempts,
            max_inner_iterations: p.max_inner_iterations.get(),
            recover_on: p.recover_on,
            normalizer: p.normalizer,
        }
    }
}

/// The global fix budget (`max_total_fix_attempts`) of a closure tree.
///
/// Clones share one counter, so several closures of one batch can draw from the same
/// budget, even from several threads. Taking an attempt is atomic: the budget is never
/// overdrawn.
///
/// # Examples
///
/// ```
/// use kleene::closure::FixBudget;
///
/// let batch = FixBudget::new(2);
/// let for_task_a = batch.clone();
/// assert_eq!(for_task_a.remaining(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct FixBudget {
    max: u32,
    used: Arc<AtomicU32>,
}

impl FixBudget {
    /// A budget of `max` fix attempts, none used.
    pub fn new(max: u32) -> Self {
        Self {
            max,
            used: Arc::new(AtomicU32::new(0)),
        }
    }

    /// A budget of `max` with `used` attempts already taken (for example restored from a
    /// batch checkpoint).
    ///
    /// # Errors
    ///
    /// [`PolicyError::BudgetOverdrawn`] when `used > max`.
    pub fn restore(max: u32, used: u32) -> Result<Self, PolicyError> {
        if used > max {
            return Err(PolicyError::BudgetOverdrawn { used, max });
        }
        Ok(Self {
            max,
            used: Arc::new(AtomicU32::new(used)),
        })
    }

    /// The budget's size.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// Attempts taken so far, by every closure sharing the budget.
    pub fn used(&self) -> u32 {
        self.used.load(Ordering::Acquire)
    }

    /// Attempts left.
    pub fn remaining(&self) -> u32 {
        self.max.saturating_sub(self.used())
    }

    /// Takes one attempt; false when none is left.
    pub(crate) fn try_take(&self) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used < self.max).then_some(used + 1)
            })
            .is_ok()
    }
}

/// Two budgets are equal when they have the same size and the same attempts used (whether
/// or not they share a counter).
impl PartialEq for FixBudget {
    fn eq(&self, other: &Self) -> bool {
        self.max == other.max && self.used() == other.used()
    }
}

impl Eq for FixBudget {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_refuses_nonsense_and_accepts_depth_zero() {
        assert_eq!(
            RecoveryPolicy::builder().max_inner_iterations(0).build(),
            Err(PolicyError::ZeroIterationCap)
        );
        assert_eq!(
            RecoveryPolicy::builder().max_total_fix_attempts(0).build(),
            Err(PolicyError::ZeroFixBudget { depth: 3 })
        );
        assert!(matches!(
            RecoveryPolicy::builder().max_recovery_depth(1001).build(),
            Err(PolicyError::DepthTooLarge { .. })
        ));
        let never = RecoveryPolicy::builder()
            .max_recovery_depth(0)
            .max_total_fix_attempts(0)
            .build()
            .unwrap();
        assert_eq!(never.max_recovery_depth(), 0);
        assert_eq!(
            RecoveryPolicy::builder().build(),
            Ok(RecoveryPolicy::default())
        );
    }

    #[test]
    fn shared_budget_is_never_overdrawn() {
        let a = FixBudget::new(3);
        let b = a.clone();
        let taken = std::thread::scope(|s| {
            let ha = s.spawn(|| (0..5).filter(|_| a.try_take()).count());
            let hb = s.spawn(|| (0..5).filter(|_| b.try_take()).count());
            ha.join().unwrap() + hb.join().unwrap()
        });
        assert_eq!(taken, 3);
        assert_eq!(a.remaining(), 0);
        assert_eq!(
            FixBudget::restore(1, 2),
            Err(PolicyError::BudgetOverdrawn { used: 2, max: 1 })
        );
    }
}
