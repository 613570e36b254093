//! `mint cap issue|list|revoke`: gives agents capabilities, shows them, takes them back.
//!
//! `issue` prints the token once, alone on stdout (so `CAP=$(mint cap issue ...)` works), with
//! what was issued on stderr; only the token's SHA-256 reaches `capabilities.yaml`. `list` never
//! shows a token or a hash. Changes run under the lock file `.capabilities.yaml.lock` beside the
//! file (in a directory only Mint's user may write; waiting for it is bounded) and are written
//! atomically (0600); a running broker picks them up within a second. A revocation that could not
//! be written says that the capability is still accepted.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use clap::{Args, Subcommand};
use mint_policy::audit::AgentName;
use mint_policy::duration::{DURATION_HINT, parse_duration};
use mint_policy::policy::is_alias_name;
use secrecy::ExposeSecret;
use serde::Serialize;

use crate::capability::{
    Capability, CapabilityFile, CapabilityFileError, CapabilityStatus, IssueRequest, IssuedToken,
    TOKEN_PREFIX, format_time,
};
use crate::cli::alias::AliasCommandError;
use crate::config::env::Paths;
use crate::config::secure_file::{DirLock, SecureFileError};

/// `mint cap ...`.
#[derive(Debug, Subcommand)]
pub enum CapCommand {
    /// Issue a capability for an agent and print its token once.
    ///
    /// The token goes alone to stdout; the capability's id and expiry go to stderr. Mint keeps
    /// only the token's SHA-256.
    Issue(CapIssueArgs),
    /// List capabilities: id, agent, created, expires, aliases, status (never a token).
    List(CapListArgs),
    /// Revoke a capability; a running broker refuses it within a second.
    Revoke(CapRevokeArgs),
}

/// Arguments of `mint cap issue`.
#[derive(Debug, Args)]
pub struct CapIssueArgs {
    /// The agent's name (the principal policy rules match): 1-64 characters of A-Z, a-z, 0-9,
    /// `.`, `_` and `-`.
    #[arg(long, value_name = "NAME")]
    pub agent: String,
    /// How long the capability lives: a whole number with s, m, h or d, at most 366d.
    #[arg(long, value_name = "TTL", default_value = "24h")]
    pub ttl: String,
    /// Limit the capability to this alias. Repeat for more; without it, every alias the policy
    /// allows.
    #[arg(long = "alias", value_name = "ALIAS")]
    pub aliases: Vec<String>,
}

/// Arguments of `mint cap list`.
#[derive(Debug, Args)]
pub struct CapListArgs {
    /// Print a JSON array of objects (`id`, `agent`, `created`, `expires`, `aliases`, `revoked`,
    /// `status`), every capability of the file, expired and revoked ones included.
    #[arg(long)]
    pub json: bool,

    /// Show expired and revoked capabilities too (the table shows only active ones by default).
    #[arg(long)]
    pub all: bool,
}

/// Arguments of `mint cap revoke`.
#[derive(Debug, Args)]
pub struct CapRevokeArgs {
    /// The capability's id, as shown by `mint cap issue` and `mint cap list`.
    pub id: String,
}

/// Why a capability command failed; nothing was changed. Never holds a token, and never repeats
/// an argument that failed its grammar.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CapCommandError {
    /// `--agent` is outside the agent grammar.
    #[error("invalid agent name: use 1-64 characters of A-Z, a-z, 0-9, `.`, `_` and `-`")]
    InvalidAgent,
    /// `--ttl` does not parse.
    #[error("invalid TTL `{ttl}`: write {DURATION_HINT}, in whole seconds")]
    InvalidTtl {
        /// The TTL as given (a duration is never secret, but is shown only when short).
        ttl: String,
    },
    /// An `--alias` is outside the alias grammar.
    #[error("invalid --alias: alias names are 1-64 characters of a-z, 0-9, `_` and `-`")]
    InvalidAlias,
    /// An `--alias` names no declared alias.
    #[error("unknown alias `{name}` in --alias; `mint alias list` shows the declared aliases")]
    UnknownAlias {
        /// The alias.
        name: String,
    },
    /// The argument of `revoke` is a token, not an id.
    #[error(
        "give the capability id (12 hex digits, see `mint cap list`), not the token; if the token \
         was exposed, revoke its capability by id"
    )]
    TokenGiven,
    /// The argument of `revoke` is not an id.
    #[error("invalid capability id: ids are 12 lowercase hex digits, as `mint cap list` shows")]
    InvalidId,
    /// The alias file (read for `--alias`) is unusable.
    #[error(transparent)]
    Aliases(AliasCommandError),
    /// The capabilities file is unusable or cannot be written.
    #[error(transparent)]
    File(#[from] CapabilityFileError),
    /// The capabilities file does not exist.
    #[error("cannot read capabilities file `{}`: no such file or directory; run `mint init` first", path.display())]
    NoFile {
        /// The file.
        path: PathBuf,
    },
    /// `mint cap revoke` could not write the revocation: the capability still works.
    #[error("capability `{id}` was NOT revoked and is still accepted: {problem}")]
    NotRevoked {
        /// The capability's id.
        id: String,
        /// Why.
        problem: Box<CapCommandError>,
    },
    /// The result could not be written to the output.
    #[error("cannot write the output")]
    Output(#[source] io::Error),
}

/// Runs a capability command at `now`. `out` gets the result (the token, the list); `notes` gets
/// what `issue` and `revoke` did, for a person.
pub fn run(
    command: CapCommand,
    paths: &Paths,
    now: SystemTime,
    out: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<(), CapCommandError> {
    match command {
        CapCommand::Issue(args) => issue(paths, args, now, out, notes),
        CapCommand::List(args) => list(&paths.capabilities, &args, now, out),
        CapCommand::Revoke(args) => revoke(&paths.capabilities, &args.id, out),
    }
}

/// `mint cap issue`.
pub fn issue(
    paths: &Paths,
    args: CapIssueArgs,
    now: SystemTime,
    out: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<(), CapCommandError> {
    let issued = issue_capability(paths, args, now)?;
    let mut line = zeroize::Zeroizing::new(String::with_capacity(128));
    // EXPOSE: the token is printed exactly once, here; it is never stored or logged.
    line.push_str(issued.token.as_secret().expose_secret());
    line.push('\n');
    out.write_all(line.as_bytes())
        .and_then(|()| out.flush())
        .map_err(CapCommandError::Output)?;
    let Issued {
        id,
        agent,
        expires,
        aliases,
        ..
    } = issued;
    let note = format!(
        "Issued capability {id} for agent `{agent}`, expires {expires}, aliases: {aliases}.\n\
         The token above is shown once; Mint keeps only its SHA-256. Send it as the \
         `Mint-Capability` header. Revoke it with `mint cap revoke {id}`.\n"
    );
    // The token is out; a failure to print the note must not hide that.
    let _ = notes
        .write_all(note.as_bytes())
        .and_then(|()| notes.flush());
    Ok(())
}

/// A capability just issued: its token (never printed by this type) and what was issued.
#[derive(Debug)]
pub struct Issued {
    /// The token, to hand over once.
    pub token: IssuedToken,
    /// The capability's id (public: `mint cap revoke ID`).
    pub id: String,
    /// The agent.
    pub agent: String,
    /// When it expires (RFC 3339).
    pub expires: String,
    /// Its alias narrowing, `*` for none.
    pub aliases: String,
}

/// Checks the arguments of `mint cap issue`, then issues the capability and saves the file
/// (under its lock). Shared by `mint cap issue`, `mint run` and `mint env`.
pub fn issue_capability(
    paths: &Paths,
    args: CapIssueArgs,
    now: SystemTime,
) -> Result<Issued, CapCommandError> {
    let agent = AgentName::new(args.agent).map_err(|_| CapCommandError::InvalidAgent)?;
    // Expiry times are kept to the second.
    let ttl = parse_duration(&args.ttl)
        .filter(|ttl| ttl.subsec_nanos() == 0)
        .ok_or_else(|| CapCommandError::InvalidTtl {
            ttl: args.ttl.chars().take(32).collect(),
        })?;
    if args.aliases.iter().any(|a| !is_alias_name(a)) {
        return Err(CapCommandError::InvalidAlias);
    }
    if !args.aliases.is_empty() {
        let declared = crate::cli::alias::declared_aliases(&paths.aliases)
            .map_err(CapCommandError::Aliases)?;
        if let Some(unknown) = args.aliases.iter().find(|a| declared.find(a).is_none()) {
            return Err(CapCommandError::UnknownAlias {
                name: unknown.clone(),
            });
        }
    }
    let path = paths.capabilities.as_path();
    // Load once before locking, so a missing file or directory is reported as such.
    load(path)?;
    let _lock = DirLock::for_file(path).map_err(CapabilityFileError::from)?;
    let mut file = load(path)?;
    let request = IssueRequest {
        agent,
        ttl,
        aliases: args.aliases,
    };
    let (token, capability) = file.issue(request, now)?;
    let (id, agent, expires, aliases) = summary(capability);
    file.save(path)?;
    tracing::debug!(capability = %id, agent = %agent, "Capability issued");
    Ok(Issued {
        token,
        id,
        agent,
        expires,
        aliases,
    })
}

/// `mint cap list`.
///
/// The table shows active capabilities only, unless `--all`, and says how many it leaves out;
/// `--json` is the whole file, each entry with its `status`, for scripts to filter.
pub fn list(
    path: &Path,
    args: &CapListArgs,
    now: SystemTime,
    out: &mut dyn Write,
) -> Result<(), CapCommandError> {
    let file = load(path)?;
    let all = file.capabilities();
    let shown: Vec<&Capability> = all
        .iter()
        .filter(|c| args.all || c.status(now) == CapabilityStatus::Active)
        .collect();
    let hidden = all.len() - shown.len();
    let noun = if hidden == 1 {
        "capability"
    } else {
        "capabilities"
    };
    let hidden_note = format!(
        "{hidden} expired or revoked {noun} not shown; `mint cap list --all` shows them.\n"
    );
    let text = if args.json {
        let rows: Vec<JsonRow<'_>> = all.iter().map(|c| JsonRow::new(c, now)).collect();
        let mut text = serde_json::to_string_pretty(&rows)
            .map_err(|e| CapCommandError::Output(io::Error::other(e.to_string())))?;
        text.push('\n');
        text
    } else if all.is_empty() {
        "No capabilities yet; issue one with `mint cap issue --agent NAME`.\n".to_owned()
    } else if shown.is_empty() {
        format!("No active capabilities. {hidden_note}")
    } else {
        let mut rows =
            vec![["ID", "AGENT", "CREATED", "EXPIRES", "ALIASES", "STATUS"].map(String::from)];
        for c in shown {
            rows.push([
                c.id.as_str().to_owned(),
                c.agent.as_str().to_owned(),
                format_time(c.created),
                format_time(c.expires),
                aliases_text(c),
                c.status(now).as_str().to_owned(),
            ]);
        }
        let mut text = table(&rows);
        if hidden > 0 {
            text.push_str(&hidden_note);
        }
        text
    };
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(CapCommandError::Output)
}

/// `mint cap revoke`.
pub fn revoke(path: &Path, id: &str, out: &mut dyn Write) -> Result<(), CapCommandError> {
    if id.starts_with(TOKEN_PREFIX) {
        return Err(CapCommandError::TokenGiven);
    }
    if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(CapCommandError::InvalidId);
    }
    let not_revoked = |error: CapCommandError| match error {
        // Nothing to revoke: the error says so already.
        CapCommandError::File(CapabilityFileError::UnknownId { .. })
        | CapCommandError::NoFile { .. } => error,
        problem => CapCommandError::NotRevoked {
            id: id.to_owned(),
            problem: Box::new(problem),
        },
    };
    let revoked = revoke_capability(path, id).map_err(not_revoked)?;
    let text = if revoked {
        tracing::debug!(capability = %id, "Capability revoked");
        format!(
            "Revoked capability {id}: written to {}; a running broker reading that file refuses \
             it within a second.\n",
            path.display()
        )
    } else {
        format!("Capability {id} was already revoked.\n")
    };
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(CapCommandError::Output)
}

/// Revokes capability `id` in the file at `path` (under its lock). Returns whether it was live
/// until now. Shared by `mint cap revoke` and `mint run`.
pub fn revoke_capability(path: &Path, id: &str) -> Result<bool, CapCommandError> {
    load(path)?;
    let _lock = DirLock::for_file(path).map_err(CapabilityFileError::from)?;
    let mut file = load(path)?;
    let was_live = file.revoke(id)?;
    if was_live {
        file.save(path)?;
    }
    Ok(was_live)
}

fn load(path: &Path) -> Result<CapabilityFile, CapCommandError> {
    match CapabilityFile::load(path) {
        Err(CapabilityFileError::File(e)) if e.is_not_found() => Err(CapCommandError::NoFile {
            path: path.to_path_buf(),
        }),
        other => Ok(other?),
    }
}

fn summary(c: &Capability) -> (String, String, String, String) {
    (
        c.id.as_str().to_owned(),
        c.agent.as_str().to_owned(),
        format_time(c.expires),
        aliases_text(c),
    )
}

fn aliases_text(c: &Capability) -> String {
    if c.aliases.is_empty() {
        "*".to_owned()
    } else {
        c.aliases.join(",")
    }
}

fn table(rows: &[[String; 6]]) -> String {
    let mut widths = [0usize; 6];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut text = String::new();
    for row in rows {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(widths) {
            line.push_str(&format!("{cell:<width$}  "));
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// One element of `mint cap list --json`.
#[derive(Serialize)]
struct JsonRow<'a> {
    id: &'a str,
    agent: &'a str,
    created: String,
    expires: String,
    /// The aliases the capability may use; `["*"]` for every alias, as the table's `*`.
    aliases: Vec<&'a str>,
    revoked: bool,
    /// `active`, `expired` or `revoked`, as the table's STATUS column.
    status: &'static str,
}

impl<'a> JsonRow<'a> {
    fn new(c: &'a Capability, now: SystemTime) -> Self {
        JsonRow {
            id: c.id.as_str(),
            agent: c.agent.as_str(),
            created: format_time(c.created),
            expires: format_time(c.expires),
            aliases: if c.aliases.is_empty() {
                vec!["*"]
            } else {
                c.aliases.iter().map(String::as_str).collect()
            },
            revoked: c.revoked,
            status: c.status(now).as_str(),
        }
    }
}

impl From<SecureFileError> for CapCommandError {
    fn from(error: SecureFileError) -> Self {
        CapCommandError::File(CapabilityFileError::File(error))
    }
}
