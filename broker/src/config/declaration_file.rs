//! Reads a declaration file (policy, aliases, capabilities) from disk for the pure loaders in
//! `mint-policy` and the capability store.
//!
//! Sits between the CLI or the broker's config loading and `mint_policy`: it opens the file
//! without blocking (a FIFO or device named as a policy file must not hang Mint), refuses anything
//! that is not a regular file, and reads at most one byte more than the loader accepts, so an
//! oversized file is reported by the loader (E001) without being read whole. The files Mint acts on
//! are read with [`read_config_file`]: opened once through [`open_trusted`] (every directory and
//! link on the way checked, the file judged on its descriptor), and refused as
//! [`ReadError::Changing`] when the descriptor shows the file changed while it was read (an editor
//! writing it in place). Its errors name the kind of problem only; they never carry the file's
//! contents.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::config::secure_file::{FileStamp, SecureFileError, open_trusted};

/// Why a declaration file could not be read. Displays as a short lowercase phrase that never
/// holds the file's contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// Nothing exists at the path.
    #[error("no such file or directory")]
    NotFound,
    /// The file exists but Mint may not read it.
    #[error("permission denied")]
    PermissionDenied,
    /// The path names a directory.
    #[error("is a directory")]
    IsADirectory,
    /// The path names a FIFO, socket or device rather than a regular file.
    #[error("not a regular file")]
    NotRegularFile,
    /// The file changed while it was being read (someone is still writing it).
    #[error("the file changed while it was read; it is still being written")]
    Changing,
    /// Any other I/O failure, by kind.
    #[error("{0}")]
    Io(io::ErrorKind),
}

// === impl ReadError ===

impl From<io::Error> for ReadError {
    fn from(error: io::Error) -> Self {
        match error.kind() {
            io::ErrorKind::NotFound => ReadError::NotFound,
            io::ErrorKind::PermissionDenied => ReadError::PermissionDenied,
            io::ErrorKind::IsADirectory => ReadError::IsADirectory,
            kind => ReadError::Io(kind),
        }
    }
}

/// A configuration file read by [`read_config_file`].
pub struct ConfigFile {
    /// At most `max_bytes + 1` bytes of it.
    pub bytes: Vec<u8>,
    /// The version that was read, from its descriptor.
    pub stamp: FileStamp,
}

impl std::fmt::Debug for ConfigFile {
    /// The length only: the bytes are the file's contents, which no log may hold.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigFile")
            .field("len", &self.bytes.len())
            .field("stamp", &self.stamp)
            .finish()
    }
}

/// Why [`read_config_file`] read nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigFileError {
    /// The file, a directory on its way or a link followed could be changed by another user.
    #[error(transparent)]
    Insecure(SecureFileError),
    /// The file could not be read.
    #[error("{0}")]
    Unreadable(ReadError),
}

/// Opens the configuration file `path` once with [`open_trusted`] and reads at most
/// `max_bytes + 1` bytes from that descriptor. Refuses with [`ReadError::Changing`] a file whose
/// size, modification or change time moved while it was read (a file replaced by a `rename`
/// meanwhile was read whole: see [`FileStamp::unchanged_in`]).
pub fn read_config_file(path: &Path, max_bytes: usize) -> Result<ConfigFile, ConfigFileError> {
    let trusted = open_trusted(path).map_err(|error| match error {
        SecureFileError::Io { source, .. } => ConfigFileError::Unreadable(source.into()),
        SecureFileError::NotRegularFile { .. } => {
            ConfigFileError::Unreadable(ReadError::NotRegularFile)
        }
        SecureFileError::Changed { .. } => ConfigFileError::Unreadable(ReadError::Changing),
        other => ConfigFileError::Insecure(other),
    })?;
    let stamp = FileStamp::of(&trusted.metadata);
    let bytes = read_bounded(&trusted.file, trusted.metadata.len(), max_bytes)
        .map_err(|e| ConfigFileError::Unreadable(e.into()))?;
    let after = trusted
        .file
        .metadata()
        .map_err(|e| ConfigFileError::Unreadable(e.into()))?;
    if !stamp.unchanged_in(&after) {
        return Err(ConfigFileError::Unreadable(ReadError::Changing));
    }
    Ok(ConfigFile { bytes, stamp })
}

/// Reads the regular file at `path`, returning at most `max_bytes + 1` bytes: enough for the
/// loader to see that a file is too large, never more. Symbolic links are followed (the operator
/// names the file); what they point to must be a regular file.
pub fn read_declaration_file(path: &Path, max_bytes: usize) -> Result<Vec<u8>, ReadError> {
    // O_NONBLOCK makes opening a FIFO return at once instead of waiting for a writer; the file
    // type is then checked on the open descriptor, so a swap between check and read is harmless.
    // On a regular file the flag changes nothing.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let metadata = file.metadata()?;
    if metadata.is_dir() {
        return Err(ReadError::IsADirectory);
    }
    if !metadata.is_file() {
        return Err(ReadError::NotRegularFile);
    }
    Ok(read_bounded(&file, metadata.len(), max_bytes)?)
}

fn read_bounded(file: &File, len: u64, max_bytes: usize) -> io::Result<Vec<u8>> {
    let limit = max_bytes.saturating_add(1);
    let expected = usize::try_from(len).unwrap_or(limit).min(limit);
    let mut bytes = Vec::with_capacity(expected);
    file.take(u64::try_from(limit).unwrap_or(u64::MAX))
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_length_not_the_contents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        std::fs::write(&path, b"description: canary-Qx7Lm2Vt9\n").unwrap();
        let file = read_config_file(&path, 100).unwrap();
        let shown = format!("{file:?}");
        assert!(!shown.contains("canary-Qx7Lm2Vt9"), "{shown}");
        assert!(shown.contains("len: 30"), "{shown}");
    }

    #[test]
    fn reads_a_small_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        std::fs::write(&path, b"version: 1\n").unwrap();
        assert_eq!(read_declaration_file(&path, 100).unwrap(), b"version: 1\n");
    }

    #[test]
    fn stops_one_byte_past_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.yaml");
        std::fs::write(&path, vec![b'#'; 50]).unwrap();
        assert_eq!(read_declaration_file(&path, 10).unwrap().len(), 11);
        assert_eq!(read_declaration_file(&path, 50).unwrap().len(), 50);
    }

    #[test]
    fn names_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            read_declaration_file(&dir.path().join("missing.yaml"), 10),
            Err(ReadError::NotFound)
        );
        assert_eq!(
            read_declaration_file(dir.path(), 10),
            Err(ReadError::IsADirectory)
        );
        assert_eq!(
            read_declaration_file(Path::new("/dev/null"), 10),
            Err(ReadError::NotRegularFile)
        );
        assert_eq!(ReadError::NotFound.to_string(), "no such file or directory");
        assert_eq!(ReadError::NotRegularFile.to_string(), "not a regular file");
    }
}
