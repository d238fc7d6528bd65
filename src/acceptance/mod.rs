//! Acceptance of a build's final file set against its plan and evidence, and the canonical,
//! verifiable export of that set.
//!
//! A complete build is accepted, exported as a canonical archive, and verified from the
//! archive bytes against the record digest alone:
//!
//! ```
//! use std::collections::BTreeMap;
//! use kleene::batch::{BatchEvidence, Candidate, evidence::EVIDENCE_VERSION, evidence::EvidenceEvent,
//!                     evidence::InventoryEntry, evidence::Settlement};
//! use kleene::{plan::AdmittedPath, AppBuildPlan, acceptance::BuildBinding, id::ChannelId, id::Digest, snapshot::Snapshot,
//!              acceptance::accept, acceptance::export, acceptance::verify_archive};
//!
//! let plan = AppBuildPlan::from_json(r#"{"tasks": [
//!   {"id": "config_app", "kind": {"lane": "config"}, "owner": "ConfigAgent",
//!    "spec": {"intent": "app config"}, "owned_paths": ["config/app.yaml"]}
//! ]}"#)?.validate()?;
//! let task = plan.topological_order()[0].clone();
//! let candidate = Candidate::new(BTreeMap::from([
//!     (AdmittedPath::admit("config/app.yaml")?, b"name: demo\n".to_vec()),
//! ]));
//! let channel = ChannelId::new("chan-1")?;
//! // Execution evidence, as the batch executor records it.
//! let evidence = BatchEvidence::fold([
//!     EvidenceEvent::Started {
//!         channel: channel.clone(),
//!         plan_digest: plan.digest(),
//!         evidence_version: EVIDENCE_VERSION,
//!         inputs: BTreeMap::new(),
//!         recovery: false,
//!         inventory: vec![InventoryEntry {
//!             task: task.clone(), owner: "ConfigAgent".parse()?, budget: 4 }],
//!     },
//!     EvidenceEvent::Reserved { task: task.clone(), attempt: 1,
//!                               input_digest: Digest::from_bytes([0; 32]) },
//!     EvidenceEvent::Settled { task, attempt: 1,
//!         settlement: Settlement::Accepted { digest: candidate.digest(), candidate } },
//! ])?;
//!
//! let snapshot = Snapshot::from_evidence(&evidence)?;
//! let binding = BuildBinding::new(channel, plan.digest(), EVIDENCE_VERSION);
//! let record = accept(&plan, &evidence, &snapshot, &binding)?;
//! let archive = export(&record, &snapshot)?;
//!
//! // Anyone holding only the record digest can check the archive bytes.
//! let verified = verify_archive(archive.as_bytes(), record.digest())?;
//! assert_eq!(verified.files().len(), 1);
//! let statement = verified.in_toto_statement();
//! assert_eq!(statement.subjects()[0].name(), "config/app.yaml");
//! assert!(statement.subjects()[0].digest("sha256").is_some());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The digests catch accidental damage and edits that did not re-seal what they cover; they
//! cannot catch someone who can write the state directory and recomputes them. For that,
//! sign the record and the statement with a key kept elsewhere
//! ([`AcceptanceRecord::sign`], [`VerifiedArchive::signed_statement`],
//! [`verify_signed_archive`]); `SECURITY.md` at the crate root is the threat model.

mod accept;
pub(crate) mod closures;
mod export;
mod intoto;

pub(crate) mod record;
mod signed;
pub(crate) mod wire;

pub use crate::closure::bound::{ClosureMismatch, ClosuresError};
pub use crate::snapshot::{FileEntry, FileManifest, FileMismatch, ManifestError};
pub use accept::{AcceptanceError, AcceptanceProblem, accept, accept_audited};
pub use export::{
    ArchivePlace, CanonicalArchive, ExportError, HostileEntry, VerifiedArchive, VerifyError,
    export, verify_archive,
};
pub use intoto::{ACCEPTANCE_PREDICATE_TYPE, InTotoStatement, Subject};
pub use record::{
    AcceptanceRecord, BuildBinding, ClosureBinding, RecordDifference, RecordError, StoredRecord,
    TaskResult,
};
pub use signed::{IN_TOTO_PAYLOAD_TYPE, RECORD_PAYLOAD_TYPE, SignedError, verify_signed_archive};
