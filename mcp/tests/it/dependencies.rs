//! DESIGN.md invariant 6, proven from Cargo's own resolution: `mint-mcp`'s normal dependency tree
//! (on every target) holds no secret store, no HTTP client or server, no TLS, no async runtime and
//! never `mint-broker`. `scripts/check-deps.sh` checks the same in CI; this test keeps the proof
//! with the crate.

use std::collections::BTreeSet;
use std::process::Command;

const FORBIDDEN: &[&str] = &[
    "keyring",
    "secrecy",
    "secret-service",
    "linux-keyutils",
    "dbus",
    "zbus",
    "hyper",
    "hyper-util",
    "reqwest",
    "ureq",
    "axum",
    "tower-http",
    "h2",
    "rustls",
    "tokio-rustls",
    "native-tls",
    "openssl",
    "tokio",
    "mint-broker",
];

#[test]
fn the_dependency_tree_reaches_no_secret_store_or_network() {
    let output = Command::new(env!("CARGO"))
        .current_dir(crate::support::repo_root())
        .args([
            "tree",
            "--offline",
            "--locked",
            "-q",
            "-p",
            "mint-mcp",
            "-e",
            "normal",
            "--target",
            "all",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .output()
        .expect("run cargo tree");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let names: BTreeSet<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    // An empty or broken listing must not pass.
    for required in ["mint-mcp", "mint-policy", "serde_json"] {
        assert!(
            names.contains(required),
            "`{required}` missing from {names:?}"
        );
    }
    let found: Vec<&&str> = FORBIDDEN
        .iter()
        .filter(|name| names.contains(**name))
        .collect();
    assert!(
        found.is_empty(),
        "mint-mcp depends on forbidden crates {found:?}"
    );
}
