//! Property tests of the evaluator on generated policies and requests, checked against a small,
//! independent reference evaluator that reads POLICY.md's semantics the plainest way: a linear
//! scan with string comparisons over a tiny vocabulary.

#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code: a failed setup step should fail the test; tests may read fixtures"
)]

use std::time::Duration;

use mint_policy::evaluate::{AliasUse, CompiledPolicy, Decision, Evaluation, Request};
use mint_policy::limits::Limiter;
use mint_policy::normalize::normalize_target;
use mint_policy::policy::load_policy;
use mint_policy::site::{Site, SiteSet};
use proptest::prelude::*;

// --- The vocabulary ---

const AGENT_GLOBS: &[&str] = &["mino", "ci-*", "*"];
const AGENTS: &[&str] = &["mino", "ci-1", "other"];
const ALIASES: &[&str] = &["github", "slack"];
const HOST_PATTERNS: &[&str] = &["api.github.com", "*.github.com", "example.com", "127.0.0.1"];
const HOSTS: &[&str] = &[
    "api.github.com",
    "a.b.github.com",
    "github.com",
    "example.com",
    "127.0.0.1",
];
const METHODS: &[&str] = &["GET", "POST"];
const PATH_GLOBS: &[&str] = &["/a/**", "/a/*", "/c"];
const PATHS: &[&str] = &["/a", "/a/b", "/a/b/c", "/c"];
const TOOL_GLOBS: &[&str] = &["q", "*"];
const TOOLS: &[&str] = &["q", "del", "Q"];
const TIMEOUTS: &[&str] = &["1s", "30s", "2m", "280s"];

#[derive(Clone, Debug)]
struct GenRule {
    effect: &'static str,
    agent: Option<Vec<&'static str>>,
    alias: Option<Vec<&'static str>>,
    scheme: Option<Vec<&'static str>>,
    host: Option<Vec<&'static str>>,
    port: Option<Vec<u16>>,
    method: Option<Vec<&'static str>>,
    path: Option<Vec<&'static str>>,
    tool: Option<Vec<&'static str>>,
    inject: Option<Vec<&'static str>>,
    /// Approve rules: `approval.timeout`, when written.
    timeout: Option<&'static str>,
}

#[derive(Clone, Debug)]
struct GenRequest {
    agent: &'static str,
    scheme: &'static str,
    host: &'static str,
    port: u16,
    method: &'static str,
    path: &'static str,
    aliases: Vec<(&'static str, Vec<&'static str>)>,
    tool: Option<&'static str>,
}

fn some_of(items: &'static [&'static str]) -> impl Strategy<Value = Option<Vec<&'static str>>> {
    proptest::option::of(proptest::sample::subsequence(items, 1..=items.len().min(2)))
}

fn rule() -> impl Strategy<Value = GenRule> {
    (
        (
            prop_oneof![Just("allow"), Just("deny"), Just("limit"), Just("approve")],
            proptest::option::of(proptest::sample::select(TIMEOUTS)),
        ),
        some_of(AGENT_GLOBS),
        some_of(ALIASES),
        proptest::option::of(proptest::sample::subsequence(
            &[443u16, 8443, 80][..],
            1..=2,
        )),
        some_of(METHODS),
        some_of(PATH_GLOBS),
        some_of(TOOL_GLOBS),
        some_of(&["header", "query"]),
        any::<bool>(),
        proptest::sample::subsequence(HOST_PATTERNS, 1..=2),
        any::<(bool, bool)>(),
    )
        .prop_map(
            |(
                (effect, timeout),
                agent,
                alias,
                port,
                method,
                path,
                tool,
                inject,
                has_host,
                hosts,
                (s1, s2),
            )| {
                let loopback_only = hosts.iter().all(|h| *h == "127.0.0.1");
                // Approve rules read omitted fields as allow rules do, and need hosts too.
                let admits = effect == "allow" || effect == "approve";
                let host = if admits || has_host {
                    Some(hosts)
                } else {
                    None
                };
                // `http` is valid in an allow rule only for loopback hosts.
                let scheme = match (s1, s2) {
                    (false, _) => None,
                    (true, true) if !admits || (loopback_only && host.is_some()) => {
                        Some(vec!["http"])
                    }
                    (true, _) => Some(vec!["https"]),
                };
                GenRule {
                    effect,
                    agent,
                    alias,
                    scheme,
                    host,
                    port,
                    method,
                    path,
                    tool,
                    inject: if admits { inject } else { None },
                    timeout: if effect == "approve" { timeout } else { None },
                }
            },
        )
}

fn request() -> impl Strategy<Value = GenRequest> {
    (
        proptest::sample::select(AGENTS),
        proptest::sample::select(HOSTS),
        prop_oneof![Just(None), Just(Some(8443u16))],
        proptest::sample::select(METHODS),
        proptest::sample::select(PATHS),
        proptest::collection::vec(
            (
                proptest::sample::select(ALIASES),
                proptest::sample::subsequence(&["header", "query"][..], 1..=2),
            ),
            0..=2,
        ),
        proptest::option::of(proptest::sample::select(TOOLS)),
    )
        .prop_map(|(agent, host, port, method, path, mut aliases, tool)| {
            aliases.sort();
            aliases.dedup_by(|a, b| a.0 == b.0);
            let scheme = if host == "127.0.0.1" { "http" } else { "https" };
            let default = if scheme == "http" { 80 } else { 443 };
            GenRequest {
                agent,
                scheme,
                host,
                port: port.unwrap_or(default),
                method,
                path,
                aliases,
                tool,
            }
        })
}

fn yaml_list<T: ToString>(items: &[T]) -> String {
    let quoted: Vec<String> = items
        .iter()
        .map(|i| format!("'{}'", i.to_string()))
        .collect();
    format!("[{}]", quoted.join(", "))
}

fn policy_yaml(default: &str, rules: &[GenRule]) -> String {
    let mut out = format!("version: 1\ndefault: {default}\nrules:\n");
    if rules.is_empty() {
        out.push_str("  []\n");
    }
    for (i, r) in rules.iter().enumerate() {
        out.push_str(&format!(
            "  - id: r{i}\n    effect: {}\n    match:\n",
            r.effect
        ));
        let mut any = false;
        let mut field = |name: &str, v: Option<String>| {
            if let Some(v) = v {
                out.push_str(&format!("      {name}: {v}\n"));
                any = true;
            }
        };
        field("agent", r.agent.as_deref().map(yaml_list));
        field("alias", r.alias.as_deref().map(yaml_list));
        field("scheme", r.scheme.as_deref().map(yaml_list));
        field("host", r.host.as_deref().map(yaml_list));
        field("port", r.port.as_ref().map(|p| format!("{p:?}")));
        field("method", r.method.as_deref().map(yaml_list));
        field("path", r.path.as_deref().map(yaml_list));
        field("tool", r.tool.as_deref().map(yaml_list));
        if !any {
            out.push_str("      {}\n");
        }
        if let Some(inject) = &r.inject {
            out.push_str(&format!("    inject: {}\n", yaml_list(inject)));
        }
        if r.effect == "limit" {
            out.push_str("    limits: [{ max: 1000, per: 1h }]\n");
        }
        if let Some(timeout) = r.timeout {
            out.push_str(&format!("    approval: {{ timeout: {timeout} }}\n"));
        }
    }
    out
}

// --- The reference evaluator ---

fn glob_matches(glob: &str, value: &str) -> bool {
    match glob.strip_suffix('*') {
        Some(prefix) => value.starts_with(prefix),
        None => glob == value,
    }
}

fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix('*') {
        Some(suffix) => host.ends_with(suffix) && host.len() > suffix.len(),
        None => pattern == host,
    }
}

fn path_matches(glob: &str, path: &str) -> bool {
    match glob {
        "/a/**" => path == "/a" || path.starts_with("/a/"),
        "/a/*" => path
            .strip_prefix("/a/")
            .is_some_and(|rest| !rest.contains('/')),
        _ => glob == path,
    }
}

fn reference_matches(r: &GenRule, q: &GenRequest) -> bool {
    // Approve rules match as allow rules do.
    let allow = r.effect == "allow" || r.effect == "approve";
    let any_or = |field: &Option<Vec<&str>>, f: &dyn Fn(&str) -> bool| {
        field.as_ref().is_none_or(|v| v.iter().any(|x| f(x)))
    };
    let agent = any_or(&r.agent, &|g| glob_matches(g, q.agent));
    let alias = match (&r.alias, allow) {
        (Some(list), true) => q.aliases.iter().all(|(a, _)| list.contains(a)),
        (None, true) => q.aliases.is_empty(),
        (Some(list), false) => q.aliases.iter().any(|(a, _)| list.contains(a)),
        (None, false) => true,
    };
    let inject = r.inject.clone().unwrap_or_else(|| vec!["header"]);
    let sites = !allow
        || q.aliases
            .iter()
            .all(|(_, sites)| sites.iter().all(|s| inject.contains(s)));
    let scheme = match &r.scheme {
        Some(s) => s.contains(&q.scheme),
        None => !allow || q.scheme == "https",
    };
    let host = any_or(&r.host, &|p| host_matches(p, q.host));
    let default_port = if q.scheme == "http" { 80 } else { 443 };
    let port = match &r.port {
        Some(p) => p.contains(&q.port),
        None => !allow || q.port == default_port,
    };
    let method = any_or(&r.method, &|m| m == q.method);
    let path = any_or(&r.path, &|g| path_matches(g, q.path));
    // Deny and limit rules match tool names in any ASCII case (issue 22).
    let tool = match (&r.tool, q.tool) {
        (Some(globs), Some(t)) if allow => globs.iter().any(|g| glob_matches(g, t)),
        (Some(globs), Some(t)) => globs
            .iter()
            .any(|g| glob_matches(&g.to_ascii_lowercase(), &t.to_ascii_lowercase())),
        (Some(_), None) => false,
        (None, Some(_)) => !allow,
        (None, None) => true,
    };
    agent && alias && sites && scheme && host && port && method && path && tool
}

/// `allow:[ids]`, `approve:[ids]` or `deny:[ids]`: deny rules, then approve rules, then allow
/// rules and the default.
fn reference(default: &str, rules: &[GenRule], q: &GenRequest) -> String {
    let ids = |effect: &str| -> Vec<String> {
        rules
            .iter()
            .enumerate()
            .filter(|(_, r)| r.effect == effect && reference_matches(r, q))
            .map(|(i, _)| format!("r{i}"))
            .collect()
    };
    let denies = ids("deny");
    if !denies.is_empty() {
        return format!("deny:{denies:?}");
    }
    let approves = ids("approve");
    if !approves.is_empty() {
        return format!("approve:{approves:?}");
    }
    let allows = ids("allow");
    if allows.is_empty() && (default == "deny" || !q.aliases.is_empty() || q.host == "127.0.0.1") {
        return "deny:[]".to_owned();
    }
    format!("allow:{allows:?}")
}

fn real(default: &str, rules: &[GenRule], q: &GenRequest) -> (String, CompiledPolicy) {
    let yaml = policy_yaml(default, rules);
    let load = load_policy(yaml.as_bytes(), "gen.yaml");
    let errors: Vec<String> = load
        .diagnostics
        .iter()
        .filter(|d| d.code.as_str().starts_with('E'))
        .map(|d| d.render("gen"))
        .collect();
    assert!(errors.is_empty(), "{errors:?}\n{yaml}");
    let compiled = CompiledPolicy::new(load.policy.unwrap());
    (real_with(&compiled, q), compiled)
}

fn real_with(compiled: &CompiledPolicy, q: &GenRequest) -> String {
    with_request(q, |request| match compiled.evaluate(request) {
        Evaluation::Allow(g) => format!("allow:{:?}", g.rules),
        Evaluation::Deny(d) => format!("deny:{:?}", d.rules),
        Evaluation::Approve(h) => format!("approve:{:?}", h.rules),
    })
}

/// Runs `f` on the evaluator's view of `q`.
fn with_request<T>(q: &GenRequest, f: impl FnOnce(&Request<'_>) -> T) -> T {
    let authority = if q.port == if q.scheme == "http" { 80 } else { 443 } {
        q.host.to_owned()
    } else {
        format!("{}:{}", q.host, q.port)
    };
    let target = normalize_target(q.scheme, &authority, q.path).unwrap();
    let aliases: Vec<AliasUse> = q
        .aliases
        .iter()
        .map(|(a, sites)| AliasUse {
            alias: (*a).to_owned(),
            sites: SiteSet::of(sites.iter().filter_map(|s| Site::parse(s))),
        })
        .collect();
    let request = Request {
        agent: q.agent,
        method: q.method,
        target: &target,
        aliases: &aliases,
        tool: q.tool,
    };
    f(&request)
}

/// The seconds of a generated timeout.
fn seconds(timeout: &str) -> u64 {
    match timeout {
        "2m" => 120,
        other => other.trim_end_matches('s').parse().unwrap(),
    }
}

fn kind_and_ids(verdict: &str) -> (String, Vec<String>) {
    let (kind, ids) = verdict.split_once(':').unwrap_or((verdict, ""));
    let mut ids: Vec<String> = ids
        .trim_matches(|c| c == '[' || c == ']')
        .split(", ")
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    ids.sort();
    (kind.to_owned(), ids)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn agrees_with_the_reference_evaluator(
        default in prop_oneof![Just("deny"), Just("allow")],
        rules in proptest::collection::vec(rule(), 0..8),
        requests in proptest::collection::vec(request(), 1..8),
    ) {
        for q in &requests {
            let (got, _) = real(default, &rules, q);
            prop_assert_eq!(got, reference(default, &rules, q), "request {:?}", q);
        }
    }

    #[test]
    fn rule_order_never_changes_a_decision(
        default in prop_oneof![Just("deny"), Just("allow")],
        rules in proptest::collection::vec(rule(), 0..8),
        q in request(),
    ) {
        let (forward, _) = real(default, &rules, &q);
        let reversed: Vec<GenRule> = rules.iter().rev().cloned().collect();
        let (backward, _) = real(default, &reversed, &q);
        // Ids are positional (`r{i}`): map the reversed ids back before comparing.
        let n = rules.len();
        let (kind_b, ids_b) = kind_and_ids(&backward);
        let mut ids_b: Vec<String> = ids_b
            .iter()
            .map(|id| format!("\"r{}\"", n - 1 - id.trim_matches('"')[1..].parse::<usize>().unwrap()))
            .collect();
        ids_b.sort();
        prop_assert_eq!(kind_and_ids(&forward), (kind_b, ids_b));
    }

    #[test]
    fn adding_a_deny_never_turns_deny_into_allow(
        default in prop_oneof![Just("deny"), Just("allow")],
        rules in proptest::collection::vec(rule(), 0..8),
        extra in rule(),
        q in request(),
    ) {
        let (before, _) = real(default, &rules, &q);
        let mut more = rules.clone();
        more.push(GenRule { effect: "deny", inject: None, timeout: None, ..extra });
        let (after, _) = real(default, &more, &q);
        // A deny stays a deny; an allow or a hold stays exactly what it was, or becomes a deny.
        if before.starts_with("deny") || !after.starts_with("deny") {
            prop_assert!(
                kind_and_ids(&after).0 == kind_and_ids(&before).0
                    && (before.starts_with("deny") || after == before),
                "{} -> {}", before, after
            );
        }
    }

    /// An approve rule never lets through what was denied: a deny rule's denial stays exactly
    /// that, a default denial may become a hold but never an allow, and an allow becomes a hold
    /// at most, never a denial.
    #[test]
    fn adding_an_approve_rule_never_allows_what_was_denied(
        default in prop_oneof![Just("deny"), Just("allow")],
        rules in proptest::collection::vec(rule(), 0..8),
        extra in rule(),
        timeout in proptest::option::of(proptest::sample::select(TIMEOUTS)),
        q in request(),
    ) {
        let (before, _) = real(default, &rules, &q);
        let mut more = rules.clone();
        let host = extra.host.clone().or_else(|| Some(vec!["api.github.com"]));
        // Keep `http` only where an approve rule may say it: on loopback hosts alone.
        let loopback_only = host.iter().flatten().all(|h| *h == "127.0.0.1");
        let scheme = extra.scheme.clone().filter(|s| !s.contains(&"http") || loopback_only);
        more.push(GenRule { effect: "approve", host, scheme, timeout, ..extra });
        let (after, _) = real(default, &more, &q);
        let (kind_before, ids_before) = kind_and_ids(&before);
        let (kind_after, _) = kind_and_ids(&after);
        match kind_before.as_str() {
            "deny" if !ids_before.is_empty() => prop_assert_eq!(&after, &before),
            "deny" => prop_assert!(kind_after == "deny" || kind_after == "approve", "{} -> {}", before, after),
            "allow" => prop_assert!(after == before || kind_after == "approve", "{} -> {}", before, after),
            _ => prop_assert_eq!(kind_after.as_str(), "approve", "{} -> {}", before, after),
        }
    }

    /// A hold waits the shortest timeout of its approve rules (120 s when none names one), and
    /// once approved applies the matching allow rules' grant; evaluating or deciding it consumes
    /// no limit.
    #[test]
    fn a_hold_waits_the_shortest_timeout_and_consumes_nothing(
        default in prop_oneof![Just("deny"), Just("allow")],
        rules in proptest::collection::vec(rule(), 0..8),
        q in request(),
    ) {
        let (_, compiled) = real(default, &rules, &q);
        let evaluation = with_request(&q, |request| compiled.evaluate(request));
        let Evaluation::Approve(hold) = evaluation else {
            return Ok(());
        };
        let matching = |effect: &str| -> Vec<(usize, &GenRule)> {
            rules
                .iter()
                .enumerate()
                .filter(|(_, r)| r.effect == effect && reference_matches(r, &q))
                .collect()
        };
        let shortest = matching("approve")
            .iter()
            .map(|(_, r)| r.timeout.map_or(120, seconds))
            .min()
            .unwrap();
        prop_assert_eq!(hold.timeout, Duration::from_secs(shortest));
        let allows: Vec<String> = matching("allow").iter().map(|(i, _)| format!("r{i}")).collect();
        prop_assert_eq!(&hold.grant.rules, &allows);
        // Every matching limit rule counts the request once it is approved and sent.
        for (i, _) in matching("limit") {
            let rule = format!("r{i}");
            prop_assert!(hold.grant.charges.iter().any(|c| c.rule == rule), "{} not charged", rule);
        }
        let mut limiter = Limiter::new();
        for _ in 0..3 {
            let decision = with_request(&q, |request| compiled.decide(request, &mut limiter, Duration::ZERO));
            prop_assert_eq!(decision, Decision::Approve(hold.clone()));
        }
        let budgets = with_request(&q, |request| compiled.budgets(request, &limiter, Duration::ZERO));
        for budget in budgets {
            prop_assert_eq!(budget.remaining, budget.max, "{} consumed", budget.rule);
        }
    }

    #[test]
    fn default_allow_never_authorizes_an_alias(
        rules in proptest::collection::vec(rule(), 0..8),
        q in request(),
    ) {
        prop_assume!(!q.aliases.is_empty());
        let (got, compiled) = real("allow", &rules, &q);
        if let Some(ids) = got.strip_prefix("allow:") {
            let (_, ids) = kind_and_ids(&format!("allow:{ids}"));
            prop_assert!(!ids.is_empty(), "allowed by default: {}", got);
            for id in ids {
                let rule = compiled.policy().rules.iter().find(|r| format!("\"{}\"", r.id) == id).unwrap();
                let listed = rule.matcher.alias.clone().unwrap_or_default();
                for (alias, _) in &q.aliases {
                    prop_assert!(listed.iter().any(|l| l == alias));
                }
            }
        }
    }

    /// A request `denial_for_any_call` refuses unread is denied whatever its body adds: any tool
    /// or none, more aliases, more sites (issue 22: the broker then never reads the body).
    #[test]
    fn a_denial_for_any_call_holds_for_every_body(
        default in prop_oneof![Just("deny"), Just("allow")],
        rules in proptest::collection::vec(rule(), 0..8),
        q in request(),
    ) {
        let (_, compiled) = real(default, &rules, &q);
        let Some(denial) = with_request(&q, |request| compiled.denial_for_any_call(request)) else {
            return Ok(());
        };
        let mut bodies = Vec::new();
        for tool in [None, Some("q"), Some("del"), Some("Q"), Some("other")] {
            bodies.push(GenRequest { tool, ..q.clone() });
            for alias in ALIASES {
                let mut more = q.clone();
                more.tool = tool;
                match more.aliases.iter_mut().find(|(a, _)| a == alias) {
                    Some((_, sites)) => sites.push("body"),
                    None => more.aliases.push((alias, vec!["body"])),
                }
                bodies.push(more);
            }
        }
        for body in &bodies {
            let got = real_with(&compiled, body);
            prop_assert!(got.starts_with("deny"), "{:?} refused unread, but {:?} is {}", denial, body, got);
        }
        // Without a tool, the denial is exactly the evaluation's.
        let plain = GenRequest { tool: None, ..q.clone() };
        let evaluated = with_request(&plain, |request| compiled.evaluate(request));
        prop_assert_eq!(evaluated, Evaluation::Deny(denial));
    }
}
