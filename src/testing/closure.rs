//! A scripted [`Agent`] and proptest strategies for closures (feature `testing`).
//!
//! [`ScriptedAgent`] replays lists of governance decisions, verdicts, outputs and
//! "complete / continue" answers, one per call, and falls back to a passing answer when a
//! list runs out; any entry can instead be a scripted failure of the agent itself. The
//! strategies generate verdicts, policies and whole scripted agents, so a property test can
//! check a closure invariant over arbitrary runs.
//!
//! ```
//! use kleene::testing::closure::ScriptedAgent;
//! use kleene::{closure::run_to_closure, closure::RecoveryPolicy, closure::step::Session, closure::Severity, closure::Spec, Task, id::TaskId,
//!              id::ValidatorId, closure::ValidatorResult, closure::Verdict};
//!
//! let failing = Verdict::new([ValidatorResult::new(
//!     ValidatorId::new("tests")?, Severity::Blocker, true, "test a ... FAILED")]);
//! // The root fails once, its fix passes (the list ran out: clean).
//! let mut agent = ScriptedAgent::new().post_verdicts([failing]);
//! let task = Task::new(TaskId::new("x")?, Spec::new("intent"));
//! let record = run_to_closure(task, Session::new("build", "p")?, &mut agent, &RecoveryPolicy::default());
//! assert_eq!(record.outcome().resolved_depth(), Some(1));
//! assert_eq!(agent.executed_tasks().len(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! In a property test:
//!
//! ```
//! use kleene::testing::closure::{policy, scripted_agent};
//! use kleene::{closure::run_to_closure, closure::step::Session, closure::Spec, Task, id::TaskId};
//! use proptest::prelude::*;
//!
//! proptest!(|(policy in policy(), mut agent in scripted_agent())| {
//!     let task = Task::new(TaskId::new("x").unwrap(), Spec::new("intent"));
//!     let record = run_to_closure(task, Session::new("b", "p").unwrap(), &mut agent, &policy);
//!     prop_assert!(record.fix_attempts() <= policy.max_total_fix_attempts());
//! });
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use proptest::prelude::*;

use crate::{
    closure::Agent, closure::RecoveryPolicy, closure::step::ExecutionOutput,
    closure::step::GovernanceDecision, closure::step::Next, closure::step::RecoverOn,
    closure::step::Session, closure::step::ValidationToken, closure::task::Task,
    closure::verdict::Severity, closure::verdict::ValidatorResult, closure::verdict::Verdict,
    closure::verdict::VerdictNormalizer, id::TaskId, id::ValidatorId,
    testing::completion::CompletionOrder,
};

/// One scripted answer: a reply, or a failure of the agent itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scripted<T> {
    /// The agent answers with this value.
    Reply(T),
    /// The agent fails with this message.
    Fail(String),
}

impl<T> From<T> for Scripted<T> {
    fn from(value: T) -> Self {
        Scripted::Reply(value)
    }
}

/// The error a [`ScriptedAgent`] fails with when its script says so.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("scripted agent failure: {0}")]
pub struct ScriptedFailure(pub String);

impl crate::closure::AgentError for ScriptedFailure {}

/// An [`Agent`] (and, with feature `async`, an [`AsyncAgent`](crate::closure::AsyncAgent))
/// that replays scripted answers, one per call, per phase.
///
/// When a list runs out the agent answers as a passing run would: approve, a clean
/// verdict, an empty output, [`Next::Complete`]. It remembers every task it executed.
///
/// In a plan's run, give each task its own script with [`of_task`](Self::of_task): the
/// closure rooted at that task (its fix subtasks included) answers from it, so the answers
/// do not depend on the order in which tasks run. [`completing_in`](Self::completing_in)
/// makes the async answers of each task's executions wait a scripted number of turns of
/// the executor, so the calls of a `run_async` finish in the order a test chooses. Clones
/// share nothing; several slots share one agent through `Arc<Mutex<ScriptedAgent>>`,
/// which is an agent too.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use kleene::testing::closure::ScriptedAgent;
/// use kleene::{AppBuildPlan, Batch, Verdict, batch::MemoryJournal};
///
/// let plan = AppBuildPlan::from_json(r#"{"tasks": [
///   {"id": "a", "owner": "M", "spec": {"intent": "a"}, "owned_paths": ["a"]},
///   {"id": "b", "owner": "M", "spec": {"intent": "b"}, "owned_paths": ["b"]}]}"#)?.validate()?;
/// // `b` fails its tests once; its fix passes.
/// let fails_once = ScriptedAgent::new().post_verdicts([Verdict::blocker("tests", "red")?]);
/// let agent = Arc::new(Mutex::new(ScriptedAgent::new().of_task("b".parse()?, fails_once)));
/// let batch = Batch::new(&plan, "main".parse()?);
/// let evidence = batch.run_agents(2, |_| agent.clone(), &mut MemoryJournal::default())?.evidence;
/// assert_eq!(evidence.fix_attempts_used(), 1);
/// # Ok::<(), kleene::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct ScriptedAgent {
    any_task: Answers,
    by_root: BTreeMap<TaskId, Answers>,
    executed: Vec<Task>,
    order: CompletionOrder,
}

/// The scripted answers of one closure's phases.
#[derive(Debug, Clone, Default)]
struct Answers {
    governance: VecDeque<Scripted<GovernanceDecision>>,
    pre_verdicts: VecDeque<Scripted<Verdict>>,
    outputs: VecDeque<Scripted<ExecutionOutput>>,
    post_verdicts: VecDeque<Scripted<Verdict>>,
    nexts: VecDeque<Scripted<Next>>,
}

macro_rules! script {
    ($(#[$doc:meta])* $name:ident, $field:ident, $t:ty) => {
        $(#[$doc])*
        #[must_use]
        pub fn $name<I>(mut self, answers: I) -> Self
        where
            I: IntoIterator,
            I::Item: Into<Scripted<$t>>,
        {
            self.any_task.$field.extend(answers.into_iter().map(Into::into));
            self
        }
    };
}

impl ScriptedAgent {
    /// An agent whose every answer passes.
    pub fn new() -> Self {
        Self::default()
    }

    script!(
        /// Appends governance decisions, one per governed iteration.
        governance, governance, GovernanceDecision
    );
    script!(
        /// Appends pre-execute verdicts, one per iteration.
        pre_verdicts, pre_verdicts, Verdict
    );
    script!(
        /// Appends execution outputs, one per iteration.
        outputs, outputs, ExecutionOutput
    );
    script!(
        /// Appends post-execute verdicts, one per iteration.
        post_verdicts, post_verdicts, Verdict
    );
    script!(
        /// Appends "complete / continue" answers, one per clean iteration.
        nexts, nexts, Next
    );

    /// Answers the closures rooted at `root` (the root task and its fix subtasks) from
    /// `script`'s lists instead of this agent's own, so a task's answers are its own
    /// whatever order the tasks of a plan run in. A second script for one root replaces the
    /// first.
    #[must_use]
    pub fn of_task(mut self, root: TaskId, script: ScriptedAgent) -> Self {
        self.by_root.insert(root, script.any_task);
        self
    }

    /// Makes each async execution wait as many turns of the executor as `order` gives its
    /// closure's root task, before it answers (the synchronous [`Agent`] answers at once).
    #[must_use]
    pub fn completing_in(mut self, order: CompletionOrder) -> Self {
        self.order = order;
        self
    }

    /// Every task the agent was asked to execute, in order (one entry per iteration).
    pub fn executed_tasks(&self) -> &[Task] {
        &self.executed
    }

    /// Executes `task` as the synchronous agent does, and says how many turns the async
    /// answer waits.
    #[cfg_attr(not(feature = "async"), allow(dead_code))]
    fn execute_and_wait(
        &mut self,
        task: &Task,
        token: &ValidationToken,
    ) -> (Result<ExecutionOutput, ScriptedFailure>, u32) {
        let answer = Agent::execute(self, task, token);
        (answer, self.order.turns_of(task.root_task_ref()))
    }

    fn answers(&mut self, task: &Task) -> &mut Answers {
        match self.by_root.get_mut(task.root_task_ref()) {
            Some(answers) => answers,
            None => &mut self.any_task,
        }
    }
}

fn answer<T>(queue: &mut VecDeque<Scripted<T>>, default: T) -> Result<T, ScriptedFailure> {
    match queue.pop_front() {
        None => Ok(default),
        Some(Scripted::Reply(v)) => Ok(v),
        Some(Scripted::Fail(message)) => Err(ScriptedFailure(message)),
    }
}

impl Agent for ScriptedAgent {
    type Error = ScriptedFailure;

    fn govern(
        &mut self,
        task: &Task,
        _session: &Session,
        _iteration: u32,
    ) -> Result<GovernanceDecision, ScriptedFailure> {
        answer(
            &mut self.answers(task).governance,
            GovernanceDecision::Approve,
        )
    }

    fn pre_validate(&mut self, task: &Task, _iteration: u32) -> Result<Verdict, ScriptedFailure> {
        answer(&mut self.answers(task).pre_verdicts, Verdict::clean())
    }

    fn execute(
        &mut self,
        task: &Task,
        _token: &ValidationToken,
    ) -> Result<ExecutionOutput, ScriptedFailure> {
        self.executed.push(task.clone());
        answer(&mut self.answers(task).outputs, ExecutionOutput::default())
    }

    fn post_validate(
        &mut self,
        task: &Task,
        _output: &ExecutionOutput,
    ) -> Result<Verdict, ScriptedFailure> {
        answer(&mut self.answers(task).post_verdicts, Verdict::clean())
    }

    fn move_next(&mut self, task: &Task, _iteration: u32) -> Result<Next, ScriptedFailure> {
        answer(&mut self.answers(task).nexts, Next::Complete)
    }
}

/// One scripted agent shared by the slots of a threaded run: each call locks it for one
/// answer.
impl Agent for Arc<Mutex<ScriptedAgent>> {
    type Error = ScriptedFailure;

    fn govern(
        &mut self,
        task: &Task,
        session: &Session,
        iteration: u32,
    ) -> Result<GovernanceDecision, ScriptedFailure> {
        locked(self).govern(task, session, iteration)
    }

    fn pre_validate(&mut self, task: &Task, iteration: u32) -> Result<Verdict, ScriptedFailure> {
        locked(self).pre_validate(task, iteration)
    }

    fn execute(
        &mut self,
        task: &Task,
        token: &ValidationToken,
    ) -> Result<ExecutionOutput, ScriptedFailure> {
        locked(self).execute(task, token)
    }

    fn post_validate(
        &mut self,
        task: &Task,
        output: &ExecutionOutput,
    ) -> Result<Verdict, ScriptedFailure> {
        locked(self).post_validate(task, output)
    }

    fn move_next(&mut self, task: &Task, iteration: u32) -> Result<Next, ScriptedFailure> {
        locked(self).move_next(task, iteration)
    }
}

/// The script behind a shared handle: a panicking test thread leaves it as it was, which is
/// still a script.
pub(crate) fn locked<T>(shared: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(feature = "async")]
mod asynchronous {
    use super::{
        Agent, ExecutionOutput, GovernanceDecision, Next, ScriptedAgent, ScriptedFailure, Session,
        Task, ValidationToken, Verdict, locked,
    };
    use crate::closure::AsyncAgent;
    use crate::testing::completion::turns;
    use std::sync::{Arc, Mutex};

    /// The same answers as the synchronous agent; an execution waits its task's turns.
    impl AsyncAgent for ScriptedAgent {
        type Error = ScriptedFailure;

        async fn govern(
            &mut self,
            task: &Task,
            session: &Session,
            iteration: u32,
        ) -> Result<GovernanceDecision, ScriptedFailure> {
            Agent::govern(self, task, session, iteration)
        }

        async fn pre_validate(
            &mut self,
            task: &Task,
            iteration: u32,
        ) -> Result<Verdict, ScriptedFailure> {
            Agent::pre_validate(self, task, iteration)
        }

        async fn execute(
            &mut self,
            task: &Task,
            token: &ValidationToken,
        ) -> Result<ExecutionOutput, ScriptedFailure> {
            let (answer, wait) = self.execute_and_wait(task, token);
            turns(wait).await;
            answer
        }

        async fn post_validate(
            &mut self,
            task: &Task,
            output: &ExecutionOutput,
        ) -> Result<Verdict, ScriptedFailure> {
            Agent::post_validate(self, task, output)
        }

        async fn move_next(
            &mut self,
            task: &Task,
            iteration: u32,
        ) -> Result<Next, ScriptedFailure> {
            Agent::move_next(self, task, iteration)
        }
    }

    /// One scripted agent shared by the slots of an async run; the lock is never held
    /// across a wait.
    impl AsyncAgent for Arc<Mutex<ScriptedAgent>> {
        type Error = ScriptedFailure;

        async fn govern(
            &mut self,
            task: &Task,
            session: &Session,
            iteration: u32,
        ) -> Result<GovernanceDecision, ScriptedFailure> {
            Agent::govern(&mut *locked(self), task, session, iteration)
        }

        async fn pre_validate(
            &mut self,
            task: &Task,
            iteration: u32,
        ) -> Result<Verdict, ScriptedFailure> {
            Agent::pre_validate(&mut *locked(self), task, iteration)
        }

        async fn execute(
            &mut self,
            task: &Task,
            token: &ValidationToken,
        ) -> Result<ExecutionOutput, ScriptedFailure> {
            // The lock is a temporary of this statement: released before the wait.
            let (answer, wait) = locked(self).execute_and_wait(task, token);
            turns(wait).await;
            answer
        }

        async fn post_validate(
            &mut self,
            task: &Task,
            output: &ExecutionOutput,
        ) -> Result<Verdict, ScriptedFailure> {
            Agent::post_validate(&mut *locked(self), task, output)
        }

        async fn move_next(
            &mut self,
            task: &Task,
            iteration: u32,
        ) -> Result<Next, ScriptedFailure> {
            Agent::move_next(&mut *locked(self), task, iteration)
        }
    }
}

/// Justifications drawn by [`validator_result`]: a few distinct failures, and pairs that
/// differ only by the noise the default [`VerdictNormalizer`] masks (a duration, an
/// address, a thread id), so generated runs both stall and progress.
pub const JUSTIFICATIONS: &[&str] = &[
    "1 failed in 0.53s",
    "1 failed in 0.12s",
    "2 failed in 0.40s",
    "assertion `left == right` failed at src/lib.rs:3:5",
    "thread 'tests::a' (77) panicked at src/lib.rs:9:1",
    "thread 'tests::a' (78) panicked at src/lib.rs:9:1",
    "object at 0x7f00aa panicked",
    "object at 0x7f00bb panicked",
    "",
];

/// Validator ids drawn by [`validator_result`].
pub const VALIDATORS: &[&str] = &["tests", "lint", "types"];

/// A validator result: any of [`VALIDATORS`], any severity, overridable 5 times in 6, a
/// justification from [`JUSTIFICATIONS`].
pub fn validator_result() -> impl Strategy<Value = ValidatorResult> {
    (
        prop::sample::select(VALIDATORS),
        prop_oneof![
            Just(Severity::Info),
            Just(Severity::Warning),
            Just(Severity::Blocker)
        ],
        prop::bool::weighted(5.0 / 6.0),
        prop::sample::select(JUSTIFICATIONS),
    )
        .prop_filter_map("validator ids are valid", |(v, s, o, j)| {
            ValidatorId::new(v)
                .ok()
                .map(|id| ValidatorResult::new(id, s, o, j))
        })
}

/// A verdict of 0 to 3 [`validator_result`]s.
pub fn verdict() -> impl Strategy<Value = Verdict> {
    prop::collection::vec(validator_result(), 0..=3).prop_map(Verdict::new)
}

/// A pre-execute verdict: clean 9 times in 10, otherwise any [`verdict`].
pub fn pre_verdict() -> impl Strategy<Value = Verdict> {
    prop_oneof![9 => Just(Verdict::clean()), 1 => verdict()]
}

/// A governance decision: approval 15 times in 16.
pub fn governance_decision() -> impl Strategy<Value = GovernanceDecision> {
    prop_oneof![
        15 => Just(GovernanceDecision::Approve),
        1 => Just(GovernanceDecision::Deny { reason: "out of scope".into() }),
    ]
}

/// A valid policy: depth 0..=4, a budget of 1..=6 (0 when the depth is 0), 1..=3 inner
/// iterations, either `recover_on`, the default or the exact normaliser.
pub fn policy() -> impl Strategy<Value = RecoveryPolicy> {
    (
        0u32..=4,
        1u32..=6,
        1u32..=3,
        any::<bool>(),
        prop::bool::weighted(0.8),
    )
        .prop_filter_map(
            "the builder accepts the combination",
            |(depth, budget, iterations, warnings, masking)| {
                RecoveryPolicy::builder()
                    .max_recovery_depth(depth)
                    .max_total_fix_attempts(if depth == 0 { 0 } else { budget })
                    .max_inner_iterations(iterations)
                    .recover_on(if warnings {
                        RecoverOn::BlockersAndWarnings
                    } else {
                        RecoverOn::Blockers
                    })
                    .normalizer(if masking {
                        VerdictNormalizer::default()
                    } else {
                        VerdictNormalizer::exact()
                    })
                    .build()
                    .ok()
            },
        )
}

fn scripted<T: std::fmt::Debug + Clone>(
    reply: impl Strategy<Value = T>,
) -> impl Strategy<Value = Scripted<T>> {
    prop_oneof![
        80 => reply.prop_map(Scripted::Reply),
        1 => Just(Scripted::Fail("connection reset by peer".to_owned())),
    ]
}

/// A scripted agent with up to 8 answers per phase: governance decisions, pre-execute
/// verdicts, outputs, post-execute verdicts and "complete / continue" answers, each answer a
/// scripted agent failure 1 time in 81. Post-execute verdicts are drawn from a pool of 1 to
/// 3 [`verdict`]s, so consecutive attempts often repeat a verdict exactly or up to noise
/// (and stall), and as often differ (and progress).
pub fn scripted_agent() -> impl Strategy<Value = ScriptedAgent> {
    (
        prop::collection::vec(scripted(governance_decision()), 0..8),
        prop::collection::vec(scripted(pre_verdict()), 0..8),
        prop::collection::vec(
            scripted("[a-z ]{0,12}".prop_map(ExecutionOutput::new)),
            0..8,
        ),
        prop::collection::vec(verdict(), 1..=3).prop_flat_map(|pool| {
            let n = pool.len();
            prop::collection::vec(scripted(0..n), 0..8).prop_map(move |picks| {
                picks
                    .into_iter()
                    .map(|pick| match pick {
                        Scripted::Reply(i) => Scripted::Reply(pool[i].clone()),
                        Scripted::Fail(m) => Scripted::Fail(m),
                    })
                    .collect::<Vec<_>>()
            })
        }),
        prop::collection::vec(
            scripted(prop_oneof![3 => Just(Next::Complete), 1 => Just(Next::Continue)]),
            0..8,
        ),
    )
        .prop_map(|(g, pre, out, post, next)| {
            ScriptedAgent::new()
                .governance(g)
                .pre_verdicts(pre)
                .outputs(out)
                .post_verdicts(post)
                .nexts(next)
        })
}
