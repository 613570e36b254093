//! `mint policy check` ([`check`]) and `mint policy explain` ([`explain`]): their flags and
//! dispatch.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::cli::{CommandError, ExitStatus};
use crate::config::env::Paths;

pub mod check;
pub mod explain;

use check::{ReportFormat, Verdict, check_policy_file};

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
    /// rules, the aliases found and where they may go, and each limit's remaining budget; for a
    /// request an approve rule holds, the approve rules and how long it would wait.
    ///
    /// Reads no secret and prints no header or query value. Exits 0 when the request would be
    /// allowed, 1 when it would be denied, limited, refused or held for approval, and 2 on a
    /// usage error or a file that cannot be read or has errors.
    Explain(Box<explain::ExplainArgs>),
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

/// Runs one `mint policy` command.
pub fn run(
    command: PolicyCommand,
    paths: &Paths,
    out: &mut dyn Write,
) -> Result<ExitStatus, CommandError> {
    match command {
        PolicyCommand::Check(args) => {
            let file = paths.policy_or(args.file.as_deref());
            let format = if args.json {
                ReportFormat::Json
            } else {
                ReportFormat::Human
            };
            let verdict = check_policy_file(&file, format, out)?;
            if let Some(refusal) = check::broker_refusal(&file) {
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
        PolicyCommand::Explain(args) => {
            explain::run(&args, paths, out, &mut std::io::stderr().lock())
                .map_err(CommandError::Output)
        }
    }
}
