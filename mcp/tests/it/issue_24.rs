//! Issue 24: findings quote no pasted token, and one worst-case file cannot stall the server.
//!
//! Tokens planted where the review found them quoted back (a SendGrid key or a JWT in `host:`,
//! a `tool:ghp_...` and an alias-shaped `call_limits` key, a hex key as a valid host under
//! `http`, a token-shaped unknown key) never appear in `policy_check` or `alias_list` answers or
//! in the trace log. And the worst 4 MiB files an agent can write for `policy_check` (one mapping
//! of ~330k keys, rules that all compete in the shadowed-rule check, long host lists) are each
//! answered and followed by a `ping` answer. No timing assertion: the deadline per answer (two
//! minutes for the file, the harness's 20 s for the ping) is the bound.

use std::fs;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Mcp, error};

const CANARIES: &[&str] = &[
    "SG.aB3dE5fG7hJ9kL1mN3pQ5r.sT7uV9wX1yZ3aB5cD7eF9gH1jK3lM5nP7qR9sT1",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk",
    "ghp_R4nD0mT0k3nV4lu3Xy9Zq2Wp8Lm5Kj7Hg3Fd",
    "a3f9c2e7b1d84f6a9c0e2b7d5f1a8c3e",
];

#[test]
fn issue_24_policy_check_and_alias_list_quote_no_planted_token() {
    let [sendgrid, jwt, github, hex] = CANARIES else {
        unreachable!()
    };
    let home = tempfile::tempdir().unwrap();
    let h = |name: &str| home.path().join(name);
    fs::write(
        h("aliases.yaml"),
        "aliases:\n  - name: github\n    hosts: [api.github.com]\n",
    )
    .unwrap();
    fs::write(
        h("planted-policy.yaml"),
        format!(
            "version: 1\nrules:\n  - id: a\n    effect: deny\n    match: {{ host: [{sendgrid}, {jwt}] }}\n  - id: b\n    effect: allow\n    match: {{ scheme: http, host: [{hex}] }}\n  - id: c\n    effect: deny\n    {hex}: 1\ncall_limits:\n  'tool:{github}': 5\n  {hex}: 0\n"
        ),
    )
    .unwrap();
    fs::write(
        h("planted-aliases.yaml"),
        format!(
            "aliases:\n  - name: x\n    hosts: [{sendgrid}, {jwt}]\n    {hex}: 1\n  - name: y\n    hosts: [b.example.com]\n    source: env:{github}x-\n"
        ),
    )
    .unwrap();
    // A file that loads, with warnings only: the legacy call limits name their keys nowhere.
    fs::write(
        h("warnings-policy.yaml"),
        format!("version: 1\nrules: []\ncall_limits:\n  'tool:{github}': 5\n  {hex}: 7\n"),
    )
    .unwrap();
    let mut mcp = Mcp::start(&[
        ("MINT_HOME", home.path().as_os_str().to_owned()),
        ("RUST_LOG", "trace".into()),
    ]);
    let mut outputs = Vec::new();
    let policy = mcp.call("policy_check", json!({ "file": h("planted-policy.yaml") }));
    let codes: Vec<&str> = error(&policy, -32603)["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["code"].as_str().unwrap())
        .collect();
    // The planted positions are the ones that were quoted: E022 (lowercased), E024, E043, W002
    // and E010.
    for code in ["E022", "E024", "E043", "W002", "E010"] {
        assert!(codes.contains(&code), "{code} missing: {codes:?}");
    }
    outputs.push(policy.clone());
    let warnings = mcp.call("policy_check", json!({ "file": h("warnings-policy.yaml") }));
    assert!(warnings.to_string().contains("W002"), "{warnings}");
    outputs.push(warnings);
    let aliases = mcp.call("alias_list", json!({ "path": h("planted-aliases.yaml") }));
    let codes: Vec<&str> = error(&aliases, -32603)["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["code"].as_str().unwrap())
        .collect();
    assert!(
        codes.contains(&"E022") && codes.contains(&"E010"),
        "{codes:?}"
    );
    outputs.push(aliases);
    let finished = mcp.finish();
    assert!(finished.status.success());
    let stdout = Value::Array(outputs).to_string().to_ascii_lowercase();
    let stderr = finished.stderr.to_ascii_lowercase();
    assert!(stderr.contains("request answered"), "{stderr}");
    for canary in CANARIES {
        let canary = canary.to_ascii_lowercase();
        for piece in canary.as_bytes().windows(12) {
            let piece = std::str::from_utf8(piece).unwrap();
            assert!(
                !stdout.contains(piece),
                "`{piece}` quoted on stdout: {stdout}"
            );
            assert!(!stderr.contains(piece), "`{piece}` quoted on stderr");
        }
    }
}

/// Appends `item(i)` while the text (and `reserve` bytes more) stays within 4 MiB.
fn fill(mut head: String, reserve: usize, mut item: impl FnMut(usize) -> String) -> String {
    let mut i = 0;
    loop {
        let next = item(i);
        if head.len() + next.len() + reserve > mint_policy::MAX_FILE_BYTES {
            return head;
        }
        head.push_str(&next);
        i += 1;
    }
}

/// How long one worst-case file may take: generous for a debug build on a busy machine (the
/// figures it printed are in docs/performance.md); the quadratic loader took many minutes.
const WORST_CASE_DEADLINE: Duration = Duration::from_secs(120);

#[test]
fn issue_24_worst_case_files_are_answered_and_ping_after_them() {
    let home = tempfile::tempdir().unwrap();
    let h = |name: &str| home.path().join(name);
    fs::write(h("aliases.yaml"), "aliases: []\n").unwrap();
    let keys = fill("version: 1\nrules: []\ncall_limits:\n".to_owned(), 0, |i| {
        format!("  a{i}: 1\n")
    });
    let unknown = fill("version: 1\nrules: []\n".to_owned(), 0, |i| {
        format!("k{i}: 1\n")
    });
    let host_list: Vec<String> = (0..12).map(|i| format!("h{i}.x.example.com")).collect();
    let host_list = host_list.join(", ");
    let mut competing = String::from("version: 1\nrules:\n");
    for i in 0..5_000 {
        competing.push_str(&format!(
            "  - {{ id: a{i}, effect: allow, match: {{ host: [{host_list}], method: GET }} }}\n  - {{ id: d{i}, effect: deny, match: {{ host: [{host_list}], method: POST }} }}\n"
        ));
    }
    let all: Vec<String> = (0..90_000).map(|i| format!("h{i}.x.example.com")).collect();
    let all = all.join(", ");
    // Block mappings: a flow list this long inside a flow mapping is refused (E016) early.
    let long_lists = format!(
        "version: 1\nrules:\n  - id: a\n    effect: allow\n    match:\n      host: [{all}]\n  - id: d\n    effect: deny\n    match:\n      host: [{all}]\n"
    );
    let alias_hosts = fill(
        "aliases:\n  - name: gh\n    hosts: [api.github.com".to_owned(),
        2,
        |i| format!(", h{i}.example.com"),
    ) + "]\n";
    let mut mcp = Mcp::start(&[("MINT_HOME", home.path().as_os_str().to_owned())]);
    for (name, text, tool, key) in [
        ("keys.yaml", &keys, "policy_check", "file"),
        ("unknown.yaml", &unknown, "policy_check", "file"),
        ("competing.yaml", &competing, "policy_check", "file"),
        ("long-lists.yaml", &long_lists, "policy_check", "file"),
        ("alias-hosts.yaml", &alias_hosts, "alias_list", "path"),
    ] {
        assert!(text.len() <= mint_policy::MAX_FILE_BYTES, "{name}");
        fs::write(h(name), text).unwrap();
        let started = Instant::now();
        mcp.send(
            &json!({
                "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": tool, "arguments": { key: h(name) }},
            })
            .to_string(),
        );
        let answer = mcp.recv_within(WORST_CASE_DEADLINE);
        assert!(
            answer.get("result").is_some() || answer.get("error").is_some(),
            "{name}: {answer}"
        );
        let answered = started.elapsed();
        // Nothing else is pending: the ping is answered within the harness's usual deadline.
        let ping = mcp.request(json!({"jsonrpc": "2.0", "id": "after", "method": "ping"}));
        assert_eq!(ping, json!({"jsonrpc": "2.0", "id": "after", "result": {}}));
        // Reported, not asserted: the figures for docs/performance.md.
        eprintln!(
            "{name}: {} bytes answered in {answered:?}, ping after it in {:?}",
            text.len(),
            started.elapsed() - answered
        );
    }
    assert!(mcp.finish().status.success());
}

/// The peak resident set a `mint-mcp` may reach answering `policy_check` on the worst 4 MiB
/// policy files: each one, in one process, one after the other. Measured 190 MB (debug build),
/// the tree of two million small nodes; the old loader took 534 MB for a flow list of two million
/// hosts (yaml-rust2's scanner held every token of the list) and 348 MB for flow mappings.
const POLICY_PEAK_BOUND: u64 = 320 << 20;

/// The same for `alias_list` on one alias with two million hosts, after the policies above:
/// measured 340 MB (the tree, then a host pattern per host while the tree is still read).
const ALIAS_PEAK_BOUND: u64 = 448 << 20;

#[test]
fn issue_24_peak_memory_of_the_worst_files_stays_bounded() {
    let home = tempfile::tempdir().unwrap();
    let h = |name: &str| home.path().join(name);
    fs::write(h("aliases.yaml"), "aliases: []\n").unwrap();
    let policies = [
        // Two million hosts in one flow list: cut at the lookahead bound (E016).
        (
            "flow-hosts.yaml",
            fill(
                "version: 1\nrules:\n  - { id: a, effect: allow, match: { host: [".to_owned(),
                12,
                |_| "a,".to_owned(),
            ) + "a] } }\n",
        ),
        // The tree's worst shapes: two million scalars, a million one-item lists, 700k flow
        // mappings, 330k rules.
        (
            "scalars.yaml",
            fill("version: 1\nrules: []\nx: [".to_owned(), 3, |_| {
                "1,".to_owned()
            }) + "1]\n",
        ),
        (
            "lists.yaml",
            fill("version: 1\nrules: []\nx: [".to_owned(), 3, |_| {
                "[1],".to_owned()
            }) + "1]\n",
        ),
        (
            "mappings.yaml",
            fill("version: 1\nrules: []\nx: [".to_owned(), 4, |_| {
                "{a: },".to_owned()
            }) + "{}]\n",
        ),
        (
            "rules.yaml",
            fill("version: 1\nrules:\n".to_owned(), 0, |i| {
                format!("- {{id: r{i}}}\n")
            }),
        ),
    ];
    let mut mcp = Mcp::start(&[("MINT_HOME", home.path().as_os_str().to_owned())]);
    let ask = |mcp: &mut Mcp, tool: &str, key: &str, name: &str| {
        mcp.send(
            &json!({
                "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": tool, "arguments": { key: h(name) }},
            })
            .to_string(),
        );
        let answer = mcp.recv_within(WORST_CASE_DEADLINE);
        assert!(
            answer.get("result").is_some() || answer.get("error").is_some(),
            "{name}: {answer}"
        );
        let peak = mcp.peak_rss();
        // Reported, not asserted one by one: the figures for docs/security.md.
        eprintln!("{name}: peak resident set {} MB", peak >> 20);
        peak
    };
    for (name, text) in &policies {
        assert!(text.len() <= mint_policy::MAX_FILE_BYTES, "{name}");
        assert!(text.len() > mint_policy::MAX_FILE_BYTES - 64, "{name}");
        fs::write(h(name), text).unwrap();
        let peak = ask(&mut mcp, "policy_check", "file", name);
        assert!(
            peak < POLICY_PEAK_BOUND,
            "{name}: peak resident set {peak} bytes, bound {POLICY_PEAK_BOUND}"
        );
    }
    // Two million hosts of one alias, in a flow list (read in pieces: its key is on its line).
    let alias_hosts = fill("aliases:\n  - name: gh\n    hosts: [".to_owned(), 3, |_| {
        "a,".to_owned()
    }) + "a]\n";
    fs::write(h("alias-hosts.yaml"), &alias_hosts).unwrap();
    let peak = ask(&mut mcp, "alias_list", "path", "alias-hosts.yaml");
    assert!(
        peak < ALIAS_PEAK_BOUND,
        "alias-hosts.yaml: peak resident set {peak} bytes, bound {ALIAS_PEAK_BOUND}"
    );
    let ping = mcp.request(json!({"jsonrpc": "2.0", "id": "after", "method": "ping"}));
    assert_eq!(ping, json!({"jsonrpc": "2.0", "id": "after", "result": {}}));
    assert!(mcp.finish().status.success());
}
