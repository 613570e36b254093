//! Mint's declaration files as types — the policy, the alias declarations and the audit record —
//! with loading that reports every problem at its line and column, request normalization, and
//! pure, deny-overrides evaluation.
//!
//! This crate is pure: it performs no file, network or environment I/O and holds no secret.
//! Callers read files and pass their bytes with an origin name used in messages.

#![deny(missing_docs)]

pub mod audit;
pub mod diagnostic;
pub mod host;
pub mod normalize;
pub mod usage;
mod yaml;

pub use diagnostic::{Code, Diagnostic, Pos, Severity};
