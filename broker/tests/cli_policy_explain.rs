//! `mint policy explain` through the real binary: decisions and exit codes on the example files,
//! MCP bodies, JSON output, budgets replayed from an audit log, unreadable and invalid files,
//! usage errors, and the promise that no header or query value reaches stdout or stderr.

#![expect(clippy::unwrap_used, reason = "test helpers")]

use std::num::NonZeroU16;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use assert_cmd::Command;
use mint_policy::audit::{
    AgentName, AliasName, AuditDecision, AuditRecord, ChainHash, Host, HttpStatus, Method, Outcome,
    RequestId, RuleId, Scheme, Timestamp, UrlPath,
};

#[path = "support/mint.rs"]
mod support;

use support::{Run, run};

/// The shared `mint` command without `MINT_HOME`: these tests read the default files relative
/// to the working directory, as a user without the variable does.
fn mint(cwd: &Path) -> Command {
    let mut cmd = support::mint(cwd);
    cmd.env_remove("MINT_HOME");
    cmd
}

const CANARY: &str = "mintcanary0c4f7e21";

/// A small policy: one limited allow rule, one deny rule.
const LIMITED: &str = "\
version: 1
default: deny
rules:
  - id: read
    effect: allow
    match:
      agent: bot
      alias: api
      host: api.example.com
      method: GET
      path: /items/**
    limits:
      - { max: 2, per: 1h, by: [agent] }
  - id: no-admin
    effect: deny
    match:
      path: /items/admin/**
";

const LIMITED_ALIASES: &str = "\
aliases:
  - name: api
    hosts: [api.example.com]
";

/// `mint policy explain` on the example policy and aliases, from `cwd`.
fn explain_example(cwd: &Path) -> Command {
    let mut cmd = mint(cwd);
    cmd.args(["policy", "explain", "--policy"])
        .arg(repo_file("examples/policy.yaml"))
        .arg("--aliases")
        .arg(repo_file("examples/aliases.yaml"));
    cmd
}

fn repo_file(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative)
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Writes the limited policy and its aliases into `dir`.
fn write_limited(dir: &Path) -> (PathBuf, PathBuf) {
    let policy = dir.join("policy.yaml");
    let aliases = dir.join("aliases.yaml");
    std::fs::write(&policy, LIMITED).unwrap();
    std::fs::write(&aliases, LIMITED_ALIASES).unwrap();
    (policy, aliases)
}

#[track_caller]
fn json(out: &Run) -> serde_json::Value {
    serde_json::from_str(&out.stdout).unwrap()
}

#[test]
fn allowed_example_request_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(explain_example(dir.path()).args([
        "--agent",
        "mino",
        "--method",
        "GET",
        "--url",
        "https://api.github.com/repos/acme/docs/issues?state=open",
        "--header",
        "Authorization: Bearer {{mint:github}}",
    ]));
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines[0],
        "allow: GET https://api.github.com/repos/acme/docs/issues"
    );
    assert!(lines.contains(&"  rules    github-read"), "{}", out.stdout);
    assert!(lines.contains(&"  query    state (values not shown)"));
    assert!(lines.contains(&"  aliases  github"));
    assert!(lines.contains(&"             header `authorization`, byte 7: header site"));
    assert!(
        lines.contains(&"             bound to api.github.com (this host matches); sites: header")
    );
    // The limits of the allow rule and of the `limit` rule, with full budgets (no audit log).
    assert!(
        out.stdout
            .contains("github-read           per agent=mino  1000 per 1h  1000 left"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("github-hourly-budget  one counter     2000 per 1h  2000 left")
    );
    assert!(out.stdout.contains("note: budgets are full windows"));
    assert!(out.stdout.contains("`.mint/audit.log`"));
}

/// A request an approve rule holds: `approve`, the rule and the timeout, the limits it would
/// consume once approved; exit 1 (not forwarded without a decision). No header value printed.
#[test]
fn a_held_request_names_its_approve_rule_and_timeout_and_exits_one() {
    let dir = tempfile::tempdir().unwrap();
    let (policy, aliases) = write_limited(dir.path());
    let approve = format!(
        "{LIMITED}  - id: ask-deletes\n    effect: approve\n    match:\n      alias: api\n      host: api.example.com\n      method: DELETE\n    approval: {{ timeout: 45s }}\n    limits:\n      - {{ max: 3, per: 1d }}\n"
    );
    std::fs::write(&policy, approve).unwrap();
    let explain = |json: bool| {
        let mut cmd = mint(dir.path());
        cmd.args(["policy", "explain", "--policy"])
            .arg(&policy)
            .arg("--aliases")
            .arg(&aliases)
            .args([
                "--agent",
                "bot",
                "--method",
                "DELETE",
                "--url",
                "https://api.example.com/items/7",
                "--header",
            ])
            .arg(format!("Authorization: Bearer {CANARY}-{{{{mint:api}}}}"));
        if json {
            cmd.arg("--json");
        }
        run(&mut cmd)
    };
    let out = explain(false);
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "approve: DELETE https://api.example.com/items/7");
    assert!(
        lines.contains(
            &"  approval waits up to 45 s for the operator's decision (approve rule: ask-deletes)"
        ),
        "{}",
        out.stdout
    );
    assert!(lines.contains(&"  rules    ask-deletes"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("ask-deletes  one counter  3 per 1d  3 left"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("until the operator approves"));
    assert!(!out.stdout.contains(CANARY) && !out.stderr.contains(CANARY));

    let out = explain(true);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let report = json(&out);
    assert_eq!(report["decision"], "approve");
    assert_eq!(report["rules"], serde_json::json!(["ask-deletes"]));
    assert_eq!(report["approval"]["timeout_seconds"], 45);
    assert_eq!(
        report["approval"]["rules"],
        serde_json::json!(["ask-deletes"])
    );
    assert_eq!(report["status"], serde_json::Value::Null);
    assert!(!out.stdout.contains(CANARY));
}

#[test]
fn denied_and_refused_requests_exit_one() {
    let dir = tempfile::tempdir().unwrap();
    for (args, headline, status, rules) in [
        (
            &[
                "--method",
                "DELETE",
                "--url",
                "https://api.github.com/repos/acme/docs",
            ][..],
            "deny: DELETE https://api.github.com/repos/acme/docs",
            "403 policy_denied",
            "no-deletes",
        ),
        (
            &["--method", "GET", "--url", "https://example.com/"][..],
            "deny: GET https://example.com/",
            "403 policy_denied",
            "(default)",
        ),
        (
            &["--method", "GET", "--url", "http://api.github.com/user"][..],
            "deny: GET (target refused before parsing)",
            "400 invalid_request",
            "(policy not consulted)",
        ),
        (
            &[
                "--method",
                "GET",
                "--url",
                "https://api.github.com/user",
                "-H",
                "X-Token: {{mint:slack}}",
            ][..],
            "deny: GET https://api.github.com/user",
            "403 alias_not_bound",
            "(policy not consulted)",
        ),
        (
            &[
                "--method",
                "GET",
                "--url",
                "https://api.github.com/user?access_token={{mint:github}}",
            ][..],
            "deny: GET https://api.github.com/user",
            "403 site_not_allowed",
            "(policy not consulted)",
        ),
        (
            &[
                "--method",
                "GET",
                "--url",
                "https://api.github.com/user",
                "-H",
                "X-Token: {{mint:gitlab}}",
            ][..],
            "deny: GET https://api.github.com/user",
            "400 unknown_alias",
            "(policy not consulted)",
        ),
    ] {
        let out = run(explain_example(dir.path())
            .args(["--agent", "mino"])
            .args(args));
        assert_eq!(out.code, Some(1), "{args:?}: {}{}", out.stdout, out.stderr);
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines[0], headline, "{}", out.stdout);
        assert_eq!(lines[1], format!("  status   {status}"), "{}", out.stdout);
        assert!(lines[2].starts_with("  reason   "), "{}", out.stdout);
        assert_eq!(lines[3], format!("  rules    {rules}"), "{}", out.stdout);
        assert!(out.stderr.is_empty(), "{}", out.stderr);
    }
}

#[test]
fn json_output_is_one_object() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(explain_example(dir.path()).args([
        "--agent",
        "mino",
        "--method",
        "DELETE",
        "--url",
        "https://api.github.com/repos/acme/docs",
        "-H",
        "Authorization: Bearer {{mint:github}}",
        "--json",
    ]));
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let value = json(&out);
    assert_eq!(value["decision"], "deny");
    assert_eq!(value["status"], 403);
    assert_eq!(value["code"], "policy_denied");
    assert_eq!(value["reason"], "deny_rule");
    assert_eq!(value["rules"], serde_json::json!(["no-deletes"]));
    assert_eq!(value["by_default"], false);
    assert_eq!(value["agent"], "mino");
    assert_eq!(value["method"], "DELETE");
    assert_eq!(
        value["target"]["url"],
        "https://api.github.com/repos/acme/docs"
    );
    assert_eq!(value["aliases"][0]["name"], "github");
    assert_eq!(
        value["aliases"][0]["hosts"],
        serde_json::json!(["api.github.com"])
    );
    assert_eq!(value["evaluations"][0]["decision"], "deny");
    assert_eq!(value["limits"], serde_json::json!([]));
    assert_eq!(value["budgets"]["source"], "not_needed");

    let out = run(explain_example(dir.path()).args([
        "--agent",
        "ci-7",
        "--method",
        "GET",
        "--url",
        "http://127.0.0.1:8080/search?q=x",
        "--json",
    ]));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let value = json(&out);
    assert_eq!(value["decision"], "allow");
    assert_eq!(value["rules"], serde_json::json!(["local-search"]));
    assert_eq!(value["target"]["query_keys"], serde_json::json!(["q"]));
}

#[test]
fn mcp_tool_calls_come_from_the_body_or_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let call = |tool: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
        )
    };
    let body = dir.path().join("call.json");
    let explain = |extra: &[&str]| {
        let mut cmd = explain_example(dir.path());
        cmd.args([
            "--agent",
            "mino",
            "--method",
            "POST",
            "--url",
            "https://mcp.context7.com/mcp",
            "-H",
            "Authorization: Bearer {{mint:context7}}",
        ])
        .args(extra);
        run(&mut cmd)
    };

    std::fs::write(&body, call("query-docs")).unwrap();
    let out = explain(&["--body-json", body.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("  rules    context7-docs\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("  tool     query-docs (1 call in the body)\n"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("context7-docs"));
    assert!(out.stdout.contains("per tool=query-docs"), "{}", out.stdout);
    assert!(
        out.stdout.contains("call_limits:tool:query-docs"),
        "{}",
        out.stdout
    );

    std::fs::write(&body, call("resolve-library-id")).unwrap();
    let out = explain(&["--body-json", body.to_str().unwrap()]);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(out.stdout.contains("403 policy_denied"), "{}", out.stdout);
    assert!(
        out.stdout.contains("  rules    (default)\n"),
        "{}",
        out.stdout
    );

    // A batch: each call is evaluated, one denial denies all.
    std::fs::write(
        &body,
        format!("[{},{}]", call("query-docs"), call("resolve-library-id")),
    )
    .unwrap();
    let out = explain(&["--body-json", body.to_str().unwrap()]);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("tool `query-docs`: allow by context7-docs"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("tool `resolve-library-id`: deny by (default) (no_allow_rule)"),
        "{}",
        out.stdout
    );

    let out = explain(&["--tool", "query-docs"]);
    assert_eq!(out.code, Some(0), "{}", out.stdout);
    assert!(out.stdout.contains("  tool     query-docs (from --tool)\n"));

    // No tool: the endpoint's own traffic.
    let out = explain(&[]);
    assert_eq!(out.code, Some(0), "{}", out.stdout);
    assert!(
        out.stdout.contains("  rules    context7-endpoint\n"),
        "{}",
        out.stdout
    );
}

/// An audit record line for the limited policy.
fn record(id: &str, at: SystemTime, allow: bool) -> String {
    let ms = at.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let mut record = AuditRecord::decision(
        Timestamp::from_unix_millis(ms).unwrap(),
        RequestId::new(id).unwrap(),
        if allow {
            AuditDecision::Allow
        } else {
            AuditDecision::Deny
        },
        ChainHash::genesis(),
    );
    record.agent = Some(AgentName::new("bot").unwrap());
    record.method = Some(Method::new("GET").unwrap());
    record.scheme = Some(Scheme::new("https").unwrap());
    record.host = Some(Host::new("api.example.com").unwrap());
    record.port = NonZeroU16::new(443);
    record.path = Some(UrlPath::new("/items/1").unwrap());
    record.aliases = vec![AliasName::new("api").unwrap()];
    record.rule = Some(vec![RuleId::new("read").unwrap()]);
    if !allow {
        record.reason = Some(mint_policy::audit::ReasonCode::new("policy_denied").unwrap());
    }
    record.to_line()
}

fn completed(id: &str, at: SystemTime) -> String {
    let ms = at.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let mut record = AuditRecord::outcome(
        Timestamp::from_unix_millis(ms).unwrap(),
        RequestId::new(id).unwrap(),
        Outcome::Completed,
        ChainHash::genesis(),
    );
    record.status = Some(HttpStatus::new(200).unwrap());
    record.to_line()
}

#[test]
fn budgets_are_replayed_from_the_audit_log() {
    let dir = tempfile::tempdir().unwrap();
    let (policy, aliases) = write_limited(dir.path());
    let log = dir.path().join("audit.log");
    let explain = |json: bool| {
        let mut cmd = mint(dir.path());
        cmd.args(["policy", "explain", "--policy"])
            .arg(&policy)
            .arg("--aliases")
            .arg(&aliases)
            .args(["--agent", "bot", "--method", "GET", "--url"])
            .arg("https://api.example.com/items/7")
            .args(["-H", "Authorization: Bearer {{mint:api}}"])
            .env("MINT_AUDIT_LOG_PATH", &log);
        if json {
            cmd.arg("--json");
        }
        run(&mut cmd)
    };

    let now = SystemTime::now();
    let minutes = |m: u64| now - Duration::from_secs(m * 60);
    let mut lines = vec![
        record("0123456789ab-1", minutes(90), true),
        record("0123456789ab-2", minutes(20), true),
        completed("0123456789ab-2", minutes(20)),
        record("0123456789ab-3", minutes(10), false),
    ];
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let out = explain(false);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("read  per agent=bot  2 per 1h  1 left"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("note: budgets are estimated from 1 allowed request in the audit log"),
        "{}",
        out.stdout
    );

    lines.push(record("0123456789ab-4", minutes(5), true));
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let out = explain(false);
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    let first: Vec<&str> = out.stdout.lines().take(4).collect();
    assert_eq!(first[0], "limited: GET https://api.example.com/items/7");
    // The admission 20 minutes ago leaves the hour in 40 minutes (less the time this test took).
    let retry: u64 = first[1]
        .strip_prefix("  status   429 limited, retry after ")
        .and_then(|rest| rest.strip_suffix(" s"))
        .unwrap()
        .parse()
        .unwrap();
    assert!((2380..=2400).contains(&retry), "{}", out.stdout);
    assert!(first[2].starts_with("  reason   call limit reached; retry after "));
    assert_eq!(first[3], "  rules    read");
    let value = json(&explain(true));
    assert_eq!(value["decision"], "limited");
    assert_eq!(value["status"], 429);
    assert!((2380..=2400).contains(&value["retry_after"].as_u64().unwrap()));
    assert_eq!(value["limits"][0]["remaining"], 0);
    assert_eq!(value["budgets"]["source"], "audit_log");
    assert_eq!(value["budgets"]["replayed"], 2);
}

#[test]
fn missing_files_exit_two_and_name_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let (policy, aliases) = write_limited(dir.path());
    let missing = dir.path().join("nope.yaml");
    for (flag, what, present) in [
        ("--policy", "policy file", ("--aliases", &aliases)),
        ("--aliases", "alias file", ("--policy", &policy)),
        ("--body-json", "body file", ("--policy", &policy)),
    ] {
        for json in [false, true] {
            let mut cmd = mint(dir.path());
            cmd.args(["policy", "explain", "--agent", "bot", "--method", "GET"])
                .args(["--url", "https://api.example.com/"])
                .arg(present.0)
                .arg(present.1)
                .arg(flag)
                .arg(&missing);
            if flag == "--body-json" {
                cmd.arg("--aliases").arg(&aliases);
            }
            if json {
                cmd.arg("--json");
            }
            let out = run(&mut cmd);
            assert_eq!(out.code, Some(2), "{flag}: {}{}", out.stdout, out.stderr);
            assert!(out.stdout.is_empty(), "{}", out.stdout);
            assert_eq!(
                out.stderr,
                format!(
                    "mint: cannot read {what} `{}`: no such file or directory\n",
                    missing.display()
                )
            );
        }
    }
}

/// A draft policy (`--policy`) without `--aliases` is explained against the home's aliases; with
/// no home, the error says so and names the ways out (issue 23).
#[test]
fn a_draft_policy_without_aliases_uses_the_home_or_says_what_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let (policy, _) = write_limited(dir.path());
    let out = run(mint(dir.path())
        .args(["policy", "explain", "--agent", "bot", "--method", "GET"])
        .args(["--url", "https://api.example.com/items/1", "--policy"])
        .arg(&policy));
    assert_eq!(out.code, Some(2), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert_eq!(
        out.stderr,
        "mint: cannot read the alias file `.mint/aliases.yaml` (no such file or directory); \
         explain needs the aliases the broker would load: pass `--aliases FILE`, or set MINT_HOME \
         to a home made by `mint init`\n"
    );

    // With a home holding the aliases, the draft is explained against them.
    let home = dir.path().join("state");
    std::fs::create_dir(&home).unwrap();
    write_limited(&home);
    let out = run(mint(dir.path())
        .args(["policy", "explain", "--agent", "bot", "--method", "GET"])
        .args([
            "--url",
            "https://api.example.com/items/1",
            "--json",
            "--policy",
        ])
        .arg(&policy)
        .env("MINT_HOME", &home));
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert_eq!(json(&out)["rules"], serde_json::json!(["read"]));
}

#[test]
fn default_files_come_from_mint_home() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("state");
    std::fs::create_dir(&home).unwrap();
    write_limited(&home);
    let out = run(mint(dir.path())
        .args(["policy", "explain", "--agent", "bot", "--method", "GET"])
        .args(["--url", "https://api.example.com/items/1", "--json"])
        .env("MINT_HOME", &home));
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    let value = json(&out);
    assert_eq!(value["rules"], serde_json::json!(["read"]));
    assert_eq!(
        value["budgets"]["audit_log"],
        home.join("audit.log").display().to_string()
    );

    // Without MINT_HOME, `.mint/` in the working directory.
    let out = run(mint(dir.path())
        .args(["policy", "explain", "--agent", "bot", "--method", "GET"])
        .args(["--url", "https://api.example.com/"]));
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("`.mint/policy.yaml`"), "{}", out.stderr);
}

#[test]
fn invalid_files_exit_two_with_rustc_style_lines() {
    let dir = tempfile::tempdir().unwrap();
    let (_, aliases) = write_limited(dir.path());
    let policy = fixture("invalid_policy.yaml");
    let out = run(mint(dir.path())
        .args(["policy", "explain", "--agent", "bot", "--method", "GET"])
        .args(["--url", "https://api.example.com/", "--policy"])
        .arg(&policy)
        .arg("--aliases")
        .arg(&aliases));
    assert_eq!(out.code, Some(2), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    let prefix = format!("{}:", policy.display());
    let lines: Vec<&str> = out.stderr.lines().collect();
    let (last, findings) = lines.split_last().unwrap();
    assert!(findings.len() >= 4, "{}", out.stderr);
    for line in findings {
        assert!(line.starts_with(&prefix), "{line}");
        assert!(line.contains(": error[E"), "{line}");
    }
    assert_eq!(
        *last,
        format!(
            "mint: policy file `{}` has {} errors; nothing was explained",
            policy.display(),
            findings.len()
        )
    );

    let bad_aliases = dir.path().join("bad-aliases.yaml");
    std::fs::write(
        &bad_aliases,
        "aliases:\n  - name: Bad\n    hosts: [x.example.com]\n",
    )
    .unwrap();
    let out = run(mint(dir.path())
        .args(["policy", "explain", "--agent", "mino", "--method", "GET"])
        .args(["--url", "https://api.github.com/", "--policy"])
        .arg(repo_file("examples/policy.yaml"))
        .arg("--aliases")
        .arg(&bad_aliases));
    assert_eq!(out.code, Some(2), "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("error[E"), "{}", out.stderr);
    assert!(out.stderr.contains("mint: alias file"), "{}", out.stderr);
}

#[test]
fn usage_errors_exit_two_without_quoting_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let bad_header_name = format!("bad name{CANARY}: 1");
    let bad_agent = format!("{CANARY} x");
    let bad_method = format!("G T{CANARY}");
    let bad_url = format!("api.github.com/{CANARY}");
    let bad_tool = format!("a b{CANARY}");
    let url = "https://api.github.com/";
    // (agent, method, url, extra arguments, the start of the message); empty means left out.
    type Case<'a> = (&'a str, &'a str, &'a str, Vec<&'a str>, Option<&'a str>);
    let cases: Vec<Case<'_>> = vec![
        ("mino", "GET", "", vec![], None),
        ("", "GET", url, vec![], None),
        ("mino", "GET", url, vec!["--bogus"], None),
        (
            "mino",
            "GET",
            url,
            vec!["--header", CANARY],
            Some("mint: --header #1: expected `NAME: VALUE`"),
        ),
        (
            "mino",
            "GET",
            url,
            vec!["-H", "ok: 1", "-H", &bad_header_name],
            Some("mint: --header #2: the name is not a valid header name"),
        ),
        (
            &bad_agent,
            "GET",
            url,
            vec![],
            Some("mint: --agent must be"),
        ),
        (
            "mino",
            &bad_method,
            url,
            vec![],
            Some("mint: --method must be"),
        ),
        ("mino", "GET", &bad_url, vec![], Some("mint: --url must be")),
        (
            "mino",
            "GET",
            url,
            vec!["--tool", &bad_tool],
            Some("mint: --tool must be"),
        ),
    ];
    for (agent, method, url, extra, message) in cases {
        let mut cmd = explain_example(dir.path());
        for (flag, value) in [("--agent", agent), ("--method", method), ("--url", url)] {
            if !value.is_empty() {
                cmd.args([flag, value]);
            }
        }
        let out = run(cmd.args(&extra));
        assert_eq!(out.code, Some(2), "{extra:?}: {}{}", out.stdout, out.stderr);
        assert!(out.stdout.is_empty(), "{extra:?}: {}", out.stdout);
        if let Some(message) = message {
            assert!(out.stderr.starts_with(message), "{extra:?}: {}", out.stderr);
            assert!(!out.stderr.contains(CANARY), "{}", out.stderr);
        }
    }
}

#[test]
fn header_and_query_values_never_reach_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body.json");
    std::fs::write(
        &body,
        format!(r#"{{"note":"{CANARY}","token":"{{{{mint:github}}}}"}}"#),
    )
    .unwrap();
    for url in [
        format!("https://api.github.com/repos/a/b?token={CANARY}&page=2"),
        format!("http://api.github.com/user?token={CANARY}"),
        format!("https://api.github.com/user?x={CANARY}{{{{mint:github}}}}"),
    ] {
        for json in [false, true] {
            let mut cmd = explain_example(dir.path());
            cmd.args(["--agent", "mino", "--method", "GET", "--url", &url])
                .args([
                    "-H",
                    &format!("Authorization: Bearer {{{{mint:github}}}} {CANARY}"),
                ])
                .args(["-H", &format!("X-Api-Key: {CANARY}")])
                .arg("--body-json")
                .arg(&body)
                .env("RUST_LOG", "trace");
            if json {
                cmd.arg("--json");
            }
            let out = run(&mut cmd);
            assert!(
                matches!(out.code, Some(0 | 1)),
                "{}{}",
                out.stdout,
                out.stderr
            );
            assert!(
                !out.stdout.contains(CANARY),
                "canary on stdout: {}",
                out.stdout
            );
            assert!(
                !out.stderr.contains(CANARY),
                "canary on stderr: {}",
                out.stderr
            );
        }
    }
}

#[test]
fn help_lists_the_options() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(mint(dir.path()).args(["policy", "explain", "--help"]));
    assert_eq!(out.code, Some(0));
    for option in [
        "--agent",
        "--method",
        "--url",
        "--header",
        "--tool",
        "--body-json",
        "--policy",
        "--aliases",
        "--audit-log",
        "--json",
    ] {
        assert!(out.stdout.contains(option), "{option}: {}", out.stdout);
    }
}
