//! The `mint` command line: argument types and dispatch to the command modules.
//!
//! `main.rs` parses a [`Cli`], resolves [`Paths`] from the environment and calls [`run()`]; the
//! exit status is decided here and in [`CommandError::exit_status`], in one place. Commands write
//! their results to the `out` they are given (stdout in production) and never print errors
//! themselves: they return them.
//!
//! One module per subcommand holds its flags and calls the engine: [`init`], [`alias`], [`cap`],
//! [`audit`], [`ca`], [`policy`] (`check`, `explain`), [`serve`], [`mod@run`], [`mod@env`], [`approvals`],
//! [`demo`], [`usage`], [`doctor`]; [`agent_env`] is the agent environment `run` and `env` share, [`terminal`] the
//! hidden secret prompt and the escaping of what is printed to a terminal. Every command
//! DESIGN.md lists is a variant of [`Command`] or [`PolicyCommand`]. None of these modules
//! decides a request: `policy explain` runs the proxy's own checks (`proxy::pipeline`).

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::env::Paths;
use crate::demo::DemoError;
use crate::serve::ServeError;

pub mod agent_env;
pub mod alias;
pub mod approvals;
pub mod audit;
pub mod ca;
pub mod cap;
pub mod demo;
pub mod doctor;
pub mod env;
pub mod init;
pub mod log;
pub mod policy;
pub mod quantity;
pub mod run;
pub mod serve;
pub mod shared_limits;
pub mod terminal;
pub mod usage;

use alias::AliasCommandError;
use approvals::{ApprovalsCommand, ApprovalsError};
use audit::{AuditCommand, AuditCommandError};
use ca::{CaCommand, CaCommandError};
use cap::{CapCommand, CapCommandError};
use doctor::DoctorError;
use env::EnvError;
use init::InitError;
use policy::PolicyCommand;
use policy::check::PolicyCheckError;
use run::RunError;

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
    Serve(serve::ServeArgs),
    /// Show Mint at work in one command: a temporary home, a local HTTPS echo upstream, the real
    /// broker, and an agent's allowed, denied, redirected and MCP requests with the audit trail.
    Demo(demo::DemoArgs),
    /// Work with the policy file.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Create MINT_HOME (0700) with a default-deny policy, an empty alias file and an empty
    /// capabilities file; never overwrites a file.
    Init(init::InitArgs),
    /// Declare aliases and store their secrets.
    #[command(subcommand)]
    Alias(alias::AliasCommand),
    /// Issue, list and revoke agent capabilities.
    #[command(subcommand)]
    Cap(CapCommand),
    /// Read, verify and rotate the audit log.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Run a command (an agent) behind Mint: a capability of its own, revoked when it exits.
    ///
    /// Executes CMD directly (no shell) with HTTPS_PROXY and the other proxy variables pointing
    /// at the broker with the capability, the CA variables naming a bundle that trusts Mint's CA
    /// (inherited values are overwritten), and each alias's `env` names set to its placeholder.
    /// SIGINT, SIGTERM and SIGHUP are forwarded; the exit status is the command's. As root,
    /// --user NAME runs it as that user; no `MINT_*` variable reaches it.
    Run(run::RunArgs),
    /// The child of `mint run --user`: switches to the user, then executes CMD (internal).
    #[command(hide = true)]
    ExecAs(run::user::ExecAsArgs),
    /// Print the settings of `mint run` as lines for a shell, a container or a systemd unit,
    /// with a capability issued for them (its token shown once, in the proxy URL).
    Env(env::EnvArgs),
    /// Decide on the requests an `approve` rule holds: list, approve, deny, watch; revoke grants.
    ///
    /// Talks to the running broker on `$MINT_HOME/approvals.sock` (mode 0600, only the user
    /// `mint serve` runs as). `watch` asks on the terminal about each request as it starts waiting.
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// Export or rotate the interception CA that agents trust for HTTPS through Mint.
    #[command(subcommand)]
    Ca(CaCommand),
    /// Check the Mint home as `mint serve` would load it: one line per check (ok, info, warn,
    /// FAIL) with its fix; exits 1 when a check fails.
    ///
    /// Checks MINT_HOME and file permissions, each alias's secret (never shown), the keyring,
    /// the policy and the aliases it uses, the capabilities, the audit log (writable, chain
    /// intact), the interception CA (key, validity, name constraints, system trust) and the
    /// listen address (warned about unless loopback).
    Doctor(doctor::DoctorArgs),
    /// Explain how an agent uses Mint: the proxy route, the capability header, the placeholder
    /// syntax and the read-only MCP tools (the same text as the `mint_usage` MCP tool).
    Usage(usage::UsageArgs),
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
    /// Another exit code: the status of the command `mint run` ran (128+N for a death by signal
    /// N), or 126/127 when it could not be executed.
    Code(u8),
}

// === impl ExitStatus ===

impl ExitStatus {
    /// The numeric exit code.
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Failure => 1,
            ExitStatus::UsageOrConfig => 2,
            ExitStatus::Code(code) => code,
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
    /// `mint ca ...` failed.
    #[error(transparent)]
    Ca(#[from] CaCommandError),
    /// `mint serve` could not start or stopped on an error.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// `mint run` could not run the command.
    #[error(transparent)]
    Run(#[from] RunError),
    /// `mint env` printed nothing.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// `mint approvals ...` failed.
    #[error(transparent)]
    Approvals(#[from] ApprovalsError),
    /// `mint demo` could not run, or a check failed.
    #[error(transparent)]
    Demo(#[from] DemoError),
    /// `mint doctor` could not write its report.
    #[error(transparent)]
    Doctor(#[from] DoctorError),
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
            CommandError::Audit(_)
            | CommandError::Ca(_)
            | CommandError::Output(_)
            | CommandError::Serve(_) => ExitStatus::UsageOrConfig,
            CommandError::Run(error) => error
                .exit_code()
                .map_or(ExitStatus::UsageOrConfig, ExitStatus::Code),
            CommandError::Env(_) | CommandError::Doctor(_) => ExitStatus::UsageOrConfig,
            CommandError::Approvals(error) => error.exit_status(),
            CommandError::Demo(DemoError::Check(_)) => ExitStatus::Failure,
            CommandError::Demo(_) => ExitStatus::UsageOrConfig,
        }
    }
}

/// Runs the parsed command with the resolved `paths`, writing its result to `out`.
pub fn run(cli: Cli, paths: &Paths, out: &mut dyn Write) -> Result<ExitStatus, CommandError> {
    match cli.command {
        Command::Serve(args) => {
            serve::run(args, paths, out)?;
            Ok(ExitStatus::Success)
        }
        Command::Demo(args) => {
            demo::run(args, out)?;
            Ok(ExitStatus::Success)
        }
        Command::Policy(command) => policy::run(command, paths, out),
        Command::Init(args) => {
            init::run(&args, paths, out)?;
            Ok(ExitStatus::Success)
        }
        Command::Alias(command) => Ok(alias::run(
            command,
            paths,
            &mut std::io::stdin().lock(),
            out,
        )?),
        Command::Cap(command) => {
            let now = std::time::SystemTime::now();
            cap::run(command, paths, now, out, &mut std::io::stderr().lock())?;
            Ok(ExitStatus::Success)
        }
        Command::Audit(command) => Ok(audit::run(
            command,
            paths,
            out,
            &mut std::io::stderr().lock(),
        )?),
        Command::Run(args) => Ok(ExitStatus::Code(run::run(
            args,
            paths,
            &mut std::io::stderr(),
        )?)),
        Command::ExecAs(args) => Err(run::user::exec_as(args).into()),
        Command::Env(args) => {
            // Nothing is issued for an output nobody can read (`mint env >&-`).
            env::require_writable_stdout()?;
            env::run(args, paths, out, &mut std::io::stderr())?;
            Ok(ExitStatus::Success)
        }
        Command::Approvals(command) => {
            approvals::run(command, paths, out)?;
            Ok(ExitStatus::Success)
        }
        Command::Ca(command) => {
            ca::run(command, paths, out)?;
            Ok(ExitStatus::Success)
        }
        Command::Doctor(args) => Ok(doctor::run(&args, paths, out)?),
        Command::Usage(args) => {
            usage::run(&args, out).map_err(CommandError::Output)?;
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
