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
