//! WebSocket through Mint (issue 21, part 1): real clients and servers on every entry, the
//! route, forward-proxy mode and an intercepted `CONNECT` tunnel.
//!
//! The upstream is Python's `websockets` (tests/python/websocket_upstream.py), which echoes and,
//! on command, writes the secret the opening handshake carried into a text frame, a binary frame,
//! a message fragmented across three frames with the secret cut between two, and a close
//! reason. The clients are Python's `websockets` and Node's `ws` (both offer
//! `permessage-deflate`, which Mint strips), and undici's `WebSocket` through `HTTPS_PROXY`.
//! Hand-made peers cover what real ones never do: an upstream that negotiates an extension
//! anyway, one that sends a compressed frame and a ping holding the secret, a client that never
//! finishes its head, one that goes silent. Every test checks that the canary is absent from
//! what the client printed, the audit log and Mint's stderr.
//!
//! The clients come from `.ci/run` (the venv from tests/python/requirements.txt, `npm ci` of
//! tests/node); a missing one fails the test.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use mint_tests::broker::{Broker, MintHome};
use mint_tests::interception::{client_command, everything};
use mint_tests::repo_root;
use serde_json::{Value, json};

/// The secret of the alias `wsapi`.
const SECRET: &str = "canary-websocket-Wq7Lp3Xz9Rk2Vn5T";

/// The upstream's name in the intercepted tunnel, pinned to 127.0.0.1 with `--resolve`.
const HOST: &str = "ws.example.test";

const REDACTED: &str = "[mint:redacted]";

/// The Python upstream, killed on drop.
struct WsUpstream {
    child: Child,
    port: u16,
    log: PathBuf,
    ca: PathBuf,
    _dir: tempfile::TempDir,
}

impl WsUpstream {
    /// Starts it, plain `ws` or (`tls`) `wss` with a certificate for [`HOST`].
    fn start(tls: bool) -> WsUpstream {
        let dir = tempfile::tempdir().unwrap();
        let python = repo_root().join(".venv/bin/python");
        assert!(python.exists(), "run the setup_mcp_clients step of .ci/run");
        let log = dir.path().join("handshakes.jsonl");
        let ca = dir.path().join("upstream-ca.pem");
        let mut command = client_command(&python, &[]);
        command
            .arg(repo_root().join("tests/python/websocket_upstream.py"))
            .args(["--secret", SECRET, "--log"])
            .arg(&log)
            .arg("--ca-out")
            .arg(&ca);
        if tls {
            command.args(["--tls-host", HOST]);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = serde_json::from_str::<Value>(&line)
            .unwrap_or_else(|_| panic!("websocket upstream did not start: {line:?}"))["port"]
            .as_u64()
            .unwrap() as u16;
        WsUpstream {
            child,
            port,
            log,
            ca,
            _dir: dir,
        }
    }

    /// The opening handshakes it served whose socket has ended (one JSON object each).
    fn handshakes(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// Waits (bounded) for the `n`th handshake's record, written as its socket ends.
    fn wait_for_handshakes(&self, n: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let seen = self.handshakes();
            if seen.len() >= n {
                return seen;
            }
            assert!(Instant::now() < deadline, "the upstream logged {seen:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for WsUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The policy of [`Lab`]: the rule `ws` allows `GET path` with the alias `wsapi`.
fn ws_policy(scheme: &str, host: &str, port: u16, path: &str) -> String {
    format!(
        "version: 1\ndefault: deny\nrules:\n  - id: ws\n    effect: allow\n    match:\n      alias: [wsapi]\n      scheme: [{scheme}]\n      host: [\"{host}\"]\n      port: [{port}]\n      method: [GET]\n      path: [{path}]\n"
    )
}

/// A broker in front of one upstream, with a capability of agent `mino`. The rule `ws` allows
/// `GET /socket` with the alias `wsapi` (bound to the upstream's host).
struct Lab {
    // Dropped in this order: the broker first.
    broker: Broker,
    home: MintHome,
    cap: String,
    port: u16,
}

impl Lab {
    /// A broker for an upstream on `port` (plain `http` on 127.0.0.1, or `tls`: [`HOST`] pinned to
    /// it), trusting `ca` for upstreams, with `extra` `mint serve` arguments.
    fn start(port: u16, ca: &Path, tls: bool, extra: &[&str]) -> Lab {
        let (host, scheme) = if tls {
            (HOST, "https")
        } else {
            ("127.0.0.1", "http")
        };
        let policy = ws_policy(scheme, host, port, "/socket");
        let aliases = format!(
            "aliases:\n  - name: wsapi\n    hosts: [\"{host}\"]\n    source: file:$SECRETS/wsapi\n"
        );
        let home = MintHome::new(&policy, &aliases, &[("wsapi", SECRET)]);
        let cap = home.issue_capability("mino", &[]);
        let pin = format!("{HOST}:{port}:127.0.0.1");
        let mut args = vec!["--resolve", pin.as_str()];
        args.extend_from_slice(extra);
        let broker = home.serve(ca, &args);
        Lab {
            broker,
            home,
            cap,
            port,
        }
    }

    /// The route URL of the upstream's `path`.
    fn route(&self, path: &str) -> String {
        format!(
            "ws://{}/v1/proxy/http/127.0.0.1:{}{path}",
            self.broker.addr(),
            self.port
        )
    }

    /// `HTTPS_PROXY` for clients: the capability as the proxy URL's password.
    fn proxy(&self) -> String {
        format!("http://agent:{}@{}", self.cap, self.broker.addr())
    }

    /// Waits (bounded) for the outcome record with status 101 of the `n`th socket, written when
    /// it closes.
    fn socket_outcomes(&self, n: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let outcomes: Vec<Value> = self
                .broker
                .audit_records()
                .into_iter()
                .filter(|r| r["phase"] == "outcome" && r["status"] == 101)
                .collect();
            if outcomes.len() >= n {
                return outcomes;
            }
            assert!(
                Instant::now() < deadline,
                "no WebSocket outcome: {}",
                self.broker.audit_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// No canary in `seen`, the audit log or Mint's stderr.
    fn assert_clean(&self, seen: &str) {
        self.broker.assert_clean(seen, &[SECRET]);
        let _ = &self.home;
    }
}

/// Runs tests/python/websocket_client.py with `args` and only `vars` in its environment.
fn python_client(args: &[&str], vars: &[(&str, &str)]) -> (Value, String) {
    let output = client_command(repo_root().join(".venv/bin/python"), vars)
        .arg(repo_root().join("tests/python/websocket_client.py"))
        .args(args)
        .output()
        .unwrap();
    parse_client(&output)
}

/// Starts tests/python/websocket_client.py with `args` and only `vars` in its environment;
/// [`finish_client`] collects what it printed.
fn spawn_python_client(args: &[&str], vars: &[(&str, &str)]) -> Child {
    client_command(repo_root().join(".venv/bin/python"), vars)
        .arg(repo_root().join("tests/python/websocket_client.py"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish_client(child: Child) -> (Value, String) {
    parse_client(&child.wait_with_output().unwrap())
}

/// Runs tests/node/websocket_client.mjs with `args` and only `vars` in its environment.
fn node_client(args: &[&str], vars: &[(&str, &str)]) -> (Value, String) {
    let node = repo_root().join("tests/node");
    assert!(
        node.join("node_modules/ws/package.json").exists(),
        "run the setup_mcp_clients step of .ci/run"
    );
    let output = client_command("node", vars)
        .arg(node.join("websocket_client.mjs"))
        .args(args)
        .output()
        .unwrap();
    parse_client(&output)
}

fn parse_client(output: &std::process::Output) -> (Value, String) {
    let printed = everything(output);
    assert!(output.status.success(), "{printed}");
    let json = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| panic!("{printed}"));
    (json, printed)
}

/// What every client sends, and what it must get back: the upstream's answers with the secret
/// redacted in a text frame, a binary frame and a message fragmented across the secret; a
/// placeholder in the agent's frame reaches the upstream as the text it is (the upstream echoes
/// it as it got it, so a substituted secret would come back redacted).
const STEPS: [&str; 5] = [
    "echo:hi",
    "leak-text",
    "leak-binary",
    "leak-split",
    "echo:{{mint:wsapi}}",
];

#[track_caller]
fn assert_scrubbed_answers(result: &Value, printed: &str) {
    let binary: String = [b"\x00\x01".as_slice(), REDACTED.as_bytes(), b"\xff"]
        .concat()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        result["answers"],
        json!([
            "hi",
            format!("the key is {REDACTED} ok"),
            {"binary": binary},
            format!("the key is {REDACTED} ok"),
            "{{mint:wsapi}}",
        ]),
        "{printed}"
    );
    assert_eq!(result["extensions"], json!([]), "{printed}");
}

/// What the upstream saw of one socket: the secret substituted in the handshake's header, no
/// extension offer, no Mint or proxy header, and the agent's messages unchanged.
#[track_caller]
fn assert_upstream_saw(handshake: &Value, messages: &[&str]) {
    assert_eq!(handshake["path"], "/socket", "{handshake}");
    assert_eq!(handshake["authorization_ok"], true, "{handshake}");
    assert_eq!(handshake["extensions"], Value::Null, "{handshake}");
    assert_eq!(handshake["negotiated"], json!([]), "{handshake}");
    assert_eq!(handshake["mint_or_proxy_headers"], json!([]), "{handshake}");
    assert_eq!(handshake["received"], json!(messages), "{handshake}");
}

/// The decision and outcome records of one socket.
#[track_caller]
fn assert_socket_records(lab: &Lab, outcome: &Value, reason: &str) {
    assert_eq!(outcome["outcome"], "completed", "{outcome}");
    assert_eq!(outcome["reason"], reason, "{outcome}");
    let ended = match reason {
        "websocket_closed_by_upstream" => "upstream_closed",
        _ => "client_closed",
    };
    assert_eq!(outcome["ended"], ended, "{outcome}");
    assert!(outcome["bytes_up"].as_u64().unwrap() > 0, "{outcome}");
    assert!(outcome["bytes_down"].as_u64().unwrap() > 0, "{outcome}");
    let decision = lab
        .broker
        .audit_records()
        .into_iter()
        .find(|r| r["phase"] == "decision" && r["id"] == outcome["id"])
        .unwrap();
    assert_eq!(decision["decision"], "allow");
    assert_eq!(decision["rule"], json!(["ws"]));
    assert_eq!(decision["method"], "GET");
    assert_eq!(decision["path"], "/socket");
    assert_eq!(decision["aliases"], json!(["wsapi"]));
}

#[test]
fn issue_21_python_websockets_and_node_ws_through_the_route() {
    let upstream = WsUpstream::start(false);
    let lab = Lab::start(upstream.port, &upstream.ca, false, &[]);
    let url = lab.route("/socket");
    let cap = format!("Mint-Capability:{}", lab.cap);
    let auth = "Authorization:Bearer {{mint:wsapi}}";

    // Python: the upstream closes, with the secret in its close reason.
    let mut steps = STEPS.to_vec();
    steps.push("close-leak");
    let steps_json = serde_json::to_string(&steps).unwrap();
    let (result, printed) = python_client(
        &[&url, &steps_json, "--header", &cap, "--header", auth],
        &[],
    );
    assert_scrubbed_answers(&result, &printed);
    assert_eq!(
        result["close"],
        json!({"code": 4000, "reason": format!("bye {REDACTED}")}),
        "{printed}"
    );
    assert_upstream_saw(&upstream.wait_for_handshakes(1)[0], &steps);
    let outcome = &lab.socket_outcomes(1)[0];
    assert_socket_records(&lab, outcome, "websocket_closed_by_upstream");
    lab.assert_clean(&printed);

    // Node's `ws`: the agent closes.
    let steps_json = serde_json::to_string(&STEPS).unwrap();
    let (result, printed) = node_client(
        &[&url, &steps_json, "--header", &cap, "--header", auth],
        &[],
    );
    assert_scrubbed_answers(&result, &printed);
    assert_eq!(result["close"]["code"], 1000, "{printed}");
    assert_upstream_saw(&upstream.wait_for_handshakes(2)[1], &STEPS);
    let outcome = &lab.socket_outcomes(2)[1];
    assert_socket_records(&lab, outcome, "websocket_closed_by_agent");
    lab.assert_clean(&printed);
}

#[test]
fn issue_21_forward_proxy_and_intercepted_tunnels() {
    // Forward-proxy mode: the handshake in absolute form with `Proxy-Authorization`.
    let upstream = WsUpstream::start(false);
    let lab = Lab::start(upstream.port, &upstream.ca, false, &[]);
    let steps_json = serde_json::to_string(&STEPS).unwrap();
    let bearer = format!("Proxy-Authorization:Bearer {}", lab.cap);
    let (result, printed) = python_client(
        &[
            &format!("ws://127.0.0.1:{}/socket", upstream.port),
            &steps_json,
            "--header",
            &bearer,
            "--header",
            "Authorization:Bearer {{mint:wsapi}}",
            "--forward-proxy",
            lab.broker.addr(),
        ],
        &[],
    );
    assert_scrubbed_answers(&result, &printed);
    assert_upstream_saw(&upstream.wait_for_handshakes(1)[0], &STEPS);
    assert_socket_records(
        &lab,
        &lab.socket_outcomes(1)[0],
        "websocket_closed_by_agent",
    );
    lab.assert_clean(&printed);

    // `HTTPS_PROXY` with Mint's CA: `wss://` through an intercepted tunnel, Python's
    // `websockets` and undici's `WebSocket` as their environment configures them.
    let upstream = WsUpstream::start(true);
    let lab = Lab::start(upstream.port, &upstream.ca, true, &[]);
    let url = format!("wss://{HOST}:{}/socket", upstream.port);
    let proxy = lab.proxy();
    let ca = lab.home.path().join("ca.pem");
    let ca = ca.to_str().unwrap();
    let auth = "Authorization:Bearer {{mint:wsapi}}";
    let (result, printed) = python_client(
        &[&url, &steps_json, "--header", auth],
        &[("HTTPS_PROXY", &proxy), ("SSL_CERT_FILE", ca)],
    );
    assert_scrubbed_answers(&result, &printed);
    assert_upstream_saw(&upstream.wait_for_handshakes(1)[0], &STEPS);
    lab.assert_clean(&printed);
    let (result, printed) = node_client(
        &[&url, &steps_json, "--header", auth, "--undici"],
        &[("HTTPS_PROXY", &proxy), ("NODE_EXTRA_CA_CERTS", ca)],
    );
    assert_scrubbed_answers(&result, &printed);
    assert_upstream_saw(&upstream.wait_for_handshakes(2)[1], &STEPS);
    let outcomes = lab.socket_outcomes(2);
    for outcome in &outcomes {
        assert_socket_records(&lab, outcome, "websocket_closed_by_agent");
    }
    // Each tunnel's summary comes after its socket's outcome: the tunnel waited for it.
    let deadline = Instant::now() + Duration::from_secs(20);
    let records = loop {
        let records = lab.broker.audit_records();
        if records
            .iter()
            .filter(|r| r["reason"] == "tunnel_closed")
            .count()
            == 2
        {
            break records;
        }
        assert!(Instant::now() < deadline, "{}", lab.broker.audit_text());
        std::thread::sleep(Duration::from_millis(20));
    };
    let position = |pred: &dyn Fn(&Value) -> bool| records.iter().position(pred).unwrap();
    let last_socket = position(&|r| r["id"] == outcomes[1]["id"] && r["phase"] == "outcome");
    let tunnels: Vec<usize> = records
        .iter()
        .enumerate()
        .filter(|(_, r)| r["reason"] == "tunnel_closed")
        .map(|(i, _)| i)
        .collect();
    assert!(tunnels[1] > last_socket, "{}", lab.broker.audit_text());
    lab.assert_clean(&printed);
}

#[test]
fn issue_21_refusals_come_before_anything_is_sent() {
    let upstream = WsUpstream::start(false);
    let lab = Lab::start(
        upstream.port,
        &upstream.ca,
        false,
        &["--max-websocket-message", "1KiB"],
    );
    let cap = format!("Mint-Capability:{}", lab.cap);
    let auth = "Authorization:Bearer {{mint:wsapi}}";
    let steps = r#"["echo:hi"]"#;

    // A path no rule allows: 403 with the rule's verdict, nothing sent.
    let (result, printed) = python_client(
        &[
            &lab.route("/other"),
            steps,
            "--header",
            &cap,
            "--header",
            auth,
        ],
        &[],
    );
    assert_eq!(result["status"], 403, "{printed}");
    assert!(result["body"].as_str().unwrap().contains("policy_denied"));
    // No capability: 401.
    let (result, printed) = python_client(&[&lab.route("/socket"), steps, "--header", auth], &[]);
    assert_eq!(result["status"], 401, "{printed}");
    assert!(upstream.handshakes().is_empty());

    // A message over `--max-websocket-message` from the upstream closes the socket with 1009.
    let (result, printed) = python_client(
        &[
            &lab.route("/socket"),
            r#"["echo:hi","big:5000","echo:never"]"#,
            "--header",
            &cap,
            "--header",
            auth,
        ],
        &[],
    );
    assert_eq!(result["answers"], json!(["hi"]), "{printed}");
    assert_eq!(result["close"]["code"], 1009, "{printed}");
    let outcome = &lab.socket_outcomes(1)[0];
    assert_eq!(outcome["outcome"], "unknown", "{outcome}");
    assert_eq!(outcome["reason"], "websocket_upstream_message_too_large");
    assert_eq!(outcome["ended"], "error", "{outcome}");
    lab.assert_clean(&printed);

    // The agent's capability token in a frame: that frame is not forwarded, the socket closes
    // with 1008 (policy violation).
    let leak = serde_json::to_string(&["echo:hi".to_owned(), format!("echo:{}", lab.cap)]).unwrap();
    let (result, printed) = python_client(
        &[
            &lab.route("/socket"),
            &leak,
            "--header",
            &cap,
            "--header",
            auth,
        ],
        &[],
    );
    assert_eq!(result["answers"], json!(["hi"]), "{printed}");
    assert_eq!(result["close"]["code"], 1008, "{printed}");
    let handshakes = upstream.wait_for_handshakes(2);
    assert_eq!(handshakes[1]["received"], json!(["echo:hi"]));
    let outcome = &lab.socket_outcomes(2)[1];
    assert_eq!(outcome["reason"], "capability_token_outward", "{outcome}");
    assert_eq!(outcome["ended"], "error", "{outcome}");
    assert!(!lab.broker.audit_text().contains(&lab.cap));
}

// ---------------------------------------------------------------------------------------------
// Hand-made peers: what real ones never do
// ---------------------------------------------------------------------------------------------

/// A one-connection upstream on 127.0.0.1:0 running `script` on the connection it accepts.
struct RawUpstream {
    port: u16,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RawUpstream {
    fn start(script: fn(TcpStream)) -> RawUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let thread = std::thread::spawn(move || {
            if let Ok((stream, _)) = listener.accept() {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
                script(stream);
            }
        });
        RawUpstream {
            port,
            thread: Some(thread),
        }
    }
}

impl Drop for RawUpstream {
    fn drop(&mut self) {
        // Wakes an accept that never came.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// An upstream `101` (the agent, a raw client too, does not check `Sec-WebSocket-Accept`).
const SWITCHING: &str = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n";

/// A raw frame from a server: unmasked.
fn server_frame(first: u8, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let mut frame = vec![first, payload.len() as u8];
    frame.extend_from_slice(payload);
    frame
}

/// A raw agent: sends the opening handshake of `path` through the route with the capability,
/// returns the stream and the answer's head.
fn raw_agent(lab: &Lab, path: &str) -> (TcpStream, String) {
    let mut stream = TcpStream::connect(lab.broker.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let head = format!(
        "GET /v1/proxy/http/127.0.0.1:{}{path} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Extensions: permessage-deflate\r\nMint-Capability: {}\r\nAuthorization: Bearer {{{{mint:wsapi}}}}\r\n\r\n",
        lab.port,
        lab.broker.addr(),
        lab.cap
    );
    stream.write_all(head.as_bytes()).unwrap();
    let answer = read_head(&mut stream);
    (stream, answer)
}

/// Reads one frame from the server side of Mint (unmasked): its first byte and payload.
fn read_frame(stream: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut head = [0u8; 2];
    stream.read_exact(&mut head).ok()?;
    let len = match head[1] & 0x7F {
        126 => {
            let mut ext = [0u8; 2];
            stream.read_exact(&mut ext).ok()?;
            u16::from_be_bytes(ext) as usize
        }
        127 => return None,
        len => len as usize,
    };
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).ok()?;
    Some((head[0], payload))
}

#[test]
fn issue_21_extensions_compressed_frames_and_control_frames_from_the_upstream() {
    // An upstream that negotiates `permessage-deflate` though Mint offered none: refused, 502.
    let upstream = RawUpstream::start(|mut stream| {
        let head = read_head(&mut stream);
        assert!(
            !head
                .to_ascii_lowercase()
                .contains("sec-websocket-extensions")
        );
        let answer = format!("{SWITCHING}Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n");
        let _ = stream.write_all(answer.as_bytes());
        let _ = stream.read(&mut [0u8; 1]);
    });
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    // Plain `http` to loopback needs no CA; `mint serve` is given one all the same.
    mint_broker::demo::echo_upstream::TestCa::generate()
        .unwrap()
        .write_pem(&ca)
        .unwrap();
    let lab = Lab::start(upstream.port, &ca, false, &[]);
    let (_stream, answer) = raw_agent(&lab, "/socket");
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    drop(upstream);
    lab.assert_clean(&answer);

    // An upstream that echoes the secret in its `101`, pings with it, then sends it compressed
    // (RSV1 set): the head and the ping reach the agent redacted, the compressed frame never
    // does; the socket closes with 1002.
    let upstream = RawUpstream::start(|mut stream| {
        let head = read_head(&mut stream);
        assert!(head.contains(&format!("Bearer {SECRET}")), "{head}");
        // The `101` echoes the secret in a header: scrubbed like any answer's head.
        let mut out = format!("{SWITCHING}X-Echo: Bearer {SECRET}\r\n\r\n").into_bytes();
        out.extend(server_frame(0x89, format!("ping {SECRET}").as_bytes()));
        let mut deflate =
            flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        deflate
            .write_all(format!("the key is {SECRET}").as_bytes())
            .unwrap();
        let compressed = deflate.finish().unwrap();
        out.extend(server_frame(0xC1, &compressed));
        let _ = stream.write_all(&out);
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
    });
    let lab = Lab::start(upstream.port, &ca, false, &[]);
    let (mut stream, answer) = raw_agent(&lab, "/socket");
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    assert!(
        !answer
            .to_ascii_lowercase()
            .contains("sec-websocket-extensions"),
        "{answer}"
    );
    assert!(
        answer
            .to_ascii_lowercase()
            .contains(&format!("x-echo: bearer {REDACTED}")),
        "{answer}"
    );
    let (first, payload) = read_frame(&mut stream).unwrap();
    assert_eq!(first, 0x89);
    assert_eq!(payload, format!("ping {REDACTED}").as_bytes());
    let (first, payload) = read_frame(&mut stream).unwrap();
    assert_eq!(first, 0x88, "a close frame, not the compressed one");
    assert_eq!(&payload[..2], &1002u16.to_be_bytes());
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    let outcome = &lab.socket_outcomes(1)[0];
    assert_eq!(outcome["reason"], "websocket_upstream_protocol_error");
    assert_eq!(outcome["outcome"], "unknown");
    assert_eq!(outcome["ended"], "error", "{outcome}");
    lab.assert_clean(&format!("{answer}{}", String::from_utf8_lossy(&payload)));
}

#[test]
fn issue_21_a_client_that_never_completes_the_handshake_or_goes_silent() {
    let upstream = WsUpstream::start(false);
    let lab = Lab::start(
        upstream.port,
        &upstream.ca,
        false,
        &["--header-read-timeout", "1s", "--idle-timeout", "2s"],
    );
    // A head never finished: Mint's 408, and nothing reaches the upstream.
    let mut stream = TcpStream::connect(lab.broker.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let partial = format!(
        "GET /v1/proxy/http/127.0.0.1:{}/socket HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nMint-Capability: {}\r\n",
        lab.port,
        lab.broker.addr(),
        lab.cap
    );
    stream.write_all(partial.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(upstream.handshakes().is_empty());

    // A handshake finished, then silence both ways: the idle timeout closes the socket with
    // 1001 on both sides.
    let (mut stream, answer) = raw_agent(&lab, "/socket");
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    let (first, payload) = read_frame(&mut stream).unwrap();
    assert_eq!(first, 0x88);
    assert_eq!(&payload[..2], &1001u16.to_be_bytes());
    let outcome = &lab.socket_outcomes(1)[0];
    assert_eq!(outcome["reason"], "websocket_idle_timeout");
    assert_eq!(outcome["ended"], "timeout", "{outcome}");
    let handshake = &upstream.wait_for_handshakes(1)[0];
    assert_eq!(handshake["received"], json!([]));
    assert_eq!(handshake["authorization_ok"], true);
    lab.assert_clean(&answer);
}

#[test]
fn issue_21_an_open_socket_holds_its_connection_slot_and_closes_at_shutdown() {
    let upstream = WsUpstream::start(false);
    let mut lab = Lab::start(
        upstream.port,
        &upstream.ca,
        false,
        &["--max-connections", "1"],
    );
    let (mut stream, answer) = raw_agent(&lab, "/socket");
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    // The socket holds the only slot: another connection waits in the backlog, unanswered.
    let mut other = TcpStream::connect(lab.broker.addr()).unwrap();
    other
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    other
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: mint\r\n\r\n")
        .unwrap();
    let mut byte = [0u8; 1];
    assert!(
        !matches!(other.read(&mut byte), Ok(n) if n > 0),
        "answered while the socket held the only slot"
    );
    // Shutdown: the socket closes with 1001 on the agent's side, its outcome is recorded
    // before the audit log is synced, and the broker exits 0.
    let status = lab.broker.stop();
    assert!(status.success(), "{status:?}");
    let (first, payload) = read_frame(&mut stream).unwrap();
    assert_eq!(first, 0x88);
    assert_eq!(&payload[..2], &1001u16.to_be_bytes());
    let outcome = &lab.socket_outcomes(1)[0];
    assert_eq!(outcome["reason"], "websocket_shutdown", "{outcome}");
    assert_eq!(outcome["ended"], "shutdown", "{outcome}");
    lab.assert_clean(&answer);
}

/// A raw frame from an agent: masked (with a fixed key).
fn client_frame(first: u8, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let key = [0x11u8, 0x22, 0x33, 0x44];
    let mut frame = vec![first, 0x80 | payload.len() as u8];
    frame.extend_from_slice(&key);
    frame.extend(payload.iter().zip(key.iter().cycle()).map(|(b, k)| b ^ k));
    frame
}

/// What the token-splitting upstream received after the handshake: every data payload, unmasked
/// and joined, as the upstream's application would see the message.
static JOINED: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

/// An outside review: a placeholder in `Sec-WebSocket-Key` made the upstream hash the secret
/// into `Sec-WebSocket-Accept` (SHA-1, unsalted) for the agent to guess offline; and a ping
/// between two fragments of the capability token hid it from the search of agent frames. Now
/// the key must be a 16-byte nonce (anything else is refused before anything is sent), and
/// control frames are searched on their own while the tail joins data frames only.
#[test]
fn issue_21_review_no_placeholder_in_the_key_and_no_token_around_a_ping() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    mint_broker::demo::echo_upstream::TestCa::generate()
        .unwrap()
        .write_pem(&ca)
        .unwrap();

    // 1. A placeholder as the key: 400, and the upstream never hears of it.
    let upstream = RawUpstream::start(|mut stream| {
        let head = read_head(&mut stream);
        assert!(head.is_empty(), "the upstream got a handshake: {head}");
    });
    let lab = Lab::start(upstream.port, &ca, false, &[]);
    for key in ["{{mint:wsapi}}", "%7B%7Bmint:wsapi%7D%7D", "c2hvcnQ="] {
        let head = format!(
            "GET /v1/proxy/http/127.0.0.1:{}/socket HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nMint-Capability: {}\r\n\r\n",
            lab.port,
            lab.broker.addr(),
            lab.cap
        );
        let mut stream = TcpStream::connect(lab.broker.addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        stream.write_all(head.as_bytes()).unwrap();
        let answer = read_head(&mut stream);
        assert!(answer.starts_with("HTTP/1.1 400"), "{key}: {answer}");
        lab.assert_clean(&answer);
    }
    drop(upstream);

    // 2. The token in two fragments with a ping between them: the second half is not sent.
    let upstream = RawUpstream::start(|mut stream| {
        read_head(&mut stream);
        let _ = stream.write_all(format!("{SWITCHING}\r\n").as_bytes());
        loop {
            let mut head = [0u8; 2];
            if stream.read_exact(&mut head).is_err() {
                break;
            }
            let len = (head[1] & 0x7F) as usize;
            let mut key = [0u8; 4];
            let mut payload = vec![0u8; len];
            if stream.read_exact(&mut key).is_err() || stream.read_exact(&mut payload).is_err() {
                break;
            }
            let opcode = head[0] & 0x0F;
            if opcode < 8 {
                let plain = payload.iter().zip(key.iter().cycle()).map(|(b, k)| b ^ k);
                JOINED.lock().unwrap().extend(plain);
            }
        }
    });
    let lab = Lab::start(upstream.port, &ca, false, &[]);
    let (mut stream, answer) = raw_agent(&lab, "/socket");
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    let token = lab.cap.as_bytes();
    let (first_half, second_half) = token.split_at(token.len() / 2);
    let mut frames = client_frame(0x01, first_half); // text, not final
    frames.extend(client_frame(0x89, b"x")); // a ping between the fragments
    frames.extend(client_frame(0x80, second_half)); // the final continuation
    stream.write_all(&frames).unwrap();
    let mut closed = None;
    while let Some((first, payload)) = read_frame(&mut stream) {
        if first == 0x88 {
            closed = Some(u16::from_be_bytes([payload[0], payload[1]]));
            break;
        }
    }
    assert_eq!(closed, Some(1008));
    let outcome = &lab.socket_outcomes(1)[0];
    assert_eq!(outcome["reason"], "capability_token_outward", "{outcome}");
    drop(stream);
    drop(upstream);
    let joined = JOINED.lock().unwrap().clone();
    assert!(
        !joined.windows(token.len()).any(|w| w == token),
        "the upstream received the whole token"
    );
    assert!(!lab.broker.audit_text().contains(&lab.cap));
}

/// Waits (bounded) for the `n`th `tunnel_closed` record.
fn tunnel_records(lab: &Lab, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let closed: Vec<Value> = lab
            .broker
            .audit_records()
            .into_iter()
            .filter(|r| r["reason"] == "tunnel_closed")
            .collect();
        if closed.len() >= n {
            return closed;
        }
        assert!(Instant::now() < deadline, "{}", lab.broker.audit_text());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until `n` WebSocket handshakes have their `allow` decision: the socket is
/// being opened (or is open).
fn wait_for_socket_decisions(lab: &Lab, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while lab
        .broker
        .audit_records()
        .iter()
        .filter(|r| r["phase"] == "decision" && r["method"] == "GET" && r["decision"] == "allow")
        .count()
        < n
    {
        assert!(Instant::now() < deadline, "{}", lab.broker.audit_text());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An outside review: a tunnel that carried a WebSocket recorded `ended: client_closed`
/// whatever ended the socket (hyper's connection ends cleanly at the upgrade). Now the socket's
/// outcome and the tunnel's `tunnel_closed` record say what did: the upstream, the idle
/// timeout, the agent, Mint's shutdown.
#[test]
fn issue_21_review_a_tunnel_ends_as_its_socket_did() {
    let upstream = WsUpstream::start(true);
    let mut lab = Lab::start(upstream.port, &upstream.ca, true, &["--idle-timeout", "2s"]);
    let url = format!("wss://{HOST}:{}/socket", upstream.port);
    let proxy = lab.proxy();
    let ca = lab.home.path().join("ca.pem");
    let ca = ca.to_str().unwrap().to_owned();
    let vars = [
        ("HTTPS_PROXY", proxy.as_str()),
        ("SSL_CERT_FILE", ca.as_str()),
    ];
    let auth = "Authorization:Bearer {{mint:wsapi}}";
    let cases: [(&str, &str, &str); 3] = [
        // The upstream closes (with the secret in its reason).
        (
            r#"["echo:hi","close-leak"]"#,
            "websocket_closed_by_upstream",
            "upstream_closed",
        ),
        // Silence: the idle timeout closes it (1001).
        (
            r#"["echo:hi","hold:30"]"#,
            "websocket_idle_timeout",
            "timeout",
        ),
        // The agent closes.
        (
            r#"["echo:hi","close"]"#,
            "websocket_closed_by_agent",
            "client_closed",
        ),
    ];
    for (i, (steps, reason, ended)) in cases.into_iter().enumerate() {
        let (result, printed) = python_client(&[&url, steps, "--header", auth], &vars);
        assert_eq!(result["answers"], json!(["hi"]), "{printed}");
        assert_eq!(result.get("held"), None, "{printed}");
        if ended == "timeout" {
            assert_eq!(result["close"]["code"], 1001, "{printed}");
        }
        let outcome = &lab.socket_outcomes(i + 1)[i];
        assert_eq!(outcome["reason"], reason, "{outcome}");
        assert_eq!(outcome["ended"], ended, "{outcome}");
        let tunnel = &tunnel_records(&lab, i + 1)[i];
        assert_eq!(tunnel["ended"], ended, "{tunnel}");
        assert_eq!(tunnel["requests"], 1, "{tunnel}");
        lab.assert_clean(&printed);
    }

    // Mint's shutdown while the socket is open: `shutdown` both.
    let client = spawn_python_client(&[&url, r#"["echo:hi","hold:30"]"#, "--header", auth], &vars);
    wait_for_socket_decisions(&lab, 4);
    std::thread::sleep(Duration::from_millis(500));
    assert!(lab.broker.stop().success());
    let (result, printed) = finish_client(client);
    assert_eq!(result["close"]["code"], 1001, "{printed}");
    let outcome = &lab.socket_outcomes(4)[3];
    assert_eq!(outcome["reason"], "websocket_shutdown", "{outcome}");
    assert_eq!(outcome["ended"], "shutdown", "{outcome}");
    let tunnel = &tunnel_records(&lab, 4)[3];
    assert_eq!(tunnel["ended"], "shutdown", "{tunnel}");
    lab.assert_clean(&printed);
}

/// Holds a socket open through the route with the python client (`hold:30`) and the capability
/// `cap`, runs `act` once the handshake is decided, and returns what the client printed (the
/// socket must have been closed by Mint's side, not held for the 30 seconds).
fn hold_and(lab: &Lab, cap: &str, sockets_before: usize, act: impl FnOnce()) -> (Value, String) {
    let header = format!("Mint-Capability:{cap}");
    let client = spawn_python_client(
        &[
            &lab.route("/socket"),
            r#"["echo:hi","hold:30"]"#,
            "--header",
            &header,
            "--header",
            "Authorization:Bearer {{mint:wsapi}}",
        ],
        &[],
    );
    wait_for_socket_decisions(lab, sockets_before + 1);
    act();
    let (result, printed) = finish_client(client);
    assert_eq!(result["answers"], json!(["hi"]), "{printed}");
    assert_eq!(
        result.get("held"),
        None,
        "the socket stayed open: {printed}"
    );
    (result, printed)
}

/// An outside review: an open WebSocket outlived `mint cap revoke`. Now an open socket's
/// capability is checked every second: revoked, it ends (1008 to the agent, a close to the
/// upstream, `ended: capability_revoked`); expired, the same with `capability_expired`. On the
/// route with Python's `websockets`, and through an intercepted tunnel, whose record says so too.
#[test]
fn issue_21_review_revoking_a_capability_ends_its_open_sockets() {
    let upstream = WsUpstream::start(false);
    let lab = Lab::start(upstream.port, &upstream.ca, false, &[]);
    let (result, printed) = hold_and(&lab, &lab.cap, 0, || {
        lab.home.revoke_capability(&lab.cap);
    });
    assert_eq!(result["close"]["code"], 1008, "{printed}");
    assert_eq!(result["close"]["reason"], "capability revoked", "{printed}");
    let outcome = &lab.socket_outcomes(1)[0];
    assert_eq!(
        outcome["reason"], "websocket_capability_revoked",
        "{outcome}"
    );
    assert_eq!(outcome["ended"], "capability_revoked", "{outcome}");
    assert_eq!(outcome["outcome"], "unknown", "{outcome}");
    // The upstream's side was closed too (it logs a socket when it ends).
    let handshake = &upstream.wait_for_handshakes(1)[0];
    assert_eq!(handshake["received"], json!(["echo:hi"]), "{handshake}");
    lab.assert_clean(&printed);

    // A capability that expires while its socket is open.
    let short = lab.home.issue_capability("mino", &["--ttl", "4s"]);
    // The broker re-reads a changed capabilities file at most every 250 ms (the check just made
    // for the revoked socket counts): a token used sooner is still unknown to it (401).
    std::thread::sleep(Duration::from_millis(600));
    let (result, printed) = hold_and(&lab, &short, 1, || {});
    assert_eq!(result["close"]["code"], 1008, "{printed}");
    let outcome = &lab.socket_outcomes(2)[1];
    assert_eq!(
        outcome["reason"], "websocket_capability_expired",
        "{outcome}"
    );
    assert_eq!(outcome["ended"], "capability_expired", "{outcome}");
    lab.assert_clean(&printed);

    // Through an intercepted tunnel: the tunnel's record ends as its socket did.
    let upstream = WsUpstream::start(true);
    let lab = Lab::start(upstream.port, &upstream.ca, true, &[]);
    let ca = lab.home.path().join("ca.pem");
    let ca = ca.to_str().unwrap().to_owned();
    let proxy = lab.proxy();
    let client = spawn_python_client(
        &[
            &format!("wss://{HOST}:{}/socket", upstream.port),
            r#"["echo:hi","hold:30"]"#,
            "--header",
            "Authorization:Bearer {{mint:wsapi}}",
        ],
        &[("HTTPS_PROXY", &proxy), ("SSL_CERT_FILE", &ca)],
    );
    wait_for_socket_decisions(&lab, 1);
    lab.home.revoke_capability(&lab.cap);
    let (result, printed) = finish_client(client);
    assert_eq!(result.get("held"), None, "{printed}");
    assert_eq!(result["close"]["code"], 1008, "{printed}");
    let outcome = &lab.socket_outcomes(1)[0];
    assert_eq!(outcome["ended"], "capability_revoked", "{outcome}");
    let tunnel = &tunnel_records(&lab, 1)[0];
    assert_eq!(tunnel["ended"], "capability_revoked", "{tunnel}");
    lab.assert_clean(&printed);
    assert!(!lab.broker.audit_text().contains(&lab.cap));
}

/// An outside review: a WebSocket had no maximum lifetime, and a reload that no longer allows
/// its handshake left it open. Now `--max-websocket-lifetime` closes it (1001, `lifetime`), and
/// a reload is checked against every open socket: one the new policy still allows stays open,
/// one it denies closes (1008, `policy_denied`).
#[test]
fn issue_21_review_a_socket_ends_at_its_lifetime_and_when_a_reload_denies_it() {
    let upstream = WsUpstream::start(false);
    let lab = Lab::start(
        upstream.port,
        &upstream.ca,
        false,
        &["--max-websocket-lifetime", "2s"],
    );
    let (result, printed) = hold_and(&lab, &lab.cap, 0, || {});
    assert_eq!(result["close"]["code"], 1001, "{printed}");
    let outcome = &lab.socket_outcomes(1)[0];
    assert_eq!(outcome["reason"], "websocket_lifetime", "{outcome}");
    assert_eq!(outcome["ended"], "lifetime", "{outcome}");
    lab.assert_clean(&printed);
    drop(lab);

    let lab = Lab::start(upstream.port, &upstream.ca, false, &[]);
    let (mut stream, answer) = raw_agent(&lab, "/socket");
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    let replace_policy = |text: &str, reloads: usize| {
        let temp = lab.home.path().join("policy.yaml.new");
        std::fs::write(&temp, text).unwrap();
        std::fs::set_permissions(&temp, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        std::fs::rename(&temp, lab.home.path().join("policy.yaml")).unwrap();
        lab.broker.hangup();
        let deadline = Instant::now() + Duration::from_secs(20);
        while lab
            .broker
            .audit_records()
            .iter()
            .filter(|r| r["reason"] == "policy_reloaded")
            .count()
            < reloads
        {
            assert!(Instant::now() < deadline, "{}", lab.broker.audit_text());
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    // Still allowed (another path besides): the socket goes on.
    replace_policy(
        &ws_policy("http", "127.0.0.1", lab.port, "/socket, /other"),
        1,
    );
    std::thread::sleep(Duration::from_millis(1500));
    stream
        .write_all(&client_frame(0x81, b"echo:still"))
        .unwrap();
    assert_eq!(read_frame(&mut stream), Some((0x81, b"still".to_vec())));
    // No longer allowed: closed with 1008.
    replace_policy(&ws_policy("http", "127.0.0.1", lab.port, "/other"), 2);
    let (first, payload) = read_frame(&mut stream).unwrap();
    assert_eq!(first, 0x88);
    assert_eq!(&payload[..2], &1008u16.to_be_bytes());
    let outcome = &lab.socket_outcomes(1)[0];
    assert_eq!(outcome["reason"], "websocket_policy_denied", "{outcome}");
    assert_eq!(outcome["ended"], "policy_denied", "{outcome}");
    lab.assert_clean(&answer);
}

/// The head of a frame of `len` bytes (at least 65,536), masked with `key` or not.
fn big_head(first: u8, len: u64, key: Option<[u8; 4]>) -> Vec<u8> {
    let mut head = vec![first, if key.is_some() { 0x80 | 127 } else { 127 }];
    head.extend_from_slice(&len.to_be_bytes());
    if let Some(key) = key {
        head.extend_from_slice(&key);
    }
    head
}

/// `VmRSS` and `VmHWM` of `pid`, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap()
            .parse()
            .unwrap()
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// An outside review: a socket's memory was about 3.5 x `--max-websocket-message` (the frame
/// read whole, a scrubbed copy, an output buffer; the agent's frame and an unmasked copy), not
/// the documented 2 x. Now an upstream frame is scrubbed as it arrives and written without a
/// copy, and an agent frame is searched for the token a window at a time. A measurement, run by
/// hand (`--ignored`, the figures go to stderr and docs/security.md): 8 sockets each holding a
/// message of the largest size less one byte, both ways, cost at most 2.5 x the bound each.
#[test]
#[ignore = "a memory measurement: run by hand with --ignored"]
fn issue_21_review_memory_per_socket_holding_the_largest_messages() {
    const SOCKETS: usize = 8;
    const MAX: u64 = 4 << 20;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let upstream = std::thread::spawn(move || {
        let mut held = Vec::new();
        for _ in 0..SOCKETS {
            let (mut stream, _) = listener.accept().unwrap();
            read_head(&mut stream);
            let mut out = format!("{SWITCHING}\r\n").into_bytes();
            out.extend(big_head(0x82, MAX, None));
            out.extend(std::iter::repeat_n(b'u', (MAX - 1) as usize));
            stream.write_all(&out).unwrap();
            held.push(stream);
        }
        held
    });
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    mint_broker::demo::echo_upstream::TestCa::generate()
        .unwrap()
        .write_pem(&ca)
        .unwrap();
    let lab = Lab::start(port, &ca, false, &["--max-websocket-message", "4MiB"]);
    let pid = lab.broker.pid().unwrap();
    let (before, _) = memory_kib(pid);
    let key = [0x11u8, 0x22, 0x33, 0x44];
    let mut agents = Vec::new();
    for _ in 0..SOCKETS {
        let (mut stream, answer) = raw_agent(&lab, "/socket");
        assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
        let mut frame = big_head(0x82, MAX, Some(key));
        frame.extend(
            std::iter::repeat_n(b'a', (MAX - 1) as usize)
                .zip(key.iter().cycle())
                .map(|(b, k)| b ^ k),
        );
        stream.write_all(&frame).unwrap();
        agents.push(stream);
    }
    let mut held = upstream.join().unwrap();
    // Let Mint read everything that was sent (a hang guard: RSS stops growing).
    let mut last = 0;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(200));
        let (rss, _) = memory_kib(pid);
        if rss == last {
            break;
        }
        last = rss;
    }
    let (rss, _) = memory_kib(pid);
    // Then the last byte each way: every frame completes, is scrubbed or searched, and relayed.
    for stream in &mut held {
        stream.write_all(b"u").unwrap();
    }
    for agent in &mut agents {
        agent
            .write_all(&[b'a' ^ key[((MAX - 1) % 4) as usize]])
            .unwrap();
    }
    for agent in &mut agents {
        let mut head = [0u8; 10];
        agent.read_exact(&mut head).unwrap();
        let mut payload = vec![0u8; MAX as usize];
        agent.read_exact(&mut payload).unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    let (_, hwm) = memory_kib(pid);
    let per_socket = |kib: u64| (kib.saturating_sub(before) as f64 * 1024.0) / SOCKETS as f64;
    let (held_ratio, peak_ratio) = (per_socket(rss) / MAX as f64, per_socket(hwm) / MAX as f64);
    let _ = writeln!(
        std::io::stderr(),
        "memory: {SOCKETS} sockets, max {MAX} bytes: RSS {before} KiB before, {rss} KiB holding (x{held_ratio:.2} the bound a socket), peak {hwm} KiB once the frames completed (x{peak_ratio:.2})"
    );
    assert!(held_ratio < 2.5, "{held_ratio:.2} x the bound a socket");
    assert!(
        peak_ratio < 3.0,
        "{peak_ratio:.2} x the bound a socket at the peak"
    );
    lab.assert_clean("");
}
