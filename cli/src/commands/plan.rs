//! The commands about a plan file alone: `help`, `validate` and `graph`.

use std::path::Path;

use crate::cli::{Exit, GraphArgs, HelpArgs, PlanArgs};
use crate::report::Reporter;
use crate::state::{StateDir, write_atomic};
use kleene::batch::TaskStatus;
use kleene::error::Chain;
use kleene::plan::{NodeOutcome, NodeState};
use kleene::shell::counted;
use kleene::shell::merges;

use super::{Failure, Outcome, env_journal_key, load_evidence, read_plan};

/// `kleene help [TOPIC]`: the plan file reference for `plan`, a command's long help for a
/// command's name, kleene's own help without a topic.
pub fn help(args: &HelpArgs) -> Outcome {
    use clap::CommandFactory;
    let mut cli = crate::cli::Cli::command();
    // Built first, so a command's usage line reads `kleene validate`, not `validate`.
    cli.build();
    let printed = match args.topic.as_deref() {
        Some("plan" | "plans") => {
            println!("{}", crate::cli::PLAN_HELP);
            Ok(())
        }
        None => cli.print_long_help(),
        Some(name) => {
            let names: Vec<String> = cli
                .get_subcommands()
                .map(|c| c.get_name().to_owned())
                .collect();
            match cli.find_subcommand_mut(name) {
                Some(sub) => sub.print_long_help(),
                None => {
                    return Err(Failure::bad_input(format!(
                        "no help topic `{name}`: try `kleene help plan` or one of {}",
                        names.join(", ")
                    )));
                }
            }
        }
    };
    printed.map_err(|e| Failure::bad_input(format!("print help: {e}")))?;
    Ok(Exit::Ok)
}

/// `kleene validate PLAN`.
pub fn validate(args: &PlanArgs, rep: &mut Reporter) -> Outcome {
    let (loaded, _) = read_plan(&args.plan, &[])?;
    let plan = loaded.plan();
    if rep.mode() == crate::report::Mode::Json {
        let tasks: Vec<_> = plan
            .tasks()
            .map(|t| {
                serde_json::json!({
                    "id": t.id,
                    "lane": t.kind.lane(),
                    "module": t.kind.module().map(|m| m.as_str().to_owned()),
                    "owned_paths": t.owned_paths,
                    "depends_on": plan.prerequisites(&t.id),
                    "synthesized": t.is_synthesized(),
                    "has_commands": loaded.command(&t.id).is_some(),
                    "consolidated_from": t.consolidated_from,
                })
            })
            .collect();
        rep.say_json(&serde_json::json!({
            "event": "plan_valid",
            "file": args.plan,
            "digest": plan.digest().to_string(),
            "tasks": tasks,
            "merged": merges(plan),
            "plan_files": loaded.files().map_or(0, kleene::shell::PlanFiles::len),
        }));
        return Ok(Exit::Ok);
    }
    let files = loaded.files().map_or(0, kleene::shell::PlanFiles::len);
    rep.say(&format!(
        "{} is valid: {}, {} bound, plan digest {}",
        args.plan.display(),
        counted(plan.len() as u64, "task", "tasks"),
        counted(files as u64, "plan file", "plan files"),
        plan.digest()
    ));
    if let Some(line) = loaded.files().and_then(bound_files) {
        rep.say(&line);
    }
    for (i, t) in plan.tasks().enumerate() {
        let commands = match loaded.command(&t.id) {
            Some(c) => format!(
                "run, {} check{}{}",
                c.checks.len(),
                if c.checks.len() == 1 { "" } else { "s" },
                if c.fix.is_some() { ", fix" } else { "" }
            ),
            None if t.is_synthesized() => "synthesized, runs nothing".to_owned(),
            None => "runs nothing".to_owned(),
        };
        let module = t
            .kind
            .module()
            .map_or(String::new(), |m| format!(" {m}", m = m.as_str()));
        let after: Vec<&str> = plan
            .prerequisites(&t.id)
            .iter()
            .map(|id| id.as_str())
            .collect();
        rep.say(&format!(
            "{:>3}. {} [{}{module}] ({commands}){}",
            i + 1,
            t.id,
            t.kind.lane(),
            if after.is_empty() {
                String::new()
            } else {
                format!(" after {}", after.join(", "))
            }
        ));
    }
    for merge in merges(plan) {
        rep.say(&format!("note: {merge}"));
    }
    Ok(Exit::Ok)
}

/// `kleene graph PLAN [--out BASE]`, or `kleene graph --state DIR [--out BASE]`.
pub fn graph(args: &GraphArgs, rep: &mut Reporter) -> Outcome {
    let dot = match (&args.plan, &args.state) {
        (_, Some(dir)) => run_graph(dir)?,
        (Some(plan), None) => read_plan(plan, &[])?.0.plan().to_dot(),
        (None, None) => {
            return Err(Failure::bad_input(
                "graph: give a plan file, or --state DIR for a run's graph",
            ));
        }
    };
    let Some(base) = &args.out else {
        print!("{dot}");
        return Ok(Exit::Ok);
    };
    let dot_path = base.with_extension("dot");
    write_atomic(&dot_path, dot.as_bytes()).map_err(|e| Failure::bad_input(Chain(&e)))?;
    rep.say(&format!("wrote {}", dot_path.display()));
    let svg_path = base.with_extension("svg");
    match std::process::Command::new("dot")
        .arg("-Tsvg")
        .arg(&dot_path)
        .arg("-o")
        .arg(&svg_path)
        .status()
    {
        Ok(status) if status.success() => rep.say(&format!("wrote {}", svg_path.display())),
        Ok(status) => {
            return Err(Failure::halted(format!(
                "render {} with Graphviz: dot exited with {status}",
                svg_path.display()
            )));
        }
        Err(_) => rep.say("Graphviz `dot` is not on PATH: no SVG (the DOT file is complete)"),
    }
    Ok(Exit::Ok)
}

/// The graph of the plan the run in `dir` ran, from its journal (checked as `status` checks
/// it): each task filled by how it ended and labelled with its calls and fixes.
fn run_graph(dir: &Path) -> Result<String, Failure> {
    let state = StateDir::at(dir);
    let key = env_journal_key(&state)?;
    let (_, loaded, evidence) = load_evidence(&state, key.as_ref())?;
    let fixes = kleene::shell::fixes_by_task(&evidence);
    Ok(loaded.plan().to_dot_with_outcomes(|id| {
        let outcome = node_outcome(evidence.status(id).as_ref());
        let calls = evidence.task(id).map_or(0, |t| t.calls());
        let note = match calls {
            0 => String::new(),
            calls => kleene::shell::calls_and_fixes(calls, fixes.get(id).copied().unwrap_or(0)),
        };
        Some(NodeState { outcome, note })
    }))
}

/// How a task ended, as the graph draws it; a status this kleene does not know, and a task
/// the evidence does not hold, are pending (not yet ended).
fn node_outcome(status: Option<&TaskStatus>) -> NodeOutcome {
    match status {
        Some(TaskStatus::Accepted) => NodeOutcome::Accepted,
        Some(TaskStatus::Failed) => NodeOutcome::Failed,
        Some(TaskStatus::Drained { .. }) => NodeOutcome::Drained,
        Some(TaskStatus::InFlight { .. }) => NodeOutcome::InFlight,
        _ => NodeOutcome::Pending,
    }
}

/// What a plan binds, in one line: how many files and bytes, and the largest three, so a
/// plan that binds more than its commands read shows where the bytes come from.
pub fn bound_files(files: &kleene::shell::PlanFiles) -> Option<String> {
    if files.is_empty() {
        return None;
    }
    let (total, largest) = files.largest(3);
    let largest: Vec<String> = largest
        .iter()
        .map(|(path, size)| format!("{path} ({})", counted(*size, "byte", "bytes")))
        .collect();
    Some(format!(
        "binds {} of the project, {}; the largest: {}",
        counted(files.len() as u64, "file", "files"),
        counted(total, "byte", "bytes"),
        largest.join(", ")
    ))
}
