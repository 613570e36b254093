//! HTTPS interception (issue 15) with more unmodified clients, each configured only by the
//! variables it reads for a proxy and a CA: Node's undici (`EnvHttpProxyAgent`, `HTTPS_PROXY`,
//! `NODE_EXTRA_CA_CERTS`) and git (`HTTPS_PROXY`, `GIT_SSL_CAINFO`, the credential as an
//! `http.extraHeader` placeholder), and Python's `ssl` with `VERIFY_X509_STRICT`, shown to refuse a
//! leaf without an Authority Key Identifier (so that its acceptance of Mint's leaves in
//! interception.rs means something). The MCP Python SDK through an intercepted tunnel is in
//! proxy_mcp.rs, with the rest of its harness.
//!
//! The clients come from `.ci/run`: node and `npm ci --prefix tests/node` (undici, pinned in
//! tests/node/package-lock.json), git, and the venv at `.venv`. A missing one fails the test.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::path::{Path, PathBuf};

use mint_tests::interception::{CANARY, HOST, Setup, client_command, everything};
use mint_tests::repo_root;

/// `path`, which `.ci/run` installs; fails the test with the step to run when it is missing.
#[track_caller]
fn installed(path: PathBuf, step: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: run the {step} step of .ci/run",
        path.display()
    );
    path
}

/// Runs `tests/node/https_interception_client.mjs URL` with only `vars`; returns its JSON
/// (`null` when it failed) and everything it printed.
#[track_caller]
fn node_client(url: &str, vars: &[(&str, &str)]) -> (serde_json::Value, String) {
    let node = repo_root().join("tests/node");
    installed(node.join("node_modules/undici/package.json"), "setup_mcp_clients");
    let output = client_command("node", vars)
        .arg(node.join("https_interception_client.mjs"))
        .arg(url)
        .output()
        .unwrap();
    let json = if output.status.success() {
        serde_json::from_slice(&output.stdout).unwrap()
    } else {
        serde_json::Value::Null
    };
    (json, everything(&output))
}

#[test]
fn issue_15_node_undici_env_http_proxy_agent_configured_by_its_environment_alone() {
    let setup = Setup::start();
    let ca = setup.ca();
    let proxy = setup.proxy();
    let url = setup.url("/echo?client=undici");

    // Without NODE_EXTRA_CA_CERTS Node trusts its own roots only: it refuses Mint's leaf and
    // sends nothing.
    let (json, printed) = node_client(&url, &[("HTTPS_PROXY", &proxy)]);
    assert!(json.is_null(), "{printed}");
    assert!(printed.contains("SELF_SIGNED_CERT_IN_CHAIN"), "{printed}");
    setup.wait_for_reason("tls_handshake_failed");
    assert!(setup.peer.server.requests().is_empty());
    setup.assert_no_canary(&printed);

    // With it, the same client goes through.
    let (json, printed) = node_client(
        &url,
        &[
            ("HTTPS_PROXY", &proxy),
            ("NODE_EXTRA_CA_CERTS", ca.to_str().unwrap()),
        ],
    );
    assert_eq!(json["status"], 200, "{printed}");
    let body: serde_json::Value = serde_json::from_str(json["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["path"], "/echo", "{body}");
    assert!(
        body["headers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|pair| pair[0] == "authorization" && pair[1] == "Bearer [mint:redacted]"),
        "{body}"
    );
    let upstream = setup.peer.server.requests();
    assert_eq!(upstream.len(), 1);
    let seen = upstream.last().unwrap();
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {CANARY}").as_str())
    );
    assert!(seen.header_names_starting_with("proxy-").is_empty());
    assert!(!seen.contains(&setup.cap));
    let id = json["headers"]["mint-request-id"].as_str().unwrap();
    let decision = setup.broker.decision_of(id);
    assert_eq!(decision["decision"], "allow", "{decision}");
    assert_eq!(decision["agent"], "mino", "{decision}");
    assert_eq!(decision["host"], HOST, "{decision}");
    assert_eq!(setup.broker.outcome_of(id)["outcome"], "completed");
    assert_eq!(setup.records_with_reason("tunnel_opened").len(), 2);
    setup.assert_no_canary(&printed);
}
