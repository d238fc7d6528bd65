//! What a call changed in its stage: [`Stage::changes`], the files it wrote, the inputs it
//! deleted and what it left that kleene refuses.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;

use foldhash::{HashSet, HashSetExt};
use rustix::fs::{Mode, OFlags};

use super::walk::{Walk, left_by_the_call, open_dir_beneath, written_by_path};
use super::{ScratchRule, Stage, StageError, WalkResult};
use crate::plan::path::AdmittedPath;

impl Stage {
    /// What the call created, changed, deleted or left that kleene refuses, relative to the
    /// inputs, ignoring what `scratch` calls scratch. Nothing is followed through a link.
    ///
    /// # Errors
    ///
    /// [`StageError::Io`] when a directory or file of the stage cannot be read.
    pub fn changes(&self, scratch: &impl ScratchRule) -> Result<StageChanges, StageError> {
        self.changes_within(scratch, u64::MAX)
    }

    /// [`changes`](Self::changes), refusing ([`StageRefusal::TooLarge`]) every file that
    /// would take the bytes the call wrote past `max_written_bytes`, without reading it.
    /// Files are taken in the walk's order (by name, depth first); an input rewritten with
    /// its own bytes costs nothing.
    ///
    /// # Errors
    ///
    /// [`StageError::Io`] when a directory or file of the stage cannot be read.
    pub fn changes_within(
        &self,
        scratch: &impl ScratchRule,
        max_written_bytes: u64,
    ) -> Result<StageChanges, StageError> {
        let root_fd = match rustix::fs::open(
            &self.root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            // The call removed or replaced its own stage: its failure, refused like any
            // other thing it left, never mistaken for the host failing.
            Err(e) if left_by_the_call(e) => {
                return Ok(StageChanges {
                    written: BTreeMap::new(),
                    deleted: self.inputs.keys().cloned().collect(),
                    refused: vec![StageRefusal::Unreadable {
                        path: String::new(),
                        reason: io::Error::from(e).to_string(),
                    }],
                });
            }
            Err(e) => return Err(StageError::io(&self.root)(e.into())),
        };
        // Once the stage serves another call, the kernel tells which names the call
        // touched; without that (a first call, a full queue, a directory moved) every name
        // is visited.
        let touched = self
            .tracker
            .lock()
            .ok()
            .and_then(|mut t| t.as_mut().and_then(|t| t.touched().cloned()));
        let walked = match touched {
            Some(touched) => self.walk_touched(&root_fd, scratch, max_written_bytes, &touched)?,
            None => None,
        };
        let (walk, examined) = match walked {
            Some((walk, examined)) => (walk, Some(examined)),
            None => {
                let mut walk = Walk::new(self, scratch, max_written_bytes, self.inputs.iter());
                walk.dir(&root_fd, "", b"")?;
                (walk, None)
            }
        };
        let Walk {
            seen,
            written,
            refused,
            leftovers,
            refreshed,
            ..
        } = walk;
        let written = written_by_path(written);
        // Inputs the walk could have found changed: every one, or those it examined.
        let candidates: Box<dyn Iterator<Item = &AdmittedPath>> = match &examined {
            Some(examined) => Box::new(examined.iter().copied()),
            None => Box::new(self.inputs.keys()),
        };
        let mut dropped = HashSet::new();
        let mut deleted = Vec::new();
        for path in candidates {
            if !seen.contains(path) {
                deleted.push(path.clone());
                dropped.insert(path.clone());
            } else if written.contains_key(path) {
                dropped.insert(path.clone());
            }
        }
        deleted.sort_unstable();
        if let Ok(mut last) = self.last_walk.lock() {
            *last = Some(WalkResult {
                dropped,
                leftovers,
                refreshed,
                tracked: examined.is_some(),
            });
        }
        Ok(StageChanges {
            written,
            deleted,
            refused,
        })
    }

    /// What a whole walk finds, leaving the stage's state for reuse alone: the reference the
    /// walk of touched names is checked against.
    #[cfg(test)]
    fn changes_whole(&self, scratch: &impl ScratchRule) -> Result<StageChanges, StageError> {
        let root_fd = self.open_root()?;
        let mut walk = Walk::new(self, scratch, u64::MAX, self.inputs.iter());
        walk.dir(&root_fd, "", b"")?;
        let mut deleted: Vec<AdmittedPath> = self
            .inputs
            .keys()
            .filter(|p| !walk.seen.contains(p))
            .cloned()
            .collect();
        deleted.sort_unstable();
        Ok(StageChanges {
            written: written_by_path(walk.written),
            deleted,
            refused: walk.refused,
        })
    }

    /// The walk of the names the call touched (`touched`: directory and raw name), and the
    /// inputs it examined: each touched name and every input beneath one. `None` when a
    /// touched directory cannot be opened where it was: the caller walks the stage whole.
    fn walk_touched<'s, S: ScratchRule>(
        &'s self,
        root_fd: &OwnedFd,
        scratch: &'s S,
        max_written_bytes: u64,
        touched: &HashSet<(String, Vec<u8>)>,
    ) -> Result<Option<TouchedWalk<'s, S>>, StageError> {
        let mut by_dir: BTreeMap<&str, Vec<std::ffi::CString>> = BTreeMap::new();
        let mut examined: HashSet<&AdmittedPath> = HashSet::new();
        let mut touched_paths: HashSet<String> = HashSet::new();
        for (dir, name) in touched {
            let Ok(c_name) = std::ffi::CString::new(name.clone()) else {
                return Ok(None);
            };
            by_dir.entry(dir.as_str()).or_default().push(c_name);
            let Ok(name) = std::str::from_utf8(name) else {
                continue; // never an input's name
            };
            let rel = if dir.is_empty() {
                name.to_owned()
            } else {
                format!("{dir}/{name}")
            };
            let admitted = AdmittedPath::admit(&rel);
            touched_paths.insert(rel);
            let Ok(at) = admitted else {
                continue;
            };
            for (path, _) in self.inputs.range::<AdmittedPath, _>(&at..) {
                if *path != at && !path.starts_with(&at) {
                    break;
                }
                examined.insert(path);
            }
        }
        let mut walk = Walk::new(
            self,
            scratch,
            max_written_bytes,
            examined
                .iter()
                .filter_map(|p| self.inputs.get_key_value(*p)),
        );
        // A touched name that is a directory is walked whole: names touched beneath it are
        // visited there, not a second time.
        let inside_touched = |dir: &str| {
            dir.match_indices('/')
                .map(|(slash, _)| &dir[..slash])
                .chain([dir])
                .any(|above| touched_paths.contains(above))
        };
        for (dir, mut names) in by_dir {
            if !dir.is_empty() && inside_touched(dir) {
                continue;
            }
            names.sort_unstable();
            if dir.is_empty() {
                walk.entries(root_fd, "", b"", names)?;
                continue;
            }
            let Ok(fd) = open_dir_beneath(root_fd, dir) else {
                return Ok(None);
            };
            walk.entries(&fd, dir, dir.as_bytes(), names)?;
        }
        Ok(Some((walk, examined)))
    }
}

/// A walk of the touched names, and the inputs it examined.
type TouchedWalk<'s, S> = (Walk<'s, S>, HashSet<&'s AdmittedPath>);

/// Something a call left in its stage that can never be part of a candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StageRefusal {
    /// A symbolic link (kleene never follows one).
    Symlink {
        /// Its path in the stage (escaped where not printable).
        path: String,
        /// Where it points (escaped).
        target: String,
    },
    /// A FIFO, socket or device.
    SpecialFile {
        /// Its path in the stage (escaped).
        path: String,
        /// What it is.
        kind: &'static str,
    },
    /// A file whose name cannot be a project path.
    Unnameable {
        /// Its path in the stage, lossy and escaped.
        path: String,
        /// Why the name is refused.
        reason: String,
    },
    /// Something the call left that kleene may not read (its permissions), or that it
    /// removed or replaced while kleene looked: the stage itself when `path` is empty.
    /// What lay beneath counts as deleted.
    Unreadable {
        /// Its path in the stage (escaped); empty for the stage itself.
        path: String,
        /// What the operating system said.
        reason: String,
    },
    /// A file that would take what the call wrote past the bytes the caller allows
    /// ([`Stage::changes_within`]); it was not read.
    TooLarge {
        /// Its path in the stage.
        path: String,
        /// Its size when kleene looked (at least this many bytes).
        bytes: u64,
        /// The bytes a call may write in all.
        limit: u64,
    },
}

impl std::fmt::Display for StageRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StageRefusal::Symlink { path, target } => {
                write!(
                    f,
                    "{path} is a symbolic link to {target} (write the file itself)"
                )
            }
            StageRefusal::SpecialFile { path, kind } => write!(f, "{path} is a {kind}"),
            StageRefusal::Unnameable { path, reason } => {
                write!(f, "{path} cannot be a project path: {reason}")
            }
            StageRefusal::Unreadable { path, reason } if path.is_empty() => {
                write!(
                    f,
                    "the stage itself cannot be read (removed or replaced?): {reason}"
                )
            }
            StageRefusal::Unreadable { path, reason } => {
                write!(f, "{path} cannot be read: {reason}")
            }
            StageRefusal::TooLarge { path, bytes, limit } => write!(
                f,
                "{path} ({bytes} bytes) takes what the call wrote past the {limit} bytes it \
                 may write (mark build output as scratch)"
            ),
        }
    }
}

/// What a call changed in its stage.
#[derive(Debug, Clone, Default)]
pub struct StageChanges {
    written: BTreeMap<AdmittedPath, Vec<u8>>,
    deleted: Vec<AdmittedPath>,
    refused: Vec<StageRefusal>,
}

impl StageChanges {
    /// Files the call created, or whose content it changed, with their content.
    pub fn written(&self) -> &BTreeMap<AdmittedPath, Vec<u8>> {
        &self.written
    }

    /// The written files, by value (the candidate).
    pub fn into_written(self) -> BTreeMap<AdmittedPath, Vec<u8>> {
        self.written
    }

    /// Inputs the call removed (or replaced by something that is not a regular file).
    pub fn deleted(&self) -> &[AdmittedPath] {
        &self.deleted
    }

    /// What the call left that can never be part of a candidate.
    pub fn refused(&self) -> &[StageRefusal] {
        &self.refused
    }

    /// Why the candidate must be refused, in one line, when it must: the inputs the call
    /// deleted and what it left that kleene refuses, the first twenty of them named.
    ///
    /// ```
    /// # use kleene::stage::StageChanges;
    /// assert_eq!(StageChanges::default().refusal_summary(), None);
    /// ```
    pub fn refusal_summary(&self) -> Option<String> {
        const SHOWN: usize = 20;
        let total = self.deleted.len() + self.refused.len();
        if total == 0 {
            return None;
        }
        let mut items: Vec<String> = self
            .deleted
            .iter()
            .map(|p| {
                format!("deletes {p}, one of its inputs (a call may only write its own paths)")
            })
            .chain(self.refused.iter().map(ToString::to_string))
            .take(SHOWN)
            .collect();
        if total > SHOWN {
            items.push(format!("and {} more", total - SHOWN));
        }
        Some(format!(
            "the call left what kleene refuses in its stage: {}",
            items.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    use super::super::StageInput;
    use super::super::tests::{p, setup};
    use super::*;

    /// Within a limit, files are taken in the walk's order until the next would pass it;
    /// that one and every later one that does not fit is refused unread (a sparse file of a
    /// terabyte costs nothing), and an input rewritten with its own bytes is free.
    #[test]
    fn files_past_the_written_bytes_limit_are_refused_unread() {
        let (tmp, store) = setup();
        let input = p("in.txt");
        let stage = Stage::prepare(
            tmp.path().join("s"),
            &store,
            [StageInput::new(&input, &[b'i'; 40])],
        )
        .unwrap();
        let root = stage.root().to_owned();
        fs::remove_file(root.join("in.txt")).unwrap();
        fs::write(root.join("in.txt"), [b'i'; 40]).unwrap();
        fs::write(root.join("a.txt"), [b'a'; 30]).unwrap();
        fs::write(root.join("b.txt"), [b'b'; 30]).unwrap();
        fs::write(root.join("c.txt"), [b'c'; 20]).unwrap();
        fs::File::create(root.join("huge.bin"))
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        let changes = stage.changes_within(&(), 50).unwrap();
        let written: Vec<&str> = changes.written().keys().map(AdmittedPath::as_str).collect();
        assert_eq!(written, ["a.txt", "c.txt"]);
        let refused: Vec<(&str, u64)> = changes
            .refused()
            .iter()
            .map(|r| match r {
                StageRefusal::TooLarge {
                    path,
                    bytes,
                    limit: 50,
                } => (path.as_str(), *bytes),
                other => panic!("{other}"),
            })
            .collect();
        assert_eq!(refused, [("b.txt", 30), ("huge.bin", 1 << 40)]);
        assert!(changes.deleted().is_empty());
        assert!(
            changes.refused()[0]
                .to_string()
                .contains("mark build output as scratch")
        );
        // Without a limit, the same walk reads them all.
        fs::remove_file(root.join("huge.bin")).unwrap();
        assert_eq!(stage.changes(&()).unwrap().written().len(), 3);
    }

    #[test]
    fn created_changed_and_deleted_files_are_reported() {
        let (tmp, store) = setup();
        let (a, b) = (p("a.txt"), p("b.txt"));
        let stage = Stage::prepare(
            tmp.path().join("s"),
            &store,
            [StageInput::new(&a, b"1"), StageInput::new(&b, b"2")],
        )
        .unwrap();
        // Replace a (new inode, same name) with other bytes; delete b; create c.
        fs::remove_file(stage.root().join("a.txt")).unwrap();
        fs::write(stage.root().join("a.txt"), "changed").unwrap();
        fs::remove_file(stage.root().join("b.txt")).unwrap();
        fs::create_dir(stage.root().join("d")).unwrap();
        fs::write(stage.root().join("d/c.txt"), "new").unwrap();
        let changes = stage.changes(&()).unwrap();
        let written: Vec<_> = changes.written().keys().map(|p| p.as_str()).collect();
        assert_eq!(written, ["a.txt", "d/c.txt"]);
        assert_eq!(changes.deleted(), [p("b.txt")]);
    }

    #[test]
    fn rewriting_the_same_bytes_is_no_change() {
        let (tmp, store) = setup();
        let a = p("a.txt");
        let stage =
            Stage::prepare(tmp.path().join("s"), &store, [StageInput::new(&a, b"same")]).unwrap();
        fs::remove_file(stage.root().join("a.txt")).unwrap();
        fs::write(stage.root().join("a.txt"), "same").unwrap();
        let changes = stage.changes(&()).unwrap();
        assert!(changes.written().is_empty() && changes.deleted().is_empty());
    }

    #[test]
    fn an_in_place_write_through_the_link_is_seen() {
        let (tmp, store) = setup();
        let a = p("a.txt");
        let stage =
            Stage::prepare(tmp.path().join("s"), &store, [StageInput::new(&a, b"1")]).unwrap();
        let target = stage.root().join("a.txt");
        // Root ignores the read-only mode; make it writable for every user running the test.
        fs::set_permissions(&target, fs::Permissions::from_mode(0o644)).unwrap();
        fs::OpenOptions::new()
            .append(true)
            .open(&target)
            .unwrap()
            .write_all(b"2")
            .unwrap();
        let changes = stage.changes(&()).unwrap();
        assert_eq!(
            changes.written().get(&a).map(Vec::as_slice),
            Some(&b"12"[..])
        );
        // The object is damaged too; forgetting it makes the next stage get the true bytes.
        let digest = stage.input_digest(&a).unwrap();
        store.forget(&digest).unwrap();
        let next =
            Stage::prepare(tmp.path().join("s2"), &store, [StageInput::new(&a, b"1")]).unwrap();
        assert_eq!(fs::read(next.root().join("a.txt")).unwrap(), b"1");
    }

    /// A call that removes or replaces its own stage is refused for it (its failure, so
    /// it counts), never reported as the host failing to read the stage; its inputs count
    /// as deleted, and nothing is read through a stage replaced by a link.
    #[test]
    fn a_stage_removed_or_replaced_by_its_call_is_refused() {
        let (tmp, store) = setup();
        let input = AdmittedPath::admit("app/MODULE").unwrap();
        let outside = tmp.path().join("outside");
        fs::create_dir_all(outside.join("app")).unwrap();
        fs::write(outside.join("app/MODULE"), "not staged").unwrap();
        for (n, replace) in ["removed", "a file", "a link"].into_iter().enumerate() {
            let stage = Stage::prepare(
                tmp.path().join(format!("s{n}")),
                &store,
                [StageInput::new(&input, b"m")],
            )
            .unwrap();
            let root = stage.root().to_owned();
            fs::remove_dir_all(&root).unwrap();
            match replace {
                "a file" => fs::write(&root, "x").unwrap(),
                "a link" => std::os::unix::fs::symlink(&outside, &root).unwrap(),
                _ => {}
            }
            let changes = stage.changes(&()).unwrap();
            assert!(changes.written().is_empty(), "{replace}");
            assert_eq!(changes.deleted(), std::slice::from_ref(&input), "{replace}");
            assert!(
                matches!(changes.refused(), [StageRefusal::Unreadable { path, .. }] if path.is_empty()),
                "{replace}: {:?}",
                changes.refused()
            );
            assert!(
                changes.refused()[0]
                    .to_string()
                    .starts_with("the stage itself cannot be read"),
                "{replace}"
            );
            // What replaced it is removed; what a link pointed to is left alone.
            stage.discard().unwrap();
            assert!(fs::symlink_metadata(&root).is_err(), "{replace}");
        }
        assert_eq!(fs::read(outside.join("app/MODULE")).unwrap(), b"not staged");
    }

    /// The one-line summary names the deleted inputs, then the refusals, the first twenty,
    /// and counts the rest.
    #[test]
    fn the_refusal_summary_names_twenty_and_counts_the_rest() {
        let (tmp, store) = setup();
        let input = AdmittedPath::admit("in.txt").unwrap();
        let stage = Stage::prepare(
            tmp.path().join("s"),
            &store,
            [StageInput::new(&input, b"i")],
        )
        .unwrap();
        fs::remove_file(stage.root().join("in.txt")).unwrap();
        for i in 0..24 {
            std::os::unix::fs::symlink("/etc/passwd", stage.root().join(format!("l{i:02}")))
                .unwrap();
        }
        let summary = stage.changes(&()).unwrap().refusal_summary().unwrap();
        assert!(
            summary.starts_with(
                "the call left what kleene refuses in its stage: deletes in.txt, one of its inputs"
            ),
            "{summary}"
        );
        assert!(summary.contains("l18 is a symbolic link"), "{summary}");
        assert!(!summary.contains("l19"), "{summary}");
        assert!(summary.ends_with("; and 5 more"), "{summary}");
        assert_eq!(summary.lines().count(), 1);
    }

    /// A directory kleene removes as it resets the stage, while something else still holds
    /// it open (a process another thread forked, not yet past its exec), is told gone by the
    /// kernel only when that last hold ends: the directory made anew at its name is watched
    /// all the same, and what the next call writes there is found.
    #[test]
    fn a_directory_made_anew_while_the_old_one_is_held_open_is_watched() {
        let (tmp, store) = setup();
        let (f0, f2) = (p("out/f0"), p("out/sub/f2"));
        let inputs = [
            (f0.clone(), b"zero".to_vec()),
            (f2.clone(), b"two".to_vec()),
        ];
        let staged = || inputs.iter().map(|(p, c)| StageInput::new(p, c));
        let mut stage = Stage::prepare(tmp.path().join("s"), &store, staged()).unwrap();
        stage.changes(&()).unwrap();
        stage = stage.reuse(&store, staged()).unwrap();
        let root = stage.root().to_owned();
        // The call rewrites every input of `out` (each a new file at the input's name, as an
        // editor saves: the inputs are read-only), so the reset removes `out` whole (its
        // inputs dropped, the directories they leave empty pruned) and makes it anew.
        for input in ["out/f0", "out/sub/f2"] {
            fs::remove_file(root.join(input)).unwrap();
            fs::write(root.join(input), "changed").unwrap();
        }
        let held = fs::File::open(root.join("out")).unwrap();
        let changes = stage.changes(&()).unwrap();
        assert_eq!(changes.written().len(), 2);
        for (path, _) in &inputs {
            if let Some(digest) = stage.input_digest(path) {
                let _ = store.forget(&digest);
            }
        }
        stage = stage.reuse(&store, staged()).unwrap();
        fs::write(root.join("out/new"), "new").unwrap();
        let tracked = stage.changes(&()).unwrap();
        drop(held);
        assert_eq!(
            tracked
                .written()
                .keys()
                .map(AdmittedPath::as_str)
                .collect::<Vec<_>>(),
            ["out/new"],
            "{tracked:?}"
        );
    }

    /// What a call can do to its stage, as a command would do it.
    #[derive(Debug, Clone)]
    enum Op {
        /// Writes a new file (or overwrites one) at one of a few names.
        Write(usize, u8),
        /// Writes an input in place (through its link), with other bytes or its own.
        InPlace(usize, bool),
        Delete(usize),
        Rename(usize, usize),
        /// Replaces an input by a new file moved over it (a new inode), same bytes or not.
        Replace(usize, bool),
        /// Writes an input through a hard link made elsewhere in the stage, then removes the
        /// link: only the input's inode can tell.
        AliasWrite(usize),
        MakeTree(usize),
        RemoveDir(usize),
        Symlink(usize),
        Chmod(usize),
        MoveDir(usize, usize),
        /// Holds a directory open until the next call's walk, as a process another thread
        /// forked holds what was open until its exec: the kernel tells of the directory's
        /// removal only once it is let go.
        HoldOpen(usize),
    }

    const NAMES: [&str; 8] = [
        "out/f0",
        "out/f1",
        "out/sub/f2",
        "top",
        "new/x",
        "out/sub/f3",
        "target/t",
        "z/y/w",
    ];
    const DIRS: [&str; 4] = ["out", "out/sub", "new", "z"];

    fn op_strategy() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            (0..8usize, any::<u8>()).prop_map(|(i, b)| Op::Write(i, b)),
            (0..64usize, any::<bool>()).prop_map(|(i, same)| Op::InPlace(i, same)),
            (0..64usize).prop_map(Op::Delete),
            (0..64usize, 0..8usize).prop_map(|(i, j)| Op::Rename(i, j)),
            (0..64usize, any::<bool>()).prop_map(|(i, same)| Op::Replace(i, same)),
            (0..64usize).prop_map(Op::AliasWrite),
            (0..4usize).prop_map(Op::MakeTree),
            (0..4usize).prop_map(Op::RemoveDir),
            (0..8usize).prop_map(Op::Symlink),
            (0..64usize).prop_map(Op::Chmod),
            (0..4usize, 0..4usize).prop_map(|(i, j)| Op::MoveDir(i, j)),
            (0..4usize).prop_map(Op::HoldOpen),
        ]
    }

    /// Applies `op` to the stage at `root` holding `inputs`, ignoring what the file system
    /// refuses (a name that is not there, a parent that is a file): a command would too.
    /// Returns what it holds open.
    fn apply(root: &Path, inputs: &[AdmittedPath], op: &Op) -> Option<fs::File> {
        let input =
            |i: usize| (!inputs.is_empty()).then(|| root.join(inputs[i % inputs.len()].as_str()));
        let put = |path: &Path, bytes: &[u8]| {
            if let Some(parent) = path.parent() {
                let _ = fs::create_dir_all(parent);
            }
            let _ = fs::write(path, bytes);
        };
        match op {
            Op::Write(i, b) => put(&root.join(NAMES[*i]), &[*b; 3]),
            Op::InPlace(i, same) => {
                if let Some(path) = input(*i) {
                    let bytes = fs::read(&path).unwrap_or_default();
                    let bytes = if *same {
                        bytes
                    } else {
                        [bytes, b"+".to_vec()].concat()
                    };
                    let _ = fs::OpenOptions::new()
                        .write(true)
                        .truncate(true)
                        .open(&path)
                        .and_then(|mut f| f.write_all(&bytes));
                }
            }
            Op::Delete(i) => {
                if let Some(path) = input(*i) {
                    let _ = fs::remove_file(path);
                }
            }
            Op::Rename(i, j) => {
                if let Some(path) = input(*i) {
                    let to = root.join(NAMES[*j]);
                    if let Some(parent) = to.parent() {
                        let _ = fs::create_dir_all(parent);
                    }
                    let _ = fs::rename(path, to);
                }
            }
            Op::Replace(i, same) => {
                if let Some(path) = input(*i) {
                    let bytes = fs::read(&path).unwrap_or_default();
                    let bytes = if *same { bytes } else { b"replaced".to_vec() };
                    let tmp = root.join("replacement.tmp");
                    let _ = fs::write(&tmp, bytes).and_then(|()| fs::rename(&tmp, &path));
                }
            }
            Op::AliasWrite(i) => {
                if let Some(path) = input(*i) {
                    let alias = root.join("alias.tmp");
                    if fs::hard_link(&path, &alias).is_ok() {
                        let _ = fs::OpenOptions::new()
                            .append(true)
                            .open(&alias)
                            .and_then(|mut f| f.write_all(b"!"));
                        let _ = fs::remove_file(&alias);
                    }
                }
            }
            Op::MakeTree(d) => {
                put(&root.join(DIRS[*d]).join("deep/t1"), b"t1");
                put(&root.join(DIRS[*d]).join("t2"), b"t2");
            }
            Op::RemoveDir(d) => {
                let _ = fs::remove_dir_all(root.join(DIRS[*d]));
            }
            Op::Symlink(i) => {
                let _ = std::os::unix::fs::symlink("/etc", root.join(NAMES[*i]));
            }
            Op::Chmod(i) => {
                if let Some(path) = input(*i) {
                    let _ = fs::set_permissions(path, fs::Permissions::from_mode(0o600));
                }
            }
            Op::MoveDir(i, j) => {
                let _ = fs::rename(root.join(DIRS[*i]), root.join(DIRS[*j]).join("moved"));
            }
            Op::HoldOpen(d) => return fs::File::open(root.join(DIRS[*d])).ok(),
        }
        None
    }

    /// A sorted, comparable form of what a walk found.
    type Summary = (Vec<(String, Vec<u8>)>, Vec<String>, Vec<String>);

    fn summary(c: &StageChanges) -> Summary {
        let mut refused: Vec<String> = c.refused().iter().map(ToString::to_string).collect();
        refused.sort();
        (
            c.written()
                .iter()
                .map(|(p, b)| (p.as_str().to_owned(), b.clone()))
                .collect(),
            c.deleted().iter().map(|p| p.as_str().to_owned()).collect(),
            refused,
        )
    }

    struct TargetScratch;
    impl ScratchRule for TargetScratch {
        fn is_scratch(&self, path: &str) -> bool {
            path.starts_with("target/")
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 128, ..Default::default() })]

        /// For all sequences of calls, each doing anything a command can do to its stage
        /// (write, rewrite in place or through another link, delete, rename, replace, make
        /// and remove trees, plant links, change modes, move directories), the walk of the
        /// names the kernel says were touched finds exactly what a walk of the whole stage
        /// finds, and the reused stage holds exactly its next inputs.
        #[test]
        fn the_walk_of_touched_names_finds_what_a_whole_walk_finds(
            calls in proptest::collection::vec(proptest::collection::vec(op_strategy(), 0..6), 1..6),
        ) {
            let (tmp, store) = setup();
            let first = [(p("out/f0"), b"zero".to_vec()), (p("out/sub/f2"), b"two".to_vec()), (p("top"), b"zero".to_vec())];
            let mut inputs: BTreeMap<AdmittedPath, Vec<u8>> = first.into_iter().collect();
            let staged = |inputs: &BTreeMap<AdmittedPath, Vec<u8>>| -> Vec<(AdmittedPath, Vec<u8>)> {
                inputs.iter().map(|(p, c)| (p.clone(), c.clone())).collect()
            };
            let now = staged(&inputs);
            let mut stage = Stage::prepare(
                tmp.path().join("s"),
                &store,
                now.iter().map(|(p, c)| StageInput::new(p, c)),
            ).unwrap();
            // A first call with nothing done, so the stage is reused and tracked from here on.
            stage.changes(&TargetScratch).unwrap();
            stage = stage.reuse(&store, now.iter().map(|(p, c)| StageInput::new(p, c))).unwrap();
            let mut held_open = Vec::new();
            for ops in &calls {
                let root = stage.root().to_owned();
                let held: Vec<AdmittedPath> = inputs.keys().cloned().collect();
                let mut now_open = Vec::new();
                for op in ops {
                    now_open.extend(apply(&root, &held, op));
                }
                let tracked = stage.changes(&TargetScratch).unwrap();
                // What the last call held is let go once this call's walk is done.
                drop(std::mem::replace(&mut held_open, now_open));
                let whole = stage.changes_whole(&TargetScratch).unwrap();
                proptest::prop_assert_eq!(summary(&tracked), summary(&whole), "after {:?}", ops);
                // What a caller does with changed inputs: their objects may be damaged.
                for path in tracked.written().keys().chain(tracked.deleted()) {
                    if let Some(digest) = stage.input_digest(path) {
                        let _ = store.forget(&digest);
                    }
                }
                // The next call's inputs: this call's output where it was clean.
                if tracked.refused().is_empty() {
                    for path in tracked.deleted() {
                        inputs.remove(path);
                    }
                    for (path, bytes) in tracked.written() {
                        inputs.insert(path.clone(), bytes.clone());
                    }
                    // Owned paths never nest: a file whose directory is also a file is left out.
                    let names: Vec<AdmittedPath> = inputs.keys().cloned().collect();
                    inputs.retain(|p, _| !names.iter().any(|q| q != p && p.as_str().starts_with(&format!("{}/", q.as_str()))));
                }
                let next = staged(&inputs);
                stage = stage.reuse(&store, next.iter().map(|(p, c)| StageInput::new(p, c))).unwrap();
                let fresh = stage.changes_whole(&TargetScratch).unwrap();
                proptest::prop_assert!(
                    fresh.written().is_empty() && fresh.deleted().is_empty() && fresh.refused().is_empty(),
                    "the reused stage is not its inputs: {:?}", fresh
                );
                for (path, bytes) in &next {
                    proptest::prop_assert_eq!(&fs::read(root.join(path.as_str())).unwrap(), bytes);
                }
            }
        }
    }
}
