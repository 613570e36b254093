//! The `mint` command line: argument types and dispatch to the command modules.
//!
//! `main.rs` parses a [`Cli`], resolves [`Paths`] from the environment and calls [`run`]; the
//! exit status is decided here and in [`CommandError::exit_status`], in one place. Commands write
//! their results to the `out` they are given (stdout in production) and never print errors
//! themselves: they return them.
//!
//! Only implemented commands are declared; every command DESIGN.md lists, `policy explain`
//! included, is a variant of [`Command`] or [`PolicyCommand`].

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::alias_cmd::{AliasCommand, AliasCommandError};
use crate::audit::AuditConfig;
use crate::audit_cmd::{AuditCommand, AuditCommandError};
use crate::cap_cmd::{CapCommand, CapCommandError};
use crate::demo::{DemoError, DemoOptions};
use crate::env::Paths;
use crate::init::InitError;
use crate::policy_check::{PolicyCheckError, ReportFormat, Verdict, check_policy_file};
use crate::proxy::ProxyLimits;
use crate::serve::{ServeConfig, ServeError, load_state, serve_blocking};

/// Mint keeps an AI agent's credentials out of the agent's reach and lets them out only toward
/// the destinations its policy allows.
#[derive(Debug, Parser)]
#[command(name = "mint", version, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the credential broker: the authenticated proxy on loopback, until Ctrl-C or SIGTERM.
    ///
    /// Loads the policy, the aliases and every alias secret, the capabilities and the audit log;
    /// exits 2 if any of them is wrong. Prints `listening on http://ADDR` once serving.
    Serve(ServeArgs),
    /// Show Mint at work in one command: a temporary home, a local HTTPS echo upstream, the real
    /// broker, and an agent's allowed, denied, redirected and MCP requests with the audit trail.
    Demo(DemoArgs),
    /// Work with the policy file.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Create MINT_HOME (0700) with a default-deny policy, an empty alias file and an empty
    /// capabilities file; never overwrites a file.
    Init,
    /// Declare aliases and store their secrets.
    #[command(subcommand)]
    Alias(AliasCommand),
    /// Issue, list and revoke agent capabilities.
    #[command(subcommand)]
    Cap(CapCommand),
    /// Read, verify and rotate the audit log.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Explain how an agent uses Mint: the proxy route, the capability header, the placeholder
    /// syntax and the read-only MCP tools (the same text as the `mint_usage` MCP tool).
    Usage(UsageArgs),
}

/// Arguments of `mint serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on (keep it on loopback).
    #[arg(long, env = "MINT_LISTEN", default_value = crate::env::DEFAULT_LISTEN)]
    pub listen: String,

    /// A PEM file of CA certificates trusted for upstreams besides the built-in webpki roots
    /// (a private CA).
    #[arg(long, env = crate::env::MINT_UPSTREAM_CA)]
    pub upstream_ca: Option<PathBuf>,

    /// Resolving, connecting and the TLS handshake to an upstream, together.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub connect_timeout: Duration,

    /// The whole upstream exchange up to the answer's head, connecting included (must be longer
    /// than --connect-timeout); also the longest wait for the agent's request body.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    pub request_timeout: Duration,

    /// The longest silence inside an answer's body (a quiet SSE stream is cut after it).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5m")]
    pub idle_timeout: Duration,

    /// Reading a request's head from the agent.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub header_read_timeout: Duration,

    /// The largest request body, in bytes.
    #[arg(long, default_value_t = 10 << 20)]
    pub max_request_body: u64,

    /// The largest answer body (after decoding), in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    pub max_response_body: u64,

    /// The most agent connections served at once; more wait in the listen backlog.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections: u32,

    /// How long requests in flight may take to finish at shutdown.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub shutdown_grace: Duration,
}

/// Arguments of `mint demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Stop after the scripted requests instead of serving until Ctrl-C.
    #[arg(long)]
    pub once: bool,

    /// Where the demo broker listens.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
}

/// Arguments of `mint usage`.
#[derive(Debug, Args)]
pub struct UsageArgs {
    /// The proxy's listen address to show in the URLs [default: $MINT_LISTEN, else
    /// 127.0.0.1:8700].
    #[arg(long, env = "MINT_LISTEN")]
    pub listen: Option<String>,

    /// Print the description as JSON, exactly as the `mint_usage` tool returns it.
    #[arg(long)]
    pub json: bool,
}

/// `mint policy ...`.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Validate a policy file and report every problem with its line and column.
    ///
    /// Exits 0 when the file is valid (warnings allowed), 1 when it has errors, and 2 when it
    /// cannot be read; in that case the reason goes to stderr and nothing to stdout, also with
    /// `--json`.
    Check(CheckArgs),
    /// Decide a request as the proxy would, without sending it: the decision, the deciding
    /// rules, the aliases found and where they may go, and each limit's remaining budget.
    ///
    /// Reads no secret and prints no header or query value. Exits 0 when the request would be
    /// allowed, 1 when it would be denied, limited or refused, and 2 on a usage error or a file
    /// that cannot be read or has errors.
    Explain(crate::explain::ExplainArgs),
}

/// Arguments of `mint policy check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The policy file [default: $MINT_POLICY_PATH, else $MINT_HOME/policy.yaml, else
    /// .mint/policy.yaml].
    pub file: Option<PathBuf>,

    /// Print the report as one JSON object (`file`, `valid`, `rule_count`,
    /// `legacy_call_limit_count`, `default`, `errors`, `warnings`).
    #[arg(long)]
    pub json: bool,
}

/// How `mint` exits: 0 ok, 1 check failed or denied, 2 usage or configuration error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// Exit code 0.
    Success,
    /// Exit code 1: a check failed or a request was denied.
    Failure,
    /// Exit code 2: bad usage, or a file that cannot be read.
    UsageOrConfig,
}

// === impl ExitStatus ===

impl ExitStatus {
    /// The numeric exit code.
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Failure => 1,
            ExitStatus::UsageOrConfig => 2,
        }
    }
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> Self {
        ExitCode::from(status.code())
    }
}

/// A command that could not finish. `main` prints it on stderr as `mint: <message>`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// `mint policy check` failed to produce a report.
    #[error(transparent)]
    PolicyCheck(#[from] PolicyCheckError),
    /// `mint init` failed.
    #[error(transparent)]
    Init(#[from] InitError),
    /// `mint alias ...` failed.
    #[error(transparent)]
    Alias(#[from] AliasCommandError),
    /// `mint cap ...` failed.
    #[error(transparent)]
    Cap(#[from] CapCommandError),
    /// `mint audit ...` failed.
    #[error(transparent)]
    Audit(#[from] AuditCommandError),
    /// `mint serve` could not start or stopped on an error.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// `mint demo` could not run, or a check failed.
    #[error(transparent)]
    Demo(#[from] DemoError),
    /// Writing the result to stdout failed (a closed pipe, a full disk).
    #[error("cannot write the output: {0}")]
    Output(#[source] std::io::Error),
}

// === impl CommandError ===

impl CommandError {
    /// The exit status this error maps to.
    pub fn exit_status(&self) -> ExitStatus {
        match self {
            CommandError::PolicyCheck(_) => ExitStatus::UsageOrConfig,
            CommandError::Init(_) | CommandError::Alias(_) | CommandError::Cap(_) => {
                ExitStatus::UsageOrConfig
            }
            CommandError::Audit(_) | CommandError::Output(_) | CommandError::Serve(_) => {
                ExitStatus::UsageOrConfig
            }
            CommandError::Demo(DemoError::Check(_)) => ExitStatus::Failure,
            CommandError::Demo(_) => ExitStatus::UsageOrConfig,
        }
    }
}

/// Runs the parsed command with the resolved `paths`, writing its result to `out`.
pub fn run(cli: Cli, paths: &Paths, out: &mut dyn Write) -> Result<ExitStatus, CommandError> {
    match cli.command {
        Command::Serve(args) => {
            let audit = AuditConfig::from_lookup(|name| std::env::var(name).ok())
                .map_err(ServeError::from)?;
            let config = ServeConfig {
                upstream_ca: args.upstream_ca,
                limits: ProxyLimits {
                    connect_timeout: args.connect_timeout,
                    request_timeout: args.request_timeout,
                    idle_timeout: args.idle_timeout,
                    max_request_body: args.max_request_body,
                    max_response_body: args.max_response_body,
                    header_read_timeout: args.header_read_timeout,
                    shutdown_grace: args.shutdown_grace,
                    max_connections: usize::try_from(args.max_connections).unwrap_or(usize::MAX),
                },
                audit,
            };
            serve_blocking(&args.listen, || load_state(paths, &config), out)?;
            Ok(ExitStatus::Success)
        }
        Command::Demo(args) => {
            let options = DemoOptions {
                listen: args.listen,
                once: args.once,
            };
            crate::demo::demo(&options, out)?;
            Ok(ExitStatus::Success)
        }
        Command::Policy(PolicyCommand::Check(args)) => {
            let file = paths.policy_or(args.file.as_deref());
            let format = if args.json {
                ReportFormat::Json
            } else {
                ReportFormat::Human
            };
            let verdict = check_policy_file(&file, format, out)?;
            if let Some(refusal) = crate::policy_check::broker_refusal(&file) {
                // Stderr only: stdout stays the report alone, in either format.
                let mut err = std::io::stderr().lock();
                writeln!(
                    err,
                    "mint: note: {refusal}; `mint serve` would refuse this file whatever it \
                     holds (the report is about its contents only)"
                )
                .map_err(CommandError::Output)?;
            }
            Ok(match verdict {
                Verdict::Valid => ExitStatus::Success,
                Verdict::Invalid => ExitStatus::Failure,
            })
        }
        Command::Policy(PolicyCommand::Explain(args)) => {
            crate::explain::run(&args, paths, out, &mut std::io::stderr().lock())
                .map_err(CommandError::Output)
        }
        Command::Init => {
            crate::init::init(paths, out)?;
            Ok(ExitStatus::Success)
        }
        Command::Alias(command) => {
            crate::alias_cmd::run(command, paths, &mut std::io::stdin().lock(), out)?;
            Ok(ExitStatus::Success)
        }
        Command::Cap(command) => {
            let now = std::time::SystemTime::now();
            crate::cap_cmd::run(command, paths, now, out, &mut std::io::stderr().lock())?;
            Ok(ExitStatus::Success)
        }
        Command::Audit(command) => Ok(crate::audit_cmd::run(
            command,
            paths,
            out,
            &mut std::io::stderr().lock(),
        )?),
        Command::Usage(args) => {
            let listen = args.listen.as_deref().unwrap_or(crate::env::DEFAULT_LISTEN);
            let usage = mint_policy::usage::usage(listen);
            let text = if args.json {
                // INVARIANT: `Usage` holds only strings and arrays of strings, which always
                // serialize.
                serde_json::to_string_pretty(&usage).unwrap_or_default() + "\n"
            } else {
                usage.render_text()
            };
            out.write_all(text.as_bytes())
                .map_err(CommandError::Output)?;
            Ok(ExitStatus::Success)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
