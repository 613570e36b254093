//! The `mint` command: parses the arguments, installs logging to stderr, runs the command and
//! turns its result into an exit code (0 ok, 1 check failed, 2 usage or configuration error).
//!
//! Everything else lives in the `mint_broker` library; this file stays thin.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Parser;
use mint_broker::cli::{self, Cli};
use mint_broker::config::env::Paths;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    // clap prints usage errors itself and exits 2.
    let cli = Cli::parse();
    install_tracing();
    let paths = Paths::from_env();
    let stdout = io::stdout();
    let mut out = stdout.lock();
    match cli::run(cli, &paths, &mut out) {
        Ok(status) => status.into(),
        Err(error) => {
            let status = error.exit_status();
            // `{:#}` shows the source chain (an I/O error behind a failed write); messages never
            // hold file contents. If stderr itself is gone there is nobody left to tell.
            let _ = writeln!(io::stderr().lock(), "mint: {:#}", anyhow::Error::new(error));
            status.into()
        }
    }
}

/// Logs go to stderr, filtered by `RUST_LOG` (default `mint_broker=info`); stdout carries only
/// command output.
fn install_tracing() {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    // Fails only if a subscriber is already installed, which nothing here does.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .try_init();
}

const DEFAULT_LOG_FILTER: &str = "mint_broker=info";
