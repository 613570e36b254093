//! `mint serve`: loads everything the proxy needs, then serves the routes of [`crate::proxy`] on
//! a listener the caller bound, until the caller's shutdown future completes.
//!
//! Start-up fails (exit 2) on anything wrong: a policy or alias file with an error or unsafe
//! permissions, an alias secret that cannot be read (a missing keyring item), an audit log that
//! cannot be opened, an unreadable upstream CA file. Nothing is served half-configured.
//!
//! The accept loop is Mint's own (hyper-util's connection builder, HTTP/1.1 and HTTP/2): it sets
//! `TCP_NODELAY`, bounds the time to read a request head (slowloris), and on shutdown stops
//! accepting, lets requests in flight finish within a grace period, then fsyncs the audit log.
//! A client that starts a request head and does not finish it in time gets a JSON 408 and an
//! audit record; an idle keep-alive connection is closed silently.

use std::future::Future;
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use mint_policy::audit::{AuditDecision, HttpStatus, Outcome, ReasonCode, RequestId};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tower::Service as _;

use crate::audit::facts::{
    DecisionFacts, OutcomeFacts, RequestFacts, decision_record, outcome_record,
};
use crate::audit::{AuditConfig, AuditConfigError, AuditError, AuditLog, now};
use crate::capability::{CapabilityFileError, CapabilityStore};
use crate::credential_store::{CredentialSources, KeyringConfig, KeyringConfigError};
use crate::declarations::DeclarationsError;
use crate::env::Paths;
use crate::proxy::{AppState, FramingWatch, ProxyLimits, router};
use crate::reload::Reloader;
use crate::tls::{TlsConfigError, upstream_client_config};
use crate::upstream::UpstreamClient;

/// The most bytes of a request head sniffed for its framing headers.
const MAX_SNIFFED_HEAD: usize = 1 << 20;

/// How often call-limit history is pruned.
const PRUNE_INTERVAL: Duration = Duration::from_secs(60);

/// What `mint serve` is configured with besides the files of [`Paths`].
#[derive(Clone, Debug, Default)]
pub struct ServeConfig {
    /// An operator CA file (PEM) trusted for upstreams besides the webpki roots.
    pub upstream_ca: Option<PathBuf>,
    /// Limits and timeouts.
    pub limits: ProxyLimits,
    /// How the audit log writes.
    pub audit: AuditConfig,
}

/// Why the broker could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The policy, aliases or secrets.
    #[error(transparent)]
    Declarations(#[from] DeclarationsError),
    /// The keyring settings.
    #[error(transparent)]
    Keyring(#[from] KeyringConfigError),
    /// The capabilities file.
    #[error(transparent)]
    Capabilities(#[from] CapabilityFileError),
    /// The audit settings.
    #[error(transparent)]
    AuditConfig(#[from] AuditConfigError),
    /// The audit log.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// The upstream TLS configuration.
    #[error(transparent)]
    Tls(#[from] TlsConfigError),
    /// The listen address.
    #[error("cannot listen on `{addr}`")]
    Bind {
        /// The address.
        addr: String,
        /// The reason.
        #[source]
        source: io::Error,
    },
    /// Limits that cannot work together.
    #[error(transparent)]
    Limits(#[from] crate::proxy::LimitsError),
    /// The async runtime.
    #[error("cannot start the runtime")]
    Runtime(#[source] io::Error),
}

/// Loads the declarations, secrets, capabilities and audit log, and builds the proxy's state and
/// the reloader that keeps its declarations current.
pub fn load_state(paths: &Paths, config: &ServeConfig) -> Result<(AppState, Reloader), ServeError> {
    config.limits.check()?;
    let keyring = KeyringConfig::from_env()?;
    let reloader = Reloader {
        policy: paths.policy.clone(),
        aliases: paths.aliases.clone(),
        sources: CredentialSources::system(&keyring),
    };
    let declarations = reloader.load()?;
    let capabilities = CapabilityStore::open(&paths.capabilities)?;
    let audit = AuditLog::open(&paths.audit_log, config.audit)?;
    let tls = upstream_client_config(config.upstream_ca.as_deref())?;
    let upstream = UpstreamClient::new(tls, config.limits.connect_timeout);
    let state = AppState::new(config.limits, declarations, capabilities, audit, upstream);
    Ok((state, reloader))
}

/// Serves `state` on `listener` until `shutdown` completes, then drains and fsyncs the audit log.
/// With a `reloader`, the declarations follow their files (and SIGHUP).
pub async fn run(
    listener: TcpListener,
    state: AppState,
    reloader: Option<Reloader>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let limits = *state.limits();
    let routes = router(state.clone());
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let graceful = GracefulShutdown::new();
    let pruner = {
        let state = state.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(PRUNE_INTERVAL);
            loop {
                ticks.tick().await;
                state.prune_limits();
            }
        })
    };
    let watcher = reloader.map(|reloader| tokio::spawn(reloader.watch(state.clone())));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors and the like: wait a little, keep serving.
                        tracing::warn!(error = %error, "Accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok((io, answer_socket, watch)) = watched(stream, &state) else {
                    continue;
                };
                // Each request carries its connection's framing verdict to the proxy.
                let framing = io.inner().framing.clone();
                let routes = routes.clone();
                let service = hyper::service::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(framing.clone());
                    let mut routes = routes.clone();
                    async move { routes.call(request).await }
                });
                let connection = builder.serve_connection(io, service).into_owned();
                let connection = graceful.watch(connection);
                let state = state.clone();
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        on_connection_error(&state, &*error, peer, &answer_socket, &watch);
                    }
                });
            }
        }
    }
    drop(listener);
    pruner.abort();
    if let Some(watcher) = watcher {
        watcher.abort();
    }
    tracing::info!("Shutting down: waiting for requests in flight");
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace_s = limits.shutdown_grace.as_secs(),
            "Requests still in flight at the end of the grace period"
        );
    }
    state.audit().sync().map_err(io::Error::other)?;
    tracing::info!("Audit log synced; stopped");
    Ok(())
}

/// Answers a request head that never completed (slowloris) with a JSON 408 and audits it; other
/// connection errors are logged at debug.
fn on_connection_error(
    state: &AppState,
    error: &(dyn std::error::Error + 'static),
    peer: SocketAddr,
    answer_socket: &std::net::TcpStream,
    watch: &ReadWatch,
) {
    let hyper_error = error.downcast_ref::<hyper::Error>();
    if hyper_error.is_some_and(hyper::Error::is_parse) {
        // Answered (in Mint's words, see `WatchedIo::intercept`) and audited already.
        tracing::debug!(client = %peer, error = %error, "Request that is not valid HTTP refused");
        return;
    }
    let timed_out = hyper_error.is_some_and(hyper::Error::is_timeout);
    if !(timed_out && watch.partial_head()) {
        tracing::debug!(client = %peer, error = %error, "Connection ended with an error");
        return;
    }
    let id = audit_connection_refusal(state, "header_read_timeout", 408);
    tracing::info!(client = %peer, request.id = %id, "Request head not completed in time");
    let body = serde_json::json!({
        "error": {
            "code": "invalid_request",
            "message": "the request head was not received in time",
            "rules": [],
            "request_id": id.as_str(),
        }
    })
    .to_string();
    let answer = format!(
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: {}\r\nmint-request-id: {}\r\nmint-outcome: invalid\r\nconnection: close\r\n\r\n{body}",
        body.len(),
        id.as_str()
    );
    // The socket is non-blocking; a client that does not read gets nothing more.
    let mut socket = answer_socket;
    let _ = socket.write_all(answer.as_bytes());
    let _ = socket.shutdown(std::net::Shutdown::Both);
}

/// Audits a request refused before it could be read (decision `deny`, outcome `invalid`) and
/// returns its id.
fn audit_connection_refusal(state: &AppState, reason: &str, status: u16) -> RequestId {
    let id = state.next_request_id();
    let facts = RequestFacts {
        id: id.clone(),
        agent: None,
        capability: None,
        method: None,
        target: None,
        aliases: Vec::new(),
        mcp_tool: None,
    };
    let reason = ReasonCode::new(reason).ok();
    let decision = decision_record(
        now(),
        &facts,
        &DecisionFacts {
            decision: AuditDecision::Deny,
            rules: None,
            reason: reason.clone(),
        },
    );
    let outcome = outcome_record(
        now(),
        &facts,
        &OutcomeFacts {
            outcome: Outcome::Invalid,
            status: HttpStatus::new(status).ok(),
            bytes_up: Some(0),
            bytes_down: Some(0),
            duration_ms: None,
            reason,
        },
    );
    for record in [decision, outcome] {
        if let Err(error) = state.audit().append(record) {
            tracing::error!(error = %error, "Audit record not written");
        }
    }
    id
}

/// Whether bytes arrived since the last answer was written: a head in progress.
#[derive(Clone, Debug, Default)]
struct ReadWatch(Arc<AtomicBool>);

impl ReadWatch {
    fn partial_head(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// A connection that remembers whether it read since it last wrote, and that answers in Mint's
/// own words where hyper would answer a request it cannot parse with a bare status line.
#[derive(Debug)]
struct WatchedIo {
    inner: TcpStream,
    watch: ReadWatch,
    state: AppState,
    replacement: Option<Replacement>,
    framing: FramingWatch,
    /// The bytes of the request head being read, from its first byte to its blank line; `None`
    /// while a body is read (a head starts at the connection's start and after each answer).
    head: Option<Vec<u8>>,
}

/// Mint's JSON answer written in place of hyper's automatic error response.
#[derive(Debug)]
struct Replacement {
    bytes: Vec<u8>,
    written: usize,
    /// How many bytes of hyper's answer to report as written once ours is out.
    claimed: usize,
    done: bool,
}

/// Sets `TCP_NODELAY`, keeps a second handle for the 408 answer, wraps the stream.
fn watched(
    stream: TcpStream,
    state: &AppState,
) -> io::Result<(TokioIo<WatchedIo>, std::net::TcpStream, ReadWatch)> {
    let _ = stream.set_nodelay(true);
    let std_stream = stream.into_std()?;
    let answer_socket = std_stream.try_clone()?;
    let stream = TcpStream::from_std(std_stream)?;
    let watch = ReadWatch::default();
    Ok((
        TokioIo::new(WatchedIo {
            inner: stream,
            watch: watch.clone(),
            state: state.clone(),
            replacement: None,
            framing: FramingWatch::default(),
            head: Some(Vec::new()),
        }),
        answer_socket,
        watch,
    ))
}

impl AsyncRead for WatchedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.watch.0.store(true, Ordering::Relaxed);
            if let Some(head) = &mut this.head {
                head.extend_from_slice(buf.filled().get(before..).unwrap_or_default());
                if let Some(end) = memchr::memmem::find(head, b"\r\n\r\n") {
                    this.framing.observe(head.get(..end).unwrap_or_default());
                    this.head = None;
                } else if head.len() > MAX_SNIFFED_HEAD {
                    // hyper refuses heads this large itself (431).
                    this.head = None;
                }
            }
        }
        result
    }
}

// === impl WatchedIo ===

impl WatchedIo {
    /// Once an answer's head goes out (not a `100 Continue`, after which the body comes), the
    /// next bytes read start the next request head.
    fn after_write(&mut self, bytes: &[u8]) {
        if bytes.starts_with(b"HTTP/1.") && bytes.get(9) != Some(&b'1') && self.head.is_none() {
            self.head = Some(Vec::new());
        }
    }

    /// Starts replacing hyper's answer when `first` is the head of one: a 4xx status line whose
    /// head has no `mint-request-id` (every answer of Mint's own routes has one).
    fn intercept(&mut self, first: &[u8], total: usize) {
        if self.replacement.is_some() {
            return;
        }
        let Some(status) = hyper_error_status(first) else {
            return;
        };
        let (reason, message) = match status {
            431 => ("header_too_large", "the request head is too large"),
            414 => ("uri_too_long", "the request target is too long"),
            _ => (
                "malformed_http",
                "the request is not valid HTTP/1.1 (request line, header syntax or framing)",
            ),
        };
        let id = audit_connection_refusal(&self.state, reason, status);
        tracing::info!(request.id = %id, status, reason, "Request that cannot be parsed refused");
        let body = serde_json::json!({
            "error": {
                "code": "invalid_request",
                "message": message,
                "rules": [],
                "request_id": id.as_str(),
            }
        })
        .to_string();
        let head = format!(
            "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nmint-request-id: {}\r\nmint-outcome: invalid\r\nconnection: close\r\n\r\n",
            http::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("Bad Request"),
            body.len(),
            id.as_str()
        );
        self.replacement = Some(Replacement {
            bytes: [head.into_bytes(), body.into_bytes()].concat(),
            written: 0,
            claimed: total,
            done: false,
        });
    }

    /// Writes the replacement; `None` when there is none in progress.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Option<Poll<io::Result<usize>>> {
        let replacement = self.replacement.as_mut().filter(|r| !r.done)?;
        while replacement.written < replacement.bytes.len() {
            let rest = replacement
                .bytes
                .get(replacement.written..)
                .unwrap_or_default();
            match Pin::new(&mut self.inner).poll_write(cx, rest) {
                Poll::Ready(Ok(0)) => return Some(Poll::Ready(Ok(0))),
                Poll::Ready(Ok(n)) => replacement.written += n,
                Poll::Ready(Err(error)) => return Some(Poll::Ready(Err(error))),
                Poll::Pending => return Some(Poll::Pending),
            }
        }
        replacement.done = true;
        Some(Poll::Ready(Ok(replacement.claimed)))
    }
}

/// The status of hyper's automatic error answer, when `bytes` start with one.
fn hyper_error_status(bytes: &[u8]) -> Option<u16> {
    let rest = bytes
        .strip_prefix(b"HTTP/1.1 ")
        .or_else(|| bytes.strip_prefix(b"HTTP/1.0 "))?;
    let code = std::str::from_utf8(rest.get(..3)?)
        .ok()?
        .parse::<u16>()
        .ok()?;
    if !(400..500).contains(&code) {
        return None;
    }
    let end = memchr::memmem::find(bytes, b"\r\n\r\n").unwrap_or(bytes.len());
    let head = bytes.get(..end)?.to_ascii_lowercase();
    (memchr::memmem::find(&head, b"\r\nmint-request-id:").is_none()).then_some(code)
}

impl AsyncWrite for WatchedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.watch.0.store(false, Ordering::Relaxed);
        this.after_write(buf);
        this.intercept(buf, buf.len());
        if let Some(poll) = this.poll_replacement(cx) {
            return poll;
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.watch.0.store(false, Ordering::Relaxed);
        if let Some(first) = bufs.iter().find(|b| !b.is_empty()) {
            let total = bufs.iter().map(|b| b.len()).sum();
            this.after_write(first);
            this.intercept(first, total);
        }
        if let Some(poll) = this.poll_replacement(cx) {
            return poll;
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }
}

/// Binds, serves until Ctrl-C or SIGTERM, and returns once the audit log is synced. Writes
/// `listening on http://ADDR` to `out` once the socket is bound (tests read the port from it).
pub fn serve_blocking(
    listen: &str,
    state_loader: impl FnOnce() -> Result<(AppState, Reloader), ServeError>,
    out: &mut dyn io::Write,
) -> Result<(), ServeError> {
    // Loaded before the runtime starts: the keyring's Secret Service client runs a runtime of
    // its own, which cannot start inside another.
    let (state, reloader) = state_loader()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    runtime.block_on(async {
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|source| ServeError::Bind {
                addr: listen.to_owned(),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| ServeError::Bind {
            addr: listen.to_owned(),
            source,
        })?;
        tracing::info!(listen = %addr, "Mint is serving");
        let _ = writeln!(out, "listening on http://{addr}");
        let _ = out.flush();
        run(listener, state, Some(reloader), shutdown_signal())
            .await
            .map_err(ServeError::Runtime)
    })
}

/// Completes on Ctrl-C (SIGINT) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = ctrl_c => {},
                _ = term.recv() => {},
            }
        }
        Err(_) => {
            let _ = ctrl_c.await;
        }
    }
}
