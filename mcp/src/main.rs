//! The `mint-mcp` command: Mint's read-only MCP server on stdin and stdout.
//!
//! Installs logging on stderr (stdout carries only protocol messages), reads the environment once
//! and hands over to `mint_mcp::run_stdio`. Exits 0 at the end of input, 1 when stdin or stdout
//! fails, 2 when given arguments other than a lone `--help` or `--version` (which print and exit
//! 0 without serving): configuration is the `MINT_*` environment.

use std::io;
use std::process::ExitCode;

use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    install_tracing();
    install_panic_hook();
    let arguments: Vec<_> = std::env::args_os().skip(1).collect();
    if let [argument] = arguments.as_slice() {
        let text = match argument.to_str() {
            Some("--help" | "-h") => Some(HELP.to_owned()),
            Some("--version" | "-V") => Some(format!("mint-mcp {}\n", env!("CARGO_PKG_VERSION"))),
            _ => None,
        };
        if let Some(text) = text {
            return match mint_mcp::print_info(&text) {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            };
        }
    }
    if !arguments.is_empty() {
        tracing::error!(
            "mint-mcp takes no arguments but `--help` or `--version`; configure it with the MINT_* environment"
        );
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

const HELP: &str = "\
mint-mcp: Mint's read-only MCP server, one JSON-RPC message per line on stdin and stdout

Usage: mint-mcp            serve until stdin ends (an MCP client starts it)
       mint-mcp --help     print this and exit
       mint-mcp --version  print the version and exit

Tools: alias_list, policy_check, audit_tail, mint_usage. None resolves, returns or forwards a
credential; requests that need a secret go through the Mint proxy (`mint usage`).

Environment (an empty value counts as unset):
  MINT_HOME               Mint's directory [default: .mint]
  MINT_ALIASES_PATH       alias_list's file [default: $MINT_HOME/aliases.yaml]
  MINT_AUDIT_LOG_PATH     audit_tail's file [default: $MINT_HOME/audit.log]
  MINT_POLICY_PATH        a policy policy_check may read wherever it is; not a default:
                          policy_check requires `file` [default: $MINT_HOME/policy.yaml]
  MINT_CAPABILITIES_PATH  refused by every tool [default: $MINT_HOME/capabilities.yaml]
  MINT_LISTEN             the proxy address mint_usage shows [default: 127.0.0.1:8700]
  RUST_LOG                log filter, logs on stderr [default: mint_mcp=info]
";
