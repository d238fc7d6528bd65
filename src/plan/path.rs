//! Admission of project-relative file paths: the only way to make an [`AdmittedPath`].
//!
//! A plan names the files each task owns, and a worker proposes files by path. Every such path
//! passes [`AdmittedPath::admit`] before kleene trusts it. Admission refuses anything that could
//! escape the project or hide a secret, and it never rewrites a path: a path that is not
//! already in normal form (`./a`, `a//b`, `a/`) is refused rather than silently repaired, so the
//! admitted string is exactly what the plan said.
//!
//! ```
//! use kleene::{plan::AdmittedPath, plan::PathError, plan::SECRETS_MANIFEST_PATH};
//!
//! let schema = AdmittedPath::admit("backend/schemas.py")?;
//! assert_eq!(schema.components().collect::<Vec<_>>(), ["backend", "schemas.py"]);
//!
//! assert!(matches!(AdmittedPath::admit("../etc/passwd"), Err(PathError::Traversal { .. })));
//! assert!(matches!(AdmittedPath::admit("config/.env"), Err(PathError::SecretLike { .. })));
//! // The one canonical secrets manifest is admitted by exact match.
//! assert_eq!(AdmittedPath::admit(SECRETS_MANIFEST_PATH)?.as_str(), "security/secrets.yaml");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Rules, in the order they are checked
//!
//! 1. non-empty, at most [`MAX_PATH_LEN`] bytes, each component at most
//!    [`MAX_COMPONENT_LEN`] bytes;
//! 2. no NUL or other control character;
//! 3. no backslash (so no `\\server` UNC prefix and no Windows separators);
//! 4. relative: no leading `/` (which also covers `//server`) and no leading `~`;
//! 5. no colon (drive prefixes such as `C:` and NTFS stream names such as `a:b`);
//! 6. no empty component (`a//b`; a trailing `/` is named as such), no `.` component and no
//!    `..` component;
//! 7. no glob metacharacter `* ? [ ] { }`;
//! 8. not secret-like (see [`PathError::SecretLike`]), unless the whole path is exactly
//!    [`SECRETS_MANIFEST_PATH`].
//!
//! Percent-encoding is never decoded: `%2e%2e` is an ordinary four-character file name, not a
//! traversal. No file system or URL layer in kleene decodes it, so treating it as a name is the
//! faithful reading; refusing it would only suggest a decoding that never happens.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::text::{quoted, quoted_char};

/// The longest admitted path, in bytes.
pub const MAX_PATH_LEN: usize = 1024;

/// The longest admitted component (file or directory name), in bytes.
pub const MAX_COMPONENT_LEN: usize = 255;

/// The canonical secrets manifest: the one secret-like path that admission accepts, by exact
/// match of the whole path and only after every structural rule has passed.
///
/// The manifest names secrets; it never holds their values (content validators check that).
pub const SECRETS_MANIFEST_PATH: &str = "security/secrets.yaml";

/// The characters that make a path a glob pattern rather than a name.
const GLOB_CHARACTERS: [char; 6] = ['*', '?', '[', ']', '{', '}'];

/// Why a path was refused. Every variant names the path and the rule it broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// The path was the empty string.
    #[error("admit path: the path is empty")]
    Empty,
    /// The path was longer than [`MAX_PATH_LEN`] bytes.
    #[error("admit path {path}: {len} bytes is more than the {max} allowed", path = quoted(.path))]
    TooLong {
        /// The refused path.
        path: String,
        /// Its length in bytes.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// A component was longer than [`MAX_COMPONENT_LEN`] bytes.
    #[error(
        "admit path {path}: component {component} is longer than {max} bytes",
        path = quoted(.path),
        component = quoted(.component)
    )]
    ComponentTooLong {
        /// The refused path.
        path: String,
        /// The offending component.
        component: String,
        /// The bound.
        max: usize,
    },
    /// The path contained NUL or another control character.
    #[error(
        "admit path {path}: control character {character} at byte {index}",
        path = quoted(.path),
        character = quoted_char(.character)
    )]
    ControlCharacter {
        /// The refused path.
        path: String,
        /// The offending character.
        character: char,
        /// Its byte offset.
        index: usize,
    },
    /// The path contained a backslash (a Windows separator or a UNC prefix).
    #[error("admit path {path}: backslash at byte {index}", path = quoted(.path))]
    Backslash {
        /// The refused path.
        path: String,
        /// Its byte offset.
        index: usize,
    },
    /// The path was absolute (`/…`, `//server/…`) or home-relative (`~…`).
    #[error("admit path {path}: the path is not relative", path = quoted(.path))]
    Absolute {
        /// The refused path.
        path: String,
    },
    /// The path contained a colon: a drive prefix (`C:`) or a stream name (`a:b`).
    #[error(
        "admit path {path}: colon (drive prefix or stream name) at byte {index}",
        path = quoted(.path)
    )]
    DriveOrStream {
        /// The refused path.
        path: String,
        /// Its byte offset.
        index: usize,
    },
    /// The path had an empty component (`a//b`) or a `.` component, so it is not in normal
    /// form. A trailing `/` is [`PathError::TrailingSlash`].
    #[error(
        "admit path {path}: component {index} is empty or `.`, the path is not normalised",
        path = quoted(.path)
    )]
    NotNormalised {
        /// The refused path.
        path: String,
        /// The zero-based index of the offending component.
        index: usize,
    },
    /// The path ended in `/` (`app/`): a directory is named without it, and a directory
    /// path already covers every file beneath it. Its own variant, although the rule is the
    /// normal-form rule ([`rule`](Self::rule) says `not_normalised`), because "component 2
    /// is empty" does not point at a slash the author wrote to mean "the directory".
    #[error(
        "admit path {path}: ends in '/'; write {dir} for the directory and every file \
         beneath it, or name the files",
        path = quoted(.path),
        dir = quoted(.path.trim_end_matches('/'))
    )]
    TrailingSlash {
        /// The refused path.
        path: String,
    },
    /// The path had a `..` component.
    #[error("admit path {path}: component {index} is `..` (traversal)", path = quoted(.path))]
    Traversal {
        /// The refused path.
        path: String,
        /// The zero-based index of the offending component.
        index: usize,
    },
    /// The path contained a glob metacharacter.
    #[error(
        "admit path {path}: glob character {character} at byte {index}",
        path = quoted(.path),
        character = quoted_char(.character)
    )]
    Glob {
        /// The refused path.
        path: String,
        /// The offending character.
        character: char,
        /// Its byte offset.
        index: usize,
    },
    /// The path looked like it holds a secret. Matching ignores ASCII case, because
    /// case-insensitive file systems do. A component is secret-like when it
    /// - starts with `.env`, `id_rsa` or `credentials`,
    /// - ends with `.pem` or `.key`,
    /// - has `secret` or `secrets` as its name before the first `.`: a directory (anything
    ///   under `secrets/`) or a file (`secrets.yaml`, `secret.json`).
    ///
    /// The last rule is what makes [`SECRETS_MANIFEST_PATH`] the single exception: it would
    /// be refused anywhere else (`config/secrets.yaml`, `security/secrets.yml`).
    #[error(
        "admit path {path}: component {component} is secret-like ({pattern})",
        path = quoted(.path),
        component = quoted(.component)
    )]
    SecretLike {
        /// The refused path.
        path: String,
        /// The offending component.
        component: String,
        /// The pattern it matched, e.g. `*.pem`.
        pattern: &'static str,
    },
}

impl PathError {
    /// The refused path (empty for [`PathError::Empty`]).
    pub fn path(&self) -> &str {
        match self {
            Self::Empty => "",
            Self::TooLong { path, .. }
            | Self::ComponentTooLong { path, .. }
            | Self::ControlCharacter { path, .. }
            | Self::Backslash { path, .. }
            | Self::Absolute { path }
            | Self::DriveOrStream { path, .. }
            | Self::NotNormalised { path, .. }
            | Self::TrailingSlash { path }
            | Self::Traversal { path, .. }
            | Self::Glob { path, .. }
            | Self::SecretLike { path, .. } => path,
        }
    }

    /// A short, stable name of the rule that refused the path (`"traversal"`, `"glob"`, …).
    pub fn rule(&self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::TooLong { .. } => "too_long",
            Self::ComponentTooLong { .. } => "component_too_long",
            Self::ControlCharacter { .. } => "control_character",
            Self::Backslash { .. } => "backslash",
            Self::Absolute { .. } => "absolute",
            Self::DriveOrStream { .. } => "drive_or_stream",
            // The same rule as any other empty component: rule names stay stable.
            Self::NotNormalised { .. } | Self::TrailingSlash { .. } => "not_normalised",
            Self::Traversal { .. } => "traversal",
            Self::Glob { .. } => "glob",
            Self::SecretLike { .. } => "secret_like",
        }
    }

    /// Whether the path was refused as secret-like (and not for a structural reason).
    pub fn is_secret_like(&self) -> bool {
        matches!(self, Self::SecretLike { .. })
    }
}

/// A project-relative file path that passed admission: relative, `/`-separated, in normal
/// form, free of traversal, globs, control characters and secret-like names.
///
/// Paths compare and order by components, never by string prefix: `a/b` sorts before `a.b`
/// (because `a` < `a.b`), and [`starts_with`](Self::starts_with) never says `ab` is under `a`.
/// Serialises as the plain string; deserialising goes through [`admit`](Self::admit), so a
/// hostile path in a file is refused with its rule named.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct AdmittedPath(Box<str>);

impl AdmittedPath {
    /// Admits `raw` if it passes every rule: non-empty and bounded ([`MAX_PATH_LEN`],
    /// [`MAX_COMPONENT_LEN`]); no control character, backslash, leading `/` or `~`, colon,
    /// empty, `.` or `..` component, or glob character; not secret-like
    /// ([`PathError::SecretLike`]) unless exactly [`SECRETS_MANIFEST_PATH`].
    ///
    /// # Errors
    ///
    /// The first [`PathError`] in rule order; it names the path and the rule.
    ///
    /// # Examples
    ///
    /// ```
    /// use kleene::plan::AdmittedPath;
    ///
    /// assert!(AdmittedPath::admit("frontend/pages/login.tsx").is_ok());
    /// assert!(AdmittedPath::admit("C:/windows").is_err());
    /// assert!(AdmittedPath::admit("src/**/*.rs").is_err());
    /// ```
    pub fn admit(raw: &str) -> Result<Self, PathError> {
        check(raw)?;
        Ok(Self(raw.into()))
    }

    /// The path as a `/`-separated string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path's components, in order (never empty, never `.` or `..`).
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// Whether `prefix`'s components are a prefix of this path's components (a path starts
    /// with itself). `a/bc` does not start with `a/b`.
    pub fn starts_with(&self, prefix: &AdmittedPath) -> bool {
        let mut mine = self.components();
        prefix.components().all(|p| mine.next() == Some(p))
    }
}

fn check(raw: &str) -> Result<(), PathError> {
    let path = || raw.to_owned();
    if raw.is_empty() {
        return Err(PathError::Empty);
    }
    if raw.len() > MAX_PATH_LEN {
        return Err(PathError::TooLong {
            path: path(),
            len: raw.len(),
            max: MAX_PATH_LEN,
        });
    }
    if let Some((index, character)) = raw.char_indices().find(|(_, c)| c.is_control()) {
        return Err(PathError::ControlCharacter {
            path: path(),
            character,
            index,
        });
    }
    if let Some(index) = raw.find('\\') {
        return Err(PathError::Backslash {
            path: path(),
            index,
        });
    }
    if raw.starts_with('/') || raw.starts_with('~') {
        return Err(PathError::Absolute { path: path() });
    }
    if let Some(index) = raw.find(':') {
        return Err(PathError::DriveOrStream {
            path: path(),
            index,
        });
    }
    let last = raw.split('/').count() - 1;
    for (index, component) in raw.split('/').enumerate() {
        match component {
            // `app/` (but not `a//`, whose first empty component comes before the end).
            "" if index == last && index > 0 => {
                return Err(PathError::TrailingSlash { path: path() });
            }
            "" | "." => {
                return Err(PathError::NotNormalised {
                    path: path(),
                    index,
                });
            }
            ".." => {
                return Err(PathError::Traversal {
                    path: path(),
                    index,
                });
            }
            _ if component.len() > MAX_COMPONENT_LEN => {
                return Err(PathError::ComponentTooLong {
                    path: path(),
                    component: component.to_owned(),
                    max: MAX_COMPONENT_LEN,
                });
            }
            _ => {}
        }
    }
    if let Some((index, character)) = raw
        .char_indices()
        .find(|(_, c)| GLOB_CHARACTERS.contains(c))
    {
        return Err(PathError::Glob {
            path: path(),
            character,
            index,
        });
    }
    // The exception comes last, after every structural rule, and matches the whole path.
    if raw == SECRETS_MANIFEST_PATH {
        return Ok(());
    }
    let mut components = raw.split('/').peekable();
    while let Some(component) = components.next() {
        let is_last = components.peek().is_none();
        if let Some(pattern) = secret_pattern(component, is_last) {
            return Err(PathError::SecretLike {
                path: path(),
                component: component.to_owned(),
                pattern,
            });
        }
    }
    Ok(())
}

/// The secret-like pattern `component` matches, if any.
fn secret_pattern(component: &str, is_last: bool) -> Option<&'static str> {
    let lower = component.to_ascii_lowercase();
    if lower.starts_with(".env") {
        Some(".env*")
    } else if lower.starts_with("id_rsa") {
        Some("id_rsa*")
    } else if lower.starts_with("credentials") {
        Some("credentials*")
    } else if lower.ends_with(".pem") {
        Some("*.pem")
    } else if lower.ends_with(".key") {
        Some("*.key")
    } else if matches!(lower.split('.').next(), Some("secrets" | "secret")) {
        Some(if is_last { "secrets.*" } else { "secrets/" })
    } else {
        None
    }
}

impl Ord for AdmittedPath {
    /// Component-wise order, computed without splitting: admitted paths have no empty
    /// components and no byte below `' '` other than the separator, so ranking `/` below
    /// every other byte makes byte order equal component order.
    fn cmp(&self, other: &Self) -> Ordering {
        fn rank(b: u8) -> u8 {
            if b == b'/' { 0 } else { b }
        }
        let (a, b) = (self.0.as_bytes(), other.0.as_bytes());
        match a.iter().zip(b).position(|(x, y)| x != y) {
            Some(i) => rank(a[i]).cmp(&rank(b[i])),
            None => a.len().cmp(&b.len()),
        }
    }
}

impl PartialOrd for AdmittedPath {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for AdmittedPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for AdmittedPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AdmittedPath({:?})", &*self.0)
    }
}

impl AsRef<str> for AdmittedPath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for AdmittedPath {
    type Err = PathError;

    fn from_str(s: &str) -> Result<Self, PathError> {
        Self::admit(s)
    }
}

impl TryFrom<&str> for AdmittedPath {
    type Error = PathError;

    fn try_from(s: &str) -> Result<Self, PathError> {
        Self::admit(s)
    }
}

impl Serialize for AdmittedPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for AdmittedPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Self::admit(&raw).map_err(serde::de::Error::custom)
    }
}

/// Why a glob pattern was refused. Every variant names the pattern.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GlobError {
    /// The pattern was the empty string.
    #[error("parse glob: the pattern is empty")]
    Empty,
    /// The pattern was absolute (`/…`) or home-relative (`~…`); patterns are relative to the
    /// project.
    #[error(
        "parse glob `{}`: the pattern is not relative; write it relative to the project", pattern.escape_debug()
    )]
    Absolute {
        /// The refused pattern.
        pattern: String,
    },
    /// The pattern ended in `/` (`target/`): a glob matches files, and `target/**` is the
    /// one that matches every file beneath the directory, so the error says to write that.
    #[error(
        "parse glob `{}`: ends in '/'; write `{}/**` for every file beneath the directory, or \
         name the files",
        pattern.escape_debug(), pattern.trim_end_matches('/').escape_debug()
    )]
    TrailingSlash {
        /// The refused pattern.
        pattern: String,
    },
    /// A component was empty (`a//b`), `.` or `..`; a trailing `/` is
    /// [`GlobError::TrailingSlash`].
    #[error(
        "parse glob `{}`: component {index} is empty, `.` or `..`; write each component as a name or a wildcard", pattern.escape_debug()
    )]
    BadComponent {
        /// The refused pattern.
        pattern: String,
        /// The zero-based index of the component.
        index: usize,
    },
    /// The pattern had a character globs do not support here: a backslash, a control
    /// character, or a bracket or brace (`[ab]`, `{a,b}` are not supported; only `*`, `?`
    /// and `**` are).
    #[error(
        "parse glob `{}`: character `{}` at byte {index} is not supported (use `*`, `?` and `**`)", pattern.escape_debug(), character.escape_debug()
    )]
    Unsupported {
        /// The refused pattern.
        pattern: String,
        /// The character.
        character: char,
        /// Its byte offset.
        index: usize,
    },
    /// A component mixed `**` with other characters (`a**`); `**` must be a whole
    /// component.
    #[error(
        "parse glob `{}`: component {index} mixes `**` with other characters; `**` must be a whole component", pattern.escape_debug()
    )]
    PartialDoubleStar {
        /// The refused pattern.
        pattern: String,
        /// The zero-based index of the component.
        index: usize,
    },
}

/// A project-relative glob over `/`-separated paths: `**` as a whole component matches any
/// number (zero or more) of whole components, `*` any run of characters within one
/// component, `?` one character within one component; everything else matches itself.
///
/// Used for scratch paths: files a build tool writes (`target/**`, `**/__pycache__/**`)
/// that are never part of a task's output.
///
/// # Examples
///
/// ```
/// use kleene::plan::PathGlob;
///
/// let target = PathGlob::parse("target/**")?;
/// assert!(target.matches("target/debug/app"));
/// assert!(!target.matches("src/target.rs"));
/// let cache = PathGlob::parse("**/__pycache__/**")?;
/// assert!(cache.matches("pkg/__pycache__/m.cpython-312.pyc"));
/// assert!(PathGlob::parse("*.lock")?.matches("Cargo.lock"));
/// assert!(!PathGlob::parse("*.lock")?.matches("sub/Cargo.lock"), "`*` stays in one component");
/// assert!(PathGlob::parse("../x/**").is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PathGlob {
    pattern: Box<str>,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Segment {
    /// `**`: any number of whole components.
    AnyDepth,
    /// One component's pattern of literal characters, `*` and `?`.
    Component(Box<[char]>),
}

impl PathGlob {
    /// Parses `pattern`.
    ///
    /// # Errors
    ///
    /// [`GlobError`] naming the pattern and the rule: empty, absolute, a trailing `/`, an
    /// empty, `.` or `..` component, a character other than names, `*`, `?` and `/` (backslashes, control
    /// characters, brackets, braces), or `**` inside a component.
    pub fn parse(pattern: &str) -> Result<Self, GlobError> {
        let owned = || pattern.to_owned();
        if pattern.is_empty() {
            return Err(GlobError::Empty);
        }
        if pattern.starts_with('/') || pattern.starts_with('~') {
            return Err(GlobError::Absolute { pattern: owned() });
        }
        if let Some((index, character)) = pattern
            .char_indices()
            .find(|&(_, c)| c.is_control() || matches!(c, '\\' | '[' | ']' | '{' | '}'))
        {
            return Err(GlobError::Unsupported {
                pattern: owned(),
                character,
                index,
            });
        }
        let mut segments = Vec::new();
        let last = pattern.split('/').count() - 1;
        for (index, component) in pattern.split('/').enumerate() {
            match component {
                // `target/` (but not `a//`, whose first empty component comes before the end).
                "" if index == last && index > 0 => {
                    return Err(GlobError::TrailingSlash { pattern: owned() });
                }
                "" | "." | ".." => {
                    return Err(GlobError::BadComponent {
                        pattern: owned(),
                        index,
                    });
                }
                "**" => {
                    // `**/**` means the same as `**`.
                    if segments.last() != Some(&Segment::AnyDepth) {
                        segments.push(Segment::AnyDepth);
                    }
                }
                c if c.contains("**") => {
                    return Err(GlobError::PartialDoubleStar {
                        pattern: owned(),
                        index,
                    });
                }
                c => segments.push(Segment::Component(c.chars().collect())),
            }
        }
        Ok(Self {
            pattern: pattern.into(),
            segments,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Whether `path` (`/`-separated, relative) matches the whole pattern.
    ///
    /// # Complexity
    ///
    /// `O(s · c)` component matches for `s` pattern components and `c` path components;
    /// a component match is `O(p · n)` in the worst case for a pattern of `p` and a name of
    /// `n` characters.
    pub fn matches(&self, path: &str) -> bool {
        let components: Vec<&str> = path.split('/').collect();
        // reachable[j]: the segments so far can match exactly the first j components.
        let mut reachable = vec![false; components.len() + 1];
        reachable[0] = true;
        for segment in &self.segments {
            match segment {
                Segment::AnyDepth => {
                    // Once reachable, every longer prefix is too.
                    if let Some(first) = reachable.iter().position(|r| *r) {
                        reachable[first..].fill(true);
                    }
                }
                Segment::Component(pattern) => {
                    for j in (1..=components.len()).rev() {
                        reachable[j] =
                            reachable[j - 1] && component_matches(pattern, components[j - 1]);
                    }
                    reachable[0] = false;
                }
            }
        }
        reachable[components.len()]
    }
}

/// Whether `name` matches the one-component pattern (`*`, `?`, literals). The classic
/// two-pointer wildcard match: on a mismatch, the last `*` takes one more character.
fn component_matches(pattern: &[char], name: &str) -> bool {
    let name: Vec<char> = name.chars().collect();
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == '?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

impl fmt::Display for PathGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pattern)
    }
}

impl fmt::Debug for PathGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PathGlob({:?})", &*self.pattern)
    }
}

impl std::str::FromStr for PathGlob {
    type Err = GlobError;

    fn from_str(s: &str) -> Result<Self, GlobError> {
        Self::parse(s)
    }
}

impl Serialize for PathGlob {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.pattern)
    }
}

impl<'de> Deserialize<'de> for PathGlob {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

// Enters a digest as its text.
crate::id::digest::canonical_text!(AdmittedPath);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_components() {
        let g = |p: &str| PathGlob::parse(p).unwrap();
        assert!(g("target/**").matches("target"));
        assert!(g("target/**").matches("target/a/b/c"));
        assert!(!g("target/**").matches("targets/a"));
        assert!(g("**/__pycache__/**").matches("__pycache__/x.pyc"));
        assert!(g("**/__pycache__/**").matches("a/b/__pycache__/x.pyc"));
        assert!(!g("**/__pycache__/**").matches("a/__pycache__x/y"));
        assert!(g("**").matches("anything/at/all"));
        assert!(g("a/*/c").matches("a/b/c"));
        assert!(!g("a/*/c").matches("a/b/x/c"));
        assert!(g("a/**/c").matches("a/c"));
        assert!(g("a/**/c").matches("a/b/x/c"));
        assert!(g("*.py?").matches("m.pyc"));
        assert!(!g("*.py?").matches("m.py"));
        assert!(g("a*b*c").matches("aXXbYYc"));
        assert!(!g("a*b*c").matches("aXXbYY"));
        assert!(g("Cargo.lock").matches("Cargo.lock"));
        assert!(g("é?").matches("éx"));
        assert_eq!(g("a/**/**/b").as_str(), "a/**/**/b");
        assert!(g("a/**/**/b").matches("a/b"));
    }

    #[test]
    fn glob_errors_name_the_rule() {
        assert_eq!(PathGlob::parse(""), Err(GlobError::Empty));
        for (p, check) in [
            ("/abs/**", "not relative"),
            ("~/x", "not relative"),
            ("../x", "component 0"),
            ("a/../b", "component 1"),
            ("a//b", "component 1"),
            ("a/", "ends in '/'; write `a/**`"),
            ("a//", "component 1"),
            ("./a", "component 0"),
            ("a\\b", "not supported"),
            ("[ab]", "not supported"),
            ("{a,b}", "not supported"),
            ("a**", "mixes `**`"),
        ] {
            let err = PathGlob::parse(p).unwrap_err();
            assert!(err.to_string().contains(check), "{p}: {err}");
        }
    }

    #[test]
    fn a_trailing_slash_is_named_with_what_to_write() {
        let err = AdmittedPath::admit("src/app/").unwrap_err();
        assert_eq!(
            err,
            PathError::TrailingSlash {
                path: "src/app/".to_owned()
            }
        );
        let text = err.to_string();
        assert!(text.contains("ends in '/'"), "{text}");
        assert!(
            text.contains("write \"src/app\" for the directory"),
            "{text}"
        );
        assert!(
            !text.contains("component") && !text.contains("  "),
            "{text}"
        );
        // An earlier problem is still the one named.
        assert!(matches!(
            AdmittedPath::admit("a/../"),
            Err(PathError::Traversal { index: 1, .. })
        ));
        assert!(matches!(
            AdmittedPath::admit("a//"),
            Err(PathError::NotNormalised { index: 1, .. })
        ));

        let err = PathGlob::parse("target/").unwrap_err();
        assert_eq!(
            err,
            GlobError::TrailingSlash {
                pattern: "target/".to_owned()
            }
        );
        assert!(err.to_string().contains("write `target/**`"), "{err}");
    }

    fn rule(raw: &str) -> &'static str {
        match AdmittedPath::admit(raw) {
            Ok(_) => "admitted",
            Err(e) => {
                assert_eq!(e.path(), raw, "the error names the path");
                e.rule()
            }
        }
    }

    #[test]
    fn ordinary_paths_are_admitted() {
        for p in [
            "README.md",
            "backend/schemas.py",
            "frontend/pages/login.tsx",
            "a/b/c.d.e",
            "...",
            "%2e%2e/x",
            "src/secretary.py",
            "docs/keys.md",
            "env/config.toml",
            "security/secrets.yaml",
        ] {
            assert_eq!(rule(p), "admitted", "{p}");
        }
    }

    #[test]
    fn each_rule_is_named() {
        let cases = [
            ("", "empty"),
            ("a\0b", "control_character"),
            ("a\nb", "control_character"),
            ("a\\b", "backslash"),
            ("\\\\server\\share", "backslash"),
            ("/etc/passwd", "absolute"),
            ("//server/share", "absolute"),
            ("~/x", "absolute"),
            ("C:/windows", "drive_or_stream"),
            ("c:x", "drive_or_stream"),
            ("file.txt:stream", "drive_or_stream"),
            ("a//b", "not_normalised"),
            ("a/", "not_normalised"),
            ("./a", "not_normalised"),
            ("a/./b", "not_normalised"),
            (".", "not_normalised"),
            ("..", "traversal"),
            ("../x", "traversal"),
            ("a/../..", "traversal"),
            ("a/..", "traversal"),
            ("src/*.rs", "glob"),
            ("a?", "glob"),
            ("[ab]", "glob"),
            ("{a,b}", "glob"),
            (".env", "secret_like"),
            ("app/.env.production", "secret_like"),
            ("certs/server.pem", "secret_like"),
            ("tls/Server.KEY", "secret_like"),
            ("home/id_rsa.pub", "secret_like"),
            ("credentials.json", "secret_like"),
            ("secrets/app.txt", "secret_like"),
            ("a/Secrets/b", "secret_like"),
            ("config/secrets.yaml", "secret_like"),
            ("security/secrets.yml", "secret_like"),
            ("security/secrets.yaml/x", "secret_like"),
            ("Security/secrets.yaml", "secret_like"),
        ];
        for (raw, expected) in cases {
            assert_eq!(rule(raw), expected, "{raw:?}");
        }
        assert_eq!(rule(&"a".repeat(MAX_PATH_LEN + 1)), "too_long");
        assert_eq!(
            rule(&"a".repeat(MAX_COMPONENT_LEN + 1)),
            "component_too_long"
        );
        assert_eq!(rule(&"a".repeat(MAX_COMPONENT_LEN)), "admitted");
    }

    #[test]
    fn order_is_by_components() {
        let a = |s| AdmittedPath::admit(s).unwrap();
        assert!(a("a/b") < a("a.b"));
        assert!(
            "a/b" > "a.b",
            "string order differs, which is why Ord is by components"
        );
        assert!(a("a") < a("a/b"));
        assert!(a("a/b/c").starts_with(&a("a/b")));
        assert!(a("a/b").starts_with(&a("a/b")));
        assert!(!a("a/bc").starts_with(&a("a/b")));
        assert!(!a("a").starts_with(&a("a/b")));
    }

    #[test]
    fn byte_order_equals_component_order() {
        let names = [
            "a", "a.b", "a/b", "a b", "a-b/c", "ab", "a/b/c", "a/b.c", "b", "a/.b", "é", "a/é",
        ];
        let paths: Vec<AdmittedPath> = names
            .iter()
            .map(|n| AdmittedPath::admit(n).unwrap())
            .collect();
        for x in &paths {
            for y in &paths {
                assert_eq!(x.cmp(y), x.components().cmp(y.components()), "{x} vs {y}");
            }
        }
    }

    #[test]
    fn serde_admits() {
        let p: AdmittedPath = serde_json::from_str("\"src/lib.rs\"").unwrap();
        assert_eq!(serde_json::to_string(&p).unwrap(), "\"src/lib.rs\"");
        let err = serde_json::from_str::<AdmittedPath>("\"../x\"").unwrap_err();
        assert!(err.to_string().contains("traversal"), "{err}");
        let escaped: Result<AdmittedPath, _> = serde_json::from_str("\"a\\\\b\"");
        assert!(escaped.unwrap_err().to_string().contains("backslash"));
    }
}
