//! The frames of an agent's HTTP/2 connection, followed through their 9-byte headers in both
//! directions, to audit the requests the HTTP/2 library (h2) refuses on its own.
//!
//! h2 answers a request that breaks the protocol with `RST_STREAM` (a `content-length` that is
//! not one number or disagrees with the DATA sent, `transfer-encoding` or another
//! connection-specific header, a malformed head), often before hyper hands the request to Mint;
//! and a connection that breaks it with `GOAWAY`. Either way the agent gets no answer on the
//! stream. [`H2Watch`] reads the frame headers the agent sends (which client streams it opened,
//! and which it finished sending) and those the connection writes (which streams got an answer
//! head, and each reset), and reports every request the library refused for a protocol error
//! ([`crate::proxy::is_protocol_reset`]) before any answer head:
//!
//! - each stream reset with such a code that got no answer head;
//! - at a `GOAWAY` with such a code, each stream up to its last stream id that got no answer head
//!   and whose body the agent had not finished sending (a request with a whole body may have been
//!   decided already, and then has its own records).
//!
//! The pipeline records nothing for a request whose body read fails with such a library error
//! (`proxy.rs`), so each of these requests has exactly one pair of records, written by the
//! connection (`connection.rs`).
//!
//! Only frame headers, the error codes of `RST_STREAM` and `GOAWAY`, and `GOAWAY`'s last stream id
//! are read: no header block, no payload, nothing the agent or an upstream wrote in them.

use std::collections::BTreeMap;

use crate::proxy::is_protocol_reset;

/// The HTTP/2 connection preface the agent sends before its first frame.
const PREFACE_LEN: u64 = 24;

/// How many streams are remembered: far more than the 64 a connection may have open.
const MAX_STREAMS: usize = 1024;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;

/// Both directions of one HTTP/2 connection (see the module documentation).
#[derive(Debug, Default)]
pub(super) struct H2Watch {
    read: FrameWalker,
    written: FrameWalker,
    /// The client streams opened and not yet done with.
    streams: BTreeMap<u32, Seen>,
}

/// What is known of one client stream.
#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    /// The agent sent `END_STREAM`: its request is whole.
    client_ended: bool,
    /// An answer head went out on it.
    answered: bool,
}

/// One frame's header, and the first bytes of its payload when they are read.
#[derive(Clone, Copy, Debug)]
struct FrameHead {
    kind: u8,
    flags: u8,
    stream: u32,
}

/// Finds the frame headers in a byte stream however it is split, and the first bytes of the
/// payload of `RST_STREAM` (its error code) and `GOAWAY` (last stream id, error code).
#[derive(Debug, Default)]
struct FrameWalker {
    head: [u8; 9],
    have: usize,
    /// Payload bytes still to pass of the current frame.
    payload: u32,
    /// The frame whose first payload bytes are being read.
    pending: Option<FrameHead>,
    prefix: [u8; 8],
    prefix_have: usize,
    prefix_want: usize,
}

// === impl FrameWalker ===

impl FrameWalker {
    /// Follows `bytes`, the next ones of the stream, calling `frame` with each frame's header and
    /// the first bytes of its payload read (for `RST_STREAM` and `GOAWAY`; none for others).
    fn feed(&mut self, mut bytes: &[u8], frame: &mut impl FnMut(FrameHead, &[u8])) {
        while !bytes.is_empty() {
            if let Some(head) = self.pending {
                let take = (self.prefix_want - self.prefix_have).min(bytes.len());
                let (part, rest) = bytes.split_at(take);
                if let Some(slot) = self
                    .prefix
                    .get_mut(self.prefix_have..self.prefix_have + take)
                {
                    slot.copy_from_slice(part);
                }
                self.prefix_have += take;
                // INVARIANT: `take` is at most 8.
                self.payload = self.payload.saturating_sub(take as u32);
                bytes = rest;
                if self.prefix_have == self.prefix_want {
                    self.pending = None;
                    frame(
                        head,
                        self.prefix.get(..self.prefix_want).unwrap_or_default(),
                    );
                }
                continue;
            }
            if self.payload > 0 {
                let take = usize::try_from(self.payload)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                // INVARIANT: `take` is at most `payload`, a `u32`.
                self.payload -= take as u32;
                bytes = bytes.get(take..).unwrap_or_default();
                continue;
            }
            let take = (self.head.len() - self.have).min(bytes.len());
            let (part, rest) = bytes.split_at(take);
            if let Some(slot) = self.head.get_mut(self.have..self.have + take) {
                slot.copy_from_slice(part);
            }
            self.have += take;
            bytes = rest;
            if self.have < self.head.len() {
                continue;
            }
            self.have = 0;
            let [l0, l1, l2, kind, flags, s0, s1, s2, s3] = self.head;
            self.payload = u32::from_be_bytes([0, l0, l1, l2]);
            let head = FrameHead {
                kind,
                flags,
                stream: u32::from_be_bytes([s0, s1, s2, s3]) & 0x7fff_ffff,
            };
            let want = match kind {
                RST_STREAM | GOAWAY => self.payload.min(8),
                _ => 0,
            };
            self.prefix_want = usize::try_from(want).unwrap_or(0);
            self.prefix_have = 0;
            if self.prefix_want == 0 {
                frame(head, &[]);
            } else {
                self.pending = Some(head);
            }
        }
    }
}

// === impl H2Watch ===

impl H2Watch {
    /// Follows `bytes` read from the agent, which start `offset` bytes into the connection (the
    /// connection preface is skipped).
    pub(super) fn read(&mut self, bytes: &[u8], offset: u64) {
        let skip = usize::try_from(PREFACE_LEN.saturating_sub(offset)).unwrap_or(usize::MAX);
        let Some(frames) = bytes.get(skip..) else {
            return;
        };
        let streams = &mut self.streams;
        self.read.feed(frames, &mut |head, _| {
            // Client-initiated streams are odd; Mint pushes none.
            if head.stream % 2 == 0 {
                return;
            }
            let ended = head.flags & END_STREAM != 0;
            match head.kind {
                HEADERS => {
                    let seen = streams.entry(head.stream).or_default();
                    seen.client_ended |= ended;
                    if streams.len() > MAX_STREAMS {
                        streams.pop_first();
                    }
                }
                DATA if ended => {
                    if let Some(seen) = streams.get_mut(&head.stream) {
                        seen.client_ended = true;
                    }
                }
                // The agent cancelled the stream itself.
                RST_STREAM => {
                    streams.remove(&head.stream);
                }
                _ => {}
            }
        });
    }

    /// Follows `bytes` the connection wrote; `refused` is called once for each request the
    /// library refused for a protocol error before any answer head (module documentation).
    pub(super) fn written(&mut self, bytes: &[u8], refused: &mut impl FnMut()) {
        let streams = &mut self.streams;
        self.written.feed(bytes, &mut |head, prefix| {
            let code = |at: usize| {
                prefix
                    .get(at..at + 4)
                    .and_then(|b| <[u8; 4]>::try_from(b).ok())
                    .map(u32::from_be_bytes)
            };
            match head.kind {
                HEADERS | DATA if head.stream % 2 == 1 => {
                    let ended = head.flags & END_STREAM != 0;
                    if let Some(seen) = streams.get_mut(&head.stream) {
                        seen.answered |= head.kind == HEADERS;
                        // Both sides are done: no reset can follow.
                        if ended && seen.client_ended {
                            streams.remove(&head.stream);
                        }
                    }
                }
                RST_STREAM if head.stream % 2 == 1 => {
                    let seen = streams.remove(&head.stream);
                    if seen.is_some_and(|seen| !seen.answered)
                        && code(0).is_some_and(is_protocol_reset)
                    {
                        refused();
                    }
                }
                GOAWAY => {
                    if let (Some(last), Some(error)) = (code(0), code(4))
                        && is_protocol_reset(error)
                    {
                        let last = last & 0x7fff_ffff;
                        for seen in streams.range(..=last).map(|(_, seen)| seen) {
                            if !seen.answered && !seen.client_ended {
                                refused();
                            }
                        }
                        streams.clear();
                    }
                }
                _ => {}
            }
        });
    }
}

/// Follows these steps of one connection, each `(written, bytes)`: bytes the connection wrote when
/// `written`, else bytes read from the agent (the connection preface first). Returns how many
/// refused requests each step reported. Exists for the fuzz targets (`crate::fuzzing`); the
/// connection feeds its [`H2Watch`] itself.
pub(crate) fn refusals_per_step(steps: &[(bool, &[u8])]) -> Vec<usize> {
    let mut watch = H2Watch::default();
    let mut offset = 0u64;
    steps
        .iter()
        .map(|&(written, bytes)| {
            let mut count = 0;
            if written {
                watch.written(bytes, &mut || count += 1);
            } else {
                watch.read(bytes, offset);
                offset = offset.saturating_add(u64::try_from(bytes.len()).unwrap_or(u64::MAX));
            }
            count
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(payload.len()).unwrap_or(0);
        let mut out = len.to_be_bytes().get(1..).unwrap_or_default().to_vec();
        out.extend([kind, flags]);
        out.extend(stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// How many refusals `written` reports after `read`, fed whole and byte by byte.
    fn refusals(read: &[u8], written: &[u8]) -> usize {
        let mut counts = Vec::new();
        for split in [false, true] {
            let mut watch = H2Watch::default();
            let mut preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
            preface.extend_from_slice(read);
            let mut count = 0;
            if split {
                for (at, byte) in preface.iter().enumerate() {
                    watch.read(std::slice::from_ref(byte), at as u64);
                }
                for byte in written {
                    watch.written(std::slice::from_ref(byte), &mut || count += 1);
                }
            } else {
                watch.read(&preface, 0);
                watch.written(written, &mut || count += 1);
            }
            counts.push(count);
        }
        assert_eq!(counts.first(), counts.get(1), "split changed the count");
        counts.first().copied().unwrap_or_default()
    }

    #[test]
    fn reports_protocol_resets_and_goaways_before_any_answer_head() {
        let protocol = 1u32.to_be_bytes();
        let cancel = 8u32.to_be_bytes();
        let open = |s| frame(HEADERS, 0x4, s, b"hpack");
        let whole = |s| frame(HEADERS, 0x5, s, b"hpack");
        // A reset of an unanswered stream with a protocol error: reported.
        assert_eq!(refusals(&open(1), &frame(RST_STREAM, 0, 1, &protocol)), 1);
        // With CANCEL, or after an answer head: not.
        assert_eq!(refusals(&open(1), &frame(RST_STREAM, 0, 1, &cancel)), 0);
        let answered = [
            frame(HEADERS, 0x4, 1, b"x"),
            frame(RST_STREAM, 0, 1, &protocol),
        ];
        assert_eq!(refusals(&open(1), &answered.concat()), 0);
        // A stream never opened by the agent: not.
        assert_eq!(refusals(&open(1), &frame(RST_STREAM, 0, 3, &protocol)), 0);
        // GOAWAY with a protocol error: unanswered streams the agent had not finished, up to
        // the last stream id.
        let read = [open(1), whole(3), open(5), open(7)].concat();
        let mut goaway = 5u32.to_be_bytes().to_vec();
        goaway.extend(protocol);
        let written = [frame(HEADERS, 0x4, 5, b"x"), frame(GOAWAY, 0, 0, &goaway)].concat();
        assert_eq!(refusals(&read, &written), 1);
        let mut graceful = 7u32.to_be_bytes().to_vec();
        graceful.extend(0u32.to_be_bytes());
        assert_eq!(refusals(&read, &frame(GOAWAY, 0, 0, &graceful)), 0);
    }
}
