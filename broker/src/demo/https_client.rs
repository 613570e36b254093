//! The demo's unmodified HTTPS client: what curl does with `HTTPS_PROXY` and `--cacert`. It
//! opens a tunnel with `CONNECT host:port` to the broker (the capability as the proxy password),
//! speaks TLS inside it to the host's real name trusting Mint's CA alone, and sends one request
//! over HTTP/1.1. Nothing in it knows about Mint's URL forms: the broker intercepts.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{Request, response};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::DemoError;

/// The longest `CONNECT` answer head read.
const MAX_CONNECT_HEAD: usize = 8 * 1024;

/// One request through the broker at `proxy` to `https://{host}:{port}{path}`, with the
/// capability `token` as the proxy password and `ca` (Mint's CA certificate) as the only trust
/// anchor. Returns the answer's head and body.
pub(super) async fn get_through_connect(
    proxy: std::net::SocketAddr,
    user: &str,
    token: &str,
    (host, port): (&str, u16),
    ca: &Path,
    headers: &[(&str, &str)],
    path: &str,
) -> Result<(response::Parts, String), DemoError> {
    let check = |what: &str, e: &dyn std::fmt::Display| DemoError::Check(format!("{what}: {e}"));
    let work = async {
        let mut tcp = TcpStream::connect(proxy)
            .await
            .map_err(|e| check("broker unreachable", &e))?;
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{token}"));
        let head = format!(
            "CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\nProxy-Authorization: Basic {basic}\r\n\r\n"
        );
        tcp.write_all(head.as_bytes())
            .await
            .map_err(|e| check("CONNECT not sent", &e))?;
        // Byte by byte: what follows the head is the tunnel's TLS, which is not ours to read.
        let mut answer = Vec::with_capacity(64);
        while !answer.ends_with(b"\r\n\r\n") {
            if answer.len() > MAX_CONNECT_HEAD {
                return Err(DemoError::Check(
                    "the CONNECT answer is too long".to_owned(),
                ));
            }
            let byte = tcp
                .read_u8()
                .await
                .map_err(|e| check("the CONNECT answer was cut off", &e))?;
            answer.push(byte);
        }
        if !answer.starts_with(b"HTTP/1.1 200") {
            let line = String::from_utf8_lossy(&answer);
            let line = line.lines().next().unwrap_or_default();
            return Err(DemoError::Check(format!(
                "the broker refused the tunnel: {line}"
            )));
        }

        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca).map_err(|e| check("Mint's CA file", &e))? {
            let cert = cert.map_err(|e| check("Mint's CA file", &e))?;
            roots.add(cert).map_err(|e| check("Mint's CA", &e))?;
        }
        let mut config = ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let name = ServerName::try_from(host.to_owned()).map_err(|e| check("the host", &e))?;
        let tls = TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| check("TLS inside the tunnel failed", &e))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| check("HTTP inside the tunnel failed", &e))?;
        tokio::spawn(connection);

        let mut request = Request::get(path).header("host", format!("{host}:{port}"));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::new()))
            .map_err(|e| DemoError::Setup(e.to_string()))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| check("no answer inside the tunnel", &e))?;
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| check("answer cut off", &e))?
            .to_bytes();
        Ok((parts, String::from_utf8_lossy(&body).into_owned()))
    };
    tokio::time::timeout(Duration::from_secs(30), work)
        .await
        .map_err(|_| DemoError::Check("no answer through the tunnel".to_owned()))?
}
