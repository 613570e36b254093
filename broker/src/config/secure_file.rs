//! Safe writing of Mint's state files, and the permission checks on the files Mint reads.
//!
//! Every file Mint writes (the alias and capability files, the files `mint init` creates) goes
//! through here: a temporary file in the same directory, created 0600 with `O_EXCL` and
//! `O_NOFOLLOW`, written, fsynced, renamed over the target (or hard-linked, when an existing file
//! must never be replaced), and the directory fsynced. A crash leaves the old file or the new one,
//! never a mix. Read-modify-write commands hold [`DirLock`] (a lock file beside the file they
//! change, in a directory only Mint's user can write) so two of them cannot lose each other's
//! change; waiting for it is bounded.
//!
//! [`open_trusted`] is the gate in front of every file Mint reads its configuration from (policy,
//! aliases, capabilities, `file:` secrets) and [`check_private_dir`] in front of every directory it
//! writes in (`MINT_HOME` at `mint init`, the audit log's directory). Both resolve the path one
//! component at a time from `/`, on open descriptors (`openat` with `O_PATH | O_NOFOLLOW`), the way
//! OpenSSH's StrictModes checks a user's files: every directory passed through and every symbolic
//! link followed must be owned by root or Mint's user and not writable by group or others (a
//! directory with the sticky bit, such as `/tmp`, may be passed through: others cannot rename what
//! Mint's user or root owns in it), and the directory that finally holds the file must not be
//! writable by group or others at all. The file is then opened from that directory without
//! following a link and judged on its descriptor (`fstat`): a regular file, owned by Mint's user or
//! root, not writable by group or others, and the very inode that was checked. No path is looked up
//! twice, so no rename between a check and the open can slip another file in. A refusal names the
//! path and the fix. Nothing here logs or returns a file's contents.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{FileType, Mode, OFlags};

/// The mode of every file Mint writes: read and write for its owner only.
pub const FILE_MODE: u32 = 0o600;

/// The mode of a file Mint writes for others to read (the interception CA's certificate).
pub const PUBLIC_FILE_MODE: u32 = 0o644;

/// The mode of `MINT_HOME`: its owner only.
pub const DIR_MODE: u32 = 0o700;

/// Why a state file could not be checked, written or locked. Messages name the file and, for
/// permission problems, the command that fixes them; they never hold the file's contents.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecureFileError {
    /// Group or others may write the file (or directory).
    #[error(
        "`{path}` is writable by group or others, so another user could change what Mint does; \
         run `chmod {mode} {path}`",
        path = path.display(),
        mode = if *is_dir { "700" } else { "600" }
    )]
    WritableByOthers {
        /// The file or directory.
        path: PathBuf,
        /// Whether it is a directory (the fix is then `chmod 700`).
        is_dir: bool,
    },
    /// Another user (not root) owns the file and could change it at any time.
    #[error(
        "`{path}` is owned by uid {owner}, not by the user Mint runs as (uid {uid}) or root; \
         run `chown {uid} {path}`",
        path = path.display()
    )]
    ForeignOwner {
        /// The file or directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// Mint's effective uid.
        uid: u32,
    },
    /// A directory on the way to the file is open to other users, who could replace the file (or
    /// a directory above it) with their own.
    #[error(
        "`{dir}` is writable by group or others (mode {mode:04o}), so another user could replace \
         `{file}` under it; run `chmod go-w {dir}`, or keep Mint's files in directories that only \
         root and uid {uid} can write",
        dir = dir.display(),
        file = file.display()
    )]
    DirectoryWritableByOthers {
        /// The directory.
        dir: PathBuf,
        /// The file (or directory) Mint was reaching.
        file: PathBuf,
        /// The directory's permission bits.
        mode: u32,
        /// Mint's effective uid.
        uid: u32,
    },
    /// A directory on the way to the file, or a symbolic link followed, belongs to another user,
    /// who could replace what it leads to.
    #[error(
        "`{dir}` is owned by uid {owner}, so that user could replace `{file}`; Mint trusts only \
         what root or uid {uid} owns: run `chown {uid} {dir}`, or keep Mint's files elsewhere",
        dir = dir.display(),
        file = file.display()
    )]
    ForeignDirectory {
        /// The directory or symbolic link.
        dir: PathBuf,
        /// The file (or directory) Mint was reaching.
        file: PathBuf,
        /// Its owner.
        owner: u32,
        /// Mint's effective uid.
        uid: u32,
    },
    /// The file was replaced between its check and its opening.
    #[error("`{}` was replaced while Mint was checking it; nothing was read", path.display())]
    Changed {
        /// The file.
        path: PathBuf,
    },
    /// Resolving the path followed too many symbolic links.
    #[error("`{}`: too many levels of symbolic links", path.display())]
    TooManyLinks {
        /// The path.
        path: PathBuf,
    },
    /// Another process held the lock for longer than Mint waits.
    #[error(
        "another process has held the lock `{}` for {waited_s} s; nothing was changed (if no other \
         `mint` command is running, `fuser {}` shows who holds it)",
        path.display(),
        path.display()
    )]
    LockBusy {
        /// The lock file.
        path: PathBuf,
        /// How long Mint waited, in seconds.
        waited_s: u64,
    },
    /// The file must not exist yet, and does.
    #[error("`{}` already exists; Mint never overwrites it", path.display())]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// A file was expected and something else is there.
    #[error("`{}` is not a regular file", path.display())]
    NotRegularFile {
        /// The path.
        path: PathBuf,
    },
    /// The file or directory could not be inspected, written, renamed or locked.
    #[error("cannot {action} `{}`", path.display())]
    Io {
        /// What Mint was doing: `read`, `write`, `lock`, `create directory`.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: io::Error,
    },
}

// === impl SecureFileError ===

impl SecureFileError {
    fn io<'a>(
        action: &'static str,
        path: &'a Path,
    ) -> impl FnOnce(io::Error) -> SecureFileError + 'a {
        move |source| SecureFileError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }

    /// Whether the error means that nothing exists at the path.
    pub fn is_not_found(&self) -> bool {
        matches!(self, SecureFileError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// An exclusive lock held while a command reads, changes and rewrites a file, so two commands
/// cannot lose each other's change. It is an `flock` on the lock file `.NAME.lock` beside the file
/// `NAME`, in a directory that only Mint's user (or root) may write: no other user can create,
/// replace or hold it. Waiting for it is bounded by [`LOCK_WAIT`]. Released when dropped.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

// === impl DirLock ===

impl DirLock {
    /// Locks `file` for a change, waiting at most [`LOCK_WAIT`] for another Mint command to
    /// finish. Refuses a directory that group or others may write (they could hold the lock
    /// forever, or plant one) and a lock file Mint's user does not own alone.
    pub fn for_file(file: &Path) -> Result<DirLock, SecureFileError> {
        DirLock::for_file_within(file, LOCK_WAIT)
    }

    /// [`DirLock::for_file`] with another bound on the wait.
    pub fn for_file_within(file: &Path, wait: Duration) -> Result<DirLock, SecureFileError> {
        let dir = parent_dir(file);
        let name = file
            .file_name()
            .ok_or_else(|| SecureFileError::NotRegularFile {
                path: file.to_path_buf(),
            })?;
        let mut lock_name = OsString::from(".");
        lock_name.push(name);
        lock_name.push(".lock");
        let path = dir.join(&lock_name);
        let dir_fd = open_dir_checked(dir)?;
        let fd = rustix::fs::openat(
            &dir_fd,
            Path::new(&lock_name),
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::from_raw_mode(FILE_MODE),
        )
        .map_err(|e| SecureFileError::io("lock", &path)(e.into()))?;
        let lock = File::from(fd);
        let metadata = lock
            .metadata()
            .map_err(SecureFileError::io("lock", &path))?;
        if !metadata.is_file() {
            return Err(SecureFileError::NotRegularFile { path });
        }
        let uid = effective_uid();
        if metadata.uid() != uid {
            return Err(SecureFileError::ForeignOwner {
                path,
                owner: metadata.uid(),
                uid,
            });
        }
        if metadata.mode() & 0o077 != 0 {
            // Whoever can open it can hold it.
            return Err(SecureFileError::WritableByOthers {
                path,
                is_dir: false,
            });
        }
        let started = Instant::now();
        loop {
            match rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(DirLock { _file: lock }),
                Err(rustix::io::Errno::WOULDBLOCK) if started.elapsed() < wait => {
                    std::thread::sleep(LOCK_POLL);
                }
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    return Err(SecureFileError::LockBusy {
                        path,
                        waited_s: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
                    });
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(SecureFileError::io("lock", &path)(e.into())),
            }
        }
    }
}

/// Mint's effective user id: the owner every file it acts on must have (or root).
pub fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// A configuration file opened by [`open_trusted`], judged on its descriptor.
#[derive(Debug)]
pub struct TrustedFile {
    /// The open file, positioned at its start.
    pub file: File,
    /// What `fstat` said of it when it was checked.
    pub metadata: fs::Metadata,
    /// The path it really lives at, with every symbolic link resolved.
    pub resolved: PathBuf,
}

/// The identity of one version of a file, as far as its metadata tells: device, inode, size,
/// modification and change times (nanoseconds). Two versions written within one timestamp tick
/// still differ in size or change time in practice; a reload also re-checks it on the descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

// === impl FileStamp ===

impl FileStamp {
    /// The stamp of `metadata` (from `fstat` or `stat`).
    pub fn of(metadata: &fs::Metadata) -> FileStamp {
        FileStamp {
            dev: metadata.dev(),
            ino: metadata.ino(),
            size: metadata.size(),
            mtime: (metadata.mtime(), metadata.mtime_nsec()),
            ctime: (metadata.ctime(), metadata.ctime_nsec()),
        }
    }

    /// Whether both stamps are of one file (device and inode), whatever its contents.
    pub fn same_file(&self, other: &FileStamp) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino)
    }

    /// The stamp of what `path` names now (following symbolic links).
    pub fn at(path: &Path) -> io::Result<FileStamp> {
        fs::metadata(path).map(|m| FileStamp::of(&m))
    }

    /// The stamp of the open `file` now.
    pub fn of_file(file: &File) -> io::Result<FileStamp> {
        file.metadata().map(|m| FileStamp::of(&m))
    }

    /// Whether `after`, read from the same descriptor once its contents were read, shows that
    /// nothing changed them: the same stamp, or only the change time moved because the file lost
    /// its last name. A writer that replaces the file with `rename` (as Mint and editors do)
    /// unlinks the old inode, which moves its change time; what was read is then a whole earlier
    /// version, not a half-written one.
    pub fn unchanged_in(&self, after: &fs::Metadata) -> bool {
        let now = FileStamp::of(after);
        now == *self
            || (after.nlink() == 0
                && FileStamp {
                    ctime: self.ctime,
                    ..now
                } == *self)
    }
}

/// Opens the configuration file `path` for reading, deciding on open descriptors only (see the
/// module header): every directory on its way and every symbolic link followed must be owned by
/// root or Mint's user and closed to writing by group and others (sticky directories excepted
/// above the last), the directory holding it must not be writable by group or others at all, and
/// the file must be a regular file owned by root or Mint's user that group and others cannot
/// write. Never blocks on a FIFO.
///
/// A name replaced between the check and the open (an atomic `rename` by a writer such as
/// `mint cap issue`, or an editor's save) is resolved and checked again from the start, up to
/// 4 times in all: each attempt is checked whole, so a retry never trusts what the one
/// before it saw, and a name that keeps changing is refused as [`SecureFileError::Changed`].
pub fn open_trusted(path: &Path) -> Result<TrustedFile, SecureFileError> {
    open_trusted_with(path, true, &mut |_| ())
}

/// [`open_trusted`] without its checks of the file's own owner and mode, for a caller that applies
/// stricter ones to [`TrustedFile::metadata`] (`file:` secrets: owned by Mint's user, 0600).
pub fn open_in_trusted_dirs(path: &Path) -> Result<TrustedFile, SecureFileError> {
    open_trusted_with(path, false, &mut |_| ())
}

/// [`open_trusted`] with a hook run between the file's check and its opening for reading, on every
/// attempt (tests swap the file there to prove the swap is caught).
fn open_trusted_with(
    path: &Path,
    check_file: bool,
    between: &mut dyn FnMut(&Path),
) -> Result<TrustedFile, SecureFileError> {
    let mut attempt = 1;
    loop {
        match open_trusted_once(path, check_file, between) {
            Err(SecureFileError::Changed { .. }) if attempt < OPEN_ATTEMPTS => attempt += 1,
            done => return done,
        }
    }
}

/// One attempt of [`open_trusted_with`]: resolve and check, then open the checked name and refuse
/// it as [`SecureFileError::Changed`] unless the descriptor is the inode that was checked.
fn open_trusted_once(
    path: &Path,
    check_file: bool,
    between: &mut dyn FnMut(&Path),
) -> Result<TrustedFile, SecureFileError> {
    let found = resolve(path, Target::File)?;
    let Resolved {
        dir,
        dir_path,
        dir_mode,
        name,
        fd,
        stat,
    } = found;
    let resolved = dir_path.join(&name);
    let uid = effective_uid();
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => {}
        FileType::Directory => {
            return Err(SecureFileError::io("read", path)(io::Error::from(
                io::ErrorKind::IsADirectory,
            )));
        }
        _ => {
            return Err(SecureFileError::NotRegularFile {
                path: path.to_path_buf(),
            });
        }
    }
    if dir_mode & WRITABLE_BY_OTHERS != 0 {
        return Err(SecureFileError::DirectoryWritableByOthers {
            dir: dir_path,
            file: path.to_path_buf(),
            mode: dir_mode & 0o7777,
            uid,
        });
    }
    if check_file {
        check_owner_mode(path, stat.st_uid, stat.st_mode, false)?;
    }
    drop(fd);
    between(&resolved);
    let read = rustix::fs::openat(
        &dir,
        Path::new(&name),
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP => SecureFileError::Changed {
            path: path.to_path_buf(),
        },
        e => SecureFileError::io("read", path)(e.into()),
    })?;
    let file = File::from(read);
    let metadata = file.metadata().map_err(SecureFileError::io("read", path))?;
    if metadata.dev() != stat.st_dev || metadata.ino() != stat.st_ino {
        return Err(SecureFileError::Changed {
            path: path.to_path_buf(),
        });
    }
    // Checked again on the descriptor read from: what was decided on is what is read.
    if !metadata.is_file() {
        return Err(SecureFileError::NotRegularFile {
            path: path.to_path_buf(),
        });
    }
    if check_file {
        check_owner_mode(path, metadata.uid(), metadata.mode(), false)?;
    }
    Ok(TrustedFile {
        file,
        metadata,
        resolved,
    })
}

/// Refuses a file Mint is about to act on (alias, policy or capability file) unless
/// [`open_trusted`] would open it.
pub fn check_config_file(path: &Path) -> Result<(), SecureFileError> {
    open_trusted(path).map(|_| ())
}

/// Refuses a directory Mint writes in (`MINT_HOME`, the audit log's directory) unless it is owned
/// by root or Mint's user, group and others cannot write it (not even with the sticky bit: they
/// could plant files at the names Mint creates), and every directory above it and every symbolic
/// link on the way passes the checks of [`open_trusted`].
pub fn check_private_dir(path: &Path) -> Result<(), SecureFileError> {
    open_dir_checked(path).map(|_| ())
}

/// Checks the directories above `path` (which need not exist), as [`open_trusted`] checks a file's:
/// for a directory about to be created there.
pub fn check_parent_dirs(path: &Path) -> Result<(), SecureFileError> {
    let parent = parent_dir(path);
    let found = resolve(parent, Target::Directory)?;
    if FileType::from_raw_mode(found.stat.st_mode) != FileType::Directory {
        return Err(SecureFileError::Io {
            action: "read",
            path: parent.to_path_buf(),
            source: io::Error::from(io::ErrorKind::NotADirectory),
        });
    }
    check_passed_dir(&found.dir_path.join(&found.name), path, &found.stat)
}

/// Opens the directory `path` after the walk of [`resolve`]; it must itself be owned by root or
/// Mint's user and closed to group and others' writes, sticky or not.
fn open_dir_checked(path: &Path) -> Result<OwnedFd, SecureFileError> {
    let found = resolve(path, Target::Directory)?;
    let file_type = FileType::from_raw_mode(found.stat.st_mode);
    if file_type != FileType::Directory {
        return Err(SecureFileError::Io {
            action: "read",
            path: path.to_path_buf(),
            source: io::Error::from(io::ErrorKind::NotADirectory),
        });
    }
    let uid = effective_uid();
    if !trusted_owner(found.stat.st_uid) {
        return Err(SecureFileError::ForeignOwner {
            path: path.to_path_buf(),
            owner: found.stat.st_uid,
            uid,
        });
    }
    if found.stat.st_mode & WRITABLE_BY_OTHERS != 0 {
        return Err(SecureFileError::WritableByOthers {
            path: path.to_path_buf(),
            is_dir: true,
        });
    }
    Ok(found.fd)
}

/// What a path was resolved to: the (checked) directory holding its last component, that
/// component's name, and the component itself opened `O_PATH` with its `fstat`.
struct Resolved {
    dir: OwnedFd,
    dir_path: PathBuf,
    dir_mode: u32,
    name: OsString,
    fd: OwnedFd,
    stat: rustix::fs::Stat,
}

/// What the last component is expected to be.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    File,
    Directory,
}

/// Resolves `path` from `/` one component at a time on descriptors, checking every directory
/// passed through and every symbolic link followed (owned by root or Mint's user; not writable by
/// group or others unless a sticky directory). The last component is opened `O_PATH |
/// O_NOFOLLOW` (after following it when it is a link) and returned unchecked with its directory.
fn resolve(path: &Path, target: Target) -> Result<Resolved, SecureFileError> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(SecureFileError::io("read", path))?
            .join(path)
    };
    let mut queue: VecDeque<OsString> = VecDeque::new();
    push_components(&mut queue, &absolute);
    if queue.is_empty() && target == Target::Directory {
        // `/` itself: its own holder.
        queue.push_back(OsString::from("."));
    }
    let (mut dir, mut dir_stat) = open_root(path)?;
    let mut dir_path = PathBuf::from("/");
    let mut links = 0;
    while let Some(name) = queue.pop_front() {
        if name == "." && !queue.is_empty() {
            continue;
        }
        let fd = rustix::fs::openat(
            &dir,
            Path::new(&name),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| SecureFileError::io("read", path)(e.into()))?;
        let stat =
            rustix::fs::fstat(&fd).map_err(|e| SecureFileError::io("read", path)(e.into()))?;
        let file_type = FileType::from_raw_mode(stat.st_mode);
        if file_type == FileType::Symlink {
            links += 1;
            if links > MAX_LINKS {
                return Err(SecureFileError::TooManyLinks {
                    path: path.to_path_buf(),
                });
            }
            let link_path = dir_path.join(&name);
            if !trusted_owner(stat.st_uid) {
                return Err(SecureFileError::ForeignDirectory {
                    dir: link_path,
                    file: path.to_path_buf(),
                    owner: stat.st_uid,
                    uid: effective_uid(),
                });
            }
            let target_text = rustix::fs::readlinkat(&fd, "", Vec::new())
                .map_err(|e| SecureFileError::io("read", path)(e.into()))?;
            let target_path = PathBuf::from(OsStr::from_bytes(target_text.as_bytes()));
            let mut expanded = VecDeque::new();
            push_components(&mut expanded, &target_path);
            if target_path.is_absolute() {
                (dir, dir_stat) = open_root(path)?;
                dir_path = PathBuf::from("/");
            }
            if expanded.is_empty() {
                expanded.push_back(OsString::from("."));
            }
            while let Some(component) = expanded.pop_back() {
                queue.push_front(component);
            }
            continue;
        }
        let last = queue.is_empty();
        if last {
            return Ok(Resolved {
                dir,
                dir_path,
                dir_mode: dir_stat.st_mode,
                name,
                fd,
                stat,
            });
        }
        if file_type != FileType::Directory {
            return Err(SecureFileError::Io {
                action: "read",
                path: path.to_path_buf(),
                source: io::Error::from(io::ErrorKind::NotADirectory),
            });
        }
        let next_path = if name == ".." {
            dir_path
                .parent()
                .map_or_else(|| PathBuf::from("/"), Path::to_path_buf)
        } else {
            dir_path.join(&name)
        };
        check_passed_dir(&next_path, path, &stat)?;
        dir = fd;
        dir_stat = stat;
        dir_path = next_path;
    }
    // INVARIANT: the loop returns at the last component, and the queue never starts empty (an
    // empty path for a file is refused here).
    Err(SecureFileError::NotRegularFile {
        path: path.to_path_buf(),
    })
}

fn push_components(queue: &mut VecDeque<OsString>, path: &Path) {
    for component in path.components() {
        match component {
            Component::RootDir | Component::Prefix(_) => {}
            Component::CurDir => queue.push_back(OsString::from(".")),
            Component::ParentDir => queue.push_back(OsString::from("..")),
            Component::Normal(name) => queue.push_back(name.to_os_string()),
        }
    }
}

fn open_root(path: &Path) -> Result<(OwnedFd, rustix::fs::Stat), SecureFileError> {
    let root = rustix::fs::open(
        "/",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| SecureFileError::io("read", path)(e.into()))?;
    let stat = rustix::fs::fstat(&root).map_err(|e| SecureFileError::io("read", path)(e.into()))?;
    check_passed_dir(Path::new("/"), path, &stat)?;
    Ok((root, stat))
}

/// A directory passed through on the way to `file`: owned by root or Mint's user, and writable by
/// group or others only with the sticky bit (then no other user can rename or remove what root
/// or Mint's user owns in it, and the next component is checked in turn).
fn check_passed_dir(
    dir: &Path,
    file: &Path,
    stat: &rustix::fs::Stat,
) -> Result<(), SecureFileError> {
    let uid = effective_uid();
    if !trusted_owner(stat.st_uid) {
        return Err(SecureFileError::ForeignDirectory {
            dir: dir.to_path_buf(),
            file: file.to_path_buf(),
            owner: stat.st_uid,
            uid,
        });
    }
    if stat.st_mode & WRITABLE_BY_OTHERS != 0 && stat.st_mode & STICKY == 0 {
        return Err(SecureFileError::DirectoryWritableByOthers {
            dir: dir.to_path_buf(),
            file: file.to_path_buf(),
            mode: stat.st_mode & 0o7777,
            uid,
        });
    }
    Ok(())
}

fn trusted_owner(owner: u32) -> bool {
    owner == effective_uid() || owner == 0
}

/// Creates the directory `path` with mode 0700 (whatever the umask). Its parent must exist.
pub fn create_private_dir(path: &Path) -> Result<(), SecureFileError> {
    DirBuilder::new()
        .mode(DIR_MODE)
        .create(path)
        .map_err(SecureFileError::io("create directory", path))?;
    fs::set_permissions(path, fs::Permissions::from_mode(DIR_MODE))
        .map_err(SecureFileError::io("create directory", path))?;
    sync_dir(parent_dir(path))
}

/// Replaces (or creates) `path` with `bytes`, atomically, mode 0600: readers see the old file or
/// the new one, never a part.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), SecureFileError> {
    write_atomic_mode(path, bytes, FILE_MODE)
}

/// [`write_atomic`] with another mode: [`PUBLIC_FILE_MODE`] for a file meant to be read by others
/// (the interception CA's certificate). Never a mode group or others may write.
pub fn write_atomic_mode(path: &Path, bytes: &[u8], mode: u32) -> Result<(), SecureFileError> {
    let temp = TempFile::write(path, bytes, mode & !WRITABLE_BY_OTHERS)?;
    fs::rename(&temp.path, path).map_err(SecureFileError::io("write", path))?;
    temp.disarm();
    sync_dir(parent_dir(path))
}

/// Creates `path` with `bytes`, mode 0600, and fails with [`SecureFileError::Exists`] when
/// anything is already there: the file appears whole or not at all.
pub fn create_new(path: &Path, bytes: &[u8]) -> Result<(), SecureFileError> {
    create_new_mode(path, bytes, FILE_MODE)
}

/// [`create_new`] with another mode (see [`write_atomic_mode`]).
pub fn create_new_mode(path: &Path, bytes: &[u8], mode: u32) -> Result<(), SecureFileError> {
    let temp = TempFile::write(path, bytes, mode & !WRITABLE_BY_OTHERS)?;
    // A hard link never replaces an existing name, so this cannot overwrite a file created
    // between any check and now.
    let linked = fs::hard_link(&temp.path, path);
    drop(temp);
    match linked {
        Ok(()) => sync_dir(parent_dir(path)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(SecureFileError::Exists {
            path: path.to_path_buf(),
        }),
        Err(e) => Err(SecureFileError::io("write", path)(e)),
    }
}

/// The directory that holds `path` (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// A temporary file beside its target, removed on drop unless renamed.
struct TempFile {
    path: PathBuf,
    armed: bool,
}

// === impl TempFile ===

impl TempFile {
    fn write(target: &Path, bytes: &[u8], mode: u32) -> Result<TempFile, SecureFileError> {
        let dir = parent_dir(target);
        let name = target
            .file_name()
            .ok_or_else(|| SecureFileError::NotRegularFile {
                path: target.to_path_buf(),
            })?;
        let mut attempt = 0;
        let (path, mut file) = loop {
            let mut temp_name = OsString::from(".");
            temp_name.push(name);
            temp_name.push(format!(".{}.{}.tmp", std::process::id(), random_suffix()));
            let path = dir.join(temp_name);
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(FILE_MODE)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
            {
                Ok(file) => break (path, file),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 8 => attempt += 1,
                Err(e) => return Err(SecureFileError::io("write", target)(e)),
            }
        };
        let temp = TempFile { path, armed: true };
        // The umask may have taken bits away; never added any. Set the mode exactly.
        file.set_permissions(fs::Permissions::from_mode(mode))
            .and_then(|()| file.write_all(bytes))
            .and_then(|()| file.sync_all())
            .map_err(SecureFileError::io("write", target))?;
        Ok(temp)
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed {
            // Best effort: the write already failed or the file was linked under its name.
            let _ = fs::remove_file(&self.path);
        }
    }
}

fn check_owner_mode(
    path: &Path,
    owner: u32,
    mode: u32,
    is_dir: bool,
) -> Result<(), SecureFileError> {
    let uid = effective_uid();
    if owner != uid && owner != 0 {
        return Err(SecureFileError::ForeignOwner {
            path: path.to_path_buf(),
            owner,
            uid,
        });
    }
    if mode & WRITABLE_BY_OTHERS != 0 {
        return Err(SecureFileError::WritableByOthers {
            path: path.to_path_buf(),
            is_dir,
        });
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<(), SecureFileError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(SecureFileError::io("write", dir))
}

fn random_suffix() -> String {
    let mut bytes = [0u8; 6];
    // A fixed suffix only makes a name clash (retried with O_EXCL) more likely, never unsafe.
    let _ = getrandom::fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

const STICKY: u32 = 0o1000;
const WRITABLE_BY_OTHERS: u32 = 0o022;

/// The most symbolic links one path may go through (Linux's own limit).
const MAX_LINKS: usize = 40;

/// How many times [`open_trusted`] resolves a name again that was replaced between its check and
/// its opening. Writers replace a file in one `rename`, so a second attempt almost always reads the
/// new version; more than a few means the name is being swapped on purpose.
const OPEN_ATTEMPTS: u32 = 4;

/// How long [`DirLock::for_file`] waits for another holder, at most.
pub const LOCK_WAIT: Duration = Duration::from_secs(5);

/// How often a busy lock is tried again.
const LOCK_POLL: Duration = Duration::from_millis(25);

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().mode() & 0o7777
    }

    fn leftovers(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn atomic_write_creates_and_replaces_with_0600() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("capabilities.yaml");
        write_atomic(&path, b"one").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"one");
        assert_eq!(mode(&path), 0o600);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(mode(&path), 0o600);
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn create_new_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        create_new(&path, b"first").unwrap();
        assert_eq!(mode(&path), 0o600);
        let err = create_new(&path, b"second").unwrap_err();
        assert!(matches!(err, SecureFileError::Exists { .. }), "{err}");
        assert_eq!(fs::read(&path).unwrap(), b"first");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn failed_write_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing-dir").join("x.yaml");
        assert!(write_atomic(&path, b"x").is_err());
        assert!(create_new(&path, b"x").is_err());
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn private_dir_is_0700_whatever_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        create_private_dir(&home).unwrap();
        assert_eq!(mode(&home), 0o700);
        check_private_dir(&home).unwrap();
        assert!(create_private_dir(&home).is_err());
    }

    #[test]
    fn refuses_files_others_may_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("aliases.yaml");
        write_atomic(&path, b"aliases: []\n").unwrap();
        check_config_file(&path).unwrap();
        for bad in [0o620, 0o602, 0o666] {
            fs::set_permissions(&path, fs::Permissions::from_mode(bad)).unwrap();
            let err = check_config_file(&path).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "`{p}` is writable by group or others, so another user could change what \
                     Mint does; run `chmod 600 {p}`",
                    p = path.display()
                )
            );
        }
        // Readable by others is allowed for declarations (they hold no secret).
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        check_config_file(&path).unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let err = check_config_file(&path).unwrap_err();
        assert!(err.to_string().contains("chmod go-w"), "{err}");
        // Sticky (as /tmp) is no excuse for the directory that holds the file: others could plant
        // files at the names Mint creates beside it (its lock, its temporary files).
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o1777)).unwrap();
        let err = check_config_file(&path).unwrap_err();
        assert!(
            matches!(
                err,
                SecureFileError::DirectoryWritableByOthers { mode: 0o1777, .. }
            ),
            "{err}"
        );
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
    }

    /// A private directory `name` under `parent` with mode `mode`.
    fn subdir(parent: &Path, name: &str, mode: u32) -> PathBuf {
        let path = parent.join(name);
        fs::create_dir(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn checks_every_directory_above_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let shared = subdir(dir.path(), "shared", 0o777);
        let home = subdir(&shared, "home", 0o700);
        let path = home.join("policy.yaml");
        write_atomic(&path, b"version: 1\n").unwrap();
        let err = open_trusted(&path).unwrap_err();
        match &err {
            SecureFileError::DirectoryWritableByOthers {
                dir, file, mode, ..
            } => {
                assert_eq!(dir, &shared);
                assert_eq!(file, &path);
                assert_eq!(*mode, 0o777);
            }
            other => panic!("expected DirectoryWritableByOthers, got {other}"),
        }
        assert_eq!(
            err.to_string(),
            format!(
                "`{}` is writable by group or others (mode 0777), so another user could replace \
                 `{}` under it; run `chmod go-w {}`, or keep Mint's files in directories that only \
                 root and uid {} can write",
                shared.display(),
                path.display(),
                shared.display(),
                effective_uid()
            )
        );
        // The same for a directory Mint writes in, and for one about to be created.
        assert!(matches!(
            check_private_dir(&home),
            Err(SecureFileError::DirectoryWritableByOthers { .. })
        ));
        assert!(matches!(
            check_parent_dirs(&home.join("new")),
            Err(SecureFileError::DirectoryWritableByOthers { .. })
        ));
        // A sticky directory above may be passed through: others cannot rename what is ours in it.
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
        let opened = open_trusted(&path).unwrap();
        assert_eq!(opened.resolved, path);
        check_private_dir(&home).unwrap();
        check_parent_dirs(&home.join("new")).unwrap();
    }

    #[test]
    fn checks_where_a_symbolic_link_leads_and_the_link() {
        let dir = tempfile::tempdir().unwrap();
        let home = subdir(dir.path(), "home", 0o700);
        let elsewhere = subdir(dir.path(), "repo", 0o755);
        let target = elsewhere.join("policy.yaml");
        write_atomic(&target, b"version: 1\n").unwrap();
        // A link to a trusted place is followed (a policy kept in a repository).
        let link = home.join("policy.yaml");
        std::os::unix::fs::symlink("../repo/policy.yaml", &link).unwrap();
        let opened = open_trusted(&link).unwrap();
        assert_eq!(opened.resolved, target);
        // A link into a directory others may write is refused, naming that directory.
        let open_dir = subdir(dir.path(), "open", 0o777);
        let planted = open_dir.join("policy.yaml");
        write_atomic(&planted, b"version: 1\n").unwrap();
        let bad = home.join("aliases.yaml");
        std::os::unix::fs::symlink(&planted, &bad).unwrap();
        match open_trusted(&bad).unwrap_err() {
            SecureFileError::DirectoryWritableByOthers { dir, .. } => assert_eq!(dir, open_dir),
            other => panic!("expected DirectoryWritableByOthers, got {other}"),
        }
        // A loop ends.
        let a = home.join("a");
        let b = home.join("b");
        std::os::unix::fs::symlink(&b, &a).unwrap();
        std::os::unix::fs::symlink(&a, &b).unwrap();
        assert!(matches!(
            open_trusted(&a),
            Err(SecureFileError::TooManyLinks { .. })
        ));
    }

    #[test]
    fn refuses_directories_and_links_another_user_owns() {
        if effective_uid() != 0 {
            return; // Only root can give a file away.
        }
        let dir = tempfile::tempdir().unwrap();
        let theirs = subdir(dir.path(), "theirs", 0o755);
        let home = subdir(&theirs, "home", 0o700);
        let path = home.join("policy.yaml");
        write_atomic(&path, b"version: 1\n").unwrap();
        std::os::unix::fs::chown(&theirs, Some(65_534), None).unwrap();
        match open_trusted(&path).unwrap_err() {
            SecureFileError::ForeignDirectory { dir, owner, .. } => {
                assert_eq!(dir, theirs);
                assert_eq!(owner, 65_534);
            }
            other => panic!("expected ForeignDirectory, got {other}"),
        }
        std::os::unix::fs::chown(&theirs, Some(0), None).unwrap();
        open_trusted(&path).unwrap();
        // A link another user owns could be pointed anywhere by them.
        let link = dir.path().join("link.yaml");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        std::os::unix::fs::lchown(&link, Some(65_534), None).unwrap();
        assert!(matches!(
            open_trusted(&link),
            Err(SecureFileError::ForeignDirectory { owner: 65_534, .. })
        ));
    }

    #[test]
    fn a_file_swapped_between_check_and_open_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        write_atomic(&path, b"checked\n").unwrap();
        let other = dir.path().join("other.yaml");
        write_atomic(&other, b"swapped in\n").unwrap();
        // Swapped for another file: the inode read is not the one checked.
        let err = open_trusted_once(&path, true, &mut |_| {
            fs::rename(&other, &path).unwrap();
        })
        .unwrap_err();
        assert!(matches!(err, SecureFileError::Changed { .. }), "{err}");
        // Swapped for a symbolic link: never followed at the open.
        write_atomic(&path, b"checked\n").unwrap();
        let elsewhere = dir.path().join("elsewhere.yaml");
        write_atomic(&elsewhere, b"elsewhere\n").unwrap();
        let err = open_trusted_once(&path, true, &mut |_| {
            fs::remove_file(&path).unwrap();
            std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        })
        .unwrap_err();
        assert!(matches!(err, SecureFileError::Changed { .. }), "{err}");
        // Swapped at every attempt: refused once the attempts are spent.
        fs::remove_file(&path).unwrap();
        write_atomic(&path, b"checked\n").unwrap();
        let mut attempts = 0;
        let err = open_trusted_with(&path, true, &mut |_| {
            attempts += 1;
            write_atomic(&other, b"swapped in\n").unwrap();
            fs::rename(&other, &path).unwrap();
        })
        .unwrap_err();
        assert!(matches!(err, SecureFileError::Changed { .. }), "{err}");
        assert_eq!(attempts, OPEN_ATTEMPTS);
        // Nothing swapped: the descriptor is the file checked.
        fs::remove_file(&path).unwrap();
        write_atomic(&path, b"checked\n").unwrap();
        let mut opened = open_trusted(&path).unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut opened.file, &mut text).unwrap();
        assert_eq!(text, "checked\n");
    }

    #[test]
    fn a_file_replaced_once_by_a_writer_is_checked_again_and_read() {
        // `mint cap issue` and editors replace a file with one rename; a reader that lost that race
        // reads the new version, checked like the first.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("capabilities.yaml");
        write_atomic(&path, b"old\n").unwrap();
        let mut attempts = 0;
        let mut opened = open_trusted_with(&path, true, &mut |_| {
            attempts += 1;
            if attempts == 1 {
                write_atomic(&path, b"new\n").unwrap();
            }
        })
        .unwrap();
        assert_eq!(attempts, 2);
        let mut text = String::new();
        std::io::Read::read_to_string(&mut opened.file, &mut text).unwrap();
        assert_eq!(text, "new\n");
        // The replacement is held to the same rules: one others may write is refused, not read.
        let mut attempts = 0;
        let err = open_trusted_with(&path, true, &mut |_| {
            attempts += 1;
            if attempts == 1 {
                write_atomic(&path, b"theirs\n").unwrap();
                fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
            }
        })
        .unwrap_err();
        assert!(!matches!(err, SecureFileError::Changed { .. }), "{err}");
    }

    #[test]
    fn a_file_replaced_by_rename_was_read_whole_one_written_in_place_was_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("capabilities.yaml");
        write_atomic(&path, b"first\n").unwrap();
        let file = File::open(&path).unwrap();
        let stamp = FileStamp::of_file(&file).unwrap();
        assert!(stamp.unchanged_in(&file.metadata().unwrap()));
        // Replaced by a rename: the old inode only lost its name (its change time may move).
        write_atomic(&path, b"second\n").unwrap();
        let after = file.metadata().unwrap();
        assert_eq!(after.nlink(), 0);
        assert!(stamp.unchanged_in(&after));
        // Written in place: the contents read may be half of a version.
        write_atomic(&path, b"third\n").unwrap();
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        let stamp = FileStamp::of_file(&file).unwrap();
        std::io::Write::write_all(&mut file, b"more\n").unwrap();
        assert!(!stamp.unchanged_in(&file.metadata().unwrap()));
        // Unlinked but also changed: not whole either.
        fs::remove_file(&path).unwrap();
        std::io::Write::write_all(&mut file, b"again\n").unwrap();
        assert!(!stamp.unchanged_in(&file.metadata().unwrap()));
    }

    #[test]
    fn a_busy_lock_fails_within_its_bound_and_names_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("capabilities.yaml");
        let _held = DirLock::for_file(&path).unwrap();
        let lock = dir.path().join(".capabilities.yaml.lock");
        assert_eq!(mode(&lock), 0o600);
        let err = DirLock::for_file_within(&path, Duration::from_millis(100)).unwrap_err();
        match &err {
            SecureFileError::LockBusy { path, .. } => assert_eq!(path, &lock),
            other => panic!("expected LockBusy, got {other}"),
        }
        assert!(err.to_string().contains("nothing was changed"), "{err}");
    }

    #[test]
    fn a_lock_others_could_hold_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("capabilities.yaml");
        // In a directory others may write (sticky or not), they could plant or hold the lock.
        for open in [0o777, 0o1777] {
            fs::set_permissions(dir.path(), fs::Permissions::from_mode(open)).unwrap();
            assert!(matches!(
                DirLock::for_file(&path),
                Err(SecureFileError::WritableByOthers { is_dir: true, .. })
            ));
        }
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
        // A lock file others may open is refused too (they could hold it).
        let lock = dir.path().join(".capabilities.yaml.lock");
        fs::write(&lock, b"").unwrap();
        fs::set_permissions(&lock, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            DirLock::for_file(&path),
            Err(SecureFileError::WritableByOthers { is_dir: false, .. })
        ));
        if effective_uid() == 0 {
            fs::set_permissions(&lock, fs::Permissions::from_mode(0o600)).unwrap();
            std::os::unix::fs::chown(&lock, Some(65_534), None).unwrap();
            assert!(matches!(
                DirLock::for_file(&path),
                Err(SecureFileError::ForeignOwner { owner: 65_534, .. })
            ));
        }
    }

    #[test]
    fn refuses_files_another_user_owns() {
        if effective_uid() != 0 {
            return; // Only root can give a file away.
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("aliases.yaml");
        write_atomic(&path, b"aliases: []\n").unwrap();
        std::os::unix::fs::chown(&path, Some(65_534), None).unwrap();
        let err = check_config_file(&path).unwrap_err();
        assert!(
            matches!(err, SecureFileError::ForeignOwner { owner: 65_534, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("chown 0"), "{err}");
    }

    #[test]
    fn lock_serializes_holders() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.yaml");
        let first = DirLock::for_file(&path).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let path2 = path.clone();
        let waiter = std::thread::spawn(move || {
            let _second = DirLock::for_file(&path2).unwrap();
            tx.send(()).unwrap();
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(200))
                .is_err()
        );
        drop(first);
        rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
        waiter.join().unwrap();
    }
}
