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

use std::fmt;

use crate::acceptance::{
    AcceptanceError, ExportError, ManifestError, RecordError, SignedError, VerifyError,
};
use crate::audit::AuditError;
use crate::batch::{
    BatchError, FoldError, InfrastructureFailure, JournalError, RecoveryError, WorkerFailure,
};
use crate::checkpoint::CheckpointError;
use crate::closure::{ClosureStateError, PolicyError};
use crate::digest::DigestParseError;
use crate::id::IdError;
use crate::path::{GlobError, PathError};
use crate::phase::{TokenError, TokenRejected};
use crate::plan::{ModuleNameError, PlanLoadError, PlanValidationError};
use crate::signing::{KeyError, SignatureError};
use crate::snapshot::{RepairError, SnapshotError};
#[cfg(unix)]
use crate::stage::StageError;
use crate::task::TaskError;

/// Any error kleene returns, by the concern it comes from.
///
/// Each variant is transparent: its message and its [`source`](std::error::Error::source)
/// are those of the error it holds, so wrapping adds nothing to print and loses nothing to
/// match on.
#[derive(Debug, thiserror::Error)]
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

/// An error and every cause behind it, printed on one line: the error's message, then each
/// [`source`](std::error::Error::source) after a `": "`.
///
/// kleene's messages read after "failed to …" and never repeat their cause, so the chain
/// reads as one sentence:
///
/// ```
/// use kleene::error::Chain;
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("read the plan file")]
/// struct ReadPlan(#[source] std::io::Error);
///
/// let err = ReadPlan(std::io::Error::other("disk on fire"));
/// assert_eq!(Chain(&err).to_string(), "read the plan file: disk on fire");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(err) = cause {
            write!(f, ": {err}")?;
            cause = err.source();
        }
        Ok(())
    }
}

/// A text from outside the crate (a path as given, an entry name, a payload type) shown in
/// double quotes, with quotes, backslashes and every character that is not printable
/// (control characters, bidirectional overrides) escaped, so a message can never be made to
/// read as something else. It prints what `{:?}` prints for a `str`, on purpose and in
/// writing, rather than through a `Debug` implementation that is free to change.
pub(crate) struct Quoted<'a>(pub(crate) &'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        for c in self.0.chars() {
            // A single quote needs no escape inside double quotes.
            if c == '\'' {
                f.write_str("'")?;
            } else {
                write!(f, "{}", c.escape_debug())?;
            }
        }
        f.write_str("\"")
    }
}

/// A character from outside the crate in single quotes, escaped like [`Quoted`].
pub(crate) struct QuotedChar(pub(crate) char);

/// `text` as [`Quoted`] shows it.
pub(crate) fn quoted(text: &(impl AsRef<str> + ?Sized)) -> Quoted<'_> {
    Quoted(text.as_ref())
}

/// `c` as [`QuotedChar`] shows it.
pub(crate) fn quoted_char(c: &char) -> QuotedChar {
    QuotedChar(*c)
}

impl fmt::Display for QuotedChar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == '"' {
            f.write_str("'\"'")
        } else {
            write!(f, "'{}'", self.0.escape_debug())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The quoting is exactly what `{:?}` gives for every text, so messages that used it
        /// read as before.
        #[test]
        fn quoting_matches_the_debug_form(text in any::<String>(), c in any::<char>()) {
            prop_assert_eq!(Quoted(&text).to_string(), format!("{text:?}"));
            prop_assert_eq!(QuotedChar(c).to_string(), format!("{c:?}"));
        }
    }

    #[test]
    fn chain_joins_every_cause() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] Middle);
        #[derive(Debug, thiserror::Error)]
        #[error("middle")]
        struct Middle(#[source] std::io::Error);
        let err = Outer(Middle(std::io::Error::other("inner")));
        assert_eq!(Chain(&err).to_string(), "outer: middle: inner");
    }
}
