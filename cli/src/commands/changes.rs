//! `kleene diff`, `kleene apply` and `kleene export --tree`: a run's accepted changes against
//! the project's files it bound, as a patch `git apply` takes, written into the working tree,
//! or laid over those files in a directory of their own.
//!
//! ```text
//! kleene diff --state .kleene | git apply --check     # the patch applies to the repository
//! kleene apply --state .kleene                        # or kleene writes it, where nothing
//!                                                     # changed since the run bound it
//! kleene export --tree built/ --state .kleene         # or the whole project, changes in
//! ```
//!
//! The base is the run's own copy of the files it bound (`STATE/plan-files/`, checked against
//! the manifest the journal binds); an accepted file whose bytes equal the base's is no
//! change. Paths in the patch are relative to the git work tree's top when the plan lies in
//! one (so `git apply` at the top takes it), else to the plan's directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kleene::batch::BatchEvidence;
use kleene::error::Chain;
use kleene::id::TaskId;
use kleene::plan::AdmittedPath;
use kleene::shell::{PlanFiles, counted};
use kleene::snapshot::Snapshot;

use crate::cli::{DiffArgs, Exit, StateArgs};
use crate::formats::RunInfo;
use crate::report::Reporter;
use crate::state::StateDir;

use super::{Failure, Outcome, env_journal_key, load_evidence};

/// One accepted file that differs from the base: the task that wrote it, its bytes then
/// (`None`: a new file) and now.
struct Change<'e> {
    task: &'e TaskId,
    path: &'e AdmittedPath,
    base: Option<Vec<u8>>,
    accepted: &'e [u8],
}

/// Every accepted file that differs from what the run bound, by path.
fn changes<'e>(
    state: &StateDir,
    evidence: &'e BatchEvidence,
    bound: Option<&PlanFiles>,
) -> Result<Vec<Change<'e>>, Failure> {
    let base = with_bytes(state, bound.cloned(), "")?;
    let mut accepted: BTreeMap<&AdmittedPath, (&TaskId, &[u8])> = BTreeMap::new();
    for (task, output) in evidence.accepted_outputs() {
        for (path, content) in output.files() {
            accepted.insert(path, (task, content));
        }
    }
    Ok(accepted
        .into_iter()
        .filter_map(|(path, (task, content))| {
            let then = base
                .as_ref()
                .and_then(|b| b.bytes(path))
                .map(<[u8]>::to_vec);
            (then.as_deref() != Some(content)).then_some(Change {
                task,
                path,
                base: then,
                accepted: content,
            })
        })
        .collect())
}

/// The files the run bound (`None`: it bound none) with their bytes, read from its own copy
/// and checked against their digests; a failure says so after `context`.
fn with_bytes(
    state: &StateDir,
    bound: Option<PlanFiles>,
    context: &str,
) -> Result<Option<PlanFiles>, Failure> {
    bound
        .map(|files| files.with_bytes_from(&state.plan_files_dir()))
        .transpose()
        .map_err(|e| {
            Failure::halted(format!(
                "{context}read the project's files the run bound in {}: {}",
                state.plan_files_dir().display(),
                Chain(&e)
            ))
        })
}

/// What `git rev-parse --show-prefix` says of `dir`: its path below the work tree's top
/// (`sub/dir/`), empty at the top, `None` outside a work tree or without git.
fn git_prefix(dir: &Path) -> Option<String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "core.fsmonitor=false", "rev-parse", "--show-prefix"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// `kleene diff`.
pub fn diff(args: &DiffArgs, _rep: &mut Reporter) -> Outcome {
    let state = StateDir::at(&args.state.state);
    let key = env_journal_key(&state)?;
    let (info, loaded, evidence) = load_evidence(&state, key.as_ref())?;
    let changes = changes(&state, &evidence, loaded.files())?;
    let prefix = git_prefix(&info.plan_dir).unwrap_or_default();
    let mut binary = Vec::new();
    if args.per_task {
        let Some(record) = super::accept::stored_record(&state, None)? else {
            return Err(Failure::halted(format!(
                "diff --per-task: {} has no acceptance record for the commits to name; run \
                 kleene accept --state {} first",
                state.root().display(),
                state.root().display()
            )));
        };
        let mut tasks: Vec<&TaskId> = changes.iter().map(|c| c.task).collect();
        tasks.sort();
        tasks.dedup();
        for (n, task) in tasks.iter().enumerate() {
            let intent = loaded
                .plan()
                .task(task)
                .map(|t| t.spec.intent.clone())
                .unwrap_or_default();
            let mine: Vec<&Change<'_>> = changes.iter().filter(|c| c.task == *task).collect();
            let subject = first_line(&format!("{task}: {intent}"));
            print!(
                "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n\
                 From: kleene <kleene@localhost>\n\
                 Date: Thu, 1 Jan 1970 00:00:00 +0000\n\
                 Subject: [PATCH {}/{}] {subject}\n\n\
                 Accepted task {task} of channel {}.\n\n\
                 Kleene-Record: {}\n\
                 ---\n{}-- \nkleene\n\n",
                n + 1,
                tasks.len(),
                info.channel,
                record.digest(),
                unified(&prefix, &mine, &mut binary)
            );
        }
    } else {
        let all: Vec<&Change<'_>> = changes.iter().collect();
        print!("{}", unified(&prefix, &all, &mut binary));
    }
    for name in &binary {
        eprintln!(
            "kleene: {name} is not text and is left out of the patch; kleene apply writes it"
        );
    }
    if changes.is_empty() {
        eprintln!("kleene: the accepted files change nothing the run bound");
    }
    Ok(Exit::Ok)
}

/// The first line of `text`, for a commit's subject.
fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_owned()
}

/// `changes` as one git-style unified diff, paths below `prefix`; files that are not text
/// are added to `binary` instead.
fn unified(prefix: &str, changes: &[&Change<'_>], binary: &mut Vec<String>) -> String {
    let mut patch = String::new();
    for change in changes {
        let name = format!("{prefix}{}", change.path);
        let (Ok(old), Ok(new)) = (
            std::str::from_utf8(change.base.as_deref().unwrap_or_default()),
            std::str::from_utf8(change.accepted),
        ) else {
            binary.push(name);
            continue;
        };
        patch.push_str(&format!("diff --git a/{name} b/{name}\n"));
        let from = if change.base.is_some() {
            format!("a/{name}")
        } else {
            patch.push_str("new file mode 100644\n");
            "/dev/null".to_owned()
        };
        let text = similar::TextDiff::from_lines(old, new);
        patch.push_str(
            &text
                .unified_diff()
                .context_radius(3)
                .header(&from, &format!("b/{name}"))
                .to_string(),
        );
    }
    patch
}

/// `kleene apply`.
pub fn apply(args: &StateArgs, rep: &mut Reporter) -> Outcome {
    let state = StateDir::at(&args.state);
    // The working tree is written: one writer of the state directory at a time.
    let _lock = state
        .lock("apply")
        .map_err(|e| Failure::halted(Chain(&e)))?;
    let key = env_journal_key(&state)?;
    let (info, loaded, evidence) = load_evidence(&state, key.as_ref())?;
    let changes = changes(&state, &evidence, loaded.files())?;
    let conflicts = conflicts(&info, &changes);
    if !conflicts.is_empty() {
        return Err(Failure::halted(format!(
            "apply: nothing was written; {} changed in {} since the run bound {}:\n  {}\n\
             restore {}, or apply the patch of `kleene diff` by hand",
            counted(conflicts.len() as u64, "file", "files"),
            info.plan_dir.display(),
            if conflicts.len() == 1 { "it" } else { "them" },
            conflicts.join("\n  "),
            if conflicts.len() == 1 { "it" } else { "them" },
        )));
    }
    for change in &changes {
        let target = info.plan_dir.join(change.path.as_str());
        write_replacing(&target, change.accepted)
            .map_err(|e| Failure::halted(format!("write {}: {e}", target.display())))?;
    }
    rep.say(&format!(
        "applied {} to {}",
        counted(changes.len() as u64, "accepted file", "accepted files"),
        info.plan_dir.display()
    ));
    Ok(Exit::Ok)
}

/// The files the changes would write that no longer hold what the run bound (a new file
/// that now exists with other bytes, a file edited or removed since, a link), each with why.
fn conflicts(info: &RunInfo, changes: &[Change<'_>]) -> Vec<String> {
    changes
        .iter()
        .filter_map(|change| {
            let target = info.plan_dir.join(change.path.as_str());
            let now = match std::fs::symlink_metadata(&target) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Some(format!("{} is a link now", change.path));
                }
                Ok(meta) if !meta.is_file() => {
                    return Some(format!("{} is not a regular file now", change.path));
                }
                Ok(_) => std::fs::read(&target).ok(),
                Err(_) => None,
            };
            match (&change.base, now) {
                (_, Some(now)) if now == change.accepted => None,
                (Some(base), Some(now)) if now == *base => None,
                (None, None) => None,
                (Some(_), None) => Some(format!("{} was removed", change.path)),
                (None, Some(_)) => Some(format!("{} was made", change.path)),
                (Some(_), Some(_)) => Some(format!("{} was edited", change.path)),
            }
        })
        .collect()
}

/// Writes `bytes` to `target` through a temporary file beside it and a rename, making its
/// directory where missing: a reader never sees half a file.
fn write_replacing(target: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp: PathBuf =
        target.with_file_name(format!(".{name}.kleene-apply-{}", std::process::id()));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        file.write_all(bytes)?;
        // A file that was there keeps its mode (an executable script stays one).
        if let Ok(meta) = std::fs::metadata(target) {
            file.set_permissions(meta.permissions())?;
        }
        file.sync_all()?;
        std::fs::rename(&tmp, target)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// What [`write_tree`] wrote: every file, and how many of them are accepted files.
pub(super) struct TreeWritten {
    pub(super) files: usize,
    pub(super) accepted: usize,
}

/// Makes `out` a directory holding the project as the run leaves it: every file the run
/// bound (`bound`, read from the run's own checked copy), with the accepted files of
/// `snapshot` over them. The tree is made beside `out` and renamed into place, so `out`
/// either holds all of it or does not exist.
pub(super) fn write_tree(
    state: &StateDir,
    out: &Path,
    bound: Option<PlanFiles>,
    snapshot: &Snapshot,
) -> Result<TreeWritten, Failure> {
    if std::fs::symlink_metadata(out).is_ok() {
        return Err(Failure::bad_input(format!(
            "export --tree: {} exists; name a directory that does not",
            out.display()
        )));
    }
    let base = with_bytes(state, bound, "export --tree: ")?.unwrap_or_default();
    let mut tree: BTreeMap<&AdmittedPath, &[u8]> = BTreeMap::new();
    for (path, _) in base.iter() {
        if let Some(bytes) = base.bytes(path) {
            tree.insert(path, bytes);
        }
    }
    for (path, file) in snapshot.files() {
        tree.insert(path, file.content());
    }
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let making = out.with_file_name(format!(".{name}.kleene-export-{}", std::process::id()));
    // Made here or not at all: what already stands at that name is someone else's, and is
    // neither written into nor removed.
    std::fs::create_dir(&making).map_err(|e| {
        Failure::halted(format!(
            "export --tree: make {} beside {}: {e}",
            making.display(),
            out.display()
        ))
    })?;
    let made = (|| {
        for (path, bytes) in &tree {
            let target = making.join(path.as_str());
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&target, bytes)?;
        }
        std::fs::rename(&making, out)
    })();
    if let Err(e) = made {
        let _ = std::fs::remove_dir_all(&making);
        return Err(Failure::halted(format!(
            "export --tree: make {}: {e}; nothing was left there",
            out.display()
        )));
    }
    Ok(TreeWritten {
        files: tree.len(),
        accepted: snapshot.len(),
    })
}
