//! The WebSocket frame format (RFC 6455 section 5.2), as far as a relay needs it: reading a
//! frame's head from the bytes received so far, and writing the heads and whole frames Mint
//! sends itself.
//!
//! Mint relays the agent's frames byte for byte (it reads only their heads), and writes every
//! frame toward the agent anew from the scrubbed payload (`websocket.rs`): a frame is never
//! patched in place, so a redaction that changes a payload's length changes the length its head
//! says. No extension is ever negotiated, so every `RSV` bit must be clear.

/// The largest payload of a control frame (ping, pong, close).
pub(crate) const MAX_CONTROL: usize = 125;

/// A frame's opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Opcode {
    Continuation,
    Text,
    Binary,
    Close,
    Ping,
    Pong,
}

/// The head of one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) fin: bool,
    pub(crate) opcode: Opcode,
    /// The masking key, for a masked frame (every frame from a client).
    pub(crate) mask: Option<[u8; 4]>,
    pub(crate) len: u64,
    /// How many bytes the head takes.
    pub(crate) size: usize,
}

/// A frame that breaks the protocol. Never carries payload bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FrameError {
    /// An `RSV` bit is set, but no extension was negotiated.
    #[error("a reserved bit is set")]
    Reserved,
    /// An opcode RFC 6455 does not define.
    #[error("an unknown opcode")]
    UnknownOpcode,
    /// A control frame that is fragmented or longer than 125 bytes.
    #[error("a control frame that is fragmented or longer than 125 bytes")]
    BadControl,
    /// A 64-bit length with its top bit set, or a length not in its shortest form.
    #[error("a frame length that is not valid")]
    BadLength,
}

// === impl Opcode ===

impl Opcode {
    fn from_bits(bits: u8) -> Result<Opcode, FrameError> {
        match bits {
            0x0 => Ok(Opcode::Continuation),
            0x1 => Ok(Opcode::Text),
            0x2 => Ok(Opcode::Binary),
            0x8 => Ok(Opcode::Close),
            0x9 => Ok(Opcode::Ping),
            0xA => Ok(Opcode::Pong),
            _ => Err(FrameError::UnknownOpcode),
        }
    }

    fn bits(self) -> u8 {
        match self {
            Opcode::Continuation => 0x0,
            Opcode::Text => 0x1,
            Opcode::Binary => 0x2,
            Opcode::Close => 0x8,
            Opcode::Ping => 0x9,
            Opcode::Pong => 0xA,
        }
    }

    /// Whether it is a control frame's (close, ping, pong).
    pub(crate) fn is_control(self) -> bool {
        matches!(self, Opcode::Close | Opcode::Ping | Opcode::Pong)
    }
}

// === impl Head ===

impl Head {
    /// Reads the head at the start of `bytes`: `Ok(None)` while it is incomplete.
    pub(crate) fn read(bytes: &[u8]) -> Result<Option<Head>, FrameError> {
        let (Some(&first), Some(&second)) = (bytes.first(), bytes.get(1)) else {
            return Ok(None);
        };
        if first & 0x70 != 0 {
            return Err(FrameError::Reserved);
        }
        let fin = first & 0x80 != 0;
        let opcode = Opcode::from_bits(first & 0x0F)?;
        let masked = second & 0x80 != 0;
        let short = second & 0x7F;
        let (len, mut size) = match short {
            126 => {
                let Some(ext) = bytes.get(2..4).and_then(|e| <[u8; 2]>::try_from(e).ok()) else {
                    return Ok(None);
                };
                let len = u64::from(u16::from_be_bytes(ext));
                if len < 126 {
                    return Err(FrameError::BadLength);
                }
                (len, 4)
            }
            127 => {
                let Some(ext) = bytes.get(2..10).and_then(|e| <[u8; 8]>::try_from(e).ok()) else {
                    return Ok(None);
                };
                let len = u64::from_be_bytes(ext);
                if len >> 63 != 0 || len <= u64::from(u16::MAX) {
                    return Err(FrameError::BadLength);
                }
                (len, 10)
            }
            len => (u64::from(len), 2),
        };
        if opcode.is_control() && (!fin || len > MAX_CONTROL as u64) {
            return Err(FrameError::BadControl);
        }
        let mask = if masked {
            let Some(key) = bytes
                .get(size..size + 4)
                .and_then(|k| <[u8; 4]>::try_from(k).ok())
            else {
                return Ok(None);
            };
            size += 4;
            Some(key)
        } else {
            None
        };
        Ok(Some(Head {
            fin,
            opcode,
            mask,
            len,
            size,
        }))
    }
}

/// Appends a frame with `payload` to `out`: unmasked (Mint's frames to the agent), or masked
/// with `mask` (Mint's own frames to the upstream, as a client's must be).
pub(crate) fn write(
    out: &mut Vec<u8>,
    fin: bool,
    opcode: Opcode,
    payload: &[u8],
    mask: Option<[u8; 4]>,
) {
    write_head(out, fin, opcode, payload.len(), mask);
    match mask {
        None => out.extend_from_slice(payload),
        Some(key) => {
            out.extend(
                payload
                    .iter()
                    .zip(key.iter().cycle())
                    .map(|(byte, k)| byte ^ k),
            );
        }
    }
}

/// Appends the head of a frame whose payload is `len` bytes (masked with `mask`, whose key ends
/// the head): what comes before the payload, which the caller writes itself (no copy of a large
/// payload into the frame).
pub(crate) fn write_head(
    out: &mut Vec<u8>,
    fin: bool,
    opcode: Opcode,
    len: usize,
    mask: Option<[u8; 4]>,
) {
    out.push(if fin { 0x80 } else { 0 } | opcode.bits());
    let mask_bit = if mask.is_some() { 0x80 } else { 0 };
    if len < 126 {
        // INVARIANT: `len < 126` fits in the 7-bit length.
        out.push(mask_bit | len as u8);
    } else if let Ok(short) = u16::try_from(len) {
        out.push(mask_bit | 126);
        out.extend_from_slice(&short.to_be_bytes());
    } else {
        out.push(mask_bit | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    if let Some(key) = mask {
        out.extend_from_slice(&key);
    }
}

/// The payload of a close frame: `code` and `reason`.
pub(crate) fn close_payload(code: u16, reason: &str) -> Vec<u8> {
    let mut payload = code.to_be_bytes().to_vec();
    payload.extend_from_slice(reason.as_bytes());
    payload.truncate(MAX_CONTROL);
    payload
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn unmask(payload: &mut [u8], key: [u8; 4], offset: usize) {
        for (byte, k) in payload.iter_mut().zip(key.iter().cycle().skip(offset % 4)) {
            *byte ^= k;
        }
    }

    #[test]
    fn heads_round_trip_at_every_length_form() {
        for len in [0usize, 1, 125, 126, 127, 65_535, 65_536, 70_000] {
            for mask in [None, Some([1, 2, 3, 4])] {
                let payload = vec![b'a'; len];
                let mut out = Vec::new();
                write(&mut out, true, Opcode::Binary, &payload, mask);
                let head = Head::read(&out).unwrap().unwrap();
                assert_eq!(head.len, len as u64);
                assert_eq!(head.mask, mask);
                assert_eq!(head.size + len, out.len());
                let mut body = out[head.size..].to_vec();
                if let Some(key) = mask {
                    unmask(&mut body, key, 0);
                }
                assert_eq!(body, payload);
                for cut in 0..head.size {
                    assert_eq!(Head::read(&out[..cut]).unwrap(), None, "{len} {cut}");
                }
            }
        }
    }

    #[test]
    fn frames_that_break_the_protocol_are_refused() {
        assert_eq!(Head::read(&[0xC1, 0]), Err(FrameError::Reserved));
        assert_eq!(Head::read(&[0x83, 0]), Err(FrameError::UnknownOpcode));
        assert_eq!(Head::read(&[0x09, 0]), Err(FrameError::BadControl));
        assert_eq!(
            Head::read(&[0x89, 126, 0, 126]),
            Err(FrameError::BadControl)
        );
        assert_eq!(Head::read(&[0x82, 126, 0, 5]), Err(FrameError::BadLength));
        let mut huge = vec![0x82, 127];
        huge.extend_from_slice(&u64::MAX.to_be_bytes());
        assert_eq!(Head::read(&huge), Err(FrameError::BadLength));
    }
}
