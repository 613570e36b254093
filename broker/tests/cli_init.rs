//! `mint init` through the real binary: what it creates and with which permissions, that it never
//! overwrites, and that a failure part-way leaves nothing behind.

#![expect(clippy::unwrap_used, reason = "test code")]

#[path = "support/mint.rs"]
mod support;

use std::path::Path;

use support::{fails, mint, mode, ok, run};

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn creates_a_private_home_with_three_private_files_and_the_ca() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join(".mint");
    let out = ok(mint(dir.path()).arg("init"));
    assert_eq!(mode(&home), 0o700);
    assert_eq!(
        listing(&home),
        [
            "aliases.yaml",
            "ca.key",
            "ca.pem",
            "capabilities.yaml",
            "policy.yaml"
        ]
    );
    for file in ["aliases.yaml", "capabilities.yaml", "policy.yaml", "ca.key"] {
        assert_eq!(mode(&home.join(file)), 0o600, "{file}");
    }
    // The CA certificate is for agents to read.
    assert_eq!(mode(&home.join("ca.pem")), 0o644);
    assert!(out.stdout.contains("mint ca export"), "{}", out.stdout);
    assert!(out.stdout.contains("policy.yaml"), "{}", out.stdout);
    assert!(out.stdout.contains("Next steps:"), "{}", out.stdout);
    assert!(out.stdout.contains("mint alias add"), "{}", out.stdout);
    assert!(out.stdout.contains("mint cap issue"), "{}", out.stdout);
    assert!(out.stdout.contains("another user"), "{}", out.stdout);
    assert!(out.stderr.is_empty(), "{}", out.stderr);

    let policy = std::fs::read_to_string(home.join("policy.yaml")).unwrap();
    assert!(
        policy.contains("\nversion: 1\ndefault: deny\nrules: []\n"),
        "{policy}"
    );
    assert!(policy.starts_with("# "), "commented: {policy}");
    let aliases = std::fs::read_to_string(home.join("aliases.yaml")).unwrap();
    assert!(aliases.ends_with("aliases: []\n"), "{aliases}");

    // Every other command accepts what init wrote.
    let check = ok(mint(dir.path()).args(["policy", "check"]));
    assert!(
        check
            .stdout
            .ends_with("policy.yaml: 0 rules, default deny\n0 errors, 0 warnings\n"),
        "{}",
        check.stdout
    );
    let list = ok(mint(dir.path()).args(["alias", "list", "--json"]));
    assert_eq!(list.stdout.trim(), "[]");
    let caps = ok(mint(dir.path()).args(["cap", "list", "--json"]));
    assert_eq!(caps.stdout.trim(), "[]");
    let caps = ok(mint(dir.path()).args(["cap", "list"]));
    assert!(
        caps.stdout.starts_with("No capabilities yet"),
        "{}",
        caps.stdout
    );
}

#[test]
fn never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    ok(mint(dir.path()).arg("init"));
    let home = dir.path().join(".mint");
    std::fs::write(home.join("policy.yaml"), "version: 1\nrules: []\n# mine\n").unwrap();
    let files = [
        "aliases.yaml",
        "capabilities.yaml",
        "policy.yaml",
        "ca.pem",
        "ca.key",
    ];
    let before: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(home.join(f)).unwrap())
        .collect();
    let out = fails(mint(dir.path()).arg("init"));
    assert!(out.stderr.contains("already exists"), "{}", out.stderr);
    assert!(out.stderr.contains("never overwrites"), "{}", out.stderr);
    let after: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(home.join(f)).unwrap())
        .collect();
    assert_eq!(before, after);
}

#[test]
fn one_existing_file_stops_everything() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("my-policy.yaml");
    std::fs::write(&policy, "version: 1\nrules: []\n").unwrap();
    let out = fails(
        mint(dir.path())
            .arg("init")
            .env("MINT_POLICY_PATH", &policy),
    );
    assert!(
        out.stderr
            .contains(&format!("`{}` already exists", policy.display())),
        "{}",
        out.stderr
    );
    assert!(!dir.path().join(".mint").exists(), "nothing was created");
}

#[test]
fn a_failure_part_way_removes_what_it_created() {
    let dir = tempfile::tempdir().unwrap();
    // The capabilities file is written last, into a directory that does not exist.
    let out = fails(mint(dir.path()).arg("init").env(
        "MINT_CAPABILITIES_PATH",
        dir.path().join("missing/caps.yaml"),
    ));
    assert!(out.stderr.contains("nothing was created"), "{}", out.stderr);
    assert_eq!(listing(dir.path()), Vec::<String>::new());
}

#[test]
fn an_existing_ca_file_stops_everything() {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("shared-ca.pem");
    std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\n").unwrap();
    let out = fails(mint(dir.path()).arg("init").env("MINT_CA_CERT", &cert));
    assert!(
        out.stderr
            .contains(&format!("`{}` already exists", cert.display())),
        "{}",
        out.stderr
    );
    assert!(!dir.path().join(".mint").exists(), "nothing was created");
}

#[test]
fn a_ca_that_cannot_be_written_removes_everything() {
    let dir = tempfile::tempdir().unwrap();
    // The CA is written last, into a directory that does not exist.
    let out = fails(
        mint(dir.path())
            .arg("init")
            .env("MINT_CA_KEY", dir.path().join("missing/ca.key")),
    );
    assert!(out.stderr.contains("nothing was created"), "{}", out.stderr);
    assert_eq!(listing(dir.path()), Vec::<String>::new());
}

#[test]
fn uses_an_existing_private_home_and_refuses_an_open_one() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("state");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = fails(mint(dir.path()).arg("init").env("MINT_HOME", &home));
    assert!(
        out.stderr
            .contains(&format!("run `chmod 700 {}`", home.display())),
        "{}",
        out.stderr
    );
    assert!(listing(&home).is_empty());

    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = ok(mint(dir.path()).arg("init").env("MINT_HOME", &home));
    assert!(out.stdout.starts_with("Initialized"), "{}", out.stdout);
    assert_eq!(listing(&home).len(), 5);
}

#[test]
fn refuses_a_home_whose_parent_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let out = fails(
        mint(dir.path())
            .arg("init")
            .env("MINT_HOME", dir.path().join("a/b")),
    );
    assert!(
        out.stderr.contains("parent directory does not exist"),
        "{}",
        out.stderr
    );
    assert!(!dir.path().join("a").exists());
}

#[test]
fn modes_do_not_depend_on_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = assert_cmd::Command::new("sh");
    for var in support::ENV_VARS {
        cmd.env_remove(var);
    }
    let out = run(cmd
        .arg("-c")
        .arg(format!(
            "umask 000; exec {} init",
            env!("CARGO_BIN_EXE_mint")
        ))
        .env("MINT_HOME", dir.path().join("open"))
        .current_dir(dir.path()));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let home = dir.path().join("open");
    assert_eq!(mode(&home), 0o700);
    for file in listing(&home) {
        let expected = if file == "ca.pem" { 0o644 } else { 0o600 };
        assert_eq!(mode(&home.join(&file)), expected, "{file}");
    }
}

#[test]
fn init_takes_no_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(mint(dir.path()).args(["init", "extra"]));
    assert_eq!(out.code, Some(2));
    assert!(!dir.path().join(".mint").exists());
}

/// Issue 23: `mint serve` where there is no home (never initialised, or `MINT_HOME` unset in
/// another directory) says to run `mint init`, as `mint alias` and `mint cap` do; it creates
/// nothing there.
#[test]
fn issue_23_serve_without_a_home_says_run_mint_init() {
    let dir = tempfile::tempdir().unwrap();
    for command in [
        &["serve", "--listen", "127.0.0.1:0"][..],
        &["alias", "list"],
        &["cap", "list"],
    ] {
        let out = fails(mint(dir.path()).args(command));
        assert!(
            out.stderr
                .contains("no such file or directory; run `mint init` first"),
            "{command:?}: {}",
            out.stderr
        );
    }
    assert!(listing(dir.path()).is_empty(), "{:?}", listing(dir.path()));
}

/// Issue 23: counts are worded in the singular for one (`has 1 error`, not `1 error(s)`).
#[test]
fn issue_23_serve_counts_one_error_in_the_singular() {
    let dir = tempfile::tempdir().unwrap();
    ok(mint(dir.path()).arg("init"));
    let policy = dir.path().join(".mint/policy.yaml");
    std::fs::write(&policy, "version: 1\nrules: []\nrulez: []\n").unwrap();
    let out = fails(mint(dir.path()).args(["serve", "--listen", "127.0.0.1:0"]));
    assert!(
        out.stderr.contains("policy.yaml` has 1 error; the first: "),
        "{}",
        out.stderr
    );
}
