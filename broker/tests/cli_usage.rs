//! `mint usage` prints the same description as the `mint_usage` MCP tool: one source, two forms.

#![allow(clippy::unwrap_used, reason = "test code")]

use assert_cmd::Command;

#[test]
fn usage_json_is_the_mint_usage_tool_payload() {
    let out = Command::cargo_bin("mint")
        .unwrap()
        .args(["usage", "--json", "--listen", "127.0.0.1:9999"])
        .env_remove("MINT_LISTEN")
        .output()
        .unwrap();
    assert!(out.status.success());
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let expected = serde_json::to_value(mint_policy::usage::usage("127.0.0.1:9999")).unwrap();
    assert_eq!(printed, expected);
}

#[test]
fn usage_text_names_the_route_header_placeholder_and_tools() {
    let out = Command::cargo_bin("mint")
        .unwrap()
        .arg("usage")
        .env("MINT_LISTEN", "127.0.0.1:8701")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "http://127.0.0.1:8701/v1/proxy/",
        "Mint-Capability",
        "{{mint:ALIAS}}",
        "alias_list",
        "policy_check",
        "audit_tail",
        "mint_usage",
        // Issue 23: both spellings, and why (curl reads only the lowercase one).
        "http_proxy=http://127.0.0.1:8701 and HTTP_PROXY=http://127.0.0.1:8701",
        "curl reads only the lowercase http_proxy",
        "sends the literal placeholder upstream",
        // CONNECT is intercepted, no longer refused.
        "Mint intercepts the CONNECT tunnel",
    ] {
        assert!(text.contains(needle), "missing {needle}:\n{text}");
    }
    assert!(!text.contains("CONNECT is refused"), "{text}");
    assert!(!text.contains("mint_cap_"), "no capability material");
}
