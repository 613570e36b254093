//! `mint demo`: its flags; the demo itself is [`crate::demo`].

use std::io::Write;

use clap::Args;

use crate::demo::{DemoError, DemoOptions};

/// Arguments of `mint demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Stop after the scripted requests instead of serving until Ctrl-C.
    #[arg(long)]
    pub once: bool,

    /// Where the demo broker listens.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
}

/// Runs `mint demo` with `args`.
pub fn run(args: DemoArgs, out: &mut dyn Write) -> Result<(), DemoError> {
    let options = DemoOptions {
        listen: args.listen,
        once: args.once,
    };
    crate::demo::demo(&options, out)
}
