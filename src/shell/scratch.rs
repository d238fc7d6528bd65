//! Scratch globs as a stage's rule: what a call leaves there is never part of its candidate.
//!
//! ```
//! use kleene::plan::PathGlob;
//! use kleene::stage::ScratchRule;
//! use kleene::shell::Scratch;
//!
//! let scratch = Scratch::new([PathGlob::parse("target/**")?].iter());
//! assert!(scratch.is_scratch("target/debug/app"));
//! assert!(scratch.covers_dir("target"));
//! assert!(!scratch.is_scratch("src/main.rs"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::plan::PathGlob;
use crate::stage::ScratchRule;

/// Scratch globs as the stage's rule: a path is scratch when any glob matches it, and a
/// directory is skipped whole when a glob `P/**` has a `P` that matches the directory itself
/// (then every path beneath it matches).
#[derive(Debug, Clone, Default)]
pub struct Scratch {
    globs: Vec<PathGlob>,
    subtrees: Vec<PathGlob>,
}

impl Scratch {
    /// The rule of `globs`.
    pub fn new<'g>(globs: impl Iterator<Item = &'g PathGlob>) -> Self {
        let globs: Vec<PathGlob> = globs.cloned().collect();
        let subtrees = globs
            .iter()
            .filter_map(|g| g.as_str().strip_suffix("/**"))
            .filter_map(|prefix| PathGlob::parse(prefix).ok())
            .collect();
        Self { globs, subtrees }
    }
}

impl ScratchRule for Scratch {
    fn is_scratch(&self, path: &str) -> bool {
        self.globs.iter().any(|g| g.matches(path))
    }

    fn covers_dir(&self, dir: &str) -> bool {
        self.subtrees.iter().any(|g| g.matches(dir))
    }
}
