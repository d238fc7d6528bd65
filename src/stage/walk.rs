//! The walk of a stage after its call: every directory opened relative to its parent with
//! `O_NOFOLLOW`, every entry classified as an unchanged input, a written file or a refusal.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::fs;
use std::io::{self, Read, Seek};
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use foldhash::{HashMap, HashSet, HashSetExt};
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, Stat};

use super::changes::StageRefusal;
use super::{FileIdentity, ScratchRule, Stage, StageError, Staged, identity};
use crate::id::digest::Digest;
use crate::plan::path::AdmittedPath;

pub(super) struct Walk<'s, S> {
    stage: &'s Stage,
    scratch: &'s S,
    /// The inputs by name: an unchanged input is recognised by one hash lookup, without
    /// admitting its path again or searching the ordered map.
    by_name: HashMap<&'s str, (&'s AdmittedPath, &'s Staged)>,
    pub(super) seen: HashSet<&'s AdmittedPath>,
    /// In the walk's order; each path once (a name is visited once). Kept as a list and
    /// ordered once at the end ([`written_by_path`]): inserting a hundred thousand paths
    /// into an ordered map one by one was a tenth of what the walk cost.
    pub(super) written: Vec<(AdmittedPath, Vec<u8>)>,
    pub(super) refused: Vec<StageRefusal>,
    pub(super) leftovers: Vec<Vec<u8>>,
    /// How many enclosing directories are leftovers already (their entries are not listed).
    inside_leftover: usize,
    /// The bytes the call may still write.
    room: u64,
    max_written_bytes: u64,
    /// Inputs whose identity moved while their bytes stayed: recorded anew for the next walk.
    pub(super) refreshed: Vec<(AdmittedPath, FileIdentity)>,
}

/// Whether an error reading the stage is the call's doing (permissions it set, or something
/// it removed or replaced), not the host's: those are refused as what the call left, while
/// the rest (an I/O error, no memory, no file descriptors) stops the walk.
pub(super) fn left_by_the_call(errno: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    matches!(
        errno,
        Errno::ACCESS | Errno::PERM | Errno::NOENT | Errno::NOTDIR | Errno::LOOP
    )
}

/// How deep the walk descends: far below what an admitted path can reach, so a deeper tree
/// is refused by name instead of exhausting file descriptors.
const MAX_DEPTH: usize = 128;

impl<'s, S: ScratchRule> Walk<'s, S> {
    /// A walk of `stage` that recognises `inputs` (all of them, or those it may meet).
    pub(super) fn new(
        stage: &'s Stage,
        scratch: &'s S,
        max_written_bytes: u64,
        inputs: impl Iterator<Item = (&'s AdmittedPath, &'s Staged)>,
    ) -> Self {
        let by_name: HashMap<&'s str, (&'s AdmittedPath, &'s Staged)> =
            inputs.map(|(p, s)| (p.as_str(), (p, s))).collect();
        Self {
            stage,
            scratch,
            seen: HashSet::with_capacity(by_name.len()),
            by_name,
            written: Vec::new(),
            refused: Vec::new(),
            leftovers: Vec::new(),
            inside_leftover: 0,
            room: max_written_bytes,
            max_written_bytes,
            refreshed: Vec::new(),
        }
    }

    fn place(&self, rel: &str) -> PathBuf {
        self.stage.root.join(rel)
    }

    fn leftover(&mut self, raw: Vec<u8>) {
        if self.inside_leftover == 0 {
            self.leftovers.push(raw);
        }
    }

    fn unreadable(&mut self, path: String, errno: rustix::io::Errno) {
        self.refused.push(StageRefusal::Unreadable {
            path,
            reason: io::Error::from(errno).to_string(),
        });
    }

    /// Whether an input lies beneath the directory `dir`.
    fn holds_inputs(&self, dir: &str) -> bool {
        let Ok(dir) = AdmittedPath::admit(dir) else {
            return false;
        };
        self.stage
            .inputs
            .range::<AdmittedPath, _>(&dir..)
            .next()
            .is_some_and(|(p, _)| p.starts_with(&dir) && *p != dir)
    }

    pub(super) fn dir(
        &mut self,
        fd: &OwnedFd,
        prefix: &str,
        raw_prefix: &[u8],
    ) -> Result<(), StageError> {
        let dir = Dir::read_from(fd).map_err(|e| StageError::io(&self.place(prefix))(e.into()))?;
        let mut names: Vec<std::ffi::CString> = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|e| StageError::io(&self.place(prefix))(e.into()))?;
            let name = entry.file_name();
            if name.to_bytes() != b"." && name.to_bytes() != b".." {
                names.push(name.to_owned());
            }
        }
        // Sorted, so refusals are listed in a stable order.
        names.sort_unstable();
        self.entries(fd, prefix, raw_prefix, names)
    }

    /// Classifies the entries `names` of the directory `fd` (at `prefix`, whose raw bytes are
    /// `raw_prefix`); a name that is not there is not there.
    pub(super) fn entries(
        &mut self,
        fd: &OwnedFd,
        prefix: &str,
        raw_prefix: &[u8],
        names: Vec<std::ffi::CString>,
    ) -> Result<(), StageError> {
        let depth = prefix.split('/').filter(|c| !c.is_empty()).count();
        for c_name in names {
            let name = c_name.to_bytes();
            let shown = escape(name);
            let rel = if prefix.is_empty() {
                shown.into_owned()
            } else {
                let mut rel = String::with_capacity(prefix.len() + 1 + shown.len());
                rel.push_str(prefix);
                rel.push('/');
                rel.push_str(&shown);
                rel
            };
            let raw = || {
                if raw_prefix.is_empty() {
                    name.to_vec()
                } else {
                    [raw_prefix, b"/", name].concat()
                }
            };
            let st = match rustix::fs::statat(fd, &c_name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                // Removed between listing and looking: it is not there.
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) if left_by_the_call(e) => {
                    self.unreadable(rel, e);
                    continue;
                }
                Err(e) => return Err(StageError::io(&self.place(&rel))(e.into())),
            };
            match FileType::from_raw_mode(st.st_mode as _) {
                FileType::Directory => {
                    // A directory that holds no input goes whole when the stage is reused.
                    // An escaped name (not UTF-8, a control character) is never admitted, so
                    // it never holds an input, and it is never one.
                    let holds = self.holds_inputs(&rel);
                    let raw = raw();
                    if !holds {
                        self.leftover(raw.clone());
                        self.inside_leftover += 1;
                    }
                    let walked = self.subdir(fd, &c_name, &rel, &raw, depth);
                    if !holds {
                        self.inside_leftover -= 1;
                    }
                    walked?;
                }
                FileType::RegularFile => {
                    if !self.regular(fd, &c_name, rel, &raw, &st)? {
                        self.leftover(raw());
                    }
                }
                other => {
                    self.leftover(raw());
                    if self.scratch.is_scratch(&rel) {
                        continue;
                    }
                    if other == FileType::Symlink {
                        let target = rustix::fs::readlinkat(fd, &c_name, Vec::new())
                            .map(|t| escape(t.as_bytes()).into_owned())
                            .unwrap_or_else(|_| "(unreadable)".to_owned());
                        self.refused
                            .push(StageRefusal::Symlink { path: rel, target });
                    } else {
                        let kind = match other {
                            FileType::Fifo => "FIFO",
                            FileType::Socket => "socket",
                            FileType::CharacterDevice => "character device",
                            FileType::BlockDevice => "block device",
                            _ => "file of unknown type",
                        };
                        self.refused
                            .push(StageRefusal::SpecialFile { path: rel, kind });
                    }
                }
            }
        }
        Ok(())
    }

    fn subdir(
        &mut self,
        fd: &OwnedFd,
        c_name: &CStr,
        rel: &str,
        raw: &[u8],
        depth: usize,
    ) -> Result<(), StageError> {
        if self.scratch.covers_dir(rel) {
            return Ok(());
        }
        if depth + 1 > MAX_DEPTH {
            self.refused.push(StageRefusal::Unnameable {
                path: rel.to_owned(),
                reason: format!("nested deeper than {MAX_DEPTH} directories"),
            });
            return Ok(());
        }
        let child = match rustix::fs::openat(
            fd,
            c_name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(child) => child,
            Err(e) if left_by_the_call(e) => {
                self.unreadable(rel.to_owned(), e);
                return Ok(());
            }
            Err(e) => return Err(StageError::io(&self.place(rel))(e.into())),
        };
        self.dir(&child, rel, raw)
    }

    /// Classifies a regular file (`rel` its path as shown, `raw` its bytes); returns whether
    /// it is an input, unchanged.
    fn regular(
        &mut self,
        fd: &OwnedFd,
        c_name: &CStr,
        rel: String,
        raw: &impl Fn() -> Vec<u8>,
        st: &Stat,
    ) -> Result<bool, StageError> {
        if self.scratch.is_scratch(&rel) {
            return Ok(false);
        }
        // Most files of a stage are its unchanged inputs: recognised by name and identity.
        if let Some(&(path, staged)) = self.by_name.get(rel.as_str()) {
            if staged.identity == Some(identity(st)) {
                self.seen.insert(path);
                return Ok(true);
            }
            let rewritten = self.file(fd, c_name, path, staged.digest, st)?;
            let unchanged = self.seen.contains(path) && !rewritten;
            if unchanged {
                // Its bytes stayed: the next walk recognises it by what it is now.
                self.refreshed.push((path.clone(), identity(st)));
            }
            return Ok(unchanged);
        }
        // Admitted from its own bytes: `rel` is escaped where the name has a control
        // character, and the escape's backslash is not what is wrong with it.
        let raw = raw();
        let path = match std::str::from_utf8(&raw).map(AdmittedPath::admit) {
            Ok(Ok(path)) => path,
            Err(_) => {
                self.refused.push(StageRefusal::Unnameable {
                    path: rel,
                    reason: "the name is not UTF-8".to_owned(),
                });
                return Ok(false);
            }
            Ok(Err(e)) => {
                self.refused.push(StageRefusal::Unnameable {
                    path: rel,
                    reason: e.to_string(),
                });
                return Ok(false);
            }
        };
        // Not an input (an input's name is admitted, so it was found above): a new file.
        self.read_new(fd, c_name, path, st)?;
        Ok(false)
    }

    /// An input whose identity changed: unchanged when its bytes still hash to its digest.
    /// It is hashed as it is read, so an unchanged input costs no memory and no room.
    /// Returns whether the call wrote other bytes there.
    fn file(
        &mut self,
        dir: &OwnedFd,
        name: &CStr,
        path: &'s AdmittedPath,
        digest: Digest,
        st: &Stat,
    ) -> Result<bool, StageError> {
        let Some(mut file) = self.open(dir, name, path)? else {
            return Ok(false);
        };
        let mut hasher = blake3::Hasher::new();
        hasher
            .update_reader(&file)
            .and_then(|_| file.rewind())
            .map_err(StageError::io(&self.place(path.as_str())))?;
        if Digest::from(hasher.finalize()) == digest {
            self.seen.insert(path);
            return Ok(false);
        }
        let Some(content) = self.take(file, path, size_of(st))? else {
            return Ok(false);
        };
        self.seen.insert(path);
        self.written.push((path.clone(), content));
        Ok(true)
    }

    /// A file that is not an input: written by the call.
    fn read_new(
        &mut self,
        dir: &OwnedFd,
        name: &CStr,
        path: AdmittedPath,
        st: &Stat,
    ) -> Result<(), StageError> {
        if let Some(content) = self.read(dir, name, &path, size_of(st))? {
            self.written.push((path, content));
        }
        Ok(())
    }

    /// The regular file `name` in `dir`, opened; `None` (and a refusal) when it turned into
    /// a link between the look and the open.
    fn open(
        &mut self,
        dir: &OwnedFd,
        name: &CStr,
        path: &AdmittedPath,
    ) -> Result<Option<fs::File>, StageError> {
        match rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Some(fs::File::from(fd))),
            Err(rustix::io::Errno::LOOP) => {
                self.refused.push(StageRefusal::Symlink {
                    path: path.as_str().to_owned(),
                    target: "(changed while kleene read it)".to_owned(),
                });
                Ok(None)
            }
            Err(e) if left_by_the_call(e) => {
                self.unreadable(path.as_str().to_owned(), e);
                Ok(None)
            }
            Err(e) => Err(StageError::io(&self.place(path.as_str()))(e.into())),
        }
    }

    /// The bytes of the regular file `name` in `dir`, when they fit the room left; `None`
    /// (and a refusal) when they do not, or when it turned into a link.
    fn read(
        &mut self,
        dir: &OwnedFd,
        name: &CStr,
        path: &AdmittedPath,
        size: u64,
    ) -> Result<Option<Vec<u8>>, StageError> {
        match self.open(dir, name, path)? {
            Some(file) => self.take(file, path, size),
            None => Ok(None),
        }
    }

    /// The bytes of the opened file at `path`, when they fit the room left; `None` (and a
    /// refusal) when they do not. `size` is what the walk's look at the file said: what is
    /// read is bounded by the room whatever the file holds by then, so it needs no second
    /// look.
    fn take(
        &mut self,
        file: fs::File,
        path: &AdmittedPath,
        size: u64,
    ) -> Result<Option<Vec<u8>>, StageError> {
        let place = self.place(path.as_str());
        let too_large = |bytes| StageRefusal::TooLarge {
            path: path.as_str().to_owned(),
            bytes,
            limit: self.max_written_bytes,
        };
        if size > self.room {
            self.refused.push(too_large(size));
            return Ok(None);
        }
        // Room for what it held and one byte to tell its end, so a file that stayed is one read
        // and one of nothing.
        let mut content =
            Vec::with_capacity(usize::try_from(size).map_or(0, |s| s.saturating_add(1)));
        // Read no more than the room left (and one byte to tell), should the file grow.
        file.take(self.room.saturating_add(1))
            .read_to_end(&mut content)
            .map_err(StageError::io(&place))?;
        let read = content.len() as u64;
        if read > self.room {
            self.refused.push(too_large(read));
            return Ok(None);
        }
        self.room -= read;
        Ok(Some(content))
    }
}

/// What a walk found written, by path: sorted as a list (the walk's order is nearly the
/// paths' order, which the sort finds in runs) and built in one pass.
pub(super) fn written_by_path(
    written: Vec<(AdmittedPath, Vec<u8>)>,
) -> BTreeMap<AdmittedPath, Vec<u8>> {
    written.into_iter().collect()
}

/// A file's size as its look at it said (a negative one, which no file system gives, as 0).
fn size_of(st: &Stat) -> u64 {
    u64::try_from(st.st_size).unwrap_or(0)
}

/// The directory `rel` beneath `root`, every component opened with `O_NOFOLLOW`.
pub(super) fn open_dir_beneath(root: &OwnedFd, rel: &str) -> Result<OwnedFd, rustix::io::Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut components = rel.split('/');
    let first = components.next().unwrap_or(".");
    let mut fd = rustix::fs::openat(root, first, flags, Mode::empty())?;
    for component in components {
        fd = rustix::fs::openat(&fd, component, flags, Mode::empty())?;
    }
    Ok(fd)
}

/// A name as text: UTF-8 stays as it is except control characters and backslashes, which are
/// escaped, as are bytes that are not UTF-8 (`\xff`).
fn escape(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes)
        && !text.chars().any(|c| c.is_control() || c == '\\')
    {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() || c == '\\' {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;

    use super::super::tests::setup;
    use super::super::{ScratchRule, Stage};
    use super::*;

    #[test]
    fn symlinks_are_refused_and_never_followed() {
        let (tmp, store) = setup();
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("passwd"), "secret").unwrap();
        let stage = Stage::prepare(tmp.path().join("s"), &store, []).unwrap();
        std::os::unix::fs::symlink(&outside, stage.root().join("out")).unwrap();
        std::os::unix::fs::symlink(outside.join("passwd"), stage.root().join("file")).unwrap();
        let changes = stage.changes(&()).unwrap();
        assert!(changes.written().is_empty(), "{changes:?}");
        let paths: Vec<_> = changes
            .refused()
            .iter()
            .map(|r| match r {
                StageRefusal::Symlink { path, .. } => path.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(paths, ["file", "out"]);
    }

    #[test]
    fn unnameable_files_are_refused_by_name() {
        let (tmp, store) = setup();
        let stage = Stage::prepare(tmp.path().join("s"), &store, []).unwrap();
        let root = stage.root();
        fs::write(root.join("new\nline"), "x").unwrap();
        fs::write(root.join(".env"), "x").unwrap();
        fs::write(root.join(std::ffi::OsStr::from_bytes(b"bad\xffname")), "x").unwrap();
        let changes = stage.changes(&()).unwrap();
        let shown: Vec<String> = changes.refused().iter().map(ToString::to_string).collect();
        assert_eq!(changes.refused().len(), 3, "{shown:?}");
        assert!(shown.iter().any(|s| s.starts_with(".env ")), "{shown:?}");
        assert!(
            shown.iter().any(|s| s.starts_with("bad\\xffname ")),
            "{shown:?}"
        );
        // Named for what is wrong with it, not for the backslash its escape shows.
        assert!(
            shown
                .iter()
                .any(|s| s.starts_with("new\\nline ") && s.contains("control character")),
            "{shown:?}"
        );
        // Under a directory whose name is not UTF-8, every file is unnameable for that.
        let dir = root.join(std::ffi::OsStr::from_bytes(b"d\xfe"));
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("ok.txt"), "x").unwrap();
        let changes = stage.changes(&()).unwrap();
        let shown: Vec<String> = changes.refused().iter().map(ToString::to_string).collect();
        assert!(
            shown
                .iter()
                .any(|s| s.starts_with("d\\xfe/ok.txt ") && s.contains("not UTF-8")),
            "{shown:?}"
        );
    }

    /// A directory or file the call made unreadable is refused by name where permissions
    /// bind kleene's user (root reads everything, so there is nothing to refuse).
    #[test]
    fn what_the_call_made_unreadable_is_refused_by_name() {
        let (tmp, store) = setup();
        let stage = Stage::prepare(tmp.path().join("s"), &store, []).unwrap();
        let root = stage.root();
        fs::create_dir_all(root.join("app/locked")).unwrap();
        fs::write(root.join("app/locked/f"), "x").unwrap();
        fs::write(root.join("app/closed"), "x").unwrap();
        fs::write(root.join("app/ok"), "x").unwrap();
        fs::set_permissions(root.join("app/locked"), fs::Permissions::from_mode(0o000)).unwrap();
        fs::set_permissions(root.join("app/closed"), fs::Permissions::from_mode(0o000)).unwrap();
        let changes = stage.changes(&()).unwrap();
        // Read anyway: this user is not bound by permissions (root, or CAP_DAC_OVERRIDE).
        if fs::read(root.join("app/closed")).is_ok() {
            assert!(changes.refused().is_empty(), "{:?}", changes.refused());
        } else {
            let shown: Vec<String> = changes.refused().iter().map(ToString::to_string).collect();
            assert_eq!(
                shown,
                [
                    "app/closed cannot be read: Permission denied (os error 13)",
                    "app/locked cannot be read: Permission denied (os error 13)",
                ]
            );
            assert_eq!(
                changes
                    .written()
                    .keys()
                    .map(AdmittedPath::as_str)
                    .collect::<Vec<_>>(),
                ["app/ok"]
            );
        }
        stage.discard().unwrap();
    }

    #[test]
    fn special_files_are_refused() {
        let (tmp, store) = setup();
        let stage = Stage::prepare(tmp.path().join("s"), &store, []).unwrap();
        let fifo = stage.root().join("pipe");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let changes = stage.changes(&()).unwrap();
        assert!(matches!(
            changes.refused(),
            [StageRefusal::SpecialFile { kind: "FIFO", .. }]
        ));
    }

    struct Target;
    impl ScratchRule for Target {
        fn is_scratch(&self, path: &str) -> bool {
            path.starts_with("target/") || path.ends_with(".pyc")
        }
        fn covers_dir(&self, dir: &str) -> bool {
            dir == "target"
        }
    }

    #[test]
    fn scratch_is_ignored_even_when_it_holds_links() {
        let (tmp, store) = setup();
        let stage = Stage::prepare(tmp.path().join("s"), &store, []).unwrap();
        fs::create_dir_all(stage.root().join("target/debug")).unwrap();
        fs::write(stage.root().join("target/debug/x"), "bin").unwrap();
        std::os::unix::fs::symlink("/etc", stage.root().join("target/etc")).unwrap();
        fs::write(stage.root().join("m.pyc"), "b").unwrap();
        let changes = stage.changes(&Target).unwrap();
        assert!(changes.written().is_empty() && changes.refused().is_empty());
    }

    #[test]
    fn escape_shows_every_byte() {
        assert_eq!(escape(b"a\tb\\c\xfe"), "a\\tb\\\\c\\xfe");
        assert_eq!(escape("ünï".as_bytes()), "ünï");
    }
}
