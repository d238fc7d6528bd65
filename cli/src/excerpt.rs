//! Bounded excerpts of what a call's commands printed, for the lines people read: the failed
//! checks' output under a failed task (`run`, `resume`, `status`, `audit`) and a fix's own
//! output (`audit`).
//!
//! A closure record keeps each failed check's justification: the command, how it ended and
//! the bounded tails of its stdout and stderr ([`OutputTail`](kleene::closure::verdict::OutputTail),
//! 4 KiB a stream), the very text a fix subtask receives in its recovery spec. That is still
//! too long for a status table, so an excerpt keeps its first line (what ran and how it
//! ended) and its last lines, at most [`LINES`] of them and [`BYTES`] bytes, and counts what
//! it left out. Control characters are shown escaped: a command's output must not move the
//! cursor or recolour the terminal kleene writes to.

use kleene::closure::{ClosureRecord, Verdict};
use kleene::id::TaskId;
use serde::Serialize;

/// Most lines of an excerpt's tail: enough for an assertion and the summary after it.
pub const LINES: usize = 10;
/// Most bytes of an excerpt's tail.
pub const BYTES: usize = 2048;
/// Most bytes of an excerpt's first line (a command line from the plan can be long).
pub const HEADLINE_BYTES: usize = 240;
/// Failed checks of one call shown with a tail; the others get their first line only, so
/// a call that fails every one of many checks still shows a bounded excerpt.
pub const CHECKS: usize = 3;

/// The first line of a recorded text and its last lines, bounded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Excerpt {
    /// The first line: for a command, what ran and how it ended.
    pub headline: String,
    /// The last lines (trailing blank lines dropped), oldest first.
    pub lines: Vec<String>,
    /// Lines between the headline and `lines` that are left out.
    pub omitted_lines: usize,
}

/// One failed check of a call, with an excerpt of its justification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckEvidence {
    /// The check's id (`run` or `fix` when that command exited non-zero).
    pub check: String,
    /// Its severity.
    pub severity: String,
    /// What it printed.
    #[serde(flatten)]
    pub excerpt: Excerpt,
}

impl Excerpt {
    /// The excerpt of `text`, keeping at most `lines` last lines.
    pub fn of(text: &str, lines: usize) -> Self {
        let mut all = text.lines();
        let headline = clip_front(&escaped(all.next().unwrap_or_default()), HEADLINE_BYTES);
        // Walked from the end, so only the kept lines are ever copied.
        let mut rest: Vec<&str> = all.collect();
        while rest.last().is_some_and(|l| l.trim().is_empty()) {
            rest.pop();
        }
        let mut kept = Vec::new();
        let mut used = 0;
        for line in rest.iter().rev().take(lines) {
            let shown = escaped(line);
            if used + shown.len() > BYTES {
                // An overlong last line still shows its end, where an error's text is.
                if kept.is_empty() {
                    kept.push(clip_back(&shown, BYTES));
                }
                break;
            }
            used += shown.len();
            kept.push(shown);
        }
        kept.reverse();
        Self {
            headline,
            omitted_lines: rest.len() - kept.len(),
            lines: kept,
        }
    }

    /// The excerpt as terminal lines: the headline after `head`, then `[… N earlier
    /// lines …]` when some were left out, then each line behind a `| ` gutter, all indented
    /// by `indent`, so a table above and below stays readable.
    pub fn render(&self, indent: &str, head: &str) -> Vec<String> {
        let mut out = Vec::with_capacity(self.lines.len() + 2);
        out.push(
            format!("{indent}{head}{}", self.headline)
                .trim_end()
                .to_owned(),
        );
        if self.omitted_lines > 0 && !self.lines.is_empty() {
            let s = if self.omitted_lines == 1 { "" } else { "s" };
            out.push(format!(
                "{indent}| [… {} earlier line{s} …]",
                self.omitted_lines
            ));
        }
        for line in &self.lines {
            out.push(format!("{indent}| {line}").trim_end().to_owned());
        }
        out
    }
}

/// The failed checks of `verdict`, each with an excerpt of its justification: the first
/// [`CHECKS`] with their tails, the rest with their first line only.
pub fn check_evidence(verdict: &Verdict) -> Vec<CheckEvidence> {
    verdict
        .failures()
        .enumerate()
        .map(|(i, r)| CheckEvidence {
            check: r.validator_id.to_string(),
            severity: r.severity.to_string(),
            excerpt: Excerpt::of(&r.justification, if i < CHECKS { LINES } else { 0 }),
        })
        .collect()
}

/// The failed checks that halted `record`'s closure (the verdict its last fix was, or would
/// have been, given), excerpted; empty when it resolved or stopped for another reason.
pub fn failed_checks(record: &ClosureRecord) -> Vec<CheckEvidence> {
    record
        .outcome()
        .halt_reason()
        .and_then(|reason| reason.verdict())
        .map(check_evidence)
        .unwrap_or_default()
}

/// What `task`'s execution in `iteration` of `record`'s closure reported (for the shell
/// agent: the command, how it ended and the bounded tails of its stdout and stderr).
pub fn step_output<'r>(
    record: &'r ClosureRecord,
    task: &TaskId,
    iteration: u32,
) -> Option<&'r str> {
    record
        .attempts()
        .iter()
        .find(|a| a.task.id() == task)?
        .steps
        .iter()
        .find(|s| s.iteration == iteration)?
        .output
        .as_ref()
        .map(|o| o.text.as_str())
}

/// An excerpt of a fix's own output: what fix subtask `task` reported in `iteration`;
/// `None` for the root task (its run is not a fix) or a step that executed nothing.
pub fn fix_output(record: &ClosureRecord, task: &TaskId, iteration: u32) -> Option<Excerpt> {
    let is_fix = record
        .attempts()
        .iter()
        .any(|a| a.task.id() == task && a.task.depth() > 0);
    if !is_fix {
        return None;
    }
    step_output(record, task, iteration).map(|text| Excerpt::of(text, LINES))
}

/// `evidence` as terminal lines under a task, indented by `indent`.
pub fn render_checks(evidence: &[CheckEvidence], indent: &str) -> Vec<String> {
    evidence
        .iter()
        .flat_map(|c| {
            c.excerpt
                .render(indent, &format!("check {} ({}): ", c.check, c.severity))
        })
        .collect()
}

/// `s` with every control character but a tab written as an escape (`\u{1b}`, `\r`).
fn escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() && c != '\t' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The first `max` bytes of `s` (cut at a character boundary), marked when cut.
fn clip_front(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The last `max` bytes of `s` (cut at a character boundary), marked when cut.
fn clip_back(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &s[start..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use kleene::closure::{Severity, ValidatorResult};
    use kleene::id::ValidatorId;

    fn justification(out_lines: usize) -> String {
        let mut text = String::from("`sh t.sh` failed with exit code 1\n--- stdout (tail) ---\n");
        for i in 0..out_lines {
            text.push_str(&format!("line {i}\n"));
        }
        text.push_str("--- stderr (tail) ---\nexpected 12000, got 10700\n\n");
        text
    }

    #[test]
    fn a_short_text_is_kept_whole_after_its_headline() {
        let e = Excerpt::of(&justification(2), LINES);
        assert_eq!(e.headline, "`sh t.sh` failed with exit code 1");
        assert_eq!(
            e.lines,
            [
                "--- stdout (tail) ---",
                "line 0",
                "line 1",
                "--- stderr (tail) ---",
                "expected 12000, got 10700"
            ]
        );
        assert_eq!(e.omitted_lines, 0);
    }

    #[test]
    fn a_long_text_keeps_its_last_lines_and_counts_the_rest() {
        let e = Excerpt::of(&justification(100), LINES);
        assert_eq!(e.lines.len(), LINES);
        assert_eq!(e.lines.last().unwrap(), "expected 12000, got 10700");
        assert_eq!(e.lines[0], "line 92");
        assert_eq!(e.omitted_lines, 93);
        let shown = e.render("    ", "check tests (blocker): ");
        assert_eq!(
            shown[0],
            "    check tests (blocker): `sh t.sh` failed with exit code 1"
        );
        assert_eq!(shown[1], "    | [… 93 earlier lines …]");
        assert_eq!(shown.last().unwrap(), "    | expected 12000, got 10700");
    }

    #[test]
    fn the_tail_stays_within_its_byte_bound() {
        let long = "x".repeat(1500);
        let text = format!("head\n{long}\n{long}\né{}\n", "y".repeat(5000));
        let e = Excerpt::of(&text, LINES);
        // Only the last line, cut to its end.
        assert_eq!(e.lines.len(), 1);
        assert!(e.lines[0].len() <= BYTES + '…'.len_utf8());
        assert!(e.lines[0].starts_with('…') && e.lines[0].ends_with('y'));
        assert_eq!(e.omitted_lines, 2);
        let e = Excerpt::of(&format!("head\n{long}\n{long}\nend\n"), LINES);
        assert_eq!(e.lines.len(), 2);
        assert_eq!(e.lines[1], "end");
        let total: usize = e.lines.iter().map(String::len).sum();
        assert!(total <= BYTES);
        let head = Excerpt::of(&"é".repeat(1000), LINES).headline;
        assert!(head.len() <= HEADLINE_BYTES + '…'.len_utf8() && head.ends_with('…'));
    }

    #[test]
    fn control_characters_are_shown_escaped() {
        let e = Excerpt::of("\u{1b}[31mred\nbar\r\tx\u{7}\n", LINES);
        assert_eq!(e.headline, "\\u{1b}[31mred");
        assert_eq!(e.lines, ["bar\\r\tx\\u{7}"]);
    }

    #[test]
    fn only_the_first_checks_get_a_tail() {
        let results = (0..5).map(|i| {
            ValidatorResult::new(
                ValidatorId::new(format!("c{i}")).unwrap(),
                Severity::Blocker,
                true,
                justification(1),
            )
        });
        let evidence = check_evidence(&Verdict::new(results));
        assert_eq!(evidence.len(), 5);
        assert!(
            evidence[..CHECKS]
                .iter()
                .all(|c| !c.excerpt.lines.is_empty())
        );
        assert!(
            evidence[CHECKS..]
                .iter()
                .all(|c| c.excerpt.lines.is_empty())
        );
        let shown = render_checks(&evidence[CHECKS..], "  ");
        assert_eq!(
            shown,
            [
                "  check c3 (blocker): `sh t.sh` failed with exit code 1",
                "  check c4 (blocker): `sh t.sh` failed with exit code 1"
            ]
        );
        let json = serde_json::to_value(&evidence[0]).unwrap();
        assert_eq!(json["check"], "c0");
        assert_eq!(json["severity"], "blocker");
        assert_eq!(json["headline"], "`sh t.sh` failed with exit code 1");
        assert_eq!(json["lines"][0], "--- stdout (tail) ---");
    }
}
