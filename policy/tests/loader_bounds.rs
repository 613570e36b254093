//! The loader's bounds hold at the size limit (issue 24): nesting far past the depth bound is
//! refused without recursing, anchors and aliases are refused rather than expanded (a
//! billion-laughs file costs what it weighs), and the checks that used to compare everything
//! with everything (duplicate keys, shadowed rules) still find what they must at scale. How
//! long a 4 MiB file takes is measured by `benches/load.rs`, not asserted here.

#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed setup step should fail the test"
)]

use mint_policy::aliases::load_aliases;
use mint_policy::diagnostic::MAX_DIAGNOSTICS;
use mint_policy::policy::load_policy;
use mint_policy::{Code, MAX_FILE_BYTES};

fn codes(bytes: &[u8]) -> Vec<&'static str> {
    load_policy(bytes, "t")
        .diagnostics
        .iter()
        .map(|d| d.code.as_str())
        .collect()
}

#[test]
fn issue_24_hundred_thousand_deep_nesting_is_refused_without_recursing() {
    let n = 100_000;
    for (open, close) in [("[", "]"), ("{a: ", "}"), ("[{a: ", "}]")] {
        let text = open.repeat(n) + &close.repeat(n);
        assert!(text.len() <= MAX_FILE_BYTES);
        let found = codes(text.as_bytes());
        assert_eq!(found.first(), Some(&"E006"), "{open}: {found:?}");
        let aliases = load_aliases(text.as_bytes(), "t");
        assert!(aliases.aliases.is_none());
        assert_eq!(aliases.diagnostics[0].code, Code::TooDeep);
    }
    // Block style: a sequence in a sequence on one line, and indentation.
    let text = "- ".repeat(n) + "x\n";
    assert_eq!(codes(text.as_bytes()).first(), Some(&"E006"));
    let text: String = (0..2_000)
        .map(|i| format!("{}- \n", " ".repeat(i)))
        .collect();
    assert_eq!(codes(text.as_bytes()).first(), Some(&"E006"));
}

#[test]
fn issue_24_billion_laughs_is_refused_not_expanded() {
    let mut text = String::from(
        "version: 1\nrules: []\na0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for i in 1..10 {
        let prev = format!("*a{}", i - 1);
        text.push_str(&format!("a{i}: &a{i} [{}]\n", vec![prev; 9].join(", ")));
    }
    let load = load_policy(text.as_bytes(), "t");
    assert!(load.policy.is_none());
    // One finding per anchor and per alias as written: 10 anchors, 81 aliases, not 9^10.
    let anchors = load
        .diagnostics
        .iter()
        .filter(|d| d.code == Code::YamlAnchor)
        .count();
    assert_eq!(anchors, 10 + 9 * 9);
    // A file of nothing but aliases: one finding each up to the report's bound, then a count.
    let mut text = String::from("x: &a [1]\ny: [");
    while text.len() < MAX_FILE_BYTES - 10 {
        text.push_str("*a, ");
    }
    text.push_str("*a]\n");
    let load = load_policy(text.as_bytes(), "t");
    assert_eq!(load.diagnostics.len(), MAX_DIAGNOSTICS + 1);
    assert_eq!(load.diagnostics.last().unwrap().code, Code::TooManyFindings);
}

#[test]
fn issue_24_duplicate_keys_are_found_among_many() {
    // 50,000 distinct keys, then the 7th again (quoted: the same key), then the last again.
    let mut text = String::from("version: 1\nrules: []\ncall_limits:\n");
    for i in 0..50_000 {
        text.push_str(&format!("  a{i}: 1\n"));
    }
    text.push_str("  \"a6\": 2\n  a49999: 3\n");
    let load = load_policy(text.as_bytes(), "t");
    let duplicates: Vec<_> = load
        .diagnostics
        .iter()
        .filter(|d| d.code == Code::DuplicateKey)
        .collect();
    assert_eq!(duplicates.len(), 2, "{:?}", load.diagnostics.first());
    assert_eq!(duplicates[0].line, 50_004);
    assert!(
        duplicates[0].message.contains("first at line 10,"),
        "{}",
        duplicates[0].message
    );
    assert_eq!(duplicates[1].line, 50_005);
    assert!(
        duplicates[1].message.contains("first at line 50003,"),
        "{}",
        duplicates[1].message
    );
    // Keys in different mappings never collide.
    let text = "version: 1\nrules:\n  - { id: a, effect: deny }\n  - { id: b, effect: deny }\n";
    assert!(load_policy(text.as_bytes(), "t").policy.is_some());
}

#[test]
fn issue_24_shadowed_rules_are_found_in_long_lists() {
    // An allow rule over 20,000 hosts, a deny rule covering them through a wildcard and 20,000
    // other hosts: the index must still find the one deny rule that shadows it.
    let hosts: Vec<String> = (0..20_000).map(|i| format!("h{i}.x.example.com")).collect();
    let others: Vec<String> = (0..20_000).map(|i| format!("o{i}.y.example.com")).collect();
    // Block mappings: a flow list of 20,000 inside a flow mapping is refused (E016).
    let text = format!(
        "version: 1\nrules:\n  - id: narrow\n    effect: deny\n    match:\n      host: [{}]\n      method: GET\n  - id: wide\n    effect: deny\n    match:\n      host: [{}, '*.x.example.com']\n  - id: all\n    effect: allow\n    match:\n      host: [{}]\n      method: [GET, POST]\n",
        hosts.join(", "),
        others.join(", "),
        hosts.join(", ")
    );
    let load = load_policy(text.as_bytes(), "t");
    assert!(load.policy.is_some());
    let shadowed: Vec<_> = load
        .diagnostics
        .iter()
        .filter(|d| d.code == Code::AllowShadowedByDeny)
        .collect();
    assert_eq!(shadowed.len(), 1);
    assert_eq!(shadowed[0].rule_id.as_deref(), Some("all"));
    assert!(
        shadowed[0].message.contains("\"wide\""),
        "{}",
        shadowed[0].message
    );
}
