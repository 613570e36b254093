//! Unit tests of `tools/call` detection: what is examined, strict parsing, the JSON-RPC reading,
//! the limits, and agreement with serde_json on generated messages.

use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use http::HeaderValue;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

/// What a table row expects.
#[derive(Debug)]
enum Expect {
    None,
    Names(&'static [&'static str]),
    /// An error of this kind (see `kind`).
    Err(&'static str),
}

fn kind(error: &McpCallError) -> &'static str {
    match error {
        McpCallError::Malformed { .. } => "malformed",
        McpCallError::TooDeep { .. } => "too_deep",
        McpCallError::DuplicateKey { .. } => "duplicate_key",
        McpCallError::AmbiguousMember { .. } => "ambiguous_member",
        McpCallError::InvalidToolCall { .. } => "invalid_tool_call",
        McpCallError::NotUtf8 => "not_utf8",
        McpCallError::UnsupportedCharset => "unsupported_charset",
        McpCallError::UnsupportedContentEncoding => "unsupported_content_encoding",
        McpCallError::UndecodableBody => "undecodable_body",
        McpCallError::BodyTooLarge { .. } => "body_too_large",
        McpCallError::DecodedBodyTooLarge { .. } => "decoded_body_too_large",
    }
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

fn json_headers() -> HeaderMap {
    headers(&[("content-type", "application/json")])
}

/// The result for a POST with `Content-Type: application/json`.
fn post(body: impl AsRef<[u8]>) -> Result<ToolCalls, McpCallError> {
    tool_calls(&Method::POST, &json_headers(), body.as_ref())
}

#[track_caller]
fn check(label: &str, result: Result<ToolCalls, McpCallError>, expect: &Expect) {
    match (result, expect) {
        (Ok(ToolCalls::None), Expect::None) => {}
        (Ok(ToolCalls::Calls(names)), Expect::Names(expected)) => {
            let names: Vec<&str> = names.iter().map(ToolName::as_str).collect();
            assert_eq!(&names, expected, "{label}");
        }
        (Err(error), Expect::Err(expected)) => assert_eq!(kind(&error), *expected, "{label}"),
        (other, expected) => panic!("{label}: got {other:?}, expected {expected:?}"),
    }
}

#[track_caller]
fn table(rows: &[(&str, &str, Expect)]) {
    for (label, body, expect) in rows {
        check(label, post(body), expect);
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn utf16(text: &str, little: bool) -> Vec<u8> {
    text.encode_utf16()
        .flat_map(|unit| {
            if little {
                unit.to_le_bytes()
            } else {
                unit.to_be_bytes()
            }
        })
        .collect()
}

const CALL: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"query-docs","arguments":{}}}"#;

#[test]
fn calls_batches_and_other_messages() {
    table(&[
        ("single call", CALL, Expect::Names(&["query-docs"])),
        (
            "batch of several, in order, repeats kept",
            r#"[
                {"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"b"}},
                {"jsonrpc":"2.0","id":2,"method":"tools/list"},
                {"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"a","arguments":{"x":[1,{"y":null}]}}},
                {"jsonrpc":"2.0","method":"notifications/initialized"},
                {"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"b"}}
            ]"#,
            Expect::Names(&["b", "a", "b"]),
        ),
        (
            "notification without id",
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"n"}}"#,
            Expect::Names(&["n"]),
        ),
        (
            "members in any order",
            r#"{"params":{"arguments":{"name":"not-me"},"name":"late"},"id":"x","method":"tools/call","jsonrpc":"2.0"}"#,
            Expect::Names(&["late"]),
        ),
        (
            "tools/list",
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            Expect::None,
        ),
        (
            "initialize",
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}"#,
            Expect::None,
        ),
        (
            "a response",
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#,
            Expect::None,
        ),
        (
            "a name in another method's params is not a call",
            r#"{"method":"prompts/get","params":{"name":"{{mint:github}}"}}"#,
            Expect::None,
        ),
        (
            "a method that is not a string",
            r#"{"method":["tools/call"],"params":{"name":"x"}}"#,
            Expect::None,
        ),
        ("method null", r#"{"method":null}"#, Expect::None),
        (
            "a call nested in arguments is only data",
            r#"{"method":"tools/call","params":{"name":"outer","arguments":{"method":"tools/call","params":{"name":"inner"}}}}"#,
            Expect::Names(&["outer"]),
        ),
        (
            "a non-MCP JSON body with a method member",
            r#"{"method":"card","amount":100,"params":[1,2]}"#,
            Expect::None,
        ),
    ]);
}

#[test]
fn jsonrpc_and_id_are_not_looked_at() {
    table(&[
        (
            "missing jsonrpc",
            r#"{"id":1,"method":"tools/call","params":{"name":"a"}}"#,
            Expect::Names(&["a"]),
        ),
        (
            "wrong jsonrpc",
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"a"}}"#,
            Expect::Names(&["a"]),
        ),
        (
            "jsonrpc of the wrong type",
            r#"{"jsonrpc":2,"id":{},"method":"tools/call","params":{"name":"a"}}"#,
            Expect::Names(&["a"]),
        ),
    ]);
}

#[test]
fn batch_elements_that_are_not_messages() {
    table(&[
        ("empty batch", "[]", Expect::None),
        ("scalars", r#"[1, "tools/call", null, true]"#, Expect::None),
        (
            "nested batch is not a batch",
            r#"[[{"method":"tools/call","params":{"name":"a"}}]]"#,
            Expect::None,
        ),
        (
            "a call among non-objects",
            r#"[1, [], {"method":"tools/call","params":{"name":"a"}}, "x"]"#,
            Expect::Names(&["a"]),
        ),
        (
            "an invalid call in a batch fails the whole body",
            r#"[{"method":"tools/call","params":{"name":"a"}}, {"method":"tools/call","params":{}}]"#,
            Expect::Err("invalid_tool_call"),
        ),
        ("a plain array of numbers", "[[1,2],[3,4]]", Expect::None),
    ]);
}

#[test]
fn several_json_texts_are_each_examined() {
    table(&[
        (
            "json lines, the second a call",
            "{\"method\":\"tools/list\",\"id\":1}\n{\"method\":\"tools/call\",\"params\":{\"name\":\"a\"}}\n",
            Expect::Names(&["a"]),
        ),
        (
            "concatenated without whitespace",
            r#"{"a":1}[{"method":"tools/call","params":{"name":"b"}}]"#,
            Expect::Names(&["b"]),
        ),
        (
            "json lines without calls",
            "{\"index\":{}}\n{\"x\":1}\n",
            Expect::None,
        ),
        ("trailing scalars", "{} 1 \"x\" null", Expect::None),
        ("trailing garbage", r#"{"a":1} x"#, Expect::Err("malformed")),
        ("numbers run together", "{} 01", Expect::Err("malformed")),
        (
            "literals run together",
            "[] truenull",
            Expect::Err("malformed"),
        ),
    ]);
}

#[test]
fn duplicate_member_names_are_refused_anywhere() {
    table(&[
        (
            "top level method",
            r#"{"method":"tools/list","method":"tools/call","params":{"name":"a"}}"#,
            Expect::Err("duplicate_key"),
        ),
        (
            "top level, other member",
            r#"{"id":1,"id":2,"method":"tools/list"}"#,
            Expect::Err("duplicate_key"),
        ),
        (
            "params.name",
            r#"{"method":"tools/call","params":{"name":"allowed","name":"denied"}}"#,
            Expect::Err("duplicate_key"),
        ),
        (
            "params",
            r#"{"method":"tools/call","params":{"name":"a"},"params":{"name":"b"}}"#,
            Expect::Err("duplicate_key"),
        ),
        (
            "nested in arguments",
            r#"{"method":"tools/call","params":{"name":"a","arguments":{"q":{"k":1,"k":2}}}}"#,
            Expect::Err("duplicate_key"),
        ),
        (
            "the same name through an escape",
            r#"{"method":"tools/call","params":{"name":"a","n\u0061me":"b"}}"#,
            Expect::Err("duplicate_key"),
        ),
        (
            "in a body that is not MCP",
            r#"[{"a":1,"a":1}]"#,
            Expect::Err("duplicate_key"),
        ),
        (
            "distinct names are fine",
            r#"{"a":1,"A":2,"b":{"a":3}}"#,
            Expect::None,
        ),
    ]);
}

#[test]
fn escaped_spellings_are_decoded() {
    table(&[
        (
            "escaped slash in the method",
            r#"{"method":"tools\/call","params":{"name":"a"}}"#,
            Expect::Names(&["a"]),
        ),
        (
            "unicode escape in the method",
            r#"{"method":"\u0074ools/call","params":{"name":"a"}}"#,
            Expect::Names(&["a"]),
        ),
        (
            "every character escaped",
            r#"{"method":"\u0074\u006f\u006f\u006c\u0073\u002f\u0063\u0061\u006c\u006c","params":{"name":"a"}}"#,
            Expect::Names(&["a"]),
        ),
        (
            "escaped member names",
            r#"{"met\u0068od":"tools/call","p\u0061rams":{"n\u0061me":"a"}}"#,
            Expect::Names(&["a"]),
        ),
        (
            "escaped tool name",
            r#"{"method":"tools/call","params":{"name":"query\u002ddocs"}}"#,
            Expect::Names(&["query-docs"]),
        ),
        (
            "escaped quote and backslash in the name",
            r#"{"method":"tools/call","params":{"name":"a\"b\\c"}}"#,
            Expect::Names(&["a\"b\\c"]),
        ),
    ]);
}

#[test]
fn member_names_are_read_as_lenient_decoders_read_them() {
    table(&[
        (
            "uppercase method",
            r#"{"Method":"tools/call","params":{"name":"a"}}"#,
            Expect::Names(&["a"]),
        ),
        (
            "uppercase params and name",
            r#"{"METHOD":"tools/call","PARAMS":{"NAME":"a"}}"#,
            Expect::Names(&["a"]),
        ),
        (
            "long s in params (Go folds it to s)",
            r#"{"method":"tools/call","paramſ":{"name":"a"}}"#,
            Expect::Names(&["a"]),
        ),
        (
            "NUL-terminated member name",
            r#"{"method\u0000":"tools/call","params":{"name":"a"}}"#,
            Expect::Names(&["a"]),
        ),
        (
            "method value in another case",
            r#"{"method":"Tools/Call","params":{"name":"a"}}"#,
            Expect::Names(&["a"]),
        ),
        (
            "method value cut at NUL",
            r#"{"method":"tools/call\u0000x","params":{"name":"a"}}"#,
            Expect::Names(&["a"]),
        ),
        (
            "two spellings of method",
            r#"{"method":"tools/list","Method":"tools/call","params":{"name":"a"}}"#,
            Expect::Err("ambiguous_member"),
        ),
        (
            "two spellings of params",
            r#"{"method":"tools/call","params":{"name":"a"},"Params":{"name":"b"}}"#,
            Expect::Err("ambiguous_member"),
        ),
        (
            "two spellings of name",
            r#"{"method":"tools/call","params":{"name":"a","Name":"b"}}"#,
            Expect::Err("ambiguous_member"),
        ),
        (
            "two spellings of method, even when neither is a call",
            r#"{"method":"tools/list","METHOD":"ping"}"#,
            Expect::Err("ambiguous_member"),
        ),
        (
            "near misses are other members",
            r#"{"method":"tools/call","params":{"name":"a"},"methods":"x","param":{},"nam":1}"#,
            Expect::Names(&["a"]),
        ),
        (
            "a method spelled like tools/call but longer is not a call",
            r#"{"method":"tools/calls","params":{}}"#,
            Expect::None,
        ),
    ]);
}

#[test]
fn a_call_must_name_a_valid_tool() {
    let long = format!(
        r#"{{"method":"tools/call","params":{{"name":"{}"}}}}"#,
        "a".repeat(129)
    );
    let longest = format!(
        r#"{{"method":"tools/call","params":{{"name":"{}"}}}}"#,
        "a".repeat(128)
    );
    assert_eq!(post(&longest).unwrap().names()[0].as_str().len(), 128);
    let rows: Vec<(&str, &str, CallProblem)> = vec![
        (
            "missing params",
            r#"{"method":"tools/call","id":1}"#,
            CallProblem::MissingParams,
        ),
        (
            "params null",
            r#"{"method":"tools/call","params":null}"#,
            CallProblem::ParamsNotObject,
        ),
        (
            "params array",
            r#"{"method":"tools/call","params":["a"]}"#,
            CallProblem::ParamsNotObject,
        ),
        (
            "missing name",
            r#"{"method":"tools/call","params":{"arguments":{"name":"a"}}}"#,
            CallProblem::MissingName,
        ),
        (
            "name a number",
            r#"{"method":"tools/call","params":{"name":1}}"#,
            CallProblem::NameNotString,
        ),
        (
            "name an object",
            r#"{"method":"tools/call","params":{"name":{"x":"a"}}}"#,
            CallProblem::NameNotString,
        ),
        (
            "empty name",
            r#"{"method":"tools/call","params":{"name":""}}"#,
            CallProblem::InvalidName,
        ),
        (
            "space in name",
            r#"{"method":"tools/call","params":{"name":"a b"}}"#,
            CallProblem::InvalidName,
        ),
        (
            "non-ASCII name",
            r#"{"method":"tools/call","params":{"name":"caf\u00e9"}}"#,
            CallProblem::InvalidName,
        ),
        (
            "control character in name",
            r#"{"method":"tools/call","params":{"name":"a\nb"}}"#,
            CallProblem::InvalidName,
        ),
        ("129 characters", &long, CallProblem::InvalidName),
    ];
    for (label, body, problem) in rows {
        match post(body) {
            Err(McpCallError::InvalidToolCall { problem: got, .. }) => {
                assert_eq!(got, problem, "{label}");
            }
            other => panic!("{label}: {other:?}"),
        }
    }
}

#[test]
fn placeholders_in_the_name_are_refused_in_any_spelling() {
    for name in [
        "{{mint:github}}",
        "x{{mint:github}}",
        r"\u007b\u007bmint:github}}",
        r"{{mint\u003agithub}}",
        "%7B%7Bmint%3Agithub%7D%7D",
        "%7b%7bmint%3agithub%7d%7d",
        "{%7Bmint:github}}",
        "{{MINT:github}}",
        "{{mint:",
        r"\u007B%7bmInT%3a",
    ] {
        let body = format!(r#"{{"method":"tools/call","params":{{"name":"{name}"}}}}"#);
        match post(&body) {
            Err(McpCallError::InvalidToolCall {
                problem: CallProblem::PlaceholderInName,
                ..
            }) => {}
            other => panic!("{name}: {other:?}"),
        }
    }
    // Braces alone are a valid name.
    check(
        "braces",
        post(r#"{"method":"tools/call","params":{"name":"{{mint}}"}}"#),
        &Expect::Names(&["{{mint}}"]),
    );
}

#[test]
fn error_offsets_point_at_the_problem() {
    let body = r#"{"method":"tools/call","params":{"name":"a b"}}"#;
    assert_eq!(
        post(body),
        Err(McpCallError::InvalidToolCall {
            offset: body.find("\"a b\"").unwrap(),
            problem: CallProblem::InvalidName,
        })
    );
    let body = r#"[1, {"method":"tools/call"}]"#;
    assert_eq!(
        post(body),
        Err(McpCallError::InvalidToolCall {
            offset: 4,
            problem: CallProblem::MissingParams,
        })
    );
    let body = r#"{"a":1,"a":2}"#;
    assert_eq!(post(body), Err(McpCallError::DuplicateKey { offset: 7 }));
    let body = r#"{"method":1,"METHOD":2}"#;
    assert_eq!(
        post(body),
        Err(McpCallError::AmbiguousMember {
            member: Member::Method,
            offset: 12,
        })
    );
    let body = r#"{"a":NaN}"#;
    assert_eq!(
        post(body),
        Err(McpCallError::Malformed {
            offset: 5,
            reason: SyntaxReason::UnexpectedByte,
        })
    );
    let body = b"{\"a\":\"\xff\"}";
    assert_eq!(
        post(body),
        Err(McpCallError::Malformed {
            offset: 6,
            reason: SyntaxReason::InvalidUtf8,
        })
    );
}

#[test]
fn malformed_json_like_bodies_are_refused() {
    for (label, body, reason) in [
        (
            "NaN",
            r#"{"id":NaN,"method":"tools/call"}"#,
            SyntaxReason::UnexpectedByte,
        ),
        (
            "Infinity",
            r#"{"x":-Infinity}"#,
            SyntaxReason::InvalidNumber,
        ),
        (
            "trailing comma in object",
            r#"{"a":1,}"#,
            SyntaxReason::UnexpectedByte,
        ),
        (
            "trailing comma in array",
            "[1,]",
            SyntaxReason::UnexpectedByte,
        ),
        ("comment inside", "{/* x */}", SyntaxReason::UnexpectedByte),
        (
            "single quotes",
            "{'method':'tools/call'}",
            SyntaxReason::UnexpectedByte,
        ),
        ("unquoted name", "{method:1}", SyntaxReason::UnexpectedByte),
        (
            "unterminated",
            r#"{"method":"tools/call""#,
            SyntaxReason::UnexpectedEnd,
        ),
        (
            "unterminated string",
            r#"{"method"#,
            SyntaxReason::UnexpectedEnd,
        ),
        (
            "lone high surrogate",
            r#"{"a":"\ud800"}"#,
            SyntaxReason::LoneSurrogate,
        ),
        (
            "lone low surrogate",
            r#"{"a":"\udc00x"}"#,
            SyntaxReason::LoneSurrogate,
        ),
        ("bad escape", r#"{"a":"\x41"}"#, SyntaxReason::InvalidEscape),
        (
            "short unicode escape",
            r#"{"a":"\u41"}"#,
            SyntaxReason::InvalidEscape,
        ),
        (
            "raw tab in a string",
            "{\"a\":\"\t\"}",
            SyntaxReason::ControlCharacter,
        ),
        ("leading zero", r#"{"a":01}"#, SyntaxReason::UnexpectedByte),
        ("plus sign", r#"{"a":+1}"#, SyntaxReason::UnexpectedByte),
        ("bare fraction", r#"{"a":1.}"#, SyntaxReason::InvalidNumber),
        ("bare exponent", r#"{"a":1e}"#, SyntaxReason::InvalidNumber),
        (
            "truncated literal",
            r#"{"a":tru}"#,
            SyntaxReason::UnexpectedByte,
        ),
        ("missing colon", r#"{"a" 1}"#, SyntaxReason::UnexpectedByte),
        (
            "mismatched close",
            r#"{"a":[1}"#,
            SyntaxReason::UnexpectedByte,
        ),
        (
            "vertical tab as whitespace",
            "{\u{b}}",
            SyntaxReason::UnexpectedByte,
        ),
        (
            "rtf upload",
            r"{\rtf1\ansi hello}",
            SyntaxReason::UnexpectedByte,
        ),
        (
            "ini file",
            "[section]\nkey=value\n",
            SyntaxReason::UnexpectedByte,
        ),
    ] {
        match post(body) {
            Err(McpCallError::Malformed { reason: got, .. }) => assert_eq!(got, reason, "{label}"),
            other => panic!("{label}: {other:?}"),
        }
    }
}

#[test]
fn valid_json_edge_cases_are_accepted() {
    table(&[
        (
            "every value type",
            r#"{"a":[true,false,null,-0,0.5,1E+10,-1e-7,12345678901234567890123,"\b\f\n\r\t\/\\\"\u00e9\ud83d\ude00"],"b":{}}"#,
            Expect::None,
        ),
        ("huge exponent", r#"{"a":1e999}"#, Expect::None),
        (
            "whitespace everywhere",
            " \t\r\n{ \"a\" : [ 1 , 2 ] } \n",
            Expect::None,
        ),
        (
            "raw DEL and non-ASCII",
            "{\"a\":\"\u{7f}é😀\"}",
            Expect::None,
        ),
        (
            "byte order mark",
            "\u{feff}{\"method\":\"tools/call\",\"params\":{\"name\":\"a\"}}",
            Expect::Names(&["a"]),
        ),
        (
            "two byte order marks",
            "\u{feff}\u{feff}{}",
            Expect::Err("malformed"),
        ),
    ]);
}

#[test]
fn bodies_that_do_not_start_like_json_are_not_calls() {
    let cases: &[&[u8]] = &[
        b"",
        b"hello",
        b"  plain text mentioning {\"method\":\"tools/call\"}",
        b"method=tools/call&name=a",
        b"--boundary\r\nContent-Disposition: form-data\r\n\r\n{\"method\":\"tools/call\"}",
        b"\"a string\"",
        b"42",
        b"null",
        b"\x89PNG\r\n\x1a\n\x00\x00",
        b"\x1f\x8b\x08\x00",
        b"\x00\x00\x00\x18ftypmp42",
        b"\x00asm\x01\x00\x00\x00",
        b"\xff\xd8\xff\xe0",
        b"/* a css file */ body { color: red }",
        b"// a script\nfunction f() {}",
        b"#!/bin/sh\necho hi",
        b"/* unterminated comment {",
        b"\xc3\x28{",
    ];
    for body in cases {
        assert_eq!(
            post(body),
            Ok(ToolCalls::None),
            "{:?}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn lenient_prefixes_before_json_are_refused() {
    let call = r#"{"method":"tools/call","params":{"name":"a"}}"#;
    for prefix in [
        "/* comment */",
        "// comment\n",
        "// comment\r",
        "# comment\n",
        ")]}'\n",
        "\u{a0}",
        "\u{2028}",
        "\u{3000}",
        "\u{b}",
        "\u{c}",
        "\u{85}",
    ] {
        let body = format!("{prefix}{call}");
        match post(&body) {
            Err(McpCallError::Malformed { offset: 0, .. }) => {}
            other => panic!("{prefix:?}: {other:?}"),
        }
    }
}

#[test]
fn utf16_and_utf32_json_is_refused() {
    let call = r#"{"method":"tools/call","params":{"name":"a"}}"#;
    let mut utf32be = Vec::new();
    let mut utf32le = Vec::new();
    for c in call.chars() {
        utf32be.extend_from_slice(&u32::from(c).to_be_bytes());
        utf32le.extend_from_slice(&u32::from(c).to_le_bytes());
    }
    let with_bom = |bom: &[u8], rest: &[u8]| [bom, rest].concat();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("utf-16le", utf16(call, true)),
        ("utf-16be", utf16(call, false)),
        ("utf-16le bom", with_bom(&[0xFF, 0xFE], &utf16(call, true))),
        ("utf-16be bom", with_bom(&[0xFE, 0xFF], &utf16(call, false))),
        ("utf-16le leading space", utf16(&format!("  {call}"), true)),
        (
            "utf-16be leading newline",
            utf16(&format!("\n{call}"), false),
        ),
        ("utf-32be", utf32be.clone()),
        ("utf-32le", utf32le.clone()),
        ("utf-32be bom", with_bom(&[0, 0, 0xFE, 0xFF], &utf32be)),
        ("utf-32le bom", with_bom(&[0xFF, 0xFE, 0, 0], &utf32le)),
        ("utf-16 array", utf16("[1]", true)),
    ];
    for (label, body) in cases {
        assert_eq!(post(&body), Err(McpCallError::NotUtf8), "{label}");
    }
    // UTF-16 text that does not start like JSON is no call.
    assert_eq!(post(utf16("hello {}", true)), Ok(ToolCalls::None));
}

#[test]
fn the_content_type_does_not_matter() {
    for content_type in [
        None,
        Some("application/json"),
        Some("application/json; charset=utf-8"),
        Some("text/plain"),
        Some("text/plain, application/json"),
        Some("application/x-www-form-urlencoded"),
        Some("application/octet-stream"),
        Some("multipart/form-data; boundary=x"),
    ] {
        let map = content_type.map_or_else(HeaderMap::new, |ct| headers(&[("content-type", ct)]));
        check(
            &format!("{content_type:?}"),
            tool_calls(&Method::POST, &map, CALL.as_bytes()),
            &Expect::Names(&["query-docs"]),
        );
    }
    // Two Content-Type headers: still examined.
    let map = headers(&[
        ("content-type", "text/plain"),
        ("content-type", "application/json"),
    ]);
    check(
        "two content types",
        tool_calls(&Method::POST, &map, CALL.as_bytes()),
        &Expect::Names(&["query-docs"]),
    );
}

#[test]
fn every_method_is_examined() {
    for method in [
        Method::GET,
        Method::PUT,
        Method::PATCH,
        Method::DELETE,
        Method::OPTIONS,
    ] {
        check(
            method.as_str(),
            tool_calls(&method, &json_headers(), CALL.as_bytes()),
            &Expect::Names(&["query-docs"]),
        );
    }
    let method = Method::from_bytes(b"MCP").unwrap();
    check(
        "extension method",
        tool_calls(&method, &HeaderMap::new(), CALL.as_bytes()),
        &Expect::Names(&["query-docs"]),
    );
}

#[test]
fn charsets_other_than_utf8_compatible_ones_are_refused() {
    for charset in [
        "utf-8",
        "UTF-8",
        "\"utf-8\"",
        "utf8",
        "us-ascii",
        "ISO-8859-1",
        "iso_8859-15",
        "latin1",
        "windows-1252",
        "cp1251",
        "koi8-r",
    ] {
        let map = headers(&[(
            "content-type",
            &format!("application/json; charset={charset}"),
        )]);
        check(
            charset,
            tool_calls(&Method::POST, &map, CALL.as_bytes()),
            &Expect::Names(&["query-docs"]),
        );
    }
    for content_type in [
        "application/json; charset=utf-7",
        "application/json; charset=utf-16le",
        "application/json; charset=UTF-16",
        "application/json; charset=base64",
        "application/json; charset=cp037",
        "application/json; charset=shift_jis",
        "application/json; charset=iso-2022-jp",
        "application/json; charset=iso-8859-12",
        "application/json; charset=iso-8859-0",
        "application/json; charset=",
        "application/json; CHARSET = \"utf-7\"",
        "text/plain; charset=utf-8; charset=utf-7",
        "text/plain; x=\"; charset=utf-7\"",
    ] {
        let map = headers(&[("content-type", content_type)]);
        assert_eq!(
            tool_calls(&Method::POST, &map, b"+AHs-"),
            Err(McpCallError::UnsupportedCharset),
            "{content_type}"
        );
    }
    // A second Content-Type header is checked too.
    let map = headers(&[
        ("content-type", "application/json"),
        ("content-type", "application/json; charset=utf-7"),
    ]);
    assert_eq!(
        tool_calls(&Method::POST, &map, b"x"),
        Err(McpCallError::UnsupportedCharset)
    );
    // No body, nothing to decode.
    let map = headers(&[("content-type", "application/json; charset=utf-7")]);
    assert_eq!(tool_calls(&Method::GET, &map, b""), Ok(ToolCalls::None));
    // A parameter that only ends in `charset` is not one.
    let map = headers(&[("content-type", "text/plain; mycharsetx=1")]);
    assert_eq!(tool_calls(&Method::POST, &map, b"x"), Ok(ToolCalls::None));
}

#[test]
fn gzip_bodies_are_examined_decoded() {
    let gz = |body: &[u8], coding: &str| {
        let map = headers(&[
            ("content-type", "application/json"),
            ("content-encoding", coding),
        ]);
        tool_calls(&Method::POST, &map, &gzip(body))
    };
    check(
        "gzip call",
        gz(CALL.as_bytes(), "gzip"),
        &Expect::Names(&["query-docs"]),
    );
    check(
        "x-gzip call",
        gz(CALL.as_bytes(), "X-GZIP"),
        &Expect::Names(&["query-docs"]),
    );
    // A list of codings is refused, even with `identity` in it (issue 22).
    for list in ["identity, gzip", "gzip, identity", "identity, identity"] {
        check(
            list,
            gz(CALL.as_bytes(), list),
            &Expect::Err("unsupported_content_encoding"),
        );
    }
    check("gzip text", gz(b"just text", "gzip"), &Expect::None);
    check(
        "gzip malformed json",
        gz(b"{\"a\":", "gzip"),
        &Expect::Err("malformed"),
    );
    // Concatenated members are one body.
    let mut two = gzip(br#"{"method":"tools/list"}"#);
    two.extend(gzip(br#"{"method":"tools/call","params":{"name":"b"}}"#));
    let map = headers(&[("content-encoding", "gzip")]);
    check(
        "two members",
        tool_calls(&Method::POST, &map, &two),
        &Expect::Names(&["b"]),
    );
    // Garbage after a member, a truncated stream, or no gzip at all.
    let mut trailing = gzip(CALL.as_bytes());
    trailing.extend_from_slice(b"junk");
    let truncated = gzip(CALL.as_bytes());
    let truncated = &truncated[..truncated.len() - 4];
    for body in [&trailing[..], truncated, CALL.as_bytes()] {
        assert_eq!(
            tool_calls(&Method::POST, &map, body),
            Err(McpCallError::UndecodableBody)
        );
    }
    // A tools/call over the message limit once decoded.
    let padding = " ".repeat(MAX_MCP_MESSAGE_BYTES);
    let big = format!("{CALL}{padding}");
    assert_eq!(
        gz(big.as_bytes(), "gzip"),
        Err(McpCallError::BodyTooLarge {
            len: big.len(),
            limit: MAX_MCP_MESSAGE_BYTES,
        })
    );
}

#[test]
fn gzip_bombs_stop_at_the_decoded_limit() {
    let map = headers(&[("content-encoding", "gzip")]);
    let mut json = String::from("[");
    json.push_str(&" ".repeat(MAX_DECODED_BODY_BYTES));
    json.push(']');
    assert_eq!(
        tool_calls(&Method::POST, &map, &gzip(json.as_bytes())),
        Err(McpCallError::DecodedBodyTooLarge {
            limit: MAX_DECODED_BODY_BYTES,
        })
    );
    // Whatever the decoded bytes start with: what lies past the limit was never seen (issue
    // 22: 10 MiB + 1 byte of spaces, then a call).
    let text = vec![b'a'; MAX_DECODED_BODY_BYTES + 10];
    let mut hidden = vec![b' '; MAX_DECODED_BODY_BYTES + 1];
    hidden.extend_from_slice(CALL.as_bytes());
    for body in [text, hidden] {
        assert_eq!(
            tool_calls(&Method::POST, &map, &gzip(&body)),
            Err(McpCallError::DecodedBodyTooLarge {
                limit: MAX_DECODED_BODY_BYTES,
            })
        );
    }
    // Exactly at the limit is examined whole.
    let mut at_limit = vec![b' '; MAX_DECODED_BODY_BYTES - CALL.len()];
    at_limit.extend_from_slice(CALL.as_bytes());
    assert_eq!(
        tool_calls(&Method::POST, &map, &gzip(&at_limit)),
        Err(McpCallError::BodyTooLarge {
            len: MAX_DECODED_BODY_BYTES,
            limit: MAX_MCP_MESSAGE_BYTES,
        })
    );
}

#[test]
fn other_content_codings_are_refused() {
    for coding in [
        "br",
        "deflate",
        "zstd",
        "compress",
        "gzip, gzip",
        "gzip, br",
        "x-unknown",
    ] {
        let map = headers(&[("content-encoding", coding)]);
        assert_eq!(
            tool_calls(&Method::POST, &map, b"\x1b\x00"),
            Err(McpCallError::UnsupportedContentEncoding),
            "{coding}"
        );
    }
    // Two headers are one list.
    let map = headers(&[("content-encoding", "gzip"), ("content-encoding", "gzip")]);
    assert_eq!(
        tool_calls(&Method::POST, &map, b"x"),
        Err(McpCallError::UnsupportedContentEncoding)
    );
    for coding in [
        "identity",
        "IDENTITY",
        "",
        " , identity",
        "gzip",
        "identity, gzip",
    ] {
        if coding.contains("gzip") {
            // Two codings in one header, and the same in two headers, are a list.
            let map = headers(&[
                ("content-encoding", "identity"),
                ("content-encoding", coding),
            ]);
            assert_eq!(
                tool_calls(&Method::POST, &map, b"x"),
                Err(McpCallError::UnsupportedContentEncoding),
                "{coding}"
            );
            continue;
        }
        let map = headers(&[("content-encoding", coding)]);
        check(
            coding,
            tool_calls(&Method::POST, &map, CALL.as_bytes()),
            &Expect::Names(&["query-docs"]),
        );
    }
    // No body, nothing to decode.
    let map = headers(&[("content-encoding", "br")]);
    assert_eq!(tool_calls(&Method::POST, &map, b""), Ok(ToolCalls::None));
}

#[test]
fn large_bodies() {
    // A call just at the limit passes; one byte more is refused.
    let at_limit = format!("{CALL}{}", " ".repeat(MAX_MCP_MESSAGE_BYTES - CALL.len()));
    assert_eq!(at_limit.len(), MAX_MCP_MESSAGE_BYTES);
    check(
        "at the limit",
        post(&at_limit),
        &Expect::Names(&["query-docs"]),
    );
    let over = format!("{at_limit} ");
    assert_eq!(
        post(&over),
        Err(McpCallError::BodyTooLarge {
            len: MAX_MCP_MESSAGE_BYTES + 1,
            limit: MAX_MCP_MESSAGE_BYTES,
        })
    );
    // The padding can sit inside the call, too.
    let inside = format!(
        r#"{{"method":"tools/call","params":{{"name":"a","arguments":{{"blob":"{}"}}}}}}"#,
        "x".repeat(2 * MAX_MCP_MESSAGE_BYTES)
    );
    assert_eq!(kind(&post(&inside).unwrap_err()), "body_too_large");
    // Large JSON that holds no call keeps working, tools/list included.
    let upload = serde_json::to_string(&json!({
        "files": vec!["0123456789abcdef"; 400_000],
        "method": "card",
    }))
    .unwrap();
    assert!(upload.len() > 5 * MAX_MCP_MESSAGE_BYTES);
    assert_eq!(post(&upload), Ok(ToolCalls::None));
    let list = format!(
        r#"{{"method":"tools/list","params":{{"cursor":"{}"}}}}"#,
        "c".repeat(2 * MAX_MCP_MESSAGE_BYTES)
    );
    assert_eq!(post(&list), Ok(ToolCalls::None));
    // Errors other than size are reported first.
    let broken = format!("{over}x");
    assert_eq!(kind(&post(&broken).unwrap_err()), "malformed");
}

#[test]
fn nesting_depth_is_bounded() {
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    assert_eq!(post(deep(MAX_JSON_DEPTH)), Ok(ToolCalls::None));
    assert_eq!(
        post(deep(MAX_JSON_DEPTH + 1)),
        Err(McpCallError::TooDeep {
            offset: MAX_JSON_DEPTH,
            limit: MAX_JSON_DEPTH,
        })
    );
    // Far deeper input fails the same way, without recursion.
    assert_eq!(kind(&post(deep(1_000_000)).unwrap_err()), "too_deep");
    // The depth counts inside a call as well.
    let deep_args = format!(
        r#"{{"method":"tools/call","params":{{"name":"a","arguments":{}}}}}"#,
        deep(MAX_JSON_DEPTH - 2)
    );
    assert_eq!(post(&deep_args).unwrap().names().len(), 1);
    let too_deep_args = format!(
        r#"{{"method":"tools/call","params":{{"name":"a","arguments":{}}}}}"#,
        deep(MAX_JSON_DEPTH - 1)
    );
    assert_eq!(kind(&post(&too_deep_args).unwrap_err()), "too_deep");
}

#[test]
fn codes_are_stable() {
    let cases = [
        (
            McpCallError::Malformed {
                offset: 0,
                reason: SyntaxReason::UnexpectedEnd,
            },
            "invalid_request",
        ),
        (
            McpCallError::TooDeep {
                offset: 0,
                limit: 1,
            },
            "invalid_request",
        ),
        (McpCallError::DuplicateKey { offset: 0 }, "invalid_request"),
        (
            McpCallError::AmbiguousMember {
                member: Member::Name,
                offset: 0,
            },
            "invalid_request",
        ),
        (
            McpCallError::InvalidToolCall {
                offset: 0,
                problem: CallProblem::InvalidName,
            },
            "invalid_request",
        ),
        (McpCallError::NotUtf8, "invalid_request"),
        (McpCallError::UnsupportedCharset, "invalid_request"),
        (
            McpCallError::UnsupportedContentEncoding,
            "unsupported_content_encoding",
        ),
        (McpCallError::UndecodableBody, "invalid_request"),
        (
            McpCallError::BodyTooLarge { len: 2, limit: 1 },
            "body_too_large",
        ),
        (
            McpCallError::DecodedBodyTooLarge { limit: 1 },
            "body_too_large",
        ),
    ];
    for (error, code) in cases {
        assert_eq!(error.code(), code, "{error}");
        let message = error.to_string();
        assert!(!message.is_empty() && !message.ends_with('.') && !message.contains('\n'));
    }
}

#[test]
fn errors_never_echo_the_body() {
    let secret = "sk-live-SECRET123";
    let bodies = [
        format!(r#"{{"method":"tools/call","params":{{"name":"{secret} x"}}}}"#),
        format!(r#"{{"method":"tools/call","params":{{"name":"{{{{mint:{secret}}}}}"}}}}"#),
        format!(r#"{{"{secret}":1,"{secret}":2}}"#),
        format!(r#"{{"a":"{secret}\q"}}"#),
        format!(r#"{{"method":"{secret}","Method":"x"}}"#),
        format!(r#"{{"a":{secret}}}"#),
    ];
    for body in bodies {
        let error = post(&body).unwrap_err();
        for text in [error.to_string(), format!("{error:?}")] {
            assert!(!text.contains("SECRET"), "{text}");
        }
    }
    let map = headers(&[("content-type", "text/plain; charset=SECRET")]);
    let error = tool_calls(&Method::POST, &map, b"x").unwrap_err();
    assert!(!format!("{error} {error:?}").contains("SECRET"));
}

#[test]
fn tool_calls_accessors() {
    assert!(!ToolCalls::None.is_tool_call());
    assert!(ToolCalls::None.names().is_empty());
    assert_eq!(ToolCalls::default(), ToolCalls::None);
    let calls = post(CALL).unwrap();
    assert!(calls.is_tool_call());
    assert_eq!(calls.names(), &[ToolName::new("query-docs").unwrap()]);
}

#[test]
fn charset_names() {
    for name in [
        "utf-8",
        "UTF8",
        "iso8859-1",
        "ISO_8859-16",
        "windows-1250",
        "cp1258",
        "KOI8-U",
    ] {
        assert!(is_allowed_charset(name.as_bytes()), "{name}");
    }
    for name in [
        "utf-16",
        "utf-7",
        "iso-8859-12",
        "iso-8859-17",
        "iso-8859-01",
        "windows-1259",
        "cp932",
        "gbk",
        "big5",
        "euc-jp",
        "",
        "utf-8x",
    ] {
        assert!(!is_allowed_charset(name.as_bytes()), "{name}");
    }
}

#[test]
fn reading_member_names() {
    assert!(reads_as("method", "method"));
    assert!(reads_as("MeThOd", "method"));
    assert!(reads_as("paramſ", "params"));
    assert!(reads_as("\u{212a}ind", "kind"));
    assert!(reads_as("Kind", "kind"));
    assert!(reads_as("ıd", "id"));
    assert!(reads_as("İD", "id"));
    assert!(reads_as("name\0junk", "name"));
    assert!(!reads_as("", "name"));
    assert!(!reads_as("nam", "name"));
    assert!(!reads_as("names", "name"));
    assert!(!reads_as(" name", "name"));
    assert!(!reads_as("ñame", "name"));
}

// === Generated messages ===

/// A JSON value with unique member names (serde_json's map), of bounded depth.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        Just(json!(0.5)),
        Just(json!(-1.25e-10)),
        "(?s).{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("(?s).{0,6}", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// A JSON-RPC message as serde_json sees it.
fn message() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            4 => Just("tools/call"),
            1 => Just("tools/list"),
            1 => Just("initialize"),
            1 => Just("notifications/initialized"),
            1 => Just("prompts/get"),
        ],
        "[!-z|}~]{1,40}",
        prop::option::of(json_value()),
        prop::option::of(prop_oneof![
            any::<i64>().prop_map(Value::from),
            "[a-z0-9]{1,8}".prop_map(Value::from)
        ]),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(method, name, arguments, id, jsonrpc, has_params)| {
            let mut object = serde_json::Map::new();
            if jsonrpc {
                object.insert("jsonrpc".into(), json!("2.0"));
            }
            if let Some(id) = id {
                object.insert("id".into(), id);
            }
            object.insert("method".into(), json!(method));
            if method == "tools/call" || has_params {
                let mut params = serde_json::Map::new();
                params.insert("name".into(), json!(name));
                if let Some(arguments) = arguments {
                    params.insert("arguments".into(), arguments);
                }
                object.insert("params".into(), Value::Object(params));
            }
            Value::Object(object)
        })
}

/// A body: one message, or a batch of messages and other values.
fn body() -> impl Strategy<Value = Value> {
    prop_oneof![
        message(),
        prop::collection::vec(prop_oneof![4 => message(), 1 => json_value()], 0..6)
            .prop_map(Value::Array),
    ]
}

/// The tool names serde_json's reading gives: `params.name` of every top-level or batch-element
/// object whose `method` is exactly `tools/call`.
fn expected_names(body: &Value) -> Vec<String> {
    let elements = match body {
        Value::Array(elements) => elements.iter().collect(),
        other => vec![other],
    };
    elements
        .into_iter()
        .filter(|element| element.get("method").and_then(Value::as_str) == Some("tools/call"))
        .map(|element| element["params"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Writes JSON with escapes, whitespace and member order chosen by `choices`.
struct Writer<'c> {
    out: String,
    choices: &'c [u8],
    next: usize,
}

impl Writer<'_> {
    fn choice(&mut self) -> u8 {
        let choice = self.choices[self.next % self.choices.len()];
        self.next += 1;
        choice
    }

    fn space(&mut self) {
        let spaces = ["", "", " ", "\n", "\t", "\r\n  "];
        let index = usize::from(self.choice()) % spaces.len();
        self.out.push_str(spaces[index]);
    }

    fn string(&mut self, text: &str) {
        self.out.push('"');
        for c in text.chars() {
            let choice = self.choice();
            match c {
                '"' => self.out.push_str(if choice.is_multiple_of(2) {
                    "\\\""
                } else {
                    "\\u0022"
                }),
                '\\' => self.out.push_str(if choice.is_multiple_of(2) {
                    "\\\\"
                } else {
                    "\\u005C"
                }),
                '/' if choice.is_multiple_of(3) => self.out.push_str("\\/"),
                '\n' if choice.is_multiple_of(2) => self.out.push_str("\\n"),
                c if u32::from(c) < 0x20 || choice.is_multiple_of(4) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        if choice.is_multiple_of(8) {
                            self.out.push_str(&format!("\\u{unit:04X}"));
                        } else {
                            self.out.push_str(&format!("\\u{unit:04x}"));
                        }
                    }
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }

    fn value(&mut self, value: &Value) {
        self.space();
        match value {
            Value::Array(elements) => {
                self.out.push('[');
                for (i, element) in elements.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.value(element);
                }
                self.space();
                self.out.push(']');
            }
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                if !entries.is_empty() {
                    let turn = usize::from(self.choice()) % entries.len();
                    entries.rotate_left(turn);
                }
                self.out.push('{');
                for (i, (name, member)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.space();
                    self.string(name);
                    self.space();
                    self.out.push(':');
                    self.value(member);
                }
                self.space();
                self.out.push('}');
            }
            Value::String(text) => self.string(text),
            other => self.out.push_str(&other.to_string()),
        }
        self.space();
    }
}

fn write(value: &Value, choices: &[u8]) -> String {
    let mut writer = Writer {
        out: String::new(),
        choices,
        next: 0,
    };
    writer.value(value);
    writer.out
}

proptest! {
    /// For generated JSON-RPC bodies without duplicate members, in any spelling, the names are
    /// exactly the ones serde_json's reading gives.
    #[test]
    fn names_agree_with_serde_json(
        body in body(),
        choices in prop::collection::vec(any::<u8>(), 1..64),
    ) {
        let text = write(&body, &choices);
        prop_assert_eq!(&serde_json::from_str::<Value>(&text).unwrap(), &body, "{}", text);
        let expected = expected_names(&body);
        let got: Vec<String> = post(&text)
            .unwrap()
            .names()
            .iter()
            .map(|name| name.as_str().to_owned())
            .collect();
        prop_assert_eq!(got, expected, "{}", text);
    }

    /// Whatever serde_json writes is accepted, and holds no call unless it is a message.
    #[test]
    fn serde_json_documents_are_accepted(value in json_value(), pretty in any::<bool>()) {
        let text = if pretty {
            serde_json::to_string_pretty(&value).unwrap()
        } else {
            serde_json::to_string(&value).unwrap()
        };
        let result = post(&text);
        prop_assert!(result.is_ok(), "{} {:?}", text, result);
    }

    /// What this parser accepts, serde_json accepts too (as a stream of values).
    #[test]
    fn accepted_bodies_are_json(
        parts in prop::collection::vec(prop_oneof![
            Just("{"), Just("}"), Just("["), Just("]"), Just(","), Just(":"), Just(" "),
            Just("\"method\""), Just("\"tools/call\""), Just("\"params\""), Just("\"name\""),
            Just("\"a\""), Just("\"\\u0061\""), Just("\"\\ud800\""), Just("1"), Just("-0.5e3"),
            Just("true"), Just("null"), Just("0"),
        ], 1..24),
    ) {
        let text = format!("{{{}", parts.concat());
        if post(&text).is_ok() {
            let stream = serde_json::Deserializer::from_str(&text).into_iter::<Value>();
            for value in stream {
                prop_assert!(value.is_ok(), "{}", text);
            }
        }
    }

    /// Whatever the bytes and headers, the result is a value, never a panic.
    #[test]
    fn arbitrary_input_never_panics(
        body in prop::collection::vec(prop_oneof![
            Just(b'{'), Just(b'['), Just(b'"'), Just(b'\\'), Just(b'u'), Just(b'/'), Just(b'*'),
            Just(0u8), Just(0xFEu8), Just(0xFFu8), any::<u8>(),
        ], 0..200),
        gzipped in any::<bool>(),
    ) {
        let map = if gzipped { headers(&[("content-encoding", "gzip")]) } else { HeaderMap::new() };
        let body = if gzipped { gzip(&body) } else { body };
        let _ = tool_calls(&Method::POST, &map, &body);
    }
}

/// Issue 22: duplicate member names are found in objects of any size, with escapes compared
/// unescaped, at the second occurrence that comes first, while the names are never copied: a
/// large object's names are checked when it closes.
#[test]
fn duplicates_are_found_in_large_objects_without_copying_names() {
    let members = |n: usize| -> Vec<String> { (0..n).map(|i| format!("\"k{i}\":0")).collect() };
    for n in [2, 15, 16, 17, 40, 5000] {
        let mut list = members(n);
        let fine = format!("{{{}}}", list.join(","));
        assert_eq!(post(&fine), Ok(ToolCalls::None), "{n} distinct");
        // The last name repeats the first, spelled with an escape.
        list.push("\"\\u006b0\":1".to_owned());
        let body = format!("{{{}}}", list.join(","));
        let offset = body.rfind("\"\\u006b0\"").unwrap();
        assert_eq!(
            post(&body),
            Err(McpCallError::DuplicateKey { offset }),
            "{n} members and a repeat"
        );
    }
    // Two repeats: the one that comes first in the body is reported, as for a small object.
    let mut list = members(30);
    list.push("\"k20\":1".to_owned());
    list.push("\"k3\":1".to_owned());
    let body = format!("{{{}}}", list.join(","));
    let first_repeat = body.rfind("\"k20\"").unwrap();
    assert_eq!(
        post(&body),
        Err(McpCallError::DuplicateKey {
            offset: first_repeat
        })
    );
    // A message with many members still names its call, and one of its names repeated is
    // refused whatever member it is.
    let mut list = members(100);
    list.push(r#""method":"tools/call","params":{"name":"query-docs"}"#.to_owned());
    let body = format!("{{{}}}", list.join(","));
    check(
        "large message",
        post(&body),
        &Expect::Names(&["query-docs"]),
    );
    list.push("\"k99\":1".to_owned());
    let body = format!("{{{}}}", list.join(","));
    check(
        "large message repeat",
        post(&body),
        &Expect::Err("duplicate_key"),
    );
    // Names that differ only after an escape, or by a surrogate pair, are different.
    let mut list = members(20);
    list.push(r#""\ud83d\ude00":1"#.to_owned());
    list.push(r#""😀x":1"#.to_owned());
    list.push(r#""\"":1"#.to_owned());
    list.push(r#""\\":1"#.to_owned());
    let body = format!("{{{}}}", list.join(","));
    assert_eq!(post(&body), Ok(ToolCalls::None));
    list.push(r#""\ud83d\ude00x":1"#.to_owned());
    let body = format!("{{{}}}", list.join(","));
    check(
        "surrogate repeat",
        post(&body),
        &Expect::Err("duplicate_key"),
    );
}

/// Issue 22: the lazy unescaping that compares names agrees with the decoding the parser uses.
#[test]
fn name_chars_unescape_as_decode_does() {
    for raw in [
        r#""plain""#,
        r#""a\"b\\c\/d\b\f\n\r\t""#,
        r#""\u0041\u00e9\u4e2d""#,
        r#""\ud834\udd1e tail""#,
        r#""mixed é 中 😀""#,
        r#""""#,
    ] {
        let parser = Parser::new(raw.as_bytes()).unwrap();
        let mut tokenizer = Parser::new(raw.as_bytes()).unwrap();
        let token = tokenizer.string().unwrap();
        let decoded = tokenizer.decode(token).unwrap();
        let lazy: String = parser.name_chars(0).collect();
        assert_eq!(lazy, decoded, "{raw}");
        let expected: String = serde_json::from_str(raw).unwrap();
        assert_eq!(lazy, expected, "{raw}");
    }
}
