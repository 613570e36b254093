//! The Mint broker.
