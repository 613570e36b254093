//! Fuzzes the MCP `tools/call` body check (`mint_broker::proxy::mcp_call`) against serde_json.
//!
//! Input: one flags byte (bit 0: also send the body gzip-compressed with
//! `Content-Encoding: gzip`), then the body.
//!
//! Beyond "never panics", it checks, for every body serde_json reads as JSON texts (one optional
//! byte order mark, duplicate member names refused, the first text an object or an array, as the
//! module's "JSON-like" rule asks):
//!
//! - when the check names calls, they are exactly, in order, the `params.name` of the messages
//!   a reference reader written here from the module's rules finds (a top-level object or an
//!   object element of a top-level array, in every text; members compared cut at U+0000, ASCII
//!   case-insensitively with `ſ`, the Kelvin sign, `ı` and `İ` folded);
//! - when it says "no call", the reference finds none: no call hides from the check;
//! - every name it returns is 1–128 printable ASCII characters without a space or `{{mint:`.
//!
//! And whenever the check accepts a JSON-like body, serde_json reads it too (unless a number is
//! past f64's range, which serde_json refuses and the check need not); the same body gzip-coded
//! gives the same answer.

#![no_main]

#[path = "../shared/strict_json.rs"]
mod strict_json;

use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use http::{HeaderMap, HeaderValue, Method};
use libfuzzer_sys::fuzz_target;
use mint_broker::proxy::mcp_call::{ToolCalls, examine, tool_calls};
use serde_json::{Map, Value};
use strict_json::Strict;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, body)) = data.split_first() else {
        return;
    };
    let result = examine(body);

    if let Ok(calls) = &result {
        for name in calls.names() {
            let name = name.as_str();
            assert!((1..=128).contains(&name.len()), "{name:?}");
            assert!(name.bytes().all(|b| b.is_ascii_graphic()), "{name:?}");
            assert!(!name.to_ascii_lowercase().contains("{{mint:"), "{name:?}");
        }
    }

    let json_like = first_significant(body).is_some_and(|b| b == b'{' || b == b'[');
    match serde_texts(body) {
        Texts::Read(texts)
            if json_like && matches!(texts.first(), Some(Value::Object(_) | Value::Array(_))) =>
        {
            let reference = reference_calls(&texts);
            match &result {
                Ok(ToolCalls::Calls(names)) => {
                    let ours: Vec<&str> = names.iter().map(|n| n.as_str()).collect();
                    assert_eq!(
                        ours,
                        reference.iter().map(String::as_str).collect::<Vec<_>>()
                    );
                }
                Ok(ToolCalls::None) => {
                    assert!(
                        reference.is_empty(),
                        "a call hides from the check: {reference:?}"
                    )
                }
                Err(_) => {}
            }
        }
        Texts::Read(_) | Texts::OutOfRange => {}
        Texts::Refused => {
            // The check must not accept as JSON what serde_json refuses as JSON.
            if json_like {
                assert!(
                    result.is_err(),
                    "accepted a body serde_json refuses: {result:?}"
                );
            }
        }
    }

    if flags & 1 != 0 {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
        encoder.write_all(body).unwrap();
        let coded = encoder.finish().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_ENCODING,
            HeaderValue::from_static("gzip"),
        );
        let through_gzip = tool_calls(&Method::POST, &headers, &coded);
        if body.is_empty() {
            // An empty body is no call before any decoding; a coded empty body is not empty.
            assert_eq!(through_gzip, Ok(ToolCalls::None));
        } else {
            assert_eq!(through_gzip, result, "gzip changes the answer");
        }
    }
});

/// The tool names of the `tools/call` messages in `texts`, in order (the module's rules).
fn reference_calls(texts: &[Value]) -> Vec<String> {
    let mut names = Vec::new();
    for text in texts {
        let messages: Vec<&Map<String, Value>> = match text {
            Value::Object(message) => vec![message],
            Value::Array(batch) => batch.iter().filter_map(Value::as_object).collect(),
            _ => Vec::new(),
        };
        for message in messages {
            let method = member(message, "method");
            if !method
                .and_then(Value::as_str)
                .is_some_and(|m| folds_to(m, "tools/call"))
            {
                continue;
            }
            // The check refuses a call without a valid name; a reference call without one is
            // only compared when the check accepted the body, where this cannot happen.
            let name = member(message, "params")
                .and_then(Value::as_object)
                .and_then(|params| member(params, "name"))
                .and_then(Value::as_str)
                .unwrap_or("<no valid name>");
            names.push(name.to_owned());
        }
    }
    names
}

/// The value of the one member of `object` whose name folds to `name`.
fn member<'a>(object: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    object
        .iter()
        .find(|(key, _)| folds_to(key, name))
        .map(|(_, value)| value)
}

/// Whether `text` reads as lowercase ASCII `target` to the most lenient receiver.
fn folds_to(text: &str, target: &str) -> bool {
    let cut = match text.find('\0') {
        Some(at) => &text[..at],
        None => text,
    };
    let folded: String = cut
        .chars()
        .map(|c| match c {
            'ſ' => 's',
            '\u{212a}' => 'k',
            'ı' | 'İ' => 'i',
            c if c.is_ascii_uppercase() => c.to_ascii_lowercase(),
            c => c,
        })
        .collect();
    folded == target
}

/// The first byte past one byte order mark and JSON whitespace, when nothing else precedes it.
fn first_significant(body: &[u8]) -> Option<u8> {
    let body = body.strip_prefix("\u{feff}".as_bytes()).unwrap_or(body);
    body.iter().copied().find(|b| !b" \t\r\n".contains(b))
}

enum Texts {
    Read(Vec<Value>),
    /// serde_json refuses a number past f64's range, which the check need not.
    OutOfRange,
    Refused,
}

/// The JSON texts of a body as serde_json reads them, one optional byte order mark first and
/// duplicate member names refused. Texts that are not objects, arrays or strings must be followed
/// by whitespace or the end (serde_json would read `1 2` and `12` alike otherwise).
fn serde_texts(body: &[u8]) -> Texts {
    let body = body.strip_prefix("\u{feff}".as_bytes()).unwrap_or(body);
    let mut stream = serde_json::Deserializer::from_slice(body).into_iter::<Strict>();
    let mut texts = Vec::new();
    loop {
        match stream.next() {
            None if texts.is_empty() => return Texts::Refused,
            None => return Texts::Read(texts),
            Some(Err(error)) if error.to_string().contains("number out of range") => {
                return Texts::OutOfRange;
            }
            Some(Err(_)) => return Texts::Refused,
            Some(Ok(Strict(value))) => {
                let delimited = value.is_string() || value.is_array() || value.is_object();
                let next = body.get(stream.byte_offset());
                if !delimited && next.is_some_and(|b| !b" \t\n\r".contains(b)) {
                    return Texts::Refused;
                }
                texts.push(value);
            }
        }
    }
}
