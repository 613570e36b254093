//! Upstream address checks (being written).
