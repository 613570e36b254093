//! `policy_check`: validates one policy file with the code behind `mint policy check --json`.
//!
//! The report is `mint_policy::check::check_policy`'s, so the tool and the CLI can never
//! disagree, for a file that `mint_policy::recognise` takes for a policy; any other file gets
//! the uniform `tools::unreadable` answer. A valid file returns the reference's five fields and then `warnings`; an invalid
//! one becomes a JSON-RPC error whose message is the report's one-line summary and whose `data`
//! holds the same findings the CLI prints (errors, then warnings).

use std::path::Path;

use mint_policy::Diagnostic;
use mint_policy::check::check_policy;
use mint_policy::policy::DefaultEffect;
use mint_policy::recognise::is_policy_file;
use serde::Serialize;

use super::{Arguments, findings, pretty, unreadable};
use crate::file_guard::{FileError, Guard, OpenFile};
use crate::jsonrpc::RpcError;
use crate::paths::Config;

/// Checks the policy file named by the required `file` argument.
pub(super) fn call(args: Arguments<'_>, config: &Config) -> Result<String, RpcError> {
    let file = args.required_path("file")?;
    let bytes = Guard::load(config)
        .open(Path::new(file))
        .and_then(OpenFile::read_declaration)
        .and_then(|bytes| {
            // Findings only for a file that is one: those of another would describe it.
            if is_policy_file(&bytes) {
                Ok(bytes)
            } else {
                Err(FileError::NotRecognised)
            }
        })
        .map_err(|error| unreadable("policy file", "a policy", file, error))?;
    let report = check_policy(&bytes, file);
    if !report.valid {
        return Err(findings(
            report.error_summary(),
            report.errors.iter().chain(&report.warnings),
        ));
    }
    pretty(&PolicyCheck {
        file: &report.file,
        valid: report.valid,
        rule_count: report.rule_count,
        legacy_call_limit_count: report.legacy_call_limit_count,
        default: report.default,
        warnings: &report.warnings,
    })
}

/// `PolicyReport` without `errors`, which a valid file does not have.
#[derive(Serialize)]
struct PolicyCheck<'a> {
    file: &'a str,
    valid: bool,
    rule_count: usize,
    legacy_call_limit_count: usize,
    default: DefaultEffect,
    warnings: &'a [Diagnostic],
}
