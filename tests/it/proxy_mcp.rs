//! Real agents' clients through Mint, end to end: the official MCP Python SDK on both sides of
//! the proxy (a Streamable-HTTP server whose endpoint needs an API key that only Mint holds, and
//! the SDK's client), and unmodified HTTP clients (curl, Python `requests` and `httpx2`) that use
//! Mint as their forward proxy through `http_proxy` / `HTTP_PROXY`.
//!
//! The MCP server (`tests/python/mcp_http_server.py`) has three tools: `search`, `leak` (answers
//! with the API key it received) and `delete_everything` (records that it ran, which it must
//! never do). The policy follows POLICY.md: one allow rule for the endpoint without `tool`
//! (initialize, tools/list, notifications, the GET stream, the DELETE at the end) and one naming
//! the allowed tools. A canary API key must reach the server and never the client, the audit log
//! or Mint's stderr. The client runs two sessions: a `ClientSession` with the initialize
//! handshake, and the SDK's high-level `Client`, which speaks the modern protocol by default.
//! The same client also runs configured by its environment alone (`HTTPS_PROXY`, `SSL_CERT_FILE`)
//! toward the server's own `https://` URL on a real-looking name, through a tunnel Mint
//! intercepts (issue 15).
//!
//! What loopback-only tests cannot show: forward-proxy `http://` toward a host that is not
//! loopback is sent upstream as `https://`; there is no such server here, so only the decision
//! (scheme `https`, port 443, before any DNS lookup) is checked.
//!
//! The Python peers live in the venv that `.ci/run` builds at `.venv` from
//! `tests/python/requirements.txt`. When it is missing the tests are skipped with a note, unless
//! `CI` is set or `MINT_REQUIRE_MCP_CLIENTS=1`, where a missing venv fails them.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mint_tests::broker::{
    Broker, CA_VARIABLES, CurlResponse, MintHome, curl_via_proxy, parse_raw_answer, raw_http,
};
use mint_tests::echo_upstream::EchoConfig;
use mint_tests::interception::client_command;
use mint_tests::lab::{self, LabConfig};
use mint_tests::{echo_peer, repo_root};
use serde_json::Value;

/// The MCP server's API key (alias `mcpkey`). `/`, `+` and `=` make its JSON, percent and base64
/// forms differ from the raw one.
const CANARY: &str = "canary-Mc9pQ2x/L7v+K4w=T8s";
/// The echo upstream's secret in the forward-proxy tests (alias `echo`).
const CANARY_ECHO: &str = "canary-Fw3dE8r/P5x+Y1z=Q6n";
const MARKER: &str = "[mint:redacted]";
/// Mint's JSON-RPC error code for a refused call.
const JSONRPC_REFUSED: i64 = -32001;

// ---------------------------------------------------------------------------------------------
// Python peers
// ---------------------------------------------------------------------------------------------

/// Whether a missing venv fails the test rather than skipping it.
fn python_required() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0")
        || std::env::var_os("MINT_REQUIRE_MCP_CLIENTS").is_some_and(|v| v == "1")
}

/// The venv's Python, or `None` after a note (a failure when the venv is required).
#[track_caller]
fn python() -> Option<PathBuf> {
    let python = repo_root().join(".venv/bin/python");
    if python.is_file() {
        return Some(python);
    }
    assert!(
        !python_required(),
        "{} is missing (run the setup_mcp_clients step of .ci/run)",
        python.display()
    );
    let _ = writeln!(
        std::io::stderr(),
        "note: skipping: {} is missing; `bash .ci/run` creates it \
         (set MINT_REQUIRE_MCP_CLIENTS=1 to make this a failure)",
        python.display()
    );
    None
}

fn script(name: &str) -> PathBuf {
    repo_root().join("tests/python").join(name)
}

/// A Python command with no proxy setting and no Mint variable inherited.
fn python_command(python: &Path) -> Command {
    let mut command = Command::new(python);
    for (key, _) in std::env::vars() {
        let lower = key.to_ascii_lowercase();
        if key.starts_with("MINT_") || lower.ends_with("_proxy") {
            command.env_remove(&key);
        }
    }
    command.env("PYTHONDONTWRITEBYTECODE", "1");
    command
}

/// Runs `command` to completion with its output captured, killing it after `limit` (a hang
/// guard, not a timing assertion).
#[track_caller]
fn run_bounded(mut command: Command, limit: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drain both pipes while waiting, so a chatty child cannot block on a full pipe.
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || read_all(stdout));
    let err = std::thread::spawn(move || read_all(stderr));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the client did not finish within {limit:?}; stderr:\n{}",
                String::from_utf8_lossy(&err.join().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn read_all(mut pipe: impl std::io::Read) -> Vec<u8> {
    let mut bytes = Vec::new();
    let _ = pipe.read_to_end(&mut bytes);
    bytes
}

/// How the MCP server talks and answers.
#[derive(Clone, Copy, Debug)]
struct ServerMode {
    tls: bool,
    json_response: bool,
}

/// The SDK's Streamable-HTTP MCP server on `127.0.0.1:0`; dropping it kills the process.
struct McpServer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl McpServer {
    /// Starts the server, its leaf also for the DNS names `names`, and waits (bounded) until it
    /// prints its port.
    #[track_caller]
    fn start(python: &Path, mode: ServerMode, names: &[&str]) -> McpServer {
        let dir = tempfile::tempdir().unwrap();
        let mut command = python_command(python);
        command
            .arg(script("mcp_http_server.py"))
            .arg("--calls")
            .arg(dir.path().join("calls"))
            .arg("--log")
            .arg(dir.path().join("requests.jsonl"))
            .arg("--ca-out")
            .arg(dir.path().join("ca.pem"))
            .arg("--gate")
            .arg(dir.path().join("gate"))
            .env("MCP_SERVER_API_KEY", CANARY)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.path().join("server.stderr")).unwrap());
        if mode.tls {
            command.arg("--tls");
        }
        if mode.json_response {
            command.arg("--json-response");
        }
        for name in names {
            command.args(["--name", name]);
        }
        let mut child = command.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, receive) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = send.send(line);
        });
        // A slow start (Python imports on a busy machine) is not a failure; a server that never
        // listens is.
        let line = receive
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_default();
        let port = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|port| port.parse().ok());
        let Some(port) = port else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the MCP server did not start ({line:?}): {}",
                std::fs::read_to_string(dir.path().join("server.stderr")).unwrap_or_default()
            );
        };
        McpServer { child, port, dir }
    }

    fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    fn gate(&self) -> PathBuf {
        self.dir.path().join("gate")
    }

    /// The tools that ran, in order.
    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Every HTTP request the server received (method, path, `key_ok`, header names, JSON-RPC
    /// methods and tools).
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// MCP through Mint
// ---------------------------------------------------------------------------------------------

/// The MCP server's name in the interception test, pinned to `127.0.0.1` with `--resolve`.
const MCP_HOST: &str = "mcp.example.test";

/// The alias `mcpkey`, bound to `host`.
fn mcp_aliases(host: &str) -> String {
    format!("aliases:\n  - name: mcpkey\n    hosts: [{host}]\n    source: file:$SECRETS/mcpkey\n")
}

/// POLICY.md's shape for an MCP server on `host`: the endpoint without `tool`, and the allowed
/// tools.
fn mcp_policy(scheme: &str, host: &str, port: u16) -> String {
    format!(
        "version: 1
default: deny
rules:
  - id: mcp-endpoint
    description: the MCP endpoint's own traffic (initialize, tools/list, notifications, stream)
    effect: allow
    match:
      alias: [mcpkey]
      scheme: [{scheme}]
      host: [{host}]
      port: [{port}]
      method: [POST, GET, DELETE]
      path: [/mcp]
  - id: mcp-tools
    description: the tools the agent may call
    effect: allow
    match:
      alias: [mcpkey]
      scheme: [{scheme}]
      host: [{host}]
      port: [{port}]
      method: [POST]
      path: [/mcp]
      tool: [search, leak]
"
    )
}

/// An MCP server, a broker in front of it, and a capability.
struct McpLab {
    server: McpServer,
    home: MintHome,
    cap: String,
    broker: Broker,
}

impl McpLab {
    /// The server on `127.0.0.1`.
    #[track_caller]
    fn start(python: &Path, mode: ServerMode) -> McpLab {
        McpLab::start_on(python, mode, "127.0.0.1")
    }

    /// The server as `host`: a DNS name is in its leaf and pinned to `127.0.0.1` with
    /// `mint serve --resolve`.
    #[track_caller]
    fn start_on(python: &Path, mode: ServerMode, host: &str) -> McpLab {
        let named = host != "127.0.0.1";
        let names = [host];
        let server = McpServer::start(python, mode, if named { &names } else { &[] });
        let scheme = if mode.tls { "https" } else { "http" };
        let home = MintHome::new(
            &mcp_policy(scheme, host, server.port),
            &mcp_aliases(host),
            &[("mcpkey", CANARY)],
        );
        let cap = home.issue_capability("mino", &[]);
        let pin = format!("{host}:{}:127.0.0.1", server.port);
        let resolve: &[&str] = if named { &["--resolve", &pin] } else { &[] };
        let broker = home.serve(&server.ca_file(), resolve);
        McpLab {
            server,
            home,
            cap,
            broker,
        }
    }

    /// No secret in `seen`, the audit log or Mint's stderr, and no capability token in the
    /// latter two.
    #[track_caller]
    fn assert_clean(&self, seen: &str) {
        assert_no_secret(&self.broker, &self.cap, CANARY, seen);
    }
}

/// `secret` (raw or JSON-escaped) is not in `seen`, the audit log or Mint's stderr; `cap` is not
/// in the audit log or Mint's stderr.
#[track_caller]
fn assert_no_secret(broker: &Broker, cap: &str, secret: &str, seen: &str) {
    let escaped = secret.replace('/', "\\/");
    let audit = broker.audit_text();
    let stderr = broker.stderr();
    for form in [secret, escaped.as_str()] {
        assert!(!seen.contains(form), "the client saw the secret: {seen}");
        assert!(!audit.contains(form), "the audit log holds the secret");
        assert!(!stderr.contains(form), "Mint's stderr holds the secret");
    }
    assert!(!audit.contains(cap), "the audit log holds the capability");
    assert!(!stderr.contains(cap), "Mint's stderr holds the capability");
}

/// How the SDK client reaches the server through Mint.
#[derive(Clone, Copy, Debug)]
enum Way {
    /// `http://MINT/v1/proxy/{scheme}/127.0.0.1:PORT/mcp` with `Mint-Capability`.
    Route,
    /// `http://127.0.0.1:PORT/mcp` with Mint as the HTTP proxy (`Proxy-Authorization`).
    Forward,
    /// `https://mcp.example.test:PORT/mcp` with only `HTTPS_PROXY=http://agent:CAP@MINT` and
    /// `SSL_CERT_FILE=<Mint's CA>`: a `CONNECT` tunnel Mint intercepts.
    Intercepted,
    /// The same URL with the client run by `mint run` (issue 16), over bogus inherited CA and
    /// proxy variables: the environment `mint run` gives it is all that configures it.
    MintRun,
}

/// Runs `tests/python/mcp_http_client.py` against the lab (a `ClientSession` with the initialize
/// handshake, then the high-level `Client` in its default mode, which speaks the modern
/// protocol) and checks everything the issue asks of MCP through Mint.
#[track_caller]
fn run_mcp_session(python: &Path, mode: ServerMode, way: Way) {
    let host = match way {
        Way::Intercepted | Way::MintRun => MCP_HOST,
        Way::Route | Way::Forward => "127.0.0.1",
    };
    let lab = McpLab::start_on(python, mode, host);
    let port = lab.server.port;
    let scheme = if mode.tls { "https" } else { "http" };
    let mut command = if let Way::MintRun = way {
        let mut command = lab.home.mint();
        command
            .envs(mint_tests::interception::INHERITED.iter().copied())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .args(["run", "--agent", "mino", "--proxy", &lab.broker.base, "--"])
            .arg(python);
        command
    } else {
        python_command(python)
    };
    command.arg(script("mcp_http_client.py"));
    match way {
        Way::Route | Way::Forward => {
            command.env("MINT_CAPABILITY", &lab.cap);
        }
        Way::MintRun => {
            assert!(mode.tls, "an intercepted tunnel goes to an https server");
            command.args([
                "--url",
                &format!("https://{MCP_HOST}:{port}/mcp"),
                "--trust-env",
            ]);
        }
        Way::Intercepted => {
            // The machine's CA variables must not decide what the client trusts.
            for variable in CA_VARIABLES {
                command.env_remove(variable);
            }
        }
    }
    match way {
        Way::Route => {
            command.args([
                "--url",
                &format!("{}/v1/proxy/{scheme}/127.0.0.1:{port}/mcp", lab.broker.base),
            ]);
        }
        Way::Forward => {
            command.args([
                "--url",
                &format!("http://127.0.0.1:{port}/mcp"),
                "--proxy",
                &lab.broker.base,
            ]);
        }
        // Its arguments were given above.
        Way::MintRun => {}
        Way::Intercepted => {
            assert!(mode.tls, "an intercepted tunnel goes to an https server");
            command
                .args([
                    "--url",
                    &format!("https://{MCP_HOST}:{port}/mcp"),
                    "--trust-env",
                ])
                .env(
                    "HTTPS_PROXY",
                    format!("http://agent:{}@{}", lab.cap, lab.broker.addr()),
                )
                .env("SSL_CERT_FILE", lab.home.path().join("ca.pem"));
        }
    }
    let streamed = !mode.json_response;
    if streamed {
        command.arg("--gate").arg(lab.server.gate());
    }
    let output = run_bounded(command, Duration::from_secs(300));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "the MCP client failed ({mode:?}, {way:?}):\n{stderr}\n{stdout}"
    );
    let report: Value = serde_json::from_str(stdout.trim()).unwrap();
    let mut expected = vec![
        "initialize and tools/list",
        "search answered",
        "leaked key redacted",
        "delete_everything refused with a JSON-RPC error on HTTP 403",
    ];
    if streamed {
        expected.push("progress streamed before the end of the SSE response");
    }
    expected.extend([
        "Client (auto): search answered",
        "Client (auto): leaked key redacted",
        "Client (auto): delete_everything refused with a JSON-RPC error on HTTP 403",
    ]);
    assert_eq!(report["checks"], serde_json::json!(expected), "{stderr}");
    // Every response carried Mint's request id: the client only ever talked to Mint.
    for response in report["responses"].as_array().unwrap() {
        let headers = response["headers"].as_array().unwrap();
        assert!(
            headers.iter().any(|h| h[0] == "mint-request-id"),
            "{response}"
        );
    }
    let leaked = report["responses"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["body"].as_str().unwrap().contains(MARKER));
    assert!(leaked, "no answer carried the redaction marker");

    // The server: every request carried the real key, nothing of Mint's, and the denied tool
    // never reached it (neither its HTTP request nor its code).
    let mut expected_calls = vec!["search", "leak"];
    if streamed {
        expected_calls.push("search");
    }
    expected_calls.extend(["search", "leak"]);
    assert_eq!(lab.server.calls(), expected_calls);
    let requests = lab.server.requests();
    assert!(!requests.is_empty());
    for request in &requests {
        assert_eq!(request["key_ok"], true, "{request}");
        for name in request["header_names"].as_array().unwrap() {
            let name = name.as_str().unwrap();
            assert!(
                !name.starts_with("mint-") && !name.starts_with("proxy-"),
                "{request}"
            );
        }
        assert!(
            !request["tools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t == "delete_everything"),
            "the denied call reached the server: {request}"
        );
    }
    let methods: Vec<&str> = requests
        .iter()
        .flat_map(|r| r["jsonrpc_methods"].as_array().unwrap())
        .filter_map(Value::as_str)
        .collect();
    for method in [
        "initialize",
        "notifications/initialized",
        "tools/list",
        "server/discover",
    ] {
        assert!(methods.contains(&method), "{methods:?}");
    }
    let http_methods: Vec<&str> = requests
        .iter()
        .filter_map(|r| r["method"].as_str())
        .collect();
    assert!(
        http_methods.contains(&"GET"),
        "no GET stream: {http_methods:?}"
    );
    assert!(
        http_methods.contains(&"DELETE"),
        "no DELETE: {http_methods:?}"
    );

    // The audit trail: tool calls carry `mcp_tool`, decided by the tools rule; the endpoint's own
    // traffic has no tool and is decided by the endpoint rule; the denied call is recorded.
    let records = lab.broker.audit_records();
    let decisions: Vec<&Value> = records
        .iter()
        .filter(|r| r["phase"] == "decision")
        .collect();
    for tool in ["search", "leak"] {
        let decided: Vec<&&Value> = decisions.iter().filter(|r| r["mcp_tool"] == tool).collect();
        assert!(!decided.is_empty(), "no decision for {tool}");
        for record in decided {
            assert_eq!(record["decision"], "allow", "{record}");
            assert_eq!(record["rule"], serde_json::json!(["mcp-tools"]), "{record}");
            let outcome = lab.broker.outcome_of(record["id"].as_str().unwrap());
            assert_eq!(outcome["outcome"], "completed", "{outcome}");
            assert_eq!(outcome["mcp_tool"], tool, "{outcome}");
        }
    }
    let denied: Vec<&&Value> = decisions
        .iter()
        .filter(|r| r["mcp_tool"] == "delete_everything")
        .collect();
    // One refusal per session.
    assert_eq!(denied.len(), 2, "{decisions:?}");
    for record in denied {
        assert_eq!(record["decision"], "deny", "{record}");
        assert_eq!(record["reason"], "no_allow_rule", "{record}");
        let outcome = lab.broker.outcome_of(record["id"].as_str().unwrap());
        assert_eq!(
            (&outcome["outcome"], &outcome["status"]),
            (&Value::from("denied"), &Value::from(403)),
            "{outcome}"
        );
    }
    for record in &decisions {
        assert_eq!(record["host"], host, "{record}");
    }
    // Through interception the tunnels are recorded too, as `CONNECT`s (the per-request rules
    // are decided inside); otherwise there is none.
    let connects: Vec<&&Value> = decisions
        .iter()
        .filter(|r| r["method"] == "CONNECT")
        .collect();
    match way {
        Way::Intercepted | Way::MintRun => {
            assert!(!connects.is_empty(), "{decisions:?}");
            for record in &connects {
                assert_eq!(record["decision"], "allow", "{record}");
                assert_eq!(record["agent"], "mino", "{record}");
            }
            assert!(
                records.iter().any(|r| r["reason"] == "tunnel_opened"),
                "{records:?}"
            );
        }
        Way::Route | Way::Forward => assert!(connects.is_empty(), "{connects:?}"),
    }
    let endpoint: Vec<&&Value> = decisions
        .iter()
        .filter(|r| r["mcp_tool"].is_null() && r["method"] != "CONNECT")
        .collect();
    assert!(endpoint.len() >= 4, "{decisions:?}");
    for record in endpoint {
        assert_eq!(record["decision"], "allow", "{record}");
        assert_eq!(
            record["rule"],
            serde_json::json!(["mcp-endpoint"]),
            "{record}"
        );
        assert_eq!(record["scheme"], scheme, "{record}");
    }

    lab.assert_clean(&format!("{stdout}\n{stderr}"));
}

/// The SDK client through `/v1/proxy/http/...` to the SDK server over plain HTTP on loopback,
/// SSE responses: allowed tools work, the denied tool is a JSON-RPC error from an HTTP 403 and
/// never reaches the server, the key the `leak` tool echoes comes back redacted, and a progress
/// notification streams through Mint before the response ends (the server answers only once the
/// client has seen it).
#[test]
fn mcp_sdk_through_the_route_over_http_with_sse_responses() {
    let Some(python) = python() else { return };
    run_mcp_session(
        &python,
        ServerMode {
            tls: false,
            json_response: false,
        },
        Way::Route,
    );
}

/// The same over HTTPS (the server's own CA given to `mint serve --upstream-ca`), with the
/// server answering POSTs as `application/json` rather than SSE.
#[test]
fn mcp_sdk_through_the_route_over_https_with_json_responses() {
    let Some(python) = python() else { return };
    run_mcp_session(
        &python,
        ServerMode {
            tls: true,
            json_response: true,
        },
        Way::Route,
    );
}

/// The same with Mint as the SDK client's HTTP proxy (httpx2's proxy transport, the capability
/// in `Proxy-Authorization`): the MCP URL is the server's own, SSE responses stream.
#[test]
fn mcp_sdk_with_mint_as_forward_proxy_with_sse_responses() {
    let Some(python) = python() else { return };
    run_mcp_session(
        &python,
        ServerMode {
            tls: false,
            json_response: false,
        },
        Way::Forward,
    );
}

/// The SDK client configured by its environment alone (`HTTPS_PROXY` with the capability in the
/// proxy URL, `SSL_CERT_FILE` with Mint's CA), toward the HTTPS server's own URL on the name
/// `mcp.example.test` (pinned with `mint serve --resolve`, its CA given as `--upstream-ca`): httpx2
/// opens a `CONNECT` tunnel, Mint intercepts it and runs every MCP request inside through the
/// same checks. The allowed tools get the key, the denied one is never sent, SSE streams.
#[test]
fn issue_15_mcp_sdk_through_an_intercepted_tunnel_with_sse_responses() {
    let Some(python) = python() else { return };
    run_mcp_session(
        &python,
        ServerMode {
            tls: true,
            json_response: false,
        },
        Way::Intercepted,
    );
}

/// The SDK client run by `mint run` (issue 16) toward the HTTPS server's own URL: nothing but the
/// environment `mint run` sets configures it (proxy, bundle), over bogus inherited values.
#[test]
fn issue_16_mcp_sdk_run_by_mint_run_with_sse_responses() {
    let Some(python) = python() else { return };
    run_mcp_session(
        &python,
        ServerMode {
            tls: true,
            json_response: false,
        },
        Way::MintRun,
    );
}

/// Posts `body` to the MCP endpoint through the route with the capability, the key header and
/// `headers` (`-H` values).
fn post_mcp(lab: &McpLab, headers: &[&str], body: &str) -> CurlResponse {
    let cap = format!("Mint-Capability: {}", lab.cap);
    let url = format!(
        "{}/v1/proxy/http/127.0.0.1:{}/mcp",
        lab.broker.base, lab.server.port
    );
    let mut args = vec![
        "-X",
        "POST",
        "-H",
        cap.as_str(),
        "-H",
        "X-Api-Key: {{mint:mcpkey}}",
        "-H",
        "Content-Type: application/json",
        "-H",
        "Accept: application/json, text/event-stream",
    ];
    for header in headers {
        args.extend(["-H", header]);
    }
    args.extend(["--data-binary", body, url.as_str()]);
    mint_tests::broker::curl(&args)
}

/// What the SDK client never sends but an injected agent can: a batch that mixes an allowed and
/// a denied tool, and a `tools/call` notification (no id). Both are refused whole with JSON-RPC
/// errors (one per id, HTTP 403), nothing reaches the server, and both are audited as denied.
#[test]
fn mcp_batch_or_notification_with_a_denied_tool_never_reaches_the_server() {
    let Some(python) = python() else { return };
    let lab = McpLab::start(
        &python,
        ServerMode {
            tls: false,
            json_response: true,
        },
    );
    let batch = r#"[{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search","arguments":{"query":"x"}}},{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"delete_everything","arguments":{}}}]"#;
    let response = post_mcp(&lab, &[], batch);
    assert_eq!(response.status, 403, "{}", response.body);
    let errors = response.json();
    let errors = errors.as_array().unwrap();
    assert_eq!(errors.len(), 2, "{errors:?}");
    for (error, id) in errors.iter().zip([7, 8]) {
        assert_eq!(error["jsonrpc"], "2.0");
        assert_eq!(error["id"], id);
        assert_eq!(error["error"]["code"], JSONRPC_REFUSED);
        assert_eq!(error["error"]["data"]["code"], "policy_denied");
    }
    let id = response.header("mint-request-id").unwrap().to_owned();
    assert_eq!(lab.broker.decision_of(&id)["decision"], "deny");
    assert_eq!(lab.broker.outcome_of(&id)["status"], 403);
    lab.assert_clean(&response.everything());

    let notification = r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"delete_everything","arguments":{}}}"#;
    let response = post_mcp(&lab, &[], notification);
    assert_eq!(response.status, 403, "{}", response.body);
    let error = response.json();
    assert_eq!(error["id"], Value::Null);
    assert_eq!(error["error"]["code"], JSONRPC_REFUSED);
    let id = response.header("mint-request-id").unwrap().to_owned();
    let decision = lab.broker.decision_of(&id);
    assert_eq!(decision["decision"], "deny");
    assert_eq!(decision["mcp_tool"], "delete_everything");
    lab.assert_clean(&response.everything());

    assert!(lab.server.calls().is_empty(), "{:?}", lab.server.calls());
    assert!(
        lab.server.requests().is_empty(),
        "{:?}",
        lab.server.requests()
    );
}

/// The modern protocol (2026-07-28) also names the method and the tool in `Mcp-Method` and
/// `Mcp-Name` headers. Mint decides on the body; a call whose body names an allowed tool and
/// whose `Mcp-Name` names a denied one must not run the denied tool. Today Mint forwards it (the
/// body's tool is allowed) and the official server refuses the mismatch; either refusal keeps
/// the invariant checked here.
#[test]
fn mcp_name_header_naming_a_denied_tool_never_runs_it() {
    let Some(python) = python() else { return };
    let lab = McpLab::start(
        &python,
        ServerMode {
            tls: false,
            json_response: true,
        },
    );
    let call = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"search","arguments":{"query":"x"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let response = post_mcp(
        &lab,
        &[
            "Mcp-Protocol-Version: 2026-07-28",
            "Mcp-Method: tools/call",
            "Mcp-Name: delete_everything",
        ],
        call,
    );
    assert!(response.status >= 400, "{}", response.body);
    assert!(
        !lab.server.calls().iter().any(|c| c == "delete_everything"),
        "{:?}",
        lab.server.calls()
    );
    lab.assert_clean(&response.everything());

    // The same call with a matching header runs `search`: the refusal above was the mismatch.
    let response = post_mcp(
        &lab,
        &[
            "Mcp-Protocol-Version: 2026-07-28",
            "Mcp-Method: tools/call",
            "Mcp-Name: search",
        ],
        call,
    );
    assert_eq!(response.status, 200, "{}", response.body);
    assert_eq!(lab.server.calls(), ["search"]);
    lab.assert_clean(&response.everything());
}

/// The audit record of a refused batch must name the tool that was refused. Today it names the
/// batch's first tool, so a batch `[search, delete_everything]` is recorded as a denied `search`
/// call: an operator reading the trail sees the allowed tool blamed and the dangerous one absent.
/// Mint refuses before sending, so the upstream (the echo server) never matters here, and the
/// test needs no Python.
#[test]
fn mcp_denied_batch_is_audited_with_the_denied_tool() {
    let config = LabConfig {
        echo: EchoConfig::default().plain_http(),
        aliases: ECHO_ALIASES,
        secrets: &[("echo", CANARY_ECHO)],
        ..LabConfig::default()
    };
    let lab = lab::Lab::start(config, |port| {
        format!(
            "  - id: mcp-tools
    effect: allow
    match:
      scheme: [http]
      host: [127.0.0.1]
      port: [{port}]
      method: [POST]
      path: [/mcp]
      tool: [search]
"
        )
    });
    let (broker, cap, port) = (&lab.broker, &lab.cap, lab.port());
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"query":"x"}}},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete_everything","arguments":{}}}]"#;
    let response = mint_tests::broker::curl(&[
        "-X",
        "POST",
        "-H",
        &format!("Mint-Capability: {cap}"),
        "-H",
        "Content-Type: application/json",
        "--data-binary",
        batch,
        &format!("{}/v1/proxy/http/127.0.0.1:{port}/mcp", broker.base),
    ]);
    assert_eq!(response.status, 403, "{}", response.body);
    assert!(lab.peer.server.requests().is_empty());
    let id = response.header("mint-request-id").unwrap().to_owned();
    assert_eq!(broker.decision_of(&id)["mcp_tool"], "delete_everything");
    assert_eq!(broker.outcome_of(&id)["mcp_tool"], "delete_everything");
}

// ---------------------------------------------------------------------------------------------
// Forward-proxy mode with unmodified clients
// ---------------------------------------------------------------------------------------------

const ECHO_ALIASES: &str =
    "aliases:\n  - name: echo\n    hosts: [127.0.0.1]\n    source: file:$SECRETS/echo\n";

mint_tests::lab_newtype!(
    /// A plain-HTTP echo upstream on loopback, and a broker that allows GET and POST to it with the
    /// `echo` alias over `http`.
    ForwardLab
);

impl ForwardLab {
    #[track_caller]
    fn start() -> ForwardLab {
        let config = LabConfig {
            echo: EchoConfig::default().plain_http(),
            aliases: ECHO_ALIASES,
            secrets: &[("echo", CANARY_ECHO)],
            ..LabConfig::default()
        };
        ForwardLab(lab::Lab::start(config, |port| {
            lab::allow(
                "echo-forward",
                "echo",
                port,
                "GET, POST",
                "      scheme: [http]\n",
            )
        }))
    }
}

/// curl with the proxy taken from its environment, as any program run with `http_proxy` set
/// (curl reads only the lowercase name for `http`), and nothing else of the environment's proxy
/// settings. `-D - -o -`, 30 s bound.
#[track_caller]
fn curl_with_env_proxy(proxy_env: &[(&str, &str)], args: &[&str]) -> CurlResponse {
    let mut command = Command::new("curl");
    for (key, _) in std::env::vars() {
        if key.to_ascii_lowercase().ends_with("_proxy") {
            command.env_remove(&key);
        }
    }
    command.envs(proxy_env.iter().copied());
    let output = command
        .args(["-sS", "--http1.1", "--max-time", "30", "-D", "-", "-o", "-"])
        .args(args)
        .output()
        .unwrap();
    let mut response = parse_raw_answer(&output.stdout);
    response.exit = output.status.code().unwrap_or(-1);
    response
}

/// curl configured only through `http_proxy=http://MINT` (and the capability as a proxy header)
/// sends absolute-form requests to a plain-HTTP loopback upstream: the secret is substituted,
/// the upstream sees no `Proxy-*` or `Mint-*` header, the answer (JSON, then an SSE stream) comes
/// back redacted, and the audit records the loopback target as `http`.
#[test]
fn curl_with_http_proxy_env_reaches_a_loopback_upstream() {
    let lab = ForwardLab::start();
    let proxy = lab.broker.base.clone();
    let cap_header = format!("Proxy-Authorization: Bearer {}", lab.cap);
    let env = [("http_proxy", proxy.as_str())];

    let target = format!("http://127.0.0.1:{}/echo?x=1", lab.port());
    let response = curl_with_env_proxy(
        &env,
        &[
            "--proxy-header",
            &cap_header,
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            "-g",
            &target,
        ],
    );
    assert_eq!(
        (response.exit, response.status),
        (0, 200),
        "{}",
        response.body
    );
    let seen = lab.peer.server.requests().last().unwrap();
    assert_eq!(seen.path, "/echo");
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {CANARY_ECHO}").as_str())
    );
    assert!(seen.header_names_starting_with("proxy-").is_empty());
    assert!(seen.header_names_starting_with("mint-").is_empty());
    assert!(!seen.contains(&lab.cap));
    let echoed = response.json();
    let authorization: Vec<&Value> = echoed["headers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|pair| pair[0] == "authorization")
        .map(|pair| &pair[1])
        .collect();
    assert_eq!(authorization, [&Value::from(format!("Bearer {MARKER}"))]);
    let id = response.header("mint-request-id").unwrap().to_owned();
    let decision = lab.broker.decision_of(&id);
    assert_eq!(decision["decision"], "allow");
    assert_eq!(decision["scheme"], "http");
    assert_eq!(decision["port"], lab.port());
    assert_eq!(lab.broker.outcome_of(&id)["outcome"], "completed");
    lab.assert_clean(response.everything());

    // An SSE stream through the forward proxy, every event redacted.
    let target = format!(
        "http://127.0.0.1:{}/sse?n=3&interval_ms=20&echo=authorization",
        lab.port()
    );
    let response = curl_with_env_proxy(
        &env,
        &[
            "-N",
            "--proxy-header",
            &cap_header,
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            "-g",
            &target,
        ],
    );
    assert_eq!(
        (response.exit, response.status),
        (0, 200),
        "{}",
        response.body
    );
    assert!(
        response
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream")),
        "{:?}",
        response.headers
    );
    let events: Vec<Value> = response
        .body
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    assert_eq!(events.len(), 3, "{}", response.body);
    for (n, event) in events.iter().enumerate() {
        assert_eq!(event["n"], n);
        assert_eq!(event["header"], format!("Bearer {MARKER}"));
    }
    lab.assert_clean(response.everything());
}

/// Python `requests` and `httpx2`, configured only with `HTTP_PROXY` / `http_proxy` (and httpx2
/// also with its own `proxy=` setting), reach the loopback upstream through Mint: GET, POST, an
/// SSE stream read line by line on a reused connection, and a 407 without the capability.
#[test]
fn python_requests_and_httpx_with_http_proxy_env() {
    let Some(python) = python() else { return };
    let lab = ForwardLab::start();
    let before = lab.forwarded();
    let mut command = python_command(&python);
    command
        .arg(script("forward_proxy_client.py"))
        .args(["--port", &lab.port().to_string()])
        .env("MINT_CAPABILITY", &lab.cap)
        .env("HTTP_PROXY", &lab.broker.base)
        .env("http_proxy", &lab.broker.base);
    let output = run_bounded(command, Duration::from_secs(300));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "the Python clients failed:\n{stderr}"
    );
    let report: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        report["checks"],
        serde_json::json!([
            "requests (HTTP_PROXY)",
            "httpx2 (HTTP_PROXY)",
            "httpx2 (proxy=)"
        ])
    );
    // Three allowed requests per client reached the upstream; the 407s did not.
    assert_eq!(lab.forwarded() - before, 9);
    for request in lab.peer.server.requests().snapshot() {
        assert_eq!(
            request.header("authorization"),
            Some(format!("Bearer {CANARY_ECHO}").as_str())
        );
        assert!(request.header_names_starting_with("proxy-").is_empty());
        assert!(!request.contains(&lab.cap));
    }
    for id in report["request_ids"].as_array().unwrap() {
        let id = id.as_str().unwrap();
        assert!(lab.broker.outcome_of(id)["outcome"].is_string(), "{id}");
    }
    lab.assert_clean(format!("{stdout}\n{stderr}"));
}

/// A forward-proxy request whose `Host` header names another authority than its absolute target
/// (curl with `-x` and its own `Host`) is refused 400 before anything is sent, and audited.
#[test]
fn forward_host_mismatch_from_curl_is_400() {
    let lab = ForwardLab::start();
    let before = lab.forwarded();
    let response = curl_via_proxy(
        &lab.broker.base,
        &[
            "--proxy-header",
            &format!("Proxy-Authorization: Bearer {}", lab.cap),
            "-H",
            &format!("Host: localhost:{}", lab.port()),
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            "-g",
            &format!("http://127.0.0.1:{}/echo", lab.port()),
        ],
    );
    assert_eq!(response.status, 400, "{}", response.body);
    assert_eq!(response.json()["error"]["code"], "invalid_request");
    assert_eq!(response.header("mint-outcome"), Some("invalid"));
    let id = response.header("mint-request-id").unwrap().to_owned();
    assert_eq!(lab.broker.decision_of(&id)["reason"], "host_mismatch");
    assert_eq!(lab.broker.outcome_of(&id)["status"], 400);
    assert_eq!(lab.forwarded(), before);
    lab.assert_clean(response.everything());
}

/// An HTTPS URL through Mint as proxy makes curl open a `CONNECT` tunnel (issue 15: intercepted,
/// tests/it/interception.rs); to a host no allow rule or alias names it is refused 403 before the tunnel
/// (curl fails). Nothing is forwarded.
#[test]
fn connect_from_an_https_url_to_an_unnamed_host_is_403() {
    let lab = ForwardLab::start();
    let before = lab.forwarded();
    let authority = "unnamed.example.test:443".to_owned();

    // curl as any HTTPS client with `https_proxy` pointing at Mint.
    let mut command = Command::new("curl");
    for (key, _) in std::env::vars() {
        if key.to_ascii_lowercase().ends_with("_proxy") {
            command.env_remove(&key);
        }
    }
    let output = command
        .env("https_proxy", &lab.broker.base)
        .args([
            "-sS",
            "--max-time",
            "30",
            "-o",
            "/dev/null",
            "-w",
            "%{http_connect}",
        ])
        .args([
            "--proxy-header",
            &format!("Proxy-Authorization: Bearer {}", lab.cap),
        ])
        .arg(format!("https://{authority}/echo"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert_eq!(String::from_utf8_lossy(&output.stdout), "403");

    // The answer's body, as a client that reads it sees it.
    let request = format!(
        "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\nProxy-Authorization: Bearer {}\r\nConnection: close\r\n\r\n",
        lab.cap
    );
    let response = raw_http(&lab.broker.base, request.as_bytes());
    assert_eq!(response.status, 403, "{}", response.body);
    let error = response.json()["error"].clone();
    assert_eq!(error["code"], "policy_denied");
    let id = response.header("mint-request-id").unwrap().to_owned();
    let decision = lab.broker.decision_of(&id);
    assert_eq!(decision["method"], "CONNECT");
    assert_eq!(decision["decision"], "deny");
    assert_eq!(lab.forwarded(), before);
    lab.assert_clean(response.everything());
}

/// In forward-proxy mode `http://` toward a host that is not loopback is sent upstream as
/// `https://`, and the policy matches that scheme. Sending it needs a real non-loopback HTTPS
/// server, which loopback-only tests do not have; what is checked here is the decision, before
/// any DNS lookup: a deny rule on `https` catches the `http://` URL, and the audit records
/// scheme `https` and port 443. Nothing is resolved or sent.
#[test]
fn forward_http_to_a_non_loopback_host_is_decided_as_https() {
    let dir = tempfile::tempdir().unwrap();
    // Only for a CA file to give `mint serve`: nothing is sent to it.
    let peer = echo_peer(dir.path(), EchoConfig::default());
    let home = MintHome::new(
        "version: 1
default: deny
rules:
  - id: example-read
    effect: allow
    match:
      host: [api.example.com]
      method: [GET]
  - id: no-https-admin
    effect: deny
    match:
      scheme: [https]
      host: [api.example.com]
      path: [/admin/**]
",
        ECHO_ALIASES,
        &[("echo", CANARY_ECHO)],
    );
    let cap = home.issue_capability("mino", &[]);
    let broker = home.serve(&peer.ca_file, &[]);
    let response = curl_via_proxy(
        &broker.base,
        &[
            "--proxy-header",
            &format!("Proxy-Authorization: Bearer {cap}"),
            "http://api.example.com/admin/users",
        ],
    );
    assert_eq!(response.status, 403, "{}", response.body);
    let error = response.json()["error"].clone();
    assert_eq!(error["code"], "policy_denied");
    assert_eq!(error["rules"], serde_json::json!(["no-https-admin"]));
    let id = response.header("mint-request-id").unwrap().to_owned();
    let decision = broker.decision_of(&id);
    assert_eq!(decision["scheme"], "https", "{decision}");
    assert_eq!(decision["port"], 443, "{decision}");
    assert_eq!(decision["host"], "api.example.com", "{decision}");
    assert!(peer.server.requests().is_empty());
}

/// In forward-proxy mode the capability travels in `Proxy-Authorization: Bearer`, and
/// `Mint-Capability` is ignored. The refusal a forward-proxy client gets must say so (it once
/// told it to send `Mint-Capability`, which cannot work in that mode), and is the `407` with
/// `Proxy-Authenticate` every client's proxy logic expects (issue 23), with Mint's JSON body.
#[test]
fn forward_mode_407_names_proxy_authorization() {
    let lab = ForwardLab::start();
    let response = curl_via_proxy(
        &lab.broker.base,
        &["-g", &format!("http://127.0.0.1:{}/echo", lab.port())],
    );
    assert_eq!(response.status, 407, "{}", response.body);
    assert_eq!(
        response.header("proxy-authenticate"),
        Some("Basic realm=\"mint\"")
    );
    assert_eq!(response.json()["error"]["code"], "capability_invalid");
    let message = response.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("Proxy-Authorization"), "{message}");
}

/// RFC 9110 (section 11.1): the authentication scheme is case-insensitive, so
/// `Proxy-Authorization: bearer <token>` is the same credential as `Bearer <token>`.
#[test]
fn forward_mode_auth_scheme_is_case_insensitive() {
    let lab = ForwardLab::start();
    for scheme in ["bearer", "BEARER"] {
        let response = curl_via_proxy(
            &lab.broker.base,
            &[
                "--proxy-header",
                &format!("Proxy-Authorization: {scheme} {}", lab.cap),
                "-H",
                "Authorization: Bearer {{mint:echo}}",
                "-g",
                &format!("http://127.0.0.1:{}/echo", lab.port()),
            ],
        );
        assert_eq!(response.status, 200, "{scheme}: {}", response.body);
        lab.assert_clean(response.everything());
    }
}

/// A batch of tool calls costs one unit of a call limit per call, all or nothing, and a batch
/// that would run several different tools is refused (the audit record names one tool).
#[test]
fn mcp_batches_pay_per_call_and_run_one_tool_only() {
    let config = LabConfig {
        echo: EchoConfig::default().plain_http(),
        aliases: ECHO_ALIASES,
        secrets: &[("echo", CANARY_ECHO)],
        ..LabConfig::default()
    };
    let lab = lab::Lab::start(config, |port| {
        format!(
            "  - id: mcp-tools
    effect: allow
    match:
      scheme: [http]
      host: [127.0.0.1]
      port: [{port}]
      method: [POST]
      path: [/echo/mcp]
      tool: [search, leak]
    limits:
      - {{ max: 2, per: 1h }}
"
        )
    });
    let (broker, cap, port) = (&lab.broker, &lab.cap, lab.port());
    let call = |id: u32, tool: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
        )
    };
    let post = |body: String| {
        mint_tests::broker::curl(&[
            "-X",
            "POST",
            "-H",
            &format!("Mint-Capability: {cap}"),
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            &body,
            &format!("{}/v1/proxy/http/127.0.0.1:{port}/echo/mcp", broker.base),
        ])
    };

    // Two different tools in one batch: refused before anything counts or is sent.
    let mixed = post(format!("[{},{}]", call(1, "search"), call(2, "leak")));
    assert_eq!(mixed.status, 400, "{}", mixed.body);
    let errors = mixed.json();
    assert_eq!(errors[0]["error"]["data"]["code"], "invalid_request");
    assert_eq!(errors[1]["id"], 2);
    // Three calls against a limit of two: refused whole, nothing consumed.
    let three = post(format!(
        "[{},{},{}]",
        call(1, "search"),
        call(2, "search"),
        call(3, "search")
    ));
    assert_eq!(three.status, 429, "{}", three.body);
    assert!(lab.peer.server.requests().is_empty());
    // Two calls fit, and use the whole budget: the next single call is limited.
    let two = post(format!("[{},{}]", call(1, "search"), call(2, "search")));
    assert_eq!(two.status, 200, "{}", two.body);
    let one = post(call(3, "search"));
    assert_eq!(one.status, 429, "{}", one.body);
    assert_eq!(one.json()["error"]["data"]["rules"][0], "mcp-tools");
    assert_eq!(lab.peer.server.requests().len(), 1);
}

/// The capability in the proxy URL (`http://agent:<token>@mint`), as clients configured only by
/// `http_proxy` send it (`Proxy-Authorization: Basic`): no header to add by hand.
#[test]
fn a_capability_in_the_proxy_url_is_accepted() {
    let lab = ForwardLab::start();
    let authority = lab.broker.base.strip_prefix("http://").unwrap().to_owned();
    let proxy = format!("http://mino:{}@{authority}", lab.cap);
    let env = [("http_proxy", proxy.as_str())];
    let target = format!("http://127.0.0.1:{}/echo?x=1", lab.port());
    let response = curl_with_env_proxy(
        &env,
        &["-H", "Authorization: Bearer {{mint:echo}}", "-g", &target],
    );
    assert_eq!(
        (response.exit, response.status),
        (0, 200),
        "{}",
        response.body
    );
    let seen = lab.peer.server.requests().last().unwrap();
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {CANARY_ECHO}").as_str())
    );
    assert!(seen.header_names_starting_with("proxy-").is_empty());
    assert!(!response.everything().contains(CANARY_ECHO));
    // A wrong password is the same 407 as no capability.
    let wrong = format!("http://mino:mint_cap_nope_nope@{authority}");
    let env = [("http_proxy", wrong.as_str())];
    let refused = curl_with_env_proxy(&env, &["-g", &target]);
    assert_eq!(refused.status, 407, "{}", refused.body);
    assert!(
        refused.body.contains("Proxy-Authorization"),
        "{}",
        refused.body
    );
}

/// Issue 23: a forward-proxy request whose capability is missing or wrong gets `407` with
/// `Proxy-Authenticate: Basic realm="mint"` (what squid and every client's proxy logic expect)
/// and Mint's JSON body, as real clients see it: curl with `-x http://agent:WRONG@MINT` and
/// Python `requests` with that proxy URL, both without the machine's CA or proxy variables.
/// The `/v1/proxy/` route keeps its 401.
#[test]
fn issue_23_forward_proxy_authentication_failure_is_407_for_real_clients() {
    let lab = ForwardLab::start();
    let before = lab.forwarded();
    let authority = lab.broker.base.strip_prefix("http://").unwrap().to_owned();
    let wrong = format!("http://agent:mint_cap_WRONG@{authority}");
    let target = format!("http://127.0.0.1:{}/echo", lab.port());

    let output = client_command("curl", &[])
        .args(["-sS", "--http1.1", "--max-time", "30", "-D", "-", "-o", "-"])
        .args(["-x", &wrong, "-H", "Authorization: Bearer {{mint:echo}}"])
        .args(["-g", &target])
        .output()
        .unwrap();
    let curl = parse_raw_answer(&output.stdout);
    assert_eq!(curl.status, 407, "{}", curl.everything());
    assert_eq!(
        curl.header("proxy-authenticate"),
        Some("Basic realm=\"mint\"")
    );
    assert_eq!(curl.header("mint-outcome"), Some("denied"));
    let error = &curl.json()["error"];
    assert_eq!(error["code"], "capability_invalid", "{}", curl.body);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("Proxy-Authorization"),
        "{error}"
    );
    let id = curl.header("mint-request-id").unwrap().to_owned();
    // The outcome is written as the answer ends, maybe just after curl read it.
    let outcome = lab.broker.outcome_of(&id);
    assert_eq!(outcome["status"], 407, "{outcome}");
    lab.assert_clean(curl.everything());

    if let Some(python) = python() {
        let code = "import requests, sys\n\
                    r = requests.get(sys.argv[2], proxies={'http': sys.argv[1]}, timeout=30)\n\
                    print(r.status_code, r.headers.get('Proxy-Authenticate'), \
                    r.json()['error']['code'])\n";
        let output = client_command(&python, &[("PYTHONDONTWRITEBYTECODE", "1")])
            .args(["-c", code, &wrong, &target])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(
            stdout.trim(),
            "407 Basic realm=\"mint\" capability_invalid",
            "{stdout}"
        );
        lab.assert_clean(stdout.as_bytes());
    }

    // The route: `Mint-Capability` is what is missing, so 401 and no `Proxy-Authenticate`.
    let route = client_command("curl", &[])
        .args(["-sS", "--max-time", "30", "-D", "-", "-o", "-"])
        .arg(lab.broker.proxy_url(lab.port(), "/echo"))
        .output()
        .unwrap();
    let route = parse_raw_answer(&route.stdout);
    assert_eq!(route.status, 401, "{}", route.everything());
    assert_eq!(route.header("proxy-authenticate"), None);
    assert_eq!(lab.forwarded(), before, "nothing was forwarded");
}
