//! A call's reservation as its worker sees it: durable already, or being made durable while
//! the call prepares.
//!
//! Every call's reservation is durable before anything the call does can be seen: after a
//! crash, the journal says the call may have started. A worker that says it waits for it
//! ([`Worker::waits_for_reservation`]) gets its call while the sync is still under way, so
//! what it does first and without effect (start a process that waits before it runs a line)
//! overlaps with the sync; it calls [`Reservation::wait_durable`] before the call may have
//! any effect. Every other worker gets its call once the reservation is durable.
//!
//! ```
//! use std::collections::BTreeMap;
//! use kleene::batch::{Batch, Candidate, MemoryJournal, Proposal, Worker, WorkerCall,
//!                     WorkerFailure};
//! use kleene::{plan::AdmittedPath, AppBuildPlan, id::ChannelId, plan::Plan};
//!
//! /// Makes its file only once the journal says the call may have started.
//! struct Careful;
//! impl Worker for Careful {
//!     fn waits_for_reservation(&self) -> bool {
//!         true
//!     }
//!     fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
//!         // … what has no effect yet, while the reservation syncs …
//!         call.reservation().wait_durable().map_err(|e| WorkerFailure::Unavailable {
//!             detail: e.to_string(),
//!         })?;
//!         let file = AdmittedPath::admit("a.toml").unwrap();
//!         Ok(Candidate::new(BTreeMap::from([(file, b"x".to_vec())])).into())
//!     }
//! }
//!
//! let plan = Plan::draft(AppBuildPlan::from_json(r#"{"tasks": [
//!   {"id": "a", "kind": {"lane": "config"}, "owner": "A", "spec": {"intent": "a"},
//!    "owned_paths": ["a.toml"]}]}"#)?)
//!     .normalize().consolidate()?.validate()?;
//! let outcome = Batch::new(&plan, ChannelId::new("chan-1")?)
//!     .run(&mut Careful, &(), &mut MemoryJournal::default())?;
//! assert!(outcome.evidence.summary().is_complete());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`Worker::waits_for_reservation`]: super::Worker::waits_for_reservation

use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use super::journal::{JournalError, PendingSync};
use crate::id::ChannelId;
use crate::text::Chain;

/// A call's reservation: [`wait_durable`](Self::wait_durable) returns once the journal holds
/// it durably. Cheap to clone; every clone waits for the same sync.
#[derive(Clone)]
pub struct Reservation(Option<Arc<Syncing>>);

/// A reservation's sync, shared by the call (or calls of one commit) and the driver: whoever
/// waits first runs it, the others wait for its end.
struct Syncing {
    channel: ChannelId,
    state: Mutex<State>,
    ended: Condvar,
}

enum State {
    /// Not started: the first to wait (or the drive's syncer) runs it.
    Due(PendingSync),
    /// Running on another thread.
    Running,
    Durable,
    /// Failed: the error for the driver (the first to ask), and its text for every waiter.
    Failed {
        error: Option<JournalError>,
        detail: String,
    },
}

impl Reservation {
    /// A reservation that is durable already.
    pub(crate) fn durable() -> Self {
        Self(None)
    }

    /// A reservation of `channel` that `sync` makes durable.
    pub(crate) fn pending(channel: &ChannelId, sync: PendingSync) -> Self {
        if sync.is_durable() {
            return Self::durable();
        }
        Self(Some(Arc::new(Syncing {
            channel: channel.clone(),
            state: Mutex::new(State::Due(sync)),
            ended: Condvar::new(),
        })))
    }

    /// Whether the reservation is durable already (no wait needed).
    pub fn is_durable(&self) -> bool {
        self.0
            .as_ref()
            .is_none_or(|s| matches!(*s.lock(), State::Durable))
    }

    /// Waits until the reservation is durable, making it so if nobody has started to.
    ///
    /// # Errors
    ///
    /// [`JournalError`] when the journal could not make it durable: the call must then have
    /// no effect at all, and the run stops with the journal's error.
    pub fn wait_durable(&self) -> Result<(), JournalError> {
        self.settle(false)
    }

    /// [`wait_durable`](Self::wait_durable) for the driver, which stops the run with the
    /// journal's own error (its type and source), not a copy of its text.
    pub(crate) fn complete(&self) -> Result<(), JournalError> {
        self.settle(true)
    }

    /// Makes the reservation durable if its sync is still due, keeping a failure's own
    /// error for [`complete`](Self::complete): what the sequential drive's syncer does, on a
    /// thread of its own, as soon as the reservation is written.
    pub(crate) fn sync_for_driver(&self) {
        if let Some(syncing) = &self.0 {
            let due = State::start(&mut syncing.lock());
            if let Some(sync) = due {
                let _ = syncing.run(sync, true);
            }
        }
    }

    /// Whether nobody has started the sync yet.
    #[cfg(test)]
    pub(crate) fn is_due(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|s| matches!(*s.lock(), State::Due(_)))
    }

    fn settle(&self, take_error: bool) -> Result<(), JournalError> {
        let Some(syncing) = &self.0 else {
            return Ok(());
        };
        let mut state = syncing.lock();
        loop {
            match &mut *state {
                State::Durable => return Ok(()),
                State::Failed { error, detail } => {
                    let kept = if take_error { error.take() } else { None };
                    return Err(kept.unwrap_or_else(|| syncing.failed(detail)));
                }
                State::Running => {
                    state = syncing
                        .ended
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                State::Due(_) => {
                    let due = State::start(&mut state);
                    drop(state);
                    // Due a moment ago under the same lock, so `due` holds the sync.
                    return due.map_or(Ok(()), |sync| syncing.run(sync, false));
                }
            }
        }
    }
}

impl State {
    /// Takes the sync out of a `Due` state, which is `Running` from then on; any other state
    /// is left as it is.
    fn start(state: &mut State) -> Option<PendingSync> {
        match std::mem::replace(state, State::Running) {
            State::Due(sync) => Some(sync),
            other => {
                *state = other;
                None
            }
        }
    }
}

impl Syncing {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `sync`, taken by [`State::start`], then tells every waiter how it ended. A
    /// failure's own error goes to the caller, or is kept for the driver when `keep_error`.
    fn run(&self, sync: PendingSync, keep_error: bool) -> Result<(), JournalError> {
        let synced = sync.complete();
        let mut state = self.lock();
        let result = match synced {
            Ok(()) => {
                *state = State::Durable;
                Ok(())
            }
            Err(err) => {
                let detail = Chain(&err).to_string();
                let (error, returned) = if keep_error {
                    (Some(err), self.failed(&detail))
                } else {
                    (None, err)
                };
                *state = State::Failed { error, detail };
                Err(returned)
            }
        };
        self.ended.notify_all();
        result
    }

    /// A failed sync's error, in words, for every waiter but the one that gets it itself.
    fn failed(&self, detail: &str) -> JournalError {
        JournalError::Store {
            channel: self.channel.clone(),
            detail: format!("make a call's reservation durable: {detail}"),
            source: None,
        }
    }
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("durable", &self.is_durable())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn channel() -> ChannelId {
        ChannelId::new("c").unwrap()
    }

    #[test]
    fn the_first_waiter_syncs_and_every_other_waits_for_it() {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&runs);
        let reservation = Reservation::pending(
            &channel(),
            PendingSync::new(move || {
                std::thread::sleep(Duration::from_millis(50));
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }),
        );
        assert!(!reservation.is_durable());
        std::thread::scope(|scope| {
            for _ in 0..4 {
                let reservation = reservation.clone();
                let runs = Arc::clone(&runs);
                scope.spawn(move || {
                    reservation.wait_durable().unwrap();
                    // Nobody returns before the one sync ended.
                    assert_eq!(runs.load(Ordering::SeqCst), 1);
                });
            }
        });
        reservation.complete().unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 1, "synced once");
        assert!(reservation.is_durable());
    }

    #[test]
    fn a_failed_sync_fails_every_waiter_and_only_one_gets_the_error_itself() {
        let reservation = Reservation::pending(
            &channel(),
            PendingSync::new(|| {
                Err(JournalError::Io {
                    path: "journal".into(),
                    source: std::io::Error::other("EIO"),
                })
            }),
        );
        let first = reservation.wait_durable().unwrap_err();
        assert!(matches!(first, JournalError::Io { .. }), "{first:?}");
        let later = reservation.wait_durable().unwrap_err();
        assert!(
            later
                .to_string()
                .contains("durable: access journal at journal: EIO"),
            "{later}"
        );
        assert!(!reservation.is_durable());
    }

    #[test]
    fn a_durable_reservation_never_waits() {
        assert!(Reservation::durable().is_durable());
        Reservation::durable().wait_durable().unwrap();
        let already = Reservation::pending(&channel(), PendingSync::durable());
        assert!(already.is_durable());
    }
}
