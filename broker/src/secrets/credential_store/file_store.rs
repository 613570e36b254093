//! The `file:PATH` source: a secret in a file only the broker's user can read, such as a
//! container secret or a systemd credential (`LoadCredential=`). Read-only: the operator writes
//! the file.
//!
//! The file is opened once through `secure_file::open_in_trusted_dirs` (every directory on its way
//! and every symbolic link followed owned by root or the broker's user and closed to others'
//! writes) and checked on the open descriptor, so a swap between check and read cannot slip
//! another file in: it must be a regular file, owned by the broker's effective uid, with no
//! permission for group or others (0600 or 0400). One trailing newline (`\n` or `\r\n`) is dropped, as `echo` and editors
//! add one. Errors name the file and the fix, never its contents.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

use super::{CredentialStore, CredentialValue, MAX_VALUE_BYTES, StoreError};
use crate::config::secure_file::{SecureFileError, effective_uid, open_in_trusted_dirs};

/// Reads secrets from files. Stateless.
#[derive(Debug, Default)]
pub struct FileStore {
    _private: (),
}

/// Why a secret file is refused. Names the file and how to fix the problem.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileProblem {
    /// The path is relative; Mint would resolve it against whatever directory it runs in.
    #[error("`{}` is not an absolute path", path.display())]
    NotAbsolute {
        /// The path.
        path: PathBuf,
    },
    /// A directory, FIFO, socket or device.
    #[error("`{}` is not a regular file", path.display())]
    NotRegularFile {
        /// The path.
        path: PathBuf,
    },
    /// Someone other than the broker's user owns the file.
    #[error(
        "`{path}` is owned by uid {owner}, not by the user the broker runs as (uid {uid}); run \
         `chown {uid} {path}`",
        path = path.display()
    )]
    ForeignOwner {
        /// The path.
        path: PathBuf,
        /// The file's owner.
        owner: u32,
        /// The broker's effective uid.
        uid: u32,
    },
    /// Group or others have some permission on the file.
    #[error(
        "`{path}` is open to group or others (mode {mode:04o}); allow only its owner: run \
         `chmod 600 {path}`",
        path = path.display()
    )]
    TooOpen {
        /// The path.
        path: PathBuf,
        /// The file's permission bits.
        mode: u32,
    },
    /// A directory on the way to the file, or a link followed, could be changed by another user.
    #[error(transparent)]
    Insecure(SecureFileError),
    /// The file could not be opened or read.
    #[error("cannot read `{}`: {kind}", path.display())]
    Unreadable {
        /// The path.
        path: PathBuf,
        /// Why, by kind (the OS message adds nothing and may vary).
        kind: io::ErrorKind,
    },
}

// === impl FileStore ===

impl FileStore {
    /// A file store.
    pub fn new() -> FileStore {
        FileStore::default()
    }

    fn open(path: &Path) -> Result<File, StoreError> {
        if !path.is_absolute() {
            return Err(FileProblem::NotAbsolute {
                path: path.to_path_buf(),
            }
            .into());
        }
        // Opened once, from directories no other user can change, never blocking on a FIFO; the
        // file itself is judged on the descriptor below.
        let trusted = open_in_trusted_dirs(path).map_err(|e| match e {
            SecureFileError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound => {
                StoreError::Missing
            }
            SecureFileError::Io { source, .. } if source.kind() == io::ErrorKind::IsADirectory => {
                FileProblem::NotRegularFile {
                    path: path.to_path_buf(),
                }
                .into()
            }
            SecureFileError::Io { source, .. } => FileProblem::Unreadable {
                path: path.to_path_buf(),
                kind: source.kind(),
            }
            .into(),
            SecureFileError::NotRegularFile { .. } => FileProblem::NotRegularFile {
                path: path.to_path_buf(),
            }
            .into(),
            other => FileProblem::Insecure(other).into(),
        })?;
        let (file, metadata) = (trusted.file, trusted.metadata);
        let uid = effective_uid();
        if metadata.uid() != uid {
            return Err(FileProblem::ForeignOwner {
                path: path.to_path_buf(),
                owner: metadata.uid(),
                uid,
            }
            .into());
        }
        let mode = metadata.mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(FileProblem::TooOpen {
                path: path.to_path_buf(),
                mode,
            }
            .into());
        }
        Ok(file)
    }
}

impl CredentialStore for FileStore {
    fn name(&self) -> &'static str {
        "file"
    }

    fn read(&self, key: &str) -> Result<CredentialValue, StoreError> {
        let path = Path::new(key);
        let file = FileStore::open(path)?;
        let mut bytes = Zeroizing::new(Vec::with_capacity(MAX_VALUE_BYTES + 4));
        // Room for the whole bounded read up front: a vector that grew would free unwiped
        // copies of the secret.
        // Read past the limit by a newline (`\r\n`) and one byte, so an oversized file is still
        // too large after the newline is dropped, without reading it all.
        file.take(MAX_VALUE_BYTES as u64 + 3)
            .read_to_end(&mut bytes)
            .map_err(|e| FileProblem::Unreadable {
                path: path.to_path_buf(),
                kind: e.kind(),
            })?;
        strip_one_newline(&mut bytes);
        Ok(CredentialValue::from_bytes(bytes)?)
    }

    fn write(&self, _key: &str, _value: &CredentialValue) -> Result<(), StoreError> {
        Err(StoreError::ReadOnly)
    }

    fn delete(&self, _key: &str) -> Result<(), StoreError> {
        Err(StoreError::ReadOnly)
    }
}

/// Drops one trailing `\n` or `\r\n`: what `echo`, editors and terminals add after a line.
pub fn strip_one_newline(bytes: &mut Zeroizing<Vec<u8>>) {
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn strips_exactly_one_newline() {
        for (input, expected) in [
            (&b"tok\n"[..], &b"tok"[..]),
            (b"tok\r\n", b"tok"),
            (b"tok\n\n", b"tok\n"),
            (b"tok", b"tok"),
            (b"\n", b""),
            (b"tok\r", b"tok\r"),
        ] {
            let mut bytes = Zeroizing::new(input.to_vec());
            strip_one_newline(&mut bytes);
            assert_eq!(bytes.as_slice(), expected, "{input:?}");
        }
    }

    #[test]
    fn refuses_open_modes_and_names_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "secret\n").unwrap();
        let store = FileStore::new();
        let key = path.to_str().unwrap();
        for ok in [0o600, 0o400] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(ok)).unwrap();
            store.read(key).unwrap();
        }
        for bad in [0o640, 0o604, 0o644, 0o660, 0o610] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(bad)).unwrap();
            let err = store.read(key).unwrap_err().to_string();
            assert_eq!(
                err,
                format!(
                    "`{key}` is open to group or others (mode {bad:04o}); allow only its owner: \
                     run `chmod 600 {key}`"
                )
            );
        }
    }

    #[test]
    fn refuses_relative_paths_directories_and_fifos() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new();
        assert!(matches!(
            store.read("relative/token"),
            Err(StoreError::File(FileProblem::NotAbsolute { .. }))
        ));
        assert!(matches!(
            store.read(dir.path().to_str().unwrap()),
            Err(StoreError::File(FileProblem::NotRegularFile { .. }))
        ));
        assert!(matches!(
            store.read(dir.path().join("missing").to_str().unwrap()),
            Err(StoreError::Missing)
        ));
        let fifo = dir.path().join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        std::fs::set_permissions(&fifo, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            store.read(fifo.to_str().unwrap()),
            Err(StoreError::File(FileProblem::NotRegularFile { .. }))
        ));
    }

    #[test]
    fn refuses_oversized_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        std::fs::write(&path, vec![b'a'; MAX_VALUE_BYTES + 1]).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            FileStore::new().read(path.to_str().unwrap()),
            Err(StoreError::Value(super::super::ValueProblem::TooLarge))
        ));
    }
}
