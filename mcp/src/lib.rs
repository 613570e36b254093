//! `mint-mcp`: Mint's read-only MCP server over stdio.
//!
//! One JSON-RPC 2.0 object per input line, one per response line. It answers `initialize`,
//! `ping`, `tools/list` and `tools/call` for exactly four tools — `alias_list`, `policy_check`,
//! `audit_tail` and `mint_usage` — which show an agent what it may use through the Mint proxy:
//! alias declarations, a policy file's validity, the audit trail and how to make a request.
//!
//! It never touches a secret: its dependency tree holds no secret store and no HTTP client
//! (DESIGN.md invariant 6), it parses files only with `mint-policy`, returns parsed declarations
//! and records only, and refuses the capabilities file and the secret files aliases name.
//!
//! The flow: `transport` reads a line, `server` decodes it with `jsonrpc` and dispatches it,
//! `tools` answers `tools/call` reading files through `file_guard`, whose paths come from `paths`.

mod file_guard;
mod jsonrpc;
mod paths;
mod server;
mod tools;
mod transport;

pub use paths::{
    CAPABILITIES_FILE, Config, DEFAULT_HOME, MINT_ALIASES_PATH, MINT_AUDIT_LOG_PATH,
    MINT_CAPABILITIES_PATH, MINT_HOME, MINT_LISTEN, MINT_POLICY_PATH,
};
pub use server::{PROTOCOL_VERSIONS, Server};
pub use transport::{MAX_MESSAGE_BYTES, TransportError, print_info, run_stdio, serve};
