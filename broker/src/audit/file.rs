//! Opening the audit log's files: never through a symbolic link, never blocking on a FIFO, and
//! never a file another user could have prepared or may change.
//!
//! Every file of the audit trail is opened here. The files the writer appends to or locks (the
//! log and `<log>.lock`) are opened `O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK`, created 0600, and then
//! checked on the open descriptor (`fstat`, so no rename between a check and the open can fool
//! it): a regular file, owned by Mint's effective uid, not writable by group or others. Files
//! that are only read (the end of a rotated predecessor when the chain continues, `mint audit
//! tail`, `mint audit verify`) are opened `O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC` and
//! must be regular files, so a FIFO, a device or a symbolic link planted at a rotated file's
//! name can neither hang Mint nor send it elsewhere.
//!
//! A refusal is an [`io::Error`] carrying an [`UnsafeFile`] (see [`unsafe_file`]): it names the
//! kind of problem only, never anything read from the file.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Why an audit file was refused before anything was read from or written to it.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnsafeFile {
    /// The path is a symbolic link: audit files are never opened through one.
    #[error("it is a symbolic link (audit files are never opened through one)")]
    Symlink,
    /// The path is not a regular file.
    #[error("it is a {kind}, not a regular file")]
    NotRegular {
        /// What it is instead.
        kind: FileKind,
    },
    /// Another user owns the file (the log and its lock file only).
    #[error("it is owned by uid {owner}, not by uid {uid} that Mint runs as")]
    ForeignOwner {
        /// The file's owner.
        owner: u32,
        /// Mint's effective uid.
        uid: u32,
    },
    /// Group or others may write the file (the log and its lock file only).
    #[error("group or others may write it (mode {mode:03o}); run `chmod 600` on it")]
    WritableByOthers {
        /// The file's permission bits.
        mode: u32,
    },
    /// Group or others may write the log's directory: they could rename or delete the log, or
    /// (even with the sticky bit) plant files at its lock or rotated names.
    #[error(
        "group or others may write to it, and so replace or plant audit files (mode {mode:03o}); \
         run `chmod 700` on it"
    )]
    DirectoryWritableByOthers {
        /// The directory's permission bits.
        mode: u32,
    },
    /// Another user (not root) owns the log's directory, and could replace the log.
    #[error("it is owned by uid {owner}, neither root nor uid {uid} that Mint runs as")]
    ForeignDirectory {
        /// The directory's owner.
        owner: u32,
        /// Mint's effective uid.
        uid: u32,
    },
}

/// What a refused path is, when it is not a regular file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A directory.
    Directory,
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// Anything else.
    Other,
}

// === impl FileKind ===

impl FileKind {
    fn of(file_type: fs::FileType) -> FileKind {
        if file_type.is_dir() {
            FileKind::Directory
        } else if file_type.is_fifo() {
            FileKind::Fifo
        } else if file_type.is_socket() {
            FileKind::Socket
        } else if file_type.is_char_device() {
            FileKind::CharDevice
        } else if file_type.is_block_device() {
            FileKind::BlockDevice
        } else {
            FileKind::Other
        }
    }
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileKind::Directory => "directory",
            FileKind::Fifo => "FIFO",
            FileKind::Socket => "socket",
            FileKind::CharDevice => "character device",
            FileKind::BlockDevice => "block device",
            FileKind::Other => "special file",
        })
    }
}

/// The [`UnsafeFile`] behind an error from this module's functions, if that was the reason.
pub(super) fn unsafe_file(error: &io::Error) -> Option<UnsafeFile> {
    error.get_ref()?.downcast_ref::<UnsafeFile>().copied()
}

/// Checks the directory the log is in: owned by Mint's user or root, and not writable by group
/// or others (not even with the sticky bit, as `/tmp`: others could still plant a file at the
/// lock's or a rotated file's name), so that no other user can rename, delete, replace or add
/// audit files there. Follows symbolic links: what matters is the directory the log's name
/// resolves in. Its parents and the links on the way are checked next by
/// `secure_file::check_private_dir`, the walk every file of Mint goes through.
fn check_log_dir(dir: &Path) -> io::Result<()> {
    let meta = fs::metadata(dir)?;
    if !meta.is_dir() {
        return Err(refused(UnsafeFile::NotRegular {
            kind: FileKind::of(meta.file_type()),
        }));
    }
    let uid = rustix::process::geteuid().as_raw();
    if meta.uid() != uid && meta.uid() != 0 {
        return Err(refused(UnsafeFile::ForeignDirectory {
            owner: meta.uid(),
            uid,
        }));
    }
    if meta.mode() & WRITABLE_BY_OTHERS != 0 {
        return Err(refused(UnsafeFile::DirectoryWritableByOthers {
            mode: meta.mode() & 0o7777,
        }));
    }
    Ok(())
}

/// Why the log's directory was refused by [`check_log_location`].
#[derive(Debug)]
pub(super) enum LogDirRefused {
    /// The directory itself ([`check_log_dir`]): an [`io::Error`] that may carry an
    /// [`UnsafeFile`].
    Dir(io::Error),
    /// A directory above it or a symbolic link on the way (`secure_file`'s walk from `/`).
    Walk(crate::config::secure_file::SecureFileError),
}

/// The checks made before anything is created, renamed or locked in the directory `dir` that
/// holds a log: by the writer when `mint serve` opens the log and by `mint audit rotate`, so the
/// two can never accept different places. The directory itself must pass [`check_log_dir`], and
/// every directory above it and every symbolic link on the way
/// `secure_file::check_private_dir`, the walk every file of Mint goes through.
pub(super) fn check_log_location(dir: &Path) -> Result<(), LogDirRefused> {
    check_log_dir(dir).map_err(LogDirRefused::Dir)?;
    crate::config::secure_file::check_private_dir(dir).map_err(LogDirRefused::Walk)
}

/// Opens (or creates, 0600) the log for appending and positioned reads, and checks it.
pub(super) fn open_log(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(OWNED_FILE_MODE)
        .custom_flags(OPEN_FLAGS)
        .open(path)
        .map_err(|error| explain_open_error(path, error))?;
    check_owned(&file)?;
    Ok(file)
}

/// Opens the existing log at `path` for appending, checks it as [`open_log`] does and closes it
/// again: nothing is created or written. `Ok(false)` when there is no log yet; then the log's
/// directory must be writable, for the writer to create it.
pub(super) fn check_log_writable(path: &Path, dir: &Path) -> io::Result<bool> {
    let opened = OpenOptions::new()
        .append(true)
        .custom_flags(OPEN_FLAGS)
        .open(path);
    match opened {
        Ok(file) => {
            check_owned(&file)?;
            Ok(true)
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            rustix::fs::access(dir, rustix::fs::Access::WRITE_OK).map_err(io::Error::from)?;
            Ok(false)
        }
        Err(error) => Err(explain_open_error(path, error)),
    }
}

/// Opens (or creates, 0600) the lock file `<log>.lock` for `flock`, and checks it.
pub(super) fn open_lock(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(OWNED_FILE_MODE)
        .custom_flags(OPEN_FLAGS)
        .open(path)
        .map_err(|error| explain_open_error(path, error))?;
    check_owned(&file)?;
    Ok(file)
}

/// Opens an audit file for reading: the current log or a rotated one. Refuses a symbolic link
/// and anything but a regular file, without blocking on a FIFO.
pub(super) fn open_read(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(OPEN_FLAGS)
        .open(path)
        .map_err(|error| explain_open_error(path, error))?;
    check_regular(&file.metadata()?)?;
    Ok(file)
}

/// A regular file, owned by Mint's effective uid, not writable by group or others.
fn check_owned(file: &File) -> io::Result<()> {
    let meta = file.metadata()?;
    check_regular(&meta)?;
    let uid = rustix::process::geteuid().as_raw();
    if meta.uid() != uid {
        return Err(refused(UnsafeFile::ForeignOwner {
            owner: meta.uid(),
            uid,
        }));
    }
    if meta.mode() & WRITABLE_BY_OTHERS != 0 {
        return Err(refused(UnsafeFile::WritableByOthers {
            mode: meta.mode() & 0o7777,
        }));
    }
    Ok(())
}

fn check_regular(meta: &fs::Metadata) -> io::Result<()> {
    if meta.is_file() {
        Ok(())
    } else {
        Err(refused(UnsafeFile::NotRegular {
            kind: FileKind::of(meta.file_type()),
        }))
    }
}

/// Turns the kernel's answer to opening a symbolic link (`ELOOP` under `O_NOFOLLOW`), a directory
/// for writing (`EISDIR`) or a socket (`ENXIO`) into the problem it stands for. Looks at the path
/// only after the open failed, to word the error; the decision was the kernel's.
fn explain_open_error(path: &Path, error: io::Error) -> io::Error {
    let Some(errno) = error.raw_os_error() else {
        return error;
    };
    if ![libc::ELOOP, libc::EISDIR, libc::ENXIO].contains(&errno) {
        return error;
    }
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => refused(UnsafeFile::Symlink),
        Ok(meta) if !meta.is_file() => refused(UnsafeFile::NotRegular {
            kind: FileKind::of(meta.file_type()),
        }),
        _ => error,
    }
}

fn refused(problem: UnsafeFile) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, problem)
}

/// `O_NOFOLLOW`: never through a symbolic link. `O_NONBLOCK`: opening a FIFO does not wait for
/// a writer (it is then refused as not a regular file; on a regular file the flag changes
/// nothing). `O_CLOEXEC`: no child process inherits the descriptor. `O_NOCTTY`: a terminal
/// device cannot become Mint's controlling terminal before it is refused.
const OPEN_FLAGS: i32 = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
const OWNED_FILE_MODE: u32 = 0o600;
const WRITABLE_BY_OTHERS: u32 = 0o022;

/// Helpers for the tests of the modules that open audit files.
#[cfg(test)]
pub(super) mod testing {
    use std::path::Path;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Runs `open` on another thread and fails the test if it has not returned within seconds:
    /// a FIFO opened without `O_NONBLOCK` would wait for a writer forever.
    #[track_caller]
    pub(crate) fn without_hanging<T: Send + 'static>(
        open: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        let (done, result) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(open());
        });
        match result.recv_timeout(Duration::from_secs(10)) {
            Ok(value) => value,
            Err(_) => panic!("opening did not return: it blocked"),
        }
    }

    /// Creates a named pipe at `path`.
    #[track_caller]
    pub(crate) fn make_fifo(path: &Path) {
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            path,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};
    use std::path::PathBuf;

    use super::testing::{make_fifo, without_hanging};
    use super::*;

    fn problem(result: io::Result<File>) -> UnsafeFile {
        let error = result.expect_err("the file should have been refused");
        unsafe_file(&error).unwrap_or_else(|| panic!("not a refusal: {error}"))
    }

    type Open = fn(&Path) -> io::Result<File>;
    const OPENERS: [(&str, Open); 3] =
        [("log", open_log), ("lock", open_lock), ("read", open_read)];

    fn fresh(dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, b"{}\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        path
    }

    #[test]
    fn refuses_a_symbolic_link_even_to_a_good_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = fresh(dir.path(), "target");
        for (what, open) in OPENERS {
            let link = dir.path().join(format!("link-{what}"));
            symlink(&target, &link).unwrap();
            assert_eq!(problem(open(&link)), UnsafeFile::Symlink, "{what}");
            // A dangling link is refused too: creating through it would write elsewhere.
            let dangling = dir.path().join(format!("dangling-{what}"));
            symlink(dir.path().join(format!("nowhere-{what}")), &dangling).unwrap();
            assert_eq!(problem(open(&dangling)), UnsafeFile::Symlink, "{what}");
            assert!(!dir.path().join(format!("nowhere-{what}")).exists());
        }
        assert_eq!(fs::read(&target).unwrap(), b"{}\n");
    }

    #[test]
    fn refuses_a_fifo_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        for (what, open) in OPENERS {
            let fifo = dir.path().join(format!("fifo-{what}"));
            make_fifo(&fifo);
            let result = without_hanging(move || open(&fifo));
            assert_eq!(
                problem(result),
                UnsafeFile::NotRegular {
                    kind: FileKind::Fifo
                },
                "{what}"
            );
        }
    }

    #[test]
    fn refuses_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        for (what, open) in OPENERS {
            let sub = dir.path().join(format!("dir-{what}"));
            fs::create_dir(&sub).unwrap();
            assert_eq!(
                problem(open(&sub)),
                UnsafeFile::NotRegular {
                    kind: FileKind::Directory
                },
                "{what}"
            );
        }
    }

    #[test]
    fn refuses_a_log_or_lock_that_group_or_others_may_write() {
        let dir = tempfile::tempdir().unwrap();
        for mode in [0o620, 0o602, 0o666] {
            let path = fresh(dir.path(), &format!("log-{mode:o}"));
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            for (what, open) in [("log", open_log as Open), ("lock", open_lock)] {
                assert_eq!(
                    problem(open(&path)),
                    UnsafeFile::WritableByOthers { mode },
                    "{what} {mode:o}"
                );
            }
            // Reading is not writing: `verify` and `tail` may read such a file.
            open_read(&path).unwrap();
        }
        let readable = fresh(dir.path(), "log-644");
        fs::set_permissions(&readable, fs::Permissions::from_mode(0o644)).unwrap();
        open_log(&readable).unwrap();
    }

    #[test]
    fn refuses_a_log_or_lock_owned_by_another_user() {
        let dir = tempfile::tempdir().unwrap();
        let path = fresh(dir.path(), "log");
        let uid = rustix::process::geteuid().as_raw();
        let other = if uid == 0 { 65_534 } else { 0 };
        // Only root can give a file away; as another user, check the accepting side alone.
        if rustix::fs::chown(&path, Some(rustix::fs::Uid::from_raw(other)), None).is_err() {
            open_log(&path).unwrap();
            return;
        }
        for (what, open) in [("log", open_log as Open), ("lock", open_lock)] {
            assert_eq!(
                problem(open(&path)),
                UnsafeFile::ForeignOwner { owner: other, uid },
                "{what}"
            );
        }
        open_read(&path).unwrap();
    }

    #[test]
    fn creates_missing_files_0600() {
        let dir = tempfile::tempdir().unwrap();
        for (what, open) in [("log", open_log as Open), ("lock", open_lock)] {
            let path = dir.path().join(what);
            open(&path).unwrap();
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{what}");
        }
        let error = open_read(&dir.path().join("missing")).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        assert_eq!(unsafe_file(&error), None);
    }

    #[test]
    fn refusals_name_the_problem_only() {
        assert_eq!(
            UnsafeFile::NotRegular {
                kind: FileKind::Fifo
            }
            .to_string(),
            "it is a FIFO, not a regular file"
        );
        assert_eq!(
            UnsafeFile::WritableByOthers { mode: 0o620 }.to_string(),
            "group or others may write it (mode 620); run `chmod 600` on it"
        );
    }
}
