//! Hands Restate work to the adapter's own binary, `kleene-restate`, so that this binary
//! keeps no async runtime: `kleene worker …` and `kleene restate …` run it with the same
//! arguments, and `kleene run --restate URL PLAN` submits the plan through it.
//!
//! ```text
//! kleene worker --listen 127.0.0.1:9081 --jobs 4     # = kleene-restate worker --listen …
//! kleene run --restate http://127.0.0.1:8080 plan.json -j 8
//! kleene restate status --channel run-0123456789ab
//! ```
//!
//! The adapter is looked up as `$KLEENE_RESTATE_BIN`, then beside this binary (where
//! `cargo build -p kleene-restate` puts it), then on `PATH`.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use crate::cli::{Exit, RunArgs};
use crate::commands::{Failure, Outcome};

/// The adapter program to run.
fn program() -> PathBuf {
    if let Some(given) = std::env::var_os("KLEENE_RESTATE_BIN") {
        return PathBuf::from(given);
    }
    let beside = std::env::current_exe()
        .ok()
        .map(|me| me.with_file_name("kleene-restate"))
        .filter(|p| p.is_file());
    beside.unwrap_or_else(|| PathBuf::from("kleene-restate"))
}

/// Replaces this process with the adapter run with `args`; returns only when it could not
/// be started.
pub fn adapter(args: Vec<OsString>) -> Outcome {
    let program = program();
    let err = std::process::Command::new(&program).args(args).exec();
    Err(Failure {
        exit: Exit::BadInput,
        message: if err.kind() == std::io::ErrorKind::NotFound {
            format!(
                "start the Restate adapter {}: it is not built or not on PATH; build it with \
                 `cargo build -p kleene-restate` (or set KLEENE_RESTATE_BIN)",
                program.display()
            )
        } else {
            format!("start the Restate adapter {}: {err}", program.display())
        },
    })
}

/// `kleene run --restate URL PLAN`: the plan submitted to its channel on Restate.
pub fn run(args: &RunArgs, url: &str) -> Outcome {
    // The adapter runs with `kleene run`'s default policy; a flag it would ignore is refused.
    let local_only = [
        (args.workspace.is_some(), "--workspace"),
        (args.restart, "--restart"),
        (args.kill_stale, "--kill-stale"),
        (args.batch_recovery, "--batch-recovery"),
        (args.recover_warnings, "--recover-warnings"),
        (args.max_depth != 3, "--max-depth"),
        (args.max_fixes != 10, "--max-fixes"),
        (args.timeout != 600.0, "--timeout"),
    ];
    if let Some((_, flag)) = local_only.iter().find(|(set, _)| *set) {
        return Err(Failure {
            exit: Exit::BadInput,
            message: format!(
                "run {} on Restate: {flag} is for local runs only (a run on Restate keeps its \
                 state in the channel object and uses the default recovery policy)",
                args.plan.display()
            ),
        });
    }
    let mut forwarded: Vec<OsString> = vec!["run".into(), "--restate".into(), url.into()];
    if let Some(channel) = &args.channel {
        forwarded.extend(["--channel".into(), channel.into()]);
    }
    if let Some(jobs) = args.jobs {
        forwarded.extend(["-j".into(), jobs.to_string().into()]);
    }
    forwarded.push(args.plan.clone().into_os_string());
    adapter(forwarded)
}
