//! Signed acceptance: the acceptance record and the in-toto statement in DSSE envelopes,
//! and the archive verifier whose trust anchor is a public key instead of a digest.

use super::record::StoredRecord;
use super::{AcceptanceRecord, RecordError, VerifiedArchive, VerifyError, verify_archive};
use crate::id::digest::Digest;
use crate::signing::{Envelope, PublicKey, SignatureError, SigningKey};
use crate::text::quoted;

/// The DSSE payload type of a signed acceptance record (its canonical JSON).
pub const RECORD_PAYLOAD_TYPE: &str = "application/vnd.kleene.acceptance-record+json";

/// The DSSE payload type of an in-toto statement, which in-toto and SLSA verifiers expect.
pub const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// Why signed acceptance was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignedError {
    /// The signature does not verify against the public key.
    #[error(transparent)]
    Signature(SignatureError),
    /// The envelope signs something else than was expected.
    #[error(
        "check signed acceptance: the envelope's payload type is {found}, expected \
         {expected}; pass the envelope of the right kind",
        found = quoted(.found),
        expected = quoted(.expected)
    )]
    PayloadType {
        /// The payload type found.
        found: String,
        /// The payload type expected.
        expected: &'static str,
    },
    /// The signed statement is not a statement kleene wrote.
    #[error(
        "check signed acceptance: the signed statement is unreadable ({message}); it was not \
         written by kleene export"
    )]
    UnreadableStatement {
        /// What is wrong.
        message: String,
    },
    /// The signed record does not hold together.
    #[error(
        "check signed acceptance: the signed record does not hold together; sign the record \
         kleene accept wrote"
    )]
    Record(#[source] RecordError),
    /// The archive does not verify against the record the signed statement names.
    #[error(
        "check signed acceptance: the archive does not verify against the signed record; \
         check that the archive and the envelope belong to the same export"
    )]
    Archive(#[source] VerifyError),
    /// The archive verifies, but its statement is not byte for byte the signed one.
    #[error(
        "check signed acceptance: the archive's in-toto statement differs from the signed one \
         (same record {record}); the envelope belongs to another export of it: export again"
    )]
    StatementMismatch {
        /// The record digest both name.
        record: Digest,
    },
}

impl AcceptanceRecord {
    /// The record's canonical JSON in a DSSE envelope of type [`RECORD_PAYLOAD_TYPE`],
    /// signed by `key`.
    pub fn sign(&self, key: &SigningKey) -> Envelope {
        key.sign(RECORD_PAYLOAD_TYPE, self.to_json().as_bytes())
    }
}

impl StoredRecord {
    /// Reads the record signed in `envelope`, after checking the signature against `key`
    /// and every digest of the record.
    ///
    /// # Errors
    ///
    /// [`SignedError`]: a missing, wrong or invalid signature, another payload type, or a
    /// record that does not hold together.
    pub fn from_signed(envelope: &Envelope, key: &PublicKey) -> Result<Self, SignedError> {
        let payload = key.verify(envelope).map_err(SignedError::Signature)?;
        expect_type(envelope, RECORD_PAYLOAD_TYPE)?;
        let json = std::str::from_utf8(payload).map_err(|_| {
            SignedError::Record(RecordError::Unreadable {
                message: "the payload is not UTF-8".to_owned(),
                line: 1,
                column: 1,
            })
        })?;
        StoredRecord::from_json(json).map_err(SignedError::Record)
    }
}

impl VerifiedArchive {
    /// The archive's in-toto statement in a DSSE envelope of type [`IN_TOTO_PAYLOAD_TYPE`],
    /// signed by `key`: what `kleene export` writes beside the archive as `OUT.intoto.jsonl`.
    pub fn signed_statement(&self, key: &SigningKey) -> Envelope {
        key.sign(
            IN_TOTO_PAYLOAD_TYPE,
            self.in_toto_statement().to_json().as_bytes(),
        )
    }
}

fn expect_type(envelope: &Envelope, expected: &'static str) -> Result<(), SignedError> {
    if envelope.payload_type() == expected {
        Ok(())
    } else {
        Err(SignedError::PayloadType {
            found: envelope.payload_type().to_owned(),
            expected,
        })
    }
}

/// Verifies `archive` against the in-toto statement signed in `envelope`, trusting only
/// `key`: the signature must verify, the statement's record digest is the trust anchor of
/// [`verify_archive`], and the archive's statement must be byte for byte the signed one.
///
/// Unlike a record digest read from a state directory, the anchor cannot be forged by
/// whoever can write that directory: making a new signature takes the secret key.
///
/// # Errors
///
/// [`SignedError`] naming the refused signature, the unreadable statement or the archive
/// problem.
///
/// # Examples
///
/// ```
/// # use std::collections::BTreeMap;
/// # use kleene::batch::{BatchEvidence, Candidate, evidence::EVIDENCE_VERSION, evidence::EvidenceEvent,
/// #                     evidence::InventoryEntry, evidence::Settlement};
/// # use kleene::{plan::AdmittedPath, AppBuildPlan, acceptance::BuildBinding, id::ChannelId, id::Digest, snapshot::Snapshot,
/// #              acceptance::accept, acceptance::export};
/// # let plan = AppBuildPlan::from_json(r#"{"tasks": [
/// #   {"id": "config_app", "kind": {"lane": "config"}, "owner": "ConfigAgent",
/// #    "spec": {"intent": "app config"}, "owned_paths": ["config/app.yaml"]}
/// # ]}"#)?.validate()?;
/// # let task = plan.topological_order()[0].clone();
/// # let candidate = Candidate::new(BTreeMap::from([
/// #     (AdmittedPath::admit("config/app.yaml")?, b"name: demo\n".to_vec()),
/// # ]));
/// # let channel = ChannelId::new("chan-1")?;
/// # let evidence = BatchEvidence::fold([
/// #     EvidenceEvent::Started { channel: channel.clone(), plan_digest: plan.digest(),
/// #         evidence_version: EVIDENCE_VERSION, inputs: BTreeMap::new(), recovery: false,
/// #         inventory: vec![InventoryEntry {
/// #             task: task.clone(), owner: "ConfigAgent".parse()?, budget: 4 }] },
/// #     EvidenceEvent::Reserved { task: task.clone(), attempt: 1,
/// #                               input_digest: Digest::from_bytes([0; 32]) },
/// #     EvidenceEvent::Settled { task, attempt: 1,
/// #         settlement: Settlement::Accepted { digest: candidate.digest(), candidate } },
/// # ])?;
/// # let snapshot = Snapshot::from_evidence(&evidence)?;
/// # let binding = BuildBinding::new(channel, plan.digest(), EVIDENCE_VERSION);
/// # let record = accept(&plan, &evidence, &snapshot, &binding)?;
/// use kleene::signing::SigningKey;
/// use kleene::acceptance::verify_signed_archive;
///
/// let key = SigningKey::from_seed([1; 32]); // in practice: SigningKey::generate()
/// let archive = export(&record, &snapshot)?;
/// let envelope = archive.verified().signed_statement(&key);
///
/// // The verifier needs the archive, the envelope and the public key; nothing else.
/// let verified = verify_signed_archive(archive.as_bytes(), &envelope, &key.public_key())?;
/// assert_eq!(verified.record_digest(), record.digest());
/// let stranger = SigningKey::from_seed([2; 32]).public_key();
/// assert!(verify_signed_archive(archive.as_bytes(), &envelope, &stranger).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn verify_signed_archive(
    archive: &[u8],
    envelope: &Envelope,
    key: &PublicKey,
) -> Result<VerifiedArchive, SignedError> {
    let payload = key.verify(envelope).map_err(SignedError::Signature)?;
    expect_type(envelope, IN_TOTO_PAYLOAD_TYPE)?;
    let unreadable = |message: &str| SignedError::UnreadableStatement {
        message: message.to_owned(),
    };
    let statement: serde_json::Value =
        serde_json::from_slice(payload).map_err(|e| unreadable(&e.to_string()))?;
    let anchor: Digest = statement["predicate"]["record_digest"]
        .as_str()
        .ok_or_else(|| unreadable("it has no predicate.record_digest"))?
        .parse()
        .map_err(|e: crate::id::digest::DigestParseError| unreadable(&e.to_string()))?;
    let verified = verify_archive(archive, anchor).map_err(SignedError::Archive)?;
    if verified.in_toto_statement().to_json().as_bytes() != payload {
        return Err(SignedError::StatementMismatch { record: anchor });
    }
    Ok(verified)
}
