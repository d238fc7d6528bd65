//! How an agent classifies its own failures, so a closure and a batch can keep the typed
//! error and still decide what it means.
//!
//! An [`Agent`](crate::closure::Agent)'s error type implements [`AgentError`]; its
//! [`kind`](AgentError::kind) says whether the failure was the agent's infrastructure (a
//! missing tool, a timeout: never handed to a fixer), a cancellation (the call stops and is
//! kept for a resume), or anything else (the closure ends, and the task's call is refused
//! with the failure as its reason).
//!
//! ```
//! use kleene::{closure::AgentError, closure::AgentErrorKind};
//!
//! #[derive(Debug, thiserror::Error)]
//! #[error("the compiler is not installed")]
//! struct NoCompiler;
//!
//! impl AgentError for NoCompiler {
//!     fn kind(&self) -> AgentErrorKind {
//!         AgentErrorKind::Infrastructure
//!     }
//! }
//! assert_eq!(NoCompiler.kind(), AgentErrorKind::Infrastructure);
//! ```

use std::convert::Infallible;

/// What kind of failure an agent reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AgentErrorKind {
    /// The agent's infrastructure failed (a tool is missing, a call timed out). A batch
    /// records it as an infrastructure failure, which is never repaired.
    Infrastructure,
    /// The agent or its caller cancelled the call; a batch stops and keeps the reservation.
    Cancelled,
    /// Any other failure: the closure ends with it, and a batch refuses the call with it.
    Other,
}

/// An agent's error: a real error (its source chain is kept) that says what kind of failure
/// it is.
pub trait AgentError: std::error::Error + Send + Sync + 'static {
    /// What kind of failure this is; [`AgentErrorKind::Other`] unless the agent says more.
    fn kind(&self) -> AgentErrorKind {
        AgentErrorKind::Other
    }
}

impl AgentError for Infallible {}

/// An interrupted operation is a cancellation; every other I/O failure is infrastructure.
impl AgentError for std::io::Error {
    fn kind(&self) -> AgentErrorKind {
        if self.kind() == std::io::ErrorKind::Interrupted {
            AgentErrorKind::Cancelled
        } else {
            AgentErrorKind::Infrastructure
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_are_infrastructure_unless_interrupted() {
        let e = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        assert_eq!(AgentError::kind(&e), AgentErrorKind::Infrastructure);
        let e = std::io::Error::from(std::io::ErrorKind::Interrupted);
        assert_eq!(AgentError::kind(&e), AgentErrorKind::Cancelled);
    }
}
