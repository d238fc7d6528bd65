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

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ffi::{CStr, CString};
use std::fmt;
use std::io::{self, Read as _};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

use serde::{Deserialize, Serialize};

use super::scratch::Scratch;
use super::text::counted;
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
        "the plan's files hold {} in {}, more than the {max_bytes} bytes in {max_count} files \
         a plan may carry; the largest: {largest}. Declare the files the commands read with \
         the plan key \"inputs\" (globs such as [\"tasks/**\"]), or mark build output as \
         \"scratch\"",
        counted(*bytes, "byte", "bytes"),
        counted(*count as u64, "file", "files")
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
    /// What the project tracks decides the rest. In a git work tree only the files git
    /// tracks or would track are taken (`git ls-files --cached --others --exclude-standard`:
    /// `.gitignore` is honoured, so a build directory or a virtualenv it names is never
    /// opened). Everywhere, a directory that marks itself as a cache (`CACHEDIR.TAG`, as
    /// cargo's `target/` does) or holds a Python virtualenv (`pyvenv.cfg`) is left out, and
    /// so is a file this process is writing as its standard output or error (`kleene run
    /// plan.json > run.out` never binds `run.out`).
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
        let root = std::path::absolute(dir).map_err(io_error("read", dir))?;
        let root_fd = rustix::fs::open(
            &root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| PlanFilesError::Io {
            what: "list",
            path: root.clone(),
            source: e.into(),
        })?;
        let mut collector = Collector {
            inputs,
            skip: skip
                .iter()
                .filter_map(|p| std::path::absolute(p).ok())
                .collect(),
            scratch: Scratch::new(scratch.iter()),
            tracked: Tracked::by_git(&root),
            own_outputs: own_outputs(),
            found: Vec::new(),
            listed_bytes: 0,
            read_bytes: 0,
            over: false,
        };
        collector.dir(&root_fd, &root, "", true, 0)?;
        collector.finish()
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

    /// How many bytes the files held here hold together, and the `n` largest of them,
    /// largest first (by path where sizes tie): what a plan binds, in a line a person reads.
    pub fn largest(&self, n: usize) -> (u64, Vec<(&AdmittedPath, u64)>) {
        let mut sizes: Vec<(&AdmittedPath, u64)> = self
            .bytes
            .iter()
            .map(|(path, bytes)| (path, bytes.len() as u64))
            .collect();
        let total = sizes.iter().map(|(_, size)| size).sum();
        sizes.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        sizes.truncate(n);
        (total, sizes)
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

    /// These files with the bytes of every one not held here read from the copy in `dir`,
    /// each checked against its digest (as [`verify_copy`](Self::verify_copy) checks them).
    ///
    /// # Errors
    ///
    /// [`PlanFilesError::Mismatch`] or [`PlanFilesError::Io`] naming the first file that
    /// differs or cannot be read.
    pub fn with_bytes_from(mut self, dir: &Path) -> Result<Self, PlanFilesError> {
        let missing: Vec<AdmittedPath> = self
            .digests
            .keys()
            .filter(|p| !self.bytes.contains_key(*p))
            .cloned()
            .collect();
        for path in missing {
            let bytes = read_bounded(&dir.join(path.as_str()), MAX_PLAN_FILE_BYTES)?;
            self.add_bytes(&path, bytes)?;
        }
        Ok(self)
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

/// A file collected: its path relative to the plan's directory, the size it had (the larger
/// of what its descriptor said and what was read), and its bytes unless the bound was
/// passed before it was read.
struct Collected {
    rel: String,
    size: u64,
    bytes: Option<Vec<u8>>,
}

/// The walk that collects a plan's files: every directory opened relative to its parent and
/// every file opened once, without following a link and without blocking, its type checked
/// on the open descriptor and its bytes read from it. A file swapped for a link, a FIFO or
/// a device between the listing and the open is refused, never followed or waited on; a
/// file that grows is bounded by what is read, not by what was listed.
struct Collector<'a> {
    inputs: &'a [PathGlob],
    skip: Vec<PathBuf>,
    scratch: Scratch,
    /// In a git work tree, what git tracks or would track: nothing else is taken.
    tracked: Option<Tracked>,
    /// This process's standard output and error, by device and inode, where they are files.
    own_outputs: Vec<(u64, u64)>,
    found: Vec<Collected>,
    /// What the descriptors said the files held, for the refusal's figures.
    listed_bytes: u64,
    /// What was read: the bound is kept against this, so memory stays bounded.
    read_bytes: u64,
    /// Whether a bound was passed: nothing more is read, only listed for the refusal.
    over: bool,
}

/// How deep the walk descends: a deeper tree is refused by name instead of holding a
/// descriptor per level without end.
const MAX_DEPTH: usize = 128;

impl Collector<'_> {
    /// Collects the entries of the directory `fd`, at `at` (for messages and the skip
    /// rules) and `prefix` relative to the plan's directory. `utf8` says whether every
    /// name on the way down was UTF-8: a file below a name that is not can only be refused.
    fn dir(
        &mut self,
        fd: &OwnedFd,
        at: &Path,
        prefix: &str,
        utf8: bool,
        depth: usize,
    ) -> Result<(), PlanFilesError> {
        let listing = |e: rustix::io::Errno| PlanFilesError::Io {
            what: "list",
            path: at.to_owned(),
            source: e.into(),
        };
        let mut names: Vec<CString> = Vec::new();
        for entry in Dir::read_from(fd).map_err(listing)? {
            let entry = entry.map_err(listing)?;
            let name = entry.file_name();
            if name.to_bytes() != b"." && name.to_bytes() != b".." {
                names.push(name.to_owned());
            }
        }
        // Sorted, so which file a refusal names does not depend on the directory's order.
        names.sort_unstable();
        for name in names {
            let raw = name.to_bytes();
            let path = at.join(std::ffi::OsStr::from_bytes(raw));
            let text = String::from_utf8_lossy(raw);
            let name_is_utf8 = utf8 && std::str::from_utf8(raw).is_ok();
            let rel = format!("{prefix}{text}");
            let st = match rustix::fs::statat(fd, &name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                // Removed since it was listed: it is not there.
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => {
                    return Err(PlanFilesError::Io {
                        what: "inspect",
                        path,
                        source: e.into(),
                    });
                }
            };
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                if raw == b".git"
                    || self.skip.iter().any(|s| skipped(s, &path))
                    || is_state_dir(&path)
                    || self.scratch.covers_dir(&rel)
                    || self
                        .tracked
                        .as_ref()
                        .is_some_and(|t| !t.dirs.contains(&rel))
                    || is_cache_or_virtualenv(fd, &name)
                {
                    continue;
                }
                if depth >= MAX_DEPTH {
                    return Err(refused(
                        rel,
                        format!("it lies more than {MAX_DEPTH} directories deep"),
                    ));
                }
                let child = match rustix::fs::openat(
                    fd,
                    &name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                ) {
                    Ok(child) => child,
                    Err(rustix::io::Errno::NOENT) => continue,
                    Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
                        return Err(refused(rel, CHANGED.to_owned()));
                    }
                    Err(e) => {
                        return Err(PlanFilesError::Io {
                            what: "list",
                            path,
                            source: e.into(),
                        });
                    }
                };
                self.dir(&child, &path, &format!("{rel}/"), name_is_utf8, depth + 1)?;
                continue;
            }
            // A file the plan leaves out is never opened, whatever it is or is named.
            if !self.inputs.is_empty() && !self.inputs.iter().any(|g| g.matches(&rel)) {
                continue;
            }
            if self
                .tracked
                .as_ref()
                .is_some_and(|t| !t.files.contains(&rel))
                || self.own_outputs.contains(&(st.st_dev, st.st_ino))
            {
                continue;
            }
            if self.scratch.is_scratch(&rel) {
                continue;
            }
            if !name_is_utf8 {
                return Err(refused(rel, "its name is not UTF-8".to_owned()));
            }
            match FileType::from_raw_mode(st.st_mode) {
                FileType::RegularFile => {}
                FileType::Symlink => return Err(refused(rel, SYMLINK.to_owned())),
                _ => return Err(refused(rel, SPECIAL.to_owned())),
            }
            #[cfg(test)]
            tests::AFTER_LOOK.with(|hook| {
                if let Some(hook) = hook.borrow_mut().as_mut() {
                    hook(&path);
                }
            });
            self.file(fd, &name, &path, rel)?;
        }
        Ok(())
    }

    /// Opens the regular file `name` in `dir` once and reads it from that descriptor,
    /// within what the bound leaves.
    fn file(
        &mut self,
        dir: &OwnedFd,
        name: &CStr,
        path: &Path,
        rel: String,
    ) -> Result<(), PlanFilesError> {
        let io_err = |what: &'static str, e: io::Error| PlanFilesError::Io {
            what,
            path: path.to_owned(),
            source: e,
        };
        let opened = match rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(rustix::io::Errno::LOOP) => return Err(refused(rel, CHANGED_TO_LINK.to_owned())),
            Err(e) => return Err(io_err("read", e.into())),
        };
        let st = rustix::fs::fstat(&opened).map_err(|e| io_err("inspect", e.into()))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(refused(rel, CHANGED_TO_SPECIAL.to_owned()));
        }
        let size = u64::try_from(st.st_size).unwrap_or(0);
        self.listed_bytes = self.listed_bytes.saturating_add(size);
        if self.found.len() >= MAX_PLAN_FILES {
            self.over = true;
        }
        if self.over {
            self.found.push(Collected {
                rel,
                size,
                bytes: None,
            });
            return Ok(());
        }
        let room = MAX_PLAN_FILE_BYTES.saturating_sub(self.read_bytes);
        let mut bytes = Vec::new();
        // One byte past the room tells that the bound was passed, whatever the file held
        // when it was listed.
        std::io::Read::take(std::fs::File::from(opened), room.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| io_err("read", e))?;
        let read = bytes.len() as u64;
        self.read_bytes = self.read_bytes.saturating_add(read);
        let size = size.max(read);
        if read > room {
            self.over = true;
            self.found.push(Collected {
                rel,
                size,
                bytes: None,
            });
        } else {
            self.found.push(Collected {
                rel,
                size,
                bytes: Some(bytes),
            });
        }
        Ok(())
    }

    /// The files collected, or the refusal that names the largest when a bound was passed.
    fn finish(mut self) -> Result<PlanFiles, PlanFilesError> {
        if self.over || self.found.len() > MAX_PLAN_FILES {
            self.found
                .sort_by(|a, b| b.size.cmp(&a.size).then_with(|| a.rel.cmp(&b.rel)));
            let largest = self
                .found
                .iter()
                .take(5)
                .map(|c| format!("{} ({})", c.rel, counted(c.size, "byte", "bytes")))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(PlanFilesError::TooLarge {
                bytes: self.listed_bytes.max(self.read_bytes),
                count: self.found.len(),
                max_bytes: MAX_PLAN_FILE_BYTES,
                max_count: MAX_PLAN_FILES,
                largest,
            });
        }
        let mut files = PlanFiles::default();
        for Collected { rel, bytes, .. } in self.found {
            let admitted = AdmittedPath::admit(&rel).map_err(|e| PlanFilesError::Refused {
                path: rel.clone(),
                why: e.to_string(),
            })?;
            let bytes = bytes.unwrap_or_default();
            files.digests.insert(admitted.clone(), digest_of(&bytes));
            files.bytes.insert(admitted, bytes);
        }
        Ok(files)
    }
}

/// The files (and every directory on the way to one) git tracks or would track below a
/// plan's directory, relative to it.
struct Tracked {
    files: HashSet<String>,
    dirs: HashSet<String>,
}

impl Tracked {
    /// What git says of `dir`, or `None` where it says nothing (no git, not a work tree, a
    /// repository it refuses to read): the directory is then taken as it is.
    fn by_git(dir: &Path) -> Option<Self> {
        // No hook, filter or fsmonitor of the repository's own configuration runs for a
        // listing; `-z` keeps any name whole.
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args([
                "-c",
                "core.fsmonitor=false",
                "-c",
                "core.quotepath=off",
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
                "--",
                ".",
            ])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        let mut tracked = Self {
            files: HashSet::new(),
            dirs: HashSet::new(),
        };
        for name in out.stdout.split(|b| *b == 0).filter(|n| !n.is_empty()) {
            let name = String::from_utf8_lossy(name).into_owned();
            let mut at = 0;
            while let Some(slash) = name[at..].find('/') {
                tracked.dirs.insert(name[..at + slash].to_owned());
                at += slash + 1;
            }
            tracked.files.insert(name);
        }
        Some(tracked)
    }
}

/// Whether directory `name` in `dir` marks itself as a cache (`CACHEDIR.TAG`) or is a Python
/// virtualenv (`pyvenv.cfg`): build output and installed packages, never a plan's input.
fn is_cache_or_virtualenv(dir: &OwnedFd, name: &CStr) -> bool {
    let Ok(child) = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    ["CACHEDIR.TAG", "pyvenv.cfg"]
        .iter()
        .any(|marker| rustix::fs::statat(&child, *marker, AtFlags::SYMLINK_NOFOLLOW).is_ok())
}

/// This process's standard output and error, by device and inode, where they are regular
/// files: output redirected beside the plan is kleene's own writing, never its input.
fn own_outputs() -> Vec<(u64, u64)> {
    use std::os::fd::AsFd as _;
    [
        rustix::fs::fstat(std::io::stdout().as_fd()),
        rustix::fs::fstat(std::io::stderr().as_fd()),
    ]
    .into_iter()
    .filter_map(Result::ok)
    .filter(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile)
    .map(|st| (st.st_dev, st.st_ino))
    .collect()
}

const SYMLINK: &str = "it is a symlink (kleene copies files, never links)";
const SPECIAL: &str = "it is not a regular file (a FIFO, socket or device)";
const CHANGED: &str = "it was replaced by a link or a file while kleene read the directory";
const CHANGED_TO_LINK: &str = "it was replaced by a symlink while kleene read it";
const CHANGED_TO_SPECIAL: &str = "it was replaced by something other than a regular file \
     while kleene read it";

fn refused(path: String, why: String) -> PlanFilesError {
    PlanFilesError::Refused { path, why }
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

/// The bytes of the regular file at `path`, at most `max` (a longer file is refused as too
/// large), opened once without following a link or blocking on a FIFO.
fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, PlanFilesError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_flags())
        .open(path)
        .map_err(io_error("read", path))?;
    let kind = file
        .metadata()
        .map_err(io_error("inspect", path))?
        .file_type();
    if !kind.is_file() {
        return Err(PlanFilesError::Io {
            what: "read",
            path: path.to_owned(),
            source: io::Error::other("it is not a regular file"),
        });
    }
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

/// `O_NOFOLLOW | O_NONBLOCK`, as the `open` flags std passes through.
fn libc_flags() -> i32 {
    (OFlags::NOFOLLOW | OFlags::NONBLOCK).bits() as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a test runs on a file between its look and its open.
    type Swap = Box<dyn FnMut(&Path)>;

    thread_local! {
        /// Run on this thread between a file's look and its open: where a swap lands in
        /// the race the collection must survive.
        pub(super) static AFTER_LOOK: std::cell::RefCell<Option<Swap>> =
            std::cell::RefCell::new(None);
    }

    /// Collects `dir`'s `*.sh` files with `swap` run on each file between its look and its
    /// open.
    fn collect_swapping(
        dir: &Path,
        swap: impl FnMut(&Path) + 'static,
    ) -> Result<PlanFiles, PlanFilesError> {
        AFTER_LOOK.with(|hook| *hook.borrow_mut() = Some(Box::new(swap)));
        let outcome = PlanFiles::collect(dir, &[PathGlob::parse("*.sh").unwrap()], &[], &[]);
        AFTER_LOOK.with(|hook| *hook.borrow_mut() = None);
        outcome
    }

    /// The swaps the races make, landed exactly between the look and the open: a link to
    /// `/etc/passwd` is refused and never read, a FIFO is refused without waiting for a
    /// writer, a file gone is not there.
    #[test]
    fn a_swap_between_the_look_and_the_open_is_refused() {
        let dir = tree(&[("b.sh", "echo b")]);
        let err = collect_swapping(dir.path(), |path| {
            std::fs::remove_file(path).unwrap();
            std::os::unix::fs::symlink("/etc/passwd", path).unwrap();
        })
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("plan file b.sh: it was replaced by a symlink while kleene read it"),
            "{err}"
        );
        let dir = tree(&[("b.sh", "echo b")]);
        let err = collect_swapping(dir.path(), |path| {
            std::fs::remove_file(path).unwrap();
            rustix::fs::mkfifoat(rustix::fs::CWD, path, Mode::RUSR | Mode::WUSR).unwrap();
        })
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("plan file b.sh: it was replaced by something other than a regular file"),
            "{err}"
        );
        let dir = tree(&[("a.sh", "a"), ("b.sh", "echo b")]);
        let files = collect_swapping(dir.path(), |path| {
            if path.ends_with("b.sh") {
                std::fs::remove_file(path).unwrap();
            }
        })
        .unwrap();
        assert_eq!(paths(&files), ["a.sh"]);
    }

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

    /// Runs `collect` 100 times on `dir` while `swap` runs in a loop beside it, and hands
    /// each outcome to `check`; a collect that does not return within ten seconds fails the
    /// test instead of hanging it.
    fn race(
        dir: &Path,
        inputs: &[PathGlob],
        swap: impl Fn() + Sync,
        check: impl Fn(Result<PlanFiles, PlanFilesError>),
    ) {
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    swap();
                }
            });
            for _ in 0..100 {
                let (tx, rx) = std::sync::mpsc::channel();
                let (dir, inputs) = (dir.to_owned(), inputs.to_vec());
                std::thread::spawn(move || {
                    let _ = tx.send(PlanFiles::collect(&dir, &inputs, &[], &[]));
                });
                match rx.recv_timeout(std::time::Duration::from_secs(10)) {
                    Ok(outcome) => check(outcome),
                    Err(_) => {
                        stop.store(true, std::sync::atomic::Ordering::Relaxed);
                        panic!("collect did not return within ten seconds");
                    }
                }
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    }

    /// What a race on `b.sh` may end in: `b.sh` bound with its own bytes (`own`) or not
    /// there at all (caught between two renames), or refused by name for `why`.
    fn b_sh_bound_as_itself_or_refused(
        outcome: Result<PlanFiles, PlanFilesError>,
        own: Digest,
        why_contains: &str,
    ) {
        match outcome {
            Ok(files) => {
                let path = AdmittedPath::admit("b.sh").unwrap();
                let bound = files.digests.get(&path);
                assert!(bound.is_none_or(|d| *d == own), "{files:?}");
            }
            Err(PlanFilesError::Refused { path, why }) => {
                assert_eq!(path, "b.sh", "{why}");
                assert!(why.contains(why_contains), "{why}");
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// Races the collection of `b.sh` against a loop that swaps it for what `impostor`
    /// makes at a path beside it, and back: each outcome is `b.sh` with its own bytes, or
    /// absent, or refused for `why`.
    fn race_a_swap(impostor: impl Fn(&Path) + Sync, why: &str) {
        let dir = tree(&[("a.sh", "echo a"), ("b.sh", "echo b")]);
        let (file, swapped, real) = (
            dir.path().join("b.sh"),
            dir.path().join("impostor.tmp"),
            dir.path().join("real.tmp"),
        );
        let own = digest_of(b"echo b");
        race(
            dir.path(),
            &[PathGlob::parse("*.sh").unwrap()],
            || {
                impostor(&swapped);
                let _ = std::fs::rename(&file, &real);
                let _ = std::fs::rename(&swapped, &file);
                std::thread::yield_now();
                let _ = std::fs::rename(&real, &file);
            },
            |outcome| b_sh_bound_as_itself_or_refused(outcome, own, why),
        );
    }

    /// A bound file swapped for a symlink to `/etc/passwd` while the files are collected is
    /// refused or bound with its own bytes, never with the link's target.
    #[test]
    fn a_file_swapped_for_a_symlink_while_collected_is_never_followed() {
        race_a_swap(
            |at| {
                let _ = std::os::unix::fs::symlink("/etc/passwd", at);
            },
            "symlink",
        );
    }

    /// A bound file swapped for a FIFO while the files are collected is refused or bound with
    /// its own bytes; the collection never waits for a writer.
    #[test]
    fn a_file_swapped_for_a_fifo_while_collected_never_hangs() {
        race_a_swap(
            |at| {
                let _ = rustix::fs::mkfifoat(rustix::fs::CWD, at, Mode::RUSR | Mode::WUSR);
            },
            "regular file",
        );
    }

    /// Files that grow while they are collected never bind more than the bound: what is
    /// read is counted, not what was listed.
    #[test]
    fn files_that_grow_while_collected_never_pass_the_bound() {
        let half = usize::try_from(MAX_PLAN_FILE_BYTES / 2).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.bin"), vec![b'a'; half - 4096]).unwrap();
        std::fs::write(dir.path().join("b.bin"), vec![b'b'; half - 4096]).unwrap();
        let growing = dir.path().join("b.bin");
        race(
            dir.path(),
            &[],
            || {
                use std::io::Write as _;
                let mut file = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&growing)
                    .unwrap();
                for _ in 0..64 {
                    file.write_all(&[b'b'; 1024]).unwrap();
                }
                file.set_len(u64::try_from(half - 4096).unwrap()).unwrap();
            },
            |outcome| match outcome {
                Ok(files) => {
                    let held: usize = files.bytes.values().map(Vec::len).sum();
                    assert!(held as u64 <= MAX_PLAN_FILE_BYTES, "{held} bytes bound");
                }
                Err(PlanFilesError::TooLarge { bytes, .. }) => {
                    assert!(bytes > MAX_PLAN_FILE_BYTES, "{bytes}");
                }
                Err(e) => panic!("{e}"),
            },
        );
    }

    fn git(dir: &Path, args: &[&str]) {
        let status = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    }

    /// In a git work tree what git tracks or would track is taken, and nothing it ignores is
    /// opened: a 12 MiB ignored build directory and an ignored virtualenv refuse nothing.
    #[test]
    fn in_a_git_work_tree_what_git_ignores_is_never_taken() {
        let dir = tree(&[
            ("plan.json", "{}"),
            ("src/lib.rs", "pub fn f() {}"),
            (".gitignore", "/build/\n/venv/\n"),
            ("notes.txt", "untracked, not ignored"),
            ("venv/lib/site.py", "x"),
        ]);
        std::fs::create_dir(dir.path().join("build")).unwrap();
        std::fs::write(dir.path().join("build/big.bin"), vec![0u8; 12 << 20]).unwrap();
        if std::process::Command::new("git")
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("skipped: no git here");
            return;
        }
        git(dir.path(), &["init", "-q"]);
        git(
            dir.path(),
            &["add", "plan.json", "src/lib.rs", ".gitignore"],
        );
        let files = PlanFiles::collect(dir.path(), &[], &[], &[]).unwrap();
        assert_eq!(
            paths(&files),
            [".gitignore", "notes.txt", "plan.json", "src/lib.rs"]
        );
    }

    /// Outside git, a directory that marks itself as a cache or is a virtualenv is left out.
    #[test]
    fn a_cache_directory_and_a_virtualenv_are_never_taken() {
        let dir = tree(&[
            ("plan.json", "{}"),
            (
                "target/CACHEDIR.TAG",
                "Signature: 8a477f597d28d172789f06886806bc55",
            ),
            ("target/debug/app", "binary"),
            (".venv/pyvenv.cfg", "home = /usr/bin"),
            (".venv/lib/site.py", "x"),
        ]);
        let files = PlanFiles::collect(dir.path(), &[], &[], &[]).unwrap();
        assert_eq!(paths(&files), ["plan.json"]);
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let dir = tree(&[("a.sh", "a")]);
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            dir.path().join("pipe"),
            Mode::RUSR | Mode::WUSR,
        )
        .unwrap();
        let err = PlanFiles::collect(dir.path(), &[], &[], &[]).unwrap_err();
        assert!(
            err.to_string()
                .contains("plan file pipe: it is not a regular file"),
            "{err}"
        );
        // Left out by the plan's inputs, it is never looked at.
        let files =
            PlanFiles::collect(dir.path(), &[PathGlob::parse("*.sh").unwrap()], &[], &[]).unwrap();
        assert_eq!(paths(&files), ["a.sh"]);
    }

    #[test]
    fn a_name_that_is_not_utf8_is_refused_only_where_the_plan_takes_it() {
        let dir = tree(&[("tasks/a.sh", "a")]);
        let odd = std::ffi::OsStr::from_bytes(b"odd-\xff");
        std::fs::write(dir.path().join(odd), "x").unwrap();
        std::fs::create_dir(dir.path().join(odd).with_extension("d")).unwrap();
        std::fs::write(dir.path().join(odd).with_extension("d").join("x.sh"), "x").unwrap();
        let err = PlanFiles::collect(dir.path(), &[], &[], &[]).unwrap_err();
        assert!(err.to_string().contains("is not UTF-8"), "{err}");
        let files = PlanFiles::collect(
            dir.path(),
            &[PathGlob::parse("tasks/**").unwrap()],
            &[],
            &[],
        )
        .unwrap();
        assert_eq!(paths(&files), ["tasks/a.sh"]);
        // A file below a directory whose name is not UTF-8 is refused when the plan takes it.
        let err = PlanFiles::collect(dir.path(), &[PathGlob::parse("**/x.sh").unwrap()], &[], &[])
            .unwrap_err();
        assert!(err.to_string().contains("is not UTF-8"), "{err}");
    }

    #[test]
    fn a_copy_replaced_by_a_fifo_is_refused_without_waiting() {
        let dir = tree(&[("a.sh", "a")]);
        let files = PlanFiles::collect(dir.path(), &[], &[], &[]).unwrap();
        let copy = tempfile::tempdir().unwrap();
        files.write_copy(copy.path()).unwrap();
        std::fs::remove_file(copy.path().join("a.sh")).unwrap();
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            copy.path().join("a.sh"),
            Mode::RUSR | Mode::WUSR,
        )
        .unwrap();
        assert!(files.verify_copy(copy.path()).is_err());
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
                "the largest: huge.bin ({MAX_PLAN_FILE_BYTES} bytes), small.sh (1 byte)"
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
