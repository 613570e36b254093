//! Where `mint-mcp` finds Mint's files: the Files table of DESIGN.md, resolved from the
//! environment once at start.
//!
//! The same rules as the broker (`broker/src/config/env.rs`): a file's own variable, then
//! `$MINT_HOME/<file>`, then `.mint/<file>` in the working directory; a variable set to the empty
//! string counts as unset. Only resolves names: nothing here opens a file (that is `file_guard`'s
//! job) and nothing writes the environment.

use std::ffi::OsString;
use std::path::PathBuf;

/// Directory that holds all of Mint's state; `.mint` in the working directory when unset.
pub const MINT_HOME: &str = "MINT_HOME";

/// The alias declarations file, `alias_list`'s default; `$MINT_HOME/aliases.yaml` when unset.
/// Its `file:` sources are the secret files every tool refuses to read.
pub const MINT_ALIASES_PATH: &str = "MINT_ALIASES_PATH";

/// The audit log, `audit_tail`'s default; `$MINT_HOME/audit.log` when unset.
pub const MINT_AUDIT_LOG_PATH: &str = "MINT_AUDIT_LOG_PATH";

/// The broker's policy file, which `policy_check` may read wherever it is;
/// `$MINT_HOME/policy.yaml` when unset.
pub const MINT_POLICY_PATH: &str = "MINT_POLICY_PATH";

/// The capabilities file, which every tool refuses to read; `$MINT_HOME/capabilities.yaml` when
/// unset.
pub const MINT_CAPABILITIES_PATH: &str = "MINT_CAPABILITIES_PATH";

/// The proxy's listen address, shown by `mint_usage`; `127.0.0.1:8700` when unset.
pub const MINT_LISTEN: &str = "MINT_LISTEN";

/// The home directory used when [`MINT_HOME`] is unset, relative to the working directory.
pub const DEFAULT_HOME: &str = ".mint";

/// The file name of the capabilities file. A file of this name is refused wherever it is, since
/// the broker's capabilities file may live where this server's environment does not point.
pub const CAPABILITIES_FILE: &str = "capabilities.yaml";

/// What the server needs to know about its surroundings, read once at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The directory of Mint's state: with the working directory, where the tools may read.
    pub home: PathBuf,
    /// The alias declarations file.
    pub aliases: PathBuf,
    /// The audit log.
    pub audit_log: PathBuf,
    /// The broker's policy file.
    pub policy: PathBuf,
    /// The capabilities file.
    pub capabilities: PathBuf,
    /// The proxy's listen address, as given (`mint_usage` falls back to the default for anything
    /// that is not a plain `host:port`).
    pub listen: String,
}

// === impl Config ===

impl Config {
    /// Resolves the configuration from the process environment.
    pub fn from_env() -> Config {
        Config::resolve(|name| std::env::var_os(name))
    }

    /// Resolves the configuration from `lookup`, which returns a variable's value.
    pub fn resolve(lookup: impl Fn(&str) -> Option<OsString>) -> Config {
        let var = |name: &str| lookup(name).filter(|value| !value.is_empty());
        let home = var(MINT_HOME).map_or_else(|| PathBuf::from(DEFAULT_HOME), PathBuf::from);
        let file =
            |name: &str, default: &str| var(name).map_or_else(|| home.join(default), PathBuf::from);
        Config {
            aliases: file(MINT_ALIASES_PATH, ALIASES_FILE),
            audit_log: file(MINT_AUDIT_LOG_PATH, AUDIT_LOG_FILE),
            policy: file(MINT_POLICY_PATH, POLICY_FILE),
            capabilities: file(MINT_CAPABILITIES_PATH, CAPABILITIES_FILE),
            listen: var(MINT_LISTEN)
                .and_then(|value| value.into_string().ok())
                .unwrap_or_else(|| mint_policy::usage::DEFAULT_LISTEN.to_owned()),
            home,
        }
    }
}

const ALIASES_FILE: &str = "aliases.yaml";
const AUDIT_LOG_FILE: &str = "audit.log";
const POLICY_FILE: &str = "policy.yaml";

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(vars: &[(&str, &str)]) -> Config {
        Config::resolve(|name| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| OsString::from(value))
        })
    }

    #[test]
    fn defaults_are_the_reference_paths() {
        let config = resolve(&[]);
        assert_eq!(config.aliases, PathBuf::from(".mint/aliases.yaml"));
        assert_eq!(config.audit_log, PathBuf::from(".mint/audit.log"));
        assert_eq!(config.policy, PathBuf::from(".mint/policy.yaml"));
        assert_eq!(config.home, PathBuf::from(".mint"));
        assert_eq!(
            config.capabilities,
            PathBuf::from(".mint/capabilities.yaml")
        );
        assert_eq!(config.listen, "127.0.0.1:8700");
    }

    #[test]
    fn home_moves_every_file() {
        let config = resolve(&[(MINT_HOME, "/srv/mint")]);
        assert_eq!(config.aliases, PathBuf::from("/srv/mint/aliases.yaml"));
        assert_eq!(config.audit_log, PathBuf::from("/srv/mint/audit.log"));
        assert_eq!(
            config.capabilities,
            PathBuf::from("/srv/mint/capabilities.yaml")
        );
    }

    #[test]
    fn file_variables_override_home() {
        let config = resolve(&[
            (MINT_HOME, "/srv/mint"),
            (MINT_ALIASES_PATH, "/etc/a.yaml"),
            (MINT_AUDIT_LOG_PATH, "/var/log/mint.log"),
            (MINT_CAPABILITIES_PATH, "/etc/c.yaml"),
            (MINT_LISTEN, "127.0.0.1:9000"),
        ]);
        assert_eq!(config.aliases, PathBuf::from("/etc/a.yaml"));
        assert_eq!(config.audit_log, PathBuf::from("/var/log/mint.log"));
        assert_eq!(config.capabilities, PathBuf::from("/etc/c.yaml"));
        assert_eq!(config.listen, "127.0.0.1:9000");
    }

    #[test]
    fn empty_variables_count_as_unset() {
        let config = resolve(&[
            (MINT_HOME, ""),
            (MINT_AUDIT_LOG_PATH, ""),
            (MINT_LISTEN, ""),
        ]);
        assert_eq!(config.audit_log, PathBuf::from(".mint/audit.log"));
        assert_eq!(config.listen, "127.0.0.1:8700");
    }
}
