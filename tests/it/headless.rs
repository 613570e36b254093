//! Issue 23: from nothing to a first proxied request on a machine without a desktop session (a
//! server, a container, CI), following README.md's "Running the proxy" with the real binary.
//!
//! Every `mint` here runs with a cleared environment (`PATH`, `HOME` in the test's directory,
//! `MINT_HOME`, `MINT_KEYRING_SERVICE` and what the README says to set): no
//! `DBUS_SESSION_BUS_ADDRESS`, no `XDG_RUNTIME_DIR`, so no Secret Service. Kernel keyrings
//! cannot be taken away from a child: a child inherits its parent's session keyring, and a
//! process that has none falls back to the user session keyring (`@us`). So the keyutils path
//! runs the README's commands as written (`alias add`, `alias rm`) in the test's own session
//! keyring (in CI: `keyctl session -`; from a shell or a container without one: none, where the
//! fallback to `@us` is exercised), and `alias list` and `serve` each in a fresh session keyring
//! of their own (`keyctl session -`), as separate logins, `docker exec`s or CI steps would: they
//! share nothing with `alias add` but the persistent keyring. A canary secret must reach the
//! upstream and nothing else.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use mint_tests::broker::{MintHome, curl, mint_bin};
use mint_tests::echo_peer;
use mint_tests::echo_upstream::EchoConfig;
use mint_tests::lab::{allow, policy};

const CANARY: &str = "canary-headless-Hq3vT8nB5xK2mW7z";

/// `PROGRAM` with the environment of a fresh headless machine: `PATH`, `HOME` (an empty
/// directory in the home), `MINT_HOME` and `MINT_KEYRING_SERVICE` (a name of this test's own, so
/// the kernel keys of parallel runs never meet), plus `vars`.
fn headless(program: &Path, home: &MintHome, service: &str, vars: &[(&str, &str)]) -> Command {
    let user_home = home.path().join("user-home");
    std::fs::create_dir_all(&user_home).unwrap();
    let mut command = Command::new(program);
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &user_home)
        .env("MINT_HOME", home.path())
        .env("MINT_KEYRING_SERVICE", service)
        .envs(vars.iter().copied())
        .current_dir(home.path());
    command
}

/// `mint ARGS` in the headless environment, `input` on stdin.
fn mint(
    home: &MintHome,
    service: &str,
    vars: &[(&str, &str)],
    args: &[&str],
    input: &str,
) -> Output {
    run(headless(&mint_bin(), home, service, vars).args(args), input)
}

/// `keyctl session - mint ARGS`: `mint` in a fresh session keyring of its own.
fn mint_in_new_session(
    home: &MintHome,
    service: &str,
    vars: &[(&str, &str)],
    args: &[&str],
    input: &str,
) -> Output {
    let keyctl = Path::new("keyctl");
    let mut command = headless(keyctl, home, service, vars);
    command.args(["session", "-"]).arg(mint_bin()).args(args);
    run(&mut command, input)
}

fn run(command: &mut Command, input: &str) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[track_caller]
fn succeeds(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    assert!(!stdout.contains(CANARY) && !stderr.contains(CANARY));
    stdout
}

#[track_caller]
fn fails(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{stdout}{stderr}");
    assert!(!stdout.contains(CANARY) && !stderr.contains(CANARY));
    stderr
}

/// The ways out every unreachable-keyring error names.
#[track_caller]
fn names_the_ways_out(text: &str) {
    for way in [
        "MINT_KEYRING_BACKEND=keyutils",
        "--source env:VAR",
        "--source file:/path",
        "D-Bus session",
        "docs/credentials.md",
    ] {
        assert!(text.contains(way), "`{way}` is not named: {text}");
    }
}

fn unique_service() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("mint-it-headless-{}-{nanos}", std::process::id())
}

/// Whether the kernel keyring can be used here (`keyctl` installed, keyrings not filtered).
fn keyutils_usable() -> bool {
    let usable = Command::new("keyctl")
        .args(["session", "-", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !usable {
        skip_or_fail("`keyctl session - true` fails: the kernel keyring is not usable");
    }
    usable
}

/// Notes that a keyring test is skipped for `why`, or fails when `MINT_REQUIRE_KEYRING=1` (as
/// CI sets) requires the keyrings.
#[track_caller]
fn skip_or_fail(why: &str) {
    assert!(
        std::env::var("MINT_REQUIRE_KEYRING").map_or(true, |v| v != "1"),
        "{why}, and MINT_REQUIRE_KEYRING=1 requires the keyrings"
    );
    let _ = writeln!(std::io::stderr(), "note: skipping: {why}");
}

#[test]
fn issue_23_without_a_desktop_session_keyring_errors_name_the_ways_out() {
    let home = MintHome::bare();
    let service = unique_service();
    succeeds(&mint(&home, &service, &[], &["init"], ""));
    let aliases_before = std::fs::read_to_string(home.path().join("aliases.yaml")).unwrap();

    // README's first command, as written: the default backend is the Secret Service.
    let add = [
        "alias",
        "add",
        "github",
        "--host",
        "api.github.com",
        "--secret-stdin",
    ];
    let stderr = fails(&mint(&home, &service, &[], &add, CANARY));
    assert!(stderr.contains("the store cannot be reached"), "{stderr}");
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    names_the_ways_out(&stderr);
    let aliases_after = std::fs::read_to_string(home.path().join("aliases.yaml")).unwrap();
    assert_eq!(aliases_after, aliases_before);

    // A keyring alias declared by hand: `list` and `serve` say the same.
    home.write_private(
        "aliases.yaml",
        "aliases:\n  - name: github\n    hosts: [api.github.com]\n",
    );
    let output = mint(&home, &service, &[], &["alias", "list"], "");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let list = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(!list.contains(CANARY), "{list}");
    assert!(list.contains("unavailable"), "{list}");
    assert!(
        list.contains("`mint serve` would refuse to start"),
        "{list}"
    );
    names_the_ways_out(&list);
    let serve = ["serve", "--listen", "127.0.0.1:0"];
    let stderr = fails(&mint(&home, &service, &[], &serve, ""));
    assert!(stderr.contains("`github`"), "{stderr}");
    names_the_ways_out(&stderr);
}

#[test]
fn issue_23_readme_headless_path_reaches_a_first_proxied_request() {
    if !keyutils_usable() {
        return;
    }
    let ca_dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(ca_dir.path(), EchoConfig::default());
    let port = peer.server.port();
    let home = MintHome::bare();
    let service = unique_service();
    let keyutils = [("MINT_KEYRING_BACKEND", "keyutils")];

    succeeds(&mint(&home, &service, &keyutils, &["init"], ""));
    let add = [
        "alias",
        "add",
        "echo",
        "--host",
        "127.0.0.1",
        "--secret-stdin",
    ];
    let out = succeeds(&mint(&home, &service, &keyutils, &add, CANARY));
    assert!(out.contains("kernel keyutils"), "{out}");
    home.write_private(
        "policy.yaml",
        &policy(&allow("echo-all", "echo", port, "GET", "")),
    );
    succeeds(&mint(&home, &service, &keyutils, &["policy", "check"], ""));
    let issued = succeeds(&mint(
        &home,
        &service,
        &keyutils,
        &["cap", "issue", "--agent", "mino", "--ttl", "1h"],
        "",
    ));
    let cap = issued
        .split_whitespace()
        .find(|word| word.starts_with("mint_cap_"))
        .unwrap()
        .to_owned();

    // Another process, another session keyring: the key is found where Mint keeps it.
    let list = succeeds(&mint_in_new_session(
        &home,
        &service,
        &keyutils,
        &["alias", "list"],
        "",
    ));
    assert!(list.contains("present"), "{list}");

    let mut command = headless(Path::new("keyctl"), &home, &service, &keyutils);
    command
        .args(["session", "-"])
        .arg(mint_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--upstream-ca"])
        .arg(&peer.ca_file)
        .stderr(Stdio::piped());
    let broker = home.start_broker(command, home.path().join("mint-serve.stderr"));
    let response = curl(&[
        "-H",
        &format!("Mint-Capability: {cap}"),
        "-H",
        "Authorization: Bearer {{mint:echo}}",
        &broker.proxy_url(port, "/echo"),
    ]);
    assert_eq!(response.status, 200, "{}", response.body);
    let upstream = peer.server.requests().last().unwrap().clone();
    assert_eq!(
        upstream.header("authorization"),
        Some(format!("Bearer {CANARY}").as_str())
    );
    assert!(
        response.body.contains("[mint:redacted]"),
        "{}",
        response.body
    );
    let id = response.header("mint-request-id").unwrap().to_owned();
    assert_eq!(broker.outcome_of(&id)["outcome"], "completed");
    broker.assert_clean(response.everything(), &[CANARY]);
    drop(broker);

    let out = succeeds(&mint(
        &home,
        &service,
        &keyutils,
        &["alias", "rm", "echo"],
        "",
    ));
    assert!(out.contains("Deleted its secret"), "{out}");
    let list = succeeds(&mint_in_new_session(
        &home,
        &service,
        &keyutils,
        &["alias", "list"],
        "",
    ));
    assert!(list.contains("No aliases yet"), "{list}");
}

/// A D-Bus session bus of the test's own with gnome-keyring's Secret Service started and unlocked
/// on it (as the D-Bus recipe of docs/credentials.md does), keeping its keyrings in `data` and
/// its sockets in `runtime`. Dropping it stops the bus; the keyring daemon leaves with its bus.
struct KeyringBus {
    bus: std::process::Child,
    address: String,
    runtime: std::path::PathBuf,
}

impl KeyringBus {
    /// `None` (with a note) when dbus-daemon or gnome-keyring-daemon is missing, unless the
    /// keyring is required.
    fn start(data: &Path, runtime: &Path) -> Option<KeyringBus> {
        use std::io::BufRead;
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(runtime).unwrap();
        std::fs::set_permissions(runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
        let spawned = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address=1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        let Ok(mut bus) = spawned else {
            skip_or_fail("dbus-daemon is missing");
            return None;
        };
        let mut address = String::new();
        std::io::BufReader::new(bus.stdout.take().unwrap())
            .read_line(&mut address)
            .unwrap();
        let bus = KeyringBus {
            bus,
            address: address.trim().to_owned(),
            runtime: runtime.to_owned(),
        };
        let unlocked = Command::new("gnome-keyring-daemon")
            .args(["--unlock", "--components=secrets"])
            .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
            .env("XDG_DATA_HOME", data)
            .env("XDG_RUNTIME_DIR", runtime)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .and_then(|mut child| {
                child.stdin.take().unwrap().write_all(b"mint-it")?;
                child.wait()
            })
            .is_ok_and(|status| status.success());
        if !unlocked {
            skip_or_fail("gnome-keyring-daemon is missing or cannot unlock");
        }
        unlocked.then_some(bus)
    }

    /// `command` on this bus.
    fn on(&self, command: &mut Command, data: &Path) {
        command
            .env("DBUS_SESSION_BUS_ADDRESS", &self.address)
            .env("XDG_DATA_HOME", data)
            .env("XDG_RUNTIME_DIR", &self.runtime);
    }
}

impl Drop for KeyringBus {
    fn drop(&mut self) {
        let _ = self.bus.kill();
        let _ = self.bus.wait();
    }
}

#[test]
fn issue_23_secret_service_item_added_from_another_session_is_loaded_on_reload() {
    const CANARY_A1: &str = "canary-ss-first-Jm2xQ8rV4tLw";
    const CANARY_A2: &str = "canary-ss-second-Pz6cN1bK9sHd";
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let Some(bus_a) = KeyringBus::start(&data, &dir.path().join("run-a")) else {
        return;
    };
    let ca_dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(ca_dir.path(), EchoConfig::default());
    let port = peer.server.port();
    let home = MintHome::bare();
    let service = unique_service();
    let on = |bus: &KeyringBus, args: &[&str], input: &str| {
        let mut command = headless(&mint_bin(), &home, &service, &[]);
        bus.on(&mut command, &data);
        run(command.args(args), input)
    };
    let add = |name| {
        [
            "alias",
            "add",
            name,
            "--host",
            "127.0.0.1",
            "--secret-stdin",
        ]
    };

    succeeds(&on(&bus_a, &["init"], ""));
    succeeds(&on(&bus_a, &add("a1"), CANARY_A1));
    home.write_private("policy.yaml", &policy(&allow("a1", "a1", port, "GET", "")));
    let issued = succeeds(&on(&bus_a, &["cap", "issue", "--agent", "mino"], ""));
    let cap = issued
        .split_whitespace()
        .find(|word| word.starts_with("mint_cap_"))
        .unwrap()
        .to_owned();
    let mut command = headless(&mint_bin(), &home, &service, &[]);
    bus_a.on(&mut command, &data);
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--upstream-ca"])
        .arg(&peer.ca_file)
        .stderr(Stdio::piped());
    let broker = home.start_broker(command, home.path().join("mint-serve.stderr"));

    // The second alias is added from another D-Bus session, with a keyring daemon of its own on
    // the same keyring files: the broker's daemon reloads them and lists an item it does not
    // serve. The alias file changes, so the broker reloads and must still load `a2`.
    // gnome-keyring notices a change of its files by their modification time, to the second:
    // a change within the second of its own last write goes unseen, so wait as a person would.
    // The second daemon starts now, as the operator's second session did: one started earlier
    // would write back its older view of the files and drop `a1`.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let Some(bus_b) = KeyringBus::start(&data, &dir.path().join("run-b")) else {
        return;
    };
    let out = on(&bus_b, &add("a2"), CANARY_A2);
    assert!(!String::from_utf8_lossy(&out.stderr).contains(CANARY_A2));
    succeeds(&out);
    home.write_private(
        "policy.yaml",
        &policy(&format!(
            "{}{}",
            allow("a1", "a1", port, "GET", ""),
            allow("a2", "a2", port, "GET", "")
        )),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let response = loop {
        let response = curl(&[
            "-H",
            &format!("Mint-Capability: {cap}"),
            "-H",
            "Authorization: Bearer {{mint:a2}}",
            &broker.proxy_url(port, "/echo"),
        ]);
        if response.status == 200 || std::time::Instant::now() > deadline {
            break response;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    };
    assert_eq!(
        response.status,
        200,
        "{}\n{}",
        response.body,
        broker.stderr()
    );
    // It took the way around the daemon's missing object: the broker's daemon reloaded the
    // files and lists `a2` at a path it serves no object for (a reload before it noticed the
    // change found no item, and was tried again).
    let stderr = broker.stderr();
    assert!(stderr.contains("serves no object"), "{stderr}");
    assert!(stderr.contains("read it through GetSecrets"), "{stderr}");
    let upstream = peer.server.requests().last().unwrap().clone();
    assert_eq!(
        upstream.header("authorization"),
        Some(format!("Bearer {CANARY_A2}").as_str())
    );
    broker.assert_clean(response.everything(), &[CANARY_A1, CANARY_A2]);
    assert!(broker.audit_text().contains("policy_reloaded"));

    // The broker's own bus reads it too (`mint alias list` there), with no secret shown.
    let list = succeeds(&on(&bus_a, &["alias", "list"], ""));
    assert_eq!(list.matches("present").count(), 2, "{list}");
    assert!(!list.contains(CANARY_A1) && !list.contains(CANARY_A2));

    // `mint alias rm a2` there cannot delete an item its daemon serves no object for: refused up
    // front, the declaration kept, with what to do. From the session that added it, it works.
    let aliases_before = std::fs::read_to_string(home.path().join("aliases.yaml")).unwrap();
    let stderr = fails(&on(&bus_a, &["alias", "rm", "a2"], ""));
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    assert!(
        stderr.contains("lists an item it does not serve"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(home.path().join("aliases.yaml")).unwrap(),
        aliases_before
    );
    let removed = succeeds(&on(&bus_b, &["alias", "rm", "a2"], ""));
    assert!(removed.contains("Deleted its secret"), "{removed}");
}

/// Issue 23: in a container whose seccomp profile forbids the kernel key system calls (Docker's
/// default does), the keyutils backend says so and names the ways that work there, instead of
/// advising a session keyring; nothing is changed, no secret shown. The filter is installed by
/// `tests/python/no_keyctl.py` (x86_64; elsewhere the test has nothing to check).
#[test]
fn issue_23_a_seccomp_forbidden_kernel_keyring_names_the_ways_that_work() {
    let home = MintHome::bare();
    let service = unique_service();
    succeeds(&mint(&home, &service, &[], &["init"], ""));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/no_keyctl.py");
    let keyutils = [("MINT_KEYRING_BACKEND", "keyutils")];
    let forbidden = |args: &[&str], input: &str| {
        let mut command = headless(Path::new("python3"), &home, &service, &keyutils);
        command.arg(&script).arg(mint_bin()).args(args);
        run(&mut command, input)
    };
    let probe = forbidden(&["--version"], "");
    if probe.status.code() == Some(125) {
        eprintln!("note: no seccomp filter on this machine; nothing to check");
        return;
    }
    let aliases_before = std::fs::read_to_string(home.path().join("aliases.yaml")).unwrap();
    let add = [
        "alias",
        "add",
        "github",
        "--host",
        "api.github.com",
        "--secret-stdin",
    ];
    let stderr = fails(&forbidden(&add, CANARY));
    for needle in [
        "refused the keyring system calls",
        "seccomp",
        "--source env:VAR",
        "nothing was changed",
    ] {
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
    assert!(!stderr.contains("keyctl session -"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(home.path().join("aliases.yaml")).unwrap(),
        aliases_before
    );

    // Declared by hand: list, doctor and serve say the same.
    home.write_private(
        "aliases.yaml",
        "aliases:\n  - name: github\n    hosts: [api.github.com]\n",
    );
    let list = forbidden(&["alias", "list"], "");
    assert_eq!(list.status.code(), Some(1), "{list:?}");
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(text.contains("refused the keyring system calls"), "{text}");
    let doctor = forbidden(&["doctor"], "");
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert_eq!(doctor.status.code(), Some(1), "{text}");
    assert!(text.contains("forbidden here (seccomp)"), "{text}");
    let stderr = fails(&forbidden(&["serve", "--listen", "127.0.0.1:0"], ""));
    assert!(
        stderr.contains("refused the keyring system calls"),
        "{stderr}"
    );
    // `rm` cannot delete what it cannot reach: refused, the declaration kept.
    let stderr = fails(&forbidden(&["alias", "rm", "github"], ""));
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    assert!(
        std::fs::read_to_string(home.path().join("aliases.yaml"))
            .unwrap()
            .contains("github")
    );
}
