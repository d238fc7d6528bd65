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

/// An accepted output's files as they travel: path and bytes, sorted by path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Files(pub Vec<(AdmittedPath, Vec<u8>)>);

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

    #[test]
    fn order_on_the_wire_does_not_matter() {
        let c = candidate();
        let mut files = Files::of(&c);
        files.0.reverse();
        assert_eq!(verify(c.digest(), files).unwrap().candidate(), &c);
    }
}
