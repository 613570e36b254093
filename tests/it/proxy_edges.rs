//! The smaller gaps an outside attack on the merged binary found after issue 22's nine findings
//! were fixed, end to end: the real `mint serve`, a real HTTPS echo upstream (or a scripted
//! plain-HTTP one), and curl or a raw TCP client (raw HTTP/2 frames where curl will not send what
//! the attack needs) as the agent.
//!
//! - Header names with `_` for `-` are the same header to PHP and CGI gateways: `Mcp_Name` must
//!   name the tool, underscore spellings of the framing and coding headers are refused, and those
//!   of `Mint-*`, `Proxy-*` and hop-by-hop headers are stripped like the hyphen forms, both ways.
//! - `;` separates parameters too (old Rack, PHP's `arg_separator.input`, old Python and Go):
//!   `a=1;_method=DELETE` cannot pass a deny rule on `DELETE`.
//! - HTTP/2 requests that the HTTP/2 library resets (a `content-length` that disagrees with the
//!   DATA sent, one that is not a number, `transfer-encoding`, `connection`) get one decision and
//!   one outcome record that say what the agent got: a stream reset, no HTTP status.
//! - The interim `100 Continue` carries the request's `Mint-Request-Id`.
//! - A multi-member gzip answer is decoded whole, as multi-member request bodies are; a gzip
//!   answer without a body loses its `Content-Encoding`.
//!
//! Every test plants a canary secret and checks it is absent from everything the agent
//! received, from the audit log and from Mint's stderr; refused requests reach no upstream.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use mint_tests::broker::{
    Broker, CurlResponse, ScriptedUpstream, curl, gzip, parse_raw_answer, request_header,
};
use mint_tests::lab::{self, LabConfig};
use serde_json::Value;

/// The secret of alias `echo` (header site), bound to `127.0.0.1`.
const CANARY: &str = "canary-edge22-Kv4p/Wm7+Qs2=Hx9";

mint_tests::lab_newtype!(
    /// The shared lab in front of an echo upstream, with a policy that allows `GET`, `POST` and
    /// `DELETE` to `/echo` and MCP calls to `/echo/mcp` (any tool but `drop*`), and denies
    /// `DELETE`; with this file's curl (the canary's placeholder on every request) and refusal
    /// check.
    Lab
);

impl Lab {
    #[track_caller]
    fn start() -> Lab {
        let config = LabConfig {
            secrets: &[("echo", CANARY)],
            ..LabConfig::default()
        };
        Lab(lab::Lab::start(config, |port| {
            format!(
                "  - id: echo\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET, POST, DELETE]\n      path: [/echo, /echo/mcp]\n  - id: mcp-tools\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [POST]\n      path: [/echo/mcp]\n      tool: [\"*\"]\n  - id: no-drop\n    effect: deny\n    match:\n      tool: [\"drop*\"]\n  - id: no-deletes\n    effect: deny\n    match:\n      method: [DELETE]\n"
            )
        }))
    }

    fn path(&self, path_and_query: &str) -> String {
        format!(
            "/v1/proxy/https/127.0.0.1:{}{path_and_query}",
            self.peer.server.port()
        )
    }

    fn url(&self, path_and_query: &str) -> String {
        format!("{}{}", self.broker.base, self.path(path_and_query))
    }

    /// curl with the capability and the canary's placeholder, plus `args` (the URL among them).
    #[track_caller]
    fn curl(&self, args: &[&str]) -> CurlResponse {
        let cap = format!("Mint-Capability: {}", self.cap);
        let mut all = vec![
            "-g",
            "-H",
            cap.as_str(),
            "-H",
            "Authorization: Bearer {{mint:echo}}",
        ];
        all.extend_from_slice(args);
        curl(&all)
    }

    /// Refused with `status`, Mint's `code` (or a JSON-RPC error carrying it) and audit
    /// `reason`, audited as a `deny` whose outcome has that status, nothing forwarded since
    /// `before`, nothing leaked.
    #[track_caller]
    fn assert_refused(&self, what: &str, response: &CurlResponse, expected: (u16, &str, &str)) {
        let (status, code, reason) = expected;
        let json: Value = serde_json::from_str(&response.body).unwrap_or_default();
        let error = &json["error"];
        let found = error["code"]
            .as_str()
            .or_else(|| error["data"]["code"].as_str());
        assert_eq!(
            (response.status, found),
            (status, Some(code)),
            "{what}: {}",
            response.body
        );
        let id = response.header("mint-request-id").unwrap();
        let decision = self.broker.decision_of(id);
        assert_eq!(decision["decision"], "deny", "{what}: {decision}");
        assert_eq!(decision["reason"], reason, "{what}: {decision}");
        let outcome = self.broker.outcome_of(id);
        assert_eq!(outcome["status"], status, "{what}: {outcome}");
        self.assert_clean(response.everything());
    }
}

fn call(tool: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
    )
}

// ---------------------------------------------------------------------------------------------
// 1. Header names with `_` for `-`
// ---------------------------------------------------------------------------------------------

/// PHP's and CGI's server variables read `-` and `_` in header names alike (PHP's built-in
/// server keeps underscore headers). Was: all of these forwarded as they came. Now `Mcp_Name` is
/// checked as `Mcp-Name`; `Content_Length`, `Transfer_Encoding`, `Content_Encoding` and
/// `Content_Type` are refused (400, `ambiguous_framing`: Mint frames, decodes and parses the body
/// by the hyphen forms); and `Mint_*`, `Proxy_*`, `Keep_Alive` and what `Connection` names in
/// either spelling are stripped, from requests and from answers.
#[test]
fn issue_22_underscore_header_spellings_are_read_as_their_hyphen_forms() {
    let lab = Lab::start();
    let json = "Content-Type: application/json";

    // `Mcp_Name` must name the tool the body calls, as `Mcp-Name` must.
    for header in [
        "Mcp_Name: drop_table",
        "MCP_NAME: drop_table",
        "mcp_name: other",
    ] {
        let before = lab.forwarded();
        let body = call("search");
        let response = lab.curl(&[
            "-H",
            json,
            "-H",
            header,
            "--data-binary",
            &body,
            &lab.url("/echo/mcp"),
        ]);
        lab.assert_refused(
            header,
            &response,
            (400, "invalid_request", "invalid_mcp_message"),
        );
        assert_eq!(lab.forwarded(), before, "{header}: forwarded");
    }
    let body = call("search");
    let response = lab.curl(&[
        "-H",
        json,
        "-H",
        "Mcp_Name: search",
        "--data-binary",
        &body,
        &lab.url("/echo/mcp"),
    ]);
    assert_eq!(response.status, 200, "{}", response.body);
    lab.assert_clean(response.everything());

    // Framing and coding headers spelled with `_`: refused, nothing forwarded.
    for header in [
        "Transfer_Encoding: chunked",
        "Content_Length: 3",
        "content_length: 3",
        "Content_Encoding: gzip",
        "Content_Type: application/x-www-form-urlencoded",
    ] {
        let before = lab.forwarded();
        let response = lab.curl(&["-H", header, "--data-binary", "abc", &lab.url("/echo")]);
        lab.assert_refused(
            header,
            &response,
            (400, "invalid_request", "ambiguous_framing"),
        );
        assert_eq!(lab.forwarded(), before, "{header}: forwarded");
    }

    // Mint's own, proxy and hop-by-hop headers spelled with `_`: stripped like the hyphen forms.
    let cap_again = format!("Mint_Capability: {}", lab.cap);
    let proxy_auth = format!("Proxy_Authorization: Bearer {}", lab.cap);
    let response = lab.curl(&[
        "-H",
        &cap_again,
        "-H",
        &proxy_auth,
        "-H",
        "Mint_Debug: 1",
        "-H",
        "Proxy_Connection: keep-alive",
        "-H",
        "Keep_Alive: timeout=5",
        "-H",
        "Accept_Encoding: gzip",
        "-H",
        "Connection: x_foo, X-Bar",
        "-H",
        "X-Foo: hop",
        "-H",
        "X_Bar: hop",
        "-H",
        "X_Kept: yes",
        &lab.url("/echo"),
    ]);
    assert_eq!(response.status, 200, "{}", response.body);
    let seen = lab.peer.server.requests().last().unwrap();
    let names: Vec<String> = seen
        .headers
        .iter()
        .map(|(n, _)| n.to_ascii_lowercase())
        .collect();
    for stripped in [
        "mint_capability",
        "proxy_authorization",
        "mint_debug",
        "proxy_connection",
        "keep_alive",
        "accept_encoding",
        "x-foo",
        "x_bar",
    ] {
        assert!(
            !names.iter().any(|n| n == stripped),
            "{stripped} forwarded: {names:?}"
        );
    }
    assert_eq!(seen.header("x_kept"), Some("yes"), "{names:?}");
    assert!(
        !seen.contains(&lab.cap),
        "the capability reached the upstream"
    );
    lab.assert_clean(response.everything());

    // Answers: an upstream cannot forge Mint's headers, or label framing and coding, with `_`.
    let upstream = ScriptedUpstream::start(Box::new(|_, _| {
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nMint_Request_Id: forged\r\nMint_Outcome: completed\r\nProxy_Authenticate: Basic\r\nKeep_Alive: timeout=5\r\nContent_Length: 999\r\nTransfer_Encoding: chunked\r\nContent_Encoding: gzip\r\nX_Kept: yes\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
            .to_vec()
    }));
    let lab = scripted_broker(&upstream);
    let response = curl(&[
        "-H",
        &lab.cap_header(),
        "-H",
        "Authorization: Bearer {{mint:echo}}",
        &format!(
            "{}/v1/proxy/http/127.0.0.1:{}/answer",
            lab.broker.base,
            upstream.port()
        ),
    ]);
    assert_eq!(response.status, 200, "{}", response.body);
    assert_eq!(response.body, "ok");
    for forged in [
        "mint_request_id",
        "mint_outcome",
        "proxy_authenticate",
        "keep_alive",
        "content_length",
        "transfer_encoding",
        "content_encoding",
    ] {
        assert!(
            response.header(forged).is_none(),
            "{forged} reached the agent: {:?}",
            response.headers
        );
    }
    assert_eq!(response.header("x_kept"), Some("yes"));
    assert_ne!(response.header("mint-request-id"), Some("forged"));
    assert!(!response.everything().contains(CANARY));
    lab.broker.assert_secret_absent(CANARY);
}

/// A lab whose broker allows `GET` and `HEAD` through alias `echo` to the scripted upstream
/// (plain `http` on loopback); its echo upstream goes unused.
fn scripted_broker(upstream: &ScriptedUpstream) -> lab::Lab {
    let port = upstream.port();
    let config = LabConfig {
        secrets: &[("echo", CANARY)],
        ..LabConfig::default()
    };
    lab::Lab::start(config, |_| {
        lab::allow(
            "scripted",
            "echo",
            port,
            "GET, HEAD",
            "      scheme: [http]\n",
        )
    })
}

// ---------------------------------------------------------------------------------------------
// 2. `;` as a parameter separator
// ---------------------------------------------------------------------------------------------

/// Old Rack, PHP with `arg_separator.input = "&;"`, Python before 3.9.2 and Go before 1.17 split
/// parameters on `;` too, so `a=1;_method=DELETE` is a `DELETE` to them. Was: forwarded as a
/// `POST` past the deny rule on `DELETE`. Now refused in the query and in a form body.
#[test]
fn issue_22_semicolon_separated_method_overrides_are_refused() {
    let lab = Lab::start();
    let form = "Content-Type: application/x-www-form-urlencoded";
    for query in [
        "?a=1;_method=DELETE",
        "?a=1;.method=DELETE",
        "?;_method=PUT",
    ] {
        let before = lab.forwarded();
        let response = lab.curl(&["-X", "POST", &lab.url(&format!("/echo{query}"))]);
        lab.assert_refused(query, &response, (400, "invalid_request", "invalid_method"));
        assert_eq!(lab.forwarded(), before, "{query}: forwarded");
    }
    for body in ["a=1;_method=DELETE", "a=1&b=2;+_method=DELETE"] {
        let before = lab.forwarded();
        let response = lab.curl(&["-H", form, "--data-binary", body, &lab.url("/echo")]);
        lab.assert_refused(body, &response, (400, "invalid_request", "invalid_method"));
        assert_eq!(lab.forwarded(), before, "{body}: forwarded");
    }
    // `;` between ordinary parameters, or a `_method` that repeats the method, passes.
    for body in ["a=1;b=2", "a=1;_method=POST"] {
        let response = lab.curl(&["-H", form, "--data-binary", body, &lab.url("/echo")]);
        assert_eq!(response.status, 200, "{body}: {}", response.body);
        let seen = lab.peer.server.requests().last().unwrap();
        assert_eq!(seen.body, body.as_bytes());
        lab.assert_clean(response.everything());
    }
}

// ---------------------------------------------------------------------------------------------
// 3. HTTP/2 requests the HTTP/2 library resets
// ---------------------------------------------------------------------------------------------

/// An HTTP/2 frame: 24-bit length, type, flags, stream id, payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap();
    let mut out = len.to_be_bytes()[1..].to_vec();
    out.extend([kind, flags]);
    out.extend(stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// An HPACK integer with an `n`-bit prefix under `first` (RFC 7541 section 5.1).
fn hpack_int(first: u8, n: u32, mut value: usize, out: &mut Vec<u8>) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// A header block of literal fields without indexing, new names, no Huffman coding: leaves the
/// decoder's dynamic table as it is.
fn hpack_block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        out.push(0);
        hpack_int(0, 7, name.len(), &mut out);
        out.extend_from_slice(name.as_bytes());
        hpack_int(0, 7, value.len(), &mut out);
        out.extend_from_slice(value.as_bytes());
    }
    out
}

const HEADERS: u8 = 0x1;
const DATA: u8 = 0x0;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PROTOCOL_ERROR: u32 = 0x1;

/// What the server sent on stream 1 of a raw HTTP/2 exchange.
#[derive(Debug, Default)]
struct H2Seen {
    /// The error code of a `RST_STREAM` on stream 1.
    reset: Option<u32>,
    /// Whether a `HEADERS` frame came on stream 1.
    headers: bool,
    /// Everything received, for canary checks.
    raw: Vec<u8>,
}

/// Sends the connection preface, `SETTINGS` and `packets` (each its own write, 200 ms apart),
/// acknowledges the server's `SETTINGS`, and reads frames until stream 1 is reset or ends, or
/// 10 s pass.
fn h2_exchange(broker: &Broker, packets: &[Vec<u8>]) -> H2Seen {
    let mut stream = TcpStream::connect(broker.addr()).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    preface.extend(frame(SETTINGS, 0, 0, &[]));
    stream.write_all(&preface).unwrap();
    for packet in packets {
        std::thread::sleep(Duration::from_millis(200));
        stream.write_all(packet).unwrap();
    }
    let mut seen = H2Seen::default();
    let mut buffer = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut chunk = [0u8; 16 * 1024];
    while Instant::now() < deadline {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            Err(_) => {}
        }
        while buffer.len() >= 9 {
            let len = u32::from_be_bytes([0, buffer[0], buffer[1], buffer[2]]) as usize;
            if buffer.len() < 9 + len {
                break;
            }
            let (kind, flags) = (buffer[3], buffer[4]);
            let id = u32::from_be_bytes([buffer[5], buffer[6], buffer[7], buffer[8]]) & 0x7fff_ffff;
            let payload = buffer[9..9 + len].to_vec();
            seen.raw.extend(buffer.drain(..9 + len));
            match (kind, id) {
                (SETTINGS, 0) if flags & 1 == 0 => {
                    let _ = stream.write_all(&frame(SETTINGS, 1, 0, &[]));
                }
                (RST_STREAM, 1) => {
                    seen.reset = Some(u32::from_be_bytes(payload[..4].try_into().unwrap()));
                    return seen;
                }
                (HEADERS, 1) => {
                    seen.headers = true;
                    if flags & END_STREAM != 0 {
                        return seen;
                    }
                }
                (DATA, 1) if flags & END_STREAM != 0 => return seen,
                (GOAWAY, _) => return seen,
                _ => {}
            }
        }
    }
    seen
}

/// The audit records whose lines are complete: the broker may be writing the last one while
/// the test reads (`Broker::audit_records` would fail to parse it).
fn written_records(broker: &Broker) -> Vec<Value> {
    let text = broker.audit_text();
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    complete
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Waits (bounded) until the audit log has at least `from + count` complete records, then a
/// little longer, and returns the records after the first `from`.
fn records_after(broker: &Broker, from: usize, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while written_records(broker).len() < from + count && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Anything more the broker would write (a second pair) comes at once too.
    std::thread::sleep(Duration::from_millis(300));
    written_records(broker).split_off(from)
}

/// One malformed HTTP/2 request: what, the header fields besides the base ones, the DATA, and
/// whether its head ends the stream.
type Malformed<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [u8], bool);

/// HTTP/2 requests that the HTTP/2 library (h2) resets with `PROTOCOL_ERROR`: a
/// `content-length` larger or smaller than the DATA sent, one that is not a single number
/// (`5, 5`), a `content-length` on a request that ends with its head, `transfer-encoding` and
/// `connection`; each with the DATA in the head's packet and in a later one. The agent gets
/// `RST_STREAM` and no head. Was: no audit record at all for the last four, and for the first
/// two a `deny` with status 400 that the agent never got. Now each gets exactly one `deny`
/// decision and one `invalid` outcome with audit reason `malformed_http2` and no status, and
/// nothing is forwarded. So does a request whose connection the agent breaks (`GOAWAY`) while
/// its body is still arriving, and a refused request whose stream h2 resets.
#[test]
fn issue_22_http2_requests_reset_by_the_library_are_audited_as_the_agent_got_them() {
    let lab = Lab::start();
    let path = lab.path("/echo");
    let base: Vec<(&str, &str)> = vec![
        (":method", "POST"),
        (":scheme", "http"),
        (":authority", "mint"),
        (":path", &path),
        ("mint-capability", &lab.cap),
        ("authorization", "Bearer {{mint:echo}}"),
    ];
    let cases: [Malformed; 6] = [
        (
            "content-length over the data",
            &[("content-length", "5")],
            b"0123456789",
            false,
        ),
        (
            "content-length under the data",
            &[("content-length", "10")],
            b"01234",
            false,
        ),
        (
            "content-length 5, 5",
            &[("content-length", "5, 5")],
            b"01234",
            false,
        ),
        (
            "content-length and no body",
            &[("content-length", "5")],
            b"",
            true,
        ),
        (
            "transfer-encoding",
            &[("transfer-encoding", "chunked")],
            b"01234",
            false,
        ),
        (
            "connection",
            &[("connection", "keep-alive")],
            b"01234",
            false,
        ),
    ];
    for (what, extra, data, ends_with_head) in cases {
        for together in [true, false] {
            let what = format!(
                "{what}, {}",
                if together {
                    "one packet"
                } else {
                    "two packets"
                }
            );
            let mut fields = base.clone();
            fields.extend_from_slice(extra);
            let flags = END_HEADERS | if ends_with_head { END_STREAM } else { 0 };
            let head = frame(HEADERS, flags, 1, &hpack_block(&fields));
            let body = frame(DATA, END_STREAM, 1, data);
            let packets = match (ends_with_head, together) {
                (true, _) => vec![head],
                (false, true) => vec![[head, body].concat()],
                (false, false) => vec![head, body],
            };
            let before = lab.forwarded();
            let from = written_records(&lab.broker).len();
            let seen = h2_exchange(&lab.broker, &packets);
            assert_eq!(seen.reset, Some(PROTOCOL_ERROR), "{what}: {seen:?}");
            assert!(!seen.headers, "{what}: a head came");
            let records = records_after(&lab.broker, from, 2);
            assert_eq!(records.len(), 2, "{what}: {records:?}");
            let (decision, outcome) = (&records[0], &records[1]);
            assert_eq!(decision["phase"], "decision", "{what}: {records:?}");
            assert_eq!(decision["decision"], "deny", "{what}: {decision}");
            assert_eq!(decision["reason"], "malformed_http2", "{what}: {decision}");
            assert_eq!(outcome["phase"], "outcome", "{what}: {records:?}");
            assert_eq!(outcome["id"], decision["id"], "{what}");
            assert_eq!(outcome["outcome"], "invalid", "{what}: {outcome}");
            assert_eq!(outcome["reason"], "malformed_http2", "{what}: {outcome}");
            assert!(outcome.get("status").is_none(), "{what}: {outcome}");
            assert_eq!(lab.forwarded(), before, "{what}: forwarded");
            lab.assert_clean(&seen.raw);
        }
    }

    // Refused by Mint (no capability) and reset by h2 (more DATA than its `content-length`):
    // one pair of records either way, saying what the agent got. With the DATA in the head's
    // packet the reset comes before Mint gets the request; with it later, the 401 goes first.
    for together in [true, false] {
        let fields: Vec<(&str, &str)> = base
            .iter()
            .copied()
            .filter(|(name, _)| *name != "mint-capability")
            .chain([("content-length", "5")])
            .collect();
        let head = frame(HEADERS, END_HEADERS, 1, &hpack_block(&fields));
        let body = frame(DATA, END_STREAM, 1, b"0123456789");
        let packets = if together {
            vec![[head, body].concat()]
        } else {
            vec![head, body]
        };
        let from = written_records(&lab.broker).len();
        let seen = h2_exchange(&lab.broker, &packets);
        let records = records_after(&lab.broker, from, 2);
        assert_eq!(
            records.len(),
            2,
            "together {together}: {records:?} {seen:?}"
        );
        let (decision, outcome) = (&records[0], &records[1]);
        assert_eq!(decision["decision"], "deny", "{records:?}");
        if seen.headers {
            assert_eq!(decision["reason"], "capability_invalid", "{records:?}");
            assert_eq!(outcome["status"], 401, "{records:?}");
        } else {
            assert!(together, "{seen:?}");
            assert_eq!(seen.reset, Some(PROTOCOL_ERROR), "{seen:?}");
            assert_eq!(decision["reason"], "malformed_http2", "{records:?}");
            assert!(outcome.get("status").is_none(), "{records:?}");
        }
        lab.assert_clean(&seen.raw);
    }

    // A request whose body is still arriving when the agent breaks the whole connection (DATA
    // on stream 0: h2 answers GOAWAY with PROTOCOL_ERROR): one pair of records, no status.
    let mut fields = base.clone();
    fields.push(("content-length", "10"));
    let from = written_records(&lab.broker).len();
    let before = lab.forwarded();
    let seen = h2_exchange(
        &lab.broker,
        &[
            [
                frame(HEADERS, END_HEADERS, 1, &hpack_block(&fields)),
                frame(DATA, 0, 1, b"01234"),
            ]
            .concat(),
            frame(DATA, 0, 0, b"x"),
        ],
    );
    assert!(!seen.headers, "{seen:?}");
    let records = records_after(&lab.broker, from, 2);
    assert_eq!(records.len(), 2, "GOAWAY: {records:?}");
    assert_eq!(records[0]["reason"], "malformed_http2", "{records:?}");
    assert_eq!(records[1]["outcome"], "invalid", "{records:?}");
    assert!(records[1].get("status").is_none(), "{records:?}");
    assert_eq!(lab.forwarded(), before);
    lab.assert_clean(&seen.raw);

    // A well-formed request on HTTP/2 is served, with one decision and one outcome.
    let from = written_records(&lab.broker).len();
    let mut fields = base.clone();
    fields.push(("content-length", "5"));
    let seen = h2_exchange(
        &lab.broker,
        &[[
            frame(HEADERS, END_HEADERS, 1, &hpack_block(&fields)),
            frame(DATA, END_STREAM, 1, b"01234"),
        ]
        .concat()],
    );
    assert!(seen.headers && seen.reset.is_none(), "{seen:?}");
    let records = records_after(&lab.broker, from, 2);
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0]["decision"], "allow", "{records:?}");
    assert_eq!(records[1]["outcome"], "completed", "{records:?}");
    lab.assert_clean(&seen.raw);
}

// ---------------------------------------------------------------------------------------------
// 4. The interim `100 Continue`
// ---------------------------------------------------------------------------------------------

/// A request with `Expect: 100-continue` gets the interim `100 Continue` with the request's
/// `Mint-Request-Id` (was: hyper's bare one), then its answer with the same id, which the audit
/// records carry; a second request on the connection gets its own id on both.
#[test]
fn issue_22_the_interim_100_continue_carries_the_request_id() {
    let lab = Lab::start();
    let mut agent = TcpStream::connect(lab.broker.addr()).unwrap();
    agent.set_nodelay(true).unwrap();
    agent
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut ids = Vec::new();
    for body in ["first", "second"] {
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: mint\r\nMint-Capability: {}\r\nAuthorization: Bearer {{{{mint:echo}}}}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
            lab.path("/echo"),
            lab.cap,
            body.len()
        );
        agent.write_all(head.as_bytes()).unwrap();
        let interim = read_until(&mut agent, b"\r\n\r\n");
        let interim_text = String::from_utf8_lossy(&interim).into_owned();
        assert!(
            interim_text.starts_with("HTTP/1.1 100 Continue\r\n"),
            "{interim_text}"
        );
        let interim_answer = parse_raw_answer(&interim);
        let id = interim_answer
            .header("mint-request-id")
            .unwrap_or_else(|| panic!("no Mint-Request-Id on the 100: {interim_text}"))
            .to_owned();
        agent.write_all(body.as_bytes()).unwrap();
        // The answer is chunked (Mint scrubs it): its last chunk ends it.
        let answer = read_until(&mut agent, b"\r\n0\r\n\r\n");
        let parsed = parse_raw_answer(&answer);
        assert_eq!(parsed.status, 200, "{}", String::from_utf8_lossy(&answer));
        assert_eq!(parsed.header("mint-request-id"), Some(id.as_str()));
        assert_eq!(lab.broker.decision_of(&id)["decision"], "allow");
        assert_eq!(lab.broker.outcome_of(&id)["status"], 200);
        lab.assert_clean(format!(
            "{interim_text}{}",
            String::from_utf8_lossy(&answer)
        ));
        ids.push(id);
    }
    assert_ne!(ids[0], ids[1]);
}

/// Reads at least once, then until `needle` (empty: one read) is in what was read.
fn read_until(stream: &mut TcpStream, needle: &[u8]) -> Vec<u8> {
    let mut received = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => panic!("closed early: {}", String::from_utf8_lossy(&received)),
            Ok(n) => received.extend_from_slice(&buf[..n]),
            Err(error) => panic!("nothing came ({error})"),
        }
        if needle.is_empty() || find(&received, needle).is_some() {
            return received;
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

// ---------------------------------------------------------------------------------------------
// 5. Compressed answers
// ---------------------------------------------------------------------------------------------

/// A gzip answer of several members (as `cat a.gz b.gz` or a server compressing each write
/// makes it) is decoded whole, every member scrubbed: the secret in the second member comes back
/// redacted (was: `502` after the first member, while multi-member request bodies are accepted).
/// An answer labelled gzip without a body loses the label, as a decoded one does (was: an empty
/// body labelled `Content-Encoding: gzip`), for `GET` and for `HEAD`.
#[test]
fn issue_22_compressed_answers_decode_every_member_and_lose_an_empty_label() {
    let upstream = ScriptedUpstream::start(Box::new(|request, _| {
        let text = String::from_utf8_lossy(request).into_owned();
        let secret = request_header(request, "authorization")
            .and_then(|value| value.strip_prefix("Bearer ").map(str::to_owned))
            .unwrap_or_default();
        let body = if text.contains(" /members ") {
            let mut body = gzip(b"first member\n");
            body.extend(gzip(format!("second member {secret}\n").as_bytes()));
            body.extend(gzip(b""));
            body.extend(gzip(&b"third member\n".repeat(2000)));
            body
        } else {
            Vec::new()
        };
        let mut answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        if !text.starts_with("HEAD ") {
            answer.extend_from_slice(&body);
        }
        answer
    }));
    let lab = scripted_broker(&upstream);
    let (broker, cap) = (&lab.broker, &lab.cap);
    let url = |path: &str| {
        format!(
            "{}/v1/proxy/http/127.0.0.1:{}{path}",
            broker.base,
            upstream.port()
        )
    };
    let cap_header = format!("Mint-Capability: {cap}");
    let auth = "Authorization: Bearer {{mint:echo}}";

    let response = curl(&["-H", &cap_header, "-H", auth, &url("/members")]);
    assert_eq!(response.status, 200, "{}", response.body);
    assert!(
        response.header("content-encoding").is_none(),
        "{:?}",
        response.headers
    );
    let expected = format!(
        "first member\nsecond member [mint:redacted]\n{}",
        "third member\n".repeat(2000)
    );
    assert_eq!(response.body, expected);
    let id = response.header("mint-request-id").unwrap();
    let outcome = broker.outcome_of(id);
    assert_eq!(outcome["outcome"], "completed", "{outcome}");
    assert_eq!(outcome["status"], 200, "{outcome}");
    assert_eq!(outcome["bytes_down"], expected.len(), "{outcome}");
    assert!(!response.everything().contains(cap.as_str()));
    assert!(!response.everything().contains(CANARY));

    for (what, args) in [("GET", vec![]), ("HEAD", vec!["-I"])] {
        let mut all = vec!["-H", cap_header.as_str(), "-H", auth];
        all.extend(args);
        let target = url("/empty");
        all.push(&target);
        let response = curl(&all);
        assert_eq!(response.status, 200, "{what}: {}", response.body);
        assert!(
            response.header("content-encoding").is_none(),
            "{what}: {:?}",
            response.headers
        );
        // (curl -I prints the head as the body too: only whitespace may follow it.)
        assert_eq!(response.body.trim(), "", "{what}");
        let id = response.header("mint-request-id").unwrap();
        assert_eq!(broker.outcome_of(id)["outcome"], "completed", "{what}");
        assert!(!response.everything().contains(CANARY));
    }
    broker.assert_secret_absent(CANARY);
    broker.assert_secret_absent(cap);
}

/// An outside review of the merged binary: an upstream that returns what it stored (here: the
/// `Authorization` value it received) and honours `Range` handed the agent the secret in pieces
/// (`bytes=8-23`, then `bytes=24-39`, each a 206 the scrubber could not recognise). Was: both
/// halves came back in clear. Now `Range` and `If-Range` never reach the upstream, which answers
/// whole, and the whole secret is redacted.
#[test]
fn issue_22_range_requests_cannot_cut_a_secret_into_pieces() {
    let upstream = ScriptedUpstream::start(Box::new(|request, _| {
        let header = |name: &str| request_header(request, name);
        let stored = header("authorization").unwrap_or_default().into_bytes();
        let range = header("range").and_then(|range| {
            let (from, to) = range.strip_prefix("bytes=")?.split_once('-')?;
            let (from, to): (usize, usize) = (from.parse().ok()?, to.parse().ok()?);
            stored.get(from..=to.min(stored.len().saturating_sub(1)))
        });
        let (status, body) = match range {
            Some(part) => ("206 Partial Content", part.to_vec()),
            None => ("200 OK", stored.clone()),
        };
        let mut answer = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        answer.extend_from_slice(&body);
        answer
    }));
    let lab = scripted_broker(&upstream);
    let url = format!(
        "{}/v1/proxy/http/127.0.0.1:{}/stored",
        lab.broker.base,
        upstream.port()
    );
    let cap = lab.cap_header();
    let mut seen = String::new();
    for range in ["bytes=7-18", "bytes=19-40"] {
        for extra in [None, Some("If-Range: \"v1\"")] {
            let range_header = format!("Range: {range}");
            let mut args = vec![
                "-H",
                cap.as_str(),
                "-H",
                "Authorization: Bearer {{mint:echo}}",
                "-H",
                range_header.as_str(),
            ];
            if let Some(extra) = extra {
                args.extend(["-H", extra]);
            }
            args.push(url.as_str());
            let response = curl(&args);
            assert_eq!(response.status, 200, "{}", response.body);
            assert_eq!(response.body, "Bearer [mint:redacted]");
            seen.push_str(&response.everything());
        }
    }
    for request in upstream.requests() {
        let text = String::from_utf8_lossy(&request).to_ascii_lowercase();
        assert!(!text.contains("\r\nrange:"), "{text}");
        assert!(!text.contains("\r\nif-range:"), "{text}");
    }
    // No piece of the secret either: every 8-byte window of it is absent from what came back.
    let secret = CANARY.as_bytes();
    for piece in secret.windows(8) {
        let piece = String::from_utf8_lossy(piece);
        assert!(
            !seen.contains(piece.as_ref()),
            "a piece of the secret came back: {piece}"
        );
    }
    lab.assert_clean(&seen);
}
