//! One test per check of POLICY.md's Validation section, and for the alias file's checks: each
//! feeds a small file to the loader and asserts the exact codes (and where it matters, positions)
//! it reports.

#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code: a failed setup step should fail the test; tests may read fixtures"
)]

use mint_policy::aliases::load_aliases;
use mint_policy::check::check_policy;
use mint_policy::policy::load_policy;

const HEAD: &str = "version: 1\nrules:\n";

/// The codes a policy file yields, in position order.
#[track_caller]
fn codes(yaml: &str) -> Vec<&'static str> {
    load_policy(yaml.as_bytes(), "t.yaml")
        .diagnostics
        .iter()
        .map(|d| d.code.as_str())
        .collect()
}

/// The codes of a file made of `HEAD` and one or more rules.
#[track_caller]
fn rule_codes(rules: &str) -> Vec<&'static str> {
    codes(&format!("{HEAD}{rules}"))
}

#[track_caller]
fn alias_codes(yaml: &str) -> Vec<&'static str> {
    load_aliases(yaml.as_bytes(), "a.yaml")
        .diagnostics
        .iter()
        .map(|d| d.code.as_str())
        .collect()
}

const ALLOW: &str = "  - id: r\n    effect: allow\n    match:\n      host: api.github.com\n";

macro_rules! rule_case {
    ($name:ident, $rules:expr, [$($code:literal),*]) => {
        #[test]
        fn $name() {
            let expected: Vec<&str> = vec![$($code),*];
            assert_eq!(rule_codes($rules), expected);
        }
    };
}

#[test]
fn minimal_policy_is_valid() {
    assert_eq!(codes("version: 1\nrules: []\n"), Vec::<&str>::new());
    let load = load_policy(b"version: 1\nrules: []\n", "t.yaml");
    assert!(load.policy.is_some());
    assert_eq!(rule_codes(ALLOW), Vec::<&str>::new());
}

#[test]
fn reports_every_problem_not_the_first() {
    let yaml = "version: 2\ndefault: maybe\nrules:\n  - id: A\n    effect: permit\n  - id: b\n    effect: allow\n    match: { host: '*.com', method: get, port: 0 }\n";
    assert_eq!(
        codes(yaml),
        vec!["E013", "E014", "E030", "E032", "E021", "E027", "E026"]
    );
}

// --- Load-level problems ---

#[test]
fn malformed_yaml() {
    assert_eq!(codes("version: 1\nrules: [\n"), vec!["E003"]);
}

#[test]
fn yaml_anchors_and_aliases() {
    let yaml = "version: 1\nrules:\n  - &r { id: a, effect: deny }\n  - *r\n";
    assert_eq!(codes(yaml), vec!["E004", "E004"]);
}

#[test]
fn duplicate_map_keys() {
    assert_eq!(
        rule_codes("  - id: a\n    effect: deny\n    effect: allow\n"),
        vec!["E005"]
    );
}

#[test]
fn files_over_4_mib() {
    let mut yaml = HEAD.to_owned();
    while yaml.len() <= 4 * 1024 * 1024 {
        yaml.push_str("# padding padding padding padding padding padding padding padding\n");
    }
    assert_eq!(codes(&yaml), vec!["E001"]);
}

#[test]
fn deep_nesting() {
    let yaml = format!(
        "{HEAD}  - id: a\n    effect: deny\n    match: {{ host: {}x{} }}\n",
        "[".repeat(100),
        "]".repeat(100)
    );
    assert_eq!(codes(&yaml), vec!["E006"]);
}

#[test]
fn non_utf8_bytes() {
    let mut bytes = HEAD.as_bytes().to_vec();
    bytes.extend_from_slice(b"  - id: a\xc3\x28\n");
    let load = load_policy(&bytes, "t.yaml");
    assert_eq!(load.diagnostics.len(), 1);
    assert_eq!(
        (load.diagnostics[0].code.as_str(), load.diagnostics[0].line),
        ("E002", 3)
    );
}

#[test]
fn explicit_tags() {
    assert_eq!(codes("version: !!int 1\nrules: []\n"), vec!["E007"]);
}

#[test]
fn empty_and_multi_document_files() {
    assert_eq!(codes(""), vec!["E008"]);
    assert_eq!(
        codes("version: 1\nrules: []\n---\nversion: 1\n"),
        vec!["E008"]
    );
}

// --- Structure ---

#[test]
fn unknown_fields_anywhere_with_did_you_mean() {
    let load = load_policy(
        b"version: 1\nrule: []\nrules:\n  - id: a\n    efect: deny\n    match: { hots: x.com }\n    limits: [{ max: 1, per: 1h, bye: [agent] }]\n",
        "t.yaml",
    );
    let found: Vec<(&str, &str)> = load
        .diagnostics
        .iter()
        .map(|d| (d.code.as_str(), d.message.as_str()))
        .collect();
    assert!(
        found
            .iter()
            .any(|(c, m)| *c == "E010" && m.contains("did you mean `rules`")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|(c, m)| *c == "E010" && m.contains("did you mean `effect`"))
    );
    assert!(
        found
            .iter()
            .any(|(c, m)| *c == "E010" && m.contains("did you mean `host`"))
    );
    assert!(
        found
            .iter()
            .any(|(c, m)| *c == "E010" && m.contains("did you mean `by`"))
    );
}

#[test]
fn missing_required_fields() {
    assert_eq!(codes("rules: []\n"), vec!["E011"]);
    assert_eq!(codes("version: 1\n"), vec!["E011"]);
    assert_eq!(rule_codes("  - effect: deny\n"), vec!["E011"]);
    assert_eq!(rule_codes("  - id: a\n"), vec!["E011"]);
}

#[test]
fn wrong_types() {
    assert_eq!(codes("version: '1'\nrules: []\n"), vec!["E012"]);
    assert_eq!(codes("version: 1\nrules: {}\n"), vec!["E012"]);
    assert_eq!(codes("- a\n"), vec!["E012"]);
    assert_eq!(
        rule_codes("  - id: a\n    effect: deny\n    match: { port: '443' }\n"),
        vec!["E012"]
    );
    assert_eq!(
        rule_codes("  - id: a\n    effect: deny\n    match: { host: [[a.com]] }\n"),
        vec!["E012"]
    );
}

#[test]
fn unsupported_version_and_default() {
    assert_eq!(codes("version: 2\nrules: []\n"), vec!["E013"]);
    assert_eq!(
        codes("version: 1\ndefault: Deny\nrules: []\n"),
        vec!["E014"]
    );
}

rule_case!(
    empty_lists,
    "  - id: a\n    effect: deny\n    match: { host: [] }\n",
    ["E015"]
);

// --- Hosts ---

rule_case!(
    wildcard_not_whole_leading_label,
    "  - id: a\n    effect: deny\n    match: { host: 'api*.github.com' }\n",
    ["E020"]
);
rule_case!(
    wildcard_in_middle_label,
    "  - id: a\n    effect: deny\n    match: { host: 'api.*.com' }\n",
    ["E020"]
);
rule_case!(
    wildcard_over_tld,
    "  - id: a\n    effect: deny\n    match: { host: '*.com' }\n",
    ["E021"]
);
rule_case!(
    wildcard_alone,
    "  - id: a\n    effect: deny\n    match: { host: '*' }\n",
    ["E021"]
);
rule_case!(
    uppercase_host,
    "  - id: a\n    effect: deny\n    match: { host: API.github.com }\n",
    ["E022"]
);
rule_case!(
    trailing_dot_host,
    "  - id: a\n    effect: deny\n    match: { host: api.github.com. }\n",
    ["E022"]
);
rule_case!(
    unicode_host,
    "  - id: a\n    effect: deny\n    match: { host: bücher.de }\n",
    ["E022"]
);
rule_case!(
    non_canonical_ip,
    "  - id: a\n    effect: deny\n    match: { host: '0x7f.1' }\n",
    ["E022"]
);
rule_case!(
    host_with_port,
    "  - id: a\n    effect: deny\n    match: { host: 'api.github.com:443' }\n",
    ["E023"]
);
rule_case!(
    host_with_scheme,
    "  - id: a\n    effect: deny\n    match: { host: 'https://api.github.com' }\n",
    ["E023"]
);

#[test]
fn non_canonical_host_names_the_canonical_form() {
    // The message says what to change, never the canonical text: that is the operator's text
    // lowercased, and a pasted token with dots reads as a host (issue 24).
    for (host, fix) in [
        ("bücher.de", "punycode"),
        ("API.github.com", "lowercase"),
        ("api.github.com.", "trailing dot"),
        ("'[::1]'", "brackets"),
        ("0x7f.1", "four decimal numbers"),
        ("'::ffff:127.0.0.1'", "as IPv4"),
    ] {
        let load = load_policy(
            format!("{HEAD}  - id: a\n    effect: deny\n    match: {{ host: {host} }}\n")
                .as_bytes(),
            "t",
        );
        let message = &load.diagnostics[0].message;
        assert_eq!(load.diagnostics[0].code.as_str(), "E022");
        assert!(message.contains(fix), "{host}: {message}");
        for quoted in ["xn--", "github", "::1", "127.0.0.1"] {
            assert!(
                !message.contains(quoted) || quoted == "xn--" && message.contains("(`xn--`)"),
                "{host}: {message}"
            );
        }
    }
}

// --- Scheme, port, method, path ---

rule_case!(
    http_for_non_loopback,
    "  - id: a\n    effect: allow\n    match: { scheme: http, host: api.github.com }\n",
    ["E024"]
);
rule_case!(
    http_for_loopback_is_fine,
    "  - id: a\n    effect: allow\n    match: { scheme: http, host: [127.0.0.1, localhost, '::1'], port: 8080 }\n",
    []
);
rule_case!(
    unknown_scheme,
    "  - id: a\n    effect: deny\n    match: { scheme: ftp }\n",
    ["E025"]
);
rule_case!(
    port_zero,
    "  - id: a\n    effect: deny\n    match: { port: 0 }\n",
    ["E026"]
);
rule_case!(
    port_too_big,
    "  - id: a\n    effect: deny\n    match: { port: 65536 }\n",
    ["E026"]
);
rule_case!(
    lowercase_method,
    "  - id: a\n    effect: deny\n    match: { method: get }\n",
    ["E027"]
);
rule_case!(
    garbage_method,
    "  - id: a\n    effect: deny\n    match: { method: 'G E T' }\n",
    ["E027"]
);
rule_case!(
    path_with_dotdot,
    "  - id: a\n    effect: deny\n    match: { path: '/a/../b' }\n",
    ["E028"]
);
rule_case!(
    path_with_double_slash,
    "  - id: a\n    effect: deny\n    match: { path: '/a//b' }\n",
    ["E028"]
);
rule_case!(
    path_with_semicolon,
    "  - id: a\n    effect: deny\n    match: { path: '/a;b' }\n",
    ["E028"]
);
rule_case!(
    path_with_percent,
    "  - id: a\n    effect: deny\n    match: { path: '/a%2Fb' }\n",
    ["E028"]
);
rule_case!(
    path_with_query,
    "  - id: a\n    effect: deny\n    match: { path: '/a?b=1' }\n",
    ["E028"]
);
rule_case!(
    path_with_fragment,
    "  - id: a\n    effect: deny\n    match: { path: '/a#b' }\n",
    ["E028"]
);
rule_case!(
    path_with_backslash,
    "  - id: a\n    effect: deny\n    match: { path: '/a\\b' }\n",
    ["E028"]
);
rule_case!(
    path_not_absolute,
    "  - id: a\n    effect: deny\n    match: { path: 'repos/**' }\n",
    ["E028"]
);

#[test]
fn lowercase_method_suggests_uppercase() {
    let load = load_policy(
        format!("{HEAD}  - id: a\n    effect: deny\n    match: {{ method: get }}\n").as_bytes(),
        "t",
    );
    assert!(load.diagnostics[0].message.contains("write `GET`"));
}

// --- Names, ids, effects ---

rule_case!(
    bad_agent_glob,
    "  - id: a\n    effect: deny\n    match: { agent: 'mino bot' }\n",
    ["E029"]
);
rule_case!(
    bad_rule_id,
    "  - id: Github_Read\n    effect: deny\n",
    ["E030"]
);
rule_case!(
    duplicate_rule_ids,
    "  - id: a\n    effect: deny\n  - id: a\n    effect: deny\n",
    ["E031"]
);
rule_case!(bad_effect, "  - id: a\n    effect: permit\n", ["E032"]);
rule_case!(
    limits_on_deny,
    "  - id: a\n    effect: deny\n    limits: [{ max: 1, per: 1h }]\n",
    ["E033"]
);
rule_case!(
    inject_on_deny,
    "  - id: a\n    effect: deny\n    inject: [header]\n",
    ["E033"]
);
rule_case!(
    allow_private_on_limit,
    "  - id: a\n    effect: limit\n    allow_private: true\n    limits: [{ max: 1, per: 1h }]\n",
    ["E033"]
);
rule_case!(
    allow_without_host,
    "  - id: a\n    effect: allow\n    match: { method: GET }\n",
    ["E034"]
);
rule_case!(
    bad_inject_site,
    "  - id: a\n    effect: allow\n    match: { host: a.example.com }\n    inject: [cookie]\n",
    ["E035"]
);
rule_case!(
    bad_alias_ref,
    "  - id: a\n    effect: deny\n    match: { alias: GitHub }\n",
    ["E036"]
);
rule_case!(
    bad_tool_glob,
    "  - id: a\n    effect: deny\n    match: { tool: 'query docs' }\n",
    ["E037"]
);

// --- Limits ---

rule_case!(
    limit_max_zero,
    "  - id: a\n    effect: limit\n    limits: [{ max: 0, per: 1h }]\n",
    ["E038"]
);
rule_case!(
    limit_max_negative,
    "  - id: a\n    effect: limit\n    limits: [{ max: -5, per: 1h }]\n",
    ["E038"]
);
// Issue 23: `per: 1w` is a week, as `--ttl 1w` is; a sub-second window is refused.
rule_case!(
    sub_second_window,
    "  - id: a\n    effect: limit\n    limits: [{ max: 5, per: 500ms }]\n",
    ["E039"]
);
rule_case!(
    bad_duration_unit,
    "  - id: a\n    effect: limit\n    limits: [{ max: 5, per: 1y }]\n",
    ["E039"]
);
rule_case!(
    bad_duration_number,
    "  - id: a\n    effect: limit\n    limits: [{ max: 5, per: 3600 }]\n",
    ["E039"]
);
rule_case!(
    bad_duration_zero,
    "  - id: a\n    effect: limit\n    limits: [{ max: 5, per: 0s }]\n",
    ["E039"]
);
rule_case!(
    bad_limit_by,
    "  - id: a\n    effect: limit\n    limits: [{ max: 5, per: 1h, by: [user] }]\n",
    ["E040"]
);
rule_case!(
    duplicate_limit_by,
    "  - id: a\n    effect: limit\n    limits: [{ max: 5, per: 1h, by: [agent, agent] }]\n",
    ["E040"]
);
rule_case!(
    limit_rule_without_limits,
    "  - id: a\n    effect: limit\n",
    ["E041"]
);

#[test]
fn too_many_rules() {
    let mut yaml = HEAD.to_owned();
    for i in 0..10_001 {
        yaml.push_str(&format!("  - {{ id: r{i}, effect: deny }}\n"));
    }
    assert_eq!(codes(&yaml), vec!["E042"]);
}

#[test]
fn legacy_call_limits() {
    assert_eq!(
        codes("version: 1\nrules: []\ncall_limits: { 'GitHub': 5 }\n"),
        vec!["E043"]
    );
    assert_eq!(
        codes("version: 1\nrules: []\ncall_limits: { github: 0 }\n"),
        vec!["E043"]
    );
    assert_eq!(
        codes("version: 1\nrules: []\ncall_limits: { 'tool:': 5 }\n"),
        vec!["E043"]
    );
    let load = load_policy(
        b"version: 1\nrules: []\ncall_limits:\n  github: 5000\n  'tool:query-docs': 200\n",
        "t",
    );
    let w: Vec<_> = load
        .diagnostics
        .iter()
        .map(|d| (d.code.as_str(), d.message.clone()))
        .collect();
    assert_eq!(w.len(), 2);
    assert_eq!(w[0].0, "W002");
    // The replacement rule is a template: the key could be a pasted token (issue 24).
    assert!(
        w[0].1
            .contains("match: { alias: [ALIAS] }, limits: [{ max: COUNT, per: 1d }]"),
        "{}",
        w[0].1
    );
    assert!(w[1].1.contains("tool: [TOOL]"));
    for d in &load.diagnostics {
        assert_eq!(d.path, "call_limits");
        assert!(!d.render("t").contains("github") && !d.render("t").contains("query-docs"));
    }
    assert_eq!(load.legacy_call_limit_count, 2);
    assert!(load.policy.is_some());
}

// --- Warnings ---

#[test]
fn default_allow_warns() {
    assert_eq!(
        codes("version: 1\ndefault: allow\nrules: []\n"),
        vec!["W001"]
    );
}

rule_case!(
    allow_shadowed_by_deny,
    "  - id: read\n    effect: allow\n    match: { host: api.github.com, method: GET, path: '/repos/**' }\n  - id: no-github\n    effect: deny\n    match: { host: '*.github.com' }\n",
    ["W003"]
);
rule_case!(
    allow_not_shadowed_by_narrower_deny,
    "  - id: read\n    effect: allow\n    match: { host: api.github.com, method: [GET, DELETE] }\n  - id: no-deletes\n    effect: deny\n    match: { method: DELETE }\n",
    []
);
rule_case!(
    alias_on_wildcard_host,
    "  - id: raw\n    effect: allow\n    match: { alias: github, host: '*.githubusercontent.com' }\n",
    ["W004"]
);
rule_case!(
    inject_beyond_headers,
    "  - id: q\n    effect: allow\n    match: { alias: maps, host: maps.example.com }\n    inject: [header, query]\n",
    ["W005"]
);
rule_case!(
    allow_private_warns,
    "  - id: p\n    effect: allow\n    match: { host: intranet.example.com }\n    allow_private: true\n",
    ["W006"]
);

#[test]
fn warnings_do_not_invalidate() {
    let report = check_policy(b"version: 1\ndefault: allow\nrules: []\n", "p.yaml");
    assert!(report.valid);
    assert_eq!(report.warnings.len(), 1);
}

// --- Positions, ids, paths ---

#[test]
fn diagnostics_carry_position_rule_and_path() {
    let yaml = "version: 1\nrules:\n  - id: gh-write\n    effect: allow\n    match:\n      host: [api.github.com, 'api*.github.com']\n";
    let d = &load_policy(yaml.as_bytes(), "policy.yaml").diagnostics[0];
    assert_eq!((d.line, d.column), (6, 30));
    assert_eq!(d.rule_id.as_deref(), Some("gh-write"));
    assert_eq!(d.path, "match.host[1]");
    assert_eq!(
        d.render("policy.yaml"),
        "policy.yaml:6:30: error[E020]: rule \"gh-write\": match.host[1]: '*' must be a whole leading label, e.g. \"*.github.com\""
    );
}

#[test]
fn rules_without_valid_id_use_absolute_paths() {
    let yaml = "version: 1\nrules:\n  - effect: allow\n    match: { host: 'a*.x.com' }\n";
    let ds = load_policy(yaml.as_bytes(), "p").diagnostics;
    assert!(ds.iter().all(|d| d.rule_id.is_none()));
    assert!(ds.iter().any(|d| d.path == "rules[0].match.host"));
}

// --- Secrets are never echoed ---

#[test]
fn free_scalars_are_never_quoted() {
    const CANARY: &str = "ghp_CANARY0123456789abcdefSECRET";
    let yaml = format!(
        "version: 1\n{CANARY}: 1\nrules:\n  - id: a\n    effect: allow\n    description: [{CANARY}]\n    {CANARY}: x\n    token: {CANARY}\n    match:\n      host: ['{CANARY}', 'x{CANARY}*.com', '{CANARY}.com:1']\n      agent: '{CANARY} '\n      method: 'get {CANARY}'\n      path: '{CANARY}'\n      alias: '{CANARY}'\n      tool: '{CANARY} '\n      scheme: '{CANARY}'\n      port: '{CANARY}'\n    inject: ['{CANARY}']\ndefault: '{CANARY}'\ncall_limits: {{ '{CANARY}': '{CANARY}' }}\n"
    );
    let report = check_policy(yaml.as_bytes(), "p.yaml");
    assert!(!report.valid);
    assert!(report.errors.len() > 10, "{}", report.render_human());
    let human = report.render_human();
    let json = serde_json::to_string(&report).unwrap();
    assert!(!human.contains("CANARY"), "{human}");
    assert!(!json.contains("CANARY"));
}

// --- Alias file ---

#[test]
fn alias_file_valid() {
    let yaml = "aliases:\n  - name: github\n    description: docs bot\n    hosts: [api.github.com]\n  - name: slack\n    hosts: slack.com\n    source: file:/run/secrets/slack\n  - name: ctx\n    hosts: [mcp.context7.com]\n    source: env:CONTEXT7_API_KEY\n";
    let load = load_aliases(yaml.as_bytes(), "a.yaml");
    assert_eq!(load.diagnostics, vec![]);
    let file = load.aliases.unwrap();
    assert_eq!(file.aliases.len(), 3);
    // What `mint alias add` writes reads back the same.
    let again = load_aliases(file.to_yaml().as_bytes(), "a.yaml")
        .aliases
        .unwrap();
    assert_eq!(
        again
            .aliases
            .iter()
            .map(|a| (&a.name, &a.description, &a.hosts, a.sites, &a.source))
            .collect::<Vec<_>>(),
        file.aliases
            .iter()
            .map(|a| (&a.name, &a.description, &a.hosts, a.sites, &a.source))
            .collect::<Vec<_>>()
    );
    assert_eq!(alias_codes("aliases: []\n"), Vec::<&str>::new());
}

#[test]
fn alias_file_checks() {
    let head = "aliases:\n";
    let one = |body: &str| alias_codes(&format!("{head}{body}"));
    assert_eq!(
        one("  - name: GitHub\n    hosts: [a.example.com]\n"),
        vec!["E036"]
    );
    assert_eq!(
        one("  - name: a\n    hosts: [a.example.com]\n  - name: a\n    hosts: [b.example.com]\n"),
        vec!["E050"]
    );
    assert_eq!(one("  - name: a\n"), vec!["E011"]);
    assert_eq!(one("  - name: a\n    hosts: []\n"), vec!["E015"]);
    assert_eq!(one("  - name: a\n    hosts: ['*.com']\n"), vec!["E021"]);
    assert_eq!(
        one("  - name: a\n    hosts: ['API.example.com']\n"),
        vec!["E022"]
    );
    assert_eq!(
        one("  - name: a\n    hosts: ['*.example.com']\n"),
        vec!["W004"]
    );
    assert_eq!(
        one("  - name: a\n    hosts: [a.example.com]\n    sites: [cookie]\n"),
        vec!["E035"]
    );
    assert_eq!(
        one("  - name: a\n    hosts: [a.example.com]\n    sites: [query]\n"),
        vec!["W005"]
    );
    assert_eq!(
        one("  - name: a\n    hosts: [a.example.com]\n    source: vault\n"),
        vec!["E051"]
    );
    assert_eq!(
        one("  - name: a\n    hosts: [a.example.com]\n    source: 'file:relative/path'\n"),
        vec!["E051"]
    );
    assert_eq!(
        one("  - name: a\n    hosts: [a.example.com]\n    source: 'env:1BAD'\n"),
        vec!["E051"]
    );
    assert_eq!(
        one("  - name: a\n    hosts: [a.example.com]\n    secret: x\n"),
        vec!["E010"]
    );
    // `env` (issue 16): names for `mint run`, in the variable grammar, not its own, never twice.
    assert_eq!(
        one("  - name: a\n    hosts: [a.example.com]\n    env: [GITHUB_TOKEN, GH_TOKEN]\n"),
        Vec::<&str>::new()
    );
    assert_eq!(
        one("  - name: a\n    hosts: [a.example.com]\n    env: GITHUB_TOKEN\n"),
        Vec::<&str>::new()
    );
    assert_eq!(
        one("  - name: a\n    hosts: [a.example.com]\n    env: [1TOKEN, 'GH-TOKEN', '']\n"),
        vec!["E055", "E055", "E055"]
    );
    assert_eq!(
        one(
            "  - name: a\n    hosts: [a.example.com]\n    env: [SSL_CERT_FILE, Https_Proxy, MINT_HOME]\n"
        ),
        vec!["E056", "E056", "E056"]
    );
    assert_eq!(
        one("  - name: a\n    hosts: [a.example.com]\n    env: [TOKEN, TOKEN]\n"),
        vec!["E057"]
    );
    assert_eq!(
        one(
            "  - name: a\n    hosts: [a.example.com]\n    env: [TOKEN]\n  - name: b\n    hosts: [b.example.com]\n    env: [TOKEN]\n"
        ),
        vec!["E057"]
    );
    assert_eq!(
        one("  - name: a\n    hosts: [a.example.com]\n    env: {TOKEN: 1}\n"),
        vec!["E012"]
    );
    assert_eq!(alias_codes("aliases: [\n"), vec!["E003"]);
}

#[test]
fn alias_file_never_quotes_a_pasted_secret() {
    const CANARY: &str = "xoxb-CANARY-123456789-SECRET";
    let yaml = format!(
        "aliases:\n  - name: '{CANARY}'\n    hosts: ['{CANARY}']\n    source: '{CANARY}'\n    {CANARY}: 1\n    description: 7\n"
    );
    let load = load_aliases(yaml.as_bytes(), "a.yaml");
    assert!(load.diagnostics.len() >= 3);
    for d in &load.diagnostics {
        assert!(
            !d.render("a.yaml").contains("CANARY"),
            "{}",
            d.render("a.yaml")
        );
    }
}

rule_case!(
    path_with_braces,
    "  - id: a\n    effect: deny\n    match: { path: '/v1/{admin,root}/**' }\n",
    ["E028"]
);
rule_case!(
    path_with_brackets,
    "  - id: a\n    effect: deny\n    match: { path: '/v1/[ab]' }\n",
    ["E028"]
);
rule_case!(
    unregistered_method_warns,
    "  - id: a\n    effect: deny\n    match: { method: DELET }\n",
    ["W007"]
);

#[test]
fn unregistered_method_suggests_the_closest() {
    let load = load_policy(
        format!("{HEAD}  - id: a\n    effect: deny\n    match: {{ method: PSOT }}\n").as_bytes(),
        "t",
    );
    assert!(
        load.diagnostics[0].message.contains("did you mean `POST`?"),
        "{}",
        load.diagnostics[0].message
    );
    assert!(load.policy.is_some(), "a warning does not invalidate");
}

#[test]
fn findings_are_capped() {
    let mut yaml = HEAD.to_owned();
    for i in 0..1500 {
        yaml.push_str(&format!("  - {{ id: R{i}, effect: deny }}\n"));
    }
    let load = load_policy(yaml.as_bytes(), "t.yaml");
    assert_eq!(load.diagnostics.len(), 1001);
    let last = load.diagnostics.last().unwrap();
    assert_eq!(last.code.as_str(), "E009");
    assert!(
        last.message.starts_with("500 more findings"),
        "{}",
        last.message
    );
}

/// Issue 16: the body site names JSON Pointers. A bare `body` (the old form, which substituted
/// in any JSON string of the body) is refused with E052 and a message that says how to name
/// them; a pointer that is not RFC 6901 is E053. The new form reads back through `to_yaml`.
#[test]
fn alias_body_site_names_json_pointers() {
    let load = load_aliases(
        b"aliases:\n  - name: gh\n    hosts: [api.github.com]\n    sites: [header, body]\n",
        "a.yaml",
    );
    assert!(load.aliases.is_none());
    let [finding] = &load.diagnostics[..] else {
        panic!("{:?}", load.diagnostics)
    };
    assert_eq!(finding.code.as_str(), "E052");
    let rendered = finding.render("a.yaml");
    assert!(
        rendered.starts_with("a.yaml:4:21: error[E052]"),
        "{rendered}"
    );
    assert!(
        rendered.contains("`{body: [/client_secret]}`"),
        "{rendered}"
    );

    for (sites, code) in [
        ("[{body: [client_secret]}]", "E053"),
        ("[{body: [/a~2]}]", "E053"),
        ("[{body: []}]", "E015"),
        ("[{body: [/a], query: [/b]}]", "E035"),
        ("[{cookie: [/a]}]", "E035"),
    ] {
        let yaml =
            format!("aliases:\n  - name: gh\n    hosts: [api.github.com]\n    sites: {sites}\n");
        let codes = alias_codes(&yaml);
        assert!(codes.contains(&code), "{sites}: {codes:?}");
    }

    let yaml = "aliases:\n  - name: gh\n    hosts: [api.github.com]\n    sites:\n      - header\n      - body: [/client_secret, \"/a~1b/0\", \"\"]\n";
    let load = load_aliases(yaml.as_bytes(), "a.yaml");
    let codes: Vec<&str> = load.diagnostics.iter().map(|d| d.code.as_str()).collect();
    assert_eq!(codes, ["W005"]);
    let file = load.aliases.unwrap();
    let alias = &file.aliases[0];
    let pointers: Vec<&str> = alias.body.iter().map(|p| p.as_str()).collect();
    assert_eq!(pointers, ["/client_secret", "/a~1b/0", ""]);
    assert_eq!(alias.body[1].tokens(), ["a/b", "0"]);
    assert!(alias.sites.contains(mint_policy::site::Site::Body));
    let again = load_aliases(file.to_yaml().as_bytes(), "a.yaml")
        .aliases
        .unwrap();
    assert_eq!(again.aliases[0].body, alias.body);
    assert_eq!(again.aliases[0].sites, alias.sites);
}

// --- effect: approve ---

const APPROVE: &str = "  - id: r\n    effect: approve\n    match:\n      host: api.github.com\n";

/// `approval.timeout` is 1 s to 280 s in the duration syntax; 120 s when absent. A malformed one
/// is E039, one past 280 s E060, unknown fields inside `approval` E010, a non-mapping E012.
#[test]
fn approval_timeout_bounds_and_shape() {
    let timeout = |approval: &str| {
        let yaml = format!("{HEAD}{APPROVE}    approval: {approval}\n");
        let load = load_policy(yaml.as_bytes(), "t.yaml");
        let codes: Vec<&str> = load.diagnostics.iter().map(|d| d.code.as_str()).collect();
        let secs = load
            .policy
            .map(|p| p.rules[0].approval.unwrap().timeout.as_secs());
        (codes, secs)
    };
    assert_eq!(timeout("{ timeout: 1s }"), (vec![], Some(1)));
    assert_eq!(timeout("{ timeout: 280s }"), (vec![], Some(280)));
    assert_eq!(timeout("{ timeout: 4m }"), (vec![], Some(240)));
    assert_eq!(timeout("{}"), (vec![], Some(120)));
    assert_eq!(timeout("{ timeout: 281s }"), (vec!["E060"], None));
    assert_eq!(timeout("{ timeout: 5m }"), (vec!["E060"], None));
    assert_eq!(timeout("{ timeout: 1h }"), (vec!["E060"], None));
    for malformed in [
        "0s",
        "90",
        "1.5m",
        "-1s",
        "2 m",
        "1y",
        "'120s '",
        "[120s]",
        "999999999999d",
    ] {
        assert_eq!(
            timeout(&format!("{{ timeout: {malformed} }}")).0,
            ["E039"],
            "{malformed}"
        );
    }
    assert_eq!(timeout("{ timout: 60s }").0, ["E010"]);
    assert_eq!(timeout("60s").0, ["E012"]);
    // Absent: the default.
    let load = load_policy(format!("{HEAD}{APPROVE}").as_bytes(), "t.yaml");
    let rule = &load.policy.unwrap().rules[0];
    assert_eq!(rule.approval.unwrap().timeout.as_secs(), 120);
}

rule_case!(
    approval_belongs_to_approve_rules,
    "  - id: a\n    effect: allow\n    match: { host: a.example.com }\n    approval: { timeout: 60s }\n  - id: d\n    effect: deny\n    approval: { timeout: 60s }\n  - id: l\n    effect: limit\n    limits: [{ max: 1, per: 1h }]\n    approval: {}\n",
    ["E033", "E033", "E033"]
);

rule_case!(
    approve_rules_need_hosts_and_loopback_only_http,
    "  - id: a\n    effect: approve\n    match: { method: DELETE }\n  - id: b\n    effect: approve\n    match: { scheme: http, host: api.example.com }\n",
    ["E034", "E024"]
);

rule_case!(
    approve_rules_take_inject_allow_private_and_limits,
    "  - id: a\n    effect: approve\n    match: { alias: gh, host: '*.github.com' }\n    inject: [query]\n    allow_private: true\n    limits: [{ max: 1, per: 1h }]\n",
    ["W004", "W005", "W006"]
);

#[test]
fn an_approve_rule_a_deny_rule_overrides_is_w003() {
    let codes = rule_codes(
        "  - id: ask\n    effect: approve\n    match: { host: api.github.com, method: DELETE }\n  - id: no\n    effect: deny\n    match: { host: '*.github.com' }\n",
    );
    assert_eq!(codes, ["W003"]);
    let load = load_policy(
        format!("{HEAD}  - id: ask\n    effect: approve\n    match: {{ host: api.github.com }}\n  - id: no\n    effect: deny\n    match: {{ host: '*.github.com' }}\n").as_bytes(),
        "t.yaml",
    );
    assert!(load.diagnostics[0].message.contains("holds for approval"));
}

/// Issue 16: the form site names the fields of an `application/x-www-form-urlencoded` body, as
/// the receiver reads them (decoded). A bare `form` is E059; an empty name, a control character
/// or a name past 256 bytes is E058, and so is a list of more than 64. `{form: [...]}` alone
/// gives the alias the body site, warns W005 like a pointer does, and reads back through
/// `to_yaml` next to the pointers.
#[test]
fn alias_form_site_names_form_fields() {
    let load = load_aliases(
        b"aliases:\n  - name: oauth\n    hosts: [auth.example.com]\n    sites: [form]\n",
        "a.yaml",
    );
    assert!(load.aliases.is_none());
    let [finding] = &load.diagnostics[..] else {
        panic!("{:?}", load.diagnostics)
    };
    assert_eq!(finding.code.as_str(), "E059");
    let rendered = finding.render("a.yaml");
    assert!(
        rendered.starts_with("a.yaml:4:13: error[E059]"),
        "{rendered}"
    );
    assert!(rendered.contains("`{form: [client_secret]}`"), "{rendered}");

    let long = "f".repeat(257);
    let many: Vec<String> = (0..65).map(|i| format!("f{i}")).collect();
    let many = format!("[{{form: [{}]}}]", many.join(", "));
    for (sites, code) in [
        (r#"[{form: [""]}]"#, "E058"),
        (r#"[{form: ["a\nb"]}]"#, "E058"),
        (r#"[{form: ["a\tb"]}]"#, "E058"),
        (&format!("[{{form: [{long}]}}]")[..], "E058"),
        (&many[..], "E058"),
        ("[{form: []}]", "E015"),
        ("[{form: {a: b}}]", "E012"),
        ("[{form: [a], body: [/b]}]", "E035"),
    ] {
        let yaml = format!(
            "aliases:\n  - name: oauth\n    hosts: [auth.example.com]\n    sites: {sites}\n"
        );
        let codes = alias_codes(&yaml);
        assert!(codes.contains(&code), "{sites}: {codes:?}");
    }
    // A rejected name is never quoted back: an operator may paste a token there.
    let yaml = "aliases:\n  - name: oauth\n    hosts: [auth.example.com]\n    sites: [{form: [\"tok-Zq8Wn3\\u0000\"]}]\n";
    let load = load_aliases(yaml.as_bytes(), "a.yaml");
    for finding in &load.diagnostics {
        assert!(
            !finding.render("a.yaml").contains("tok-Zq8Wn3"),
            "{finding:?}"
        );
    }

    let yaml = "aliases:\n  - name: oauth\n    hosts: [auth.example.com]\n    sites:\n      - {form: [client_secret, \"client secret\", \"a&b=c\", client_secret]}\n      - body: [/client_secret]\n";
    let load = load_aliases(yaml.as_bytes(), "a.yaml");
    let codes: Vec<&str> = load.diagnostics.iter().map(|d| d.code.as_str()).collect();
    assert_eq!(codes, ["W005"]);
    let file = load.aliases.unwrap();
    let alias = &file.aliases[0];
    let fields: Vec<&str> = alias.form.iter().map(|f| f.as_str()).collect();
    assert_eq!(fields, ["client_secret", "client secret", "a&b=c"]);
    assert!(alias.sites.contains(mint_policy::site::Site::Body));
    assert!(!alias.sites.contains(mint_policy::site::Site::Header));
    let text = file.to_yaml();
    assert!(
        text.contains(r#"sites: [{body: ["/client_secret"]}, {form: ["client_secret", "client secret", "a&b=c"]}]"#),
        "{text}"
    );
    let again = load_aliases(text.as_bytes(), "a.yaml").aliases.unwrap();
    assert_eq!(again.aliases[0].form, alias.form);
    assert_eq!(again.aliases[0].body, alias.body);
    assert_eq!(again.aliases[0].sites, alias.sites);
}

/// `placeholder` shapes: a token shape or `jwt` loads and writes back the same; a shape Mint
/// cannot derive from is E061, one with fewer than 128 random bits E062, a `mint` prefix E063;
/// no message quotes the prefix (it could be a key pasted into the wrong field).
#[test]
fn alias_placeholder_shapes() {
    let alias = |shape: &str| {
        format!(
            "aliases:\n  - name: openai\n    hosts: [api.openai.com]\n    placeholder: {shape}\n"
        )
    };
    for good in [
        "{prefix: sk-, length: 48}",
        "{prefix: sk-ant-oat01-, length: 108, alphabet: base64url}",
        "{length: 32, alphabet: hex}",
        "jwt",
    ] {
        let load = load_aliases(alias(good).as_bytes(), "a.yaml");
        assert_eq!(load.diagnostics, vec![], "{good}");
        let file = load.aliases.unwrap();
        let again = load_aliases(file.to_yaml().as_bytes(), "a.yaml")
            .aliases
            .unwrap();
        assert_eq!(
            again.aliases[0].placeholder, file.aliases[0].placeholder,
            "{good}"
        );
        assert!(file.aliases[0].placeholder.is_some());
    }
    for (bad, code) in [
        ("{prefix: \"sk+\", length: 48}", "E061"),
        ("{prefix: sk-, length: 3}", "E061"),
        ("{prefix: sk-, length: 9999}", "E061"),
        ("{prefix: sk-, length: 48, alphabet: base10}", "E061"),
        ("{prefix: \"{{mint:\", length: 80}", "E061"),
        ("jwt2", "E061"),
        ("{prefix: sk-, length: 24}", "E062"),
        ("{length: 31, alphabet: hex}", "E062"),
        ("{prefix: mint_cap_, length: 80}", "E063"),
    ] {
        assert_eq!(alias_codes(&alias(bad)), vec![code], "{bad}");
    }
    assert_eq!(alias_codes(&alias("{prefix: sk-}")), vec!["E011"]);
    assert_eq!(
        alias_codes(&alias("{prefix: sk-, length: 48, size: 2}")),
        vec!["E010"]
    );
    let pasted = alias("{prefix: ghp_CANARY0123456789abcdefghijkl, length: 40}");
    let load = load_aliases(pasted.as_bytes(), "a.yaml");
    assert!(!load.diagnostics.is_empty());
    for d in &load.diagnostics {
        assert!(!format!("{d:?}").contains("CANARY"), "{d:?}");
    }
}
