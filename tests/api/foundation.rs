//! Foundation: ids, tasks, verdicts, output tails, the typestate inner loop, checkpoints.

use std::path::Path;

use kleene::checkpoint::{self, CheckpointError};
use kleene::{
    Task,
    closure::{Spec, verdict::OutputTail, verdict::TailLimits},
    id::TaskId,
};
use proptest::prelude::*;

fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn task_round_trips_through_the_envelope() {
    let task = Task::new(TaskId::new("t").unwrap(), Spec::new("x"));
    let bytes = checkpoint::encode(&task).unwrap();
    assert_eq!(checkpoint::decode::<Task>(&bytes).unwrap(), task);
}

/// The compile-fail proofs: each illegal use of the inner loop or of a token is rejected by
/// the compiler (`.stderr` files pin the diagnostics for rustc 1.95).
#[test]
fn illegal_transitions_and_token_misuse_do_not_compile() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}

mod old_data {
    use super::*;

    /// `tests/fixtures/task_v1.ckpt` was written by the pre-R21 task shape (format version
    /// 1); the unit test `version_one_fixture_is_what_the_v1_shape_writes` regenerates it.
    #[test]
    fn a_format_version_1_task_loads_with_r21_defaults() {
        let task = checkpoint::decode::<Task>(&fixture("task_v1.ckpt")).unwrap();
        assert_eq!(task.id().as_str(), "task_X_fix_1");
        assert_eq!(task.depth(), 1);
        assert_eq!(task.parent_task_ref().map(TaskId::as_str), Some("task_X"));
        assert_eq!(task.spec().intent, "fix the failing login test");
        assert_eq!(task.spec().acceptance_criteria, ["GET /login is 200"]);
        // `None, None, []`: nothing explicit; the accessors fall back to the task itself.
        assert!(!task.has_explicit_root());
        assert_eq!(task.root_task_ref(), task.id());
        assert_eq!(task.root_spec(), task.spec());
        assert!(task.prior_failures().is_empty());
        // Re-encoding writes today's version, which reads back unchanged.
        let again = checkpoint::encode(&task).unwrap();
        assert_ne!(again, fixture("task_v1.ckpt"));
        assert_eq!(checkpoint::decode::<Task>(&again).unwrap(), task);
    }

    #[test]
    fn json_without_r21_fields_loads() {
        let json = r#"{"id":"task_X_fix_1","spec":{"intent":"fix it"},"depth":1,
                       "parent_task_ref":"task_X"}"#;
        let task: Task = serde_json::from_str(json).unwrap();
        assert!(!task.has_explicit_root());
        assert_eq!(task.root_task_ref().as_str(), "task_X_fix_1");
        assert!(task.prior_failures().is_empty());
        assert_eq!(
            serde_json::from_str::<Task>(&serde_json::to_string(&task).unwrap()).unwrap(),
            task
        );
    }
}

mod envelope_props {
    use super::*;

    fn envelope() -> Vec<u8> {
        checkpoint::encode(&Task::new(
            TaskId::new("task_X").unwrap(),
            Spec::new("add a /login route").with_criterion("GET /login is 200"),
        ))
        .unwrap()
    }

    proptest! {
        #[test]
        fn any_flipped_byte_is_detected(at in any::<prop::sample::Index>(), mask in 1u8..) {
            let mut bytes = envelope();
            let i = at.index(bytes.len());
            bytes[i] ^= mask;
            prop_assert!(checkpoint::decode::<Task>(&bytes).is_err());
        }

        #[test]
        fn any_truncation_is_detected(at in any::<prop::sample::Index>()) {
            let bytes = envelope();
            let cut = &bytes[..at.index(bytes.len())];
            prop_assert!(
                matches!(
                    checkpoint::decode::<Task>(cut),
                    Err(CheckpointError::TooShort { .. })
                ),
                "{:?}",
                checkpoint::decode::<Task>(cut)
            );
        }

        #[test]
        fn random_bytes_never_panic_the_decoder(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            prop_assert!(checkpoint::decode::<Task>(&bytes).is_err());
        }
    }

    #[cfg(feature = "testing")]
    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn any_task_round_trips_unchanged(task in kleene::testing::foundation::task()) {
            let bytes = checkpoint::encode(&task).unwrap();
            prop_assert_eq!(checkpoint::decode::<Task>(&bytes).unwrap(), task.clone());
            let json = serde_json::to_string(&task).unwrap();
            prop_assert_eq!(serde_json::from_str::<Task>(&json).unwrap(), task);
        }

        #[test]
        fn a_flipped_byte_in_any_task_is_detected(
            task in kleene::testing::foundation::task(),
            at in any::<prop::sample::Index>(),
            mask in 1u8..,
        ) {
            let mut bytes = checkpoint::encode(&task).unwrap();
            let i = at.index(bytes.len());
            bytes[i] ^= mask;
            prop_assert!(checkpoint::decode::<Task>(&bytes).is_err());
        }
    }
}

#[cfg(feature = "testing")]
mod verdict_props {
    use kleene::testing::foundation::{validator_result, verdict};
    use kleene::{closure::ValidatorResult, closure::Verdict};
    use proptest::prelude::*;

    fn results() -> impl Strategy<Value = Vec<ValidatorResult>> {
        prop::collection::vec(validator_result(), 1..8)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn equality_ignores_order(
            (rs, shuffled) in results().prop_flat_map(|rs| (Just(rs.clone()), Just(rs).prop_shuffle())),
        ) {
            prop_assert_eq!(Verdict::new(rs), Verdict::new(shuffled));
        }

        #[test]
        fn equality_counts_duplicates(rs in results(), at in any::<prop::sample::Index>()) {
            let extra = rs[at.index(rs.len())].clone();
            let base = Verdict::new(rs.clone());
            let mut more = rs.clone();
            more.push(extra);
            prop_assert_ne!(&base, &Verdict::new(more));
            let mut fewer = rs;
            fewer.remove(at.index(fewer.len()));
            prop_assert_ne!(&base, &Verdict::new(fewer));
        }

        /// A verdict persisted inside a closure state reads back equal.
        #[test]
        fn equality_survives_serialisation(v in verdict()) {
            use kleene::{Task, checkpoint, closure::Closure, id::TaskId};
            use kleene::closure::{ClosureState, RecoveryPolicy, step::Session, Spec};
            let task = Task::new(TaskId::new("t").unwrap(), Spec::new("x"));
            let session = Session::new("build", "p").unwrap();
            let Closure::Governance(due) = Closure::start(task, session, RecoveryPolicy::default())
            else { unreachable!("a closure starts at governance") };
            let Closure::PreValidate(due) = due.feed(kleene::closure::GovernanceDecision::Approve)
            else { unreachable!("approval leads to pre-validation") };
            let state = due.feed(v.clone()).state();
            let back = checkpoint::decode::<ClosureState>(&checkpoint::encode(&state).unwrap());
            prop_assert_eq!(back.unwrap(), state);
        }
    }
}

mod tails {
    use super::*;

    /// Splits kept text into (marker bytes, bytes elided according to the markers).
    fn marker_accounting(kept: &str) -> (usize, u64) {
        let mut marker_bytes = 0;
        let mut elided = 0;
        for line in kept.split_inclusive('\n') {
            let Some(inner) = line.strip_prefix("[... ") else {
                continue;
            };
            let Some(inner) = inner.trim_end().strip_suffix(" bytes) ...]") else {
                continue;
            };
            let Some((_, n)) = inner.rsplit_once(" elided (") else {
                continue;
            };
            marker_bytes += line.len();
            elided += n.parse::<u64>().unwrap();
        }
        (marker_bytes, elided)
    }

    fn last_non_blank_line(text: &str) -> Option<&str> {
        text.lines().rev().find(|l| !l.trim().is_empty())
    }

    /// Lines the tail must keep from a real cargo test run.
    fn cargo_must_keep(out: &str) -> Vec<String> {
        let mut keep = Vec::new();
        let mut message = false;
        for line in out.lines() {
            if let Some(name) = line
                .strip_prefix("test ")
                .and_then(|l| l.strip_suffix(" ... FAILED"))
            {
                keep.push(line.to_owned());
                keep.push(format!("---- {name} stdout ----"));
                keep.push(format!("    {name}"));
            }
            if line.contains("panicked at ") {
                message = true;
                keep.push(line.to_owned());
                continue;
            }
            if message
                && (line.is_empty() || line == "stack backtrace:" || line.starts_with("note:"))
            {
                message = false;
            }
            if message {
                keep.push(line.to_owned());
            }
        }
        keep.push(last_non_blank_line(out).unwrap().to_owned());
        keep
    }

    /// Lines the tail must keep from a real pytest run.
    fn pytest_must_keep(out: &str) -> Vec<String> {
        out.lines()
            .filter(|l| {
                l.starts_with("FAILED ")
                    || l.starts_with("E ")
                    || (l.starts_with("tests/")
                        && l.contains(".py:")
                        && !l.ends_with(": ")
                        && !l.contains(": in "))
                    || (l.starts_with("___") && l.contains(" test_"))
                    || l.contains("short test summary info")
            })
            .map(str::to_owned)
            .chain(last_non_blank_line(out).map(str::to_owned))
            .collect()
    }

    fn check(name: &str, must_keep: fn(&str) -> Vec<String>, failing: usize) {
        let stdout = fixture(&format!("tails/{name}.stdout"));
        let stderr = fixture(&format!("tails/{name}.stderr"));
        let tail = OutputTail::capture(&stdout, &stderr, TailLimits::default());
        for (raw, kept, elided) in [
            (&stdout, tail.stdout(), tail.stdout_elided()),
            (&stderr, tail.stderr(), tail.stderr_elided()),
        ] {
            let text = String::from_utf8_lossy(raw);
            assert!(kept.len() <= 4096, "{name}: {} bytes kept", kept.len());
            let (marker_bytes, marked) = marker_accounting(kept);
            assert_eq!(marked, elided, "{name}: markers disagree with elided_bytes");
            assert_eq!(
                kept.len() - marker_bytes + elided as usize,
                text.len(),
                "{name}"
            );
            if let Some(last) = last_non_blank_line(&text) {
                assert_eq!(last_non_blank_line(kept), Some(last), "{name}");
            }
        }
        let text = String::from_utf8_lossy(&stdout);
        let keep = must_keep(&text);
        assert!(keep.len() > failing, "{name}: the fixture has its failures");
        for line in keep {
            let kept = tail.stdout().lines().any(|l| l == line);
            assert!(
                kept,
                "{name}: lost {line:?}\n--- kept ---\n{}",
                tail.stdout()
            );
        }
        assert_eq!(
            tail.render(),
            OutputTail::capture(&stdout, &stderr, TailLimits::default()).render()
        );
    }

    #[test]
    fn cargo_test_without_backtraces() {
        check("cargo_nobt", cargo_must_keep, 5);
    }

    #[test]
    fn cargo_test_with_backtraces_keeps_what_a_last_4k_window_loses() {
        let stdout = fixture("tails/cargo_bt.stdout");
        let window = String::from_utf8_lossy(&stdout[stdout.len() - 4096..]).into_owned();
        assert!(!window.contains("---- tests::deep_recursion_fails stdout ----"));
        assert!(!window.contains("panicked at src/lib.rs:4:17:"));
        check("cargo_bt", cargo_must_keep, 5);
    }

    #[test]
    fn cargo_test_with_full_backtraces() {
        check("cargo_btfull", cargo_must_keep, 5);
        let tail = OutputTail::capture(
            &fixture("tails/cargo_btfull.stdout"),
            b"",
            TailLimits::default(),
        );
        assert!(tail.elided_bytes() > 60_000);
        assert!(tail.render().starts_with("stdout ("));
    }

    #[test]
    fn pytest_short_tracebacks() {
        check("pytest", pytest_must_keep, 6);
    }

    #[test]
    fn pytest_long_tracebacks() {
        let stdout = fixture("tails/pytest_long.stdout");
        let window = String::from_utf8_lossy(&stdout[stdout.len() - 4096..]).into_owned();
        assert!(!window.contains("tests/test_app.py:14: AssertionError"));
        check("pytest_long", pytest_must_keep, 6);
    }

    /// Bytes that look like test output: realistic lines, arbitrary bytes (invalid UTF-8
    /// included), very long lines, blank lines.
    fn output() -> impl Strategy<Value = Vec<u8>> {
        let chunk = prop_oneof![
            4 => prop::sample::select(vec![
                "test tests::a ... FAILED\n",
                "thread 'tests::a' (7) panicked at src/lib.rs:4:17:\n",
                "assertion `left == right` failed\n",
                "  left: 1\n",
                "  12: core::panicking::panic_fmt\n",
                "             at ./src/lib.rs:4:17\n",
                "E       assert 1 == 2\n",
                "tests/t.py:3: \n",
                "tests/t.py:9: AssertionError\n",
                "____ test_x ____\n",
                "failures:\n",
                "    tests::a\n",
                "test result: FAILED. 0 passed; 1 failed\n",
                "\n",
                "   \n",
                "é€😀\n",
            ]).prop_map(|s| s.as_bytes().to_vec()),
            2 => prop::collection::vec(any::<u8>(), 0..40),
            1 => (1usize..3000, prop::sample::select(vec!["x", "é", "😀", " "]))
                .prop_map(|(n, s)| s.repeat(n).into_bytes()),
        ];
        prop::collection::vec(chunk, 0..60).prop_map(|cs| cs.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn never_exceeds_its_bound_and_accounts_for_every_byte(
            out in output(),
            err in output(),
            limit in 0usize..3000,
        ) {
            let tail = OutputTail::capture(&out, &err, TailLimits { stdout: limit, stderr: limit / 2 });
            prop_assert!(tail.stdout().len() <= limit);
            prop_assert!(tail.stderr().len() <= limit / 2);
            let text = String::from_utf8_lossy(&out);
            if limit >= TailLimits::MIN_STREAM {
                let (marker_bytes, marked) = marker_accounting(tail.stdout());
                prop_assert_eq!(marked, tail.stdout_elided());
                prop_assert_eq!(
                    tail.stdout().len() - marker_bytes + tail.stdout_elided() as usize,
                    text.len()
                );
            }
        }

        /// "Keeps the final line": the last non-blank line (with the blank lines after it)
        /// is kept whole; when it alone cannot fit, the kept text is one marker followed by
        /// a non-empty end of that line.
        #[test]
        fn always_keeps_the_final_line(
            out in output(),
            limit in TailLimits::MIN_STREAM..3000,
        ) {
            let tail = OutputTail::capture(&out, b"", TailLimits { stdout: limit, stderr: 0 });
            let text = String::from_utf8_lossy(&out);
            let kept = tail.stdout();
            prop_assert!(kept.len() <= limit);
            if text.len() <= limit {
                prop_assert_eq!(kept, &*text);
                return Ok(());
            }
            let Some(start) = text
                .split_inclusive('\n')
                .scan(0, |at, l| { let s = *at; *at += l.len(); Some((s, l)) })
                .filter(|(_, l)| !l.trim().is_empty())
                .map(|(s, _)| s)
                .last()
            else {
                return Ok(()); // blank output: nothing to keep
            };
            let final_group = &text[start..];
            if !kept.ends_with(final_group) {
                let (marker, rest) = kept.split_once('\n').unwrap();
                prop_assert!(marker.starts_with("[... ") && marker.ends_with(" bytes) ...]"), "{kept:?}");
                prop_assert!(!rest.is_empty(), "{kept:?}");
                prop_assert!(final_group.trim_end().ends_with(rest), "{kept:?}");
                // Only a final line that (nearly) fills the bound on its own is cut.
                prop_assert!(final_group.len() + 64 > limit, "{} vs {limit}", final_group.len());
            }
        }

        /// Below `MIN_STREAM` there is no room for a marker: the end of the final line.
        #[test]
        fn tiny_bounds_keep_the_end_of_the_final_line(
            out in output(),
            limit in 0usize..TailLimits::MIN_STREAM,
        ) {
            let tail = OutputTail::capture(&out, b"", TailLimits::both(limit));
            let text = String::from_utf8_lossy(&out);
            prop_assert!(tail.stdout().len() <= limit);
            let kept = tail.stdout();
            let last = text.trim_end().rsplit('\n').next().unwrap_or("");
            if text.len() > limit && !kept.trim_end().ends_with(last) {
                prop_assert!(last.ends_with(kept), "{kept:?}");
                prop_assert!(kept.len() + 4 > limit.min(last.len()), "{kept:?}");
            }
        }
    }
}
