//! Validated identifiers for tasks, validators, agents, channels and sessions.
//!
//! Every id is checked once, when it is made: non-empty, at most [`MAX_ID_LEN`] bytes, and no
//! control characters. Ids that came from a file or a wire therefore cannot smuggle newlines
//! into audit lines or grow without bound.
//!
//! A [`TaskId`] is also a name, never a path: kleene names files in its state directory
//! after tasks (the spec a fixer reads), so a task id contains no `/`, does not start with
//! `.` (which also refuses `.` and `..`), and, like every id, holds no NUL. A task id such
//! as `web/api` or `../../escape` is refused when it is made, so no plan that holds one
//! loads, instead of every run of it failing to write its files or writing them outside
//! the state directory. A [`ChannelId`] is a name by the same rule: a worker keeps each
//! channel's calls in a directory named after it, and the channel comes from the wire.
//!
//! ```
//! use kleene::id::{IdError, NameRule, TaskId};
//!
//! let root = TaskId::new("task_X")?;
//! assert_eq!(root.fix_id(1)?.as_str(), "task_X_fix_1");
//! assert!(TaskId::new("").is_err());
//! assert!(TaskId::new("a\nb").is_err());
//! assert!(matches!(
//!     TaskId::new("web/api"),
//!     Err(IdError::NotAName { rule: NameRule::Separator { index: 3 }, .. })
//! ));
//! assert!(TaskId::new("..").is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub(crate) mod digest;

pub use digest::{Digest, DigestParseError};

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::text::quoted_char;

/// The longest id, in bytes, that any id type accepts.
pub const MAX_ID_LEN: usize = 256;

/// The longest file name, in bytes, that Linux and the common file systems accept
/// (`NAME_MAX`). A task id may be longer once a suffix is added, so
/// [`TaskId::file_name`] shortens it.
const NAME_MAX: usize = 255;

/// How many hex digits of the id's digest a shortened file name keeps: 128 bits, so that
/// even a plan written to make two long ids share a file would need about 2^64 tries.
const NAME_DIGEST_HEX: usize = 32;

/// Why a string was refused as an id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// The string was empty.
    #[error("validate {kind}: it is empty")]
    Empty {
        /// Which id type refused it.
        kind: &'static str,
    },
    /// The string was longer than [`MAX_ID_LEN`] bytes.
    #[error("validate {kind}: it is {len} bytes long, more than the {max} allowed")]
    TooLong {
        /// Which id type refused it.
        kind: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The string contained a control character.
    #[error(
        "validate {kind}: control character {character} at byte {index}",
        character = quoted_char(.character)
    )]
    ControlCharacter {
        /// Which id type refused it.
        kind: &'static str,
        /// The offending character.
        character: char,
        /// Its byte offset.
        index: usize,
    },
    /// The string cannot be a single file name, which a task id must be (see the
    /// [module docs](self)).
    #[error("validate {kind}: {rule}; a task id is a name, not a path")]
    NotAName {
        /// Which id type refused it.
        kind: &'static str,
        /// The rule it broke.
        rule: NameRule,
    },
}

/// Which rule of a name (see [`IdError::NotAName`]) a task or channel id broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameRule {
    /// It contained `/`, which separates the parts of a path.
    #[error("it contains '/' at byte {index}")]
    Separator {
        /// The byte offset of the first `/`.
        index: usize,
    },
    /// It was `.`, which names the directory holding it.
    #[error("it is \".\", which names the directory itself")]
    Dot,
    /// It was `..`, which names the parent directory.
    #[error("it is \"..\", which names the parent directory")]
    DotDot,
    /// It started with `.`: a hidden file's name, and kleene's own temporary files start
    /// with one.
    #[error("it starts with '.', as hidden files do")]
    LeadingDot,
}

fn check(kind: &'static str, s: &str) -> Result<(), IdError> {
    if s.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if s.len() > MAX_ID_LEN {
        return Err(IdError::TooLong {
            kind,
            len: s.len(),
            max: MAX_ID_LEN,
        });
    }
    if let Some((index, character)) = s.char_indices().find(|(_, c)| c.is_control()) {
        return Err(IdError::ControlCharacter {
            kind,
            character,
            index,
        });
    }
    Ok(())
}

/// [`check`], and then the rules that make `s` usable as one file name: kleene writes files
/// named after task ids, and a path there could point outside the state directory.
fn check_name(kind: &'static str, s: &str) -> Result<(), IdError> {
    check(kind, s)?;
    let rule = if let Some(index) = s.find('/') {
        NameRule::Separator { index }
    } else if s == "." {
        NameRule::Dot
    } else if s == ".." {
        NameRule::DotDot
    } else if s.starts_with('.') {
        NameRule::LeadingDot
    } else {
        return Ok(());
    };
    Err(IdError::NotAName { kind, rule })
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $check:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
        #[serde(try_from = "String")]
        // `Arc<str>`: an id is copied into many places (edges, contracts, orders, audit
        // records); sharing one allocation makes each copy a reference count instead of a
        // heap string. `Arc`'s Eq, Ord and Hash are the string's, so ids compare, sort and
        // hash exactly as their text does.
        pub struct $name(Arc<str>);

        impl $name {
            /// Checks `s` and wraps it.
            ///
            /// # Errors
            ///
            /// [`IdError`] when `s` is empty, longer than [`MAX_ID_LEN`] bytes or contains a
            /// control character, and for a [`TaskId`] or [`ChannelId`] when it is not a
            /// name (see the [module docs](crate::id)).
            pub fn new(s: impl Into<String>) -> Result<Self, IdError> {
                let s = s.into();
                $check($kind, &s)?;
                Ok(Self(Arc::from(s)))
            }

            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        /// Written as its text, without copying it into a `String` first (ids are written
        /// in every persisted record).
        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        /// Its text, as the serde form writes it (checkpoints are encoded with bincode's
        /// own encoder).
        #[doc(hidden)]
        impl bincode::Encode for $name {
            fn encode<E: bincode::enc::Encoder>(
                &self,
                encoder: &mut E,
            ) -> Result<(), bincode::error::EncodeError> {
                bincode::Encode::encode(self.as_str(), encoder)
            }
        }

        /// An id equals the text it was made from, so `task.id() == "api"` reads as it
        /// should.
        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(s: String) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = IdError;
            fn try_from(s: &str) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                String::from(&*id.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            // `pad` so width and alignment flags work in tables and audit lines.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }
    };
}

id_type!(
    /// Identifies a task: a planned task, a closure root, or a fix subtask (`x_fix_2`).
    TaskId,
    "task id",
    check_name
);
id_type!(
    /// Identifies a validator whose result appears in a verdict.
    ValidatorId,
    "validator id",
    check
);
id_type!(
    /// Identifies the agent (worker) that owns a planned task.
    AgentId,
    "agent id",
    check
);
id_type!(
    /// Identifies the trusted channel a run belongs to; checkpoints are keyed by it and a
    /// resume must present the same one.
    ChannelId,
    "channel id",
    check_name
);
id_type!(
    /// The mode half of a [`Session`](crate::closure::step::Session) (for example `build` or `review`).
    SessionMode,
    "session mode",
    check
);
id_type!(
    /// The project half of a [`Session`](crate::closure::step::Session).
    ProjectId,
    "project id",
    check
);

impl SessionMode {
    /// `build`.
    pub(crate) fn build() -> Self {
        Self(Arc::from("build"))
    }
}

impl ProjectId {
    /// The project named as `channel` is (a channel id is also a valid project id).
    pub(crate) fn named_as(channel: &ChannelId) -> Self {
        Self(channel.0.clone())
    }
}

impl TaskId {
    /// The id of the fix subtask at `depth` in the closure rooted at `self`.
    ///
    /// Ids are linear, never nested: the chain under `x` reads `x_fix_1`, `x_fix_2`,
    /// `x_fix_3`. Call it on the *root* task id, not on the previous fix's id.
    ///
    /// # Errors
    ///
    /// [`IdError::TooLong`] when the root id is so long that the suffix pushes it past
    /// [`MAX_ID_LEN`].
    pub fn fix_id(&self, depth: u32) -> Result<TaskId, IdError> {
        TaskId::new(format!("{}_fix_{depth}", self.0))
    }

    /// The name of a file kleene keeps about this task: the id followed by `suffix` (such as
    /// `.call2.md`), always one path component of at most 255 bytes.
    ///
    /// A task id is a name (see the [module docs](crate::id)), so the file name is the id
    /// itself whenever the whole name fits. An id too long for that (ids may be
    /// [`MAX_ID_LEN`] bytes and a fix id adds `_fix_N`) is cut at a character boundary and
    /// followed by `~` and 32 hex digits of the blake3 digest of the whole id: the same id
    /// always names the same file, and two ids that share the kept part still name two.
    /// `suffix` is kleene's own and short; one longer than about 200 bytes would leave no
    /// room for the id.
    #[cfg_attr(not(feature = "shell"), allow(dead_code))]
    pub(crate) fn file_name(&self, suffix: &str) -> String {
        let id: &str = &self.0;
        if id.len() + suffix.len() <= NAME_MAX {
            return format!("{id}{suffix}");
        }
        let room = NAME_MAX.saturating_sub(suffix.len() + 1 + NAME_DIGEST_HEX);
        let cut = id.floor_char_boundary(room);
        let digest = blake3::hash(id.as_bytes()).to_hex();
        format!("{}~{}{suffix}", &id[..cut], &digest[..NAME_DIGEST_HEX])
    }

    /// Whether `self` and `other` are clones of one id (so certainly equal), without
    /// comparing their text; `false` says nothing.
    pub(crate) fn shares_allocation_with(&self, other: &TaskId) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The address of the id's shared text: equal for clones of one id (see
    /// [`shares_allocation_with`](Self::shares_allocation_with)), so a map keyed by it finds a
    /// clone without reading the text. Different addresses say nothing about the text.
    pub(crate) fn allocation(&self) -> usize {
        self.0.as_ptr().addr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_rule() {
        assert_eq!(TaskId::new(""), Err(IdError::Empty { kind: "task id" }));
        let long = "a".repeat(MAX_ID_LEN + 1);
        assert!(matches!(
            ValidatorId::new(long),
            Err(IdError::TooLong { len: 257, .. })
        ));
        assert!(matches!(
            ChannelId::new("ok\u{7f}"),
            Err(IdError::ControlCharacter { index: 2, .. })
        ));
        assert!(AgentId::new("a".repeat(MAX_ID_LEN)).is_ok());
    }

    #[test]
    fn task_ids_are_names_not_paths() {
        let refused = |s: &str| match TaskId::new(s) {
            Err(IdError::NotAName { kind, rule }) => {
                assert_eq!(kind, "task id");
                rule
            }
            other => panic!("{s:?}: {other:?}"),
        };
        assert_eq!(refused("web/api"), NameRule::Separator { index: 3 });
        assert_eq!(refused("../../escape"), NameRule::Separator { index: 2 });
        assert_eq!(refused("/abs"), NameRule::Separator { index: 0 });
        assert_eq!(refused("."), NameRule::Dot);
        assert_eq!(refused(".."), NameRule::DotDot);
        assert_eq!(refused(".hidden"), NameRule::LeadingDot);
        assert_eq!(refused("..."), NameRule::LeadingDot);
        assert!(matches!(
            TaskId::new("a\0b"),
            Err(IdError::ControlCharacter { index: 1, .. })
        ));
        assert!(matches!(
            TaskId::new("a".repeat(MAX_ID_LEN + 1)),
            Err(IdError::TooLong { .. })
        ));
        // Dots inside a name, and names only other kinds of ids keep, are fine.
        for ok in ["a.b", "a..b", "x.", "v1.2_fix_1", "é"] {
            assert!(TaskId::new(ok).is_ok(), "{ok}");
        }
        assert!(ValidatorId::new("a/b").is_ok());
        // A channel names a worker's directory: it is a name too.
        for hostile in ["../../etc", "a/b", ".x", ".."] {
            assert!(
                matches!(ChannelId::new(hostile), Err(IdError::NotAName { .. })),
                "{hostile}"
            );
        }
        let msg = TaskId::new("web/api").unwrap_err().to_string();
        assert_eq!(
            msg,
            "validate task id: it contains '/' at byte 3; a task id is a name, not a path"
        );
        assert!(
            TaskId::new("..")
                .unwrap_err()
                .to_string()
                .contains("parent directory"),
            "{msg}"
        );
        // Serde goes through the same check, so ids read from plans and records do too.
        assert!(serde_json::from_str::<TaskId>("\"../../escape\"").is_err());
    }

    #[test]
    fn file_names_keep_the_id_when_it_fits_and_shorten_it_otherwise() {
        let short = TaskId::new("app_model_fix_1").unwrap();
        assert_eq!(short.file_name(".call2.md"), "app_model_fix_1.call2.md");
        let fits = TaskId::new("a".repeat(NAME_MAX - ".call1.md".len())).unwrap();
        assert_eq!(fits.file_name(".call1.md"), format!("{fits}.call1.md"));

        let root = TaskId::new("é".repeat(MAX_ID_LEN / 2 - 3)).unwrap();
        let fix = root.fix_id(1).unwrap();
        let name = fix.file_name(".call4294967295.md");
        assert!(name.len() <= NAME_MAX, "{}", name.len());
        assert!(name.ends_with(".call4294967295.md"), "{name}");
        assert!(name.starts_with("éé"), "{name}");
        // Deterministic, and the digest tells apart ids that share the kept part.
        assert_eq!(name, fix.file_name(".call4294967295.md"));
        let other = root.fix_id(2).unwrap().file_name(".call4294967295.md");
        assert_ne!(name, other);
        assert_eq!(name.len(), other.len());
    }

    #[test]
    fn fix_ids_are_linear() {
        let root = TaskId::new("task_X").unwrap();
        let ids: Vec<_> = (1..=3)
            .map(|d| root.fix_id(d).unwrap().0.to_string())
            .collect();
        assert_eq!(ids, ["task_X_fix_1", "task_X_fix_2", "task_X_fix_3"]);
        let long = TaskId::new("a".repeat(MAX_ID_LEN)).unwrap();
        assert!(long.fix_id(1).is_err());
    }

    #[test]
    fn display_honours_width() {
        assert_eq!(format!("{:<4}|", TaskId::new("ab").unwrap()), "ab  |");
    }

    #[test]
    fn serde_validates() {
        let ok: TaskId = serde_json::from_str("\"t1\"").unwrap();
        assert_eq!(ok.as_str(), "t1");
        assert!(serde_json::from_str::<TaskId>("\"\"").is_err());
        assert!(serde_json::from_str::<TaskId>("\"a\\u0000b\"").is_err());
    }
}
