//! The files of a plan's directory that its commands may read (helper scripts, fixtures),
//! carried by digest: bound into the plan digest, and materialised wherever a call runs.
//!
//! ```
//! use kleene::shell::PlanFiles;
//!
//! let dir = tempfile::tempdir()?;
//! std::fs::create_dir(dir.path().join("tasks"))?;
//! std::fs::write(dir.path().join("tasks/build.sh"), "echo built > out.txt\n")?;
//! let files = PlanFiles::collect(dir.path(), &[], &[], &[])?;
//! assert_eq!(files.len(), 1);
//!
//! // Elsewhere: the same files, rebuilt from their manifest and bytes fetched by digest.
//! let copy = tempfile::tempdir()?;
//! files.write_copy(copy.path())?;
//! files.verify_copy(copy.path())?;
//! assert_eq!(std::fs::read_to_string(copy.path().join("tasks/build.sh"))?, "echo built > out.txt\n");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A plan file's commands find these files under `$KLEENE_PLAN_DIR`. Which files count is
//! the plan's `inputs` key (globs relative to the plan file's directory); without it, every
//! file there except the run's own state, `.git` and the plan's scratch. Either way they are
//! bounded ([`MAX_PLAN_FILES`], [`MAX_PLAN_FILE_BYTES`]) so that a plan placed at the root
//! of a large tree is refused, naming its largest files, before anything runs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::scratch::Scratch;
use crate::id::Digest;
use crate::plan::{AdmittedPath, ExtensionValue, PathGlob};
use crate::stage::ScratchRule;

/// The most files a plan may carry.
pub const MAX_PLAN_FILES: usize = 4096;

/// The most bytes a plan's files may hold together: they travel with every submission and
/// are copied wherever a call runs. 8 MiB: sent base64 in one message to a Restate channel
/// (about 11 MiB), a submission stays well under the 32 MiB Restate refuses by default.
pub const MAX_PLAN_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// The plan-level key the manifest is bound under: no plan file may write it (the loader
/// refuses it as an unknown key), so only the collected manifest ever fills it.
pub(crate) const MANIFEST_KEY: &str = "plan_files";

/// The files a plan's commands may read, by path: each one's digest, and its bytes where
/// they were collected or fetched.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PlanFiles {
    digests: BTreeMap<AdmittedPath, Digest>,
    bytes: BTreeMap<AdmittedPath, Vec<u8>>,
}

impl fmt::Debug for PlanFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlanFiles")
            .field("files", &self.digests)
            .field("bytes_held", &self.bytes.len())
            .finish()
    }
}

/// The manifest of a plan's files as it travels and is stored: path → blake3 digest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PlanFilesManifest(pub BTreeMap<AdmittedPath, Digest>);

/// Why a plan's files could not be collected, rebuilt or trusted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanFilesError {
    /// Reading or writing a file failed.
    #[error("{what} {}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The files are more than a plan may carry.
    #[error(
        "the plan's files hold {bytes} bytes in {count} files, more than the {max_bytes} bytes \
         in {max_count} files a plan may carry; the largest: {largest}. Declare the files the \
         commands read with the plan key \"inputs\" (globs such as [\"tasks/**\"]), or mark \
         build output as \"scratch\""
    )]
    TooLarge {
        /// Bytes found.
        bytes: u64,
        /// Files found.
        count: usize,
        /// The byte bound.
        max_bytes: u64,
        /// The file bound.
        max_count: usize,
        /// The largest files with their sizes.
        largest: String,
    },
    /// A file's name is not one kleene admits (`..`, a control character), or it is a symlink
    /// or a special file.
    #[error(
        "plan file {path}: {why}; leave it out with the plan key \"inputs\" (globs of the files \
         the commands read)"
    )]
    Refused {
        /// The file, relative to the plan's directory.
        path: String,
        /// Why.
        why: String,
    },
    /// A file's bytes do not match the digest the plan binds.
    #[error(
        "plan file {path}: its bytes have digest {found}, but the plan binds {expected}; the \
         copy was changed or damaged"
    )]
    Mismatch {
        /// The file.
        path: AdmittedPath,
        /// The digest the plan binds.
        expected: Digest,
        /// The digest of the bytes found.
        found: Digest,
    },
    /// The bytes of a file the manifest names were not given.
    #[error("plan file {path}: its bytes (digest {digest}) were not given")]
    Missing {
        /// The file.
        path: AdmittedPath,
        /// Its digest.
        digest: Digest,
    },
}

fn io_error<'p>(
    what: &'static str,
    path: &'p Path,
) -> impl FnOnce(io::Error) -> PlanFilesError + 'p {
    move |source| PlanFilesError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

fn digest_of(bytes: &[u8]) -> Digest {
    Digest::from(blake3::hash(bytes))
}

impl PlanFiles {
    /// Collects the files under `dir` that `inputs` match (every file when `inputs` is
    /// empty), leaving out `skip` (directories kleene writes: the state directory, the
    /// workspace), any `.git` directory and whatever `scratch` matches.
    ///
    /// # Errors
    ///
    /// [`PlanFilesError`] when a file cannot be read, is a symlink or special file, has a name
    /// kleene does not admit, or the files exceed the bounds (naming the largest).
    pub fn collect(
        dir: &Path,
        inputs: &[PathGlob],
        skip: &[PathBuf],
        scratch: &[PathGlob],
    ) -> Result<Self, PlanFilesError> {
        let skip: Vec<PathBuf> = skip
            .iter()
            .filter_map(|p| std::path::absolute(p).ok())
            .collect();
        let scratch_rule = Scratch::new(scratch.iter());
        let mut found: Vec<(String, PathBuf, u64)> = Vec::new();
        let mut todo = vec![(
            String::new(),
            std::path::absolute(dir).map_err(io_error("read", dir))?,
        )];
        let mut total: u64 = 0;
        while let Some((prefix, at)) = todo.pop() {
            let entries = std::fs::read_dir(&at).map_err(io_error("list", &at))?;
            for entry in entries {
                let entry = entry.map_err(io_error("list", &at))?;
                let path = entry.path();
                let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                    return Err(PlanFilesError::Refused {
                        path: format!("{prefix}{}", entry.file_name().to_string_lossy()),
                        why: "its name is not UTF-8".to_owned(),
                    });
                };
                let rel = format!("{prefix}{name}");
                let kind = entry.file_type().map_err(io_error("inspect", &path))?;
                if kind.is_dir() {
                    if name == ".git"
                        || skip.iter().any(|s| skipped(s, &path))
                        || is_state_dir(&path)
                    {
                        continue;
                    }
                    if scratch_rule.covers_dir(&rel) {
                        continue;
                    }
                    todo.push((format!("{rel}/"), path));
                    continue;
                }
                if !inputs.is_empty() && !inputs.iter().any(|g| g.matches(&rel)) {
                    continue;
                }
                if scratch_rule.is_scratch(&rel) {
                    continue;
                }
                if kind.is_symlink() {
                    return Err(PlanFilesError::Refused {
                        path: rel,
                        why: "it is a symlink (kleene copies files, never links)".to_owned(),
                    });
                }
                if !kind.is_file() {
                    return Err(PlanFilesError::Refused {
                        path: rel,
                        why: "it is not a regular file".to_owned(),
                    });
                }
                let size = entry.metadata().map_err(io_error("inspect", &path))?.len();
                total = total.saturating_add(size);
                found.push((rel, path, size));
            }
        }
        if total > MAX_PLAN_FILE_BYTES || found.len() > MAX_PLAN_FILES {
            found.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
            let largest = found
                .iter()
                .take(5)
                .map(|(rel, _, size)| format!("{rel} ({size} bytes)"))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(PlanFilesError::TooLarge {
                bytes: total,
                count: found.len(),
                max_bytes: MAX_PLAN_FILE_BYTES,
                max_count: MAX_PLAN_FILES,
                largest,
            });
        }
        let mut files = Self::default();
        for (rel, path, _) in found {
            let admitted = AdmittedPath::admit(&rel).map_err(|e| PlanFilesError::Refused {
                path: rel.clone(),
                why: e.to_string(),
            })?;
            // Read with a bound: a file that grew since it was listed must not blow the bound.
            let bytes = read_bounded(&path, MAX_PLAN_FILE_BYTES)?;
            files.digests.insert(admitted.clone(), digest_of(&bytes));
            files.bytes.insert(admitted, bytes);
        }
        Ok(files)
    }

    /// The files a manifest names, with no bytes yet: add them with [`Self::add_bytes`].
    pub fn from_manifest(manifest: PlanFilesManifest) -> Self {
        Self {
            digests: manifest.0,
            bytes: BTreeMap::new(),
        }
    }

    /// The manifest: every file's path and digest.
    pub fn manifest(&self) -> PlanFilesManifest {
        PlanFilesManifest(self.digests.clone())
    }

    /// How many files.
    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// Every file's path and digest, by path.
    pub fn iter(&self) -> impl Iterator<Item = (&AdmittedPath, &Digest)> {
        self.digests.iter()
    }

    /// The bytes of `path`, when they are held here.
    pub fn bytes(&self, path: &AdmittedPath) -> Option<&[u8]> {
        self.bytes.get(path).map(Vec::as_slice)
    }

    /// Adds the bytes fetched for `path`, refusing bytes that do not match its digest.
    ///
    /// # Errors
    ///
    /// [`PlanFilesError::Mismatch`] naming the file; [`PlanFilesError::Refused`] for a path
    /// the manifest does not name.
    pub fn add_bytes(&mut self, path: &AdmittedPath, bytes: Vec<u8>) -> Result<(), PlanFilesError> {
        let Some(expected) = self.digests.get(path).copied() else {
            return Err(PlanFilesError::Refused {
                path: path.to_string(),
                why: "the plan does not name it".to_owned(),
            });
        };
        let found = digest_of(&bytes);
        if found != expected {
            return Err(PlanFilesError::Mismatch {
                path: path.clone(),
                expected,
                found,
            });
        }
        self.bytes.insert(path.clone(), bytes);
        Ok(())
    }

    /// These files, less any whose path `other` does not name (to compare the files a
    /// run bound with the same paths as they are now, ignoring files added since).
    pub fn only_paths_of(&self, other: &PlanFiles) -> PlanFiles {
        let keep = |path: &AdmittedPath| other.digests.contains_key(path);
        Self {
            digests: self
                .digests
                .iter()
                .filter(|(p, _)| keep(p))
                .map(|(p, d)| (p.clone(), *d))
                .collect(),
            bytes: self
                .bytes
                .iter()
                .filter(|(p, _)| keep(p))
                .map(|(p, b)| (p.clone(), b.clone()))
                .collect(),
        }
    }

    /// The manifest as the plan extension value the plan digest binds.
    pub(crate) fn extension_value(&self) -> ExtensionValue {
        let map: serde_json::Map<String, serde_json::Value> = self
            .digests
            .iter()
            .map(|(p, d)| {
                (
                    p.as_str().to_owned(),
                    serde_json::Value::String(d.to_string()),
                )
            })
            .collect();
        ExtensionValue::new(&serde_json::Value::Object(map))
    }

    /// Writes every file into `dir` (made if missing), each read-only; directories stay
    /// writable so the copy can be removed like any other.
    ///
    /// # Errors
    ///
    /// [`PlanFilesError::Missing`] when a file's bytes are not held here, and
    /// [`PlanFilesError::Io`] when writing fails.
    pub fn write_copy(&self, dir: &Path) -> Result<(), PlanFilesError> {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let durable_dir = |dir: &Path| {
            crate::fs::create_dir_durably(dir).map_err(|(path, source)| PlanFilesError::Io {
                what: "create",
                path,
                source,
            })
        };
        durable_dir(dir)?;
        // Each copy is synced, and so is each directory that gained one, so that a run whose
        // record names these files finds them after a power loss, not empty or missing.
        let mut filled: BTreeSet<PathBuf> = BTreeSet::new();
        let mut written = Vec::new();
        for (path, digest) in &self.digests {
            let bytes = self
                .bytes
                .get(path)
                .ok_or_else(|| PlanFilesError::Missing {
                    path: path.clone(),
                    digest: *digest,
                })?;
            let target = dir.join(path.as_str());
            let parent = target.parent().unwrap_or(dir);
            durable_dir(parent)?;
            // A copy left by an interrupted write is replaced, never written through.
            let _ = std::fs::remove_file(&target);
            let mut file = std::fs::File::create(&target).map_err(io_error("write", &target))?;
            file.write_all(bytes).map_err(io_error("write", &target))?;
            file.set_permissions(std::fs::Permissions::from_mode(0o444))
                .map_err(io_error("protect", &target))?;
            filled.insert(parent.to_owned());
            written.push(target);
        }
        sync_files(&written)?;
        for parent in &filled {
            crate::fs::sync_dir(parent).map_err(|(path, source)| PlanFilesError::Io {
                what: "sync",
                path,
                source,
            })?;
        }
        Ok(())
    }

    /// Checks that `dir` holds every file with the bytes the manifest binds.
    ///
    /// # Errors
    ///
    /// [`PlanFilesError::Mismatch`] or [`PlanFilesError::Io`] naming the first file that
    /// differs or cannot be read.
    pub fn verify_copy(&self, dir: &Path) -> Result<(), PlanFilesError> {
        for (path, expected) in &self.digests {
            let file = dir.join(path.as_str());
            let meta = std::fs::symlink_metadata(&file).map_err(io_error("read", &file))?;
            if !meta.is_file() {
                return Err(PlanFilesError::Refused {
                    path: path.to_string(),
                    why: "the copy is not a regular file".to_owned(),
                });
            }
            let bytes = read_bounded(&file, MAX_PLAN_FILE_BYTES)?;
            let found = digest_of(&bytes);
            if found != *expected {
                return Err(PlanFilesError::Mismatch {
                    path: path.clone(),
                    expected: *expected,
                    found,
                });
            }
        }
        Ok(())
    }
}

/// Whether `dir` holds a run's state (its `run.json` beside its journal): what one run
/// keeps is never another's input, wherever its state directory was put.
fn is_state_dir(dir: &Path) -> bool {
    dir.join("run.json").is_file() && dir.join("journal").is_dir()
}

/// Whether `dir` is the directory `skip` or one set aside beside it (`NAME.old-N`, as
/// `kleene run --restart` leaves an earlier run).
fn skipped(skip: &Path, dir: &Path) -> bool {
    if skip == dir {
        return true;
    }
    match (
        skip.file_name(),
        dir.file_name(),
        skip.parent(),
        dir.parent(),
    ) {
        (Some(s), Some(d), Some(sp), Some(dp)) if sp == dp => d
            .to_str()
            .zip(s.to_str())
            .and_then(|(d, s)| d.strip_prefix(s))
            .is_some_and(|rest| rest.starts_with(".old-")),
        _ => false,
    }
}

/// Above this many files, [`sync_files`] syncs them from several threads.
const SYNC_ALONE_AT_MOST: usize = 16;

/// Syncs each of `files`, once all are written. A sync waits on the device while the CPU
/// idles, and a journaling file system commits syncs that arrive together at once, so eight
/// threads take about half as long as one (500 files on a virtio disk: about 80 ms against
/// 150). No descriptor is kept open between the write and the sync.
fn sync_files(files: &[PathBuf]) -> Result<(), PlanFilesError> {
    let sync = |chunk: &[PathBuf]| {
        chunk.iter().try_for_each(|file| {
            std::fs::File::open(file)
                .and_then(|opened| opened.sync_all())
                .map_err(io_error("sync", file))
        })
    };
    if files.len() <= SYNC_ALONE_AT_MOST {
        return sync(files);
    }
    let per_thread = files.len().div_ceil(8);
    std::thread::scope(|scope| {
        let threads: Vec<_> = files
            .chunks(per_thread)
            .map(|chunk| (chunk, scope.spawn(move || sync(chunk))))
            .collect();
        threads.into_iter().try_for_each(|(chunk, thread)| {
            thread.join().unwrap_or_else(|_| {
                Err(PlanFilesError::Io {
                    what: "sync",
                    path: chunk.first().cloned().unwrap_or_default(),
                    source: io::Error::other("the thread syncing it panicked"),
                })
            })
        })
    })
}

/// The bytes of `path`, at most `max` (a longer file is refused as too large).
fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, PlanFilesError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(io_error("read", path))?;
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io_error("read", path))?;
    if bytes.len() as u64 > max {
        return Err(PlanFilesError::TooLarge {
            bytes: bytes.len() as u64,
            count: 1,
            max_bytes: max,
            max_count: MAX_PLAN_FILES,
            largest: path.display().to_string(),
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, body) in files {
            let at = dir.path().join(path);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(at, body).unwrap();
        }
        dir
    }

    fn paths(files: &PlanFiles) -> Vec<&str> {
        files.iter().map(|(p, _)| p.as_str()).collect()
    }

    #[test]
    fn inputs_skip_and_scratch_choose_the_files() {
        let dir = tree(&[
            ("plan.json", "{}"),
            ("tasks/a.sh", "a"),
            (".git/HEAD", "ref"),
            ("state/journal", "j"),
            ("state.old-1/journal", "j"),
            ("copied/run.json", "{}"),
            ("copied/journal/1.journal", "j"),
            ("target/debug/big", "x"),
        ]);
        let all = PlanFiles::collect(
            dir.path(),
            &[],
            &[dir.path().join("state")],
            &[PathGlob::parse("target/**").unwrap()],
        )
        .unwrap();
        assert_eq!(paths(&all), ["plan.json", "tasks/a.sh"]);
        let some = PlanFiles::collect(
            dir.path(),
            &[PathGlob::parse("tasks/**").unwrap()],
            &[],
            &[],
        )
        .unwrap();
        assert_eq!(paths(&some), ["tasks/a.sh"]);
    }

    #[test]
    fn a_symlink_is_refused_by_name() {
        let dir = tree(&[("a.sh", "a")]);
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("evil.sh")).unwrap();
        let err = PlanFiles::collect(dir.path(), &[], &[], &[]).unwrap_err();
        assert!(
            err.to_string()
                .contains("plan file evil.sh: it is a symlink"),
            "{err}"
        );
    }

    #[test]
    fn too_many_bytes_are_refused_naming_the_largest() {
        let dir = tree(&[("small.sh", "s")]);
        let big = vec![b'x'; usize::try_from(MAX_PLAN_FILE_BYTES).unwrap()];
        std::fs::write(dir.path().join("huge.bin"), &big).unwrap();
        let err = PlanFiles::collect(dir.path(), &[], &[], &[]).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, PlanFilesError::TooLarge { .. }), "{text}");
        assert!(
            text.contains(&format!(
                "the largest: huge.bin ({MAX_PLAN_FILE_BYTES} bytes), small.sh (1 bytes)"
            )),
            "{text}"
        );
        assert!(text.contains("\"inputs\""), "{text}");
    }

    #[test]
    fn fetched_bytes_and_copies_are_checked_against_the_manifest() {
        let dir = tree(&[("tasks/a.sh", "echo a")]);
        let files = PlanFiles::collect(dir.path(), &[], &[], &[]).unwrap();
        let path = AdmittedPath::admit("tasks/a.sh").unwrap();
        let mut remote = PlanFiles::from_manifest(files.manifest());
        let err = remote.add_bytes(&path, b"echo evil".to_vec()).unwrap_err();
        assert!(
            err.to_string()
                .contains("plan file tasks/a.sh: its bytes have digest"),
            "{err}"
        );
        remote.add_bytes(&path, b"echo a".to_vec()).unwrap();
        let copy = tempfile::tempdir().unwrap();
        remote.write_copy(copy.path()).unwrap();
        files.verify_copy(copy.path()).unwrap();
        let target = copy.path().join("tasks/a.sh");
        std::fs::remove_file(&target).unwrap();
        std::fs::write(&target, "echo b").unwrap();
        let err = files.verify_copy(copy.path()).unwrap_err();
        assert!(matches!(err, PlanFilesError::Mismatch { .. }), "{err}");
    }

    #[test]
    fn a_copy_of_more_files_than_one_thread_syncs_is_whole() {
        let names: Vec<String> = (0..3 * SYNC_ALONE_AT_MOST)
            .map(|i| format!("d{}/f{i}.sh", i % 3))
            .collect();
        let files: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), n.as_str())).collect();
        let dir = tree(&files);
        let files = PlanFiles::collect(dir.path(), &[], &[], &[]).unwrap();
        let copy = tempfile::tempdir().unwrap();
        crate::fs::take_synced_dirs();
        files.write_copy(copy.path()).unwrap();
        files.verify_copy(copy.path()).unwrap();
        let synced = crate::fs::take_synced_dirs();
        for d in ["d0", "d1", "d2"] {
            assert!(synced.contains(&copy.path().join(d)), "{d}: {synced:?}");
        }
    }

    #[test]
    fn every_file_is_synced_whichever_thread_has_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut files: Vec<PathBuf> = (0..5 * SYNC_ALONE_AT_MOST)
            .map(|i| dir.path().join(format!("f{i}")))
            .collect();
        for file in &files {
            std::fs::write(file, "x").unwrap();
        }
        sync_files(&files).unwrap();
        // A file the last thread has, and one the first has: each is reached and named.
        for missing in [files.len() - 1, 0] {
            let gone = files[missing].clone();
            std::fs::remove_file(&gone).unwrap();
            let err = sync_files(&files).unwrap_err();
            assert!(
                matches!(&err, PlanFilesError::Io { path, .. } if *path == gone),
                "{err:?}"
            );
            files.remove(missing);
        }
    }

    #[test]
    fn a_copy_is_named_durably_in_every_directory_it_fills() {
        let dir = tree(&[
            ("plan.json", "{}"),
            ("tasks/deep/a.sh", "a"),
            ("tasks/b.sh", "b"),
        ]);
        let files = PlanFiles::collect(dir.path(), &[], &[], &[]).unwrap();
        let parent = tempfile::tempdir().unwrap();
        let copy = parent.path().join("copy");
        crate::fs::take_synced_dirs();
        files.write_copy(&copy).unwrap();
        files.verify_copy(&copy).unwrap();
        let synced: BTreeSet<PathBuf> = crate::fs::take_synced_dirs().into_iter().collect();
        for dir in [
            parent.path().to_owned(),
            copy.clone(),
            copy.join("tasks"),
            copy.join("tasks/deep"),
        ] {
            assert!(
                synced.contains(&dir),
                "{} not synced: {synced:?}",
                dir.display()
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]

        /// For all small trees: a copy written from the collected files collects to the same
        /// manifest, and flipping any one byte of any file changes the binding.
        #[test]
        fn a_copy_binds_the_same_and_every_byte_counts(
            files in proptest::collection::btree_map(
                "[a-c]{1,3}(/[a-c]{1,3})?\\.sh",
                proptest::collection::vec(proptest::prelude::any::<u8>(), 1..64),
                1..6,
            ),
            pick in proptest::prelude::any::<proptest::sample::Index>(),
            bit in 0u8..8,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut written = Vec::new();
            for (path, bytes) in &files {
                let at = dir.path().join(path);
                // A name that is both a file and a directory's name: keep the first.
                if std::fs::create_dir_all(at.parent().unwrap()).is_err() || at.is_dir() {
                    continue;
                }
                if std::fs::write(&at, bytes).is_ok() {
                    written.push(path.clone());
                }
            }
            proptest::prop_assume!(!written.is_empty());
            let collected = PlanFiles::collect(dir.path(), &[], &[], &[]).unwrap();
            let copy = tempfile::tempdir().unwrap();
            collected.write_copy(copy.path()).unwrap();
            let again = PlanFiles::collect(copy.path(), &[], &[], &[]).unwrap();
            proptest::prop_assert_eq!(again.manifest(), collected.manifest());
            let victim = dir.path().join(&written[pick.index(written.len())]);
            let mut bytes = std::fs::read(&victim).unwrap();
            let i = pick.index(bytes.len());
            bytes[i] ^= 1 << bit;
            std::fs::write(&victim, &bytes).unwrap();
            let flipped = PlanFiles::collect(dir.path(), &[], &[], &[]).unwrap();
            proptest::prop_assert_ne!(flipped.extension_value(), collected.extension_value());
        }
    }

    #[test]
    fn the_binding_follows_every_byte() {
        let a = PlanFiles::collect(tree(&[("x.sh", "1")]).path(), &[], &[], &[]).unwrap();
        let b = PlanFiles::collect(tree(&[("x.sh", "2")]).path(), &[], &[], &[]).unwrap();
        assert_ne!(a.extension_value(), b.extension_value());
        let c = PlanFiles::collect(tree(&[("x.sh", "1")]).path(), &[], &[], &[]).unwrap();
        assert_eq!(a.extension_value(), c.extension_value());
    }
}
