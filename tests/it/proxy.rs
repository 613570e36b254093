//! The credentialed proxy end to end: the real `mint serve`, a real HTTPS upstream (the echo
//! server with its own CA), curl as the client. A canary secret in every test: it must reach the
//! upstream and never the client, the audit log or Mint's stderr.

#![allow(clippy::unwrap_used, reason = "tests")]

use mint_tests::broker::{Broker, MintHome, curl};
use mint_tests::echo_peer;
use mint_tests::echo_upstream::EchoConfig;

const CANARY: &str = "canary-Zq8xV3kP2mW9tR5yN7bL4jH6";

fn policy(port_rules: &str) -> String {
    format!("version: 1\ndefault: deny\nrules:\n{port_rules}")
}

const ALIASES: &str =
    "aliases:\n  - name: echo\n    hosts: [127.0.0.1]\n    source: file:$SECRETS/echo\n";

fn allow_echo(port: u16) -> String {
    format!(
        "  - id: echo-all\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET, POST]\n"
    )
}

fn assert_no_canary(broker: &Broker, seen: &str) {
    assert!(!seen.contains(CANARY), "the client saw the secret: {seen}");
    assert!(
        !broker.audit_text().contains(CANARY),
        "the audit log holds the secret"
    );
    assert!(
        !broker.stderr().contains(CANARY),
        "Mint's stderr holds the secret"
    );
}

#[test]
fn allowed_request_gets_the_secret_upstream_and_redacted_back() {
    let home_dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(home_dir.path(), EchoConfig::default());
    let port = peer.server.port();
    let home = MintHome::new(&policy(&allow_echo(port)), ALIASES, &[("echo", CANARY)]);
    let cap = home.issue_capability("mino", &[]);
    let broker = home.serve(&peer.ca_file, &[]);

    let response = curl(&[
        "-H",
        &format!("Mint-Capability: {cap}"),
        "-H",
        "Authorization: Bearer {{mint:echo}}",
        &broker.proxy_url(port, "/echo?x=1"),
    ]);
    assert_eq!(response.status, 200, "{}", response.body);
    let upstream = peer.server.requests().last().unwrap();
    assert_eq!(
        upstream.header("authorization"),
        Some(format!("Bearer {CANARY}").as_str())
    );
    assert!(upstream.header("mint-capability").is_none());
    assert!(
        response.body.contains("[mint:redacted]"),
        "{}",
        response.body
    );
    let id = response.header("mint-request-id").unwrap().to_owned();
    let outcome = broker.outcome_of(&id);
    assert_eq!(outcome["outcome"], "completed");
    assert_eq!(outcome["status"], 200);
    assert_no_canary(&broker, &response.everything());
}
