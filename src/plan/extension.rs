//! Extension keys: JSON members a plan file carries for a tool built on kleene, kept raw on
//! the task (or the plan) they belong to and bound into the plan digest.
//!
//! A tool that runs plans needs keys of its own (the `kleene` CLI reads `run`, `checks`,
//! `fix`, `timeout_secs` and `scratch`). It declares them in [`Extensions`] and loads with
//! [`AppBuildPlan::from_json_with`](super::AppBuildPlan::from_json_with): each declared key's
//! value is kept as an [`ExtensionValue`], every other unknown key is still refused, with a
//! suggestion when it is close to a known one.
//!
//! ```
//! use kleene::{AppBuildPlan, plan::Extensions};
//!
//! const CLI: Extensions<'static> = Extensions { task_keys: &["run"], plan_keys: &[] };
//! let json = r#"{"tasks": [{"id": "build", "owner": "sh", "spec": {"intent": "compile"},
//!                           "run": "cargo build"}]}"#;
//! let plan = AppBuildPlan::from_json_with(json, &CLI)?;
//! let run = plan.tasks[0].extension("run").unwrap();
//! assert_eq!(run.parse::<String>()?, "cargo build");
//! assert_eq!(&json[run.offset().unwrap()..][..13], "\"cargo build\"");
//!
//! let typo = json.replace("\"run\"", "\"rnu\"");
//! let err = AppBuildPlan::from_json_with(&typo, &CLI).unwrap_err();
//! assert!(err.to_string().contains("unknown field `rnu`, did you mean `run`?"), "{err}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Serialize, Serializer};
use serde_json::Value;

/// The extension keys a loader accepts besides the plan's own fields.
///
/// A key that is also a field of the plan format (`id`, `tasks`, …) is that field, never an
/// extension.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Extensions<'a> {
    /// Keys a task object may carry.
    pub task_keys: &'a [&'a str],
    /// Keys the top-level plan object may carry.
    pub plan_keys: &'a [&'a str],
}

impl Extensions<'static> {
    /// No extension keys: every key outside the plan format is refused.
    pub const NONE: Self = Self {
        task_keys: &[],
        plan_keys: &[],
    };
}

/// The value of one extension key: the JSON text as written, its canonical form, and where it
/// was in the document it was loaded from.
///
/// Two values are equal when their canonical forms are (object keys sorted, no whitespace,
/// numbers and strings as serde_json writes them), so reformatting a plan file or reordering
/// the keys of an object changes neither equality nor the plan digest, while any change to
/// the value itself does.
#[derive(Clone)]
pub struct ExtensionValue {
    json: Box<str>,
    canonical: Box<str>,
    offset: Option<usize>,
}

impl ExtensionValue {
    /// A value made in code (it has no place in a document).
    ///
    /// # Examples
    ///
    /// ```
    /// use kleene::plan::ExtensionValue;
    ///
    /// let v = ExtensionValue::new(&serde_json::json!({"b": 1, "a": [true, null]}));
    /// assert_eq!(v.canonical(), r#"{"a":[true,null],"b":1}"#);
    /// assert_eq!(v.offset(), None);
    /// ```
    pub fn new(value: &Value) -> Self {
        let canonical: Box<str> = canonical(value).into();
        Self {
            json: canonical.clone(),
            canonical,
            offset: None,
        }
    }

    /// A value read from a document: its raw text and the byte offset where it starts.
    pub(crate) fn from_document(
        json: &str,
        offset: Option<usize>,
    ) -> Result<Self, serde_json::Error> {
        let value: Value = serde_json::from_str(json)?;
        Ok(Self {
            json: json.into(),
            canonical: canonical(&value).into(),
            offset,
        })
    }

    /// The JSON text exactly as written in the document (for a value made in code, its
    /// canonical form).
    pub fn json(&self) -> &str {
        &self.json
    }

    /// The canonical JSON text: what equality and the plan digest use.
    pub fn canonical(&self) -> &str {
        &self.canonical
    }

    /// The byte offset in the loaded document where the value starts, so an error found
    /// while reading the value can point at the user's file.
    pub fn offset(&self) -> Option<usize> {
        self.offset
    }

    /// Reads the value as `T`.
    ///
    /// # Errors
    ///
    /// serde_json's error; its line and column count from the start of the value (line 1
    /// column 1 is [`offset`](Self::offset)).
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.json)
    }
}

impl PartialEq for ExtensionValue {
    fn eq(&self, other: &Self) -> bool {
        self.canonical == other.canonical
    }
}

impl Eq for ExtensionValue {}

impl std::hash::Hash for ExtensionValue {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.canonical.hash(state);
    }
}

impl fmt::Debug for ExtensionValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ExtensionValue({})", self.canonical)
    }
}

impl Serialize for ExtensionValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Through a `Value`, so every serializer sees plain data (not serde_json's raw-value
        // token, which only serde_json understands).
        let value: Value =
            serde_json::from_str(&self.canonical).map_err(serde::ser::Error::custom)?;
        value.serialize(s)
    }
}

/// The canonical JSON text of `value`: object keys sorted by their bytes, no whitespace.
fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => push_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Sorted here rather than trusting the map's order: another crate in the build
            // can turn on serde_json's `preserve_order`.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_string(k, out);
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
    }
}

fn push_string(s: &str, out: &mut String) {
    // Serialising a string cannot fail; an empty fallback would still be deterministic.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

/// The known key closest to `unknown`, if one is close enough to be a likely typo: the same
/// letters in another case or without the `_` (`dependsOn`, `dependson`), else at most two
/// edits and fewer edits than the typed key has characters, else the one key the typed key
/// (four letters or more) begins (`depends`, `timeout`).
pub(crate) fn did_you_mean<'k>(
    unknown: &str,
    known: impl Iterator<Item = &'k str>,
) -> Option<&'k str> {
    let known: Vec<&'k str> = known.collect();
    let squash = |s: &str| -> String {
        s.chars()
            .filter(|c| c.is_alphanumeric())
            .flat_map(char::to_lowercase)
            .collect()
    };
    let typed = squash(unknown);
    if let Some(k) = known.iter().find(|k| squash(k) == typed) {
        return Some(k);
    }
    let limit = 2.min(unknown.chars().count().saturating_sub(1));
    let close = known
        .iter()
        .map(|k| (edit_distance(unknown, k), *k))
        .filter(|&(d, _)| d <= limit)
        .min()
        .map(|(_, k)| k);
    if close.is_some() || typed.chars().count() < 4 {
        return close;
    }
    match known
        .iter()
        .filter(|k| squash(k).starts_with(&typed))
        .collect::<Vec<_>>()[..]
    {
        [only] => Some(only),
        _ => None,
    }
}

/// The Levenshtein distance between `a` and `b` over characters, in `O(|a|·|b|)` time and
/// `O(|b|)` space. Keys are short, so this is cheap.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_insertions_deletions_and_substitutions() {
        assert_eq!(edit_distance("checks", "checks"), 0);
        assert_eq!(edit_distance("chekcs", "checks"), 2);
        assert_eq!(edit_distance("comand", "command"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn suggestions_are_close_known_keys_only() {
        let known = ["run", "checks", "fix", "owned_paths", "depends_on"];
        assert_eq!(
            did_you_mean("chekcs", known.iter().copied()),
            Some("checks")
        );
        assert_eq!(
            did_you_mean("ownd_paths", known.iter().copied()),
            Some("owned_paths")
        );
        assert_eq!(did_you_mean("colour", known.iter().copied()), None);
        for typed in ["dependson", "dependsOn", "Depends-On", "depends"] {
            assert_eq!(
                did_you_mean(typed, known.iter().copied()),
                Some("depends_on"),
                "{typed}"
            );
        }
        assert_eq!(
            did_you_mean("owned", known.iter().copied()),
            Some("owned_paths")
        );
        // A prefix of two keys suggests neither.
        assert_eq!(
            did_you_mean("depen", ["depends_on", "dependency"].into_iter()),
            None
        );
        // One character is never "close" to anything.
        assert_eq!(did_you_mean("x", known.iter().copied()), None);
    }

    #[test]
    fn canonical_form_sorts_keys_and_drops_whitespace() {
        let a = ExtensionValue::from_document("{ \"b\" : [1, 2.5],\n \"a\": \"é\\n\" }", Some(7))
            .unwrap();
        let b = ExtensionValue::from_document("{\"a\":\"é\\n\",\"b\":[1,2.5]}", None).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.canonical(), "{\"a\":\"é\\n\",\"b\":[1,2.5]}");
        assert_eq!(a.offset(), Some(7));
        assert_ne!(a.json(), b.json());
        let c = ExtensionValue::from_document("{\"a\":\"é\\n\",\"b\":[1,2.6]}", None).unwrap();
        assert_ne!(a, c);
    }
}
