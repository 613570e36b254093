//! `audit_tail`: the newest records of the audit log.
//!
//! Reads the file backwards in blocks from its end until it holds `n` records, the records found
//! fill one response, it reaches the start of the file, or it has looked at `MAX_SCAN_BYTES` or
//! `MAX_SCAN_LINES`; memory stays bounded by one response's worth of records and one line of
//! `MAX_LINE_BYTES`, whatever the file holds. Each line goes through
//! `mint_policy::audit::parse_record`: records are returned (oldest first), and every other line
//! (not UTF-8, not JSON, not a valid record, too long, blank) is only counted in `skipped`,
//! never echoed, not even in part. A line that opens a top-level `capabilities` key makes the
//! whole call a refusal: the file is a capabilities file under another name.
//!
//! Only a file whose first line is an audit record is read at all (`first_line_is_a_record`):
//! any other file gets the uniform `tools::unreadable` answer, without a `skipped` count that
//! would tell its number of lines.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use mint_policy::audit::{AuditRecord, MAX_LINE_BYTES, parse_record};
use serde::Serialize;

use super::{Arguments, pretty, unreadable};
use crate::file_guard::{FileError, Guard, is_capabilities_key};
use crate::jsonrpc::RpcError;
use crate::paths::Config;
use crate::transport::MAX_MESSAGE_BYTES;

/// Records returned when the call gives no `n`.
pub(crate) const DEFAULT_EVENTS: u64 = 20;

/// The most records one call returns; a larger `n` means this many. A 1 MiB response holds
/// about this many typical records anyway.
pub(crate) const MAX_EVENTS: u64 = 1000;

/// How far back from the end of the file one call looks, so a huge file of non-records (or a
/// sparse file) cannot stall the server.
pub(crate) const MAX_SCAN_BYTES: u64 = 64 * 1024 * 1024;

/// How many lines one call looks at, at most, so a file of tiny lines costs no more than
/// 100,000 parse attempts whatever `MAX_SCAN_BYTES` would allow.
pub(crate) const MAX_SCAN_LINES: usize = 100_000;

/// Returns the last `n` records of the audit log at `path`, or of the configured one.
pub(super) fn call(args: Arguments<'_>, config: &Config) -> Result<String, RpcError> {
    let n = args
        .positive_integer("n")?
        .unwrap_or(DEFAULT_EVENTS)
        .min(MAX_EVENTS);
    let path = args
        .path("path")?
        .map_or_else(|| config.audit_log.clone(), PathBuf::from);
    let name = path.display().to_string();
    let open = Guard::load(config)
        .open(&path)
        .and_then(|open| first_line_is_a_record(&open.file).map(|()| open))
        .map_err(|error| unreadable("audit log", "an audit log", &name, error))?;
    // INVARIANT: `n` is at most `MAX_EVENTS`, which fits any `usize`.
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    let budget = TEXT_BUDGET.saturating_sub(frame_len(&name)?);
    let mut tail = read_tail(&open.file, open.len, n, budget)
        .map_err(|error| unreadable("audit log", "an audit log", &name, error))?;
    if tail.full {
        tracing::info!(
            kept = tail.records.len(),
            "Audit tail cut to fit one response"
        );
    }
    render(&name, tail.records.make_contiguous(), tail.skipped)
}

#[derive(Serialize)]
struct AuditTail<'a> {
    path: &'a str,
    count: usize,
    events: &'a [AuditRecord],
    skipped: usize,
}

/// The records found and the lines skipped, from the newest backwards.
#[derive(Debug, Default)]
struct Tail {
    /// Oldest first.
    records: VecDeque<AuditRecord>,
    skipped: usize,
    /// Lines looked at: records and skipped lines.
    lines: usize,
    /// The room the records take in the response text, as `record_len` measures it.
    used: usize,
    /// Whether a record was left out because the response was full.
    full: bool,
}

/// Whether the file's first line is an audit record, the mark of an audit log (whose first
/// line the broker always writes as one). Reads that line and nothing more, at most
/// `MAX_LINE_BYTES` and its line feed: no other file is read further, so `skipped` never counts
/// the lines of a file that is not a log, and an empty file, like a missing one, is no log.
fn first_line_is_a_record(file: &File) -> Result<(), FileError> {
    let mut head = vec![0; MAX_LINE_BYTES + 1];
    let mut len = 0;
    let line_end = loop {
        let Some(room) = head.get_mut(len..) else {
            break None;
        };
        if room.is_empty() {
            break None;
        }
        let read = file.read_at(room, len as u64)?;
        let start = len;
        len += read;
        let found = head
            .get(start..len)
            .and_then(|new| new.iter().position(|&byte| byte == b'\n'))
            .map(|at| start + at);
        if found.is_some() {
            break found;
        }
        if read == 0 {
            // The end of the file ends the line.
            break (len > 0).then_some(len);
        }
    };
    let record = line_end
        .and_then(|end| head.get(..end))
        .and_then(|line| std::str::from_utf8(line).ok())
        .is_some_and(|line| parse_record(line).is_ok());
    if record {
        Ok(())
    } else {
        Err(FileError::NotRecognised)
    }
}

/// Pretty-prints the result. `read_tail` keeps only records that fit in one response line; as
/// a safety net, the newest records that fit are kept should they not.
fn render(path: &str, events: &[AuditRecord], skipped: usize) -> Result<String, RpcError> {
    let text = |kept: usize| {
        // INVARIANT: `kept <= events.len()`.
        let events = events.get(events.len() - kept..).unwrap_or_default();
        pretty(&AuditTail {
            path,
            count: events.len(),
            events,
            skipped,
        })
    };
    let fits = |text: &str| escaped_len(text) <= TEXT_BUDGET;
    let all = text(events.len())?;
    if events.is_empty() || fits(&all) {
        return Ok(all);
    }
    // Binary search for the most records that fit: `low` always fits (or is zero).
    let (mut low, mut high) = (0, events.len() - 1);
    let mut best = text(0)?;
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        let candidate = text(mid)?;
        if fits(&candidate) {
            low = mid;
            best = candidate;
        } else {
            high = mid - 1;
        }
    }
    tracing::info!(
        kept = low,
        found = events.len(),
        "Audit tail cut to fit one response"
    );
    Ok(best)
}

/// The room the payload takes in the response text without its records: the pretty-printed
/// result with no event and the largest counts, plus the brackets' line breaks.
fn frame_len(path: &str) -> Result<usize, RpcError> {
    // INVARIANT: `MAX_EVENTS` fits any `usize`.
    let count = usize::try_from(MAX_EVENTS).unwrap_or(usize::MAX);
    let frame = pretty(&AuditTail {
        path,
        count,
        events: &[],
        skipped: MAX_SCAN_LINES,
    })?;
    Ok(escaped_len(&frame) + FRAME_SLACK)
}

/// The room one record takes in the response text: pretty-printed inside `events` (four more
/// spaces on each of its lines), followed by `,` and a line feed, all escaped as a JSON string.
fn record_len(record: &AuditRecord) -> usize {
    let mut measure = Measure { len: 4 + 3 };
    match serde_json::to_writer_pretty(&mut measure, record) {
        Ok(()) => measure.len,
        Err(_) => usize::MAX,
    }
}

/// Counts what written bytes take escaped in a JSON string, each line feed with the indent of
/// one more nesting level.
struct Measure {
    len: usize,
}

impl io::Write for Measure {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let len = bytes
            .iter()
            .map(|&byte| escaped_byte_len(byte) + if byte == b'\n' { 4 } else { 0 })
            .sum::<usize>();
        self.len = self.len.saturating_add(len);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The length of `text` written as a JSON string.
fn escaped_len(text: &str) -> usize {
    2 + text.bytes().map(escaped_byte_len).sum::<usize>()
}

fn escaped_byte_len(byte: u8) -> usize {
    match byte {
        b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
        0..=0x1f => 6,
        _ => 1,
    }
}

/// Reads `file` (of `len` bytes) backwards until `n` records are found, or the records found
/// take `budget` bytes of the response text.
fn read_tail(file: &File, len: u64, n: usize, budget: usize) -> Result<Tail, FileError> {
    let mut tail = Tail::default();
    if n == 0 {
        return Ok(tail);
    }
    let done = |tail: &Tail| tail.records.len() >= n || tail.full || tail.lines >= MAX_SCAN_LINES;
    let floor = len.saturating_sub(MAX_SCAN_BYTES);
    let mut line = LineAssembly::default();
    let mut block = vec![0; BLOCK_BYTES];
    let mut end = len;
    while end > floor {
        let start = end.saturating_sub(BLOCK_BYTES as u64).max(floor);
        // INVARIANT: `end - start <= BLOCK_BYTES`.
        let chunk = block
            .get_mut(..usize::try_from(end - start).unwrap_or(BLOCK_BYTES))
            .unwrap_or_default();
        file.read_exact_at(chunk, start)?;
        let mut segment_end = chunk.len();
        while let Some(newline) = chunk
            .get(..segment_end)
            .and_then(|segment| segment.iter().rposition(|&byte| byte == b'\n'))
        {
            line.prepend(chunk.get(newline + 1..segment_end).unwrap_or_default());
            line.finish(&mut tail, budget)?;
            if done(&tail) {
                return Ok(tail);
            }
            segment_end = newline;
        }
        line.prepend(chunk.get(..segment_end).unwrap_or_default());
        end = start;
    }
    // At the start of the file what remains is its first line. Past the scan window it is only
    // the end of a line, which is left unread.
    if end == 0 {
        line.finish(&mut tail, budget)?;
    }
    Ok(tail)
}

/// The line being put together from the blocks read backwards: its bytes, unless it already
/// outgrew `MAX_LINE_BYTES` (then only that fact is kept).
#[derive(Debug)]
struct LineAssembly {
    bytes: Vec<u8>,
    too_long: bool,
    /// Whether the next line to finish is the text after the file's last line feed, which is
    /// no line at all when empty.
    at_end_of_file: bool,
}

impl Default for LineAssembly {
    fn default() -> Self {
        LineAssembly {
            bytes: Vec::new(),
            too_long: false,
            at_end_of_file: true,
        }
    }
}

// === impl LineAssembly ===

impl LineAssembly {
    /// Puts `piece`, which comes just before what was assembled so far, in front.
    fn prepend(&mut self, piece: &[u8]) {
        if self.too_long || piece.is_empty() {
            return;
        }
        if self.bytes.len() + piece.len() > MAX_LINE_BYTES {
            self.too_long = true;
            self.bytes = Vec::new();
        } else {
            self.bytes.splice(0..0, piece.iter().copied());
        }
    }

    /// Classifies the assembled line and starts a new one. A record is kept while the records
    /// kept take at most `budget` bytes of the response; the first one that does not fit marks
    /// the tail full. A capabilities file's key refuses the file.
    fn finish(&mut self, tail: &mut Tail, budget: usize) -> Result<(), FileError> {
        let at_end_of_file = std::mem::replace(&mut self.at_end_of_file, false);
        let too_long = std::mem::replace(&mut self.too_long, false);
        if at_end_of_file && !too_long && self.bytes.is_empty() {
            return Ok(());
        }
        if !too_long && is_capabilities_key(&self.bytes) {
            return Err(FileError::CapabilitiesFile);
        }
        tail.lines += 1;
        let record = (!too_long)
            .then(|| std::str::from_utf8(&self.bytes).ok())
            .flatten()
            .and_then(|text| parse_record(text).ok());
        match record {
            Some(record) => {
                let used = tail.used.saturating_add(record_len(&record));
                if used > budget {
                    tail.full = true;
                } else {
                    tail.used = used;
                    tail.records.push_front(record);
                }
            }
            None => tail.skipped += 1,
        }
        self.bytes.clear();
        Ok(())
    }
}

/// The room for the pretty-printed payload in one response line: the 1 MiB message limit less
/// the envelope around the text (the request id is at most 1 KiB).
const TEXT_BUDGET: usize = MAX_MESSAGE_BYTES - 2048;

/// Room for the line breaks that open and close a non-empty `events` array, and some to spare.
const FRAME_SLACK: usize = 16;

const BLOCK_BYTES: usize = 64 * 1024;

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    const EXAMPLE: &str = include_str!("../../../examples/audit.log");

    fn tail_of(content: &[u8], n: usize) -> Tail {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(content).unwrap();
        read_tail(&file, content.len() as u64, n, usize::MAX).unwrap()
    }

    fn ids(tail: &Tail) -> Vec<String> {
        tail.records.iter().map(|r| r.to_line()).collect()
    }

    #[test]
    fn returns_the_last_records_oldest_first() {
        let lines: Vec<&str> = EXAMPLE.lines().collect();
        let tail = tail_of(EXAMPLE.as_bytes(), 3);
        assert_eq!(ids(&tail), lines[lines.len() - 3..]);
        assert_eq!(tail.skipped, 0);
        let all = tail_of(EXAMPLE.as_bytes(), 1000);
        assert_eq!(all.records.len(), lines.len());
    }

    #[test]
    fn counts_other_lines_without_keeping_them() {
        let mut content = Vec::new();
        let lines: Vec<&str> = EXAMPLE.lines().collect();
        content.extend_from_slice(b"not json\n");
        content.extend_from_slice(lines[0].as_bytes());
        content.extend_from_slice(b"\n\n{\"v\":1}\n\xff\xfe\n");
        content.extend_from_slice(&vec![b'x'; MAX_LINE_BYTES * 3]);
        content.extend_from_slice(b"\n");
        content.extend_from_slice(lines[1].as_bytes());
        content.extend_from_slice(b"\r\n");
        content.extend_from_slice(lines[2].as_bytes());
        // No final line feed: the last line still counts.
        let tail = tail_of(&content, 100);
        assert_eq!(ids(&tail), [lines[0], lines[2]]);
        // not json, blank, {"v":1}, invalid UTF-8, too long, CRLF line.
        assert_eq!(tail.skipped, 6);
    }

    #[test]
    fn stops_as_soon_as_it_has_n_records() {
        let mut content = b"garbage\n".repeat(10);
        content.extend_from_slice(EXAMPLE.as_bytes());
        let tail = tail_of(&content, 2);
        assert_eq!(tail.records.len(), 2);
        assert_eq!(tail.skipped, 0);
    }

    #[test]
    fn lines_across_block_boundaries_are_put_together() {
        let line = EXAMPLE.lines().next().unwrap();
        let mut content = Vec::new();
        while content.len() < BLOCK_BYTES * 3 {
            content.extend_from_slice(line.as_bytes());
            content.push(b'\n');
        }
        let count = content.len() / (line.len() + 1);
        let tail = tail_of(&content, usize::MAX);
        assert_eq!(tail.records.len(), count);
        assert_eq!(tail.skipped, 0);
    }

    #[test]
    fn returns_a_closed_tunnels_summary_whole() {
        let line = r#"{"v":1,"ts":"2026-11-30T05:39:21.000Z","id":"req-1","phase":"outcome","method":"CONNECT","scheme":"https","host":"api.github.com","port":443,"outcome":"completed","status":200,"bytes_up":1517,"bytes_down":6004,"duration_ms":877,"requests":2,"ended":"client_closed","reason":"tunnel_closed","prev":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}"#;
        let mut tail = tail_of(format!("{line}\n").as_bytes(), 5);
        assert_eq!((tail.records.len(), tail.skipped), (1, 0));
        let text = render("audit.log", tail.records.make_contiguous(), 0).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let event = &value["events"][0];
        assert_eq!(event["requests"], 2, "{event}");
        assert_eq!(event["ended"], "client_closed", "{event}");
        assert_eq!(event["reason"], "tunnel_closed", "{event}");
    }

    #[test]
    fn empty_files_have_no_line() {
        let tail = tail_of(b"", 5);
        assert_eq!((tail.records.len(), tail.skipped), (0, 0));
        let tail = tail_of(b"\n", 5);
        assert_eq!((tail.records.len(), tail.skipped), (0, 1));
    }

    #[test]
    fn renders_the_newest_records_that_fit() {
        let record = parse_record(EXAMPLE.lines().next().unwrap()).unwrap();
        let many = vec![record; 5000];
        let text = render("audit.log", &many, 0).unwrap();
        assert!(escaped_len(&text) <= TEXT_BUDGET);
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let count = value["count"].as_u64().unwrap() as usize;
        assert!(count > 100 && count < 5000, "{count}");
        assert_eq!(value["events"].as_array().unwrap().len(), count);
    }

    #[test]
    fn stops_after_the_line_limit() {
        let mut content = EXAMPLE.as_bytes().to_vec();
        content.extend_from_slice(&b"x\n".repeat(MAX_SCAN_LINES + 10));
        let tail = tail_of(&content, 5);
        assert_eq!((tail.records.len(), tail.skipped), (0, MAX_SCAN_LINES));
        assert_eq!(tail.lines, MAX_SCAN_LINES);
    }

    #[test]
    fn keeps_only_the_newest_records_that_fit_the_budget() {
        let lines: Vec<&str> = EXAMPLE.lines().collect();
        let records: Vec<AuditRecord> = lines.iter().map(|l| parse_record(l).unwrap()).collect();
        let last_two: usize = records[records.len() - 2..].iter().map(record_len).sum();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(EXAMPLE.as_bytes()).unwrap();
        let tail = read_tail(&file, EXAMPLE.len() as u64, 1000, last_two).unwrap();
        assert_eq!(ids(&tail), lines[lines.len() - 2..]);
        assert!(tail.full);
        assert_eq!(tail.used, last_two);
    }

    #[test]
    fn the_measured_room_matches_the_rendered_text() {
        let records: Vec<AuditRecord> = EXAMPLE
            .lines()
            .map(|line| parse_record(line).unwrap())
            .collect();
        let path = "a \"quoted\"\tpath";
        let text = render(path, &records, MAX_SCAN_LINES).unwrap();
        let measured: usize = records.iter().map(record_len).sum();
        let room = frame_len(path).unwrap() + measured;
        // Never short, and over by little more than the slack.
        let rendered = escaped_len(&text);
        assert!(room >= rendered, "{room} {rendered}");
        assert!(room - rendered <= FRAME_SLACK + 4, "{room} {rendered}");
    }

    #[test]
    fn a_capabilities_key_refuses_the_log() {
        let mut file = tempfile::tempfile().unwrap();
        let content = b"version: 1\ncapabilities:\n  - id: c1\n";
        file.write_all(content).unwrap();
        assert_eq!(
            read_tail(&file, content.len() as u64, 5, usize::MAX).unwrap_err(),
            FileError::CapabilitiesFile
        );
    }

    #[test]
    fn escaped_length_matches_serde_json() {
        let text = "a\"b\\c\nd\u{1}e\u{7f}é";
        assert_eq!(
            escaped_len(text),
            serde_json::to_string(text).unwrap().len()
        );
    }
}
