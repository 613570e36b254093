//! What findings may quote (issue 24): a secret-shaped canary planted in any scalar position of
//! a generated policy or alias file — as a key or a value, valid for the field or not, in upper
//! case, with a trailing dot, under a wildcard — never comes back in a finding's message or
//! path, in the human report or the JSON one, in any letter case, not even in part.
//!
//! The one exception is a rule id or an alias name that passed its grammar: that is the name the
//! operator gave the declaration, which Mint shows everywhere (`rules` of a 403, `alias_list`).

#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed setup step should fail the test"
)]

use mint_policy::Diagnostic;
use mint_policy::aliases::load_aliases;
use mint_policy::check::check_policy;
use mint_policy::policy::{is_alias_name, is_rule_id};
use proptest::prelude::*;

/// Shapes a pasted secret takes: SendGrid, a JWT, a GitHub token, and one that is a valid rule
/// id, alias name, host label, agent, tool and environment variable name at once.
const CANARIES: &[&str] = &[
    "SG.aB3dE5fG7hJ9kL1mN3pQ5r.sT7uV9wX1yZ3aB5cD7eF9gH1jK3lM5nP7qR9sT1",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk",
    "ghp_R4nD0mT0k3nV4lu3Xy9Zq2Wp8Lm5Kj7Hg3Fd",
    "k7x2m9q4w8e1r5t3y6u0",
];

/// How the canary is written into its slot.
const DECORATIONS: &[fn(&str) -> String] = &[
    |c| c.to_owned(),
    |c| c.to_ascii_uppercase(),
    |c| format!("{c}."),
    |c| format!("'*.{c}'"),
    |c| format!("'*.{c}.com'"),
    |c| format!("/{c}"),
    |c| format!("'tool:{c}'"),
    |c| format!("'{c} x'"),
];

/// Slots of the policy template with the value that keeps the file valid. A slot whose default
/// is empty is a line that is only written when the canary goes there (an extra key).
const POLICY_SLOTS: &[(&str, &str)] = &[
    ("version", "1"),
    ("default", "deny"),
    ("topkey", ""),
    ("id", "gh-read"),
    ("description", "read the repositories"),
    ("agent", "mino"),
    ("alias", "github"),
    ("host", "api.github.com"),
    ("host2", "uploads.github.com"),
    ("port", "443"),
    ("method", "GET"),
    ("path", "'/repos/**'"),
    ("tool", "query-docs"),
    ("matchkey", ""),
    ("inject", "header"),
    ("allow_private", "false"),
    ("max", "100"),
    ("per", "1h"),
    ("by", "agent"),
    ("limitkey", ""),
    ("rulekey", ""),
    ("id2", "no-gets"),
    ("denyhost", "api.github.com"),
    ("denymethod", "GET"),
    ("climit", "github"),
    ("climitvalue", "10"),
    ("climittool", "query-docs"),
    ("dupkey", ""),
    ("syntax", ""),
];

const ALIAS_SLOTS: &[(&str, &str)] = &[
    ("topkey", ""),
    ("name", "github"),
    ("description", "docs bot token"),
    ("host", "api.github.com"),
    ("host2", "uploads.github.com"),
    ("site", "header"),
    ("source", "keyring"),
    ("envsource", ""),
    ("filesource", ""),
    ("aliaskey", ""),
    ("name2", "slack"),
    ("dupkey", ""),
    ("syntax", ""),
];

fn fill(slots: &[(&str, &str)], chosen: usize, value: &str) -> impl Fn(&str) -> String {
    let values: Vec<(String, String)> = slots
        .iter()
        .enumerate()
        .map(|(i, (name, default))| {
            let v = if i == chosen { value } else { default };
            ((*name).to_owned(), v.to_owned())
        })
        .collect();
    move |name| {
        values
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }
}

/// A policy with the canary (already decorated) in slot `chosen`; `effect` and `http` vary
/// which checks run.
fn policy_file(chosen: usize, value: &str, effect: usize, http: bool) -> String {
    let s = fill(POLICY_SLOTS, chosen, value);
    let line = |key: &str, indent: &str, rest: &str| {
        let k = s(key);
        if k.is_empty() {
            String::new()
        } else {
            format!("{indent}{k}{rest}\n")
        }
    };
    let effect = ["allow", "deny", "limit"][effect];
    let scheme = if http { "http" } else { "https" };
    let mut out = format!("version: {}\ndefault: {}\n", s("version"), s("default"));
    out += &line("topkey", "", ": 1");
    out += &format!(
        "rules:\n  - id: {}\n    description: {}\n    effect: {effect}\n    match:\n      agent: [{}]\n",
        s("id"),
        s("description"),
        s("agent")
    );
    if effect == "allow" {
        out += &format!("      alias: [{}]\n", s("alias"));
    }
    out += &format!(
        "      scheme: [{scheme}]\n      host: [{}, {}]\n      port: [{}]\n      method: [{}]\n      path: [{}]\n      tool: [{}]\n",
        s("host"),
        s("host2"),
        s("port"),
        s("method"),
        s("path"),
        s("tool")
    );
    out += &line("matchkey", "      ", ": x");
    if effect == "allow" {
        out += &format!(
            "    inject: [{}]\n    allow_private: {}\n",
            s("inject"),
            s("allow_private")
        );
    }
    if effect != "deny" {
        out += &format!(
            "    limits:\n      - max: {}\n        per: {}\n        by: [{}]\n",
            s("max"),
            s("per"),
            s("by")
        );
        out += &line("limitkey", "        ", ": 1");
    }
    out += &line("rulekey", "    ", ": 1");
    out += &format!(
        "  - id: {}\n    effect: deny\n    match: {{ host: [{}, uploads.github.com], method: [{}] }}\n",
        s("id2"),
        s("denyhost"),
        s("denymethod")
    );
    out += &format!(
        "call_limits:\n  {}: {}\n  'tool:{}': 5\n",
        s("climit"),
        s("climitvalue"),
        s("climittool")
    );
    let dup = s("dupkey");
    if !dup.is_empty() {
        out += &format!("  {dup}: 1\n  {dup}: 2\n");
    }
    let syntax = s("syntax");
    if !syntax.is_empty() {
        out += &format!("broken: [{syntax}, \"{syntax}\n");
    }
    out
}

fn alias_file(chosen: usize, value: &str) -> String {
    let s = fill(ALIAS_SLOTS, chosen, value);
    let mut out = String::new();
    if !s("topkey").is_empty() {
        out += &format!("{}: 1\n", s("topkey"));
    }
    let source = if !s("envsource").is_empty() {
        format!("env:{}", s("envsource"))
    } else if !s("filesource").is_empty() {
        format!("'file:/run/secrets/{}'", s("filesource").trim_matches('\''))
    } else {
        s("source")
    };
    out += &format!(
        "aliases:\n  - name: {}\n    description: {}\n    hosts: [{}, {}]\n    sites: [{}]\n    source: {source}\n",
        s("name"),
        s("description"),
        s("host"),
        s("host2"),
        s("site"),
    );
    if !s("aliaskey").is_empty() {
        out += &format!("    {}: 1\n", s("aliaskey"));
    }
    out += &format!("  - name: {}\n    hosts: [b.example.com]\n", s("name2"));
    let dup = s("dupkey");
    if !dup.is_empty() {
        out += &format!("  - {{ name: x, hosts: [c.example.com], {dup}: 1, {dup}: 2 }}\n");
    }
    let syntax = s("syntax");
    if !syntax.is_empty() {
        out += &format!("broken: [{syntax}, \"{syntax}\n");
    }
    out
}

/// Fails when any ten-character piece of `canary` appears in `text`, in any letter case.
fn assert_absent(canary: &str, text: &str, file: &str) {
    let text = text.to_ascii_lowercase();
    let canary = canary.to_ascii_lowercase();
    let bytes = canary.as_bytes();
    for window in bytes.windows(10) {
        let piece = std::str::from_utf8(window).unwrap();
        assert!(
            !text.contains(piece),
            "`{piece}` of the canary is quoted:\n{text}\n--- file:\n{file}"
        );
    }
}

/// What a finding shows, with the rule id left out when it may be quoted.
fn shown(d: &Diagnostic, id_may_show: Option<&str>) -> String {
    let mut d = d.clone();
    if let Some(id) = id_may_show {
        if d.rule_id.as_deref() == Some(id) {
            d.rule_id = None;
        }
        // W003 names the deny rule that shadows: a declared rule id.
        d.message = d.message.replace(&format!("rule \"{id}\""), "rule \"ID\"");
    }
    format!(
        "{}\n{}",
        d.render("file.yaml"),
        serde_json::to_string(&d).unwrap()
    )
}

fn check_policy_file(canary: &str, slot: usize, value: &str, effect: usize, http: bool) {
    let file = policy_file(slot, value, effect, http);
    let name = POLICY_SLOTS[slot].0;
    let raw = value.trim_matches('\'');
    let id_may_show = (matches!(name, "id" | "id2") && is_rule_id(raw)).then_some(raw);
    let report = check_policy(file.as_bytes(), "file.yaml");
    for d in report.errors.iter().chain(&report.warnings) {
        assert_absent(canary, &shown(d, id_may_show), &file);
    }
    if id_may_show.is_none() {
        assert_absent(canary, &report.render_human(), &file);
        assert_absent(canary, &serde_json::to_string(&report).unwrap(), &file);
        assert_absent(canary, &report.error_summary(), &file);
    }
}

fn check_alias_file(canary: &str, slot: usize, value: &str) {
    let file = alias_file(slot, value);
    let name = ALIAS_SLOTS[slot].0;
    let raw = value.trim_matches('\'');
    let name_may_show = (matches!(name, "name" | "name2") && is_alias_name(raw)).then_some(raw);
    let load = load_aliases(file.as_bytes(), "aliases.yaml");
    for d in &load.diagnostics {
        assert_absent(canary, &shown(d, name_may_show), &file);
        if name_may_show.is_none() {
            assert_absent(canary, &d.short(), &file);
        }
    }
    // A file that loads holds declarations, which `alias_list` shows by design; one that does
    // not loads nothing.
    if load.errors().next().is_some() {
        assert!(load.aliases.is_none());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn issue_24_no_finding_quotes_a_planted_canary(
        canary in 0..CANARIES.len(),
        decoration in 0..DECORATIONS.len(),
        policy_slot in 0..POLICY_SLOTS.len(),
        alias_slot in 0..ALIAS_SLOTS.len(),
        effect in 0..3usize,
        http in any::<bool>(),
    ) {
        let canary = CANARIES[canary];
        let value = DECORATIONS[decoration](canary);
        check_policy_file(canary, policy_slot, &value, effect, http);
        check_alias_file(canary, alias_slot, &value);
    }
}

/// Every slot, canary and decoration once, so no position depends on what proptest picked.
#[test]
fn issue_24_every_slot_with_every_canary() {
    for canary in CANARIES {
        for decorate in DECORATIONS {
            let value = decorate(canary);
            for slot in 0..POLICY_SLOTS.len() {
                for effect in 0..3 {
                    for http in [false, true] {
                        check_policy_file(canary, slot, &value, effect, http);
                    }
                }
            }
            for slot in 0..ALIAS_SLOTS.len() {
                check_alias_file(canary, slot, &value);
            }
        }
    }
}

/// The templates are sound: without a canary the policy loads with the warnings it is built to
/// give (a shadowed allow rule, the legacy call limits), and so does the alias file, so a slot's
/// canary is what makes a finding, not a broken template.
#[test]
fn issue_24_templates_load_without_a_canary() {
    let file = policy_file(usize::MAX, "", 0, false);
    let report = check_policy(file.as_bytes(), "t");
    assert!(report.valid, "{}", report.render_human());
    let codes: Vec<&str> = report.warnings.iter().map(|d| d.code.as_str()).collect();
    assert!(
        codes.contains(&"W003") && codes.contains(&"W002"),
        "{codes:?}"
    );
    for effect in 1..3 {
        let file = policy_file(usize::MAX, "", effect, false);
        assert!(check_policy(file.as_bytes(), "t").valid, "{file}");
    }
    let load = load_aliases(alias_file(usize::MAX, "").as_bytes(), "t");
    assert!(load.aliases.is_some(), "{:?}", load.diagnostics);
}
