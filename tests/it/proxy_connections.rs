//! The agent's connections themselves: idle ones are closed without a word, a connection that
//! never sends a byte cannot be held forever, and an answer body that looks like an HTTP status
//! line is passed through untouched (only hyper's own error answers are replaced by Mint's).

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use mint_tests::broker::ScriptedUpstream;
use mint_tests::lab::{self, Lab, LabConfig};

const CANARY: &str = "canary-conn-Vb6Qw2Ze8Lp4Kx9";

/// Reads until the broker closes the connection (a 20 s hang guard, not a timing assertion).
fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return answer,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(error) => panic!("the broker kept the connection open: {error}"),
        }
    }
}

#[test]
fn a_silent_connection_is_closed_without_an_answer_or_an_audit_record() {
    let config = LabConfig {
        aliases: "aliases: []\n",
        serve_args: &["--header-read-timeout", "1s"],
        ..LabConfig::default()
    };
    let lab = Lab::start(config, |_| String::new());
    let broker = &lab.broker;
    let mut silent = TcpStream::connect(broker.addr()).unwrap();
    assert!(read_until_closed(&mut silent).is_empty());
    // A keep-alive connection that goes quiet after an answer is closed the same way.
    let mut kept = TcpStream::connect(broker.addr()).unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: mint\r\n\r\n")
        .unwrap();
    let answer = String::from_utf8(read_until_closed(&mut kept)).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert_eq!(answer.matches("HTTP/1.1").count(), 1, "{answer}");
    assert!(broker.audit_text().is_empty(), "{}", broker.audit_text());
}

#[test]
fn an_answer_body_that_looks_like_a_status_line_is_passed_through() {
    // The upstream's body starts like an HTTP error head: an agent speaking HTTP/1.0 gets the
    // body raw (no chunking), and it must arrive as the upstream sent it.
    let upstream = ScriptedUpstream::start(Box::new(|_, _| {
        let body = "HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n";
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }));
    let port = upstream.port();
    let config = LabConfig {
        secrets: &[("echo", CANARY)],
        ..LabConfig::default()
    };
    let lab = Lab::start(config, |_| {
        lab::allow("plain", "echo", port, "GET", "      scheme: [http]\n")
    });
    let (broker, cap) = (&lab.broker, &lab.cap);
    let mut stream = TcpStream::connect(broker.addr()).unwrap();
    let request = format!(
        "GET /v1/proxy/http/127.0.0.1:{port}/x HTTP/1.0\r\nHost: mint\r\nMint-Capability: {cap}\r\nAuthorization: Bearer {{{{mint:echo}}}}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    let answer = String::from_utf8(read_until_closed(&mut stream)).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.0 200 OK") || head.starts_with("HTTP/1.1 200 OK"),
        "{head}"
    );
    assert_eq!(body, "HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n");
    // One request, one decision and one outcome: no refusal was made up for the body. (The
    // outcome reaches the log with the next record or within the flusher's tick: wait for it.)
    let id = broker.audit_records()[0]["id"].as_str().unwrap().to_owned();
    broker.outcome_of(&id);
    let records = broker.audit_records();
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(!broker.audit_text().contains("malformed_http"));
    lab.assert_clean(&answer);
}

#[test]
fn an_answer_that_streams_longer_than_the_head_deadline_arrives_whole() {
    // The head deadline is for the agent's request heads; an answer streaming for longer (an
    // SSE stream: four events 800 ms apart against a 1 s head deadline) must not be cut.
    let config = LabConfig {
        secrets: &[("echo", CANARY)],
        serve_args: &["--header-read-timeout", "1s"],
        ..LabConfig::default()
    };
    let lab = Lab::start(config, |port| lab::allow("sse", "echo", port, "GET", ""));
    let (broker, cap, port) = (&lab.broker, &lab.cap, lab.port());
    let response = mint_tests::broker::curl(&[
        "-H",
        &format!("Mint-Capability: {cap}"),
        "-H",
        "Authorization: Bearer {{mint:echo}}",
        &broker.proxy_url(port, "/sse?n=4&interval_ms=800&echo=authorization"),
    ]);
    assert_eq!(response.exit, 0, "{response:?}");
    assert_eq!(response.status, 200);
    assert_eq!(
        response.body.matches("data:").count(),
        4,
        "{}",
        response.body
    );
    lab.assert_clean(response.everything());
    let id = response.header("mint-request-id").unwrap().to_owned();
    let outcome = broker.outcome_of(&id);
    assert_eq!(outcome["outcome"], "completed");
    assert!(outcome.get("reason").is_none(), "{outcome}");
}
