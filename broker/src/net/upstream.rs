//! Connections to upstreams: Mint resolves the host itself, checks every address, connects to a
//! checked one, and speaks TLS with SNI and certificate verification for the host name.
//!
//! Runs after the decision record is written and the secrets are substituted; it never decides
//! access beyond the address check of [`crate::net::address`]. The proxy sends through an
//! [`UpstreamClient`]: two pooled hyper clients (keep-alive, HTTP/1.1 or HTTP/2 by ALPN), one for
//! requests whose deciding rule allows private addresses and one for the rest, so a connection
//! opened under `allow_private` can never be reused by a request that does not have it. The pool
//! key is the URI's scheme and authority: the canonical host, so a pooled connection always goes
//! to an address that was checked for that host under the same rules.
//!
//! No retries of anything sent: connection attempts try the checked addresses in order, once
//! each, and a request is never sent twice. hyper's `retry_canceled_requests` stays on: it only
//! re-dispatches a request that was queued on a pooled connection the upstream closed before a
//! single byte of the request was written (otherwise every keep-alive race would surface as a
//! spurious `unknown`). Over HTTP/2 the client keeps hyper's guards against a hostile upstream:
//! push refused (`SETTINGS_ENABLE_PUSH` 0), the header list bounded
//! ([`MAX_UPSTREAM_HEADER_LIST`]), SETTINGS and PING acknowledged one at a time (a flood is read
//! no faster than it is answered). Every socket gets
//! `TCP_NODELAY`. Plain `http` is only ever used toward loopback targets (the target was refused
//! earlier otherwise, and the address check refuses a loopback name resolving elsewhere).

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Uri;
use http_body_util::Full;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use mint_policy::host::Host;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::net::address::{AddressError, AddressRules, check_all};

/// How long an idle pooled connection is kept.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The most idle connections kept per upstream.
pub const POOL_MAX_IDLE_PER_HOST: usize = 256;

/// The largest HTTP/2 header list (HPACK-decoded) Mint accepts in an upstream's answer, and
/// announces in `SETTINGS_MAX_HEADER_LIST_SIZE`. hyper's client default, pinned here so that an
/// upgrade cannot raise it unseen: a larger head breaks the exchange (`502 upstream_unknown`), and
/// h2 counts CONTINUATION frames against it, so a header list that never ends is cut off early.
pub const MAX_UPSTREAM_HEADER_LIST: u32 = 16 * 1024;

/// The request body type sent upstream: the whole (size-limited) body.
pub type UpstreamBody = Full<Bytes>;

/// The pooled clients the proxy sends through.
#[derive(Clone, Debug)]
pub struct UpstreamClient {
    public_only: Client<Connector, UpstreamBody>,
    private_ok: Client<Connector, UpstreamBody>,
    pins: Arc<ResolvePins>,
    /// The TLS configuration of WebSocket connections: HTTP/1.1 only by ALPN, since the
    /// opening handshake is an HTTP/1.1 `Upgrade`.
    http1_tls: Arc<ClientConfig>,
    connect_timeout: Duration,
}

/// Why a WebSocket opening handshake got no answer from the upstream.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpgradeError {
    /// No connection was made: nothing was sent.
    #[error(transparent)]
    Connect(ConnectError),
    /// The connection broke once the request may have been sent.
    #[error("the upstream connection broke before the answer's head")]
    Broken(#[source] hyper::Error),
}

/// The operator's `--resolve HOST:PORT:ADDRESS[,ADDRESS...]` pins (curl's syntax): requests to
/// that host and port connect to those addresses, without DNS and without the address checks
/// (the operator chose them: a pin may be loopback or private). Used for that host and port
/// only.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolvePins {
    pins: Vec<(Host, u16, Vec<IpAddr>)>,
}

/// A `--resolve` value that is not `HOST:PORT:ADDRESS[,ADDRESS...]`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid --resolve `{value}`: {problem} (expected HOST:PORT:ADDRESS, as curl takes it)")]
pub struct ResolvePinError {
    value: String,
    problem: &'static str,
}

// === impl ResolvePins ===

impl ResolvePins {
    /// Adds the pin `value`; a later pin of the same host and port replaces an earlier one.
    pub fn add(&mut self, value: &str) -> Result<(), ResolvePinError> {
        let error = |problem| ResolvePinError {
            value: value.to_owned(),
            problem,
        };
        let (host, rest) = match value.strip_prefix('[') {
            Some(bracketed) => {
                let (host, rest) = bracketed.split_once("]:").ok_or(error("unclosed `[`"))?;
                (host, rest)
            }
            None => value.split_once(':').ok_or(error("no port"))?,
        };
        let (port, addresses) = rest.split_once(':').ok_or(error("no address"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| error("the port is not a number"))?;
        let host = Host::parse_request(host).map_err(|_| error("the host is not valid"))?;
        let addresses = addresses
            .split(',')
            .map(|address| {
                let bare = address
                    .strip_prefix('[')
                    .and_then(|a| a.strip_suffix(']'))
                    .unwrap_or(address);
                bare.parse::<IpAddr>()
                    .map_err(|_| error("an address is not an IP address"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.pins.retain(|(h, p, _)| !(h == &host && *p == port));
        self.pins.push((host, port, addresses));
        Ok(())
    }

    /// The pinned addresses of `host:port`.
    pub fn lookup(&self, host: &Host, port: u16) -> Option<&[IpAddr]> {
        self.pins
            .iter()
            .find(|(h, p, _)| h == host && *p == port)
            .map(|(_, _, addresses)| addresses.as_slice())
    }

    /// Each pin as `HOST:PORT:ADDRESS,...`, for the start-up log.
    pub fn describe(&self) -> Vec<String> {
        self.pins
            .iter()
            .map(|(host, port, addresses)| {
                let list: Vec<String> = addresses.iter().map(IpAddr::to_string).collect();
                format!("{}:{port}:{}", host.as_text(), list.join(","))
            })
            .collect()
    }

    /// Whether there is no pin.
    pub fn is_empty(&self) -> bool {
        self.pins.is_empty()
    }
}

/// Why no connection was made. Nothing was sent when a connector fails.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URI has no host, or a host that is not canonical.
    #[error("the upstream URI has no valid host")]
    InvalidUri,
    /// DNS resolution failed.
    #[error("cannot resolve the upstream host ({kind})")]
    Resolve {
        /// The resolver's error kind.
        kind: io::ErrorKind,
    },
    /// An address the host resolved to is refused.
    #[error(transparent)]
    Refused(#[from] AddressError),
    /// No checked address accepted a TCP connection.
    #[error("cannot connect to the upstream ({kind})")]
    Connect {
        /// The last connection error's kind.
        kind: io::ErrorKind,
    },
    /// The TLS handshake failed (certificate, protocol, or the peer went away).
    #[error("TLS handshake with the upstream failed: {reason}")]
    Tls {
        /// rustls's description; names certificate problems, never request data.
        reason: String,
    },
    /// Resolution, connection and handshake together took longer than the connect timeout.
    #[error("connecting to the upstream timed out")]
    Timeout,
}

/// The connector of one [`Client`]: resolve, check, connect, handshake.
#[derive(Clone)]
pub struct Connector {
    tls: TlsConnector,
    allow_private: bool,
    connect_timeout: Duration,
    pins: Arc<ResolvePins>,
}

/// A connection to an upstream, plain (loopback only) or TLS.
#[derive(Debug)]
pub enum UpstreamIo {
    /// Plain TCP.
    Plain(TokioIo<TcpStream>),
    /// TLS over TCP.
    Tls(Box<TokioIo<TlsStream<TcpStream>>>),
}

// === impl UpstreamClient ===

impl UpstreamClient {
    /// Clients that verify certificates with `tls` and give up connecting after
    /// `connect_timeout`.
    pub fn new(tls: Arc<ClientConfig>, connect_timeout: Duration) -> UpstreamClient {
        UpstreamClient::with_pins(tls, connect_timeout, ResolvePins::default())
    }

    /// [`UpstreamClient::new`], connecting the hosts of `pins` to their pinned addresses.
    pub fn with_pins(
        tls: Arc<ClientConfig>,
        connect_timeout: Duration,
        pins: ResolvePins,
    ) -> UpstreamClient {
        let pins = Arc::new(pins);
        let build = |allow_private| {
            let connector = Connector {
                tls: TlsConnector::from(Arc::clone(&tls)),
                allow_private,
                connect_timeout,
                pins: Arc::clone(&pins),
            };
            Client::builder(TokioExecutor::new())
                .retry_canceled_requests(true)
                .http2_max_header_list_size(MAX_UPSTREAM_HEADER_LIST)
                .pool_idle_timeout(POOL_IDLE_TIMEOUT)
                .pool_max_idle_per_host(POOL_MAX_IDLE_PER_HOST)
                .pool_timer(TokioTimer::new())
                .timer(TokioTimer::new())
                .build(connector)
        };
        let mut http1 = (*tls).clone();
        http1.alpn_protocols = vec![b"http/1.1".to_vec()];
        UpstreamClient {
            public_only: build(false),
            private_ok: build(true),
            pins,
            http1_tls: Arc::new(http1),
            connect_timeout,
        }
    }

    /// Sends a WebSocket opening handshake (`request`: absolute URI, canonical authority) on a
    /// connection of its own, never pooled, HTTP/1.1 (by ALPN), with the same address checks
    /// and TLS verification as [`UpstreamClient::send`]; returns the answer's head. A `101`
    /// answer's connection is taken over with `hyper::upgrade::on`.
    pub async fn open_upgrade(
        &self,
        mut request: http::Request<UpstreamBody>,
        allow_private: bool,
    ) -> Result<http::Response<hyper::body::Incoming>, UpgradeError> {
        let connector = Connector {
            tls: TlsConnector::from(Arc::clone(&self.http1_tls)),
            allow_private,
            connect_timeout: self.connect_timeout,
            pins: Arc::clone(&self.pins),
        };
        let uri = request.uri().clone();
        let io = connector
            .connect(uri.clone())
            .await
            .map_err(UpgradeError::Connect)?;
        // As the pooled client writes it: origin-form, and `Host` without a default port.
        let default_port = if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        };
        let host = match (uri.host(), uri.port_u16()) {
            (Some(host), Some(port)) if port != default_port => format!("{host}:{port}"),
            (Some(host), _) => host.to_owned(),
            (None, _) => return Err(UpgradeError::Connect(ConnectError::InvalidUri)),
        };
        let host = http::HeaderValue::from_str(&host)
            .map_err(|_| UpgradeError::Connect(ConnectError::InvalidUri))?;
        request.headers_mut().insert(http::header::HOST, host);
        let origin_form = uri
            .path_and_query()
            .map_or("/", http::uri::PathAndQuery::as_str)
            .parse::<Uri>()
            .map_err(|_| UpgradeError::Connect(ConnectError::InvalidUri))?;
        *request.uri_mut() = origin_form;
        let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
            .handshake(io)
            .await
            .map_err(UpgradeError::Broken)?;
        tokio::spawn(async move {
            if let Err(error) = connection.with_upgrades().await {
                tracing::debug!(error = %error, "WebSocket upstream connection ended with an error");
            }
        });
        sender
            .send_request(request)
            .await
            .map_err(UpgradeError::Broken)
    }

    /// Resolves `host:port` (pins first) and checks its addresses as a request with
    /// `allow_private` would be checked, without connecting: what a `CONNECT` is refused on
    /// before its tunnel opens.
    pub async fn check_target(
        &self,
        host: &Host,
        port: u16,
        allow_private: bool,
        timeout: Duration,
    ) -> Result<(), ConnectError> {
        if self.pins.lookup(host, port).is_some() {
            return Ok(());
        }
        let addresses = tokio::time::timeout(timeout, resolve(host, port))
            .await
            .map_err(|_| ConnectError::Timeout)??;
        let ips: Vec<IpAddr> = addresses.iter().map(SocketAddr::ip).collect();
        check_all(
            &ips,
            AddressRules {
                loopback_target: host.is_loopback(),
                allow_private,
            },
        )?;
        Ok(())
    }

    /// Sends `request` (absolute URI, canonical authority) and returns the response head with
    /// its streaming body.
    pub async fn send(
        &self,
        request: http::Request<UpstreamBody>,
        allow_private: bool,
    ) -> Result<http::Response<hyper::body::Incoming>, hyper_util::client::legacy::Error> {
        let client = if allow_private {
            &self.private_ok
        } else {
            &self.public_only
        };
        client.request(request).await
    }
}

/// Finds the [`ConnectError`] behind a client error, when the connector failed.
pub fn connect_error(error: &hyper_util::client::legacy::Error) -> Option<&ConnectError> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    while let Some(current) = source {
        if let Some(found) = current.downcast_ref::<ConnectError>() {
            return Some(found);
        }
        source = current.source();
    }
    None
}

// === impl Connector ===

impl Connector {
    async fn connect(self, uri: Uri) -> Result<UpstreamIo, ConnectError> {
        let timeout = self.connect_timeout;
        tokio::time::timeout(timeout, self.connect_now(uri))
            .await
            .map_err(|_| ConnectError::Timeout)?
    }

    async fn connect_now(self, uri: Uri) -> Result<UpstreamIo, ConnectError> {
        let text = uri.host().ok_or(ConnectError::InvalidUri)?;
        let bare = text
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .unwrap_or(text);
        let host = Host::parse_request(bare).map_err(|_| ConnectError::InvalidUri)?;
        // The proxy built this URI from the canonical target; anything else is not ours.
        if host.as_text() != bare {
            return Err(ConnectError::InvalidUri);
        }
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") if host.is_loopback() => false,
            _ => return Err(ConnectError::InvalidUri),
        };
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let addresses = match self.pins.lookup(&host, port) {
            // The operator pinned this host and port: its addresses, unchecked.
            Some(pinned) => pinned.iter().map(|ip| SocketAddr::new(*ip, port)).collect(),
            None => {
                let addresses = resolve(&host, port).await?;
                let ips: Vec<IpAddr> = addresses.iter().map(SocketAddr::ip).collect();
                check_all(
                    &ips,
                    AddressRules {
                        loopback_target: host.is_loopback(),
                        allow_private: self.allow_private,
                    },
                )?;
                addresses
            }
        };
        let tcp = connect_first(&addresses).await?;
        if !tls {
            return Ok(UpstreamIo::Plain(TokioIo::new(tcp)));
        }
        let name = match host.ip() {
            Some(ip) => ServerName::IpAddress(ip.into()),
            None => ServerName::try_from(host.as_text()).map_err(|_| ConnectError::InvalidUri)?,
        };
        let stream = self
            .tls
            .connect(name, tcp)
            .await
            .map_err(|error| ConnectError::Tls {
                reason: tls_reason(&error),
            })?;
        Ok(UpstreamIo::Tls(Box::new(TokioIo::new(stream))))
    }
}

impl tower::Service<Uri> for Connector {
    type Response = UpstreamIo;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<UpstreamIo, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        Box::pin(self.clone().connect(uri))
    }
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("allow_private", &self.allow_private)
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

/// The addresses of `host`: itself for an IP literal, else the system resolver's answer.
async fn resolve(host: &Host, port: u16) -> Result<Vec<SocketAddr>, ConnectError> {
    if let Some(ip) = host.ip() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let name = host.as_text();
    let found = tokio::net::lookup_host((name.as_str(), port))
        .await
        .map_err(|e| ConnectError::Resolve { kind: e.kind() })?;
    let mut addresses: Vec<SocketAddr> = Vec::new();
    for address in found {
        // An IPv4-mapped answer is connected to as the IPv4 address it is (and was checked so).
        let address = match address.ip() {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => SocketAddr::new(IpAddr::V4(v4), port),
                None => address,
            },
            IpAddr::V4(_) => address,
        };
        if !addresses.contains(&address) {
            addresses.push(address);
        }
    }
    Ok(addresses)
}

/// Connects to the first address that accepts, in the resolver's order.
async fn connect_first(addresses: &[SocketAddr]) -> Result<TcpStream, ConnectError> {
    let mut last = io::ErrorKind::NotFound;
    for address in addresses {
        match TcpStream::connect(address).await {
            Ok(stream) => {
                // Small requests and answers must not wait for Nagle's algorithm.
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(error) => last = error.kind(),
        }
    }
    Err(ConnectError::Connect { kind: last })
}

/// A short description of a TLS failure from a fixed vocabulary. Never rustls's own text: it
/// quotes the certificate's names, which the upstream chose (a name can carry a secret it saw).
fn tls_reason(error: &io::Error) -> String {
    use rustls::CertificateError as Cert;
    let reason = match error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(cert)) => match cert {
            Cert::NotValidForName | Cert::NotValidForNameContext { .. } => {
                "the certificate is not valid for the host name"
            }
            Cert::UnknownIssuer => "the certificate's issuer is not trusted",
            Cert::Expired | Cert::ExpiredContext { .. } => "the certificate has expired",
            Cert::NotValidYet | Cert::NotValidYetContext { .. } => {
                "the certificate is not valid yet"
            }
            Cert::Revoked => "the certificate is revoked",
            _ => "the certificate is invalid",
        },
        Some(rustls::Error::AlertReceived(_)) => "the upstream sent a TLS alert",
        Some(rustls::Error::NoApplicationProtocol) => "no common application protocol",
        Some(_) => "the TLS handshake failed",
        None => "the connection closed during the TLS handshake",
    };
    reason.to_owned()
}

// === impl UpstreamIo ===

impl UpstreamIo {
    fn negotiated_h2(&self) -> bool {
        match self {
            UpstreamIo::Plain(_) => false,
            UpstreamIo::Tls(io) => io.inner().get_ref().1.alpn_protocol() == Some(b"h2"),
        }
    }
}

impl Connection for UpstreamIo {
    fn connected(&self) -> Connected {
        let connected = Connected::new();
        if self.negotiated_h2() {
            connected.negotiated_h2()
        } else {
            connected
        }
    }
}

impl Read for UpstreamIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_read(cx, buf),
            UpstreamIo::Tls(io) => Pin::new(io.as_mut()).poll_read(cx, buf),
        }
    }
}

impl Write for UpstreamIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_write(cx, buf),
            UpstreamIo::Tls(io) => Pin::new(io.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_flush(cx),
            UpstreamIo::Tls(io) => Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_shutdown(cx),
            UpstreamIo::Tls(io) => Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            UpstreamIo::Plain(io) => io.is_write_vectored(),
            UpstreamIo::Tls(io) => io.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            UpstreamIo::Tls(io) => Pin::new(io.as_mut()).poll_write_vectored(cx, bufs),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn resolve_pins_take_curls_syntax() {
        let mut pins = ResolvePins::default();
        pins.add("API.Example.test:443:127.0.0.1").unwrap();
        pins.add("v6.example.test:8443:[::1],127.0.0.2").unwrap();
        pins.add("[::1]:443:127.0.0.1").unwrap();
        let host = Host::parse_request("api.example.test").unwrap();
        assert_eq!(
            pins.lookup(&host, 443),
            Some(&["127.0.0.1".parse::<IpAddr>().unwrap()][..])
        );
        assert_eq!(pins.lookup(&host, 8443), None, "that port only");
        let v6 = Host::parse_request("v6.example.test").unwrap();
        assert_eq!(pins.lookup(&v6, 8443).unwrap().len(), 2);
        assert_eq!(
            pins.describe(),
            [
                "api.example.test:443:127.0.0.1",
                "v6.example.test:8443:::1,127.0.0.2",
                "::1:443:127.0.0.1"
            ]
        );
        pins.add("api.example.test:443:127.0.0.3").unwrap();
        assert_eq!(pins.lookup(&host, 443).unwrap().len(), 1, "replaced");
        for bad in [
            "api.example.test",
            "api.example.test:443",
            "api.example.test:x:127.0.0.1",
            "api.example.test:443:nowhere",
            "bad host:443:127.0.0.1",
            "[::1:443:127.0.0.1",
        ] {
            assert!(pins.add(bad).is_err(), "{bad}");
        }
    }
}
