//! Alias secrets from refreshed sources under a running `mint serve`: a command's output
//! (`source: {command: [...]}`). The value is read at start, cached, read again when its cache
//! time runs out (a rotated value is picked up, and answers are scrubbed of both), served from
//! the cache while the source fails, and refused (`503 secret_unavailable`) past the staleness
//! bound while other aliases keep working. Canary values never reach a log, the audit trail or
//! the agent. Waits here are bounded polls (hang guards), never timing assertions.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::time::{Duration, Instant};

use mint_tests::broker::{Broker, CurlResponse, MintHome, ScriptedUpstream, curl};
use mint_tests::echo_peer;
use mint_tests::echo_upstream::EchoConfig;

const OLD: &str = "canary-cmd-old-9Qe4Tz7Wm2";
const NEW: &str = "canary-cmd-new-3Rk8Vb5Jn6";
const STATIC: &str = "canary-static-file-6Gh2Lp4Ds";

fn policy(port: u16, aliases: &str) -> String {
    format!(
        "version: 1\ndefault: deny\nrules:\n  - id: remember\n    effect: allow\n    match:\n      alias: [{aliases}]\n      scheme: [http]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n"
    )
}

fn get(broker: &Broker, cap: &str, port: u16, alias: &str) -> CurlResponse {
    curl(&[
        "-H",
        &format!("Mint-Capability: {cap}"),
        "-H",
        &format!("Authorization: Bearer {{{{mint:{alias}}}}}"),
        &format!("{}/v1/proxy/http/127.0.0.1:{port}/x", broker.base),
    ])
}

/// Polls (bounded: a hang guard) until `done` holds.
#[track_caller]
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn events(broker: &Broker, reason: &str) -> usize {
    broker
        .audit_records()
        .iter()
        .filter(|r| r["phase"] == "event" && r["reason"] == reason)
        .count()
}

/// Replaces `secrets/<name>` whole (a new file renamed over it), so the command never reads a
/// half-written value.
#[track_caller]
fn replace_secret(home: &MintHome, name: &str, value: &str) {
    home.write_private(&format!("secrets/{name}.new"), value);
    std::fs::rename(
        home.path().join(format!("secrets/{name}.new")),
        home.path().join(format!("secrets/{name}")),
    )
    .unwrap();
}

#[track_caller]
fn assert_secrets_absent(broker: &Broker, seen: &[&CurlResponse], secrets: &[&str]) {
    for secret in secrets {
        for answer in seen {
            assert!(!answer.everything().contains(secret), "{}", answer.body);
        }
        broker.assert_secret_absent(secret);
    }
}

/// The program is run directly (no shell reads the alias file's words), its output is the
/// value, and it prints the value on stderr as well, which Mint never logs.
#[test]
fn a_command_secret_is_read_rotated_served_stale_then_refused_and_recovers() {
    let upstream = ScriptedUpstream::remembering_authorizations();
    let port = upstream.port();
    let dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(dir.path(), EchoConfig::default());
    // `$1` is the value file: the script prints it to stdout (the value) and stderr (never
    // logged). Mint hands `sh` these words as they are; only `sh -c` reads the script.
    let aliases = "aliases:\n  - name: cmd\n    hosts: [127.0.0.1]\n    source:\n      command: [sh, -c, 'cat \"$1\" >&2; exec cat \"$1\"', sh, $SECRETS/value]\n      cache: 1s\n      max_stale: 2s\n  - name: still\n    hosts: [127.0.0.1]\n    source: file:$SECRETS/still\n";
    let home = MintHome::new(
        &policy(port, "cmd, still"),
        aliases,
        &[("value", &format!("{OLD}\n")), ("still", STATIC)],
    );
    let cap = home.issue_capability("mino", &[]);
    let broker = home.serve(&peer.ca_file, &[]);

    let first = get(&broker, &cap, port, "cmd");
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body, "Bearer [mint:redacted]");
    let sent = String::from_utf8_lossy(&upstream.requests()[0]).into_owned();
    assert!(sent.contains(&format!("Bearer {OLD}\r\n")), "{sent}");

    // Rotation: the command prints a new value; a refresh picks it up without a reload.
    replace_secret(&home, "value", NEW);
    let mut answers = Vec::new();
    wait_until("the rotated value reaches the upstream", || {
        let answer = get(&broker, &cap, port, "cmd");
        assert_eq!(answer.status, 200, "{}", answer.body);
        let rotated = upstream
            .requests()
            .last()
            .is_some_and(|r| String::from_utf8_lossy(r).contains(NEW));
        answers.push(answer);
        rotated
    });
    // The upstream now hands back the old and the new value: both are scrubbed.
    let both = answers.last().unwrap();
    assert!(
        both.body.lines().all(|l| l == "Bearer [mint:redacted]"),
        "{}",
        both.body
    );
    assert!(both.body.lines().count() >= 2, "{}", both.body);
    assert_eq!(
        events(&broker, "policy_reloaded"),
        0,
        "a refresh is no reload"
    );

    // The command fails (its file is gone): the cached value serves until the staleness bound,
    // then the alias is refused while the other alias keeps working.
    std::fs::remove_file(home.path().join("secrets/value")).unwrap();
    let mut refused = None;
    wait_until("the stale alias is refused", || {
        let answer = get(&broker, &cap, port, "cmd");
        if answer.status == 503 {
            refused = Some(answer);
            return true;
        }
        assert_eq!(answer.status, 200, "{}", answer.body);
        answers.push(answer);
        false
    });
    let refused = refused.unwrap();
    assert_eq!(refused.json()["error"]["code"], "secret_unavailable");
    assert!(
        refused.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("alias `cmd`"),
        "{}",
        refused.body
    );
    assert_eq!(refused.header("mint-outcome"), Some("failed"));
    let id = refused.header("mint-request-id").unwrap().to_owned();
    assert_eq!(broker.outcome_of(&id)["reason"], "secret_unavailable");
    // The failure, then the bound: each reported once (the bound on the refresher's next tick).
    assert_eq!(events(&broker, "secret_refresh_failed"), 1);
    wait_until("the stale event", || events(&broker, "secret_stale") == 1);
    let other = get(&broker, &cap, port, "still");
    assert_eq!(other.status, 200, "{}", other.body);
    let stderr = broker.stderr();
    assert!(
        stderr.contains("Cannot read an alias secret again"),
        "{stderr}"
    );
    assert!(stderr.contains("exited with status 1"), "{stderr}");

    // The command works again: so does the alias.
    replace_secret(&home, "value", NEW);
    wait_until("the alias recovers", || {
        get(&broker, &cap, port, "cmd").status == 200
    });
    assert_eq!(events(&broker, "secret_refreshed"), 1);
    assert_eq!(events(&broker, "secret_stale"), 1);

    let mut seen: Vec<&CurlResponse> = answers.iter().collect();
    seen.extend([&first, &refused, &other]);
    assert_secrets_absent(&broker, &seen, &[OLD, NEW, STATIC]);
}

/// A command that fails at start stops `mint serve` with a message naming the alias and the
/// program, never its output; so does one that outlives its timeout.
#[test]
fn a_failing_or_slow_command_stops_the_start_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(dir.path(), EchoConfig::default());
    for (source, expected) in [
        (
            format!("{{command: [sh, -c, 'echo {OLD}; echo {OLD} >&2; exit 7']}}"),
            "`sh` exited with status 7",
        ),
        (
            "{command: [sleep, '600'], timeout: 1s}".to_owned(),
            "`sleep` did not finish within 1s",
        ),
        (
            "{command: [/nonexistent/mint-helper]}".to_owned(),
            "cannot run `/nonexistent/mint-helper`",
        ),
        (
            format!("{{command: [printf, '%s $(id) ;x', {OLD}], timeout: 5s}}"),
            "",
        ),
    ] {
        let aliases =
            format!("aliases:\n  - name: cmd\n    hosts: [127.0.0.1]\n    source: {source}\n");
        let home = MintHome::new(&policy(1, "cmd"), &aliases, &[]);
        if expected.is_empty() {
            // A value with spaces, `$(...)` and `;` is the command's output, unexpanded: the
            // broker starts (the value is fine for a header).
            let broker = home.serve(&peer.ca_file, &[]);
            broker.assert_secret_absent(OLD);
            continue;
        }
        let output = home.serve_fails(&peer.ca_file);
        assert_eq!(output.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("alias `cmd` (source `command:"), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(!stderr.contains(OLD), "{stderr}");
    }
}

/// `mint alias add --command` writes the program and its arguments as a list (every word after
/// `--command`, hyphens included), after checking that the command gives a usable value; `mint
/// alias list` shows the program only.
#[test]
fn alias_add_writes_a_command_source_as_a_list() {
    let home = MintHome::new(&policy(1, "cmd"), "aliases: []\n", &[]);
    let output = home
        .mint()
        .args(["alias", "add", "cmd", "--host", "127.0.0.1", "--command"])
        .args(["printf", "%s", OLD, "--not-a-mint-flag"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let file = std::fs::read_to_string(home.path().join("aliases.yaml")).unwrap();
    assert!(
        file.contains(&format!(
            "source: {{command: [\"printf\", \"%s\", \"{OLD}\", \"--not-a-mint-flag\"]}}"
        )),
        "{file}"
    );
    let list = home.mint().args(["alias", "list"]).output().unwrap();
    let shown = String::from_utf8_lossy(&list.stdout);
    assert!(shown.contains("command:printf"), "{shown}");
    assert!(!shown.contains(OLD), "{shown}");
    for output in [&output, &list] {
        assert!(!String::from_utf8_lossy(&output.stderr).contains(OLD));
    }
    // A command that fails is refused before the file changes.
    let refused = home
        .mint()
        .args([
            "alias",
            "add",
            "bad",
            "--host",
            "127.0.0.1",
            "--command",
            "false",
        ])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(
        !std::fs::read_to_string(home.path().join("aliases.yaml"))
            .unwrap()
            .contains("bad")
    );
}

const VAULT_OLD: &str = "canary-vault-v1-8Jd3Qs6Xa1";
const VAULT_NEW: &str = "canary-vault-v2-2Nc7Wp4Ke9";
const FORBIDDEN: &str = "canary-vault-forbidden-5Tb1Ry8Um3";

/// A dev OpenBao with KV v2 at `secret/`, a read-only policy on `secret/data/ci/*` and an AppRole
/// bound to it; the role id and secret id files (0600) and the server.
fn openbao_with_approle() -> Option<(
    mint_tests::openbao::OpenBao,
    Vec<(String, std::ffi::OsString)>,
)> {
    let bao = mint_tests::openbao::OpenBao::start()?;
    bao.cli(&["kv", "put", "secret/ci/gh", &format!("token={VAULT_OLD}")]);
    bao.cli(&["kv", "put", "secret/other/x", &format!("token={FORBIDDEN}")]);
    bao.cli(&[
        "kv",
        "put",
        "secret/ci/revoked",
        &format!("token={VAULT_OLD}"),
    ]);
    bao.cli_with_input(
        &["policy", "write", "mint-read", "-"],
        Some("path \"secret/data/ci/*\" {\n  capabilities = [\"read\"]\n}\n"),
    );
    bao.cli(&["auth", "enable", "approle"]);
    bao.cli(&[
        "write",
        "auth/approle/role/mint",
        "token_policies=mint-read",
        // Short, so that Mint renews it (renew-self) while the test runs.
        "token_ttl=3s",
        "token_max_ttl=10m",
    ]);
    let role_id = bao.cli(&["read", "-field=role_id", "auth/approle/role/mint/role-id"]);
    let secret_id = bao.cli(&[
        "write",
        "-f",
        "-field=secret_id",
        "auth/approle/role/mint/secret-id",
    ]);
    let role_file = bao.write_private("role-id", role_id.trim());
    let secret_file = bao.write_private("secret-id", secret_id.trim());
    let env = vec![
        ("MINT_VAULT_ADDR".to_owned(), bao.addr.clone().into()),
        ("MINT_VAULT_CA_FILE".to_owned(), bao.ca_file.clone().into()),
        ("MINT_VAULT_ROLE_ID_FILE".to_owned(), role_file.into()),
        ("MINT_VAULT_SECRET_ID_FILE".to_owned(), secret_file.into()),
        ("MINT_VAULT_CACHE".to_owned(), "1s".into()),
        ("MINT_VAULT_MAX_STALE".to_owned(), "3s".into()),
    ];
    Some((bao, env))
}

/// What must never show: values, the AppRole ids and the root token.
fn vault_secrets(bao: &mint_tests::openbao::OpenBao) -> Vec<String> {
    let mut secrets = vec![
        VAULT_OLD.to_owned(),
        VAULT_NEW.to_owned(),
        FORBIDDEN.to_owned(),
    ];
    secrets.push(bao.root_token.clone());
    for file in ["role-id", "secret-id"] {
        secrets.push(std::fs::read_to_string(bao.path().join(file)).unwrap());
    }
    secrets
}

/// Against a real OpenBao (dev mode, TLS, AppRole with a read-only policy): a path outside the
/// policy stops the start with a clear message (and `mint doctor` names the fix); the newest
/// version and a pinned version are read; a new version is picked up on cache expiry and both
/// are scrubbed from answers; with the server killed the cached value serves until the
/// staleness bound, then that alias is refused while another keeps working. No value, id or
/// token in any log line, error or answer.
#[test]
fn vault_secrets_from_openbao_with_approle() {
    let Some((mut bao, vault_env)) = openbao_with_approle() else {
        return;
    };
    let env: Vec<(&str, &std::ffi::OsStr)> = vault_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_os_str()))
        .collect();
    let never = vault_secrets(&bao);
    let upstream = ScriptedUpstream::remembering_authorizations();
    let port = upstream.port();
    let dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(dir.path(), EchoConfig::default());

    // Outside the policy: refused at start, clearly, with nothing secret in the message.
    let forbidden = "aliases:\n  - name: forbidden\n    hosts: [127.0.0.1]\n    source: vault:secret/other/x#token\n";
    let home = MintHome::new(&policy(port, "forbidden"), forbidden, &[]);
    let output = home
        .mint()
        .args(["serve", "--listen", "127.0.0.1:0", "--upstream-ca"])
        .arg(&peer.ca_file)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("alias `forbidden` (source `vault:secret/other/x#token`)"),
        "{stderr}"
    );
    assert!(stderr.contains("answered 403"), "{stderr}");
    let doctor = home
        .mint()
        .arg("doctor")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        report.contains("answered 403") && report.contains("grant Mint's token"),
        "{report}"
    );
    for secret in &never {
        assert!(!stderr.contains(secret.as_str()) && !report.contains(secret.as_str()));
    }

    let aliases = "aliases:\n  - name: gh\n    hosts: [127.0.0.1]\n    source: vault:secret/ci/gh#token\n  - name: pinned\n    hosts: [127.0.0.1]\n    source: vault:secret/ci/gh#token?version=1\n  - name: still\n    hosts: [127.0.0.1]\n    source: file:$SECRETS/still\n  - name: revoked\n    hosts: [127.0.0.1]\n    source: vault:secret/ci/revoked#token\n";
    let home = MintHome::new(
        &policy(port, "gh, pinned, still, revoked"),
        aliases,
        &[("still", STATIC)],
    );
    let cap = home.issue_capability("mino", &[]);
    let broker = home.serve_with_env(&peer.ca_file, &[], &env);
    let sent_last = || String::from_utf8_lossy(upstream.requests().last().unwrap()).into_owned();

    let first = get(&broker, &cap, port, "gh");
    assert_eq!(first.status, 200, "{}", first.body);
    assert!(sent_last().contains(&format!("Bearer {VAULT_OLD}\r\n")));

    // A new version: the alias follows it on cache expiry, the pinned one stays on version 1.
    bao.cli(&["kv", "put", "secret/ci/gh", &format!("token={VAULT_NEW}")]);
    let mut answers = vec![first];
    wait_until("the new version reaches the upstream", || {
        let answer = get(&broker, &cap, port, "gh");
        assert_eq!(answer.status, 200, "{}", answer.body);
        answers.push(answer);
        sent_last().contains(VAULT_NEW)
    });
    let pinned = get(&broker, &cap, port, "pinned");
    assert_eq!(pinned.status, 200, "{}", pinned.body);
    assert!(sent_last().contains(&format!("Bearer {VAULT_OLD}\r\n")));
    // The upstream hands back both versions: both scrubbed.
    assert!(pinned.body.lines().count() >= 3);
    assert!(
        pinned.body.lines().all(|l| l == "Bearer [mint:redacted]"),
        "{}",
        pinned.body
    );
    answers.push(pinned);

    // A grant revoked while Mint runs: the refresh gets a 403, logs in once more, tries once
    // more, and then does not ask again (counted in Mint's debug log of its requests to the
    // server), while the cached value serves until its staleness bound and other aliases keep
    // working.
    bao.cli_with_input(
        &["policy", "write", "mint-read", "-"],
        Some("path \"secret/data/ci/gh\" {\n  capabilities = [\"read\"]\n}\n"),
    );
    wait_until("the revoked alias is refused", || {
        std::fs::write("/tmp/vault_dbg.log", broker.stderr()).unwrap();
        get(&broker, &cap, port, "revoked").status == 503
    });
    let denied = || {
        broker
            .stderr()
            .lines()
            .filter(|l| {
                l.contains("Vault answered")
                    && l.contains("vault.path=/v1/secret/data/ci/revoked")
                    && l.contains("http.status=403")
            })
            .count()
    };
    let after_refusal = denied();
    assert!(
        (1..=2).contains(&after_refusal),
        "{after_refusal} denied reads"
    );
    // Long enough for several refresh rounds of `gh` (cache 1 s): `revoked` is not among them.
    let rounds = events(&broker, "secret_refresh_failed");
    let before = upstream.requests().len();
    wait_until("more refreshes of the other aliases", || {
        get(&broker, &cap, port, "gh").status == 200 && upstream.requests().len() >= before + 30
    });
    assert_eq!(denied(), after_refusal, "a 403 was asked again");
    assert_eq!(events(&broker, "secret_refresh_failed"), rounds);
    let stderr = broker.stderr();
    assert_eq!(
        stderr
            .matches("will not ask again before the next reload")
            .count(),
        1,
        "{stderr}"
    );

    // The AppRole token (3 s) was renewed before it expired.
    wait_until("a token renewal", || {
        broker.stderr().contains("Renewed the Vault token")
    });

    // A token file works too (a read-only token of the same policy): `mint doctor` reads each
    // alias with it.
    let token = bao.cli(&["token", "create", "-policy=mint-read", "-field=token"]);
    let token_file = bao.write_private("token", token.trim());
    let mut token_env: Vec<(&str, &std::ffi::OsStr)> = env
        .iter()
        .copied()
        .filter(|(k, _)| !k.contains("_ID_FILE"))
        .collect();
    token_env.push(("MINT_VAULT_TOKEN_FILE", token_file.as_os_str()));
    let doctor = home.mint().arg("doctor").envs(token_env).output().unwrap();
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        report.contains("present (source `vault:secret/ci/gh#token?version=1`)"),
        "{report}"
    );
    assert!(!report.contains(token.trim()));

    // The server goes down: cached values serve until the staleness bound, then `gh` is refused
    // with a clear code while the file alias keeps working.
    bao.kill();
    let mut refused = None;
    wait_until("the stale Vault alias is refused", || {
        let answer = get(&broker, &cap, port, "gh");
        if answer.status == 503 {
            refused = Some(answer);
            return true;
        }
        assert_eq!(answer.status, 200, "{}", answer.body);
        answers.push(answer);
        false
    });
    let refused = refused.unwrap();
    assert_eq!(refused.json()["error"]["code"], "secret_unavailable");
    assert!(events(&broker, "secret_refresh_failed") >= 1);
    wait_until("the stale event", || events(&broker, "secret_stale") >= 1);
    let other = get(&broker, &cap, port, "still");
    assert_eq!(other.status, 200, "{}", other.body);
    let stderr = broker.stderr();
    assert!(
        stderr.contains("cannot reach https://127.0.0.1:"),
        "{stderr}"
    );

    let mut seen: Vec<&CurlResponse> = answers.iter().collect();
    seen.extend([&refused, &other]);
    let never: Vec<&str> = never.iter().map(String::as_str).chain([STATIC]).collect();
    assert_secrets_absent(&broker, &seen, &never);
}
