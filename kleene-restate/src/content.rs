//! Accepted outputs addressed by their digest: what a remote worker's stage starts from,
//! verified on arrival so a worker never builds on bytes the channel did not accept.
//!
//! ```
//! use std::collections::BTreeMap;
//! use kleene::batch::Candidate;
//! use kleene::plan::AdmittedPath;
//! use kleene_restate::content::{Files, verify};
//!
//! let path = AdmittedPath::admit("a.txt")?;
//! let candidate = Candidate::new(BTreeMap::from([(path.clone(), b"a\n".to_vec())]));
//! let files = Files::of(&candidate);
//! assert!(verify(candidate.digest(), files.clone()).is_ok());
//! let mut forged = files;
//! forged.0[0].1 = b"b\n".to_vec();
//! assert!(verify(candidate.digest(), forged).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;

use kleene::batch::{Candidate, candidate::AcceptedOutput};
use kleene::id::Digest;
use kleene::plan::AdmittedPath;
use serde::{Deserialize, Serialize};

/// An accepted output's files as they travel: path and bytes, sorted by path. The bytes go
/// as base64 text (a third more than the bytes; JSON's arrays of numbers took up to four
/// times), and an earlier adapter's arrays still read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<WireFile>", into = "Vec<WireFile>")]
pub struct Files(pub Vec<(AdmittedPath, Vec<u8>)>);

/// One file of [`Files`] on the wire.
#[derive(Serialize, Deserialize)]
struct WireFile(AdmittedPath, #[serde(with = "wire_bytes")] Vec<u8>);

impl From<Vec<WireFile>> for Files {
    fn from(files: Vec<WireFile>) -> Self {
        Self(files.into_iter().map(|WireFile(p, b)| (p, b)).collect())
    }
}

impl From<Files> for Vec<WireFile> {
    fn from(files: Files) -> Self {
        files.0.into_iter().map(|(p, b)| WireFile(p, b)).collect()
    }
}

/// Bytes as they travel: standard base64 text; an array of numbers (what an earlier adapter
/// sent) reads too.
pub(crate) mod wire_bytes {
    use base64::Engine as _;
    use serde::de::{self, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct Bytes;
        impl<'de> Visitor<'de> for Bytes {
            type Value = Vec<u8>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("base64 text or an array of bytes")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Vec<u8>, E> {
                base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|e| E::custom(format!("bytes that are not base64: {e}")))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
                // Grown as elements arrive, never sized by the sender's hint.
                let mut bytes = Vec::new();
                while let Some(b) = seq.next_element::<u8>()? {
                    bytes.push(b);
                }
                Ok(bytes)
            }
        }
        d.deserialize_any(Bytes)
    }
}

/// A candidate as it travels in a reply: its files with their bytes as base64 text (see
/// [`Files`]); an earlier adapter's arrays of numbers read too.
pub(crate) mod wire_candidate {
    use std::collections::BTreeMap;

    use kleene::batch::Candidate;
    use kleene::plan::AdmittedPath;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize)]
    struct Out<'a> {
        files: BTreeMap<&'a AdmittedPath, Text<'a>>,
    }

    struct Text<'a>(&'a [u8]);

    impl Serialize for Text<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            super::wire_bytes::serialize(self.0, s)
        }
    }

    #[derive(Deserialize)]
    struct In {
        files: BTreeMap<AdmittedPath, Bytes>,
    }

    #[derive(Deserialize)]
    struct Bytes(#[serde(with = "super::wire_bytes")] Vec<u8>);

    pub(crate) fn serialize<S: Serializer>(c: &Candidate, s: S) -> Result<S::Ok, S::Error> {
        Out {
            files: c.files().iter().map(|(p, b)| (p, Text(b))).collect(),
        }
        .serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Candidate, D::Error> {
        let In { files } = In::deserialize(d)?;
        Ok(Candidate::new(
            files.into_iter().map(|(p, Bytes(b))| (p, b)).collect(),
        ))
    }
}

impl Files {
    /// The files of `candidate`.
    pub fn of(candidate: &Candidate) -> Self {
        Self(
            candidate
                .files()
                .iter()
                .map(|(p, b)| (p.clone(), b.clone()))
                .collect(),
        )
    }
}

/// Why fetched content was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContentError {
    /// The bytes do not hash to the digest they were fetched by.
    #[error(
        "verify the output fetched by digest {expected}: its files hash to {found}; the \
         content store holds something else under that digest"
    )]
    DigestMismatch {
        /// The digest asked for.
        expected: Digest,
        /// The digest of what arrived.
        found: Digest,
    },
    /// A path appears twice.
    #[error("verify the output fetched by digest {expected}: it lists {path} twice")]
    DuplicatePath {
        /// The digest asked for.
        expected: Digest,
        /// The repeated path.
        path: AdmittedPath,
    },
    /// Nothing is stored under the digest.
    #[error("fetch the output with digest {digest}: the content store has nothing under it")]
    Missing {
        /// The digest asked for.
        digest: Digest,
    },
    /// The output is kept in the shared content store and could not be read there.
    #[error("fetch the output with digest {digest}: {detail}")]
    Stored {
        /// The digest asked for.
        digest: Digest,
        /// Why, as the store said it.
        detail: String,
    },
}

/// The accepted output `files` make, when they hash to `expected` (the digest kleene
/// accepted).
///
/// # Errors
///
/// [`ContentError::DigestMismatch`] or [`ContentError::DuplicatePath`].
pub fn verify(expected: Digest, files: Files) -> Result<AcceptedOutput, ContentError> {
    let mut map = BTreeMap::new();
    for (path, bytes) in files.0 {
        if map.contains_key(&path) {
            return Err(ContentError::DuplicatePath { expected, path });
        }
        map.insert(path, bytes);
    }
    let candidate = Candidate::new(map);
    let found = candidate.digest();
    AcceptedOutput::verified(candidate, expected)
        .ok_or(ContentError::DigestMismatch { expected, found })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn files() -> impl Strategy<Value = BTreeMap<AdmittedPath, Vec<u8>>> {
        proptest::collection::btree_map(
            "[a-z]{1,6}(/[a-z]{1,6}){0,2}\\.txt".prop_map(|p| AdmittedPath::admit(&p).unwrap()),
            proptest::collection::vec(any::<u8>(), 0..64),
            1..6,
        )
    }

    proptest! {
        /// For all outputs, the files as sent verify against the accepted digest in any
        /// order, and changing any one byte (or appending one) makes them fail.
        #[test]
        fn only_the_accepted_bytes_verify(map in files(), pick in any::<usize>(), flip in 1u8..=255, rotate in any::<usize>()) {
            let candidate = Candidate::new(map);
            let digest = candidate.digest();
            let mut sent = Files::of(&candidate);
            let n = sent.0.len();
            sent.0.rotate_left(rotate % n);
            let verified = verify(digest, sent.clone()).unwrap();
            prop_assert_eq!(verified.candidate(), &candidate);
            let file = &mut sent.0[pick % n].1;
            if file.is_empty() {
                file.push(flip);
            } else {
                let i = pick % file.len();
                file[i] ^= flip;
            }
            let refused = matches!(verify(digest, sent), Err(ContentError::DigestMismatch { .. }));
            prop_assert!(refused);
        }
    }

    fn candidate() -> Candidate {
        Candidate::new(BTreeMap::from([
            (AdmittedPath::admit("a.txt").unwrap(), b"a".to_vec()),
            (AdmittedPath::admit("b/c.txt").unwrap(), b"c".to_vec()),
        ]))
    }

    #[test]
    fn a_renamed_file_does_not_verify() {
        let c = candidate();
        let mut files = Files::of(&c);
        files.0[1].0 = AdmittedPath::admit("b/d.txt").unwrap();
        assert!(matches!(
            verify(c.digest(), files),
            Err(ContentError::DigestMismatch { .. })
        ));
    }

    #[test]
    fn a_repeated_path_is_refused() {
        let c = candidate();
        let mut files = Files::of(&c);
        files.0.push(files.0[0].clone());
        assert!(matches!(
            verify(c.digest(), files),
            Err(ContentError::DuplicatePath { .. })
        ));
    }

    proptest! {
        /// For all outputs: the files travel as base64 and read back whole, and the
        /// arrays of numbers an earlier adapter sent read as the same files.
        #[test]
        fn files_read_back_from_either_wire_form(map in files()) {
            let sent = Files::of(&Candidate::new(map));
            let text = serde_json::to_string(&sent).unwrap();
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            let texts = value.as_array().unwrap().iter().all(|f| f[1].is_string());
            prop_assert!(texts, "{}", text);
            prop_assert_eq!(&serde_json::from_str::<Files>(&text).unwrap(), &sent);
            let arrays = serde_json::to_string(&sent.0).unwrap();
            prop_assert_eq!(&serde_json::from_str::<Files>(&arrays).unwrap(), &sent);
        }
    }

    #[test]
    fn bytes_that_are_neither_base64_nor_numbers_are_refused() {
        for bad in [
            r#"[["a.txt","not base64!"]]"#,
            r#"[["a.txt",[256]]]"#,
            r#"[["a.txt",{}]]"#,
        ] {
            assert!(serde_json::from_str::<Files>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn order_on_the_wire_does_not_matter() {
        let c = candidate();
        let mut files = Files::of(&c);
        files.0.reverse();
        assert_eq!(verify(c.digest(), files).unwrap().candidate(), &c);
    }
}
