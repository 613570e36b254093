//! `mint policy check`: validates a policy file and prints the report.
//!
//! Reads the file through `declaration_file` and hands the bytes to
//! `mint_policy::check::check_policy`, the same function behind the `policy_check` MCP tool, so
//! the two can never disagree. Prints only the report, which holds counts and findings: never the
//! file's text, also not when the file cannot be read.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use mint_policy::MAX_FILE_BYTES;
use mint_policy::check::{PolicyReport, check_policy};
use mint_policy::diagnostic::count_noun;

use crate::config::declaration_file::{ReadError, read_declaration_file};
use crate::config::secure_file::{SecureFileError, open_trusted};

/// How the report is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportFormat {
    /// rustc-style lines, then `N errors, M warnings`.
    Human,
    /// One pretty-printed JSON object: `file`, `valid`, `rule_count`, `legacy_call_limit_count`,
    /// `default`, `errors`, `warnings`.
    Json,
}

/// Whether the checked file is valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No error (warnings allowed).
    Valid,
    /// At least one error.
    Invalid,
}

/// A check that could not produce a report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyCheckError {
    /// The file could not be opened or read. Nothing is printed on stdout in this case, in either
    /// format.
    #[error("cannot read policy file `{}`: {problem}", path.display())]
    Unreadable {
        /// The file as named on the command line or by the environment.
        path: PathBuf,
        /// What went wrong.
        problem: ReadError,
    },
    /// The report could not be written to the output (a closed pipe, a full disk).
    #[error("cannot write the policy report")]
    Output(#[source] io::Error),
}

/// Checks the policy file at `path` and writes the report to `out`.
pub fn check_policy_file(
    path: &Path,
    format: ReportFormat,
    out: &mut dyn Write,
) -> Result<Verdict, PolicyCheckError> {
    // The loader reports an oversized file itself (E001); reading stops one byte past its limit.
    let bytes = read_declaration_file(path, MAX_FILE_BYTES).map_err(|problem| {
        PolicyCheckError::Unreadable {
            path: path.to_path_buf(),
            problem,
        }
    })?;
    let report = check_policy(&bytes, &path.display().to_string());
    tracing::debug!(
        policy.file = %report.file,
        errors = report.errors.len(),
        warnings = report.warnings.len(),
        "Policy checked"
    );
    write_report(&report, format, out).map_err(PolicyCheckError::Output)?;
    Ok(if report.valid {
        Verdict::Valid
    } else {
        Verdict::Invalid
    })
}

/// Why `mint serve` would refuse the file at `path` whatever it holds (another user could change
/// it, by its owner or mode or through a directory or link on its way), if it would. The check is
/// a linter's: it reads any file, also drafts others may write, since nothing in the report is
/// acted upon; this says when the file checked is not one the broker would load. Problems the
/// read itself reports (missing, not a regular file) give `None`.
pub fn broker_refusal(path: &Path) -> Option<SecureFileError> {
    match open_trusted(path) {
        Ok(_) => None,
        Err(
            SecureFileError::Io { .. }
            | SecureFileError::NotRegularFile { .. }
            | SecureFileError::Changed { .. },
        ) => None,
        Err(refusal) => Some(refusal),
    }
}

/// The human report's first line: which file was checked and what it holds, so a check of the
/// wrong file (another `MINT_HOME`, a stale copy) shows at once. `policy.yaml: 4 rules, default
/// deny` (plus `, 2 legacy call_limits` when there are any).
fn summary_line(report: &PolicyReport) -> String {
    let legacy = match report.legacy_call_limit_count {
        0 => String::new(),
        n => format!(", {n} legacy call_limits"),
    };
    format!(
        "{}: {}{legacy}, default {}\n",
        report.file,
        count_noun(report.rule_count, "rule"),
        report.default.as_str()
    )
}

fn write_report(
    report: &PolicyReport,
    format: ReportFormat,
    out: &mut dyn Write,
) -> io::Result<()> {
    match format {
        ReportFormat::Human => {
            out.write_all(summary_line(report).as_bytes())?;
            out.write_all(report.render_human().as_bytes())?;
        }
        ReportFormat::Json => {
            serde_json::to_writer_pretty(&mut *out, report)?;
            out.write_all(b"\n")?;
        }
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, format: ReportFormat) -> (Verdict, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        std::fs::write(&path, text).unwrap();
        let mut out = Vec::new();
        let verdict = check_policy_file(&path, format, &mut out).unwrap();
        (verdict, String::from_utf8(out).unwrap())
    }

    #[test]
    fn empty_policy_is_valid() {
        let (verdict, out) = check(
            "version: 1\ndefault: deny\nrules: []\n",
            ReportFormat::Human,
        );
        assert_eq!(verdict, Verdict::Valid);
        assert!(
            out.ends_with(": 0 rules, default deny\n0 errors, 0 warnings\n"),
            "{out}"
        );
    }

    #[test]
    fn json_report_is_one_object() {
        let (verdict, out) = check("version: 1\nrules: []\n", ReportFormat::Json);
        assert_eq!(verdict, Verdict::Valid);
        let value: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(value["valid"], true);
        assert_eq!(value["default"], "deny");
    }

    #[test]
    fn unknown_field_is_invalid() {
        let (verdict, out) = check("version: 1\nrules: []\nrulez: []\n", ReportFormat::Human);
        assert_eq!(verdict, Verdict::Invalid);
        assert!(out.contains("error[E010]"), "{out}");
    }

    #[test]
    fn unreadable_file_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.yaml");
        let mut out = Vec::new();
        let err = check_policy_file(&path, ReportFormat::Json, &mut out).unwrap_err();
        assert!(out.is_empty());
        assert_eq!(
            err.to_string(),
            format!(
                "cannot read policy file `{}`: no such file or directory",
                path.display()
            )
        );
    }
}
