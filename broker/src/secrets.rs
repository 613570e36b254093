//! Secrets from the moment Mint reads them to the moment they leave toward an upstream: where they
//! are stored ([`credential_store`]: keyring, environment, file, memory), where an agent asks for
//! one ([`placeholder`]), how one is put into a request ([`inject`]) and how every one is kept out
//! of an answer ([`scrub`]).
//!
//! The only room that calls `expose_secret()` (besides the one print of a new capability token in
//! `cli::cap` and `mint demo`'s throwaway token), each call commented. Nothing here decides whether
//! a secret may be used: the proxy calls [`inject`] only after the policy allowed the request and
//! its decision was recorded.

pub mod credential_store;
pub mod inject;
pub mod placeholder;
pub mod scrub;
