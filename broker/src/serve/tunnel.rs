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
//! At shutdown a tunnel drains like any agent connection, within the same grace period: the
//! request in flight inside it finishes (and its outcome is audited), then the tunnel closes; an
//! idle tunnel, or one still waiting for its handshake, closes at once.

use std::future::Future;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use axum::body::Body;
use http::StatusCode;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use rustls::ServerConfig;
use rustls::server::{Acceptor, ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::LazyConfigAcceptor;

use super::connection::ConnectionIo;
use super::{ConnectionSlot, Drain, agent_builder, agent_service};
use crate::net::ca::LeafCache;
use crate::proxy::connect::{Tunnel, audit_tunnel_refusal};
use crate::proxy::{self, AppState};

/// Serves the tunnel `tunnel` once hyper hands over its connection; holds `slot` (the agent
/// connection's `--max-connections` slot, with the server's [`Drain`]) until the tunnel ends.
pub(crate) async fn serve(
    state: AppState,
    tunnel: Arc<Tunnel>,
    leaves: Arc<LeafCache>,
    on_upgrade: OnUpgrade,
    slot: Option<ConnectionSlot>,
) {
    let mut drain = slot.as_ref().map(|slot| slot.drain.clone());
    let _slot = slot;
    let upgraded = match until_drain(&mut drain, on_upgrade).await {
        Some(Ok(upgraded)) => upgraded,
        Some(Err(error)) => {
            tracing::debug!(request.id = %tunnel.connect_id, error = %error, "Tunnel not taken over");
            return;
        }
        None => return,
    };
    let limits = *state.limits();
    let deadline = tokio::time::Instant::from_std(Instant::now() + limits.header_read_timeout);
    let refuse = |reason: &'static str, status: StatusCode| {
        let id = audit_tunnel_refusal(&state, &tunnel, reason, status);
        tracing::info!(request.id = %id, connect.id = %tunnel.connect_id, reason, "Tunnel closed before any request");
    };

    let accept = LazyConfigAcceptor::new(Acceptor::default(), TokioIo::new(upgraded));
    let start = match until_drain(&mut drain, tokio::time::timeout_at(deadline, accept)).await {
        None => return,
        Some(Err(_)) => return refuse("tls_handshake_timeout", StatusCode::REQUEST_TIMEOUT),
        Some(Ok(Err(_))) => return refuse("not_tls", StatusCode::BAD_REQUEST),
        Some(Ok(Ok(start))) => start,
    };
    let host = tunnel.host().as_text();
    if !sni_names(start.client_hello(), tunnel.host().ip().is_some(), &host) {
        // The handshake goes on only to fail with an alert: no certificate is offered.
        if let Some(config) = refusing_config() {
            let _ = tokio::time::timeout_at(deadline, start.into_stream(config)).await;
        }
        return refuse("sni_mismatch", StatusCode::MISDIRECTED_REQUEST);
    }
    let config = match leaves.server_config(&host, SystemTime::now()) {
        Ok(config) => config,
        Err(error) => {
            tracing::error!(connect.id = %tunnel.connect_id, error = %error, "No leaf for the tunnel");
            return refuse("leaf_unavailable", StatusCode::INTERNAL_SERVER_ERROR);
        }
    };
    let handshake = tokio::time::timeout_at(deadline, start.into_stream(config));
    let tls = match until_drain(&mut drain, handshake).await {
        None => return,
        Some(Err(_)) => return refuse("tls_handshake_timeout", StatusCode::REQUEST_TIMEOUT),
        Some(Ok(Err(_))) => return refuse("tls_handshake_failed", StatusCode::BAD_REQUEST),
        Some(Ok(Ok(tls))) => tls,
    };

    let io = ConnectionIo::new(tls, &state);
    let heads = io.heads();
    let id_slot = io.id_slot();
    let service = {
        let (state, tunnel) = (state.clone(), Arc::clone(&tunnel));
        agent_service(heads, id_slot, move |request: http::Request<Body>| {
            let (state, tunnel) = (state.clone(), Arc::clone(&tunnel));
            async move { proxy::intercepted(&state, &tunnel, request).await }
        })
    };
    let builder = agent_builder(&limits);
    let connection = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    let served = match until_drain(&mut drain, connection.as_mut()).await {
        Some(served) => served,
        None => {
            // As for the listener's connections: the request in flight finishes, an idle
            // tunnel closes (HTTP/2: GOAWAY, then the open streams finish).
            tracing::debug!(connect.id = %tunnel.connect_id, "Shutting down: draining the tunnel");
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = served {
        tracing::debug!(connect.id = %tunnel.connect_id, error = %error, "Tunnel ended with an error");
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
fn sni_names(hello: ClientHello<'_>, ip_tunnel: bool, host: &str) -> bool {
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
