//! The exact contents of a file set: a sorted `(path, length, blake3)` list and its digest.

use std::collections::BTreeMap;

use crate::id::digest::{Canonical, CanonicalHasher, canonical_struct};
use crate::{id::digest::Digest, plan::path::AdmittedPath};

/// One file of a [`FileManifest`]: its path, its length in bytes and the plain blake3 hash of
/// its content (what `b3sum` prints, so anyone can check it without kleene).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    path: AdmittedPath,
    len: u64,
    blake3: Digest,
}

canonical_struct!(FileEntry { path, len, blake3 });

// A file set enters other digests by its own digest.
impl Canonical for FileManifest {
    fn encode(&self, h: &mut CanonicalHasher) {
        h.put(&self.digest);
    }
}

impl FileEntry {
    /// The file's path.
    pub fn path(&self) -> &AdmittedPath {
        &self.path
    }

    /// The file's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The plain blake3 hash of the file's content.
    pub fn blake3(&self) -> Digest {
        self.blake3
    }

    /// An entry read back from a record, as written.
    pub(crate) fn of_parts(path: AdmittedPath, len: u64, blake3: Digest) -> Self {
        Self { path, len, blake3 }
    }

    fn of(path: &AdmittedPath, content: &[u8]) -> Self {
        Self {
            path: path.clone(),
            len: content.len() as u64,
            blake3: content_hash(content),
        }
    }
}

/// Above this size a single file is hashed with blake3's own multi-threading as well.
#[cfg(feature = "parallel")]
const LARGE_FILE: usize = 1 << 20;

fn content_hash(content: &[u8]) -> Digest {
    #[cfg(feature = "parallel")]
    if content.len() >= LARGE_FILE {
        return Digest::from(blake3::Hasher::new().update_rayon(content).finalize());
    }
    Digest::from(blake3::hash(content))
}

/// The exact contents of a file set: every file's `(path, length, blake3)`, sorted by path,
/// and a domain-separated digest over that list.
///
/// One changed byte, or one renamed, added or removed file changes the digest, and
/// [`FileManifest::compare`] names the path.
///
/// # Examples
///
/// ```
/// use std::collections::BTreeMap;
/// use kleene::{plan::AdmittedPath, acceptance::FileManifest};
///
/// let mut files = BTreeMap::new();
/// files.insert(AdmittedPath::admit("app/main.py")?, b"print('hi')\n".to_vec());
/// let manifest = FileManifest::compute(&files);
/// assert_eq!(manifest.entries().len(), 1);
/// assert_eq!(manifest.entries()[0].len(), 12);
///
/// files.insert(AdmittedPath::admit("app/extra.py")?, Vec::new());
/// let grown = FileManifest::compute(&files);
/// assert_ne!(grown.digest(), manifest.digest());
/// assert_eq!(manifest.compare(&grown)[0].path().as_str(), "app/extra.py");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileManifest {
    entries: Vec<FileEntry>,
    digest: Digest,
}

/// Why a serialised manifest was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// Entries were out of order or repeated.
    #[error("read file manifest: entry {path} is out of order or repeated")]
    Unsorted {
        /// The first path out of place.
        path: String,
    },
    /// The recorded digest is not the digest of the entries.
    #[error("read file manifest: recorded digest {recorded} but the entries digest to {computed}")]
    DigestMismatch {
        /// The digest written in the manifest.
        recorded: Digest,
        /// The digest of its entries.
        computed: Digest,
    },
}

/// How one path differs between an expected and an actual file set.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileMismatch {
    /// The path is in both, with different content.
    Changed {
        /// The path.
        path: AdmittedPath,
        /// What was expected.
        expected: FileEntry,
        /// What was found.
        found: FileEntry,
    },
    /// The path was expected and is absent.
    Missing {
        /// The path.
        path: AdmittedPath,
    },
    /// The path is present and was not expected.
    Extra {
        /// The path.
        path: AdmittedPath,
    },
}

impl FileMismatch {
    /// The path that differs.
    pub fn path(&self) -> &AdmittedPath {
        match self {
            Self::Changed { path, .. } | Self::Missing { path } | Self::Extra { path } => path,
        }
    }
}

impl std::fmt::Display for FileMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Changed {
                path,
                expected,
                found,
            } => write!(
                f,
                "{path} changed (expected {} bytes {}, found {} bytes {})",
                expected.len, expected.blake3, found.len, found.blake3
            ),
            Self::Missing { path } => write!(f, "{path} is missing"),
            Self::Extra { path } => write!(f, "{path} is not in the record"),
        }
    }
}

impl FileManifest {
    /// The manifest of `files`.
    ///
    /// With the `parallel` feature, files are hashed on all cores (and files of 1 MiB or
    /// more with blake3's own multi-threading too); the result is identical.
    pub fn compute<B: AsRef<[u8]> + Sync>(files: &BTreeMap<AdmittedPath, B>) -> Self {
        Self::of_sorted(files.iter().map(|(p, b)| (p, b.as_ref())))
    }

    /// The manifest of files that are already sorted by path and unique (a `BTreeMap`'s
    /// order).
    pub(crate) fn of_sorted<'a, I>(files: I) -> Self
    where
        I: Iterator<Item = (&'a AdmittedPath, &'a [u8])>,
    {
        #[cfg(feature = "parallel")]
        let entries = {
            use rayon::prelude::*;
            let files: Vec<_> = files.collect();
            files
                .par_iter()
                .map(|(p, b)| FileEntry::of(p, b))
                .collect::<Vec<_>>()
        };
        #[cfg(not(feature = "parallel"))]
        let entries = files.map(|(p, b)| FileEntry::of(p, b)).collect::<Vec<_>>();
        Self::from_sorted(entries)
    }

    pub(crate) fn from_sorted(entries: Vec<FileEntry>) -> Self {
        let digest = Digest::of("file manifest", &entries);
        Self { entries, digest }
    }

    /// The entries, sorted by path.
    pub fn entries(&self) -> &[FileEntry] {
        &self.entries
    }

    /// The digest over the sorted `(path, length, blake3)` list.
    pub fn digest(&self) -> Digest {
        self.digest
    }

    /// The entry for `path`, if the set has it.
    pub fn get(&self, path: &AdmittedPath) -> Option<&FileEntry> {
        self.entries
            .binary_search_by(|e| e.path.cmp(path))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// Every path where `actual` differs from `self` (the expected set), in path order.
    pub fn compare(&self, actual: &FileManifest) -> Vec<FileMismatch> {
        let mut out = Vec::new();
        let (mut e, mut a) = (
            self.entries.iter().peekable(),
            actual.entries.iter().peekable(),
        );
        loop {
            match (e.peek(), a.peek()) {
                (None, None) => break,
                (Some(x), None) => {
                    out.push(FileMismatch::Missing {
                        path: x.path.clone(),
                    });
                    e.next();
                }
                (None, Some(y)) => {
                    out.push(FileMismatch::Extra {
                        path: y.path.clone(),
                    });
                    a.next();
                }
                (Some(x), Some(y)) => match x.path.cmp(&y.path) {
                    std::cmp::Ordering::Less => {
                        out.push(FileMismatch::Missing {
                            path: x.path.clone(),
                        });
                        e.next();
                    }
                    std::cmp::Ordering::Greater => {
                        out.push(FileMismatch::Extra {
                            path: y.path.clone(),
                        });
                        a.next();
                    }
                    std::cmp::Ordering::Equal => {
                        if x != y {
                            out.push(FileMismatch::Changed {
                                path: x.path.clone(),
                                expected: (*x).clone(),
                                found: (*y).clone(),
                            });
                        }
                        e.next();
                        a.next();
                    }
                },
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> AdmittedPath {
        AdmittedPath::admit(s).unwrap()
    }

    fn set(files: &[(&str, &[u8])]) -> FileManifest {
        let map: BTreeMap<_, _> = files.iter().map(|(k, v)| (p(k), v.to_vec())).collect();
        FileManifest::compute(&map)
    }

    #[test]
    fn content_hash_is_plain_blake3() {
        let m = set(&[("a.txt", b"abc")]);
        assert_eq!(m.entries()[0].blake3(), Digest::from(blake3::hash(b"abc")));
    }

    #[test]
    fn large_files_hash_the_same_on_every_path() {
        // Above the multi-threaded threshold of the `parallel` feature.
        let big: Vec<u8> = (0..(3u32 << 20)).map(|i| (i % 251) as u8).collect();
        let m = set(&[("big.bin", &big), ("small.txt", b"x")]);
        assert_eq!(m.entries()[0].blake3(), Digest::from(blake3::hash(&big)));
        assert_eq!(m.entries()[0].len(), big.len() as u64);
    }

    #[test]
    fn every_kind_of_change_moves_the_digest_and_names_the_path() {
        let base = set(&[("a", b"1"), ("b/c", b"2")]);
        let changed = set(&[("a", b"1"), ("b/c", b"3")]);
        let renamed = set(&[("a", b"1"), ("b/d", b"2")]);
        let removed = set(&[("a", b"1")]);
        for other in [&changed, &renamed, &removed] {
            assert_ne!(base.digest(), other.digest());
        }
        assert!(
            matches!(&base.compare(&changed)[..], [FileMismatch::Changed { path, .. }] if path.as_str() == "b/c")
        );
        let names: Vec<_> = base
            .compare(&renamed)
            .iter()
            .map(|m| m.to_string())
            .collect();
        assert_eq!(names, ["b/c is missing", "b/d is not in the record"]);
        assert!(base.compare(&base).is_empty());
    }

    #[test]
    fn digest_is_pinned() {
        // Acceptance records and archives carry this digest: the value must never move.
        assert_eq!(
            set(&[("a.py", b"x"), ("b/c.py", b"")]).digest().to_string(),
            "e63e4988dbfab93f474bd282a4d7a34de897cdb3f0a46ba2daa157147a89ae06"
        );
    }
}
