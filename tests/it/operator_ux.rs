//! Issue 23, what an operator meets around a running broker: its log lines in a file carry no
//! colour codes, and the start-up line names the home, the files loaded and the rule and alias
//! counts.

use mint_tests::lab::{self, LabConfig};

/// `mint serve` with stderr sent to a file (as `mint serve 2>mint.log` or a service manager
/// does): plain text, and one line that says which home and files this broker runs on.
#[test]
fn issue_23_the_start_up_line_names_the_home_files_and_counts_without_colour() {
    let secret = "CANARY-operator-ux-5e1f";
    let config = LabConfig {
        secrets: &[("echo", secret)],
        ..LabConfig::default()
    };
    let lab = lab::Lab::start(config, |port| {
        [
            lab::allow("echo-read", "echo", port, "GET", ""),
            lab::allow("echo-write", "echo", port, "POST", ""),
        ]
        .concat()
    });
    let stderr = lab.broker.stderr();
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    let line = stderr
        .lines()
        .find(|line| line.contains("Mint home loaded"))
        .unwrap_or_else(|| panic!("no start-up line in {stderr}"));
    let home = std::path::absolute(lab.home.path()).unwrap();
    for needle in [
        format!("home={}", home.display()),
        "policy.yaml".to_owned(),
        "policy.rules=2".to_owned(),
        "aliases.yaml".to_owned(),
        "aliases.count=1".to_owned(),
        "capabilities.file=".to_owned(),
        "audit.file=".to_owned(),
    ] {
        assert!(line.contains(&needle), "missing {needle} in {line}");
    }
    lab.assert_clean(stderr.as_bytes());
}

/// Issue 23: size flags take units (`--max-request-body 1KiB`), and the broker enforces the
/// size they mean: 1024 bytes pass, 1025 are refused with 413 before anything is sent.
#[test]
fn issue_23_a_size_flag_with_a_unit_is_enforced() {
    let config = LabConfig {
        secrets: &[("echo", "CANARY-size-flag-77a1")],
        serve_args: &["--max-request-body", "1KiB"],
        ..LabConfig::default()
    };
    let lab = lab::Lab::start(config, |port| {
        lab::allow("echo-post", "echo", port, "POST", "")
    });
    let url = lab.broker.proxy_url(lab.port(), "/echo");
    let cap = format!("Mint-Capability: {}", lab.cap);
    let post = |bytes: usize| {
        let body = "x".repeat(bytes);
        mint_tests::broker::curl(&[
            "-H",
            &cap,
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            "--data-binary",
            &body,
            &url,
        ])
    };
    let fits = post(1024);
    assert_eq!(fits.status, 200, "{}", fits.everything());
    let before = lab.forwarded();
    let over = post(1025);
    assert_eq!(over.status, 413, "{}", over.everything());
    assert_eq!(over.json()["error"]["code"], "body_too_large");
    assert_eq!(lab.forwarded(), before);
    lab.assert_clean(format!("{}{}", fits.everything(), over.everything()));
}

/// Issue 23: an error about two values shows both, in the grammar the operator writes them in.
#[test]
fn issue_23_errors_about_two_values_show_both() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let output = std::process::Command::new(mint_tests::broker::mint_bin())
            .args(args)
            .current_dir(dir.path())
            .env("MINT_HOME", dir.path().join("home"))
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        String::from_utf8(output.stderr).unwrap()
    };
    let stderr = run(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--connect-timeout",
        "1m",
        "--request-timeout",
        "45s",
    ]);
    assert_eq!(
        stderr,
        "mint: the request timeout (45s) must be longer than the connect timeout (1m)\n"
    );
    let stderr = run(&["approvals", "approve", "some-id", "--for", "2d"]);
    assert_eq!(
        stderr,
        "mint: a grant of 2d is too long: a grant lasts from 1s to 8h\n"
    );
}
