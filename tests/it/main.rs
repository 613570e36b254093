//! Mint's end-to-end tests: one test binary, one module per area.

mod examples;
