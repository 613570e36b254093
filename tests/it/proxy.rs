//! The credentialed proxy end to end: the real `mint serve`, a real HTTPS upstream (the echo
//! server with its own CA), curl as the client. A canary secret in every test: it must reach the
//! upstream and never the client, the audit log or Mint's stderr.

#![allow(clippy::unwrap_used, reason = "tests")]

use mint_tests::lab::{self, Lab, LabConfig};

const CANARY: &str = "canary-Zq8xV3kP2mW9tR5yN7bL4jH6";

#[test]
fn allowed_request_gets_the_secret_upstream_and_redacted_back() {
    let config = LabConfig {
        secrets: &[("echo", CANARY)],
        ..LabConfig::default()
    };
    let lab = Lab::start(config, |port| {
        lab::allow("echo-all", "echo", port, "GET, POST", "")
    });

    let response = lab.curl(&[
        "-H",
        "Authorization: Bearer {{mint:echo}}",
        &lab.echo_url("/echo?x=1"),
    ]);
    assert_eq!(response.status, 200, "{}", response.body);
    let upstream = lab.peer.server.requests().last().unwrap();
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
    let outcome = lab.broker.outcome_of(&id);
    assert_eq!(outcome["outcome"], "completed");
    assert_eq!(outcome["status"], 200);
    lab.assert_clean(response.everything());
}
