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
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::MakeWriter;

use crate::config::env::NO_COLOR;

/// Installs the process's log subscriber: filtered by `RUST_LOG` (default `mint_broker=info`),
/// with the [`PROTOCOL_LIBRARIES`] it does not name held at `info`, written through
/// [`LogWriter`]. Colour (ANSI escapes) only when `colour` is asked for, stderr
/// is a terminal and [`NO_COLOR`] is unset or empty: a file or a pipe gets plain text.
pub fn install(colour: bool) {
    let asked = std::env::var(EnvFilter::DEFAULT_ENV).ok();
    let mut filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    for library in capped_libraries(asked.as_deref().unwrap_or(DEFAULT_LOG_FILTER)) {
        if let Ok(directive) = format!("{library}=info").parse() {
            filter = filter.add_directive(directive);
        }
    }
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

/// Libraries that handle the bytes of requests and answers and quote them at `debug` and `trace`:
/// h2 logs every HTTP/2 frame an upstream sends (GOAWAY debug data included, bytes a hostile
/// upstream chooses and can fill with the secret it was sent); hyper, hyper-util and rustls quote
/// heads, errors and certificates. A bare `RUST_LOG=debug` or `trace` leaves them at `info`; only
/// a directive naming one of them turns its lines on (docs/operations.md: never on a broker that
/// holds real secrets).
pub const PROTOCOL_LIBRARIES: [&str; 6] = [
    "h2",
    "hyper",
    "hyper_util",
    "rustls",
    "tokio_rustls",
    "redis",
];

/// The [`PROTOCOL_LIBRARIES`] to hold at `info` under `filter` (a `RUST_LOG` value): none
/// unless a directive without a target (`debug`, `trace`, `[span]=debug`) turns on `debug` or
/// `trace` for every crate; then each that no directive names by its target (`h2=trace`,
/// `h2::codec=debug` and `h2[span]=debug` name `h2`).
fn capped_libraries(filter: &str) -> impl Iterator<Item = &'static str> + '_ {
    let targets = || {
        filter.split(',').map(|directive| {
            let directive = directive.trim();
            let target = directive.split(['=', '[']).next().unwrap_or_default();
            (directive, target)
        })
    };
    let verbose_everywhere = targets().any(|(directive, target)| {
        let level = match directive.split_once('=') {
            Some((_, level)) if target.is_empty() => level,
            None => directive,
            Some(_) => return false,
        };
        level
            .trim()
            .parse::<LevelFilter>()
            .is_ok_and(|level| level > LevelFilter::INFO)
    });
    PROTOCOL_LIBRARIES.into_iter().filter(move |library| {
        verbose_everywhere
            && !targets().any(|(_, target)| {
                target == *library
                    || target
                        .strip_prefix(library)
                        .is_some_and(|rest| rest.starts_with("::"))
            })
    })
}

static LOG_FILE: OnceLock<Mutex<File>> = OnceLock::new();

const DEFAULT_LOG_FILTER: &str = "mint_broker=info";

#[cfg(test)]
mod tests {
    use super::*;

    fn capped(filter: &str) -> Vec<&'static str> {
        capped_libraries(filter).collect()
    }

    #[test]
    fn protocol_libraries_stay_at_info_unless_a_directive_names_them() {
        let all = PROTOCOL_LIBRARIES.to_vec();
        for filter in [
            "debug",
            "TRACE",
            "info,debug",
            "[request]=trace",
            "hyperx=trace,debug",
        ] {
            assert_eq!(capped(filter), all, "{filter:?}");
        }
        // Nothing to hold back where no directive turns on every crate's debug lines (an added
        // `h2=info` would turn on lines the filter leaves off).
        for filter in [
            "",
            "info",
            "warn",
            "mint_broker=trace",
            "hyperx=trace",
            "off",
        ] {
            assert!(capped(filter).is_empty(), "{filter:?}");
        }
        assert_eq!(
            capped("debug,h2=trace,hyper::client=debug, rustls[handshake]=trace"),
            ["hyper_util", "tokio_rustls", "redis"]
        );
        assert_eq!(
            capped("trace,h2"),
            ["hyper", "hyper_util", "rustls", "tokio_rustls", "redis"]
        );
    }
}
