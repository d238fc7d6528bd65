//! Bounded stdout/stderr tails: the evidence that reaches a fix task.
//!
//! A plain "last N bytes" window loses exactly what a fix needs: with `RUST_BACKTRACE=1`
//! the stack frames of the last failing tests push the earlier failures' names and assertion
//! messages out of it. [`OutputTail::capture`] keeps, within the same bound, the lines a
//! person fixing the failure reads, and replaces everything else with explicit markers.
//!
//! ```
//! use kleene::{closure::verdict::OutputTail, closure::verdict::TailLimits};
//!
//! let mut out = String::from("running 2 tests\n---- tests::login stdout ----\n");
//! out.push_str("thread 'tests::login' (7) panicked at src/lib.rs:17:9:\nassertion failed\n");
//! out.push_str("stack backtrace:\n");
//! for i in 0..200 {
//!     out.push_str(&format!("  {i}: core::panicking::panic_fmt\n             at ./src/lib.rs:4:17\n"));
//! }
//! out.push_str("test result: FAILED. 1 passed; 1 failed\n");
//!
//! let tail = OutputTail::capture(out.as_bytes(), b"", TailLimits::default());
//! assert!(tail.stdout().len() <= 4096);
//! assert!(tail.stdout().contains("panicked at src/lib.rs:17:9:"));
//! assert!(tail.stdout().ends_with("test result: FAILED. 1 passed; 1 failed\n"));
//! assert!(tail.stdout().contains("lines elided"));
//! assert!(tail.elided_bytes() > 0);
//! ```
//!
//! The exact strategy is documented on [`OutputTail`].

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// Byte bounds for each stream of an [`OutputTail`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TailLimits {
    /// Most bytes kept of stdout, markers included.
    pub stdout: usize,
    /// Most bytes kept of stderr, markers included.
    pub stderr: usize,
}

impl TailLimits {
    /// The smallest per-stream bound that always leaves room for a marker and part of the
    /// final line. Smaller bounds are still honoured, without markers.
    pub const MIN_STREAM: usize = 64;

    /// The same bound for both streams.
    pub fn both(bytes: usize) -> Self {
        Self {
            stdout: bytes,
            stderr: bytes,
        }
    }
}

impl Default for TailLimits {
    /// 4 KiB for each stream.
    fn default() -> Self {
        Self::both(4096)
    }
}

/// One bounded stream: the kept text and how many bytes of the decoded original it left
/// out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
struct StreamTail {
    text: String,
    elided: u64,
}

/// A bounded tail of a process's stdout and stderr, keeping failing tests' names,
/// assertions with file:line and the final summary.
///
/// # Strategy
///
/// Each stream is decoded as lossy UTF-8 (invalid sequences become U+FFFD); all byte counts,
/// the bound included, are bytes of that decoded text. A stream that fits its bound is kept
/// verbatim. Otherwise it is split into lines (each keeping its `\n`) and every line gets a
/// rank:
///
/// 0. **The final line**: the last non-blank line and any blank lines after it. It is kept
///    first. When it alone does not fit, its tail is kept (trailing whitespace dropped, the
///    cut moved forward to a UTF-8 boundary) after one marker counting everything elided
///    (the cut line among the elided lines).
/// 1. **Key lines**, what a person fixing the failure reads. cargo test: `test x ... FAILED`,
///    `---- x stdout ----`, `thread '…' panicked at file:line:col:` and the message lines
///    after it (assertion text, `left:`/`right:`), `failures:` and the names listed under
///    it, `test result:`, `error…` lines and `--> file:line:col`. pytest: `____ test_x ____`
///    section headers, the failing source lines (`>   …`), `E   …` lines,
///    `file.py:12: SomeError` locations, `FAILED …`/`ERROR …` lines, and the `===` lines of
///    the short test summary and the final counts.
/// 2. **Context**: every other line (source excerpts, captured output, progress lines).
/// 3. **Frames**, elided first: Rust backtrace frames (`  12: path` and `at file:line`),
///    `stack backtrace:` and the `note: Some details are omitted` line; pytest's
///    intermediate traceback frames (every frame of a failure section after its first, except
///    the one that raised) and its `_ _ _` frame separators.
///
/// Lines are then admitted by rank, later lines first within a rank (the end of a log is
/// where its summary is). Rank 1 admits every line that still fits; ranks 2 and 3 stop at
/// their first line that does not, so context stays one contiguous run. Each maximal run of
/// elided lines is replaced by one marker line `[... N lines elided (B bytes) ...]`
/// (`1 line` when N is one), and the
/// markers' own bytes count against the bound. A run no longer than its marker (a lone
/// blank line) is kept instead. Cuts therefore fall on line boundaries,
/// except inside the final line when it alone exceeds the bound.
///
/// The bound is never exceeded. Below [`TailLimits::MIN_STREAM`] a bound may be too small
/// for a marker: when the final line does not fit together with one, the kept text is just
/// the end of the final line, with no marker, and [`OutputTail::elided_bytes`] still counts
/// what was dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OutputTail {
    stdout: StreamTail,
    stderr: StreamTail,
}

impl OutputTail {
    /// Captures bounded tails of `stdout` and `stderr` (lossy UTF-8).
    ///
    /// # Examples
    ///
    /// ```
    /// use kleene::{closure::verdict::OutputTail, closure::verdict::TailLimits};
    ///
    /// let tail = OutputTail::capture(b"ok\n", &[0xff, b'\n'], TailLimits::default());
    /// assert_eq!(tail.stdout(), "ok\n");
    /// assert_eq!(tail.stderr(), "\u{fffd}\n");
    /// assert_eq!(tail.elided_bytes(), 0);
    /// ```
    pub fn capture(stdout: &[u8], stderr: &[u8], limits: TailLimits) -> Self {
        Self {
            stdout: bound(&String::from_utf8_lossy(stdout), limits.stdout),
            stderr: bound(&String::from_utf8_lossy(stderr), limits.stderr),
        }
    }

    /// The kept part of stdout, markers included.
    pub fn stdout(&self) -> &str {
        &self.stdout.text
    }

    /// The kept part of stderr, markers included.
    pub fn stderr(&self) -> &str {
        &self.stderr.text
    }

    /// Bytes of stdout (decoded) that were left out.
    pub fn stdout_elided(&self) -> u64 {
        self.stdout.elided
    }

    /// Bytes of stderr (decoded) that were left out.
    pub fn stderr_elided(&self) -> u64 {
        self.stderr.elided
    }

    /// Bytes of both streams (decoded) that were left out.
    pub fn elided_bytes(&self) -> u64 {
        self.stdout.elided + self.stderr.elided
    }

    /// A deterministic text of both streams, fit for a validator's justification: a header
    /// per non-empty stream saying how much was elided, then the kept text.
    ///
    /// # Examples
    ///
    /// ```
    /// use kleene::{closure::verdict::OutputTail, closure::verdict::TailLimits};
    ///
    /// let tail = OutputTail::capture(b"test result: FAILED\n", b"", TailLimits::default());
    /// assert_eq!(tail.render(), "stdout (0 bytes elided):\ntest result: FAILED\n");
    /// assert_eq!(OutputTail::default().render(), "(no output)\n");
    /// ```
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (name, stream) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            if stream.text.is_empty() {
                continue;
            }
            // Writing to a String cannot fail.
            let _ = writeln!(out, "{name} ({} bytes elided):", stream.elided);
            out.push_str(&stream.text);
            if !stream.text.ends_with('\n') {
                out.push('\n');
            }
        }
        if out.is_empty() {
            out.push_str("(no output)\n");
        }
        out
    }
}

/// Elided first = highest rank.
const KEY: u8 = 1;
const CONTEXT: u8 = 2;
const FRAME: u8 = 3;

fn marker(lines: usize, bytes: usize) -> String {
    let s = if lines == 1 { "" } else { "s" };
    format!("[... {lines} line{s} elided ({bytes} bytes) ...]\n")
}

fn marker_len(lines: usize, bytes: usize) -> usize {
    if lines == 0 {
        0
    } else {
        // "[... " + " line" + "s"? + " elided (" + " bytes) ...]\n"
        5 + digits(lines) + 5 + usize::from(lines != 1) + 9 + digits(bytes) + 13
    }
}

fn digits(mut n: usize) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

fn bound(text: &str, limit: usize) -> StreamTail {
    if text.len() <= limit {
        return StreamTail {
            text: text.to_owned(),
            elided: 0,
        };
    }
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    // The final line starts at the last non-blank line; blank lines after it travel with it.
    let final_start = lines
        .iter()
        .rposition(|l| !l.trim().is_empty())
        .unwrap_or(lines.len() - 1);
    let final_len: usize = lines[final_start..].iter().map(|l| l.len()).sum();
    let mut prefix = Vec::with_capacity(final_start + 1);
    prefix.push(0usize);
    for l in &lines[..final_start] {
        prefix.push(prefix[prefix.len() - 1] + l.len());
    }
    let gap = |from: usize, to: usize| marker_len(to - from, prefix[to] - prefix[from]);

    let mut used = final_len + gap(0, final_start);
    if used > limit {
        return cut_final_line(text, &lines[final_start..], limit);
    }

    let ranks = rank_lines(&lines[..final_start]);
    // `kept` always holds `final_start` as a sentinel: every candidate has a kept successor.
    let mut kept = BTreeSet::from([final_start]);
    for rank in [KEY, CONTEXT, FRAME] {
        for i in (0..final_start).rev().filter(|&i| ranks[i] == rank) {
            let before = kept.range(..i).next_back().map_or(0, |p| p + 1);
            let after = *kept.range(i..).next().unwrap_or(&final_start);
            let grown = used + lines[i].len() + gap(before, i) + gap(i + 1, after);
            let cost = grown - gap(before, after);
            if cost <= limit {
                used = cost;
                kept.insert(i);
            } else if rank != KEY {
                break;
            }
        }
    }

    // A run of elided lines no longer than its own marker (a lone blank line) is cheaper
    // kept: keeping it shrinks the text and hides nothing.
    let mut from = 0;
    for k in kept.clone() {
        if k > from && prefix[k] - prefix[from] <= gap(from, k) {
            used -= gap(from, k) - (prefix[k] - prefix[from]);
            kept.extend(from..k);
        }
        from = k + 1;
    }

    let mut out = String::with_capacity(used);
    let mut next = 0;
    for &k in &kept {
        if k > next {
            out.push_str(&marker(k - next, prefix[k] - prefix[next]));
        }
        if k == final_start {
            out.extend(lines[final_start..].iter().copied());
        } else {
            out.push_str(lines[k]);
        }
        next = k + 1;
    }
    debug_assert_eq!(out.len(), used);
    StreamTail {
        elided: (text.len() - final_len - kept_len(&kept, &lines, final_start)) as u64,
        text: out,
    }
}

fn kept_len(kept: &BTreeSet<usize>, lines: &[&str], final_start: usize) -> usize {
    kept.iter()
        .filter(|&&k| k != final_start)
        .map(|&k| lines[k].len())
        .sum()
}

/// The final line alone does not fit: keep as much of its end as fits after one marker.
fn cut_final_line(text: &str, final_lines: &[&str], limit: usize) -> StreamTail {
    let line = final_lines.concat();
    let line = line.trim_end();
    let total_lines = text.split_inclusive('\n').count();
    // The marker is sized for every line and byte of the text (and a plural), so the real
    // one, which counts no more, is never longer.
    let room = limit.saturating_sub(marker_len(total_lines.max(2), text.len()));
    let (room, with_marker) = if room == 0 || limit < TailLimits::MIN_STREAM {
        (limit, false)
    } else {
        (room, true)
    };
    let mut start = line.len().saturating_sub(room);
    while !line.is_char_boundary(start) {
        start += 1;
    }
    let kept = &line[start..];
    let elided = text.len() - kept.len();
    let mut out = String::new();
    if with_marker {
        // The cut final line counts among the elided lines: part of it is.
        let lines_elided = total_lines - final_lines.len() + 1;
        out.push_str(&marker(lines_elided, elided));
    }
    out.push_str(kept);
    StreamTail {
        text: out,
        elided: elided as u64,
    }
}

/// Ranks every line before the final one (see the module docs).
fn rank_lines(lines: &[&str]) -> Vec<u8> {
    let mut ranks = vec![CONTEXT; lines.len()];
    // Lines after a `panicked at` line are its message until a blank line or a frame.
    let mut in_panic_message = false;
    // Lines under a bare `failures:` are failing test names until a blank line.
    let mut in_failures_list = false;
    // pytest: the first line of the current traceback frame, and how many frames of the
    // current failure section came before it.
    let mut frame_start = 0;
    let mut frames_in_section = 0;
    for (i, raw) in lines.iter().enumerate() {
        let line = raw.trim_end();
        let trimmed = line.trim_start();
        let blank = trimmed.is_empty();
        if blank {
            in_panic_message = false;
            in_failures_list = false;
        }
        ranks[i] = if is_rust_frame(line) || is_rust_frame_note(line) {
            in_panic_message = false;
            FRAME
        } else if line.starts_with("thread '") && line.contains("panicked at ") {
            in_panic_message = true;
            KEY
        } else if in_panic_message {
            KEY
        } else if line == "failures:" {
            in_failures_list = true;
            KEY
        } else if in_failures_list && line.starts_with("    ") {
            KEY
        } else if is_pytest_section_header(line) {
            frame_start = i + 1;
            frames_in_section = 0;
            KEY
        } else if line.starts_with("_ _ _") {
            frame_start = i + 1;
            FRAME
        } else if let Some(raised) = pytest_location(line) {
            if !raised && frames_in_section > 0 {
                ranks[frame_start..i].fill(FRAME);
            }
            frames_in_section += 1;
            frame_start = i + 1;
            if raised { KEY } else { FRAME }
        } else if is_key_line(line, trimmed) {
            KEY
        } else {
            CONTEXT
        };
    }
    ranks
}

/// `  12: core::panicking::panic_fmt`, `  12:     0x55d1 - std::…`, `      at ./src/lib.rs:4:17`.
fn is_rust_frame(line: &str) -> bool {
    let t = line.trim_start();
    if line.len() == t.len() {
        return line == "stack backtrace:";
    }
    if t.starts_with("at ") {
        return true;
    }
    match t.split_once(": ") {
        Some((n, _)) => !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

fn is_rust_frame_note(line: &str) -> bool {
    line.starts_with("note: Some details are omitted")
        || line.starts_with("note: run with `RUST_BACKTRACE=1`")
}

/// `____ test_name ____` (but not the `_ _ _` frame separator).
fn is_pytest_section_header(line: &str) -> bool {
    line.len() > 8 && line.starts_with("___") && line.ends_with("___") && line.contains(' ')
}

/// `tests/test_app.py:12: AssertionError` → `Some(true)` (the frame that raised);
/// `tests/test_app.py:12: ` or `tests/test_app.py:12: in walk` → `Some(false)` (an
/// intermediate frame, long or short style).
fn pytest_location(line: &str) -> Option<bool> {
    if line.starts_with(char::is_whitespace) {
        return None;
    }
    let (path, rest) = line.split_once(".py:")?;
    if path.is_empty() || path.contains(' ') {
        return None;
    }
    let (num, after) = rest.split_once(':')?;
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let after = after.trim();
    Some(!after.is_empty() && !after.starts_with("in "))
}

fn is_key_line(line: &str, trimmed: &str) -> bool {
    (line.starts_with("test ") && line.ends_with(" FAILED"))
        || (line.starts_with("---- ") && line.ends_with(" ----"))
        || line.starts_with("test result:")
        || line.starts_with("error")
        || trimmed.starts_with("--> ")
        || line == "E"
        || line.starts_with("E ")
        || line.starts_with(">   ")
        || line.starts_with("FAILED ")
        || line.starts_with("ERROR ")
        || (line.starts_with('=')
            && line.ends_with('=')
            && ["failed", "passed", "error", "short test summary"]
                .iter()
                .any(|w| line.contains(w)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_streams_are_verbatim() {
        let t = OutputTail::capture(b"a\nb", b"", TailLimits::default());
        assert_eq!(t.stdout(), "a\nb");
        assert_eq!(t.stderr(), "");
        assert_eq!(t.elided_bytes(), 0);
    }

    #[test]
    fn marker_len_matches_marker() {
        for (l, b) in [
            (1, 1),
            (9, 10),
            (10, 99),
            (123, 45678),
            (usize::MAX, usize::MAX),
            (1, 0),
            (2, 5),
        ] {
            assert_eq!(marker(l, b).len(), marker_len(l, b));
        }
    }

    #[test]
    fn frames_go_before_context_and_key_lines_stay() {
        let mut s = String::from("test a ... FAILED\nsome context\n");
        for i in 0..50 {
            s.push_str(&format!("  {i}: frame\n             at ./src/x.rs:1:1\n"));
        }
        s.push_str("test result: FAILED. 0 passed; 1 failed\n");
        let t = OutputTail::capture(s.as_bytes(), b"", TailLimits::both(200));
        let out = t.stdout();
        assert!(out.len() <= 200, "{out}");
        assert!(
            out.starts_with("test a ... FAILED\nsome context\n[... "),
            "{out}"
        );
        assert!(out.ends_with("test result: FAILED. 0 passed; 1 failed\n"));
        let markers: Vec<&str> = out.lines().filter(|l| l.starts_with("[... ")).collect();
        assert_eq!(markers.len(), 1, "{out}");
        let marker_bytes = markers[0].len() + 1;
        assert_eq!(
            out.len() - marker_bytes + t.stdout_elided() as usize,
            s.len()
        );
    }

    #[test]
    fn an_overlong_final_line_keeps_its_tail_after_a_marker() {
        let s = format!("first\n{}END\n\n", "x".repeat(500));
        let t = OutputTail::capture(s.as_bytes(), b"", TailLimits::both(100));
        assert!(t.stdout().len() <= 100);
        assert!(t.stdout().starts_with("[... 2 lines elided ("));
        assert!(t.stdout().ends_with("xxEND"));
        assert_eq!(
            t.stdout_elided() as usize + t.stdout().lines().nth(1).unwrap().len(),
            s.len()
        );
    }

    #[test]
    fn a_tiny_bound_keeps_the_end_of_the_final_line_without_a_marker() {
        let t = OutputTail::capture("aaaa\nbbbé".as_bytes(), b"", TailLimits::both(3));
        assert_eq!(t.stdout(), "bé");
        assert_eq!(t.stdout_elided(), 7);
        assert_eq!(
            OutputTail::capture(b"abc", b"", TailLimits::both(0)).stdout(),
            ""
        );
    }

    #[test]
    fn pytest_frames_are_ranked() {
        let lines = [
            "____ test_x ____",
            "    def test_x():",
            ">       f()",
            "tests/t.py:3: ",
            "_ _ _ _",
            "    def f():",
            ">       g()",
            "tests/t.py:7: ",
            "    def g():",
            "E       KeyError",
            "tests/t.py:9: KeyError",
        ];
        assert_eq!(
            rank_lines(&lines),
            [
                KEY, CONTEXT, KEY, FRAME, FRAME, FRAME, FRAME, FRAME, CONTEXT, KEY, KEY
            ]
        );
    }
}
