//! The stdio transport: cuts stdin into lines, hands each to the `Server`, and writes each
//! response as one line on stdout, flushed at once.
//!
//! The only module that touches stdout, which is the protocol channel: logs go to stderr through
//! `tracing`. Input lines are read in chunks into a buffer of at most `MAX_MESSAGE_BYTES`; a
//! longer line is skipped up to its line feed without being stored, logged by its size, and gets
//! no response (like any line that cannot be parsed). End of input ends the loop cleanly.

use std::io::{self, BufRead, Write};

use crate::paths::Config;
use crate::server::Server;

/// The largest message, in bytes without the line feed, in either direction: the limit an agent
/// applies to each protocol message.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// Why the transport stopped before the end of its input.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// Reading stdin failed.
    #[error("cannot read the input")]
    Read(#[source] io::Error),
    /// Writing or flushing stdout failed (other than the client closing it).
    #[error("cannot write the output")]
    Write(#[source] io::Error),
}

/// Writes `text` on stdout, for `mint-mcp --help` and `--version`: the process then exits
/// without serving, so no protocol message shares stdout with it.
pub fn print_info(text: &str) -> io::Result<()> {
    let mut stdout = io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()
}

/// Serves requests on stdin and stdout until stdin ends.
pub fn run_stdio(config: Config) -> Result<(), TransportError> {
    let server = Server::new(config);
    serve(&server, io::stdin().lock(), io::stdout().lock())
}

/// Serves the lines of `input`, writing response lines to `output`, until `input` ends or the
/// reader of `output` goes away.
pub fn serve(
    server: &Server,
    input: impl BufRead,
    mut output: impl Write,
) -> Result<(), TransportError> {
    let mut lines = LineReader::new(input, MAX_MESSAGE_BYTES);
    let mut number: u64 = 0;
    loop {
        number += 1;
        let _span = tracing::info_span!("line", n = number).entered();
        let response = match lines.next_line().map_err(TransportError::Read)? {
            None => {
                tracing::debug!("End of input");
                return Ok(());
            }
            Some(Line::TooLong { bytes }) => {
                tracing::warn!(
                    bytes,
                    limit = MAX_MESSAGE_BYTES,
                    "Ignored a line over the message limit"
                );
                continue;
            }
            Some(Line::Complete(line)) => server.handle_line(line),
        };
        let Some(mut response) = response else {
            continue;
        };
        response.push('\n');
        let written = output
            .write_all(response.as_bytes())
            .and_then(|()| output.flush());
        match written {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::BrokenPipe => {
                tracing::info!("The client closed the output; stopping");
                return Ok(());
            }
            Err(error) => return Err(TransportError::Write(error)),
        }
    }
}

/// One line of input.
#[derive(Debug, PartialEq, Eq)]
enum Line<'a> {
    /// The line without its line feed.
    Complete(&'a [u8]),
    /// A line longer than the limit, which was skipped: only its length is known.
    TooLong { bytes: u64 },
}

/// Splits input at line feeds, never holding more than `max` bytes of one line.
#[derive(Debug)]
struct LineReader<R> {
    input: R,
    line: Vec<u8>,
    max: usize,
}

// === impl LineReader ===

impl<R: BufRead> LineReader<R> {
    fn new(input: R, max: usize) -> Self {
        LineReader {
            input,
            line: Vec::new(),
            max,
        }
    }

    /// The next line, or `None` at the end of input. A last line without a line feed counts.
    fn next_line(&mut self) -> io::Result<Option<Line<'_>>> {
        self.line.clear();
        // Give back the memory of one large line instead of keeping it for the session.
        self.line.shrink_to(KEEP_CAPACITY);
        let mut skipped: Option<u64> = None;
        loop {
            let available = match self.input.fill_buf() {
                Ok(available) => available,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            };
            if available.is_empty() {
                return Ok(match skipped {
                    Some(bytes) => Some(Line::TooLong { bytes }),
                    None if self.line.is_empty() => None,
                    None => Some(Line::Complete(&self.line)),
                });
            }
            let newline = available.iter().position(|&byte| byte == b'\n');
            let piece = available
                .get(..newline.unwrap_or(available.len()))
                .unwrap_or_default();
            match &mut skipped {
                Some(bytes) => *bytes += piece.len() as u64,
                None if self.line.len() + piece.len() > self.max => {
                    skipped = Some((self.line.len() + piece.len()) as u64);
                    self.line = Vec::new();
                }
                None => self.line.extend_from_slice(piece),
            }
            let consumed = newline.map_or(available.len(), |at| at + 1);
            self.input.consume(consumed);
            if newline.is_some() {
                return Ok(Some(match skipped {
                    Some(bytes) => Line::TooLong { bytes },
                    None => Line::Complete(&self.line),
                }));
            }
        }
    }
}

/// The line buffer capacity kept between lines.
const KEEP_CAPACITY: usize = 64 * 1024;

#[cfg(test)]
mod tests {
    use std::io::BufReader;

    use super::*;

    fn lines(input: &[u8], max: usize, capacity: usize) -> Vec<Result<Vec<u8>, u64>> {
        let mut reader = LineReader::new(BufReader::with_capacity(capacity, input), max);
        let mut out = Vec::new();
        while let Some(line) = reader.next_line().unwrap() {
            out.push(match line {
                Line::Complete(bytes) => Ok(bytes.to_vec()),
                Line::TooLong { bytes } => Err(bytes),
            });
        }
        out
    }

    #[test]
    fn splits_at_line_feeds_whatever_the_chunking() {
        for capacity in [1, 2, 3, 7, 1024] {
            assert_eq!(
                lines(b"a\n\nbc\r\nd", 10, capacity),
                [
                    Ok(b"a".to_vec()),
                    Ok(Vec::new()),
                    Ok(b"bc\r".to_vec()),
                    Ok(b"d".to_vec())
                ],
                "{capacity}"
            );
        }
        assert!(lines(b"", 10, 8).is_empty());
    }

    #[test]
    fn skips_long_lines_by_size() {
        for capacity in [1, 4, 1024] {
            assert_eq!(
                lines(b"0123456789ab\nok\n0123456789ab", 10, capacity),
                [Err(12), Ok(b"ok".to_vec()), Err(12)],
                "{capacity}"
            );
            assert_eq!(
                lines(b"0123456789\n", 10, capacity),
                [Ok(b"0123456789".to_vec())]
            );
        }
    }

    #[test]
    fn writes_one_flushed_line_per_response_and_stops_at_the_end() {
        let server = Server::new(Config::resolve(|_| None));
        let input = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}";
        let mut output = Vec::new();
        serve(&server, &input[..], &mut output).unwrap();
        assert_eq!(
            String::from_utf8(output).unwrap(),
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}\n"
        );
    }
}
