//! Value-shaped placeholders: an alias that declares a `placeholder` shape gets a random value of
//! that shape, which `mint run` and `mint env` put in its `env` variables and `mint alias list`
//! shows. A client whose SDK checks the key's form before sending anything (an `sk-` prefix and
//! 48 characters; a JWT it parses) accepts it, and the proxy substitutes the real secret for it
//! exactly where it would for `{{mint:NAME}}`. The canary secret never reaches the client, the
//! audit log or Mint's stderr; the placeholder is public and stays the same across commands.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::process::Stdio;

use mint_tests::interception::{CANARY, Setup, SetupConfig, client_command, everything};
use mint_tests::repo_root;

/// A set-up whose alias `echo` declares `extra` (its shape and `env`).
fn setup(extra: &str) -> Setup {
    Setup::start_with(SetupConfig {
        echo_alias: extra,
        ..SetupConfig::default()
    })
}

/// The placeholder `mint alias list --json` shows for `echo`.
#[track_caller]
fn listed_placeholder(setup: &Setup) -> String {
    let output = setup
        .home
        .mint()
        .args(["alias", "list", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", everything(&output));
    let rows: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "echo")
        .unwrap();
    assert!(!String::from_utf8_lossy(&output.stdout).contains(CANARY));
    row["placeholder"].as_str().unwrap().to_owned()
}

/// The last request the echo upstream got carried the canary, and the value of its `name` header
/// otherwise held nothing of the placeholder.
#[track_caller]
fn assert_upstream_got_the_secret(setup: &Setup, name: &str, prefix: &str) {
    let requests = setup.peer.server.requests();
    let seen = requests.last().unwrap();
    assert_eq!(
        seen.header(name),
        Some(format!("{prefix}{CANARY}").as_str()),
        "{name}"
    );
}

/// An SDK-style client: it refuses a key that does not start with `sk-` or is not 48 characters
/// long (exit 3, before any request), then sends it as a bearer token with `requests`.
const SDK_CLIENT: &str = r#"
import json, os, sys
import requests
key = os.environ.get("OPENAI_API_KEY", "")
if not key.startswith("sk-") or len(key) != 48:
    print("invalid api key format", file=sys.stderr)
    sys.exit(3)
r = requests.get(sys.argv[1], headers={"Authorization": "Bearer " + key}, timeout=20)
print(json.dumps({"status": r.status_code, "body": r.text, "key": key}))
"#;

#[test]
fn an_sdk_that_checks_the_key_format_gets_a_shaped_placeholder_and_the_upstream_the_key() {
    let setup = setup("    placeholder: {prefix: sk-, length: 48}\n    env: [OPENAI_API_KEY]\n");
    let python = repo_root().join(".venv/bin/python");
    assert!(python.exists(), "run the setup_mcp_clients step of .ci/run");

    // `{{mint:echo}}` itself fails the check: this is why the shape exists.
    let refused = client_command(&python, &[("OPENAI_API_KEY", "{{mint:echo}}")])
        .args(["-c", SDK_CLIENT, "https://unused.invalid/"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(3), "{}", everything(&refused));

    let output = setup
        .mint_run(&[])
        .arg(&python)
        .args(["-c", SDK_CLIENT])
        .arg(setup.url("/echo?client=sdk"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let printed = everything(&output);
    assert!(output.status.success(), "{printed}");
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(answer["status"], 200, "{printed}");
    let key = answer["key"].as_str().unwrap();
    assert_eq!(key.len(), 48);
    assert!(key.starts_with("sk-"));
    assert!(key[3..].bytes().all(|b| b.is_ascii_alphanumeric()), "{key}");
    // The upstream got the real secret; the echo of it came back scrubbed.
    assert_upstream_got_the_secret(&setup, "authorization", "Bearer ");
    let body: serde_json::Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
    assert!(
        body["headers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|pair| pair[0] == "authorization" && pair[1] == "Bearer [mint:redacted]"),
        "{body}"
    );

    // One value for the alias everywhere: `mint alias list`, `mint env` and `mint run` again.
    assert_eq!(listed_placeholder(&setup), key);
    let env = setup
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
    assert!(env.status.success(), "{}", everything(&env));
    let env_text = String::from_utf8_lossy(&env.stdout);
    assert!(
        env_text.contains(&format!("export OPENAI_API_KEY='{key}'\n")),
        "{env_text}"
    );
    let again = setup
        .mint_run(&[])
        .args(["sh", "-c", "printf %s \"$OPENAI_API_KEY\""])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&again.stdout), key);

    // The key file is the home's, private.
    let key_file = setup.home.path().join("placeholder.key");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&key_file).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);

    let decision = setup
        .broker
        .audit_records()
        .into_iter()
        .find(|r| r["phase"] == "decision" && r["method"] == "GET")
        .unwrap();
    assert_eq!(
        decision["aliases"],
        serde_json::json!(["echo"]),
        "{decision}"
    );
    setup.assert_no_canary(&format!("{printed}{env_text}"));
}

/// A client that reads an ID token as a JWT (as Codex does): it must parse, with its claims, and
/// then go out as a bearer token.
const JWT_CLIENT: &str = r#"
import json, os, sys
import jwt, requests
token = os.environ["ID_TOKEN"]
header = jwt.get_unverified_header(token)
claims = jwt.decode(token, options={"verify_signature": False})
r = requests.get(sys.argv[1], headers={"Authorization": "Bearer " + token}, timeout=20)
print(json.dumps({"header": header, "claims": claims, "status": r.status_code, "body": r.text}))
"#;

#[test]
fn a_jwt_shaped_placeholder_parses_as_a_jwt_and_is_substituted() {
    let setup = setup("    placeholder: jwt\n    env: [ID_TOKEN]\n");
    let python = repo_root().join(".venv/bin/python");
    assert!(python.exists(), "run the setup_mcp_clients step of .ci/run");
    let output = setup
        .mint_run(&[])
        .arg(&python)
        .args(["-c", JWT_CLIENT])
        .arg(setup.url("/echo?client=jwt"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let printed = everything(&output);
    assert!(output.status.success(), "{printed}");
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(answer["header"]["alg"], "HS256", "{printed}");
    assert_eq!(answer["header"]["typ"], "JWT", "{printed}");
    assert_eq!(answer["claims"]["mint"], "echo", "{printed}");
    assert_eq!(answer["claims"]["jti"].as_str().unwrap().len(), 22);
    assert_eq!(answer["status"], 200, "{printed}");
    assert_upstream_got_the_secret(&setup, "authorization", "Bearer ");
    assert!(
        answer["body"]
            .as_str()
            .unwrap()
            .contains("Bearer [mint:redacted]")
    );
    setup.assert_no_canary(&printed);
}

#[test]
fn a_shaped_placeholder_is_refused_where_the_template_is() {
    // In the path it is refused (403, nothing sent), as `{{mint:echo}}` is; in a header the
    // alias does not allow it, likewise; quoted in a text body it is inert and forwarded.
    let setup = setup("    placeholder: {prefix: sk-, length: 48}\n");
    let value = listed_placeholder(&setup);
    let curl = |args: &[&str]| {
        let output = client_command("curl", &[])
            .args([
                "-sS",
                "-o",
                "-",
                "-w",
                "\n%{http_code}",
                "--proxy",
                &setup.proxy(),
            ])
            .arg("--cacert")
            .arg(setup.ca())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let printed = everything(&output);
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').unwrap();
        (status.to_owned(), body.to_owned(), printed)
    };
    // `GET /v1/aliases` names the shaped value as the text to write.
    let listed = client_command("curl", &[])
        .args(["-sS", "-H", &format!("Mint-Capability: {}", setup.cap)])
        .arg(format!("{}/v1/aliases", setup.broker.base))
        .output()
        .unwrap();
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let echo = listed["aliases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "echo")
        .unwrap();
    assert_eq!(echo["placeholder"], value.as_str(), "{listed}");
    let before = setup.peer.server.requests().len();
    for template in ["{{mint:echo}}", value.as_str()] {
        let encoded: String = template.bytes().map(|b| format!("%{b:02X}")).collect();
        let (status, body, printed) = curl(&[&setup.url(&format!("/echo/{encoded}"))]);
        assert_eq!(status, "403", "{template}: {printed}");
        assert!(body.contains("site_not_allowed"), "{body}");
        setup.assert_no_canary(&printed);
    }
    assert_eq!(
        setup.peer.server.requests().len(),
        before,
        "nothing was sent"
    );
    for template in ["{{mint:echo}}", value.as_str()] {
        let (status, body, printed) = curl(&[
            "-H",
            "Content-Type: text/plain",
            "--data-binary",
            &format!("quoting {template} in a transcript"),
            &setup.url("/echo"),
        ]);
        assert_eq!(status, "200", "{printed}");
        assert!(
            body.contains(&format!("quoting {template} in a transcript")),
            "{body}"
        );
        setup.assert_no_canary(&printed);
    }
}
