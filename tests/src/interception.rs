//! The set-up of the HTTPS interception tests (`tests/it/interception*.rs`): the real
//! `mint serve` with a local HTTPS echo upstream pinned with `--resolve` to the name
//! [`HOST`], a capability, and a canary secret that must reach the upstream and never the
//! client, the audit log or Mint's stderr; and ways into a tunnel by hand.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::broker::{Broker, MintHome};
use crate::echo_upstream::EchoConfig;
use crate::{EchoPeer, echo_peer};

/// The secret of the alias `echo`, bound to [`HOST`].
pub const CANARY: &str = "canary-Hq3vT8xL5pZ2mR7wK9nB4cJ6";
/// The name of the echo upstream, pinned to loopback.
pub const HOST: &str = "api.example.test";
/// The secret of the alias `elsewhere`, bound to `elsewhere.example.test`.
pub const OTHER_CANARY: &str = "canary-elsewhere-Zt4Wq8Lm2Xv6Nb9R";
/// A name the policy allows (rule `nowhere`, `GET` on the echo port) that never resolves
/// (`.invalid`, RFC 2606) and is not pinned.
pub const UNRESOLVABLE: &str = "nowhere.invalid";

/// A running interception set-up.
#[derive(Debug)]
pub struct Setup {
    // Dropped last: the peer and the broker first.
    /// The broker.
    pub broker: Broker,
    /// The echo upstream.
    pub peer: EchoPeer,
    /// The broker's `MINT_HOME`.
    pub home: MintHome,
    /// The capability token of the agent `mino`.
    pub cap: String,
    _dir: tempfile::TempDir,
}

impl Setup {
    /// The default set-up.
    pub fn start() -> Setup {
        Setup::start_with_capability(&[])
    }

    /// A set-up whose capability is issued with `mint cap issue` arguments `cap_args`.
    pub fn start_with_capability(cap_args: &[&str]) -> Setup {
        Setup::start_with(cap_args, &[])
    }

    /// A set-up whose capability is issued with `cap_args`, and whose `mint serve` gets
    /// `serve_args` besides the `--resolve` pins.
    pub fn start_with(cap_args: &[&str], serve_args: &[&str]) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let config = EchoConfig {
            extra_names: vec![HOST.to_owned(), "other.example.test".to_owned()],
            ..EchoConfig::default()
        };
        let peer = echo_peer(dir.path(), config);
        let port = peer.server.port();
        let policy = format!(
            "version: 1\ndefault: deny\nrules:\n  - id: echo-all\n    effect: allow\n    match:\n      alias: [echo]\n      host: [{HOST}]\n      port: [{port}]\n      method: [GET, POST]\n  - id: nowhere\n    effect: allow\n    match:\n      host: [{UNRESOLVABLE}]\n      port: [{port}]\n      method: [GET]\n"
        );
        // `elsewhere` is bound to a host no tunnel here goes to.
        let aliases = "aliases:\n  - name: echo\n    hosts: [api.example.test]\n    source: file:$SECRETS/echo\n  - name: elsewhere\n    hosts: [elsewhere.example.test]\n    source: file:$SECRETS/elsewhere\n";
        let home = MintHome::new(
            &policy,
            aliases,
            &[("echo", CANARY), ("elsewhere", OTHER_CANARY)],
        );
        let cap = home.issue_capability("mino", cap_args);
        let pin = format!("{HOST}:{port}:127.0.0.1");
        let other = format!("other.example.test:{port}:127.0.0.1");
        let mut args = vec!["--resolve", &pin, "--resolve", &other];
        args.extend_from_slice(serve_args);
        let broker = home.serve(&peer.ca_file, &args);
        Setup {
            broker,
            peer,
            home,
            cap,
            _dir: dir,
        }
    }

    /// The echo upstream's port.
    pub fn port(&self) -> u16 {
        self.peer.server.port()
    }

    /// Mint's CA certificate (PEM), which the clients trust.
    pub fn ca(&self) -> PathBuf {
        self.home.path().join("ca.pem")
    }

    /// The proxy URL with the capability as the password.
    pub fn proxy(&self) -> String {
        format!("http://agent:{}@{}", self.cap, self.broker.addr())
    }

    /// `https://HOST:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{HOST}:{}{path}", self.port())
    }

    /// Asserts that no canary is in `seen`, the audit log or Mint's stderr.
    #[track_caller]
    pub fn assert_no_canary(&self, seen: &str) {
        self.broker.assert_clean(seen, &[CANARY, OTHER_CANARY]);
    }

    /// Waits (bounded) until the audit log holds a record with `reason`, written as a tunnel
    /// ends, which may be just after the client gave up.
    #[track_caller]
    pub fn wait_for_reason(&self, reason: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.records_with_reason(reason).is_empty() {
            assert!(std::time::Instant::now() < deadline, "no {reason} record");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The audit records with `reason`.
    pub fn records_with_reason(&self, reason: &str) -> Vec<serde_json::Value> {
        self.broker
            .audit_records()
            .into_iter()
            .filter(|r| r["reason"] == reason)
            .collect()
    }
}

/// Opens a tunnel to `HOST:PORT` by hand (`Proxy-Authorization: Bearer`); returns the
/// connection after the `200` head.
#[track_caller]
pub fn open_tunnel(setup: &Setup) -> TcpStream {
    let (stream, head) = connect_raw(setup, &format!("{HOST}:{}", setup.port()));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        !head.to_ascii_lowercase().contains("connection: close"),
        "{head}"
    );
    stream
}

/// Sends `CONNECT target` with the set-up's capability; returns the connection and the answer's
/// head (its body, if any, is left unread).
#[track_caller]
pub fn connect_raw(setup: &Setup, target: &str) -> (TcpStream, String) {
    let mut stream = TcpStream::connect(setup.broker.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        stream,
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Bearer {}\r\n\r\n",
        setup.cap
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "the head ended early");
        head.push(byte[0]);
    }
    (stream, String::from_utf8(head).unwrap())
}

/// A TLS client inside a tunnel: rustls, trusting only Mint's CA (`ca`), SNI [`HOST`], ALPN
/// `http/1.1`.
pub type TunnelTls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// Completes TLS over the open tunnel `stream` (see [`TunnelTls`]).
#[track_caller]
pub fn tunnel_tls(stream: TcpStream, ca: &Path) -> TunnelTls {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = rustls::pki_types::ServerName::try_from(HOST).unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut tls = rustls::StreamOwned::new(connection, stream);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock).unwrap();
    }
    tls
}

/// Reads one HTTP/1.1 answer from `tls` (its body framed by `Content-Length` or chunked): its
/// head and body.
#[track_caller]
pub fn read_answer(tls: &mut TunnelTls) -> (String, String) {
    let head = read_until(tls, b"\r\n\r\n");
    let header = |name: &str| {
        head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name)
                .then(|| value.trim().to_owned())
        })
    };
    let mut body = Vec::new();
    if let Some(length) = header("content-length") {
        body.resize(length.parse().unwrap(), 0);
        tls.read_exact(&mut body).unwrap();
    } else {
        assert_eq!(
            header("transfer-encoding").as_deref(),
            Some("chunked"),
            "{head}"
        );
        loop {
            let size = read_until(tls, b"\r\n");
            let size = usize::from_str_radix(size.trim_end(), 16).unwrap();
            let mut chunk = vec![0; size + 2];
            tls.read_exact(&mut chunk).unwrap();
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    }
    (head, String::from_utf8(body).unwrap())
}

/// Reads from `tls` up to and including `end`.
#[track_caller]
fn read_until(tls: &mut TunnelTls, end: &[u8]) -> String {
    let mut bytes = Vec::new();
    let mut byte = [0u8; 1];
    while !bytes.ends_with(end) {
        assert_eq!(tls.read(&mut byte).unwrap(), 1, "ended early: {bytes:?}");
        bytes.push(byte[0]);
    }
    String::from_utf8(bytes).unwrap()
}
