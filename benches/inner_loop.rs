//! One full inner-loop pass (govern + mint token, pre_validate, execute, post_validate,
//! move_next) through kleene's typestate API, against a hand-written enum state machine
//! doing the same work: the same token digest, the same token checks, the same values
//! moved from phase to phase. Report the ratio typestate / enum (target ≤ 1.2).

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use kleene::{
    Task,
    closure::{
        ExecutionOutput, GovernanceDecision, Spec, Verdict, step::Moved, step::Next,
        step::PostValidation, step::RecoverOn, step::Session, step::Step,
    },
    id::{Digest, TaskId},
};
use std::hint::black_box;

fn task() -> Task {
    Task::new(
        TaskId::new("task_X").unwrap(),
        Spec::new("add a /login route").with_criterion("GET /login is 200"),
    )
}

fn typestate_pass(task: Task, session: Session) -> u32 {
    let (step, token) = Step::new(task, session)
        .govern(GovernanceDecision::Approve)
        .unwrap();
    let step = step
        .pre_validate(Verdict::clean())
        .unwrap()
        .execute(token, ExecutionOutput::new("done"))
        .unwrap();
    let PostValidation::Clean(step) = step.post_validate(Verdict::clean(), RecoverOn::Blockers)
    else {
        unreachable!()
    };
    match step.move_next(Next::Complete) {
        Moved::Completed(done) => {
            done.iterations()
                + done.pre_verdict().results().len() as u32
                + done.output().text.len() as u32
                + done.post_verdict().results().len() as u32
        }
        _ => unreachable!(),
    }
}

/// The same digest kleene mints a token with: blake3 derive-key "kleene validation token
/// v1" over length-prefixed session mode, project, task id, then the spec digest, depth and
/// iteration.
fn token_digest(session: &Session, task: &Task, iteration: u32) -> Digest {
    let mut h = blake3::Hasher::new_derive_key("kleene validation token v1");
    for s in [
        session.mode().as_str(),
        session.project().as_str(),
        task.id().as_str(),
    ] {
        h.update(&(s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    }
    h.update(task.spec().digest().as_bytes());
    h.update(&u64::from(task.depth()).to_le_bytes());
    h.update(&u64::from(iteration).to_le_bytes());
    Digest::from(h.finalize())
}

struct EnumToken {
    digest: Digest,
    task_id: TaskId,
    session: Session,
}

enum State {
    Governance,
    PreValidate {
        token: Digest,
    },
    Execute {
        token: Digest,
        pre: Verdict,
    },
    PostValidate {
        pre: Verdict,
        output: ExecutionOutput,
    },
    MoveNext {
        pre: Verdict,
        output: ExecutionOutput,
        post: Verdict,
    },
    Completed {
        pre: Verdict,
        output: ExecutionOutput,
        post: Verdict,
    },
}

enum Input {
    Govern(GovernanceDecision),
    PreValidate(Verdict),
    Execute(EnumToken, ExecutionOutput),
    PostValidate(Verdict, RecoverOn),
    MoveNext(Next),
}

#[derive(Debug)]
enum EnumError {
    WrongPhase,
    Denied,
    Rejected,
    TokenMismatch,
}

struct Machine {
    task: Task,
    session: Session,
    iteration: u32,
    state: State,
}

impl Machine {
    fn step(mut self, input: Input) -> Result<(Machine, Option<EnumToken>), EnumError> {
        let state = std::mem::replace(&mut self.state, State::Governance);
        let (state, minted) = match (state, input) {
            (State::Governance, Input::Govern(GovernanceDecision::Approve)) => {
                let digest = token_digest(&self.session, &self.task, self.iteration);
                let token = EnumToken {
                    digest,
                    task_id: self.task.id().clone(),
                    session: self.session.clone(),
                };
                (State::PreValidate { token: digest }, Some(token))
            }
            (State::Governance, Input::Govern(GovernanceDecision::Deny { .. })) => {
                return Err(EnumError::Denied);
            }
            (State::PreValidate { token }, Input::PreValidate(v)) => {
                if v.worst() == Some(kleene::closure::Severity::Blocker) {
                    return Err(EnumError::Rejected);
                }
                (State::Execute { token, pre: v }, None)
            }
            (State::Execute { token, pre }, Input::Execute(t, output)) => {
                if t.session != self.session || &t.task_id != self.task.id() || t.digest != token {
                    return Err(EnumError::TokenMismatch);
                }
                (State::PostValidate { pre, output }, None)
            }
            (State::PostValidate { pre, output }, Input::PostValidate(v, _recover_on)) => {
                if v.has_non_overridable_blocker()
                    || v.worst() > Some(kleene::closure::Severity::Info)
                {
                    return Err(EnumError::Rejected);
                }
                (
                    State::MoveNext {
                        pre,
                        output,
                        post: v,
                    },
                    None,
                )
            }
            (State::MoveNext { pre, output, post }, Input::MoveNext(Next::Complete)) => {
                (State::Completed { pre, output, post }, None)
            }
            _ => return Err(EnumError::WrongPhase),
        };
        self.state = state;
        Ok((self, minted))
    }
}

fn enum_pass(task: Task, session: Session) -> u32 {
    let m = Machine {
        task,
        session,
        iteration: 1,
        state: State::Governance,
    };
    let (m, token) = m.step(Input::Govern(GovernanceDecision::Approve)).unwrap();
    let (m, _) = m.step(Input::PreValidate(Verdict::clean())).unwrap();
    let token = token.unwrap();
    let (m, _) = m
        .step(Input::Execute(token, ExecutionOutput::new("done")))
        .unwrap();
    let (m, _) = m
        .step(Input::PostValidate(Verdict::clean(), RecoverOn::Blockers))
        .unwrap();
    let (m, _) = m.step(Input::MoveNext(Next::Complete)).unwrap();
    match m.state {
        State::Completed { pre, output, post } => {
            m.iteration
                + pre.results().len() as u32
                + output.text.len() as u32
                + post.results().len() as u32
        }
        _ => unreachable!(),
    }
}

fn bench(c: &mut Criterion) {
    let session = Session::new("build", "demo").unwrap();
    // The baseline computes exactly the digest the crate mints.
    let (_, token) = Step::new(task(), session.clone())
        .govern(GovernanceDecision::Approve)
        .unwrap();
    assert_eq!(token.digest(), token_digest(&session, &task(), 1));

    let mut g = c.benchmark_group("inner_loop_pass");
    g.bench_function("typestate", |b| {
        b.iter_batched(
            || (task(), session.clone()),
            |(t, s)| black_box(typestate_pass(t, s)),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("enum_baseline", |b| {
        b.iter_batched(
            || (task(), session.clone()),
            |(t, s)| black_box(enum_pass(t, s)),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
