//! `mint cap issue|list|revoke` through the real binary: the token's shape and that it is printed
//! once and stored only as a hash, the list in both formats, revocation seen by a running
//! `CapabilityStore` within a second, every refusal (exit 2, file unchanged), and concurrent
//! issuing.

#![expect(clippy::unwrap_used, reason = "test code")]

#[path = "support/mint.rs"]
mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use assert_cmd::Command;
use mint_broker::capability::{CapabilityRejected, CapabilityStore};
use sha2::{Digest, Sha256};
use support::{fails, init, mint, mode, ok, run};

struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        let dir = tempfile::tempdir().unwrap();
        init(dir.path());
        Home { dir }
    }

    fn mint(&self) -> Command {
        mint(self.dir.path())
    }

    fn caps(&self) -> PathBuf {
        self.dir.path().join(".mint/capabilities.yaml")
    }

    fn caps_text(&self) -> String {
        std::fs::read_to_string(self.caps()).unwrap()
    }

    /// Issues a capability; returns the token and the stderr note.
    fn issue(&self, args: &[&str]) -> (String, String) {
        let out = ok(self.mint().args(["cap", "issue"]).args(args));
        assert_eq!(out.stdout.lines().count(), 1, "{}", out.stdout);
        (out.stdout.trim_end().to_owned(), out.stderr)
    }

    fn list(&self) -> Vec<serde_json::Value> {
        let out = ok(self.mint().args(["cap", "list", "--json"]));
        serde_json::from_str::<serde_json::Value>(&out.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }
}

fn id_of(token: &str) -> &str {
    token["mint_cap_".len()..].split_once('_').unwrap().0
}

#[track_caller]
fn assert_token_shape(token: &str) {
    let rest = token.strip_prefix("mint_cap_").unwrap();
    let (id, secret) = rest.split_once('_').unwrap();
    assert_eq!(id.len(), 12, "{token}");
    assert_eq!(secret.len(), 64, "{token}");
    let hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    assert!(hex(id) && hex(secret), "{token}");
}

#[test]
fn issue_prints_the_token_once_and_stores_its_hash() {
    let home = Home::new();
    let (token, note) = home.issue(&["--agent", "mino"]);
    assert_token_shape(&token);
    let id = id_of(&token);
    assert!(
        note.contains(&format!("Issued capability {id} for agent `mino`")),
        "{note}"
    );
    assert!(note.contains("shown once"), "{note}");
    assert!(!note.contains(&token));

    let text = home.caps_text();
    assert_eq!(mode(&home.caps()), 0o600);
    let secret = token.rsplit('_').next().unwrap();
    assert!(!text.contains(secret), "{text}");
    let digest: String = Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(text.contains(&format!("token_sha256: {digest}")), "{text}");

    let rows = home.list();
    assert_eq!(rows.len(), 1);
    let row = rows[0].as_object().unwrap();
    let keys: Vec<&str> = row.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "agent", "aliases", "created", "expires", "id", "revoked", "status"
        ]
    );
    assert_eq!(row["status"], "active");
    assert_eq!(row["id"], id);
    assert_eq!(row["agent"], "mino");
    // Every alias, written as the table writes it.
    assert_eq!(row["aliases"], serde_json::json!(["*"]));
    assert_eq!(row["revoked"], false);
    let created = humantime::parse_rfc3339(row["created"].as_str().unwrap()).unwrap();
    let expires = humantime::parse_rfc3339(row["expires"].as_str().unwrap()).unwrap();
    assert_eq!(
        expires.duration_since(created).unwrap(),
        Duration::from_secs(86_400)
    );
    let age = SystemTime::now().duration_since(created).unwrap();
    assert!(age < Duration::from_secs(60), "{age:?}");

    let out = ok(home.mint().args(["cap", "list"]));
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("ID"), "{}", out.stdout);
    assert!(
        lines[1].starts_with(id) && lines[1].ends_with("active"),
        "{}",
        out.stdout
    );
    for output in [&out.stdout, &out.stderr] {
        assert!(!output.contains(secret));
        assert!(!output.contains(&digest));
    }
}

#[test]
fn ttl_and_alias_narrowing() {
    let home = Home::new();
    ok(home.mint().args([
        "alias",
        "add",
        "github",
        "--host",
        "api.github.com",
        "--source",
        "env:GH",
    ]));
    ok(home.mint().args([
        "alias",
        "add",
        "npm",
        "--host",
        "registry.npmjs.org",
        "--source",
        "env:NPM",
    ]));
    let (token, note) = home.issue(&[
        "--agent",
        "ci.runner_7",
        "--ttl",
        "90m",
        "--alias",
        "npm",
        "--alias",
        "github",
        "--alias",
        "npm",
    ]);
    assert!(note.contains("aliases: github,npm"), "{note}");
    let rows = home.list();
    assert_eq!(rows[0]["aliases"], serde_json::json!(["github", "npm"]));
    let created = humantime::parse_rfc3339(rows[0]["created"].as_str().unwrap()).unwrap();
    let expires = humantime::parse_rfc3339(rows[0]["expires"].as_str().unwrap()).unwrap();
    assert_eq!(
        expires.duration_since(created).unwrap(),
        Duration::from_secs(5400)
    );

    let store = CapabilityStore::open(&home.caps()).unwrap();
    let grant = store.verify(&token, SystemTime::now()).unwrap();
    assert_eq!(grant.agent.as_str(), "ci.runner_7");
    assert!(grant.allows_alias("npm") && !grant.allows_alias("slack"));
    assert_eq!(
        store.verify(&token, expires + Duration::from_secs(1)),
        Err(CapabilityRejected)
    );
    assert!(
        store
            .verify(&token, expires - Duration::from_secs(1))
            .is_ok()
    );
}

#[test]
fn a_running_store_sees_issue_and_revoke_within_a_second() {
    let home = Home::new();
    let store = CapabilityStore::open(&home.caps()).unwrap();
    let (token, _) = home.issue(&["--agent", "mino"]);
    let wait_for = |accepted: bool| {
        let start = Instant::now();
        loop {
            if store.verify(&token, SystemTime::now()).is_ok() == accepted {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < Duration::from_secs(1),
                "not seen within a second"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for(true);
    let out = ok(home.mint().args(["cap", "revoke", id_of(&token)]));
    assert!(out.stdout.contains("Revoked capability"), "{}", out.stdout);
    wait_for(false);

    let rows = home.list();
    assert_eq!(rows[0]["revoked"], true);
    assert_eq!(rows[0]["status"], "revoked");
    let out = ok(home.mint().args(["cap", "list", "--all"]));
    assert!(
        out.stdout.lines().nth(1).unwrap().ends_with("revoked"),
        "{}",
        out.stdout
    );
    let out = ok(home.mint().args(["cap", "revoke", id_of(&token)]));
    assert!(out.stdout.contains("already revoked"), "{}", out.stdout);
    assert_eq!(mode(&home.caps()), 0o600);
}

#[test]
fn bad_input_exits_two_and_changes_nothing() {
    let home = Home::new();
    let (token, _) = home.issue(&["--agent", "mino"]);
    let before = home.caps_text();
    let long_agent = "a".repeat(65);
    let cases: &[(&[&str], &str)] = &[
        (&["issue", "--agent", "mi no"], "invalid agent name"),
        (&["issue", "--agent", ""], "invalid agent name"),
        (&["issue", "--agent", &long_agent], "invalid agent name"),
        (
            &["issue", "--agent", "mino", "--ttl", "0s"],
            "invalid TTL `0s`",
        ),
        (
            &["issue", "--agent", "mino", "--ttl", "1y"],
            "invalid TTL `1y`",
        ),
        (&["issue", "--agent", "mino", "--ttl", "367d"], "up to 366d"),
        (
            &["issue", "--agent", "mino", "--ttl", "24"],
            "such as `30s`, `1h` or `1w`",
        ),
        (
            &["issue", "--agent", "mino", "--alias", "GitHub"],
            "invalid --alias",
        ),
        (
            &["issue", "--agent", "mino", "--alias", "nope"],
            "unknown alias `nope`",
        ),
        (
            &["revoke", "000000000000"],
            "unknown capability `000000000000`",
        ),
        (&["revoke", "not an id"], "invalid capability id"),
        (&["revoke", &token], "not the token"),
    ];
    for (args, expected) in cases {
        let out = fails(home.mint().arg("cap").args(*args));
        assert!(out.stderr.contains(expected), "{args:?}: {}", out.stderr);
        assert!(
            !out.stderr.contains(&token[20..]),
            "token echoed: {}",
            out.stderr
        );
        assert_eq!(home.caps_text(), before, "{args:?} changed the file");
    }
    for args in [&["issue"][..], &["revoke"][..], &["issue", "--agent"][..]] {
        let out = run(home.mint().arg("cap").args(args));
        assert_eq!(out.code, Some(2), "{args:?}");
        assert_eq!(home.caps_text(), before);
    }
}

#[test]
fn refuses_unsafe_missing_or_broken_files() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["list"][..],
        &["issue", "--agent", "mino"][..],
        &["revoke", "abc"][..],
    ] {
        let out = fails(mint(dir.path()).arg("cap").args(args));
        assert!(
            out.stderr.contains("run `mint init` first"),
            "{args:?}: {}",
            out.stderr
        );
    }

    let home = Home::new();
    std::fs::set_permissions(home.caps(), std::fs::Permissions::from_mode(0o622)).unwrap();
    for args in [&["list"][..], &["issue", "--agent", "mino"][..]] {
        let out = fails(home.mint().arg("cap").args(args));
        assert!(
            out.stderr
                .contains(&format!("run `chmod 600 {}`", home.caps().display())),
            "{}",
            out.stderr
        );
    }
    std::fs::set_permissions(home.caps(), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(
        home.caps(),
        "version: 1\ncapabilities:\n- id: x\n  token: mint_cap_leak\n",
    )
    .unwrap();
    let out = fails(home.mint().args(["cap", "list"]));
    assert!(out.stderr.contains("capabilities.yaml`:"), "{}", out.stderr);
    assert!(!out.stderr.contains("mint_cap_leak"), "{}", out.stderr);
}

#[test]
fn capabilities_path_can_move() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("elsewhere.yaml");
    ok(mint(dir.path())
        .arg("init")
        .env("MINT_CAPABILITIES_PATH", &file));
    let out = ok(mint(dir.path())
        .args(["cap", "issue", "--agent", "mino"])
        .env("MINT_CAPABILITIES_PATH", &file));
    assert_token_shape(out.stdout.trim_end());
    assert_eq!(mode(&file), 0o600);
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains("agent: mino")
    );
    assert!(
        !std::fs::read_to_string(dir.path().join(".mint/capabilities.yaml"))
            .map(|t| t.contains("mino"))
            .unwrap_or(false)
    );
}

#[test]
fn concurrent_issues_all_land() {
    let home = Home::new();
    let tokens: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let home = &home;
                scope.spawn(move || home.issue(&["--agent", &format!("agent-{i}")]).0)
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(home.list().len(), 8);
    let store = CapabilityStore::open(&home.caps()).unwrap();
    for token in &tokens {
        assert!(store.verify(token, SystemTime::now()).is_ok());
    }
    let leftovers: Vec<_> = std::fs::read_dir(home.caps().parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn issue_14_log_lines_to_a_pipe_carry_no_colour_codes() {
    // Logs are for files and pipes as often as for terminals: escape codes there are noise (and
    // a log pipeline stores them). assert_cmd gives the child a pipe for stderr.
    let home = Home::new();
    let out = ok(home
        .mint()
        .env("RUST_LOG", "mint_broker=debug")
        .args(["cap", "issue", "--agent", "mino"]));
    assert!(out.stderr.contains("Capability issued"), "{}", out.stderr);
    assert!(!out.stderr.contains('\u{1b}'), "{:?}", out.stderr);
}

/// Issue 23: log lines carry colour only on a terminal, and not even there with `NO_COLOR` set
/// (it once lost to the explicit colour switch). Stderr redirected to a file gets plain text.
/// The terminal is a pseudo-terminal from util-linux `script`; without it that part is skipped.
#[test]
fn issue_23_no_colour_in_a_file_nor_on_a_terminal_with_no_color() {
    let home = Home::new();
    let log = home.dir.path().join("stderr.log");
    let file = std::fs::File::create(&log).unwrap();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_mint"))
        .env("MINT_HOME", home.dir.path().join(".mint"))
        .env("RUST_LOG", "mint_broker=debug")
        .env_remove("NO_COLOR")
        .args(["cap", "issue", "--agent", "mino"])
        .stdout(std::process::Stdio::null())
        .stderr(file)
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("Capability issued"), "{text}");
    assert!(!text.contains("\u{1b}["), "{text:?}");

    let on_terminal = |no_color: Option<&str>| -> Option<String> {
        let script = ["/usr/bin/script", "/bin/script"]
            .into_iter()
            .find(|path| std::path::Path::new(path).is_file())?;
        let command = format!(
            "{} cap issue --agent mino >/dev/null",
            env!("CARGO_BIN_EXE_mint")
        );
        let mut run = std::process::Command::new(script);
        run.args(["-qec", &command, "/dev/null"])
            .env("MINT_HOME", home.dir.path().join(".mint"))
            .env("RUST_LOG", "mint_broker=debug")
            .env_remove("NO_COLOR")
            .stdin(std::process::Stdio::null());
        if let Some(value) = no_color {
            run.env("NO_COLOR", value);
        }
        let output = run.output().unwrap();
        assert!(output.status.success(), "{output:?}");
        Some(String::from_utf8_lossy(&output.stdout).into_owned())
    };
    if let Some(coloured) = on_terminal(None) {
        assert!(coloured.contains("Capability issued"), "{coloured:?}");
        assert!(
            coloured.contains("\u{1b}["),
            "a terminal gets colour: {coloured:?}"
        );
        let plain = on_terminal(Some("1")).unwrap();
        assert!(plain.contains("Capability issued"), "{plain:?}");
        assert!(!plain.contains("\u{1b}["), "NO_COLOR=1: {plain:?}");
        let empty = on_terminal(Some("")).unwrap();
        assert!(
            empty.contains("\u{1b}["),
            "an empty NO_COLOR is unset: {empty:?}"
        );
    }
}

/// Issue 23: the table shows active capabilities only and says how many it leaves out; `--all`
/// shows every one; `--json` is the whole file, each entry with its `status`.
#[test]
fn issue_23_list_hides_expired_and_revoked_unless_all() {
    let home = Home::new();
    let (active, _) = home.issue(&["--agent", "live"]);
    let (revoked, _) = home.issue(&["--agent", "gone"]);
    let (expired, _) = home.issue(&["--agent", "old", "--ttl", "1s"]);
    ok(home.mint().args(["cap", "revoke", id_of(&revoked)]));
    std::thread::sleep(Duration::from_millis(2100));

    let out = ok(home.mint().args(["cap", "list"]));
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    assert!(lines[1].starts_with(id_of(&active)), "{}", out.stdout);
    assert_eq!(
        lines[2],
        "2 expired or revoked capabilities not shown; `mint cap list --all` shows them."
    );

    let out = ok(home.mint().args(["cap", "list", "--all"]));
    let statuses: Vec<&str> = out
        .stdout
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().last().unwrap())
        .collect();
    assert_eq!(statuses, ["active", "revoked", "expired"], "{}", out.stdout);

    let rows = home.list();
    let statuses: Vec<(&str, &str)> = rows
        .iter()
        .map(|row| (row["id"].as_str().unwrap(), row["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        statuses,
        [
            (id_of(&active), "active"),
            (id_of(&revoked), "revoked"),
            (id_of(&expired), "expired")
        ]
    );

    ok(home.mint().args(["cap", "revoke", id_of(&active)]));
    let out = ok(home.mint().args(["cap", "list"]));
    assert_eq!(
        out.stdout,
        "No active capabilities. 3 expired or revoked capabilities not shown; `mint cap list --all` shows them.\n"
    );
    for token in [&active, &revoked, &expired] {
        assert!(!out.stdout.contains(token.as_str()));
    }
}

/// Issue 23: one duration grammar everywhere: `--ttl 1w` is accepted as `per: 1w` and
/// `--connect-timeout 1w` are, and one refused value gets the same hint from every flag.
#[test]
fn issue_23_one_duration_grammar_for_every_flag() {
    let home = Home::new();
    let (token, _) = home.issue(&["--agent", "mino", "--ttl", "1w"]);
    let row = home
        .list()
        .into_iter()
        .find(|row| row["id"] == id_of(&token))
        .unwrap();
    let created = humantime::parse_rfc3339(row["created"].as_str().unwrap()).unwrap();
    let expires = humantime::parse_rfc3339(row["expires"].as_str().unwrap()).unwrap();
    assert_eq!(
        expires.duration_since(created).unwrap(),
        Duration::from_secs(7 * 86_400)
    );
    // The same refusal from `--ttl` and from a `mint serve` timeout.
    let hint =
        "a whole number with a unit ms, s, m, h, d or w, up to 366d, such as `30s`, `1h` or `1w`";
    let ttl = fails(
        home.mint()
            .args(["cap", "issue", "--agent", "mino", "--ttl", "90min"]),
    );
    assert!(ttl.stderr.contains(hint), "{}", ttl.stderr);
    let serve = run(home.mint().args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--connect-timeout",
        "90min",
    ]));
    assert_eq!(serve.code, Some(2), "{}", serve.stderr);
    assert!(
        serve.stderr.contains("invalid duration `90min`"),
        "{}",
        serve.stderr
    );
    assert!(serve.stderr.contains(hint), "{}", serve.stderr);
    let millis = fails(
        home.mint()
            .args(["cap", "issue", "--agent", "mino", "--ttl", "1500ms"]),
    );
    assert!(
        millis.stderr.contains("in whole seconds"),
        "{}",
        millis.stderr
    );
    let size = run(home.mint().args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--max-request-body",
        "10 MiB",
    ]));
    assert_eq!(size.code, Some(2), "{}", size.stderr);
    assert!(
        size.stderr.contains("invalid size `10 MiB`"),
        "{}",
        size.stderr
    );
}
