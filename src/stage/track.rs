//! Which names of a reused stage its call touched, told by the kernel (inotify), so the walk
//! after the call visits those names alone instead of every file of the stage.
//!
//! A stage that serves call after call watches every directory that holds its inputs and
//! every input's inode. A change made through any name of an input (a hard link elsewhere
//! included) reaches the inode's watch, and every name created, removed or moved in a watched
//! directory reaches the directory's. What the kernel cannot tell precisely (a full queue, a
//! watched directory removed or moved, a watch that could not be added) makes the tracker
//! incomplete, and the stage is then walked whole, as it always was without one.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

use crate::plan::path::AdmittedPath;

/// What a watched directory reports: every name made, removed, moved or changed in it, and
/// its own removal or move.
fn dir_mask() -> WatchFlags {
    WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::MODIFY
        | WatchFlags::ATTRIB
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR
        | WatchFlags::DONT_FOLLOW
}

/// What an input's inode reports, through whichever name it was reached: its bytes written
/// (a write, a truncation, a writable mapping closed), its attributes, its removal.
fn file_mask() -> WatchFlags {
    WatchFlags::MODIFY
        | WatchFlags::ATTRIB
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::DONT_FOLLOW
}

/// The names a stage's calls touched since it was last armed.
#[derive(Debug)]
pub(crate) struct Tracker {
    fd: OwnedFd,
    /// Watched directories: where each lies in the stage (`""` is the root).
    dirs: HashMap<i32, String>,
    dir_watches: HashMap<String, i32>,
    /// Directories whose watch was checked against what now stands at their name since the
    /// tracker was last armed.
    dirs_checked: HashSet<String>,
    /// Watched inodes: the inputs each holds.
    files: HashMap<i32, Vec<AdmittedPath>>,
    /// Touched names: the directory (as in `dirs`) and the name's raw bytes.
    touched: HashSet<(String, Vec<u8>)>,
    /// Whether `touched` is all that can have changed since the tracker was armed.
    complete: bool,
    /// A watch could not be added: this tracker is never complete again.
    failed: bool,
}

impl Drop for Tracker {
    fn drop(&mut self) {
        // Closing an instance that still watches waits for the kernel to free its watches: a
        // copy left for a process about to end makes this close (the next line's) instant.
        if let Ok(copy) = self.fd.try_clone() {
            crate::fs::unclosed::leave(copy);
        }
    }
}

impl Tracker {
    /// A tracker watching the stage's root at `root`; `None` where the kernel gives none (no inotify, too
    /// many instances), and the stage is walked whole.
    pub(crate) fn new(root: &Path) -> Option<Self> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
        let mut tracker = Self {
            fd,
            dirs: HashMap::new(),
            dir_watches: HashMap::new(),
            dirs_checked: HashSet::new(),
            files: HashMap::new(),
            touched: HashSet::new(),
            complete: false,
            failed: false,
        };
        // The root is watched whatever the stage holds: a stage with no input still sees
        // every name its call makes.
        tracker.watch_dir(root, "");
        Some(tracker)
    }

    /// Watches the input `path` of the stage at `root`: its inode and every directory above
    /// it. Called only where no command runs in the stage, after what a call left was
    /// removed, so no component is a link a call planted (and `DONT_FOLLOW` refuses a last
    /// one).
    pub(crate) fn watch_input(&mut self, root: &Path, path: &AdmittedPath) {
        let rel = path.as_str();
        self.watch_dir(root, "");
        for (slash, _) in rel.match_indices('/') {
            self.watch_dir(root, &rel[..slash]);
        }
        match inotify::add_watch(&self.fd, root.join(rel), file_mask()) {
            Ok(wd) => {
                let held = self.files.entry(wd).or_default();
                if !held.contains(path) {
                    held.push(path.clone());
                }
            }
            Err(_) => self.failed = true,
        }
    }

    /// Watches the directory at `dir`, whatever was watched at that name before. The kernel
    /// tells that a watched directory was removed only once nothing holds it any more (an
    /// open descriptor, a process forked by another thread and not yet past its exec), which
    /// can be long after a directory was made anew at its name; so the watch is added again
    /// rather than assumed, and the kernel answers with the watch it already has when the
    /// directory is the same one.
    fn watch_dir(&mut self, root: &Path, dir: &str) {
        if self.dirs_checked.contains(dir) {
            return;
        }
        match inotify::add_watch(&self.fd, root.join(dir), dir_mask()) {
            Ok(wd) => {
                if let Some(stale) = self.dir_watches.insert(dir.to_owned(), wd)
                    && stale != wd
                {
                    // What that watch reports from now on is about a directory no longer in
                    // the stage.
                    self.dirs.remove(&stale);
                    let _ = inotify::remove_watch(&self.fd, stale);
                }
                self.dirs.insert(wd, dir.to_owned());
                self.dirs_checked.insert(dir.to_owned());
            }
            Err(_) => self.failed = true,
        }
    }

    /// Takes in every event the kernel queued so far.
    fn read_events(&mut self) {
        let mut buf = vec![MaybeUninit::<u8>::uninit(); 64 * 1024];
        let mut noted = Vec::new();
        {
            let mut reader = inotify::Reader::new(&self.fd, &mut buf);
            loop {
                match reader.next() {
                    Ok(event) => noted.push((
                        event.wd(),
                        event.events(),
                        event.file_name().map(|n| n.to_bytes().to_vec()),
                    )),
                    // Drained (EAGAIN), or the queue cannot be read: in either case nothing
                    // more can be learnt from it, and an error leaves the tracker incomplete.
                    Err(rustix::io::Errno::AGAIN) => break,
                    Err(_) => {
                        self.failed = true;
                        break;
                    }
                }
            }
        }
        for (wd, mask, name) in noted {
            self.note(wd, mask, name);
        }
    }

    fn note(&mut self, wd: i32, mask: ReadFlags, name: Option<Vec<u8>>) {
        if mask.contains(ReadFlags::QUEUE_OVERFLOW) {
            self.complete = false;
            return;
        }
        if let Some(dir) = self.dirs.get(&wd).cloned() {
            if mask.intersects(
                ReadFlags::DELETE_SELF
                    | ReadFlags::MOVE_SELF
                    | ReadFlags::IGNORED
                    | ReadFlags::UNMOUNT,
            ) {
                // The directory is gone from where the map says it is: names made in what now
                // stands there would go unseen, so the next walk is whole and the tracker is
                // armed anew.
                self.complete = false;
                self.dirs.remove(&wd);
                if self.dir_watches.get(&dir) == Some(&wd) {
                    self.dir_watches.remove(&dir);
                }
                self.dirs_checked.remove(&dir);
                let _ = inotify::remove_watch(&self.fd, wd);
                return;
            }
            if mask.contains(ReadFlags::ISDIR | ReadFlags::MOVED_FROM) {
                // A directory moved away takes watched directories' names with it.
                self.complete = false;
            }
            if let Some(name) = name {
                self.touched.insert((dir, name));
            }
            return;
        }
        if let Some(paths) = self.files.get(&wd) {
            for path in paths {
                let rel = path.as_str();
                let (dir, name) = match rel.rfind('/') {
                    Some(slash) => (&rel[..slash], &rel[slash + 1..]),
                    None => ("", rel),
                };
                self.touched
                    .insert((dir.to_owned(), name.as_bytes().to_vec()));
            }
            if mask.contains(ReadFlags::IGNORED) {
                self.files.remove(&wd);
            }
        }
    }

    /// Takes in what the kernel queued so far, so the watches known are the watches held.
    pub(crate) fn catch_up(&mut self) {
        self.read_events();
    }

    /// Forgets what was touched so far (kleene's own changes while it reset the stage) and
    /// starts telling what the next call touches.
    pub(crate) fn arm(&mut self) {
        self.read_events();
        self.touched.clear();
        self.dirs_checked.clear();
        self.complete = !self.failed;
    }

    /// Every name touched since [`arm`](Self::arm), by directory; `None` when the tracker
    /// cannot tell (the stage must be walked whole).
    pub(crate) fn touched(&mut self) -> Option<&HashSet<(String, Vec<u8>)>> {
        self.read_events();
        (self.complete && !self.failed).then_some(&self.touched)
    }
}
