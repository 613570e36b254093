//! The `policy_check` report: what `mint policy check --json` prints and what the `policy_check`
//! MCP tool returns, built by one function so the two can never disagree.
//!
//! Takes the file's bytes and name; reading the file is the caller's job. The report holds only
//! counts and findings, never the file's text.

use serde::Serialize;

use crate::diagnostic::{Diagnostic, Severity, count_noun};
use crate::policy::{DefaultEffect, load_policy};

/// The result of checking one policy file. Serializes with the fields in this order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PolicyReport {
    /// The file as the caller named it.
    pub file: String,
    /// Whether the file has no error.
    pub valid: bool,
    /// Entries under `rules`.
    pub rule_count: usize,
    /// Entries under the legacy `call_limits`.
    pub legacy_call_limit_count: usize,
    /// The policy's default.
    pub default: DefaultEffect,
    /// Findings that make the file invalid.
    pub errors: Vec<Diagnostic>,
    /// Findings that do not.
    pub warnings: Vec<Diagnostic>,
}

/// Checks the policy file `file` whose content is `bytes`.
pub fn check_policy(bytes: &[u8], file: &str) -> PolicyReport {
    let load = load_policy(bytes, file);
    let (errors, warnings) = load
        .diagnostics
        .into_iter()
        .partition::<Vec<_>, _>(|d| d.severity() == Severity::Error);
    PolicyReport {
        file: file.to_owned(),
        valid: errors.is_empty(),
        rule_count: load.rule_count,
        legacy_call_limit_count: load.legacy_call_limit_count,
        default: load.default,
        errors,
        warnings,
    }
}

// === impl PolicyReport ===

impl PolicyReport {
    /// Every finding in position order.
    pub fn diagnostics(&self) -> Vec<&Diagnostic> {
        let mut all: Vec<&Diagnostic> = self.errors.iter().chain(&self.warnings).collect();
        all.sort_by_key(|d| (d.line, d.column, d.code));
        all
    }

    /// The human report: one rustc-style line per finding, then `N errors, M warnings`.
    pub fn render_human(&self) -> String {
        let mut out = String::new();
        for d in self.diagnostics() {
            out.push_str(&d.render(&self.file));
            out.push('\n');
        }
        out.push_str(&format!(
            "{}, {}\n",
            count_noun(self.errors.len(), "error"),
            count_noun(self.warnings.len(), "warning")
        ));
        out
    }

    /// One line for an error message: `3 errors in policy.yaml; first: 14:11 E020 ...`.
    pub fn error_summary(&self) -> String {
        let first = self
            .errors
            .first()
            .map(|d| format!("; first: {}", d.short()))
            .unwrap_or_default();
        format!(
            "{} in {}{first}",
            count_noun(self.errors.len(), "error"),
            self.file
        )
    }
}
