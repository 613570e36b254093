//! The `mint` command: parses the arguments, installs logging (`cli::log`), runs the command and
//! turns its result into an exit code (0 ok, 1 check failed, 2 usage or configuration error).
//!
//! Everything else lives in the `mint_broker` library; this file stays thin.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Parser;
use mint_broker::cli::{self, Cli, Command};
use mint_broker::config::env::Paths;

fn main() -> ExitCode {
    // clap prints usage errors itself and exits 2.
    let cli = Cli::parse();
    // `mint demo` sends the broker's log lines to a file (see `cli::log`): no colour there.
    cli::log::install(!matches!(cli.command, Command::Demo(_)));
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
