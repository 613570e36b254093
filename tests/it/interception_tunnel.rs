//! The life of an intercepted tunnel past its `200` (issue 15): how it drains at shutdown, its
//! head deadline, and what it leaves in the audit log when it closes. Uses the interception
//! set-up of `mint_tests::interception` (the real `mint serve`, a local HTTPS echo upstream
//! pinned to `api.example.test`, a canary secret) and a rustls client inside the tunnel.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use mint_tests::interception::{HOST, Setup, SetupConfig, open_tunnel, read_answer, tunnel_tls};

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
    let mut setup = Setup::start_with(SetupConfig {
        serve_args: vec!["--shutdown-grace".to_owned(), "30s".to_owned()],
        ..SetupConfig::default()
    });
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

    // Each tunnel's summary says the shutdown ended it, with what it carried.
    let closed = tunnel_closed_records(&setup, 3);
    assert!(
        closed.iter().all(|r| r["ended"] == "shutdown"),
        "{closed:?}"
    );
    let mut requests: Vec<_> = closed
        .iter()
        .map(|r| r["requests"].as_u64().unwrap())
        .collect();
    requests.sort_unstable();
    assert_eq!(requests, [0, 1, 1], "{closed:?}");

    assert_chain_verifies(&setup);
    setup.assert_no_canary(&format!("{used_head}{used_body}{head}{body}"));
}

#[test]
fn issue_15_a_head_not_finished_in_time_inside_a_tunnel_is_a_json_408_over_tls_and_audited() {
    let setup = Setup::start_with(SetupConfig {
        serve_args: vec!["--header-read-timeout".to_owned(), "1s".to_owned()],
        ..SetupConfig::default()
    });
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
    // The tunnel's summary: closed by the deadline, no request handed on.
    let closed = tunnel_closed_records(&setup, 1);
    assert_eq!(closed[0]["ended"], "timeout", "{closed:?}");
    assert_eq!(closed[0]["requests"], 0, "{closed:?}");
    assert_chain_verifies(&setup);
    setup.assert_no_canary(&format!("{head}{body}"));
}

#[test]
fn issue_15_policy_explain_answers_a_connect_as_the_broker_does() {
    let setup = Setup::start();
    let explain = |authority: &str, json: bool| {
        let mut command = setup.home.mint();
        command.args([
            "policy", "explain", "--agent", "mino", "--method", "CONNECT",
        ]);
        command.args(["--url", authority]);
        if json {
            command.arg("--json");
        }
        let output = command.output().unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        (output.status.code(), text)
    };
    // The tunnel the broker opens: explain says it would open, and how to explain what is inside.
    let open = format!("{HOST}:{}", setup.port());
    let (code, text) = explain(&open, false);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.starts_with(&format!("allow: CONNECT {open}\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!("`--method GET --url https://{open}/PATH`")),
        "{text}"
    );
    let (code, text) = explain(&open, true);
    assert_eq!(code, Some(0), "{text}");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["tunnel"], true, "{json}");
    let (_, head) = mint_tests::interception::connect_raw(&setup, &open);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    // A host no rule or alias names: explain and the broker both answer 403 no_allow_rule.
    let closed = format!("unnamed.example.test:{}", setup.port());
    let (code, text) = explain(&closed, true);
    assert_eq!(code, Some(1), "{text}");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["status"], 403, "{json}");
    assert_eq!(json["code"], "policy_denied", "{json}");
    assert_eq!(json["reason"], "no_allow_rule", "{json}");
    let (_, head) = mint_tests::interception::connect_raw(&setup, &closed);
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let refused = setup.records_with_reason("no_allow_rule");
    assert!(
        refused.iter().any(|r| r["host"] == "unnamed.example.test"),
        "{refused:?}"
    );

    // Not authority-form: a usage error.
    let (code, text) = explain(&format!("https://{open}/"), false);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("authority-form"), "{text}");
}

/// The `tunnel_closed` records, once `count` of them are written (bounded wait).
#[track_caller]
fn tunnel_closed_records(setup: &Setup, count: usize) -> Vec<serde_json::Value> {
    wait_until("the tunnels' records", || {
        setup.records_with_reason("tunnel_closed").len() >= count
    });
    let records = setup.records_with_reason("tunnel_closed");
    assert_eq!(records.len(), count, "{records:?}");
    records
}

#[test]
fn issue_15_a_closed_tunnel_is_audited_with_its_duration_bytes_requests_and_ending() {
    let setup = Setup::start();
    let (stream, connect_head) =
        mint_tests::interception::connect_raw(&setup, &format!("{HOST}:{}", setup.port()));
    assert!(connect_head.starts_with("HTTP/1.1 200"), "{connect_head}");
    setup.wait_for_reason("tunnel_opened");
    let connect_id = setup.records_with_reason("tunnel_opened")[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut tls = tunnel_tls(stream, &setup.ca());
    let mut seen = String::new();
    let mut body_bytes = 0;
    for n in 0..2 {
        if n == 1 {
            // The tunnel lasts at least this long.
            std::thread::sleep(Duration::from_millis(150));
        }
        tls.write_all(get(&setup, "/echo").as_bytes()).unwrap();
        let (head, body) = read_answer(&mut tls);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        body_bytes += body.len();
        seen.push_str(&head);
        seen.push_str(&body);
    }
    // The client closes: TLS close_notify, then the end of its stream.
    tls.conn.send_close_notify();
    tls.flush().unwrap();
    tls.sock.shutdown(std::net::Shutdown::Write).unwrap();

    let records = tunnel_closed_records(&setup, 1);
    let closed = &records[0];
    assert_eq!(closed["id"], connect_id.as_str(), "{closed}");
    assert_eq!(closed["phase"], "outcome", "{closed}");
    assert_eq!(closed["outcome"], "completed", "{closed}");
    assert_eq!(closed["status"], 200, "{closed}");
    assert_eq!(closed["method"], "CONNECT", "{closed}");
    assert_eq!(closed["host"], HOST, "{closed}");
    assert_eq!(closed["port"], setup.port(), "{closed}");
    assert_eq!(closed["agent"], "mino", "{closed}");
    assert_eq!(closed["requests"], 2, "{closed}");
    assert_eq!(closed["ended"], "client_closed", "{closed}");
    assert!(closed["duration_ms"].as_u64().unwrap() >= 150, "{closed}");
    // TLS records each way: more than the requests' and the answers' bytes.
    assert!(closed["bytes_up"].as_u64().unwrap() > 0, "{closed}");
    let down = closed["bytes_down"].as_u64().unwrap();
    assert!(down > body_bytes as u64, "{closed} (bodies: {body_bytes})");
    // The CONNECT has its decision, its `tunnel_opened` and its `tunnel_closed` records; the
    // requests inside have their own ids.
    let mine = setup.broker.records_of(&connect_id);
    let reasons: Vec<_> = mine.iter().map(|r| r["reason"].clone()).collect();
    assert_eq!(
        reasons,
        [
            serde_json::Value::Null,
            "tunnel_opened".into(),
            "tunnel_closed".into()
        ],
        "{mine:?}"
    );
    assert_chain_verifies(&setup);
    // `mint audit tail` shows it (its own row), `--json` gives it back whole.
    let tail = setup
        .home
        .mint()
        .args(["audit", "tail", "--json"])
        .output()
        .unwrap();
    assert!(tail.status.success(), "{tail:?}");
    let text = String::from_utf8(tail.stdout).unwrap();
    let last = text
        .lines()
        .filter(|l| l.contains("tunnel_closed"))
        .collect::<Vec<_>>();
    assert_eq!(last.len(), 1, "{text}");
    let shown: serde_json::Value = serde_json::from_str(last[0]).unwrap();
    assert_eq!(&shown, closed);
    let table = setup.home.mint().args(["audit", "tail"]).output().unwrap();
    assert!(table.status.success(), "{table:?}");
    let table = String::from_utf8(table.stdout).unwrap();
    assert_eq!(table.matches("CONNECT").count(), 2, "{table}");
    setup.assert_no_canary(&seen);
}

#[test]
fn issue_15_a_connect_to_a_name_that_does_not_resolve_is_502_upstream_failed_as_on_v1_proxy() {
    use mint_tests::interception::UNRESOLVABLE;
    let setup = Setup::start();
    // `nowhere.invalid` is allowed by the rule `nowhere` and never resolves (RFC 2606).
    let authority = format!("{UNRESOLVABLE}:{}", setup.port());
    let proxied = mint_tests::broker::raw_http(
        &format!("http://{}", setup.broker.addr()),
        format!(
            "GET /v1/proxy/https/{authority}/ HTTP/1.1\r\nHost: {}\r\nMint-Capability: {}\r\nConnection: close\r\n\r\n",
            setup.broker.addr(),
            setup.cap
        )
        .as_bytes(),
    );
    assert_eq!(proxied.status, 502, "{proxied:?}");

    let (mut stream, head) = mint_tests::interception::connect_raw(&setup, &authority);
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    let rest = String::from_utf8(rest).unwrap();
    // The same answer: status, code, message, outcome header; and no tunnel: the connection
    // closes after it.
    assert!(head.starts_with("HTTP/1.1 502 "), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    assert!(head.contains("mint-outcome: failed"), "{head}");
    let error: serde_json::Value = serde_json::from_str(&rest).unwrap();
    let expected = proxied.json();
    assert_eq!(error["error"]["code"], "upstream_failed", "{error}");
    assert_eq!(error["error"]["code"], expected["error"]["code"]);
    assert_eq!(error["error"]["message"], expected["error"]["message"]);
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot resolve the upstream host"),
        "{error}"
    );
    // Audited alike: an `allow` decision, then a `failed` outcome, 502, `upstream_failed`.
    let id = error["error"]["request_id"].as_str().unwrap().to_owned();
    let proxied_id = proxied.header("mint-request-id").unwrap().to_owned();
    for (request, method) in [(&id, "CONNECT"), (&proxied_id, "GET")] {
        let outcome = setup.broker.outcome_of(request);
        let records = setup.broker.records_of(request);
        assert_eq!(records.len(), 2, "{records:?}");
        assert_eq!(records[0]["method"], method, "{records:?}");
        assert_eq!(records[0]["decision"], "allow", "{records:?}");
        assert_eq!(records[0]["host"], UNRESOLVABLE, "{records:?}");
        assert_eq!(outcome["outcome"], "failed", "{outcome}");
        assert_eq!(outcome["status"], 502, "{outcome}");
        assert_eq!(outcome["reason"], "upstream_failed", "{outcome}");
    }
    // No tunnel was opened, so none closed; nothing reached any upstream.
    assert!(setup.records_with_reason("tunnel_opened").is_empty());
    assert!(setup.records_with_reason("tunnel_closed").is_empty());
    assert!(setup.peer.server.requests().is_empty());
    assert_chain_verifies(&setup);
    setup.assert_no_canary(&format!("{head}{rest}"));
}
