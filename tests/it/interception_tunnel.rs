//! The life of an intercepted tunnel past its `200` (issue 15): how it drains at shutdown, its
//! head deadline, and what it leaves in the audit log when it closes. Uses the interception
//! set-up of `mint_tests::interception` (the real `mint serve`, a local HTTPS echo upstream
//! pinned to `api.example.test`, a canary secret) and a rustls client inside the tunnel.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use mint_tests::interception::{HOST, Setup, open_tunnel, read_answer, tunnel_tls};

/// `GET path` inside a tunnel, with the `echo` placeholder, as HTTP/1.1 bytes.
fn get(setup: &Setup, path: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: {HOST}:{}\r\nAuthorization: Bearer {{{{mint:echo}}}}\r\n\r\n",
        setup.port()
    )
}

/// Waits (bounded) until `done` holds.
#[track_caller]
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `mint audit verify` on the set-up's log passes.
#[track_caller]
fn assert_chain_verifies(setup: &Setup) {
    let verify = setup
        .home
        .mint()
        .args(["audit", "verify"])
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "mint audit verify: {}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
}

#[test]
fn issue_15_sigterm_drains_tunnels_the_request_inside_finishes_and_is_audited() {
    let mut setup = Setup::start_with(&[], &["--shutdown-grace", "30s"]);
    let ca = setup.ca();
    // A tunnel with a request in flight toward a slow upstream; one idle after a request; one
    // idle since its handshake.
    let mut busy = tunnel_tls(open_tunnel(&setup), &ca);
    let mut used = tunnel_tls(open_tunnel(&setup), &ca);
    let mut fresh = tunnel_tls(open_tunnel(&setup), &ca);
    used.write_all(get(&setup, "/echo").as_bytes()).unwrap();
    let (used_head, used_body) = read_answer(&mut used);
    assert!(used_head.starts_with("HTTP/1.1 200"), "{used_head}");
    busy.write_all(get(&setup, "/stall?ms=3000").as_bytes())
        .unwrap();
    busy.flush().unwrap();
    wait_until("the upstream has the request", || {
        setup.peer.server.requests().len() == 2
    });

    let status = setup.broker.stop();
    assert!(status.success(), "mint serve exited with {status}");

    // The request in flight got its whole answer, then the tunnel closed.
    let (head, body) = read_answer(&mut busy);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut rest = Vec::new();
    let _ = busy.read_to_end(&mut rest);
    assert!(rest.is_empty(), "more after the answer: {rest:?}");
    let id = head
        .lines()
        .find_map(|l| l.strip_prefix("mint-request-id: "))
        .unwrap_or_else(|| panic!("no Mint-Request-Id: {head}"))
        .to_owned();
    let records = setup.broker.records_of(&id);
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0]["decision"], "allow", "{records:?}");
    assert_eq!(records[1]["outcome"], "completed", "{records:?}");
    assert_eq!(records[1]["status"], 200, "{records:?}");
    assert_eq!(records[1]["path"], "/stall", "{records:?}");

    // The idle tunnels were closed, not left to the grace period (the broker exited long before
    // its end): the one that served a request with TLS close_notify, as hyper closes an idle
    // keep-alive connection; the one that never sent a byte like such a connection of the
    // listener, whose TCP connection is closed (the socket's read timeout is 20 s).
    let mut idle_rest = Vec::new();
    used.read_to_end(&mut idle_rest).unwrap();
    assert!(idle_rest.is_empty(), "{idle_rest:?}");
    match fresh.read_to_end(&mut idle_rest) {
        Ok(0) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {}
        other => panic!("the fresh tunnel was not closed: {other:?}"),
    }

    assert_chain_verifies(&setup);
    setup.assert_no_canary(&format!("{used_head}{used_body}{head}{body}"));
}

#[test]
fn issue_15_a_head_not_finished_in_time_inside_a_tunnel_is_a_json_408_over_tls_and_audited() {
    let setup = Setup::start_with(&[], &["--header-read-timeout", "1s"]);
    let mut tls = tunnel_tls(open_tunnel(&setup), &setup.ca());
    // Half a head, then nothing: the head deadline runs from its first byte.
    write!(
        tls,
        "GET /echo HTTP/1.1\r\nHost: {HOST}:{}\r\nAuthorization: Bear",
        setup.port()
    )
    .unwrap();
    tls.flush().unwrap();
    let (head, body) = read_answer(&mut tls);
    assert!(head.starts_with("HTTP/1.1 408 "), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    assert!(head.contains("mint-outcome: invalid"), "{head}");
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"]["code"], "invalid_request", "{error}");
    let id = error["error"]["request_id"].as_str().unwrap().to_owned();
    assert!(head.contains(&format!("mint-request-id: {id}")), "{head}");
    // Then the tunnel closes, with TLS close_notify.
    let mut rest = Vec::new();
    tls.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "{rest:?}");
    // Audited like the listener's 408: a deny and an `invalid` outcome with status 408.
    setup.broker.outcome_of(&id);
    let records = setup.broker.records_of(&id);
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0]["decision"], "deny", "{records:?}");
    assert_eq!(records[0]["reason"], "header_read_timeout", "{records:?}");
    assert_eq!(records[1]["outcome"], "invalid", "{records:?}");
    assert_eq!(records[1]["status"], 408, "{records:?}");
    assert!(setup.peer.server.requests().is_empty());
    assert_chain_verifies(&setup);
    setup.assert_no_canary(&format!("{head}{body}"));
}
