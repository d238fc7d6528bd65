//! Bounded stdout/stderr tails: the evidence that reaches a fix task.

use serde::{Deserialize, Serialize};

/// Byte bounds for each stream of an [`OutputTail`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TailLimits {
    /// Most bytes kept of stdout, markers included.
    pub stdout: usize,
    /// Most bytes kept of stderr, markers included.
    pub stderr: usize,
}

impl Default for TailLimits {
    /// 4 KiB for each stream.
    fn default() -> Self {
        Self {
            stdout: 4096,
            stderr: 4096,
        }
    }
}

/// A bounded tail of a process's stdout and stderr.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OutputTail {
    stdout: String,
    stderr: String,
}

impl OutputTail {
    /// Captures bounded tails of `stdout` and `stderr` (lossy UTF-8).
    pub fn capture(stdout: &[u8], stderr: &[u8], limits: TailLimits) -> Self {
        Self {
            stdout: bounded(&String::from_utf8_lossy(stdout), limits.stdout),
            stderr: bounded(&String::from_utf8_lossy(stderr), limits.stderr),
        }
    }

    /// The kept part of stdout.
    pub fn stdout(&self) -> &str {
        &self.stdout
    }

    /// The kept part of stderr.
    pub fn stderr(&self) -> &str {
        &self.stderr
    }
}

fn bounded(s: &str, limit: usize) -> String {
    if s.len() <= limit {
        return s.to_owned();
    }
    let mut start = s.len() - limit;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s[start..].to_owned()
}
