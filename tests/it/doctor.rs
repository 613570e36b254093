//! `mint doctor` through the real binary (issue 23): a healthy home passes every check and exits
//! 0; each fault, planted in a home of its own, turns the right check to `warn` (exit 0) or
//! `FAIL` (exit 1), in the human report and in `--json` alike. No run prints the secret value or
//! the capability token, on stdout or stderr. `mint serve` warns when it listens off loopback.

#![expect(clippy::unwrap_used, reason = "test code")]

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use mint_broker::audit::{AuditConfig, AuditLog, Durability};
use mint_broker::config::env::Paths;
use mint_policy::audit::ReasonCode;
use mint_tests::broker::MintHome;
use serde_json::Value;

/// The alias secret: never printed.
const CANARY: &str = "CANARY-doctor-5b1e-never-printed";

const POLICY: &str = "version: 1\ndefault: deny\nrules:\n  - id: gh-read\n    effect: allow\n    \
     match:\n      agent: bot\n      alias: [github]\n      host: [api.github.com]\n      \
     method: [GET]\n";

const ALIASES: &str =
    "aliases:\n  - name: github\n    hosts: [api.github.com]\n    source: file:$SECRETS/github\n";

/// A home made by `mint init`, then given an alias with a `file:` source, a policy that allows
/// it, a capability and a few audit records.
struct Healthy {
    home: MintHome,
    /// The capability's token: never printed by `mint doctor`.
    token: String,
}

impl Healthy {
    #[track_caller]
    fn new() -> Healthy {
        let home = MintHome::new(POLICY, ALIASES, &[("github", CANARY)]);
        for file in ["policy.yaml", "aliases.yaml", "capabilities.yaml"] {
            std::fs::remove_file(home.path().join(file)).unwrap();
        }
        let init = home.mint().arg("init").output().unwrap();
        assert!(
            init.status.success(),
            "{}",
            String::from_utf8_lossy(&init.stderr)
        );
        home.write_private("policy.yaml", POLICY);
        home.write_private("aliases.yaml", &aliases(&home, ALIASES));
        let token = home.issue_capability("bot", &[]);
        let log = AuditLog::open(
            &home.path().join("audit.log"),
            AuditConfig {
                durability: Durability::Never,
                rotate_bytes: None,
            },
        )
        .unwrap();
        for _ in 0..3 {
            log.event(ReasonCode::new("broker_started").unwrap())
                .unwrap();
        }
        Healthy { home, token }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.home.path().join(rel)
    }

    /// Runs `mint doctor ARGS` and `mint doctor --json ARGS`; checks that they agree on the exit
    /// status and each check, and that neither shows the secret or the token.
    #[track_caller]
    fn doctor(&self, args: &[&str]) -> Report {
        self.doctor_with(args, &[])
    }

    #[track_caller]
    fn doctor_with(&self, args: &[&str], env: &[(&str, &str)]) -> Report {
        let run = |json: bool| {
            let mut command = self.home.mint();
            command.arg("doctor").args(args).envs(env.iter().copied());
            if json {
                command.arg("--json");
            }
            command.output().unwrap()
        };
        let (human, json) = (run(false), run(true));
        for output in [&human, &json] {
            for stream in [&output.stdout, &output.stderr] {
                let text = String::from_utf8_lossy(stream);
                assert!(!text.contains(CANARY), "the secret was printed:\n{text}");
                assert!(
                    !text.contains(&self.token),
                    "the token was printed:\n{text}"
                );
                assert!(!text.contains("mint_cap_"), "a token was printed:\n{text}");
            }
        }
        assert_eq!(human.status.code(), json.status.code());
        let report = Report {
            code: human.status.code().unwrap(),
            text: String::from_utf8(human.stdout).unwrap(),
            json: serde_json::from_slice(&json.stdout).unwrap(),
        };
        let checks = report.json["checks"].as_array().unwrap();
        let lines: Vec<&str> = report.text.lines().take_while(|l| !l.is_empty()).collect();
        assert_eq!(
            lines.len(),
            checks.len(),
            "one line per check:\n{}",
            report.text
        );
        for (line, check) in lines.iter().zip(checks) {
            let status = check["status"].as_str().unwrap();
            let label = if status == "fail" { "FAIL" } else { status };
            assert!(line.starts_with(label), "{line} vs {check}");
            assert!(line.contains(check["check"].as_str().unwrap()), "{line}");
            if matches!(status, "warn" | "fail") {
                assert!(check["fix"].is_string(), "no fix: {check}");
                assert!(line.contains(" -- fix: "), "no fix: {line}");
            }
        }
        assert_eq!(report.json["ok"], report.code == 0, "{}", report.text);
        report
    }
}

/// What one doctor run printed.
struct Report {
    code: i32,
    text: String,
    json: Value,
}

impl Report {
    /// The checks named `check` (about `subject`, when given).
    fn all(&self, check: &str, subject: Option<&str>) -> Vec<&Value> {
        self.json["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["check"] == check && subject.is_none_or(|s| c["subject"] == s))
            .collect()
    }

    /// Asserts that the check named `check` (about `subject`) came out `status`; returns its
    /// message.
    #[track_caller]
    fn assert(&self, check: &str, subject: Option<&str>, status: &str) -> String {
        let found = self.all(check, subject);
        assert!(!found.is_empty(), "no `{check}` check:\n{}", self.text);
        assert!(
            found.iter().any(|c| c["status"] == status),
            "`{check}` is not {status}:\n{}",
            self.text
        );
        found.iter().find(|c| c["status"] == status).unwrap()["message"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    #[track_caller]
    fn assert_code(&self, code: i32) {
        assert_eq!(self.code, code, "{}", self.text);
    }
}

fn aliases(home: &MintHome, text: &str) -> String {
    text.replace(
        "$SECRETS",
        &home.path().join("secrets").display().to_string(),
    )
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn is_root(home: &MintHome) -> bool {
    std::fs::metadata(home.path()).unwrap().uid() == 0
}

fn paths(home: &MintHome) -> Paths {
    let dir = home.path().as_os_str().to_owned();
    Paths::resolve(move |name| (name == "MINT_HOME").then(|| dir.clone()))
}

/// Whether a keyring test must run rather than be skipped (CI's set-up).
fn keyring_required() -> bool {
    std::env::var_os("MINT_REQUIRE_KEYRING").is_some_and(|v| v == "1")
}

#[test]
fn a_healthy_home_passes_every_check() {
    let healthy = Healthy::new();
    let report = healthy.doctor(&[]);
    report.assert_code(0);
    for check in report.json["checks"].as_array().unwrap() {
        let name = check["check"].as_str().unwrap();
        let allowed: &[&str] = match name {
            // Informative only: agents trust the CA through `mint run`, not the system store.
            "ca.trust" => &["ok", "info"],
            // No alias keeps its secret in the keyring here: an unreachable one is a warning,
            // and only CI's set-up guarantees a reachable one.
            "keyring" if !keyring_required() => &["ok", "warn"],
            _ => &["ok"],
        };
        assert!(
            allowed.contains(&check["status"].as_str().unwrap()),
            "{check}\n{}",
            report.text
        );
    }
    for check in [
        "home",
        "listen",
        "aliases",
        "secret",
        "policy",
        "policy.alias",
        "capabilities",
        "audit.log",
        "audit.chain",
        "ca",
        "ca.constraints",
    ] {
        report.assert(check, None, "ok");
    }
    assert!(
        report
            .assert("audit.chain", None, "ok")
            .contains("3 records")
    );
    assert!(
        report
            .assert("policy.alias", Some("github"), "ok")
            .contains("`gh-read`")
    );
    assert!(
        report.text.contains("secret github: present"),
        "{}",
        report.text
    );
    assert_eq!(report.json["counts"]["fail"], 0);
}

#[test]
fn an_open_home_or_policy_file_fails() {
    let healthy = Healthy::new();
    chmod(healthy.home.path(), 0o777);
    let report = healthy.doctor(&[]);
    report.assert_code(1);
    assert!(
        report
            .assert("home", None, "fail")
            .contains("writable by group or others")
    );

    let healthy = Healthy::new();
    chmod(healthy.home.path(), 0o750);
    let report = healthy.doctor(&[]);
    report.assert_code(0);
    report.assert("home", None, "warn");

    let healthy = Healthy::new();
    chmod(&healthy.path("policy.yaml"), 0o620);
    let report = healthy.doctor(&[]);
    report.assert_code(1);
    assert!(
        report
            .assert("policy", None, "fail")
            .contains("writable by group or others")
    );
    assert!(
        report.text.contains("fix: run `chmod 600 "),
        "{}",
        report.text
    );
}

#[test]
fn a_missing_or_unusable_secret_fails() {
    let healthy = Healthy::new();
    std::fs::remove_file(healthy.path("secrets/github")).unwrap();
    let report = healthy.doctor(&[]);
    report.assert_code(1);
    assert!(
        report
            .assert("secret", Some("github"), "fail")
            .contains("no such file")
    );

    // Open to others: the broker refuses to read it.
    let healthy = Healthy::new();
    chmod(&healthy.path("secrets/github"), 0o640);
    let report = healthy.doctor(&[]);
    report.assert_code(1);
    assert!(
        report
            .assert("secret", Some("github"), "fail")
            .contains("open to group or others")
    );

    // Not a file at all.
    let healthy = Healthy::new();
    std::fs::remove_file(healthy.path("secrets/github")).unwrap();
    std::fs::create_dir(healthy.path("secrets/github")).unwrap();
    let report = healthy.doctor(&[]);
    report.assert_code(1);
    assert!(
        report
            .assert("secret", Some("github"), "fail")
            .contains("not a regular file")
    );
}

#[test]
fn a_policy_error_fails_and_unused_or_undeclared_aliases_warn() {
    let healthy = Healthy::new();
    healthy.home.write_private(
        "policy.yaml",
        "version: 1\nrules:\n  - id: x\n    effect: sometimes\n",
    );
    let report = healthy.doctor(&[]);
    report.assert_code(1);
    report.assert("policy", None, "fail");
    assert!(report.text.contains("mint policy check"), "{}", report.text);

    // An alias no rule allows, and a rule naming an alias nobody declared.
    let healthy = Healthy::new();
    healthy.home.write_private(
        "policy.yaml",
        "version: 1\nrules:\n  - id: ghost-read\n    effect: allow\n    match:\n      alias: \
         [ghost]\n      host: [ghost.example.com]\n",
    );
    let report = healthy.doctor(&[]);
    report.assert_code(0);
    assert!(
        report
            .assert("policy.alias", Some("github"), "warn")
            .contains("every request that uses it is denied")
    );
    assert!(
        report
            .assert("policy.rule", Some("ghost-read"), "warn")
            .contains("`ghost`")
    );
}

#[test]
fn expired_and_revoked_capabilities_are_reported() {
    let healthy = Healthy::new();
    healthy.home.issue_capability("bot", &["--ttl", "1s"]);
    let revoked = healthy.home.issue_capability("bot", &[]);
    healthy.home.revoke_capability(&revoked);
    std::thread::sleep(Duration::from_millis(2100));
    let report = healthy.doctor(&[]);
    report.assert_code(0);
    let message = report.assert("capabilities", None, "info");
    assert!(
        message.contains("1 active, 1 expired, 1 revoked"),
        "{message}"
    );
    assert!(!report.text.contains(&revoked));
}

#[test]
fn a_tampered_or_unwritable_audit_log_fails() {
    let healthy = Healthy::new();
    let log = healthy.path("audit.log");
    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines[1] = lines[1].replace("broker_started", "broker_stopped");
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let report = healthy.doctor(&[]);
    report.assert_code(1);
    assert!(
        report
            .assert("audit.chain", None, "fail")
            .contains("broken")
    );
    report.assert("audit.log", None, "ok");

    // Something the broker cannot append to stands where the log goes.
    let healthy = Healthy::new();
    let log = healthy.path("audit.log");
    std::fs::remove_file(&log).unwrap();
    std::fs::create_dir(&log).unwrap();
    let report = healthy.doctor(&[]);
    report.assert_code(1);
    report.assert("audit.log", None, "fail");

    // A log its owner may not write (root writes whatever the mode says).
    let healthy = Healthy::new();
    if !is_root(&healthy.home) {
        chmod(&healthy.path("audit.log"), 0o400);
        let report = healthy.doctor(&[]);
        report.assert_code(1);
        report.assert("audit.log", None, "fail");
    }
}

#[test]
fn a_missing_expiring_expired_or_incomplete_ca_is_reported() {
    let day = Duration::from_secs(24 * 3600);
    let remove_ca = |healthy: &Healthy| {
        std::fs::remove_file(healthy.path("ca.pem")).unwrap();
        std::fs::remove_file(healthy.path("ca.key")).unwrap();
    };

    // None yet: `mint serve` makes one at its first start.
    let healthy = Healthy::new();
    remove_ca(&healthy);
    let report = healthy.doctor(&[]);
    report.assert_code(0);
    report.assert("ca", None, "warn");

    let healthy = Healthy::new();
    remove_ca(&healthy);
    let now = SystemTime::now();
    mint_broker::config::ca_files::create(&paths(&healthy.home), now - 400 * day).unwrap();
    let report = healthy.doctor(&[]);
    report.assert_code(1);
    assert!(report.assert("ca", None, "fail").contains("expired"));
    assert!(report.text.contains("mint ca rotate"), "{}", report.text);

    let healthy = Healthy::new();
    remove_ca(&healthy);
    mint_broker::config::ca_files::create(&paths(&healthy.home), now - 355 * day).unwrap();
    let report = healthy.doctor(&[]);
    report.assert_code(0);
    assert!(report.assert("ca", None, "warn").contains("within 30 days"));

    let healthy = Healthy::new();
    std::fs::remove_file(healthy.path("ca.key")).unwrap();
    let report = healthy.doctor(&[]);
    report.assert_code(1);
    report.assert("ca", None, "fail");

    // `--ca-cert` names the certificate as for `mint serve`: here one that is not there.
    let healthy = Healthy::new();
    let elsewhere = healthy.path("elsewhere.pem").display().to_string();
    let report = healthy.doctor(&["--ca-cert", &elsewhere]);
    report.assert_code(1);
    assert!(report.assert("ca", None, "fail").contains("elsewhere.pem"));
}

#[test]
fn an_alias_host_outside_the_ca_name_constraints_warns() {
    let healthy = Healthy::new();
    let rotate = healthy
        .home
        .mint()
        .args(["ca", "rotate", "--name-constraints"])
        .output()
        .unwrap();
    assert!(
        rotate.status.success(),
        "{}",
        String::from_utf8_lossy(&rotate.stderr)
    );
    let report = healthy.doctor(&[]);
    report.assert_code(0);
    report.assert("ca.constraints", None, "ok");

    healthy.home.write_private("secrets/npm", "npm-value");
    let both = format!(
        "{ALIASES}  - name: npm\n    hosts: [registry.npmjs.org]\n    source: \
         file:$SECRETS/npm\n"
    );
    healthy
        .home
        .write_private("aliases.yaml", &aliases(&healthy.home, &both));
    let report = healthy.doctor(&[]);
    report.assert_code(0);
    assert!(
        report
            .assert("ca.constraints", Some("npm"), "warn")
            .contains("registry.npmjs.org")
    );
}

#[test]
fn a_listen_address_off_loopback_warns() {
    let healthy = Healthy::new();
    let report = healthy.doctor(&["--listen", "0.0.0.0:8700"]);
    report.assert_code(0);
    assert!(
        report
            .assert("listen", None, "warn")
            .contains("0.0.0.0:8700")
    );
    let report = healthy.doctor_with(&[], &[("MINT_LISTEN", "[::]:8700")]);
    report.assert_code(0);
    report.assert("listen", None, "warn");
    let report = healthy.doctor(&["--listen", "not an address"]);
    report.assert_code(1);
    report.assert("listen", None, "fail");
}

#[test]
fn mint_serve_warns_when_it_listens_off_loopback() {
    let healthy = Healthy::new();
    let stderr_path = healthy.path("serve.stderr");
    let mut child = healthy
        .home
        .mint()
        .args(["serve", "--listen", "0.0.0.0:0"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(line.starts_with("listening on http://0.0.0.0:"), "{line}");
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    assert!(stderr.contains("not loopback"), "{stderr}");
    assert!(!stderr.contains(CANARY));
}

/// An alias whose secret the keyring should hold: without the item the secret check fails, with
/// it (stored through `mint alias add`, where a keyring is reachable) it passes, and its value
/// never appears.
#[test]
fn keyring_secrets_are_checked_without_being_shown() {
    let healthy = Healthy::new();
    let service = format!("mint-doctor-{}", std::process::id());
    let env = [("MINT_KEYRING_SERVICE", service.as_str())];
    let declared = format!("{ALIASES}  - name: kr\n    hosts: [api.github.com]\n");
    healthy
        .home
        .write_private("aliases.yaml", &aliases(&healthy.home, &declared));
    let report = healthy.doctor_with(&[], &env);
    report.assert_code(1);
    report.assert("secret", Some("kr"), "fail");
    let reachable = report.all("keyring", None)[0]["status"] == "ok";
    if !reachable {
        // An alias keeps its secret there: an unreachable keyring fails.
        report.assert("keyring", None, "fail");
        assert!(!keyring_required(), "no keyring under CI:\n{}", report.text);
        return;
    }
    assert!(
        report
            .assert("secret", Some("kr"), "fail")
            .contains("no item")
    );

    healthy
        .home
        .write_private("aliases.yaml", &aliases(&healthy.home, ALIASES));
    let mut add = healthy.home.mint();
    add.args([
        "alias",
        "add",
        "kr",
        "--host",
        "api.github.com",
        "--secret-stdin",
    ])
    .envs(env)
    .stdin(Stdio::piped());
    let mut child = add.stdout(Stdio::null()).spawn().unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(CANARY.as_bytes()).unwrap();
    }
    assert!(child.wait().unwrap().success());
    let report = healthy.doctor_with(&[], &env);
    report.assert("keyring", None, "ok");
    report.assert("secret", Some("kr"), "ok");
    let _ = healthy
        .home
        .mint()
        .args(["alias", "rm", "kr"])
        .envs(env)
        .output();
}

/// The keyring backend in use is probed (both backends under CI's set-up); a backend Mint does
/// not know fails.
#[test]
fn the_keyring_backend_is_probed() {
    let healthy = Healthy::new();
    let report = healthy.doctor_with(&[], &[("MINT_KEYRING_BACKEND", "secret-service")]);
    let message = if keyring_required() {
        report.assert("keyring", None, "ok")
    } else {
        report.all("keyring", None)[0]["message"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(message.contains("Secret Service"), "{message}");
    let report = healthy.doctor_with(&[], &[("MINT_KEYRING_BACKEND", "bogus")]);
    report.assert_code(1);
    report.assert("keyring", None, "fail");
}

/// An outside review: `mint doctor` did not look at `$MINT_HOME/placeholder.key`, the key the
/// value-shaped placeholders are derived from. Now: no check while no alias declares a shape;
/// once one does, a missing key warns, a key `mint alias list` made is ok, one readable by the
/// group warns, one writable by the group or not holding a key fails (the broker would refuse
/// it), each with its fix.
#[test]
fn issue_21_the_placeholder_key_is_checked() {
    let healthy = Healthy::new();
    let report = healthy.doctor(&[]);
    assert!(
        report.all("placeholder.key", None).is_empty(),
        "{}",
        report.text
    );

    let shaped = ALIASES.replace(
        "    source:",
        "    placeholder: {prefix: ghp_, length: 40}\n    source:",
    );
    healthy
        .home
        .write_private("aliases.yaml", &aliases(&healthy.home, &shaped));
    let key = healthy.path("placeholder.key");
    let report = healthy.doctor(&[]);
    report.assert_code(0);
    assert!(
        report
            .assert("placeholder.key", None, "warn")
            .contains("no key yet, and 1 alias declares")
    );
    assert!(!key.exists(), "the doctor wrote the key");

    let listed = healthy
        .home
        .mint()
        .args(["alias", "list"])
        .output()
        .unwrap();
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert!(key.exists());
    let report = healthy.doctor(&[]);
    report.assert_code(0);
    assert!(
        report
            .assert("placeholder.key", None, "ok")
            .contains("mode 0600")
    );

    chmod(&key, 0o640);
    let report = healthy.doctor(&[]);
    report.assert_code(0);
    report.assert("placeholder.key", None, "warn");
    assert!(
        report
            .text
            .contains(&format!("chmod 600 {}", key.display())),
        "{}",
        report.text
    );

    chmod(&key, 0o660);
    let report = healthy.doctor(&[]);
    report.assert_code(1);
    report.assert("placeholder.key", None, "fail");

    chmod(&key, 0o600);
    std::fs::write(&key, "0123abcd\n").unwrap();
    let report = healthy.doctor(&[]);
    report.assert_code(1);
    assert!(
        report
            .assert("placeholder.key", None, "fail")
            .contains("does not hold a placeholder key")
    );
    assert!(report.text.contains("every value-shaped placeholder"));
}
