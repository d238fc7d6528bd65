//! Rendering a fix subtask's spec from the root's spec and the whole attributed failure
//! list.

use crate::{closure::task::FailureEntry, closure::task::Spec, id::TaskId};

/// The spec of the fix subtask `fix_task_ref` at `depth`, rendered from the root task's
/// `root_spec` and every failure so far — never from the previous attempt's spec, so it
/// cannot wrap itself.
///
/// The intent holds a one-line header, the root's intent verbatim (exactly once, at any
/// depth), and every failure in order with its attempt, validator and severity, followed by
/// its justification verbatim (which carries the validator's output tail: test names,
/// assertions, files). The acceptance criteria are the root's, once, unchanged. The text is
/// deterministic (same input, same bytes) and its size is the root spec's plus a constant
/// per failure plus the failures' justifications: linear in the failure list.
///
/// # Examples
///
/// ```
/// use kleene::{closure::task::FailureEntry, closure::Severity, closure::Spec, id::TaskId, id::ValidatorId, closure::render_recovery_spec};
///
/// let root = Spec::new("add a /login route").with_criterion("cargo test passes");
/// let failures = [FailureEntry {
///     attempt: 0,
///     validator_id: ValidatorId::new("tests")?,
///     severity: Severity::Blocker,
///     justification: "test tests::login ... FAILED".into(),
/// }];
/// let spec = render_recovery_spec(&root, &TaskId::new("x_fix_1")?, 1, &failures);
/// assert_eq!(spec.intent.matches("add a /login route").count(), 1);
/// assert!(spec.intent.contains("attempt 0 · validator tests · blocker"));
/// assert_eq!(spec.acceptance_criteria, root.acceptance_criteria);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Complexity
///
/// Linear in the size of `root_spec` and `failures`.
pub fn render_recovery_spec(
    root_spec: &Spec,
    fix_task_ref: &TaskId,
    depth: u32,
    failures: &[FailureEntry],
) -> Spec {
    render_recovery_spec_of(root_spec, fix_task_ref, depth, [failures, &[]])
}

/// [`render_recovery_spec`] of the failures of `parts` in order (a task's prior failures,
/// then its own), without collecting them into one list first.
pub(crate) fn render_recovery_spec_of(
    root_spec: &Spec,
    fix_task_ref: &TaskId,
    depth: u32,
    parts: [&[FailureEntry]; 2],
) -> Spec {
    let failures = || parts.into_iter().flatten();
    let capacity = root_spec.intent.len()
        + failures()
            .map(|f| f.justification.len() + 96)
            .sum::<usize>()
        + 256;
    // Pieces pushed one by one: the formatting machinery cost more than the text it wrote.
    let mut intent = String::with_capacity(capacity);
    intent.push_str("Recovery task ");
    intent.push_str(fix_task_ref.as_str());
    intent.push_str(" (fix attempt ");
    push_number(&mut intent, depth.into());
    intent.push_str(
        "). Achieve the original task below; earlier attempts failed validation with the \
         failures listed after it.\n\n## Original task\n\n",
    );
    intent.push_str(&root_spec.intent);
    intent.push_str("\n\n## Failures so far (");
    push_number(&mut intent, (parts[0].len() + parts[1].len()) as u64);
    intent.push_str(")\n");
    for (i, f) in failures().enumerate() {
        intent.push_str("\n### Failure ");
        push_number(&mut intent, i as u64 + 1);
        intent.push_str(": attempt ");
        push_number(&mut intent, f.attempt.into());
        intent.push_str(" · validator ");
        intent.push_str(f.validator_id.as_str());
        intent.push_str(" · ");
        intent.push_str(f.severity.as_str());
        intent.push_str(" (");
        push_number(&mut intent, f.justification.len() as u64);
        intent.push_str(" bytes)\n\n");
        intent.push_str(&f.justification);
        intent.push('\n');
    }
    Spec {
        intent,
        acceptance_criteria: root_spec.acceptance_criteria.clone(),
    }
}

/// Appends `n` in decimal.
fn push_number(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend(digits[at..].iter().map(|&d| char::from(d)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{closure::verdict::Severity, id::ValidatorId};

    fn failure(attempt: u32, text: &str) -> FailureEntry {
        FailureEntry {
            attempt,
            validator_id: ValidatorId::new("tests").unwrap(),
            severity: Severity::Blocker,
            justification: text.into(),
        }
    }

    /// The text is part of every fix task's spec digest: it must stay what `format!` wrote.
    #[test]
    fn the_text_is_the_formatted_one() {
        let root = Spec::new("add /login").with_criterion("c");
        let id = TaskId::new("x_fix_12").unwrap();
        let fs = [
            failure(0, "boom"),
            failure(10, ""),
            failure(4_294_967_295, "z\n"),
        ];
        let mut expected = format!(
            "Recovery task {id} (fix attempt {}). Achieve the original task below; \
             earlier attempts failed validation with the failures listed after it.\n\n\
             ## Original task\n\n{}\n\n## Failures so far ({})\n",
            120,
            root.intent,
            fs.len()
        );
        for (i, f) in fs.iter().enumerate() {
            expected.push_str(&format!(
                "\n### Failure {}: attempt {} · validator {} · {} ({} bytes)\n\n{}\n",
                i + 1,
                f.attempt,
                f.validator_id,
                f.severity,
                f.justification.len(),
                f.justification
            ));
        }
        assert_eq!(render_recovery_spec(&root, &id, 120, &fs).intent, expected);
        let mut n = String::new();
        for v in [0u64, 9, 10, 99, 100, u64::MAX] {
            push_number(&mut n, v);
            n.push(',');
        }
        assert_eq!(n, format!("0,9,10,99,100,{},", u64::MAX));
    }

    #[test]
    fn deterministic_and_linear() {
        let root = Spec::new("intent").with_criterion("c");
        let id = TaskId::new("x_fix_1").unwrap();
        let fs: Vec<_> = (0..10).map(|a| failure(a, "boom")).collect();
        let a = render_recovery_spec(&root, &id, 1, &fs);
        assert_eq!(a, render_recovery_spec(&root, &id, 1, &fs));
        let sizes: Vec<usize> = (1..=10)
            .map(|n| render_recovery_spec(&root, &id, 1, &fs[..n]).intent.len())
            .collect();
        let steps: Vec<usize> = sizes.windows(2).map(|w| w[1] - w[0]).collect();
        // Each failure adds the same amount, give or take a digit of its numbering.
        assert!(steps.iter().all(|s| s.abs_diff(steps[0]) <= 2), "{steps:?}");
        assert_eq!(a.intent.matches("intent").count(), 1);
    }
}
