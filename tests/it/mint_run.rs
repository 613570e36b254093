//! `mint run` and `mint env` (issue 16): unmodified clients configured by nothing but the
//! environment `mint run` gives them (curl, Python `requests` and `httpx2` reading their key from
//! `GITHUB_TOKEN`, Node's undici, git against a smart-HTTP server over TLS; the MCP Python SDK is
//! in proxy_mcp.rs) reach a `--resolve`-pinned upstream through an intercepted tunnel, with the
//! real secret there and a scrubbed answer here. `mint run` itself runs with bogus inherited CA
//! and proxy variables and a `GITHUB_TOKEN` of its own, which it must overwrite. The capability
//! is revoked however the child ends, the exit status is passed through, signals are forwarded,
//! and the token never shows in a process's arguments, Mint's output or logs, or the audit log.
//!
//! `mint run --user nobody` (these tests run as root, as CI does) runs the child as `nobody`: it
//! still reaches the upstream, but cannot read Mint's home nor issue itself a capability, and
//! sees no `MINT_*` variable; `--user` is refused when not root, for an unknown user, and when
//! the session keyring to hand on holds keys. A proxy off loopback needs `--remote-proxy`.
//! `mint env` issues nothing for a closed stdout and takes the capability back when its lines
//! cannot be written.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mint_tests::broker::{MintHome, mint_bin, request_header};
use mint_tests::interception::{
    CANARY, GIT_CANARY, GIT_MAIN, GitLab, INHERITED, Setup, SetupConfig, everything,
};
use mint_tests::repo_root;

/// A set-up whose alias `echo` declares `env: [GITHUB_TOKEN, GH_TOKEN]`.
fn setup() -> Setup {
    Setup::start_with(SetupConfig {
        echo_alias: "    env: [GITHUB_TOKEN, GH_TOKEN]\n",
        ..SetupConfig::default()
    })
}

/// The warning `mint run` prints when it runs as root without `--user`.
const ROOT_WARNING: &str = "mint: warning: the agent runs as root";

/// Whether this test runs as root (`/proc/self` belongs to the effective uid).
fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").unwrap().uid() == 0
}

/// The token in a proxy URL `http://AGENT:TOKEN@HOST:PORT`.
fn token_of(proxy_url: &str) -> String {
    let userinfo = proxy_url
        .strip_prefix("http://")
        .and_then(|rest| rest.split_once('@'))
        .unwrap()
        .0;
    userinfo.split_once(':').unwrap().1.to_owned()
}

/// The one capability `mint run` issued: asserts it is revoked, and that its agent is `mino`.
#[track_caller]
fn assert_revoked(setup: &Setup, count: usize) {
    let issued = setup.issued_capabilities();
    assert_eq!(issued.len(), count, "{issued:?}");
    for capability in issued {
        assert_eq!(capability["revoked"], true, "{capability}");
        assert_eq!(capability["agent"], "mino", "{capability}");
    }
}

/// The echo upstream's answer says the request carried `Authorization: Bearer [mint:redacted]`
/// (it echoes what it got, the canary, which Mint scrubbed on the way back).
#[track_caller]
fn assert_scrubbed_echo(body: &str) {
    let body: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{body}"));
    assert!(
        body["headers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|pair| pair[0] == "authorization" && pair[1] == "Bearer [mint:redacted]"),
        "{body}"
    );
}

/// The last request the echo upstream got carried the canary.
#[track_caller]
fn assert_upstream_got_the_secret(setup: &Setup) {
    let requests = setup.peer.server.requests();
    let seen = requests.last().unwrap();
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {CANARY}").as_str())
    );
    assert!(seen.header_names_starting_with("proxy-").is_empty());
}

#[test]
fn issue_16_mint_run_curl_reaches_the_upstream_and_the_capability_is_revoked() {
    let setup = setup();
    let output = setup
        .mint_run(&[])
        .args([
            "curl",
            "-sS",
            "--fail-with-body",
            "-H",
            "Authorization: Bearer {{mint:echo}}",
        ])
        .arg(setup.url("/echo?client=curl"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let printed = everything(&output);
    assert!(output.status.success(), "{printed}");
    assert_scrubbed_echo(&String::from_utf8_lossy(&output.stdout));
    assert_upstream_got_the_secret(&setup);
    // `mint run` printed nothing of its own but, as root, that the agent runs as root.
    let stderr = String::from_utf8_lossy(&output.stderr);
    if running_as_root() {
        assert_eq!(stderr.lines().count(), 1, "{printed}");
        assert!(stderr.starts_with(ROOT_WARNING), "{printed}");
        assert!(stderr.contains("--user NAME"), "{printed}");
    } else {
        assert!(stderr.is_empty(), "{printed}");
    }
    assert_revoked(&setup, 1);
    let decision = setup
        .broker
        .audit_records()
        .into_iter()
        .find(|r| r["phase"] == "decision" && r["method"] == "GET")
        .unwrap();
    assert_eq!(decision["agent"], "mino", "{decision}");
    assert_eq!(decision["decision"], "allow", "{decision}");
    setup.assert_no_canary(&printed);
}

#[test]
fn issue_16_mint_run_overwrites_inherited_ca_proxy_and_alias_variables() {
    let setup = setup();
    // The child reports the modes of the bundle's directory and files, then its environment.
    let script = r#"stat -c '%a' "$(dirname "$SSL_CERT_FILE")" "$SSL_CERT_FILE" "$NODE_EXTRA_CA_CERTS"; echo ---; env"#;
    let output = setup
        .mint_run(&[])
        .args(["sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let printed = everything(&output);
    assert!(output.status.success(), "{printed}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let (modes, env) = stdout.split_once("---\n").unwrap();
    assert_eq!(modes, "700\n644\n644\n", "{printed}");
    let env: HashMap<&str, &str> = env.lines().filter_map(|l| l.split_once('=')).collect();

    let proxy = env["HTTPS_PROXY"];
    for name in ["https_proxy", "HTTP_PROXY", "http_proxy"] {
        assert_eq!(env[name], proxy, "{name}");
    }
    let token = token_of(proxy);
    assert!(token.starts_with("mint_cap_"), "{proxy}");
    assert_eq!(
        proxy,
        format!("http://mino:{token}@{}", setup.broker.addr())
    );
    assert_eq!(env["NO_PROXY"], "localhost,127.0.0.1,::1");
    assert_eq!(env["no_proxy"], "localhost,127.0.0.1,::1");
    assert!(!env.contains_key("ALL_PROXY"), "{printed}");
    let bundle = env["SSL_CERT_FILE"];
    assert!(bundle.ends_with("/ca-bundle.pem"), "{bundle}");
    for name in [
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "AWS_CA_BUNDLE",
        "PIP_CERT",
    ] {
        assert_eq!(env[name], bundle, "{name}");
    }
    let ca = env["NODE_EXTRA_CA_CERTS"];
    assert_eq!(env["DENO_CERT"], ca);
    assert_eq!(Path::new(ca).parent(), Path::new(bundle).parent());
    assert_eq!(env["GITHUB_TOKEN"], "{{mint:echo}}");
    assert_eq!(env["GH_TOKEN"], "{{mint:echo}}");
    for (name, value) in INHERITED {
        assert!(
            !stdout.contains(value),
            "inherited {name} survived: {printed}"
        );
    }
    // The bundle's directory is gone once `mint run` has exited; the capability is revoked.
    assert!(!Path::new(bundle).parent().unwrap().exists(), "{bundle}");
    assert_revoked(&setup, 1);
    assert!(!setup.broker.audit_text().contains(&token));
    assert!(!setup.broker.stderr().contains(&token));
    assert!(!String::from_utf8_lossy(&output.stderr).contains(&token));
}

#[test]
fn issue_16_mint_run_alias_narrows_the_capability_and_its_variables() {
    let setup = setup();
    let output = setup
        .mint_run(&["--alias", "elsewhere", "--ttl", "5m"])
        .args(["sh", "-c", "echo \"token=${GITHUB_TOKEN-unset}\"; curl -sS -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer {{mint:echo}}' \"$0\"", &setup.url("/echo")])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let printed = everything(&output);
    assert!(output.status.success(), "{printed}");
    // Only the aliases of the capability set their variables; the `env` names of the others
    // are removed, so an inherited key never reaches the agent either.
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(stdout, "token=unset\n403", "{printed}");
    let issued = setup.issued_capabilities();
    assert_eq!(issued[0]["aliases"], serde_json::json!(["elsewhere"]));
    assert_revoked(&setup, 1);
    setup.assert_no_canary(&printed);
}

/// A Python one-liner: `requests` and `httpx2` both send `Authorization: Bearer $GITHUB_TOKEN`
/// to the URL in argv[1], configured by the environment alone (proxy and CA).
const PYTHON_CLIENTS: &str = r#"
import json, os, sys
import httpx2, requests
url = sys.argv[1]
headers = {"Authorization": "Bearer " + os.environ["GITHUB_TOKEN"]}
r = requests.get(url, headers=headers, timeout=20)
h = httpx2.get(url, headers=headers, timeout=20)
print(json.dumps({"requests": [r.status_code, r.text], "httpx": [h.status_code, h.text]}))
"#;

#[test]
fn issue_16_mint_run_python_requests_and_httpx_read_their_key_from_the_environment() {
    let setup = setup();
    let python = repo_root().join(".venv/bin/python");
    assert!(python.exists(), "run the setup_mcp_clients step of .ci/run");
    let output = setup
        .mint_run(&[])
        .arg(python)
        .args(["-c", PYTHON_CLIENTS])
        .arg(setup.url("/echo?client=python"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let printed = everything(&output);
    assert!(output.status.success(), "{printed}");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    for client in ["requests", "httpx"] {
        assert_eq!(json[client][0], 200, "{client}: {printed}");
        assert_scrubbed_echo(json[client][1].as_str().unwrap());
    }
    let requests = setup.peer.server.requests();
    assert_eq!(requests.len(), 2);
    for seen in &requests.snapshot() {
        assert_eq!(
            seen.header("authorization"),
            Some(format!("Bearer {CANARY}").as_str())
        );
    }
    assert_revoked(&setup, 1);
    setup.assert_no_canary(&printed);
}

#[test]
fn issue_16_mint_run_node_undici() {
    let setup = setup();
    let node = repo_root().join("tests/node");
    assert!(
        node.join("node_modules/undici/package.json").exists(),
        "run the setup_mcp_clients step of .ci/run"
    );
    let output = setup
        .mint_run(&["--alias", "echo"])
        .arg("node")
        .arg(node.join("https_interception_client.mjs"))
        .arg(setup.url("/echo?client=undici"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let printed = everything(&output);
    assert!(output.status.success(), "{printed}");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["status"], 200, "{printed}");
    assert_scrubbed_echo(json["body"].as_str().unwrap());
    assert_upstream_got_the_secret(&setup);
    assert_revoked(&setup, 1);
    setup.assert_no_canary(&printed);
}

#[test]
fn issue_16_mint_run_git_ls_remote_against_a_smart_http_server_over_tls() {
    let lab = GitLab::start(false);
    let (broker, upstream, home) = (&lab.broker, &lab.upstream, &lab.home);
    let git_home = lab.git_home();
    let mut command = home.mint();
    command
        .envs(INHERITED.iter().copied())
        .env("HOME", &git_home)
        .env("XDG_CONFIG_HOME", &git_home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0");
    for inherited in ["GIT_ASKPASS", "SSH_ASKPASS", "GIT_CONFIG_GLOBAL", "GIT_DIR"] {
        command.env_remove(inherited);
    }
    let output = command
        .args(["run", "--agent", "mino", "--proxy", &broker.base, "--"])
        .args([
            "git",
            "-c",
            "http.extraHeader=Authorization: Bearer {{mint:git}}",
            "ls-remote",
        ])
        .arg(lab.url())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let printed = everything(&output);
    assert!(output.status.success(), "{printed}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("{GIT_MAIN}\tHEAD\n{GIT_MAIN}\trefs/heads/main\n"),
        "{printed}"
    );
    let requests = upstream.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(
        request_header(requests[0].as_bytes(), "authorization"),
        Some(format!("Bearer {GIT_CANARY}"))
    );
    broker.assert_clean(&printed, &[GIT_CANARY]);
    let list = home
        .mint()
        .args(["cap", "list", "--json"])
        .output()
        .unwrap();
    let list: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["revoked"], true, "{list}");
}

#[test]
fn issue_16_mint_run_passes_the_exit_status_through_and_revokes() {
    let setup = setup();
    let status = setup
        .mint_run(&[])
        .args(["sh", "-c", "exit 3"])
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(3));
    assert_revoked(&setup, 1);
    // Killed by a signal: 128+N.
    let status = setup
        .mint_run(&[])
        .args(["sh", "-c", "kill -KILL $$"])
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(128 + 9));
    assert_revoked(&setup, 2);
    // A command that does not exist: 127, and nothing left live.
    let output = setup
        .mint_run(&[])
        .arg("/nonexistent/agent")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(127), "{}", everything(&output));
    assert_revoked(&setup, 3);
}

/// Starts `mint run -- sh -c SCRIPT` with stdout piped, and returns it once the child printed
/// its first line (returned too).
fn start_child(
    setup: &Setup,
    script: &str,
) -> (
    std::process::Child,
    String,
    BufReader<std::process::ChildStdout>,
) {
    start_child_with(setup, &[], script)
}

/// [`start_child`] with `mint run` arguments `args`.
fn start_child_with(
    setup: &Setup,
    args: &[&str],
    script: &str,
) -> (
    std::process::Child,
    String,
    BufReader<std::process::ChildStdout>,
) {
    let mut command = setup.mint_run(args);
    command.args(["sh", "-c", script]);
    if args.contains(&"--user") {
        command = in_own_session_keyring(command);
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    (child, first, stdout)
}

fn kill(pid: u32, signal: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// Waits for `child` (bounded), killing it on a hang.
#[track_caller]
fn wait_bounded(child: &mut std::process::Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("mint run did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` still exists.
fn alive(pid: &str) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn issue_16_signals_to_mint_run_are_forwarded_then_the_capability_is_revoked() {
    let setup = setup();
    // The child traps each signal and exits with its own status; it first prints its pid and
    // its proxy URL (so the test knows the token).
    let script = r#"trap 'exit 40' INT; trap 'exit 41' TERM; trap 'exit 42' HUP; trap 'exit 43' QUIT; trap 'exit 44' USR1; trap 'exit 45' USR2; trap 'exit 46' ALRM; echo "$$ $HTTPS_PROXY"; while :; do sleep 0.05; done"#;
    let signals = [
        ("INT", 40),
        ("TERM", 41),
        ("HUP", 42),
        ("QUIT", 43),
        ("USR1", 44),
        ("USR2", 45),
        ("ALRM", 46),
    ];
    for (count, (signal, code)) in signals.into_iter().enumerate() {
        let (mut mint, first, mut rest) = start_child(&setup, script);
        let (child_pid, proxy) = first.trim().split_once(' ').unwrap();
        let token = token_of(proxy);
        // The token travels in the environment only: never in an argument list.
        for pid in [mint.id().to_string(), child_pid.to_owned()] {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
            assert!(
                !String::from_utf8_lossy(&cmdline).contains(&token),
                "the token is in the arguments of {pid}"
            );
        }
        // While it runs, the capability works and is live.
        let live = setup.issued_capabilities();
        assert_eq!(live[count]["revoked"], false);
        kill(mint.id(), signal);
        let status = wait_bounded(&mut mint);
        assert_eq!(status.code(), Some(code), "{signal}");
        assert!(!alive(child_pid), "the child outlived mint run");
        let mut tail = String::new();
        std::io::Read::read_to_string(&mut rest, &mut tail).unwrap();
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut mint.stderr.take().unwrap(), &mut stderr).unwrap();
        assert!(!stderr.contains(&token), "{stderr}");
        assert_revoked(&setup, count + 1);
    }
    // A child that does not catch SIGTERM dies of it: mint run exits 128+15 and still revokes.
    let (mut mint, first, _rest) = start_child(&setup, "echo $$; exec sleep 30");
    kill(mint.id(), "TERM");
    assert_eq!(wait_bounded(&mut mint).code(), Some(128 + 15));
    assert!(!alive(first.trim()));
    assert_revoked(&setup, signals.len() + 1);
    assert!(
        setup
            .broker
            .stderr()
            .lines()
            .all(|l| !l.contains("mint_cap_"))
    );
}

#[test]
fn issue_16_mint_run_without_a_broker_says_how_to_start_one() {
    let setup = setup();
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let output = setup
        .home
        .mint()
        .args([
            "run",
            "--proxy",
            &format!("http://127.0.0.1:{port}"),
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "mint: no Mint broker answers at http://127.0.0.1:{port} (connection refused); start one with `mint serve`"
        )),
        "{stderr}"
    );
    assert!(setup.issued_capabilities().is_empty());

    // MINT_PROXY_URL is the default; a broker of another home refuses the capability, which is
    // revoked again.
    let other = MintHome::new(
        "version: 1\ndefault: deny\nrules: []\n",
        "aliases: []\n",
        &[],
    );
    let made = other.mint().args(["ca", "rotate"]).output().unwrap();
    assert!(made.status.success(), "{}", everything(&made));
    let output = other
        .mint()
        .env("MINT_PROXY_URL", &setup.broker.base)
        .args(["run", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("serves another MINT_HOME"), "{stderr}");
    let list = other
        .mint()
        .args(["cap", "list", "--json"])
        .output()
        .unwrap();
    let list: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(list[0]["revoked"], true, "{list}");
}

#[test]
fn issue_16_mint_env_prints_the_settings_for_a_shell() {
    let setup = setup();
    let output = setup
        .home
        .mint()
        .args([
            "env",
            "--agent",
            "mino",
            "--ttl",
            "1h",
            "--proxy",
            &setup.broker.base,
        ])
        .output()
        .unwrap();
    let printed = everything(&output);
    assert!(output.status.success(), "{printed}");
    let lines = String::from_utf8(output.stdout).unwrap();
    assert!(
        lines.contains("export GITHUB_TOKEN='{{mint:echo}}'\n"),
        "{lines}"
    );
    assert!(lines.contains("unset ALL_PROXY\n"), "{lines}");
    let bundle = setup.home.path().join("ca-bundle.pem");
    assert!(
        lines.contains(&format!("export SSL_CERT_FILE='{}'\n", bundle.display())),
        "{lines}"
    );
    let mode = std::fs::metadata(&bundle).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
    // The note on stderr names the capability, never its token.
    let issued = setup.issued_capabilities();
    assert_eq!(issued.len(), 1);
    assert_eq!(issued[0]["revoked"], false);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(issued[0]["id"].as_str().unwrap()),
        "{stderr}"
    );
    assert!(!stderr.contains("mint_cap_"), "{stderr}");

    // A shell that evaluates the lines reaches the upstream with curl, over inherited values.
    let script = format!(
        "{lines}\ncurl -sS --fail-with-body -H \"Authorization: Bearer $GITHUB_TOKEN\" '{}'",
        setup.url("/echo?client=mint-env")
    );
    let curl = Command::new("sh")
        .args(["-c", &script])
        .envs(INHERITED.iter().copied())
        .output()
        .unwrap();
    let printed = everything(&curl);
    assert!(curl.status.success(), "{printed}");
    assert_scrubbed_echo(&String::from_utf8_lossy(&curl.stdout));
    assert_upstream_got_the_secret(&setup);
    setup.assert_no_canary(&printed);

    // fish and env-file syntax.
    for (shell, expected) in [
        ("fish", "set -gx GH_TOKEN '{{mint:echo}}'\n"),
        ("env", "\nGH_TOKEN={{mint:echo}}\n"),
    ] {
        let output = setup
            .home
            .mint()
            .args(["env", "--shell", shell])
            .output()
            .unwrap();
        let text = String::from_utf8(output.stdout).unwrap();
        assert!(text.contains(expected), "{shell}: {text}");
    }
    assert_eq!(setup.issued_capabilities().len(), 3);
}

/// `nobody`'s passwd entry: (uid, gid, home).
fn nobody() -> (String, String, String) {
    let output = Command::new("getent")
        .args(["passwd", "nobody"])
        .output()
        .unwrap();
    assert!(output.status.success(), "no user nobody on this machine");
    let entry = String::from_utf8(output.stdout).unwrap();
    let fields: Vec<&str> = entry.trim().split(':').collect();
    (
        fields[2].to_owned(),
        fields[3].to_owned(),
        fields[5].to_owned(),
    )
}

/// Whether `keyctl` (Debian's keyutils) is installed: CI's test run needs it.
fn have_keyctl() -> bool {
    Command::new("keyctl")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// `command` run in a session keyring of its own (`keyctl session - PROGRAM ARGS`), as docs/
/// agents.md says to start `mint run --user`: the test run's own session keyring (CI's holds
/// the keyring tests' keys) must not reach the agent, and `mint run --user` refuses to hand
/// it on. Without keyctl the command is left as it is (no session keyring to inherit then).
/// Program, arguments and environment are carried over; set stdio on the result.
fn in_own_session_keyring(command: Command) -> Command {
    if !have_keyctl() {
        return command;
    }
    let mut wrapped = Command::new("keyctl");
    wrapped
        .args(["session", "-"])
        .arg(command.get_program())
        .args(command.get_args());
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => wrapped.env(name, value),
            None => wrapped.env_remove(name),
        };
    }
    wrapped
}

/// `stderr` without keyctl's "Joined session keyring: N" line.
fn without_keyctl_note(stderr: &[u8]) -> String {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|line| !line.starts_with("Joined session keyring"))
        .map(|line| format!("{line}\n"))
        .collect()
}

#[test]
fn issue_16_mint_run_user_runs_the_agent_as_that_user_away_from_mints_secrets() {
    if !running_as_root() {
        eprintln!("skipped: `mint run --user` needs root, and this test does not run as root");
        return;
    }
    let setup = setup();
    let (uid, gid, home) = nobody();

    // curl as nobody reaches the upstream through Mint, the secret injected there and scrubbed
    // from the answer; nothing printed of Mint's own (no root warning).
    let mut command = setup.mint_run(&["--user", "nobody"]);
    command
        .args([
            "curl",
            "-sS",
            "--fail-with-body",
            "-H",
            "Authorization: Bearer {{mint:echo}}",
        ])
        .arg(setup.url("/echo?client=curl-as-nobody"));
    let output = in_own_session_keyring(command)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let printed = everything(&output);
    assert!(output.status.success(), "{printed}");
    assert_scrubbed_echo(&String::from_utf8_lossy(&output.stdout));
    assert_upstream_got_the_secret(&setup);
    assert_eq!(without_keyctl_note(&output.stderr), "", "{printed}");
    assert_revoked(&setup, 1);
    setup.assert_no_canary(&printed);

    // Its ids (real, effective, saved, filesystem), its groups, its environment: no MINT_*
    // variable in any letter case, and nobody's HOME, USER and LOGNAME.
    let script = r#"id -u; grep -E '^(Uid|Gid|Groups):' /proc/self/status; stat -c '%u %a' "$(dirname "$SSL_CERT_FILE")"; echo ---; env"#;
    let mut command = setup.mint_run(&["--user", "nobody"]);
    command
        .env("Mint_Extra", "from-the-operator")
        .env("mint_proxy_url", "http://127.0.0.1:1")
        .env("XDG_CONFIG_HOME", "/root/.config")
        .args(["sh", "-c", script]);
    let output = in_own_session_keyring(command)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let printed = everything(&output);
    assert!(output.status.success(), "{printed}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let (ids, env) = stdout.split_once("---\n").unwrap();
    let ids: Vec<Vec<&str>> = ids
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(ids[0], [uid.as_str()], "{printed}");
    assert_eq!(ids[1], ["Uid:", &uid, &uid, &uid, &uid], "{printed}");
    assert_eq!(ids[2], ["Gid:", &gid, &gid, &gid, &gid], "{printed}");
    // Exactly nobody's groups, as `id -G nobody` lists them.
    let groups = Command::new("id").args(["-G", "nobody"]).output().unwrap();
    let mut expected: Vec<String> = String::from_utf8(groups.stdout)
        .unwrap()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    expected.sort();
    let mut got: Vec<String> = ids[3].iter().skip(1).map(|g| (*g).to_owned()).collect();
    got.sort();
    assert_eq!(got, expected, "{printed}");
    // The CA files' directory is nobody's, and no one else can enter it.
    assert_eq!(ids[4], [uid.as_str(), "700"], "{printed}");
    let env: HashMap<&str, &str> = env.lines().filter_map(|l| l.split_once('=')).collect();
    let mint_vars: Vec<&&str> = env
        .keys()
        .filter(|name| name.to_ascii_uppercase().starts_with("MINT_"))
        .collect();
    assert!(mint_vars.is_empty(), "{mint_vars:?}");
    assert_eq!(env["HOME"], home);
    assert_eq!(env["USER"], "nobody");
    assert_eq!(env["LOGNAME"], "nobody");
    assert!(!env.contains_key("XDG_CONFIG_HOME"), "{printed}");
    assert_eq!(env["GITHUB_TOKEN"], "{{mint:echo}}");
    // Outside Mint's home, which nobody cannot enter.
    let bundle_dir = Path::new(env["SSL_CERT_FILE"]).parent().unwrap().to_owned();
    assert!(!bundle_dir.starts_with(setup.home.path()), "{printed}");
    assert_revoked(&setup, 2);

    // Mint's home is out of reach: its secrets, CA key and capabilities file; and the agent
    // cannot issue itself a capability, even when it knows where the home is.
    let home_dir = setup.home.path();
    let mut command = setup.mint_run(&["--user", "nobody"]);
    command.arg("cat").args([
        home_dir.join("secrets/echo"),
        home_dir.join("ca.key"),
        home_dir.join("capabilities.yaml"),
    ]);
    let output = in_own_session_keyring(command)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let printed = everything(&output);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    assert_eq!(
        without_keyctl_note(&output.stderr)
            .matches("Permission denied")
            .count(),
        3,
        "{printed}"
    );
    assert!(!printed.contains("PRIVATE KEY"), "{printed}");
    assert!(!printed.contains("mint_cap_"), "{printed}");
    assert!(!printed.contains("capabilities:"), "{printed}");
    setup.assert_no_canary(&printed);
    assert_revoked(&setup, 3);

    let issue = format!(
        "MINT_HOME='{}' '{}' cap issue --agent rogue --ttl 1h",
        home_dir.display(),
        mint_bin().display()
    );
    let mut command = setup.mint_run(&["--user", "nobody"]);
    command.args(["sh", "-c", &issue]);
    let output = in_own_session_keyring(command)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let printed = everything(&output);
    assert!(!output.status.success(), "{printed}");
    assert!(!printed.contains("mint_cap_"), "{printed}");
    let issued = setup.issued_capabilities();
    assert!(issued.iter().all(|c| c["agent"] != "rogue"), "{issued:?}");
    assert_revoked(&setup, 4);

    // A numeric uid names the same user.
    let mut command = setup.mint_run(&["--user", &uid]);
    command.args(["id", "-un"]);
    let output = in_own_session_keyring(command)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "nobody\n",
        "{}",
        everything(&output)
    );
    assert_revoked(&setup, 5);

    // A user with supplementary groups, if this machine has one (postgres in ssl-cert, say),
    // gets them all, as initgroups would; nobody has none to tell apart.
    let groups = Command::new("getent").arg("group").output().unwrap();
    let member = String::from_utf8(groups.stdout)
        .unwrap()
        .lines()
        .find_map(|line| {
            let members = line.rsplit(':').next()?;
            members
                .split(',')
                .find(|m| !m.is_empty() && *m != "root")
                .map(str::to_owned)
        });
    if let Some(member) = member {
        let expected = Command::new("id").args(["-G", &member]).output().unwrap();
        let mut command = setup.mint_run(&["--user", &member]);
        command.args(["id", "-G"]);
        let output = in_own_session_keyring(command)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let sorted = |bytes: &[u8]| {
            let mut ids: Vec<String> = String::from_utf8_lossy(bytes)
                .split_whitespace()
                .map(str::to_owned)
                .collect();
            ids.sort();
            ids
        };
        assert!(output.status.success(), "{}", everything(&output));
        assert_eq!(sorted(&output.stdout), sorted(&expected.stdout), "{member}");
    }
    let count = setup.issued_capabilities().len();

    // Signals reach the command as nobody (the switch replaced itself with it, same pid).
    let (mut mint, first, _rest) = start_child_with(
        &setup,
        &["--user", "nobody"],
        "trap 'exit 41' TERM; echo $$; while :; do sleep 0.05; done",
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", first.trim())).unwrap();
    assert!(
        status
            .lines()
            .any(|l| l.split_whitespace().eq(["Uid:", &uid, &uid, &uid, &uid])),
        "{status}"
    );
    kill(mint.id(), "TERM");
    assert_eq!(wait_bounded(&mut mint).code(), Some(41));
    assert_revoked(&setup, count + 1);
    // The bundle directory went with mint run.
    assert!(!bundle_dir.exists(), "{}", bundle_dir.display());
}

#[test]
fn issue_16_mint_run_user_is_refused_when_not_root_for_unknown_users_and_for_root() {
    let setup = setup();
    // An unknown user, and root itself: refused before anything is issued.
    for (user, expected) in [
        (
            "mint-no-such-user-q7z",
            "mint: no user `mint-no-such-user-q7z` on this machine",
        ),
        ("root", "mint: `--user root` is root"),
        ("0", "mint: `--user 0` is root"),
    ] {
        if !running_as_root() {
            break;
        }
        let output = setup
            .mint_run(&["--user", user])
            .args(["id", "-u"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let printed = everything(&output);
        assert_eq!(output.status.code(), Some(2), "{printed}");
        assert!(output.stdout.is_empty(), "{printed}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{printed}");
        assert!(stderr.starts_with(expected), "{printed}");
        assert!(setup.issued_capabilities().is_empty());
    }

    // Not root: setpriv drops mint run itself to nobody (all its ids and groups).
    let have_setpriv = Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !running_as_root() || !have_setpriv {
        eprintln!("skipped the non-root case: it needs root and setpriv (util-linux) to drop to");
        return;
    }
    let run = setup.mint_run(&["--user", "nobody"]);
    let mut command = Command::new("setpriv");
    command
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .arg(run.get_program())
        .args(run.get_args())
        .args(["id", "-u"])
        .stdin(Stdio::null());
    for (name, value) in run.get_envs() {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    let output = command.output().unwrap();
    let printed = everything(&output);
    assert_eq!(output.status.code(), Some(2), "{printed}");
    assert!(output.stdout.is_empty(), "{printed}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{printed}");
    assert!(
        stderr.starts_with("mint: `--user nobody` needs root: mint run switches the agent to another user only when it runs as root (it runs as uid "),
        "{printed}"
    );
    assert!(setup.issued_capabilities().is_empty());
}

#[test]
fn issue_16_mint_run_user_refuses_to_hand_on_a_session_keyring_with_keys() {
    if !running_as_root() || !have_keyctl() {
        eprintln!("skipped: needs root (for --user) and keyctl (Debian's keyutils)");
        return;
    }
    let setup = setup();
    // A key in the session keyring `mint run` runs in, as `mint alias set` with the keyutils
    // backend leaves one: nobody would possess it.
    let key = "canary-keyring-Wd8Rz3Lq6Vn1";
    let script = format!("keyctl add user mint-run-user-test {key} @s >/dev/null && exec \"$@\"",);
    let run = setup.mint_run(&["--user", "nobody"]);
    let mut command = Command::new("keyctl");
    command
        .args(["session", "-", "sh", "-c", &script, "sh"])
        .arg(run.get_program())
        .args(run.get_args())
        .args(["keyctl", "print", "%user:mint-run-user-test"])
        .stdin(Stdio::null());
    for (name, value) in run.get_envs() {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    let output = command.output().unwrap();
    let printed = everything(&output);
    assert_eq!(output.status.code(), Some(2), "{printed}");
    assert!(!printed.contains(key), "{printed}");
    let stderr = without_keyctl_note(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{printed}");
    assert!(
        stderr.starts_with(
            "mint: the session keyring `mint run` would hand to the agent belongs to uid 0"
        ),
        "{printed}"
    );
    assert!(
        stderr.contains("`keyctl session - mint run --user ...`"),
        "{printed}"
    );
    // It was issued before the check, in the child: revoked again.
    assert_revoked(&setup, 1);
}

#[test]
fn issue_16_mint_run_and_env_send_the_token_off_loopback_only_with_remote_proxy() {
    let setup = setup();
    // 0.0.0.0 is not a loopback address, but Linux connects it to this machine: the broker
    // answers there, so the flag's effect is seen end to end.
    let port = setup.broker.addr().rsplit_once(':').unwrap().1.to_owned();
    let remote = format!("http://0.0.0.0:{port}");
    let refused = setup
        .home
        .mint()
        .args(["run", "--agent", "mino", "--proxy", &remote, "--", "true"])
        .output()
        .unwrap();
    let printed = everything(&refused);
    assert_eq!(refused.status.code(), Some(2), "{printed}");
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr),
        format!(
            "mint: the proxy `http://0.0.0.0:{port}` is not on this machine: mint would send the capability token to it (in clear text over plain HTTP); point --proxy or MINT_PROXY_URL at a broker on loopback (127.0.0.1, ::1, localhost), or pass --remote-proxy to send it there anyway\n"
        )
    );
    // MINT_PROXY_URL too, and `mint env`.
    let refused = setup
        .home
        .mint()
        .env("MINT_PROXY_URL", &remote)
        .args(["env"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", everything(&refused));
    assert!(refused.stdout.is_empty());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--remote-proxy"));
    assert!(setup.issued_capabilities().is_empty());

    // With --remote-proxy it goes there.
    let mut command = setup.home.mint();
    command
        .args([
            "run",
            "--agent",
            "mino",
            "--proxy",
            &remote,
            "--remote-proxy",
            "--",
        ])
        .args([
            "curl",
            "-sS",
            "--fail-with-body",
            "-H",
            "Authorization: Bearer {{mint:echo}}",
        ])
        .arg(setup.url("/echo?client=remote-proxy"))
        .stdin(Stdio::null());
    let output = command.output().unwrap();
    let printed = everything(&output);
    assert!(output.status.success(), "{printed}");
    assert_scrubbed_echo(&String::from_utf8_lossy(&output.stdout));
    setup.assert_no_canary(&printed);
    assert_revoked(&setup, 1);
}

#[test]
fn issue_16_mint_env_issues_nothing_for_a_closed_stdout_and_revokes_when_it_cannot_write() {
    let setup = setup();
    // stdout closed: refused before issuing.
    let mut command = Command::new("sh");
    setup.home.mint_env(&mut command);
    let output = command
        .args(["-c", "exec \"$0\" env --proxy \"$1\" >&-"])
        .arg(mint_bin())
        .arg(&setup.broker.base)
        .output()
        .unwrap();
    let printed = everything(&output);
    assert_eq!(output.status.code(), Some(2), "{printed}");
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .starts_with("mint: stdout is closed or /dev/null: nothing was issued"),
        "{printed}"
    );
    assert!(setup.issued_capabilities().is_empty());

    // A pipe whose reader is gone (EPIPE: Rust ignores SIGPIPE), and a full disk: issued, then
    // revoked, and said so; the token is nowhere in what was printed.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    for (count, (stdout, problem)) in [
        (Stdio::from(writer), "Broken pipe"),
        (Stdio::from(full), "No space left on device"),
    ]
    .into_iter()
    .enumerate()
    {
        let output = setup
            .home
            .mint()
            .args(["env", "--proxy", &setup.broker.base])
            .stdout(stdout)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.starts_with(
                "mint: cannot write the output (the capability issued for it was revoked): "
            ),
            "{stderr}"
        );
        assert!(stderr.contains(problem), "{stderr}");
        assert!(!stderr.contains("mint_cap_"), "{stderr}");
        let issued = setup.issued_capabilities();
        assert_eq!(issued.len(), count + 1, "{issued:?}");
        assert!(issued.iter().all(|c| c["revoked"] == true), "{issued:?}");
    }
}

/// `gh` as docs/agents.md's recipe runs it, for a GitHub Enterprise host (`GH_HOST`, the token in
/// `GH_ENTERPRISE_TOKEN` from the alias's `env`): github.com itself would need port 443, which a
/// test cannot pin. Its HTTP client is Go's: `HTTPS_PROXY` and `SSL_CERT_FILE` are all it needs.
#[test]
fn issue_16_mint_run_gh_api_against_an_enterprise_host_reads_its_token_from_the_alias_env() {
    assert!(
        Command::new("gh").arg("--version").output().is_ok(),
        "gh is missing: run the setup_clients step of .ci/run (apt-get install gh)"
    );
    let setup = Setup::start_with(SetupConfig {
        echo_alias: "    env: [GH_ENTERPRISE_TOKEN]\n",
        ..SetupConfig::default()
    });
    let config = tempfile::tempdir().unwrap();
    let host = format!("{}:{}", mint_tests::interception::HOST, setup.port());
    let gh = |endpoint: &str| {
        setup
            .mint_run(&["--alias", "echo"])
            .env("GH_HOST", &host)
            .env("GH_CONFIG_DIR", config.path())
            .env("GH_NO_UPDATE_NOTIFIER", "1")
            .env("GH_PROMPT_DISABLED", "1")
            .env("GH_ENTERPRISE_TOKEN", "ghp_inherited_must_be_overwritten")
            .args(["gh", "api", endpoint])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // `gh api /user` goes to https://HOST/api/v3/user with `Authorization: token ...`: the
    // upstream got the secret there (and has no such route: gh reports its 404).
    let output = gh("/user");
    let printed = everything(&output);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    assert!(printed.contains("HTTP 404"), "{printed}");
    let requests = setup.peer.server.requests();
    let seen = requests.last().unwrap();
    assert_eq!(seen.path, "/api/v3/user");
    assert_eq!(
        seen.header("authorization"),
        Some(format!("token {CANARY}").as_str())
    );
    setup.assert_no_canary(&printed);

    // A full URL on the same host: the echo of the request comes back scrubbed.
    let output = gh(&setup.url("/echo?client=gh"));
    let printed = everything(&output);
    assert!(output.status.success(), "{printed}");
    let body: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        body["headers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|pair| pair[0] == "authorization" && pair[1] == "token [mint:redacted]"),
        "{body}"
    );
    assert!(!printed.contains("ghp_inherited"), "{printed}");
    let seen = setup.peer.server.requests();
    assert_eq!(
        seen.last().unwrap().header("authorization"),
        Some(format!("token {CANARY}").as_str())
    );
    setup.assert_no_canary(&printed);
    assert_revoked(&setup, 2);
}
