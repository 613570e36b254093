//! The hash chain over the audit log's lines, and reading lines back with their hashes.
//!
//! Every line of the log carries in `prev` the SHA-256 of the previous line's bytes (without the
//! newline); the first line of a log carries [`LineHash::GENESIS`] (`sha256:` and 64 zeros). The
//! chain is over *lines*, not records: a line that is not a record (a fragment left by a crash)
//! still has a hash, and the line after it chains from that hash, so even a fragment cannot be
//! changed or removed unnoticed.
//!
//! The writer, `mint audit verify` and `mint audit tail` all read lines through [`LineReader`],
//! which hashes a line of any length while keeping at most [`MAX_LINE_BYTES`] + 1 of its bytes
//! in memory. Nothing here logs or returns the contents of a line in an error.

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead};
use std::os::unix::fs::FileExt;

use mint_policy::audit::{ChainHash, MAX_LINE_BYTES};
use sha2::{Digest, Sha256};

/// The SHA-256 of one line's bytes, newline excluded: what the next line carries as `prev`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LineHash([u8; 32]);

// === impl LineHash ===

impl LineHash {
    /// The `prev` of the first line of a log: all zeros, written `sha256:` and 64 zeros
    /// (`mint_policy::audit::GENESIS_PREV`).
    pub const GENESIS: LineHash = LineHash([0; 32]);

    /// The hash of `line`, which must not include its newline.
    pub fn of(line: &[u8]) -> LineHash {
        LineHash(Sha256::digest(line).into())
    }

    /// Reads a record's `prev` back into a hash. `ChainHash` has already checked the grammar
    /// (`sha256:` and 64 lowercase hex digits); `None` only if that promise were ever broken.
    pub fn from_chain_hash(hash: &ChainHash) -> Option<LineHash> {
        let hex = hash.as_str().strip_prefix(PREFIX)?.as_bytes();
        if hex.len() != 64 {
            return None;
        }
        let mut bytes = [0u8; 32];
        for (byte, pair) in bytes.iter_mut().zip(hex.chunks_exact(2)) {
            let (hi, lo) = (hex_value(*pair.first()?)?, hex_value(*pair.get(1)?)?);
            *byte = hi << 4 | lo;
        }
        Some(LineHash(bytes))
    }

    /// The 64 lowercase hex digits, without the `sha256:` prefix.
    pub fn hex(&self) -> [u8; 64] {
        let mut out = [0u8; 64];
        for (pair, byte) in out.chunks_exact_mut(2).zip(self.0) {
            pair.copy_from_slice(&[HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0x0f)]]);
        }
        out
    }

    /// The hash as a record's `prev` value.
    pub fn to_chain_hash(&self) -> ChainHash {
        match ChainHash::new(self.to_string()) {
            Ok(hash) => hash,
            // INVARIANT: `sha256:` and 64 lowercase hex digits is exactly the ChainHash grammar;
            // genesis is the only other value a caller could be handed, and it is never wrong.
            Err(_) => ChainHash::genesis(),
        }
    }

    /// Whether this is the genesis value.
    pub fn is_genesis(&self) -> bool {
        *self == LineHash::GENESIS
    }
}

impl fmt::Display for LineHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(PREFIX)?;
        // INVARIANT: hex() yields ASCII digits only.
        f.write_str(std::str::from_utf8(&self.hex()).unwrap_or_default())
    }
}

impl fmt::Debug for LineHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// One line read back from a log: its hash over all its bytes, and at most
/// [`MAX_LINE_BYTES`] + 1 of those bytes (enough to tell that a longer line is too long).
#[derive(Debug)]
pub struct Line {
    /// The first bytes of the line, newline excluded.
    pub bytes: Vec<u8>,
    /// The length of the whole line in bytes, newline excluded.
    pub len: u64,
    /// The hash of the whole line.
    pub hash: LineHash,
    /// Whether a newline ended the line; `false` only for a final line cut short.
    pub terminated: bool,
}

// === impl Line ===

impl Line {
    /// Whether the line was longer than what was kept of it.
    pub fn is_too_long(&self) -> bool {
        self.len > MAX_LINE_BYTES as u64
    }

    /// The line as text, when it is short enough to be a record and is UTF-8.
    pub fn text(&self) -> Result<&str, LineDefect> {
        if self.is_too_long() {
            return Err(LineDefect::TooLong);
        }
        std::str::from_utf8(&self.bytes).map_err(|error| LineDefect::NotUtf8 {
            column: error.valid_up_to() + 1,
        })
    }
}

/// Why a line is not an audit record, by kind and column only: never a byte of the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineDefect {
    /// Longer than [`MAX_LINE_BYTES`].
    TooLong,
    /// Not UTF-8; the column is the 1-based byte offset of the first bad byte.
    NotUtf8 {
        /// Where the bad byte is.
        column: usize,
    },
    /// Refused by `mint_policy::audit::parse_record`.
    Record(mint_policy::audit::RecordError),
}

// === impl LineDefect ===

impl LineDefect {
    /// A stable snake-case code: `too_long`, `not_utf8`, or the record error's code.
    pub fn code(&self) -> &'static str {
        match self {
            LineDefect::TooLong => "too_long",
            LineDefect::NotUtf8 { .. } => "not_utf8",
            LineDefect::Record(error) => error.kind().code(),
        }
    }
}

impl fmt::Display for LineDefect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LineDefect::TooLong => write!(f, "line longer than {MAX_LINE_BYTES} bytes"),
            LineDefect::NotUtf8 { column } => write!(f, "column {column}: not UTF-8"),
            LineDefect::Record(error) => error.fmt(f),
        }
    }
}

/// Parses a line read back from a log as an audit record.
pub fn parse_line(line: &Line) -> Result<mint_policy::audit::AuditRecord, LineDefect> {
    mint_policy::audit::parse_record(line.text()?).map_err(LineDefect::Record)
}

/// Reads lines one at a time from a buffered reader, hashing each whole line and keeping at most
/// [`MAX_LINE_BYTES`] + 1 of its bytes.
#[derive(Debug)]
pub struct LineReader<R> {
    reader: R,
    /// Bytes consumed so far: the offset where the next line starts.
    offset: u64,
}

// === impl LineReader ===

impl<R: BufRead> LineReader<R> {
    /// Reads from `reader`, whose current position is counted as offset `start`.
    pub fn new(reader: R, start: u64) -> LineReader<R> {
        LineReader {
            reader,
            offset: start,
        }
    }

    /// The offset just past the last line returned (past its newline).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The next line, or `None` at the end. A final line without a newline is returned with
    /// `terminated: false`; a reader that follows a growing file should hold such a line back.
    pub fn next_line(&mut self) -> io::Result<Option<Line>> {
        let mut hasher = Sha256::new();
        let mut bytes = Vec::new();
        let mut len: u64 = 0;
        loop {
            let chunk = match self.reader.fill_buf() {
                Ok(chunk) => chunk,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            };
            if chunk.is_empty() {
                if len == 0 {
                    return Ok(None);
                }
                return Ok(Some(Line {
                    bytes,
                    len,
                    hash: LineHash(hasher.finalize().into()),
                    terminated: false,
                }));
            }
            let (content, used, done) = match chunk.iter().position(|&b| b == b'\n') {
                Some(at) => (chunk.get(..at).unwrap_or_default(), at + 1, true),
                None => (chunk, chunk.len(), false),
            };
            hasher.update(content);
            let room = (MAX_LINE_BYTES + 1).saturating_sub(bytes.len());
            bytes.extend_from_slice(content.get(..room.min(content.len())).unwrap_or_default());
            len += content.len() as u64;
            self.reader.consume(used);
            self.offset += used as u64;
            if done {
                return Ok(Some(Line {
                    bytes,
                    len,
                    hash: LineHash(hasher.finalize().into()),
                    terminated: true,
                }));
            }
        }
    }
}

/// The last line of a file, as the writer needs it to continue the chain.
#[derive(Debug)]
pub struct LastLine {
    /// The line (its hash, and whether a newline ends it).
    pub line: Line,
    /// The offset where it starts.
    pub start: u64,
}

/// Reads the last line of `file`, whose length is `size`, without reading the whole file:
/// scans backward for the newline before it, then hashes it forward. `None` for an empty file.
pub fn read_last_line(file: &File, size: u64) -> io::Result<Option<LastLine>> {
    if size == 0 {
        return Ok(None);
    }
    let mut last = [0u8; 1];
    file.read_exact_at(&mut last, size - 1)?;
    // The content of the last line ends before a final newline, or at the end of a torn file.
    let end = if last == [b'\n'] { size - 1 } else { size };
    let mut start = 0;
    let mut pos = end;
    let mut chunk = vec![0u8; SCAN_CHUNK];
    'scan: while pos > 0 {
        let from = pos.saturating_sub(SCAN_CHUNK as u64);
        let want = usize::try_from(pos - from).unwrap_or(SCAN_CHUNK);
        let buf = chunk.get_mut(..want).unwrap_or_default();
        file.read_exact_at(buf, from)?;
        if let Some(at) = buf.iter().rposition(|&b| b == b'\n') {
            start = from + at as u64 + 1;
            break 'scan;
        }
        pos = from;
    }
    let reader = io::BufReader::new(RangeReader {
        file,
        pos: start,
        end,
    });
    let mut lines = LineReader::new(reader, start);
    let Some(mut line) = lines.next_line()? else {
        // An empty last line: the file ends with two newlines in a row.
        return Ok(Some(LastLine {
            line: Line {
                bytes: Vec::new(),
                len: 0,
                hash: LineHash::of(b""),
                terminated: true,
            },
            start,
        }));
    };
    line.terminated = end < size;
    Ok(Some(LastLine { line, start }))
}

/// Reads `file` from `pos` up to `end` with positioned reads (the file may be open `O_APPEND`).
struct RangeReader<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl io::Read for RangeReader<'_> {
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

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        _ => None,
    }
}

const PREFIX: &str = "sha256:";
const HEX: [u8; 16] = *b"0123456789abcdef";
const SCAN_CHUNK: usize = 16 * 1024;

#[cfg(test)]
mod tests {
    use std::io::Write;

    use mint_policy::audit::{GENESIS_PREV, chain_hash};

    use super::*;

    #[test]
    fn genesis_and_hashes_agree_with_mint_policy() {
        assert_eq!(LineHash::GENESIS.to_string(), GENESIS_PREV);
        let line = r#"{"v":1}"#;
        assert_eq!(LineHash::of(line.as_bytes()).to_string(), chain_hash(line));
        let parsed = LineHash::from_chain_hash(&ChainHash::of_line(line)).unwrap();
        assert_eq!(parsed, LineHash::of(line.as_bytes()));
        assert_eq!(LineHash::of(b"x").to_chain_hash(), ChainHash::of_line("x"));
    }

    #[test]
    fn reads_lines_with_hashes_and_a_torn_end() {
        let text = b"one\ntwo\nthr";
        let mut reader = LineReader::new(&text[..], 0);
        let one = reader.next_line().unwrap().unwrap();
        assert_eq!((one.bytes.as_slice(), one.terminated), (&b"one"[..], true));
        assert_eq!(one.hash, LineHash::of(b"one"));
        assert_eq!(reader.offset(), 4);
        let two = reader.next_line().unwrap().unwrap();
        assert_eq!(two.hash, LineHash::of(b"two"));
        let torn = reader.next_line().unwrap().unwrap();
        assert_eq!(
            (torn.bytes.as_slice(), torn.terminated),
            (&b"thr"[..], false)
        );
        assert!(reader.next_line().unwrap().is_none());
    }

    #[test]
    fn long_lines_are_hashed_whole_and_kept_short() {
        let long = vec![b'a'; MAX_LINE_BYTES * 2 + 17];
        let mut text = long.clone();
        text.push(b'\n');
        let mut reader = LineReader::new(io::BufReader::with_capacity(1000, &text[..]), 0);
        let line = reader.next_line().unwrap().unwrap();
        assert_eq!(line.len, long.len() as u64);
        assert_eq!(line.bytes.len(), MAX_LINE_BYTES + 1);
        assert_eq!(line.hash, LineHash::of(&long));
        assert!(line.is_too_long());
        assert_eq!(line.text(), Err(LineDefect::TooLong));
    }

    #[test]
    fn last_line_of_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        type Expected<'a> = Option<(&'a [u8], bool, u64)>;
        let cases: [(&[u8], Expected<'_>); 6] = [
            (b"", None),
            (b"a\n", Some((b"a", true, 0))),
            (b"a\nbc\n", Some((b"bc", true, 2))),
            (b"a\nbc", Some((b"bc", false, 2))),
            (b"abc", Some((b"abc", false, 0))),
            (b"a\n\n", Some((b"", true, 2))),
        ];
        for (content, expected) in cases {
            std::fs::File::create(&path)
                .unwrap()
                .write_all(content)
                .unwrap();
            let file = File::open(&path).unwrap();
            let last = read_last_line(&file, content.len() as u64).unwrap();
            match (last, expected) {
                (None, None) => {}
                (Some(last), Some((bytes, terminated, start))) => {
                    assert_eq!(last.line.bytes, bytes, "{content:?}");
                    assert_eq!(last.line.hash, LineHash::of(bytes));
                    assert_eq!(last.line.terminated, terminated, "{content:?}");
                    assert_eq!(last.start, start, "{content:?}");
                }
                (got, want) => panic!("{content:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn last_line_longer_than_a_scan_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let long = vec![b'z'; SCAN_CHUNK * 3 + 5];
        let mut content = b"first\n".to_vec();
        content.extend_from_slice(&long);
        content.push(b'\n');
        std::fs::write(&path, &content).unwrap();
        let file = File::open(&path).unwrap();
        let last = read_last_line(&file, content.len() as u64)
            .unwrap()
            .unwrap();
        assert_eq!(last.start, 6);
        assert_eq!(last.line.hash, LineHash::of(&long));
        assert_eq!(last.line.len, long.len() as u64);
    }
}
