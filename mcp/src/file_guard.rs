//! Opens the files the tools read, and refuses the ones that hold secrets.
//!
//! Every path a tool reads, named by the agent or taken from the environment, passes through
//! `Guard::open` before a byte of it is read. Refused are: Mint's capabilities file (the
//! configured one, any file named `capabilities.yaml`, and any file whose text has a top-level
//! `capabilities` key, see `is_capabilities_key`), every `file:` secret source declared in the
//! configured aliases file, and kernel pseudo-files: anything under `/proc`, `/sys` and `/dev`,
//! and anything on a kernel pseudo file system (procfs, sysfs, devtmpfs, …) wherever it is
//! mounted.
//!
//! The file is opened once, and every decision is made on what was opened, never on a name
//! looked up again: the canonical path is opened with `O_PATH | O_NOFOLLOW` (no effect even on a
//! device, no wait on a FIFO, no symbolic link followed at the end), the descriptor's type,
//! device and inode come from `fstat`, its real path from `/proc/self/fd/N` and its file system
//! from `/proc/self/fdinfo/N` and `/proc/self/mountinfo`; only then is that very file reopened
//! for reading through `/proc/self/fd/N`. A symbolic link, a `..` detour or a directory swapped
//! in between the checks and the open therefore leads to the same refusal, and a hard link is
//! recognised by its device and inode. When the configured aliases file exists but cannot be
//! loaded, the secret files are unknown and the guard fails closed: it opens nothing but that
//! aliases file itself. Without `/proc` the server cannot see what it opened, and refuses
//! everything.
//!
//! Only regular files are opened for reading: a directory, FIFO, socket or device is refused,
//! never waited on. And only files under the real working directory or the real `MINT_HOME`
//! (neither of them `/`), or the very files the environment names (aliases file, audit log,
//! policy), are opened at all: the rule runs on the canonical path and again on the opened
//! descriptor's real path, so neither a `..` nor a symbolic link leads out. Errors name the kind
//! of problem for the server's own log; the tools show every one of them to the agent as the
//! same answer (see `tools::unreadable`), so that no answer tells one file from another.

use std::ffi::OsStr;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, BufRead, BufReader, Read};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
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
    /// The path names a FIFO, socket, device or (swapped in meanwhile) symbolic link.
    #[error("not a regular file")]
    NotRegularFile,
    /// The path names Mint's capabilities file, or a file that reads like one.
    #[error("refused: Mint's capabilities file is never read")]
    CapabilitiesFile,
    /// The path names a file that holds an alias's secret.
    #[error("refused: the file holds the secret of an alias (a `file:` source)")]
    SecretFile,
    /// The path names a file under `/proc`, `/sys` or `/dev`, or on a kernel pseudo file system.
    #[error("refused: kernel pseudo-files under /proc, /sys and /dev are never read")]
    PseudoFile,
    /// The aliases file does not load, so which files hold secrets is unknown.
    #[error(
        "refused: the aliases file does not load, so the files that hold secrets are unknown; \
         fix the aliases file first"
    )]
    SecretsUnknown,
    /// What the descriptor really is cannot be learned (no `/proc`), so nothing is read.
    #[error("refused: the opened file cannot be verified (is /proc mounted?)")]
    Unverifiable,
    /// The file lies outside the working directory and `MINT_HOME`, and is none of the files
    /// the environment names.
    #[error("refused: outside the working directory and MINT_HOME")]
    Outside,
    /// The file is larger than the tool reads.
    #[error("too large")]
    TooLarge,
    /// The file is not recognisably what the tool reads (a policy, an alias file, an audit
    /// log).
    #[error("not recognised")]
    NotRecognised,
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
            FileError::Unverifiable => "refused_unverifiable",
            FileError::Outside => "refused_outside",
            FileError::TooLarge => "too_large",
            FileError::NotRecognised => "not_recognised",
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
    /// The real working directory and `MINT_HOME`, as far as they exist and are not `/`.
    roots: Vec<PathBuf>,
    /// The real paths of the files the environment names, readable wherever they are.
    named: Vec<PathBuf>,
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
        let secrets_unknown = match open_verified(&config.aliases, |_| Ok(())) {
            Err(FileError::NotFound) => false,
            Err(error) => {
                tracing::warn!(error.code = error.code(), "Cannot open the aliases file");
                true
            }
            Ok(opened) => {
                aliases = Some(Identity::of(&opened.metadata));
                match read_bounded(opened.file, MAX_FILE_BYTES) {
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
                                    SecretSource::Keyring
                                    | SecretSource::Env(_)
                                    | SecretSource::Command(_)
                                    | SecretSource::Vault(_) => None,
                                }
                            }));
                            false
                        }
                    },
                }
            }
        };
        // A relative home or file (the default `.mint`, or a relative variable) is resolved in the
        // working directory, which the agent may write: a `.mint` symbolic link it planted there
        // must not make another directory a root, nor name a file outside. So a relative path
        // counts only where it really resolves inside the working directory; only an absolute
        // path, which the operator wrote, may lead elsewhere.
        let cwd = fs::canonicalize(".").ok();
        let resolved = |path: &Path| {
            let real = fs::canonicalize(path).ok()?;
            let inside = cwd.as_ref().is_some_and(|cwd| real.starts_with(cwd));
            (path.is_absolute() || inside).then_some(real)
        };
        let roots = [Path::new("."), config.home.as_path()]
            .into_iter()
            .filter_map(resolved)
            .filter(|root| root.parent().is_some())
            .collect();
        let named = [&config.aliases, &config.audit_log, &config.policy]
            .into_iter()
            .filter_map(|file| resolved(file))
            .collect();
        Guard {
            refused,
            roots,
            named,
            aliases,
            secrets_unknown,
        }
    }

    /// Opens the regular file at `path` for reading, unless it is refused.
    pub(crate) fn open(&self, path: &Path) -> Result<OpenFile, FileError> {
        let opened = open_verified(path, |path| self.check_path(path))?;
        // The descriptor's identity, not a name's: every name of a refused file is refused.
        let identity = Identity::of(&opened.metadata);
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
            file: opened.file,
            len: opened.metadata.len(),
        })
    }

    /// The rules on a file's path: where it lies, its name, and the refused files' canonical
    /// paths. Run on the canonical path before opening, and on the opened descriptor's real path
    /// after.
    fn check_path(&self, path: &Path) -> Result<(), FileError> {
        if !self.roots.iter().any(|root| path.starts_with(root))
            && !self.named.iter().any(|file| file == path)
        {
            return Err(FileError::Outside);
        }
        if path.file_name() == Some(CAPABILITIES_FILE.as_ref()) {
            return Err(FileError::CapabilitiesFile);
        }
        match self
            .refused
            .iter()
            .find(|refused| refused.canonical.as_deref() == Some(path))
        {
            Some(refused) => Err(refused.reason),
            None => Ok(()),
        }
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
    /// Reads a declaration file whole: at most `MAX_FILE_BYTES`, and nothing of a file that
    /// was larger when it was opened (one that grew since is cut one byte past the bound, which
    /// the loader refuses). A file that reads like a capabilities file is refused.
    pub(crate) fn read_declaration(self) -> Result<Vec<u8>, FileError> {
        if self.len > MAX_FILE_BYTES as u64 {
            return Err(FileError::TooLarge);
        }
        let bytes = read_bounded(self.file, MAX_FILE_BYTES)?;
        if bytes.len() > MAX_FILE_BYTES {
            return Err(FileError::TooLarge);
        }
        if bytes.split(|&byte| byte == b'\n').any(is_capabilities_key) {
            return Err(FileError::CapabilitiesFile);
        }
        Ok(bytes)
    }
}

/// Whether `line` opens a top-level `capabilities` key, the mark of a capabilities file whatever
/// its name (a hard link to the broker's, say): at column 1 (after a UTF-8 byte order mark, if
/// any), the word `capabilities`, bare or in single or double quotes, then optional blanks and
/// a colon. No policy, aliases file or audit record has such a line.
pub(crate) fn is_capabilities_key(line: &[u8]) -> bool {
    const KEY: &[u8] = b"capabilities";
    let line = line.strip_prefix(b"\xef\xbb\xbf").unwrap_or(line);
    let rest = match line.split_first() {
        Some((&quote, rest)) if quote == b'"' || quote == b'\'' => rest
            .strip_prefix(KEY)
            .and_then(|rest| rest.strip_prefix(&[quote])),
        _ => line.strip_prefix(KEY),
    };
    rest.is_some_and(|rest| {
        rest.iter()
            .find(|&&byte| byte != b' ' && byte != b'\t')
            .is_some_and(|&byte| byte == b':')
    })
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

/// A regular file open for reading, checked on its descriptor.
#[derive(Debug)]
struct Verified {
    file: File,
    metadata: Metadata,
}

/// Opens the regular file at `path` for reading, once, and checks what was opened.
///
/// `check` holds the caller's rules on a path; it runs, with the kernel pseudo-file rule, on the
/// canonical path before opening (so a refusal is reported without touching the file) and again
/// on the real path of the opened descriptor, which is what decides: a directory or a final
/// component swapped for a symbolic link after `canonicalize` cannot lead elsewhere unseen.
fn open_verified(
    path: &Path,
    check: impl Fn(&Path) -> Result<(), FileError>,
) -> Result<Verified, FileError> {
    // Both the name as given and the file it resolves to: `/dev/stdin` resolves to no path.
    if is_pseudo(path) {
        return Err(FileError::PseudoFile);
    }
    let canonical = fs::canonicalize(path)?;
    if is_pseudo(&canonical) {
        return Err(FileError::PseudoFile);
    }
    check(&canonical)?;
    // A handle on the file, not opened for reading: opening it has no effect even on a device,
    // and never waits on a FIFO. The canonical path holds no symbolic link, so one found at its
    // end now was swapped in: `O_NOFOLLOW` opens the link itself, which is not a regular file.
    let handle = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
        .open(&canonical)?;
    let metadata = handle.metadata()?;
    check_type(&metadata)?;
    let fd = handle.as_raw_fd();
    let fd_path = PathBuf::from(format!("/proc/self/fd/{fd}"));
    // Where the descriptor really leads, as the kernel tells it: every path rule again.
    let real = fs::read_link(&fd_path).map_err(|_| FileError::Unverifiable)?;
    for real in real_paths(&real) {
        if is_pseudo(real) {
            return Err(FileError::PseudoFile);
        }
        check(real)?;
    }
    if on_pseudo_filesystem(fd)? {
        return Err(FileError::PseudoFile);
    }
    // The very file the handle holds, now for reading: `/proc/self/fd/N` names the open file,
    // not a path to look up again. Without blocking, and never as a controlling terminal.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&fd_path)?;
    let opened = file.metadata()?;
    check_type(&opened)?;
    if Identity::of(&opened) != Identity::of(&metadata) {
        return Err(FileError::Unverifiable);
    }
    // The handle had to stay open until now: `fd_path` names it.
    drop(handle);
    Ok(Verified {
        file,
        metadata: opened,
    })
}

/// The paths to check for a descriptor's real path: itself and, for a file deleted since it
/// was opened (`/proc` appends ` (deleted)`), the path it had.
fn real_paths(real: &Path) -> impl Iterator<Item = &Path> {
    let bytes = real.as_os_str().as_bytes();
    let before_deletion = bytes
        .strip_suffix(b" (deleted)")
        .map(|bytes| Path::new(OsStr::from_bytes(bytes)));
    std::iter::once(real).chain(before_deletion)
}

/// Whether the open descriptor `fd` lies on a kernel pseudo file system, wherever it is
/// mounted: its mount id from `/proc/self/fdinfo`, that mount's type from
/// `/proc/self/mountinfo`. A mount this process cannot see (reached through another process's
/// root) is refused; a kernel that does not report mount ids leaves the path rule alone.
fn on_pseudo_filesystem(fd: i32) -> Result<bool, FileError> {
    let info = fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
        .map_err(|_| FileError::Unverifiable)?;
    let Some(mount) = info
        .lines()
        .find_map(|line| line.strip_prefix("mnt_id:"))
        .map(str::trim)
    else {
        return Ok(false);
    };
    let mounts = File::open("/proc/self/mountinfo").map_err(|_| FileError::Unverifiable)?;
    for line in BufReader::new(mounts).split(b'\n') {
        let line = line.map_err(|_| FileError::Unverifiable)?;
        // `ID PARENT MAJOR:MINOR ROOT POINT OPTIONS [OPTIONAL…] - TYPE SOURCE SUPER_OPTIONS`
        if line.split(|&byte| byte == b' ').next() != Some(mount.as_bytes()) {
            continue;
        }
        let fs_type = line
            .split(|&byte| byte == b' ')
            .skip_while(|field| *field != b"-")
            .nth(1)
            .ok_or(FileError::Unverifiable)?;
        return Ok(PSEUDO_FILESYSTEMS
            .iter()
            .any(|pseudo| pseudo.as_bytes() == fs_type));
    }
    Err(FileError::Unverifiable)
}

/// File system types whose files are views of the kernel and of other processes (their
/// environment, memory, devices, configuration), never declarations.
const PSEUDO_FILESYSTEMS: [&str; 19] = [
    "proc",
    "sysfs",
    "devtmpfs",
    "devpts",
    "mqueue",
    "debugfs",
    "tracefs",
    "securityfs",
    "cgroup",
    "cgroup2",
    "bpf",
    "pstore",
    "efivarfs",
    "configfs",
    "fusectl",
    "binfmt_misc",
    "nsfs",
    "selinuxfs",
    "rpc_pipefs",
];

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
                home: self.dir.path().to_owned(),
                aliases: self.path("aliases.yaml"),
                audit_log: self.path("audit.log"),
                policy: self.path("policy.yaml"),
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
    fn refuses_a_file_that_reads_like_a_capabilities_file_by_any_name() {
        let home = Home::new("aliases: []\n");
        let other = tempfile::tempdir().unwrap();
        let caps = other.path().join("capabilities.yaml");
        fs::write(&caps, "version: 1\ncapabilities:\n  - id: c9\n").unwrap();
        fs::hard_link(&caps, home.path("notes.txt")).unwrap();
        let open = home.guard().open(&home.path("notes.txt")).unwrap();
        assert_eq!(
            open.read_declaration().unwrap_err(),
            FileError::CapabilitiesFile
        );
    }

    #[test]
    fn the_capabilities_key_rule() {
        for line in [
            &b"capabilities:"[..],
            b"capabilities: []",
            b"capabilities :",
            b"capabilities\t:",
            b"\"capabilities\":",
            b"'capabilities' :",
            b"\xef\xbb\xbfcapabilities:",
            b"capabilities:\r",
        ] {
            assert!(
                is_capabilities_key(line),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        for line in [
            &b" capabilities:"[..],
            b"# capabilities:",
            b"capabilities",
            b"capabilities_x:",
            b"capabilitiesx:",
            b"\"capabilities':",
            b"- capabilities:",
            b"{\"capabilities\":1}",
            b"",
        ] {
            assert!(
                !is_capabilities_key(line),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn pseudo_file_systems_are_recognised_on_the_descriptor() {
        let on = |path: &str| {
            let handle = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH)
                .open(path)
                .unwrap();
            on_pseudo_filesystem(handle.as_raw_fd()).unwrap()
        };
        assert!(on("/proc/self/status"));
        assert!(on("/sys/kernel"));
        let file = tempfile::NamedTempFile::new().unwrap();
        assert!(!on(file.path().to_str().unwrap()));
    }

    #[test]
    fn a_directory_swapped_for_a_symlink_never_leads_elsewhere() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};

        let home = Home::new("aliases: []\n");
        fs::create_dir(home.path("real")).unwrap();
        fs::write(home.path("real/environ"), "benign\n").unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let racer = {
            let (stop, dir) = (stop.clone(), home.dir.path().to_owned());
            std::thread::spawn(move || {
                let (real, swapped) = (dir.join("real"), dir.join("d"));
                while !stop.load(Ordering::Relaxed) {
                    fs::rename(&real, &swapped).unwrap();
                    fs::rename(&swapped, &real).unwrap();
                    std::os::unix::fs::symlink("/proc/self", &swapped).unwrap();
                    fs::remove_file(&swapped).unwrap();
                }
            })
        };
        let guard = home.guard();
        for _ in 0..3000 {
            if let Ok(open) = guard.open(&home.path("d/environ")) {
                assert_eq!(open.read_declaration().unwrap(), b"benign\n");
            }
        }
        stop.store(true, Ordering::Relaxed);
        racer.join().unwrap();
    }

    #[test]
    fn refuses_secret_files_declared_by_aliases() {
        let secret_dir = tempfile::tempdir().unwrap();
        let secret = secret_dir.path().join("slack");
        fs::write(&secret, "xoxb-secret\n").unwrap();
        let home = Home::new(&secret_aliases(&secret));
        fs::hard_link(&secret, home.path("copy.log")).unwrap();
        let guard = home.guard();
        // Outside both roots the secret is refused before it is looked at.
        assert_eq!(guard.open(&secret).unwrap_err(), FileError::Outside);
        assert_eq!(
            guard.open(&home.path("copy.log")).unwrap_err(),
            FileError::SecretFile
        );
        // The aliases file itself stays readable.
        assert!(guard.open(&home.path("aliases.yaml")).is_ok());
        // A secret file inside the home is refused as one.
        let inside = home.path("token");
        fs::write(&inside, "xoxb-secret\n").unwrap();
        fs::write(home.path("aliases.yaml"), secret_aliases(&inside)).unwrap();
        assert_eq!(
            home.guard().open(&inside).unwrap_err(),
            FileError::SecretFile
        );
    }

    #[test]
    fn only_the_roots_and_the_named_files_are_opened() {
        let home = Home::new("aliases: []\n");
        let outside = tempfile::tempdir().unwrap();
        let policy = outside.path().join("policy.yaml");
        fs::write(&policy, "version: 1\n").unwrap();
        std::os::unix::fs::symlink(&policy, home.path("link.yaml")).unwrap();
        std::os::unix::fs::symlink(outside.path(), home.path("dir")).unwrap();
        let guard = home.guard();
        for path in [
            policy.clone(),
            home.path("link.yaml"),
            home.path("dir/policy.yaml"),
            PathBuf::from("/etc/passwd"),
        ] {
            assert_eq!(
                guard.open(&path).unwrap_err(),
                FileError::Outside,
                "{}",
                path.display()
            );
        }
        fs::write(home.path("p.yaml"), "version: 1\n").unwrap();
        assert!(guard.open(&home.path("p.yaml")).is_ok());
        // The policy the environment names is read wherever it is.
        let named = Guard::load(&Config {
            home: home.dir.path().to_owned(),
            aliases: home.path("aliases.yaml"),
            audit_log: home.path("audit.log"),
            policy: home.path("link.yaml"),
            capabilities: home.path("caps.yaml"),
            listen: String::new(),
        });
        assert!(named.open(&policy).is_ok());
        assert!(named.open(&home.path("link.yaml")).is_ok());
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
