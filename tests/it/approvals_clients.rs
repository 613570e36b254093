//! Human approval (issue 17) with real clients on both sides: the official MCP Python SDK as the
//! agent (one call at a time, and a raw JSON-RPC batch), `mint approvals watch` on a real
//! terminal (tmux) as the operator, curl over HTTP/2 with prior knowledge, and curl inside a
//! `CONNECT` tunnel that Mint intercepts. A real `mint serve` holds each request; a separate
//! `mint approvals` process decides on the operator socket. A canary secret is asserted absent
//! from what the agent and the operator saw, the audit log and Mint's stderr.
//!
//! Every client runs without the machine's CA and proxy variables. The Python peers live in the
//! venv at `.venv` (`tests/python/requirements.txt`); without it the MCP tests are skipped with a
//! note, unless `CI` is set or `MINT_REQUIRE_MCP_CLIENTS=1`. The terminal test needs `tmux`, and
//! is skipped with a note without it under the same rule.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::io::{BufRead, BufReader, Read, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mint_tests::approvals::{PATIENCE, approvals, decide, id_of, listed, text, wait_pending};
use mint_tests::broker::{
    Broker, CA_VARIABLES, CurlResponse, MintHome, curl, mint_bin, parse_raw_answer, raw_http,
};
use mint_tests::interception::{self, Setup, SetupConfig, client_command};
use mint_tests::lab::{Lab, LabConfig};
use mint_tests::repo_root;
use serde_json::{Value, json};

/// The MCP server's API key (alias `mcpkey`).
const MCP_CANARY: &str = "canary-McpApprove-Q7w2Zr5Lx9Tb";
/// The echo upstream's secret (alias `echo`).
const ECHO_CANARY: &str = "canary-EchoApprove-Hd4Kp8Vn3Ws6";
const MARKER: &str = "[mint:redacted]";
/// Mint's JSON-RPC error code for a refused call.
const JSONRPC_REFUSED: i64 = -32001;

// ---------------------------------------------------------------------------------------------
// The operator: `mint approvals` on the broker's socket
// ---------------------------------------------------------------------------------------------

/// The audit records of `request_id`, once its outcome is written (the outcome may follow the
/// answer by a moment).
#[track_caller]
fn records_with_outcome(broker: &Broker, request_id: &str) -> Vec<Value> {
    broker.outcome_of(request_id);
    broker.records_of(request_id)
}

/// The decision records among `records`.
fn decisions(records: &[Value]) -> Vec<Value> {
    records
        .iter()
        .filter(|r| r["phase"] == "decision")
        .cloned()
        .collect()
}

/// `secret`, raw or JSON-escaped, is not in `seen`, the audit log or Mint's stderr, and `cap` is
/// in neither of the latter two.
#[track_caller]
fn assert_no_secret(broker: &Broker, cap: &str, secret: &str, seen: &str) {
    let escaped = secret.replace('/', "\\/");
    let audit = broker.audit_text();
    let stderr = broker.stderr();
    for form in [secret, escaped.as_str()] {
        assert!(!seen.contains(form), "a client saw the secret: {seen}");
        assert!(!audit.contains(form), "the audit log holds the secret");
        assert!(!stderr.contains(form), "Mint's stderr holds the secret");
    }
    assert!(!audit.contains(cap), "the audit log holds the capability");
    assert!(!stderr.contains(cap), "Mint's stderr holds the capability");
}

// ---------------------------------------------------------------------------------------------
// Python peers
// ---------------------------------------------------------------------------------------------

/// Whether a missing peer (the venv, tmux) fails the test rather than skipping it.
fn peers_required() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0")
        || std::env::var_os("MINT_REQUIRE_MCP_CLIENTS").is_some_and(|v| v == "1")
}

/// The venv's Python, or `None` after a note (a failure when peers are required).
#[track_caller]
fn python() -> Option<PathBuf> {
    let python = repo_root().join(".venv/bin/python");
    if python.is_file() {
        return Some(python);
    }
    assert!(!peers_required(), "{} is missing", python.display());
    let _ = writeln!(
        std::io::stderr(),
        "note: skipping: {} is missing; create it from tests/python/requirements.txt \
         (set MINT_REQUIRE_MCP_CLIENTS=1 to make this a failure)",
        python.display()
    );
    None
}

fn script(name: &str) -> PathBuf {
    repo_root().join("tests/python").join(name)
}

/// A Python command with no proxy, CA or Mint variable inherited.
fn python_command(python: &Path) -> Command {
    let mut command = Command::new(python);
    for (key, _) in std::env::vars() {
        let lower = key.to_ascii_lowercase();
        if key.starts_with("MINT_") || lower.ends_with("_proxy") {
            command.env_remove(&key);
        }
    }
    for variable in CA_VARIABLES {
        command.env_remove(variable);
    }
    command.env("PYTHONDONTWRITEBYTECODE", "1");
    command
}

/// Runs `command` on a thread of its own with its output captured, killing it after `limit` (a
/// hang guard, not a timing assertion).
fn spawn_bounded(mut command: Command, limit: Duration) -> JoinHandle<Output> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::spawn(move || {
        // Both pipes are drained while waiting, so a chatty child cannot block on a full pipe.
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
                break child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Output {
            status,
            stdout: out.join().unwrap(),
            stderr: err.join().unwrap(),
        }
    })
}

fn read_all(mut pipe: impl Read) -> Vec<u8> {
    let mut bytes = Vec::new();
    let _ = pipe.read_to_end(&mut bytes);
    bytes
}

/// The SDK's Streamable-HTTP MCP server (`tests/python/mcp_http_server.py`) over plain HTTP on
/// `127.0.0.1:0`, requiring the API key [`MCP_CANARY`]; dropping it kills the process.
struct McpServer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl McpServer {
    #[track_caller]
    fn start(python: &Path) -> McpServer {
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
            .env("MCP_SERVER_API_KEY", MCP_CANARY)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.path().join("server.stderr")).unwrap());
        let mut child = command.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, receive) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = send.send(line);
        });
        // Python imports on a busy machine are slow; a server that never listens is a failure.
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

/// The MCP server, and a broker in front of it whose policy allows the endpoint's own traffic
/// (rule `mcp-endpoint`: no tool) and holds every call of the tool `search` for approval (rule
/// `ask-search`). No rule names another tool: those are denied.
struct McpLab {
    // Dropped in this order: the broker first.
    broker: Broker,
    server: McpServer,
    home: MintHome,
    cap: String,
}

impl McpLab {
    #[track_caller]
    fn start(python: &Path) -> McpLab {
        McpLab::start_with_timeout(python, "200s")
    }

    /// The lab with `ask-search` waiting `timeout` for a decision.
    #[track_caller]
    fn start_with_timeout(python: &Path, timeout: &str) -> McpLab {
        let server = McpServer::start(python);
        let port = server.port;
        let policy = format!(
            "version: 1
default: deny
rules:
  - id: mcp-endpoint
    effect: allow
    match:
      alias: [mcpkey]
      scheme: [http]
      host: [127.0.0.1]
      port: [{port}]
      method: [POST, GET, DELETE]
      path: [/mcp]
  - id: ask-search
    effect: approve
    approval:
      timeout: {timeout}
    match:
      alias: [mcpkey]
      scheme: [http]
      host: [127.0.0.1]
      port: [{port}]
      method: [POST]
      path: [/mcp]
      tool: [search]
"
        );
        let home = MintHome::new(
            &policy,
            "aliases:\n  - name: mcpkey\n    hosts: [127.0.0.1]\n    source: file:$SECRETS/mcpkey\n",
            &[("mcpkey", MCP_CANARY)],
        );
        let cap = home.issue_capability("mino", &[]);
        let broker = home.serve(&server.ca_file(), &[]);
        McpLab {
            broker,
            server,
            home,
            cap,
        }
    }

    /// `http://MINT/v1/proxy/http/127.0.0.1:PORT/mcp`.
    fn url(&self) -> String {
        format!(
            "{}/v1/proxy/http/127.0.0.1:{}/mcp",
            self.broker.base, self.server.port
        )
    }

    #[track_caller]
    fn assert_clean(&self, seen: &str) {
        assert_no_secret(&self.broker, &self.cap, MCP_CANARY, seen);
    }
}

// ---------------------------------------------------------------------------------------------
// 1. The MCP Python SDK, one call at a time
// ---------------------------------------------------------------------------------------------

/// The SDK's `call_tool("search", ...)` waits while Mint holds it; the operator sees the tool and
/// its arguments pretty-printed, approves, and the SDK gets the tool's answer (the key injected
/// upstream). The next call is denied: the SDK raises the JSON-RPC error `-32001` whose
/// `data.code` is `approval_denied`, from an HTTP 403, and the server never ran it.
#[test]
fn the_mcp_sdk_waits_for_the_operator_and_a_denied_call_is_a_jsonrpc_error() {
    let Some(python) = python() else { return };
    let lab = McpLab::start(&python);
    let mut operator = String::new();
    let mut command = python_command(&python);
    command
        .arg(script("mcp_approval_client.py"))
        .args(["--url", &lab.url()])
        .args([
            "--call",
            "search",
            r#"{"query": "approved one", "limit": 2}"#,
        ])
        .args(["--call", "search", r#"{"query": "denied two"}"#])
        .env("MINT_CAPABILITY", &lab.cap);
    let client = spawn_bounded(command, Duration::from_secs(400));

    // The first call waits: what the operator is shown.
    let first = wait_pending(&lab.home, 1).remove(0);
    assert_eq!(first["tool"], "search", "{first}");
    assert_eq!(
        first["arguments"], "{\n  \"limit\": 2,\n  \"query\": \"approved one\"\n}",
        "{first}"
    );
    assert_eq!(first["rules"], json!(["ask-search"]), "{first}");
    assert_eq!(first["agent"], "mino", "{first}");
    assert_eq!(
        (&first["method"], &first["scheme"], &first["path"]),
        (&json!("POST"), &json!("http"), &json!("/mcp")),
        "{first}"
    );
    assert_eq!(first["port"], lab.server.port, "{first}");
    assert_eq!(first["aliases"], json!(["mcpkey"]), "{first}");
    assert!(lab.server.calls().is_empty(), "ran before the approval");
    let human = decide(&lab.home, &["list"]);
    assert!(human.contains("tool search"), "{human}");
    operator.push_str(&human);
    let first_id = id_of(&first);
    operator.push_str(&decide(&lab.home, &["approve", &first_id]));

    // The second call waits in its turn; denied.
    let deadline = Instant::now() + PATIENCE;
    let second = loop {
        let pending = wait_pending(&lab.home, 1).remove(0);
        if pending["id"] != first_id.as_str() {
            break pending;
        }
        assert!(
            Instant::now() < deadline,
            "the approved call is still listed"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(second["tool"], "search", "{second}");
    assert_eq!(
        second["arguments"], "{\n  \"query\": \"denied two\"\n}",
        "{second}"
    );
    let second_id = id_of(&second);
    operator.push_str(&decide(&lab.home, &["deny", &second_id]));

    let output = client.join().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "the client failed:\n{stderr}\n{stdout}"
    );
    let report: Value = serde_json::from_str(stdout.trim()).unwrap();
    let calls = report["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{report}");
    assert_eq!(calls[0]["text"], "3 results for approved one", "{report}");
    assert_eq!(calls[0]["is_error"], false, "{report}");
    let error = &calls[1]["error"];
    assert_eq!(error["code"], JSONRPC_REFUSED, "{report}");
    assert_eq!(error["data"]["code"], "approval_denied", "{report}");
    assert_eq!(error["data"]["rules"], json!(["ask-search"]), "{report}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("refused by Mint"),
        "{report}"
    );
    // The refusal came on an HTTP 403; every answer came from Mint.
    let responses = report["responses"].as_array().unwrap();
    let refused: Vec<&Value> = responses.iter().filter(|r| r["status"] == 403).collect();
    assert_eq!(refused.len(), 1, "{responses:?}");
    assert!(
        refused[0]["body"]
            .as_str()
            .unwrap()
            .contains("approval_denied")
    );
    for response in responses {
        let headers = response["headers"].as_array().unwrap();
        assert!(
            headers.iter().any(|h| h[0] == "mint-request-id"),
            "{response}"
        );
    }

    // Only the approved call ran, with the real key; the denied one never reached the server.
    assert_eq!(lab.server.calls(), ["search"]);
    let requests = lab.server.requests();
    assert!(requests.iter().all(|r| r["key_ok"] == true), "{requests:?}");
    assert_eq!(
        requests
            .iter()
            .filter(|r| r["tools"] == json!(["search"]))
            .count(),
        1,
        "{requests:?}"
    );

    // The audit trail: pending, then allow naming the approver (then completed); pending, then
    // deny approval_denied (then denied 403).
    let approved = records_with_outcome(&lab.broker, first["request_id"].as_str().unwrap());
    let decided = decisions(&approved);
    assert_eq!(decided.len(), 2, "{approved:?}");
    assert_eq!(decided[0]["decision"], "pending", "{approved:?}");
    assert_eq!(decided[0]["reason"], "approval_required", "{approved:?}");
    assert_eq!(decided[0]["approval"], json!([first_id]), "{approved:?}");
    assert_eq!(decided[0]["mcp_tool"], "search", "{approved:?}");
    assert_eq!(decided[1]["decision"], "allow", "{approved:?}");
    assert_eq!(decided[1]["rule"], json!(["ask-search"]), "{approved:?}");
    assert!(
        decided[1]["approver"][0]
            .as_str()
            .unwrap()
            .contains("(uid "),
        "{approved:?}"
    );
    let outcome = lab.broker.outcome_of(first["request_id"].as_str().unwrap());
    assert_eq!(outcome["outcome"], "completed", "{outcome}");
    let denied = records_with_outcome(&lab.broker, second["request_id"].as_str().unwrap());
    let decided = decisions(&denied);
    assert_eq!(decided.len(), 2, "{denied:?}");
    assert_eq!(decided[0]["decision"], "pending", "{denied:?}");
    assert_eq!(decided[0]["approval"], json!([second_id]), "{denied:?}");
    assert_eq!(decided[1]["decision"], "deny", "{denied:?}");
    assert_eq!(decided[1]["reason"], "approval_denied", "{denied:?}");
    assert!(decided[1]["approver"][0].as_str().is_some(), "{denied:?}");
    let outcome = lab
        .broker
        .outcome_of(second["request_id"].as_str().unwrap());
    assert_eq!(
        (&outcome["outcome"], &outcome["status"]),
        (&json!("denied"), &json!(403)),
        "{outcome}"
    );
    // The hash chain holds with the held requests' extra decision records in it.
    let verify = lab.home.mint().args(["audit", "verify"]).output().unwrap();
    assert!(verify.status.success(), "{}", text(&verify));
    lab.assert_clean(&format!("{stdout}{stderr}{operator}"));
}

// ---------------------------------------------------------------------------------------------
// 2. An MCP batch: one approval per call, all or nothing
// ---------------------------------------------------------------------------------------------

/// The MCP handshake by curl: `initialize` then `notifications/initialized`; returns the
/// session id and what the client received.
#[track_caller]
fn mcp_session(lab: &McpLab) -> (String, String) {
    let cap = format!("Mint-Capability: {}", lab.cap);
    let url = lab.url();
    let common = [
        "-H",
        cap.as_str(),
        "-H",
        "X-Api-Key: {{mint:mcpkey}}",
        "-H",
        "Content-Type: application/json",
        "-H",
        "Accept: application/json, text/event-stream",
    ];
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "curl", "version": "1"}
        }
    })
    .to_string();
    let mut args = common.to_vec();
    args.extend(["--data", &initialize, &url]);
    let answer = curl(&args);
    assert_eq!(answer.status, 200, "{}", answer.body);
    let session = answer.header("mcp-session-id").unwrap().to_owned();
    let header = format!("Mcp-Session-Id: {session}");
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let mut args = common.to_vec();
    args.extend(["-H", &header, "--data", initialized, &url]);
    let notified = curl(&args);
    assert_eq!(notified.status, 202, "{}", notified.body);
    let seen = format!("{}{}", answer.everything(), notified.everything());
    (session, seen)
}

/// A JSON-RPC batch of two `tools/call` of `search` (ids 11 and 12), sent by curl on a thread.
fn batch_in_background(
    lab: &McpLab,
    session: &str,
    queries: [&str; 2],
) -> JoinHandle<CurlResponse> {
    let body = json!([
        {"jsonrpc": "2.0", "id": 11, "method": "tools/call",
         "params": {"name": "search", "arguments": {"query": queries[0]}}},
        {"jsonrpc": "2.0", "id": 12, "method": "tools/call",
         "params": {"name": "search", "arguments": {"query": queries[1]}}}
    ])
    .to_string();
    let cap = format!("Mint-Capability: {}", lab.cap);
    let session = format!("Mcp-Session-Id: {session}");
    let url = lab.url();
    std::thread::spawn(move || {
        curl(&[
            "--max-time",
            "250",
            "-H",
            &cap,
            "-H",
            "X-Api-Key: {{mint:mcpkey}}",
            "-H",
            "Content-Type: application/json",
            "-H",
            "Accept: application/json, text/event-stream",
            "-H",
            "MCP-Protocol-Version: 2025-11-25",
            "-H",
            &session,
            "--data",
            &body,
            &url,
        ])
    })
}

/// Both calls of a refused batch get Mint's JSON-RPC error with `code`.
#[track_caller]
fn assert_batch_refused(response: &CurlResponse, code: &str) {
    assert_eq!(response.status, 403, "{}", response.body);
    let answers = response.json();
    let answers = answers.as_array().unwrap();
    let ids: Vec<&Value> = answers.iter().map(|a| &a["id"]).collect();
    assert_eq!(ids, [&json!(11), &json!(12)], "{}", response.body);
    for answer in answers {
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
        assert_eq!(answer["error"]["code"], JSONRPC_REFUSED, "{answer}");
        assert_eq!(answer["error"]["data"]["code"], code, "{answer}");
    }
}

/// Each `tools/call` of a batch is its own approval, shown with its own arguments. Approving one
/// and denying the other refuses the whole request: a JSON-RPC error for each id, and the server
/// never sees it. Denying first withdraws the other call's approval at once.
#[test]
fn each_call_of_an_mcp_batch_is_approved_on_its_own_and_one_denial_refuses_the_batch() {
    let Some(python) = python() else { return };
    let lab = McpLab::start(&python);
    let (session, mut seen) = mcp_session(&lab);
    let mut operator = String::new();
    let agent = batch_in_background(&lab, &session, ["alpha", "beta"]);

    let pending = wait_pending(&lab.home, 2);
    // One request, two approvals, in body order, each with its own arguments.
    assert_eq!(pending[0]["request_id"], pending[1]["request_id"]);
    assert_ne!(pending[0]["id"], pending[1]["id"]);
    for (view, query) in pending.iter().zip(["alpha", "beta"]) {
        assert_eq!(view["tool"], "search", "{view}");
        assert_eq!(
            view["arguments"],
            format!("{{\n  \"query\": \"{query}\"\n}}"),
            "{view}"
        );
        assert_eq!(view["rules"], json!(["ask-search"]), "{view}");
    }
    let (alpha, beta) = (id_of(&pending[0]), id_of(&pending[1]));
    let request_id = pending[0]["request_id"].as_str().unwrap().to_owned();
    operator.push_str(&decide(&lab.home, &["list"]));

    // One approved: the request still waits for the other.
    operator.push_str(&decide(&lab.home, &["approve", &alpha]));
    let left = wait_pending(&lab.home, 1);
    assert_eq!(left[0]["id"], beta.as_str());
    assert!(!agent.is_finished(), "answered with a call still undecided");
    assert!(lab.server.calls().is_empty());
    // The other denied: the whole batch is refused.
    operator.push_str(&decide(&lab.home, &["deny", &beta]));
    let response = agent.join().unwrap();
    assert_batch_refused(&response, "approval_denied");
    seen.push_str(&response.everything());
    assert!(lab.server.calls().is_empty(), "{:?}", lab.server.calls());
    let requests = lab.server.requests();
    assert!(
        requests
            .iter()
            .all(|r| r["tools"].as_array().unwrap().is_empty()),
        "the batch reached the server: {requests:?}"
    );

    // The audit: pending naming both approvals, then deny approval_denied, then denied.
    let records = records_with_outcome(&lab.broker, &request_id);
    let decided = decisions(&records);
    assert_eq!(decided.len(), 2, "{records:?}");
    assert_eq!(decided[0]["decision"], "pending", "{records:?}");
    assert_eq!(decided[0]["approval"], json!([alpha, beta]), "{records:?}");
    assert_eq!(decided[1]["decision"], "deny", "{records:?}");
    assert_eq!(decided[1]["reason"], "approval_denied", "{records:?}");
    assert_eq!(decided[1]["approval"], json!([alpha, beta]), "{records:?}");
    assert!(decided[1]["approver"][0].as_str().is_some(), "{records:?}");
    let outcome = lab.broker.outcome_of(&request_id);
    assert_eq!(
        (&outcome["outcome"], &outcome["status"]),
        (&json!("denied"), &json!(403)),
        "{outcome}"
    );

    // A denial first: the other call stops waiting at once, and approving it does nothing.
    let agent = batch_in_background(&lab, &session, ["gamma", "delta"]);
    let pending = wait_pending(&lab.home, 2);
    let (gamma, delta) = (id_of(&pending[0]), id_of(&pending[1]));
    operator.push_str(&decide(&lab.home, &["deny", &delta]));
    let response = agent.join().unwrap();
    assert_batch_refused(&response, "approval_denied");
    seen.push_str(&response.everything());
    wait_pending(&lab.home, 0);
    let late = approvals(&lab.home, &["approve", &gamma]);
    assert_eq!(late.status.code(), Some(1), "{}", text(&late));
    operator.push_str(&text(&late));
    assert!(lab.server.calls().is_empty(), "{:?}", lab.server.calls());
    lab.assert_clean(&format!("{seen}{operator}"));
}

// ---------------------------------------------------------------------------------------------
// 3. `mint approvals watch` on a real terminal
// ---------------------------------------------------------------------------------------------

/// A tmux server on a private socket, killed on drop whatever happened.
struct Tmux {
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    /// Whether tmux is here (else a note, or a failure when peers are required).
    fn available() -> bool {
        let found = Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            assert!(!peers_required(), "tmux is missing");
            let _ = writeln!(std::io::stderr(), "note: skipping: tmux is missing");
        }
        found
    }

    /// Starts a detached 200x50 session `w` running `shell_command`, with a configuration that
    /// lets applications set tmux's clipboard (OSC 52) so that an escape that got through would
    /// leave a buffer behind.
    #[track_caller]
    fn start(shell_command: &str) -> Tmux {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("sock");
        let config = dir.path().join("tmux.conf");
        std::fs::write(
            &config,
            "set -g default-shell /bin/sh\nset -g set-clipboard on\nset -g history-limit 10000\nset -g remain-on-exit on\n",
        )
        .unwrap();
        let tmux = Tmux { socket, _dir: dir };
        let mut command = tmux.command();
        command
            .arg("-f")
            .arg(&config)
            .args(["new-session", "-d", "-s", "w", "-x", "200", "-y", "50"])
            .arg(shell_command)
            .env("TERM", "xterm-256color")
            .env("SHELL", "/bin/sh");
        let output = command.output().unwrap();
        assert!(output.status.success(), "tmux: {}", text(&output));
        tmux
    }

    fn command(&self) -> Command {
        let mut command = Command::new("tmux");
        command.arg("-S").arg(&self.socket);
        command
    }

    /// `tmux ARGS`, which must succeed; returns its stdout as bytes.
    #[track_caller]
    fn run(&self, args: &[&str]) -> Vec<u8> {
        let output = self.command().args(args).output().unwrap();
        assert!(output.status.success(), "tmux {args:?}: {}", text(&output));
        output.stdout
    }

    /// The pane's whole text, history included, wrapped lines joined, without escapes (`-e`
    /// off): what the operator sees.
    #[track_caller]
    fn screen(&self) -> Vec<u8> {
        self.run(&["capture-pane", "-p", "-J", "-S", "-", "-t", "w"])
    }

    /// Waits (bounded) until the pane shows `needle`; returns the pane's text.
    #[track_caller]
    fn wait_for(&self, needle: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let screen = String::from_utf8_lossy(&self.screen()).into_owned();
            if screen.contains(needle) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "the pane never showed {needle:?}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Types `keys` (tmux key names, such as `y` and `Enter`).
    #[track_caller]
    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "w"];
        args.extend_from_slice(keys);
        self.run(&args);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self
            .command()
            .arg("kill-server")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// `sh` text quoting `word` in single quotes.
fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// `mint approvals watch ARGS` for `home` in a new tmux session, once it is watching. It runs
/// with the environment of `mint` for this home and nothing else of Mint's.
#[track_caller]
fn watch_in_tmux(home: &MintHome, args: &[&str]) -> Tmux {
    let mut unset = String::new();
    for (key, _) in std::env::vars() {
        if key.starts_with("MINT_") {
            unset.push_str(&format!("-u {} ", shell_quote(&key)));
        }
    }
    let args: Vec<String> = args.iter().map(|a| shell_quote(a)).collect();
    let watch = format!(
        "env {unset}MINT_HOME={} MINT_KEYRING_BACKEND=keyutils {} approvals watch {}; echo \"watch exited: $?\"",
        shell_quote(home.path().to_str().unwrap()),
        shell_quote(mint_bin().to_str().unwrap()),
        args.join(" "),
    );
    let tmux = Tmux::start(&watch);
    tmux.wait_for("Watching");
    tmux
}

/// An approve rule for MCP tool calls (any tool) in POSTs to the echo upstream's
/// `/echo/write/**` with the echo alias.
fn tool_rules(port: u16) -> String {
    format!(
        "  - id: ask-tools\n    effect: approve\n    approval:\n      timeout: 200s\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [POST]\n      path: [\"/echo/write/**\"]\n      tool: [\"*\"]\n"
    )
}

/// A JSON-RPC `tools/call` of `search` with `arguments`, POSTed to the echo upstream's `path`
/// with the echo alias, by curl on a thread.
fn tool_call_in_background(lab: &Lab, path: &str, arguments: &Value) -> JoinHandle<CurlResponse> {
    let body = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "search", "arguments": arguments}
    })
    .to_string();
    let url = lab.echo_url(path);
    let cap = lab.cap_header();
    std::thread::spawn(move || {
        curl(&[
            "-g",
            "--path-as-is",
            "--max-time",
            "250",
            "-H",
            &cap,
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            &body,
            &url,
        ])
    })
}

/// The watching terminal: each held request is shown with its destination, method, path, tool
/// and arguments, every terminal escape spelled out and none reaching the terminal; Enter denies
/// (403 approval_denied), `y` approves once, `a` approves with a grant the reply names (and that
/// approves the same call again without asking).
#[test]
fn mint_approvals_watch_on_a_terminal_shows_escapes_inert_and_enter_y_a_decide() {
    if !Tmux::available() {
        return;
    }
    let lab = Lab::start(
        LabConfig {
            secrets: &[("echo", ECHO_CANARY)],
            ..LabConfig::default()
        },
        tool_rules,
    );
    let tmux = watch_in_tmux(&lab.home, &[]);
    let mut operator = String::new();

    // 1. Escapes in the path (percent-encoded: the canonical path keeps them so) and in the tool's
    // arguments: C0 (JSON-escaped by the pretty-printer), C1, a bidirectional override and OSC
    // sequences that would write the clipboard and the pane's title.
    let path = "/echo/write/x%1B%5D52%07pwned%9B2J";
    let arguments = json!({
        "title": "\u{1b}]52;c;cHduZWQ=\u{7} and \u{9b}2J then \u{202e}gpj.exe \u{1b}]2;pwned-title\u{7}",
    });
    let agent = tool_call_in_background(&lab, path, &arguments);
    let first = id_of(&wait_pending(&lab.home, 1)[0]);
    let screen = tmux.wait_for(&format!("Approval {first}"));
    let shown = tmux.wait_for("Approve? [y] once");
    assert!(shown.contains(&first), "{screen}");
    for expected in [
        format!("Destination: https://127.0.0.1:{}", lab.port()),
        format!("Request:     POST {path}"),
        "Tool:        search".to_owned(),
        "Agent:       mino".to_owned(),
        "Rule:        ask-tools".to_owned(),
        "Secrets:     echo (substituted if approved)".to_owned(),
        "\"title\": \"\\u001b]52;c;cHduZWQ=\\u0007 and \\u{9b}2J then \\u{202e}gpj.exe \\u001b]2;pwned-title\\u0007\"".to_owned(),
    ] {
        assert!(shown.contains(&expected), "{expected:?} not shown:\n{shown}");
    }
    // Nothing raw reached the terminal: no control character in what it shows, no clipboard
    // buffer, the title untouched.
    let raw = tmux.screen();
    assert!(!raw.contains(&0x1b), "a raw ESC on the screen: {raw:?}");
    assert!(!raw.contains(&0x07), "a raw BEL on the screen: {raw:?}");
    let screen_text = String::from_utf8_lossy(&raw);
    assert!(
        !screen_text
            .chars()
            .any(|c| c != '\n' && (c.is_control() || c == '\u{202e}')),
        "a control character on the screen: {screen_text:?}"
    );
    let buffers = tmux.run(&["list-buffers"]);
    assert!(buffers.is_empty(), "{}", String::from_utf8_lossy(&buffers));
    let title = tmux.run(&["display-message", "-p", "-t", "w", "#{pane_title}"]);
    assert!(
        !String::from_utf8_lossy(&title).contains("pwned"),
        "{}",
        String::from_utf8_lossy(&title)
    );
    // Enter denies.
    tmux.keys(&["Enter"]);
    tmux.wait_for(&format!("denied {first}"));
    let denied = agent.join().unwrap();
    // A tool call's refusal is a JSON-RPC error for its id, on a 403.
    assert_eq!(denied.status, 403, "{}", denied.body);
    let error = denied.json();
    assert_eq!(error["id"], 7, "{error}");
    assert_eq!(error["error"]["code"], JSONRPC_REFUSED, "{error}");
    assert_eq!(error["error"]["data"]["code"], "approval_denied", "{error}");
    assert_eq!(lab.forwarded(), 0);

    // A raw ESC in the request target never gets as far as a prompt: refused at once (400),
    // nothing held, nothing sent.
    let request = format!(
        "POST /v1/proxy/https/127.0.0.1:{}/echo/write/x\x1b]52;c;cHduZWQ=\x07 HTTP/1.1\r\nHost: mint\r\n{}\r\nAuthorization: Bearer {{{{mint:echo}}}}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}",
        lab.port(),
        lab.cap_header()
    );
    let raw_answer = raw_http(&lab.broker.base, request.as_bytes());
    assert_eq!(raw_answer.status, 400, "{}", raw_answer.everything());
    assert!(listed(&lab.home)["pending"].as_array().unwrap().is_empty());
    assert_eq!(lab.forwarded(), 0);

    // 2. `y` approves once.
    let agent = tool_call_in_background(&lab, "/echo/write/once", &json!({"n": 2}));
    let second = id_of(&wait_pending(&lab.home, 1)[0]);
    tmux.wait_for(&format!("Approval {second}"));
    tmux.keys(&["y", "Enter"]);
    tmux.wait_for(&format!("approved {second}"));
    let approved = agent.join().unwrap();
    assert_eq!(approved.status, 200, "{}", approved.body);
    assert!(approved.body.contains(MARKER), "{}", approved.body);
    assert_eq!(lab.forwarded(), 1);

    // 3. `a` approves with a grant; the same call then goes through without asking.
    let agent = tool_call_in_background(&lab, "/echo/write/grant", &json!({"n": 3}));
    let third = id_of(&wait_pending(&lab.home, 1)[0]);
    tmux.wait_for(&format!("Approval {third}"));
    tmux.keys(&["a", "Enter"]);
    let screen = tmux.wait_for(&format!("approved {third}; grant gr-"));
    let grant = screen
        .split_whitespace()
        .find(|w| w.starts_with("gr-"))
        .unwrap()
        .to_owned();
    assert!(
        screen.contains(&format!("grant {grant} for 10m")),
        "{screen}"
    );
    let granted = agent.join().unwrap();
    assert_eq!(granted.status, 200, "{}", granted.body);
    let again = tool_call_in_background(&lab, "/echo/write/grant", &json!({"n": 4}))
        .join()
        .unwrap();
    assert_eq!(again.status, 200, "{}", again.body);
    let decision = lab
        .broker
        .decision_of(again.header("mint-request-id").unwrap());
    assert_eq!(decision["decision"], "allow", "{decision}");
    assert_eq!(decision["approval"], json!([grant]), "{decision}");
    let list = listed(&lab.home);
    assert_eq!(list["grants"][0]["id"], grant.as_str(), "{list}");
    operator.push_str(&list.to_string());
    assert_eq!(lab.forwarded(), 3);

    // The audit names who decided at the terminal.
    let rid = denied.header("mint-request-id").unwrap().to_owned();
    let records = records_with_outcome(&lab.broker, &rid);
    let decided = decisions(&records);
    assert_eq!(decided[0]["approval"], json!([first]), "{records:?}");
    assert_eq!(decided[1]["reason"], "approval_denied", "{records:?}");
    // Still watching (nothing made it leave).
    let screen = String::from_utf8_lossy(&tmux.screen()).into_owned();
    assert!(!screen.contains("watch exited"), "{screen}");
    operator.push_str(&screen);
    lab.assert_clean(format!(
        "{}{}{}{}{}{operator}",
        raw_answer.everything(),
        denied.everything(),
        approved.everything(),
        granted.everything(),
        again.everything()
    ));
}

// ---------------------------------------------------------------------------------------------
// 4. HTTP/2 with prior knowledge
// ---------------------------------------------------------------------------------------------

/// An approve rule for POST to the echo upstream's `/echo/write/**` with the echo alias.
fn write_rules(port: u16) -> String {
    format!(
        "  - id: ask-writes\n    effect: approve\n    approval:\n      timeout: 200s\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [POST]\n      path: [\"/echo/write/**\"]\n"
    )
}

/// A POST over cleartext HTTP/2 (prior knowledge) to Mint's route, by curl on a thread; returns
/// the answer and curl's raw output (to check the protocol).
fn h2_post_in_background(lab: &Lab, path: &str) -> JoinHandle<(CurlResponse, String)> {
    let url = lab.echo_url(path);
    let cap = lab.cap_header();
    std::thread::spawn(move || {
        let mut command = Command::new("curl");
        for variable in CA_VARIABLES
            .iter()
            .chain(interception::PROXY_VARIABLES.iter())
        {
            command.env_remove(variable);
        }
        let output = command
            .args([
                "-sS",
                "--http2-prior-knowledge",
                "--noproxy",
                "*",
                "--max-time",
                "250",
                "-D",
                "-",
                "-o",
                "-",
                "-g",
                "-H",
                &cap,
                "-H",
                "Authorization: Bearer {{mint:echo}}",
                "-H",
                "Content-Type: application/json",
                "--data",
                "{\"title\":\"over h2\"}",
                &url,
            ])
            .output()
            .unwrap();
        let raw = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (parse_raw_answer(&output.stdout), raw)
    })
}

/// A held request on an HTTP/2 connection (curl `--http2-prior-knowledge` to Mint's port) waits,
/// is approved and completes with the secret injected and scrubbed; another is denied: 403
/// approval_denied, nothing sent.
#[test]
fn a_held_http2_request_is_approved_or_denied_like_any_other() {
    let lab = Lab::start(
        LabConfig {
            secrets: &[("echo", ECHO_CANARY)],
            ..LabConfig::default()
        },
        write_rules,
    );
    let mut operator = String::new();
    let agent = h2_post_in_background(&lab, "/echo/write/h2");
    let view = wait_pending(&lab.home, 1).remove(0);
    assert_eq!(view["method"], "POST", "{view}");
    assert_eq!(view["path"], "/echo/write/h2", "{view}");
    assert_eq!(lab.forwarded(), 0);
    operator.push_str(&decide(&lab.home, &["approve", &id_of(&view)]));
    let (response, raw) = agent.join().unwrap();
    assert!(raw.starts_with("HTTP/2 200"), "{raw}");
    assert_eq!(response.status, 200, "{raw}");
    let echoed = response.json();
    let authorization = echoed["headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|pair| pair[0] == "authorization")
        .map(|pair| pair[1].clone());
    assert_eq!(authorization, Some(Value::from(format!("Bearer {MARKER}"))));
    let upstream = lab.peer.server.requests().last().unwrap();
    assert_eq!(
        upstream.header("authorization"),
        Some(format!("Bearer {ECHO_CANARY}").as_str())
    );
    assert_eq!(lab.forwarded(), 1);
    let rid = response.header("mint-request-id").unwrap().to_owned();
    let records = records_with_outcome(&lab.broker, &rid);
    let decided = decisions(&records);
    assert_eq!(decided[0]["decision"], "pending", "{records:?}");
    assert_eq!(decided[1]["decision"], "allow", "{records:?}");
    assert_eq!(lab.broker.outcome_of(&rid)["outcome"], "completed");

    let agent = h2_post_in_background(&lab, "/echo/write/h2-denied");
    let view = wait_pending(&lab.home, 1).remove(0);
    operator.push_str(&decide(&lab.home, &["deny", &id_of(&view)]));
    let (denied, denied_raw) = agent.join().unwrap();
    assert!(denied_raw.starts_with("HTTP/2 403"), "{denied_raw}");
    assert_eq!(denied.json()["error"]["code"], "approval_denied");
    assert_eq!(lab.forwarded(), 1, "a denied request was sent");
    lab.assert_clean(format!("{raw}{denied_raw}{operator}"));
}

// ---------------------------------------------------------------------------------------------
// 5. Inside an intercepted CONNECT tunnel
// ---------------------------------------------------------------------------------------------

/// curl configured by its environment alone (`HTTPS_PROXY` with the capability, Mint's CA),
/// POSTing inside a tunnel Mint intercepts, on a thread.
fn tunneled_post_in_background(
    setup: &Setup,
    version: &'static str,
    path: &str,
) -> JoinHandle<Output> {
    let mut command = client_command("curl", &[("HTTPS_PROXY", &setup.proxy())]);
    command.args([
        "-sS",
        version,
        "--suppress-connect-headers",
        "--max-time",
        "250",
        "-D",
        "-",
        "-o",
        "-",
        "--cacert",
        setup.ca().to_str().unwrap(),
        "-H",
        "Authorization: Bearer {{mint:echo}}",
        "-H",
        "Content-Type: application/json",
        "--data",
        "{\"title\":\"through the tunnel\"}",
        &setup.url(path),
    ]);
    std::thread::spawn(move || command.output().unwrap())
}

/// A request held inside an intercepted tunnel (HTTP/2 inside TLS) is approved and completes:
/// the secret reaches the upstream and comes back scrubbed. Another (HTTP/1.1 inside TLS) is
/// denied: 403 approval_denied, nothing sent, the tunnel's client told so.
#[test]
fn a_held_request_inside_an_intercepted_tunnel_is_approved_with_the_secret_injected_and_scrubbed() {
    let setup = Setup::start_with(SetupConfig {
        rules: format!(
            "  - id: ask-held\n    effect: approve\n    approval:\n      timeout: 200s\n    match:\n      alias: [echo]\n      host: [{}]\n      port: [$PORT]\n      method: [POST]\n      path: [\"/echo/held/**\"]\n",
            interception::HOST
        ),
        ..SetupConfig::default()
    });
    let mut operator = String::new();
    let before = setup.peer.server.requests().len();
    let agent = tunneled_post_in_background(&setup, "--http2", "/echo/held/one");
    let view = wait_pending(&setup.home, 1).remove(0);
    assert_eq!(view["host"], interception::HOST, "{view}");
    assert_eq!(view["scheme"], "https", "{view}");
    assert_eq!(view["port"], setup.port(), "{view}");
    assert_eq!(view["path"], "/echo/held/one", "{view}");
    assert_eq!(view["aliases"], json!(["echo"]), "{view}");
    assert_eq!(view["rules"], json!(["ask-held"]), "{view}");
    assert_eq!(
        setup.peer.server.requests().len(),
        before,
        "sent while held"
    );
    operator.push_str(&decide(&setup.home, &["list"]));
    operator.push_str(&decide(&setup.home, &["approve", &id_of(&view)]));
    let output = agent.join().unwrap();
    let everything = interception::everything(&output);
    assert!(output.status.success(), "{everything}");
    let response = parse_raw_answer(&output.stdout);
    assert_eq!(response.status, 200, "{everything}");
    assert!(everything.starts_with("HTTP/2 200"), "{everything}");
    assert!(response.body.contains(MARKER), "{}", response.body);
    let upstream = setup.peer.server.requests().last().unwrap();
    assert_eq!(upstream.path, "/echo/held/one");
    assert_eq!(
        upstream.header("authorization"),
        Some(format!("Bearer {}", interception::CANARY).as_str())
    );
    assert!(upstream.header("proxy-authorization").is_none());
    let rid = response.header("mint-request-id").unwrap().to_owned();
    let records = records_with_outcome(&setup.broker, &rid);
    let decided = decisions(&records);
    assert_eq!(decided.len(), 2, "{records:?}");
    assert_eq!(decided[0]["decision"], "pending", "{records:?}");
    assert_eq!(decided[0]["approval"], json!([id_of(&view)]), "{records:?}");
    assert_eq!(decided[1]["decision"], "allow", "{records:?}");
    assert_eq!(decided[1]["host"], interception::HOST, "{records:?}");
    assert_eq!(setup.broker.outcome_of(&rid)["outcome"], "completed");

    let sent = setup.peer.server.requests().len();
    let agent = tunneled_post_in_background(&setup, "--http1.1", "/echo/held/two");
    let view = wait_pending(&setup.home, 1).remove(0);
    operator.push_str(&decide(&setup.home, &["deny", &id_of(&view)]));
    let output = agent.join().unwrap();
    let denied_everything = interception::everything(&output);
    let denied = parse_raw_answer(&output.stdout);
    assert_eq!(denied.status, 403, "{denied_everything}");
    assert_eq!(denied.json()["error"]["code"], "approval_denied");
    assert_eq!(
        setup.peer.server.requests().len(),
        sent,
        "a denied request was sent"
    );
    // Both tunnels were opened and recorded as such.
    assert!(!setup.records_with_reason("tunnel_opened").is_empty());
    setup.assert_no_canary(&format!("{everything}{denied_everything}{operator}"));
}

// ---------------------------------------------------------------------------------------------
// What the operator is shown of a call is what the call holds
// ---------------------------------------------------------------------------------------------

/// A raw JSON body POSTed to the echo upstream's `path` with the echo alias.
fn raw_body_in_background(lab: &Lab, path: &str, body: &str) -> JoinHandle<CurlResponse> {
    let url = lab.echo_url(path);
    let cap = lab.cap_header();
    let body = body.to_owned();
    std::thread::spawn(move || {
        curl(&[
            "-g",
            "--max-time",
            "250",
            "-H",
            &cap,
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            &body,
            &url,
        ])
    })
}

/// Mint reads a message's members the way the most lenient receivers do (ASCII case-insensitive,
/// Go's folding: `"Method"`, `"PARAMS"`, `"Name"` name a `tools/call` as well), and holds each
/// call so read. The operator must then be shown each call's own arguments, read the same way:
/// here the first call of the batch spells its members in capitals and asks for
/// `DROP-EVERYTHING`, the second is spelled plainly and asks for `harmless`.
#[test]
fn each_held_call_is_shown_with_its_own_arguments_however_its_members_are_spelled() {
    let lab = Lab::start(
        LabConfig {
            secrets: &[("echo", ECHO_CANARY)],
            ..LabConfig::default()
        },
        tool_rules,
    );
    let batch = r#"[{"jsonrpc":"2.0","id":1,"Method":"tools/call","Params":{"Name":"search","Arguments":{"query":"DROP-EVERYTHING"}}},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search","arguments":{"query":"harmless"}}}]"#;
    let agent = raw_body_in_background(&lab, "/echo/write/batch", batch);
    let pending = wait_pending(&lab.home, 2);
    let shown: Vec<Value> = pending.iter().map(|v| v["arguments"].clone()).collect();
    // Deny both first, so the agent is answered whatever the assertions say.
    for view in &pending {
        let _ = approvals(&lab.home, &["deny", &id_of(view)]);
    }
    let refused = agent.join().unwrap();
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert_eq!(lab.forwarded(), 0);
    assert_eq!(
        shown,
        [
            json!("{\n  \"query\": \"DROP-EVERYTHING\"\n}"),
            json!("{\n  \"query\": \"harmless\"\n}"),
        ],
        "the operator was shown the wrong arguments"
    );
}

/// One call whose `params` holds `arguments` twice in two spellings: a receiver that folds
/// member names case-insensitively and keeps the last (Go's `encoding/json`) runs it with
/// `DROP-EVERYTHING`. Mint refuses two spellings of `method`, `params` or `name` in one object
/// (`AmbiguousMember`) for that reason; a call the operator decides on must not be shown one of
/// two readings of its arguments either: either refused, or shown with both.
#[test]
fn a_call_with_two_spellings_of_its_arguments_is_never_shown_only_one_of_them() {
    let lab = Lab::start(
        LabConfig {
            secrets: &[("echo", ECHO_CANARY)],
            ..LabConfig::default()
        },
        tool_rules,
    );
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"query":"harmless"},"ARGUMENTS":{"query":"DROP-EVERYTHING"}}}"#;
    let agent = raw_body_in_background(&lab, "/echo/write/one", call);
    // Either refused outright (as two spellings of `name` are), or held and shown with both.
    let deadline = Instant::now() + PATIENCE;
    let held = loop {
        if agent.is_finished() {
            break None;
        }
        let pending = listed(&lab.home)["pending"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if let Some(view) = pending.first() {
            break Some(view.clone());
        }
        assert!(Instant::now() < deadline, "neither held nor answered");
        std::thread::sleep(Duration::from_millis(50));
    };
    if let Some(view) = &held {
        let _ = approvals(&lab.home, &["deny", &id_of(view)]);
    }
    let answer = agent.join().unwrap();
    assert_eq!(lab.forwarded(), 0);
    if let Some(view) = held {
        let shown = view["arguments"].as_str().unwrap_or_default();
        assert!(
            shown.contains("DROP-EVERYTHING"),
            "held, and shown only {shown:?}"
        );
    } else {
        assert_eq!(answer.status, 400, "{}", answer.body);
    }
}

/// The request on the watching terminal stops waiting some other way: decided by another
/// operator (`mint approvals deny` elsewhere), or its agent went away. The terminal says so and
/// goes on to the next request, which the answer typed then decides; `--grant-for` sets the
/// grant `a` gives.
#[test]
fn the_watching_terminal_lets_go_of_a_request_decided_elsewhere_or_withdrawn() {
    if !Tmux::available() {
        return;
    }
    let lab = Lab::start(
        LabConfig {
            secrets: &[("echo", ECHO_CANARY)],
            ..LabConfig::default()
        },
        tool_rules,
    );
    let tmux = watch_in_tmux(&lab.home, &["--grant-for", "90s"]);
    let mut operator = String::new();

    // Denied elsewhere while shown here.
    let agent = tool_call_in_background(&lab, "/echo/write/elsewhere", &json!({"n": 1}));
    let first = id_of(&wait_pending(&lab.home, 1)[0]);
    tmux.wait_for(&format!("Approval {first}"));
    operator.push_str(&decide(&lab.home, &["deny", &first]));
    tmux.wait_for(&format!("{first} is no longer waiting: denied elsewhere"));
    let denied = agent.join().unwrap();
    assert_eq!(denied.status, 403, "{}", denied.body);

    // The agent goes away while shown here (a raw connection the test closes).
    let mut stream = std::net::TcpStream::connect(lab.broker.addr()).unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"n":2}}}"#;
    write!(
        stream,
        "POST /v1/proxy/https/127.0.0.1:{}/echo/write/gone HTTP/1.1\r\nHost: mint\r\n{}\r\nAuthorization: Bearer {{{{mint:echo}}}}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        lab.port(),
        lab.cap_header(),
        body.len()
    )
    .unwrap();
    let second = id_of(&wait_pending(&lab.home, 1)[0]);
    tmux.wait_for(&format!("Approval {second}"));
    drop(stream);
    tmux.wait_for(&format!(
        "{second} is no longer waiting: the agent went away"
    ));
    wait_pending(&lab.home, 0);

    // Still watching: the next request is asked about and `a` grants for the 90 s asked.
    let agent = tool_call_in_background(&lab, "/echo/write/next", &json!({"n": 3}));
    let third = id_of(&wait_pending(&lab.home, 1)[0]);
    let shown = tmux.wait_for(&format!("Approval {third}"));
    assert!(shown.contains("[a] for 1m 30s"), "{shown}");
    // A prompt shown within a second of the previous one changing underneath ignores answers
    // for that second (a key meant for the old request must not decide this one).
    std::thread::sleep(Duration::from_millis(1100));
    tmux.keys(&["a", "Enter"]);
    let screen = tmux.wait_for(&format!("approved {third}; grant gr-"));
    assert!(screen.contains("for 1m 30s"), "{screen}");
    let granted = agent.join().unwrap();
    assert_eq!(granted.status, 200, "{}", granted.body);
    let grants = listed(&lab.home)["grants"].clone();
    let left = grants[0]["seconds_left"].as_u64().unwrap();
    assert!((80..=90).contains(&left), "{grants}");
    assert_eq!(lab.forwarded(), 1);
    let records = lab.broker.audit_records();
    assert!(
        records
            .iter()
            .any(|r| r["reason"] == "approval_withdrawn" && r["approval"] == json!([second])),
        "{records:?}"
    );
    operator.push_str(&String::from_utf8_lossy(&tmux.screen()));
    lab.assert_clean(format!(
        "{}{}{operator}",
        denied.everything(),
        granted.everything()
    ));
}

/// An answer typed while nothing is shown (a key pressed twice on the previous prompt, or
/// pressed while the screen was idle) must not decide the next request: the operator has not
/// seen it yet. The watcher reads the terminal's lines on a thread into a queue, and a prompt
/// takes whatever line is queued first.
#[test]
fn an_answer_typed_before_a_request_is_shown_never_decides_it() {
    if !Tmux::available() {
        return;
    }
    let lab = Lab::start(
        LabConfig {
            secrets: &[("echo", ECHO_CANARY)],
            ..LabConfig::default()
        },
        tool_rules,
    );
    let tmux = watch_in_tmux(&lab.home, &[]);
    // Typed while nothing waits.
    tmux.keys(&["y", "Enter"]);
    let agent = tool_call_in_background(&lab, "/echo/write/unseen", &json!({"n": 1}));
    // Its prompt (not the list, where a queued answer would leave it only for a moment).
    let screen = tmux.wait_for("Approval ap-");
    let id = screen
        .split_whitespace()
        .find(|w| w.starts_with("ap-"))
        .unwrap()
        .to_owned();
    // The prompt is shown: the request must still wait for an answer typed now. A queued line
    // decides it at once; two seconds leave room for that on a loaded machine.
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline && !agent.is_finished() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let still_waiting = !agent.is_finished();
    let screen = String::from_utf8_lossy(&tmux.screen()).into_owned();
    // End it either way, then judge.
    let _ = approvals(&lab.home, &["deny", &id]);
    let answer = agent.join().unwrap();
    assert!(
        still_waiting,
        "decided by an answer typed before it was shown (status {}, {} sent):\n{screen}",
        answer.status,
        lab.forwarded()
    );
    assert_eq!(answer.status, 403, "{}", answer.body);
    assert_eq!(lab.forwarded(), 0);
}

/// Several held requests as streams of one HTTP/2 connection (hyper's client, cleartext, prior
/// knowledge): each waits on its own, so a later stream approved first completes while an
/// earlier one still waits; a stream the client resets while it waits is withdrawn (audited
/// approval_withdrawn), the connection staying open; a denied one gets 403. Only the approved
/// one is sent.
#[test]
fn streams_of_one_http2_connection_are_held_and_decided_independently() {
    use http_body_util::{BodyExt as _, Full};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let lab = Lab::start(
        LabConfig {
            secrets: &[("echo", ECHO_CANARY)],
            ..LabConfig::default()
        },
        write_rules,
    );
    let mut operator = String::new();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let addr = lab.broker.addr().to_owned();
    let port = lab.port();
    let cap = lab.cap.clone();
    // The hyper work runs on the runtime's workers; this thread plays the operator, blocking.
    let (a, b, c) = runtime.block_on(async {
        let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let (sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                .await
                .unwrap();
        tokio::spawn(connection);
        let post = |path: &str| {
            let mut sender = sender.clone();
            let request = hyper::Request::post(format!(
                "http://{addr}/v1/proxy/https/127.0.0.1:{port}{path}"
            ))
            .header("mint-capability", &cap)
            .header("authorization", "Bearer {{mint:echo}}")
            .header("content-type", "application/json")
            .body(Full::new(bytes::Bytes::from_static(
                b"{\"title\":\"stream\"}",
            )))
            .unwrap();
            tokio::spawn(async move {
                let response = sender.send_request(request).await.unwrap();
                let status = response.status().as_u16();
                let id = response
                    .headers()
                    .get("mint-request-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let body = response.into_body().collect().await.unwrap().to_bytes();
                (status, id, String::from_utf8_lossy(&body).into_owned())
            })
        };
        (
            post("/echo/write/a"),
            post("/echo/write/b"),
            post("/echo/write/c"),
        )
    });
    let pending = wait_pending(&lab.home, 3);
    let id_for = |path: &str| {
        pending
            .iter()
            .find(|v| v["path"] == path)
            .map(id_of)
            .unwrap_or_else(|| panic!("{path} is not waiting: {pending:?}"))
    };
    let (id_a, id_b, id_c) = (
        id_for("/echo/write/a"),
        id_for("/echo/write/b"),
        id_for("/echo/write/c"),
    );
    // The client resets stream c (its response future dropped): withdrawn, the others wait on.
    c.abort();
    let left = wait_pending(&lab.home, 2);
    assert!(left.iter().all(|v| v["id"] != id_c.as_str()), "{left:?}");
    let late = approvals(&lab.home, &["approve", &id_c]);
    assert_eq!(late.status.code(), Some(1), "{}", text(&late));
    // b approved first: it completes while a still waits.
    operator.push_str(&decide(&lab.home, &["approve", &id_b]));
    let (status_b, rid_b, body_b) = runtime
        .block_on(async { tokio::time::timeout(PATIENCE, b).await })
        .unwrap()
        .unwrap();
    assert_eq!(status_b, 200, "{body_b}");
    assert!(body_b.contains(&format!("Bearer {MARKER}")), "{body_b}");
    assert!(!a.is_finished(), "a was answered before it was decided");
    assert_eq!(wait_pending(&lab.home, 1)[0]["id"], id_a.as_str());
    operator.push_str(&decide(&lab.home, &["deny", &id_a]));
    let (status_a, rid_a, body_a) = runtime
        .block_on(async { tokio::time::timeout(PATIENCE, a).await })
        .unwrap()
        .unwrap();
    assert_eq!(status_a, 403, "{body_a}");
    assert!(body_a.contains("approval_denied"), "{body_a}");
    assert_eq!(lab.forwarded_paths(), ["/echo/write/b"]);
    assert_eq!(lab.broker.outcome_of(&rid_b)["outcome"], "completed");
    assert_eq!(lab.broker.outcome_of(&rid_a)["outcome"], "denied");
    // The reset stream's approval is audited as withdrawn.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let records = lab.broker.audit_records();
        if records
            .iter()
            .any(|r| r["reason"] == "approval_withdrawn" && r["approval"] == json!([id_c]))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no approval_withdrawn: {records:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(runtime);
    lab.assert_clean(format!("{body_a}{body_b}{operator}"));
}

/// No decision in time: the SDK raises the JSON-RPC error whose `data.code` is
/// `approval_timeout`, the call never ran, a late approval finds nothing, and the session goes
/// on (the next call, decided, answers).
#[test]
fn an_undecided_mcp_call_times_out_as_a_jsonrpc_error_and_the_session_goes_on() {
    let Some(python) = python() else { return };
    let lab = McpLab::start_with_timeout(&python, "2s");
    let mut command = python_command(&python);
    command
        .arg(script("mcp_approval_client.py"))
        .args(["--url", &lab.url()])
        .args(["--call", "search", r#"{"query": "nobody answers"}"#])
        .args(["--call", "search", r#"{"query": "answered"}"#])
        .env("MINT_CAPABILITY", &lab.cap);
    let started = Instant::now();
    let client = spawn_bounded(command, Duration::from_secs(400));
    // The second call is held once the first has timed out (which needs no listing: on a slow
    // machine the first may come and go between two looks); approved at once.
    let deadline = Instant::now() + PATIENCE;
    let second = loop {
        let pending = listed(&lab.home)["pending"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if let Some(view) = pending
            .iter()
            .find(|v| v["arguments"] == "{\n  \"query\": \"answered\"\n}")
        {
            break view.clone();
        }
        assert!(Instant::now() < deadline, "the second call never waited");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut operator = decide(&lab.home, &["approve", &id_of(&second)]);
    // The first call's approval, from its pending record; approving it now finds nothing.
    let timed_out = lab
        .broker
        .audit_records()
        .into_iter()
        .find(|r| r["reason"] == "approval_timeout")
        .unwrap_or_else(|| panic!("no approval_timeout record"));
    let request_id = timed_out["id"].as_str().unwrap().to_owned();
    let first_id = timed_out["approval"][0].as_str().unwrap().to_owned();
    let late = approvals(&lab.home, &["approve", &first_id]);
    assert_eq!(late.status.code(), Some(1), "{}", text(&late));
    operator.push_str(&text(&late));
    let output = client.join().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "the client failed:\n{stderr}\n{stdout}"
    );
    assert!(started.elapsed() >= Duration::from_secs(2));
    let report: Value = serde_json::from_str(stdout.trim()).unwrap();
    let error = &report["calls"][0]["error"];
    assert_eq!(error["code"], JSONRPC_REFUSED, "{report}");
    assert_eq!(error["data"]["code"], "approval_timeout", "{report}");
    assert_eq!(
        report["calls"][1]["text"], "3 results for answered",
        "{report}"
    );
    assert_eq!(lab.server.calls(), ["search"]);
    let records = records_with_outcome(&lab.broker, &request_id);
    let decided = decisions(&records);
    assert_eq!(decided[0]["decision"], "pending", "{records:?}");
    assert_eq!(decided[0]["approval"], json!([first_id]), "{records:?}");
    assert_eq!(decided[0]["mcp_tool"], "search", "{records:?}");
    assert_eq!(decided[1]["decision"], "deny", "{records:?}");
    assert_eq!(decided[1]["reason"], "approval_timeout", "{records:?}");
    assert!(decided[1]["approver"].is_null(), "{records:?}");
    lab.assert_clean(&format!("{stdout}{stderr}{operator}"));
}
