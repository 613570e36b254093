//! The indexed evaluator against the plainest one: a linear scan of every rule with the public
//! `rule_matches`, then the result built the straightforward way (`format!` for every counter
//! key, one `Vec` per kind of rule). The whole `Evaluation` must be equal, charges included, so
//! the host index (exact, wildcard suffixes and their lengths, rules without `host`), the
//! matches held on the stack or spilled to the heap, and the counter keys built once per policy
//! all stay invisible.

#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed setup step should fail the test"
)]

use mint_policy::evaluate::{
    AliasUse, CompiledPolicy, Denial, DenyReason, Evaluation, Grant, Hold, Request, rule_matches,
};
use mint_policy::limits::Charge;
use mint_policy::normalize::normalize_target;
use mint_policy::policy::{
    CallLimitKey, DefaultEffect, Effect, LEGACY_WINDOW, LimitKey, Rule, load_policy,
};
use mint_policy::site::{Site, SiteSet};
use proptest::prelude::*;

// --- The vocabulary ---

const HOST_PATTERNS: &[&str] = &[
    "api.github.com",
    "*.github.com",
    "*.b.github.com",
    "*.example.com",
    "example.com",
    "10.0.0.1",
    "2001:db8::1",
];
/// Authorities as a request spells them.
const HOSTS: &[&str] = &[
    "api.github.com",
    "a.b.github.com",
    "x.a.b.github.com",
    "github.com",
    "example.com",
    "deep.er.example.com",
    "10.0.0.1",
    "[2001:db8::1]",
];
const AGENTS: &[&str] = &["mino", "ci-1"];
const ALIASES: &[&str] = &["github", "slack", "ci"];
const METHODS: &[&str] = &["GET", "POST", "DELETE"];
const PATH_GLOBS: &[&str] = &["/a/**", "/a/*", "/c"];
const PATHS: &[&str] = &["/a", "/a/b", "/c"];
const TOOLS: &[&str] = &["q", "del"];
const BY: &[&str] = &["agent", "alias", "host", "tool"];

#[derive(Clone, Debug)]
struct GenRule {
    effect: &'static str,
    host: Option<Vec<&'static str>>,
    alias: Option<Vec<&'static str>>,
    method: Option<Vec<&'static str>>,
    path: Option<Vec<&'static str>>,
    tool: Option<Vec<&'static str>>,
    allow_private: bool,
    limits: Vec<Vec<&'static str>>,
}

#[derive(Clone, Debug)]
struct GenRequest {
    agent: &'static str,
    host: &'static str,
    method: &'static str,
    path: &'static str,
    aliases: Vec<&'static str>,
    query_site: bool,
    tool: Option<&'static str>,
}

fn some_of(items: &'static [&'static str]) -> impl Strategy<Value = Option<Vec<&'static str>>> {
    proptest::option::of(proptest::sample::subsequence(items, 1..=items.len().min(2)))
}

fn rule() -> impl Strategy<Value = GenRule> {
    (
        prop_oneof![Just("allow"), Just("deny"), Just("limit"), Just("approve")],
        proptest::sample::subsequence(HOST_PATTERNS, 1..=3),
        any::<bool>(),
        proptest::option::of(proptest::sample::subsequence(ALIASES, 1..=3)),
        some_of(METHODS),
        some_of(PATH_GLOBS),
        proptest::option::of(prop_oneof![Just(vec!["q"]), Just(vec!["*"])]),
        any::<bool>(),
        proptest::collection::vec(proptest::sample::subsequence(BY, 0..=3), 0..=2),
    )
        .prop_map(
            |(effect, hosts, has_host, alias, method, path, tool, allow_private, limits)| {
                // Approve rules need hosts and take `allow_private` as allow rules do.
                let allow = effect == "allow" || effect == "approve";
                GenRule {
                    effect,
                    host: (allow || has_host).then_some(hosts),
                    alias,
                    method,
                    path,
                    tool,
                    allow_private: allow && allow_private,
                    limits: match effect {
                        "deny" => Vec::new(),
                        // A limit rule needs at least one limit.
                        "limit" if limits.is_empty() => vec![vec!["agent"]],
                        _ => limits,
                    },
                }
            },
        )
}

fn request() -> impl Strategy<Value = GenRequest> {
    (
        proptest::sample::select(AGENTS),
        proptest::sample::select(HOSTS),
        proptest::sample::select(METHODS),
        proptest::sample::select(PATHS),
        proptest::sample::subsequence(ALIASES, 0..=3),
        any::<bool>(),
        proptest::option::of(proptest::sample::select(TOOLS)),
    )
        .prop_map(
            |(agent, host, method, path, aliases, query_site, tool)| GenRequest {
                agent,
                host,
                method,
                path,
                aliases,
                query_site,
                tool,
            },
        )
}

fn yaml_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("'{i}'")).collect();
    format!("[{}]", quoted.join(", "))
}

fn policy_yaml(default: &str, rules: &[GenRule], call_limits: bool) -> String {
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
        let mut field = |name: &str, v: &Option<Vec<&str>>| {
            if let Some(v) = v {
                out.push_str(&format!("      {name}: {}\n", yaml_list(v)));
                any = true;
            }
        };
        field("host", &r.host);
        field("alias", &r.alias);
        field("method", &r.method);
        field("path", &r.path);
        field("tool", &r.tool);
        if !any {
            out.push_str("      {}\n");
        }
        if r.effect == "allow" || r.effect == "approve" {
            out.push_str("    inject: [header, query]\n");
        }
        if r.effect == "approve" && !i.is_multiple_of(3) {
            out.push_str(&format!(
                "    approval: {{ timeout: {}s }}\n",
                approval_secs(i)
            ));
        }
        if r.allow_private {
            out.push_str("    allow_private: true\n");
        }
        if !r.limits.is_empty() {
            out.push_str("    limits:\n");
            for (n, by) in r.limits.iter().enumerate() {
                // No `by`: one counter for the rule (an empty list is an error).
                let by = if by.is_empty() {
                    String::new()
                } else {
                    format!(", by: {}", yaml_list(by))
                };
                out.push_str(&format!(
                    "      - {{ max: {}, per: {}m{by} }}\n",
                    n + 1,
                    i + 1
                ));
            }
        }
    }
    if call_limits {
        out.push_str("call_limits:\n  github: 3\n  slack: 4\n  'tool:q': 5\n");
    }
    out
}

/// The `approval.timeout` of approve rule `r{i}`, written unless `i` is a multiple of 3 (then
/// the default, 120 s, applies).
fn approval_secs(i: usize) -> u64 {
    if i.is_multiple_of(3) {
        120
    } else {
        280 - (i as u64 * 37) % 270
    }
}

// --- The plain evaluator ---

fn plain(compiled: &CompiledPolicy, request: &Request<'_>) -> Evaluation {
    let policy = compiled.policy();
    let matching: Vec<&Rule> = policy
        .rules
        .iter()
        .filter(|r| rule_matches(r, request))
        .collect();
    let of = |effect: Effect| -> Vec<&Rule> {
        matching
            .iter()
            .copied()
            .filter(|r| r.effect == effect)
            .collect()
    };
    let (denies, approves, allows, limits) = (
        of(Effect::Deny),
        of(Effect::Approve),
        of(Effect::Allow),
        of(Effect::Limit),
    );
    let ids = |rules: &[&Rule]| -> Vec<String> { rules.iter().map(|r| r.id.clone()).collect() };
    if !denies.is_empty() {
        return Evaluation::Deny(Denial {
            rules: ids(&denies),
            reason: DenyReason::DenyRule,
        });
    }
    if allows.is_empty() && approves.is_empty() {
        let reason = match policy.default {
            DefaultEffect::Deny => Some(DenyReason::NoAllowRule),
            DefaultEffect::Allow if !request.aliases.is_empty() => {
                Some(DenyReason::DefaultAllowUsesAlias)
            }
            DefaultEffect::Allow if request.target.host.is_loopback() => {
                Some(DenyReason::DefaultAllowLoopback)
            }
            DefaultEffect::Allow => None,
        };
        if let Some(reason) = reason {
            return Evaluation::Deny(Denial {
                rules: Vec::new(),
                reason,
            });
        }
    }
    let mut charges = Vec::new();
    for rule in approves.iter().chain(&allows).chain(&limits) {
        for (n, limit) in rule.limits.iter().enumerate() {
            let mut keys = vec![format!("{}#{n}", rule.id)];
            for by in &limit.by {
                let values: Vec<String> = match by {
                    LimitKey::Agent => vec![request.agent.to_owned()],
                    LimitKey::Host => vec![request.target.host.as_text()],
                    LimitKey::Tool => vec![request.tool.unwrap_or("").to_ascii_lowercase()],
                    LimitKey::Alias if request.aliases.len() <= 1 => vec![
                        request
                            .aliases
                            .first()
                            .map_or(String::new(), |u| u.alias.clone()),
                    ],
                    LimitKey::Alias => request.aliases.iter().map(|u| u.alias.clone()).collect(),
                };
                keys = keys
                    .iter()
                    .flat_map(|k| values.iter().map(move |v| format!("{k}\u{1f}{v}")))
                    .collect();
            }
            for key in keys {
                charges.push(Charge {
                    rule: rule.id.clone(),
                    key,
                    max: limit.max,
                    per: limit.per,
                });
            }
        }
    }
    for limit in &policy.call_limits {
        let applies = match &limit.key {
            CallLimitKey::Alias(a) => request.aliases.iter().any(|u| &u.alias == a),
            CallLimitKey::Tool(t) => request
                .tool
                .is_some_and(|tool| tool.eq_ignore_ascii_case(t)),
        };
        if applies {
            let name = format!("call_limits:{}", limit.key);
            charges.push(Charge {
                rule: name.clone(),
                key: name,
                max: limit.max,
                per: LEGACY_WINDOW,
            });
        }
    }
    let grant = Grant {
        rules: ids(&allows),
        allow_private: approves.iter().chain(&allows).any(|r| r.allow_private),
        charges,
    };
    if approves.is_empty() {
        return Evaluation::Allow(grant);
    }
    let secs = approves
        .iter()
        .map(|r| approval_secs(r.id[1..].parse().unwrap()))
        .min()
        .unwrap();
    Evaluation::Approve(Hold {
        rules: ids(&approves),
        timeout: std::time::Duration::from_secs(secs),
        grant,
    })
}

#[track_caller]
fn compile(yaml: &str) -> CompiledPolicy {
    let load = load_policy(yaml.as_bytes(), "gen.yaml");
    let errors: Vec<String> = load
        .diagnostics
        .iter()
        .filter(|d| d.code.as_str().starts_with('E'))
        .map(|d| d.render("gen"))
        .collect();
    assert!(errors.is_empty(), "{errors:?}\n{yaml}");
    CompiledPolicy::new(load.policy.unwrap())
}

/// The indexed and the plain evaluation of one request.
fn both(compiled: &CompiledPolicy, q: &GenRequest) -> (Evaluation, Evaluation) {
    let target = normalize_target("https", q.host, q.path).unwrap();
    let sites = if q.query_site {
        SiteSet::of([Site::Header, Site::Query])
    } else {
        SiteSet::HEADER
    };
    let aliases: Vec<AliasUse> = q
        .aliases
        .iter()
        .map(|a| AliasUse {
            alias: (*a).to_owned(),
            sites,
        })
        .collect();
    let request = Request {
        agent: q.agent,
        method: q.method,
        target: &target,
        aliases: &aliases,
        tool: q.tool,
    };
    (compiled.evaluate(&request), plain(compiled, &request))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn indexed_evaluation_equals_a_linear_scan(
        default in prop_oneof![Just("deny"), Just("allow")],
        // Up to 40 rules from a small vocabulary: often more than the 16 matches held on the
        // stack.
        rules in proptest::collection::vec(rule(), 0..40),
        call_limits in any::<bool>(),
        requests in proptest::collection::vec(request(), 1..8),
    ) {
        let compiled = compile(&policy_yaml(default, &rules, call_limits));
        for q in &requests {
            let (indexed, plain) = both(&compiled, q);
            prop_assert_eq!(indexed, plain, "request {:?}", q);
        }
    }
}

#[test]
fn many_matching_rules_keep_file_order_and_every_charge() {
    // 30 limit rules without `host` and one allow rule listed under its exact host and two
    // wildcards: more matches than the stack holds, and one rule found under three keys.
    let mut rules = vec![GenRule {
        effect: "allow",
        host: Some(vec!["x.a.b.github.com", "*.github.com", "*.b.github.com"]),
        alias: Some(vec!["github", "slack"]),
        method: None,
        path: None,
        tool: None,
        allow_private: true,
        limits: vec![vec!["alias", "host", "agent"], vec![]],
    }];
    for _ in 0..30 {
        rules.push(GenRule {
            effect: "limit",
            host: None,
            alias: None,
            method: Some(vec!["GET"]),
            path: None,
            tool: None,
            allow_private: false,
            limits: vec![vec!["tool", "alias"]],
        });
    }
    let compiled = compile(&policy_yaml("deny", &rules, true));
    let q = GenRequest {
        agent: "mino",
        host: "x.a.b.github.com",
        method: "GET",
        path: "/a",
        aliases: vec!["github", "slack"],
        query_site: false,
        tool: None,
    };
    let (indexed, plain) = both(&compiled, &q);
    assert_eq!(indexed, plain);
    let Evaluation::Allow(grant) = indexed else {
        panic!("expected an allow: {indexed:?}");
    };
    assert_eq!(grant.rules, vec!["r0".to_owned()]);
    assert!(grant.allow_private);
    // r0: two counters for its first limit (one per alias) and one for its second; each limit
    // rule: one per alias; then the two legacy entries.
    assert_eq!(grant.charges.len(), 2 + 1 + 30 * 2 + 2);
    assert_eq!(
        grant.charges.first().map(|c| c.key.as_str()),
        Some("r0#0\u{1f}mino\u{1f}github\u{1f}x.a.b.github.com")
    );
    assert_eq!(
        grant.charges.last().map(|c| c.key.as_str()),
        Some("call_limits:slack")
    );

    // The same with a deny rule matching too: every deny rule id, in file order.
    rules.push(GenRule {
        effect: "deny",
        host: None,
        alias: None,
        method: Some(vec!["GET"]),
        path: None,
        tool: None,
        allow_private: false,
        limits: Vec::new(),
    });
    rules.swap(3, 31);
    let compiled = compile(&policy_yaml("deny", &rules, false));
    let (indexed, plain) = both(&compiled, &q);
    assert_eq!(indexed, plain);
    assert!(matches!(&indexed, Evaluation::Deny(d) if d.rules == ["r3"]));
}
