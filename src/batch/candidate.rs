//! What a worker proposes for a task, what the batch accepted, and why a proposal was refused.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::OnceLock;

use crate::id::digest::{Canonical, CanonicalHasher, canonical_enum};
use crate::plan::path::AdmittedPath;
use crate::{id::TaskId, id::digest::Digest};

/// A worker's proposed output for one task: whole files at admitted paths.
///
/// A candidate is validated whole (ownership, then the output contract) before anything is
/// accepted, so a partly wrong candidate never leaks a file into the batch.
///
/// # Examples
///
/// ```
/// use std::collections::BTreeMap;
/// use kleene::plan::AdmittedPath;
/// use kleene::batch::Candidate;
///
/// let files = BTreeMap::from([(AdmittedPath::admit("backend/models.py")?, b"class User: ...".to_vec())]);
/// let candidate = Candidate::new(files);
/// assert_eq!(candidate.files().len(), 1);
/// assert_eq!(candidate.digest(), candidate.clone().digest());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Candidate {
    files: BTreeMap<AdmittedPath, Vec<u8>>,
}

impl Candidate {
    /// A candidate made of `files`.
    pub fn new(files: BTreeMap<AdmittedPath, Vec<u8>>) -> Self {
        Self { files }
    }

    /// The proposed files, sorted by path.
    pub fn files(&self) -> &BTreeMap<AdmittedPath, Vec<u8>> {
        &self.files
    }

    /// The canonical digest of the file set: the sorted list of `(path, length,
    /// blake3(content))`, so one changed byte, a renamed, added or removed file changes it.
    pub fn digest(&self) -> Digest {
        // The derive-key setup is the same for every candidate; do it once.
        static TEMPLATE: OnceLock<CanonicalHasher> = OnceLock::new();
        TEMPLATE
            .get_or_init(|| CanonicalHasher::new("batch candidate"))
            .clone()
            .seq(self.files.iter().map(|(path, content)| {
                // Encoded as a file manifest's entries are: path, length, content hash.
                (
                    path,
                    content.len() as u64,
                    Digest::from(blake3::hash(content)),
                )
            }))
            .finish()
    }
}

impl fmt::Debug for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // File contents can be large; the paths and the digest identify a candidate.
        f.debug_struct("Candidate")
            .field("paths", &self.files.keys().collect::<Vec<_>>())
            .field("digest", &self.digest())
            .finish()
    }
}

/// A candidate the batch accepted for a task, with the digest it was accepted under.
///
/// The digest is verified whenever evidence is folded, so an accepted output whose bytes no
/// longer match is an error, never silently re-run or replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedOutput {
    candidate: Candidate,
    digest: Digest,
}

impl AcceptedOutput {
    /// An output accepted under `digest`, rebuilt from its files (read back from storage, or
    /// fetched from elsewhere by that digest); `None` when the files do not match it.
    ///
    /// ```
    /// use kleene::batch::{candidate::AcceptedOutput, Candidate};
    ///
    /// let files = Candidate::default();
    /// let digest = files.digest();
    /// assert!(AcceptedOutput::verified(files.clone(), digest).is_some());
    /// assert!(AcceptedOutput::verified(files, kleene::id::Digest::from_bytes([7; 32])).is_none());
    /// ```
    pub fn verified(candidate: Candidate, digest: Digest) -> Option<Self> {
        (candidate.digest() == digest).then_some(Self { candidate, digest })
    }

    /// An output whose digest the caller computed from `candidate` itself.
    pub(crate) fn trusted(candidate: Candidate, digest: Digest) -> Self {
        debug_assert_eq!(candidate.digest(), digest);
        Self { candidate, digest }
    }

    /// The accepted files.
    pub fn files(&self) -> &BTreeMap<AdmittedPath, Vec<u8>> {
        self.candidate.files()
    }

    /// The accepted candidate.
    pub fn candidate(&self) -> &Candidate {
        &self.candidate
    }

    /// The digest the output was accepted under.
    pub fn digest(&self) -> Digest {
        self.digest
    }

    /// The accepted candidate, the output given up.
    pub(crate) fn into_candidate(self) -> Candidate {
        self.candidate
    }
}

/// Why a candidate was refused: the exact rejection a corrective call receives.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// The candidate touches a path the task does not own (the built-in ownership check).
    #[error("candidate for task {task} writes {path}, which the task does not own")]
    NotOwned {
        /// The task.
        task: TaskId,
        /// The first path outside the task's admitted paths.
        path: AdmittedPath,
    },
    /// The user-supplied output contract refused the candidate.
    #[error("candidate for task {task} was refused: {message}")]
    Contract {
        /// The task.
        task: TaskId,
        /// The contract's diagnostic, verbatim.
        message: String,
    },
}

impl Rejection {
    /// A contract rejection of `task`'s candidate with `message` kept verbatim.
    pub fn contract(task: &TaskId, message: impl Into<String>) -> Self {
        Self::Contract {
            task: task.clone(),
            message: message.into(),
        }
    }

    /// The task whose candidate was refused.
    pub fn task(&self) -> &TaskId {
        match self {
            Self::NotOwned { task, .. } | Self::Contract { task, .. } => task,
        }
    }

    /// Why the candidate was refused, in one line for people: a contract's own words (a
    /// failed check names itself there), or the built-in rule that refused it.
    ///
    /// ```
    /// # use kleene::{batch::Rejection, id::TaskId};
    /// let why = Rejection::contract(&TaskId::new("svc")?, "closure halted at svc\n\ndetails");
    /// assert_eq!(why.headline(), "closure halted at svc");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn headline(&self) -> String {
        let text = match self {
            Self::Contract { message, .. } => message.clone(),
            other => other.to_string(),
        };
        text.lines().next().unwrap_or_default().to_owned()
    }

    /// Whether the built-in ownership check refused the candidate.
    pub fn is_not_owned(&self) -> bool {
        matches!(self, Self::NotOwned { .. })
    }
}

canonical_enum!(Rejection {
    NotOwned { task, path } => "not_owned",
    Contract { task, message } => "contract",
});

// Candidates and accepted outputs enter other digests by their own digest, so an
// evidence digest does not re-read every file.
impl Canonical for Candidate {
    fn encode(&self, h: &mut CanonicalHasher) {
        h.put(&self.digest());
    }
}

impl Canonical for AcceptedOutput {
    fn encode(&self, h: &mut CanonicalHasher) {
        h.put(&self.digest());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> AdmittedPath {
        AdmittedPath::admit(s).unwrap()
    }

    #[test]
    fn digest_sees_every_change() {
        let a = Candidate::new(BTreeMap::from([(p("a.py"), b"x".to_vec())]));
        let byte = Candidate::new(BTreeMap::from([(p("a.py"), b"y".to_vec())]));
        let renamed = Candidate::new(BTreeMap::from([(p("b.py"), b"x".to_vec())]));
        let added = Candidate::new(BTreeMap::from([
            (p("a.py"), b"x".to_vec()),
            (p("b.py"), Vec::new()),
        ]));
        let digests = [
            a.digest(),
            byte.digest(),
            renamed.digest(),
            added.digest(),
            Candidate::default().digest(),
        ];
        for (i, x) in digests.iter().enumerate() {
            for y in &digests[i + 1..] {
                assert_ne!(x, y);
            }
        }
    }

    #[test]
    fn digest_is_pinned() {
        // Accepted outputs are persisted with this digest and re-verified on every load: the
        // value must never move, whatever the code that computes it.
        let c = Candidate::new(BTreeMap::from([
            (p("a.py"), b"x".to_vec()),
            (p("b/c.py"), Vec::new()),
        ]));
        assert_eq!(
            c.digest().to_string(),
            "b47592c2eadddce1474d88cbac0f7002a1c5261c2638f226f9e2ecbbec30b61d"
        );
    }

    #[test]
    fn accepted_output_refuses_a_foreign_digest() {
        let a = Candidate::new(BTreeMap::from([(p("a.py"), b"x".to_vec())]));
        assert!(AcceptedOutput::verified(a.clone(), a.digest()).is_some());
        assert!(AcceptedOutput::verified(a, Candidate::default().digest()).is_none());
    }
}
