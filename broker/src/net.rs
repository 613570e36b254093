//! Mint's side of the network toward upstreams: which addresses a target may resolve to
//! ([`address`]), the rustls client configuration ([`tls`]) and the connections themselves
//! ([`upstream`]).
//!
//! Connects only to addresses the checks allowed, with SNI and a certificate check for the
//! target's host name, and never follows a redirect: the proxy returns answers as they come.

pub mod address;
pub mod ca;
pub mod tls;
pub mod upstream;
