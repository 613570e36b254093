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
//! Intercepted tunnels drain the same way, within the same grace period: a request in flight
//! inside one finishes and is audited, an idle one is closed (`Drain`, `serve::tunnel`).
//! A client that starts a request head and does not finish it in time gets a JSON 408 and an
//! audit record; an idle keep-alive connection is closed silently.

use std::future::Future;
use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tower::Service as _;

use crate::approval::ApprovalBounds;
use crate::approval::socket::{OperatorSocket, SocketError};
use crate::audit::mirror::Mirror;
use crate::audit::{AuditConfig, AuditConfigError, AuditError, AuditLog};
use crate::capability::{CapabilityFileError, CapabilityStore};
use crate::config::ca_files::{self, CaFileError};
use crate::config::declarations::DeclarationsError;
use crate::config::env::Paths;
use crate::config::refresh::Refresher;
use crate::config::reload::Reloader;
use crate::net::ca::{CA_EXPIRY_WARNING, LeafCache};
use crate::net::tls::{TlsConfigError, upstream_client_config};
use crate::net::upstream::{ResolvePins, UpstreamClient};
use crate::proxy::{self, AppState, ProxyLimits, RequestIdSlot, router};
use crate::secrets::credential_store::{
    CredentialSources, KeyringConfig, KeyringConfigError, VaultConfig, VaultConfigError, VaultStore,
};

mod connection;
mod fd_limit;
mod framing;
mod h2_watch;
pub(crate) mod tunnel;

use connection::ConnectionIo;
use framing::AnswerBody;
// For the fuzz targets (`crate::fuzzing`).
pub(crate) use connection::hyper_error_status;
pub(crate) use framing::follow_pieces;
pub(crate) use h2_watch::refusals_per_step;
pub(crate) use tunnel::sni_names;

/// The most concurrent streams of one HTTP/2 connection.
const H2_MAX_STREAMS: u32 = 64;

/// How often an idle HTTP/2 connection is pinged, and how long the answer may take.
const H2_KEEP_ALIVE: Duration = Duration::from_secs(20);

/// How often call-limit history is pruned.
const PRUNE_INTERVAL: Duration = Duration::from_secs(60);

/// One of the `--max-connections` slots, held by an agent connection and, once it opened an
/// intercepted tunnel, by that tunnel: the slot frees when both are over. In the extensions of
/// every request of the connection. It carries the server's [`Drain`] to the tunnel.
#[derive(Clone, Debug)]
pub(crate) struct ConnectionSlot {
    #[expect(dead_code, reason = "held for its drop")]
    permit: Arc<OwnedSemaphorePermit>,
    pub(crate) drain: Drain,
}

/// The server's shutdown as an intercepted tunnel sees it. hyper's `GracefulShutdown` only
/// watches the connections of the accept loop, and a `CONNECT`'s connection is over for hyper
/// once it hands the tunnel over; so each tunnel holds one of these: the server signals it when
/// the shutdown starts, and waits (within the grace period) until every one is dropped.
#[derive(Clone, Debug)]
pub(crate) struct Drain(watch::Receiver<()>);

// === impl Drain ===

impl Drain {
    /// Completes once the shutdown has started (at once if it started before this was cloned).
    pub(crate) async fn started(&mut self) {
        // An error: the server is gone, which is a shutdown too.
        let _ = self.0.changed().await;
    }
}

/// What `mint serve` is configured with besides the files of [`Paths`].
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// An operator CA file (PEM) trusted for upstreams besides the webpki roots.
    pub upstream_ca: Option<PathBuf>,
    /// How many hosts' intercepted-TLS leaves are kept.
    pub leaf_cache: usize,
    /// The operator's `--resolve` pins.
    pub resolve: ResolvePins,
    /// Limits and timeouts.
    pub limits: ProxyLimits,
    /// How the audit log writes.
    pub audit: AuditConfig,
    /// How many requests may wait for approval.
    pub approvals: ApprovalBounds,
    /// Where newly held requests are notified.
    pub approval_webhook: Option<crate::approval::webhook::Webhook>,
    /// `--audit-stdout`: copy every audit line to stdout, tagged with this broker id.
    pub audit_stdout: Option<crate::audit::mirror::BrokerId>,
    /// The Redis keeping call limits shared with other brokers; `None`: in memory.
    pub shared_limits: Option<crate::limits::RedisLimitsConfig>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            upstream_ca: None,
            leaf_cache: crate::net::ca::LEAF_CACHE_CAPACITY,
            resolve: ResolvePins::default(),
            limits: ProxyLimits::default(),
            audit: AuditConfig::default(),
            approvals: ApprovalBounds::default(),
            approval_webhook: None,
            audit_stdout: None,
            shared_limits: None,
        }
    }
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
    /// The Vault settings (`MINT_VAULT_*`).
    #[error(transparent)]
    Vault(#[from] VaultConfigError),
    /// The capabilities file.
    #[error(transparent)]
    Capabilities(#[from] CapabilityFileError),
    /// The audit settings.
    #[error(transparent)]
    AuditConfig(#[from] AuditConfigError),
    /// The audit log.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// `--audit-stdout` could not start its copy.
    #[error("cannot copy the audit log to stdout (--audit-stdout)")]
    AuditStdout(#[source] io::Error),
    /// The upstream TLS configuration.
    #[error(transparent)]
    Tls(#[from] TlsConfigError),
    /// A `--resolve` pin.
    #[error(transparent)]
    Resolve(crate::net::upstream::ResolvePinError),
    /// The interception CA. Its message is shown here, not also as a source: `main` prints the
    /// chain, which would say it twice.
    #[error("the interception CA: {0}")]
    Ca(CaFileError),
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
    /// The operator socket for approvals.
    #[error(transparent)]
    ApprovalSocket(#[from] crate::approval::socket::SocketError),
    /// The approval webhook's URL.
    #[error(transparent)]
    ApprovalWebhook(#[from] crate::approval::webhook::WebhookError),
    /// The Redis settings of shared call limits.
    #[error(transparent)]
    SharedLimits(#[from] crate::limits::RedisConfigError),
    /// A policy or alias file missing from the home: a home not made yet, or `MINT_HOME` unset
    /// in another directory. Named as `mint alias` and `mint cap` name it.
    #[error("cannot read {what} `{}`: no such file or directory; run `mint init` first (or set MINT_HOME to your Mint home)", path.display())]
    NotInitialised {
        /// `policy file` or `alias file`.
        what: &'static str,
        /// The file.
        path: std::path::PathBuf,
    },
}

impl From<CaFileError> for ServeError {
    fn from(error: CaFileError) -> Self {
        ServeError::Ca(error)
    }
}

/// Loads the declarations, secrets, capabilities and audit log, and builds the proxy's state and
/// the reloader that keeps its declarations current.
pub fn load_state(paths: &Paths, config: &ServeConfig) -> Result<(AppState, Reloader), ServeError> {
    config.limits.check()?;
    let keyring = KeyringConfig::from_env()?;
    let reloader = Reloader {
        policy: paths.policy.clone(),
        aliases: paths.aliases.clone(),
        sources: CredentialSources::system(&keyring).with_vault(
            VaultConfig::from_env()?
                .map(|vault| VaultStore::new(vault, config.upstream_ca.as_deref()))
                .transpose()?,
        ),
        placeholder_key: paths.placeholder_key.clone(),
    };
    let declarations = reloader.load()?;
    let capabilities = CapabilityStore::open(&paths.capabilities)?;
    let audit = AuditLog::open(&paths.audit_log, config.audit)?;
    if let Some(broker) = &config.audit_stdout {
        // A descriptor of its own: the main thread may hold the lock of Rust's `Stdout`.
        let stdout = io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .map_err(ServeError::AuditStdout)?;
        let mirror = Mirror::start(
            std::fs::File::from(stdout),
            broker,
            crate::audit::mirror::MIRROR_QUEUE_BATCHES,
        )
        .map_err(ServeError::AuditStdout)?;
        audit.mirror_to(mirror);
        tracing::info!(broker = %broker.as_str(), "Copying every audit record to stdout (--audit-stdout)");
    }
    let counts = (
        declarations.policy().policy().rules.len(),
        declarations.aliases().aliases.len(),
    );
    let (ca, created) = ca_files::load_or_create(paths, SystemTime::now())?;
    if created {
        tracing::info!(ca.cert = %paths.ca_cert.display(), "Created the interception CA; agents trust it with `mint ca export`");
    }
    let expires = humantime::format_rfc3339_seconds(ca.not_after());
    tracing::info!(ca.cert = %paths.ca_cert.display(), ca.expires = %expires, "Interception CA loaded");
    if ca.not_after() < SystemTime::now() + CA_EXPIRY_WARNING {
        tracing::warn!(ca.expires = %expires, "The interception CA expires within 30 days; run `mint ca rotate` and trust the new one");
    }
    if let Some(constraints) = ca.name_constraints() {
        tracing::info!(ca.name_constraints = %constraints, "The interception CA is name-constrained: CONNECT to a host outside its constraints is refused");
    }
    let tls = upstream_client_config(config.upstream_ca.as_deref(), Some(ca.cert_der()))?;
    for pin in config.resolve.describe() {
        tracing::info!(resolve = %pin, "Pinned upstream address (--resolve): used for this host and port only, without the address checks");
    }
    let upstream =
        UpstreamClient::with_pins(tls, config.limits.connect_timeout, config.resolve.clone());
    let leaves = LeafCache::new(Arc::new(ca), config.leaf_cache);
    let state = AppState::new(config.limits, declarations, capabilities, audit, upstream)
        .with_interception(Arc::new(leaves))
        .with_approval_bounds(config.approvals)
        .with_approval_webhook(config.approval_webhook.clone());
    let state = match &config.shared_limits {
        Some(redis) => state.with_call_limits(crate::limits::CallLimits::redis(redis.clone())),
        None => state,
    };
    // The one line that says which home and files this broker runs on, once all of it loaded (a
    // start that fails shows only its error): a broker started in the wrong directory
    // (`MINT_HOME` unset, `.mint` relative) shows it here.
    let home = std::path::absolute(&paths.home).unwrap_or_else(|_| paths.home.clone());
    tracing::info!(
        home = %home.display(),
        policy.file = %paths.policy.display(),
        policy.rules = counts.0,
        aliases.file = %paths.aliases.display(),
        aliases.count = counts.1,
        capabilities.file = %paths.capabilities.display(),
        audit.file = %paths.audit_log.display(),
        "Mint home loaded"
    );
    warn_hosts_outside_ca(&state);
    Ok((state, reloader))
}

/// Warns about each host an alias is bound to that the interception CA's name constraints leave
/// out: a `CONNECT` to it is refused until the CA is rotated. Called at start and after each
/// reload of the declarations.
pub(crate) fn warn_hosts_outside_ca(state: &AppState) {
    let Some(constraints) = state
        .interception()
        .and_then(|leaves| leaves.ca().name_constraints())
    else {
        return;
    };
    let declarations = state.declarations();
    for (alias, host) in constraints.hosts_left_out(declarations.aliases()) {
        tracing::warn!(
            alias = %alias.name,
            alias.host = %host,
            "The interception CA's name constraints leave out a host this alias is bound to, so a CONNECT to it is refused; run `mint ca rotate --name-constraints`, restart `mint serve` and trust the new CA"
        );
    }
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
    let builder = agent_builder(&limits);
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    // Tunnels hold a clone of `drain` (through their connection's slot) until they end.
    let (tunnels, drain) = watch::channel(());
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
    // Command and Vault secrets are read again as their cache time runs out.
    let refresher = reloader.as_ref().map(|reloader| {
        let refresher = Refresher {
            sources: reloader.sources.clone(),
        };
        tokio::spawn(refresher.watch(state.clone()))
    });
    let watcher = reloader.map(|reloader| tokio::spawn(reloader.watch(state.clone())));
    {
        let state = state.clone();
        tokio::spawn(async move { state.call_limits().warm_up().await });
    }
    let notifier = state.spawn_approval_webhook();
    tokio::pin!(shutdown);
    // Whether the last accept failed for want of file descriptors: logged once as it starts and
    // once as it ends, not at every retry.
    let mut out_of_fds = false;
    loop {
        // At most `max_connections` at once: past it, new connections wait in the listen
        // backlog instead of exhausting file descriptors.
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = Arc::clone(&connections).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors and the like: wait a little, keep serving;
                        // connections wait in the listen backlog meanwhile.
                        let fds = matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
                        if fds && !out_of_fds {
                            tracing::error!(
                                error = %error,
                                fd.soft = fd_limit::current(),
                                "Out of file descriptors: new connections wait until others close; raise the open-file limit (LimitNOFILE=) or lower --max-connections"
                            );
                        } else if !fds {
                            tracing::warn!(error = %error, "Accept failed");
                        }
                        out_of_fds |= fds;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if std::mem::take(&mut out_of_fds) {
                    tracing::info!("Accepting connections again: file descriptors were freed");
                }
                // The agent gave up while the connection waited to be accepted: its request
                // (if it sent one) is not served, so it is never sent upstream after the agent
                // took it for failed. The permit goes back with this iteration.
                if connection::peer_has_closed(&stream) {
                    tracing::debug!(peer = %peer, "Agent closed the connection before it was accepted; not served");
                    continue;
                }
                let _ = stream.set_nodelay(true);
                let io = ConnectionIo::new(stream, &state);
                // Each HTTP/1 request takes the framing verdict on its own head, and leaves its
                // id for the interim `100 Continue`.
                let heads = io.heads();
                let id_slot = io.id_slot();
                let io = TokioIo::new(io);
                let routes = routes.clone();
                let state = state.clone();
                let slot = ConnectionSlot {
                    permit: Arc::new(permit),
                    drain: Drain(drain.clone()),
                };
                let held = slot.clone();
                let service = agent_service(heads, id_slot, move |mut request: http::Request<Body>| {
                    request.extensions_mut().insert(slot.clone());
                    // Proxy requests skip the router's matching and middleware (the same
                    // destination, by `proxy::proxy_mode`); everything else goes through it.
                    let mode = proxy::proxy_mode(&request);
                    let (state, mut routes) = (state.clone(), routes.clone());
                    async move {
                        match mode {
                            Some(mode) => proxy::proxy_shortcut(&state, mode, request).await,
                            None => match routes.call(request).await {
                                Ok(response) => response,
                                Err(never) => match never {},
                            },
                        }
                    }
                });
                let connection = builder.serve_connection_with_upgrades(io, service).into_owned();
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        // Refusals were answered and audited by `ConnectionIo`.
                        tracing::debug!(client = %peer, error = %error, "Connection ended with an error");
                    }
                    drop(held);
                });
            }
        }
    }
    drop(listener);
    pruner.abort();
    if let Some(refresher) = refresher {
        refresher.abort();
    }
    if let Some(watcher) = watcher {
        watcher.abort();
    }
    if let Some(notifier) = notifier {
        notifier.abort();
    }
    tracing::info!("Shutting down: waiting for requests in flight");
    // Requests waiting for approval are answered `503` now rather than at the end of the grace.
    state.approvals().shut_down();
    drop(drain);
    // Connections and tunnels are told at once; both get the same grace period.
    tunnels.send_replace(());
    let drained = async {
        tokio::join!(graceful.shutdown(), tunnels.closed());
    };
    if tokio::time::timeout(limits.shutdown_grace, drained)
        .await
        .is_err()
    {
        tracing::warn!(
            grace_s = limits.shutdown_grace.as_secs(),
            "Requests still in flight at the end of the grace period"
        );
    }
    state.audit().sync().map_err(io::Error::other)?;
    state.audit().finish_mirror();
    tracing::info!("Audit log synced; stopped");
    Ok(())
}

/// Looks at an HTTP/2 request's body once, without waiting, as hyper hands the request over:
/// `true` when the HTTP/2 library has already reset the stream for a protocol error
/// ([`proxy::is_protocol_reset_error`]); otherwise the request, whose body still yields every
/// frame (one taken by the look is handed out first). HTTP/1 requests pass untouched.
fn early_reset(request: http::Request<hyper::body::Incoming>) -> (http::Request<Body>, bool) {
    use hyper::body::Body as _;
    if request.version() != http::Version::HTTP_2 {
        return (request.map(Body::new), false);
    }
    let (parts, mut incoming) = request.into_parts();
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let first = match std::pin::Pin::new(&mut incoming).poll_frame(&mut cx) {
        std::task::Poll::Ready(Some(Err(error))) if proxy::is_protocol_reset_error(&error) => {
            return (http::Request::from_parts(parts, Body::empty()), true);
        }
        std::task::Poll::Ready(Some(frame)) => Some(frame),
        std::task::Poll::Ready(None) | std::task::Poll::Pending => None,
    };
    let body = Body::new(Replayed {
        first,
        rest: incoming,
    });
    (http::Request::from_parts(parts, body), false)
}

/// A request body with one frame already taken from it, handed out first.
struct Replayed {
    first: Option<Result<hyper::body::Frame<bytes::Bytes>, hyper::Error>>,
    rest: hyper::body::Incoming,
}

impl hyper::body::Body for Replayed {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if let Some(first) = this.first.take() {
            return std::task::Poll::Ready(Some(first));
        }
        std::pin::Pin::new(&mut this.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        let rest = self.rest.size_hint();
        let extra = match &self.first {
            Some(Ok(frame)) => frame.data_ref().map_or(0, |data| data.len() as u64),
            _ => 0,
        };
        let mut hint = hyper::body::SizeHint::new();
        hint.set_lower(rest.lower().saturating_add(extra));
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper.saturating_add(extra));
        }
        hint
    }
}

/// The hyper connection builder of agent connections (HTTP/1.1 and HTTP/2, with the bounds
/// above); also serves the requests inside intercepted tunnels.
pub(crate) fn agent_builder(limits: &ProxyLimits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // The head deadline is `ConnectionIo`'s (with a JSON 408); hyper's own, at twice the time,
    // only backs it up.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout * 2);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_STREAMS)
        .keep_alive_interval(Some(H2_KEEP_ALIVE))
        .keep_alive_timeout(H2_KEEP_ALIVE);
    builder
}

/// The service of one agent connection: each HTTP/1 request takes the framing verdict on its own
/// head from `heads` (an answer after which no head is followed closes the connection, except a
/// `CONNECT` that opened a tunnel) and leaves its id in `id_slot` for the interim
/// `100 Continue`; an HTTP/2 stream the library already reset for a protocol error is not handed
/// on ([`early_reset`]: the connection audits it); `handle` answers every other request.
pub(crate) fn agent_service<H, F>(
    heads: Arc<framing::ConnectionHeads>,
    id_slot: RequestIdSlot,
    handle: H,
) -> impl hyper::service::Service<
    http::Request<hyper::body::Incoming>,
    Response = http::Response<AnswerBody>,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<http::Response<AnswerBody>, std::convert::Infallible>>
             + Send
             + 'static,
> + Clone
+ Send
+ 'static
where
    H: Fn(http::Request<Body>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = axum::response::Response> + Send + 'static,
{
    hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
        // An HTTP/2 stream the library reset before Mint got the request (a body that broke the
        // protocol in the head's packet): the agent gets the reset, which the connection
        // audits; run no pipeline that would record a refusal the agent never gets.
        let (mut request, reset) = early_reset(request);
        let ticket = matches!(
            request.version(),
            http::Version::HTTP_10 | http::Version::HTTP_11
        )
        .then(|| {
            let (framing, last) = heads.take_for(request.method(), request.headers().len());
            request.extensions_mut().insert(framing);
            request.extensions_mut().insert(id_slot.clone());
            (Arc::clone(&heads), last)
        });
        let connect = request.method() == http::Method::CONNECT;
        // Boxed: the pipeline's future is about 9 KiB, and the future returned here is moved
        // (copied whole) into the connection's slot, after its own captures were moved into it.
        let answer = (!reset).then(|| Box::pin(handle(request)));
        async move {
            let Some(answer) = answer else {
                return Ok(http::Response::new(AnswerBody::new(Body::empty(), None)));
            };
            let mut response = answer.await;
            let heads = ticket.map(|(heads, last)| {
                heads.responded();
                // A tunnel or a WebSocket opened: hyper hands the connection over, nothing is
                // read after it (and `Connection: close` would refuse the upgrade).
                let tunnel = (connect && response.status().is_success())
                    || response.status() == http::StatusCode::SWITCHING_PROTOCOLS;
                if last && !tunnel {
                    // No later request of this connection is followed for its framing: hyper
                    // reads none after this answer.
                    response.headers_mut().insert(
                        http::header::CONNECTION,
                        http::HeaderValue::from_static("close"),
                    );
                }
                heads
            });
            Ok::<_, std::convert::Infallible>(response.map(|body| AnswerBody::new(body, heads)))
        }
    })
}

/// Binds, serves until Ctrl-C or SIGTERM, and returns once the audit log is synced. Writes
/// `listening on http://ADDR` to `out` once the socket is bound (tests read the port from it).
/// With `operator_socket`, operators decide on held requests there (removed at exit).
pub fn serve_blocking(
    listen: &str,
    operator_socket: Option<&std::path::Path>,
    state_loader: impl FnOnce() -> Result<(AppState, Reloader), ServeError>,
    out: &mut dyn io::Write,
) -> Result<(), ServeError> {
    // Loaded before the runtime starts: the keyring's Secret Service client runs a runtime of
    // its own, which cannot start inside another.
    let (state, reloader) = state_loader()?;
    fd_limit::raise_and_check(state.limits().max_connections);
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
        let operators = match operator_socket.map(OperatorSocket::bind) {
            Some(Ok(socket)) => {
                tracing::info!(socket = %socket.path().display(), "Approvals are decided on this socket (`mint approvals`)");
                Some(tokio::spawn(socket.serve(Arc::clone(state.approvals()))))
            }
            // Another broker of this home holds the socket: this one serves, but nobody can
            // decide on what it holds, so its held requests time out (refused, nothing sent).
            Some(Err(error @ SocketError::InUse(_))) => {
                tracing::warn!(error = %error, "No approvals socket for this broker: requests its approve rules hold will time out");
                None
            }
            Some(Err(error)) => return Err(error.into()),
            None => None,
        };
        tracing::info!(listen = %addr, "Mint is serving");
        if !crate::config::listen::is_loopback(addr) {
            tracing::warn!(
                listen = %addr,
                "Listening on an address that is not loopback: {}; {}",
                crate::config::listen::NOT_LOOPBACK_RISK,
                crate::config::listen::NOT_LOOPBACK_FIX
            );
        }
        let _ = writeln!(out, "listening on http://{addr}");
        let _ = out.flush();
        let served = run(listener, state, Some(reloader), shutdown_signal())
            .await
            .map_err(ServeError::Runtime);
        if let Some(operators) = operators {
            operators.abort();
            // The socket's file goes with the task.
            let _ = operators.await;
        }
        served
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
