//! The sequential drive's syncer: a thread that starts each deferred reservation's sync as
//! soon as it is written, so the sync runs while the call is staged and its process starts,
//! not only once the call waits for it.
//!
//! Only the sequential drive needs it: the threaded drive's calling thread has nothing else to
//! do once it handed its calls out, and makes the sync itself then (a thread of its own there
//! was measured slower: two slots' commands already keep both CPUs busy).
//!
//! The example is on [`Reservation`].

use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::{Scope, ScopedJoinHandle};

use super::reservation::Reservation;

/// Where the drive sends each reservation whose sync is still due.
pub(super) struct Syncer<'scope> {
    requests: Sender<Reservation>,
    _thread: ScopedJoinHandle<'scope, ()>,
}

impl<'scope> Syncer<'scope> {
    /// A syncer whose thread lives in `scope`, or `None` where no thread can be started (the
    /// sync is then made when the call waits for it, as without a syncer).
    pub(super) fn start<'env>(scope: &'scope Scope<'scope, 'env>) -> Option<Self> {
        let (requests, queue) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("kleene-journal-sync".into())
            .spawn_scoped(scope, move || serve(&queue))
            .ok()?;
        Some(Self {
            requests,
            _thread: thread,
        })
    }

    /// Starts `reservation`'s sync on the syncer's thread (a sync already made or under way
    /// is left as it is).
    pub(super) fn begin(&self, reservation: &Reservation) {
        // A syncer that is gone leaves the sync to whoever waits first.
        let _ = self.requests.send(reservation.clone());
    }
}

/// Makes every reservation sent durable, until the drive drops its syncer.
fn serve(queue: &Receiver<Reservation>) {
    while let Ok(reservation) = queue.recv() {
        reservation.sync_for_driver();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::journal::{JournalError, PendingSync};
    use crate::id::ChannelId;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[test]
    fn a_begun_sync_runs_without_anyone_waiting_and_keeps_its_error_for_the_driver() {
        let channel = ChannelId::new("c").unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let noted = Arc::clone(&ran);
        let fine = Reservation::pending(
            &channel,
            PendingSync::new(move || {
                noted.store(true, Ordering::SeqCst);
                Ok(())
            }),
        );
        let failing = Reservation::pending(
            &channel,
            PendingSync::new(|| {
                Err(JournalError::Io {
                    path: "journal".into(),
                    source: std::io::Error::other("EIO"),
                })
            }),
        );
        std::thread::scope(|scope| {
            let syncer = Syncer::start(scope).unwrap();
            syncer.begin(&fine);
            syncer.begin(&failing);
            // Nobody waits: the syncer's thread makes both.
            for _ in 0..500 {
                if fine.is_durable() && !failing.is_due() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        assert!(ran.load(Ordering::SeqCst) && fine.is_durable());
        let err = failing.complete().unwrap_err();
        assert!(matches!(err, JournalError::Io { .. }), "{err:?}");
    }
}
