//! The JSON-RPC 2.0 envelope: turns one input line into a request, a notification or nothing,
//! and writes response lines.
//!
//! Sits between `transport`, which cuts stdin into lines, and `server`, which answers methods.
//! Decoding problems are described by a position and a kind only, so neither a log line nor a
//! response ever repeats what the client sent (beyond the request id a response must echo).
//! Response lines are compact JSON: a line feed can only appear escaped inside a string.
//! A request id is kept as the client wrote it and echoed byte for byte, so an id no Rust
//! number holds exactly (`18446744073709551616`, `-0`, `1e2`) comes back unchanged.

use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

/// The request is not a valid JSON-RPC request object (sent with the id when it is known,
/// else with a null id).
pub(crate) const INVALID_REQUEST: i64 = -32600;
/// The method's parameters or the tool's arguments are invalid.
pub(crate) const INVALID_PARAMS: i64 = -32602;
/// Unknown method, unknown tool, or a tool call that failed (the reference's code for all three).
pub(crate) const INTERNAL_ERROR: i64 = -32603;

/// The longest request id, in bytes of its JSON text as sent, that the server echoes. A longer id is an
/// invalid request answered with a null id, so no response grows with what the client sent.
pub(crate) const MAX_ID_BYTES: usize = 1024;

/// What one input line holds.
#[derive(Debug)]
pub(crate) enum Decoded {
    /// Nothing but whitespace: ignored.
    Blank,
    /// Not UTF-8: logged, never answered.
    NotUtf8 {
        /// The byte offset of the first invalid byte.
        valid_up_to: usize,
    },
    /// Not JSON: logged, never answered.
    Malformed {
        /// The 1-based column where the parser stopped.
        column: usize,
        /// The kind of problem.
        kind: &'static str,
    },
    /// An object without an `id`: never answered, whatever else it holds.
    Notification {
        /// The method, when it is a string.
        method: Option<String>,
    },
    /// JSON that is not a valid request: answered with `INVALID_REQUEST`.
    Invalid {
        /// The request's id when it is usable, else null, as JSON text.
        id: Box<RawValue>,
        /// What is wrong, for the error message.
        problem: &'static str,
    },
    /// A request to answer.
    Request(Request),
}

/// One request: an object with a usable `id`, `"jsonrpc": "2.0"` and a string `method`.
#[derive(Debug)]
pub(crate) struct Request {
    /// A string, a number or null, as the client wrote it, echoed in the response.
    pub(crate) id: Box<RawValue>,
    /// The method name.
    pub(crate) method: String,
    /// The parameters, when present.
    pub(crate) params: Option<Value>,
}

/// A JSON-RPC error object.
#[derive(Debug, Serialize)]
pub(crate) struct RpcError {
    /// `INVALID_REQUEST`, `INVALID_PARAMS` or `INTERNAL_ERROR`.
    pub(crate) code: i64,
    /// A short lowercase sentence.
    pub(crate) message: String,
    /// Structured detail: diagnostics or an error kind, serialized once so that their fields keep
    /// their order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) data: Option<Box<RawValue>>,
}

// === impl RpcError ===

impl RpcError {
    /// An error without data.
    pub(crate) fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }
}

/// Reads one line: blank, undecodable, a notification, an invalid request or a request.
/// Surrounding ASCII whitespace, a trailing CR included, is ignored.
pub(crate) fn decode(line: &[u8]) -> Decoded {
    let line = line.trim_ascii();
    if line.is_empty() {
        return Decoded::Blank;
    }
    let text = match std::str::from_utf8(line) {
        Ok(text) => text,
        Err(error) => {
            return Decoded::NotUtf8 {
                valid_up_to: error.valid_up_to(),
            };
        }
    };
    // serde_json stops at 128 levels of nesting with an error, so deep input cannot overflow
    // the stack.
    match serde_json::from_str::<Value>(text) {
        Ok(value) => classify(value, text),
        Err(error) => Decoded::Malformed {
            column: error.column(),
            kind: match error.classify() {
                serde_json::error::Category::Eof => "unexpected end of the line",
                serde_json::error::Category::Syntax
                | serde_json::error::Category::Data
                | serde_json::error::Category::Io => "syntax error",
            },
        },
    }
}

/// A success response line, without its line feed.
pub(crate) fn success(id: &RawValue, result: &RawValue) -> String {
    #[derive(Serialize)]
    struct Success<'a> {
        jsonrpc: &'static str,
        id: &'a RawValue,
        result: &'a RawValue,
    }
    serialize(&Success {
        jsonrpc: VERSION,
        id,
        result,
    })
}

/// An error response line, without its line feed.
pub(crate) fn failure(id: &RawValue, error: &RpcError) -> String {
    #[derive(Serialize)]
    struct Failure<'a> {
        jsonrpc: &'static str,
        id: &'a RawValue,
        error: &'a RpcError,
    }
    serialize(&Failure {
        jsonrpc: VERSION,
        id,
        error,
    })
}

fn serialize(response: &impl Serialize) -> String {
    serde_json::to_string(response).unwrap_or_else(|_| {
        // Unreachable with the types above (string keys only); answer something valid anyway.
        tracing::error!("Cannot serialize a response");
        INTERNAL_ERROR_LINE.to_owned()
    })
}

/// Classifies a JSON value; `text` is the line it was read from, where the id's text is found.
fn classify(value: Value, text: &str) -> Decoded {
    let mut object = match value {
        Value::Object(object) => object,
        Value::Array(_) => {
            return Decoded::Invalid {
                id: null(),
                problem: "batch requests are not supported; send one JSON object per line",
            };
        }
        _ => {
            return Decoded::Invalid {
                id: null(),
                problem: "a request must be a JSON object",
            };
        }
    };
    let method = object.remove("method");
    // A missing `id` makes a notification; `"id": null` is a request whose id is null.
    let Some(id) = object.remove("id") else {
        return Decoded::Notification {
            method: match method {
                Some(Value::String(method)) => Some(method),
                _ => None,
            },
        };
    };
    if !matches!(id, Value::Null | Value::Number(_) | Value::String(_)) {
        return Decoded::Invalid {
            id: null(),
            problem: "`id` must be a string, a number or null",
        };
    }
    // The id as written: the same member as `id` above (the last one, should the key repeat).
    let Some(id) = raw_id(text) else {
        return Decoded::Invalid {
            id: null(),
            problem: "`id` must be a string, a number or null",
        };
    };
    if id.get().len() > MAX_ID_BYTES {
        return Decoded::Invalid {
            id: null(),
            problem: "`id` is longer than 1024 bytes",
        };
    }
    if object.get("jsonrpc").and_then(Value::as_str) != Some(VERSION) {
        return Decoded::Invalid {
            id,
            problem: "`jsonrpc` must be \"2.0\"",
        };
    }
    let Some(Value::String(method)) = method else {
        return Decoded::Invalid {
            id,
            problem: "`method` must be a string",
        };
    };
    Decoded::Request(Request {
        id,
        method,
        params: object.remove("params"),
    })
}

/// The JSON text of the `id` member of the object `text` holds (already parsed once, so it is
/// valid), when it is a string, a number or null. Like `serde_json::Map`, the last of repeated
/// keys counts.
fn raw_id(text: &str) -> Option<Box<RawValue>> {
    /// The object's `id` member, other members skipped without being stored.
    struct IdMember<'a>(Option<&'a RawValue>);

    impl<'de> Deserialize<'de> for IdMember<'de> {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct Members;

            impl<'de> Visitor<'de> for Members {
                type Value = IdMember<'de>;

                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a JSON object")
                }

                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                    let mut id = None;
                    // Keys are unescaped: `"\u0069d"` is `id` too.
                    while let Some(key) = map.next_key::<String>()? {
                        if key == "id" {
                            id = Some(map.next_value::<&'de RawValue>()?);
                        } else {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                    Ok(IdMember(id))
                }
            }

            deserializer.deserialize_map(Members)
        }
    }

    let IdMember(id) = serde_json::from_str::<IdMember<'_>>(text).ok()?;
    let id = id?;
    // JSON-RPC 2.0: a string, a number or null (`t`rue, `f`alse, `[` and `{` are not).
    matches!(
        id.get().as_bytes().first(),
        Some(b'"' | b'-' | b'0'..=b'9' | b'n')
    )
    .then(|| id.to_owned())
}

/// A null id.
fn null() -> Box<RawValue> {
    RawValue::NULL.to_owned()
}

const VERSION: &str = "2.0";

const INTERNAL_ERROR_LINE: &str =
    r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"internal error"}}"#;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request(line: &str) -> Request {
        match decode(line.as_bytes()) {
            Decoded::Request(request) => request,
            other => panic!("not a request: {other:?}"),
        }
    }

    fn invalid(line: &str) -> (String, &'static str) {
        match decode(line.as_bytes()) {
            Decoded::Invalid { id, problem } => (id.get().to_owned(), problem),
            other => panic!("not invalid: {other:?}"),
        }
    }

    #[test]
    fn blank_lines_and_carriage_returns_are_whitespace() {
        for line in ["", " ", "\t \r", "\r"] {
            assert!(
                matches!(decode(line.as_bytes()), Decoded::Blank),
                "{line:?}"
            );
        }
        let r = request("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r");
        assert_eq!(r.id.get(), "1");
        assert_eq!(r.method, "ping");
    }

    #[test]
    fn a_missing_id_is_a_notification_and_null_or_zero_are_requests() {
        assert!(matches!(
            decode(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Decoded::Notification { method: Some(m) } if m == "notifications/initialized"
        ));
        // Even an unusable notification is never answered.
        assert!(matches!(
            decode(br#"{"method":5}"#),
            Decoded::Notification { method: None }
        ));
        assert_eq!(
            request(r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#)
                .id
                .get(),
            "0"
        );
        assert_eq!(
            request(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#)
                .id
                .get(),
            "null"
        );
        assert_eq!(
            request(r#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#)
                .id
                .get(),
            r#""a""#
        );
    }

    #[test]
    fn invalid_requests_keep_a_usable_id() {
        assert_eq!(
            invalid(r#"{"jsonrpc":"2.0","id":7}"#),
            ("7".to_owned(), "`method` must be a string")
        );
        assert_eq!(
            invalid(r#"{"id":7,"method":"ping"}"#),
            ("7".to_owned(), "`jsonrpc` must be \"2.0\"")
        );
        assert_eq!(
            invalid(r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#).0,
            "null"
        );
        let long = format!(
            r#"{{"jsonrpc":"2.0","id":"{}","method":"ping"}}"#,
            "x".repeat(2000)
        );
        assert_eq!(
            invalid(&long),
            ("null".to_owned(), "`id` is longer than 1024 bytes")
        );
    }

    #[test]
    fn ids_are_echoed_as_written() {
        for id in [
            "18446744073709551616",
            "-9223372036854775809",
            "123456789012345678901234567890",
            "-0",
            "1e2",
            "1.50",
            r#""\u0041""#,
            r#""é""#,
        ] {
            let line = format!(r#"{{"jsonrpc":"2.0", "id" : {id} ,"method":"ping"}}"#);
            let r = request(&line);
            assert_eq!(r.id.get(), id);
            let result = RawValue::from_string("{}".to_owned()).unwrap();
            assert_eq!(
                success(&r.id, &result),
                format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#)
            );
        }
        // The last of repeated keys, as the parsed object has it; an escaped key counts.
        assert_eq!(
            request(r#"{"jsonrpc":"2.0","id":1,"method":"ping","id":2}"#)
                .id
                .get(),
            "2"
        );
        assert_eq!(
            request(r#"{"jsonrpc":"2.0","\u0069d":"x","method":"ping"}"#)
                .id
                .get(),
            r#""x""#
        );
        for id in ["true", "[1]", "{}"] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            assert_eq!(invalid(&line).0, "null");
        }
        // The bound counts the id as written.
        // 1025 bytes: a number with many digits (finite, so JSON).
        let number = format!("1.{}", "9".repeat(1023));
        let long = format!(r#"{{"jsonrpc":"2.0","id":{number},"method":"ping"}}"#);
        assert_eq!(invalid(&long).1, "`id` is longer than 1024 bytes");
    }

    #[test]
    fn batches_and_scalars_are_invalid_requests_with_a_null_id() {
        let (id, problem) = invalid(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#);
        assert_eq!(id, "null");
        assert!(problem.starts_with("batch requests are not supported"));
        assert_eq!(invalid("42").1, "a request must be a JSON object");
    }

    #[test]
    fn undecodable_lines_report_a_position_only() {
        assert!(matches!(
            decode(b"{\"a\":\xff}"),
            Decoded::NotUtf8 { valid_up_to: 5 }
        ));
        assert!(matches!(
            decode(b"{\"jsonrpc\":"),
            Decoded::Malformed {
                kind: "unexpected end of the line",
                ..
            }
        ));
        assert!(matches!(
            decode(b"{oops}"),
            Decoded::Malformed {
                column: 2,
                kind: "syntax error"
            }
        ));
        let deep = "[".repeat(100_000);
        assert!(matches!(decode(deep.as_bytes()), Decoded::Malformed { .. }));
    }

    #[test]
    fn responses_are_compact_and_ordered() {
        let result = RawValue::from_string("{\"b\":1,\"a\":2}".to_owned()).unwrap();
        assert_eq!(
            success(&RawValue::from_string("0".to_owned()).unwrap(), &result),
            r#"{"jsonrpc":"2.0","id":0,"result":{"b":1,"a":2}}"#
        );
        assert_eq!(
            failure(
                RawValue::NULL,
                &RpcError::new(INTERNAL_ERROR, "unknown method")
            ),
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"unknown method"}}"#
        );
        let parsed: Value = serde_json::from_str(INTERNAL_ERROR_LINE).unwrap();
        assert_eq!(parsed["error"]["code"], json!(INTERNAL_ERROR));
    }
}
