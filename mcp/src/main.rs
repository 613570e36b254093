//! The `mint-mcp` command.
fn main() {}
