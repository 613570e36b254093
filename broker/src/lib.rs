//! Mint's credential broker: the library behind the `mint` binary.
//!
//! Today it holds the command line ([`cli`]), the environment and file locations
//! ([`env`](mod@env)), safe reading of declaration files ([`declaration_file`]) and
//! `mint policy check` ([`policy_check`]). The secret store, capabilities, the authenticated proxy
//! and the audit writer join it as they are built. Parsing, validation and evaluation of the
//! declaration files live in `mint-policy`; this crate does the I/O around them. Nothing depends
//! on this crate.

#![warn(missing_docs)]

pub mod address;
pub mod alias_cmd;
pub mod audit;
pub mod audit_cmd;
pub mod cap_cmd;
pub mod capability;
pub mod cli;
pub mod credential_store;
pub mod declaration_file;
pub mod declarations;
pub mod demo;
pub mod echo_upstream;
pub mod env;
pub mod explain;
pub mod init;
pub mod inject;
pub mod mcp_call;
pub mod placeholder;
pub mod policy_check;
pub mod proxy;
pub mod reload;
pub mod scrub;
pub mod secure_file;
pub mod serve;
pub mod terminal;
pub mod tls;
pub mod upstream;
