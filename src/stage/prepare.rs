//! Preparing a stage: linking a call's inputs from the object store into a new stage, or
//! turning one call's stage into the next call's.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::PathBuf;
use std::sync::Mutex;

use foldhash::{HashMap, HashSet, HashSetExt};

use super::store::ObjectStore;
use super::sweep::{Sweep, prune_empty_parents, remove_beneath, remove_root};
use super::{FileIdentity, Stage, StageError, Staged, WalkResult, identity, track};
use crate::id::digest::Digest;
use crate::plan::path::AdmittedPath;

/// One file a stage starts with: a prerequisite's accepted output.
#[derive(Debug, Clone, Copy)]
pub struct StageInput<'a> {
    path: &'a AdmittedPath,
    content: &'a [u8],
    digest: Option<Digest>,
}

impl<'a> StageInput<'a> {
    /// The file `content` at `path`; its digest is computed when the stage is prepared.
    pub fn new(path: &'a AdmittedPath, content: &'a [u8]) -> Self {
        Self {
            path,
            content,
            digest: None,
        }
    }

    /// The same, with the blake3 of `content` already known (a caller that stages the same
    /// accepted output for many calls computes it once).
    ///
    /// The digest is trusted only to name the object: an object whose content does not match
    /// is rewritten from `content`.
    pub fn with_digest(path: &'a AdmittedPath, content: &'a [u8], digest: Digest) -> Self {
        Self {
            path,
            content,
            digest: Some(digest),
        }
    }
}

impl Stage {
    /// Creates the stage directory `root` holding exactly `inputs`, hard-linked from `store`
    /// (copied where the file system refuses a link).
    ///
    /// # Errors
    ///
    /// [`StageError::Exists`] when `root` exists; [`StageError::Io`] when a directory, object
    /// or link cannot be written (for example a full disk). A stage that failed half-way is
    /// removed.
    pub fn prepare<'a>(
        root: impl Into<PathBuf>,
        store: &ObjectStore,
        inputs: impl IntoIterator<Item = StageInput<'a>>,
    ) -> Result<Self, StageError> {
        let root = root.into();
        if fs::symlink_metadata(&root).is_ok() {
            return Err(StageError::Exists { path: root });
        }
        if let Some(parent) = root.parent() {
            fs::create_dir_all(parent).map_err(StageError::io(parent))?;
        }
        fs::create_dir(&root).map_err(StageError::io(&root))?;
        let mut stage = Self {
            root,
            inputs: BTreeMap::new(),
            last_walk: Mutex::new(None),
            tracker: Mutex::new(None),
        };
        let mut made_dirs: HashSet<PathBuf> = HashSet::new();
        let linked = inputs
            .into_iter()
            .try_for_each(|input| stage.link(store, input, &mut made_dirs))
            .and_then(|()| stage.record_identities(store));
        if let Err(e) = linked {
            let _ = fs::remove_dir_all(&stage.root);
            return Err(e);
        }
        Ok(stage)
    }

    /// Records every input's identity once all are linked: inputs with the same content share
    /// one object, and each link moves the shared inode's change time. That move is kleene's
    /// own doing, and the same look at each file tells the store so.
    fn record_identities(&mut self, store: &ObjectStore) -> Result<(), StageError> {
        for (path, staged) in &mut self.inputs {
            let target = self.root.join(path.as_str());
            let st = rustix::fs::lstat(&target).map_err(|e| StageError::io(&target)(e.into()))?;
            let now = identity(&st);
            store.relinked_as(&staged.digest, now);
            staged.identity = Some(now);
        }
        Ok(())
    }

    fn link(
        &mut self,
        store: &ObjectStore,
        input: StageInput<'_>,
        made_dirs: &mut HashSet<PathBuf>,
    ) -> Result<(), StageError> {
        let digest = input
            .digest
            .unwrap_or_else(|| Digest::from(blake3::hash(input.content)));
        let object = store.ensure(digest, input.content)?;
        // The stage is new and no command has run in it yet, so no component of `target` can
        // be a link planted by a task.
        let target = self.root.join(input.path.as_str());
        if let Some(parent) = target.parent()
            && parent != self.root
            && !made_dirs.contains(parent)
        {
            fs::create_dir_all(parent).map_err(StageError::io(parent))?;
            made_dirs.insert(parent.to_owned());
        }
        if let Err(e) = fs::hard_link(&object, &target) {
            // Another file system, a link-count limit or a file system without links: copy.
            if e.kind() == io::ErrorKind::AlreadyExists {
                return Err(StageError::io(&target)(e));
            }
            fs::write(&target, input.content).map_err(StageError::io(&target))?;
        }
        if self
            .inputs
            .insert(
                input.path.clone(),
                Staged {
                    digest,
                    identity: None,
                },
            )
            .is_some()
        {
            return Err(StageError::io(&target)(io::ErrorKind::AlreadyExists.into()));
        }
        Ok(())
    }

    /// Turns this stage into the stage of another call, holding exactly `inputs`: every
    /// input this stage already holds unchanged stays, everything else the stage holds is
    /// removed (without following a link), and the missing inputs are linked. A chain of
    /// calls whose inputs grow by a few files each pays for those files and one walk, not
    /// for a fresh link of every input.
    ///
    /// # Errors
    ///
    /// [`StageError::Io`] when the stage cannot be read or changed; the stage is then
    /// removed, and the caller prepares a fresh one.
    pub fn reuse<'a>(
        self,
        store: &ObjectStore,
        inputs: impl IntoIterator<Item = StageInput<'a>>,
    ) -> Result<Self, StageError> {
        let root = self.root.clone();
        let last = self.last_walk.lock().ok().and_then(|mut last| last.take());
        let result = match last {
            Some(walk) => {
                let tracked = walk.tracked;
                let refreshed: Vec<AdmittedPath> =
                    walk.refreshed.iter().map(|(p, _)| p.clone()).collect();
                self.reset_from(walk, store, inputs)
                    .map(|(stage, linked)| stage.rearm(tracked, linked.iter().chain(&refreshed)))
            }
            None => self
                .reset(store, inputs)
                .map(|(stage, _)| stage.rearm(false, std::iter::empty())),
        };
        if result.is_err() {
            let _ = remove_root(&root);
        }
        result
    }

    /// Readies the tracker for the stage's next call: after a walk of touched names it
    /// watches what was linked or changed since; otherwise it watches every input anew.
    fn rearm<'p>(self, tracked: bool, changed: impl Iterator<Item = &'p AdmittedPath>) -> Self {
        if let Ok(mut slot) = self.tracker.lock() {
            let incremental = tracked && slot.is_some();
            if !incremental {
                *slot = track::Tracker::new(&self.root);
            }
            if let Some(tracker) = slot.as_mut() {
                // What the kernel has told of the reset so far is taken in before anything is
                // watched again; a directory made anew at a removed one's place is watched
                // anew even when the kernel has not told of the removal yet.
                tracker.catch_up();
                if incremental {
                    for path in changed {
                        tracker.watch_input(&self.root, path);
                    }
                } else {
                    for path in self.inputs.keys() {
                        tracker.watch_input(&self.root, path);
                    }
                }
                tracker.arm();
            }
        }
        self
    }

    /// [`Stage::reuse`] after a walk: removes what the walk listed as leftovers and the inputs
    /// no longer wanted, then links what is missing; no second walk.
    fn reset_from<'a>(
        mut self,
        walk: WalkResult,
        store: &ObjectStore,
        inputs: impl IntoIterator<Item = StageInput<'a>>,
    ) -> Result<(Self, Vec<AdmittedPath>), StageError> {
        // Each wanted input, its digest, and whether the stage still holds it.
        let mut wanted: HashMap<&AdmittedPath, (StageInput<'a>, Digest, bool)> = inputs
            .into_iter()
            .map(|i| {
                let d = i
                    .digest
                    .unwrap_or_else(|| Digest::from(blake3::hash(i.content)));
                (i.path, (i, d, false))
            })
            .collect();
        let root_fd = self.open_root()?;
        for raw in &walk.leftovers {
            remove_beneath(&root_fd, raw, &self.root)?;
        }
        let refreshed: HashMap<AdmittedPath, FileIdentity> = walk.refreshed.into_iter().collect();
        // Kept in place: most inputs stay, and the map is neither rebuilt nor searched.
        // Each removed input, and its object when it still held its link unchanged.
        let mut removed: Vec<(AdmittedPath, Option<Digest>)> = Vec::new();
        self.inputs.retain(|path, staged| {
            if walk.dropped.contains(path) {
                // Changed or deleted: gone with the leftovers.
                removed.push((path.clone(), None));
                return false;
            }
            if let Some(now) = refreshed.get(path) {
                staged.identity = Some(*now);
            }
            match wanted.get_mut(path) {
                Some((_, digest, held)) if *digest == staged.digest => {
                    *held = true;
                    true
                }
                _ => {
                    removed.push((path.clone(), Some(staged.digest)));
                    false
                }
            }
        });
        let mut released = HashSet::new();
        for (path, object) in &removed {
            if let Some(digest) = object {
                remove_beneath(&root_fd, path.as_str().as_bytes(), &self.root)?;
                released.insert(*digest);
            }
            // A directory it leaves empty goes too, so every directory of the stage holds an
            // input (and is watched).
            prune_empty_parents(&root_fd, path.as_str());
        }
        // The removed links moved their objects' change time: kleene's own doing, so the
        // next stage to link one does not read it again.
        for digest in &released {
            store.relinked(digest);
        }
        let missing = wanted
            .into_values()
            .filter(|(_, _, held)| !held)
            .map(|(input, digest, _)| (input, digest))
            .collect();
        self.link_missing_after(store, missing, released)
    }

    /// Links every wanted input the stage does not hold, then records identities again where
    /// a link moved them.
    fn link_missing(
        self,
        store: &ObjectStore,
        missing: Vec<(StageInput<'_>, Digest)>,
    ) -> Result<(Self, Vec<AdmittedPath>), StageError> {
        self.link_missing_after(store, missing, HashSet::new())
    }

    /// [`link_missing`](Self::link_missing) once links to the objects `released` were
    /// removed, which moved the identity of every input still sharing one.
    fn link_missing_after(
        mut self,
        store: &ObjectStore,
        mut missing: Vec<(StageInput<'_>, Digest)>,
        released: HashSet<Digest>,
    ) -> Result<(Self, Vec<AdmittedPath>), StageError> {
        let mut made_dirs: HashSet<PathBuf> = HashSet::new();
        let mut linked = released;
        // Linked in path order, so directories are made before what they hold.
        missing.sort_unstable_by(|a, b| a.0.path.cmp(b.0.path));
        let mut newly = Vec::with_capacity(missing.len());
        for (input, digest) in missing {
            self.link(store, input, &mut made_dirs)?;
            linked.insert(digest);
            newly.push(input.path.clone());
        }
        // A link made or removed moves the change time of every file sharing its object.
        for (path, staged) in &mut self.inputs {
            if staged.identity.is_none() || linked.contains(&staged.digest) {
                let target = self.root.join(path.as_str());
                let st =
                    rustix::fs::lstat(&target).map_err(|e| StageError::io(&target)(e.into()))?;
                let now = identity(&st);
                store.relinked_as(&staged.digest, now);
                staged.identity = Some(now);
            }
        }
        Ok((self, newly))
    }

    fn reset<'a>(
        mut self,
        store: &ObjectStore,
        inputs: impl IntoIterator<Item = StageInput<'a>>,
    ) -> Result<(Self, Vec<AdmittedPath>), StageError> {
        let wanted: BTreeMap<AdmittedPath, StageInput<'a>> =
            inputs.into_iter().map(|i| (i.path.clone(), i)).collect();
        let digest_of = |i: &StageInput<'_>| {
            i.digest
                .unwrap_or_else(|| Digest::from(blake3::hash(i.content)))
        };
        let wanted_digests: BTreeMap<&AdmittedPath, Digest> =
            wanted.iter().map(|(p, i)| (p, digest_of(i))).collect();
        let root_fd = self.open_root()?;
        let mut kept = BTreeMap::new();
        let mut sweep = Sweep {
            root: &self.root,
            old: &self.inputs,
            wanted: &wanted_digests,
            kept: &mut kept,
        };
        sweep.dir(&root_fd, "")?;
        self.inputs = kept;
        let missing = wanted
            .iter()
            .filter(|(p, _)| !self.inputs.contains_key(*p))
            .map(|(p, i)| (*i, wanted_digests[p]))
            .collect();
        self.link_missing(store, missing)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    use super::super::tests::{p, setup};
    use super::*;

    #[test]
    fn a_new_stage_holds_exactly_its_inputs_and_reports_no_change() {
        let (tmp, store) = setup();
        let (a, b) = (p("a/one.txt"), p("b/c/two.txt"));
        let stage = Stage::prepare(
            tmp.path().join("s"),
            &store,
            [StageInput::new(&a, b"1"), StageInput::new(&b, b"2")],
        )
        .unwrap();
        assert_eq!(fs::read(stage.root().join("a/one.txt")).unwrap(), b"1");
        let changes = stage.changes(&()).unwrap();
        assert!(changes.written().is_empty(), "{changes:?}");
        assert!(changes.deleted().is_empty() && changes.refused().is_empty());
    }

    #[test]
    fn an_existing_stage_directory_is_refused_and_a_failed_one_removed() {
        let (tmp, store) = setup();
        let root = tmp.path().join("s");
        fs::create_dir(&root).unwrap();
        assert!(matches!(
            Stage::prepare(&root, &store, []),
            Err(StageError::Exists { .. })
        ));
        // Two inputs at the same path cannot both be linked: the half-made stage is removed.
        let a = p("a.txt");
        let other = tmp.path().join("s2");
        let err = Stage::prepare(
            &other,
            &store,
            [StageInput::new(&a, b"1"), StageInput::new(&a, b"2")],
        )
        .unwrap_err();
        assert!(err.io_error().is_some(), "{err}");
        assert!(!other.exists());
    }

    /// A reused stage that no longer wants an input removes its link, which moves the
    /// object's change time: kleene's own doing, so the object stays verified and the next
    /// stage to want it again does not read it.
    #[test]
    fn an_input_a_reused_stage_lets_go_of_stays_verified_in_the_store() {
        let (tmp, store) = setup();
        let (a, b) = (p("a.txt"), p("b.txt"));
        let kept = Digest::from(blake3::hash(b"kept"));
        let released = Digest::from(blake3::hash(b"released"));
        let stage = Stage::prepare(
            tmp.path().join("s"),
            &store,
            [
                StageInput::with_digest(&a, b"kept", kept),
                StageInput::with_digest(&b, b"released", released),
            ],
        )
        .unwrap();
        stage.changes(&()).unwrap();
        let stage = stage
            .reuse(&store, [StageInput::with_digest(&a, b"kept", kept)])
            .unwrap();
        assert!(!stage.root().join("b.txt").exists());
        let object = store.dir().join(released.to_string());
        assert!(store.is_verified(&released, &object));
        assert!(store.is_verified(&kept, &store.dir().join(kept.to_string())));
    }

    #[test]
    fn reuse_keeps_unchanged_inputs_and_removes_everything_else() {
        reuse_scenario(false);
    }

    #[test]
    fn reuse_after_a_walk_needs_no_second_walk_and_gives_the_same_stage() {
        reuse_scenario(true);
    }

    fn reuse_scenario(walk_first: bool) {
        let (tmp, store) = setup();
        let (a, b, c) = (p("out/a.txt"), p("out/b.txt"), p("c.txt"));
        let stage = Stage::prepare(
            tmp.path().join("s"),
            &store,
            [StageInput::new(&a, b"a"), StageInput::new(&b, b"b")],
        )
        .unwrap();
        let root = stage.root().to_owned();
        let kept_inode = fs::metadata(root.join("out/a.txt")).unwrap().ino();
        // What a call leaves: a new file, a changed input, a link, scratch and a new tree.
        fs::write(root.join("new.txt"), "n").unwrap();
        fs::remove_file(root.join("out/b.txt")).unwrap();
        fs::write(root.join("out/b.txt"), "changed").unwrap();
        std::os::unix::fs::symlink("/etc", root.join("link")).unwrap();
        fs::create_dir_all(root.join("target/debug/deep")).unwrap();
        fs::write(root.join("target/debug/deep/x"), "bin").unwrap();
        fs::create_dir_all(root.join("out/new")).unwrap();
        fs::write(root.join("out/new/y"), "y").unwrap();
        if walk_first {
            let changes = stage.changes(&()).unwrap();
            assert_eq!(changes.written().len(), 4, "{changes:?}");
        }
        let next = stage
            .reuse(
                &store,
                [
                    StageInput::new(&a, b"a"),
                    StageInput::new(&b, b"b"),
                    StageInput::new(&c, b"c"),
                ],
            )
            .unwrap();
        assert_eq!(fs::read(root.join("out/b.txt")).unwrap(), b"b");
        assert_eq!(fs::read(root.join("c.txt")).unwrap(), b"c");
        assert_eq!(
            fs::metadata(root.join("out/a.txt")).unwrap().ino(),
            kept_inode
        );
        let mut left: Vec<String> = walk_names(&root);
        left.sort();
        assert_eq!(left, ["c.txt", "out", "out/a.txt", "out/b.txt"]);
        let changes = next.changes(&()).unwrap();
        assert!(
            changes.written().is_empty() && changes.deleted().is_empty(),
            "{changes:?}"
        );
        assert!(changes.refused().is_empty());
        // Dropping an input removes it (and a directory it leaves empty).
        let last = next.reuse(&store, [StageInput::new(&c, b"c")]).unwrap();
        assert_eq!(walk_names(&root), ["c.txt"]);
        assert!(last.changes(&()).unwrap().written().is_empty());
    }

    fn walk_names(root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut todo = vec![root.to_owned()];
        while let Some(dir) = todo.pop() {
            for e in fs::read_dir(&dir).unwrap() {
                let e = e.unwrap();
                let rel = e
                    .path()
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                if e.file_type().unwrap().is_dir() {
                    todo.push(e.path());
                }
                out.push(rel);
            }
        }
        out.sort();
        out
    }
}
