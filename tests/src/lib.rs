//! Harness for Mint's end-to-end tests.
