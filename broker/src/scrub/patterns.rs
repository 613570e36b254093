//! The byte strings a secret can take in an answer: raw, hex, percent-encoded, JSON-escaped and
//! base64. Every pattern is as secret as the secret itself: each is held in a `Zeroizing` buffer
//! and only lives until the automaton is built.
//!
//! Base64 at three alignments: inside a larger encoded blob the secret can start at byte 0, 1 or
//! 2 of a 3-byte quantum. For alignment `k` the secret is encoded behind `k` zero bytes and only
//! the characters whose 6 bits all come from the secret are kept: characters `[0, 2, 3][k]` up to
//! `floor(8 (k + n) / 6)` for an `n`-byte secret. The characters before and after that "stable
//! inner" string mix secret bits with bits of unknown neighbours; they are not in the pattern.
//! The pattern's [`Kind`] says which neighbour holds secret bits, and the scrubber redacts that
//! neighbour character too (see `scrub.rs`).

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use zeroize::Zeroizing;

/// One pattern and what to redact around it.
pub(crate) struct Pattern {
    pub(crate) bytes: Zeroizing<Vec<u8>>,
    pub(crate) kind: Kind,
}

/// What a match of a pattern takes with it besides its own bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Kind {
    /// A base64 pattern at alignment 1 or 2: the character before it holds secret bits.
    pub(crate) back: bool,
    /// A base64 pattern whose last secret bits share a character with what follows.
    pub(crate) fwd: bool,
}

/// Adds every pattern of `secret` to `out`. An empty secret has none.
pub(crate) fn push_patterns(secret: &[u8], out: &mut Vec<Pattern>) {
    if secret.is_empty() {
        return;
    }
    let plain = Kind::default();
    out.push(Pattern {
        bytes: Zeroizing::new(secret.to_vec()),
        kind: plain,
    });
    for upper in [false, true] {
        out.push(Pattern {
            bytes: hex(secret, upper),
            kind: plain,
        });
    }
    for style in PERCENT_STYLES {
        out.push(Pattern {
            bytes: percent(secret, style),
            kind: plain,
        });
    }
    for style in JSON_STYLES {
        if let Some(bytes) = json(secret, style) {
            out.push(Pattern { bytes, kind: plain });
        }
    }
    for upper in [false, true] {
        if let Some(bytes) = json_all_escaped(secret, upper) {
            out.push(Pattern { bytes, kind: plain });
        }
    }
    for alignment in 0..3 {
        for url_safe in [false, true] {
            let Some(pattern) = base64_inner(secret, alignment, url_safe) else {
                continue;
            };
            if !url_safe && pattern.bytes.contains(&b'/') {
                // PHP's `json_encode` writes `/` as `\/`, also inside base64 text.
                let mut escaped = Zeroizing::new(Vec::with_capacity(pattern.bytes.len() + 8));
                for &byte in pattern.bytes.iter() {
                    if byte == b'/' {
                        escaped.push(b'\\');
                    }
                    escaped.push(byte);
                }
                out.push(Pattern {
                    bytes: escaped,
                    kind: pattern.kind,
                });
            }
            out.push(pattern);
        }
    }
}

/// Sorts `patterns` and merges duplicates, keeping the union of their kinds.
pub(crate) fn dedup(patterns: &mut Vec<Pattern>) {
    patterns.sort_unstable_by(|a, b| a.bytes.cmp(&b.bytes));
    patterns.dedup_by(|later, kept| {
        if later.bytes == kept.bytes {
            kept.kind.back |= later.kind.back;
            kept.kind.fwd |= later.kind.fwd;
            true
        } else {
            false
        }
    });
}

/// Whether `byte` can be a base64 character, of either alphabet. `/` may come JSON-escaped as
/// `\/`, which the scrubber checks for separately.
pub(crate) fn is_base64_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'+' | b'/' | b'-' | b'_')
}

fn hex(secret: &[u8], upper: bool) -> Zeroizing<Vec<u8>> {
    let digits: &[u8; 16] = if upper {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    let mut out = Zeroizing::new(Vec::with_capacity(secret.len() * 2));
    for &byte in secret {
        out.push(digits[usize::from(byte >> 4)]);
        out.push(digits[usize::from(byte & 0xf)]);
    }
    out
}

/// How an encoder percent-encodes.
#[derive(Clone, Copy)]
struct PercentStyle {
    /// Bytes besides ASCII letters and digits left as they are.
    keep: &'static [u8],
    /// Whether a space becomes `+` (form encoding).
    space_plus: bool,
    /// Whether the hex digits are uppercase.
    upper: bool,
}

/// RFC 3986 (every byte outside unreserved, both hex cases); Python's `quote` (keeps `/`);
/// JavaScript's `encodeURIComponent`; form encoding as Go's `QueryEscape` and Python's
/// `quote_plus` write it; and as `URLSearchParams` writes it.
const PERCENT_STYLES: [PercentStyle; 6] = [
    PercentStyle {
        keep: b"-._~",
        space_plus: false,
        upper: true,
    },
    PercentStyle {
        keep: b"-._~",
        space_plus: false,
        upper: false,
    },
    PercentStyle {
        keep: b"-._~/",
        space_plus: false,
        upper: true,
    },
    PercentStyle {
        keep: b"-._~!'()*",
        space_plus: false,
        upper: true,
    },
    PercentStyle {
        keep: b"-._~",
        space_plus: true,
        upper: true,
    },
    PercentStyle {
        keep: b"-._*",
        space_plus: true,
        upper: true,
    },
];

fn percent(secret: &[u8], style: PercentStyle) -> Zeroizing<Vec<u8>> {
    let digits: &[u8; 16] = if style.upper {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    let mut out = Zeroizing::new(Vec::with_capacity(secret.len() * 3));
    for &byte in secret {
        if byte.is_ascii_alphanumeric() || style.keep.contains(&byte) {
            out.push(byte);
        } else if byte == b' ' && style.space_plus {
            out.push(b'+');
        } else {
            out.extend_from_slice(&[
                b'%',
                digits[usize::from(byte >> 4)],
                digits[usize::from(byte & 0xf)],
            ]);
        }
    }
    out
}

/// How a JSON encoder escapes a string.
#[derive(Clone, Copy)]
struct JsonStyle {
    /// `/` as `\/` (PHP).
    slash: bool,
    /// `<`, `>`, `&`, U+2028 and U+2029 as `\u` escapes (Go's `encoding/json`).
    html: bool,
    /// Everything outside ASCII as `\u` escapes (Python's `json.dumps`).
    ascii: bool,
}

/// serde_json and `JSON.stringify`; PHP; Go; Python.
const JSON_STYLES: [JsonStyle; 4] = [
    JsonStyle {
        slash: false,
        html: false,
        ascii: false,
    },
    JsonStyle {
        slash: true,
        html: false,
        ascii: false,
    },
    JsonStyle {
        slash: false,
        html: true,
        ascii: false,
    },
    JsonStyle {
        slash: false,
        html: false,
        ascii: true,
    },
];

/// The secret as the content of a JSON string; `None` for a secret that is not UTF-8 (no JSON
/// encoder writes it).
fn json(secret: &[u8], style: JsonStyle) -> Option<Zeroizing<Vec<u8>>> {
    let text = std::str::from_utf8(secret).ok()?;
    let mut out = Zeroizing::new(Vec::with_capacity(secret.len() + 16));
    let mut units = [0u16; 2];
    for ch in text.chars() {
        match ch {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            '/' if style.slash => out.extend_from_slice(b"\\/"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' if style.html => {
                push_unicode_escapes(&mut out, ch.encode_utf16(&mut units));
            }
            c if u32::from(c) < 0x20 => push_unicode_escapes(&mut out, c.encode_utf16(&mut units)),
            c if !c.is_ascii() && style.ascii => {
                push_unicode_escapes(&mut out, c.encode_utf16(&mut units));
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    units.fill(0);
    Some(out)
}

/// The secret as the content of a JSON string with every character written as a `\uXXXX` escape
/// (surrogate pairs above U+FFFF), in lower- or uppercase hex: a JSON parser reads the secret
/// back, yet no byte of it appears literally. `None` for a secret that is not UTF-8.
fn json_all_escaped(secret: &[u8], upper: bool) -> Option<Zeroizing<Vec<u8>>> {
    let text = std::str::from_utf8(secret).ok()?;
    let digits: &[u8; 16] = if upper {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    let mut out = Zeroizing::new(Vec::with_capacity(secret.len() * 6));
    let mut units = [0u16; 2];
    for ch in text.chars() {
        for &unit in ch.encode_utf16(&mut units).iter() {
            out.extend_from_slice(b"\\u");
            for shift in [12u16, 8, 4, 0] {
                out.push(digits[usize::from((unit >> shift) & 0xf)]);
            }
        }
    }
    units.fill(0);
    Some(out)
}

fn push_unicode_escapes(out: &mut Vec<u8>, units: &[u16]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for &unit in units {
        out.extend_from_slice(b"\\u");
        for shift in [12u16, 8, 4, 0] {
            out.push(DIGITS[usize::from((unit >> shift) & 0xf)]);
        }
    }
}

/// The stable inner base64 characters of `secret` at `alignment` (0, 1 or 2); `None` when fewer
/// than [`MIN_BASE64_CHARS`] characters are stable.
fn base64_inner(secret: &[u8], alignment: usize, url_safe: bool) -> Option<Pattern> {
    let mut input = Zeroizing::new(vec![0u8; alignment]);
    input.extend_from_slice(secret);
    let mut encoded = Zeroizing::new(vec![0u8; input.len().div_ceil(3) * 4]);
    let engine = if url_safe { &URL_SAFE } else { &STANDARD };
    let written = engine.encode_slice(&input[..], &mut encoded[..]).ok()?;
    // INVARIANT: callers pass an alignment of 0, 1 or 2.
    let first = [0, 2, 3][alignment % 3];
    let bits = 8 * input.len();
    let last = bits / 6;
    if last < first + MIN_BASE64_CHARS || last > written {
        return None;
    }
    // INVARIANT: checked just above: `first < last <= written <= encoded.len()`.
    Some(Pattern {
        bytes: Zeroizing::new(encoded[first..last].to_vec()),
        kind: Kind {
            back: alignment != 0,
            fwd: !bits.is_multiple_of(6),
        },
    })
}

/// The fewest stable base64 characters kept as a pattern: a shorter one would match text that
/// merely happens to contain those characters.
const MIN_BASE64_CHARS: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn all(secret: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        push_patterns(secret, &mut out);
        dedup(&mut out);
        out.iter().map(|p| p.bytes.to_vec()).collect()
    }

    #[test]
    fn base64_inner_strings_are_substrings_of_every_blob() {
        let secret = b"s3cr3t/+value-\"q\"\\x";
        for url_safe in [false, true] {
            let engine = if url_safe { &URL_SAFE } else { &STANDARD };
            for alignment in 0..3 {
                let inner = base64_inner(secret, alignment, url_safe).unwrap();
                for prefix_fill in [0u8, 0x55, 0xff] {
                    for suffix in [&b""[..], b"\x00", b"\xff\xff", b"tail!"] {
                        // Any prefix whose length is `alignment` mod 3.
                        let mut blob = vec![prefix_fill; alignment + 3];
                        blob.extend_from_slice(secret);
                        blob.extend_from_slice(suffix);
                        let encoded = engine.encode(&blob);
                        assert!(
                            memchr::memmem::find(encoded.as_bytes(), &inner.bytes).is_some(),
                            "alignment {alignment} url_safe {url_safe}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn kinds_mark_the_shared_characters() {
        // 3 bytes at alignment 0: 4 whole characters, nothing shared.
        let p = base64_inner(b"abc123", 0, false).unwrap();
        assert_eq!(p.kind, Kind::default());
        assert_eq!(&p.bytes[..], b"YWJjMTIz");
        // At alignment 1, the first character after the prefix's own mixes both.
        let p = base64_inner(b"abc123", 1, false).unwrap();
        assert_eq!(
            p.kind,
            Kind {
                back: true,
                fwd: true
            }
        );
    }

    #[test]
    fn encodings_cover_the_usual_encoders() {
        let patterns = all(b"a b/c\"d<\xc3\xa9");
        let has = |p: &[u8]| patterns.iter().any(|q| q == p);
        assert!(has(b"a b/c\"d<\xc3\xa9"));
        assert!(has(b"a%20b%2Fc%22d%3C%C3%A9"));
        assert!(has(b"a%20b%2fc%22d%3c%c3%a9"));
        assert!(has(b"a%20b/c%22d%3C%C3%A9"));
        assert!(has(b"a+b%2Fc%22d%3C%C3%A9"));
        assert!(has(b"a b/c\\\"d<\xc3\xa9"));
        assert!(has(b"a b\\/c\\\"d<\xc3\xa9"));
        assert!(has(b"a b/c\\\"d\\u003c\xc3\xa9"));
        assert!(has(b"a b/c\\\"d<\\u00e9"));
        assert!(has(b"6120622f6322643cc3a9"));
        assert!(has(b"6120622F6322643CC3A9"));
        // Every character escaped, as a JSON parser reads it back (lower- and uppercase hex).
        assert!(has(
            b"\\u0061\\u0020\\u0062\\u002f\\u0063\\u0022\\u0064\\u003c\\u00e9"
        ));
        assert!(has(
            b"\\u0061\\u0020\\u0062\\u002F\\u0063\\u0022\\u0064\\u003C\\u00E9"
        ));
    }

    #[test]
    fn a_token_of_unreserved_characters_has_few_patterns() {
        // Raw, two hex cases, every character `\u`-escaped in two hex cases, and base64 in two
        // alphabets at three alignments at most.
        let patterns = all(b"ghp_0123456789abcdefghijABCDEFGHIJ0123");
        assert!(patterns.len() <= 1 + 2 + 2 + 6 + 3, "{}", patterns.len());
    }
}
