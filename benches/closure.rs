//! Closure overhead and recovery-spec rendering.
//!
//! - `closure_3_fixes`: a closure whose root and first two fixes fail and whose third fix
//!   passes, driven by `run_to_closure` over a no-op agent, against a hand-written loop
//!   that calls the same agent through the typed `Step` API and spawns plain fix tasks
//!   (no normalisation, no rendered spec, no audit, no record). Target: ≤ 1.5×.
//!   `hand_written_loop_with_audit` adds a hash-chained audit log (three events per
//!   iteration); `hand_written_equivalent` does by hand everything the closure does besides
//!   the machine (every phase audited, stall comparison, rendered specs, tasks and verdicts
//!   kept), so the ratio to it is the machine's own overhead.
//! - `render_recovery_spec`: depth 3 with 4 KiB tails, and depths 1..=10 (one 4 KiB failure
//!   per attempt) to show linear growth.
//! - `persist_every_step_3_fixes`: the LangGraph peer workload (the same 3-fix closure, every
//!   state persisted into an in-memory store): `whole_state` encodes `Closure::state` each
//!   step, `incremental` appends each step's `ClosureDelta` (built, encoded, copied into the
//!   store), `incremental_in_place` encodes each step's delta straight from the audit log
//!   into the store (`Closure::encode_step_delta_into`); `restore_from_store` reads the
//!   store back and folds it. LangGraph 1.2.24 with `InMemorySaver` takes 10.6–19.5 ms on
//!   this machine (`benches/peer/langgraph_closure.py` is that workload).
//! - `interleaved_3_fixes` (printed after criterion's groups, or alone with the filter
//!   `interleaved`): the bare loop, `run_to_closure`, persisting every step and the
//!   hand-written equivalent timed in turn over 40 rounds, so the ratios compare runs made
//!   under the same load.
//! - `persist_by_depth_4KiB_tails`: closures resolving at depth 1..=10 whose failures carry
//!   4 KiB tails, persisted every step: `closure_only` (no persistence), `whole_state`
//!   (quadratic: each step re-encodes everything before it) and `incremental` (each step
//!   appends what it added).

use std::convert::Infallible;
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use kleene::{
    Agent, Task, checkpoint,
    closure::Closure,
    closure::audit::{AuditEvent, AuditLog},
    closure::{
        ClosureRecord, ExecutionOutput, GovernanceDecision, RecoveryPolicy, Severity, Spec,
        ValidatorResult, Verdict, machine::ClosureDelta, render_recovery_spec, run_to_closure,
        step::Moved, step::Next, step::PostValidation, step::RecoverOn, step::Session, step::Step,
        step::ValidationToken, task::FailureEntry,
    },
    id::{TaskId, ValidatorId},
};

/// Approves, passes pre-validation, "executes" nothing, and fails post-validation with a
/// distinct blocker (one line, or a 4 KiB tail) until `failures` attempts have failed.
struct NoopAgent {
    failures: u32,
    post_calls: u32,
    tests: ValidatorId,
    tails: bool,
}

impl NoopAgent {
    fn new(failures: u32) -> Self {
        Self {
            failures,
            post_calls: 0,
            tests: ValidatorId::new("tests").unwrap(),
            tails: false,
        }
    }

    /// Fails with a 4 KiB test-output tail instead of one line.
    fn with_tails(failures: u32) -> Self {
        Self {
            tails: true,
            ..Self::new(failures)
        }
    }
}

impl Agent for NoopAgent {
    type Error = Infallible;

    fn govern(&mut self, _: &Task, _: &Session, _: u32) -> Result<GovernanceDecision, Infallible> {
        Ok(GovernanceDecision::Approve)
    }

    fn pre_validate(&mut self, _: &Task, _: u32) -> Result<Verdict, Infallible> {
        Ok(Verdict::clean())
    }

    fn execute(&mut self, _: &Task, _: &ValidationToken) -> Result<ExecutionOutput, Infallible> {
        Ok(ExecutionOutput::default())
    }

    fn post_validate(&mut self, _: &Task, _: &ExecutionOutput) -> Result<Verdict, Infallible> {
        let n = self.post_calls;
        self.post_calls += 1;
        Ok(if n < self.failures {
            let justification = if self.tails {
                tail(n)
            } else {
                format!("test t{n} ... FAILED")
            };
            Verdict::new([ValidatorResult::new(
                self.tests.clone(),
                Severity::Blocker,
                true,
                justification,
            )])
        } else {
            Verdict::clean()
        })
    }
}

/// What a user would write without kleene's closure: the same agent calls through the
/// typed inner loop, and a plain fix task per failure.
fn hand_written_loop(
    root: Task,
    session: &Session,
    agent: &mut NoopAgent,
    mut audit: Option<&mut AuditLog>,
) -> Option<u32> {
    let root_id = root.id().clone();
    let mut task = root;
    for depth in 0..=3u32 {
        let step = Step::new(task.clone(), session.clone());
        let decision = agent.govern(&task, session, 1).ok()?;
        let (step, token) = step.govern(decision).ok()?;
        let pre = agent.pre_validate(&task, 1).ok()?;
        let step = step.pre_validate(pre).ok()?;
        let output = agent.execute(&task, &token).ok()?;
        let step = step.execute(token, output).ok()?;
        let post = agent.post_validate(&task, step.output()).ok()?;
        if let Some(log) = audit.as_deref_mut() {
            // The same events kleene's closure audits for one iteration.
            let task_ref = task.id().clone();
            log.append(AuditEvent::Governed {
                task_ref: task_ref.clone(),
                iteration: 1,
                decision: GovernanceDecision::Approve,
                token: None,
            });
            log.append(AuditEvent::PreValidated {
                task_ref: task_ref.clone(),
                iteration: 1,
                verdict: Verdict::clean(),
            });
            log.append(AuditEvent::PostValidated {
                task_ref,
                iteration: 1,
                verdict: post.clone(),
            });
        }
        match step.post_validate(post, RecoverOn::Blockers) {
            PostValidation::Clean(step) => {
                return match step.move_next(Next::Complete) {
                    Moved::Completed(_) => Some(depth),
                    _ => None,
                };
            }
            PostValidation::Recoverable(r) => {
                let id = root_id.fix_id(depth + 1).ok()?;
                let failures: Vec<_> = r
                    .verdict
                    .failures()
                    .map(|f| f.justification.clone())
                    .collect();
                task = Task::new(id, Spec::new(failures.join("\n")));
            }
            PostValidation::Halted(_) => return None,
        }
    }
    None
}

/// The same loop doing by hand what the closure does besides driving the machine: audit
/// every phase in a hash-chained log, compare normalised verdicts for stalls, render each
/// fix's spec from the root spec and every failure so far, and keep each task with its
/// verdicts. What remains between this and `run_to_closure` is the machine itself.
fn hand_written_equivalent(
    root: Task,
    session: &Session,
    agent: &mut NoopAgent,
    policy: &RecoveryPolicy,
) -> (Option<u32>, AuditLog, Vec<(Task, Verdict)>) {
    let mut log = AuditLog::new();
    let mut tasks = Vec::new();
    let mut failures: Vec<FailureEntry> = Vec::new();
    let mut previous = None;
    let root_spec = root.spec().clone();
    let root_id = root.id().clone();
    log.append(AuditEvent::ClosureStarted {
        root_task_ref: root_id.clone(),
        session: session.clone(),
    });
    let mut task = root;
    for depth in 0..=policy.max_recovery_depth() {
        let id = task.id().clone();
        let step = Step::new(task.clone(), session.clone());
        let decision = agent.govern(&task, session, 1).ok();
        let Some((step, token)) = decision.and_then(|d| step.govern(d).ok()) else {
            return (None, log, tasks);
        };
        log.append(AuditEvent::Governed {
            task_ref: id.clone(),
            iteration: 1,
            decision: GovernanceDecision::Approve,
            token: Some(token.digest()),
        });
        let pre = agent.pre_validate(&task, 1).unwrap_or_default();
        log.append(AuditEvent::PreValidated {
            task_ref: id.clone(),
            iteration: 1,
            verdict: pre.clone(),
        });
        let Ok(step) = step.pre_validate(pre) else {
            return (None, log, tasks);
        };
        let Ok(output) = agent.execute(&task, &token);
        log.append(AuditEvent::Executed {
            task_ref: id.clone(),
            iteration: 1,
            output: token.digest(),
        });
        let Ok(step) = step.execute(token, output) else {
            return (None, log, tasks);
        };
        let Ok(post) = agent.post_validate(&task, step.output());
        log.append(AuditEvent::PostValidated {
            task_ref: id.clone(),
            iteration: 1,
            verdict: post.clone(),
        });
        tasks.push((task.clone(), post.clone()));
        match step.post_validate(post, policy.recover_on()) {
            PostValidation::Clean(step) => {
                log.append(AuditEvent::MovedNext {
                    task_ref: id.clone(),
                    iteration: 1,
                    next: Next::Complete,
                });
                log.append(AuditEvent::RecoveryResolved {
                    root_task_ref: root_id.clone(),
                    task_ref: id,
                    depth,
                    fix_attempts: depth,
                });
                return match step.move_next(Next::Complete) {
                    Moved::Completed(_) => (Some(depth), log, tasks),
                    _ => (None, log, tasks),
                };
            }
            PostValidation::Recoverable(r) => {
                let normalized = policy.normalizer().normalize(&r.verdict);
                if previous.as_ref() == Some(&normalized) {
                    return (None, log, tasks);
                }
                previous = Some(normalized);
                failures.extend(r.verdict.failures().map(|f| FailureEntry {
                    attempt: depth,
                    validator_id: f.validator_id.clone(),
                    severity: f.severity,
                    justification: f.justification.clone(),
                }));
                let Ok(fix_id) = root_id.fix_id(depth + 1) else {
                    return (None, log, tasks);
                };
                let spec = render_recovery_spec(&root_spec, &fix_id, depth + 1, &failures);
                log.append(AuditEvent::SubtaskSpawned {
                    parent_ref: id,
                    task_ref: fix_id.clone(),
                    depth: depth + 1,
                    triggering_validators: r.triggering_validators(),
                });
                task = Task::new(fix_id, spec);
            }
            PostValidation::Halted(_) => return (None, log, tasks),
        }
    }
    (None, log, tasks)
}

fn closure_3_fixes(c: &mut Criterion) {
    let session = Session::new("build", "bench").unwrap();
    let root = Task::new(TaskId::new("x").unwrap(), Spec::new("add /login"));
    let policy = RecoveryPolicy::default();
    let mut group = c.benchmark_group("closure_3_fixes");
    group.bench_function("hand_written_loop", |b| {
        b.iter(|| {
            let mut agent = NoopAgent::new(3);
            let depth = hand_written_loop(black_box(root.clone()), &session, &mut agent, None);
            assert_eq!(depth, Some(3));
        })
    });
    group.bench_function("hand_written_loop_with_audit", |b| {
        b.iter(|| {
            let mut agent = NoopAgent::new(3);
            let mut log = AuditLog::new();
            let depth = hand_written_loop(
                black_box(root.clone()),
                &session,
                &mut agent,
                Some(&mut log),
            );
            assert_eq!(depth, Some(3));
            log
        })
    });
    group.bench_function("hand_written_equivalent", |b| {
        b.iter(|| {
            let mut agent = NoopAgent::new(3);
            let out =
                hand_written_equivalent(black_box(root.clone()), &session, &mut agent, &policy);
            assert_eq!(out.0, Some(3));
            out
        })
    });
    group.bench_function("run_to_closure", |b| {
        b.iter(|| {
            let mut agent = NoopAgent::new(3);
            let record = run_to_closure(
                black_box(root.clone()),
                session.clone(),
                &mut agent,
                &policy,
            );
            assert_eq!(record.outcome().resolved_depth(), Some(3));
            record
        })
    });
    group.finish();
}

/// A 4 KiB test-output tail, as the quality validator keeps it.
fn tail(attempt: u32) -> String {
    let mut s = String::with_capacity(4096);
    let mut i = 0;
    while s.len() < 4096 - 80 {
        s.push_str(&format!(
            "test tests::case_{attempt}_{i} ... FAILED at src/lib.rs:{i}:9\n"
        ));
        i += 1;
    }
    s
}

fn failures(n: u32) -> Vec<FailureEntry> {
    (0..n)
        .map(|attempt| FailureEntry {
            attempt,
            validator_id: ValidatorId::new("tests").unwrap(),
            severity: Severity::Blocker,
            justification: tail(attempt),
        })
        .collect()
}

fn render(c: &mut Criterion) {
    let root = Spec::new("Handle webhooks: log the payload size and parse the event name.")
        .with_criterion("cargo test passes");
    let mut group = c.benchmark_group("render_recovery_spec");
    let three = failures(3);
    let id = TaskId::new("x_fix_3").unwrap();
    group.throughput(Throughput::Bytes(3 * 4096));
    group.bench_function("depth_3_4KiB_tails", |b| {
        b.iter(|| render_recovery_spec(black_box(&root), &id, 3, black_box(&three)))
    });
    for depth in 1..=10u32 {
        let fs = failures(depth);
        let id = TaskId::new(format!("x_fix_{depth}")).unwrap();
        group.throughput(Throughput::Bytes(u64::from(depth) * 4096));
        group.bench_with_input(BenchmarkId::new("depth", depth), &fs, |b, fs| {
            b.iter(|| render_recovery_spec(black_box(&root), &id, depth, black_box(fs)))
        });
    }
    group.finish();
}

/// Drives `closure` to its end, handing every state to `persist` (the start and each step's
/// result), and returns the record.
fn drive_persisting(
    mut closure: Closure,
    agent: &mut NoopAgent,
    mut persist: impl FnMut(&Closure),
) -> Box<ClosureRecord> {
    persist(&closure);
    loop {
        closure = match closure {
            Closure::Done(record) => return record,
            due => due.step(agent),
        };
        persist(&closure);
    }
}

/// The LangGraph peer workload: the 3-fix closure (root and two fixes fail, the third fix
/// passes: 17 agent steps plus the start), trivial bodies, every state persisted into an
/// in-memory store. `whole_state` encodes `Closure::state` each time, as an orchestrator
/// persisting the sans-IO machine had to.
fn persist_every_step(c: &mut Criterion) {
    let session = Session::new("build", "bench").unwrap();
    let root = Task::new(TaskId::new("x").unwrap(), Spec::new("add /login"));
    let policy = RecoveryPolicy::default();
    let mut group = c.benchmark_group("persist_every_step_3_fixes");
    group.bench_function("whole_state", |b| {
        b.iter(|| {
            let mut agent = NoopAgent::new(3);
            let mut store: Vec<Vec<u8>> = Vec::with_capacity(32);
            let closure = Closure::start(black_box(root.clone()), session.clone(), policy.clone());
            let record = drive_persisting(closure, &mut agent, |c| {
                store.push(checkpoint::encode(&c.state()).unwrap())
            });
            assert_eq!(record.outcome().resolved_depth(), Some(3));
            store
        })
    });
    group.bench_function("incremental", |b| {
        b.iter(|| {
            let mut agent = NoopAgent::new(3);
            let mut store: Vec<u8> = Vec::with_capacity(8192);
            let closure = Closure::start(black_box(root.clone()), session.clone(), policy.clone());
            let record = drive_persisting(closure, &mut agent, |c| {
                store.extend(c.step_delta().encode().unwrap())
            });
            assert_eq!(record.outcome().resolved_depth(), Some(3));
            store
        })
    });
    group.bench_function("incremental_in_place", |b| {
        b.iter(|| {
            let mut agent = NoopAgent::new(3);
            let mut store: Vec<u8> = Vec::with_capacity(8192);
            let closure = Closure::start(black_box(root.clone()), session.clone(), policy.clone());
            let record = drive_persisting(closure, &mut agent, |c| {
                c.encode_step_delta_into(&mut store).unwrap();
            });
            assert_eq!(record.outcome().resolved_depth(), Some(3));
            store
        })
    });
    let mut agent = NoopAgent::new(3);
    let mut store = Vec::new();
    let closure = Closure::start(root.clone(), session.clone(), policy.clone());
    drive_persisting(closure, &mut agent, |c| {
        store.extend(c.step_delta().encode().unwrap())
    });
    group.bench_function("restore_from_store", |b| {
        b.iter(|| {
            let (deltas, _) = ClosureDelta::decode_log(black_box(&store)).unwrap();
            Closure::restore_from_deltas(deltas).unwrap()
        })
    });
    group.finish();
}

/// Persisting every step of a closure that resolves at depth `d` (1..=10), each failure a
/// 4 KiB tail: the whole closure's persistence, so per step it is this over `5 + 4d` steps.
fn persist_by_depth(c: &mut Criterion) {
    let session = Session::new("build", "bench").unwrap();
    let root = Task::new(TaskId::new("x").unwrap(), Spec::new("add /login"));
    let policy = RecoveryPolicy::builder()
        .max_recovery_depth(10)
        .build()
        .unwrap();
    let mut group = c.benchmark_group("persist_by_depth_4KiB_tails");
    for depth in 1..=10u32 {
        group.bench_with_input(BenchmarkId::new("closure_only", depth), &depth, |b, &d| {
            b.iter(|| {
                let mut agent = NoopAgent::with_tails(d);
                let closure = Closure::start(root.clone(), session.clone(), policy.clone());
                drive_persisting(closure, &mut agent, |_| {})
            })
        });
        group.bench_with_input(BenchmarkId::new("whole_state", depth), &depth, |b, &d| {
            b.iter(|| {
                let mut agent = NoopAgent::with_tails(d);
                let mut store: Vec<Vec<u8>> = Vec::new();
                let closure = Closure::start(root.clone(), session.clone(), policy.clone());
                let record = drive_persisting(closure, &mut agent, |c| {
                    store.push(checkpoint::encode(&c.state()).unwrap())
                });
                assert_eq!(record.outcome().resolved_depth(), Some(d));
                store
            })
        });
        group.bench_with_input(BenchmarkId::new("incremental", depth), &depth, |b, &d| {
            b.iter(|| {
                let mut agent = NoopAgent::with_tails(d);
                let mut store: Vec<u8> = Vec::new();
                let closure = Closure::start(root.clone(), session.clone(), policy.clone());
                let record = drive_persisting(closure, &mut agent, |c| {
                    store.extend(c.step_delta().encode().unwrap())
                });
                assert_eq!(record.outcome().resolved_depth(), Some(d));
                store
            })
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    closure_3_fixes,
    render,
    persist_every_step,
    persist_by_depth
);
/// The 3-fix workloads timed in turn, `ROUNDS` rounds of `PER_ROUND` runs each, so a
/// burst of load on this shared machine slows every workload of a round alike: prints each
/// one's per-run time (minimum and quartiles over the rounds) and the ratios within a round.
/// `cargo bench --bench closure -- interleaved` runs only this; `--test` runs one short round.
fn interleaved(smoke: bool) {
    let (rounds, per_round) = if smoke { (1, 10) } else { (40, 2000) };
    let session = Session::new("build", "bench").unwrap();
    let root = Task::new(TaskId::new("x").unwrap(), Spec::new("add /login"));
    let policy = RecoveryPolicy::default();
    let names = [
        "hand_written_loop",
        "run_to_closure",
        "persist_every_step",
        "hand_written_equivalent",
    ];
    let mut times: [Vec<f64>; 4] = Default::default();
    for _ in 0..rounds {
        for (k, slot) in times.iter_mut().enumerate() {
            let start = std::time::Instant::now();
            for _ in 0..per_round {
                let mut agent = NoopAgent::new(3);
                let root = black_box(root.clone());
                let depth = match k {
                    0 => hand_written_loop(root, &session, &mut agent, None),
                    1 => run_to_closure(root, session.clone(), &mut agent, &policy)
                        .outcome()
                        .resolved_depth(),
                    3 => hand_written_equivalent(root, &session, &mut agent, &policy).0,
                    _ => {
                        let mut store: Vec<u8> = Vec::with_capacity(8192);
                        let closure = Closure::start(root, session.clone(), policy.clone());
                        let record = drive_persisting(closure, &mut agent, |c| {
                            c.encode_step_delta_into(&mut store).unwrap();
                        });
                        black_box(store);
                        record.outcome().resolved_depth()
                    }
                };
                assert_eq!(depth, Some(3));
            }
            slot.push(start.elapsed().as_secs_f64() * 1e6 / per_round as f64);
        }
    }
    let quartiles = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        let at = |q: usize| v[(v.len() - 1) * q / 4];
        (at(0), at(1), at(2), at(3))
    };
    println!("interleaved_3_fixes ({rounds} rounds of {per_round} runs each):");
    for (name, t) in names.iter().zip(&times) {
        let (min, q1, median, q3) = quartiles(t);
        println!("  {name:20} min {min:6.2} µs   quartiles {q1:6.2} {median:6.2} {q3:6.2} µs");
    }
    let ratio = |a: usize, b: usize| -> Vec<f64> {
        times[a].iter().zip(&times[b]).map(|(x, y)| x / y).collect()
    };
    for (label, r) in [
        ("run_to_closure / hand_written_loop", ratio(1, 0)),
        ("persist_every_step / run_to_closure", ratio(2, 1)),
        ("run_to_closure / hand_written_equivalent", ratio(1, 3)),
    ] {
        let (min, q1, median, q3) = quartiles(&r);
        println!("  {label:42} min {min:.2}  quartiles {q1:.2} {median:.2} {q3:.2}");
    }
    // One line for benches/all.sh's table: bench, ratio, target.
    let (min, _, median, q3) = quartiles(&ratio(1, 3));
    println!(
        "result: the 3-fix closure / the hand-written equivalent (median of {rounds} rounds)|{median:.2} (min {min:.2}, upper quartile {q3:.2})|1.3"
    );
}

fn main() {
    // Criterion's own options take values; a positional argument is a filter.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|a| a == "--test");
    let filter = args
        .iter()
        .rev()
        .find(|a| !a.starts_with('-') && a.parse::<f64>().is_err());
    if filter.is_none_or(|f| f.as_str() != "interleaved") {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
    if filter.is_none_or(|f| "interleaved".contains(f.as_str())) {
        interleaved(smoke);
    }
}
