//! The state directory of a run: what it ran, where, on which channel, and what it learned.
//!
//! ```text
//! STATE/run.json          the run's settings: channel, workspace, plan location, policy
//! STATE/plan.json         the plan file exactly as it was run (resume runs this copy and
//!                         refuses if PLAN changed since)
//! STATE/journal/          the batch evidence journal (checksummed records; a torn tail is
//!                         cut only by run or resume, which say so)
//! STATE/closures.jsonl    one closure record per task call, a JSON line each (verdicts,
//!                         the hash-chained audit log)
//! STATE/specs/            the recovery specs handed to `fix` commands
//! STATE/acceptance.json   written by `kleene accept`
//! STATE/workspace/        the default workspace: every accepted file, written after the run
//! STATE/stages/           one staged workspace per running call (removed when it settles)
//! STATE/objects/          accepted file contents by blake3, linked into stages (read-only)
//! STATE/cache/            KLEENE_CACHE_DIR: a build cache commands may share between calls
//! STATE/running/          the process group of each running command (see `runner`)
//! STATE/lock              held (flock) by the one command that writes the directory
//! ```
//!
//! Every command that writes the directory (`run`, `resume`, `accept`, `export`) first takes
//! an exclusive lock on `STATE/lock`; a second writer is refused at once, naming the holder.
//! Readers (`status`, `audit`, `verify`) never take it and never write.

use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use kleene::error::Chain;
use kleene::shell::{PlanFiles, PlanFilesManifest};
use kleene::{closure::ClosureRecord, id::TaskId};

use crate::formats::{
    RunFile, RunInfo, decode_closure_line, decode_run_file, encode_closure_line, encode_run_file,
};

/// The closure log this process appends to, held while a line is appended.
static CLOSURE_LOG: std::sync::Mutex<Option<OpenLog>> = std::sync::Mutex::new(None);

/// The closure log this process last appended to, kept open.
#[derive(Debug)]
struct OpenLog {
    path: PathBuf,
    file: fs::File,
    ino: u64,
    dev: u64,
    /// Its length after this process's last append: every byte of it whole lines.
    len: u64,
}

impl OpenLog {
    /// Opens the closure log at `path` for appending (made if missing), a torn last line cut
    /// away first.
    fn open(path: &Path) -> Result<Self, StateError> {
        let mut file = fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)
            .map_err(io(path))?;
        let whole = whole_lines_len(&mut file).map_err(io(path))?;
        let meta = file.metadata().map_err(io(path))?;
        if whole != meta.len() {
            file.set_len(whole).map_err(io(path))?;
        }
        Ok(Self {
            path: path.to_owned(),
            file,
            ino: meta.ino(),
            dev: meta.dev(),
            len: whole,
        })
    }
}

/// Why the state directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Another kleene holds the state directory's lock.
    #[error(
        "lock {}: another kleene is writing this state directory ({holder}); wait for it to \
         finish, or stop it, then run the command again",
        path.display()
    )]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// Who holds it, as the holder wrote it (pid and command).
        holder: String,
    },
    /// A run already lives there.
    #[error(
        "start a run in {}: it already holds the run on channel {channel}; \
         continue it with `kleene resume --state {}`, start over with `kleene run PLAN \
         --state {} --restart` (after editing the plan, say; the old run is kept beside it), \
         or choose another --state",
        dir.display(), dir.display(), dir.display()
    )]
    Occupied {
        /// The state directory.
        dir: PathBuf,
        /// The channel of the existing run.
        channel: String,
    },
    /// No run lives there.
    #[error("find a run in {}: no run.json (start one with `kleene run PLAN --state {}`)", dir.display(), dir.display())]
    NoRun {
        /// The state directory.
        dir: PathBuf,
    },
    /// A file could not be read or written.
    #[error("access {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A state file is not what kleene wrote.
    #[error("read {}: {message}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// One line of the closure log.
#[derive(Debug)]
pub struct ClosureEntry {
    /// Its line number, from 1.
    pub line: usize,
    /// The format the line declared (`None`: the first layout, or unreadable).
    pub format: Option<u32>,
    /// The task, as written.
    pub task: String,
    /// The call number.
    pub call: u32,
    /// The record, or why it could not be read.
    pub record: Result<ClosureRecord, String>,
}

impl ClosureEntry {
    fn parse(line_no: usize, line: &str) -> Self {
        match decode_closure_line(line) {
            Ok(decoded) => Self {
                line: line_no,
                format: decoded.format,
                task: decoded.task,
                call: decoded.call,
                record: Ok(decoded.record),
            },
            Err(e) => {
                // Name what can still be read of a damaged line.
                let value: Option<serde_json::Value> = serde_json::from_str(line).ok();
                let field = |k: &str| value.as_ref().and_then(|v| v.get(k).cloned());
                Self {
                    line: line_no,
                    format: None,
                    task: field("task")
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_else(|| "?".to_owned()),
                    call: field("call")
                        .and_then(|v| v.as_u64())
                        .and_then(|c| u32::try_from(c).ok())
                        .unwrap_or(0),
                    record: Err(e.to_string()),
                }
            }
        }
    }
}

/// An opened state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_owned(),
        source,
    }
}

/// A temporary name beside `path`, unique to this process and call, so two writers (or a
/// crash leftover) never share one.
fn temp_beside(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// The exclusive writer's lock on a state directory, released when dropped (or when the
/// process dies, whatever kills it).
#[derive(Debug)]
pub struct WriterLock {
    _lock: nix::fcntl::Flock<fs::File>,
}

/// Writes `bytes` to `path` through a temporary file and a rename, so a reader never sees
/// half a file. The rename is durable once the caller syncs the directory (`sync_dir`).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    through_temp(path, |tmp| {
        let mut file = fs::File::create(tmp).map_err(io(tmp))?;
        file.write_all(bytes).map_err(io(tmp))?;
        file.sync_all().map_err(io(tmp))
    })
}

/// The directory that holds `path`'s entry.
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Makes the entries of `dir` durable: a file renamed or a directory made in it.
fn sync_dir(dir: &Path) -> Result<(), StateError> {
    sync_dir_if_readable(dir, false)
}

/// `sync_dir` of a directory kleene only made an entry in: one it may write in but not read
/// (mode -wx) cannot be opened to sync, and its entries stay as durable as its file system
/// makes them.
fn sync_parent(dir: &Path) -> Result<(), StateError> {
    sync_dir_if_readable(dir, true)
}

fn sync_dir_if_readable(dir: &Path, unreadable_is_fine: bool) -> Result<(), StateError> {
    match fs::File::open(dir) {
        Ok(opened) => {
            #[cfg(test)]
            tests::SYNCED.with(|synced| synced.borrow_mut().push(dir.to_owned()));
            opened.sync_all().map_err(io(dir))
        }
        Err(e) if unreadable_is_fine && e.kind() == std::io::ErrorKind::PermissionDenied => Ok(()),
        Err(e) => Err(io(dir)(e)),
    }
}

/// Creates `dir` and its missing ancestors, each named durably in its parent: a state
/// directory whose own entry a power loss takes loses its journal with it.
fn create_dir_durably(dir: &Path) -> Result<(), StateError> {
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|a| !a.as_os_str().is_empty() && fs::symlink_metadata(a).is_err())
        .collect();
    match fs::metadata(dir) {
        // create_dir_all would say only "File exists" of a file where the directory goes.
        Ok(meta) if !meta.is_dir() => {
            return Err(io(dir)(nix::errno::Errno::ENOTDIR.into()));
        }
        _ => fs::create_dir_all(dir).map_err(io(dir))?,
    }
    missing
        .iter()
        .rev()
        .try_for_each(|made| sync_parent(parent_dir(made)))
}

/// Writes a temporary file beside `path` with `write`, then renames it to `path`. A failed
/// write (a full disk) leaves no temporary file behind.
fn through_temp(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<(), StateError>,
) -> Result<(), StateError> {
    let tmp = temp_beside(path);
    let written = write(&tmp).and_then(|()| fs::rename(&tmp, path).map_err(io(path)));
    if written.is_err() {
        // Best effort: what cannot be removed is a hidden file kleene never reads.
        let _ = fs::remove_file(&tmp);
    }
    written
}

impl StateDir {
    /// The state directory at `root`, not yet checked.
    pub fn at(root: &Path) -> Self {
        Self {
            root: root.to_owned(),
        }
    }

    /// Takes the writer's lock, creating the directory if needed; `command` says who holds it.
    ///
    /// # Errors
    ///
    /// [`StateError::Locked`] naming the holder when another process holds it;
    /// [`StateError::Io`] when the directory or lock file cannot be made.
    pub fn lock(&self, command: &str) -> Result<WriterLock, StateError> {
        use nix::fcntl::{Flock, FlockArg};
        // The root's own entry is made durable by `create`, with everything a new run writes
        // (a directory that only ever holds a lock needs no durability).
        if let Some(parent) = self.root.parent().filter(|p| !p.as_os_str().is_empty()) {
            create_dir_durably(parent)?;
        }
        fs::create_dir_all(&self.root).map_err(io(&self.root))?;
        let path = self.root.join("lock");
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io(&path))?;
        // A writer that was just killed can hold the lock a moment longer through a child
        // caught between fork and exec: wait that long, not for a live writer.
        let mut file = file;
        let mut tries = 0;
        let locked = loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Err((back, nix::errno::Errno::EWOULDBLOCK)) if tries < 10 => {
                    file = back;
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => break other,
            }
        };
        match locked {
            Ok(mut lock) => {
                let holder = format!("pid {} running `kleene {command}`", std::process::id());
                // Who holds it is for the refusal message only: a failed write is harmless, and
                // nothing is synced (another process reads it from the page cache, and after a
                // crash the lock is free and the name stale).
                let _ = lock.set_len(0);
                let _ = lock.write_all(holder.as_bytes());
                Ok(WriterLock { _lock: lock })
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                // The holder writes who it is right after it takes the lock: give it a moment.
                let mut holder = None;
                for _ in 0..20 {
                    holder = fs::read_to_string(&path)
                        .ok()
                        .filter(|h| !h.trim().is_empty());
                    if holder.is_some() {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                let holder =
                    holder.unwrap_or_else(|| "a process that has not said who it is".to_owned());
                Err(StateError::Locked {
                    path,
                    holder: holder.trim().to_owned(),
                })
            }
            Err((_, errno)) => Err(io(&path)(errno.into())),
        }
    }

    /// Who holds the writer's lock now (pid and command, as the holder wrote them), or
    /// `None` when no kleene is writing the directory: a run in flight is then interrupted,
    /// not running. Takes nothing a writer waits on for longer than a look.
    pub fn writer(&self) -> Option<String> {
        use nix::fcntl::{Flock, FlockArg};
        let path = self.root.join("lock");
        let file = fs::File::open(&path).ok()?;
        match Flock::lock(file, FlockArg::LockSharedNonblock) {
            Ok(_free) => None,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => Some(
                fs::read_to_string(&path)
                    .ok()
                    .map(|h| h.trim().to_owned())
                    .filter(|h| !h.is_empty())
                    .unwrap_or_else(|| "a kleene that has not said who it is".to_owned()),
            ),
            Err(_) => None,
        }
    }

    /// Creates the layout for a new run, refusing a directory that already holds one.
    ///
    /// # Errors
    ///
    /// [`StateError::Occupied`] when a run lives there; [`StateError::Io`] otherwise.
    pub fn create(
        &self,
        info: &RunInfo,
        plan_text: &str,
        plan_files: Option<&PlanFiles>,
    ) -> Result<(), StateError> {
        if let Ok((existing, _)) = self.open() {
            return Err(StateError::Occupied {
                dir: self.root.clone(),
                channel: existing.channel,
            });
        }
        // The journal's directory is made here, so that the sync below names it durably
        // with the rest instead of a sync of its own when the journal opens.
        for dir in [self.specs_dir(), info.workspace.clone(), self.journal_dir()] {
            fs::create_dir_all(&dir).map_err(io(&dir))?;
        }
        let plan = self.plan_path();
        write_atomic(&plan, plan_text.as_bytes())?;
        // Before run.json: a run is never opened with its plan but without the files the
        // plan binds (a disk that fills here leaves no run to resume, only to start again).
        if let Some(files) = plan_files {
            self.save_plan_files(files)?;
        }
        // Everything above is named durably before run.json says the layout is complete,
        // and run.json before the journal records a call: one sync of the directory each.
        // The root's own entry first: on a journaling file system the root's sync then
        // finds its changes committed, so the two cost about one.
        sync_parent(parent_dir(&self.root))?;
        sync_dir(&self.root)?;
        let json = encode_run_file(info, &self.absolute_root()?);
        write_atomic(&self.run_path(), json.as_bytes())?;
        sync_dir(&self.root)
    }

    /// The run's settings and the plan text it ran.
    ///
    /// # Errors
    ///
    /// [`StateError::NoRun`] when no run lives there; [`StateError::Corrupt`] when a state
    /// file is not kleene's.
    pub fn open(&self) -> Result<(RunInfo, String), StateError> {
        let run = self.run_path();
        let text = match fs::read_to_string(&run) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StateError::NoRun {
                    dir: self.root.clone(),
                });
            }
            Err(e) => return Err(io(&run)(e)),
        };
        let root = self.absolute_root()?;
        let RunFile { mut info, format } =
            decode_run_file(&text, &root).map_err(|e| StateError::Corrupt {
                path: run.clone(),
                message: e.to_string(),
            })?;
        let own = root.join("workspace");
        // Before format 2 even the default workspace was saved as an absolute path, so a
        // directory moved since names its old place. A `workspace` directory of its own
        // means it ran with the default (only the workspace it ran with is ever created).
        if format < 2
            && info.workspace != own
            && info.workspace.file_name() == Some("workspace".as_ref())
            && own.is_dir()
        {
            info.workspace = own;
        }
        let plan = self.plan_path();
        let plan_text = fs::read_to_string(&plan).map_err(io(&plan))?;
        Ok((info, plan_text))
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory as an absolute path (what a relative workspace is resolved against).
    fn absolute_root(&self) -> Result<PathBuf, StateError> {
        std::path::absolute(&self.root).map_err(io(&self.root))
    }

    fn run_path(&self) -> PathBuf {
        self.root.join("run.json")
    }

    /// The plan file as run.
    pub fn plan_path(&self) -> PathBuf {
        self.root.join("plan.json")
    }

    /// The evidence journal's directory.
    pub fn journal_dir(&self) -> PathBuf {
        self.root.join("journal")
    }

    /// The closure log: one JSON line per task call.
    pub fn closure_log_path(&self) -> PathBuf {
        self.root.join("closures.jsonl")
    }

    /// Appends the closure record of `call` of `task` to the closure log.
    ///
    /// Appending to one file (no file created per call) keeps a run's cost per task flat; it
    /// is not synced: the journal is the authority, and `kleene audit` reports a record
    /// missing or torn after a power cut. A line cut short by a failed write (a full disk)
    /// is cut off again, and so is a torn last line left by a crash before the next line
    /// is written, so one torn line never swallows the record after it.
    ///
    /// # Errors
    ///
    /// [`StateError::Io`] when the log cannot be written; the log is left as it was.
    pub fn append_closure(
        &self,
        task: &TaskId,
        call: u32,
        record: &ClosureRecord,
    ) -> Result<(), StateError> {
        let line = encode_closure_line(task, call, record);
        self.append_closure_line(line)
    }

    /// [`append_closure`](Self::append_closure) for a record given as its text (a reused
    /// call's record as the cache kept it).
    ///
    /// # Errors
    ///
    /// As [`append_closure`](Self::append_closure).
    pub fn append_closure_text(
        &self,
        task: &TaskId,
        call: u32,
        record: &str,
    ) -> Result<(), StateError> {
        self.append_closure_line(crate::formats::encode_closure_text(task, call, record))
    }

    fn append_closure_line(
        &self,
        line: Result<Vec<u8>, serde_json::Error>,
    ) -> Result<(), StateError> {
        let path = self.closure_log_path();
        let mut text = line.map_err(|e| StateError::Corrupt {
            path: path.clone(),
            message: e.to_string(),
        })?;
        text.push(b'\n');
        // The calls in flight together append from their own threads: the torn-tail check,
        // the cut and the write go together, or one thread's check sees another's line half
        // written and cuts it away. (One process writes a state directory: its lock.)
        let mut open = CLOSURE_LOG
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The log stays open between appends (every call appends once): only a log this
        // process has not written yet, or one that changed under it, is checked for a torn
        // tail again.
        let same = match (&*open, fs::metadata(&path)) {
            (Some(log), Ok(now)) => {
                log.path == path
                    && log.ino == now.ino()
                    && log.dev == now.dev()
                    && log.len == now.len()
            }
            _ => false,
        };
        let log = match open.take() {
            Some(log) if same => open.insert(log),
            _ => open.insert(OpenLog::open(&path)?),
        };
        // One write of the whole line: concurrent readers never see half of it in practice.
        if let Err(e) = log.file.write_all(&text) {
            // Best effort: a log that cannot even be cut back is reported by `kleene audit`.
            let _ = log.file.set_len(log.len);
            *open = None;
            return Err(io(&path)(e));
        }
        log.len += text.len() as u64;
        Ok(())
    }

    /// Every entry of the closure log, in the order written.
    pub fn closure_log(&self) -> Vec<ClosureEntry> {
        let Ok(text) = fs::read_to_string(self.closure_log_path()) else {
            return Vec::new();
        };
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, line)| ClosureEntry::parse(i + 1, line))
            .collect()
    }

    /// The manifest of the plan's files the run binds (absent for a run started before
    /// plans carried their files).
    pub fn plan_files_manifest_path(&self) -> PathBuf {
        self.root.join("plan-files.json")
    }

    /// The run's copy of the plan's files: `KLEENE_PLAN_DIR` for its commands.
    pub fn plan_files_dir(&self) -> PathBuf {
        self.root.join("plan-files")
    }

    /// Keeps the plan's files: their copy first, then the manifest that says it is whole.
    ///
    /// # Errors
    ///
    /// [`StateError::Io`] when a file cannot be written.
    fn save_plan_files(&self, files: &PlanFiles) -> Result<(), StateError> {
        let dir = self.plan_files_dir();
        if dir.exists() {
            fs::remove_dir_all(&dir).map_err(io(&dir))?;
        }
        // Made here, so that `create`'s sync of the root names it durably; the copy syncs
        // its own files and the directories below.
        fs::create_dir(&dir).map_err(io(&dir))?;
        files.write_copy(&dir).map_err(|e| StateError::Corrupt {
            path: dir.clone(),
            message: Chain(&e).to_string(),
        })?;
        let manifest =
            serde_json::to_string_pretty(&files.manifest()).map_err(|e| StateError::Corrupt {
                path: self.plan_files_manifest_path(),
                message: e.to_string(),
            })?;
        write_atomic(&self.plan_files_manifest_path(), manifest.as_bytes())
    }

    /// The plan's files the run binds, `None` for a run started before plans carried them.
    ///
    /// # Errors
    ///
    /// [`StateError::Corrupt`] when the manifest is not kleene's.
    pub fn plan_files(&self) -> Result<Option<PlanFiles>, StateError> {
        let path = self.plan_files_manifest_path();
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&path)(e)),
        };
        let manifest: PlanFilesManifest =
            serde_json::from_str(&text).map_err(|e| StateError::Corrupt {
                path: path.clone(),
                message: e.to_string(),
            })?;
        Ok(Some(PlanFiles::from_manifest(manifest)))
    }

    /// Where recovery specs go.
    pub fn specs_dir(&self) -> PathBuf {
        self.root.join("specs")
    }

    /// The acceptance record.
    pub fn acceptance_path(&self) -> PathBuf {
        self.root.join("acceptance.json")
    }

    /// The default workspace.
    pub fn default_workspace(&self) -> PathBuf {
        self.root.join("workspace")
    }

    /// Where each call's staged workspace is made.
    pub fn stages_dir(&self) -> PathBuf {
        self.root.join("stages")
    }

    /// Where running process groups are recorded.
    pub fn running_dir(&self) -> PathBuf {
        self.root.join("running")
    }
}

/// The length of `file` up to and including its last newline: what is left of it once a
/// torn last line is cut off.
fn whole_lines_len(file: &mut fs::File) -> std::io::Result<u64> {
    use std::io::{Read, Seek, SeekFrom};
    const CHUNK: u64 = 4096;
    let mut end = file.seek(SeekFrom::End(0))?;
    let mut last = [0u8; 1];
    if end > 0 {
        // The usual case: the log ends with a whole line.
        file.seek(SeekFrom::Start(end - 1))?;
        file.read_exact(&mut last)?;
        if last[0] == b'\n' {
            return Ok(end);
        }
    }
    let mut buf = vec![0; CHUNK as usize];
    while end > 0 {
        let start = end.saturating_sub(CHUNK);
        let len = usize::try_from(end - start).unwrap_or(buf.len());
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buf[..len])?;
        if let Some(at) = buf[..len].iter().rposition(|&b| b == b'\n') {
            return Ok(start + at as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::strategy::Strategy as _;

    thread_local! {
        /// The directories `sync_dir` synced on this thread.
        pub(super) static SYNCED: std::cell::RefCell<Vec<PathBuf>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }

    fn take_synced() -> Vec<PathBuf> {
        SYNCED.with(|synced| std::mem::take(&mut *synced.borrow_mut()))
    }

    /// A new state directory is named durably in every directory made for it, and what a
    /// new run writes into it is named durably there, run.json last: otherwise a power loss
    /// can take the directory, journal and all, after its journal said its records were safe.
    #[test]
    fn a_new_state_directory_and_its_files_are_named_durably() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("a").join("state");
        let state = StateDir::at(&root);
        take_synced();
        let lock = state.lock("test").unwrap();
        assert_eq!(take_synced(), [tmp.path().to_owned()]);
        state
            .create(&info(tmp.path()), "{\"tasks\": []}", None)
            .unwrap();
        assert_eq!(
            take_synced(),
            [tmp.path().join("a"), root.clone(), root.clone()]
        );
        assert!(state.journal_dir().is_dir());
        drop(lock);
        // Taking the lock of a directory that exists makes and syncs nothing.
        let _lock = state.lock("test").unwrap();
        assert_eq!(take_synced(), Vec::<PathBuf>::new());
    }

    /// A write that fails (here the rename, onto a directory that holds a file; on a full
    /// disk, the write) leaves no temporary file beside its target.
    #[test]
    fn a_failed_write_leaves_no_temporary_file() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("taken");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("inside"), "x").unwrap();
        assert!(write_atomic(&target, b"record").is_err());
        let names: Vec<_> = fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["taken"]);
    }

    /// The calls in flight together append their closure records from their own threads:
    /// every record is kept (one thread's torn-tail check cut away a line another was still
    /// writing: 19 of 2001 records were missing after one run with two jobs).
    #[test]
    fn closure_records_appended_from_many_threads_are_all_kept() {
        let fixture = include_str!("../../tests/fixtures/cli_state_v0/closures.jsonl");
        let line = crate::formats::decode_closure_line(fixture.lines().next().unwrap()).unwrap();
        let task = TaskId::new(line.task).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::at(tmp.path());
        const THREADS: u32 = 4;
        const EACH: u32 = 250;
        std::thread::scope(|scope| {
            for t in 0..THREADS {
                let (state, task, record) = (&state, &task, &line.record);
                scope.spawn(move || {
                    for i in 0..EACH {
                        state.append_closure(task, t * EACH + i, record).unwrap();
                    }
                });
            }
        });
        let log = state.closure_log();
        let mut calls: Vec<u32> = log.iter().map(|e| e.call).collect();
        calls.sort_unstable();
        assert_eq!(calls, (0..THREADS * EACH).collect::<Vec<_>>());
        assert!(log.iter().all(|e| e.record.is_ok()));
    }

    proptest::proptest! {
        /// Whatever a closure log holds, what is kept is everything up to its last newline
        /// (however far back, across the chunks it is read in), and nothing when it has none.
        #[test]
        fn the_whole_lines_are_everything_up_to_the_last_newline(
            lines in proptest::collection::vec(proptest::num::u8::ANY, 0..3_000),
            torn in proptest::collection::vec(
                proptest::num::u8::ANY.prop_filter("no newline", |&b| b != b'\n'),
                0..10_000,
            ),
        ) {
            let bytes = [lines.as_slice(), torn.as_slice()].concat();
            let tmp = tempfile::tempdir().unwrap();
            let path = tmp.path().join("log");
            fs::write(&path, &bytes).unwrap();
            let mut file = fs::File::open(&path).unwrap();
            let expected = lines.iter().rposition(|&b| b == b'\n').map_or(0, |at| at as u64 + 1);
            proptest::prop_assert_eq!(whole_lines_len(&mut file).unwrap(), expected);
        }
    }

    fn info(dir: &Path) -> RunInfo {
        RunInfo {
            channel: "c1".into(),
            workspace: dir.join("ws"),
            plan_file: "plan.json".into(),
            plan_dir: dir.to_owned(),
            max_depth: 3,
            max_fixes: 10,
            recover_warnings: false,
            batch_recovery: false,
            timeout_secs: 600.0,
        }
    }

    #[test]
    fn create_open_and_refuse_a_second_run() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::at(&tmp.path().join("st"));
        assert!(matches!(state.open(), Err(StateError::NoRun { .. })));
        let info = info(tmp.path());
        state.create(&info, "{\"tasks\": []}", None).unwrap();
        let (back, plan) = state.open().unwrap();
        assert_eq!(back, info);
        assert_eq!(plan, "{\"tasks\": []}");
        assert!(info.workspace.is_dir());
        let err = state.create(&info, "{}", None).unwrap_err();
        assert!(err.to_string().contains("kleene resume"), "{err}");
    }

    #[test]
    fn a_state_directory_below_a_file_is_refused_naming_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("file");
        fs::write(&file, "x").unwrap();
        let err = StateDir::at(&file.join("st")).lock("test").unwrap_err();
        let text = Chain(&err).to_string();
        assert!(
            text.contains(&file.display().to_string()) && text.contains("Not a directory"),
            "{text}"
        );
    }

    #[test]
    fn a_second_writer_is_refused_naming_the_first() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::at(&tmp.path().join("st"));
        let first = state.lock("run plan.json").unwrap();
        let err = state.lock("resume").unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, StateError::Locked { .. }), "{text}");
        assert!(
            text.contains(&format!("pid {}", std::process::id())) && text.contains("kleene run"),
            "{text}"
        );
        drop(first);
        assert!(state.lock("resume").is_ok());
    }

    #[test]
    fn a_foreign_run_file_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::at(tmp.path());
        fs::write(tmp.path().join("run.json"), "{\"x\": 1}").unwrap();
        assert!(matches!(state.open(), Err(StateError::Corrupt { .. })));
    }
}
