//! Bounded batch recovery (opted in with `Batch::with_recovery`): the request that names
//! failed roots, and why a root can be refused.
//!
//! A [`RecoveryRequest`] names roots and an input fingerprint; it never carries task
//! definitions or diagnostics. The runtime recomputes the fingerprint from the evidence it
//! restores, re-checks every root, and grants each eligible root exactly one corrective call.

use std::collections::BTreeSet;

use super::evidence::BatchEvidence;
use crate::id::digest::{CanonicalHasher, canonical_enum};
use crate::{id::TaskId, id::digest::Digest};

/// Why a named root was refused a corrective call. The root stays blocked.
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum IneligibleReason {
    /// The root's inputs differ from those its rejected call saw.
    #[error("its inputs changed since the rejected call")]
    InputsChanged,
    /// There is no retained rejection to correct (the task never failed on its output).
    #[error("no retained rejection exists for it")]
    DiagnosticsMissing,
    /// The root has no call left within `retry_limit + 1`.
    #[error("its call budget is exhausted")]
    BudgetExhausted,
    /// The root already had its corrective call.
    #[error("its corrective call was already consumed")]
    RootAlreadyConsumed,
    /// This very request was already consumed.
    #[error("the request was already consumed")]
    RequestAlreadyConsumed,
    /// The root's last call was reserved and never settled: its effects are unknown.
    #[error("its last call was interrupted and is uncertain")]
    UncertainInterruptedExecution,
    /// The root failed on infrastructure, which is never repairable output.
    #[error("it failed on worker infrastructure")]
    InfrastructureFailure,
    /// The root was accepted; accepted tasks are never called again.
    #[error("it was accepted")]
    AlreadyAccepted,
}

// Each reason's digest tag is the sentence the evidence digest first encoded it as, frozen
// here so that the digests of stored evidence still verify; the message above may be
// reworded freely without moving any digest.
canonical_enum!(IneligibleReason {
    InputsChanged => "its inputs changed since the rejected call",
    DiagnosticsMissing => "no retained rejection exists for it",
    BudgetExhausted => "its call budget is exhausted",
    RootAlreadyConsumed => "its corrective call was already consumed",
    RequestAlreadyConsumed => "the request was already consumed",
    UncertainInterruptedExecution => "its last call was interrupted and is uncertain",
    InfrastructureFailure => "it failed on worker infrastructure",
    AlreadyAccepted => "it was accepted",
});

/// A request to give named failed roots one corrective call each.
///
/// # Examples
///
/// ```no_run
/// # fn demo(evidence: &kleene::batch::BatchEvidence) -> Result<(), Box<dyn std::error::Error>> {
/// use kleene::batch::recovery::RecoveryRequest;
///
/// let roots: Vec<_> = evidence.recovery_roots().cloned().collect();
/// let request = RecoveryRequest::for_roots(evidence, roots);
/// assert_eq!(request.fingerprint(), RecoveryRequest::for_roots(evidence, request.roots().iter().cloned()).fingerprint());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RecoveryRequest {
    roots: BTreeSet<TaskId>,
    fingerprint: Digest,
}

impl RecoveryRequest {
    /// A request for `roots`, fingerprinted against `evidence`: its channel, its plan digest
    /// and each root's input digest at its last settled call.
    pub fn for_roots(evidence: &BatchEvidence, roots: impl IntoIterator<Item = TaskId>) -> Self {
        let roots: BTreeSet<TaskId> = roots.into_iter().collect();
        let fingerprint = fingerprint(evidence, &roots);
        Self { roots, fingerprint }
    }

    /// A request received from elsewhere (for example a policy service), as names and a
    /// fingerprint. The runtime checks the fingerprint before granting anything.
    pub fn from_parts(roots: BTreeSet<TaskId>, fingerprint: Digest) -> Self {
        Self { roots, fingerprint }
    }

    /// The named roots.
    pub fn roots(&self) -> &BTreeSet<TaskId> {
        &self.roots
    }

    /// The input fingerprint, which is also the request's identity.
    pub fn fingerprint(&self) -> Digest {
        self.fingerprint
    }
}

pub(crate) fn fingerprint(evidence: &BatchEvidence, roots: &BTreeSet<TaskId>) -> Digest {
    let mut h = CanonicalHasher::new("batch recovery request");
    h.put(&(evidence.channel(), evidence.plan_digest()))
        .seq(roots.iter().map(|root| {
            let last = evidence.task(root).and_then(|t| t.last_input_digest());
            (root, last)
        }))
        .finish()
}

/// Why a recovery request was refused as a whole (nothing was dispatched or recorded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecoveryError {
    /// The batch did not opt in to bounded batch recovery.
    #[error("recover batch on channel {channel}: it did not opt in to batch recovery")]
    NotEnabled {
        /// The channel.
        channel: crate::id::ChannelId,
    },
    /// The request names no root.
    #[error("recover batch on channel {channel}: the request names no root")]
    NoRoots {
        /// The channel.
        channel: crate::id::ChannelId,
    },
    /// A root is not in the plan's inventory.
    #[error("recover task {task} on channel {channel}: it is not in the batch inventory")]
    UnknownRoot {
        /// The channel.
        channel: crate::id::ChannelId,
        /// The unknown root.
        task: TaskId,
    },
    /// The fingerprint does not match the restored evidence: the request was made for other
    /// evidence, another plan or another channel.
    #[error(
        "recover batch on channel {channel}: request fingerprint {found} does not match the restored evidence ({expected})"
    )]
    StaleFingerprint {
        /// The channel.
        channel: crate::id::ChannelId,
        /// The fingerprint the restored evidence gives.
        expected: Digest,
        /// The request's fingerprint.
        found: Digest,
    },
}
