//! Opens the files the tools read, and refuses the ones that hold secrets.
//!
//! Every path a tool reads, named by the agent or taken from the environment, passes through
//! `Guard::open` before a byte of it is read. Refused are: Mint's capabilities file (the
//! configured one, and any file named `capabilities.yaml`), every `file:` secret source declared
//! in the configured aliases file, and kernel pseudo-files under `/proc`, `/sys` and `/dev`. A
//! refused file is recognised by its canonical path and, after opening, by its device and inode,
//! so symbolic links, `..` detours and hard links lead to the same refusal. When the configured
//! aliases file exists but cannot be loaded, the secret files are unknown and the guard fails
//! closed: it opens nothing but that aliases file itself.
//!
//! Only regular files are opened, without blocking: a directory, FIFO, socket or device is
//! reported, never waited on. Errors name the kind of problem; they never hold file contents.

use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use mint_policy::MAX_FILE_BYTES;
use mint_policy::aliases::{SecretSource, load_aliases};

use crate::paths::{CAPABILITIES_FILE, Config};

/// Why a file cannot be read. Displays as a short lowercase phrase without file contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FileError {
    /// Nothing exists at the path.
    #[error("no such file or directory")]
    NotFound,
    /// The server may not read the file or a directory on its path.
    #[error("permission denied")]
    PermissionDenied,
    /// The path names a directory.
    #[error("is a directory")]
    IsADirectory,
    /// The path names a FIFO, socket or device.
    #[error("not a regular file")]
    NotRegularFile,
    /// The path names Mint's capabilities file.
    #[error("refused: Mint's capabilities file is never read")]
    CapabilitiesFile,
    /// The path names a file that holds an alias's secret.
    #[error("refused: the file holds the secret of an alias (a `file:` source)")]
    SecretFile,
    /// The path names a file under `/proc`, `/sys` or `/dev`.
    #[error("refused: kernel pseudo-files under /proc, /sys and /dev are never read")]
    PseudoFile,
    /// The aliases file does not load, so which files hold secrets is unknown.
    #[error(
        "refused: the aliases file does not load, so the files that hold secrets are unknown; \
         fix the aliases file first"
    )]
    SecretsUnknown,
    /// Any other I/O failure, by kind.
    #[error("{0}")]
    Io(io::ErrorKind),
}

// === impl FileError ===

impl FileError {
    /// A stable snake-case code for the error's `data`.
    pub(crate) fn code(self) -> &'static str {
        match self {
            FileError::NotFound => "not_found",
            FileError::PermissionDenied => "permission_denied",
            FileError::IsADirectory => "is_a_directory",
            FileError::NotRegularFile => "not_a_regular_file",
            FileError::CapabilitiesFile => "refused_capabilities_file",
            FileError::SecretFile => "refused_secret_file",
            FileError::PseudoFile => "refused_pseudo_file",
            FileError::SecretsUnknown => "refused_secrets_unknown",
            FileError::Io(_) => "io_error",
        }
    }
}

impl From<io::Error> for FileError {
    fn from(error: io::Error) -> Self {
        match error.kind() {
            io::ErrorKind::NotFound => FileError::NotFound,
            io::ErrorKind::PermissionDenied => FileError::PermissionDenied,
            io::ErrorKind::IsADirectory => FileError::IsADirectory,
            kind => FileError::Io(kind),
        }
    }
}

/// The files that must not be read, learned afresh for each tool call.
#[derive(Debug)]
pub(crate) struct Guard {
    refused: Vec<RefusedFile>,
    /// The configured aliases file, when it could be opened.
    aliases: Option<Identity>,
    /// Whether the configured aliases file exists but could not be loaded.
    secrets_unknown: bool,
}

// === impl Guard ===

impl Guard {
    /// Reads the configured aliases file to learn the secret files, and notes the capabilities
    /// file. A missing aliases file declares no secret file; any other failure to load it makes
    /// the guard refuse everything but that file.
    pub(crate) fn load(config: &Config) -> Guard {
        let mut refused = vec![RefusedFile::at(
            &config.capabilities,
            FileError::CapabilitiesFile,
        )];
        let mut aliases = None;
        let secrets_unknown = match open_regular(&config.aliases) {
            Err(FileError::NotFound) => false,
            Err(error) => {
                tracing::warn!(error.code = error.code(), "Cannot open the aliases file");
                true
            }
            Ok((file, metadata)) => {
                aliases = Some(Identity::of(&metadata));
                match read_bounded(file, MAX_FILE_BYTES) {
                    Err(error) => {
                        tracing::warn!(error.code = error.code(), "Cannot read the aliases file");
                        true
                    }
                    Ok(bytes) => match load_aliases(&bytes, "aliases file").aliases {
                        None => {
                            tracing::warn!("The aliases file does not load");
                            true
                        }
                        Some(file) => {
                            refused.extend(file.aliases.iter().filter_map(|alias| {
                                match &alias.source {
                                    SecretSource::File(path) => Some(RefusedFile::at(
                                        Path::new(path),
                                        FileError::SecretFile,
                                    )),
                                    SecretSource::Keyring | SecretSource::Env(_) => None,
                                }
                            }));
                            false
                        }
                    },
                }
            }
        };
        Guard {
            refused,
            aliases,
            secrets_unknown,
        }
    }

    /// Opens the regular file at `path` for reading, unless it is refused.
    pub(crate) fn open(&self, path: &Path) -> Result<OpenFile, FileError> {
        // Both the name as given and the file it resolves to: `/dev/stdin` resolves to no path.
        if is_pseudo(path) {
            return Err(FileError::PseudoFile);
        }
        let canonical = fs::canonicalize(path)?;
        if is_pseudo(&canonical) {
            return Err(FileError::PseudoFile);
        }
        if canonical.file_name() == Some(CAPABILITIES_FILE.as_ref()) {
            return Err(FileError::CapabilitiesFile);
        }
        if let Some(refused) = self
            .refused
            .iter()
            .find(|refused| refused.canonical.as_deref() == Some(canonical.as_path()))
        {
            return Err(refused.reason);
        }
        // Look before opening: opening a device can have effects of its own.
        let metadata = fs::metadata(&canonical)?;
        check_type(&metadata)?;
        let (file, metadata) = open_regular(&canonical)?;
        // The descriptor is what will be read: check its identity, not the name's, so a file
        // swapped in after the checks above is still caught.
        let identity = Identity::of(&metadata);
        if let Some(refused) = self
            .refused
            .iter()
            .find(|refused| refused.identity == Some(identity))
        {
            return Err(refused.reason);
        }
        if self.secrets_unknown && self.aliases != Some(identity) {
            return Err(FileError::SecretsUnknown);
        }
        Ok(OpenFile {
            file,
            len: metadata.len(),
        })
    }
}

/// A regular file that passed the guard, and its length when it was opened.
#[derive(Debug)]
pub(crate) struct OpenFile {
    pub(crate) file: File,
    pub(crate) len: u64,
}

// === impl OpenFile ===

impl OpenFile {
    /// Reads at most `max_bytes + 1` bytes: enough for a loader to see that the file is too
    /// large, never more.
    pub(crate) fn read_declaration(self) -> Result<Vec<u8>, FileError> {
        read_bounded(self.file, MAX_FILE_BYTES)
    }
}

/// A file the guard refuses, as far as it could be resolved (a file that does not exist has
/// nothing to protect).
#[derive(Debug)]
struct RefusedFile {
    reason: FileError,
    canonical: Option<PathBuf>,
    identity: Option<Identity>,
}

// === impl RefusedFile ===

impl RefusedFile {
    fn at(path: &Path, reason: FileError) -> RefusedFile {
        RefusedFile {
            reason,
            canonical: fs::canonicalize(path).ok(),
            identity: fs::metadata(path)
                .ok()
                .map(|metadata| Identity::of(&metadata)),
        }
    }
}

/// A file's device and inode: the same for every name of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
}

// === impl Identity ===

impl Identity {
    fn of(metadata: &Metadata) -> Identity {
        Identity {
            dev: metadata.dev(),
            ino: metadata.ino(),
        }
    }
}

/// Opens `path` without blocking (a FIFO does not wait for a writer, a terminal does not become
/// the controlling one) and checks on the open descriptor that it is a regular file.
fn open_regular(path: &Path) -> Result<(File, Metadata), FileError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let metadata = file.metadata()?;
    check_type(&metadata)?;
    Ok((file, metadata))
}

/// Whether `path` lies under `/proc`, `/sys` or `/dev`, whose files are views of the kernel
/// and of other processes (their environment, memory, devices), never declarations.
fn is_pseudo(path: &Path) -> bool {
    ["/proc", "/sys", "/dev"]
        .iter()
        .any(|root| path.starts_with(root))
}

fn check_type(metadata: &Metadata) -> Result<(), FileError> {
    if metadata.is_dir() {
        Err(FileError::IsADirectory)
    } else if metadata.is_file() {
        Ok(())
    } else {
        Err(FileError::NotRegularFile)
    }
}

fn read_bounded(file: File, max_bytes: usize) -> Result<Vec<u8>, FileError> {
    let limit = max_bytes.saturating_add(1);
    let mut bytes = Vec::new();
    file.take(u64::try_from(limit).unwrap_or(u64::MAX))
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Home {
        dir: tempfile::TempDir,
    }

    impl Home {
        fn new(aliases: &str) -> Home {
            let dir = tempfile::tempdir().unwrap();
            fs::write(dir.path().join("aliases.yaml"), aliases).unwrap();
            Home { dir }
        }

        fn path(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }

        fn guard(&self) -> Guard {
            Guard::load(&Config {
                aliases: self.path("aliases.yaml"),
                audit_log: self.path("audit.log"),
                capabilities: self.path("caps.yaml"),
                listen: String::new(),
            })
        }
    }

    fn secret_aliases(secret: &Path) -> String {
        format!(
            "aliases:\n  - name: slack\n    hosts: [slack.com]\n    source: file:{}\n",
            secret.display()
        )
    }

    #[test]
    fn reads_an_ordinary_file() {
        let home = Home::new("aliases: []\n");
        fs::write(home.path("policy.yaml"), "version: 1\n").unwrap();
        let open = home.guard().open(&home.path("policy.yaml")).unwrap();
        assert_eq!(open.len, 11);
        assert_eq!(open.read_declaration().unwrap(), b"version: 1\n");
    }

    #[test]
    fn refuses_the_capabilities_file_by_every_name() {
        let home = Home::new("aliases: []\n");
        fs::write(home.path("caps.yaml"), "hashes\n").unwrap();
        fs::hard_link(home.path("caps.yaml"), home.path("innocent.yaml")).unwrap();
        std::os::unix::fs::symlink(home.path("caps.yaml"), home.path("link.yaml")).unwrap();
        fs::create_dir(home.path("sub")).unwrap();
        let guard = home.guard();
        for name in [
            "caps.yaml",
            "innocent.yaml",
            "link.yaml",
            "sub/../caps.yaml",
        ] {
            assert_eq!(
                guard.open(&home.path(name)).unwrap_err(),
                FileError::CapabilitiesFile,
                "{name}"
            );
        }
    }

    #[test]
    fn refuses_any_file_named_capabilities_yaml() {
        let home = Home::new("aliases: []\n");
        fs::write(home.path("capabilities.yaml"), "x\n").unwrap();
        assert_eq!(
            home.guard()
                .open(&home.path("capabilities.yaml"))
                .unwrap_err(),
            FileError::CapabilitiesFile
        );
    }

    #[test]
    fn refuses_secret_files_declared_by_aliases() {
        let secret_dir = tempfile::tempdir().unwrap();
        let secret = secret_dir.path().join("slack");
        fs::write(&secret, "xoxb-secret\n").unwrap();
        let home = Home::new(&secret_aliases(&secret));
        fs::hard_link(&secret, home.path("copy.log")).unwrap();
        let guard = home.guard();
        assert_eq!(guard.open(&secret).unwrap_err(), FileError::SecretFile);
        assert_eq!(
            guard.open(&home.path("copy.log")).unwrap_err(),
            FileError::SecretFile
        );
        // The aliases file itself stays readable.
        assert!(guard.open(&home.path("aliases.yaml")).is_ok());
    }

    #[test]
    fn fails_closed_when_the_aliases_file_does_not_load() {
        let home = Home::new("aliases: [\n");
        fs::write(home.path("policy.yaml"), "version: 1\n").unwrap();
        let guard = home.guard();
        assert_eq!(
            guard.open(&home.path("policy.yaml")).unwrap_err(),
            FileError::SecretsUnknown
        );
        assert!(guard.open(&home.path("aliases.yaml")).is_ok());
    }

    #[test]
    fn a_missing_aliases_file_declares_no_secret() {
        let home = Home::new("");
        fs::remove_file(home.path("aliases.yaml")).unwrap();
        fs::write(home.path("policy.yaml"), "version: 1\n").unwrap();
        assert!(home.guard().open(&home.path("policy.yaml")).is_ok());
    }

    #[test]
    fn names_the_problem_without_blocking() {
        let home = Home::new("aliases: []\n");
        let guard = home.guard();
        assert_eq!(
            guard.open(&home.path("missing")).unwrap_err(),
            FileError::NotFound
        );
        assert_eq!(
            guard.open(home.dir.path()).unwrap_err(),
            FileError::IsADirectory
        );
        assert_eq!(
            guard.open(Path::new("/dev/null")).unwrap_err(),
            FileError::PseudoFile
        );
        assert_eq!(
            guard.open(Path::new("/proc/self/environ")).unwrap_err(),
            FileError::PseudoFile
        );
        let status = std::process::Command::new("mkfifo")
            .arg(home.path("fifo"))
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(
            guard.open(&home.path("fifo")).unwrap_err(),
            FileError::NotRegularFile
        );
    }

    #[test]
    fn reads_one_byte_past_the_limit_at_most() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        fs::write(&path, vec![b'#'; 50]).unwrap();
        assert_eq!(
            read_bounded(File::open(&path).unwrap(), 10).unwrap().len(),
            11
        );
        assert_eq!(
            read_bounded(File::open(&path).unwrap(), 50).unwrap().len(),
            50
        );
    }
}
