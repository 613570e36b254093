//! Golden transcripts: raw lines fed to the real binary, every reply snapshotted with insta.
//!
//! Each entry shows what was sent and every response it produced, in order; an entry with no
//! reply is a line the server must not answer (blank, malformed, a notification). Review changes
//! with `cargo insta review`: these files are the protocol's exact wording.

use serde_json::{Value, json};

use crate::support::{Mcp, example_env};

/// One line to send: as text, or as bytes with a label for the snapshot.
enum Step {
    Line(String),
    Bytes(&'static str, Vec<u8>),
}

fn line(text: &str) -> Step {
    Step::Line(text.to_owned())
}

fn run(steps: Vec<Step>) -> Value {
    let mut mcp = Mcp::start(&example_env());
    let mut transcript = Vec::new();
    for step in steps {
        let (shown, bytes) = match step {
            Step::Line(line) => (line.clone(), line.into_bytes()),
            Step::Bytes(label, bytes) => (label.to_owned(), bytes),
        };
        let replies = mcp.exchange(&bytes);
        transcript.push(json!({ "request": shown, "responses": replies }));
    }
    let finished = mcp.finish();
    assert!(finished.status.success(), "{}", finished.stderr);
    assert!(finished.stdout.is_empty(), "{:?}", finished.stdout);
    let transcript = Value::Array(transcript);
    let text = transcript.to_string();
    assert!(
        !text.contains("FIXTURE-VALUE-9Z") && !finished.stderr.contains("FIXTURE-VALUE-9Z"),
        "a value from a fixture file was echoed"
    );
    transcript
}

fn call(name: &str, arguments: Value) -> String {
    json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":name,"arguments":arguments}})
        .to_string()
}

#[test]
fn protocol() {
    let transcript = run(vec![
        line(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"golden","version":"1"}}}"#,
        ),
        line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
        line(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05"}}"#,
        ),
        line(
            r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"1999-01-01"}}"#,
        ),
        line(r#"{"jsonrpc":"2.0","id":3,"method":"initialize"}"#),
        line(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#),
        line(r#"{"jsonrpc":"2.0","id":"text-id","method":"ping","params":{}}"#),
        line(r#"{"jsonrpc":"2.0","method":"ping"}"#),
        line(r#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#),
        line(r#"{"jsonrpc":"2.0","id":5,"method":"resources/list"}"#),
        line(r#"{"jsonrpc":"2.0","id":6,"method":"server/discover","params":{}}"#),
        line(""),
        line("   \t "),
        Step::Bytes(
            "ping ending in CR LF",
            b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}\r".to_vec(),
        ),
        line(r#"{"jsonrpc":"2.0","id":8,"method":"ping""#),
        line("not json at all"),
        Step::Bytes(
            "invalid UTF-8",
            b"{\"jsonrpc\":\"2.0\",\"id\":\"\xff\"}".to_vec(),
        ),
        line(r#"[{"jsonrpc":"2.0","id":9,"method":"ping"}]"#),
        line("42"),
        line(r#"{"id":10,"method":"ping"}"#),
        line(r#"{"jsonrpc":"2.0","id":11}"#),
        line(r#"{"jsonrpc":"2.0","id":{"nested":true},"method":"ping"}"#),
        line(r#"{"jsonrpc":"2.0","id":12,"method":"ping","params":[]}"#),
        line(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#),
    ]);
    insta::assert_json_snapshot!("protocol", transcript);
}

#[test]
fn tools() {
    let steps: Vec<String> = vec![
        // alias_list
        call("alias_list", json!({})),
        call("alias_list", json!({"path": "examples/aliases.yaml"})),
        call("alias_list", json!({"path": "mcp/tests/fixtures/broken-aliases.yaml"})),
        call("alias_list", json!({"path": "mcp/tests/fixtures/missing.yaml"})),
        call("alias_list", json!({"path": ""})),
        call("alias_list", json!({"path": 5})),
        call("alias_list", json!({"paht": "examples/aliases.yaml"})),
        // policy_check
        call("policy_check", json!({"file": "examples/policy.yaml"})),
        call("policy_check", json!({"file": "mcp/tests/fixtures/broken-policy.yaml"})),
        call("policy_check", json!({"file": "mcp/tests/fixtures/approval-policy.yaml"})),
        call("policy_check", json!({"file": "mcp/tests/fixtures/approval-warnings.yaml"})),
        call("policy_check", json!({"file": "mcp/tests/fixtures/not-utf8.yaml"})),
        call("policy_check", json!({"file": "examples/audit.log"})),
        call("policy_check", json!({})),
        call("policy_check", json!({"file": ""})),
        call("policy_check", json!({"file": ["examples/policy.yaml"]})),
        call("policy_check", json!({"file": "mcp/tests/fixtures/missing.yaml"})),
        call("policy_check", json!({"file": "examples"})),
        call("policy_check", json!({"file": "mcp/tests/fixtures/home/capabilities.yaml"})),
        call("policy_check", json!({"file": "mcp/tests/fixtures/home/../home/./capabilities.yaml"})),
        call("policy_check", json!({"file": "/proc/self/environ"})),
        call("policy_check", json!({"file": "/dev/stdin"})),
        // audit_tail
        call("audit_tail", json!({})),
        call("audit_tail", json!({"n": 2})),
        call("audit_tail", json!({"n": 3, "path": "mcp/tests/fixtures/mixed-audit.log"})),
        call("audit_tail", json!({"n": 0})),
        call("audit_tail", json!({"n": -3})),
        call("audit_tail", json!({"n": 2.5})),
        call("audit_tail", json!({"n": "5"})),
        call("audit_tail", json!({"path": "examples/policy.yaml"})),
        // mint_usage
        call("mint_usage", json!({})),
        call("mint_usage", json!({"verbose": true})),
        // tools/call shapes
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"mint_usage"}}"#
            .to_owned(),
        r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"mint_usage","arguments":null}}"#
            .to_owned(),
        r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/etc/passwd"}}}"#
            .to_owned(),
        r#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"arguments":{}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"alias_list","arguments":"path"}}"#
            .to_owned(),
        r#"{"jsonrpc":"2.0","id":13,"method":"tools/call"}"#.to_owned(),
    ];
    let steps = steps.into_iter().map(Step::Line).collect();
    insta::assert_json_snapshot!("tools", run(steps));
}
