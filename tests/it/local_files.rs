//! Issue 24: Mint's local files against another local user and against half-written files, with
//! the real `mint` binary.
//!
//! Finding 1: a policy reached through a symbolic link into a directory others may write, and a
//! `MINT_HOME` whose parent others may write, are refused by `mint init`, at `mint serve` start and
//! by a reload (the last good policy stays, and the log and the audit trail say why). Finding 5: a
//! policy rewritten in place in several pieces, with pauses and a SIGHUP between them, never
//! decides a request by a prefix. Finding 6: `mint cap revoke` is never blocked by a lock another
//! process holds: it ignores the directory lock of old, refuses a shared directory at once, waits a
//! bounded time for its own lock and then says the capability is still accepted; after a revoke
//! that succeeded, the running broker refuses the capability. A canary secret throughout, never in
//! what the agent sees, the audit log or Mint's stderr.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use mint_tests::broker::{Broker, MintHome, capability_id, curl, mint_bin};
use mint_tests::echo_peer;
use mint_tests::echo_upstream::EchoConfig;
use mint_tests::lab::{self, LabConfig};

const CANARY: &str = "canary-files-Qm4Zt8Wc2Lp6Vx9R";

const ALIASES: &str =
    "aliases:\n  - name: echo\n    hosts: [127.0.0.1]\n    source: file:$SECRETS/echo\n";

/// A policy allowing `methods` on `/echo/**` of the echo upstream with the alias, plus `extra`
/// rules.
fn policy(port: u16, methods: &str, extra: &str) -> String {
    lab::policy(&format!(
        "  - id: echo-read\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [{methods}]\n      path: [\"/echo/**\"]\n{extra}"
    ))
}

/// The shared lab with [`policy`]'s rule for `GET`, alias `echo` and the canary.
fn echo_lab() -> lab::Lab {
    let config = LabConfig {
        aliases: ALIASES,
        secrets: &[("echo", CANARY)],
        ..LabConfig::default()
    };
    lab::Lab::start(config, |port| {
        lab::allow(
            "echo-read",
            "echo",
            port,
            "GET",
            "      path: [\"/echo/**\"]\n",
        )
    })
}

/// A rule denying `/echo/probe` on the echo peer's port, to append to [`policy`]'s rules.
fn no_probe_rule(port: u16) -> String {
    format!(
        "  - id: no-probe\n    effect: deny\n    match:\n      host: [127.0.0.1]\n      port: [{port}]\n      path: [\"/echo/probe\"]\n"
    )
}

/// Sends `method` to `/echo/NAME` with the alias in a header; returns the status and the body.
fn send(broker: &Broker, cap: &str, port: u16, method: &str, name: &str) -> (u16, String) {
    let response = curl(&[
        "-X",
        method,
        "-H",
        &format!("Mint-Capability: {cap}"),
        "-H",
        "Authorization: Bearer {{mint:echo}}",
        &broker.proxy_url(port, &format!("/echo/{name}")),
    ]);
    let everything = response.everything();
    assert!(
        !everything.contains(CANARY),
        "the agent saw the secret: {everything}"
    );
    (response.status, everything)
}

fn count_events(broker: &Broker, reason: &str) -> usize {
    broker
        .audit_records()
        .iter()
        .filter(|r| r["phase"] == "event" && r["reason"] == reason)
        .count()
}

/// Waits (bounded: a hang guard, not a timing assertion) until the audit log holds `n` events
/// with `reason`; returns whether it did.
fn wait_for_events(broker: &Broker, reason: &str, n: usize, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    loop {
        if count_events(broker, reason) >= n {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn assert_no_canary(broker: &Broker) {
    broker.assert_secret_absent(CANARY);
}

fn hangup(broker: &Broker) {
    broker.hangup();
}

/// Whether this test may run: it needs root (to act as a second user, or to own files as one).
/// Skips with a note otherwise, except under CI, where it must run.
fn running_as_root(what: &str) -> bool {
    if effective_uid() == 0 {
        return true;
    }
    assert!(
        !std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0"),
        "{what} needs root (a second uid), and CI must run it"
    );
    let _ = writeln!(std::io::stderr(), "skipped: {what} needs root");
    false
}

fn effective_uid() -> u32 {
    let out = Command::new("id").arg("-u").output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A directory under `parent` with `mode`.
fn subdir(parent: &Path, name: &str, mode: u32) -> PathBuf {
    let path = parent.join(name);
    std::fs::create_dir(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

fn write_file(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Replaces `link` by a symbolic link to `target` in one rename (no moment without a file).
fn swap_in_link(link: &Path, target: &Path) {
    let temp = link.with_extension("link-new");
    std::os::unix::fs::symlink(target, &temp).unwrap();
    std::fs::rename(&temp, link).unwrap();
}

/// Runs a `mint serve` that must refuse to start; fails the test if it is still running after a
/// bound (it started serving).
#[track_caller]
fn serve_must_fail(command: Command) -> Output {
    run_bounded(command, Duration::from_secs(20))
        .unwrap_or_else(|| panic!("mint serve started instead of refusing"))
}

fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

// ---------------------------------------------------------------------------------------------
// Finding 1: the directory a file really lives in, and the directories above it
// ---------------------------------------------------------------------------------------------

#[test]
fn issue_24_serve_refuses_a_policy_linked_into_a_directory_others_may_write() {
    let dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(dir.path(), EchoConfig::default());
    let port = peer.server.port();
    let home = MintHome::new(&policy(port, "GET", ""), ALIASES, &[("echo", CANARY)]);
    // The operator keeps the policy elsewhere and links it; that directory is open to everyone,
    // so another user could rename a policy of theirs over the file at any time.
    let open = subdir(dir.path(), "shared", 0o777);
    let target = open.join("policy.yaml");
    write_file(&target, &policy(port, "GET, POST", ""), 0o600);
    swap_in_link(&home.path().join("policy.yaml"), &target);

    let output = serve_must_fail({
        let mut c = home.mint();
        c.args(["serve", "--listen", "127.0.0.1:0", "--upstream-ca"])
            .arg(&peer.ca_file);
        c
    });
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(output.stdout.is_empty(), "it listened");
    assert!(
        stderr.contains(&format!(
            "`{}` is writable by group or others (mode 0777)",
            open.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("run `chmod go-w {}`", open.display())),
        "{stderr}"
    );
    assert!(!stderr.contains(CANARY), "{stderr}");

    // The same link into a private directory is followed.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cap = home.issue_capability("mino", &[]);
    let broker = home.serve(&peer.ca_file, &[]);
    assert_eq!(send(&broker, &cap, port, "POST", "x").0, 200);
    assert_no_canary(&broker);
}

#[test]
fn issue_24_a_reload_refuses_a_policy_swapped_for_a_link_into_an_open_directory() {
    // Bindings drop in reverse order: the broker stops first, its home and directory go last.
    let lab::Lab {
        dir,
        peer,
        home,
        cap,
        broker,
        ..
    } = echo_lab();
    let port = peer.server.port();
    assert_eq!(send(&broker, &cap, port, "GET", "x").0, 200);
    assert_eq!(send(&broker, &cap, port, "POST", "x").0, 403);

    // A policy that allows more, in a directory anyone may write, put in place by a link.
    let open = subdir(dir.path(), "shared", 0o777);
    let target = open.join("policy.yaml");
    write_file(&target, &policy(port, "GET, POST", ""), 0o600);
    swap_in_link(&home.path().join("policy.yaml"), &target);
    assert!(
        wait_for_events(&broker, "policy_reload_failed", 1, Duration::from_secs(20)),
        "the reload was not refused"
    );
    hangup(&broker);
    assert!(
        wait_for_events(&broker, "policy_reload_failed", 2, Duration::from_secs(20)),
        "the SIGHUP reload was not refused"
    );
    // The last good policy stays in force.
    assert_eq!(send(&broker, &cap, port, "POST", "x").0, 403);
    assert_eq!(send(&broker, &cap, port, "GET", "x").0, 200);
    assert_eq!(count_events(&broker, "policy_reloaded"), 0);
    let stderr = broker.stderr();
    assert!(
        stderr.contains(&format!(
            "`{}` is writable by group or others",
            open.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("the last good policy"), "{stderr}");
    assert_no_canary(&broker);
}

/// Runs the real `mint` with `MINT_HOME=home` and nothing else of Mint's inherited.
fn mint_at(home: &Path) -> Command {
    let mut command = Command::new(mint_bin());
    for (key, _) in std::env::vars() {
        if key.starts_with("MINT_") {
            command.env_remove(key);
        }
    }
    command
        .env("MINT_HOME", home)
        .env("MINT_KEYRING_BACKEND", "keyutils")
        .stdin(Stdio::null());
    command
}

#[test]
fn issue_24_init_and_serve_refuse_a_home_whose_parent_others_may_write() {
    let dir = tempfile::tempdir().unwrap();
    let parent = subdir(dir.path(), "parent", 0o777);
    let home = parent.join("mint");

    let output = mint_at(&home).arg("init").output().unwrap();
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "`{}` is writable by group or others (mode 0777)",
            parent.display()
        )),
        "{stderr}"
    );
    assert!(!home.exists(), "mint init created the home anyway");

    // Made private, the parent is accepted; opened again later, `mint serve` refuses to start and
    // creates nothing (the audit log included) in a directory another user could swap.
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let output = mint_at(&home).arg("init").output().unwrap();
    assert!(output.status.success(), "{}", stderr_of(&output));
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o777)).unwrap();
    let output = serve_must_fail({
        let mut c = mint_at(&home);
        c.args(["serve", "--listen", "127.0.0.1:0"]);
        c
    });
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(output.stdout.is_empty(), "it listened");
    assert!(
        stderr.contains(&format!(
            "`{}` is writable by group or others",
            parent.display()
        )),
        "{stderr}"
    );
    assert!(!home.join("audit.log").exists(), "an audit log was created");

    // Sticky, as /tmp: others cannot rename what is Mint's in it, so it may be passed through.
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let mut child = mint_at(&home)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.starts_with("listening on "), "{line:?}");
}

#[test]
fn issue_24_files_in_a_home_another_user_owns_are_refused() {
    if !running_as_root("issue_24_files_in_a_home_another_user_owns_are_refused") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(dir.path(), EchoConfig::default());
    let port = peer.server.port();
    let home = MintHome::new(&policy(port, "GET", ""), ALIASES, &[("echo", CANARY)]);
    // A directory above the policy's that uid 65534 owns: that user could rename the directory
    // holding the policy away and put one of theirs in its place.
    let theirs = subdir(dir.path(), "theirs", 0o755);
    let repo = subdir(&theirs, "repo", 0o755);
    let policy_path = repo.join("policy.yaml");
    write_file(&policy_path, &policy(port, "GET", ""), 0o600);
    std::os::unix::fs::chown(&theirs, Some(65_534), Some(65_534)).unwrap();
    let output = serve_must_fail({
        let mut c = home.mint();
        c.env("MINT_POLICY_PATH", &policy_path)
            .args(["serve", "--listen", "127.0.0.1:0", "--upstream-ca"])
            .arg(&peer.ca_file);
        c
    });
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("`{}` is owned by uid 65534", theirs.display())),
        "{stderr}"
    );
    assert!(!stderr.contains(CANARY), "{stderr}");
}

/// `mint` run in `cwd` with no `MINT_*` variable inherited: every file at its default place,
/// `cwd/.mint/...`, as a user without the variables runs it.
fn mint_in(cwd: &Path) -> Command {
    let mut command = Command::new(mint_bin());
    for (key, _) in std::env::vars() {
        if key.starts_with("MINT_") {
            command.env_remove(key);
        }
    }
    command
        .env_remove("RUST_LOG")
        .current_dir(cwd)
        .stdin(Stdio::null());
    command
}

/// A policy allowing `GET https://api.example.com/items/**` to agent `bot` with alias `api`; its
/// description holds the canary, which no output may quote.
fn explained_policy() -> String {
    format!(
        "version: 1\ndefault: deny\nrules:\n  - id: read\n    description: {CANARY}\n    effect: allow\n    match:\n      agent: bot\n      alias: api\n      host: api.example.com\n      method: GET\n      path: /items/**\n"
    )
}

/// `mint policy explain` of an allowed request, in `cwd`, with `args` added.
fn explain_in(cwd: &Path, args: &[&str]) -> Output {
    mint_in(cwd)
        .args([
            "policy",
            "explain",
            "--agent",
            "bot",
            "--method",
            "GET",
            "--url",
            "https://api.example.com/items/1",
            "--header",
            "Authorization: Bearer {{mint:api}}",
        ])
        .args(args)
        .output()
        .unwrap()
}

#[track_caller]
fn assert_canary_absent(output: &Output) {
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        stderr_of(output)
    );
    assert!(!all.contains(CANARY), "{all}");
}

#[test]
fn issue_24_policy_explain_reads_files_as_serve_does_and_check_says_when_serve_would_refuse() {
    if !running_as_root(
        "issue_24_policy_explain_reads_files_as_serve_does_and_check_says_when_serve_would_refuse",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let theirs = subdir(dir.path(), "theirs", 0o755);
    let home = subdir(&theirs, ".mint", 0o700);
    write_file(&home.join("policy.yaml"), &explained_policy(), 0o600);
    write_file(
        &home.join("aliases.yaml"),
        "aliases:\n  - name: api\n    hosts: [api.example.com]\n",
        0o600,
    );
    // In a working directory only Mint's user can change: explained (allowed, exit 0).
    let output = explain_in(&theirs, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr_of(&output));
    assert_canary_absent(&output);

    // uid 65534 owns the working directory: that user could rename `.mint` away and put a policy
    // of theirs in its place, so `mint serve` would refuse the default files, and so does explain.
    std::os::unix::fs::chown(&theirs, Some(65_534), Some(65_534)).unwrap();
    let output = explain_in(&theirs, &[]);
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(output.stdout.is_empty(), "{stderr}");
    assert!(
        stderr.contains(&format!("`{}` is owned by uid 65534", theirs.display()))
            && stderr.contains("`mint serve` would refuse this policy file")
            && stderr.contains("nothing was explained"),
        "{stderr}"
    );
    assert_canary_absent(&output);

    // `mint policy check` is a linter: it still reports on the file's contents, and says on
    // stderr that the broker would refuse it; stdout stays the report alone.
    for json in [false, true] {
        let mut check = mint_in(&theirs);
        check.args(["policy", "check"]);
        if json {
            check.arg("--json");
        }
        let output = check.output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = stderr_of(&output);
        assert_eq!(output.status.code(), Some(0), "{stdout}{stderr}");
        assert!(
            stderr.contains("note:")
                && stderr.contains(&format!("`{}` is owned by uid 65534", theirs.display()))
                && stderr.contains("`mint serve` would refuse this file"),
            "{stderr}"
        );
        assert!(!stdout.contains("uid 65534"), "{stdout}");
        if json {
            let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(report["valid"], true, "{stdout}");
        }
        assert_canary_absent(&output);
    }

    // An explicit `--policy` through a link (Mint's own) into a directory others may write: the
    // file really lives there, so explain refuses it as the broker would.
    std::os::unix::fs::chown(&theirs, Some(0), Some(0)).unwrap();
    let open = subdir(dir.path(), "open", 0o777);
    write_file(&open.join("policy.yaml"), &explained_policy(), 0o600);
    std::os::unix::fs::symlink(open.join("policy.yaml"), home.join("draft.yaml")).unwrap();
    let output = explain_in(&theirs, &["--policy", ".mint/draft.yaml"]);
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "`{}` is writable by group or others",
            open.display()
        )) && stderr.contains("chmod go-w"),
        "{stderr}"
    );
    // The same for the alias file.
    std::os::unix::fs::symlink(open.join("policy.yaml"), home.join("aliases-draft.yaml")).unwrap();
    let output = explain_in(&theirs, &["--aliases", ".mint/aliases-draft.yaml"]);
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("`mint serve` would refuse this alias file"),
        "{stderr}"
    );
    assert_canary_absent(&output);
}

/// Runs `mint audit rotate` on the log at `log`; returns the output.
fn rotate(cwd: &Path, log: &Path) -> Output {
    mint_in(cwd)
        .env("MINT_AUDIT_LOG_PATH", log)
        .args(["audit", "rotate"])
        .output()
        .unwrap()
}

/// Asserts that `rotate` was refused and left the log's directory as it was.
#[track_caller]
fn assert_not_rotated(output: &Output, log: &Path, names: &[&str]) {
    let stderr = stderr_of(output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    for name in names {
        assert!(stderr.contains(name), "`{name}` not in: {stderr}");
    }
    let mut left: Vec<String> = std::fs::read_dir(log.parent().unwrap())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["audit.log"], "{stderr}");
}

#[test]
fn issue_24_audit_rotate_refuses_a_log_in_a_shared_directory() {
    let dir = tempfile::tempdir().unwrap();
    // Sticky and open to all, as /tmp: others cannot rename the log, but they can plant files at
    // the lock's and the rotated file's names, which `mint serve` refuses to open the log among.
    let shared = subdir(dir.path(), "shared", 0o1777);
    let log = shared.join("audit.log");
    write_file(&log, "{}\n", 0o600);
    let output = rotate(dir.path(), &log);
    assert_not_rotated(
        &output,
        &log,
        &[&format!("`{}`", shared.display()), "chmod 700"],
    );
}

#[test]
fn issue_24_audit_rotate_refuses_a_log_under_a_directory_another_user_owns() {
    if !running_as_root("issue_24_audit_rotate_refuses_a_log_under_a_directory_another_user_owns") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The log's own directory is Mint's, but uid 65534 owns the one above it: that user could
    // rename `logs` away, with the rotated records, and put a directory of theirs in its place.
    let theirs = subdir(dir.path(), "theirs", 0o755);
    let logs = subdir(&theirs, "logs", 0o700);
    let log = logs.join("audit.log");
    write_file(&log, "{}\n", 0o600);
    std::os::unix::fs::chown(&theirs, Some(65_534), Some(65_534)).unwrap();
    let output = rotate(dir.path(), &log);
    assert_not_rotated(
        &output,
        &log,
        &[
            &format!("`{}` is owned by uid 65534", theirs.display()),
            "chown 0",
        ],
    );
    // Given back to Mint's user, the same log rotates.
    std::os::unix::fs::chown(&theirs, Some(0), Some(0)).unwrap();
    let output = rotate(dir.path(), &log);
    assert_eq!(output.status.code(), Some(0), "{}", stderr_of(&output));
    assert!(logs.join("audit.log.1").is_file());
}

// ---------------------------------------------------------------------------------------------
// Finding 5: a policy rewritten in place is never loaded half-written
// ---------------------------------------------------------------------------------------------

#[test]
fn issue_24_a_policy_written_in_pieces_is_never_decided_by_a_prefix() {
    let lab::Lab {
        dir: _dir,
        peer,
        home,
        cap,
        broker,
        ..
    } = echo_lab();
    let port = peer.server.port();
    // The probe: DELETE /echo/probe. The policy in force denies it, and so does the final one
    // (its last rule); only the prefix without that rule allows it.
    assert_eq!(send(&broker, &cap, port, "DELETE", "probe").0, 403);
    assert_eq!(send(&broker, &cap, port, "DELETE", "other").0, 403);
    let prefix = policy(port, "GET, DELETE", "");
    let deny = no_probe_rule(port);
    let (deny_head, deny_tail) = deny.split_at(deny.len() / 2);

    // An editor writing the file in place: truncate, then three writes with pauses between.
    let mut writer = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(home.path().join("policy.yaml"))
        .unwrap();
    let mut probes = 0;
    let mut probe = |broker: &Broker| {
        probes += 1;
        let (status, body) = send(broker, &cap, port, "DELETE", "probe");
        assert_eq!(
            status, 403,
            "a prefix of the policy decided a request: {body}"
        );
    };
    for (piece, hup) in [(prefix.as_str(), false), (deny_head, true)] {
        writer.write_all(piece.as_bytes()).unwrap();
        writer.flush().unwrap();
        if hup {
            hangup(&broker);
        }
        // Give a poller every chance to load what is there (the old one did within half a
        // second), then probe: nothing may have been loaded.
        let loaded = wait_for_events(&broker, "policy_reloaded", 1, Duration::from_secs(3));
        for _ in 0..5 {
            probe(&broker);
        }
        assert!(!loaded, "a part of the policy was loaded");
        assert_eq!(count_events(&broker, "policy_reload_failed"), 0);
    }
    writer.write_all(deny_tail.as_bytes()).unwrap();
    drop(writer);

    // Once whole, the file is loaded: DELETE elsewhere is allowed, the probe still denied.
    assert!(
        wait_for_events(&broker, "policy_reloaded", 1, Duration::from_secs(20)),
        "the finished policy was not loaded"
    );
    probe(&broker);
    assert_eq!(send(&broker, &cap, port, "DELETE", "other").0, 200);
    assert_eq!(count_events(&broker, "policy_reload_failed"), 0);
    assert_eq!(count_events(&broker, "policy_reloaded"), 1);
    // The audit trail agrees: every probe was denied.
    let decisions: Vec<_> = broker
        .audit_records()
        .into_iter()
        .filter(|r| r["phase"] == "decision" && r["path"] == "/echo/probe")
        .collect();
    assert_eq!(decisions.len(), probes + 1);
    assert!(
        decisions.iter().all(|r| r["decision"] == "deny"),
        "{decisions:?}"
    );
    assert_no_canary(&broker);
}

#[test]
fn issue_24_a_touch_while_a_writer_holds_the_policy_does_not_load_its_prefix() {
    let lab::Lab {
        dir: _dir,
        peer,
        home,
        cap,
        broker,
        ..
    } = echo_lab();
    let port = peer.server.port();
    assert_eq!(send(&broker, &cap, port, "DELETE", "probe").0, 403);
    let path = home.path().join("policy.yaml");
    // A writer has written a prefix that is a whole, valid policy allowing DELETE, and holds
    // the file open to write the rule that denies the probe.
    let mut writer = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    writer
        .write_all(policy(port, "GET, DELETE", "").as_bytes())
        .unwrap();
    writer.flush().unwrap();
    // Meanwhile another program opens and closes the file for writing (the review's repro:
    // `touch`, whose close the old watcher took for the writer's), and an operator sends SIGHUP.
    let touched = Command::new("touch").arg(&path).status().unwrap();
    assert!(touched.success());
    hangup(&broker);
    // The broker waits, says so once it has waited long, and never loads the prefix.
    let said = wait_for_events(&broker, "policy_reload_waiting", 1, Duration::from_secs(40));
    let (status, body) = send(&broker, &cap, port, "DELETE", "probe");
    assert_eq!(status, 403, "the prefix was loaded: {body}");
    assert!(said, "no policy_reload_waiting event");
    assert_eq!(count_events(&broker, "policy_reloaded"), 0);
    let stderr = broker.stderr();
    assert!(stderr.contains("Reload waits"), "{stderr}");
    // The writer finishes: the whole policy is loaded.
    writer.write_all(no_probe_rule(port).as_bytes()).unwrap();
    drop(writer);
    assert!(
        wait_for_events(&broker, "policy_reloaded", 1, Duration::from_secs(20)),
        "the finished policy was not loaded"
    );
    assert_eq!(send(&broker, &cap, port, "DELETE", "probe").0, 403);
    assert_eq!(send(&broker, &cap, port, "DELETE", "other").0, 200);
    assert_eq!(count_events(&broker, "policy_reload_waiting"), 1);
    assert_no_canary(&broker);
}

#[test]
fn issue_24_a_policy_truncated_by_path_is_reloaded() {
    let dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(dir.path(), EchoConfig::default());
    let port = peer.server.port();
    // The file ends in a rule that denies the probe; truncate(2) by path cuts that rule off
    // (a change with no descriptor open, which the old watcher waited on for ever).
    let kept = policy(port, "GET, DELETE", "");
    let full = format!("{kept}{}", no_probe_rule(port));
    let home = MintHome::new(&full, ALIASES, &[("echo", CANARY)]);
    let cap = home.issue_capability("mino", &[]);
    let broker = home.serve(&peer.ca_file, &[]);
    assert_eq!(send(&broker, &cap, port, "DELETE", "probe").0, 403);
    let path = home.path().join("policy.yaml");
    let truncated = Command::new("python3")
        .args([
            "-c",
            "import os, sys; os.truncate(sys.argv[1], int(sys.argv[2]))",
        ])
        .arg(&path)
        .arg(kept.len().to_string())
        .status()
        .unwrap();
    assert!(truncated.success());
    assert!(
        wait_for_events(&broker, "policy_reloaded", 1, Duration::from_secs(20)),
        "the truncated policy was never loaded"
    );
    assert_eq!(send(&broker, &cap, port, "DELETE", "probe").0, 200);
    assert_eq!(count_events(&broker, "policy_reload_waiting"), 0);
    assert_no_canary(&broker);
}

/// A program that rewrites the policy in place through a shared memory mapping, pausing half way
/// (outside review of the reload watcher): stores through `mmap` send no IN_MODIFY, so the old
/// watcher saw a changed stamp, no writer, and loaded the half-written file after two polls; and
/// the later stores did not move the stamp again, so the finished file was never loaded.
#[test]
fn review_a_policy_rewritten_through_mmap_is_not_loaded_half_way() {
    let dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(dir.path(), EchoConfig::default());
    let port = peer.server.port();
    // Before: DELETE allowed except on the probe. After (same length): DELETE no longer
    // allowed, the deny rule moved off the probe. Half way (the tail rewritten first): DELETE
    // allowed on the probe, which neither version allows.
    let old = policy(port, "GET, DELETE", &no_probe_rule(port));
    let new = policy(
        port,
        "GET        ",
        &no_probe_rule(port).replace("/probe", "/xxxxx"),
    );
    assert_eq!(old.len(), new.len());
    let home = MintHome::new(&old, ALIASES, &[("echo", CANARY)]);
    let cap = home.issue_capability("mino", &[]);
    let broker = home.serve(&peer.ca_file, &[]);
    assert_eq!(send(&broker, &cap, port, "DELETE", "probe").0, 403);
    assert_eq!(send(&broker, &cap, port, "DELETE", "other").0, 200);
    let path = home.path().join("policy.yaml");
    let writer_code = "import mmap, os, sys\n\
        path, new = sys.argv[1], sys.argv[2].encode()\n\
        fd = os.open(path, os.O_RDWR)\n\
        m = mmap.mmap(fd, len(new))\n\
        cut = new.index(b'path: [\"/echo/xxxxx')\n\
        m[cut:] = new[cut:]\n\
        print('half', flush=True)\n\
        sys.stdin.readline()\n\
        m[:] = new\n\
        m.close()\n\
        os.close(fd)\n";
    let mut writer = Command::new("python3")
        .args(["-c", writer_code])
        .arg(&path)
        .arg(&new)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(writer.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "half");
    // Six polls: the old watcher loaded the half-written file after two.
    std::thread::sleep(Duration::from_secs(3));
    let (status, body) = send(&broker, &cap, port, "DELETE", "probe");
    assert_eq!(status, 403, "the half-written policy was loaded: {body}");
    assert_eq!(count_events(&broker, "policy_reloaded"), 0);
    // The writer finishes and closes: the finished policy is loaded.
    writer.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(writer.wait().unwrap().success());
    assert!(
        wait_for_events(&broker, "policy_reloaded", 1, Duration::from_secs(20)),
        "the finished policy was not loaded"
    );
    assert_eq!(send(&broker, &cap, port, "DELETE", "other").0, 403);
    assert_eq!(send(&broker, &cap, port, "DELETE", "probe").0, 403);
    assert_eq!(send(&broker, &cap, port, "GET", "other").0, 200);
    assert_no_canary(&broker);
}

/// A policy whose times keep moving (a program touching it every 200 ms, with no descriptor
/// left open) holds every reload back, SIGHUP's too: the old watcher waited silently for as
/// long as it lasted; the wait is audited now, and the change loads once it stops.
#[test]
fn review_a_policy_that_never_settles_is_audited_as_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(dir.path(), EchoConfig::default());
    let port = peer.server.port();
    let home = MintHome::new(
        &policy(port, "GET, DELETE", ""),
        ALIASES,
        &[("echo", CANARY)],
    );
    let cap = home.issue_capability("mino", &[]);
    let broker = home.serve(&peer.ca_file, &[]);
    assert_eq!(send(&broker, &cap, port, "DELETE", "probe").0, 200);
    let path = home.path().join("policy.yaml");
    std::fs::write(&path, policy(port, "GET", "")).unwrap();
    hangup(&broker);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let toucher = {
        let (path, stop) = (path.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let file = std::fs::File::open(&path).unwrap();
                file.set_modified(std::time::SystemTime::now()).unwrap();
                drop(file);
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    let said = wait_for_events(&broker, "policy_reload_waiting", 1, Duration::from_secs(30));
    let reloaded_meanwhile = count_events(&broker, "policy_reloaded");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    toucher.join().unwrap();
    assert!(
        said,
        "a reload held back by a file that never settles was not audited"
    );
    assert_eq!(reloaded_meanwhile, 0);
    assert!(broker.stderr().contains("keeps changing"));
    assert!(
        wait_for_events(&broker, "policy_reloaded", 1, Duration::from_secs(20)),
        "the settled policy was not loaded"
    );
    assert_eq!(send(&broker, &cap, port, "DELETE", "probe").0, 403);
    assert_eq!(count_events(&broker, "policy_reload_waiting"), 1);
    assert_no_canary(&broker);
}

/// A process of uid 65534 running `python3 -c code`, with the directory `home` open as its
/// descriptor 3 (the directories above it may be closed to others: it opens `policy.yaml`
/// relative to that descriptor); it prints `open` once it has opened the policy. Killed when dropped.
struct Nobody(Child);

impl Nobody {
    fn start(code: &str, home: &Path) -> Nobody {
        let child = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "/bin/sh",
                "-c",
                "exec 3<&0 </dev/null && exec /usr/bin/python3 -c \"$1\"",
                "sh",
                code,
            ])
            .stdin(std::fs::File::open(home).unwrap())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut nobody = Nobody(child);
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(nobody.0.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(
            line.trim(),
            "open",
            "the other user could not open the policy"
        );
        nobody
    }
}

impl Drop for Nobody {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Makes the home and its policy readable by others (Mint refuses only write bits for them),
/// and waits for the reload the change of mode causes.
fn share_policy_read_only(home: &MintHome, broker: &Broker) -> PathBuf {
    let path = home.path().join("policy.yaml");
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    // No SIGHUP: one sent before the broker listens for it would end it.
    assert!(
        wait_for_events(broker, "policy_reloaded", 1, Duration::from_secs(20)),
        "the policy was not reloaded after its mode changed: {}",
        broker.stderr()
    );
    path
}

/// Outside attack O1: another user floods open and close (read-only) on a policy readable by
/// others while the operator's in-place writer pauses after a prefix that is a wider policy.
/// The old watcher forgot every open descriptor when the inotify queue overflowed, so it no
/// longer waited for the writer and loaded the prefix after two polls.
#[test]
fn attack_a_read_only_open_flood_does_not_release_a_paused_writer() {
    if !running_as_root("attack_a_read_only_open_flood_does_not_release_a_paused_writer") {
        return;
    }
    let lab::Lab {
        dir: _dir,
        peer,
        home,
        cap,
        broker,
        ..
    } = echo_lab();
    let port = peer.server.port();
    let path = share_policy_read_only(&home, &broker);
    assert_eq!(send(&broker, &cap, port, "DELETE", "probe").0, 403);
    // The operator's writer: a prefix that is a whole policy allowing DELETE, then a pause.
    let mut writer = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    writer
        .write_all(policy(port, "GET, DELETE", "").as_bytes())
        .unwrap();
    writer.flush().unwrap();
    let flood = Nobody::start(
        "import os\nos.close(os.open('policy.yaml', os.O_RDONLY, dir_fd=3))\nprint('open', flush=True)\nwhile True:\n  os.close(os.open('policy.yaml', os.O_RDONLY, dir_fd=3))\n",
        home.path(),
    );
    // Twelve polls of flooding: the old watcher loaded the prefix within a few.
    std::thread::sleep(Duration::from_secs(6));
    let (status, body) = send(&broker, &cap, port, "DELETE", "probe");
    drop(flood);
    assert_eq!(status, 403, "the writer's prefix was loaded: {body}");
    assert_eq!(count_events(&broker, "policy_reloaded"), 1);
    // The flood has stopped and the queue drained (a close lost in an overflow would leave the
    // file to the long stable spell); the writer finishes and closes: the whole policy loads.
    std::thread::sleep(Duration::from_secs(1));
    writer.write_all(no_probe_rule(port).as_bytes()).unwrap();
    drop(writer);
    assert!(
        wait_for_events(&broker, "policy_reloaded", 2, Duration::from_secs(20)),
        "the finished policy was not loaded"
    );
    assert_eq!(send(&broker, &cap, port, "DELETE", "probe").0, 403);
    assert_eq!(send(&broker, &cap, port, "DELETE", "other").0, 200);
    assert_eq!(count_events(&broker, "policy_reload_unconfirmed"), 0);
    assert_no_canary(&broker);
}

/// Outside attack O2: another user keeps a policy readable by others open read-only; the
/// operator tightens it in place. The old watcher took any open descriptor for a writer's and
/// kept the old policy in force for as long as that descriptor stayed open.
#[test]
fn attack_a_read_only_descriptor_held_open_does_not_hold_a_reload_back() {
    if !running_as_root("attack_a_read_only_descriptor_held_open_does_not_hold_a_reload_back") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(dir.path(), EchoConfig::default());
    let port = peer.server.port();
    let home = MintHome::new(
        &policy(port, "GET, DELETE", ""),
        ALIASES,
        &[("echo", CANARY)],
    );
    let cap = home.issue_capability("mino", &[]);
    let broker = home.serve(&peer.ca_file, &[]);
    let path = share_policy_read_only(&home, &broker);
    assert_eq!(send(&broker, &cap, port, "DELETE", "probe").0, 200);
    let reader = Nobody::start(
        "import os, time\nfd = os.open('policy.yaml', os.O_RDONLY, dir_fd=3)\nprint('open', flush=True)\ntime.sleep(120)\n",
        home.path(),
    );
    // The operator tightens the policy in place (`cat new > policy.yaml`).
    let tightened = policy(port, "GET, DELETE", &no_probe_rule(port));
    std::fs::write(&path, tightened).unwrap();
    let loaded = wait_for_events(&broker, "policy_reloaded", 2, Duration::from_secs(8));
    let (status, body) = send(&broker, &cap, port, "DELETE", "probe");
    drop(reader);
    assert!(loaded, "the reader held the reload back");
    assert_eq!(status, 403, "the old policy stayed in force: {body}");
    assert_eq!(send(&broker, &cap, port, "DELETE", "other").0, 200);
    assert_eq!(count_events(&broker, "policy_reload_waiting"), 0);
    assert_eq!(count_events(&broker, "policy_reload_unconfirmed"), 0);
    assert_no_canary(&broker);
}

// ---------------------------------------------------------------------------------------------
// Finding 6: `mint cap revoke` and locks held by others
// ---------------------------------------------------------------------------------------------

/// Runs `command`, killing it if it has not finished within `bound` (a hang guard): returns its
/// output, or `None` when it had to be killed.
fn run_bounded(mut command: Command, bound: Duration) -> Option<Output> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + bound;
    loop {
        if child.try_wait().unwrap().is_some() {
            return Some(child.wait_with_output().unwrap());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A process holding an `flock` on `path` (as `user`, when given) until dropped; returns once
/// the lock is held.
struct Holder(Child);

impl Holder {
    fn start(path: &Path, user: Option<u32>) -> Holder {
        let mut command = match user {
            Some(uid) => {
                let mut c = Command::new("setpriv");
                c.args([
                    format!("--reuid={uid}"),
                    format!("--regid={uid}"),
                    "--clear-groups".to_owned(),
                    "sh".to_owned(),
                ]);
                c
            }
            None => Command::new("sh"),
        };
        // The shell opens the path, locks it, says so on stdout and becomes `sleep` with the
        // descriptor: killing this one process releases the lock.
        let child = command
            .args([
                "-c",
                "exec 9<\"$1\" && flock -x 9 && echo held && exec sleep 120",
                "sh",
            ])
            .arg(path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut holder = Holder(child);
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(holder.0.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "held", "the lock holder did not start");
        holder
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (bounded) until the broker refuses `cap`.
fn wait_refused(broker: &Broker, cap: &str, port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if send(broker, cap, port, "GET", "x").0 == 401 {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn issue_24_revoke_ignores_a_lock_held_on_the_directory_and_takes_effect() {
    let lab::Lab {
        dir: _dir,
        peer,
        home,
        cap,
        broker,
        ..
    } = echo_lab();
    let port = peer.server.port();
    assert_eq!(send(&broker, &cap, port, "GET", "x").0, 200);

    // Another process holds an flock on the home directory, where the old lock was taken.
    let _holder = Holder::start(home.path(), None);
    let output = run_bounded(
        {
            let mut c = home.mint();
            c.args(["cap", "revoke", capability_id(&cap)]);
            c
        },
        Duration::from_secs(30),
    )
    .expect("mint cap revoke blocked on another process's lock");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert!(stdout.contains("Revoked capability"), "{stdout}");
    assert!(
        wait_refused(&broker, &cap, port),
        "the running broker still accepts the revoked capability"
    );
    assert_no_canary(&broker);
}

#[test]
fn issue_24_revoke_waits_a_bounded_time_for_its_lock_and_says_it_did_not_revoke() {
    let lab::Lab {
        dir: _dir,
        peer,
        home,
        cap,
        broker,
        ..
    } = echo_lab();
    let port = peer.server.port();
    let lock = home.path().join(".capabilities.yaml.lock");
    assert!(lock.is_file(), "issuing left no lock file");

    let holder = Holder::start(&lock, None);
    let output = run_bounded(
        {
            let mut c = home.mint();
            c.args(["cap", "revoke", capability_id(&cap)]);
            c
        },
        Duration::from_secs(60),
    )
    .expect("mint cap revoke waited without a bound");
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "capability `{}` was NOT revoked and is still accepted",
            capability_id(&cap)
        )),
        "{stderr}"
    );
    assert!(stderr.contains(&lock.display().to_string()), "{stderr}");
    // It said so, and it is so.
    assert_eq!(send(&broker, &cap, port, "GET", "x").0, 200);

    drop(holder);
    home.revoke_capability(&cap);
    assert!(
        wait_refused(&broker, &cap, port),
        "the running broker still accepts the revoked capability"
    );
    assert_no_canary(&broker);
}

#[test]
fn issue_24_revoke_in_a_shared_directory_another_user_locks_fails_at_once() {
    if !running_as_root("issue_24_revoke_in_a_shared_directory_another_user_locks_fails_at_once") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = MintHome::new(
        "version: 1\ndefault: deny\nrules: []\n",
        "aliases: []\n",
        &[],
    );
    let shared = subdir(dir.path(), "shared", 0o755);
    let caps = shared.join("capabilities.yaml");
    write_file(&caps, "version: 1\ncapabilities: []\n", 0o600);
    let with_caps = |args: &[&str]| {
        let mut c = home.mint();
        c.env("MINT_CAPABILITIES_PATH", &caps).args(args);
        c
    };
    let issued = run_bounded(
        with_caps(&["cap", "issue", "--agent", "mino"]),
        Duration::from_secs(30),
    )
    .unwrap();
    assert!(issued.status.success(), "{}", stderr_of(&issued));
    let token = String::from_utf8(issued.stdout).unwrap().trim().to_owned();

    // The directory becomes shared (sticky, as /tmp), and uid 65534 holds an flock on it: the old
    // `mint cap revoke` waited for that lock forever.
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let _holder = Holder::start(&shared, Some(65_534));
    let output = run_bounded(
        with_caps(&["cap", "revoke", capability_id(&token)]),
        Duration::from_secs(30),
    )
    .expect("mint cap revoke blocked on another user's lock");
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("was NOT revoked and is still accepted"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "`{}` is writable by group or others",
            shared.display()
        )),
        "{stderr}"
    );
    assert!(
        !std::fs::read_to_string(&caps)
            .unwrap()
            .contains("revoked: true")
    );
}
