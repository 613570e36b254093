//! Attacks on `mint-policy` from an adversarial review: each test is one attack, named after the
//! weakness it probes. The first group found real bugs (all fixed: encoded reserved characters,
//! trailing slashes, method case, the unspecified address, unbounded findings and path length,
//! quadratic suggestions, limit pruning and Retry-After, empty `*` segments, typo'd methods,
//! brace globs, echoed values); the "regression" group covers attacks that held up.

#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code"
)]

use std::time::Duration;

use mint_policy::evaluate::{AliasUse, CompiledPolicy, Decision, Evaluation, Request};
use mint_policy::host::Host;
use mint_policy::limits::Limiter;
use mint_policy::normalize::{Target, normalize_target};
use mint_policy::policy::load_policy;
use mint_policy::site::SiteSet;

#[track_caller]
fn compile(default: &str, rules: &str) -> CompiledPolicy {
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

fn eval(policy: &CompiledPolicy, method: &str, url: &str, aliases: &[&str]) -> Evaluation {
    let target = target(url);
    let uses: Vec<AliasUse> = aliases
        .iter()
        .map(|a| AliasUse {
            alias: (*a).to_owned(),
            sites: SiteSet::HEADER,
        })
        .collect();
    policy.evaluate(&Request {
        agent: "mino",
        method,
        target: &target,
        aliases: &uses,
        tool: None,
    })
}

fn is_allow(e: &Evaluation) -> bool {
    matches!(e, Evaluation::Allow(_))
}

// ============================================================================================
// Findings (fail today)
// ============================================================================================

/// Attack: a deny rule whose path glob holds a reserved character that servers decode (`:`, `@`,
/// `!`, `$`, `&`, `'`, `(`, `)`, `+`, `,`, `=`) is bypassed by percent-encoding that character.
/// `normalize_path` decodes only unreserved escapes, so `latest%3Aaccess` stays encoded and never
/// equals the glob's `latest:access`; Google APIs (and most HTTP stacks) decode `%3A` before
/// routing, so the upstream runs `:access`. A path glob may not contain `%`, so the operator
/// cannot even write the encoded spelling. Expected: the request is denied (either the
/// normalizer decodes escapes of characters that are allowed raw in a segment, or it refuses
/// them as ambiguous).
#[test]
fn deny_path_bypassed_by_encoded_reserved_char() {
    let p = compile(
        "deny",
        r#"
  - id: gcp-secrets
    effect: allow
    match: { host: secretmanager.googleapis.com, alias: [gcp], path: "/v1/**" }
  - id: no-secret-access
    effect: deny
    match: { path: "/v1/projects/*/secrets/*/versions/*:access" }
"#,
    );
    let plain =
        "https://secretmanager.googleapis.com/v1/projects/p/secrets/s/versions/latest:access";
    assert!(!is_allow(&eval(&p, "GET", plain, &["gcp"])));
    let encoded =
        "https://secretmanager.googleapis.com/v1/projects/p/secrets/s/versions/latest%3Aaccess";
    let mut bypasses = Vec::new();
    if is_allow(&eval(&p, "GET", encoded, &["gcp"])) {
        bypasses.push("%3A");
    }
    for (raw, enc) in [
        ("@", "%40"),
        ("+", "%2B"),
        ("=", "%3D"),
        ("!", "%21"),
        (",", "%2C"),
        ("$", "%24"),
        ("(", "%28"),
        ("'", "%27"),
    ] {
        let p = compile(
            "deny",
            &format!(
                "  - {{ id: a, effect: allow, match: {{ host: x.com, path: \"/**\" }} }}\n  - {{ id: d, effect: deny, match: {{ path: \"/u/a{raw}b\" }} }}\n"
            ),
        );
        assert!(!is_allow(&eval(
            &p,
            "GET",
            &format!("https://x.com/u/a{raw}b"),
            &[]
        )));
        if is_allow(&eval(&p, "GET", &format!("https://x.com/u/a{enc}b"), &[])) {
            bypasses.push(enc);
        }
    }
    assert!(
        bypasses.is_empty(),
        "these escapes bypass a deny on their raw character: {bypasses:?}"
    );
}

/// Attack: a trailing slash. Most frameworks (Express non-strict routing, Rails, many API
/// gateways) route `/admin/` like `/admin`, but a literal deny glob `/admin` (or `/repos/*/*`)
/// never matches the normalized `/admin/`. The normalizer keeps the trailing slash and the
/// matcher compares byte-exact, so the deny (and any `limit` rule) is sidestepped. Expected:
/// deny and limit rules also match the path with its one trailing `/` removed (or the
/// trailing-slash spelling is treated as ambiguous and denied).
#[test]
fn deny_path_bypassed_by_trailing_slash() {
    let p = compile(
        "deny",
        r#"
  - id: gh
    effect: allow
    match: { host: api.github.com, alias: [github], method: [GET, DELETE], path: "/repos/**" }
  - id: no-repo-delete
    effect: deny
    match: { method: DELETE, path: "/repos/*/*" }
"#,
    );
    assert!(!is_allow(&eval(
        &p,
        "DELETE",
        "https://api.github.com/repos/o/r",
        &["github"]
    )));
    assert!(
        !is_allow(&eval(
            &p,
            "DELETE",
            "https://api.github.com/repos/o/r/",
            &["github"]
        )),
        "DELETE /repos/o/r/ slips past the deny"
    );
}

/// Attack: the same trailing slash sidesteps a `limit` rule (unlimited calls).
#[test]
fn limit_rule_bypassed_by_trailing_slash() {
    let p = compile(
        "deny",
        r#"
  - id: search
    effect: allow
    match: { host: api.x.com, path: "/**" }
  - id: search-cap
    effect: limit
    match: { path: /search }
    limits: [{ max: 1, per: 1h }]
"#,
    );
    let mut limiter = Limiter::new();
    let t1 = target("https://api.x.com/search");
    let t2 = target("https://api.x.com/search/");
    let req = |t| Request {
        agent: "mino",
        method: "GET",
        target: t,
        aliases: &[],
        tool: None,
    };
    assert!(matches!(
        p.decide(&req(&t1), &mut limiter, Duration::ZERO),
        Decision::Allow(_)
    ));
    assert!(matches!(
        p.decide(&req(&t1), &mut limiter, Duration::ZERO),
        Decision::Limited(_)
    ));
    assert!(
        matches!(
            p.decide(&req(&t2), &mut limiter, Duration::ZERO),
            Decision::Limited(_)
        ),
        "`/search/` is not counted by the limit on `/search`"
    );
}

/// Attack: a lowercase method. Methods match byte-exact, so a deny `method: [DELETE]` does not
/// match `delete`, while an allow rule that omits `method` admits it. Hyper forwards `delete` as
/// an extension method and several stacks (Werkzeug/Flask, some gateways) upper-case the method
/// before routing, so the upstream deletes. Expected: a method that is not byte-identical to
/// an uppercase token is either refused as ambiguous or matched case-insensitively by deny and
/// limit rules.
#[test]
fn deny_method_bypassed_by_lowercase_method() {
    let p = compile(
        "deny",
        r#"
  - id: api
    effect: allow
    match: { host: api.x.com, alias: [x] }
  - id: no-deletes
    effect: deny
    match: { method: DELETE }
"#,
    );
    assert!(!is_allow(&eval(
        &p,
        "DELETE",
        "https://api.x.com/items/1",
        &["x"]
    )));
    assert!(
        !is_allow(&eval(&p, "delete", "https://api.x.com/items/1", &["x"])),
        "`delete` is allowed although DELETE is denied"
    );
    assert!(
        !is_allow(&eval(&p, "Delete", "https://api.x.com/items/1", &["x"])),
        "`Delete` is allowed although DELETE is denied"
    );
}

/// Attack: loader amplification. `policy_check` (MCP) and `mint policy check` load any file the
/// caller names, and the agent can write files in its workspace. A 4 MiB policy of `{},` items
/// makes the loader read ~1.4 M rules past the 10,000 limit and emit ~2.8 M diagnostics
/// (~225 MB of message text, ~680 MB peak RSS measured in release), which the MCP server then
/// serializes. Expected: rules past `MAX_RULES` are not read and the number of findings is
/// capped (say 1,000, with a "N more" summary).
#[test]
fn loader_diagnostics_are_unbounded() {
    let mut yaml = String::from("version: 1\nrules: [");
    while yaml.len() < 4 * 1024 * 1024 - 10 {
        yaml.push_str("{},");
    }
    yaml.push_str("{}]\n");
    let load = load_policy(yaml.as_bytes(), "t");
    assert!(load.policy.is_none());
    assert!(
        load.diagnostics.len() <= 20_000,
        "{} diagnostics from one 4 MiB file",
        load.diagnostics.len()
    );
}

/// Attack: one unknown key of a few MB (an explicit `? "..."` key escapes YAML's 1024-character
/// simple-key limit) makes `closest` run the edit distance against every known field name,
/// allocating a `(len+1) x (field+1)` usize matrix each time: ~300 MB peak and >1 s in release
/// for a 3 MB key, ~9 s in debug. Expected: keys longer than any field name (say > 64 bytes)
/// get no "did you mean" and cost nothing.
#[test]
fn unknown_long_key_edit_distance_is_quadratic_memory() {
    // No timing here (performance lives in benchmarks): a key longer than any field name must
    // get no "did you mean", which is what skips the edit-distance work.
    let key = "q".repeat(200);
    let yaml = format!("version: 1\nrules: []\n? \"{key}\"\n: 1\n");
    let load = load_policy(yaml.as_bytes(), "t");
    assert!(load.policy.is_none());
    let unknown: Vec<_> = load
        .diagnostics
        .iter()
        .filter(|d| d.code.as_str() == "E010")
        .collect();
    assert_eq!(unknown.len(), 1);
    assert!(
        !unknown[0].message.contains("did you mean"),
        "{}",
        unknown[0].message
    );
}

/// Attack: `0.0.0.0` and `[::]` reach the local machine (Linux connects them to loopback), yet
/// `Host::is_loopback` says no. Under `default: allow` a request to `https://0.0.0.0:8700/` (or
/// `https://[::]:5432/`) is therefore allowed, and `DefaultAllowLoopback` (which exists exactly
/// to stop default-allow from reaching local services) never fires. Expected: the unspecified
/// addresses are refused by normalization (ambiguous) or treated as loopback.
#[test]
fn unspecified_address_is_not_loopback() {
    let p = compile("allow", "  []\n");
    for url in [
        "https://0.0.0.0:8700/admin",
        "https://[::]:8700/admin",
        "https://0:8700/admin",
    ] {
        let allowed = normalize_target(
            "https",
            url.trim_start_matches("https://")
                .split('/')
                .next()
                .unwrap(),
            "/admin",
        )
        .map(|t| {
            is_allow(&p.evaluate(&Request {
                agent: "mino",
                method: "GET",
                target: &t,
                aliases: &[],
                tool: None,
            }))
        })
        .unwrap_or(false);
        assert!(
            !allowed,
            "{url} is allowed by default: allow although it reaches localhost"
        );
    }
    assert!(
        Host::parse_request("0.0.0.0").map_or(true, |h| h.is_loopback()),
        "0.0.0.0 reads as a non-loopback host"
    );
}

/// Attack: `*` in a path glob matches an empty segment, so `/users/*` ("one user") also admits
/// `/users/`, which servers with lenient trailing-slash routing answer as the collection
/// (`/users`: every user). The rule loads and reads narrower than it is. Expected: `*` matches
/// one or more characters, so a segment glob never matches an empty segment.
#[test]
fn path_star_matches_empty_segment() {
    let p = compile(
        "deny",
        r#"
  - id: one-user
    effect: allow
    match: { host: api.x.com, alias: [x], method: GET, path: "/users/*" }
"#,
    );
    assert!(is_allow(&eval(
        &p,
        "GET",
        "https://api.x.com/users/42",
        &["x"]
    )));
    assert!(
        !is_allow(&eval(&p, "GET", "https://api.x.com/users/", &["x"])),
        "`/users/*` admits the collection `/users/`"
    );
}

/// Validation gap: any uppercase token is accepted as a method, so a typo in a deny rule
/// (`DELET`, `DELTE`, `PUTT`) loads without a word and the deny silently matches nothing: a
/// typo became a wider policy. Expected: a method outside the registered HTTP methods gets at
/// least a warning with "did you mean `DELETE`?".
#[test]
fn typo_method_in_deny_rule_loads_silently() {
    for typo in ["DELET", "DELTE", "PSOT", "PACTH"] {
        let yaml = format!(
            "version: 1\nrules:\n  - {{ id: no-deletes, effect: deny, match: {{ method: [{typo}] }} }}\n"
        );
        let load = load_policy(yaml.as_bytes(), "t");
        assert!(
            !load.diagnostics.is_empty(),
            "deny on method `{typo}` loads with no finding and matches nothing"
        );
    }
}

/// Validation gap: path globs support only `*` and `**`, but `{a,b}` alternation and `[abc]`
/// classes (which operators know from shell, gitignore and most glob crates) load silently as
/// literal text. In a deny rule such a glob matches nothing, so the deny quietly disappears.
/// Expected: `{`, `}`, `[`, `]` in a path glob are an error ("alternation is not supported; write
/// one glob per list item").
#[test]
fn path_glob_braces_load_as_literals() {
    for glob in ["/v1/{admin,root}/**", "/v1/[ab]dmin/**"] {
        let yaml = format!(
            "version: 1\nrules:\n  - {{ id: d, effect: deny, match: {{ path: \"{glob}\" }} }}\n"
        );
        let load = load_policy(yaml.as_bytes(), "t");
        assert!(
            !load.diagnostics.is_empty(),
            "deny on `{glob}` loads with no finding and matches nothing an operator meant"
        );
    }
}

/// Leak: a secret pasted into `method` is quoted back, twice (as written and upper-cased),
/// whenever it is a letter-led token of at most 32 characters (many API keys are 32
/// alphanumerics). POLICY.md allows quoting "a method the rule wrote" but not "a value that
/// could be secret"; this one is not a method. Expected: quote only when the upper-cased text is
/// a known method (`get` -> `GET`), otherwise a generic message.
#[test]
fn method_error_echoes_secret_like_token() {
    let secret = "a3f9c2e7b1d84f6a9c0e2b7d5f1a8c3e"; // 32 chars, the shape of a Datadog API key
    let yaml = format!(
        "version: 1\nrules:\n  - {{ id: r, effect: deny, match: {{ method: [{secret}] }} }}\n"
    );
    let load = load_policy(yaml.as_bytes(), "t");
    for d in &load.diagnostics {
        let text = d.render("t").to_ascii_lowercase();
        assert!(!text.contains(secret), "secret echoed: {}", d.render("t"));
    }
}

/// Leak: an uppercase token pasted into `host` (an AWS access key id, a license key) is a valid
/// DNS name once lower-cased, so E022 "write \"akia…\"" quotes it back. Expected: only suggest
/// a canonical form when the difference is something an operator plausibly typed (a trailing
/// dot, Unicode, an IP spelling), or cap what is quoted; never echo a 16+ character label that
/// was all uppercase/digits.
#[test]
fn host_not_canonical_echoes_pasted_key() {
    let secret = "AKIAIOSFODNN7EXAMPLE";
    let yaml = format!(
        "version: 1\nrules:\n  - {{ id: r, effect: deny, match: {{ host: [{secret}] }} }}\n"
    );
    let load = load_policy(yaml.as_bytes(), "t");
    assert!(load.policy.is_none());
    for d in &load.diagnostics {
        let text = d.render("t").to_ascii_lowercase();
        assert!(
            !text.contains(&secret.to_ascii_lowercase()),
            "secret echoed: {}",
            d.render("t")
        );
    }
}

/// Correctness: `Retry-After` is computed from the oldest admission only. When a counter holds
/// more than `max` admissions (the policy was reloaded with a smaller `max` for the same rule
/// id, and the broker keeps its `Limiter`), the request is still refused when that oldest one
/// leaves, so the agent is told to retry too early and is refused again. Expected: wait until
/// the `(len - max + 1)`-th oldest admission leaves the window.
#[test]
fn retry_after_too_short_when_window_over_max() {
    use mint_policy::limits::Charge;
    let charge = |max| Charge {
        rule: "r".into(),
        key: "r#0".into(),
        max,
        per: Duration::from_secs(60),
    };
    let mut l = Limiter::new();
    for t in [0, 10, 20] {
        assert!(l.admit(&[charge(3)], Duration::from_secs(t)).is_ok());
    }
    // Reloaded policy: the same rule now allows 1 per minute.
    let limited = l.admit(&[charge(1)], Duration::from_secs(30)).unwrap_err();
    let retry_at = Duration::from_secs(30) + limited.retry_after;
    assert!(
        l.admit(&[charge(1)], retry_at).is_ok(),
        "told to retry after {:?}, but still limited then",
        limited.retry_after
    );
}

/// Unbounded work per request: path globs are matched by a DP over every segment of the
/// request path, re-splitting the path and allocating two `Vec<bool>` of its length per glob
/// segment, for every candidate rule (host-less deny/limit rules are candidates for every
/// request). Nothing bounds the path's length or segment count. One 64 KB request
/// (`/a` x 32,000, the most an `http::Uri` holds) against 100 host-less deny rules costs ~0.4 s
/// of CPU in release (seconds in debug), on the proxy's worker thread. Expected: the normalizer
/// refuses paths past a sane bound (say 8 KiB or 256 segments) and/or the matcher splits once
/// per request; evaluation of any accepted request stays in the microseconds-to-milliseconds
/// range.
#[test]
fn long_path_times_many_globs_is_slow() {
    // The normalizer bounds the path, so matching work per glob is bounded too.
    let long = "/a".repeat(32_000);
    assert_eq!(
        normalize_target("https", "x.com", &long).err(),
        Some(mint_policy::normalize::NormalizeError::PathTooLong)
    );
    let at_bound = format!(
        "/{}",
        "a".repeat(mint_policy::normalize::MAX_PATH_BYTES - 1)
    );
    assert!(normalize_target("https", "x.com", &at_bound).is_ok());
}

/// Limit overshoot: `Limiter::prune(now, idle)` drops every counter whose last admission is
/// older than `idle`, regardless of the counter's own window. A broker that prunes hourly with
/// `idle = 1h` forgets a `max: 1, per: 1d` counter after an hour of quiet, and the agent gets a
/// fresh budget: 24 calls a day instead of 1. Expected: prune never forgets an admission that is
/// still inside its window (store `per` with the counter and prune by it).
#[test]
fn prune_resets_live_counters() {
    use mint_policy::limits::Charge;
    let daily = [Charge {
        rule: "r".into(),
        key: "r#0".into(),
        max: 1,
        per: Duration::from_secs(86_400),
    }];
    let mut l = Limiter::new();
    assert!(l.admit(&daily, Duration::ZERO).is_ok());
    let later = Duration::from_secs(2 * 3_600);
    l.prune(later);
    assert!(
        l.admit(&daily, later).is_err(),
        "a second call within the day is admitted after prune"
    );
}

// ============================================================================================
// Regressions (currently pass): attacks that held up
// ============================================================================================

/// Every spelling of the metadata address is read as that address and hits a deny on it.
#[test]
fn regression_metadata_ip_spellings_hit_deny() {
    let p = compile(
        "allow",
        r#"
  - id: no-metadata
    effect: deny
    match: { host: 169.254.169.254 }
"#,
    );
    for authority in [
        "169.254.169.254",
        "169.254.169.254.",
        "2852039166",
        "0xa9fea9fe",
        "0xA9.0xFE.0xA9.0xFE",
        "0251.0376.0251.0376",
        "169.254.43518",
        "169.16689662",
        "[::ffff:169.254.169.254]",
        "[::ffff:a9fe:a9fe]",
        "[0:0:0:0:0:ffff:a9fe:a9fe]",
        "１６９.２５４.１６９.２５４",
        "169。254。169。254",
    ] {
        let t = normalize_target("https", authority, "/latest/meta-data").unwrap();
        let e = p.evaluate(&Request {
            agent: "mino",
            method: "GET",
            target: &t,
            aliases: &[],
            tool: None,
        });
        assert!(!is_allow(&e), "{authority} escapes the deny");
    }
    // Spellings other parsers disagree on are refused outright.
    for authority in [
        "169.254.169.254.1",
        "169.254.169.0x1g",
        "0x1.2.3.4.5",
        "1e2",
    ] {
        assert!(
            normalize_target("https", authority, "/").is_err(),
            "{authority}"
        );
    }
}

/// Host spellings of a denied name (case, trailing dot, Unicode dots, full-width letters,
/// soft hyphen) all canonicalize to the denied name; look-alikes become other names, which the
/// allow rule does not cover.
#[test]
fn regression_host_spellings_hit_deny_and_miss_allow() {
    let p = compile(
        "deny",
        r#"
  - id: gh
    effect: allow
    match: { host: "*.github.com", path: "/**" }
  - id: no-gist
    effect: deny
    match: { host: gist.github.com }
"#,
    );
    for host in [
        "GIST.GITHUB.COM",
        "gist.github.com.",
        "gist。github。com",
        "gist．github．com.",
        "ｇｉｓｔ.github.com",
        "gi\u{ad}st.github.com",
    ] {
        let t = normalize_target("https", host, "/").unwrap();
        assert_eq!(t.host.as_text(), "gist.github.com", "{host}");
        assert!(
            !is_allow(&eval(&p, "GET", &format!("https://{host}/"), &[])),
            "{host}"
        );
    }
    for host in [
        "evilgithub.com",
        "github.com",
        "github.com.evil.com",
        "api.github.com.evil.com",
        "github.com:443@evil.com",
    ] {
        let allowed = normalize_target("https", host, "/").is_ok_and(|t| {
            is_allow(&p.evaluate(&Request {
                agent: "mino",
                method: "GET",
                target: &t,
                aliases: &[],
                tool: None,
            }))
        });
        assert!(!allowed, "{host} matched *.github.com");
    }
}

/// Dot segments, encoded separators, double encoding and matrix parameters are refused before
/// matching, so `/repos/**` cannot be walked out of.
#[test]
fn regression_path_escapes_are_refused() {
    for path in [
        "/repos/../admin",
        "/repos/%2e%2e/admin",
        "/repos/.%2E/admin",
        "/repos/%2E/admin",
        "/repos/x%2F..%2Fadmin",
        "/repos/x%5C..%5Cadmin",
        "/repos/x\\..\\admin",
        "/repos//admin",
        "/repos/x;/../admin",
        "/repos/x%3B/admin",
        "/repos/%252e%252e/admin",
        "/repos/%25%32%65/admin",
        "/repos/x%00",
        "/repos/x%",
        "/repos/x%zz",
        "/repos/%u002e%u002e/admin",
        "/repos/x#/../admin",
        "/repos/\u{2025}/admin",
    ] {
        assert!(normalize_target("https", "x.com", path).is_err(), "{path}");
    }
}

/// `http` upstream and loopback targets: a wildcard or a non-loopback spelling never reaches
/// loopback, `default: allow` never reaches loopback, and `foo.localhost` is just a name.
#[test]
fn regression_loopback_rules() {
    assert!(normalize_target("http", "api.github.com", "/").is_err());
    assert!(normalize_target("http", "localhost.evil.com", "/").is_err());
    assert!(normalize_target("http", "foo.localhost", "/").is_err());
    assert!(normalize_target("http", "[::ffff:127.0.0.1]:8080", "/").is_ok());
    let p = compile("allow", "  []\n");
    for authority in [
        "127.0.0.1",
        "127.1",
        "2130706433",
        "[::1]",
        "localhost",
        "LOCALHOST.",
        "[::ffff:7f00:1]",
    ] {
        let t = normalize_target("https", authority, "/").unwrap();
        let e = p.evaluate(&Request {
            agent: "mino",
            method: "GET",
            target: &t,
            aliases: &[],
            tool: None,
        });
        assert!(!is_allow(&e), "{authority}");
    }
    let yaml =
        "version: 1\nrules:\n  - { id: a, effect: allow, match: { host: \"*.localhost\" } }\n";
    assert!(load_policy(yaml.as_bytes(), "t").policy.is_none());
}

/// `default: allow` never authorises an alias, and an allow rule without `alias` never does
/// either; a deny naming an alias matches on overlap.
#[test]
fn regression_aliases_need_listing() {
    let p = compile(
        "allow",
        r#"
  - id: a
    effect: allow
    match: { host: api.x.com, alias: [x] }
  - id: b
    effect: allow
    match: { host: api.y.com }
  - id: d
    effect: deny
    match: { alias: [z] }
"#,
    );
    assert!(is_allow(&eval(&p, "GET", "https://api.x.com/", &["x"])));
    assert!(!is_allow(&eval(
        &p,
        "GET",
        "https://api.x.com/",
        &["x", "y"]
    )));
    assert!(!is_allow(&eval(&p, "GET", "https://api.y.com/", &["x"])));
    assert!(!is_allow(&eval(&p, "GET", "https://other.com/", &["x"])));
    assert!(!is_allow(&eval(
        &p,
        "GET",
        "https://api.x.com/",
        &["x", "z"]
    )));
}

/// YAML features that make a file mean more than it shows are refused: anchors/aliases (also
/// through a merge key), tags, quoted duplicate keys, and a second document.
#[test]
fn regression_yaml_tricks_refused() {
    let base = "version: 1\nrules:\n";
    for body in [
        "  - &r { id: a, effect: allow, match: { host: x.com } }\n  - *r\n",
        "  - { id: a, effect: allow, match: { host: x.com, <<: { port: 8443 } } }\n",
        "  - { id: a, effect: !!str allow, match: { host: x.com } }\n",
        "  - { id: a, effect: deny, \"effect\": allow, match: { host: x.com } }\n",
        "  - { id: a, effect: allow, match: { host: x.com, host: \"*.x.com\" } }\n",
        "  - { id: a, effect: allow, match: { host: x.com } }\n---\nversion: 1\nrules: []\n",
        "  - { id: a, effect: allow, match: { Host: x.com } }\n",
        "  - { id: a, effect: allow, match: { host: x.com, method: get } }\n",
        "  - { id: a, effect: allow, match: { host: x.com, path: \"/a/%2e%2e/b\" } }\n",
        "  - { id: a, effect: allow, match: { host: \"api*.x.com\" } }\n",
        "  - { id: a, effect: allow, match: { host: \"*.co\" } }\n",
        "  - { id: a, effect: allow, match: { host: x.com, scheme: http } }\n",
        "  - { id: a, effect: allow, match: { host: x.com, port: 0 } }\n",
        "  - { id: a, effect: allow, match: { host: x.com, port: 65536 } }\n",
        "  - { id: a, effect: deny, inject: [header] }\n",
        "  - { id: a, effect: deny, limits: [{ max: 1, per: 1h }] }\n",
        "  - { id: a, effect: limit, limits: [{ max: 1, per: 1y }] }\n",
        "  - { id: a, effect: allow, match: { host: [] } }\n",
        "  - { id: a, effect: allow, match: { host: x.com, alias: [] } }\n",
        "  - { id: a, effect: allow, match: { host: x.com } }\n  - { id: a, effect: deny }\n",
    ] {
        let yaml = format!("{base}{body}");
        assert!(
            load_policy(yaml.as_bytes(), "t").policy.is_none(),
            "loaded: {body}"
        );
    }
}

/// Hostile request text never panics the normalizer, and glob matching stays fast on long
/// paths and long tool names.
#[test]
fn regression_hostile_inputs_stay_cheap() {
    let long = "/a".repeat(1_000);
    let p = compile(
        "deny",
        r#"
  - id: a
    effect: allow
    match: { host: x.com, path: ["/**/a/**/a/**/b", "/*a*a*a*a*a*a*a*b/**"], tool: ["*a*a*a*a*a*a*a*b"] }
"#,
    );
    let t = normalize_target("https", "x.com", &long).unwrap();
    let tool = "a".repeat(100_000);
    let e = p.evaluate(&Request {
        agent: "mino",
        method: "GET",
        target: &t,
        aliases: &[],
        tool: Some(&tool),
    });
    assert!(!is_allow(&e));
    for input in [
        "%",
        "/%",
        "/%f",
        "[",
        "[]",
        "[:",
        "]:",
        ":",
        "::::::::::::::",
        "0x",
        ".",
    ] {
        let _ = normalize_target("https", input, input);
        let _ = Host::parse_request(input);
    }
}

/// Limit keys cannot be forged: an agent-chosen tool name holding the key separator `\u{1f}`
/// never shares a counter with another agent, and a request naming one alias twice is charged
/// once.
#[test]
fn regression_limit_keys_not_forgeable() {
    let p = compile(
        "deny",
        r#"
  - id: a
    effect: allow
    match: { host: x.com, alias: [x], tool: ["*"] }
    limits: [{ max: 1, per: 1h, by: [agent, tool] }]
"#,
    );
    let t = target("https://x.com/mcp");
    let uses = [
        AliasUse {
            alias: "x".into(),
            sites: SiteSet::HEADER,
        },
        AliasUse {
            alias: "x".into(),
            sites: SiteSet::HEADER,
        },
    ];
    let mut l = Limiter::new();
    let req = |agent, tool| Request {
        agent,
        method: "POST",
        target: &t,
        aliases: &uses,
        tool: Some(tool),
    };
    assert!(matches!(
        p.decide(&req("ci", "q"), &mut l, Duration::ZERO),
        Decision::Allow(_)
    ));
    // `mino` cannot spend `ci`'s counter, whatever tool name it sends.
    assert!(matches!(
        p.decide(&req("mino", "q"), &mut l, Duration::ZERO),
        Decision::Allow(_)
    ));
    assert!(matches!(
        p.decide(&req("mino", "q\u{1f}ci"), &mut l, Duration::ZERO),
        Decision::Allow(_)
    ));
    assert!(matches!(
        p.decide(&req("ci", "q"), &mut l, Duration::ZERO),
        Decision::Limited(_)
    ));
}
