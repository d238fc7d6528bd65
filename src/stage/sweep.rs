//! Removing what a stage holds without following a link: a whole stage, or what its next
//! call does not want.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

use super::{StageError, Staged, identity};
use crate::id::digest::Digest;
use crate::plan::path::AdmittedPath;

/// Removes the stage directory at `root` that no [`Stage`](super::Stage) owns any more (one a crashed run
/// left behind), whatever its call left there: the directory, even one the call made
/// unreadable, or the file or link that replaced it (a link is removed, never followed).
/// Nothing there is no error.
///
/// # Errors
///
/// [`StageError::Io`] when it cannot be removed.
///
/// [`Stage`]: super::Stage
pub fn remove_stage(root: &Path) -> Result<(), StageError> {
    remove_root(root).map_err(StageError::io(root))
}

pub(super) fn remove_root(root: &Path) -> io::Result<()> {
    match fs::symlink_metadata(root) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Ok(meta) if !meta.is_dir() => return fs::remove_file(root),
        _ => {}
    }
    match fs::remove_dir_all(root) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => {
            // A call may have left a directory without write permission: open it up and
            // try once more.
            make_writable(root);
            fs::remove_dir_all(root).map_err(|_| e)
        }
    }
}

fn make_writable(dir: &Path) {
    // Opened up before it is listed: a directory the call made unreadable cannot be listed.
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            make_writable(&entry.path());
        }
    }
}

/// The walk of [`Stage::reuse`]: keeps unchanged inputs that are wanted again, removes the
/// rest, never following a link.
pub(super) struct Sweep<'s> {
    pub(super) root: &'s Path,
    pub(super) old: &'s BTreeMap<AdmittedPath, Staged>,
    pub(super) wanted: &'s BTreeMap<&'s AdmittedPath, Digest>,
    pub(super) kept: &'s mut BTreeMap<AdmittedPath, Staged>,
}

impl Sweep<'_> {
    fn fail(&self, rel: &str) -> impl FnOnce(rustix::io::Errno) -> StageError + '_ {
        let place = self.root.join(rel);
        move |e| StageError::io(&place)(e.into())
    }

    /// Sweeps the directory `fd` (at `prefix`); returns whether it still holds anything.
    pub(super) fn dir(&mut self, fd: &OwnedFd, prefix: &str) -> Result<bool, StageError> {
        let mut names: Vec<Vec<u8>> = Vec::new();
        for entry in Dir::read_from(fd).map_err(self.fail(prefix))? {
            let entry = entry.map_err(self.fail(prefix))?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(name.to_vec());
            }
        }
        let mut holds = false;
        for name in names {
            let Ok(c_name) = std::ffi::CString::new(name.clone()) else {
                continue;
            };
            let rel = match std::str::from_utf8(&name) {
                Ok(n) if prefix.is_empty() => n.to_owned(),
                Ok(n) => format!("{prefix}/{n}"),
                // Never an input: removed below whatever it is.
                Err(_) => String::new(),
            };
            let st = match rustix::fs::statat(fd, &c_name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(self.fail(&rel)(e)),
            };
            match FileType::from_raw_mode(st.st_mode as _) {
                FileType::Directory => {
                    let child = rustix::fs::openat(
                        fd,
                        &c_name,
                        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                    .map_err(self.fail(&rel))?;
                    // A directory the call left without write or search permission.
                    let _ = rustix::fs::fchmod(&child, Mode::from_raw_mode(0o755));
                    if self.dir(&child, &rel)? {
                        holds = true;
                    } else {
                        rustix::fs::unlinkat(fd, &c_name, AtFlags::REMOVEDIR)
                            .map_err(self.fail(&rel))?;
                    }
                }
                FileType::RegularFile if !rel.is_empty() => {
                    let keep = AdmittedPath::admit(&rel).ok().and_then(|path| {
                        let old = self.old.get(&path)?;
                        let same = self.wanted.get(&path) == Some(&old.digest)
                            && old.identity == Some(identity(&st));
                        same.then(|| (path, old.clone()))
                    });
                    match keep {
                        Some((path, staged)) => {
                            self.kept.insert(path, staged);
                            holds = true;
                        }
                        None => rustix::fs::unlinkat(fd, &c_name, AtFlags::empty())
                            .map_err(self.fail(&rel))?,
                    }
                }
                _ => {
                    rustix::fs::unlinkat(fd, &c_name, AtFlags::empty()).map_err(self.fail(&rel))?
                }
            }
        }
        Ok(holds)
    }
}

/// Removes the entry at the raw relative path `raw` beneath `root` (a whole tree for a
/// directory), opening every parent with `O_NOFOLLOW`; an entry already gone is fine, a
/// parent that is no longer a directory is an error (the caller starts a fresh stage).
pub(super) fn remove_beneath(root: &OwnedFd, raw: &[u8], shown: &Path) -> Result<(), StageError> {
    beneath(root, raw, remove_entry).map_err(|e| StageError::io(shown)(e.into()))
}

/// Runs `op` on the entry at the raw relative path `raw` beneath `root`, in its parent opened
/// with `O_NOFOLLOW` at every component; an entry (or parent) already gone is fine.
fn beneath(
    root: &OwnedFd,
    raw: &[u8],
    op: impl FnOnce(&OwnedFd, &CStr) -> Result<(), rustix::io::Errno>,
) -> Result<(), rustix::io::Errno> {
    let mut parts: Vec<&[u8]> = raw.split(|&b| b == b'/').collect();
    let Some(last) = parts.pop() else {
        return Ok(());
    };
    let mut dir: Option<OwnedFd> = None;
    for part in parts {
        let Ok(name) = std::ffi::CString::new(part) else {
            return Ok(());
        };
        let parent = dir.as_ref().unwrap_or(root);
        match rustix::fs::openat(
            parent,
            &name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => dir = Some(fd),
            Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    let parent = dir.as_ref().unwrap_or(root);
    let Ok(name) = std::ffi::CString::new(last) else {
        return Ok(());
    };
    op(parent, &name)
}

/// Removes `name` in `dir`: a file or link by unlinking it, a directory with everything in it.
fn remove_entry(dir: &OwnedFd, name: &CStr) -> Result<(), rustix::io::Errno> {
    let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    if FileType::from_raw_mode(st.st_mode as _) == FileType::Directory {
        let child = rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        // A directory the call left without write or search permission.
        let _ = rustix::fs::fchmod(&child, Mode::from_raw_mode(0o755));
        let mut names = Vec::new();
        for entry in Dir::read_from(&child)? {
            let entry = entry?;
            let n = entry.file_name();
            if n.to_bytes() != b"." && n.to_bytes() != b".." {
                names.push(n.to_owned());
            }
        }
        for n in names {
            remove_entry(&child, &n)?;
        }
        rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)
    } else {
        match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
            Err(rustix::io::Errno::NOENT) => Ok(()),
            other => other,
        }
    }
}

/// Removes the now-empty directories above `path` (best effort; a non-empty one stops it).
pub(super) fn prune_empty_parents(root: &OwnedFd, path: &str) {
    let mut parts: Vec<&str> = path.split('/').collect();
    parts.pop();
    while !parts.is_empty() {
        let joined = parts.join("/");
        // A directory already gone leaves its parent to prune; any other failure (not
        // empty, not a directory) ends the pruning.
        let removed = beneath(
            root,
            joined.as_bytes(),
            |dir, name| match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
                Err(rustix::io::Errno::NOENT) => Ok(()),
                other => other,
            },
        );
        if removed.is_err() {
            return;
        }
        parts.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::super::Stage;
    use super::super::tests::setup;
    use super::*;

    #[test]
    fn discard_removes_everything_without_following_links() {
        let (tmp, store) = setup();
        let keep = tmp.path().join("keep");
        fs::create_dir(&keep).unwrap();
        fs::write(keep.join("f"), "x").unwrap();
        let stage = Stage::prepare(tmp.path().join("s"), &store, []).unwrap();
        std::os::unix::fs::symlink(&keep, stage.root().join("link")).unwrap();
        fs::create_dir(stage.root().join("ro")).unwrap();
        fs::set_permissions(stage.root().join("ro"), fs::Permissions::from_mode(0o500)).unwrap();
        let root = stage.root().to_owned();
        stage.discard().unwrap();
        assert!(!root.exists());
        assert!(keep.join("f").exists());
    }
}
