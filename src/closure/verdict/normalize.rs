//! Comparing verdicts for stall detection without the noise two runs of one failure differ
//! by.

use crate::{closure::verdict::Severity, closure::verdict::Verdict, id::ValidatorId};

/// Turns a [`Verdict`] into the form stall detection compares.
///
/// Two runs of the same failing tests never print the same bytes, so an exact comparison
/// would never detect a stall. The default normaliser masks, in every justification:
///
/// | noise | example | becomes |
/// |---|---|---|
/// | ISO-8601 date-times | `2026-11-29T20:07:08.17Z`, `2026-11-29 20:07:08` | `<timestamp>` |
/// | clock times | `20:07:08`, `20:07:08.174` | `<timestamp>` |
/// | hex addresses | `at 0x7f915d93d950` | `at 0x<addr>` |
/// | thread ids after a thread name | `thread 'tests::a' (15273) panicked` | `thread 'tests::a' (<id>) panicked` |
/// | `ThreadId(n)` | `ThreadId(7)` | `ThreadId(<id>)` |
/// | numbers after `pid`, `tid`, `process`, `thread`, `worker` | `pid 4242`, `tid=17`, `thread #3` | `pid <id>`, `tid=<id>`, `thread #<id>` |
/// | pytest-xdist workers | `[gw3]` | `[gw<id>]` |
/// | durations: a number with `ns`, `us`, `µs`, `ms`, `s`, `sec`, `secs`, `seconds`, `min`, `mins`, `minutes`, `h` (a space is allowed before units longer than one letter) | `finished in 0.53s`, `took 12 ms` | `finished in <duration>`, `took <duration>` |
/// | runs of 3 or more `=`, `-` or `_` | pytest's summary line, padded to the terminal width around a variable-length duration | `===` |
/// | the counts in an [`OutputTail`](crate::closure::verdict::OutputTail)'s elision markers and stream headers: how much noise was cut depends on how long the noise was | `[... 212 lines elided (9518 bytes) ...]`, `stdout (9518 bytes elided):` | `[... <n> lines elided (<n> bytes) ...]`, `stdout (<n> bytes elided):` |
/// | the order of lines | concurrently run tests report in any order | lines compared as a sorted multiset |
///
/// Nothing else changes: test names, assertions, file paths and line numbers, exit codes
/// and counts still tell two verdicts apart. Validator ids and severities are compared
/// exactly, and the verdict's results are compared as a multiset (their order never
/// matters). [`VerdictNormalizer::exact`] compares justifications byte for byte.
///
/// # Examples
///
/// ```
/// use kleene::closure::verdict::VerdictNormalizer;
///
/// let n = VerdictNormalizer::default();
/// assert_eq!(
///     n.normalize_text("3 failed in 0.06s at 0x7f915d93d950"),
///     n.normalize_text("3 failed in 0.04s at 0x7f6d2c989750"),
/// );
/// assert_ne!(n.normalize_text("3 failed"), n.normalize_text("2 failed"));
/// let exact = VerdictNormalizer::exact();
/// assert_ne!(exact.normalize_text("in 0.06s"), exact.normalize_text("in 0.04s"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct VerdictNormalizer {
    masking: Masking,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
enum Masking {
    #[default]
    Noise,
    Exact,
}

impl VerdictNormalizer {
    /// A normaliser that masks nothing: justifications compare byte for byte.
    pub fn exact() -> Self {
        Self {
            masking: Masking::Exact,
        }
    }

    /// True for [`VerdictNormalizer::exact`].
    pub fn is_exact(&self) -> bool {
        self.masking == Masking::Exact
    }

    /// The normalised form of `verdict`: every result's validator id, severity and
    /// normalised justification, as a sorted multiset.
    pub fn normalize(&self, verdict: &Verdict) -> NormalizedVerdict {
        let mut results: Vec<NormalizedResult> = verdict
            .results()
            .iter()
            .map(|r| NormalizedResult {
                validator_id: r.validator_id.clone(),
                severity: r.severity,
                justification: self.normalize_text(&r.justification),
            })
            .collect();
        results.sort();
        NormalizedVerdict { results }
    }

    /// The normalised form of one justification (see the table above).
    pub fn normalize_text(&self, text: &str) -> String {
        match self.masking {
            Masking::Exact => text.to_owned(),
            Masking::Noise => {
                let mut masked = text.lines().map(mask_line);
                // A one-line justification (the common case) is its masked line: no list
                // to sort and join.
                let Some(first) = masked.next() else {
                    return String::new();
                };
                let Some(second) = masked.next() else {
                    return first;
                };
                let mut lines: Vec<String> = [first, second].into_iter().chain(masked).collect();
                lines.sort_unstable();
                lines.join("\n")
            }
        }
    }
}

/// One result of a [`NormalizedVerdict`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NormalizedResult {
    /// The validator.
    pub validator_id: ValidatorId,
    /// The severity.
    pub severity: Severity,
    /// The justification with its noise masked.
    pub justification: String,
}

/// A verdict as stall detection compares it: a sorted multiset of normalised results.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NormalizedVerdict {
    results: Vec<NormalizedResult>,
}

impl NormalizedVerdict {
    /// The results in canonical order.
    pub fn results(&self) -> &[NormalizedResult] {
        &self.results
    }
}

impl From<Vec<NormalizedResult>> for NormalizedVerdict {
    fn from(mut results: Vec<NormalizedResult>) -> Self {
        results.sort();
        Self { results }
    }
}

impl From<NormalizedVerdict> for Vec<NormalizedResult> {
    fn from(v: NormalizedVerdict) -> Self {
        v.results
    }
}

const DURATION_UNITS: &[&str] = &[
    "seconds", "minutes", "secs", "mins", "sec", "min", "ms", "us", "µs", "ns", "s", "h",
];
const ID_KEYWORDS: &[&str] = &["process", "thread", "worker", "pid", "tid"];

/// An [`OutputTail`](crate::closure::verdict::OutputTail) elision marker (`[... 3 lines elided (120 bytes) ...]`)
/// or stream header (`stdout (120 bytes elided):`), with its counts masked: the counts
/// measure the noise that was cut, not the failure.
fn mask_tail_counts(line: &str) -> Option<&'static str> {
    fn number(s: &str) -> Option<&str> {
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        (digits > 0).then(|| &s[digits..])
    }
    if let Some(rest) = line.strip_prefix("[... ") {
        let rest = number(rest)?;
        let rest = rest
            .strip_prefix(" lines elided (")
            .or_else(|| rest.strip_prefix(" line elided ("))?;
        return (number(rest)? == " bytes) ...]")
            .then_some("[... <n> lines elided (<n> bytes) ...]");
    }
    for (stream, masked) in [
        ("stdout (", "stdout (<n> bytes elided):"),
        ("stderr (", "stderr (<n> bytes elided):"),
    ] {
        if let Some(rest) = line.strip_prefix(stream) {
            return (number(rest)? == " bytes elided):").then_some(masked);
        }
    }
    None
}

fn mask_line(line: &str) -> String {
    mask_line_skipping(line, true)
}

/// [`mask_line`], optionally testing every byte instead of skipping those that cannot start
/// a mask (the tests check that skipping changes nothing).
fn mask_line_skipping(line: &str, skip: bool) -> String {
    if let Some(masked) = mask_tail_counts(line) {
        return masked.to_owned();
    }
    let b = line.as_bytes();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    // Copies of whole chars only ever start at char boundaries: every pattern below starts
    // and ends on an ASCII byte (or the two-byte `µ`, matched whole).
    let mut copied_from = 0;
    while i < b.len() {
        // Only these bytes can start a mask: skip the rest in a tight loop.
        if skip && !may_start_mask(b[i]) {
            i += 1;
            continue;
        }
        let prev_alnum = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        let prev_digitish = i > 0 && (b[i - 1].is_ascii_digit() || b[i - 1] == b'.');
        // (bytes consumed, bytes of them kept verbatim, mask appended after those)
        let replacement: Option<(usize, usize, &str)> = if b[i].is_ascii_digit() && !prev_alnum {
            if let Some(n) = timestamp(b, i) {
                Some((n, 0, "<timestamp>"))
            } else if b[i] == b'0' && b.get(i + 1) == Some(&b'x') {
                hex(b, i).map(|n| (n, 0, "0x<addr>"))
            } else if !prev_digitish {
                duration(b, i).map(|n| (n, 0, "<duration>"))
            } else {
                None
            }
        } else if b[i] == b'\'' {
            paren_id(b, i + 1).map(|n| (n + 1, 0, "' (<id>)"))
        } else if b[i] == b'[' && b[i..].starts_with(b"[gw") {
            digits_then(b, i + 3, b']').map(|n| (n + 3, 0, "[gw<id>]"))
        } else if b[i].is_ascii_alphabetic() && !prev_alnum {
            keyword_id(b, i)
        } else if matches!(b[i], b'=' | b'-' | b'_') {
            let run = b[i..].iter().take_while(|&&c| c == b[i]).count();
            (run >= 3).then(|| {
                (
                    run,
                    0,
                    match b[i] {
                        b'=' => "===",
                        b'-' => "---",
                        _ => "___",
                    },
                )
            })
        } else {
            None
        };
        match replacement {
            Some((len, keep, text)) => {
                out.push_str(&line[copied_from..i + keep]);
                out.push_str(text);
                i += len;
                copied_from = i;
            }
            None => i += 1,
        }
    }
    out.push_str(&line[copied_from..]);
    out
}

/// Whether a mask can start at a byte: a digit (a timestamp, address or duration), a quote
/// (an id in parentheses), `[` (a worker id), a rule of `=`, `-` or `_`, or the first letter
/// of an id keyword (`process`, `thread`, `worker`, `pid`, `tid`, `ThreadId(`).
fn may_start_mask(c: u8) -> bool {
    c.is_ascii_digit()
        || matches!(
            c,
            b'\'' | b'[' | b'=' | b'-' | b'_' | b'p' | b'P' | b't' | b'T' | b'w' | b'W'
        )
}

fn count_digits(b: &[u8], at: usize) -> usize {
    b.get(at..)
        .map_or(0, |s| s.iter().take_while(|c| c.is_ascii_digit()).count())
}

fn is_word_byte(c: Option<&u8>) -> bool {
    c.is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// `dd:dd:dd(.d+)?` at `at`, or a date `dddd-dd-dd[T ]` followed by one; returns its
/// length including an optional zone (`Z` or `±hh:mm`).
fn timestamp(b: &[u8], at: usize) -> Option<usize> {
    let two = |p: usize| count_digits(b, p) == 2;
    let clock = |p: usize| -> Option<usize> {
        if two(p)
            && b.get(p + 2) == Some(&b':')
            && two(p + 3)
            && b.get(p + 5) == Some(&b':')
            && two(p + 6)
        {
            let mut n = 8;
            if b.get(p + n) == Some(&b'.') && count_digits(b, p + n + 1) > 0 {
                n += 1 + count_digits(b, p + n + 1);
            }
            Some(n)
        } else {
            None
        }
    };
    let date = count_digits(b, at) == 4
        && b.get(at + 4) == Some(&b'-')
        && two(at + 5)
        && b.get(at + 7) == Some(&b'-')
        && two(at + 8)
        && matches!(b.get(at + 10), Some(b'T' | b' '));
    let mut n = if date {
        11 + clock(at + 11)?
    } else {
        clock(at)?
    };
    match b.get(at + n) {
        Some(b'Z') => n += 1,
        Some(b'+' | b'-') if two(at + n + 1) => {
            n += 3;
            if b.get(at + n) == Some(&b':') && two(at + n + 1) {
                n += 3;
            }
        }
        _ => {}
    }
    (!is_word_byte(b.get(at + n))).then_some(n)
}

/// `0x` and at least one hex digit.
fn hex(b: &[u8], at: usize) -> Option<usize> {
    let digits = b
        .get(at + 2..)?
        .iter()
        .take_while(|c| c.is_ascii_hexdigit())
        .count();
    (digits > 0 && !is_word_byte(b.get(at + 2 + digits))).then_some(2 + digits)
}

/// A number (`12`, `0.53`) immediately followed by a duration unit.
fn duration(b: &[u8], at: usize) -> Option<usize> {
    let mut n = count_digits(b, at);
    if b.get(at + n) == Some(&b'.') && count_digits(b, at + n + 1) > 0 {
        n += 1 + count_digits(b, at + n + 1);
    }
    for unit in DURATION_UNITS {
        let u = unit.as_bytes();
        for gap in [0, 1] {
            // A space before one-letter units would turn "3 s" noise into false positives
            // such as "3 h(ours)" in prose; allow it only for longer units.
            if gap == 1 && (u.len() < 2 || b.get(at + n) != Some(&b' ')) {
                continue;
            }
            let start = at + n + gap;
            if b.get(start..start + u.len()) == Some(u) && !is_word_byte(b.get(start + u.len())) {
                return Some(n + gap + u.len());
            }
        }
    }
    None
}

/// ` (digits)` at `at` (right after a thread name's closing quote).
fn paren_id(b: &[u8], at: usize) -> Option<usize> {
    if b.get(at..at + 2) != Some(b" (") {
        return None;
    }
    digits_then(b, at + 2, b')').map(|n| n + 2)
}

/// At least one digit at `at`, then `close`; returns the length through `close`.
fn digits_then(b: &[u8], at: usize, close: u8) -> Option<usize> {
    let n = count_digits(b, at);
    (n > 0 && b.get(at + n) == Some(&close)).then_some(n + 1)
}

/// `ThreadId(n)`, or an id keyword, an optional separator (up to two of ` `, `:`, `=`,
/// `#`), and a number. Returns (consumed, bytes kept verbatim, mask).
fn keyword_id(b: &[u8], at: usize) -> Option<(usize, usize, &'static str)> {
    if b[at..].starts_with(b"ThreadId(") {
        return digits_then(b, at + 9, b')').map(|n| (n + 9, 0, "ThreadId(<id>)"));
    }
    // Every keyword starts with one of these: most words are rejected on their first byte.
    if !matches!(b[at].to_ascii_lowercase(), b'p' | b't' | b'w') {
        return None;
    }
    let k = ID_KEYWORDS.iter().map(|kw| kw.len()).find(|&k| {
        b.get(at..at + k).is_some_and(|word| {
            ID_KEYWORDS
                .iter()
                .any(|kw| kw.len() == k && word.eq_ignore_ascii_case(kw.as_bytes()))
        }) && !is_word_byte(b.get(at + k))
    })?;
    let mut sep = 0;
    while sep < 2 && matches!(b.get(at + k + sep), Some(b' ' | b':' | b'=' | b'#')) {
        sep += 1;
    }
    let digits = count_digits(b, at + k + sep);
    (digits > 0 && !is_word_byte(b.get(at + k + sep + digits))).then_some((
        k + sep + digits,
        k + sep,
        "<id>",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masked(s: &str) -> String {
        VerdictNormalizer::default().normalize_text(s)
    }

    #[test]
    fn each_documented_mask() {
        assert_eq!(
            masked("at 2026-11-29T20:07:08.17Z done"),
            "at <timestamp> done"
        );
        assert_eq!(masked("2026-11-29 20:07:08+01:00"), "<timestamp>");
        assert_eq!(masked("[20:07:08.174] ok"), "[<timestamp>] ok");
        assert_eq!(masked("object at 0x7f915d93d950>"), "object at 0x<addr>>");
        assert_eq!(
            masked("thread 'tests::a' (15273) panicked at src/lib.rs:32:9:"),
            "thread 'tests::a' (<id>) panicked at src/lib.rs:32:9:"
        );
        assert_eq!(masked("ThreadId(7)"), "ThreadId(<id>)");
        assert_eq!(
            masked("pid 4242, TID=17, thread #3"),
            "pid <id>, TID=<id>, thread #<id>"
        );
        assert_eq!(masked("[gw3] FAILED"), "[gw<id>] FAILED");
        assert_eq!(masked("finished in 0.53s"), "finished in <duration>");
        assert_eq!(
            masked("took 12 ms, then 3µs"),
            "took <duration>, then <duration>"
        );
        assert_eq!(
            masked("===== 3 failed in 0.06s ======"),
            "=== 3 failed in <duration> ==="
        );
        assert_eq!(masked("b\na"), "a\nb");
    }

    #[test]
    fn what_tells_failures_apart_is_kept() {
        for kept in [
            "src/lib.rs:32:9",
            "3 failed; 1 passed",
            "exit 101",
            "left: Err(\"missing event in body \\\"\\\"\")",
            "router-22cb315d1dd32aa0",
            "tests/test_auth.py:18: AssertionError",
            "2 tests, 12 assertions",
            "threads 4",
        ] {
            assert_eq!(masked(kept), kept);
        }
        assert_eq!(masked("héllo 0.5s wörld"), "héllo <duration> wörld");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Justifications come from validators' output, so masking must take any text:
        /// every pattern starts and ends on a char boundary, multi-byte chars included.
        #[test]
        fn any_text_masks_without_panicking(
            text in "([0-9:.x#=_\\-'() \\[\\]\n]|gw|ms|µs|µ|é|ThreadId\\(|pid|Z|T|s|h|[a-f]|€){0,48}",
        ) {
            let once = masked(&text);
            // A mask never produces what another mask would rewrite.
            proptest::prop_assert_eq!(masked(&once), once);
        }

        /// Skipping the bytes that cannot start a mask masks exactly what testing every
        /// byte does, on text dense with every pattern's first bytes and near misses.
        #[test]
        fn skipping_bytes_that_start_no_mask_changes_nothing(
            text in "( |\\.|:|-|x|[a-zé€µ]{1,3}|[0-9]{1,4}|[0-9]{2}:[0-9]{2}:[0-9]{2}|0x[0-9a-f]{1,8}|[0-9]{1,3}(ms|µs|s|h)|'[a-z]+' \\([0-9]+\\)|\\[gw[0-9]\\]|(={3,4}|-{3,4}|_{3,4})|([Pp]id|[Tt]id|[Ww]orker|[Tt]hread|[Pp]rocess|WORKER)[ :=#]{0,2}[0-9]{1,3}|ThreadId\\([0-9]{1,2}\\)){0,24}",
        ) {
            proptest::prop_assert_eq!(mask_line_skipping(&text, true), mask_line_skipping(&text, false));
        }
    }

    /// A cargo test run whose failures are `failing` (name, line), preceded by `noise`
    /// repeated log lines, as its bounded tail renders it.
    fn cargo_tail(noise: usize, failing: &[(&str, u32)]) -> String {
        let mut out = String::from("running 12 tests\n");
        for _ in 0..noise {
            out.push_str("DEBUG pool: connection to db:5432 refused, retrying\n");
        }
        for (name, _) in failing {
            out.push_str(&format!("test tests::{name} ... FAILED\n"));
        }
        out.push_str("\nfailures:\n\n");
        for (name, line) in failing {
            out.push_str(&format!(
                "---- tests::{name} stdout ----\nthread 'tests::{name}' (10034) panicked at src/lib.rs:{line}:9:\nassertion `left == right` failed\n  left: 2\n right: 1\n\n"
            ));
        }
        out.push_str(&format!(
            "test result: FAILED. 3 passed; {} failed; 0 ignored; finished in 0.31s\n",
            failing.len()
        ));
        crate::closure::verdict::OutputTail::capture(
            out.as_bytes(),
            b"",
            crate::closure::verdict::TailLimits::both(1024),
        )
        .render()
    }

    #[test]
    fn tails_of_the_same_failures_with_noise_of_different_length_normalise_equal() {
        let failing = [("login_route_returns_200", 17), ("totals_match", 40)];
        let short = cargo_tail(40, &failing);
        let long = cargo_tail(400, &failing);
        assert!(short.contains("lines elided") && long.contains("lines elided"));
        assert_ne!(short, long);
        assert_eq!(masked(&short), masked(&long));
        assert_eq!(
            masked("[... 1 line elided (12 bytes) ...]\nstderr (12 bytes elided):"),
            "[... <n> lines elided (<n> bytes) ...]\nstderr (<n> bytes elided):"
        );
        // Only the exact marker shapes are masked.
        for kept in [
            "[... 3 lines elided (12 kilobytes) ...]",
            "stdout (12 bytes elided): x",
        ] {
            assert_ne!(masked(kept), "[... <n> lines elided (<n> bytes) ...]");
            assert!(masked(kept).contains("12"), "{kept}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Masking the tail counts never makes different failures look alike: a different
        /// failing test or line still tells the tails apart, whatever the noise lengths; and
        /// the same failures look alike whenever both tails elided their noise (a tail short
        /// enough to keep all of it still shows its own noise lines, which differ).
        #[test]
        fn different_failures_in_tails_never_normalise_equal(
            noise_a in 0usize..300,
            noise_b in 0usize..300,
            line_a in 1u32..200,
            line_b in 1u32..200,
            rename in proptest::prelude::any::<bool>(),
        ) {
            let a = cargo_tail(noise_a, &[("login_route_returns_200", line_a), ("totals_match", 40)]);
            let other = if rename { "totals_match_again" } else { "totals_match" };
            let b = cargo_tail(noise_b, &[("login_route_returns_200", line_b), (other, 40)]);
            let same = line_a == line_b && !rename;
            let alike = masked(&a) == masked(&b);
            if same {
                let elided = |tail: &str| tail.contains("lines elided");
                if elided(&a) && elided(&b) {
                    proptest::prop_assert!(alike, "the same failures differ:\n{}\n---\n{}", a, b);
                }
            } else {
                proptest::prop_assert!(!alike, "different failures look alike:\n{}\n---\n{}", a, b);
            }
        }
    }

    #[test]
    fn real_runs_of_the_same_failures_normalise_equal() {
        let pairs = [
            (
                include_str!("../../../tests/fixtures/closure/guard_run1.stdout"),
                include_str!("../../../tests/fixtures/closure/guard_run2.stdout"),
            ),
            (
                include_str!("../../../tests/fixtures/closure/body_run1.stderr"),
                include_str!("../../../tests/fixtures/closure/body_run2.stderr"),
            ),
            (
                include_str!("../../../tests/fixtures/closure/redirect_run1.stdout"),
                include_str!("../../../tests/fixtures/closure/redirect_run2.stdout"),
            ),
        ];
        for (a, b) in pairs {
            assert_ne!(a, b, "the runs differ byte for byte");
            assert_eq!(masked(a), masked(b));
            assert_ne!(
                VerdictNormalizer::exact().normalize_text(a),
                VerdictNormalizer::exact().normalize_text(b)
            );
        }
    }
}
