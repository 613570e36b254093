//! Safe writing of Mint's state files, and the permission checks on the files Mint reads.
//!
//! Every file Mint writes (the alias and capability files, the files `mint init` creates) goes
//! through here: a temporary file in the same directory, created 0600 with `O_EXCL` and
//! `O_NOFOLLOW`, written, fsynced, renamed over the target (or hard-linked, when an existing file
//! must never be replaced), and the directory fsynced. A crash leaves the old file or the new one,
//! never a mix. Read-modify-write commands hold [`DirLock`] so two of them cannot lose each
//! other's change.
//!
//! [`check_config_file`] is the gate in front of every file Mint acts on: a file that group or
//! others may write, or that another user owns, is refused with a message naming the file and the
//! fix. Nothing here logs or returns a file's contents.

use std::ffi::OsString;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The mode of every file Mint writes: read and write for its owner only.
pub const FILE_MODE: u32 = 0o600;

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

/// An exclusive advisory lock on a directory, held while a command reads, changes and rewrites a
/// file in it. Released when dropped.
#[derive(Debug)]
pub struct DirLock {
    _dir: File,
}

// === impl DirLock ===

impl DirLock {
    /// Locks the directory that holds `file`, waiting for another Mint command to finish.
    pub fn for_file(file: &Path) -> Result<DirLock, SecureFileError> {
        let dir = parent_dir(file);
        let handle = File::open(dir).map_err(SecureFileError::io("lock", dir))?;
        rustix::fs::flock(&handle, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| SecureFileError::io("lock", dir)(e.into()))?;
        Ok(DirLock { _dir: handle })
    }
}

/// Mint's effective user id: the owner every file it acts on must have (or root).
pub fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Refuses a file Mint is about to act on (alias, policy or capability file) when group or
/// others may write it or its directory, or when a user other than Mint's or root owns it. A
/// directory with the sticky bit (`/tmp`) may be shared: others cannot replace a file in it.
pub fn check_config_file(path: &Path) -> Result<(), SecureFileError> {
    let metadata = fs::metadata(path).map_err(SecureFileError::io("read", path))?;
    if !metadata.is_file() {
        return Err(SecureFileError::NotRegularFile {
            path: path.to_path_buf(),
        });
    }
    check_owner_and_mode(path, &metadata, false)?;
    let dir = parent_dir(path);
    let dir_metadata = fs::metadata(dir).map_err(SecureFileError::io("read", dir))?;
    if dir_metadata.mode() & STICKY == 0 {
        check_owner_and_mode(dir, &dir_metadata, true)?;
    }
    Ok(())
}

/// Refuses a directory that group or others may write, or that another user owns.
pub fn check_private_dir(path: &Path) -> Result<(), SecureFileError> {
    let metadata = fs::metadata(path).map_err(SecureFileError::io("read", path))?;
    check_owner_and_mode(path, &metadata, true)
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
    let temp = TempFile::write(path, bytes)?;
    fs::rename(&temp.path, path).map_err(SecureFileError::io("write", path))?;
    temp.disarm();
    sync_dir(parent_dir(path))
}

/// Creates `path` with `bytes`, mode 0600, and fails with [`SecureFileError::Exists`] when
/// anything is already there: the file appears whole or not at all.
pub fn create_new(path: &Path, bytes: &[u8]) -> Result<(), SecureFileError> {
    let temp = TempFile::write(path, bytes)?;
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
    fn write(target: &Path, bytes: &[u8]) -> Result<TempFile, SecureFileError> {
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
        file.set_permissions(fs::Permissions::from_mode(FILE_MODE))
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

fn check_owner_and_mode(
    path: &Path,
    metadata: &fs::Metadata,
    is_dir: bool,
) -> Result<(), SecureFileError> {
    let uid = effective_uid();
    let owner = metadata.uid();
    if owner != uid && owner != 0 {
        return Err(SecureFileError::ForeignOwner {
            path: path.to_path_buf(),
            owner,
            uid,
        });
    }
    if metadata.mode() & 0o022 != 0 {
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
        assert!(err.to_string().contains("chmod 700"), "{err}");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o1777)).unwrap();
        check_config_file(&path).unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
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
