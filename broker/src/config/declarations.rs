//! What a running broker holds from its files: the compiled policy, the alias declarations, the
//! alias secrets and the scrubber built from them.
//!
//! Loaded whole at start, and (hot reload) into a new value that replaces the old one only when
//! everything loaded: a request is decided and its secrets substituted with one consistent
//! [`Declarations`], whatever happens to the files meanwhile; its answer is scrubbed with the
//! newest ones, which keep every earlier secret ([`Declarations::retaining`]). Loading opens each
//! file once through `secure_file::open_trusted` and refuses policy and alias files that another
//! user could change, by their own mode or owner or through a directory or link on their way
//! (invariant 7), a file caught changing while it was read, and any file with an error; the
//! messages cite `path:line:col` and a code, never a value.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use mint_policy::aliases::{Alias, AliasFile, SecretSource, load_aliases};
use mint_policy::body::BodyPlaces;
use mint_policy::diagnostic::count_noun;
use mint_policy::evaluate::{AliasUse, CompiledPolicy};
use mint_policy::policy::load_policy;
use mint_policy::{Diagnostic, MAX_FILE_BYTES, Severity};

use crate::config::declaration_file::{ConfigFileError, ReadError, read_config_file};
use crate::config::placeholder_key::{PlaceholderKeyError, shaped_placeholders};
use crate::config::secure_file::{FileStamp, SecureFileError};
use crate::secrets::credential_store::{
    CredentialSet, CredentialSetError, CredentialSources, Unusable,
};
use crate::secrets::inject::Secrets;
use crate::secrets::placeholder::shaped::{PlaceholderKey, ShapedPlaceholders};
use crate::secrets::scrub::Scrubber;

/// The loaded declarations. Never changes once built; a reload builds a new one.
pub struct Declarations {
    policy: Arc<CompiledPolicy>,
    aliases: AliasFile,
    /// Where in a body each alias's secret may be substituted, compiled from `aliases`.
    body_places: BodyPlaces,
    /// The aliases' value-shaped placeholders, derived from the home's placeholder key.
    shaped: Arc<ShapedPlaceholders>,
    credentials: CredentialSet,
    /// Every secret answers are scrubbed of: the current ones and those earlier reloads replaced.
    scrubbed: Secrets,
    scrubber: Scrubber,
    /// The versions of the policy and alias files these came from (none when built from values).
    stamps: Option<(FileStamp, FileStamp)>,
    /// When the files were loaded (a refresh of one secret keeps it): tells a reload from a
    /// refresh.
    loaded_at: Instant,
}

/// Why a request may not use an alias's secret now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretsError {
    /// The alias has no loaded value (cannot happen after a successful load).
    Missing(String),
    /// The alias's source (a command, Vault) could not be read again before its staleness
    /// bound: its requests are refused until it can.
    Stale(String),
}

/// Why the declarations could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeclarationsError {
    /// A file group or others may write, or owned by another user.
    #[error(transparent)]
    Insecure(#[from] SecureFileError),
    /// A file that cannot be read.
    #[error("cannot read {what} `{}`: {problem}", path.display())]
    Unreadable {
        /// `policy file` or `alias file`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What went wrong.
        problem: ReadError,
    },
    /// A file with errors.
    #[error("{what} `{}` has {}; the first: {first}; run `mint policy check` for the policy", path.display(), count_noun(*count, "error"))]
    Invalid {
        /// `policy file` or `alias file`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// How many errors.
        count: usize,
        /// The first, rendered `path:line:col: error[CODE]: ...`.
        first: String,
    },
    /// Alias secrets that cannot be loaded.
    #[error(transparent)]
    Credentials(#[from] CredentialSetError),
    /// The scrubber could not be built from the secrets.
    #[error("cannot build the response scrubber from the alias secrets")]
    Scrubber,
    /// The value-shaped placeholders could not be derived (the placeholder key).
    #[error(transparent)]
    Placeholders(#[from] PlaceholderKeyError),
}

// === impl DeclarationsError ===

impl DeclarationsError {
    /// Whether loading failed only on alias secrets kept in the keyring, which may be readable
    /// a moment later (a keyring daemon catching up with a change made elsewhere).
    pub fn is_keyring(&self) -> bool {
        matches!(self, DeclarationsError::Credentials(set)
            if set.failures.iter().all(|f| f.source == SecretSource::Keyring))
    }

    /// Whether the error means a file was caught changing (being written, or replaced) while it
    /// was read: trying again once it is still is the answer, not a reload failure.
    pub fn is_changing(&self) -> bool {
        matches!(
            self,
            DeclarationsError::Unreadable {
                problem: ReadError::Changing,
                ..
            } | DeclarationsError::Insecure(SecureFileError::Changed { .. })
        )
    }
}

// === impl Declarations ===

impl Declarations {
    /// Loads the policy and alias files and every alias secret, and derives the aliases'
    /// value-shaped placeholders from the key at `placeholder_key` (created when an alias
    /// declares a shape and there is none).
    pub fn load(
        policy_path: &Path,
        aliases_path: &Path,
        sources: &CredentialSources,
        placeholder_key: &Path,
    ) -> Result<Declarations, DeclarationsError> {
        let (policy, policy_stamp) = load_policy_file(policy_path)?;
        let (aliases, aliases_stamp) = load_alias_file(aliases_path)?;
        let shaped = shaped_placeholders(placeholder_key, &aliases)?;
        let credentials = sources.load_all(&aliases)?;
        let mut loaded = Declarations::with_shaped(policy, aliases, credentials, shaped)?;
        loaded.stamps = Some((policy_stamp, aliases_stamp));
        Ok(loaded)
    }

    /// The versions of the policy and alias files that were read, as their descriptors showed
    /// them; `None` for declarations built from values.
    pub fn stamps(&self) -> Option<(FileStamp, FileStamp)> {
        self.stamps
    }

    /// Declarations from values already loaded (tests, `mint demo`); value-shaped placeholders
    /// are derived from a key of this process alone ([`Self::shaped`] tells them).
    pub fn new(
        policy: CompiledPolicy,
        aliases: AliasFile,
        credentials: CredentialSet,
    ) -> Result<Declarations, DeclarationsError> {
        let shaped = match PlaceholderKey::random() {
            Some(key) => {
                ShapedPlaceholders::derive(&key, &aliases).map_err(PlaceholderKeyError::from)?
            }
            None if aliases.aliases.iter().all(|a| a.placeholder.is_none()) => {
                ShapedPlaceholders::default()
            }
            None => return Err(PlaceholderKeyError::Random.into()),
        };
        Declarations::with_shaped(policy, aliases, credentials, shaped)
    }

    /// Declarations from values already loaded, with these shaped placeholders.
    pub fn with_shaped(
        policy: CompiledPolicy,
        aliases: AliasFile,
        credentials: CredentialSet,
        shaped: ShapedPlaceholders,
    ) -> Result<Declarations, DeclarationsError> {
        // Every answer is scrubbed of every loaded secret, not only of those its request used:
        // an upstream that saw one alias's secret earlier must not be able to hand it back to a
        // request that carried none.
        let mut all = Secrets::new();
        for alias in &aliases.aliases {
            if let Some(value) = credentials.get(&alias.name) {
                all.insert(alias.name.clone(), value.as_secret().clone(), alias.sites);
            }
        }
        let scrubber = all.scrubber().map_err(|_| DeclarationsError::Scrubber)?;
        Ok(Declarations {
            policy: Arc::new(policy),
            body_places: BodyPlaces::new(&aliases),
            shaped: Arc::new(shaped),
            aliases,
            credentials,
            scrubbed: all,
            scrubber,
            stamps: None,
            loaded_at: Instant::now(),
        })
    }

    /// These declarations with `credentials` in place of their secrets (a refreshed source read
    /// again), still scrubbing every secret these scrub. Same policy, aliases, file versions and
    /// load time.
    pub fn with_credentials(
        &self,
        credentials: CredentialSet,
    ) -> Result<Declarations, DeclarationsError> {
        let mut all = Secrets::new();
        for alias in &self.aliases.aliases {
            if let Some(value) = credentials.get(&alias.name) {
                all.insert(alias.name.clone(), value.as_secret().clone(), alias.sites);
            }
        }
        all.absorb(&self.scrubbed);
        let scrubber = all.scrubber().map_err(|_| DeclarationsError::Scrubber)?;
        Ok(Declarations {
            policy: Arc::clone(&self.policy),
            body_places: self.body_places.clone(),
            shaped: Arc::clone(&self.shaped),
            aliases: self.aliases.clone(),
            credentials,
            scrubbed: all,
            scrubber,
            stamps: self.stamps,
            loaded_at: self.loaded_at,
        })
    }

    /// The loaded secrets, with the freshness of refreshed ones.
    pub fn credentials(&self) -> &CredentialSet {
        &self.credentials
    }

    /// When the policy and alias files were loaded (kept by [`Declarations::with_credentials`]).
    pub fn loaded_at(&self) -> Instant {
        self.loaded_at
    }

    /// These declarations, still scrubbing every secret `previous` scrubbed (a reload that
    /// rotates or removes a secret must not let an upstream hand the old value back).
    pub fn retaining(mut self, previous: &Declarations) -> Result<Declarations, DeclarationsError> {
        self.scrubbed.absorb(&previous.scrubbed);
        self.scrubber = self
            .scrubbed
            .scrubber()
            .map_err(|_| DeclarationsError::Scrubber)?;
        Ok(self)
    }

    /// The compiled policy.
    pub fn policy(&self) -> &CompiledPolicy {
        &self.policy
    }

    /// The alias declarations.
    pub fn aliases(&self) -> &AliasFile {
        &self.aliases
    }

    /// Where in a body each alias's secret may be substituted.
    pub fn body_places(&self) -> &BodyPlaces {
        &self.body_places
    }

    /// The aliases' value-shaped placeholders: read wherever `{{mint:NAME}}` is.
    pub fn shaped(&self) -> &Arc<ShapedPlaceholders> {
        &self.shaped
    }

    /// The declaration of the alias `name`.
    pub fn alias(&self, name: &str) -> Option<&Alias> {
        self.aliases.find(name)
    }

    /// The secrets of `uses`, each released for the sites its alias allows. An error when one
    /// has no loaded value (cannot happen after a successful load; refused all the same) or a
    /// refreshed one is past its staleness bound.
    pub fn secrets_for(&self, uses: &[AliasUse]) -> Result<Secrets, SecretsError> {
        let now = Instant::now();
        let mut secrets = Secrets::new().with_shaped(Arc::clone(&self.shaped));
        for alias_use in uses {
            let name = &alias_use.alias;
            let alias = self
                .alias(name)
                .ok_or_else(|| SecretsError::Missing(name.clone()))?;
            let value = match self.credentials.usable(&alias.name, now) {
                Ok(value) => value,
                Err(Unusable::Missing) => return Err(SecretsError::Missing(name.clone())),
                Err(Unusable::Stale) => return Err(SecretsError::Stale(name.clone())),
            };
            secrets.insert(alias.name.clone(), value.as_secret().clone(), alias.sites);
        }
        Ok(secrets)
    }

    /// A scrubber for one answer: redacts every loaded secret.
    pub fn scrubber(&self) -> Scrubber {
        self.scrubber.fresh()
    }
}

impl fmt::Debug for Declarations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Declarations")
            .field("rules", &self.policy.policy().rules.len())
            .field("aliases", &self.aliases.aliases.len())
            .finish_non_exhaustive()
    }
}

/// Reads (through its permission checks) and compiles the policy file; returns it with the
/// version read.
pub fn load_policy_file(path: &Path) -> Result<(CompiledPolicy, FileStamp), DeclarationsError> {
    load_policy_file_with_warnings(path).map(|(policy, stamp, _)| (policy, stamp))
}

/// [`load_policy_file`], also returning the file's warnings (for `mint doctor`).
pub fn load_policy_file_with_warnings(
    path: &Path,
) -> Result<(CompiledPolicy, FileStamp, Vec<Diagnostic>), DeclarationsError> {
    let (bytes, stamp) = read_checked(path, "policy file")?;
    let origin = path.display().to_string();
    let load = load_policy(&bytes, &origin);
    let (errors, warnings): (Vec<Diagnostic>, Vec<Diagnostic>) = load
        .diagnostics
        .into_iter()
        .partition(|d| d.severity() == Severity::Error);
    match (load.policy, errors.first()) {
        (Some(policy), None) => Ok((CompiledPolicy::new(policy), stamp, warnings)),
        (_, first) => Err(invalid("policy file", path, &origin, errors.len(), first)),
    }
}

/// Reads (through its permission checks) and validates the alias file; returns it with the
/// version read.
pub fn load_alias_file(path: &Path) -> Result<(AliasFile, FileStamp), DeclarationsError> {
    let (bytes, stamp) = read_checked(path, "alias file")?;
    let origin = path.display().to_string();
    let load = load_aliases(&bytes, &origin);
    let errors: Vec<&Diagnostic> = load.errors().collect();
    match (&load.aliases, errors.first()) {
        (Some(file), None) => Ok((file.clone(), stamp)),
        (_, first) => Err(invalid(
            "alias file",
            path,
            &origin,
            errors.len(),
            first.copied(),
        )),
    }
}

fn read_checked(
    path: &Path,
    what: &'static str,
) -> Result<(Vec<u8>, FileStamp), DeclarationsError> {
    match read_config_file(path, MAX_FILE_BYTES) {
        Ok(file) => Ok((file.bytes, file.stamp)),
        Err(ConfigFileError::Insecure(error)) => Err(DeclarationsError::Insecure(error)),
        Err(ConfigFileError::Unreadable(problem)) => Err(DeclarationsError::Unreadable {
            what,
            path: path.to_path_buf(),
            problem,
        }),
    }
}

fn invalid(
    what: &'static str,
    path: &Path,
    origin: &str,
    count: usize,
    first: Option<&Diagnostic>,
) -> DeclarationsError {
    DeclarationsError::Invalid {
        what,
        path: path.to_path_buf(),
        count: count.max(1),
        first: first.map_or_else(|| "the file does not load".to_owned(), |d| d.render(origin)),
    }
}
