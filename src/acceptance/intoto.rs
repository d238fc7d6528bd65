//! The acceptance as an in-toto Statement v1, which in-toto and SLSA verifiers read.

use std::collections::BTreeMap;

use serde::Serialize;
use sha2::{Digest as _, Sha256};

use super::VerifiedArchive;
use super::record::{StoredRecord, canonical_json};

/// The `_type` of an in-toto Statement v1.
pub(crate) const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";

/// The `predicateType` of kleene's acceptance predicate (the acceptance record as JSON).
pub const ACCEPTANCE_PREDICATE_TYPE: &str = "urn:kleene:acceptance-record:v1";

/// One attested file: its path and its digests (`sha256`, which every in-toto verifier
/// reads, and `blake3`, which matches the acceptance record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Subject {
    name: String,
    digest: BTreeMap<&'static str, String>,
}

impl Subject {
    /// The file's path.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The digest under `algorithm` (`"sha256"` or `"blake3"`), as lowercase hex.
    pub fn digest(&self, algorithm: &str) -> Option<&str> {
        self.digest.get(algorithm).map(String::as_str)
    }
}

/// An in-toto Statement v1 whose subjects are the accepted files and whose predicate is the
/// acceptance record.
///
/// Made from a [`VerifiedArchive`], so it attests exactly the bytes that were verified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InTotoStatement {
    #[serde(rename = "_type")]
    statement_type: &'static str,
    subject: Vec<Subject>,
    #[serde(rename = "predicateType")]
    predicate_type: &'static str,
    predicate: StoredRecord,
}

impl InTotoStatement {
    /// The subjects, one per file, sorted by path.
    pub fn subjects(&self) -> &[Subject] {
        &self.subject
    }

    /// The statement as JSON.
    pub fn to_json(&self) -> String {
        canonical_json(self)
    }
}

impl VerifiedArchive {
    /// The acceptance as an in-toto Statement v1: one subject per verified file with its
    /// `sha256` and `blake3` digests, and the acceptance record as predicate.
    pub fn in_toto_statement(&self) -> InTotoStatement {
        // The verified manifest already holds each file's blake3, in the same path order.
        let subject = self
            .files()
            .iter()
            .zip(self.manifest().entries())
            .map(|((path, content), entry)| Subject {
                name: path.to_string(),
                digest: BTreeMap::from([
                    ("blake3", entry.blake3().to_string()),
                    ("sha256", hex(&Sha256::digest(content))),
                ]),
            })
            .collect();
        InTotoStatement {
            statement_type: STATEMENT_TYPE,
            subject,
            predicate_type: ACCEPTANCE_PREDICATE_TYPE,
            predicate: self.record().clone(),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
