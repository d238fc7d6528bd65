//! Where a worker's calls run: a stage directory per call under one directory, sharing one
//! content-addressed object store, and the scratch and refusal rules `kleene run` applies to
//! what a call leaves in its stage.
//!
//! ```
//! use kleene_restate::shell::Runner;
//!
//! let dir = tempfile::tempdir()?;
//! let runner = Runner::open(dir.path())?;
//! # let _ = runner;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The calls themselves are closures run by [`crate::closure::ShellAgent`].

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use kleene::plan::PathGlob;
use kleene::stage::{ObjectStore, ScratchRule};

/// Runs calls in stages under one directory, sharing one content-addressed object store.
#[derive(Debug)]
pub struct Runner {
    store: ObjectStore,
    stages: PathBuf,
    serial: AtomicU64,
}

/// Why a runner could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("open the worker's cache in {dir}")]
pub struct RunnerError {
    dir: PathBuf,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl Runner {
    /// A runner keeping its objects and stages under `dir` (made absolute, so the stage a
    /// command is given as `KLEENE_WORKSPACE` holds after it changes directory).
    ///
    /// # Errors
    ///
    /// [`RunnerError`] when the directories cannot be made.
    pub fn open(dir: &Path) -> Result<Self, RunnerError> {
        let err = |source: Box<dyn std::error::Error + Send + Sync>| RunnerError {
            dir: dir.to_owned(),
            source,
        };
        let dir = &std::path::absolute(dir).map_err(|e| err(Box::new(e)))?;
        let store = ObjectStore::open(dir.join("objects")).map_err(|e| err(Box::new(e)))?;
        let stages = dir.join("stages");
        std::fs::create_dir_all(&stages).map_err(|e| err(Box::new(e)))?;
        Ok(Self {
            store,
            stages,
            serial: AtomicU64::new(0),
        })
    }

    /// A fresh stage directory for a call named `label` (unique per process and call).
    pub(crate) fn stage_root(&self, label: &str) -> PathBuf {
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        self.stages
            .join(format!("{label}-{}-{serial}", std::process::id()))
    }

    /// Where a recovery spec named `name` is written (beside the stages, never in one).
    pub(crate) fn spec_path(&self, name: &str) -> PathBuf {
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        self.stages
            .join(format!("{name}-{}-{serial}.md", std::process::id()))
    }

    /// The object store the stages link their inputs from.
    pub(crate) fn store(&self) -> &ObjectStore {
        &self.store
    }
}

/// Scratch globs as the stage's rule, as `kleene run` applies them: a path is scratch when a
/// glob matches it, and a directory is skipped whole when a glob `P/**` has a `P` that
/// matches the directory itself.
pub(crate) struct Scratch<'a> {
    globs: &'a [PathGlob],
    subtrees: Vec<PathGlob>,
}

impl<'a> Scratch<'a> {
    pub(crate) fn new(globs: &'a [PathGlob]) -> Self {
        let subtrees = globs
            .iter()
            .filter_map(|g| g.as_str().strip_suffix("/**"))
            .filter_map(|prefix| PathGlob::parse(prefix).ok())
            .collect();
        Self { globs, subtrees }
    }
}

impl ScratchRule for Scratch<'_> {
    fn is_scratch(&self, path: &str) -> bool {
        self.globs.iter().any(|g| g.matches(path))
    }

    fn covers_dir(&self, dir: &str) -> bool {
        self.subtrees.iter().any(|g| g.matches(dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runner_opened_at_a_relative_dir_gives_commands_absolute_paths() {
        // Named relative to the directory the tests run in.
        let tmp = tempfile::tempdir_in(".").unwrap();
        let dir = PathBuf::from(tmp.path().file_name().unwrap());
        let runner = Runner::open(&dir).unwrap();
        let stage = runner.stage_root("t-1");
        let spec = runner.spec_path("t.call1");
        assert!(stage.is_absolute(), "{}", stage.display());
        assert!(spec.is_absolute(), "{}", spec.display());
        let here = std::env::current_dir().unwrap().join(&dir);
        assert!(
            stage.starts_with(here.join("stages")),
            "{}",
            stage.display()
        );
    }
}
