//! The environment variables Mint reads, and where its files live.
//!
//! Every variable name is a `pub const` here, so the set Mint reads is greppable and documented
//! in one place. Paths resolve as: command-line argument, then the file's own variable, then
//! `$MINT_HOME/<file>`, then `.mint/<file>` in the working directory. This module reads the
//! environment but never writes it (`std::env::set_var` is banned): tests set variables on the
//! child process they start.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Directory that holds all of Mint's state; `.mint` in the working directory when unset.
///
/// Keep it outside every directory the agent can write: whoever can edit the policy or the alias
/// file decides where secrets go.
pub const MINT_HOME: &str = "MINT_HOME";

/// The alias declarations file; `$MINT_HOME/aliases.yaml` when unset.
pub const MINT_ALIASES_PATH: &str = "MINT_ALIASES_PATH";

/// The policy file; `$MINT_HOME/policy.yaml` when unset.
pub const MINT_POLICY_PATH: &str = "MINT_POLICY_PATH";

/// The audit log; `$MINT_HOME/audit.log` when unset.
pub const MINT_AUDIT_LOG_PATH: &str = "MINT_AUDIT_LOG_PATH";

/// When audit records are fsynced: `interval` (the default: at most every 20 ms, group
/// committed), `always` (each request waits for an fsync covering its record) or `never`.
pub const MINT_AUDIT_DURABILITY: &str = "MINT_AUDIT_DURABILITY";

/// The size in bytes at which the audit log is rotated; 64 MiB when unset, `0` turns size
/// rotation off (`mint audit rotate` still rotates).
pub const MINT_AUDIT_ROTATE_BYTES: &str = "MINT_AUDIT_ROTATE_BYTES";

/// The capabilities file (hashes and metadata only); `$MINT_HOME/capabilities.yaml` when unset.
pub const MINT_CAPABILITIES_PATH: &str = "MINT_CAPABILITIES_PATH";

/// The proxy's listen address, overridden by `--listen`; [`DEFAULT_LISTEN`] when unset.
pub const MINT_LISTEN: &str = "MINT_LISTEN";

/// Which OS keyring holds `keyring` secrets: `secret-service` (the default: GNOME Keyring,
/// KWallet or KeePassXC over D-Bus) or `keyutils` (the Linux kernel's key store; no daemon).
pub const MINT_KEYRING_BACKEND: &str = "MINT_KEYRING_BACKEND";

/// The keyring service name under which alias secrets are stored; `mint` when unset. Two Mint
/// homes of one user keep their secrets apart with different names.
pub const MINT_KEYRING_SERVICE: &str = "MINT_KEYRING_SERVICE";

/// A PEM file of extra CA certificates the proxy trusts for upstreams (`mint serve --upstream-ca`).
pub const MINT_UPSTREAM_CA: &str = "MINT_UPSTREAM_CA";

/// The OpenBao / Vault server of `vault:` alias sources: `https://HOST[:PORT]` (plain `http://`
/// only to loopback). Unset: no `vault:` source can be read.
pub const MINT_VAULT_ADDR: &str = "MINT_VAULT_ADDR";

/// The Vault namespace (`X-Vault-Namespace`); none when unset.
pub const MINT_VAULT_NAMESPACE: &str = "MINT_VAULT_NAMESPACE";

/// A file (owner-only) holding the token Mint reads Vault with; read before every request.
pub const MINT_VAULT_TOKEN_FILE: &str = "MINT_VAULT_TOKEN_FILE";

/// AppRole login: a file (owner-only) holding the role id; with [`MINT_VAULT_SECRET_ID_FILE`].
pub const MINT_VAULT_ROLE_ID_FILE: &str = "MINT_VAULT_ROLE_ID_FILE";

/// AppRole login: a file (owner-only) holding the secret id.
pub const MINT_VAULT_SECRET_ID_FILE: &str = "MINT_VAULT_SECRET_ID_FILE";

/// The mount of the AppRole auth method; `approle` when unset.
pub const MINT_VAULT_APPROLE_MOUNT: &str = "MINT_VAULT_APPROLE_MOUNT";

/// A PEM file of the CA certificates that verify the Vault server; the upstream trust (web roots
/// and `--upstream-ca`) when unset.
pub const MINT_VAULT_CA_FILE: &str = "MINT_VAULT_CA_FILE";

/// How long a value read from Vault is used before it is read again; `5m` when unset.
pub const MINT_VAULT_CACHE: &str = "MINT_VAULT_CACHE";

/// How long past its cache time a value still serves while Vault cannot be read; `15m` when
/// unset. Past it, requests that use the alias get `503 secret_unavailable`.
pub const MINT_VAULT_MAX_STALE: &str = "MINT_VAULT_MAX_STALE";

/// The interception CA's certificate (PEM, 0644); `$MINT_HOME/ca.pem` when unset. Brokers that
/// share one CA point this and [`MINT_CA_KEY`] at the same files.
pub const MINT_CA_CERT: &str = "MINT_CA_CERT";

/// The interception CA's private key (PEM, 0600); `$MINT_HOME/ca.key` when unset.
pub const MINT_CA_KEY: &str = "MINT_CA_KEY";

/// The Redis that keeps call-limit counters shared by several brokers (`mint serve
/// --limits-redis`, `mint policy explain --limits-redis`): `redis://`, `rediss://` or
/// `redis+unix://`. Unset: each broker counts in its own memory. Prefer it to the flag when the
/// URL holds a password (a command line is visible to every local user).
pub const MINT_LIMITS_REDIS: &str = "MINT_LIMITS_REDIS";

/// The prefix of Mint's keys in that Redis; `mint:limits:` when unset.
pub const MINT_LIMITS_REDIS_PREFIX: &str = "MINT_LIMITS_REDIS_PREFIX";

/// The CA certificates (PEM) a `rediss://` server's certificate must chain to; the system's
/// when unset.
pub const MINT_LIMITS_REDIS_CA: &str = "MINT_LIMITS_REDIS_CA";

/// The longest one admission waits for Redis before the request is refused (`503
/// limits_unavailable`); `50ms` when unset.
pub const MINT_LIMITS_REDIS_WAIT: &str = "MINT_LIMITS_REDIS_WAIT";

/// Where `mint run` and `mint env` find the broker (`http://HOST:PORT`), overridden by `--proxy`;
/// `http://` and [`DEFAULT_LISTEN`] when unset.
pub const MINT_PROXY_URL: &str = "MINT_PROXY_URL";

/// Any non-empty value turns off the colour (ANSI escapes) of log lines, even on a terminal
/// (<https://no-color.org>). Lines to a file or a pipe never carry colour.
pub const NO_COLOR: &str = "NO_COLOR";

/// The proxy's listen address when neither `--listen` nor [`MINT_LISTEN`] is given: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8700";

/// The home directory used when [`MINT_HOME`] is unset, relative to the working directory.
pub const DEFAULT_HOME: &str = ".mint";

/// Where Mint's files are, after the environment has been applied. Command-line arguments are
/// applied by the caller on top of these (`args.file.unwrap_or(paths.policy)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    /// The home directory.
    pub home: PathBuf,
    /// The alias declarations file.
    pub aliases: PathBuf,
    /// The policy file.
    pub policy: PathBuf,
    /// The audit log.
    pub audit_log: PathBuf,
    /// The capabilities file.
    pub capabilities: PathBuf,
    /// The interception CA's certificate.
    pub ca_cert: PathBuf,
    /// The interception CA's private key.
    pub ca_key: PathBuf,
    /// The key value-shaped placeholders are derived from (always in the home).
    pub placeholder_key: PathBuf,
}

// === impl Paths ===

impl Paths {
    /// Resolves the paths from the process environment.
    pub fn from_env() -> Paths {
        Paths::resolve(|name| std::env::var_os(name))
    }

    /// Resolves the paths from `lookup`, which returns a variable's value. A variable set to the
    /// empty string counts as unset, so `MINT_POLICY_PATH=` cannot silently name the working
    /// directory.
    pub fn resolve(lookup: impl Fn(&str) -> Option<OsString>) -> Paths {
        let var = |name: &str| lookup(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let home = var(MINT_HOME).unwrap_or_else(|| PathBuf::from(DEFAULT_HOME));
        let file = |name: &str, default: &str| var(name).unwrap_or_else(|| home.join(default));
        Paths {
            aliases: file(MINT_ALIASES_PATH, ALIASES_FILE),
            policy: file(MINT_POLICY_PATH, POLICY_FILE),
            audit_log: file(MINT_AUDIT_LOG_PATH, AUDIT_LOG_FILE),
            capabilities: file(MINT_CAPABILITIES_PATH, CAPABILITIES_FILE),
            ca_cert: file(MINT_CA_CERT, CA_CERT_FILE),
            ca_key: file(MINT_CA_KEY, CA_KEY_FILE),
            placeholder_key: home.join(PLACEHOLDER_KEY_FILE),
            home,
        }
    }

    /// The policy file: `arg` when the command line gave one, else the resolved default.
    pub fn policy_or(&self, arg: Option<&Path>) -> PathBuf {
        arg.map_or_else(|| self.policy.clone(), Path::to_path_buf)
    }
}

const ALIASES_FILE: &str = "aliases.yaml";
const POLICY_FILE: &str = "policy.yaml";
const AUDIT_LOG_FILE: &str = "audit.log";
const CAPABILITIES_FILE: &str = "capabilities.yaml";
const CA_CERT_FILE: &str = "ca.pem";
const CA_KEY_FILE: &str = "ca.key";
const PLACEHOLDER_KEY_FILE: &str = "placeholder.key";

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(vars: &[(&str, &str)]) -> Paths {
        Paths::resolve(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        })
    }

    #[test]
    fn defaults_to_dot_mint() {
        let paths = resolve(&[]);
        assert_eq!(paths.home, PathBuf::from(".mint"));
        assert_eq!(paths.aliases, PathBuf::from(".mint/aliases.yaml"));
        assert_eq!(paths.policy, PathBuf::from(".mint/policy.yaml"));
        assert_eq!(paths.audit_log, PathBuf::from(".mint/audit.log"));
        assert_eq!(paths.capabilities, PathBuf::from(".mint/capabilities.yaml"));
        assert_eq!(paths.ca_cert, PathBuf::from(".mint/ca.pem"));
        assert_eq!(paths.ca_key, PathBuf::from(".mint/ca.key"));
    }

    #[test]
    fn home_moves_every_file() {
        let paths = resolve(&[(MINT_HOME, "/srv/mint")]);
        assert_eq!(paths.home, PathBuf::from("/srv/mint"));
        assert_eq!(paths.aliases, PathBuf::from("/srv/mint/aliases.yaml"));
        assert_eq!(paths.policy, PathBuf::from("/srv/mint/policy.yaml"));
        assert_eq!(paths.audit_log, PathBuf::from("/srv/mint/audit.log"));
        assert_eq!(
            paths.capabilities,
            PathBuf::from("/srv/mint/capabilities.yaml")
        );
    }

    #[test]
    fn file_variables_override_home() {
        let paths = resolve(&[
            (MINT_HOME, "/srv/mint"),
            (MINT_ALIASES_PATH, "/etc/a.yaml"),
            (MINT_POLICY_PATH, "/etc/p.yaml"),
            (MINT_AUDIT_LOG_PATH, "/var/log/mint.log"),
            (MINT_CAPABILITIES_PATH, "/etc/c.yaml"),
        ]);
        assert_eq!(paths.aliases, PathBuf::from("/etc/a.yaml"));
        assert_eq!(paths.policy, PathBuf::from("/etc/p.yaml"));
        assert_eq!(paths.audit_log, PathBuf::from("/var/log/mint.log"));
        assert_eq!(paths.capabilities, PathBuf::from("/etc/c.yaml"));
    }

    #[test]
    fn empty_variables_count_as_unset() {
        let paths = resolve(&[(MINT_HOME, ""), (MINT_POLICY_PATH, "")]);
        assert_eq!(paths.policy, PathBuf::from(".mint/policy.yaml"));
    }

    #[test]
    fn argument_wins_over_everything() {
        let paths = resolve(&[(MINT_POLICY_PATH, "/etc/p.yaml")]);
        assert_eq!(
            paths.policy_or(Some(Path::new("mine.yaml"))),
            PathBuf::from("mine.yaml")
        );
        assert_eq!(paths.policy_or(None), PathBuf::from("/etc/p.yaml"));
    }
}
