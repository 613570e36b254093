//! Unit tests of `mint policy explain`: every decision path, the rendering (and that no header or
//! query value is ever printed), the audit-log replay, and parity with the real proxy router.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use mint_policy::aliases::{AliasFile, load_aliases};
use std::num::NonZeroU16;

use mint_policy::audit::{
    self, AgentName, AliasName, AuditDecision, AuditRecord, ChainHash, HttpStatus, Outcome,
    ReasonCode, RequestId, RuleId, Timestamp, UrlPath,
};
use mint_policy::evaluate::{CompiledPolicy, DenyReason, Evaluation};
use mint_policy::limits::Limiter;
use mint_policy::policy::load_policy;
use mint_policy::site::Site;

use super::budget::{BudgetSource, replay, unix_time};
use super::render;
use super::*;
use crate::audit::{AuditConfig, AuditLog};

const POLICY: &str = r#"
version: 1
default: deny
rules:
  - id: gh-read
    effect: allow
    match:
      agent: [mino, "ci-*"]
      alias: [github]
      host: api.github.com
      method: [GET, POST]
      path: ["/user", "/repos/**"]
    limits:
      - { max: 3, per: 1h, by: [agent] }
  - id: gh-search
    effect: allow
    match:
      agent: mino
      alias: [search]
      host: api.github.com
      method: GET
      path: /search/*
    inject: [query]
  - id: gh-body
    effect: allow
    match:
      agent: mino
      alias: [github]
      host: api.github.com
      method: POST
      path: /graphql
    inject: [body]
  - id: no-deletes
    effect: deny
    match:
      host: api.github.com
      method: DELETE
  - id: no-hooks
    effect: deny
    match:
      path: "/repos/*/*/hooks/**"
  - id: mcp-endpoint
    effect: allow
    match:
      agent: mino
      host: mcp.example.com
      method: POST
      path: /mcp
  - id: mcp-docs
    effect: allow
    match:
      agent: mino
      host: mcp.example.com
      method: POST
      path: /mcp
      tool: [query-docs]
    limits:
      - { max: 5, per: 1d, by: [tool] }
  - id: local
    effect: allow
    match:
      agent: mino
      scheme: http
      host: "127.0.0.1"
      port: [LOCAL_PORT]
      method: [GET, POST]
      path: ["/**"]
  - id: gh-gists-ask
    effect: approve
    match:
      agent: mino
      alias: [github]
      host: api.github.com
      method: PATCH
      path: /gists/*
    approval: { timeout: 45s }
    limits:
      - { max: 2, per: 1h }
  - id: mcp-purge-ask
    effect: approve
    match:
      agent: mino
      host: mcp.example.com
      method: POST
      path: /mcp
      tool: ["purge-*"]
  - id: hourly
    effect: limit
    match:
      alias: github
    limits:
      - { max: 10, per: 1h }
call_limits:
  "tool:query-docs": 7
"#;

const ALIASES: &str = r#"
aliases:
  - name: github
    hosts: [api.github.com]
    sites: [header, {body: [/token, /b]}, {form: [client_secret]}]
  - name: search
    hosts: [api.github.com]
    sites: [query]
  - name: slack
    hosts: [slack.com]
"#;

/// A port nothing listens on in the parity test; the other tests never connect.
const LOCAL_PORT: u16 = 9;

const CANARY: &str = "mintcanary5e1d";

#[track_caller]
fn policy_with_port(port: u16) -> CompiledPolicy {
    let text = POLICY.replace("LOCAL_PORT", &port.to_string());
    let load = load_policy(text.as_bytes(), "policy.yaml");
    assert!(
        !has_errors(&load.diagnostics),
        "{:?}",
        load.diagnostics.first()
    );
    CompiledPolicy::new(load.policy.unwrap())
}

fn policy() -> CompiledPolicy {
    policy_with_port(LOCAL_PORT)
}

#[track_caller]
fn policy_text(text: &str) -> CompiledPolicy {
    let load = load_policy(text.as_bytes(), "policy.yaml");
    CompiledPolicy::new(load.policy.unwrap())
}

fn aliases() -> AliasFile {
    load_aliases(ALIASES.as_bytes(), "aliases.yaml")
        .aliases
        .unwrap()
}

/// A request; headers as `name: value` pairs.
#[track_caller]
fn request(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> ExplainRequest {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    ExplainRequest {
        agent: "mino".to_owned(),
        method: Method::from_bytes(method.as_bytes()).unwrap(),
        url: url.to_owned(),
        headers: map,
        tool: None,
        body: body.to_vec(),
    }
}

fn get(url: &str, headers: &[(&str, &str)]) -> ExplainRequest {
    request("GET", url, headers, b"")
}

const AUTH: (&str, &str) = ("authorization", "Bearer {{mint:github}}");
const JSON: (&str, &str) = ("content-type", "application/json");

/// Explains with fresh counters.
fn explain_fresh(request: &ExplainRequest) -> Explanation {
    explain_with(request, Limiter::new())
}

fn explain_with(request: &ExplainRequest, limiter: Limiter) -> Explanation {
    let policy = policy();
    let mut x = examine(&policy, &aliases(), request, 10 << 20);
    x.count_limits(&policy, limiter, NOW);
    x
}

const NOW: Duration = Duration::from_secs(1_800_000_000);

/// The refusal's status and code, or `allow`.
fn answer(x: &Explanation) -> String {
    match &x.verdict {
        Verdict::Allow { .. } => "allow".to_owned(),
        Verdict::Approve { .. } => "approve".to_owned(),
        Verdict::Tunnel { .. } => "tunnel".to_owned(),
        Verdict::Refused(error) => format!("{} {}", error.status().as_u16(), error.code()),
    }
}

#[track_caller]
fn assert_refused(x: &Explanation, expected: &str) {
    assert_eq!(answer(x), expected, "{x:?}");
    assert!(x.limits.is_empty(), "a refusal consumes nothing: {x:?}");
}

// --- Decision paths ------------------------------------------------------------------------------

#[test]
fn allow_reports_rules_aliases_and_full_budgets() {
    let x = explain_fresh(&get("https://api.github.com/user", &[AUTH]));
    assert_eq!(answer(&x), "allow");
    assert_eq!(x.verdict.decision(), "allow");
    assert_eq!(x.verdict.rules(), Some(&["gh-read".to_owned()][..]));
    assert_eq!(x.aliases.len(), 1);
    let alias = &x.aliases[0];
    assert_eq!(alias.name, "github");
    assert_eq!(
        alias.places,
        [Placement {
            part: Part::Header(HeaderName::from_static("authorization")),
            place: Place::Site(Site::Header),
            offset: 7,
            matched: None,
        }]
    );
    let binding = alias.declaration.as_ref().unwrap();
    assert_eq!(binding.hosts, ["api.github.com"]);
    assert_eq!(binding.bound, Some(true));
    let limits: Vec<(&str, u64, u64)> = x
        .limits
        .iter()
        .map(|l| (l.rule.as_str(), l.max, l.remaining))
        .collect();
    assert_eq!(limits, [("gh-read", 3, 3), ("hourly", 10, 10)]);
    assert_eq!(x.limits[0].by, [("agent", "mino".to_owned())]);
    assert!(x.limits[1].by.is_empty());
}

/// An approve rule holds the request: explain names the approve rules, the timeout, and the limits
/// the request would consume once approved, without consuming or refusing on them.
#[test]
fn approve_reports_the_hold_its_timeout_and_its_limits() {
    let x = explain_fresh(&request(
        "PATCH",
        "https://api.github.com/gists/1",
        &[AUTH],
        b"",
    ));
    assert_eq!(answer(&x), "approve", "{x:?}");
    assert_eq!(x.verdict.decision(), "approve");
    assert!(!x.verdict.is_allow());
    assert_eq!(x.verdict.rules(), Some(&["gh-gists-ask".to_owned()][..]));
    let Verdict::Approve {
        timeout,
        allow_rules,
        limited,
        ..
    } = &x.verdict
    else {
        panic!("{x:?}");
    };
    assert_eq!(*timeout, Duration::from_secs(45));
    assert!(allow_rules.is_empty() && limited.is_empty());
    let limits: Vec<(&str, u64, u64)> = x
        .limits
        .iter()
        .map(|l| (l.rule.as_str(), l.max, l.remaining))
        .collect();
    assert_eq!(limits, [("gh-gists-ask", 2, 2), ("hourly", 10, 10)]);
    let human = render::human(&x, &BudgetSource::NotNeeded);
    assert!(
        human.starts_with("approve: PATCH https://api.github.com/gists/1\n"),
        "{human}"
    );
    assert!(
        human.contains(
            "approval waits up to 45 s for the operator's decision (approve rule: gh-gists-ask)"
        ),
        "{human}"
    );
    assert!(human.contains("until the operator approves"), "{human}");
    assert!(
        !human.contains("{{mint:") && !human.contains("Bearer"),
        "{human}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&render::json(&x, &BudgetSource::NotNeeded)).unwrap();
    assert_eq!(json["decision"], "approve", "{json}");
    assert_eq!(json["approval"]["rules"][0], "gh-gists-ask", "{json}");
    assert_eq!(json["approval"]["timeout_seconds"], 45, "{json}");
    assert_eq!(json["evaluations"][0]["decision"], "approve", "{json}");
    assert_eq!(json["status"], serde_json::Value::Null, "{json}");

    // A spent limit of the approve rule: still held (the broker counts once approved), noted.
    let mut limiter = Limiter::new();
    let policy = policy();
    for at in 0..2 {
        limiter
            .admit(&x.charges()[..1], NOW - Duration::from_secs(60 - at))
            .unwrap();
    }
    let mut spent = examine(
        &policy,
        &aliases(),
        &request("PATCH", "https://api.github.com/gists/1", &[AUTH], b""),
        10 << 20,
    );
    spent.count_limits(&policy, limiter, NOW);
    let Verdict::Approve { limited, .. } = &spent.verdict else {
        panic!("{spent:?}");
    };
    assert_eq!(limited, &["gh-gists-ask".to_owned()]);
    let human = render::human(&spent, &BudgetSource::NotNeeded);
    assert!(
        human.contains("approved now, it would be refused: the limits of gh-gists-ask are spent"),
        "{human}"
    );

    // An MCP call of a tool an approve rule names, read from the body.
    let x = explain_fresh(&request(
        "POST",
        "https://mcp.example.com/mcp",
        &[JSON],
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"purge-cache"}}"#,
    ));
    assert_eq!(answer(&x), "approve", "{x:?}");
    assert_eq!(x.verdict.rules(), Some(&["mcp-purge-ask".to_owned()][..]));
    let human = render::human(&x, &BudgetSource::NotNeeded);
    assert!(
        human.contains(
            "waits up to 120 s for the operator's decision (approve rule: mcp-purge-ask)"
        ),
        "{human}"
    );
    // The endpoint's allow rule names no tool, so no allow rule applies besides the hold.
    assert!(!human.contains("also under"), "{human}");
}

#[test]
fn default_allow_decides_without_rules() {
    let policy = policy_text("version: 1\ndefault: allow\nrules: []\n");
    let mut x = examine(
        &policy,
        &aliases(),
        &get("https://example.com/", &[]),
        10 << 20,
    );
    x.count_limits(&policy, Limiter::new(), NOW);
    assert_eq!(answer(&x), "allow");
    assert_eq!(x.verdict.rules(), Some(&[][..]));
    // The default never admits an alias.
    let x = examine(
        &policy,
        &aliases(),
        &get("https://api.github.com/user", &[AUTH]),
        10 << 20,
    );
    assert_refused(&x, "403 policy_denied");
    let Verdict::Refused(ProxyError::PolicyDenied { reason, rules, .. }) = &x.verdict else {
        panic!("{x:?}");
    };
    assert_eq!(*reason, DenyReason::DefaultAllowUsesAlias);
    assert!(rules.is_empty());
}

#[test]
fn deny_rules_override_allow_rules() {
    let x = explain_fresh(&get(
        "https://api.github.com/repos/acme/app/hooks/1",
        &[AUTH],
    ));
    assert_refused(&x, "403 policy_denied");
    assert_eq!(x.verdict.rules(), Some(&["no-hooks".to_owned()][..]));
    let Verdict::Refused(ProxyError::PolicyDenied { reason, .. }) = &x.verdict else {
        panic!("{x:?}");
    };
    assert_eq!(*reason, DenyReason::DenyRule);
    // The evaluation shows the deny that won, not the allow it beat.
    assert!(matches!(
        &x.evaluations[..],
        [CallReport {
            tool: None,
            evaluation: Evaluation::Deny(_)
        }]
    ));

    let x = explain_fresh(&request(
        "DELETE",
        "https://api.github.com/repos/a/b",
        &[],
        b"",
    ));
    assert_eq!(x.verdict.rules(), Some(&["no-deletes".to_owned()][..]));
}

#[test]
fn no_allow_rule_is_the_default_deny() {
    let x = explain_fresh(&get("https://example.com/", &[]));
    assert_refused(&x, "403 policy_denied");
    assert_eq!(x.verdict.rules(), Some(&[][..]));
    // Every alias the request uses must be listed by the allow rule.
    let x = explain_fresh(&get("https://api.github.com/search/code", &[AUTH]));
    assert_refused(&x, "403 policy_denied");
    assert_eq!(x.verdict.rules(), Some(&[][..]));
    assert_eq!(x.evaluations.len(), 1);
    // A site the alias allows but the rule's `inject` does not.
    let x = explain_fresh(&request(
        "POST",
        "https://api.github.com/user",
        &[JSON],
        br#"{"token":"{{mint:github}}"}"#,
    ));
    assert_refused(&x, "403 policy_denied");
    let x = explain_fresh(&request(
        "POST",
        "https://api.github.com/graphql",
        &[JSON],
        br#"{"token":"{{mint:github}}"}"#,
    ));
    assert_eq!(answer(&x), "allow", "{x:?}");
    assert_eq!(x.aliases[0].places[0].place, Place::Site(Site::Body));
}

#[test]
fn target_problems_are_refused_as_the_proxy_refuses_them() {
    for (url, expected) in [
        ("http://api.github.com/user", "400 invalid_request"),
        ("https://api.github.com/a/../user", "400 invalid_request"),
        ("https://api.github.com/user#frag", "400 invalid_request"),
        ("https://user@api.github.com/user", "400 invalid_request"),
        ("https://api.github.com:0/user", "400 invalid_request"),
        ("https://API.github.com//user", "400 invalid_request"),
        ("ftp://api.github.com/user", "400 invalid_request"),
        (
            "https://{{mint:github}}.example.com/",
            "403 site_not_allowed",
        ),
        (
            "https://api.github.com/{{mint:github}}",
            "403 site_not_allowed",
        ),
        (
            "https://api.github.com/user?x={{mint:git",
            "400 malformed_placeholder",
        ),
    ] {
        let x = explain_fresh(&get(url, &[]));
        assert_refused(&x, expected);
        assert_eq!(x.verdict.decision(), "deny", "{url}");
        assert_eq!(
            x.verdict.rules(),
            None,
            "{url}: the policy is not consulted"
        );
        assert!(x.evaluations.is_empty(), "{url}");
    }
    let x = explain_fresh(&get("http://api.github.com/user", &[]));
    let Verdict::Refused(error) = &x.verdict else {
        panic!()
    };
    assert_eq!(
        error.to_string(),
        "invalid target: plain `http` is allowed only to loopback hosts; use `https`"
    );
    assert!(x.target.is_none());
    // Canonical forms are what is matched and reported.
    let x = explain_fresh(&get("https://API.GitHub.com./us%65r", &[AUTH]));
    assert_eq!(answer(&x), "allow", "{x:?}");
    assert_eq!(
        x.target.as_ref().unwrap().url(),
        "https://api.github.com/user"
    );
    let x = explain_fresh(&get("http://127.0.0.1:9/x", &[]));
    assert_eq!(answer(&x), "allow", "{x:?}");
}

#[test]
fn placeholder_problems_follow_the_proxy_order() {
    // Unknown alias: 400, reported with no declaration.
    let x = explain_fresh(&get(
        "https://api.github.com/user",
        &[("x-a", "{{mint:nope}}")],
    ));
    assert_refused(&x, "400 unknown_alias");
    assert_eq!(x.aliases[0].name, "nope");
    assert_eq!(x.aliases[0].declaration, None);
    // Percent-encoded in a header: a forbidden place.
    let x = explain_fresh(&request(
        "POST",
        "https://api.github.com/user",
        &[("authorization", "Bearer %7B%7Bmint%3Agithub%7D%7D")],
        b"",
    ));
    assert_refused(&x, "403 site_not_allowed");
    assert!(
        matches!(x.aliases[0].places[0].place, Place::Forbidden(_)),
        "{x:?}"
    );
    // A JSON key, a body that is not JSON: inert, listed as skipped, never a refusal of its own.
    for (headers, body, place) in [
        (&[JSON][..], &br#"{"{{mint:github}}":1}"#[..], "json_key"),
        (
            &[("content-type", "text/plain")][..],
            &b"token={{mint:github}}"[..],
            "text",
        ),
    ] {
        let x = explain_fresh(&request(
            "POST",
            "https://api.github.com/user",
            headers,
            body,
        ));
        assert!(x.aliases.is_empty(), "{x:?}");
        let skipped: Vec<(&str, &str)> = x
            .skipped
            .listed()
            .iter()
            .map(|(alias, place)| (alias.as_str(), place.as_str()))
            .collect();
        assert_eq!(skipped, [("github", place)]);
        assert_eq!(x.skipped.count(), 1);
        // Allowed by a rule that admits no alias: a quote uses none.
        assert_eq!(
            x.verdict.rules(),
            Some(&["gh-read".to_owned()][..]),
            "{x:?}"
        );
    }
    // Bound elsewhere; a site the alias does not allow.
    let x = explain_fresh(&get(
        "https://api.github.com/user",
        &[("x-a", "{{mint:slack}}")],
    ));
    assert_refused(&x, "403 alias_not_bound");
    assert_eq!(
        x.aliases[0].declaration.as_ref().unwrap().bound,
        Some(false)
    );
    let x = explain_fresh(&get(
        "https://api.github.com/search/code?q=x&key={{mint:github}}",
        &[],
    ));
    assert_refused(&x, "403 site_not_allowed");
    let Verdict::Refused(error) = &x.verdict else {
        panic!()
    };
    assert_eq!(
        error.to_string(),
        "alias `github` may not be placed in the query site (the alias allows header, body)"
    );
    let x = explain_fresh(&get(
        "https://api.github.com/search/code?q=x&key={{mint:search}}",
        &[],
    ));
    assert_eq!(answer(&x), "allow", "{x:?}");
    assert_eq!(x.verdict.rules(), Some(&["gh-search".to_owned()][..]));
    // Too many placeholders.
    let many: Vec<(String, String)> = (0..17)
        .map(|n| (format!("x-{n}"), "{{mint:github}}".to_owned()))
        .collect();
    let pairs: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_refused(
        &explain_fresh(&get("https://api.github.com/user", &pairs)),
        "400 invalid_request",
    );
}

#[test]
fn stripped_headers_are_not_scanned() {
    // The proxy drops these before scanning: a placeholder there is neither used nor refused.
    let x = explain_fresh(&get(
        "https://example.com/",
        &[
            ("mint-capability", "{{mint:nope}}"),
            ("proxy-authorization", "{{mint:nope}}"),
            ("connection", "x-hop"),
            ("x-hop", "{{mint:nope}}"),
        ],
    ));
    assert!(x.aliases.is_empty(), "{x:?}");
    assert_refused(&x, "403 policy_denied");
}

#[test]
fn method_and_framing_checks() {
    for (method, headers, query, expected) in [
        ("get", &[][..], "", "400 invalid_request"),
        // A CONNECT names an authority, not a URL.
        ("CONNECT", &[][..], "", "400 invalid_request"),
        (
            "GET",
            &[("x-http-method-override", "DELETE")][..],
            "",
            "400 invalid_request",
        ),
        (
            "GET",
            &[("upgrade", "websocket")][..],
            "",
            "400 invalid_request",
        ),
        (
            "GET",
            &[("content-length", "1"), ("content-length", "1")][..],
            "",
            "400 invalid_request",
        ),
        ("GET", &[][..], "?_method=DELETE", "400 invalid_request"),
        ("GET", &[AUTH][..], "?_method=GET", "allow"),
    ] {
        let url = format!("https://api.github.com/user{query}");
        let x = explain_fresh(&request(method, &url, headers, b""));
        assert_eq!(answer(&x), expected, "{method} {headers:?} {query}");
    }
}

#[test]
fn connect_is_decided_as_the_broker_decides_it_before_the_200() {
    let connect = |agent: &str, authority: &str| {
        let mut request = request("CONNECT", authority, &[], b"");
        request.agent = agent.to_owned();
        explain_fresh(&request)
    };
    for (agent, authority, expected, host) in [
        // Allow rules could match (and `github` is bound there).
        ("mino", "api.github.com:443", "tunnel", "api.github.com"),
        // Canonicalized like every target.
        ("mino", "API.GitHub.com.:443", "tunnel", "api.github.com"),
        // Only allow rules could match (no alias is bound there).
        ("mino", "mcp.example.com:443", "tunnel", "mcp.example.com"),
        // Only an alias is bound there: its agent, port and rules do not matter.
        ("mino", "slack.com:443", "tunnel", "slack.com"),
        ("someone", "api.github.com:8443", "tunnel", "api.github.com"),
        // Neither: the rules name another agent or port, or no rule names the host.
        (
            "someone",
            "mcp.example.com:443",
            "403 policy_denied",
            "mcp.example.com",
        ),
        (
            "mino",
            "mcp.example.com:8443",
            "403 policy_denied",
            "mcp.example.com",
        ),
        (
            "mino",
            "elsewhere.example:443",
            "403 policy_denied",
            "elsewhere.example",
        ),
    ] {
        let x = connect(agent, authority);
        assert_eq!(answer(&x), expected, "{agent} {authority}: {x:?}");
        assert_eq!(x.target.as_ref().unwrap().host.as_text(), host);
        assert!(x.aliases.is_empty() && x.evaluations.is_empty() && x.limits.is_empty());
        if let Verdict::Refused(error) = &x.verdict {
            assert_eq!(error.reason(), "no_allow_rule", "{agent} {authority}");
        }
    }
    // Not authority-form `host:port`: the broker's 400.
    for authority in [
        "api.github.com",
        "https://api.github.com:443/",
        "user@api.github.com:443",
    ] {
        let x = connect("mino", authority);
        assert_refused(&x, "400 invalid_request");
    }
}

#[test]
fn a_tunnel_is_rendered_with_what_decides_the_requests_inside() {
    let x = connect_explained("api.github.com:443");
    let human = render::human(&x, &BudgetSource::NotNeeded);
    assert!(
        human.starts_with("allow: CONNECT api.github.com:443\n"),
        "{human}"
    );
    assert!(
        human.contains("could allow requests inside; each is decided on its own"),
        "{human}"
    );
    assert!(
        human.contains("`--method GET --url https://api.github.com:443/PATH`"),
        "{human}"
    );
    assert!(
        human.contains("the addresses the host resolves to"),
        "{human}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&render::json(&x, &BudgetSource::NotNeeded)).unwrap();
    assert_eq!(json["decision"], "allow", "{json}");
    assert_eq!(json["tunnel"], true, "{json}");
    assert_eq!(json["method"], "CONNECT", "{json}");
    assert_eq!(json["target"]["host"], "api.github.com", "{json}");
    // The allow rules that could admit a request inside: what the tunnel's decision record names.
    let rules = json["rules"].as_array().unwrap();
    assert!(!rules.is_empty(), "{json}");
    for rule in rules {
        assert!(human.contains(rule.as_str().unwrap()), "{human}");
    }

    let x = connect_explained("elsewhere.example:443");
    let human = render::human(&x, &BudgetSource::NotNeeded);
    assert!(
        human.starts_with("deny: CONNECT elsewhere.example:443\n"),
        "{human}"
    );
    assert!(human.contains("403 policy_denied"), "{human}");
    let json: serde_json::Value =
        serde_json::from_str(&render::json(&x, &BudgetSource::NotNeeded)).unwrap();
    assert_eq!(json["tunnel"], false, "{json}");
    assert_eq!(json["reason"], "no_allow_rule", "{json}");
    // A request, as before, is no tunnel.
    let x = explain_fresh(&get("https://api.github.com/user", &[AUTH]));
    let json: serde_json::Value =
        serde_json::from_str(&render::json(&x, &BudgetSource::NotNeeded)).unwrap();
    assert_eq!(json["tunnel"], false, "{json}");
}

fn connect_explained(authority: &str) -> Explanation {
    explain_fresh(&request("CONNECT", authority, &[], b""))
}

#[test]
fn connect_arguments_take_an_authority_and_no_tool_or_body() {
    use clap::Parser as _;
    let args = |extra: &[&str]| {
        let mut argv = vec![
            "mint", "policy", "explain", "--agent", "mino", "--method", "CONNECT",
        ];
        argv.extend_from_slice(extra);
        match crate::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::cli::Command::Policy(crate::cli::policy::PolicyCommand::Explain(args)) => *args,
            other => panic!("{other:?}"),
        }
    };
    let ok = args(&["--url", "api.github.com:443"])
        .request(1 << 20)
        .unwrap();
    assert_eq!(ok.method, Method::CONNECT);
    for extra in [
        &["--url", "https://api.github.com:443"][..],
        &["--url", "api.github.com:443/x"],
        &["--url", "api.github.com:443", "--tool", "query-docs"],
    ] {
        let error = args(extra).request(1 << 20).unwrap_err();
        assert!(
            matches!(error, ExplainError::Usage(_)),
            "{extra:?}: {error}"
        );
    }
}

#[test]
fn body_over_the_limit_is_413() {
    let policy = policy();
    let x = examine(
        &policy,
        &aliases(),
        &request("POST", "https://api.github.com/user", &[], &[b' '; 11]),
        10,
    );
    assert_refused(&x, "413 body_too_large");
}

#[test]
fn mcp_calls_are_evaluated_one_by_one() {
    let call = |name: &str, id: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}"}}}}"#
        )
    };
    let post = |body: String| {
        request(
            "POST",
            "https://mcp.example.com/mcp",
            &[JSON],
            body.as_bytes(),
        )
    };
    // One allowed call.
    let x = explain_fresh(&post(call("query-docs", 1)));
    assert_eq!(answer(&x), "allow", "{x:?}");
    assert_eq!(x.tools, ["query-docs"]);
    assert_eq!(x.tool_source, Some(ToolSource::Body));
    assert_eq!(x.verdict.rules(), Some(&["mcp-docs".to_owned()][..]));
    let rules: Vec<&str> = x.limits.iter().map(|l| l.rule.as_str()).collect();
    assert_eq!(rules, ["mcp-docs", "call_limits:tool:query-docs"]);
    assert_eq!(x.limits[0].by, [("tool", "query-docs".to_owned())]);
    // A batch holding a denied tool is denied, and each call is reported.
    let x = explain_fresh(&post(format!(
        "[{},{}]",
        call("query-docs", 1),
        call("drop-db", 2)
    )));
    assert_refused(&x, "403 policy_denied");
    let outcomes: Vec<(Option<&str>, bool)> = x
        .evaluations
        .iter()
        .map(|c| {
            (
                c.tool.as_deref(),
                matches!(c.evaluation, Evaluation::Allow(_)),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [(Some("query-docs"), true), (Some("drop-db"), false)]
    );
    // A batch with other messages is also evaluated without a tool.
    let x = explain_fresh(&post(format!(
        r#"[{},{{"jsonrpc":"2.0","method":"notifications/initialized"}}]"#,
        call("query-docs", 1)
    )));
    assert_eq!(answer(&x), "allow", "{x:?}");
    assert_eq!(x.evaluations.len(), 2);
    assert_eq!(x.evaluations[1].tool, None);
    assert_eq!(
        x.verdict.rules(),
        Some(&["mcp-docs".to_owned(), "mcp-endpoint".to_owned()][..])
    );
    // A body the proxy cannot read safely is refused.
    let x = explain_fresh(&post(r#"{"method":"tools/call","method":"x"}"#.to_owned()));
    assert_refused(&x, "400 invalid_request");
    // --tool overrides the body.
    let mut flagged = post(String::new());
    flagged.tool = Some("drop-db".to_owned());
    let x = explain_fresh(&flagged);
    assert_eq!(x.tool_source, Some(ToolSource::Flag));
    assert_refused(&x, "403 policy_denied");
    flagged.tool = Some("query-docs".to_owned());
    assert_eq!(answer(&explain_fresh(&flagged)), "allow");
}

#[test]
fn spent_counters_limit_and_used_ones_show() {
    let x = explain_fresh(&get("https://api.github.com/user", &[AUTH]));
    let charges = x.charges().to_vec();
    let mut limiter = Limiter::new();
    limiter
        .admit(&charges, NOW - Duration::from_secs(600))
        .unwrap();
    let x = explain_with(&get("https://api.github.com/user", &[AUTH]), limiter);
    assert_eq!(answer(&x), "allow");
    assert_eq!(x.limits[0].remaining, 2);
    assert_eq!(x.limits[1].remaining, 9);

    let mut limiter = Limiter::new();
    for minutes in [50, 40, 30] {
        limiter
            .admit(&charges, NOW - Duration::from_secs(minutes * 60))
            .unwrap();
    }
    let x = explain_with(&get("https://api.github.com/user", &[AUTH]), limiter);
    assert_eq!(answer(&x), "429 limited");
    assert_eq!(x.verdict.decision(), "limited");
    assert_eq!(x.verdict.rules(), Some(&["gh-read".to_owned()][..]));
    assert_eq!(x.limits[0].remaining, 0);
    let Verdict::Refused(ProxyError::Limited { retry_after, .. }) = &x.verdict else {
        panic!()
    };
    // The admission 50 minutes ago leaves the hour in 10 minutes.
    assert_eq!(*retry_after, Duration::from_secs(600));
}

// --- Rendering ------------------------------------------------------------------------------------

fn human(x: &Explanation) -> String {
    render::human(x, &BudgetSource::NotNeeded)
}

#[test]
fn human_report_is_aligned_and_names_the_decision() {
    let x = explain_fresh(&get("https://api.github.com/user?page=2", &[AUTH]));
    let text = render::human(
        &x,
        &BudgetSource::NoLog {
            path: "audit.log".into(),
        },
    );
    let expected = "\
allow: GET https://api.github.com/user
  rules    gh-read
  agent    mino
  query    page (values not shown)
  tool     (none: not an MCP tools/call)
  aliases  github
             header `authorization`, byte 7: header site
             bound to api.github.com (this host matches); sites: header, body
  limits   gh-read  per agent=mino  3 per 1h   3 left
           hourly   one counter     10 per 1h  10 left
";
    assert!(text.starts_with(expected), "{text}");
    assert!(text.contains("note: budgets are full windows"), "{text}");
    assert!(text.contains("`audit.log`"), "{text}");

    let text = human(&explain_fresh(&get("https://example.com/", &[])));
    assert!(
        text.starts_with("deny: GET https://example.com/\n  status   403 policy_denied\n"),
        "{text}"
    );
    assert!(text.contains("\n  rules    (default)\n"), "{text}");
    let text = human(&explain_fresh(&get("http://example.com/", &[])));
    assert!(text.contains("(policy not consulted)"), "{text}");
    assert!(text.contains("400 invalid_request"), "{text}");
}

#[test]
fn json_report_has_one_object_with_the_documented_fields() {
    let x = explain_fresh(&get("https://api.github.com/user", &[AUTH]));
    let value: serde_json::Value =
        serde_json::from_str(&render::json(&x, &BudgetSource::NotNeeded)).unwrap();
    assert_eq!(value["decision"], "allow");
    assert_eq!(value["status"], serde_json::Value::Null);
    assert_eq!(value["rules"], serde_json::json!(["gh-read"]));
    assert_eq!(value["by_default"], false);
    assert_eq!(value["target"]["url"], "https://api.github.com/user");
    assert_eq!(value["aliases"][0]["places"][0]["header"], "authorization");
    assert_eq!(value["aliases"][0]["places"][0]["site"], "header");
    assert_eq!(value["aliases"][0]["bound"], true);
    assert_eq!(value["limits"][0]["by"]["agent"], "mino");
    assert_eq!(value["limits"][0]["per"], "1h");
    assert_eq!(value["limits"][0]["remaining"], 3);
    assert_eq!(value["budgets"]["source"], "not_needed");

    let x = explain_fresh(&request("DELETE", "https://api.github.com/x", &[], b""));
    let value: serde_json::Value =
        serde_json::from_str(&render::json(&x, &BudgetSource::NotNeeded)).unwrap();
    assert_eq!(value["decision"], "deny");
    assert_eq!(value["status"], 403);
    assert_eq!(value["code"], "policy_denied");
    assert_eq!(value["reason"], "deny_rule");
    assert_eq!(value["rules"], serde_json::json!(["no-deletes"]));

    let x = explain_fresh(&get("http://example.com/", &[]));
    let value: serde_json::Value =
        serde_json::from_str(&render::json(&x, &BudgetSource::NotNeeded)).unwrap();
    assert_eq!(value["rules"], serde_json::Value::Null);
    assert_eq!(value["reason"], "invalid_target");
    assert_eq!(value["target"], serde_json::Value::Null);
}

#[test]
fn no_header_or_query_value_is_ever_printed() {
    let secret_header = ("x-api-key", CANARY);
    let cases = [
        get(
            &format!("https://api.github.com/user?token={CANARY}"),
            &[AUTH, secret_header],
        ),
        get(
            &format!("http://api.github.com/user?token={CANARY}"),
            &[secret_header],
        ),
        get(
            &format!("https://api.github.com/user?{CANARY}x={{{{mint:git"),
            &[],
        ),
        get(
            "https://api.github.com/user",
            &[("authorization", &format!("{CANARY} {{{{mint:slack}}}}"))],
        ),
        request(
            "POST",
            "https://api.github.com/graphql",
            &[JSON],
            format!(r#"{{"a":"{CANARY}","b":"{{{{mint:github}}}}"}}"#).as_bytes(),
        ),
    ];
    for request in &cases {
        let x = explain_fresh(request);
        for text in [
            human(&x),
            render::json(&x, &BudgetSource::NotNeeded),
            format!("{x:?}"),
            format!("{request:?}"),
        ] {
            // The query key holding the canary is a name, which is shown; values never are.
            let without_key = text.replace(&format!("{CANARY}x"), "");
            assert!(!without_key.contains(CANARY), "{text}");
        }
    }
}

// --- Audit log replay -----------------------------------------------------------------------------

fn decision(id: &str, at: Duration, decision: AuditDecision, rule: &str) -> String {
    let mut record = AuditRecord::decision(
        Timestamp::from_unix_millis(at.as_millis() as u64).unwrap(),
        RequestId::new(id).unwrap(),
        decision,
        ChainHash::genesis(),
    );
    record.agent = Some(AgentName::new("mino").unwrap());
    record.method = Some(audit::Method::new("GET").unwrap());
    record.scheme = Some(audit::Scheme::new("https").unwrap());
    record.host = Some(audit::Host::new("api.github.com").unwrap());
    record.port = NonZeroU16::new(443);
    record.path = Some(UrlPath::new("/user").unwrap());
    record.aliases = vec![AliasName::new("github").unwrap()];
    record.rule = Some(vec![RuleId::new(rule).unwrap()]);
    if decision != AuditDecision::Allow {
        record.reason = Some(ReasonCode::new("policy_denied").unwrap());
    }
    record.check().unwrap();
    record.to_line()
}

fn outcome(id: &str, at: Duration, outcome: Outcome) -> String {
    let mut record = AuditRecord::outcome(
        Timestamp::from_unix_millis(at.as_millis() as u64).unwrap(),
        RequestId::new(id).unwrap(),
        outcome,
        ChainHash::genesis(),
    );
    if outcome == Outcome::Completed {
        record.status = Some(HttpStatus::new(200).unwrap());
    } else {
        record.reason = Some(ReasonCode::new("upstream_failed").unwrap());
    }
    record.check().unwrap();
    record.to_line()
}

const RUN: &str = "0123456789ab";
const OLD_RUN: &str = "ba9876543210";

fn ago(minutes: u64) -> Duration {
    NOW - Duration::from_secs(minutes * 60)
}

#[test]
fn unix_time_reads_audit_timestamps() {
    for ms in [
        0,
        1_000,
        951_782_400_123,
        1_800_000_000_000,
        4_102_444_799_999,
    ] {
        let text = Timestamp::from_unix_millis(ms).unwrap();
        assert_eq!(
            unix_time(text.as_str()),
            Some(Duration::from_millis(ms)),
            "{text:?}"
        );
    }
}

#[test]
fn replay_counts_the_latest_runs_sent_allows_inside_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    let lines = [
        // Another run: the broker restarted since, with empty counters.
        decision(
            &format!("{OLD_RUN}-1"),
            ago(20),
            AuditDecision::Allow,
            "gh-read",
        ),
        // Outside the hour.
        decision(
            &format!("{RUN}-1"),
            ago(61),
            AuditDecision::Allow,
            "gh-read",
        ),
        // Counted: completed, unknown, and still without outcome.
        decision(
            &format!("{RUN}-2"),
            ago(30),
            AuditDecision::Allow,
            "gh-read",
        ),
        outcome(&format!("{RUN}-2"), ago(30), Outcome::Completed),
        decision(
            &format!("{RUN}-3"),
            ago(20),
            AuditDecision::Allow,
            "gh-read",
        ),
        outcome(&format!("{RUN}-3"), ago(20), Outcome::Unknown),
        "not an audit record".to_owned(),
        decision(
            &format!("{RUN}-4"),
            ago(10),
            AuditDecision::Allow,
            "gh-read",
        ),
        // Refunded: never sent.
        decision(&format!("{RUN}-5"), ago(5), AuditDecision::Allow, "gh-read"),
        outcome(&format!("{RUN}-5"), ago(5), Outcome::Failed),
        // Denials count nothing.
        decision(
            &format!("{RUN}-6"),
            ago(4),
            AuditDecision::Deny,
            "no-deletes",
        ),
    ];
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let policy = policy();
    let replayed = replay(&log, &policy, Duration::from_secs(3600), NOW).unwrap();
    assert_eq!(
        replayed.source,
        BudgetSource::AuditLog {
            path: log.clone(),
            files: vec![log.clone()],
            replayed: 3,
        }
    );
    let mut x = examine(
        &policy,
        &aliases(),
        &get("https://api.github.com/user", &[AUTH]),
        10 << 20,
    );
    x.count_limits(&policy, replayed.limiter, NOW);
    assert_eq!(answer(&x), "429 limited", "3 of 3 used: {x:?}");
    // Both the allow rule's counter and the `limit` rule's were charged.
    let remaining: Vec<(&str, u64)> = x
        .limits
        .iter()
        .map(|l| (l.rule.as_str(), l.remaining))
        .collect();
    assert_eq!(remaining, [("gh-read", 0), ("hourly", 7)]);
}

#[test]
fn replay_reads_rotated_files_and_reports_a_missing_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    let policy = policy();
    let none = replay(&log, &policy, Duration::from_secs(3600), NOW).unwrap();
    assert_eq!(none.source, BudgetSource::NoLog { path: log.clone() });

    let rotated = dir.path().join("audit.log.1");
    // Checked at the file's real modification time (now): the rotated file is inside the window.
    let now = wall_clock();
    let lines = [
        decision(
            &format!("{RUN}-1"),
            now - Duration::from_secs(60),
            AuditDecision::Allow,
            "gh-read",
        ),
        decision(&format!("{RUN}-2"), now, AuditDecision::Allow, "gh-read"),
    ];
    std::fs::write(&rotated, lines[0].clone() + "\n").unwrap();
    std::fs::write(&log, lines[1].clone() + "\n").unwrap();
    let replayed = replay(&log, &policy, Duration::from_secs(3600), now).unwrap();
    let BudgetSource::AuditLog {
        files, replayed: n, ..
    } = &replayed.source
    else {
        panic!("{:?}", replayed.source)
    };
    assert_eq!(files, &[rotated.clone(), log.clone()]);
    assert_eq!(*n, 2);
    // A rotated file last written before the window is not read.
    let replayed = replay(
        &log,
        &policy,
        Duration::from_secs(3600),
        now + Duration::from_secs(7200),
    )
    .unwrap();
    let BudgetSource::AuditLog { files, .. } = &replayed.source else {
        panic!()
    };
    assert_eq!(files, std::slice::from_ref(&log));
}

#[test]
fn replay_refuses_a_log_that_is_not_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let error = replay(dir.path(), &policy(), Duration::from_secs(60), NOW).unwrap_err();
    assert!(error.to_string().contains("is a directory"), "{error}");
}

// --- Parity with the proxy ------------------------------------------------------------------------

/// Sends each request through the real router (nothing listens on the loopback target, so an
/// allowed request ends as 502 `upstream_failed`) and checks that explain gives the same answer.
/// A broker's state for router tests: the policy and aliases above (the local rule on `port`),
/// a capability for `mino`, an audit log in `dir`. Returns the state and the token.
fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn router_state(dir: &std::path::Path) -> (crate::proxy::AppState, String, u16) {
    let audit = AuditLog::open(&dir.join("audit.log"), AuditConfig::default()).unwrap();
    router_state_with(dir, audit)
}

fn router_state_with(
    dir: &std::path::Path,
    audit: AuditLog,
) -> (crate::proxy::AppState, String, u16) {
    use crate::capability::{CapabilityFile, CapabilityStore, IssueRequest};
    use crate::config::declarations::Declarations;
    use crate::net::upstream::UpstreamClient;
    use crate::proxy::AppState;
    use crate::secrets::credential_store::{
        CredentialSources, CredentialStore, CredentialValue, MemoryStore,
    };

    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let aliases = aliases();
    let keyring = MemoryStore::new();
    for alias in &aliases.aliases {
        keyring
            .write(&alias.name, &CredentialValue::new("s3cret-value").unwrap())
            .unwrap();
    }
    let sources = CredentialSources::new(
        Arc::new(keyring),
        Arc::new(MemoryStore::new()),
        Arc::new(MemoryStore::new()),
    );
    let credentials = sources.load_all(&aliases).unwrap();
    let declarations =
        Declarations::new(policy_with_port(port), aliases.clone(), credentials).unwrap();
    let mut capabilities = CapabilityFile::default();
    let (token, _) = capabilities
        .issue(
            IssueRequest {
                agent: AgentName::new("mino").unwrap(),
                ttl: Duration::from_secs(3600),
                aliases: Vec::new(),
            },
            SystemTime::now(),
        )
        .unwrap();
    let token = {
        use secrecy::ExposeSecret;
        token.as_secret().expose_secret().to_owned()
    };
    let caps_path = dir.join("capabilities.yaml");
    capabilities.save(&caps_path).unwrap();
    let state = AppState::new(
        crate::proxy::ProxyLimits::default(),
        declarations,
        CapabilityStore::open(&caps_path).unwrap(),
        audit,
        UpstreamClient::new(
            crate::net::tls::upstream_client_config(None, None).unwrap(),
            Duration::from_secs(2),
        ),
    );
    (state, token, port)
}

#[tokio::test]
async fn explain_answers_as_the_proxy_router_does() {
    use tower::ServiceExt;

    use crate::proxy::router;

    let dir = tempfile::tempdir().unwrap();
    let (state, token, port) = router_state(dir.path());
    let policy = policy_with_port(port);
    let aliases = aliases();
    let local = format!("http://127.0.0.1:{port}");
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"query-docs"}}"#;
    // (method, URL, headers, body)
    type Case<'a> = (&'a str, String, Vec<(&'a str, &'a str)>, Vec<u8>);
    let cases: Vec<Case<'_>> = vec![
        ("GET", format!("{local}/x"), vec![], vec![]),
        ("POST", format!("{local}/x?_method=DELETE"), vec![], vec![]),
        (
            "GET",
            format!("{local}/x"),
            vec![("x-http-method-override", "PUT")],
            vec![],
        ),
        (
            "GET",
            format!("{local}/x"),
            vec![("upgrade", "websocket")],
            vec![],
        ),
        (
            "GET",
            format!("{local}/x"),
            vec![("x-k", "{{mint:github}}")],
            vec![],
        ),
        (
            "GET",
            format!("{local}/x"),
            vec![("x-k", "{{mint:nope}}")],
            vec![],
        ),
        (
            "GET",
            format!("{local}/x"),
            vec![("x-k", "%7B%7Bmint:github%7D%7D")],
            vec![],
        ),
        ("GET", format!("{local}/x?k={{{{mint:gith"), vec![], vec![]),
        ("GET", format!("{local}/a/%2e%2e/x"), vec![], vec![]),
        ("GET", format!("{local}/a//x"), vec![], vec![]),
        ("GET", format!("{local}/a;b"), vec![], vec![]),
        ("DELETE", format!("{local}/x"), vec![], vec![]),
        ("PUT", format!("{local}/x"), vec![], vec![]),
        ("get", format!("{local}/x"), vec![], vec![]),
        (
            "POST",
            format!("{local}/x"),
            vec![JSON],
            call.as_bytes().to_vec(),
        ),
        (
            "POST",
            format!("{local}/x"),
            vec![JSON, ("mcp-name", "other")],
            call.as_bytes().to_vec(),
        ),
        (
            "POST",
            format!("{local}/x"),
            vec![JSON, ("mcp-name", "query-docs")],
            call.as_bytes().to_vec(),
        ),
        (
            "POST",
            format!("{local}/x"),
            vec![JSON],
            br#"{"method":"tools/call","method":1}"#.to_vec(),
        ),
        (
            "POST",
            format!("{local}/x"),
            vec![("content-type", "text/plain")],
            b"k={{mint:github}}".to_vec(),
        ),
        (
            "POST",
            format!("{local}/x"),
            vec![("content-type", "text/plain")],
            b"{{mint:github}}".to_vec(),
        ),
        ("GET", format!("{local}/repos/a/b/hooks/1"), vec![], vec![]),
        (
            "GET",
            "https://api.github.com/user".to_owned(),
            vec![("x-k", "{{mint:slack}}")],
            vec![],
        ),
        (
            "GET",
            "https://api.github.com/user?k={{mint:github}}".to_owned(),
            vec![],
            vec![],
        ),
        (
            "GET",
            "https://api.github.com/{{mint:github}}".to_owned(),
            vec![],
            vec![],
        ),
        ("GET", "https://{{mint:github}}/".to_owned(), vec![], vec![]),
        (
            "GET",
            "http://api.github.com/user".to_owned(),
            vec![],
            vec![],
        ),
        (
            "GET",
            "https://api.github.com:0/".to_owned(),
            vec![],
            vec![],
        ),
        (
            "GET",
            "https://example.com/".to_owned(),
            vec![("mint-x", "{{mint:nope}}")],
            vec![],
        ),
        (
            "POST",
            "https://mcp.example.com/mcp".to_owned(),
            vec![JSON],
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"drop"}}"#.to_vec(),
        ),
        // Approve rules: held by explain, refused by this broker until approvals land.
        (
            "PATCH",
            "https://api.github.com/gists/1".to_owned(),
            vec![AUTH],
            vec![],
        ),
        (
            "POST",
            "https://mcp.example.com/mcp".to_owned(),
            vec![JSON],
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"purge-cache"}}"#
                .to_vec(),
        ),
        // Issue 22: bodies Mint cannot examine whole.
        (
            "POST",
            format!("{local}/x"),
            vec![JSON, ("content-encoding", "gzip")],
            gzip(&[&b" ".repeat((10 << 20) + 1)[..], call.as_bytes()].concat()),
        ),
        (
            "POST",
            format!("{local}/x"),
            vec![JSON, ("content-encoding", "gzip")],
            gzip(call.as_bytes()),
        ),
        (
            "POST",
            format!("{local}/x"),
            vec![JSON, ("content-encoding", "br")],
            call.as_bytes().to_vec(),
        ),
        (
            "POST",
            format!("{local}/x"),
            vec![JSON, ("content-encoding", "identity, gzip")],
            gzip(call.as_bytes()),
        ),
        (
            "POST",
            format!("{local}/x"),
            vec![JSON, ("transfer-encoding", "gzip, chunked")],
            call.as_bytes().to_vec(),
        ),
        // Issue 22: override spellings PHP reads.
        (
            "POST",
            format!("{local}/x"),
            vec![("content-type", "application/x-www-form-urlencoded")],
            b".method=DELETE".to_vec(),
        ),
        (
            "POST",
            format!("{local}/x"),
            vec![],
            b"+_method=DELETE".to_vec(),
        ),
        (
            "POST",
            format!("{local}/x?%20_method=DELETE"),
            vec![],
            vec![],
        ),
        (
            "POST",
            format!("{local}/x"),
            vec![("x_http_method_override", "DELETE")],
            vec![],
        ),
        (
            "POST",
            format!("{local}/x"),
            vec![JSON],
            br#"{"_m\u0065thod":"PUT"}"#.to_vec(),
        ),
        // Issue 22: denied whatever the body holds, refused before it is read (and its
        // placeholders checked first, as without a body).
        (
            "PUT",
            format!("{local}/x"),
            vec![JSON],
            call.as_bytes().to_vec(),
        ),
        (
            "PUT",
            format!("{local}/x"),
            vec![JSON, ("content-encoding", "br")],
            b"x".to_vec(),
        ),
        (
            "PUT",
            format!("{local}/x"),
            vec![JSON, ("x-k", "{{mint:nope}}")],
            b"{}".to_vec(),
        ),
        (
            "POST",
            "https://api.github.com/nowhere".to_owned(),
            vec![JSON, AUTH],
            b"{\"a\":\"{{mint:github}}\"}".to_vec(),
        ),
        // Issue 22: tool names in another case are not the allowed tool.
        (
            "POST",
            "https://mcp.example.com/mcp".to_owned(),
            vec![JSON],
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"Query-Docs"}}"#
                .to_vec(),
        ),
    ];
    for (method, url, headers, body) in cases {
        let explained = examine(
            &policy,
            &aliases,
            &request(method, &url, &headers, &body),
            10 << 20,
        );
        let expected = match &explained.verdict {
            Verdict::Allow { .. } => (502, "upstream_failed".to_owned()),
            // The router holds it for the operator; holding is tested end to end in
            // tests/it/approvals.rs.
            Verdict::Approve { .. } => continue,
            Verdict::Refused(error) => (error.status().as_u16(), error.code().to_owned()),
            Verdict::Tunnel { .. } => panic!("no CONNECT among these cases"),
        };

        let (scheme, rest) = url.split_once("://").unwrap();
        let mut builder = http::Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(format!("/v1/proxy/{scheme}/{rest}"))
            .header("mint-capability", token.as_str());
        for (name, value) in &headers {
            builder = builder.header(*name, *value);
        }
        let response = router(state.clone())
            .oneshot(builder.body(axum::body::Body::from(body)).unwrap())
            .await
            .unwrap();
        let status = response.status().as_u16();
        let bytes = http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap()
            .to_bytes();
        let answer: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        let code = answer["error"]["code"]
            .as_str()
            .or_else(|| answer["error"]["data"]["code"].as_str())
            .or_else(|| answer[0]["error"]["data"]["code"].as_str())
            .unwrap_or_default()
            .to_owned();
        assert_eq!((status, code), expected, "{method} {url} {headers:?}");
    }
}

/// In `always` mode an allowed request waits for the fsync of its decision before it goes on.
/// An agent that goes away meanwhile (the request's future is dropped) leaves an outcome all the
/// same, `unknown` with `client_closed`, holding the request's facts: its decision is in the file.
#[tokio::test]
async fn an_agent_leaving_while_the_decision_is_fsynced_leaves_a_whole_outcome() {
    use tower::ServiceExt;

    use crate::audit::Durability;
    use crate::proxy::router;

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    // Every fsync waits until the test lets it go (or 10 s, so a failed test cannot hang the
    // flusher and with it the log's drop).
    let (release, held) = std::sync::mpsc::channel::<()>();
    let held = std::sync::Mutex::new(held);
    let audit = AuditLog::open_failing_sync(
        &log,
        AuditConfig {
            durability: Durability::Always,
            rotate_bytes: None,
        },
        move |file: &std::fs::File| {
            let _ = held.lock().unwrap().recv_timeout(Duration::from_secs(10));
            file.sync_data()
        },
    )
    .unwrap();
    let (state, token, port) = router_state_with(dir.path(), audit);
    let request = http::Request::builder()
        .uri(format!("http://127.0.0.1:{port}/x?page=2"))
        .header("proxy-authorization", format!("Bearer {token}"))
        .body(axum::body::Body::empty())
        .unwrap();
    let pending = tokio::spawn(router(state.clone()).oneshot(request));
    let records = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    };
    let mut waited = Duration::ZERO;
    while records().is_empty() {
        assert!(waited < Duration::from_secs(10), "no decision was written");
        tokio::time::sleep(Duration::from_millis(5)).await;
        waited += Duration::from_millis(5);
    }
    // The decision is in the file and its fsync is held: the agent goes away.
    assert!(!pending.is_finished());
    pending.abort();
    assert!(pending.await.unwrap_err().is_cancelled());
    let written = records();
    // Every fsync goes ahead from now on.
    drop(release);
    assert_eq!(written.len(), 2, "{written:?}");
    let (decision, outcome) = (&written[0], &written[1]);
    assert_eq!(decision["decision"], "allow", "{decision}");
    assert_eq!(outcome["phase"], "outcome", "{outcome}");
    assert_eq!(outcome["id"], decision["id"], "{outcome}");
    assert_eq!(outcome["outcome"], "unknown", "{outcome}");
    assert_eq!(outcome["reason"], "client_closed", "{outcome}");
    for field in [
        "agent",
        "capability",
        "method",
        "scheme",
        "host",
        "port",
        "path",
        "query_keys",
    ] {
        assert!(outcome.get(field).is_some(), "{field} missing: {outcome}");
        assert_eq!(outcome[field], decision[field], "{field}");
    }
}

/// `proxy::proxy_mode` and `proxy_shortcut` (how `mint serve` sends proxy requests past the
/// router) agree with the router on every kind of request: a request goes to the proxy (and is
/// audited) through the router exactly when the shortcut takes it, with the same answer.
#[tokio::test]
async fn the_proxy_shortcut_agrees_with_the_router() {
    use http::Version;
    use tower::ServiceExt;

    use crate::proxy::{proxy_mode, proxy_shortcut, router};

    let dir = tempfile::tempdir().unwrap();
    let (state, token, port) = router_state(dir.path());
    let log = dir.path().join("audit.log");
    // Lines in the file once every deferred outcome is written: without the `sync`, the
    // flusher could write one case's outcome while the next case is counted.
    let lines = || {
        state.audit().sync().unwrap();
        std::fs::read(&log).map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count())
    };
    let forward = format!("http://127.0.0.1:{port}/x");
    // (method, target, HTTP version, expected to be proxied)
    let cases: Vec<(&str, String, Version, bool)> = vec![
        (
            "GET",
            "/v1/proxy/https/api.github.com/user".into(),
            Version::HTTP_11,
            true,
        ),
        (
            "GET",
            format!("/v1/proxy/http/127.0.0.1:{port}/x?q=1"),
            Version::HTTP_11,
            true,
        ),
        ("PURGE", "/v1/proxy/x".into(), Version::HTTP_11, true),
        ("POST", "/v1/proxy//".into(), Version::HTTP_11, true),
        (
            "GET",
            "/v1/proxy/%2e%2e/healthz".into(),
            Version::HTTP_11,
            true,
        ),
        ("GET", "/v1/proxy/".into(), Version::HTTP_11, false),
        ("GET", "/v1/proxy".into(), Version::HTTP_11, false),
        ("GET", "/v1/proxyx/https/a".into(), Version::HTTP_11, false),
        ("GET", "/v1/PROXY/https/a/b".into(), Version::HTTP_11, false),
        (
            "GET",
            "//v1/proxy/https/a/b".into(),
            Version::HTTP_11,
            false,
        ),
        ("GET", "/healthz".into(), Version::HTTP_11, false),
        ("GET", "/v1/aliases".into(), Version::HTTP_11, false),
        ("GET", "/elsewhere".into(), Version::HTTP_11, false),
        ("GET", forward.clone(), Version::HTTP_11, true),
        ("GET", forward.clone(), Version::HTTP_10, true),
        (
            "GET",
            format!("http://127.0.0.1:{port}/healthz"),
            Version::HTTP_2,
            false,
        ),
        (
            "GET",
            format!("http://127.0.0.1:{port}/v1/proxy/https/api.github.com/user"),
            Version::HTTP_2,
            true,
        ),
        (
            "CONNECT",
            "api.github.com:443".into(),
            Version::HTTP_11,
            true,
        ),
        (
            "HEAD",
            "/v1/proxy/https/api.github.com/user".into(),
            Version::HTTP_11,
            true,
        ),
        (
            "HEAD",
            "/v1/proxy/https/api.github.com/user".into(),
            Version::HTTP_2,
            true,
        ),
    ];
    let build = |method: &str, target: &str, version: Version| {
        http::Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(target)
            .version(version)
            .header("mint-capability", token.as_str())
            .header("proxy-authorization", format!("Bearer {token}"))
            .body(axum::body::Body::empty())
            .unwrap()
    };
    let answer = |response: axum::response::Response| async move {
        let status = response.status();
        let has_id = response.headers().contains_key("mint-request-id");
        let length = response.headers().get("content-length").cloned();
        let bytes = http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap()
            .to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        // A body's `Content-Length` is its length; a HEAD answer has none (and says how long it
        // would be), whichever way it went. (Lengths differ between requests: ids do.)
        let length: Option<usize> = length.map(|v| v.to_str().unwrap().parse().unwrap());
        if !bytes.is_empty() {
            assert_eq!(length, Some(bytes.len()));
        }
        (
            status,
            body["error"]["code"].clone(),
            has_id,
            length.is_some(),
            bytes.is_empty(),
        )
    };
    for (method, target, version, proxied) in cases {
        let case = format!("{method} {target} {version:?}");
        let before = lines();
        let routed = answer(
            router(state.clone())
                .oneshot(build(method, &target, version))
                .await
                .unwrap(),
        )
        .await;
        let audited = lines() > before;
        // CONNECT is refused and audited by the front door; the shortcut leaves it to the router.
        assert_eq!(audited, proxied, "{case}: audited by the router");
        let mode = proxy_mode(&build(method, &target, version));
        assert_eq!(mode.is_some(), proxied && method != "CONNECT", "{case}");
        if let Some(mode) = mode {
            let before = lines();
            let short =
                answer(proxy_shortcut(&state, mode, build(method, &target, version)).await).await;
            assert!(lines() > before, "{case}: audited by the shortcut");
            assert_eq!(short, routed, "{case}");
        }
    }
}

#[test]
fn explain_arguments_never_show_header_or_query_values_in_debug() {
    use clap::Parser as _;
    let cli = crate::cli::Cli::try_parse_from([
        "mint",
        "policy",
        "explain",
        "--agent",
        "mino",
        "--method",
        "GET",
        "--url",
        "https://api.example.com/x?token=canary-explain-args-9f3",
        "--header",
        "Authorization: Bearer canary-explain-args-9f3",
    ])
    .unwrap();
    let shown = format!("{cli:?}");
    assert!(!shown.contains("canary-explain-args"), "{shown}");
    assert!(shown.contains("mino"), "{shown}");
}

/// Issue 16: a substituted body placeholder is shown with the JSON Pointer or form field of its
/// alias that it sits at, in the human report and in the JSON; a skipped one with its kind of
/// place. Neither shows the body.
#[test]
fn a_body_placeholder_shows_the_pointer_or_field_it_matched() {
    let form = ("content-type", "application/x-www-form-urlencoded");
    for (header, body, matched, json_key, json_value, skipped) in [
        (
            JSON,
            &br#"{"b":"x","token":"{{mint:github}}","note":"{{mint:github}}"}"#[..],
            "at JSON Pointer `/token`",
            "pointer",
            "/token",
            "github in a JSON string value it does not name",
        ),
        (
            form,
            &b"grant_type=client_credentials&client%5Fsecret=%7B%7Bmint%3Agithub%7D%7D&note={{mint:github}}"[..],
            "at form field `client_secret`",
            "form_field",
            "client_secret",
            "github in a form field value it does not name",
        ),
    ] {
        let x = explain_fresh(&request(
            "POST",
            "https://api.github.com/graphql",
            &[header],
            body,
        ));
        assert_eq!(answer(&x), "allow", "{x:?}");
        let places = &x.aliases[0].places;
        assert_eq!(places.len(), 1, "{x:?}");
        assert_eq!(places[0].place, Place::Site(Site::Body));
        let human = human(&x);
        assert!(human.contains(matched), "{human}");
        assert!(human.contains(skipped), "{human}");
        assert!(!human.contains("client_credentials"), "{human}");
        let json: serde_json::Value =
            serde_json::from_str(&render::json(&x, &BudgetSource::NotNeeded)).unwrap();
        let place = &json["aliases"][0]["places"][0];
        assert_eq!(place[json_key], json_value, "{json}");
        assert_eq!(place["site"], "body", "{json}");
        assert!(!json.to_string().contains("client_credentials"), "{json}");
    }
    // The same JSON gzip-encoded: Mint would forward it unsubstituted, so it refuses it (415).
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut encoder, br#"{"token":"{{mint:github}}"}"#).unwrap();
    let gz = encoder.finish().unwrap();
    let x = explain_fresh(&request(
        "POST",
        "https://api.github.com/graphql",
        &[JSON, ("content-encoding", "gzip")],
        &gz,
    ));
    assert_refused(&x, "415 encoded_body_placeholder");
    // A header placeholder matched no body place: nothing is added.
    let x = explain_fresh(&get("https://api.github.com/user", &[AUTH]));
    let json: serde_json::Value =
        serde_json::from_str(&render::json(&x, &BudgetSource::NotNeeded)).unwrap();
    let place = &json["aliases"][0]["places"][0];
    assert!(
        place.get("pointer").is_none() && place.get("form_field").is_none(),
        "{json}"
    );
}
