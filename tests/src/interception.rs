//! The shared set-up of the HTTPS interception tests (issue 15: tests/it/interception.rs and
//! tests/it/interception_clients.rs): the real `mint serve` in front of a local HTTPS echo
//! upstream pinned with `--resolve` to the name `api.example.test`, a canary secret that must
//! reach the upstream and never the client, the audit log or Mint's stderr, and the ways to run
//! an unmodified client with only the variables it is meant to read.
//!
//! The machine exports CA variables of its own (and may export proxy variables): every client
//! runs under `env -u` of all of them ([`client_command`]), so an inherited one never decides
//! what is trusted or where a request goes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::broker::{Broker, CA_VARIABLES, MintHome};
use crate::echo_upstream::EchoConfig;
use crate::{EchoPeer, echo_peer};

/// The secret of the alias `echo`, bound to [`HOST`].
pub const CANARY: &str = "canary-Hq3vT8xL5pZ2mR7wK9nB4cJ6";
/// The upstream's name, pinned to `127.0.0.1` with `--resolve`.
pub const HOST: &str = "api.example.test";
/// The secret of the alias `elsewhere`, bound to `elsewhere.example.test`.
pub const OTHER_CANARY: &str = "canary-elsewhere-Zt4Wq8Lm2Xv6Nb9R";
/// A name the policy allows (rule `nowhere`, `GET` on the echo port) that never resolves
/// (`.invalid` is reserved, RFC 2606): a `CONNECT` to it fails at the address lookup.
pub const UNRESOLVABLE: &str = "nowhere.invalid";

/// The proxy variables a client could pick up from the machine.
pub const PROXY_VARIABLES: [&str; 8] = [
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// A broker intercepting tunnels to [`HOST`] (and `other.example.test`, pinned to the same
/// upstream, which no rule allows), the echo upstream behind it, and a capability of agent
/// `mino`. The policy's rule `echo-all` allows `GET` and `POST` to [`HOST`] on the upstream's port
/// with the alias `echo`.
#[derive(Debug)]
pub struct Setup {
    // Dropped in this order: the broker first, the directory last.
    /// The running `mint serve`.
    pub broker: Broker,
    /// The echo upstream.
    pub peer: EchoPeer,
    /// The broker's home (its CA is `ca.pem` there).
    pub home: MintHome,
    /// The agent's capability token.
    pub cap: String,
    _dir: tempfile::TempDir,
}

/// What a [`Setup`] adds to its defaults.
#[derive(Debug, Default)]
pub struct SetupConfig<'a> {
    /// Extra `mint cap issue` arguments (`--ttl`).
    pub cap_args: &'a [&'a str],
    /// Extra `mint serve` arguments.
    pub serve_args: Vec<String>,
    /// Extra policy rules (YAML list items, indented by two spaces); `$PORT` in them is the
    /// upstream's port.
    pub rules: String,
    /// Replace the CA `mint serve` would make with one from `mint ca rotate --name-constraints`
    /// before the start: it permits the two bound hosts (`api.example.test`,
    /// `elsewhere.example.test`) only.
    pub name_constrained: bool,
    /// Extra fields of the alias `echo` (lines indented by four spaces, such as
    /// `    env: [GITHUB_TOKEN]\n`).
    pub echo_alias: &'a str,
}

// === impl Setup ===

impl Setup {
    /// The set-up as it comes.
    #[track_caller]
    pub fn start() -> Setup {
        Setup::start_with(SetupConfig::default())
    }

    /// A set-up whose capability is issued with `mint cap issue` arguments `cap_args`.
    #[track_caller]
    pub fn start_with_capability(cap_args: &[&str]) -> Setup {
        Setup::start_with(SetupConfig {
            cap_args,
            ..SetupConfig::default()
        })
    }

    /// A set-up with the additions of `config`.
    #[track_caller]
    pub fn start_with(config: SetupConfig<'_>) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let echo = EchoConfig {
            extra_names: vec![HOST.to_owned(), "other.example.test".to_owned()],
            ..EchoConfig::default()
        };
        let peer = echo_peer(dir.path(), echo);
        let port = peer.server.port();
        let policy = format!(
            "version: 1\ndefault: deny\nrules:\n  - id: echo-all\n    effect: allow\n    match:\n      alias: [echo]\n      host: [{HOST}]\n      port: [{port}]\n      method: [GET, POST]\n  - id: nowhere\n    effect: allow\n    match:\n      host: [{UNRESOLVABLE}]\n      port: [{port}]\n      method: [GET]\n{}",
            config.rules.replace("$PORT", &port.to_string())
        );
        // `elsewhere` is bound to a host no tunnel here goes to.
        let aliases = format!(
            "aliases:\n  - name: echo\n    hosts: [{HOST}]\n    source: file:$SECRETS/echo\n{}  - name: elsewhere\n    hosts: [elsewhere.example.test]\n    source: file:$SECRETS/elsewhere\n",
            config.echo_alias
        );
        let home = MintHome::new(
            &policy,
            &aliases,
            &[("echo", CANARY), ("elsewhere", OTHER_CANARY)],
        );
        let cap = home.issue_capability("mino", config.cap_args);
        if config.name_constrained {
            let rotated = home
                .mint()
                .args(["ca", "rotate", "--name-constraints"])
                .output()
                .unwrap();
            assert!(rotated.status.success(), "{rotated:?}");
        }
        let pin = format!("{HOST}:{port}:127.0.0.1");
        let other = format!("other.example.test:{port}:127.0.0.1");
        let mut serve_args = vec!["--resolve", &pin, "--resolve", &other];
        serve_args.extend(config.serve_args.iter().map(String::as_str));
        let broker = home.serve(&peer.ca_file, &serve_args);
        Setup {
            broker,
            peer,
            home,
            cap,
            _dir: dir,
        }
    }

    /// The upstream's port.
    pub fn port(&self) -> u16 {
        self.peer.server.port()
    }

    /// Mint's CA certificate (PEM), what a client must trust.
    pub fn ca(&self) -> PathBuf {
        self.home.path().join("ca.pem")
    }

    /// The proxy URL with the capability as its password: `http://agent:TOKEN@127.0.0.1:PORT`.
    pub fn proxy(&self) -> String {
        format!("http://agent:{}@{}", self.cap, self.broker.addr())
    }

    /// `https://HOST:PORT{path}` on the upstream.
    pub fn url(&self, path: &str) -> String {
        format!("https://{HOST}:{}{path}", self.port())
    }

    /// `mint run --agent mino --proxy BROKER ARGS... --` in this home, run the way an operator's
    /// shell would: with every CA and proxy variable of [`INHERITED`] set to a bogus value that
    /// `mint run` must overwrite (or remove). Add the command.
    pub fn mint_run(&self, args: &[&str]) -> Command {
        let mut command = self.home.mint();
        command.envs(INHERITED.iter().copied());
        command
            .args(["run", "--agent", "mino", "--proxy", &self.broker.base])
            .args(args)
            .arg("--");
        command
    }

    /// The capabilities `mint cap list --json` shows besides the set-up's own: those `mint run`
    /// and `mint env` issued.
    #[track_caller]
    pub fn issued_capabilities(&self) -> Vec<serde_json::Value> {
        let output = self
            .home
            .mint()
            .args(["cap", "list", "--json"])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", everything(&output));
        let own = crate::broker::capability_id(&self.cap);
        let list: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
        list.into_iter().filter(|c| c["id"] != own).collect()
    }

    /// Neither canary in `seen` (what the agent received), the audit log or Mint's stderr.
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

/// A TLS server on `127.0.0.1:0` presenting the certificate of `config`: it counts finished
/// handshakes and keeps every request head it reads, answering each `200 ok`. The upstream a
/// test needs when the leaf must be one of Mint's own CA, or when its answers are scripted
/// ([`TlsUpstream::scripted`]). HTTP/1.1 only: one request a connection. A
/// [`TlsServer`](crate::hostile::TlsServer) underneath (its accept loop and handshake); dropping
/// it stops accepting.
pub struct TlsUpstream {
    server: crate::hostile::TlsServer,
    requests: Arc<Mutex<Vec<String>>>,
}

/// The answer of a [`TlsUpstream::scripted`] to a request head: the whole HTTP/1.1 answer.
pub type TlsScript = dyn Fn(&str) -> Vec<u8> + Send + 'static;

// === impl TlsUpstream ===

impl TlsUpstream {
    /// Binds `127.0.0.1:0` and answers every request `200 ok`.
    #[track_caller]
    pub fn start(config: Arc<rustls::ServerConfig>) -> TlsUpstream {
        TlsUpstream::scripted(
            config,
            Box::new(|_| {
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".to_vec()
            }),
        )
    }

    /// Binds `127.0.0.1:0` and answers every request head with `script` (which should say
    /// `Connection: close`).
    #[track_caller]
    pub fn scripted(config: Arc<rustls::ServerConfig>, script: Box<TlsScript>) -> TlsUpstream {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let script = Mutex::new(script);
        let handler = {
            let requests = Arc::clone(&requests);
            move |tls: &mut crate::hostile::Tls| {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let answer = (script.lock().unwrap())(&head);
                requests.lock().unwrap().push(head);
                let _ = tls.write_all(&answer);
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        };
        let server = crate::hostile::TlsServer::start(listener, config, Arc::new(handler));
        TlsUpstream { server, requests }
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.server.port()
    }

    /// How many handshakes finished.
    pub fn handshakes(&self) -> usize {
        self.server.handshakes()
    }

    /// The request heads read, in the order their connections were served (each connection
    /// is served on its own thread, so only requests made one after another keep their order).
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

impl std::fmt::Debug for TlsUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsUpstream")
            .field("port", &self.port())
            .finish_non_exhaustive()
    }
}

/// The secret of the alias `git` (the git server's token).
pub const GIT_CANARY: &str = "canary-git-Rk7Vn2Qx9Lw4Tz6Hs3";
/// The git server's name, pinned to `127.0.0.1`.
pub const GIT_HOST: &str = "git.example.test";
/// The one commit of the git server's repository.
pub const GIT_MAIN: &str = "8f3c2b1a9d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a";

/// One pkt-line: four hex digits of length (themselves included), then `text`.
pub fn pkt_line(text: &str) -> String {
    format!("{:04x}{text}", text.len() + 4)
}

/// What a smart-HTTP git server answers to `GET /repo.git/info/refs?service=git-upload-pack`
/// when the request carries `Authorization: Bearer GIT_CANARY` (the protocol-v0 ref
/// advertisement of a repository with one branch), and a `401` otherwise.
pub fn git_server(head: &str) -> Vec<u8> {
    let authorized = crate::broker::request_header(head.as_bytes(), "authorization")
        .is_some_and(|value| value == format!("Bearer {GIT_CANARY}"));
    let first_line = head.lines().next().unwrap_or_default();
    if !authorized {
        return b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec();
    }
    if first_line != "GET /repo.git/info/refs?service=git-upload-pack HTTP/1.1" {
        return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            .to_vec();
    }
    let body = format!(
        "{}0000{}{}0000",
        pkt_line("# service=git-upload-pack\n"),
        pkt_line(&format!(
            "{GIT_MAIN} HEAD\0multi_ack side-band-64k ofs-delta symref=HEAD:refs/heads/main\n"
        )),
        pkt_line(&format!("{GIT_MAIN} refs/heads/main\n")),
    );
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/x-git-upload-pack-advertisement\r\nCache-Control: no-cache\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A smart-HTTP git server over TLS on [`GIT_HOST`] (answering with [`git_server`]) behind the
/// real `mint serve`, which pins the name to it and trusts its CA; the alias `git` (secret
/// [`GIT_CANARY`]) is bound to it and a rule allows `GET /repo.git/info/refs`.
#[derive(Debug)]
pub struct GitLab {
    // Dropped in this order: the broker first, the directory last.
    /// The running `mint serve`.
    pub broker: Broker,
    /// The git server.
    pub upstream: TlsUpstream,
    /// The broker's home.
    pub home: MintHome,
    /// A capability of agent `mino`, issued before the broker started, when asked for.
    pub cap: Option<String>,
    /// A directory for the client's own files (`HOME`, git's config).
    pub dir: tempfile::TempDir,
}

// === impl GitLab ===

impl GitLab {
    /// Starts the git server and the broker, with a capability issued first if `with_capability`
    /// (the broker then accepts it from its first request).
    #[track_caller]
    pub fn start(with_capability: bool) -> GitLab {
        let dir = tempfile::tempdir().unwrap();
        // The git server's certificate comes from a CA of its own, which Mint is told to trust.
        let upstream_ca = crate::echo_upstream::TestCa::generate().unwrap();
        let upstream_ca_file = dir.path().join("upstream-ca.pem");
        upstream_ca.write_pem(&upstream_ca_file).unwrap();
        let mut config = (*upstream_ca.server_config(&[GIT_HOST.to_owned()]).unwrap()).clone();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let upstream = TlsUpstream::scripted(Arc::new(config), Box::new(git_server));
        let port = upstream.port();
        let home = MintHome::new(
            &format!(
                "version: 1\ndefault: deny\nrules:\n  - id: git-read\n    effect: allow\n    match:\n      alias: [git]\n      host: [{GIT_HOST}]\n      port: [{port}]\n      method: [GET]\n      path: [/repo.git/info/refs]\n"
            ),
            &format!(
                "aliases:\n  - name: git\n    hosts: [{GIT_HOST}]\n    source: file:$SECRETS/git\n"
            ),
            &[("git", GIT_CANARY)],
        );
        let cap = with_capability.then(|| home.issue_capability("mino", &[]));
        let pin = format!("{GIT_HOST}:{port}:127.0.0.1");
        let broker = home.serve(&upstream_ca_file, &["--resolve", &pin]);
        GitLab {
            broker,
            upstream,
            home,
            cap,
            dir,
        }
    }

    /// `https://GIT_HOST:PORT/repo.git`.
    pub fn url(&self) -> String {
        format!("https://{GIT_HOST}:{}/repo.git", self.upstream.port())
    }

    /// An empty directory for git's `HOME`, so no configuration of the machine's user applies.
    #[track_caller]
    pub fn git_home(&self) -> PathBuf {
        let git_home = self.dir.path().join("git-home");
        std::fs::create_dir_all(&git_home).unwrap();
        git_home
    }
}

/// What an operator's shell may export that `mint run` must not pass on: CA and proxy variables
/// naming nothing useful, and a `GITHUB_TOKEN` holding a real-looking key.
pub const INHERITED: [(&str, &str); 16] = [
    ("SSL_CERT_FILE", "/nonexistent/inherited-ssl-cert-file.pem"),
    ("REQUESTS_CA_BUNDLE", "/nonexistent/inherited-requests.pem"),
    ("CURL_CA_BUNDLE", "/nonexistent/inherited-curl.pem"),
    ("GIT_SSL_CAINFO", "/nonexistent/inherited-git.pem"),
    ("NODE_EXTRA_CA_CERTS", "/nonexistent/inherited-node.pem"),
    ("AWS_CA_BUNDLE", "/nonexistent/inherited-aws.pem"),
    ("HTTPS_PROXY", "http://127.0.0.1:9/inherited"),
    ("https_proxy", "http://127.0.0.1:9/inherited"),
    ("HTTP_PROXY", "http://127.0.0.1:9/inherited"),
    ("ALL_PROXY", "http://127.0.0.1:9/inherited"),
    ("NO_PROXY", "*"),
    ("no_proxy", "*"),
    ("GITHUB_TOKEN", "ghp_inheritedTokenThatMustNotReachTheAgent"),
    // Other letter cases of the same names, which some clients fold (Python's urllib).
    ("Https_Proxy", "http://127.0.0.1:9/inherited-mixed-case"),
    ("All_Proxy", "http://127.0.0.1:9/inherited-mixed-case-all"),
    (
        "requests_ca_bundle",
        "/nonexistent/inherited-lowercase-requests.pem",
    ),
];

/// `env -u VARIABLE... NAME=VALUE... PROGRAM`: `program` run without any CA or proxy variable
/// of the machine ([`CA_VARIABLES`], [`PROXY_VARIABLES`]), given only `vars`. Add its arguments.
pub fn client_command(program: impl AsRef<std::ffi::OsStr>, vars: &[(&str, &str)]) -> Command {
    let mut command = Command::new("env");
    for variable in CA_VARIABLES.iter().chain(PROXY_VARIABLES.iter()) {
        command.args(["-u", variable]);
    }
    for (name, value) in vars {
        command.arg(format!("{name}={value}"));
    }
    command.arg(program);
    command
}

/// What a client printed: stdout and stderr, for canary checks and failure messages.
pub fn everything(output: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs `tests/python/https_interception_client.py ARGS` under `env -u` of every CA and proxy
/// variable, given only `vars`; returns its JSON (`null` when it failed) and everything it
/// printed.
#[track_caller]
pub fn python_client(args: &[&str], vars: &[(&str, &str)]) -> (serde_json::Value, String) {
    let script = crate::repo_root().join("tests/python/https_interception_client.py");
    let output = client_command(crate::repo_root().join(".venv/bin/python"), vars)
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    let everything = everything(&output);
    let json = if output.status.success() {
        serde_json::from_slice(&output.stdout).unwrap()
    } else {
        serde_json::Value::Null
    };
    (json, everything)
}

/// Runs the hand-made tunnel of `https_interception_client.py tunnel` with `steps` and the
/// set-up's capability; returns each step's answer and everything the client printed.
#[track_caller]
pub fn tunnel_client(setup: &Setup, steps: &serde_json::Value) -> (Vec<serde_json::Value>, String) {
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

/// The `Mint-Request-Id` of a client's answer (header names in any case).
#[track_caller]
pub fn request_id(answer: &serde_json::Value) -> String {
    answer["headers"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("mint-request-id"))
        .and_then(|(_, value)| value.as_str())
        .unwrap_or_else(|| panic!("no Mint-Request-Id: {answer}"))
        .to_owned()
}

/// Opens a tunnel to `HOST:PORT` by hand (`Proxy-Authorization: Bearer`); returns the
/// connection after the `200` head.
#[track_caller]
pub fn open_tunnel(setup: &Setup) -> TcpStream {
    open_tunnel_to(setup, &format!("{HOST}:{}", setup.port()))
}

/// Opens a tunnel to `authority` by hand; returns the connection after the `200` head.
#[track_caller]
pub fn open_tunnel_to(setup: &Setup, authority: &str) -> TcpStream {
    let (stream, head) = connect_raw(setup, authority);
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
    send_connect(&mut stream, setup, target);
    let head = read_head(&mut stream);
    (stream, head)
}

/// Writes `CONNECT target` with the set-up's capability (`Proxy-Authorization: Bearer`).
#[track_caller]
pub fn send_connect(stream: &mut TcpStream, setup: &Setup, target: &str) {
    write!(
        stream,
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Bearer {}\r\n\r\n",
        setup.cap
    )
    .unwrap();
}

/// Reads an answer's head, byte by byte (nothing of what follows, the tunnel's TLS, is consumed).
#[track_caller]
pub fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "the head ended early");
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
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
