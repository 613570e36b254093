//! `mint-mcp`'s integration tests: the real binary, spoken to over stdio.
//!
//! One test binary, one module per area: golden transcripts (insta), robustness against hostile
//! input, the canary that no file value ever leaks, the dependency tree, and real third-party MCP
//! clients (the Python SDK and the MCP Inspector).

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test harness: a failed step is a failed test"
)]

mod canary;
mod clients;
mod dependencies;
mod issue_24;
mod robustness;
mod support;
mod transcripts;
