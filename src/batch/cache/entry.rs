//! One accepted result as a cache keeps it: the action key it answers, the accepted output's
//! files by digest, and what proves the result (where it was accepted, by which call, under
//! which records), sealed by one digest.
//!
//! ```
//! use std::collections::BTreeMap;
//! use kleene::batch::Candidate;
//! use kleene::batch::candidate::AcceptedOutput;
//! use kleene::batch::cache::{CachedResult, Provenance, ActionKeyParts};
//! use kleene::id::{ChannelId, Digest, TaskId};
//! use kleene::plan::AdmittedPath;
//!
//! let plan = kleene::AppBuildPlan::from_json(r#"{"tasks": [
//!   {"id": "a", "owner": "shell", "spec": {"intent": "a"}, "owned_paths": ["a.txt"]}]}"#)?
//!     .validate()?;
//! let key = ActionKeyParts::new(plan.tasks().next().unwrap()).key();
//! let files = Candidate::new(BTreeMap::from([(AdmittedPath::admit("a.txt")?, b"a".to_vec())]));
//! let output = AcceptedOutput::verified(files.clone(), files.digest()).unwrap();
//! let provenance = Provenance::new(ChannelId::new("run-1")?, 1);
//! let result = CachedResult::new(key, TaskId::new("a")?, provenance, &output, None);
//! assert_eq!(result.output(), output.digest());
//! // Sealed: the JSON a file cache keeps reads back as the same result.
//! assert_eq!(CachedResult::from_json(result.to_json(None).as_bytes(), None)?, result);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::key::ActionKey;
use crate::batch::candidate::AcceptedOutput;
use crate::closure::ClosureRecord;
use crate::id::digest::CanonicalHasher;
use crate::id::{ChannelId, Digest, TaskId};
use crate::plan::AdmittedPath;

/// The version of the entry this module writes.
pub const ENTRY_FORMAT: u32 = 1;

/// The largest entry read, in bytes: an entry names files by digest, so even one of a
/// 4096-file output stays far below it.
pub const MAX_ENTRY_BYTES: u64 = 16 * 1024 * 1024;

/// Where an accepted result came from: what a reused result's record names, so its audit
/// trail can be found and checked (with the call's closure record, which the entry binds).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Provenance {
    /// The run (channel) that accepted it.
    pub channel: ChannelId,
    /// The call of that run whose output was accepted.
    pub call: u32,
}

impl Provenance {
    /// Call `call` of the run on `channel`.
    pub fn new(channel: ChannelId, call: u32) -> Self {
        Self { channel, call }
    }
}

/// One accepted file, as an entry names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachedFile {
    /// Its length in bytes.
    pub len: u64,
    /// The blake3 digest of its bytes (its object's name).
    pub blake3: Digest,
}

/// The closure record of the call that made a result, as an entry names it: the record's
/// digest (what an acceptance record binds) and its JSON's bytes (what a cache keeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachedClosure {
    /// The record's digest.
    pub record: Digest,
    /// The head of its hash-chained audit log (what a reuse names beside the digest).
    pub audit_head: Digest,
    /// Its JSON ([`ClosureRecord::to_json`]), by length and blake3.
    pub json: CachedFile,
}

/// An accepted result as a cache keeps it (see the [module](self) docs). Built once and
/// never changed; its [`digest`](Self::digest) seals every field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedResult {
    key: ActionKey,
    task: TaskId,
    provenance: Provenance,
    closure: Option<CachedClosure>,
    output: Digest,
    files: BTreeMap<AdmittedPath, CachedFile>,
    digest: Digest,
}

impl CachedResult {
    /// The result `output` of `task`'s call under `key`, accepted as `provenance` says, with
    /// the call's closure record where it kept one.
    pub fn new(
        key: ActionKey,
        task: TaskId,
        provenance: Provenance,
        output: &AcceptedOutput,
        closure: Option<&ClosureRecord>,
    ) -> Self {
        let closure = closure.map(|record| {
            let json = record.to_json();
            CachedClosure {
                record: record.digest(),
                audit_head: record.audit().head(),
                json: CachedFile {
                    len: json.len() as u64,
                    blake3: Digest::from(blake3::hash(json.as_bytes())),
                },
            }
        });
        let files = output
            .files()
            .iter()
            .map(|(path, bytes)| {
                (
                    path.clone(),
                    CachedFile {
                        len: bytes.len() as u64,
                        blake3: Digest::from(blake3::hash(bytes)),
                    },
                )
            })
            .collect();
        Self::sealed(key, task, provenance, closure, output.digest(), files)
    }

    fn sealed(
        key: ActionKey,
        task: TaskId,
        provenance: Provenance,
        closure: Option<CachedClosure>,
        output: Digest,
        files: BTreeMap<AdmittedPath, CachedFile>,
    ) -> Self {
        let mut h = CanonicalHasher::new("cache entry");
        h.put(&ENTRY_FORMAT)
            .put(&key.digest())
            .put(&task)
            .put(&provenance.channel)
            .put(&provenance.call)
            .put(&closure.map(|c| (c.record, c.audit_head, c.json.len, c.json.blake3)))
            .put(&output)
            .seq(files.iter().map(|(path, f)| (path, f.len, f.blake3)));
        let digest = h.finish();
        Self {
            key,
            task,
            provenance,
            closure,
            output,
            files,
            digest,
        }
    }

    /// The action key this result answers.
    pub fn key(&self) -> ActionKey {
        self.key
    }

    /// The task whose call made it.
    pub fn task(&self) -> &TaskId {
        &self.task
    }

    /// Where it was accepted.
    pub fn provenance(&self) -> &Provenance {
        &self.provenance
    }

    /// The closure record of the call that made it, where the call kept one.
    pub fn closure(&self) -> Option<&CachedClosure> {
        self.closure.as_ref()
    }

    /// The digest the output was accepted under.
    pub fn output(&self) -> Digest {
        self.output
    }

    /// The accepted files, by path.
    pub fn files(&self) -> &BTreeMap<AdmittedPath, CachedFile> {
        &self.files
    }

    /// The digest sealing every field (the canonical encoding, purpose `cache entry`).
    pub fn digest(&self) -> Digest {
        self.digest
    }

    /// The entry's JSON, with a MAC over its digest when `mac_key` is given.
    pub fn to_json(&self, mac_key: Option<&[u8; 32]>) -> String {
        let wire = EntryV1 {
            format: ENTRY_FORMAT,
            key: self.key.digest(),
            task: self.task.clone(),
            channel: self.provenance.channel.clone(),
            call: self.provenance.call,
            closure: self.closure.map(|c| ClosureV1 {
                record: c.record,
                audit_head: c.audit_head,
                len: c.json.len,
                blake3: c.json.blake3,
            }),
            output: self.output,
            files: self
                .files
                .iter()
                .map(|(path, f)| FileV1 {
                    path: path.clone(),
                    len: f.len,
                    blake3: f.blake3,
                })
                .collect(),
            digest: self.digest,
            mac: mac_key.map(|k| mac(k, self.digest)),
        };
        serde_json::to_string(&wire).unwrap_or_default()
    }

    /// Reads an entry's JSON, checking its format, its digest against its fields, and with
    /// `mac_key` its MAC.
    ///
    /// # Errors
    ///
    /// [`EntryProblem`] naming what does not hold.
    pub fn from_json(json: &[u8], mac_key: Option<&[u8; 32]>) -> Result<Self, EntryProblem> {
        #[derive(Deserialize)]
        struct Format {
            format: u32,
        }
        let format: Format =
            serde_json::from_slice(json).map_err(|e| EntryProblem::Malformed(e.to_string()))?;
        if format.format != ENTRY_FORMAT {
            return Err(EntryProblem::Format(format.format));
        }
        let wire: EntryV1 =
            serde_json::from_slice(json).map_err(|e| EntryProblem::Malformed(e.to_string()))?;
        let mut files = BTreeMap::new();
        for f in wire.files {
            let file = CachedFile {
                len: f.len,
                blake3: f.blake3,
            };
            if files.insert(f.path.clone(), file).is_some() {
                return Err(EntryProblem::Malformed(format!(
                    "{} is named twice",
                    f.path
                )));
            }
        }
        let result = Self::sealed(
            ActionKey::from_digest(wire.key),
            wire.task,
            Provenance::new(wire.channel, wire.call),
            wire.closure.map(|c| CachedClosure {
                record: c.record,
                audit_head: c.audit_head,
                json: CachedFile {
                    len: c.len,
                    blake3: c.blake3,
                },
            }),
            wire.output,
            files,
        );
        if result.digest != wire.digest {
            return Err(EntryProblem::Digest);
        }
        if let Some(key) = mac_key {
            match wire.mac {
                None => return Err(EntryProblem::Unsigned),
                Some(m) if m != mac(key, result.digest) => return Err(EntryProblem::Mac),
                Some(_) => {}
            }
        }
        Ok(result)
    }
}

/// Why an entry was not taken: each makes a lookup a miss that names the entry, never a hit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EntryProblem {
    /// It could not be read.
    #[error("it cannot be read: {0}")]
    Unreadable(String),
    /// It is larger than [`MAX_ENTRY_BYTES`].
    #[error("it is larger than {MAX_ENTRY_BYTES} bytes")]
    TooLarge,
    /// It is not an entry's JSON.
    #[error("it is not a cache entry: {0}")]
    Malformed(String),
    /// Another format than this kleene reads.
    #[error("it is of format {0}; this kleene reads format {ENTRY_FORMAT}")]
    Format(u32),
    /// Its fields do not give its digest: damaged, or changed by hand.
    #[error("its fields do not match its digest (damaged or changed)")]
    Digest,
    /// A key is configured and the entry carries no MAC.
    #[error("it carries no MAC, and this cache has a key")]
    Unsigned,
    /// Its MAC is not this cache's key's.
    #[error("its MAC is not of this cache's key")]
    Mac,
    /// It answers another action key than the one it is stored under.
    #[error("it answers action key {found}, not {wanted}")]
    OtherKey {
        /// The key looked up.
        wanted: ActionKey,
        /// The key the entry answers.
        found: ActionKey,
    },
    /// An accepted file's object is missing or unreadable.
    #[error("the object of {path} cannot be read: {reason}")]
    ObjectUnreadable {
        /// The accepted file.
        path: AdmittedPath,
        /// Why.
        reason: String,
    },
    /// An accepted file's object does not hold the bytes the entry names.
    #[error("the object of {path} does not hold its bytes (damaged or swapped)")]
    ObjectDamaged {
        /// The accepted file.
        path: AdmittedPath,
    },
    /// The files do not make the output the entry says was accepted.
    #[error("its files do not make the accepted output {0}")]
    Output(Digest),
    /// The call's closure record is missing, damaged, or not the record the entry names.
    #[error("the closure record {record} of the call cannot be had: {reason}")]
    Closure {
        /// The record's digest, as the entry names it.
        record: Digest,
        /// Why.
        reason: String,
    },
}

fn mac(key: &[u8; 32], digest: Digest) -> Digest {
    Digest::from(blake3::keyed_hash(key, digest.as_bytes()))
}

/// The entry as it is written (format 1).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryV1 {
    format: u32,
    key: Digest,
    task: TaskId,
    channel: ChannelId,
    call: u32,
    closure: Option<ClosureV1>,
    output: Digest,
    files: Vec<FileV1>,
    digest: Digest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mac: Option<Digest>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClosureV1 {
    record: Digest,
    audit_head: Digest,
    len: u64,
    blake3: Digest,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileV1 {
    path: AdmittedPath,
    len: u64,
    blake3: Digest,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> CachedResult {
        let files = BTreeMap::from([(
            AdmittedPath::admit("a").unwrap(),
            CachedFile {
                len: 1,
                blake3: Digest::from(blake3::hash(b"a")),
            },
        )]);
        CachedResult::sealed(
            ActionKey::from_digest(Digest::from_bytes([1; 32])),
            TaskId::new("t").unwrap(),
            Provenance::new(ChannelId::new("c").unwrap(), 1),
            None,
            Digest::from_bytes([3; 32]),
            files,
        )
    }

    /// A file named twice cannot be sealed by `sealed` (a map), and the JSON that names one
    /// twice is refused before any digest is compared.
    #[test]
    fn a_file_named_twice_is_malformed() {
        let json = entry().to_json(None);
        let file = r#"{"path":"a","len":1,"blake3":""#;
        let at = json.find(file).unwrap();
        let end = at + json[at..].find('}').unwrap() + 1;
        let twice = format!("{},{}", &json[..end], &json[at..]);
        let problem = CachedResult::from_json(twice.as_bytes(), None).unwrap_err();
        assert!(
            matches!(&problem, EntryProblem::Malformed(m) if m.contains("named twice")),
            "{problem}"
        );
    }

    #[test]
    fn a_seal_is_checked_only_where_a_key_is_given() {
        let sealed = entry().to_json(Some(&[5; 32]));
        assert_eq!(
            CachedResult::from_json(sealed.as_bytes(), None),
            Ok(entry())
        );
        assert_eq!(
            CachedResult::from_json(sealed.as_bytes(), Some(&[6; 32])),
            Err(EntryProblem::Mac)
        );
    }
}
