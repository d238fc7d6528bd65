//! What still makes an appended commit durable: a sync the writer may run later, on any
//! thread, while it does something that has no effect yet.
//!
//! [`EvidenceJournal::append_deferred`] writes a commit and hands back its sync instead of
//! waiting for it, so the wait can overlap with work that must not be seen before the commit
//! is durable but may start before (a process loading itself, say). A journal whose commits
//! are durable as soon as they are written hands back [`PendingSync::durable`].
//!
//! ```
//! use kleene::batch::journal::{EvidenceJournal, PendingSync};
//! use kleene::batch::MemoryJournal;
//! use kleene::id::ChannelId;
//!
//! let mut journal = MemoryJournal::default();
//! let channel = ChannelId::new("chan-1")?;
//! // Nothing to append: the memory journal's commits are durable when written anyway.
//! let sync: PendingSync = journal.append_deferred(&channel, &mut Vec::new())?;
//! sync.complete()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`EvidenceJournal::append_deferred`]: super::EvidenceJournal::append_deferred

use std::fmt;

use super::error::JournalError;

/// The sync a deferred append still owes: [`complete`](Self::complete) makes the commit
/// durable, or says why it could not. Dropping it without completing leaves the commit as
/// durable as the journal's next sync makes it, which is what a crash does too.
#[must_use = "a commit is not durable until its sync completes"]
pub struct PendingSync(Option<Box<dyn FnOnce() -> Result<(), JournalError> + Send>>);

impl PendingSync {
    /// A commit that is durable already.
    pub fn durable() -> Self {
        Self(None)
    }

    /// A commit that `sync` makes durable; a journal implements
    /// [`append_deferred`](super::EvidenceJournal::append_deferred) with it.
    pub fn new(sync: impl FnOnce() -> Result<(), JournalError> + Send + 'static) -> Self {
        Self(Some(Box::new(sync)))
    }

    /// Whether the commit is durable already, with nothing left to run.
    pub fn is_durable(&self) -> bool {
        self.0.is_none()
    }

    /// Makes the commit durable.
    ///
    /// # Errors
    ///
    /// [`JournalError`] when the store cannot promise durability; the commit may then be
    /// lost in a crash, and nothing that depends on it may go ahead.
    pub fn complete(self) -> Result<(), JournalError> {
        match self.0 {
            Some(sync) => sync(),
            None => Ok(()),
        }
    }
}

impl fmt::Debug for PendingSync {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingSync")
            .field("durable", &self.is_durable())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::ChannelId;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_pending_sync_runs_once_when_completed_and_never_when_durable() {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&runs);
        let sync = PendingSync::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        assert!(!sync.is_durable());
        assert_eq!(
            runs.load(Ordering::SeqCst),
            0,
            "not run before it is completed"
        );
        sync.complete().unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(PendingSync::durable().is_durable());
        PendingSync::durable().complete().unwrap();
    }

    #[test]
    fn a_failed_sync_hands_its_error_back() {
        let channel = ChannelId::new("c").unwrap();
        let failed = PendingSync::new(move || {
            Err(JournalError::Store {
                channel,
                detail: "the disk went away".into(),
                source: None,
            })
        });
        let err = failed.complete().unwrap_err();
        assert!(err.to_string().contains("the disk went away"), "{err}");
    }
}
