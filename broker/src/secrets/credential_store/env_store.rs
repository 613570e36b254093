//! The `env:VAR` source: a secret in the broker's own environment (a container's or a systemd
//! unit's `Environment=`). Read-only: Mint never sets a variable.
//!
//! The broker reads the variable when it loads credentials (at start and on reload); the CLI's
//! environment matters only to `mint alias list`, which says so.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::os::unix::ffi::OsStringExt;

use zeroize::Zeroizing;

use super::{CredentialStore, CredentialValue, StoreError};

/// Reads secrets from environment variables: the process's own, or a fixed set (for tests, since
/// `std::env::set_var` is banned).
pub struct EnvStore {
    vars: Option<HashMap<String, Zeroizing<Vec<u8>>>>,
}

// === impl EnvStore ===

impl EnvStore {
    /// Reads this process's environment at each `read`.
    pub fn process() -> EnvStore {
        EnvStore { vars: None }
    }

    /// Reads only the given variables.
    pub fn from_vars<K: Into<String>, V: AsRef<[u8]>>(
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> EnvStore {
        EnvStore {
            vars: Some(
                vars.into_iter()
                    .map(|(k, v)| (k.into(), Zeroizing::new(v.as_ref().to_vec())))
                    .collect(),
            ),
        }
    }

    fn lookup(&self, key: &str) -> Option<Zeroizing<Vec<u8>>> {
        match &self.vars {
            None => std::env::var_os(key).map(|v: OsString| Zeroizing::new(v.into_vec())),
            Some(vars) => vars.get(key).cloned(),
        }
    }
}

impl fmt::Debug for EnvStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("EnvStore");
        match &self.vars {
            None => debug.field("vars", &"process environment"),
            Some(vars) => {
                let mut names: Vec<&String> = vars.keys().collect();
                names.sort_unstable();
                debug.field("vars", &names)
            }
        };
        debug.finish_non_exhaustive()
    }
}

impl CredentialStore for EnvStore {
    fn name(&self) -> &'static str {
        "environment"
    }

    fn read(&self, key: &str) -> Result<CredentialValue, StoreError> {
        let bytes = self.lookup(key).ok_or(StoreError::Missing)?;
        Ok(CredentialValue::from_bytes(bytes)?)
    }

    fn write(&self, _key: &str, _value: &CredentialValue) -> Result<(), StoreError> {
        Err(StoreError::ReadOnly)
    }

    fn delete(&self, _key: &str) -> Result<(), StoreError> {
        Err(StoreError::ReadOnly)
    }
}
