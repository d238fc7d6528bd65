//! Acceptance of a build's final file set against its plan and evidence, and the canonical,
//! verifiable export of that set.
//!
//! ```
//! use std::collections::BTreeMap;
//! use kleene::{AdmittedPath, FileManifest};
//!
//! let mut files = BTreeMap::new();
//! files.insert(AdmittedPath::admit("backend/models.py")?, b"class User: ...\n".to_vec());
//! let manifest = FileManifest::compute(&files);
//! assert_eq!(manifest.entries()[0].path().as_str(), "backend/models.py");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod export;
mod intoto;
mod manifest;
mod record;

pub use export::{
    CanonicalArchive, ExportError, FILES_DIR, HostileEntry, RECORD_ENTRY, VerifiedArchive,
    VerifyError, export, verify_archive,
};
pub use intoto::{ACCEPTANCE_PREDICATE_TYPE, InTotoStatement, STATEMENT_TYPE, Subject};
pub use manifest::{FileEntry, FileManifest, FileMismatch, ManifestError};
pub use record::{AcceptanceRecord, BuildBinding, RECORD_FORMAT, RecordError, TaskResult};
