//! Validated identifiers for tasks, validators, agents, channels and sessions.
//!
//! Every id is checked once, when it is made: non-empty, at most [`MAX_ID_LEN`] bytes, and no
//! control characters. Ids that came from a file or a wire therefore cannot smuggle newlines
//! into audit lines or grow without bound.
//!
//! ```
//! use kleene::id::TaskId;
//!
//! let root = TaskId::new("task_X")?;
//! assert_eq!(root.fix_id(1)?.as_str(), "task_X_fix_1");
//! assert!(TaskId::new("").is_err());
//! assert!(TaskId::new("a\nb").is_err());
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

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
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
            /// [`IdError`] when `s` is empty, longer than [`MAX_ID_LEN`] bytes, or contains a
            /// control character.
            pub fn new(s: impl Into<String>) -> Result<Self, IdError> {
                let s = s.into();
                check($kind, &s)?;
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
    "task id"
);
id_type!(
    /// Identifies a validator whose result appears in a verdict.
    ValidatorId,
    "validator id"
);
id_type!(
    /// Identifies the agent (worker) that owns a planned task.
    AgentId,
    "agent id"
);
id_type!(
    /// Identifies the trusted channel a run belongs to; checkpoints are keyed by it and a
    /// resume must present the same one.
    ChannelId,
    "channel id"
);
id_type!(
    /// The mode half of a [`Session`](crate::closure::step::Session) (for example `build` or `review`).
    SessionMode,
    "session mode"
);
id_type!(
    /// The project half of a [`Session`](crate::closure::step::Session).
    ProjectId,
    "project id"
);

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
