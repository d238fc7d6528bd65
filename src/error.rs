//! One error type for callers who would rather not name each module's own, and a way to
//! print an error with every cause behind it.
//!
//! Each module owns the error enum of its concern ([`PlanLoadError`], [`BatchError`],
//! [`VerifyError`], …) and that is what its functions return. Every one of them converts into
//! [`Error`] with `?`, so an application can use one `Result<T, kleene::Error>` across plan
//! loading, batch runs and export, and still match the concern when it needs to.
//!
//! Messages chain: an error's own message says what failed, and
//! [`source`](std::error::Error::source) carries why, without the message repeating it.
//! [`Chain`] prints the whole chain on one line, each cause after a `": "`.
//!
//! ```
//! use kleene::error::{Chain, Error};
//! use kleene::{AppBuildPlan, ValidatedPlan};
//!
//! fn load(json: &str) -> Result<ValidatedPlan, Error> {
//!     Ok(AppBuildPlan::from_json(json)?.validate()?)
//! }
//!
//! let err = load(r#"{"tasks": [{"id": "a", "owner": "o", "spec": {"intent": "x"},
//!                   "depends_on": ["b"]}]}"#).unwrap_err();
//! assert!(matches!(err, Error::PlanValidation(_)));
//! println!("failed to {}", Chain(&err));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub use crate::text::Chain;

use crate::acceptance::{
    AcceptanceError, ExportError, ManifestError, RecordError, SignedError, VerifyError,
};
use crate::batch::{
    BatchError, WorkerFailure, evidence::FoldError, journal::JournalError, recovery::RecoveryError,
    worker::InfrastructureFailure,
};
use crate::checkpoint::CheckpointError;
use crate::closure::audit::AuditError;
use crate::closure::step::{Halt, TokenError, TokenRejected};
use crate::closure::task::TaskError;
use crate::closure::{AgentError, AgentErrorKind};
use crate::closure::{machine::ClosureStateError, policy::PolicyError};
use crate::id::IdError;
use crate::id::digest::DigestParseError;
use crate::plan::path::{GlobError, PathError};
use crate::plan::{ModuleNameError, PlanLoadError, PlanValidationError};
use crate::signing::{KeyError, SignatureError};
use crate::snapshot::{RepairError, SnapshotError};
#[cfg(unix)]
use crate::stage::StageError;

/// Any error kleene returns, by the concern it comes from.
///
/// Each variant is transparent: its message and its [`source`](std::error::Error::source)
/// are those of the error it holds, so wrapping adds nothing to print and loses nothing to
/// match on. Its `Debug` is the whole chain on one line, as [`Chain`] prints it, so a
/// `fn main() -> Result<(), kleene::Error>` that fails prints what failed and why:
///
/// ```
/// use kleene::batch::FileJournal;
///
/// let err = kleene::Error::from(FileJournal::open("/dev/null/state").unwrap_err());
/// // What failed, then why.
/// let printed = format!("{err:?}");
/// assert!(printed.starts_with("access journal at /dev/null/state: "), "{printed}");
/// ```
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An id was refused.
    #[error(transparent)]
    Id(#[from] IdError),
    /// A digest did not parse.
    #[error(transparent)]
    Digest(#[from] DigestParseError),
    /// A path was not admitted.
    #[error(transparent)]
    Path(#[from] PathError),
    /// A path glob was refused.
    #[error(transparent)]
    Glob(#[from] GlobError),
    /// A task could not be built.
    #[error(transparent)]
    Task(#[from] TaskError),
    /// An execution token was refused.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// A step refused its execution token and was given back.
    #[error(transparent)]
    TokenRejected(#[from] TokenRejected),
    /// A checkpoint did not encode or decode.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// An audit log does not verify.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// A recovery policy or fix budget was refused.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// A task halted in a step of the inner loop (the typestate
    /// [`Step`](crate::closure::step::Step) returns it).
    #[error(transparent)]
    Halt(#[from] Halt),
    /// A persisted closure state was refused.
    #[error(transparent)]
    ClosureState(#[from] ClosureStateError),
    /// A module name was refused.
    #[error(transparent)]
    ModuleName(#[from] ModuleNameError),
    /// A plan did not load.
    #[error(transparent)]
    PlanLoad(#[from] PlanLoadError),
    /// A plan did not validate.
    #[error(transparent)]
    PlanValidation(#[from] PlanValidationError),
    /// A batch could not be dispatched, resumed or recovered.
    #[error(transparent)]
    Batch(#[from] BatchError),
    /// A journal could not be read or written.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// Evidence events did not fold.
    #[error(transparent)]
    Fold(#[from] FoldError),
    /// A recovery request was refused.
    #[error(transparent)]
    Recovery(#[from] RecoveryError),
    /// A worker call produced no candidate.
    #[error(transparent)]
    Worker(#[from] WorkerFailure),
    /// A worker's infrastructure failed.
    #[error(transparent)]
    Infrastructure(#[from] InfrastructureFailure),
    /// A snapshot could not be made.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// A repair was refused.
    #[error(transparent)]
    Repair(#[from] RepairError),
    /// A build was not accepted.
    #[error(transparent)]
    Acceptance(#[from] AcceptanceError),
    /// An acceptance record does not hold together.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// A file manifest was refused.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A snapshot could not be exported.
    #[error(transparent)]
    Export(#[from] ExportError),
    /// An archive failed verification.
    #[error(transparent)]
    Verify(#[from] VerifyError),
    /// Signed acceptance was refused.
    #[error(transparent)]
    Signed(#[from] SignedError),
    /// A key file was refused, or a key could not be made.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// A signature envelope was refused.
    #[error(transparent)]
    Signature(#[from] SignatureError),
    /// A staged workspace could not be prepared or read.
    #[cfg(unix)]
    #[error(transparent)]
    Stage(#[from] StageError),
}

/// kleene's own error, so an agent that builds ids, paths or verdicts with kleene's
/// constructors can return their errors with `?`. A wrapped worker or batch failure keeps
/// its kind (a cancellation stays a cancellation, an infrastructure failure stays one);
/// anything else (an id or a path refused) is [`AgentErrorKind::Other`]: the closure ends
/// with it.
impl AgentError for Error {
    fn kind(&self) -> AgentErrorKind {
        use crate::batch::WorkerFailure;
        match self {
            Error::Worker(WorkerFailure::Cancelled) => AgentErrorKind::Cancelled,
            Error::Worker(WorkerFailure::Agent(failure)) => failure.kind(),
            Error::Worker(WorkerFailure::Infrastructure(_) | WorkerFailure::Unavailable { .. })
            | Error::Infrastructure(_) => AgentErrorKind::Infrastructure,
            Error::Batch(error) if error.is_cancelled() => AgentErrorKind::Cancelled,
            _ => AgentErrorKind::Other,
        }
    }
}

impl std::fmt::Debug for Error {
    /// The whole chain, so `main`'s `?` and `unwrap` say why, not only what.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", Chain(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kleene_errors_keep_a_wrapped_failure_kind() {
        use crate::batch::WorkerFailure;
        let refused = crate::Error::from(crate::id::TaskId::new("").unwrap_err());
        assert_eq!(AgentError::kind(&refused), AgentErrorKind::Other);
        let cancelled = crate::Error::from(WorkerFailure::Cancelled);
        assert_eq!(AgentError::kind(&cancelled), AgentErrorKind::Cancelled);
        let down = crate::Error::from(WorkerFailure::Unavailable {
            detail: "disk full".into(),
        });
        assert_eq!(AgentError::kind(&down), AgentErrorKind::Infrastructure);
    }
}
