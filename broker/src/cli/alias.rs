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
use mint_policy::host::{HostPattern, HostPatternError};
use mint_policy::policy::is_alias_name;
use mint_policy::site::{Site, SiteSet};
use mint_policy::{Diagnostic, MAX_FILE_BYTES, Pos, Severity};
use serde::Serialize;
use zeroize::Zeroizing;

use crate::cli::terminal::{json_for_terminal, printable, read_hidden};
use crate::config::declaration_file::{ReadError, read_declaration_file};
use crate::config::env::Paths;
use crate::config::secure_file::{DirLock, SecureFileError, check_config_file, write_atomic};
use crate::secrets::credential_store::file_store::strip_one_newline;
use crate::secrets::credential_store::{
    CredentialError, CredentialSources, CredentialValue, KeyringConfig, KeyringConfigError,
    MAX_VALUE_BYTES, StoreError, ValueProblem, VaultStore, check_value_for,
};

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
    List(AliasListArgs),
    /// Remove an alias's declaration and its keyring item.
    Rm(AliasRmArgs),
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
    /// `secret`, `problem`).
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `mint alias rm`.
#[derive(Debug, Args)]
pub struct AliasRmArgs {
    /// The alias to remove.
    pub name: String,
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
    /// An alias with this name is declared already.
    #[error(
        "alias `{name}` already exists in `{}`; remove it first with `mint alias rm {name}`",
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
    #[error("alias file `{}` has {count} error{}; the first: {first}", path.display(), plural(*count))]
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
) -> Result<(), AliasCommandError> {
    let keyring = KeyringConfig::from_env()?;
    // A `vault:` alias is read once when it is added; settings that do not load leave Vault
    // out, and the alias's check then says so.
    let sources =
        CredentialSources::system(&keyring).with_vault(VaultStore::from_env().ok().flatten());
    match command {
        AliasCommand::Add(args) => {
            // A terminal on stdin would echo the secret: read it through the hidden prompt then.
            let input = if args.secret_stdin && !io::stdin().is_terminal() {
                SecretInput::Stream(stdin)
            } else {
                SecretInput::Terminal
            };
            add(&paths.aliases, &sources, &keyring, args, input, out)
        }
        AliasCommand::List(args) => list(&paths.aliases, &sources, args.json, out),
        AliasCommand::Rm(args) => remove(&paths.aliases, &sources, &keyring, &args.name, out),
    }
}

/// `mint alias add`: validates, reads and stores the secret (keyring source), then writes the
/// alias file atomically.
pub fn add(
    file: &Path,
    sources: &CredentialSources,
    keyring: &KeyringConfig,
    args: AliasAddArgs,
    input: SecretInput<'_>,
    out: &mut dyn Write,
) -> Result<(), AliasCommandError> {
    add_with(file, sources, keyring, args, input, out, &write_atomic)
}

/// Writes the alias file's new text (`write_atomic`, or a failing stand-in in tests).
type CommitFn = dyn Fn(&Path, &[u8]) -> Result<(), SecureFileError>;

/// [`add`] with the final file write given, so tests can make it fail.
fn add_with(
    file: &Path,
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
    if !args.command.is_empty() {
        alias.source = command_source(args.command)?;
    }
    let is_keyring = alias.source == SecretSource::Keyring;
    if args.secret_stdin && !is_keyring {
        return Err(AliasCommandError::StdinWithoutKeyring);
    }
    // Check everything that can be checked before asking for the secret.
    let (_, warnings) = with_alias(&load_file(file)?, file, &alias)?;

    let mut notes = Vec::new();
    let value = if is_keyring {
        // Find out that the keyring is unreachable before the operator types a secret.
        sources
            .keyring()
            .probe()
            .map_err(|problem| AliasCommandError::Store(CredentialError::new(&alias, problem)))?;
        let value = read_secret(input, &alias.name)?;
        check_value_for(&alias, &value).map_err(|e| AliasCommandError::Value {
            name: alias.name.clone(),
            problem: match e.problem {
                StoreError::Value(problem) => problem,
                _ => ValueProblem::ControlCharacter,
            },
        })?;
        Some(value)
    } else {
        notes.extend(check_operator_source(sources, &alias)?);
        None
    };

    let _lock = DirLock::for_file(file).map_err(AliasCommandError::Insecure)?;
    // Re-read under the lock: another command may have changed the file meanwhile.
    let (text, _) = with_alias(&load_file(file)?, file, &alias)?;
    if let Some(value) = &value {
        sources
            .keyring()
            .write(&alias.name, value)
            .map_err(|problem| AliasCommandError::Store(CredentialError::new(&alias, problem)))?;
    }
    if let Err(write) = commit(file, text.as_bytes()) {
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
        return Err(AliasCommandError::Write(write));
    }
    tracing::debug!(alias = %alias.name, alias.source = %alias.source, "Alias added");

    let hosts: Vec<String> = alias.hosts.iter().map(HostPattern::as_text).collect();
    let sites = sites_shown(&alias);
    let mut report = format!(
        "Added alias `{}` to {}: hosts {}; sites {}; source {}{}.\n",
        alias.name,
        file.display(),
        hosts.join(", "),
        sites.join(", "),
        alias.source,
        if alias.env.is_empty() {
            String::new()
        } else {
            format!("; env {} (set by `mint run`)", alias.env.join(", "))
        }
    );
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

/// `mint alias list`: every declaration and whether its secret is present, as the broker would
/// load it (for `env:` sources: in this process's environment).
pub fn list(
    file: &Path,
    sources: &CredentialSources,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), AliasCommandError> {
    let aliases = load_file(file)?;
    let rows: Vec<ListRow> = aliases
        .aliases
        .iter()
        .map(|alias| ListRow::new(alias, sources))
        .collect();
    if json {
        let text = serde_json::to_string_pretty(&rows)
            .map_err(|e| AliasCommandError::Output(io::Error::other(e.to_string())))?;
        let mut text = json_for_terminal(text);
        text.push('\n');
        return write_out(out, text.as_bytes());
    }
    if rows.is_empty() {
        return write_out(
            out,
            b"No aliases yet; add one with `mint alias add NAME --host HOST`.\n",
        );
    }
    let table: Vec<[String; 7]> = rows
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
    write_out(out, text.as_bytes())
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
        match sources.keyring().read(name) {
            Ok(_) | Err(StoreError::Missing | StoreError::Value(_)) => {}
            Err(problem) => {
                return Err(AliasCommandError::Store(CredentialError::new(
                    &alias, problem,
                )));
            }
        }
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
# Edit with `mint alias add` and `mint alias rm` (comments are not kept), or by hand.
";

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
    let mut patterns = Vec::with_capacity(hosts.len());
    for (i, host) in hosts.iter().enumerate() {
        let pattern =
            HostPattern::parse(host).map_err(|problem| AliasCommandError::InvalidHost {
                index: i + 1,
                problem,
            })?;
        if !patterns.contains(&pattern) {
            patterns.push(pattern);
        }
    }
    let mut pointers = Vec::with_capacity(body.len());
    for (i, text) in body.iter().enumerate() {
        let pointer =
            JsonPointer::parse(text).map_err(|problem| AliasCommandError::InvalidPointer {
                index: i + 1,
                problem,
            })?;
        if !pointers.contains(&pointer) {
            pointers.push(pointer);
        }
    }
    let mut fields = Vec::with_capacity(form.len());
    for (i, text) in form.iter().enumerate() {
        let field =
            FormField::parse(text).map_err(|problem| AliasCommandError::InvalidFormField {
                index: i + 1,
                problem,
            })?;
        if !fields.contains(&field) {
            fields.push(field);
        }
    }
    let mut sites = if sites.is_empty() && pointers.is_empty() && fields.is_empty() {
        SiteSet::HEADER
    } else {
        SiteSet::of(sites.iter().map(|s| match s {
            SiteArg::Header => Site::Header,
            SiteArg::Query => Site::Query,
        }))
    };
    if !pointers.is_empty() || !fields.is_empty() {
        sites = sites.with(Site::Body);
    }
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
        pos: Pos::START,
    })
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
    let text = render_file(&next);
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
    fn new(alias: &'a Alias, sources: &CredentialSources) -> ListRow<'a> {
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

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
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
        list(&file, &sources, false, &mut out).unwrap();
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
    fn rejected_secrets_change_nothing() {
        let (_dir, file) = home();
        let before = std::fs::read(&file).unwrap();
        let (keyring, sources) = sources();
        for input in [&b""[..], b"\n", b"two\nlines", b"nul\0byte", b"\xff\xfe"] {
            let mut stdin = input;
            let err = add(
                &file,
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
