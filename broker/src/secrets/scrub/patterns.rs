//! The byte strings a secret can take in an answer: raw, hex, percent-encoded, JSON-escaped,
//! base64 (also line-wrapped), HTML character references and quoted-printable. Every pattern is as secret as the secret itself: each is held in a `Zeroizing` buffer
//! and only lives until the automaton is built.
//!
//! Base64 at three alignments: inside a larger encoded blob the secret can start at byte 0, 1 or
//! 2 of a 3-byte quantum. For alignment `k` the secret is encoded behind `k` zero bytes and only
//! the characters whose 6 bits all come from the secret are kept: characters `[0, 2, 3][k]` up to
//! `floor(8 (k + n) / 6)` for an `n`-byte secret. The characters before and after that "stable
//! inner" string mix secret bits with bits of unknown neighbours; they are not in the pattern.
//! The pattern's [`Kind`] says which neighbour holds secret bits, and the scrubber redacts that
//! neighbour character too (see `scrub.rs`), also when a line break separates it from the match.
//!
//! Line-wrapped base64 (MIME: 76 characters a line, PEM: 64; CRLF or LF, raw or JSON-escaped as
//! `\\n` and `\\r\\n`): the stable inner string with a break at every position strictly
//! inside it, and, when it is longer than a line, further breaks every line length after that.
//! Quoted-printable: the units of the encoded secret with at most one soft line break between
//! two of them.
//!
//! Every buffer built here holds a form of a secret, so it grows only through
//! `secrets::extend_wiped` and `push_wiped`, which wipe the allocation a growing buffer leaves.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use zeroize::{Zeroize, Zeroizing};

use crate::secrets::{extend_wiped, push_wiped};

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
    push_html(secret, out);
    push_quoted_printable(secret, out);
    for alignment in 0..3 {
        if let Some(inner) = base64_inner(secret, alignment, false) {
            push_wrapped(&inner, out);
            push_html_base64(&inner, out);
        }
        for url_safe in [false, true] {
            let Some(pattern) = base64_inner(secret, alignment, url_safe) else {
                continue;
            };
            if !url_safe && pattern.bytes.contains(&b'/') {
                // PHP's `json_encode` writes `/` as `\/`, also inside base64 text.
                let mut escaped = Zeroizing::new(Vec::with_capacity(pattern.bytes.len() + 8));
                for &byte in pattern.bytes.iter() {
                    if byte == b'/' {
                        push_wiped(&mut escaped, b'\\');
                    }
                    push_wiped(&mut escaped, byte);
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

/// The longest neighbour a base64 match takes with it on either side, in bytes: a line break
/// (at most 4 bytes, `\r\n` JSON-escaped) followed by a base64 character (at most 2, `\/`), or a
/// base64 character written as an HTML character reference (at most 6, `&#x2B;`).
pub(crate) const EXTENSION_MAX: usize = 6;

/// How a line break can be spelled between base64 lines: CRLF, LF, and both JSON-escaped (as a
/// JSON encoder writes the output of Python's `base64.encodebytes`).
pub(crate) const LINE_BREAKS: [&[u8]; 4] = [b"\r\n", b"\n", b"\\r\\n", b"\\n"];

/// The line lengths of wrapped base64: MIME (`base64.encodebytes`, `chunk_split`, mail APIs)
/// and PEM.
const LINE_LENGTHS: [usize; 2] = [76, 64];

/// `inner` (a stable inner base64 string) wrapped: a line break at each position `p` strictly
/// inside it, then every line length after `p`, for every spelling of the break.
fn push_wrapped(inner: &Pattern, out: &mut Vec<Pattern>) {
    let len = inner.bytes.len();
    for width in LINE_LENGTHS {
        // The first break after `p` characters; `p = width` is a line that starts with the match.
        for first in 1..len.min(width + 1) {
            for spelling in LINE_BREAKS {
                let mut bytes =
                    Zeroizing::new(Vec::with_capacity(len + spelling.len() * (len / width + 1)));
                for (i, &byte) in inner.bytes.iter().enumerate() {
                    if i >= first && (i - first).is_multiple_of(width) {
                        extend_wiped(&mut bytes, spelling);
                    }
                    push_wiped(&mut bytes, byte);
                }
                out.push(Pattern {
                    bytes,
                    kind: inner.kind,
                });
            }
        }
    }
}

/// How an HTML numeric character reference is written.
#[derive(Clone, Copy)]
enum Reference {
    /// `&#43;`
    Decimal,
    /// `&#x2b;`
    LowerHex,
    /// `&#x2B;`
    UpperHex,
    /// `&#X2B;`
    UpperX,
}

const REFERENCES: [Reference; 4] = [
    Reference::Decimal,
    Reference::LowerHex,
    Reference::UpperHex,
    Reference::UpperX,
];

fn push_reference(out: &mut Vec<u8>, code: u32, style: Reference) {
    let (head, radix, digits): (&[u8], u32, &[u8; 16]) = match style {
        Reference::Decimal => (b"&#", 10, b"0123456789abcdef"),
        Reference::LowerHex => (b"&#x", 16, b"0123456789abcdef"),
        Reference::UpperHex => (b"&#x", 16, b"0123456789ABCDEF"),
        Reference::UpperX => (b"&#X", 16, b"0123456789ABCDEF"),
    };
    // The digits, last first, written straight into `out`: they are a character of the secret
    // (a formatted string would have grown and freed copies of them).
    let mut reversed = [0u8; 10];
    let mut count = 0;
    let mut rest = code;
    loop {
        if let Some(place) = reversed.get_mut(count) {
            *place = digits[(rest % radix) as usize];
        }
        count += 1;
        rest /= radix;
        if rest == 0 {
            break;
        }
    }
    extend_wiped(out, head);
    for &digit in reversed.iter().take(count).rev() {
        push_wiped(out, digit);
    }
    push_wiped(out, b';');
    reversed.zeroize();
}

/// How an HTML escaper writes the characters it escapes besides `&`, `<` and `>` (always
/// `&amp;`, `&lt;`, `&gt;`); `None` leaves the character as it is.
struct NamedStyle {
    quote: Option<&'static [u8]>,
    apostrophe: Option<&'static [u8]>,
    plus: Option<&'static [u8]>,
}

/// Go's `html/template`; Python's `html.escape`; the same with `quote=False` (and most text
/// escapers); npm's `escape-html`.
const NAMED_STYLES: [NamedStyle; 4] = [
    NamedStyle {
        quote: Some(b"&#34;"),
        apostrophe: Some(b"&#39;"),
        plus: Some(b"&#43;"),
    },
    NamedStyle {
        quote: Some(b"&quot;"),
        apostrophe: Some(b"&#x27;"),
        plus: None,
    },
    NamedStyle {
        quote: None,
        apostrophe: None,
        plus: None,
    },
    NamedStyle {
        quote: Some(b"&quot;"),
        apostrophe: Some(b"&#39;"),
        plus: None,
    },
];

/// The secret as HTML escapers write it (see [`NAMED_STYLES`]), every character outside ASCII letters and digits as a numeric reference, and every
/// character as one (decimal, lower- and uppercase hex). `None` of them for a secret that is not
/// UTF-8.
fn push_html(secret: &[u8], out: &mut Vec<Pattern>) {
    let Ok(text) = std::str::from_utf8(secret) else {
        return;
    };
    for style in NAMED_STYLES {
        let mut bytes = Zeroizing::new(Vec::with_capacity(secret.len() + 16));
        let mut buf = [0u8; 4];
        for ch in text.chars() {
            let escaped: Option<&[u8]> = match ch {
                '&' => Some(b"&amp;"),
                '<' => Some(b"&lt;"),
                '>' => Some(b"&gt;"),
                '"' => style.quote,
                '\'' => style.apostrophe,
                '+' => style.plus,
                _ => None,
            };
            match escaped {
                Some(escaped) => extend_wiped(&mut bytes, escaped),
                None => extend_wiped(&mut bytes, ch.encode_utf8(&mut buf).as_bytes()),
            }
        }
        buf.zeroize();
        out.push(Pattern {
            bytes,
            kind: Kind::default(),
        });
    }
    for every in [false, true] {
        for style in REFERENCES {
            let mut bytes = Zeroizing::new(Vec::with_capacity(secret.len() * 6));
            for ch in text.chars() {
                match u8::try_from(ch) {
                    Ok(byte) if !every && byte.is_ascii_alphanumeric() => {
                        push_wiped(&mut bytes, byte)
                    }
                    _ => push_reference(&mut bytes, u32::from(ch), style),
                }
            }
            out.push(Pattern {
                bytes,
                kind: Kind::default(),
            });
        }
    }
}

/// A stable inner base64 string with `+` (Go's `html/template`), or `+` and `/`, written as
/// numeric character references.
fn push_html_base64(inner: &Pattern, out: &mut Vec<Pattern>) {
    if !inner.bytes.iter().any(|&b| b == b'+' || b == b'/') {
        return;
    }
    for (style, slash) in [
        (Reference::Decimal, false),
        (Reference::Decimal, true),
        (Reference::LowerHex, true),
        (Reference::UpperHex, true),
        (Reference::UpperX, true),
    ] {
        let mut bytes = Zeroizing::new(Vec::with_capacity(inner.bytes.len() + 32));
        for &byte in inner.bytes.iter() {
            if byte == b'+' || (slash && byte == b'/') {
                push_reference(&mut bytes, u32::from(byte), style);
            } else {
                push_wiped(&mut bytes, byte);
            }
        }
        out.push(Pattern {
            bytes,
            kind: inner.kind,
        });
    }
}

/// The secret quoted-printable: as RFC 2045 encoders write it (`=`, controls and bytes outside
/// ASCII as `=XX`, space and tab kept) and with every byte outside ASCII letters and digits as
/// `=XX`; each without a soft line break and with one (`=\r\n` or `=\n`) between any two units.
fn push_quoted_printable(secret: &[u8], out: &mut Vec<Pattern>) {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    for every in [false, true] {
        let keep = |byte: u8| {
            if every {
                byte.is_ascii_alphanumeric()
            } else {
                byte == b' ' || byte == b'\t' || (byte.is_ascii_graphic() && byte != b'=')
            }
        };
        // The offsets where each unit ends.
        let mut encoded = Zeroizing::new(Vec::with_capacity(secret.len() * 3));
        let mut ends = Vec::with_capacity(secret.len());
        for &byte in secret {
            if keep(byte) {
                push_wiped(&mut encoded, byte);
            } else {
                extend_wiped(
                    &mut encoded,
                    &[
                        b'=',
                        DIGITS[usize::from(byte >> 4)],
                        DIGITS[usize::from(byte & 0xf)],
                    ],
                );
            }
            ends.push(encoded.len());
        }
        ends.pop();
        // A line holds at most 76 characters, so an encoding longer than two lines has two soft
        // breaks or more: one break is only worth a pattern where both sides fit a line.
        let line = QP_LINE - 1;
        ends.retain(|&at| at <= line && encoded.len() - at <= line);
        for &at in &ends {
            for soft in [&b"=\r\n"[..], b"=\n"] {
                let mut bytes = Zeroizing::new(Vec::with_capacity(encoded.len() + 3));
                // INVARIANT: every offset in `ends` is within `encoded`.
                extend_wiped(&mut bytes, &encoded[..at]);
                extend_wiped(&mut bytes, soft);
                extend_wiped(&mut bytes, &encoded[at..]);
                out.push(Pattern {
                    bytes,
                    kind: Kind::default(),
                });
            }
        }
        out.push(Pattern {
            bytes: encoded,
            kind: Kind::default(),
        });
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
        push_wiped(&mut out, digits[usize::from(byte >> 4)]);
        push_wiped(&mut out, digits[usize::from(byte & 0xf)]);
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
            push_wiped(&mut out, byte);
        } else if byte == b' ' && style.space_plus {
            push_wiped(&mut out, b'+');
        } else {
            extend_wiped(
                &mut out,
                &[
                    b'%',
                    digits[usize::from(byte >> 4)],
                    digits[usize::from(byte & 0xf)],
                ],
            );
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
            '"' => extend_wiped(&mut out, b"\\\""),
            '\\' => extend_wiped(&mut out, b"\\\\"),
            '\u{8}' => extend_wiped(&mut out, b"\\b"),
            '\u{c}' => extend_wiped(&mut out, b"\\f"),
            '\n' => extend_wiped(&mut out, b"\\n"),
            '\r' => extend_wiped(&mut out, b"\\r"),
            '\t' => extend_wiped(&mut out, b"\\t"),
            '/' if style.slash => extend_wiped(&mut out, b"\\/"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' if style.html => {
                push_unicode_escapes(&mut out, ch.encode_utf16(&mut units));
            }
            c if u32::from(c) < 0x20 => push_unicode_escapes(&mut out, c.encode_utf16(&mut units)),
            c if !c.is_ascii() && style.ascii => {
                push_unicode_escapes(&mut out, c.encode_utf16(&mut units));
            }
            c => {
                let mut buf = [0u8; 4];
                extend_wiped(&mut out, c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    units.zeroize();
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
            extend_wiped(&mut out, b"\\u");
            for shift in [12u16, 8, 4, 0] {
                push_wiped(&mut out, digits[usize::from((unit >> shift) & 0xf)]);
            }
        }
    }
    units.zeroize();
    Some(out)
}

fn push_unicode_escapes(out: &mut Vec<u8>, units: &[u16]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for &unit in units {
        extend_wiped(out, b"\\u");
        for shift in [12u16, 8, 4, 0] {
            push_wiped(out, DIGITS[usize::from((unit >> shift) & 0xf)]);
        }
    }
}

/// The stable inner base64 characters of `secret` at `alignment` (0, 1 or 2); `None` when fewer
/// than [`MIN_BASE64_CHARS`] characters are stable.
fn base64_inner(secret: &[u8], alignment: usize, url_safe: bool) -> Option<Pattern> {
    let mut input = Zeroizing::new(Vec::with_capacity(alignment + secret.len()));
    input.resize(alignment, 0);
    extend_wiped(&mut input, secret);
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

/// The longest quoted-printable line, soft break `=` included (RFC 2045).
const QP_LINE: usize = 76;

/// The fewest stable base64 characters kept as a pattern: a shorter one would match text that
/// merely happens to contain those characters.
const MIN_BASE64_CHARS: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_written_as_a_formatter_would() {
        for code in [
            0u32, 9, 10, 43, 47, 127, 255, 0x2028, 0xFFFF, 0x1_0000, 0x10_FFFF,
        ] {
            for (style, expected) in [
                (Reference::Decimal, format!("&#{code};")),
                (Reference::LowerHex, format!("&#x{code:x};")),
                (Reference::UpperHex, format!("&#x{code:X};")),
                (Reference::UpperX, format!("&#X{code:X};")),
            ] {
                let mut out = b"before".to_vec();
                push_reference(&mut out, code, style);
                assert_eq!(out, [&b"before"[..], expected.as_bytes()].concat());
            }
        }
    }

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
    fn a_token_of_unreserved_characters_has_a_bounded_number_of_patterns() {
        // Per alignment (3): the stable inner string in two alphabets, and wrapped with a break
        // at each of its inner positions in 4 spellings; quoted-printable with a soft break (2
        // spellings) between any two of its characters, in 2 styles; and a few more.
        let token = b"ghp_0123456789abcdefghijABCDEFGHIJ0123";
        let patterns = all(token);
        let inner = 8 * token.len() / 6;
        let bound = 3 * (2 + 4 * inner) + 2 * 2 * (2 * token.len()) + 20;
        assert!(patterns.len() <= bound, "{} > {bound}", patterns.len());
    }

    #[test]
    fn new_forms_cover_wrapped_base64_html_and_quoted_printable() {
        let secret = b"a+b/c=d\"e'f<g&";
        let patterns = all(secret);
        let has = |p: &[u8]| patterns.iter().any(|q| q == p);
        assert!(has(b"a&#43;b/c=d&#34;e&#39;f&lt;g&amp;"));
        assert!(has(b"a+b/c=d&quot;e&#x27;f&lt;g&amp;"));
        assert!(has(b"a&#x2B;b&#x2F;c&#x3D;d&#x22;e&#x27;f&#x3C;g&#x26;"));
        assert!(has(
            b"&#97;&#43;&#98;&#47;&#99;&#61;&#100;&#34;&#101;&#39;&#102;&#60;&#103;&#38;"
        ));
        assert!(has(b"a+b/c=3Dd\"e'f<g&"));
        assert!(has(b"a+b/c=3D=\r\nd\"e'f<g&"));
        assert!(has(b"a=2Bb=2Fc=\n=3Dd=22e=27f=3Cg=26"));
        let inner = base64_inner(secret, 0, false).unwrap();
        let text = String::from_utf8(inner.bytes.to_vec()).unwrap();
        for spelling in ["\n", "\r\n", "\\n", "\\r\\n"] {
            for at in 1..text.len() {
                let wrapped = format!("{}{spelling}{}", &text[..at], &text[at..]);
                assert!(has(wrapped.as_bytes()), "{wrapped}");
            }
        }
    }

    #[test]
    fn long_encodings_break_at_every_line() {
        let secret = [b'k'; 120];
        let patterns = all(&secret);
        let inner = base64_inner(&secret, 0, false).unwrap();
        let text = String::from_utf8(inner.bytes.to_vec()).unwrap();
        assert!(text.len() > 152);
        let wrapped = format!("{}\n{}\n{}", &text[..10], &text[10..86], &text[86..]);
        assert!(patterns.iter().any(|p| p == wrapped.as_bytes()));
        let pem = format!("{}\r\n{}\r\n{}", &text[..64], &text[64..128], &text[128..]);
        assert!(patterns.iter().any(|p| p == pem.as_bytes()));
    }

    #[test]
    #[ignore = "prints build figures; run by hand"]
    fn build_figures() {
        let many: Vec<Vec<u8>> = (0..16u32)
            .map(|i| {
                let len = [40usize, 56, 40, 61][i as usize % 4];
                (0..len)
                    .map(|j| {
                        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                            [((j as u32 * 7919 + i * 104729) ^ (j as u32 * i)) as usize % 62]
                    })
                    .collect()
            })
            .collect();
        let (patterns, _, _) = crate::secrets::scrub::all_patterns(many.iter().map(|s| &s[..]));
        let count = patterns.len();
        let engine = crate::secrets::scrub::engine::Engine::new(patterns, 16, true);
        eprintln!(
            "16 secrets: {count} patterns: {:?}",
            engine.ok().flatten().map(|e| e.shape())
        );
        for len in [40usize, 200] {
            let secret: Vec<u8> = (0..len)
                .map(|i| b"abcdefghijklmnopqrstuvwxyz0123456789+/_-"[i % 40])
                .collect();
            let started = std::time::Instant::now();
            let (patterns, _, _) = crate::secrets::scrub::all_patterns([&secret[..]]);
            let generated = started.elapsed();
            let started = std::time::Instant::now();
            let count = patterns.len();
            let engine = crate::secrets::scrub::engine::Engine::new(patterns, 1, true);
            eprintln!(
                "{count} patterns generated in {generated:?}, engine in {:?}: {:?}",
                started.elapsed(),
                engine.ok().flatten().map(|e| e.shape())
            );
            let started = std::time::Instant::now();
            let scrubber = crate::secrets::scrub::Scrubber::from_secrets([&secret[..]]).unwrap();
            let elapsed = started.elapsed();
            eprintln!(
                "{len}-byte secret: {} patterns, longest {}, hold {}, built in {elapsed:?}",
                all(&secret).len(),
                all(&secret).iter().map(Vec::len).max().unwrap_or(0),
                scrubber.engine.as_ref().map_or(0, |e| e.hold())
            );
        }
    }
}
