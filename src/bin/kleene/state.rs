//! The state directory of a run: what it ran, where, on which channel, and what it learned.
//!
//! ```text
//! STATE/run.json          the run's settings: channel, workspace, plan location, policy
//! STATE/plan.json         the plan file exactly as it was run (resume never re-reads PLAN)
//! STATE/journal/          the batch evidence journal (checksummed events, torn tail cut)
//! STATE/closures/         one JSON closure record per task call (verdicts, audit chain)
//! STATE/specs/            the recovery specs handed to `fix` commands
//! STATE/acceptance.json   written by `kleene accept`
//! STATE/workspace/        the default workspace
//! ```

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Settings of a run, fixed when it starts so a resume behaves the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunInfo {
    /// The channel the evidence is bound to.
    pub channel: String,
    /// Where commands run (absolute).
    pub workspace: PathBuf,
    /// The plan file as given (for messages).
    pub plan_file: PathBuf,
    /// The plan file's directory (absolute), exported to commands as `KLEENE_PLAN_DIR`.
    pub plan_dir: PathBuf,
    /// Deepest fix subtask.
    pub max_depth: u32,
    /// Most fix subtasks in the whole run.
    pub max_fixes: u32,
    /// Whether warnings are auto-fixed.
    pub recover_warnings: bool,
    /// Whether failed roots get one corrective call.
    pub batch_recovery: bool,
    /// Timeout of each command for tasks that set none, in seconds.
    pub timeout_secs: f64,
}

/// Why the state directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A run already lives there.
    #[error(
        "start a run in {}: it already holds the run on channel {channel}; \
         use `kleene resume --state {}` or another --state",
        dir.display(), dir.display()
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
    #[error("access {}: {source}", path.display())]
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

/// Writes `bytes` to `path` through a temporary file and a rename, so a reader never sees
/// half a file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    let tmp = path.with_extension("tmp");
    let mut file = fs::File::create(&tmp).map_err(io(&tmp))?;
    file.write_all(bytes).map_err(io(&tmp))?;
    file.sync_all().map_err(io(&tmp))?;
    fs::rename(&tmp, path).map_err(io(path))
}

impl StateDir {
    /// The state directory at `root`, not yet checked.
    pub fn at(root: &Path) -> Self {
        Self {
            root: root.to_owned(),
        }
    }

    /// Creates the layout for a new run, refusing a directory that already holds one.
    ///
    /// # Errors
    ///
    /// [`StateError::Occupied`] when a run lives there; [`StateError::Io`] otherwise.
    pub fn create(&self, info: &RunInfo, plan_text: &str) -> Result<(), StateError> {
        if let Ok((existing, _)) = self.open() {
            return Err(StateError::Occupied {
                dir: self.root.clone(),
                channel: existing.channel,
            });
        }
        for dir in [
            self.closures_dir(),
            self.specs_dir(),
            info.workspace.clone(),
        ] {
            fs::create_dir_all(&dir).map_err(io(&dir))?;
        }
        let plan = self.plan_path();
        write_atomic(&plan, plan_text.as_bytes())?;
        let json = serde_json::to_string_pretty(info).map_err(|e| StateError::Corrupt {
            path: self.run_path(),
            message: e.to_string(),
        })?;
        // run.json last: its presence means the layout is complete.
        write_atomic(&self.run_path(), json.as_bytes())
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
        let info: RunInfo = serde_json::from_str(&text).map_err(|e| StateError::Corrupt {
            path: run.clone(),
            message: e.to_string(),
        })?;
        let plan = self.plan_path();
        let plan_text = fs::read_to_string(&plan).map_err(io(&plan))?;
        Ok((info, plan_text))
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
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

    /// Where closure records go.
    pub fn closures_dir(&self) -> PathBuf {
        self.root.join("closures")
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
        state.create(&info, "{\"tasks\": []}").unwrap();
        let (back, plan) = state.open().unwrap();
        assert_eq!(back, info);
        assert_eq!(plan, "{\"tasks\": []}");
        assert!(info.workspace.is_dir());
        let err = state.create(&info, "{}").unwrap_err();
        assert!(err.to_string().contains("kleene resume"), "{err}");
    }

    #[test]
    fn a_foreign_run_file_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::at(tmp.path());
        fs::write(tmp.path().join("run.json"), "{\"x\": 1}").unwrap();
        assert!(matches!(state.open(), Err(StateError::Corrupt { .. })));
    }
}
