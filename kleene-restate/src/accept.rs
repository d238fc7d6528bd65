//! Acceptance of a channel's batch, wherever it ran: the acceptance record and the canonical
//! export that `kleene accept` and `kleene export` make, built from the channel's evidence.
//!
//! ```
//! use kleene::batch::{Batch, MemoryJournal};
//! use kleene_restate::{accept::acceptance, plan::ShellPlan, shell::LocalShellWorker};
//!
//! let plan = ShellPlan::load(r#"{"tasks": [
//!   {"id": "a", "kind": {"lane": "config"}, "owner": "shell", "spec": {"intent": "a"},
//!    "owned_paths": ["a.txt"], "run": "echo a > a.txt"}]}"#)?;
//! let dir = tempfile::tempdir()?;
//! let mut worker = LocalShellWorker::new(&plan, dir.path(), None)?;
//! let batch = Batch::new(plan.plan(), plan.default_channel()?);
//! let evidence = batch.run(&mut worker, &(), &mut MemoryJournal::default())?.evidence;
//! let (record, _snapshot) = acceptance(&plan, &evidence)?;
//! assert_eq!(record.task_results().len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use kleene::acceptance::{AcceptanceError, AcceptanceRecord, BuildBinding, accept};
use kleene::batch::BatchEvidence;
use kleene::snapshot::{Snapshot, SnapshotError};

use crate::plan::ShellPlan;

/// Why a channel's batch could not be accepted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AcceptError {
    /// The evidence does not project to a file set.
    #[error("project the accepted outputs of channel {channel}")]
    Snapshot {
        /// The channel.
        channel: String,
        /// Why.
        #[source]
        source: SnapshotError,
    },
    /// The acceptance check found problems.
    #[error("accept the build of channel {channel}: {}", problems.join("; "))]
    Rejected {
        /// The channel.
        channel: String,
        /// Every problem, in words.
        problems: Vec<String>,
    },
}

/// The acceptance record and file set of `evidence` against `plan`, bound as `kleene accept`
/// binds them (channel, plan digest, evidence version).
///
/// # Errors
///
/// [`AcceptError`] when the file set cannot be projected or the build is not acceptable
/// (a task not accepted, a file outside its task's ownership, a digest mismatch).
pub fn acceptance(
    plan: &ShellPlan,
    evidence: &BatchEvidence,
) -> Result<(AcceptanceRecord, Snapshot), AcceptError> {
    let channel = evidence.channel().to_string();
    let snapshot = Snapshot::from_evidence(evidence).map_err(|source| AcceptError::Snapshot {
        channel: channel.clone(),
        source,
    })?;
    let binding = BuildBinding::new(
        evidence.channel().clone(),
        plan.plan().digest(),
        evidence.evidence_version(),
    );
    let record =
        accept(plan.plan(), evidence, &snapshot, &binding).map_err(|e: AcceptanceError| {
            AcceptError::Rejected {
                channel,
                problems: e.problems().iter().map(ToString::to_string).collect(),
            }
        })?;
    Ok((record, snapshot))
}
