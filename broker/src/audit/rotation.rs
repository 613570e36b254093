//! Where rotated audit logs go, how they are found again, and `mint audit rotate`.
//!
//! A log `audit.log` is rotated by renaming it to `audit.log.N`, where N is one more than the
//! highest number already present: `audit.log.1` is the oldest file, and the current
//! `audit.log` always comes last. Renaming never replaces an existing file (`RENAME_NOREPLACE`,
//! or a hard link then an unlink where the file system lacks it), so no rotated file can ever
//! be overwritten, and a crash in the middle leaves every record under some name.
//!
//! The writer rotates by itself at the size bound. `mint audit rotate` renames the current file
//! the same way; a running writer notices within one flusher tick that the path now names
//! another file (or none), flushes the renamed file, and starts a new one at the path, chained
//! from the last line it wrote. Records written in between land in the renamed file, still in
//! chain order, so none is lost or mis-chained. Nothing here ever deletes or truncates a file,
//! and nothing here renames or locks through a symbolic link: the lock file is opened like the
//! log (see `audit::file`), and `mint audit rotate` refuses a log that is not a regular file.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{CWD, FlockOperation, RenameFlags};

use super::file::{
    LogDirRefused, UnsafeFile, check_log_location, open_lock, open_read, unsafe_file,
};

/// The lock file next to `log` (`audit.log.lock`): the writer holds an exclusive `flock` on it
/// for as long as the log is open, so two processes can never append to one chain.
pub fn lock_path(log: &Path) -> PathBuf {
    sibling(log, ".lock")
}

/// The rotated predecessors of `log`, oldest first: every `<name>.<N>` next to it, N a positive
/// decimal number without leading zeros, sorted by N.
pub fn rotated_files(log: &Path) -> io::Result<Vec<PathBuf>> {
    Ok(rotated_numbers(log)?
        .into_iter()
        .map(|n| numbered(log, n))
        .collect())
}

/// The current log and its rotated predecessors, in chain order (oldest first), keeping only
/// the files that exist. This is what `mint audit verify` reads when given no file.
pub fn log_set(log: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files = rotated_files(log)?;
    // A symbolic link at the path is listed, so that reading it is refused rather than skipped.
    match fs::symlink_metadata(log) {
        Ok(_) => files.push(log.to_path_buf()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    Ok(files)
}

/// Renames `log` to the next free `<name>.<N>` without ever replacing a file, and makes the
/// rename durable (directory fsync). Returns the new name.
pub fn rename_to_next(log: &Path) -> io::Result<PathBuf> {
    let mut next = rotated_numbers(log)?.last().copied().unwrap_or(0) + 1;
    for _ in 0..RENAME_ATTEMPTS {
        let target = numbered(log, next);
        match rename_noreplace(log, &target) {
            Ok(()) => {
                sync_dir(log)?;
                return Ok(target);
            }
            // Someone took that number between the listing and the rename: try the next one.
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => next += 1,
            Err(error) => return Err(error),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free rotated file name",
    ))
}

/// Fsyncs the directory holding `path`, so a rename or a new file there survives a power loss.
pub fn sync_dir(path: &Path) -> io::Result<()> {
    File::open(parent(path))?.sync_all()
}

/// The result of `mint audit rotate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RotateOutcome {
    /// The log was renamed; no writer was running, so the next one starts a new file.
    Rotated {
        /// Where the rotated file now is.
        to: PathBuf,
    },
    /// The log was renamed and the running writer has started a new file at the path.
    RotatedLive {
        /// Where the rotated file now is.
        to: PathBuf,
    },
    /// The log was renamed but the running writer had not started a new file within the wait;
    /// it keeps appending to the renamed file, in chain order, until it notices.
    RotatedPending {
        /// Where the rotated file now is.
        to: PathBuf,
    },
    /// The log is empty or absent: nothing to rotate.
    NothingToRotate,
}

/// Why `mint audit rotate` refused or failed. Names files and kinds of problems only.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RotateError {
    /// The log ends with an incomplete line (a crash during a write); the writer recovers it
    /// when it next opens the log, and only then may the file be rotated.
    #[error(
        "`{}` ends with an incomplete line; start the broker once to recover it, or run \
         `mint audit verify`",
        path.display()
    )]
    TornTail {
        /// The log.
        path: PathBuf,
    },
    /// The log or its lock file is a symbolic link, not a regular file, another user's, or
    /// (lock file) writable by group or others.
    #[error("refusing audit file `{}`: {problem}", path.display())]
    Unsafe {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: UnsafeFile,
    },
    /// A directory above the log's, or a symbolic link on the way to it, could be changed by
    /// another user: the same refusal as when `mint serve` opens the log.
    #[error(transparent)]
    UnsafeDirectory(#[from] crate::config::secure_file::SecureFileError),
    /// An I/O failure.
    #[error("cannot {action} `{}`", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: io::Error,
    },
}

/// Rotates `log` now (`mint audit rotate`): renames it to the next `<name>.<N>`. When a writer
/// holds the log, waits up to `wait` for it to start the new file. A log whose last line is
/// incomplete is refused only when no writer holds it (a crash's; see [`RotateError::TornTail`]).
pub fn rotate(log: &Path, wait: Duration) -> Result<RotateOutcome, RotateError> {
    let io_error = |action, path: &Path| {
        let path = path.to_path_buf();
        move |source: io::Error| match unsafe_file(&source) {
            Some(problem) => RotateError::Unsafe { path, problem },
            None => RotateError::Io {
                action,
                path,
                source,
            },
        }
    };
    // The directory is checked as the writer checks it when `mint serve` opens the log: a
    // rename (and a lock file created) in a directory another user may write, or under a parent
    // another user owns, could hand the rotated records to that user.
    let dir = parent(log);
    match check_log_location(dir) {
        Ok(()) => {}
        Err(LogDirRefused::Dir(source)) if source.kind() == io::ErrorKind::NotFound => {
            return Ok(RotateOutcome::NothingToRotate);
        }
        Err(LogDirRefused::Dir(source)) => return Err(io_error("check", dir)(source)),
        Err(LogDirRefused::Walk(source)) => return Err(RotateError::UnsafeDirectory(source)),
    }
    let file = match open_read(log) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Ok(RotateOutcome::NothingToRotate);
        }
        Err(error) => return Err(io_error("open", log)(error)),
    };
    let meta = file.metadata().map_err(io_error("inspect", log))?;
    if meta.len() == 0 {
        return Ok(RotateOutcome::NothingToRotate);
    }
    // Holding the lock while renaming keeps a writer from starting in between; if a writer
    // already holds it, the writer notices the rename on its own.
    let lock = try_lock(&lock_path(log)).map_err(io_error("lock", &lock_path(log)))?;
    let writer_running = lock.is_none();
    // A torn last line is a crash's only without a writer: a running writer may be in the middle
    // of a write (the file's size grows page by page while a batch is copied in), and that
    // write ends in the renamed file, the same inode; a writer recovers a crash's torn line
    // when it opens the log, so one that runs has done so.
    if !writer_running {
        let mut last = [0u8; 1];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut last, meta.len() - 1)
            .map_err(io_error("read", log))?;
        if last != [b'\n'] {
            return Err(RotateError::TornTail {
                path: log.to_path_buf(),
            });
        }
    }
    let to = rename_to_next(log).map_err(io_error("rename", log))?;
    drop(lock);
    if !writer_running {
        return Ok(RotateOutcome::Rotated { to });
    }
    let deadline = Instant::now() + wait;
    loop {
        match fs::symlink_metadata(log) {
            Ok(now) if (now.dev(), now.ino()) != (meta.dev(), meta.ino()) => {
                return Ok(RotateOutcome::RotatedLive { to });
            }
            _ if Instant::now() >= deadline => return Ok(RotateOutcome::RotatedPending { to }),
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Tries to take the exclusive lock on `lock` without waiting. `Ok(None)` when another process
/// holds it; the returned file holds the lock until dropped. Creates the lock file (0600) if
/// it is missing; refuses a symbolic link, anything but a regular file, and a file another user
/// owns or group or others may write (the error then carries an [`UnsafeFile`]).
pub fn try_lock(lock: &Path) -> io::Result<Option<File>> {
    let file = open_lock(lock)?;
    match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(file)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(errno) => Err(errno.into()),
    }
}

/// Renames without replacing: `renameat2(RENAME_NOREPLACE)`, or where the file system does not
/// support it, a hard link (which fails on an existing name) followed by an unlink.
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    match rustix::fs::renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
            fs::hard_link(from, to)?;
            fs::remove_file(from)
        }
        Err(errno) => Err(errno.into()),
    }
}

fn rotated_numbers(log: &Path) -> io::Result<Vec<u64>> {
    let Some(name) = log.file_name() else {
        return Ok(Vec::new());
    };
    let mut prefix = name.as_encoded_bytes().to_vec();
    prefix.push(b'.');
    let mut numbers = Vec::new();
    let entries = match fs::read_dir(parent(log)) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(numbers),
        Err(error) => return Err(error),
    };
    for entry in entries {
        let entry = entry?;
        let entry_name = entry.file_name();
        let Some(digits) = entry_name
            .as_encoded_bytes()
            .strip_prefix(prefix.as_slice())
        else {
            continue;
        };
        if let Some(n) = parse_number(digits) {
            numbers.push(n);
        }
    }
    numbers.sort_unstable();
    Ok(numbers)
}

/// A positive decimal number without leading zeros or sign.
fn parse_number(digits: &[u8]) -> Option<u64> {
    if digits.is_empty()
        || digits.len() > 18
        || digits.first() == Some(&b'0')
        || !digits.iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

fn numbered(log: &Path, n: u64) -> PathBuf {
    sibling(log, &format!(".{n}"))
}

fn sibling(log: &Path, suffix: &str) -> PathBuf {
    let mut name: OsString = log.file_name().map(OsString::from).unwrap_or_default();
    name.push(suffix);
    log.with_file_name(name)
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

const RENAME_ATTEMPTS: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_numbered_predecessors_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.log");
        for name in [
            "audit.log.10",
            "audit.log.2",
            "audit.log.1",
            "audit.log.01",
            "audit.log.x",
            "audit.log.lock",
            "audit.log.",
            "other.log.3",
        ] {
            fs::write(dir.path().join(name), b"").unwrap();
        }
        let names: Vec<String> = rotated_files(&log)
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["audit.log.1", "audit.log.2", "audit.log.10"]);
        assert_eq!(log_set(&log).unwrap().len(), 3);
        fs::write(&log, b"").unwrap();
        assert_eq!(log_set(&log).unwrap().last().unwrap(), &log);
    }

    #[test]
    fn rename_to_next_never_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.log");
        fs::write(&log, b"first\n").unwrap();
        assert_eq!(
            rename_to_next(&log).unwrap(),
            dir.path().join("audit.log.1")
        );
        fs::write(&log, b"second\n").unwrap();
        assert_eq!(
            rename_to_next(&log).unwrap(),
            dir.path().join("audit.log.2")
        );
        assert_eq!(
            fs::read(dir.path().join("audit.log.1")).unwrap(),
            b"first\n"
        );
        assert_eq!(
            fs::read(dir.path().join("audit.log.2")).unwrap(),
            b"second\n"
        );
        let error = rename_noreplace(
            &dir.path().join("audit.log.1"),
            &dir.path().join("audit.log.2"),
        )
        .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::AlreadyExists);
    }

    #[test]
    fn rotate_without_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.log");
        assert_eq!(
            rotate(&log, Duration::ZERO).unwrap(),
            RotateOutcome::NothingToRotate
        );
        fs::write(&log, b"").unwrap();
        assert_eq!(
            rotate(&log, Duration::ZERO).unwrap(),
            RotateOutcome::NothingToRotate
        );
        fs::write(&log, b"torn").unwrap();
        assert!(matches!(
            rotate(&log, Duration::ZERO),
            Err(RotateError::TornTail { .. })
        ));
        fs::write(&log, b"whole\n").unwrap();
        assert_eq!(
            rotate(&log, Duration::ZERO).unwrap(),
            RotateOutcome::Rotated {
                to: dir.path().join("audit.log.1")
            }
        );
        assert!(!log.exists());
    }

    #[test]
    fn a_running_writer_mid_write_is_rotated_not_refused() {
        // The soak's rotations raced a batch being written: the size read ended mid-line.
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.log");
        fs::write(&log, b"whole\nhalf of a li").unwrap();
        let writer = try_lock(&lock_path(&log)).unwrap().expect("lock free");
        assert_eq!(
            rotate(&log, Duration::ZERO).unwrap(),
            RotateOutcome::RotatedPending {
                to: dir.path().join("audit.log.1")
            }
        );
        drop(writer);
    }
}
