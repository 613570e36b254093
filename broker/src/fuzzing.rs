//! Entry points for the fuzz targets in `broker/fuzz`, onto internals the proxy keeps private.
//!
//! Exists only so `cargo fuzz` can reach these functions: each wraps an internal one without
//! changing what it does. Not part of the broker's interface; nothing else may call it.

/// One head's verdict: framing passes, the method, the number of header lines, and whether it
/// is the last request followed.
pub type HeadVerdict = (bool, Option<String>, usize, bool);

/// The verdicts on a connection's bytes read in these pieces, as the connection reader follows
/// them (`serve/framing.rs`): for each complete head (framing passes, method, number of header
/// lines, last followed), then whether the stream ended up untracked, and whether it is HTTP/2.
pub fn head_verdicts(pieces: &[&[u8]]) -> (Vec<HeadVerdict>, bool, bool) {
    crate::serve::follow_pieces(pieces)
}

/// The status of hyper's own error answer when `bytes` (the start of what the connection writes)
/// begin with one, as the connection recognises it to replace it (`serve/connection.rs`).
pub fn hyper_error_status(bytes: &[u8]) -> Option<u16> {
    crate::serve::hyper_error_status(bytes)
}
