//! An in-memory [`CredentialStore`] for tests and for wiring checks: fast, private to the process,
//! gone on exit. Never used for a real broker's secrets.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};

use super::{CredentialStore, CredentialValue, StoreError};

/// Secrets held in a map. `Debug` shows the keys only.
#[derive(Default)]
pub struct MemoryStore {
    values: Mutex<HashMap<String, CredentialValue>>,
}

// === impl MemoryStore ===

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn values(&self) -> std::sync::MutexGuard<'_, HashMap<String, CredentialValue>> {
        // A panic while holding the lock cannot leave the map half-updated: every operation is
        // one insert or remove.
        self.values.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut keys: Vec<String> = self.values().keys().cloned().collect();
        keys.sort_unstable();
        f.debug_struct("MemoryStore")
            .field("keys", &keys)
            .finish_non_exhaustive()
    }
}

impl CredentialStore for MemoryStore {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn read(&self, key: &str) -> Result<CredentialValue, StoreError> {
        self.values().get(key).cloned().ok_or(StoreError::Missing)
    }

    fn write(&self, key: &str, value: &CredentialValue) -> Result<(), StoreError> {
        self.values().insert(key.to_owned(), value.clone());
        Ok(())
    }

    fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.values()
            .remove(key)
            .map(drop)
            .ok_or(StoreError::Missing)
    }
}
