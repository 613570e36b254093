//! `mint alias add|list|rm` through the real binary: every source, every refusal (exit 2 with the
//! file unchanged), file permissions, the keyring on both backends (tests named `keyring_*`), and
//! reading the secret from a real terminal with echo off.

#![expect(clippy::unwrap_used, reason = "test code")]

#[path = "support/mint.rs"]
mod support;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use mint_broker::secrets::credential_store::{
    CredentialStore, KeyringBackend, KeyringStore, StoreError,
};
use secrecy::ExposeSecret;
use support::{fails, init, listed, mint, mode, ok, reachable_keyring, run, service_of};

struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        let dir = tempfile::tempdir().unwrap();
        init(dir.path());
        Home { dir }
    }

    fn cwd(&self) -> &Path {
        self.dir.path()
    }

    fn aliases(&self) -> PathBuf {
        self.dir.path().join(".mint/aliases.yaml")
    }

    fn aliases_text(&self) -> String {
        std::fs::read_to_string(self.aliases()).unwrap()
    }

    fn mint(&self) -> Command {
        mint(self.cwd())
    }

    /// `mint` with the keyring of `store`.
    fn mint_with(&self, store: &KeyringStore) -> Command {
        let mut cmd = self.mint();
        cmd.env("MINT_KEYRING_BACKEND", store.config().backend.as_str())
            .env("MINT_KEYRING_SERVICE", service_of(store));
        cmd
    }

    /// `mint alias list --json`, parsed.
    fn list(&self, cmd: &mut Command) -> Vec<serde_json::Value> {
        let out = listed(cmd.args(["alias", "list", "--json"]));
        serde_json::from_str::<serde_json::Value>(&out.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }

    /// A 0600 file holding `text`, owned by this user.
    fn secret_file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.cwd().join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    }
}

#[test]
fn env_source_round_trip() {
    let home = Home::new();
    let out = ok(home.mint().args([
        "alias",
        "add",
        "npm",
        "--host",
        "registry.npmjs.org",
        "--source",
        "env:NPM_TOKEN",
        "--description",
        "npm publish token",
        "--env",
        "NPM_CONFIG_TOKEN",
    ]));
    assert!(out.stdout.contains("Added alias `npm`"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("; env NPM_CONFIG_TOKEN (set by `mint run`)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("warning: the environment variable `NPM_TOKEN` is not set here"),
        "{}",
        out.stdout
    );
    assert_eq!(mode(&home.aliases()), 0o600);
    let text = home.aliases_text();
    assert!(text.contains("source: \"env:NPM_TOKEN\""), "{text}");

    let rows = home.list(&mut home.mint());
    assert_eq!(rows.len(), 1);
    let row = rows[0].as_object().unwrap();
    let keys: Vec<&str> = row.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "description",
            "env",
            "hosts",
            "name",
            "placeholder",
            "problem",
            "secret",
            "sites",
            "source"
        ]
    );
    // No shape: the placeholder `mint run` puts in `env` is the template.
    assert_eq!(row["placeholder"], "{{mint:npm}}");
    assert_eq!(row["name"], "npm");
    assert_eq!(row["description"], "npm publish token");
    assert_eq!(row["hosts"], serde_json::json!(["registry.npmjs.org"]));
    assert_eq!(row["sites"], serde_json::json!(["header"]));
    assert_eq!(row["source"], "env:NPM_TOKEN");
    assert_eq!(row["env"], serde_json::json!(["NPM_CONFIG_TOKEN"]));
    assert!(
        home.aliases_text()
            .contains("    env: [NPM_CONFIG_TOKEN]\n"),
        "{}",
        home.aliases_text()
    );
    assert_eq!(row["secret"], "missing");
    assert!(
        row["problem"]
            .as_str()
            .unwrap()
            .contains("`NPM_TOKEN` is not set")
    );

    let rows = home.list(home.mint().env("NPM_TOKEN", "npm_canary_value"));
    assert_eq!(rows[0]["secret"], "present");
    assert!(rows[0]["problem"].is_null());

    let out = ok(home
        .mint()
        .args(["alias", "list"])
        .env("NPM_TOKEN", "npm_canary_value"));
    assert!(out.stdout.starts_with("NAME"), "{}", out.stdout);
    assert!(out.stdout.contains("present"), "{}", out.stdout);
    assert!(
        out.stdout.contains("this shell's environment"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("npm_canary_value"));

    // Without the variable the table is still printed, and the exit status says a secret cannot
    // be read (issue 23: scripts and `mint doctor`-style checks can rely on it).
    let out = run(home.mint().args(["alias", "list"]).env_remove("NPM_TOKEN"));
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.starts_with("NAME"), "{}", out.stdout);
    assert!(out.stdout.contains("missing"), "{}", out.stdout);
    assert!(
        out.stdout.ends_with(
            "error: 1 of 1 alias secret cannot be read here; `mint serve` would refuse to start\n"
        ),
        "{}",
        out.stdout
    );
    let out = run(home
        .mint()
        .args(["alias", "list", "--json"])
        .env_remove("NPM_TOKEN"));
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    assert!(serde_json::from_str::<serde_json::Value>(&out.stdout).is_ok());

    let out = ok(home.mint().args(["alias", "rm", "npm"]));
    assert!(out.stdout.contains("left as it is"), "{}", out.stdout);
    assert_eq!(home.list(&mut home.mint()).len(), 0);
    assert_eq!(mode(&home.aliases()), 0o600);
}

#[test]
fn file_source_is_checked() {
    let home = Home::new();
    let good = home.secret_file("token", "file-secret\n");
    ok(home
        .mint()
        .args(["alias", "add", "vault-token", "--host", "vault.example.com"])
        .arg(format!("--source=file:{}", good.display())));
    let rows = home.list(&mut home.mint());
    assert_eq!(rows[0]["secret"], "present");

    // Open to others: refused at add (exit 2, nothing written) and reported by list.
    let open = home.secret_file("open", "x");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = home.aliases_text();
    let out = fails(
        home.mint()
            .args(["alias", "add", "open", "--host", "a.example.com"])
            .arg(format!("--source=file:{}", open.display())),
    );
    assert!(
        out.stderr
            .contains(&format!("run `chmod 600 {}`", open.display())),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("(mode 0644)"), "{}", out.stderr);
    assert_eq!(home.aliases_text(), before);

    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o640)).unwrap();
    let rows = home.list(&mut home.mint());
    assert_eq!(rows[0]["secret"], "refused");
    assert!(rows[0]["problem"].as_str().unwrap().contains("chmod 600"));

    // Not a regular file: refused.
    let out = fails(
        home.mint()
            .args(["alias", "add", "dir", "--host", "a.example.com"])
            .arg(format!("--source=file:{}", home.cwd().display())),
    );
    assert!(
        out.stderr.contains("is not a regular file"),
        "{}",
        out.stderr
    );

    // Not there yet (a systemd credential appears when the service starts): a warning only.
    let out = ok(home
        .mint()
        .args(["alias", "add", "later", "--host", "a.example.com"])
        .arg(format!(
            "--source=file:{}",
            home.cwd().join("later").display()
        )));
    assert!(out.stdout.contains("does not exist yet"), "{}", out.stdout);
}

#[test]
fn file_source_owned_by_another_user_is_refused() {
    if mint_broker::config::secure_file::effective_uid() != 0 {
        return; // Only root can give a file away.
    }
    let home = Home::new();
    let foreign = home.secret_file("foreign", "x");
    std::os::unix::fs::chown(&foreign, Some(65_534), None).unwrap();
    let out = fails(
        home.mint()
            .args(["alias", "add", "f", "--host", "a.example.com"])
            .arg(format!("--source=file:{}", foreign.display())),
    );
    assert!(out.stderr.contains("owned by uid 65534"), "{}", out.stderr);
    assert!(out.stderr.contains("chown 0"), "{}", out.stderr);
}

#[test]
fn bad_input_exits_two_and_changes_nothing() {
    let home = Home::new();
    ok(home.mint().args([
        "alias",
        "add",
        "github",
        "--host",
        "api.github.com",
        "--source",
        "env:GH_TOKEN",
        "--env",
        "GH_TOKEN",
    ]));
    let before = home.aliases_text();
    let cases: &[(&[&str], &str)] = &[
        (
            &["GitHub", "--host", "api.github.com"],
            "invalid alias name",
        ),
        (&["-lead", "--host", "api.github.com"], ""),
        (&["gh", "--host", "*.com"], "at least two labels"),
        (&["gh", "--host", "api*.github.com"], "whole leading label"),
        (
            &["gh", "--host", "API.github.com"],
            // The canonical form is not quoted back: a host could be a pasted token (issue 24).
            "host is not in canonical form; write it lowercase",
        ),
        (&["gh", "--host", "api.github.com:443"], "invalid --host #1"),
        // `--env` (issue 16): the grammar, names `mint run` sets, one placeholder a variable.
        (
            &["gh", "--host", "api.github.com", "--env", "GH-TOKEN"],
            "invalid --env #1",
        ),
        (
            &["gh", "--host", "api.github.com", "--env", "ssl_cert_file"],
            "E056: `mint run` sets `ssl_cert_file` itself",
        ),
        (
            &["gh", "--host", "api.github.com", "--env", "GH_TOKEN"],
            "E057: `GH_TOKEN` is already set for alias `github`",
        ),
        (&["gh", "--host", "https://api.github.com"], "no scheme"),
        (
            &["gh", "--host", "api.github.com", "--host", "a..b"],
            "invalid --host #2",
        ),
        (
            &["gh", "--host", "api.github.com", "--source", "vault"],
            "invalid --source",
        ),
        (
            &[
                "gh",
                "--host",
                "api.github.com",
                "--source",
                "file:relative",
            ],
            "invalid --source",
        ),
        (
            &["gh", "--host", "api.github.com", "--source", "env:1BAD"],
            "invalid --source",
        ),
        (
            &[
                "gh",
                "--host",
                "api.github.com",
                "--source",
                "env:X",
                "--secret-stdin",
            ],
            "--secret-stdin applies to `--source keyring` only",
        ),
        (
            &[
                "github",
                "--host",
                "api.github.com",
                "--source",
                "env:OTHER",
            ],
            "alias `github` already exists",
        ),
    ];
    for (args, expected) in cases {
        let mut cmd = home.mint();
        cmd.args(["alias", "add"]).args(*args);
        let out = run(&mut cmd);
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(out.stderr.contains(expected), "{args:?}: {}", out.stderr);
        assert_eq!(home.aliases_text(), before, "{args:?} changed the file");
    }
    let long = "d".repeat(1025);
    let out = fails(home.mint().args([
        "alias",
        "add",
        "gh",
        "--host",
        "api.github.com",
        "--source",
        "env:X",
        "--description",
        &long,
    ]));
    assert!(
        out.stderr.contains("at most 1024 characters"),
        "{}",
        out.stderr
    );
    assert_eq!(home.aliases_text(), before);

    for args in [&["rm", "nope"][..], &["rm", "Bad Name"][..]] {
        let out = fails(home.mint().arg("alias").args(args));
        assert!(
            out.stderr.contains("unknown alias `nope`")
                || out.stderr.contains("invalid alias name"),
            "{}",
            out.stderr
        );
    }
    assert_eq!(home.aliases_text(), before);

    // clap's own usage errors also exit 2.
    for args in [
        &["add", "gh"][..],
        &["add"][..],
        &["add", "gh", "--host", "a.b.c", "--site", "cookie"][..],
    ] {
        let out = run(home.mint().arg("alias").args(args));
        assert_eq!(out.code, Some(2), "{args:?}");
    }
}

#[test]
fn wildcards_and_other_sites_warn() {
    let home = Home::new();
    let out = ok(home.mint().args([
        "alias",
        "add",
        "gh-raw",
        "--host",
        "*.githubusercontent.com",
        "--site",
        "header",
        "--site",
        "query",
        "--source",
        "env:T",
    ]));
    assert!(out.stdout.contains("warning: [W004]"), "{}", out.stdout);
    assert!(out.stdout.contains("warning: [W005]"), "{}", out.stdout);
    let rows = home.list(&mut home.mint());
    assert_eq!(rows[0]["sites"], serde_json::json!(["header", "query"]));
    assert_eq!(
        rows[0]["hosts"],
        serde_json::json!(["*.githubusercontent.com"])
    );
}

/// Issue 16: `--form FIELD` names a form field of the body site (and `--body` a pointer); the
/// file, `alias list` (table and JSON) show both; a bad field name exits 2 without echoing it.
#[test]
fn form_fields_are_declared_and_listed() {
    let home = Home::new();
    let out = ok(home.mint().args([
        "alias",
        "add",
        "oauth",
        "--host",
        "auth.example.com",
        "--form",
        "client_secret",
        "--form",
        "client id",
        "--body",
        "/client_secret",
        "--source",
        "env:OAUTH_SECRET",
    ]));
    assert!(out.stdout.contains("warning: [W005]"), "{}", out.stdout);
    let text = home.aliases_text();
    assert!(
        text.contains(
            r#"sites: [{body: ["/client_secret"]}, {form: ["client_secret", "client id"]}]"#
        ),
        "{text}"
    );
    let rows = home.list(&mut home.mint());
    assert_eq!(rows[0]["sites"], serde_json::json!(["body"]));
    assert_eq!(rows[0]["body"], serde_json::json!(["/client_secret"]));
    assert_eq!(
        rows[0]["form"],
        serde_json::json!(["client_secret", "client id"])
    );
    let table = listed(home.mint().args(["alias", "list"]));
    assert!(
        table
            .stdout
            .contains("body /client_secret,form client_secret client id"),
        "{}",
        table.stdout
    );
    let before = home.aliases_text();
    let out = fails(home.mint().args([
        "alias",
        "add",
        "bad",
        "--host",
        "auth.example.com",
        "--form",
        "tok-Zq8Wn3\tx",
        "--source",
        "env:X",
    ]));
    assert!(out.stderr.contains("invalid --form #1"), "{}", out.stderr);
    assert!(!out.stderr.contains("tok-Zq8Wn3"), "{}", out.stderr);
    assert_eq!(home.aliases_text(), before);
}

#[test]
fn refuses_unsafe_or_missing_alias_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = fails(mint(dir.path()).args(["alias", "list"]));
    assert!(
        out.stderr.contains("run `mint init` first"),
        "{}",
        out.stderr
    );

    let home = Home::new();
    std::fs::set_permissions(home.aliases(), std::fs::Permissions::from_mode(0o664)).unwrap();
    for args in [
        &["list"][..],
        &["add", "x", "--host", "a.example.com", "--source", "env:X"][..],
        &["rm", "x"][..],
    ] {
        let out = fails(home.mint().arg("alias").args(args));
        assert!(
            out.stderr.contains(&format!(
                "is writable by group or others, so another user could change what Mint does; \
                 run `chmod 600 {}`",
                home.aliases().display()
            )),
            "{args:?}: {}",
            out.stderr
        );
    }

    std::fs::set_permissions(home.aliases(), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(
        home.aliases(),
        "aliases:\n  - name: x\n    hosts: [\"*.com\"]\n",
    )
    .unwrap();
    let out = fails(home.mint().args(["alias", "list"]));
    assert!(
        out.stderr.contains("has 1 error; the first: "),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("error[E021]"), "{}", out.stderr);
}

#[test]
fn bad_keyring_settings_exit_two() {
    let home = Home::new();
    let out = fails(
        home.mint()
            .args(["alias", "list"])
            .env("MINT_KEYRING_BACKEND", "kwallet"),
    );
    assert!(
        out.stderr.contains("unknown keyring backend"),
        "{}",
        out.stderr
    );
    let out = fails(
        home.mint()
            .args(["alias", "list"])
            .env("MINT_KEYRING_SERVICE", "No Good"),
    );
    assert!(
        out.stderr.contains("invalid keyring service name"),
        "{}",
        out.stderr
    );
}

#[test]
fn unreachable_secret_service_changes_nothing() {
    let home = Home::new();
    let before = home.aliases_text();
    let out = fails(
        home.mint()
            .args([
                "alias",
                "add",
                "gh",
                "--host",
                "api.github.com",
                "--secret-stdin",
            ])
            .env("MINT_KEYRING_BACKEND", "secret-service")
            .env("MINT_KEYRING_SERVICE", support::unique_service())
            .env("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus")
            .write_stdin("never-stored"),
    );
    assert!(
        out.stderr.contains("the store cannot be reached"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("nothing was changed"), "{}", out.stderr);
    assert!(!out.stderr.contains("never-stored"));
    assert_eq!(home.aliases_text(), before);
}

fn keyring_round_trip(backend: KeyringBackend) {
    let Some(store) = reachable_keyring(backend) else {
        return;
    };
    let home = Home::new();
    let out = ok(home
        .mint_with(&store)
        .args([
            "alias",
            "add",
            "github",
            "--host",
            "api.github.com",
            "--description",
            "docs bot",
            "--secret-stdin",
        ])
        .write_stdin("ghp_keyring_value\n"));
    assert!(
        out.stdout.contains("Stored its secret in the keyring"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("ghp_keyring_value"));
    assert!(!out.stderr.contains("ghp_keyring_value"));
    assert!(!home.aliases_text().contains("ghp_keyring_value"));
    // Exactly one trailing newline was dropped.
    let value = store.read("github").unwrap();
    assert_eq!(value.as_secret().expose_secret(), "ghp_keyring_value");

    let rows = home.list(&mut home.mint_with(&store));
    assert_eq!(rows[0]["secret"], "present");
    assert_eq!(rows[0]["source"], "keyring");

    // The item disappears behind Mint's back: list says so, rm still works.
    store.delete("github").unwrap();
    let rows = home.list(&mut home.mint_with(&store));
    assert_eq!(rows[0]["secret"], "missing");
    assert!(
        rows[0]["problem"]
            .as_str()
            .unwrap()
            .contains("the keyring has no item for it")
    );
    let out = ok(home.mint_with(&store).args(["alias", "rm", "github"]));
    assert!(out.stdout.contains("held no secret"), "{}", out.stdout);

    // add then rm deletes the item.
    ok(home
        .mint_with(&store)
        .args([
            "alias",
            "add",
            "github",
            "--host",
            "api.github.com",
            "--secret-stdin",
        ])
        .write_stdin("second"));
    assert!(store.read("github").is_ok());
    let out = ok(home.mint_with(&store).args(["alias", "rm", "github"]));
    assert!(out.stdout.contains("Deleted its secret"), "{}", out.stdout);
    assert!(matches!(store.read("github"), Err(StoreError::Missing)));
    assert_eq!(home.list(&mut home.mint_with(&store)).len(), 0);
}

#[test]
fn keyring_secret_service_round_trip() {
    keyring_round_trip(KeyringBackend::SecretService);
}

#[test]
fn keyring_keyutils_round_trip() {
    keyring_round_trip(KeyringBackend::Keyutils);
}

fn keyring_refusals(backend: KeyringBackend) {
    let Some(store) = reachable_keyring(backend) else {
        return;
    };
    let home = Home::new();
    let before = home.aliases_text();
    for (input, expected) in [
        (&b""[..], "the secret is empty"),
        (b"\n", "the secret is empty"),
        (b"first\nsecond", "control character"),
        (b"canary\r\nX-Evil: 1", "control character"),
        (b"nul\0byte", "control character"),
        (b"\xff\xfe", "not valid UTF-8"),
    ] {
        let out = fails(
            home.mint_with(&store)
                .args([
                    "alias",
                    "add",
                    "github",
                    "--host",
                    "api.github.com",
                    "--secret-stdin",
                ])
                .write_stdin(input),
        );
        assert!(
            out.stderr
                .starts_with("mint: the secret for alias `github` is refused: "),
            "{}",
            out.stderr
        );
        assert!(out.stderr.contains(expected), "{}", out.stderr);
        assert!(!out.stderr.contains("canary"));
        assert_eq!(home.aliases_text(), before);
        assert!(matches!(store.read("github"), Err(StoreError::Missing)));
    }
    // A newline is fine where the secret never sits in a header.
    ok(home
        .mint_with(&store)
        .args([
            "alias",
            "add",
            "pem",
            "--host",
            "api.example.com",
            "--body",
            "/private_key",
        ])
        .arg("--secret-stdin")
        .write_stdin("-----BEGIN-----\nAAAA\n-----END-----\n"));
    let value = store.read("pem").unwrap();
    assert_eq!(
        value.as_secret().expose_secret(),
        "-----BEGIN-----\nAAAA\n-----END-----"
    );
    ok(home.mint_with(&store).args(["alias", "rm", "pem"]));

    // Duplicate: refused before anything is read or stored.
    ok(home
        .mint_with(&store)
        .args([
            "alias",
            "add",
            "github",
            "--host",
            "api.github.com",
            "--secret-stdin",
        ])
        .write_stdin("one"));
    let out = fails(
        home.mint_with(&store)
            .args([
                "alias",
                "add",
                "github",
                "--host",
                "api.github.com",
                "--secret-stdin",
            ])
            .write_stdin("two"),
    );
    assert!(out.stderr.contains("already exists"), "{}", out.stderr);
    assert_eq!(
        store.read("github").unwrap().as_secret().expose_secret(),
        "one"
    );
    ok(home.mint_with(&store).args(["alias", "rm", "github"]));
}

#[test]
fn keyring_secret_service_refusals() {
    keyring_refusals(KeyringBackend::SecretService);
}

#[test]
fn keyring_keyutils_refusals() {
    keyring_refusals(KeyringBackend::Keyutils);
}

#[test]
fn keyring_secret_without_a_terminal_is_refused() {
    let Some(store) = reachable_keyring(KeyringBackend::Keyutils)
        .or_else(|| reachable_keyring(KeyringBackend::SecretService))
    else {
        return;
    };
    let home = Home::new();
    let before = home.aliases_text();
    // `setsid` detaches the child from any controlling terminal, so /dev/tty cannot be opened.
    let mut cmd = Command::new("setsid");
    for var in support::ENV_VARS {
        cmd.env_remove(var);
    }
    let out = fails(
        cmd.arg(env!("CARGO_BIN_EXE_mint"))
            .args(["alias", "add", "github", "--host", "api.github.com"])
            .current_dir(home.cwd())
            .env("MINT_HOME", home.cwd().join(".mint"))
            .env("MINT_KEYRING_BACKEND", store.config().backend.as_str())
            .env("MINT_KEYRING_SERVICE", service_of(&store))
            .write_stdin("piped-but-not-asked-for")
            .timeout(Duration::from_secs(30)),
    );
    assert!(
        out.stderr
            .contains("cannot read the secret from the terminal"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("--secret-stdin"), "{}", out.stderr);
    assert_eq!(home.aliases_text(), before);
    assert!(matches!(store.read("github"), Err(StoreError::Missing)));
}

/// Types the secret into a real pseudo-terminal (`script` from util-linux) once the prompt shows,
/// and checks that the terminal never echoed it.
#[test]
fn keyring_secret_from_the_terminal_is_not_echoed() {
    let Some(store) = reachable_keyring(KeyringBackend::Keyutils)
        .or_else(|| reachable_keyring(KeyringBackend::SecretService))
    else {
        return;
    };
    let home = Home::new();
    let command = format!(
        "{} alias add github --host api.github.com",
        env!("CARGO_BIN_EXE_mint")
    );
    let mut child = std::process::Command::new("script")
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .current_dir(home.cwd())
        .env("MINT_HOME", home.cwd().join(".mint"))
        .env("MINT_KEYRING_BACKEND", store.config().backend.as_str())
        .env("MINT_KEYRING_SERVICE", service_of(&store))
        .env_remove("MINT_ALIASES_PATH")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut buffer = [0u8; 1024];
        loop {
            match stdout.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => tx.send(buffer[..n].to_vec()).unwrap(),
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut screen = Vec::new();
    while !String::from_utf8_lossy(&screen).contains("(input hidden): ") {
        assert!(
            Instant::now() < deadline,
            "no prompt: {}",
            String::from_utf8_lossy(&screen)
        );
        if let Ok(chunk) = rx.recv_timeout(Duration::from_millis(100)) {
            screen.extend(chunk);
        }
    }
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"typed-secret-value\r").unwrap();
    stdin.flush().unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "mint did not finish");
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(stdin);
    reader.join().unwrap();
    while let Ok(chunk) = rx.try_recv() {
        screen.extend(chunk);
    }
    let screen = String::from_utf8_lossy(&screen).into_owned();
    assert!(status.success(), "{screen}");
    assert!(
        screen.contains("Secret for alias `github` (input hidden): "),
        "{screen}"
    );
    assert!(screen.contains("Added alias `github`"), "{screen}");
    assert!(
        !screen.contains("typed-secret"),
        "the terminal echoed the secret: {screen}"
    );
    let value = store.read("github").unwrap();
    assert_eq!(value.as_secret().expose_secret(), "typed-secret-value");
    store.delete("github").unwrap();
}

#[test]
fn concurrent_adds_all_land() {
    let home = Home::new();
    std::thread::scope(|scope| {
        for i in 0..6 {
            let home = &home;
            scope.spawn(move || {
                ok(home
                    .mint()
                    .args(["alias", "add", &format!("a{i}"), "--host", "a.example.com"])
                    .arg(format!("--source=env:V{i}")));
            });
        }
    });
    let rows = home.list(&mut home.mint());
    assert_eq!(rows.len(), 6, "{rows:?}");
}

/// Drives `mint alias add` in a fresh pseudo-terminal of which it is the controlling terminal
/// (Python's `pty`), waits for the hidden prompt, then interrupts it (`ctrl-c` or `ctrl-backslash`
/// typed into the terminal, so the line discipline sends SIGINT or SIGQUIT; or a signal's name,
/// such as `sigterm`, sent with `kill`), and prints the terminal's settings before and after as the same terminal reports them.
const PTY_DRIVER: &str = r#"
import fcntl, os, select, signal, sys, termios, time
action, cmd = sys.argv[1], sys.argv[2:]
master, slave = os.openpty()
before = termios.tcgetattr(slave)
pid = os.fork()
if pid == 0:
    os.setsid()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    for fd in (0, 1, 2):
        os.dup2(slave, fd)
    os.execvp(cmd[0], cmd)
screen = b""
deadline = time.time() + 30
while b"(input hidden): " not in screen:
    if time.time() > deadline:
        os.kill(pid, signal.SIGKILL)
        sys.exit("no prompt: %r" % screen)
    if select.select([master], [], [], 0.1)[0]:
        screen += os.read(master, 1024)
during = termios.tcgetattr(slave)
if action == "ctrl-c":
    os.write(master, b"\x03")
elif action == "ctrl-backslash":
    os.write(master, b"\x1c")
else:
    os.kill(pid, getattr(signal, action.upper()))
status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
after = termios.tcgetattr(slave)
while select.select([master], [], [], 0.2)[0]:
    try:
        chunk = os.read(master, 1024)
    except OSError:
        break
    if not chunk:
        break
    screen += chunk
print("echo_during=%d" % bool(during[3] & termios.ECHO))
print("echo_after=%d" % bool(after[3] & termios.ECHO))
print("restored=%d" % (before == after))
print("status=%d" % status)
print("screen=%r" % screen)
"#;

/// Finding 7 of the review: Ctrl-C (or Ctrl-\, or SIGTERM) at the hidden prompt left the
/// terminal with echo off (and, with the prompt crate's raw mode, without line editing or
/// Ctrl-C). Now every setting is as before, the process ends with 128 + the signal's number,
/// and nothing was stored or declared.
#[test]
fn issue_24_a_signal_at_the_secret_prompt_restores_the_terminal() {
    let Some(store) = reachable_keyring(KeyringBackend::Keyutils)
        .or_else(|| reachable_keyring(KeyringBackend::SecretService))
    else {
        return;
    };
    let home = Home::new();
    let before = home.aliases_text();
    let driver = home.cwd().join("pty_driver.py");
    std::fs::write(&driver, PTY_DRIVER).unwrap();
    // SIGUSR1, SIGUSR2 and SIGALRM also end a process by default, and left echo off before
    // (the review of the fix).
    for (action, status) in [
        ("ctrl-c", 130),
        ("ctrl-backslash", 131),
        ("sigterm", 143),
        ("sigusr1", 138),
        ("sigusr2", 140),
        ("sigalrm", 142),
    ] {
        let out = std::process::Command::new("python3")
            .arg(&driver)
            .arg(action)
            .arg(env!("CARGO_BIN_EXE_mint"))
            .args(["alias", "add", "github", "--host", "api.github.com"])
            .current_dir(home.cwd())
            .env("MINT_HOME", home.cwd().join(".mint"))
            .env("MINT_KEYRING_BACKEND", store.config().backend.as_str())
            .env("MINT_KEYRING_SERVICE", service_of(&store))
            .env_remove("MINT_ALIASES_PATH")
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{action}: {report}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(report.contains("echo_during=0\n"), "{action}: {report}");
        assert!(
            report.contains("echo_after=1\n"),
            "{action} left echo off: {report}"
        );
        assert!(
            report.contains("restored=1\n"),
            "{action} left the terminal changed: {report}"
        );
        assert!(
            report.contains(&format!("status={status}\n")),
            "{action}: {report}"
        );
        assert!(
            report.contains("cancelled; nothing was changed"),
            "{action}: {report}"
        );
        assert_eq!(home.aliases_text(), before, "{action}");
        assert!(matches!(store.read("github"), Err(StoreError::Missing)));
    }
}

/// Every character a terminal takes as a command: C0 controls (escape, BEL, tab, line feed, a
/// carriage return), DEL, C1 controls, bidirectional overrides and isolates; and the line and
/// paragraph separators and invisible characters, which hide what a text holds.
fn is_terminal_control(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// Finding 7 of the review: `mint alias list` printed a description's escape sequences raw, so
/// an alias file could set the operator's clipboard (OSC 52), ring the bell, clear the screen or
/// reverse what is shown. Now the table shows a space for each, and `--json` escapes every one
/// (serde_json itself leaves DEL, C1 and bidirectional controls raw) while keeping the value.
#[test]
fn issue_24_alias_list_prints_no_terminal_control_from_the_file() {
    let home = Home::new();
    let description = "GitHub \u{1b}]52;c;SGVsbG8=\u{7} token \u{1b}[2J\u{9b}2J\u{202e}live\u{2066}\r\tx\ny\u{7f}z\u{2028}w\u{200b}v\u{feff}u";
    let yaml = format!(
        "aliases:\n  - name: github\n    description: {}\n    hosts: [api.github.com]\n    source: env:GH_TOKEN\n",
        serde_json::to_string(description).unwrap()
    );
    std::fs::write(home.aliases(), yaml).unwrap();
    let table = listed(home.mint().args(["alias", "list"]));
    for line in table.stdout.lines() {
        assert!(
            !line.chars().any(is_terminal_control),
            "a terminal control in {line:?}"
        );
    }
    assert!(
        table
            .stdout
            .contains("GitHub  ]52;c;SGVsbG8=  token  [2J 2J live   x y z w v u"),
        "{:?}",
        table.stdout
    );
    let json = listed(home.mint().args(["alias", "list", "--json"]));
    assert!(
        !json
            .stdout
            .chars()
            .any(|c| c != '\n' && is_terminal_control(c)),
        "a terminal control in {:?}",
        json.stdout
    );
    let rows: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(rows[0]["description"], description);
}

/// An outside review: `mint alias list` panicked ("Formatting argument out of range") on an
/// alias with 150,000 hosts, whose cell is wider than `format!` pads (65,535). Now the table is
/// printed whatever a cell's width.
#[test]
fn issue_24_alias_list_prints_a_host_list_of_any_length() {
    let home = Home::new();
    let mut yaml =
        String::from("aliases:\n  - name: wide\n    source: env:WIDE_TOKEN\n    hosts:\n");
    for n in 0..20_000 {
        yaml.push_str(&format!("      - h{n}.example.com\n"));
    }
    yaml.push_str("  - name: next\n    source: env:NEXT_TOKEN\n    hosts: [api.example.com]\n");
    std::fs::write(home.aliases(), yaml).unwrap();
    let table = listed(home.mint().args(["alias", "list"]));
    // The table, then notes on the secrets' sources.
    let lines: Vec<&str> = table
        .stdout
        .lines()
        .take_while(|line| !line.is_empty() && !line.starts_with("note:"))
        .collect();
    assert_eq!(
        lines.len(),
        3,
        "{}",
        &table.stdout[..200.min(table.stdout.len())]
    );
    assert!(lines[1].starts_with("wide ") && lines[1].contains("h19999.example.com"));
    assert!(
        lines[2].starts_with("next "),
        "{}",
        &lines[2][..80.min(lines[2].len())]
    );
}

/// Issue 23: `mint alias edit` changes a declaration in place, each part given replacing that
/// part; every refusal changes nothing.
#[test]
fn edit_changes_the_parts_given_and_refuses_without_change() {
    let home = Home::new();
    ok(home.mint().args([
        "alias",
        "add",
        "npm",
        "--host",
        "registry.npmjs.org",
        "--source",
        "env:NPM_TOKEN",
        "--description",
        "npm token",
        "--env",
        "NPM_CONFIG_TOKEN",
    ]));
    let out = ok(home.mint().args([
        "alias",
        "edit",
        "npm",
        "--host",
        "registry.example.org",
        "--host",
        "*.npm.example.org",
        "--form",
        "token",
        "--description",
        "",
    ]));
    assert!(
        out.stdout.starts_with("Changed alias `npm` in "),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(
            "hosts registry.example.org, *.npm.example.org; sites form token; source \
             env:NPM_TOKEN; env NPM_CONFIG_TOKEN (set by `mint run`)."
        ),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("on SIGHUP"), "{}", out.stdout);
    let rows = home.list(&mut home.mint());
    assert_eq!(
        rows[0]["hosts"],
        serde_json::json!(["registry.example.org", "*.npm.example.org"])
    );
    assert_eq!(rows[0]["sites"], serde_json::json!(["body"]));
    assert_eq!(rows[0]["form"], serde_json::json!(["token"]));
    assert!(rows[0]["description"].is_null());
    assert_eq!(rows[0]["env"], serde_json::json!(["NPM_CONFIG_TOKEN"]));

    // A file source (checked as `add` checks it), and the env names cleared.
    let token = home.secret_file("npm-token", "npm_edit_canary\n");
    let out = ok(home
        .mint()
        .args(["alias", "edit", "npm", "--no-env", "--source"])
        .arg(format!("file:{}", token.display())));
    assert!(!out.stdout.contains("npm_edit_canary"));
    let rows = home.list(&mut home.mint());
    assert_eq!(rows[0]["secret"], "present");
    assert_eq!(rows[0]["env"], serde_json::json!([]));

    // A value-shaped placeholder added, its value shown and listed; then removed.
    let out = ok(home
        .mint()
        .args(["alias", "edit", "npm", "--placeholder", "npm_:40"]));
    let rows = home.list(&mut home.mint());
    let shaped = rows[0]["placeholder"].as_str().unwrap().to_owned();
    assert!(shaped.starts_with("npm_") && shaped.len() == 40, "{shaped}");
    assert!(out.stdout.contains(&shaped), "{}", out.stdout);
    ok(home
        .mint()
        .args(["alias", "edit", "npm", "--no-placeholder"]));
    let rows = home.list(&mut home.mint());
    assert_eq!(rows[0]["placeholder"], "{{mint:npm}}");

    // Refusals: nothing changes.
    let before = home.aliases_text();
    for (args, message) in [
        (&["edit", "npm"][..], "nothing to change"),
        (
            &["edit", "nope", "--host", "a.example"],
            "unknown alias `nope`",
        ),
        (&["edit", "npm", "--host", "bad host"], "invalid --host #1"),
        (
            &["edit", "npm", "--source", "secret-value"],
            "invalid --source",
        ),
        (
            &["edit", "npm", "--placeholder", "sk-:20"],
            "invalid --placeholder",
        ),
        (
            &["edit", "npm", "--description", "x", "--secret-stdin"],
            "--secret-stdin applies when `--source keyring` moves",
        ),
        (
            &["set-secret", "npm", "--secret-stdin"],
            "reads its secret from `file:",
        ),
        (&["set-secret", "nope", "--secret-stdin"], "unknown alias"),
    ] {
        let out = fails(
            home.mint()
                .arg("alias")
                .args(args)
                .write_stdin("ignored_canary"),
        );
        assert!(out.stderr.contains(message), "{args:?}: {}", out.stderr);
        assert!(!out.stderr.contains("canary"), "{}", out.stderr);
        assert_eq!(home.aliases_text(), before, "{args:?}");
    }
    // An env name another alias declares: the loader's E057, nothing changed.
    ok(home.mint().args([
        "alias",
        "add",
        "gh",
        "--host",
        "api.github.com",
        "--source",
        "env:GH_TOKEN",
        "--env",
        "GITHUB_TOKEN",
    ]));
    let before = home.aliases_text();
    let out = fails(
        home.mint()
            .args(["alias", "edit", "npm", "--env", "GITHUB_TOKEN"]),
    );
    assert!(out.stderr.contains("E057"), "{}", out.stderr);
    assert_eq!(home.aliases_text(), before);
}

/// Issue 23: `set-secret` replaces a keyring secret in place; `edit --source` moves an alias into
/// the keyring (storing the secret it reads) and out of it (deleting the item).
fn keyring_edits(backend: KeyringBackend) {
    let Some(store) = reachable_keyring(backend) else {
        return;
    };
    let home = Home::new();
    let add = [
        "alias",
        "add",
        "github",
        "--host",
        "api.github.com",
        "--secret-stdin",
    ];
    ok(home
        .mint_with(&store)
        .args(add)
        .write_stdin("ghp_first_canary\n"));
    let before = home.aliases_text();
    let out = ok(home
        .mint_with(&store)
        .args(["alias", "set-secret", "github", "--secret-stdin"])
        .write_stdin("ghp_second_canary\n"));
    assert!(
        out.stdout
            .starts_with("Replaced the secret of alias `github` in the "),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("canary") && !out.stderr.contains("canary"));
    assert_eq!(home.aliases_text(), before);
    let value = store.read("github").unwrap();
    assert_eq!(value.as_secret().expose_secret(), "ghp_second_canary");

    // A refused value changes nothing.
    let out = fails(
        home.mint_with(&store)
            .args(["alias", "set-secret", "github", "--secret-stdin"])
            .write_stdin("two\nlines_canary"),
    );
    assert!(out.stderr.contains("control character"), "{}", out.stderr);
    assert!(!out.stderr.contains("canary"));
    let value = store.read("github").unwrap();
    assert_eq!(value.as_secret().expose_secret(), "ghp_second_canary");

    // Off the keyring: the item is deleted once the file names the new source.
    let out =
        ok(home
            .mint_with(&store)
            .args(["alias", "edit", "github", "--source", "env:GH_TOKEN"]));
    assert!(
        out.stdout.contains("Deleted its old secret from the "),
        "{}",
        out.stdout
    );
    assert!(matches!(store.read("github"), Err(StoreError::Missing)));
    assert!(home.aliases_text().contains("env:GH_TOKEN"));

    // Into the keyring: the secret is read and stored.
    let out = ok(home
        .mint_with(&store)
        .args([
            "alias",
            "edit",
            "github",
            "--source",
            "keyring",
            "--secret-stdin",
        ])
        .write_stdin("ghp_third_canary"));
    assert!(
        out.stdout.contains("Stored its secret in the "),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("canary"));
    let value = store.read("github").unwrap();
    assert_eq!(value.as_secret().expose_secret(), "ghp_third_canary");
    let rows = home.list(&mut home.mint_with(&store));
    assert_eq!(rows[0]["source"], "keyring");
    assert_eq!(rows[0]["secret"], "present");
    assert!(!home.aliases_text().contains("canary"));
    ok(home.mint_with(&store).args(["alias", "rm", "github"]));
    assert!(matches!(store.read("github"), Err(StoreError::Missing)));
}

#[test]
fn keyring_secret_service_edits() {
    keyring_edits(KeyringBackend::SecretService);
}

#[test]
fn keyring_keyutils_edits() {
    keyring_edits(KeyringBackend::Keyutils);
}
