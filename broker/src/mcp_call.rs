//! MCP `tools/call` detection (being written).
