//! Hot reload of the policy and aliases under a running `mint serve`: a valid change takes effect
//! without a restart, a broken file keeps the last good policy (logged, audited, explained by
//! `mint policy check`), SIGHUP reloads, and a request in flight finishes under the policy that
//! admitted it. A canary secret throughout.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mint_tests::broker::{Broker, MintHome, curl};
use mint_tests::echo_peer;
use mint_tests::echo_upstream::EchoConfig;

const CANARY: &str = "canary-reload-7Hq2Lm9Xv4Pz8Rt3";

const ALIASES: &str =
    "aliases:\n  - name: echo\n    hosts: [127.0.0.1]\n    source: file:$SECRETS/echo\n";

fn policy(port: u16, methods: &str) -> String {
    format!(
        "version: 1\ndefault: deny\nrules:\n  - id: echo-read\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [{methods}]\n      path: [\"/echo/**\", \"/stall-body\"]\n"
    )
}

/// Replaces the policy file the way editors and deploy tools do: a new file renamed over it.
fn replace_policy(home: &MintHome, text: &str) {
    let temp = home.path().join("policy.yaml.new");
    std::fs::write(&temp, text).unwrap();
    std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&temp, home.path().join("policy.yaml")).unwrap();
}

fn get(broker: &Broker, cap: &str, port: u16, method: &str) -> u16 {
    curl(&[
        "-X",
        method,
        "-H",
        &format!("Mint-Capability: {cap}"),
        "-H",
        "Authorization: Bearer {{mint:echo}}",
        &broker.proxy_url(port, "/echo/x"),
    ])
    .status
}

/// Waits (bounded: a hang guard, not a timing assertion) until the audit log holds `n` events
/// with `reason`.
#[track_caller]
fn wait_for_events(broker: &Broker, reason: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let count = broker
            .audit_records()
            .iter()
            .filter(|r| r["phase"] == "event" && r["reason"] == reason)
            .count();
        if count >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {reason} event in the audit log"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends the broker SIGHUP and waits for its first `policy_reloaded` event.
#[track_caller]
fn reload(broker: &Broker) {
    broker.hangup();
    wait_for_events(broker, "policy_reloaded", 1);
}

fn assert_no_canary(broker: &Broker) {
    broker.assert_secret_absent(CANARY);
}

#[test]
fn a_valid_change_takes_effect_and_a_broken_one_keeps_the_last_good_policy() {
    let dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(dir.path(), EchoConfig::default());
    let port = peer.server.port();
    let home = MintHome::new(&policy(port, "GET"), ALIASES, &[("echo", CANARY)]);
    let cap = home.issue_capability("mino", &[]);
    let broker = home.serve(&peer.ca_file, &[]);

    assert_eq!(get(&broker, &cap, port, "GET"), 200);
    assert_eq!(get(&broker, &cap, port, "POST"), 403);

    // A valid change: POST is allowed from now on, without a restart.
    replace_policy(&home, &policy(port, "GET, POST"));
    wait_for_events(&broker, "policy_reloaded", 1);
    assert_eq!(get(&broker, &cap, port, "POST"), 200);

    // A broken file: the last good policy stays in force, and the failure is logged and audited.
    replace_policy(
        &home,
        "version: 1\ndefault: deny\nrules:\n  - id: broken\n    effect: allow\n    match: {host: [\"*.com\"]}\n",
    );
    wait_for_events(&broker, "policy_reload_failed", 1);
    assert_eq!(get(&broker, &cap, port, "POST"), 200);
    assert_eq!(get(&broker, &cap, port, "GET"), 200);
    assert!(
        broker.stderr().contains("Reload failed"),
        "{}",
        broker.stderr()
    );
    // `mint policy check` explains why, with the line and the code.
    let check = home.mint().args(["policy", "check"]).output().unwrap();
    assert_eq!(check.status.code(), Some(1));
    let report = String::from_utf8(check.stdout).unwrap();
    assert!(report.contains("policy.yaml:6:"), "{report}");
    assert!(report.contains("error[E"), "{report}");

    // Fixed again: reloads.
    replace_policy(&home, &policy(port, "GET"));
    wait_for_events(&broker, "policy_reloaded", 2);
    assert_eq!(get(&broker, &cap, port, "POST"), 403);
    assert_no_canary(&broker);
}

#[test]
fn sighup_reloads_and_a_request_in_flight_finishes_under_the_policy_that_admitted_it() {
    let dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(dir.path(), EchoConfig::default());
    let port = peer.server.port();
    let home = MintHome::new(&policy(port, "GET"), ALIASES, &[("echo", CANARY)]);
    let cap = home.issue_capability("mino", &[]);
    let broker = home.serve(&peer.ca_file, &[]);

    // A slow answer: the head and part of the body now, the rest after 1.5 s.
    let slow = Command::new("curl")
        .args([
            "-sS",
            "--noproxy",
            "*",
            "--max-time",
            "30",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
        ])
        .args(["-H", &format!("Mint-Capability: {cap}")])
        .args(["-H", "Authorization: Bearer {{mint:echo}}"])
        .arg(broker.proxy_url(port, "/stall-body?ms=1500"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        peer.server
            .requests()
            .wait_for_count(1, Duration::from_secs(20))
    );

    // While it is in flight, the policy changes to deny GET; SIGHUP reloads it at once.
    let mut text = policy(port, "HEAD");
    text.push_str("  - id: no-get\n    effect: deny\n    match:\n      method: [GET]\n");
    std::fs::write(home.path().join("policy.yaml"), text).unwrap();
    reload(&broker);

    // New requests are denied by the new rule...
    let denied = curl(&[
        "-H",
        &format!("Mint-Capability: {cap}"),
        &broker.proxy_url(port, "/echo/x"),
    ]);
    assert_eq!(denied.status, 403);
    assert_eq!(denied.json()["error"]["rules"][0], "no-get");
    // ...and the one admitted before finishes whole.
    let output = slow.wait_with_output().unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.ends_with("\n200"), "{text}");
    assert!(output.status.success());
    assert_no_canary(&broker);
    assert!(!text.contains(CANARY));
}

#[test]
fn a_rotated_secret_stays_scrubbed_after_the_reload() {
    use mint_tests::broker::ScriptedUpstream;

    // An upstream that remembers every Authorization it was sent and hands them all back.
    let upstream = ScriptedUpstream::remembering_authorizations();
    let port = upstream.port();
    let dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(dir.path(), EchoConfig::default());
    let policy = format!(
        "version: 1\ndefault: deny\nrules:\n  - id: remember\n    effect: allow\n    match:\n      alias: [echo]\n      scheme: [http]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n"
    );
    const OLD: &str = "canary-rotated-old-4Ws8Yq2Nf";
    const NEW: &str = "canary-rotated-new-7Hd3Kp9Lx";
    let home = MintHome::new(&policy, ALIASES, &[("echo", OLD)]);
    let cap = home.issue_capability("mino", &[]);
    let broker = home.serve(&peer.ca_file, &[]);
    let get = || {
        curl(&[
            "-H",
            &format!("Mint-Capability: {cap}"),
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            &format!("{}/v1/proxy/http/127.0.0.1:{port}/x", broker.base),
        ])
    };
    assert_eq!(get().status, 200);
    // Rotate the secret and reload: the upstream now holds both values.
    home.write_private("secrets/echo", NEW);
    reload(&broker);
    let second = get();
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(
        second.body.matches("[mint:redacted]").count(),
        2,
        "{}",
        second.body
    );
    for secret in [OLD, NEW] {
        assert!(!second.everything().contains(secret), "{}", second.body);
        assert!(!broker.audit_text().contains(secret));
        assert!(!broker.stderr().contains(secret));
    }
}

/// An answer still streaming when a reload brings a new secret is scrubbed of that secret too: a
/// request made after the reload hands the new value to the upstream, which writes it into the
/// stream that opened before. (The upstream here is raw TCP, so it can hold the first answer
/// open until the second request arrives.)
/// Reads one request head from a raw upstream connection; returns its `Authorization` value.
fn read_head(stream: &mut std::net::TcpStream) -> String {
    use std::io::{BufRead, BufReader};
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut authorization = String::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            return authorization;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("authorization")
        {
            authorization = value.trim().to_owned();
        }
    }
}

/// A request decided before a reload whose answer's head comes after it (and after a request
/// that carried the new secret to the same upstream): the head is scrubbed of the new secret
/// too, not only of the secrets in force when the request was decided.
#[test]
fn an_answer_head_arriving_after_a_reload_is_scrubbed_of_the_new_secret() {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::mpsc;

    const OLD: &str = "canary-head-old-7Qm3Rt8Ks";
    const NEW: &str = "canary-head-new-2Wd5Yh1Pz";

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (received, first_in) = mpsc::channel();
    let upstream = std::thread::spawn(move || {
        // The first request is held without an answer until the second has come.
        let (mut first, _) = listener.accept().unwrap();
        read_head(&mut first);
        received.send(()).unwrap();
        let (mut second, _) = listener.accept().unwrap();
        let carried = read_head(&mut second);
        second
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            .unwrap();
        // The first answer's head echoes what the second request carried.
        first
            .write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nX-Seen-Auth: {carried}\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                )
                .as_bytes(),
            )
            .unwrap();
        first.flush().unwrap();
        let mut rest = Vec::new();
        let _ = first.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = first.read_to_end(&mut rest);
    });

    let dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(dir.path(), EchoConfig::default());
    let policy = format!(
        "version: 1\ndefault: deny\nrules:\n  - id: held\n    effect: allow\n    match:\n      alias: [echo]\n      scheme: [http]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n"
    );
    let home = MintHome::new(&policy, ALIASES, &[("echo", OLD)]);
    let cap = home.issue_capability("mino", &[]);
    let broker = home.serve(&peer.ca_file, &[]);
    let url = |path: &str| format!("{}/v1/proxy/http/127.0.0.1:{port}{path}", broker.base);
    let (cap_header, held_url) = (format!("Mint-Capability: {cap}"), url("/held"));
    let held = std::thread::spawn(move || {
        curl(&[
            "-H",
            &cap_header,
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            &held_url,
        ])
    });
    if first_in.recv_timeout(Duration::from_secs(20)).is_err() {
        let answer = held.join().unwrap();
        panic!(
            "the first request never arrived: {} {}",
            answer.status, answer.body
        );
    }

    home.write_private("secrets/echo", NEW);
    reload(&broker);
    let second = curl(&[
        "-H",
        &format!("Mint-Capability: {cap}"),
        "-H",
        "Authorization: Bearer {{mint:echo}}",
        &url("/x"),
    ]);
    assert_eq!(second.status, 200, "{}", second.body);

    let first = held.join().unwrap();
    upstream.join().unwrap();
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(
        first.header("x-seen-auth"),
        Some("Bearer [mint:redacted]"),
        "{first:?}"
    );
    for secret in [OLD, NEW] {
        assert!(!first.everything().contains(secret), "{first:?}");
        assert!(!second.everything().contains(secret));
        assert!(!broker.audit_text().contains(secret));
        assert!(!broker.stderr().contains(secret));
    }
}

#[test]
fn an_answer_streaming_across_a_reload_is_scrubbed_of_the_new_secret() {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::mpsc;

    const OLD: &str = "canary-stream-old-3Jr8Wq5Tz";
    const NEW: &str = "canary-stream-new-9Vb2Xc6Ln";

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (opened, stream_open) = mpsc::channel();
    let upstream = std::thread::spawn(move || {
        // The stream: a head and a first event, then held open.
        let (mut first, _) = listener.accept().unwrap();
        read_head(&mut first);
        first
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            .unwrap();
        let event = b"data: first\n\n";
        first
            .write_all(format!("{:x}\r\n", event.len()).as_bytes())
            .unwrap();
        first.write_all(event).unwrap();
        first.write_all(b"\r\n").unwrap();
        first.flush().unwrap();
        opened.send(()).unwrap();
        // The request after the reload: answered at once; what it carried goes into the stream.
        let (mut second, _) = listener.accept().unwrap();
        let carried = read_head(&mut second);
        second
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            .unwrap();
        let event = format!("data: {carried}\n\n");
        first
            .write_all(format!("{:x}\r\n{event}\r\n0\r\n\r\n", event.len()).as_bytes())
            .unwrap();
        first.flush().unwrap();
        // Let Mint read to the end before the socket goes.
        let mut rest = Vec::new();
        let _ = first.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = first.read_to_end(&mut rest);
    });

    let dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(dir.path(), EchoConfig::default());
    let policy = format!(
        "version: 1\ndefault: deny\nrules:\n  - id: stream\n    effect: allow\n    match:\n      alias: [echo]\n      scheme: [http]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n"
    );
    let home = MintHome::new(&policy, ALIASES, &[("echo", OLD)]);
    let cap = home.issue_capability("mino", &[]);
    let broker = home.serve(&peer.ca_file, &[]);
    let url = |path: &str| format!("{}/v1/proxy/http/127.0.0.1:{port}{path}", broker.base);
    let (cap_header, stream_url) = (format!("Mint-Capability: {cap}"), url("/echo/stream"));
    let streaming = std::thread::spawn(move || {
        curl(&[
            "-N",
            "-H",
            &cap_header,
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            &stream_url,
        ])
    });
    if stream_open.recv_timeout(Duration::from_secs(20)).is_err() {
        let answer = streaming.join().unwrap();
        panic!("the stream did not open: {} {}", answer.status, answer.body);
    }

    home.write_private("secrets/echo", NEW);
    reload(&broker);
    let second = curl(&[
        "-H",
        &format!("Mint-Capability: {cap}"),
        "-H",
        "Authorization: Bearer {{mint:echo}}",
        &url("/echo/x"),
    ]);
    assert_eq!(second.status, 200, "{}", second.body);

    let streamed = streaming.join().unwrap();
    upstream.join().unwrap();
    assert_eq!(streamed.status, 200, "{}", streamed.body);
    assert!(streamed.body.contains("data: first"), "{}", streamed.body);
    assert!(
        streamed.body.contains("data: Bearer [mint:redacted]"),
        "{}",
        streamed.body
    );
    for secret in [OLD, NEW] {
        assert!(!streamed.everything().contains(secret), "{}", streamed.body);
        assert!(!second.everything().contains(secret));
        assert!(!broker.audit_text().contains(secret));
        assert!(!broker.stderr().contains(secret));
    }
}
