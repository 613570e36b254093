//! A local HTTPS echo server: the upstream peer of the proxy's end-to-end tests and of `mint demo`.
//!
//! This is a development and test peer. It is compiled into the `mint` binary only because
//! `mint demo` starts one; the proxy never uses it, and nothing in the request path may depend on
//! it. It echoes whatever it receives (secrets included: that is its job), so it must only ever
//! listen on loopback and only ever receive test or demo credentials.
//!
//! [`EchoUpstream::start`] binds `127.0.0.1:0` (or [`EchoConfig::bind`]) and serves HTTPS with a
//! fresh certificate authority ([`TestCa`]) and a separate leaf certificate for `localhost`,
//! `127.0.0.1` and `::1` signed by it — rustls refuses a self-signed CA certificate used as the
//! server's own (`CaUsedAsEndEntity`). ALPN offers `h2` and `http/1.1`. [`Transport::Http`]
//! serves plain HTTP instead (HTTP/1.1, and HTTP/2 with prior knowledge) for the proxy's
//! loopback-only `http` tests. Every request is recorded in a [`RequestLog`] (method, path,
//! query, headers, body) so a test can check what the upstream saw: the secret, and no capability
//! or `Proxy-*` header. Dropping the server stops it: the accept loop, every connection and every
//! stream task end with it. [`BlockingEchoUpstream`] does the same from synchronous code, on a
//! runtime of its own on a thread of its own.
//!
//! # Behaviours, chosen by the request path
//!
//! - `/echo`, `/echo/...`: 200 JSON with `method`, `path`, `query`, `version`, `headers` (every
//!   one, in order, as `[name, value]` pairs) and `body` (as text). Whatever secret the request
//!   carried is in it.
//! - `/echo-encoded`, `/echo-encoded/...`: the same object plus `forms`, one per header value,
//!   query value (percent-decoded; `+` stays `+`) and the body, each with `source`, `name`,
//!   `value` (so its JSON-escaped form is there too), `base64`, `base64_nopad`, `base64url`,
//!   `base64url_nopad`, `hex`, `hex_upper`, `percent`, `percent_lower` (everything outside
//!   RFC 3986's unreserved set), `json_unicode` (every character as `\uXXXX`, read back by a
//!   JSON parser as the value), and `base64_embedded` (padded) and `base64url_embedded`
//!   (unpadded): three blobs each — 0, 1 or 2 bytes `#`, the value, then `##end` — so the value's
//!   encoding occurs at all three alignments. The body goes out in chunks of 1, 2, …, 7, 1, …
//!   bytes, each flushed on its own, so every value longer than 7 bytes is split across chunks.
//! - `/echo-header[?header=NAME]`: 200 with the received `Authorization` value (or `NAME`'s) in
//!   the `Location`, `Set-Cookie` (`echo=VALUE`) and `X-Echo` response headers; 400 without it.
//! - `/redirect?to=URL[&status=302]`: a 301, 302 (default), 303, 307 or 308 with `Location: URL`.
//! - `/stall?ms=N`: waits N ms before sending the response head.
//! - `/stall-body?ms=N`: sends the head (with `Content-Length`) and the first part of the body,
//!   waits N ms, then sends the rest.
//! - `/reset`: reads the request, then resets the connection (TCP RST through `SO_LINGER` 0, no
//!   TLS close_notify) without answering.
//! - `/reset-body`: sends the head (`Content-Length` 1 MiB) and 4 KiB of body, then resets.
//! - `/sse?n=N&interval_ms=M[&echo=HEADER]`: `text/event-stream` with N events M ms apart, each
//!   flushed; with `echo`, each event's data also carries that request header's value.
//! - `/big?bytes=N`: N bytes of a repeating pattern with `Content-Length: N`, streamed in 64 KiB
//!   pieces (never held in memory).
//! - `/gzip`: the `/echo` object gzip-compressed, with `Content-Encoding: gzip` whatever
//!   `Accept-Encoding` said.
//! - `/status/NNN`: status NNN (200–599) with a small JSON body (none for 204, 205 and 304).
//! - anything else: 404.
//!
//! Numbers come from the query: a missing one counts as 0 (except `bytes`, required), a malformed
//! or oversized one gets 400, as does a missing `to`. With [`EchoConfig::require_header`] set, a
//! request without that exact header value gets 401 (it is still recorded). Request bodies above
//! [`EchoConfig::max_request_body`] get 413 and are recorded as incomplete.

mod body;
mod ca;
mod conn;
mod encode;
mod record;
mod routes;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::thread;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use ca::TestCa;
pub use record::{RecordedRequest, RequestLog};

/// The largest request body the echo server reads by default (16 MiB, above Mint's 10 MiB limit).
pub const DEFAULT_MAX_REQUEST_BODY: usize = 16 << 20;

/// How the echo server talks to its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// TLS with ALPN `h2` and `http/1.1`.
    #[default]
    Https,
    /// Plain HTTP/1.1 (and HTTP/2 with prior knowledge), for loopback `http` tests.
    Http,
}

impl Transport {
    /// The URL scheme: `https` or `http`.
    pub fn scheme(self) -> &'static str {
        match self {
            Self::Https => "https",
            Self::Http => "http",
        }
    }
}

/// How to start an [`EchoUpstream`].
#[derive(Debug, Clone)]
pub struct EchoConfig {
    /// Where to listen; `127.0.0.1:0` (any free port) by default. Keep it on loopback.
    pub bind: SocketAddr,
    /// HTTPS (default) or plain HTTP.
    pub transport: Transport,
    /// The certificate authority that signs the server's leaf certificate. `None` creates a new
    /// one; share one between several upstreams so a single `--upstream-ca` file trusts them all.
    pub ca: Option<Arc<TestCa>>,
    /// Names the leaf certificate holds besides `localhost`, `127.0.0.1` and `::1`.
    pub extra_names: Vec<String>,
    /// A header (name, exact value) every request must carry, else 401: an API-key upstream.
    pub require_header: Option<(String, String)>,
    /// The largest request body read; larger ones get 413.
    pub max_request_body: usize,
}

impl Default for EchoConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            transport: Transport::Https,
            ca: None,
            extra_names: Vec::new(),
            require_header: None,
            max_request_body: DEFAULT_MAX_REQUEST_BODY,
        }
    }
}

impl EchoConfig {
    /// Serves plain HTTP instead of HTTPS.
    #[must_use]
    pub fn plain_http(mut self) -> Self {
        self.transport = Transport::Http;
        self
    }

    /// Signs the leaf certificate with `ca` instead of a new authority.
    #[must_use]
    pub fn with_ca(mut self, ca: Arc<TestCa>) -> Self {
        self.ca = Some(ca);
        self
    }

    /// Answers 401 to every request that lacks `name: value`.
    #[must_use]
    pub fn with_required_header(
        mut self,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        self.require_header = Some((name.into(), value.into()));
        self
    }
}

/// Why an echo server could not start.
#[derive(Debug, thiserror::Error)]
pub enum EchoError {
    /// Generating a key or certificate failed.
    #[error("cannot generate the echo upstream's certificates: {0}")]
    Certificate(#[from] rcgen::Error),
    /// rustls refused the configuration.
    #[error("cannot build the echo upstream's TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    /// Binding the socket or starting the runtime failed.
    #[error("echo upstream I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The blocking server's thread ended before it was ready.
    #[error("the echo upstream's thread stopped before it was ready")]
    ThreadStopped,
}

/// Where a running echo server is and what it has seen. Cheap to clone.
#[derive(Debug, Clone)]
pub struct EchoEndpoint {
    addr: SocketAddr,
    transport: Transport,
    ca: Arc<TestCa>,
    requests: RequestLog,
}

impl EchoEndpoint {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// HTTPS or plain HTTP.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// `https://127.0.0.1:PORT{path}` (the scheme and address the server really has).
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.transport.scheme(), self.addr)
    }

    /// The same URL with another host name, such as `localhost`, and the server's port.
    pub fn url_with_host(&self, host: &str, path: &str) -> String {
        format!("{}://{host}:{}{path}", self.transport.scheme(), self.port())
    }

    /// The certificate authority that signed the server's certificate.
    pub fn ca(&self) -> &Arc<TestCa> {
        &self.ca
    }

    /// The CA certificate in PEM: what to write to a file for the proxy's `--upstream-ca`.
    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }

    /// Every request the server has received.
    pub fn requests(&self) -> &RequestLog {
        &self.requests
    }
}

/// A running echo server on the caller's tokio runtime. Dropping it stops it.
#[derive(Debug)]
pub struct EchoUpstream {
    endpoint: EchoEndpoint,
    task: Option<JoinHandle<()>>,
}

impl EchoUpstream {
    /// Creates the certificates, binds the socket and starts serving on the current runtime.
    pub async fn start(config: EchoConfig) -> Result<Self, EchoError> {
        let ca = match config.ca {
            Some(ca) => ca,
            None => Arc::new(TestCa::generate()?),
        };
        let tls = match config.transport {
            Transport::Https => Some(ca.server_config(&config.extra_names)?),
            Transport::Http => None,
        };
        let listener = TcpListener::bind(config.bind).await?;
        let addr = listener.local_addr()?;
        let requests = RequestLog::default();
        let state = Arc::new(routes::ServerState {
            requests: requests.clone(),
            require_header: config.require_header,
            max_request_body: config.max_request_body,
        });
        let task = tokio::spawn(conn::accept_loop(listener, tls, state));
        Ok(Self {
            endpoint: EchoEndpoint {
                addr,
                transport: config.transport,
                ca,
                requests,
            },
            task: Some(task),
        })
    }

    /// Where the server is and what it has seen, as a cheap clone to hand to other tasks.
    pub fn endpoint(&self) -> &EchoEndpoint {
        &self.endpoint
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.endpoint.addr()
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.endpoint.port()
    }

    /// `https://127.0.0.1:PORT{path}`; see [`EchoEndpoint::url`].
    pub fn url(&self, path: &str) -> String {
        self.endpoint.url(path)
    }

    /// The certificate authority that signed the server's certificate.
    pub fn ca(&self) -> &Arc<TestCa> {
        self.endpoint.ca()
    }

    /// The CA certificate in PEM.
    pub fn ca_pem(&self) -> &str {
        self.endpoint.ca_pem()
    }

    /// Every request the server has received.
    pub fn requests(&self) -> &RequestLog {
        self.endpoint.requests()
    }

    /// Stops the server and waits until its listener and connections are closed.
    pub async fn shutdown(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            // The only error possible is the cancellation just asked for.
            let _ = task.await;
        }
    }
}

impl Drop for EchoUpstream {
    fn drop(&mut self) {
        // Aborting the accept loop drops its set of connection tasks, which aborts them; each
        // connection's stream tasks watch it and end too.
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// An echo server on a runtime and thread of its own, for synchronous tests and callers.
/// Dropping it stops the server and joins the thread.
#[derive(Debug)]
pub struct BlockingEchoUpstream {
    endpoint: EchoEndpoint,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl BlockingEchoUpstream {
    /// Starts a server on a new thread and returns once it is listening.
    pub fn start(config: EchoConfig) -> Result<Self, EchoError> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = thread::Builder::new()
            .name("echo-upstream".to_owned())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready_tx.send(Err(EchoError::Io(e)));
                        return;
                    }
                };
                runtime.block_on(async move {
                    match EchoUpstream::start(config).await {
                        Ok(upstream) => {
                            let _ = ready_tx.send(Ok(upstream.endpoint().clone()));
                            // Either a stop message or the handle's drop ends the wait.
                            let _ = stop_rx.await;
                            upstream.shutdown().await;
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                        }
                    }
                });
                // Dropping the runtime here cancels any task still alive.
            })?;
        let endpoint = match ready_rx.recv() {
            Ok(result) => result,
            Err(_) => Err(EchoError::ThreadStopped),
        };
        match endpoint {
            Ok(endpoint) => Ok(Self {
                endpoint,
                stop: Some(stop_tx),
                thread: Some(thread),
            }),
            Err(e) => {
                let _ = thread.join();
                Err(e)
            }
        }
    }

    /// Where the server is and what it has seen.
    pub fn endpoint(&self) -> &EchoEndpoint {
        &self.endpoint
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.endpoint.addr()
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.endpoint.port()
    }

    /// `https://127.0.0.1:PORT{path}`; see [`EchoEndpoint::url`].
    pub fn url(&self, path: &str) -> String {
        self.endpoint.url(path)
    }

    /// The certificate authority that signed the server's certificate.
    pub fn ca(&self) -> &Arc<TestCa> {
        self.endpoint.ca()
    }

    /// The CA certificate in PEM.
    pub fn ca_pem(&self) -> &str {
        self.endpoint.ca_pem()
    }

    /// Every request the server has received.
    pub fn requests(&self) -> &RequestLog {
        self.endpoint.requests()
    }
}

impl Drop for BlockingEchoUpstream {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
