//! Fuzzes the HTTP/2 watch of an agent's connection (`serve/h2_watch.rs` through
//! `mint_broker::fuzzing`): the frame headers followed in both directions to find the requests
//! the HTTP/2 library refused before any answer head, which the connection then audits.
//!
//! Input: steps, each one byte (high bit: bytes the connection wrote, else bytes read from the
//! agent; low seven bits: how many bytes follow) and its bytes. The first 24 bytes read are the
//! connection preface, skipped whatever they hold.
//!
//! Beyond "never panics", it checks that the refusals reported at each step do not depend on how
//! each step's bytes are split (whole, byte by byte), and that they equal what a reference model
//! finds: each direction's bytes cut into whole frames by their 9-byte headers here, independently
//! of the watch's own walker, and read in the order they became whole, with the rules of the
//! module's documentation (a reset with a protocol error code of a client stream the agent opened
//! and that got no answer head; at a GOAWAY with such a code, each such stream up to the last
//! stream id whose request the agent had not finished).

#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use mint_broker::fuzzing::h2_refusals;

const PREFACE_LEN: usize = 24;
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;

/// The error codes `proxy::is_protocol_reset` counts as the library refusing a request
/// (RFC 9113 section 7): PROTOCOL_ERROR and FLOW_CONTROL_ERROR.
fn protocol_error(code: u32) -> bool {
    matches!(code, 0x1 | 0x3)
}

/// One direction's bytes so far and where its next unread frame starts.
#[derive(Default)]
struct Direction {
    bytes: Vec<u8>,
    next: usize,
}

impl Direction {
    /// The frames that became readable: header, and for RST_STREAM and GOAWAY their first (up
    /// to 8) payload bytes.
    fn frames(&mut self, skip: usize) -> Vec<(u8, u8, u32, Vec<u8>)> {
        self.next = self.next.max(skip);
        let mut out = Vec::new();
        loop {
            let Some(head) = self.bytes.get(self.next..self.next + 9) else {
                return out;
            };
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let (kind, flags) = (head[3], head[4]);
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let want = if matches!(kind, RST_STREAM | GOAWAY) {
                len.min(8)
            } else {
                0
            };
            let Some(prefix) = self.bytes.get(self.next + 9..self.next + 9 + want) else {
                return out;
            };
            out.push((kind, flags, stream, prefix.to_vec()));
            self.next += 9 + len;
        }
    }
}

#[derive(Clone, Copy, Default)]
struct Seen {
    client_ended: bool,
    answered: bool,
}

fn code(prefix: &[u8], at: usize) -> Option<u32> {
    prefix
        .get(at..at + 4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// The reference model: refusals per step, or `None` once more than 1024 streams were open (the
/// watch then forgets the oldest; the model does not).
fn reference(steps: &[(bool, &[u8])]) -> Option<Vec<usize>> {
    let (mut read, mut written) = (Direction::default(), Direction::default());
    let mut streams: BTreeMap<u32, Seen> = BTreeMap::new();
    let mut out = Vec::new();
    for &(is_written, bytes) in steps {
        let mut count = 0;
        if is_written {
            written.bytes.extend_from_slice(bytes);
            for (kind, flags, stream, prefix) in written.frames(0) {
                match kind {
                    HEADERS | DATA if stream % 2 == 1 => {
                        if let Some(seen) = streams.get_mut(&stream) {
                            seen.answered |= kind == HEADERS;
                            if flags & END_STREAM != 0 && seen.client_ended {
                                streams.remove(&stream);
                            }
                        }
                    }
                    RST_STREAM if stream % 2 == 1 => {
                        let seen = streams.remove(&stream);
                        if seen.is_some_and(|s| !s.answered)
                            && code(&prefix, 0).is_some_and(protocol_error)
                        {
                            count += 1;
                        }
                    }
                    GOAWAY => {
                        if let (Some(last), Some(error)) = (code(&prefix, 0), code(&prefix, 4))
                            && protocol_error(error)
                        {
                            let last = last & 0x7fff_ffff;
                            count += streams
                                .range(..=last)
                                .filter(|(_, s)| !s.answered && !s.client_ended)
                                .count();
                            streams.clear();
                        }
                    }
                    _ => {}
                }
            }
        } else {
            read.bytes.extend_from_slice(bytes);
            for (kind, flags, stream, _) in read.frames(PREFACE_LEN) {
                if stream % 2 == 0 {
                    continue;
                }
                let ended = flags & END_STREAM != 0;
                match kind {
                    HEADERS => {
                        streams.entry(stream).or_default().client_ended |= ended;
                        if streams.len() > 1024 {
                            return None;
                        }
                    }
                    DATA if ended => {
                        if let Some(seen) = streams.get_mut(&stream) {
                            seen.client_ended = true;
                        }
                    }
                    RST_STREAM => {
                        streams.remove(&stream);
                    }
                    _ => {}
                }
            }
        }
        out.push(count);
    }
    Some(out)
}

fuzz_target!(|data: &[u8]| {
    let mut steps = Vec::new();
    let mut rest = data;
    while let [op, tail @ ..] = rest {
        let len = usize::from(op & 0x7f).min(tail.len());
        let (bytes, after) = tail.split_at(len);
        steps.push((op & 0x80 != 0, bytes));
        rest = after;
    }
    let whole = h2_refusals(&steps);
    assert_eq!(whole.len(), steps.len());

    // Byte by byte: the refusals of a step are the sum over its bytes.
    let mut bytewise = Vec::new();
    let mut owners = Vec::new();
    for (at, &(written, bytes)) in steps.iter().enumerate() {
        for byte in bytes.chunks(1) {
            bytewise.push((written, byte));
            owners.push(at);
        }
    }
    let mut summed = vec![0; steps.len()];
    for (count, owner) in h2_refusals(&bytewise).into_iter().zip(owners) {
        summed[owner] += count;
    }
    assert_eq!(summed, whole, "byte by byte differs from whole steps");

    if let Some(expected) = reference(&steps) {
        assert_eq!(
            whole, expected,
            "the watch differs from the reference model"
        );
    }
});
