//! The content-addressed store of read-only objects that stages link their inputs to.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use foldhash::{HashMap, HashMapExt};

use super::{FileIdentity, StageError, identity};
use crate::id::digest::Digest;

/// A content-addressed directory of read-only files, one per distinct content, that stages
/// link their inputs to.
///
/// Each object is written once (temporary file, then rename) and verified once per process
/// the first time it is used; afterwards it is trusted while its file's identity (inode,
/// size, modification and change times) stays what it was when it was verified, until
/// [`ObjectStore::forget`]. A write through a link a stage holds moves the identity, so the
/// object is verified again (and replaced) even when the stage no longer shows the link.
/// The one move forgiven is kleene's own: linking an object into a stage, or removing such
/// a link, moves its change time, and the store takes the new one as verified at that
/// moment when nothing else about the file moved (so a fresh stage per call does not read
/// every input's bytes again).
#[derive(Debug)]
pub struct ObjectStore {
    dir: PathBuf,
    verified: Mutex<HashMap<Digest, FileIdentity>>,
}

impl ObjectStore {
    /// The store in `dir`, created if missing.
    ///
    /// # Errors
    ///
    /// [`StageError::Io`] when the directory cannot be created.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, StageError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(StageError::io(&dir))?;
        Ok(Self {
            dir,
            verified: Mutex::new(HashMap::new()),
        })
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, digest: &Digest) -> PathBuf {
        self.dir.join(digest.to_string())
    }

    /// Whether the object at `path` is the file verified for `digest`, unchanged since.
    pub(super) fn is_verified(&self, digest: &Digest, path: &Path) -> bool {
        let Some(verified) = self
            .verified
            .lock()
            .ok()
            .and_then(|map| map.get(digest).copied())
        else {
            return false;
        };
        rustix::fs::lstat(path).is_ok_and(|st| identity(&st) == verified)
    }

    fn mark_verified(&self, digest: Digest, path: &Path) {
        let Ok(st) = rustix::fs::lstat(path) else {
            return;
        };
        if let Ok(mut map) = self.verified.lock() {
            map.insert(digest, identity(&st));
        }
    }

    /// Notes that kleene itself just linked the object for `digest` into a stage or removed
    /// such a link, which moves the object's change time and nothing else: the object stays
    /// verified when nothing else about it moved since it was. Anything else moved (its
    /// bytes, size or modification time, another file at its name) leaves it to be verified
    /// again when it is next used.
    pub(super) fn relinked(&self, digest: &Digest) {
        if let Ok(st) = rustix::fs::lstat(self.path_of(digest)) {
            self.relinked_as(digest, identity(&st));
        }
    }

    /// [`relinked`](Self::relinked), with the identity a link to the object shows now (a
    /// stage's file that is a copy has another inode, and changes nothing).
    pub(super) fn relinked_as(&self, digest: &Digest, now: FileIdentity) {
        if let Ok(mut map) = self.verified.lock()
            && let Some(known) = map.get_mut(digest)
            && known.moved_only_change_time_to(&now)
        {
            *known = now;
        }
    }

    /// The object file holding `content` (whose blake3 is `digest`), written if missing.
    pub(super) fn ensure(&self, digest: Digest, content: &[u8]) -> Result<PathBuf, StageError> {
        let path = self.path_of(&digest);
        if self.is_verified(&digest, &path) {
            return Ok(path);
        }
        match fs::read(&path) {
            Ok(existing) if Digest::from(blake3::hash(&existing)) == digest => {}
            Ok(_) => {
                // A damaged object (a torn write from an earlier crash, or an in-place write):
                // replace it, since the caller holds the true bytes.
                fs::remove_file(&path).map_err(StageError::io(&path))?;
                self.write_object(&path, content)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.write_object(&path, content)?,
            Err(e) => return Err(StageError::io(&path)(e)),
        }
        self.mark_verified(digest, &path);
        Ok(path)
    }

    fn write_object(&self, path: &Path, content: &[u8]) -> Result<(), StageError> {
        let tmp = self
            .dir
            .join(format!(".tmp-{}-{}", std::process::id(), unique_suffix()));
        let written = (|| {
            let mut file = fs::File::create(&tmp)?;
            file.write_all(content)?;
            file.set_permissions(fs::Permissions::from_mode(0o444))?;
            fs::rename(&tmp, path)
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(StageError::io(path)(e));
        }
        Ok(())
    }

    /// Drops the object for `digest` (a stage reported it changed in place), so the next
    /// stage that needs it writes a fresh copy.
    ///
    /// # Errors
    ///
    /// [`StageError::Io`] when the file exists but cannot be removed.
    pub fn forget(&self, digest: &Digest) -> Result<(), StageError> {
        if let Ok(mut map) = self.verified.lock() {
            map.remove(digest);
        }
        let path = self.path_of(digest);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StageError::io(&path)(e)),
        }
    }
}

fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{p, setup};
    use super::super::{Stage, StageInput};
    use super::*;

    /// The digest of the bytes every test stages, `true`.
    fn true_digest() -> Digest {
        Digest::from(blake3::hash(b"true"))
    }

    /// A new stage `name` under `dir` holding `a.txt` with the bytes `true`.
    fn stage_true(dir: &Path, store: &ObjectStore, name: &str) -> Stage {
        let a = p("a.txt");
        Stage::prepare(
            dir.join(name),
            store,
            [StageInput::with_digest(&a, b"true", true_digest())],
        )
        .unwrap()
    }

    #[test]
    fn a_damaged_object_is_rewritten_from_the_true_bytes() {
        let (tmp, store) = setup();
        let digest = true_digest();
        let object = store.dir().join(digest.to_string());
        fs::write(&object, "torn").unwrap();
        let stage = stage_true(tmp.path(), &store, "s");
        assert_eq!(fs::read(stage.root().join("a.txt")).unwrap(), b"true");
    }

    /// Each stage's links move their objects' change time; kleene's own links and their
    /// removal must not make the next stage read and hash every object again (with a fresh
    /// stage per call that was most of what a call of a long chain cost).
    #[test]
    fn an_object_a_stage_linked_and_released_needs_no_second_reading() {
        let (tmp, store) = setup();
        let digest = true_digest();
        let object = store.dir().join(digest.to_string());
        for round in 0..3 {
            let stage = stage_true(tmp.path(), &store, &format!("s{round}"));
            assert!(
                store.is_verified(&digest, &object),
                "after linking, round {round}"
            );
            stage.discard_linked_from(&store).unwrap();
            assert!(
                store.is_verified(&digest, &object),
                "after removal, round {round}"
            );
        }
    }

    /// What kleene's own links are forgiven is their change time only, and only at the
    /// moment they are made: bytes changed in place afterwards, the size and modification
    /// time put back as they were, still move the change time, and the next stage gets the
    /// true bytes.
    #[test]
    fn an_object_changed_in_place_with_its_times_put_back_is_verified_again() {
        let (tmp, store) = setup();
        let digest = true_digest();
        let object = store.dir().join(digest.to_string());
        let first = stage_true(tmp.path(), &store, "s1");
        first.discard_linked_from(&store).unwrap();
        let modified = fs::metadata(&object).unwrap().modified().unwrap();
        fs::set_permissions(&object, fs::Permissions::from_mode(0o644)).unwrap();
        let mut file = fs::OpenOptions::new().write(true).open(&object).unwrap();
        file.write_all(b"ture").unwrap();
        file.set_modified(modified).unwrap();
        drop(file);
        assert_eq!(fs::metadata(&object).unwrap().modified().unwrap(), modified);
        let second = stage_true(tmp.path(), &store, "s2");
        assert_eq!(fs::read(second.root().join("a.txt")).unwrap(), b"true");
    }

    /// An object verified once was trusted by name for the rest of the process: a call that
    /// wrote through its link, then moved the link away and put the true bytes back at the
    /// input's name, left no input changed, and the next stage was linked to the damaged
    /// object (found by the walk's property test).
    #[test]
    fn an_object_written_after_its_verification_is_verified_again() {
        let (tmp, store) = setup();
        let first = stage_true(tmp.path(), &store, "s1");
        let linked = first.root().join("a.txt");
        fs::set_permissions(&linked, fs::Permissions::from_mode(0o644)).unwrap();
        fs::OpenOptions::new()
            .append(true)
            .open(&linked)
            .and_then(|mut f| f.write_all(b"!"))
            .unwrap();
        fs::rename(&linked, first.root().join("moved.txt")).unwrap();
        fs::write(&linked, b"true").unwrap();
        let second = stage_true(tmp.path(), &store, "s2");
        assert_eq!(fs::read(second.root().join("a.txt")).unwrap(), b"true");
    }
}
