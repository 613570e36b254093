//! The `mint` command.
fn main() {}
