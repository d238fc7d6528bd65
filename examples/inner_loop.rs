//! One task through kleene's inner loop, printing an audit line per transition.
//!
//! `governance → pre_validate → execute → post_validate → move_next`, twice: the first
//! iteration finishes one step of the task and continues, the second completes it. Every
//! iteration passes governance and mints its own validation token (INV1); execution consumes
//! it. Run with `cargo run --example inner_loop`.

use kleene::{
    Task,
    closure::{
        ExecutionOutput, GovernanceDecision, Severity, Spec, ValidatorResult, Verdict, step::Moved,
        step::Next, step::PostValidation, step::RecoverOn, step::Session, step::Step,
        step::ValidationToken,
    },
    id::{TaskId, ValidatorId},
};

fn main() -> Result<(), kleene::Error> {
    let session = Session::new("build", "demo")?;
    let task = Task::new(
        TaskId::new("task_X")?,
        Spec::new("add a /login route").with_criterion("GET /login returns 200"),
    );
    println!(
        "kleene inner loop: task {} in session {}/{}",
        task.id(),
        session.mode(),
        session.project()
    );
    println!(
        "spec: {:?}, criteria: {:?}\n",
        task.spec().intent,
        task.spec().acceptance_criteria
    );
    println!(
        "{:<14} {:<8} {:>4}  {:<8}  what happened",
        "phase", "task", "iter", "token"
    );

    // What the validators and the executor report at each iteration; in a real run these
    // come from your agent, linters and test runner.
    let work = [
        (
            "wrote src/login.rs",
            Some("unused import `std::fmt`"),
            Next::Continue,
        ),
        ("wrote tests/login.rs", None, Next::Complete),
    ];

    let mut step = Step::new(task, session);
    for (output, lint_warning, next) in work {
        let (pre, token) = step.govern(GovernanceDecision::Approve)?;
        let tok = short(&token);
        audit(
            "governance",
            &pre,
            &tok,
            "approved; a fresh token is minted for this iteration",
        );

        let pre_verdict = match lint_warning {
            Some(w) => Verdict::new([ValidatorResult::new(
                ValidatorId::new("lint")?,
                Severity::Warning,
                true,
                w,
            )]),
            None => Verdict::clean(),
        };
        let summary = if pre_verdict.is_clean() {
            "clean".to_owned()
        } else {
            format!("{}; passes (warnings do not block)", describe(&pre_verdict))
        };
        let exec = pre.pre_validate(pre_verdict)?;
        audit("pre_validate", &exec, &tok, &summary);

        let post = exec.execute(token, ExecutionOutput::new(output))?;
        audit(
            "execute",
            &post,
            &tok,
            &format!("token consumed; output: {output:?}"),
        );

        let tests = ValidatorResult::pass(ValidatorId::new("tests")?);
        let verdict = Verdict::new([tests]);
        let summary = describe(&verdict);
        let moving = match post.post_validate(verdict, RecoverOn::Blockers) {
            PostValidation::Clean(moving) => moving,
            PostValidation::Recoverable(r) => {
                // The closure driver would spawn a fix here; this example walks one pass.
                println!("recoverable failure {:?}: a fix subtask is due", r.verdict);
                return Ok(());
            }
            PostValidation::Halted(halt) => return Err(halt.into()),
        };
        audit(
            "post_validate",
            &moving,
            &tok,
            &format!("clean ({summary})"),
        );

        let iteration = moving.iteration();
        let id = moving.task().id().clone();
        match moving.move_next(next) {
            Moved::Continue(next_step) => {
                line(
                    "move_next",
                    &id,
                    iteration,
                    &tok,
                    &format!(
                        "continue: back to governance for iteration {}",
                        next_step.iteration()
                    ),
                );
                step = next_step;
            }
            Moved::Completed(done) => {
                line(
                    "move_next",
                    &id,
                    iteration,
                    &tok,
                    &format!("completed after {} iterations", done.iterations()),
                );
                return Ok(());
            }
            Moved::Halted(halt) => return Err(halt.into()),
        }
    }
    // The scripted work ends with `Next::Complete`, so the loop returns before this.
    println!("the scripted work ran out before the task completed");
    Ok(())
}

/// The first 8 hex digits of a token's digest: enough to tell tokens apart in a log.
fn short(token: &ValidationToken) -> String {
    token.digest().to_string()[..8].to_owned()
}

fn audit<P: kleene::closure::step::Phase>(phase: &str, step: &Step<P>, token: &str, what: &str) {
    line(phase, step.task().id(), step.iteration(), token, what);
}

fn line(phase: &str, task: &TaskId, iteration: u32, token: &str, what: &str) {
    println!("{phase:<14} {task:<8} {iteration:>4}  {token:<8}  {what}");
}

fn describe(verdict: &Verdict) -> String {
    let failures: Vec<String> = verdict
        .failures()
        .map(|r| format!("{} {}: {}", r.validator_id, r.severity, r.justification))
        .collect();
    if failures.is_empty() {
        let passed: Vec<&str> = verdict
            .results()
            .iter()
            .map(|r| r.validator_id.as_str())
            .collect();
        format!("passed: {}", passed.join(", "))
    } else {
        failures.join("; ")
    }
}
