//! Human approval end to end: a real `mint serve` holds the requests an `approve` rule matches,
//! and a separate `mint approvals` process decides on the operator socket. curl is the agent;
//! the echo upstream records what reached it. A canary secret is asserted absent from what the
//! agent and the operator saw, the audit log and Mint's stderr.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mint_tests::approvals::{approvals, listed, text, wait_pending};
use mint_tests::broker::{CurlResponse, curl};
use mint_tests::lab::{Lab, LabConfig};
use serde_json::Value;

const CANARY: &str = "canary-approve-7Hq2Lw9Zx4";

/// An approve rule for POST to the echo upstream's `/echo/write/**` with the echo alias, and an
/// allow rule for GET anywhere on it.
fn rules(port: u16, timeout: &str, limits: &str) -> String {
    format!(
        "  - id: ask-writes\n    effect: approve\n    approval:\n      timeout: {timeout}\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [POST]\n      path: [\"/echo/write/**\"]\n{limits}  - id: reads\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n"
    )
}

fn lab(timeout: &str, limits: &str, serve_args: &[&str]) -> Lab {
    let limits = limits.to_owned();
    let timeout = timeout.to_owned();
    Lab::start(
        LabConfig {
            secrets: &[("echo", CANARY)],
            serve_args,
            ..LabConfig::default()
        },
        move |port| rules(port, &timeout, &limits),
    )
}

/// A POST with the echo alias in a header, sent by curl on a thread of its own.
fn post_in_background(lab: &Lab, path: &str) -> JoinHandle<CurlResponse> {
    let url = lab.echo_url(path);
    let cap = lab.cap_header();
    std::thread::spawn(move || {
        curl(&[
            "-g",
            "-H",
            &cap,
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            "-X",
            "POST",
            "--data",
            "{\"title\":\"hello\"}",
            &url,
        ])
    })
}

#[track_caller]
fn request_id(response: &CurlResponse) -> String {
    response.header("mint-request-id").unwrap().to_owned()
}

#[test]
fn a_held_request_is_sent_with_the_secret_once_approved_and_records_who_approved() {
    let lab = lab("60s", "", &[]);
    let agent = post_in_background(&lab, "/echo/write/issues");
    let pending = wait_pending(&lab.home, 1);
    let view = &pending[0];
    // What the operator is shown: where it goes, what it does, which secret, which rule.
    assert_eq!(view["agent"], "mino");
    assert_eq!(view["method"], "POST");
    assert_eq!(view["host"], "127.0.0.1");
    assert_eq!(view["port"], lab.port());
    assert_eq!(view["path"], "/echo/write/issues");
    assert_eq!(view["aliases"], serde_json::json!(["echo"]));
    assert_eq!(view["rules"], serde_json::json!(["ask-writes"]));
    assert!(view["seconds_left"].as_u64().unwrap() <= 60);
    // Nothing left while it waits.
    assert_eq!(lab.forwarded(), 0);
    let id = view["id"].as_str().unwrap().to_owned();
    let human = approvals(&lab.home, &["list"]);
    assert!(text(&human).contains(&id), "{}", text(&human));
    assert!(
        text(&human).contains(&format!(
            "https://127.0.0.1:{}/echo/write/issues",
            lab.port()
        )),
        "{}",
        text(&human)
    );

    let approved = approvals(&lab.home, &["approve", &id]);
    assert!(approved.status.success(), "{}", text(&approved));
    let response = agent.join().unwrap();
    assert_eq!(response.status, 200, "{}", response.body);
    assert_eq!(lab.forwarded(), 1);
    // The upstream got the secret; the agent got it scrubbed.
    let echoed = response.json();
    let authorization = echoed["headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|pair| pair[0] == "authorization")
        .map(|pair| pair[1].clone());
    assert_eq!(authorization, Some(Value::from("Bearer [mint:redacted]")));

    let rid = request_id(&response);
    let records = lab.broker.records_of(&rid);
    assert_eq!(records[0]["phase"], "decision");
    assert_eq!(records[0]["decision"], "pending");
    assert_eq!(records[0]["reason"], "approval_required");
    assert_eq!(records[0]["approval"], serde_json::json!([id]));
    assert_eq!(records[1]["decision"], "allow");
    assert_eq!(records[1]["rule"], serde_json::json!(["ask-writes"]));
    assert_eq!(records[1]["approval"], serde_json::json!([id]));
    let approver = records[1]["approver"][0].as_str().unwrap();
    assert!(approver.contains("(uid "), "{approver}");
    assert_eq!(lab.broker.outcome_of(&rid)["outcome"], "completed");
    // `mint audit tail` shows who approved.
    let tail = lab.home.mint().args(["audit", "tail"]).output().unwrap();
    assert!(
        text(&tail).contains("allow (approved by"),
        "{}",
        text(&tail)
    );
    let verify = lab.home.mint().args(["audit", "verify"]).output().unwrap();
    assert!(verify.status.success(), "{}", text(&verify));
    lab.assert_clean(format!(
        "{}{}{}",
        response.everything(),
        text(&human),
        text(&approved)
    ));
}

#[test]
fn a_denied_request_is_refused_and_nothing_is_sent() {
    let lab = lab("60s", "", &[]);
    let agent = post_in_background(&lab, "/echo/write/x");
    let id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let denied = approvals(&lab.home, &["deny", &id]);
    assert!(denied.status.success(), "{}", text(&denied));
    let response = agent.join().unwrap();
    assert_eq!(response.status, 403, "{}", response.body);
    assert_eq!(response.json()["error"]["code"], "approval_denied");
    assert_eq!(lab.forwarded(), 0);
    let rid = request_id(&response);
    let decisions: Vec<Value> = lab
        .broker
        .records_of(&rid)
        .into_iter()
        .filter(|r| r["phase"] == "decision")
        .collect();
    assert_eq!(decisions.len(), 2);
    assert_eq!(decisions[1]["decision"], "deny");
    assert_eq!(decisions[1]["reason"], "approval_denied");
    assert!(decisions[1]["approver"][0].as_str().is_some());
    assert_eq!(lab.broker.outcome_of(&rid)["outcome"], "denied");
    // Decided once: deciding again finds nothing (exit 1).
    let again = approvals(&lab.home, &["approve", &id]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert_eq!(lab.forwarded(), 0);
    lab.assert_clean(response.everything());
}

#[test]
fn no_decision_in_time_is_refused_and_a_late_approval_sends_nothing() {
    let lab = lab("1s", "", &[]);
    let started = Instant::now();
    let agent = post_in_background(&lab, "/echo/write/x");
    let response = agent.join().unwrap();
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(response.status, 403, "{}", response.body);
    assert_eq!(response.json()["error"]["code"], "approval_timeout");
    let rid = request_id(&response);
    let id = lab.broker.records_of(&rid)[0]["approval"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let late = approvals(&lab.home, &["approve", &id]);
    assert_eq!(late.status.code(), Some(1), "{}", text(&late));
    assert_eq!(lab.forwarded(), 0);
    assert_eq!(lab.broker.decision_of(&rid)["decision"], "pending");
    assert_eq!(lab.broker.records_of(&rid)[1]["reason"], "approval_timeout");
    lab.assert_clean(response.everything());
}

#[test]
fn an_agent_that_leaves_while_waiting_is_audited_and_its_approval_sends_nothing() {
    let lab = lab("60s", "", &[]);
    // A raw connection the test closes while the request waits.
    let mut stream = TcpStream::connect(lab.broker.addr()).unwrap();
    let body = "{}";
    let request = format!(
        "POST /v1/proxy/https/127.0.0.1:{}/echo/write/gone HTTP/1.1\r\nHost: mint\r\n{}\r\nAuthorization: Bearer {{{{mint:echo}}}}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        lab.port(),
        lab.cap_header(),
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    drop(stream);
    // The entry goes with the agent.
    wait_pending(&lab.home, 0);
    let late = approvals(&lab.home, &["approve", &id]);
    assert_eq!(late.status.code(), Some(1), "{}", text(&late));
    assert_eq!(lab.forwarded(), 0);
    let records = lab.broker.audit_records();
    let withdrawn = records
        .iter()
        .find(|r| r["phase"] == "decision" && r["reason"] == "approval_withdrawn")
        .unwrap_or_else(|| panic!("no approval_withdrawn record: {records:?}"));
    assert_eq!(withdrawn["decision"], "deny");
    assert_eq!(withdrawn["approval"], serde_json::json!([id]));
    lab.assert_clean("");
}

/// One raw HTTP/1.1 POST that may wait; its answer is read on a thread.
fn raw_post(addr: &str, port: u16, cap: &str, path: &str) -> JoinHandle<String> {
    let mut stream = TcpStream::connect(addr).unwrap();
    let request = format!(
        "POST /v1/proxy/https/127.0.0.1:{port}{path} HTTP/1.1\r\nHost: mint\r\nMint-Capability: {cap}\r\nAuthorization: Bearer {{{{mint:echo}}}}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    );
    stream.write_all(request.as_bytes()).unwrap();
    std::thread::spawn(move || {
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    })
}

#[test]
fn the_thirty_third_waiting_request_is_refused_at_once_and_older_ones_are_still_decided() {
    let lab = lab("60s", "", &[]);
    let addr = lab.broker.addr().to_owned();
    // Four agents with eight waiting requests each: the default bounds (32 in all, 8 each).
    // Issued before any request: the broker reads the capability file as it changes.
    let caps: Vec<String> = (0..5)
        .map(|n| lab.home.issue_capability(&format!("agent{n}"), &[]))
        .collect();
    std::thread::sleep(Duration::from_millis(1100));
    let mut waiting = Vec::new();
    for cap in &caps[..4] {
        for n in 0..8 {
            waiting.push(raw_post(
                &addr,
                lab.port(),
                cap,
                &format!("/echo/write/{n}"),
            ));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while listed(&lab.home)["pending"].as_array().map_or(0, Vec::len) < 32 {
        if Instant::now() > deadline || waiting.iter().any(JoinHandle::is_finished) {
            let done: Vec<String> = waiting
                .into_iter()
                .filter(JoinHandle::is_finished)
                .map(|t| t.join().unwrap())
                .collect();
            panic!("not all 32 wait; answered early: {done:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let pending = wait_pending(&lab.home, 32);
    // The 33rd (a fifth agent) and a ninth of one agent are refused at once.
    for cap in [&caps[4], &caps[0]] {
        let started = Instant::now();
        let answer = raw_post(&addr, lab.port(), cap, "/echo/write/extra")
            .join()
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
        assert!(answer.contains("approval_queue_full"), "{answer}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }
    assert_eq!(wait_pending(&lab.home, 32).len(), 32);
    // The oldest is decided normally.
    let oldest = pending[0]["id"].as_str().unwrap();
    let approved = approvals(&lab.home, &["approve", oldest]);
    assert!(approved.status.success(), "{}", text(&approved));
    let answers: Vec<String> = {
        // Deny the rest so every thread ends.
        for view in wait_pending(&lab.home, 31) {
            approvals(&lab.home, &["deny", view["id"].as_str().unwrap()]);
        }
        waiting.into_iter().map(|t| t.join().unwrap()).collect()
    };
    assert_eq!(
        answers
            .iter()
            .filter(|a| a.starts_with("HTTP/1.1 200"))
            .count(),
        1
    );
    assert_eq!(
        answers
            .iter()
            .filter(|a| a.starts_with("HTTP/1.1 403"))
            .count(),
        31
    );
    assert_eq!(lab.forwarded(), 1);
    lab.assert_clean(answers.concat());
}

#[test]
fn a_grant_approves_the_same_call_until_revoked_and_never_another_path() {
    let lab = lab("60s", "", &[]);
    let first = post_in_background(&lab, "/echo/write/issues");
    let id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let approved = approvals(&lab.home, &["approve", &id, "--for", "1m"]);
    assert!(approved.status.success(), "{}", text(&approved));
    let grant = text(&approved)
        .split_whitespace()
        .find(|w| w.starts_with("gr-"))
        .unwrap()
        .to_owned();
    assert_eq!(first.join().unwrap().status, 200);
    // The same call again: through without asking, the grant named.
    let again = post_in_background(&lab, "/echo/write/issues")
        .join()
        .unwrap();
    assert_eq!(again.status, 200, "{}", again.body);
    let decision = lab.broker.decision_of(&request_id(&again));
    assert_eq!(decision["decision"], "allow");
    assert_eq!(decision["approval"], serde_json::json!([grant]));
    let listed = listed(&lab.home);
    assert_eq!(listed["grants"][0]["id"], grant);
    assert_eq!(listed["grants"][0]["used"], 1);
    // Another path is asked about.
    let other = post_in_background(&lab, "/echo/write/other");
    let other_id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    approvals(&lab.home, &["deny", &other_id]);
    assert_eq!(other.join().unwrap().status, 403);
    // Revoked: asked again.
    let revoked = approvals(&lab.home, &["revoke", &grant]);
    assert!(revoked.status.success(), "{}", text(&revoked));
    let third = post_in_background(&lab, "/echo/write/issues");
    let third_id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    approvals(&lab.home, &["deny", &third_id]);
    assert_eq!(third.join().unwrap().status, 403);
    assert_eq!(lab.forwarded(), 2);
    // A grant longer than 8 h is refused by the CLI.
    let long = approvals(&lab.home, &["approve", "ap-aaaaaaaa", "--for", "9h"]);
    assert_eq!(long.status.code(), Some(2), "{}", text(&long));
    lab.assert_clean(text(&approved));
}

#[test]
fn limits_are_consumed_only_by_approved_requests_that_are_sent() {
    let lab = lab("60s", "    limits:\n      - { max: 1, per: 1h }\n", &[]);
    // Denied: does not count.
    let denied = post_in_background(&lab, "/echo/write/1");
    let id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    approvals(&lab.home, &["deny", &id]);
    assert_eq!(denied.join().unwrap().status, 403);
    // Timed-out requests do not count either: see the timeout test; approved: counts.
    let approved = post_in_background(&lab, "/echo/write/2");
    let id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    approvals(&lab.home, &["approve", &id]);
    assert_eq!(approved.join().unwrap().status, 200);
    // The limit (1 per hour) is used up now: approved, then refused by the limit, unsent.
    let limited = post_in_background(&lab, "/echo/write/3");
    let id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    approvals(&lab.home, &["approve", &id]);
    let limited = limited.join().unwrap();
    assert_eq!(limited.status, 429, "{}", limited.body);
    let decision = lab.broker.records_of(&request_id(&limited))[1].clone();
    assert_eq!(decision["decision"], "limited");
    assert_eq!(decision["approval"], serde_json::json!([id]));
    assert_eq!(lab.forwarded(), 1);
}

#[test]
fn shutting_down_answers_a_waiting_request_503_and_sends_nothing() {
    let mut lab = lab("60s", "", &[]);
    let agent = post_in_background(&lab, "/echo/write/x");
    wait_pending(&lab.home, 1);
    let started = Instant::now();
    let status = lab.broker.stop();
    assert!(status.success(), "{status:?}");
    let response = agent.join().unwrap();
    assert_eq!(response.status, 503, "{}", response.body);
    assert_eq!(response.json()["error"]["code"], "shutting_down");
    // Answered at the start of the shutdown, not at the end of a 60 s wait.
    assert!(started.elapsed() < Duration::from_secs(15));
    assert_eq!(lab.forwarded(), 0);
    let rid = request_id(&response);
    assert_eq!(lab.broker.records_of(&rid)[1]["reason"], "shutting_down");
    // The socket is gone with the broker.
    assert!(!lab.home.path().join("approvals.sock").exists());
    lab.assert_clean(response.everything());
}

#[test]
fn the_proxy_port_takes_no_decision() {
    let lab = lab("60s", "", &[]);
    let agent = post_in_background(&lab, "/echo/write/x");
    let id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let base = lab.broker.base.clone();
    // Whatever an agent (with its capability) sends to the proxy port, nothing is decided.
    let forged = [
        format!("{base}/v1/approvals/{id}/approve"),
        format!("{base}/approvals/approve?id={id}"),
        format!("{base}/v1/proxy/unix/approvals.sock/approve"),
    ];
    for url in &forged {
        let response = lab.curl(&[
            "-X",
            "POST",
            "--data",
            &format!("{{\"op\":\"approve\",\"id\":\"{id}\"}}"),
            url,
        ]);
        assert!(response.status >= 400, "{url}: {}", response.status);
    }
    assert_eq!(wait_pending(&lab.home, 1)[0]["id"], id.as_str());
    approvals(&lab.home, &["deny", &id]);
    assert_eq!(agent.join().unwrap().status, 403);
    assert_eq!(lab.forwarded(), 0);
}

#[test]
fn the_socket_refuses_a_process_of_another_user() {
    if !rustix_is_root() {
        eprintln!("skipped: needs root to run a client as another user (CI runs as root)");
        return;
    }
    let lab = lab("60s", "", &[]);
    let agent = post_in_background(&lab, "/echo/write/x");
    let id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Open the way on purpose (as a careless operator might): only the peer check is left.
    use std::os::unix::fs::PermissionsExt as _;
    let socket = lab.home.path().join("approvals.sock");
    std::fs::set_permissions(lab.home.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    // The broker answers a foreign peer before reading anything from it.
    let script = format!(
        "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect({:?})\nsys.stdout.write(s.makefile().readline())\ntry:\n    s.sendall(b'{{\"op\":\"approve\",\"id\":\"{id}\"}}\\n')\nexcept OSError:\n    pass\n",
        socket.to_str().unwrap()
    );
    let output = std::process::Command::new("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    let said = text(&output);
    assert!(said.contains("\"ok\":false"), "{said}");
    assert!(said.contains("serves only the user"), "{said}");
    std::fs::set_permissions(lab.home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    // Still waiting, undecided.
    assert_eq!(wait_pending(&lab.home, 1)[0]["id"], id.as_str());
    assert!(
        lab.broker
            .stderr()
            .contains("refused a process of another user")
    );
    approvals(&lab.home, &["deny", &id]);
    assert_eq!(agent.join().unwrap().status, 403);
    assert_eq!(lab.forwarded(), 0);
}

fn rustix_is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

#[test]
fn without_a_broker_the_commands_say_so() {
    let home =
        mint_tests::broker::MintHome::new(&mint_tests::lab::policy(""), "aliases: []\n", &[]);
    let output = home.mint().args(["approvals", "list"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output).contains("no `mint serve` is listening"),
        "{}",
        text(&output)
    );
}

#[test]
fn the_webhook_is_told_of_each_waiting_request_without_secrets_and_decides_nothing() {
    let hook_path = "/echo/hook/canary-hookpath-4Rt8";
    let mut lab = Lab::start(
        LabConfig {
            secrets: &[("echo", CANARY)],
            echo: mint_tests::echo_upstream::EchoConfig {
                extra_names: vec!["hooks.example.test".to_owned()],
                ..Default::default()
            },
            ..LabConfig::default()
        },
        |port| rules(port, "60s", ""),
    );
    // The webhook's URL names the echo upstream by a host name pinned to loopback.
    let port = lab.port();
    lab.broker.stop();
    let url = format!("https://hooks.example.test:{port}{hook_path}");
    let pin = format!("hooks.example.test:{port}:127.0.0.1");
    lab.broker = lab.home.serve(
        &lab.peer.ca_file,
        &["--approval-webhook", &url, "--resolve", &pin],
    );
    let agent = post_in_background(&lab, "/echo/write/x?state=open");
    let id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(15);
    let hook = loop {
        let seen = lab.peer.server.requests().snapshot();
        if let Some(hook) = seen.into_iter().find(|r| r.path.starts_with("/echo/hook/")) {
            break hook;
        }
        assert!(Instant::now() < deadline, "the webhook was not called");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(hook.method, "POST");
    let body: Value = serde_json::from_slice(&hook.body).unwrap();
    assert_eq!(body["approval"]["id"], id.as_str());
    assert_eq!(body["approval"]["query_keys"], serde_json::json!(["state"]));
    let said = body["text"].as_str().unwrap();
    assert!(
        said.contains(&format!(
            "mino wants POST https://127.0.0.1:{port}/echo/write/x"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!("mint approvals approve {id}")),
        "{said}"
    );
    // Still waiting: the webhook answered 200, which decides nothing.
    assert_eq!(wait_pending(&lab.home, 1)[0]["id"], id.as_str());
    approvals(&lab.home, &["deny", &id]);
    assert_eq!(agent.join().unwrap().status, 403);
    assert_eq!(
        lab.forwarded_paths()
            .iter()
            .filter(|p| p.starts_with("/echo/write"))
            .count(),
        0
    );
    // The webhook URL's path (often its secret) is never logged; the host is.
    let stderr = lab.broker.stderr();
    assert!(!stderr.contains("canary-hookpath"), "{stderr}");
    assert!(stderr.contains("hooks.example.test"), "{stderr}");
    lab.assert_clean(String::from_utf8_lossy(&hook.body).into_owned());
}

#[test]
fn a_webhook_that_cannot_be_reached_holds_the_request_all_the_same() {
    let mut lab = lab("60s", "", &[]);
    // Nothing listens on loopback port 9 (loopback itself is allowed for a webhook: a local
    // relay).
    lab.broker.stop();
    lab.broker = lab.home.serve(
        &lab.peer.ca_file,
        &["--approval-webhook", "https://localhost:9/hook"],
    );
    let agent = post_in_background(&lab, "/echo/write/x");
    let id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !lab.broker.stderr().contains("Approval webhook not reached") {
        assert!(Instant::now() < deadline, "{}", lab.broker.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(wait_pending(&lab.home, 1)[0]["id"], id.as_str());
    approvals(&lab.home, &["approve", &id]);
    assert_eq!(agent.join().unwrap().status, 200);
    // A plain-http webhook is refused at start.
    lab.broker.stop();
    let refused = lab
        .home
        .mint()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--approval-webhook",
            "http://hooks.example.test/x",
        ])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        text(&refused).contains("must be an https:// URL"),
        "{}",
        text(&refused)
    );
}

#[test]
fn a_socket_left_by_a_killed_broker_is_replaced_and_a_file_in_its_way_is_not() {
    let mut lab = lab("30s", "", &[]);
    let socket = lab.home.path().join("approvals.sock");
    // SIGKILL: no chance to remove the socket file.
    let pid = lab.broker.pid().unwrap();
    assert!(
        std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    // Reaped (the test owns the process): it died of the SIGKILL.
    let status = lab.broker.stop();
    assert!(!status.success(), "{status:?}");
    assert!(socket.exists());
    lab.broker = lab.home.serve(&lab.peer.ca_file, &[]);
    let agent = post_in_background(&lab, "/echo/write/x");
    let id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    approvals(&lab.home, &["approve", &id]);
    assert_eq!(agent.join().unwrap().status, 200);
    // Something that is not a socket where the socket goes: refused at start, left untouched.
    lab.broker.stop();
    std::fs::write(&socket, "not a socket").unwrap();
    let refused = lab
        .home
        .mint()
        .args(["serve", "--listen", "127.0.0.1:0", "--upstream-ca"])
        .arg(&lab.peer.ca_file)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("is not a socket"),
        "{}",
        text(&refused)
    );
    assert_eq!(std::fs::read_to_string(&socket).unwrap(), "not a socket");
}

#[test]
fn a_grant_ends_when_its_time_is_up() {
    let lab = lab("60s", "", &[]);
    let first = post_in_background(&lab, "/echo/write/issues");
    let id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let approved = approvals(&lab.home, &["approve", &id, "--for", "1s"]);
    assert!(approved.status.success(), "{}", text(&approved));
    assert_eq!(first.join().unwrap().status, 200);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(listed(&lab.home)["grants"].as_array().unwrap().is_empty());
    let again = post_in_background(&lab, "/echo/write/issues");
    let id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    approvals(&lab.home, &["deny", &id]);
    assert_eq!(again.join().unwrap().status, 403);
    assert_eq!(lab.forwarded(), 1);
}

#[test]
fn a_timed_out_request_consumes_no_limit() {
    // One limit over both paths; a short wait on the first, a long one on the second.
    let approve = |id: &str, port: u16, path: &str, timeout: &str| {
        format!(
            "  - id: {id}\n    effect: approve\n    approval: {{ timeout: {timeout} }}\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [POST]\n      path: [\"{path}\"]\n"
        )
    };
    let lab = Lab::start(
        LabConfig {
            secrets: &[("echo", CANARY)],
            ..LabConfig::default()
        },
        |port| {
            format!(
                "{}{}  - id: one-write\n    effect: limit\n    match:\n      host: [127.0.0.1]\n      method: [POST]\n    limits:\n      - {{ max: 1, per: 1h }}\n",
                approve("quick", port, "/echo/write/1", "1s"),
                approve("patient", port, "/echo/write/2", "60s"),
            )
        },
    );
    let timed_out = post_in_background(&lab, "/echo/write/1").join().unwrap();
    assert_eq!(timed_out.json()["error"]["code"], "approval_timeout");
    let approved = post_in_background(&lab, "/echo/write/2");
    let id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    approvals(&lab.home, &["approve", &id]);
    assert_eq!(approved.join().unwrap().status, 200);
    // And that one did count: the next is refused by the limit once approved.
    let limited = post_in_background(&lab, "/echo/write/2");
    let id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    approvals(&lab.home, &["approve", &id]);
    assert_eq!(limited.join().unwrap().status, 429);
    assert_eq!(lab.forwarded(), 1);
}

/// Waits (bounded) until the broker's stderr holds `text`.
#[track_caller]
fn wait_stderr(lab: &Lab, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !lab.broker.stderr().contains(text) {
        assert!(
            Instant::now() < deadline,
            "no {text:?} in: {}",
            lab.broker.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_approval_sends_nothing_once_the_capability_is_revoked_or_a_deny_rule_added() {
    let lab = lab("60s", "", &[]);
    // Revoked while waiting: approved, then refused 401.
    let agent = post_in_background(&lab, "/echo/write/revoked");
    let id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    lab.home.revoke_capability(&lab.cap);
    std::thread::sleep(Duration::from_millis(400));
    approvals(&lab.home, &["approve", &id]);
    let response = agent.join().unwrap();
    assert_eq!(response.status, 401, "{}", response.body);
    assert_eq!(lab.forwarded(), 0);
    let records = lab.broker.records_of(&request_id(&response));
    assert_eq!(records[1]["decision"], "deny");
    assert_eq!(records[1]["reason"], "capability_invalid");
    assert_eq!(records[1]["approval"], serde_json::json!([id]));

    // A deny rule added while waiting: approved, then refused by it.
    let cap = lab.home.issue_capability("mino", &[]);
    std::thread::sleep(Duration::from_millis(400));
    let url = lab.echo_url("/echo/write/kill-switch");
    let header = format!("Mint-Capability: {cap}");
    let agent = std::thread::spawn(move || {
        curl(&[
            "-H",
            &header,
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            "--data",
            "{}",
            &url,
        ])
    });
    let id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let policy = std::fs::read_to_string(lab.home.path().join("policy.yaml")).unwrap();
    let kill_switch = "  - id: kill-switch\n    effect: deny\n    match:\n      host: [127.0.0.1]\n      path: [\"/echo/write/**\"]\n";
    lab.home
        .write_private("policy.yaml", &format!("{policy}{kill_switch}"));
    lab.broker.hangup();
    wait_stderr(&lab, "Policy and aliases reloaded");
    approvals(&lab.home, &["approve", &id]);
    let response = agent.join().unwrap();
    assert_eq!(response.status, 403, "{}", response.body);
    assert_eq!(response.json()["error"]["code"], "policy_denied");
    assert_eq!(
        response.json()["error"]["rules"],
        serde_json::json!(["kill-switch"])
    );
    assert_eq!(lab.forwarded(), 0);
    lab.assert_clean(response.everything());
}

#[test]
fn a_grant_given_without_a_secret_never_approves_a_request_with_one() {
    let lab = Lab::start(
        LabConfig {
            secrets: &[("echo", CANARY)],
            ..LabConfig::default()
        },
        |port| {
            format!(
                "  - id: ask\n    effect: approve\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [POST]\n  - id: ask-plain\n    effect: approve\n    match:\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [POST]\n"
            )
        },
    );
    // Without the alias: granted for a minute.
    let url = lab.echo_url("/echo/write/x");
    let cap = lab.cap_header();
    let plain = {
        let (url, cap) = (url.clone(), cap.clone());
        std::thread::spawn(move || curl(&["-H", &cap, "--data", "{}", &url]))
    };
    let id = wait_pending(&lab.home, 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    approvals(&lab.home, &["approve", &id, "--for", "1m"]);
    assert_eq!(plain.join().unwrap().status, 200);
    // The same call with the secret: asked about, not approved by the grant.
    let with_secret = post_in_background(&lab, "/echo/write/x");
    let view = wait_pending(&lab.home, 1)[0].clone();
    assert_eq!(view["aliases"], serde_json::json!(["echo"]));
    approvals(&lab.home, &["deny", view["id"].as_str().unwrap()]);
    assert_eq!(with_secret.join().unwrap().status, 403);
    assert_eq!(lab.forwarded(), 1);
}
