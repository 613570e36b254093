//! The canary: a secret-looking value planted in every file the server might be pointed at — a
//! `file:` secret source, the capabilities file, an audit line that is not a record, a record
//! with an invalid value, free values of an invalid policy, an alias file with an unknown field
//! — must never appear in anything the server writes, stdout or stderr, even at trace level.

use std::ffi::OsString;
use std::fs;
use std::path::Path;

use serde_json::{Value, json};

use crate::support::{Mcp, error, payload};

const CANARY: &str = "SECRET-CANARY-3f9b1c7e0d2a48a6";

/// Writes the planted files into `home` and returns the environment pointing at them.
fn plant(home: &Path, secret_dir: &Path) -> Vec<(&'static str, OsString)> {
    let secret = secret_dir.join("slack-token");
    fs::write(&secret, format!("{CANARY}\n")).unwrap();
    fs::write(
        home.join("aliases.yaml"),
        format!(
            "aliases:\n  - name: slack\n    hosts: [slack.com]\n    source: file:{}\n  - name: github\n    hosts: [api.github.com]\n",
            secret.display()
        ),
    )
    .unwrap();
    fs::write(
        home.join("capabilities.yaml"),
        format!("capabilities:\n  - id: c1\n    hash: {CANARY}\n"),
    )
    .unwrap();
    let example =
        fs::read_to_string(crate::support::repo_root().join("examples/audit.log")).unwrap();
    let mut lines: Vec<&str> = example.lines().take(3).collect();
    let bad_value = format!(
        r#"{{"v":1,"ts":"2026-11-30T05:39:20.123Z","id":"x","phase":"decision","agent":"{CANARY} !","decision":"allow","prev":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}}"#
    );
    let raw = format!("Authorization: Bearer {CANARY}");
    let unknown = format!(
        r#"{{"v":1,"ts":"2026-11-30T05:39:20.123Z","id":"y","phase":"event","token":"{CANARY}"}}"#
    );
    lines.insert(1, &raw);
    lines.insert(2, &bad_value);
    lines.push(&unknown);
    fs::write(home.join("audit.log"), lines.join("\n") + "\n").unwrap();
    fs::write(
        home.join("policy.yaml"),
        format!(
            "version: 1\ndefault: {CANARY}\nrules:\n  - id: r1\n    effect: {CANARY}\n    description: {CANARY}\n    match:\n      host: api.github.com\n      port: {CANARY}\n      scheme: {CANARY}\n    inject: [{CANARY}]\n    limits:\n      - {{ max: {CANARY}, per: {CANARY}, by: [{CANARY}] }}\n    {CANARY}: {CANARY}\n  - id: {CANARY}\n    effect: deny\ncall_limits:\n  {CANARY}: {CANARY}\n"
        ),
    )
    .unwrap();
    fs::write(
        home.join("other-aliases.yaml"),
        format!(
            "aliases:\n  - name: x\n    hosts: [a.example]\n    token: {CANARY}\n    source: {CANARY}\n  - name: {CANARY}\n    hosts: [b.example]\n"
        ),
    )
    .unwrap();
    vec![
        ("MINT_HOME", home.as_os_str().to_owned()),
        ("RUST_LOG", "trace".into()),
    ]
}

#[test]
fn no_planted_value_ever_leaves_the_server() {
    let home = tempfile::tempdir().unwrap();
    let secret_dir = tempfile::tempdir().unwrap();
    let env = plant(home.path(), secret_dir.path());
    let secret = secret_dir.path().join("slack-token");
    let h = |name: &str| home.path().join(name);
    // Other names for the secret file and the capabilities file.
    fs::hard_link(&secret, h("linked-secret.log")).unwrap();
    std::os::unix::fs::symlink(&secret, h("symlinked-secret.yaml")).unwrap();
    fs::hard_link(h("capabilities.yaml"), h("caps-copy.yaml")).unwrap();
    let dotted = secret_dir.path().join("../").join(
        secret_dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned(),
    );

    let mut mcp = Mcp::start(&env);
    let mut outputs = Vec::new();
    let expect_refused = |mcp: &mut Mcp, tool: &str, key: &str, path: &Path, kind: &str| {
        let response = mcp.call(tool, json!({ key: path }));
        assert_eq!(
            error(&response, -32603)["data"]["kind"],
            kind,
            "{tool} {}",
            path.display()
        );
        response
    };
    for (tool, key) in [
        ("policy_check", "file"),
        ("alias_list", "path"),
        ("audit_tail", "path"),
    ] {
        for path in [
            secret.clone(),
            h("linked-secret.log"),
            h("symlinked-secret.yaml"),
            dotted.join("slack-token"),
        ] {
            outputs.push(expect_refused(&mut mcp, tool, key, &path, "unreadable"));
        }
        for path in [h("capabilities.yaml"), h("caps-copy.yaml")] {
            outputs.push(expect_refused(&mut mcp, tool, key, &path, "unreadable"));
        }
    }

    // Files that are read: only findings and records come back.
    let policy = mcp.call("policy_check", json!({ "file": h("policy.yaml") }));
    let findings = error(&policy, -32603)["data"].as_array().unwrap().len();
    assert!(findings >= 10, "{policy}");
    outputs.push(policy);
    let aliases = mcp.call("alias_list", json!({ "path": h("other-aliases.yaml") }));
    error(&aliases, -32603);
    outputs.push(aliases);
    let tail = mcp.call("audit_tail", json!({}));
    let events = payload(&tail);
    assert_eq!(events["count"], 3);
    assert_eq!(events["skipped"], 3);
    outputs.push(tail);
    outputs.push(mcp.call("alias_list", json!({})));
    outputs.push(mcp.call("policy_check", json!({ "file": h("audit.log") })));
    outputs.push(mcp.call("mint_usage", json!({})));

    let finished = mcp.finish();
    assert!(finished.status.success());
    let stdout = Value::Array(outputs).to_string();
    for (name, text) in [("stdout", &stdout), ("stderr", &finished.stderr)] {
        assert!(!text.contains(CANARY), "the canary leaked on {name}");
        assert!(
            !text.contains("3f9b1c7e0d2a48a6"),
            "part of the canary leaked on {name}"
        );
        assert!(
            !text.to_ascii_lowercase().contains("secret-canary"),
            "the canary leaked on {name}"
        );
    }
    // The agent got one answer for all of them; the operator's log names the guard's reason.
    for reason in [
        "refused_secret_file",
        "refused_capabilities_file",
        "refused_outside",
    ] {
        assert!(finished.stderr.contains(reason), "{reason} not logged");
    }
    // The trace-level log did run: the canary's absence is not for want of logging.
    assert!(
        finished.stderr.contains("Request answered"),
        "{}",
        finished.stderr
    );
}

#[test]
fn an_unloadable_aliases_file_fails_closed() {
    let home = tempfile::tempdir().unwrap();
    let secret = home.path().join("token");
    fs::write(&secret, format!("{CANARY}\n")).unwrap();
    // An aliases file that does not load: which files hold secrets is unknown, so nothing else
    // is read.
    fs::write(
        home.path().join("aliases.yaml"),
        format!(
            "aliases:\n  - name: a\n    source: file:{}\n    oops: 1\n",
            secret.display()
        ),
    )
    .unwrap();
    fs::write(home.path().join("policy.yaml"), "version: 1\nrules: []\n").unwrap();
    let mut mcp = Mcp::start(&[("MINT_HOME", home.path().as_os_str().to_owned())]);
    for path in [secret.clone(), home.path().join("policy.yaml")] {
        let response = mcp.call("policy_check", json!({ "file": path }));
        assert_eq!(error(&response, -32603)["data"]["kind"], "unreadable");
    }
    // The aliases file itself, recognisably one, is still reported, by position and kind.
    let response = mcp.call("alias_list", json!({}));
    let error = error(&response, -32603);
    let codes: Vec<&Value> = error["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["code"])
        .collect();
    assert!(codes.contains(&&json!("E010")), "{error}");
    let finished = mcp.finish();
    assert!(!finished.stderr.contains(CANARY));
}
