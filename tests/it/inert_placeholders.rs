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
/// The secret of `oauth`, bound to [`HOST`], substituted in the `client_secret` field of a form
/// body only. It holds every byte that would split or change a form if sent unencoded.
const OAUTH_CANARY: &str = "canary-oauth Mq4&grant_type=x+y%41;Zt8";
/// [`OAUTH_CANARY`] as Mint writes it into a form value: every byte outside RFC 3986 unreserved
/// percent-encoded.
const OAUTH_ENCODED: &str = "canary-oauth%20Mq4%26grant_type%3Dx%2By%2541%3BZt8";

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
            "version: 1\ndefault: deny\nrules:\n  - id: model\n    effect: allow\n    match:\n      alias: [model]\n      host: [{HOST}]\n      port: [{port}]\n      method: [POST]\n  - id: token\n    effect: allow\n    match:\n      alias: [client]\n      host: [{HOST}]\n      port: [{port}]\n      method: [POST]\n      path: [/echo/token]\n    inject: [body]\n  - id: oauth\n    effect: allow\n    match:\n      alias: [oauth]\n      host: [{HOST}]\n      port: [{port}]\n      method: [POST]\n      path: [/echo/oauth/token]\n    inject: [body]\n"
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
  - name: oauth
    hosts: [api.example.test]
    sites: [{form: [client_secret]}]
    source: file:$SECRETS/oauth
";
        let home = MintHome::new(
            &policy,
            aliases,
            &[
                ("model", MODEL_CANARY),
                ("github", GITHUB_CANARY),
                ("client", CLIENT_CANARY),
                ("oauth", OAUTH_CANARY),
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
        self.post_as(via, path, "application/json", headers, body)
    }

    /// [`Self::post`] with another `Content-Type`.
    fn post_as(
        &self,
        via: &str,
        path: &str,
        content_type: &str,
        headers: &[&str],
        body: &[u8],
    ) -> CurlResponse {
        let file = self.file("body.json", body);
        let data = format!("@{}", file.display());
        let mut args: Vec<String> = vec![
            "-H".into(),
            format!("Content-Type: {content_type}"),
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
            &[
                MODEL_CANARY,
                GITHUB_CANARY,
                CLIENT_CANARY,
                OAUTH_CANARY,
                OAUTH_ENCODED,
                &self.cap,
            ],
        );
    }

    /// The status and error code of a refused request. curl 7.88 (Debian 12) may drop an HTTP/2
    /// answer that arrives, with the stream's RST_STREAM(NO_ERROR) that RFC 9113 section 8.1
    /// prescribes, before it has sent the request body (exit 92, "Stream error in the HTTP/2
    /// framing layer"); Mint's answer is then read from the audit trail.
    #[track_caller]
    fn refusal(&self, via: &str, response: &CurlResponse) -> (u64, String) {
        if via == "--http2" && response.exit == 92 {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                let found = self
                    .broker
                    .audit_records()
                    .into_iter()
                    .rev()
                    .find(|r| r["phase"] == "outcome" && r["method"] == "POST");
                match found {
                    Some(outcome) => {
                        return (
                            outcome["status"].as_u64().unwrap(),
                            outcome["reason"].as_str().unwrap().to_owned(),
                        );
                    }
                    None if std::time::Instant::now() < deadline => {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                    None => panic!("no outcome of the refused POST"),
                }
            }
        }
        let code = response.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        (u64::from(response.status), code)
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

/// Issue 16, item 4 (form fields): an OAuth token request in
/// `application/x-www-form-urlencoded` with `oauth` naming the field `client_secret`. The
/// placeholder is substituted in that field's value (raw, percent-encoded, or under a
/// percent-encoded field name), the secret percent-encoded so that its space, `&`, `=`, `+`,
/// `%` and `;` neither split the form nor change another field (Python's `parse_qsl`, as an
/// upstream reads it, finds the same fields and the secret whole); quotes in other fields and in
/// field names pass as text and are recorded as `form_value` / `form_key`. The upstream's echo of
/// the form-encoded secret is scrubbed.
#[test]
fn issue_16_a_form_secret_goes_only_to_the_named_field_percent_encoded() {
    let setup = Setup::start();
    for (spelled, name) in [
        ("{{mint:oauth}}", "client_secret"),
        ("%7B%7Bmint%3Aoauth%7D%7D", "client_secret"),
        ("{{mint:oauth}}", "client%5Fsecret"),
    ] {
        let body = format!(
            "grant_type=client_credentials&{name}={spelled}&scope=read+write&note=send+{{{{mint:oauth}}}}&{{{{mint:oauth}}}}=1"
        );
        let expected = body.replacen(spelled, OAUTH_ENCODED, 1);
        for via in VIAS {
            let response = setup.post_as(
                via,
                "/echo/oauth/token",
                "application/x-www-form-urlencoded",
                &[],
                body.as_bytes(),
            );
            assert_eq!(response.status, 200, "{via} {spelled}: {response:?}");
            let seen = setup.peer.server.requests().last().unwrap();
            assert_eq!(
                String::from_utf8_lossy(&seen.body),
                expected,
                "{via} {spelled}"
            );
            assert_eq!(
                seen.header("content-length"),
                Some(expected.len().to_string().as_str()),
                "{via}"
            );
            assert_eq!(
                parse_form(&seen.body),
                [
                    ("grant_type", "client_credentials"),
                    ("client_secret", OAUTH_CANARY),
                    ("scope", "read write"),
                    ("note", "send {{mint:oauth}}"),
                    ("{{mint:oauth}}", "1"),
                ]
                .map(|(k, v)| (k.to_owned(), v.to_owned())),
                "{via} {spelled}"
            );
            // The echo of the form-encoded secret comes back redacted.
            assert!(
                response.body.contains("[mint:redacted]"),
                "{via}: {}",
                response.body
            );
            let decision = setup
                .broker
                .decision_of(response.header("mint-request-id").unwrap());
            assert_eq!(decision["decision"], "allow", "{via}: {decision}");
            assert_eq!(decision["aliases"], serde_json::json!(["oauth"]));
            assert_eq!(
                decision["skipped"],
                serde_json::json!(["oauth@form_value", "oauth@form_key"]),
                "{via}: {decision}"
            );
            assert_eq!(decision["skipped_count"], 2, "{via}: {decision}");
            setup.assert_clean(&response.everything());
        }
    }
}

/// A form body's placeholder is checked where it would be substituted, and is text anywhere
/// else: the same form sent as JSON or text substitutes nothing; `oauth` in a JSON body at
/// `/client_secret` is no place of its; a malformed placeholder in the named field is refused;
/// and `client`'s JSON Pointer is no form field.
#[test]
fn issue_16_a_form_placeholder_is_checked_only_where_it_would_be_substituted() {
    let setup = Setup::start();
    for via in VIAS {
        for (content_type, body) in [
            ("text/plain", "client_secret={{mint:oauth}}"),
            ("application/json", r#"{"client_secret":"{{mint:oauth}}"}"#),
            (
                "application/x-www-form-urlencoded",
                "client_secret={{mint:client}}",
            ),
            (
                "application/x-www-form-urlencoded",
                "client_secret=a;b={{mint:oauth}}",
            ),
        ] {
            let response = setup.post_as(via, "/echo/token", content_type, &[], body.as_bytes());
            assert_eq!(response.status, 200, "{via} {body}: {response:?}");
            let seen = setup.peer.server.requests().last().unwrap();
            assert_eq!(seen.body, body.as_bytes(), "{via} {body}");
            let decision = setup
                .broker
                .decision_of(response.header("mint-request-id").unwrap());
            assert_eq!(decision["skipped_count"], 1, "{via} {body}: {decision}");
            setup.assert_clean(&response.everything());
        }
        let before = setup.peer.server.requests().len();
        let response = setup.post_as(
            via,
            "/echo/oauth/token",
            "application/x-www-form-urlencoded",
            &[],
            b"client_secret=%7B%7Bmint%3AOauth%7D%7D",
        );
        let (status, code) = setup.refusal(via, &response);
        assert_eq!(
            (status, code.as_str()),
            (400, "malformed_placeholder"),
            "{via}"
        );
        assert_eq!(setup.peer.server.requests().len(), before, "{via}");
        setup.assert_clean(&response.everything());
    }
}

/// The fields of a form body as Python's `urllib.parse.parse_qsl` reads them (a real upstream's
/// parser, not Mint's).
fn parse_form(body: &[u8]) -> Vec<(String, String)> {
    use std::io::Write as _;
    let mut child = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, json, urllib.parse; print(json.dumps(urllib.parse.parse_qsl(sys.stdin.buffer.read().decode(), keep_blank_values=True, strict_parsing=True)))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Issue 16 (content codings): Mint substitutes only in bodies sent without a content coding. A
/// gzip body whose decoded text holds a placeholder where its alias names a body place (a JSON
/// Pointer, a form field) is refused with 415 `encoded_body_placeholder` before anything is
/// sent, instead of forwarding the placeholder as text where a secret was meant; a gzip body
/// that only quotes placeholders elsewhere passes byte for byte.
#[test]
fn issue_16_a_placeholder_at_a_named_place_of_a_gzip_body_is_refused() {
    let setup = Setup::start();
    for via in VIAS {
        for (content_type, path, body) in [
            (
                "application/json",
                "/echo/token",
                &br#"{"client_secret":"{{mint:client}}"}"#[..],
            ),
            (
                "application/x-www-form-urlencoded",
                "/echo/oauth/token",
                &b"grant_type=client_credentials&client_secret={{mint:oauth}}"[..],
            ),
        ] {
            let before = setup.peer.server.requests().len();
            let response = setup.post_as(
                via,
                path,
                content_type,
                &["Content-Encoding: gzip"],
                &mint_tests::broker::gzip(body),
            );
            let (status, code) = setup.refusal(via, &response);
            assert_eq!(
                (status, code.as_str()),
                (415, "encoded_body_placeholder"),
                "{via} {content_type}: {response:?}"
            );
            if status == u64::from(response.status) {
                let message = response.json()["error"]["message"].to_string();
                assert!(message.contains("uncompressed"), "{message}");
                assert_eq!(response.header("accept-encoding"), Some("identity"));
            }
            assert_eq!(setup.peer.server.requests().len(), before, "{via}");
            setup.assert_clean(&response.everything());
        }
        // Quotes elsewhere in a gzip body: forwarded as they came.
        let body = mint_tests::broker::gzip(br#"{"note":"{{mint:client}}","x":"{{mint:oauth}}"}"#);
        let response = setup.post_as(
            via,
            "/echo/token",
            "application/json",
            &["Content-Encoding: gzip"],
            &body,
        );
        assert_eq!(response.status, 200, "{via}: {response:?}");
        assert_eq!(setup.peer.server.requests().last().unwrap().body, body);
        setup.assert_clean(&response.everything());
    }
}

/// Issue 16: a JSON body that starts with a UTF-8 byte order mark, and JSON Lines, are JSON to
/// the placeholder scan as they are to the MCP check (one rule, `mint_policy::body::json_start`):
/// the secret goes to `/client_secret` of each text; every other byte, the mark included, is
/// forwarded as it came. A body that starts like JSON but is no JSON by that rule (two marks,
/// junk after a text) is refused by the MCP check, unsent, as before.
#[test]
fn issue_16_a_byte_order_mark_and_json_lines_are_read_as_json() {
    let setup = Setup::start();
    let line = r#"{"client_secret":"{{mint:client}}","note":"{{mint:client}}"}"#;
    for via in VIAS {
        for (body, texts) in [
            (format!("\u{feff}{line}"), 1),
            (format!("{line}\n{line}\n"), 2),
        ] {
            let response = setup.post(via, "/echo/token", &[], body.as_bytes());
            assert_eq!(response.status, 200, "{via} {body:?}: {response:?}");
            let seen = setup.peer.server.requests().last().unwrap();
            let expected = body.replace(
                r#""client_secret":"{{mint:client}}""#,
                &format!(r#""client_secret":"{CLIENT_CANARY}""#),
            );
            assert_eq!(String::from_utf8_lossy(&seen.body), expected, "{via}");
            let decision = setup
                .broker
                .decision_of(response.header("mint-request-id").unwrap());
            assert_eq!(
                decision["aliases"],
                serde_json::json!(["client"]),
                "{decision}"
            );
            assert_eq!(decision["skipped_count"], texts, "{via}: {decision}");
            setup.assert_clean(&response.everything());
        }
        for body in [format!("\u{feff}\u{feff}{line}"), format!("{line} x")] {
            let before = setup.peer.server.requests().len();
            let response = setup.post(via, "/echo/token", &[], body.as_bytes());
            let (status, code) = setup.refusal(via, &response);
            // The answer's code, or the audit reason when curl lost the answer (see `refusal`).
            assert_eq!(status, 400, "{via} {body:?}");
            assert!(
                matches!(code.as_str(), "invalid_request" | "invalid_mcp_message"),
                "{via} {body:?}: {code}"
            );
            assert_eq!(setup.peer.server.requests().len(), before, "{via}");
            setup.assert_clean(&response.everything());
        }
    }
}

/// Issue 16, F6: a request that carries the capability token it presented toward the upstream
/// (another header, `Basic` credentials, the query, the body: a JSON value, deep in a large
/// one, or in a gzip body) is refused with 403 `capability_token_outward` before anything is sent, and the token
/// shows nowhere: not in the answer, the audit log or Mint's stderr.
#[test]
fn issue_16_the_presented_capability_token_is_never_forwarded() {
    let setup = Setup::start();
    let cap = setup.cap.clone();
    let basic = base64(format!("agent:{cap}").as_bytes());
    let large = format!(
        "{{\"padding\":\"{}\",\"token\":\"{cap}\"}}",
        "x".repeat(256 * 1024 + 7)
    );
    for via in VIAS {
        for (path, headers, body) in [
            (
                "/echo/v1/messages",
                vec![format!("X-Upstream-Token: {cap}")],
                "{}".to_owned(),
            ),
            (
                "/echo/v1/messages",
                vec![format!("Authorization: Basic {basic}")],
                "{}".to_owned(),
            ),
            (
                &format!("/echo/v1/messages?key={cap}")[..],
                vec![],
                "{}".to_owned(),
            ),
            (
                "/echo/v1/messages",
                vec![],
                format!("{{\"note\":\"my token is {cap}\"}}"),
            ),
            ("/echo/v1/messages", vec![], large.clone()),
        ] {
            let before = setup.peer.server.requests().len();
            let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
            let response = setup.post(via, path, &headers, body.as_bytes());
            let (status, code) = setup.refusal(via, &response);
            assert_eq!(
                (status, code.as_str()),
                (403, "capability_token_outward"),
                "{via} {path} {headers:?}: {response:?}"
            );
            assert_eq!(setup.peer.server.requests().len(), before, "{via}");
            setup.assert_clean(&response.everything());
        }
        // In a gzip body: found once the body is decoded, as the upstream (and, for a held
        // call, the operator) would read it.
        let zipped =
            mint_tests::broker::gzip(format!("{{\"note\":\"my token is {cap}\"}}").as_bytes());
        let before = setup.peer.server.requests().len();
        let response = setup.post(
            via,
            "/echo/v1/messages",
            &["Content-Encoding: gzip"],
            &zipped,
        );
        let (status, code) = setup.refusal(via, &response);
        assert_eq!(
            (status, code.as_str()),
            (403, "capability_token_outward"),
            "{via} gzip"
        );
        assert_eq!(setup.peer.server.requests().len(), before, "{via}");
        setup.assert_clean(&response.everything());
        // The same request without the token passes.
        let response = setup.post(via, "/echo/v1/messages", &[], b"{\"note\":\"mint_cap_\"}");
        assert_eq!(response.status, 200, "{via}: {response:?}");
    }
}

/// Standard base64 with padding, as a client writes `Basic` credentials.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &b)| acc | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}
