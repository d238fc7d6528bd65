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
    fs::create_dir_all(dir).map_err(at(dir))?;
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
    File::open(dir).and_then(|d| d.sync_all()).map_err(at(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
