//! A scripted completion order for async runs: each task's calls wait a chosen number of
//! turns of the executor before they answer, so a test decides which calls in flight finish
//! first.
//!
//! The wait is cooperative (the future wakes itself and returns pending), so it needs no
//! timer and no runtime, and under a single-threaded executor the order is the same every
//! time. [`ScriptedAgent::completing_in`](super::closure::ScriptedAgent::completing_in) and
//! [`ScriptedWorker::completing_in`](super::batch::ScriptedWorker::completing_in) take one;
//! [`completion_order`] generates them for a property test.
//!
//! ```
//! use kleene::testing::completion::CompletionOrder;
//!
//! // `b` answers at once, `a` after 3 turns: with both in flight, `b` finishes first.
//! let order = CompletionOrder::new().waiting("a".parse()?, 3);
//! assert_eq!(order.turns_of(&"a".parse()?), 3);
//! assert_eq!(order.turns_of(&"b".parse()?), 0);
//! # Ok::<(), kleene::Error>(())
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use proptest::prelude::*;

use crate::id::TaskId;

/// How many turns of the executor each task's calls wait before they answer; a task not
/// named answers at once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompletionOrder {
    turns: BTreeMap<TaskId, u32>,
}

impl CompletionOrder {
    /// Every call answers at once.
    pub fn new() -> Self {
        Self::default()
    }

    /// The calls of `task` wait `turns` turns.
    #[must_use]
    pub fn waiting(mut self, task: TaskId, turns: u32) -> Self {
        self.turns.insert(task, turns);
        self
    }

    /// The order in which `tasks` finish when they are all in flight together: the first
    /// answers at once, each next one a turn later than the one before.
    pub fn finishing_in(tasks: impl IntoIterator<Item = TaskId>) -> Self {
        Self {
            turns: tasks.into_iter().zip(0..).collect(),
        }
    }

    /// The turns the calls of `task` wait.
    pub fn turns_of(&self, task: &TaskId) -> u32 {
        self.turns.get(task).copied().unwrap_or(0)
    }
}

/// Every completion order of `tasks`: each task waits 0 to 7 turns, so any of them may
/// finish first, last or together with another.
pub fn completion_order(tasks: Vec<TaskId>) -> impl Strategy<Value = CompletionOrder> {
    let n = tasks.len();
    prop::collection::vec(0u32..8, n).prop_map(move |turns| CompletionOrder {
        turns: tasks.iter().cloned().zip(turns).collect(),
    })
}

/// Waits `n` turns of the executor: pending `n` times, waking itself each time.
#[cfg_attr(not(feature = "async"), allow(dead_code))]
pub(crate) fn turns(n: u32) -> Turns {
    Turns(n)
}

/// The future [`turns`] returns.
#[derive(Debug)]
pub(crate) struct Turns(u32);

impl Future for Turns {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 == 0 {
            return Poll::Ready(());
        }
        self.0 -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_of_n_turns_is_pending_n_times() {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut wait = turns(2);
        assert!(Pin::new(&mut wait).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut wait).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut wait).poll(&mut cx).is_ready());
    }

    #[test]
    fn finishing_in_gives_each_next_task_one_more_turn() -> Result<(), crate::Error> {
        let order = CompletionOrder::finishing_in(["c".parse()?, "a".parse()?]);
        assert_eq!(order.turns_of(&"c".parse()?), 0);
        assert_eq!(order.turns_of(&"a".parse()?), 1);
        Ok(())
    }
}
