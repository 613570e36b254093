//! The `keyring` source: the OS keyring through the `keyring` crate, service `mint` and account =
//! the alias name. Two Linux backends, chosen by [`KeyringBackend`]:
//!
//! - `secret-service` (default): the freedesktop Secret Service over D-Bus (GNOME Keyring,
//!   KWallet, KeePassXC), spoken in pure Rust. Items persist on disk, encrypted by the keyring.
//!   Needs a D-Bus session bus and an unlocked collection.
//! - `keyutils`: the Linux kernel's key store. No daemon; keys live in kernel memory in the
//!   caller's session keyring (linked into the user's persistent keyring when the kernel offers
//!   one) and are gone after a reboot, so the operator re-adds them. For headless hosts and
//!   containers. Keys are found through the persistent keyring, which the kernel links into
//!   the process's session keyring (one of its own is made for a process without one), so
//!   `mint alias add` and the broker share them when run as one user, in any session.
//!
//! Errors from the platform are turned into [`StoreError`] here and never passed on whole: the
//! crate's `BadEncoding` error would carry the stored bytes. An unreachable keyring's error
//! names the ways out (the other backend, an `env:` or `file:` source, the D-Bus recipe), and a
//! keyutils "not found" is believed only after a probe shows the keyring can hold keys for this
//! process. A Secret Service item the daemon lists but serves no object for is read through
//! `service_secrets`.

use std::fmt;

use keyring::Entry;
use keyring::credential::Credential;
use secrecy::ExposeSecret;
use zeroize::Zeroizing;

use super::{CredentialStore, CredentialValue, StoreError, ValueProblem};
use crate::config::env::{MINT_KEYRING_BACKEND, MINT_KEYRING_SERVICE};

mod service_secrets;

/// Which OS keyring [`KeyringStore`] talks to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KeyringBackend {
    /// The freedesktop Secret Service over D-Bus.
    #[default]
    SecretService,
    /// The Linux kernel key store (keyutils).
    Keyutils,
}

// === impl KeyringBackend ===

impl KeyringBackend {
    /// Reads `secret-service` or `keyutils`.
    pub fn parse(text: &str) -> Option<KeyringBackend> {
        match text {
            "secret-service" => Some(KeyringBackend::SecretService),
            "keyutils" => Some(KeyringBackend::Keyutils),
            _ => None,
        }
    }

    /// The name as written in [`MINT_KEYRING_BACKEND`].
    pub fn as_str(self) -> &'static str {
        match self {
            KeyringBackend::SecretService => "secret-service",
            KeyringBackend::Keyutils => "keyutils",
        }
    }
}

impl fmt::Display for KeyringBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which keyring, and the service name items are filed under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyringConfig {
    /// The backend.
    pub backend: KeyringBackend,
    /// The service name; `mint` unless [`MINT_KEYRING_SERVICE`] says otherwise.
    pub service: String,
}

/// A keyring setting in the environment that Mint does not accept.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyringConfigError {
    /// [`MINT_KEYRING_BACKEND`] names no backend.
    #[error(
        "unknown keyring backend in {MINT_KEYRING_BACKEND}; use `secret-service` or `keyutils`"
    )]
    UnknownBackend,
    /// [`MINT_KEYRING_SERVICE`] is outside `[a-z0-9][a-z0-9._-]{0,63}`.
    #[error(
        "invalid keyring service name in {MINT_KEYRING_SERVICE}; use 1-64 characters of a-z, 0-9, \
         `.`, `_` and `-`, such as `mint`"
    )]
    InvalidService,
}

// === impl KeyringConfig ===

impl Default for KeyringConfig {
    fn default() -> Self {
        KeyringConfig {
            backend: KeyringBackend::default(),
            service: DEFAULT_SERVICE.to_owned(),
        }
    }
}

impl KeyringConfig {
    /// Reads [`MINT_KEYRING_BACKEND`] and [`MINT_KEYRING_SERVICE`] from the process environment.
    pub fn from_env() -> Result<KeyringConfig, KeyringConfigError> {
        KeyringConfig::resolve(|name| std::env::var(name).ok())
    }

    /// Reads the settings through `lookup`; an empty variable counts as unset.
    pub fn resolve(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<KeyringConfig, KeyringConfigError> {
        let var = |name: &str| lookup(name).filter(|v| !v.is_empty());
        let backend = match var(MINT_KEYRING_BACKEND) {
            None => KeyringBackend::default(),
            Some(text) => KeyringBackend::parse(&text).ok_or(KeyringConfigError::UnknownBackend)?,
        };
        let service = match var(MINT_KEYRING_SERVICE) {
            None => DEFAULT_SERVICE.to_owned(),
            Some(text) if is_service_name(&text) => text,
            Some(_) => return Err(KeyringConfigError::InvalidService),
        };
        Ok(KeyringConfig { backend, service })
    }
}

/// Secrets in the OS keyring. Every call blocks (a D-Bus round trip or a system call); see the
/// module documentation of `credential_store` for async callers.
#[derive(Clone, Debug)]
pub struct KeyringStore {
    config: KeyringConfig,
}

// === impl KeyringStore ===

impl KeyringStore {
    /// A store for `config`'s backend and service. Nothing is contacted until the first call.
    pub fn new(config: &KeyringConfig) -> KeyringStore {
        KeyringStore {
            config: config.clone(),
        }
    }

    /// The backend and service in use.
    pub fn config(&self) -> &KeyringConfig {
        &self.config
    }

    fn entry(&self, account: &str) -> Result<Entry, StoreError> {
        let service = self.config.service.as_str();
        let credential: Box<Credential> = match self.config.backend {
            KeyringBackend::SecretService => Box::new(
                keyring::secret_service::SsCredential::new_with_target(None, service, account)
                    .map_err(store_error)?,
            ),
            KeyringBackend::Keyutils => {
                // Built twice on purpose. In a process without a session keyring of its own,
                // the first build takes the user session keyring (`@us`) as "the session" and
                // then asks for the persistent keyring with the session as destination, which
                // makes the kernel give this thread a new session keyring and link the
                // persistent one into it, not into `@us`. The first build would search `@us`,
                // which does not hold the persistent keyring (and in containers may refuse
                // links), so every key added by another `mint` command reads as missing. The
                // second build searches the new session keyring, where the persistent keyring
                // (where Mint's keys live across processes) is linked. Inside a session keyring
                // both builds are the same.
                let _attach =
                    keyring::keyutils::KeyutilsCredential::new_with_target(None, service, account)
                        .map_err(store_error)?;
                Box::new(
                    keyring::keyutils::KeyutilsCredential::new_with_target(None, service, account)
                        .map_err(store_error)?,
                )
            }
        };
        Ok(Entry::new_with_credential(credential))
    }
}

impl CredentialStore for KeyringStore {
    fn name(&self) -> &'static str {
        match self.config.backend {
            KeyringBackend::SecretService => "keyring (Secret Service)",
            KeyringBackend::Keyutils => "keyring (kernel keyutils)",
        }
    }

    fn read(&self, key: &str) -> Result<CredentialValue, StoreError> {
        let secret = self
            .entry(key)
            .and_then(|entry| entry.get_secret().map_err(store_error))
            .map(Zeroizing::new);
        let bytes = match secret {
            Err(StoreError::Unavailable { reason }) if is_stale_item(&reason) => {
                self.read_stale(key, reason)?
            }
            other => self.reachable(other)?,
        };
        Ok(CredentialValue::from_bytes(bytes)?)
    }

    fn write(&self, key: &str, value: &CredentialValue) -> Result<(), StoreError> {
        let entry = self
            .entry(key)
            .map_err(|e| self.ways_out(self.unusable(e)))?;
        // EXPOSE: the keyring crate takes the value as `&str` to store it; nothing else sees it.
        entry
            .set_password(value.as_secret().expose_secret())
            .map_err(|e| self.ways_out(self.unusable(store_error(e))))
    }

    fn delete(&self, key: &str) -> Result<(), StoreError> {
        let deleted = self.entry(key).and_then(|entry| {
            match entry.delete_credential().map_err(store_error) {
                Err(StoreError::Unavailable { reason })
                    if self.config.backend == KeyringBackend::SecretService =>
                {
                    // Deleting an item the daemon lists but serves no object for fails with a
                    // bare D-Bus error; reading it says why, and `ways_out` what to do.
                    match entry.get_secret().map_err(store_error).map(Zeroizing::new) {
                        Err(StoreError::Unavailable { reason: read }) if is_stale_item(&read) => {
                            Err(StoreError::Unavailable { reason: read })
                        }
                        _ => Err(StoreError::Unavailable { reason }),
                    }
                }
                other => other,
            }
        });
        self.reachable(deleted)
    }

    /// As the trait says, but without the way around a Secret Service item listed with no
    /// object behind it (changed from another D-Bus session): such an item can be read through
    /// `GetSecrets` but not deleted, so it is refused here, before the alias file changes.
    fn check_delete(&self, key: &str) -> Result<(), StoreError> {
        let read = self
            .entry(key)
            .and_then(|entry| entry.get_secret().map_err(store_error))
            .map(Zeroizing::new);
        match read {
            Err(StoreError::Unavailable { reason }) if is_stale_item(&reason) => {
                Err(self.ways_out(StoreError::Unavailable { reason }))
            }
            other => match self.reachable(other) {
                Ok(_) | Err(StoreError::Missing | StoreError::Value(_)) => Ok(()),
                Err(problem) => Err(problem),
            },
        }
    }

    /// Writes, reads back and deletes a probe item under an account no alias can have (alias
    /// names never start with `.`). Catches a keyutils session keyring the process does not
    /// possess, where writes succeed and reads find nothing.
    fn probe(&self) -> Result<(), StoreError> {
        // A name of its own per probe: two probes at once (two `mint` commands, parallel tests)
        // must not delete each other's item and read "missing".
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let sequence = PROBE_SEQUENCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let account = format!("{PROBE_ACCOUNT}-{}-{nanos}-{sequence}", std::process::id());
        let entry = self
            .entry(&account)
            .map_err(|e| self.ways_out(self.unusable(e)))?;
        entry
            .set_password(PROBE_VALUE)
            .map_err(|e| self.ways_out(self.unusable(store_error(e))))?;
        let read = entry.get_secret().map_err(store_error);
        let _ = entry.delete_credential();
        match read {
            Ok(bytes) if bytes == PROBE_VALUE.as_bytes() => Ok(()),
            Ok(_) => Err(self.ways_out(self.unusable(StoreError::Missing))),
            Err(error) => Err(self.ways_out(self.unusable(error))),
        }
    }
}

// === impl KeyringStore ===

impl KeyringStore {
    /// The outcome of a read or delete, where "not found" is believed only when the keyring can
    /// hold items for this process. With keyutils, a process without a session keyring of its
    /// own falls back to the user session keyring (`@us`); where that cannot hold keys (a
    /// container's, or one the process may not link into), every search misses, and "not found"
    /// would send `mint alias list` and `mint serve` after a secret that sits safely in the
    /// persistent keyring, and let `mint alias rm` drop a declaration while its key stays. A
    /// miss is therefore checked with [`CredentialStore::probe`] (keyutils only: the Secret
    /// Service answers "no such item" only when it could have found one).
    fn reachable<T>(&self, outcome: Result<T, StoreError>) -> Result<T, StoreError> {
        match outcome {
            Err(StoreError::Missing) if self.config.backend == KeyringBackend::Keyutils => {
                self.probe()?;
                Err(StoreError::Missing)
            }
            Err(error) => Err(self.ways_out(error)),
            Ok(value) => Ok(value),
        }
    }

    /// Reads `key` through the service's `GetSecrets` when the Secret Service listed its item
    /// but serves no object for it (see `service_secrets`); says what happened and what to do
    /// when that fails too.
    fn read_stale(&self, key: &str, reason: String) -> Result<Zeroizing<Vec<u8>>, StoreError> {
        match service_secrets::read(&self.config.service, key) {
            Ok(Some(bytes)) => {
                tracing::warn!(
                    credential.account = key,
                    "The Secret Service lists this item but serves no object for it (it was \
                     changed from another D-Bus session); read it through GetSecrets instead. \
                     Run `mint alias` commands on the broker's D-Bus session"
                );
                Ok(bytes)
            }
            Ok(None) | Err(_) => Err(self.ways_out(StoreError::Unavailable { reason })),
        }
    }

    /// "Not found" while storing, or right after storing, means the keyring cannot hold items
    /// for this process: say why instead.
    fn unusable(&self, error: StoreError) -> StoreError {
        if !matches!(error, StoreError::Missing) {
            return error;
        }
        let reason = match self.config.backend {
            KeyringBackend::Keyutils => {
                "the kernel keyring does not keep keys for this process: it has no session \
                 keyring of its own, and the user session keyring it falls back to cannot hold \
                 them here"
            }
            KeyringBackend::SecretService => {
                "the Secret Service does not keep items for this process"
            }
        };
        StoreError::Unavailable {
            reason: reason.to_owned(),
        }
    }

    /// An unreachable keyring's error, with the ways out named: the other backend, a source
    /// the operator fills, or (Secret Service) a keyring started in a D-Bus session; for a
    /// Secret Service that lists an item it does not serve, the session to work in instead.
    fn ways_out(&self, error: StoreError) -> StoreError {
        let StoreError::Unavailable { reason } = error else {
            return error;
        };
        let ways_out = match self.config.backend {
            KeyringBackend::SecretService if is_stale_item(&reason) => STALE_ITEM_WAYS_OUT,
            KeyringBackend::Keyutils if is_forbidden_syscall(&reason) => {
                WAYS_OUT_KEYUTILS_FORBIDDEN
            }
            KeyringBackend::Keyutils => WAYS_OUT_KEYUTILS,
            KeyringBackend::SecretService => WAYS_OUT_SECRET_SERVICE,
        };
        if reason.ends_with(ways_out) {
            return StoreError::Unavailable { reason };
        }
        StoreError::Unavailable {
            reason: format!("{reason}; {ways_out}"),
        }
    }
}

/// Turns the keyring crate's error into ours without carrying any stored bytes along.
fn store_error(error: keyring::Error) -> StoreError {
    match error {
        keyring::Error::NoEntry => StoreError::Missing,
        keyring::Error::BadEncoding(bytes) => {
            // The stored bytes themselves: wipe them, keep only the fact.
            drop(Zeroizing::new(bytes));
            StoreError::Value(ValueProblem::NotUtf8)
        }
        keyring::Error::PlatformFailure(inner) | keyring::Error::NoStorageAccess(inner) => {
            StoreError::Unavailable {
                reason: platform_reason(&*inner),
            }
        }
        keyring::Error::Ambiguous(items) => StoreError::Refused {
            reason: format!(
                "{} keyring items match this service and account; delete the extra ones",
                items.len()
            ),
        },
        keyring::Error::TooLong(attribute, limit) => StoreError::Refused {
            reason: format!("`{attribute}` is longer than the keyring's limit of {limit}"),
        },
        keyring::Error::Invalid(attribute, reason) => StoreError::Refused {
            reason: format!("`{attribute}` is invalid: {reason}"),
        },
        _ => StoreError::Refused {
            reason: "unexpected keyring error".to_owned(),
        },
    }
}

/// Whether the Secret Service named an item it serves no object for: the daemon reloaded its
/// files after another daemon (on another D-Bus session) changed them.
fn is_stale_item(reason: &str) -> bool {
    reason.contains("Object does not exist at path")
        || reason.contains("org.freedesktop.DBus.Error.UnknownObject")
}

/// The platform's own words (a D-Bus or kernel error), on one line and bounded in length.
fn platform_reason(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let more = inner.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = inner.source();
    }
    let mut line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_REASON_CHARS)
        .collect();
    if text.chars().count() > MAX_REASON_CHARS {
        line.push('…');
    }
    line
}

fn is_service_name(text: &str) -> bool {
    let bytes = text.as_bytes();
    matches!(bytes.first(), Some(b) if b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.len() <= 64
        && bytes.iter().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        })
}

/// The keyring service name of DESIGN.md.
pub const DEFAULT_SERVICE: &str = "mint";

const MAX_REASON_CHARS: usize = 300;

/// What to do when the Secret Service lists an item it does not serve, and even `GetSecrets`
/// cannot read it.
const STALE_ITEM_WAYS_OUT: &str = "the keyring daemon on this D-Bus session lists an item it \
     does not serve, which happens after another keyring daemon (on another D-Bus session) \
     changed the same keyring files; run `mint alias` commands on the broker's D-Bus session, \
     and restart this session's keyring daemon (with the broker) to recover";

/// What to do when the kernel keyring cannot be used: every `mint` command that touches it
/// (`alias add`, `list`, `rm`, `serve`) runs inside one session keyring, or the secret moves.
const WAYS_OUT_KEYUTILS: &str = "run every `mint` command that touches the keyring inside one \
     session keyring (start `keyctl session - bash`, then run them in it), or give the alias a \
     source the operator fills (`--source env:VAR` or `--source file:/path`); see \
     \"Choosing a secret source\" in docs/credentials.md";

/// What to do when the kernel refuses the key system calls themselves (`EPERM` from a seccomp
/// filter, as Docker's default profile has, or `ENOSYS` from a kernel built without keys): no
/// session keyring can help there.
const WAYS_OUT_KEYUTILS_FORBIDDEN: &str = "the kernel refused the keyring system calls to this \
     process (a container's seccomp profile, such as Docker's default, forbids `keyctl`; or the \
     kernel has no key support), so no session keyring can help: give the alias a source the \
     operator fills (`--source env:VAR` or `--source file:/path`, such as a mounted secret), or \
     use the Secret Service; see \"Choosing a secret source\" in docs/credentials.md";

/// Whether a keyutils failure is the system call being refused rather than a key or keyring
/// missing: `EPERM` (a seccomp filter) or `ENOSYS`, as `linux-keyutils` words them.
fn is_forbidden_syscall(reason: &str) -> bool {
    [
        "PermissionDenied",
        "Operation not permitted",
        "not implemented",
        "NotSupported",
    ]
    .iter()
    .any(|word| reason.contains(word))
}

/// What to do when the Secret Service cannot be reached: the usual case on a server, in a
/// container or in CI, where no desktop session runs a D-Bus session bus and a keyring.
const WAYS_OUT_SECRET_SERVICE: &str = "without a desktop session, use the kernel keyring \
     (`export MINT_KEYRING_BACKEND=keyutils` for every `mint` command), a source the operator fills \
     (`--source env:VAR` or `--source file:/path`), or start and unlock a keyring in a D-Bus \
     session and run every `mint` command inside it; see \"Choosing a secret source\" in \
     docs/credentials.md";

/// The account of the probe item: outside the alias grammar, so never an alias's.
const PROBE_ACCOUNT: &str = ".mint-probe";
const PROBE_VALUE: &str = "probe";
static PROBE_SEQUENCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(vars: &[(&str, &str)]) -> Result<KeyringConfig, KeyringConfigError> {
        KeyringConfig::resolve(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn config_defaults_to_secret_service_and_mint() {
        let config = resolve(&[]).unwrap();
        assert_eq!(config.backend, KeyringBackend::SecretService);
        assert_eq!(config.service, "mint");
        assert_eq!(resolve(&[(MINT_KEYRING_BACKEND, "")]).unwrap(), config);
    }

    #[test]
    fn config_reads_the_environment() {
        let config = resolve(&[
            (MINT_KEYRING_BACKEND, "keyutils"),
            (MINT_KEYRING_SERVICE, "mint-staging"),
        ])
        .unwrap();
        assert_eq!(config.backend, KeyringBackend::Keyutils);
        assert_eq!(config.service, "mint-staging");
        assert_eq!(
            resolve(&[(MINT_KEYRING_BACKEND, "kwallet")]),
            Err(KeyringConfigError::UnknownBackend)
        );
        for bad in ["Mint", "-x", "a b", &"x".repeat(65)] {
            assert_eq!(
                resolve(&[(MINT_KEYRING_SERVICE, bad)]),
                Err(KeyringConfigError::InvalidService),
                "{bad}"
            );
        }
    }

    #[test]
    fn unreachable_keyrings_name_the_ways_out_once() {
        for backend in [KeyringBackend::SecretService, KeyringBackend::Keyutils] {
            let store = KeyringStore::new(&KeyringConfig {
                backend,
                service: DEFAULT_SERVICE.to_owned(),
            });
            let error = store.ways_out(StoreError::Unavailable {
                reason: "no secret service provider or dbus session found".to_owned(),
            });
            let again = store.ways_out(error).to_string();
            assert!(again.contains("--source env:VAR"), "{again}");
            assert!(again.contains("docs/credentials.md"), "{again}");
            assert_eq!(again.matches("--source env:VAR").count(), 1, "{again}");
            assert!(matches!(
                store.ways_out(StoreError::Missing),
                StoreError::Missing
            ));
        }
    }

    #[test]
    fn items_the_daemon_does_not_serve_get_their_own_advice() {
        let store = KeyringStore::new(&KeyringConfig::default());
        let reason = "zbus error: org.freedesktop.DBus.Error.UnknownMethod: Object does not \
                      exist at path “/org/freedesktop/secrets/collection/login/4”";
        assert!(is_stale_item(reason));
        assert!(!is_stale_item(
            "no secret service provider or dbus session found"
        ));
        let message = store
            .ways_out(StoreError::Unavailable {
                reason: reason.to_owned(),
            })
            .to_string();
        assert!(message.contains("the broker's D-Bus session"), "{message}");
        assert!(!message.contains("without a desktop session"), "{message}");
    }

    #[test]
    fn bad_encoding_keeps_no_bytes() {
        let error = store_error(keyring::Error::BadEncoding(b"canary-bytes\xff".to_vec()));
        assert!(matches!(error, StoreError::Value(ValueProblem::NotUtf8)));
        assert!(!format!("{error:?}{error}").contains("canary"));
    }

    #[test]
    fn platform_reasons_are_one_bounded_line() {
        let error = std::io::Error::other(format!("line one\nline two {}", "x".repeat(400)));
        let reason = platform_reason(&error);
        assert!(!reason.contains('\n'));
        assert!(reason.starts_with("line one line two"));
        assert_eq!(reason.chars().count(), MAX_REASON_CHARS + 1);
    }
}
