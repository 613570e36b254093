//! Where the `mint` binary's log lines go: stderr, coloured only when stderr is a terminal, or a
//! file a command sends them to for itself (`mint demo` writes the broker's lines to `broker.log`
//! in its home, so they do not interleave with its report).
//!
//! Log lines never hold a secret, a header or query value, or a file's contents (STYLE.md §4):
//! moving them to a file moves nothing new onto disk.

use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use crate::config::env::NO_COLOR;

/// Installs the process's log subscriber: filtered by `RUST_LOG` (default `mint_broker=info`),
/// written through [`LogWriter`]. Colour (ANSI escapes) only when `colour` is asked for, stderr
/// is a terminal and [`NO_COLOR`] is unset or empty: a file or a pipe gets plain text.
pub fn install(colour: bool) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    // `with_ansi(true)` would override tracing-subscriber's own `NO_COLOR` check, so it is
    // decided here, once.
    let no_colour = std::env::var_os(NO_COLOR).is_some_and(|value| !value.is_empty());
    // Fails only if a subscriber is already installed, which nothing here does.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour && !no_colour && io::stderr().is_terminal())
        .with_writer(LogWriter)
        .try_init();
}

/// Sends every later log line to `file` instead of stderr, for the rest of the process. Returns
/// false (and changes nothing) if the lines already go to a file.
pub fn redirect(file: File) -> bool {
    LOG_FILE.set(Mutex::new(file)).is_ok()
}

/// The log's destination as a `tracing-subscriber` writer: the file of [`redirect`] once there is
/// one, stderr before.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogWriter;

/// One log line's writer (see [`LogWriter`]).
#[derive(Debug)]
pub enum LogLine {
    /// Stderr, locked for the line.
    Stderr(io::StderrLock<'static>),
    /// The redirect file, locked for the line.
    File(MutexGuard<'static, File>),
}

// === impl LogWriter ===

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = LogLine;

    fn make_writer(&'a self) -> LogLine {
        match LOG_FILE.get() {
            Some(file) => LogLine::File(file.lock().unwrap_or_else(PoisonError::into_inner)),
            None => LogLine::Stderr(io::stderr().lock()),
        }
    }
}

// === impl LogLine ===

impl Write for LogLine {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            LogLine::Stderr(stderr) => stderr.write(bytes),
            LogLine::File(file) => file.write(bytes),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            LogLine::Stderr(stderr) => stderr.flush(),
            LogLine::File(file) => file.flush(),
        }
    }
}

static LOG_FILE: OnceLock<Mutex<File>> = OnceLock::new();

const DEFAULT_LOG_FILTER: &str = "mint_broker=info";
