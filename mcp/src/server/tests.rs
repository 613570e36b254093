//! Unit tests of the dispatch: each method's result and the error codes.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::*;

fn repo(path: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join(path)
}

fn server() -> Server {
    Server::new(Config {
        home: repo("mcp/tests/fixtures/home"),
        aliases: repo("examples/aliases.yaml"),
        audit_log: repo("examples/audit.log"),
        policy: repo("examples/policy.yaml"),
        capabilities: repo("mcp/tests/fixtures/home/capabilities.yaml"),
        listen: "127.0.0.1:8700".to_owned(),
    })
}

fn send(server: &Server, request: Value) -> Value {
    let line = server.handle_line(request.to_string().as_bytes()).unwrap();
    assert!(!line.contains('\n'));
    serde_json::from_str(&line).unwrap()
}

fn call(server: &Server, name: &str, arguments: Value) -> Value {
    send(
        server,
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":name,"arguments":arguments}}),
    )
}

fn payload(response: &Value) -> Value {
    let content = response["result"]["content"].as_array().unwrap();
    assert_eq!(content.len(), 1);
    assert_eq!(content[0]["type"], "text");
    let text = content[0]["text"].as_str().unwrap();
    assert!(text.contains("\n  "), "not pretty: {text}");
    serde_json::from_str(text).unwrap()
}

#[test]
fn initialize_echoes_a_supported_version_and_else_offers_the_newest() {
    let server = server();
    for version in PROTOCOL_VERSIONS {
        let response = send(
            &server,
            json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":version}}),
        );
        assert_eq!(response["id"], 0);
        assert_eq!(response["result"]["protocolVersion"], version);
    }
    for params in [
        json!({"protocolVersion":"2099-01-01"}),
        json!({}),
        json!({"protocolVersion":5}),
    ] {
        let response = send(
            &server,
            json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":params}),
        );
        assert_eq!(response["result"]["protocolVersion"], "2025-11-25");
        assert_eq!(response["result"]["serverInfo"]["name"], "mint-mcp");
        assert_eq!(
            response["result"]["serverInfo"]["version"],
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(response["result"]["capabilities"], json!({"tools":{}}));
    }
}

#[test]
fn ping_and_unknown_methods() {
    let server = server();
    let pong = send(&server, json!({"jsonrpc":"2.0","id":"p","method":"ping"}));
    assert_eq!(pong, json!({"jsonrpc":"2.0","id":"p","result":{}}));
    let unknown = send(
        &server,
        json!({"jsonrpc":"2.0","id":2,"method":"resources/list"}),
    );
    assert_eq!(unknown["error"]["code"], INTERNAL_ERROR);
    assert_eq!(
        unknown["error"]["message"],
        "unknown method `resources/list`"
    );
    let bad = send(
        &server,
        json!({"jsonrpc":"2.0","id":3,"method":"ping","params":[1]}),
    );
    assert_eq!(bad["error"]["code"], INVALID_PARAMS);
}

#[test]
fn tools_call_checks_its_params() {
    let server = server();
    let unknown = call(&server, "read_file", json!({}));
    assert_eq!(unknown["error"]["code"], INTERNAL_ERROR);
    assert_eq!(unknown["error"]["message"], "unknown tool `read_file`");
    // The tool is looked up first: an unknown one is unknown whatever its arguments.
    for arguments in [json!(5), json!("x"), json!([1])] {
        let unknown = call(&server, "read_file", arguments);
        assert_eq!(unknown["error"]["code"], INTERNAL_ERROR);
    }
    for params in [
        json!({}),
        json!({"name":5}),
        json!({"name":"mint_usage","arguments":[1]}),
        json!({"name":"mint_usage","arguments":"x"}),
    ] {
        let response = send(
            &server,
            json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":params}),
        );
        assert_eq!(response["error"]["code"], INVALID_PARAMS, "{params}");
    }
    let none = send(
        &server,
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"mint_usage"}}),
    );
    assert_eq!(payload(&none)["tools"][0], "alias_list");
}

#[test]
fn the_tools_read_the_examples() {
    let server = server();
    let aliases = payload(&call(&server, "alias_list", json!({})));
    assert_eq!(aliases["count"], 3);
    assert_eq!(aliases["aliases"][0]["name"], "github");
    assert!(aliases["aliases"][0].get("source").is_none());

    let policy = payload(&call(
        &server,
        "policy_check",
        json!({"file": repo("examples/policy.yaml")}),
    ));
    let keys: Vec<&String> = policy.as_object().unwrap().keys().collect();
    assert_eq!(
        keys.len(),
        6,
        "file, valid, rule_count, legacy_call_limit_count, default, warnings: {keys:?}"
    );
    assert_eq!(policy["valid"], true);

    let audit = payload(&call(&server, "audit_tail", json!({"n": 2})));
    assert_eq!(audit["count"], 2);
    assert_eq!(audit["skipped"], 0);
    assert_eq!(audit["events"].as_array().unwrap().len(), 2);
}

#[test]
fn oversized_results_become_errors_within_the_limit() {
    let id = RawValue::from_string("1".to_owned()).unwrap();
    let big = "x".repeat(MAX_MESSAGE_BYTES);
    let line = fit(&id, Ok(serde_json::value::to_raw_value(&big).unwrap()));
    assert!(line.len() < MAX_MESSAGE_BYTES);
    assert!(line.contains("larger than the 1 MiB message limit"));

    let findings: Vec<Value> = (0..20_000)
        .map(|i| json!({"code":"E010","line":i,"message":"x".repeat(100)}))
        .collect();
    let line = fit(
        &id,
        Err(RpcError {
            code: INTERNAL_ERROR,
            message: "20000 errors in p.yaml".to_owned(),
            data: Some(serde_json::value::to_raw_value(&findings).unwrap()),
        }),
    );
    let value: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(value["error"]["message"], "20000 errors in p.yaml");
    assert_eq!(
        value["error"]["data"].as_array().unwrap().len(),
        MAX_FINDINGS_WHEN_LONG
    );
}

#[test]
fn alias_list_keeps_its_fields_for_an_alias_with_a_placeholder_shape() {
    // A value-shaped placeholder is the broker's business: `alias_list` shows the fields its
    // reference fixes, neither the shape nor a value (mint-mcp holds no key to derive one).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("aliases.yaml");
    std::fs::write(
        &file,
        "aliases:\n  - name: openai\n    description: OpenAI key\n    hosts: [api.openai.com]\n    env: [OPENAI_API_KEY]\n    placeholder: {prefix: sk-, length: 48}\n",
    )
    .unwrap();
    let server = Server::new(Config {
        home: dir.path().to_owned(),
        aliases: file,
        audit_log: dir.path().join("audit.log"),
        policy: dir.path().join("policy.yaml"),
        capabilities: dir.path().join("capabilities.yaml"),
        listen: "127.0.0.1:8700".to_owned(),
    });
    let response = call(&server, "alias_list", json!({}));
    assert!(response.get("error").is_none(), "{response}");
    let aliases = payload(&response);
    assert_eq!(aliases["count"], 1);
    let alias = aliases["aliases"][0].as_object().unwrap();
    let mut keys: Vec<&str> = alias.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["description", "hosts", "name", "sites"], "{alias:?}");
}
