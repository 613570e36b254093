//! The `mint-mcp` command: Mint's read-only MCP server on stdin and stdout.
//!
//! Installs logging on stderr (stdout carries only protocol messages), reads the environment once
//! and hands over to `mint_mcp::run_stdio`. Exits 0 at the end of input, 1 when stdin or stdout
//! fails, 2 when given arguments (it takes none: configuration is the `MINT_*` environment).

use std::io;
use std::process::ExitCode;

use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    install_tracing();
    install_panic_hook();
    if std::env::args_os().len() > 1 {
        tracing::error!("mint-mcp takes no arguments; configure it with the MINT_* environment");
        return ExitCode::from(2);
    }
    match mint_mcp::run_stdio(mint_mcp::Config::from_env()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = %error, source = ?std::error::Error::source(&error).map(ToString::to_string), "Stopped");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr, filtered by `RUST_LOG` (default `mint_mcp=info`), without colours since a
/// client usually keeps them in a file.
fn install_tracing() {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    // Fails only if a subscriber is already installed, which nothing here does.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_ansi(false)
        .try_init();
}

/// Replaces the default panic message, which may quote the value that caused it, with the place
/// only. The server answers the request that panicked with an internal error and goes on.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| match info.location() {
        Some(location) => tracing::error!(
            file = location.file(),
            line = location.line(),
            "Internal error (panic)"
        ),
        None => tracing::error!("Internal error (panic)"),
    }));
}

const DEFAULT_LOG_FILTER: &str = "mint_mcp=info";
