//! `mint doctor`: checks a Mint home as `mint serve` would load it, and says what to fix.
//!
//! Each [`Check`] is named (`home`, `secret`, `policy`...), may be about one subject (an alias, a
//! rule), and has a [`Status`] (`ok`, `info`, `warn`, `fail`), a message and, unless all is well,
//! a fix. The checks call the loaders `mint serve` uses (`declarations`, `ca_files`,
//! `CapabilityFile`, `AuditLog::check_writable`, `audit::verify`), so the doctor and the broker
//! cannot disagree about a file. Secrets are read only to learn whether they are usable, as
//! `mint alias list` reads them, and dropped at once: no value and no capability token reaches
//! the output. Nothing is written, except the keyring probe's item (written, read back and
//! deleted under an account no alias can have, as `mint alias add` probes). Exit 1 when a check
//! fails, 0 otherwise (warnings included).

use std::fmt;
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use clap::Args;
use mint_policy::aliases::{AliasFile, SecretSource};
use mint_policy::policy::Policy;
use serde::Serialize;

use crate::audit::AuditLog;
use crate::audit::rotation::log_set;
use crate::audit::verify::{VerifyOptions, verify_files};
use crate::capability::{CapabilityFile, CapabilityFileError, CapabilityStatus};
use crate::cli::ExitStatus;
use crate::cli::terminal::{json_for_terminal, printable};
use crate::config::ca_files::{self, CaFileError};
use crate::config::declarations::{
    DeclarationsError, load_alias_file, load_policy_file_with_warnings,
};
use crate::config::env::Paths;
use crate::config::listen;
use crate::config::placeholder_key::{self, PlaceholderKeyError};
use crate::config::secure_file::{SecureFileError, check_private_dir};
use crate::net::ca::CA_EXPIRY_WARNING;
use crate::secrets::credential_store::file_store::FileProblem;
use crate::secrets::credential_store::vault_store::VaultAuth;
use crate::secrets::credential_store::{
    CredentialSources, KeyringBackend, KeyringConfig, KeyringConfigError, StoreError, VaultStore,
};

/// Arguments of `mint doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// The address `mint serve` would listen on, judged for loopback.
    #[arg(long, env = "MINT_LISTEN", default_value = crate::config::env::DEFAULT_LISTEN)]
    pub listen: String,

    /// The interception CA's certificate, as for `mint serve --ca-cert` [default:
    /// $MINT_CA_CERT, else $MINT_HOME/ca.pem].
    #[arg(long)]
    pub ca_cert: Option<PathBuf>,

    /// The interception CA's key, as for `mint serve --ca-key` [default: $MINT_CA_KEY, else
    /// $MINT_HOME/ca.key].
    #[arg(long)]
    pub ca_key: Option<PathBuf>,

    /// Print one JSON object: `ok`, `counts` (`ok`, `info`, `warn`, `fail`) and `checks` (each
    /// with `check`, `subject`, `status`, `message`, `fix`).
    #[arg(long)]
    pub json: bool,
}

/// How a check came out. Only [`Status::Fail`] makes `mint doctor` exit 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Nothing to do.
    Ok,
    /// Worth knowing; nothing is wrong.
    Info,
    /// Mint works, but not as the operator probably wants.
    Warn,
    /// `mint serve` would refuse to start, or would not work as configured.
    Fail,
}

// === impl Status ===

impl Status {
    /// The word the human report starts the line with.
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Info => "info",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        }
    }
}

/// One finding of `mint doctor`. Never holds a secret value or a capability token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// The check's name: `home`, `listen`, `keyring`, `aliases`, `secret`, `policy`,
    /// `policy.alias`, `policy.rule`, `capabilities`, `audit.log`, `audit.chain`, `ca`,
    /// `ca.constraints` or `ca.trust`.
    pub check: &'static str,
    /// What it is about, for checks repeated per alias or rule.
    pub subject: Option<String>,
    /// How it came out.
    pub status: Status,
    /// What was found.
    pub message: String,
    /// What to do about it.
    pub fix: Option<String>,
}

// === impl Check ===

impl Check {
    fn ok(check: &'static str, message: impl Into<String>) -> Check {
        Check {
            check,
            subject: None,
            status: Status::Ok,
            message: message.into(),
            fix: None,
        }
    }

    fn info(check: &'static str, message: impl Into<String>) -> Check {
        Check {
            status: Status::Info,
            ..Check::ok(check, message)
        }
    }

    fn warn(check: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            status: Status::Warn,
            fix: Some(fix.into()),
            ..Check::ok(check, message)
        }
    }

    fn fail(check: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            status: Status::Fail,
            fix: Some(fix.into()),
            ..Check::ok(check, message)
        }
    }

    fn about(mut self, subject: &str) -> Check {
        self.subject = Some(subject.to_owned());
        self
    }
}

impl fmt::Display for Check {
    /// `STATUS  check [subject]: message -- fix: FIX`, on one line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<4}  {}", self.status.label(), self.check)?;
        if let Some(subject) = &self.subject {
            write!(f, " {subject}")?;
        }
        write!(f, ": {}", self.message)?;
        if let Some(fix) = &self.fix {
            write!(f, " -- fix: {fix}")?;
        }
        Ok(())
    }
}

/// Why `mint doctor` could not report (its findings are never errors).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DoctorError {
    /// The report could not be written.
    #[error("cannot write the output")]
    Output(#[source] io::Error),
}

/// Runs `mint doctor` on the home of `paths` and writes the report to `out`.
pub fn run(
    args: &DoctorArgs,
    paths: &Paths,
    out: &mut dyn Write,
) -> Result<ExitStatus, DoctorError> {
    let mut paths = paths.clone();
    if let Some(cert) = &args.ca_cert {
        paths.ca_cert.clone_from(cert);
    }
    if let Some(key) = &args.ca_key {
        paths.ca_key.clone_from(key);
    }
    let keyring = KeyringConfig::from_env();
    let vault = VaultStore::from_env();
    let vault_check = match &vault {
        Ok(None) => None,
        Ok(Some(store)) => Some(Check::ok(
            "vault",
            format!(
                "server {}, {}; each `vault:` alias is read below",
                store.config().addr,
                match store.config().auth {
                    VaultAuth::TokenFile(_) => "token file",
                    VaultAuth::AppRole { .. } => "AppRole",
                }
            ),
        )),
        Err(error) => Some(Check::fail(
            "vault",
            error.to_string(),
            "correct the MINT_VAULT_* variables (docs/credentials.md)",
        )),
    };
    let sources = CredentialSources::system(&keyring.clone().unwrap_or_default())
        .with_vault(vault.ok().flatten());
    let mut checks = diagnose(&paths, &args.listen, &keyring, &sources, SystemTime::now());
    if let Some(check) = vault_check {
        checks.push(check);
    }
    let text = if args.json {
        render_json(&checks).map_err(|e| DoctorError::Output(io::Error::other(e)))?
    } else {
        render_human(&checks)
    };
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(DoctorError::Output)?;
    Ok(if checks.iter().any(|c| c.status == Status::Fail) {
        ExitStatus::Failure
    } else {
        ExitStatus::Success
    })
}

/// Every check, in report order: the home, the listen address, the keyring, the alias file and
/// each alias's secret, the policy and how it uses the aliases, the placeholder key, the
/// capabilities, the audit log, the interception CA. A check whose file did not load skips those that need its contents.
pub fn diagnose(
    paths: &Paths,
    listen: &str,
    keyring: &Result<KeyringConfig, KeyringConfigError>,
    sources: &CredentialSources,
    now: SystemTime,
) -> Vec<Check> {
    let mut checks = vec![check_home(&paths.home), check_listen(listen)];
    let aliases = match load_alias_file(&paths.aliases) {
        Ok((aliases, _)) => {
            checks.push(Check::ok(
                "aliases",
                format!(
                    "{} declared in `{}`",
                    count(aliases.aliases.len(), "alias", "aliases"),
                    paths.aliases.display()
                ),
            ));
            Some(aliases)
        }
        Err(error) => {
            checks.push(declarations_failure("aliases", &error, &paths.aliases));
            None
        }
    };
    checks.push(check_keyring(keyring, sources, aliases.as_ref()));
    if let Some(aliases) = &aliases {
        checks.extend(check_secrets(aliases, keyring.is_ok(), sources));
    }
    match load_policy_file_with_warnings(&paths.policy) {
        Ok((policy, _, warnings)) => {
            let policy = policy.policy();
            let message = format!(
                "`{}` is valid: {}, default {}",
                paths.policy.display(),
                count(policy.rules.len(), "rule", "rules"),
                policy.default.as_str()
            );
            checks.push(match warnings.first() {
                None => Check::ok("policy", message),
                Some(first) => Check::warn(
                    "policy",
                    format!(
                        "{message}; {} (the first: {})",
                        count(warnings.len(), "warning", "warnings"),
                        first.short()
                    ),
                    "run `mint policy check` and address the warnings",
                ),
            });
            if let Some(aliases) = &aliases {
                checks.extend(check_alias_use(policy, aliases, &paths.policy));
            }
        }
        Err(error) => checks.push(declarations_failure("policy", &error, &paths.policy)),
    }
    if let Some(aliases) = &aliases {
        checks.extend(check_placeholder_key(&paths.placeholder_key, aliases));
    }
    checks.push(check_capabilities(&paths.capabilities, now));
    checks.push(check_audit_log(&paths.audit_log));
    checks.push(check_audit_chain(&paths.audit_log));
    checks.extend(check_ca(paths, aliases.as_ref(), now));
    checks
}

/// The human report: one line per check, then the counts.
pub fn render_human(checks: &[Check]) -> String {
    let mut text = String::new();
    for check in checks {
        // Paths and messages may hold terminal controls (a crafted file name).
        text.push_str(&printable(&check.to_string()));
        text.push('\n');
    }
    let counts = Counts::of(checks);
    text.push_str(&format!(
        "\n{}: {} ok, {} info, {}, {}\n",
        count(checks.len(), "check", "checks"),
        counts.ok,
        counts.info,
        count(counts.warn, "warning", "warnings"),
        count(counts.fail, "failure", "failures"),
    ));
    text
}

/// The JSON report: `{"ok": .., "counts": {..}, "checks": [..]}`.
pub fn render_json(checks: &[Check]) -> Result<String, serde_json::Error> {
    #[derive(Serialize)]
    struct Report<'a> {
        ok: bool,
        counts: Counts,
        checks: &'a [Check],
    }
    let counts = Counts::of(checks);
    let report = Report {
        ok: counts.fail == 0,
        counts,
        checks,
    };
    let mut text = json_for_terminal(serde_json::to_string_pretty(&report)?);
    text.push('\n');
    Ok(text)
}

/// How many checks came out each way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
struct Counts {
    ok: usize,
    info: usize,
    warn: usize,
    fail: usize,
}

impl Counts {
    fn of(checks: &[Check]) -> Counts {
        let mut counts = Counts::default();
        for check in checks {
            match check.status {
                Status::Ok => counts.ok += 1,
                Status::Info => counts.info += 1,
                Status::Warn => counts.warn += 1,
                Status::Fail => counts.fail += 1,
            }
        }
        counts
    }
}

/// MINT_HOME: a directory only Mint's user may write (as `mint init` and the loaders require),
/// and, as `mint init` makes it, closed to group and others.
fn check_home(home: &Path) -> Check {
    let shown = home.display();
    let metadata = match std::fs::metadata(home) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Check::fail(
                "home",
                format!("MINT_HOME `{shown}` does not exist"),
                "run `mint init`, or point MINT_HOME at your Mint home",
            );
        }
        Err(error) => {
            return Check::fail(
                "home",
                format!("cannot inspect MINT_HOME `{shown}`: {}", error.kind()),
                "make it readable by the user Mint runs as",
            );
        }
    };
    if !metadata.is_dir() {
        return Check::fail(
            "home",
            format!("MINT_HOME `{shown}` is not a directory"),
            "point MINT_HOME at a directory (`mint init` creates one)",
        );
    }
    if let Err(error) = check_private_dir(home) {
        return Check::fail("home", error.to_string(), secure_fix(&error));
    }
    let mode = metadata.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Check::warn(
            "home",
            format!(
                "MINT_HOME `{shown}` is open to group or others (mode {mode:04o}): they can list \
                 Mint's files"
            ),
            format!("run `chmod 700 {shown}`"),
        );
    }
    Check::ok(
        "home",
        format!("MINT_HOME `{shown}` is private (mode {mode:04o})"),
    )
}

/// The listen address: one `mint serve` can bind, and loopback.
fn check_listen(address: &str) -> Check {
    let addrs = match listen::resolve(address) {
        Ok(addrs) if !addrs.is_empty() => addrs,
        Ok(_) | Err(_) => {
            return Check::fail(
                "listen",
                format!("`{address}` is not an address `mint serve` can listen on"),
                "give HOST:PORT, such as 127.0.0.1:8700 (`--listen` or MINT_LISTEN)",
            );
        }
    };
    if addrs.iter().copied().all(listen::is_loopback) {
        Check::ok("listen", format!("`{address}` is loopback only"))
    } else {
        Check::warn(
            "listen",
            format!("`{address}` is not loopback: {}", listen::NOT_LOOPBACK_RISK),
            listen::NOT_LOOPBACK_FIX,
        )
    }
}

/// The keyring settings and a probe of the keyring (as `mint alias add` probes it). An
/// unreachable keyring fails only when an alias keeps its secret there.
fn check_keyring(
    keyring: &Result<KeyringConfig, KeyringConfigError>,
    sources: &CredentialSources,
    aliases: Option<&AliasFile>,
) -> Check {
    let config = match keyring {
        Ok(config) => config,
        Err(error) => {
            return Check::fail(
                "keyring",
                error.to_string(),
                "correct the variable, or unset it for the default",
            );
        }
    };
    let users = aliases.map_or(0, |aliases| {
        aliases
            .aliases
            .iter()
            .filter(|a| a.source == SecretSource::Keyring)
            .count()
    });
    let store = sources.keyring();
    let what = format!("the {}, service `{}`,", store.name(), config.service);
    let used = match users {
        0 => "no alias keeps its secret there".to_owned(),
        n => format!("{} keep their secret there", count(n, "alias", "aliases")),
    };
    match store.probe() {
        Ok(()) => Check::ok(
            "keyring",
            format!("{what} answers: a probe item was stored, read back and deleted; {used}"),
        ),
        Err(problem) => {
            let fix = match config.backend {
                KeyringBackend::SecretService => {
                    "run Mint in a D-Bus session with an unlocked keyring (GNOME Keyring, \
                     KWallet, KeePassXC), or set MINT_KEYRING_BACKEND=keyutils"
                }
                KeyringBackend::Keyutils
                    if problem
                        .to_string()
                        .contains("refused the keyring system calls") =>
                {
                    "the kernel keyring is forbidden here (seccomp): give each keyring alias an \
                     `env:` or `file:` source (`mint alias edit NAME --source ...`), or set \
                     MINT_KEYRING_BACKEND=secret-service"
                }
                KeyringBackend::Keyutils => {
                    "run Mint inside a session keyring (`keyctl session - mint ...`), or set \
                     MINT_KEYRING_BACKEND=secret-service"
                }
            };
            let message = format!("{what} cannot be used: {problem}; {used}");
            if users > 0 {
                Check::fail("keyring", message, fix)
            } else {
                Check::warn("keyring", message, fix)
            }
        }
    }
}

/// Whether each alias's secret can be read and used, as the broker loads it; never shows one.
fn check_secrets(
    aliases: &AliasFile,
    keyring_configured: bool,
    sources: &CredentialSources,
) -> Vec<Check> {
    let mut checks = Vec::with_capacity(aliases.aliases.len());
    for alias in &aliases.aliases {
        let name = alias.name.as_str();
        let check = if alias.source == SecretSource::Keyring && !keyring_configured {
            Check::fail(
                "secret",
                format!(
                    "not checked: the keyring settings are invalid (source `{}`)",
                    alias.source
                ),
                "correct MINT_KEYRING_BACKEND and MINT_KEYRING_SERVICE",
            )
        } else {
            // The value is dropped at once: only whether it could be read is kept.
            match sources.read(alias) {
                Ok(_) => Check::ok(
                    "secret",
                    match &alias.source {
                        SecretSource::Env(_) => format!(
                            "present (source `{}`, in this shell's environment; the broker reads \
                             its own)",
                            alias.source
                        ),
                        source => format!("present (source `{source}`)"),
                    },
                ),
                Err(error) => {
                    let fix = match (&alias.source, &error.problem) {
                        (SecretSource::Env(var), StoreError::Missing) => {
                            // Only this shell's environment was looked at.
                            let message = format!(
                                "{error} in this shell; the broker reads its own environment"
                            );
                            checks.push(
                                Check::warn(
                                    "secret",
                                    message,
                                    format!("set `{var}` in the environment `mint serve` runs in"),
                                )
                                .about(name),
                            );
                            continue;
                        }
                        (SecretSource::File(path), StoreError::Missing) => {
                            format!("create `{path}` (mode 0600) holding the secret")
                        }
                        (SecretSource::Keyring, StoreError::Missing) => format!(
                            "store it again: `mint alias rm {name}`, then `mint alias add {name} \
                             --host HOST`"
                        ),
                        (SecretSource::Vault(_), StoreError::Refused { .. }) => {
                            "grant Mint's token or role `read` on the secret's `data/` path \
                             (docs/operations.md, the Vault policy for Mint)"
                                .to_owned()
                        }
                        (SecretSource::Vault(_), _) => {
                            "check MINT_VAULT_ADDR and that the server answers, and that the \
                             secret, its version and its field exist (`bao kv get`)"
                                .to_owned()
                        }
                        (SecretSource::Command(command), _) => format!(
                            "run `{}` yourself as the user Mint runs as: it must exit 0 and print \
                             only the secret; Mint passes it only PATH, HOME, USER, LOGNAME, \
                             LANG, LC_ALL, TZ, TMPDIR and the XDG directories",
                            command.program()
                        ),
                        (_, StoreError::Unavailable { .. }) => {
                            "make the keyring reachable (see the `keyring` check)".to_owned()
                        }
                        (_, StoreError::Value(_)) => {
                            "store the secret again, as the message says".to_owned()
                        }
                        (_, StoreError::File(FileProblem::TooOpen { path, .. })) => {
                            format!("run `chmod 600 {}`", path.display())
                        }
                        (_, StoreError::File(FileProblem::ForeignOwner { path, uid, .. })) => {
                            format!("run `chown {uid} {}`", path.display())
                        }
                        (_, StoreError::File(FileProblem::Insecure(e))) => secure_fix(e),
                        (SecretSource::File(path), _) => format!(
                            "make `{path}` a regular file owned by the user Mint runs as, mode \
                             0600, in directories only that user or root can write"
                        ),
                        _ => "see the message; `mint alias list` shows every secret's state"
                            .to_owned(),
                    };
                    Check::fail("secret", error.to_string(), fix)
                }
            }
        };
        checks.push(check.about(name));
    }
    checks
}

/// How the policy uses the aliases: the allow and approve rules naming each alias (a warning
/// for an alias none names: every request with it is denied), and rules naming an alias the
/// alias file does not declare (that part of the rule never matches).
fn check_alias_use(policy: &Policy, aliases: &AliasFile, policy_path: &Path) -> Vec<Check> {
    let mut checks = Vec::new();
    for alias in &aliases.aliases {
        let name = alias.name.as_str();
        let rules: Vec<String> = policy
            .rules
            .iter()
            .filter(|rule| rule.effect.admits())
            .filter(|rule| {
                rule.matcher
                    .alias
                    .as_ref()
                    .is_some_and(|names| names.iter().any(|n| n == name))
            })
            .map(|rule| format!("`{}`", rule.id))
            .collect();
        checks.push(
            if rules.is_empty() {
                Check::warn(
                    "policy.alias",
                    "no allow or approve rule names this alias: every request that uses it is \
                     denied",
                    format!(
                        "add `alias: [{name}]` to an allow rule in `{}` (then `mint policy \
                         check`), or remove the alias with `mint alias rm {name}`",
                        policy_path.display()
                    ),
                )
            } else {
                Check::ok(
                    "policy.alias",
                    format!(
                        "allowed by {}: {}",
                        count(rules.len(), "rule", "rules"),
                        rules.join(", ")
                    ),
                )
            }
            .about(name),
        );
    }
    for rule in &policy.rules {
        for name in rule.matcher.alias.iter().flatten() {
            if aliases.find(name).is_none() {
                checks.push(
                    Check::warn(
                        "policy.rule",
                        format!(
                            "names alias `{name}`, which the alias file does not declare: that \
                             part of the rule never matches"
                        ),
                        format!(
                            "declare it (`mint alias add {name} --host HOST`), or remove it from \
                             the rule"
                        ),
                    )
                    .about(&rule.id),
                );
            }
        }
    }
    checks
}

/// The placeholder key (`placeholder.key`), which the value-shaped placeholders of the aliases
/// are derived from: there when an alias declares a shape, read as the broker reads it (owned by
/// root or Mint's user, closed to writing by others, 64 hex digits), mode 0600 and owned by
/// Mint's user. Nothing when no alias declares a shape and there is no key.
fn check_placeholder_key(path: &Path, aliases: &AliasFile) -> Option<Check> {
    const CHECK: &str = "placeholder.key";
    let shaped = aliases
        .aliases
        .iter()
        .filter(|alias| alias.placeholder.is_some())
        .count();
    let shown = path.display();
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return (shaped > 0).then(|| {
                Check::warn(
                    CHECK,
                    format!(
                        "no key yet, and {} a value-shaped placeholder: `mint serve` and `mint                          alias list` create `{shown}` when they first need it",
                        count(shaped, "alias declares", "aliases declare")
                    ),
                    "run `mint alias list` to create it (mode 0600) before handing out                      placeholders",
                )
            });
        }
        Err(error) => {
            return Some(Check::fail(
                CHECK,
                format!("cannot read `{shown}`: {error}"),
                format!("make `{shown}` a regular file Mint's user owns and can read"),
            ));
        }
    };
    if let Err(error) = placeholder_key::check_existing(path) {
        let fix = match &error {
            PlaceholderKeyError::File(e) => secure_fix(e),
            _ => format!(
                "remove `{shown}`: Mint writes a new key, and every value-shaped placeholder                  changes (agents must read them again: `mint env`, `mint alias list`)"
            ),
        };
        return Some(Check::fail(CHECK, error.to_string(), fix));
    }
    let euid = rustix::process::geteuid().as_raw();
    if metadata.uid() != euid {
        return Some(Check::warn(
            CHECK,
            format!(
                "`{shown}` is owned by uid {}, not by the user Mint runs as (uid {euid})",
                metadata.uid()
            ),
            format!("run `chown {euid} {shown}`"),
        ));
    }
    if metadata.mode() & 0o077 != 0 {
        return Some(Check::warn(
            CHECK,
            format!(
                "`{shown}` is mode {:04o}: group or others can read the key every value-shaped                  placeholder is derived from",
                metadata.mode() & 0o7777
            ),
            format!("run `chmod 600 {shown}`"),
        ));
    }
    Some(Check::ok(
        CHECK,
        format!(
            "`{shown}` holds a key, mode 0600; {} a value-shaped placeholder",
            count(shaped, "alias declares", "aliases declare")
        ),
    ))
}

/// The capabilities file, and how many capabilities are active, expired and revoked.
fn check_capabilities(path: &Path, now: SystemTime) -> Check {
    let file = match CapabilityFile::load(path) {
        Ok(file) => file,
        Err(error) => {
            let fix = match &error {
                CapabilityFileError::File(e) if e.is_not_found() => "run `mint init`".to_owned(),
                CapabilityFileError::File(e) => secure_fix(e),
                _ => format!(
                    "repair `{}` (the message gives the line), or move it away and issue the \
                     capabilities again",
                    path.display()
                ),
            };
            return Check::fail("capabilities", error.to_string(), fix);
        }
    };
    let (mut active, mut expired, mut revoked) = (0, 0, 0);
    for capability in file.capabilities() {
        match capability.status(now) {
            CapabilityStatus::Active => active += 1,
            CapabilityStatus::Expired => expired += 1,
            CapabilityStatus::Revoked => revoked += 1,
        }
    }
    let message = format!("{active} active, {expired} expired, {revoked} revoked");
    if expired + revoked > 0 {
        Check::info(
            "capabilities",
            format!("{message}: the broker refuses the expired and revoked ones"),
        )
    } else if active == 0 {
        Check::info(
            "capabilities",
            "no capability yet: an agent needs one (`mint cap issue --agent NAME`, or `mint run`)",
        )
    } else {
        Check::ok("capabilities", message)
    }
}

/// The audit log can be opened for appending (or created) as the broker opens it.
fn check_audit_log(path: &Path) -> Check {
    match AuditLog::check_writable(path) {
        Ok(true) => Check::ok(
            "audit.log",
            format!("`{}` can be appended to", path.display()),
        ),
        Ok(false) => Check::ok(
            "audit.log",
            format!(
                "no audit log yet; `mint serve` creates `{}` at its first start",
                path.display()
            ),
        ),
        Err(error) => Check::fail(
            "audit.log",
            with_sources(&error),
            format!(
                "make `{}` a regular file the user Mint runs as owns and can write (mode 0600), \
                 in a directory only that user can write; or set MINT_AUDIT_LOG_PATH",
                path.display()
            ),
        ),
    }
}

/// The audit log and its rotated files verify as one hash chain (`mint audit verify`).
fn check_audit_chain(path: &Path) -> Check {
    let files = match log_set(path) {
        Ok(files) => files,
        Err(error) => {
            return Check::fail(
                "audit.chain",
                format!(
                    "cannot list the audit files of `{}`: {}",
                    path.display(),
                    error.kind()
                ),
                "make the log's directory readable by the user Mint runs as",
            );
        }
    };
    if files.is_empty() {
        return Check::ok("audit.chain", "no audit records yet");
    }
    match verify_files(&files, VerifyOptions::default()) {
        Ok(report) => match &report.first_break {
            None => Check::ok(
                "audit.chain",
                format!(
                    "intact: {} in {}",
                    count(
                        usize::try_from(report.records).unwrap_or(usize::MAX),
                        "record",
                        "records"
                    ),
                    count(report.files.len(), "file", "files")
                ),
            ),
            Some(first) => Check::fail(
                "audit.chain",
                format!(
                    "broken: {first}{}",
                    if report.breaks > 1 {
                        format!(" ({} broken lines in all)", report.breaks)
                    } else {
                        String::new()
                    }
                ),
                "the log was changed after it was written: keep the files as evidence, find out \
                 how (`mint audit verify` shows the first broken line), and move them out of the \
                 log's directory to start a new chain",
            ),
        },
        Err(error) => Check::fail(
            "audit.chain",
            with_sources(&error),
            "make the audit files readable by the user Mint runs as",
        ),
    }
}

/// The interception CA as `mint serve` loads it: present, safe, the key the certificate's, within
/// its validity (a warning within 30 days of its end); its name constraints against the hosts
/// aliases are bound to; and whether the system's CA bundle holds it.
fn check_ca(paths: &Paths, aliases: Option<&AliasFile>, now: SystemTime) -> Vec<Check> {
    let ca = match ca_files::load(paths, now) {
        Ok(ca) => ca,
        Err(CaFileError::Missing { path }) => {
            return vec![Check::warn(
                "ca",
                format!(
                    "no interception CA at `{}`; `mint serve` creates one at its first start",
                    path.display()
                ),
                "run `mint ca rotate` to make it now, and have agents trust it (`mint ca export`)",
            )];
        }
        Err(error) => {
            let fix = match &error {
                CaFileError::Insecure(e) => secure_fix(e),
                CaFileError::KeyForeignOwner { path, uid, .. } => {
                    format!("run `chown {uid} {}`", path.display())
                }
                CaFileError::KeyTooOpen { path, .. } => {
                    format!("run `chmod 600 {}`", path.display())
                }
                _ => "run `mint ca rotate`, restart `mint serve` and have agents trust the new \
                      CA (`mint ca export`)"
                    .to_owned(),
            };
            return vec![Check::fail("ca", error.to_string(), fix)];
        }
    };
    let expires = humantime::format_rfc3339_seconds(ca.not_after());
    let mut checks = vec![if ca.not_after() < now + CA_EXPIRY_WARNING {
        Check::warn(
            "ca",
            format!("the interception CA expires on {expires}, within 30 days"),
            "run `mint ca rotate`, restart `mint serve` and have agents trust the new CA",
        )
    } else {
        Check::ok(
            "ca",
            format!(
                "`{}` and its key match; valid until {expires}",
                paths.ca_cert.display()
            ),
        )
    }];
    match ca.name_constraints() {
        None => checks.push(Check::ok(
            "ca.constraints",
            "not name-constrained: the CA may sign for any host (`mint ca rotate \
             --name-constraints` limits it to the aliases' hosts)",
        )),
        Some(constraints) => {
            let mut outside = 0;
            for (alias, host) in aliases
                .into_iter()
                .flat_map(|aliases| constraints.hosts_left_out(aliases))
            {
                outside += 1;
                checks.push(
                    Check::warn(
                        "ca.constraints",
                        format!(
                            "host `{host}` is outside the CA's name constraints: a CONNECT to it \
                             is refused"
                        ),
                        "run `mint ca rotate --name-constraints`, restart `mint serve` and have \
                         agents trust the new CA",
                    )
                    .about(&alias.name),
                );
            }
            if outside == 0 {
                checks.push(Check::ok(
                    "ca.constraints",
                    format!("name-constrained ({constraints}); every alias host is inside"),
                ));
            }
        }
    }
    checks.push(check_ca_trust(ca.cert_pem()));
    checks
}

/// Whether the system's CA bundle holds Mint's CA: only informative, since agents `mint run`
/// starts trust it through their environment.
fn check_ca_trust(cert_pem: &str) -> Check {
    let Some(bundle) = crate::cli::ca::system_bundle() else {
        return Check::info("ca.trust", "no system CA bundle found");
    };
    let held = std::fs::read_to_string(bundle)
        .is_ok_and(|text| squeeze(&text).contains(&squeeze(pem_body(cert_pem))));
    if held {
        Check::ok(
            "ca.trust",
            format!(
                "the system trust store (`{}`) holds the CA",
                bundle.display()
            ),
        )
    } else {
        Check::info(
            "ca.trust",
            format!(
                "the system trust store (`{}`) does not hold the CA: agents started by `mint \
                 run` trust it through their environment; give others `mint ca export`",
                bundle.display()
            ),
        )
    }
}

/// The base64 between a PEM block's armour lines.
fn pem_body(pem: &str) -> &str {
    let body = pem.split_once("-----\n").map_or(pem, |(_, rest)| rest);
    body.split_once("-----").map_or(body, |(body, _)| body)
}

fn squeeze(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

/// A failed load of the alias or policy file, with its fix.
fn declarations_failure(check: &'static str, error: &DeclarationsError, path: &Path) -> Check {
    let fix = match error {
        DeclarationsError::Insecure(e) if e.is_not_found() => "run `mint init`".to_owned(),
        DeclarationsError::Insecure(e) => secure_fix(e),
        DeclarationsError::Unreadable { .. } => format!(
            "make `{}` a regular file Mint's user can read (`mint init` creates it)",
            path.display()
        ),
        _ if check == "policy" => {
            "run `mint policy check` and correct the errors it lists".to_owned()
        }
        _ => format!("correct `{}` at the line the message names", path.display()),
    };
    Check::fail(check, error.to_string(), fix)
}

/// The command that fixes a permission refusal.
fn secure_fix(error: &SecureFileError) -> String {
    match error {
        SecureFileError::WritableByOthers { path, is_dir } => format!(
            "run `chmod {} {}`",
            if *is_dir { "700" } else { "600" },
            path.display()
        ),
        SecureFileError::ForeignOwner { path, uid, .. } => {
            format!("run `chown {uid} {}`", path.display())
        }
        SecureFileError::DirectoryWritableByOthers { dir, .. } => {
            format!("run `chmod go-w {}`", dir.display())
        }
        SecureFileError::ForeignDirectory { dir, uid, .. } => format!(
            "run `chown {uid} {}`, or keep Mint's files in directories only root and uid {uid} \
             own",
            dir.display()
        ),
        _ => "keep Mint's files in directories only root and the user Mint runs as can write"
            .to_owned(),
    }
}

/// An error's message followed by its sources' (`cannot open ...: Permission denied`).
fn with_sources(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

/// `1 alias`, `2 aliases`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_check_with_the_fix() {
        let checks = [
            Check::ok("home", "MINT_HOME `/h` is private (mode 0700)"),
            Check::warn("policy.alias", "no rule", "add one").about("github"),
            Check::fail("audit.chain", "broken: x", "keep the files"),
        ];
        let text = render_human(&checks);
        assert_eq!(
            text,
            "ok    home: MINT_HOME `/h` is private (mode 0700)\n\
             warn  policy.alias github: no rule -- fix: add one\n\
             FAIL  audit.chain: broken: x -- fix: keep the files\n\
             \n3 checks: 1 ok, 0 info, 1 warning, 1 failure\n"
        );
        let json: serde_json::Value = serde_json::from_str(&render_json(&checks).unwrap()).unwrap();
        assert_eq!(json["ok"], false);
        assert_eq!(json["counts"]["warn"], 1);
        assert_eq!(json["checks"][1]["check"], "policy.alias");
        assert_eq!(json["checks"][1]["subject"], "github");
        assert_eq!(json["checks"][1]["status"], "warn");
        assert_eq!(json["checks"][0]["fix"], serde_json::Value::Null);
    }

    #[test]
    fn a_terminal_control_in_a_message_is_not_printed_raw() {
        let checks = [Check::ok("home", "MINT_HOME `/h\x1b[2J` is private")];
        assert!(!render_human(&checks).contains('\x1b'));
    }

    #[test]
    fn listen_addresses_off_loopback_are_warned_about() {
        assert_eq!(check_listen("127.0.0.1:8700").status, Status::Ok);
        assert_eq!(check_listen("0.0.0.0:8700").status, Status::Warn);
        assert_eq!(check_listen("nonsense").status, Status::Fail);
    }

    #[test]
    fn pem_bodies_compare_without_line_breaks() {
        let pem = "-----BEGIN CERTIFICATE-----\nAAAA\nBBBB\n-----END CERTIFICATE-----\n";
        assert_eq!(squeeze(pem_body(pem)), "AAAABBBB");
        assert!(
            squeeze("x\n-----BEGIN CERTIFICATE-----\nAAAAB\nBBB\n-----END").contains("AAAABBBB")
        );
    }
}
