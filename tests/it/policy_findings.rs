//! Findings quote no pasted token (issue 24), through the real `mint` binary: tokens planted in
//! the policy and alias files where the review found them quoted back (a SendGrid key and a JWT
//! in `host:`, a `tool:ghp_...` and an alias-shaped `call_limits` key, a hex key as a valid host
//! under `http`, an unknown key) never appear in what `mint policy check` (human and `--json`),
//! `mint policy explain --policy` or `mint alias list` print, in any letter case.

#![expect(clippy::unwrap_used, reason = "test code")]

use std::process::Output;

use mint_tests::broker::MintHome;

const SENDGRID: &str = "SG.aB3dE5fG7hJ9kL1mN3pQ5r.sT7uV9wX1yZ3aB5cD7eF9gH1jK3lM5nP7qR9sT1";
const JWT: &str =
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const GITHUB: &str = "ghp_R4nD0mT0k3nV4lu3Xy9Zq2Wp8Lm5Kj7Hg3Fd";
const HEX: &str = "a3f9c2e7b1d84f6a9c0e2b7d5f1a8c3e";

fn printed(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn assert_no_canary(what: &str, text: &str) {
    let text = text.to_ascii_lowercase();
    for canary in [SENDGRID, JWT, GITHUB, HEX] {
        let canary = canary.to_ascii_lowercase();
        for piece in canary.as_bytes().windows(12) {
            let piece = std::str::from_utf8(piece).unwrap();
            assert!(!text.contains(piece), "{what} quotes `{piece}`:\n{text}");
        }
    }
}

#[test]
fn issue_24_mint_policy_check_and_alias_list_quote_no_planted_token() {
    let policy = format!(
        "version: 1\nrules:\n  - id: a\n    effect: deny\n    match: {{ host: [{SENDGRID}, {JWT}] }}\n  - id: b\n    effect: allow\n    match: {{ scheme: http, host: [{HEX}] }}\n  - id: c\n    effect: deny\n    {HEX}: 1\ncall_limits:\n  'tool:{GITHUB}': 5\n  {HEX}: 0\n"
    );
    let aliases = format!(
        "aliases:\n  - name: x\n    hosts: [{SENDGRID}, {JWT}]\n    {HEX}: 1\n  - name: y\n    hosts: [b.example.com]\n    source: env:{GITHUB}x-\n"
    );
    let home = MintHome::new(&policy, &aliases, &[]);
    home.write_private(
        "warnings.yaml",
        &format!("version: 1\nrules: []\ncall_limits:\n  'tool:{GITHUB}': 5\n  {HEX}: 7\n"),
    );

    let check = home.mint().args(["policy", "check"]).output().unwrap();
    assert_eq!(check.status.code(), Some(1), "{}", printed(&check));
    let text = printed(&check);
    for code in ["E022", "E024", "E043", "W002", "E010"] {
        assert!(text.contains(code), "{code} missing:\n{text}");
    }
    assert_no_canary("mint policy check", &text);

    let json = home
        .mint()
        .args(["policy", "check", "--json"])
        .output()
        .unwrap();
    assert_eq!(json.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["valid"], false);
    assert_no_canary("mint policy check --json", &printed(&json));

    let warnings = home.path().join("warnings.yaml");
    let valid = home
        .mint()
        .args(["policy", "check", "--json"])
        .arg(&warnings)
        .output()
        .unwrap();
    assert_eq!(valid.status.code(), Some(0), "{}", printed(&valid));
    assert!(printed(&valid).contains("W002"));
    assert_no_canary("mint policy check --json (warnings only)", &printed(&valid));

    let explain = home
        .mint()
        .args(["policy", "explain", "--agent", "mino", "--method", "GET"])
        .args(["--url", "https://api.github.com/", "--policy"])
        .arg(home.path().join("policy.yaml"))
        .output()
        .unwrap();
    assert_eq!(explain.status.code(), Some(2), "{}", printed(&explain));
    assert_no_canary("mint policy explain --policy", &printed(&explain));

    let list = home.mint().args(["alias", "list"]).output().unwrap();
    assert_ne!(list.status.code(), Some(0), "{}", printed(&list));
    let text = printed(&list);
    // It names the first error; the planted host is it.
    assert!(text.contains("E022"), "{text}");
    assert_no_canary("mint alias list", &text);
}
