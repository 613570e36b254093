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
