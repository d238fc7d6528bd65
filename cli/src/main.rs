//! `kleene`: run plan files of shell commands through bounded, auditable recovery.
//!
//! `kleene run PLAN` runs every task of the plan as a closure over its commands (`run`,
//! `checks`, `fix`) inside a journaled batch; `accept`, `export` and `verify` turn the
//! accepted files into a verified archive. See `kleene --help`.

// The binary keeps the library's promise: no unsafe code anywhere.
#![forbid(unsafe_code)]

mod cli;
mod commands;
mod excerpt;
mod formats;
mod observer;
mod projection;
mod report;
mod restate;
mod state;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::report::{Mode, Reporter};

fn main() -> ExitCode {
    if let Some(exit) = kleene::process::serve_host_if_asked() {
        return exit;
    }
    // This binary is its own contained host; the environment can choose a fallback instead
    // (for tests and benches of it): `cgroup`, a cgroup per command without the namespace,
    // `subreaper`, the host as a subreaper without either, or `process-group`, none of them.
    let containment = std::env::var("KLEENE_CONTAINMENT");
    match containment.as_deref() {
        Ok("process-group") => kleene::process::disable_cgroups(),
        Ok("cgroup") => {}
        _ => {
            if containment.as_deref() == Ok("subreaper") {
                kleene::process::disable_cgroups();
                kleene::process::disable_pid_namespaces();
            }
            if let Ok(me) = std::env::current_exe() {
                kleene::process::contain_commands_with(me);
            }
        }
    }
    let cli = Cli::parse();
    let mode = Mode::detect(cli.json);
    let mut rep = Reporter::new(mode);
    let outcome = match &cli.command {
        Command::Run(args) => commands::run(args, Reporter::new(mode)),
        Command::Resume(args) => commands::resume(args, Reporter::new(mode)),
        Command::Status(args) => commands::status(args, &mut rep),
        Command::Accept(args) => commands::accept_run(args, &mut rep),
        Command::Export(args) => commands::export_run(args, &mut rep),
        Command::Verify(args) => commands::verify(args, &mut rep),
        Command::Keygen(args) => commands::keygen(args, &mut rep),
        Command::Graph(args) => commands::graph(args, &mut rep),
        Command::Audit(args) => commands::audit(args, &mut rep),
        Command::Diff(args) => commands::diff(args, &mut rep),
        Command::Apply(args) => commands::apply(args, &mut rep),
        Command::Cache(args) => commands::cache(args, &mut rep),
        Command::Validate(args) => commands::validate(args, &mut rep),
        Command::Help(args) => commands::help(args),
        Command::Worker(args) => {
            let mut forwarded = vec![std::ffi::OsString::from("worker")];
            forwarded.extend(args.args.iter().cloned());
            restate::adapter(forwarded)
        }
        Command::Restate(args) => restate::adapter(args.args.clone()),
    };
    // The empty cgroups kept for the next command, and the host that ran this thread's
    // commands, have none left to serve.
    kleene::process::release_cgroups();
    kleene::process::release_host();
    match outcome {
        Ok(exit) => exit.into(),
        Err(failure) => {
            if mode == Mode::Json {
                rep.say_error(failure.exit.code(), &failure.message);
            }
            eprintln!("kleene: {}", failure.message);
            failure.exit.into()
        }
    }
}
