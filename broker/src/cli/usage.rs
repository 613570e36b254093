//! `mint usage`: how an agent uses Mint, the same text as mint-mcp's `mint_usage` tool (both come
//! from `mint_policy::usage`).

use std::io::{self, Write};

use clap::Args;

/// Arguments of `mint usage`.
#[derive(Debug, Args)]
pub struct UsageArgs {
    /// The proxy's listen address to show in the URLs [default: $MINT_LISTEN, else
    /// 127.0.0.1:8700].
    #[arg(long, env = "MINT_LISTEN")]
    pub listen: Option<String>,

    /// Print the description as JSON, exactly as the `mint_usage` tool returns it.
    #[arg(long)]
    pub json: bool,
}

/// Prints the usage text (or its JSON) for `args` to `out`.
pub fn run(args: &UsageArgs, out: &mut dyn Write) -> io::Result<()> {
    let listen = args
        .listen
        .as_deref()
        .unwrap_or(crate::config::env::DEFAULT_LISTEN);
    let usage = mint_policy::usage::usage(listen);
    let text = if args.json {
        // INVARIANT: `Usage` holds only strings and arrays of strings, which always
        // serialize.
        serde_json::to_string_pretty(&usage).unwrap_or_default() + "\n"
    } else {
        usage.render_text()
    };
    out.write_all(text.as_bytes())
}
