//! One reserved call made away from the batch machine that reserved it: the same
//! [`WorkerCall`] a local driver builds, from the [`Dispatch`] and the inputs fetched for it.
//!
//! A machine in one process (a durable-execution engine's object, say) reserves calls; a
//! worker elsewhere receives each [`Dispatch`], fetches the accepted outputs of the task's
//! transitive prerequisites by digest, and makes the call with any [`Worker`] (a
//! [`ClosureWorker`](super::ClosureWorker) runs exactly the closure it runs under
//! `Batch::run`). Every fix the call draws goes through the caller's `draw`, which must make
//! the draw durable where the run's fix budget is kept before it returns.
//!
//! ```
//! use kleene::batch::{Batch, Candidate, DispatchedCall, Proposal, Worker, WorkerCall,
//!                     WorkerFailure};
//! use kleene::{AppBuildPlan, id::ChannelId, plan::Plan};
//!
//! struct Empty;
//! impl Worker for Empty {
//!     fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
//!         assert_eq!(call.attempt(), 1);
//!         Ok(Candidate::default().into())
//!     }
//! }
//! let plan = Plan::draft(AppBuildPlan::from_json(r#"{"tasks": [{"id": "a",
//!     "kind": {"lane": "config"}, "owner": "sh", "spec": {"intent": "a"}}]}"#)?)
//!     .normalize().consolidate()?.validate()?;
//! let channel = ChannelId::new("remote-1")?;
//! let (mut machine, _started) = Batch::new(&plan, channel.clone()).machine(None)?;
//! let work = machine.reserve(1)?;
//! // … the reservation's events are committed, the dispatch travels to a worker …
//! let call = DispatchedCall { plan: &plan, channel: &channel, dispatch: &work.dispatches[0],
//!                             inputs: &[] };
//! let proposal = call.make(&mut Empty, &mut |_fix| Ok(()))?;
//! assert!(proposal.rejection().is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::cell::RefCell;

use super::candidate::AcceptedOutput;
use super::journal::JournalError;
use super::machine::Dispatch;
use super::reservation::Reservation;
use super::worker::{FixLedger, Inputs, Proposal, Worker, WorkerCall, WorkerFailure};
use crate::id::{ChannelId, TaskId};
use crate::plan::ValidatedPlan;

/// A reserved call and what it needs, to be made away from the machine that reserved it.
#[derive(Debug, Clone, Copy)]
pub struct DispatchedCall<'a> {
    /// The plan the machine runs (the worker's own copy: its digest must be the evidence's).
    pub plan: &'a ValidatedPlan,
    /// The channel the batch runs on.
    pub channel: &'a ChannelId,
    /// The reserved call.
    pub dispatch: &'a Dispatch,
    /// The accepted outputs of every transitive prerequisite of the task, each checked
    /// against the digest it was fetched by ([`AcceptedOutput::verified`]), in the plan's
    /// topological order: what [`WorkerCall::inputs`] hands the worker.
    pub inputs: &'a [(TaskId, AcceptedOutput)],
}

impl DispatchedCall<'_> {
    /// Makes the call with `worker`. Each fix attempt the call draws first calls `draw`,
    /// which must record it durably (and refuse it, with words, when the run's budget is
    /// spent); the fix does not run when it fails, and the call is withdrawn.
    ///
    /// # Errors
    ///
    /// What the worker returns, and [`WorkerFailure::Unavailable`] when the task is not in
    /// the plan or an input the dispatch names is missing from `inputs`: the call was not
    /// made.
    pub fn make<W: Worker + ?Sized>(
        self,
        worker: &mut W,
        draw: &mut dyn FnMut(&TaskId) -> Result<(), String>,
    ) -> Result<Proposal, WorkerFailure> {
        let dispatch = self.dispatch;
        let task = self
            .plan
            .task(dispatch.task())
            .ok_or_else(|| WorkerFailure::Unavailable {
                detail: format!("find task {} in the plan", dispatch.task()),
            })?;
        let mut prerequisites = Vec::with_capacity(dispatch.prerequisites().len());
        for (id, digest) in dispatch.prerequisites() {
            let output = self
                .inputs
                .iter()
                .find(|(given, _)| given == id)
                .map(|(given, output)| (given, output))
                .filter(|(_, output)| output.digest() == *digest)
                .ok_or_else(|| WorkerFailure::Unavailable {
                    detail: format!(
                        "stage call {} of task {}: the accepted output {digest} of its \
                         prerequisite {id} was not given",
                        dispatch.attempt(),
                        dispatch.task()
                    ),
                })?;
            prerequisites.push(output);
        }
        let ledger = RemoteLedger {
            channel: self.channel,
            used: dispatch.fix_attempts_used(),
            draw: RefCell::new(draw),
        };
        worker.call(&WorkerCall {
            channel: self.channel,
            task,
            prerequisites,
            attempt: dispatch.attempt(),
            correction: dispatch.correction(),
            ancestry: Inputs::Given(self.inputs),
            ledger: &ledger,
            // A call made away from the machine was reserved by whoever dispatched it.
            reservation: Reservation::durable(),
        })
    }
}

/// The caller's durable draw of one fix attempt.
type Draw<'d> = dyn FnMut(&TaskId) -> Result<(), String> + 'd;

/// The run's fix ledger kept elsewhere: the budget used when the call was reserved, and the
/// caller's durable draw.
struct RemoteLedger<'a, 'd> {
    channel: &'a ChannelId,
    used: u32,
    draw: RefCell<&'a mut Draw<'d>>,
}

impl FixLedger for RemoteLedger<'_, '_> {
    fn used(&self) -> u32 {
        self.used
    }

    fn draw(&self, fix: &TaskId) -> Result<(), JournalError> {
        // A closure runs on one thread and draws one fix at a time, so the borrow is free.
        let mut draw = self
            .draw
            .try_borrow_mut()
            .map_err(|_| JournalError::Store {
                channel: self.channel.clone(),
                detail: "a fix was drawn while another draw was under way".to_owned(),
                source: None,
            })?;
        (*draw)(fix).map_err(|detail| JournalError::Store {
            channel: self.channel.clone(),
            detail,
            source: None,
        })
    }
}
