//! Capabilities: the bearer tokens an operator gives agents, the file that remembers them by hash,
//! and the constant-time check the proxy runs on every request.
//!
//! A token is `mint_cap_<id>_<secret>`: `<id>` is 12 lowercase hex digits (public: it names the
//! capability in `mint cap list` and in the audit log, whose grammar `[A-Za-z0-9-]{1,64}` it
//! fits), `<secret>` is 64 lowercase hex digits, 256 bits from the OS random generator. Neither
//! part holds `_`, so a token splits one way only. The token is printed once by `mint cap issue`
//! and never stored: `capabilities.yaml` (0600, written atomically) keeps its SHA-256 and the
//! metadata (id, agent, created, expires, alias narrowing, revoked).
//!
//! [`CapabilityIndex::verify`] hashes the presented token and compares digests with
//! `subtle::ConstantTimeEq`. An unknown id is compared against a dummy digest, and expiry and
//! revocation are folded in without an early return, so unknown, tampered, expired and revoked
//! tokens take the same path and fail with the same [`CapabilityRejected`]. [`CapabilityStore`]
//! is what a running broker holds: it notices a changed file (inode, size, times) within its
//! check interval and reloads it, so new and revoked capabilities count within a second.
//!
//! Never logs or returns a token; errors about the file cite a line and column, not its text.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mint_policy::audit::{AgentName, CapabilityId};
use mint_policy::policy::is_alias_name;
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::{Choice, ConstantTimeEq};
use zeroize::Zeroizing;

use crate::config::declaration_file::{ConfigFileError, ReadError, read_config_file};
use crate::config::secure_file::{FileStamp, SecureFileError, write_atomic};

/// Every token starts with this.
pub const TOKEN_PREFIX: &str = "mint_cap_";

/// Lifetime of a capability when `--ttl` is not given.
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);

/// How often [`CapabilityStore`] looks at the file at most, by default.
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// The largest capabilities file Mint reads: 8 MiB (tens of thousands of capabilities).
pub const MAX_FILE_BYTES: usize = 8 * 1024 * 1024;

/// A token just issued. Shown once, then dropped (and wiped); `Debug` never shows it.
pub struct IssuedToken(SecretString);

// === impl IssuedToken ===

impl IssuedToken {
    /// The token, for printing it once.
    pub fn as_secret(&self) -> &SecretString {
        &self.0
    }
}

impl fmt::Debug for IssuedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IssuedToken(<redacted>)")
    }
}

/// One capability as stored: metadata and the SHA-256 of its token, never the token.
#[derive(Clone, PartialEq, Eq)]
pub struct Capability {
    /// The public id (12 lowercase hex digits for capabilities Mint issued).
    pub id: CapabilityId,
    /// The agent it belongs to: the principal policy rules match.
    pub agent: AgentName,
    /// SHA-256 of the whole token.
    pub token_sha256: [u8; 32],
    /// When it was issued (whole seconds).
    pub created: SystemTime,
    /// When it stops working (whole seconds): valid while `now < expires`.
    pub expires: SystemTime,
    /// Alias narrowing: the only aliases it may use. Empty: every alias the policy allows.
    pub aliases: Vec<String>,
    /// Whether `mint cap revoke` was run on it.
    pub revoked: bool,
}

/// Where a capability stands at a given time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapabilityStatus {
    /// Accepted by the proxy.
    Active,
    /// Past its expiry.
    Expired,
    /// Revoked by the operator.
    Revoked,
}

// === impl CapabilityStatus ===

impl CapabilityStatus {
    /// `active`, `expired` or `revoked`.
    pub fn as_str(self) -> &'static str {
        match self {
            CapabilityStatus::Active => "active",
            CapabilityStatus::Expired => "expired",
            CapabilityStatus::Revoked => "revoked",
        }
    }
}

// === impl Capability ===

impl Capability {
    /// Its status at `now`; revocation wins over expiry.
    pub fn status(&self, now: SystemTime) -> CapabilityStatus {
        if self.revoked {
            CapabilityStatus::Revoked
        } else if now >= self.expires {
            CapabilityStatus::Expired
        } else {
            CapabilityStatus::Active
        }
    }
}

impl fmt::Debug for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Capability")
            .field("id", &self.id.as_str())
            .field("agent", &self.agent.as_str())
            .field("created", &format_time(self.created))
            .field("expires", &format_time(self.expires))
            .field("aliases", &self.aliases)
            .field("revoked", &self.revoked)
            .finish_non_exhaustive()
    }
}

/// What a verified token grants: who the agent is and which aliases it may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapabilityGrant {
    /// The capability's id, for the audit record.
    pub id: CapabilityId,
    /// The agent: the principal policy rules match.
    pub agent: AgentName,
    /// Alias narrowing; empty means no narrowing.
    pub aliases: Vec<String>,
    /// When the capability expires.
    pub expires: SystemTime,
}

// === impl CapabilityGrant ===

impl CapabilityGrant {
    /// Whether the capability lets its holder use the alias `name` (policy still decides).
    pub fn allows_alias(&self, name: &str) -> bool {
        self.aliases.is_empty() || self.aliases.iter().any(|a| a == name)
    }
}

/// A token that is missing, malformed, unknown, tampered with, expired or revoked: one answer for
/// all, so a caller cannot tell which (the proxy's 401 `capability_invalid`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the capability is missing, unknown, expired or revoked")]
pub struct CapabilityRejected;

/// What `mint cap issue` asks for.
#[derive(Clone, Debug)]
pub struct IssueRequest {
    /// The agent.
    pub agent: AgentName,
    /// How long the capability lives.
    pub ttl: Duration,
    /// Alias narrowing; empty for none.
    pub aliases: Vec<String>,
}

/// The capabilities file, in memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapabilityFile {
    capabilities: Vec<Capability>,
}

/// Why the capabilities file could not be read, understood or written, or a change to it could
/// not be made. Never holds a token or the file's text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CapabilityFileError {
    /// The file is open to others or owned by someone else, or cannot be written.
    #[error(transparent)]
    File(#[from] SecureFileError),
    /// The file could not be read.
    #[error("cannot read capabilities file `{}`: {problem}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        problem: ReadError,
    },
    /// The file is larger than [`MAX_FILE_BYTES`].
    #[error("capabilities file `{}` is larger than 8 MiB", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The YAML does not have the file's shape.
    #[error("capabilities file `{origin}`:{line}:{column}: {problem}")]
    Syntax {
        /// The file.
        origin: String,
        /// Line, from 1.
        line: usize,
        /// Column, from 1.
        column: usize,
        /// The kind of problem, in words that never quote the file.
        problem: String,
    },
    /// An entry has a field outside its grammar, or two entries share an id.
    #[error("capabilities file `{origin}`: capability #{entry}: {problem}")]
    Invalid {
        /// The file.
        origin: String,
        /// The entry, from 1.
        entry: usize,
        /// What is wrong.
        problem: &'static str,
    },
    /// The file's `version` is not 1.
    #[error("capabilities file `{origin}`: unsupported `version`; this Mint reads version 1")]
    Version {
        /// The file.
        origin: String,
    },
    /// A lifetime that puts the expiry past what the clock can represent.
    #[error("the capability lifetime is too long; use at most 366d")]
    TtlTooLong,
    /// No capability has this id.
    #[error("unknown capability `{id}`; `mint cap list` shows the ids")]
    UnknownId {
        /// The id as given (an id is public; it is not the token).
        id: String,
    },
    /// No unused id was drawn (the random generator repeats itself).
    #[error("could not draw an unused capability id")]
    NoFreeId,
    /// The OS random generator failed.
    #[error("the operating system's random generator failed: {0}")]
    Random(getrandom::Error),
}

// === impl CapabilityFile ===

impl CapabilityFile {
    /// Reads and checks the file at `path`: opened once through `secure_file::open_trusted` (the
    /// file, the directories on its way and the links followed safe from other users), then its
    /// contents.
    pub fn load(path: &Path) -> Result<CapabilityFile, CapabilityFileError> {
        CapabilityFile::load_version(path).map(|(file, _)| file)
    }

    /// [`CapabilityFile::load`], also returning the version of the file that was read (from its
    /// descriptor).
    fn load_version(path: &Path) -> Result<(CapabilityFile, FileStamp), CapabilityFileError> {
        let read = read_config_file(path, MAX_FILE_BYTES).map_err(|error| match error {
            ConfigFileError::Insecure(error) => CapabilityFileError::File(error),
            ConfigFileError::Unreadable(ReadError::NotFound) => {
                CapabilityFileError::File(SecureFileError::Io {
                    action: "read",
                    path: path.to_path_buf(),
                    source: std::io::Error::from(std::io::ErrorKind::NotFound),
                })
            }
            ConfigFileError::Unreadable(problem) => CapabilityFileError::Unreadable {
                path: path.to_path_buf(),
                problem,
            },
        })?;
        if read.bytes.len() > MAX_FILE_BYTES {
            return Err(CapabilityFileError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        let file = CapabilityFile::parse(&read.bytes, &path.display().to_string())?;
        Ok((file, read.stamp))
    }

    /// Parses the file's bytes; `origin` names it in errors.
    pub fn parse(bytes: &[u8], origin: &str) -> Result<CapabilityFile, CapabilityFileError> {
        let raw: RawFile = serde_yaml::from_slice(bytes).map_err(|e| syntax_error(&e, origin))?;
        if raw.version != 1 {
            return Err(CapabilityFileError::Version {
                origin: origin.to_owned(),
            });
        }
        let mut seen = HashSet::new();
        let mut capabilities = Vec::with_capacity(raw.capabilities.len());
        for (index, raw) in raw.capabilities.into_iter().enumerate() {
            let invalid = |problem| CapabilityFileError::Invalid {
                origin: origin.to_owned(),
                entry: index + 1,
                problem,
            };
            let capability = raw.check().map_err(invalid)?;
            if !seen.insert(capability.id.as_str().to_owned()) {
                return Err(invalid("another capability has the same id"));
            }
            capabilities.push(capability);
        }
        Ok(CapabilityFile { capabilities })
    }

    /// The file's text.
    pub fn to_yaml(&self) -> String {
        let raw = RawFile {
            version: 1,
            capabilities: self.capabilities.iter().map(RawCapability::from).collect(),
        };
        let body = serde_yaml::to_string(&raw).unwrap_or_else(|_| {
            // INVARIANT: the raw types are strings, booleans and lists of strings, which
            // serde_yaml always serializes; an empty file is still valid should it ever fail.
            "version: 1\ncapabilities: []\n".to_owned()
        });
        format!("{FILE_HEADER}{body}")
    }

    /// Writes the file atomically with mode 0600.
    pub fn save(&self, path: &Path) -> Result<(), CapabilityFileError> {
        Ok(write_atomic(path, self.to_yaml().as_bytes())?)
    }

    /// The capabilities, in the order they were issued.
    pub fn capabilities(&self) -> &[Capability] {
        &self.capabilities
    }

    /// The capability with id `id`.
    pub fn find(&self, id: &str) -> Option<&Capability> {
        self.capabilities.iter().find(|c| c.id.as_str() == id)
    }

    /// Issues a new capability at `now`: a fresh id and 256-bit secret from the OS random
    /// generator. Returns the token (to print once) and the stored record.
    pub fn issue(
        &mut self,
        request: IssueRequest,
        now: SystemTime,
    ) -> Result<(IssuedToken, &Capability), CapabilityFileError> {
        let expires = whole_seconds(now)
            .checked_add(request.ttl)
            .ok_or(CapabilityFileError::TtlTooLong)?;
        let id = self.fresh_id()?;
        let mut secret = Zeroizing::new([0u8; SECRET_BYTES]);
        getrandom::fill(secret.as_mut_slice()).map_err(CapabilityFileError::Random)?;
        let mut token = Zeroizing::new(String::with_capacity(TOKEN_LEN));
        token.push_str(TOKEN_PREFIX);
        token.push_str(id.as_str());
        token.push('_');
        for byte in secret.iter() {
            push_hex(&mut token, *byte);
        }
        let created = whole_seconds(now);
        let mut aliases = request.aliases;
        aliases.sort_unstable();
        aliases.dedup();
        self.capabilities.push(Capability {
            id,
            agent: request.agent,
            token_sha256: Sha256::digest(token.as_bytes()).into(),
            created,
            expires,
            aliases,
            revoked: false,
        });
        let issued = IssuedToken(SecretString::from(token.as_str()));
        // INVARIANT: just pushed.
        let stored = &self.capabilities[self.capabilities.len() - 1];
        Ok((issued, stored))
    }

    /// A random id no capability in the file has. 48 bits make a clash rare; a few draws make a
    /// failure practically impossible.
    fn fresh_id(&self) -> Result<CapabilityId, CapabilityFileError> {
        for _ in 0..16 {
            let mut bytes = [0u8; ID_BYTES];
            getrandom::fill(&mut bytes).map_err(CapabilityFileError::Random)?;
            let text = hex(&bytes);
            if self.find(&text).is_none()
                && let Ok(id) = CapabilityId::new(text)
            {
                return Ok(id);
            }
        }
        Err(CapabilityFileError::NoFreeId)
    }

    /// Marks capability `id` revoked. Returns whether it was active until now (false when it was
    /// already revoked).
    pub fn revoke(&mut self, id: &str) -> Result<bool, CapabilityFileError> {
        let capability = self
            .capabilities
            .iter_mut()
            .find(|c| c.id.as_str() == id)
            .ok_or_else(|| CapabilityFileError::UnknownId { id: id.to_owned() })?;
        let was_live = !capability.revoked;
        capability.revoked = true;
        Ok(was_live)
    }

    /// The lookup structure the proxy verifies tokens against.
    pub fn index(&self) -> CapabilityIndex {
        CapabilityIndex::new(self)
    }
}

/// Capabilities by id, ready for [`CapabilityIndex::verify`].
pub struct CapabilityIndex {
    by_id: HashMap<String, Capability>,
    dummy_sha256: [u8; 32],
}

// === impl CapabilityIndex ===

impl CapabilityIndex {
    /// Indexes `file`.
    pub fn new(file: &CapabilityFile) -> CapabilityIndex {
        let mut dummy_sha256 = [0u8; 32];
        // A digest no token hashes to (the all-zero fallback included, with overwhelming
        // probability); unknown ids are compared against it so they cost the same as known ones.
        let _ = getrandom::fill(&mut dummy_sha256);
        CapabilityIndex {
            by_id: file
                .capabilities
                .iter()
                .map(|c| (c.id.as_str().to_owned(), c.clone()))
                .collect(),
            dummy_sha256,
        }
    }

    /// How many capabilities are indexed.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no capability is indexed.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Where the capability `id` stands at `now`; `None` when no capability has that id (it was
    /// removed from the file). For a WebSocket opened with a token this index verified: its
    /// standing is checked again while it stays open.
    pub fn status(&self, id: &str, now: SystemTime) -> Option<CapabilityStatus> {
        self.by_id.get(id).map(|c| c.status(now))
    }

    /// Checks `token` at `now`. Every failure is the same [`CapabilityRejected`], reached by the
    /// same steps: hash the token, find its id (or a dummy), compare digests in constant time,
    /// and fold in expiry and revocation.
    pub fn verify(
        &self,
        token: &str,
        now: SystemTime,
    ) -> Result<CapabilityGrant, CapabilityRejected> {
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let found = token_id(token).and_then(|id| self.by_id.get(id));
        let (expected, live) = match found {
            Some(c) => (&c.token_sha256, !c.revoked && now < c.expires),
            None => (&self.dummy_sha256, false),
        };
        let accepted = presented.ct_eq(expected) & Choice::from(u8::from(live));
        match found {
            Some(c) if bool::from(accepted) => Ok(CapabilityGrant {
                id: c.id.clone(),
                agent: c.agent.clone(),
                aliases: c.aliases.clone(),
                expires: c.expires,
            }),
            _ => Err(CapabilityRejected),
        }
    }
}

impl fmt::Debug for CapabilityIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CapabilityIndex")
            .field("capabilities", &self.by_id.len())
            .finish_non_exhaustive()
    }
}

/// The capabilities a running broker accepts, kept in step with the file: [`verify`] looks at
/// the file's inode, size and times at most once per check interval (250 ms by default) and
/// reloads it when they changed, so `mint cap issue` and `mint cap revoke` count within a second
/// without a restart.
///
/// A reload that fails (bad permissions, broken file) keeps the last good set and logs a warning;
/// a file that disappeared empties the set (fail closed). `verify` may do a `stat` and read a small
/// file: cheap, blocking, and fine on a proxy's request path.
///
/// [`verify`]: CapabilityStore::verify
pub struct CapabilityStore {
    path: PathBuf,
    check_interval: Duration,
    index: RwLock<Arc<CapabilityIndex>>,
    watch: Mutex<Watch>,
}

struct Watch {
    /// The version of the file the index was loaded from.
    stamp: Option<FileStamp>,
    /// The version that last failed to load, so the warning is logged once per version while
    /// the load is still retried at every check (a passing EMFILE or EIO must not make a
    /// revocation go unnoticed).
    failed: Option<FileStamp>,
    checked: Instant,
}

/// What a [`CapabilityStore::refresh`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refresh {
    /// The file is as it was.
    Unchanged,
    /// The file changed and was loaded.
    Reloaded,
    /// The file is gone; no capability is accepted until it comes back.
    Emptied,
}

// === impl CapabilityStore ===

impl CapabilityStore {
    /// Loads the file at `path`; failing here stops the broker from serving.
    pub fn open(path: &Path) -> Result<CapabilityStore, CapabilityFileError> {
        let (file, stamp) = CapabilityFile::load_version(path)?;
        let stamp = Some(stamp);
        Ok(CapabilityStore {
            path: path.to_path_buf(),
            check_interval: DEFAULT_CHECK_INTERVAL,
            index: RwLock::new(Arc::new(file.index())),
            watch: Mutex::new(Watch {
                failed: None,
                stamp,
                checked: Instant::now(),
            }),
        })
    }

    /// The same store, looking at the file at most once per `interval`.
    #[must_use]
    pub fn with_check_interval(mut self, interval: Duration) -> CapabilityStore {
        self.check_interval = interval;
        self
    }

    /// The file it follows.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Checks `token` at `now` against the current capabilities, first reloading the file if it
    /// changed and the check interval has passed.
    pub fn verify(
        &self,
        token: &str,
        now: SystemTime,
    ) -> Result<CapabilityGrant, CapabilityRejected> {
        self.refresh_if_due();
        self.index().verify(token, now)
    }

    /// Where the capability `id` stands at `now` ([`CapabilityIndex::status`]), first reloading
    /// the file if it changed and the check interval has passed: an open WebSocket asks this
    /// periodically, so a revocation ends it without another request coming in.
    pub fn status(&self, id: &str, now: SystemTime) -> Option<CapabilityStatus> {
        self.refresh_if_due();
        self.index().status(id, now)
    }

    /// The capabilities in force.
    pub fn index(&self) -> Arc<CapabilityIndex> {
        self.index
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Looks at the file now and reloads it if it changed. On error the last good set stays.
    pub fn refresh(&self) -> Result<Refresh, CapabilityFileError> {
        let mut watch = self.watch.lock().unwrap_or_else(PoisonError::into_inner);
        self.refresh_locked(&mut watch)
    }

    fn refresh_if_due(&self) {
        // Waits for another thread that is reloading right now, rather than verifying against
        // the set it is replacing: a capability issued just before would be refused (401), and
        // one revoked just before accepted. The reload reads one small file.
        let mut watch = self.watch.lock().unwrap_or_else(PoisonError::into_inner);
        if watch.checked.elapsed() < self.check_interval {
            return;
        }
        let failed_before = watch.failed;
        if let Err(error) = self.refresh_locked(&mut watch)
            && (watch.failed != failed_before || failed_before.is_none())
        {
            tracing::warn!(
                capabilities.file = %self.path.display(),
                error = %error,
                "Capabilities file not reloaded; keeping the last good version"
            );
        }
    }

    fn refresh_locked(&self, watch: &mut Watch) -> Result<Refresh, CapabilityFileError> {
        watch.checked = Instant::now();
        let current = match FileStamp::at(&self.path) {
            Ok(stamp) => stamp,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if watch.stamp.take().is_some() || !self.index().is_empty() {
                    self.replace(CapabilityIndex::new(&CapabilityFile::default()));
                    tracing::warn!(
                        capabilities.file = %self.path.display(),
                        "Capabilities file is gone; no capability is accepted"
                    );
                }
                return Ok(Refresh::Emptied);
            }
            Err(source) => {
                return Err(SecureFileError::Io {
                    action: "read",
                    path: self.path.clone(),
                    source,
                }
                .into());
            }
        };
        if watch.stamp == Some(current) {
            return Ok(Refresh::Unchanged);
        }
        // The version is remembered only once it loaded: a failure is retried at the next check.
        let (file, read) = match CapabilityFile::load_version(&self.path) {
            Ok(loaded) => loaded,
            Err(error) => {
                watch.failed = Some(current);
                return Err(error);
            }
        };
        // The version read, which a change right after the `stat` may have made newer than
        // `current`: the next check compares against what is really in force.
        watch.stamp = Some(read);
        watch.failed = None;
        let count = file.capabilities.len();
        self.replace(file.index());
        tracing::info!(
            capabilities.file = %self.path.display(),
            capabilities = count,
            "Capabilities reloaded"
        );
        Ok(Refresh::Reloaded)
    }

    fn replace(&self, index: CapabilityIndex) {
        *self.index.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(index);
    }
}

impl fmt::Debug for CapabilityStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CapabilityStore")
            .field("path", &self.path)
            .field("check_interval", &self.check_interval)
            .field("capabilities", &self.index().len())
            .finish_non_exhaustive()
    }
}

/// Formats a time as RFC 3339 UTC with whole seconds: `2025-01-31T12:00:00Z`.
pub fn format_time(time: SystemTime) -> String {
    humantime::format_rfc3339_seconds(time).to_string()
}

/// The id part of a well-formed token, or `None`.
fn token_id(token: &str) -> Option<&str> {
    let (id, _secret) = token.strip_prefix(TOKEN_PREFIX)?.split_once('_')?;
    is_issued_id(id).then_some(id)
}

fn is_issued_id(id: &str) -> bool {
    id.len() == ID_BYTES * 2 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn whole_seconds(time: SystemTime) -> SystemTime {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        push_hex(&mut out, *b);
    }
    out
}

fn push_hex(out: &mut String, byte: u8) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.push(char::from(DIGITS[usize::from(byte >> 4)]));
    out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
}

fn unhex32(text: &str) -> Option<[u8; 32]> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let nibble = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        out[i] = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

/// Describes a serde_yaml error by position and kind only: its own message can quote the file.
fn syntax_error(error: &serde_yaml::Error, origin: &str) -> CapabilityFileError {
    // serde_yaml's message may start with a path such as `capabilities[0].agent: `; the kind of
    // problem follows it.
    let message = error.to_string();
    let body = match message.split_once(": ") {
        Some((path, rest))
            if path
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '[' | ']')) =>
        {
            rest
        }
        _ => message.as_str(),
    };
    let problem = if body.starts_with("missing field `") {
        // Names one of this file's own fields, never a value.
        body.split(" at line").next().unwrap_or(body).to_owned()
    } else if body.starts_with("unknown field") {
        "unknown field; only Mint writes this file".to_owned()
    } else if body.starts_with("invalid type") || body.starts_with("invalid value") {
        "a field has the wrong type".to_owned()
    } else {
        "not a capabilities file (YAML with `version` and `capabilities`)".to_owned()
    };
    let (line, column) = error.location().map_or((1, 1), |l| (l.line(), l.column()));
    CapabilityFileError::Syntax {
        origin: origin.to_owned(),
        line,
        column,
        problem,
    }
}

/// The file as serde sees it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    version: u32,
    #[serde(default)]
    capabilities: Vec<RawCapability>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCapability {
    id: String,
    agent: String,
    token_sha256: String,
    created: String,
    expires: String,
    #[serde(default)]
    aliases: Vec<String>,
    #[serde(default)]
    revoked: bool,
}

// === impl RawCapability ===

impl RawCapability {
    fn check(self) -> Result<Capability, &'static str> {
        let id = CapabilityId::new(self.id)
            .map_err(|_| "`id` is not 1-64 characters of A-Z, a-z, 0-9 and `-`")?;
        let agent = AgentName::new(self.agent)
            .map_err(|_| "`agent` is not 1-64 characters of A-Z, a-z, 0-9, `.`, `_` and `-`")?;
        let token_sha256 =
            unhex32(&self.token_sha256).ok_or("`token_sha256` is not 64 lowercase hex digits")?;
        let created = humantime::parse_rfc3339(&self.created)
            .map_err(|_| "`created` is not an RFC 3339 UTC time such as 2025-01-31T12:00:00Z")?;
        let expires = humantime::parse_rfc3339(&self.expires)
            .map_err(|_| "`expires` is not an RFC 3339 UTC time such as 2025-01-31T12:00:00Z")?;
        if let Some(_bad) = self.aliases.iter().find(|a| !is_alias_name(a)) {
            return Err("`aliases` holds a name outside the alias grammar");
        }
        Ok(Capability {
            id,
            agent,
            token_sha256,
            created,
            expires,
            aliases: self.aliases,
            revoked: self.revoked,
        })
    }
}

impl From<&Capability> for RawCapability {
    fn from(c: &Capability) -> Self {
        RawCapability {
            id: c.id.as_str().to_owned(),
            agent: c.agent.as_str().to_owned(),
            token_sha256: hex(&c.token_sha256),
            created: format_time(c.created),
            expires: format_time(c.expires),
            aliases: c.aliases.clone(),
            revoked: c.revoked,
        }
    }
}

const ID_BYTES: usize = 6;
const SECRET_BYTES: usize = 32;
const TOKEN_LEN: usize = TOKEN_PREFIX.len() + ID_BYTES * 2 + 1 + SECRET_BYTES * 2;

const FILE_HEADER: &str = "\
# Mint capabilities: the SHA-256 of each token and its metadata, never a token.
# Written by `mint cap issue` and `mint cap revoke`; keep it 0600 and do not edit it by hand.
";

#[cfg(test)]
mod tests;
