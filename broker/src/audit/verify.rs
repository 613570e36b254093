//! `mint audit verify`: proves that a log and its rotated predecessors are unbroken.
//!
//! Reads the files in chain order (oldest first) as one sequence of lines and checks that every
//! line is an audit record and that every record's `prev` is the hash of the line before it
//! (the first line of the sequence: genesis). Reports the first broken line with its file, line
//! number and kind, and keeps counting after it. Memory stays bounded by the number of requests
//! still waiting for an outcome: lines are hashed as they stream by, and only a break sends a
//! second pass looking for the line the broken `prev` points at (to tell a reordering from an
//! edit or a deletion).
//!
//! What the chain can and cannot tell: an edited line breaks the link to the line after it,
//! exactly as deleting the lines after it would, so those two are reported together; a moved
//! line points at a line elsewhere; a line cut short is `truncated`. Deleting the last lines of
//! the newest file leaves no trace in the chain; the chain is not keyed, so someone able to
//! rewrite the whole file can recompute it. Never reads out a line's content: problems are
//! reported by position and kind. Files are opened without following a symbolic link and must
//! be regular files, so a FIFO or a link planted at a rotated file's name cannot hang or
//! redirect a verification.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};

use mint_policy::audit::{AuditRecord, Phase, RequestId};

use super::chain::{Line, LineDefect, LineHash, LineReader, parse_line};
use super::file::open_read;
use super::writer::TORN_LINE_REASON;

/// A line in one of the files verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position {
    /// The file.
    pub file: PathBuf,
    /// The 1-based line number in that file.
    pub line: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// How the chain is broken at a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BreakKind {
    /// The line is not an audit record.
    Unparseable(LineDefect),
    /// The last line was cut short (no newline): a crash during a write, or truncation.
    Truncated,
    /// The line's `prev` matches no line: the line before it was edited, or lines between
    /// them were deleted.
    EditedOrDeleted {
        /// The line before it (in the same file, or the last line of the previous file).
        previous: Position,
    },
    /// The line's `prev` is the hash of a line elsewhere: lines were moved or inserted.
    Reordered {
        /// The line it chains from.
        chains_from: Position,
    },
    /// The first line does not chain from genesis: earlier lines or files are missing.
    MissingStart,
    /// A line in the middle chains from genesis: a new log was started there.
    Restarted,
}

// === impl BreakKind ===

impl BreakKind {
    /// A stable snake-case code.
    pub fn code(&self) -> &'static str {
        match self {
            BreakKind::Unparseable(_) => "unparseable",
            BreakKind::Truncated => "truncated",
            BreakKind::EditedOrDeleted { .. } => "edited_or_deleted",
            BreakKind::Reordered { .. } => "reordered",
            BreakKind::MissingStart => "missing_start",
            BreakKind::Restarted => "restarted",
        }
    }
}

/// The first broken line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainBreak {
    /// Where.
    pub at: Position,
    /// What is wrong.
    pub kind: BreakKind,
}

impl fmt::Display for ChainBreak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = &self.at;
        match &self.kind {
            BreakKind::Unparseable(defect) => {
                write!(f, "{at}: unparseable: not an audit record ({defect})")
            }
            BreakKind::Truncated => write!(f, "{at}: truncated: the line was cut short"),
            BreakKind::EditedOrDeleted { previous } => write!(
                f,
                "{at}: edited_or_deleted: `prev` is not the hash of {previous}: that line was \
                 edited, or lines between the two were deleted"
            ),
            BreakKind::Reordered { chains_from } => write!(
                f,
                "{at}: reordered: `prev` is the hash of {chains_from}, not of the line before it"
            ),
            BreakKind::MissingStart => write!(
                f,
                "{at}: missing_start: the first line does not chain from genesis: earlier lines \
                 or files are missing (give the rotated files too, or use --partial)"
            ),
            BreakKind::Restarted => write!(
                f,
                "{at}: restarted: the line chains from genesis: a new log was started here"
            ),
        }
    }
}

/// How to verify.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerifyOptions {
    /// Accept a first line that does not chain from genesis (older files were pruned, or only
    /// later files are given). Everything after it is still checked.
    pub partial: bool,
}

/// One file's share of the lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSummary {
    /// The file.
    pub path: PathBuf,
    /// Its lines.
    pub lines: u64,
}

/// What `verify_files` found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// The files, in the order read.
    pub files: Vec<FileSummary>,
    /// Lines read in all.
    pub lines: u64,
    /// Lines that are audit records.
    pub records: u64,
    /// The first broken line, if any.
    pub first_break: Option<ChainBreak>,
    /// How many broken lines there are in all.
    pub breaks: u64,
    /// Whether the first line chains from genesis.
    pub starts_at_genesis: bool,
    /// Lines cut short by a crash that the writer recovered (each followed by an
    /// `audit_torn_line` event chained from it): the records are lost, the chain is intact.
    pub recovered: Vec<Position>,
    /// Decisions with no outcome after them, which read as `unknown` (at most
    /// [`MAX_LISTED_PENDING`] listed).
    pub pending: Vec<(Position, RequestId)>,
    /// How many decisions have no outcome.
    pub pending_total: u64,
}

// === impl VerifyReport ===

impl VerifyReport {
    /// Whether no line is broken.
    pub fn is_intact(&self) -> bool {
        self.first_break.is_none()
    }
}

/// A file that could not be read: `mint audit verify` exits 2.
#[derive(Debug, thiserror::Error)]
#[error("cannot read `{}`", path.display())]
pub struct VerifyError {
    /// The file.
    pub path: PathBuf,
    /// The operating system's reason.
    #[source]
    pub source: io::Error,
}

/// Verifies `files` as one chain, in the order given (oldest first).
pub fn verify_files(
    files: &[PathBuf],
    options: VerifyOptions,
) -> Result<VerifyReport, VerifyError> {
    let mut scan = Scan {
        options,
        report: VerifyReport {
            starts_at_genesis: true,
            ..VerifyReport::default()
        },
        previous: None,
        open: HashMap::new(),
        first_break_prev: None,
    };
    for path in files {
        let mut lines = open_lines(path)?;
        let mut number = 0;
        while let Some(line) = lines.next_line().map_err(|source| VerifyError {
            path: path.clone(),
            source,
        })? {
            number += 1;
            let at = Position {
                file: path.clone(),
                line: number,
            };
            scan.line(at, &line);
        }
        scan.report.files.push(FileSummary {
            path: path.clone(),
            lines: number,
        });
    }
    scan.finish(files)
}

/// The chain state while streaming through the lines.
struct Scan {
    options: VerifyOptions,
    report: VerifyReport,
    /// The line before the current one, and its problem still to be judged.
    previous: Option<Previous>,
    /// Decisions still waiting for their outcome.
    open: HashMap<RequestId, Position>,
    /// The broken `prev` of the first chain break, to look for in a second pass.
    first_break_prev: Option<LineHash>,
}

struct Previous {
    at: Position,
    hash: LineHash,
    /// Not a record (or cut short): fine only if the next line is the torn-line event.
    problem: Option<BreakKind>,
}

impl Scan {
    fn line(&mut self, at: Position, line: &Line) {
        let parsed = parse_line(line);
        let record = parsed.as_ref().ok();
        // The line before this one was not a record: fine only if this is the event the writer
        // writes after recovering a torn line, chained from it.
        let pending = self.previous.as_mut().and_then(|previous| {
            let problem = previous.problem.take()?;
            Some((previous.at.clone(), previous.hash, problem))
        });
        if let Some((previous_at, previous_hash, problem)) = pending {
            if record.is_some_and(|r| is_torn_recovery(r, previous_hash)) {
                self.report.recovered.push(previous_at);
            } else {
                self.broken(previous_at, problem, None);
            }
        }
        self.report.lines += 1;
        if let Some(record) = record {
            self.report.records += 1;
            self.check_link(&at, record);
            match record.phase {
                Phase::Decision => {
                    self.open.insert(record.id.clone(), at.clone());
                }
                Phase::Outcome => {
                    self.open.remove(&record.id);
                }
                Phase::Event => {}
            }
        }
        let problem = match (&parsed, line.terminated) {
            (_, false) => Some(BreakKind::Truncated),
            (Err(defect), true) => Some(BreakKind::Unparseable(*defect)),
            (Ok(_), true) => None,
        };
        self.previous = Some(Previous {
            at,
            hash: line.hash,
            problem,
        });
    }

    /// Checks that `record` chains from the line before it.
    fn check_link(&mut self, at: &Position, record: &AuditRecord) {
        let prev = LineHash::from_chain_hash(&record.prev);
        let expected = self.previous.as_ref().map(|p| p.hash);
        let previous_at = self.previous.as_ref().map(|p| p.at.clone());
        match (expected, prev) {
            (Some(expected), Some(prev)) if expected == prev => {}
            (None, Some(prev)) if prev.is_genesis() => {}
            (None, Some(prev)) => {
                self.report.starts_at_genesis = false;
                if !self.options.partial {
                    self.broken(at.clone(), BreakKind::MissingStart, Some(prev));
                }
            }
            (Some(_), Some(prev)) if prev.is_genesis() => {
                self.broken(at.clone(), BreakKind::Restarted, None);
            }
            (_, prev) => match previous_at {
                Some(previous) => {
                    self.broken(at.clone(), BreakKind::EditedOrDeleted { previous }, prev);
                }
                // INVARIANT: with no line before, `prev` was either genesis or handled above;
                // only an unreadable `prev` gets here.
                None => self.broken(at.clone(), BreakKind::MissingStart, prev),
            },
        }
    }

    fn broken(&mut self, at: Position, kind: BreakKind, prev: Option<LineHash>) {
        self.report.breaks += 1;
        if self.report.first_break.is_none() {
            self.report.first_break = Some(ChainBreak { at, kind });
            self.first_break_prev = prev;
        }
    }

    fn finish(mut self, files: &[PathBuf]) -> Result<VerifyReport, VerifyError> {
        if let Some(previous) = self.previous.take()
            && let Some(problem) = previous.problem
        {
            self.broken(previous.at, problem, None);
        }
        if let (Some(wanted), Some(first)) = (self.first_break_prev, &mut self.report.first_break)
            && let Some(found) = find_line(files, wanted)?
        {
            first.kind = BreakKind::Reordered { chains_from: found };
        }
        let mut pending: Vec<(Position, RequestId)> =
            self.open.into_iter().map(|(id, at)| (at, id)).collect();
        pending.sort_by(|a, b| {
            let order = |p: &Position| files.iter().position(|f| *f == p.file);
            (order(&a.0), a.0.line).cmp(&(order(&b.0), b.0.line))
        });
        self.report.pending_total = pending.len() as u64;
        pending.truncate(MAX_LISTED_PENDING);
        self.report.pending = pending;
        Ok(self.report)
    }
}

/// Whether `record` is the event the writer writes right after recovering a torn line whose
/// hash is `torn`.
fn is_torn_recovery(record: &AuditRecord, torn: LineHash) -> bool {
    record.phase == Phase::Event
        && record
            .reason
            .as_ref()
            .is_some_and(|r| r.as_str() == TORN_LINE_REASON)
        && LineHash::from_chain_hash(&record.prev) == Some(torn)
}

/// The first line in `files` whose hash is `wanted`.
fn find_line(files: &[PathBuf], wanted: LineHash) -> Result<Option<Position>, VerifyError> {
    for path in files {
        let mut lines = open_lines(path)?;
        let mut number = 0;
        while let Some(line) = lines.next_line().map_err(|source| VerifyError {
            path: path.clone(),
            source,
        })? {
            number += 1;
            if line.hash == wanted {
                return Ok(Some(Position {
                    file: path.clone(),
                    line: number,
                }));
            }
        }
    }
    Ok(None)
}

fn open_lines(path: &Path) -> Result<LineReader<BufReader<File>>, VerifyError> {
    let error = |source| VerifyError {
        path: path.to_path_buf(),
        source,
    };
    let file = open_read(path).map_err(error)?;
    Ok(LineReader::new(
        BufReader::with_capacity(READ_BUFFER, file),
        0,
    ))
}

/// The most pending decisions a report lists by position.
pub const MAX_LISTED_PENDING: usize = 10;

const READ_BUFFER: usize = 256 * 1024;
