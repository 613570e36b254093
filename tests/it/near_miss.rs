//! Issue 23: a request no allow rule admits is refused naming the allow rule that came closest
//! and the field that failed — including what the operator did not write (a rule for
//! `127.0.0.1` without `port` admits only 443) — through the real broker and `mint policy
//! explain`, with a canary secret that appears in neither.

#![allow(clippy::unwrap_used, reason = "tests")]

use mint_tests::lab::{Lab, LabConfig};

const CANARY: &str = "canary-nearmiss-5Vb8Qz2";

#[test]
fn the_closest_allow_rule_and_the_field_that_failed_are_named() {
    let lab = Lab::start(
        LabConfig {
            secrets: &[("echo", CANARY)],
            ..LabConfig::default()
        },
        // The port is left out: the rule admits only 443, and the upstream is elsewhere.
        |_| {
            "  - id: local-reads\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      method: [GET]\n".to_owned()
        },
    );
    let response = lab.curl(&[
        "-H",
        "Authorization: Bearer {{mint:echo}}",
        &lab.echo_url("/echo/user"),
    ]);
    assert_eq!(response.status, 403, "{}", response.body);
    let error = &response.json()["error"];
    assert_eq!(error["code"], "policy_denied");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("the closest, `local-reads`"), "{message}");
    assert!(
        message.contains(&format!(
            "names no `port`, so only 443 (the https default; this request is to port {})",
            lab.port()
        )),
        "{message}"
    );
    assert_eq!(lab.forwarded(), 0);

    // explain says the same.
    let explained = lab
        .home
        .mint()
        .args([
            "policy", "explain", "--agent", "mino", "--method", "GET", "--url",
        ])
        .arg(format!("https://127.0.0.1:{}/echo/user", lab.port()))
        .args(["--header", "Authorization: Bearer {{mint:echo}}"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&explained.stdout).into_owned()
        + &String::from_utf8_lossy(&explained.stderr);
    assert!(text.contains("`local-reads`"), "{text}");
    assert!(text.contains("names no `port`, so only 443"), "{text}");
    assert!(!text.contains(CANARY));
    lab.assert_clean(response.everything());
}

/// The near-miss words an operator reads, pinned as snapshots (issue 23): the 403 body's message
/// and its structured `closest` for refusals on different fields, and `mint policy explain`'s
/// report of one of them. The upstream's port and the request ids vary between runs and are
/// written as `PORT` and `ID`.
#[test]
fn near_miss_messages_snapshot() {
    let lab = Lab::start(
        LabConfig {
            secrets: &[("echo", CANARY)],
            ..LabConfig::default()
        },
        |port| {
            [
                mint_tests::lab::allow(
                    "item-reads",
                    "echo",
                    port,
                    "GET",
                    "      path: [/echo/items/**]\n",
                ),
                mint_tests::lab::allow(
                    "report-writes",
                    "echo",
                    port,
                    "POST",
                    "      agent: [reporter]\n      path: [/echo/reports/*]\n",
                ),
            ]
            .concat()
        },
    );
    let port = lab.port().to_string();
    let redact = |text: &str| text.replace(&port, "PORT");
    let mut seen = String::new();
    for (method, path) in [
        ("GET", "/echo/users/1"),
        ("DELETE", "/echo/items/1"),
        ("POST", "/echo/reports/7"),
    ] {
        let response = lab.curl(&[
            "-X",
            method,
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            &lab.echo_url(path),
        ]);
        assert_eq!(response.status, 403, "{}", response.body);
        let mut error = response.json()["error"].clone();
        assert_eq!(error["code"], "policy_denied");
        error["request_id"] = "ID".into();
        seen.push_str(&format!(
            "{method} {path}\n{}\n\n",
            redact(&serde_json::to_string_pretty(&error).unwrap())
        ));
        lab.assert_clean(response.everything());
    }
    assert_eq!(lab.forwarded(), 0);
    insta::assert_snapshot!("near_miss_403_bodies", seen);

    let explained = lab
        .home
        .mint()
        .args([
            "policy", "explain", "--agent", "mino", "--method", "GET", "--url",
        ])
        .arg(format!("https://127.0.0.1:{port}/echo/users/1"))
        .args(["--header", "Authorization: Bearer {{mint:echo}}"])
        .output()
        .unwrap();
    assert_eq!(explained.status.code(), Some(1), "{explained:?}");
    let text = String::from_utf8(explained.stdout).unwrap();
    assert!(!text.contains(CANARY) && !String::from_utf8_lossy(&explained.stderr).contains(CANARY));
    insta::assert_snapshot!("near_miss_explain", redact(&text));

    // `--json` carries the same structured field as the 403 body.
    let explained = lab
        .home
        .mint()
        .args([
            "policy", "explain", "--json", "--agent", "mino", "--method", "GET", "--url",
        ])
        .arg(format!("https://127.0.0.1:{port}/echo/users/1"))
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&explained.stdout).unwrap();
    assert_eq!(
        report["closest"],
        serde_json::json!({
            "rule": "item-reads",
            "reasons": ["path `/echo/users/1` matches none of its paths"],
        })
    );
}
