//! `mint alias add|list|rm`: declares aliases in the alias file and keeps their keyring items in
//! step.
//!
//! Every declaration is checked with `mint-policy` exactly as the broker will load it: the new
//! file's text is rendered, re-loaded and only written when it validates. A keyring secret is read
//! with echo off from the terminal, or from stdin with `--secret-stdin`; never from the command
//! line or the environment. `add` stores the secret first and then writes the file atomically; if
//! the write fails the keyring item is removed again, so nothing is half-done. `list` says whether
//! each secret is present, never what it is. Read-modify-write runs under a lock on the file's
//! directory, so two commands cannot lose each other's change.

use std::fmt;
use std::io::{self, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand, ValueEnum};
use mint_policy::aliases::{
    Alias, AliasFile, CommandSource, DEFAULT_COMMAND_CACHE, DEFAULT_COMMAND_MAX_STALE,
    DEFAULT_COMMAND_TIMEOUT, MAX_COMMAND_ARG_BYTES, MAX_COMMAND_ARGS, SecretSource, is_env_name,
    load_aliases,
};
use mint_policy::body::{FormField, FormFieldError, JsonPointer, PointerError};
use mint_policy::diagnostic::count_noun;
use mint_policy::host::{HostPattern, HostPatternError};
use mint_policy::placeholder_shape::{PlaceholderShape, ShapeError};
use mint_policy::policy::is_alias_name;
use mint_policy::site::{Site, SiteSet};
use mint_policy::{Diagnostic, MAX_FILE_BYTES, Pos, Severity};
use serde::Serialize;
use zeroize::Zeroizing;

use crate::cli::ExitStatus;
use crate::cli::terminal::{json_for_terminal, printable, read_hidden};
use crate::config::declaration_file::{ReadError, read_declaration_file};
use crate::config::env::Paths;
use crate::config::placeholder_key::{PlaceholderKeyError, shaped_placeholders};
use crate::config::secure_file::{DirLock, SecureFileError, check_config_file, write_atomic};
use crate::secrets::credential_store::file_store::strip_one_newline;
use crate::secrets::credential_store::{
    CredentialError, CredentialSources, CredentialValue, KeyringConfig, KeyringConfigError,
    MAX_VALUE_BYTES, StoreError, ValueProblem, VaultStore, check_value_for,
};
use crate::secrets::placeholder::shaped::ShapedPlaceholders;

/// `mint alias ...`.
#[derive(Debug, Subcommand)]
pub enum AliasCommand {
    /// Declare an alias and, for the keyring source, store its secret.
    ///
    /// The secret is read with echo off from the terminal, or from stdin with `--secret-stdin`
    /// (one trailing newline is dropped); never from the command line. `env:VAR` and `file:PATH`
    /// sources are filled by the operator: nothing is read.
    Add(AliasAddArgs),
    /// List the aliases and whether each secret is present (never the value).
    ///
    /// Exit status: 0 every secret is present, 1 one cannot be read here, 2 a file or setting
    /// cannot be used.
    List(AliasListArgs),
    /// Remove an alias's declaration and its keyring item.
    Rm(AliasRmArgs),
    /// Change an alias's declaration in place: each part given replaces that part.
    ///
    /// `--host` replaces the hosts; any of `--site`, `--body` and `--form` replaces the sites;
    /// `--source keyring` from another source reads and stores a secret as `add` does, and moving
    /// off the keyring deletes the keyring item once the file is written.
    Edit(AliasEditArgs),
    /// Replace the secret of a keyring alias, read as `add` reads it; the declaration is kept.
    SetSecret(AliasSetSecretArgs),
}

/// Arguments of `mint alias add`.
#[derive(Debug, Args)]
pub struct AliasAddArgs {
    /// The alias name: 1-64 characters of a-z, 0-9, `_` and `-`, such as `github`.
    pub name: String,
    /// A host the secret may be sent to: an exact canonical host, or `*.example.com`. Repeat for
    /// more hosts.
    #[arg(long = "host", value_name = "HOST", required = true)]
    pub hosts: Vec<String>,
    /// Where in a request the secret may sit. Repeat for more sites [default: header, or none
    /// when --body names a pointer or --form a field].
    #[arg(long = "site", value_name = "SITE", value_enum)]
    pub sites: Vec<SiteArg>,
    /// A JSON Pointer (RFC 6901) of a JSON body where the secret may sit, such as
    /// `/client_secret`. Repeat for more; a placeholder anywhere else in a body is sent as text.
    #[arg(long = "body", value_name = "POINTER")]
    pub body: Vec<String>,
    /// A field of an `application/x-www-form-urlencoded` body whose value the secret may sit
    /// in, written decoded, such as `client_secret`. Repeat for more; a placeholder anywhere else
    /// in a body is sent as text.
    #[arg(long = "form", value_name = "FIELD")]
    pub form: Vec<String>,
    /// Where the broker reads the secret: `keyring`, `env:VAR`, `file:/absolute/path` or
    /// `vault:MOUNT/PATH#KEY[?version=N]` [default: keyring].
    #[arg(long, value_name = "SOURCE", conflicts_with = "command")]
    pub source: Option<String>,
    /// Read the secret from a program's output: the program and its arguments, each as its own
    /// word, never given to a shell (`--command gh auth token`). Must come last: every word after
    /// it is an argument. Set `timeout`, `cache` and `max_stale` in the alias file.
    #[arg(
        long,
        value_name = "PROGRAM",
        num_args = 1..,
        allow_hyphen_values = true
    )]
    pub command: Vec<String>,
    /// What the credential is (shown to the agent).
    #[arg(long, value_name = "TEXT")]
    pub description: Option<String>,
    /// An environment variable `mint run` sets to this alias's placeholder, for clients that
    /// read their key from the environment (`GITHUB_TOKEN`). Repeat for more.
    #[arg(long = "env", value_name = "NAME")]
    pub env: Vec<String>,
    /// A value-shaped placeholder for clients that check a key's form before sending it:
    /// `PREFIX:LENGTH[:ALPHABET]` (`sk-:48`, `xoxb-:56:lower`; alphabets `base62`, `lower`, `hex`,
    /// `base64url`) or `jwt`. `mint run` then sets the `--env` variables to a random value of
    /// that shape instead of `{{mint:NAME}}`, and the proxy substitutes it the same way.
    #[arg(long, value_name = "SHAPE")]
    pub placeholder: Option<String>,
    /// Read the secret from stdin instead of the terminal (one trailing newline is dropped).
    /// When stdin is itself a terminal, the hidden prompt is used, so nothing is echoed.
    #[arg(long)]
    pub secret_stdin: bool,
}

/// A request site, as written on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SiteArg {
    /// A header value.
    Header,
    /// The query string.
    Query,
}

/// Arguments of `mint alias list`.
#[derive(Debug, Args)]
pub struct AliasListArgs {
    /// Print a JSON array of objects (`name`, `description`, `hosts`, `sites`, `source`, `env`,
    /// `placeholder`, `secret`, `problem`).
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `mint alias rm`.
#[derive(Debug, Args)]
pub struct AliasRmArgs {
    /// The alias to remove.
    pub name: String,
}

/// Arguments of `mint alias edit`. Parts not given are kept.
#[derive(Debug, Args)]
pub struct AliasEditArgs {
    /// The alias to change.
    pub name: String,
    /// The hosts the secret may be sent to, replacing the declared ones. Repeat for more.
    #[arg(long = "host", value_name = "HOST")]
    pub hosts: Vec<String>,
    /// Where in a request the secret may sit. Any of --site, --body and --form replaces all of
    /// the alias's sites, as `add` would set them.
    #[arg(long = "site", value_name = "SITE", value_enum)]
    pub sites: Vec<SiteArg>,
    /// A JSON Pointer of a JSON body where the secret may sit (see `add`). Repeat for more.
    #[arg(long = "body", value_name = "POINTER")]
    pub body: Vec<String>,
    /// A form field whose value the secret may sit in (see `add`). Repeat for more.
    #[arg(long = "form", value_name = "FIELD")]
    pub form: Vec<String>,
    /// Where the broker reads the secret: `keyring`, `env:VAR` or `file:/absolute/path`.
    #[arg(long, value_name = "SOURCE")]
    pub source: Option<String>,
    /// What the credential is (shown to the agent); an empty text removes it.
    #[arg(long, value_name = "TEXT")]
    pub description: Option<String>,
    /// Environment variables `mint run` sets to the placeholder, replacing the declared ones.
    /// Repeat for more.
    #[arg(long = "env", value_name = "NAME")]
    pub env: Vec<String>,
    /// Remove every environment variable name of the alias.
    #[arg(long, conflicts_with = "env")]
    pub no_env: bool,
    /// A value-shaped placeholder (as `add --placeholder`: `PREFIX:LENGTH[:ALPHABET]` or `jwt`),
    /// replacing the declared one; its value changes with the shape.
    #[arg(long, value_name = "SHAPE", conflicts_with = "no_placeholder")]
    pub placeholder: Option<String>,
    /// Remove the value-shaped placeholder: `mint run` sets `{{mint:NAME}}` again.
    #[arg(long)]
    pub no_placeholder: bool,
    /// With `--source keyring` on an alias that was not in the keyring: read the secret from
    /// stdin instead of the terminal.
    #[arg(long)]
    pub secret_stdin: bool,
}

/// Arguments of `mint alias set-secret`.
#[derive(Debug, Args)]
pub struct AliasSetSecretArgs {
    /// The alias whose keyring secret to replace.
    pub name: String,
    /// Read the secret from stdin instead of the terminal (one trailing newline is dropped).
    #[arg(long)]
    pub secret_stdin: bool,
}

/// Where `mint alias add` reads a keyring secret from.
pub enum SecretInput<'a> {
    /// The controlling terminal, with echo off.
    Terminal,
    /// A stream (stdin with `--secret-stdin`); one trailing newline is dropped.
    Stream(&'a mut dyn Read),
}

impl fmt::Debug for SecretInput<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SecretInput::Terminal => "SecretInput::Terminal",
            SecretInput::Stream(_) => "SecretInput::Stream",
        })
    }
}

/// Why an alias command failed. Nothing was changed unless the message says otherwise. Never
/// holds a secret, and never repeats an argument that failed its grammar (it might be a secret
/// pasted into the wrong place).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AliasCommandError {
    /// The name is outside the alias grammar.
    #[error(
        "invalid alias name: use 1-64 characters of a-z, 0-9, `_` and `-`, starting with a \
         letter or digit, such as `github`"
    )]
    InvalidName,
    /// A `--host` is not a host pattern POLICY.md accepts.
    #[error("invalid --host #{index}: {problem}")]
    InvalidHost {
        /// Which `--host`, from 1.
        index: usize,
        /// What is wrong (never the text, except its canonical spelling).
        problem: HostPatternError,
    },
    /// An `--env` is outside the variable grammar.
    #[error(
        "invalid --env #{index}: an environment variable name is 1-128 characters of A-Z, a-z, \
         0-9 and `_`, not starting with a digit, such as `GITHUB_TOKEN`"
    )]
    InvalidEnv {
        /// Which `--env`, from 1.
        index: usize,
    },
    /// `--source` is not `keyring`, `env:VAR`, `file:/absolute/path` or `vault:MOUNT/PATH#KEY`.
    #[error(
        "invalid --source: use `keyring`, `env:VARIABLE_NAME`, `file:/absolute/path` or \
         `vault:MOUNT/PATH#KEY` (or `--command PROGRAM ARG...`); the secret itself never goes on \
         the command line"
    )]
    InvalidSource,
    /// `--command` names a program that is neither an absolute path nor a bare name.
    #[error(
        "invalid --command: the program is an absolute path (`/usr/bin/gh`) or a name looked up \
         in PATH (`gh`), followed by its arguments, at most 64 words of at most 4096 bytes"
    )]
    InvalidCommand,
    /// A `--body` is not a JSON Pointer.
    #[error("invalid --body #{index}: {problem}")]
    InvalidPointer {
        /// Which `--body`, from 1.
        index: usize,
        /// What is wrong (never the text).
        problem: PointerError,
    },
    /// `--placeholder` is not a shape Mint can derive a placeholder from.
    #[error("invalid --placeholder: {0}")]
    InvalidPlaceholder(ShapeError),
    /// The home's placeholder key cannot be read or created.
    #[error(transparent)]
    PlaceholderKey(PlaceholderKeyError),
    /// A `--form` is not a form field name.
    #[error("invalid --form #{index}: {problem}")]
    InvalidFormField {
        /// Which `--form`, from 1.
        index: usize,
        /// What is wrong (never the text).
        problem: FormFieldError,
    },
    /// The declaration does not validate (a description that is too long, for instance).
    #[error("the alias does not validate: {message}")]
    InvalidDeclaration {
        /// The loader's message (never quotes a value).
        message: String,
    },
    /// `--secret-stdin` with a source Mint does not store.
    #[error(
        "--secret-stdin applies to `--source keyring` only; the operator provides env and file \
         secrets"
    )]
    StdinWithoutKeyring,
    /// `mint alias edit` with nothing to change.
    #[error(
        "nothing to change: give at least one of --host, --site, --body, --form, --source, \
         --description, --env, --no-env, --placeholder or --no-placeholder (`mint alias \
         set-secret` replaces a keyring secret)"
    )]
    NothingToEdit,
    /// `--secret-stdin` on an edit that stores no secret.
    #[error(
        "--secret-stdin applies when `--source keyring` moves alias `{name}` into the keyring; \
         `mint alias set-secret {name}` replaces a keyring secret"
    )]
    StdinWithoutNewSecret {
        /// The alias.
        name: String,
    },
    /// `mint alias set-secret` on an alias whose secret Mint does not store.
    #[error(
        "alias `{name}` reads its secret from `{from}`, which the operator fills: change the \
         value there, or move the alias into the keyring with `mint alias edit {name} --source \
         keyring`"
    )]
    NotInKeyring {
        /// The alias.
        name: String,
        /// Its source.
        from: SecretSource,
    },
    /// An alias with this name is declared already.
    #[error(
        "alias `{name}` already exists in `{}`; change it with `mint alias edit {name}` or \
         `mint alias set-secret {name}`, or remove it with `mint alias rm {name}`",
        file.display()
    )]
    Duplicate {
        /// The alias.
        name: String,
        /// The alias file.
        file: PathBuf,
    },
    /// No alias with this name is declared.
    #[error("unknown alias `{name}`; `mint alias list` shows the declared aliases")]
    Unknown {
        /// The alias.
        name: String,
    },
    /// The alias file is unsafe to use.
    #[error(transparent)]
    Insecure(SecureFileError),
    /// The alias file cannot be read.
    #[error("cannot read alias file `{}`: {problem}{hint}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        problem: ReadError,
        /// `; run mint init first` when the file does not exist.
        hint: &'static str,
    },
    /// The alias file does not validate.
    #[error("alias file `{}` has {}; the first: {first}", path.display(), count_noun(*count, "error"))]
    InvalidFile {
        /// The file.
        path: PathBuf,
        /// How many errors.
        count: usize,
        /// The first, rendered with its line and column.
        first: String,
    },
    /// The keyring settings in the environment are wrong.
    #[error(transparent)]
    KeyringConfig(#[from] KeyringConfigError),
    /// No terminal to read the secret from.
    #[error("cannot read the secret from the terminal; pipe it in with `--secret-stdin`")]
    NoTerminal(#[source] io::Error),
    /// Ctrl-C while reading the secret.
    #[error("cancelled; nothing was changed")]
    Cancelled,
    /// Stdin could not be read.
    #[error("cannot read the secret from stdin")]
    Stdin(#[source] io::Error),
    /// The secret is not usable for this alias.
    #[error("the secret for alias `{name}` is refused: {problem}")]
    Value {
        /// The alias.
        name: String,
        /// Why (never the value).
        problem: ValueProblem,
    },
    /// The secret's store failed (keyring unreachable, file source insecure).
    #[error("{0}; nothing was changed")]
    Store(CredentialError),
    /// The alias file could not be written; the keyring item stored for it was removed again.
    #[error("{0}; nothing was changed")]
    Write(SecureFileError),
    /// The alias file could not be written and the keyring item could not be removed either.
    #[error(
        "{write}; the secret stored for alias `{name}` could not be removed from the keyring \
         ({cleanup}): remove it by hand (service `{service}`, account `{name}`)"
    )]
    WriteAndCleanup {
        /// The alias.
        name: String,
        /// The keyring service.
        service: String,
        /// Why the file was not written.
        write: Box<SecureFileError>,
        /// Why the item was not removed.
        cleanup: Box<StoreError>,
    },
    /// The declaration was removed, but its keyring item could not be.
    #[error(
        "removed alias `{name}` from `{}`, but its keyring item could not be deleted ({problem}): \
         remove it by hand (service `{service}`, account `{name}`)",
        file.display()
    )]
    ItemLeft {
        /// The alias.
        name: String,
        /// The alias file.
        file: PathBuf,
        /// The keyring service.
        service: String,
        /// Why.
        problem: Box<StoreError>,
    },
    /// The declaration moved off the keyring, but its keyring item could not be deleted.
    #[error(
        "changed alias `{name}` in `{}`, but its old keyring item could not be deleted \
         ({problem}): remove it by hand (service `{service}`, account `{name}`)",
        file.display()
    )]
    OldItemLeft {
        /// The alias.
        name: String,
        /// The alias file.
        file: PathBuf,
        /// The keyring service.
        service: String,
        /// Why.
        problem: Box<StoreError>,
    },
    /// The result could not be written to the output.
    #[error("cannot write the output")]
    Output(#[source] io::Error),
}

/// Runs an alias command. `stdin` is used by `add --secret-stdin` only.
pub fn run(
    command: AliasCommand,
    paths: &Paths,
    stdin: &mut dyn Read,
    out: &mut dyn Write,
) -> Result<ExitStatus, AliasCommandError> {
    let keyring = KeyringConfig::from_env()?;
    // A `vault:` alias is read once when it is added; settings that do not load leave Vault
    // out, and the alias's check then says so.
    let sources =
        CredentialSources::system(&keyring).with_vault(VaultStore::from_env().ok().flatten());
    match command {
        AliasCommand::Add(args) => {
            let input = secret_input(args.secret_stdin, stdin);
            add(
                &paths.aliases,
                &paths.placeholder_key,
                &sources,
                &keyring,
                args,
                input,
                out,
            )?;
            Ok(ExitStatus::Success)
        }
        AliasCommand::List(args) => {
            let listed = list(
                &paths.aliases,
                &paths.placeholder_key,
                &sources,
                args.json,
                out,
            )?;
            Ok(if listed.all_present() {
                ExitStatus::Success
            } else {
                ExitStatus::Failure
            })
        }
        AliasCommand::Rm(args) => {
            remove(&paths.aliases, &sources, &keyring, &args.name, out)?;
            Ok(ExitStatus::Success)
        }
        AliasCommand::Edit(args) => {
            let input = secret_input(args.secret_stdin, stdin);
            edit(
                &paths.aliases,
                &paths.placeholder_key,
                &sources,
                &keyring,
                args,
                input,
                out,
            )?;
            Ok(ExitStatus::Success)
        }
        AliasCommand::SetSecret(args) => {
            let input = secret_input(args.secret_stdin, stdin);
            set_secret(&paths.aliases, &sources, &keyring, &args.name, input, out)?;
            Ok(ExitStatus::Success)
        }
    }
}

/// Where a command that takes a secret reads it: stdin with `--secret-stdin`, unless stdin is a
/// terminal, which would echo it: the hidden prompt then.
fn secret_input(secret_stdin: bool, stdin: &mut dyn Read) -> SecretInput<'_> {
    if secret_stdin && !io::stdin().is_terminal() {
        SecretInput::Stream(stdin)
    } else {
        SecretInput::Terminal
    }
}

/// `mint alias add`: validates, reads and stores the secret (keyring source), then writes the
/// alias file atomically.
/// A `--placeholder` shape gets its value from the home's key at `placeholder_key`.
pub fn add(
    file: &Path,
    placeholder_key: &Path,
    sources: &CredentialSources,
    keyring: &KeyringConfig,
    args: AliasAddArgs,
    input: SecretInput<'_>,
    out: &mut dyn Write,
) -> Result<(), AliasCommandError> {
    add_with(
        file,
        placeholder_key,
        sources,
        keyring,
        args,
        input,
        out,
        &write_atomic,
    )
}

/// Writes the alias file's new text (`write_atomic`, or a failing stand-in in tests).
type CommitFn = dyn Fn(&Path, &[u8]) -> Result<(), SecureFileError>;

/// [`add`] with the final file write given, so tests can make it fail.
#[expect(
    clippy::too_many_arguments,
    reason = "the arguments of `add` and the write under test"
)]
fn add_with(
    file: &Path,
    placeholder_key: &Path,
    sources: &CredentialSources,
    keyring: &KeyringConfig,
    args: AliasAddArgs,
    input: SecretInput<'_>,
    out: &mut dyn Write,
    commit: &CommitFn,
) -> Result<(), AliasCommandError> {
    let mut alias = declaration(
        args.name,
        &args.hosts,
        &args.sites,
        &args.body,
        &args.form,
        args.source,
        args.description,
    )?;
    alias.env = env_names(&args.env)?;
    alias.placeholder = args
        .placeholder
        .as_deref()
        .map(PlaceholderShape::parse)
        .transpose()
        .map_err(AliasCommandError::InvalidPlaceholder)?;
    if !args.command.is_empty() {
        alias.source = command_source(args.command)?;
    }
    let is_keyring = alias.source == SecretSource::Keyring;
    if args.secret_stdin && !is_keyring {
        return Err(AliasCommandError::StdinWithoutKeyring);
    }
    // Check everything that can be checked before asking for the secret.
    let (_, warnings) = with_alias(&load_file(file)?, file, &alias)?;
    // The shaped value, derived (and the home's key made) before anything is changed.
    let shaped_value = shaped_value_of(placeholder_key, &alias)?;

    let mut notes = Vec::new();
    let value = if is_keyring {
        Some(read_keyring_value(sources, &alias, input)?)
    } else {
        notes.extend(check_operator_source(sources, &alias)?);
        None
    };

    let _lock = DirLock::for_file(file).map_err(AliasCommandError::Insecure)?;
    // Re-read under the lock: another command may have changed the file meanwhile.
    let (text, _) = with_alias(&load_file(file)?, file, &alias)?;
    store_and_write(
        file,
        &text,
        &alias,
        value.as_ref(),
        sources,
        keyring,
        commit,
    )?;
    tracing::debug!(alias = %alias.name, alias.source = %alias.source, "Alias added");

    let mut report = format!(
        "Added alias `{}` to {}: {}.\n",
        alias.name,
        file.display(),
        summary(&alias)
    );
    if let Some(shaped) = &shaped_value {
        report.push_str(&shaped_line(shaped));
    }
    if is_keyring {
        report.push_str(&format!(
            "Stored its secret in the {}, service `{}`, account `{}`.\n",
            sources.keyring().name(),
            keyring.service,
            alias.name
        ));
    }
    for warning in warnings.iter().chain(&notes) {
        report.push_str(&format!("warning: {warning}\n"));
    }
    report.push_str(&format!(
        "Next: allow it in the policy (`alias: {}` in an allow rule), then run `mint policy \
         check`.\n",
        alias.name
    ));
    write_out(out, report.as_bytes())
}

/// Asks for the secret of keyring alias `alias` and checks it, once the keyring has answered: an
/// unreachable keyring is found before the operator types a secret.
fn read_keyring_value(
    sources: &CredentialSources,
    alias: &Alias,
    input: SecretInput<'_>,
) -> Result<CredentialValue, AliasCommandError> {
    sources
        .keyring()
        .probe()
        .map_err(|problem| AliasCommandError::Store(CredentialError::new(alias, problem)))?;
    let value = read_secret(input, &alias.name)?;
    check_value_for(alias, &value).map_err(|e| AliasCommandError::Value {
        name: alias.name.clone(),
        problem: match e.problem {
            StoreError::Value(problem) => problem,
            _ => ValueProblem::ControlCharacter,
        },
    })?;
    Ok(value)
}

/// `mint alias edit`: applies the parts given to the declaration, checks the whole file as
/// `add` does, stores a secret first when the alias moves into the keyring, writes the file
/// atomically, and deletes the keyring item when the alias moves out of it.
pub fn edit(
    file: &Path,
    placeholder_key: &Path,
    sources: &CredentialSources,
    keyring: &KeyringConfig,
    args: AliasEditArgs,
    input: SecretInput<'_>,
    out: &mut dyn Write,
) -> Result<(), AliasCommandError> {
    edit_with(
        file,
        placeholder_key,
        sources,
        keyring,
        args,
        input,
        out,
        &write_atomic,
    )
}

/// [`edit`] with the final file write given, so tests can make it fail.
#[expect(
    clippy::too_many_arguments,
    reason = "the arguments of `edit` and the write under test"
)]
fn edit_with(
    file: &Path,
    placeholder_key: &Path,
    sources: &CredentialSources,
    keyring: &KeyringConfig,
    args: AliasEditArgs,
    input: SecretInput<'_>,
    out: &mut dyn Write,
    commit: &CommitFn,
) -> Result<(), AliasCommandError> {
    if !is_alias_name(&args.name) {
        return Err(AliasCommandError::InvalidName);
    }
    let current = load_file(file)?;
    let old = current
        .find(&args.name)
        .cloned()
        .ok_or_else(|| AliasCommandError::Unknown {
            name: args.name.clone(),
        })?;
    let alias = edited(&old, &args)?;
    let into_keyring = alias.source == SecretSource::Keyring && old.source != SecretSource::Keyring;
    let off_keyring = old.source == SecretSource::Keyring && alias.source != SecretSource::Keyring;
    if args.secret_stdin && !into_keyring {
        return Err(AliasCommandError::StdinWithoutNewSecret { name: old.name });
    }
    // Check everything that can be checked before asking for a secret.
    let (_, warnings) = with_replaced(&current, file, &alias)?;
    // The shaped value, derived (and the home's key made) before anything is changed.
    let shaped_value = shaped_value_of(placeholder_key, &alias)?;
    let mut notes = Vec::new();
    let value = if into_keyring {
        Some(read_keyring_value(sources, &alias, input)?)
    } else {
        if alias.source != SecretSource::Keyring && alias.source != old.source {
            notes.extend(check_operator_source(sources, &alias)?);
        }
        if off_keyring {
            // Make sure the keyring answers before the declaration changes, as `rm` does.
            ensure_keyring_answers(sources, &old)?;
        }
        None
    };

    let _lock = DirLock::for_file(file).map_err(AliasCommandError::Insecure)?;
    // Re-read under the lock: another command may have changed the file meanwhile.
    let (text, _) = with_replaced(&load_file(file)?, file, &alias)?;
    store_and_write(
        file,
        &text,
        &alias,
        value.as_ref(),
        sources,
        keyring,
        commit,
    )?;
    tracing::debug!(alias = %alias.name, alias.source = %alias.source, "Alias changed");

    let mut report = format!(
        "Changed alias `{}` in {}: {}.\n",
        alias.name,
        file.display(),
        summary(&alias)
    );
    if let Some(shaped) = &shaped_value {
        report.push_str(&shaped_line(shaped));
    }
    if value.is_some() {
        report.push_str(&format!(
            "Stored its secret in the {}, service `{}`, account `{}`.\n",
            sources.keyring().name(),
            keyring.service,
            alias.name
        ));
    }
    if off_keyring {
        match sources.keyring().delete(&alias.name) {
            Ok(()) => report.push_str(&format!(
                "Deleted its old secret from the {}.\n",
                sources.keyring().name()
            )),
            Err(StoreError::Missing) => report.push_str("The keyring held no secret for it.\n"),
            Err(problem) => {
                return Err(AliasCommandError::OldItemLeft {
                    name: alias.name.clone(),
                    file: file.to_path_buf(),
                    service: keyring.service.clone(),
                    problem: Box::new(problem),
                });
            }
        }
    }
    for warning in warnings.iter().chain(&notes) {
        report.push_str(&format!("warning: {warning}\n"));
    }
    report.push_str(RELOAD_NOTE);
    write_out(out, report.as_bytes())
}

/// Under the directory lock: stores `value` (a secret moving into the keyring) first, then
/// writes the alias file's new `text`; if the write fails, the item just stored is removed again
/// (or the error says to remove it by hand), so a failure leaves nothing half done.
fn store_and_write(
    file: &Path,
    text: &str,
    alias: &Alias,
    value: Option<&CredentialValue>,
    sources: &CredentialSources,
    keyring: &KeyringConfig,
    commit: &CommitFn,
) -> Result<(), AliasCommandError> {
    if let Some(value) = value {
        sources
            .keyring()
            .write(&alias.name, value)
            .map_err(|problem| AliasCommandError::Store(CredentialError::new(alias, problem)))?;
    }
    let Err(write) = commit(file, text.as_bytes()) else {
        return Ok(());
    };
    if value.is_some()
        && let Err(cleanup) = sources.keyring().delete(&alias.name)
    {
        return Err(AliasCommandError::WriteAndCleanup {
            name: alias.name.clone(),
            service: keyring.service.clone(),
            write: Box::new(write),
            cleanup: Box::new(cleanup),
        });
    }
    Err(AliasCommandError::Write(write))
}

/// The value-shaped placeholder of `alias`, if it declares a shape (the home's key at
/// `placeholder_key` is created if there is none yet).
fn shaped_value_of(
    placeholder_key: &Path,
    alias: &Alias,
) -> Result<Option<String>, AliasCommandError> {
    if alias.placeholder.is_none() {
        return Ok(None);
    }
    let single = AliasFile {
        aliases: vec![alias.clone()],
    };
    let shaped =
        shaped_placeholders(placeholder_key, &single).map_err(AliasCommandError::PlaceholderKey)?;
    Ok(shaped.value(&alias.name).map(str::to_owned))
}

/// The report line that shows a value-shaped placeholder (public, like `{{mint:NAME}}`).
fn shaped_line(value: &str) -> String {
    format!(
        "Its value-shaped placeholder (public, not a secret; `mint run` puts it in its env \
         variables): {value}\n"
    )
}

/// `old` with the parts `args` gives replaced.
fn edited(old: &Alias, args: &AliasEditArgs) -> Result<Alias, AliasCommandError> {
    let mut alias = old.clone();
    let mut changed = false;
    if !args.hosts.is_empty() {
        alias.hosts = host_patterns(&args.hosts)?;
        changed = true;
    }
    if !args.sites.is_empty() || !args.body.is_empty() || !args.form.is_empty() {
        (alias.sites, alias.body, alias.form) = request_sites(&args.sites, &args.body, &args.form)?;
        changed = true;
    }
    if let Some(text) = &args.source {
        alias.source = SecretSource::parse(text).ok_or(AliasCommandError::InvalidSource)?;
        changed = true;
    }
    if let Some(text) = &args.description {
        alias.description = (!text.is_empty()).then(|| text.clone());
        changed = true;
    }
    if !args.env.is_empty() {
        alias.env = env_names(&args.env)?;
        changed = true;
    } else if args.no_env {
        alias.env.clear();
        changed = true;
    }
    if let Some(shape) = &args.placeholder {
        alias.placeholder =
            Some(PlaceholderShape::parse(shape).map_err(AliasCommandError::InvalidPlaceholder)?);
        changed = true;
    } else if args.no_placeholder {
        alias.placeholder = None;
        changed = true;
    }
    if !changed {
        return Err(AliasCommandError::NothingToEdit);
    }
    Ok(alias)
}

/// `mint alias set-secret`: replaces the keyring secret of an alias; the declaration is kept.
pub fn set_secret(
    file: &Path,
    sources: &CredentialSources,
    keyring: &KeyringConfig,
    name: &str,
    input: SecretInput<'_>,
    out: &mut dyn Write,
) -> Result<(), AliasCommandError> {
    let keyring_alias = |aliases: &AliasFile| -> Result<Alias, AliasCommandError> {
        let alias = aliases
            .find(name)
            .ok_or_else(|| AliasCommandError::Unknown {
                name: name.to_owned(),
            })?;
        if alias.source != SecretSource::Keyring {
            return Err(AliasCommandError::NotInKeyring {
                name: alias.name.clone(),
                from: alias.source.clone(),
            });
        }
        Ok(alias.clone())
    };
    if !is_alias_name(name) {
        return Err(AliasCommandError::InvalidName);
    }
    let alias = keyring_alias(&load_file(file)?)?;
    let value = read_keyring_value(sources, &alias, input)?;
    let _lock = DirLock::for_file(file).map_err(AliasCommandError::Insecure)?;
    // Under the lock: the alias may have been removed or moved off the keyring meanwhile.
    keyring_alias(&load_file(file)?)?;
    sources
        .keyring()
        .write(name, &value)
        .map_err(|problem| AliasCommandError::Store(CredentialError::new(&alias, problem)))?;
    tracing::debug!(alias = %name, "Alias secret replaced");
    let report = format!(
        "Replaced the secret of alias `{name}` in the {}, service `{}`, account `{name}`.\n{}",
        sources.keyring().name(),
        keyring.service,
        RELOAD_NOTE
    );
    write_out(out, report.as_bytes())
}

/// What a running broker does with a change made by `edit` or `set-secret`.
const RELOAD_NOTE: &str = "A running broker loads the change when it reloads: at once when \
     aliases.yaml changes, or on SIGHUP (a secret replaced in the keyring alone); until then it \
     keeps the values it loaded.\n";

/// Fails unless the keyring can delete `alias`'s item (present or missing alike), so a command
/// that deletes the item later changes nothing when it could not.
fn ensure_keyring_answers(
    sources: &CredentialSources,
    alias: &Alias,
) -> Result<(), AliasCommandError> {
    sources
        .keyring()
        .check_delete(&alias.name)
        .map_err(|problem| AliasCommandError::Store(CredentialError::new(alias, problem)))
}

/// What `mint alias list` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Aliases listed.
    pub aliases: usize,
    /// Aliases whose secret this process could not read (missing, unavailable or refused).
    pub without_secret: usize,
}

impl Listed {
    /// Whether every listed alias's secret could be read (`mint alias list` exits 1 otherwise).
    pub fn all_present(self) -> bool {
        self.without_secret == 0
    }
}

/// `mint alias list`: every declaration and whether its secret is present, as the broker would
/// load it (for `env:` sources: in this process's environment).
pub fn list(
    file: &Path,
    placeholder_key: &Path,
    sources: &CredentialSources,
    json: bool,
    out: &mut dyn Write,
) -> Result<Listed, AliasCommandError> {
    let aliases = load_file(file)?;
    let shaped = shaped_placeholders(placeholder_key, &aliases)
        .map_err(AliasCommandError::PlaceholderKey)?;
    let rows: Vec<ListRow> = aliases
        .aliases
        .iter()
        .map(|alias| ListRow::new(alias, sources, &shaped))
        .collect();
    let listed = Listed {
        aliases: rows.len(),
        without_secret: rows
            .iter()
            .filter(|r| !matches!(r.secret, SecretStatus::Present))
            .count(),
    };
    if json {
        let text = serde_json::to_string_pretty(&rows)
            .map_err(|e| AliasCommandError::Output(io::Error::other(e.to_string())))?;
        let mut text = json_for_terminal(text);
        text.push('\n');
        return write_out(out, text.as_bytes()).map(|()| listed);
    }
    if rows.is_empty() {
        return write_out(
            out,
            b"No aliases yet; add one with `mint alias add NAME --host HOST`.\n",
        )
        .map(|()| listed);
    }
    let table: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            // Every field printed as the terminal must show it: a description (or a `file:`
            // path) may hold escape sequences that would rewrite the screen or the clipboard.
            [
                r.name.to_owned(),
                r.hosts.join(","),
                sites_shown(r.alias).join(","),
                r.source.clone(),
                r.env.join(","),
                r.placeholder.clone(),
                r.secret.as_str().to_owned(),
                r.description.unwrap_or("").to_owned(),
            ]
            .map(|cell| printable(&cell).into_owned())
        })
        .collect();
    let header = [
        "NAME",
        "HOSTS",
        "SITES",
        "SOURCE",
        "ENV",
        "PLACEHOLDER",
        "SECRET",
        "DESCRIPTION",
    ]
    .map(String::from);
    let mut text = render_table(&header, &table);
    for row in &rows {
        if let Some(problem) = &row.problem {
            text.push_str(&format!("note: {}\n", printable(problem)));
        }
    }
    if rows.iter().any(|r| r.source.starts_with("env:")) {
        text.push_str(
            "note: env: sources were checked in this shell's environment; the broker reads its \
             own\n",
        );
    }
    if !listed.all_present() {
        text.push_str(&format!(
            "error: {} of {} cannot be read here; `mint serve` would refuse to start\n",
            listed.without_secret,
            count_noun(listed.aliases, "alias secret")
        ));
    }
    write_out(out, text.as_bytes()).map(|()| listed)
}

/// `mint alias rm`: removes the declaration, then the keyring item.
pub fn remove(
    file: &Path,
    sources: &CredentialSources,
    keyring: &KeyringConfig,
    name: &str,
    out: &mut dyn Write,
) -> Result<(), AliasCommandError> {
    if !is_alias_name(name) {
        return Err(AliasCommandError::InvalidName);
    }
    // Load once before locking, so a missing file or directory is reported as such.
    load_file(file)?;
    let _lock = DirLock::for_file(file).map_err(AliasCommandError::Insecure)?;
    let mut aliases = load_file(file)?;
    let index = aliases
        .aliases
        .iter()
        .position(|a| a.name == name)
        .ok_or_else(|| AliasCommandError::Unknown {
            name: name.to_owned(),
        })?;
    let alias = aliases.aliases.remove(index);
    let is_keyring = alias.source == SecretSource::Keyring;
    if is_keyring {
        // Make sure the keyring answers before the declaration goes, so an unreachable keyring
        // changes nothing.
        ensure_keyring_answers(sources, &alias)?;
    }
    let text = render_file(&aliases);
    write_atomic(file, text.as_bytes()).map_err(AliasCommandError::Write)?;
    tracing::debug!(alias = %alias.name, "Alias removed");
    let mut report = format!("Removed alias `{name}` from {}.\n", file.display());
    if is_keyring {
        match sources.keyring().delete(name) {
            Ok(()) => report.push_str(&format!(
                "Deleted its secret from the {}.\n",
                sources.keyring().name()
            )),
            Err(StoreError::Missing) => report.push_str("The keyring held no secret for it.\n"),
            Err(problem) => {
                return Err(AliasCommandError::ItemLeft {
                    name: name.to_owned(),
                    file: file.to_path_buf(),
                    service: keyring.service.clone(),
                    problem: Box::new(problem),
                });
            }
        }
    } else {
        report.push_str(&format!(
            "Its secret at `{}` is the operator's and was left as it is.\n",
            alias.source
        ));
    }
    write_out(out, report.as_bytes())
}

/// The declared aliases, after the file's permission check (for `mint cap issue --alias`).
pub fn declared_aliases(path: &Path) -> Result<AliasFile, AliasCommandError> {
    load_file(path)
}

/// The text of an alias file: a header comment, then the declarations.
pub fn render_file(aliases: &AliasFile) -> String {
    format!("{ALIASES_HEADER}{}", aliases.to_yaml())
}

/// The comment at the top of every alias file Mint writes.
pub const ALIASES_HEADER: &str = "\
# Mint alias declarations: each names one credential and where it may go; never a secret value.
# Edit with `mint alias add`, `edit` and `rm` (comments are not kept), or by hand.
";

/// `hosts H; sites S; source X[; env E (set by `mint run`)]`, as `add` and `edit` report it.
fn summary(alias: &Alias) -> String {
    let hosts: Vec<String> = alias.hosts.iter().map(HostPattern::as_text).collect();
    let mut text = format!(
        "hosts {}; sites {}; source {}",
        hosts.join(", "),
        sites_shown(alias).join(", "),
        alias.source
    );
    if !alias.env.is_empty() {
        text.push_str(&format!(
            "; env {} (set by `mint run`)",
            alias.env.join(", ")
        ));
    }
    text
}

/// Builds the declaration from the command line, checking each part with `mint-policy`.
fn declaration(
    name: String,
    hosts: &[String],
    sites: &[SiteArg],
    body: &[String],
    form: &[String],
    source: Option<String>,
    description: Option<String>,
) -> Result<Alias, AliasCommandError> {
    if !is_alias_name(&name) {
        return Err(AliasCommandError::InvalidName);
    }
    let patterns = host_patterns(hosts)?;
    let (sites, pointers, fields) = request_sites(sites, body, form)?;
    let source = match source {
        None => SecretSource::Keyring,
        Some(text) => SecretSource::parse(&text).ok_or(AliasCommandError::InvalidSource)?,
    };
    Ok(Alias {
        name,
        description,
        hosts: patterns,
        sites,
        body: pointers,
        form: fields,
        source,
        env: Vec::new(),
        placeholder: None,
        pos: Pos::START,
    })
}

/// The `--host` patterns, checked and without repeats.
fn host_patterns(hosts: &[String]) -> Result<Vec<HostPattern>, AliasCommandError> {
    parse_each(hosts, HostPattern::parse, |index, problem| {
        AliasCommandError::InvalidHost { index, problem }
    })
}

/// The sites of `--site`, `--body` and `--form`: header alone when none is given; `body` added
/// when a pointer or a form field is.
fn request_sites(
    sites: &[SiteArg],
    body: &[String],
    form: &[String],
) -> Result<(SiteSet, Vec<JsonPointer>, Vec<FormField>), AliasCommandError> {
    let pointers = parse_each(body, JsonPointer::parse, |index, problem| {
        AliasCommandError::InvalidPointer { index, problem }
    })?;
    let fields = parse_each(form, FormField::parse, |index, problem| {
        AliasCommandError::InvalidFormField { index, problem }
    })?;
    let mut set = if sites.is_empty() && pointers.is_empty() && fields.is_empty() {
        SiteSet::HEADER
    } else {
        SiteSet::of(sites.iter().map(|s| match s {
            SiteArg::Header => Site::Header,
            SiteArg::Query => Site::Query,
        }))
    };
    if !pointers.is_empty() || !fields.is_empty() {
        set = set.with(Site::Body);
    }
    Ok((set, pointers, fields))
}

/// Parses each of a repeated flag's values in order, keeping the first of equal ones; the first
/// failure is reported with its place among the values (from 1), never its text.
fn parse_each<T: PartialEq, E>(
    texts: &[String],
    parse: impl Fn(&str) -> Result<T, E>,
    invalid: impl Fn(usize, E) -> AliasCommandError,
) -> Result<Vec<T>, AliasCommandError> {
    let mut parsed: Vec<T> = Vec::with_capacity(texts.len());
    for (i, text) in texts.iter().enumerate() {
        let value = parse(text).map_err(|problem| invalid(i + 1, problem))?;
        if !parsed.contains(&value) {
            parsed.push(value);
        }
    }
    Ok(parsed)
}

/// The `--env` names, each checked against the variable grammar; the loader then checks that
/// none is reserved or declared by another alias (E056, E057).
fn env_names(names: &[String]) -> Result<Vec<String>, AliasCommandError> {
    let mut checked: Vec<String> = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        if !is_env_name(name) {
            return Err(AliasCommandError::InvalidEnv { index: i + 1 });
        }
        if !checked.contains(name) {
            checked.push(name.clone());
        }
    }
    Ok(checked)
}

/// Reads and validates the alias file after checking its permissions.
fn load_file(path: &Path) -> Result<AliasFile, AliasCommandError> {
    match check_config_file(path) {
        Ok(()) => {}
        Err(e) if e.is_not_found() => {
            return Err(AliasCommandError::Unreadable {
                path: path.to_path_buf(),
                problem: ReadError::NotFound,
                hint: "; run `mint init` first",
            });
        }
        Err(e) => return Err(AliasCommandError::Insecure(e)),
    }
    let bytes = read_declaration_file(path, MAX_FILE_BYTES).map_err(|problem| {
        AliasCommandError::Unreadable {
            path: path.to_path_buf(),
            problem,
            hint: "",
        }
    })?;
    let origin = path.display().to_string();
    let load = load_aliases(&bytes, &origin);
    let errors: Vec<&Diagnostic> = load.errors().collect();
    if let (Some(file), None) = (&load.aliases, errors.first()) {
        return Ok(file.clone());
    }
    Err(AliasCommandError::InvalidFile {
        path: path.to_path_buf(),
        count: errors.len().max(1),
        first: errors.first().map_or_else(
            || "the file does not load".to_owned(),
            |d| d.render(&origin),
        ),
    })
}

/// The file's text with `alias` appended, validated as the broker will load it, and the
/// warnings about the new alias.
fn with_alias(
    aliases: &AliasFile,
    file: &Path,
    alias: &Alias,
) -> Result<(String, Vec<String>), AliasCommandError> {
    if aliases.find(&alias.name).is_some() {
        return Err(AliasCommandError::Duplicate {
            name: alias.name.clone(),
            file: file.to_path_buf(),
        });
    }
    let mut next = aliases.clone();
    next.aliases.push(alias.clone());
    validated(&next, file, alias)
}

/// The file text with `alias` in place of the declaration of the same name, and the new
/// declaration's warnings; refused if the alias is gone or the file would not validate.
fn with_replaced(
    aliases: &AliasFile,
    file: &Path,
    alias: &Alias,
) -> Result<(String, Vec<String>), AliasCommandError> {
    let mut next = aliases.clone();
    let slot = next
        .aliases
        .iter_mut()
        .find(|a| a.name == alias.name)
        .ok_or_else(|| AliasCommandError::Unknown {
            name: alias.name.clone(),
        })?;
    *slot = alias.clone();
    validated(&next, file, alias)
}

/// Renders `next` and loads the text back as the broker would: the text, and the warnings about
/// `alias`; an error is refused.
fn validated(
    next: &AliasFile,
    file: &Path,
    alias: &Alias,
) -> Result<(String, Vec<String>), AliasCommandError> {
    let text = render_file(next);
    let load = load_aliases(text.as_bytes(), &file.display().to_string());
    if let Some(error) = load.errors().next() {
        return Err(AliasCommandError::InvalidDeclaration {
            message: format!("{}: {}", error.code, error.message),
        });
    }
    let warnings = load
        .diagnostics
        .iter()
        .filter(|d| d.severity() == Severity::Warning && d.rule_id.as_deref() == Some(&alias.name))
        .map(|d| format!("[{}] {}", d.code, d.message))
        .collect();
    Ok((text, warnings))
}

/// For `env:` and `file:` sources: a missing value is only a warning (the broker's environment
/// or a systemd credential may not exist yet), an unusable one is an error.
fn check_operator_source(
    sources: &CredentialSources,
    alias: &Alias,
) -> Result<Option<String>, AliasCommandError> {
    match sources.read(alias) {
        Ok(_) => Ok(None),
        Err(e) if e.is_missing() => Ok(Some(match &alias.source {
            SecretSource::Env(var) => format!(
                "the environment variable `{var}` is not set here; set it in the broker's \
                 environment"
            ),
            _ => format!(
                "`{}` does not exist yet; create it (mode 0600) before the broker starts",
                alias.source
            ),
        })),
        Err(e) => Err(AliasCommandError::Store(e)),
    }
}

/// The command source `--command` names, with the default timeout, cache and staleness bound,
/// checked as the alias file checks it.
fn command_source(argv: Vec<String>) -> Result<SecretSource, AliasCommandError> {
    let program_ok = argv.first().is_some_and(|p| {
        !p.is_empty()
            && !p.chars().any(char::is_control)
            && (p.starts_with('/') || !p.contains('/'))
            && !p.split('/').any(|s| s == "..")
    });
    let args_ok = argv.len() <= MAX_COMMAND_ARGS
        && argv
            .iter()
            .all(|a| a.len() <= MAX_COMMAND_ARG_BYTES && !a.contains('\0'));
    if !(program_ok && args_ok) {
        return Err(AliasCommandError::InvalidCommand);
    }
    Ok(SecretSource::Command(Box::new(CommandSource {
        argv,
        timeout: DEFAULT_COMMAND_TIMEOUT,
        cache: DEFAULT_COMMAND_CACHE,
        max_stale: DEFAULT_COMMAND_MAX_STALE,
    })))
}

fn read_secret(input: SecretInput<'_>, name: &str) -> Result<CredentialValue, AliasCommandError> {
    let bytes = match input {
        SecretInput::Terminal => {
            let prompt = format!("Secret for alias `{name}` (input hidden): ");
            // Echo comes back on every way out, a Ctrl-C at the prompt included.
            match read_hidden(&prompt, MAX_VALUE_BYTES) {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    return Err(AliasCommandError::Cancelled);
                }
                Err(e) => return Err(AliasCommandError::NoTerminal(e)),
            }
        }
        SecretInput::Stream(reader) => {
            let mut bytes = Zeroizing::new(Vec::with_capacity(MAX_VALUE_BYTES + 4));
            // Room for the whole bounded read up front: a vector that grew would free unwiped
            // copies of the secret.
            reader
                .take(MAX_VALUE_BYTES as u64 + 3)
                .read_to_end(&mut bytes)
                .map_err(AliasCommandError::Stdin)?;
            strip_one_newline(&mut bytes);
            bytes
        }
    };
    CredentialValue::from_bytes(bytes).map_err(|problem| AliasCommandError::Value {
        name: name.to_owned(),
        problem,
    })
}

/// One line of `mint alias list`.
#[derive(Serialize)]
struct ListRow<'a> {
    name: &'a str,
    description: Option<&'a str>,
    hosts: Vec<String>,
    sites: Vec<&'static str>,
    /// The JSON Pointers of the `body` site.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    body: Vec<&'a str>,
    /// The form fields of the `body` site.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    form: Vec<&'a str>,
    source: String,
    env: &'a [String],
    /// The placeholder `mint run` puts in `env`: the shaped value, or `{{mint:NAME}}`.
    placeholder: String,
    /// The declared shape, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    placeholder_shape: Option<String>,
    secret: SecretStatus,
    #[serde(skip)]
    alias: &'a Alias,
    problem: Option<String>,
}

/// Whether a secret could be read, in one word.
#[derive(Clone, Copy, Serialize)]
#[serde(rename_all = "lowercase")]
enum SecretStatus {
    Present,
    Missing,
    Unavailable,
    Refused,
}

impl SecretStatus {
    fn as_str(self) -> &'static str {
        match self {
            SecretStatus::Present => "present",
            SecretStatus::Missing => "missing",
            SecretStatus::Unavailable => "unavailable",
            SecretStatus::Refused => "refused",
        }
    }
}

impl<'a> ListRow<'a> {
    fn new(
        alias: &'a Alias,
        sources: &CredentialSources,
        shaped: &ShapedPlaceholders,
    ) -> ListRow<'a> {
        let (secret, problem) = match sources.read(alias) {
            Ok(_) => (SecretStatus::Present, None),
            Err(e) => {
                let status = match e.problem {
                    StoreError::Missing => SecretStatus::Missing,
                    StoreError::Unavailable { .. } => SecretStatus::Unavailable,
                    _ => SecretStatus::Refused,
                };
                (status, Some(e.to_string()))
            }
        };
        ListRow {
            name: &alias.name,
            description: alias.description.as_deref(),
            hosts: alias.hosts.iter().map(HostPattern::as_text).collect(),
            sites: alias.sites.iter().map(Site::as_str).collect(),
            body: alias.body.iter().map(JsonPointer::as_str).collect(),
            form: alias.form.iter().map(FormField::as_str).collect(),
            source: alias.source.to_string(),
            env: &alias.env,
            placeholder: shaped
                .value(&alias.name)
                .map_or_else(|| format!("{{{{mint:{}}}}}", alias.name), str::to_owned),
            placeholder_shape: alias.placeholder.as_ref().map(PlaceholderShape::as_text),
            secret,
            problem,
            alias,
        }
    }
}

/// The sites of an alias as a person reads them: `header`, `query`, `body /a /b`,
/// `form client_secret`.
fn sites_shown(alias: &Alias) -> Vec<String> {
    alias
        .sites
        .iter()
        .flat_map(|site| match site {
            Site::Body => {
                let mut shown = Vec::new();
                if !alias.body.is_empty() {
                    let pointers: Vec<&str> = alias.body.iter().map(JsonPointer::as_str).collect();
                    shown.push(format!("body {}", pointers.join(" ")));
                }
                if !alias.form.is_empty() {
                    let fields: Vec<&str> = alias.form.iter().map(FormField::as_str).collect();
                    shown.push(format!("form {}", fields.join(" ")));
                }
                shown
            }
            other => vec![other.as_str().to_owned()],
        })
        .collect()
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
fn render_table<const N: usize>(header: &[String; N], rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in std::iter::once(header).chain(rows) {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    for row in std::iter::once(header).chain(rows) {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                crate::cli::terminal::push_padded(&mut line, cell, width);
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

fn write_out(out: &mut dyn Write, bytes: &[u8]) -> Result<(), AliasCommandError> {
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(AliasCommandError::Output)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::secrets::credential_store::{CredentialStore, EnvStore, FileStore, MemoryStore};

    fn sources() -> (Arc<MemoryStore>, CredentialSources) {
        let keyring = Arc::new(MemoryStore::new());
        let sources = CredentialSources::new(
            keyring.clone(),
            Arc::new(EnvStore::from_vars([("NPM_TOKEN", "npm-value")])),
            Arc::new(FileStore::new()),
        );
        (keyring, sources)
    }

    fn args(name: &str, hosts: &[&str]) -> AliasAddArgs {
        AliasAddArgs {
            name: name.to_owned(),
            hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            sites: Vec::new(),
            body: Vec::new(),
            form: Vec::new(),
            source: None,
            command: Vec::new(),
            description: None,
            env: Vec::new(),
            placeholder: None,
            secret_stdin: true,
        }
    }

    fn home() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("aliases.yaml");
        write_atomic(&file, render_file(&AliasFile::default()).as_bytes()).unwrap();
        (dir, file)
    }

    #[test]
    fn add_list_rm_round_trip() {
        let (_dir, file) = home();
        let (keyring, sources) = sources();
        let config = KeyringConfig::default();
        let mut out = Vec::new();
        let mut stdin: &[u8] = b"s3cret-value\n";
        add(
            &file,
            &file.with_file_name("placeholder.key"),
            &sources,
            &config,
            args(
                "github",
                &["api.github.com", "uploads.github.com", "api.github.com"],
            ),
            SecretInput::Stream(&mut stdin),
            &mut out,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("Added alias `github`"), "{text}");
        assert!(keyring.read("github").is_ok());
        let loaded = load_file(&file).unwrap();
        assert_eq!(loaded.aliases.len(), 1);
        assert_eq!(
            loaded.aliases[0].hosts.len(),
            2,
            "duplicate hosts are merged"
        );

        let mut out = Vec::new();
        list(
            &file,
            &file.with_file_name("placeholder.key"),
            &sources,
            false,
            &mut out,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("NAME"), "{text}");
        assert!(text.contains("present"), "{text}");
        assert!(!text.contains("s3cret"), "{text}");

        let mut out = Vec::new();
        remove(&file, &sources, &config, "github", &mut out).unwrap();
        assert!(matches!(keyring.read("github"), Err(StoreError::Missing)));
        assert!(load_file(&file).unwrap().aliases.is_empty());
    }

    #[test]
    fn placeholder_shapes_are_declared_derived_and_listed() {
        let (_dir, file) = home();
        let key = file.with_file_name("placeholder.key");
        let (_keyring, sources) = sources();
        let mut shaped = args("openai", &["api.openai.com"]);
        shaped.placeholder = Some("sk-:48".to_owned());
        shaped.env = vec!["OPENAI_API_KEY".to_owned()];
        let mut stdin: &[u8] = b"sk-real-CANARY\n";
        let mut out = Vec::new();
        add(
            &file,
            &key,
            &sources,
            &KeyringConfig::default(),
            shaped,
            SecretInput::Stream(&mut stdin),
            &mut out,
        )
        .unwrap();
        let added = String::from_utf8(out).unwrap();
        assert!(!added.contains("CANARY"), "{added}");
        let loaded = load_file(&file).unwrap();
        assert_eq!(
            loaded.aliases[0].placeholder,
            Some(PlaceholderShape::parse("sk-:48").unwrap())
        );
        let mut out = Vec::new();
        list(&file, &key, &sources, true, &mut out).unwrap();
        let rows: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let value = rows[0]["placeholder"].as_str().unwrap();
        assert_eq!(value.len(), 48);
        assert!(value.starts_with("sk-"));
        assert!(added.contains(value), "add reports the same value: {added}");
        assert_eq!(rows[0]["placeholder_shape"], "sk-:48:base62");
        assert!(!String::from_utf8_lossy(&out).contains("CANARY"));

        let mut weak = args("weak", &["api.openai.com"]);
        weak.placeholder = Some("sk-:20".to_owned());
        let err = add(
            &file,
            &key,
            &sources,
            &KeyringConfig::default(),
            weak,
            SecretInput::Stream(&mut &b"x"[..]),
            &mut Vec::new(),
        )
        .unwrap_err();
        assert!(
            matches!(err, AliasCommandError::InvalidPlaceholder(_)),
            "{err}"
        );
    }

    #[test]
    fn rejected_secrets_change_nothing() {
        let (_dir, file) = home();
        let before = std::fs::read(&file).unwrap();
        let (keyring, sources) = sources();
        for input in [&b""[..], b"\n", b"two\nlines", b"nul\0byte", b"\xff\xfe"] {
            let mut stdin = input;
            let err = add(
                &file,
                &file.with_file_name("placeholder.key"),
                &sources,
                &KeyringConfig::default(),
                args("github", &["api.github.com"]),
                SecretInput::Stream(&mut stdin),
                &mut Vec::new(),
            )
            .unwrap_err();
            assert!(matches!(err, AliasCommandError::Value { .. }), "{err}");
            assert!(
                err.to_string()
                    .starts_with("the secret for alias `github` is refused")
            );
        }
        assert_eq!(std::fs::read(&file).unwrap(), before);
        assert!(matches!(keyring.read("github"), Err(StoreError::Missing)));
    }

    #[test]
    fn failed_file_write_removes_the_keyring_item() {
        let (_dir, file) = home();
        let before = std::fs::read(&file).unwrap();
        let (keyring, sources) = sources();
        let full_disk = |path: &Path, _: &[u8]| {
            Err(SecureFileError::Io {
                action: "write",
                path: path.to_path_buf(),
                source: io::Error::from_raw_os_error(28),
            })
        };
        let mut stdin: &[u8] = b"value";
        let err = add_with(
            &file,
            &file.with_file_name("placeholder.key"),
            &sources,
            &KeyringConfig::default(),
            args("github", &["api.github.com"]),
            SecretInput::Stream(&mut stdin),
            &mut Vec::new(),
            &full_disk,
        )
        .unwrap_err();
        assert!(matches!(err, AliasCommandError::Write(_)), "{err}");
        assert!(err.to_string().ends_with("; nothing was changed"), "{err}");
        assert!(matches!(keyring.read("github"), Err(StoreError::Missing)));
        assert_eq!(std::fs::read(&file).unwrap(), before);
    }

    #[test]
    fn declaration_errors_never_echo_the_argument() {
        let canary = "GHP_Canary123";
        let err = declaration(
            canary.into(),
            &["api.github.com".into()],
            &[],
            &[],
            &[],
            None,
            None,
        )
        .unwrap_err();
        assert!(!err.to_string().contains(canary));
        let err = declaration(
            "gh".into(),
            &[format!("{canary}:443")],
            &[],
            &[],
            &[],
            None,
            None,
        )
        .unwrap_err();
        assert!(
            matches!(err, AliasCommandError::InvalidHost { index: 1, .. }),
            "{err}"
        );
        assert!(!err.to_string().contains(canary), "{err}");
        let err = declaration(
            "gh".into(),
            &["api.github.com".into()],
            &[],
            &[],
            &[],
            Some(canary.into()),
            None,
        )
        .unwrap_err();
        assert!(!err.to_string().contains(canary), "{err}");
        let err = declaration(
            "gh".into(),
            &["api.github.com".into()],
            &[],
            &[format!("{canary}/x")],
            &[],
            None,
            None,
        )
        .unwrap_err();
        assert!(
            matches!(err, AliasCommandError::InvalidPointer { index: 1, .. }),
            "{err}"
        );
        assert!(!err.to_string().contains(canary), "{err}");
        let err = declaration(
            "gh".into(),
            &["api.github.com".into()],
            &[],
            &[],
            &[format!("{canary}\n")],
            None,
            None,
        )
        .unwrap_err();
        assert!(
            matches!(err, AliasCommandError::InvalidFormField { index: 1, .. }),
            "{err}"
        );
        assert!(!err.to_string().contains(canary), "{err}");
        let err = declaration(
            "gh".into(),
            &["API.github.com".into()],
            &[],
            &[],
            &[],
            None,
            None,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid --host #1: host is not in canonical form; write it lowercase, in punycode, \
             without a trailing dot, and an IP address in its plain form"
        );
    }

    #[test]
    fn table_is_aligned() {
        let header = ["A", "BB"].map(String::from);
        let rows = [["long", "x"].map(String::from), ["s", ""].map(String::from)];
        assert_eq!(render_table(&header, &rows), "A     BB\nlong  x\ns\n");
    }
}
