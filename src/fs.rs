//! Durable file replacement: what a store needs so a crash leaves the old bytes or the new,
//! never a mix.
//!
//! ```text
//! open_dir(dir)?;                    // removes what an interrupted replace left
//! replace_file(dir, &path, bytes)?;  // temp file, fsync, rename, fsync of dir
//! ```

pub(crate) mod unclosed;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

const TEMP_SUFFIX: &str = ".tmp";

/// A failed file-system operation and the file or directory it was on; each user (the
/// journal) wraps it in its own error type.
pub(crate) type IoFailure = (PathBuf, io::Error);

/// Creates `dir` if needed and removes the temp files an interrupted [`replace_file`] left
/// in it (a journal owns its directory).
pub(crate) fn open_dir(dir: &Path) -> Result<(), IoFailure> {
    create_dir_durably(dir)?;
    for entry in fs::read_dir(dir).map_err(at(dir))? {
        let path = entry.map_err(at(dir))?.path();
        if path.to_string_lossy().ends_with(TEMP_SUFFIX) {
            fs::remove_file(&path).map_err(at(&path))?;
        }
    }
    Ok(())
}

/// Replaces `path` (in `dir`) with `bytes` atomically: a temp file beside it, fsync, rename,
/// then fsync of `dir`, since the rename is durable only once the directory entry is.
pub(crate) fn replace_file(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), IoFailure> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(TEMP_SUFFIX);
    let tmp = PathBuf::from(tmp);
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(at(&tmp))?;
    file.write_all(bytes).map_err(at(&tmp))?;
    file.sync_all().map_err(at(&tmp))?;
    drop(file);
    fs::rename(&tmp, path).map_err(at(path))?;
    sync_dir(dir)
}

/// Names `path` as the place an I/O error happened.
fn at(path: &Path) -> impl FnOnce(io::Error) -> IoFailure + '_ {
    move |e| (path.to_owned(), e)
}

/// Makes `dir`'s entries (a new or renamed file) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), IoFailure> {
    #[cfg(test)]
    SYNCED_DIRS.with(|synced| synced.borrow_mut().push(dir.to_owned()));
    File::open(dir).and_then(|d| d.sync_all()).map_err(at(dir))
}

/// Creates `dir` and whichever of its ancestors are missing, syncing each new directory's
/// parent: a directory made durable by a sync of its own, or of a file in it, can still
/// vanish in a power loss while the entry that names it is not.
pub(crate) fn create_dir_durably(dir: &Path) -> Result<(), IoFailure> {
    let mut missing = Vec::new();
    let mut at_or_above = dir;
    // A bare relative name's parent is the empty path, the current directory: there the walk
    // ends (it cannot be made, and `symlink_metadata("")` fails as if it were missing).
    while !at_or_above.as_os_str().is_empty() && fs::symlink_metadata(at_or_above).is_err() {
        missing.push(at_or_above);
        match at_or_above.parent() {
            Some(parent) => at_or_above = parent,
            None => break,
        }
    }
    for made in missing.into_iter().rev() {
        match fs::create_dir(made) {
            Ok(()) => {}
            // Another process made it meanwhile: its entry is that process's to sync.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err((made.to_owned(), e)),
        }
        let parent = match made.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        match sync_dir(parent) {
            // A directory one may write in but not read (mode -wx) cannot be opened to sync:
            // its entry is as durable as its file system makes it, as it was before.
            Err((_, e)) if e.kind() == io::ErrorKind::PermissionDenied => {}
            synced => synced?,
        }
    }
    if fs::metadata(dir).map_err(at(dir))?.is_dir() {
        Ok(())
    } else {
        Err((dir.to_owned(), rustix::io::Errno::NOTDIR.into()))
    }
}

#[cfg(test)]
thread_local! {
    /// The directories `sync_dir` synced on this thread, oldest first.
    static SYNCED_DIRS: std::cell::RefCell<Vec<PathBuf>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Takes the directories synced on this thread since the last call.
#[cfg(test)]
pub(crate) fn take_synced_dirs() -> Vec<PathBuf> {
    SYNCED_DIRS.with(|synced| std::mem::take(&mut *synced.borrow_mut()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bare relative name (`state`, as a library user writes it) is made in the current
    /// directory: its parent, the empty path, is not a directory to make. It runs again in a
    /// child process of this test binary, alone there, since it changes the current directory.
    #[test]
    fn a_bare_relative_name_is_made_in_the_current_directory() {
        const NAME: &str = "fs::tests::a_bare_relative_name_is_made_in_the_current_directory";
        if let Some(dir) = std::env::var_os("KLEENE_FS_TEST_CWD") {
            std::env::set_current_dir(dir).unwrap();
            create_dir_durably(Path::new("state")).unwrap();
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--test-threads=1"])
            .env("KLEENE_FS_TEST_CWD", dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(dir.path().join("state").is_dir());
    }

    #[test]
    fn files_are_replaced_atomically_and_torn_temp_files_removed() {
        let dir = std::env::temp_dir().join(format!("kleene-files-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        open_dir(&dir).unwrap();
        let path = dir.join("state.ckpt");
        replace_file(&dir, &path, b"first").unwrap();
        // A crash mid-replace leaves a truncated temp file; the last good content stands.
        let tmp = path.with_extension("ckpt.tmp");
        fs::write(&tmp, b"sec").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"first");
        open_dir(&dir).unwrap();
        assert!(!tmp.exists());
        replace_file(&dir, &path, b"second").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_directory_made_is_named_durably_in_its_parent() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().to_owned();
        let deep = base.join("a").join("b").join("c");
        take_synced_dirs();
        open_dir(&deep).unwrap();
        assert!(deep.is_dir());
        assert_eq!(
            take_synced_dirs(),
            [base.clone(), base.join("a"), base.join("a").join("b")]
        );
        // Opening it again makes nothing and syncs nothing.
        open_dir(&deep).unwrap();
        assert_eq!(take_synced_dirs(), Vec::<PathBuf>::new());
    }

    #[test]
    fn a_directory_made_in_one_that_cannot_be_read_is_still_made() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().to_owned();
        fs::set_permissions(&base, fs::Permissions::from_mode(0o333)).unwrap();
        let made = create_dir_durably(&base.join("journal"));
        fs::set_permissions(&base, fs::Permissions::from_mode(0o755)).unwrap();
        made.unwrap();
        assert!(base.join("journal").is_dir());
    }

    #[test]
    fn a_file_where_the_directory_should_be_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("f");
        fs::write(&file, b"x").unwrap();
        for below in [file.clone(), file.join("g")] {
            let (path, err) = create_dir_durably(&below).unwrap_err();
            assert_eq!(
                err.kind(),
                io::ErrorKind::NotADirectory,
                "{}",
                path.display()
            );
        }
        assert_eq!(create_dir_durably(&file).unwrap_err().0, file);
    }
}
