//! Mint's declaration files as types — the policy, the alias declarations and the audit record —
//! with loading that reports every problem at its line and column, request normalization, and
//! pure, deny-overrides evaluation.
//!
//! This crate is pure: it performs no file, network or environment I/O and holds no secret.
//! Callers read files and pass their bytes with an origin name used in messages.
//!
//! The flow: `policy::load_policy` turns bytes into a checked `Policy` (or findings);
//! `evaluate::CompiledPolicy` indexes it; `normalize::normalize_target` turns a request's target
//! into the canonical `Target` that is both matched and forwarded; `CompiledPolicy::decide`
//! answers allow, deny, limited, or approve (hold the request for the operator's decision).

#![deny(missing_docs)]

pub mod aliases;
pub mod audit;
pub mod body;
pub mod check;
pub mod diagnostic;
pub mod duration;
pub mod evaluate;
mod fields;
pub mod glob;
pub mod host;
pub mod limits;
pub mod normalize;
pub mod placeholder_shape;
pub mod policy;
pub mod recognise;
pub mod site;
pub mod size;
pub mod usage;
mod yaml;

pub use diagnostic::{Code, Diagnostic, Pos, Severity};
pub use yaml::{MAX_DEPTH, MAX_FILE_BYTES, MAX_FLOW_LOOKAHEAD};
