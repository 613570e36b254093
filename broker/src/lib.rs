//! Mint's credential broker: the library behind the `mint` binary.
//!
//! Today it holds the command line ([`cli`]), the environment and file locations
//! ([`env`](mod@env)), safe reading of declaration files ([`declaration_file`]) and
//! `mint policy check` ([`policy_check`]). The secret store, capabilities, the authenticated proxy
//! and the audit writer join it as they are built. Parsing, validation and evaluation of the
//! declaration files live in `mint-policy`; this crate does the I/O around them. Nothing depends
//! on this crate.

#![warn(missing_docs)]

pub mod cli;
pub mod declaration_file;
pub mod env;
pub mod policy_check;
