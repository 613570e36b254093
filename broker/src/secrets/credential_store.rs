//! Where alias secrets live, and loading them for the broker: one [`CredentialStore`] trait with
//! an implementation per keyed source (keyring, environment, file) plus [`MemoryStore`] for
//! tests, and the refreshed sources (a command's output, [`CommandStore`]), whose values are
//! cached for a while and read again in the background (`config::refresh`).
//!
//! Sits between the alias declarations (`mint_policy::aliases`, which name a source but never
//! hold a value) and the proxy, which loads every alias's value at start and on reload through
//! [`CredentialSources::load_all`] and later injects it. Values exist only as [`CredentialValue`]
//! (a `secrecy::SecretString`): no `Debug`, `Display` or `Serialize` here shows one, and no error
//! carries one. A value with CR, LF, NUL or another control character is refused for aliases that
//! may sit in a header, with an error naming the alias, never the value.
//!
//! The trait is synchronous: the keyring answers over D-Bus or a system call and the other
//! sources read a file or the environment, all quick and all blocking. Async callers (the proxy)
//! call it from `tokio::task::spawn_blocking`, never on a runtime thread: the Secret Service
//! client drives its own Tokio runtime and panics inside another one.
//!
//! `expose_secret()` is called in exactly two places of this module tree, each commented:
//! [`CredentialValue::header_problem`] (to scan the bytes) and `KeyringStore::write` (to hand the
//! value to the keyring). Injecting the value into a request is `inject.rs`'s job.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mint_policy::aliases::{Alias, AliasFile, SecretSource};
use mint_policy::diagnostic::count_noun;
use mint_policy::site::Site;
use secrecy::{ExposeSecret, SecretString};
use zeroize::Zeroizing;

pub mod command_store;
pub mod env_store;
pub mod file_store;
pub mod keyring_store;
pub mod memory_store;
pub mod vault_store;

pub use command_store::{CommandProblem, CommandStore};
pub use env_store::EnvStore;
pub use file_store::FileStore;
pub use keyring_store::{KeyringBackend, KeyringConfig, KeyringConfigError, KeyringStore};
pub use memory_store::MemoryStore;
pub use vault_store::{VaultConfig, VaultConfigError, VaultStore};

/// The largest secret Mint accepts: 64 KiB. API tokens are far smaller; a larger value is almost
/// certainly the wrong file.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// One credential value. Never printed: `Debug` shows `CredentialValue(<redacted>)`, and there is
/// no `Display` or `Serialize`. Always valid UTF-8, non-empty and at most [`MAX_VALUE_BYTES`].
#[derive(Clone)]
pub struct CredentialValue(SecretString);

// === impl CredentialValue ===

impl CredentialValue {
    /// Copies `text` into a new value. The caller stays responsible for wiping its own copy.
    pub fn new(text: &str) -> Result<CredentialValue, ValueProblem> {
        check_shape(text.as_bytes())?;
        Ok(CredentialValue(SecretString::from(text)))
    }

    /// Takes the value from `bytes` (wiped when dropped), as read from a keyring, file or stream.
    pub fn from_bytes(bytes: Zeroizing<Vec<u8>>) -> Result<CredentialValue, ValueProblem> {
        check_shape(&bytes)?;
        let text = std::str::from_utf8(&bytes).map_err(|_| ValueProblem::NotUtf8)?;
        // `SecretString::from(&str)` copies into an exact-size box, so no spare capacity holds a
        // stray copy; `bytes` is zeroed on drop.
        Ok(CredentialValue(SecretString::from(text)))
    }

    /// The secret, for the one module that injects it (`inject.rs`) and the keyring store. Call
    /// `expose_secret()` on it only there.
    pub fn as_secret(&self) -> &SecretString {
        &self.0
    }

    /// Why this value cannot be sent in a header: `Some(ControlCharacter)` when it holds CR, LF,
    /// NUL or another control character other than tab (an HTTP header cannot carry them, and CR
    /// or LF would let the value start a header of its own).
    pub fn header_problem(&self) -> Option<ValueProblem> {
        // EXPOSE: the bytes must be scanned; only a yes/no leaves this function.
        let bytes = self.0.expose_secret().as_bytes();
        bytes
            .iter()
            .any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
            .then_some(ValueProblem::ControlCharacter)
    }
}

impl fmt::Debug for CredentialValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CredentialValue(<redacted>)")
    }
}

/// Why a value is not usable. Never holds the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueProblem {
    /// Nothing was stored.
    #[error("the secret is empty")]
    Empty,
    /// More than [`MAX_VALUE_BYTES`].
    #[error("the secret is larger than 64 KiB")]
    TooLarge,
    /// Not valid UTF-8.
    #[error("the secret is not valid UTF-8 text")]
    NotUtf8,
    /// A control character where the alias allows headers.
    #[error(
        "the secret holds CR, LF, NUL or another control character, which a header cannot carry; \
         store it again without them"
    )]
    ControlCharacter,
}

/// Why a store could not read, write or delete a secret. Never holds the value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Nothing is stored under the key.
    #[error("not found")]
    Missing,
    /// The store cannot be reached (no D-Bus session, a locked keyring, no kernel keyring).
    #[error("the store cannot be reached: {reason}")]
    Unavailable {
        /// What the platform said; never a value.
        reason: String,
    },
    /// The store answered with an error other than "not found".
    #[error("the store refused the operation: {reason}")]
    Refused {
        /// What the platform said; never a value.
        reason: String,
    },
    /// The operator fills this source (environment, file); Mint only reads it.
    #[error("Mint only reads this source; the operator provides the value")]
    ReadOnly,
    /// A value was found but is unusable.
    #[error(transparent)]
    Value(#[from] ValueProblem),
    /// A file source that Mint must not trust or cannot read.
    #[error(transparent)]
    File(#[from] file_store::FileProblem),
    /// A command source that gave no value.
    #[error(transparent)]
    Command(#[from] CommandProblem),
}

/// A place secrets are kept, addressed by a key whose meaning depends on the store: the account
/// (alias name) for the keyring, the variable name for the environment, the absolute path for a
/// file. [`CredentialSources`] maps an alias to its store and key.
///
/// Blocking and synchronous: see the module documentation for use from async code.
pub trait CredentialStore: Send + Sync + fmt::Debug {
    /// A short name for messages: `keyring (Secret Service)`, `environment`, `file`, `memory`.
    fn name(&self) -> &'static str;

    /// The value stored under `key`; [`StoreError::Missing`] when there is none.
    fn read(&self, key: &str) -> Result<CredentialValue, StoreError>;

    /// Stores `value` under `key`, replacing any previous value. Stores the operator fills
    /// themselves (environment, file) answer [`StoreError::ReadOnly`].
    fn write(&self, key: &str, value: &CredentialValue) -> Result<(), StoreError>;

    /// Removes the value under `key`; [`StoreError::Missing`] when there was none.
    fn delete(&self, key: &str) -> Result<(), StoreError>;

    /// Checks that the store can be reached and gives back what is written to it, without
    /// touching any alias's item. `mint alias add` runs it before asking for a secret.
    fn probe(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Checks, before anything is changed, that [`CredentialStore::delete`] of `key` can work:
    /// the store answers for it, whether it holds a value or not (`mint alias rm` and `edit`
    /// run it before they change the alias file, so a failure changes nothing).
    fn check_delete(&self, key: &str) -> Result<(), StoreError> {
        match self.read(key) {
            Ok(_) | Err(StoreError::Missing | StoreError::Value(_)) => Ok(()),
            Err(problem) => Err(problem),
        }
    }
}

/// The stores an alias can name, and the mapping from an alias to its store and key.
#[derive(Clone, Debug)]
pub struct CredentialSources {
    keyring: Arc<dyn CredentialStore>,
    env: Arc<dyn CredentialStore>,
    file: Arc<dyn CredentialStore>,
    command: CommandStore,
    vault: Option<Arc<VaultStore>>,
}

/// How long a refreshed source's value is used: read again after `cache`; past `cache` plus
/// `max_stale` without a successful read, the alias is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetime {
    /// How long a value is used before it is read again.
    pub cache: Duration,
    /// How long past `cache` the last value still serves while reads fail.
    pub max_stale: Duration,
}

/// When a refreshed value is due to be read again, and until when it may be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Freshness {
    /// When it was read.
    pub read_at: Instant,
    /// When it is read again.
    pub refresh_at: Instant,
    /// The staleness bound: after this, requests that use the alias are refused.
    pub usable_until: Instant,
}

// === impl Lifetime ===

impl Lifetime {
    /// The freshness of a value read at `now`.
    pub fn starting(self, now: Instant) -> Freshness {
        let refresh_at = now + self.cache;
        Freshness {
            read_at: now,
            refresh_at,
            usable_until: refresh_at + self.max_stale,
        }
    }
}

// === impl CredentialSources ===

impl CredentialSources {
    /// Sources backed by the given stores (tests pass [`MemoryStore`]s or an [`EnvStore`] built
    /// from a map).
    pub fn new(
        keyring: Arc<dyn CredentialStore>,
        env: Arc<dyn CredentialStore>,
        file: Arc<dyn CredentialStore>,
    ) -> CredentialSources {
        CredentialSources {
            keyring,
            env,
            file,
            command: CommandStore::process(),
            vault: None,
        }
    }

    /// These sources, reading `vault:` sources from `vault` (`None`: Vault is not configured,
    /// and such an alias fails to load with a message naming `MINT_VAULT_ADDR`).
    pub fn with_vault(mut self, vault: Option<VaultStore>) -> CredentialSources {
        self.vault = vault.map(Arc::new);
        self
    }

    /// The Vault store, when configured.
    pub fn vault(&self) -> Option<&VaultStore> {
        self.vault.as_deref()
    }

    /// These sources, running command sources with `command` (tests pass a fixed environment).
    pub fn with_command(mut self, command: CommandStore) -> CredentialSources {
        self.command = command;
        self
    }

    /// The real stores: the keyring chosen by `keyring`, this process's environment, and files.
    pub fn system(keyring: &KeyringConfig) -> CredentialSources {
        CredentialSources::new(
            Arc::new(KeyringStore::new(keyring)),
            Arc::new(EnvStore::process()),
            Arc::new(FileStore::new()),
        )
    }

    /// The store that holds `alias`'s value, and its key there; `None` for a refreshed source
    /// (a command), which is no keyed store.
    pub fn locate<'a>(&self, alias: &'a Alias) -> Option<(&dyn CredentialStore, &'a str)> {
        match &alias.source {
            SecretSource::Keyring => Some((self.keyring.as_ref(), alias.name.as_str())),
            SecretSource::Env(var) => Some((self.env.as_ref(), var.as_str())),
            SecretSource::File(path) => Some((self.file.as_ref(), path.as_str())),
            SecretSource::Command(_) | SecretSource::Vault(_) => None,
        }
    }

    /// How long `alias`'s value is used before it is read again; `None` for a source read only
    /// at start and on reload.
    pub fn lifetime(&self, alias: &Alias) -> Option<Lifetime> {
        match &alias.source {
            SecretSource::Command(command) => Some(Lifetime {
                cache: command.cache,
                max_stale: command.max_stale,
            }),
            SecretSource::Vault(_) => self.vault.as_ref().map(|v| v.config().lifetime()),
            SecretSource::Keyring | SecretSource::Env(_) | SecretSource::File(_) => None,
        }
    }

    /// The keyring store (for `mint alias add` and `mint alias rm`).
    pub fn keyring(&self) -> &dyn CredentialStore {
        self.keyring.as_ref()
    }

    /// Reads `alias`'s value and checks that it may go everywhere the alias allows: a value for
    /// an alias with the header site must hold no control character.
    pub fn read(&self, alias: &Alias) -> Result<CredentialValue, CredentialError> {
        let read = match (&alias.source, self.locate(alias)) {
            (_, Some((store, key))) => store.read(key),
            (SecretSource::Command(command), None) => self.command.run(command),
            (SecretSource::Vault(reference), None) => match &self.vault {
                Some(vault) => vault.read(reference),
                None => Err(StoreError::Unavailable {
                    reason: "no Vault server is configured: set MINT_VAULT_ADDR and \
                             MINT_VAULT_TOKEN_FILE (or the AppRole files) where Mint runs"
                        .to_owned(),
                }),
            },
            (_, None) => Err(StoreError::Unavailable {
                reason: "Mint has no settings for this source".to_owned(),
            }),
        };
        let value = read.map_err(|problem| CredentialError::new(alias, problem))?;
        check_value_for(alias, &value)?;
        Ok(value)
    }

    /// Loads the value of every declared alias: what the broker does at start and on reload.
    /// Fails closed: one unusable alias fails the whole load, and the error lists every failure.
    pub fn load_all(&self, aliases: &AliasFile) -> Result<CredentialSet, CredentialSetError> {
        let mut values = HashMap::with_capacity(aliases.aliases.len());
        let mut freshness = HashMap::new();
        let mut failures = Vec::new();
        for alias in &aliases.aliases {
            match self.read(alias) {
                Ok(value) => {
                    if let Some(lifetime) = self.lifetime(alias) {
                        freshness.insert(alias.name.clone(), lifetime.starting(Instant::now()));
                    }
                    values.insert(alias.name.clone(), value);
                }
                Err(error) => failures.push(error),
            }
        }
        if failures.is_empty() {
            tracing::debug!(aliases = values.len(), "Credentials loaded");
            Ok(CredentialSet { values, freshness })
        } else {
            Err(CredentialSetError { failures })
        }
    }
}

/// Refuses `value` for `alias` when the alias allows the header site and the value holds a
/// control character.
pub fn check_value_for(alias: &Alias, value: &CredentialValue) -> Result<(), CredentialError> {
    if alias.sites.contains(Site::Header)
        && let Some(problem) = value.header_problem()
    {
        return Err(CredentialError::new(alias, StoreError::Value(problem)));
    }
    Ok(())
}

/// The loaded values of every alias, by alias name, with the freshness of those from refreshed
/// sources. `Debug` lists the names only.
#[derive(Clone, Default)]
pub struct CredentialSet {
    values: HashMap<String, CredentialValue>,
    freshness: HashMap<String, Freshness>,
}

/// Why a loaded alias's value may not be used now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unusable {
    /// The alias has no value (cannot happen after a successful load).
    Missing,
    /// Its source could not be read again before its staleness bound.
    Stale,
}

// === impl CredentialSet ===

impl CredentialSet {
    /// The value of the alias called `name`, whatever its freshness.
    pub fn get(&self, name: &str) -> Option<&CredentialValue> {
        self.values.get(name)
    }

    /// The value of the alias called `name` if it may be used at `now`: a refreshed value only
    /// until its staleness bound.
    pub fn usable(&self, name: &str, now: Instant) -> Result<&CredentialValue, Unusable> {
        let value = self.values.get(name).ok_or(Unusable::Missing)?;
        match self.freshness.get(name) {
            Some(fresh) if now > fresh.usable_until => Err(Unusable::Stale),
            _ => Ok(value),
        }
    }

    /// The freshness of a refreshed alias's value.
    pub fn freshness(&self, name: &str) -> Option<Freshness> {
        self.freshness.get(name).copied()
    }

    /// The refreshed aliases, with their freshness.
    pub fn refreshed(&self) -> impl Iterator<Item = (&str, Freshness)> {
        self.freshness.iter().map(|(name, f)| (name.as_str(), *f))
    }

    /// Replaces the value of `name` (read again) and its freshness.
    pub fn replace(&mut self, name: &str, value: CredentialValue, freshness: Freshness) {
        self.values.insert(name.to_owned(), value);
        self.freshness.insert(name.to_owned(), freshness);
    }

    /// How many aliases have a value.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether no alias has a value.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The alias names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.values.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

impl fmt::Debug for CredentialSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CredentialSet")
            .field("aliases", &self.names())
            .finish_non_exhaustive()
    }
}

/// One alias whose value could not be used: names the alias, its source and the problem, and
/// says how to fix it. Never holds the value.
#[derive(Debug)]
pub struct CredentialError {
    /// The alias.
    pub alias: String,
    /// Where its value was looked for.
    pub source: SecretSource,
    /// What went wrong.
    pub problem: StoreError,
}

// === impl CredentialError ===

impl CredentialError {
    /// The error for `alias`.
    pub fn new(alias: &Alias, problem: StoreError) -> CredentialError {
        CredentialError {
            alias: alias.name.clone(),
            source: alias.source.clone(),
            problem,
        }
    }

    /// Whether the value is simply not there (as opposed to unreachable or unusable).
    pub fn is_missing(&self) -> bool {
        matches!(self.problem, StoreError::Missing)
    }
}

impl fmt::Display for CredentialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let alias = &self.alias;
        write!(f, "secret of alias `{alias}` (source `{}`): ", self.source)?;
        match (&self.source, &self.problem) {
            (SecretSource::Keyring, StoreError::Missing) => write!(
                f,
                "the keyring has no item for it (account `{alias}`); run `mint alias rm {alias}` \
                 and add it again with `mint alias add`"
            ),
            (SecretSource::Env(var), StoreError::Missing) => {
                write!(f, "the environment variable `{var}` is not set")
            }
            (SecretSource::File(_), StoreError::Missing) => f.write_str("no such file"),
            (SecretSource::Command(_), StoreError::Value(ValueProblem::Empty)) => {
                f.write_str("the command printed nothing")
            }
            (SecretSource::Vault(reference), StoreError::Missing) => write!(
                f,
                "Vault has no secret `{}/{}`{}, or no field `{}` in it",
                reference.mount,
                reference.path,
                reference
                    .version
                    .map(|v| format!(" at version {v}"))
                    .unwrap_or_default(),
                reference.key
            ),
            (_, problem) => write!(f, "{problem}"),
        }
    }
}

impl std::error::Error for CredentialError {}

/// Every alias whose value could not be loaded.
#[derive(Debug)]
pub struct CredentialSetError {
    /// One entry per alias, in file order.
    pub failures: Vec<CredentialError>,
}

impl fmt::Display for CredentialSetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.failures.len();
        write!(f, "{} cannot be loaded: ", count_noun(n, "alias secret"))?;
        for (i, failure) in self.failures.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{failure}")?;
        }
        Ok(())
    }
}

impl std::error::Error for CredentialSetError {}

fn check_shape(bytes: &[u8]) -> Result<(), ValueProblem> {
    if bytes.is_empty() {
        return Err(ValueProblem::Empty);
    }
    if bytes.len() > MAX_VALUE_BYTES {
        return Err(ValueProblem::TooLarge);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use mint_policy::aliases::load_aliases;

    use super::*;

    const CANARY: &str = "canary-5e1f0c2d";

    fn aliases(text: &str) -> AliasFile {
        load_aliases(text.as_bytes(), "aliases.yaml")
            .aliases
            .unwrap()
    }

    fn memory_sources() -> (Arc<MemoryStore>, CredentialSources) {
        let keyring = Arc::new(MemoryStore::new());
        let env = Arc::new(EnvStore::from_vars([("GH_TOKEN", "from-env")]));
        let sources = CredentialSources::new(keyring.clone(), env, Arc::new(FileStore::new()));
        (keyring, sources)
    }

    #[test]
    fn refreshed_values_serve_until_their_staleness_bound() {
        let lifetime = Lifetime {
            cache: Duration::from_secs(10),
            max_stale: Duration::from_secs(20),
        };
        let t0 = Instant::now();
        let fresh = lifetime.starting(t0);
        assert_eq!(fresh.refresh_at, t0 + Duration::from_secs(10));
        assert_eq!(fresh.usable_until, t0 + Duration::from_secs(30));
        let mut set = CredentialSet::default();
        set.replace("cmd", CredentialValue::new(CANARY).unwrap(), fresh);
        assert!(set.usable("cmd", t0 + Duration::from_secs(30)).is_ok());
        assert_eq!(
            set.usable("cmd", t0 + Duration::from_millis(30_001))
                .unwrap_err(),
            Unusable::Stale
        );
        assert_eq!(set.usable("other", t0).unwrap_err(), Unusable::Missing);
        // A value read again moves the bound.
        let later = t0 + Duration::from_secs(40);
        set.replace(
            "cmd",
            CredentialValue::new("v2").unwrap(),
            lifetime.starting(later),
        );
        assert!(set.usable("cmd", later + Duration::from_secs(5)).is_ok());
        assert!(!format!("{set:?}").contains(CANARY));
    }

    #[test]
    fn values_never_print() {
        let value = CredentialValue::new(CANARY).unwrap();
        assert_eq!(format!("{value:?}"), "CredentialValue(<redacted>)");
        assert_eq!(format!("{value:#?}"), "CredentialValue(<redacted>)");
    }

    #[test]
    fn shape_is_checked() {
        assert_eq!(CredentialValue::new("").unwrap_err(), ValueProblem::Empty);
        let big = "x".repeat(MAX_VALUE_BYTES + 1);
        assert_eq!(
            CredentialValue::new(&big).unwrap_err(),
            ValueProblem::TooLarge
        );
        assert_eq!(
            CredentialValue::from_bytes(Zeroizing::new(vec![0xff, 0xfe])).unwrap_err(),
            ValueProblem::NotUtf8
        );
        assert!(
            CredentialValue::new("tab\tis fine")
                .unwrap()
                .header_problem()
                .is_none()
        );
        for bad in ["a\rb", "a\nb", "a\0b", "a\x1bb", "a\x7fb", "trailing\n"] {
            assert_eq!(
                CredentialValue::new(bad).unwrap().header_problem(),
                Some(ValueProblem::ControlCharacter),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn header_aliases_refuse_control_characters() {
        let (keyring, sources) = memory_sources();
        let file = aliases(
            "aliases:\n  - name: gh\n    hosts: [api.github.com]\n  - name: body\n    \
             hosts: [api.github.com]\n    sites: [{body: [/token]}]\n",
        );
        let value = CredentialValue::new(&format!("{CANARY}\r\nX-Evil: 1")).unwrap();
        keyring.write("gh", &value).unwrap();
        keyring.write("body", &value).unwrap();
        let err = sources.read(&file.aliases[0]).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("alias `gh`"), "{message}");
        assert!(message.contains("control character"), "{message}");
        assert!(!message.contains(CANARY));
        assert!(!format!("{err:?}").contains(CANARY));
        // An alias that never goes in a header may hold a newline (a PEM key in a JSON body).
        sources.read(&file.aliases[1]).unwrap();
    }

    #[test]
    fn load_all_lists_every_failure() {
        let (keyring, sources) = memory_sources();
        let file = aliases(
            "aliases:\n  - name: gh\n    hosts: [api.github.com]\n  - name: envy\n    \
             hosts: [api.github.com]\n    source: env:GH_TOKEN\n  - name: gone\n    \
             hosts: [x.example.com]\n  - name: unset\n    hosts: [x.example.com]\n    \
             source: env:NOT_SET\n",
        );
        keyring
            .write("gh", &CredentialValue::new("from-keyring").unwrap())
            .unwrap();
        let err = sources.load_all(&file).unwrap_err();
        assert_eq!(err.failures.len(), 2);
        assert!(err.failures.iter().all(CredentialError::is_missing));
        let message = err.to_string();
        assert!(
            message.starts_with("2 alias secrets cannot be loaded: "),
            "{message}"
        );
        assert!(message.contains("alias `gone` (source `keyring`): the keyring has no item"));
        assert!(message.contains("the environment variable `NOT_SET` is not set"));

        keyring
            .write("gone", &CredentialValue::new("v").unwrap())
            .unwrap();
        let file = aliases(
            "aliases:\n  - name: gh\n    hosts: [api.github.com]\n  - name: envy\n    \
             hosts: [api.github.com]\n    source: env:GH_TOKEN\n  - name: gone\n    \
             hosts: [x.example.com]\n",
        );
        let set = sources.load_all(&file).unwrap();
        assert_eq!(set.names(), ["envy", "gh", "gone"]);
        assert!(set.get("gh").is_some());
        assert!(set.get("nope").is_none());
        assert_eq!(
            format!("{set:?}"),
            r#"CredentialSet { aliases: ["envy", "gh", "gone"], .. }"#
        );
    }
}
