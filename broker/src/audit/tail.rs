//! `mint audit tail`: the last requests of the log, a decision and its outcome paired into one
//! row, and following the log as it grows and rotates.
//!
//! Reads only the end of the current log: a window from the end that grows until it holds the
//! requested number of rows (or reaches the start of the file). A decision with no outcome after
//! it reads as `unknown`. Lines that are not audit records are never echoed: they are reported
//! by line number and kind only. Following polls the file; when the path comes to name another
//! file (rotation), it reads the old file to its end for a grace period and continues with the
//! new one from its start, so no line is missed. Memory stays bounded: a window of the file,
//! at most [`MAX_OPEN_REQUESTS`] requests waiting for their outcome, one partial line. Files are
//! opened without following a symbolic link and must be regular files: a FIFO or a link planted
//! at the log's path is refused, never waited on or followed.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mint_policy::audit::{AuditDecision, AuditRecord, MAX_LINE_BYTES, Phase, RequestId};

use super::chain::{Line, LineDefect, LineHash, LineReader, parse_line};
use super::file::{open_read, unsafe_file};

/// One row of the table: a request (its decision, and its outcome once there is one), an
/// event, or an outcome whose decision is not in the part of the log read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The decision, event or (for an orphan) outcome record that starts the row.
    pub first: AuditRecord,
    /// The outcome paired with a decision.
    pub outcome: Option<AuditRecord>,
}

// === impl Row ===

impl Row {
    /// Whether this row is a decision still without outcome: it reads as `unknown`.
    pub fn is_open(&self) -> bool {
        self.first.phase == Phase::Decision && self.outcome.is_none()
    }

    /// Whether this row is a request waiting for approval: its decision is `pending`, and the
    /// second decision record will replace it.
    pub fn is_pending(&self) -> bool {
        self.is_open() && self.first.decision == Some(AuditDecision::Pending)
    }
}

/// A line that is not an audit record: where and why, never what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// The file.
    pub file: PathBuf,
    /// The 1-based line number, when known (lines found while following a file whose start was
    /// not read count from the point where following began).
    pub line: Option<u64>,
    /// Why it is not a record.
    pub defect: SkipReason,
}

/// Why a line was skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// It is not an audit record.
    Defect(LineDefect),
    /// The last line of the file has no newline (being written, or cut short by a crash).
    Incomplete,
}

// === impl SkipReason ===

impl SkipReason {
    /// A stable snake-case code.
    pub fn code(&self) -> &'static str {
        match self {
            SkipReason::Defect(defect) => defect.code(),
            SkipReason::Incomplete => "incomplete",
        }
    }
}

/// The end of a log as `mint audit tail` shows it.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The last rows, oldest first (table mode).
    pub rows: Vec<Row>,
    /// The last record lines exactly as stored, oldest first (`--json` mode).
    pub lines: Vec<String>,
    /// Lines skipped in the part read.
    pub skipped: Vec<Skipped>,
    /// Where following continues: the file read, its identity and the offset after the last
    /// complete line.
    pub end: Option<FilePosition>,
}

/// A place in a file, to continue reading from.
#[derive(Debug)]
pub struct FilePosition {
    file: File,
    id: (u64, u64),
    offset: u64,
}

/// What to collect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TailMode {
    /// Paired rows.
    Rows,
    /// Raw record lines.
    Records,
}

/// Reads the last `n` rows (or record lines) of the log at `path`.
/// Refuses a symbolic link and anything but a regular file (see `audit::file`).
pub fn read_tail(path: &Path, n: usize, mode: TailMode) -> io::Result<Snapshot> {
    let file = open_read(path)?;
    let meta = file.metadata()?;
    let size = meta.len();
    let id = (meta.dev(), meta.ino());
    let mut window = (n as u64)
        .saturating_mul(WINDOW_BYTES_PER_ROW)
        .max(MIN_WINDOW);
    loop {
        let start = size.saturating_sub(window);
        let scanned = scan(&file, start, size, mode)?;
        let enough = match mode {
            TailMode::Rows => scanned.rows.len() >= n,
            TailMode::Records => scanned.lines.len() >= n,
        };
        if enough || scanned.start == 0 {
            return scanned.into_snapshot(file, id, path, n);
        }
        window = window.saturating_mul(4);
    }
}

/// The lines of one window, read forward.
struct Scanned {
    /// Where the window's first whole line starts.
    start: u64,
    rows: Vec<Row>,
    lines: Vec<String>,
    /// Skipped lines by their index within the window (0-based).
    skipped: Vec<(u64, SkipReason)>,
    /// The offset after the last complete line.
    end: u64,
}

fn scan(file: &File, from: u64, size: u64, mode: TailMode) -> io::Result<Scanned> {
    let start = line_start_at_or_after(file, from, size)?;
    let reader = BufReader::with_capacity(
        READ_BUFFER,
        Range {
            file,
            pos: start,
            end: size,
        },
    );
    let mut lines = LineReader::new(reader, start);
    let mut scanned = Scanned {
        start,
        rows: Vec::new(),
        lines: Vec::new(),
        skipped: Vec::new(),
        end: start,
    };
    let mut rows = RowBuilder::default();
    let mut index = 0u64;
    while let Some(line) = lines.next_line()? {
        if !line.terminated {
            scanned.skipped.push((index, SkipReason::Incomplete));
            break;
        }
        scanned.end = lines.offset();
        match parse_line(&line) {
            Ok(record) => match mode {
                TailMode::Rows => rows.add(record, start == 0),
                TailMode::Records => scanned.lines.push(line_text(&line)),
            },
            Err(defect) => scanned.skipped.push((index, SkipReason::Defect(defect))),
        }
        index += 1;
    }
    scanned.rows = rows.finish();
    Ok(scanned)
}

impl Scanned {
    fn into_snapshot(
        self,
        file: File,
        id: (u64, u64),
        path: &Path,
        n: usize,
    ) -> io::Result<Snapshot> {
        let base = if self.skipped.is_empty() {
            0
        } else {
            count_newlines(&file, self.start)?
        };
        let skipped = self
            .skipped
            .into_iter()
            .map(|(index, defect)| Skipped {
                file: path.to_path_buf(),
                line: Some(base + index + 1),
                defect,
            })
            .collect();
        Ok(Snapshot {
            rows: keep_last(self.rows, n),
            lines: keep_last(self.lines, n),
            skipped,
            end: Some(FilePosition {
                file,
                id,
                offset: self.end,
            }),
        })
    }
}

fn keep_last<T>(mut items: Vec<T>, n: usize) -> Vec<T> {
    let drop = items.len().saturating_sub(n);
    items.drain(..drop);
    items
}

/// Pairs decisions with outcomes into rows, in the order of the line that starts each row.
#[derive(Default)]
struct RowBuilder {
    rows: Vec<Row>,
    by_id: HashMap<RequestId, usize>,
}

impl RowBuilder {
    /// `from_file_start`: the window starts at the start of the file, so an outcome whose
    /// decision is not in it belongs to a request decided in an earlier file and gets a row of
    /// its own; otherwise its decision lies before the window and the row is older than every
    /// row shown.
    fn add(&mut self, record: AuditRecord, from_file_start: bool) {
        match record.phase {
            Phase::Decision => {
                // A held request's second decision (approved, denied, timed out...) replaces its
                // `pending` one in the same row.
                if let Some(row) = self
                    .by_id
                    .get(&record.id)
                    .and_then(|&at| self.rows.get_mut(at))
                    .filter(|row| row.is_pending())
                {
                    row.first = record;
                    return;
                }
                self.by_id.insert(record.id.clone(), self.rows.len());
                self.rows.push(Row {
                    first: record,
                    outcome: None,
                });
            }
            Phase::Outcome => {
                let row = self
                    .by_id
                    .get(&record.id)
                    .and_then(|&at| self.rows.get_mut(at));
                match row {
                    Some(row) if row.outcome.is_none() => row.outcome = Some(record),
                    // A second outcome of a request in the window (a tunnel's `tunnel_closed`
                    // after its `tunnel_opened`) gets a row of its own, as in follow mode.
                    Some(_) => self.rows.push(Row {
                        first: record,
                        outcome: None,
                    }),
                    None if from_file_start => self.rows.push(Row {
                        first: record,
                        outcome: None,
                    }),
                    None => {}
                }
            }
            Phase::Event => self.rows.push(Row {
                first: record,
                outcome: None,
            }),
        }
    }

    fn finish(self) -> Vec<Row> {
        self.rows
    }
}

/// What following produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FollowItem {
    /// A finished row: a request whose outcome arrived, an event, or an orphan outcome.
    Row(Box<Row>),
    /// A record line as stored (`--json` mode).
    Record(String),
    /// A line that is not a record.
    Skipped(Skipped),
    /// The log was rotated: following continues in the new file.
    Rotated,
}

/// Follows a log as it grows and rotates.
#[derive(Debug)]
pub struct Follower {
    path: PathBuf,
    mode: TailMode,
    current: Option<Source>,
    /// The file the path named before a rotation, read until its grace period ends.
    old: Option<(Source, Instant)>,
    /// Decisions waiting for their outcome, oldest first.
    open: VecDeque<RequestId>,
    open_rows: HashMap<RequestId, Row>,
}

/// One file being followed.
#[derive(Debug)]
struct Source {
    file: File,
    id: (u64, u64),
    offset: u64,
    /// Bytes of a line whose newline has not arrived yet (at most `MAX_LINE_BYTES` + 1 kept).
    partial: Vec<u8>,
    partial_len: u64,
    /// Lines read from this file, for skip reports.
    lines: u64,
    /// Whether `lines` counts from the start of the file.
    lines_exact: bool,
}

// === impl Follower ===

impl Follower {
    /// Follows `path` from where `snapshot` ended; the snapshot's open decisions (rows still
    /// `unknown`) get their row printed again once their outcome arrives.
    pub fn new(path: &Path, mode: TailMode, snapshot: &mut Snapshot) -> Follower {
        let current = snapshot.end.take().map(|end| Source {
            file: end.file,
            id: end.id,
            offset: end.offset,
            partial: Vec::new(),
            partial_len: 0,
            lines: 0,
            lines_exact: false,
        });
        let mut follower = Follower {
            path: path.to_path_buf(),
            mode,
            current,
            old: None,
            open: VecDeque::new(),
            open_rows: HashMap::new(),
        };
        for row in snapshot.rows.iter().filter(|row| row.is_open()) {
            follower.remember(row.clone());
        }
        follower
    }

    /// Reads what was appended since the last poll, handles rotation, and hands each item to
    /// `emit`. Call it every [`FOLLOW_POLL`].
    pub fn poll(&mut self, emit: &mut dyn FnMut(FollowItem) -> io::Result<()>) -> io::Result<()> {
        if let Some((mut old, until)) = self.old.take() {
            self.drain(&mut old, emit)?;
            if Instant::now() < until {
                self.old = Some((old, until));
            }
        }
        if let Some(mut current) = self.current.take() {
            let result = self.drain(&mut current, emit);
            self.current = Some(current);
            result?;
        }
        self.check_rotation(emit)
    }

    fn check_rotation(
        &mut self,
        emit: &mut dyn FnMut(FollowItem) -> io::Result<()>,
    ) -> io::Result<()> {
        let file = match open_read(&self.path) {
            Ok(file) => file,
            // Something planted at the path that is not a regular file: stop, do not wait.
            Err(error) if unsafe_file(&error).is_some() => return Err(error),
            // Renamed away and not recreated yet: keep reading the old file.
            Err(_) => return Ok(()),
        };
        let meta = file.metadata()?;
        let id = (meta.dev(), meta.ino());
        match &mut self.current {
            Some(current) if current.id == id => {
                if meta.len() < current.offset {
                    // Truncated in place: start again from its beginning.
                    current.offset = 0;
                    current.partial.clear();
                    current.partial_len = 0;
                    current.lines = 0;
                    current.lines_exact = true;
                }
                Ok(())
            }
            _ => {
                let fresh = Source {
                    file,
                    id,
                    offset: 0,
                    partial: Vec::new(),
                    partial_len: 0,
                    lines: 0,
                    lines_exact: true,
                };
                if let Some(previous) = self.current.replace(fresh) {
                    self.old = Some((previous, Instant::now() + ROTATION_GRACE));
                    emit(FollowItem::Rotated)?;
                }
                if let Some(mut current) = self.current.take() {
                    let result = self.drain(&mut current, emit);
                    self.current = Some(current);
                    result?;
                }
                Ok(())
            }
        }
    }

    /// Reads `source` from its offset to its end, emitting each complete line.
    fn drain(
        &mut self,
        source: &mut Source,
        emit: &mut dyn FnMut(FollowItem) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut buf = vec![0u8; READ_BUFFER];
        let path = self.path.clone();
        loop {
            let n = match source.file.read_at(&mut buf, source.offset) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            };
            source.offset += n as u64;
            let mut rest = buf.get(..n).unwrap_or_default();
            while let Some(at) = rest.iter().position(|&b| b == b'\n') {
                let (head, tail) = rest.split_at(at);
                source.push_partial(head);
                rest = tail.get(1..).unwrap_or_default();
                let line = source.take_line();
                source.lines += 1;
                let number = source.lines_exact.then_some(source.lines);
                self.line(&line, number, &path, emit)?;
            }
            source.push_partial(rest);
        }
    }

    fn line(
        &mut self,
        line: &Line,
        number: Option<u64>,
        path: &Path,
        emit: &mut dyn FnMut(FollowItem) -> io::Result<()>,
    ) -> io::Result<()> {
        let record = match parse_line(line) {
            Ok(record) => record,
            Err(defect) => {
                return emit(FollowItem::Skipped(Skipped {
                    file: path.to_path_buf(),
                    line: number,
                    defect: SkipReason::Defect(defect),
                }));
            }
        };
        if self.mode == TailMode::Records {
            return emit(FollowItem::Record(line_text(line)));
        }
        match record.phase {
            Phase::Decision => {
                // A held request's second decision replaces its `pending` one.
                if let Some(row) = self
                    .open_rows
                    .get_mut(&record.id)
                    .filter(|row| row.is_pending())
                {
                    row.first = record;
                    return Ok(());
                }
                if let Some(evicted) = self.remember(Row {
                    first: record,
                    outcome: None,
                }) {
                    emit(FollowItem::Row(Box::new(evicted)))?;
                }
                Ok(())
            }
            Phase::Outcome => match self.open_rows.remove(&record.id) {
                Some(mut row) => {
                    self.open.retain(|id| *id != record.id);
                    row.outcome = Some(record);
                    emit(FollowItem::Row(Box::new(row)))
                }
                None => emit(FollowItem::Row(Box::new(Row {
                    first: record,
                    outcome: None,
                }))),
            },
            Phase::Event => emit(FollowItem::Row(Box::new(Row {
                first: record,
                outcome: None,
            }))),
        }
    }

    /// Keeps an open decision until its outcome arrives; past [`MAX_OPEN_REQUESTS`], returns
    /// the oldest so it is shown as `unknown`.
    fn remember(&mut self, row: Row) -> Option<Row> {
        let id = row.first.id.clone();
        if self.open_rows.insert(id.clone(), row).is_none() {
            self.open.push_back(id);
        }
        if self.open.len() > MAX_OPEN_REQUESTS {
            let oldest = self.open.pop_front()?;
            return self.open_rows.remove(&oldest);
        }
        None
    }
}

// === impl Source ===

impl Source {
    fn push_partial(&mut self, bytes: &[u8]) {
        let room = (MAX_LINE_BYTES + 1).saturating_sub(self.partial.len());
        self.partial
            .extend_from_slice(bytes.get(..room.min(bytes.len())).unwrap_or_default());
        self.partial_len += bytes.len() as u64;
    }

    fn take_line(&mut self) -> Line {
        let bytes = std::mem::take(&mut self.partial);
        let len = std::mem::take(&mut self.partial_len);
        Line {
            // Tail never checks the chain; a line too long to keep whole is skipped anyway.
            hash: LineHash::GENESIS,
            bytes,
            len,
            terminated: true,
        }
    }
}

/// The offset of the first line that starts at or after `from`.
fn line_start_at_or_after(file: &File, from: u64, size: u64) -> io::Result<u64> {
    if from == 0 {
        return Ok(0);
    }
    let mut pos = from - 1;
    let mut buf = vec![0u8; 8192];
    while pos < size {
        let n = file.read_at(&mut buf, pos)?;
        if n == 0 {
            break;
        }
        if let Some(at) = buf
            .get(..n)
            .and_then(|b| b.iter().position(|&b| b == b'\n'))
        {
            return Ok(pos + at as u64 + 1);
        }
        pos += n as u64;
    }
    Ok(size)
}

/// The number of newlines before `end`: the line number base of a window starting there.
fn count_newlines(file: &File, end: u64) -> io::Result<u64> {
    let mut reader = Range { file, pos: 0, end };
    let mut buf = vec![0u8; READ_BUFFER];
    let mut count = 0u64;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            return Ok(count);
        }
        count += buf
            .get(..n)
            .unwrap_or_default()
            .iter()
            .filter(|&&b| b == b'\n')
            .count() as u64;
    }
}

fn line_text(line: &Line) -> String {
    // Only called for lines that parsed, which are UTF-8.
    String::from_utf8_lossy(&line.bytes).into_owned()
}

/// Reads `file` from `pos` to `end` with positioned reads.
struct Range<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl Read for Range<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = usize::try_from(self.end.saturating_sub(self.pos)).unwrap_or(usize::MAX);
        let want = left.min(buf.len());
        if want == 0 {
            return Ok(0);
        }
        let n = self
            .file
            .read_at(buf.get_mut(..want).unwrap_or_default(), self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// How often `mint audit tail -f` looks for new lines.
pub const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// How long a rotated file is still read after the path names a new one: a running writer
/// notices the rotation within one flusher tick and may append to the old file until then.
pub const ROTATION_GRACE: Duration = Duration::from_secs(2);

/// The most decisions following keeps while they wait for their outcome.
pub const MAX_OPEN_REQUESTS: usize = 10_000;

/// The first window read per requested row; records are a few hundred bytes each.
const WINDOW_BYTES_PER_ROW: u64 = 2048;
const MIN_WINDOW: u64 = 64 * 1024;
const READ_BUFFER: usize = 64 * 1024;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use mint_policy::audit::{AuditDecision, ChainHash, Outcome, Timestamp};

    use super::*;

    fn record(phase: Phase, id: &str) -> AuditRecord {
        let ts = Timestamp::from_unix_millis(0).unwrap();
        let id = RequestId::new(id).unwrap();
        match phase {
            Phase::Decision => {
                AuditRecord::decision(ts, id, AuditDecision::Allow, ChainHash::genesis())
            }
            _ => AuditRecord::outcome(ts, id, Outcome::Completed, ChainHash::genesis()),
        }
    }

    /// A tunnel's `CONNECT` has two outcomes (`tunnel_opened`, then `tunnel_closed`): the second
    /// gets a row of its own, also in a window that does not start at the file's start.
    #[test]
    fn a_second_outcome_of_a_request_gets_its_own_row() {
        for from_file_start in [true, false] {
            let mut rows = RowBuilder::default();
            rows.add(record(Phase::Decision, "c-1"), from_file_start);
            rows.add(record(Phase::Outcome, "c-1"), from_file_start);
            rows.add(record(Phase::Outcome, "c-1"), from_file_start);
            let rows = rows.finish();
            assert_eq!(rows.len(), 2, "{from_file_start}");
            assert!(rows[0].outcome.is_some());
            assert_eq!(rows[1].first.phase, Phase::Outcome);
        }
    }
}
