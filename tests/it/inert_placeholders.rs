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
/// The secret of `github`, bound to `api.github.com` only.
const GITHUB_CANARY: &str = "canary-github-Hb3Ys8Mc5Jd1Qf7G";

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
            "version: 1\ndefault: deny\nrules:\n  - id: model\n    effect: allow\n    match:\n      alias: [model]\n      host: [{HOST}]\n      port: [{port}]\n      method: [POST]\n"
        );
        let aliases = "aliases:\n  - name: model\n    hosts: [api.example.test]\n    source: file:$SECRETS/model\n  - name: github\n    hosts: [api.github.com]\n    source: file:$SECRETS/github\n";
        let home = MintHome::new(
            &policy,
            aliases,
            &[("model", MODEL_CANARY), ("github", GITHUB_CANARY)],
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
        self.broker
            .assert_clean(seen, &[MODEL_CANARY, GITHUB_CANARY, &self.cap]);
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
        assert_eq!(response.status, 403, "{via}: {response:?}");
        assert_eq!(response.json()["error"]["code"], "alias_not_bound", "{via}");
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
