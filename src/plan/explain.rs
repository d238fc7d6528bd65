//! Load errors in the plan author's terms: what JSON was expected where, never the Rust type
//! that reads it.
//!
//! serde's messages name the reader (`expected struct Spec`, `internally tagged enum
//! KindRepr`, `expected u32`) and its own vocabulary (`variant`, `sequence`, `map`). The
//! field path of an error already says which key was being read, so the key's JSON shape is
//! looked up by name and the message is rewritten around it; messages kleene wrote itself
//! (ids, paths, unknown keys) are kept as they are.

/// The JSON each key of the plan format holds, for messages. `name[]` is one entry of the
/// array `name`.
const SHAPES: &[(&str, &str)] = &[
    (
        "tasks",
        r#"an array of task objects such as [{"id": "tests", "owner": "shell", "spec": {"intent": "…"}}]"#,
    ),
    (
        "tasks[]",
        r#"a task object such as {"id": "tests", "owner": "shell", "spec": {"intent": "…"}}"#,
    ),
    ("id", r#"a string such as "unit_tests""#),
    (
        "kind",
        r#"an object such as {"lane": "general"} or {"lane": "model", "module": "users"}"#,
    ),
    (
        "lane",
        r#"one of "general", "module", "model", "persistence", "service", "page", "config", "auth""#,
    ),
    (
        "module",
        r#"a module name such as "users" (letters, digits, _ and -)"#,
    ),
    ("owner", r#"a string such as "shell" (who does the task)"#),
    (
        "spec",
        r#"an object such as {"intent": "…", "acceptance_criteria": ["…"]}"#,
    ),
    (
        "intent",
        r#"a string such as "the tests pass" (what the task must achieve)"#,
    ),
    (
        "acceptance_criteria",
        r#"an array of strings such as ["pytest passes"]"#,
    ),
    (
        "acceptance_criteria[]",
        r#"a string such as "pytest passes""#,
    ),
    (
        "owned_paths",
        r#"an array of relative paths such as ["src/app.py", "tests"]"#,
    ),
    ("owned_paths[]", r#"a relative path such as "src/app.py""#),
    ("depends_on", r#"an array of task ids such as ["setup"]"#),
    ("depends_on[]", r#"a task id such as "setup""#),
    ("retry_limit", "a whole number, 0 or more, such as 3"),
    (
        "input_contracts",
        r#"an array of objects such as [{"from": "model_users", "contract": "schemas"}]"#,
    ),
    (
        "input_contracts[]",
        r#"an object such as {"from": "model_users", "contract": "schemas"}"#,
    ),
    ("from", r#"a task id such as "model_users""#),
    ("contract", r#"one of "module", "persistence", "schemas""#),
    ("origin", r#""planned" or "synthesized""#),
    (
        "consolidated_from",
        r#"an array of task ids such as ["db_users"]"#,
    ),
    ("consolidated_from[]", r#"a task id such as "db_users""#),
];

/// The shape of the whole document.
const PLAN_SHAPE: &str = r#"an object such as {"tasks": [...]}"#;

/// serde's message about the value at `path` (a field path such as `tasks[0].spec`, `.` for
/// the document) rewritten in JSON terms: `spec must be an object such as {"intent": "…",
/// "acceptance_criteria": ["…"]}, not the string "first"`. `shapes` names the JSON of keys
/// the caller reads itself (extension keys, as `(key, shape)`, `key[]` for one entry of an
/// array); the plan format's own keys are known. A message that names no type (an unknown
/// key, a refused id or path) is returned unchanged.
///
/// # Examples
///
/// ```
/// use kleene::plan::explain_value_error;
///
/// let m = explain_value_error("tasks[0].spec", r#"invalid type: string "first", expected struct Spec"#, &[]);
/// assert_eq!(m, r#"spec must be an object such as {"intent": "…", "acceptance_criteria": ["…"]}, not the string "first""#);
/// let m = explain_value_error("tasks[0].timeout_secs", r#"invalid type: string "5", expected f64"#,
///                             &[("timeout_secs", "a number of seconds such as 60")]);
/// assert_eq!(m, r#"timeout_secs must be a number of seconds such as 60, not the string "5""#);
/// ```
pub fn explain_value_error(path: &str, message: &str, shapes: &[(&str, &str)]) -> String {
    let subject = subject(path);
    let shape_of = |key: &str| {
        shapes
            .iter()
            .chain(SHAPES)
            .find(|(k, _)| *k == key)
            .map(|(_, s)| *s)
    };
    let own_shape = || {
        if subject == "the plan" {
            Some(PLAN_SHAPE)
        } else {
            shape_of(&shape_key(path))
        }
    };
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = message.strip_prefix(prefix)
            && let Some((found, expected)) = rest.rsplit_once(", expected ")
        {
            let expected = own_shape().map_or_else(|| plain_expected(expected), str::to_owned);
            return format!("{subject} must be {expected}, not {}", found_json(found));
        }
    }
    if let Some(rest) = message.strip_prefix("missing field `")
        && let Some(key) = rest.strip_suffix('`')
    {
        return match shape_of(key) {
            Some(shape) => format!("{subject} is missing \"{key}\": {shape}"),
            None => format!("{subject} is missing \"{key}\""),
        };
    }
    if let Some(rest) = message.strip_prefix("unknown variant `")
        && let Some((value, expected)) = rest.split_once("`, expected ")
    {
        let expected = own_shape().map_or_else(|| plain_expected(expected), str::to_owned);
        return format!("{subject} must be {expected}, not \"{value}\"");
    }
    // serde's words for an object that takes no keys at all (`{"lane": "general"}`).
    if let Some(key) = message
        .strip_prefix("unknown field `")
        .and_then(|k| k.strip_suffix("`, there are no fields"))
    {
        return format!("{subject} takes no \"{key}\" here; remove it");
    }
    if let Some(key) = message
        .strip_prefix("duplicate field `")
        .and_then(|k| k.strip_suffix('`'))
    {
        return format!("\"{key}\" appears twice in {subject}; keep one");
    }
    message.to_owned()
}

/// What the message is about: the last key of `path` with its index (`owned_paths[0]`), or
/// `the plan` for the document itself.
fn subject(path: &str) -> String {
    let path = trim_unknown(path);
    match path.rsplit('.').next() {
        None | Some("") => "the plan".to_owned(),
        Some(last) => last.to_owned(),
    }
}

/// The key under which [`SHAPES`] describes the value at `path`: `owned_paths[0]` →
/// `owned_paths[]`, `spec` → `spec`.
fn shape_key(path: &str) -> String {
    let last = subject(path);
    match last.split_once('[') {
        Some((name, _)) => format!("{name}[]"),
        None => last,
    }
}

/// The path without serde_path_to_error's `?` segments (a key it had not read yet).
pub(crate) fn trim_unknown(path: &str) -> &str {
    let mut path = path;
    while let Some(rest) = path.strip_suffix('?') {
        path = rest.strip_suffix('.').unwrap_or(rest);
    }
    if path.is_empty() { "." } else { path }
}

/// serde's "expected" text for a type with no shape in the table, without Rust names:
/// `a sequence` → `an array`, `u32` → `a whole number`.
fn plain_expected(expected: &str) -> String {
    let e = expected.trim();
    let words = [
        ("a sequence", "an array"),
        ("a map", "an object"),
        ("a string", "a string"),
        ("a boolean", "true or false"),
        ("a borrowed string", "a string"),
    ];
    if let Some((_, w)) = words.iter().find(|(k, _)| *k == e) {
        return (*w).to_owned();
    }
    if matches!(e, "u8" | "u16" | "u32" | "u64" | "usize") {
        return "a whole number, 0 or more".to_owned();
    }
    if matches!(e, "i8" | "i16" | "i32" | "i64" | "isize") {
        return "a whole number".to_owned();
    }
    if matches!(e, "f32" | "f64") {
        return "a number".to_owned();
    }
    if e.starts_with("struct ") || e.starts_with("internally tagged enum") || e.starts_with("enum ")
    {
        return "an object".to_owned();
    }
    // `one of `a`, `b``, `` `a` or `b` ``: the values as JSON strings.
    let e = e.replace('`', "\"");
    e.strip_prefix("one of ")
        .map_or_else(|| e.clone(), |list| format!("one of {list}"))
}

/// serde's description of the value it found (`string "first"`, `sequence`, `integer `3``)
/// as the JSON the author wrote.
fn found_json(found: &str) -> String {
    let found = found.trim();
    if let Some(s) = found.strip_prefix("string ") {
        return format!("the string {s}");
    }
    for prefix in ["integer ", "floating point ", "boolean "] {
        if let Some(v) = found.strip_prefix(prefix) {
            let v = v.trim_matches('`');
            return if prefix == "boolean " {
                v.to_owned()
            } else {
                format!("the number {v}")
            };
        }
    }
    match found {
        "sequence" => "an array".to_owned(),
        "map" => "an object".to_owned(),
        "unit value" | "null" => "null".to_owned(),
        other => other.to_owned(),
    }
}

/// serde_json's message about malformed JSON at 1-based `line` and `column` of `text`,
/// saying what JSON expected there.
pub(crate) fn explain_syntax_error(
    text: &str,
    line: usize,
    column: usize,
    message: &str,
) -> String {
    const TRAILING: &str =
        "trailing comma: JSON allows no `,` before a closing `}` or `]`; remove it";
    match message {
        "trailing comma" => TRAILING.to_owned(),
        "key must be a string" => {
            if comma_before(text, line, column) {
                TRAILING.to_owned()
            } else {
                "expected a key in double quotes, such as \"id\"".to_owned()
            }
        }
        "expected `:`" => "expected `:` between a key and its value".to_owned(),
        "expected `,` or `}`" => {
            "expected `,` before the next key, or `}` to close the object".to_owned()
        }
        "expected `,` or `]`" => {
            "expected `,` before the next entry, or `]` to close the array".to_owned()
        }
        "expected value" => {
            "expected a JSON value: \"text\", a number, true, false, null, [...] or {...}"
                .to_owned()
        }
        "expected ident" => "expected true, false or null (JSON words are lowercase)".to_owned(),
        "trailing characters" => "unexpected text after the end of the plan object".to_owned(),
        "EOF while parsing an object" => {
            "the file ends inside an object: a `}` is missing".to_owned()
        }
        "EOF while parsing a list" => "the file ends inside an array: a `]` is missing".to_owned(),
        "EOF while parsing a string" => {
            "the file ends inside a string: a closing `\"` is missing".to_owned()
        }
        "EOF while parsing a value" => "the file ends where a value was expected".to_owned(),
        m if m.starts_with("control character") => {
            "a string may not hold a raw line break or tab; write \\n or \\t".to_owned()
        }
        other => other.to_owned(),
    }
}

/// Whether the last character before 1-based `line`, `column` of `text` (skipping
/// whitespace and the `}` or `]` the error may point at) is a comma.
fn comma_before(text: &str, line: usize, column: usize) -> bool {
    let line_start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    let end = (line_start + column).min(text.len());
    let Some(before) = text.get(..end) else {
        return false;
    };
    let before = before.trim_end();
    let before = before.strip_suffix(['}', ']']).unwrap_or(before).trim_end();
    before.ends_with(',')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_names_become_json_shapes() {
        let m = explain_value_error(
            "tasks[0].kind",
            r#"invalid type: string "model", expected internally tagged enum KindRepr"#,
            &[],
        );
        assert!(
            m.starts_with("kind must be an object such as {\"lane\""),
            "{m}"
        );
        assert!(m.ends_with("not the string \"model\""), "{m}");
        let m = explain_value_error(
            "tasks[0].retry_limit",
            "invalid value: integer `-1`, expected u32",
            &[],
        );
        assert_eq!(
            m,
            "retry_limit must be a whole number, 0 or more, such as 3, not the number -1"
        );
        let m = explain_value_error("tasks[1]", "missing field `owner`", &[]);
        assert_eq!(
            m,
            "tasks[1] is missing \"owner\": a string such as \"shell\" (who does the task)"
        );
        let m = explain_value_error(
            "tasks[0].kind.lane",
            "unknown variant `modle`, expected one of `module`, `model`",
            &[],
        );
        assert!(m.starts_with("lane must be one of \"general\""), "{m}");
        assert!(m.ends_with("not \"modle\""), "{m}");
        let m = explain_value_error(".", "invalid type: sequence, expected a plan object", &[]);
        assert_eq!(
            m,
            "the plan must be an object such as {\"tasks\": [...]}, not an array"
        );
        let m = explain_value_error("x.y", "invalid type: map, expected a sequence", &[]);
        assert_eq!(m, "y must be an array, not an object");
        let m = explain_value_error(
            "tasks[0].kind",
            "unknown field `module`, there are no fields",
            &[],
        );
        assert_eq!(m, "kind takes no \"module\" here; remove it");
        let kept = "unknown field `depend_on`, did you mean `depends_on`?";
        assert_eq!(explain_value_error("tasks[0].depend_on", kept, &[]), kept);
    }

    #[test]
    fn unknown_path_segments_are_dropped() {
        assert_eq!(trim_unknown("tasks[0].spec.?"), "tasks[0].spec");
        assert_eq!(trim_unknown("?"), ".");
        assert_eq!(trim_unknown("tasks"), "tasks");
    }

    #[test]
    fn a_comma_before_a_closing_brace_is_a_trailing_comma() {
        let text = "{\"a\": 1,\n  }";
        assert!(
            explain_syntax_error(text, 2, 3, "key must be a string").starts_with("trailing comma")
        );
        assert!(
            explain_syntax_error("{a: 1}", 1, 2, "key must be a string").contains("double quotes")
        );
    }
}
