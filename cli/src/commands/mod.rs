//! One function per command. Each returns the process's [`Exit`] or a [`Failure`] to print.

use std::fs;
use std::path::{Path, PathBuf};

use kleene::batch::{BatchEvidence, FileJournal, journal::EvidenceJournal};
use kleene::id::ChannelId;
use kleene::signing::SigningKey;

use crate::cli::{Exit, SigningArgs};
use crate::formats::RunInfo;
use crate::state::StateDir;
use kleene::batch::JournalKey;
use kleene::error::Chain;
use kleene::shell::{PlanBinding, ShellPlan, counted};

mod accept;
mod cache;
mod changes;
mod closures;
mod inspect;
mod plan;
mod run;

pub use accept::{accept_run, export_run, keygen, verify};
pub use cache::cache;
pub use changes::{apply, diff};
pub use inspect::{audit, status};
pub use plan::{graph, help, validate};
pub use run::{resume, run};

/// A command that could not do what was asked: the exit code and the message to print.
#[derive(Debug)]
pub struct Failure {
    /// The exit code.
    pub exit: Exit,
    /// What went wrong (reads after "kleene: ").
    pub message: String,
}

impl Failure {
    fn bad_input(message: impl ToString) -> Self {
        Self {
            exit: Exit::BadInput,
            message: message.to_string(),
        }
    }

    fn halted(message: impl ToString) -> Self {
        Self {
            exit: Exit::Halted,
            message: message.to_string(),
        }
    }
}

pub type Outcome = Result<Exit, Failure>;

fn absolute(path: &Path) -> Result<PathBuf, Failure> {
    std::path::absolute(path)
        .map_err(|e| Failure::bad_input(format!("resolve {}: {e}", path.display())))
}

/// Reads the plan file at `file` with the files beside it (leaving out `skip`, and the
/// default state directory `.kleene` beside the plan when there is one).
fn read_plan(file: &Path, skip: &[PathBuf]) -> Result<(ShellPlan, String), Failure> {
    let mut skip = skip.to_vec();
    skip.push(PathBuf::from(".kleene"));
    ShellPlan::read(file, &skip).map_err(|e| Failure::bad_input(Chain(&e)))
}

/// The plan a state directory's run started with: its stored text and the plan files it
/// bound.
fn stored_plan(state: &StateDir, text: &str) -> Result<ShellPlan, Failure> {
    let files = state
        .plan_files()
        .map_err(|e| Failure::bad_input(Chain(&e)))?;
    ShellPlan::from_text(&state.plan_path(), text, files).map_err(|e| Failure::bad_input(Chain(&e)))
}

/// The journal key the environment names (KLEENE_SIGNING_KEY), for the commands that only
/// read a journal and take no key option.
fn env_journal_key(state: &StateDir) -> Result<Option<JournalKey>, Failure> {
    let args = SigningArgs {
        signing_key: std::env::var_os("KLEENE_SIGNING_KEY").map(PathBuf::from),
    };
    Ok(journal_key(signing_key(&args, state)?.as_ref()))
}

/// The state directory's journal for reading: nothing is created, cut or removed.
fn read_journal(state: &StateDir, key: Option<&JournalKey>) -> FileJournal {
    let journal = FileJournal::open_read_only(state.journal_dir());
    match key {
        Some(key) => journal.with_mac_key(key.clone()),
        None => journal,
    }
}

/// The journal MAC key of a signing key.
fn journal_key(key: Option<&SigningKey>) -> Option<JournalKey> {
    key.map(|k| JournalKey::from_bytes(k.journal_mac_key()))
}

fn load_evidence(
    state: &StateDir,
    key: Option<&JournalKey>,
) -> Result<(RunInfo, ShellPlan, BatchEvidence), Failure> {
    let (info, text) = state.open().map_err(|e| Failure::bad_input(Chain(&e)))?;
    let loaded = stored_plan(state, &text)?;
    let channel =
        ChannelId::new(info.channel.clone()).map_err(|e| Failure::bad_input(Chain(&e)))?;
    let journal = read_journal(state, key);
    let load = journal
        .load(&channel)
        .map_err(|e| Failure::bad_input(Chain(&e)))?
        .ok_or_else(|| {
            Failure::bad_input(format!(
                "read evidence in {}: channel {channel} has no journal yet",
                state.root().display()
            ))
        })?;
    let evidence = load
        .into_evidence()
        .map_err(|e| Failure::bad_input(Chain(&e)))?;
    check_copies(state, &loaded, &evidence)?;
    Ok((info, loaded, evidence))
}

/// The torn tail the run's journal ends in, said as a problem: bytes after its last whole
/// record, which a crash mid-append leaves, and so does anything that appends to it or cuts
/// it short. `run` and `resume` cut it, saying so; the commands that only read name it.
fn journal_torn_tail(state: &StateDir, key: Option<&JournalKey>) -> Option<String> {
    let (info, _) = state.open().ok()?;
    let channel = ChannelId::new(info.channel).ok()?;
    let journal = read_journal(state, key);
    let torn = journal.load(&channel).ok()??.torn_tail?;
    Some(format!(
        "{}: the journal ends in {} at byte {} that {} no whole record ({}): an \
         append cut short by a crash, or bytes written or cut by something other than kleene; \
         kleene resume removes them",
        journal.path_for(&channel).display(),
        counted(torn.discarded, "byte", "bytes"),
        torn.offset,
        if torn.discarded == 1 { "is" } else { "are" },
        torn.cause
    ))
}

/// Checks kleene's own copies in the state directory against what the run's journal binds:
/// the plan file's text, the manifest of the plan's files (through the plan's digest), and
/// the copy of those files the commands read. A copy that differs is named as kleene's copy
/// in the state directory, never as the user's plan file, which is not what changed.
fn check_copies(
    state: &StateDir,
    loaded: &ShellPlan,
    evidence: &BatchEvidence,
) -> Result<(), Failure> {
    let changed = |path: PathBuf, what: &str| {
        Failure::halted(format!(
            "{}: kleene's copy of {what} in the state directory is not the one this run's \
             journal binds: it was changed or damaged there (the plan file you wrote is not \
             what is meant); restore the state directory, or start over with kleene run PLAN \
             --restart --state {}",
            path.display(),
            state.root().display()
        ))
    };
    match loaded.binding_in(evidence) {
        PlanBinding::TextDiffers => return Err(changed(state.plan_path(), "the plan file")),
        PlanBinding::DigestDiffers if loaded.files().is_some() => {
            return Err(changed(
                state.plan_files_manifest_path(),
                "the manifest of the plan's files",
            ));
        }
        PlanBinding::DigestDiffers => return Err(changed(state.plan_path(), "the plan file")),
        _ => {}
    }
    if let Some(files) = loaded.files() {
        let copy = state.plan_files_dir();
        files.verify_copy(&copy).map_err(|e| {
            Failure::halted(format!(
                "{}: kleene's copy of the plan's files in the state directory is not what this \
                 run binds ({}); restore the state directory, or start over with kleene run \
                 PLAN --restart --state {}",
                copy.display(),
                Chain(&e),
                state.root().display()
            ))
        })?;
    }
    Ok(())
}

/// Every accepted file the run's workspace does not hold as accepted, as one failure naming
/// them (at most ten), for the commands that vouch for the workspace.
fn check_workspace(info: &RunInfo, evidence: &BatchEvidence) -> Result<(), Failure> {
    // A file missing changes nothing the record vouches for (it is built from the
    // journal): only a file that is there otherwise is refused.
    let found = crate::projection::differences(evidence, &info.workspace).changed;
    if found.is_empty() {
        return Ok(());
    }
    Err(Failure::halted(format!(
        "the workspace {} does not hold what was accepted ({}):\n  {}{}\nkleene \
         resume writes the accepted files again; if you did not change them, something else \
         wrote the workspace",
        info.workspace.display(),
        counted(found.len() as u64, "file", "files"),
        found
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n  "),
        if found.len() > 10 { "\n  …" } else { "" }
    )))
}

/// The signing key named by `--signing-key` or `KLEENE_SIGNING_KEY`, refused when it lies
/// inside the state directory (whoever can write the state could then also sign) or when
/// others can read it.
fn signing_key(args: &SigningArgs, state: &StateDir) -> Result<Option<SigningKey>, Failure> {
    use std::os::unix::fs::PermissionsExt as _;
    let Some(path) = &args.signing_key else {
        return Ok(None);
    };
    let shown = path.display();
    let resolved = fs::canonicalize(path)
        .map_err(|e| Failure::bad_input(format!("read signing key {shown}: {e}")))?;
    let root = fs::canonicalize(state.root()).or_else(|_| std::path::absolute(state.root()));
    if let Ok(root) = root
        && resolved.starts_with(&root)
    {
        return Err(Failure::bad_input(format!(
            "use signing key {shown}: it is inside the state directory {}, where anyone \
                 who can forge evidence can also read it; move it elsewhere (see SECURITY.md)",
            root.display()
        )));
    }
    let mode = fs::metadata(&resolved)
        .map_err(|e| Failure::bad_input(format!("read signing key {shown}: {e}")))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(Failure::bad_input(format!(
            "use signing key {shown}: others can access it (mode {:o}); run chmod 600 {shown}",
            mode & 0o777
        )));
    }
    let text = fs::read_to_string(&resolved)
        .map_err(|e| Failure::bad_input(format!("read signing key {shown}: {e}")))?;
    SigningKey::from_pem(&text)
        .map(Some)
        .map_err(|e| Failure::bad_input(format!("{shown}: {e}")))
}
