//! The echo upstream (`mint_broker::demo::echo_upstream`) talked to directly, with a rustls client
//! (raw HTTP/1.1 over tokio-rustls, and hyper's HTTP/2 client) and with curl: certificate checks
//! for `localhost` and `127.0.0.1`, ALPN, every route's behaviour, recording, and shutdown.

#![expect(clippy::unwrap_used, reason = "test helpers")]

use std::io::{self, Read as _};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use mint_broker::demo::echo_upstream::{
    BlockingEchoUpstream, EchoConfig, EchoUpstream, TestCa, Transport,
};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const CANARY: &str = "mint-canary-7f3a9c21e8b4";
const SHORT: Duration = Duration::from_millis(300);

// ---------------------------------------------------------------------------------------------
// A minimal HTTP/1.1 client that reads with small reads, so chunk boundaries stay visible.

struct Head {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn content_length(&self) -> Option<usize> {
        self.header("content-length").map(|v| v.parse().unwrap())
    }
}

struct Client<S> {
    stream: S,
    buf: Vec<u8>,
    read_size: usize,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    fn new(stream: S, read_size: usize) -> Self {
        Self {
            stream,
            buf: Vec::new(),
            read_size,
        }
    }

    async fn send(&mut self, method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]) {
        let mut request = format!(
            "{method} {target} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        self.stream.write_all(request.as_bytes()).await.unwrap();
        self.stream.write_all(body).await.unwrap();
        self.stream.flush().await.unwrap();
    }

    /// One read of at most `read_size` bytes; EOF is an error.
    async fn fill(&mut self) -> io::Result<()> {
        let mut tmp = vec![0; self.read_size];
        let n = self.stream.read(&mut tmp).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(())
    }

    async fn head(&mut self) -> io::Result<Head> {
        loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                let text = String::from_utf8(self.buf.drain(..end + 4).collect()).unwrap();
                let mut lines = text.split("\r\n");
                let status = lines.next().unwrap().split(' ').nth(1).unwrap();
                let headers = lines
                    .filter(|l| !l.is_empty())
                    .map(|l| {
                        let (n, v) = l.split_once(':').unwrap();
                        (n.trim().to_ascii_lowercase(), v.trim().to_owned())
                    })
                    .collect();
                return Ok(Head {
                    status: status.parse().unwrap(),
                    headers,
                });
            }
            self.fill().await?;
        }
    }

    async fn take(&mut self, n: usize) -> io::Result<Vec<u8>> {
        while self.buf.len() < n {
            self.fill().await?;
        }
        Ok(self.buf.drain(..n).collect())
    }

    async fn line(&mut self) -> io::Result<String> {
        loop {
            if let Some(end) = find(&self.buf, b"\r\n") {
                let line = self.buf.drain(..end + 2).collect::<Vec<u8>>();
                return Ok(String::from_utf8(line[..end].to_vec()).unwrap());
            }
            self.fill().await?;
        }
    }

    /// The next chunk of a chunked body; `None` after the last one.
    async fn chunk(&mut self) -> io::Result<Option<Vec<u8>>> {
        let size = usize::from_str_radix(self.line().await?.trim(), 16).unwrap();
        if size == 0 {
            assert_eq!(self.line().await?, "", "no trailers expected");
            return Ok(None);
        }
        let data = self.take(size).await?;
        assert_eq!(self.take(2).await?, b"\r\n");
        Ok(Some(data))
    }

    /// The whole body: by Content-Length, or every chunk (returned separately too).
    async fn body(&mut self, head: &Head) -> io::Result<(Vec<u8>, Vec<Vec<u8>>)> {
        if head.header("transfer-encoding") == Some("chunked") {
            let mut chunks = Vec::new();
            while let Some(chunk) = self.chunk().await? {
                chunks.push(chunk);
            }
            return Ok((chunks.concat(), chunks));
        }
        let body = self.take(head.content_length().unwrap_or(0)).await?;
        Ok((body, Vec::new()))
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    find(haystack, needle.as_bytes()).is_some()
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

async fn tls(upstream: &EchoUpstream, name: &str, alpn: &[&[u8]]) -> io::Result<Tls> {
    let config = upstream.ca().client_config_with_alpn(alpn).unwrap();
    let tcp = TcpStream::connect(upstream.addr()).await?;
    let name = ServerName::try_from(name.to_owned()).unwrap();
    TlsConnector::from(config).connect(name, tcp).await
}

async fn client(upstream: &EchoUpstream, read_size: usize) -> Client<Tls> {
    Client::new(
        tls(upstream, "localhost", &[b"http/1.1"]).await.unwrap(),
        read_size,
    )
}

/// One request on a new connection; the answer's head and whole body.
async fn exchange(
    upstream: &EchoUpstream,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (Head, Vec<u8>) {
    let mut client = client(upstream, 4096).await;
    client.send(method, target, headers, body).await;
    let head = client.head().await.unwrap();
    let (body, _) = client.body(&head).await.unwrap();
    (head, body)
}

async fn start(config: EchoConfig) -> EchoUpstream {
    EchoUpstream::start(config).await.unwrap()
}

fn json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body).unwrap()
}

// ---------------------------------------------------------------------------------------------
// curl, against the blocking server.

fn ca_file(dir: &tempfile::TempDir, ca: &TestCa) -> PathBuf {
    let path = dir.path().join("ca.pem");
    ca.write_pem(&path).unwrap();
    path
}

/// Runs curl; its exit code and stdout.
fn curl(args: &[&str]) -> (i32, String) {
    let output = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "5"])
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
    )
}

#[test]
fn curl_verifies_the_certificate_for_localhost_and_127_0_0_1() {
    let upstream = BlockingEchoUpstream::start(EchoConfig::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = ca_file(&dir, upstream.ca());
    let ca = ca.to_str().unwrap();
    let auth = format!("Authorization: Bearer {CANARY}");
    for host in ["localhost", "127.0.0.1"] {
        let url = upstream.endpoint().url_with_host(host, "/echo/x?q=1");
        let (code, out) = curl(&["--cacert", ca, "-H", &auth, &url]);
        assert_eq!(code, 0, "curl to {host}");
        let echoed = json(out.as_bytes());
        assert_eq!(echoed["path"], "/echo/x");
        assert_eq!(echoed["query"], "q=1");
        assert!(out.contains(CANARY));
    }
    // Without the CA, curl refuses the certificate (exit 60) and nothing reaches the routes.
    let (code, _) = curl(&[&upstream.url("/echo/x")]);
    assert_eq!(code, 60);
    let requests = upstream.requests().snapshot();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| r.contains(CANARY)));
}

#[test]
fn curl_negotiates_h2_or_http1_by_alpn() {
    let upstream = BlockingEchoUpstream::start(EchoConfig::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = ca_file(&dir, upstream.ca());
    let url = upstream.endpoint().url_with_host("localhost", "/echo/alpn");
    for (flag, expected) in [("--http2", "2"), ("--http1.1", "1.1")] {
        let (code, out) = curl(&[
            flag,
            "--cacert",
            ca.to_str().unwrap(),
            "-o",
            "/dev/null",
            "-w",
            "%{http_version}",
            &url,
        ]);
        assert_eq!((code, out.as_str()), (0, expected), "{flag}");
    }
    let versions: Vec<String> = upstream
        .requests()
        .snapshot()
        .into_iter()
        .map(|r| r.version)
        .collect();
    assert_eq!(versions, ["HTTP/2.0", "HTTP/1.1"]);
}

#[test]
fn upstreams_sharing_a_ca_are_trusted_through_one_file() {
    let ca = Arc::new(TestCa::generate().unwrap());
    let first =
        BlockingEchoUpstream::start(EchoConfig::default().with_ca(Arc::clone(&ca))).unwrap();
    let second =
        BlockingEchoUpstream::start(EchoConfig::default().with_ca(Arc::clone(&ca))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = ca_file(&dir, &ca);
    for upstream in [&first, &second] {
        let (code, _) = curl(&["--cacert", file.to_str().unwrap(), &upstream.url("/echo")]);
        assert_eq!(code, 0);
        assert_eq!(upstream.requests().len(), 1);
    }
}

#[test]
fn plain_http_serves_http1_and_h2_prior_knowledge() {
    let upstream = BlockingEchoUpstream::start(EchoConfig::default().plain_http()).unwrap();
    assert_eq!(upstream.endpoint().transport(), Transport::Http);
    assert!(upstream.url("/echo").starts_with("http://127.0.0.1:"));
    for (flag, expected) in [("--http1.1", "1.1"), ("--http2-prior-knowledge", "2")] {
        let (code, out) = curl(&[
            flag,
            "-o",
            "/dev/null",
            "-w",
            "%{http_version}",
            &upstream.url("/echo"),
        ]);
        assert_eq!((code, out.as_str()), (0, expected), "{flag}");
    }
}

#[test]
fn dropping_the_blocking_server_stops_it_promptly_even_mid_stall() {
    let upstream = BlockingEchoUpstream::start(EchoConfig::default().plain_http()).unwrap();
    let addr = upstream.addr();
    let mut stalled = std::net::TcpStream::connect(addr).unwrap();
    std::io::Write::write_all(
        &mut stalled,
        b"GET /stall?ms=60000 HTTP/1.1\r\nHost: localhost\r\n\r\n",
    )
    .unwrap();
    assert!(
        upstream
            .requests()
            .wait_for_count(1, Duration::from_secs(5))
    );
    let started = Instant::now();
    drop(upstream);
    // Far below the 60 s stall, with room for a loaded machine.
    assert!(started.elapsed() < Duration::from_secs(20));
    // The stalled connection was closed and the port no longer accepts.
    stalled
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut rest = Vec::new();
    let read = stalled.read_to_end(&mut rest);
    assert!(read.is_err() || rest.is_empty(), "no answer after the stop");
    assert!(std::net::TcpStream::connect(addr).is_err());
}

// ---------------------------------------------------------------------------------------------
// rustls clients.

#[tokio::test]
async fn rustls_client_checks_the_names_and_the_authority() {
    let upstream = start(EchoConfig::default()).await;
    for name in ["localhost", "127.0.0.1"] {
        let stream = tls(&upstream, name, &[b"h2", b"http/1.1"]).await.unwrap();
        let (_, connection) = stream.get_ref();
        assert_eq!(connection.alpn_protocol(), Some(b"h2".as_slice()));
        // The server presents its own leaf, then the CA: never the CA as the end entity.
        let chain = connection.peer_certificates().unwrap();
        assert_eq!(chain.len(), 2);
        assert_ne!(&chain[0], upstream.ca().cert_der());
        assert_eq!(&chain[1], upstream.ca().cert_der());
    }
    let wrong_name = tls(&upstream, "example.com", &[]).await;
    assert!(wrong_name.is_err());

    let stranger = TestCa::generate().unwrap();
    let tcp = TcpStream::connect(upstream.addr()).await.unwrap();
    let wrong_ca = TlsConnector::from(stranger.client_config().unwrap())
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await;
    assert!(wrong_ca.is_err());
    assert!(upstream.requests().is_empty());
}

#[tokio::test]
async fn hyper_h2_client_gets_the_echo_over_alpn_h2() {
    let upstream = start(EchoConfig::default()).await;
    let stream = tls(&upstream, "localhost", &[b"h2"]).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    let driver = tokio::spawn(connection);
    let request =
        hyper::Request::post(format!("https://localhost:{}/echo/h2?x=1", upstream.port()))
            .header("authorization", format!("Bearer {CANARY}"))
            .body(Full::new(bytes::Bytes::from_static(b"h2 body")))
            .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let echoed = json(&body);
    assert_eq!(echoed["version"], "HTTP/2.0");
    assert_eq!(echoed["method"], "POST");
    assert_eq!(echoed["body"], "h2 body");
    assert!(contains(&body, CANARY));
    let recorded = upstream.requests().last().unwrap();
    assert_eq!(
        recorded.authority.as_deref(),
        Some(format!("localhost:{}", upstream.port()).as_str())
    );
    drop(sender);
    driver.abort();
}

#[tokio::test]
async fn echo_returns_and_records_everything_received() {
    let upstream = start(EchoConfig::default()).await;
    let auth = format!("Bearer {CANARY}");
    let (head, body) = exchange(
        &upstream,
        "POST",
        "/echo/a/b?x=1&y=%7B2%7D",
        &[
            ("Authorization", &auth),
            ("Mint-Capability", "mint_cap_x_y"),
            ("Proxy-Authorization", "Bearer z"),
            ("X-Twice", "one"),
            ("X-Twice", "two"),
        ],
        b"body with the canary: mint-canary-7f3a9c21e8b4",
    )
    .await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-type"), Some("application/json"));
    let echoed = json(&body);
    assert_eq!(echoed["method"], "POST");
    assert_eq!(echoed["path"], "/echo/a/b");
    assert_eq!(echoed["query"], "x=1&y=%7B2%7D");
    assert_eq!(echoed["version"], "HTTP/1.1");
    assert_eq!(echoed["body"], format!("body with the canary: {CANARY}"));
    let headers = echoed["headers"].as_array().unwrap();
    assert!(headers.contains(&serde_json::json!(["authorization", auth])));
    assert!(headers.contains(&serde_json::json!(["x-twice", "one"])));
    assert!(headers.contains(&serde_json::json!(["x-twice", "two"])));

    let recorded = upstream.requests().last().unwrap();
    assert_eq!(recorded.method, "POST");
    assert_eq!(recorded.path, "/echo/a/b");
    assert_eq!(recorded.query.as_deref(), Some("x=1&y=%7B2%7D"));
    assert_eq!(recorded.header("AUTHORIZATION"), Some(auth.as_str()));
    assert_eq!(recorded.header("mint-capability"), Some("mint_cap_x_y"));
    assert_eq!(
        recorded.header_names_starting_with("Proxy-"),
        ["proxy-authorization"]
    );
    assert_eq!(
        recorded.header_values("x-twice").collect::<Vec<_>>(),
        ["one", "two"]
    );
    assert!(recorded.body_complete);
    assert!(recorded.contains(CANARY));
    assert!(upstream.requests().any_contains(CANARY));
    assert!(!upstream.requests().any_contains("not-sent-anywhere"));
}

#[tokio::test]
async fn echo_encoded_sends_every_form_in_chunks_that_split_the_secret() {
    let upstream = start(EchoConfig::default()).await;
    let auth = format!("Bearer {CANARY}");
    let mut client = client(&upstream, 5).await;
    client
        .send(
            "POST",
            &format!("/echo-encoded?token={CANARY}&plus=a%2Bb"),
            &[("Authorization", &auth)],
            CANARY.as_bytes(),
        )
        .await;
    let head = client.head().await.unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(head.header("transfer-encoding"), Some("chunked"));
    let (body, chunks) = client.body(&head).await.unwrap();

    // Chunks of 1..=7 bytes, so the secret (and every form of it) crosses chunk boundaries.
    assert!(chunks.len() > body.len() / 7);
    assert!(chunks.iter().all(|c| (1..=7).contains(&c.len())));
    let mut boundaries = Vec::new();
    let mut at = 0;
    for chunk in &chunks {
        at += chunk.len();
        boundaries.push(at);
    }
    let mut occurrences = 0;
    let mut from = 0;
    while let Some(offset) = find(&body[from..], CANARY.as_bytes()) {
        let start = from + offset;
        let end = start + CANARY.len();
        assert!(boundaries.iter().any(|&b| b > start && b < end));
        occurrences += 1;
        from = end;
    }
    assert!(
        occurrences >= 3,
        "header, query and body all echo the canary"
    );

    // Every encoded form, computed here independently, is in the body.
    let mut expected = vec![
        STANDARD.encode(CANARY),
        STANDARD.encode(&auth),
        URL_SAFE_NO_PAD.encode(&auth),
        hex::encode(CANARY),
        hex::encode_upper(&auth),
        "Bearer%20mint-canary-7f3a9c21e8b4".to_owned(),
    ];
    for prefix in ["", "#", "##"] {
        expected.push(STANDARD.encode(format!("{prefix}{auth}##end")));
        expected.push(URL_SAFE_NO_PAD.encode(format!("{prefix}{CANARY}##end")));
    }
    for form in &expected {
        assert!(contains(&body, form), "missing form {form}");
    }
    let unicode: String = CANARY
        .chars()
        .map(|c| format!("\\u{:04x}", c as u32))
        .collect();
    assert!(contains(&body, &unicode));

    let echoed = json(&body);
    let forms = echoed["forms"].as_array().unwrap();
    let form = |source: &str, name: &str| {
        forms
            .iter()
            .find(|f| f["source"] == source && f["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(form("header", "authorization")["value"], auth);
    assert_eq!(form("query", "token")["base64"], STANDARD.encode(CANARY));
    assert_eq!(form("query", "plus")["value"], "a+b");
    assert_eq!(form("body", "")["hex"], hex::encode(CANARY));
    assert_eq!(form("body", "")["json_unicode"], CANARY);
    assert_eq!(
        form("header", "authorization")["base64url_embedded"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

#[tokio::test]
async fn echo_header_copies_authorization_into_location_cookie_and_x_echo() {
    let upstream = start(EchoConfig::default()).await;
    let auth = format!("Bearer {CANARY}");
    let (head, _) = exchange(
        &upstream,
        "GET",
        "/echo-header",
        &[("Authorization", &auth)],
        b"",
    )
    .await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("location"), Some(auth.as_str()));
    assert_eq!(head.header("x-echo"), Some(auth.as_str()));
    assert_eq!(
        head.header("set-cookie"),
        Some(format!("echo={auth}").as_str())
    );

    let (head, _) = exchange(
        &upstream,
        "GET",
        "/echo-header?header=x-api-key",
        &[("X-Api-Key", CANARY)],
        b"",
    )
    .await;
    assert_eq!(head.header("x-echo"), Some(CANARY));

    let (head, _) = exchange(&upstream, "GET", "/echo-header", &[], b"").await;
    assert_eq!(head.status, 400);
}

#[tokio::test]
async fn redirect_answers_with_the_status_and_location_asked_for() {
    let upstream = start(EchoConfig::default()).await;
    let (head, _) = exchange(
        &upstream,
        "GET",
        "/redirect?to=https%3A%2F%2Fevil.example%2Fx",
        &[],
        b"",
    )
    .await;
    assert_eq!(head.status, 302);
    assert_eq!(head.header("location"), Some("https://evil.example/x"));
    for status in [301, 302, 303, 307, 308] {
        let target = format!("/redirect?to=/elsewhere&status={status}");
        let (head, _) = exchange(&upstream, "GET", &target, &[], b"").await;
        assert_eq!(head.status, status);
        assert_eq!(head.header("location"), Some("/elsewhere"));
    }
    for bad in [
        "/redirect?to=/x&status=200",
        "/redirect?status=302",
        "/redirect?to=/x&status=abc",
    ] {
        let (head, _) = exchange(&upstream, "GET", bad, &[], b"").await;
        assert_eq!(head.status, 400, "{bad}");
    }
}

#[tokio::test]
async fn stall_holds_the_head_until_the_client_gives_up() {
    let upstream = start(EchoConfig::default()).await;
    let mut stalled = client(&upstream, 4096).await;
    stalled.send("GET", "/stall?ms=60000", &[], b"").await;
    assert!(tokio::time::timeout(SHORT, stalled.head()).await.is_err());

    let started = Instant::now();
    let (head, body) = exchange(&upstream, "GET", "/stall?ms=100", &[], b"").await;
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert_eq!(
        (head.status, json(&body)["stalled_ms"].as_u64()),
        (200, Some(100))
    );

    // Shutting down does not wait for the stalled request.
    let started = Instant::now();
    upstream.shutdown().await;
    // Far below the 60 s stall, with room for a loaded machine.
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[tokio::test]
async fn stall_body_sends_the_head_and_a_part_then_stalls() {
    let upstream = start(EchoConfig::default()).await;
    let mut client = client(&upstream, 4096).await;
    client.send("GET", "/stall-body?ms=5000", &[], b"").await;
    let head = tokio::time::timeout(Duration::from_secs(2), client.head())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head.status, 200);
    let length = head.content_length().unwrap();
    let first = client.take(24).await.unwrap();
    assert_eq!(first, b"first part of the body.\n");
    assert!(
        tokio::time::timeout(SHORT, client.take(length - 24))
            .await
            .is_err()
    );

    let (_, body) = exchange(&upstream, "GET", "/stall-body?ms=10", &[], b"").await;
    assert_eq!(body, b"first part of the body.\nrest of the body.\n");
}

fn is_reset(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::ConnectionReset
}

#[tokio::test]
async fn reset_tears_the_connection_down_without_an_answer() {
    let upstream = start(EchoConfig::default()).await;
    let mut client = client(&upstream, 4096).await;
    client
        .send("GET", "/reset", &[("Authorization", CANARY)], b"")
        .await;
    let error = client.head().await.err().unwrap();
    assert!(is_reset(&error), "{error:?}");
    assert!(client.buf.is_empty());
    assert_eq!(upstream.requests().last().unwrap().path, "/reset");

    // Plain TCP tells an RST (ConnectionReset) from a FIN (a clean EOF).
    let plain = start(EchoConfig::default().plain_http()).await;
    let mut over_tcp = Client::new(TcpStream::connect(plain.addr()).await.unwrap(), 4096);
    over_tcp.send("GET", "/reset", &[], b"").await;
    let error = over_tcp.head().await.err().unwrap();
    assert!(is_reset(&error), "{error:?}");
}

#[tokio::test]
async fn reset_body_sends_the_head_and_part_of_the_body_then_resets() {
    let upstream = start(EchoConfig::default().plain_http()).await;
    let mut plain = Client::new(TcpStream::connect(upstream.addr()).await.unwrap(), 1024);
    plain.send("GET", "/reset-body", &[], b"").await;
    let head = plain.head().await.unwrap();
    assert_eq!((head.status, head.content_length()), (200, Some(1 << 20)));
    let error = loop {
        if let Err(error) = plain.fill().await {
            break error;
        }
    };
    assert!(is_reset(&error), "{error:?}");
    assert!(
        plain.buf.len() >= 4096 && plain.buf.len() < 1 << 20,
        "{}",
        plain.buf.len()
    );

    // Over TLS the client sees the same: part of the body, then an error.
    let upstream = start(EchoConfig::default()).await;
    let mut secure = client(&upstream, 1024).await;
    secure.send("GET", "/reset-body", &[], b"").await;
    let head = secure.head().await.unwrap();
    let result = secure.take(head.content_length().unwrap()).await;
    assert!(result.is_err());
    assert!(secure.buf.len() >= 4096);
}

#[tokio::test]
async fn sse_delivers_the_first_event_long_before_the_stream_ends() {
    let upstream = start(EchoConfig::default()).await;
    let mut client = client(&upstream, 4096).await;
    client
        .send(
            "GET",
            "/sse?n=4&interval_ms=250&echo=authorization",
            &[("Authorization", CANARY)],
            b"",
        )
        .await;
    let head = client.head().await.unwrap();
    let started = Instant::now();
    assert_eq!(head.header("content-type"), Some("text/event-stream"));
    let first = client.chunk().await.unwrap().unwrap();
    let first_at = started.elapsed();
    let first = String::from_utf8(first).unwrap();
    assert!(first.starts_with("id: 0\nevent: tick\ndata: "), "{first}");
    assert!(first.contains(CANARY));
    let mut events = 1;
    while let Some(chunk) = client.chunk().await.unwrap() {
        events += chunk.windows(2).filter(|w| w == b"\n\n").count();
    }
    let total = started.elapsed();
    assert_eq!(events, 4);
    // The first event came while the stream still had at least two intervals to go: it was
    // flushed, not buffered until the end (no absolute bound: the machine may be loaded).
    assert!(total >= Duration::from_millis(700), "{total:?}");
    assert!(
        first_at + Duration::from_millis(500) <= total,
        "{first_at:?} of {total:?}"
    );
}

#[tokio::test]
async fn big_streams_exactly_the_bytes_asked_for() {
    let upstream = start(EchoConfig::default()).await;
    let size = 3_000_001;
    let (head, body) = exchange(&upstream, "GET", &format!("/big?bytes={size}"), &[], b"").await;
    assert_eq!(head.status, 200);
    assert_eq!(head.content_length(), Some(size));
    assert_eq!(body.len(), size);
    let (head, _) = exchange(&upstream, "GET", "/big", &[], b"").await;
    assert_eq!(head.status, 400);
}

#[tokio::test]
async fn gzip_is_sent_whatever_accept_encoding_says() {
    let upstream = start(EchoConfig::default()).await;
    let auth = format!("Bearer {CANARY}");
    let (head, body) = exchange(
        &upstream,
        "GET",
        "/gzip",
        &[("Accept-Encoding", "identity"), ("Authorization", &auth)],
        b"",
    )
    .await;
    assert_eq!(head.header("content-encoding"), Some("gzip"));
    assert!(!contains(&body, CANARY));
    let mut text = String::new();
    flate2::read::GzDecoder::new(body.as_slice())
        .read_to_string(&mut text)
        .unwrap();
    assert!(text.contains(CANARY));
    assert_eq!(json(text.as_bytes())["path"], "/gzip");
}

#[tokio::test]
async fn status_answers_with_the_status_asked_for() {
    let upstream = start(EchoConfig::default()).await;
    for status in [200, 201, 404, 418, 429, 500, 502, 503] {
        let (head, body) = exchange(&upstream, "GET", &format!("/status/{status}"), &[], b"").await;
        assert_eq!(head.status, status);
        assert_eq!(json(&body)["status"], status);
    }
    let (head, body) = exchange(&upstream, "GET", "/status/204", &[], b"").await;
    assert_eq!((head.status, body.len()), (204, 0));
    for bad in ["/status/99", "/status/600", "/status/abc"] {
        let (head, _) = exchange(&upstream, "GET", bad, &[], b"").await;
        assert_eq!(head.status, 400, "{bad}");
    }
    let (head, _) = exchange(&upstream, "GET", "/nowhere", &[], b"").await;
    assert_eq!(head.status, 404);
}

#[tokio::test]
async fn required_header_mode_refuses_requests_without_the_key() {
    let upstream = start(EchoConfig::default().with_required_header("X-Api-Key", CANARY)).await;
    let (head, _) = exchange(&upstream, "GET", "/echo", &[], b"").await;
    assert_eq!(head.status, 401);
    let (head, _) = exchange(&upstream, "GET", "/echo", &[("X-Api-Key", "wrong")], b"").await;
    assert_eq!(head.status, 401);
    let (head, body) = exchange(&upstream, "GET", "/echo", &[("x-api-key", CANARY)], b"").await;
    assert_eq!(head.status, 200);
    assert!(contains(&body, CANARY));
    assert_eq!(
        upstream.requests().len(),
        3,
        "refused requests are recorded too"
    );
}

#[tokio::test]
async fn oversized_request_bodies_get_413_and_are_recorded_as_incomplete() {
    let config = EchoConfig {
        max_request_body: 1024,
        ..EchoConfig::default()
    };
    let upstream = start(config).await;
    let (head, _) = exchange(&upstream, "POST", "/echo", &[], &[b'x'; 2048]).await;
    assert_eq!(head.status, 413);
    let recorded = upstream.requests().last().unwrap();
    assert!(!recorded.body_complete);
}

#[tokio::test]
async fn shutdown_closes_the_listener_and_open_connections() {
    let upstream = start(EchoConfig::default()).await;
    let addr = upstream.addr();
    let mut idle = client(&upstream, 4096).await;
    upstream.shutdown().await;
    assert!(TcpStream::connect(addr).await.is_err());
    let result = tokio::time::timeout(Duration::from_secs(1), idle.fill()).await;
    assert!(result.unwrap().is_err(), "the open connection is closed");
}

#[tokio::test]
async fn the_certificate_also_names_ipv6_loopback() {
    let config = EchoConfig {
        bind: "[::1]:0".parse().unwrap(),
        ..EchoConfig::default()
    };
    // A machine without IPv6 loopback cannot bind it; nothing to check there.
    let Ok(upstream) = EchoUpstream::start(config).await else {
        return;
    };
    assert!(upstream.url("/echo").starts_with("https://[::1]:"));
    let stream = tls(&upstream, "::1", &[b"http/1.1"]).await.unwrap();
    let mut client = Client::new(stream, 4096);
    client.send("GET", "/echo", &[], b"").await;
    assert_eq!(client.head().await.unwrap().status, 200);
}
