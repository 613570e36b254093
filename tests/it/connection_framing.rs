//! Every request of an agent connection gets the same checks, end to end (issue 22): the real
//! `mint serve`, a real HTTPS echo upstream (or a scripted plain-HTTP one), and raw TCP clients
//! with `TCP_NODELAY` that choose the exact bytes, their line endings and how they are split into
//! packets.
//!
//! - A head ending in bare line feeds is a head like any other: its answer (an SSE stream longer
//!   than the head deadline, or one waiting for a slow upstream) is never cut by a 408.
//! - The framing checks (Content-Length with Transfer-Encoding, several Content-Length headers)
//!   apply to every head of a connection, whatever its line endings and however its bytes were
//!   split: pipelined, after keep-alive, with the body in a later packet. Nothing of a refused
//!   request is forwarded.
//! - A malformed later request of a connection gets Mint's JSON error with `Mint-Request-Id`
//!   and an audit record, like the first.
//! - A compressed answer that does not decode: what the agent gets and what the outcome record
//!   says agree.
//!
//! Every test plants a canary secret and checks it is absent from everything the client
//! received, from the audit log and from Mint's stderr.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use mint_tests::broker::{Broker, ScriptedUpstream, gzip, request_header};
use mint_tests::lab::{self, LabConfig};
use serde_json::Value;

/// The secret of alias `echo`.
const CANARY: &str = "canary-conn22-Rt5Yp8Wq2Zx7";

/// The head deadline of these brokers; the long answers last several times longer.
const HEAD_DEADLINE: &str = "1s";

mint_tests::lab_newtype!(
    /// The shared lab (an echo upstream and a broker allowing GET and POST to it with alias `echo`,
    /// with a 1 s head deadline), with this file's raw request heads.
    Lab
);

impl Lab {
    fn start() -> Lab {
        let config = LabConfig {
            secrets: &[("echo", CANARY)],
            serve_args: &["--header-read-timeout", HEAD_DEADLINE],
            ..LabConfig::default()
        };
        Lab(lab::Lab::start(config, |port| {
            lab::allow("echo", "echo", port, "GET, POST", "")
        }))
    }

    /// A request head for `path_and_query` on the echo upstream, its lines ended by `eol` (the
    /// blank line too), with the capability, the placeholder and `extra` header lines.
    fn head(&self, method: &str, path_and_query: &str, extra: &[&str], eol: &str) -> String {
        let mut head = format!(
            "{method} /v1/proxy/https/127.0.0.1:{}{path_and_query} HTTP/1.1{eol}Host: mint{eol}Mint-Capability: {}{eol}Authorization: Bearer {{{{mint:echo}}}}{eol}",
            self.peer.server.port(),
            self.cap
        );
        for line in extra {
            head.push_str(line);
            head.push_str(eol);
        }
        head.push_str(eol);
        head
    }
}

/// A raw agent connection with `TCP_NODELAY`: each `send` goes out as its own packet.
struct Agent {
    stream: TcpStream,
}

impl Agent {
    fn connect(broker: &Broker) -> Agent {
        let stream = TcpStream::connect(broker.addr()).unwrap();
        stream.set_nodelay(true).unwrap();
        // A hang guard, not a timing assertion.
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Agent { stream }
    }

    /// Writes `bytes`, then pauses a little so that the next write is read separately.
    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
        self.stream.flush().unwrap();
        std::thread::sleep(Duration::from_millis(60));
    }

    /// Writes `packets` one after the other, each in its own packet.
    fn send_all(&mut self, packets: &[&[u8]]) {
        for packet in packets {
            self.send(packet);
        }
    }

    /// Reads until what was received holds `needle`.
    fn read_until(&mut self, needle: &[u8]) -> Vec<u8> {
        let mut received = Vec::new();
        let mut buf = [0u8; 8192];
        while find(&received, needle).is_none() {
            match self.stream.read(&mut buf) {
                Ok(0) => panic!("closed early: {}", String::from_utf8_lossy(&received)),
                Ok(n) => received.extend_from_slice(&buf[..n]),
                Err(error) => panic!("nothing came ({error})"),
            }
        }
        received
    }

    /// Reads until the broker closes the connection.
    fn read_to_close(&mut self) -> Vec<u8> {
        let mut received = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => return received,
                Ok(n) => received.extend_from_slice(&buf[..n]),
                Err(error) => panic!(
                    "the broker kept the connection open ({error}); got: {}",
                    String::from_utf8_lossy(&received)
                ),
            }
        }
    }
}

/// One answer read from a raw connection.
#[derive(Debug)]
struct Answer {
    status: u16,
    /// Lowercase names.
    headers: Vec<(String, String)>,
    /// Dechunked when chunked.
    body: Vec<u8>,
    /// Whether the body ended as its framing says (the last chunk, or `Content-Length` bytes).
    complete: bool,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// Splits everything a connection received into its answers (heads with CRLF line ends, as
/// Mint writes them).
#[track_caller]
fn answers(mut raw: &[u8]) -> Vec<Answer> {
    let mut found = Vec::new();
    while !raw.is_empty() {
        let end = find(raw, b"\r\n\r\n")
            .unwrap_or_else(|| panic!("no complete head in {}", String::from_utf8_lossy(raw)));
        let head = String::from_utf8_lossy(&raw[..end]).into_owned();
        raw = &raw[end + 4..];
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap();
        assert!(status_line.starts_with("HTTP/1."), "{status_line}");
        let status = status_line[9..12].parse().unwrap();
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let chunked = headers
            .iter()
            .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
        let length = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map(|(_, v)| v.parse::<usize>().unwrap());
        let (body, complete, used) = if chunked {
            dechunk(raw)
        } else if let Some(length) = length {
            let taken = length.min(raw.len());
            (raw[..taken].to_vec(), taken == length, taken)
        } else {
            (raw.to_vec(), false, raw.len())
        };
        raw = &raw[used..];
        found.push(Answer {
            status,
            headers,
            body,
            complete,
        });
    }
    found
}

/// A chunked body: its bytes, whether the last chunk came, and how many raw bytes it used.
fn dechunk(raw: &[u8]) -> (Vec<u8>, bool, usize) {
    let mut body = Vec::new();
    let mut at = 0;
    while let Some(line) = find(&raw[at..], b"\r\n") {
        let size = String::from_utf8_lossy(&raw[at..at + line]).into_owned();
        let Ok(size) = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16) else {
            break;
        };
        let start = at + line + 2;
        if size == 0 {
            return match find(&raw[start..], b"\r\n") {
                Some(0) => (body, true, start + 2),
                _ => (body, false, raw.len()),
            };
        }
        if raw.len() < start + size + 2 {
            body.extend_from_slice(&raw[start..raw.len().min(start + size)]);
            return (body, false, raw.len());
        }
        body.extend_from_slice(&raw[start..start + size]);
        at = start + size + 2;
    }
    body.extend_from_slice(&raw[at..]);
    (body, false, raw.len())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The answer is Mint's own JSON error with `status`, `code` and `outcome`; returns its id.
#[track_caller]
fn assert_mint_error(answer: &Answer, status: u16, code: &str, outcome: &str) -> String {
    assert_eq!(answer.status, status, "{answer:?} {}", answer.text());
    assert_eq!(answer.header("mint-outcome"), Some(outcome), "{answer:?}");
    assert!(
        answer
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "{answer:?}"
    );
    let id = answer
        .header("mint-request-id")
        .unwrap_or_else(|| panic!("no Mint-Request-Id: {answer:?}"))
        .to_owned();
    let json = answer.json();
    assert_eq!(json["error"]["code"], code, "{json}");
    assert_eq!(json["error"]["request_id"], id.as_str(), "{json}");
    id
}

/// `id` has a `deny` decision and an `invalid` outcome with `status`, both with `reason`.
#[track_caller]
fn assert_refused_audit(broker: &Broker, id: &str, status: u16, reason: &str) {
    let outcome = broker.outcome_of(id);
    let records = broker.records_of(id);
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0]["phase"], "decision", "{records:?}");
    assert_eq!(records[0]["decision"], "deny", "{records:?}");
    assert_eq!(records[0]["reason"], reason, "{records:?}");
    assert_eq!(outcome["outcome"], "invalid", "{outcome}");
    assert_eq!(outcome["status"], status, "{outcome}");
    assert_eq!(outcome["reason"], reason, "{outcome}");
}

/// `id` has an `allow` decision and a `completed` outcome with `status` and no reason.
#[track_caller]
fn assert_completed_audit(broker: &Broker, id: &str, status: u16) {
    let outcome = broker.outcome_of(id);
    let records = broker.records_of(id);
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0]["decision"], "allow", "{records:?}");
    assert_eq!(outcome["outcome"], "completed", "{outcome}");
    assert_eq!(outcome["status"], status, "{outcome}");
    assert!(outcome.get("reason").is_none(), "{outcome}");
}

/// The three line endings hyper accepts in a head: CRLF, bare LF, and a mix.
const LINE_ENDINGS: [(&str, &str); 3] = [("CRLF", "\r\n"), ("bare LF", "\n"), ("mixed", "MIXED")];

/// `head` with the line ending `eol`; `MIXED` ends the request line and the blank line with a
/// bare LF and the header lines with CRLF.
fn with_line_ending(lab: &Lab, method: &str, target: &str, extra: &[&str], eol: &str) -> String {
    if eol != "MIXED" {
        return lab.head(method, target, extra, eol);
    }
    let crlf = lab.head(method, target, extra, "\r\n");
    let (request_line, rest) = crlf.split_once("\r\n").unwrap();
    let rest = rest.strip_suffix("\r\n").unwrap();
    format!("{request_line}\n{rest}\n")
}

// ---------------------------------------------------------------------------------------------
// Finding 5: the head deadline never runs while a request is handled or answered
// ---------------------------------------------------------------------------------------------

/// An SSE stream four times as long as the head deadline, and an answer waiting 2.5 s for a slow
/// upstream, asked for with each line ending: the answer arrives whole (the last chunk, every
/// event), no 408 is written into it, and the audit log has one allow and one `completed`
/// outcome each and no `header_read_timeout` record. (Before the fix, a bare-LF head left the
/// deadline armed: a JSON 408 landed in the middle of the answer and a false refusal was
/// audited.)
#[test]
fn issue_22_a_long_answer_to_any_head_is_never_cut_by_the_head_deadline() {
    let lab = Lab::start();
    for (what, eol) in LINE_ENDINGS {
        for target in [
            "/sse?n=4&interval_ms=1000&echo=authorization",
            "/stall?ms=2500",
        ] {
            let head = with_line_ending(&lab, "GET", target, &["Connection: close"], eol);
            let mut agent = Agent::connect(&lab.broker);
            agent.send(head.as_bytes());
            let raw = agent.read_to_close();
            lab.assert_clean(&raw);
            let text = String::from_utf8_lossy(&raw);
            assert!(!text.contains(" 408 "), "{what} {target}: {text}");
            let found = answers(&raw);
            assert_eq!(found.len(), 1, "{what} {target}: {text}");
            let answer = &found[0];
            assert_eq!(answer.status, 200, "{what} {target}: {text}");
            assert!(answer.complete, "{what} {target}: cut off: {text}");
            if target.starts_with("/sse") {
                assert_eq!(answer.text().matches("data:").count(), 4, "{text}");
                assert!(answer.text().contains("[mint:redacted]"), "{text}");
            }
            let id = answer.header("mint-request-id").unwrap();
            assert_completed_audit(&lab.broker, id, 200);
        }
    }
    assert!(
        !lab.broker.audit_text().contains("header_read_timeout"),
        "{}",
        lab.broker.audit_text()
    );
    assert_eq!(lab.broker.audit_records().len(), 2 * 2 * LINE_ENDINGS.len());
}

/// A head started (pipelined) while the answer before it streams is not on the clock until that
/// answer is over: the stream arrives whole, and only then does the unfinished head get its JSON
/// 408, after the stream's last chunk, with its own audit record.
#[test]
fn issue_22_a_head_started_during_an_answer_gets_its_deadline_after_it() {
    let lab = Lab::start();
    for (what, eol) in LINE_ENDINGS {
        let head = with_line_ending(
            &lab,
            "GET",
            "/sse?n=4&interval_ms=1000&echo=authorization",
            &[],
            eol,
        );
        let mut agent = Agent::connect(&lab.broker);
        agent.send(head.as_bytes());
        // Once the stream has started: the start of the next head, never finished.
        let mut raw = agent.read_until(b"data:");
        agent.send(
            format!(
                "GET /healthz HTTP/1.1{}Host: mi",
                eol.replace("MIXED", "\n")
            )
            .as_bytes(),
        );
        raw.extend(agent.read_to_close());
        lab.assert_clean(&raw);
        let found = answers(&raw);
        let text = String::from_utf8_lossy(&raw);
        assert_eq!(found.len(), 2, "{what}: {text}");
        assert_eq!(found[0].status, 200, "{what}: {text}");
        assert!(found[0].complete, "{what}: the stream was cut: {text}");
        assert_eq!(found[0].text().matches("data:").count(), 4, "{text}");
        assert_completed_audit(
            &lab.broker,
            found[0].header("mint-request-id").unwrap(),
            200,
        );
        let id = assert_mint_error(&found[1], 408, "invalid_request", "invalid");
        assert_refused_audit(&lab.broker, &id, 408, "header_read_timeout");
    }
}

// ---------------------------------------------------------------------------------------------
// Finding 6: the framing checks apply to every head of a connection
// ---------------------------------------------------------------------------------------------

/// Content-Length with Transfer-Encoding, and two Content-Length headers, in a head with each
/// line ending: as the only request with its body in a later packet, and as the second request
/// of a pipelined connection (in the first request's packet, in a packet of its own, split in
/// the middle of its framing headers). Each is refused with Mint's JSON 400 (`ambiguous_framing`
/// in the audit log), its answer closes the connection, and nothing of it reaches the upstream;
/// the first request of the pipeline is served.
#[test]
fn issue_22_ambiguous_framing_is_refused_on_every_head_however_it_arrives() {
    let lab = Lab::start();
    let framings: [(&str, &[&str], &str); 3] = [
        (
            "CL then TE",
            &["Content-Length: 5", "Transfer-Encoding: chunked"],
            "0\r\n\r\n",
        ),
        (
            "TE then CL",
            &["Transfer-Encoding: chunked", "Content-Length: 5"],
            "0\r\n\r\n",
        ),
        (
            "two Content-Length",
            &["Content-Length: 5", "Content-Length: 5"],
            "hello",
        ),
    ];
    for (what_eol, eol) in LINE_ENDINGS {
        for (what, framing, body) in framings {
            let refused = with_line_ending(&lab, "POST", "/echo/refused", framing, eol);
            let first = with_line_ending(&lab, "GET", "/echo/first", &[], eol);
            let split_at = refused.find("ength:").unwrap();
            let layouts: Vec<(&str, Vec<Vec<u8>>)> = vec![
                (
                    "alone, body in a later packet",
                    vec![refused.clone().into_bytes(), body.as_bytes().to_vec()],
                ),
                (
                    "pipelined in one packet",
                    vec![format!("{first}{refused}{body}").into_bytes()],
                ),
                (
                    "pipelined, packet by packet",
                    vec![
                        first.clone().into_bytes(),
                        refused.clone().into_bytes(),
                        body.as_bytes().to_vec(),
                    ],
                ),
                (
                    "pipelined, split inside the framing headers",
                    vec![
                        format!("{first}{}", &refused[..split_at]).into_bytes(),
                        format!("{}{body}", &refused[split_at..]).into_bytes(),
                    ],
                ),
            ];
            for (layout, packets) in layouts {
                let case = format!("{what}, {what_eol}, {layout}");
                let before = lab.forwarded();
                let mut agent = Agent::connect(&lab.broker);
                let packets: Vec<&[u8]> = packets.iter().map(Vec::as_slice).collect();
                agent.send_all(&packets);
                let raw = agent.read_to_close();
                lab.assert_clean(&raw);
                let found = answers(&raw);
                let text = String::from_utf8_lossy(&raw);
                let pipelined = layout.starts_with("pipelined");
                assert_eq!(found.len(), 1 + usize::from(pipelined), "{case}: {text}");
                if pipelined {
                    assert_eq!(found[0].status, 200, "{case}: {text}");
                    assert_completed_audit(
                        &lab.broker,
                        found[0].header("mint-request-id").unwrap(),
                        200,
                    );
                }
                let last = found.last().unwrap();
                let id = assert_mint_error(last, 400, "invalid_request", "invalid");
                assert_eq!(last.header("connection"), Some("close"), "{case}");
                assert_refused_audit(&lab.broker, &id, 400, "ambiguous_framing");
                let paths = lab.forwarded_paths();
                assert_eq!(
                    lab.forwarded(),
                    before + usize::from(pipelined),
                    "{case}: {paths:?}"
                );
                assert!(
                    paths.iter().all(|p| !p.contains("refused")),
                    "{case}: the refused request was forwarded: {paths:?}"
                );
            }
        }
    }
}

/// The framing checks do not refuse what they should not: three pipelined requests with bodies
/// and each line ending, split into packets at many offsets, are all served in order, and the
/// upstream gets each body whole.
#[test]
fn issue_22_pipelined_requests_with_bodies_are_all_served_at_any_split() {
    let lab = Lab::start();
    for (what, eol) in LINE_ENDINGS {
        let mut stream = String::new();
        for (n, body) in ["one", "", "GET /v1/proxy/https/x/ HTTP/1.1\r\n\r\n"]
            .iter()
            .enumerate()
        {
            let length = format!("Content-Length: {}", body.len());
            let connection: &[&str] = if n == 2 { &["Connection: close"] } else { &[] };
            let extra: Vec<&str> = [length.as_str()]
                .into_iter()
                .chain(connection.iter().copied())
                .collect();
            stream.push_str(&with_line_ending(
                &lab,
                "POST",
                &format!("/echo/{n}"),
                &extra,
                eol,
            ));
            stream.push_str(body);
        }
        for at in [1, 20, stream.len() / 3, stream.len() / 2, stream.len() - 3] {
            let before = lab.forwarded();
            let mut agent = Agent::connect(&lab.broker);
            agent.send_all(&[&stream.as_bytes()[..at], &stream.as_bytes()[at..]]);
            let raw = agent.read_to_close();
            lab.assert_clean(&raw);
            let found = answers(&raw);
            assert_eq!(
                found.len(),
                3,
                "{what}, split at {at}: {}",
                String::from_utf8_lossy(&raw)
            );
            for (n, answer) in found.iter().enumerate() {
                assert_eq!(
                    answer.status,
                    200,
                    "{what}, split at {at}: {}",
                    answer.text()
                );
                assert_eq!(answer.json()["path"], format!("/echo/{n}"), "{what}");
            }
            assert_eq!(lab.forwarded(), before + 3, "{what}, split at {at}");
        }
    }
    let bodies: Vec<Vec<u8>> = lab
        .peer
        .server
        .requests()
        .snapshot()
        .iter()
        .map(|r| r.body.clone())
        .collect();
    assert!(
        bodies
            .iter()
            .any(|b| b == b"GET /v1/proxy/https/x/ HTTP/1.1\r\n\r\n"),
        "{bodies:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Finding 7: a malformed later request gets Mint's JSON error and an audit record
// ---------------------------------------------------------------------------------------------

/// A valid request (served, or refused by Mint with a body left unread) followed on the same
/// connection by a head hyper cannot parse: the second answer is Mint's JSON error with
/// `Mint-Request-Id`, audited with the finer reason, never hyper's bare one; nothing of it is
/// forwarded.
#[test]
fn issue_22_a_malformed_later_request_gets_a_json_error_and_an_audit_record() {
    let lab = Lab::start();
    let long_target = format!("GET /{} HTTP/1.1\r\nHost: mint\r\n\r\n", "a".repeat(70_000));
    let many_headers: String = (0..120).map(|n| format!("X-Pad-{n}: {n}\r\n")).collect();
    let big_head = format!("GET / HTTP/1.1\r\nHost: mint\r\n{many_headers}\r\n");
    let malformed: [(&str, String, u16, &str); 5] = [
        (
            "space in the target",
            "GET /a b HTTP/1.1\r\nHost: mint\r\n\r\n".to_owned(),
            400,
            "malformed_http",
        ),
        (
            "invalid header line",
            "GET / HTTP/1.1\r\nno colon here\r\n\r\n".to_owned(),
            400,
            "malformed_http",
        ),
        (
            "differing Content-Length",
            "POST / HTTP/1.1\nContent-Length: 3\nContent-Length: 4\n\nabcd".to_owned(),
            400,
            "malformed_http",
        ),
        ("target too long", long_target, 414, "uri_too_long"),
        ("too many header lines", big_head, 431, "header_too_large"),
    ];
    for (what, bad, status, reason) in &malformed {
        for first in [
            lab.head("GET", "/echo/first", &[], "\r\n"),
            lab.head("GET", "/echo/first", &[], "\n"),
            // Refused by Mint (no capability), with a body it never reads.
            "POST /v1/proxy/https/127.0.0.1:1/x HTTP/1.1\r\nHost: mint\r\nContent-Length: 3\r\n\r\nabc"
                .to_owned(),
        ] {
            for together in [true, false] {
            let what = format!("{what}, {}", if together { "in one packet" } else { "in two packets" });
            let served = first.contains("/echo/first");
            let before = lab.forwarded();
            let mut agent = Agent::connect(&lab.broker);
            if together {
                agent.send(format!("{first}{bad}").as_bytes());
            } else {
                agent.send_all(&[first.as_bytes(), bad.as_bytes()]);
            }
            let raw = agent.read_to_close();
            lab.assert_clean(&raw);
            let text = String::from_utf8_lossy(&raw);
            let found = answers(&raw);
            assert_eq!(found.len(), 2, "{what}: {text}");
            if served {
                assert_eq!(found[0].status, 200, "{what}: {text}");
            } else {
                assert_mint_error(&found[0], 401, "capability_invalid", "denied");
            }
            let id = assert_mint_error(&found[1], *status, "invalid_request", "invalid");
            assert_refused_audit(&lab.broker, &id, *status, reason);
            assert_eq!(lab.forwarded(), before + usize::from(served), "{what}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Finding 9: an undecodable compressed answer
// ---------------------------------------------------------------------------------------------

/// Text that does not compress much (so that its gzip form spans several of Mint's 4 KiB decode
/// steps), with `secret` in its first line.
fn noisy_text(secret: &str, lines: usize) -> Vec<u8> {
    let mut text = format!("authorization={secret}\n").into_bytes();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..lines {
        for _ in 0..48 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            text.push(b"abcdefghijklmnopqrstuvwxyz0123456789"[(x % 36) as usize]);
        }
        text.push(b'\n');
    }
    text
}

/// A gzip answer with trailing garbage after the gzip stream, one that is garbage from its first
/// byte, and two that turn to garbage after 5 KiB and 20 KiB of valid compressed data. The first
/// two fail before any decoded byte exists: the agent gets Mint's JSON `502 upstream_unknown`
/// and the outcome record says `unknown` with status 502. The last two fail after decoded bytes
/// were handed on: the agent gets the `200` head and a truncated body (no last chunk), and the
/// record says `unknown`, status 200, reason `undecodable_answer`, with the bytes sent. (Before
/// the fix the first two sent the agent nothing at all while the record said status 200; and an
/// answer failing right after its first decoded piece lost its head too, unless hyper was given
/// a turn to write it out before the error.)
#[test]
fn issue_22_an_undecodable_compressed_answer_is_recorded_as_the_agent_got_it() {
    let upstream = ScriptedUpstream::start(Box::new(|request, _| {
        let text = String::from_utf8_lossy(request).into_owned();
        let secret = request_header(request, "authorization")
            .and_then(|value| value.strip_prefix("Bearer ").map(str::to_owned))
            .unwrap_or_default();
        let body = if text.starts_with("GET /trailing") {
            let mut body = gzip(format!("{{\"authorization\":\"{secret}\"}}").as_bytes());
            body.extend_from_slice(b"TRAILING GARBAGE");
            body
        } else if text.starts_with("GET /garbage") {
            format!("this is not gzip at all {secret}").into_bytes()
        } else {
            // `/soon`: the second 4 KiB decode step fails; `/later`: the sixth.
            let keep = if text.starts_with("GET /soon") { 5 } else { 20 };
            let mut body = gzip(&noisy_text(&secret, 4000));
            body.truncate(keep * 1024);
            body.extend_from_slice(&[0xff; 64]);
            body
        };
        let mut answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        answer.extend_from_slice(&body);
        answer
    }));
    let port = upstream.port();
    let config = LabConfig {
        secrets: &[("echo", CANARY)],
        ..LabConfig::default()
    };
    let lab = lab::Lab::start(config, |_| {
        lab::allow("gz", "echo", port, "GET", "      scheme: [http]\n")
    });
    let (broker, cap) = (&lab.broker, &lab.cap);
    let ask = |path: &str| {
        let mut agent = Agent::connect(broker);
        agent.send(
            format!(
                "GET /v1/proxy/http/127.0.0.1:{port}{path} HTTP/1.1\r\nHost: mint\r\nMint-Capability: {cap}\r\nAuthorization: Bearer {{{{mint:echo}}}}\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        );
        agent.read_to_close()
    };

    for path in ["/trailing", "/garbage"] {
        let raw = ask(path);
        broker.assert_clean(&raw, &[CANARY, cap.as_str()]);
        let found = answers(&raw);
        assert_eq!(found.len(), 1, "{path}: {}", String::from_utf8_lossy(&raw));
        let id = assert_mint_error(&found[0], 502, "upstream_unknown", "unknown");
        let outcome = broker.outcome_of(&id);
        assert_eq!(outcome["outcome"], "unknown", "{outcome}");
        assert_eq!(outcome["status"], 502, "{outcome}");
        assert_eq!(broker.decision_of(&id)["decision"], "allow");
    }

    for path in ["/soon", "/later"] {
        let raw = ask(path);
        broker.assert_clean(&raw, &[CANARY, cap.as_str()]);
        let found = answers(&raw);
        assert_eq!(found.len(), 1, "{path}: nothing came");
        let answer = &found[0];
        assert_eq!(answer.status, 200, "{path}");
        assert!(answer.header("content-encoding").is_none(), "{answer:?}");
        assert!(
            !answer.complete,
            "{path}: a cut answer must not look complete"
        );
        assert!(
            answer.text().starts_with("authorization=[mint:redacted]\n"),
            "{}",
            &answer.text()[..answer.text().len().min(200)]
        );
        let id = answer.header("mint-request-id").unwrap();
        let outcome = broker.outcome_of(id);
        assert_eq!(outcome["outcome"], "unknown", "{outcome}");
        assert_eq!(outcome["status"], 200, "{outcome}");
        assert_eq!(outcome["reason"], "undecodable_answer", "{outcome}");
        let sent = outcome["bytes_down"].as_u64().unwrap();
        assert!(sent > 0, "{outcome}");
        assert!(
            answer.body.len() as u64 <= sent,
            "{outcome}: got {}",
            answer.body.len()
        );
    }
    assert_eq!(upstream.requests().len(), 4);
}
