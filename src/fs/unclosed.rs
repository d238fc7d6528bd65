//! Descriptors whose close would make this process wait, left for a process about to end to
//! close instead.
//!
//! Closing an inotify instance that still watches something waits for the kernel to free its
//! watches (a grace period: 5 to 20 ms on the machines measured), and a run closes one for
//! each of its slots as it ends. A stage's tracker leaves a copy of its instance here as it is
//! dropped, so its own close is instant; a contained host takes the copies as it is stopped,
//! and its exit pays the wait, which nothing of kleene's waits for.
//!
//! ```text
//! unclosed::leave(copy);         // the tracker, as it is dropped
//! let fds = unclosed::take();    // the host, as it is stopped: sent to it, then dropped
//! ```

use std::os::fd::OwnedFd;
use std::sync::{Mutex, PoisonError};

/// At most this many are kept; past it, a copy closes at once (as every close did before).
pub(crate) const MAX: usize = 8;

static UNCLOSED: Mutex<Vec<OwnedFd>> = Mutex::new(Vec::new());

/// Keeps `fd` for a process about to end to close, where fewer than [`MAX`] are kept (and a
/// contained host can ever take it); closes it at once otherwise.
pub(crate) fn leave(fd: OwnedFd) {
    if !cfg!(feature = "process") {
        return;
    }
    let mut unclosed = UNCLOSED.lock().unwrap_or_else(PoisonError::into_inner);
    if unclosed.len() < MAX {
        unclosed.push(fd);
    }
}

/// Takes every descriptor kept so far; dropping them closes them as before.
#[cfg_attr(not(feature = "process"), allow(dead_code))]
pub(crate) fn take() -> Vec<OwnedFd> {
    std::mem::take(&mut *UNCLOSED.lock().unwrap_or_else(PoisonError::into_inner))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Other tests' trackers leave copies too, at any moment: the list is full whoever
    // filled it.
    #[test]
    fn at_most_max_are_kept() {
        for _ in 0..MAX + 3 {
            leave(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
        }
        let kept = take();
        assert_eq!(kept.len(), if cfg!(feature = "process") { MAX } else { 0 });
    }
}
