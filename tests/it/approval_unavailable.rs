//! `effect: approve` through the real `mint serve`, until approvals land: a request an approve
//! rule holds is refused with `403 approval_unavailable` (an MCP `tools/call` with a JSON-RPC
//! error), audited as a deny naming the approve rules, and nothing reaches the upstream: not the
//! request, not its secret. The approve rule's own limit is not consumed by the refusals, and a
//! `CONNECT` tunnel opens for an approve rule so that the request inside gets that answer. The
//! approvals work replaces these tests with ones that hold the request for the operator.

#![expect(clippy::unwrap_used, reason = "test code")]

use mint_tests::broker::{CurlResponse, curl_via_proxy_as};
use mint_tests::interception::{Setup, SetupConfig};
use mint_tests::lab::{self, LabConfig};
use serde_json::{Value, json};

/// The echo upstream's secret (alias `echo`): `/`, `+` and `=` make its encoded forms differ.
const CANARY: &str = "canary-Ap7rV2x/Q9w+L3k=Z5m";

/// Mint's JSON-RPC error code for a refused call.
const JSONRPC_REFUSED: i64 = -32001;

mint_tests::lab_newtype!(
    /// An echo upstream behind Mint with a policy that allows `GET` with the `echo` alias and
    /// MCP calls of `search`, holds `POST` and `PUT` (`ask-writes`, with a limit of one a day)
    /// and calls of `drop_*` tools (`ask-drop`) for approval, and denies `PUT` to `/admin`.
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
                "  - id: read\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n  - id: ask-writes\n    effect: approve\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [POST, PUT]\n      path: [/echo/write, /admin]\n    approval: {{ timeout: 30s }}\n    limits:\n      - {{ max: 1, per: 1d }}\n  - id: mcp-endpoint\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [POST]\n      path: [/echo/mcp]\n      tool: [search]\n  - id: ask-drop\n    effect: approve\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [POST]\n      path: [/echo/mcp]\n      tool: [\"drop_*\"]\n  - id: no-admin\n    effect: deny\n    match:\n      path: [/admin]\n"
            )
        }))
    }

    /// curl with the canary's placeholder in `Authorization`, plus `args` (the URL among them).
    #[track_caller]
    fn send(&self, args: &[&str]) -> CurlResponse {
        let mut all = vec!["-H", "Authorization: Bearer {{mint:echo}}"];
        all.extend_from_slice(args);
        self.curl(&all)
    }

    /// The request was refused `403 approval_unavailable` naming `rules`, audited as a deny with
    /// that reason and those rules (and `mcp_tool` when given), with a `denied` outcome; the
    /// upstream got nothing more, and no secret is anywhere.
    #[track_caller]
    fn assert_unavailable(&self, response: &CurlResponse, before: usize, rules: &[&str]) -> Value {
        assert_eq!(response.status, 403, "{}", response.body);
        assert_eq!(response.header("mint-outcome"), Some("denied"));
        assert_eq!(
            self.forwarded(),
            before,
            "an approve rule's request was sent"
        );
        let id = response.header("mint-request-id").unwrap();
        let decision = self.broker.decision_of(id);
        assert_eq!(decision["decision"], "deny", "{decision}");
        assert_eq!(decision["reason"], "approval_unavailable", "{decision}");
        assert_eq!(decision["rule"], json!(rules), "{decision}");
        assert_eq!(decision["aliases"], json!(["echo"]), "{decision}");
        let outcome = self.broker.outcome_of(id);
        assert_eq!(outcome["outcome"], "denied", "{outcome}");
        assert_eq!(outcome["status"], 403, "{outcome}");
        self.assert_clean(response.everything());
        decision
    }
}

#[test]
fn a_request_an_approve_rule_holds_is_refused_and_never_sent() {
    let lab = Lab::start();
    let url = lab.echo_url("/echo/write");

    // Twice: the approve rule's limit (one a day) is not consumed by a request never sent, so
    // the second refusal is the same, not `429 limited`.
    for _ in 0..2 {
        let response = lab.send(&["-X", "POST", "--data-binary", "{\"a\":1}", &url]);
        lab.assert_unavailable(&response, 0, &["ask-writes"]);
        let body = response.json();
        assert_eq!(body["error"]["code"], "approval_unavailable", "{body}");
        assert_eq!(body["error"]["rules"], json!(["ask-writes"]), "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("approval"),
            "{body}"
        );
    }

    // Deny overrides approve: a deny rule's refusal stays `policy_denied`.
    let admin = lab.send(&["-X", "PUT", &lab.echo_url("/admin")]);
    assert_eq!(admin.status, 403, "{}", admin.body);
    assert_eq!(admin.json()["error"]["code"], "policy_denied");
    assert_eq!(admin.json()["error"]["rules"], json!(["no-admin"]));
    assert_eq!(lab.forwarded(), 0);
    lab.assert_clean(admin.everything());

    // The same broker forwards what an allow rule admits, with the secret: the refusals above
    // were the approve rule's.
    let read = lab.send(&[&lab.echo_url("/echo/read")]);
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(lab.forwarded_paths(), ["/echo/read"]);
    lab.assert_clean(read.everything());
}

#[test]
fn an_mcp_call_an_approve_rule_holds_is_a_json_rpc_error_and_never_sent() {
    let lab = Lab::start();
    let url = lab.echo_url("/echo/mcp");
    let call = |tool: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
        )
    };
    let json_type = "Content-Type: application/json";

    let body = call("drop_table");
    let response = lab.send(&["-H", json_type, "--data-binary", &body, &url]);
    let decision = lab.assert_unavailable(&response, 0, &["ask-drop"]);
    assert_eq!(decision["mcp_tool"], "drop_table", "{decision}");
    let answer = response.json();
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(answer["error"]["code"], JSONRPC_REFUSED, "{answer}");
    assert_eq!(
        answer["error"]["data"]["code"], "approval_unavailable",
        "{answer}"
    );
    assert_eq!(answer["error"]["data"]["rules"], json!(["ask-drop"]));

    // A batch with an allowed call and a held one: nothing of it is sent.
    let batch = format!("[{},{}]", call("search"), call("drop_index"));
    let response = lab.send(&["-H", json_type, "--data-binary", &batch, &url]);
    lab.assert_unavailable(&response, 0, &["ask-drop"]);
    let answers = response.json();
    assert_eq!(answers.as_array().map(Vec::len), Some(2), "{answers}");

    // An allowed tool goes through: the refusals above were the approve rule's.
    let body = call("search");
    let allowed = lab.send(&["-H", json_type, "--data-binary", &body, &url]);
    assert_eq!(allowed.status, 200, "{}", allowed.body);
    assert_eq!(lab.forwarded_paths(), ["/echo/mcp"]);
    lab.assert_clean(allowed.everything());
}

/// A `CONNECT` opens its tunnel when an approve rule could match a request inside (the tunnel's
/// record names it), and the request inside is refused as on `/v1/proxy/`: nothing is sent.
#[test]
fn a_tunnel_opens_for_an_approve_rule_and_the_request_inside_is_refused() {
    let setup = Setup::start_with(SetupConfig {
        rules: "  - id: ask-other\n    effect: approve\n    match:\n      host: [other.example.test]\n      port: [$PORT]\n      method: [POST]\n".to_owned(),
        ..SetupConfig::default()
    });
    let ca = setup.ca();
    let url = format!("https://other.example.test:{}/echo", setup.port());
    let response = curl_via_proxy_as(
        "--http1.1",
        &setup.proxy(),
        &[
            "--cacert",
            ca.to_str().unwrap(),
            "-X",
            "POST",
            "--data-binary",
            "{\"a\":1}",
            &url,
        ],
    );
    assert_eq!(response.status, 403, "{response:?}");
    assert_eq!(response.json()["error"]["code"], "approval_unavailable");
    assert_eq!(response.json()["error"]["rules"], json!(["ask-other"]));
    assert!(setup.peer.server.requests().is_empty(), "sent upstream");
    let id = response.header("mint-request-id").unwrap().to_owned();
    let decision = setup.broker.decision_of(&id);
    assert_eq!(decision["decision"], "deny", "{decision}");
    assert_eq!(decision["reason"], "approval_unavailable", "{decision}");
    assert_eq!(decision["host"], "other.example.test", "{decision}");
    let opened = setup.records_with_reason("tunnel_opened");
    assert_eq!(opened.len(), 1, "{opened:?}");
    let tunnel = setup.broker.decision_of(opened[0]["id"].as_str().unwrap());
    assert_eq!(tunnel["decision"], "allow", "{tunnel}");
    assert_eq!(tunnel["rule"], json!(["ask-other"]), "{tunnel}");
    setup.assert_no_canary(&response.everything());
}
