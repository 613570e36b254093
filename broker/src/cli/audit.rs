//! `mint audit tail`, `mint audit verify` and `mint audit rotate`: the operator's view of the
//! audit log.
//!
//! Reading and checking live in [`crate::audit::tail`], [`crate::audit::verify`] and
//! [`crate::audit::rotation`]; this module parses the arguments, renders results and picks the
//! exit status. Output goes to `out` (stdout); notes about skipped lines go to `err` (stderr).
//! A line that is not an audit record is never echoed, only located and classified. Every field
//! shown comes from a parsed record, whose grammar admits printable ASCII only, so nothing
//! shown can carry a terminal escape.

use std::io::{self, Write};
use std::path::PathBuf;

use clap::{Args, Subcommand};
use mint_policy::audit::{AuditDecision, AuditRecord, Phase};
use mint_policy::diagnostic::count_noun;

use crate::audit::rotation::{RotateError, RotateOutcome, log_set, rotate};
use crate::audit::tail::{
    FOLLOW_POLL, FollowItem, Follower, Row, SkipReason, Skipped, Snapshot, TailMode, read_tail,
};
use crate::audit::verify::{VerifyError, VerifyOptions, VerifyReport, verify_files};
use crate::cli::ExitStatus;
use crate::config::env::Paths;

/// `mint audit ...`.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Show the last requests: one row per request, its decision and outcome paired.
    ///
    /// A decision without an outcome reads as `unknown`; the last column is the request id.
    /// No log yet is an empty table. Lines that are not audit records are never shown; stderr
    /// names their line numbers and kinds.
    Tail(TailArgs),
    /// Check that every line is an audit record and the hash chain is unbroken across the log
    /// and its rotated files.
    ///
    /// Exits 0 when intact, 1 when broken (naming the first broken line and its kind), 2 when a
    /// file cannot be read.
    Verify(VerifyArgs),
    /// Rotate the log now: rename it to the next `audit.log.N`. A running broker notices and
    /// starts a new file chained from the last line of the rotated one.
    Rotate,
}

/// Arguments of `mint audit tail`.
#[derive(Debug, Args)]
pub struct TailArgs {
    /// How many rows (or records, with `--json`) to show.
    #[arg(short = 'n', long = "lines", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub lines: u32,

    /// Keep following the log as it grows and rotates (until interrupted).
    #[arg(short = 'f', long)]
    pub follow: bool,

    /// Print records as stored, one JSON object per line.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `mint audit verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The files to verify, oldest first [default: the rotated files `audit.log.1`, `.2`, …
    /// then the current log].
    pub files: Vec<PathBuf>,

    /// Accept a first line that does not chain from genesis (older rotated files were
    /// removed); every later line is still checked.
    #[arg(long)]
    pub partial: bool,
}

/// Why an audit command could not finish (exit 2).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditCommandError {
    /// The log could not be read.
    #[error("cannot read audit log `{}`", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: io::Error,
    },
    /// There is no log to verify.
    #[error("no audit log at `{}`", path.display())]
    NoLog {
        /// The log's path.
        path: PathBuf,
    },
    /// A file to verify could not be read.
    #[error(transparent)]
    Verify(#[from] VerifyError),
    /// Rotation failed.
    #[error(transparent)]
    Rotate(#[from] RotateError),
    /// Writing the output failed.
    #[error("cannot write output")]
    Output(#[source] io::Error),
}

/// Runs an audit command on the log at `paths.audit_log`.
pub fn run(
    command: AuditCommand,
    paths: &Paths,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<ExitStatus, AuditCommandError> {
    let result = match command {
        AuditCommand::Tail(args) => tail(&args, paths, out, err),
        AuditCommand::Verify(args) => verify(&args, paths, out),
        AuditCommand::Rotate => rotate_now(paths, out),
    };
    match result {
        // A reader that went away (`mint audit tail -f | head`) ends the command normally.
        Err(AuditCommandError::Output(error)) if error.kind() == io::ErrorKind::BrokenPipe => {
            Ok(ExitStatus::Success)
        }
        other => other,
    }
}

fn tail(
    args: &TailArgs,
    paths: &Paths,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<ExitStatus, AuditCommandError> {
    let path = &paths.audit_log;
    let mode = if args.json {
        TailMode::Records
    } else {
        TailMode::Rows
    };
    let n = usize::try_from(args.lines).unwrap_or(usize::MAX);
    let mut snapshot = match read_tail(path, n, mode) {
        Ok(snapshot) => snapshot,
        // A fresh home, or a log just rotated with no broker to start the next file: nothing
        // recorded yet is an empty table, not an error (`-f` waits for the file to appear).
        Err(source) if source.kind() == io::ErrorKind::NotFound => {
            writeln!(
                err,
                "mint: no audit log at `{}` yet: nothing recorded",
                path.display()
            )
            .map_err(AuditCommandError::Output)?;
            Snapshot::default()
        }
        Err(source) => {
            return Err(AuditCommandError::Read {
                path: path.clone(),
                source,
            });
        }
    };
    let widths = match mode {
        TailMode::Rows => {
            let cells: Vec<[String; COLUMNS]> = snapshot.rows.iter().map(row_cells).collect();
            let mut widths = column_widths(&cells);
            if args.follow {
                // Rows that arrive later are cut to these widths, so they stay under the header.
                for (width, least) in widths.iter_mut().zip(FOLLOW_WIDTHS) {
                    *width = (*width).max(least);
                }
            }
            write_row(out, &HEADER.map(str::to_owned), &widths)?;
            for row in &cells {
                write_row(out, row, &widths)?;
            }
            widths
        }
        TailMode::Records => {
            for line in &snapshot.lines {
                writeln!(out, "{line}").map_err(AuditCommandError::Output)?;
            }
            [0; COLUMNS]
        }
    };
    report_skipped(err, &snapshot.skipped)?;
    out.flush().map_err(AuditCommandError::Output)?;
    if !args.follow {
        return Ok(ExitStatus::Success);
    }
    let mut follower = Follower::new(path, mode, &mut snapshot);
    loop {
        let mut emit = |item: FollowItem| -> io::Result<()> {
            match item {
                FollowItem::Row(row) => {
                    let cells = fit_cells(row_cells(&row), &widths);
                    write_row(out, &cells, &widths).map_err(into_io)?;
                }
                FollowItem::Record(line) => writeln!(out, "{line}")?,
                FollowItem::Skipped(skipped) => {
                    report_skipped(err, std::slice::from_ref(&skipped)).map_err(into_io)?;
                }
                FollowItem::Rotated => {}
            }
            Ok(())
        };
        follower.poll(&mut emit).map_err(|source| {
            if source.kind() == io::ErrorKind::BrokenPipe {
                AuditCommandError::Output(source)
            } else {
                AuditCommandError::Read {
                    path: path.clone(),
                    source,
                }
            }
        })?;
        out.flush().map_err(AuditCommandError::Output)?;
        std::thread::sleep(FOLLOW_POLL);
    }
}

fn verify(
    args: &VerifyArgs,
    paths: &Paths,
    out: &mut dyn Write,
) -> Result<ExitStatus, AuditCommandError> {
    let files = if args.files.is_empty() {
        let files = log_set(&paths.audit_log).map_err(|source| AuditCommandError::Read {
            path: paths.audit_log.clone(),
            source,
        })?;
        if files.is_empty() {
            return Err(AuditCommandError::NoLog {
                path: paths.audit_log.clone(),
            });
        }
        files
    } else {
        args.files.clone()
    };
    let options = VerifyOptions {
        partial: args.partial,
    };
    let report = verify_files(&files, options)?;
    render_verify(&report, out).map_err(AuditCommandError::Output)?;
    Ok(if report.is_intact() {
        ExitStatus::Success
    } else {
        ExitStatus::Failure
    })
}

fn render_verify(report: &VerifyReport, out: &mut dyn Write) -> io::Result<()> {
    for file in &report.files {
        writeln!(
            out,
            "{}: {}",
            file.path.display(),
            count(file.lines, "line")
        )?;
    }
    for at in &report.recovered {
        writeln!(
            out,
            "recovered: {at}: a line cut short by a crash, ended and marked by the writer \
             (its record is lost; the chain is intact)"
        )?;
    }
    if report.pending_total > 0 {
        writeln!(
            out,
            "unknown: {} without an outcome (a crash, or requests still running)",
            count(report.pending_total, "decision")
        )?;
        for (at, id) in &report.pending {
            writeln!(out, "  {at} id {id}")?;
        }
    }
    match &report.first_break {
        Some(first) => {
            writeln!(out, "broken: {first}")?;
            if report.breaks > 1 {
                writeln!(out, "{} broken lines in all", report.breaks)?;
            }
        }
        None => {
            let start = if report.starts_at_genesis {
                "starts at genesis"
            } else {
                "starts mid-chain (--partial)"
            };
            writeln!(
                out,
                "intact: {}, {} in {}; the chain {start}",
                count(report.lines, "line"),
                count(report.records, "record"),
                count_noun(report.files.len(), "file")
            )?;
        }
    }
    Ok(())
}

fn rotate_now(paths: &Paths, out: &mut dyn Write) -> Result<ExitStatus, AuditCommandError> {
    let path = &paths.audit_log;
    let outcome = rotate(path, ROTATE_WAIT)?;
    let shown = path.display();
    match outcome {
        RotateOutcome::Rotated { to } => writeln!(
            out,
            "rotated {shown} to {}; the next writer starts a new {shown}",
            to.display()
        ),
        RotateOutcome::RotatedLive { to } => writeln!(
            out,
            "rotated {shown} to {}; the running broker started a new {shown}",
            to.display()
        ),
        RotateOutcome::RotatedPending { to } => writeln!(
            out,
            "rotated {shown} to {}; the running broker has not started a new file yet and \
             keeps appending to the rotated one, in chain order, until it does",
            to.display()
        ),
        RotateOutcome::NothingToRotate => {
            writeln!(out, "{shown} is empty or absent: nothing to rotate")
        }
    }
    .map_err(AuditCommandError::Output)?;
    Ok(ExitStatus::Success)
}

fn report_skipped(err: &mut dyn Write, skipped: &[Skipped]) -> Result<(), AuditCommandError> {
    for item in skipped.iter().take(MAX_SKIPPED_SHOWN) {
        let line = item
            .line
            .map_or_else(|| "a line".to_owned(), |n| format!("line {n}"));
        let why = match item.defect {
            SkipReason::Defect(defect) => format!("not an audit record ({defect})"),
            SkipReason::Incomplete => "incomplete (no newline yet)".to_owned(),
        };
        writeln!(
            err,
            "mint: skipped {line} of {}: {why} [{}]",
            item.file.display(),
            item.defect.code()
        )
        .map_err(AuditCommandError::Output)?;
    }
    if skipped.len() > MAX_SKIPPED_SHOWN {
        writeln!(err, "mint: {} lines skipped in all", skipped.len())
            .map_err(AuditCommandError::Output)?;
    }
    Ok(())
}

/// The table's cells for one row.
fn row_cells(row: &Row) -> [String; COLUMNS] {
    let first = &row.first;
    let opt = |value: Option<&str>| value.map_or_else(|| "-".to_owned(), str::to_owned);
    let list = |items: &[String]| {
        if items.is_empty() {
            "-".to_owned()
        } else {
            items.join(",")
        }
    };
    let aliases: Vec<String> = first
        .aliases
        .iter()
        .map(|a| a.as_str().to_owned())
        .collect();
    let (decision, rule) = match first.phase {
        Phase::Decision => (
            decision_text(first),
            match &first.rule {
                None => "-".to_owned(),
                Some(rules) if rules.is_empty() => "(default)".to_owned(),
                Some(rules) => list(
                    &rules
                        .iter()
                        .map(|r| r.as_str().to_owned())
                        .collect::<Vec<_>>(),
                ),
            },
        ),
        Phase::Event => ("event".to_owned(), "-".to_owned()),
        Phase::Outcome => ("-".to_owned(), "-".to_owned()),
    };
    let ending: Option<&AuditRecord> = match first.phase {
        Phase::Decision => row.outcome.as_ref(),
        Phase::Outcome => Some(first),
        Phase::Event => None,
    };
    let outcome = match (first.phase, ending) {
        (Phase::Event, _) => opt(first.reason.as_ref().map(|r| r.as_str())),
        (_, Some(ending)) => opt(ending.outcome.map(|o| o.as_str())),
        (_, None) => "unknown".to_owned(),
    };
    let status = opt(ending
        .and_then(|e| e.status)
        .map(|s| s.get().to_string())
        .as_deref());
    let duration = opt(ending
        .and_then(|e| e.duration_ms)
        .map(|ms| format!("{ms}ms"))
        .as_deref());
    let host = match (&first.host, first.port) {
        (Some(host), Some(port)) if !is_default_port(first, port.get()) => {
            if host.as_str().contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            }
        }
        (Some(host), _) => host.as_str().to_owned(),
        (None, _) => "-".to_owned(),
    };
    [
        first.ts.as_str().to_owned(),
        opt(first.agent.as_ref().map(|a| a.as_str())),
        opt(first.method.as_ref().map(|m| m.as_str())),
        host,
        opt(first.path.as_ref().map(|p| p.as_str())),
        // The MCP tool called: two `tools/call`s to one endpoint differ only here. A tool name is
        // printable ASCII without space (`ToolName`), nothing a terminal interprets.
        opt(first.mcp_tool.as_ref().map(|t| t.as_str())),
        list(&aliases),
        decision,
        rule,
        outcome,
        status,
        duration,
        // Last: never padded, so a long id never pushes a column, and never cut.
        first.id.as_str().to_owned(),
    ]
}

/// `cells` with each one wider than its column (but the last, which is never padded) cut to
/// the column's width, its last character replaced by `…`: a row printed while following
/// stays under the header printed before it. `--json` shows every value whole.
fn fit_cells(cells: [String; COLUMNS], widths: &[usize; COLUMNS]) -> [String; COLUMNS] {
    let mut index = 0;
    cells.map(|cell| {
        let width = widths.get(index).copied().unwrap_or(usize::MAX);
        index += 1;
        if index == COLUMNS || cell.chars().count() <= width {
            return cell;
        }
        let mut cut: String = cell.chars().take(width.saturating_sub(1)).collect();
        cut.push('…');
        cut
    })
}

/// A decision, and for a held request how it was decided and by whom: `allow (approved by root
/// (uid 0, pid 7))`, `deny (approval_timeout)`, `pending`. An approver is printable ASCII
/// without quotes or backslashes (`Approver`), nothing a terminal interprets.
fn decision_text(record: &AuditRecord) -> String {
    let Some(decision) = record.decision else {
        return "-".to_owned();
    };
    if record.approval.is_empty() {
        return decision.as_str().to_owned();
    }
    let approvers: Vec<&str> = record.approver.iter().map(|a| a.as_str()).collect();
    let by = if approvers.is_empty() {
        String::new()
    } else {
        format!(" by {}", approvers.join(", "))
    };
    let reason = record.reason.as_ref().map(|r| r.as_str());
    match (decision, reason) {
        (AuditDecision::Pending, _) => "pending".to_owned(),
        (AuditDecision::Allow, _) => format!("allow (approved{by})"),
        (_, Some(reason)) => format!("{} ({reason}{by})", decision.as_str()),
        (_, None) => format!("{}{by}", decision.as_str()),
    }
}

fn is_default_port(record: &AuditRecord, port: u16) -> bool {
    matches!(
        (record.scheme.as_ref().map(|s| s.as_str()), port),
        (Some("https"), 443) | (Some("http"), 80)
    )
}

fn column_widths(rows: &[[String; COLUMNS]]) -> [usize; COLUMNS] {
    let mut widths = HEADER.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    widths
}

fn write_row(
    out: &mut dyn Write,
    cells: &[String; COLUMNS],
    widths: &[usize; COLUMNS],
) -> Result<(), AuditCommandError> {
    let mut line = String::new();
    for (index, (cell, width)) in cells.iter().zip(widths).enumerate() {
        if index + 1 == COLUMNS {
            line.push_str(cell);
        } else {
            crate::cli::terminal::push_padded(&mut line, cell, *width);
        }
    }
    writeln!(out, "{}", line.trim_end()).map_err(AuditCommandError::Output)
}

/// `1 line`, `3 lines`: [`count_noun`] for a `u64` count.
fn count(n: u64, noun: &str) -> String {
    count_noun(usize::try_from(n).unwrap_or(usize::MAX), noun)
}

fn into_io(error: AuditCommandError) -> io::Error {
    match error {
        AuditCommandError::Output(error) => error,
        other => io::Error::other(other.to_string()),
    }
}

const COLUMNS: usize = 13;
const HEADER: [&str; COLUMNS] = [
    "TIME", "AGENT", "METHOD", "HOST", "PATH", "TOOL", "ALIASES", "DECISION", "RULE", "OUTCOME",
    "STATUS", "DURATION", "ID",
];
/// The least column widths while following (`-f`): a timestamp is 24 characters, and the others
/// fit common values; a wider value arriving later is cut (see [`fit_cells`]).
const FOLLOW_WIDTHS: [usize; COLUMNS] = [24, 12, 7, 28, 32, 16, 16, 10, 16, 9, 6, 8, 0];
const MAX_SKIPPED_SHOWN: usize = 20;
/// How long `mint audit rotate` waits for a running broker to start the new file.
const ROTATE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
