//! HTTPS interception (issue 15): unmodified clients open `CONNECT` tunnels through the real
//! `mint serve`, which terminates their TLS with a leaf of its own CA and runs every request
//! inside through the pipeline, toward a local HTTPS echo upstream pinned with `--resolve` to the
//! name `api.example.test`. A canary secret must reach the upstream and never the client, the
//! audit log or Mint's stderr.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use mint_tests::broker::{CA_VARIABLES, MintHome, curl_via_proxy_as, curl_via_proxy_command};
use mint_tests::interception::{CANARY, HOST, Setup, open_tunnel};

#[test]
fn issue_15_curl_over_http1_and_http2_through_an_intercepted_tunnel() {
    let setup = Setup::start();
    let ca = setup.ca();
    for version in ["--http1.1", "--http2"] {
        let response = curl_via_proxy_as(
            version,
            &setup.proxy(),
            &[
                "--cacert",
                ca.to_str().unwrap(),
                "-H",
                "Authorization: Bearer {{mint:echo}}",
                &setup.url("/echo?x=1"),
            ],
        );
        assert_eq!(response.exit, 0, "{version}: {response:?}");
        assert_eq!(response.status, 200, "{version}: {}", response.body);
        assert!(
            response.body.contains("[mint:redacted]"),
            "{version}: {}",
            response.body
        );
        let upstream = setup.peer.server.requests().last().unwrap();
        assert_eq!(
            upstream.header("authorization"),
            Some(format!("Bearer {CANARY}").as_str())
        );
        assert!(upstream.header("proxy-authorization").is_none());
        assert!(upstream.header("mint-capability").is_none());
        let id = response.header("mint-request-id").unwrap().to_owned();
        let decision = setup.broker.decision_of(&id);
        assert_eq!(decision["decision"], "allow", "{decision}");
        assert_eq!(decision["host"], HOST, "{decision}");
        assert_eq!(decision["agent"], "mino", "{decision}");
        assert_eq!(setup.broker.outcome_of(&id)["outcome"], "completed");
        setup.assert_no_canary(&response.everything());
    }
    // Each tunnel was opened and recorded.
    let opened = setup.records_with_reason("tunnel_opened");
    assert_eq!(opened.len(), 2, "{opened:?}");
    assert!(
        opened
            .iter()
            .all(|r| r["method"] == "CONNECT" && r["status"] == 200)
    );
}

#[test]
fn issue_15_connect_without_a_valid_capability_is_407_and_audited() {
    let setup = Setup::start();
    let port = setup.port();
    for auth in [
        String::new(),
        "Proxy-Authorization: Basic YWdlbnQ6d3Jvbmc=\r\n".to_owned(),
        "Proxy-Authorization: Bearer mint_cap_nope_nope\r\n".to_owned(),
    ] {
        let request =
            format!("CONNECT {HOST}:{port} HTTP/1.1\r\nHost: {HOST}:{port}\r\n{auth}\r\n");
        let answer = mint_tests::broker::parse_raw_answer(&mint_tests::broker::raw_exchange(
            setup.broker.addr(),
            request.as_bytes(),
            false,
        ));
        assert_eq!(answer.status, 407, "{answer:?}");
        assert_eq!(
            answer.header("proxy-authenticate"),
            Some("Basic realm=\"mint\"")
        );
        assert_eq!(answer.json()["error"]["code"], "capability_invalid");
    }
    let refused = setup.records_with_reason("proxy_auth_required");
    let decisions = refused.iter().filter(|r| r["phase"] == "decision").count();
    assert_eq!(decisions, 3, "{refused:?}");
    // curl says so too, and nothing reached the upstream.
    let output = curl_via_proxy_command("--http1.1", &format!("http://{}", setup.broker.addr()))
        .args([
            "--cacert",
            setup.ca().to_str().unwrap(),
            &setup.url("/echo"),
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("407"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(setup.peer.server.requests().is_empty());
}

#[test]
fn issue_15_a_host_no_rule_or_alias_names_is_refused_before_the_tunnel() {
    let setup = Setup::start();
    let port = setup.port();
    let request = format!(
        "CONNECT other.example.test:{port} HTTP/1.1\r\nHost: other.example.test:{port}\r\nProxy-Authorization: Bearer {}\r\n\r\n",
        setup.cap
    );
    let answer = mint_tests::broker::parse_raw_answer(&mint_tests::broker::raw_exchange(
        setup.broker.addr(),
        request.as_bytes(),
        false,
    ));
    assert_eq!(answer.status, 403, "{answer:?}");
    assert_eq!(answer.json()["error"]["code"], "policy_denied");
    let id = answer.header("mint-request-id").unwrap().to_owned();
    let decision = setup.broker.decision_of(&id);
    assert_eq!(decision["method"], "CONNECT");
    assert_eq!(decision["host"], "other.example.test");
    assert_eq!(decision["reason"], "no_allow_rule");
    // Not authority-form: 400.
    for target in [HOST.to_owned(), format!("https://{HOST}:{port}/")] {
        let request = format!(
            "CONNECT {target} HTTP/1.1\r\nHost: {HOST}\r\nProxy-Authorization: Bearer {}\r\n\r\n",
            setup.cap
        );
        let answer = mint_tests::broker::parse_raw_answer(&mint_tests::broker::raw_exchange(
            setup.broker.addr(),
            request.as_bytes(),
            false,
        ));
        assert_eq!(answer.status, 400, "{target}: {answer:?}");
    }
    assert!(setup.peer.server.requests().is_empty());
}

#[test]
fn issue_15_a_host_header_naming_another_host_is_421_and_nothing_is_sent() {
    let setup = Setup::start();
    let ca = setup.ca();
    let response = curl_via_proxy_as(
        "--http1.1",
        &setup.proxy(),
        &[
            "--cacert",
            ca.to_str().unwrap(),
            "-H",
            "Host: other.example.test",
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            &setup.url("/echo"),
        ],
    );
    assert_eq!(response.status, 421, "{response:?}");
    assert_eq!(response.json()["error"]["code"], "misdirected_request");
    assert!(setup.peer.server.requests().is_empty());
    setup.assert_no_canary(&response.everything());
}

/// Opens a tunnel by hand and returns the socket after the `200`.
#[test]
fn issue_15_plain_http_inside_a_tunnel_closes_it_unanswered() {
    let setup = Setup::start();
    let mut stream = open_tunnel(&setup);
    stream
        .write_all(b"GET /echo HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
        .unwrap();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    assert!(
        !String::from_utf8_lossy(&rest).contains("HTTP/1.1"),
        "no HTTP answer: {rest:?}"
    );
    setup.wait_for_reason("not_tls");
    assert!(setup.peer.server.requests().is_empty());
}

/// `openssl s_client` through the tunnel with `servername`; returns its output.
fn s_client(setup: &Setup, servername: &str) -> String {
    let mut command = Command::new("openssl");
    for variable in CA_VARIABLES {
        command.env_remove(variable);
    }
    let output = command
        .args(["s_client", "-showcerts", "-connect"])
        .arg(format!("{HOST}:{}", setup.port()))
        .args(["-proxy", setup.broker.addr(), "-proxy_user", "agent"])
        .args(["-proxy_pass", &format!("pass:{}", setup.cap)])
        .args(["-servername", servername, "-CAfile"])
        .arg(setup.ca())
        .args(["-verify_return_error", "-alpn", "http/1.1"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn issue_15_the_leaf_read_by_openssl_and_a_wrong_sni_refused() {
    let setup = Setup::start();
    let output = s_client(&setup, HOST);
    assert!(output.contains("Verify return code: 0 (ok)"), "{output}");
    let certs: Vec<&str> = output
        .split("-----BEGIN CERTIFICATE-----")
        .skip(1)
        .map(|c| c.split("-----END CERTIFICATE-----").next().unwrap())
        .collect();
    assert_eq!(certs.len(), 2, "a chain of two: {output}");
    let dir = tempfile::tempdir().unwrap();
    let leaf = dir.path().join("leaf.pem");
    std::fs::write(
        &leaf,
        format!(
            "-----BEGIN CERTIFICATE-----{}-----END CERTIFICATE-----\n",
            certs[0]
        ),
    )
    .unwrap();
    let text = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&leaf)
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("X509v3 Authority Key Identifier"), "{text}");
    let san = text
        .split("X509v3 Subject Alternative Name:")
        .nth(1)
        .and_then(|rest| rest.lines().nth(1))
        .unwrap()
        .trim();
    assert_eq!(san, format!("DNS:{HOST}"), "{text}");
    assert!(text.contains("CA:FALSE"), "{text}");
    assert!(text.contains("TLS Web Server Authentication"), "{text}");
    // Valid now, and no longer than a day.
    let checkend = |seconds: u64| {
        Command::new("openssl")
            .args(["x509", "-noout", "-checkend", &seconds.to_string(), "-in"])
            .arg(&leaf)
            .status()
            .unwrap()
            .success()
    };
    assert!(checkend(0));
    assert!(!checkend(24 * 3600));

    // Another SNI than the CONNECT host: the handshake fails with an alert, audited.
    let output = s_client(&setup, "evil.example.test");
    assert!(output.contains("no peer certificate available"), "{output}");
    assert!(output.contains("alert access denied"), "{output}");
    setup.wait_for_reason("sni_mismatch");
    let refused = setup.records_with_reason("sni_mismatch");
    let decision = refused.iter().find(|r| r["phase"] == "decision").unwrap();
    assert_eq!(decision["decision"], "deny", "{decision}");
    assert_eq!(decision["host"], HOST, "{decision}");
    assert_eq!(decision["agent"], "mino", "{decision}");
    assert!(setup.peer.server.requests().is_empty());
}

#[test]
fn issue_15_a_client_trusting_another_ca_gets_no_tunnel_and_nothing_is_sent() {
    let setup = Setup::start();
    // The upstream's CA is not Mint's: curl refuses the leaf, and there is no fallback.
    let output = curl_via_proxy_command("--http1.1", &setup.proxy())
        .args(["--cacert"])
        .arg(&setup.peer.ca_file)
        .args([
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            &setup.url("/echo"),
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    setup.wait_for_reason("tls_handshake_failed");
    assert!(setup.peer.server.requests().is_empty());
}

#[test]
fn issue_15_a_capability_revoked_while_the_tunnel_stays_open_refuses_the_next_request() {
    let setup = Setup::start();
    let script = format!(
        r#"
import os, sys, requests
s = requests.Session()
proxies = {{"https": "{proxy}"}}
url = "{url}"
headers = {{"Authorization": "Bearer {{{{mint:echo}}}}"}}
first = s.get(url, proxies=proxies, headers=headers, verify="{ca}", timeout=20)
print(first.status_code, flush=True)
sys.stdin.readline()
second = s.get(url, proxies=proxies, headers=headers, verify="{ca}", timeout=20)
print(second.status_code, second.json()["error"]["code"], flush=True)
"#,
        proxy = setup.proxy(),
        url = setup.url("/echo"),
        ca = setup.ca().display(),
    );
    let python = mint_tests::repo_root().join(".venv/bin/python");
    let mut command = Command::new(&python);
    for variable in CA_VARIABLES {
        command.env_remove(variable);
    }
    for variable in [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "NO_PROXY",
        "no_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        command.env_remove(variable);
    }
    let mut child = command
        .args(["-c", &script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert_eq!(line.trim(), "200", "first request: {line}");
    assert_eq!(setup.peer.server.requests().len(), 1);
    setup.home.revoke_capability(&setup.cap);
    // The broker sees a revocation within a second.
    std::thread::sleep(Duration::from_millis(1500));
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        rest.trim(),
        "401 capability_invalid",
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        setup.peer.server.requests().len(),
        1,
        "nothing more was sent"
    );
    setup.assert_no_canary(&rest);
}

/// A TLS server on `127.0.0.1:0` presenting the certificate of `config`: it counts finished
/// handshakes and keeps every request head it reads, answering each `200 ok`. The upstream a
/// test needs when the leaf must be one of Mint's own CA. Dropping it stops the thread.
struct TlsUpstream {
    port: u16,
    handshakes: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    requests: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TlsUpstream {
    fn start(config: std::sync::Arc<rustls::ServerConfig>) -> TlsUpstream {
        use std::sync::atomic::Ordering;
        use std::sync::{Arc, Mutex};

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let handshakes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let (handshakes, requests, stop) = (
                Arc::clone(&handshakes),
                Arc::clone(&requests),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                    let connection = rustls::ServerConnection::new(Arc::clone(&config)).unwrap();
                    let mut tls = rustls::StreamOwned::new(connection, stream);
                    let mut handshake_done = true;
                    while tls.conn.is_handshaking() {
                        if tls.conn.complete_io(&mut tls.sock).is_err() {
                            handshake_done = false;
                            break;
                        }
                    }
                    if !handshake_done {
                        continue;
                    }
                    handshakes.fetch_add(1, Ordering::SeqCst);
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tls.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    requests
                        .lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&head).into_owned());
                    let _ = tls.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    );
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                }
            })
        };
        TlsUpstream {
            port,
            handshakes,
            requests,
            stop,
            thread: Some(thread),
        }
    }

    fn handshakes(&self) -> usize {
        self.handshakes.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for TlsUpstream {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[test]
fn issue_15_mint_never_trusts_its_own_ca_upstream_even_through_ssl_cert_file_and_dir() {
    let dir = tempfile::tempdir().unwrap();
    let aliases =
        format!("aliases:\n  - name: echo\n    hosts: [{HOST}]\n    source: file:$SECRETS/echo\n");
    let home = MintHome::new(
        "version: 1\ndefault: deny\nrules: []\n",
        &aliases,
        &[("echo", CANARY)],
    );
    // Mint's CA, made by the real command, then an upstream presenting a leaf of it for HOST:
    // the very leaf Mint would give an agent.
    let rotated = home.mint().args(["ca", "rotate"]).output().unwrap();
    assert!(rotated.status.success(), "{rotated:?}");
    let ca_pem = std::fs::read_to_string(home.path().join("ca.pem")).unwrap();
    let key_pem = std::fs::read_to_string(home.path().join("ca.key")).unwrap();
    let now = std::time::SystemTime::now();
    let ca = mint_broker::net::ca::CertificateAuthority::from_pem(&ca_pem, &key_pem, now).unwrap();
    let (config, _) = ca.server_config(HOST, now).unwrap();
    let upstream = TlsUpstream::start(config);
    let port = upstream.port;
    home.write_private(
        "policy.yaml",
        &format!(
            "version: 1\ndefault: deny\nrules:\n  - id: echo-all\n    effect: allow\n    match:\n      alias: [echo]\n      host: [{HOST}]\n      port: [{port}]\n      method: [GET]\n"
        ),
    );
    // The leaf is good for a client that trusts Mint's CA: curl straight to the upstream.
    let pin = format!("{HOST}:{port}:127.0.0.1");
    let ca_file = home.path().join("ca.pem");
    let direct = mint_tests::broker::curl(&[
        "--resolve",
        &pin,
        "--cacert",
        ca_file.to_str().unwrap(),
        &format!("https://{HOST}:{port}/direct"),
    ]);
    assert_eq!((direct.exit, direct.status), (0, 200), "{direct:?}");
    assert_eq!(upstream.handshakes(), 1);

    // Mint's environment points at bundles holding its CA: `mint ca export --bundle` as the
    // file, and a hashed directory (what OpenSSL and rustls-native-certs read).
    let bundle = dir.path().join("bundle.pem");
    let exported = home
        .mint()
        .args(["ca", "export", "--bundle"])
        .output()
        .unwrap();
    assert!(exported.status.success(), "{exported:?}");
    assert!(String::from_utf8_lossy(&exported.stdout).contains(ca_pem.trim()));
    std::fs::write(&bundle, &exported.stdout).unwrap();
    let cert_dir = dir.path().join("certs");
    std::fs::create_dir(&cert_dir).unwrap();
    let hash = Command::new("openssl")
        .args(["x509", "-hash", "-noout", "-in"])
        .arg(&ca_file)
        .output()
        .unwrap();
    let hash = String::from_utf8(hash.stdout).unwrap();
    std::fs::write(cert_dir.join(format!("{}.0", hash.trim())), &ca_pem).unwrap();
    // An unrelated CA as `--upstream-ca`: nothing Mint is told to trust holds its own.
    let other_ca = mint_broker::demo::echo_upstream::TestCa::generate().unwrap();
    let other_ca_file = dir.path().join("other-ca.pem");
    other_ca.write_pem(&other_ca_file).unwrap();
    let cap = home.issue_capability("mino", &[]);
    let broker = home.serve_with_env(
        &other_ca_file,
        &["--resolve", &pin],
        &[
            ("SSL_CERT_FILE", bundle.as_os_str()),
            ("SSL_CERT_DIR", cert_dir.as_os_str()),
        ],
    );
    let response = curl_via_proxy_as(
        "--http1.1",
        &format!("http://agent:{cap}@{}", broker.addr()),
        &[
            "--cacert",
            ca_file.to_str().unwrap(),
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            &format!("https://{HOST}:{port}/through-mint"),
        ],
    );
    assert_eq!(response.status, 502, "{response:?}");
    assert_eq!(response.json()["error"]["code"], "upstream_failed");
    let id = response.header("mint-request-id").unwrap().to_owned();
    assert_eq!(broker.decision_of(&id)["decision"], "allow");
    let outcome = broker.outcome_of(&id);
    assert_eq!(outcome["status"], 502, "{outcome}");
    assert_eq!(outcome["reason"], "upstream_failed", "{outcome}");
    assert!(
        broker
            .stderr()
            .contains("the certificate's issuer is not trusted"),
        "{}",
        broker.stderr()
    );
    // No handshake finished, so no byte of the request (nor the secret) left Mint.
    assert_eq!(upstream.handshakes(), 1, "only curl's own handshake");
    assert_eq!(upstream.requests().len(), 1);
    assert!(!response.everything().contains(CANARY));
    broker.assert_secret_absent(CANARY);
}

/// The proxy variables a client could pick up from the machine.
const PROXY_VARIABLES: [&str; 8] = [
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// Runs `tests/python/https_interception_client.py ARGS` under `env -u` of every CA and proxy
/// variable, given only `vars`; returns its JSON and everything it printed.
fn python_client(args: &[&str], vars: &[(&str, &str)]) -> (serde_json::Value, String) {
    let mut command = Command::new("env");
    for variable in CA_VARIABLES.iter().chain(PROXY_VARIABLES.iter()) {
        command.args(["-u", variable]);
    }
    for (name, value) in vars {
        command.arg(format!("{name}={value}"));
    }
    let script = mint_tests::repo_root().join("tests/python/https_interception_client.py");
    let output = command
        .arg(mint_tests::repo_root().join(".venv/bin/python"))
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    let everything = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let json = if output.status.success() {
        serde_json::from_slice(&output.stdout).unwrap()
    } else {
        serde_json::Value::Null
    };
    (json, everything)
}

/// Runs the hand-made tunnel of `https_interception_client.py tunnel` with `steps` and the
/// set-up's capability; returns each step's answer and everything the client printed.
fn tunnel_client(setup: &Setup, steps: &serde_json::Value) -> (Vec<serde_json::Value>, String) {
    let ca = setup.ca();
    let (json, everything) = python_client(
        &[
            "tunnel",
            "--proxy",
            setup.broker.addr(),
            "--target",
            &format!("{HOST}:{}", setup.port()),
            "--cafile",
            ca.to_str().unwrap(),
            &steps.to_string(),
        ],
        &[("MINT_CAPABILITY", &setup.cap)],
    );
    let answers = json
        .as_array()
        .cloned()
        .unwrap_or_else(|| panic!("{everything}"));
    (answers, everything)
}

#[test]
fn issue_15_requests_and_httpx_configured_by_their_environment_alone() {
    let setup = Setup::start();
    let ca = setup.ca();
    let ca = ca.to_str().unwrap();
    let proxy = setup.proxy();
    let url = setup.url("/echo?client=env");
    for (client, ca_variable) in [
        ("requests", "REQUESTS_CA_BUNDLE"),
        ("httpx", "SSL_CERT_FILE"),
    ] {
        let before = setup.peer.server.requests().len();
        // Without the CA variable the client trusts its default store, refuses Mint's leaf and
        // sends nothing: the variable is what makes it trust Mint.
        let (json, everything) = python_client(&[client, &url], &[("HTTPS_PROXY", &proxy)]);
        assert!(
            json.is_null(),
            "{client} without {ca_variable}: {everything}"
        );
        assert!(
            everything.contains("CERTIFICATE_VERIFY_FAILED"),
            "{client}: {everything}"
        );
        assert_eq!(setup.peer.server.requests().len(), before);

        let (json, everything) = python_client(
            &[client, &url],
            &[("HTTPS_PROXY", &proxy), (ca_variable, ca)],
        );
        assert_eq!(json["status"], 200, "{client}: {everything}");
        let body = json["body"].as_str().unwrap();
        assert!(body.contains("[mint:redacted]"), "{client}: {body}");
        let upstream = setup.peer.server.requests();
        assert_eq!(upstream.len(), before + 1, "{client}");
        let last = upstream.last().unwrap();
        assert_eq!(
            last.header("authorization"),
            Some(format!("Bearer {CANARY}").as_str())
        );
        assert!(last.header("proxy-authorization").is_none());
        let id = json["headers"]["mint-request-id"]
            .as_str()
            .or_else(|| json["headers"]["Mint-Request-Id"].as_str())
            .unwrap_or_else(|| panic!("{client}: {everything}"))
            .to_owned();
        let decision = setup.broker.decision_of(&id);
        assert_eq!(decision["decision"], "allow", "{decision}");
        assert_eq!(decision["agent"], "mino", "{decision}");
        assert_eq!(decision["host"], HOST, "{decision}");
        setup.assert_no_canary(&everything);
    }
    // Both went through tunnels; the refused handshakes are audited too.
    assert_eq!(setup.records_with_reason("tunnel_opened").len(), 4);
    setup.wait_for_reason("tls_handshake_failed");
}

#[test]
fn issue_15_python_ssl_with_verify_x509_strict_accepts_the_leaf() {
    let setup = Setup::start();
    let steps = serde_json::json!([
        {"path": "/echo?client=strict", "headers": {"Authorization": "Bearer {{mint:echo}}"}}
    ]);
    let (answers, everything) = tunnel_client(&setup, &steps);
    assert_eq!(answers.len(), 1, "{everything}");
    assert_eq!(answers[0]["status"], 200, "{everything}");
    assert!(
        answers[0]["body"]
            .as_str()
            .unwrap()
            .contains("[mint:redacted]"),
        "{everything}"
    );
    assert_eq!(
        setup
            .peer
            .server
            .requests()
            .last()
            .unwrap()
            .header("authorization"),
        Some(format!("Bearer {CANARY}").as_str())
    );
    setup.assert_no_canary(&everything);
}

/// The `Mint-Request-Id` of a client's answer (header names in any case).
fn request_id(answer: &serde_json::Value) -> String {
    answer["headers"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("mint-request-id"))
        .and_then(|(_, value)| value.as_str())
        .unwrap_or_else(|| panic!("no Mint-Request-Id: {answer}"))
        .to_owned()
}

#[test]
fn issue_15_a_second_request_naming_another_host_on_a_kept_alive_tunnel_is_421() {
    let setup = Setup::start();
    let auth = serde_json::json!({"Authorization": "Bearer {{mint:echo}}"});
    let steps = serde_json::json!([
        {"path": "/echo?n=1", "headers": auth},
        {"path": "/echo?n=2", "headers": {
            "Host": "other.example.test",
            "Authorization": "Bearer {{mint:echo}}",
        }},
    ]);
    let (answers, everything) = tunnel_client(&setup, &steps);
    assert_eq!(answers.len(), 2, "{everything}");
    assert_eq!(answers[0]["status"], 200, "{everything}");
    assert_eq!(answers[1]["status"], 421, "{everything}");
    let error: serde_json::Value =
        serde_json::from_str(answers[1]["body"].as_str().unwrap()).unwrap();
    assert_eq!(error["error"]["code"], "misdirected_request");
    // One tunnel, one request sent: the second never reached the upstream.
    assert_eq!(setup.records_with_reason("tunnel_opened").len(), 1);
    assert_eq!(setup.peer.server.requests().len(), 1);
    let decision = setup.broker.decision_of(&request_id(&answers[1]));
    assert_eq!(decision["decision"], "deny", "{decision}");
    assert_eq!(decision["agent"], "mino", "{decision}");
    setup.assert_no_canary(&everything);
}

#[test]
fn issue_15_a_placeholder_of_an_alias_bound_elsewhere_is_403_inside_a_tunnel() {
    let setup = Setup::start();
    let steps = serde_json::json!([
        {"path": "/echo", "headers": {"Authorization": "Bearer {{mint:elsewhere}}"}},
    ]);
    let (answers, everything) = tunnel_client(&setup, &steps);
    assert_eq!(answers.len(), 1, "{everything}");
    assert_eq!(answers[0]["status"], 403, "{everything}");
    let error: serde_json::Value =
        serde_json::from_str(answers[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(error["error"]["code"], "alias_not_bound", "{error}");
    assert!(setup.peer.server.requests().is_empty());
    let decision = setup.broker.decision_of(&request_id(&answers[0]));
    assert_eq!(decision["decision"], "deny", "{decision}");
    assert_eq!(decision["host"], HOST, "{decision}");
    setup.assert_no_canary(&everything);
}

#[test]
fn issue_15_a_capability_that_expires_while_the_tunnel_stays_open_refuses_the_next_request() {
    let setup = Setup::start_with_capability(&["--ttl", "2s"]);
    let auth = serde_json::json!({"Authorization": "Bearer {{mint:echo}}"});
    let steps = serde_json::json!([
        {"path": "/echo?n=1", "headers": auth},
        {"path": "/echo?n=2", "headers": auth, "sleep": 2.5},
    ]);
    let (answers, everything) = tunnel_client(&setup, &steps);
    assert_eq!(answers.len(), 2, "{everything}");
    assert_eq!(answers[0]["status"], 200, "{everything}");
    assert_eq!(answers[1]["status"], 401, "{everything}");
    let error: serde_json::Value =
        serde_json::from_str(answers[1]["body"].as_str().unwrap()).unwrap();
    assert_eq!(error["error"]["code"], "capability_invalid", "{error}");
    // The same tunnel, and only the first request was sent.
    assert_eq!(setup.records_with_reason("tunnel_opened").len(), 1);
    assert_eq!(setup.peer.server.requests().len(), 1);
    let decision = setup.broker.decision_of(&request_id(&answers[1]));
    assert_eq!(decision["decision"], "deny", "{decision}");
    setup.assert_no_canary(&everything);
}

#[test]
fn issue_15_a_second_http2_stream_naming_another_authority_is_421() {
    let setup = Setup::start();
    let ca = setup.ca();
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    let proxy = setup.proxy();
    let transfer = |out: &std::path::Path, host: Option<&str>, path: &str| {
        let mut args: Vec<String> = [
            "-sS",
            "--http2",
            "--suppress-connect-headers",
            "-x",
            &proxy,
            "--cacert",
            ca.to_str().unwrap(),
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            "-w",
            "%{http_code} %{http_version} %{num_connects}\\n",
            "-o",
            out.to_str().unwrap(),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        if let Some(host) = host {
            // curl sends it as the stream's `:authority`.
            args.extend(["-H".to_owned(), format!("Host: {host}")]);
        }
        args.push(setup.url(path));
        args
    };
    // Two transfers in one curl: the second reuses the first's tunnel and HTTP/2 connection.
    let mut command = curl_via_proxy_command("--http2", &proxy);
    command.args(transfer(&first, None, "/echo?n=1"));
    command.arg("--next");
    command.args(transfer(&second, Some("other.example.test"), "/echo?n=2"));
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines, ["200 2 1", "421 2 0"], "{stdout} {stderr}");
    let body = std::fs::read_to_string(&second).unwrap();
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"]["code"], "misdirected_request", "{error}");
    assert_eq!(setup.records_with_reason("tunnel_opened").len(), 1);
    assert_eq!(setup.peer.server.requests().len(), 1);
    let denied: Vec<_> = setup
        .broker
        .audit_records()
        .into_iter()
        .filter(|r| r["phase"] == "decision" && r["decision"] == "deny")
        .collect();
    assert_eq!(denied.len(), 1, "{denied:?}");
    let everything = format!(
        "{stdout}{stderr}{}{body}",
        std::fs::read_to_string(&first).unwrap()
    );
    setup.assert_no_canary(&everything);
}
