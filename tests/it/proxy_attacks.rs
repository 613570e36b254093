//! Attacks on the credentialed proxy, end to end: the real `mint serve`, a real HTTPS echo upstream
//! (or a plain-HTTP one on loopback, or a scripted one for what the echo server cannot play), and
//! curl or a raw TCP client as the agent. One test per attack in POLICY.md's "Matching pitfalls"
//! and the issue's list.
//!
//! Every test plants canary secrets and checks, for each request: the refusal's status and error
//! code, that nothing reached the upstream when the request was refused, and that no canary (and
//! no capability token) is in anything the client received, in the audit log or in Mint's stderr.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use mint_tests::broker::{
    CurlResponse, MintHome, RawResponse, ScriptedUpstream, curl, curl_via_proxy, raw_http,
};
use mint_tests::echo_peer;
use mint_tests::echo_upstream::EchoConfig;
use mint_tests::lab::{self, LabConfig};

/// The secret of alias `echo` (header site), bound to `127.0.0.1`. Holds `/`, `+`, `=`, `.` and
/// `~` so that its percent, base64 and JSON forms differ from the raw one.
const CANARY: &str = "canary-Zq8x/V3k+P2m=W9t.R5y~N7b";
/// The secret of a second alias, bound to another host.
const CANARY_B: &str = "canaryB-Hh4s/Tt6u+Ww2e=Kk8d";
/// The secret of the query-site alias.
const CANARY_Q: &str = "canaryQ-Pp3q/Rr5s+Uu7v=Ll9m";
/// The secret of the body-site alias.
const CANARY_J: &str = "canaryJ-Mm2n/Ee4f+Gg6h=Ii8j";

const MARKER: &str = "[mint:redacted]";

mint_tests::lab_newtype!(
    /// The shared lab, started the way this file's tests describe theirs, with this file's refusal
    /// check.
    Lab
);

impl Lab {
    /// Starts an echo upstream with `config`, then a broker whose policy is
    /// `version: 1 / default: deny / rules:` followed by `rules(echo_port)`.
    #[track_caller]
    fn start(
        config: EchoConfig,
        rules: impl FnOnce(u16) -> String,
        aliases: &str,
        secrets: &[(&str, &'static str)],
    ) -> Lab {
        let config = LabConfig {
            echo: config,
            aliases,
            secrets,
            ..LabConfig::default()
        };
        Lab(lab::Lab::start(config, rules))
    }

    /// The request was refused by Mint with `status` and `code`, audited as refused, nothing
    /// reached the upstream since `before` requests, and nothing leaked.
    #[track_caller]
    fn assert_refused(&self, response: &Answer, status: u16, code: &str, before: usize) {
        assert_eq!(
            (response.status, response.code()),
            (status, Some(code.to_owned())),
            "{}: {}",
            response.what,
            response.text
        );
        let outcome = response
            .header("mint-outcome")
            .unwrap_or_else(|| panic!("{}: no Mint-Outcome header", response.what));
        assert!(
            ["denied", "invalid"].contains(&outcome),
            "{}: outcome {outcome}",
            response.what
        );
        let id = response
            .header("mint-request-id")
            .unwrap_or_else(|| panic!("{}: no Mint-Request-Id", response.what));
        assert_eq!(self.broker.outcome_of(id)["outcome"], outcome);
        let decision = self.broker.decision_of(id);
        assert_eq!(decision["decision"], "deny", "{}", response.what);
        assert_eq!(
            self.forwarded(),
            before,
            "{}: a refused request reached the upstream",
            response.what
        );
        self.assert_clean(&response.text);
    }
}

/// The parts of an answer the assertions need, from curl or from a raw exchange.
struct Answer {
    what: String,
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
    /// Everything received, for canary checks.
    text: String,
}

impl Answer {
    fn curl(what: impl Into<String>, response: &CurlResponse) -> Answer {
        Answer {
            what: what.into(),
            status: response.status,
            headers: response.headers.clone(),
            body: response.body.clone(),
            text: response.everything(),
        }
    }

    fn raw(what: impl Into<String>, response: &RawResponse) -> Answer {
        Answer {
            what: what.into(),
            status: response.status,
            headers: response.headers.clone(),
            body: response.body.clone(),
            text: response.everything(),
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `error.code` of Mint's JSON error body.
    fn code(&self) -> Option<String> {
        let json: serde_json::Value = serde_json::from_str(&self.body).ok()?;
        json["error"]["code"].as_str().map(str::to_owned)
    }
}

fn header_aliases(entries: &[(&str, &str, &str)]) -> String {
    let mut text = String::from("aliases:\n");
    for (name, hosts, sites) in entries {
        text.push_str(&format!(
            "  - name: {name}\n    hosts: [{hosts}]\n    sites: [{sites}]\n    source: file:$SECRETS/{name}\n"
        ));
    }
    text
}

/// The value of header `name` in a raw HTTP/1.1 request or answer head.
fn raw_header(message: &[u8], name: &str) -> Option<String> {
    let text = String::from_utf8_lossy(message);
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    head.split("\r\n").skip(1).find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_owned())
    })
}

// ---------------------------------------------------------------------------------------------
// Hosts
// ---------------------------------------------------------------------------------------------

/// A wildcard binding `*.example.com` covers whole leading labels only: look-alike names that end
/// in the bound text, or put it in front, are refused by the alias binding (with a placeholder)
/// or by the policy (without one), before any name is resolved (the outcome is `denied`, never
/// `failed`).
#[test]
fn host_suffix_and_lookalike_names_are_refused_before_any_connection() {
    let lab = Lab::start(
        EchoConfig::default(),
        |_| {
            "  - id: example-api\n    effect: allow\n    match:\n      alias: [ex]\n      host: [\"*.example.com\"]\n      method: [GET]\n  - id: example-public\n    effect: allow\n    match:\n      host: [\"*.example.com\"]\n      method: [GET]\n"
                .to_owned()
        },
        &header_aliases(&[("ex", "\"*.example.com\"", "header")]),
        &[("ex", CANARY)],
    );
    let before = lab.forwarded();
    for host in [
        "api.example.com.evil",
        "api.example.com.evil.",
        "evilexample.com",
        "example.com",
        "api.example.comx",
        "api-example.com",
        "example.com.127.0.0.1.nip.io",
    ] {
        let response = lab.curl(&[
            "-H",
            "Authorization: Bearer {{mint:ex}}",
            &lab.proxy_url("https", host, "/v1/user"),
        ]);
        let answer = Answer::curl(format!("{host} with a placeholder"), &response);
        lab.assert_refused(&answer, 403, "alias_not_bound", before);

        let response = lab.curl(&[&lab.proxy_url("https", host, "/v1/user")]);
        let answer = Answer::curl(format!("{host} without a placeholder"), &response);
        lab.assert_refused(&answer, 403, "policy_denied", before);
        assert_eq!(answer.json_rules(), Vec::<String>::new());
    }
}

/// Trailing dots and uppercase are canonicalized (one trailing dot stripped, lowercased) and then
/// matched exactly: the canonical host is what is matched and what the upstream sees in `Host`,
/// and neither spelling widens a binding (`localhost` is not `127.0.0.1`, `foo.localhost` is not
/// `localhost`). Two trailing dots are malformed.
#[test]
fn trailing_dot_and_uppercase_hosts_are_canonical_and_never_widen() {
    let lab = Lab::start(
        EchoConfig::default(),
        |port| {
            format!(
                "  - id: echo-ip\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n  - id: echo-name\n    effect: allow\n    match:\n      alias: [named]\n      host: [localhost]\n      port: [{port}]\n      method: [GET]\n"
            )
        },
        &header_aliases(&[
            ("echo", "127.0.0.1", "header"),
            ("named", "localhost", "header"),
        ]),
        &[("echo", CANARY), ("named", CANARY_B)],
    );
    let port = lab.port();
    for (host, alias, canonical, secret) in [
        ("127.0.0.1.", "echo", "127.0.0.1", CANARY),
        ("localhost.", "named", "localhost", CANARY_B),
        ("LOCALHOST", "named", "localhost", CANARY_B),
        ("LocalHost.", "named", "localhost", CANARY_B),
    ] {
        let response = lab.curl(&[
            "-H",
            &format!("Authorization: Bearer {{{{mint:{alias}}}}}"),
            &lab.proxy_url("https", &format!("{host}:{port}"), "/echo"),
        ]);
        assert_eq!(response.status, 200, "{host}: {}", response.body);
        let seen = lab.peer.server.requests().last().unwrap();
        assert_eq!(
            seen.authority.as_deref(),
            Some(format!("{canonical}:{port}").as_str()),
            "{host}"
        );
        assert_eq!(
            seen.header("authorization"),
            Some(format!("Bearer {secret}").as_str())
        );
        assert!(response.body.contains(MARKER), "{}", response.body);
        lab.assert_clean(response.everything());
    }

    for (host, alias, status, code) in [
        // The binding names the address, not the name that resolves to it, and vice versa.
        ("localhost.", "echo", 403, "alias_not_bound"),
        ("LOCALHOST", "echo", 403, "alias_not_bound"),
        ("127.0.0.1.", "named", 403, "alias_not_bound"),
        ("foo.localhost", "named", 403, "alias_not_bound"),
        ("localhost.localdomain", "named", 403, "alias_not_bound"),
        ("127.0.0.1..", "echo", 400, "invalid_request"),
        ("localhost..", "named", 400, "invalid_request"),
        (".localhost", "named", 400, "invalid_request"),
    ] {
        let before = lab.forwarded();
        let response = lab.curl(&[
            "-H",
            &format!("Authorization: Bearer {{{{mint:{alias}}}}}"),
            &lab.proxy_url("https", &format!("{host}:{port}"), "/echo"),
        ]);
        let answer = Answer::curl(format!("{host} with {alias}"), &response);
        lab.assert_refused(&answer, status, code, before);
    }
}

/// Every IPv4 spelling that URL parsers and `inet_aton` accept is read as the address it names:
/// with a rule and a binding naming `127.0.0.1`, `2130706433`, `0x7f.1`, `0177.0.0.1`, `127.1`
/// and `[::ffff:127.0.0.1]` are `127.0.0.1` (allowed, forwarded with `Host: 127.0.0.1:PORT`),
/// while spellings of other addresses (`0x7f.2`, `[::1]`, IPv4-compatible `[::127.0.0.1]`) are
/// not bound, and ambiguous ones are malformed.
#[test]
fn ip_literal_spellings_are_read_as_the_address_they_name() {
    let lab = Lab::start(
        EchoConfig::default(),
        |port| {
            format!(
                "  - id: echo-ip\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n"
            )
        },
        &header_aliases(&[("echo", "127.0.0.1", "header")]),
        &[("echo", CANARY)],
    );
    let port = lab.port();
    for host in [
        "2130706433",
        "0x7f.1",
        "0x7F000001",
        "0177.0.0.1",
        "0177.0.0.01",
        "127.1",
        "127.0.1",
        "[::ffff:127.0.0.1]",
        "[::FFFF:7f00:1]",
    ] {
        let response = lab.curl(&[
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            &lab.proxy_url("https", &format!("{host}:{port}"), "/echo"),
        ]);
        assert_eq!(response.status, 200, "{host}: {}", response.body);
        let seen = lab.peer.server.requests().last().unwrap();
        assert_eq!(
            seen.authority.as_deref(),
            Some(format!("127.0.0.1:{port}").as_str()),
            "{host}"
        );
        assert_eq!(
            seen.header("authorization"),
            Some(format!("Bearer {CANARY}").as_str())
        );
        let id = response.header("mint-request-id").unwrap();
        assert_eq!(lab.broker.decision_of(id)["host"], "127.0.0.1", "{host}");
        lab.assert_clean(response.everything());
    }

    for (host, status, code) in [
        ("0x7f.2", 403, "alias_not_bound"),
        ("2130706434", 403, "alias_not_bound"),
        ("[::1]", 403, "alias_not_bound"),
        ("[::127.0.0.1]", 403, "alias_not_bound"),
        ("[0:0:0:0:0:ffff:7f00:2]", 403, "alias_not_bound"),
        ("127.0.0.1.5", 400, "invalid_request"),
        ("0x7g.1", 400, "invalid_request"),
        ("089.0.0.1", 400, "invalid_request"),
        ("4294967296", 400, "invalid_request"),
        ("[127.0.0.1]", 400, "invalid_request"),
        ("127.0.0.1%2e", 400, "invalid_request"),
        ("[fe80::1%25lo]", 400, "invalid_request"),
        ("0.0.0.0", 400, "invalid_request"),
    ] {
        let before = lab.forwarded();
        let response = lab.curl(&[
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            &lab.proxy_url("https", &format!("{host}:{port}"), "/echo"),
        ]);
        let answer = Answer::curl(host, &response);
        lab.assert_refused(&answer, status, code, before);
    }
}

/// `user@host` is refused in any spelling, with or without a placeholder in the userinfo.
#[test]
fn userinfo_is_refused() {
    let lab = Lab::start(
        EchoConfig::default(),
        |port| {
            format!(
                "  - id: echo-ip\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n"
            )
        },
        &header_aliases(&[("echo", "127.0.0.1", "header")]),
        &[("echo", CANARY)],
    );
    let port = lab.port();
    for authority in [
        format!("user@127.0.0.1:{port}"),
        format!("user:pass@127.0.0.1:{port}"),
        format!("127.0.0.1:{port}@evil.example"),
        format!("evil.example@127.0.0.1:{port}"),
        format!("user%40127.0.0.1:{port}"),
    ] {
        let before = lab.forwarded();
        let response = lab.curl(&[
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            &lab.proxy_url("https", &authority, "/echo"),
        ]);
        let answer = Answer::curl(authority, &response);
        lab.assert_refused(&answer, 400, "invalid_request", before);
    }

    // A placeholder in the userinfo is a placeholder in the target: refused as such.
    let before = lab.forwarded();
    let authority = format!("user:{{{{mint:echo}}}}@127.0.0.1:{port}");
    let response = lab.curl(&[&lab.proxy_url("https", &authority, "/echo")]);
    let answer = Answer::curl(authority, &response);
    lab.assert_refused(&answer, 403, "site_not_allowed", before);
}

/// Raw requests whose target carries a fragment (curl strips fragments; a raw client can send
/// them), on the route and in forward-proxy mode.
fn fragment_requests(lab: &Lab, port: u16) -> Vec<(String, String)> {
    let broker = lab.broker.base.trim_start_matches("http://");
    let mut requests = Vec::new();
    for suffix in ["#frag", "?x=1#frag", "#/../admin/x", "#{{mint:echo}}"] {
        requests.push((
            format!("route /echo/ok{suffix}"),
            format!(
                "GET /v1/proxy/https/127.0.0.1:{port}/echo/ok{suffix} HTTP/1.1\r\nHost: {broker}\r\nMint-Capability: {}\r\nAuthorization: Bearer {{{{mint:echo}}}}\r\nConnection: close\r\n\r\n",
                lab.cap
            ),
        ));
        requests.push((
            format!("forward /echo/ok{suffix}"),
            format!(
                "GET https://127.0.0.1:{port}/echo/ok{suffix} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: Bearer {}\r\nAuthorization: Bearer {{{{mint:echo}}}}\r\nConnection: close\r\n\r\n",
                lab.cap
            ),
        ));
    }
    requests
}

fn fragment_lab() -> Lab {
    Lab::start(
        EchoConfig::default(),
        |port| {
            format!(
                "  - id: echo-tree\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n      path: [\"/echo/**\"]\n  - id: no-admin\n    effect: deny\n    match:\n      path: [\"/admin/**\", \"/echo/admin/**\"]\n"
            )
        },
        &header_aliases(&[("echo", "127.0.0.1", "header")]),
        &[("echo", CANARY)],
    )
}

/// What a fragment achieves: nothing. The `http` crate cuts the request target at `#` before
/// Mint reads it (so it is never refused as such), so the fragment is neither matched nor forwarded, a `/../` in it
/// cannot move the path, and a placeholder in it is never substituted: the upstream sees exactly
/// the path that was matched and audited.
#[test]
fn fragments_never_reach_the_upstream() {
    let lab = fragment_lab();
    let port = lab.port();
    for (what, request) in fragment_requests(&lab, port) {
        let response = raw_http(&lab.broker.base, request.as_bytes());
        let answer = Answer::raw(what.clone(), &response);
        lab.assert_clean(&answer.text);
        if answer.status != 200 {
            assert_eq!(
                (answer.status, answer.code()),
                (400, Some("invalid_request".to_owned())),
                "{what}"
            );
            continue;
        }
        let seen = lab.peer.server.requests().last().unwrap();
        assert_eq!(seen.path, "/echo/ok", "{what}");
        assert!(
            seen.query.as_deref().is_none_or(|q| q == "x=1"),
            "{what}: {:?}",
            seen.query
        );
        assert!(!seen.contains("frag") && !seen.contains("admin"), "{what}");
        assert!(!seen.contains("mint:echo"), "{what}");
        let id = answer.header("mint-request-id").unwrap();
        assert_eq!(lab.broker.decision_of(id)["path"], "/echo/ok", "{what}");
    }
}

// ---------------------------------------------------------------------------------------------
// Paths
// ---------------------------------------------------------------------------------------------

/// Against an allow rule scoped to `/echo/**` and a deny rule on `/echo/admin/**`: dot segments
/// (also `%2e`), `//`, `;` (also `%3B`), encoded `/` and `\`, raw `\`, double encoding and `%00`
/// are refused as malformed; percent-escapes of unreserved characters are decoded before
/// matching (`%61dmin` hits the deny rule), and matching is case-sensitive. The upstream sees the
/// normalized path.
#[test]
fn path_tricks_cannot_escape_the_rule_scope() {
    let lab = Lab::start(
        EchoConfig::default(),
        |port| {
            format!(
                "  - id: echo-tree\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n      path: [\"/echo/**\"]\n  - id: no-admin\n    effect: deny\n    match:\n      path: [\"/echo/admin/**\"]\n"
            )
        },
        &header_aliases(&[("echo", "127.0.0.1", "header")]),
        &[("echo", CANARY)],
    );
    let get = |path: &str| {
        lab.curl(&[
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            &lab.echo_url(path),
        ])
    };

    for path in [
        "/echo/%2e%2e/admin/x",
        "/echo/%2E%2E/echo/admin/x",
        "/echo/.%2e/x",
        "/echo/%2e/admin/x",
        "/echo/./admin/x",
        "/echo/a/../admin/x",
        "/echo/admin/..",
        "/../echo/x",
        "/echo//admin/x",
        "/echo/admin;x/y",
        "/echo/x;jsessionid=1",
        "/echo/x%3Bx",
        "/echo/admin%2Fx",
        "/echo/admin%2fx",
        "/echo/x%5Cadmin",
        "/echo/x%5c..%5cadmin",
        "/echo\\admin\\x",
        "/echo/%252e%252e/x",
        "/echo/%25%32%65/x",
        "/echo/x%00",
        "/echo/x%zz",
    ] {
        let before = lab.forwarded();
        let answer = Answer::curl(path, &get(path));
        lab.assert_refused(&answer, 400, "invalid_request", before);
    }

    for (path, rules) in [
        ("/echo/admin/x", vec!["no-admin".to_owned()]),
        ("/echo/%61dmin/x", vec!["no-admin".to_owned()]),
        ("/%65cho/%61%64%6D%69%6E/x", vec!["no-admin".to_owned()]),
        ("/ECHO/x", Vec::new()),
        ("/echo-encoded/x", Vec::new()),
        ("/echox/y", Vec::new()),
    ] {
        let before = lab.forwarded();
        let answer = Answer::curl(path, &get(path));
        lab.assert_refused(&answer, 403, "policy_denied", before);
        assert_eq!(answer.json_rules(), rules, "{path}");
    }

    // The escape of an unreserved character is decoded, and what is forwarded is what matched.
    let response = get("/echo/%7Euser/%41b");
    assert_eq!(response.status, 200, "{}", response.body);
    let seen = lab.peer.server.requests().last().unwrap();
    assert_eq!(seen.path, "/echo/~user/Ab");
    lab.assert_clean(response.everything());
}

// ---------------------------------------------------------------------------------------------
// Framing
// ---------------------------------------------------------------------------------------------

fn post_with_headers(lab: &Lab, framing: &str, body: &str) -> RawResponse {
    let request = format!(
        "POST /v1/proxy/https/127.0.0.1:{}/echo HTTP/1.1\r\nHost: {}\r\nMint-Capability: {}\r\nAuthorization: Bearer {{{{mint:echo}}}}\r\nContent-Type: text/plain\r\n{framing}Connection: close\r\n\r\n{body}",
        lab.port(),
        lab.broker.base.trim_start_matches("http://"),
        lab.cap
    );
    raw_http(&lab.broker.base, request.as_bytes())
}

fn framing_lab() -> Lab {
    Lab::start(
        EchoConfig::default(),
        |port| {
            format!(
                "  - id: echo-ip\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET, POST]\n"
            )
        },
        &header_aliases(&[("echo", "127.0.0.1", "header")]),
        &[("echo", CANARY)],
    )
}

/// POLICY.md: "reject Content-Length together with Transfer-Encoding, duplicate Content-Length".
/// Both orders of CL+TE and a repeated, equal Content-Length must be answered 400
/// `invalid_request` and never forwarded.
#[test]
fn cl_te_and_repeated_content_length_are_refused() {
    let lab = framing_lab();
    for (what, framing, body) in [
        (
            "CL then TE",
            "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
            "0\r\n\r\n",
        ),
        (
            "TE then CL",
            "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
            "0\r\n\r\n",
        ),
        (
            "repeated equal Content-Length",
            "Content-Length: 4\r\nContent-Length: 4\r\n",
            "abcd",
        ),
    ] {
        let before = lab.forwarded();
        let response = post_with_headers(&lab, framing, body);
        let answer = Answer::raw(what, &response);
        lab.assert_refused(&answer, 400, "invalid_request", before);
    }
}

/// What the framing attacks achieve besides the refusal above: nothing. Whatever the
/// agent's framing said, the upstream gets one request framed by Mint alone (no agent
/// `Transfer-Encoding`, a `Content-Length` equal to the body it really gets), a request smuggled
/// behind a CL+TE body never reaches the upstream, and differing Content-Length values are
/// refused with 400 before Mint sees them.
#[test]
fn ambiguous_framing_is_never_forwarded_ambiguously() {
    let lab = framing_lab();
    let port = lab.port();
    let smuggled = format!(
        "GET /v1/proxy/https/127.0.0.1:{port}/echo/smuggled HTTP/1.1\r\nHost: x\r\nMint-Capability: {}\r\nAuthorization: Bearer {{{{mint:echo}}}}\r\n\r\n",
        lab.cap
    );
    for (what, framing, body) in [
        (
            "CL then TE",
            format!(
                "Content-Length: {}\r\nTransfer-Encoding: chunked\r\n",
                5 + smuggled.len()
            ),
            format!("0\r\n\r\n{smuggled}"),
        ),
        (
            "TE then CL",
            format!(
                "Transfer-Encoding: chunked\r\nContent-Length: {}\r\n",
                5 + smuggled.len()
            ),
            format!("0\r\n\r\n{smuggled}"),
        ),
        (
            "CL then TE, chunked body",
            "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n".to_owned(),
            "4\r\nabcd\r\n0\r\n\r\n".to_owned(),
        ),
    ] {
        let before = lab.forwarded();
        let response = post_with_headers(&lab, &framing, &body);
        let answer = Answer::raw(what, &response);
        lab.assert_clean(&answer.text);
        let seen = lab.peer.server.requests().snapshot();
        assert!(
            seen.len() <= before + 1,
            "{what}: more than one request forwarded"
        );
        assert!(
            seen.iter().all(|r| !r.path.contains("smuggled")),
            "{what}: the smuggled request reached the upstream"
        );
        if let Some(request) = seen.get(before) {
            assert!(request.header("transfer-encoding").is_none(), "{what}");
            let length = request
                .header("content-length")
                .map_or(Ok(0), str::parse::<usize>);
            assert_eq!(length, Ok(request.body.len()), "{what}");
            assert!(request.body_complete, "{what}");
        } else {
            assert_eq!(
                (answer.status, answer.code()),
                (400, Some("invalid_request".to_owned()))
            );
        }
    }

    let before = lab.forwarded();
    let response = post_with_headers(&lab, "Content-Length: 4\r\nContent-Length: 5\r\n", "abcde");
    assert_eq!(response.status, 400, "{}", response.everything());
    assert_eq!(lab.forwarded(), before);
    lab.assert_clean(response.everything());
}

/// Two `Host` headers are ambiguous framing: 400 `invalid_request`, nothing forwarded.
#[test]
fn duplicate_host_is_refused() {
    let lab = framing_lab();
    let before = lab.forwarded();
    let request = format!(
        "GET /v1/proxy/https/127.0.0.1:{}/echo HTTP/1.1\r\nHost: {}\r\nHost: evil.example\r\nMint-Capability: {}\r\nAuthorization: Bearer {{{{mint:echo}}}}\r\nConnection: close\r\n\r\n",
        lab.port(),
        lab.broker.base.trim_start_matches("http://"),
        lab.cap
    );
    let response = raw_http(&lab.broker.base, request.as_bytes());
    let answer = Answer::raw("two Host headers", &response);
    lab.assert_refused(&answer, 400, "invalid_request", before);
}

// ---------------------------------------------------------------------------------------------
// Placeholders where no secret may go
// ---------------------------------------------------------------------------------------------

/// A placeholder anywhere in the target (scheme, host, port, path; raw, percent-encoded or mixed),
/// in a header name, or percent-encoded in a header value is refused with 403 `site_not_allowed`
/// before any connection, even where it also makes the target malformed (a host or port that
/// does not parse).
#[test]
fn placeholder_in_the_target_is_refused_before_any_connection() {
    let lab = Lab::start(
        EchoConfig::default(),
        |port| {
            format!(
                "  - id: echo-ip\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n"
            )
        },
        &header_aliases(&[("echo", "127.0.0.1", "header")]),
        &[("echo", CANARY)],
    );
    let port = lab.port();
    let here = format!("127.0.0.1:{port}");
    let cases: Vec<(String, Vec<String>, u16, &str)> = vec![
        (
            lab.proxy_url("https", &here, "/echo/{{mint:echo}}"),
            vec![],
            403,
            "site_not_allowed",
        ),
        (
            lab.proxy_url("https", &here, "/echo/%7B%7Bmint%3Aecho%7D%7D"),
            vec![],
            403,
            "site_not_allowed",
        ),
        (
            lab.proxy_url("https", &here, "/echo/%7b%7bmint:echo%7d%7d/x"),
            vec![],
            403,
            "site_not_allowed",
        ),
        (
            lab.proxy_url("https", &here, "/echo/{{mint%3Aecho}}"),
            vec![],
            403,
            "site_not_allowed",
        ),
        (
            lab.echo_url("/echo"),
            vec!["x-%7B%7Bmint%3Aecho%7D%7D: 1".to_owned()],
            403,
            "site_not_allowed",
        ),
        (
            lab.echo_url("/echo"),
            vec!["Authorization: Bearer %7B%7Bmint%3Aecho%7D%7D".to_owned()],
            403,
            "site_not_allowed",
        ),
        (
            lab.echo_url("/echo"),
            vec!["Authorization: Bearer {{mint%3Aecho}}".to_owned()],
            403,
            "site_not_allowed",
        ),
        (
            lab.proxy_url("https", &format!("{{{{mint:echo}}}}:{port}"), "/echo"),
            vec![],
            403,
            "site_not_allowed",
        ),
        (
            lab.proxy_url("https", &format!("%7B%7Bmint%3Aecho%7D%7D:{port}"), "/echo"),
            vec![],
            403,
            "site_not_allowed",
        ),
        (
            lab.proxy_url(
                "https",
                &format!("{{{{mint:echo}}}}.127.0.0.1.nip.io:{port}"),
                "/echo",
            ),
            vec![],
            403,
            "site_not_allowed",
        ),
        (
            lab.proxy_url("https", "127.0.0.1:{{mint:echo}}", "/echo"),
            vec![],
            403,
            "site_not_allowed",
        ),
        (
            lab.proxy_url("{{mint:echo}}", &here, "/echo"),
            vec![],
            403,
            "site_not_allowed",
        ),
        (
            lab.proxy_url("%7B%7Bmint%3Aecho%7D%7D", &here, "/echo"),
            vec![],
            403,
            "site_not_allowed",
        ),
    ];
    for (url, headers, status, code) in cases {
        let before = lab.forwarded();
        let mut args: Vec<&str> = Vec::new();
        for header in &headers {
            args.extend(["-H", header.as_str()]);
        }
        args.push(&url);
        let answer = Answer::curl(format!("{url} {headers:?}"), &lab.curl(&args));
        lab.assert_refused(&answer, status, code, before);
    }
}

// ---------------------------------------------------------------------------------------------
// Aliases, sites
// ---------------------------------------------------------------------------------------------

/// Two aliases bound to different hosts (`127.0.0.1` and `localhost`, the same echo server), and a
/// policy that allows both aliases on both hosts: the binding alone keeps each secret to its own
/// host. Alias A's placeholder toward B's host is refused, both placeholders toward A's host are
/// refused, and nothing is sent either time; each alias alone on its own host works.
#[test]
fn cross_alias_placeholders_are_refused() {
    let lab = Lab::start(
        EchoConfig::default(),
        |port| {
            format!(
                "  - id: both-everywhere\n    effect: allow\n    match:\n      alias: [alpha, beta]\n      host: [127.0.0.1, localhost]\n      port: [{port}]\n      method: [GET]\n"
            )
        },
        &header_aliases(&[
            ("alpha", "127.0.0.1", "header"),
            ("beta", "localhost", "header"),
        ]),
        &[("alpha", CANARY), ("beta", CANARY_B)],
    );
    let port = lab.port();
    let a_host = format!("127.0.0.1:{port}");
    let b_host = format!("localhost:{port}");
    for (what, host, headers) in [
        (
            "alpha toward beta's host",
            &b_host,
            vec!["Authorization: Bearer {{mint:alpha}}"],
        ),
        (
            "beta toward alpha's host",
            &a_host,
            vec!["Authorization: Bearer {{mint:beta}}"],
        ),
        (
            "both in one header toward alpha's host",
            &a_host,
            vec!["Authorization: Bearer {{mint:alpha}} {{mint:beta}}"],
        ),
        (
            "both in two headers toward alpha's host",
            &a_host,
            vec![
                "Authorization: Bearer {{mint:alpha}}",
                "X-Other: {{mint:beta}}",
            ],
        ),
        (
            "both toward beta's host",
            &b_host,
            vec![
                "Authorization: Bearer {{mint:beta}}",
                "X-Other: {{mint:alpha}}",
            ],
        ),
    ] {
        let before = lab.forwarded();
        let mut args: Vec<&str> = Vec::new();
        for header in &headers {
            args.extend(["-H", *header]);
        }
        let url = lab.proxy_url("https", host, "/echo");
        args.push(&url);
        let answer = Answer::curl(what, &lab.curl(&args));
        lab.assert_refused(&answer, 403, "alias_not_bound", before);
    }

    for (host, alias, secret) in [(&a_host, "alpha", CANARY), (&b_host, "beta", CANARY_B)] {
        let response = lab.curl(&[
            "-H",
            &format!("Authorization: Bearer {{{{mint:{alias}}}}}"),
            &lab.proxy_url("https", host, "/echo"),
        ]);
        assert_eq!(response.status, 200, "{alias}: {}", response.body);
        let seen = lab.peer.server.requests().last().unwrap();
        assert_eq!(
            seen.header("authorization"),
            Some(format!("Bearer {secret}").as_str())
        );
        lab.assert_clean(response.everything());
    }
}

/// An alias with `sites: [query]` and a rule with `inject: [query]`: the placeholder in the query
/// (percent-encoded, as clients write it, or raw) reaches the upstream as the percent-encoded
/// secret, and the answer that echoes it is scrubbed. Under a rule without `inject: [query]` the
/// same request is denied by policy; an alias whose sites do not include the query is refused.
#[test]
fn query_site_needs_both_the_alias_and_the_rule() {
    let lab = Lab::start(
        EchoConfig::default(),
        |port| {
            format!(
                "  - id: query-ok\n    effect: allow\n    match:\n      alias: [q, echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n      path: [\"/echo/q/**\", \"/echo-encoded/q/**\"]\n    inject: [query, header]\n  - id: header-only\n    effect: allow\n    match:\n      alias: [q]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n      path: [\"/echo/h/**\"]\n"
            )
        },
        &header_aliases(&[("q", "127.0.0.1", "query"), ("echo", "127.0.0.1", "header")]),
        &[("q", CANARY_Q), ("echo", CANARY)],
    );
    let encoded = percent_upper(CANARY_Q);
    for query in ["key=%7B%7Bmint%3Aq%7D%7D&x=1", "key={{mint:q}}&x=1"] {
        for route in ["/echo/q/x", "/echo-encoded/q/x"] {
            let response = lab.curl(&[&lab.echo_url(&format!("{route}?{query}"))]);
            assert_eq!(response.status, 200, "{query}: {}", response.body);
            let seen = lab.peer.server.requests().last().unwrap();
            assert_eq!(
                seen.query.as_deref(),
                Some(format!("key={encoded}&x=1").as_str())
            );
            assert!(response.body.contains(MARKER), "{}", response.body);
            assert_no_forms(&response.everything(), CANARY_Q);
            lab.assert_clean(response.everything());
        }
    }

    for (what, path, status, code) in [
        (
            "rule without inject: [query]",
            "/echo/h/x?key=%7B%7Bmint%3Aq%7D%7D",
            403,
            "policy_denied",
        ),
        (
            "alias without the query site",
            "/echo/q/x?key=%7B%7Bmint%3Aecho%7D%7D",
            403,
            "site_not_allowed",
        ),
        (
            "query alias in a header",
            "/echo/q/x",
            403,
            "site_not_allowed",
        ),
    ] {
        let before = lab.forwarded();
        let url = lab.echo_url(path);
        let mut args = vec![url.as_str()];
        if what == "query alias in a header" {
            args.extend(["-H", "Authorization: Bearer {{mint:q}}"]);
        }
        let answer = Answer::curl(what, &lab.curl(&args));
        lab.assert_refused(&answer, status, code, before);
    }
}

/// An alias with `sites: [{body: [/token]}]` and a rule with `inject: [body]`: a raw placeholder in a string
/// value of an `application/json` body reaches the upstream as the secret (JSON-escaped), and the
/// echo is scrubbed. Refused: the same under a rule without `inject: [body]` (policy), and a
/// placeholder spelled with JSON or percent escapes where it would be substituted (site).
/// Forwarded as text, unchanged (issue 16): a placeholder in a body that is not JSON by its
/// `Content-Type` or does not parse, or in a JSON key.
#[test]
fn json_body_site_needs_json_and_the_rule() {
    let lab = Lab::start(
        EchoConfig::default(),
        |port| {
            format!(
                "  - id: body-ok\n    effect: allow\n    match:\n      alias: [j]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [POST]\n      path: [\"/echo/j/**\"]\n    inject: [body]\n  - id: body-not-injected\n    effect: allow\n    match:\n      alias: [j]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [POST]\n      path: [\"/echo/n/**\"]\n"
            )
        },
        &header_aliases(&[("j", "127.0.0.1", "{body: [/token]}")]),
        &[("j", CANARY_J)],
    );
    let json_body = r#"{"token":"{{mint:j}}","n":1}"#;
    for content_type in [
        "application/json",
        "application/vnd.api+json; charset=utf-8",
    ] {
        let response = lab.curl(&[
            "-H",
            &format!("Content-Type: {content_type}"),
            "--data-binary",
            json_body,
            &lab.echo_url("/echo/j/x"),
        ]);
        assert_eq!(response.status, 200, "{content_type}: {}", response.body);
        let seen = lab.peer.server.requests().last().unwrap();
        assert_eq!(
            seen.body_text(),
            format!(r#"{{"token":"{CANARY_J}","n":1}}"#)
        );
        assert!(response.body.contains(MARKER), "{}", response.body);
        assert_no_forms(&response.everything(), CANARY_J);
        lab.assert_clean(response.everything());
    }

    for (what, path, content_type, body, code) in [
        (
            "rule without inject: [body]",
            "/echo/n/x",
            "application/json",
            json_body,
            "policy_denied",
        ),
        (
            "JSON escapes",
            "/echo/j/x",
            "application/json",
            r#"{"token":"\u007b\u007bmint:j\u007d\u007d"}"#,
            "site_not_allowed",
        ),
        (
            "percent escapes in JSON",
            "/echo/j/x",
            "application/json",
            r#"{"token":"%7B%7Bmint%3Aj%7D%7D"}"#,
            "site_not_allowed",
        ),
    ] {
        let before = lab.forwarded();
        let answer = Answer::curl(
            what,
            &lab.curl(&[
                "-H",
                &format!("Content-Type: {content_type}"),
                "--data-binary",
                body,
                &lab.echo_url(path),
            ]),
        );
        lab.assert_refused(&answer, 403, code, before);
    }

    // Inert: forwarded byte for byte, the secret nowhere.
    for (what, content_type, body) in [
        ("text/plain body", "text/plain", json_body),
        (
            "form body",
            "application/x-www-form-urlencoded",
            "token={{mint:j}}",
        ),
        ("JSON key", "application/json", r#"{"{{mint:j}}":1}"#),
    ] {
        let response = lab.curl(&[
            "-H",
            &format!("Content-Type: {content_type}"),
            "--data-binary",
            body,
            &lab.echo_url("/echo/j/x"),
        ]);
        assert_eq!(response.status, 200, "{what}: {}", response.body);
        let seen = lab.peer.server.requests().last().unwrap();
        assert_eq!(seen.body_text(), body, "{what}");
        assert_no_forms(&response.everything(), CANARY_J);
        lab.assert_clean(response.everything());
    }
}

// ---------------------------------------------------------------------------------------------
// Headers and methods
// ---------------------------------------------------------------------------------------------

/// The capability, every `Proxy-*` and `Mint-*` header, every hop-by-hop header and every header
/// that `Connection` names are stripped from the forwarded request (over plain HTTP/1.1, where
/// hyper's HTTP/2 client would not strip connection headers for Mint); `Accept-Encoding` becomes
/// `identity`; the agent's `Host` is replaced by the target's; the capability token appears
/// nowhere. An `Upgrade` that is not a whole WebSocket handshake is refused (websocket.rs has
/// the handshakes that are not).
#[test]
fn capability_proxy_and_hop_by_hop_headers_are_stripped() {
    let lab = Lab::start(
        EchoConfig::default().plain_http(),
        |port| {
            format!(
                "  - id: echo-http\n    effect: allow\n    match:\n      alias: [echo]\n      scheme: [http]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n"
            )
        },
        &header_aliases(&[("echo", "127.0.0.1", "header")]),
        &[("echo", CANARY)],
    );
    let url = lab.proxy_url("http", &format!("127.0.0.1:{}", lab.port()), "/echo");
    let cap_again = format!("Proxy-Authorization: Bearer {}", lab.cap);
    let response = lab.curl(&[
        "-H",
        "Authorization: Bearer {{mint:echo}}",
        "-H",
        &cap_again,
        "-H",
        "Proxy-Connection: keep-alive",
        "-H",
        "Proxy-Foo: 1",
        "-H",
        "Connection: keep-alive, x-foo, X-Bar",
        "-H",
        "X-Foo: hop",
        "-H",
        "X-Bar: hop",
        "-H",
        "Keep-Alive: timeout=5",
        "-H",
        "TE: trailers",
        "-H",
        "Trailer: X-Baz",
        "-H",
        "Mint-Debug: 1",
        "-H",
        "Accept-Encoding: gzip, br",
        "-H",
        "X-Kept: yes",
        "-H",
        "Host: evil.example",
        &url,
    ]);
    assert_eq!(response.status, 200, "{}", response.body);
    let seen = lab.peer.server.requests().last().unwrap();
    assert_eq!(seen.version, "HTTP/1.1");
    let names: Vec<&str> = seen.headers.iter().map(|(n, _)| n.as_str()).collect();
    for stripped in [
        "mint-capability",
        "mint-debug",
        "proxy-authorization",
        "proxy-connection",
        "proxy-foo",
        "connection",
        "x-foo",
        "x-bar",
        "keep-alive",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ] {
        assert!(
            !names.contains(&stripped),
            "{stripped} forwarded: {names:?}"
        );
    }
    assert_eq!(seen.header("accept-encoding"), Some("identity"));
    assert_eq!(seen.header("x-kept"), Some("yes"));
    // The agent's `Host` is not forwarded: the upstream's is the canonical target authority.
    assert_eq!(
        seen.authority.as_deref(),
        Some(format!("127.0.0.1:{}", lab.port()).as_str())
    );
    assert_eq!(seen.header_values("host").count(), 1);
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {CANARY}").as_str())
    );
    assert!(
        !seen.contains(&lab.cap),
        "the capability reached the upstream"
    );
    assert!(!seen.contains(lab.cap.rsplit('_').next().unwrap()));
    lab.assert_clean(response.everything());

    let before = lab.forwarded();
    let answer = Answer::curl(
        "upgrade",
        &lab.curl(&[
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            "-H",
            "Connection: Upgrade",
            "-H",
            "Upgrade: websocket",
            &url,
        ]),
    );
    lab.assert_refused(&answer, 400, "invalid_request", before);
}

/// Methods are matched byte for byte, and so a lowercase method is refused rather than left to an
/// upstream that reads `delete` as `DELETE`; a method-override header that names another method
/// is refused (it would carry a `DELETE` past a deny rule inside a `POST`); the deny rule itself
/// holds.
#[test]
fn method_tricks_cannot_pass_a_deny_rule() {
    let lab = Lab::start(
        EchoConfig::default(),
        |port| {
            format!(
                "  - id: echo-any\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET, POST, DELETE]\n  - id: no-deletes\n    effect: deny\n    match:\n      method: [DELETE]\n"
            )
        },
        &header_aliases(&[("echo", "127.0.0.1", "header")]),
        &[("echo", CANARY)],
    );
    let url = lab.echo_url("/echo/item/1");
    let auth = "Authorization: Bearer {{mint:echo}}";
    let cases: Vec<(&str, Vec<&str>, u16, &str)> = vec![
        ("DELETE", vec!["-X", "DELETE"], 403, "policy_denied"),
        ("delete", vec!["-X", "delete"], 400, "invalid_request"),
        ("Delete", vec!["-X", "Delete"], 400, "invalid_request"),
        (
            "POST + X-HTTP-Method-Override: DELETE",
            vec!["-X", "POST", "-H", "X-HTTP-Method-Override: DELETE"],
            400,
            "invalid_request",
        ),
        (
            "POST + X-HTTP-Method: DELETE",
            vec!["-X", "POST", "-H", "X-HTTP-Method: DELETE"],
            400,
            "invalid_request",
        ),
        (
            "POST + X-Method-Override: DELETE",
            vec!["-X", "POST", "-H", "X-Method-Override: DELETE"],
            400,
            "invalid_request",
        ),
        (
            "POST + X-HTTP-Method-Override: delete",
            vec!["-X", "POST", "-H", "X-HTTP-Method-Override: delete"],
            400,
            "invalid_request",
        ),
        (
            "GET + X-HTTP-Method-Override: GET, DELETE",
            vec!["-H", "X-HTTP-Method-Override: GET, DELETE"],
            400,
            "invalid_request",
        ),
    ];
    for (what, extra, status, code) in cases {
        let before = lab.forwarded();
        let mut args = vec!["-H", auth];
        args.extend(extra);
        args.push(&url);
        let answer = Answer::curl(what, &lab.curl(&args));
        lab.assert_refused(&answer, status, code, before);
        if code == "policy_denied" {
            assert_eq!(answer.json_rules(), vec!["no-deletes".to_owned()]);
        }
    }

    // An override that repeats the method is harmless and forwarded.
    let response = lab.curl(&[
        "-H",
        auth,
        "-X",
        "POST",
        "-H",
        "X-HTTP-Method-Override: POST",
        &url,
    ]);
    assert_eq!(response.status, 200, "{}", response.body);
    let seen = lab.peer.server.requests().last().unwrap();
    assert_eq!(seen.method, "POST");
    lab.assert_clean(response.everything());
}

// ---------------------------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------------------------

/// A redirect is handed back, never followed (the upstream sees exactly one request, and the
/// other host none), and a `Location` that carries the secret (the echo server's `/echo-header`
/// reflects `Authorization` into it, and `/redirect` builds it from a query-site secret) is
/// scrubbed, as are `Set-Cookie` and other headers.
#[test]
fn redirects_are_returned_unfollowed_and_scrubbed() {
    let lab = Lab::start(
        EchoConfig::default(),
        |port| {
            format!(
                "  - id: echo-ip\n    effect: allow\n    match:\n      alias: [echo, q]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n    inject: [header, query]\n"
            )
        },
        &header_aliases(&[("echo", "127.0.0.1", "header"), ("q", "127.0.0.1", "query")]),
        &[("echo", CANARY), ("q", CANARY_Q)],
    );
    let port = lab.port();
    for status in ["301", "302", "303", "307", "308"] {
        let before = lab.forwarded();
        let response = lab.curl(&[
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            &lab.echo_url(&format!(
                "/redirect?status={status}&to=https%3A%2F%2Flocalhost%3A{port}%2Fecho%2Ffollowed"
            )),
        ]);
        assert_eq!(response.status.to_string(), status, "{}", response.body);
        assert_eq!(
            response.header("location"),
            Some(format!("https://localhost:{port}/echo/followed").as_str())
        );
        assert_eq!(lab.forwarded(), before + 1, "the redirect was followed");
        let id = response.header("mint-request-id").unwrap();
        let outcome = lab.broker.outcome_of(id);
        assert_eq!(outcome["outcome"], "completed");
        assert_eq!(outcome["status"].to_string(), status);
        lab.assert_clean(response.everything());
    }
    assert!(
        lab.peer
            .server
            .requests()
            .snapshot()
            .iter()
            .all(|r| !r.path.contains("followed"))
    );

    let response = lab.curl(&[
        "-H",
        "Authorization: Bearer {{mint:echo}}",
        &lab.echo_url("/echo-header"),
    ]);
    assert_eq!(response.status, 200, "{}", response.body);
    assert_eq!(
        response.header("location"),
        Some(format!("Bearer {MARKER}").as_str())
    );
    assert_eq!(
        response.header("set-cookie"),
        Some(format!("echo=Bearer {MARKER}").as_str())
    );
    assert_eq!(
        response.header("x-echo"),
        Some(format!("Bearer {MARKER}").as_str())
    );
    lab.assert_clean(response.everything());

    let response = lab.curl(&[&lab.echo_url(
        "/redirect?status=307&to=https%3A%2F%2Fevil.example%2Fsteal%3Fk%3D%7B%7Bmint%3Aq%7D%7D",
    )]);
    assert_eq!(response.status, 307, "{}", response.body);
    assert_eq!(
        response.header("location"),
        Some(format!("https://evil.example/steal?k={MARKER}").as_str())
    );
    assert_no_forms(&response.everything(), CANARY_Q);
    lab.assert_clean(response.everything());
}

/// `/echo-encoded` sends back every header value raw, JSON-escaped, as `\uXXXX`, in hex (both
/// cases), percent-encoded (both cases) and in base64 (standard and URL-safe, padded or not, at
/// all three alignments), in chunks of 1 to 7 bytes. None of the secret's forms reaches the
/// client; the same forms of a value that is no secret all do (which proves the forms checked are
/// the ones the upstream sent).
#[test]
fn echoed_encodings_of_the_secret_are_all_scrubbed() {
    let lab = Lab::start(
        EchoConfig::default(),
        |port| {
            format!(
                "  - id: echo-ip\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET, POST]\n"
            )
        },
        &header_aliases(&[("echo", "127.0.0.1", "header")]),
        &[("echo", CANARY)],
    );
    const CONTROL: &str = "control-Ab3d/Ef5g+Hi7j=Kl9m.No1~Pq";
    let response = lab.curl(&[
        "-H",
        "X-Token: {{mint:echo}}",
        "-H",
        &format!("X-Control: {CONTROL}"),
        &lab.echo_url("/echo-encoded"),
    ]);
    assert_eq!(response.status, 200, "{}", response.body);
    assert!(response.header("content-length").is_none());
    let seen = lab.peer.server.requests().last().unwrap();
    assert_eq!(seen.header("x-token"), Some(CANARY));
    let text = response.everything();
    for form in forms(CONTROL) {
        assert!(text.contains(&form), "the control form {form} is missing");
    }
    assert_no_forms(&text, CANARY);
    assert!(text.contains(MARKER));
    lab.assert_clean(&text);
}

/// The forms of `value` that `/echo-encoded` writes (see `mint_broker::demo::echo_upstream`), each
/// trimmed to characters that carry only the value's bits.
fn forms(value: &str) -> Vec<String> {
    let bytes = value.as_bytes();
    let mut out = vec![
        value.to_owned(),
        hex(bytes, false),
        hex(bytes, true),
        percent(value, true),
        percent(value, false),
        value
            .chars()
            .map(|c| format!("\\u{:04x}", c as u32))
            .collect::<String>(),
    ];
    for align in 0..3 {
        let mut input = vec![b'#'; align];
        input.extend_from_slice(bytes);
        for url_safe in [false, true] {
            let encoded = base64(&input, url_safe);
            // Characters 4.. come from bytes 3.., which are the value's alone for align <= 2;
            // 20 characters are 15 bytes, well inside the value.
            out.push(encoded[4..24].to_owned());
        }
    }
    out
}

/// Asserts that no form of `secret` is in `text`; the JSON-`\u` form is checked
/// case-insensitively.
#[track_caller]
fn assert_no_forms(text: &str, secret: &str) {
    for form in forms(secret) {
        assert!(!text.contains(&form), "a form of the secret leaked: {form}");
    }
    let lower = text.to_ascii_lowercase();
    for form in forms(secret) {
        if form.starts_with("\\u") {
            assert!(!lower.contains(&form), "a \\u form of the secret leaked");
        }
    }
}

fn hex(bytes: &[u8], upper: bool) -> String {
    bytes
        .iter()
        .map(|b| {
            if upper {
                format!("{b:02X}")
            } else {
                format!("{b:02x}")
            }
        })
        .collect()
}

fn percent_upper(value: &str) -> String {
    percent(value, true)
}

/// Every byte outside RFC 3986 unreserved as `%XX`.
fn percent(value: &str, upper: bool) -> String {
    value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                char::from(b).to_string()
            } else if upper {
                format!("%{b:02X}")
            } else {
                format!("%{b:02x}")
            }
        })
        .collect()
}

fn base64(bytes: &[u8], url_safe: bool) -> String {
    let alphabet: &[u8; 64] = if url_safe {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    } else {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    };
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(alphabet[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// A plain-HTTP upstream that remembers every `Authorization` it is sent and hands all of them
/// back on every later request, in its body (raw, base64, hex), in a header and in a cookie. The
/// first request carries alias `mem`'s placeholder; the second carries none, yet its answer holds
/// the secret: every loaded secret is scrubbed from every answer, not only the request's own.
#[test]
fn a_secret_handed_back_later_is_scrubbed_from_a_request_without_placeholders() {
    let upstream = ScriptedUpstream::start(Box::new(|request, earlier| {
        let mut remembered: Vec<String> = earlier
            .iter()
            .filter_map(|r| raw_header(r, "authorization"))
            .collect();
        remembered.extend(raw_header(request, "authorization"));
        let mut body = String::new();
        for value in &remembered {
            body.push_str(&format!(
                "raw={value}\nb64={}\nhex={}\n",
                base64(value.as_bytes(), false),
                hex(value.as_bytes(), false)
            ));
        }
        let header = remembered.last().cloned().unwrap_or_default();
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Remembered: {header}\r\nSet-Cookie: s={header}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }));
    let port = upstream.port();
    let dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(dir.path(), EchoConfig::default());
    let policy = format!(
        "version: 1\ndefault: deny\nrules:\n  - id: memory\n    effect: allow\n    match:\n      alias: [mem]\n      scheme: [http]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n  - id: memory-plain\n    effect: allow\n    match:\n      scheme: [http]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n"
    );
    let home = MintHome::new(
        &policy,
        &header_aliases(&[
            ("mem", "127.0.0.1", "header"),
            ("other", "localhost", "header"),
        ]),
        &[("mem", CANARY), ("other", CANARY_B)],
    );
    let cap = home.issue_capability("mino", &[]);
    let broker = home.serve(&peer.ca_file, &[]);
    let url = format!("{}/v1/proxy/http/127.0.0.1:{port}/data", broker.base);
    let cap_header = format!("Mint-Capability: {cap}");

    let first = curl(&[
        "-H",
        &cap_header,
        "-H",
        "Authorization: Bearer {{mint:mem}}",
        &url,
    ]);
    assert_eq!(first.status, 200, "{}", first.body);
    let second = curl(&["-H", &cap_header, &url]);
    assert_eq!(second.status, 200, "{}", second.body);
    let seen = upstream.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        raw_header(&seen[0], "authorization"),
        Some(format!("Bearer {CANARY}"))
    );
    assert_eq!(raw_header(&seen[1], "authorization"), None);
    assert!(second.body.contains(MARKER), "{}", second.body);
    for response in [&first, &second] {
        let text = response.everything();
        assert_no_forms(&text, CANARY);
        assert_no_forms(&text, &format!("Bearer {CANARY}"));
        for secret in [CANARY, CANARY_B, cap.as_str()] {
            assert!(!text.contains(secret));
            assert!(!broker.audit_text().contains(secret));
            assert!(!broker.stderr().contains(secret));
        }
    }
}

/// An upstream that reflects `Authorization` into its status line's reason phrase
/// (`HTTP/1.1 401 Bearer <secret>`): hyper's client keeps a non-canonical reason phrase as a
/// response extension and hyper's server writes it back, so Mint must scrub or drop it like any
/// header.
#[test]
fn a_secret_in_the_reason_phrase_is_scrubbed() {
    let upstream = ScriptedUpstream::start(Box::new(|request, _| {
        let reflected = raw_header(request, "authorization").unwrap_or_default();
        format!("HTTP/1.1 401 {reflected}\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno")
            .into_bytes()
    }));
    let port = upstream.port();
    let dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(dir.path(), EchoConfig::default());
    let policy = format!(
        "version: 1\ndefault: deny\nrules:\n  - id: reflect\n    effect: allow\n    match:\n      alias: [mem]\n      scheme: [http]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n"
    );
    let home = MintHome::new(
        &policy,
        &header_aliases(&[("mem", "127.0.0.1", "header")]),
        &[("mem", CANARY)],
    );
    let cap = home.issue_capability("mino", &[]);
    let broker = home.serve(&peer.ca_file, &[]);
    let request = format!(
        "GET /v1/proxy/http/127.0.0.1:{port}/data HTTP/1.1\r\nHost: {}\r\nMint-Capability: {cap}\r\nAuthorization: Bearer {{{{mint:mem}}}}\r\nConnection: close\r\n\r\n",
        broker.base.trim_start_matches("http://")
    );
    let response = raw_http(&broker.base, request.as_bytes());
    assert_eq!(response.status, 401, "{}", response.everything());
    assert_eq!(upstream.requests().len(), 1);
    let text = response.everything();
    assert!(
        !text.contains(CANARY),
        "the status line leaked the secret: {}",
        response.status_line
    );
    assert_no_forms(&text, CANARY);
    assert!(!broker.audit_text().contains(CANARY));
    assert!(!broker.stderr().contains(CANARY));
}

// ---------------------------------------------------------------------------------------------
// Forward-proxy mode
// ---------------------------------------------------------------------------------------------

fn forward_lab() -> Lab {
    Lab::start(
        EchoConfig::default().plain_http(),
        |port| {
            format!(
                "  - id: echo-forward\n    effect: allow\n    match:\n      alias: [echo]\n      scheme: [http]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n"
            )
        },
        &header_aliases(&[("echo", "127.0.0.1", "header")]),
        &[("echo", CANARY)],
    )
}

/// Forward-proxy mode (curl with `-x`, sending `GET http://127.0.0.1:PORT/echo`): the capability
/// travels in `Proxy-Authorization: Bearer`, the loopback target stays `http`, the secret is
/// substituted and neither the capability nor `Proxy-*` headers reach the upstream. Without
/// `Proxy-Authorization` (even with `Mint-Capability`) it is 407.
#[test]
fn forward_proxy_mode_authenticates_and_strips() {
    let lab = forward_lab();
    let target = format!("http://127.0.0.1:{}/echo?x=1", lab.port());
    let response = curl_via_proxy(
        &lab.broker.base,
        &[
            "--proxy-header",
            &format!("Proxy-Authorization: Bearer {}", lab.cap),
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            "-g",
            &target,
        ],
    );
    assert_eq!(response.status, 200, "{}", response.body);
    let seen = lab.peer.server.requests().last().unwrap();
    assert_eq!(seen.path, "/echo");
    assert_eq!(seen.query.as_deref(), Some("x=1"));
    assert_eq!(seen.version, "HTTP/1.1");
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {CANARY}").as_str())
    );
    assert!(seen.header_names_starting_with("proxy-").is_empty());
    assert!(seen.header_names_starting_with("mint-").is_empty());
    assert!(!seen.contains(&lab.cap));
    assert!(response.body.contains(MARKER));
    lab.assert_clean(response.everything());

    let before = lab.forwarded();
    let response = curl_via_proxy(
        &lab.broker.base,
        &[
            "-H",
            &format!("Mint-Capability: {}", lab.cap),
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            "-g",
            &target,
        ],
    );
    let answer = Answer::curl("forward mode without Proxy-Authorization", &response);
    assert_eq!(
        (answer.status, answer.code()),
        (407, Some("capability_invalid".to_owned()))
    );
    assert_eq!(lab.forwarded(), before);
    lab.assert_clean(&answer.text);
}

/// Forward-proxy mode: a `Host` header that differs from the absolute target's authority is
/// refused (400), as are userinfo and a fragment in the absolute target; a `CONNECT` to a host no
/// rule or alias names is 403 before any tunnel (issue 15). Nothing is forwarded.
#[test]
fn forward_proxy_host_mismatch_userinfo_and_connect_are_refused() {
    let lab = forward_lab();
    let port = lab.port();
    let cases = [
        (
            "Host mismatch",
            format!("GET http://127.0.0.1:{port}/echo HTTP/1.1\r\nHost: localhost:{port}\r\n"),
            400,
            "invalid_request",
        ),
        (
            "Host names another port",
            format!("GET http://127.0.0.1:{port}/echo HTTP/1.1\r\nHost: 127.0.0.1:1\r\n"),
            400,
            "invalid_request",
        ),
        (
            "userinfo",
            format!(
                "GET http://user@127.0.0.1:{port}/echo HTTP/1.1\r\nHost: user@127.0.0.1:{port}\r\n"
            ),
            400,
            "invalid_request",
        ),
        (
            "placeholder in the absolute path",
            format!(
                "GET http://127.0.0.1:{port}/echo/%7B%7Bmint%3Aecho%7D%7D HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            ),
            403,
            "site_not_allowed",
        ),
        (
            "CONNECT",
            "CONNECT unnamed.example.test:443 HTTP/1.1\r\nHost: unnamed.example.test:443\r\n"
                .to_owned(),
            403,
            "policy_denied",
        ),
    ];
    for (what, head, status, code) in cases {
        let before = lab.forwarded();
        let request = format!(
            "{head}Proxy-Authorization: Bearer {}\r\nAuthorization: Bearer {{{{mint:echo}}}}\r\nConnection: close\r\n\r\n",
            lab.cap
        );
        let response = raw_http(&lab.broker.base, request.as_bytes());
        let answer = Answer::raw(what, &response);
        lab.assert_refused(&answer, status, code, before);
    }
}

impl Answer {
    /// The `error.rules` of Mint's JSON error body.
    fn json_rules(&self) -> Vec<String> {
        let json: serde_json::Value = serde_json::from_str(&self.body).unwrap_or_default();
        json["error"]["rules"]
            .as_array()
            .map(|rules| {
                rules
                    .iter()
                    .filter_map(|r| r.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}
