//! Issue 16, items 3 and 4: placeholders a body merely quotes are inert. A model-API request whose
//! JSON conversation quotes placeholders (of an alias bound to this host for headers only, of an
//! alias bound elsewhere, escaped, malformed, copied from `mint usage`) passes with its body
//! byte for byte unchanged and the skips recorded, through `/v1/proxy/` and through an
//! intercepted `CONNECT` tunnel (HTTP/1.1 and HTTP/2); the same placeholder in a header is still
//! refused. The echo upstream records exactly the bytes it received.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::path::PathBuf;

use mint_tests::broker::{Broker, CurlResponse, MintHome, curl, curl_via_proxy_as};
use mint_tests::echo_upstream::EchoConfig;
use mint_tests::{EchoPeer, echo_peer};

const HOST: &str = "api.example.test";
/// The model API key: alias `model`, bound to [`HOST`], header only.
const MODEL_CANARY: &str = "canary-model-Rk7Wq2Xn9Lp4Tz6V";
/// The secret of `github`, bound to `api.github.com` only (header, and the body at
/// `/client_secret`).
const GITHUB_CANARY: &str = "canary-github-Hb3Ys8Mc5Jd1Qf7G";
/// The secret of `client`, bound to [`HOST`], substituted in a JSON body at `/client_secret` only.
const CLIENT_CANARY: &str = "canary-client-Vn5Kc2Pw8Dq4Ls1J";

struct Setup {
    // Dropped first: the broker, then the upstream, then the home.
    broker: Broker,
    peer: EchoPeer,
    home: MintHome,
    cap: String,
    dir: tempfile::TempDir,
}

impl Setup {
    fn start() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let config = EchoConfig {
            extra_names: vec![HOST.to_owned()],
            ..EchoConfig::default()
        };
        let peer = echo_peer(dir.path(), config);
        let port = peer.server.port();
        let policy = format!(
            "version: 1\ndefault: deny\nrules:\n  - id: model\n    effect: allow\n    match:\n      alias: [model]\n      host: [{HOST}]\n      port: [{port}]\n      method: [POST]\n  - id: token\n    effect: allow\n    match:\n      alias: [client]\n      host: [{HOST}]\n      port: [{port}]\n      method: [POST]\n      path: [/echo/token]\n    inject: [body]\n"
        );
        let aliases = "aliases:
  - name: model
    hosts: [api.example.test]
    source: file:$SECRETS/model
  - name: github
    hosts: [api.github.com]
    sites: [header, {body: [/client_secret]}]
    source: file:$SECRETS/github
  - name: client
    hosts: [api.example.test]
    sites: [{body: [/client_secret]}]
    source: file:$SECRETS/client
";
        let home = MintHome::new(
            &policy,
            aliases,
            &[
                ("model", MODEL_CANARY),
                ("github", GITHUB_CANARY),
                ("client", CLIENT_CANARY),
            ],
        );
        let cap = home.issue_capability("mino", &[]);
        let pin = format!("{HOST}:{port}:127.0.0.1");
        let broker = home.serve(&peer.ca_file, &["--resolve", &pin]);
        Setup {
            broker,
            peer,
            home,
            cap,
            dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://{HOST}:{}{path}", self.peer.server.port())
    }

    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// POSTs `body` (from a file: byte-exact) with `headers` to `path` on [`HOST`], through
    /// `via`: `route` (`/v1/proxy/`), or a `CONNECT` tunnel with curl's `--http1.1`/`--http2`.
    fn post(&self, via: &str, path: &str, headers: &[&str], body: &[u8]) -> CurlResponse {
        let file = self.file("body.json", body);
        let data = format!("@{}", file.display());
        let mut args: Vec<String> = vec![
            "-H".into(),
            "Content-Type: application/json".into(),
            "--data-binary".into(),
            data,
        ];
        for header in headers {
            args.extend(["-H".to_owned(), (*header).to_owned()]);
        }
        if via == "route" {
            let cap = format!("Mint-Capability: {}", self.cap);
            let url = format!(
                "{}/v1/proxy/https/{HOST}:{}{path}",
                self.broker.base,
                self.peer.server.port()
            );
            args.extend(["-H".to_owned(), cap, url]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            curl(&args)
        } else {
            let ca = self.home.path().join("ca.pem");
            args.extend([
                "--cacert".to_owned(),
                ca.display().to_string(),
                self.url(path),
            ]);
            let proxy = format!("http://agent:{}@{}", self.cap, self.broker.addr());
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            curl_via_proxy_as(via, &proxy, &args)
        }
    }

    #[track_caller]
    fn assert_clean(&self, seen: &str) {
        self.broker.assert_clean(
            seen,
            &[MODEL_CANARY, GITHUB_CANARY, CLIENT_CANARY, &self.cap],
        );
    }
}

const VIAS: [&str; 3] = ["route", "--http1.1", "--http2"];

/// The body of a model API call whose conversation quotes placeholders: the agent's own key
/// (header site only), an alias bound elsewhere, its JSON-escaped spelling, and `mint usage`'s
/// `{{mint:NAME}}` (not an alias name: malformed).
fn conversation() -> Vec<u8> {
    concat!(
        "{\"model\":\"m-1\",\"messages\":[",
        "{\"role\":\"user\",\"content\":\"Why does curl -H 'x-api-key: {{mint:model}}' work?\"},",
        "{\"role\":\"assistant\",\"content\":\"Mint puts the key where you write {{mint:NAME}}.\"},",
        "{\"role\":\"user\",\"content\":\"And {{mint:github}} or \\u007b\\u007bmint:github}} here?\"}",
        "],\"max_tokens\" : 64}\n"
    )
    .as_bytes()
    .to_vec()
}

#[test]
fn issue_16_quoted_placeholders_in_a_model_api_body_pass_unchanged_and_are_recorded_as_skipped() {
    let setup = Setup::start();
    let body = conversation();
    for via in VIAS {
        let response = setup.post(
            via,
            "/echo/v1/messages",
            &["x-api-key: {{mint:model}}"],
            &body,
        );
        assert_eq!(response.status, 200, "{via}: {response:?}");
        let seen = setup.peer.server.requests().last().unwrap();
        // Byte for byte: no substitution, no re-serialization, the length unchanged.
        assert_eq!(seen.body, body, "{via}");
        assert_eq!(
            seen.header("content-length"),
            Some(body.len().to_string().as_str()),
            "{via}"
        );
        // The header placeholder was meant as a credential: substituted.
        assert_eq!(seen.header("x-api-key"), Some(MODEL_CANARY), "{via}");
        let id = response.header("mint-request-id").unwrap();
        let decision = setup.broker.decision_of(id);
        assert_eq!(decision["decision"], "allow", "{via}: {decision}");
        assert_eq!(
            decision["aliases"],
            serde_json::json!(["model"]),
            "{decision}"
        );
        assert_eq!(
            decision["skipped"],
            serde_json::json!(["model@json_value", "github@json_value"]),
            "{via}: {decision}"
        );
        assert_eq!(decision["skipped_count"], 4, "{via}: {decision}");
        setup.assert_clean(&response.everything());
    }
}

#[test]
fn issue_16_the_same_placeholder_in_a_header_is_still_refused() {
    let setup = Setup::start();
    for via in VIAS {
        let before = setup.peer.server.requests().len();
        let response = setup.post(
            via,
            "/echo/v1/messages",
            &["x-api-key: {{mint:model}}", "x-extra: {{mint:github}}"],
            &conversation(),
        );
        if via == "--http2" && response.exit == 92 {
            // curl 7.88 (Debian 12) drops an HTTP/2 answer that arrives, with the stream's
            // RST_STREAM(NO_ERROR) that RFC 9113 section 8.1 prescribes, before curl has sent
            // the request body: it reports "Stream error in the HTTP/2 framing layer" instead.
            // Seen under load only. Mint's answer is then read from its audit trail.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            let outcome = loop {
                let found = setup
                    .broker
                    .audit_records()
                    .into_iter()
                    .rev()
                    .find(|r| r["phase"] == "outcome" && r["method"] == "POST");
                match found {
                    Some(outcome) => break outcome,
                    None if std::time::Instant::now() < deadline => {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                    None => panic!("no outcome of the refused POST"),
                }
            };
            assert_eq!(outcome["status"], 403, "{outcome}");
            assert_eq!(outcome["reason"], "alias_not_bound", "{outcome}");
        } else {
            assert_eq!(response.status, 403, "{via}: {response:?}");
            assert_eq!(response.json()["error"]["code"], "alias_not_bound", "{via}");
        }
        assert_eq!(setup.peer.server.requests().len(), before, "{via}");
        setup.assert_clean(&response.everything());
    }
}

#[test]
fn issue_16_quotes_do_not_count_toward_the_placeholder_limit() {
    let setup = Setup::start();
    // 1,000 quotes of 40 aliases, most undeclared: recorded as 16 entries and a count.
    let mut text = String::new();
    for i in 0..1_000 {
        text.push_str(&format!("{{{{mint:quote{}}}}} ", i % 40));
    }
    let body = serde_json::json!({"messages": [{"role": "user", "content": text}]})
        .to_string()
        .into_bytes();
    let response = setup.post(
        "route",
        "/echo/v1/messages",
        &["x-api-key: {{mint:model}}"],
        &body,
    );
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(setup.peer.server.requests().last().unwrap().body, body);
    let decision = setup
        .broker
        .decision_of(response.header("mint-request-id").unwrap());
    assert_eq!(
        decision["skipped"].as_array().unwrap().len(),
        16,
        "{decision}"
    );
    assert_eq!(decision["skipped_count"], 1_000, "{decision}");
    setup.assert_clean(&response.everything());
}

/// A token request naming the secret at `/client_secret`, and quoting the same placeholder in a
/// sibling field and in a nested transcript.
fn token_request() -> Vec<u8> {
    concat!(
        "{\"grant_type\":\"client_credentials\",\"client_secret\":\"{{mint:client}}\",",
        "\"note\":\"{{mint:client}}\",",
        "\"transcript\":{\"messages\":[{\"role\":\"user\",\"content\":\"send {{mint:client}}\"}]}}"
    )
    .as_bytes()
    .to_vec()
}

#[test]
fn issue_16_a_body_secret_goes_only_to_the_named_pointer() {
    let setup = Setup::start();
    let body = token_request();
    let expected = String::from_utf8(body.clone())
        .unwrap()
        .replacen("{{mint:client}}", CLIENT_CANARY, 1)
        .into_bytes();
    for via in VIAS {
        let response = setup.post(via, "/echo/token", &[], &body);
        assert_eq!(response.status, 200, "{via}: {response:?}");
        let seen = setup.peer.server.requests().last().unwrap();
        // The secret at /client_secret and nowhere else; every other byte as sent.
        assert_eq!(seen.body, expected, "{via}");
        assert_eq!(
            seen.header("content-length"),
            Some(expected.len().to_string().as_str()),
            "{via}"
        );
        // The echo of the secret is scrubbed; the quotes come back as text.
        assert!(
            response.body.contains("[mint:redacted]"),
            "{via}: {}",
            response.body
        );
        let id = response.header("mint-request-id").unwrap();
        let decision = setup.broker.decision_of(id);
        assert_eq!(decision["decision"], "allow", "{via}: {decision}");
        assert_eq!(
            decision["aliases"],
            serde_json::json!(["client"]),
            "{decision}"
        );
        assert_eq!(
            decision["skipped"],
            serde_json::json!(["client@json_value"]),
            "{via}: {decision}"
        );
        assert_eq!(decision["skipped_count"], 2, "{via}: {decision}");
        setup.assert_clean(&response.everything());
    }
}

#[test]
fn issue_16_a_placeholder_at_a_named_pointer_is_still_checked() {
    let setup = Setup::start();
    for via in VIAS {
        for (body, status, code) in [
            // `github` names /client_secret too, but is bound to api.github.com.
            (
                &br#"{"client_secret":"{{mint:github}}"}"#[..],
                403,
                "alias_not_bound",
            ),
            // Escaped or malformed where it would be substituted.
            (
                br#"{"client_secret":"\u007b{mint:client}}"}"#,
                403,
                "site_not_allowed",
            ),
            (
                br#"{"client_secret":"{{mint:Client}}"}"#,
                400,
                "malformed_placeholder",
            ),
        ] {
            let before = setup.peer.server.requests().len();
            let response = setup.post(via, "/echo/token", &[], body);
            assert_eq!(response.status, status, "{via}: {response:?}");
            assert_eq!(response.json()["error"]["code"], code, "{via}");
            assert_eq!(setup.peer.server.requests().len(), before, "{via}");
            setup.assert_clean(&response.everything());
        }
    }
}
