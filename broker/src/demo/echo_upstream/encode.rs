//! The encoded forms `/echo-encoded` returns for each value: every spelling in which a secret
//! could come back that Mint's scrubber must catch.

use std::fmt::Write as _;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};

/// What precedes the value inside the `*_embedded` blobs (its first 0, 1 or 2 bytes).
pub(super) const EMBED_PREFIX: &[u8] = b"##";
/// What follows the value inside the `*_embedded` blobs.
pub(super) const EMBED_SUFFIX: &[u8] = b"##end";

/// A JSON string literal (quotes included), escaped as serde_json escapes.
pub(super) fn json_string(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// One element of `forms` as JSON text: `source` (`header`, `query` or `body`), `name`, the
/// value as text, and its encoded forms.
pub(super) fn forms_object(source: &str, name: &str, value: &[u8]) -> String {
    let text = String::from_utf8_lossy(value);
    let embedded = |prefix_len: usize| {
        let mut blob = EMBED_PREFIX[..prefix_len].to_vec();
        blob.extend_from_slice(value);
        blob.extend_from_slice(EMBED_SUFFIX);
        blob
    };
    let blobs = [embedded(0), embedded(1), embedded(2)];
    let list = |encode: &dyn Fn(&[u8]) -> String| {
        let items: Vec<String> = blobs.iter().map(|b| json_string(&encode(b))).collect();
        format!("[{}]", items.join(","))
    };
    let fields = [
        ("source", json_string(source)),
        ("name", json_string(name)),
        ("value", json_string(&text)),
        ("base64", json_string(&STANDARD.encode(value))),
        ("base64_nopad", json_string(&STANDARD_NO_PAD.encode(value))),
        ("base64url", json_string(&URL_SAFE.encode(value))),
        (
            "base64url_nopad",
            json_string(&URL_SAFE_NO_PAD.encode(value)),
        ),
        ("base64_embedded", list(&|b| STANDARD.encode(b))),
        ("base64url_embedded", list(&|b| URL_SAFE_NO_PAD.encode(b))),
        ("hex", json_string(&hex::encode(value))),
        ("hex_upper", json_string(&hex::encode_upper(value))),
        ("percent", json_string(&percent_encode(value, Case::Upper))),
        (
            "percent_lower",
            json_string(&percent_encode(value, Case::Lower)),
        ),
        ("json_unicode", format!("\"{}\"", json_unicode(&text))),
    ];
    let body: Vec<String> = fields
        .iter()
        .map(|(key, json)| format!("\"{key}\":{json}"))
        .collect();
    format!("{{{}}}", body.join(","))
}

/// Hex digits' case in percent-encoding.
#[derive(Debug, Clone, Copy)]
pub(super) enum Case {
    Upper,
    Lower,
}

/// Percent-encodes every byte outside RFC 3986's unreserved set.
pub(super) fn percent_encode(value: &[u8], case: Case) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for &byte in value {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            let _ = match case {
                Case::Upper => write!(out, "%{byte:02X}"),
                Case::Lower => write!(out, "%{byte:02x}"),
            };
        }
    }
    out
}

/// Decodes `%XX` escapes; a `%` not followed by two hex digits stays as it is, and `+` stays `+`.
pub(super) fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(high), Some(low)) = (hex_digit(bytes[i + 1]), hex_digit(bytes[i + 2]))
        {
            out.push(high << 4 | low);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

fn hex_digit(byte: u8) -> Option<u8> {
    char::from(byte)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// Every character as a JSON `\uXXXX` escape (surrogate pairs above U+FFFF), without quotes: a
/// JSON parser reads the value back unchanged, yet no byte of it appears literally.
pub(super) fn json_unicode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 6);
    let mut units = [0u16; 2];
    for c in text.chars() {
        for unit in c.encode_utf16(&mut units) {
            let _ = write!(out, "\\u{unit:04x}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_round_trips() {
        let value = b"a b/{{mint:x}}%\xff";
        assert_eq!(percent_decode(&percent_encode(value, Case::Upper)), value);
        assert_eq!(percent_decode(&percent_encode(value, Case::Lower)), value);
        assert_eq!(percent_encode(b"a b~", Case::Upper), "a%20b~");
        assert_eq!(percent_decode("%zz%4"), b"%zz%4");
        assert_eq!(percent_decode("a+b%2B"), b"a+b+");
    }

    #[test]
    fn json_unicode_parses_back() {
        let text = "s3cr\"t\\é😀";
        let parsed: String = serde_json::from_str(&format!("\"{}\"", json_unicode(text))).unwrap();
        assert_eq!(parsed, text);
        assert!(!json_unicode(text).contains("s3cr"));
    }

    #[test]
    fn forms_object_is_json_with_every_alignment() {
        let object: serde_json::Value =
            serde_json::from_str(&forms_object("header", "authorization", b"Bearer tok")).unwrap();
        assert_eq!(object["value"], "Bearer tok");
        assert_eq!(object["base64"], STANDARD.encode("Bearer tok"));
        assert_eq!(object["json_unicode"], "Bearer tok");
        let embedded = object["base64_embedded"].as_array().unwrap();
        assert_eq!(embedded.len(), 3);
        assert_eq!(embedded[1], STANDARD.encode("#Bearer tok##end"));
    }
}
