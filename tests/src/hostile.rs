//! The set-up of the hostile-TLS-upstream tests (issue 20: tests/it/hostile_tls.rs and
//! tests/it/hostile_http2.rs): the real `mint serve` that trusts a certificate authority the test
//! made with rcgen ([`HostileCa`]), TLS upstreams on loopback that present whatever certificate
//! the test signed and then do whatever it scripts ([`TlsServer`]), a name pinned to each with
//! `--resolve` ([`HOST`]), and a well-behaved echo upstream ([`ECHO_HOST`]) that every entry must
//! still reach while the hostile ones misbehave.
//!
//! Mint is the TLS client of every upstream on three entries: the `/v1/proxy/` route, the forward
//! proxy (an absolute-form `http://` URL, upgraded to `https`) and an intercepted `CONNECT`
//! tunnel. [`Entry`] sends one request through each, with curl, the way an agent would.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};

use crate::broker::{Broker, CurlResponse, MintHome, curl, curl_via_proxy_as};
use crate::echo_upstream::EchoConfig;
use crate::{EchoPeer, echo_peer};

/// The name every hostile upstream is reached by (pinned to `127.0.0.1`, one pin per port).
pub const HOST: &str = "hostile.example.test";
/// The name of the well-behaved echo upstream, pinned to `127.0.0.1`.
pub const ECHO_HOST: &str = "echo.example.test";
/// The secret of the alias `echo`, bound to both names.
pub const CANARY: &str = "canary-hostile-tls-Wq7Zp3Kx9Vb2";

/// A TLS connection a [`TlsServer`] accepted, after its handshake.
pub type Tls = StreamOwned<ServerConnection, TcpStream>;

/// What a [`TlsServer`] does with a connection once the handshake is done.
pub type TlsHandler = dyn Fn(&mut Tls) + Send + Sync + 'static;

/// A certificate authority the broker trusts (its PEM is in the broker's `--upstream-ca`), for
/// leaves whose names, dates and fields a test chooses.
pub struct HostileCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A TLS server on a listener a test bound: a thread per connection, the handshake with the
/// certificate of its configuration, then the handler. Counts connections and finished
/// handshakes. Dropping it stops accepting (connections end with their handler).
pub struct TlsServer {
    port: u16,
    connections: Arc<AtomicUsize>,
    handshakes: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    accept: Option<std::thread::JoinHandle<()>>,
}

/// A broker in front of the echo upstream and of `upstreams` hostile ports, all reached by name.
/// Fields drop in order: the broker first, the directory last.
#[derive(Debug)]
pub struct HostileLab {
    /// The running `mint serve`.
    pub broker: Broker,
    /// The echo upstream.
    pub echo: EchoPeer,
    /// The broker's home (its interception CA is `ca.pem` there).
    pub home: MintHome,
    /// The agent's capability token.
    pub cap: String,
    /// The listeners of the hostile upstreams, bound before the policy was written (their ports
    /// are in it): take each into a [`TlsServer`].
    pub listeners: Vec<TcpListener>,
    _dir: tempfile::TempDir,
}

/// The ways an agent reaches an upstream through Mint, each with Mint as the TLS client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// `/v1/proxy/https/HOST:PORT/...` with `Mint-Capability`.
    Route,
    /// An absolute-form `http://HOST:PORT/...` through the proxy (Basic proxy credentials);
    /// Mint upgrades it to `https`.
    Forward,
    /// `https://HOST:PORT/...` through an intercepted `CONNECT` tunnel, the agent speaking
    /// HTTP/1.1 inside.
    Tunnel,
    /// The same tunnel, the agent speaking HTTP/2 inside.
    TunnelHttp2,
}

// === impl HostileCa ===

impl HostileCa {
    /// A new authority (ECDSA P-256), its common name `hostile test CA`.
    #[track_caller]
    pub fn generate() -> HostileCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "hostile test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        HostileCa { issuer }
    }

    /// The CA certificate in PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server configuration presenting a leaf of `params` signed by this authority (the chain:
    /// leaf, then this CA), offering `alpn`.
    #[track_caller]
    pub fn server_config(&self, params: CertificateParams, alpn: &[&[u8]]) -> Arc<ServerConfig> {
        let key = KeyPair::generate().unwrap();
        let leaf = params.signed_by(&key, &self.issuer).unwrap();
        let chain = vec![leaf.der().clone(), self.issuer.der().clone()];
        server_config(chain, &key, alpn)
    }

    /// A server configuration presenting a self-signed leaf of `params` (no CA Mint trusts).
    #[track_caller]
    pub fn self_signed_config(params: CertificateParams, alpn: &[&[u8]]) -> Arc<ServerConfig> {
        let key = KeyPair::generate().unwrap();
        let leaf = params.self_signed(&key).unwrap();
        server_config(vec![leaf.der().clone()], &key, alpn)
    }
}

impl std::fmt::Debug for HostileCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostileCa").finish_non_exhaustive()
    }
}

/// Leaf parameters for a server: DNS names `names` (none when empty), common name `common_name`,
/// `serverAuth`, valid from yesterday for a year (rcgen's defaults otherwise).
#[track_caller]
pub fn leaf_params(names: &[&str], common_name: &str) -> CertificateParams {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params = CertificateParams::new(names).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let now = std::time::SystemTime::now();
    params.not_before = (now - Duration::from_secs(86_400)).into();
    params.not_after = (now + Duration::from_secs(365 * 86_400)).into();
    params
}

/// A server configuration presenting `chain` as it is: no check that rustls could parse the
/// leaf (a hostile certificate need not parse), only that `key` signs.
#[track_caller]
fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: &KeyPair,
    alpn: &[&[u8]],
) -> Arc<ServerConfig> {
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let signing_key = provider.key_provider.load_private_key(key).unwrap();
    let certified = Arc::new(rustls::sign::CertifiedKey::new(chain, signing_key));
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Presenting(certified)));
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// Presents one certificate chain to every client.
#[derive(Debug)]
struct Presenting(Arc<rustls::sign::CertifiedKey>);

impl rustls::server::ResolvesServerCert for Presenting {
    fn resolve(
        &self,
        _: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }
}

// === impl TlsServer ===

impl TlsServer {
    /// Serves `listener` with `config`, then `handler` on each connection, a thread each.
    #[track_caller]
    pub fn start(
        listener: TcpListener,
        config: Arc<ServerConfig>,
        handler: Arc<TlsHandler>,
    ) -> TlsServer {
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let handshakes = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let (connections, handshakes, stop) = (
                Arc::clone(&connections),
                Arc::clone(&handshakes),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    connections.fetch_add(1, Ordering::SeqCst);
                    let (config, handler, handshakes) = (
                        Arc::clone(&config),
                        Arc::clone(&handler),
                        Arc::clone(&handshakes),
                    );
                    std::thread::spawn(move || {
                        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                        let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
                        let Ok(connection) = ServerConnection::new(config) else {
                            return;
                        };
                        let mut tls = StreamOwned::new(connection, stream);
                        while tls.conn.is_handshaking() {
                            if tls.conn.complete_io(&mut tls.sock).is_err() {
                                return;
                            }
                        }
                        handshakes.fetch_add(1, Ordering::SeqCst);
                        handler(&mut tls);
                    });
                }
            })
        };
        TlsServer {
            port,
            connections,
            handshakes,
            stop,
            accept: Some(accept),
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// How many TCP connections were accepted.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// How many TLS handshakes finished.
    pub fn handshakes(&self) -> usize {
        self.handshakes.load(Ordering::SeqCst)
    }
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServer")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the blocking accept so the thread sees the flag; once joined, the port is closed
        // (connections already accepted finish on their own threads).
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

// === impl HostileLab ===

impl HostileLab {
    /// Binds `upstreams` hostile listeners, then starts the echo upstream and `mint serve`
    /// trusting the echo CA and `ca`, with `--resolve` pins for [`ECHO_HOST`] and for [`HOST`]
    /// on each hostile port, and `serve_args`. The policy allows `GET` with the alias `echo` to
    /// each; the alias is bound to both names. The broker logs with `RUST_LOG=log_filter`.
    #[track_caller]
    pub fn start(
        ca: &HostileCa,
        upstreams: usize,
        serve_args: &[&str],
        log_filter: &str,
    ) -> HostileLab {
        let dir = tempfile::tempdir().unwrap();
        let listeners: Vec<TcpListener> = (0..upstreams)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let ports: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        let echo = echo_peer(
            dir.path(),
            EchoConfig {
                extra_names: vec![ECHO_HOST.to_owned()],
                ..EchoConfig::default()
            },
        );
        let echo_port = echo.server.port();
        let bundle = dir.path().join("upstream-bundle.pem");
        std::fs::write(
            &bundle,
            format!("{}{}", echo.server.ca().cert_pem(), ca.pem()),
        )
        .unwrap();
        let rule = |id: String, host: &str, port: u16| {
            format!(
                "  - id: {id}\n    effect: allow\n    match:\n      alias: [echo]\n      host: [{host}]\n      port: [{port}]\n      method: [GET]\n"
            )
        };
        let mut policy = format!(
            "version: 1\ndefault: deny\nrules:\n{}",
            rule("echo".to_owned(), ECHO_HOST, echo_port)
        );
        for (i, port) in ports.iter().enumerate() {
            policy.push_str(&rule(format!("hostile-{i}"), HOST, *port));
        }
        let aliases = format!(
            "aliases:\n  - name: echo\n    hosts: [{ECHO_HOST}, {HOST}]\n    sites: [header]\n    source: file:$SECRETS/echo\n"
        );
        let home = MintHome::new(&policy, &aliases, &[("echo", CANARY)]);
        let cap = home.issue_capability("mino", &[]);
        let mut pins = vec![format!("{ECHO_HOST}:{echo_port}:127.0.0.1")];
        pins.extend(ports.iter().map(|p| format!("{HOST}:{p}:127.0.0.1")));
        let mut args: Vec<&str> = Vec::new();
        for pin in &pins {
            args.extend(["--resolve", pin.as_str()]);
        }
        args.extend_from_slice(serve_args);
        let broker = home.serve_with_env(
            &bundle,
            &args,
            &[("RUST_LOG", std::ffi::OsStr::new(log_filter))],
        );
        HostileLab {
            broker,
            echo,
            home,
            cap,
            listeners,
            _dir: dir,
        }
    }

    /// The next hostile listener (in the order of their policy rules).
    #[track_caller]
    pub fn take_listener(&mut self) -> TcpListener {
        self.listeners.remove(0)
    }

    /// Mint's interception CA, what a client inside a tunnel trusts.
    pub fn mint_ca(&self) -> PathBuf {
        self.home.path().join("ca.pem")
    }

    /// `GET path` with `Authorization: Bearer {{mint:echo}}` to `host:port` through `entry`.
    #[track_caller]
    pub fn get(&self, entry: Entry, host: &str, port: u16, path: &str) -> CurlResponse {
        let placeholder = "Authorization: Bearer {{mint:echo}}";
        match entry {
            Entry::Route => {
                let cap = format!("Mint-Capability: {}", self.cap);
                let url = format!("{}/v1/proxy/https/{host}:{port}{path}", self.broker.base);
                curl(&["-g", "-H", &cap, "-H", placeholder, &url])
            }
            Entry::Forward => curl_via_proxy_as(
                "--http1.1",
                &self.proxy(),
                &[
                    "-g",
                    "-H",
                    placeholder,
                    &format!("http://{host}:{port}{path}"),
                ],
            ),
            Entry::Tunnel | Entry::TunnelHttp2 => {
                let version = if entry == Entry::Tunnel {
                    "--http1.1"
                } else {
                    "--http2"
                };
                let ca = self.mint_ca();
                curl_via_proxy_as(
                    version,
                    &self.proxy(),
                    &[
                        "-g",
                        "--cacert",
                        ca.to_str().unwrap(),
                        "-H",
                        placeholder,
                        &format!("https://{host}:{port}{path}"),
                    ],
                )
            }
        }
    }

    /// A request to the echo upstream through `entry`, which must succeed with the secret
    /// substituted upstream and redacted in the answer.
    #[track_caller]
    pub fn assert_still_serving(&self, entry: Entry) -> CurlResponse {
        let response = self.get(entry, ECHO_HOST, self.echo.server.port(), "/echo/still");
        assert_eq!(
            response.status, 200,
            "{entry:?}: the echo upstream is not served: {response:?}"
        );
        let last = self.echo.server.requests().last().unwrap();
        assert_eq!(
            last.header("authorization"),
            Some(format!("Bearer {CANARY}").as_str())
        );
        response
    }

    /// `http://agent:TOKEN@127.0.0.1:PORT`: the proxy URL with the capability as the password.
    pub fn proxy(&self) -> String {
        format!("http://agent:{}@{}", self.cap, self.broker.addr())
    }

    /// The broker's resident memory in KiB (`VmRSS`).
    #[track_caller]
    pub fn broker_rss_kib(&self) -> u64 {
        let pid = self.broker.pid().unwrap();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// None of `secrets`, [`CANARY`] and the capability in `seen` (what the agent received), the
    /// audit log or Mint's stderr.
    #[track_caller]
    pub fn assert_clean(&self, seen: &str, secrets: &[&str]) {
        let mut all = vec![CANARY, self.cap.as_str()];
        all.extend_from_slice(secrets);
        self.broker.assert_clean(seen, &all);
    }
}
