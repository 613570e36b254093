//! An intercepted `CONNECT` tunnel, once `proxy::connect` has answered `200`: Mint's TLS server
//! end with a leaf for the tunnel's host, then the agent's requests inside it, each handed to
//! the proxy's pipeline (`proxy::intercepted`) through the same connection machinery as the
//! listener's (`ConnectionIo`'s framing checks and head deadline, hyper's HTTP/1.1 and HTTP/2).
//!
//! The handshake must be done within the header read timeout. What ends a tunnel before any
//! request, each audited with the tunnel's agent and target: no ClientHello in time
//! (`tls_handshake_timeout`), bytes that are not TLS (`not_tls`), an SNI that is not the
//! `CONNECT` host, case and one trailing dot aside (`sni_mismatch`: the handshake fails with an
//! `access_denied` alert; an IP-address tunnel may send no SNI), and a client that refuses the
//! leaf or breaks the handshake (`tls_handshake_failed`). Nothing is ever relayed unterminated.
//!
//! When a tunnel closes, however it ends, its `CONNECT` gets a second `outcome` record, reason
//! `tunnel_closed`: how long it lasted, the bytes from and to the agent on its connection (TLS
//! records, the handshake included), how many requests it carried and how it ended
//! (`client_closed`, `shutdown`, `timeout` or `error`; a tunnel that carried a WebSocket ends as
//! the socket did: `upstream_closed`, `lifetime`, `capability_revoked`... as well).
//!
//! At shutdown a tunnel drains like any agent connection, within the same grace period: the
//! request in flight inside it finishes (and its outcome is audited), then the tunnel closes; an
//! idle tunnel, or one still waiting for its handshake, closes at once.

use std::future::Future;
use std::io::ErrorKind;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use axum::body::Body;
use http::StatusCode;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use mint_policy::audit::TunnelEnd;
use rustls::ServerConfig;
use rustls::server::{Acceptor, ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::LazyConfigAcceptor;

use super::connection::ConnectionIo;
use super::{ConnectionSlot, Drain, agent_builder, agent_service};
use crate::net::ca::LeafCache;
use crate::proxy::connect::{Tunnel, TunnelSummary, audit_tunnel_closed, audit_tunnel_refusal};
use crate::proxy::websocket::Relays;
use crate::proxy::{self, AppState};

/// Serves the tunnel `tunnel` once hyper hands over its connection; holds `slot` (the agent
/// connection's `--max-connections` slot, with the server's [`Drain`]) until the tunnel ends,
/// then audits its summary (`tunnel_closed`).
pub(crate) async fn serve(
    state: AppState,
    tunnel: Arc<Tunnel>,
    leaves: Arc<LeafCache>,
    on_upgrade: OnUpgrade,
    slot: Option<ConnectionSlot>,
) {
    let mut drain = slot.as_ref().map(|slot| slot.drain.clone());
    let counts = Arc::new(Counts::default());
    let ended = run(
        &state,
        &tunnel,
        &leaves,
        on_upgrade,
        (&mut drain, slot.as_ref()),
        &counts,
    )
    .await;
    let summary = TunnelSummary {
        from_agent: counts.from_agent.load(Ordering::Acquire),
        to_agent: counts.to_agent.load(Ordering::Acquire),
        requests: counts.requests.load(Ordering::Acquire),
        ended,
    };
    tracing::debug!(connect.id = %tunnel.connect_id, ended = %ended, requests = summary.requests, "Tunnel closed");
    audit_tunnel_closed(&state, &tunnel, summary);
    // The drain and the slot go last: the record is queued before the shutdown's sync.
    drop(drain);
    drop(slot);
}

/// The tunnel's life after the `200`: the handshake, then its requests; returns how it ended.
async fn run(
    state: &AppState,
    tunnel: &Arc<Tunnel>,
    leaves: &LeafCache,
    on_upgrade: OnUpgrade,
    (drain, slot): (&mut Option<Drain>, Option<&ConnectionSlot>),
    counts: &Arc<Counts>,
) -> TunnelEnd {
    let upgraded = match until_drain(drain, on_upgrade).await {
        Some(Ok(upgraded)) => upgraded,
        Some(Err(error)) => {
            tracing::debug!(request.id = %tunnel.connect_id, error = %error, "Tunnel not taken over");
            return TunnelEnd::ClientClosed;
        }
        None => return TunnelEnd::Shutdown,
    };
    let limits = *state.limits();
    let deadline = tokio::time::Instant::from_std(Instant::now() + limits.header_read_timeout);
    let refuse = |reason: &'static str, status: StatusCode, ended: TunnelEnd| {
        let id = audit_tunnel_refusal(state, tunnel, reason, status);
        tracing::info!(request.id = %id, connect.id = %tunnel.connect_id, reason, "Tunnel closed before any request");
        ended
    };
    let (timeout, error) = (TunnelEnd::Timeout, TunnelEnd::Error);

    let io = Counted {
        inner: TokioIo::new(upgraded),
        counts: Arc::clone(counts),
    };
    let accept = LazyConfigAcceptor::new(Acceptor::default(), io);
    let start = match until_drain(drain, tokio::time::timeout_at(deadline, accept)).await {
        None => return TunnelEnd::Shutdown,
        Some(Err(_)) => {
            return refuse(
                "tls_handshake_timeout",
                StatusCode::REQUEST_TIMEOUT,
                timeout,
            );
        }
        Some(Ok(Err(_))) => return refuse("not_tls", StatusCode::BAD_REQUEST, error),
        Some(Ok(Ok(start))) => start,
    };
    let host = tunnel.host().as_text();
    if !sni_names(start.client_hello(), tunnel.host().ip().is_some(), &host) {
        // The handshake goes on only to fail with an alert: no certificate is offered.
        if let Some(config) = refusing_config() {
            let _ = tokio::time::timeout_at(deadline, start.into_stream(config)).await;
        }
        return refuse("sni_mismatch", StatusCode::MISDIRECTED_REQUEST, error);
    }
    let config = match leaves.server_config(&host, SystemTime::now()) {
        Ok(config) => config,
        Err(problem) => {
            tracing::error!(connect.id = %tunnel.connect_id, error = %problem, "No leaf for the tunnel");
            return refuse("leaf_unavailable", StatusCode::INTERNAL_SERVER_ERROR, error);
        }
    };
    let handshake = tokio::time::timeout_at(deadline, start.into_stream(config));
    let tls = match until_drain(drain, handshake).await {
        None => return TunnelEnd::Shutdown,
        Some(Err(_)) => {
            return refuse(
                "tls_handshake_timeout",
                StatusCode::REQUEST_TIMEOUT,
                timeout,
            );
        }
        Some(Ok(Err(_))) => {
            return refuse("tls_handshake_failed", StatusCode::BAD_REQUEST, error);
        }
        Some(Ok(Ok(tls))) => tls,
    };

    let io = ConnectionIo::new(tls, state);
    let expired = io.expired();
    let heads = io.heads();
    let id_slot = io.id_slot();
    // A WebSocket opened inside the tunnel outlives hyper's connection (hyper hands it over at
    // the upgrade): it holds the connection's slot and a `RelayHold`, and the tunnel waits for
    // every hold before its `tunnel_closed` record, which says how the socket ended.
    let relays = Relays::new();
    let hold = relays.hold();
    let service = {
        let (state, tunnel, counts) = (state.clone(), Arc::clone(tunnel), Arc::clone(counts));
        let slot = slot.cloned();
        agent_service(heads, id_slot, move |mut request: http::Request<Body>| {
            if let Some(slot) = &slot {
                request.extensions_mut().insert(slot.clone());
            }
            request.extensions_mut().insert(hold.clone());
            counts.requests.fetch_add(1, Ordering::AcqRel);
            let (state, tunnel) = (state.clone(), Arc::clone(&tunnel));
            async move { proxy::intercepted(&state, &tunnel, request).await }
        })
    };
    let (served, drained) = {
        let builder = agent_builder(&limits);
        let connection = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
        tokio::pin!(connection);
        match until_drain(drain, connection.as_mut()).await {
            Some(served) => (served, false),
            None => {
                // As for the listener's connections: the request in flight finishes, an idle
                // tunnel closes (HTTP/2: GOAWAY, then the open streams finish).
                tracing::debug!(connect.id = %tunnel.connect_id, "Shutting down: draining the tunnel");
                connection.as_mut().graceful_shutdown();
                (connection.await, true)
            }
        }
    };
    if let Err(problem) = &served {
        tracing::debug!(connect.id = %tunnel.connect_id, error = %problem, "Tunnel ended with an error");
    }
    // The connection (and its service's hold) is gone; a WebSocket still open in the tunnel
    // ends on its own, at shutdown too (it watches the drain), and the tunnel ends as it did:
    // hyper's connection finished cleanly at the upgrade, whatever ended the socket later.
    let socket = relays.closed().await;
    match (served, socket) {
        _ if drained => TunnelEnd::Shutdown,
        _ if expired.load(Ordering::Acquire) => TunnelEnd::Timeout,
        (_, Some(ended)) => ended,
        (Ok(()), None) => TunnelEnd::ClientClosed,
        (Err(problem), None) => ending_of(problem.as_ref()),
    }
}

/// How a tunnel whose connection failed with `error` ended: a deadline of hyper's (an idle
/// keep-alive), the agent going away (a reset, an end of stream without TLS `close_notify`, a
/// request cut short), or an error.
fn ending_of(error: &(dyn std::error::Error + 'static)) -> TunnelEnd {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if let Some(hyper) = error.downcast_ref::<hyper::Error>() {
            if hyper.is_timeout() {
                return TunnelEnd::Timeout;
            }
            if hyper.is_incomplete_message() || hyper.is_canceled() {
                return TunnelEnd::ClientClosed;
            }
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                ErrorKind::UnexpectedEof
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::BrokenPipe
            )
        {
            return TunnelEnd::ClientClosed;
        }
        cause = error.source();
    }
    TunnelEnd::Error
}

/// What a tunnel carried so far: bytes each way on the agent's connection (TLS records) and
/// requests handed to the pipeline.
#[derive(Debug, Default)]
struct Counts {
    from_agent: AtomicU64,
    to_agent: AtomicU64,
    requests: AtomicU64,
}

/// The agent's connection after the `200`, counting the bytes each way into [`Counts`].
#[derive(Debug)]
struct Counted<S> {
    inner: S,
    counts: Arc<Counts>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        let n = buf.filled().len().saturating_sub(before) as u64;
        this.counts.from_agent.fetch_add(n, Ordering::AcqRel);
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            this.counts.to_agent.fetch_add(n as u64, Ordering::AcqRel);
        }
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = written {
            this.counts.to_agent.fetch_add(n as u64, Ordering::AcqRel);
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// `work`, unless the server's shutdown starts first (`None`). Without a drain (a tunnel not
/// opened through the accept loop), just `work`.
async fn until_drain<F: Future>(drain: &mut Option<Drain>, work: F) -> Option<F::Output> {
    let Some(drain) = drain else {
        return Some(work.await);
    };
    tokio::select! {
        biased;
        output = work => Some(output),
        () = drain.started() => None,
    }
}

/// Whether the ClientHello's SNI names `host`: equal but for ASCII case and one trailing dot;
/// none at all only for an IP-address tunnel.
pub(crate) fn sni_names(hello: ClientHello<'_>, ip_tunnel: bool, host: &str) -> bool {
    match hello.server_name() {
        None => ip_tunnel,
        Some(name) => {
            let name = name.strip_suffix('.').unwrap_or(name);
            name.eq_ignore_ascii_case(host)
        }
    }
}

/// A configuration that offers no certificate: rustls ends the handshake with an
/// `access_denied` alert. `None` if it cannot be built (the connection is then dropped).
fn refusing_config() -> Option<Arc<ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?;
    Some(Arc::new(
        builder
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(NoCert)),
    ))
}

/// Offers no certificate.
#[derive(Debug)]
struct NoCert;

impl ResolvesServerCert for NoCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        None
    }
}
