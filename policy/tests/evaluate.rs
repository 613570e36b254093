//! Table tests of the evaluator: one per rule of POLICY.md's "Evaluation" and "Omitted fields"
//! sections, run on policies loaded from YAML text and targets built by the real normalizer.

#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code: a failed setup step should fail the test; tests may read fixtures"
)]

use std::time::Duration;

use mint_policy::evaluate::{AliasUse, CompiledPolicy, Decision, DenyReason, Evaluation, Request};
use mint_policy::limits::Limiter;
use mint_policy::normalize::{Target, normalize_target};
use mint_policy::policy::load_policy;
use mint_policy::site::{Site, SiteSet};

#[track_caller]
fn compile(rules: &str) -> CompiledPolicy {
    compile_with_default("deny", rules)
}

#[track_caller]
fn compile_with_default(default: &str, rules: &str) -> CompiledPolicy {
    let yaml = format!("version: 1\ndefault: {default}\nrules:\n{rules}");
    let load = load_policy(yaml.as_bytes(), "t.yaml");
    let errors: Vec<_> = load
        .diagnostics
        .iter()
        .filter(|d| d.code.as_str().starts_with('E'))
        .map(|d| d.render("t"))
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    CompiledPolicy::new(load.policy.unwrap())
}

#[track_caller]
fn target(url: &str) -> Target {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (authority, path) = rest.find('/').map_or((rest, "/"), |i| rest.split_at(i));
    normalize_target(scheme, authority, path).unwrap()
}

/// A request description for the tables.
struct Req<'a> {
    agent: &'a str,
    method: &'a str,
    url: &'a str,
    aliases: Vec<(&'a str, &'a [Site])>,
    tool: Option<&'a str>,
}

fn req(method: &'static str, url: &'static str) -> Req<'static> {
    Req {
        agent: "mino",
        method,
        url,
        aliases: Vec::new(),
        tool: None,
    }
}

impl<'a> Req<'a> {
    fn alias(mut self, name: &'a str) -> Self {
        self.aliases.push((name, &[Site::Header]));
        self
    }
    fn alias_in(mut self, name: &'a str, sites: &'a [Site]) -> Self {
        self.aliases.push((name, sites));
        self
    }
    fn agent(mut self, agent: &'a str) -> Self {
        self.agent = agent;
        self
    }
    fn tool(mut self, tool: &'a str) -> Self {
        self.tool = Some(tool);
        self
    }
}

impl Req<'_> {
    /// Builds the evaluator's view of this request (with the real normalizer) and hands it to `f`.
    #[track_caller]
    fn with_request<T>(&self, f: impl FnOnce(&Request<'_>) -> T) -> T {
        let target = target(self.url);
        let aliases: Vec<AliasUse> = self
            .aliases
            .iter()
            .map(|(a, sites)| AliasUse {
                alias: (*a).to_owned(),
                sites: SiteSet::of(sites.iter().copied()),
            })
            .collect();
        f(&Request {
            agent: self.agent,
            method: self.method,
            target: &target,
            aliases: &aliases,
            tool: self.tool,
        })
    }
}

#[track_caller]
fn evaluate(policy: &CompiledPolicy, r: &Req<'_>) -> Evaluation {
    r.with_request(|request| policy.evaluate(request))
}

/// `allow:[ids]`, `deny:[ids]:Reason`, `approve:[ids]:SECONDSs:[allow ids]`.
#[track_caller]
fn verdict(policy: &CompiledPolicy, r: &Req<'_>) -> String {
    match evaluate(policy, r) {
        Evaluation::Allow(g) => format!("allow:{:?}", g.rules),
        Evaluation::Deny(d) => format!("deny:{:?}:{:?}", d.rules, d.reason),
        Evaluation::Approve(h) => format!(
            "approve:{:?}:{}s:{:?}",
            h.rules,
            h.timeout.as_secs(),
            h.grant.rules
        ),
    }
}

const DENY: &str = "deny:[]:NoAllowRule";

#[test]
fn empty_policy_denies_everything() {
    let p = compile("  []\n");
    assert_eq!(
        verdict(&p, &req("GET", "https://api.github.com/user")),
        DENY
    );
    assert_eq!(
        verdict(
            &p,
            &req("GET", "https://api.github.com/user").alias("github")
        ),
        DENY
    );
}

#[test]
fn allow_matches_all_fields_and_nothing_else() {
    let p = compile(
        "  - id: read\n    effect: allow\n    match: { agent: [mino, 'ci-*'], host: api.github.com, method: [GET, HEAD], path: ['/repos/**', /user] }\n",
    );
    assert_eq!(
        verdict(&p, &req("GET", "https://api.github.com/user")),
        "allow:[\"read\"]"
    );
    assert_eq!(
        verdict(&p, &req("HEAD", "https://api.github.com/repos/a/b")),
        "allow:[\"read\"]"
    );
    assert_eq!(
        verdict(&p, &req("GET", "https://api.github.com/user").agent("ci-7")),
        "allow:[\"read\"]"
    );
    assert_eq!(
        verdict(
            &p,
            &req("GET", "https://api.github.com/user").agent("other")
        ),
        DENY
    );
    assert_eq!(
        verdict(&p, &req("POST", "https://api.github.com/user")),
        DENY
    );
    assert_eq!(
        verdict(&p, &req("get", "https://api.github.com/user")),
        DENY,
        "methods are byte-exact"
    );
    assert_eq!(
        verdict(&p, &req("GET", "https://api.github.com/users")),
        DENY
    );
    assert_eq!(verdict(&p, &req("GET", "https://github.com/user")), DENY);
    // The normalizer's canonical form is what matches.
    assert_eq!(
        verdict(&p, &req("GET", "https://API.GitHub.com./%75ser")),
        "allow:[\"read\"]"
    );
}

#[test]
fn deny_overrides_allow_in_any_order_and_reports_every_deny() {
    let allow = "  - id: all\n    effect: allow\n    match: { host: api.github.com }\n";
    let deny1 = "  - id: no-deletes\n    effect: deny\n    match: { method: DELETE }\n";
    let deny2 = "  - id: no-admin\n    effect: deny\n    match: { path: '/admin/**' }\n";
    for rules in [
        format!("{allow}{deny1}{deny2}"),
        format!("{deny2}{deny1}{allow}"),
    ] {
        let p = compile(&rules);
        assert_eq!(
            verdict(&p, &req("GET", "https://api.github.com/x")),
            "allow:[\"all\"]"
        );
        assert_eq!(
            verdict(&p, &req("DELETE", "https://api.github.com/admin/x")),
            if rules.starts_with(allow) {
                "deny:[\"no-deletes\", \"no-admin\"]:DenyRule"
            } else {
                "deny:[\"no-admin\", \"no-deletes\"]:DenyRule"
            }
        );
    }
}

#[test]
fn allow_without_alias_admits_no_secret() {
    let p = compile("  - id: r\n    effect: allow\n    match: { host: api.github.com }\n");
    assert_eq!(
        verdict(&p, &req("GET", "https://api.github.com/")),
        "allow:[\"r\"]"
    );
    assert_eq!(
        verdict(&p, &req("GET", "https://api.github.com/").alias("github")),
        DENY
    );
}

#[test]
fn allow_needs_every_alias_listed() {
    let p = compile(
        "  - id: r\n    effect: allow\n    match: { alias: [github, ci], host: api.github.com }\n",
    );
    assert_eq!(
        verdict(&p, &req("GET", "https://api.github.com/").alias("github")),
        "allow:[\"r\"]"
    );
    assert_eq!(
        verdict(
            &p,
            &req("GET", "https://api.github.com/")
                .alias("github")
                .alias("ci")
        ),
        "allow:[\"r\"]"
    );
    assert_eq!(
        verdict(
            &p,
            &req("GET", "https://api.github.com/")
                .alias("github")
                .alias("slack")
        ),
        DENY
    );
}

#[test]
fn placeholders_must_sit_in_injectable_sites() {
    let header_only = compile(
        "  - id: r\n    effect: allow\n    match: { alias: maps, host: maps.example.com }\n",
    );
    let r = req("GET", "https://maps.example.com/").alias_in("maps", &[Site::Query]);
    assert_eq!(verdict(&header_only, &r), DENY);
    let with_query = compile(
        "  - id: r\n    effect: allow\n    match: { alias: maps, host: maps.example.com }\n    inject: [header, query]\n",
    );
    assert_eq!(verdict(&with_query, &r), "allow:[\"r\"]");
    let body =
        req("GET", "https://maps.example.com/").alias_in("maps", &[Site::Header, Site::Body]);
    assert_eq!(verdict(&with_query, &body), DENY);
}

#[test]
fn allow_scheme_and_port_default_narrowly() {
    let p =
        compile("  - id: r\n    effect: allow\n    match: { host: [api.github.com, 127.0.0.1] }\n");
    assert_eq!(
        verdict(&p, &req("GET", "https://api.github.com/")),
        "allow:[\"r\"]"
    );
    assert_eq!(
        verdict(&p, &req("GET", "https://api.github.com:443/")),
        "allow:[\"r\"]"
    );
    assert_eq!(
        verdict(&p, &req("GET", "https://api.github.com:8443/")),
        DENY
    );
    assert_eq!(
        verdict(&p, &req("GET", "http://127.0.0.1/")),
        DENY,
        "no scheme means https only"
    );
    let p = compile(
        "  - id: r\n    effect: allow\n    match: { scheme: [http], host: 127.0.0.1, port: [8080] }\n",
    );
    assert_eq!(
        verdict(&p, &req("GET", "http://127.0.0.1:8080/")),
        "allow:[\"r\"]"
    );
    assert_eq!(verdict(&p, &req("GET", "http://127.0.0.1/")), DENY);
    assert_eq!(verdict(&p, &req("GET", "https://127.0.0.1:8080/")), DENY);
}

#[test]
fn deny_omitted_fields_mean_any() {
    let p = compile(
        "  - id: all\n    effect: allow\n    match: { host: [api.github.com], port: [443, 8443] }\n  - id: local\n    effect: allow\n    match: { scheme: http, host: 127.0.0.1 }\n  - id: no-github\n    effect: deny\n    match: { host: api.github.com }\n",
    );
    for url in ["https://api.github.com/", "https://api.github.com:8443/x"] {
        assert_eq!(
            verdict(&p, &req("POST", url)),
            "deny:[\"no-github\"]:DenyRule"
        );
    }
    assert_eq!(
        verdict(&p, &req("GET", "http://127.0.0.1/")),
        "allow:[\"local\"]"
    );
}

#[test]
fn deny_alias_matches_on_any_overlap() {
    let p = compile(
        "  - id: r\n    effect: allow\n    match: { alias: [github, slack], host: api.github.com }\n  - id: no-slack\n    effect: deny\n    match: { alias: [slack, other] }\n",
    );
    assert_eq!(
        verdict(&p, &req("GET", "https://api.github.com/").alias("github")),
        "allow:[\"r\"]"
    );
    assert_eq!(
        verdict(
            &p,
            &req("GET", "https://api.github.com/")
                .alias("github")
                .alias("slack")
        ),
        "deny:[\"no-slack\"]:DenyRule"
    );
    assert_eq!(
        verdict(&p, &req("GET", "https://api.github.com/")),
        "allow:[\"r\"]"
    );
}

#[test]
fn tools_are_allowed_one_by_one() {
    let p = compile(
        "  - id: endpoint\n    effect: allow\n    match: { host: mcp.context7.com, method: [POST, GET, DELETE], path: /mcp }\n  - id: docs-tools\n    effect: allow\n    match: { host: mcp.context7.com, method: POST, path: /mcp, tool: [query-docs, 'resolve-*'] }\n",
    );
    let mcp = "https://mcp.context7.com/mcp";
    assert_eq!(verdict(&p, &req("POST", mcp)), "allow:[\"endpoint\"]");
    assert_eq!(
        verdict(&p, &req("POST", mcp).tool("query-docs")),
        "allow:[\"docs-tools\"]"
    );
    assert_eq!(
        verdict(&p, &req("POST", mcp).tool("resolve-library-id")),
        "allow:[\"docs-tools\"]"
    );
    assert_eq!(
        verdict(&p, &req("POST", mcp).tool("delete-everything")),
        DENY
    );
    let any = compile(
        "  - id: any\n    effect: allow\n    match: { host: mcp.context7.com, tool: '*' }\n",
    );
    assert_eq!(
        verdict(&any, &req("POST", mcp).tool("whatever")),
        "allow:[\"any\"]"
    );
    assert_eq!(
        verdict(&any, &req("POST", mcp)),
        DENY,
        "a tool rule matches MCP calls only"
    );
}

#[test]
fn deny_with_tool_matches_mcp_calls_only_and_deny_without_tool_matches_all() {
    let p = compile(
        "  - id: all\n    effect: allow\n    match: { host: mcp.example.com, tool: '*' }\n  - id: plain\n    effect: allow\n    match: { host: mcp.example.com }\n  - id: no-delete-tool\n    effect: deny\n    match: { tool: 'delete-*' }\n",
    );
    assert_eq!(
        verdict(&p, &req("POST", "https://mcp.example.com/mcp")),
        "allow:[\"plain\"]"
    );
    assert_eq!(
        verdict(
            &p,
            &req("POST", "https://mcp.example.com/mcp").tool("delete-repo")
        ),
        "deny:[\"no-delete-tool\"]:DenyRule"
    );
    let p = compile(
        "  - id: all\n    effect: allow\n    match: { host: mcp.example.com, tool: '*' }\n  - id: no-post\n    effect: deny\n    match: { method: POST }\n",
    );
    assert_eq!(
        verdict(&p, &req("POST", "https://mcp.example.com/mcp").tool("x")),
        "deny:[\"no-post\"]:DenyRule"
    );
}

#[test]
fn default_allow_never_authorizes_an_alias_nor_loopback() {
    let p = compile_with_default("allow", "  []\n");
    assert_eq!(verdict(&p, &req("GET", "https://example.com/")), "allow:[]");
    assert_eq!(
        verdict(&p, &req("GET", "https://example.com/").alias("github")),
        "deny:[]:DefaultAllowUsesAlias"
    );
    assert_eq!(
        verdict(&p, &req("GET", "http://127.0.0.1/")),
        "deny:[]:DefaultAllowLoopback"
    );
    assert_eq!(
        verdict(&p, &req("GET", "http://localhost:8080/")),
        "deny:[]:DefaultAllowLoopback"
    );
}

#[test]
fn wildcards_cover_subdomains_only() {
    let p =
        compile("  - id: raw\n    effect: allow\n    match: { host: '*.githubusercontent.com' }\n");
    assert_eq!(
        verdict(&p, &req("GET", "https://raw.githubusercontent.com/x")),
        "allow:[\"raw\"]"
    );
    assert_eq!(
        verdict(&p, &req("GET", "https://a.b.githubusercontent.com/x")),
        "allow:[\"raw\"]"
    );
    assert_eq!(
        verdict(&p, &req("GET", "https://githubusercontent.com/x")),
        DENY
    );
    assert_eq!(
        verdict(&p, &req("GET", "https://evilgithubusercontent.com/x")),
        DENY
    );
    assert_eq!(
        verdict(
            &p,
            &req("GET", "https://raw.githubusercontent.com.evil.com/x")
        ),
        DENY
    );
}

#[test]
fn loopback_is_allowed_only_when_named_literally() {
    let p = compile(
        "  - id: local\n    effect: allow\n    match: { scheme: http, host: 127.0.0.1, port: 8080 }\n",
    );
    assert_eq!(
        verdict(&p, &req("GET", "http://127.0.0.1:8080/")),
        "allow:[\"local\"]"
    );
    // Other spellings of the same address are recognised for what they are.
    assert_eq!(
        verdict(&p, &req("GET", "http://2130706433:8080/")),
        "allow:[\"local\"]"
    );
    assert_eq!(
        verdict(&p, &req("GET", "http://[::ffff:127.0.0.1]:8080/")),
        "allow:[\"local\"]"
    );
    // Other loopback names and addresses are not covered.
    assert_eq!(verdict(&p, &req("GET", "http://localhost:8080/")), DENY);
    assert_eq!(verdict(&p, &req("GET", "http://127.0.0.2:8080/")), DENY);
    assert_eq!(verdict(&p, &req("GET", "http://[::1]:8080/")), DENY);
}

#[test]
fn deny_rules_catch_every_spelling_of_an_address() {
    let p = compile(
        "  - id: all\n    effect: allow\n    match: { scheme: [http], host: [127.0.0.1], port: 80 }\n  - id: no-local\n    effect: deny\n    match: { host: 127.0.0.1 }\n",
    );
    for url in [
        "http://127.0.0.1/",
        "http://0x7f.1/",
        "http://0177.0.0.1/",
        "http://127.1/",
        "http://[::ffff:7f00:1]/",
    ] {
        assert_eq!(
            verdict(&p, &req("GET", url)),
            "deny:[\"no-local\"]:DenyRule",
            "{url}"
        );
    }
}

#[test]
fn allow_private_comes_from_the_matching_allow_rule() {
    let p = compile(
        "  - id: intranet\n    effect: allow\n    match: { host: wiki.corp.example.com }\n    allow_private: true\n  - id: public\n    effect: allow\n    match: { host: www.example.com }\n",
    );
    let Evaluation::Allow(g) = evaluate(&p, &req("GET", "https://wiki.corp.example.com/")) else {
        panic!()
    };
    assert!(g.allow_private);
    let Evaluation::Allow(g) = evaluate(&p, &req("GET", "https://www.example.com/")) else {
        panic!()
    };
    assert!(!g.allow_private);
}

fn decide(p: &CompiledPolicy, limiter: &mut Limiter, r: &Req<'_>, at: u64) -> String {
    let decision = r.with_request(|request| p.decide(request, limiter, Duration::from_secs(at)));
    match decision {
        Decision::Allow(_) => "allow".to_owned(),
        Decision::Deny(d) => format!("deny:{:?}", d.reason),
        Decision::Limited(l) => format!("limited:{:?}:{}", l.rules, l.retry_after.as_secs()),
        Decision::Approve(h) => format!("approve:{:?}", h.rules),
    }
}

#[test]
fn allow_rule_limits_count_per_key() {
    let p = compile(
        "  - id: gh\n    effect: allow\n    match: { alias: github, host: api.github.com }\n    limits: [{ max: 2, per: 1h, by: [agent] }]\n",
    );
    let mut l = Limiter::new();
    let mino = req("GET", "https://api.github.com/").alias("github");
    let ci = req("GET", "https://api.github.com/")
        .alias("github")
        .agent("ci");
    assert_eq!(decide(&p, &mut l, &mino, 0), "allow");
    assert_eq!(decide(&p, &mut l, &mino, 10), "allow");
    assert_eq!(decide(&p, &mut l, &mino, 20), "limited:[\"gh\"]:3580");
    assert_eq!(decide(&p, &mut l, &ci, 20), "allow", "counted per agent");
    assert_eq!(decide(&p, &mut l, &mino, 3600), "allow");
}

#[test]
fn limit_rules_and_legacy_call_limits_apply_together() {
    let yaml = "version: 1\nrules:\n  - id: gh\n    effect: allow\n    match: { alias: github, host: api.github.com }\n  - id: writes\n    effect: limit\n    match: { method: POST }\n    limits: [{ max: 1, per: 1m }]\ncall_limits:\n  github: 3\n";
    let p = CompiledPolicy::new(load_policy(yaml.as_bytes(), "t").policy.unwrap());
    let mut l = Limiter::new();
    let get = req("GET", "https://api.github.com/").alias("github");
    let post = req("POST", "https://api.github.com/").alias("github");
    assert_eq!(decide(&p, &mut l, &post, 0), "allow");
    assert_eq!(decide(&p, &mut l, &post, 1), "limited:[\"writes\"]:59");
    assert_eq!(decide(&p, &mut l, &get, 2), "allow");
    assert_eq!(decide(&p, &mut l, &get, 3), "allow");
    assert_eq!(
        decide(&p, &mut l, &get, 4),
        "limited:[\"call_limits:github\"]:86396"
    );
    // A refused request consumed nothing: the POST counter is free again after its minute.
    assert_eq!(
        decide(&p, &mut l, &post, 61),
        "limited:[\"call_limits:github\"]:86339"
    );
}

#[test]
fn denied_requests_consume_no_limit() {
    let p = compile(
        "  - id: gh\n    effect: allow\n    match: { host: api.github.com, method: GET }\n    limits: [{ max: 1, per: 1h }]\n",
    );
    let mut l = Limiter::new();
    assert_eq!(
        decide(&p, &mut l, &req("POST", "https://api.github.com/"), 0),
        "deny:NoAllowRule"
    );
    assert_eq!(
        decide(&p, &mut l, &req("GET", "https://api.github.com/"), 1),
        "allow"
    );
}

#[test]
fn many_rules_still_decide_by_host() {
    let mut rules = String::new();
    for i in 0..2000 {
        rules.push_str(&format!(
            "  - {{ id: r{i}, effect: allow, match: {{ host: h{i}.example.com, alias: a{i} }} }}\n"
        ));
    }
    rules.push_str(
        "  - { id: wild, effect: allow, match: { host: '*.example.com', method: GET } }\n",
    );
    rules.push_str(
        "  - { id: no-h7, effect: deny, match: { host: h7.example.com, method: DELETE } }\n",
    );
    let p = compile(&rules);
    assert_eq!(
        verdict(
            &p,
            &req("POST", "https://h1999.example.com/").alias("a1999")
        ),
        "allow:[\"r1999\"]"
    );
    assert_eq!(
        verdict(&p, &req("GET", "https://h5.example.com/")),
        "allow:[\"r5\", \"wild\"]"
    );
    assert_eq!(
        verdict(&p, &req("GET", "https://deep.h5.example.com/")),
        "allow:[\"wild\"]"
    );
    assert_eq!(
        verdict(&p, &req("POST", "https://h5.example.com/").alias("a6")),
        DENY
    );
    assert_eq!(
        verdict(&p, &req("DELETE", "https://h7.example.com/")),
        "deny:[\"no-h7\"]:DenyRule"
    );
    let _ = DenyReason::NoAllowRule;
}

#[test]
fn limits_by_alias_keep_one_counter_per_alias() {
    let p = compile(
        "  - id: both\n    effect: allow\n    match: { alias: [github, slack, ci], host: api.github.com }\n    limits: [{ max: 1, per: 1h, by: [alias, agent] }]\n",
    );
    let mut l = Limiter::new();
    let both = req("GET", "https://api.github.com/")
        .alias("github")
        .alias("slack");
    assert_eq!(decide(&p, &mut l, &both, 0), "allow");
    assert_eq!(
        decide(
            &p,
            &mut l,
            &req("GET", "https://api.github.com/").alias("github"),
            1
        ),
        "limited:[\"both\"]:3599"
    );
    assert_eq!(
        decide(
            &p,
            &mut l,
            &req("GET", "https://api.github.com/").alias("slack"),
            1
        ),
        "limited:[\"both\"]:3599"
    );
    assert_eq!(
        decide(
            &p,
            &mut l,
            &req("GET", "https://api.github.com/").alias("ci"),
            1
        ),
        "allow"
    );
    assert_eq!(
        decide(
            &p,
            &mut l,
            &req("GET", "https://api.github.com/")
                .alias("slack")
                .agent("ci-2"),
            1
        ),
        "allow"
    );
}

/// Issue 22: deny and limit rules match tool names in any ASCII case (an MCP server may look
/// tools up case-insensitively); allow rules stay byte-exact, so no spelling widens them.
#[test]
fn deny_and_limit_rules_match_tools_in_any_case_allow_rules_exactly() {
    let p = compile(
        "  - id: tools\n    effect: allow\n    match: { host: mcp.example.com, tool: ['*'] }\n  - id: docs\n    effect: allow\n    match: { host: docs.example.com, tool: [query-docs] }\n  - id: no-drop\n    effect: deny\n    match: { tool: ['drop*'] }\n",
    );
    let mcp = "https://mcp.example.com/mcp";
    let docs = "https://docs.example.com/mcp";
    for (url, tool, expected) in [
        (mcp, "drop", "deny:[\"no-drop\"]:DenyRule"),
        (mcp, "DROP", "deny:[\"no-drop\"]:DenyRule"),
        (mcp, "Drop_Table", "deny:[\"no-drop\"]:DenyRule"),
        (mcp, "dRoPx", "deny:[\"no-drop\"]:DenyRule"),
        (mcp, "undrop", "allow:[\"tools\"]"),
        (docs, "query-docs", "allow:[\"docs\"]"),
        (docs, "Query-Docs", "deny:[]:NoAllowRule"),
        (docs, "QUERY-DOCS", "deny:[]:NoAllowRule"),
    ] {
        assert_eq!(
            verdict(&p, &req("POST", url).tool(tool)),
            expected,
            "{tool}"
        );
    }
    // Limits: one counter per tool whatever its case, and legacy per-tool limits in any case.
    let p = compile(
        "  - id: tools\n    effect: allow\n    match: { host: mcp.example.com, tool: ['*'] }\n    limits: [{ max: 1, per: 1h, by: [tool] }]\ncall_limits:\n  'tool:search': 1\n",
    );
    let mut l = Limiter::new();
    assert_eq!(
        decide(&p, &mut l, &req("POST", mcp).tool("drop"), 0),
        "allow"
    );
    assert_eq!(
        decide(&p, &mut l, &req("POST", mcp).tool("DROP"), 1),
        "limited:[\"tools\"]:3599"
    );
    let mut l = Limiter::new();
    let search = |tool| req("POST", mcp).tool(tool);
    // The rule's counter is per tool; the legacy one catches `SEARCH` after `search`.
    assert_eq!(decide(&p, &mut l, &search("search"), 0), "allow");
    assert!(decide(&p, &mut l, &search("SEARCH"), 1).starts_with("limited:"));
}

/// Issue 22: `denial_for_any_call` names the requests that are denied whatever their body holds
/// (any tool, more aliases), so the broker can refuse them before reading the body, and only
/// those.
#[test]
fn denial_for_any_call_only_when_no_body_could_be_allowed() {
    let p = compile(
        "  - id: endpoint\n    effect: allow\n    match: { host: mcp.example.com, method: [POST, GET], path: /mcp }\n  - id: docs\n    effect: allow\n    match: { host: mcp.example.com, method: POST, path: /tools, tool: [query-docs] }\n  - id: gh\n    effect: allow\n    match: { alias: github, host: api.github.com, method: POST }\n  - id: no-delete\n    effect: deny\n    match: { method: DELETE }\n  - id: no-drop\n    effect: deny\n    match: { tool: drop }\n",
    );
    let any_call = |r: &Req<'_>| {
        r.with_request(|request| p.denial_for_any_call(request))
            .map(|d| format!("{:?}:{:?}", d.rules, d.reason))
    };
    for (r, expected) in [
        // Some body could be allowed: the body must be read.
        (req("POST", "https://mcp.example.com/mcp"), None),
        (req("POST", "https://mcp.example.com/tools"), None),
        (
            req("POST", "https://api.github.com/graphql").alias("github"),
            None,
        ),
        // No allow rule for this target, whatever tool or alias the body adds.
        (
            req("POST", "https://mcp.example.com/other"),
            Some("[]:NoAllowRule"),
        ),
        (
            req("PUT", "https://mcp.example.com/mcp"),
            Some("[]:NoAllowRule"),
        ),
        // A deny rule without `tool` denies every call.
        (
            req("DELETE", "https://mcp.example.com/mcp"),
            Some("[\"no-delete\"]:DenyRule"),
        ),
        // An alias no allow rule lists (more aliases only narrow allow rules further).
        (
            req("POST", "https://mcp.example.com/mcp").alias("slack"),
            Some("[]:NoAllowRule"),
        ),
        // A header alias with a site the rule does not allow.
        (
            req("POST", "https://api.github.com/graphql").alias_in("github", &[Site::Query]),
            Some("[]:NoAllowRule"),
        ),
    ] {
        assert_eq!(any_call(&r).as_deref(), expected, "{} {}", r.method, r.url);
    }
    // The tool of the request is ignored: `drop` is denied, but another tool might not be.
    assert_eq!(
        any_call(&req("POST", "https://mcp.example.com/tools").tool("drop")),
        None
    );
    // Default allow: denied unread only when it could never allow (an alias, loopback).
    let open = compile_with_default(
        "allow",
        "  - id: none\n    effect: deny\n    match: { host: nothing.example }\n",
    );
    let any_open = |r: &Req<'_>| r.with_request(|request| open.denial_for_any_call(request));
    assert!(any_open(&req("POST", "https://example.com/")).is_none());
    assert!(any_open(&req("POST", "https://example.com/").alias("github")).is_some());
    assert!(any_open(&req("POST", "http://127.0.0.1/")).is_some());
}

/// Issue 15: a `CONNECT` is refused before its tunnel when no allow rule could match the host.
#[test]
fn could_allow_host_looks_at_agent_scheme_port_and_host_only() {
    use mint_policy::host::Host;
    let host = |text: &str| Host::parse_request(text).unwrap();
    let policy = compile(
        "  - id: gh\n    effect: allow\n    match:\n      agent: [mino]\n      host: [\"*.github.com\"]\n      method: [GET]\n      path: [/user]\n  - id: local\n    effect: allow\n    match:\n      host: [api.example.test]\n      port: [8443]\n  - id: no-gh\n    effect: deny\n    match:\n      host: [api.github.com]\n",
    );
    assert!(policy.could_allow_host("mino", &host("api.github.com"), 443));
    assert!(!policy.could_allow_host("other", &host("api.github.com"), 443));
    assert!(!policy.could_allow_host("mino", &host("api.github.com"), 8443));
    assert!(!policy.could_allow_host("mino", &host("github.com"), 443));
    assert!(policy.could_allow_host("any", &host("api.example.test"), 8443));
    assert!(!policy.could_allow_host("any", &host("api.example.test"), 443));
    assert!(!compile("  []").could_allow_host("mino", &host("api.github.com"), 443));
    let open = compile_with_default("allow", "  []");
    assert!(open.could_allow_host("mino", &host("api.github.com"), 443));
    assert!(!open.could_allow_host("mino", &host("127.0.0.1"), 443));
}

/// `effect: approve`: deny beats approve beats allow and the default, whatever the order; the
/// hold names every matching approve rule, waits the shortest timeout (120 s by default) and
/// carries the matching allow rules for after the approval.
#[test]
fn approve_rules_hold_between_deny_and_allow() {
    let p = compile(
        "  - id: gh-read\n    effect: allow\n    match: { host: api.github.com, alias: github }\n  - id: ask-writes\n    effect: approve\n    match: { host: api.github.com, alias: github, method: [POST, DELETE] }\n  - id: ask-deletes\n    effect: approve\n    match: { host: api.github.com, alias: github, method: DELETE }\n    approval: { timeout: 30s }\n  - id: no-admin\n    effect: deny\n    match: { host: api.github.com, path: \"/admin/**\" }\n",
    );
    let gh = |method: &'static str, url: &'static str| req(method, url).alias("github");
    assert_eq!(
        verdict(&p, &gh("GET", "https://api.github.com/user")),
        "allow:[\"gh-read\"]"
    );
    assert_eq!(
        verdict(&p, &gh("POST", "https://api.github.com/user")),
        "approve:[\"ask-writes\"]:120s:[\"gh-read\"]"
    );
    assert_eq!(
        verdict(&p, &gh("DELETE", "https://api.github.com/repos/x")),
        "approve:[\"ask-writes\", \"ask-deletes\"]:30s:[\"gh-read\"]"
    );
    assert_eq!(
        verdict(&p, &gh("DELETE", "https://api.github.com/admin/x")),
        "deny:[\"no-admin\"]:DenyRule"
    );
    // Approve rules read omitted fields as allow rules do: no alias listed, no secret; no
    // scheme, https only; no tool, no MCP call.
    let plain = compile("  - id: ask\n    effect: approve\n    match: { host: api.example.com }\n");
    assert_eq!(
        verdict(&plain, &req("GET", "https://api.example.com/")),
        "approve:[\"ask\"]:120s:[]"
    );
    assert_eq!(
        verdict(
            &plain,
            &req("GET", "https://api.example.com/").alias("github")
        ),
        DENY
    );
    assert_eq!(
        verdict(&plain, &req("GET", "https://api.example.com/").tool("q")),
        DENY
    );
    assert_eq!(
        verdict(&plain, &req("GET", "https://api.example.com:8443/")),
        DENY
    );
    // Under `default: allow`, an approve rule still holds what it matches.
    let open = compile_with_default(
        "allow",
        "  - id: ask\n    effect: approve\n    match: { host: api.example.com, method: DELETE }\n",
    );
    assert_eq!(
        verdict(&open, &req("DELETE", "https://api.example.com/")),
        "approve:[\"ask\"]:120s:[]"
    );
    assert_eq!(
        verdict(&open, &req("GET", "https://api.example.com/")),
        "allow:[]"
    );
}

/// A hold consumes no limit when decided: the broker admits its charges (the approve rules'
/// own limits first, then the allow and limit rules') only once the request is approved and
/// sent. Private addresses: either an approve or an allow rule may open them.
#[test]
fn a_hold_carries_its_charges_and_consumes_none() {
    let p = compile(
        "  - id: ask\n    effect: approve\n    match: { host: api.example.com }\n    limits: [{ max: 1, per: 1h }]\n    allow_private: true\n  - id: read\n    effect: allow\n    match: { host: api.example.com }\n    limits: [{ max: 5, per: 1h }]\n  - id: all\n    effect: limit\n    match: { host: api.example.com }\n    limits: [{ max: 9, per: 1d }]\n",
    );
    let r = req("GET", "https://api.example.com/");
    let Evaluation::Approve(hold) = evaluate(&p, &r) else {
        panic!("not held")
    };
    let rules: Vec<&str> = hold.grant.charges.iter().map(|c| c.rule.as_str()).collect();
    assert_eq!(rules, ["ask", "read", "all"]);
    assert_eq!(hold.grant.rules, ["read"]);
    assert!(hold.grant.allow_private);
    let mut l = Limiter::new();
    for at in 0..5 {
        assert_eq!(decide(&p, &mut l, &r, at), "approve:[\"ask\"]");
    }
    assert!(
        l.budgets(&hold.grant.charges, Duration::from_secs(5))
            .iter()
            .all(|b| b.remaining == b.max)
    );
    // Approved and sent: the caller admits the charges; the approve rule's own limit then binds.
    l.admit(&hold.grant.charges, Duration::from_secs(6))
        .unwrap();
    let limited = l
        .admit(&hold.grant.charges, Duration::from_secs(7))
        .unwrap_err();
    assert_eq!(limited.rules, ["ask"]);
}

/// A `CONNECT` opens when an approve rule could match a request inside; a body can make an
/// approve rule naming tools match, so it is read.
#[test]
fn approve_rules_open_tunnels_and_bodies() {
    use mint_policy::host::Host;
    let host = |text: &str| Host::parse_request(text).unwrap();
    let p = compile(
        "  - id: ask-tool\n    effect: approve\n    match: { host: mcp.example.com, method: POST, path: /mcp, tool: [\"drop-*\"] }\n",
    );
    assert!(p.could_allow_host("mino", &host("mcp.example.com"), 443));
    assert_eq!(
        p.rules_that_could_allow_host("mino", &host("mcp.example.com"), 443)
            .collect::<Vec<_>>(),
        ["ask-tool"]
    );
    assert!(!p.could_allow_host("mino", &host("other.example.com"), 443));
    let post = req("POST", "https://mcp.example.com/mcp");
    assert!(
        post.with_request(|request| p.denial_for_any_call(request))
            .is_none()
    );
    assert_eq!(
        verdict(
            &p,
            &req("POST", "https://mcp.example.com/mcp").tool("drop-table")
        ),
        "approve:[\"ask-tool\"]:120s:[]"
    );
}

/// Issue 23: a request no allow rule admits names the allow rule that came closest and each field
/// that kept it from matching, including what the rule leaves out (no `port`: only the default).
#[test]
fn the_closest_allow_rule_and_its_failing_fields_are_named() {
    let yaml = "version: 1\ndefault: deny\nrules:\n  - id: local\n    effect: allow\n    match:\n      host: 127.0.0.1\n      method: GET\n  - id: far\n    effect: allow\n    match:\n      host: 127.0.0.1\n      method: POST\n      path: /x\n";
    let policy = CompiledPolicy::new(load_policy(yaml.as_bytes(), "p.yaml").policy.unwrap());
    let target = normalize_target("https", "127.0.0.1:9443", "/user").unwrap();
    let request = Request {
        agent: "mino",
        method: "GET",
        target: &target,
        aliases: &[],
        tool: None,
    };
    assert!(matches!(policy.evaluate(&request), Evaluation::Deny(_)));
    let near = policy.near_miss(&request).unwrap();
    assert_eq!(near.rule, "local");
    assert_eq!(near.reasons.len(), 1, "{near:?}");
    assert!(
        near.reasons[0].contains("names no `port`, so only 443"),
        "{near:?}"
    );
    // A rule for another host is never offered (candidates come from the host index).
    let elsewhere = normalize_target("https", "api.example.com", "/user").unwrap();
    let request = Request {
        target: &elsewhere,
        ..request
    };
    assert_eq!(policy.near_miss(&request), None);
}
