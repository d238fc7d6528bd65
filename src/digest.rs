//! Domain-separated blake3 digests over a canonical, length-prefixed encoding.
//!
//! Every digest in kleene is made by a [`CanonicalHasher`] created for one purpose
//! (`"kleene <purpose> v1"` as blake3's derive-key context), fed with length-prefixed
//! fields. Two different purposes never collide, and `("ab", "c")` never digests like
//! `("a", "bc")`.
//!
//! ```
//! use kleene::id::Digest;
//!
//! let d: Digest = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262".parse()?;
//! assert_eq!(d.to_string().len(), 64);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 32-byte blake3 digest, shown and serialised as 64 lowercase hex characters.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest([u8; 32]);

/// Why a string was refused as a [`Digest`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DigestParseError {
    /// The string was not 64 characters long.
    #[error("parse digest: it must be 64 hex characters, got {len}")]
    Length {
        /// The length that was found.
        len: usize,
    },
    /// A character was not a lowercase hex digit.
    #[error("parse digest: non-hex character at byte {index}")]
    NotHex {
        /// Its byte offset.
        index: usize,
    },
}

impl Digest {
    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Wraps raw bytes (for example a digest read from a foreign record).
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl From<blake3::Hash> for Digest {
    fn from(h: blake3::Hash) -> Self {
        Self(*h.as_bytes())
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

impl std::str::FromStr for Digest {
    type Err = DigestParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 64 {
            return Err(DigestParseError::Length { len: s.len() });
        }
        let mut out = [0u8; 32];
        let bytes = s.as_bytes();
        for (i, slot) in out.iter_mut().enumerate() {
            let hi = hex_val(bytes[2 * i]).ok_or(DigestParseError::NotHex { index: 2 * i })?;
            let lo =
                hex_val(bytes[2 * i + 1]).ok_or(DigestParseError::NotHex { index: 2 * i + 1 })?;
            *slot = (hi << 4) | lo;
        }
        Ok(Self(out))
    }
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.collect_str(self)
        } else {
            self.0.serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            s.parse().map_err(serde::de::Error::custom)
        } else {
            <[u8; 32]>::deserialize(d).map(Self)
        }
    }
}

/// A blake3 hasher for one purpose, fed with length-prefixed fields so the encoding is
/// canonical: the same logical value gives the same digest on every machine.
///
/// Clone a prepared hasher to skip re-deriving the purpose key on hot paths.
#[derive(Clone)]
pub(crate) struct CanonicalHasher(blake3::Hasher);

impl CanonicalHasher {
    /// A hasher whose derive-key context is `"kleene {purpose} v1"`.
    pub(crate) fn new(purpose: &str) -> Self {
        Self(blake3::Hasher::new_derive_key(&format!(
            "kleene {purpose} v1"
        )))
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.update(&(b.len() as u64).to_le_bytes());
        self.0.update(b);
        self
    }

    pub(crate) fn str(&mut self, s: &str) -> &mut Self {
        self.bytes(s.as_bytes())
    }

    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.0.update(&v.to_le_bytes());
        self
    }

    pub(crate) fn digest(&mut self, d: &Digest) -> &mut Self {
        self.0.update(&d.0);
        self
    }

    /// Feeds an optional string: a tag byte, then the string if present, so `None` and
    /// `Some("")` differ.
    #[allow(
        dead_code,
        reason = "part of the shared hasher API; the plan and batch digests feed optional fields"
    )]
    pub(crate) fn opt_str(&mut self, s: Option<&str>) -> &mut Self {
        match s {
            None => {
                self.0.update(&[0]);
            }
            Some(s) => {
                self.0.update(&[1]);
                self.str(s);
            }
        }
        self
    }

    /// Feeds a file set as its canonical list: the number of files, then each file's path,
    /// length and plain blake3 hash, in the order given (callers give path order). Candidates
    /// and manifests both digest file sets this way, each under its own purpose.
    pub(crate) fn file_set<'a>(
        &mut self,
        files: impl ExactSizeIterator<Item = (&'a str, u64, Digest)>,
    ) -> &mut Self {
        self.u64(files.len() as u64);
        for (path, len, blake3) in files {
            self.str(path).u64(len).digest(&blake3);
        }
        self
    }

    pub(crate) fn finish(&self) -> Digest {
        Digest::from(self.0.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_errors() {
        let d = CanonicalHasher::new("test").str("x").finish();
        let s = d.to_string();
        assert_eq!(s.parse::<Digest>(), Ok(d));
        assert_eq!(
            "ab".parse::<Digest>(),
            Err(DigestParseError::Length { len: 2 })
        );
        let bad = format!("{}G", &s[..63]);
        assert_eq!(
            bad.parse::<Digest>(),
            Err(DigestParseError::NotHex { index: 63 })
        );
    }

    #[test]
    fn fields_are_length_prefixed_and_domain_separated() {
        let ab_c = CanonicalHasher::new("t").str("ab").str("c").finish();
        let a_bc = CanonicalHasher::new("t").str("a").str("bc").finish();
        assert_ne!(ab_c, a_bc);
        let other = CanonicalHasher::new("u").str("ab").str("c").finish();
        assert_ne!(ab_c, other);
        let none = CanonicalHasher::new("t").opt_str(None).finish();
        let empty = CanonicalHasher::new("t").opt_str(Some("")).finish();
        assert_ne!(none, empty);
    }

    #[test]
    fn serde_forms() {
        let d = CanonicalHasher::new("t").finish();
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json.len(), 66);
        assert_eq!(serde_json::from_str::<Digest>(&json).unwrap(), d);
    }
}
